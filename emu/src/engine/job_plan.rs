//! A JOB's plan, kept with its decoded program: the program and the arena side of the
//! job's copies resolved once, so a job run again (a burst's, over the same pinned
//! ranges) goes straight from its copies to its kernels.
//!
//! The engine's local memory holds *slots*, one per DRAM range a copy in or an op's
//! output writes. The plan replays the job's writes once, in order, and works out for
//! every read (an op's input, a copy out) whether a slot holds exactly those bytes then
//! (it was written and nothing overlapping it was written since): such a read takes the
//! slot, any other reads DRAM. DRAM is written through as the general path writes it
//! (copies in and every output but a transient one), so the two paths leave the same
//! bytes everywhere. What a run does per job is then fixed: the copies in (host memory
//! through kept translations, [`KeptTranslation`]), the kernels on the slots' buffers (kept
//! with the plan: a job allocates nothing), the copies out, and one coherence
//! invalidation of the span the job writes (instead of two per write).
//!
//! A program with control flow or dynamic tensors, an empty or over-long copy, an op
//! whose output is one of its inputs, or more than [`FAST_BYTES`] of slots has no plan:
//! the general path ([`super::compute::run_job`]) runs it. So does a job while tracing.

use std::collections::HashMap;
use std::sync::Arc;

use smallvec::SmallVec;

use super::compute::{Copies, Decoded, Plan, Run};
use super::{dma, Outcome};
use crate::iommu::{KeptTranslation, Perm};
use crate::program::Program;
use crate::ring::{CopyDescriptor, Status};
use crate::tensor::{Staged, View, ViewMut};
use crate::weights::Probe;
use crate::Bus;

/// Bytes of slots and DRAM reads a plan may keep (a larger job takes the general path,
/// where the per-job overhead does not matter). A weight the cache may keep counts for
/// nothing: the plan holds the cache's own copy. The shipped int8 models' plans keep
/// 0.5-2 MB and run faster through them; the float face models' (4-14 MB) do not.
pub const FAST_BYTES: u64 = 4 << 20;

/// What a decoded program keeps of the last job that ran it.
#[derive(Debug)]
pub struct Kept {
    key: Key,
    /// `None`: the job takes the general path.
    fast: Option<(Fast, State)>,
}

/// What a plan depends on: the arena and the arena side of every copy.
#[derive(Debug, PartialEq, Eq)]
struct Key {
    arena: (u64, u64),
    inputs: usize,
    /// Copies in: (dst, len); copies out: (src, len).
    ranges: SmallVec<[(u64, u64); 4]>,
}

impl Key {
    fn new(arena: (u64, u64), copies: Copies<'_>) -> Key {
        let ins = copies.inputs.iter().map(|c| (c.dst, c.len));
        let outs = copies.outputs.iter().map(|c| (c.src, c.len));
        Key {
            arena,
            inputs: copies.inputs.len(),
            ranges: ins.chain(outs).collect(),
        }
    }

    fn matches(&self, arena: (u64, u64), copies: Copies<'_>) -> bool {
        let n = copies.inputs.len();
        if self.arena != arena || self.inputs != n || self.ranges.len() != n + copies.outputs.len()
        {
            return false;
        }
        let (ins, outs) = self.ranges.split_at(n);
        let same_ins = ins
            .iter()
            .zip(copies.inputs)
            .all(|(r, c)| *r == (c.dst, c.len));
        same_ins
            && outs
                .iter()
                .zip(copies.outputs)
                .all(|(r, c)| *r == (c.src, c.len))
    }
}

/// A resolved job.
#[derive(Debug)]
struct Fast {
    /// Each slot's DRAM range (address, bytes).
    slots: Vec<(u64, u64)>,
    /// The slot copy in `k` fills.
    fills: Vec<usize>,
    steps: Vec<Step>,
    /// The slot copy out `k` leaves from (`None`: from DRAM, as a DMA).
    leaves: Vec<Option<usize>>,
    /// The hull of the DRAM the job writes: invalidated in the caches once per job.
    hull: (u64, u64),
    /// Bytes of each DRAM read's buffer (0 for a tensor the weight cache may keep: made
    /// only if the cache will not keep it after all).
    reads: Vec<u64>,
    /// The job's modelled time: its copies and its ops (all static).
    ns: u64,
}

