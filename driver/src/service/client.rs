//! `RemoteDevice`: the `IDevice` of a device served by `vnpu serve`, over its socket.
//!
//! Covered so far: the queries (capabilities, version string, type, status, extensions,
//! cache file counts, supported operations), `prepareModel_1_3` without cache files and,
//! on the prepared models, `executeSynchronously_1_3` (request pools passed as fds).
//! Not yet remote, returning GENERAL_FAILURE (and notifying any callback with it) so
//! callers see a clean refusal rather than a hang: preparation with cache files or from
//! cache, `allocate`, `execute_1_3` and `executeFenced`.
//!
//! Every wait is bounded: a reply that does not arrive within [`RemoteDevice::timeout`]
//! (a service that died or hung) is an error, GENERAL_FAILURE to the caller (the HAL 1.3
//! types have no DEAD_OBJECT), and the status OFFLINE.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use super::protocol::{put_memories, put_pools, Call, Reply, Request, Response, WireMemory};
use super::transport::{self, TransportError};
use crate::hal::{
    BufferDesc, BufferRole, Capabilities, DeviceStatus, DeviceType, ErrorStatus,
    ExecutionPreference, MeasureTiming, Model, NativeHandle, OptionalTimePoint,
    OptionalTimeoutDuration, OutputShape, Priority, Request as HalRequest, Timing,
    BYTE_SIZE_OF_CACHE_TOKEN,
};
use crate::interface::{
    AllocateResult, ExecutionCallback, Extension, FencedResult, IDevice, IPreparedModel,
    PreparedModelCallback,
};

/// The default bound on waiting for one reply.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A device served by another process.
pub struct RemoteDevice {
    link: Arc<Link>,
    name: String,
}

/// The connection, shared by the device and its prepared models.
struct Link {
    sock: Mutex<OwnedFd>,
    next_id: AtomicU64,
    /// Set by the first transport error (a timeout leaves a reply in flight, a dead
    /// service leaves nothing to read): later calls fail at once.
    broken: AtomicBool,
}

impl RemoteDevice {
    /// Connects to the service at `path` and completes the handshake, waiting at most
    /// `timeout` for any one reply.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Self, TransportError> {
        let sock = transport::connect(path)?;
        let tv = TimeVal::new(
            i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            i64::from(timeout.subsec_micros()),
        );
        setsockopt(&sock, sockopt::ReceiveTimeout, &tv)?;
        setsockopt(&sock, sockopt::SendTimeout, &tv)?;
        let name = transport::handshake_client(sock.as_fd())?;
        Ok(RemoteDevice {
            link: Arc::new(Link {
                sock: Mutex::new(sock),
                next_id: AtomicU64::new(1),
                broken: AtomicBool::new(false),
            }),
            name,
        })
    }

    /// The served device's name (from the handshake).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// One call without descriptors.
    fn call(&self, call: Call) -> Result<Reply, TransportError> {
        self.link.call(call, &[])
    }
}

/// The model without its pools, and the pools' wire form and descriptors.
type SplitModel<'a> = (Box<Model>, Vec<WireMemory>, Vec<BorrowedFd<'a>>);

/// Splits a model for the wire: its pools travel as descriptors.
fn split_model(model: &Model) -> SplitModel<'_> {
    let (pools, fds) = put_memories(&model.pools);
    let mut bare = Box::new(model.clone());
    bare.pools = Vec::new();
    (bare, pools, fds)
}

