//! `native_handle_t`-compatible handles and the vnpu handle layout.
//!
//! A vnpu buffer handle has exactly [`NUM_FDS`] fds and [`NUM_INTS`] ints:
//!
//! | fd | content |
//! |----|---------|
//! | 0  | pixel memory memfd (sealed against shrink/grow) |
//! | 1  | metadata memfd: shared header ([`crate::shared`]) then the reserved region |
//!
//! | int | field |
//! |-----|-------|
//! | 0 | magic [`HANDLE_MAGIC`] |
//! | 1 | handle layout version [`HANDLE_VERSION`] |
//! | 2,3 | buffer id (lo, hi) |
//! | 4..8 | width, height, layer count, requested pixel format |
//! | 8,9 | usage (lo, hi) |
//! | 10 | stride in pixels |
//! | 11 | plane count |
//! | 12..15 | plane byte offsets (unused = 0) |
//! | 15..18 | plane byte strides (unused = 0) |
//! | 18,19 | pixel memfd size (lo, hi) |
//! | 20,21 | metadata memfd size (lo, hi) |
//! | 22,23 | reserved region size (lo, hi) |

use std::os::fd::{BorrowedFd, OwnedFd, RawFd};

/// `native_handle_t::version` (= sizeof(native_handle_t)).
pub const NATIVE_HANDLE_VERSION: i32 = 12;
/// Maximum fds / ints of a native handle (libcutils).
pub const NATIVE_HANDLE_MAX: i32 = 1024;
/// Magic of a vnpu handle ("VNPU").
pub const HANDLE_MAGIC: i32 = 0x5550_4E56;
/// Version of the vnpu handle layout.
pub const HANDLE_VERSION: i32 = 1;
/// File descriptors in a vnpu handle.
pub const NUM_FDS: usize = 2;
/// Ints in a vnpu handle.
pub const NUM_INTS: usize = 24;

/// Indices into the int array.
#[allow(missing_docs)]
pub mod idx {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const ID_LO: usize = 2;
    pub const ID_HI: usize = 3;
    pub const WIDTH: usize = 4;
    pub const HEIGHT: usize = 5;
    pub const LAYER_COUNT: usize = 6;
    pub const FORMAT: usize = 7;
    pub const USAGE_LO: usize = 8;
    pub const USAGE_HI: usize = 9;
    pub const STRIDE: usize = 10;
    pub const NUM_PLANES: usize = 11;
    pub const PLANE_OFFSET: usize = 12;
    pub const PLANE_STRIDE: usize = 15;
    pub const PIXEL_SIZE_LO: usize = 18;
    pub const META_SIZE_LO: usize = 20;
    pub const RESERVED_SIZE_LO: usize = 22;
}

/// Splits a u64 into two ints.
pub fn split64(v: u64) -> [i32; 2] {
    [v as u32 as i32, (v >> 32) as u32 as i32]
}

/// Joins two ints into a u64.
pub fn join64(lo: i32, hi: i32) -> u64 {
    (lo as u32 as u64) | ((hi as u32 as u64) << 32)
}

/// The C `native_handle_t` header (`int version, numFds, numInts; int data[]`).
#[repr(C)]
#[derive(Debug)]
pub struct native_handle_t {
    /// sizeof(native_handle_t) = 12.
    pub version: i32,
    /// Number of fds at the start of `data`.
    pub num_fds: i32,
    /// Number of ints after the fds.
    pub num_ints: i32,
    /// fds then ints.
    pub data: [i32; 0],
}

/// An owned native handle in C-compatible, `malloc`ed memory (so a C client
/// may release it with `native_handle_close` + `native_handle_delete`). Owns
/// its fds: dropping closes them and frees the memory.
#[derive(Debug)]
pub struct NativeHandle {
    ptr: std::ptr::NonNull<native_handle_t>,
}

// SAFETY: the handle exclusively owns its heap block and fds; nothing is thread-affine.
unsafe impl Send for NativeHandle {}
// SAFETY: shared access only reads the immutable block.
unsafe impl Sync for NativeHandle {}

impl NativeHandle {
    /// Builds a handle from owned fds and ints. Returns `None` when the
    /// counts exceed the native handle limits or memory is exhausted.
    pub fn new(fds: Vec<OwnedFd>, ints: &[i32]) -> Option<Self> {
        if fds.len() > NATIVE_HANDLE_MAX as usize || ints.len() > NATIVE_HANDLE_MAX as usize {
            return None;
        }
        let words = 3 + fds.len() + ints.len();
        // SAFETY: calloc with a non-zero, small size; result checked for null.
        let raw = unsafe { libc::calloc(words, std::mem::size_of::<i32>()) } as *mut i32;
        let ptr = std::ptr::NonNull::new(raw as *mut native_handle_t)?;
        let nfds = fds.len();
        // SAFETY: `raw` points to `words` zeroed i32s we own exclusively.
        unsafe {
            raw.write(NATIVE_HANDLE_VERSION);
            raw.add(1).write(nfds as i32);
            raw.add(2).write(ints.len() as i32);
            for (i, fd) in fds.into_iter().enumerate() {
                raw.add(3 + i)
                    .write(std::os::fd::IntoRawFd::into_raw_fd(fd));
            }
            for (i, v) in ints.iter().enumerate() {
                raw.add(3 + nfds + i).write(*v);
            }
        }
        Some(Self { ptr })
    }

