//! The messages of the service protocol (after the handshake): a client sends
//! [`Request`]s, the service answers each with one [`Response`] carrying the same id.
//!
//! Memory crosses as [`WireMemory`]: the handle's descriptors travel with the message
//! (`SCM_RIGHTS`), in order, and each `WireMemory` says how many of them are its own;
//! [`take_memories`] checks that the counts add up to exactly the descriptors received.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::transport::TransportError;
use crate::hal::{
    Capabilities, DeviceStatus, DeviceType, ErrorStatus, Memory, Model, NativeHandle,
};
use crate::interface::Extension;

/// A memory whose descriptors travel beside the message body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireMemory {
    /// The memory's kind ("ashmem", "mmap_fd", ...).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// How many of the message's descriptors, taken in order, form its handle.
    pub fd_count: u32,
    /// The handle's integers.
    pub ints: Vec<i32>,
}

/// One call of the remote `IDevice`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Call {
    /// `getCapabilities_1_3`.
    GetCapabilities,
    /// `getVersionString`.
    GetVersionString,
    /// `getType`.
    GetType,
    /// `getStatus`.
    GetStatus,
    /// `getSupportedExtensions`.
    GetSupportedExtensions,
    /// `getNumberOfCacheFilesNeeded`.
    GetNumberOfCacheFilesNeeded,
    /// `getSupportedOperations_1_3`: the model without its pools, and the pools.
    GetSupportedOperations {
        /// The model (its `pools` travel in `pools`).
        model: Box<Model>,
        /// The model's constant pools.
        pools: Vec<WireMemory>,
    },
}

/// A client's message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Chosen by the client; echoed in the response.
    pub id: u64,
    /// What is asked.
    pub call: Call,
}

/// The answer to one [`Call`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// To `GetCapabilities`.
    Capabilities(ErrorStatus, Capabilities),
    /// To `GetVersionString`.
    VersionString(ErrorStatus, String),
    /// To `GetType`.
    Type(ErrorStatus, DeviceType),
    /// To `GetStatus`.
    Status(DeviceStatus),
    /// To `GetSupportedExtensions`.
    Extensions(ErrorStatus, Vec<Extension>),
    /// To `GetNumberOfCacheFilesNeeded`: (status, model cache files, data cache files).
    CacheFiles(ErrorStatus, u32, u32),
    /// To `GetSupportedOperations`.
    SupportedOperations(ErrorStatus, Vec<bool>),
    /// The request could not be used (malformed, wrong descriptors): why. The id is 0
    /// when the request was too broken to read one.
    Refused(String),
}

/// The service's message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The request's id.
    pub id: u64,
    /// The answer.
    pub reply: Reply,
}

/// Splits memories into their wire form and the descriptors to send beside it.
pub fn put_memories(pools: &[Memory]) -> (Vec<WireMemory>, Vec<BorrowedFd<'_>>) {
    let mut fds = Vec::new();
    let wire = pools
        .iter()
        .map(|m| {
            fds.extend(m.handle.fds.iter().map(|f| f.as_fd()));
            WireMemory {
                name: m.name.clone(),
                size: m.size,
                fd_count: u32::try_from(m.handle.fds.len()).unwrap_or(u32::MAX),
                ints: m.handle.ints.clone(),
            }
        })
        .collect();
    (wire, fds)
}

/// Rebuilds memories from their wire form and the descriptors received, which must be
/// exactly as many as the memories declare (otherwise all are closed and it is an error).
pub fn take_memories(
    wire: Vec<WireMemory>,
    fds: Vec<OwnedFd>,
) -> Result<Vec<Memory>, TransportError> {
    let declared = wire
        .iter()
        .try_fold(0usize, |n, m| n.checked_add(m.fd_count as usize))
        .unwrap_or(usize::MAX);
    if declared != fds.len() {
        return Err(TransportError::FdCount {
            declared,
            carried: fds.len(),
        });
    }
    let mut fds = fds.into_iter();
    Ok(wire
        .into_iter()
        .map(|m| Memory {
            name: m.name,
            size: m.size,
            handle: NativeHandle {
                fds: fds
                    .by_ref()
                    .take(m.fd_count as usize)
                    .map(Arc::new)
                    .collect(),
                ints: m.ints,
            },
        })
        .collect())
}
