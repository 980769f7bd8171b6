//! MAXIMUM, MINIMUM, POW, PRELU: broadcast binary functions.

use vnpu_emu::kernels::{MinMax, MinMaxKind};

use super::types::{FLOATS, FLOAT_QUANT8, FLOAT_QUANT8_INT32};
use super::{arg, Args, HalVersion::*, OpDef, Signature, Ty};
use crate::compile::{CompileError, Lowered};
use crate::hal::OperationType;

const OUT: &[super::Arg] = &[arg("output", Ty::T)];

fn lower(kind: MinMaxKind, a: &Args<'_>, names: &[&str]) -> Result<Lowered, CompileError> {
    a.kernel(MinMax { kind }, names)
}

const MINMAX_SIG: &[Signature] = &[Signature::new(
    V1_2,
    FLOAT_QUANT8_INT32,
    &[arg("input1", Ty::T), arg("input2", Ty::T)],
    OUT,
)];

/// MAXIMUM.
pub const MAXIMUM: OpDef = OpDef {
    op: OperationType::MAXIMUM,
    signatures: MINMAX_SIG,
    check: None,
    runs: FLOAT_QUANT8_INT32,
    lower: Some(|a| lower(MinMaxKind::Maximum, a, &["input1", "input2"])),
};

/// MINIMUM.
pub const MINIMUM: OpDef = OpDef {
    op: OperationType::MINIMUM,
    signatures: MINMAX_SIG,
    check: None,
    runs: FLOAT_QUANT8_INT32,
    lower: Some(|a| lower(MinMaxKind::Minimum, a, &["input1", "input2"])),
};

/// POW.
pub const POW: OpDef = OpDef {
    op: OperationType::POW,
    signatures: &[Signature::new(
        V1_2,
        FLOATS,
        &[arg("base", Ty::T), arg("exponent", Ty::T)],
        OUT,
    )],
    check: None,
    runs: FLOATS,
    lower: Some(|a| lower(MinMaxKind::Pow, a, &["base", "exponent"])),
};

/// PRELU.
pub const PRELU: OpDef = OpDef {
    op: OperationType::PRELU,
    signatures: &[Signature::new(
        V1_2,
        FLOAT_QUANT8,
        &[arg("input", Ty::T), arg("alpha", Ty::T)],
        OUT,
    )],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| lower(MinMaxKind::Prelu, a, &["input", "alpha"])),
};
