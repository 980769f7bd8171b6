//! The driver's file I/O (the compilation cache, staged request pools): io_uring, batched and probed at start, with a pread/pwrite/ftruncate
//! fallback where io_uring or one of its opcodes is unavailable (seccomp'd containers,
//! old kernels). Every access uses an explicit offset: the files may arrive with any
//! file position.
//!
//! With io_uring a file is read in chunks submitted together and completed by the
//! kernel's workers (`IOSQE_ASYNC`), so the caller can hash chunk *k* while chunk *k + 1*
//! is still being copied; the fallback reads chunk by chunk on the calling thread.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Mutex;

use io_uring::{opcode, squeue, types, IoUring, Probe};

/// Bytes per read or write request.
pub const CHUNK: usize = 1 << 20;
/// Files of more chunks than this are read by io_uring's workers (`IOSQE_ASYNC`).
const ASYNC_FROM_CHUNKS: usize = 4;
/// Submission queue entries of the ring.
const RING_ENTRIES: u32 = 64;

/// Which I/O path to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoChoice {
    /// io_uring when the probe finds it, else the fallback.
    #[default]
    Auto,
    /// Always pread/pwrite/ftruncate.
    Fallback,
}

/// The path actually in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoPath {
    /// io_uring (read, write and, where the kernel has it, ftruncate).
    IoUring,
    /// pread, pwrite and ftruncate system calls.
    Fallback,
}

struct Ring {
    ring: Mutex<IoUring>,
    /// IORING_OP_FTRUNCATE (Linux 6.9) is available.
    ftruncate: bool,
}

/// The cache's file I/O.
pub struct CacheIo {
    ring: Option<Ring>,
    why: String,
}

impl std::fmt::Debug for CacheIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

fn probe() -> Result<Ring, String> {
    let ring = IoUring::new(RING_ENTRIES).map_err(|e| format!("io_uring_setup: {e}"))?;
    let mut p = Probe::new();
    ring.submitter()
        .register_probe(&mut p)
        .map_err(|e| format!("io_uring probe: {e}"))?;
    for (name, code) in [("READ", opcode::Read::CODE), ("WRITE", opcode::Write::CODE)] {
        if !p.is_supported(code) {
            return Err(format!("io_uring lacks IORING_OP_{name}"));
        }
    }
    Ok(Ring {
        ftruncate: p.is_supported(opcode::Ftruncate::CODE),
        ring: Mutex::new(ring),
    })
}

impl CacheIo {
    /// Probes io_uring (unless the fallback is forced).
    pub fn new(choice: IoChoice) -> CacheIo {
        let (ring, why) = match choice {
            IoChoice::Fallback => (None, "fallback forced by configuration".to_string()),
            IoChoice::Auto => match probe() {
                Ok(r) => {
                    let why = if r.ftruncate {
                        "io_uring (read, write, ftruncate)".to_string()
                    } else {
                        "io_uring (read, write; ftruncate by system call)".to_string()
                    };
                    (Some(r), why)
                }
                Err(e) => {
                    tracing::info!("cache I/O falls back to pread/pwrite: {e}");
                    (None, format!("fallback: {e}"))
                }
            },
        };
        CacheIo { ring, why }
    }

    /// The path in use.
    pub fn path(&self) -> IoPath {
        if self.ring.is_some() {
            IoPath::IoUring
        } else {
            IoPath::Fallback
        }
    }

    /// One line saying which path is in use and why.
    pub fn describe(&self) -> String {
        self.why.clone()
    }

