//! The IOMMU: the table through which the device reaches host memory. The host maps a
//! range of a file descriptor at an IOVA with permissions; every device access to an
//! IOVA is translated and checked here, so a bad address is a reported fault, never a
//! stray access.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::error::IommuError;
use crate::shm::SharedRegion;

pub const PAGE_SIZE: u64 = 4096;
/// IOVAs live in `[IOVA_BASE, IOVA_LIMIT)`; device DRAM sits above, at `DRAM_BASE`.
pub const IOVA_BASE: u64 = 0x1000;
pub const IOVA_LIMIT: u64 = crate::DRAM_BASE;

/// What the device may do with a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Perm(u8);

impl Perm {
    /// The device may read (host -> device transfers).
    pub const READ: Perm = Perm(1);
    /// The device may write (device -> host transfers).
    pub const WRITE: Perm = Perm(2);
    pub const READ_WRITE: Perm = Perm(3);

    pub fn allows(self, need: Perm) -> bool {
        self.0 & need.0 == need.0
    }

    pub fn from_bits(bits: u8) -> Option<Perm> {
        (1..=3).contains(&bits).then_some(Perm(bits))
    }
}

#[derive(Debug)]
struct Mapping {
    /// Where it starts (page-aligned).
    iova: u64,
    len: u64,
    perm: Perm,
    region: Arc<SharedRegion>,
    /// Bytes between the page-aligned start of `region` and the mapped file offset.
    skew: u64,
}

/// A translated, checked device access into host memory.
#[derive(Debug, Clone)]
pub struct Window {
    pub region: Arc<SharedRegion>,
    pub offset: u64,
}

#[derive(Debug, Default)]
pub struct Iommu {
    /// The mappings, sorted by IOVA and disjoint: a translation is one binary search
    /// (every device access to host memory makes one; mappings change far more rarely).
    table: RwLock<Vec<Mapping>>,
    /// Bumped whenever a mapping goes (a translation made before may be stale): what an
    /// [`Iotlb`] checks.
    generation: AtomicU64,
}

/// A device's translation cache for a few long-lived ranges (its rings): a range is
/// translated whole once and reused while no mapping has gone since, so fetching a ring
/// entry does not walk the IOMMU's table. (A new mapping cannot change an existing
/// translation: overlaps are refused.)
#[derive(Debug, Default)]
pub struct Iotlb {
    entries: Vec<TlbEntry>,
}

#[derive(Debug)]
struct TlbEntry {
    generation: u64,
    base: u64,
    span: u64,
    need: Perm,
    window: Window,
}

/// Ranges an [`Iotlb`] keeps.
const TLB_ENTRIES: usize = 4;

impl Iotlb {
    /// `[addr, addr + len)` inside the range `[base, base + span)`, through the kept
    /// translation of the whole range (made now if need be); `None` if the range does not
    /// translate whole (the caller then translates the access alone).
    pub fn translate(
        &mut self,
        iommu: &Iommu,
        ring: (u64, u64),
        addr: u64,
        len: u64,
        need: Perm,
    ) -> Option<Window> {
        self.lookup(iommu, ring, addr, len, need)
            .map(|(region, offset)| Window {
                region: Arc::clone(region),
                offset,
            })
    }

    /// [`Iotlb::translate`] as the region and the offset in it, borrowed from the kept
    /// translation (no reference count taken: what an access per ring entry costs).
    pub fn lookup(
        &mut self,
        iommu: &Iommu,
        (base, span): (u64, u64),
        addr: u64,
        len: u64,
        need: Perm,
    ) -> Option<(&Arc<SharedRegion>, u64)> {
        let inside = addr >= base && addr.checked_add(len)? <= base.checked_add(span)?;
        if !inside {
            return None;
        }
        // Read before translating: a mapping that goes meanwhile leaves a stale generation.
        let generation = iommu.generation.load(Ordering::Acquire);
        let kept = self.entries.iter().position(|e| {
            e.generation == generation && e.base == base && e.span == span && e.need == need
        });
        let k = match kept {
            Some(k) => k,
            None => {
                let window = iommu.translate(base, span, need).ok()?;
                self.entries
                    .retain(|e| e.generation == generation && e.base != base);
                if self.entries.len() >= TLB_ENTRIES {
                    self.entries.remove(0);
                }
                self.entries.push(TlbEntry {
                    generation,
                    base,
                    span,
                    need,
                    window,
                });
                self.entries.len() - 1
            }
        };
        let w = &self.entries[k].window;
        Some((&w.region, w.offset + (addr - base)))
    }
}

