//! The messages of the service protocol (after the handshake): a client sends
//! [`Request`]s; the service answers each with one [`Response`] carrying the same id and,
//! for the calls that launch work ([`Call::launches`]), later sends exactly one
//! [`Reply::Notified`] under that id when the work ends: the HAL's callbacks as messages.
//!
//! Descriptors travel beside the body (`SCM_RIGHTS`), in the order the body names them:
//! every [`WireHandle`] says how many of them are its own, and [`Incoming`] hands them out
//! only after checking that the counts add up to exactly the descriptors received.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::transport::TransportError;
use crate::device::DeviceUsage;
use crate::hal::{
    BufferDesc, BufferRole, Capabilities, DeviceStatus, DeviceType, ErrorStatus,
    ExecutionPreference, HalVersion, MeasureTiming, Memory, Model, NativeHandle, OptionalTimePoint,
    OptionalTimeoutDuration, OutputShape, Priority, Request as HalRequest, RequestMemoryPool,
    Timing, BYTE_SIZE_OF_CACHE_TOKEN,
};
use crate::interface::Extension;

/// A native handle whose descriptors travel beside the message body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireHandle {
    /// How many of the message's descriptors, taken in order, are this handle's.
    pub fd_count: u32,
    /// The handle's integers.
    pub ints: Vec<i32>,
}

/// A memory whose handle's descriptors travel beside the message body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireMemory {
    /// The memory's kind ("ashmem", "mmap_fd", ...).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its handle.
    pub handle: WireHandle,
}

/// A request pool on the wire: a memory or a driver-managed buffer's token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WirePool {
    /// A shared memory.
    Memory(WireMemory),
    /// A driver-managed buffer's token (one this connection allocated).
    Token(u32),
    /// A shared memory the service keeps for this connection under an id (in
    /// `0..REGISTERED_POOLS`; an id in use is replaced), mapped in its device while kept,
    /// so later executions name it by [`WirePool::Registered`] and it is neither passed
    /// nor mapped again.
    Register(i32, WireMemory),
    /// A memory registered earlier on this connection (and not forgotten since).
    Registered(i32),
}

/// The most memories one connection may have registered ([`WirePool::Register`]): ids
/// run from 0 to this, exclusive.
pub const REGISTERED_POOLS: i32 = 256;

/// What an execution is given, on the wire: the request without its pools, and the pools.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireRequest {
    /// The prepared model's id on this connection.
    pub model: u64,
    /// The request (its `pools` travel in `pools`).
    pub request: Box<HalRequest>,
    /// The request's pools.
    pub pools: Vec<WirePool>,
    /// Whether to measure timing.
    pub measure: MeasureTiming,
    /// Deadline (CLOCK_MONOTONIC, the same clock on both sides of the socket).
    pub deadline: OptionalTimePoint,
    /// Loop timeout.
    pub loop_timeout: OptionalTimeoutDuration,
    /// Registered memories the client let go of: forgotten before `pools` is read.
    pub forget: Vec<i32>,
}

/// Compilation cache files and token, on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireCache {
    /// The model cache handles.
    pub model_cache: Vec<WireHandle>,
    /// The data cache handles.
    pub data_cache: Vec<WireHandle>,
    /// The token.
    pub token: [u8; BYTE_SIZE_OF_CACHE_TOKEN],
}

