//! eventfd-based fences.
//!
//! A fence is an fd that becomes readable (`POLLIN`) when signalled, like an
//! Android sync_file. Waiting polls and never consumes the signal, so one
//! fence may be shared (dup'd) by many waiters. Ownership follows the
//! AIMapper rules: a fence passed to `lock` is owned (and closed) by the
//! mapper, even on error; a fence returned by `unlock` is owned by the caller.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

use crate::error::MapperError;

/// How long `lock` waits for an acquire fence before giving up with NO_RESOURCES.
pub const ACQUIRE_TIMEOUT_MS: i32 = 5000;

/// An eventfd fence.
#[derive(Debug)]
pub struct Fence {
    fd: OwnedFd,
}

impl Fence {
    /// An unsignalled fence.
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: eventfd with constant flags; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    /// A fence that is already signalled.
    pub fn signaled() -> std::io::Result<Self> {
        let f = Self::new()?;
        f.signal()?;
        Ok(f)
    }

    /// Signals the fence (idempotent).
    pub fn signal(&self) -> std::io::Result<()> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local to our eventfd.
        let r = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
        if r == 8 {
            Ok(())
        } else {
            let e = std::io::Error::last_os_error();
            // A saturated counter is still signalled.
            if e.raw_os_error() == Some(libc::EAGAIN) {
                Ok(())
            } else {
                Err(e)
            }
        }
    }

    /// Whether the fence is signalled now.
    pub fn is_signaled(&self) -> bool {
        wait_fd(self.fd.as_fd(), 0).is_ok()
    }

    /// Waits up to `timeout_ms` (−1 = forever).
    pub fn wait(&self, timeout_ms: i32) -> Result<(), MapperError> {
        wait_fd(self.fd.as_fd(), timeout_ms)
    }

    /// Wraps an fd the caller owns.
    pub fn from_fd(fd: OwnedFd) -> Self {
        Self { fd }
    }

    /// The fd, giving up ownership.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// Raw fd, giving up ownership (for C callers).
    pub fn into_raw_fd(self) -> RawFd {
        self.fd.into_raw_fd()
    }
}

impl AsFd for Fence {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Waits until `fd` is readable. Errors: an fd that cannot be polled is
/// BAD_VALUE; a timeout is NO_RESOURCES (retryable).
pub fn wait_fd(fd: BorrowedFd<'_>, timeout_ms: i32) -> Result<(), MapperError> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd on the stack.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(MapperError::BadValue("fence cannot be polled"));
        }
        if r == 0 {
            return Err(MapperError::NoResources("fence wait timed out"));
        }
        if p.revents & libc::POLLNVAL != 0 {
            return Err(MapperError::BadValue("fence fd is not open"));
        }
        if p.revents & libc::POLLERR != 0 {
            return Err(MapperError::BadValue("fence signalled an error"));
        }
        return Ok(());
    }
}
