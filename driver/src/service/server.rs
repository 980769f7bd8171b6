//! The service: hosts one device and answers each client on its own thread.
//!
//! A connection is checked against the [`PeerPolicy`], then must complete the handshake.
//! After that every message is validated before use: a message that cannot be read gets a
//! [`Reply::Refused`] and the connection carries on; a socket error or the client's
//! disconnection ends that connection only. Nothing a client sends can end the service.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use super::protocol::{take_memories, take_pools, Call, Reply, Request, Response};
use super::transport::{self, PeerPolicy, TransportError};
use crate::hal::{ErrorStatus, BYTE_SIZE_OF_CACHE_TOKEN};
use crate::interface::{IDevice, IPreparedModel, PreparedModelSlot};

/// The most prepared models one client may hold at once; a preparation beyond it is
/// RESOURCE_EXHAUSTED_TRANSIENT.
pub const MAX_MODELS_PER_CLIENT: usize = 256;
/// How long the service waits for a preparation's notification after the call returned.
const PREPARE_WAIT: Duration = Duration::from_secs(120);

/// What one connection owns: released when the client disconnects.
#[derive(Default)]
struct Session {
    models: HashMap<u64, Arc<dyn IPreparedModel>>,
    next_model: u64,
}

/// Serves `device` on `listener` until accepting fails; one thread per connection.
pub fn serve(
    listener: OwnedFd,
    device: Arc<dyn IDevice>,
    device_name: String,
    policy: PeerPolicy,
) -> Result<(), TransportError> {
    let device_name: Arc<str> = device_name.into();
    loop {
        let conn = match transport::accept(listener.as_fd()) {
            Ok(c) => c,
            // Out of descriptors or memory: refuse this one, keep serving.
            Err(TransportError::Io(
                e @ (nix::errno::Errno::EMFILE
                | nix::errno::Errno::ENFILE
                | nix::errno::Errno::ENOBUFS
                | nix::errno::Errno::ENOMEM),
            )) => {
                tracing::warn!("accept: {e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
            Err(e) => return Err(e),
        };
        if let Err(e) = policy.check(&conn) {
            tracing::warn!("refused: {e}");
            continue;
        }
        let device = device.clone();
        let name = device_name.clone();
        let spawned = std::thread::Builder::new()
            .name("vnpu-conn".into())
            .spawn(move || {
                if let Err(e) = connection(conn.as_fd(), device.as_ref(), &name) {
                    tracing::debug!("connection ended: {e}");
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start a connection thread: {e}");
        }
    }
}

/// One client, from the handshake until it disconnects or the socket fails.
fn connection(
    sock: BorrowedFd<'_>,
    device: &dyn IDevice,
    name: &str,
) -> Result<(), TransportError> {
    transport::handshake_server(sock, name)?;
    // Dropped when this returns (disconnection, socket error): the client's prepared
    // models go with it.
    let mut session = Session::default();
    loop {
        let (id, reply) = match transport::recv(sock) {
            Ok(frame) => match transport::decode::<Request>(&frame.bytes) {
                Ok(req) => (req.id, answer(device, &mut session, req.call, frame.fds)),
                Err(e) => (0, Reply::Refused(e.to_string())),
            },
            // Refused before use (its descriptors already closed): say so, carry on.
            Err(e @ (TransportError::Oversized | TransportError::TooManyFds)) => {
                (0, Reply::Refused(e.to_string()))
            }
            Err(e) => return Err(e),
        };
        transport::send(sock, &transport::encode(&Response { id, reply })?, &[])?;
    }
}

/// Runs one call against the device. Descriptors a call does not take are refused.
fn answer(device: &dyn IDevice, session: &mut Session, call: Call, fds: Vec<OwnedFd>) -> Reply {
    let takes_fds = matches!(
        call,
        Call::GetSupportedOperations { .. }
            | Call::PrepareModel { .. }
            | Call::ExecuteSynchronously { .. }
    );
    if !takes_fds && !fds.is_empty() {
        return Reply::Refused(
            TransportError::FdCount {
                declared: 0,
                carried: fds.len(),
            }
            .to_string(),
        );
    }
    match call {
        Call::GetCapabilities => {
            let (s, c) = device.get_capabilities_1_3();
            Reply::Capabilities(s, c)
        }
        Call::GetVersionString => {
            let (s, v) = device.get_version_string();
            Reply::VersionString(s, v)
        }
        Call::GetType => {
            let (s, t) = device.get_type();
            Reply::Type(s, t)
        }
        Call::GetStatus => Reply::Status(device.get_status()),
        Call::GetSupportedExtensions => {
            let (s, e) = device.get_supported_extensions();
            Reply::Extensions(s, e)
        }
        Call::GetNumberOfCacheFilesNeeded => {
            let (s, m, d) = device.get_number_of_cache_files_needed();
            Reply::CacheFiles(s, m, d)
        }
        Call::GetSupportedOperations { mut model, pools } => match take_memories(pools, fds) {
            Ok(pools) => {
                model.pools = pools;
                let (s, ops) = device.get_supported_operations_1_3(&model);
                Reply::SupportedOperations(s, ops)
            }
            Err(e) => Reply::Refused(e.to_string()),
        },
        Call::PrepareModel {
            mut model,
            pools,
            preference,
            priority,
            deadline,
        } => {
            model.pools = match take_memories(pools, fds) {
                Ok(p) => p,
                Err(e) => return Reply::Refused(e.to_string()),
            };
            if session.models.len() >= MAX_MODELS_PER_CLIENT {
                let s = ErrorStatus::ResourceExhaustedTransient;
                return Reply::Prepared {
                    returned: s,
                    notified: s,
                    model: None,
                };
            }
            let slot = PreparedModelSlot::new();
            let returned = device.prepare_model_1_3(
                &model,
                preference,
                priority,
                deadline,
                &[],
                &[],
                &[0; BYTE_SIZE_OF_CACHE_TOKEN],
                Some(slot.clone()),
            );
            // A refused call has notified already (the device notifies before returning).
            let wait = if returned == ErrorStatus::None {
                PREPARE_WAIT
            } else {
                Duration::ZERO
            };
            let fallback = if returned == ErrorStatus::None {
                ErrorStatus::GeneralFailure
            } else {
                returned
            };
            let (notified, prepared) = slot.wait_for(wait).unwrap_or((fallback, None));
            let model = match prepared {
                Some(p) if notified == ErrorStatus::None => {
                    session.next_model += 1;
                    session.models.insert(session.next_model, p);
                    Some(session.next_model)
                }
                _ => None,
            };
            Reply::Prepared {
                returned,
                notified,
                model,
            }
        }
        Call::ExecuteSynchronously {
            model,
            mut request,
            pools,
            measure,
            deadline,
            loop_timeout,
        } => {
            let Some(prepared) = session.models.get(&model) else {
                return Reply::Refused(format!("no prepared model {model} on this connection"));
            };
            request.pools = match take_pools(pools, fds) {
                Ok(p) => p,
                Err(e) => return Reply::Refused(e.to_string()),
            };
            let (s, shapes, timing) =
                prepared.execute_synchronously_1_3(&request, measure, deadline, loop_timeout);
            Reply::Executed(s, shapes, timing)
        }
        Call::Release { model } => match session.models.remove(&model) {
            Some(_) => Reply::Released,
            None => Reply::Refused(format!("no prepared model {model} on this connection")),
        },
    }
}