/// One access's translation kept across runs of the same work (a job's copy of a pinned
/// range): reused while the access is the same and no mapping has gone since (the
/// IOMMU's generation, as an [`Iotlb`] checks), so a job run again does not walk the
/// IOMMU's table. A failed translation keeps nothing.
#[derive(Debug, Default)]
pub struct KeptTranslation(Option<Kept>);

#[derive(Debug)]
struct Kept {
    generation: u64,
    addr: u64,
    len: u64,
    need: Perm,
    window: Window,
}

impl KeptTranslation {
    /// `[addr, addr + len)` translated for `need`: the kept window if it is still good,
    /// else a fresh translation (then kept).
    pub fn translate(
        &mut self,
        iommu: &Iommu,
        addr: u64,
        len: u64,
        need: Perm,
    ) -> Result<&Window, IommuError> {
        // Read before translating: a mapping that goes meanwhile leaves a stale generation.
        let generation = iommu.generation.load(Ordering::Acquire);
        let hit = matches!(&self.0, Some(k)
            if k.generation == generation && k.addr == addr && k.len == len && k.need == need);
        if !hit {
            self.0 = None;
            let window = iommu.translate(addr, len, need)?;
            self.0 = Some(Kept {
                generation,
                addr,
                len,
                need,
                window,
            });
        }
        match &self.0 {
            Some(k) => Ok(&k.window),
            None => Err(IommuError::NotMapped { iova: addr }),
        }
    }
}

impl Iommu {
    /// Maps `len` bytes of `fd` starting at `fd_offset` at the page-aligned `iova`. The
    /// mapping takes whole pages of IOVA space, but only `len` bytes are accessible. The
    /// device keeps its own duplicate of the descriptor. Only files that cannot shrink
    /// ([`crate::shm::cannot_shrink`]) are mapped: a device model must not be crashable by
    /// its host's files, so callers stage anything else into a region of their own.
    pub fn map(
        &self,
        iova: u64,
        fd: BorrowedFd<'_>,
        fd_offset: u64,
        len: u64,
        perm: Perm,
    ) -> Result<(), IommuError> {
        if len == 0 || !iova.is_multiple_of(PAGE_SIZE) {
            return Err(IommuError::Unaligned { iova, len });
        }
        // The IOVA range is whole pages; accesses are checked against the exact length.
        let end = iova
            .checked_add(len.div_ceil(PAGE_SIZE) * PAGE_SIZE)
            .ok_or(IommuError::Overlap { iova, len })?;
        if iova < IOVA_BASE || end > IOVA_LIMIT {
            return Err(IommuError::Overlap { iova, len });
        }
        if !crate::shm::cannot_shrink(fd) {
            return Err(IommuError::Shrinkable);
        }
        let size = nix::sys::stat::fstat(fd)
            .map_err(|e| IommuError::Mem(crate::error::MemError::Os(e.into())))?
            .st_size as u64;
        let file_end = fd_offset.checked_add(len).ok_or(IommuError::FileTooSmall {
            size,
            end: u64::MAX,
        })?;
        if file_end > size {
            return Err(IommuError::FileTooSmall {
                size,
                end: file_end,
            });
        }
        let skew = fd_offset % PAGE_SIZE;
        let owned = fd
            .try_clone_to_owned()
            .map_err(|e| IommuError::Mem(e.into()))?;
        let region = SharedRegion::map(owned, fd_offset - skew, (len + skew) as usize)?;
        let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
        if Self::overlaps(&table, iova, end) {
            return Err(IommuError::Overlap { iova, len });
        }
        let at = table.partition_point(|m| m.iova < iova);
        table.insert(
            at,
            Mapping {
                iova,
                len,
                perm,
                region: Arc::new(region),
                skew,
            },
        );
        Ok(())
    }

