//! A fast message queue: a single-producer single-consumer ring of fixed-size elements in
//! shared memory (a sealed memfd), usable across processes, as the burst's request and
//! result channels.
//!
//! Layout of the memfd (all words little-endian u32, atomics where both sides touch):
//!
//! | offset | word | written by |
//! |---|---|---|
//! | 0 | magic `FMQ1` | creator |
//! | 4 | capacity (elements) | creator |
//! | 8 | element size (24) | creator |
//! | 64 | write counter | producer |
//! | 128 | read counter | consumer |
//! | 192 | data sequence (futex word) | producer: bumped after each write |
//! | 196 | consumer waiting | consumer: 1 while it sleeps |
//! | 256.. | `capacity` elements | producer |
//!
//! The counters run freely (wrapping u32); an element's slot is `counter % capacity`. The
//! other party is not trusted: capacity is read once when the queue is opened (and checked
//! against the file's size, which its seals fix), and a counter that claims more elements
//! than the ring holds is corruption, an error, never an out-of-bounds access. Elements
//! are copied in and out through raw pointers; no Rust reference into the ring exists.
//!
//! A blocking read spins for a bounded window (where a round trip costs well under a
//! microsecond) and then sleeps on the data sequence with a shared futex (a wake costs
//! tens of microseconds on a small VM): the window is the caller's to choose.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::memory::{cannot_shrink, MemError, SharedRegion};

/// The size of one element: an FMQ datum.
pub const ELEMENT: usize = 24;
/// One element's bytes.
pub type Element = [u8; ELEMENT];
/// The most elements a queue may hold (the HAL's queues hold 1 024).
pub const MAX_CAPACITY: u32 = 1 << 16;

const MAGIC: u32 = u32::from_le_bytes(*b"FMQ1");
const OFF_MAGIC: u64 = 0;
const OFF_CAPACITY: u64 = 4;
const OFF_ELEMENT: u64 = 8;
const OFF_WRITE: u64 = 64;
const OFF_READ: u64 = 128;
const OFF_DATA_SEQ: u64 = 192;
const OFF_WAITING: u64 = 196;
const OFF_RING: u64 = 256;

