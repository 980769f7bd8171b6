//! Sync fences for fenced execution: eventfd fences (`vnpu_gralloc::Fence`, readable once
//! signalled, never consumed by a wait) passed as one-fd native handles.

use std::sync::Arc;

use thiserror::Error;
use vnpu_gralloc::Fence;

use crate::hal::{ErrorStatus, NativeHandle, OptionalTimePoint};

/// Why waiting on a client's fence failed.
#[derive(Debug, Error)]
pub enum FenceError {
    #[error("a null sync fence handle")]
    Null,
    #[error("the deadline passed while waiting for a sync fence")]
    Deadline,
    #[error("the sync fence cannot be waited on: {0}")]
    Bad(String),
    #[error("creating a sync fence: {0}")]
    Io(#[from] std::io::Error),
}

impl FenceError {
    /// The HAL code: a null handle is INVALID_ARGUMENT, a deadline missed while waiting
    /// MISSED_DEADLINE_TRANSIENT, anything else GENERAL_FAILURE.
    pub fn status(&self) -> ErrorStatus {
        match self {
            FenceError::Null => ErrorStatus::InvalidArgument,
            FenceError::Deadline => ErrorStatus::MissedDeadlineTransient,
            _ => ErrorStatus::GeneralFailure,
        }
    }
}

/// Checks that no handle of `wait_for` is null (a handle without exactly one fd).
pub fn check_handles(wait_for: &[NativeHandle]) -> Result<(), FenceError> {
    match wait_for.iter().all(|h| h.fds.len() == 1) {
        true => Ok(()),
        false => Err(FenceError::Null),
    }
}

/// Waits for every fence of `wait_for` until `deadline` (forever without one).
pub fn wait_all(wait_for: &[NativeHandle], deadline: OptionalTimePoint) -> Result<(), FenceError> {
    check_handles(wait_for)?;
    for h in wait_for {
        let fd = h.fds[0].try_clone()?;
        let fence = Fence::from_fd(fd);
        let timeout_ms = match deadline.0 {
            None => -1,
            Some(t) => {
                let left = t.saturating_sub(OptionalTimePoint::now_ns());
                if left == 0 && !fence.is_signaled() {
                    return Err(FenceError::Deadline);
                }
                i32::try_from(left.div_ceil(1_000_000)).unwrap_or(i32::MAX)
            }
        };
        match fence.wait(timeout_ms) {
            Ok(()) => {}
            Err(vnpu_gralloc::MapperError::NoResources(_)) => return Err(FenceError::Deadline),
            Err(e) => return Err(FenceError::Bad(e.to_string())),
        }
    }
    Ok(())
}

/// A fence the driver signals, and the handle a client waits on.
#[derive(Debug)]
pub struct SyncFence(Fence);

impl SyncFence {
    /// An unsignalled fence.
    pub fn new() -> Result<SyncFence, FenceError> {
        Ok(SyncFence(Fence::new()?))
    }

    /// Signals it (idempotent).
    pub fn signal(&self) -> Result<(), FenceError> {
        Ok(self.0.signal()?)
    }

    /// A handle on it (a dup of its fd) for a client.
    pub fn handle(&self) -> Result<NativeHandle, FenceError> {
        use std::os::fd::AsFd;
        let fd = self.0.as_fd().try_clone_to_owned()?;
        Ok(NativeHandle {
            fds: vec![Arc::new(fd)],
            ints: Vec::new(),
        })
    }
}

/// The earlier of a deadline and now + a duration (fenced execution's `duration`).
pub fn earlier(deadline: OptionalTimePoint, duration_ns: Option<u64>) -> OptionalTimePoint {
    match (deadline.0, duration_ns) {
        (d, None) => OptionalTimePoint(d),
        (None, Some(ns)) => OptionalTimePoint::after_ns(ns),
        (Some(d), Some(ns)) => {
            OptionalTimePoint(Some(d.min(OptionalTimePoint::after_ns(ns).0.unwrap_or(d))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_wait_and_time_out() {
        let f = SyncFence::new().unwrap();
        let h = f.handle().unwrap();
        let soon = OptionalTimePoint::after_ns(2_000_000);
        assert!(matches!(
            wait_all(std::slice::from_ref(&h), soon),
            Err(FenceError::Deadline)
        ));
        f.signal().unwrap();
        wait_all(&[h.clone(), h], OptionalTimePoint::NONE).unwrap();
        let null = NativeHandle::default();
        assert_eq!(
            wait_all(&[null], OptionalTimePoint::NONE)
                .unwrap_err()
                .status(),
            ErrorStatus::InvalidArgument
        );
    }
}
