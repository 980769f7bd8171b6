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
/// element counts agree. A count past `u64` (a hostile shape) is refused, never wrapped.
fn check_cast(ins: &[&crate::hal::Operand], outs: &[&crate::hal::Operand]) -> Result<(), String> {
    let count = |d: &[u32]| d.iter().try_fold(1u64, |a, &x| a.checked_mul(u64::from(x)));
    let (i, o) = (&ins[0].dimensions, &outs[0].dimensions);
    if i.is_empty() || o.is_empty() {
        return Ok(());
    }
    match (count(i), count(o)) {
        (_, Some(0)) => Ok(()),
        (Some(a), Some(b)) if a == b => Ok(()),
        (Some(_), Some(_)) => Err(format!("CAST output {o:?} does not match input {i:?}")),
        _ => Err(format!("CAST of {i:?} to {o:?}: too many elements")),
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

#[cfg(test)]
mod tests {
    use super::check_cast;
    use crate::hal::Operand;

    fn shaped(dimensions: &[u32]) -> Operand {
        Operand {
            dimensions: dimensions.to_vec(),
            ..Operand::default()
        }
    }

    /// Found by the tflite_import fuzz target: the element count of a hostile shape
    /// overflowed (a panic with overflow checks, a wrong answer without).
    #[test]
    fn a_count_past_u64_is_refused_not_wrapped() {
        let huge = shaped(&[u32::MAX; 3]);
        let one = shaped(&[1]);
        assert!(check_cast(&[&huge], &[&one]).is_err());
        assert!(check_cast(&[&one], &[&huge]).is_err());
        assert!(check_cast(&[&huge], &[&huge]).is_err());
        assert!(check_cast(&[&shaped(&[2, 3])], &[&shaped(&[6])]).is_ok());
        assert!(check_cast(&[&shaped(&[2, 3])], &[&shaped(&[5])]).is_err());
        assert!(check_cast(&[&huge], &[&shaped(&[0])]).is_ok());
    }
}
