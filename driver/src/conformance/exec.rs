//! How the runner executes a case: the execution path (`--path`) and where inputs and
//! outputs live (`--memory`), as the VTS GeneratedTestHarness and its MemoryDomainTest do.

use std::sync::Arc;

use crate::device::{ExecutionCallback, ExecutionSlot, IBuffer, IDevice, IPreparedModel};
use crate::hal::{
    BufferDesc, BufferRole, DataLocation, ErrorStatus, MeasureTiming, Memory, OptionalTimePoint,
    OptionalTimeoutDuration, OutputShape, Request, RequestMemoryPool, Timing,
};

use super::corpus::TestCase;

/// The execution path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum ExecPath {
    /// `execute_1_3` with a callback.
    #[default]
    Async,
    /// `executeSynchronously_1_3`.
    Sync,
    /// `executeFenced` (no output shapes are reported).
    Fenced,
    /// A burst (`configureExecutionBurst`, requests and results over fast message
    /// queues). A request naming driver-managed buffers has no slots: it runs
    /// synchronously instead, as the runtime falls back. Under AIDL: an IBurst with
    /// memory identifier tokens.
    Burst,
    /// AIDL only: a reusable execution (`createReusableExecution`) created once and run
    /// twice, both results checked.
    Reusable,
}

/// Where the request's inputs and outputs live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum MemoryMode {
    /// One shared ("ashmem") pool.
    #[default]
    Shared,
    /// Driver-managed buffers (`IDevice::allocate`), one per input and output; an operand
    /// the driver declines a buffer for stays in shared memory, as in the VTS harness.
    Device,
    /// One BLOB hardware buffer ("hardware_buffer_blob") holding the inputs and the outputs,
    /// as the VTS MemoryDomainTest's BLOB_AHWB memory.
    Blob,
}

/// Moves the request's pool 0 (the shared pool [`TestCase::make_request`] built) into a
/// BLOB hardware buffer with the same bytes and returns the buffer's memory.
pub fn into_blob(request: &mut Request, pool: &Memory) -> Result<Memory, String> {
    let bytes = super::read_bytes(pool, 0, pool.size as usize).map_err(|e| e.to_string())?;
    let blob = crate::hwbuf::allocate_blob(&bytes).map_err(|e| format!("BLOB buffer: {e}"))?;
    let first = request
        .pools
        .first_mut()
        .ok_or_else(|| "the request has no pool".to_string())?;
    *first = RequestMemoryPool::HidlMemory(blob.clone());
    Ok(blob)
}

/// The runner's execution options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecOptions {
    /// The execution path.
    pub path: ExecPath,
    /// Where inputs and outputs live.
    pub memory: MemoryMode,
    /// Run each case as the suite's dynamic-output-shape variant ([`super::dynamic`]).
    pub dynamic_shapes: bool,
    /// The interface the cases go through.
    pub interface: super::face::Interface,
}

/// Executes `request` on `path` with timing measured. A launch status that disagrees with
/// the notified one is an error message.
pub fn execute(
    prepared: &Arc<dyn IPreparedModel>,
    request: &Request,
    path: ExecPath,
) -> Result<(ErrorStatus, Vec<OutputShape>, Timing), String> {
    let none = OptionalTimeoutDuration(None);
    let deadline = OptionalTimePoint::NONE;
    let measure = MeasureTiming::YES;
    match path {
        ExecPath::Sync => Ok(prepared.execute_synchronously_1_3(request, measure, deadline, none)),
        ExecPath::Async => {
            let exec = ExecutionSlot::new();
            let ret = prepared.execute_1_3(
                request,
                measure,
                deadline,
                none,
                Some(exec.clone() as Arc<dyn ExecutionCallback>),
            );
            let (status, shapes, timing) = exec.wait();
            if ret != ErrorStatus::None && ret != status {
                return Err(format!("execute_1_3 returned {ret} but notified {status}"));
            }
            Ok((status, shapes, timing))
        }
        ExecPath::Fenced => {
            let (status, fence, callback) =
                prepared.execute_fenced(request, &[], measure, deadline, none, none);
            if status != ErrorStatus::None {
                return Ok((status, Vec::new(), Timing::NONE));
            }
            let (Some(fence), Some(callback)) = (fence, callback) else {
                return Err("executeFenced succeeded without a fence or a callback".into());
            };
            crate::fence::wait_all(&[fence], deadline).map_err(|e| e.to_string())?;
            let (status, _, since_fence) = callback.get_execution_info();
            Ok((status, Vec::new(), since_fence))
        }
        ExecPath::Burst => {
            let tokens = request
                .pools
                .iter()
                .any(|p| matches!(p, crate::hal::RequestMemoryPool::Token(_)));
            if tokens {
                return Ok(prepared.execute_synchronously_1_3(request, measure, deadline, none));
            }
            use crate::burst::{controller, server};
            let burst = match controller::BurstController::new(
                prepared.as_ref(),
                controller::CHANNEL_LENGTH,
                server::DEFAULT_SPIN,
                std::time::Duration::from_secs(60),
            ) {
                Ok(b) => b,
                Err(s) => return Err(format!("configureExecutionBurst: {s}")),
            };
            let (status, shapes, timing) = burst.execute(request, measure);
            Ok((status, shapes.to_vec(), timing))
        }
        ExecPath::Reusable => Err("--path reusable needs --interface aidl".into()),
    }
}

/// A driver-managed buffer as the run's interface gave it.
enum Buffer {
    /// `IBuffer` 1.3.
    Hidl(Arc<dyn IBuffer>),
    /// `IBuffer` V4.
    Aidl(Arc<dyn crate::aidl::IBuffer>),
}

