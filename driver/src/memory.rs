//! Memory pools: checking a `hidl_memory` and reaching its bytes, either by reading them
//! (model pools, snapshotted at preparation), by mapping them into the device through the
//! IOMMU (request pools that cannot shrink), or by staging them ([`crate::execute::staging`]: any
//! other request pool). Hardware buffers go through the gralloc mapper first
//! ([`crate::hwbuf`]): [`open_pool`] holds their lock for as long as the pool is used.

use std::ops::Deref;
use std::os::fd::{AsFd, BorrowedFd};

use thiserror::Error;
/// A shared-memory access error.
pub use vnpu_emu::error::MemError;
use vnpu_emu::iommu::Perm;
/// Host shared memory (a sealed memfd), for the driver's staging regions and queues.
pub use vnpu_emu::shm::{cannot_shrink, SharedRegion};

use crate::hal::{
    ErrorStatus, Memory, MEMORY_ASHMEM, MEMORY_HARDWARE_BUFFER, MEMORY_HARDWARE_BUFFER_BLOB,
    MEMORY_MMAP_FD,
};
use crate::hwbuf::{HwBufferError, HwUse, LockedBuffer};

/// Why a pool cannot be used.
#[derive(Debug, Error)]
pub enum PoolError {
    #[error(transparent)]
    HardwareBuffer(#[from] HwBufferError),
    #[error("memory kind '{0}' is not supported")]
    UnsupportedKind(String),
    #[error("malformed '{kind}' handle: {reason}")]
    BadHandle { kind: String, reason: String },
    #[error("pool of {size} bytes does not fit its file ({file} bytes from offset {offset})")]
    TooSmall { size: u64, file: u64, offset: u64 },
    #[error("cannot read pool: {0}")]
    Io(#[from] std::io::Error),
}

/// A pool's file range: `size` bytes of `fd` from `offset`, and what the device may do
/// with it (mmap_fd's `prot`; ashmem is read-write).
#[derive(Debug, Clone, Copy)]
pub struct PoolRange<'a> {
    pub fd: BorrowedFd<'a>,
    pub offset: u64,
    pub size: u64,
    pub perm: Perm,
}

impl PoolError {
    /// The status a preparation reports for a model pool that fails: a handle the
    /// gralloc mapper refuses is a GENERAL_FAILURE, any other bad pool INVALID_ARGUMENT
    /// (as the sample driver reports a model pool it cannot map).
    pub fn preparation_status(&self) -> ErrorStatus {
        match self {
            PoolError::HardwareBuffer(HwBufferError::Mapper(_)) => ErrorStatus::GeneralFailure,
            _ => ErrorStatus::InvalidArgument,
        }
    }
}

/// A pool opened for one use: its file range and, for a hardware buffer, the mapper lock
/// held until this is dropped.
#[derive(Debug)]
pub struct OpenPool<'a> {
    range: PoolRange<'a>,
    whole: bool,
    _lock: Option<LockedBuffer>,
}

impl<'a> OpenPool<'a> {
    /// A shared-memory range checked before (a burst's pinned pool: its file is sealed
    /// against shrinking, so the check still holds).
    pub fn checked(range: PoolRange<'a>) -> Self {
        OpenPool {
            range,
            whole: false,
            _lock: None,
        }
    }

    /// The bytes an argument of `length` may use: `length`, or the whole pool for a
    /// non-BLOB hardware buffer (HAL size 0: its one argument is the whole buffer, with
    /// offset and length 0).
    pub fn argument_len(&self, length: u32) -> u64 {
        match self.whole {
            true => self.range.size,
            false => u64::from(length),
        }
    }
}

impl<'a> Deref for OpenPool<'a> {
    type Target = PoolRange<'a>;
    fn deref(&self) -> &PoolRange<'a> {
        &self.range
    }
}

/// Checks a memory handle and opens the file range it names for `access`. Shared memory
/// keeps the access its handle grants; a hardware buffer is imported and locked for
/// `access` ([`crate::hwbuf`]) and the device gets exactly that.
pub fn open_pool(mem: &Memory, access: Perm, hw_use: HwUse) -> Result<OpenPool<'_>, PoolError> {
    if !matches!(
        mem.name.as_str(),
        MEMORY_HARDWARE_BUFFER_BLOB | MEMORY_HARDWARE_BUFFER
    ) {
        return Ok(OpenPool {
            range: pool_range(mem)?,
            whole: false,
            _lock: None,
        });
    }
    let lock = LockedBuffer::lock(mem, access, hw_use)?;
    let fd = mem
        .handle
        .fds
        .first()
        .ok_or_else(|| PoolError::BadHandle {
            kind: mem.name.clone(),
            reason: "no fd".into(),
        })?
        .as_fd();
    Ok(OpenPool {
        range: PoolRange {
            fd,
            offset: 0,
            size: lock.size(),
            perm: access,
        },
        whole: mem.name == MEMORY_HARDWARE_BUFFER,
        _lock: Some(lock),
    })
}