/// One call of the remote `IDevice`, of one of its prepared models or buffers.
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
    /// `getSupportedOperations` at a level (1.3, or AIDL V4's): the model without its
    /// pools, and the pools.
    GetSupportedOperations {
        /// The model (its `pools` travel in `pools`).
        model: Box<Model>,
        /// The model's constant pools.
        pools: Vec<WireMemory>,
        /// The level the model is validated at (the client's interface).
        level: HalVersion,
    },
    /// `prepareModel_1_3`, or V4's prepareModel / prepareModelWithConfig (by `level`):
    /// answered [`Reply::Launched`], then [`Notification::Prepared`].
    PrepareModel {
        /// The level the model is validated at (the client's interface).
        level: HalVersion,
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
        /// Cache files and token (no files: no caching).
        cache: WireCache,
    },
    /// `prepareModelFromCache_1_3`: answered [`Reply::Launched`], then
    /// [`Notification::Prepared`].
    PrepareModelFromCache {
        /// Deadline.
        deadline: OptionalTimePoint,
        /// Cache files and token.
        cache: WireCache,
    },
    /// `allocate`: a driver-managed buffer owned by this connection.
    Allocate {
        /// The buffer's description.
        desc: BufferDesc,
        /// The prepared models (ids on this connection) the roles refer to.
        models: Vec<Option<u64>>,
        /// Input roles.
        input_roles: Vec<BufferRole>,
        /// Output roles.
        output_roles: Vec<BufferRole>,
    },
    /// `IBuffer::copyTo`.
    CopyTo {
        /// The buffer's id on this connection.
        buffer: u64,
        /// Where to copy to.
        dst: WireMemory,
    },
    /// `IBuffer::copyFrom`.
    CopyFrom {
        /// The buffer's id on this connection.
        buffer: u64,
        /// Where to copy from.
        src: WireMemory,
        /// The value's dimensions (empty: those given at allocation).
        dimensions: Vec<u32>,
    },
    /// `execute_1_3`: answered [`Reply::Launched`], then [`Notification::Executed`].
    Execute(WireRequest),
    /// `executeSynchronously_1_3`.
    ExecuteSynchronously(WireRequest),
    /// `executeFenced`: answered [`Reply::Fenced`] (the fence's descriptors beside it).
    ExecuteFenced {
        /// The execution.
        exec: WireRequest,
        /// Sync fences to wait for.
        wait_for: Vec<WireHandle>,
        /// Time allowed after the fences signal.
        duration: OptionalTimeoutDuration,
    },
    /// `IFencedExecutionCallback::getExecutionInfo`.
    FencedInfo {
        /// The fenced execution's id on this connection.
        callback: u64,
    },
    /// `configureExecutionBurst`: the two queues' memfds travel as descriptors.
    ConfigureBurst {
        /// The prepared model's id on this connection.
        model: u64,
        /// The request queue's memfd.
        request_channel: WireHandle,
        /// The result queue's memfd.
        result_channel: WireHandle,
    },
    /// `IBurstContext::freeMemory`: answered once the slot is forgotten (so a packet sent
    /// after the answer cannot find the old memory).
    FreeBurstMemory {
        /// The burst's id on this connection.
        burst: u64,
        /// The slot.
        slot: i32,
    },
    /// The client's answer to [`Notification::GetMemories`] (no reply).
    BurstMemories {
        /// The notification's id.
        token: u64,
        /// What `IBurstCallback::getMemories` returned.
        status: ErrorStatus,
        /// The memories, in the order of the slots asked for.
        memories: Vec<WireMemory>,
    },
    /// V4 `createReusableExecution`'s core: answered [`Reply::Reusable`].
    CreateReusableExecution(WireRequest),
    /// V4 `IExecution::executeSynchronously`: answered [`Reply::Executed`].
    ExecuteReusable {
        /// The reusable execution's id on this connection.
        execution: u64,
        /// Deadline.
        deadline: OptionalTimePoint,
    },
    /// V4 `IExecution::executeFenced`: answered [`Reply::Fenced`].
    ExecuteReusableFenced {
        /// The reusable execution's id on this connection.
        execution: u64,
        /// Sync fences to wait for.
        wait_for: Vec<WireHandle>,
        /// Deadline.
        deadline: OptionalTimePoint,
        /// Time allowed after the fences signal.
        duration: OptionalTimeoutDuration,
    },
    /// V4 `configureExecutionBurst` (a burst with memory identifier tokens): answered
    /// [`Reply::Burst`].
    ConfigureTokenBurst {
        /// The prepared model's id on this connection.
        model: u64,
    },
    /// V4 `IBurst::executeSynchronously`: answered [`Reply::Executed`].
    ExecuteTokenBurst {
        /// The burst's id on this connection.
        burst: u64,
        /// The execution (its `model` is the burst's).
        exec: WireRequest,
        /// One memory identifier token per request pool.
        tokens: Vec<i64>,
    },
    /// V4 `IBurst::releaseMemoryResource`: answered [`Reply::Released`].
    ReleaseMemoryResource {
        /// The burst's id on this connection.
        burst: u64,
        /// The token.
        token: i64,
    },
    /// Gives a usage snapshot of the service ([`Reply::Usage`]).
    Usage,
    /// The client dropped an object (no reply is sent).
    Release(Object),
}

