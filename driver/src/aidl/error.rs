//! The AIDL face's errors: a call that fails throws a service-specific exception whose code
//! is an [`ErrorStatus`] (never NONE).

use thiserror::Error;

use crate::hal::ErrorStatus;

/// A service-specific exception carrying the HAL's error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("service-specific error {0}")]
pub struct ServiceSpecific(pub ErrorStatus);

/// What an AIDL call returns: its value, or the service-specific error.
pub type AidlResult<T> = Result<T, ServiceSpecific>;

/// INVALID_ARGUMENT, the most common error.
pub const INVALID: ServiceSpecific = ServiceSpecific(ErrorStatus::InvalidArgument);

/// `Ok(())` for NONE, else the error (a 1.3 launch status as an AIDL outcome).
pub fn check(status: ErrorStatus) -> AidlResult<()> {
    match status {
        ErrorStatus::None => Ok(()),
        s => Err(ServiceSpecific(s)),
    }
}
