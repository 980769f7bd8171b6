//! Request memory as the device reaches it: shared pools mapped for one execution or
//! pinned by a burst, pools that could shrink staged (`staging.rs`), and driver-managed
//! buffers in device memory.

use std::os::fd::AsFd;
use std::sync::Arc;

use super::{hw_status, VnpuPreparedModel};
use crate::domain::{transfer, DriverBuffer, Io, Role};
use crate::execute::staging::{Span, StagedPool};
use crate::hal::{DataLocation, ErrorStatus, Memory, Request, MEMORY_ASHMEM, MEMORY_MMAP_FD};
use crate::hw::{Hardware, IoMapping, Perm};
use crate::hwbuf::HwUse;
use crate::memory::{open_pool, read_range, OpenPool, PoolRange};

impl VnpuPreparedModel {
    /// Maps a shared-memory pool into the device's IOMMU for as long as the returned pin
    /// lives (a burst's slot cache keeps it); `None` for memory that is not a sealed
    /// "ashmem" or "mmap_fd" pool (executions then map it each time, or stage it).
    pub fn pin(&self, m: &Memory) -> Option<Arc<PinnedPool>> {
        if !matches!(m.name.as_str(), MEMORY_ASHMEM | MEMORY_MMAP_FD) {
            return None;
        }
        let r = open_pool(m, Perm::READ, HwUse::Execution).ok()?;
        if !r.mappable() {
            return None;
        }
        let key = PinKey::of(&r)?;
        let map = self.hw.map(r.fd, r.offset, r.size, r.perm).ok()?;
        Some(Arc::new(PinnedPool {
            map,
            key,
            memory: m.clone(),
        }))
    }

    /// NN's `HalManagedBuffer::validateRequest` for every driver-managed buffer in the
    /// request: each argument's role, state and dimensions, and no buffer written by one
    /// argument and used by another. Returns, per input, the dimensions its buffer gives.
    pub(super) fn check_buffers(
        &self,
        request: &Request,
        pools: &[ReqPool<'_>],
    ) -> Result<Vec<Option<Vec<u32>>>, ErrorStatus> {
        let mut uses = vec![(0u32, 0u32); pools.len()];
        let mut input_dims = vec![None; request.inputs.len()];
        for (io, args) in [(Io::Input, &request.inputs), (Io::Output, &request.outputs)] {
            for (k, arg) in args.iter().enumerate() {
                let p = arg.location.pool_index as usize;
                let Some(ReqPool::Device(b)) = pools.get(p).filter(|_| !arg.has_no_value) else {
                    continue;
                };
                let role = Role {
                    model: self.id,
                    io,
                    index: k as u32,
                };
                let dims = b.check_use(role, &arg.dimensions)?;
                match io {
                    Io::Input => {
                        uses[p].0 += 1;
                        input_dims[k] = Some(dims);
                    }
                    Io::Output => uses[p].1 += 1,
                }
            }
        }
        if uses.iter().any(|&(i, o)| o > 1 || (o == 1 && i > 0)) {
            tracing::debug!(
                "request: a driver-managed buffer written by one argument and used by another"
            );
            return Err(ErrorStatus::InvalidArgument);
        }
        Ok(input_dims)
    }
}

/// A shared-memory pool ("ashmem", "mmap_fd") kept mapped in the device's IOMMU while a
/// burst caches its slot, so its executions skip mapping and unmapping it: made by
/// [`VnpuPreparedModel::pin`], used by [`VnpuPreparedModel::execute_pinned`].
pub struct PinnedPool {
    pub(super) map: IoMapping,
    /// The memory it maps (its fd's file, offset, size and access), to check that a
    /// request's pool is still that memory.
    pub(super) key: PinKey,
    /// The memory it was made from (its descriptor shared, not duplicated).
    memory: Memory,
}

impl PinnedPool {
    /// `m`'s file range, checked when the pin was made, if `m` is that very memory (the
    /// same open descriptor, kind, size and integers): no system call needed.
    pub(super) fn open<'m>(&self, m: &'m Memory) -> Option<OpenPool<'m>> {
        let (mine, theirs) = (&self.memory, m);
        let same = mine.name == theirs.name
            && mine.size == theirs.size
            && mine.handle.ints == theirs.handle.ints
            && mine.handle.fds.len() == 1
            && theirs.handle.fds.len() == 1
            && Arc::ptr_eq(&mine.handle.fds[0], &theirs.handle.fds[0]);
        same.then(|| {
            OpenPool::checked(PoolRange {
                fd: theirs.handle.fds[0].as_fd(),
                offset: self.key.offset,
                size: self.key.size,
                perm: self.key.perm,
            })
        })
    }
}

