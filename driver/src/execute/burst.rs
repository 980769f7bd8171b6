//! A burst's executions on the server's side: over pools the burst keeps pinned, and
//! its memo of the last execution, run again as is for the same request.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::commands::Work;
use super::instances::Instance;
use super::pools::PinnedPool;
use super::run::{measured, Via};
use super::{hw_status, VnpuPreparedModel};
use crate::hal::{
    ErrorStatus, MeasureTiming, OptionalTimePoint, OptionalTimeoutDuration, OutputShape, Request,
    RequestArgument, RequestMemoryPool, Timing,
};

/// Output shapes as bursts and reusable executions get them: shared with the memo, so
/// an execution the memo runs again copies none.
pub type Shapes = Arc<[OutputShape]>;

impl VnpuPreparedModel {
    /// executeSynchronously_1_3 with the request's pools already mapped where `pins` has
    /// them (by pool index): a burst's executions. `memo` is the burst's last execution:
    /// used if it serves this request, replaced by this one's otherwise.
    pub fn execute_pinned(
        &self,
        request: &Request,
        measure: MeasureTiming,
        pins: &[Option<Arc<PinnedPool>>],
        memo: &mut Option<BurstMemo>,
    ) -> (ErrorStatus, Shapes, Timing) {
        let opts = RunOptions {
            measure,
            ..RunOptions::default()
        };
        self.execute_reusing(request, opts, Instant::now(), pins, memo)
    }

    /// executeSynchronously_1_3 with the request's pools already mapped where `pins` has
    /// them (by pool index): the service's executions over memories its client
    /// registered. Exactly the synchronous execution otherwise (no memo).
    pub fn execute_synchronously_pinned(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
        pins: &[Option<Arc<PinnedPool>>],
    ) -> (ErrorStatus, Vec<OutputShape>, Timing) {
        let via = Via {
            pins,
            ..Via::default()
        };
        self.run(
            request,
            measure,
            deadline,
            loop_timeout,
            Instant::now(),
            via,
        )
    }

    /// One execution of `request` as `opts` says over the pools `pins` maps (by pool
    /// index), running `memo` again when it serves this request and replacing it
    /// otherwise: the shared core of bursts and reusable executions.
    pub fn execute_reusing(
        &self,
        request: &Request,
        opts: RunOptions,
        start: Instant,
        pins: &[Option<Arc<PinnedPool>>],
        memo: &mut Option<BurstMemo>,
    ) -> (ErrorStatus, Shapes, Timing) {
        if opts.deadline.has_passed() {
            return (
                ErrorStatus::MissedDeadlinePersistent,
                Shapes::from([]),
                Timing::NONE,
            );
        }
        if let Some(m) = memo
            .as_ref()
            .filter(|m| m.loop_timeout == opts.loop_timeout)
            .filter(|m| m.serves(request, pins, self.hw.epoch()))
        {
            return self.run_memo(m, opts, Some(start));
        }
        *memo = None;
        let (status, shapes, timing) = self.run(
            request,
            opts.measure,
            opts.deadline,
            opts.loop_timeout,
            start,
            Via {
                fenced: opts.fenced,
                pins,
                memo: Some(memo),
            },
        );
        (status, shapes.into(), timing)
    }
}

impl VnpuPreparedModel {
    /// A burst's execution of the very request packet its memo was made for or last
    /// served (see `burst::server`): the memo's work again, as [`Self::execute_pinned`]
    /// would run it for that request, without reading the packet again. `None` when the
    /// memo cannot serve (none, or made in an earlier device epoch): the caller takes
    /// the full path.
    pub fn execute_memo(
        &self,
        measure: MeasureTiming,
        memo: &Option<BurstMemo>,
    ) -> Option<(ErrorStatus, Shapes, Timing)> {
        let opts = RunOptions {
            measure,
            ..RunOptions::default()
        };
        let m = memo
            .as_ref()
            .filter(|m| m.loop_timeout == opts.loop_timeout && m.epoch == self.hw.epoch())?;
        // The clock is read only for a measured execution.
        let start = (measure == MeasureTiming::YES).then(Instant::now);
        Some(self.run_memo(m, opts, start))
    }

