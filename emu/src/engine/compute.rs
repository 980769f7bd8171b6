//! The compute engine: validates a program from DRAM, then runs it, staging each operand
//! from DRAM into local scratch and writing results back (the model of an accelerator's
//! load-compute-store over its SRAM). Its sequencer follows the program's control
//! instructions (branches, jumps, copies) and tracks the run-time shape of every dynamic
//! tensor.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Outcome;
use crate::iommu::Perm;
use crate::kernels::{self, KernelOp, MAX_RANK};
use crate::program::{Program, TensorDesc, MAX_PROGRAM_LEN};
use crate::ring::{CopyDescriptor, Status};
use crate::tensor::{Staged, TensorType, View, ViewMut};
use crate::weights::Probe;
use crate::Bus;

/// An op's per-operand lists: on the stack for ops of up to 4 operands (nearly all), so
/// a small op's run allocates nothing.
type PerOperand<T> = smallvec::SmallVec<[T; 4]>;

/// One RUN_PROGRAM command's arguments.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// The program's device address.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// How long loops may run, from the program's start (0: the program has no loops; a
    /// back edge then fails at once).
    pub loop_timeout_ns: u64,
    /// Where the run-time shapes of dynamic tensors go (0: nowhere).
    pub report: u64,
}

/// Bytes of one shape-report entry: `u32 rank | u32 dims[6]`.
pub const REPORT_ENTRY: u64 = 4 + 4 * MAX_RANK as u64;

/// Copies `len` bytes at device address `addr` into a spare buffer (read over whole, so
/// never cleared first).
fn load(bus: &Bus, addr: u64, len: u64, spare: &mut Spare) -> Result<Staged, u64> {
    let w = bus.resolve(addr, len, Perm::READ).map_err(|_| addr)?;
    let mut s = spare.take(len as usize, false);
    w.region.read(w.offset, s.bytes_mut()).map_err(|_| addr)?;
    Ok(s)
}

fn store(bus: &Bus, addr: u64, data: &[u8]) -> Result<(), u64> {
    let w = bus
        .resolve(addr, data.len() as u64, Perm::WRITE)
        .map_err(|_| addr)?;
    let written = w.region.write(w.offset, data).map_err(|_| addr);
    bus.wrote(addr, data.len() as u64);
    written
}

/// An op's input, from wherever the engine has it.
enum Input {
    /// In the program's local memory ([`Sram`]).
    Local,
    /// In the weight cache.
    Cached(Arc<Staged>),
    /// Just loaded from DRAM.
    Loaded(Staged),
}

/// A program as the engine runs it: decoded and checked, with its plan (kept across runs
/// by the [`super::programs::ProgramCache`] while DRAM holds its bytes).
#[derive(Debug)]
pub struct Decoded {
    pub(super) program: Program,
    pub(super) plan: Plan,
    /// The plan of the last JOB that ran it ([`super::job_plan`]).
    pub(super) job: Mutex<Option<super::job_plan::Kept>>,
}

/// What the engine works out from a program before running it.
#[derive(Debug)]
pub(super) struct Plan {
    /// Which tensors the weight cache may keep: those no op of the program writes (a
    /// dynamic tensor's bytes depend on the run, so never).
    pub(super) keep: Vec<bool>,
    /// The last op that reads each tensor (in program order).
    last_reader: Vec<usize>,
    /// Each op's modelled time if its tensors are all static: its types were checked
    /// when the program was decoded and cannot change, so runs skip that check too.
    pub(super) fixed_ns: Vec<Option<u64>>,
}