impl Buffer {
    fn copy_from(&self, src: &Memory, dims: &[u32]) -> ErrorStatus {
        match self {
            Buffer::Hidl(b) => b.copy_from(src, dims),
            Buffer::Aidl(b) => {
                let dims: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
                crate::aidl::convert::memory_to_aidl(src)
                    .and_then(|m| b.copy_from(&m, &dims))
                    .err()
                    .map_or(ErrorStatus::None, |e| e.0)
            }
        }
    }

    fn copy_to(&self, dst: &Memory) -> ErrorStatus {
        match self {
            Buffer::Hidl(b) => b.copy_to(dst),
            Buffer::Aidl(b) => crate::aidl::convert::memory_to_aidl(dst)
                .and_then(|m| b.copy_to(&m))
                .err()
                .map_or(ErrorStatus::None, |e| e.0),
        }
    }
}

/// The driver-managed buffers of one request (inputs already copied in).
#[derive(Default)]
pub struct DeviceMemories {
    /// Per output: its buffer, if it has one.
    outputs: Vec<Option<Buffer>>,
    /// Held for the execution (dropping a buffer frees its token).
    _inputs: Vec<Buffer>,
}

/// The buffer role of input or output `io_index` of model 0.
fn role(io_index: u32) -> BufferRole {
    BufferRole {
        model_index: 0,
        io_index,
        frequency: 1.0,
    }
}

/// A buffer for input `input` or output `output` of `prepared`, if the driver gives one.
type Allocate<'a> = dyn Fn(Option<u32>, Option<u32>) -> Option<(Buffer, u32)> + 'a;

impl DeviceMemories {
    /// Moves the case's inputs and outputs into driver-managed buffers where the driver
    /// gives one (`IDevice::allocate` 1.3), rewriting `request` to name them by token.
    pub fn set_up(
        device: &dyn IDevice,
        prepared: &Arc<dyn IPreparedModel>,
        case: &TestCase,
        request: &mut Request,
    ) -> Result<DeviceMemories, String> {
        let allocate = |input: Option<u32>, output: Option<u32>| {
            let ins: Vec<_> = input.map(role).into_iter().collect();
            let outs: Vec<_> = output.map(role).into_iter().collect();
            let models = [Some(Arc::clone(prepared))];
            match device.allocate(&BufferDesc::default(), &models, &ins, &outs) {
                (ErrorStatus::None, Some(b), token) => Some((Buffer::Hidl(b), token)),
                _ => None,
            }
        };
        Self::set_up_with(&allocate, case, request)
    }

    /// [`DeviceMemories::set_up`] through AIDL V4 (`IDevice::allocate`, `IBuffer` V4).
    pub fn set_up_aidl(
        device: &dyn crate::aidl::IDevice,
        prepared: &Arc<dyn crate::aidl::IPreparedModel>,
        case: &TestCase,
        request: &mut Request,
    ) -> Result<DeviceMemories, String> {
        let allocate = |input: Option<u32>, output: Option<u32>| {
            let ins: Vec<_> = input.map(role).into_iter().collect();
            let outs: Vec<_> = output.map(role).into_iter().collect();
            let models = [crate::aidl::IPreparedModelParcel {
                prepared_model: Some(Arc::clone(prepared)),
            }];
            let b = device
                .allocate(&BufferDesc::default(), &models, &ins, &outs)
                .ok()?;
            Some((Buffer::Aidl(b.buffer), u32::try_from(b.token).ok()?))
        };
        Self::set_up_with(&allocate, case, request)
    }

    fn set_up_with(
        allocate: &Allocate<'_>,
        case: &TestCase,
        request: &mut Request,
    ) -> Result<DeviceMemories, String> {
        let mut me = DeviceMemories::default();
        let device_arg = |request: &mut Request, token: u32| {
            request.pools.push(RequestMemoryPool::Token(token));
            DataLocation {
                pool_index: request.pools.len() as u32 - 1,
                offset: 0,
                length: 0,
            }
        };
        for (k, input) in case.inputs.iter().enumerate() {
            let omitted = request.inputs.get(k).is_none_or(|a| a.has_no_value);
            if omitted || input.data.is_empty() {
                continue;
            }
            let Some((buffer, token)) = allocate(Some(k as u32), None) else {
                continue;
            };
            let src = Memory::ashmem_with(&input.data).map_err(|e| e.to_string())?;
            let dims: &[u32] = match input.dimensions.contains(&0) {
                true => &[],
                false => &input.dimensions,
            };
            let status = buffer.copy_from(&src, dims);
            if status != ErrorStatus::None {
                return Err(format!("copyFrom of input {k}: {status}"));
            }
            request.inputs[k].location = device_arg(request, token);
            me._inputs.push(buffer);
        }
        for k in 0..request.outputs.len() {
            let buffer = allocate(None, Some(k as u32)).map(|(b, token)| {
                request.outputs[k].location = device_arg(request, token);
                b
            });
            me.outputs.push(buffer);
        }
        Ok(me)
    }

    /// How many inputs and outputs live in driver-managed buffers.
    pub fn buffers(&self) -> usize {
        self._inputs.len() + self.outputs.iter().flatten().count()
    }

    /// Output `k`'s bytes when it lives in a driver-managed buffer (copyTo), `len` long.
    pub fn output(&self, k: usize, len: usize) -> Option<Result<Vec<u8>, String>> {
        let buffer = self.outputs.get(k)?.as_ref()?;
        Some((|| {
            let dst = Memory::ashmem(len as u64).map_err(|e| e.to_string())?;
            let status = buffer.copy_to(&dst);
            if status != ErrorStatus::None {
                return Err(format!("copyTo of output {k}: {status}"));
            }
            super::read_bytes(&dst, 0, len).map_err(|e| e.to_string())
        })())
    }
}
