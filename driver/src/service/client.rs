//! `RemoteDevice`: the `IDevice` of a device served by `vnpu serve`, over its socket.
//! Its prepared models, buffers and fenced-execution callbacks are the same interfaces
//! as the local device's, so every caller works unchanged against either.
//!
//! One connection carries many calls at once, each matched to its reply by id. There is
//! no reader thread in the way of a call: a caller waiting for its reply reads the socket
//! itself when no other thread is (one wake-up per reply, as a bare request/response),
//! and routes whatever it reads to whoever waits for it. A background thread reads only
//! while launched work (preparations, asynchronous executions) awaits its notification
//! and no caller is reading; notifications go to the caller's callbacks on a delivery
//! thread (so a callback may itself call the device).
//!
//! Every wait is bounded by [`RemoteDevice::connect`]'s timeout: a reply or notification
//! that does not arrive in time fails the call or notifies its callback with
//! GENERAL_FAILURE (the HAL 1.3 types have no DEAD_OBJECT). The first such timeout starts
//! a liveness check: a fresh connection to the service must complete its handshake within
//! [`LIVENESS_BOUND`]. A service that fails it (stopped, hung) is declared unresponsive,
//! exactly as one that died: everything outstanding fails at once, and later calls fail
//! without waiting (status OFFLINE; [`RemoteDevice::lost`] says why).

use std::any::Any;
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use nix::sys::socket::{setsockopt, sockopt};

use super::protocol::{
    Call, Incoming, Notification, Object, Outgoing, Reply, Request, Response, ServiceUsage,
    WireHandle, WirePool, WireRequest, REGISTERED_POOLS,
};
use super::transport::{self, TransportError};
use crate::burst::controller::Slots;
use crate::hal::{
    BufferDesc, BufferRole, Capabilities, DeviceStatus, DeviceType, ErrorStatus, HalVersion,
    MeasureTiming, Memory, Model, NativeHandle, OptionalTimePoint, OptionalTimeoutDuration,
    OutputShape, Request as HalRequest, RequestMemoryPool, Timing,
};
use crate::interface::{
    AllocateResult, BurstResult, ExecutionCallback, ExecutionResult, Extension, FencedResult,
    IBuffer, IBurstCallback, IBurstContext, IDevice, IFencedExecutionCallback, IMemoryTokenBurst,
    IPreparedModel, IReusableExecution, PreparedModelCallback,
};
use crate::interface::{PrepareArgs, PrepareFromCacheArgs};

/// The default bound on waiting for one reply or notification.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest one read of the socket blocks, so overdue work is noticed this often.
const SWEEP: Duration = Duration::from_millis(100);
/// How long the liveness check after a timed-out call may take: a new connection's
/// handshake, which the service answers on a fresh thread whatever its other clients do.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(2);

/// A device served by another process.
pub struct RemoteDevice {
    link: Arc<Link>,
    name: String,
}

/// What a call's waiter receives: the reply and the descriptors that came with it.
type Delivered = (Reply, Vec<OwnedFd>);
/// A callback's notification, run on the delivery thread.
type Job = Box<dyn FnOnce() + Send>;

/// The connection, shared by the device and the objects it made.
struct Link {
    sock: OwnedFd,
    /// The service's socket, for the liveness check.
    path: std::path::PathBuf,
    next_id: AtomicU64,
    timeout: Duration,
    state: Mutex<RouteState>,
    /// Signalled whenever a read ends (a reply may have arrived; the socket is free).
    read_done: Condvar,
    deliver: Mutex<Sender<Job>>,
    /// Itself, for work queued on the delivery thread.
    me: Weak<Link>,
    /// Memories registered with the service ([`WirePool::Register`]), held weakly so a
    /// memory the caller drops is forgotten there at the next execution.
    pools: Slots,
    /// Held from choosing a request's registrations until it is sent: the service reads
    /// registrations, uses and forgettings in the order they were decided.
    pool_order: Mutex<()>,
}

#[derive(Default)]
struct RouteState {
    /// Set when the connection failed: later calls fail at once.
    broken: bool,
    /// Why it failed.
    lost: Option<String>,
    /// A liveness check is under way.
    probing: bool,
    /// A thread is reading the socket now.
    reading: bool,
    /// Callers sleeping on `read_done` for their reply.
    waiting: usize,
    /// Calls waiting for their reply (filled by whoever reads it).
    replies: HashMap<u64, Option<Delivered>>,
    /// Launched work waiting for its notification.
    callbacks: HashMap<u64, Pending>,
    /// Bursts, whose service side may ask for memories at any time.
    bursts: HashMap<u64, Arc<dyn IBurstCallback>>,
    /// Models the service prepared for callers that gave up waiting: released after
    /// the read that found them.
    orphans: Vec<u64>,
}