/// Checks a shared-memory handle ("ashmem", "mmap_fd") and returns the file range it names.
fn pool_range(mem: &Memory) -> Result<PoolRange<'_>, PoolError> {
    let bad = |reason: &str| PoolError::BadHandle {
        kind: mem.name.clone(),
        reason: reason.into(),
    };
    let h = &mem.handle;
    let (offset, perm) = match mem.name.as_str() {
        MEMORY_ASHMEM => {
            if h.fds.len() != 1 || !h.ints.is_empty() {
                return Err(bad("expected 1 fd and 0 ints"));
            }
            (0, Perm::READ_WRITE)
        }
        MEMORY_MMAP_FD => {
            if h.fds.len() != 1 || h.ints.len() != 3 {
                return Err(bad(
                    "expected 1 fd and 3 ints {prot, offset low, offset high}",
                ));
            }
            // The device may do what the client's protection allows.
            let prot = h.ints[0];
            let bits = u8::from(prot & libc::PROT_READ != 0)
                | (u8::from(prot & libc::PROT_WRITE != 0) << 1);
            let perm =
                Perm::from_bits(bits).ok_or_else(|| bad("prot allows neither read nor write"))?;
            let offset = (h.ints[1] as u32 as u64) | ((h.ints[2] as u32 as u64) << 32);
            (offset, perm)
        }
        other => return Err(PoolError::UnsupportedKind(other.to_string())),
    };
    let fd = h.fds[0].as_fd();
    let file = nix::sys::stat::fstat(fd)
        .map_err(std::io::Error::from)?
        .st_size as u64;
    if offset.checked_add(mem.size).is_none_or(|end| end > file) || mem.size == 0 {
        return Err(PoolError::TooSmall {
            size: mem.size,
            file,
            offset,
        });
    }
    Ok(PoolRange {
        fd,
        offset,
        size: mem.size,
        perm,
    })
}

/// Reads a whole pool (a snapshot: the client may change the memory afterwards).
pub fn read_pool(mem: &Memory) -> Result<Vec<u8>, PoolError> {
    let r = open_pool(mem, Perm::READ, HwUse::Data)?;
    read_range(&r, 0, r.size as usize)
}

impl PoolRange<'_> {
    /// Whether the device may map the pool directly: only files sealed against shrinking
    /// (anything else is staged, see [`crate::execute::staging`]).
    pub fn mappable(&self) -> bool {
        cannot_shrink(self.fd)
    }
}

/// Writes `data` at `offset` within a pool, with positioned writes.
pub fn write_range(r: &PoolRange<'_>, offset: u64, data: &[u8]) -> Result<(), PoolError> {
    if offset
        .checked_add(data.len() as u64)
        .is_none_or(|end| end > r.size)
    {
        return Err(PoolError::TooSmall {
            size: r.size,
            file: offset,
            offset: r.offset,
        });
    }
    let mut done = 0usize;
    while done < data.len() {
        let at = r.offset + offset + done as u64;
        let at = i64::try_from(at).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        let n = nix::sys::uio::pwrite(r.fd, &data[done..], at).map_err(std::io::Error::from)?;
        if n == 0 {
            return Err(PoolError::Io(std::io::ErrorKind::WriteZero.into()));
        }
        done += n;
    }
    Ok(())
}

/// Reads `len` bytes at `offset` within a pool.
pub fn read_range(r: &PoolRange<'_>, offset: u64, len: usize) -> Result<Vec<u8>, PoolError> {
    let too_small = || PoolError::TooSmall {
        size: r.size,
        file: offset,
        offset: r.offset,
    };
    if offset
        .checked_add(len as u64)
        .is_none_or(|end| end > r.size)
    {
        return Err(too_small());
    }
    let mut buf = vec![0u8; len];
    let mut done = 0usize;
    while done < len {
        let at = r.offset + offset + done as u64;
        let at = i64::try_from(at).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        let n = nix::sys::uio::pread(r.fd, &mut buf[done..], at).map_err(std::io::Error::from)?;
        if n == 0 {
            return Err(too_small());
        }
        done += n;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ashmem_pool_reads_back() {
        let m = Memory::ashmem_with(b"constant bytes").unwrap();
        assert_eq!(read_pool(&m).unwrap(), b"constant bytes");
    }

    #[test]
    fn bad_handles_are_rejected() {
        let mut m = Memory::ashmem_with(b"abc").unwrap();
        m.size = 4096;
        assert!(matches!(pool_range(&m), Err(PoolError::TooSmall { .. })));
        let mut m = Memory::ashmem_with(b"abc").unwrap();
        m.handle.ints.push(1);
        assert!(matches!(pool_range(&m), Err(PoolError::BadHandle { .. })));
        let mut m = Memory::ashmem_with(b"abc").unwrap();
        m.name = "other".into();
        assert!(matches!(pool_range(&m), Err(PoolError::UnsupportedKind(_))));
        m.name = "hardware_buffer_blob".into();
        let e = open_pool(&m, Perm::READ, HwUse::Data).unwrap_err();
        assert_eq!(e.preparation_status(), ErrorStatus::GeneralFailure);
    }
}
