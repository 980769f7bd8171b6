//! Liveness-based memory planning: tensors whose lifetimes overlap get disjoint ranges
//! of the activation arena; the others share. Greedy by size (largest first, lowest
//! offset that fits), the approach TFLite's arena planner also takes.

/// A tensor to place: `size` bytes, live from step `first` to step `last` inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub size: u64,
    pub first: usize,
    pub last: usize,
}

impl Interval {
    fn overlaps_in_time(&self, o: &Interval) -> bool {
        self.first <= o.last && o.first <= self.last
    }
}

pub const ALIGN: u64 = 64;

/// Returns each tensor's offset and the arena size.
pub fn plan(tensors: &[Interval]) -> (Vec<u64>, u64) {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| tensors[b].size.cmp(&tensors[a].size).then(a.cmp(&b)));
    let mut offsets = vec![0u64; tensors.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(tensors.len());
    let mut total = 0u64;
    for i in order {
        let t = &tensors[i];
        let size = t.size.next_multiple_of(ALIGN);
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&j| tensors[j].overlaps_in_time(t) && tensors[j].size > 0)
            .map(|&j| {
                (
                    offsets[j],
                    offsets[j] + tensors[j].size.next_multiple_of(ALIGN),
                )
            })
            .collect();
        busy.sort_unstable();
        let mut at = 0u64;
        for (s, e) in busy {
            if at + size <= s {
                break;
            }
            at = at.max(e);
        }
        offsets[i] = at;
        total = total.max(at + size);
        placed.push(i);
    }
    (offsets, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reuses_dead_memory() {
        let t = [
            Interval {
                size: 100,
                first: 0,
                last: 1,
            },
            Interval {
                size: 100,
                first: 1,
                last: 2,
            },
            Interval {
                size: 100,
                first: 2,
                last: 3,
            },
        ];
        let (off, total) = plan(&t);
        assert_eq!(total, 128 * 2);
        assert_eq!(off[0], off[2]);
    }

    proptest! {
        /// No two tensors that are live at the same time overlap in memory, and all fit.
        #[test]
        fn live_tensors_never_overlap(raw in proptest::collection::vec((0u64..5000, 0usize..20, 0usize..10), 1..60)) {
            let t: Vec<Interval> = raw.iter().map(|&(size, first, len)| Interval { size, first, last: first + len }).collect();
            let (off, total) = plan(&t);
            for i in 0..t.len() {
                prop_assert_eq!(off[i] % ALIGN, 0);
                prop_assert!(off[i] + t[i].size <= total);
                for j in 0..i {
                    if t[i].overlaps_in_time(&t[j]) && t[i].size > 0 && t[j].size > 0 {
                        let disjoint = off[i] + t[i].size <= off[j] || off[j] + t[j].size <= off[i];
                        prop_assert!(disjoint, "{:?}@{} and {:?}@{}", t[i], off[i], t[j], off[j]);
                    }
                }
            }
        }
    }
}