/// A callback waiting for its notification.
struct Pending {
    deadline: Instant,
    waiter: Waiter,
}

enum Waiter {
    /// A preparation's callback, and the link its prepared model will use.
    Prepare(Option<Arc<dyn PreparedModelCallback>>, Arc<Link>),
    Execute(Option<Arc<dyn ExecutionCallback>>),
}

impl Waiter {
    /// Queues the callback's notification with `n` on the delivery thread (no
    /// notification, or one that does not fit the call, is a failure).
    fn deliver(self, n: Option<Notification>, link: &Link) {
        let job: Job = match self {
            Waiter::Prepare(cb, owner) => {
                let (status, model) = match n {
                    Some(Notification::Prepared(s, m)) => (s, m),
                    _ => (ErrorStatus::GeneralFailure, None),
                };
                let prepared = model.map(|id| {
                    Arc::new(RemotePreparedModel {
                        remote: Remote::new(owner, id, Object::Model),
                    }) as Arc<dyn IPreparedModel>
                });
                let status = if status == ErrorStatus::None && prepared.is_none() {
                    ErrorStatus::GeneralFailure
                } else {
                    status
                };
                Box::new(move || {
                    if let Some(cb) = cb {
                        cb.notify(status, prepared);
                    }
                })
            }
            Waiter::Execute(cb) => {
                let (s, shapes, timing) = match n {
                    Some(Notification::Executed(s, shapes, t)) => (s, shapes, t),
                    _ => (ErrorStatus::GeneralFailure, Vec::new(), Timing::NONE),
                };
                Box::new(move || {
                    if let Some(cb) = cb {
                        cb.notify(s, shapes, timing);
                    }
                })
            }
        };
        let tx = link.deliver.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(mpsc::SendError(job)) = tx.send(job) {
            // The delivery thread is gone: deliver here.
            job();
        }
    }
}

impl RemoteDevice {
    /// Connects to the service at `path` and completes the handshake; any one reply or
    /// notification is then waited for at most `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Self, TransportError> {
        let sock = transport::connect(path)?;
        let tv = transport::timeval;
        setsockopt(&sock, sockopt::ReceiveTimeout, &tv(timeout))?;
        setsockopt(&sock, sockopt::SendTimeout, &tv(timeout))?;
        let name = transport::handshake_client(sock.as_fd())?;
        // From here a read blocks at most SWEEP, so readers notice overdue work.
        setsockopt(&sock, sockopt::ReceiveTimeout, &tv(SWEEP))?;
        let (deliver_tx, deliver_rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("vnpu-remote-cb".into())
            .spawn(move || delivery(deliver_rx))
            .map_err(|_| TransportError::Io(nix::errno::Errno::EAGAIN))?;
        let link = Arc::new_cyclic(|me| Link {
            sock,
            path: path.to_path_buf(),
            next_id: AtomicU64::new(1),
            timeout,
            state: Mutex::new(RouteState::default()),
            read_done: Condvar::new(),
            deliver: Mutex::new(deliver_tx),
            me: me.clone(),
            pools: Slots::default(),
            pool_order: Mutex::new(()),
        });
        let weak = Arc::downgrade(&link);
        std::thread::Builder::new()
            .name("vnpu-remote-rx".into())
            .spawn(move || background(weak))
            .map_err(|_| TransportError::Io(nix::errno::Errno::EAGAIN))?;
        Ok(RemoteDevice { link, name })
    }

    /// The served device's name (from the handshake).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The service's load (connections, the device's models, buffers and memory).
    pub fn usage(&self) -> Result<ServiceUsage, TransportError> {
        match self.link.call(Call::Usage, &[])? {
            Reply::Usage(u) => Ok(u),
            Reply::Refused(why) => Err(TransportError::Malformed(format!(
                "refused by the service: {why}"
            ))),
            other => Err(TransportError::Malformed(format!(
                "unexpected reply {other:?}"
            ))),
        }
    }

    /// Why the connection is gone (the service closed it, or was declared unresponsive
    /// after a timed-out call), or `None` while it is usable.
    pub fn lost(&self) -> Option<String> {
        let s = self.link.state();
        s.broken.then(|| {
            s.lost
                .clone()
                .unwrap_or_else(|| "the connection to the service failed".into())
        })
    }

    /// One call without descriptors.
    fn call(&self, call: Call) -> Result<Reply, TransportError> {
        self.link.call(call, &[])
    }
}

/// Runs callbacks in order until the connection is gone.
fn delivery(rx: Receiver<Job>) {
    for job in rx {
        job();
    }
}

