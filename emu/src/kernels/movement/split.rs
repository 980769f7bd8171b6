//! NNAPI SPLIT: the input cut into `count` equal parts along `axis`, one output each. Any
//! element type.
//!
//! Parameter words: axis (resolved, < input rank), count (>= 1, at most 1024).

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::{bad_shape, KernelError, Result, MAX_RANK};
use crate::tensor::{TensorType, View, ViewMut};

/// The largest number of outputs.
pub const MAX_SPLITS: u32 = 1024;

/// Splits along one axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// The axis (non-negative).
    pub axis: u32,
    /// The number of outputs.
    pub count: u32,
}

impl Kernel for Split {
    fn name(&self) -> &'static str {
        "SPLIT"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let axis = w.u32("axis")?;
        if axis as usize >= MAX_RANK {
            return Err(w.err(format!("axis {axis} out of range")));
        }
        let count = w.nonzero("count")?;
        if count > MAX_SPLITS {
            return Err(w.err(format!("count {count} exceeds {MAX_SPLITS}")));
        }
        Ok(Split { axis, count })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([self.axis, self.count]);
    }

    fn output_count(&self) -> usize {
        self.count as usize
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let s = &inputs[0].shape;
        let a = self.axis as usize;
        let n = self.count as usize;
        match s.get(a) {
            Some(&d) if n > 0 && d % n == 0 => {
                let mut o = s.clone();
                o[a] = d / n;
                Ok(vec![o; n])
            }
            _ => Err(bad_shape(
                self.name(),
                format!("axis {a} of {s:?} not divisible into {n} parts"),
            )),
        }
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        outputs
            .iter()
            .try_for_each(|o| same_storage(self.name(), inputs[0], o))
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let es = x.ty.dtype.size() as usize;
        let shape = x.shape();
        let a = self.axis as usize;
        let outer: usize = shape[..a].iter().product();
        let part = shape[a] / (self.count as usize).max(1);
        let inner: usize = shape[a + 1..].iter().product::<usize>() * es;
        let chunk = part * inner;
        for o in 0..outer {
            for (k, out) in outputs.iter_mut().enumerate() {
                let from = (o * shape[a] + k * part) * inner;
                let src = x
                    .bytes
                    .get(from..from + chunk)
                    .ok_or(KernelError::TooLarge)?;
                let dst = out
                    .bytes
                    .get_mut(o * chunk..(o + 1) * chunk)
                    .ok_or(KernelError::TooLarge)?;
                dst.copy_from_slice(src);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    #[test]
    fn splits_columns() {
        let ty = TensorType::new(DType::U8, &[2, 4]);
        let k = Split { axis: 1, count: 2 };
        let shapes = k.output_shapes(&[&ty]).unwrap();
        assert_eq!(shapes, vec![vec![2, 2], vec![2, 2]]);
        let oty = TensorType::new(DType::U8, &shapes[0]);
        let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
        k.run(
            &[View {
                ty: &ty,
                bytes: &[1, 2, 3, 4, 5, 6, 7, 8],
            }],
            &mut [
                ViewMut {
                    ty: &oty,
                    bytes: &mut a,
                },
                ViewMut {
                    ty: &oty,
                    bytes: &mut b,
                },
            ],
        )
        .unwrap();
        assert_eq!((a, b), ([1, 2, 5, 6], [3, 4, 7, 8]));
    }
}
