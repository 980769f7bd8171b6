//! The service's message decoder: hostile bytes and a list of descriptors, as a client's
//! message arrives, through decoding and the pairing of descriptors with the handles the
//! call names. No crash, and no leak: every descriptor is closed once the message is
//! dropped.
#![no_main]

use std::os::fd::OwnedFd;

use libfuzzer_sys::fuzz_target;
use nix::sys::signal::{SigHandler, Signal};
use vnpu_driver::service::protocol::{Call, Incoming, Request};
use vnpu_driver::service::transport::decode;

fuzz_target!(
    init: {
        // libFuzzer's main starts this process, not Rust's: SIGPIPE still kills, and the
        // leak check's write to a pipe without readers must give EPIPE instead.
        // SAFETY: sets one signal's disposition once, before any fuzzing thread runs.
        unsafe { nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigIgn) }
            .expect("ignore SIGPIPE");
    },
    |data: &[u8]| {
        let Some((&n, body)) = data.split_first() else {
            return;
        };
        // Close-on-exec: a program this process might start cannot keep the read end.
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        // The fake descriptor list: copies of the pipe's read end.
        let fds: Vec<OwnedFd> = (0..n % 8).map(|_| r.try_clone().expect("dup")).collect();
        drop(r);
        if let Ok(req) = decode::<Request>(body) {
            if let Ok(mut incoming) = Incoming::exact(req.call.fd_count(), fds) {
                // Hand every descriptor to the handle the body gives it, as the server does.
                match req.call {
                    Call::GetSupportedOperations { pools, .. } => drop(incoming.memories(pools)),
                    Call::PrepareModel { pools, cache, .. } => {
                        drop(incoming.memories(pools));
                        drop(incoming.handles(cache.model_cache));
                        drop(incoming.handles(cache.data_cache));
                    }
                    Call::PrepareModelFromCache { cache, .. } => {
                        drop(incoming.handles(cache.model_cache));
                        drop(incoming.handles(cache.data_cache));
                    }
                    Call::CopyTo { dst: m, .. } | Call::CopyFrom { src: m, .. } => {
                        drop(incoming.memory(m))
                    }
                    Call::Execute(e) | Call::ExecuteSynchronously(e) => drop(incoming.pools(e.pools)),
                    Call::ExecuteFenced { exec, wait_for, .. } => {
                        drop(incoming.pools(exec.pools));
                        drop(incoming.handles(wait_for));
                    }
                    Call::ConfigureBurst {
                        request_channel,
                        result_channel,
                        ..
                    } => {
                        drop(incoming.handle(request_channel));
                        drop(incoming.handle(result_channel));
                    }
                    Call::BurstMemories { memories, .. } => drop(incoming.memories(memories)),
                    Call::CreateReusableExecution(e) | Call::ExecuteTokenBurst { exec: e, .. } => {
                        drop(incoming.pools(e.pools))
                    }
                    Call::ExecuteReusableFenced { wait_for, .. } => {
                        drop(incoming.handles(wait_for))
                    }
                    _ => {}
                }
            }
        } else {
            drop(fds);
        }
        // Every read end is closed: writing must fail with EPIPE. Another process that
        // reads this one's /proc/PID/fd holds a file for a moment while it does, so a
        // leak is a reader still there after a few tries, not at the first.
        let mut wrote = nix::unistd::write(&w, b"x");
        for _ in 0..5 {
            if wrote == Err(nix::errno::Errno::EPIPE) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            wrote = nix::unistd::write(&w, b"x");
        }
        if wrote != Err(nix::errno::Errno::EPIPE) {
            panic!("a descriptor leaked: write gave {wrote:?}; {}", open_files());
        }
    }
);

/// What this process holds open and how many threads it runs: where to look when a
/// descriptor outlives its message.
fn open_files() -> String {
    let open: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let to = std::fs::read_link(e.path()).ok()?;
            Some(format!(
                "{} -> {}",
                e.file_name().to_string_lossy(),
                to.display()
            ))
        })
        .collect();
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count());
    format!("open: {open:?}; {threads} threads")
}