/// Why a queue cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FmqError {
    /// The memory could not be created or mapped.
    #[error("queue memory: {0}")]
    Memory(#[from] MemError),
    /// A capacity of 0 or over [`MAX_CAPACITY`].
    #[error("queue capacity {0} out of range")]
    Capacity(u32),
    /// The file is not a queue of ours, is too small, or can be shrunk under us.
    #[error("not a usable queue: {0}")]
    NotAQueue(&'static str),
    /// The other party left the counters in an impossible state.
    #[error("queue counters corrupt")]
    Corrupt,
    /// Not enough room for the whole packet (nothing was written).
    #[error("queue full: {needed} elements needed, {free} free")]
    Full {
        /// Elements the packet needs.
        needed: usize,
        /// Elements free.
        free: usize,
    },
    /// Nothing arrived in time.
    #[error("nothing to read")]
    TimedOut,
    /// The reader was told to stop.
    #[error("stopped")]
    Stopped,
}

/// One end's view of a queue.
#[derive(Debug)]
pub struct Fmq {
    region: SharedRegion,
    capacity: u32,
    /// The read counter as this end last loaded it (checked then): a producer's bound on
    /// the room it has, so a write that fits does not load the consumer's counter, whose
    /// cache line the consumer last wrote (a transfer between cores before every write).
    seen_read: AtomicU32,
}

impl Fmq {
    /// Creates a queue of `capacity` elements in a new sealed memfd.
    pub fn create(capacity: u32) -> Result<Fmq, FmqError> {
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(FmqError::Capacity(capacity));
        }
        let len = OFF_RING as usize + capacity as usize * ELEMENT;
        let region = SharedRegion::new("vnpu-fmq", len)?;
        region.store_u32(OFF_CAPACITY, capacity)?;
        region.store_u32(OFF_ELEMENT, ELEMENT as u32)?;
        region.store_u32(OFF_MAGIC, MAGIC)?;
        Ok(Fmq {
            region,
            capacity,
            seen_read: AtomicU32::new(0),
        })
    }

    /// Opens a queue another party created (its memfd, e.g. received over a socket):
    /// checks the magic, the element size, the capacity against the file's size, and that
    /// the file cannot shrink under the mapping.
    pub fn open(fd: OwnedFd) -> Result<Fmq, FmqError> {
        use std::os::fd::AsFd;
        if !cannot_shrink(fd.as_fd()) {
            return Err(FmqError::NotAQueue(
                "the file is not sealed against shrinking",
            ));
        }
        let size = nix::sys::stat::fstat(&fd)
            .map_err(|_| FmqError::NotAQueue("cannot stat the file"))?
            .st_size;
        let size = usize::try_from(size).map_err(|_| FmqError::NotAQueue("bad size"))?;
        if size < OFF_RING as usize + ELEMENT {
            return Err(FmqError::NotAQueue("too small"));
        }
        let region = SharedRegion::map(fd, 0, size)?;
        if region.load_u32(OFF_MAGIC)? != MAGIC {
            return Err(FmqError::NotAQueue("bad magic"));
        }
        if region.load_u32(OFF_ELEMENT)? != ELEMENT as u32 {
            return Err(FmqError::NotAQueue("bad element size"));
        }
        let capacity = region.load_u32(OFF_CAPACITY)?;
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(FmqError::Capacity(capacity));
        }
        if OFF_RING as usize + capacity as usize * ELEMENT > size {
            return Err(FmqError::NotAQueue("capacity larger than the file"));
        }
        Ok(Fmq {
            region,
            capacity,
            seen_read: AtomicU32::new(0),
        })
    }

    /// The queue's memfd (to pass to the other end).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.region.fd()
    }

    /// A duplicate of the queue's memfd, for the other end.
    pub fn share(&self) -> std::io::Result<OwnedFd> {
        self.region.fd().try_clone_to_owned()
    }

    /// How many elements the ring holds.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    fn word(&self, offset: u64) -> &AtomicU32 {
        // The offsets are constants inside the header, which every queue has (checked
        // at creation and opening).
        self.region
            .atomic_u32(offset)
            .expect("queue header words are in bounds")
    }

    /// Elements written and not yet read, checked against the capacity.
    fn used(&self) -> Result<(u32, u32, u32), FmqError> {
        let w = self.word(OFF_WRITE).load(Ordering::Acquire);
        let r = self.word(OFF_READ).load(Ordering::Acquire);
        let used = w.wrapping_sub(r);
        if used > self.capacity {
            return Err(FmqError::Corrupt);
        }
        Ok((w, r, used))
    }

    /// Elements the consumer could read now.
    pub fn available_to_read(&self) -> Result<usize, FmqError> {
        Ok(self.used()?.2 as usize)
    }

    /// Elements the producer could write now.
    pub fn available_to_write(&self) -> Result<usize, FmqError> {
        Ok((self.capacity - self.used()?.2) as usize)
    }

    fn slot_offset(&self, counter: u32) -> u64 {
        OFF_RING + u64::from(counter % self.capacity) * ELEMENT as u64
    }

    /// Producer: writes the whole packet or nothing, then wakes a sleeping consumer.
    pub fn write(&self, packet: &[Element]) -> Result<(), FmqError> {
        // The read counter only grows: room under the last one seen is there still.
        let mut w = self.word(OFF_WRITE).load(Ordering::Relaxed);
        let seen = w.wrapping_sub(self.seen_read.load(Ordering::Relaxed));
        if seen > self.capacity || ((self.capacity - seen) as usize) < packet.len() {
            let (w_now, r, used) = self.used()?;
            w = w_now;
            self.seen_read.store(r, Ordering::Relaxed);
            let free = (self.capacity - used) as usize;
            if packet.len() > free {
                return Err(FmqError::Full {
                    needed: packet.len(),
                    free,
                });
            }
        }
        // At most two copies: up to the ring's end, and on from its start.
        let start = (w % self.capacity) as usize;
        let first = packet.len().min(self.capacity as usize - start);
        self.region
            .write(self.slot_offset(w), packet[..first].as_flattened())?;
        if first < packet.len() {
            self.region
                .write(OFF_RING, packet[first..].as_flattened())?;
        }
        self.word(OFF_WRITE)
            .store(w.wrapping_add(packet.len() as u32), Ordering::Release);
        // SeqCst pairs with the consumer's: either it sees the new counter before it
        // sleeps, or this sees it waiting and wakes it.
        self.word(OFF_DATA_SEQ).fetch_add(1, Ordering::SeqCst);
        if self.word(OFF_WAITING).load(Ordering::SeqCst) != 0 {
            futex_wake(self.word(OFF_DATA_SEQ));
        }
        Ok(())
    }

    /// Consumer: takes every element available now (at least one), in order.
    pub fn try_read_all(&self) -> Result<Option<Vec<Element>>, FmqError> {
        let mut out = Vec::new();
        Ok(self.try_read_into(&mut out)?.then_some(out))
    }

    /// [`Fmq::try_read_all`] into `out` (replacing what it held; its allocation is
    /// reused): whether anything was there.
    pub fn try_read_into(&self, out: &mut Vec<Element>) -> Result<bool, FmqError> {
        let (_, r, used) = self.used()?;
        if used == 0 {
            return Ok(false);
        }
        out.clear();
        out.resize(used as usize, [0u8; ELEMENT]);
        // At most two copies, as in `write`.
        let start = (r % self.capacity) as usize;
        let first = out.len().min(self.capacity as usize - start);
        let (head, tail) = out.split_at_mut(first);
        self.region
            .read(self.slot_offset(r), head.as_flattened_mut())?;
        if !tail.is_empty() {
            self.region.read(OFF_RING, tail.as_flattened_mut())?;
        }
        self.word(OFF_READ)
            .store(r.wrapping_add(used), Ordering::Release);
        Ok(true)
    }

    /// Consumer: waits for a packet and takes every element available. Spins for
    /// `spin`, then sleeps on the futex until data comes, `stop` says so (checked at least
    /// every 100 ms) or `timeout` passes.
    pub fn read_blocking(
        &self,
        spin: Duration,
        timeout: Option<Duration>,
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Element>, FmqError> {
        let mut out = Vec::new();
        self.read_blocking_into(spin, timeout, stop, &mut out)?;
        Ok(out)
    }

    /// [`Fmq::read_blocking`] into `out` (replacing what it held; its allocation is
    /// reused).
    pub fn read_blocking_into(
        &self,
        spin: Duration,
        timeout: Option<Duration>,
        stop: &dyn Fn() -> bool,
        out: &mut Vec<Element>,
    ) -> Result<(), FmqError> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if self.try_read_into(out)? {
                return Ok(());
            }
            // The clock is read every 64 turns: a turn is then a few loads, and a packet
            // is seen that much sooner after it lands.
            spins = spins.wrapping_add(1);
            if spin.is_zero() || (spins.is_multiple_of(64) && start.elapsed() >= spin) {
                break;
            }
            std::hint::spin_loop();
        }
        loop {
            if stop() {
                return Err(FmqError::Stopped);
            }
            let left = match timeout {
                Some(t) => match t.checked_sub(start.elapsed()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return Err(FmqError::TimedOut),
                },
                None => Duration::MAX,
            };
            let seq = self.word(OFF_DATA_SEQ).load(Ordering::SeqCst);
            self.word(OFF_WAITING).store(1, Ordering::SeqCst);
            let ready = self.try_read_into(out);
            if !matches!(ready, Ok(false)) {
                self.word(OFF_WAITING).store(0, Ordering::SeqCst);
                return ready.map(drop);
            }
            futex_wait(
                self.word(OFF_DATA_SEQ),
                seq,
                left.min(Duration::from_millis(100)),
            );
            self.word(OFF_WAITING).store(0, Ordering::SeqCst);
        }
    }

    /// Wakes a consumer sleeping in [`Fmq::read_blocking`] (so it sees its stop flag).
    pub fn wake(&self) {
        self.word(OFF_DATA_SEQ).fetch_add(1, Ordering::SeqCst);
        futex_wake(self.word(OFF_DATA_SEQ));
    }
}

