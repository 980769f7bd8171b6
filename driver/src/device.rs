//! The local `IDevice` 1.3: its implementation over the emulated device. The traits
//! themselves live in [`crate::interface`] and are re-exported here, so existing
//! `crate::device::IDevice`-style imports keep working.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vnpu_emu::DeviceConfig;

use crate::cache::{self, Cache, CacheConfig};
use crate::compile::ModelPlan;
use crate::config::DriverConfig;
use crate::domain::{self, BufferRegistry, DriverBuffer};
use crate::execute::VnpuPreparedModel;
pub use crate::execute::{ModelContext, ModelCount, ModelLease};
use crate::hal::{
    validate_execution_preference, validate_priority, BufferDesc, BufferRole, Capabilities,
    DeviceStatus, DeviceType, ErrorStatus, HalVersion, Model, OperandPerformance, OperandType,
    PerformanceInfo,
};
use crate::hw::{Hardware, Health, HwError};
use crate::validate::validate_model_at;
use crate::workers::{Job, WorkerPool};

pub use crate::interface::{
    AllocateResult, ExecutionCallback, ExecutionResult, ExecutionSlot, Extension,
    ExtensionOperandTypeInformation, FencedResult, IBuffer, IDevice, IFencedExecutionCallback,
    IPreparedModel, Notified, PrepareArgs, PrepareFromCacheArgs, PrepareResult,
    PreparedModelCallback, PreparedModelSlot,
};

/// A CPU core's modelled throughput, the yardstick of the performance ratios.
const CPU_FLOPS_PER_NS: f64 = 10.0;
const CPU_WATTS: f64 = 4.0;
const DEVICE_WATTS: f64 = 2.0;

/// What a device holds at one moment.
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceUsage {
    /// Prepared models alive.
    pub prepared_models: u64,
    /// Driver-managed buffers alive.
    pub buffers: u64,
    /// Device memory (DRAM) allocated, in bytes.
    pub dram_bytes: u64,
    /// Device address space (IOMMU) mapped, in bytes.
    pub iova_bytes: u64,
}

/// The driver's device: the HAL over one emulated accelerator.
pub struct VnpuDevice {
    hw: Arc<Hardware>,
    config: DriverConfig,
    prepare: Arc<WorkerPool>,
    executions: Arc<WorkerPool>,
    models: Arc<ModelCount>,
    /// Injected preparation panics still to come (see [`crate::config::DriverFaults`]).
    prepare_panics: Arc<AtomicU32>,
    /// Preparations whose planning (on the caller's thread) panicked.
    plan_panics: AtomicUsize,
    cache: Arc<Cache>,
    buffers: Arc<BufferRegistry>,
}

impl VnpuDevice {
    /// Powers up an emulated device with the default configuration.
    pub fn new() -> Result<Arc<VnpuDevice>, HwError> {
        Self::with_config(DeviceConfig::default())
    }

    /// Powers up a device with this configuration and the driver's default bounds.
    pub fn with_config(config: DeviceConfig) -> Result<Arc<VnpuDevice>, HwError> {
        Self::with_driver_config(DriverConfig::with_device(config))
    }

    /// Powers up a device whose compilation cache uses `cache` (key location, I/O path).
    pub fn with_cache(
        config: DeviceConfig,
        cache: CacheConfig,
    ) -> Result<Arc<VnpuDevice>, HwError> {
        Self::with_driver_config(DriverConfig {
            cache,
            ..DriverConfig::with_device(config)
        })
    }

    /// Powers up a device with every bound given.
    pub fn with_driver_config(config: DriverConfig) -> Result<Arc<VnpuDevice>, HwError> {
        let os = |e: std::io::Error| HwError::Device(vnpu_emu::DeviceError::Os(e));
        Ok(Arc::new(VnpuDevice {
            hw: Hardware::open_with(config.device.clone(), config.watchdog)?,
            prepare: WorkerPool::start("vnpu-prepare", 1, config.preparation_queue).map_err(os)?,
            executions: WorkerPool::start(
                "vnpu-exec",
                config.execution_workers,
                config.execution_queue,
            )
            .map_err(os)?,
            models: ModelCount::new(config.max_prepared_models),
            prepare_panics: Arc::new(AtomicU32::new(config.faults.prepare_panics)),
            plan_panics: AtomicUsize::new(0),
            cache: Arc::new(Cache::new(config.cache.clone())),
            buffers: Arc::default(),
            config,
        }))
    }

