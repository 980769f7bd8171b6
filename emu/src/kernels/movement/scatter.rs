//! Scatter: an output of a given shape filled with one value, then `values[i]` written
//! at flat position `indices[i]`. The device half of NNAPI DENSIFY (feature level
//! experimental): the compiler walks the sparse format's metadata (traversal order, block
//! map, dimension formats, segments and indices) into the flat positions, and the device
//! moves the values. Any element type; the fill is the zero of the values' type (the zero
//! point for quantised types) as PAD's value is.
//!
//! Parameter words: fill (f32), output shape (list). Inputs: values (rank 1), indices
//! (int32, as many as values). A position outside the output is an error, never a write.

use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::movement::pad::{fill_bytes, repeat_fill};
use crate::kernels::{bad_shape, checked_product, KernelError, Result, MAX_RANK};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// Values placed at flat positions of a filled output.
#[derive(Debug, Clone, PartialEq)]
pub struct Scatter {
    /// What every position not written holds (real value for float types, the stored value
    /// for integer and quantised ones).
    pub fill: f32,
    /// The output's shape.
    pub shape: Vec<u32>,
}

impl Kernel for Scatter {
    fn name(&self) -> &'static str {
        "SCATTER"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let fill = w.finite_f32("fill")?;
        let shape = w.list("rank", MAX_RANK)?;
        Ok(Scatter { fill, shape })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.fill.to_bits());
        enc::list(w, self.shape.iter().copied());
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        2..=2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let (values, indices) = (inputs[0], inputs[1]);
        if indices.dtype != DType::I32 {
            return Err(KernelError::DType {
                expected: DType::I32,
                got: indices.dtype,
            });
        }
        if values.shape.len() != 1 || indices.shape != values.shape {
            return Err(bad_shape(
                self.name(),
                format!(
                    "values {:?} and indices {:?} must be one vector each, of one length",
                    values.shape, indices.shape
                ),
            ));
        }
        if fill_bytes(values.dtype, self.fill).is_none() {
            return Err(bad_shape(
                self.name(),
                format!("fill {} is not a {:?} value", self.fill, values.dtype),
            ));
        }
        let out: Vec<usize> = self.shape.iter().map(|&d| d as usize).collect();
        checked_product(&out)?;
        Ok(vec![out])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let (values, indices) = (inputs[0], inputs[1]);
        let es = values.ty.dtype.size() as usize;
        let fill = fill_bytes(values.ty.dtype, self.fill).ok_or(KernelError::Misaligned)?;
        let out = &mut *outputs[0].bytes;
        repeat_fill(out, &fill);
        let n = out.len() / es.max(1);
        for (v, i) in values
            .bytes
            .chunks_exact(es)
            .zip(indices.bytes.chunks_exact(4))
        {
            let at = i32::from_le_bytes([i[0], i[1], i[2], i[3]]);
            let at = usize::try_from(at).ok().filter(|&a| a < n).ok_or_else(|| {
                bad_shape(self.name(), format!("position {at} outside {n} elements"))
            })?;
            out[at * es..(at + 1) * es].copy_from_slice(v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::KernelOp;

    fn scatter(fill: f32, shape: Vec<u32>, values: &[u8], at: &[i32]) -> Result<Vec<u8>> {
        let k = Scatter { fill, shape };
        let tv = TensorType::new(DType::U8, &[values.len()]);
        let ti = TensorType::new(DType::I32, &[at.len()]);
        let oshape = k.output_shapes(&[&tv, &ti])?.remove(0);
        let to = TensorType::new(DType::U8, &oshape);
        let idx: Vec<u8> = at.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = vec![0u8; oshape.iter().product()];
        k.run(
            &[
                View {
                    ty: &tv,
                    bytes: values,
                },
                View {
                    ty: &ti,
                    bytes: &idx,
                },
            ],
            &mut [ViewMut {
                ty: &to,
                bytes: &mut out,
            }],
        )?;
        Ok(out)
    }

    #[test]
    fn places_values_over_the_fill() {
        assert_eq!(
            scatter(9.0, vec![2, 3], &[1, 2], &[0, 4]).unwrap(),
            [1, 9, 9, 9, 2, 9]
        );
    }

    #[test]
    fn positions_outside_the_output_are_refused() {
        assert!(scatter(0.0, vec![2, 3], &[1], &[6]).is_err());
        assert!(scatter(0.0, vec![2, 3], &[1], &[-1]).is_err());
        // A fill the type cannot hold.
        assert!(scatter(300.0, vec![2], &[1], &[0]).is_err());
        let op = KernelOp::from(Scatter {
            fill: 1.0,
            shape: vec![3, 4],
        });
        let mut w = Vec::new();
        op.kernel().encode(&mut w);
        assert_eq!(KernelOp::decode(op.opcode(), &w).unwrap(), op);
    }
}