impl Plan {
    fn new(program: &Program, timing: &crate::timing::TimingModel) -> Plan {
        let fixed_ns = program
            .ops
            .iter()
            .map(|op| {
                let tys: Option<Vec<&TensorType>> = op
                    .inputs
                    .iter()
                    .map(|&i| program.tensors.get(i as usize))
                    .chain(op.outputs.iter().map(|&o| program.tensors.get(o as usize)))
                    .map(|t| t.filter(|t| !t.dynamic).map(|t| &t.ty))
                    .collect();
                let tys = tys?;
                Some(timing.op_ns(&op.op, &tys[..op.inputs.len()]))
            })
            .collect();
        let mut keep: Vec<bool> = program.tensors.iter().map(|t| !t.dynamic).collect();
        let mut last_reader = vec![0usize; program.tensors.len()];
        for (k, op) in program.ops.iter().enumerate() {
            for &o in &op.outputs {
                if let Some(c) = keep.get_mut(o as usize) {
                    *c = false;
                }
            }
            for &i in &op.inputs {
                if let Some(r) = last_reader.get_mut(i as usize) {
                    *r = k;
                }
            }
        }
        Plan {
            keep,
            last_reader,
            fixed_ns,
        }
    }
}

/// The engine's local memory across ops: the tensors the last ops wrote, so the op that
/// reads them next skips the load. Write-through for ordinary tensors (DRAM holds them
/// too); a *transient* tensor (read only by later ops of the program) stays here alone,
/// *held*, and reaches DRAM only if it must leave before its last reader. An entry dies
/// when a later output overlaps its DRAM bytes (the arena reuses memory: a held entry is
/// dead by then), when the last reader of a transient one is done, or when it falls out of
/// the budget (a held one is written back then).
#[derive(Default)]
struct Sram {
    /// On the stack for the few a small program keeps (a run allocates nothing).
    entries: smallvec::SmallVec<[Entry; 4]>,
}

struct Entry {
    id: u32,
    addr: u64,
    data: Staged,
    /// Not in DRAM.
    held: bool,
}

/// Bytes the engine keeps across ops.
const SRAM_BYTES: usize = 8 << 20;

impl Sram {
    /// Tensor `id`'s bytes, if held with exactly `len` bytes.
    fn get(&self, id: u32, len: u64) -> Option<&Staged> {
        self.entries
            .iter()
            .find(|e| e.id == id && e.data.bytes().len() as u64 == len)
            .map(|e| &e.data)
    }

    /// Records that `written` bytes at `addr` now hold tensor `id`, whose bytes are `data`
    /// when it is worth keeping (`held`: they are not in DRAM). Returns the held entries
    /// the budget pushed out, which the caller writes to DRAM; the buffers of the other
    /// entries it drops go to `spare`.
    fn wrote(
        &mut self,
        id: u32,
        addr: u64,
        written: u64,
        data: Option<Staged>,
        held: bool,
        spare: &mut Spare,
    ) -> Vec<(u64, Staged)> {
        let end = addr.saturating_add(written);
        let mut k = 0;
        while k < self.entries.len() {
            let e = &self.entries[k];
            let apart = e.addr + e.data.bytes().len() as u64 <= addr || end <= e.addr;
            if e.id != id && apart {
                k += 1;
            } else {
                spare.give(self.entries.remove(k).data);
            }
        }
        let mut out = Vec::new();
        let data = match data {
            Some(d) if d.bytes().len() <= SRAM_BYTES => d,
            Some(d) => {
                spare.give(d);
                return out;
            }
            None => return out,
        };
        self.entries.push(Entry {
            id,
            addr,
            data,
            held,
        });
        let mut total: usize = self.entries.iter().map(|e| e.data.bytes().len()).sum();
        while total > SRAM_BYTES {
            let e = self.entries.remove(0);
            total -= e.data.bytes().len();
            if e.held {
                out.push((e.addr, e.data));
            } else {
                spare.give(e.data);
            }
        }
        out
    }

    /// The bytes at `[addr, addr + len)`, if an entry that DRAM holds too is exactly them.
    fn at(&self, addr: u64, len: u64) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|e| e.addr == addr && !e.held && e.data.bytes().len() as u64 == len)
            .map(|e| e.data.bytes())
    }

    /// Forgets tensor `id` (a transient tensor its last reader is done with).
    fn forget(&mut self, id: u32, spare: &mut Spare) {
        while let Some(k) = self.entries.iter().position(|e| e.id == id) {
            spare.give(self.entries.remove(k).data);
        }
    }
}

