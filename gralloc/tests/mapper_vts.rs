//! Port of `GraphicsMapperStableCTests` (VtsHalGraphicsMapperStableC_TargetTest),
//! driven through the stable-C function table exactly as a client would use it.
//! Allocation uses the Rust allocator (the IAllocator stand-in). The helper
//! follows the newer VTS semantics (`sizeRequired > buffer.size()` fails).

use std::ffi::{c_void, CString};
use std::ptr::{null, null_mut};

use vnpu_gralloc::ffi::{
    AIMapper, AIMapper_MetadataType, AIMapper_MetadataTypeDescription, AIMapper_loadIMapper,
    ANDROID_HAL_MAPPER_VERSION, ANDROID_HAL_STABLEC_VERSION,
};
use vnpu_gralloc::format::component;
use vnpu_gralloc::metadata::{
    blend_mode, dataspace, Cta861_3, Smpte2086, XyColor, STANDARD_METADATA_TYPE,
};
use vnpu_gralloc::{
    native_handle_t, pixel_format as pf, usage, Allocator, BufferDescriptorInfo, NativeHandle,
    PlaneLayout, Rect, StandardMetadata as M, StandardMetadataType as T,
};

const NONE: i32 = 0;
const BAD_BUFFER: i32 = 2;
const BAD_VALUE: i32 = 3;
const UNSUPPORTED: i32 = 7;
const RW: u64 = usage::CPU_READ_OFTEN | usage::CPU_WRITE_OFTEN;

fn mapper() -> &'static AIMapper {
    let mut p: *mut AIMapper = null_mut();
    // SAFETY: valid out pointer.
    assert_eq!(unsafe { AIMapper_loadIMapper(&mut p) }, NONE);
    assert!(!p.is_null());
    // SAFETY: the loader returns a pointer to a static table.
    unsafe { &*p }
}

struct Buffer {
    raw: NativeHandle,
    stride: u32,
    info: BufferDescriptorInfo,
}

struct Imported(*const native_handle_t);

impl Drop for Imported {
    fn drop(&mut self) {
        // SAFETY: handle imported through the same table.
        assert_eq!(unsafe { (mapper().v5.freeBuffer)(self.0) }, NONE);
    }
}

impl Buffer {
    fn import(&self) -> Imported {
        let mut h = null();
        // SAFETY: valid raw handle and out pointer.
        assert_eq!(
            // SAFETY: arguments are valid for the call, as set up above.
            unsafe { (mapper().v5.importBuffer)(self.raw.as_ptr(), &mut h) },
            NONE
        );
        assert!(!h.is_null());
        Imported(h)
    }
}

fn info(name: &str, w: i32, h: i32, format: i32, usage: u64) -> BufferDescriptorInfo {
    BufferDescriptorInfo::new(w, h, format, usage).with_name(name)
}

fn allocate(info: &BufferDescriptorInfo) -> Option<Buffer> {
    match Allocator::new().allocate(info, 1) {
        Ok(mut r) => Some(Buffer {
            raw: r.buffers.remove(0),
            stride: r.stride,
            info: info.clone(),
        }),
        Err(e) => {
            // A failing allocation must carry a real error code (VTS: EXPECT_NE(OK, error)).
            let _ = e.code();
            None
        }
    }
}

fn is_supported(info: &BufferDescriptorInfo) -> bool {
    Allocator::new().is_supported(info)
}

fn generic() -> Buffer {
    allocate(&info("VTS_TEMP", 64, 64, pf::RGBA_8888, RW)).expect("generic allocation")
}

fn lock(h: &Imported, usage: u64, region: Rect, fence: i32) -> Result<*mut u8, i32> {
    let mut out: *mut c_void = null_mut();
    // SAFETY: imported handle, valid out pointer; fence ownership passes.
    let r = unsafe { (mapper().v5.lock)(h.0, usage, region, fence, &mut out) };
    if r == NONE {
        Ok(out as *mut u8)
    } else {
        Err(r)
    }
}

fn unlock(h: *const native_handle_t) -> (i32, i32) {
    let mut fence = -1;
    // SAFETY: any handle value is accepted; out pointer valid.
    let r = unsafe { (mapper().v5.unlock)(h, &mut fence) };
    (r, fence)
}

fn full(b: &Buffer) -> Rect {
    Rect {
        left: 0,
        top: 0,
        right: b.info.width,
        bottom: b.info.height,
    }
}

/// The VTS `getStandardMetadata<T>` helper (newer semantics).
fn get_standard(h: *const native_handle_t, t: T) -> Option<M> {
    let mut buf = vec![0u8; 512];
    // SAFETY: buffer valid for its length.
    let mut size = unsafe {
        (mapper().v5.getStandardMetadata)(h, t.value(), buf.as_mut_ptr() as *mut c_void, buf.len())
    };
    if size < 0 {
        assert_eq!(size, -UNSUPPORTED, "getStandardMetadata({t:?}) gave {size}");
        return None;
    }
    if size as usize > buf.len() {
        buf.resize(size as usize, 0);
        // SAFETY: as above.
        size = unsafe {
            (mapper().v5.getStandardMetadata)(
                h,
                t.value(),
                buf.as_mut_ptr() as *mut c_void,
                buf.len(),
            )
        };
    }
    assert!(
        size >= 0 && size as usize <= buf.len(),
        "getStandardMetadata failed: {size}"
    );
    Some(M::decode(t, &buf[..size as usize]).expect("decodes"))
}

fn set_standard(h: *const native_handle_t, v: &M) -> i32 {
    let bytes = v.encode();
    // SAFETY: bytes valid for their length.
    unsafe {
        (mapper().v5.setStandardMetadata)(
            h,
            v.metadata_type().value(),
            bytes.as_ptr() as *const c_void,
            bytes.len(),
        )
    }
}

fn plane_layouts(h: *const native_handle_t) -> Vec<PlaneLayout> {
    match get_standard(h, T::PlaneLayouts) {
        Some(M::PlaneLayouts(p)) => p,
        other => panic!("plane layouts: {other:?}"),
    }
}

