//! The service: hosts one device and serves each client on its own connection.
//!
//! A connection is checked against the [`PeerPolicy`], then must complete the handshake.
//! After that every message is validated before use: a message that cannot be read gets a
//! [`Reply::Refused`] and the connection carries on; a socket error or the client's
//! disconnection ends that connection only. Nothing a client sends can end the service.
//!
//! Each connection has a reader thread, which answers calls in order and sends each reply
//! itself, and a writer thread draining a bounded queue of notifications: work a call
//! launches (preparations, asynchronous executions) runs on the device's workers and
//! queues its notification when it ends, never blocking on the client.
//! What a connection owns (prepared models, buffers, fenced callbacks) lives in its
//! [`Session`] and is released when the client disconnects or dies. A client that stops
//! reading cannot make the service grow: see [`ClientLimits`].

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use nix::sys::socket::{setsockopt, sockopt};

use super::admission::{Admission, AdmissionLimits, Idle, Ticket};
use super::protocol::{
    Call, Incoming, Notification, Object, ReceivedPool, Reply, Request, Response, ServiceUsage,
    WireHandle, WirePool, REGISTERED_POOLS,
};
use super::transport::{self, PeerPolicy, TransportError};
use crate::device::DeviceUsage;
use crate::execute::{PinnedPool, VnpuPreparedModel};
use crate::hal::{
    ErrorStatus, Memory, OutputShape, Request as HalRequest, RequestMemoryPool, Timing,
};
use crate::interface::{
    ExecutionCallback, FencedResult, IBuffer, IBurstCallback, IBurstContext, IDevice,
    IFencedExecutionCallback, IMemoryTokenBurst, IPreparedModel, IReusableExecution,
    PreparedModelCallback,
};
use crate::interface::{PrepareArgs, PrepareFromCacheArgs};

/// What one client may hold or have queued at once. Together they bound what a client
/// costs the service, whatever it sends and however slowly it reads.
#[derive(Clone, Debug)]
pub struct ClientLimits {
    /// Prepared models (alive and being prepared); beyond it a preparation is
    /// RESOURCE_EXHAUSTED_TRANSIENT.
    pub models: usize,
    /// Driver-managed buffers; beyond it `allocate` is RESOURCE_EXHAUSTED_TRANSIENT.
    pub buffers: usize,
    /// Fenced-execution callbacks kept for `getExecutionInfo`; beyond it `executeFenced`
    /// is RESOURCE_EXHAUSTED_TRANSIENT.
    pub fenced: usize,
    /// Bursts; beyond it `configureExecutionBurst` is RESOURCE_EXHAUSTED_TRANSIENT.
    pub bursts: usize,
    /// Launched work (preparations and asynchronous executions) not yet notified; beyond
    /// it a launch is RESOURCE_EXHAUSTED_TRANSIENT.
    pub in_flight: usize,
    /// Notifications queued for a client that is not reading; one that finds no room
    /// ends the connection. (Replies are sent by the connection's reader itself, so a
    /// client that sends without reading simply stops being read.)
    pub queued_notifications: usize,
    /// How long one message may wait for the client to take it before the connection
    /// ends.
    pub reply_timeout: Duration,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            models: 256,
            buffers: 1024,
            fenced: 1024,
            bursts: 64,
            in_flight: 64,
            // Room for every notification in flight, so a client that reads at all never
            // loses its connection to a full queue.
            queued_notifications: 64,
            reply_timeout: Duration::from_secs(10),
        }
    }
}

/// The hosted device's usage, as [`Call::Usage`] reports it (a local device knows).
pub type UsageProbe = Arc<dyn Fn() -> DeviceUsage + Send + Sync>;

/// How the service runs.
pub struct ServeOptions {
    /// The hosted device's name (told to clients at the handshake).
    pub device_name: String,
    /// Who may connect.
    pub policy: PeerPolicy,
    /// Per-client bounds.
    pub limits: ClientLimits,
    /// Bounds on connections: the hello deadline, the caps in all and per user (see
    /// [`admission`](super::admission)).
    pub admission: AdmissionLimits,
    /// Reports the device's usage.
    pub usage: Option<UsageProbe>,
}

impl ServeOptions {
    /// Default limits and policy for a device called `device_name`.
    pub fn new(device_name: impl Into<String>) -> Self {
        ServeOptions {
            device_name: device_name.into(),
            policy: PeerPolicy::default(),
            limits: ClientLimits::default(),
            admission: AdmissionLimits::default(),
            usage: None,
        }
    }
}

