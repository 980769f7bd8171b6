//! The stable-C ABI: `AIMapper_loadIMapper`, the version symbols, the
//! `AIMapper` v5 function table (IMapper.h order and layout) and the vnpu
//! allocation entry points. A thin, checked shim over [`crate::Mapper`]:
//! null pointers, bad sizes and unknown handles give the documented codes;
//! panics never cross the boundary.
#![allow(non_snake_case, non_camel_case_types)]

use std::ffi::{c_char, c_void, CStr, CString};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::LazyLock;

use crate::allocator::{Allocator, BufferDescriptorInfo};
use crate::error::{AIMapperError, MapperError};
use crate::handle::native_handle_t;
use crate::mapper::{BufferHandle, Mapper};
use crate::metadata::{MetadataType, Rect};

/// `AIMapper_Error`.
pub type AIMapper_Error = i32;
/// `buffer_handle_t`.
pub type buffer_handle_t = *const native_handle_t;

/// `AIMapper_MetadataType`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AIMapper_MetadataType {
    /// Namespace (NUL-terminated).
    pub name: *const c_char,
    /// Value.
    pub value: i64,
}

/// `AIMapper_MetadataTypeDescription`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AIMapper_MetadataTypeDescription {
    /// The type.
    pub metadataType: AIMapper_MetadataType,
    /// Description (null for standard types).
    pub description: *const c_char,
    /// Gettable.
    pub isGettable: bool,
    /// Settable.
    pub isSettable: bool,
    /// Zero.
    pub reserved: [u8; 32],
}

/// `AIMapper_DumpBufferCallback`.
pub type AIMapper_DumpBufferCallback = Option<
    unsafe extern "C" fn(
        context: *mut c_void,
        metadataType: AIMapper_MetadataType,
        value: *const c_void,
        valueSize: usize,
    ),
>;
/// `AIMapper_BeginDumpBufferCallback`.
pub type AIMapper_BeginDumpBufferCallback = Option<unsafe extern "C" fn(context: *mut c_void)>;

/// `ARect`.
pub type ARect = Rect;

/// `AIMapperV5`: the function table, in IMapper.h order.
#[repr(C)]
#[allow(missing_docs)]
pub struct AIMapperV5 {
    pub importBuffer:
        unsafe extern "C" fn(*const native_handle_t, *mut buffer_handle_t) -> AIMapper_Error,
    pub freeBuffer: unsafe extern "C" fn(buffer_handle_t) -> AIMapper_Error,
    pub getTransportSize:
        unsafe extern "C" fn(buffer_handle_t, *mut u32, *mut u32) -> AIMapper_Error,
    pub lock:
        unsafe extern "C" fn(buffer_handle_t, u64, ARect, i32, *mut *mut c_void) -> AIMapper_Error,
    pub unlock: unsafe extern "C" fn(buffer_handle_t, *mut i32) -> AIMapper_Error,
    pub flushLockedBuffer: unsafe extern "C" fn(buffer_handle_t) -> AIMapper_Error,
    pub rereadLockedBuffer: unsafe extern "C" fn(buffer_handle_t) -> AIMapper_Error,
    pub getMetadata:
        unsafe extern "C" fn(buffer_handle_t, AIMapper_MetadataType, *mut c_void, usize) -> i32,
    pub getStandardMetadata: unsafe extern "C" fn(buffer_handle_t, i64, *mut c_void, usize) -> i32,
    pub setMetadata: unsafe extern "C" fn(
        buffer_handle_t,
        AIMapper_MetadataType,
        *const c_void,
        usize,
    ) -> AIMapper_Error,
    pub setStandardMetadata:
        unsafe extern "C" fn(buffer_handle_t, i64, *const c_void, usize) -> AIMapper_Error,
    pub listSupportedMetadataTypes: unsafe extern "C" fn(
        *mut *const AIMapper_MetadataTypeDescription,
        *mut usize,
    ) -> AIMapper_Error,
    pub dumpBuffer: unsafe extern "C" fn(
        buffer_handle_t,
        AIMapper_DumpBufferCallback,
        *mut c_void,
    ) -> AIMapper_Error,
    pub dumpAllBuffers: unsafe extern "C" fn(
        AIMapper_BeginDumpBufferCallback,
        AIMapper_DumpBufferCallback,
        *mut c_void,
    ) -> AIMapper_Error,
    pub getReservedRegion:
        unsafe extern "C" fn(buffer_handle_t, *mut *mut c_void, *mut u64) -> AIMapper_Error,
}

