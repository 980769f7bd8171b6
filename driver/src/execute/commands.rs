//! The device command list of one execution: input copies, a fence, the program, a
//! fence, output copies.

use super::instances::Instance;
use crate::hw::Command;

/// A DMA copy command.
pub(super) fn dma(src: u64, dst: u64, len: u64) -> Command {
    Command::DmaCopy { src, dst, len }
}

/// Copies of `(source, destination, length)`; `None` if an address is unknown.
pub(super) fn copies(
    moves: impl Iterator<Item = (Option<u64>, Option<u64>, u64)>,
) -> Option<Vec<Command>> {
    moves
        .map(|(src, dst, len)| Some(dma(src?, dst?, len)))
        .collect()
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