/// What every connection shares.
struct Shared {
    device: Arc<dyn IDevice>,
    options: ServeOptions,
    admission: Arc<Admission>,
}

/// Serves `device` on `listener` until accepting fails; two threads per connection.
pub fn serve(
    listener: OwnedFd,
    device: Arc<dyn IDevice>,
    options: ServeOptions,
) -> Result<(), TransportError> {
    let shared = Arc::new(Shared {
        device,
        admission: Admission::new(options.admission.clone()),
        options,
    });
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
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => return Err(e),
        };
        let uid = match shared.options.policy.check(&conn) {
            Ok(uid) => uid,
            Err(e) => {
                tracing::warn!("refused: {e}");
                continue;
            }
        };
        let conn = Arc::new(conn);
        // Until its hello, the connection holds only a place among the unauthenticated.
        let ticket = shared.admission.hello(uid, conn.clone());
        let shared2 = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("vnpu-conn".into())
            .spawn(move || {
                if let Err(e) = connection(conn, &shared2, &ticket) {
                    tracing::debug!("connection ended: {e}");
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start a connection thread: {e}");
        }
    }
}

/// Messages to the client: replies sent by the reader itself, notifications through a
/// bounded queue and a writer thread.
struct Outbox {
    tx: SyncSender<Vec<u8>>,
    sock: Arc<OwnedFd>,
}

impl Outbox {
    /// Sends a reply from the reader's thread (blocking at most the reply timeout: a
    /// client that does not read stops being read).
    fn reply(&self, id: u64, reply: Reply, fds: Vec<Arc<OwnedFd>>) -> Result<(), TransportError> {
        let bytes = transport::encode(&Response { id, reply })?;
        let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        transport::send(self.sock.as_fd(), &bytes, &borrowed).inspect_err(|_| {
            transport::shutdown(self.sock.as_fd());
        })
    }

    /// Queues a notification without waiting (it comes from a device worker, which must
    /// never block on a client): no room means the client is not reading, and its
    /// connection ends.
    fn notify(&self, id: u64, n: Notification) {
        let Ok(bytes) = transport::encode(&Response {
            id,
            reply: Reply::Notified(n),
        }) else {
            return;
        };
        match self.tx.try_send(bytes) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                tracing::warn!("a client is not reading its notifications: disconnecting it");
                transport::shutdown(self.sock.as_fd());
            }
        }
    }
}

/// Sends queued notifications until every sender is gone or the client stops taking
/// them.
fn writer(sock: Arc<OwnedFd>, rx: Receiver<Vec<u8>>) {
    for bytes in rx {
        if let Err(e) = transport::send(sock.as_fd(), &bytes, &[]) {
            tracing::debug!("writing to a client: {e}");
            // Ends the reader too; queued messages are dropped with the receiver.
            transport::shutdown(sock.as_fd());
            return;
        }
    }
}

/// What one connection owns: released when the client disconnects.
#[derive(Default)]
struct Session {
    /// Set when the connection ended: work finishing later releases what it made.
    closed: bool,
    next_id: u64,
    models: HashMap<u64, Arc<dyn IPreparedModel>>,
    /// Preparations launched and not yet notified (they count against the model limit).
    preparing: usize,
    buffers: HashMap<u64, (Arc<dyn IBuffer>, u32)>,
    fenced: HashMap<u64, Arc<dyn IFencedExecutionCallback>>,
    bursts: HashMap<u64, Arc<dyn IBurstContext>>,
    /// V4 reusable executions.
    executions: HashMap<u64, Arc<dyn IReusableExecution>>,
    /// V4 bursts with memory tokens, with the id of their prepared model.
    token_bursts: HashMap<u64, (u64, Arc<dyn IMemoryTokenBurst>)>,
    /// Memories the client registered ([`WirePool::Register`]), by id.
    pools: HashMap<i32, RegisteredPool>,
}

/// A registered memory, and its mapping in the device while it stays registered (for a
/// model of this driver's own device and a mappable memory).
struct RegisteredPool {
    memory: Memory,
    pin: Option<Arc<PinnedPool>>,
}