    /// The compilation cache.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    pub fn name(&self) -> &'static str {
        "vnpu-emulated"
    }

    pub fn hardware(&self) -> &Arc<Hardware> {
        &self.hw
    }

    /// The bounds this device runs with.
    pub fn config(&self) -> &DriverConfig {
        &self.config
    }

    /// Jobs of this device's workers (preparations, asynchronous executions) and
    /// preparations' planning that panicked: each was answered with GENERAL_FAILURE, and
    /// each is a bug to fix.
    pub fn worker_panics(&self) -> usize {
        self.prepare.panics() + self.executions.panics() + self.plan_panics.load(Ordering::Relaxed)
    }

    /// getSupportedOperations under both faces: `model` validated at `level` (what is
    /// newer is INVALID_ARGUMENT), then which of its operations the device runs.
    pub fn supported_operations_at(
        &self,
        level: HalVersion,
        model: &Model,
    ) -> (ErrorStatus, Vec<bool>) {
        if let Err(e) = validate_model_at(model, level) {
            tracing::debug!("getSupportedOperations: {e}");
            return (ErrorStatus::InvalidArgument, Vec::new());
        }
        // The model's pools must be readable, as at preparation.
        let supported = crate::extensions::canonical_model(model)
            .map_err(|e| e.status())
            .and_then(|model| ModelPlan::supported(&model).map_err(|e| e.status()));
        match supported {
            Ok(ops) => (ErrorStatus::None, ops),
            Err(s) => (s, Vec::new()),
        }
    }

    /// The one preparation core under both faces: validate `args.model` at `level` (what
    /// is newer than the face's level is INVALID_ARGUMENT), plan it, and prepare it on a
    /// worker; `args.callback` is notified exactly once.
    pub fn prepare_at(&self, level: HalVersion, args: PrepareArgs<'_>) -> ErrorStatus {
        let PrepareArgs {
            model,
            preference,
            priority,
            deadline,
            model_cache,
            data_cache,
            token,
            callback,
        } = args;
        let Some(callback) = callback else {
            return ErrorStatus::InvalidArgument;
        };
        // Cache handles that cannot be used only mean nothing is saved.
        let save_to = cache::handles::take(model_cache, data_cache)
            .inspect_err(|e| tracing::debug!("prepareModel: not saving to the cache: {e}"))
            .ok();
        let fail = |status: ErrorStatus| {
            callback.notify(status, None);
            status
        };
        let valid = validate_model_at(model, level)
            .and_then(|_| validate_execution_preference(preference))
            .and_then(|_| validate_priority(priority));
        if let Err(e) = valid {
            tracing::debug!("prepareModel: {e}");
            return fail(ErrorStatus::InvalidArgument);
        }
        // Extension types under the driver's own prefixes from here on.
        let model = match crate::extensions::canonical_model(model) {
            Ok(m) => m,
            Err(e) => return fail(e.status()),
        };
        // The compiler's one entry: support, IF/WHILE expanded, constants read, folded
        // and laid out (model pools are hostile input, so under an unwind guard).
        let plan = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ModelPlan::new(model.into_owned())
        }));
        let plan = match plan {
            Ok(Ok(plan)) => plan,
            Ok(Err(e)) => {
                tracing::debug!("prepareModel: {e}");
                return fail(e.status());
            }
            Err(_) => {
                self.plan_panics.fetch_add(1, Ordering::Relaxed);
                tracing::error!("prepareModel: planning panicked");
                return fail(ErrorStatus::GeneralFailure);
            }
        };
        if deadline.has_passed() {
            return fail(ErrorStatus::MissedDeadlinePersistent);
        }
        let Some(lease) = self.models.lease() else {
            tracing::debug!(
                "prepareModel: {} prepared models alive, the limit",
                self.models.max()
            );
            return fail(ErrorStatus::ResourceExhaustedTransient);
        };
        let ctx = self.model_context();
        let panics = Arc::clone(&self.prepare_panics);
        let cache = Arc::clone(&self.cache);
        let token = *token;
        let on_panic = {
            let callback = Arc::clone(&callback);
            Box::new(move || callback.notify(ErrorStatus::GeneralFailure, None))
        };
        let run = {
            let callback = Arc::clone(&callback);
            Box::new(move || {
                if deadline.has_passed() {
                    callback.notify(ErrorStatus::MissedDeadlinePersistent, None);
                    return;
                }
                let injected = panics
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                    .is_ok();
                if injected {
                    // Unwinds like a panic, without the panic hook's (slow) report.
                    std::panic::resume_unwind(Box::new("injected preparation panic"));
                }
                match VnpuPreparedModel::prepare(&ctx, plan, lease) {
                    Ok(p) => {
                        // Saved before the notification, so a load that follows it finds
                        // the files complete; a failed save does not fail preparation.
                        if let Some(files) = &save_to {
                            if let Err(e) = cache.save(&ctx.hw, &p, files, &token) {
                                tracing::warn!("saving to the compilation cache: {e}");
                            }
                        }
                        callback.notify(ErrorStatus::None, Some(p as Arc<dyn IPreparedModel>))
                    }
                    Err(status) => callback.notify(status, None),
                }
            })
        };
        let queued = self
            .prepare
            .submit(priority.0, Job { run, on_panic }, Duration::ZERO);
        if queued.is_err() {
            return fail(ErrorStatus::ResourceExhaustedTransient);
        }
        ErrorStatus::None
    }

    /// What a prepared model made on this device shares with it.
    fn model_context(&self) -> ModelContext {
        ModelContext {
            hw: Arc::clone(&self.hw),
            executions: Arc::clone(&self.executions),
            submit_wait: self.config.submit_wait,
            max_instances: self.config.max_instances,
            io: Arc::clone(self.cache.io()),
            buffers: Arc::clone(&self.buffers),
            burst: (
                crate::burst::server::start,
                crate::burst::server::DEFAULT_SPIN,
            ),
        }
    }

    /// Driver-managed buffers alive on this device.
    pub fn buffers(&self) -> usize {
        self.buffers.len()
    }

    /// Prepared models alive on this device.
    pub fn prepared_models(&self) -> usize {
        self.models.live()
    }

    /// What the device holds now (for operators, the service's usage call, leak checks).
    pub fn usage(&self) -> DeviceUsage {
        let (dram_bytes, iova_bytes) = self.hw.memory_in_use();
        DeviceUsage {
            prepared_models: self.prepared_models() as u64,
            buffers: self.buffers() as u64,
            dram_bytes,
            iova_bytes,
        }
    }
}

