//! Loading a prepared model from the cache: the model cache is read whole and its MAC
//! verified before anything in it is parsed; the data cache is read into private staging
//! memory, hashed chunk by chunk as it arrives and copied into device memory meanwhile,
//! and nothing is used unless its digest matches.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::mpsc;
use std::sync::Arc;

use super::format::{decode_body, ConstValue, Header, Image, HEADER_LEN, MAX_MODEL_CACHE};
use super::io::{file_size, CacheIo, CHUNK};
use super::mac::{verify, MAC_LEN};
use super::{Cache, CacheError, CacheFiles};
use crate::compile::constants::{Constants, Values};
use crate::compile::{ConstantBlock, ModelPlan};
use crate::execute::BuiltProgram;
use crate::hal::BYTE_SIZE_OF_CACHE_TOKEN;
use crate::hw::{Command, DramBlock, Hardware, IoMapping, Perm};
use crate::memory::SharedRegion;
use vnpu_emu::tensor::Layout;

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
        let len = len.max(1).next_multiple_of(CHUNK);
        let region = SharedRegion::new("vnpu-cache-staging", len).map_err(mem)?;
        region.zero(0, len as u64).map_err(mem)?;
        let map = hw.map(region.fd(), 0, len as u64, Perm::READ)?;
        Ok(Staging { region, map })
    }
}

/// A DMA copy command.
fn copy(src: u64, dst: u64, len: u64) -> Command {
    Command::DmaCopy { src, dst, len }
}

fn mem(e: impl std::fmt::Display) -> CacheError {
    CacheError::Memory(e.to_string())
}

/// Data caches up to this size are copied to the device after they are read (and hashed
/// while the device copies); larger ones while they are read, by a second thread.
const OVERLAP_FROM: usize = 4 * CHUNK;

/// What a load restores, for the device to make a prepared model of: the plan (the
/// model, its constants made on first need, their layout), the constants already in
/// device memory, the program for the model's own input shapes already uploaded, and
/// the device epoch all of it was uploaded in.
pub struct Restored {
    /// The model, its constants and their layout.
    pub plan: ModelPlan,
    /// The constant block in device memory.
    pub const_mem: Option<DramBlock>,
    /// The program for the model's own input shapes: the shapes, the built program and
    /// its device memory.
    pub instance: Option<(Vec<Vec<usize>>, BuiltProgram, DramBlock)>,
    /// The device epoch of the upload.
    pub epoch: u64,
}

/// A verified model cache, its device memory allocated and its program built.
struct Ready {
    header: Header,
    model: crate::hal::Model,
    constants: Vec<(u32, ConstValue)>,
    block: ConstantBlock,
    data: Option<DramBlock>,
    built: Option<(Vec<Vec<usize>>, BuiltProgram, DramBlock)>,
}