impl Session {
    fn next(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

/// A client's answer to a burst's getMemories.
type MemoriesAnswer = (ErrorStatus, Vec<Memory>);

/// A connection's idleness, for [`Admission`]: set once the connection is set up.
#[derive(Default)]
struct Activity(OnceLock<Weak<Conn>>);

impl Idle for Activity {
    fn idle_since(&self) -> Option<Instant> {
        let conn = self.0.get()?.upgrade()?;
        if conn.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let s = conn.session();
        let owns = !s.models.is_empty()
            || s.preparing > 0
            || !s.buffers.is_empty()
            || !s.fenced.is_empty()
            || !s.bursts.is_empty();
        drop(s);
        if owns {
            return None;
        }
        let since = *conn.last_call.lock().unwrap_or_else(|p| p.into_inner());
        Some(since)
    }
}

/// One client's connection.
struct Conn {
    /// When the client last called.
    last_call: Mutex<Instant>,
    session: Mutex<Session>,
    outbox: Outbox,
    in_flight: AtomicUsize,
    limits: ClientLimits,
    /// Bursts' getMemories calls waiting for the client's answer, by notification id.
    memory_requests: Mutex<HashMap<u64, SyncSender<MemoriesAnswer>>>,
    next_token: AtomicU64,
}

impl Conn {
    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One client, from the handshake until it disconnects or the socket fails.
fn connection(sock: Arc<OwnedFd>, shared: &Shared, ticket: &Ticket) -> Result<(), TransportError> {
    let limits = shared.options.limits.clone();
    // The hello must come within the deadline (replies too: a client that does not read
    // its welcome is as silent as one that does not write).
    let hello = transport::timeval(shared.admission.limits().hello_timeout);
    setsockopt(&*sock, sockopt::ReceiveTimeout, &hello)?;
    setsockopt(&*sock, sockopt::SendTimeout, &hello)?;
    let activity = Arc::new(Activity::default());
    let idle: Arc<dyn Idle> = activity.clone();
    transport::handshake_server_with(sock.as_fd(), &shared.options.device_name, || {
        ticket.authenticate(idle)
    })?;
    setsockopt(
        &*sock,
        sockopt::ReceiveTimeout,
        &transport::timeval(Duration::ZERO),
    )?;
    setsockopt(
        &*sock,
        sockopt::SendTimeout,
        &transport::timeval(limits.reply_timeout),
    )?;
    let (tx, rx) = sync_channel(limits.queued_notifications.max(1));
    let writer_sock = sock.clone();
    std::thread::Builder::new()
        .name("vnpu-conn-w".into())
        .spawn(move || writer(writer_sock, rx))
        .map_err(|_| TransportError::Io(nix::errno::Errno::EAGAIN))?;
    let conn = Arc::new(Conn {
        last_call: Mutex::new(Instant::now()),
        session: Mutex::new(Session::default()),
        outbox: Outbox {
            tx,
            sock: sock.clone(),
        },
        in_flight: AtomicUsize::new(0),
        limits,
        memory_requests: Mutex::new(HashMap::new()),
        // Notification ids of our own: far from the client's request ids.
        next_token: AtomicU64::new(1 << 63),
    });
    let _ = activity.0.set(Arc::downgrade(&conn));
    let result = serve_calls(&sock, shared, &conn);
    // The client is gone (or must go): release everything it owned. Work still running
    // holds its own references and lets go when it ends.
    transport::shutdown(sock.as_fd());
    let released = {
        let mut s = conn.session();
        s.closed = true;
        (
            std::mem::take(&mut s.bursts),
            std::mem::take(&mut s.models),
            std::mem::take(&mut s.buffers),
            std::mem::take(&mut s.fenced),
            std::mem::take(&mut s.executions),
            std::mem::take(&mut s.token_bursts),
            std::mem::take(&mut s.pools),
        )
    };
    // Bursts first: a burst thread waiting for memories is failed and stops.
    conn.memory_requests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
    drop(released);
    result
}

/// Reads and answers calls until the client disconnects or the socket fails.
fn serve_calls(sock: &OwnedFd, shared: &Shared, conn: &Arc<Conn>) -> Result<(), TransportError> {
    loop {
        let frame = match transport::recv(sock.as_fd()) {
            Ok(frame) => frame,
            // A whole packet refused before use (its descriptors already closed): say
            // so, carry on.
            Err(
                e @ (TransportError::Oversized
                | TransportError::TooManyFds
                | TransportError::Malformed(_)),
            ) => {
                conn.outbox
                    .reply(0, Reply::Refused(e.to_string()), vec![])?;
                continue;
            }
            Err(e) => return Err(e),
        };
        *conn.last_call.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        let req = match transport::decode::<Request>(&frame.bytes) {
            Ok(req) => req,
            Err(e) => {
                conn.outbox
                    .reply(0, Reply::Refused(e.to_string()), vec![])?;
                continue;
            }
        };
        let id = req.id;
        let fds = match Incoming::exact(req.call.fd_count(), frame.fds) {
            Ok(fds) => fds,
            Err(e) => {
                conn.outbox
                    .reply(id, Reply::Refused(e.to_string()), vec![])?;
                continue;
            }
        };
        if let Some((reply, fds)) = answer(shared, conn, id, req.call, fds) {
            conn.outbox.reply(id, reply, fds)?;
        }
    }
}

/// A refusal: the message was readable but names something this connection lacks.
fn refused(why: impl Into<String>) -> Option<(Reply, Vec<Arc<OwnedFd>>)> {
    Some((Reply::Refused(why.into()), Vec::new()))
}

/// A reply without descriptors.
fn plain(reply: Reply) -> Option<(Reply, Vec<Arc<OwnedFd>>)> {
    Some((reply, Vec::new()))
}

/// Runs one call against the device; `None` for a call that gets no reply.
fn answer(
    shared: &Shared,
    conn: &Arc<Conn>,
    id: u64,
    call: Call,
    mut fds: Incoming,
) -> Option<(Reply, Vec<Arc<OwnedFd>>)> {
    let device = shared.device.as_ref();
    let limits = &conn.limits;
    match call {
        Call::GetCapabilities => {
            let (s, c) = device.get_capabilities_1_3();
            plain(Reply::Capabilities(s, c))
        }
        Call::GetVersionString => {
            let (s, v) = device.get_version_string();
            plain(Reply::VersionString(s, v))
        }
        Call::GetType => {
            let (s, t) = device.get_type();
            plain(Reply::Type(s, t))
        }
        Call::GetStatus => plain(Reply::Status(device.get_status())),
        Call::GetSupportedExtensions => {
            let (s, e) = device.get_supported_extensions();
            plain(Reply::Extensions(s, e))
        }
        Call::GetNumberOfCacheFilesNeeded => {
            let (s, m, d) = device.get_number_of_cache_files_needed();
            plain(Reply::CacheFiles(s, m, d))
        }
        Call::GetSupportedOperations {
            mut model,
            pools,
            level,
        } => {
            model.pools = fds.memories(pools);
            let (s, ops) = device.get_supported_operations_at(level, &model);
            plain(Reply::SupportedOperations(s, ops))
        }
        Call::PrepareModel {
            level,
            mut model,
            pools,
            preference,
            priority,
            deadline,
            cache,
        } => {
            model.pools = fds.memories(pools);
            let model_cache = fds.handles(cache.model_cache);
            let data_cache = fds.handles(cache.data_cache);
            plain(launch_preparation(conn, id, |cb| {
                device.prepare_model_at(
                    level,
                    PrepareArgs {
                        preference,
                        priority,
                        deadline,
                        model_cache: &model_cache,
                        data_cache: &data_cache,
                        token: &cache.token,
                        ..PrepareArgs::new(&model, Some(cb))
                    },
                )
            }))
        }
        Call::PrepareModelFromCache { deadline, cache } => {
            let model_cache = fds.handles(cache.model_cache);
            let data_cache = fds.handles(cache.data_cache);
            plain(launch_preparation(conn, id, |cb| {
                device.prepare_model_from_cache_1_3(PrepareFromCacheArgs {
                    deadline,
                    ..PrepareFromCacheArgs::new(&model_cache, &data_cache, &cache.token, Some(cb))
                })
            }))
        }
        Call::Allocate {
            desc,
            models,
            input_roles,
            output_roles,
        } => {
            let mut s = conn.session();
            let mut prepared = Vec::with_capacity(models.len());
            for m in models {
                match m {
                    None => prepared.push(None),
                    Some(m) => match s.models.get(&m) {
                        Some(p) => prepared.push(Some(p.clone())),
                        None => return refused(format!("no prepared model {m}")),
                    },
                }
            }
            if s.buffers.len() >= limits.buffers {
                return plain(Reply::Allocated(
                    ErrorStatus::ResourceExhaustedTransient,
                    None,
                    0,
                ));
            }
            let (status, buffer, token) =
                device.allocate(&desc, &prepared, &input_roles, &output_roles);
            let buffer = buffer.map(|b| {
                let id = s.next();
                s.buffers.insert(id, (b, token));
                id
            });
            plain(Reply::Allocated(status, buffer, token))
        }
        Call::CopyTo { buffer, dst } => {
            let Some(b) = conn.session().buffers.get(&buffer).map(|b| b.0.clone()) else {
                return refused(format!("no buffer {buffer}"));
            };
            plain(Reply::Copied(b.copy_to(&fds.memory(dst))))
        }
        Call::CopyFrom {
            buffer,
            src,
            dimensions,
        } => {
            let Some(b) = conn.session().buffers.get(&buffer).map(|b| b.0.clone()) else {
                return refused(format!("no buffer {buffer}"));
            };
            plain(Reply::Copied(b.copy_from(&fds.memory(src), &dimensions)))
        }
        Call::Execute(exec) => {
            let (prepared, request, _) =
                match execution(conn, exec.model, exec.pools, exec.forget, &mut fds) {
                    Ok(x) => x,
                    Err(why) => return refused(why),
                };
            let request = HalRequest {
                pools: request,
                ..*exec.request
            };
            let notifier = Notifier::new(conn, id);
            if conn.in_flight.fetch_add(1, Ordering::AcqRel) >= limits.in_flight {
                let s = ErrorStatus::ResourceExhaustedTransient;
                ExecutionCallback::notify(notifier.as_ref(), s, Vec::new(), Timing::NONE);
                return plain(Reply::Launched(s));
            }
            let returned = prepared.execute_1_3(
                &request,
                exec.measure,
                exec.deadline,
                exec.loop_timeout,
                Some(notifier.clone()),
            );
            if returned != ErrorStatus::None {
                // A refused launch has notified already (the HAL's rule); make sure.
                ExecutionCallback::notify(notifier.as_ref(), returned, Vec::new(), Timing::NONE);
            }
            plain(Reply::Launched(returned))
        }
        Call::ExecuteSynchronously(exec) => {
            let (prepared, pools, pins) =
                match execution(conn, exec.model, exec.pools, exec.forget, &mut fds) {
                    Ok(x) => x,
                    Err(why) => return refused(why),
                };
            let request = HalRequest {
                pools,
                ..*exec.request
            };
            // Over registered memories the device keeps mapped: not mapped again.
            let local = prepared
                .as_any()
                .and_then(|a| a.downcast_ref::<VnpuPreparedModel>())
                .filter(|_| pins.iter().any(Option::is_some));
            let (s, shapes, timing) = match local {
                Some(m) => m.execute_synchronously_pinned(
                    &request,
                    exec.measure,
                    exec.deadline,
                    exec.loop_timeout,
                    &pins,
                ),
                None => prepared.execute_synchronously_1_3(
                    &request,
                    exec.measure,
                    exec.deadline,
                    exec.loop_timeout,
                ),
            };
            plain(Reply::Executed(s, shapes, timing))
        }
        Call::ExecuteFenced {
            exec,
            wait_for,
            duration,
        } => {
            let (prepared, pools, _) =
                match execution(conn, exec.model, exec.pools, exec.forget, &mut fds) {
                    Ok(x) => x,
                    Err(why) => return refused(why),
                };
            let wait_for = fds.handles(wait_for);
            if conn.session().fenced.len() >= limits.fenced {
                return plain(Reply::Fenced(
                    ErrorStatus::ResourceExhaustedTransient,
                    None,
                    None,
                ));
            }
            let request = HalRequest {
                pools,
                ..*exec.request
            };
            let fenced = prepared.execute_fenced(
                &request,
                &wait_for,
                exec.measure,
                exec.deadline,
                exec.loop_timeout,
                duration,
            );
            Some(fenced_reply(conn, fenced))
        }
        Call::FencedInfo { callback } => {
            let Some(cb) = conn.session().fenced.get(&callback).cloned() else {
                return refused(format!("no fenced execution {callback}"));
            };
            let (s, launched, fenced) = cb.get_execution_info();
            plain(Reply::FencedInfo(s, launched, fenced))
        }
        Call::CreateReusableExecution(exec) => {
            let (prepared, pools, _) =
                match execution(conn, exec.model, exec.pools, exec.forget, &mut fds) {
                    Ok(x) => x,
                    Err(why) => return refused(why),
                };
            if conn.session().executions.len() >= limits.bursts {
                let s = ErrorStatus::ResourceExhaustedTransient;
                return plain(Reply::Reusable(s, None));
            }
            let request = HalRequest {
                pools,
                ..*exec.request
            };
            match prepared.create_reusable_execution(&request, exec.measure, exec.loop_timeout) {
                Ok(e) => {
                    let mut s = conn.session();
                    let id = s.next();
                    s.executions.insert(id, e);
                    plain(Reply::Reusable(ErrorStatus::None, Some(id)))
                }
                Err(status) => plain(Reply::Reusable(status, None)),
            }
        }
        Call::ExecuteReusable {
            execution,
            deadline,
        } => {
            let Some(e) = conn.session().executions.get(&execution).cloned() else {
                return refused(format!("no reusable execution {execution}"));
            };
            let (s, shapes, timing) = e.execute_synchronously(deadline);
            plain(Reply::Executed(s, shapes, timing))
        }
        Call::ExecuteReusableFenced {
            execution,
            wait_for,
            deadline,
            duration,
        } => {
            let wait_for = fds.handles(wait_for);
            let Some(e) = conn.session().executions.get(&execution).cloned() else {
                return refused(format!("no reusable execution {execution}"));
            };
            if conn.session().fenced.len() >= limits.fenced {
                let s = ErrorStatus::ResourceExhaustedTransient;
                return plain(Reply::Fenced(s, None, None));
            }
            Some(fenced_reply(
                conn,
                e.execute_fenced(&wait_for, deadline, duration),
            ))
        }
        Call::ConfigureTokenBurst { model } => {
            let Some(prepared) = conn.session().models.get(&model).cloned() else {
                return refused(format!("no prepared model {model} on this connection"));
            };
            if conn.session().token_bursts.len() >= limits.bursts {
                return plain(Reply::Burst(ErrorStatus::ResourceExhaustedTransient, None));
            }
            match prepared.configure_memory_token_burst() {
                Ok(b) => {
                    let mut s = conn.session();
                    let id = s.next();
                    s.token_bursts.insert(id, (model, b));
                    plain(Reply::Burst(ErrorStatus::None, Some(id)))
                }
                Err(status) => plain(Reply::Burst(status, None)),
            }
        }
        Call::ExecuteTokenBurst {
            burst,
            exec,
            tokens,
        } => {
            let Some((model, b)) = conn.session().token_bursts.get(&burst).cloned() else {
                return refused(format!("no burst {burst}"));
            };
            let (_, pools, _) = match execution(conn, model, exec.pools, exec.forget, &mut fds) {
                Ok(x) => x,
                Err(why) => return refused(why),
            };
            let request = HalRequest {
                pools,
                ..*exec.request
            };
            let (s, shapes, timing) = b.execute_synchronously(
                &request,
                &tokens,
                exec.measure,
                exec.deadline,
                exec.loop_timeout,
            );
            plain(Reply::Executed(s, shapes, timing))
        }
        Call::ReleaseMemoryResource { burst, token } => {
            let Some((_, b)) = conn.session().token_bursts.get(&burst).cloned() else {
                return refused(format!("no burst {burst}"));
            };
            plain(Reply::Released(b.release_memory_resource(token)))
        }
        Call::Usage => plain(Reply::Usage(ServiceUsage {
            connections: shared.admission.serving() as u64,
            device: shared
                .options
                .usage
                .as_ref()
                .map(|u| u())
                .unwrap_or_default(),
        })),
        Call::Release(object) => {
            let mut s = conn.session();
            match object {
                Object::Model(m) => drop(s.models.remove(&m)),
                Object::Buffer(b) => drop(s.buffers.remove(&b)),
                Object::Fenced(f) => drop(s.fenced.remove(&f)),
                Object::Execution(e) => drop(s.executions.remove(&e)),
                Object::TokenBurst(b) => drop(s.token_bursts.remove(&b)),
                Object::Burst(b) => {
                    let burst = s.bursts.remove(&b);
                    // Stopping it joins its thread: not under the session's lock.
                    drop(s);
                    drop(burst);
                }
            }
            None
        }
        Call::ConfigureBurst {
            model,
            request_channel,
            result_channel,
        } => {
            let Some(prepared) = conn.session().models.get(&model).cloned() else {
                return refused(format!("no prepared model {model} on this connection"));
            };
            let requests = fds.handle(request_channel);
            let results = fds.handle(result_channel);
            let (Some(rq), Some(rs)) = (requests.fds.first(), results.fds.first()) else {
                return plain(Reply::Burst(ErrorStatus::InvalidArgument, None));
            };
            if conn.session().bursts.len() >= limits.bursts {
                return plain(Reply::Burst(ErrorStatus::ResourceExhaustedTransient, None));
            }
            let id = conn.session().next();
            let callback = Arc::new(RemoteSlots {
                conn: Arc::downgrade(conn),
                burst: id,
            });
            let (status, context) =
                prepared.configure_execution_burst(callback, rq.as_fd(), rs.as_fd());
            let burst = context.map(|c| {
                conn.session().bursts.insert(id, c);
                id
            });
            plain(Reply::Burst(status, burst))
        }
        Call::FreeBurstMemory { burst, slot } => {
            let Some(b) = conn.session().bursts.get(&burst).cloned() else {
                return refused(format!("no burst {burst}"));
            };
            b.free_memory(slot);
            plain(Reply::Freed)
        }
        Call::BurstMemories {
            token,
            status,
            memories,
        } => {
            let memories = fds.memories(memories);
            let waiter = conn
                .memory_requests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&token);
            // Unasked or late: dropped (its descriptors closed).
            if let Some(tx) = waiter {
                let _ = tx.try_send((status, memories));
            }
            None
        }
    }
}

/// What an execution on this connection runs: the prepared model, the request pools and
/// their pins (by pool index; registered memories the device keeps mapped).
type Execution = (
    Arc<dyn IPreparedModel>,
    Vec<RequestMemoryPool>,
    Vec<Option<Arc<PinnedPool>>>,
);

/// The prepared model, request pools and pins of an execution on this connection: the
/// model must be one of its own, and so must every buffer a token names and every
/// registered memory an id names. `forget`'s memories are forgotten first; the pools'
/// registrations are kept even when the call is then refused (the client counts on
/// them), each pinned in the model's device when it is this driver's own.
fn execution(
    conn: &Conn,
    model: u64,
    pools: Vec<WirePool>,
    forget: Vec<i32>,
    fds: &mut Incoming,
) -> Result<Execution, String> {
    let mut s = conn.session();
    for k in forget {
        s.pools.remove(&k);
    }
    let prepared = s.models.get(&model).cloned();
    let local = prepared
        .as_ref()
        .and_then(|p| p.as_any())
        .and_then(|a| a.downcast_ref::<VnpuPreparedModel>());
    let mut bad = None;
    let mut out = Vec::with_capacity(pools.len());
    let mut pins = Vec::with_capacity(pools.len());
    for p in fds.pools(pools) {
        let (pool, pin) = match p {
            ReceivedPool::Memory(m) => (RequestMemoryPool::HidlMemory(m), None),
            ReceivedPool::Token(t) => {
                if !s.buffers.values().any(|(_, token)| *token == t) {
                    bad.get_or_insert_with(|| {
                        format!("no buffer with token {t} on this connection")
                    });
                }
                (RequestMemoryPool::Token(t), None)
            }
            ReceivedPool::Register(k, memory) => {
                if !(0..REGISTERED_POOLS).contains(&k) {
                    bad.get_or_insert_with(|| format!("registered memory id {k} out of range"));
                    continue;
                }
                let pin = local.and_then(|m| m.pin(&memory));
                let kept = RegisteredPool {
                    memory: memory.clone(),
                    pin: pin.clone(),
                };
                s.pools.insert(k, kept);
                (RequestMemoryPool::HidlMemory(memory), pin)
            }
            ReceivedPool::Registered(k) => match s.pools.get(&k) {
                Some(r) => (
                    RequestMemoryPool::HidlMemory(r.memory.clone()),
                    r.pin.clone(),
                ),
                None => {
                    bad.get_or_insert_with(|| {
                        format!("no registered memory {k} on this connection")
                    });
                    continue;
                }
            },
        };
        out.push(pool);
        pins.push(pin);
    }
    let prepared =
        prepared.ok_or_else(|| format!("no prepared model {model} on this connection"))?;
    match bad {
        Some(why) => Err(why),
        None => Ok((prepared, out, pins)),
    }
}

/// A fenced execution's reply: its callback kept under a new id, its fence's descriptors
/// beside the message.
fn fenced_reply(conn: &Conn, fenced: FencedResult) -> (Reply, Vec<Arc<OwnedFd>>) {
    let (status, fence, callback) = fenced;
    let callback = callback.map(|cb| {
        let mut s = conn.session();
        let id = s.next();
        s.fenced.insert(id, cb);
        id
    });
    let (wire, fence_fds) = match fence {
        Some(h) => (
            Some(WireHandle {
                fd_count: u32::try_from(h.fds.len()).unwrap_or(u32::MAX),
                ints: h.ints,
            }),
            h.fds,
        ),
        None => (None, Vec::new()),
    };
    (Reply::Fenced(status, wire, callback), fence_fds)
}

/// Launches a preparation through `start` (given the callback); returns the reply.
/// Exactly one [`Notification::Prepared`] follows it.
fn launch_preparation(
    conn: &Arc<Conn>,
    id: u64,
    start: impl FnOnce(Arc<dyn PreparedModelCallback>) -> ErrorStatus,
) -> Reply {
    let notifier = Notifier::new(conn, id);
    let full = {
        let mut s = conn.session();
        let full = s.models.len() + s.preparing >= conn.limits.models;
        if !full {
            s.preparing += 1;
        }
        full
    };
    let busy = conn.in_flight.fetch_add(1, Ordering::AcqRel) >= conn.limits.in_flight;
    if full || busy {
        if !full {
            conn.session().preparing -= 1;
        }
        let s = ErrorStatus::ResourceExhaustedTransient;
        notifier.finish(Notification::Prepared(s, None));
        return Reply::Launched(s);
    }
    notifier.preparing.store(true, Ordering::Release);
    let returned = start(notifier.clone());
    if returned != ErrorStatus::None {
        PreparedModelCallback::notify(notifier.as_ref(), returned, None);
    }
    Reply::Launched(returned)
}

/// A burst's [`IBurstCallback`] in the service: asks the client over the connection and
/// waits (at most the reply timeout) for its answer.
struct RemoteSlots {
    /// Weak: the connection owns its bursts, not the other way round.
    conn: std::sync::Weak<Conn>,
    burst: u64,
}

impl IBurstCallback for RemoteSlots {
    fn get_memories(&self, slots: &[i32]) -> (ErrorStatus, Vec<Memory>) {
        let failed = (ErrorStatus::GeneralFailure, Vec::new());
        let Some(conn) = self.conn.upgrade() else {
            return failed;
        };
        let token = conn.next_token.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        conn.memory_requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token, tx);
        conn.outbox.notify(
            token,
            Notification::GetMemories {
                burst: self.burst,
                slots: slots.to_vec(),
            },
        );
        let timeout = conn.limits.reply_timeout;
        // Not holding the connection while waiting: its end must be able to come.
        drop(conn);
        let answer = rx.recv_timeout(timeout);
        if let Some(conn) = self.conn.upgrade() {
            conn.memory_requests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&token);
        }
        answer.unwrap_or(failed)
    }
}