impl IDevice for VnpuDevice {
    fn get_capabilities_1_3(&self) -> (ErrorStatus, Capabilities) {
        let t = self.hw.device().timing();
        let exec_time = (CPU_FLOPS_PER_NS / t.flops_per_ns) as f32;
        let fast = PerformanceInfo {
            exec_time,
            power_usage: exec_time * (DEVICE_WATTS / CPU_WATTS) as f32,
        };
        let slow = PerformanceInfo {
            exec_time: f32::MAX,
            power_usage: f32::MAX,
        };
        // Every type the device stores (scalars are folded into kernels; UINT32 is used by
        // no operation the device runs).
        let supported = |ty: OperandType| {
            ty != OperandType::UINT32 && crate::compile::device_dtype(ty).is_some()
        };
        let mut operand_performance: Vec<OperandPerformance> = OperandType::ALL
            .iter()
            .filter(|&&ty| ty != OperandType::SUBGRAPH && (0..=15).contains(&ty.0))
            .map(|&ty| OperandPerformance {
                r#type: ty,
                info: if supported(ty) { fast } else { slow },
            })
            .collect();
        operand_performance.sort_by_key(|p| p.r#type.0);
        let caps = Capabilities {
            relaxed_float32_to_float16_performance_scalar: fast,
            relaxed_float32_to_float16_performance_tensor: fast,
            operand_performance,
            if_performance: slow,
            while_performance: slow,
        };
        (ErrorStatus::None, caps)
    }

    fn get_version_string(&self) -> (ErrorStatus, String) {
        (
            ErrorStatus::None,
            format!("vnpu-emu-{}", env!("CARGO_PKG_VERSION")),
        )
    }

    fn get_type(&self) -> (ErrorStatus, DeviceType) {
        (ErrorStatus::None, DeviceType::Accelerator)
    }

    fn get_status(&self) -> DeviceStatus {
        if self.hw.is_lost() {
            return DeviceStatus::Offline;
        }
        match self.hw.health() {
            Health::Ready => DeviceStatus::Available,
            Health::Recovering => DeviceStatus::Busy,
            Health::Failed => DeviceStatus::Offline,
        }
    }

    fn get_supported_extensions(&self) -> (ErrorStatus, Vec<Extension>) {
        (ErrorStatus::None, crate::extensions::supported_extensions())
    }

    fn get_supported_operations_1_3(&self, model: &Model) -> (ErrorStatus, Vec<bool>) {
        self.supported_operations_at(HalVersion::V1_3, model)
    }

    fn get_supported_operations_at(
        &self,
        level: HalVersion,
        model: &Model,
    ) -> (ErrorStatus, Vec<bool>) {
        self.supported_operations_at(level, model)
    }

    fn get_number_of_cache_files_needed(&self) -> (ErrorStatus, u32, u32) {
        (ErrorStatus::None, cache::MODEL_FILES, cache::DATA_FILES)
    }

    fn prepare_model_1_3(&self, args: PrepareArgs<'_>) -> ErrorStatus {
        self.prepare_at(HalVersion::V1_3, args)
    }

    fn prepare_model_at(&self, level: HalVersion, args: PrepareArgs<'_>) -> ErrorStatus {
        self.prepare_at(level, args)
    }

    fn prepare_model_from_cache_1_3(&self, args: PrepareFromCacheArgs<'_>) -> ErrorStatus {
        let PrepareFromCacheArgs {
            deadline,
            model_cache,
            data_cache,
            token,
            callback,
        } = args;
        let Some(callback) = callback else {
            return ErrorStatus::InvalidArgument;
        };
        let Some(lease) = self.models.lease() else {
            callback.notify(ErrorStatus::ResourceExhaustedTransient, None);
            return ErrorStatus::ResourceExhaustedTransient;
        };
        let ctx = self.model_context();
        // Loading is I/O and copies, no compilation: done on the caller's thread, under
        // the same unwind guard as the workers (cache files are hostile input).
        let load = || {
            cache::handles::take(model_cache, data_cache)
                .and_then(|files| {
                    if deadline.has_passed() {
                        return Err(cache::CacheError::Deadline);
                    }
                    let r = self.cache.load(&ctx.hw, &files, token)?;
                    let p = VnpuPreparedModel::restore(
                        &ctx,
                        r.plan,
                        r.const_mem,
                        r.instance,
                        r.epoch,
                        lease,
                    );
                    Ok(p)
                })
                .and_then(|p| match deadline.has_passed() {
                    true => Err(cache::CacheError::Deadline),
                    false => Ok(p),
                })
        };
        let loaded =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(load)).unwrap_or_else(|_| {
                tracing::error!("prepareModelFromCache panicked");
                Err(cache::CacheError::Malformed("the loader panicked"))
            });
        match loaded {
            Ok(p) => {
                callback.notify(ErrorStatus::None, Some(p as Arc<dyn IPreparedModel>));
                ErrorStatus::None
            }
            Err(e) => {
                tracing::debug!("prepareModelFromCache: {e}");
                let status = e.status();
                callback.notify(status, None);
                status
            }
        }
    }