impl Ready {
    fn upload(&self) -> Upload<'_> {
        Upload {
            data: self.data.as_ref().map_or(0, |d| d.addr),
            program: self
                .built
                .as_ref()
                .map(|(_, b, p)| (b.bytes.as_slice(), p.addr)),
        }
    }
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
        let file = self.read_model_file(fd)?;
        Self::open_model_file(&key, hw, &file, token)
    }

    /// The model cache's bytes, of a plausible size.
    fn read_model_file(&self, fd: BorrowedFd<'_>) -> Result<Vec<u8>, CacheError> {
        let size = model_file_size(fd)?;
        Ok(self.io.read_vec(fd, size)?)
    }

    /// Verifies the MAC of a model cache file, then parses it.
    fn open_model_file(
        key: &[u8; 32],
        hw: &Hardware,
        file: &[u8],
        token: &[u8; BYTE_SIZE_OF_CACHE_TOKEN],
    ) -> Result<(Header, Image), CacheError> {
        let header = Self::verify_model_file(key, hw, file, token)?;
        let image = parse_body(file, &header)?;
        Ok((header, image))
    }

    /// Verifies the MAC of a model cache file over all of it, then reads its header
    /// (which checks the file's length: exactly header, body and MAC).
    fn verify_model_file(
        key: &[u8; 32],
        hw: &Hardware,
        file: &[u8],
        token: &[u8; BYTE_SIZE_OF_CACHE_TOKEN],
    ) -> Result<Header, CacheError> {
        let (contents, tag) = file.split_at(file.len().saturating_sub(MAC_LEN));
        if !verify(key, &Self::binding(hw, token), contents, tag) {
            return Err(CacheError::Integrity);
        }
        Header::decode(file)
    }

    /// Builds what a parsed model cache needs in device memory: the constant layout and
    /// the program relocated to the data (at `data`) and a fresh arena, its own device
    /// memory allocated.
    fn ready(
        hw: &Arc<Hardware>,
        image: Image,
        data: Option<DramBlock>,
        header: Header,
    ) -> Result<Ready, CacheError> {
        let n = image.model.main.operands.len();
        let mut offsets = vec![None; n];
        let mut layouts = vec![Layout::Plain; n];
        for (i, v) in &image.constants {
            if let ConstValue::Data { offset, layout, .. } = v {
                offsets[*i as usize] = Some(*offset);
                layouts[*i as usize] = *layout;
            }
        }
        let block = ConstantBlock {
            bytes: Vec::new(),
            offsets,
            layouts,
        };
        let built = match image.instance {
            Some(inst) => {
                let base = data.as_ref().map_or(0, |d| d.addr);
                let built = BuiltProgram::relocated(
                    hw,
                    inst.compiled,
                    (inst.program, inst.program_ns),
                    (base, header.data_len),
                    super::format::ARENA_TAG,
                )?
                .ok_or(CacheError::Malformed("program placement"))?;
                let program = hw.alloc_dram(built.bytes.len() as u64)?;
                Some((inst.input_shapes, built, program))
            }
            None => None,
        };
        Ok(Ready {
            header,
            model: image.model,
            constants: image.constants,
            block,
            data,
            built,
        })
    }

    /// Loads what a prepared model is made of from verified cache files. The model cache's MAC is
    /// verified before anything in it is parsed; a small data cache is read by the
    /// helper thread ([`super::helper`]) while this one parses, and the program is
    /// relocated to fresh device memory before any copy starts, so it travels to the
    /// device in the same batch as the data.
    pub fn load(
        &self,
        hw: &Arc<Hardware>,
        files: &CacheFiles,
        token: &[u8; BYTE_SIZE_OF_CACHE_TOKEN],
    ) -> Result<Restored, CacheError> {
        let epoch = hw.epoch();
        let key = self.key()?;
        let model_size = model_file_size(files.model.as_fd())?;
        let data_size = file_size(files.data.as_fd())?;
        let fd = files.data.as_fd();
        let (staging, filled) = match usize::try_from(data_size) {
            // A small data cache is read (into private staging, bounded in size, where
            // nothing uses it) while the model cache is verified and parsed.
            Ok(len) if len <= OVERLAP_FROM && model_size <= OVERLAP_FROM => {
                let staging = self.take_staging(hw, program_at(len) + model_size)?;
                let model = (files.model.as_fd(), model_size, &key, token);
                let filled = self.fill_small(hw, fd, &staging, model, epoch, len);
                (staging, filled)
            }
            _ => {
                let file = self.read_model_file(files.model.as_fd())?;
                let header = Self::verify_model_file(&key, hw, &file, token)?;
                let len = data_len(&header, data_size)?;
                // The program is part of the body, so the body's length bounds it.
                let need = program_at(len)
                    .checked_add(file.len())
                    .ok_or(CacheError::Malformed("size"))?;
                let data = alloc_data(hw, &header)?;
                let staging = self.take_staging(hw, need)?;
                let filled = parse_body(&file, &header)
                    .and_then(|image| Self::ready(hw, image, data, header))
                    .and_then(|ready| {
                        let upload = (ready.upload(), epoch);
                        self.fill(hw, fd, &staging, upload, len, &ready.header)?;
                        Ok(ready)
                    });
                (staging, filled)
            }
        };
        self.keep_staging(staging);
        let ready = filled?;
        // Constants needed on the host later (to compile other input shapes) are copied
        // back from device memory then; that memory lives as long as the model.
        let from = ready
            .data
            .as_ref()
            .map(|d| (Arc::clone(hw), d.addr, d.len, epoch));
        // The shapes of the pre-packed constants (to unpack their host copies).
        let operands = &ready.model.main.operands;
        let packed: Vec<(u32, Vec<usize>)> = ready
            .constants
            .iter()
            .filter(|(_, c)| {
                matches!(
                    c,
                    ConstValue::Data {
                        layout: Layout::GemmPanels | Layout::IntPanels,
                        ..
                    }
                )
            })
            .filter_map(|(i, _)| {
                let dims = &operands.get(*i as usize)?.dimensions;
                Some((*i, dims.iter().map(|&d| d as usize).collect()))
            })
            .collect();
        let n = operands.len();
        let list = ready.constants;
        let constants = Constants::lazy(move || constant_values(n, &packed, &list, from));
        Ok(Restored {
            plan: ModelPlan::restored(ready.model, constants, ready.block),
            const_mem: ready.data,
            instance: ready.built,
            epoch,
        })
    }

    /// The kept staging buffer if it holds `need` bytes, else a new one.
    fn take_staging(&self, hw: &Arc<Hardware>, need: usize) -> Result<Staging, CacheError> {
        let kept = self
            .staging
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match kept {
            Some(s) if s.region.len() >= need => Ok(s),
            _ => Staging::new(hw, need),
        }
    }

    /// Keeps `staging` for the next load, unless a larger one is kept already.
    fn keep_staging(&self, staging: Staging) {
        let mut slot = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        if slot
            .as_ref()
            .is_none_or(|s| s.region.len() < staging.region.len())
        {
            *slot = Some(staging);
        }
    }

    /// Reads the model cache, then has the helper read a small data cache into
    /// `staging` and hash it while this thread verifies the model cache's MAC over the
    /// whole file and only then parses it; then copies the data and the program (written behind it) to the device
    /// in one batch, and fails unless the digest matches. The helper hashes what it has
    /// just read, while it is in its core's cache (hashed from another core it took
    /// ~2.5x as long), and while the device copies.
    fn fill_small(
        &self,
        hw: &Arc<Hardware>,
        fd: BorrowedFd<'_>,
        staging: &Staging,
        (model_fd, model_size, key, token): ModelFile<'_>,
        epoch: u64,
        len: usize,
    ) -> Result<Ready, CacheError> {
        let base = staging
            .region
            .ptr(0, staging.region.len() as u64)
            .map_err(mem)?;
        let target = ReadTarget {
            io: Arc::clone(&self.io),
            fd: fd.as_raw_fd(),
            dst: base,
            len,
        };
        // The model cache first: the helper's read holds the I/O ring while it runs.
        let file = self.io.read_vec(model_fd, model_size)?;
        let (arrived, read) = mpsc::sync_channel(1);
        // `base` is our private staging mapping, valid for `len` bytes while `staging`
        // lives, and `fd` is open while `files` lives: both outlive `reading`, which is
        // waited for (or dropped, which waits) before this function returns; this thread
        // touches only the staging bytes after `len` meanwhile.
        let reading = self.helper.run(move || {
            // SAFETY: by the facts above, `read_then_hash`'s contract holds.
            unsafe { target.read_then_hash(arrived) }
        });
        let header = Self::verify_model_file(key, hw, &file, token)?;
        data_len(&header, len as u64)?;
        let data = alloc_data(hw, &header)?;
        let parsed = parse_body(&file, &header).and_then(|i| Self::ready(hw, i, data, header));
        let read = recv_spinning(&read).unwrap_or_else(|_| Err(helper_failed()));
        let ready = parsed?;
        read?;
        let upload = ready.upload();
        let iova = staging.map.iova;
        let mut cmds = Vec::with_capacity(2);
        if len > 0 {
            cmds.push(copy(iova, upload.data, len as u64));
        }
        if let Some((bytes, addr)) = upload.program.filter(|(b, _)| !b.is_empty()) {
            let at = program_at(len);
            staging.region.write(at as u64, bytes).map_err(mem)?;
            cmds.push(copy(iova + at as u64, addr, bytes.len() as u64));
        }
        let copying = hw.submit(cmds, 0, Some(epoch))?;
        let digest = reading.wait().flatten();
        copying.wait()?;
        match digest {
            Some(d) if d == ready.header.data_digest => Ok(ready),
            Some(_) => Err(CacheError::DataDigest),
            None => Err(helper_failed().into()),
        }
    }

    /// Reads the data cache into `staging`, hashing it and copying it to device memory as
    /// it comes, with the program (written after the data) copied last; fails unless the
    /// digest matches.
    fn fill(
        &self,
        hw: &Arc<Hardware>,
        fd: BorrowedFd<'_>,
        staging: &Staging,
        (upload, epoch): (Upload<'_>, u64),
        len: usize,
        header: &Header,
    ) -> Result<(), CacheError> {
        let dst = upload.data;
        let base = staging
            .region
            .ptr(0, staging.region.len() as u64)
            .map_err(mem)?;
        let iova = staging.map.iova;
        let program = match upload.program {
            Some((bytes, addr)) if !bytes.is_empty() => {
                let at = program_at(len);
                staging.region.write(at as u64, bytes).map_err(mem)?;
                Some(copy(iova + at as u64, addr, bytes.len() as u64))
            }
            _ => None,
        };
        let copies =
            move |chunks: &mut dyn Iterator<Item = (usize, usize)>| -> Vec<crate::hw::Command> {
                chunks
                    .map(|(off, n)| copy(iova + off as u64, dst + off as u64, n as u64))
                    .collect()
            };
        let mut hasher = super::mac::DataDigest::default();
        let (tx, rx) = mpsc::channel::<(usize, usize)>();
        std::thread::scope(|s| {
            let copier = s.spawn(move || {
                // Copies whatever has arrived, a batch at a time, until the reader is
                // done; then the program.
                while let Ok(first) = rx.recv() {
                    let cmds = copies(&mut std::iter::once(first).chain(rx.try_iter()));
                    hw.run(cmds, 0, Some(epoch))?;
                }
                hw.run(program.into_iter().collect(), 0, Some(epoch))?;
                Ok::<(), crate::hw::HwError>(())
            });
            let mut on_chunk = |off: usize, n: usize| {
                let _ = tx.send((off, n));
                // Inside `staging`, our private mapping alive for the call; the read of
                // these bytes completed and nothing writes them again (the device maps
                // them READ).
                // SAFETY: as just said: in bounds, initialised, and never written meanwhile.
                let bytes = unsafe { std::slice::from_raw_parts(base.add(off), n) };
                hasher.update(bytes);
            };
            // SAFETY: `base` is valid for `len` bytes while `staging` lives; chunks are
            // handed on only once they have arrived.
            let read = unsafe { self.io.read_chunked(fd, base, len, &mut on_chunk) };
            drop(tx);
            let copied = copier.join().unwrap_or(Err(crate::hw::HwError::Timeout));
            read.map_err(CacheError::from)
                .and(copied.map_err(CacheError::from))
        })?;
        if hasher.finish() != header.data_digest {
            return Err(CacheError::DataDigest);
        }
        Ok(())
    }
}

