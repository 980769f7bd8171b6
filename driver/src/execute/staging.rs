//! Staging for request pools the device must not map: any file that could shrink under a
//! mapping (a plain file, an unsealed memfd, an mmap_fd of a model file). The arguments'
//! bytes are copied into a sealed region of the driver's own with positioned reads, the
//! device works on that region, and outputs go back with positioned writes, batched
//! through io_uring where the device's probe found it (pread/pwrite otherwise). A file
//! that shrank gives a short read: an error, never a SIGBUS.

use crate::fileio::CacheIo;
use crate::memory::{PoolError, PoolRange, SharedRegion};

/// The bytes `[base, base + len)` of one pool, held in a sealed region the device can map.
#[derive(Debug)]
pub struct StagedPool {
    region: SharedRegion,
    base: u64,
}

/// A byte range of a pool: `(offset, length)`.
pub type Span = (u64, u64);

impl StagedPool {
    /// Stages the pool bytes covering every argument in `spans`, reading those in `reads`
    /// (inputs) from the file; the rest starts zeroed. `None` when `spans` is empty.
    pub fn stage(
        io: &CacheIo,
        pool: &PoolRange<'_>,
        spans: &[Span],
        reads: &[Span],
    ) -> Result<Option<StagedPool>, PoolError> {
        let Some(base) = spans.iter().map(|s| s.0).min() else {
            return Ok(None);
        };
        let end = spans
            .iter()
            .map(|&(off, len)| off.saturating_add(len))
            .max()
            .unwrap_or(base);
        let len = usize::try_from((end - base).max(1)).map_err(|_| PoolError::TooSmall {
            size: pool.size,
            file: end,
            offset: base,
        })?;
        let region = SharedRegion::new("vnpu-staged-pool", len)
            .map_err(|e| PoolError::Io(std::io::Error::other(e)))?;
        let mut ranges = Vec::with_capacity(reads.len());
        for (off, n) in disjoint(reads) {
            let at = file_offset(pool, off, n)?;
            let dst = region
                .ptr(off - base, n)
                .map_err(|e| PoolError::Io(std::io::Error::other(e)))?;
            ranges.push((at, dst, n as usize));
        }
        // SAFETY: bounds-checked, disjoint ranges of our own unmapped region.
        unsafe { io.read_ranges(pool.fd, &ranges) }?;
        Ok(Some(StagedPool { region, base }))
    }

    /// The region the device maps instead of the pool.
    pub fn region(&self) -> &SharedRegion {
        &self.region
    }

    /// Where pool offset `off` lies in the staged region.
    pub fn offset_of(&self, off: u64) -> u64 {
        off - self.base
    }

    /// Writes the staged bytes of `spans` (outputs) back to the pool's file.
    pub fn write_back(
        &self,
        io: &CacheIo,
        pool: &PoolRange<'_>,
        spans: &[Span],
    ) -> Result<(), PoolError> {
        let mut ranges = Vec::with_capacity(spans.len());
        for &(off, n) in spans {
            let at = file_offset(pool, off, n)?;
            let src = self
                .region
                .ptr(off - self.base, n)
                .map_err(|e| PoolError::Io(std::io::Error::other(e)))?;
            ranges.push((at, src.cast_const(), n as usize));
        }
        // SAFETY: each source was bounds-checked inside our region; the device's batch has
        // completed, so nothing writes the region while the bytes go out.
        unsafe { io.write_ranges(pool.fd, &ranges) }?;
        Ok(())
    }
}

/// `spans` merged into sorted, non-overlapping ranges (inputs may alias one location).
fn disjoint(spans: &[Span]) -> Vec<Span> {
    let mut sorted = spans.to_vec();
    sorted.sort_unstable();
    let mut out: Vec<Span> = Vec::with_capacity(sorted.len());
    for (off, n) in sorted {
        let end = off.saturating_add(n);
        match out.last_mut() {
            Some((o, len)) if off <= *o + *len => *len = (*len).max(end - *o),
            _ => out.push((off, n)),
        }
    }
    out
}

/// The file offset of pool range `[off, off + n)`, checked against the pool's size.
fn file_offset(pool: &PoolRange<'_>, off: u64, n: u64) -> Result<u64, PoolError> {
    let too_small = || PoolError::TooSmall {
        size: pool.size,
        file: off,
        offset: pool.offset,
    };
    if off.checked_add(n).is_none_or(|end| end > pool.size) {
        return Err(too_small());
    }
    pool.offset.checked_add(off).ok_or_else(too_small)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::Perm;
    use std::os::fd::AsFd;

    fn plain_file(bytes: &[u8]) -> std::fs::File {
        use std::io::Write;
        let fd =
            nix::sys::memfd::memfd_create("plain", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap();
        let mut f = std::fs::File::from(fd);
        f.write_all(bytes).unwrap();
        f
    }

    #[test]
    fn stages_inputs_and_writes_outputs_back() {
        let f = plain_file(&(0..64u8).collect::<Vec<_>>());
        let pool = PoolRange {
            fd: f.as_fd(),
            offset: 8,
            size: 48,
            perm: Perm::READ_WRITE,
        };
        let io = CacheIo::new(crate::fileio::IoChoice::Auto);
        let staged = StagedPool::stage(&io, &pool, &[(4, 4), (20, 8)], &[(4, 4)])
            .unwrap()
            .unwrap();
        let mut b = [0u8; 4];
        staged.region().read(staged.offset_of(4), &mut b).unwrap();
        assert_eq!(b, [12, 13, 14, 15], "pool offset 4 is file offset 12");
        staged
            .region()
            .write(staged.offset_of(20), &[9; 8])
            .unwrap();
        staged.write_back(&io, &pool, &[(20, 8)]).unwrap();
        assert_eq!(crate::memory::read_range(&pool, 20, 8).unwrap(), [9; 8]);
    }

    #[test]
    fn aliased_reads_are_merged() {
        assert_eq!(
            disjoint(&[(8, 4), (0, 4), (2, 4), (8, 2)]),
            [(0, 6), (8, 4)]
        );
    }

    #[test]
    fn a_shrunk_file_is_an_error() {
        let f = plain_file(&[1; 64]);
        let pool = PoolRange {
            fd: f.as_fd(),
            offset: 0,
            size: 64,
            perm: Perm::READ_WRITE,
        };
        f.set_len(16).unwrap();
        for choice in [
            crate::fileio::IoChoice::Auto,
            crate::fileio::IoChoice::Fallback,
        ] {
            let io = CacheIo::new(choice);
            assert!(StagedPool::stage(&io, &pool, &[(0, 32)], &[(0, 32)]).is_err());
        }
    }
}