/// An object a connection owns, by its id on that connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Object {
    /// A prepared model.
    Model(u64),
    /// A driver-managed buffer.
    Buffer(u64),
    /// A fenced execution's callback.
    Fenced(u64),
    /// A burst.
    Burst(u64),
    /// A V4 reusable execution.
    Execution(u64),
    /// A V4 burst with memory identifier tokens.
    TokenBurst(u64),
}

impl Call {
    /// Whether the call launches work that ends with one [`Reply::Notified`] (sent iff the
    /// call was answered [`Reply::Launched`]).
    pub fn launches(&self) -> bool {
        matches!(
            self,
            Call::PrepareModel { .. } | Call::PrepareModelFromCache { .. } | Call::Execute(_)
        )
    }

    /// How many descriptors travel with this call: the sum of its handles' counts
    /// (saturating, so a lying count can never match).
    pub fn fd_count(&self) -> usize {
        fn sum<'a>(handles: impl IntoIterator<Item = &'a WireHandle>) -> usize {
            handles
                .into_iter()
                .try_fold(0usize, |n, h| n.checked_add(h.fd_count as usize))
                .unwrap_or(usize::MAX)
        }
        fn memories(m: &[WireMemory]) -> usize {
            sum(m.iter().map(|m| &m.handle))
        }
        fn pools(p: &[WirePool]) -> usize {
            sum(p.iter().filter_map(|p| match p {
                WirePool::Memory(m) | WirePool::Register(_, m) => Some(&m.handle),
                WirePool::Token(_) | WirePool::Registered(_) => None,
            }))
        }
        fn cache(c: &WireCache) -> usize {
            sum(c.model_cache.iter().chain(&c.data_cache))
        }
        let parts = match self {
            Call::GetSupportedOperations { pools: p, .. } => [memories(p), 0],
            Call::PrepareModel {
                pools: p, cache: c, ..
            } => [memories(p), cache(c)],
            Call::PrepareModelFromCache { cache: c, .. } => [cache(c), 0],
            Call::CopyTo { dst: m, .. } | Call::CopyFrom { src: m, .. } => [sum([&m.handle]), 0],
            Call::Execute(e) | Call::ExecuteSynchronously(e) => [pools(&e.pools), 0],
            Call::ExecuteFenced { exec, wait_for, .. } => [pools(&exec.pools), sum(wait_for)],
            Call::ConfigureBurst {
                request_channel: r,
                result_channel: q,
                ..
            } => [sum([r]), sum([q])],
            Call::BurstMemories { memories: m, .. } => [memories(m), 0],
            Call::CreateReusableExecution(e) | Call::ExecuteTokenBurst { exec: e, .. } => {
                [pools(&e.pools), 0]
            }
            Call::ExecuteReusableFenced { wait_for, .. } => [sum(wait_for), 0],
            _ => [0, 0],
        };
        parts[0].saturating_add(parts[1])
    }
}

/// A client's message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Chosen by the client, unique on its connection; echoed in the response and in the
    /// notification of the work the call launched.
    pub id: u64,
    /// What is asked.
    pub call: Call,
}

