//! Control transfer. `BranchIfFalse` reads one BOOL8 element (the condition of an IF, or a
//! WHILE's condition model output) and continues at `target` when it is false; `Jump`
//! always continues at `target`. A target is an op index of the same program, at most the
//! op count (the end). Neither writes a tensor.
//!
//! Parameter words: target.

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// Continue at `target` when the condition tensor (one BOOL8 element) is false.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchIfFalse {
    /// The op index to continue at.
    pub target: u32,
}

/// Continue at `target`.
#[derive(Debug, Clone, PartialEq)]
pub struct Jump {
    /// The op index to continue at.
    pub target: u32,
}

impl Kernel for BranchIfFalse {
    fn name(&self) -> &'static str {
        "BRANCH_IF_FALSE"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(BranchIfFalse {
            target: w.u32("target")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.target);
    }

    fn output_count(&self) -> usize {
        0
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let c = inputs[0];
        if c.dtype != DType::Bool8 {
            return Err(KernelError::DType {
                expected: DType::Bool8,
                got: c.dtype,
            });
        }
        if c.numel() != 1 {
            return Err(bad_shape(
                self.name(),
                "the condition must hold one element",
            ));
        }
        Ok(Vec::new())
    }

    fn run(&self, _: &[View<'_>], _: &mut [ViewMut<'_>]) -> Result<()> {
        Ok(()) // the sequencer acts on it
    }
}

impl Kernel for Jump {
    fn name(&self) -> &'static str {
        "JUMP"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(Jump {
            target: w.u32("target")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.target);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        0..=0
    }

    fn output_count(&self) -> usize {
        0
    }

    fn output_shapes(&self, _: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        Ok(Vec::new())
    }

    fn run(&self, _: &[View<'_>], _: &mut [ViewMut<'_>]) -> Result<()> {
        Ok(())
    }
}
