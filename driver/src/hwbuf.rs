//! Hardware-buffer pools ("hardware_buffer_blob", "hardware_buffer") through vnpu-gralloc's
//! mapper: the handle is imported (the mapper validates every int and both fds before
//! anything is mapped), locked with the CPU usage the use needs (read for inputs, write for
//! outputs), and unlocked and freed when the use ends. The pixel memory is a memfd sealed
//! against shrinking and growing, so the device maps it straight through the IOMMU.
//!
//! The client side ([`allocate_blob`], [`memory_from`]) is here too: the conformance runner
//! and the tests pass BLOB buffers as a NN client passes `AHardwareBuffer`s.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;

use crate::hw::Perm;
use thiserror::Error;
use vnpu_gralloc::handle::NATIVE_HANDLE_VERSION;
use vnpu_gralloc::{
    pixel_format, usage, Allocator, BufferDescriptorInfo, BufferHandle, Mapper, MapperError,
    RawHandle, Rect,
};

use crate::hal::{Memory, NativeHandle, MEMORY_HARDWARE_BUFFER, MEMORY_HARDWARE_BUFFER_BLOB};

/// Why a hardware buffer cannot serve as a pool.
#[derive(Debug, Error)]
pub enum HwBufferError {
    /// The mapper refused the handle (forged, freed, of another buffer) or the lock.
    #[error("the mapper refused the buffer: {0}")]
    Mapper(#[from] MapperError),
    /// A valid buffer that does not fit the memory it is passed as.
    #[error("unsuitable hardware buffer: {0}")]
    Unsuitable(&'static str),
}

/// Whether a use may take a non-BLOB buffer: executions may, model pools and buffer copies
/// may not (NN allows "hardware_buffer" in requests only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwUse {
    /// A request pool.
    Execution,
    /// A model pool or an `IBuffer` copy.
    Data,
}

/// An imported hardware buffer, locked for the accesses its use needs; unlocked and freed
/// when dropped.
#[derive(Debug)]
pub struct LockedBuffer {
    handle: BufferHandle,
    locked: bool,
    size: u64,
}

impl LockedBuffer {
    /// Imports `mem`'s handle and locks it for `access`; `size` is then the pool's byte
    /// size (the memory's size for BLOB, the whole pixel memory otherwise).
    pub fn lock(mem: &Memory, access: Perm, hw_use: HwUse) -> Result<Self, HwBufferError> {
        let fds: Vec<RawFd> = mem.handle.fds.iter().map(|f| f.as_raw_fd()).collect();
        let raw = RawHandle {
            version: NATIVE_HANDLE_VERSION,
            fds: &fds,
            ints: &mem.handle.ints,
        };
        let mapper = Mapper::new();
        let mut me = LockedBuffer {
            handle: mapper.import_buffer(raw)?,
            locked: false,
            size: 0,
        };
        let info = mapper.buffer_info(me.handle)?;
        let blob = info.format == pixel_format::BLOB;
        me.size = match mem.name.as_str() {
            MEMORY_HARDWARE_BUFFER_BLOB if !blob || info.height != 1 => {
                return Err(HwBufferError::Unsuitable("not a BLOB buffer of height 1"))
            }
            MEMORY_HARDWARE_BUFFER_BLOB if mem.size > info.size as u64 => {
                return Err(HwBufferError::Unsuitable("memory larger than the buffer"))
            }
            MEMORY_HARDWARE_BUFFER_BLOB => mem.size,
            MEMORY_HARDWARE_BUFFER if blob => {
                return Err(HwBufferError::Unsuitable("a BLOB buffer named non-BLOB"))
            }
            MEMORY_HARDWARE_BUFFER if hw_use == HwUse::Execution => info.size as u64,
            MEMORY_HARDWARE_BUFFER => {
                return Err(HwBufferError::Unsuitable(
                    "non-BLOB buffers serve executions only",
                ))
            }
            _ => return Err(HwBufferError::Unsuitable("not a hardware buffer")),
        };
        let mut cpu = 0;
        if access.allows(Perm::READ) {
            cpu |= usage::CPU_READ_OFTEN;
        }
        if access.allows(Perm::WRITE) {
            cpu |= usage::CPU_WRITE_OFTEN;
        }
        mapper.lock(me.handle, cpu, Rect::default(), None)?;
        me.locked = true;
        Ok(me)
    }