/// One op of the program.
#[derive(Debug)]
struct Step {
    op: usize,
    ins: SmallVec<[Src; 4]>,
    outs: SmallVec<[Out; 2]>,
}

/// Where an op's input comes from.
#[derive(Clone, Copy, Debug)]
enum Src {
    Slot(usize),
    /// From DRAM: tensor `tensor`, through the weight cache when `cache`, else into DRAM
    /// read buffer `read`.
    Dram {
        tensor: usize,
        cache: bool,
        read: usize,
    },
}

/// Where an op's output goes.
#[derive(Clone, Copy, Debug)]
struct Out {
    tensor: usize,
    slot: usize,
    /// Written through to DRAM (every tensor but a transient one).
    store: bool,
}

/// A plan's buffers and translations, kept across its jobs.
#[derive(Debug)]
struct State {
    /// Each slot's bytes.
    slots: Vec<Staged>,
    /// The DRAM reads' buffers.
    reads: Vec<Staged>,
    /// By DRAM read: a weight's bytes (`None`: the read's buffer holds them).
    held: Vec<Held>,
    /// The weight cache's generation when the [`Held::Kept`] ones were probed.
    held_generation: u64,
    /// Each copy's host-side translation (copies in, then out).
    host: Vec<KeptTranslation>,
}

/// Runs a job through its program's kept plan (made now if the job's layout changed);
/// `None` when the job has no plan (the caller takes the general path) or another job
/// holds the plan.
pub fn run(
    bus: &Bus,
    decoded: &Decoded,
    run: Run,
    arena: (u64, u64),
    copies: Copies<'_>,
) -> Option<Outcome> {
    let mut kept = decoded.job.try_lock().ok()?;
    if !kept.as_ref().is_some_and(|k| k.key.matches(arena, copies)) {
        let fast = Fast::new(bus, &decoded.program, &decoded.plan, arena, copies).map(|f| {
            let state = State::new(&f, copies.inputs.len() + copies.outputs.len());
            (f, state)
        });
        *kept = Some(Kept {
            key: Key::new(arena, copies),
            fast,
        });
    }
    let (fast, state) = kept.as_mut()?.fast.as_mut()?;
    debug_assert!(run.loop_timeout_ns == 0 && run.report == 0);
    Some(fast.run(bus, decoded, state, copies))
}

/// Whether `[a, a + al)` and `[b, b + bl)` overlap.
fn overlap((a, al): (u64, u64), (b, bl): (u64, u64)) -> bool {
    a < b.saturating_add(bl) && b < a.saturating_add(al)
}