/// `AIMapper`: `alignas(max_align_t) version` then `v5` (LP64: version @0, v5 @8, align 16).
#[repr(C, align(16))]
pub struct AIMapper {
    /// `AIMAPPER_VERSION_5`.
    pub version: u32,
    /// The v5 table.
    pub v5: AIMapperV5,
}

/// AIMAPPER_VERSION_5.
pub const AIMAPPER_VERSION_5: u32 = 5;

/// Version symbol read by libui and newer VTS.
#[no_mangle]
pub static ANDROID_HAL_MAPPER_VERSION: u32 = AIMAPPER_VERSION_5;
/// Version symbol named by the stable-C README.
#[no_mangle]
pub static ANDROID_HAL_STABLEC_VERSION: u32 = AIMAPPER_VERSION_5;

static MAPPER_TABLE: AIMapper = AIMapper {
    version: AIMAPPER_VERSION_5,
    v5: AIMapperV5 {
        importBuffer: c_import_buffer,
        freeBuffer: c_free_buffer,
        getTransportSize: c_get_transport_size,
        lock: c_lock,
        unlock: c_unlock,
        flushLockedBuffer: c_flush_locked_buffer,
        rereadLockedBuffer: c_reread_locked_buffer,
        getMetadata: c_get_metadata,
        getStandardMetadata: c_get_standard_metadata,
        setMetadata: c_set_metadata,
        setStandardMetadata: c_set_standard_metadata,
        listSupportedMetadataTypes: c_list_supported_metadata_types,
        dumpBuffer: c_dump_buffer,
        dumpAllBuffers: c_dump_all_buffers,
        getReservedRegion: c_get_reserved_region,
    },
};

const NONE: i32 = AIMapperError::None as i32;
const BAD_VALUE: i32 = AIMapperError::BadValue as i32;
const NO_RESOURCES: i32 = AIMapperError::NoResources as i32;

fn guard(f: impl FnOnce() -> i32) -> i32 {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(NO_RESOURCES)
}

fn code(r: Result<(), MapperError>) -> i32 {
    match r {
        Ok(()) => NONE,
        Err(e) => e.code(),
    }
}

fn size_code(r: Result<usize, MapperError>) -> i32 {
    match r {
        Ok(n) => i32::try_from(n).unwrap_or(-BAD_VALUE),
        Err(e) => -e.code(),
    }
}

/// Loads the mapper: always the same static table.
///
/// # Safety
/// `out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn AIMapper_loadIMapper(out: *mut *mut AIMapper) -> AIMapper_Error {
    if out.is_null() {
        return BAD_VALUE;
    }
    // SAFETY: `out` is non-null and writable per the contract.
    unsafe { out.write(&MAPPER_TABLE as *const AIMapper as *mut AIMapper) };
    NONE
}

unsafe extern "C" fn c_import_buffer(
    raw: *const native_handle_t,
    out: *mut buffer_handle_t,
) -> AIMapper_Error {
    guard(|| {
        if out.is_null() {
            return BAD_VALUE;
        }
        // SAFETY: C contract: `raw` is null or a readable native handle.
        match unsafe { Mapper.import_buffer_ptr(raw) } {
            Ok(h) => {
                // SAFETY: `out` checked non-null; writable per contract.
                unsafe { out.write(h.as_ptr()) };
                NONE
            }
            Err(e) => e.code(),
        }
    })
}

unsafe extern "C" fn c_free_buffer(b: buffer_handle_t) -> AIMapper_Error {
    guard(|| code(Mapper.free_buffer(BufferHandle::from_ptr(b))))
}

unsafe extern "C" fn c_get_transport_size(
    b: buffer_handle_t,
    nfds: *mut u32,
    nints: *mut u32,
) -> AIMapper_Error {
    guard(|| {
        let h = BufferHandle::from_ptr(b);
        if nfds.is_null() || nints.is_null() {
            return refused(h);
        }
        match Mapper.get_transport_size(h) {
            Ok((f, i)) => {
                // SAFETY: both checked non-null; writable per contract.
                unsafe {
                    nfds.write(f);
                    nints.write(i);
                }
                NONE
            }
            Err(e) => e.code(),
        }
    })
}

unsafe extern "C" fn c_lock(
    b: buffer_handle_t,
    usage: u64,
    region: ARect,
    fence: i32,
    out: *mut *mut c_void,
) -> AIMapper_Error {
    // Ownership of the fence passes to us first, so it is closed on every path.
    // SAFETY: the C contract hands us ownership of a valid fd (or −1).
    let fence = (fence >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fence) });
    guard(move || {
        if out.is_null() {
            return refused(BufferHandle::from_ptr(b));
        }
        match Mapper.lock(BufferHandle::from_ptr(b), usage, region, fence) {
            Ok(p) => {
                // SAFETY: `out` checked non-null.
                unsafe { out.write(p as *mut c_void) };
                NONE
            }
            Err(e) => e.code(),
        }
    })
}