/// A snapshot of the service's load, for operators and leak checks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceUsage {
    /// Clients connected now.
    pub connections: u64,
    /// The device's side.
    pub device: DeviceUsage,
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
    /// To a call that launches work: what the call returned. One [`Reply::Notified`]
    /// follows under the same id.
    Launched(ErrorStatus),
    /// To `Allocate`: status, the buffer's id on this connection, its token.
    Allocated(ErrorStatus, Option<u64>, u32),
    /// To `CopyTo` and `CopyFrom`.
    Copied(ErrorStatus),
    /// To `ExecuteSynchronously`.
    Executed(ErrorStatus, Vec<OutputShape>, Timing),
    /// To `ExecuteFenced`: status, the fence (its descriptors beside the message) and the
    /// callback's id on this connection.
    Fenced(ErrorStatus, Option<WireHandle>, Option<u64>),
    /// To `FencedInfo`.
    FencedInfo(ErrorStatus, Timing, Timing),
    /// To `Usage`.
    Usage(ServiceUsage),
    /// To `ConfigureBurst`: status and the burst's id on this connection.
    Burst(ErrorStatus, Option<u64>),
    /// To `FreeBurstMemory`.
    Freed,
    /// To `CreateReusableExecution`: status and the execution's id on this connection.
    Reusable(ErrorStatus, Option<u64>),
    /// To `ReleaseMemoryResource`.
    Released(ErrorStatus),
    /// The end of launched work: the callback's notification.
    Notified(Notification),
    /// The request could not be used (malformed, wrong descriptors, unknown object):
    /// why. The id is 0 when the request was too broken to read one. A launching call
    /// refused so gets no notification.
    Refused(String),
}

/// A callback's notification, sent when launched work ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Notification {
    /// A preparation ended: status and, on success, the prepared model's id.
    Prepared(ErrorStatus, Option<u64>),
    /// An execution ended.
    Executed(ErrorStatus, Vec<OutputShape>, Timing),
    /// Not an ending: a burst of this connection asks for the memories of slots it has
    /// not cached (`IBurstCallback::getMemories`); answered with
    /// [`Call::BurstMemories`] under this message's id.
    GetMemories {
        /// The burst's id.
        burst: u64,
        /// The slots.
        slots: Vec<i32>,
    },
}

/// The service's message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The request's id.
    pub id: u64,
    /// The answer.
    pub reply: Reply,
}

/// Builds a message's wire form: handles become [`WireHandle`]s and their descriptors
/// are collected, in order, to send beside the body.
#[derive(Default)]
pub struct Outgoing<'a> {
    /// The descriptors, in the order the body names them.
    pub fds: Vec<BorrowedFd<'a>>,
}

impl<'a> Outgoing<'a> {
    /// A handle's wire form; its descriptors join the message.
    pub fn handle(&mut self, h: &'a NativeHandle) -> WireHandle {
        self.fds.extend(h.fds.iter().map(|f| f.as_fd()));
        WireHandle {
            fd_count: u32::try_from(h.fds.len()).unwrap_or(u32::MAX),
            ints: h.ints.clone(),
        }
    }

    /// A memory's wire form.
    pub fn memory(&mut self, m: &'a Memory) -> WireMemory {
        WireMemory {
            name: m.name.clone(),
            size: m.size,
            handle: self.handle(&m.handle),
        }
    }

    /// Memories' wire forms.
    pub fn memories(&mut self, m: &'a [Memory]) -> Vec<WireMemory> {
        m.iter().map(|m| self.memory(m)).collect()
    }

    /// Handles' wire forms.
    pub fn handles(&mut self, h: &'a [NativeHandle]) -> Vec<WireHandle> {
        h.iter().map(|h| self.handle(h)).collect()
    }

    /// Request pools' wire forms.
    pub fn pools(&mut self, pools: &'a [RequestMemoryPool]) -> Vec<WirePool> {
        pools
            .iter()
            .map(|p| match p {
                RequestMemoryPool::HidlMemory(m) => WirePool::Memory(self.memory(m)),
                RequestMemoryPool::Token(t) => WirePool::Token(*t),
            })
            .collect()
    }