fn u64_of(h: *const native_handle_t, t: T) -> u64 {
    match get_standard(h, t) {
        Some(
            M::BufferId(v)
            | M::Width(v)
            | M::Height(v)
            | M::LayerCount(v)
            | M::Usage(v)
            | M::AllocationSize(v),
        )
        | Some(M::PixelFormatModifier(v) | M::ProtectedContent(v)) => v,
        other => panic!("{t:?}: {other:?}"),
    }
}

fn verify_rgba8888_plane_layouts(planes: &[PlaneLayout]) {
    assert_eq!(planes.len(), 1);
    let p = &planes[0];
    assert_eq!(p.components.len(), 4);
    let mut off = [-1i64; 4];
    for c in &p.components {
        assert_eq!(c.size_in_bits, 8);
        match c.type_.value {
            component::R => off[0] = c.offset_in_bits,
            component::G => off[1] = c.offset_in_bits,
            component::B => off[2] = c.offset_in_bits,
            component::A => off[3] = c.offset_in_bits,
            _ => {}
        }
    }
    assert_eq!(off, [0, 8, 16, 24]);
    assert_eq!(p.offset_in_bytes, 0);
    assert_eq!(p.sample_increment_in_bits, 32);
    assert!(p.width_in_samples * p.height_in_samples * 4 <= p.total_size_in_bytes);
    assert_eq!((p.horizontal_subsampling, p.vertical_subsampling), (1, 1));
}

/// # Safety
/// `data` must point to a locked buffer of at least `height * stride` bytes.
unsafe fn fill_rgba8888(data: *mut u8, height: usize, stride: usize, width: usize) {
    for y in 0..height {
        // SAFETY: caller contract.
        unsafe { std::ptr::write_bytes(data.add(y * stride), y as u8, width) };
    }
}

/// # Safety
/// As for `fill_rgba8888`.
unsafe fn verify_rgba8888(
    h: *const native_handle_t,
    data: *const u8,
    height: usize,
    stride: usize,
    width: usize,
) {
    verify_rgba8888_plane_layouts(&plane_layouts(h));
    for y in 0..height {
        for x in 0..width {
            // SAFETY: caller contract.
            assert_eq!(unsafe { *data.add(y * stride + x) }, y as u8);
        }
    }
}

#[derive(Debug, Default)]
struct YCbCr {
    y: usize,
    cb: usize,
    cr: usize,
    ystride: usize,
    cstride: usize,
    chroma_step: usize,
    hsub: i64,
    vsub: i64,
}

/// The VTS `getAndroidYCbCr` helper (8-bit formats).
fn get_android_ycbcr(h: *const native_handle_t, data: *mut u8) -> YCbCr {
    let mut out = YCbCr::default();
    let (mut have_y, mut have_cb, mut have_cr) = (false, false, false);
    for p in plane_layouts(h) {
        for c in &p.components {
            assert_eq!(c.offset_in_bits % 8, 0);
            let addr = data as usize + p.offset_in_bytes as usize + (c.offset_in_bits / 8) as usize;
            match c.type_.value {
                component::Y => {
                    assert!(!have_y);
                    assert_eq!(c.size_in_bits, 8);
                    assert_eq!(p.sample_increment_in_bits, 8);
                    out.y = addr;
                    out.ystride = p.stride_in_bytes as usize;
                    have_y = true;
                }
                component::CB | component::CR => {
                    assert_eq!(p.sample_increment_in_bits % 8, 0);
                    let inc = (p.sample_increment_in_bits / 8) as usize;
                    assert!(inc == 1 || inc == 2);
                    if out.cstride == 0 && out.chroma_step == 0 {
                        out.cstride = p.stride_in_bytes as usize;
                        out.chroma_step = inc;
                    } else {
                        assert_eq!(out.cstride, p.stride_in_bytes as usize);
                        assert_eq!(out.chroma_step, inc);
                    }
                    if out.hsub == 0 && out.vsub == 0 {
                        out.hsub = p.horizontal_subsampling;
                        out.vsub = p.vertical_subsampling;
                    } else {
                        assert_eq!(out.hsub, p.horizontal_subsampling);
                        assert_eq!(out.vsub, p.vertical_subsampling);
                    }
                    if c.type_.value == component::CB {
                        assert!(!have_cb);
                        out.cb = addr;
                        have_cb = true;
                    } else {
                        assert!(!have_cr);
                        out.cr = addr;
                        have_cr = true;
                    }
                }
                _ => {}
            }
        }
    }
    assert!(have_y && have_cb && have_cr);
    out
}

/// The VTS `traverseYCbCrData`: writes (fill) or checks (verify) the pattern.
fn traverse_ycbcr(y: &YCbCr, width: usize, height: usize, fill: bool) {
    let visit = |addr: usize, val: u8| {
        let p = addr as *mut u8;
        if fill {
            // SAFETY: addresses computed from the plane layouts inside the locked buffer.
            unsafe { p.write_volatile(val) };
        } else {
            // SAFETY: as above.
            assert_eq!(unsafe { p.read_volatile() }, val);
        }
    };
    let (hs, vs) = (y.hsub as usize, y.vsub as usize);
    for row in 0..height {
        for x in 0..width {
            visit(y.y + y.ystride * row + x, (height * row + x) as u8);
            if row % vs == 0 && x % hs == 0 {
                let (sx, sy) = (x / hs, row / vs);
                let off = y.cstride * sy + y.chroma_step * sx;
                let val = (height * sy + sx) as u8;
                visit(y.cb + off, val);
                visit(y.cr + off, val.wrapping_add(1));
            }
        }
    }
}

fn lock_ycbcr_round_trip(b: &Buffer, check: impl Fn(&YCbCr)) {
    let h = b.import();
    let region = full(b);
    let data = lock(&h, b.info.usage, region, -1).unwrap();
    let y = get_android_ycbcr(h.0, data);
    assert_eq!((y.hsub, y.vsub), (2, 2));
    check(&y);
    traverse_ycbcr(&y, b.info.width as usize, b.info.height as usize, true);
    let (r, fence) = unlock(h.0);
    assert_eq!(r, NONE);
    let data = lock(&h, b.info.usage, region, fence).unwrap();
    let y = get_android_ycbcr(h.0, data);
    traverse_ycbcr(&y, b.info.width as usize, b.info.height as usize, false);
    assert_eq!(unlock(h.0).0, NONE);
}

