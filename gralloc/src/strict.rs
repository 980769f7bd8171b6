//! Strict-lock mode: userfaultfd write protection of imported pixel memory.
//!
//! Opt-in (for debugging clients): [`enable`] or `VNPU_GRALLOC_STRICT_LOCK=1`
//! before import. Pixel mappings imported in strict mode are registered with a
//! process-wide userfaultfd in write-protect mode and kept write-protected
//! except for the pages of a region locked for CPU writing. A write to a
//! buffer that is unlocked, locked read-only, or outside the locked region
//! faults; a handler thread records a [`StrictViolation`] (and logs it with
//! `tracing`), then lifts the protection of that page and wakes the writer, so
//! the process never crashes. Protection is re-armed at the next lock/unlock.
//!
//! Write protection of shmem (memfd) needs Linux ≥ 5.19 with
//! `CONFIG_PTE_MARKER_UFFD_WP`; when unavailable, [`enable`] returns the errno
//! and the mapper keeps working without strict checks.
//!
//! The ioctl numbers and structs are those of `<linux/userfaultfd.h>` (x86_64
//! and aarch64 share them); they are declared here to avoid a bindgen build.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};

const UFFD_API: u64 = 0xAA;
const UFFDIO_API: u64 = 0xc018_aa3f;
const UFFDIO_REGISTER: u64 = 0xc020_aa00;
const UFFDIO_UNREGISTER: u64 = 0x8010_aa01;
const UFFDIO_WRITEPROTECT: u64 = 0xc018_aa06;
const UFFDIO_REGISTER_MODE_WP: u64 = 2;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFD_PAGEFAULT_FLAG_WP: u64 = 2;
const UFFD_FEATURE_THREAD_ID: u64 = 1 << 8;
const UFFD_FEATURE_EXACT_ADDRESS: u64 = 1 << 11;
const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
const PAGE: usize = 4096;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdMsg {
    event: u8,
    reserved1: u8,
    reserved2: u16,
    reserved3: u32,
    flags: u64,
    address: u64,
    ptid: u32,
    pad: u32,
}

const _: () = assert!(std::mem::size_of::<UffdMsg>() == 32);

/// What kind of stray write was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViolationKind {
    /// Write to a buffer that is not locked.
    WriteWhileUnlocked,
    /// Write to a buffer locked without CPU write usage.
    WriteUnderReadLock,
    /// Write outside the region locked for writing.
    WriteOutsideRegion,
}

/// A recorded stray write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrictViolation {
    /// BUFFER_ID of the buffer written.
    pub buffer_id: u64,
    /// Byte offset in the pixel memory (page-aligned if the kernel lacks exact addresses).
    pub offset: usize,
    /// The kind.
    pub kind: ViolationKind,
    /// Thread id of the writer (0 if unknown).
    pub thread_id: u32,
}

#[derive(Debug, Clone)]
enum State {
    Unlocked,
    Locked { writable: Vec<(usize, usize)> },
}

#[derive(Debug)]
struct Region {
    start: usize,
    len: usize,
    buffer_id: u64,
    state: State,
}

/// The process-wide userfaultfd and its handler.
pub(crate) struct Engine {
    uffd: OwnedFd,
    regions: Mutex<Vec<Region>>,
    violations: Mutex<Vec<StrictViolation>>,
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static ENV_CHECKED: std::sync::Once = std::sync::Once::new();

static ENGINE: LazyLock<Result<&'static Engine, i32>> = LazyLock::new(|| {
    let e = Engine::open()?;
    let e: &'static Engine = Box::leak(Box::new(e));
    std::thread::Builder::new()
        .name("vnpu-gralloc-uffd".into())
        .spawn(move || e.handler_loop())
        .map_err(|_| libc::EAGAIN)?;
    Ok(e)
});

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn uffd_open() -> Result<OwnedFd, i32> {
    // SAFETY: plain syscall; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn ioctl<T>(fd: &OwnedFd, req: u64, arg: &mut T) -> Result<(), i32> {
    // SAFETY: `arg` is the struct the request expects (layouts above match the kernel ABI).
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg as *mut T) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Turns strict-lock mode on for buffers imported from now on. Returns the
/// errno when userfaultfd write protection is unavailable.
pub fn enable() -> Result<(), i32> {
    let e = (*ENGINE)?;
    e.probe_shmem_wp()?;
    ENABLED.store(true, Ordering::SeqCst);
    Ok(())
}

