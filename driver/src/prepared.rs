//! A prepared model: the compiled program and its constants resident in device DRAM,
//! and execution of requests on the device.

use std::any::Any;
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use vnpu_emu::engine::compute::REPORT_ENTRY;
use vnpu_emu::iommu::Perm;
use vnpu_emu::shm::SharedRegion;

use crate::compile::constants::Constants;
use crate::compile::{self, Compiled, ConstantBlock};
use crate::device::{ModelContext, ModelLease};
use crate::domain::{transfer, BufferRegistry, DriverBuffer, Io, Role};
use crate::fence::{self, SyncFence};
use crate::hal::{
    validate_request, DataLocation, ErrorStatus, MeasureTiming, Memory, Model, NativeHandle,
    OptionalTimePoint, OptionalTimeoutDuration, OutputShape, Request, RequestArgument,
    RequestMemoryPool, Timing, MEMORY_ASHMEM, MEMORY_MMAP_FD,
};
use crate::hw::{Command, DramBlock, Hardware, HwError, IoMapping, Status};
use crate::hwbuf::HwUse;
use crate::interface::{ExecutionCallback, FencedResult, IFencedExecutionCallback, IPreparedModel};
use crate::memory::{open_pool, read_range, OpenPool, PoolRange};
use crate::staging::{Span, StagedPool};
use crate::workers::{Job, WorkerPool};

/// Input shapes, the values of deferred inputs, and the inputs the request omits.
type InstanceKey = (Vec<Vec<usize>>, Vec<(u32, Vec<u8>)>, Vec<u32>);

/// The program for one set of input shapes, resident on the device with its arena.
struct Instance {
    compiled: Compiled,
    arena: DramBlock,
    program: DramBlock,
    program_len: u64,
    /// The timing model's time for the program (the watchdog's yardstick).
    program_ns: u64,
}

/// Constant values for one instance: the model's, with a request's deferred values.
type KeyConstants<'a> = std::borrow::Cow<'a, Vec<Option<Vec<u8>>>>;

/// Compiled instances by input shapes, least recently used evicted first.
#[derive(Default)]
struct Instances {
    map: HashMap<InstanceKey, (u64, Arc<Mutex<Instance>>)>,
    tick: u64,
    /// The device epoch the constants were uploaded in (see [`Hardware::epoch`]).
    epoch: u64,
}

/// A compiled instance's program, built for its device addresses (a fresh arena, the
/// constants at their base), ready to upload.
pub struct BuiltProgram {
    compiled: Compiled,
    arena: DramBlock,
    /// The encoded program.
    pub bytes: Vec<u8>,
    /// The timing model's time for the program.
    program_ns: u64,
}

impl BuiltProgram {
    /// Allocates an arena for `compiled` and builds its program over the constants laid
    /// out by `block` at device address `const_base`.
    pub fn new(
        hw: &Arc<Hardware>,
        compiled: Compiled,
        block: &ConstantBlock,
        const_base: u64,
    ) -> Result<BuiltProgram, ErrorStatus> {
        let arena = hw
            .alloc_dram(compiled.arena_size)
            .map_err(|e| hw_status(&e))?;
        let program = compiled
            .program(block, const_base, arena.addr)
            .map_err(|e| e.status())?;
        let program_ns = hw.device().timing().program_ns(&program);
        Ok(BuiltProgram {
            bytes: program.encode(),
            compiled,
            arena,
            program_ns,
        })
    }
}

impl BuiltProgram {
    /// Allocates an arena for `compiled` and moves `program`, saved with constants at
    /// base 0 and the arena at `arena_tag`, to the constants at `const_base` (`const_len`
    /// bytes) and the new arena; `None` if a tensor lies outside both.
    pub fn relocated(
        hw: &Arc<Hardware>,
        compiled: Compiled,
        (mut program, program_ns): (Vec<u8>, u64),
        (const_base, const_len): (u64, u64),
        arena_tag: u64,
    ) -> Result<Option<BuiltProgram>, HwError> {
        let arena = hw.alloc_dram(compiled.arena_size)?;
        let arena_size = compiled.arena_size;
        let moved = vnpu_emu::program::relocate(&mut program, |addr, len| {
            let (off, base, size) = match addr.checked_sub(arena_tag) {
                Some(off) => (off, arena.addr, arena_size),
                None => (addr, const_base, const_len),
            };
            let end = off.checked_add(len)?;
            (end <= size).then_some(base + off)
        });
        Ok(moved.ok().map(|()| BuiltProgram {
            compiled,
            arena,
            bytes: program,
            program_ns,
        }))
    }
}

/// What the compilation cache saves of a prepared model ([`VnpuPreparedModel::cache_parts`]).
pub struct CacheParts<'a> {
    /// The model.
    pub model: &'a Model,
    /// Every operand's constant bytes.
    pub constants: &'a [Option<Vec<u8>>],
    /// The constant tensors as the device holds them.
    pub block: &'a ConstantBlock,
    /// The program for the model's own input shapes, when they are known.
    pub instance: Option<crate::cache::format::Instance>,
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
    model: Model,
    constants: Constants,
    /// The constant layout (its bytes are empty in a model restored from the cache).
    block: ConstantBlock,
    const_mem: Option<DramBlock>,
    /// Executions of one instance share its arena, so they take turns.
    instances: Mutex<Instances>,
    max_instances: usize,
    /// Model inputs read by the host at execution (see `compile::deferred_inputs`).
    deferred: Vec<bool>,
    /// Where asynchronous executions run, and how long a submission may wait for room.
    executions: Arc<WorkerPool>,
    submit_wait: std::time::Duration,
    /// File I/O for staged request pools.
    io: Arc<crate::cache::CacheIo>,
    /// Held for the prepared model's life: the device counts live prepared models.
    _lease: ModelLease,
}