/// Buffers a run is done with, reused for the next ops' outputs and loads, and kept for
/// the next run (the engine's scratch memory): a model run again allocates (and
/// page-faults) nothing.
#[derive(Default)]
struct Spare {
    bufs: Vec<Staged>,
}

impl Spare {
    /// How many buffers are kept.
    const KEEP: usize = 16;
    /// Bytes kept between runs at most.
    const KEEP_BYTES: usize = 32 << 20;

    /// The buffers the last run left.
    fn reclaim(bus: &Bus) -> Spare {
        let mut kept = bus.scratch.lock().unwrap_or_else(|p| p.into_inner());
        Spare {
            bufs: std::mem::take(&mut *kept),
        }
    }

    /// Leaves the buffers for the next run, the largest first within the byte budget.
    fn keep(mut self, bus: &Bus) {
        self.bufs
            .sort_unstable_by_key(|b| std::cmp::Reverse(b.capacity()));
        let mut total = 0;
        self.bufs.retain(|b| {
            total += b.capacity();
            total <= Self::KEEP_BYTES
        });
        let mut kept = bus.scratch.lock().unwrap_or_else(|p| p.into_inner());
        if kept.is_empty() {
            *kept = self.bufs;
        }
    }

    fn give(&mut self, s: Staged) {
        if self.bufs.len() < Self::KEEP && s.capacity() > 0 {
            self.bufs.push(s);
        }
    }

    /// A buffer of `len` bytes: zeroed when `zero`, else holding whatever it held.
    fn take(&mut self, len: usize, zero: bool) -> Staged {
        let best = self
            .bufs
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let mut s = self.bufs.swap_remove(i).recycled(len);
                if zero {
                    s.clear();
                }
                s
            }
            None => Staged::zeroed(len),
        }
    }
}

/// The run-time state of a program: the current type of every tensor (a dynamic
/// tensor's shape changes as ops write it).
struct Tensors<'p> {
    table: &'p [TensorDesc],
    /// Borrowed from the table until a dynamic tensor's shape changes; empty when no
    /// tensor is dynamic (every type is then the table's, and a run allocates nothing).
    types: Vec<Cow<'p, TensorType>>,
}

impl<'p> Tensors<'p> {
    fn new(table: &'p [TensorDesc]) -> Self {
        let types = match table.iter().any(|t| t.dynamic) {
            true => table.iter().map(|t| Cow::Borrowed(&t.ty)).collect(),
            false => Vec::new(),
        };
        Tensors { table, types }
    }

    /// Tensor `i`'s current type.
    fn ty(&self, i: u32) -> &TensorType {
        match self.types.get(i as usize) {
            Some(t) => t,
            None => &self.table[i as usize].ty,
        }
    }

    /// Bytes tensor `i` holds now.
    fn len(&self, i: u32) -> u64 {
        let t = &self.table[i as usize];
        if t.dynamic {
            let ty = &self.types[i as usize];
            ty.numel() as u64 * ty.dtype.size()
        } else {
            t.byte_len
        }
    }

    /// Sets the shape an op wrote to tensor `i`: a static tensor keeps its table shape, a
    /// dynamic one takes any shape within its capacity.
    fn set_shape(&mut self, i: u32, shape: &[usize]) -> Result<(), ()> {
        let t = &self.table[i as usize];
        if !t.dynamic {
            return if t.ty.shape == shape { Ok(()) } else { Err(()) };
        }
        if !fits(t, shape) {
            return Err(());
        }
        if self.types[i as usize].shape != shape {
            self.types[i as usize].to_mut().shape = shape.to_vec();
        }
        Ok(())
    }

