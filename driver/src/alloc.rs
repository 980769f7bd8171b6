//! A first-fit range allocator, for device DRAM and the IOVA space (the driver owns both,
//! as a kernel driver does; the device only checks bounds).

use std::collections::BTreeMap;

#[derive(Debug)]
pub struct RangeAllocator {
    /// Free ranges: start -> length, coalesced.
    free: BTreeMap<u64, u64>,
    /// The whole range's length.
    capacity: u64,
}

impl RangeAllocator {
    pub fn new(start: u64, len: u64) -> Self {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(start, len);
        }
        Self {
            free,
            capacity: len,
        }
    }

    /// Finds `len` bytes aligned to `align` (a power of two).
    pub fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        if len == 0 || !align.is_power_of_two() {
            return None;
        }
        let (start, flen, at) = self.free.iter().find_map(|(&s, &l)| {
            let at = s.checked_next_multiple_of(align)?;
            (at.checked_add(len)? <= s + l).then_some((s, l, at))
        })?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - start);
        }
        let end = at + len;
        if end < start + flen {
            self.free.insert(end, start + flen - end);
        }
        Some(at)
    }

    /// Returns a range taken by `alloc`.
    pub fn free(&mut self, start: u64, len: u64) {
        let mut start = start;
        let mut len = len;
        if let Some((&ps, &pl)) = self.free.range(..start).next_back() {
            if ps + pl == start {
                self.free.remove(&ps);
                start = ps;
                len += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += nl;
        }
        self.free.insert(start, len);
    }

    pub fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }

    /// Bytes allocated now.
    pub fn in_use(&self) -> u64 {
        self.capacity - self.free_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Live allocations never overlap, stay in range, and freeing everything restores the space.
        #[test]
        fn allocations_are_disjoint(ops in proptest::collection::vec((1u64..5000, any::<bool>()), 1..100)) {
            let mut a = RangeAllocator::new(4096, 1 << 20);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (len, free) in ops {
                if free && !live.is_empty() {
                    let (s, l) = live.remove(len as usize % live.len());
                    a.free(s, l);
                } else if let Some(s) = a.alloc(len, 64) {
                    prop_assert_eq!(s % 64, 0);
                    prop_assert!(s >= 4096 && s + len <= 4096 + (1 << 20));
                    for &(t, m) in &live {
                        prop_assert!(s + len <= t || t + m <= s);
                    }
                    live.push((s, len));
                }
            }
            for (s, l) in live { a.free(s, l); }
            prop_assert_eq!(a.free_bytes(), 1 << 20);
        }
    }
}
