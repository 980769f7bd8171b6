//! Validation of HAL values received from a client.

use super::types::*;

/// A HAL value failed validation. The HAL code is always INVALID_ARGUMENT.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValidationError {
    message: String,
}

impl ValidationError {
    /// A validation error with a human-readable message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
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

/// Validate a model (first increment: always Ok; the full checks follow).
pub fn validate_model(_model: &Model) -> Result<(), ValidationError> {
    Ok(())
}

/// Validate a request against its model.
pub fn validate_request(
    _request: &Request,
    _model: &Model,
    _allow_unspecified_output: bool,
) -> Result<(), ValidationError> {
    Ok(())
}

/// Validate an execution preference.
pub fn validate_execution_preference(p: ExecutionPreference) -> Result<(), ValidationError> {
    if p.name().is_some() {
        Ok(())
    } else {
        Err(ValidationError::new(format!(
            "invalid execution preference {}",
            p.0
        )))
    }
}

/// Validate a priority.
pub fn validate_priority(p: Priority) -> Result<(), ValidationError> {
    if p.name().is_some() {
        Ok(())
    } else {
        Err(ValidationError::new(format!("invalid priority {}", p.0)))
    }
}
