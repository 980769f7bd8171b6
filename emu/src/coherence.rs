//! What keeps a cache of DRAM-derived data coherent with DRAM without trusting the driver
//! (the weight cache, [`crate::weights`], and the program cache,
//! [`crate::engine::programs`]): a counter every write into device memory bumps, and the
//! address span the cache's entries cover.
//!
//! A reader takes a [`Ticket`] before copying bytes out of DRAM and may keep what it made
//! of them only if no write happened since ([`Coherence::still_valid`]). A write that
//! lands outside the span cannot touch an entry, so it costs an atomic add and two loads
//! and takes no lock ([`Coherence::write_may_touch`]).
//!
//! Ordering: a keeper widens the span *before* it checks the counter, both under the
//! cache's lock; a writer bumps the counter *before* it reads the span (all SeqCst).
//! Either the keeper sees the bump (and keeps nothing), or the writer sees the widened
//! span and takes the cache's lock, which the keeper holds until its entry is in, and
//! drops the entry.

use std::sync::atomic::{AtomicU64, Ordering};

/// The write counter and entry span of one cache.
#[derive(Debug)]
pub struct Coherence {
    writes: AtomicU64,
    low: AtomicU64,
    high: AtomicU64,
}

/// Taken before bytes are copied out of DRAM (see the module documentation).
#[derive(Clone, Copy, Debug)]
pub struct Ticket(u64);

impl Default for Coherence {
    fn default() -> Self {
        Coherence {
            writes: AtomicU64::new(0),
            low: AtomicU64::new(u64::MAX),
            high: AtomicU64::new(0),
        }
    }
}

impl Coherence {
    /// Taken before a copy out of DRAM whose result may be kept.
    pub fn ticket(&self) -> Ticket {
        Ticket(self.writes.load(Ordering::SeqCst))
    }

    /// Under the cache's lock, before keeping an entry for `[addr, end)` copied after
    /// `ticket`: widens the span to it, then says whether no write happened since.
    pub fn still_valid(&self, addr: u64, end: u64, ticket: Ticket) -> bool {
        self.low.fetch_min(addr, Ordering::SeqCst);
        self.high.fetch_max(end, Ordering::SeqCst);
        self.writes.load(Ordering::SeqCst) == ticket.0
    }

    /// A write of `[addr, addr + len)`: counted, and whether it may overlap an entry
    /// (then the cache drops the entries it overlaps, under its lock).
    pub fn write_may_touch(&self, addr: u64, len: u64) -> bool {
        self.writes.fetch_add(1, Ordering::SeqCst);
        let end = addr.saturating_add(len);
        end > self.low.load(Ordering::SeqCst) && addr < self.high.load(Ordering::SeqCst)
    }

    /// Under the cache's lock, when it drops everything: a write, and an empty span.
    pub fn cleared(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.low.store(u64::MAX, Ordering::SeqCst);
        self.high.store(0, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_outside_the_span_touch_nothing_and_any_write_voids_a_ticket() {
        let c = Coherence::default();
        assert!(!c.write_may_touch(0, 100), "nothing kept yet");
        let t = c.ticket();
        assert!(c.still_valid(0x1000, 0x1100, t));
        assert!(!c.write_may_touch(0x800, 0x800));
        assert!(!c.write_may_touch(0x1100, 8));
        assert!(c.write_may_touch(0x10ff, 1));
        assert!(
            !c.still_valid(0x1000, 0x1100, t),
            "writes happened since the ticket"
        );
        c.cleared();
        assert!(!c.write_may_touch(0x1000, 0x100));
    }
}
