//! The V4 interfaces, one trait per .aidl file and one method per .aidl method (named in
//! each doc comment). A method returns its .aidl return value or throws a
//! [`ServiceSpecific`](super::ServiceSpecific) error.

use std::sync::Arc;

use super::error::AidlResult;
use super::types::{
    BufferDesc, BufferRole, Capabilities, DeviceBuffer, DeviceType, ErrorStatus, ExecutionConfig,
    ExecutionInfo, ExecutionPreference, ExecutionResult, Extension, FencedExecutionResult,
    IPreparedModelParcel, Memory, Model, NumberOfCacheFiles, ParcelFileDescriptor,
    PrepareModelConfig, Priority, Request,
};

/// `IPreparedModelCallback`: notified once with the outcome of a preparation.
pub trait IPreparedModelCallback: Send + Sync {
    /// `notify(in ErrorStatus status, in IPreparedModel preparedModel)`.
    fn notify(&self, status: ErrorStatus, prepared_model: Option<Arc<dyn IPreparedModel>>);
}

/// `IDevice`.
pub trait IDevice: Send + Sync {
    /// `DeviceBuffer allocate(in BufferDesc desc, in IPreparedModelParcel[] preparedModels,
    /// in BufferRole[] inputRoles, in BufferRole[] outputRoles)`.
    fn allocate(
        &self,
        desc: &BufferDesc,
        prepared_models: &[IPreparedModelParcel],
        input_roles: &[BufferRole],
        output_roles: &[BufferRole],
    ) -> AidlResult<DeviceBuffer>;
    /// `Capabilities getCapabilities()`.
    fn get_capabilities(&self) -> AidlResult<Capabilities>;
    /// `NumberOfCacheFiles getNumberOfCacheFilesNeeded()`.
    fn get_number_of_cache_files_needed(&self) -> AidlResult<NumberOfCacheFiles>;
    /// `Extension[] getSupportedExtensions()`.
    fn get_supported_extensions(&self) -> AidlResult<Vec<Extension>>;
    /// `boolean[] getSupportedOperations(in Model model)`.
    fn get_supported_operations(&self, model: &Model) -> AidlResult<Vec<bool>>;
    /// `DeviceType getType()`.
    fn get_type(&self) -> AidlResult<DeviceType>;
    /// `String getVersionString()`.
    fn get_version_string(&self) -> AidlResult<String>;
    /// `void prepareModel(in Model model, in ExecutionPreference preference, in Priority
    /// priority, in long deadlineNs, in ParcelFileDescriptor[] modelCache, in
    /// ParcelFileDescriptor[] dataCache, in byte[] token, in IPreparedModelCallback callback)`.
    #[allow(clippy::too_many_arguments)]
    fn prepare_model(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline_ns: i64,
        model_cache: &[ParcelFileDescriptor],
        data_cache: &[ParcelFileDescriptor],
        token: &[u8],
        callback: Option<Arc<dyn IPreparedModelCallback>>,
    ) -> AidlResult<()>;
    /// `void prepareModelFromCache(in long deadlineNs, in ParcelFileDescriptor[] modelCache,
    /// in ParcelFileDescriptor[] dataCache, in byte[] token, in IPreparedModelCallback
    /// callback)`.
    fn prepare_model_from_cache(
        &self,
        deadline_ns: i64,
        model_cache: &[ParcelFileDescriptor],
        data_cache: &[ParcelFileDescriptor],
        token: &[u8],
        callback: Option<Arc<dyn IPreparedModelCallback>>,
    ) -> AidlResult<()>;
    /// `void prepareModelWithConfig(in Model model, in PrepareModelConfig config, in
    /// IPreparedModelCallback callback)`.
    fn prepare_model_with_config(
        &self,
        model: &Model,
        config: &PrepareModelConfig,
        callback: Option<Arc<dyn IPreparedModelCallback>>,
    ) -> AidlResult<()>;
}