/// The error of a call refused for a bad argument before it changed anything: the
/// handle's own error when it is not an imported buffer, else BAD_VALUE.
fn refused(h: BufferHandle) -> AIMapper_Error {
    match Mapper.buffer_info(h) {
        Ok(_) => BAD_VALUE,
        Err(e) => e.code(),
    }
}

unsafe extern "C" fn c_unlock(b: buffer_handle_t, release: *mut i32) -> AIMapper_Error {
    guard(|| {
        let h = BufferHandle::from_ptr(b);
        // Checked before unlocking: a call that fails leaves the buffer locked.
        if release.is_null() {
            return refused(h);
        }
        match Mapper.unlock(h) {
            Ok(f) => {
                let fd = f.map(|f| f.into_raw_fd()).unwrap_or(-1);
                // SAFETY: `release` checked non-null.
                unsafe { release.write(fd) };
                NONE
            }
            Err(e) => {
                if !release.is_null() {
                    // SAFETY: checked non-null.
                    unsafe { release.write(-1) };
                }
                e.code()
            }
        }
    })
}

unsafe extern "C" fn c_flush_locked_buffer(b: buffer_handle_t) -> AIMapper_Error {
    guard(|| code(Mapper.flush_locked_buffer(BufferHandle::from_ptr(b))))
}

unsafe extern "C" fn c_reread_locked_buffer(b: buffer_handle_t) -> AIMapper_Error {
    guard(|| code(Mapper.reread_locked_buffer(BufferHandle::from_ptr(b))))
}

/// A writable destination slice, or an empty one for null/0.
///
/// # Safety
/// `dest` must be null or valid for `size` bytes of writes.
unsafe fn dest_slice<'a>(dest: *mut c_void, size: usize) -> &'a mut [u8] {
    if dest.is_null() || size == 0 {
        return &mut [];
    }
    // SAFETY: caller contract.
    unsafe { std::slice::from_raw_parts_mut(dest as *mut u8, size) }
}