/// Reads for launched work while no caller does, fails overdue notifications, and ends
/// with the connection.
fn background(link: Weak<Link>) {
    // The strong reference lives for one round (at most SWEEP), so the connection ends
    // soon after its last user lets go.
    while let Some(link) = link.upgrade() {
        let mut s = link.state();
        if s.broken {
            return;
        }
        if link.sweep(&mut s) {
            drop(s);
            link.check_alive();
            continue;
        }
        if (s.callbacks.is_empty() && s.bursts.is_empty()) || s.reading {
            drop(link.read_done.wait_timeout(s, SWEEP));
        } else {
            drop(link.read_one(s));
        }
    }
}

/// Connects to the service at `path` and completes the handshake, each step bounded by
/// `bound`.
fn handshake_within(path: &Path, bound: Duration) -> Result<(), TransportError> {
    let sock = transport::connect(path)?;
    let tv = transport::timeval(bound);
    setsockopt(&sock, sockopt::ReceiveTimeout, &tv)?;
    setsockopt(&sock, sockopt::SendTimeout, &tv)?;
    transport::handshake_client(sock.as_fd()).map(drop)
}

impl Drop for Link {
    fn drop(&mut self) {
        // Tells the service, which releases everything this connection owned.
        transport::shutdown(self.sock.as_fd());
    }
}

impl Link {
    fn state(&self) -> MutexGuard<'_, RouteState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads one message (or times out after SWEEP) with the state unlocked, routes it
    /// and wakes every waiter. The caller must have seen `reading` false.
    fn read_one<'a>(&'a self, mut s: MutexGuard<'a, RouteState>) -> MutexGuard<'a, RouteState> {
        s.reading = true;
        drop(s);
        let got = transport::recv(self.sock.as_fd());
        let mut s = self.state();
        s.reading = false;
        match got {
            Ok(frame) => match transport::decode::<Response>(&frame.bytes) {
                Ok(r) => self.route(&mut s, r, frame.fds),
                Err(e) => {
                    tracing::warn!("the service sent a malformed message ({e}): disconnecting");
                    self.fail(&mut s);
                }
            },
            Err(TransportError::Io(nix::errno::Errno::EAGAIN)) => {}
            Err(e) => {
                tracing::debug!("connection to the service ended: {e}");
                s.lost
                    .get_or_insert_with(|| format!("the connection to the service ended ({e})"));
                self.fail(&mut s);
            }
        }
        // Wakes callers waiting for a reply, and the background thread when there is
        // launched work or a burst to read for; not an idle background thread (a wake-up
        // per call is a context switch, and on a small machine it takes the caller's
        // core).
        let background = !(s.callbacks.is_empty() && s.bursts.is_empty());
        if s.waiting > 0 || background || s.broken {
            self.read_done.notify_all();
        }
        if !s.orphans.is_empty() && !s.broken {
            let orphans = std::mem::take(&mut s.orphans);
            drop(s);
            for m in orphans {
                self.post(Call::Release(Object::Model(m)));
            }
            s = self.state();
        }
        s
    }

    /// Hands one message to whoever waits for it.
    fn route(&self, s: &mut RouteState, r: Response, fds: Vec<OwnedFd>) {
        if let Reply::Notified(Notification::GetMemories { burst, slots }) = r.reply {
            let callback = s.bursts.get(&burst).cloned();
            self.answer_memories(r.id, callback, slots);
        } else if let Reply::Notified(n) = r.reply {
            match s.callbacks.remove(&r.id) {
                Some(p) => p.waiter.deliver(Some(n), self),
                // Its caller gave up waiting: a model prepared for nobody is released.
                None => {
                    if let Notification::Prepared(_, Some(m)) = n {
                        s.orphans.push(m);
                    }
                }
            }
        } else if let Some(slot @ None) = s.replies.get_mut(&r.id) {
            *slot = Some((r.reply, fds));
        }
    }

    /// Answers a burst's getMemories, on the delivery thread (the callback is the
    /// client's code).
    fn answer_memories(
        &self,
        token: u64,
        callback: Option<Arc<dyn IBurstCallback>>,
        slots: Vec<i32>,
    ) {
        let Some(link) = self.me.upgrade() else {
            return;
        };
        let job: Job = Box::new(move || {
            let (status, memories) = match callback {
                Some(cb) => cb.get_memories(&slots),
                None => (ErrorStatus::InvalidArgument, Vec::new()),
            };
            let mut out = Outgoing::default();
            let memories = out.memories(&memories);
            let call = Call::BurstMemories {
                token,
                status,
                memories,
            };
            if !link.state().broken {
                let _ = link.send(link.fresh_id(), call, &out.fds);
            }
        });
        let tx = self.deliver.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(mpsc::SendError(job)) = tx.send(job) {
            job();
        }
    }

    /// The connection failed: later calls fail at once; waiting callers wake to an
    /// error; every callback still waiting is notified with GENERAL_FAILURE.
    fn fail(&self, s: &mut RouteState) {
        s.broken = true;
        transport::shutdown(self.sock.as_fd());
        for (_, p) in std::mem::take(&mut s.callbacks) {
            p.waiter.deliver(None, self);
        }
    }

