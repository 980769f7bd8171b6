//! The compute engine's weight cache: DRAM tensors that no op of the program running
//! writes (weights and biases, mostly) stay in the engine's local memory across runs, so a
//! model run again does not stream its constants from DRAM each time, as an NPU keeps its
//! weights resident in SRAM.
//!
//! It is coherent with DRAM: every write into device memory (a DMA, an op's output, a
//! timestamp, a reset) drops the entries it overlaps, once when the write is resolved and
//! once when it is done, and an entry loaded while a write to anything was under way is
//! not kept. So a cached tensor is always the bytes DRAM holds; the cache only saves the
//! copy.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::coherence::{Coherence, Ticket};
use crate::tensor::Staged;

/// Bytes the cache keeps by default (an NPU's weight SRAM is a few MiB to tens of MiB).
pub const DEFAULT_WEIGHT_CACHE_BYTES: usize = 16 << 20;

/// Tensors kept by (device address, byte length), least recently used out first.
#[derive(Debug)]
pub struct WeightCache {
    budget: usize,
    /// Every write counted, and the span the entries cover: a load that started before a
    /// write may have read bytes it was changing, and is not kept.
    coherence: Coherence,
    inner: Mutex<Inner>,
    /// Counts the entries dropped, for whatever reason ([`Self::generation`]).
    dropped: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: BTreeMap<(u64, u64), Entry>,
    bytes: usize,
    /// The longest entry (bounds the overlap search).
    longest: u64,
    tick: u64,
    /// Tensors a write dropped: DRAM there changes (a model input the host writes every
    /// run, most likely), so they are not kept again.
    volatile: HashSet<(u64, u64)>,
}

/// How many volatile tensors are remembered (then forgotten all at once).
const VOLATILE_KEYS: usize = 1024;

/// What the cache says of a tensor about to be loaded.
#[derive(Debug)]
pub enum Probe {
    /// Kept: its bytes.
    Hit(Arc<Staged>),
    /// Not kept; worth offering once loaded.
    Miss,
    /// Not kept, and not worth keeping: a write dropped it before, or the cache keeps
    /// nothing.
    Volatile,
}

#[derive(Debug)]
struct Entry {
    data: Arc<Staged>,
    used: u64,
}

/// What a load must remember to offer its bytes to the cache afterwards.
pub type LoadTicket = Ticket;

impl WeightCache {
    /// A cache keeping at most `budget` bytes (0: keeps nothing).
    pub fn new(budget: usize) -> WeightCache {
        WeightCache {
            budget,
            coherence: Coherence::default(),
            inner: Mutex::new(Inner::default()),
            dropped: AtomicU64::new(0),
        }
    }

    /// Changes whenever an entry is dropped (a write over it, the budget, a reset). While
    /// it has not changed, every tensor a probe hit since is still kept, so still the
    /// bytes DRAM holds: a caller may keep using it without probing again (a job plan's
    /// weights, [`crate::engine`]).
    pub fn generation(&self) -> u64 {
        self.dropped.load(Ordering::Acquire)
    }

