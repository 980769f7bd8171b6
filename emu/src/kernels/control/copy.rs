//! COPY: the output takes the input's value and shape (same element type and
//! quantisation). The compiler uses it to move values in and out of control flow: a
//! WHILE's loop state, an IF's branch results.
//!
//! Parameter words: none.

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::Result;
use crate::tensor::{TensorType, View, ViewMut};

/// A tensor copy.
#[derive(Debug, Clone, PartialEq)]
pub struct Copy;

impl Kernel for Copy {
    fn name(&self) -> &'static str {
        "COPY"
    }

    fn decode(_: &mut Words<'_>) -> Result<Self> {
        Ok(Copy)
    }

    fn encode(&self, _: &mut Vec<u32>) {}

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        Ok(vec![inputs[0].shape.clone()])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        outputs[0].bytes.copy_from_slice(inputs[0].bytes);
        Ok(())
    }
}