    /// The pool's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Drop for LockedBuffer {
    fn drop(&mut self) {
        let mapper = Mapper::new();
        if self.locked {
            // The release fence is always none: access through the device is synchronous.
            if let Err(e) = mapper.unlock(self.handle) {
                tracing::warn!("unlocking a hardware buffer: {e}");
            }
        }
        if let Err(e) = mapper.free_buffer(self.handle) {
            tracing::warn!("freeing a hardware buffer: {e}");
        }
    }
}

/// A HAL memory named `name` of `size` bytes over a gralloc handle (its fds duplicated).
pub fn memory_from(
    handle: &vnpu_gralloc::NativeHandle,
    name: &str,
    size: u64,
) -> std::io::Result<Memory> {
    let mut fds = Vec::with_capacity(handle.fds().len());
    for &fd in handle.fds() {
        // SAFETY: `fd` belongs to `handle`, which keeps it open for this call.
        let fd: OwnedFd = unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?;
        fds.push(Arc::new(fd));
    }
    Ok(Memory {
        name: name.to_string(),
        size,
        handle: NativeHandle {
            fds,
            ints: handle.ints().to_vec(),
        },
    })
}

/// The usage of the BLOB buffers [`allocate_blob`] makes: CPU read and write, GPU data.
pub const BLOB_USAGE: u64 = usage::CPU_READ_OFTEN | usage::CPU_WRITE_OFTEN | usage::GPU_DATA_BUFFER;

/// Allocates a BLOB buffer holding `bytes` (as a client does with `AHardwareBuffer_allocate`
/// and a locked write) and returns it as a "hardware_buffer_blob" memory.
pub fn allocate_blob(bytes: &[u8]) -> std::io::Result<Memory> {
    let width = i32::try_from(bytes.len().max(1))
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let info = BufferDescriptorInfo::new(width, 1, pixel_format::BLOB, BLOB_USAGE)
        .with_name("vnpu blob pool");
    let mut alloc = Allocator::new()
        .allocate(&info, 1)
        .map_err(std::io::Error::other)?;
    let handle = alloc
        .buffers
        .pop()
        .ok_or_else(|| std::io::Error::other("no buffer allocated"))?;
    let mem = memory_from(&handle, MEMORY_HARDWARE_BUFFER_BLOB, width as u64)?;
    let fd = mem
        .fd()
        .ok_or_else(|| std::io::Error::other("no pixel fd"))?;
    let mut done = 0;
    while done < bytes.len() {
        let n =
            nix::sys::uio::pwrite(fd, &bytes[done..], done as i64).map_err(std::io::Error::from)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        done += n;
    }
    Ok(mem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_locks_for_what_its_usage_allows() {
        let mem = allocate_blob(&[7; 100]).unwrap();
        let b = LockedBuffer::lock(&mem, Perm::READ_WRITE, HwUse::Data).unwrap();
        assert_eq!(b.size(), 100);
        drop(b);
        let mut forged = mem.clone();
        forged.handle.ints[0] ^= 1;
        assert!(matches!(
            LockedBuffer::lock(&forged, Perm::READ, HwUse::Data),
            Err(HwBufferError::Mapper(_))
        ));
        let mut named = mem.clone();
        named.name = MEMORY_HARDWARE_BUFFER.into();
        assert!(matches!(
            LockedBuffer::lock(&named, Perm::READ, HwUse::Execution),
            Err(HwBufferError::Unsuitable(_))
        ));
    }
}