#[test]
fn version_checks() {
    assert_eq!(ANDROID_HAL_MAPPER_VERSION, 5);
    assert_eq!(ANDROID_HAL_STABLEC_VERSION, 5);
    assert_eq!(mapper().version, ANDROID_HAL_MAPPER_VERSION);
}

#[test]
fn all_v5_callbacks_defined() {
    // Function pointers in the Rust table are non-nullable by type; check the
    // version and that every slot is a distinct, non-null address.
    let m = mapper();
    assert!(m.version >= 5);
    let v = &m.v5;
    let ptrs = [
        v.importBuffer as usize,
        v.freeBuffer as usize,
        v.getTransportSize as usize,
        v.lock as usize,
        v.unlock as usize,
        v.flushLockedBuffer as usize,
        v.rereadLockedBuffer as usize,
        v.getMetadata as usize,
        v.getStandardMetadata as usize,
        v.setMetadata as usize,
        v.setStandardMetadata as usize,
        v.listSupportedMetadataTypes as usize,
        v.dumpBuffer as usize,
        v.dumpAllBuffers as usize,
        v.getReservedRegion as usize,
    ];
    assert!(ptrs.iter().all(|&p| p != 0));
}

#[test]
fn dual_load_is_identical() {
    let a = mapper() as *const AIMapper;
    let b = mapper() as *const AIMapper;
    assert_eq!(a, b);
    // SAFETY: both point to the static table.
    let (a, b) = unsafe { (&*a, &*b) };
    assert_eq!(a.v5.lock as usize, b.v5.lock as usize);
    assert_eq!(
        a.v5.getReservedRegion as usize,
        b.v5.getReservedRegion as usize
    );
}

#[test]
fn can_allocate() {
    let b = generic();
    assert!(b.stride >= 64);
}

#[test]
fn import_free_buffer() {
    let b = generic();
    assert!(b.stride >= 64);
    let i1 = b.import();
    let i2 = b.import();
    assert_ne!(i1.0, i2.0);
}

#[test]
fn import_free_buffer_singleton() {
    let b = generic();
    let mut h = null();
    // SAFETY: valid raw handle and out pointer.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.importBuffer)(b.raw.as_ptr(), &mut h) },
        NONE
    );
    assert!(!h.is_null());
    let second = mapper();
    // SAFETY: imported above.
    assert_eq!(unsafe { (second.v5.freeBuffer)(h) }, NONE);
}

#[test]
fn import_buffer_negative() {
    let mut h = null();
    // SAFETY: null handle is an accepted input.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.importBuffer)(null(), &mut h) },
        BAD_BUFFER
    );
    let empty = NativeHandle::new(vec![], &[]).unwrap();
    // SAFETY: valid (empty) native handle.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.importBuffer)(empty.as_ptr(), &mut h) },
        BAD_BUFFER
    );
}

#[test]
fn free_buffer_negative() {
    // SAFETY: any handle value is accepted.
    assert_eq!(unsafe { (mapper().v5.freeBuffer)(null()) }, BAD_BUFFER);
    let empty = NativeHandle::new(vec![], &[]).unwrap();
    // SAFETY: as above.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.freeBuffer)(empty.as_ptr()) },
        BAD_BUFFER
    );
    let b = generic();
    // SAFETY: as above.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.freeBuffer)(b.raw.as_ptr()) },
        BAD_BUFFER
    );
}

#[test]
fn lock_unlock_basic() {
    let b = generic();
    let h = b.import();
    let (w, ht, stride) = (
        b.info.width as usize,
        b.info.height as usize,
        b.stride as usize,
    );
    let data = lock(&h, RW, full(&b), -1).unwrap();
    // SAFETY: locked buffer of stride*height*4 bytes.
    unsafe { fill_rgba8888(data, ht, stride * 4, w * 4) };
    let (r, fence) = unlock(h.0);
    assert_eq!(r, NONE);
    let data = lock(&h, RW, full(&b), fence).unwrap();
    // SAFETY: as above.
    unsafe { verify_rgba8888(h.0, data, ht, stride * 4, w * 4) };
    assert_eq!(unlock(h.0).0, NONE);
}

#[test]
fn lock_ycrcb_420_sp() {
    let i = info("VTS_TEMP", 64, 64, pf::YCRCB_420_SP, RW);
    let Some(b) = allocate(&i) else {
        assert!(!is_supported(&i));
        return;
    };
    lock_ycbcr_round_trip(&b, |y| {
        assert_eq!(y.cr + 1, y.cb);
        assert_eq!(y.chroma_step, 2);
    });
}

#[test]
fn yv12_subsample_metadata() {
    let b = allocate(&info("VTS_TEMP", 64, 64, pf::YV12, RW)).unwrap();
    let h = b.import();
    lock(&h, RW, full(&b), -1).unwrap();
    let planes = plane_layouts(h.0);
    assert_eq!(planes.len(), 3);
    let (y, cr, cb) = (&planes[0], &planes[1], &planes[2]);
    for p in [cr, cb] {
        assert_eq!((p.horizontal_subsampling, p.vertical_subsampling), (2, 2));
        assert_eq!((p.width_in_samples, p.height_in_samples), (32, 32));
        assert!(p.width_in_samples <= p.stride_in_bytes);
    }
    assert_eq!((y.width_in_samples, y.height_in_samples), (64, 64));
    assert_eq!(unlock(h.0).0, NONE);
}

#[test]
fn lock_yv12() {
    let b = allocate(&info("VTS_TEMP", 64, 64, pf::YV12, RW)).unwrap();
    lock_ycbcr_round_trip(&b, |y| {
        assert_eq!(y.cr + y.cstride * 64 / y.vsub as usize, y.cb);
        assert_eq!(y.chroma_step, 1);
    });
}