    fn overlaps(table: &[Mapping], start: u64, end: u64) -> bool {
        // The last mapping starting before `end`.
        let below = table.partition_point(|m| m.iova < end);
        below
            .checked_sub(1)
            .map(|k| &table[k])
            .is_some_and(|m| m.iova + m.len.div_ceil(PAGE_SIZE) * PAGE_SIZE > start)
    }

    /// The mapping that starts at or below `addr` nearest to it.
    fn at_or_below(table: &[Mapping], addr: u64) -> Option<&Mapping> {
        let above = table.partition_point(|m| m.iova <= addr);
        above.checked_sub(1).map(|k| &table[k])
    }

    /// Removes the mapping that starts at `iova`.
    pub fn unmap(&self, iova: u64) -> Result<(), IommuError> {
        let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        match table.binary_search_by_key(&iova, |m| m.iova) {
            Ok(k) => {
                table.remove(k);
                Ok(())
            }
            Err(_) => Err(IommuError::NotMapped { iova }),
        }
    }

    /// Removes every mapping (device reset).
    pub fn clear(&self) {
        let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        table.clear();
    }

    pub fn mapping_count(&self) -> usize {
        self.table.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Translates `[addr, addr + len)`, which must lie inside one mapping that allows `need`.
    pub fn translate(&self, addr: u64, len: u64, need: Perm) -> Result<Window, IommuError> {
        let table = self.table.read().unwrap_or_else(|p| p.into_inner());
        let m = Self::at_or_below(&table, addr).ok_or(IommuError::NotMapped { iova: addr })?;
        let start = m.iova;
        let rel = addr - start;
        let end = rel
            .checked_add(len)
            .ok_or(IommuError::OutOfRange { addr, len })?;
        if end > m.len {
            return Err(if rel >= m.len {
                IommuError::NotMapped { iova: addr }
            } else {
                IommuError::OutOfRange { addr, len }
            });
        }
        if !m.perm.allows(need) {
            let need = if need == Perm::WRITE { "write" } else { "read" };
            return Err(IommuError::Permission { addr, need });
        }
        Ok(Window {
            region: Arc::clone(&m.region),
            offset: m.skew + rel,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn region(len: usize) -> SharedRegion {
        SharedRegion::new("iommu-test", len).unwrap()
    }

    #[test]
    fn the_iotlb_serves_a_ring_until_a_mapping_goes() {
        let iommu = Iommu::default();
        let r = region(2 * 4096);
        r.write(100, b"y").unwrap();
        iommu.map(0x10000, r.fd(), 0, 8192, Perm::READ).unwrap();
        let mut tlb = Iotlb::default();
        let ring = (0x10000, 8192);
        let w = tlb.translate(&iommu, ring, 0x10064, 1, Perm::READ).unwrap();
        let mut b = [0u8];
        w.region.read(w.offset, &mut b).unwrap();
        assert_eq!(&b, b"y");
        assert!(tlb
            .translate(&iommu, ring, 0x10000 + 8192, 1, Perm::READ)
            .is_none());
        assert!(
            tlb.translate(&iommu, ring, 0x10000, 1, Perm::WRITE)
                .is_none(),
            "read-only"
        );
        // Another mapping going stales every kept translation; this one going too.
        iommu.unmap(0x10000).unwrap();
        assert!(tlb
            .translate(&iommu, ring, 0x10064, 1, Perm::READ)
            .is_none());
    }

    #[test]
    fn a_kept_translation_serves_the_same_access_until_a_mapping_goes() {
        let iommu = Iommu::default();
        let r = region(4096);
        r.write(8, b"z").unwrap();
        iommu.map(0x10000, r.fd(), 0, 4096, Perm::READ).unwrap();
        let mut kept = KeptTranslation::default();
        let w = kept.translate(&iommu, 0x10008, 1, Perm::READ).unwrap();
        let mut b = [0u8];
        w.region.read(w.offset, &mut b).unwrap();
        assert_eq!(&b, b"z");
        assert!(kept.translate(&iommu, 0x10008, 1, Perm::READ).is_ok());
        assert!(
            kept.translate(&iommu, 0x10008, 1, Perm::WRITE).is_err(),
            "another permission is translated again, and refused"
        );
        assert!(kept.translate(&iommu, 0x10008, 1, Perm::READ).is_ok());
        iommu.unmap(0x10000).unwrap();
        assert!(
            kept.translate(&iommu, 0x10008, 1, Perm::READ).is_err(),
            "the mapping went: the kept window is not used"
        );
    }

    #[test]
    fn map_translate_unmap() {
        let iommu = Iommu::default();
        let r = region(3 * 4096);
        r.write(4096 + 5, b"x").unwrap();
        iommu.map(0x10000, r.fd(), 4096, 8192, Perm::READ).unwrap();
        let w = iommu.translate(0x10005, 1, Perm::READ).unwrap();
        let mut b = [0u8];
        w.region.read(w.offset, &mut b).unwrap();
        assert_eq!(b[0], b'x');
        assert!(matches!(
            iommu.translate(0x10000, 1, Perm::WRITE),
            Err(IommuError::Permission { .. })
        ));
        assert!(iommu.translate(0x10000 + 8192, 1, Perm::READ).is_err());
        assert!(
            iommu.map(0x11000, r.fd(), 0, 4096, Perm::READ).is_err(),
            "overlap"
        );
        assert!(
            iommu.map(0x20000, r.fd(), 8192, 8192, Perm::READ).is_err(),
            "file too small"
        );
        iommu.unmap(0x10000).unwrap();
        assert!(iommu.translate(0x10005, 1, Perm::READ).is_err());
    }

    #[test]
    fn files_that_could_shrink_are_refused() {
        let iommu = Iommu::default();
        let file = tempfile_with(8192);
        assert!(matches!(
            iommu.map(
                0x10000,
                std::os::fd::AsFd::as_fd(&file),
                0,
                4096,
                Perm::READ
            ),
            Err(IommuError::Shrinkable)
        ));
        assert_eq!(iommu.mapping_count(), 0);
    }

    fn tempfile_with(len: u64) -> std::fs::File {
        let fd = nix::sys::memfd::memfd_create("unsealed", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .unwrap();
        nix::unistd::ftruncate(&fd, len as i64).unwrap();
        std::fs::File::from(fd)
    }

    #[test]
    fn unaligned_file_offset_is_supported() {
        let iommu = Iommu::default();
        let r = region(3 * 4096);
        r.write(100, b"q").unwrap();
        iommu.map(0x10000, r.fd(), 100, 4096, Perm::READ).unwrap();
        let w = iommu.translate(0x10000, 1, Perm::READ).unwrap();
        let mut b = [0u8];
        w.region.read(w.offset, &mut b).unwrap();
        assert_eq!(b[0], b'q');
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Whatever is asked, a translated window lies inside the mapping and the region.
        #[test]
        fn translation_stays_in_bounds(addr in 0u64..0x40000, len in 0u64..0x10000) {
            let iommu = Iommu::default();
            let r = region(4 * 4096);
            iommu.map(0x10000, r.fd(), 0, 4 * 4096, Perm::READ_WRITE).unwrap();
            iommu.map(0x30000, r.fd(), 4096, 4096, Perm::READ).unwrap();
            if let Ok(w) = iommu.translate(addr, len, Perm::READ) {
                prop_assert!(w.region.check(w.offset, len).is_ok());
                let in_a = addr >= 0x10000 && addr + len <= 0x14000;
                let in_b = addr >= 0x30000 && addr + len <= 0x31000;
                prop_assert!(in_a || in_b);
            }
        }
    }
}
