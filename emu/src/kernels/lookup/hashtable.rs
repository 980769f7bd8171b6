//! NNAPI HASHTABLE_LOOKUP: rows of a table looked up by key. `keys` (sorted ascending, as
//! NNAPI requires) name the table's rows; each lookup that finds its key copies that row
//! and sets its hit to 1, a miss writes a zero row and hit 0. Any element type for the
//! values (rows are copied byte-wise; the output keeps the table's quantisation).
//!
//! Inputs: lookups (TENSOR_INT32 `[n]`), keys (TENSOR_INT32 `[rows]`), values
//! (`[rows, ...]`). Outputs: output `[n, ...]`, hits (u8 `[n]`). No parameter words.

use std::ops::RangeInclusive;

use super::embedding::same_as_values;
use super::{gather_rows, int_vector};
use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// HASHTABLE_LOOKUP.
#[derive(Debug, Clone, PartialEq)]
pub struct HashtableLookup;

impl Kernel for HashtableLookup {
    fn name(&self) -> &'static str {
        "HASHTABLE_LOOKUP"
    }

    fn decode(_: &mut Words<'_>) -> Result<Self> {
        Ok(HashtableLookup)
    }

    fn encode(&self, _: &mut Vec<u32>) {}

    fn input_count(&self) -> RangeInclusive<usize> {
        3..=3
    }

    fn output_count(&self) -> usize {
        2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let n = int_vector(self.name(), "lookups", inputs[0])?;
        let rows = int_vector(self.name(), "keys", inputs[1])?;
        let values = &inputs[2].shape;
        if values.first() != Some(&rows) {
            return Err(bad_shape(self.name(), "values must have one row per key"));
        }
        let mut out = values.clone();
        out[0] = n;
        Ok(vec![out, vec![n]])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_as_values(self.name(), inputs[2], outputs[0])?;
        if outputs[1].dtype != DType::U8 {
            return Err(KernelError::DType {
                expected: DType::U8,
                got: outputs[1].dtype,
            });
        }
        Ok(())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let lookups = inputs[0].i32s()?;
        let keys = inputs[1].i32s()?;
        let values = inputs[2];
        let row_bytes = values.bytes.len().checked_div(keys.len()).unwrap_or(0);
        let found: Vec<Option<usize>> =
            lookups.iter().map(|k| keys.binary_search(k).ok()).collect();
        let [out, hits] = outputs else {
            return Err(bad_shape(self.name(), "needs two outputs"));
        };
        gather_rows(values.bytes, row_bytes, out.bytes, found.iter().copied());
        for (h, f) in hits.u8s_mut()?.iter_mut().zip(&found) {
            *h = u8::from(f.is_some());
        }
        Ok(())
    }
}
