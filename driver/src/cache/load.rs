//! Loading a prepared model from the cache: the model cache is read whole and its MAC
//! verified before anything in it is parsed; the data cache is read into private staging
//! memory, hashed chunk by chunk as it arrives and copied into device memory meanwhile,
//! and nothing is used unless its digest matches.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::mpsc;
use std::sync::Arc;

use vnpu_emu::iommu::Perm;
use vnpu_emu::shm::SharedRegion;

use super::format::{decode_body, ConstValue, Header, Image, HEADER_LEN, MAX_MODEL_CACHE};
use super::io::{file_size, CHUNK};
use super::mac::{verify, MAC_LEN};
use super::{Cache, CacheError, CacheFiles};
use crate::compile::constants::{Constants, Values};
use crate::device::{ModelContext, ModelLease};
use crate::hal::BYTE_SIZE_OF_CACHE_TOKEN;
use crate::hw::{DramBlock, Hardware, IoMapping};
use crate::prepared::{dma, VnpuPreparedModel};

/// Host memory the data cache is read into: pre-faulted and mapped for the device once,
/// then kept by the cache for the next load (one buffer, the largest needed so far), so
/// a load pays neither page faults nor an IOMMU mapping.
#[derive(Debug)]
pub struct Staging {
    region: SharedRegion,
    map: IoMapping,
}

impl Staging {
    fn new(hw: &Arc<Hardware>, len: usize) -> Result<Staging, CacheError> {
        let len = len.next_multiple_of(CHUNK);
        let region = SharedRegion::new("vnpu-cache-staging", len).map_err(mem)?;
        region.zero(0, len as u64).map_err(mem)?;
        let map = hw.map(region.fd(), 0, len as u64, Perm::READ)?;
        Ok(Staging { region, map })
    }
}

fn mem(e: vnpu_emu::error::MemError) -> CacheError {
    CacheError::Memory(e.to_string())
}

/// Copies `len` bytes of device memory at `addr` back to the host, if the device is still
/// in `epoch` (a reset since clears that memory).
fn read_back(hw: &Arc<Hardware>, addr: u64, len: u64, epoch: u64) -> Option<Vec<u8>> {
    let mut out = vec![0u8; usize::try_from(len).ok()?];
    if len == 0 {
        return Some(out);
    }
    let region = SharedRegion::new("vnpu-cache-readback", out.len()).ok()?;
    let map = hw.map(region.fd(), 0, len, Perm::WRITE).ok()?;
    hw.run(vec![dma(addr, map.iova, len)], 0, Some(epoch))
        .ok()?;
    region.read(0, &mut out).ok()?;
    Some(out)
}

/// Data caches up to this size are copied to the device after they are read; larger ones
/// while they are read, by a second thread.
const OVERLAP_FROM: usize = 4 * CHUNK;

impl Cache {
    /// Reads and verifies the model cache; returns its header and parsed image.
    pub fn read_model_cache(
        &self,
        hw: &Hardware,
        fd: BorrowedFd<'_>,
        token: &[u8; BYTE_SIZE_OF_CACHE_TOKEN],
    ) -> Result<(Header, Image), CacheError> {
        let key = self.key()?;
        let size = file_size(fd)?;
        if size > MAX_MODEL_CACHE || size < (HEADER_LEN + MAC_LEN) as u64 {
            return Err(CacheError::Malformed("model cache size"));
        }
        let file = self.io.read_vec(fd, size as usize)?;
        let (contents, tag) = file.split_at(file.len() - MAC_LEN);
        if !verify(&key, &Self::binding(hw, token), contents, tag) {
            return Err(CacheError::Integrity);
        }
        let header = Header::decode(&file)?;
        let image = decode_body(&contents[HEADER_LEN..], header.data_len)?;
        Ok((header, image))
    }

    /// Loads a prepared model from verified cache files.
    pub fn load(
        &self,
        ctx: &ModelContext,
        files: &CacheFiles,
        token: &[u8; BYTE_SIZE_OF_CACHE_TOKEN],
        lease: ModelLease,
    ) -> Result<Arc<VnpuPreparedModel>, CacheError> {
        let hw = &ctx.hw;
        let epoch = hw.epoch();
        let (header, image) = self.read_model_cache(hw, files.model.as_fd(), token)?;
        let got = file_size(files.data.as_fd())?;
        if got != header.data_len {
            return Err(CacheError::DataLength {
                got,
                want: header.data_len,
            });
        }
        let data = if header.data_len == 0 {
            if super::mac::DataDigest::of(&[]) != header.data_digest {
                return Err(CacheError::DataDigest);
            }
            None
        } else {
            Some(self.read_data(hw, files.data.as_fd(), &header, epoch)?)
        };
        let n = image.model.main.operands.len();
        let mut offsets = vec![None; n];
        for (i, v) in &image.constants {
            if let ConstValue::Data { offset, .. } = v {
                offsets[*i as usize] = Some(*offset);
            }
        }
        // Constants needed on the host later (to compile other input shapes) are copied
        // back from device memory then; that memory lives as long as the model.
        let from = data
            .as_ref()
            .map(|d| (Arc::clone(hw), d.addr, d.len, epoch));
        let list = image.constants;
        let constants = Constants::lazy(move || constant_values(n, &list, from));
        VnpuPreparedModel::restore(
            ctx,
            image.model,
            constants,
            offsets,
            data,
            image.instance.map(|i| (i.input_shapes, i.compiled)),
            epoch,
            lease,
        )
        .map_err(CacheError::Restore)
    }

