//! NNAPI EMBEDDING_LOOKUP: rows of a table picked by int32 indices,
//! `output[i] = values[lookups[i]]`. Any element type (rows are copied byte-wise; the output
//! keeps the table's quantisation). An index outside the table is an error, as in the NNAPI
//! reference.
//!
//! Inputs: lookups (TENSOR_INT32 `[n]`), values (`[rows, ...]`, rank >= 1). Output:
//! `[n, ...]`. No parameter words.

use std::ops::RangeInclusive;

use super::{gather_rows, int_vector};
use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{TensorType, View, ViewMut};

/// EMBEDDING_LOOKUP.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingLookup;

/// Requires output 0 to have the type and quantisation of the table `values`.
pub(crate) fn same_as_values(
    op: &'static str,
    values: &TensorType,
    out: &TensorType,
) -> Result<()> {
    if out.dtype != values.dtype {
        return Err(KernelError::DType {
            expected: values.dtype,
            got: out.dtype,
        });
    }
    if out.quant.scale != values.quant.scale || out.quant.zero_point != values.quant.zero_point {
        return Err(bad_shape(
            op,
            "output quantisation differs from the values'",
        ));
    }
    Ok(())
}

impl Kernel for EmbeddingLookup {
    fn name(&self) -> &'static str {
        "EMBEDDING_LOOKUP"
    }

    fn decode(_: &mut Words<'_>) -> Result<Self> {
        Ok(EmbeddingLookup)
    }

    fn encode(&self, _: &mut Vec<u32>) {}

    fn input_count(&self) -> RangeInclusive<usize> {
        2..=2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let n = int_vector(self.name(), "lookups", inputs[0])?;
        let values = &inputs[1].shape;
        if values.is_empty() {
            return Err(bad_shape(self.name(), "values must have rank >= 1"));
        }
        let mut out = values.clone();
        out[0] = n;
        Ok(vec![out])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_as_values(self.name(), inputs[1], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let lookups = inputs[0].i32s()?;
        let values = inputs[1];
        let rows = values.shape()[0];
        let row_bytes = values.bytes.len().checked_div(rows).unwrap_or(0);
        if let Some(bad) = lookups.iter().find(|&&i| i < 0 || i as usize >= rows) {
            return Err(bad_shape(
                self.name(),
                format!("lookup index {bad} outside 0..{rows}"),
            ));
        }
        let out = &mut outputs[0];
        gather_rows(
            values.bytes,
            row_bytes,
            out.bytes,
            lookups.iter().map(|&i| Some(i as usize)),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{run_f32, KernelOp};

    #[test]
    fn picks_rows_and_rejects_bad_indices() {
        let op = KernelOp::from(EmbeddingLookup);
        let values: Vec<f32> = (0..6).map(|v| v as f32).collect();
        // run_f32 stages every input as float32; build the int32 lookups by hand instead.
        let lookups = TensorType::new(crate::tensor::DType::I32, &[2]);
        let vt = TensorType::new(crate::tensor::DType::F32, &[3, 2]);
        let ot = TensorType::new(crate::tensor::DType::F32, &[2, 2]);
        let idx: [i32; 2] = [2, 0];
        let mut out = [0f32; 4];
        let ins = [
            View {
                ty: &lookups,
                bytes: bytemuck::cast_slice(&idx),
            },
            View {
                ty: &vt,
                bytes: bytemuck::cast_slice(&values),
            },
        ];
        let mut outs = [ViewMut {
            ty: &ot,
            bytes: bytemuck::cast_slice_mut(&mut out),
        }];
        crate::kernels::execute(&op, &ins, &mut outs).unwrap();
        assert_eq!(out, [4.0, 5.0, 0.0, 1.0]);
        let idx: [i32; 2] = [3, 0];
        let ins = [
            View {
                ty: &lookups,
                bytes: bytemuck::cast_slice(&idx),
            },
            View {
                ty: &vt,
                bytes: bytemuck::cast_slice(&values),
            },
        ];
        let mut outs = [ViewMut {
            ty: &ot,
            bytes: bytemuck::cast_slice_mut(&mut out),
        }];
        assert!(crate::kernels::execute(&op, &ins, &mut outs).is_err());
        // A float32 "lookups" tensor is a type error, not a panic.
        assert!(run_f32(&op, &[(&[2], &[0.0, 1.0]), (&[3, 2], &values)]).is_err());
    }
}
