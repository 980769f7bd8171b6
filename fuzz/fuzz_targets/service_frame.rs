//! The service's framing, as a hostile peer sends it: an arbitrary packet (tag, inline
//! body or a memfd body's declared length) with an optional memfd of arbitrary contents
//! and copies of a pipe's read end, received with `transport::recv`. No crash, no hang,
//! and no leak: every descriptor that arrived is closed once the frame is dropped (the
//! pipe's write end then gets EPIPE).
#![no_main]

use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd};

use libfuzzer_sys::fuzz_target;
use nix::sys::signal::{SigHandler, Signal};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
use vnpu_driver::service::transport::{self, MAX_MESSAGE};

fuzz_target!(
    init: {
        // libFuzzer's main starts this process, not Rust's: SIGPIPE still kills, and the
        // leak check's write to a pipe without readers must give EPIPE instead.
        // SAFETY: sets one signal's disposition once, before any fuzzing thread runs.
        unsafe { nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigIgn) }
            .expect("ignore SIGPIPE");
    },
    |data: &[u8]| {
        let Some((&shape, rest)) = data.split_first() else {
            return;
        };
        // The packet, then (after a split point) the memfd's contents.
        let cut = (shape as usize * 7) % (rest.len() + 1);
        let (packet, body) = rest.split_at(cut);
        let packet = &packet[..packet.len().min(MAX_MESSAGE)];
        let (a, b) = transport::pair().expect("socketpair");
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let memfd = nix::sys::memfd::memfd_create("fuzz", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .expect("memfd");
        nix::unistd::write(&memfd, body).expect("fill the memfd");
        let mut raw = vec![r.as_raw_fd(); usize::from(shape % 4)];
        if shape & 0x80 != 0 {
            raw.push(memfd.as_raw_fd());
        }
        let cmsgs = [ControlMessage::ScmRights(&raw)];
        let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &cmsgs };
        if sendmsg::<UnixAddr>(a.as_raw_fd(), &[IoSlice::new(packet)], cmsgs, MsgFlags::empty(), None)
            .is_err()
        {
            return;
        }
        drop(r);
        let _ = transport::recv(b.as_fd());
        assert_eq!(
            nix::unistd::write(&w, b"x"),
            Err(nix::errno::Errno::EPIPE),
            "a received descriptor leaked"
        );
    }
);
