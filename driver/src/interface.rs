//! The NN HAL 1.3 interface in one place: the `IDevice`, `IPreparedModel` and `IBuffer`
//! traits, the callback traits and the [`Notified`] slots a client waits on. The local
//! device ([`crate::device::VnpuDevice`]) and a remote client implement the same traits;
//! every method takes and returns plain data and file descriptors, so the interface can
//! be served across a process boundary.

use std::any::Any;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Condvar, Mutex};

use crate::hal::{
    BufferDesc, BufferRole, Capabilities, DeviceStatus, DeviceType, ErrorStatus,
    ExecutionPreference, HalVersion, MeasureTiming, Memory, Model, NativeHandle, Operand,
    OptionalTimePoint, OptionalTimeoutDuration, OutputShape, Priority, Request, Timing,
    BYTE_SIZE_OF_CACHE_TOKEN,
};
/// What `getSupportedExtensions` returns (HAL types, named here too).
pub use crate::hal::{Extension, ExtensionOperandTypeInformation};
/// Whether a memory-domain role reads a buffer (a model input) or writes it (a model output).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Io {
    /// A model input.
    Input,
    /// A model output.
    Output,
}

/// What a prepared model says of one of its inputs or outputs for a memory-domain role.
#[derive(Clone, Debug)]
pub struct DomainRole {
    /// The prepared model's process-unique id (roles are keyed by it).
    pub model: u64,
    /// The device it was prepared on, by identity (the same value for every model of one
    /// device while they live).
    pub device: usize,
    /// The operand, `None` if the index is out of range.
    pub operand: Option<Operand>,
}

/// Notified once with the outcome of a preparation.
pub trait PreparedModelCallback: Send + Sync {
    fn notify(&self, status: ErrorStatus, prepared: Option<Arc<dyn IPreparedModel>>);
}

/// Notified once with the outcome of an asynchronous execution.
pub trait ExecutionCallback: Send + Sync {
    fn notify(&self, status: ErrorStatus, output_shapes: Vec<OutputShape>, timing: Timing);
}

/// What a fenced execution reports once its fence is signalled
/// (`IFencedExecutionCallback`, 1.3).
pub trait IFencedExecutionCallback: Send + Sync {
    /// (status, timing since the launch, timing since the waited-for fences signalled);
    /// both timings are `Timing::NONE` unless measured and successful.
    fn get_execution_info(&self) -> (ErrorStatus, Timing, Timing);
}

/// The outcome of `IPreparedModel::executeFenced`: status, the fence that signals the
/// end of the execution and its callback (both `None` on error).
pub type FencedResult = (
    ErrorStatus,
    Option<NativeHandle>,
    Option<Arc<dyn IFencedExecutionCallback>>,
);

/// A driver-managed buffer (`IBuffer`, 1.3): a value in device memory that executions
/// name by its token.
pub trait IBuffer: Send + Sync {
    /// Copies the buffer's value into `dst`, which must have exactly the buffer's size.
    fn copy_to(&self, dst: &Memory) -> ErrorStatus;
    /// Sets the buffer's value from `src` (exactly the buffer's size), with `dimensions`
    /// (empty: the dimensions given at allocation).
    fn copy_from(&self, src: &Memory, dimensions: &[u32]) -> ErrorStatus;
}

/// The client's side of a burst (`IBurstCallback`, 1.2): the service asks it for the
/// memories of slots it has not cached.
pub trait IBurstCallback: Send + Sync {
    /// The memories of `slots`, in order; INVALID_ARGUMENT (and no memories) if any slot
    /// is unknown.
    fn get_memories(&self, slots: &[i32]) -> (ErrorStatus, Vec<Memory>);
}

/// The service's side of a burst (`IBurstContext`, 1.2): dropping it ends the burst.
pub trait IBurstContext: Send + Sync {
    /// Forgets the memory cached under `slot` (an unknown slot is ignored).
    fn free_memory(&self, slot: i32);
}

