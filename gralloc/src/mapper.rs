//! The mapper: AIMapper v5 semantics over the process-wide import registry.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::allocator::Desc;
use crate::error::MapperError;
use crate::fence::{wait_fd, ACQUIRE_TIMEOUT_MS};
use crate::format::{format_info, pixel_format, usage};
use crate::handle::{
    native_handle_t, NativeHandle, RawHandle, NATIVE_HANDLE_VERSION, NUM_FDS, NUM_INTS,
};
use crate::metadata::{
    supported_metadata_types, vendor, Cta861_3, ExtendableType, MetadataType,
    MetadataTypeDescription, Rect, Smpte2086, StandardMetadata, StandardMetadataType, Writer,
    CHROMA_SITING, COMPRESSION, INTERLACED, STANDARD_METADATA_TYPE,
};
use crate::shared::{
    check_memfd, FieldId, Mapping, MetaMapping, SharedField, BLOB_MAX, META_HEADER_SIZE,
};
use crate::strict;

/// An imported buffer handle (`buffer_handle_t`): the address of the
/// process-local clone of the raw handle. It is only dereferenced after it is
/// found in the registry, so any value is safe to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufferHandle(usize);

impl BufferHandle {
    /// From a C `buffer_handle_t` (not dereferenced).
    pub fn from_ptr(p: *const native_handle_t) -> Self {
        Self(p as usize)
    }

    /// The C `buffer_handle_t`.
    pub fn as_ptr(&self) -> *const native_handle_t {
        self.0 as *const native_handle_t
    }
}

/// Immutable facts about an imported buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferInfo {
    /// BUFFER_ID.
    pub id: u64,
    /// Width (bytes for BLOB).
    pub width: u32,
    /// Height.
    pub height: u32,
    /// Stride in pixels.
    pub stride: u32,
    /// Requested pixel format.
    pub format: i32,
    /// Usage.
    pub usage: u64,
    /// Bytes of pixel memory mapped.
    pub size: usize,
    /// Bytes of the reserved region.
    pub reserved_size: u64,
}

struct Imported {
    /// Keeps the dup'd fds (and the key address) alive.
    handle: NativeHandle,
    desc: Desc,
    name: String,
    creator_pid: u32,
    pixels: Mapping,
    meta_map: MetaMapping,
    lock_count: AtomicU32,
    strict: bool,
}

// SAFETY: the mappings are plain shared memory the struct owns; all shared-memory
// access goes through atomics/volatile copies.
unsafe impl Send for Imported {}
// SAFETY: as above.
unsafe impl Sync for Imported {}

impl Drop for Imported {
    fn drop(&mut self) {
        if self.strict {
            if let Some(e) = strict::engine() {
                e.unregister(self.pixels.ptr() as usize, self.pixels.len());
            }
        }
    }
}

/// A cheap hasher for pointer keys.
#[derive(Default)]
struct PtrHasher(u64);

impl Hasher for PtrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, v: usize) {
        self.0 = (v as u64 >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Registry = HashMap<usize, Arc<Imported>, BuildHasherDefault<PtrHasher>>;

static REGISTRY: LazyLock<RwLock<Registry>> = LazyLock::new(|| RwLock::new(Registry::default()));

fn registry() -> RwLockReadGuard<'static, Registry> {
    REGISTRY.read().unwrap_or_else(|p| p.into_inner())
}

fn registry_mut() -> RwLockWriteGuard<'static, Registry> {
    REGISTRY.write().unwrap_or_else(|p| p.into_inner())
}

fn lookup(h: BufferHandle) -> Result<Arc<Imported>, MapperError> {
    registry()
        .get(&h.0)
        .cloned()
        .ok_or(MapperError::BadBuffer("not an imported buffer"))
}

/// The mapper. All instances share one process-wide registry, so a buffer
/// imported through one may be used and freed through any other.
#[derive(Debug, Default, Clone, Copy)]
pub struct Mapper;

fn is_yuv(format: i32) -> bool {
    matches!(
        format,
        pixel_format::YV12
            | pixel_format::YCBCR_420_888
            | pixel_format::YCRCB_420_SP
            | pixel_format::YCBCR_P010
    )
}

impl Mapper {
    /// A mapper (all instances are equivalent).
    pub fn new() -> Self {
        Self
    }