    /// The report of every dynamic tensor's shape, in table order.
    fn report(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (t, ty) in self.table.iter().zip(&self.types) {
            if !t.dynamic {
                continue;
            }
            out.extend_from_slice(&(ty.shape.len() as u32).to_le_bytes());
            for k in 0..MAX_RANK {
                let d = ty.shape.get(k).copied().unwrap_or(0) as u32;
                out.extend_from_slice(&d.to_le_bytes());
            }
        }
        out
    }
}

/// Fetches, validates and runs the program of `run`. `req_id` labels the trace events of
/// its kernels.
pub fn run_program(bus: &Bus, run: Run, req_id: u32) -> Outcome {
    let decoded = match decoded(bus, run) {
        Ok(d) => d,
        Err(o) => return o,
    };
    let Decoded { program, plan, .. } = &*decoded;
    let mut tensors = Tensors::new(&program.tensors);
    let outcome = sequence(bus, program, plan, &mut tensors, run, req_id);
    if outcome.status != Status::Ok || run.report == 0 {
        return outcome;
    }
    match store(bus, run.report, &tensors.report()) {
        Ok(()) => outcome,
        Err(a) => Outcome::fail(Status::DmaFault, program.ops.len() as u32, a),
    }
}

/// A JOB's copies (checked: inputs from host memory into its arena, outputs from the
/// arena to host memory).
#[derive(Clone, Copy, Debug)]
pub struct Copies<'a> {
    pub inputs: &'a [CopyDescriptor],
    pub outputs: &'a [CopyDescriptor],
}

/// A JOB's run: its copies in, the program of `run`, its copies out. An input that fills
/// a tensor of the program lands in DRAM and in the engine's local memory, so the op
/// that reads it skips the load; an output the local memory holds leaves from there. A
/// failed copy reports its index in the list, a failed op its index.
///
/// A job whose program and copies have a plan ([`super::job_plan`]) runs through it (the
/// same work, resolved once); this is the general path, and the one a trace records.
pub fn run_job(bus: &Bus, run: Run, arena: (u64, u64), copies: Copies<'_>, req_id: u32) -> Outcome {
    let decoded = match decoded(bus, run) {
        Ok(d) => d,
        Err(o) => return o,
    };
    if !bus.trace.enabled() {
        if let Some(done) = super::job_plan::run(bus, &decoded, run, arena, copies) {
            return done;
        }
    }
    let Decoded { program, plan, .. } = &*decoded;
    let mut spare = Spare::reclaim(bus);
    let mut sram = Sram::default();
    let mut ns = 0u64;
    let mut outcome = Outcome::ok(0);
    for (i, c) in copies.inputs.iter().enumerate() {
        match copy_in(bus, program, c, (&mut sram, &mut spare)) {
            Ok(()) => ns += bus.timing.dma_ns(c.len),
            Err(a) => {
                outcome = Outcome::fail(Status::DmaFault, i as u32, a);
                break;
            }
        }
    }
    if outcome.status == Status::Ok {
        let mut tensors = Tensors::new(&program.tensors);
        let state = (&mut sram, &mut spare);
        outcome = sequence_with(bus, program, plan, &mut tensors, state, run, req_id);
        ns += outcome.device_ns;
    }
    let base = copies.inputs.len();
    for (k, c) in copies.outputs.iter().enumerate() {
        if outcome.status != Status::Ok {
            break;
        }
        match copy_out(bus, c, &sram) {
            Ok(()) => ns += bus.timing.dma_ns(c.len),
            Err(a) => outcome = Outcome::fail(Status::DmaFault, (base + k) as u32, a),
        }
    }
    for e in sram.entries {
        spare.give(e.data);
    }
    spare.keep(bus);
    match outcome.status {
        Status::Ok => Outcome::ok(ns),
        _ => outcome,
    }
}