impl Fast {
    /// The plan of a job, if it can have one (see the module documentation).
    fn new(
        bus: &Bus,
        program: &Program,
        plan: &Plan,
        arena: (u64, u64),
        copies: Copies<'_>,
    ) -> Option<Fast> {
        let ok_copy = |c: &CopyDescriptor| c.len > 0 && c.len <= bus.max_dma_len;
        let static_program = program.tensors.iter().all(|t| !t.dynamic)
            && program.ops.iter().all(|o| o.op.branch_target().is_none())
            && plan.fixed_ns.iter().all(Option::is_some);
        if !static_program || !copies.inputs.iter().chain(copies.outputs).all(ok_copy) {
            return None;
        }
        let range = |t: usize| {
            let t = &program.tensors[t];
            (t.addr, t.byte_len)
        };
        let mut b = Builder::default();
        // The DRAM the job writes: its copies in (inside the arena) and its ops' outputs.
        let mut hull = (arena.0, arena.0);
        let mut widen = |(a, l): (u64, u64)| {
            hull = (hull.0.min(a), hull.1.max(a.saturating_add(l)));
        };
        copies.inputs.iter().for_each(|c| widen((c.dst, c.len)));
        for op in &program.ops {
            op.outputs.iter().for_each(|&o| widen(range(o as usize)));
        }
        let hull_len = (hull.0, hull.1 - hull.0);
        let fills = copies
            .inputs
            .iter()
            .map(|c| b.write((c.dst, c.len)))
            .collect();
        let mut steps = Vec::with_capacity(program.ops.len());
        let mut reads = Vec::new();
        let mut ns = 0u64;
        for (k, op) in program.ops.iter().enumerate() {
            let ins: SmallVec<[Src; 4]> = op
                .inputs
                .iter()
                .map(|&i| {
                    let r = range(i as usize);
                    match b.holding(r) {
                        Some(s) => Src::Slot(s),
                        None => {
                            // A weight the job does not write may be cached; anything
                            // the job writes may not (one invalidation per job).
                            let cache = plan.keep.get(i as usize).copied().unwrap_or(false)
                                && !overlap(r, hull_len);
                            reads.push(if cache { 0 } else { r.1 });
                            Src::Dram {
                                tensor: i as usize,
                                cache,
                                read: reads.len() - 1,
                            }
                        }
                    }
                })
                .collect();
            let mut outs: SmallVec<[Out; 2]> = SmallVec::new();
            for &o in &op.outputs {
                let slot = b.write(range(o as usize));
                // An output that is one of the op's inputs, or another of its outputs,
                // would alias: no plan.
                let aliased = ins.iter().any(|s| matches!(s, Src::Slot(x) if *x == slot))
                    || outs.iter().any(|x| x.slot == slot);
                if aliased {
                    return None;
                }
                outs.push(Out {
                    tensor: o as usize,
                    slot,
                    store: !program.tensors[o as usize].transient,
                });
            }
            ns = ns.saturating_add(plan.fixed_ns[k]?);
            steps.push(Step { op: k, ins, outs });
        }
        let leaves = copies
            .outputs
            .iter()
            .map(|c| b.holding((c.src, c.len)))
            .collect();
        let bytes = b.slots.iter().map(|r| r.1).chain(reads.iter().copied());
        if bytes.fold(0u64, u64::saturating_add) > FAST_BYTES {
            return None;
        }
        for c in copies.inputs.iter().chain(copies.outputs) {
            ns = ns.saturating_add(bus.timing.dma_ns(c.len));
        }
        Some(Fast {
            slots: b.slots,
            fills,
            steps,
            leaves,
            hull: hull_len,
            reads,
            ns,
        })
    }

    /// Copies in, runs the ops, copies out (what [`super::compute::run_job`] does, in
    /// the order it does it, with the same outcomes).
    fn run(&self, bus: &Bus, decoded: &Decoded, st: &mut State, copies: Copies<'_>) -> Outcome {
        // The caches drop what the job's writes may touch, once, when they are done (the
        // general path does it around each write). Once is enough: while a job runs
        // nothing else reads through the caches (they are the compute engine's, and a job
        // runs on the doorbell's thread only while the engines are idle), and the job's
        // own cached reads lie outside what it writes (the plan checked).
        let outcome = self.body(bus, decoded, st, copies, &bus.dram);
        bus.wrote(self.hull.0, self.hull.1);
        outcome
    }

