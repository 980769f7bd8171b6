//! EQUAL, NOT_EQUAL, LESS, LESS_EQUAL, GREATER, GREATER_EQUAL: broadcast comparisons with
//! a bool8 output.

use vnpu_emu::kernels::{Compare, CompareKind};

use super::{arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{OperandType as T, OperationType};

/// The input types the HAL allows (quant8 signed from 1.3); the device runs them all.
const TYPES: &[T] = &[
    T::TENSOR_BOOL8,
    T::TENSOR_FLOAT16,
    T::TENSOR_FLOAT32,
    T::TENSOR_INT32,
    T::TENSOR_QUANT8_ASYMM,
    T::TENSOR_QUANT8_ASYMM_SIGNED,
];

const SIG: &[Signature] = &[Signature::new(
    V1_2,
    TYPES,
    &[arg("input1", Ty::T), arg("input2", Ty::T)],
    &[arg("output", Ty::Is(T::TENSOR_BOOL8))],
)];

fn lower(kind: CompareKind, a: &Args<'_>) -> Result<Lowered, CompileError> {
    a.kernel(Compare { kind }, &["input1", "input2"])
}

macro_rules! compare_def {
    ($(#[$doc:meta] $name:ident, $kind:ident;)*) => {$(
        #[$doc]
        pub const $name: OpDef = OpDef {
            op: OperationType::$name,
            signatures: SIG,
            check: None,
            runs: TYPES,
            lower: Some(|a| lower(CompareKind::$kind, a)),
        };
    )*};
}

compare_def! {
    /// EQUAL.
    EQUAL, Equal;
    /// NOT_EQUAL.
    NOT_EQUAL, NotEqual;
    /// LESS.
    LESS, Less;
    /// LESS_EQUAL.
    LESS_EQUAL, LessEqual;
    /// GREATER.
    GREATER, Greater;
    /// GREATER_EQUAL.
    GREATER_EQUAL, GreaterEqual;
}