impl Link {
    /// One call and its reply. Calls on one connection are serialised.
    fn call(&self, call: Call, fds: &[BorrowedFd<'_>]) -> Result<Reply, TransportError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let sock = self.sock.lock().unwrap_or_else(|p| p.into_inner());
        if self.broken.load(Ordering::Relaxed) {
            return Err(TransportError::Closed);
        }
        let bytes = transport::encode(&Request { id, call })?;
        let result =
            transport::send(sock.as_fd(), &bytes, fds).and_then(|()| Self::reply(&sock, id));
        if result.is_err() {
            self.broken.store(true, Ordering::Relaxed);
        }
        result
    }

    fn reply(sock: &OwnedFd, id: u64) -> Result<Reply, TransportError> {
        let frame = transport::recv(sock.as_fd()).map_err(|e| match e {
            TransportError::Io(nix::errno::Errno::EAGAIN) => {
                TransportError::Malformed("no reply within the timeout".into())
            }
            e => e,
        })?;
        if !frame.fds.is_empty() {
            return Err(TransportError::FdCount {
                declared: 0,
                carried: frame.fds.len(),
            });
        }
        let response: Response = transport::decode(&frame.bytes)?;
        if response.id != id {
            return Err(TransportError::Malformed(format!(
                "reply to {} while waiting for {id}",
                response.id
            )));
        }
        Ok(response.reply)
    }
}

/// Logs a failed call and gives the caller GENERAL_FAILURE.
fn failed(what: &str, r: Result<Reply, TransportError>) -> ErrorStatus {
    match r {
        Ok(Reply::Refused(why)) => tracing::warn!("{what}: refused by the service: {why}"),
        Ok(other) => tracing::warn!("{what}: unexpected reply {other:?}"),
        Err(e) => tracing::warn!("{what}: {e}"),
    }
    ErrorStatus::GeneralFailure
}

impl IDevice for RemoteDevice {
    fn get_capabilities_1_3(&self) -> (ErrorStatus, Capabilities) {
        match self.call(Call::GetCapabilities) {
            Ok(Reply::Capabilities(s, c)) => (s, c),
            r => (failed("getCapabilities", r), Capabilities::default()),
        }
    }

    fn get_version_string(&self) -> (ErrorStatus, String) {
        match self.call(Call::GetVersionString) {
            Ok(Reply::VersionString(s, v)) => (s, v),
            r => (failed("getVersionString", r), String::new()),
        }
    }

    fn get_type(&self) -> (ErrorStatus, DeviceType) {
        match self.call(Call::GetType) {
            Ok(Reply::Type(s, t)) => (s, t),
            r => (failed("getType", r), DeviceType::Other),
        }
    }

    fn get_status(&self) -> DeviceStatus {
        match self.call(Call::GetStatus) {
            Ok(Reply::Status(s)) => s,
            r => {
                failed("getStatus", r);
                DeviceStatus::Offline
            }
        }
    }

    fn get_supported_extensions(&self) -> (ErrorStatus, Vec<Extension>) {
        match self.call(Call::GetSupportedExtensions) {
            Ok(Reply::Extensions(s, e)) => (s, e),
            r => (failed("getSupportedExtensions", r), Vec::new()),
        }
    }

    fn get_supported_operations_1_3(&self, model: &Model) -> (ErrorStatus, Vec<bool>) {
        let (model, pools, fds) = split_model(model);
        match self
            .link
            .call(Call::GetSupportedOperations { model, pools }, &fds)
        {
            Ok(Reply::SupportedOperations(s, ops)) => (s, ops),
            r => (failed("getSupportedOperations", r), Vec::new()),
        }
    }

    fn get_number_of_cache_files_needed(&self) -> (ErrorStatus, u32, u32) {
        match self.call(Call::GetNumberOfCacheFilesNeeded) {
            Ok(Reply::CacheFiles(s, m, d)) => (s, m, d),
            r => (failed("getNumberOfCacheFilesNeeded", r), 0, 0),
        }
    }

    /// Prepared in the service, which waits for the preparation; the callback is
    /// notified here with a [`RemotePreparedModel`]. With cache files: not remote yet
    /// (GENERAL_FAILURE, returned and notified).
    fn prepare_model_1_3(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: OptionalTimePoint,
        model_cache: &[NativeHandle],
        data_cache: &[NativeHandle],
        _token: &[u8; BYTE_SIZE_OF_CACHE_TOKEN],
        callback: Option<Arc<dyn PreparedModelCallback>>,
    ) -> ErrorStatus {
        if !model_cache.is_empty() || !data_cache.is_empty() {
            return not_remote_yet("prepareModel_1_3 with cache files", callback);
        }
        let (model, pools, fds) = split_model(model);
        let call = Call::PrepareModel {
            model,
            pools,
            preference,
            priority,
            deadline,
        };
        let (returned, notified, prepared) = match self.link.call(call, &fds) {
            Ok(Reply::Prepared {
                returned,
                notified,
                model,
            }) => {
                let prepared = model.map(|id| {
                    Arc::new(RemotePreparedModel {
                        link: self.link.clone(),
                        id,
                    }) as Arc<dyn IPreparedModel>
                });
                (returned, notified, prepared)
            }
            r => {
                let s = failed("prepareModel_1_3", r);
                (s, s, None)
            }
        };
        if let Some(cb) = callback {
            cb.notify(notified, prepared);
        }
        returned
    }