    /// `importBuffer` from a C pointer.
    ///
    /// # Safety
    /// `raw` must be null or point to a readable native handle.
    pub unsafe fn import_buffer_ptr(
        &self,
        raw: *const native_handle_t,
    ) -> Result<BufferHandle, MapperError> {
        // SAFETY: forwarded caller contract.
        let raw = unsafe { RawHandle::from_ptr(raw) }
            .ok_or(MapperError::BadBuffer("null or malformed native handle"))?;
        self.import_buffer(raw)
    }

    /// `importBuffer`: validates the raw handle completely (counts, magic,
    /// version, geometry, each fd a sealed memfd of the right size) before
    /// any mmap, then clones it (dup'd fds), maps it and registers it.
    pub fn import_buffer(&self, raw: RawHandle<'_>) -> Result<BufferHandle, MapperError> {
        if raw.version != NATIVE_HANDLE_VERSION {
            return Err(MapperError::BadBuffer("native handle version"));
        }
        if raw.fds.len() != NUM_FDS || raw.ints.len() != NUM_INTS {
            return Err(MapperError::BadBuffer("fd/int counts"));
        }
        let desc = Desc::from_ints(raw.ints).map_err(MapperError::BadBuffer)?;
        let pix_id = check_memfd(raw.fds[0], desc.layout.size)?;
        let meta_id = check_memfd(raw.fds[1], desc.meta_size)?;
        if pix_id == meta_id {
            return Err(MapperError::BadBuffer(
                "pixel and metadata fds are the same file",
            ));
        }
        // Clone: dup the fds so the import owns them independently of the raw handle.
        let mut fds = Vec::with_capacity(NUM_FDS);
        for &fd in raw.fds {
            // SAFETY: F_DUPFD_CLOEXEC on an fd just validated by fstat; result checked.
            let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if d < 0 {
                return Err(MapperError::NoResources("dup"));
            }
            // SAFETY: a fresh fd we own.
            fds.push(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(d) });
        }
        // The dups must still be the files we checked (the raw fds could be swapped concurrently).
        if check_memfd(std::os::fd::AsRawFd::as_raw_fd(&fds[0]), desc.layout.size)? != pix_id
            || check_memfd(std::os::fd::AsRawFd::as_raw_fd(&fds[1]), desc.meta_size)? != meta_id
        {
            return Err(MapperError::BadBuffer("fds changed during import"));
        }
        let pixels = Mapping::map(std::os::fd::AsRawFd::as_raw_fd(&fds[0]), desc.layout.size)
            .map_err(|_| MapperError::NoResources("mmap pixels"))?;
        let meta_map = Mapping::map(std::os::fd::AsRawFd::as_raw_fd(&fds[1]), desc.meta_size)
            .map_err(|_| MapperError::NoResources("mmap metadata"))?;
        let meta_map =
            MetaMapping::new(meta_map).ok_or(MapperError::BadBuffer("metadata file too small"))?;
        let (creator_pid, name) = meta_map.view().verify(raw.ints, pix_id)?;
        let handle =
            NativeHandle::new(fds, raw.ints).ok_or(MapperError::NoResources("native handle"))?;
        let mut strict_on = false;
        if strict::is_enabled() {
            if let Some(e) = strict::engine() {
                match e.register(pixels.ptr() as usize, pixels.len(), desc.id) {
                    Ok(()) => strict_on = true,
                    Err(errno) => tracing::warn!(errno, "strict-lock registration failed"),
                }
            }
        }
        let key = handle.as_ptr() as usize;
        let imported = Arc::new(Imported {
            handle,
            desc,
            name,
            creator_pid,
            pixels,
            meta_map,
            lock_count: AtomicU32::new(0),
            strict: strict_on,
        });
        registry_mut().insert(key, imported);
        Ok(BufferHandle(key))
    }

    /// `freeBuffer`.
    pub fn free_buffer(&self, h: BufferHandle) -> Result<(), MapperError> {
        let removed = registry_mut().remove(&h.0);
        match removed {
            Some(_) => Ok(()),
            None => Err(MapperError::BadBuffer("not an imported buffer")),
        }
    }

    /// `getTransportSize`: (numFds, numInts) needed to send the buffer.
    pub fn get_transport_size(&self, h: BufferHandle) -> Result<(u32, u32), MapperError> {
        let b = lookup(h)?;
        Ok((b.handle.fds().len() as u32, b.handle.ints().len() as u32))
    }

    /// Facts about an imported buffer.
    pub fn buffer_info(&self, h: BufferHandle) -> Result<BufferInfo, MapperError> {
        let b = lookup(h)?;
        Ok(BufferInfo {
            id: b.desc.id,
            width: b.desc.width as u32,
            height: b.desc.height as u32,
            stride: b.desc.layout.stride,
            format: b.desc.format,
            usage: b.desc.usage,
            size: b.pixels.len(),
            reserved_size: b.desc.reserved_size,
        })
    }

    /// `lock`: returns the address of the top-left of the whole buffer. The
    /// acquire fence is owned by the callee and closed on every path.
    pub fn lock(
        &self,
        h: BufferHandle,
        cpu_usage: u64,
        region: Rect,
        acquire_fence: Option<OwnedFd>,
    ) -> Result<*mut u8, MapperError> {
        let b = {
            let reg = registry();
            let b = reg
                .get(&h.0)
                .ok_or(MapperError::BadBuffer("not an imported buffer"))?;
            check_lock_args(b, cpu_usage, &region)?;
            if acquire_fence.is_none() && !b.strict {
                // Fast path: no syscall.
                b.lock_count
                    .fetch_update(Ordering::Acquire, Ordering::Relaxed, |c| c.checked_add(1))
                    .map_err(|_| MapperError::NoResources("lock count overflow"))?;
                return Ok(b.pixels.ptr());
            }
            Arc::clone(b)
        };
        if let Some(f) = acquire_fence {
            wait_fd(f.as_fd(), ACQUIRE_TIMEOUT_MS)?;
        }
        b.lock_count
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |c| c.checked_add(1))
            .map_err(|_| MapperError::NoResources("lock count overflow"))?;
        if b.strict {
            if let Some(e) = strict::engine() {
                e.on_lock(
                    b.pixels.ptr() as usize,
                    writable_range(&b, cpu_usage, &region),
                );
            }
        }
        Ok(b.pixels.ptr())
    }

    /// `unlock`: the release fence is always `None` (CPU access is synchronous).
    pub fn unlock(&self, h: BufferHandle) -> Result<Option<OwnedFd>, MapperError> {
        let reg = registry();
        let b = reg
            .get(&h.0)
            .ok_or(MapperError::BadBuffer("not an imported buffer"))?;
        let prev = b
            .lock_count
            .fetch_update(Ordering::Release, Ordering::Relaxed, |c| c.checked_sub(1))
            .map_err(|_| MapperError::BadBuffer("buffer is not locked"))?;
        if b.strict {
            if let Some(e) = strict::engine() {
                e.on_unlock(b.pixels.ptr() as usize, prev - 1);
            }
        }
        Ok(None)
    }

    fn require_locked(&self, h: BufferHandle) -> Result<(), MapperError> {
        let reg = registry();
        let b = reg
            .get(&h.0)
            .ok_or(MapperError::BadBuffer("not an imported buffer"))?;
        if b.lock_count.load(Ordering::Acquire) == 0 {
            return Err(MapperError::BadBuffer("buffer is not locked"));
        }
        // MAP_SHARED memory is coherent; a full fence orders the CPU accesses.
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// `flushLockedBuffer`.
    pub fn flush_locked_buffer(&self, h: BufferHandle) -> Result<(), MapperError> {
        self.require_locked(h)
    }

    /// `rereadLockedBuffer`.
    pub fn reread_locked_buffer(&self, h: BufferHandle) -> Result<(), MapperError> {
        self.require_locked(h)
    }

    /// Typed standard metadata value.
    pub fn get_standard(
        &self,
        h: BufferHandle,
        ty: StandardMetadataType,
    ) -> Result<StandardMetadata, MapperError> {
        let b = lookup(h)?;
        standard_value(&b, ty)
    }

    /// `getStandardMetadata`: encodes into `dest` if it fits; returns the
    /// encoded size either way. Buffer is validated before the type.
    pub fn get_standard_metadata(
        &self,
        h: BufferHandle,
        ty: i64,
        dest: &mut [u8],
    ) -> Result<usize, MapperError> {
        let b = lookup(h)?;
        let ty = StandardMetadataType::from_i64(ty)
            .ok_or(MapperError::Unsupported("unknown standard metadata type"))?;
        let mut w = Writer::with_capacity(128);
        standard_value(&b, ty)?.encode_into(&mut w);
        Ok(copy_out(&w.buf, dest))
    }

    /// `getMetadata` (standard or vendor type).
    pub fn get_metadata(
        &self,
        h: BufferHandle,
        ty: MetadataType<'_>,
        dest: &mut [u8],
    ) -> Result<usize, MapperError> {
        let b = lookup(h)?;
        let bytes = encoded(&b, ty)?;
        Ok(copy_out(&bytes, dest))
    }

    /// Typed set of a standard value.
    pub fn set_standard(&self, h: BufferHandle, v: &StandardMetadata) -> Result<(), MapperError> {
        self.set_standard_metadata(h, v.metadata_type().value(), &v.encode())
    }

    /// `setStandardMetadata`: BAD_VALUE for the 7 constant types; UNSUPPORTED
    /// for unknown, non-settable or malformed values.
    pub fn set_standard_metadata(
        &self,
        h: BufferHandle,
        ty: i64,
        data: &[u8],
    ) -> Result<(), MapperError> {
        let b = lookup(h)?;
        let ty = StandardMetadataType::from_i64(ty)
            .ok_or(MapperError::Unsupported("unknown standard metadata type"))?;
        if ty.is_constant() {
            return Err(MapperError::BadValue("metadata type is constant"));
        }
        if !ty.is_settable() {
            return Err(MapperError::Unsupported("metadata type is not settable"));
        }
        let v = StandardMetadata::decode(ty, data)
            .map_err(|_| MapperError::Unsupported("malformed metadata"))?;
        let field = match v {
            StandardMetadata::Dataspace(d) => SharedField::Dataspace(d),
            StandardMetadata::BlendMode(m) => SharedField::BlendMode(m),
            StandardMetadata::Smpte2086(s) => SharedField::Smpte2086(s.map(|s| s.to_array())),
            StandardMetadata::Cta861_3(c) => SharedField::Cta861_3(
                c.map(|c| [c.max_content_light_level, c.max_frame_average_light_level]),
            ),
            StandardMetadata::Smpte2094_40(o) => {
                SharedField::Smpte2094_40(check_blob(o, BLOB_MAX)?)
            }
            StandardMetadata::Smpte2094_10(o) => {
                SharedField::Smpte2094_10(check_blob(o, BLOB_MAX)?)
            }
            _ => return Err(MapperError::Unsupported("metadata type is not settable")),
        };
        b.meta_map.view().write(&field)
    }

    /// `setMetadata` (standard or vendor type).
    pub fn set_metadata(
        &self,
        h: BufferHandle,
        ty: MetadataType<'_>,
        data: &[u8],
    ) -> Result<(), MapperError> {
        let b = lookup(h)?;
        if ty.name == STANDARD_METADATA_TYPE {
            drop(b);
            return self.set_standard_metadata(h, ty.value, data);
        }
        if ty.name != vendor::NAME {
            return Err(MapperError::Unsupported("unknown metadata type namespace"));
        }
        match ty.value {
            vendor::ALLOCATOR_PID => Err(MapperError::BadValue("metadata type is constant")),
            vendor::USER_DATA => {
                let v =
                    decode_user_data(data).ok_or(MapperError::Unsupported("malformed metadata"))?;
                b.meta_map.view().write(&SharedField::UserData(check_blob(
                    v,
                    vendor::USER_DATA_MAX,
                )?))
            }
            _ => Err(MapperError::Unsupported("unknown vendor metadata type")),
        }
    }

    /// `listSupportedMetadataTypes`.
    pub fn list_supported_metadata_types(&self) -> &'static [MetadataTypeDescription] {
        supported_metadata_types()
    }

    /// `dumpBuffer`: one callback per gettable metadata type.
    pub fn dump_buffer(
        &self,
        h: BufferHandle,
        cb: &mut dyn FnMut(MetadataType<'_>, &[u8]),
    ) -> Result<(), MapperError> {
        let b = lookup(h)?;
        dump(&b, cb)
    }

    /// `dumpAllBuffers`: `begin` then the dump callbacks, per imported buffer.
    pub fn dump_all_buffers(
        &self,
        begin: &mut dyn FnMut(),
        cb: &mut dyn FnMut(MetadataType<'_>, &[u8]),
    ) -> Result<(), MapperError> {
        let mut all: Vec<(usize, Arc<Imported>)> = registry()
            .iter()
            .map(|(k, v)| (*k, Arc::clone(v)))
            .collect();
        all.sort_by_key(|(k, _)| *k);
        for (_, b) in all {
            begin();
            dump(&b, cb)?;
        }
        Ok(())
    }

    /// `getReservedRegion`: (address, size); (null, 0) when none was requested.
    /// The region is shared memory, page aligned, valid until `free_buffer`.
    pub fn get_reserved_region(&self, h: BufferHandle) -> Result<(*mut u8, u64), MapperError> {
        let b = lookup(h)?;
        if b.desc.reserved_size == 0 {
            return Ok((std::ptr::null_mut(), 0));
        }
        // SAFETY: the metadata mapping is META_HEADER_SIZE + page_align(reserved) bytes.
        let p = unsafe { b.meta_map.ptr().add(META_HEADER_SIZE as usize) };
        Ok((p, b.desc.reserved_size))
    }

    /// Number of buffers imported in this process.
    pub fn imported_count(&self) -> usize {
        registry().len()
    }

    /// Turns strict-lock mode on for later imports (see [`crate::strict`]).
    pub fn enable_strict_lock(&self) -> Result<(), i32> {
        strict::enable()
    }
}

fn copy_out(bytes: &[u8], dest: &mut [u8]) -> usize {
    if bytes.len() <= dest.len() {
        dest[..bytes.len()].copy_from_slice(bytes);
    }
    bytes.len()
}

fn check_blob(v: Option<Vec<u8>>, cap: usize) -> Result<Option<Vec<u8>>, MapperError> {
    match v {
        Some(b) if b.len() > cap => Err(MapperError::Unsupported("metadata value too large")),
        o => Ok(o),
    }
}

fn check_lock_args(b: &Imported, cpu_usage: u64, r: &Rect) -> Result<(), MapperError> {
    if cpu_usage == 0 {
        return Err(MapperError::BadValue("cpuUsage is 0"));
    }
    if cpu_usage & !usage::CPU_MASK != 0 {
        return Err(MapperError::BadValue("cpuUsage has non-CPU bits"));
    }
    let want_r = cpu_usage & usage::CPU_READ_MASK != 0;
    let want_w = cpu_usage & usage::CPU_WRITE_MASK != 0;
    if (want_r && b.desc.usage & usage::CPU_READ_MASK == 0)
        || (want_w && b.desc.usage & usage::CPU_WRITE_MASK == 0)
    {
        return Err(MapperError::BadValue(
            "cpuUsage not allowed by the buffer usage",
        ));
    }
    if *r == Rect::default() {
        return Ok(());
    }
    if r.left < 0
        || r.top < 0
        || r.right <= r.left
        || r.bottom <= r.top
        || r.right > b.desc.width
        || r.bottom > b.desc.height
    {
        return Err(MapperError::BadValue("access region out of bounds"));
    }
    Ok(())
}

fn writable_range(b: &Imported, cpu_usage: u64, r: &Rect) -> Option<(usize, usize)> {
    if cpu_usage & usage::CPU_WRITE_MASK == 0 {
        return None;
    }
    let l = &b.desc.layout;
    if *r == Rect::default() || l.bytes_per_pixel == 0 {
        return Some((0, b.pixels.len()));
    }
    let sb = l.planes[0].stride_bytes as usize;
    let bpp = l.bytes_per_pixel as usize;
    let start = r.top as usize * sb + r.left as usize * bpp;
    let end = (r.bottom as usize - 1) * sb + r.right as usize * bpp;
    Some((start, end - start))
}

fn standard_value(b: &Imported, ty: StandardMetadataType) -> Result<StandardMetadata, MapperError> {
    use StandardMetadata as M;
    use StandardMetadataType as T;
    let d = &b.desc;
    let shared = |id| b.meta_map.view().read(id);
    Ok(match ty {
        T::Invalid => return Err(MapperError::Unsupported("INVALID metadata type")),
        T::BufferId => M::BufferId(d.id),
        T::Name => M::Name(b.name.clone()),
        T::Width => M::Width(d.width as u64),
        T::Height => M::Height(d.height as u64),
        T::LayerCount => M::LayerCount(d.layer_count as u64),
        T::PixelFormatRequested => M::PixelFormatRequested(d.format),
        T::PixelFormatFourcc => {
            M::PixelFormatFourcc(format_info(d.format).map(|f| f.fourcc).unwrap_or(0))
        }
        T::PixelFormatModifier => M::PixelFormatModifier(0),
        T::Usage => M::Usage(d.usage),
        T::AllocationSize => M::AllocationSize(d.layout.size),
        T::ProtectedContent => M::ProtectedContent((d.usage & usage::PROTECTED != 0) as u64),
        T::Compression => M::Compression(ExtendableType::new(COMPRESSION, 0)),
        T::Interlaced => M::Interlaced(ExtendableType::new(INTERLACED, 0)),
        T::ChromaSiting => M::ChromaSiting(ExtendableType::new(
            CHROMA_SITING,
            if is_yuv(d.format) { 2 } else { 0 },
        )),
        T::PlaneLayouts => M::PlaneLayouts(d.layout.plane_layouts()),
        T::Crop => M::Crop(vec![
            Rect {
                left: 0,
                top: 0,
                right: d.width,
                bottom: d.height
            };
            d.layout.num_planes
        ]),
        T::Dataspace => match shared(FieldId::Dataspace)? {
            SharedField::Dataspace(v) => M::Dataspace(v),
            _ => return Err(MapperError::NoResources("shared metadata")),
        },
        T::BlendMode => match shared(FieldId::BlendMode)? {
            SharedField::BlendMode(v) => M::BlendMode(v),
            _ => return Err(MapperError::NoResources("shared metadata")),
        },
        T::Smpte2086 => match shared(FieldId::Smpte2086)? {
            SharedField::Smpte2086(v) => M::Smpte2086(v.map(Smpte2086::from_array)),
            _ => return Err(MapperError::NoResources("shared metadata")),
        },
        T::Cta861_3 => match shared(FieldId::Cta861_3)? {
            SharedField::Cta861_3(v) => M::Cta861_3(v.map(|a| Cta861_3 {
                max_content_light_level: a[0],
                max_frame_average_light_level: a[1],
            })),
            _ => return Err(MapperError::NoResources("shared metadata")),
        },
        T::Smpte2094_40 => match shared(FieldId::Smpte2094_40)? {
            SharedField::Smpte2094_40(v) => M::Smpte2094_40(v),
            _ => return Err(MapperError::NoResources("shared metadata")),
        },
        T::Smpte2094_10 => match shared(FieldId::Smpte2094_10)? {
            SharedField::Smpte2094_10(v) => M::Smpte2094_10(v),
            _ => return Err(MapperError::NoResources("shared metadata")),
        },
        T::Stride => M::Stride(d.layout.stride),
    })
}

fn decode_user_data(data: &[u8]) -> Option<Option<Vec<u8>>> {
    if data.is_empty() {
        return Some(None);
    }
    let mut r = crate::metadata::Reader::new(data);
    r.header(vendor::NAME, vendor::USER_DATA).ok()?;
    let v = r.string_bytes().ok()?.to_vec();
    r.finish().ok()?;
    Some(Some(v))
}

fn encoded(b: &Imported, ty: MetadataType<'_>) -> Result<Vec<u8>, MapperError> {
    if ty.name == STANDARD_METADATA_TYPE {
        let t = StandardMetadataType::from_i64(ty.value)
            .ok_or(MapperError::Unsupported("unknown standard metadata type"))?;
        return Ok(standard_value(b, t)?.encode());
    }
    if ty.name != vendor::NAME {
        return Err(MapperError::Unsupported("unknown metadata type namespace"));
    }
    let mut w = Writer::with_capacity(96);
    match ty.value {
        vendor::ALLOCATOR_PID => {
            w.header(vendor::NAME, vendor::ALLOCATOR_PID);
            w.u64(b.creator_pid as u64);
        }
        vendor::USER_DATA => {
            if let SharedField::UserData(Some(v)) = b.meta_map.view().read(FieldId::UserData)? {
                w.header(vendor::NAME, vendor::USER_DATA);
                w.string(&v);
            }
        }
        _ => return Err(MapperError::Unsupported("unknown vendor metadata type")),
    }
    Ok(w.buf)
}

fn dump(b: &Imported, cb: &mut dyn FnMut(MetadataType<'_>, &[u8])) -> Result<(), MapperError> {
    for d in supported_metadata_types().iter().filter(|d| d.gettable) {
        let bytes = encoded(b, d.metadata_type)?;
        cb(d.metadata_type, &bytes);
    }
    Ok(())
}
