//! A prepared model: the compiled program and its constants resident in device DRAM,
//! and execution of requests on the device.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use vnpu_emu::iommu::Perm;
use vnpu_emu::ring::{Opcode, SubmissionEntry};
use vnpu_emu::shm::SharedRegion;

use crate::compile::constants::Constants;
use crate::compile::{self, Compiled, ConstantBlock};
use crate::device::{ExecutionCallback, IPreparedModel};
use crate::hal::{
    validate_request, ErrorStatus, MeasureTiming, Model, OptionalTimePoint,
    OptionalTimeoutDuration, OutputShape, Request, RequestMemoryPool, Timing,
};
use crate::hw::{DramBlock, Hardware, HwError, IoMapping};
use crate::memory::{pool_range, read_range};

/// Programs kept per prepared model, one per distinct set of input shapes.
const MAX_INSTANCES: usize = 8;

/// Input shapes, the values of deferred inputs, and the inputs the request omits.
type InstanceKey = (Vec<Vec<usize>>, Vec<(u32, Vec<u8>)>, Vec<u32>);

/// The program for one set of input shapes, resident on the device with its arena.
struct Instance {
    compiled: Compiled,
    arena: DramBlock,
    program: DramBlock,
    program_len: u64,
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
    pub instance: Option<(Vec<Vec<usize>>, Compiled)>,
}

pub struct VnpuPreparedModel {
    /// Itself, so asynchronous executions can outlive the caller's borrow.
    me: std::sync::Weak<VnpuPreparedModel>,
    hw: Arc<Hardware>,
    model: Model,
    constants: Constants,
    /// The constant layout (its bytes are empty in a model restored from the cache).
    block: ConstantBlock,
    const_mem: Option<DramBlock>,
    /// Executions of one instance share its arena, so they take turns.
    instances: Mutex<HashMap<InstanceKey, Arc<Mutex<Instance>>>>,
    /// Model inputs read by the host at execution (see `compile::deferred_inputs`).
    deferred: Vec<bool>,
}

fn hw_status(e: &HwError) -> ErrorStatus {
    tracing::debug!("device: {e}");
    match e {
        HwError::Lost => ErrorStatus::DeviceUnavailable,
        HwError::OutOfDeviceMemory(_) | HwError::OutOfIova(_) => {
            ErrorStatus::ResourceExhaustedTransient
        }
        _ => ErrorStatus::GeneralFailure,
    }
}

/// Copies host bytes into fresh device DRAM through a staging buffer and one DMA.
fn upload(hw: &Arc<Hardware>, bytes: &[u8]) -> Result<DramBlock, HwError> {
    let block = hw.alloc_dram(bytes.len() as u64)?;
    if bytes.is_empty() {
        return Ok(block);
    }
    let staging =
        SharedRegion::new("vnpu-staging", bytes.len()).map_err(vnpu_emu::DeviceError::from)?;
    staging
        .write(0, bytes)
        .map_err(vnpu_emu::DeviceError::from)?;
    let map = hw.map(staging.fd(), 0, bytes.len() as u64, Perm::READ)?;
    hw.run(vec![dma(map.iova, block.addr, bytes.len() as u64)])?;
    Ok(block)
}

/// A DMA copy command.
pub(crate) fn dma(src: u64, dst: u64, len: u64) -> SubmissionEntry {
    SubmissionEntry::new(Opcode::DmaCopy, 0, [src, dst, len, 0, 0, 0])
}

fn fence() -> SubmissionEntry {
    SubmissionEntry::new(Opcode::Fence, 0, [0; 6])
}

impl VnpuPreparedModel {
    /// Uploads the constants and, when the model's input shapes are known, compiles and
    /// uploads the program, so that errors surface at preparation.
    pub fn prepare(
        hw: Arc<Hardware>,
        model: Model,
        constants: Vec<Option<Vec<u8>>>,
    ) -> Result<Arc<VnpuPreparedModel>, ErrorStatus> {
        let block = compile::constant_block(&model.main, &constants);
        let has_deferred = compile::deferred_inputs(&model.main).contains(&true);
        let const_mem = if block.bytes.is_empty() {
            None
        } else {
            Some(upload(&hw, &block.bytes).map_err(|e| hw_status(&e))?)
        };
        let prepared = Self::assemble(hw, model, Constants::ready(constants), block, const_mem);
        if let (Some(shapes), false) = (prepared.known_input_shapes(), has_deferred) {
            prepared.instance((shapes, Vec::new(), Vec::new()))?;
        }
        Ok(prepared)
    }