    fn allocate(
        &self,
        desc: &BufferDesc,
        prepared_models: &[Option<Arc<dyn IPreparedModel>>],
        input_roles: &[BufferRole],
        output_roles: &[BufferRole],
    ) -> AllocateResult {
        match self.allocate_buffer(desc, prepared_models, input_roles, output_roles) {
            Ok((buffer, token)) => (ErrorStatus::None, Some(buffer), token),
            Err(status) => (status, None, 0),
        }
    }
}

impl VnpuDevice {
    fn allocate_buffer(
        &self,
        desc: &BufferDesc,
        prepared_models: &[Option<Arc<dyn IPreparedModel>>],
        input_roles: &[BufferRole],
        output_roles: &[BufferRole],
    ) -> Result<(Arc<dyn IBuffer>, u32), ErrorStatus> {
        if self.hw.is_lost() {
            return Err(ErrorStatus::DeviceUnavailable);
        }
        let spec = domain::desc::check(&self.hw, desc, prepared_models, input_roles, output_roles)
            .map_err(|e| {
                tracing::debug!("allocate: {e}");
                e.status()
            })?;
        let buffer = DriverBuffer::new(&self.hw, spec)?;
        let (buffer, token) = self
            .buffers
            .register(buffer)
            .ok_or(ErrorStatus::ResourceExhaustedPersistent)?;
        Ok((buffer as Arc<dyn IBuffer>, token))
    }
}
