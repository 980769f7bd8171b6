//! CAST, QUANTIZE and DEQUANTIZE: element type conversions.

use vnpu_emu::kernels::{Convert, ConvertKind};

use super::types::FLOATS;
use super::{arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{OperandType as T, OperationType};

/// The types CAST converts between freely (1.2).
const CAST_ANY: &[T] = &[
    T::TENSOR_FLOAT16,
    T::TENSOR_FLOAT32,
    T::TENSOR_INT32,
    T::TENSOR_QUANT8_ASYMM,
];
/// The types CAST only copies to themselves (1.3).
const CAST_IDENTITY: &[T] = &[
    T::TENSOR_BOOL8,
    T::TENSOR_QUANT16_ASYMM,
    T::TENSOR_QUANT16_SYMM,
    T::TENSOR_QUANT8_ASYMM_SIGNED,
    T::TENSOR_QUANT8_SYMM,
];
const CAST_RUNS: &[T] = &[
    T::TENSOR_FLOAT16,
    T::TENSOR_FLOAT32,
    T::TENSOR_INT32,
    T::TENSOR_QUANT8_ASYMM,
    T::TENSOR_BOOL8,
    T::TENSOR_QUANT16_ASYMM,
    T::TENSOR_QUANT16_SYMM,
    T::TENSOR_QUANT8_ASYMM_SIGNED,
    T::TENSOR_QUANT8_SYMM,
];

const IN: &[super::Arg] = &[arg("input", Ty::T)];

fn lower(kind: ConvertKind, a: &Args<'_>) -> Result<Lowered, CompileError> {
    a.kernel(Convert::from(kind), &["input"])
}

/// The HAL's CAST check: when both shapes are known (and the output not empty), the
/// element counts agree.
fn check_cast(ins: &[&crate::hal::Operand], outs: &[&crate::hal::Operand]) -> Result<(), String> {
    let count = |d: &[u32]| d.iter().map(|&x| u64::from(x)).product::<u64>();
    let (i, o) = (&ins[0].dimensions, &outs[0].dimensions);
    if i.is_empty() || o.is_empty() || count(o) == 0 || count(i) == count(o) {
        Ok(())
    } else {
        Err(format!("CAST output {o:?} does not match input {i:?}"))
    }
}

/// CAST.
pub const CAST: OpDef = OpDef {
    op: OperationType::CAST,
    signatures: &[
        Signature::new(V1_2, CAST_ANY, IN, &[arg("output", Ty::OneOf(CAST_ANY))]),
        Signature::new(V1_3, CAST_IDENTITY, IN, &[arg("output", Ty::T)]),
    ],
    check: Some(check_cast),
    runs: CAST_RUNS,
    lower: Some(|a| lower(ConvertKind::Cast, a)),
};

const QUANT8: &[T] = &[T::TENSOR_QUANT8_ASYMM, T::TENSOR_QUANT8_ASYMM_SIGNED];

/// QUANTIZE.
pub const QUANTIZE: OpDef = OpDef {
    op: OperationType::QUANTIZE,
    signatures: &[Signature::new(
        V1_2,
        FLOATS,
        IN,
        &[arg("output", Ty::OneOf(QUANT8))],
    )],
    check: None,
    runs: FLOATS,
    lower: Some(|a| lower(ConvertKind::Quantize, a)),
};

const DEQUANTIZE_TYPES: &[T] = &[
    T::TENSOR_QUANT8_ASYMM,
    T::TENSOR_QUANT8_ASYMM_SIGNED,
    T::TENSOR_QUANT8_SYMM,
    T::TENSOR_QUANT8_SYMM_PER_CHANNEL,
];

/// DEQUANTIZE.
pub const DEQUANTIZE: OpDef = OpDef {
    op: OperationType::DEQUANTIZE,
    signatures: &[Signature::new(
        V1_0,
        DEQUANTIZE_TYPES,
        IN,
        &[arg("output", Ty::OneOf(FLOATS))],
    )],
    check: None,
    runs: DEQUANTIZE_TYPES,
    lower: Some(|a| lower(ConvertKind::Dequantize, a)),
};
