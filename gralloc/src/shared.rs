//! memfds, mappings, and the shared metadata header.
//!
//! The metadata memfd starts with a [`SharedHeader`] (at most
//! [`META_HEADER_SIZE`] bytes) followed by the page-aligned reserved region.
//! Another process may write this memory at any time, so it is only touched
//! through raw pointers with volatile copies and atomics; mutable fields are
//! guarded by a seqlock (`seq`) and a writer spin lock (`lock`), both bounded
//! so a dead or hostile peer cannot hang us.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::ptr::{addr_of, addr_of_mut};
use std::sync::atomic::{fence, AtomicU32, Ordering};

use crate::error::MapperError;
use crate::handle::NUM_INTS;

/// Bytes reserved for the shared header at the start of the metadata memfd.
pub const META_HEADER_SIZE: u64 = 16384;
/// Magic of the shared header.
pub const META_MAGIC: u64 = 0x4154_454D_5550_4E56; // "VNPUMETA"
/// Layout version of the shared header.
pub const META_VERSION: u32 = 1;
/// Capacity of each SMPTE 2094 blob.
pub const BLOB_MAX: usize = 4096;
/// Capacity of the name (bytes, no NUL).
pub const NAME_MAX: usize = 127;
/// Largest reserved region the allocator hands out.
pub const MAX_RESERVED: u64 = 64 << 20;
/// Length value meaning "absent".
const ABSENT: u32 = u32::MAX;

/// The shared header. Never referenced with `&`/`&mut`; only via raw pointers.
#[repr(C)]
pub(crate) struct SharedHeader {
    magic: u64,
    version: u32,
    header_size: u32,
    handle_ints: [i32; NUM_INTS],
    pixel_dev: u64,
    pixel_ino: u64,
    creator_pid: u32,
    name_len: u32,
    name: [u8; 128],
    lock: u32,
    seq: u32,
    dataspace: i32,
    blend_mode: i32,
    smpte2086_present: u32,
    smpte2086: [u32; 10],
    cta861_3_present: u32,
    cta861_3: [u32; 2],
    smpte2094_40_len: u32,
    smpte2094_40: [u8; BLOB_MAX],
    smpte2094_10_len: u32,
    smpte2094_10: [u8; BLOB_MAX],
    user_data_len: u32,
    user_data: [u8; crate::metadata::vendor::USER_DATA_MAX],
}

const _: () = assert!(std::mem::size_of::<SharedHeader>() as u64 <= META_HEADER_SIZE);

/// Creates a sealed memfd of `size` bytes.
pub(crate) fn sealed_memfd(name: &str, size: u64) -> std::io::Result<OwnedFd> {
    let cname: Vec<u8> = name.bytes().filter(|&b| b != 0).take(200).collect();
    let cname = CString::new(cname).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: valid NUL-terminated name; flags are constants.
    let fd =
        unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a fresh fd we now own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let size_i = i64::try_from(size).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: plain syscalls on an fd we own.
    unsafe {
        if libc::ftruncate(raw, size_i) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::fcntl(
            raw,
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(fd)
}

/// Identity of a checked memfd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    pub dev: u64,
    pub ino: u64,
}

/// The (dev, inode) of an fd.
pub(crate) fn file_id(fd: RawFd) -> std::io::Result<FileId> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat writes into `st`.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded.
    let st = unsafe { st.assume_init() };
    Ok(FileId {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// Checks that `fd` is a memfd (sealable shmem file) sealed against shrink
/// and grow, at least `min_size` bytes long. Uses only fstat/fcntl: no mmap.
pub(crate) fn check_memfd(fd: RawFd, min_size: u64) -> Result<FileId, MapperError> {
    if fd < 0 {
        return Err(MapperError::BadBuffer("negative fd"));
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat writes into `st`; a closed or bogus fd gives EBADF.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(MapperError::BadBuffer("fd not open"));
    }
    // SAFETY: fstat succeeded and initialised `st`.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(MapperError::BadBuffer("fd is not a regular file"));
    }
    if (st.st_size as u64) < min_size || st.st_size < 0 {
        return Err(MapperError::BadBuffer("memfd smaller than the handle says"));
    }
    // SAFETY: F_GET_SEALS on any fd is harmless; non-memfds give EINVAL.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    if seals < 0 {
        return Err(MapperError::BadBuffer("fd is not a memfd"));
    }
    if seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
        != (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
    {
        return Err(MapperError::BadBuffer(
            "memfd not sealed against shrink/grow",
        ));
    }
    Ok(FileId {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// A `MAP_SHARED` read/write mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; access discipline is by raw pointer.
unsafe impl Send for Mapping {}
// SAFETY: as above; we never hand out references into it.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` read/write shared.
    pub fn map(fd: RawFd, len: u64) -> std::io::Result<Self> {
        let len =
            usize::try_from(len).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        if len == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a fresh mapping chosen by the kernel; fd validity is checked by mmap.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            ptr: p as *mut u8,
            len,
        })
    }

    /// Base address.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping; nothing references it after drop.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

fn vcopy_out(src: *const u8, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    for i in 0..len {
        // SAFETY: callers pass `src..src+len` inside the mapped header.
        v.push(unsafe { std::ptr::read_volatile(src.add(i)) });
    }
    v
}

fn vcopy_in(dst: *mut u8, data: &[u8]) {
    for (i, b) in data.iter().enumerate() {
        // SAFETY: callers pass a destination with room for `data` inside the mapped header.
        unsafe { std::ptr::write_volatile(dst.add(i), *b) };
    }
}

/// Mutable shared values, as read in one consistent snapshot of a field.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SharedField {
    Dataspace(i32),
    BlendMode(i32),
    Smpte2086(Option<[f32; 10]>),
    Cta861_3(Option<[f32; 2]>),
    Smpte2094_40(Option<Vec<u8>>),
    Smpte2094_10(Option<Vec<u8>>),
    UserData(Option<Vec<u8>>),
}

/// Which field to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldId {
    Dataspace,
    BlendMode,
    Smpte2086,
    Cta861_3,
    Smpte2094_40,
    Smpte2094_10,
    UserData,
}

const SPIN_LIMIT: u32 = 1 << 20;

/// A metadata mapping known to hold a whole shared header: the only way to get a
/// [`SharedMeta`] view, whose lifetime the borrow ties to the mapping.
pub(crate) struct MetaMapping(Mapping);

impl MetaMapping {
    /// `None` when the mapping is smaller than a shared header.
    pub fn new(mapping: Mapping) -> Option<Self> {
        (mapping.len() as u64 >= META_HEADER_SIZE).then_some(Self(mapping))
    }

    /// The shared header, borrowed from the mapping.
    pub fn view(&self) -> SharedMeta<'_> {
        SharedMeta {
            h: self.0.ptr() as *mut SharedHeader,
            _mapping: std::marker::PhantomData,
        }
    }
}