/// The HAL code for a hardware-layer error.
pub(crate) fn hw_status(e: &HwError) -> ErrorStatus {
    tracing::debug!("device: {e}");
    match e {
        HwError::Lost => ErrorStatus::DeviceUnavailable,
        HwError::Hung | HwError::Reset => ErrorStatus::GeneralFailure,
        HwError::Command {
            status: Some(Status::LoopTimeout),
            ..
        } => ErrorStatus::MissedDeadlineTransient,
        HwError::OutOfDeviceMemory(_) | HwError::OutOfIova(_) => {
            ErrorStatus::ResourceExhaustedTransient
        }
        _ => ErrorStatus::GeneralFailure,
    }
}

/// Copies host bytes into fresh device DRAM through a staging buffer and one DMA, in
/// device epoch `epoch`.
fn upload(hw: &Arc<Hardware>, bytes: &[u8], epoch: u64) -> Result<DramBlock, HwError> {
    let block = hw.alloc_dram(bytes.len() as u64)?;
    upload_into(hw, bytes, block.addr, epoch)?;
    Ok(block)
}

/// Copies host bytes to device address `addr` (one DMA), in device epoch `epoch`.
pub(crate) fn upload_into(
    hw: &Arc<Hardware>,
    bytes: &[u8],
    addr: u64,
    epoch: u64,
) -> Result<(), HwError> {
    if bytes.is_empty() {
        return Ok(());
    }
    let staging =
        SharedRegion::new("vnpu-staging", bytes.len()).map_err(vnpu_emu::DeviceError::from)?;
    staging
        .write(0, bytes)
        .map_err(vnpu_emu::DeviceError::from)?;
    let map = hw.map(staging.fd(), 0, bytes.len() as u64, Perm::READ)?;
    hw.run(
        vec![dma(map.iova, addr, bytes.len() as u64)],
        0,
        Some(epoch),
    )?;
    Ok(())
}

/// A DMA copy command.
pub(crate) fn dma(src: u64, dst: u64, len: u64) -> Command {
    Command::DmaCopy { src, dst, len }
}

impl VnpuPreparedModel {
    /// Uploads the constants and, when the model's input shapes are known, compiles and
    /// uploads the program, so that errors surface at preparation.
    pub fn prepare(
        ctx: &ModelContext,
        model: Model,
        constants: Vec<Option<Vec<u8>>>,
        lease: ModelLease,
    ) -> Result<Arc<VnpuPreparedModel>, ErrorStatus> {
        let mut constants = constants;
        let folded = compile::fold_constants(&model, &mut constants);
        if folded > 0 {
            tracing::debug!("folded {folded} constant operations");
        }
        let block = compile::constant_block(&model.main, &constants);
        let has_deferred = compile::deferred_inputs(&model.main).contains(&true);
        let epoch = ctx.hw.epoch();
        let const_mem = if block.bytes.is_empty() {
            None
        } else {
            Some(upload(&ctx.hw, &block.bytes, epoch).map_err(|e| hw_status(&e))?)
        };
        let constants = Constants::ready(constants);
        let prepared = Self::assemble(ctx, model, constants, block, const_mem, epoch, lease);
        if let (Some(shapes), false) = (prepared.known_input_shapes(), has_deferred) {
            prepared.instance(&(shapes, Vec::new(), Vec::new()), epoch)?;
        }
        Ok(prepared)
    }

