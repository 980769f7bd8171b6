//! The synchronous execution path every entry point shares, as named phases: validate
//! the request, open its pools, choose the program instance, run it on the device
//! (regrowing a program whose loop state outgrows its room), write back.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::burst::BurstMemo;
use super::commands::{self, Work};
use super::instances::{grows, Instance, InstanceKey, MAX_REGROWS};
use super::pools::{access, stage, DevicePool, PinKey, PinnedPool, ReqPool};
use super::{hw_status, VnpuPreparedModel};
use crate::compile::Compiled;
use crate::execute::staging::Span;
use crate::hal::{
    ErrorStatus, MeasureTiming, OptionalTimePoint, OptionalTimeoutDuration, OutputShape, Request,
    RequestArgument, RequestMemoryPool, Timing,
};
use crate::hw::{Command, DramBlock, REPORT_ENTRY};
use crate::hwbuf::HwUse;
use crate::memory::open_pool;
use crate::validate::validate_request;

/// The bytes argument `a` may use in its pool.
fn room(open: &[ReqPool<'_>], a: &RequestArgument) -> u64 {
    open.get(a.location.pool_index as usize)
        .map_or(a.location.length as u64, |p| p.room(&a.location))
}

/// Every pool's pin, if every pool is pinned.
fn all_pinned(devpools: &[DevicePool]) -> Option<Vec<Arc<PinnedPool>>> {
    devpools
        .iter()
        .map(|d| match d {
            DevicePool::Pinned(p) => Some(Arc::clone(p)),
            _ => None,
        })
        .collect()
}

/// What an execution gives back: its status, output shapes and timing.
pub(super) type Outcome = (ErrorStatus, Vec<OutputShape>, Timing);

/// A failed execution's outcome.
pub(super) fn fail(s: ErrorStatus) -> Outcome {
    (s, Vec::new(), Timing::NONE)
}

/// A request's pools, opened: as the client gave them, and which a burst pinned (and are
/// still the very memory pinned).
struct Pools<'a> {
    open: Vec<ReqPool<'a>>,
    pinned: Vec<Option<&'a Arc<PinnedPool>>>,
    pins: &'a [Option<Arc<PinnedPool>>],
}

/// One try of an instance: done (output shapes, device time in ns), or its program must grow.
enum Attempt {
    Done(Vec<OutputShape>, u64),
    Grow,
}

impl VnpuPreparedModel {
    /// The whole synchronous execution path; `start` is when the driver got the work
    /// (timeInDriver counts from it); fenced execution disallows unspecified outputs.
    pub(super) fn run(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
        start: Instant,
        via: Via<'_>,
    ) -> Outcome {
        let run = || -> Result<_, Outcome> {
            self.validate(request, via.fenced, deadline)?;
            let pools = self.open_pools(request, via.pins)?;
            let key = self.instance_key(request, &pools.open)?;
            let epoch = self.ensure_resident().map_err(fail)?;
            let done = self.run_instance(request, &pools, key, epoch, loop_timeout, via.memo)?;
            // The device cannot stop a program midway; a deadline that passed while it ran
            // is still a missed deadline (as NN's executor reports one found between
            // operations).
            if deadline.has_passed() {
                return Err(fail(ErrorStatus::MissedDeadlineTransient));
            }
            Ok(done)
        };
        match run() {
            Ok((shapes, done)) => {
                let timing = match measure == MeasureTiming::YES {
                    true => measured(start, done / 1000),
                    false => Timing::NONE,
                };
                (ErrorStatus::None, shapes, timing)
            }
            Err(outcome) => outcome,
        }
    }

    /// Phase 1: the request against the model, and the deadline.
    fn validate(
        &self,
        request: &Request,
        fenced: bool,
        deadline: OptionalTimePoint,
    ) -> Result<(), Outcome> {
        if let Err(e) = validate_request(request, &self.plan.model, !fenced) {
            tracing::debug!("request: {e}");
            return Err(fail(ErrorStatus::InvalidArgument));
        }
        if deadline.has_passed() {
            return Err(fail(ErrorStatus::MissedDeadlinePersistent));
        }
        Ok(())
    }