#[test]
fn lock_ycbcr_420_888() {
    let b = allocate(&info("VTS_TEMP", 64, 64, pf::YCBCR_420_888, RW)).unwrap();
    lock_ycbcr_round_trip(&b, |_| {});
}

fn lock_raw(format: i32) {
    let i = info("VTS_TEMP", 64, 64, format, RW);
    let Some(b) = allocate(&i) else {
        assert!(!is_supported(&i));
        return;
    };
    let h = b.import();
    lock(&h, RW, full(&b), -1).unwrap();
    let planes = plane_layouts(h.0);
    assert_eq!(planes.len(), 1);
    assert_eq!(planes[0].sample_increment_in_bits, 0);
    assert_eq!(planes[0].components.len(), 1);
    assert_eq!(planes[0].components[0].type_.value, component::RAW);
    assert_eq!(planes[0].components[0].size_in_bits, -1);
    assert_eq!(unlock(h.0).0, NONE);
}

#[test]
fn lock_raw10() {
    lock_raw(pf::RAW10);
}

#[test]
fn lock_raw12() {
    lock_raw(pf::RAW12);
}

#[test]
fn lock_ycbcr_p010() {
    let i = info("VTS_TEMP", 64, 64, pf::YCBCR_P010, RW);
    let Some(b) = allocate(&i) else {
        assert!(!is_supported(&i));
        return;
    };
    let h = b.import();
    let data = lock(&h, RW, full(&b), -1).unwrap();
    let planes = plane_layouts(h.0);
    assert_eq!(planes.len(), 2);
    assert_eq!(planes[0].components.len(), 1);
    assert_eq!(planes[1].components.len(), 2);
    let mut y = YCbCr::default();
    let (mut cb_off, mut cr_off) = (0, 0);
    for p in &planes {
        for c in &p.components {
            let addr = data as usize + p.offset_in_bytes as usize + (c.offset_in_bits / 8) as usize;
            match c.type_.value {
                component::Y => {
                    assert_eq!(
                        (c.offset_in_bits, c.size_in_bits, p.sample_increment_in_bits),
                        (6, 10, 16)
                    );
                    y.y = addr;
                    y.ystride = p.stride_in_bytes as usize;
                }
                component::CB | component::CR => {
                    assert_eq!(p.sample_increment_in_bits / 8, 4);
                    y.cstride = p.stride_in_bytes as usize;
                    y.chroma_step = 4;
                    y.hsub = p.horizontal_subsampling;
                    y.vsub = p.vertical_subsampling;
                    if c.type_.value == component::CB {
                        y.cb = addr;
                        cb_off = c.offset_in_bits;
                    } else {
                        y.cr = addr;
                        cr_off = c.offset_in_bits;
                    }
                }
                _ => {}
            }
        }
    }
    assert_eq!(cb_off + 16, cr_off);
    assert_eq!((y.hsub, y.vsub), (2, 2));
    traverse_ycbcr(&y, 64, 64, true);
    traverse_ycbcr(&y, 64, 64, false);
    assert_eq!(unlock(h.0).0, NONE);
}

#[test]
fn lock_bad_access_region() {
    let b = generic();
    let h = b.import();
    let region = Rect {
        left: 0,
        top: 0,
        right: b.info.width * 2,
        bottom: b.info.height * 2,
    };
    assert_eq!(lock(&h, RW, region, -1), Err(BAD_VALUE));
}

#[test]
fn unlock_negative() {
    assert_eq!(unlock(null()).0, BAD_BUFFER);
    let empty = NativeHandle::new(vec![], &[]).unwrap();
    assert_eq!(unlock(empty.as_ptr()).0, BAD_BUFFER);
    let b = generic();
    assert_eq!(unlock(b.raw.as_ptr()).0, BAD_BUFFER);
}

#[test]
fn unlock_not_imported() {
    let b = generic();
    assert_eq!(unlock(b.raw.as_ptr()).0, BAD_BUFFER);
}

#[test]
fn unlock_not_locked() {
    let b = generic();
    let h = b.import();
    assert_eq!(unlock(h.0).0, BAD_BUFFER);
}

#[test]
fn lock_unlock_nested() {
    let b = generic();
    let h = b.import();
    lock(&h, RW, full(&b), -1).unwrap();
    lock(&h, RW, full(&b), -1).expect("second lock");
    assert_eq!(unlock(h.0).0, NONE);
    assert_eq!(unlock(h.0).0, NONE, "second unlock");
    assert_eq!(unlock(h.0).0, BAD_BUFFER, "third, unmatched unlock");
}

#[test]
fn flush_reread_basic() {
    let b = generic();
    let (w, ht, stride) = (
        b.info.width as usize,
        b.info.height as usize,
        b.stride as usize,
    );
    let writer = b.import();
    let reader = b.import();
    let wd = lock(&writer, usage::CPU_WRITE_OFTEN, full(&b), -1).unwrap();
    let rd = lock(&reader, usage::CPU_READ_OFTEN, full(&b), -1).unwrap();
    // SAFETY: locked buffer.
    unsafe { fill_rgba8888(wd, ht, stride * 4, w * 4) };
    // SAFETY: imported handles.
    unsafe {
        assert_eq!((mapper().v5.flushLockedBuffer)(writer.0), NONE);
        assert_eq!((mapper().v5.rereadLockedBuffer)(reader.0), NONE);
    }
    // SAFETY: locked buffer.
    unsafe { verify_rgba8888(reader.0, rd, ht, stride * 4, w * 4) };
    assert_eq!(unlock(reader.0).0, NONE);
    assert_eq!(unlock(writer.0).0, NONE);
}

#[test]
fn flush_locked_buffer_bad_buffer() {
    // SAFETY: null handle accepted.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.flushLockedBuffer)(null()) },
        BAD_BUFFER
    );
}

#[test]
fn reread_locked_buffer_bad_buffer() {
    // SAFETY: null handle accepted.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.rereadLockedBuffer)(null()) },
        BAD_BUFFER
    );
}