/// Sleeps while `word` holds `expected`, at most `timeout` (a shared futex: the waker
/// may be another process).
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // Spurious returns (EAGAIN, EINTR, ETIMEDOUT) are fine: the caller re-checks.
    // SAFETY: `word` is an aligned u32 in a live shared mapping, only read; `ts` is valid.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every sleeper on `word`.
fn futex_wake(word: &AtomicU32) {
    // FUTEX_WAKE does not touch memory.
    // SAFETY: `word` is a valid, aligned u32 in a live shared mapping.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn element(v: u32) -> Element {
        let mut e = [0u8; ELEMENT];
        e[..4].copy_from_slice(&v.to_le_bytes());
        e
    }

    fn value(e: &Element) -> u32 {
        u32::from_le_bytes(e[..4].try_into().unwrap())
    }

    #[test]
    fn whole_packets_or_nothing() {
        let q = Fmq::create(8).unwrap();
        q.write(&[element(1), element(2), element(3)]).unwrap();
        assert_eq!(q.available_to_write().unwrap(), 5);
        assert!(matches!(
            q.write(&[element(0); 6]),
            Err(FmqError::Full { needed: 6, free: 5 })
        ));
        let got = q.try_read_all().unwrap().unwrap();
        assert_eq!(got.iter().map(value).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(q.try_read_all().unwrap().is_none());
    }

    #[test]
    fn other_end_opens_the_same_ring_and_corruption_is_caught() {
        let q = Fmq::create(4).unwrap();
        let other = Fmq::open(q.share().unwrap()).unwrap();
        assert_eq!(other.capacity(), 4);
        q.write(&[element(7)]).unwrap();
        assert_eq!(value(&other.try_read_all().unwrap().unwrap()[0]), 7);
        // A counter claiming more than the ring holds.
        q.word(OFF_WRITE).store(1000, Ordering::Release);
        assert!(matches!(other.try_read_all(), Err(FmqError::Corrupt)));
        assert!(matches!(q.write(&[element(1)]), Err(FmqError::Corrupt)));
    }

    #[test]
    fn files_that_are_not_queues_are_refused() {
        // Unsealed.
        let fd =
            nix::sys::memfd::memfd_create("x", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap();
        nix::unistd::ftruncate(&fd, 4096).unwrap();
        assert!(matches!(Fmq::open(fd), Err(FmqError::NotAQueue(_))));
        // Sealed, but no magic.
        let region = SharedRegion::new("x", 4096).unwrap();
        let fd = region.fd().try_clone_to_owned().unwrap();
        assert!(matches!(Fmq::open(fd), Err(FmqError::NotAQueue(_))));
        // A capacity larger than the file.
        let q = Fmq::create(4).unwrap();
        q.region.store_u32(OFF_CAPACITY, 1000).unwrap();
        assert!(Fmq::open(q.share().unwrap()).is_err());
    }

    #[test]
    fn a_sleeping_reader_is_woken_across_threads() {
        let q = std::sync::Arc::new(Fmq::create(16).unwrap());
        let reader = {
            let q = Fmq::open(q.share().unwrap()).unwrap();
            std::thread::spawn(move || {
                q.read_blocking(Duration::ZERO, Some(Duration::from_secs(10)), &|| false)
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        q.write(&[element(42)]).unwrap();
        let got = reader.join().unwrap().unwrap();
        assert_eq!(value(&got[0]), 42);
        let stop = || true;
        assert!(matches!(
            q.read_blocking(Duration::ZERO, None, &stop),
            Err(FmqError::Stopped)
        ));
        assert!(matches!(
            q.read_blocking(Duration::ZERO, Some(Duration::from_millis(10)), &|| false),
            Err(FmqError::TimedOut)
        ));
    }

    proptest! {
        /// A hostile other end that writes any word of the queue's file at any time never
        /// makes a read panic, hang or return more than the ring holds.
        #[test]
        fn hostile_words_never_break_the_reader(
            capacity in 1u32..12,
            ops in proptest::collection::vec(
                (0u8..3, 0u64..(OFF_RING + 12 * ELEMENT as u64) / 4, any::<u32>(), 1usize..6),
                1..60,
            ),
        ) {
            let q = Fmq::create(capacity).unwrap();
            let reader = Fmq::open(q.share().unwrap()).unwrap();
            let len = OFF_RING + u64::from(capacity) * ELEMENT as u64;
            for (op, word, value, n) in ops {
                match op {
                    0 => {
                        // Header words the creator alone writes are read once, at opening.
                        let at = (word * 4) % len;
                        if at >= OFF_WRITE {
                            q.word(at).store(value, Ordering::Release);
                        }
                    }
                    1 => {
                        let _ = q.write(&vec![element(value); n]);
                    }
                    _ => {
                        let mut out = Vec::new();
                        let read = reader.read_blocking_into(
                            Duration::ZERO,
                            Some(Duration::from_micros(200)),
                            &|| false,
                            &mut out,
                        );
                        if read.is_ok() {
                            prop_assert!(!out.is_empty() && out.len() <= capacity as usize);
                        }
                    }
                }
            }
        }

        /// Any interleaving of producer writes and consumer reads preserves order and
        /// loses nothing: what is read is exactly what was written, in order, and a write
        /// that does not fit is refused whole.
        #[test]
        fn interleavings_preserve_order(
            capacity in 1u32..12,
            ops in proptest::collection::vec((any::<bool>(), 1usize..6), 1..80),
        ) {
            let q = Fmq::create(capacity).unwrap();
            let mut next = 0u32;
            let mut expected = std::collections::VecDeque::new();
            for (write, n) in ops {
                if write {
                    let packet: Vec<Element> = (0..n as u32).map(|i| element(next + i)).collect();
                    match q.write(&packet) {
                        Ok(()) => {
                            expected.extend(next..next + n as u32);
                            next += n as u32;
                        }
                        Err(FmqError::Full { .. }) => {
                            prop_assert!(expected.len() + n > capacity as usize);
                        }
                        Err(e) => return Err(TestCaseError::fail(e.to_string())),
                    }
                } else if let Some(got) = q.try_read_all().unwrap() {
                    for e in got {
                        prop_assert_eq!(Some(value(&e)), expected.pop_front());
                    }
                    prop_assert!(expected.is_empty());
                }
            }
        }
    }
}
