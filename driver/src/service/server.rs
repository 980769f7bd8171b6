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
use super::protocol::{Incoming, Notification, Reply, Request, Response};
use super::transport::{self, PeerPolicy, TransportError};
use crate::device::DeviceUsage;
use crate::execute::PinnedPool;
use crate::hal::{ErrorStatus, Memory, OutputShape, Timing};
use crate::interface::{
    ExecutionCallback, IBuffer, IBurstCallback, IBurstContext, IDevice, IFencedExecutionCallback,
    IMemoryTokenBurst, IPreparedModel, IReusableExecution, PreparedModelCallback,
};

mod calls;

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
        if let Some((reply, fds)) = calls::answer(shared, conn, id, req.call, fds) {
            conn.outbox.reply(id, reply, fds)?;
        }
    }
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
