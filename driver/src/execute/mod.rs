//! Execution on the device: a prepared model (its program(s) and constants resident in
//! device DRAM) and the HAL's execution entry points over it. Each entry point is a short
//! list of named phases — validate, pools, run, write back (`run.rs`) — over per-shape
//! program instances (`instances.rs`), request memory as the device reaches it
//! (`pools.rs`, `staging.rs`), the device command list (`commands.rs`) and a burst's
//! server-side execution (`burst.rs`: memo, pinned pools).

mod burst;
mod commands;
mod context;
mod instances;
mod pools;
mod reusable;
mod run;
pub mod staging;

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::compile::{ConstantBlock, ModelPlan};
use crate::domain::BufferRegistry;
use crate::fence::{self, SyncFence};
use crate::hal::{
    ErrorStatus, MeasureTiming, Model, NativeHandle, OptionalTimePoint, OptionalTimeoutDuration,
    OutputShape, Request, Timing,
};
use crate::hw::{DramBlock, Hardware, HwError};
use crate::interface::{
    DomainRole, ExecutionCallback, FencedResult, IFencedExecutionCallback, IPreparedModel, Io,
};
use crate::validate::validate_request;
use crate::workers::{Job, WorkerPool};

pub(crate) use burst::same_arguments;
pub use burst::{BurstMemo, RunOptions, Shapes};
pub use context::{ModelContext, ModelCount, ModelLease, StartBurst};
pub use instances::BuiltProgram;
use instances::Instances;
pub use pools::PinnedPool;
pub use reusable::{MemoryTokenBurst, ReusableRun};
use run::{measured, Via};

/// What the compilation cache saves of a prepared model ([`VnpuPreparedModel::cache_parts`]).
pub struct CacheParts<'a> {
    /// The model.
    pub model: &'a Model,
    /// Every operand's constant bytes.
    pub constants: &'a [Option<Vec<u8>>],
    /// The constant tensors as the device holds them.
    pub block: &'a ConstantBlock,
    /// The program for the model's own input shapes, when they are known.
    pub instance: Option<SavedInstance>,
}

/// A compiled instance as the compilation cache saves it.
pub struct SavedInstance {
    /// The input shapes it was compiled for.
    pub input_shapes: Vec<Vec<usize>>,
    /// The compilation.
    pub compiled: crate::compile::Compiled,
    /// The timing model's time for its program.
    pub program_ns: u64,
}

/// A prepared model: the compiled program(s) and constants resident on the device.
pub struct VnpuPreparedModel {
    /// Itself, so asynchronous executions can outlive the caller's borrow.
    me: std::sync::Weak<VnpuPreparedModel>,
    /// Unique in the process: buffer roles name a prepared model by it.
    id: u64,
    /// The device's driver-managed buffers (request pools given by token).
    buffers: Arc<BufferRegistry>,
    hw: Arc<Hardware>,
    /// The model, its constants and their layout: what every instance compiles from.
    plan: ModelPlan,
    const_mem: Option<DramBlock>,
    /// Executions of one instance share its arena, so they take turns.
    instances: Mutex<Instances>,
    max_instances: usize,
    /// Where asynchronous executions run, and how long a submission may wait for room.
    executions: Arc<WorkerPool>,
    submit_wait: std::time::Duration,
    /// File I/O for staged request pools.
    io: Arc<crate::fileio::CacheIo>,
    /// How bursts are served.
    burst: (StartBurst, std::time::Duration),
    /// Held for the prepared model's life: the device counts live prepared models.
    _lease: ModelLease,
}

/// The HAL code for a hardware-layer error ([`HwError::status`]).
pub(crate) fn hw_status(e: &HwError) -> ErrorStatus {
    e.status()
}

impl VnpuPreparedModel {
    /// Uploads the planned constants and, when the model's input shapes are known,
    /// compiles and uploads the program, so that errors surface at preparation.
    pub fn prepare(
        ctx: &ModelContext,
        plan: ModelPlan,
        lease: ModelLease,
    ) -> Result<Arc<VnpuPreparedModel>, ErrorStatus> {
        let epoch = ctx.hw.epoch();
        let const_mem = match plan.block.bytes.is_empty() {
            true => None,
            false => Some(
                ctx.hw
                    .upload(&plan.block.bytes, epoch)
                    .map_err(|e| hw_status(&e))?,
            ),
        };
        let shapes = plan.preparation_shapes();
        let prepared = Self::assemble(ctx, plan, const_mem, epoch, lease);
        if let Some(shapes) = shapes {
            prepared.instance(&(shapes, Vec::new(), Vec::new()), epoch)?;
        }
        Ok(prepared)
    }

