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
    Capabilities, DeviceStatus, DeviceType, ErrorStatus, ExecutionPreference, MeasureTiming,
    Memory, Model, NativeHandle, OptionalTimePoint, OptionalTimeoutDuration, OutputShape, Priority,
    Request as HalRequest, RequestMemoryPool, Timing,
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

/// A request pool on the wire: a memory (descriptors beside the body) or a token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WirePool {
    /// A shared memory.
    Memory(WireMemory),
    /// A driver-managed buffer's token.
    Token(u32),
}

/// One call of the remote `IDevice` or of one of its prepared models.
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
    /// `prepareModel_1_3` without cache files; the service waits for the preparation.
    PrepareModel {
        /// The model (its `pools` travel in `pools`).
        model: Box<Model>,
        /// The model's constant pools.
        pools: Vec<WireMemory>,
        /// Execution preference.
        preference: ExecutionPreference,
        /// Priority.
        priority: Priority,
        /// Deadline.
        deadline: OptionalTimePoint,
    },
    /// `executeSynchronously_1_3` on a prepared model of this connection.
    ExecuteSynchronously {
        /// The prepared model's id on this connection.
        model: u64,
        /// The request (its `pools` travel in `pools`).
        request: Box<HalRequest>,
        /// The request's pools.
        pools: Vec<WirePool>,
        /// Whether to measure timing.
        measure: MeasureTiming,
        /// Deadline.
        deadline: OptionalTimePoint,
        /// Loop timeout.
        loop_timeout: OptionalTimeoutDuration,
    },
    /// The client dropped its prepared model.
    Release {
        /// The prepared model's id on this connection.
        model: u64,
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
    /// To `PrepareModel`: what the call returned, what the callback was notified with
    /// and, on success, the prepared model's id on this connection.
    Prepared {
        /// The returned status.
        returned: ErrorStatus,
        /// The notified status.
        notified: ErrorStatus,
        /// The prepared model's id.
        model: Option<u64>,
    },
    /// To `ExecuteSynchronously`.
    Executed(ErrorStatus, Vec<OutputShape>, Timing),
    /// To `Release`.
    Released,
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

/// Splits request pools into their wire form and the descriptors to send beside it.
pub fn put_pools(pools: &[RequestMemoryPool]) -> (Vec<WirePool>, Vec<BorrowedFd<'_>>) {
    let mut fds = Vec::new();
    let wire = pools
        .iter()
        .map(|p| match p {
            RequestMemoryPool::HidlMemory(m) => {
                let (mut w, f) = put_memories(std::slice::from_ref(m));
                fds.extend(f);
                WirePool::Memory(w.remove(0))
            }
            RequestMemoryPool::Token(t) => WirePool::Token(*t),
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
    let mut fds = checked_fds(wire.iter(), fds)?;
    Ok(wire.into_iter().map(|m| build(m, &mut fds)).collect())
}

/// Rebuilds request pools as [`take_memories`] does memories.
pub fn take_pools(
    wire: Vec<WirePool>,
    fds: Vec<OwnedFd>,
) -> Result<Vec<RequestMemoryPool>, TransportError> {
    let memories = wire.iter().filter_map(|p| match p {
        WirePool::Memory(m) => Some(m),
        WirePool::Token(_) => None,
    });
    let mut fds = checked_fds(memories, fds)?;
    Ok(wire
        .into_iter()
        .map(|p| match p {
            WirePool::Memory(m) => RequestMemoryPool::HidlMemory(build(m, &mut fds)),
            WirePool::Token(t) => RequestMemoryPool::Token(t),
        })
        .collect())
}

/// The descriptors, if exactly as many as `memories` declare.
fn checked_fds<'a>(
    memories: impl Iterator<Item = &'a WireMemory>,
    fds: Vec<OwnedFd>,
) -> Result<std::vec::IntoIter<OwnedFd>, TransportError> {
    let declared = memories
        .map(|m| m.fd_count as usize)
        .try_fold(0usize, |n, c| n.checked_add(c))
        .unwrap_or(usize::MAX);
    if declared != fds.len() {
        return Err(TransportError::FdCount {
            declared,
            carried: fds.len(),
        });
    }
    Ok(fds.into_iter())
}

/// One memory, taking its descriptors from `fds` (counts already checked).
fn build(m: WireMemory, fds: &mut std::vec::IntoIter<OwnedFd>) -> Memory {
    Memory {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(fd_count: u32) -> WireMemory {
        WireMemory {
            name: "ashmem".into(),
            size: 8,
            fd_count,
            ints: vec![],
        }
    }

    /// Descriptors are paired with memories in order; a count that does not add up is an
    /// error that closes every descriptor received.
    #[test]
    fn descriptors_pair_exactly_or_are_closed() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let fds = vec![r.try_clone().unwrap(), r.try_clone().unwrap()];
        let pools = vec![WirePool::Token(3), WirePool::Memory(wire(2))];
        let got = take_pools(pools, fds).unwrap();
        assert!(matches!(&got[0], RequestMemoryPool::Token(3)));
        assert!(matches!(&got[1], RequestMemoryPool::HidlMemory(m) if m.handle.fds.len() == 2));
        drop(got);

        let fds = vec![r.try_clone().unwrap(), r.try_clone().unwrap()];
        assert!(matches!(
            take_memories(vec![wire(1)], fds),
            Err(TransportError::FdCount {
                declared: 1,
                carried: 2
            })
        ));
        let fds = vec![r.try_clone().unwrap()];
        assert!(take_memories(vec![wire(u32::MAX), wire(u32::MAX)], fds).is_err());
        drop(r);
        assert_eq!(nix::unistd::write(&w, b"x"), Err(nix::errno::Errno::EPIPE));
    }
}
