//! The device's submission-entry decoder on arbitrary 64-byte entries: every entry is a
//! command or a typed refusal, never a panic, and a command re-encodes to the same bytes.
//! Bytes after the entry are a JOB's copy list: checked against its arena, an accepted
//! list reaches only host memory and the arena.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vnpu_emu::engine::job::check_copies;
use vnpu_emu::ring::{Command, CopyDescriptor, SubmissionEntry, SG_ENTRY_SIZE};
use vnpu_emu::DRAM_BASE;

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<64>() else {
        return;
    };
    let entry = SubmissionEntry::decode(head);
    let Ok(cmd) = Command::decode(&entry) else {
        return;
    };
    let mut again = cmd.entry(entry.req_id);
    again.flags = entry.flags;
    assert_eq!(again.encode(), *head);
    if let Command::Job(job) = cmd {
        let copies: Vec<CopyDescriptor> = rest
            .chunks_exact(SG_ENTRY_SIZE as usize)
            .map(CopyDescriptor::decode)
            .collect();
        let inputs = (job.inputs as usize).min(copies.len());
        let arena = (job.arena, job.arena_len);
        if check_copies(&copies, inputs, arena, DRAM_BASE).is_ok() {
            for (i, c) in copies.iter().enumerate() {
                let (host, dev) = if i < inputs { (c.src, c.dst) } else { (c.dst, c.src) };
                assert!(host.checked_add(c.len).is_some_and(|e| e <= DRAM_BASE));
                assert!(dev >= job.arena && dev + c.len <= job.arena + job.arena_len);
            }
        }
    }
});