    fn assemble(
        ctx: &ModelContext,
        plan: ModelPlan,
        const_mem: Option<DramBlock>,
        epoch: u64,
        lease: ModelLease,
    ) -> Arc<VnpuPreparedModel> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Arc::new_cyclic(|me| VnpuPreparedModel {
            me: me.clone(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            buffers: Arc::clone(&ctx.buffers),
            hw: Arc::clone(&ctx.hw),
            plan,
            const_mem,
            instances: Mutex::new(Instances {
                epoch,
                ..Instances::default()
            }),
            max_instances: ctx.max_instances.max(1),
            executions: Arc::clone(&ctx.executions),
            submit_wait: ctx.submit_wait,
            io: Arc::clone(&ctx.io),
            burst: ctx.burst,
            _lease: lease,
        })
    }

    /// A prepared model rebuilt from a verified compilation cache: its constants already
    /// in device memory (`const_mem`, laid out by the plan's block, whose bytes are empty,
    /// uploaded in device epoch `epoch`), the program built for the model's own input
    /// shapes already uploaded to its device memory, other constants made on first need.
    pub fn restore(
        ctx: &ModelContext,
        plan: ModelPlan,
        const_mem: Option<DramBlock>,
        instance: Option<(Vec<Vec<usize>>, BuiltProgram, DramBlock)>,
        epoch: u64,
        lease: ModelLease,
    ) -> Arc<VnpuPreparedModel> {
        let prepared = Self::assemble(ctx, plan, const_mem, epoch, lease);
        if let Some((shapes, built, program)) = instance {
            prepared.keep((shapes, Vec::new(), Vec::new()), built, program, epoch);
        }
        prepared
    }

    /// What the compilation cache saves: the model, its constants, their device layout
    /// and, when the input shapes are known, the program compiled for them.
    pub fn cache_parts(&self) -> CacheParts<'_> {
        let instance = self.plan.known_input_shapes().and_then(|shapes| {
            let key = (shapes.clone(), Vec::new(), Vec::new());
            let all = self.instances.lock().unwrap_or_else(|p| p.into_inner());
            let inst = all
                .map
                .get(&key)?
                .1
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            Some(SavedInstance {
                input_shapes: shapes,
                compiled: inst.compiled.clone(),
                program_ns: inst.program_ns,
            })
        });
        CacheParts {
            model: &self.plan.model,
            constants: self.plan.constants.get(),
            block: &self.plan.block,
            instance,
        }
    }

    /// The prepared model's process-unique id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The device it was prepared on.
    pub fn hardware(&self) -> &Arc<Hardware> {
        &self.hw
    }

    /// The model it was prepared from.
    pub fn model(&self) -> &Model {
        &self.plan.model
    }
}

/// The fenced half every fenced entry shares: waits for `wait_for` (before the earlier of
/// `deadline` and now + `duration`), runs `run` with that deadline and the time the fences
/// were seen signalled, and returns a signalled fence and the report. An execution that
/// failed is returned as the call's error.
pub(crate) fn fenced(
    wait_for: &[NativeHandle],
    deadline: OptionalTimePoint,
    duration: OptionalTimeoutDuration,
    run: impl FnOnce(OptionalTimePoint, Instant) -> run::Outcome,
) -> FencedResult {
    let launched = Instant::now();
    let fail = |s: ErrorStatus| (s, None, None);
    if let Err(e) = fence::check_handles(wait_for) {
        return fail(e.status());
    }
    let deadline = fence::earlier(deadline, duration.0);
    if deadline.has_passed() {
        return fail(ErrorStatus::MissedDeadlinePersistent);
    }
    if let Err(e) = fence::wait_all(wait_for, deadline) {
        tracing::debug!("fenced execution: {e}");
        return fail(e.status());
    }
    let (status, _, since_fence) = run(deadline, Instant::now());
    if status != ErrorStatus::None {
        return fail(status);
    }
    let since_launch = match since_fence == Timing::NONE {
        true => Timing::NONE,
        false => measured(launched, since_fence.time_on_device),
    };
    let done = SyncFence::new().and_then(|f| {
        f.signal()?;
        f.handle()
    });
    match done {
        Ok(handle) => {
            let info = FencedInfo {
                status,
                since_launch,
                since_fence,
            };
            (status, Some(handle), Some(Arc::new(info)))
        }
        Err(e) => {
            tracing::debug!("fenced execution: {e}");
            fail(ErrorStatus::GeneralFailure)
        }
    }
}

/// A finished fenced execution's report.
struct FencedInfo {
    status: ErrorStatus,
    since_launch: Timing,
    since_fence: Timing,
}