/// The model cache file of a load: its fd and size, the key and the token.
type ModelFile<'a> = (
    BorrowedFd<'a>,
    usize,
    &'a [u8; 32],
    &'a [u8; BYTE_SIZE_OF_CACHE_TOKEN],
);

/// The size of a model cache file, if plausible.
fn model_file_size(fd: BorrowedFd<'_>) -> Result<usize, CacheError> {
    let size = file_size(fd)?;
    if size > MAX_MODEL_CACHE || size < (HEADER_LEN + MAC_LEN) as u64 {
        return Err(CacheError::Malformed("model cache size"));
    }
    usize::try_from(size).map_err(|_| CacheError::Malformed("model cache size"))
}

/// The data cache's length, if the (verified) header agrees with the file's `size`.
fn data_len(header: &Header, size: u64) -> Result<usize, CacheError> {
    if size != header.data_len {
        return Err(CacheError::DataLength {
            got: size,
            want: header.data_len,
        });
    }
    usize::try_from(size).map_err(|_| CacheError::Malformed("size"))
}

/// Device memory for the data cache (none for an empty one).
fn alloc_data(hw: &Arc<Hardware>, header: &Header) -> Result<Option<DramBlock>, CacheError> {
    Ok(match header.data_len {
        0 => None,
        n => Some(hw.alloc_dram(n)?),
    })
}