/// One copy into the arena: into DRAM, and into local memory as the tensor it fills.
fn copy_in(
    bus: &Bus,
    program: &Program,
    c: &CopyDescriptor,
    (sram, spare): (&mut Sram, &mut Spare),
) -> Result<(), u64> {
    let filled = program
        .tensors
        .iter()
        .position(|t| t.addr == c.dst && t.byte_len == c.len && !t.dynamic);
    let Some(id) = filled.filter(|_| c.len > 0 && c.len as usize <= SRAM_BYTES) else {
        return super::dma::copy(bus, c.src, c.dst, c.len);
    };
    let w = bus.resolve(c.src, c.len, Perm::READ).map_err(|_| c.src)?;
    let mut s = spare.take(c.len as usize, false);
    w.region.read(w.offset, s.bytes_mut()).map_err(|_| c.src)?;
    store(bus, c.dst, s.bytes())?;
    for (addr, d) in sram.wrote(id as u32, c.dst, c.len, Some(s), false, spare) {
        store(bus, addr, d.bytes())?;
        spare.give(d);
    }
    Ok(())
}

/// One copy out of the arena: from local memory when it holds exactly those bytes.
fn copy_out(bus: &Bus, c: &CopyDescriptor, sram: &Sram) -> Result<(), u64> {
    let Some(bytes) = sram.at(c.src, c.len) else {
        return super::dma::copy(bus, c.src, c.dst, c.len);
    };
    let w = bus.resolve(c.dst, c.len, Perm::WRITE).map_err(|_| c.dst)?;
    let written = w.region.write(w.offset, bytes).map_err(|_| c.dst);
    bus.wrote(c.dst, c.len);
    written
}

/// The decoded program of `run`: from the program cache, or fetched and validated now.
fn decoded(bus: &Bus, run: Run) -> Result<Arc<Decoded>, Outcome> {
    let Run { addr, len, .. } = run;
    if len == 0 || len > MAX_PROGRAM_LEN || addr < bus.dram_base {
        return Err(Outcome::fail(Status::InvalidProgram, 0, addr));
    }
    match bus.programs.get(addr, len) {
        Some(d) => Ok(d),
        None => decode_program(bus, addr, len),
    }
}

/// Copies the program out of DRAM first (so nothing can change it between validation and
/// use), decodes and checks all of it, plans it, and offers that to the program cache.
fn decode_program(bus: &Bus, addr: u64, len: u64) -> Result<Arc<Decoded>, Outcome> {
    let ticket = bus.programs.ticket();
    let w = bus
        .resolve(addr, len, Perm::READ)
        .map_err(|_| Outcome::fail(Status::DmaFault, 0, addr))?;
    let mut bytes = vec![0u8; len as usize];
    w.region
        .read(w.offset, &mut bytes)
        .map_err(|_| Outcome::fail(Status::DmaFault, 0, addr))?;
    let program = Program::decode(&bytes, bus.dram_base, bus.dram.len() as u64).map_err(|e| {
        tracing::debug!("program rejected: {e}");
        Outcome::fail(Status::InvalidProgram, 0, addr)
    })?;
    let plan = Plan::new(&program, &bus.timing);
    let decoded = Arc::new(Decoded {
        program,
        plan,
        job: Mutex::new(None),
    });
    bus.programs.offer(addr, len, Arc::clone(&decoded), ticket);
    Ok(decoded)
}

/// Runs the ops from the first, following control instructions, until the end, with the
/// engine's scratch buffers (kept across runs) and an empty local memory.
fn sequence(
    bus: &Bus,
    program: &Program,
    plan: &Plan,
    tensors: &mut Tensors<'_>,
    run: Run,
    req_id: u32,
) -> Outcome {
    let mut spare = Spare::reclaim(bus);
    let mut sram = Sram::default();
    let outcome = sequence_with(
        bus,
        program,
        plan,
        tensors,
        (&mut sram, &mut spare),
        run,
        req_id,
    );
    for e in sram.entries {
        spare.give(e.data);
    }
    spare.keep(bus);
    outcome
}

