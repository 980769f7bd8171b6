//! MAXIMUM, MINIMUM, POW, PRELU: broadcast binary functions.

use vnpu_emu::kernels::{MinMax, MinMaxKind};

use super::types::{FLOATS, FLOAT_QUANT8, FLOAT_QUANT8_INT32};
use super::{arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
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

use vnpu_emu::kernels::{Math, MathKind};

use crate::hal::OperandType as T;

const UNARY_IN: &[super::Arg] = &[arg("input", Ty::T)];
const FLOAT_INT32: &[T] = &[T::TENSOR_FLOAT32, T::TENSOR_FLOAT16, T::TENSOR_INT32];

fn math(kind: MathKind, a: &Args<'_>) -> Result<Lowered, CompileError> {
    let alpha = if kind == MathKind::Elu {
        a.f32("alpha")?
    } else {
        0.0
    };
    a.kernel(Math { kind, alpha }, &["input"])
}

macro_rules! math_def {
    ($(#[$doc:meta] $name:ident, $kind:ident, $types:expr, $runs:expr;)*) => {$(
        #[$doc]
        pub const $name: OpDef = OpDef {
            op: OperationType::$name,
            signatures: &[Signature::new(V1_2, $types, UNARY_IN, OUT)],
            check: None,
            runs: $runs,
            lower: Some(|a| math(MathKind::$kind, a)),
        };
    )*};
}

math_def! {
    /// ABS (int32 from 1.3).
    ABS, Abs, FLOAT_INT32, FLOAT_INT32;
    /// EXP.
    EXP, Exp, FLOATS, FLOATS;
    /// LOG.
    LOG, Log, FLOATS, FLOATS;
    /// NEG.
    NEG, Neg, FLOAT_INT32, FLOAT_INT32;
    /// SIN.
    SIN, Sin, FLOATS, FLOATS;
    /// SQRT.
    SQRT, Sqrt, FLOATS, FLOATS;
    /// HARD_SWISH (1.3).
    HARD_SWISH, HardSwish, FLOAT_QUANT8, FLOAT_QUANT8;
}

/// RSQRT: float from 1.2, both 8-bit asymmetric types from AIDL V3 (feature level 7).
pub const RSQRT: OpDef = OpDef {
    op: OperationType::RSQRT,
    signatures: &[
        Signature::new(V1_2, FLOATS, UNARY_IN, OUT),
        Signature::new(AidlV3, super::types::QUANT8, UNARY_IN, OUT),
    ],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| math(MathKind::Rsqrt, a)),
};

/// ELU (1.3): input and a float alpha scalar of the input's precision.
pub const ELU: OpDef = OpDef {
    op: OperationType::ELU,
    signatures: &[Signature::new(
        V1_3,
        FLOATS,
        &[arg("input", Ty::T), arg("alpha", Ty::Scalar)],
        OUT,
    )],
    check: None,
    runs: FLOATS,
    lower: Some(|a| math(MathKind::Elu, a)),
};
