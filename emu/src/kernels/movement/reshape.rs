//! NNAPI RESHAPE and SQUEEZE (and anything else that only relabels dimensions): a copy
//! into `shape`; the element counts must match. Any element type.
//!
//! Parameter words: shape (list of at most MAX_RANK dimensions).

use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::{bad_shape, checked_product, num_elements, Result, MAX_RANK};
use crate::tensor::{TensorType, View, ViewMut};

/// A copy under a new shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Reshape {
    /// The output shape.
    pub shape: Vec<usize>,
}

impl Kernel for Reshape {
    /// The input's bytes are copied over the whole output.
    fn overwrites_f32_outputs(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "RESHAPE"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let dims = w.list("rank", MAX_RANK)?;
        let shape: Vec<usize> = dims.into_iter().map(|d| d as usize).collect();
        num_elements(&shape).map_err(|e| w.err(e.to_string()))?;
        Ok(Reshape { shape })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        enc::list(
            w,
            self.shape
                .iter()
                .map(|&d| u32::try_from(d).unwrap_or(u32::MAX)),
        );
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let x = &inputs[0].shape;
        let (a, b) = (checked_product(x)?, num_elements(&self.shape)?);
        if a != b {
            return Err(bad_shape(
                self.name(),
                format!(
                    "cannot reshape {x:?} ({a} elements) to {:?} ({b} elements)",
                    self.shape
                ),
            ));
        }
        Ok(vec![self.shape.clone()])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        outputs[0].bytes.copy_from_slice(inputs[0].bytes);
        Ok(())
    }
}

/// Requires an output of the input's element type and quantisation (a pure move).
pub(crate) fn same_storage(op: &'static str, x: &TensorType, out: &TensorType) -> Result<()> {
    if x.dtype != out.dtype
        || x.quant.scale != out.quant.scale
        || x.quant.zero_point != out.quant.zero_point
    {
        return Err(bad_shape(
            op,
            format!(
                "output {:?} (scale {}, zero point {}) differs from input {:?} (scale {}, zero point {})",
                out.dtype, out.quant.scale, out.quant.zero_point, x.dtype, x.quant.scale, x.quant.zero_point
            ),
        ));
    }
    Ok(())
}
