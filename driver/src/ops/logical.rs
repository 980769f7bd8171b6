//! LOGICAL_AND, LOGICAL_OR, LOGICAL_NOT and SELECT.

use vnpu_emu::kernels::{Logical, LogicalKind};

use super::{arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{OperandType as T, OperationType};

const BOOL: &[T] = &[T::TENSOR_BOOL8];
const OUT: &[super::Arg] = &[arg("output", Ty::T)];

fn lower(kind: LogicalKind, a: &Args<'_>, names: &[&str]) -> Result<Lowered, CompileError> {
    a.kernel(Logical { kind }, names)
}

/// LOGICAL_AND.
pub const LOGICAL_AND: OpDef = OpDef {
    op: OperationType::LOGICAL_AND,
    signatures: &[Signature::new(
        V1_2,
        BOOL,
        &[arg("input1", Ty::T), arg("input2", Ty::T)],
        OUT,
    )],
    check: None,
    runs: BOOL,
    lower: Some(|a| lower(LogicalKind::And, a, &["input1", "input2"])),
};

/// LOGICAL_OR.
pub const LOGICAL_OR: OpDef = OpDef {
    op: OperationType::LOGICAL_OR,
    signatures: &[Signature::new(
        V1_2,
        BOOL,
        &[arg("input1", Ty::T), arg("input2", Ty::T)],
        OUT,
    )],
    check: None,
    runs: BOOL,
    lower: Some(|a| lower(LogicalKind::Or, a, &["input1", "input2"])),
};

/// LOGICAL_NOT.
pub const LOGICAL_NOT: OpDef = OpDef {
    op: OperationType::LOGICAL_NOT,
    signatures: &[Signature::new(V1_2, BOOL, &[arg("input", Ty::T)], OUT)],
    check: None,
    runs: BOOL,
    lower: Some(|a| lower(LogicalKind::Not, a, &["input"])),
};

const SELECT_TYPES: &[T] = &[
    T::TENSOR_FLOAT16,
    T::TENSOR_FLOAT32,
    T::TENSOR_INT32,
    T::TENSOR_QUANT8_ASYMM,
    T::TENSOR_QUANT8_ASYMM_SIGNED,
];

/// SELECT: the main type is that of input1 (input 1).
pub const SELECT: OpDef = OpDef {
    op: OperationType::SELECT,
    signatures: &[Signature::new(
        V1_2,
        SELECT_TYPES,
        &[
            arg("condition", Ty::Is(T::TENSOR_BOOL8)),
            arg("input1", Ty::T),
            arg("input2", Ty::T),
        ],
        OUT,
    )
    .main(1)],
    check: None,
    runs: SELECT_TYPES,
    lower: Some(|a| lower(LogicalKind::Select, a, &["condition", "input1", "input2"])),
};
