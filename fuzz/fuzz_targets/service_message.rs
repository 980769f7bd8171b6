//! The service's message decoder: hostile bytes and a list of descriptors, as a client's
//! message arrives, through decoding and the pairing of descriptors with memories. No
//! crash, and no leak: every descriptor is closed once the message is dropped.
#![no_main]

use std::os::fd::OwnedFd;

use libfuzzer_sys::fuzz_target;
use vnpu_driver::service::protocol::{take_memories, take_pools, Call, Request};
use vnpu_driver::service::transport::decode;

fuzz_target!(|data: &[u8]| {
    let Some((&n, body)) = data.split_first() else {
        return;
    };
    let (r, w) = nix::unistd::pipe().expect("pipe");
    // The fake descriptor list: copies of the pipe's read end.
    let fds: Vec<OwnedFd> = (0..n % 8).map(|_| r.try_clone().expect("dup")).collect();
    drop(r);
    if let Ok(req) = decode::<Request>(body) {
        match req.call {
            Call::GetSupportedOperations { pools, .. } | Call::PrepareModel { pools, .. } => {
                let _ = take_memories(pools, fds);
            }
            Call::ExecuteSynchronously { pools, .. } => {
                let _ = take_pools(pools, fds);
            }
            _ => drop(fds),
        }
    } else {
        drop(fds);
    }
    // Every read end is closed: writing must fail with EPIPE.
    assert_eq!(
        nix::unistd::write(&w, b"x"),
        Err(nix::errno::Errno::EPIPE),
        "a descriptor leaked"
    );
});