    /// Takes ownership of a `malloc`ed native handle.
    ///
    /// # Safety
    /// `ptr` must be a valid, `malloc`ed native handle whose fds are owned
    /// by the caller and not used elsewhere afterwards.
    pub unsafe fn from_raw(ptr: *mut native_handle_t) -> Option<Self> {
        std::ptr::NonNull::new(ptr).map(|ptr| Self { ptr })
    }

    /// Gives up ownership, returning the raw pointer.
    pub fn into_raw(self) -> *mut native_handle_t {
        let p = self.ptr.as_ptr();
        std::mem::forget(self);
        p
    }

    /// The C pointer (valid while `self` lives).
    pub fn as_ptr(&self) -> *const native_handle_t {
        self.ptr.as_ptr()
    }

    fn header(&self) -> (usize, usize) {
        // SAFETY: `ptr` is a valid handle we own; the header is three ints.
        let (f, i) = unsafe { ((*self.ptr.as_ptr()).num_fds, (*self.ptr.as_ptr()).num_ints) };
        (f.max(0) as usize, i.max(0) as usize)
    }

    /// The fds.
    pub fn fds(&self) -> &[RawFd] {
        let (f, _) = self.header();
        // SAFETY: the block holds `3 + f + i` ints, built by `new` or handed over by `from_raw`.
        unsafe { std::slice::from_raw_parts((self.ptr.as_ptr() as *const i32).add(3), f) }
    }

    /// The ints.
    pub fn ints(&self) -> &[i32] {
        let (f, i) = self.header();
        // SAFETY: as in `fds`.
        unsafe { std::slice::from_raw_parts((self.ptr.as_ptr() as *const i32).add(3 + f), i) }
    }

    /// Mutable ints (for tests that forge handles).
    pub fn ints_mut(&mut self) -> &mut [i32] {
        let (f, i) = self.header();
        // SAFETY: as in `fds`; `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut((self.ptr.as_ptr() as *mut i32).add(3 + f), i) }
    }

    /// A borrowed view for import.
    pub fn as_raw(&self) -> RawHandle<'_> {
        RawHandle {
            version: NATIVE_HANDLE_VERSION,
            fds: self.fds(),
            ints: self.ints(),
        }
    }

    /// Duplicates the handle (new fds, same ints).
    pub fn try_clone(&self) -> std::io::Result<Self> {
        let mut fds = Vec::with_capacity(self.fds().len());
        for &fd in self.fds() {
            // SAFETY: fd belongs to this handle and stays open for the call.
            let b = unsafe { BorrowedFd::borrow_raw(fd) };
            fds.push(b.try_clone_to_owned()?);
        }
        Self::new(fds, self.ints()).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))
    }

    /// Replaces fd `i` (tests forging handles); the old fd is closed.
    pub fn replace_fd(&mut self, i: usize, fd: OwnedFd) -> bool {
        let (f, _) = self.header();
        if i >= f {
            return false;
        }
        // SAFETY: index checked against the fd count; we own the block and the fd.
        unsafe {
            let slot = (self.ptr.as_ptr() as *mut i32).add(3 + i);
            let old = slot.read();
            if old >= 0 {
                libc::close(old);
            }
            slot.write(std::os::fd::IntoRawFd::into_raw_fd(fd));
        }
        true
    }
}

impl Drop for NativeHandle {
    fn drop(&mut self) {
        for &fd in self.fds() {
            if fd >= 0 {
                // SAFETY: the handle owns its fds.
                unsafe { libc::close(fd) };
            }
        }
        // SAFETY: the block was allocated with calloc/malloc and is owned by us.
        unsafe { libc::free(self.ptr.as_ptr() as *mut libc::c_void) };
    }
}

/// A borrowed raw handle as received (from C or a socket): the header
/// version and the fd and int arrays. Nothing in it is trusted.
#[derive(Debug, Clone, Copy)]
pub struct RawHandle<'a> {
    /// `native_handle_t::version` as received.
    pub version: i32,
    /// The fds.
    pub fds: &'a [RawFd],
    /// The ints.
    pub ints: &'a [i32],
}

impl<'a> RawHandle<'a> {
    /// Reads a raw handle from a C pointer, validating the header first.
    ///
    /// # Safety
    /// `ptr` must be null or point to readable memory holding a native handle
    /// header followed by `numFds + numInts` ints (as the C API requires).
    pub unsafe fn from_ptr(ptr: *const native_handle_t) -> Option<RawHandle<'a>> {
        if ptr.is_null() {
            return None;
        }
        // SAFETY: caller guarantees the header is readable.
        let (version, nf, ni) = unsafe { ((*ptr).version, (*ptr).num_fds, (*ptr).num_ints) };
        if version != NATIVE_HANDLE_VERSION
            || !(0..=NATIVE_HANDLE_MAX).contains(&nf)
            || !(0..=NATIVE_HANDLE_MAX).contains(&ni)
        {
            return None;
        }
        let base = ptr as *const i32;
        // SAFETY: caller guarantees `numFds + numInts` ints follow the header; counts are bounded.
        let (fds, ints) = unsafe {
            (
                std::slice::from_raw_parts(base.add(3), nf as usize),
                std::slice::from_raw_parts(base.add(3 + nf as usize), ni as usize),
            )
        };
        Some(RawHandle { version, fds, ints })
    }
}