fn sequence_with(
    bus: &Bus,
    program: &Program,
    plan: &Plan,
    tensors: &mut Tensors<'_>,
    (sram, spare): (&mut Sram, &mut Spare),
    run: Run,
    req_id: u32,
) -> Outcome {
    // Clock reads only where they are used: loops under a timeout, and the trace.
    let started = (run.loop_timeout_ns > 0).then(Instant::now);
    let loop_timeout = Duration::from_nanos(run.loop_timeout_ns);
    let generation = bus.generation.load(std::sync::atomic::Ordering::SeqCst);
    let mut ns = 0u64;
    let mut pc = 0usize;
    while let Some(op) = program.ops.get(pc) {
        let index = pc as u32;
        let fail = |status, fault| Outcome::fail(status, index, fault);
        // A reset stops a program between ops.
        if bus.generation.load(std::sync::atomic::Ordering::SeqCst) != generation {
            return fail(Status::Aborted, 0);
        }
        match &op.op {
            KernelOp::Jump(j) => {
                let target = j.target as usize;
                // Without a timeout (0), a back edge fails at once.
                if target <= pc && started.is_none_or(|s| s.elapsed() > loop_timeout) {
                    tracing::debug!("loop at op {pc} ran past its timeout");
                    return fail(Status::LoopTimeout, 0);
                }
                pc = target;
                continue;
            }
            KernelOp::BranchIfFalse(b) => {
                let c = op.inputs[0];
                let cond = match load(bus, program.tensors[c as usize].addr, tensors.len(c), spare)
                {
                    Ok(v) => v.bytes().first().is_some_and(|&v| v != 0),
                    Err(a) => return fail(Status::DmaFault, a),
                };
                pc = if cond { pc + 1 } else { b.target as usize };
                continue;
            }
            _ => {}
        }
        let start = bus.trace.enabled().then(Instant::now);
        match run_kernel(bus, program, plan, tensors, (sram, spare), pc) {
            Ok(op_ns) => {
                if let Some(start) = start {
                    bus.trace
                        .record("compute", op.op.name(), start, req_id, op_ns);
                }
                ns += op_ns;
            }
            Err((status, fault)) => return fail(status, fault),
        }
        bus.progress
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        pc += 1;
    }
    Outcome::ok(ns)
}