    /// Counts a dropped entry (under the lock, before the caller's next probe can see
    /// the entry gone).
    fn drop_counted(&self) {
        self.dropped.fetch_add(1, Ordering::AcqRel);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tensor of `len` bytes at `addr`, if kept.
    pub fn get(&self, addr: u64, len: u64) -> Option<Arc<Staged>> {
        match self.probe(addr, len) {
            Probe::Hit(s) => Some(s),
            Probe::Miss | Probe::Volatile => None,
        }
    }

    /// The tensor of `len` bytes at `addr` if kept, else whether to offer it once loaded.
    pub fn probe(&self, addr: u64, len: u64) -> Probe {
        if self.budget == 0 {
            return Probe::Volatile;
        }
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        if let Some(e) = inner.entries.get_mut(&(addr, len)) {
            e.used = tick;
            return Probe::Hit(e.data.clone());
        }
        match inner.volatile.contains(&(addr, len)) {
            true => Probe::Volatile,
            false => Probe::Miss,
        }
    }

    /// Taken before reading a tensor from DRAM that may be offered with [`Self::offer`].
    pub fn ticket(&self) -> LoadTicket {
        self.coherence.ticket()
    }

    /// Keeps `data`, read from `addr` after `ticket` was taken, unless a write was
    /// resolved since (its bytes may be torn) or it does not fit the budget.
    pub fn offer(&self, addr: u64, data: Arc<Staged>, ticket: LoadTicket) {
        let len = data.bytes().len();
        if len == 0 || len > self.budget / 4 {
            return;
        }
        let mut inner = self.lock();
        if inner.volatile.contains(&(addr, len as u64))
            || !self
                .coherence
                .still_valid(addr, addr.saturating_add(len as u64), ticket)
        {
            return;
        }
        inner.tick += 1;
        let used = inner.tick;
        if let Some(old) = inner
            .entries
            .insert((addr, len as u64), Entry { data, used })
        {
            inner.bytes -= old.data.bytes().len();
            self.drop_counted();
        }
        inner.bytes += len;
        inner.longest = inner.longest.max(len as u64);
        while inner.bytes > self.budget {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| *k)
            else {
                break;
            };
            if let Some(e) = inner.entries.remove(&oldest) {
                inner.bytes -= e.data.bytes().len();
                self.drop_counted();
            }
        }
    }

    /// Drops every entry overlapping `[addr, addr + len)`: DRAM there is being written.
    pub fn invalidate(&self, addr: u64, len: u64) {
        if !self.coherence.write_may_touch(addr, len) {
            return;
        }
        let mut inner = self.lock();
        let end = addr.saturating_add(len);
        let lowest = addr.saturating_sub(inner.longest);
        // One overlapping entry at a time: most writes (inputs, outputs) overlap none.
        while let Some(k) = inner
            .entries
            .range((lowest, 0)..(end, 0))
            .map(|(k, _)| *k)
            .find(|&(a, l)| a.saturating_add(l) > addr && a < end)
        {
            if let Some(e) = inner.entries.remove(&k) {
                inner.bytes -= e.data.bytes().len();
                self.drop_counted();
            }
            if inner.volatile.len() >= VOLATILE_KEYS {
                inner.volatile.clear();
            }
            inner.volatile.insert(k);
        }
    }

    /// Drops everything (device memory was cleared).
    pub fn clear(&self) {
        let mut inner = self.lock();
        self.coherence.cleared();
        inner.entries.clear();
        self.drop_counted();
        inner.volatile.clear();
        inner.bytes = 0;
        inner.longest = 0;
    }

