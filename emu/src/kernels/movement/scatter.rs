//! Scatter: an output of a given shape filled with one value, then `values[i]` written
//! at flat position `positions[i]`. The device half of NNAPI DENSIFY (feature level
//! experimental): the compiler walks the sparse format's metadata (traversal order, block
//! map, dimension formats, segments and indices) into the flat positions, and the device
//! moves the values. Any element type; the fill is the zero of the values' type (the zero
//! point for quantised types) as PAD's value is.
//!
//! The positions are parameters, not a device tensor: the compiler derives them from the
//! metadata's values (constants, or model inputs the host reads at execution), as it does
//! RESHAPE's shape, and a lowering names only the model's operands.
//!
//! Parameter words: fill (f32), output shape (list), positions (list, one per value;
//! [`Scatter::SKIP`] leaves a value unplaced). Input: values (rank 1). A position outside
//! the output is an error, never a write.

use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::movement::pad::{fill_bytes, repeat_fill};
use crate::kernels::{bad_shape, checked_product, KernelError, Result, MAX_ELEMENTS, MAX_RANK};
use crate::tensor::{TensorType, View, ViewMut};

/// Values placed at flat positions of a filled output.
#[derive(Debug, Clone, PartialEq)]
pub struct Scatter {
    /// What every position not written holds (real value for float types, the stored value
    /// for integer and quantised ones).
    pub fill: f32,
    /// The output's shape.
    pub shape: Vec<u32>,
    /// The flat output position of each value, in order ([`Scatter::SKIP`]: none).
    pub positions: Vec<u32>,
}

impl Scatter {
    /// The position of a value written nowhere.
    pub const SKIP: u32 = u32::MAX;
}

impl Kernel for Scatter {
    /// The fill covers the whole output before the values are placed.
    fn overwrites_f32_outputs(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "SCATTER"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let fill = w.finite_f32("fill")?;
        let shape = w.list("rank", MAX_RANK)?;
        let positions = w.list("positions", MAX_ELEMENTS)?;
        Ok(Scatter {
            fill,
            shape,
            positions,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.fill.to_bits());
        enc::list(w, self.shape.iter().copied());
        enc::list(w, self.positions.iter().copied());
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let values = inputs[0];
        if values.shape.len() != 1 || values.shape[0] != self.positions.len() {
            return Err(bad_shape(
                self.name(),
                format!(
                    "values {:?} must be one vector of {} elements, one per position",
                    values.shape,
                    self.positions.len()
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
        let n = checked_product(&out)?;
        if let Some(&p) = self
            .positions
            .iter()
            .find(|&&p| p != Self::SKIP && p as usize >= n)
        {
            return Err(bad_shape(
                self.name(),
                format!("position {p} outside {n} elements"),
            ));
        }
        Ok(vec![out])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let values = inputs[0];
        let es = values.ty.dtype.size() as usize;
        let fill = fill_bytes(values.ty.dtype, self.fill).ok_or(KernelError::Misaligned)?;
        let out = &mut *outputs[0].bytes;
        repeat_fill(out, &fill);
        let n = out.len() / es.max(1);
        for (v, &at) in values.bytes.chunks_exact(es).zip(&self.positions) {
            if at == Self::SKIP {
                continue;
            }
            let at = Some(at as usize).filter(|&a| a < n).ok_or_else(|| {
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
    use crate::tensor::DType;

    fn scatter(fill: f32, shape: Vec<u32>, values: &[u8], at: &[u32]) -> Result<Vec<u8>> {
        let k = Scatter {
            fill,
            shape,
            positions: at.to_vec(),
        };
        let tv = TensorType::new(DType::U8, &[values.len()]);
        let oshape = k.output_shapes(&[&tv])?.remove(0);
        let to = TensorType::new(DType::U8, &oshape);
        let mut out = vec![0u8; oshape.iter().product()];
        k.run(
            &[View {
                ty: &tv,
                bytes: values,
            }],
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
        // A skipped value is written nowhere.
        assert_eq!(
            scatter(0.0, vec![3], &[1, 2, 3], &[2, Scatter::SKIP, 0]).unwrap(),
            [3, 0, 1]
        );
    }

    #[test]
    fn positions_outside_the_output_are_refused() {
        assert!(scatter(0.0, vec![2, 3], &[1], &[6]).is_err());
        // One position per value.
        assert!(scatter(0.0, vec![2, 3], &[1, 2], &[0]).is_err());
        // A fill the type cannot hold.
        assert!(scatter(300.0, vec![2], &[1], &[0]).is_err());
        let op = KernelOp::from(Scatter {
            fill: 1.0,
            shape: vec![3, 4],
            positions: vec![0, 11, Scatter::SKIP],
        });
        let mut w = Vec::new();
        op.kernel().encode(&mut w);
        assert_eq!(KernelOp::decode(op.opcode(), &w).unwrap(), op);
    }
}
