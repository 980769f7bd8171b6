//! `IDevice` V4 over any 1.3 device (the local [`crate::device::VnpuDevice`] or a remote
//! client): convert, call the core at the face's level, convert back.

use std::ops::Deref;
use std::sync::Arc;

use super::convert;
use super::error::{check, AidlResult, ServiceSpecific, INVALID};
use super::hints;
use super::prepared::AidlPreparedModel;
use super::traits::{IBuffer, IDevice, IPreparedModel, IPreparedModelCallback};
use super::types::{
    BufferDesc, BufferRole, Capabilities, DeviceBuffer, DeviceType, ErrorStatus,
    ExecutionPreference, Extension, IPreparedModelParcel, Memory, Model, NumberOfCacheFiles,
    ParcelFileDescriptor, PrepareModelConfig, Priority, BYTE_SIZE_OF_CACHE_TOKEN,
};
use crate::hal::HalVersion;
use crate::interface::IDevice as _;
use crate::interface::{self, PrepareArgs, PrepareFromCacheArgs, PreparedModelCallback};

/// The V4 face of a 1.3 device `D` (`&dyn IDevice`, `Arc<VnpuDevice>`, ...).
pub struct AidlDevice<D> {
    core: D,
    level: HalVersion,
}

impl<D> AidlDevice<D>
where
    D: Deref + Send + Sync,
    D::Target: interface::IDevice,
{
    /// The V4 face: models are validated at AIDL V4.
    pub fn new(core: D) -> AidlDevice<D> {
        AidlDevice {
            core,
            level: HalVersion::AidlV4,
        }
    }

    /// The V4 face for a client that enabled NNAPI's experimental features: models are
    /// validated at [`HalVersion::Experimental`] (DENSIFY).
    pub fn experimental(core: D) -> AidlDevice<D> {
        AidlDevice {
            core,
            level: HalVersion::Experimental,
        }
    }

    /// The level models are validated at.
    pub fn level(&self) -> HalVersion {
        self.level
    }

    /// The one preparation path of prepareModel and prepareModelWithConfig.
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline_ns: i64,
        model_cache: &[ParcelFileDescriptor],
        data_cache: &[ParcelFileDescriptor],
        token: &[u8],
        callback: Option<Arc<dyn IPreparedModelCallback>>,
    ) -> AidlResult<()> {
        let callback = callback.ok_or(INVALID)?;
        let args = (|| {
            let token: [u8; BYTE_SIZE_OF_CACHE_TOKEN] = token.try_into().map_err(|_| INVALID)?;
            Ok((
                convert::model(model)?,
                convert::deadline(deadline_ns)?,
                token,
            ))
        })();
        let (model, deadline, token) = match args {
            Ok(a) => a,
            Err(e) => {
                callback.notify(ErrorStatus::InvalidArgument, None);
                return Err(e);
            }
        };
        let (model_cache, data_cache) = (
            convert::cache_files(model_cache),
            convert::cache_files(data_cache),
        );
        let status = self.core.prepare_model_at(
            self.level,
            PrepareArgs {
                model: &model,
                preference,
                priority,
                deadline,
                model_cache: &model_cache,
                data_cache: &data_cache,
                token: &token,
                callback: Some(Arc::new(Notify(callback))),
            },
        );
        check(status)
    }
}

/// A V4 callback under the core's: the prepared model given its V4 face.
struct Notify(Arc<dyn IPreparedModelCallback>);

impl PreparedModelCallback for Notify {
    fn notify(&self, status: ErrorStatus, prepared: Option<Arc<dyn interface::IPreparedModel>>) {
        let face = prepared.map(|p| Arc::new(AidlPreparedModel::new(p)) as Arc<dyn IPreparedModel>);
        self.0.notify(status, face);
    }
}

/// A driver-managed buffer's V4 face.
struct Buffer(Arc<dyn interface::IBuffer>);

impl IBuffer for Buffer {
    fn copy_from(&self, src: &Memory, dimensions: &[i32]) -> AidlResult<()> {
        let dims = dimensions
            .iter()
            .map(|&d| u32::try_from(d).map_err(|_| INVALID))
            .collect::<AidlResult<Vec<u32>>>()?;
        check(self.0.copy_from(&convert::memory(src)?, &dims))
    }

    fn copy_to(&self, dst: &Memory) -> AidlResult<()> {
        check(self.0.copy_to(&convert::memory(dst)?))
    }
}