    /// Bytes kept now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn staged(len: usize, fill: u8) -> Arc<Staged> {
        let mut s = Staged::zeroed(len);
        s.bytes_mut().fill(fill);
        Arc::new(s)
    }

    #[test]
    fn keeps_and_gives_back_exact_matches() {
        let c = WeightCache::new(1 << 20);
        let t = c.ticket();
        c.offer(0x1000, staged(64, 7), t);
        assert_eq!(c.get(0x1000, 64).unwrap().bytes(), &[7u8; 64][..]);
        assert!(
            c.get(0x1000, 32).is_none(),
            "another length is another tensor"
        );
        assert!(c.get(0x1004, 64).is_none());
    }

    /// The generation changes with every entry dropped (a write over it, the budget, a
    /// reset), and with nothing else: a holder of a hit may trust it while it stands.
    #[test]
    fn the_generation_changes_when_an_entry_goes() {
        let c = WeightCache::new(1024);
        let g = c.generation();
        c.offer(0x1000, staged(256, 1), c.ticket());
        c.offer(0x2000, staged(256, 2), c.ticket());
        assert!(c.get(0x1000, 256).is_some());
        c.invalidate(0x8000, 16); // over nothing kept
        assert_eq!(c.generation(), g, "kept, hit, and a write elsewhere");
        c.invalidate(0x1010, 4);
        assert_ne!(c.generation(), g, "a write over an entry");
        assert!(c.get(0x1000, 256).is_none());
        let g = c.generation();
        for k in 3..8u64 {
            c.offer(k * 0x1000, staged(256, k as u8), c.ticket());
        }
        assert_ne!(c.generation(), g, "the budget dropped the oldest");
        let g = c.generation();
        c.clear();
        assert_ne!(c.generation(), g);
    }

    #[test]
    fn a_load_that_raced_a_write_is_not_kept() {
        let c = WeightCache::new(1 << 20);
        let t = c.ticket();
        c.invalidate(0x9000, 8); // anywhere: the load may have seen it half done
        c.offer(0x1000, staged(64, 1), t);
        assert!(c.get(0x1000, 64).is_none());
    }

    #[test]
    fn stays_within_budget_dropping_the_least_recently_used() {
        let c = WeightCache::new(1024);
        for k in 0..4u64 {
            c.offer(k * 0x1000, staged(256, k as u8), c.ticket());
        }
        assert!(c.get(0, 256).is_some()); // 0 is now the most recent
        c.offer(0x10000, staged(256, 9), c.ticket());
        assert!(c.bytes() <= 1024);
        assert!(c.get(0x1000, 256).is_none(), "the least recently used went");
        assert!(c.get(0, 256).is_some());
        // A tensor over a quarter of the budget is never kept.
        c.offer(0x20000, staged(300, 1), c.ticket());
        assert!(c.get(0x20000, 300).is_none());
    }

    /// A tensor a write dropped (an input the host rewrites every run) is not kept again;
    /// others still are; a reset forgets which were volatile.
    #[test]
    fn a_tensor_written_over_is_not_kept_again() {
        let c = WeightCache::new(1 << 20);
        let staged = |n: usize| Arc::new(Staged::zeroed(n));
        c.offer(0x1000, staged(64), c.ticket());
        assert!(matches!(c.probe(0x1000, 64), Probe::Hit(_)));
        c.invalidate(0x1010, 4);
        assert!(matches!(c.probe(0x1000, 64), Probe::Volatile));
        c.offer(0x1000, staged(64), c.ticket());
        assert!(c.get(0x1000, 64).is_none());
        assert!(matches!(c.probe(0x2000, 64), Probe::Miss));
        c.offer(0x2000, staged(64), c.ticket());
        assert!(c.get(0x2000, 64).is_some());
        c.clear();
        assert!(matches!(c.probe(0x1000, 64), Probe::Miss));
    }

    proptest! {
        /// Against a model of DRAM: whatever mix of writes and cached loads happens, what
        /// the cache gives back is what DRAM holds.
        #[test]
        fn never_gives_stale_bytes(
            ops in proptest::collection::vec((0u8..3, 0u64..16, 1u64..6, any::<u8>()), 1..200)
        ) {
            let c = WeightCache::new(64);
            let mut dram = [0u8; 24];
            for (kind, at, len, v) in ops {
                let at = at.min(23);
                let len = len.min(24 - at);
                let range = at as usize..(at + len) as usize;
                match kind {
                    0 => {
                        c.invalidate(at, len);
                        dram[range].fill(v);
                        c.invalidate(at, len);
                    }
                    1 => {
                        let t = c.ticket();
                        let mut s = Staged::zeroed(len as usize);
                        s.bytes_mut().copy_from_slice(&dram[range]);
                        c.offer(at, Arc::new(s), t);
                    }
                    _ => {
                        if let Some(s) = c.get(at, len) {
                            prop_assert_eq!(s.bytes(), &dram[range]);
                        }
                    }
                }
            }
            prop_assert!(c.bytes() <= 64);
        }
    }
}
