//! `RemoteDevice`: the `IDevice` of a device served by `vnpu serve`, over its socket.
//!
//! Covered so far: the queries (capabilities, version string, type, status, extensions,
//! cache file counts, supported operations). Not yet remote: preparation (from a model or
//! from cache) and `allocate` return GENERAL_FAILURE (and notify the callback with it),
//! so callers see a clean refusal rather than a hang.
//!
//! Every wait is bounded: a reply that does not arrive within [`RemoteDevice::timeout`]
//! (a service that died or hung) is an error, GENERAL_FAILURE to the caller (the HAL 1.3
//! types have no DEAD_OBJECT), and the status OFFLINE.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use super::protocol::{put_memories, Call, Reply, Request, Response};
use super::transport::{self, TransportError};
use crate::hal::{
    BufferDesc, BufferRole, Capabilities, DeviceStatus, DeviceType, ErrorStatus,
    ExecutionPreference, Model, NativeHandle, OptionalTimePoint, Priority,
    BYTE_SIZE_OF_CACHE_TOKEN,
};
use crate::interface::{AllocateResult, Extension, IDevice, IPreparedModel, PreparedModelCallback};

/// The default bound on waiting for one reply.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A device served by another process.
pub struct RemoteDevice {
    sock: Mutex<OwnedFd>,
    name: String,
    next_id: AtomicU64,
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
            sock: Mutex::new(sock),
            name,
            next_id: AtomicU64::new(1),
        })
    }

    /// The served device's name (from the handshake).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// One call without descriptors and its reply. Calls on one connection are serialised.
    fn call(&self, call: Call) -> Result<Reply, TransportError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let sock = self.sock.lock().unwrap_or_else(|p| p.into_inner());
        transport::send(
            sock.as_fd(),
            &transport::encode(&Request { id, call })?,
            &[],
        )?;
        self.reply(&sock, id)
    }

    /// `getSupportedOperations_1_3`'s call: the model's pools travel as descriptors.
    fn call_with_model(&self, model: &Model) -> Result<Reply, TransportError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let sock = self.sock.lock().unwrap_or_else(|p| p.into_inner());
        let (pools, fds) = put_memories(&model.pools);
        let mut bare = Box::new(model.clone());
        bare.pools = Vec::new();
        let request = Request {
            id,
            call: Call::GetSupportedOperations { model: bare, pools },
        };
        transport::send(sock.as_fd(), &transport::encode(&request)?, &fds)?;
        self.reply(&sock, id)
    }

    fn reply(&self, sock: &OwnedFd, id: u64) -> Result<Reply, TransportError> {
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
        match self.call_with_model(model) {
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

    /// Not remote yet: GENERAL_FAILURE, returned and notified.
    fn prepare_model_1_3(
        &self,
        _model: &Model,
        _preference: ExecutionPreference,
        _priority: Priority,
        _deadline: OptionalTimePoint,
        _model_cache: &[NativeHandle],
        _data_cache: &[NativeHandle],
        _token: &[u8; BYTE_SIZE_OF_CACHE_TOKEN],
        callback: Option<Arc<dyn PreparedModelCallback>>,
    ) -> ErrorStatus {
        not_remote_yet("prepareModel_1_3", callback)
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

fn not_remote_yet(what: &str, callback: Option<Arc<dyn PreparedModelCallback>>) -> ErrorStatus {
    tracing::warn!("{what}: not remote yet");
    if let Some(cb) = callback {
        cb.notify(ErrorStatus::GeneralFailure, None);
    }
    ErrorStatus::GeneralFailure
}
