//! Staging for request pools the device must not map: any file that could shrink under a
//! mapping (a plain file, an unsealed memfd, an mmap_fd of a model file). The arguments'
//! bytes are copied into a sealed region of the driver's own with positioned reads, the
//! device works on that region, and outputs go back with positioned writes. A file that
//! shrank gives a short read or write: an error, never a SIGBUS.

use vnpu_emu::shm::SharedRegion;

use crate::memory::{read_range, write_range, PoolError, PoolRange};

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
        for &(off, n) in reads {
            let n = usize::try_from(n).map_err(|_| PoolError::TooSmall {
                size: pool.size,
                file: off,
                offset: off,
            })?;
            let bytes = read_range(pool, off, n)?;
            region
                .write(off - base, &bytes)
                .map_err(|e| PoolError::Io(std::io::Error::other(e)))?;
        }
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
    pub fn write_back(&self, pool: &PoolRange<'_>, spans: &[Span]) -> Result<(), PoolError> {
        for &(off, n) in spans {
            let mut bytes = vec![0u8; n as usize];
            self.region
                .read(off - self.base, &mut bytes)
                .map_err(|e| PoolError::Io(std::io::Error::other(e)))?;
            write_range(pool, off, &bytes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use vnpu_emu::iommu::Perm;

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
        let staged = StagedPool::stage(&pool, &[(4, 4), (20, 8)], &[(4, 4)])
            .unwrap()
            .unwrap();
        let mut b = [0u8; 4];
        staged.region().read(staged.offset_of(4), &mut b).unwrap();
        assert_eq!(b, [12, 13, 14, 15], "pool offset 4 is file offset 12");
        staged
            .region()
            .write(staged.offset_of(20), &[9; 8])
            .unwrap();
        staged.write_back(&pool, &[(20, 8)]).unwrap();
        assert_eq!(read_range(&pool, 20, 8).unwrap(), [9; 8]);
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
        assert!(StagedPool::stage(&pool, &[(0, 32)], &[(0, 32)]).is_err());
    }
}
