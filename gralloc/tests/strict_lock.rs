//! Strict-lock mode: userfaultfd write protection reports stray writes
//! without crashing. Own test binary, since the mode is process-wide.

use vnpu_gralloc::strict::{self, ViolationKind};
use vnpu_gralloc::{pixel_format as pf, usage, Allocator, BufferDescriptorInfo, Mapper, Rect};

/// # Safety
/// `p` must be inside a live mapping.
unsafe fn poke(p: *mut u8) {
    // SAFETY: caller contract; a write-protected page faults into the handler,
    // which records the violation and lets the write complete.
    unsafe { p.write_volatile(0xEE) };
}

#[test]
fn strict_lock_reports_stray_writes() {
    let m = Mapper::new();
    if let Err(errno) = m.enable_strict_lock() {
        // The evidence when the kernel cannot write-protect shmem: the errno.
        eprintln!("strict-lock mode unavailable: errno {errno}");
        assert!(matches!(
            errno,
            libc::EINVAL | libc::EPERM | libc::ENOSYS | libc::EOPNOTSUPP | libc::EACCES
        ));
        return;
    }
    let rw = usage::CPU_READ_OFTEN | usage::CPU_WRITE_OFTEN;
    // 64x64 RGBA: stride 256 bytes, 16 rows per 4 KiB page, 4 pages.
    let r = Allocator::new()
        .allocate(&BufferDescriptorInfo::new(64, 64, pf::RGBA_8888, rw), 1)
        .unwrap();
    let h = m.import_buffer(r.buffers[0].as_raw()).unwrap();
    let id = m.buffer_info(h).unwrap().id;
    let _ = strict::take_violations();

    let p = m
        .lock(h, usage::CPU_READ_OFTEN, Rect::default(), None)
        .unwrap();
    // SAFETY: offset inside the 16 KiB mapping.
    unsafe { poke(p.add(5000)) };
    m.unlock(h).unwrap();
    let v = strict::take_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        (v[0].buffer_id, v[0].kind),
        (id, ViolationKind::WriteUnderReadLock)
    );
    assert_eq!(v[0].offset / 4096, 1);

    // Unlocked write.
    // SAFETY: as above.
    unsafe { poke(p.add(10)) };
    let v = strict::take_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].kind, ViolationKind::WriteWhileUnlocked);

    // Locked for writing rows 0..16 (page 0): inside is fine, row 40 is not.
    let region = Rect {
        left: 0,
        top: 0,
        right: 64,
        bottom: 16,
    };
    let q = m.lock(h, usage::CPU_WRITE_OFTEN, region, None).unwrap();
    assert_eq!(p, q);
    // SAFETY: as above.
    unsafe {
        poke(q.add(100));
        poke(q.add(15 * 256 + 255));
    }
    assert!(strict::take_violations().is_empty());
    // SAFETY: as above.
    unsafe { poke(q.add(40 * 256)) };
    let v = strict::take_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].kind, ViolationKind::WriteOutsideRegion);
    assert_eq!(v[0].offset / 4096, 2);

    // Whole-buffer write lock: no violations anywhere.
    m.unlock(h).unwrap();
    let q = m.lock(h, rw, Rect::default(), None).unwrap();
    for off in [0, 4096, 8192, 16383] {
        // SAFETY: as above.
        unsafe { poke(q.add(off)) };
    }
    m.unlock(h).unwrap();
    assert!(strict::take_violations().is_empty());
    // The data written under faults did land (the process was never stopped).
    let q = m
        .lock(h, usage::CPU_READ_OFTEN, Rect::default(), None)
        .unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { q.add(5000).read_volatile() }, 0xEE);
    m.unlock(h).unwrap();
    m.free_buffer(h).unwrap();
    strict::disable();
}
