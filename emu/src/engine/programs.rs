//! The compute engine's decoded-program cache, as an NPU keeps its command stream's
//! decoded descriptors: a program run again is not copied out of DRAM, decoded and
//! checked again.
//!
//! An entry is keyed by the program's device address and length. It is coherent with
//! DRAM the way the weight cache is ([`crate::weights`]): every write into device memory
//! drops the entries it overlaps, when the write is resolved and again when it is done,
//! and a decoding whose copy started before a write ended is not kept. So a kept decoding
//! is always the decoding of the bytes DRAM holds at its address.
//!
//! Writes far from every kept program (inputs, outputs, the rings) take no lock
//! ([`crate::coherence`]).

use std::sync::{Arc, Mutex};

use crate::coherence::{Coherence, Ticket};

/// Programs kept at most.
const ENTRIES: usize = 16;
/// Program bytes kept at most (a larger program is decoded every run).
const BUDGET_BYTES: u64 = 8 << 20;

/// Decoded programs (`T`: what the engine works out from a program's bytes).
#[derive(Debug)]
pub struct ProgramCache<T> {
    /// Every write counted, and the span the entries cover.
    coherence: Coherence,
    inner: Mutex<Inner<T>>,
}

#[derive(Debug)]
struct Inner<T> {
    entries: Vec<Entry<T>>,
    tick: u64,
}

#[derive(Debug)]
struct Entry<T> {
    addr: u64,
    len: u64,
    decoded: Arc<T>,
    used: u64,
}

/// Taken before copying a program out of DRAM: its decoding is kept only if no write
/// into device memory happened since.
pub type ProgramTicket = Ticket;

impl<T> Default for ProgramCache<T> {
    fn default() -> Self {
        ProgramCache {
            coherence: Coherence::default(),
            inner: Mutex::new(Inner {
                entries: Vec::new(),
                tick: 0,
            }),
        }
    }
}

impl<T> ProgramCache<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<T>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The decoding kept for the `len`-byte program at `addr`.
    pub fn get(&self, addr: u64, len: u64) -> Option<Arc<T>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let e = inner
            .entries
            .iter_mut()
            .find(|e| e.addr == addr && e.len == len)?;
        e.used = tick;
        Some(Arc::clone(&e.decoded))
    }

    /// Taken before the program's bytes are copied out of DRAM.
    pub fn ticket(&self) -> ProgramTicket {
        self.coherence.ticket()
    }

    /// Keeps the decoding of the `len` bytes at `addr`, copied after `ticket` was taken,
    /// unless device memory was written since (the copy may be torn or stale). Evicts the
    /// least recently used entries beyond the budgets.
    pub fn offer(&self, addr: u64, len: u64, decoded: Arc<T>, ticket: ProgramTicket) {
        let Some(end) = addr.checked_add(len).filter(|_| len <= BUDGET_BYTES) else {
            return;
        };
        let mut inner = self.lock();
        if !self.coherence.still_valid(addr, end, ticket) {
            return;
        }
        inner.entries.retain(|e| e.addr != addr);
        let mut total: u64 = inner.entries.iter().map(|e| e.len).sum();
        while !inner.entries.is_empty()
            && (inner.entries.len() >= ENTRIES || total + len > BUDGET_BYTES)
        {
            let lru = (0..inner.entries.len())
                .min_by_key(|&k| inner.entries[k].used)
                .unwrap_or(0);
            total -= inner.entries.swap_remove(lru).len;
        }
        inner.tick += 1;
        let used = inner.tick;
        inner.entries.push(Entry {
            addr,
            len,
            decoded,
            used,
        });
    }

    /// Drops the entries `[addr, addr + len)` overlaps (a write into device memory, once
    /// when it is resolved and once when it is done).
    pub fn invalidate(&self, addr: u64, len: u64) {
        if !self.coherence.write_may_touch(addr, len) {
            return;
        }
        let end = addr.saturating_add(len);
        self.lock()
            .entries
            .retain(|e| e.addr.saturating_add(e.len) <= addr || end <= e.addr);
    }

    /// Forgets everything (device memory was cleared).
    pub fn clear(&self) {
        let mut inner = self.lock();
        self.coherence.cleared();
        inner.entries.clear();
    }

    /// Programs kept now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kept_until_a_write_overlaps_it() {
        let cache = ProgramCache::default();
        let t = cache.ticket();
        cache.offer(0x1000, 0x100, Arc::new(1), t);
        assert_eq!(cache.get(0x1000, 0x100).as_deref(), Some(&1));
        assert!(
            cache.get(0x1000, 0x80).is_none(),
            "another length is another program"
        );
        cache.invalidate(0x800, 0x800); // ends where the program starts
        cache.invalidate(0x1100, 8); // starts where it ends
        assert_eq!(cache.get(0x1000, 0x100).as_deref(), Some(&1));
        cache.invalidate(0x10ff, 1);
        assert!(cache.get(0x1000, 0x100).is_none());
    }

    #[test]
    fn a_decoding_from_before_a_write_is_not_kept() {
        let cache = ProgramCache::default();
        let t = cache.ticket();
        cache.invalidate(0x9000, 4); // anywhere: the copy may have raced it
        cache.offer(0x1000, 0x100, Arc::new(1), t);
        assert!(cache.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Step {
        /// Write `len` bytes at `addr` with `value` (resolve, write, done).
        Write(u64, u64, u8),
        /// Run the program at `addr` of `len` bytes: use the kept decoding or decode.
        Run(u64, u64),
        Clear,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u64..64, 1u64..16, any::<u8>()).prop_map(|(a, l, v)| Step::Write(a, l, v)),
            (0u64..64, 1u64..16).prop_map(|(a, l)| Step::Run(a, l)),
            Just(Step::Clear),
        ]
    }

    proptest! {
        /// Against a model of device memory: whatever is written and run, a kept decoding
        /// is the decoding of what memory holds now, and the cache stays within budget.
        #[test]
        fn kept_decodings_are_of_what_memory_holds(steps in prop::collection::vec(step(), 1..200)) {
            let cache = ProgramCache::default();
            let mut dram = [0u8; 80];
            let decode = |b: &[u8]| b.iter().map(|&x| x as u64).sum::<u64>() + b.len() as u64;
            for s in steps {
                match s {
                    Step::Write(a, l, v) => {
                        cache.invalidate(a, l);
                        dram[a as usize..(a + l) as usize].fill(v);
                        cache.invalidate(a, l);
                    }
                    Step::Run(a, l) => {
                        let bytes = &dram[a as usize..(a + l) as usize];
                        match cache.get(a, l) {
                            Some(d) => prop_assert_eq!(*d, decode(bytes)),
                            None => {
                                let t = cache.ticket();
                                cache.offer(a, l, Arc::new(decode(bytes)), t);
                            }
                        }
                    }
                    Step::Clear => cache.clear(),
                }
                prop_assert!(cache.len() <= ENTRIES);
            }
        }
    }
}
