//! Shared memory regions: a memfd mapped with `MAP_SHARED`, touched only through raw
//! pointers (copies and atomics), because another party (the host, another process,
//! another engine) may write it at any time.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use memmap2::{MmapOptions, MmapRaw};
use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};

use crate::error::MemError;

/// Whether the file behind `fd` is sealed against shrinking (a memfd with
/// `F_SEAL_SHRINK`, as ashmem regions and gralloc buffers are). Only such files may be
/// mapped into a device: any other file can be truncated under the mapping, and the next
/// access to the lost pages raises SIGBUS in whoever touches them.
pub fn cannot_shrink(fd: BorrowedFd<'_>) -> bool {
    fcntl(fd, FcntlArg::F_GET_SEALS)
        .is_ok_and(|seals| SealFlag::from_bits_truncate(seals).contains(SealFlag::F_SEAL_SHRINK))
}

/// A memfd-backed shared mapping with bounds-checked, reference-free access.
#[derive(Debug)]
pub struct SharedRegion {
    fd: OwnedFd,
    map: MmapRaw,
}

impl SharedRegion {
    /// Creates a zero-filled memfd of `len` bytes, sealed against shrinking and growing
    /// (so it can be mapped into a device: see [`cannot_shrink`]), and maps it.
    pub fn new(name: &str, len: usize) -> Result<Self, MemError> {
        if len == 0 {
            return Err(MemError::Empty);
        }
        let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)
            .map_err(|e| MemError::Os(e.into()))?;
        let size = i64::try_from(len).map_err(|_| MemError::OutOfBounds {
            offset: 0,
            len: len as u64,
        })?;
        nix::unistd::ftruncate(&fd, size).map_err(|e| MemError::Os(e.into()))?;
        let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).map_err(|e| MemError::Os(e.into()))?;
        Self::map(fd, 0, len)
    }

    /// Maps `len` bytes of `fd` from `offset` (any offset: the page-aligned part is
    /// hidden). The caller has checked that the file is large enough.
    pub fn map(fd: OwnedFd, offset: u64, len: usize) -> Result<Self, MemError> {
        if len == 0 {
            return Err(MemError::Empty);
        }
        let map = MmapOptions::new()
            .offset(offset)
            .len(len)
            .map_raw(&fd)
            .map_err(MemError::Os)?;
        Ok(Self { fd, map })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Checks `[offset, offset + len)` lies inside the region.
    #[inline]
    pub fn check(&self, offset: u64, len: u64) -> Result<usize, MemError> {
        let end = offset
            .checked_add(len)
            .ok_or(MemError::OutOfBounds { offset, len })?;
        if end > self.len() as u64 {
            return Err(MemError::OutOfBounds { offset, len });
        }
        Ok(offset as usize)
    }

    /// Raw pointer to `offset`, after a bounds check of `len` bytes.
    #[inline]
    pub fn ptr(&self, offset: u64, len: u64) -> Result<*mut u8, MemError> {
        let off = self.check(offset, len)?;
        // SAFETY: `off + len <= self.len()` was just checked, so the pointer stays
        // within (or one past the end of) the mapping.
        Ok(unsafe { self.map.as_mut_ptr().add(off) })
    }

    /// Copies bytes out of the region.
    #[inline]
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), MemError> {
        let src = self.ptr(offset, out.len() as u64)?;
        // SAFETY: `src` is valid for `out.len()` bytes (checked above); `out` is our own
        // buffer and cannot overlap a shared mapping that Rust never borrows.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies bytes into the region.
    #[inline]
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), MemError> {
        let dst = self.ptr(offset, data.len() as u64)?;
        // SAFETY: `dst` is valid for `data.len()` bytes (checked above); no Rust
        // reference into the mapping exists.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    /// Copies little-endian f32 values out of the region (hosts are little-endian).
    pub fn read_f32(&self, offset: u64, out: &mut [f32]) -> Result<(), MemError> {
        let bytes = (out.len() as u64)
            .checked_mul(4)
            .ok_or(MemError::OutOfBounds {
                offset,
                len: u64::MAX,
            })?;
        let src = self.ptr(offset, bytes)?;
        // SAFETY: `src` is valid for `bytes` bytes (checked); every bit pattern is a valid
        // f32 and `out` is our own, suitably aligned buffer of exactly `bytes` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(src, out.as_mut_ptr().cast::<u8>(), bytes as usize)
        };
        Ok(())
    }

    /// Copies f32 values into the region.
    pub fn write_f32(&self, offset: u64, data: &[f32]) -> Result<(), MemError> {
        let bytes = data.len() as u64 * 4;
        let dst = self.ptr(offset, bytes)?;
        // SAFETY: `dst` is valid for `bytes` bytes (checked); no reference into the
        // mapping exists.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().cast::<u8>(), dst, bytes as usize) };
        Ok(())
    }

    /// Gives every page back to the kernel (the contents read as zeros afterwards): what a
    /// device reset does to its memory.
    pub fn discard(&self) -> Result<(), MemError> {
        use nix::fcntl::{fallocate, FallocateFlags};
        let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
        fallocate(&self.fd, flags, 0, self.len() as i64).map_err(|e| MemError::Os(e.into()))
    }

    /// Fills a range with zeros.
    pub fn zero(&self, offset: u64, len: u64) -> Result<(), MemError> {
        let dst = self.ptr(offset, len)?;
        // SAFETY: `dst` is valid for `len` bytes (checked above).
        unsafe { std::ptr::write_bytes(dst, 0, len as usize) };
        Ok(())
    }

    /// The 32-bit word at a 4-byte-aligned offset, as an atomic.
    #[inline]
    pub fn atomic_u32(&self, offset: u64) -> Result<&AtomicU32, MemError> {
        if !offset.is_multiple_of(4) {
            return Err(MemError::Misaligned { offset });
        }
        let p = self.ptr(offset, 4)?;
        // `p` is in bounds and 4-byte aligned (mappings are page-aligned), AtomicU32 has
        // the layout of u32 with every bit pattern valid, and an atomic may alias memory
        // that other parties write concurrently.
        // SAFETY: by the three facts above, the reference is valid for the region's life.
        Ok(unsafe { &*(p as *const AtomicU32) })
    }

    #[inline]
    pub fn load_u32(&self, offset: u64) -> Result<u32, MemError> {
        Ok(self.atomic_u32(offset)?.load(Ordering::Acquire))
    }

    #[inline]
    pub fn store_u32(&self, offset: u64, v: u32) -> Result<(), MemError> {
        self.atomic_u32(offset)?.store(v, Ordering::Release);
        Ok(())
    }
}

