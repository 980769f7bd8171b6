//! The service: hosts one device and answers each client on its own thread.
//!
//! A connection is checked against the [`PeerPolicy`], then must complete the handshake.
//! After that every message is validated before use: a message that cannot be read gets a
//! [`Reply::Refused`] and the connection carries on; a socket error or the client's
//! disconnection ends that connection only. Nothing a client sends can end the service.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use super::protocol::{take_memories, Call, Reply, Request, Response};
use super::transport::{self, PeerPolicy, TransportError};
use crate::interface::IDevice;

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
    loop {
        let (id, reply) = match transport::recv(sock) {
            Ok(frame) => match transport::decode::<Request>(&frame.bytes) {
                Ok(req) => (req.id, answer(device, req.call, frame.fds)),
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
fn answer(device: &dyn IDevice, call: Call, fds: Vec<std::os::fd::OwnedFd>) -> Reply {
    if !matches!(call, Call::GetSupportedOperations { .. }) && !fds.is_empty() {
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
    }
}