/// # Safety
/// `p` must be null or valid for `size` bytes of reads.
unsafe fn src_slice<'a>(p: *const c_void, size: usize) -> Option<&'a [u8]> {
    if size == 0 {
        return Some(&[]);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: caller contract.
    Some(unsafe { std::slice::from_raw_parts(p as *const u8, size) })
}

/// # Safety
/// `t.name` must be null or a NUL-terminated string.
unsafe fn type_name<'a>(t: &AIMapper_MetadataType) -> &'a str {
    if t.name.is_null() {
        return "";
    }
    // SAFETY: caller contract.
    unsafe { CStr::from_ptr(t.name) }.to_str().unwrap_or("")
}

unsafe extern "C" fn c_get_metadata(
    b: buffer_handle_t,
    t: AIMapper_MetadataType,
    dest: *mut c_void,
    size: usize,
) -> i32 {
    guard(|| {
        // SAFETY: C contract for `t.name` and `dest`.
        let (name, dest) = unsafe { (type_name(&t), dest_slice(dest, size)) };
        size_code(Mapper.get_metadata(
            BufferHandle::from_ptr(b),
            MetadataType {
                name,
                value: t.value,
            },
            dest,
        ))
    })
}

unsafe extern "C" fn c_get_standard_metadata(
    b: buffer_handle_t,
    t: i64,
    dest: *mut c_void,
    size: usize,
) -> i32 {
    guard(|| {
        // SAFETY: C contract for `dest`.
        let dest = unsafe { dest_slice(dest, size) };
        size_code(Mapper.get_standard_metadata(BufferHandle::from_ptr(b), t, dest))
    })
}

unsafe extern "C" fn c_set_metadata(
    b: buffer_handle_t,
    t: AIMapper_MetadataType,
    p: *const c_void,
    size: usize,
) -> AIMapper_Error {
    guard(|| {
        // SAFETY: C contract for `t.name` and `p`.
        let (name, data) = unsafe { (type_name(&t), src_slice(p, size)) };
        let h = BufferHandle::from_ptr(b);
        match data {
            Some(d) => code(Mapper.set_metadata(
                h,
                MetadataType {
                    name,
                    value: t.value,
                },
                d,
            )),
            None => refused(h),
        }
    })
}

unsafe extern "C" fn c_set_standard_metadata(
    b: buffer_handle_t,
    t: i64,
    p: *const c_void,
    size: usize,
) -> AIMapper_Error {
    guard(|| {
        // SAFETY: C contract for `p`.
        let data = unsafe { src_slice(p, size) };
        let h = BufferHandle::from_ptr(b);
        match data {
            Some(d) => code(Mapper.set_standard_metadata(h, t, d)),
            None => refused(h),
        }
    })
}

struct CList {
    _names: Vec<CString>,
    descs: Vec<AIMapper_MetadataTypeDescription>,
}

// SAFETY: the list is built once and never mutated; its pointers point into
// the CStrings owned by the same struct (a process-lifetime static).
unsafe impl Send for CList {}
// SAFETY: as above.
unsafe impl Sync for CList {}

static C_LIST: LazyLock<CList> = LazyLock::new(|| {
    let mut names = Vec::new();
    let mut descs = Vec::new();
    for d in Mapper.list_supported_metadata_types() {
        let name = CString::new(d.metadata_type.name).unwrap_or_default();
        let desc = d.description.map(|s| CString::new(s).unwrap_or_default());
        descs.push(AIMapper_MetadataTypeDescription {
            metadataType: AIMapper_MetadataType {
                name: name.as_ptr(),
                value: d.metadata_type.value,
            },
            description: desc
                .as_ref()
                .map(|c| c.as_ptr())
                .unwrap_or(std::ptr::null()),
            isGettable: d.gettable,
            isSettable: d.settable,
            reserved: [0; 32],
        });
        names.push(name);
        names.extend(desc);
    }
    CList {
        _names: names,
        descs,
    }
});

unsafe extern "C" fn c_list_supported_metadata_types(
    out: *mut *const AIMapper_MetadataTypeDescription,
    n: *mut usize,
) -> AIMapper_Error {
    guard(|| {
        if out.is_null() || n.is_null() {
            return BAD_VALUE;
        }
        let l = &*C_LIST;
        // SAFETY: both checked non-null.
        unsafe {
            out.write(l.descs.as_ptr());
            n.write(l.descs.len());
        }
        NONE
    })
}

fn c_dump_cb(
    cb: unsafe extern "C" fn(*mut c_void, AIMapper_MetadataType, *const c_void, usize),
    ctx: *mut c_void,
) -> impl FnMut(MetadataType<'_>, &[u8]) {
    move |t: MetadataType<'_>, bytes: &[u8]| {
        // The name pointer must be NUL-terminated: use the static list's copy.
        let name = C_LIST
            .descs
            .iter()
            .find(|d| {
                d.metadataType.value == t.value && {
                    // SAFETY: names in the static list are valid C strings.
                    unsafe { CStr::from_ptr(d.metadataType.name) }.to_bytes() == t.name.as_bytes()
                }
            })
            .map(|d| d.metadataType.name)
            .unwrap_or(std::ptr::null());
        // SAFETY: the client's callback with its own context; the value
        // pointer/size describe a live slice.
        unsafe {
            cb(
                ctx,
                AIMapper_MetadataType {
                    name,
                    value: t.value,
                },
                bytes.as_ptr() as *const c_void,
                bytes.len(),
            )
        };
    }
}

unsafe extern "C" fn c_dump_buffer(
    b: buffer_handle_t,
    cb: AIMapper_DumpBufferCallback,
    ctx: *mut c_void,
) -> AIMapper_Error {
    guard(|| {
        let h = BufferHandle::from_ptr(b);
        let Some(cb) = cb else {
            return refused(h);
        };
        let mut f = c_dump_cb(cb, ctx);
        code(Mapper.dump_buffer(h, &mut f))
    })
}

unsafe extern "C" fn c_dump_all_buffers(
    begin: AIMapper_BeginDumpBufferCallback,
    cb: AIMapper_DumpBufferCallback,
    ctx: *mut c_void,
) -> AIMapper_Error {
    guard(|| {
        let (Some(begin), Some(cb)) = (begin, cb) else {
            return BAD_VALUE;
        };
        let mut f = c_dump_cb(cb, ctx);
        // SAFETY: the client's callback with its own context.
        let mut b = || unsafe { begin(ctx) };
        code(Mapper.dump_all_buffers(&mut b, &mut f))
    })
}

unsafe extern "C" fn c_get_reserved_region(
    b: buffer_handle_t,
    out: *mut *mut c_void,
    size: *mut u64,
) -> AIMapper_Error {
    guard(|| {
        let h = BufferHandle::from_ptr(b);
        if out.is_null() || size.is_null() {
            return refused(h);
        }
        match Mapper.get_reserved_region(h) {
            Ok((p, n)) => {
                // SAFETY: both checked non-null.
                unsafe {
                    out.write(p as *mut c_void);
                    size.write(n);
                }
                NONE
            }
            Err(e) => e.code(),
        }
    })
}