    fn assemble(
        hw: Arc<Hardware>,
        model: Model,
        constants: Constants,
        block: ConstantBlock,
        const_mem: Option<DramBlock>,
    ) -> Arc<VnpuPreparedModel> {
        let deferred = compile::deferred_inputs(&model.main);
        Arc::new_cyclic(|me| VnpuPreparedModel {
            me: me.clone(),
            hw,
            model,
            constants,
            block,
            const_mem,
            instances: Mutex::new(HashMap::new()),
            deferred,
        })
    }

    /// A prepared model rebuilt from a verified compilation cache: its constants already
    /// in device memory (`const_mem`, laid out by `offsets`), the program compiled for
    /// `input_shapes` installed without compiling, other constants made on first need.
    pub fn restore(
        hw: Arc<Hardware>,
        model: Model,
        constants: Constants,
        offsets: Vec<Option<u64>>,
        const_mem: Option<DramBlock>,
        instance: Option<(Vec<Vec<usize>>, Compiled)>,
    ) -> Result<Arc<VnpuPreparedModel>, ErrorStatus> {
        let block = ConstantBlock {
            bytes: Vec::new(),
            offsets,
        };
        let prepared = Self::assemble(hw, model, constants, block, const_mem);
        if let Some((shapes, compiled)) = instance {
            prepared.install((shapes, Vec::new(), Vec::new()), compiled)?;
        }
        Ok(prepared)
    }

    /// What the compilation cache saves: the model, its constants, their device layout
    /// and, when the input shapes are known, the program compiled for them.
    pub fn cache_parts(&self) -> CacheParts<'_> {
        let instance = self.known_input_shapes().and_then(|shapes| {
            let key = (shapes.clone(), Vec::new(), Vec::new());
            let all = self.instances.lock().unwrap_or_else(|p| p.into_inner());
            let inst = all.get(&key)?.lock().unwrap_or_else(|p| p.into_inner());
            Some((shapes, inst.compiled.clone()))
        });
        CacheParts {
            model: &self.model,
            constants: self.constants.get(),
            block: &self.block,
            instance,
        }
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