    /// After a timed-out call: checks that the service still answers a new connection's
    /// handshake within [`LIVENESS_BOUND`], and if not declares it unresponsive and fails
    /// everything outstanding. One check at a time (a call timing out meanwhile just fails).
    fn check_alive(&self) {
        {
            let mut s = self.state();
            if s.broken || s.probing {
                return;
            }
            s.probing = true;
        }
        let answer = handshake_within(&self.path, LIVENESS_BOUND);
        let mut s = self.state();
        s.probing = false;
        if let Err(e) = answer {
            tracing::warn!("the service is unresponsive: {e}");
            s.lost.get_or_insert_with(|| {
                format!(
                    "the service is unresponsive: a call got no answer within {:?}, and a new connection none within {LIVENESS_BOUND:?} ({e})",
                    self.timeout
                )
            });
            self.fail(&mut s);
            self.read_done.notify_all();
        }
    }

    /// Fails the notifications that are overdue; whether there were any.
    fn sweep(&self, s: &mut RouteState) -> bool {
        let now = Instant::now();
        let overdue: Vec<u64> = s
            .callbacks
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        let any = !overdue.is_empty();
        for id in overdue {
            if let Some(p) = s.callbacks.remove(&id) {
                tracing::warn!("a notification from the service is overdue: failing its callback");
                p.waiter.deliver(None, self);
            }
        }
        any
    }