impl std::ops::Deref for MetaMapping {
    type Target = Mapping;
    fn deref(&self) -> &Mapping {
        &self.0
    }
}

/// A view of the shared header in a mapping; it cannot outlive the mapping.
#[derive(Clone, Copy)]
pub(crate) struct SharedMeta<'m> {
    h: *mut SharedHeader,
    _mapping: std::marker::PhantomData<&'m Mapping>,
}

impl<'m> SharedMeta<'m> {
    /// The word at `p` as an atomic, for as long as the mapping lives.
    ///
    /// # Safety
    /// `p` must be a 4-aligned field of the header this view points into, and every
    /// party must access that word only atomically.
    unsafe fn atomic(&self, p: *mut u32) -> &'m AtomicU32 {
        // SAFETY: the caller's contract; the mapping outlives 'm by construction.
        unsafe { AtomicU32::from_ptr(p) }
    }

    fn seq(&self) -> &'m AtomicU32 {
        // SAFETY: `seq` is a 4-aligned header field, accessed only atomically by every
        // process; the field address is taken without creating a reference.
        unsafe { self.atomic(addr_of_mut!((*self.h).seq)) }
    }

    fn lock(&self) -> &'m AtomicU32 {
        // SAFETY: as in `seq`, for `lock`.
        unsafe { self.atomic(addr_of_mut!((*self.h).lock)) }
    }

    /// Writes a fresh header (allocator side, before the handle leaves).
    pub fn init(&self, ints: &[i32; NUM_INTS], name: &[u8], pixels: FileId) {
        let name = &name[..name.len().min(NAME_MAX)];
        // SAFETY: the mapping is new and private to the allocator until the handle
        // is handed out; fields are written through raw pointers with volatile stores.
        unsafe {
            let h = self.h;
            std::ptr::write_volatile(addr_of_mut!((*h).magic), META_MAGIC);
            std::ptr::write_volatile(addr_of_mut!((*h).version), META_VERSION);
            std::ptr::write_volatile(
                addr_of_mut!((*h).header_size),
                std::mem::size_of::<SharedHeader>() as u32,
            );
            for (i, v) in ints.iter().enumerate() {
                std::ptr::write_volatile((addr_of_mut!((*h).handle_ints) as *mut i32).add(i), *v);
            }
            std::ptr::write_volatile(addr_of_mut!((*h).pixel_dev), pixels.dev);
            std::ptr::write_volatile(addr_of_mut!((*h).pixel_ino), pixels.ino);
            std::ptr::write_volatile(addr_of_mut!((*h).creator_pid), std::process::id());
            std::ptr::write_volatile(addr_of_mut!((*h).name_len), name.len() as u32);
            vcopy_in(addr_of_mut!((*h).name) as *mut u8, name);
            std::ptr::write_volatile(addr_of_mut!((*h).dataspace), 0);
            std::ptr::write_volatile(addr_of_mut!((*h).blend_mode), 0);
            std::ptr::write_volatile(addr_of_mut!((*h).smpte2086_present), 0);
            std::ptr::write_volatile(addr_of_mut!((*h).cta861_3_present), 0);
            std::ptr::write_volatile(addr_of_mut!((*h).smpte2094_40_len), ABSENT);
            std::ptr::write_volatile(addr_of_mut!((*h).smpte2094_10_len), ABSENT);
            std::ptr::write_volatile(addr_of_mut!((*h).user_data_len), ABSENT);
        }
        self.lock().store(0, Ordering::Relaxed);
        self.seq().store(0, Ordering::Release);
    }

    /// Checks magic/version, that the header's copy of the handle ints
    /// equals `ints` and that the pixel fd is the file the allocator created.
    /// Returns the creator pid and the name.
    pub fn verify(&self, ints: &[i32], pixels: FileId) -> Result<(u32, String), MapperError> {
        // SAFETY: reads of fields inside the live mapping, volatile.
        unsafe {
            let h = self.h;
            if std::ptr::read_volatile(addr_of!((*h).magic)) != META_MAGIC
                || std::ptr::read_volatile(addr_of!((*h).version)) != META_VERSION
            {
                return Err(MapperError::BadBuffer("metadata memfd has a bad magic"));
            }
            if ints.len() != NUM_INTS {
                return Err(MapperError::BadBuffer("int count"));
            }
            for (i, v) in ints.iter().enumerate() {
                if std::ptr::read_volatile((addr_of!((*h).handle_ints) as *const i32).add(i)) != *v
                {
                    return Err(MapperError::BadBuffer("handle does not match its metadata"));
                }
            }
            if std::ptr::read_volatile(addr_of!((*h).pixel_dev)) != pixels.dev
                || std::ptr::read_volatile(addr_of!((*h).pixel_ino)) != pixels.ino
            {
                return Err(MapperError::BadBuffer(
                    "pixel fd is not this buffer's memory",
                ));
            }
            let pid = std::ptr::read_volatile(addr_of!((*h).creator_pid));
            let len = std::ptr::read_volatile(addr_of!((*h).name_len)) as usize;
            if len > NAME_MAX {
                return Err(MapperError::BadBuffer("bad name length"));
            }
            let name = vcopy_out(addr_of!((*h).name) as *const u8, len);
            Ok((pid, String::from_utf8_lossy(&name).into_owned()))
        }
    }

    /// Reads one mutable field consistently (seqlock reader, bounded).
    pub fn read(&self, id: FieldId) -> Result<SharedField, MapperError> {
        let seq = self.seq();
        for i in 0..SPIN_LIMIT {
            let s1 = seq.load(Ordering::Acquire);
            if s1 & 1 == 0 {
                let v = self.read_raw(id);
                fence(Ordering::Acquire);
                if seq.load(Ordering::Relaxed) == s1 {
                    return Ok(v);
                }
            }
            if i % 64 == 63 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        Err(MapperError::NoResources("shared metadata busy"))
    }

    fn read_blob(len_p: *const u32, data_p: *const u8, cap: usize) -> Option<Vec<u8>> {
        // SAFETY: pointers to fields inside the live header.
        let len = unsafe { std::ptr::read_volatile(len_p) };
        if len == ABSENT {
            return None;
        }
        // A hostile peer may store a bogus length: clamp to capacity.
        Some(vcopy_out(data_p, (len as usize).min(cap)))
    }

    fn read_raw(&self, id: FieldId) -> SharedField {
        let h = self.h;
        // SAFETY: field addresses inside the live mapping; volatile reads only.
        unsafe {
            match id {
                FieldId::Dataspace => {
                    SharedField::Dataspace(std::ptr::read_volatile(addr_of!((*h).dataspace)))
                }
                FieldId::BlendMode => {
                    SharedField::BlendMode(std::ptr::read_volatile(addr_of!((*h).blend_mode)))
                }
                FieldId::Smpte2086 => {
                    if std::ptr::read_volatile(addr_of!((*h).smpte2086_present)) == 0 {
                        SharedField::Smpte2086(None)
                    } else {
                        let mut a = [0f32; 10];
                        for (i, f) in a.iter_mut().enumerate() {
                            *f = f32::from_bits(std::ptr::read_volatile(
                                (addr_of!((*h).smpte2086) as *const u32).add(i),
                            ));
                        }
                        SharedField::Smpte2086(Some(a))
                    }
                }
                FieldId::Cta861_3 => {
                    if std::ptr::read_volatile(addr_of!((*h).cta861_3_present)) == 0 {
                        SharedField::Cta861_3(None)
                    } else {
                        let p = addr_of!((*h).cta861_3) as *const u32;
                        SharedField::Cta861_3(Some([
                            f32::from_bits(std::ptr::read_volatile(p)),
                            f32::from_bits(std::ptr::read_volatile(p.add(1))),
                        ]))
                    }
                }
                FieldId::Smpte2094_40 => SharedField::Smpte2094_40(Self::read_blob(
                    addr_of!((*h).smpte2094_40_len),
                    addr_of!((*h).smpte2094_40) as *const u8,
                    BLOB_MAX,
                )),
                FieldId::Smpte2094_10 => SharedField::Smpte2094_10(Self::read_blob(
                    addr_of!((*h).smpte2094_10_len),
                    addr_of!((*h).smpte2094_10) as *const u8,
                    BLOB_MAX,
                )),
                FieldId::UserData => SharedField::UserData(Self::read_blob(
                    addr_of!((*h).user_data_len),
                    addr_of!((*h).user_data) as *const u8,
                    crate::metadata::vendor::USER_DATA_MAX,
                )),
            }
        }
    }

    /// Writes one mutable field (seqlock writer, bounded spin for the lock).
    /// Blob sizes must already be checked against capacity.
    pub fn write(&self, v: &SharedField) -> Result<(), MapperError> {
        let lock = self.lock();
        let mut got = false;
        for i in 0..SPIN_LIMIT {
            if lock
                .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                got = true;
                break;
            }
            if i % 64 == 63 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        if !got {
            return Err(MapperError::NoResources("shared metadata lock busy"));
        }
        let seq = self.seq();
        seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.write_raw(v);
        seq.fetch_add(1, Ordering::Release);
        lock.store(0, Ordering::Release);
        Ok(())
    }

    fn write_blob(len_p: *mut u32, data_p: *mut u8, cap: usize, v: &Option<Vec<u8>>) {
        // SAFETY: pointers to fields inside the live header; length clamped to capacity.
        unsafe {
            match v {
                None => std::ptr::write_volatile(len_p, ABSENT),
                Some(b) => {
                    let b = &b[..b.len().min(cap)];
                    vcopy_in(data_p, b);
                    std::ptr::write_volatile(len_p, b.len() as u32);
                }
            }
        }
    }

    fn write_raw(&self, v: &SharedField) {
        let h = self.h;
        // SAFETY: field addresses inside the live mapping; volatile writes only.
        unsafe {
            match v {
                SharedField::Dataspace(d) => {
                    std::ptr::write_volatile(addr_of_mut!((*h).dataspace), *d)
                }
                SharedField::BlendMode(d) => {
                    std::ptr::write_volatile(addr_of_mut!((*h).blend_mode), *d)
                }
                SharedField::Smpte2086(o) => {
                    if let Some(a) = o {
                        for (i, f) in a.iter().enumerate() {
                            std::ptr::write_volatile(
                                (addr_of_mut!((*h).smpte2086) as *mut u32).add(i),
                                f.to_bits(),
                            );
                        }
                    }
                    std::ptr::write_volatile(
                        addr_of_mut!((*h).smpte2086_present),
                        o.is_some() as u32,
                    );
                }
                SharedField::Cta861_3(o) => {
                    if let Some(a) = o {
                        let p = addr_of_mut!((*h).cta861_3) as *mut u32;
                        std::ptr::write_volatile(p, a[0].to_bits());
                        std::ptr::write_volatile(p.add(1), a[1].to_bits());
                    }
                    std::ptr::write_volatile(
                        addr_of_mut!((*h).cta861_3_present),
                        o.is_some() as u32,
                    );
                }
                SharedField::Smpte2094_40(o) => Self::write_blob(
                    addr_of_mut!((*h).smpte2094_40_len),
                    addr_of_mut!((*h).smpte2094_40) as *mut u8,
                    BLOB_MAX,
                    o,
                ),
                SharedField::Smpte2094_10(o) => Self::write_blob(
                    addr_of_mut!((*h).smpte2094_10_len),
                    addr_of_mut!((*h).smpte2094_10) as *mut u8,
                    BLOB_MAX,
                    o,
                ),
                SharedField::UserData(o) => Self::write_blob(
                    addr_of_mut!((*h).user_data_len),
                    addr_of_mut!((*h).user_data) as *mut u8,
                    crate::metadata::vendor::USER_DATA_MAX,
                    o,
                ),
            }
        }
    }
}
