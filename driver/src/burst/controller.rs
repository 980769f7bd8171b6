//! The client's side of a burst: creates the two queues, configures the burst on a
//! prepared model, assigns slots to memories (the slot cache's client half, which is the
//! [`IBurstCallback`] the service asks on a miss) and runs executions as packets.
//!
//! A memory is known by its first descriptor's allocation: the controller keeps only weak
//! references to its descriptors, so a memory the client drops is noticed at the next
//! execution and its slot freed in the service too (and a dropped memory cannot be given
//! out under its old slot).

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::datum::{deserialize_result, serialize_request, ResultDatum};
use super::fmq::{Element, Fmq, FmqError};
use crate::execute::{same_arguments, Shapes};
use crate::hal::{
    ErrorStatus, MeasureTiming, Memory, NativeHandle, Request, RequestArgument, RequestMemoryPool,
    Timing,
};
use crate::interface::{IBurstCallback, IBurstContext, IPreparedModel};

/// Elements in each queue (the HAL's controllers use 1 024).
pub const CHANNEL_LENGTH: u32 = 1024;

/// Slots the client has handed out.
#[derive(Default)]
pub struct Slots {
    entries: Mutex<Vec<Option<SlotEntry>>>,
}

/// A memory as the slot table holds it: weakly, so the client's dropping it is seen.
struct SlotEntry {
    name: String,
    size: u64,
    fds: Vec<Weak<OwnedFd>>,
    ints: Vec<i32>,
}

impl SlotEntry {
    /// Whether this entry is `memory` (the same first descriptor, size, kind and
    /// integers). The descriptor is compared by address: a weak reference keeps its
    /// allocation, so no other descriptor can come to live there.
    fn is(&self, memory: &Memory) -> bool {
        self.size == memory.size
            && memory.handle.fds.first().is_some_and(|k| {
                self.fds
                    .first()
                    .is_some_and(|f| std::ptr::eq(f.as_ptr(), Arc::as_ptr(k)))
            })
            && self.ints == memory.handle.ints
            && self.name == memory.name
    }

    /// The memory, if the client still holds it, with descriptors of its own (as if it
    /// had crossed a process boundary): what the service caches never keeps the client's
    /// memory alive, so its dropping stays visible here.
    fn memory(&self) -> Option<Memory> {
        let fds: Option<Vec<Arc<OwnedFd>>> = self
            .fds
            .iter()
            .map(|f| f.upgrade()?.try_clone().ok().map(Arc::new))
            .collect();
        Some(Memory {
            name: self.name.clone(),
            size: self.size,
            handle: NativeHandle {
                fds: fds?,
                ints: self.ints.clone(),
            },
        })
    }

    fn dead(&self) -> bool {
        self.fds.iter().any(|f| f.strong_count() == 0)
    }
}

impl Slots {
    /// The slot of `memory` (which has a descriptor), assigning a free one the first time
    /// it is seen.
    fn slot_of(&self, memory: &Memory) -> i32 {
        match self.slot_within(memory, i32::MAX) {
            Some((slot, _)) => slot,
            // Unreachable: a process cannot hold 2^31 memories.
            None => i32::MAX,
        }
    }

    /// The slot of `memory` (which has a descriptor), assigning it a free one below
    /// `limit` the first time it is seen (`None`: every slot below `limit` is taken);
    /// with whether it was assigned just now.
    pub(crate) fn slot_within(&self, memory: &Memory, limit: i32) -> Option<(i32, bool)> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = entries
            .iter()
            .position(|e| e.as_ref().is_some_and(|e| e.is(memory)))
        {
            return Some((i as i32, false));
        }
        let entry = SlotEntry {
            name: memory.name.clone(),
            size: memory.size,
            fds: memory.handle.fds.iter().map(Arc::downgrade).collect(),
            ints: memory.handle.ints.clone(),
        };
        let i = match entries.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                entries.push(None);
                entries.len() - 1
            }
        };
        if i >= usize::try_from(limit).unwrap_or(0) {
            // Only a trailing empty entry can have been added: take it back.
            if i + 1 == entries.len() && entries[i].is_none() {
                entries.pop();
            }
            return None;
        }
        entries[i] = Some(entry);
        Some((i as i32, true))
    }

    /// Forgets `slot` here only (its memory is then given a slot again when next seen).
    pub(crate) fn forget_slot(&self, slot: i32) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = usize::try_from(slot).ok().and_then(|i| entries.get_mut(i)) {
            *e = None;
        }
    }

    /// The slots of `pools` (memories with a descriptor) into `out`, under one lock,
    /// assigning free slots to memories seen the first time; `Ok(false)` when some slot's
    /// memory was dropped (nothing assigned: the caller reaps first).
    fn slots_into(
        &self,
        pools: &[RequestMemoryPool],
        out: &mut Vec<i32>,
    ) -> Result<bool, ErrorStatus> {
        out.clear();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries
            .iter()
            .any(|e| e.as_ref().is_some_and(SlotEntry::dead))
        {
            return Ok(false);
        }
        for p in pools {
            let RequestMemoryPool::HidlMemory(m) = p else {
                return Err(ErrorStatus::InvalidArgument);
            };
            if m.handle.fds.is_empty() {
                return Err(ErrorStatus::InvalidArgument);
            }
            let known = entries
                .iter()
                .position(|e| e.as_ref().is_some_and(|e| e.is(m)));
            let slot = match known {
                Some(i) => i as i32,
                None => {
                    drop(entries);
                    let slot = self.slot_of(m);
                    entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
                    slot
                }
            };
            out.push(slot);
        }
        Ok(true)
    }

    /// Slots whose memory the client has dropped: forgotten here, to free in the service.
    pub(crate) fn reap(&self) -> Vec<i32> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut dead = Vec::new();
        for (i, e) in entries.iter_mut().enumerate() {
            if e.as_ref().is_some_and(SlotEntry::dead) {
                *e = None;
                dead.push(i as i32);
            }
        }
        dead
    }
}

