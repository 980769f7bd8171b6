//! What the service does for each call: [`answer`] hands every [`Call`] to the handler of
//! its kind (device queries and preparation, driver-managed buffers, executions, reusable
//! executions, bursts, the session), each checking that what the call names belongs to
//! this connection before it touches the device.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Conn, Notifier, RegisteredPool, RemoteSlots, Shared};
use crate::execute::{PinnedPool, VnpuPreparedModel};
use crate::hal::{BufferDesc, BufferRole};
use crate::hal::{
    ErrorStatus, Memory, NativeHandle, OptionalTimePoint, OptionalTimeoutDuration,
    Request as HalRequest, RequestMemoryPool, Timing, BYTE_SIZE_OF_CACHE_TOKEN,
};
use crate::interface::{
    ExecutionCallback, FencedResult, IBuffer, IDevice, IPreparedModel, PrepareArgs,
    PrepareFromCacheArgs, PreparedModelCallback,
};
use crate::service::protocol::{
    Call, Incoming, Notification, Object, ReceivedPool, Reply, ServiceUsage, WireCache, WireHandle,
    WirePool, WireRequest, REGISTERED_POOLS,
};

/// A reply and the descriptors that travel beside it; `None`: the call gets no reply.
pub(super) type Answer = Option<(Reply, Vec<Arc<OwnedFd>>)>;

/// A refusal: the message was readable but names something this connection lacks.
fn refused(why: impl Into<String>) -> Answer {
    Some((Reply::Refused(why.into()), Vec::new()))
}

/// A reply without descriptors.
fn plain(reply: Reply) -> Answer {
    Some((reply, Vec::new()))
}

/// Runs one call against the device.
pub(super) fn answer(
    shared: &Shared,
    conn: &Arc<Conn>,
    id: u64,
    call: Call,
    mut fds: Incoming,
) -> Answer {
    let device = shared.device.as_ref();
    let fds = &mut fds;
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
            plain(launch_preparation(conn, id, cache, fds, |files, cb| {
                device.prepare_model_at(
                    level,
                    PrepareArgs {
                        preference,
                        priority,
                        deadline,
                        model_cache: &files.model,
                        data_cache: &files.data,
                        token: &files.token,
                        ..PrepareArgs::new(&model, Some(cb))
                    },
                )
            }))
        }
        Call::PrepareModelFromCache { deadline, cache } => {
            plain(launch_preparation(conn, id, cache, fds, |files, cb| {
                let from =
                    PrepareFromCacheArgs::new(&files.model, &files.data, &files.token, Some(cb));
                device.prepare_model_from_cache_1_3(PrepareFromCacheArgs { deadline, ..from })
            }))
        }
        Call::Allocate {
            desc,
            models,
            input_roles,
            output_roles,
        } => allocate(device, conn, &desc, models, &input_roles, &output_roles),
        Call::CopyTo { buffer, dst } => match buffer_of(conn, buffer) {
            Ok(b) => plain(Reply::Copied(b.copy_to(&fds.memory(dst)))),
            Err(no) => no,
        },
        Call::CopyFrom {
            buffer,
            src,
            dimensions,
        } => match buffer_of(conn, buffer) {
            Ok(b) => plain(Reply::Copied(b.copy_from(&fds.memory(src), &dimensions))),
            Err(no) => no,
        },
        Call::Execute(exec) => execute(conn, id, exec, fds),
        Call::ExecuteSynchronously(exec) => execute_synchronously(conn, exec, fds),
        Call::ExecuteFenced {
            exec,
            wait_for,
            duration,
        } => execute_fenced(conn, exec, wait_for, duration, fds),
        Call::FencedInfo { callback } => {
            let Some(cb) = conn.session().fenced.get(&callback).cloned() else {
                return refused(format!("no fenced execution {callback}"));
            };
            let (s, launched, fenced) = cb.get_execution_info();
            plain(Reply::FencedInfo(s, launched, fenced))
        }
        Call::CreateReusableExecution(exec) => create_reusable(conn, exec, fds),
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
            execute_reusable_fenced(conn, execution, &wait_for, deadline, duration)
        }
        Call::ConfigureTokenBurst { model } => configure_token_burst(conn, model),
        Call::ExecuteTokenBurst {
            burst,
            exec,
            tokens,
        } => execute_token_burst(conn, burst, exec, &tokens, fds),
        Call::ReleaseMemoryResource { burst, token } => {
            let Some((_, b)) = conn.session().token_bursts.get(&burst).cloned() else {
                return refused(format!("no burst {burst}"));
            };
            plain(Reply::Released(b.release_memory_resource(token)))
        }
        Call::ConfigureBurst {
            model,
            request_channel,
            result_channel,
        } => configure_burst(conn, model, request_channel, result_channel, fds),
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
            burst_memories(conn, token, status, fds.memories(memories));
            None
        }
        Call::Usage => plain(Reply::Usage(usage(shared))),
        Call::Release(object) => {
            release(conn, object);
            None
        }
    }
}

