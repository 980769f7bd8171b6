//! A fixed pool of worker threads over a bounded priority queue: the driver's preparation
//! worker and its asynchronous execution workers. Submitters feel back-pressure (they wait
//! for room, up to a bound); every job runs under an unwind guard, so a panic costs the
//! job, never the worker.

use std::collections::BinaryHeap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A job and what to do instead if it panics (notify its callback of the failure).
pub struct Job {
    /// The work.
    pub run: Box<dyn FnOnce() + Send>,
    /// Called when `run` panicked: the job's last word to its client.
    pub on_panic: Box<dyn FnOnce() + Send>,
}

struct Queued {
    priority: i32,
    seq: u64,
    job: Job,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        (self.priority, self.seq) == (o.priority, o.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    /// Higher priority first; FIFO within a priority.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.priority.cmp(&o.priority).then(o.seq.cmp(&self.seq))
    }
}

/// The queue was full for longer than the submitter may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the work queue stayed full")]
pub struct QueueFull;

/// Worker threads over one bounded queue. Dropping the pool lets the workers finish what
/// is queued and exit.
pub struct WorkerPool {
    inner: Arc<Inner>,
}

/// What the workers share with the pool's owner.
struct Inner {
    jobs: Mutex<BinaryHeap<Queued>>,
    /// The owner is gone: finish what is queued, then exit.
    closed: AtomicBool,
    /// Signalled when a job is queued.
    ready: Condvar,
    /// Signalled when a job is taken.
    room: Condvar,
    capacity: usize,
    seq: AtomicU64,
    panics: AtomicUsize,
}

impl WorkerPool {
    /// Starts `workers` threads named `name` over a queue of `capacity` jobs.
    pub fn start(name: &str, workers: usize, capacity: usize) -> std::io::Result<Arc<WorkerPool>> {
        let inner = Arc::new(Inner {
            jobs: Mutex::new(BinaryHeap::new()),
            closed: AtomicBool::new(false),
            ready: Condvar::new(),
            room: Condvar::new(),
            capacity: capacity.max(1),
            seq: AtomicU64::new(0),
            panics: AtomicUsize::new(0),
        });
        for _ in 0..workers.max(1) {
            let inner = Arc::clone(&inner);
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || worker(&inner))?;
        }
        Ok(Arc::new(WorkerPool { inner }))
    }

    /// Queues a job, waiting up to `wait` for room.
    pub fn submit(&self, priority: i32, job: Job, wait: Duration) -> Result<(), QueueFull> {
        let this = &self.inner;
        let deadline = Instant::now() + wait;
        let mut jobs = this.jobs.lock().unwrap_or_else(|p| p.into_inner());
        while jobs.len() >= this.capacity {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(QueueFull);
            }
            jobs = this
                .room
                .wait_timeout(jobs, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let seq = this.seq.fetch_add(1, Ordering::Relaxed);
        jobs.push(Queued { priority, seq, job });
        this.ready.notify_one();
        Ok(())
    }

    /// Jobs queued and not yet taken.
    pub fn queued(&self) -> usize {
        self.inner
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Jobs that panicked so far.
    pub fn panics(&self) -> usize {
        self.inner.panics.load(Ordering::Relaxed)
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        let _jobs = self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
        self.inner.closed.store(true, Ordering::Release);
        self.inner.ready.notify_all();
    }
}

fn worker(p: &Inner) {
    loop {
        let job = {
            let mut jobs = p.jobs.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(q) = jobs.pop() {
                    break q.job;
                }
                if p.closed.load(Ordering::Acquire) {
                    return;
                }
                jobs = p.ready.wait(jobs).unwrap_or_else(|e| e.into_inner());
            }
        };
        p.room.notify_one();
        if catch_unwind(AssertUnwindSafe(job.run)).is_err() {
            p.panics.fetch_add(1, Ordering::Relaxed);
            tracing::error!("a driver worker job panicked; its client gets GENERAL_FAILURE");
            // A panicking notifier is the client's own bug; the worker survives it too.
            let _ = catch_unwind(AssertUnwindSafe(job.on_panic));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    fn job(run: impl FnOnce() + Send + 'static, on_panic: impl FnOnce() + Send + 'static) -> Job {
        Job {
            run: Box::new(run),
            on_panic: Box::new(on_panic),
        }
    }

    /// Keeps the pool's one worker busy until the returned sender is dropped.
    fn occupy(pool: &WorkerPool) -> std::sync::mpsc::Sender<()> {
        let (block_tx, block_rx) = channel::<()>();
        let (started_tx, started_rx) = channel();
        let run = move || {
            started_tx.send(()).unwrap();
            let _ = block_rx.recv();
        };
        pool.submit(0, job(run, || {}), Duration::ZERO).unwrap();
        started_rx.recv().unwrap();
        block_tx
    }

    #[test]
    fn a_panicking_job_reports_and_the_worker_lives() {
        let pool = WorkerPool::start("t", 1, 4).unwrap();
        let (tx, rx) = channel();
        let tx2 = tx.clone();
        pool.submit(
            0,
            job(|| panic!("boom"), move || tx.send("failed").unwrap()),
            Duration::ZERO,
        )
        .unwrap();
        pool.submit(
            0,
            job(move || tx2.send("ran").unwrap(), || {}),
            Duration::from_secs(1),
        )
        .unwrap();
        let got: Vec<_> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(got, ["failed", "ran"]);
        assert_eq!(pool.panics(), 1);
    }

    #[test]
    fn a_full_queue_pushes_back_then_refuses() {
        let pool = WorkerPool::start("t", 1, 1).unwrap();
        let block_tx = occupy(&pool);
        pool.submit(0, job(|| {}, || {}), Duration::ZERO).unwrap();
        assert_eq!(
            pool.submit(0, job(|| {}, || {}), Duration::from_millis(20)),
            Err(QueueFull)
        );
        drop(block_tx);
        pool.submit(0, job(|| {}, || {}), Duration::from_secs(10))
            .unwrap();
    }

    #[test]
    fn higher_priority_runs_first() {
        let pool = WorkerPool::start("t", 1, 8).unwrap();
        let block_tx = occupy(&pool);
        let (tx, rx) = channel();
        for p in [0, 2, 1] {
            let tx = tx.clone();
            pool.submit(p, job(move || tx.send(p).unwrap(), || {}), Duration::ZERO)
                .unwrap();
        }
        drop(block_tx);
        let order: Vec<i32> = (0..3).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(order, [2, 1, 0]);
    }
}