/// `IPreparedModel`.
pub trait IPreparedModel: Send + Sync {
    /// `ExecutionResult executeSynchronously(in Request request, in boolean measureTiming,
    /// in long deadlineNs, in long loopTimeoutDurationNs)`.
    fn execute_synchronously(
        &self,
        request: &Request,
        measure_timing: bool,
        deadline_ns: i64,
        loop_timeout_duration_ns: i64,
    ) -> AidlResult<ExecutionResult>;
    /// `FencedExecutionResult executeFenced(in Request request, in ParcelFileDescriptor[]
    /// waitFor, in boolean measureTiming, in long deadlineNs, in long
    /// loopTimeoutDurationNs, in long durationNs)`.
    fn execute_fenced(
        &self,
        request: &Request,
        wait_for: &[ParcelFileDescriptor],
        measure_timing: bool,
        deadline_ns: i64,
        loop_timeout_duration_ns: i64,
        duration_ns: i64,
    ) -> AidlResult<FencedExecutionResult>;
    /// `IBurst configureExecutionBurst()`.
    fn configure_execution_burst(&self) -> AidlResult<Arc<dyn IBurst>>;
    /// `IExecution createReusableExecution(in Request request, in ExecutionConfig config)`.
    fn create_reusable_execution(
        &self,
        request: &Request,
        config: &ExecutionConfig,
    ) -> AidlResult<Arc<dyn IExecution>>;
    /// `ExecutionResult executeSynchronouslyWithConfig(in Request request, in
    /// ExecutionConfig config, in long deadlineNs)`.
    fn execute_synchronously_with_config(
        &self,
        request: &Request,
        config: &ExecutionConfig,
        deadline_ns: i64,
    ) -> AidlResult<ExecutionResult>;
    /// `FencedExecutionResult executeFencedWithConfig(in Request request, in
    /// ParcelFileDescriptor[] waitFor, in ExecutionConfig config, in long deadlineNs, in
    /// long durationNs)`.
    fn execute_fenced_with_config(
        &self,
        request: &Request,
        wait_for: &[ParcelFileDescriptor],
        config: &ExecutionConfig,
        deadline_ns: i64,
        duration_ns: i64,
    ) -> AidlResult<FencedExecutionResult>;
    /// Not in the .aidl: the driver's 1.3 prepared model behind this one, so `allocate`
    /// recognises the device's own models (as binder recognises a local object).
    fn core(&self) -> Option<Arc<dyn crate::interface::IPreparedModel>> {
        None
    }
}

/// `IExecution`: a reusable execution, its request and configuration fixed.
pub trait IExecution: Send + Sync {
    /// `ExecutionResult executeSynchronously(in long deadlineNs)`.
    fn execute_synchronously(&self, deadline_ns: i64) -> AidlResult<ExecutionResult>;
    /// `FencedExecutionResult executeFenced(in ParcelFileDescriptor[] waitFor, in long
    /// deadlineNs, in long durationNs)`.
    fn execute_fenced(
        &self,
        wait_for: &[ParcelFileDescriptor],
        deadline_ns: i64,
        duration_ns: i64,
    ) -> AidlResult<FencedExecutionResult>;
}

/// `IBurst`: executions whose memories the client names by identifier tokens.
pub trait IBurst: Send + Sync {
    /// `ExecutionResult executeSynchronously(in Request request, in long[]
    /// memoryIdentifierTokens, in boolean measureTiming, in long deadlineNs, in long
    /// loopTimeoutDurationNs)`.
    fn execute_synchronously(
        &self,
        request: &Request,
        memory_identifier_tokens: &[i64],
        measure_timing: bool,
        deadline_ns: i64,
        loop_timeout_duration_ns: i64,
    ) -> AidlResult<ExecutionResult>;
    /// `void releaseMemoryResource(in long memoryIdentifierToken)`.
    fn release_memory_resource(&self, memory_identifier_token: i64) -> AidlResult<()>;
    /// `ExecutionResult executeSynchronouslyWithConfig(in Request request, in long[]
    /// memoryIdentifierTokens, in ExecutionConfig config, in long deadlineNs)`.
    fn execute_synchronously_with_config(
        &self,
        request: &Request,
        memory_identifier_tokens: &[i64],
        config: &ExecutionConfig,
        deadline_ns: i64,
    ) -> AidlResult<ExecutionResult>;
}

/// `IFencedExecutionCallback`.
pub trait IFencedExecutionCallback: Send + Sync {
    /// `ErrorStatus getExecutionInfo(out Timing timingLaunched, out Timing timingFenced)`.
    fn get_execution_info(&self) -> AidlResult<ExecutionInfo>;
}

/// `IBuffer`: a driver-managed buffer.
pub trait IBuffer: Send + Sync {
    /// `void copyFrom(in Memory src, in int[] dimensions)`.
    fn copy_from(&self, src: &Memory, dimensions: &[i32]) -> AidlResult<()>;
    /// `void copyTo(in Memory dst)`.
    fn copy_to(&self, dst: &Memory) -> AidlResult<()>;
}