/// Turns strict-lock mode off for buffers imported from now on.
pub fn disable() {
    ENABLED.store(false, Ordering::SeqCst);
}

/// Whether buffers imported now get strict checks.
pub fn is_enabled() -> bool {
    ENV_CHECKED.call_once(|| {
        if std::env::var_os("VNPU_GRALLOC_STRICT_LOCK").is_some_and(|v| v == "1") {
            if let Err(e) = enable() {
                tracing::warn!(errno = e, "strict-lock mode requested but unavailable");
            }
        }
    });
    ENABLED.load(Ordering::SeqCst)
}

/// Violations recorded so far (drained).
pub fn take_violations() -> Vec<StrictViolation> {
    match *ENGINE {
        Ok(e) => std::mem::take(&mut *e.violations.lock().unwrap_or_else(|p| p.into_inner())),
        Err(_) => Vec::new(),
    }
}

pub(crate) fn engine() -> Option<&'static Engine> {
    (*ENGINE).ok()
}

impl Engine {
    fn open() -> Result<Self, i32> {
        let probe = uffd_open()?;
        let mut api = UffdioApi {
            api: UFFD_API,
            features: 0,
            ioctls: 0,
        };
        ioctl(&probe, UFFDIO_API, &mut api)?;
        drop(probe);
        let want =
            (UFFD_FEATURE_THREAD_ID | UFFD_FEATURE_EXACT_ADDRESS | UFFD_FEATURE_WP_HUGETLBFS_SHMEM)
                & api.features;
        let uffd = uffd_open()?;
        let mut api = UffdioApi {
            api: UFFD_API,
            features: want,
            ioctls: 0,
        };
        ioctl(&uffd, UFFDIO_API, &mut api)?;
        Ok(Self {
            uffd,
            regions: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
        })
    }