/// Runs kernel op `pc` on the tensors' current shapes; returns its modelled time.
fn run_kernel(
    bus: &Bus,
    program: &Program,
    plan: &Plan,
    tensors: &mut Tensors<'_>,
    (sram, spare): (&mut Sram, &mut Spare),
    pc: usize,
) -> Result<u64, (Status, u64)> {
    let op = &program.ops[pc];
    let kernel_error = |e: kernels::KernelError| {
        tracing::debug!("kernel {pc} failed: {e}");
        (Status::KernelError, 0)
    };
    // Inputs the last ops wrote come from local memory, weights from the weight cache;
    // the rest from DRAM.
    let mut loaded: PerOperand<Input> = PerOperand::with_capacity(op.inputs.len());
    for &i in &op.inputs {
        let len = tensors.len(i);
        if sram.get(i, len).is_some() {
            loaded.push(Input::Local);
            continue;
        }
        let addr = program.tensors[i as usize].addr;
        let mut cached = plan.keep.get(i as usize).copied().unwrap_or(false);
        if cached {
            match bus.weights.probe(addr, len) {
                Probe::Hit(s) => {
                    loaded.push(Input::Cached(s));
                    continue;
                }
                Probe::Miss => {}
                Probe::Volatile => cached = false,
            }
        }
        let ticket = bus.weights.ticket();
        loaded.push(if cached {
            let data = Arc::new(load(bus, addr, len, spare).map_err(|a| (Status::DmaFault, a))?);
            bus.weights.offer(addr, data.clone(), ticket);
            Input::Cached(data)
        } else {
            Input::Loaded(load(bus, addr, len, spare).map_err(|a| (Status::DmaFault, a))?)
        });
    }
    // A dynamic output's shape follows from the inputs' current shapes (its capacity
    // is checked); kernels whose shapes depend on values report theirs after running.
    let wants_runtime_shapes = op
        .outputs
        .iter()
        .any(|&o| program.tensors[o as usize].dynamic);
    // The inputs' current types, listed only when shapes or timing depend on them.
    let in_tys: PerOperand<&TensorType> = match wants_runtime_shapes || plan.fixed_ns[pc].is_none()
    {
        true => per_operand(op.inputs.iter().map(|&i| tensors.ty(i))),
        false => PerOperand::new(),
    };
    let out_tys: PerOperand<Cow<'_, TensorType>> = if wants_runtime_shapes {
        let shapes = op.op.output_shapes(&in_tys).map_err(kernel_error)?;
        let mut tys = PerOperand::with_capacity(shapes.len());
        for (&o, s) in op.outputs.iter().zip(shapes) {
            let t = &program.tensors[o as usize];
            if t.dynamic && !fits(t, &s) {
                tracing::debug!("kernel {pc}: output {o} of shape {s:?} outgrows its capacity");
                return Err((Status::CapacityExceeded, 0));
            }
            if !t.dynamic && t.ty.shape != s {
                tracing::debug!("kernel {pc}: output {o} cannot take shape {s:?}");
                return Err((Status::KernelError, 0));
            }
            let mut ty = t.ty.clone();
            ty.shape = s;
            tys.push(Cow::Owned(ty));
        }
        tys
    } else {
        per_operand(
            op.outputs
                .iter()
                .map(|&o| Cow::Borrowed(&program.tensors[o as usize].ty)),
        )
    };
    // Kernels that write every element of an output get it uncleared.
    let mut out_data: PerOperand<Staged> = per_operand(out_tys.iter().map(|t| {
        let zero = !op.op.overwrites_outputs_of(t.dtype);
        spare.take(t.numel() * t.dtype.size() as usize, zero)
    }));
    let real = {
        let inputs: PerOperand<View<'_>> =
            per_operand(op.inputs.iter().zip(&loaded).map(|(&i, l)| {
                let ty = tensors.ty(i);
                let held = match l {
                    Input::Local => sram.get(i, tensors.len(i)),
                    Input::Cached(s) => Some(&**s),
                    Input::Loaded(s) => Some(s),
                };
                View {
                    ty,
                    bytes: held.map_or(&[][..], |s| s.bytes()),
                }
            }));
        let mut outputs: PerOperand<ViewMut<'_>> = per_operand(
            out_tys
                .iter()
                .zip(out_data.iter_mut())
                .map(|(ty, v)| ViewMut {
                    ty,
                    bytes: v.bytes_mut(),
                }),
        );
        match plan.fixed_ns[pc] {
            Some(_) => kernels::execute_checked(&op.op, &inputs, &mut outputs),
            None => kernels::execute(&op.op, &inputs, &mut outputs),
        }
        .map_err(kernel_error)?
    };
    let op_ns = match plan.fixed_ns[pc] {
        Some(ns) => ns,
        None => bus.timing.op_ns(&op.op, &in_tys),
    };
    // (A SmallVec's borrow lasts until it is dropped: the shapes are set below.)
    drop(in_tys);
    for (k, (&o, v)) in op.outputs.iter().zip(out_data).enumerate() {
        // The shapes the kernel reported, else the ones it was given.
        let shape = match &real {
            Some(r) => r.get(k).map_or(&[][..], |s| &s[..]),
            None => &out_tys[k].shape[..],
        };
        if tensors.set_shape(o, shape).is_err() {
            tracing::debug!("kernel {pc}: output {o} has a shape its tensor cannot take");
            return Err((Status::KernelError, 0));
        }
        // The kernel wrote the real elements first; a real shape never exceeds the view.
        let len = tensors.len(o) as usize;
        let Some(bytes) = v.bytes().get(..len) else {
            return Err((Status::KernelError, 0));
        };
        let t = &program.tensors[o as usize];
        // Kept only when the buffer holds exactly the tensor's bytes; a transient one
        // kept here skips DRAM.
        let whole = len == v.bytes().len();
        let held = t.transient && whole && len <= SRAM_BYTES;
        if !held {
            store(bus, t.addr, bytes).map_err(|a| (Status::DmaFault, a))?;
        }
        let kept = match whole {
            true => Some(v),
            false => {
                spare.give(v);
                None
            }
        };
        for (addr, d) in sram.wrote(o, t.addr, len as u64, kept, held, spare) {
            store(bus, addr, d.bytes()).map_err(|a| (Status::DmaFault, a))?;
            spare.give(d);
        }
    }
    // A transient input's last reader is done with it.
    for &i in &op.inputs {
        if program.tensors[i as usize].transient && plan.last_reader[i as usize] == pc {
            sram.forget(i, spare);
        }
    }
    for l in loaded {
        if let Input::Loaded(s) = l {
            spare.give(s);
        }
    }
    Ok(op_ns)
}

