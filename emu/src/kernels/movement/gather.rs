//! NNAPI GATHER: slices of the input along `axis` picked by an int32 index tensor (data,
//! read at run time). Output shape: input dims before `axis`, the index shape, input dims
//! after `axis`. Any element type; an index out of range is a kernel error.
//!
//! Parameter words: axis (resolved, < input rank). Inputs: data, indices (I32).

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::{bad_shape, KernelError, Result, MAX_RANK};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// Gathers along one axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Gather {
    /// The axis (non-negative).
    pub axis: u32,
}

impl Kernel for Gather {
    fn name(&self) -> &'static str {
        "GATHER"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let axis = w.u32("axis")?;
        if axis as usize >= MAX_RANK {
            return Err(w.err(format!("axis {axis} out of range")));
        }
        Ok(Gather { axis })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.axis);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        2..=2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let (x, ix) = (inputs[0], inputs[1]);
        let a = self.axis as usize;
        if a >= x.shape.len() {
            return Err(bad_shape(
                self.name(),
                format!("axis {a} for rank {}", x.shape.len()),
            ));
        }
        if ix.dtype != DType::I32 {
            return Err(KernelError::DType {
                expected: DType::I32,
                got: ix.dtype,
            });
        }
        let mut out = x.shape[..a].to_vec();
        out.extend_from_slice(&ix.shape);
        out.extend_from_slice(&x.shape[a + 1..]);
        if out.len() > MAX_RANK {
            return Err(KernelError::RankTooLarge { rank: out.len() });
        }
        Ok(vec![out])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let (x, ix) = (inputs[0], inputs[1]);
        let es = x.ty.dtype.size() as usize;
        let a = self.axis as usize;
        let shape = x.shape();
        let outer: usize = shape[..a].iter().product();
        let n = shape[a];
        let inner: usize = shape[a + 1..].iter().product::<usize>() * es;
        let idx = ix.i32s()?;
        let out = &mut *outputs[0].bytes;
        let mut pos = 0;
        for o in 0..outer {
            for &i in idx.iter() {
                let i = usize::try_from(i)
                    .ok()
                    .filter(|&i| i < n)
                    .ok_or_else(|| bad_shape("GATHER", format!("index {i} out of range 0..{n}")))?;
                let from = (o * n + i) * inner;
                let src = x
                    .bytes
                    .get(from..from + inner)
                    .ok_or(KernelError::TooLarge)?;
                let dst = out.get_mut(pos..pos + inner).ok_or(KernelError::TooLarge)?;
                dst.copy_from_slice(src);
                pos += inner;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_rows_and_rejects_bad_index() {
        let ty = TensorType::new(DType::U8, &[2, 3]);
        let ity = TensorType::new(DType::I32, &[2]);
        let k = Gather { axis: 1 };
        let oshape = k.output_shapes(&[&ty, &ity]).unwrap().remove(0);
        assert_eq!(oshape, vec![2, 2]);
        let oty = TensorType::new(DType::U8, &oshape);
        let data = [1u8, 2, 3, 4, 5, 6];
        for (ids, want) in [([2i32, 0], Some([3u8, 1, 6, 4])), ([3, 0], None)] {
            let ib: Vec<u8> = ids.iter().flat_map(|v| v.to_ne_bytes()).collect();
            let mut out = [0u8; 4];
            let r = k.run(
                &[
                    View {
                        ty: &ty,
                        bytes: &data,
                    },
                    View {
                        ty: &ity,
                        bytes: &ib,
                    },
                ],
                &mut [ViewMut {
                    ty: &oty,
                    bytes: &mut out,
                }],
            );
            match want {
                Some(w) => assert_eq!(out, w),
                None => assert!(r.is_err()),
            }
        }
    }
}