    /// Reads the data cache into staging memory, hashing each chunk as it arrives while
    /// the device copies the chunks already read into device memory.
    fn read_data(
        &self,
        hw: &Arc<Hardware>,
        fd: BorrowedFd<'_>,
        header: &Header,
        epoch: u64,
    ) -> Result<DramBlock, CacheError> {
        let len = usize::try_from(header.data_len).map_err(|_| CacheError::Malformed("size"))?;
        let kept = self
            .staging
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let staging = match kept {
            Some(s) if s.region.len() >= len => s,
            _ => Staging::new(hw, len)?,
        };
        let dram = hw.alloc_dram(len as u64)?;
        let result = self.fill(hw, fd, &staging, (dram.addr, epoch), len, header);
        let mut slot = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        if slot
            .as_ref()
            .is_none_or(|s| s.region.len() < staging.region.len())
        {
            *slot = Some(staging);
        }
        result.map(|_| dram)
    }

    /// Reads the data cache into `staging`, hashing it and copying it to device memory at
    /// `dst` as it comes; fails unless the digest matches.
    fn fill(
        &self,
        hw: &Arc<Hardware>,
        fd: BorrowedFd<'_>,
        staging: &Staging,
        (dst, epoch): (u64, u64),
        len: usize,
        header: &Header,
    ) -> Result<(), CacheError> {
        let base = staging.region.ptr(0, len as u64).map_err(mem)?;
        let iova = staging.map.iova;
        let mut hasher = super::mac::DataDigest::default();
        let copy = |chunks: &mut dyn Iterator<Item = (usize, usize)>| {
            let cmds = chunks
                .map(|(off, n)| dma(iova + off as u64, dst + off as u64, n as u64))
                .collect();
            hw.run(cmds, 0, Some(epoch)).map(|_| ())
        };
        let mut hash = |off: usize, n: usize| {
            // Inside `staging`, our private mapping alive for the call; the read of these
            // bytes completed and nothing writes them again (the device maps them READ).
            // SAFETY: as just said: in bounds, initialised, and never written meanwhile.
            let bytes = unsafe { std::slice::from_raw_parts(base.add(off), n) };
            hasher.update(bytes);
        };
        if len <= OVERLAP_FROM {
            // SAFETY: `base` is valid for `len` bytes while `staging` lives; nothing reads
            // a chunk before the callback is called for it.
            unsafe { self.io.read_chunked(fd, base, len, &mut hash)? };
            copy(&mut std::iter::once((0, len)))?;
        } else {
            let (tx, rx) = mpsc::channel::<(usize, usize)>();
            std::thread::scope(|s| {
                let copier = s.spawn(move || {
                    // Copies whatever has arrived, a batch at a time, until the reader is done.
                    while let Ok(first) = rx.recv() {
                        copy(&mut std::iter::once(first).chain(rx.try_iter()))?;
                    }
                    Ok::<(), crate::hw::HwError>(())
                });
                let mut on_chunk = |off: usize, n: usize| {
                    let _ = tx.send((off, n));
                    hash(off, n);
                };
                // SAFETY: as above.
                let read = unsafe { self.io.read_chunked(fd, base, len, &mut on_chunk) };
                drop(tx);
                let copied = copier.join().unwrap_or(Err(crate::hw::HwError::Timeout));
                read.map_err(CacheError::from)
                    .and(copied.map_err(CacheError::from))
            })?;
        }
        if hasher.finish() != header.data_digest {
            return Err(CacheError::DataDigest);
        }
        Ok(())
    }
}

/// Every constant's bytes: inline ones from the model cache, the others from the
/// verified data cache in device memory (`from`: device, address, length).
fn constant_values(
    n: usize,
    list: &[(u32, ConstValue)],
    from: Option<(Arc<Hardware>, u64, u64, u64)>,
) -> Values {
    let block = from.and_then(|(hw, addr, len, epoch)| read_back(&hw, addr, len, epoch));
    let mut v: Values = vec![None; n];
    for (i, c) in list {
        let bytes = match c {
            ConstValue::Inline(b) => Some(b.clone()),
            ConstValue::Data { offset, len } => block.as_ref().and_then(|b| {
                let start = usize::try_from(*offset).ok()?;
                let end = start.checked_add(usize::try_from(*len).ok()?)?;
                b.get(start..end).map(<[u8]>::to_vec)
            }),
        };
        if let Some(slot) = v.get_mut(*i as usize) {
            *slot = bytes;
        }
    }
    v
}
