//! What a prepared model takes from the device that made it: the hardware, the worker
//! pool for asynchronous executions, bounds, file I/O, the driver-managed buffers, how a
//! burst is served, and its place in the device's count of live models.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::domain::BufferRegistry;
use crate::fileio::CacheIo;
use crate::hw::Hardware;
use crate::interface::{BurstResult, IBurstCallback, IPreparedModel};
use crate::workers::WorkerPool;

/// Starts a burst's server for a prepared model (`crate::burst::server::start`, which
/// the device hands down: bursts sit above execution).
pub type StartBurst = fn(
    Arc<dyn IPreparedModel>,
    Arc<dyn IBurstCallback>,
    BorrowedFd<'_>,
    BorrowedFd<'_>,
    Duration,
) -> BurstResult;

/// What a prepared model needs from its device besides the hardware.
#[derive(Clone)]
pub struct ModelContext {
    /// The device.
    pub hw: Arc<Hardware>,
    /// Where asynchronous executions run.
    pub executions: Arc<WorkerPool>,
    /// How long an asynchronous submission waits for queue room.
    pub submit_wait: Duration,
    /// Compiled instances kept per prepared model.
    pub max_instances: usize,
    /// File I/O (io_uring or its fallback) for staging request pools.
    pub io: Arc<CacheIo>,
    /// The device's driver-managed buffers, by token.
    pub buffers: Arc<BufferRegistry>,
    /// How a burst is served, and how long its server spins before it sleeps.
    pub burst: (StartBurst, Duration),
}

/// Counts the prepared models alive on a device; each holds a [`ModelLease`].
#[derive(Debug)]
pub struct ModelCount {
    live: AtomicUsize,
    max: usize,
}

/// A prepared model's place in its device's count, given back when it is dropped.
#[derive(Debug)]
pub struct ModelLease(Arc<ModelCount>);

impl ModelCount {
    /// A count allowing `max` live models.
    pub fn new(max: usize) -> Arc<ModelCount> {
        Arc::new(ModelCount {
            live: AtomicUsize::new(0),
            max,
        })
    }

    /// A place for one more model, if the count is below its bound.
    pub fn lease(self: &Arc<Self>) -> Option<ModelLease> {
        let taken = self
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            });
        taken.is_ok().then(|| ModelLease(Arc::clone(self)))
    }

    /// Models alive.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.max
    }
}

impl Drop for ModelLease {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::AcqRel);
    }
}