/// A request fixed once and run many times: the core under AIDL V4's `IExecution`
/// ([`crate::aidl`]). The request was validated and its memory resolved when it was made;
/// at most one execution runs on it at a time.
pub trait IReusableExecution: Send + Sync {
    /// Runs it once, synchronously, before `deadline`.
    fn execute_synchronously(&self, deadline: OptionalTimePoint) -> ExecutionResult;
    /// Runs it once every fence of `wait_for` is signalled, before the earlier of
    /// `deadline` and now + `duration`.
    fn execute_fenced(
        &self,
        wait_for: &[NativeHandle],
        deadline: OptionalTimePoint,
        duration: OptionalTimeoutDuration,
    ) -> FencedResult;
}

/// A burst whose request memories the client names by its own tokens (the core under
/// AIDL's `IBurst`): a memory is resolved the first time its token is seen and kept until
/// the token is released or the burst dropped.
pub trait IMemoryTokenBurst: Send + Sync {
    /// Executes `request`; `tokens` has one entry per request pool (-1: not cached).
    fn execute_synchronously(
        &self,
        request: &Request,
        tokens: &[i64],
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
    ) -> ExecutionResult;
    /// Forgets the memory kept under `token` (INVALID_ARGUMENT for a negative token; an
    /// unknown one is ignored).
    fn release_memory_resource(&self, token: i64) -> ErrorStatus;
}

/// The outcome of `configureExecutionBurst`: status and, on success, the burst.
pub type BurstResult = (ErrorStatus, Option<Arc<dyn IBurstContext>>);

/// The outcome of `IDevice::allocate`: status, buffer, token (0 on error).
pub type AllocateResult = (ErrorStatus, Option<Arc<dyn IBuffer>>, u32);

/// `prepareModel_1_3`'s arguments.
pub struct PrepareArgs<'a> {
    /// The model.
    pub model: &'a Model,
    /// The execution preference.
    pub preference: ExecutionPreference,
    /// The preparation's priority.
    pub priority: Priority,
    /// When the preparation must be done by.
    pub deadline: OptionalTimePoint,
    /// Model cache handles to save to (empty: none).
    pub model_cache: &'a [NativeHandle],
    /// Data cache handles to save to (empty: none).
    pub data_cache: &'a [NativeHandle],
    /// The cache token.
    pub token: &'a [u8; BYTE_SIZE_OF_CACHE_TOKEN],
    /// Notified once with the prepared model.
    pub callback: Option<Arc<dyn PreparedModelCallback>>,
}

impl<'a> PrepareArgs<'a> {
    /// A preparation of `model` for `callback` as most callers ask for one: a fast single
    /// answer, medium priority, no deadline, no cache files, a zero token.
    pub fn new(
        model: &'a Model,
        callback: Option<Arc<dyn PreparedModelCallback>>,
    ) -> PrepareArgs<'a> {
        PrepareArgs {
            model,
            preference: ExecutionPreference::FAST_SINGLE_ANSWER,
            priority: Priority::MEDIUM,
            deadline: OptionalTimePoint::NONE,
            model_cache: &[],
            data_cache: &[],
            token: &[0; BYTE_SIZE_OF_CACHE_TOKEN],
            callback,
        }
    }
}

/// `prepareModelFromCache_1_3`'s arguments.
pub struct PrepareFromCacheArgs<'a> {
    /// When the preparation must be done by.
    pub deadline: OptionalTimePoint,
    /// Model cache handles to load from.
    pub model_cache: &'a [NativeHandle],
    /// Data cache handles to load from.
    pub data_cache: &'a [NativeHandle],
    /// The cache token the files were saved under.
    pub token: &'a [u8; BYTE_SIZE_OF_CACHE_TOKEN],
    /// Notified once with the prepared model.
    pub callback: Option<Arc<dyn PreparedModelCallback>>,
}