    /// The cache files' wire form.
    pub fn cache(
        &mut self,
        model_cache: &'a [NativeHandle],
        data_cache: &'a [NativeHandle],
        token: &[u8; BYTE_SIZE_OF_CACHE_TOKEN],
    ) -> WireCache {
        WireCache {
            model_cache: self.handles(model_cache),
            data_cache: self.handles(data_cache),
            token: *token,
        }
    }
}

/// A request pool as received: a memory (its descriptors taken), a buffer's token, a
/// memory to register, or the id of one registered before.
#[derive(Debug)]
pub enum ReceivedPool {
    /// A shared memory.
    Memory(Memory),
    /// A driver-managed buffer's token.
    Token(u32),
    /// A memory to keep under an id ([`WirePool::Register`]; the id is not checked yet).
    Register(i32, Memory),
    /// A registered memory's id (not checked yet).
    Registered(i32),
}

/// Hands a received message's descriptors to the handles its body names, in order.
pub struct Incoming {
    fds: std::vec::IntoIter<OwnedFd>,
}

impl Incoming {
    /// The descriptors, if exactly as many as the body declares (`declared`); otherwise
    /// all are closed and it is an error.
    pub fn exact(declared: usize, fds: Vec<OwnedFd>) -> Result<Incoming, TransportError> {
        if declared != fds.len() {
            return Err(TransportError::FdCount {
                declared,
                carried: fds.len(),
            });
        }
        Ok(Incoming {
            fds: fds.into_iter(),
        })
    }

    /// A handle, taking its descriptors (the counts were checked by [`Incoming::exact`]).
    pub fn handle(&mut self, h: WireHandle) -> NativeHandle {
        NativeHandle {
            fds: self
                .fds
                .by_ref()
                .take(h.fd_count as usize)
                .map(Arc::new)
                .collect(),
            ints: h.ints,
        }
    }

    /// A memory.
    pub fn memory(&mut self, m: WireMemory) -> Memory {
        Memory {
            name: m.name,
            size: m.size,
            handle: self.handle(m.handle),
        }
    }

    /// Memories.
    pub fn memories(&mut self, m: Vec<WireMemory>) -> Vec<Memory> {
        m.into_iter().map(|m| self.memory(m)).collect()
    }

    /// Handles.
    pub fn handles(&mut self, h: Vec<WireHandle>) -> Vec<NativeHandle> {
        h.into_iter().map(|h| self.handle(h)).collect()
    }