    /// Registers and write-protects one page of a scratch memfd, to prove the
    /// kernel supports WP on shmem.
    fn probe_shmem_wp(&self) -> Result<(), i32> {
        let fd = crate::shared::sealed_memfd("vnpu-gralloc uffd probe", PAGE as u64)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let map = crate::shared::Mapping::map(fd.as_raw_fd(), PAGE as u64)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let range = UffdioRange {
            start: map.ptr() as u64,
            len: PAGE as u64,
        };
        let mut reg = UffdioRegister {
            range,
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        ioctl(&self.uffd, UFFDIO_REGISTER, &mut reg)?;
        let mut wp = UffdioWriteprotect {
            range,
            mode: UFFDIO_WRITEPROTECT_MODE_WP,
        };
        let r = ioctl(&self.uffd, UFFDIO_WRITEPROTECT, &mut wp);
        let mut unreg = range;
        let _ = ioctl(&self.uffd, UFFDIO_UNREGISTER, &mut unreg);
        r
    }

    fn regions(&self) -> std::sync::MutexGuard<'_, Vec<Region>> {
        self.regions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn protect(&self, start: usize, len: usize, on: bool) -> Result<(), i32> {
        if len == 0 {
            return Ok(());
        }
        let mut wp = UffdioWriteprotect {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: if on { UFFDIO_WRITEPROTECT_MODE_WP } else { 0 },
        };
        ioctl(&self.uffd, UFFDIO_WRITEPROTECT, &mut wp)
    }

    /// Registers a pixel mapping and write-protects it.
    pub fn register(&self, start: usize, len: usize, buffer_id: u64) -> Result<(), i32> {
        let range = UffdioRange {
            start: start as u64,
            len: len as u64,
        };
        let mut reg = UffdioRegister {
            range,
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        ioctl(&self.uffd, UFFDIO_REGISTER, &mut reg)?;
        self.regions().push(Region {
            start,
            len,
            buffer_id,
            state: State::Unlocked,
        });
        self.protect(start, len, true)
    }

    /// Forgets a mapping (before it is unmapped).
    pub fn unregister(&self, start: usize, len: usize) {
        let mut regions = self.regions();
        regions.retain(|r| r.start != start);
        let mut range = UffdioRange {
            start: start as u64,
            len: len as u64,
        };
        let _ = ioctl(&self.uffd, UFFDIO_UNREGISTER, &mut range);
    }

    /// A lock succeeded: `writable` is the byte range (offset, len) the
    /// caller may write, or `None` for a read-only lock.
    pub fn on_lock(&self, start: usize, writable: Option<(usize, usize)>) {
        let mut regions = self.regions();
        let Some(r) = regions.iter_mut().find(|r| r.start == start) else {
            return;
        };
        let mut ranges = match &r.state {
            State::Unlocked => Vec::new(),
            State::Locked { writable } => writable.clone(),
        };
        if let Some((off, len)) = writable {
            let lo = off / PAGE * PAGE;
            let hi = (off + len).div_ceil(PAGE) * PAGE;
            ranges.push((lo, hi.min(r.len) - lo.min(r.len)));
        }
        let _ = self.protect(r.start, r.len, true);
        for &(off, len) in &ranges {
            let _ = self.protect(r.start + off, len, false);
        }
        r.state = State::Locked { writable: ranges };
    }

    /// An unlock succeeded, leaving `remaining` nested locks.
    pub fn on_unlock(&self, start: usize, remaining: u32) {
        if remaining > 0 {
            return;
        }
        let mut regions = self.regions();
        let Some(r) = regions.iter_mut().find(|r| r.start == start) else {
            return;
        };
        r.state = State::Unlocked;
        let _ = self.protect(r.start, r.len, true);
    }

    fn handler_loop(&self) {
        loop {
            let mut msg = UffdMsg::default();
            // SAFETY: reads one 32-byte message into a local of that size.
            let n = unsafe {
                libc::read(
                    self.uffd.as_raw_fd(),
                    &mut msg as *mut UffdMsg as *mut libc::c_void,
                    std::mem::size_of::<UffdMsg>(),
                )
            };
            if n < 0 {
                if errno() == libc::EINTR || errno() == libc::EAGAIN {
                    continue;
                }
                tracing::error!(
                    errno = errno(),
                    "userfaultfd read failed; strict-lock handler stops"
                );
                return;
            }
            if n as usize != std::mem::size_of::<UffdMsg>() || msg.event != UFFD_EVENT_PAGEFAULT {
                continue;
            }
            let addr = msg.address as usize;
            let page = addr / PAGE * PAGE;
            if msg.flags & UFFD_PAGEFAULT_FLAG_WP != 0 {
                let found = {
                    let regions = self.regions();
                    regions
                        .iter()
                        .find(|r| addr >= r.start && addr < r.start + r.len)
                        .map(|r| {
                            let kind = match &r.state {
                                State::Unlocked => ViolationKind::WriteWhileUnlocked,
                                State::Locked { writable } if writable.is_empty() => {
                                    ViolationKind::WriteUnderReadLock
                                }
                                State::Locked { .. } => ViolationKind::WriteOutsideRegion,
                            };
                            StrictViolation {
                                buffer_id: r.buffer_id,
                                offset: addr - r.start,
                                kind,
                                thread_id: msg.ptid,
                            }
                        })
                };
                if let Some(v) = found {
                    tracing::warn!(buffer_id = v.buffer_id, offset = v.offset, kind = ?v.kind, tid = v.thread_id, "gralloc strict-lock violation");
                    self.violations
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(v);
                }
            }
            // Lift protection on the page and wake the writer.
            let _ = self.protect(page, PAGE, false);
        }
    }
}