impl IBurstCallback for Slots {
    fn get_memories(&self, slots: &[i32]) -> (ErrorStatus, Vec<Memory>) {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let found: Option<Vec<Memory>> = slots
            .iter()
            .map(|&s| {
                usize::try_from(s)
                    .ok()
                    .and_then(|i| entries.get(i))
                    .and_then(|e| e.as_ref())
                    .and_then(SlotEntry::memory)
            })
            .collect();
        match found {
            Some(m) => (ErrorStatus::None, m),
            None => (ErrorStatus::InvalidArgument, Vec::new()),
        }
    }
}

/// A burst on one prepared model, used by one execution at a time.
pub struct BurstController {
    requests: Fmq,
    results: Fmq,
    slots: Arc<Slots>,
    context: Arc<dyn IBurstContext>,
    /// How long to spin for a result before sleeping.
    spin: Duration,
    /// The longest wait for one result.
    timeout: Duration,
    /// Held by the execution under way.
    busy: Mutex<Busy>,
}

/// What executions reuse, one at a time: the last request packet sent, the buffers
/// slots and result packets are read into, and the last result read.
#[derive(Default)]
struct Busy {
    sent: Option<Sent>,
    slots: Vec<i32>,
    reply: Vec<Element>,
    got: Option<Got>,
}

/// A result packet as read and what it says: a next packet equal to it but for the
/// timing (the last element) says the same status and shapes, which are not decoded
/// again.
struct Got {
    packet: Vec<Element>,
    status: ErrorStatus,
    shapes: Shapes,
}

impl Got {
    /// `packet`'s result, if it is this one's with only the timing changed.
    fn again(&self, packet: &[Element]) -> Option<(ErrorStatus, Shapes, Timing)> {
        let (last, head) = packet.split_last()?;
        if packet.len() != self.packet.len() || *head != self.packet[..head.len()] {
            return None;
        }
        match ResultDatum::decode(last)? {
            ResultDatum::ExecutionTiming(t) => Some((self.status, Arc::clone(&self.shapes), t)),
            _ => None,
        }
    }
}

/// A request packet as sent, and what it was made from: the same request again is sent
/// as is, without being encoded again.
struct Sent {
    inputs: Vec<RequestArgument>,
    outputs: Vec<RequestArgument>,
    slots: Vec<i32>,
    measure: MeasureTiming,
    packet: Vec<Element>,
}

impl Sent {
    fn serves(&self, request: &Request, slots: &[i32], measure: MeasureTiming) -> bool {
        self.measure == measure
            && self.slots.len() == slots.len()
            && self.slots.iter().zip(slots).all(|(a, b)| a == b)
            && same_arguments(&self.inputs, &request.inputs)
            && same_arguments(&self.outputs, &request.outputs)
    }
}

impl BurstController {
    /// Configures a burst on `model`, with queues of `CHANNEL_LENGTH` elements (the
    /// result queue `result_length`).
    pub fn new(
        model: &dyn IPreparedModel,
        result_length: u32,
        spin: Duration,
        timeout: Duration,
    ) -> Result<BurstController, ErrorStatus> {
        let queue = |n| {
            Fmq::create(n).map_err(|e| {
                tracing::warn!("burst queue: {e}");
                ErrorStatus::GeneralFailure
            })
        };
        let requests = queue(CHANNEL_LENGTH)?;
        let results = queue(result_length)?;
        let slots = Arc::new(Slots::default());
        let (status, context) =
            model.configure_execution_burst(slots.clone(), requests.fd(), results.fd());
        match (status, context) {
            (ErrorStatus::None, Some(context)) => Ok(BurstController {
                requests,
                results,
                slots,
                context,
                spin,
                timeout,
                busy: Mutex::new(Busy::default()),
            }),
            (ErrorStatus::None, None) => Err(ErrorStatus::GeneralFailure),
            (s, _) => Err(s),
        }
    }