    fn assemble(
        ctx: &ModelContext,
        model: Model,
        constants: Constants,
        block: ConstantBlock,
        const_mem: Option<DramBlock>,
        epoch: u64,
        lease: ModelLease,
    ) -> Arc<VnpuPreparedModel> {
        let deferred = compile::deferred_inputs(&model.main);
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Arc::new_cyclic(|me| VnpuPreparedModel {
            me: me.clone(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            buffers: Arc::clone(&ctx.buffers),
            hw: Arc::clone(&ctx.hw),
            model,
            constants,
            block,
            const_mem,
            instances: Mutex::new(Instances {
                epoch,
                ..Instances::default()
            }),
            max_instances: ctx.max_instances.max(1),
            deferred,
            executions: Arc::clone(&ctx.executions),
            submit_wait: ctx.submit_wait,
            io: Arc::clone(&ctx.io),
            _lease: lease,
        })
    }

    /// A prepared model rebuilt from a verified compilation cache: its constants already
    /// in device memory (`const_mem`, laid out by `block`, whose bytes are empty, uploaded
    /// in device epoch `epoch`), the program built for the model's own input shapes
    /// already uploaded to its device memory, other constants made on first need.
    #[allow(clippy::too_many_arguments)]
    pub fn restore(
        ctx: &ModelContext,
        model: Model,
        constants: Constants,
        block: ConstantBlock,
        const_mem: Option<DramBlock>,
        instance: Option<(Vec<Vec<usize>>, BuiltProgram, DramBlock)>,
        epoch: u64,
        lease: ModelLease,
    ) -> Arc<VnpuPreparedModel> {
        let prepared = Self::assemble(ctx, model, constants, block, const_mem, epoch, lease);
        if let Some((shapes, built, program)) = instance {
            prepared.keep((shapes, Vec::new(), Vec::new()), built, program, epoch);
        }
        prepared
    }

    /// What the compilation cache saves: the model, its constants, their device layout
    /// and, when the input shapes are known, the program compiled for them.
    pub fn cache_parts(&self) -> CacheParts<'_> {
        let instance = self.known_input_shapes().and_then(|shapes| {
            let key = (shapes.clone(), Vec::new(), Vec::new());
            let all = self.instances.lock().unwrap_or_else(|p| p.into_inner());
            let inst = all
                .map
                .get(&key)?
                .1
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let compiled = inst.compiled.clone();
            let tag = crate::cache::format::ARENA_TAG;
            let program = compiled.program(&self.block, 0, tag).ok()?;
            Some(crate::cache::format::Instance {
                input_shapes: shapes,
                program: program.encode(),
                program_ns: inst.program_ns,
                compiled,
            })
        });
        CacheParts {
            model: &self.model,
            constants: self.constants.get(),
            block: &self.block,
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
        &self.model
    }

    /// NN's `HalManagedBuffer::validateRequest` for every driver-managed buffer in the
    /// request: each argument's role, state and dimensions, and no buffer written by one
    /// argument and used by another. Returns, per input, the dimensions its buffer gives.
    /// Maps a shared-memory pool into the device's IOMMU for as long as the returned pin
    /// lives (a burst's slot cache keeps it); `None` for memory that is not a sealed
    /// "ashmem" or "mmap_fd" pool (executions then map it each time, or stage it).
    pub fn pin(&self, m: &Memory) -> Option<Arc<PinnedPool>> {
        if !matches!(m.name.as_str(), MEMORY_ASHMEM | MEMORY_MMAP_FD) {
            return None;
        }
        let r = open_pool(m, Perm::READ, HwUse::Execution).ok()?;
        if !r.mappable() {
            return None;
        }
        let key = PinKey::of(&r)?;
        let map = self.hw.map(r.fd, r.offset, r.size, r.perm).ok()?;
        Some(Arc::new(PinnedPool {
            map,
            key,
            memory: m.clone(),
        }))
    }

    /// executeSynchronously_1_3 with the request's pools already mapped where `pins` has
    /// them (by pool index): a burst's executions. `memo` is the burst's last execution:
    /// used if it serves this request, replaced by this one's otherwise.
    pub fn execute_pinned(
        &self,
        request: &Request,
        measure: MeasureTiming,
        pins: &[Option<Arc<PinnedPool>>],
        memo: &mut Option<BurstMemo>,
    ) -> (ErrorStatus, Vec<OutputShape>, Timing) {
        let start = Instant::now();
        if let Some(m) = memo
            .as_ref()
            .filter(|m| m.serves(request, pins, self.hw.epoch()))
        {
            let _arena = m.instance.lock().unwrap_or_else(|p| p.into_inner());
            return match self.hw.run(m.cmds.clone(), m.program_ns, Some(m.epoch)) {
                Ok(done) => {
                    let timing = match measure == MeasureTiming::YES {
                        true => {
                            measured(start, done.iter().map(|c| c.device_ns).sum::<u64>() / 1000)
                        }
                        false => Timing::NONE,
                    };
                    (ErrorStatus::None, m.shapes.clone(), timing)
                }
                Err(e) => (hw_status(&e), Vec::new(), Timing::NONE),
            };
        }
        *memo = None;
        self.run(
            request,
            measure,
            OptionalTimePoint::NONE,
            OptionalTimeoutDuration::default(),
            start,
            Via {
                fenced: false,
                pins,
                memo: Some(memo),
            },
        )
    }

    fn check_buffers(
        &self,
        request: &Request,
        pools: &[ReqPool<'_>],
    ) -> Result<Vec<Option<Vec<u32>>>, ErrorStatus> {
        let mut uses = vec![(0u32, 0u32); pools.len()];
        let mut input_dims = vec![None; request.inputs.len()];
        for (io, args) in [(Io::Input, &request.inputs), (Io::Output, &request.outputs)] {
            for (k, arg) in args.iter().enumerate() {
                let p = arg.location.pool_index as usize;
                let Some(ReqPool::Device(b)) = pools.get(p).filter(|_| !arg.has_no_value) else {
                    continue;
                };
                let role = Role {
                    model: self.id,
                    io,
                    index: k as u32,
                };
                let dims = b.check_use(role, &arg.dimensions)?;
                match io {
                    Io::Input => {
                        uses[p].0 += 1;
                        input_dims[k] = Some(dims);
                    }
                    Io::Output => uses[p].1 += 1,
                }
            }
        }
        if uses.iter().any(|&(i, o)| o > 1 || (o == 1 && i > 0)) {
            tracing::debug!(
                "request: a driver-managed buffer written by one argument and used by another"
            );
            return Err(ErrorStatus::InvalidArgument);
        }
        Ok(input_dims)
    }

    /// The model's input shapes when it fixes them all.
    fn known_input_shapes(&self) -> Option<Vec<Vec<usize>>> {
        self.model
            .main
            .input_indexes
            .iter()
            .map(|&i| {
                let d = &self.model.main.operands.get(i as usize)?.dimensions;
                (!d.contains(&0)).then(|| d.iter().map(|&x| x as usize).collect())
            })
            .collect()
    }

    fn const_base(&self) -> u64 {
        self.const_mem.as_ref().map_or(0, |b| b.addr)
    }

    /// Brings the model back after a device reset (which clears device memory): uploads
    /// the constants again to the same addresses and drops the compiled instances, which
    /// are recompiled on use. Returns the epoch the model is resident in.
    fn ensure_resident(&self) -> Result<u64, ErrorStatus> {
        let mut all = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.hw.epoch();
        if all.epoch == now {
            return Ok(now);
        }
        all.map.clear();
        if self.const_mem.is_some() && self.block.bytes.is_empty() {
            // Restored from the compilation cache, the constants live only in device
            // memory (no second host copy of the weights): after a reset the model is dead;
            // its client prepares it from the cache files again.
            tracing::info!("device was reset: a model restored from the cache is dead");
            return Err(ErrorStatus::GeneralFailure);
        }
        tracing::info!("device was reset: uploading the model's constants again");
        if let Some(mem) = &self.const_mem {
            upload_into(&self.hw, &self.block.bytes, mem.addr, now).map_err(|e| hw_status(&e))?;
        }
        all.epoch = now;
        Ok(now)
    }

    /// What compiling for `key` takes beyond the model: the constants with the request's
    /// deferred values, and the inputs it omits.
    fn compile_inputs(&self, key: &InstanceKey) -> (KeyConstants<'_>, Vec<bool>) {
        let mut constants = std::borrow::Cow::Borrowed(self.constants.get());
        for (i, v) in &key.1 {
            constants.to_mut()[*i as usize] = Some(v.clone());
        }
        let mut omitted = vec![false; self.model.main.operands.len()];
        for &i in &key.2 {
            omitted[i as usize] = true;
        }
        (constants, omitted)
    }

    /// The instance for these input shapes, compiling and uploading it if new.
    fn instance(&self, key: &InstanceKey, epoch: u64) -> Result<Arc<Mutex<Instance>>, ErrorStatus> {
        {
            let mut all = self.instances.lock().unwrap_or_else(|p| p.into_inner());
            all.tick += 1;
            let tick = all.tick;
            if let Some((used, i)) = all.map.get_mut(key) {
                *used = tick;
                return Ok(Arc::clone(i));
            }
        }
        let (constants, omitted) = self.compile_inputs(key);
        let compiled =
            compile::compile(&self.model, &constants, &key.0, &omitted).map_err(|e| {
                tracing::debug!("compile: {e}");
                e.status()
            })?;
        self.install(key.clone(), compiled, epoch)
    }

    /// Replaces the instance for `key`, whose program (`before`) let a growing loop state
    /// outgrow its room, by one with twice the room.
    fn instance_larger(
        &self,
        key: InstanceKey,
        before: &Compiled,
        epoch: u64,
    ) -> Result<Arc<Mutex<Instance>>, ErrorStatus> {
        let (constants, omitted) = self.compile_inputs(&key);
        let compiled = compile::compile_larger(&self.model, &constants, &key.0, &omitted, before)
            .map_err(|e| {
            tracing::debug!("compile: {e}");
            e.status()
        })?;
        self.install(key, compiled, epoch)
    }

    /// Uploads the program of `compiled` with a fresh arena and keeps it for `key`.
    fn install(
        &self,
        key: InstanceKey,
        compiled: Compiled,
        epoch: u64,
    ) -> Result<Arc<Mutex<Instance>>, ErrorStatus> {
        let built = BuiltProgram::new(&self.hw, compiled, &self.block, self.const_base())?;
        let program = upload(&self.hw, &built.bytes, epoch).map_err(|e| hw_status(&e))?;
        Ok(self.keep(key, built, program, epoch))
    }

    /// Keeps a built program, uploaded to `program` in device epoch `epoch`, for `key`.
    fn keep(
        &self,
        key: InstanceKey,
        built: BuiltProgram,
        program: DramBlock,
        epoch: u64,
    ) -> Arc<Mutex<Instance>> {
        let inst = Arc::new(Mutex::new(Instance {
            program_len: built.bytes.len() as u64,
            compiled: built.compiled,
            arena: built.arena,
            program,
            program_ns: built.program_ns,
        }));
        let mut all = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        while all.map.len() >= self.max_instances {
            let Some(lru) = all
                .map
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            all.map.remove(&lru);
        }
        // An instance uploaded before a reset is not kept (its program is gone).
        if all.epoch == epoch {
            all.tick += 1;
            let tick = all.tick;
            all.map.insert(key, (tick, Arc::clone(&inst)));
        }
        inst
    }

    /// The whole synchronous execution path; `start` is when the driver got the work
    /// (timeInDriver counts from it); fenced execution disallows unspecified outputs.
    fn run(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
        start: Instant,
        via: Via<'_>,
    ) -> (ErrorStatus, Vec<OutputShape>, Timing) {
        let Via {
            fenced,
            pins,
            mut memo,
        } = via;
        let fail = |s: ErrorStatus| (s, Vec::new(), Timing::NONE);
        if let Err(e) = validate_request(request, &self.model, !fenced) {
            tracing::debug!("request: {e}");
            return fail(ErrorStatus::InvalidArgument);
        }
        if deadline.has_passed() {
            return fail(ErrorStatus::MissedDeadlinePersistent);
        }
        let sg = &self.model.main;
        let mut pools = Vec::with_capacity(request.pools.len());
        // Pools a burst pinned, and that are still the very memory pinned.
        let mut pinned: Vec<Option<&Arc<PinnedPool>>> = vec![None; request.pools.len()];
        for (k, p) in request.pools.iter().enumerate() {
            match p {
                RequestMemoryPool::HidlMemory(m) => {
                    let pin = pins.get(k).and_then(Option::as_ref);
                    let open = match pin.and_then(|pin| pin.open(m)) {
                        Some(r) => {
                            pinned[k] = pin;
                            Ok(r)
                        }
                        None => open_pool(m, access(request, k), HwUse::Execution),
                    };
                    match open {
                        Ok(r) => pools.push(ReqPool::Host(r)),
                        Err(e) => {
                            tracing::debug!("request pool: {e}");
                            return fail(ErrorStatus::GeneralFailure);
                        }
                    }
                }
                RequestMemoryPool::Token(t) => match self.buffers.get(*t) {
                    Some(b) => pools.push(ReqPool::Device(b)),
                    None => {
                        tracing::debug!("request pool: unknown token {t}");
                        return fail(ErrorStatus::InvalidArgument);
                    }
                },
            }
        }
        let buffer_dims = match self.check_buffers(request, &pools) {
            Ok(d) => d,
            Err(s) => return fail(s),
        };
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
            if !self.deferred[i as usize] || arg.has_no_value {
                continue;
            }
            let loc = &arg.location;
            match pools
                .get(loc.pool_index as usize)
                .map(|p| p.read(&self.hw, loc.offset as u64, p.room(loc) as usize))
            {
                Some(Ok(v)) => values.push((i, v)),
                _ => return fail(ErrorStatus::GeneralFailure),
            }
        }
        let omitted: Vec<u32> = sg
            .input_indexes
            .iter()
            .zip(&request.inputs)
            .filter(|(_, a)| a.has_no_value)
            .map(|(&i, _)| i)
            .collect();
        let epoch = match self.ensure_resident() {
            Ok(e) => e,
            Err(s) => return fail(s),
        };
        let key = (shapes, values, omitted);
        // A growing loop state that outgrows its room makes the program larger, a few
        // times at most (each time doubling the room).
        let mut overflowed: Option<Compiled> = None;
        for _ in 0..MAX_REGROWS {
            let got = match &overflowed {
                None => self.instance(&key, epoch),
                Some(before) => self.instance_larger(key.clone(), before, epoch),
            };
            let instance = match got {
                Ok(i) => i,
                Err(s) => return fail(s),
            };
            // A buffer written before a reset that happened since it was checked is lost.
            let stale = request.inputs.iter().any(|a| {
                matches!(pools.get(a.location.pool_index as usize),
                    Some(ReqPool::Device(b)) if !a.has_no_value && b.readable_epoch() != Some(epoch))
            });
            if stale {
                return fail(ErrorStatus::GeneralFailure);
            }
            let inst = instance.lock().unwrap_or_else(|p| p.into_inner());
            let c = &inst.compiled;
            let room = |a: &RequestArgument| {
                pools
                    .get(a.location.pool_index as usize)
                    .map_or(a.location.length as u64, |p| p.room(&a.location))
            };
            // An input is read whole: a location shorter than its (now known) size is refused
            // before the device reads anything.
            for (&i, arg) in sg.input_indexes.iter().zip(&request.inputs) {
                if !arg.has_no_value && c.byte_len(i) > room(arg) {
                    tracing::debug!("input operand {i}: location shorter than its data");
                    return fail(ErrorStatus::InvalidArgument);
                }
            }
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
            let mut shapes_out = if dynamic_outputs {
                Vec::new()
            } else {
                match sized_outputs(c, &static_shapes, request, &pools, &room) {
                    Ok(s) => s,
                    Err(e) => return e,
                }
            };
            let moved = |args: &[RequestArgument], ops: &[u32], pool: usize| -> Vec<Span> {
                args.iter()
                    .zip(ops)
                    .filter(|(a, &i)| {
                        !a.has_no_value
                            && a.location.pool_index as usize == pool
                            && c.byte_len(i) > 0
                            && !self.deferred[i as usize]
                    })
                    .map(|(a, &i)| (a.location.offset as u64, c.byte_len(i)))
                    .collect()
            };
            let mut devpools: Vec<DevicePool> = Vec::with_capacity(pools.len());
            for (p, r) in pools.iter().enumerate() {
                let r = match r {
                    ReqPool::Host(r) => r,
                    ReqPool::Device(b) => {
                        devpools.push(DevicePool::Driver(b.addr()));
                        continue;
                    }
                };
                // A burst's pin serves only the very memory it maps: the same
                // descriptor (checked above), or the same file range.
                let pinned = pinned[p].or_else(|| {
                    pins.get(p)
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
                match pool {
                    Ok(d) => devpools.push(d),
                    Err(s) => return fail(s),
                }
            }
            let (cb, ab) = (self.const_base(), inst.arena.addr);
            let addr = |i: u32| c.address(i, &self.block, cb, ab);
            let iova = |pool: u32, off: u32| devpools.get(pool as usize).and_then(|d| d.iova(off));
            // Input copies, two fences, the run and output copies.
            let mut cmds = Vec::with_capacity(request.inputs.len() + request.outputs.len() + 3);
            for (&i, arg) in sg.input_indexes.iter().zip(&request.inputs) {
                let len = c.byte_len(i);
                if arg.has_no_value || len == 0 || self.deferred[i as usize] {
                    continue;
                }
                match (iova(arg.location.pool_index, arg.location.offset), addr(i)) {
                    (Some(src), Some(dst)) => cmds.push(dma(src, dst, len)),
                    _ => return fail(ErrorStatus::GeneralFailure),
                }
            }
            cmds.push(Command::Fence);
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
                    Err(e) if grows(&e) => {
                        overflowed = Some(inst.compiled.clone());
                        continue;
                    }
                    Err(e) => return fail(hw_status(&e)),
                },
                false => None,
            };
            cmds.push(Command::RunProgram {
                addr: inst.program.addr,
                len: inst.program_len,
                loop_timeout_ns: loop_ns,
                report: report.as_ref().map_or(0, |b| b.addr),
            });
            cmds.push(Command::Fence);
            let mut done = Vec::new();
            if let Some(report) = &report {
                // Run first, read the shapes the run produced, then size the outputs.
                match self
                    .hw
                    .run(std::mem::take(&mut cmds), program_ns, Some(epoch))
                {
                    Ok(d) => done.extend(d),
                    Err(e) if grows(&e) => {
                        overflowed = Some(inst.compiled.clone());
                        continue;
                    }
                    Err(e) => return fail(hw_status(&e)),
                }
                let len = c.reported().len() as u64 * REPORT_ENTRY;
                let real =
                    match crate::domain::transfer::dram_to_bytes(&self.hw, report.addr, len, epoch)
                        .ok()
                        .and_then(|b| c.parse_report(&b))
                    {
                        Some(r) => r,
                        None => return fail(ErrorStatus::GeneralFailure),
                    };
                let shapes: Vec<(u32, Vec<usize>)> = static_shapes
                    .into_iter()
                    .map(|(o, s)| match real.iter().find(|(i, _)| *i == o) {
                        Some((_, r)) => (o, r.clone()),
                        None => (o, s),
                    })
                    .collect();
                shapes_out = match sized_outputs(c, &shapes, request, &pools, &room) {
                    Ok(s) => s,
                    Err(e) => return e,
                };
            }
            for ((&o, arg), shape) in sg
                .output_indexes
                .iter()
                .zip(&request.outputs)
                .zip(&shapes_out)
            {
                let dims: Vec<usize> = shape.dimensions.iter().map(|&d| d as usize).collect();
                let len = c.bytes_in(o, &dims);
                if len == 0 {
                    continue;
                }
                match (addr(o), iova(arg.location.pool_index, arg.location.offset)) {
                    (Some(src), Some(dst)) => cmds.push(dma(src, dst, len)),
                    _ => return fail(ErrorStatus::GeneralFailure),
                }
            }
            // A burst keeps what it can run again as is: all pools pinned, static
            // outputs, no deferred values.
            let pinned_all: Option<Vec<Arc<PinnedPool>>> = devpools
                .iter()
                .map(|d| match d {
                    DevicePool::Pinned(p) => Some(Arc::clone(p)),
                    _ => None,
                })
                .collect();
            let again = match (&memo, pinned_all) {
                (Some(_), Some(pins)) if report.is_none() && key.1.is_empty() => {
                    Some((pins, cmds.clone()))
                }
                _ => None,
            };
            match self.hw.run(cmds, program_ns, Some(epoch)) {
                Ok(d) => done.extend(d),
                Err(e) if grows(&e) => {
                    overflowed = Some(inst.compiled.clone());
                    continue;
                }
                Err(e) => return fail(hw_status(&e)),
            }
            if let (Some(slot), Some((pins, cmds))) = (memo.as_deref_mut(), again) {
                *slot = Some(BurstMemo {
                    inputs: request.inputs.clone(),
                    outputs: request.outputs.clone(),
                    pins,
                    instance: Arc::clone(&instance),
                    cmds,
                    program_ns,
                    epoch,
                    shapes: shapes_out.clone(),
                });
            }
            for (d, r) in devpools.iter().zip(&pools) {
                let ReqPool::Host(r) = r else { continue };
                if let Err(e) = d.write_back(&self.io, r) {
                    tracing::debug!("staged pool write-back: {e}");
                    return fail(ErrorStatus::GeneralFailure);
                }
            }
            drop(devpools);
            for (arg, shape) in request.outputs.iter().zip(&shapes_out) {
                if let Some(ReqPool::Device(b)) = pools.get(arg.location.pool_index as usize) {
                    b.written(shape.dimensions.clone(), epoch);
                }
            }
            // The device cannot stop a program midway; a deadline that passed while it ran is
            // still a missed deadline (as NN's executor reports one found between operations).
            if deadline.has_passed() {
                return fail(ErrorStatus::MissedDeadlineTransient);
            }
            let timing = if measure == MeasureTiming::YES {
                let on_device = done.iter().map(|c| c.device_ns).sum::<u64>() / 1000;
                measured(start, on_device)
            } else {
                Timing::NONE
            };
            return (ErrorStatus::None, shapes_out, timing);
        }
        tracing::debug!("a loop state kept outgrowing its capacity");
        fail(ErrorStatus::GeneralFailure)
    }
}

/// How many times one execution may grow its program's dynamic capacities.
const MAX_REGROWS: usize = 8;

/// Whether a device failure is a dynamic tensor outgrowing its capacity.
fn grows(e: &HwError) -> bool {
    matches!(
        e,
        HwError::Command {
            status: Some(Status::CapacityExceeded),
            ..
        }
    )
}

/// The loop timeout an execution asks for, in ns: 2 s unless set, at most 15 s (the
/// HAL's default and maximum).
fn loop_timeout_ns(t: OptionalTimeoutDuration) -> u64 {
    const DEFAULT_NS: u64 = 2_000_000_000;
    const MAX_NS: u64 = 15_000_000_000;
    t.0.unwrap_or(DEFAULT_NS).min(MAX_NS)
}

/// The output shapes of an execution and whether each fits its location: the error to
/// return when one does not (OUTPUT_INSUFFICIENT_SIZE with the shapes, or GENERAL_FAILURE
/// for a driver-managed buffer, which cannot grow).
fn sized_outputs(
    c: &Compiled,
    shapes: &[(u32, Vec<usize>)],
    request: &Request,
    pools: &[ReqPool<'_>],
    room: &dyn Fn(&RequestArgument) -> u64,
) -> Result<Vec<OutputShape>, (ErrorStatus, Vec<OutputShape>, Timing)> {
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
fn measured(start: Instant, on_device: u64) -> Timing {
    let in_driver = start.elapsed().as_micros() as u64;
    Timing {
        time_on_device: on_device.min(in_driver),
        time_in_driver: in_driver,
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

/// What the device does with request pool `pool`: reads it, and writes it too when an
/// output lives there (a hardware buffer is locked for exactly that).
/// How an execution arrives: fenced (unspecified outputs refused), and the pools a burst
/// keeps mapped, by request pool index.
#[derive(Default)]
struct Via<'a> {
    fenced: bool,
    pins: &'a [Option<Arc<PinnedPool>>],
    /// Where a burst keeps its last execution ([`BurstMemo`]).
    memo: Option<&'a mut Option<BurstMemo>>,
}

/// A burst's last execution, ready to run again: what validating the request, choosing
/// the instance and building the commands gave. It serves a next request with the very
/// same arguments over the very same pinned memories in the same device epoch (all of
/// which that work depends on), so a burst repeating its request only submits the
/// commands. Made only for requests whose pools are all pinned, whose outputs are
/// statically shaped and which give no deferred input values.
pub struct BurstMemo {
    inputs: Vec<RequestArgument>,
    outputs: Vec<RequestArgument>,
    /// The pins the commands' addresses are in (held: the mappings stay).
    pins: Vec<Arc<PinnedPool>>,
    instance: Arc<Mutex<Instance>>,
    cmds: Vec<Command>,
    program_ns: u64,
    epoch: u64,
    shapes: Vec<OutputShape>,
}

impl BurstMemo {
    /// Whether this is the execution of `request` over `pins` in device epoch `epoch`.
    fn serves(&self, request: &Request, pins: &[Option<Arc<PinnedPool>>], epoch: u64) -> bool {
        self.epoch == epoch
            && self.inputs == request.inputs
            && self.outputs == request.outputs
            && request.pools.len() == self.pins.len()
            && request.pools.iter().zip(&self.pins).enumerate().all(|(k, (p, mine))| {
                matches!(p, RequestMemoryPool::HidlMemory(m)
                    if pins.get(k).and_then(Option::as_ref).is_some_and(|pin| Arc::ptr_eq(pin, mine))
                        && mine.open(m).is_some())
            })
    }
}

/// A shared-memory pool ("ashmem", "mmap_fd") kept mapped in the device's IOMMU while a
/// burst caches its slot, so its executions skip mapping and unmapping it: made by
/// [`VnpuPreparedModel::pin`], used by [`VnpuPreparedModel::execute_pinned`].
pub struct PinnedPool {
    map: IoMapping,
    /// The memory it maps (its fd's file, offset, size and access), to check that a
    /// request's pool is still that memory.
    key: PinKey,
    /// The memory it was made from (its descriptor shared, not duplicated).
    memory: Memory,
}

impl PinnedPool {
    /// `m`'s file range, checked when the pin was made, if `m` is that very memory (the
    /// same open descriptor, kind, size and integers): no system call needed.
    fn open<'m>(&self, m: &'m Memory) -> Option<OpenPool<'m>> {
        let (mine, theirs) = (&self.memory, m);
        let same = mine.name == theirs.name
            && mine.size == theirs.size
            && mine.handle.ints == theirs.handle.ints
            && mine.handle.fds.len() == 1
            && theirs.handle.fds.len() == 1
            && Arc::ptr_eq(&mine.handle.fds[0], &theirs.handle.fds[0]);
        same.then(|| {
            OpenPool::checked(PoolRange {
                fd: theirs.handle.fds[0].as_fd(),
                offset: self.key.offset,
                size: self.key.size,
                perm: self.key.perm,
            })
        })
    }
}

/// What identifies a pinned pool's memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct PinKey {
    dev: u64,
    ino: u64,
    offset: u64,
    size: u64,
    perm: Perm,
}

impl PinKey {
    fn of(r: &PoolRange<'_>) -> Option<PinKey> {
        let st = nix::sys::stat::fstat(r.fd).ok()?;
        Some(PinKey {
            dev: st.st_dev,
            ino: st.st_ino,
            offset: r.offset,
            size: r.size,
            perm: r.perm,
        })
    }
}

fn access(request: &Request, pool: usize) -> Perm {
    let written = request
        .outputs
        .iter()
        .any(|a| !a.has_no_value && a.location.pool_index as usize == pool);
    match written {
        true => Perm::READ_WRITE,
        false => Perm::READ,
    }
}

/// A request pool as the client gave it: host memory or a driver-managed buffer.
enum ReqPool<'a> {
    Host(OpenPool<'a>),
    Device(Arc<DriverBuffer>),
}

impl ReqPool<'_> {
    /// The bytes an argument at `loc` may use: its length, or the whole pool for a
    /// driver-managed buffer or a non-BLOB hardware buffer (whose arguments name it whole).
    fn room(&self, loc: &DataLocation) -> u64 {
        match self {
            ReqPool::Host(r) => r.argument_len(loc.length),
            ReqPool::Device(b) => b.size(),
        }
    }

