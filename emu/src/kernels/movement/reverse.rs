//! NNAPI REVERSE (feature level 7): the input with the order of its elements along one
//! axis reversed. Any element type: elements are only moved.
//!
//! Parameter words: axis (< the input's rank).

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::{bad_shape, Result, MAX_RANK};
use crate::tensor::{TensorType, View, ViewMut};

/// Reversal along one axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Reverse {
    /// The axis reversed.
    pub axis: u32,
}

impl Kernel for Reverse {
    fn name(&self) -> &'static str {
        "REVERSE"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let axis = w.u32("axis")?;
        if axis as usize >= MAX_RANK {
            return Err(w.err(format!("axis {axis} of at most rank {MAX_RANK}")));
        }
        Ok(Reverse { axis })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.axis);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let s = &inputs[0].shape;
        if self.axis as usize >= s.len() {
            return Err(bad_shape(
                self.name(),
                format!("axis {} of a rank-{} input", self.axis, s.len()),
            ));
        }
        Ok(vec![s.clone()])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let shape = x.shape();
        let axis = self.axis as usize;
        let es = x.ty.dtype.size() as usize;
        // Blocks of `inner` contiguous elements, `dim` of them per outer index.
        let dim = shape[axis];
        let inner = es * shape[axis + 1..].iter().product::<usize>();
        if inner == 0 || dim == 0 {
            return Ok(());
        }
        let out = &mut *outputs[0].bytes;
        for (xs, os) in x
            .bytes
            .chunks_exact(dim * inner)
            .zip(out.chunks_exact_mut(dim * inner))
        {
            for (k, o) in os.chunks_exact_mut(inner).enumerate() {
                o.copy_from_slice(&xs[(dim - 1 - k) * inner..(dim - k) * inner]);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::KernelOp;
    use crate::tensor::DType;

    fn reverse(axis: u32, shape: &[usize], x: &[u8]) -> Result<Vec<u8>> {
        let k = Reverse { axis };
        let ty = TensorType::new(DType::U8, shape);
        let oshape = k.output_shapes(&[&ty])?.remove(0);
        let oty = TensorType::new(DType::U8, &oshape);
        let mut out = vec![0u8; x.len()];
        k.run(
            &[View { ty: &ty, bytes: x }],
            &mut [ViewMut {
                ty: &oty,
                bytes: &mut out,
            }],
        )?;
        Ok(out)
    }

    #[test]
    fn reverses_each_axis() {
        let x = [1, 2, 3, 4, 5, 6];
        assert_eq!(reverse(0, &[2, 3], &x).unwrap(), [4, 5, 6, 1, 2, 3]);
        assert_eq!(reverse(1, &[2, 3], &x).unwrap(), [3, 2, 1, 6, 5, 4]);
        assert_eq!(reverse(0, &[6], &x).unwrap(), [6, 5, 4, 3, 2, 1]);
    }

    #[test]
    fn axis_outside_the_rank_is_refused() {
        assert!(reverse(2, &[2, 3], &[0; 6]).is_err());
        assert!(KernelOp::decode(KernelOp::from(Reverse { axis: 0 }).opcode(), &[99]).is_err());
    }
}
