//! The service's side of a burst: a thread per burst that reads request packets, resolves
//! their slots through the slot cache (asking the client's [`IBurstCallback`] for the
//! slots it lacks, each only once), runs the execution synchronously on the prepared
//! model, and writes the result packet.
//!
//! A cached slot's memory stays mapped in the device's IOMMU (a [`PinnedPool`]) until the
//! client frees the slot or the burst ends, so executions do not map and unmap it.
//!
//! Every request is validated before use: a packet that breaks the rules, an unknown
//! slot, or a request the model refuses gets a failure result (status, no shapes, no
//! timing), never a crash or a hang. A result too large for the result queue is replaced
//! by a failure packet. Dropping the [`BurstContext`] stops the thread.

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::datum::{deserialize_request, serialize_result};
use super::fmq::{Element, Fmq, FmqError};
use crate::execute::{BurstMemo, PinnedPool, Shapes, VnpuPreparedModel};
use crate::hal::{
    ErrorStatus, MeasureTiming, Memory, OptionalTimePoint, OptionalTimeoutDuration,
    RequestMemoryPool, Timing,
};
use crate::interface::{BurstResult, IBurstCallback, IBurstContext, IPreparedModel};

/// How long the burst thread spins on an empty request queue before it sleeps. A futex
/// wake-up costs tens of microseconds on a small VM, a spin round trip well under one;
/// the sample driver polls 50 µs too.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// What the burst thread and its context share.
struct Shared {
    stop: AtomicBool,
    /// Slot → memory, as the client's callback gave them, and its mapping in the device's
    /// IOMMU, kept while the slot is cached (for a model of this driver's own device).
    slots: Mutex<HashMap<i32, Slot>>,
    /// The last execution, run again as is for the same request ([`BurstMemo`]); it holds
    /// its slots' pins, so freeing a slot forgets it.
    memo: Mutex<Memo>,
}

/// The burst's memo and the request packet it serves.
#[derive(Default)]
struct Memo {
    memo: Option<BurstMemo>,
    /// The last packet executed, and its timing flag. Whenever `memo` is set it serves
    /// this packet's request (it was made for it or served it; an execution that makes
    /// none clears it, and so does freeing a slot), so the very same packet again runs
    /// the memo without being read again (no request, pools or slot look-ups built).
    packet: Vec<Element>,
    measure: MeasureTiming,
}

/// A cached slot.
#[derive(Clone)]
struct Slot {
    memory: Memory,
    pin: Option<Arc<PinnedPool>>,
}

/// A running burst; dropping it stops the thread and forgets the slots.
pub struct BurstContext {
    shared: Arc<Shared>,
    requests: Arc<Fmq>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl IBurstContext for BurstContext {
    fn free_memory(&self, slot: i32) {
        self.shared
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&slot);
        self.shared
            .memo
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .memo = None;
    }
}

impl Drop for BurstContext {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.requests.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts a burst serving `model`: opens both queues (their memfds are duplicated, so the
/// caller keeps its own) and starts the thread.
pub fn start(
    model: Arc<dyn IPreparedModel>,
    callback: Arc<dyn IBurstCallback>,
    request_channel: BorrowedFd<'_>,
    result_channel: BorrowedFd<'_>,
    spin: Duration,
) -> BurstResult {
    let open = |fd: BorrowedFd<'_>| {
        fd.try_clone_to_owned()
            .map_err(|e| tracing::debug!("burst queue: {e}"))
            .and_then(|fd| Fmq::open(fd).map_err(|e| tracing::debug!("burst queue: {e}")))
    };
    let (Ok(requests), Ok(results)) = (open(request_channel), open(result_channel)) else {
        return (ErrorStatus::InvalidArgument, None);
    };
    let requests = Arc::new(requests);
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        slots: Mutex::new(HashMap::new()),
        memo: Mutex::new(Memo::default()),
    });
    let thread = {
        let shared = shared.clone();
        let requests = requests.clone();
        std::thread::Builder::new()
            .name("vnpu-burst".into())
            .spawn(move || serve(&model, &*callback, &requests, &results, &shared, spin))
    };
    match thread {
        Ok(t) => (
            ErrorStatus::None,
            Some(Arc::new(BurstContext {
                shared,
                requests,
                thread: Some(t),
            })),
        ),
        Err(e) => {
            tracing::warn!("cannot start a burst thread: {e}");
            (ErrorStatus::GeneralFailure, None)
        }
    }
}

/// The burst thread: one request packet in, one result packet out, until stopped.
fn serve(
    model: &Arc<dyn IPreparedModel>,
    callback: &dyn IBurstCallback,
    requests: &Fmq,
    results: &Fmq,
    shared: &Shared,
    spin: Duration,
) {
    let stop = || shared.stop.load(Ordering::Acquire);
    // The last result and its packet: a memo run again gives the very same shapes (the
    // same allocation), so an equal result is sent without being encoded again.
    let mut last: Option<(ErrorStatus, Shapes, Timing, Vec<Element>)> = None;
    // Each request is read into the same buffer.
    let mut packet = Vec::new();
    let local = local_model(model);
    loop {
        match requests.read_blocking_into(spin, None, &stop, &mut packet) {
            Ok(()) => {}
            Err(FmqError::Stopped) => return,
            Err(e) => {
                // The queue itself is broken: nothing more can be read from it.
                tracing::warn!("burst request queue: {e}; ending the burst");
                let _ = results.write(&failure());
                return;
            }
        };
        let (status, shapes, timing) = execute(model, local, callback, shared, &packet);
        let same = last
            .as_ref()
            .is_some_and(|l| l.0 == status && Arc::ptr_eq(&l.1, &shapes) && l.2 == timing);
        if !same {
            let out = serialize_result(status, &shapes, timing);
            last = Some((status, shapes, timing, out));
        }
        let out = last.as_ref().map_or(&[][..], |l| &l.3[..]);
        if let Err(e) = results.write(out) {
            tracing::debug!("burst result does not fit ({e}): sending a failure instead");
            let _ = results.write(&failure());
        }
    }
}

