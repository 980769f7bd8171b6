//! NNAPI PACK (feature level 6): `n >= 1` inputs of one shape stacked along a new axis
//! (`0..=rank`), so the output has rank + 1 and the new dimension is `n`. Any element type:
//! elements are only moved (NNAPI requires every input to share the output's scale and
//! zero point, so nothing is requantised).
//!
//! Its own kernel rather than CONCATENATION: a lowering is one kernel over the model's
//! operands, and concatenating along the new axis needs each input seen one rank higher.
//!
//! Parameter words: axis.

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::{bad_shape, KernelError, Result, MAX_CONCAT_INPUTS, MAX_RANK};
use crate::tensor::{TensorType, View, ViewMut};

/// Stacking along a new axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Pack {
    /// Where the new axis goes (at most the inputs' rank).
    pub axis: u32,
}

impl Kernel for Pack {
    /// The inputs tile the whole output.
    fn overwrites_f32_outputs(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "PACK"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let axis = w.u32("axis")?;
        if axis as usize >= MAX_RANK {
            return Err(w.err(format!("axis {axis} out of range")));
        }
        Ok(Pack { axis })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.axis);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        1..=MAX_CONCAT_INPUTS
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let first = inputs[0];
        let axis = self.axis as usize;
        if axis > first.shape.len() || first.shape.len() + 1 > MAX_RANK {
            return Err(bad_shape(
                self.name(),
                format!("axis {axis} for inputs of rank {}", first.shape.len()),
            ));
        }
        for t in &inputs[1..] {
            if t.dtype != first.dtype {
                return Err(KernelError::DType {
                    expected: first.dtype,
                    got: t.dtype,
                });
            }
            if t.shape != first.shape {
                return Err(bad_shape(
                    self.name(),
                    format!("input shapes {:?} and {:?} differ", first.shape, t.shape),
                ));
            }
        }
        let mut out = first.shape.clone();
        out.insert(axis, inputs.len());
        Ok(vec![out])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        inputs
            .iter()
            .try_for_each(|t| same_storage(self.name(), t, outputs[0]))
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let shape = inputs[0].shape();
        let es = inputs[0].ty.dtype.size() as usize;
        let axis = self.axis as usize;
        // Each input is `outer` blocks of `inner` bytes; the output takes one block of
        // every input in turn.
        let inner = es * shape[axis..].iter().product::<usize>();
        if inner == 0 {
            return Ok(());
        }
        let out = &mut *outputs[0].bytes;
        for (o, dst) in out.chunks_exact_mut(inner).enumerate() {
            let (block, k) = (o / inputs.len(), o % inputs.len());
            dst.copy_from_slice(&inputs[k].bytes[block * inner..(block + 1) * inner]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::KernelOp;
    use crate::tensor::DType;

    fn pack(axis: u32, shape: &[usize], xs: &[&[u8]]) -> Result<(Vec<usize>, Vec<u8>)> {
        let k = Pack { axis };
        let ty = TensorType::new(DType::U8, shape);
        let tys = vec![&ty; xs.len()];
        let oshape = k.output_shapes(&tys)?.remove(0);
        let oty = TensorType::new(DType::U8, &oshape);
        k.check_outputs(&tys, &[&oty])?;
        let mut out = vec![0u8; oshape.iter().product()];
        let views: Vec<View<'_>> = xs.iter().map(|x| View { ty: &ty, bytes: x }).collect();
        k.run(
            &views,
            &mut [ViewMut {
                ty: &oty,
                bytes: &mut out,
            }],
        )?;
        Ok((oshape, out))
    }

    #[test]
    fn stacks_along_each_axis() {
        let (a, b): (&[u8], &[u8]) = (&[1, 2, 3, 4], &[5, 6, 7, 8]);
        // Inputs [2, 2]; numpy.stack([a, b], axis).
        assert_eq!(
            pack(0, &[2, 2], &[a, b]).unwrap(),
            (vec![2, 2, 2], vec![1, 2, 3, 4, 5, 6, 7, 8])
        );
        assert_eq!(
            pack(1, &[2, 2], &[a, b]).unwrap(),
            (vec![2, 2, 2], vec![1, 2, 5, 6, 3, 4, 7, 8])
        );
        assert_eq!(
            pack(2, &[2, 2], &[a, b]).unwrap(),
            (vec![2, 2, 2], vec![1, 5, 2, 6, 3, 7, 4, 8])
        );
        // One input: a new unit axis.
        assert_eq!(pack(1, &[4], &[a]).unwrap(), (vec![4, 1], vec![1, 2, 3, 4]));
    }

    #[test]
    fn hostile_parameters_are_refused() {
        assert!(pack(3, &[2, 2], &[&[0; 4]]).is_err());
        let k = Pack { axis: 0 };
        let x = TensorType::new(DType::U8, &[2]);
        let y = TensorType::new(DType::U8, &[3]);
        assert!(k.output_shapes(&[&x, &y]).is_err());
        let z = TensorType::new(DType::I8, &[2]);
        assert!(k.output_shapes(&[&x, &z]).is_err());
        let past = MAX_RANK as u32;
        assert!(KernelOp::decode(KernelOp::from(Pack { axis: 0 }).opcode(), &[past]).is_err());
        let op = KernelOp::from(Pack { axis: 2 });
        let mut w = Vec::new();
        op.kernel().encode(&mut w);
        assert_eq!(KernelOp::decode(op.opcode(), &w).unwrap(), op);
    }
}
