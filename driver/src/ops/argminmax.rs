//! ARGMAX and ARGMIN (input, axis; int32 output).

use vnpu_emu::kernels::ArgMinMax;

use super::types::FLOAT_QUANT8_INT32;
use super::{arg, Arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{OperandType as T, OperationType};

const SIGS: [Signature; 1] = [Signature::new(
    V1_2,
    FLOAT_QUANT8_INT32,
    &[arg("input", Ty::T), arg("axis", Ty::Int)],
    OUTS,
)];
const OUTS: &[Arg] = &[arg("output", Ty::Is(T::TENSOR_INT32))];

fn lower(is_max: bool, a: &Args<'_>) -> Result<Lowered, CompileError> {
    let rank = a.shape("input")?.len();
    let axis = a.axis(a.i32("axis")?, rank)?;
    a.kernel(
        ArgMinMax {
            is_max,
            axis: axis as i32,
        },
        &["input"],
    )
}

/// ARGMAX.
pub const ARGMAX: OpDef = OpDef {
    op: OperationType::ARGMAX,
    signatures: &SIGS,
    check: None,
    runs: FLOAT_QUANT8_INT32,
    lower: Some(|a| lower(true, a)),
};

/// ARGMIN.
pub const ARGMIN: OpDef = OpDef {
    op: OperationType::ARGMIN,
    signatures: &SIGS,
    check: None,
    runs: FLOAT_QUANT8_INT32,
    lower: Some(|a| lower(false, a)),
};