#[test]
fn get_buffer_id() {
    let (b1, b2) = (generic(), generic());
    let (h1, h2) = (b1.import(), b2.import());
    assert_ne!(u64_of(h1.0, T::BufferId), u64_of(h2.0, T::BufferId));
}

#[test]
fn get_name() {
    let b = allocate(&info("Hello, World!", 64, 64, pf::RGBA_8888, RW)).unwrap();
    let h = b.import();
    assert_eq!(
        get_standard(h.0, T::Name),
        Some(M::Name("Hello, World!".into()))
    );
}

#[test]
fn get_width_height() {
    let b = allocate(&info("Hello, World!", 64, 128, pf::RGBA_8888, RW)).unwrap();
    let h = b.import();
    assert_eq!(u64_of(h.0, T::Width), 64);
    assert_eq!(u64_of(h.0, T::Height), 128);
}

#[test]
fn get_layer_count() {
    let b = generic();
    let h = b.import();
    assert_eq!(u64_of(h.0, T::LayerCount), b.info.layer_count as u64);
}

#[test]
fn get_pixel_format_requested() {
    let b = generic();
    let h = b.import();
    assert_eq!(
        get_standard(h.0, T::PixelFormatRequested),
        Some(M::PixelFormatRequested(b.info.format))
    );
}

#[test]
fn get_pixel_format_four_cc() {
    let b = allocate(&info("Hello, World!", 64, 128, pf::RGBA_8888, RW)).unwrap();
    {
        let h = b.import();
        assert_eq!(
            get_standard(h.0, T::PixelFormatFourcc),
            Some(M::PixelFormatFourcc(0x3432_4241))
        );
    }
    let b = allocate(&info("yv12", 64, 128, pf::YV12, RW)).unwrap();
    let h = b.import();
    assert_eq!(
        get_standard(h.0, T::PixelFormatFourcc),
        Some(M::PixelFormatFourcc(0x3231_5659))
    );
}

#[test]
fn get_pixel_format_modifier() {
    let b = generic();
    let h = b.import();
    assert!(get_standard(h.0, T::PixelFormatModifier).is_some());
}

#[test]
fn get_usage() {
    let b = generic();
    let h = b.import();
    assert_eq!(u64_of(h.0, T::Usage), b.info.usage);
}

#[test]
fn get_usage64() {
    let u = usage::FRONT_BUFFER
        | usage::GPU_RENDER_TARGET
        | usage::COMPOSER_OVERLAY
        | usage::GPU_TEXTURE;
    let i = info("VTS_TEMP", 64, 64, pf::RGBA_8888, u);
    let Some(b) = allocate(&i) else {
        assert!(!is_supported(&i));
        return;
    };
    let h = b.import();
    assert_eq!(u64_of(h.0, T::Usage), u);
}

#[test]
fn get_allocation_size() {
    let b = generic();
    let h = b.import();
    let v = u64_of(h.0, T::AllocationSize);
    let est = b.stride as u64 * b.info.height as u64 * 4;
    assert!(v >= est);
    assert!(v < est * 2);
}

#[test]
fn get_protected_content() {
    let i = info(
        "prot8888",
        64,
        64,
        pf::RGBA_8888,
        usage::PROTECTED | usage::COMPOSER_OVERLAY,
    );
    let Some(b) = allocate(&i) else {
        assert!(
            !is_supported(&i),
            "allocation failed, so isSupported() must be false"
        );
        return;
    };
    let h = b.import();
    assert_eq!(u64_of(h.0, T::ProtectedContent), 1);
}

fn ext_none(t: T, name: &str) {
    let b = generic();
    let h = b.import();
    let v = get_standard(h.0, t).unwrap();
    let e = match v {
        M::Compression(e) | M::Interlaced(e) | M::ChromaSiting(e) => e,
        other => panic!("{other:?}"),
    };
    assert_eq!(e.name, name);
    assert_eq!(e.value, 0);
}

#[test]
fn get_compression() {
    ext_none(
        T::Compression,
        "android.hardware.graphics.common.Compression",
    );
}

#[test]
fn get_interlaced() {
    ext_none(T::Interlaced, "android.hardware.graphics.common.Interlaced");
}

#[test]
fn get_chroma_siting() {
    ext_none(
        T::ChromaSiting,
        "android.hardware.graphics.common.ChromaSiting",
    );
}

#[test]
fn get_plane_layouts() {
    let b = generic();
    let h = b.import();
    verify_rgba8888_plane_layouts(&plane_layouts(h.0));
}

#[test]
fn get_crop() {
    let b = generic();
    let h = b.import();
    assert_eq!(
        get_standard(h.0, T::Crop),
        Some(M::Crop(vec![Rect {
            left: 0,
            top: 0,
            right: 64,
            bottom: 64
        }]))
    );
}

#[test]
fn get_set_dataspace() {
    let b = generic();
    let h = b.import();
    assert_eq!(
        get_standard(h.0, T::Dataspace),
        Some(M::Dataspace(dataspace::UNKNOWN))
    );
    assert_eq!(
        set_standard(h.0, &M::Dataspace(dataspace::DISPLAY_P3)),
        NONE
    );
    assert_eq!(
        get_standard(h.0, T::Dataspace),
        Some(M::Dataspace(dataspace::DISPLAY_P3))
    );
}

#[test]
fn get_set_blend_mode() {
    let b = generic();
    let h = b.import();
    assert_eq!(
        get_standard(h.0, T::BlendMode),
        Some(M::BlendMode(blend_mode::INVALID))
    );
    assert_eq!(set_standard(h.0, &M::BlendMode(blend_mode::COVERAGE)), NONE);
    assert_eq!(
        get_standard(h.0, T::BlendMode),
        Some(M::BlendMode(blend_mode::COVERAGE))
    );
}

