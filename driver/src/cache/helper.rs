//! A helper thread per cache: a load hands it the read of the data cache and parses the
//! (MAC-verified) model cache meanwhile. Parsing builds the model, the constants and the
//! compiled program from a few hundred small allocations (~40 µs for MobileNet, two
//! thirds of the time its 860 KB of weights take to read); overlapped, the load costs
//! about the read alone. The parse stays on the loading thread and the helper only
//! reads: parsing on the helper measured twice as slow (its allocations came from
//! another malloc arena than the thread that frees them when the model is released).
//!
//! One job at a time; a load that finds the helper busy, or cannot start it, runs its
//! job on its own thread.

use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, TryLockError};

type Job = Box<dyn FnOnce() + Send>;
type Queue = Option<mpsc::Sender<Job>>;

/// The helper thread, started on first use.
#[derive(Debug, Default)]
pub struct Helper {
    /// Its queue; held by the load whose job it runs.
    queue: Mutex<Queue>,
}

/// A job handed to [`Helper::run`]. Dropping it waits for the job to finish, so what
/// the job borrows through raw pointers outlives it on every path.
pub struct Running<'a, T> {
    /// Keeps other loads off the helper while it runs this job (`None`: run here).
    _busy: Option<MutexGuard<'a, Queue>>,
    answer: Option<mpsc::Receiver<T>>,
}

/// The helper's loop: run each job until the cache goes away. A job that panics (never
/// expected) drops its answer, which its [`Running::wait`] reports, and the helper goes
/// on.
fn serve(jobs: mpsc::Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

impl Helper {
    /// Runs `job` on the helper, or on this thread (now) when the helper is busy or
    /// cannot be had.
    pub fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Running<'_, T> {
        let (tx, answer) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            // The load may have stopped waiting (it failed); nothing to do then.
            let _ = tx.send(job());
        });
        let mut guard = match self.queue.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return here(job, answer),
        };
        if guard.is_none() {
            let (queue, jobs) = mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("vnpu-cache-io".into())
                .spawn(move || serve(jobs));
            match spawned {
                Ok(_) => *guard = Some(queue),
                Err(e) => {
                    tracing::debug!("no cache helper thread ({e}); loading on one thread");
                    return here(job, answer);
                }
            }
        }
        let sent = match guard.as_ref() {
            Some(queue) => queue.send(job),
            None => Err(mpsc::SendError(job)),
        };
        match sent {
            Ok(()) => Running {
                _busy: Some(guard),
                answer: Some(answer),
            },
            Err(mpsc::SendError(job)) => {
                // The helper is gone: start another next time, run this job here.
                *guard = None;
                drop(guard);
                here(job, answer)
            }
        }
    }
}

/// Runs `job` on this thread, now.
fn here<'a, T>(job: Job, answer: mpsc::Receiver<T>) -> Running<'a, T> {
    job();
    Running {
        _busy: None,
        answer: Some(answer),
    }
}

impl<T> Running<'_, T> {
    /// The job's result once it has finished; `None` if it panicked.
    pub fn wait(mut self) -> Option<T> {
        self.answer.take().and_then(|a| a.recv().ok())
    }
}

impl<T> Drop for Running<'_, T> {
    fn drop(&mut self) {
        if let Some(a) = self.answer.take() {
            // Returns once the job has finished (answered or dropped its sender).
            let _ = a.recv();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_jobs_on_the_helper_and_here_when_busy() {
        let h = Helper::default();
        let main = std::thread::current().id();
        let first = h.run(move || std::thread::current().id() != main);
        // The helper is held by `first`: this one runs on the calling thread.
        let second = h.run(move || std::thread::current().id() == main);
        assert_eq!(second.wait(), Some(true));
        assert_eq!(first.wait(), Some(true));
        // A panicking job is reported, and the helper keeps serving.
        let failed = h.run(|| -> u32 { panic!("job failed") });
        assert_eq!(failed.wait(), None);
        assert_eq!(h.run(|| 7).wait(), Some(7));
    }
}