/// What identifies a pinned pool's memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct PinKey {
    dev: u64,
    ino: u64,
    offset: u64,
    size: u64,
    perm: Perm,
}

impl PinKey {
    pub(super) fn of(r: &PoolRange<'_>) -> Option<PinKey> {
        let st = nix::sys::stat::fstat(r.fd).ok()?;
        Some(PinKey {
            dev: st.st_dev,
            ino: st.st_ino,
            offset: r.offset,
            size: r.size,
            perm: r.perm,
        })
    }
}

/// What the device does with request pool `pool`: reads it, and writes it too when an
/// output lives there (a hardware buffer is locked for exactly that).
pub(super) fn access(request: &Request, pool: usize) -> Perm {
    let written = request
        .outputs
        .iter()
        .any(|a| !a.has_no_value && a.location.pool_index as usize == pool);
    match written {
        true => Perm::READ_WRITE,
        false => Perm::READ,
    }
}

/// A request pool as the client gave it: host memory or a driver-managed buffer.
pub(super) enum ReqPool<'a> {
    Host(OpenPool<'a>),
    Device(Arc<DriverBuffer>),
}

impl ReqPool<'_> {
    /// The bytes an argument at `loc` may use: its length, or the whole pool for a
    /// driver-managed buffer or a non-BLOB hardware buffer (whose arguments name it whole).
    pub(super) fn room(&self, loc: &DataLocation) -> u64 {
        match self {
            ReqPool::Host(r) => r.argument_len(loc.length),
            ReqPool::Device(b) => b.size(),
        }
    }

    /// Reads `len` bytes at `off` (a driver-managed buffer is read whole).
    pub(super) fn read(
        &self,
        hw: &Arc<Hardware>,
        off: u64,
        len: usize,
    ) -> Result<Vec<u8>, ErrorStatus> {
        match self {
            ReqPool::Host(r) => read_range(r, off, len).map_err(|e| {
                tracing::debug!("request pool: {e}");
                ErrorStatus::GeneralFailure
            }),
            ReqPool::Device(b) => {
                let epoch = b.readable_epoch().ok_or(ErrorStatus::GeneralFailure)?;
                transfer::dram_to_bytes(hw, b.addr(), b.size(), epoch)
            }
        }
    }
}

/// A request pool as the device reaches it: mapped directly (for this execution, or kept
/// by a burst), staged, or device memory.
pub(super) enum DevicePool {
    Driver(u64),
    Mapped(IoMapping),
    Pinned(Arc<PinnedPool>),
    Staged {
        staged: Option<StagedPool>,
        map: Option<IoMapping>,
        writes: Vec<Span>,
    },
}

impl DevicePool {
    /// The device address of pool offset `off`.
    pub(super) fn iova(&self, off: u32) -> Option<u64> {
        match self {
            DevicePool::Driver(addr) => Some(addr + off as u64),
            DevicePool::Mapped(m) => Some(m.iova + off as u64),
            DevicePool::Pinned(p) => Some(p.map.iova + off as u64),
            DevicePool::Staged {
                staged: Some(s),
                map: Some(m),
                ..
            } => Some(m.iova + s.offset_of(off as u64)),
            DevicePool::Staged { .. } => None,
        }
    }

    /// Whether the device reaches it as host memory (through the IOMMU), as a job's copies
    /// must; a driver-managed buffer is device memory.
    pub(super) fn is_host(&self) -> bool {
        !matches!(self, DevicePool::Driver(_))
    }

    /// Copies the outputs of a staged pool back to its file.
    pub(super) fn write_back(
        &self,
        io: &crate::fileio::CacheIo,
        pool: &PoolRange<'_>,
    ) -> Result<(), crate::memory::PoolError> {
        match self {
            DevicePool::Staged {
                staged: Some(s),
                writes,
                ..
            } => s.write_back(io, pool, writes),
            _ => Ok(()),
        }
    }
}

/// Stages a pool that could shrink (see [`crate::execute::staging`]) and maps the staged copy.
pub(super) fn stage(
    hw: &Arc<Hardware>,
    io: &crate::fileio::CacheIo,
    pool: &PoolRange<'_>,
    spans: &[Span],
    reads: &[Span],
    writes: Vec<Span>,
) -> Result<DevicePool, ErrorStatus> {
    let staged = StagedPool::stage(io, pool, spans, reads).map_err(|e| {
        tracing::debug!("staging a request pool: {e}");
        ErrorStatus::GeneralFailure
    })?;
    let map = match &staged {
        Some(s) => Some(
            hw.map(s.region().fd(), 0, s.region().len() as u64, pool.perm)
                .map_err(|e| hw_status(&e))?,
        ),
        None => None,
    };
    Ok(DevicePool::Staged {
        staged,
        map,
        writes,
    })
}
