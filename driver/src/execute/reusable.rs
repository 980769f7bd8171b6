//! What AIDL V4 adds to execution, over the same core as every other entry: a reusable
//! execution (a request validated and its shared memory mapped once, then run many
//! times, its last run kept as a [`BurstMemo`] so a repeat only submits the device work)
//! and a burst whose memories the client names by tokens (each mapped once, kept until
//! released).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::burst::{BurstMemo, RunOptions};
use super::pools::PinnedPool;
use super::{fenced, VnpuPreparedModel};
use crate::hal::{
    ErrorStatus, MeasureTiming, NativeHandle, OptionalTimePoint, OptionalTimeoutDuration, Request,
    RequestMemoryPool, Timing,
};
use crate::interface::{ExecutionResult, FencedResult, IMemoryTokenBurst, IReusableExecution};
use crate::validate::validate_request;

/// The pins of `request`'s shared-memory pools (by pool index; `None` for a pool that
/// cannot be pinned, which each run then maps itself, and for driver-managed buffers,
/// which each run checks again).
fn pins_of(model: &VnpuPreparedModel, request: &Request) -> Vec<Option<Arc<PinnedPool>>> {
    request
        .pools
        .iter()
        .map(|p| match p {
            RequestMemoryPool::HidlMemory(m) => model.pin(m),
            RequestMemoryPool::Token(_) => None,
        })
        .collect()
}

/// A reusable execution (the core of AIDL V4's `IExecution`).
pub struct ReusableRun {
    model: Arc<VnpuPreparedModel>,
    request: Request,
    measure: MeasureTiming,
    loop_timeout: OptionalTimeoutDuration,
    pins: Vec<Option<Arc<PinnedPool>>>,
    /// Its last run; the lock also keeps executions one at a time, as the HAL says.
    memo: Mutex<Option<BurstMemo>>,
}

impl ReusableRun {
    /// Validates `request` for `model` (INVALID_ARGUMENT if it is not valid) and maps its
    /// shared memory.
    pub fn new(
        model: Arc<VnpuPreparedModel>,
        request: &Request,
        measure: MeasureTiming,
        loop_timeout: OptionalTimeoutDuration,
    ) -> Result<ReusableRun, ErrorStatus> {
        if let Err(e) = validate_request(request, model.model(), true) {
            tracing::debug!("reusable execution: {e}");
            return Err(ErrorStatus::InvalidArgument);
        }
        let pins = pins_of(&model, request);
        Ok(ReusableRun {
            pins,
            model,
            request: request.clone(),
            measure,
            loop_timeout,
            memo: Mutex::new(None),
        })
    }

    fn run(&self, deadline: OptionalTimePoint, fenced: bool, start: Instant) -> ExecutionResult {
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        let opts = RunOptions {
            measure: self.measure,
            deadline,
            loop_timeout: self.loop_timeout,
            fenced,
        };
        let (status, shapes, timing) =
            self.model
                .execute_reusing(&self.request, opts, start, &self.pins, &mut memo);
        (status, shapes.to_vec(), timing)
    }
}

impl IReusableExecution for ReusableRun {
    fn execute_synchronously(&self, deadline: OptionalTimePoint) -> ExecutionResult {
        self.run(deadline, false, Instant::now())
    }

    fn execute_fenced(
        &self,
        wait_for: &[NativeHandle],
        deadline: OptionalTimePoint,
        duration: OptionalTimeoutDuration,
    ) -> FencedResult {
        // Fenced executions refuse outputs of unspecified size, which a request valid
        // for synchronous executions may have.
        if let Err(e) = validate_request(&self.request, self.model.model(), false) {
            tracing::debug!("reusable fenced execution: {e}");
            return (ErrorStatus::InvalidArgument, None, None);
        }
        fenced(wait_for, deadline, duration, |deadline, at| {
            self.run(deadline, true, at)
        })
    }
}

/// A burst with client memory tokens (the core of AIDL's `IBurst`).
pub struct MemoryTokenBurst {
    model: Arc<VnpuPreparedModel>,
    /// The memories mapped so far, by the client's token.
    pins: Mutex<HashMap<i64, Arc<PinnedPool>>>,
    /// The burst's last execution; the lock keeps executions one at a time.
    memo: Mutex<Option<BurstMemo>>,
}

impl MemoryTokenBurst {
    /// A burst on `model`.
    pub fn new(model: Arc<VnpuPreparedModel>) -> MemoryTokenBurst {
        MemoryTokenBurst {
            model,
            pins: Mutex::default(),
            memo: Mutex::default(),
        }
    }

    /// Memories the burst keeps mapped.
    pub fn cached(&self) -> usize {
        self.pins.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The pins for `request`'s pools as `tokens` names them, pinning memories seen for
    /// the first time (or given again under a token that named another memory).
    fn pins_for(&self, request: &Request, tokens: &[i64]) -> Vec<Option<Arc<PinnedPool>>> {
        let mut cache = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        request
            .pools
            .iter()
            .zip(tokens)
            .map(|(p, &t)| {
                let RequestMemoryPool::HidlMemory(m) = p else {
                    return None;
                };
                if t < 0 {
                    return self.model.pin(m);
                }
                if let Some(pin) = cache.get(&t).filter(|pin| pin.open(m).is_some()) {
                    return Some(Arc::clone(pin));
                }
                let pin = self.model.pin(m)?;
                cache.insert(t, Arc::clone(&pin));
                Some(pin)
            })
            .collect()
    }
}

impl IMemoryTokenBurst for MemoryTokenBurst {
    fn execute_synchronously(
        &self,
        request: &Request,
        tokens: &[i64],
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
    ) -> ExecutionResult {
        let start = Instant::now();
        if tokens.len() != request.pools.len() || tokens.iter().any(|&t| t < -1) {
            tracing::debug!("burst: memory identifier tokens do not match the pools");
            return (ErrorStatus::InvalidArgument, Vec::new(), Timing::NONE);
        }
        let pins = self.pins_for(request, tokens);
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        let opts = RunOptions {
            measure,
            deadline,
            loop_timeout,
            fenced: false,
        };
        let (status, shapes, timing) = self
            .model
            .execute_reusing(request, opts, start, &pins, &mut memo);
        (status, shapes.to_vec(), timing)
    }

    fn release_memory_resource(&self, token: i64) -> ErrorStatus {
        if token < 0 {
            return ErrorStatus::InvalidArgument;
        }
        let released = self
            .pins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&token);
        // A memo over a released memory must not outlive it.
        if released.is_some() {
            *self.memo.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        ErrorStatus::None
    }
}