impl<D> IDevice for AidlDevice<D>
where
    D: Deref + Send + Sync,
    D::Target: interface::IDevice,
{
    fn allocate(
        &self,
        desc: &BufferDesc,
        prepared_models: &[IPreparedModelParcel],
        input_roles: &[BufferRole],
        output_roles: &[BufferRole],
    ) -> AidlResult<DeviceBuffer> {
        let models: Vec<_> = prepared_models
            .iter()
            .map(|p| p.prepared_model.as_ref().and_then(|m| m.core()))
            .collect();
        match self.core.allocate(desc, &models, input_roles, output_roles) {
            (ErrorStatus::None, Some(buffer), token) => Ok(DeviceBuffer {
                buffer: Arc::new(Buffer(buffer)),
                token: i32::try_from(token)
                    .map_err(|_| ServiceSpecific(ErrorStatus::GeneralFailure))?,
            }),
            (ErrorStatus::None, None, _) => Err(ServiceSpecific(ErrorStatus::GeneralFailure)),
            (s, _, _) => Err(ServiceSpecific(s)),
        }
    }

    fn get_capabilities(&self) -> AidlResult<Capabilities> {
        let (s, caps) = self.core.get_capabilities_1_3();
        check(s).map(|_| caps)
    }

    fn get_number_of_cache_files_needed(&self) -> AidlResult<NumberOfCacheFiles> {
        let (s, model, data) = self.core.get_number_of_cache_files_needed();
        check(s)?;
        Ok(NumberOfCacheFiles {
            num_model_cache: model as i32,
            num_data_cache: data as i32,
        })
    }

    fn get_supported_extensions(&self) -> AidlResult<Vec<Extension>> {
        let (s, ext) = self.core.get_supported_extensions();
        check(s).map(|_| ext)
    }

    fn get_supported_operations(&self, model: &Model) -> AidlResult<Vec<bool>> {
        let model = convert::model(model)?;
        let (s, ops) = self.core.get_supported_operations_at(self.level, &model);
        check(s).map(|_| ops)
    }

    fn get_type(&self) -> AidlResult<DeviceType> {
        let (s, t) = self.core.get_type();
        check(s).map(|_| t)
    }

    fn get_version_string(&self) -> AidlResult<String> {
        let (s, v) = self.core.get_version_string();
        check(s).map(|_| v)
    }

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
    ) -> AidlResult<()> {
        self.prepare(
            model,
            preference,
            priority,
            deadline_ns,
            model_cache,
            data_cache,
            token,
            callback,
        )
    }

    fn prepare_model_from_cache(
        &self,
        deadline_ns: i64,
        model_cache: &[ParcelFileDescriptor],
        data_cache: &[ParcelFileDescriptor],
        token: &[u8],
        callback: Option<Arc<dyn IPreparedModelCallback>>,
    ) -> AidlResult<()> {
        let callback = callback.ok_or(INVALID)?;
        let args = (|| {
            let token: [u8; BYTE_SIZE_OF_CACHE_TOKEN] = token.try_into().map_err(|_| INVALID)?;
            Ok((convert::deadline(deadline_ns)?, token))
        })();
        let (deadline, token) = match args {
            Ok(a) => a,
            Err(e) => {
                callback.notify(ErrorStatus::InvalidArgument, None);
                return Err(e);
            }
        };
        let (model_cache, data_cache) = (
            convert::cache_files(model_cache),
            convert::cache_files(data_cache),
        );
        let callback = Some(Arc::new(Notify(callback)) as Arc<dyn PreparedModelCallback>);
        let args = PrepareFromCacheArgs {
            deadline,
            ..PrepareFromCacheArgs::new(&model_cache, &data_cache, &token, callback)
        };
        let status = self.core.prepare_model_from_cache_1_3(args);
        check(status)
    }

    fn prepare_model_with_config(
        &self,
        model: &Model,
        config: &PrepareModelConfig,
        callback: Option<Arc<dyn IPreparedModelCallback>>,
    ) -> AidlResult<()> {
        if let Err(e) = hints::check(&config.compilation_hints, &config.extension_name_to_prefix) {
            if let Some(cb) = &callback {
                cb.notify(ErrorStatus::InvalidArgument, None);
            }
            return Err(e);
        }
        self.prepare(
            model,
            config.preference,
            config.priority,
            config.deadline_ns,
            &config.model_cache,
            &config.data_cache,
            &config.cache_token,
            callback,
        )
    }
}
