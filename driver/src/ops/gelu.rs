//! VNPU_GELU of "dev.vnpu.fused" (`crate::extensions::fused`): the Gaussian error linear
//! unit in one kernel. Inputs: a TENSOR_FLOAT32 or TENSOR_FLOAT16 tensor of rank 1 to 4,
//! and `approximate`, a constant BOOL (true: the tanh form, false: the erf form). Output:
//! the same type and shape. Runs as the device's GELU kernel, which the timing model
//! charges one pass over the tensor instead of the nine passes and dispatches of the
//! equivalent NNAPI chain.

use vnpu_emu::kernels::Gelu;

use super::types::FLOATS;
use super::{arg, HalVersion::*, OpDef, Signature, Ty};
use crate::extensions::fused::GELU;
use crate::hal::{Operand, OperandLifeTime};

/// The highest rank the fused kernel takes.
pub const MAX_RANK: usize = 4;

/// The extension's validator: rank 1..=4 (when known), an output shape that agrees with
/// the input's, and a constant `approximate` (the kernel is specialised when built).
fn check(ins: &[&Operand], outs: &[&Operand]) -> Result<(), String> {
    let (x, flag, out) = (ins[0], ins[1], outs[0]);
    if x.dimensions.len() > MAX_RANK {
        return Err(format!(
            "input rank {} exceeds {MAX_RANK}",
            x.dimensions.len()
        ));
    }
    if !x.dimensions.is_empty() && !out.dimensions.is_empty() {
        let agree = x.dimensions.len() == out.dimensions.len()
            && x.dimensions
                .iter()
                .zip(&out.dimensions)
                .all(|(&a, &b)| a == 0 || b == 0 || a == b);
        if !agree {
            return Err(format!(
                "output dimensions {:?} do not match input dimensions {:?}",
                out.dimensions, x.dimensions
            ));
        }
    }
    if !matches!(
        flag.lifetime,
        OperandLifeTime::CONSTANT_COPY | OperandLifeTime::CONSTANT_REFERENCE
    ) {
        return Err("approximate must be a constant".into());
    }
    Ok(())
}

/// VNPU_GELU.
pub const VNPU_GELU: OpDef = OpDef {
    op: GELU,
    signatures: &[Signature::new(
        V1_2,
        FLOATS,
        &[arg("input", Ty::T), arg("approximate", Ty::Bool)],
        &[arg("output", Ty::T)],
    )],
    check: Some(check),
    runs: FLOATS,
    lower: Some(|a| {
        a.kernel(
            Gelu {
                approximate: a.bool("approximate")?,
            },
            &["input"],
        )
    }),
};