    /// Not remote yet: GENERAL_FAILURE, returned and notified.
    fn prepare_model_from_cache_1_3(
        &self,
        _deadline: OptionalTimePoint,
        _model_cache: &[NativeHandle],
        _data_cache: &[NativeHandle],
        _token: &[u8; BYTE_SIZE_OF_CACHE_TOKEN],
        callback: Option<Arc<dyn PreparedModelCallback>>,
    ) -> ErrorStatus {
        not_remote_yet("prepareModelFromCache_1_3", callback)
    }

    /// Not remote yet: GENERAL_FAILURE.
    fn allocate(
        &self,
        _desc: &BufferDesc,
        _prepared_models: &[Option<Arc<dyn IPreparedModel>>],
        _input_roles: &[BufferRole],
        _output_roles: &[BufferRole],
    ) -> AllocateResult {
        tracing::warn!("allocate: not remote yet");
        (ErrorStatus::GeneralFailure, None, 0)
    }
}

/// A model prepared in the service, owned by this connection; dropping it releases it
/// there (as does the connection's end).
pub struct RemotePreparedModel {
    link: Arc<Link>,
    id: u64,
}

impl Drop for RemotePreparedModel {
    fn drop(&mut self) {
        // Best effort: if the service is gone, so is the model.
        let _ = self.link.call(Call::Release { model: self.id }, &[]);
    }
}

impl IPreparedModel for RemotePreparedModel {
    /// Not remote yet: GENERAL_FAILURE, returned and notified.
    fn execute_1_3(
        &self,
        _request: &HalRequest,
        _measure: MeasureTiming,
        _deadline: OptionalTimePoint,
        _loop_timeout: OptionalTimeoutDuration,
        callback: Option<Arc<dyn ExecutionCallback>>,
    ) -> ErrorStatus {
        tracing::warn!("execute_1_3: not remote yet");
        if let Some(cb) = callback {
            cb.notify(ErrorStatus::GeneralFailure, Vec::new(), Timing::NONE);
        }
        ErrorStatus::GeneralFailure
    }

    fn execute_synchronously_1_3(
        &self,
        request: &HalRequest,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
    ) -> (ErrorStatus, Vec<OutputShape>, Timing) {
        let (pools, fds) = put_pools(&request.pools);
        let mut bare = Box::new(request.clone());
        bare.pools = Vec::new();
        let call = Call::ExecuteSynchronously {
            model: self.id,
            request: bare,
            pools,
            measure,
            deadline,
            loop_timeout,
        };
        match self.link.call(call, &fds) {
            Ok(Reply::Executed(s, shapes, timing)) => (s, shapes, timing),
            r => (
                failed("executeSynchronously_1_3", r),
                Vec::new(),
                Timing::NONE,
            ),
        }
    }

    /// Not remote yet: GENERAL_FAILURE, no fence, no callback.
    fn execute_fenced(
        &self,
        _request: &HalRequest,
        _wait_for: &[NativeHandle],
        _measure: MeasureTiming,
        _deadline: OptionalTimePoint,
        _loop_timeout: OptionalTimeoutDuration,
        _duration: OptionalTimeoutDuration,
    ) -> FencedResult {
        tracing::warn!("executeFenced: not remote yet");
        (ErrorStatus::GeneralFailure, None, None)
    }
}

fn not_remote_yet(what: &str, callback: Option<Arc<dyn PreparedModelCallback>>) -> ErrorStatus {
    tracing::warn!("{what}: not remote yet");
    if let Some(cb) = callback {
        cb.notify(ErrorStatus::GeneralFailure, None);
    }
    ErrorStatus::GeneralFailure
}