    /// Reads `len` bytes at `off` (a driver-managed buffer is read whole).
    fn read(&self, hw: &Arc<Hardware>, off: u64, len: usize) -> Result<Vec<u8>, ErrorStatus> {
        match self {
            ReqPool::Host(r) => read_range(r, off, len).map_err(|e| {
                tracing::debug!("request pool: {e}");
                ErrorStatus::GeneralFailure
            }),
            ReqPool::Device(b) => {
                let epoch = b.readable_epoch().ok_or(ErrorStatus::GeneralFailure)?;
                transfer::dram_to_bytes(hw, b.addr(), b.size(), epoch)
            }
        }
    }
}

/// A request pool as the device reaches it: mapped directly (for this execution, or kept
/// by a burst), staged, or device memory.
enum DevicePool {
    Driver(u64),
    Mapped(IoMapping),
    Pinned(Arc<PinnedPool>),
    Staged {
        staged: Option<StagedPool>,
        map: Option<IoMapping>,
        writes: Vec<Span>,
    },
}

impl DevicePool {
    /// The device address of pool offset `off`.
    fn iova(&self, off: u32) -> Option<u64> {
        match self {
            DevicePool::Driver(addr) => Some(addr + off as u64),
            DevicePool::Mapped(m) => Some(m.iova + off as u64),
            DevicePool::Pinned(p) => Some(p.map.iova + off as u64),
            DevicePool::Staged {
                staged: Some(s),
                map: Some(m),
                ..
            } => Some(m.iova + s.offset_of(off as u64)),
            DevicePool::Staged { .. } => None,
        }
    }