    /// Truncates every file to 0 bytes, then writes each its bytes from offset 0, in the
    /// order given (so the last file is complete only after all the others).
    pub fn rewrite(&self, files: &[(BorrowedFd<'_>, &[u8])]) -> io::Result<()> {
        match &self.ring {
            Some(r) => r.rewrite(files),
            None => {
                for (fd, _) in files {
                    ftruncate(*fd, 0)?;
                }
                for (fd, bytes) in files {
                    pwrite_all(*fd, bytes, 0)?;
                }
                Ok(())
            }
        }
    }

    /// Reads `len` bytes from offset 0 of `fd` to `dst`, calling `chunk(offset, len)` for
    /// each chunk as soon as it and every chunk before it have arrived, in order.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes for the whole call, and nothing else
    /// may access those bytes until `chunk` is called for them.
    pub unsafe fn read_chunked(
        &self,
        fd: BorrowedFd<'_>,
        dst: *mut u8,
        len: usize,
        chunk: &mut dyn FnMut(usize, usize),
    ) -> io::Result<()> {
        match &self.ring {
            // SAFETY: forwarded from the caller's contract.
            Some(r) => unsafe { r.read_chunked(fd, dst, len, chunk) },
            None => {
                let mut off = 0;
                while off < len {
                    let n = CHUNK.min(len - off);
                    // SAFETY: `dst + off .. + n` is inside the caller's buffer.
                    unsafe { pread_exact(fd, dst.add(off), n, off as u64)? };
                    chunk(off, n);
                    off += n;
                }
                Ok(())
            }
        }
    }

    /// Positioned reads of many ranges in one batch: each `(file offset, dst, len)` is
    /// filled exactly; a file that ends first is an error (`UnexpectedEof`), never a signal.
    ///
    /// # Safety
    /// Every `dst` must be valid for writes of its `len` bytes for the whole call, and
    /// the ranges must not overlap.
    pub unsafe fn read_ranges(
        &self,
        fd: BorrowedFd<'_>,
        ranges: &[(u64, *mut u8, usize)],
    ) -> io::Result<()> {
        let raw = fd.as_raw_fd();
        let read = |off: u64, p: *mut u8, n: usize| {
            opcode::Read::new(types::Fd(raw), p, n as u32)
                .offset(off)
                .build()
        };
        let finish = |off: u64, p: *mut u8, n: usize| {
            // SAFETY: `p .. p + n` lies inside one of the caller's ranges.
            unsafe { pread_exact(fd, p, n, off) }
        };
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.ranges(ranges, read, finish) }
    }

    /// Positioned writes of many ranges in one batch: each `(file offset, src, len)`.
    ///
    /// # Safety
    /// Every `src` must be valid for reads of its `len` bytes for the whole call, and
    /// nothing may write them meanwhile.
    pub unsafe fn write_ranges(
        &self,
        fd: BorrowedFd<'_>,
        ranges: &[(u64, *const u8, usize)],
    ) -> io::Result<()> {
        let raw = fd.as_raw_fd();
        let ranges: Vec<(u64, *mut u8, usize)> = ranges
            .iter()
            .map(|&(o, p, n)| (o, p.cast_mut(), n))
            .collect();
        let write = |off: u64, p: *mut u8, n: usize| {
            opcode::Write::new(types::Fd(raw), p.cast_const(), n as u32)
                .offset(off)
                .build()
        };
        let finish = |off: u64, p: *mut u8, n: usize| {
            // SAFETY: `p .. p + n` lies inside one of the caller's ranges, readable and not
            // written during the call.
            let bytes = unsafe { std::slice::from_raw_parts(p.cast_const(), n) };
            pwrite_all(fd, bytes, off)
        };
        // SAFETY: forwarded from the caller's contract (the buffers are only read).
        unsafe { self.ranges(&ranges, write, finish) }
    }

    /// Runs `ranges` (cut into [`CHUNK`]s) as one io_uring batch of `entry`s, then
    /// finishes whatever came back short, or everything on the fallback, with `finish`
    /// (which reports an end of file as an error).
    ///
    /// # Safety
    /// As [`CacheIo::read_ranges`] / [`CacheIo::write_ranges`] for the operation made.
    unsafe fn ranges(
        &self,
        ranges: &[(u64, *mut u8, usize)],
        entry: impl Fn(u64, *mut u8, usize) -> squeue::Entry,
        finish: impl Fn(u64, *mut u8, usize) -> io::Result<()>,
    ) -> io::Result<()> {
        let pieces = split(ranges);
        let done = match &self.ring {
            Some(r) => {
                let entries: Vec<squeue::Entry> =
                    pieces.iter().map(|&(off, p, n)| entry(off, p, n)).collect();
                // SAFETY: the buffers are the caller's, valid for the whole call.
                unsafe { r.run(&entries)? }
            }
            None => vec![0; pieces.len()],
        };
        for (&(off, p, n), &got) in pieces.iter().zip(&done) {
            if got < 0 {
                return Err(io::Error::from_raw_os_error(-got));
            }
            let got = got as usize;
            finish(off + got as u64, p.wrapping_add(got), n - got)?;
        }
        Ok(())
    }

    /// Reads exactly `len` bytes from offset 0 into a new buffer.
    pub fn read_vec(&self, fd: BorrowedFd<'_>, len: usize) -> io::Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        // SAFETY: `v` is our own buffer of `len` bytes, untouched until the call returns.
        unsafe { self.read_chunked(fd, v.as_mut_ptr(), len, &mut |_, _| {})? };
        Ok(v)
    }
}

/// The size of the file behind `fd`.
pub fn file_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let st = nix::sys::stat::fstat(fd).map_err(io::Error::from)?;
    u64::try_from(st.st_size).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// Ranges cut into requests of at most [`CHUNK`] bytes.
fn split(ranges: &[(u64, *mut u8, usize)]) -> Vec<(u64, *mut u8, usize)> {
    let mut out = Vec::new();
    for &(off, p, len) in ranges {
        let mut done = 0;
        while done < len {
            let n = CHUNK.min(len - done);
            // `p + done` stays inside the caller's range (done < len).
            out.push((off + done as u64, p.wrapping_add(done), n));
            done += n;
        }
    }
    out
}

fn ftruncate(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    let len = i64::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    nix::unistd::ftruncate(fd, len).map_err(io::Error::from)
}

fn pwrite_all(fd: BorrowedFd<'_>, mut bytes: &[u8], mut off: u64) -> io::Result<()> {
    while !bytes.is_empty() {
        let n = nix::sys::uio::pwrite(fd, bytes, off as i64).map_err(io::Error::from)?;
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        bytes = &bytes[n..];
        off += n as u64;
    }
    Ok(())
}

/// `pread` until `len` bytes have arrived; end of file first is an error.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes.
unsafe fn pread_exact(fd: BorrowedFd<'_>, dst: *mut u8, len: usize, off: u64) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        // SAFETY: `dst + done .. dst + len` is valid for writes (caller's contract).
        let n = unsafe {
            libc::pread(
                fd.as_raw_fd(),
                dst.add(done).cast(),
                len - done,
                (off + done as u64) as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        done += n as usize;
    }
    Ok(())
}

impl Ring {
    /// Pushes `entries`, submits and waits for all of their completions; returns each
    /// entry's result by position.
    ///
    /// # Safety
    /// Every buffer the entries name must stay valid until this returns.
    unsafe fn run(&self, entries: &[squeue::Entry]) -> io::Result<Vec<i32>> {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let mut results = vec![0i32; entries.len()];
        for window in (0..entries.len())
            .collect::<Vec<_>>()
            .chunks(RING_ENTRIES as usize)
        {
            {
                let mut sq = ring.submission();
                for &i in window {
                    let e = entries[i].clone().user_data(i as u64);
                    // SAFETY: the buffers outlive the call (caller's contract) and we
                    // wait for every completion below before returning.
                    unsafe { sq.push(&e) }
                        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
                }
            }
            let mut reaped = 0;
            while reaped < window.len() {
                match ring.submit_and_wait(window.len() - reaped) {
                    Err(e) if !transient(&e) => return Err(e),
                    _ => {}
                }
                for c in ring.completion() {
                    if let Some(r) = results.get_mut(c.user_data() as usize) {
                        *r = c.result();
                    }
                    reaped += 1;
                }
            }
        }
        Ok(results)
    }

