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
use super::io::file_size;
use super::mac::{verify, MAC_LEN};
use super::{Cache, CacheError, CacheFiles};
use crate::compile::constants::{Constants, Values};
use crate::hal::BYTE_SIZE_OF_CACHE_TOKEN;
use crate::hw::{DramBlock, Hardware};
use crate::prepared::{dma, VnpuPreparedModel};

/// The data cache, verified, in device memory and in host staging memory.
struct Data {
    dram: DramBlock,
    staging: Arc<SharedRegion>,
}

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
        hw: &Arc<Hardware>,
        files: &CacheFiles,
        token: &[u8; BYTE_SIZE_OF_CACHE_TOKEN],
    ) -> Result<Arc<VnpuPreparedModel>, CacheError> {
        let (header, image) = self.read_model_cache(hw, files.model.as_fd(), token)?;
        let got = file_size(files.data.as_fd())?;
        if got != header.data_len {
            return Err(CacheError::DataLength {
                got,
                want: header.data_len,
            });
        }
        let data = if header.data_len == 0 {
            if blake3::hash(&[]).as_bytes() != &header.data_digest {
                return Err(CacheError::DataDigest);
            }
            None
        } else {
            Some(self.read_data(hw, files.data.as_fd(), &header)?)
        };
        let n = image.model.main.operands.len();
        let mut offsets = vec![None; n];
        for (i, v) in &image.constants {
            if let ConstValue::Data { offset, .. } = v {
                offsets[*i as usize] = Some(*offset);
            }
        }
        let (const_mem, staging) = match data {
            Some(d) => (Some(d.dram), Some(d.staging)),
            None => (None, None),
        };
        let list = image.constants;
        let constants = Constants::lazy(move || constant_values(n, &list, staging.as_deref()));
        VnpuPreparedModel::restore(
            Arc::clone(hw),
            image.model,
            constants,
            offsets,
            const_mem,
            image.instance.map(|i| (i.input_shapes, i.compiled)),
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
    ) -> Result<Data, CacheError> {
        let len = usize::try_from(header.data_len).map_err(|_| CacheError::Malformed("size"))?;
        let mem = |e: vnpu_emu::error::MemError| CacheError::Memory(e.to_string());
        let staging = SharedRegion::new("vnpu-cache-staging", len).map_err(mem)?;
        let dram = hw.alloc_dram(len as u64)?;
        let map = hw.map(staging.fd(), 0, len as u64, Perm::READ)?;
        let base = staging.ptr(0, len as u64).map_err(mem)?;
        let mut hasher = blake3::Hasher::new();
        let (tx, rx) = mpsc::channel::<(usize, usize)>();
        let (iova, dst) = (map.iova, dram.addr);
        let copied = std::thread::scope(|s| {
            let copier = s.spawn(move || {
                // Copies whatever has arrived, a batch at a time, until the reader is done.
                while let Ok(first) = rx.recv() {
                    let cmds = std::iter::once(first)
                        .chain(rx.try_iter())
                        .map(|(off, n)| dma(iova + off as u64, dst + off as u64, n as u64))
                        .collect();
                    hw.run(cmds)?;
                }
                Ok::<(), crate::hw::HwError>(())
            });
            let mut on_chunk = |off: usize, n: usize| {
                let _ = tx.send((off, n));
                // SAFETY: `base + off .. + n` lies inside `staging`, our private memfd
                // mapping, alive for this whole scope; the kernel has finished writing
                // these bytes (their read completed) and nothing writes them again: the
                // device may only read them (the IOMMU mapping is READ).
                let bytes = unsafe { std::slice::from_raw_parts(base.add(off), n) };
                hasher.update(bytes);
            };
            // SAFETY: `base` is valid for `len` bytes while `staging` lives; nothing reads
            // a chunk before `on_chunk` is called for it.
            let read = unsafe { self.io.read_chunked(fd, base, len, &mut on_chunk) };
            drop(tx);
            let copy = copier.join().unwrap_or(Err(crate::hw::HwError::Timeout));
            read.map_err(CacheError::from)
                .and(copy.map_err(CacheError::from))
        });
        drop(map);
        copied?;
        if hasher.finalize().as_bytes() != &header.data_digest {
            return Err(CacheError::DataDigest);
        }
        Ok(Data {
            dram,
            staging: Arc::new(staging),
        })
    }
}

/// Every constant's bytes: inline ones from the model cache, the others from the
/// verified data cache.
fn constant_values(n: usize, list: &[(u32, ConstValue)], staging: Option<&SharedRegion>) -> Values {
    let mut v: Values = vec![None; n];
    for (i, c) in list {
        let bytes = match c {
            ConstValue::Inline(b) => Some(b.clone()),
            ConstValue::Data { offset, len } => staging.and_then(|s| {
                let mut b = vec![0u8; usize::try_from(*len).ok()?];
                s.read(*offset, &mut b).ok().map(|_| b)
            }),
        };
        if let Some(slot) = v.get_mut(*i as usize) {
            *slot = bytes;
        }
    }
    v
}