/// Parses the body of a model cache file whose MAC verified and whose header is `header`.
fn parse_body(file: &[u8], header: &Header) -> Result<Image, CacheError> {
    let end = file.len().saturating_sub(MAC_LEN);
    let body = file
        .get(HEADER_LEN..end)
        .ok_or(CacheError::Malformed("file length"))?;
    decode_body(body, header.data_len)
}

/// A read of a data cache into staging memory, handed to the helper thread.
struct ReadTarget {
    io: Arc<CacheIo>,
    fd: RawFd,
    dst: *mut u8,
    len: usize,
}

// SAFETY: `dst` points into a shared-memory staging mapping that the loading thread
// keeps alive, and does not touch, until the helper's read of it has finished
// (`fill_small`); the fd is a plain number, open for that long.
unsafe impl Send for ReadTarget {}

impl ReadTarget {
    /// Reads the whole data cache, says how the read went on `arrived`, then returns the
    /// data's digest (`None` if the read failed).
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes, `fd` open, and nothing else may
    /// write those bytes, for the whole call; nothing else may read them until the read
    /// is reported.
    unsafe fn read_then_hash(
        self,
        arrived: mpsc::SyncSender<std::io::Result<()>>,
    ) -> Option<[u8; MAC_LEN]> {
        // SAFETY: the caller keeps `fd` open for the call.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        // SAFETY: forwarded from the caller's contract.
        let read = unsafe { self.io.read_chunked(fd, self.dst, self.len, &mut |_, _| {}) };
        let ok = read.is_ok();
        // The loader may have stopped waiting (its own error); the digest is unused then.
        let _ = arrived.send(read);
        if !ok {
            return None;
        }
        // SAFETY: the read filled these `len` bytes and nothing writes them during the
        // call (the device only reads them).
        let bytes = unsafe { std::slice::from_raw_parts(self.dst, self.len) };
        Some(super::mac::DataDigest::of(bytes))
    }
}

