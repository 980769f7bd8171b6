//! Validation of HAL values that needs nothing but the HAL's own types: the error every
//! check returns ([`ValidationError`], INVALID_ARGUMENT, with a [`ValidationKind`]), the
//! preparation and execution parameters, memory pools, and the size of a fundamental
//! operand type. Every failure is INVALID_ARGUMENT.
//!
//! Models and requests are validated by `crate::validate`, above the operation and
//! extension registries their checks read.

use super::types::*;

/// What part of a HAL value failed validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValidationKind {
    /// An execution preference, priority or measure-timing value.
    Parameter,
    /// A memory pool (handle shape, protection, size).
    Memory,
    /// An operand (type, rank, scale, zero point, lifetime, location, extra parameters).
    Operand,
    /// An operation (type, operand indexes, data flow, consumers).
    Operation,
    /// An operation's operands fit none of its signatures (see `crate::ops`).
    Signature,
    /// A subgraph's input or output index list.
    IoIndexes,
    /// SUBGRAPH references (cycles).
    SubgraphReference,
    /// Extension names and prefixes.
    Extension,
    /// A request's arguments or pools.
    Request,
}

/// A HAL value failed validation. The HAL code is always INVALID_ARGUMENT.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValidationError {
    kind: ValidationKind,
    message: String,
}

impl ValidationError {
    /// A validation error of `kind` with a human-readable message.
    pub fn new(kind: ValidationKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// What failed.
    pub fn kind(&self) -> ValidationKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HAL status for this error: INVALID_ARGUMENT.
    pub fn status(&self) -> ErrorStatus {
        ErrorStatus::InvalidArgument
    }
}

/// Returns a [`ValidationError`] of a [`ValidationKind`] with a formatted message.
macro_rules! bail {
    ($kind:ident, $($arg:tt)*) => {
        return Err($crate::hal::validate::ValidationError::new(
            $crate::hal::validate::ValidationKind::$kind,
            format!($($arg)*),
        ))
    };
}
pub(crate) use bail;

/// Validate an execution preference.
pub fn validate_execution_preference(p: ExecutionPreference) -> Result<(), ValidationError> {
    if p.name().is_none() {
        bail!(Parameter, "invalid execution preference {}", p.0);
    }
    Ok(())
}

/// Validate a priority.
pub fn validate_priority(p: Priority) -> Result<(), ValidationError> {
    if p.name().is_none() {
        bail!(Parameter, "invalid priority {}", p.0);
    }
    Ok(())
}

/// Validate a measure-timing flag.
pub fn validate_measure_timing(m: MeasureTiming) -> Result<(), ValidationError> {
    if m.name().is_none() {
        bail!(Parameter, "invalid measure timing {}", m.0);
    }
    Ok(())
}

/// Validate a hidl_memory: a known name with the right number of fds and ints.
pub fn validate_memory(memory: &Memory) -> Result<(), ValidationError> {
    let fds = memory.handle.fds.len();
    let ints = memory.handle.ints.len();
    match memory.name.as_str() {
        MEMORY_ASHMEM => {
            if fds != 1 || ints != 0 {
                bail!(
                    Memory,
                    "ashmem memory must have 1 fd and 0 ints, has {fds} and {ints}"
                );
            }
        }
        MEMORY_MMAP_FD => {
            if fds != 1 || ints != 3 {
                bail!(
                    Memory,
                    "mmap_fd memory must have 1 fd and 3 ints, has {fds} and {ints}"
                );
            }
            let prot = memory.handle.ints[0];
            if prot & !(libc::PROT_READ | libc::PROT_WRITE) != 0 {
                bail!(Memory, "mmap_fd memory has invalid protection {prot:#x}");
            }
            let offset = (u64::from(memory.handle.ints[2] as u32) << 32)
                | u64::from(memory.handle.ints[1] as u32);
            if offset
                .checked_add(memory.size)
                .is_none_or(|end| end > i64::MAX as u64)
            {
                bail!(
                    Memory,
                    "mmap_fd memory offset {offset} + size {} overflows",
                    memory.size
                );
            }
        }
        MEMORY_HARDWARE_BUFFER_BLOB => {
            if fds == 0 {
                bail!(Memory, "hardware_buffer_blob memory has no fd");
            }
            if memory.size == 0 {
                bail!(Memory, "hardware_buffer_blob memory has size 0");
            }
        }
        MEMORY_HARDWARE_BUFFER => {
            if fds == 0 {
                bail!(Memory, "hardware_buffer memory has no fd");
            }
            if memory.size != 0 {
                bail!(
                    Memory,
                    "hardware_buffer memory must have size 0, has {}",
                    memory.size
                );
            }
        }
        other => bail!(Memory, "unsupported memory type {other:?}"),
    }
    Ok(())
}

/// Size in bytes of a non-extension operand of type `t` with `dims` (scalars: the element
/// size; unknown dimensions give 0). `None` on overflow or for types without a size.
pub fn operand_size(t: OperandType, dims: &[u32]) -> Option<u64> {
    let es = t.element_size()? as u64;
    if t.is_scalar() {
        return Some(es);
    }
    dims.iter()
        .try_fold(es, |acc, &d| acc.checked_mul(u64::from(d)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preference_priority() {
        assert!(validate_execution_preference(ExecutionPreference(-1)).is_err());
        assert!(validate_execution_preference(ExecutionPreference(3)).is_err());
        assert!(validate_priority(Priority(3)).is_err());
        validate_priority(Priority::HIGH).unwrap();
    }
}