    /// Phase 2: the request's pools, opened (through a burst's pins where they serve).
    fn open_pools<'a>(
        &self,
        request: &'a Request,
        pins: &'a [Option<Arc<PinnedPool>>],
    ) -> Result<Pools<'a>, Outcome> {
        let mut open = Vec::with_capacity(request.pools.len());
        let mut pinned: Vec<Option<&Arc<PinnedPool>>> = vec![None; request.pools.len()];
        for (k, p) in request.pools.iter().enumerate() {
            match p {
                RequestMemoryPool::HidlMemory(m) => {
                    let pin = pins.get(k).and_then(Option::as_ref);
                    let r = match pin.and_then(|pin| pin.open(m)) {
                        Some(r) => {
                            pinned[k] = pin;
                            Ok(r)
                        }
                        None => open_pool(m, access(request, k), HwUse::Execution),
                    };
                    let r = r.map_err(|e| {
                        tracing::debug!("request pool: {e}");
                        fail(ErrorStatus::GeneralFailure)
                    })?;
                    open.push(ReqPool::Host(r));
                }
                RequestMemoryPool::Token(t) => match self.buffers.get(*t) {
                    Some(b) => open.push(ReqPool::Device(b)),
                    None => {
                        tracing::debug!("request pool: unknown token {t}");
                        return Err(fail(ErrorStatus::InvalidArgument));
                    }
                },
            }
        }
        Ok(Pools { open, pinned, pins })
    }

    /// Phase 3: what chooses the instance — the input shapes (from the request, its
    /// driver-managed buffers or the model), the values of deferred inputs, the inputs
    /// the request omits.
    fn instance_key(
        &self,
        request: &Request,
        pools: &[ReqPool<'_>],
    ) -> Result<InstanceKey, Outcome> {
        let sg = &self.plan.model.main;
        let buffer_dims = self.check_buffers(request, pools).map_err(fail)?;
        let shapes: Vec<Vec<usize>> = sg
            .input_indexes
            .iter()
            .zip(&request.inputs)
            .zip(&buffer_dims)
            .map(|((&i, a), from_buffer)| {
                let dims = match from_buffer {
                    Some(d) => d,
                    None if a.dimensions.is_empty() => &sg.operands[i as usize].dimensions,
                    None => &a.dimensions,
                };
                dims.iter().map(|&d| d as usize).collect()
            })
            .collect();
        let mut values = Vec::new();
        for (&i, arg) in sg.input_indexes.iter().zip(&request.inputs) {
            if !self.plan.deferred[i as usize] || arg.has_no_value {
                continue;
            }
            let loc = &arg.location;
            match pools
                .get(loc.pool_index as usize)
                .map(|p| p.read(&self.hw, loc.offset as u64, p.room(loc) as usize))
            {
                Some(Ok(v)) => values.push((i, v)),
                _ => return Err(fail(ErrorStatus::GeneralFailure)),
            }
        }
        let omitted: Vec<u32> = sg
            .input_indexes
            .iter()
            .zip(&request.inputs)
            .filter(|(_, a)| a.has_no_value)
            .map(|(&i, _)| i)
            .collect();
        Ok((shapes, values, omitted))
    }

    /// Phase 4: runs the instance for `key`; a growing loop state that outgrows its room
    /// makes the program larger, a few times at most (each time doubling the room).
    fn run_instance(
        &self,
        request: &Request,
        pools: &Pools<'_>,
        key: InstanceKey,
        epoch: u64,
        loop_timeout: OptionalTimeoutDuration,
        mut memo: Option<&mut Option<BurstMemo>>,
    ) -> Result<(Vec<OutputShape>, u64), Outcome> {
        let mut overflowed: Option<Compiled> = None;
        for _ in 0..MAX_REGROWS {
            let instance = match &overflowed {
                None => self.instance(&key, epoch),
                Some(before) => self.instance_larger(key.clone(), before, epoch),
            }
            .map_err(fail)?;
            let memo = memo.as_deref_mut();
            match self.attempt(request, pools, &key, &instance, epoch, loop_timeout, memo)? {
                Attempt::Done(shapes, done) => return Ok((shapes, done)),
                Attempt::Grow => {
                    let inst = instance.lock().unwrap_or_else(|p| p.into_inner());
                    overflowed = Some(inst.compiled.clone());
                }
            }
        }
        tracing::debug!("a loop state kept outgrowing its capacity");
        Err(fail(ErrorStatus::GeneralFailure))
    }

    /// One run of an instance: the arguments against its sizes, the pools as the device
    /// reaches them, the command list on the device, the outputs written back.
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &self,
        request: &Request,
        pools: &Pools<'_>,
        key: &InstanceKey,
        instance: &Arc<Mutex<Instance>>,
        epoch: u64,
        loop_timeout: OptionalTimeoutDuration,
        memo: Option<&mut Option<BurstMemo>>,
    ) -> Result<Attempt, Outcome> {
        let sg = &self.plan.model.main;
        let open = &pools.open;
        let inst = instance.lock().unwrap_or_else(|p| p.into_inner());
        let c = &inst.compiled;
        self.check_inputs(request, open, c, epoch)?;
        let room = |a: &RequestArgument| room(open, a);
        // Outputs whose shapes only the run tells are sized after it.
        let dynamic_outputs = sg
            .output_indexes
            .iter()
            .any(|&o| c.dynamic.get(o as usize).copied().unwrap_or(false));
        let static_shapes: Vec<(u32, Vec<usize>)> = sg
            .output_indexes
            .iter()
            .map(|&o| (o, c.shapes[o as usize].clone().unwrap_or_default()))
            .collect();
        let mut shapes_out = match dynamic_outputs {
            true => Vec::new(),
            false => sized_outputs(c, &static_shapes, request, open, &room)?,
        };
        let devpools = self.device_pools(request, pools, c)?;
        let (cb, ab) = (self.const_base(), inst.arena.addr);
        let addr = |i: u32| c.address(i, &self.plan.block, cb, ab);
        let iova = |pool: u32, off: u32| devpools.get(pool as usize).and_then(|d| d.iova(off));
        let inputs = sg
            .input_indexes
            .iter()
            .zip(&request.inputs)
            .filter(|(&i, arg)| {
                !arg.has_no_value && c.byte_len(i) > 0 && !self.plan.deferred[i as usize]
            })
            .map(|(&i, arg)| {
                (
                    iova(arg.location.pool_index, arg.location.offset),
                    addr(i),
                    c.byte_len(i),
                )
            });
        let unknown = || fail(ErrorStatus::GeneralFailure);
        let ins = commands::copies(inputs).ok_or_else(unknown)?;
        let (loop_ns, program_ns) = match c.loops {
            true => {
                let t = loop_timeout_ns(loop_timeout);
                (t, inst.program_ns.max(t))
            }
            false => (0, inst.program_ns),
        };
        let report = match dynamic_outputs {
            true => match self
                .hw
                .alloc_dram((c.reported().len() as u64 * REPORT_ENTRY).max(1))
            {
                Ok(b) => Some(b),
                Err(e) if grows(&e) => return Ok(Attempt::Grow),
                Err(e) => return Err(fail(hw_status(&e))),
            },
            false => None,
        };
        // One JOB when all the request's memory is host memory and the program needs no
        // loop timeout and no shape report.
        let as_job = !c.loops && report.is_none() && devpools.iter().all(DevicePool::is_host);
        let mut done = 0u64;
        if let Some(report) = &report {
            // Run first, read the shapes the run produced, then size the outputs.
            let mut cmds: Vec<Command> = commands::dmas(&ins).collect();
            commands::run_program(&mut cmds, &inst, loop_ns, report.addr);
            match self.submit(cmds, program_ns, epoch)? {
                Some(d) => done += d,
                None => return Ok(Attempt::Grow),
            }
            let shapes = self.reported_shapes(c, report, static_shapes, epoch)?;
            shapes_out = sized_outputs(c, &shapes, request, open, &room)?;
        }
        let outputs = sg
            .output_indexes
            .iter()
            .zip(&request.outputs)
            .zip(&shapes_out)
            .map(|((&o, arg), shape)| {
                let dims: Vec<usize> = shape.dimensions.iter().map(|&d| d as usize).collect();
                (o, arg, c.bytes_in(o, &dims))
            })
            .filter(|(_, _, len)| *len > 0)
            .map(|(o, arg, len)| {
                (
                    addr(o),
                    iova(arg.location.pool_index, arg.location.offset),
                    len,
                )
            });
        let outs = commands::copies(outputs).ok_or_else(unknown)?;
        let work = match as_job && commands::in_arena(&inst, &ins, &outs) {
            true => Work::Job(commands::job(&inst, ins, outs, program_ns)),
            false => {
                let mut cmds = Vec::new();
                if report.is_none() {
                    cmds.extend(commands::dmas(&ins));
                    commands::run_program(&mut cmds, &inst, loop_ns, 0);
                }
                cmds.extend(commands::dmas(&outs));
                Work::Commands(cmds)
            }
        };
        // A burst keeps what it can run again as is: all pools pinned, static outputs, no
        // deferred values.
        let again = match memo.is_some() && report.is_none() && key.1.is_empty() {
            true => all_pinned(&devpools).map(|pins| (pins, work.clone())),
            false => None,
        };
        match self.run_work(work, program_ns, epoch)? {
            Some(d) => done += d,
            None => return Ok(Attempt::Grow),
        }
        if let (Some(slot), Some((pins, work))) = (memo, again) {
            *slot = Some(BurstMemo {
                inputs: request.inputs.clone(),
                outputs: request.outputs.clone(),
                pins,
                instance: Arc::clone(instance),
                work,
                program_ns,
                epoch,
                shapes: shapes_out.as_slice().into(),
                loop_timeout,
            });
        }
        self.write_back(request, open, devpools, &shapes_out, epoch)?;
        Ok(Attempt::Done(shapes_out, done))
    }

    /// The request's inputs against the instance: none in a driver-managed buffer lost to
    /// a reset since it was checked, and each location long enough for its operand (an
    /// input is read whole; refused before the device reads anything).
    fn check_inputs(
        &self,
        request: &Request,
        open: &[ReqPool<'_>],
        c: &Compiled,
        epoch: u64,
    ) -> Result<(), Outcome> {
        let stale = request.inputs.iter().any(|a| {
            matches!(open.get(a.location.pool_index as usize),
                Some(ReqPool::Device(b)) if !a.has_no_value && b.readable_epoch() != Some(epoch))
        });
        if stale {
            return Err(fail(ErrorStatus::GeneralFailure));
        }
        let sg = &self.plan.model.main;
        for (&i, arg) in sg.input_indexes.iter().zip(&request.inputs) {
            if !arg.has_no_value && c.byte_len(i) > room(open, arg) {
                tracing::debug!("input operand {i}: location shorter than its data");
                return Err(fail(ErrorStatus::InvalidArgument));
            }
        }
        Ok(())
    }

    /// Runs a command list in device epoch `epoch`: the device time its completions
    /// report (ns), or `None` when a dynamic tensor outgrew its capacity (the program
    /// must grow).
    fn submit(
        &self,
        cmds: Vec<Command>,
        program_ns: u64,
        epoch: u64,
    ) -> Result<Option<u64>, Outcome> {
        match self.hw.run(cmds, program_ns, Some(epoch)) {
            Ok(done) => Ok(Some(done.iter().map(|c| c.device_ns).sum())),
            Err(e) if grows(&e) => Ok(None),
            Err(e) => Err(fail(hw_status(&e))),
        }
    }

    /// Runs an execution's device work (see [`Self::submit`]).
    fn run_work(&self, work: Work, program_ns: u64, epoch: u64) -> Result<Option<u64>, Outcome> {
        match work {
            Work::Commands(cmds) => self.submit(cmds, program_ns, epoch),
            Work::Job(job) => match self.hw.run_job(&job, epoch) {
                Ok(done) => Ok(Some(done)),
                Err(e) if grows(&e) => Ok(None),
                Err(e) => Err(fail(hw_status(&e))),
            },
        }
    }

    /// The request's pools as the device reaches them: a burst's pin, mapped for this
    /// execution, staged (a pool that could shrink), or device memory.
    fn device_pools(
        &self,
        request: &Request,
        pools: &Pools<'_>,
        c: &Compiled,
    ) -> Result<Vec<DevicePool>, Outcome> {
        let sg = &self.plan.model.main;
        let moved = |args: &[RequestArgument], ops: &[u32], pool: usize| -> Vec<Span> {
            args.iter()
                .zip(ops)
                .filter(|(a, &i)| {
                    !a.has_no_value
                        && a.location.pool_index as usize == pool
                        && c.byte_len(i) > 0
                        && !self.plan.deferred[i as usize]
                })
                .map(|(a, &i)| (a.location.offset as u64, c.byte_len(i)))
                .collect()
        };
        let mut devpools: Vec<DevicePool> = Vec::with_capacity(pools.open.len());
        for (p, r) in pools.open.iter().enumerate() {
            let r = match r {
                ReqPool::Host(r) => r,
                ReqPool::Device(b) => {
                    devpools.push(DevicePool::Driver(b.addr()));
                    continue;
                }
            };
            // A burst's pin serves only the very memory it maps: the same descriptor
            // (checked when opened), or the same file range.
            let pinned = pools.pinned[p].or_else(|| {
                pools
                    .pins
                    .get(p)
                    .and_then(Option::as_ref)
                    .filter(|pin| PinKey::of(r) == Some(pin.key))
            });
            let pool = if let Some(pin) = pinned {
                Ok(DevicePool::Pinned(Arc::clone(pin)))
            } else if r.mappable() {
                self.hw
                    .map(r.fd, r.offset, r.size, r.perm)
                    .map(DevicePool::Mapped)
                    .map_err(|e| hw_status(&e))
            } else {
                let reads = moved(&request.inputs, &sg.input_indexes, p);
                let writes = moved(&request.outputs, &sg.output_indexes, p);
                let spans: Vec<Span> = reads.iter().chain(&writes).copied().collect();
                stage(&self.hw, &self.io, r, &spans, &reads, writes)
            };
            devpools.push(pool.map_err(fail)?);
        }
        Ok(devpools)
    }

    /// The output shapes a run reported: the static ones with the dynamic ones replaced.
    fn reported_shapes(
        &self,
        c: &Compiled,
        report: &DramBlock,
        static_shapes: Vec<(u32, Vec<usize>)>,
        epoch: u64,
    ) -> Result<Vec<(u32, Vec<usize>)>, Outcome> {
        let len = c.reported().len() as u64 * REPORT_ENTRY;
        let real = self
            .hw
            .read_dram(report.addr, len, epoch)
            .ok()
            .and_then(|b| c.parse_report(&b))
            .ok_or_else(|| fail(ErrorStatus::GeneralFailure))?;
        Ok(static_shapes
            .into_iter()
            .map(|(o, s)| match real.iter().find(|(i, _)| *i == o) {
                Some((_, r)) => (o, r.clone()),
                None => (o, s),
            })
            .collect())
    }

    /// Phase 5: staged pools' outputs back to their files, and driver-managed buffers
    /// marked written with their shapes.
    fn write_back(
        &self,
        request: &Request,
        open: &[ReqPool<'_>],
        devpools: Vec<DevicePool>,
        shapes: &[OutputShape],
        epoch: u64,
    ) -> Result<(), Outcome> {
        for (d, r) in devpools.iter().zip(open) {
            let ReqPool::Host(r) = r else { continue };
            if let Err(e) = d.write_back(&self.io, r) {
                tracing::debug!("staged pool write-back: {e}");
                return Err(fail(ErrorStatus::GeneralFailure));
            }
        }
        drop(devpools);
        for (arg, shape) in request.outputs.iter().zip(shapes) {
            if let Some(ReqPool::Device(b)) = open.get(arg.location.pool_index as usize) {
                b.written(shape.dimensions.clone(), epoch);
            }
        }
        Ok(())
    }
}

/// The loop timeout an execution asks for, in ns: 2 s unless set, at most 15 s (the
/// HAL's default and maximum).
pub(super) fn loop_timeout_ns(t: OptionalTimeoutDuration) -> u64 {
    const DEFAULT_NS: u64 = 2_000_000_000;
    const MAX_NS: u64 = 15_000_000_000;
    t.0.unwrap_or(DEFAULT_NS).min(MAX_NS)
}

/// The output shapes of an execution and whether each fits its location: the error to
/// return when one does not (OUTPUT_INSUFFICIENT_SIZE with the shapes, or GENERAL_FAILURE
/// for a driver-managed buffer, which cannot grow).
pub(super) fn sized_outputs(
    c: &Compiled,
    shapes: &[(u32, Vec<usize>)],
    request: &Request,
    pools: &[ReqPool<'_>],
    room: &dyn Fn(&RequestArgument) -> u64,
) -> Result<Vec<OutputShape>, Outcome> {
    let mut out = Vec::with_capacity(shapes.len());
    let mut sufficient = true;
    let mut device_short = false;
    for ((o, shape), arg) in shapes.iter().zip(&request.outputs) {
        let ok = c.bytes_in(*o, shape) <= room(arg);
        sufficient &= ok;
        device_short |= !ok
            && matches!(
                pools.get(arg.location.pool_index as usize),
                Some(ReqPool::Device(_))
            );
        out.push(OutputShape {
            dimensions: shape.iter().map(|&d| d as u32).collect(),
            is_sufficient: ok,
        });
    }
    if device_short {
        return Err((ErrorStatus::GeneralFailure, Vec::new(), Timing::NONE));
    }
    if !sufficient {
        return Err((ErrorStatus::OutputInsufficientSize, out, Timing::NONE));
    }
    Ok(out)
}

/// Timing since `start` with `on_device` µs of device time, capped by the time the driver
/// actually took: the HAL requires timeOnDevice <= timeInDriver.
pub(super) fn measured(start: Instant, on_device: u64) -> Timing {
    let in_driver = start.elapsed().as_micros() as u64;
    Timing {
        time_on_device: on_device.min(in_driver),
        time_in_driver: in_driver,
    }
}

/// output lives there (a hardware buffer is locked for exactly that).
/// How an execution arrives: fenced (unspecified outputs refused), and the pools a burst
/// keeps mapped, by request pool index.
#[derive(Default)]
pub(super) struct Via<'a> {
    pub(super) fenced: bool,
    pub(super) pins: &'a [Option<Arc<PinnedPool>>],
    /// Where a burst keeps its last execution ([`BurstMemo`]).
    pub(super) memo: Option<&'a mut Option<BurstMemo>>,
}