/// The failure packet: GENERAL_FAILURE, no shapes, no timing.
fn failure() -> Vec<Element> {
    serialize_result(ErrorStatus::GeneralFailure, &[], Timing::NONE)
}

/// Runs one request packet on `model` (`local`: the same model as this driver's own).
fn execute(
    model: &Arc<dyn IPreparedModel>,
    local: Option<&VnpuPreparedModel>,
    callback: &dyn IBurstCallback,
    shared: &Shared,
    packet: &[Element],
) -> (ErrorStatus, Shapes, Timing) {
    let fail = |s: ErrorStatus| (s, Shapes::from([]), Timing::NONE);
    if let Some(m) = local {
        let memo = shared.memo.lock().unwrap_or_else(|p| p.into_inner());
        if memo.memo.is_some() && memo.packet[..] == *packet {
            if let Some(done) = m.execute_memo(memo.measure, &memo.memo) {
                return outcome(done);
            }
        }
    }
    let (mut request, slots, measure) = match deserialize_request(packet) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!("burst request: {e}");
            return fail(ErrorStatus::GeneralFailure);
        }
    };
    let cached = match resolve(callback, shared, &slots, local) {
        Ok(m) => m,
        Err(s) => return fail(s),
    };
    let (memories, pins): (Vec<Memory>, Vec<Option<Arc<PinnedPool>>>) =
        cached.into_iter().map(|c| (c.memory, c.pin)).unzip();
    request.pools = memories
        .into_iter()
        .map(RequestMemoryPool::HidlMemory)
        .collect();
    let (status, shapes, timing) = match local {
        Some(m) => {
            let mut memo = shared.memo.lock().unwrap_or_else(|p| p.into_inner());
            let done = m.execute_pinned(&request, measure, &pins, &mut memo.memo);
            if memo.memo.is_some() {
                memo.packet.clear();
                memo.packet.extend_from_slice(packet);
                memo.measure = measure;
            }
            done
        }
        None => {
            let (status, shapes, timing) = model.execute_synchronously_1_3(
                &request,
                measure,
                OptionalTimePoint::NONE,
                OptionalTimeoutDuration::default(),
            );
            (status, shapes.into(), timing)
        }
    };
    outcome((status, shapes, timing))
}

/// What an execution's result packet says.
fn outcome(
    (status, shapes, timing): (ErrorStatus, Shapes, Timing),
) -> (ErrorStatus, Shapes, Timing) {
    match status {
        ErrorStatus::None => (status, shapes, timing),
        // Shapes tell the client how large the outputs must be.
        ErrorStatus::OutputInsufficientSize => (status, shapes, Timing::NONE),
        s => (s, Shapes::from([]), Timing::NONE),
    }
}

/// The model as this driver's own prepared model, whose executions can use pinned pools.
fn local_model(model: &Arc<dyn IPreparedModel>) -> Option<&VnpuPreparedModel> {
    model.as_any()?.downcast_ref::<VnpuPreparedModel>()
}

/// The memories of `slots` (with their pins), fetching the uncached ones (each once) from
/// the client and pinning them in `local`'s device.
fn resolve(
    callback: &dyn IBurstCallback,
    shared: &Shared,
    slots: &[i32],
    local: Option<&VnpuPreparedModel>,
) -> Result<Vec<Slot>, ErrorStatus> {
    let mut missing: Vec<i32> = {
        let cache = shared.slots.lock().unwrap_or_else(|p| p.into_inner());
        // Usually every slot is cached: one look-up each, under one lock.
        if let Some(all) = slots.iter().map(|s| cache.get(s).cloned()).collect() {
            return Ok(all);
        }
        slots
            .iter()
            .copied()
            .filter(|s| !cache.contains_key(s))
            .collect()
    };
    missing.sort_unstable();
    missing.dedup();
    if !missing.is_empty() {
        let (status, memories) = callback.get_memories(&missing);
        if status != ErrorStatus::None || memories.len() != missing.len() {
            tracing::debug!("burst: getMemories gave {status} for slots {missing:?}");
            return Err(ErrorStatus::GeneralFailure);
        }
        let fetched: Vec<Slot> = memories
            .into_iter()
            .map(|memory| Slot {
                pin: local.and_then(|m| m.pin(&memory)),
                memory,
            })
            .collect();
        let mut cache = shared.slots.lock().unwrap_or_else(|p| p.into_inner());
        cache.extend(missing.into_iter().zip(fetched));
    }
    let cache = shared.slots.lock().unwrap_or_else(|p| p.into_inner());
    slots
        .iter()
        .map(|s| cache.get(s).cloned().ok_or(ErrorStatus::GeneralFailure))
        .collect()
}