/// Copies `len` bytes between two shared regions (possibly the same one; overlap allowed).
pub fn copy_between(
    src: &SharedRegion,
    src_off: u64,
    dst: &SharedRegion,
    dst_off: u64,
    len: u64,
) -> Result<(), MemError> {
    let s = src.ptr(src_off, len)?;
    let d = dst.ptr(dst_off, len)?;
    // SAFETY: both ranges were bounds-checked for `len` bytes; `ptr::copy` allows overlap.
    unsafe { std::ptr::copy(s, d, len as usize) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn read_write_round_trip() {
        let r = SharedRegion::new("t", 4096).unwrap();
        r.write(10, b"hello").unwrap();
        let mut b = [0u8; 5];
        r.read(10, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        assert!(r.write(4094, b"abc").is_err());
        assert!(r.read(u64::MAX, &mut b).is_err());
        assert!(r.atomic_u32(2).is_err());
    }

    #[test]
    fn new_regions_cannot_shrink_but_plain_memfds_can() {
        let r = SharedRegion::new("t", 4096).unwrap();
        assert!(cannot_shrink(r.fd()));
        assert!(nix::unistd::ftruncate(r.fd(), 0).is_err());
        let plain = memfd_create("plain", MFdFlags::MFD_CLOEXEC).unwrap();
        assert!(!cannot_shrink(plain.as_fd()));
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        assert!(!cannot_shrink(file.as_fd()));
    }

    proptest! {
        #[test]
        fn bounds_are_never_crossed(off in any::<u64>(), len in any::<u64>()) {
            let r = SharedRegion::new("t", 8192).unwrap();
            let ok = off.checked_add(len).is_some_and(|e| e <= 8192);
            prop_assert_eq!(r.check(off, len).is_ok(), ok);
        }
    }
}