#[test]
fn get_set_smpte2086() {
    let b = generic();
    let h = b.import();
    assert_eq!(get_standard(h.0, T::Smpte2086), Some(M::Smpte2086(None)));
    let hdr = Smpte2086 {
        primary_red: XyColor { x: 1.0, y: 1.0 },
        primary_green: XyColor { x: 2.0, y: 2.0 },
        primary_blue: XyColor { x: 3.0, y: 3.0 },
        white_point: XyColor {
            x: 400.0,
            y: 1000.0,
        },
        max_luminance: 100000.0,
        min_luminance: 0.0001,
    };
    assert_eq!(set_standard(h.0, &M::Smpte2086(Some(hdr))), NONE);
    assert_eq!(
        get_standard(h.0, T::Smpte2086),
        Some(M::Smpte2086(Some(hdr)))
    );
    assert_eq!(set_standard(h.0, &M::Smpte2086(None)), NONE);
    assert_eq!(get_standard(h.0, T::Smpte2086), Some(M::Smpte2086(None)));
}

#[test]
fn get_cta861_3() {
    let b = generic();
    let h = b.import();
    assert_eq!(get_standard(h.0, T::Cta861_3), Some(M::Cta861_3(None)));
    let v = Cta861_3 {
        max_content_light_level: 1000.0,
        max_frame_average_light_level: 140.0,
    };
    assert_eq!(set_standard(h.0, &M::Cta861_3(Some(v))), NONE);
    assert_eq!(get_standard(h.0, T::Cta861_3), Some(M::Cta861_3(Some(v))));
    assert_eq!(set_standard(h.0, &M::Cta861_3(None)), NONE);
    assert_eq!(get_standard(h.0, T::Cta861_3), Some(M::Cta861_3(None)));
}

#[test]
fn get_smpte2094_10() {
    let b = generic();
    let h = b.import();
    if let Some(v) = get_standard(h.0, T::Smpte2094_10) {
        assert_eq!(v, M::Smpte2094_10(None));
    }
}

#[test]
fn get_smpte2094_40() {
    let b = generic();
    let h = b.import();
    assert_eq!(
        get_standard(h.0, T::Smpte2094_40),
        Some(M::Smpte2094_40(None))
    );
}

#[test]
fn get_stride() {
    let b = generic();
    let h = b.import();
    assert_eq!(get_standard(h.0, T::Stride), Some(M::Stride(b.stride)));
}

fn list() -> &'static [AIMapper_MetadataTypeDescription] {
    let mut p = null();
    let mut n = 0usize;
    // SAFETY: valid out pointers.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.listSupportedMetadataTypes)(&mut p, &mut n) },
        NONE
    );
    assert!(!p.is_null());
    // SAFETY: process-lifetime static array of `n` entries.
    unsafe { std::slice::from_raw_parts(p, n) }
}

