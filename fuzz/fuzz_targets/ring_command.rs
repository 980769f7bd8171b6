//! The device's submission-entry decoder on arbitrary 64-byte entries: every entry is a
//! command or a typed refusal, never a panic, and a command re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vnpu_emu::ring::{Command, SubmissionEntry};

fuzz_target!(|data: &[u8]| {
    let Ok(bytes) = <[u8; 64]>::try_from(data) else {
        return;
    };
    let entry = SubmissionEntry::decode(&bytes);
    if let Ok(cmd) = Command::decode(&entry) {
        let mut again = cmd.entry(entry.req_id);
        again.flags = entry.flags;
        assert_eq!(again.encode(), bytes);
    }
});