    /// Runs memo `m`'s work again, as `opts` says (`start`: when the execution began,
    /// for a measured one).
    fn run_memo(
        &self,
        m: &BurstMemo,
        opts: RunOptions,
        start: Option<Instant>,
    ) -> (ErrorStatus, Shapes, Timing) {
        let _arena = m.instance.lock().unwrap_or_else(|p| p.into_inner());
        let ran = match &m.work {
            Work::Job(job) => self.hw.run_job(job, m.epoch),
            Work::Commands(cmds) => self
                .hw
                .run(cmds.clone(), m.program_ns, Some(m.epoch))
                .map(|done| done.iter().map(|c| c.device_ns).sum()),
        };
        if ran.is_ok() && opts.deadline.has_passed() {
            return (
                ErrorStatus::MissedDeadlineTransient,
                Shapes::from([]),
                Timing::NONE,
            );
        }
        match ran {
            Ok(device_ns) => {
                let timing = match opts.measure == MeasureTiming::YES {
                    true => measured(start.unwrap_or_else(Instant::now), device_ns / 1000),
                    false => Timing::NONE,
                };
                (ErrorStatus::None, Arc::clone(&m.shapes), timing)
            }
            Err(e) => (hw_status(&e), Shapes::from([]), Timing::NONE),
        }
    }
}

/// How one execution of a burst or a reusable execution runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Whether timing is measured.
    pub measure: MeasureTiming,
    /// When it must be done by.
    pub deadline: OptionalTimePoint,
    /// How long a WHILE loop may run.
    pub loop_timeout: OptionalTimeoutDuration,
    /// A fenced execution (outputs of unspecified size refused).
    pub fenced: bool,
}

/// A burst's last execution, ready to run again: what validating the request, choosing
/// the instance and building the commands gave. It serves a next request with the very
/// same arguments over the very same pinned memories in the same device epoch (all of
/// which that work depends on), so a burst repeating its request only submits the
/// device work. Made only for requests whose pools are all pinned, whose outputs are
/// statically shaped and which give no deferred input values.
pub struct BurstMemo {
    pub(super) inputs: Vec<RequestArgument>,
    pub(super) outputs: Vec<RequestArgument>,
    /// The pins the commands' addresses are in (held: the mappings stay).
    pub(super) pins: Vec<Arc<PinnedPool>>,
    pub(super) instance: Arc<Mutex<Instance>>,
    pub(super) work: Work,
    pub(super) program_ns: u64,
    pub(super) epoch: u64,
    pub(super) shapes: Shapes,
    /// The loop timeout its commands were built with.
    pub(super) loop_timeout: OptionalTimeoutDuration,
}

impl BurstMemo {
    /// Whether this is the execution of `request` over `pins` in device epoch `epoch`.
    fn serves(&self, request: &Request, pins: &[Option<Arc<PinnedPool>>], epoch: u64) -> bool {
        self.epoch == epoch
            && same_arguments(&self.inputs, &request.inputs)
            && same_arguments(&self.outputs, &request.outputs)
            && request.pools.len() == self.pins.len()
            && request.pools.iter().zip(&self.pins).enumerate().all(|(k, (p, mine))| {
                matches!(p, RequestMemoryPool::HidlMemory(m)
                    if pins.get(k).and_then(Option::as_ref).is_some_and(|pin| Arc::ptr_eq(pin, mine))
                        && mine.open(m).is_some())
            })
    }
}

/// `a == b`, compared field by field: the dimension lists are a few words each, which a
/// loop compares in less than a `memcmp` call costs.
pub(crate) fn same_arguments(a: &[RequestArgument], b: &[RequestArgument]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.has_no_value == y.has_no_value
                && x.location == y.location
                && x.dimensions.len() == y.dimensions.len()
                && x.dimensions.iter().zip(&y.dimensions).all(|(p, q)| p == q)
        })
}