/// How long a load spins for the helper's read before it sleeps.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Waits for `rx`, spinning up to [`SPIN`] before blocking. The parse usually ends a few
/// tens of µs before the helper's read; a thread that blocks then is woken ~15 µs after
/// the answer on an idle VM (a halted vCPU; measured with a ping-pong of two threads),
/// which is on the load's critical path. The spin is bounded, so a slow read costs at
/// most [`SPIN`] of CPU.
fn recv_spinning<T>(rx: &mpsc::Receiver<T>) -> Result<T, mpsc::RecvError> {
    let start = std::time::Instant::now();
    loop {
        match rx.try_recv() {
            Ok(v) => return Ok(v),
            Err(mpsc::TryRecvError::Disconnected) => return Err(mpsc::RecvError),
            Err(mpsc::TryRecvError::Empty) if start.elapsed() < SPIN => std::hint::spin_loop(),
            Err(mpsc::TryRecvError::Empty) => return rx.recv(),
        }
    }
}

/// What a load reports when the helper thread failed to answer.
fn helper_failed() -> std::io::Error {
    std::io::Error::other("the cache helper thread failed")
}

/// Where the data and the program go in device memory.
#[derive(Clone, Copy)]
struct Upload<'a> {
    /// The data cache's device address.
    data: u64,
    /// The encoded program and its device address.
    program: Option<(&'a [u8], u64)>,
}

/// Where the program sits in staging, behind `data_len` bytes of data.
fn program_at(data_len: usize) -> usize {
    data_len.next_multiple_of(64)
}

/// Every constant's bytes: inline ones from the model cache, the others from the
/// verified data cache in device memory (`from`: device, address, length), packed ones
/// unpacked (`packed`: their operands' shapes); `n` operands in all.
fn constant_values(
    n: usize,
    packed: &[(u32, Vec<usize>)],
    list: &[(u32, ConstValue)],
    from: Option<(Arc<Hardware>, u64, u64, u64)>,
) -> Values {
    let block = from.and_then(|(hw, addr, len, epoch)| hw.read_dram(addr, len, epoch).ok());
    let mut v: Values = vec![None; n];
    for (i, c) in list {
        let bytes = match c {
            ConstValue::Inline(b) => Some(b.as_slice().to_vec()),
            ConstValue::Data {
                offset,
                len,
                layout,
            } => block.as_ref().and_then(|b| {
                let shape = packed.iter().find(|(k, _)| k == i).map(|(_, s)| s);
                let held = match (layout, shape) {
                    (Layout::Plain, _) => *len,
                    (Layout::GemmPanels | Layout::IntPanels, Some(s)) => {
                        layout.byte_len(super::format::layout_dtype(*layout), s)?
                    }
                    (Layout::GemmPanels | Layout::IntPanels, None) => return None,
                };
                let start = usize::try_from(*offset).ok()?;
                let end = start.checked_add(usize::try_from(held).ok()?)?;
                let bytes = b.get(start..end)?;
                match layout {
                    Layout::Plain => Some(bytes.to_vec()),
                    Layout::GemmPanels => vnpu_emu::program::unpack_panels(shape?, bytes),
                    Layout::IntPanels => vnpu_emu::program::unpack_int_panels(shape?, bytes),
                }
            }),
        };
        if let Some(slot) = v.get_mut(*i as usize) {
            *slot = bytes;
        }
    }
    v
}
