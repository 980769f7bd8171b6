//! ADD, SUB, MUL, DIV: broadcast arithmetic with a fused activation.

use vnpu_emu::kernels::{Binary, BinaryKind};

use super::types::FLOAT_QUANT8_INT32;
use super::{arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{OperandType as T, OperationType};

const ARGS: &[super::Arg] = &[
    arg("input1", Ty::T),
    arg("input2", Ty::T),
    arg("activation", Ty::Int),
];
const OUT: &[super::Arg] = &[arg("output", Ty::T)];

const ADD_SUB_MUL: &[Signature] = &[Signature::new(V1_0, FLOAT_QUANT8_INT32, ARGS, OUT)];
const DIV_SIG: &[Signature] = &[Signature::new(
    V1_1,
    &[T::TENSOR_FLOAT32, T::TENSOR_FLOAT16, T::TENSOR_INT32],
    ARGS,
    OUT,
)];

/// The types the device runs ADD, SUB and MUL on.
const RUNS: &[T] = &[
    T::TENSOR_FLOAT32,
    T::TENSOR_FLOAT16,
    T::TENSOR_INT32,
    T::TENSOR_QUANT8_ASYMM,
    T::TENSOR_QUANT8_ASYMM_SIGNED,
];

/// The types the device runs DIV on.
const DIV_RUNS: &[T] = &[T::TENSOR_FLOAT32, T::TENSOR_FLOAT16, T::TENSOR_INT32];

fn lower(kind: BinaryKind, a: &Args<'_>) -> Result<Lowered, CompileError> {
    a.kernel(
        Binary {
            kind,
            act: a.act("activation")?,
        },
        &["input1", "input2"],
    )
}

/// ADD.
pub const ADD: OpDef = OpDef {
    op: OperationType::ADD,
    signatures: ADD_SUB_MUL,
    check: None,
    runs: RUNS,
    lower: Some(|a| lower(BinaryKind::Add, a)),
};

/// SUB.
pub const SUB: OpDef = OpDef {
    op: OperationType::SUB,
    signatures: ADD_SUB_MUL,
    check: None,
    runs: RUNS,
    lower: Some(|a| lower(BinaryKind::Sub, a)),
};

/// MUL.
pub const MUL: OpDef = OpDef {
    op: OperationType::MUL,
    signatures: ADD_SUB_MUL,
    check: None,
    runs: RUNS,
    lower: Some(|a| lower(BinaryKind::Mul, a)),
};

/// DIV.
pub const DIV: OpDef = OpDef {
    op: OperationType::DIV,
    signatures: DIV_SIG,
    check: None,
    runs: DIV_RUNS,
    lower: Some(|a| lower(BinaryKind::Div, a)),
};