fn name_of(d: &AIMapper_MetadataTypeDescription) -> String {
    // SAFETY: names in the list are NUL-terminated statics.
    unsafe { std::ffi::CStr::from_ptr(d.metadataType.name) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn supports_required_getters_setters() {
    let l = list();
    let mut gettable = std::collections::BTreeSet::new();
    let mut settable = std::collections::BTreeSet::new();
    for d in l {
        if name_of(d) == STANDARD_METADATA_TYPE {
            assert!(d.metadataType.value > 0 && d.metadataType.value < 24);
            if d.isGettable {
                gettable.insert(d.metadataType.value);
            }
            if d.isSettable {
                settable.insert(d.metadataType.value);
            }
        } else {
            assert!(
                !d.description.is_null(),
                "non-standard types need a description"
            );
        }
    }
    for t in (1..=20).chain([23]) {
        assert!(gettable.contains(&t), "{t} must be gettable");
    }
    for t in 17..=20 {
        assert!(settable.contains(&t), "{t} must be settable");
    }
}

#[test]
fn check_required_setters_if_has_getters() {
    for d in list() {
        if name_of(d) == STANDARD_METADATA_TYPE
            && (d.metadataType.value == T::Smpte2094_10.value()
                || d.metadataType.value == T::Smpte2094_40.value())
            && d.isGettable
        {
            assert!(d.isSettable);
        }
    }
}

#[test]
fn list_supported_works() {
    let b = generic();
    let h = b.import();
    for d in list() {
        if !d.isGettable {
            assert!(!d.isSettable);
            continue;
        }
        // SAFETY: null destination with size 0 is allowed.
        let size = unsafe { (mapper().v5.getMetadata)(h.0, d.metadataType, null_mut(), 0) };
        assert!(
            size >= 0,
            "{}:{} gave {size}",
            name_of(d),
            d.metadataType.value
        );
        let mut buf = vec![0u8; size as usize];
        // SAFETY: buffer of `size` bytes.
        let again = unsafe {
            (mapper().v5.getMetadata)(
                h.0,
                d.metadataType,
                buf.as_mut_ptr() as *mut c_void,
                buf.len(),
            )
        };
        assert_eq!(again, size);
        if d.isSettable {
            // SAFETY: bytes valid for their length.
            let r = unsafe {
                (mapper().v5.setMetadata)(
                    h.0,
                    d.metadataType,
                    buf.as_ptr() as *const c_void,
                    buf.len(),
                )
            };
            assert_eq!(r, NONE, "set {}:{}", name_of(d), d.metadataType.value);
        }
    }
}

#[test]
fn get_metadata_bad_value() {
    for t in 1..=23i64 {
        // SAFETY: null handle accepted.
        assert_eq!(
            // SAFETY: arguments are valid for the call, as set up above.
            unsafe { (mapper().v5.getStandardMetadata)(null(), t, null_mut(), 0) },
            -BAD_BUFFER,
            "type {t}"
        );
    }
}

#[test]
fn get_unsupported_metadata() {
    let b = generic();
    let h = b.import();
    let fake = CString::new("Fake").unwrap();
    let mut buf = vec![0u8; 10000];
    // SAFETY: buffer valid; name NUL-terminated.
    unsafe {
        let r = (mapper().v5.getMetadata)(
            h.0,
            AIMapper_MetadataType {
                name: fake.as_ptr(),
                value: 1,
            },
            buf.as_mut_ptr() as *mut c_void,
            buf.len(),
        );
        assert_eq!(r, -UNSUPPORTED);
        for t in [0, 24] {
            let r = (mapper().v5.getStandardMetadata)(
                h.0,
                t,
                buf.as_mut_ptr() as *mut c_void,
                buf.len(),
            );
            assert_eq!(r, -UNSUPPORTED, "standard {t}");
        }
    }
}

// ---- Beyond VTS: codes VTS does not exercise ---------------------------------

#[test]
fn lock_usage_and_region_rules() {
    let b = allocate(&info("ro", 64, 64, pf::RGBA_8888, usage::CPU_READ_OFTEN)).unwrap();
    let h = b.import();
    assert_eq!(lock(&h, 0, full(&b), -1), Err(BAD_VALUE));
    assert_eq!(lock(&h, usage::GPU_TEXTURE, full(&b), -1), Err(BAD_VALUE));
    assert_eq!(
        lock(&h, usage::CPU_WRITE_OFTEN, full(&b), -1),
        Err(BAD_VALUE)
    );
    assert_eq!(
        lock(
            &h,
            usage::CPU_READ_OFTEN,
            Rect {
                left: -1,
                top: 0,
                right: 2,
                bottom: 2
            },
            -1
        ),
        Err(BAD_VALUE)
    );
    assert_eq!(
        lock(
            &h,
            usage::CPU_READ_OFTEN,
            Rect {
                left: 2,
                top: 0,
                right: 2,
                bottom: 2
            },
            -1
        ),
        Err(BAD_VALUE)
    );
    // All-zero region = whole buffer.
    let p = lock(&h, usage::CPU_READ_OFTEN, Rect::default(), -1).unwrap();
    let p2 = lock(
        &h,
        usage::CPU_READ_OFTEN,
        Rect {
            left: 8,
            top: 8,
            right: 9,
            bottom: 9,
        },
        -1,
    )
    .unwrap();
    assert_eq!(p, p2, "lock returns the top-left of the whole buffer");
    assert_eq!(unlock(h.0).0, NONE);
    assert_eq!(unlock(h.0).0, NONE);
}

fn fd_is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD on any number is harmless.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

#[test]
fn acquire_fence_is_consumed_even_on_error() {
    use std::os::fd::IntoRawFd;
    let b = generic();
    let h = b.import();
    // Error path: bad region.
    let f = vnpu_gralloc::Fence::signaled().unwrap().into_raw_fd();
    assert_eq!(
        lock(
            &h,
            RW,
            Rect {
                left: 0,
                top: 0,
                right: 999,
                bottom: 1
            },
            f
        ),
        Err(BAD_VALUE)
    );
    assert!(!fd_is_open(f), "fence must be closed on error");
    // Error path: not imported.
    let f = vnpu_gralloc::Fence::signaled().unwrap().into_raw_fd();
    let mut out = null_mut();
    // SAFETY: raw (unimported) handle is an accepted input; fence ownership passes.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.lock)(b.raw.as_ptr(), RW, full(&b), f, &mut out) },
        BAD_BUFFER
    );
    assert!(!fd_is_open(f));
    // Success path with a signalled eventfd fence.
    let f = vnpu_gralloc::Fence::signaled()
        .unwrap()
        .into_fd()
        .into_raw_fd();
    lock(&h, RW, full(&b), f).unwrap();
    assert!(!fd_is_open(f));
    assert_eq!(unlock(h.0), (NONE, -1));
}

#[test]
fn set_metadata_codes() {
    let b = generic();
    let h = b.import();
    // Constant types: BAD_VALUE, even with a well-formed value.
    assert_eq!(set_standard(h.0, &M::Width(64)), BAD_VALUE);
    assert_eq!(set_standard(h.0, &M::Name("x".into())), BAD_VALUE);
    // Gettable but not settable: UNSUPPORTED.
    assert_eq!(set_standard(h.0, &M::Stride(64)), UNSUPPORTED);
    // Malformed: UNSUPPORTED.
    let mut bytes = M::Dataspace(1).encode();
    bytes.pop();
    // SAFETY: bytes valid for their length.
    let r = unsafe {
        (mapper().v5.setStandardMetadata)(h.0, 17, bytes.as_ptr() as *const c_void, bytes.len())
    };
    assert_eq!(r, UNSUPPORTED);
    // Unknown buffer first.
    // SAFETY: as above.
    let r = unsafe {
        (mapper().v5.setStandardMetadata)(null(), 17, bytes.as_ptr() as *const c_void, bytes.len())
    };
    assert_eq!(r, BAD_BUFFER);
}

#[test]
fn transport_size_and_reserved_region() {
    let b = allocate(&info("res", 16, 16, pf::RGBA_8888, RW).with_reserved(100)).unwrap();
    let h = b.import();
    let (mut nf, mut ni) = (0u32, 0u32);
    // SAFETY: valid out pointers.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.getTransportSize)(h.0, &mut nf, &mut ni) },
        NONE
    );
    assert_eq!((nf, ni), (2, 24));
    let mut p = null_mut();
    let mut n = 0u64;
    // SAFETY: valid out pointers.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.getReservedRegion)(h.0, &mut p, &mut n) },
        NONE
    );
    assert_eq!(n, 100);
    assert_eq!(p as usize % 8, 0);
    // Shared between imports.
    let h2 = b.import();
    let mut p2 = null_mut();
    // SAFETY: valid out pointers.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.getReservedRegion)(h2.0, &mut p2, &mut n) },
        NONE
    );
    // SAFETY: both regions are 100 bytes of the same shared memory.
    unsafe {
        (p as *mut u8).add(99).write_volatile(0x5A);
        assert_eq!((p2 as *const u8).add(99).read_volatile(), 0x5A);
    }
    let g = generic();
    let hg = g.import();
    // SAFETY: valid out pointers.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.getReservedRegion)(hg.0, &mut p, &mut n) },
        NONE
    );
    assert_eq!((p, n), (null_mut(), 0));
}

