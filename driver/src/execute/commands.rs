//! The device work of one execution: one JOB (copy in, run, copy out) when the request's
//! memory is host memory and the program needs neither a loop timeout nor a shape report,
//! else the command list: input copies, a fence, the program, a fence, output copies.

use super::instances::Instance;
use crate::hw::{Command, CopyDescriptor, Job};

/// What an execution submits.
#[derive(Clone)]
pub(super) enum Work {
    Job(Job),
    Commands(Vec<Command>),
}

/// Copies of `(source, destination, length)`; `None` if an address is unknown.
pub(super) fn copies(
    moves: impl Iterator<Item = (Option<u64>, Option<u64>, u64)>,
) -> Option<Vec<CopyDescriptor>> {
    moves
        .map(|(src, dst, len)| {
            Some(CopyDescriptor {
                src: src?,
                dst: dst?,
                len,
            })
        })
        .collect()
}

/// DMA copy commands for `copies`.
pub(super) fn dmas(copies: &[CopyDescriptor]) -> impl Iterator<Item = Command> + '_ {
    copies.iter().map(|c| Command::DmaCopy {
        src: c.src,
        dst: c.dst,
        len: c.len,
    })
}

/// Whether every copy's device side lies in the instance's arena, as a job's must (an
/// output folded into a constant does not).
pub(super) fn in_arena(
    inst: &Instance,
    inputs: &[CopyDescriptor],
    outputs: &[CopyDescriptor],
) -> bool {
    let (arena, len) = (inst.arena.addr, inst.arena.len);
    let inside = |a: u64, n: u64| a >= arena && a.saturating_add(n) <= arena + len;
    inputs.iter().all(|c| inside(c.dst, c.len)) && outputs.iter().all(|c| inside(c.src, c.len))
}

/// The instance's job: `inputs` into its arena, its program, `outputs` back.
pub(super) fn job(
    inst: &Instance,
    inputs: Vec<CopyDescriptor>,
    outputs: Vec<CopyDescriptor>,
    program_ns: u64,
) -> Job {
    Job::new(
        (inst.program.addr, inst.program_len),
        (inst.arena.addr, inst.arena.len),
        inputs,
        outputs,
        program_ns,
    )
}

/// A fence after the input copies, the instance's program (with its loop timeout and
/// report address, 0 for none), and a fence before the output copies.
pub(super) fn run_program(
    cmds: &mut Vec<Command>,
    inst: &Instance,
    loop_timeout_ns: u64,
    report: u64,
) {
    cmds.push(Command::Fence);
    cmds.push(Command::RunProgram {
        addr: inst.program.addr,
        len: inst.program_len,
        loop_timeout_ns,
        report,
    });
    cmds.push(Command::Fence);
}