/// The callback a launched call's work notifies: posts exactly one notification.
struct Notifier {
    conn: Arc<Conn>,
    id: u64,
    done: AtomicBool,
    /// Whether this notifier counts against the session's `preparing`.
    preparing: AtomicBool,
}

impl Notifier {
    fn new(conn: &Arc<Conn>, id: u64) -> Arc<Notifier> {
        Arc::new(Notifier {
            conn: conn.clone(),
            id,
            done: AtomicBool::new(false),
            preparing: AtomicBool::new(false),
        })
    }

    /// Whether this is the first notification (only the first is posted).
    fn claim(&self) -> bool {
        !self.done.swap(true, Ordering::AcqRel)
    }

    /// Posts the notification of a claimed notifier.
    fn post(&self, n: Notification) {
        self.conn.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.conn.outbox.notify(self.id, n);
    }

    /// Posts `n` if nothing was posted yet.
    fn finish(&self, n: Notification) {
        if self.claim() {
            self.post(n);
        }
    }
}

impl PreparedModelCallback for Notifier {
    fn notify(&self, status: ErrorStatus, prepared: Option<Arc<dyn IPreparedModel>>) {
        if !self.claim() {
            return;
        }
        let model = {
            let mut s = self.conn.session();
            if self.preparing.swap(false, Ordering::AcqRel) {
                s.preparing = s.preparing.saturating_sub(1);
            }
            match prepared {
                Some(p) if status == ErrorStatus::None && !s.closed => {
                    let id = s.next();
                    s.models.insert(id, p);
                    Some(id)
                }
                _ => None,
            }
        };
        let notified = if status == ErrorStatus::None && model.is_none() {
            // Prepared for a client that has gone, or a success without a model.
            ErrorStatus::GeneralFailure
        } else {
            status
        };
        self.post(Notification::Prepared(notified, model));
    }
}

impl ExecutionCallback for Notifier {
    fn notify(&self, status: ErrorStatus, output_shapes: Vec<OutputShape>, timing: Timing) {
        self.finish(Notification::Executed(status, output_shapes, timing));
    }
}
