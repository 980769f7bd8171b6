//! Parsing a verified model cache on a helper thread while the loading thread reads the
//! data cache. Parsing builds the model, the constant list and the compiled program out
//! of a few hundred small allocations (~40 µs for MobileNet's 30 KB, as long as two thirds
//! of the read of its 860 KB of weights); on its own thread it costs the load only the
//! hand-off. One helper per cache, one job at a time: a load that finds it busy parses
//! on its own thread, as does one whose helper could not be started.

use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, TryLockError};

use super::format::{decode_body, Image, HEADER_LEN};
use super::mac::MAC_LEN;
use super::CacheError;

/// A model cache file whose MAC verified: its bytes and the data cache length its header
/// gives.
struct Job {
    file: Vec<u8>,
    data_len: u64,
    reply: mpsc::SyncSender<Result<Image, CacheError>>,
}

/// The helper thread, started on first use.
#[derive(Debug, Default)]
pub struct Parser {
    /// The helper's queue; held by the load whose job it runs.
    worker: Mutex<Option<mpsc::Sender<Job>>>,
}

/// A parse under way ([`Parser::start`]).
pub struct Parsing<'a>(State<'a>);

enum State<'a> {
    /// On the helper, which answers on the receiver; the guard keeps other loads off it.
    Away(
        MutexGuard<'a, Option<mpsc::Sender<Job>>>,
        mpsc::Receiver<Result<Image, CacheError>>,
    ),
    /// To be done by the caller's thread at [`Parsing::wait`].
    Here(Vec<u8>, u64),
}

/// Parses the body of a verified model cache file (header, body, MAC).
fn parse(file: &[u8], data_len: u64) -> Result<Image, CacheError> {
    let end = file.len().saturating_sub(MAC_LEN);
    let body = file
        .get(HEADER_LEN..end)
        .ok_or(CacheError::Malformed("file length"))?;
    decode_body(body, data_len)
}

/// The helper's loop: parse each job and answer it, until the cache goes away. A panic
/// in the parser (never expected: it refuses bad input with errors) answers that job with
/// an error and leaves the helper running.
fn serve(jobs: mpsc::Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        let Job {
            file,
            data_len,
            reply,
        } = job;
        let parsed = std::panic::catch_unwind(|| parse(&file, data_len))
            .unwrap_or(Err(CacheError::Malformed("parser failed")));
        // The loader may have given up (its own error); nothing to do then.
        let _ = reply.send(parsed);
        // The file is freed here, off the loading thread.
        drop(file);
    }
}

impl Parser {
    /// Starts parsing `file` (whose MAC the caller verified) on the helper, or leaves it
    /// to [`Parsing::wait`] when the helper is busy or cannot be had.
    pub fn start(&self, file: Vec<u8>, data_len: u64) -> Parsing<'_> {
        let mut guard = match self.worker.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Parsing(State::Here(file, data_len)),
        };
        if guard.is_none() {
            let (tx, rx) = mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("vnpu-cache-parse".into())
                .spawn(move || serve(rx));
            match spawned {
                Ok(_) => *guard = Some(tx),
                Err(e) => {
                    tracing::debug!("no cache parser thread ({e}); parsing inline");
                    return Parsing(State::Here(file, data_len));
                }
            }
        }
        let Some(tx) = guard.as_ref() else {
            return Parsing(State::Here(file, data_len));
        };
        let (reply, answer) = mpsc::sync_channel(1);
        match tx.send(Job {
            file,
            data_len,
            reply,
        }) {
            Ok(()) => Parsing(State::Away(guard, answer)),
            Err(mpsc::SendError(job)) => {
                // The helper is gone: start another next time, parse this one here.
                *guard = None;
                Parsing(State::Here(job.file, job.data_len))
            }
        }
    }
}

impl Parsing<'_> {
    /// The parsed image.
    pub fn wait(self) -> Result<Image, CacheError> {
        match self.0 {
            State::Away(mut guard, answer) => match answer.recv() {
                Ok(parsed) => parsed,
                Err(_) => {
                    // The helper died without answering: forget it.
                    *guard = None;
                    Err(CacheError::Malformed("parser failed"))
                }
            },
            State::Here(file, data_len) => parse(&file, data_len),
        }
    }
}