    /// The instance for these input shapes, compiling and uploading it if new.
    fn instance(&self, key: InstanceKey) -> Result<Arc<Mutex<Instance>>, ErrorStatus> {
        if let Some(i) = self
            .instances
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(Arc::clone(i));
        }
        let mut constants = std::borrow::Cow::Borrowed(self.constants.get());
        for (i, v) in &key.1 {
            constants.to_mut()[*i as usize] = Some(v.clone());
        }
        let mut omitted = vec![false; self.model.main.operands.len()];
        for &i in &key.2 {
            omitted[i as usize] = true;
        }
        let compiled =
            compile::compile(&self.model, &constants, &key.0, &omitted).map_err(|e| {
                tracing::debug!("compile: {e}");
                e.status()
            })?;
        self.install(key, compiled)
    }

    /// Uploads the program of `compiled` with a fresh arena and keeps it for `key`.
    fn install(
        &self,
        key: InstanceKey,
        compiled: Compiled,
    ) -> Result<Arc<Mutex<Instance>>, ErrorStatus> {
        let arena = self
            .hw
            .alloc_dram(compiled.arena_size)
            .map_err(|e| hw_status(&e))?;
        let program = compiled
            .program(&self.block, self.const_base(), arena.addr)
            .map_err(|e| e.status())?
            .encode();
        let program_len = program.len() as u64;
        let program = upload(&self.hw, &program).map_err(|e| hw_status(&e))?;
        let inst = Arc::new(Mutex::new(Instance {
            compiled,
            arena,
            program,
            program_len,
        }));
        let mut all = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() >= MAX_INSTANCES {
            all.clear();
        }
        all.insert(key, Arc::clone(&inst));
        Ok(inst)
    }

    /// The whole synchronous execution path.
    fn run(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
    ) -> (ErrorStatus, Vec<OutputShape>, Timing) {
        let start = Instant::now();
        let fail = |s: ErrorStatus| (s, Vec::new(), Timing::NONE);
        if let Err(e) = validate_request(request, &self.model, true) {
            tracing::debug!("request: {e}");
            return fail(ErrorStatus::InvalidArgument);
        }
        if deadline.has_passed() {
            return fail(ErrorStatus::MissedDeadlinePersistent);
        }
        let sg = &self.model.main;
        let mut pools = Vec::with_capacity(request.pools.len());
        for p in &request.pools {
            match p {
                RequestMemoryPool::HidlMemory(m) => match pool_range(m) {
                    Ok(r) => pools.push(r),
                    Err(e) => {
                        tracing::debug!("request pool: {e}");
                        return fail(ErrorStatus::GeneralFailure);
                    }
                },
                // Driver-managed buffers (memory domains) are not offered yet.
                RequestMemoryPool::Token(_) => return fail(ErrorStatus::InvalidArgument),
            }
        }
        let shapes: Vec<Vec<usize>> = sg
            .input_indexes
            .iter()
            .zip(&request.inputs)
            .map(|(&i, a)| {
                let dims = if a.dimensions.is_empty() {
                    &sg.operands[i as usize].dimensions
                } else {
                    &a.dimensions
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
                .map(|r| read_range(r, loc.offset as u64, loc.length as usize))
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
        let inst = match self.instance((shapes, values, omitted)) {
            Ok(i) => i,
            Err(s) => return fail(s),
        };
        let inst = inst.lock().unwrap_or_else(|p| p.into_inner());
        let c = &inst.compiled;
        let mut shapes_out = Vec::with_capacity(sg.output_indexes.len());
        let mut sufficient = true;
        for (&o, arg) in sg.output_indexes.iter().zip(&request.outputs) {
            let dims: Vec<u32> = c.shapes[o as usize]
                .as_ref()
                .map_or(Vec::new(), |s| s.iter().map(|&d| d as u32).collect());
            let ok = c.byte_len(o) <= arg.location.length as u64;
            sufficient &= ok;
            shapes_out.push(OutputShape {
                dimensions: dims,
                is_sufficient: ok,
            });
        }
        if !sufficient {
            return (
                ErrorStatus::OutputInsufficientSize,
                shapes_out,
                Timing::NONE,
            );
        }
        let mut maps: Vec<Option<IoMapping>> = Vec::with_capacity(pools.len());
        for r in &pools {
            match self.hw.map(r.fd, r.offset, r.size, r.perm) {
                Ok(m) => maps.push(Some(m)),
                Err(e) => return fail(hw_status(&e)),
            }
        }
        let (cb, ab) = (self.const_base(), inst.arena.addr);
        let addr = |i: u32| c.address(i, &self.block, cb, ab);
        let iova = |pool: u32, off: u32| {
            maps.get(pool as usize)
                .and_then(|m| m.as_ref())
                .map(|m| m.iova + off as u64)
        };
        let mut cmds = Vec::new();
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
        cmds.push(fence());
        cmds.push(SubmissionEntry::new(
            Opcode::RunProgram,
            0,
            [inst.program.addr, 0, inst.program_len, 0, 0, 0],
        ));
        cmds.push(fence());
        for (&o, arg) in sg.output_indexes.iter().zip(&request.outputs) {
            let len = c.byte_len(o);
            if len == 0 {
                continue;
            }
            match (addr(o), iova(arg.location.pool_index, arg.location.offset)) {
                (Some(src), Some(dst)) => cmds.push(dma(src, dst, len)),
                _ => return fail(ErrorStatus::GeneralFailure),
            }
        }
        let done = match self.hw.run(cmds) {
            Ok(d) => d,
            Err(e) => return fail(hw_status(&e)),
        };
        drop(maps);
        // The device cannot stop a program midway; a deadline that passed while it ran is
        // still a missed deadline (as NN's executor reports one found between operations).
        if deadline.has_passed() {
            return fail(ErrorStatus::MissedDeadlineTransient);
        }
        let timing = if measure == MeasureTiming::YES {
            let in_driver = start.elapsed().as_micros() as u64;
            let on_device = done.iter().map(|c| c.device_ns).sum::<u64>() / 1000;
            // The modelled device time, capped by the time the driver actually waited:
            // the HAL requires timeOnDevice <= timeInDriver.
            Timing {
                time_on_device: on_device.min(in_driver),
                time_in_driver: in_driver,
            }
        } else {
            Timing::NONE
        };
        (ErrorStatus::None, shapes_out, timing)
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
        let spawned = std::thread::Builder::new().name("vnpu-exec".into()).spawn({
            let callback = Arc::clone(&callback);
            move || {
                let (status, shapes, timing) =
                    me.execute_synchronously_1_3(&request, measure, deadline, loop_timeout);
                callback.notify(status, shapes, timing);
            }
        });
        if spawned.is_err() {
            callback.notify(ErrorStatus::GeneralFailure, Vec::new(), Timing::NONE);
            return ErrorStatus::GeneralFailure;
        }
        ErrorStatus::None
    }

    fn execute_synchronously_1_3(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        _loop_timeout: OptionalTimeoutDuration,
    ) -> (ErrorStatus, Vec<OutputShape>, Timing) {
        self.run(request, measure, deadline)
    }
}