    fn body(
        &self,
        bus: &Bus,
        decoded: &Decoded,
        st: &mut State,
        copies: Copies<'_>,
        dram: &crate::shm::SharedRegion,
    ) -> Outcome {
        let program = &decoded.program;
        let base = bus.dram_base;
        for (k, c) in copies.inputs.iter().enumerate() {
            let slot = &mut st.slots[self.fills[k]];
            let read = st.host[k]
                .translate(&bus.iommu, c.src, c.len, Perm::READ)
                .ok()
                .and_then(|w| w.region.read(w.offset, slot.bytes_mut()).ok());
            if read.is_none() {
                return Outcome::fail(Status::DmaFault, k as u32, c.src);
            }
            if dram.write(c.dst - base, slot.bytes()).is_err() {
                return Outcome::fail(Status::DmaFault, k as u32, c.dst);
            }
        }
        let generation = bus.generation.load(std::sync::atomic::Ordering::SeqCst);
        for step in &self.steps {
            let fail = |status, at| Outcome::fail(status, step.op as u32, at);
            // A reset stops a job between ops.
            if bus.generation.load(std::sync::atomic::Ordering::SeqCst) != generation {
                return fail(Status::Aborted, 0);
            }
            if let Err((status, at)) = step.run(bus, program, st, dram) {
                return fail(status, at);
            }
            bus.progress
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        let first_out = copies.inputs.len();
        for (k, c) in copies.outputs.iter().enumerate() {
            let index = (first_out + k) as u32;
            let Some(slot) = self.leaves[k] else {
                if let Err(a) = dma::copy(bus, c.src, c.dst, c.len) {
                    return Outcome::fail(Status::DmaFault, index, a);
                }
                continue;
            };
            let written = st.host[first_out + k]
                .translate(&bus.iommu, c.dst, c.len, Perm::WRITE)
                .ok()
                .and_then(|w| w.region.write(w.offset, st.slots[slot].bytes()).ok());
            if written.is_none() {
                return Outcome::fail(Status::DmaFault, index, c.dst);
            }
        }
        Outcome::ok(self.ns)
    }
}

impl Step {
    /// Runs the op: its inputs from slots, the weight cache or DRAM, its outputs into
    /// their slots (and DRAM). Errors are (status, faulting address).
    fn run(
        &self,
        bus: &Bus,
        program: &Program,
        st: &mut State,
        dram: &crate::shm::SharedRegion,
    ) -> Result<(), (Status, u64)> {
        let op = &program.ops[self.op];
        let base = bus.dram_base;
        // Weights from the weight cache (kept there across jobs). A tensor a probe hit
        // in an earlier op or job is used again without a probe (a lock and a map lookup
        // per weight, several per op) while the cache has dropped nothing since: it is
        // still kept, so still DRAM's bytes. (Not probed, it ages in the cache's LRU
        // order; dropped under budget pressure, it is probed again.)
        let generation = bus.weights.generation();
        if generation != st.held_generation {
            st.held.iter_mut().for_each(|h| *h = Held::None);
            st.held_generation = generation;
        }
        for src in &self.ins {
            let Src::Dram {
                tensor,
                cache,
                read,
            } = *src
            else {
                continue;
            };
            if matches!(st.held[read], Held::Kept(_)) {
                continue;
            }
            let t = &program.tensors[tensor];
            let probe = match cache {
                true => bus.weights.probe(t.addr, t.byte_len),
                false => Probe::Volatile,
            };
            let len = t.byte_len as usize;
            st.held[read] = match probe {
                Probe::Hit(s) => Held::Kept(s),
                Probe::Miss => {
                    let ticket = bus.weights.ticket();
                    let mut s = Staged::zeroed(len);
                    dram.read(t.addr - base, s.bytes_mut())
                        .map_err(|_| (Status::DmaFault, t.addr))?;
                    let s = Arc::new(s);
                    bus.weights.offer(t.addr, Arc::clone(&s), ticket);
                    Held::Loaded(s)
                }
                Probe::Volatile => {
                    // A weight the cache will not keep gets its buffer the first time.
                    let buf = &mut st.reads[read];
                    if buf.bytes().len() != len {
                        *buf = Staged::zeroed(len);
                    }
                    dram.read(t.addr - base, buf.bytes_mut())
                        .map_err(|_| (Status::DmaFault, t.addr))?;
                    Held::None
                }
            };
        }
        // The outputs' buffers leave their slots while the kernel writes them (no slot
        // is both an input and an output of one op: the plan checked).
        let mut outs: SmallVec<[Staged; 2]> = SmallVec::new();
        for o in &self.outs {
            let mut s = std::mem::replace(&mut st.slots[o.slot], Staged::zeroed(0));
            if !op
                .op
                .overwrites_outputs_of(program.tensors[o.tensor].ty.dtype)
            {
                s.clear();
            }
            outs.push(s);
        }
        let ran = {
            let st = &*st;
            let mut inputs: SmallVec<[View<'_>; 4]> = SmallVec::new();
            for (src, &i) in self.ins.iter().zip(&op.inputs) {
                let bytes = match src {
                    Src::Slot(s) => st.slots[*s].bytes(),
                    Src::Dram { read, .. } => match st.held[*read].bytes() {
                        Some(b) => b,
                        None => st.reads[*read].bytes(),
                    },
                };
                inputs.push(View {
                    ty: &program.tensors[i as usize].ty,
                    bytes,
                });
            }
            let mut outputs: SmallVec<[ViewMut<'_>; 2]> = SmallVec::new();
            for (o, s) in self.outs.iter().zip(outs.iter_mut()) {
                outputs.push(ViewMut {
                    ty: &program.tensors[o.tensor].ty,
                    bytes: s.bytes_mut(),
                });
            }
            // Every view holds exactly its tensor's bytes (a slot or read buffer is its
            // tensor's range, whose length decoding checked against the type): what
            // `kernels::execute_checked` would check per run is known already.
            op.op.kernel().run_sized(&inputs, &mut outputs)
        };
        // Back into their slots, whatever happened.
        for (o, s) in self.outs.iter().zip(outs) {
            st.slots[o.slot] = s;
        }
        let real = ran.map_err(|e| {
            tracing::debug!("kernel {} failed: {e}", self.op);
            (Status::KernelError, 0)
        })?;
        for (k, o) in self.outs.iter().enumerate() {
            let t = &program.tensors[o.tensor];
            // A static output keeps its table shape.
            if real.as_ref().is_some_and(|r| r.get(k) != Some(&t.ty.shape)) {
                tracing::debug!("kernel {}: output {} changed its shape", self.op, o.tensor);
                return Err((Status::KernelError, 0));
            }
            if o.store {
                dram.write(t.addr - base, st.slots[o.slot].bytes())
                    .map_err(|_| (Status::DmaFault, t.addr))?;
            }
        }
        Ok(())
    }
}

impl State {
    fn new(f: &Fast, copies: usize) -> State {
        State {
            slots: f
                .slots
                .iter()
                .map(|r| Staged::zeroed(r.1 as usize))
                .collect(),
            reads: f
                .reads
                .iter()
                .map(|&l| Staged::zeroed(l as usize))
                .collect(),
            held: vec![Held::None; f.reads.len()],
            held_generation: 0,
            host: (0..copies).map(|_| KeptTranslation::default()).collect(),
        }
    }
}

/// A weight the plan holds.
#[derive(Clone, Debug)]
enum Held {
    None,
    /// What a probe of the weight cache hit: good without a probe while the cache's
    /// generation is unchanged.
    Kept(Arc<Staged>),
    /// Loaded from DRAM and offered to the cache: good for this op only (the cache may
    /// not keep it; the next run probes).
    Loaded(Arc<Staged>),
}

impl Held {
    fn bytes(&self) -> Option<&[u8]> {
        match self {
            Held::None => None,
            Held::Kept(s) | Held::Loaded(s) => Some(s.bytes()),
        }
    }
}

/// The plan's replay of the job's writes: which slot holds which range, and whether it
/// still holds exactly the bytes DRAM (or the op that wrote it) gave it.
#[derive(Default)]
struct Builder {
    slots: Vec<(u64, u64)>,
    index: HashMap<(u64, u64), usize>,
    valid: Vec<bool>,
}

impl Builder {
    /// A write of `r`: its slot (made if new) now holds it; every other slot it overlaps
    /// does not hold its range any more.
    fn write(&mut self, r: (u64, u64)) -> usize {
        let slot = *self.index.entry(r).or_insert_with(|| {
            self.slots.push(r);
            self.valid.push(false);
            self.slots.len() - 1
        });
        for (k, &s) in self.slots.iter().enumerate() {
            if k != slot && overlap(s, r) {
                self.valid[k] = false;
            }
        }
        self.valid[slot] = true;
        slot
    }

    /// The slot that holds exactly `r` now, if one does.
    fn holding(&self, r: (u64, u64)) -> Option<usize> {
        self.index.get(&r).copied().filter(|&s| self.valid[s])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_holds_its_range_until_an_overlapping_write() {
        let mut b = Builder::default();
        let a = b.write((0x100, 16));
        let c = b.write((0x200, 16));
        assert_eq!(b.holding((0x100, 16)), Some(a));
        assert_eq!(b.holding((0x100, 8)), None, "a sub-range is read from DRAM");
        // The arena reuses bytes: a write over half of the first range ends its slot.
        b.write((0x108, 16));
        assert_eq!(b.holding((0x100, 16)), None);
        assert_eq!(b.holding((0x200, 16)), Some(c));
        // Written again, the range's slot holds it again.
        assert_eq!(b.write((0x100, 16)), a);
        assert_eq!(b.holding((0x100, 16)), Some(a));
        assert_eq!(b.holding((0x108, 16)), None);
    }
}