#[test]
fn dump_buffer_and_dump_all() {
    unsafe extern "C" fn begin(ctx: *mut c_void) {
        // SAFETY: ctx is the (usize, usize) below.
        unsafe { (*(ctx as *mut (usize, usize))).0 += 1 };
    }
    unsafe extern "C" fn each(
        ctx: *mut c_void,
        t: AIMapper_MetadataType,
        _v: *const c_void,
        _n: usize,
    ) {
        assert!(!t.name.is_null());
        // SAFETY: ctx is the (usize, usize) below.
        unsafe { (*(ctx as *mut (usize, usize))).1 += 1 };
    }
    let b = generic();
    let h = b.import();
    let mut counts = (0usize, 0usize);
    // SAFETY: callbacks and context valid for the call.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { (mapper().v5.dumpBuffer)(h.0, Some(each), &mut counts as *mut _ as *mut c_void) },
        NONE
    );
    assert_eq!(counts.1, list().iter().filter(|d| d.isGettable).count());
    let mut all = (0usize, 0usize);
    // SAFETY: as above.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe {
            (mapper().v5.dumpAllBuffers)(Some(begin), Some(each), &mut all as *mut _ as *mut c_void)
        },
        NONE
    );
    assert!(all.0 >= 1);
}

#[test]
fn allocator_rejections() {
    use vnpu_gralloc::AllocationErrorCode as C;
    let a = Allocator::new();
    let code = |i: BufferDescriptorInfo| a.allocate(&i, 1).map(|_| ()).map_err(|e| e.code());
    assert_eq!(
        code(info("", 0, 4, pf::RGBA_8888, RW)),
        Err(C::BadDescriptor)
    );
    assert_eq!(
        code(info("", 4, 4, pf::RGBA_8888, RW | 1 << 40)),
        Err(C::BadDescriptor)
    );
    assert_eq!(
        code(info("", 4, 4, pf::RGBA_8888, usage::PROTECTED)),
        Err(C::Unsupported)
    );
    assert_eq!(
        code(info(
            "",
            4,
            4,
            pf::IMPLEMENTATION_DEFINED,
            usage::CPU_READ_OFTEN
        )),
        Err(C::Unsupported)
    );
    assert_eq!(
        code(info(
            "",
            4,
            4,
            pf::IMPLEMENTATION_DEFINED,
            usage::GPU_TEXTURE
        )),
        Ok(())
    );
    assert_eq!(code(info("", 4, 2, pf::BLOB, RW)), Err(C::BadDescriptor));
    assert_eq!(code(info("", 4, 4, 0x7777, RW)), Err(C::Unsupported));
    assert!(!a.is_supported(&info("", 4, 4, pf::RGBA_8888, usage::PROTECTED)));
    for f in [
        pf::BLOB,
        pf::RGBA_8888,
        pf::RGBX_8888,
        pf::RGB_888,
        pf::RGB_565,
        pf::BGRA_8888,
        pf::RGBA_FP16,
        pf::RGBA_1010102,
        pf::R_8,
        pf::YV12,
        pf::YCBCR_420_888,
        pf::YCRCB_420_SP,
        pf::Y8,
        pf::Y16,
        pf::RAW16,
        pf::YCBCR_P010,
    ] {
        let h = if f == pf::BLOB { 1 } else { 32 };
        assert!(a.is_supported(&info("", 32, h, f, RW)), "format {f:#x}");
    }
}

/// `unlock(handle, NULL)` is refused (BAD_VALUE) and leaves the buffer locked: the unlock
/// that follows with a fence pointer succeeds, and only then is the buffer unlocked. The
/// other entry points refused for a null out pointer likewise change nothing (a lock is
/// not taken), and a bad handle still reports BAD_BUFFER first.
#[test]
fn unlock_null_fence_keeps_lock() {
    let b = generic();
    let h = b.import();
    let data = lock(&h, RW, full(&b), -1).expect("lock");
    assert!(!data.is_null());
    // SAFETY: imported handle; a null release pointer is what is being refused.
    let r = unsafe { (mapper().v5.unlock)(h.0, null_mut()) };
    assert_eq!(r, BAD_VALUE);
    assert_eq!(
        unlock(h.0),
        (NONE, -1),
        "the refused unlock released the lock"
    );
    assert_eq!(unlock(h.0).0, BAD_BUFFER, "unlocked once only");
    // Nested locks: a refused unlock takes none of them.
    lock(&h, RW, full(&b), -1).expect("lock");
    lock(&h, RW, full(&b), -1).expect("lock");
    // SAFETY: as above.
    assert_eq!(unsafe { (mapper().v5.unlock)(h.0, null_mut()) }, BAD_VALUE);
    assert_eq!(unlock(h.0).0, NONE);
    assert_eq!(unlock(h.0).0, NONE);
    assert_eq!(unlock(h.0).0, BAD_BUFFER);
    // A lock refused for its null out pointer takes no lock.
    // SAFETY: imported handle; no fence; the null out pointer is refused.
    let r = unsafe { (mapper().v5.lock)(h.0, RW, full(&b), -1, null_mut()) };
    assert_eq!(r, BAD_VALUE);
    assert_eq!(unlock(h.0).0, BAD_BUFFER, "a refused lock took a lock");
    // A bad handle is reported as such whatever else is wrong.
    // SAFETY: null handle and null out pointers: both refused before use.
    unsafe {
        assert_eq!((mapper().v5.unlock)(null(), null_mut()), BAD_BUFFER);
        assert_eq!(
            (mapper().v5.lock)(null(), RW, full(&b), -1, null_mut()),
            BAD_BUFFER
        );
        assert_eq!(
            (mapper().v5.getTransportSize)(null(), null_mut(), null_mut()),
            BAD_BUFFER
        );
        assert_eq!(
            (mapper().v5.getReservedRegion)(null(), null_mut(), null_mut()),
            BAD_BUFFER
        );
    }
    // Null out pointers on a good handle: BAD_VALUE.
    let mut n = 0u32;
    let mut p = null_mut();
    // SAFETY: imported handle; the null out pointers are refused before use.
    unsafe {
        assert_eq!(
            (mapper().v5.getTransportSize)(h.0, null_mut(), &mut n),
            BAD_VALUE
        );
        assert_eq!(
            (mapper().v5.getReservedRegion)(h.0, &mut p, null_mut()),
            BAD_VALUE
        );
    }
}