    /// Copies the outputs of a staged pool back to its file.
    fn write_back(
        &self,
        io: &crate::cache::CacheIo,
        pool: &PoolRange<'_>,
    ) -> Result<(), crate::memory::PoolError> {
        match self {
            DevicePool::Staged {
                staged: Some(s),
                writes,
                ..
            } => s.write_back(io, pool, writes),
            _ => Ok(()),
        }
    }
}

/// Stages a pool that could shrink (see [`crate::staging`]) and maps the staged copy.
fn stage(
    hw: &Arc<Hardware>,
    io: &crate::cache::CacheIo,
    pool: &PoolRange<'_>,
    spans: &[Span],
    reads: &[Span],
    writes: Vec<Span>,
) -> Result<DevicePool, ErrorStatus> {
    let staged = StagedPool::stage(io, pool, spans, reads).map_err(|e| {
        tracing::debug!("staging a request pool: {e}");
        ErrorStatus::GeneralFailure
    })?;
    let map = match &staged {
        Some(s) => Some(
            hw.map(s.region().fd(), 0, s.region().len() as u64, pool.perm)
                .map_err(|e| hw_status(&e))?,
        ),
        None => None,
    };
    Ok(DevicePool::Staged {
        staged,
        map,
        writes,
    })
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
        if let Err(e) = validate_request(request, &self.model, true) {
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
        let launched = Instant::now();
        let fail = |s: ErrorStatus| (s, None, None);
        if let Err(e) = validate_request(request, &self.model, false) {
            tracing::debug!("fenced request: {e}");
            return fail(ErrorStatus::InvalidArgument);
        }
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
        let fenced = Instant::now();
        let (status, _, since_fence) = self.run(
            request,
            measure,
            deadline,
            loop_timeout,
            fenced,
            Via {
                fenced: true,
                ..Via::default()
            },
        );
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
        crate::burst::server::start(
            me,
            callback,
            request_channel,
            result_channel,
            crate::burst::server::DEFAULT_SPIN,
        )
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
