//! The compute engine's decoded-program cache, as an NPU keeps its command stream's
//! decoded descriptors: a program run again is not decoded and checked again.
//!
//! An entry is keyed by the program's device address and holds the bytes it was decoded
//! from. A run still copies the program out of DRAM (so nothing can change it between
//! check and use) and uses the entry only if those bytes are the very same; decoding is a
//! function of the bytes alone, so a hit is exactly what decoding them again would give.

use std::sync::{Arc, Mutex};

/// Programs kept at most.
const ENTRIES: usize = 16;
/// Program bytes kept at most (larger programs are decoded every run).
const BUDGET_BYTES: usize = 8 << 20;

/// Decoded programs (`T`: what the engine works out from a program's bytes).
#[derive(Debug)]
pub struct ProgramCache<T> {
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
    bytes: Box<[u8]>,
    decoded: Arc<T>,
    used: u64,
}

impl<T> Default for ProgramCache<T> {
    fn default() -> Self {
        ProgramCache {
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

    /// The decoding of `bytes`, read from device address `addr`: kept from an earlier run
    /// of the same bytes there, or `decode`d now (and kept if it succeeds).
    pub fn get_or_decode<E>(
        &self,
        addr: u64,
        bytes: &[u8],
        decode: impl FnOnce(&[u8]) -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        {
            let mut inner = self.lock();
            inner.tick += 1;
            let tick = inner.tick;
            if let Some(e) = inner
                .entries
                .iter_mut()
                .find(|e| e.addr == addr && *e.bytes == *bytes)
            {
                e.used = tick;
                return Ok(Arc::clone(&e.decoded));
            }
        }
        // Decoded outside the lock: the other engine thread may want a kept one meanwhile.
        let decoded = Arc::new(decode(bytes)?);
        if bytes.len() <= BUDGET_BYTES {
            self.keep(addr, bytes, Arc::clone(&decoded));
        }
        Ok(decoded)
    }

    /// Keeps a decoding, replacing what was kept for `addr` and evicting the least
    /// recently used entries beyond the entry and byte budgets.
    fn keep(&self, addr: u64, bytes: &[u8], decoded: Arc<T>) {
        let mut inner = self.lock();
        inner.entries.retain(|e| e.addr != addr);
        let mut total: usize = inner.entries.iter().map(|e| e.bytes.len()).sum();
        while !inner.entries.is_empty()
            && (inner.entries.len() >= ENTRIES || total + bytes.len() > BUDGET_BYTES)
        {
            let lru = (0..inner.entries.len())
                .min_by_key(|&k| inner.entries[k].used)
                .unwrap_or(0);
            total -= inner.entries.swap_remove(lru).bytes.len();
        }
        inner.tick += 1;
        let used = inner.tick;
        inner.entries.push(Entry {
            addr,
            bytes: bytes.into(),
            decoded,
            used,
        });
    }

    /// Forgets everything (device memory was cleared).
    pub fn clear(&self) {
        self.lock().entries.clear();
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

    fn decode_sum(b: &[u8]) -> Result<u64, ()> {
        if b.first() == Some(&0xff) {
            return Err(());
        }
        Ok(b.iter().map(|&x| x as u64).sum())
    }

    #[test]
    fn a_hit_needs_the_same_address_and_bytes() {
        let cache = ProgramCache::default();
        let a = cache.get_or_decode(0x100, &[1, 2, 3], decode_sum).unwrap();
        let b = cache.get_or_decode(0x100, &[1, 2, 3], decode_sum).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        // Same bytes elsewhere, or other bytes here: decoded afresh.
        let c = cache.get_or_decode(0x200, &[1, 2, 3], decode_sum).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        let d = cache.get_or_decode(0x100, &[1, 2, 4], decode_sum).unwrap();
        assert_eq!(*d, 7);
        // The rewritten program replaced the old one at that address.
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_failed_decode_is_not_kept() {
        let cache = ProgramCache::default();
        assert!(cache.get_or_decode(0x100, &[0xff, 1], decode_sum).is_err());
        assert!(cache.is_empty());
    }

    proptest! {
        /// Whatever is run, a kept decoding is what decoding the bytes gives, and the
        /// cache stays within its entry budget.
        #[test]
        fn kept_decodings_match_the_bytes(
            runs in prop::collection::vec((0u64..24, prop::collection::vec(0u8..4, 1..4)), 1..200)
        ) {
            let cache = ProgramCache::default();
            for (addr, bytes) in runs {
                let got = cache.get_or_decode(addr, &bytes, decode_sum).unwrap();
                prop_assert_eq!(*got, decode_sum(&bytes).unwrap());
                prop_assert!(cache.len() <= ENTRIES);
            }
        }
    }
}
