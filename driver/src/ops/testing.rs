//! Helpers for the definitions' unit tests: small models validated at a level.

use crate::hal::builder::ModelBuilder;
use crate::hal::{HalVersion, Model, OperandType};
use crate::validate::validate_model_at;

/// The little-endian bytes of int32 values.
pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A constant INT32 scalar.
pub fn int(b: &mut ModelBuilder, v: i32) -> u32 {
    b.constant(OperandType::INT32, &[], &v.to_le_bytes())
}

/// A constant BOOL scalar.
pub fn flag(b: &mut ModelBuilder, v: bool) -> u32 {
    b.constant(OperandType::BOOL, &[], &[u8::from(v)])
}

/// A constant TENSOR_INT32 of `dims`.
pub fn ints(b: &mut ModelBuilder, dims: &[u32], v: &[i32]) -> u32 {
    b.constant(OperandType::TENSOR_INT32, dims, &i32_bytes(v))
}

/// Sets an operand's scale and zero point.
pub fn quant(b: &mut ModelBuilder, i: u32, scale: f32, zero_point: i32) {
    if let Some(o) = b.operand_mut(i) {
        o.scale = scale;
        o.zero_point = zero_point;
    }
}

/// `model` validated at `level`, the error as text.
pub fn check(model: &Model, level: HalVersion) -> Result<(), String> {
    validate_model_at(model, level).map_err(|e| e.to_string())
}