/// C descriptor for [`vnpu_gralloc_allocate`] (mirrors `BufferDescriptorInfo`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct VnpuBufferDescriptorInfo {
    /// Name; `name[127]` is treated as NUL.
    pub name: [c_char; 128],
    /// Width.
    pub width: i32,
    /// Height.
    pub height: i32,
    /// Layers.
    pub layerCount: i32,
    /// PixelFormat.
    pub format: i32,
    /// BufferUsage.
    pub usage: u64,
    /// Reserved region size.
    pub reservedSize: i64,
}

fn info_from_c(c: &VnpuBufferDescriptorInfo) -> BufferDescriptorInfo {
    let bytes: Vec<u8> = c.name[..127]
        .iter()
        .map(|&b| b as u8)
        .take_while(|&b| b != 0)
        .collect();
    BufferDescriptorInfo {
        name: String::from_utf8_lossy(&bytes).into_owned(),
        width: c.width,
        height: c.height,
        layer_count: c.layerCount,
        format: c.format,
        usage: c.usage,
        reserved_size: c.reservedSize,
        additional_options: Vec::new(),
    }
}

/// Allocates `count` buffers (the vnpu allocator entry point; on Android the
/// allocator is a separate service). On success writes the stride (pixels)
/// and `count` raw handles the caller owns (release each with
/// [`vnpu_native_handle_delete`], or `native_handle_close` + `native_handle_delete`).
/// Returns an `AIMapper_Error`: BAD_DESCRIPTOR, UNSUPPORTED or NO_RESOURCES
/// on failure (BAD_VALUE for null pointers).
///
/// # Safety
/// `info` must be null or readable; `out_stride` writable; `out_handles`
/// writable for `count` pointers.
#[no_mangle]
pub unsafe extern "C" fn vnpu_gralloc_allocate(
    info: *const VnpuBufferDescriptorInfo,
    count: u32,
    out_stride: *mut u32,
    out_handles: *mut *mut native_handle_t,
) -> AIMapper_Error {
    guard(|| {
        if info.is_null() || out_stride.is_null() || out_handles.is_null() {
            return BAD_VALUE;
        }
        // SAFETY: non-null, readable per contract; copied out by value.
        let info = info_from_c(unsafe { &*info });
        match Allocator::new().allocate(&info, count) {
            Ok(r) => {
                // SAFETY: pointers checked non-null; `out_handles` has room for `count`.
                unsafe {
                    out_stride.write(r.stride);
                    for (i, h) in r.buffers.into_iter().enumerate() {
                        out_handles.add(i).write(h.into_raw());
                    }
                }
                NONE
            }
            Err(e) => e.mapper_code().code(),
        }
    })
}

/// `isSupported` for the C descriptor.
///
/// # Safety
/// `info` must be null or readable.
#[no_mangle]
pub unsafe extern "C" fn vnpu_gralloc_is_supported(info: *const VnpuBufferDescriptorInfo) -> bool {
    if info.is_null() {
        return false;
    }
    // SAFETY: non-null, readable per contract.
    let info = info_from_c(unsafe { &*info });
    catch_unwind(|| Allocator::new().is_supported(&info)).unwrap_or(false)
}

/// Closes the fds of a raw handle returned by [`vnpu_gralloc_allocate`] and frees it.
///
/// # Safety
/// `h` must be null or a handle from [`vnpu_gralloc_allocate`] not yet deleted.
#[no_mangle]
pub unsafe extern "C" fn vnpu_native_handle_delete(h: *mut native_handle_t) {
    // SAFETY: per contract the handle is ours to release.
    drop(unsafe { crate::handle::NativeHandle::from_raw(h) });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_layouts_match_the_header() {
        assert_eq!(std::mem::size_of::<AIMapper>(), 128);
        assert_eq!(std::mem::align_of::<AIMapper>(), 16);
        assert_eq!(std::mem::offset_of!(AIMapper, v5), 8);
        assert_eq!(std::mem::offset_of!(AIMapperV5, getReservedRegion), 14 * 8);
        assert_eq!(std::mem::size_of::<AIMapper_MetadataTypeDescription>(), 64);
        assert_eq!(std::mem::size_of::<VnpuBufferDescriptorInfo>(), 160);
        assert_eq!(std::mem::offset_of!(VnpuBufferDescriptorInfo, usage), 144);
    }
}