impl IFencedExecutionCallback for FencedInfo {
    fn get_execution_info(&self) -> (ErrorStatus, Timing, Timing) {
        (self.status, self.since_launch, self.since_fence)
    }
}

impl IPreparedModel for VnpuPreparedModel {
    fn execute_1_3(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
        callback: Option<Arc<dyn ExecutionCallback>>,
    ) -> ErrorStatus {
        let Some(callback) = callback else {
            return ErrorStatus::InvalidArgument;
        };
        if let Err(e) = validate_request(request, &self.plan.model, true) {
            tracing::debug!("request: {e}");
            callback.notify(ErrorStatus::InvalidArgument, Vec::new(), Timing::NONE);
            return ErrorStatus::InvalidArgument;
        }
        let Some(me) = self.me.upgrade() else {
            callback.notify(ErrorStatus::GeneralFailure, Vec::new(), Timing::NONE);
            return ErrorStatus::GeneralFailure;
        };
        let request = request.clone();
        let run = {
            let callback = Arc::clone(&callback);
            Box::new(move || {
                let (status, shapes, timing) =
                    me.execute_synchronously_1_3(&request, measure, deadline, loop_timeout);
                callback.notify(status, shapes, timing);
            })
        };
        let on_panic = {
            let callback = Arc::clone(&callback);
            Box::new(move || callback.notify(ErrorStatus::GeneralFailure, Vec::new(), Timing::NONE))
        };
        // Back-pressure: wait for room in the bounded queue, then give up clearly.
        let queued = self
            .executions
            .submit(0, Job { run, on_panic }, self.submit_wait);
        if queued.is_err() {
            let status = ErrorStatus::ResourceExhaustedTransient;
            callback.notify(status, Vec::new(), Timing::NONE);
            return status;
        }
        ErrorStatus::None
    }

    fn execute_synchronously_1_3(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
    ) -> (ErrorStatus, Vec<OutputShape>, Timing) {
        self.run(
            request,
            measure,
            deadline,
            loop_timeout,
            Instant::now(),
            Via::default(),
        )
    }

    /// As the sample driver: the fences are waited on and the execution runs on the
    /// caller's thread; the returned fence is signalled before the call returns.
    fn execute_fenced(
        &self,
        request: &Request,
        wait_for: &[NativeHandle],
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
        duration: OptionalTimeoutDuration,
    ) -> FencedResult {
        if let Err(e) = validate_request(request, &self.plan.model, false) {
            tracing::debug!("fenced request: {e}");
            return (ErrorStatus::InvalidArgument, None, None);
        }
        fenced(wait_for, deadline, duration, |deadline, fenced_at| {
            let via = Via {
                fenced: true,
                ..Via::default()
            };
            self.run(request, measure, deadline, loop_timeout, fenced_at, via)
        })
    }

    /// The burst runs on its own thread, executing each packet synchronously.
    fn configure_execution_burst(
        &self,
        callback: Arc<dyn crate::interface::IBurstCallback>,
        request_channel: std::os::fd::BorrowedFd<'_>,
        result_channel: std::os::fd::BorrowedFd<'_>,
    ) -> crate::interface::BurstResult {
        let Some(me) = self.me.upgrade() else {
            return (ErrorStatus::GeneralFailure, None);
        };
        let (start, spin) = self.burst;
        start(me, callback, request_channel, result_channel, spin)
    }

    fn create_reusable_execution(
        &self,
        request: &Request,
        measure: MeasureTiming,
        loop_timeout: OptionalTimeoutDuration,
    ) -> Result<Arc<dyn crate::interface::IReusableExecution>, ErrorStatus> {
        let me = self.me.upgrade().ok_or(ErrorStatus::GeneralFailure)?;
        let run = ReusableRun::new(me, request, measure, loop_timeout)?;
        Ok(Arc::new(run))
    }

    fn configure_memory_token_burst(
        &self,
    ) -> Result<Arc<dyn crate::interface::IMemoryTokenBurst>, ErrorStatus> {
        let me = self.me.upgrade().ok_or(ErrorStatus::GeneralFailure)?;
        Ok(Arc::new(MemoryTokenBurst::new(me)))
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }

    fn domain_role(&self, io: Io, index: u32) -> Option<DomainRole> {
        let main = &self.plan.model.main;
        let indexes = match io {
            Io::Input => &main.input_indexes,
            Io::Output => &main.output_indexes,
        };
        Some(DomainRole {
            model: self.id,
            device: Arc::as_ptr(&self.hw) as usize,
            operand: indexes
                .get(index as usize)
                .and_then(|&i| main.operands.get(i as usize))
                .cloned(),
        })
    }
}
