//! What the registries say of any operand type, fundamental or extension: whether it is a
//! scalar, and the byte size of a value.

use crate::hal::OperandType;

/// Whether a tensor operand has unknown rank or any unknown dimension.
pub fn has_unspecified_dimensions(t: OperandType, dims: &[u32]) -> bool {
    !is_scalar_type(t) && (dims.is_empty() || dims.contains(&0))
}

/// A scalar type: a non-extension scalar, or an extension type (with the driver's internal
/// prefix) its extension declares a scalar.
pub fn is_scalar_type(t: OperandType) -> bool {
    t.is_scalar() || crate::extensions::operand_type_def(t).is_some_and(|(_, d)| !d.is_tensor)
}

/// The byte size of a value of `ty` with these dimensions, when every dimension is known
/// (saturating: no real buffer is `u64::MAX` bytes).
pub fn known_byte_size(ty: OperandType, dims: &[u32]) -> Option<u64> {
    if ty.is_extension() {
        return crate::extensions::byte_size(ty, dims);
    }
    let element = ty.element_size()? as u64;
    if ty.is_scalar() {
        return Some(element);
    }
    if dims.contains(&0) || (dims.is_empty() && !ty.is_scalar()) {
        return None;
    }
    Some(
        dims.iter()
            .fold(element, |n, &d| n.saturating_mul(u64::from(d))),
    )
}