    /// Runs `request` as a burst execution. Its pools must be memories (a driver-managed
    /// buffer's token has no slot: INVALID_ARGUMENT, so the caller can fall back to
    /// another path, as the runtime does). The shapes are shared with the controller's
    /// last result: a burst repeating a result allocates none.
    pub fn execute(
        &self,
        request: &Request,
        measure: MeasureTiming,
    ) -> (ErrorStatus, Shapes, Timing) {
        let fail = |s| (s, Shapes::from([]), Timing::NONE);
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        let Busy {
            sent: last,
            slots,
            reply,
            got,
        } = &mut *busy;
        if let Err(s) = self.slots_in(&request.pools, slots) {
            return fail(s);
        }
        // The pools travel as slots (the packet carries no pools).
        let sent = match last.take() {
            Some(l) if l.serves(request, slots, measure) => l,
            _ => Sent {
                packet: serialize_request(request, slots, measure),
                inputs: request.inputs.clone(),
                outputs: request.outputs.clone(),
                slots: slots.clone(),
                measure,
            },
        };
        let sent = last.insert(sent);
        if let Err(e) = self.requests.write(&sent.packet) {
            tracing::warn!("burst request: {e}");
            return fail(ErrorStatus::GeneralFailure);
        }
        self.result(reply, got)
    }

    /// [`BurstController::slots_of`] into `out` (its allocation reused).
    fn slots_in(&self, pools: &[RequestMemoryPool], out: &mut Vec<i32>) -> Result<(), ErrorStatus> {
        // Usually no memory was dropped and every one has its slot: one look-up.
        if self.slots.slots_into(pools, out)? {
            return Ok(());
        }
        *out = self.slots_of(pools)?;
        Ok(())
    }

    /// The slots of request pools (assigned on first sight); a pool that is not a memory
    /// with a descriptor has none (INVALID_ARGUMENT).
    pub fn slots_of(&self, pools: &[RequestMemoryPool]) -> Result<Vec<i32>, ErrorStatus> {
        // Slots of memories the client dropped are freed first (here and in the service),
        // so a slot is never reused while the service still caches its old memory.
        for dead in self.slots.reap() {
            self.context.free_memory(dead);
        }
        pools
            .iter()
            .map(|p| match p {
                RequestMemoryPool::HidlMemory(m) if !m.handle.fds.is_empty() => {
                    Ok(self.slots.slot_of(m))
                }
                _ => Err(ErrorStatus::InvalidArgument),
            })
            .collect()
    }

    /// Sends a raw request packet and returns the raw result packet (for validation
    /// tests and fuzzing).
    pub fn send_raw(&self, packet: &[Element]) -> Result<Vec<Element>, FmqError> {
        let _one = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        self.requests.write(packet)?;
        self.results
            .read_blocking(self.spin, Some(self.timeout), &|| false)
    }

    /// Waits for and reads one result packet (into `packet`; `got`: the last one read).
    fn result(
        &self,
        packet: &mut Vec<Element>,
        got: &mut Option<Got>,
    ) -> (ErrorStatus, Shapes, Timing) {
        let fail = |s| (s, Shapes::from([]), Timing::NONE);
        let read =
            self.results
                .read_blocking_into(self.spin, Some(self.timeout), &|| false, packet);
        if let Err(e) = read {
            tracing::warn!("burst result: {e}");
            return fail(ErrorStatus::GeneralFailure);
        }
        if let Some(again) = got.as_ref().and_then(|g| g.again(packet)) {
            return again;
        }
        match deserialize_result(packet) {
            Ok((status, shapes, timing)) => {
                let shapes = Shapes::from(shapes);
                let g = got.get_or_insert_with(|| Got {
                    packet: Vec::new(),
                    status,
                    shapes: Arc::clone(&shapes),
                });
                g.packet.clear();
                g.packet.extend_from_slice(packet);
                g.status = status;
                g.shapes = Arc::clone(&shapes);
                (status, shapes, timing)
            }
            Err(e) => {
                tracing::warn!("burst result: {e}");
                fail(ErrorStatus::GeneralFailure)
            }
        }
    }

    /// Stops using `memory`: its slot is freed here and in the service.
    pub fn forget(&self, memory: &Memory) {
        let mut entries = self.slots.entries.lock().unwrap_or_else(|p| p.into_inner());
        for (i, e) in entries.iter_mut().enumerate() {
            if e.as_ref().is_some_and(|e| e.is(memory)) {
                *e = None;
                self.context.free_memory(i as i32);
            }
        }
    }

    /// The service's side of the burst (to free slots directly in tests).
    pub fn context(&self) -> &Arc<dyn IBurstContext> {
        &self.context
    }
}