// Driver-managed buffers.

/// allocate, for roles of this connection's prepared models, within its buffer limit.
fn allocate(
    device: &dyn IDevice,
    conn: &Conn,
    desc: &BufferDesc,
    models: Vec<Option<u64>>,
    input_roles: &[BufferRole],
    output_roles: &[BufferRole],
) -> Answer {
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
    if s.buffers.len() >= conn.limits.buffers {
        return plain(Reply::Allocated(
            ErrorStatus::ResourceExhaustedTransient,
            None,
            0,
        ));
    }
    let (status, buffer, token) = device.allocate(desc, &prepared, input_roles, output_roles);
    let buffer = buffer.map(|b| {
        let id = s.next();
        s.buffers.insert(id, (b, token));
        id
    });
    plain(Reply::Allocated(status, buffer, token))
}

/// The connection's driver-managed buffer `id`, or the refusal.
fn buffer_of(conn: &Conn, id: u64) -> Result<Arc<dyn IBuffer>, Answer> {
    let buffer = conn.session().buffers.get(&id).map(|b| b.0.clone());
    buffer.ok_or_else(|| refused(format!("no buffer {id}")))
}

// Executions.

/// execute_1_3: launched within the connection's in-flight limit, notified when done.
fn execute(conn: &Arc<Conn>, id: u64, exec: WireRequest, fds: &mut Incoming) -> Answer {
    let (prepared, request, _) = match execution(conn, exec.model, exec.pools, exec.forget, fds) {
        Ok(x) => x,
        Err(why) => return refused(why),
    };
    let request = HalRequest {
        pools: request,
        ..*exec.request
    };
    let notifier = Notifier::new(conn, id);
    if conn.in_flight.fetch_add(1, Ordering::AcqRel) >= conn.limits.in_flight {
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

/// executeSynchronously_1_3, over the registered memories the device keeps mapped
/// where the request names them.
fn execute_synchronously(conn: &Conn, exec: WireRequest, fds: &mut Incoming) -> Answer {
    let (prepared, pools, pins) = match execution(conn, exec.model, exec.pools, exec.forget, fds) {
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

/// executeFenced, within the connection's limit of fenced callbacks.
fn execute_fenced(
    conn: &Conn,
    exec: WireRequest,
    wait_for: Vec<WireHandle>,
    duration: OptionalTimeoutDuration,
    fds: &mut Incoming,
) -> Answer {
    let (prepared, pools, _) = match execution(conn, exec.model, exec.pools, exec.forget, fds) {
        Ok(x) => x,
        Err(why) => return refused(why),
    };
    let wait_for = fds.handles(wait_for);
    if conn.session().fenced.len() >= conn.limits.fenced {
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

// Reusable executions.

/// createReusableExecution's core, kept under a new id within the connection's limit.
fn create_reusable(conn: &Conn, exec: WireRequest, fds: &mut Incoming) -> Answer {
    let (prepared, pools, _) = match execution(conn, exec.model, exec.pools, exec.forget, fds) {
        Ok(x) => x,
        Err(why) => return refused(why),
    };
    if conn.session().executions.len() >= conn.limits.bursts {
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

/// V4's `IExecution::executeFenced`, within the connection's limit of fenced callbacks.
fn execute_reusable_fenced(
    conn: &Conn,
    execution: u64,
    wait_for: &[NativeHandle],
    deadline: OptionalTimePoint,
    duration: OptionalTimeoutDuration,
) -> Answer {
    let Some(e) = conn.session().executions.get(&execution).cloned() else {
        return refused(format!("no reusable execution {execution}"));
    };
    if conn.session().fenced.len() >= conn.limits.fenced {
        let s = ErrorStatus::ResourceExhaustedTransient;
        return plain(Reply::Fenced(s, None, None));
    }
    Some(fenced_reply(
        conn,
        e.execute_fenced(wait_for, deadline, duration),
    ))
}

// Bursts.

/// V4's burst with memory tokens on one of this connection's prepared models.
fn configure_token_burst(conn: &Conn, model: u64) -> Answer {
    let Some(prepared) = conn.session().models.get(&model).cloned() else {
        return refused(format!("no prepared model {model} on this connection"));
    };
    if conn.session().token_bursts.len() >= conn.limits.bursts {
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

/// One execution of a token burst, its pools checked as any execution's.
fn execute_token_burst(
    conn: &Conn,
    burst: u64,
    exec: WireRequest,
    tokens: &[i64],
    fds: &mut Incoming,
) -> Answer {
    let Some((model, b)) = conn.session().token_bursts.get(&burst).cloned() else {
        return refused(format!("no burst {burst}"));
    };
    let (_, pools, _) = match execution(conn, model, exec.pools, exec.forget, fds) {
        Ok(x) => x,
        Err(why) => return refused(why),
    };
    let request = HalRequest {
        pools,
        ..*exec.request
    };
    let (s, shapes, timing) = b.execute_synchronously(
        &request,
        tokens,
        exec.measure,
        exec.deadline,
        exec.loop_timeout,
    );
    plain(Reply::Executed(s, shapes, timing))
}

/// configureExecutionBurst over the two queue memfds beside the call; the service's
/// slot misses go back to the client as [`Notification::GetMemories`].
fn configure_burst(
    conn: &Arc<Conn>,
    model: u64,
    request_channel: WireHandle,
    result_channel: WireHandle,
    fds: &mut Incoming,
) -> Answer {
    let Some(prepared) = conn.session().models.get(&model).cloned() else {
        return refused(format!("no prepared model {model} on this connection"));
    };
    let requests = fds.handle(request_channel);
    let results = fds.handle(result_channel);
    let (Some(rq), Some(rs)) = (requests.fds.first(), results.fds.first()) else {
        return plain(Reply::Burst(ErrorStatus::InvalidArgument, None));
    };
    if conn.session().bursts.len() >= conn.limits.bursts {
        return plain(Reply::Burst(ErrorStatus::ResourceExhaustedTransient, None));
    }
    let id = conn.session().next();
    let callback = Arc::new(RemoteSlots {
        conn: Arc::downgrade(conn),
        burst: id,
    });
    let (status, context) = prepared.configure_execution_burst(callback, rq.as_fd(), rs.as_fd());
    let burst = context.map(|c| {
        conn.session().bursts.insert(id, c);
        id
    });
    plain(Reply::Burst(status, burst))
}

/// The client's answer to a burst's getMemories, handed to the burst thread waiting for
/// it.
fn burst_memories(conn: &Conn, token: u64, status: ErrorStatus, memories: Vec<Memory>) {
    let waiter = conn
        .memory_requests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&token);
    // Unasked or late: dropped (its descriptors closed).
    if let Some(tx) = waiter {
        let _ = tx.try_send((status, memories));
    }
}

// The session.

/// What the service serves now: its connections and its device's usage.
fn usage(shared: &Shared) -> ServiceUsage {
    ServiceUsage {
        connections: shared.admission.serving() as u64,
        device: shared
            .options
            .usage
            .as_ref()
            .map(|u| u())
            .unwrap_or_default(),
    }
}

/// Forgets one of the connection's objects (a burst's thread stopped outside the lock).
fn release(conn: &Conn, object: Object) {
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

/// The cache files and token a preparation call names, their descriptors taken.
struct CacheFiles {
    model: Vec<NativeHandle>,
    data: Vec<NativeHandle>,
    token: [u8; BYTE_SIZE_OF_CACHE_TOKEN],
}

/// Launches a preparation through `start` (given the call's cache files and the
/// callback), within the connection's limits; returns the reply. Exactly one
/// [`Notification::Prepared`] follows it.
fn launch_preparation(
    conn: &Arc<Conn>,
    id: u64,
    cache: WireCache,
    fds: &mut Incoming,
    start: impl FnOnce(&CacheFiles, Arc<dyn PreparedModelCallback>) -> ErrorStatus,
) -> Reply {
    let files = CacheFiles {
        model: fds.handles(cache.model_cache),
        data: fds.handles(cache.data_cache),
        token: cache.token,
    };
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
    let returned = start(&files, notifier.clone());
    if returned != ErrorStatus::None {
        PreparedModelCallback::notify(notifier.as_ref(), returned, None);
    }
    Reply::Launched(returned)
}