    /// Request pools, each memory taking its descriptors.
    pub fn pools(&mut self, p: Vec<WirePool>) -> Vec<ReceivedPool> {
        p.into_iter()
            .map(|p| match p {
                WirePool::Memory(m) => ReceivedPool::Memory(self.memory(m)),
                WirePool::Token(t) => ReceivedPool::Token(t),
                WirePool::Register(k, m) => ReceivedPool::Register(k, self.memory(m)),
                WirePool::Registered(k) => ReceivedPool::Registered(k),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(fd_count: u32) -> WireMemory {
        WireMemory {
            name: "ashmem".into(),
            size: 8,
            handle: WireHandle {
                fd_count,
                ints: vec![],
            },
        }
    }

    fn execution(pools: Vec<WirePool>) -> WireRequest {
        WireRequest {
            model: 1,
            request: Box::default(),
            pools,
            measure: MeasureTiming::NO,
            deadline: OptionalTimePoint::NONE,
            loop_timeout: OptionalTimeoutDuration::default(),
            forget: Vec::new(),
        }
    }

    /// Descriptors are paired with handles in order; a count that does not add up is an
    /// error that closes every descriptor received.
    #[test]
    fn descriptors_pair_exactly_or_are_closed() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let fds = vec![r.try_clone().unwrap(), r.try_clone().unwrap()];
        let call = Call::Execute(execution(vec![
            WirePool::Token(3),
            WirePool::Memory(memory(2)),
        ]));
        assert_eq!(call.fd_count(), 2);
        let Call::Execute(e) = call else {
            unreachable!()
        };
        let got = Incoming::exact(2, fds).unwrap().pools(e.pools);
        assert!(matches!(&got[0], ReceivedPool::Token(3)));
        assert!(matches!(&got[1], ReceivedPool::Memory(m) if m.handle.fds.len() == 2));
        drop(got);
        // A registration carries its memory's descriptors; naming one carries none.
        let call = Call::ExecuteSynchronously(execution(vec![
            WirePool::Registered(4),
            WirePool::Register(5, memory(1)),
            WirePool::Token(1),
        ]));
        assert_eq!(call.fd_count(), 1);

        let fds = vec![r.try_clone().unwrap(), r.try_clone().unwrap()];
        assert!(matches!(
            Incoming::exact(1, fds),
            Err(TransportError::FdCount {
                declared: 1,
                carried: 2
            })
        ));
        let lying = Call::GetSupportedOperations {
            model: Box::default(),
            pools: vec![memory(u32::MAX), memory(u32::MAX)],
            level: HalVersion::V1_3,
        };
        let fds = vec![r.try_clone().unwrap()];
        assert!(Incoming::exact(lying.fd_count(), fds).is_err());
        drop(r);
        assert_eq!(nix::unistd::write(&w, b"x"), Err(nix::errno::Errno::EPIPE));
    }

    /// Every handle a call carries counts: pools, cache files, fences, copy memories.
    #[test]
    fn fd_count_covers_every_handle() {
        let handle = |n| WireHandle {
            fd_count: n,
            ints: vec![],
        };
        let cache = WireCache {
            model_cache: vec![handle(1), handle(1)],
            data_cache: vec![handle(1)],
            token: [0; 32],
        };
        let prepare = Call::PrepareModel {
            level: HalVersion::AidlV4,
            model: Box::default(),
            pools: vec![memory(1)],
            preference: ExecutionPreference::FAST_SINGLE_ANSWER,
            priority: Priority::MEDIUM,
            deadline: OptionalTimePoint::NONE,
            cache: cache.clone(),
        };
        assert_eq!(prepare.fd_count(), 4);
        let from_cache = Call::PrepareModelFromCache {
            deadline: OptionalTimePoint::NONE,
            cache,
        };
        assert_eq!(from_cache.fd_count(), 3);
        let fenced = Call::ExecuteFenced {
            exec: execution(vec![WirePool::Memory(memory(1))]),
            wait_for: vec![handle(1), handle(2)],
            duration: OptionalTimeoutDuration::default(),
        };
        assert_eq!(fenced.fd_count(), 4);
        let copy = Call::CopyTo {
            buffer: 1,
            dst: memory(1),
        };
        assert_eq!(copy.fd_count(), 1);
        let reusable = Call::CreateReusableExecution(execution(vec![
            WirePool::Memory(memory(1)),
            WirePool::Token(2),
        ]));
        assert_eq!(reusable.fd_count(), 1);
        let token_burst = Call::ExecuteTokenBurst {
            burst: 1,
            exec: execution(vec![
                WirePool::Memory(memory(1)),
                WirePool::Memory(memory(1)),
            ]),
            tokens: vec![0, 1],
        };
        assert_eq!(token_burst.fd_count(), 2);
        let reusable_fenced = Call::ExecuteReusableFenced {
            execution: 1,
            wait_for: vec![handle(1), handle(1)],
            deadline: OptionalTimePoint::NONE,
            duration: OptionalTimeoutDuration::default(),
        };
        assert_eq!(reusable_fenced.fd_count(), 2);
        assert_eq!(Call::GetStatus.fd_count(), 0);
        assert_eq!(Call::Release(Object::Model(1)).fd_count(), 0);
    }
}
