//! `IDevice::allocate`'s arguments checked into a [`BufferSpec`]: the roles, the operand
//! every role names (one type, scale and zero point) and the combined dimensions, as NN's
//! `validateMemoryDesc` and the sample driver's `allocate` define them.

use std::collections::HashSet;
use std::sync::Arc;

use thiserror::Error;

use crate::hal::{BufferDesc, BufferRole, ErrorStatus, Operand, OperandType};
use crate::hw::Hardware;
use crate::interface::IPreparedModel;
pub use crate::interface::Io;
use crate::validate::known_byte_size;

/// One role of a buffer: an input or output of one prepared model (by its id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Role {
    /// The prepared model's process-unique id ([`crate::interface::DomainRole::model`]).
    pub model: u64,
    /// Input or output.
    pub io: Io,
    /// Index among the model's inputs or outputs.
    pub index: u32,
}

/// Why `allocate` refused its arguments.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DescError {
    #[error("no prepared models")]
    NoModels,
    #[error("no roles")]
    NoRoles,
    #[error("model index {0} out of range")]
    ModelIndex(u32),
    #[error("prepared model {0} is null")]
    NullModel(u32),
    #[error("prepared model {0} is not this device's")]
    ForeignModel(u32),
    #[error("{0:?} index {1} out of range")]
    IoIndex(Io, u32),
    #[error("frequency {0} outside (0, 1]")]
    Frequency(String),
    #[error("role {0:?} {1} given twice")]
    SameRole(Io, u32),
    #[error("the roles' operands differ in {0}")]
    Conflict(&'static str),
    #[error("dimensions {0:?} and {1:?} are incompatible")]
    Dimensions(Vec<u32>, Vec<u32>),
    #[error("a scalar role with dimensions {0:?}")]
    ScalarDimensions(Vec<u32>),
    #[error("extension operand types are not supported")]
    Extension,
    #[error("the buffer's size is unknown (dimensions {0:?})")]
    UnknownSize(Vec<u32>),
}

impl DescError {
    /// The HAL code: argument errors are INVALID_ARGUMENT; a valid description the driver
    /// cannot serve (extension type, unknown size) is GENERAL_FAILURE, as in the sample.
    pub fn status(&self) -> ErrorStatus {
        match self {
            DescError::Extension | DescError::UnknownSize(_) => ErrorStatus::GeneralFailure,
            _ => ErrorStatus::InvalidArgument,
        }
    }
}

/// A checked buffer description.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferSpec {
    /// The operand type every role shares.
    pub r#type: OperandType,
    /// Its scale.
    pub scale: f32,
    /// Its zero point.
    pub zero_point: i32,
    /// The description's and every role's dimensions combined (fully specified).
    pub dimensions: Vec<u32>,
    /// Size in bytes.
    pub size: u64,
    /// Every role given.
    pub roles: HashSet<Role>,
}

/// Combines two dimension vectors: `[]` is unknown rank, 0 an unknown dimension; two known
/// values that differ (or two known ranks that differ) are incompatible.
pub fn combine_dimensions(a: &[u32], b: &[u32]) -> Option<Vec<u32>> {
    if a.is_empty() {
        return Some(b.to_vec());
    }
    if b.is_empty() {
        return Some(a.to_vec());
    }
    if a.len() != b.len() {
        return None;
    }
    a.iter()
        .zip(b)
        .map(|(&x, &y)| match (x, y) {
            (0, y) => Some(y),
            (x, 0) => Some(x),
            (x, y) => (x == y).then_some(x),
        })
        .collect()
}

/// Checks `allocate`'s arguments for a device `hw`.
pub fn check(
    hw: &Arc<Hardware>,
    desc: &BufferDesc,
    models: &[Option<Arc<dyn IPreparedModel>>],
    input_roles: &[BufferRole],
    output_roles: &[BufferRole],
) -> Result<BufferSpec, DescError> {
    if models.is_empty() {
        return Err(DescError::NoModels);
    }
    if input_roles.is_empty() && output_roles.is_empty() {
        return Err(DescError::NoRoles);
    }
    let mut roles = HashSet::new();
    let mut operands: Vec<Operand> = Vec::new();
    let all = input_roles
        .iter()
        .map(|r| (Io::Input, r))
        .chain(output_roles.iter().map(|r| (Io::Output, r)));
    for (io, role) in all {
        let p = models
            .get(role.model_index as usize)
            .ok_or(DescError::ModelIndex(role.model_index))?
            .as_ref()
            .ok_or(DescError::NullModel(role.model_index))?;
        let m = p
            .domain_role(io, role.io_index)
            .filter(|m| m.device == Arc::as_ptr(hw) as usize)
            .ok_or(DescError::ForeignModel(role.model_index))?;
        let operand = m.operand.ok_or(DescError::IoIndex(io, role.io_index))?;
        if !(role.frequency > 0.0 && role.frequency <= 1.0) {
            return Err(DescError::Frequency(role.frequency.to_string()));
        }
        let key = Role {
            model: m.model,
            io,
            index: role.io_index,
        };
        if !roles.insert(key) {
            return Err(DescError::SameRole(io, role.io_index));
        }
        operands.push(operand);
    }
    let first = &operands[0];
    let mut dims = desc.dimensions.clone();
    for o in &operands {
        if o.r#type != first.r#type {
            return Err(DescError::Conflict("type"));
        }
        if o.scale != first.scale {
            return Err(DescError::Conflict("scale"));
        }
        if o.zero_point != first.zero_point {
            return Err(DescError::Conflict("zero point"));
        }
        if o.extra_params != first.extra_params {
            return Err(DescError::Conflict("extra parameters"));
        }
        dims = combine_dimensions(&dims, &o.dimensions)
            .ok_or_else(|| DescError::Dimensions(dims.clone(), o.dimensions.clone()))?;
    }
    if first.r#type.is_extension() {
        return Err(DescError::Extension);
    }
    if first.r#type.is_scalar() && !dims.is_empty() {
        return Err(DescError::ScalarDimensions(dims));
    }
    let size = known_byte_size(first.r#type, &dims)
        .filter(|&s| s > 0)
        .ok_or_else(|| DescError::UnknownSize(dims.clone()))?;
    Ok(BufferSpec {
        r#type: first.r#type,
        scale: first.scale,
        zero_point: first.zero_point,
        dimensions: dims,
        size,
        roles,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimensions_combine() {
        assert_eq!(combine_dimensions(&[], &[1, 2]), Some(vec![1, 2]));
        assert_eq!(combine_dimensions(&[0, 2], &[3, 0]), Some(vec![3, 2]));
        assert_eq!(combine_dimensions(&[1, 2], &[1]), None);
        assert_eq!(combine_dimensions(&[1, 2], &[1, 3]), None);
        assert_eq!(combine_dimensions(&[], &[]), Some(vec![]));
    }
}