    /// An id no other call on this connection uses.
    fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// One call and its reply (which must carry no descriptors).
    fn call(&self, call: Call, fds: &[BorrowedFd<'_>]) -> Result<Reply, TransportError> {
        self.call_as(self.fresh_id(), call, fds)
    }

    /// [`Link::call`] under a given id.
    fn call_as(
        &self,
        id: u64,
        call: Call,
        fds: &[BorrowedFd<'_>],
    ) -> Result<Reply, TransportError> {
        let (reply, received) = self.exchange(id, call, fds)?;
        if !received.is_empty() {
            return Err(TransportError::FdCount {
                declared: 0,
                carried: received.len(),
            });
        }
        Ok(reply)
    }

    /// One call and its reply with the descriptors that came with it.
    fn call_with_fds(
        &self,
        call: Call,
        fds: &[BorrowedFd<'_>],
    ) -> Result<Delivered, TransportError> {
        self.exchange(self.fresh_id(), call, fds)
    }

    /// Sends a call under `id` and waits (at most the timeout) for its reply, reading the
    /// socket itself whenever no other thread is.
    fn exchange(
        &self,
        id: u64,
        call: Call,
        fds: &[BorrowedFd<'_>],
    ) -> Result<Delivered, TransportError> {
        self.exchange_after(id, call, fds, None)
    }

    /// [`Link::exchange`], letting go of `held` once the call is sent.
    fn exchange_after(
        &self,
        id: u64,
        call: Call,
        fds: &[BorrowedFd<'_>],
        held: Option<MutexGuard<'_, ()>>,
    ) -> Result<Delivered, TransportError> {
        {
            let mut s = self.state();
            if s.broken {
                return Err(TransportError::Closed);
            }
            s.replies.insert(id, None);
        }
        let sent = self.send(id, call, fds);
        drop(held);
        if let Err(e) = sent {
            self.state().replies.remove(&id);
            return Err(e);
        }
        let deadline = Instant::now() + self.timeout;
        let mut s = self.state();
        loop {
            if let Some(Some(_)) = s.replies.get(&id) {
                if let Some(Some(d)) = s.replies.remove(&id) {
                    return Ok(d);
                }
            }
            let now = Instant::now();
            if s.broken {
                s.replies.remove(&id);
                return Err(TransportError::Closed);
            }
            if now >= deadline {
                s.replies.remove(&id);
                drop(s);
                self.check_alive();
                return Err(TransportError::Malformed(
                    "no reply within the timeout".into(),
                ));
            }
            s = if s.reading {
                s.waiting += 1;
                let mut s = self
                    .read_done
                    .wait_timeout(s, (deadline - now).min(SWEEP))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                s.waiting -= 1;
                s
            } else {
                self.read_one(s)
            };
        }
    }

    /// Sends one request; a connection that cannot take it is broken.
    fn send(&self, id: u64, call: Call, fds: &[BorrowedFd<'_>]) -> Result<(), TransportError> {
        let bytes = transport::encode(&Request { id, call })?;
        transport::send(self.sock.as_fd(), &bytes, fds).inspect_err(|_| {
            let mut s = self.state();
            self.fail(&mut s);
            self.read_done.notify_all();
        })
    }

    /// Sends a call that gets no reply (a release); best effort.
    fn post(&self, call: Call) {
        if !self.state().broken {
            let _ = self.send(self.fresh_id(), call, &[]);
        }
    }

    /// A call that launches work: `waiter` gets the work's notification (or, if the
    /// launch fails here, GENERAL_FAILURE). Returns what the launch returned.
    fn launch(&self, call: Call, fds: &[BorrowedFd<'_>], waiter: Waiter) -> ErrorStatus {
        let id = self.fresh_id();
        // Registered before the call is sent: the notification may beat the reply.
        self.state().callbacks.insert(
            id,
            Pending {
                deadline: Instant::now() + self.timeout,
                waiter,
            },
        );
        match self.call_as(id, call, fds) {
            Ok(Reply::Launched(s)) => s,
            r => {
                tracing::warn!("launching work on the service: {}", describe(r));
                // Refused or lost: no notification will come; notify here (unless a
                // reader already failed it).
                let pending = self.state().callbacks.remove(&id);
                if let Some(p) = pending {
                    p.waiter.deliver(None, self);
                }
                ErrorStatus::GeneralFailure
            }
        }
    }
}

fn describe(r: Result<Reply, TransportError>) -> String {
    match r {
        Ok(Reply::Refused(why)) => format!("refused by the service: {why}"),
        Ok(other) => format!("unexpected reply {other:?}"),
        Err(e) => e.to_string(),
    }
}

/// Logs a failed call and gives the caller GENERAL_FAILURE.
fn failed(what: &str, r: Result<Reply, TransportError>) -> ErrorStatus {
    tracing::warn!("{what}: {}", describe(r));
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
        self.get_supported_operations_at(HalVersion::V1_3, model)
    }

    fn get_supported_operations_at(
        &self,
        level: HalVersion,
        model: &Model,
    ) -> (ErrorStatus, Vec<bool>) {
        let mut out = Outgoing::default();
        let pools = out.memories(&model.pools);
        let call = Call::GetSupportedOperations {
            model: bare_model(model),
            pools,
            level,
        };
        match self.link.call(call, &out.fds) {
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

    /// Launched in the service; the callback is notified from this connection's delivery
    /// thread with a [`RemotePreparedModel`].
    fn prepare_model_1_3(&self, args: PrepareArgs<'_>) -> ErrorStatus {
        self.prepare_model_at(HalVersion::V1_3, args)
    }

    /// The level travels with the model: the service validates it there.
    fn prepare_model_at(&self, level: HalVersion, args: PrepareArgs<'_>) -> ErrorStatus {
        let mut out = Outgoing::default();
        let pools = out.memories(&args.model.pools);
        let cache = out.cache(args.model_cache, args.data_cache, args.token);
        let call = Call::PrepareModel {
            level,
            model: bare_model(args.model),
            pools,
            preference: args.preference,
            priority: args.priority,
            deadline: args.deadline,
            cache,
        };
        let waiter = Waiter::Prepare(args.callback, self.link.clone());
        self.link.launch(call, &out.fds, waiter)
    }

    fn prepare_model_from_cache_1_3(&self, args: PrepareFromCacheArgs<'_>) -> ErrorStatus {
        let mut out = Outgoing::default();
        let cache = out.cache(args.model_cache, args.data_cache, args.token);
        let deadline = args.deadline;
        let call = Call::PrepareModelFromCache { deadline, cache };
        let waiter = Waiter::Prepare(args.callback, self.link.clone());
        self.link.launch(call, &out.fds, waiter)
    }

    /// The prepared models must be this connection's; any other is INVALID_ARGUMENT.
    fn allocate(
        &self,
        desc: &BufferDesc,
        prepared_models: &[Option<Arc<dyn IPreparedModel>>],
        input_roles: &[BufferRole],
        output_roles: &[BufferRole],
    ) -> AllocateResult {
        let mut models = Vec::with_capacity(prepared_models.len());
        for p in prepared_models {
            let Some(p) = p else {
                models.push(None);
                continue;
            };
            match p
                .as_any()
                .and_then(|a| a.downcast_ref::<RemotePreparedModel>())
            {
                Some(r) if Arc::ptr_eq(&r.remote.link, &self.link) => {
                    models.push(Some(r.remote.id))
                }
                _ => return (ErrorStatus::InvalidArgument, None, 0),
            }
        }
        let call = Call::Allocate {
            desc: desc.clone(),
            models,
            input_roles: input_roles.to_vec(),
            output_roles: output_roles.to_vec(),
        };
        match self.call(call) {
            Ok(Reply::Allocated(s, id, token)) => {
                let buffer = id.map(|id| {
                    Arc::new(RemoteBuffer {
                        remote: Remote::new(self.link.clone(), id, Object::Buffer),
                    }) as Arc<dyn IBuffer>
                });
                (s, buffer, token)
            }
            r => (failed("allocate", r), None, 0),
        }
    }
}

/// The model without its pools (which travel as descriptors).
fn bare_model(model: &Model) -> Box<Model> {
    Box::new(Model {
        pools: Vec::new(),
        ..model.clone()
    })
}

/// An object the service keeps for this connection, by its id there; dropping the handle
/// releases it in the service (as does the connection's end).
struct Remote {
    link: Arc<Link>,
    id: u64,
    kind: fn(u64) -> Object,
}

impl Remote {
    fn new(link: Arc<Link>, id: u64, kind: fn(u64) -> Object) -> Remote {
        Remote { link, id, kind }
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.link.post(Call::Release((self.kind)(self.id)));
    }
}

/// A model prepared in the service, owned by this connection.
pub struct RemotePreparedModel {
    remote: Remote,
}

impl RemotePreparedModel {
    /// The request's wire form; its pools' descriptors go into `out`.
    fn wire<'a>(
        &self,
        request: &'a HalRequest,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
        out: &mut Outgoing<'a>,
    ) -> WireRequest {
        let pools = out.pools(&request.pools);
        self.wire_with(request, pools, measure, deadline, loop_timeout)
    }

    /// The request's wire form with its pools' wire forms `pools`.
    fn wire_with(
        &self,
        request: &HalRequest,
        pools: Vec<WirePool>,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
    ) -> WireRequest {
        WireRequest {
            model: self.remote.id,
            request: Box::new(HalRequest {
                pools: Vec::new(),
                inputs: request.inputs.clone(),
                outputs: request.outputs.clone(),
            }),
            pools,
            measure,
            deadline,
            loop_timeout,
            forget: Vec::new(),
        }
    }
}

/// The wire forms of `pools`, with shared memories registered with the service: one
/// registered before is named by its id (its descriptors stay out of the message), a new
/// one is registered under a free id while there is one (else it travels as a plain
/// memory). Returns them and the ids registered now.
fn registered_pools<'a>(
    slots: &Slots,
    pools: &'a [RequestMemoryPool],
    out: &mut Outgoing<'a>,
) -> (Vec<WirePool>, Vec<i32>) {
    let mut now = Vec::new();
    let wire = pools
        .iter()
        .map(|p| match p {
            RequestMemoryPool::HidlMemory(m) if !m.handle.fds.is_empty() => {
                match slots.slot_within(m, REGISTERED_POOLS) {
                    Some((k, false)) => WirePool::Registered(k),
                    Some((k, true)) => {
                        now.push(k);
                        WirePool::Register(k, out.memory(m))
                    }
                    None => WirePool::Memory(out.memory(m)),
                }
            }
            RequestMemoryPool::HidlMemory(m) => WirePool::Memory(out.memory(m)),
            RequestMemoryPool::Token(t) => WirePool::Token(*t),
        })
        .collect();
    (wire, now)
}

impl IPreparedModel for RemotePreparedModel {
    fn execute_1_3(
        &self,
        request: &HalRequest,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
        callback: Option<Arc<dyn ExecutionCallback>>,
    ) -> ErrorStatus {
        let mut out = Outgoing::default();
        let exec = self.wire(request, measure, deadline, loop_timeout, &mut out);
        self.remote
            .link
            .launch(Call::Execute(exec), &out.fds, Waiter::Execute(callback))
    }

    /// The request's shared memories travel once: registered with the service on their
    /// first execution (which keeps them mapped in its device), named by id after that.
    fn execute_synchronously_1_3(
        &self,
        request: &HalRequest,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
    ) -> (ErrorStatus, Vec<OutputShape>, Timing) {
        let link = &self.remote.link;
        let order = link.pool_order.lock().unwrap_or_else(|p| p.into_inner());
        let forget = link.pools.reap();
        let mut out = Outgoing::default();
        let (pools, registered) = registered_pools(&link.pools, &request.pools, &mut out);
        let exec = WireRequest {
            forget,
            ..self.wire_with(request, pools, measure, deadline, loop_timeout)
        };
        let id = link.fresh_id();
        let call = Call::ExecuteSynchronously(exec);
        let r = match link.exchange_after(id, call, &out.fds, Some(order)) {
            Ok((reply, fds)) if fds.is_empty() => Ok(reply),
            Ok((_, fds)) => Err(TransportError::FdCount {
                declared: 0,
                carried: fds.len(),
            }),
            Err(e) => Err(e),
        };
        match r {
            Ok(Reply::Executed(s, shapes, timing)) => (s, shapes, timing),
            r => {
                // The service may not have kept them: registered again when next used.
                for slot in registered {
                    link.pools.forget_slot(slot);
                }
                (
                    failed("executeSynchronously_1_3", r),
                    Vec::new(),
                    Timing::NONE,
                )
            }
        }
    }

    fn execute_fenced(
        &self,
        request: &HalRequest,
        wait_for: &[NativeHandle],
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
        duration: OptionalTimeoutDuration,
    ) -> FencedResult {
        let mut out = Outgoing::default();
        let exec = self.wire(request, measure, deadline, loop_timeout, &mut out);
        let wait_for = out.handles(wait_for);
        let call = Call::ExecuteFenced {
            exec,
            wait_for,
            duration,
        };
        fenced_call(&self.remote.link, "executeFenced", call, &out.fds)
    }

    /// The queues' memfds cross to the service, which runs the burst there; its
    /// getMemories calls come back as messages and are answered from `callback`.
    fn configure_execution_burst(
        &self,
        callback: Arc<dyn IBurstCallback>,
        request_channel: BorrowedFd<'_>,
        result_channel: BorrowedFd<'_>,
    ) -> BurstResult {
        let one = || WireHandle {
            fd_count: 1,
            ints: Vec::new(),
        };
        let call = Call::ConfigureBurst {
            model: self.remote.id,
            request_channel: one(),
            result_channel: one(),
        };
        match self
            .remote
            .link
            .call(call, &[request_channel, result_channel])
        {
            Ok(Reply::Burst(status, Some(id))) => {
                self.remote.link.state().bursts.insert(id, callback);
                // The background reader now listens for the burst's questions.
                self.remote.link.read_done.notify_all();
                let context = Arc::new(RemoteBurstContext {
                    remote: Remote::new(self.remote.link.clone(), id, Object::Burst),
                });
                (status, Some(context as Arc<dyn IBurstContext>))
            }
            Ok(Reply::Burst(status, None)) => (status, None),
            r => (failed("configureExecutionBurst", r), None),
        }
    }

    /// Made in the service (its request's memory held there); run by id.
    fn create_reusable_execution(
        &self,
        request: &HalRequest,
        measure: MeasureTiming,
        loop_timeout: OptionalTimeoutDuration,
    ) -> Result<Arc<dyn IReusableExecution>, ErrorStatus> {
        let mut out = Outgoing::default();
        let exec = self.wire(
            request,
            measure,
            OptionalTimePoint::NONE,
            loop_timeout,
            &mut out,
        );
        let link = &self.remote.link;
        match link.call(Call::CreateReusableExecution(exec), &out.fds) {
            Ok(Reply::Reusable(ErrorStatus::None, Some(id))) => Ok(Arc::new(RemoteExecution {
                remote: Remote::new(link.clone(), id, Object::Execution),
            })),
            Ok(Reply::Reusable(s, None)) if s != ErrorStatus::None => Err(s),
            r => Err(failed("createReusableExecution", r)),
        }
    }

    fn configure_memory_token_burst(&self) -> Result<Arc<dyn IMemoryTokenBurst>, ErrorStatus> {
        let link = &self.remote.link;
        let call = Call::ConfigureTokenBurst {
            model: self.remote.id,
        };
        match link.call(call, &[]) {
            Ok(Reply::Burst(ErrorStatus::None, Some(id))) => Ok(Arc::new(RemoteTokenBurst {
                remote: Remote::new(link.clone(), id, Object::TokenBurst),
                model: self.remote.id,
            })),
            Ok(Reply::Burst(s, None)) if s != ErrorStatus::None => Err(s),
            r => Err(failed("configureExecutionBurst (V4)", r)),
        }
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

/// A fenced call's answer: the fence (its descriptors beside the reply) and the callback
/// kept in the service.
fn fenced_call(link: &Arc<Link>, what: &str, call: Call, fds: &[BorrowedFd<'_>]) -> FencedResult {
    let (reply, fds) = match link.call_with_fds(call, fds) {
        Ok(d) => d,
        Err(e) => return (failed(what, Err(e)), None, None),
    };
    let Reply::Fenced(status, fence, callback) = reply else {
        return (failed(what, Ok(reply)), None, None);
    };
    let declared = fence.as_ref().map_or(0, |h| h.fd_count as usize);
    let mut fds = match Incoming::exact(declared, fds) {
        Ok(f) => f,
        Err(e) => return (failed(what, Err(e)), None, None),
    };
    let fence = fence.map(|h| fds.handle(h));
    let callback = callback.map(|id| {
        Arc::new(RemoteFencedCallback {
            remote: Remote::new(link.clone(), id, Object::Fenced),
        }) as Arc<dyn IFencedExecutionCallback>
    });
    (status, fence, callback)
}

/// A V4 reusable execution in the service, owned by this connection.
struct RemoteExecution {
    remote: Remote,
}

impl IReusableExecution for RemoteExecution {
    fn execute_synchronously(&self, deadline: OptionalTimePoint) -> ExecutionResult {
        let call = Call::ExecuteReusable {
            execution: self.remote.id,
            deadline,
        };
        match self.remote.link.call(call, &[]) {
            Ok(Reply::Executed(s, shapes, timing)) => (s, shapes, timing),
            r => (
                failed("IExecution::executeSynchronously", r),
                Vec::new(),
                Timing::NONE,
            ),
        }
    }

    fn execute_fenced(
        &self,
        wait_for: &[NativeHandle],
        deadline: OptionalTimePoint,
        duration: OptionalTimeoutDuration,
    ) -> FencedResult {
        let mut out = Outgoing::default();
        let call = Call::ExecuteReusableFenced {
            execution: self.remote.id,
            wait_for: out.handles(wait_for),
            deadline,
            duration,
        };
        fenced_call(
            &self.remote.link,
            "IExecution::executeFenced",
            call,
            &out.fds,
        )
    }
}

/// A V4 burst with memory identifier tokens in the service, owned by this connection.
struct RemoteTokenBurst {
    remote: Remote,
    /// Its prepared model's id on this connection.
    model: u64,
}

impl IMemoryTokenBurst for RemoteTokenBurst {
    fn execute_synchronously(
        &self,
        request: &HalRequest,
        tokens: &[i64],
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
    ) -> ExecutionResult {
        let mut out = Outgoing::default();
        let pools = out.pools(&request.pools);
        let exec = WireRequest {
            model: self.model,
            request: Box::new(HalRequest {
                pools: Vec::new(),
                ..request.clone()
            }),
            pools,
            measure,
            deadline,
            loop_timeout,
            forget: Vec::new(),
        };
        let call = Call::ExecuteTokenBurst {
            burst: self.remote.id,
            exec,
            tokens: tokens.to_vec(),
        };
        match self.remote.link.call(call, &out.fds) {
            Ok(Reply::Executed(s, shapes, timing)) => (s, shapes, timing),
            r => (
                failed("IBurst::executeSynchronously", r),
                Vec::new(),
                Timing::NONE,
            ),
        }
    }

    fn release_memory_resource(&self, token: i64) -> ErrorStatus {
        let call = Call::ReleaseMemoryResource {
            burst: self.remote.id,
            token,
        };
        match self.remote.link.call(call, &[]) {
            Ok(Reply::Released(s)) => s,
            r => failed("IBurst::releaseMemoryResource", r),
        }
    }
}

/// A burst in the service, owned by this connection.
struct RemoteBurstContext {
    remote: Remote,
}

impl IBurstContext for RemoteBurstContext {
    /// Waits for the service's answer, so a packet sent afterwards cannot meet the old
    /// memory.
    fn free_memory(&self, slot: i32) {
        let call = Call::FreeBurstMemory {
            burst: self.remote.id,
            slot,
        };
        if let r @ (Err(_) | Ok(Reply::Refused(_))) = self.remote.link.call(call, &[]) {
            failed("freeMemory", r);
        }
    }
}

impl Drop for RemoteBurstContext {
    fn drop(&mut self) {
        // The service's questions for it go unanswered from now on (`remote` then
        // releases it there).
        self.remote.link.state().bursts.remove(&self.remote.id);
    }
}

/// A fenced execution's callback in the service.
struct RemoteFencedCallback {
    remote: Remote,
}

impl IFencedExecutionCallback for RemoteFencedCallback {
    fn get_execution_info(&self) -> (ErrorStatus, Timing, Timing) {
        match self.remote.link.call(
            Call::FencedInfo {
                callback: self.remote.id,
            },
            &[],
        ) {
            Ok(Reply::FencedInfo(s, a, b)) => (s, a, b),
            r => (failed("getExecutionInfo", r), Timing::NONE, Timing::NONE),
        }
    }
}

/// A driver-managed buffer in the service, owned by this connection.
struct RemoteBuffer {
    remote: Remote,
}

impl RemoteBuffer {
    /// Sends a copy call and gives its status.
    fn copied(&self, what: &str, call: Call, out: &Outgoing<'_>) -> ErrorStatus {
        match self.remote.link.call(call, &out.fds) {
            Ok(Reply::Copied(s)) => s,
            r => failed(what, r),
        }
    }
}

impl IBuffer for RemoteBuffer {
    fn copy_to(&self, dst: &Memory) -> ErrorStatus {
        let mut out = Outgoing::default();
        let call = Call::CopyTo {
            buffer: self.remote.id,
            dst: out.memory(dst),
        };
        self.copied("copyTo", call, &out)
    }

    fn copy_from(&self, src: &Memory, dimensions: &[u32]) -> ErrorStatus {
        let mut out = Outgoing::default();
        let call = Call::CopyFrom {
            buffer: self.remote.id,
            src: out.memory(src),
            dimensions: dimensions.to_vec(),
        };
        self.copied("copyFrom", call, &out)
    }
}
