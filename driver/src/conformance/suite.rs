//! Runs whole corpus files: every case on a pool of worker threads against one device, the
//! records given back in corpus order whatever the number of workers.
//!
//! One thread at a time reads (and decompresses) the next raw line; parsing the case and
//! running it happen on the worker that took it, so workers overlap parsing, compilation and
//! the waits on the device.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Mutex, PoisonError};

use super::corpus::{open_lines, parse_line, CorpusError, CorpusLines};
use super::report::CaseRecord;
use super::{prepare_plain, run_case_opts, ExecOptions};
use crate::device::IDevice;

/// Stack of a worker thread (as much as a main thread has: models are parsed and compiled
/// there).
const WORKER_STACK: usize = 8 << 20;

/// What to run and how.
#[derive(Clone, Debug)]
pub struct SuiteOptions {
    /// Only cases whose name contains this (unreadable lines are reported regardless).
    pub filter: Option<String>,
    /// Worker threads.
    pub jobs: NonZeroUsize,
    /// The execution path and where inputs and outputs live.
    pub exec: ExecOptions,
}

impl Default for SuiteOptions {
    /// No filter; as many workers as the machine has cores.
    fn default() -> Self {
        SuiteOptions {
            filter: None,
            exec: ExecOptions::default(),
            jobs: std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN),
        }
    }
}

/// One unit of work: a raw corpus line, or a file that could not be opened.
enum Work {
    Line {
        file: usize,
        line: usize,
        text: Result<String, CorpusError>,
    },
    Unopenable {
        file: usize,
        error: CorpusError,
    },
}

/// Hands out the lines of the files in order, each with its sequence number.
struct Source<'a> {
    files: &'a [PathBuf],
    next_file: usize,
    current: Option<(usize, CorpusLines)>,
    seq: usize,
}

impl Source<'_> {
    fn next(&mut self) -> Option<(usize, Work)> {
        loop {
            if let Some((file, lines)) = &mut self.current {
                if let Some((line, text)) = lines.next() {
                    let file = *file;
                    return Some((self.take_seq(), Work::Line { file, line, text }));
                }
                self.current = None;
            }
            let file = self.next_file;
            let path = self.files.get(file)?;
            self.next_file += 1;
            match open_lines(path) {
                Ok(lines) => self.current = Some((file, lines)),
                Err(error) => return Some((self.take_seq(), Work::Unopenable { file, error })),
            }
        }
    }

    fn take_seq(&mut self) -> usize {
        self.seq += 1;
        self.seq
    }
}

/// Runs one unit; `None` for a case the filter leaves out.
fn process(
    device: &dyn IDevice,
    files: &[PathBuf],
    filter: Option<&str>,
    exec: ExecOptions,
    work: Work,
) -> Option<CaseRecord> {
    let display = |file: usize| {
        files
            .get(file)
            .map_or_else(String::new, |p| p.display().to_string())
    };
    match work {
        Work::Unopenable { file, error } => {
            Some(CaseRecord::failure(display(file), error.to_string()))
        }
        Work::Line { file, line, text } => {
            let parsed = text.and_then(|t| match files.get(file) {
                Some(path) => parse_line(path, line, &t),
                None => Err(CorpusError::Invalid(format!("no file {file}"))),
            });
            match parsed {
                Err(e) => Some(CaseRecord::failure(
                    format!("{}:{line}", display(file)),
                    format!("unreadable case: {e}"),
                )),
                Ok(case) if filter.is_some_and(|f| !case.name.contains(f)) => None,
                Ok(case) => Some(CaseRecord::from(&run_case_opts(
                    device,
                    &case,
                    &prepare_plain,
                    exec,
                ))),
            }
        }
    }
}

/// Runs every case of `files` (in order) through `device` on `options.jobs` worker threads.
/// `progress` is called in the calling thread once per corpus line done (filtered out or
/// not), in no particular order of lines. The records come back in corpus order: one per
/// case run, per unreadable line and per file that could not be opened.
pub fn run_suite(
    device: &dyn IDevice,
    files: &[PathBuf],
    options: &SuiteOptions,
    progress: &mut dyn FnMut(),
) -> Vec<CaseRecord> {
    run_suite_until(device, files, options, progress, &|| None).unwrap_or_default()
}

/// [`run_suite`], stopping as soon as `lost` says the device is gone (e.g. a service that
/// died or stopped answering): no case is taken after that, and the run gives `Err` with
/// `lost`'s reason instead of a failure per remaining case.
pub fn run_suite_until(
    device: &dyn IDevice,
    files: &[PathBuf],
    options: &SuiteOptions,
    progress: &mut dyn FnMut(),
    lost: &(dyn Fn() -> Option<String> + Sync),
) -> Result<Vec<CaseRecord>, String> {
    let stopped: Mutex<Option<String>> = Mutex::new(None);
    let source = Mutex::new(Source {
        files,
        next_file: 0,
        current: None,
        seq: 0,
    });
    let filter = options.filter.as_deref();
    let worker = |tx: mpsc::Sender<(usize, Option<CaseRecord>)>| loop {
        let next = {
            let mut source = source.lock().unwrap_or_else(PoisonError::into_inner);
            // Checked under the source's lock: once one worker saw the device gone, no
            // other takes a case.
            let mut stop = stopped.lock().unwrap_or_else(PoisonError::into_inner);
            if stop.is_none() {
                *stop = lost();
            }
            if stop.is_some() {
                break;
            }
            drop(stop);
            source.next()
        };
        let Some((seq, work)) = next else { break };
        let record = process(device, files, filter, options.exec, work);
        // A case that failed because the device went away is not the case's failure.
        if let Some(why) = lost() {
            stopped
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(why);
            break;
        }
        if tx.send((seq, record)).is_err() {
            break;
        }
    };
    let worker = &worker;
    let mut done: Vec<(usize, CaseRecord)> = Vec::new();
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        let mut spawned = 0;
        for k in 0..options.jobs.get() {
            let tx = tx.clone();
            let builder = std::thread::Builder::new()
                .name(format!("vnpu-conf-{k}"))
                .stack_size(WORKER_STACK);
            match builder.spawn_scoped(s, move || worker(tx)) {
                Ok(_) => spawned += 1,
                Err(e) => {
                    tracing::warn!("conformance: cannot start worker {k}: {e}");
                    break;
                }
            }
        }
        if spawned == 0 {
            // No thread could be had: run everything here.
            worker(tx);
        } else {
            drop(tx);
        }
        for (seq, record) in rx {
            progress();
            if let Some(r) = record {
                done.push((seq, r));
            }
        }
    });
    if let Some(why) = stopped.into_inner().unwrap_or_else(PoisonError::into_inner) {
        return Err(why);
    }
    done.sort_by_key(|&(seq, _)| seq);
    Ok(done.into_iter().map(|(_, r)| r).collect())
}
