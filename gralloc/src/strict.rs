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
//! The userfaultfd object, its ioctls and its messages come from the
//! `userfaultfd` crate (`UffdBuilder`, `Uffd::register_with_mode` with
//! `RegisterMode::WRITE_PROTECT`, `write_protect`, `remove_write_protection`,
//! `read_event`).

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};

use libc::c_void;
use userfaultfd::{
    Error as UffdError, Event, FaultKind, FeatureFlags, RegisterMode, Uffd, UffdBuilder,
};

/// `UFFD_FEATURE_EXACT_ADDRESS` (Linux 5.18): the crate's `FeatureFlags` has
/// no name for it, so the bit is passed through `from_bits_retain`.
const FEATURE_EXACT_ADDRESS: u64 = 1 << 11;
const PAGE: usize = 4096;

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
    uffd: Uffd,
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

/// The errno behind a `userfaultfd` crate error.
fn errno_of(e: &UffdError) -> i32 {
    match e {
        UffdError::SystemError(errno) => *errno as i32,
        UffdError::OpenDevUserfaultfd(io) => io.raw_os_error().unwrap_or(libc::EIO),
        UffdError::UnsupportedIoctls(_) => libc::EOPNOTSUPP,
        _ => libc::EIO,
    }
}

fn uptr(start: usize) -> *mut c_void {
    start as *mut c_void
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
    /// Creates the userfaultfd with the thread-id and exact-address
    /// features when the kernel has them (UFFDIO_API refuses unknown features
    /// with EINVAL, so fall back one feature at a time). Not user-mode-only:
    /// writes the kernel makes into a protected buffer (e.g. `read(2)` into
    /// it) are reported too instead of failing with EFAULT.
    fn open() -> Result<Self, i32> {
        let exact = FeatureFlags::from_bits_retain(FEATURE_EXACT_ADDRESS);
        let mut err = libc::EINVAL;
        for features in [
            FeatureFlags::THREAD_ID | exact,
            FeatureFlags::THREAD_ID,
            FeatureFlags::empty(),
        ] {
            match UffdBuilder::new()
                .close_on_exec(true)
                .user_mode_only(false)
                .require_features(features)
                .create()
            {
                Ok(uffd) => {
                    return Ok(Self {
                        uffd,
                        regions: Mutex::new(Vec::new()),
                        violations: Mutex::new(Vec::new()),
                    })
                }
                Err(e) => {
                    err = errno_of(&e);
                    if err != libc::EINVAL {
                        break;
                    }
                }
            }
        }
        Err(err)
    }

    /// Registers and write-protects one page of a scratch memfd, to prove the
    /// kernel supports WP on shmem.
    fn probe_shmem_wp(&self) -> Result<(), i32> {
        let fd = crate::shared::sealed_memfd("vnpu-gralloc uffd probe", PAGE as u64)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let map = crate::shared::Mapping::map(fd.as_raw_fd(), PAGE as u64)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let start = map.ptr().cast::<c_void>();
        self.uffd
            .register_with_mode(start, PAGE, RegisterMode::WRITE_PROTECT)
            .map_err(|e| errno_of(&e))?;
        let r = self
            .uffd
            .write_protect(start, PAGE)
            .map_err(|e| errno_of(&e));
        let _ = self.uffd.unregister(start, PAGE);
        r
    }

    fn regions(&self) -> std::sync::MutexGuard<'_, Vec<Region>> {
        self.regions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn protect(&self, start: usize, len: usize, on: bool) -> Result<(), i32> {
        if len == 0 {
            return Ok(());
        }
        let r = if on {
            self.uffd.write_protect(uptr(start), len)
        } else {
            self.uffd.remove_write_protection(uptr(start), len, true)
        };
        r.map_err(|e| errno_of(&e))
    }

    /// Registers a pixel mapping and write-protects it.
    pub fn register(&self, start: usize, len: usize, buffer_id: u64) -> Result<(), i32> {
        self.uffd
            .register_with_mode(uptr(start), len, RegisterMode::WRITE_PROTECT)
            .map_err(|e| errno_of(&e))?;
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
        let _ = self.uffd.unregister(uptr(start), len);
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
            let event = match self.uffd.read_event() {
                Ok(Some(event)) => event,
                // EAGAIN, a short message or an event we never asked for.
                Ok(None)
                | Err(
                    UffdError::IncompleteMsg { .. }
                    | UffdError::UnrecognizedEvent(_)
                    | UffdError::ReadEof,
                ) => continue,
                Err(e) if errno_of(&e) == libc::EINTR => continue,
                Err(e) => {
                    tracing::error!(
                        errno = errno_of(&e),
                        "userfaultfd read failed; strict-lock handler stops"
                    );
                    return;
                }
            };
            let Event::Pagefault {
                kind,
                addr: fault,
                thread_id,
                ..
            } = event
            else {
                continue;
            };
            let addr = fault as usize;
            let page = addr / PAGE * PAGE;
            if kind == FaultKind::WriteProtected {
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
                                thread_id: thread_id.as_raw() as u32,
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