impl<'a> PrepareFromCacheArgs<'a> {
    /// A load of these cache files for `callback`, without a deadline.
    pub fn new(
        model_cache: &'a [NativeHandle],
        data_cache: &'a [NativeHandle],
        token: &'a [u8; BYTE_SIZE_OF_CACHE_TOKEN],
        callback: Option<Arc<dyn PreparedModelCallback>>,
    ) -> PrepareFromCacheArgs<'a> {
        PrepareFromCacheArgs {
            deadline: OptionalTimePoint::NONE,
            model_cache,
            data_cache,
            token,
            callback,
        }
    }
}

/// The NN HAL 1.3 `IDevice` (with the 1.0-1.2 queries it still serves).
pub trait IDevice: Send + Sync {
    fn get_capabilities_1_3(&self) -> (ErrorStatus, Capabilities);
    fn get_version_string(&self) -> (ErrorStatus, String);
    fn get_type(&self) -> (ErrorStatus, DeviceType);
    fn get_status(&self) -> DeviceStatus;
    fn get_supported_extensions(&self) -> (ErrorStatus, Vec<Extension>);
    fn get_supported_operations_1_3(&self, model: &Model) -> (ErrorStatus, Vec<bool>);
    /// (status, number of model cache files, number of data cache files).
    fn get_number_of_cache_files_needed(&self) -> (ErrorStatus, u32, u32);
    /// `prepareModel_1_3`: its eight arguments as one value.
    fn prepare_model_1_3(&self, args: PrepareArgs<'_>) -> ErrorStatus;
    /// `prepareModelFromCache_1_3`: its five arguments as one value.
    fn prepare_model_from_cache_1_3(&self, args: PrepareFromCacheArgs<'_>) -> ErrorStatus;
    /// Allocates a driver-managed buffer for the given roles of `prepared_models` (which
    /// must be this device's); on error the buffer is `None` and the token 0.
    fn allocate(
        &self,
        desc: &BufferDesc,
        prepared_models: &[Option<Arc<dyn IPreparedModel>>],
        input_roles: &[BufferRole],
        output_roles: &[BufferRole],
    ) -> AllocateResult;
    /// The preparation core at a HAL level: what a face newer than 1.3 (the AIDL face)
    /// calls. A device that only speaks 1.3 refuses newer levels with INVALID_ARGUMENT.
    fn prepare_model_at(&self, level: HalVersion, args: PrepareArgs<'_>) -> ErrorStatus {
        if level <= HalVersion::V1_3 {
            return self.prepare_model_1_3(args);
        }
        if let Some(cb) = args.callback {
            cb.notify(ErrorStatus::InvalidArgument, None);
        }
        ErrorStatus::InvalidArgument
    }
    /// getSupportedOperations with `model` validated at `level` (see
    /// [`IDevice::prepare_model_at`]).
    fn get_supported_operations_at(
        &self,
        level: HalVersion,
        model: &Model,
    ) -> (ErrorStatus, Vec<bool>) {
        match level <= HalVersion::V1_3 {
            true => self.get_supported_operations_1_3(model),
            false => (ErrorStatus::InvalidArgument, Vec::new()),
        }
    }
}

/// The NN HAL 1.3 `IPreparedModel`.
pub trait IPreparedModel: Send + Sync {
    fn execute_1_3(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
        callback: Option<Arc<dyn ExecutionCallback>>,
    ) -> ErrorStatus;
    fn execute_synchronously_1_3(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
    ) -> (ErrorStatus, Vec<OutputShape>, Timing);
    /// Executes once every fence of `wait_for` is signalled, before the earlier of
    /// `deadline` and now + `duration`. Outputs must have fully specified dimensions.
    #[allow(clippy::too_many_arguments)]
    fn execute_fenced(
        &self,
        request: &Request,
        wait_for: &[NativeHandle],
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
        duration: OptionalTimeoutDuration,
    ) -> FencedResult;
    /// Starts a burst (`configureExecutionBurst`, 1.2): requests arrive as packets on the
    /// queue in `request_channel`'s memfd, results leave on `result_channel`'s (see
    /// [`crate::burst`]); memories are named by slots and fetched through `callback`.
    fn configure_execution_burst(
        &self,
        callback: Arc<dyn IBurstCallback>,
        request_channel: BorrowedFd<'_>,
        result_channel: BorrowedFd<'_>,
    ) -> BurstResult;
    /// A reusable execution of `request` (AIDL V4 `createReusableExecution`'s core):
    /// INVALID_ARGUMENT for a request that is not valid for this model. A model that
    /// cannot make one says GENERAL_FAILURE.
    fn create_reusable_execution(
        &self,
        request: &Request,
        measure: MeasureTiming,
        loop_timeout: OptionalTimeoutDuration,
    ) -> Result<Arc<dyn IReusableExecution>, ErrorStatus> {
        let _ = (request, measure, loop_timeout);
        Err(ErrorStatus::GeneralFailure)
    }
    /// A burst with client memory tokens (AIDL `configureExecutionBurst`'s core).
    fn configure_memory_token_burst(&self) -> Result<Arc<dyn IMemoryTokenBurst>, ErrorStatus> {
        Err(ErrorStatus::GeneralFailure)
    }
    /// The implementation behind the interface; `None` for a model that does not say.
    fn as_any(&self) -> Option<&dyn Any> {
        None
    }
    /// Its input or output `index` for a memory-domain role, with its identity, so a device
    /// recognises its own prepared models; `None` for a model no device can know.
    fn domain_role(&self, io: Io, index: u32) -> Option<DomainRole> {
        let _ = (io, index);
        None
    }
}

/// A value delivered once that a client can wait on. Counts deliveries so tests can
/// check "notified exactly once"; only the first is kept.
pub struct Notified<T> {
    state: Mutex<NotifiedState<T>>,
    cv: Condvar,
}

struct NotifiedState<T> {
    count: u32,
    value: Option<T>,
}

impl<T: Clone> Notified<T> {
    pub fn new() -> Arc<Self> {
        Arc::new(Notified {
            state: Mutex::new(NotifiedState {
                count: 0,
                value: None,
            }),
            cv: Condvar::new(),
        })
    }

    /// Waits for the first notification.
    pub fn wait(&self) -> T {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(v) = &s.value {
                return v.clone();
            }
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits for the first notification at most `timeout`; `None` if none came.
    pub fn wait_for(&self, timeout: std::time::Duration) -> Option<T> {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (s, _) = self
            .cv
            .wait_timeout_while(s, timeout, |s| s.value.is_none())
            .unwrap_or_else(|p| p.into_inner());
        s.value.clone()
    }

    pub fn notifications(&self) -> u32 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).count
    }

    pub(crate) fn deliver(&self, v: T) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.count += 1;
        if s.value.is_none() {
            s.value = Some(v);
        }
        self.cv.notify_all();
    }
}

/// The outcome of a preparation.
pub type PrepareResult = (ErrorStatus, Option<Arc<dyn IPreparedModel>>);
/// The outcome of an execution.
pub type ExecutionResult = (ErrorStatus, Vec<OutputShape>, Timing);

/// A preparation callback a client can wait on.
pub type PreparedModelSlot = Notified<PrepareResult>;
/// An execution callback a client can wait on.
pub type ExecutionSlot = Notified<ExecutionResult>;

impl PreparedModelCallback for Notified<PrepareResult> {
    fn notify(&self, status: ErrorStatus, prepared: Option<Arc<dyn IPreparedModel>>) {
        self.deliver((status, prepared));
    }
}

impl ExecutionCallback for Notified<ExecutionResult> {
    fn notify(&self, status: ErrorStatus, output_shapes: Vec<OutputShape>, timing: Timing) {
        self.deliver((status, output_shapes, timing));
    }
}