    fn rewrite(&self, files: &[(BorrowedFd<'_>, &[u8])]) -> io::Result<()> {
        let mut entries = Vec::new();
        let mut want = Vec::new();
        for (fd, _) in files {
            if self.ftruncate {
                entries.push(opcode::Ftruncate::new(types::Fd(fd.as_raw_fd()), 0).build());
                want.push(0);
            } else {
                ftruncate(*fd, 0)?;
            }
        }
        for (fd, bytes) in files {
            for (k, c) in bytes.chunks(CHUNK).enumerate() {
                let off = (k * CHUNK) as u64;
                let w = opcode::Write::new(types::Fd(fd.as_raw_fd()), c.as_ptr(), c.len() as u32)
                    .offset(off)
                    .build();
                entries.push(w);
                want.push(c.len() as i32);
            }
        }
        // The truncations complete before any write starts (IO_DRAIN on the first write:
        // it starts after everything before it and everything after it waits for it); the
        // writes may then run in any order (the MAC and the digest, not the order, make a
        // torn write detectable).
        let n_trunc = if self.ftruncate { files.len() } else { 0 };
        if n_trunc > 0 {
            if let Some(e) = entries.get_mut(n_trunc) {
                *e = e.clone().flags(squeue::Flags::IO_DRAIN);
            }
        }
        // SAFETY: every buffer is a slice of `files`, borrowed for this whole call.
        let got = unsafe { self.run(&entries)? };
        for (k, (&g, &w)) in got.iter().zip(&want).enumerate() {
            if g < 0 {
                return Err(io::Error::from_raw_os_error(-g));
            }
            if g != w {
                // A short write: finish it with pwrite (rare on regular files).
                let Some((fd, bytes, off)) = locate_write(files, k.wrapping_sub(n_trunc)) else {
                    return Err(io::Error::from(io::ErrorKind::WriteZero));
                };
                let rest = bytes.get(g as usize..).unwrap_or_default();
                pwrite_all(fd, rest, off + g as u64)?;
            }
        }
        Ok(())
    }

    /// # Safety
    /// As [`CacheIo::read_chunked`].
    unsafe fn read_chunked(
        &self,
        fd: BorrowedFd<'_>,
        dst: *mut u8,
        len: usize,
        chunk: &mut dyn FnMut(usize, usize),
    ) -> io::Result<()> {
        let count = len.div_ceil(CHUNK);
        // Small files are read inline by the submitting thread (no worker hand-off); large
        // ones by the kernel's workers, so reading overlaps the caller's hashing.
        let flags = if count > ASYNC_FROM_CHUNKS {
            squeue::Flags::ASYNC
        } else {
            squeue::Flags::empty()
        };
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let mut arrived = vec![false; count];
        let mut next_submit = 0usize;
        let mut in_flight = 0usize;
        let mut next_done = 0usize;
        let mut short: Option<(usize, usize)> = None;
        let mut failure: Option<io::Error> = None;
        while next_done < count {
            // Keep the queue full (stop submitting after a failure, but reap what is in
            // flight: the kernel writes into `dst` until each request completes).
            {
                let mut sq = ring.submission();
                while failure.is_none() && next_submit < count && in_flight < RING_ENTRIES as usize
                {
                    let off = next_submit * CHUNK;
                    let n = CHUNK.min(len - off);
                    // SAFETY: `dst + off .. + n` lies inside the caller's buffer.
                    let buf = unsafe { dst.add(off) };
                    let e = opcode::Read::new(types::Fd(fd.as_raw_fd()), buf, n as u32)
                        .offset(off as u64)
                        .build()
                        .flags(flags)
                        .user_data(next_submit as u64);
                    // SAFETY: the buffer stays valid until we reap its completion.
                    if unsafe { sq.push(&e) }.is_err() {
                        break;
                    }
                    next_submit += 1;
                    in_flight += 1;
                }
            }
            if in_flight == 0 {
                break;
            }
            match ring.submit_and_wait(1) {
                Err(e) if !transient(&e) => {
                    failure.get_or_insert(e);
                }
                _ => {}
            }
            for c in ring.completion() {
                in_flight -= 1;
                let k = c.user_data() as usize;
                let want = CHUNK.min(len - k * CHUNK);
                match c.result() {
                    r if r < 0 => {
                        failure.get_or_insert(io::Error::from_raw_os_error(-r));
                    }
                    r if (r as usize) < want => short = short.or(Some((k, r as usize))),
                    _ => {}
                }
                if let Some(a) = arrived.get_mut(k) {
                    *a = true;
                }
            }
            if failure.is_some() {
                continue;
            }
            // A short read (the file changed under us, or a signal): finish it plainly.
            if let Some((k, got)) = short.take() {
                let off = k * CHUNK;
                let want = CHUNK.min(len - off);
                let (rest, at) = (want - got, (off + got) as u64);
                // SAFETY: the rest of chunk `k`, inside the caller's buffer; its read is done.
                let r = unsafe { pread_exact(fd, dst.add(off + got), rest, at) };
                if let Err(e) = r {
                    failure = Some(e);
                    continue;
                }
            }
            while next_done < count && arrived[next_done] {
                let off = next_done * CHUNK;
                chunk(off, CHUNK.min(len - off));
                next_done += 1;
            }
        }
        match failure {
            Some(e) => Err(e),
            None if next_done == count => Ok(()),
            None => Err(io::Error::other("io_uring read did not complete")),
        }
    }
}

/// An io_uring_enter error worth retrying.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
    )
}

/// The file, bytes and file offset of write number `k` of a rewrite.
fn locate_write<'a>(
    files: &[(BorrowedFd<'a>, &'a [u8])],
    mut k: usize,
) -> Option<(BorrowedFd<'a>, &'a [u8], u64)> {
    for (fd, bytes) in files {
        let n = bytes.len().div_ceil(CHUNK);
        if k < n {
            let off = k * CHUNK;
            return Some((*fd, &bytes[off..(off + CHUNK).min(bytes.len())], off as u64));
        }
        k -= n;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom, Write};
    use std::os::fd::AsFd;

    fn tmp() -> std::fs::File {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("vnpu-io-{}-{n}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&p)
            .unwrap();
        let _ = std::fs::remove_file(&p);
        f
    }

    fn both() -> [CacheIo; 2] {
        [
            CacheIo::new(IoChoice::Auto),
            CacheIo::new(IoChoice::Fallback),
        ]
    }

    #[test]
    fn rewrite_truncates_and_ignores_the_file_position() {
        for io in both() {
            let (mut a, b) = (tmp(), tmp());
            a.write_all(&[9u8; 5000]).unwrap();
            a.seek(SeekFrom::Start(77)).unwrap();
            let big: Vec<u8> = (0..3 * CHUNK + 5).map(|i| i as u8).collect();
            io.rewrite(&[(a.as_fd(), b"hello"), (b.as_fd(), &big)])
                .unwrap();
            assert_eq!(file_size(a.as_fd()).unwrap(), 5, "{io:?}");
            assert_eq!(io.read_vec(a.as_fd(), 5).unwrap(), b"hello");
            let mut order = Vec::new();
            let got = {
                let mut v = vec![0u8; big.len()];
                // SAFETY: our own buffer.
                unsafe {
                    io.read_chunked(b.as_fd(), v.as_mut_ptr(), v.len(), &mut |o, n| {
                        order.push((o, n))
                    })
                }
                .unwrap();
                v
            };
            assert_eq!(got, big, "{io:?}");
            assert_eq!(order.len(), 4);
            assert!(order.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0));
            assert!(
                io.read_vec(a.as_fd(), 6).is_err(),
                "end of file is an error"
            );
        }
    }
}