/// An op's per-operand list, by pushes: `SmallVec`'s `extend` (reserve, then a copy
/// loop) costs several times more for the one to four items an op has.
#[inline(always)]
fn per_operand<T>(items: impl Iterator<Item = T>) -> PerOperand<T> {
    let mut out = PerOperand::new();
    for x in items {
        out.push(x);
    }
    out
}

/// Whether `shape` fits dynamic tensor `t`'s capacity.
fn fits(t: &TensorDesc, shape: &[usize]) -> bool {
    shape.len() <= MAX_RANK
        && shape
            .iter()
            .try_fold(t.ty.dtype.size(), |a, &d| a.checked_mul(d as u64))
            .is_some_and(|b| b <= t.byte_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(n: usize) -> Staged {
        Staged::zeroed(n)
    }

    #[test]
    fn sram_keeps_what_was_written_until_something_overlaps_it() {
        let mut s = Sram::default();
        let sp = &mut Spare::default();
        assert!(s
            .wrote(1, 0x1000, 64, Some(staged(64)), false, sp)
            .is_empty());
        s.wrote(2, 0x2000, 64, Some(staged(64)), false, sp);
        assert!(s.get(1, 64).is_some());
        assert!(s.get(1, 32).is_none(), "a different length is a miss");
        // A write over part of tensor 1's bytes (the arena reused them) forgets it.
        s.wrote(3, 0x1020, 16, None, false, sp);
        assert!(s.get(1, 64).is_none());
        assert!(s.get(2, 64).is_some());
        // Writing tensor 2 again replaces its entry.
        s.wrote(2, 0x2000, 8, Some(staged(8)), false, sp);
        assert!(s.get(2, 64).is_none());
        assert!(s.get(2, 8).is_some());
        s.forget(2, sp);
        assert!(s.get(2, 8).is_none());
    }

    #[test]
    fn sram_stays_within_its_budget_and_writes_back_what_only_it_holds() {
        let mut s = Sram::default();
        let sp = &mut Spare::default();
        let big = SRAM_BYTES / 2 + 1;
        assert!(s
            .wrote(1, 0, big as u64, Some(staged(big)), true, sp)
            .is_empty());
        // Tensor 1 is held (not in DRAM): pushed out, it comes back to be written.
        let out = s.wrote(2, 1 << 30, big as u64, Some(staged(big)), false, sp);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, 0);
        assert!(
            s.get(1, big as u64).is_none(),
            "the oldest entry goes first"
        );
        assert!(s.get(2, big as u64).is_some());
        // An entry in DRAM too leaves without a write-back.
        let too_big = SRAM_BYTES + 1;
        let out = s.wrote(3, 1 << 31, too_big as u64, Some(staged(too_big)), false, sp);
        assert!(out.is_empty());
        assert!(s.get(3, too_big as u64).is_none(), "too large to keep");
    }
}
