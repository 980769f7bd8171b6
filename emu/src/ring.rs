//! Queue entry formats. Submission entries are 64 bytes, completion entries 32 bytes,
//! all little-endian, in host memory the device reaches through the IOMMU.
//!
//! Submission entry:
//! ```text
//!  0 u16 opcode    2 u16 flags (bit 0: interrupt on completion)   4 u32 req_id
//!  8 u64 a         16 u64 b        24 u64 c        32 u64 d
//! 40 u64 e         48 u64 f        56 u64 reserved (must be zero)
//! ```
//! DMA_COPY: a = src, b = dst, c = len. DMA_SG: a = address of `d` descriptors of
//! 24 bytes {src u64, dst u64, len u64} (in DRAM or host memory). RUN_PROGRAM: a =
//! program address in DRAM, c = length. FENCE: waits for all earlier commands.
//! TIMESTAMP: writes the device clock (u64 ns) to `b`. NOP: completes at once.
//! RUN_PROGRAM also takes d = loop timeout in ns (0: the program has no loops) and
//! e = where to report dynamic shapes (0: nowhere). JOB: a = program address in DRAM,
//! b = address (IOVA) of its copy list, c = program length, d = arena address in DRAM,
//! e = arena length, f = inputs (low 32 bits) | outputs (high 32 bits): the list holds
//! `inputs` then `outputs` descriptors in DMA_SG's format, copies into the arena from host
//! memory then copies out of it to host memory; the device copies in, runs the program
//! (without loops or a shape report), copies out and completes once. Every argument a
//! command does not use must be zero. [`Command`] is the typed form; its encode and decode
//! are the only place that knows which argument is which.
//!
//! Completion entry:
//! ```text
//!  0 u32 req_id    4 u16 status    6 u16 flags (bit 0: phase)    8 u32 sq_head
//! 12 u32 detail (e.g. failing op index)   16 u64 device_ns (timing model)
//! 24 u64 fault_addr
//! ```
//! The phase bit starts at 1 and flips each time the device wraps the completion ring,
//! so the host finds new entries without reading a register.

pub const SQ_ENTRY_SIZE: u64 = 64;
pub const CQ_ENTRY_SIZE: u64 = 32;
pub const SG_ENTRY_SIZE: u64 = 24;
/// Cap on scatter-gather list length, so one command's work is bounded.
pub const MAX_SG_ENTRIES: u64 = 4096;
/// Cap on a JOB's copies (inputs and outputs together).
pub const MAX_JOB_COPIES: u64 = MAX_SG_ENTRIES;

/// One copy of a scatter-gather or job list: 24 bytes {src u64, dst u64, len u64}.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyDescriptor {
    pub src: u64,
    pub dst: u64,
    pub len: u64,
}

impl CopyDescriptor {
    pub fn encode(&self) -> [u8; SG_ENTRY_SIZE as usize] {
        let mut b = [0u8; SG_ENTRY_SIZE as usize];
        b[0..8].copy_from_slice(&self.src.to_le_bytes());
        b[8..16].copy_from_slice(&self.dst.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// The descriptor in the first 24 bytes of `b` (missing bytes read as zero).
    pub fn decode(b: &[u8]) -> Self {
        let u64_at = |o: usize| {
            u64::from_le_bytes(
                b.get(o..o + 8)
                    .and_then(|s| s.try_into().ok())
                    .unwrap_or([0; 8]),
            )
        };
        Self {
            src: u64_at(0),
            dst: u64_at(8),
            len: u64_at(16),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Opcode {
    Nop = 0,
    DmaCopy = 1,
    DmaSg = 2,
    RunProgram = 3,
    Fence = 4,
    Timestamp = 5,
    Job = 6,
}

impl Opcode {
    pub fn from_u16(v: u16) -> Option<Opcode> {
        Some(match v {
            0 => Opcode::Nop,
            1 => Opcode::DmaCopy,
            2 => Opcode::DmaSg,
            3 => Opcode::RunProgram,
            4 => Opcode::Fence,
            5 => Opcode::Timestamp,
            6 => Opcode::Job,
            _ => return None,
        })
    }
}

pub const FLAG_IRQ: u16 = 1;

/// Completion status codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    Ok = 0,
    DmaFault = 1,
    InvalidCommand = 2,
    InvalidProgram = 3,
    KernelError = 4,
    Aborted = 5,
    DeviceLost = 6,
    /// The engine faulted internally while running the command (the device model's
    /// guard caught it); the engine carries on with the next command.
    EngineFault = 7,
    /// The transfer's end-to-end check (the link CRC / ECC of the modelled silicon) caught
    /// corrupted data: the destination holds bad bytes and must not be used.
    DataError = 8,
    /// A program loop ran past the command's loop timeout; the engine stopped it at a
    /// back edge and is ready for the next command.
    LoopTimeout = 9,
    /// A dynamic tensor's value outgrew the capacity the program gave it (a loop state
    /// growing past its room); the driver may retry with a larger program.
    CapacityExceeded = 10,
}

impl Status {
    pub fn from_u16(v: u16) -> Option<Status> {
        Some(match v {
            0 => Status::Ok,
            1 => Status::DmaFault,
            2 => Status::InvalidCommand,
            3 => Status::InvalidProgram,
            4 => Status::KernelError,
            5 => Status::Aborted,
            6 => Status::DeviceLost,
            7 => Status::EngineFault,
            8 => Status::DataError,
            9 => Status::LoopTimeout,
            10 => Status::CapacityExceeded,
            _ => return None,
        })
    }
}

/// A device command: the typed form of a [`SubmissionEntry`]'s opcode and arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Completes at once.
    Nop,
    /// Copies `len` bytes from `src` to `dst` (device or IOVA addresses).
    DmaCopy { src: u64, dst: u64, len: u64 },
    /// Runs the `count` descriptors ({src, dst, len}, 24 bytes each) at `list`.
    DmaSg { list: u64, count: u64 },
    /// Validates and runs the program of `len` bytes at `addr` in device memory.
    RunProgram {
        addr: u64,
        len: u64,
        /// Loop timeout in ns (0: the program has no loops).
        loop_timeout_ns: u64,
        /// Where the run-time shapes of dynamic tensors go (0: nowhere).
        report: u64,
    },
    /// Waits for every earlier command.
    Fence,
    /// Waits for every earlier command, then writes the device clock (u64 ns) to `dst`.
    Timestamp { dst: u64 },
    /// One execution as one command ([`JobArgs`]).
    Job(JobArgs),
}

/// A JOB: copies `inputs` ranges of host memory into the arena, runs the program (no
/// loops, no shape report), copies `outputs` ranges of the arena out to host memory, and
/// completes once. The copies are the `inputs + outputs` descriptors at `list` (host
/// memory, read when the command is fetched; the host keeps it unchanged until the
/// command completes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobArgs {
    /// The program's device address.
    pub program: u64,
    /// Its length in bytes.
    pub program_len: u64,
    /// The device memory the copies may touch on the device's side.
    pub arena: u64,
    /// Its length in bytes.
    pub arena_len: u64,
    /// The copy list's address in host memory (IOVA).
    pub list: u64,
    /// Copies in (host → arena), first in the list.
    pub inputs: u32,
    /// Copies out (arena → host), after the inputs.
    pub outputs: u32,
}

/// Why a submission entry is not a valid command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("unknown opcode {0}")]
    Opcode(u16),
    #[error("unknown flags {0:#x}")]
    Flags(u16),
    #[error("the reserved word is not zero")]
    Reserved,
    #[error("argument {index} is not used by {opcode:?} and must be zero")]
    UnusedArgument { opcode: Opcode, index: usize },
}

impl Command {
    /// The command's opcode.
    pub fn opcode(&self) -> Opcode {
        match self {
            Command::Nop => Opcode::Nop,
            Command::DmaCopy { .. } => Opcode::DmaCopy,
            Command::DmaSg { .. } => Opcode::DmaSg,
            Command::RunProgram { .. } => Opcode::RunProgram,
            Command::Fence => Opcode::Fence,
            Command::Timestamp { .. } => Opcode::Timestamp,
            Command::Job(_) => Opcode::Job,
        }
    }

    /// The command's six argument words.
    fn args(&self) -> [u64; 6] {
        match *self {
            Command::Nop | Command::Fence => [0; 6],
            Command::DmaCopy { src, dst, len } => [src, dst, len, 0, 0, 0],
            Command::DmaSg { list, count } => [list, 0, 0, count, 0, 0],
            Command::RunProgram {
                addr,
                len,
                loop_timeout_ns,
                report,
            } => [addr, 0, len, loop_timeout_ns, report, 0],
            Command::Timestamp { dst } => [0, dst, 0, 0, 0, 0],
            Command::Job(JobArgs {
                program,
                program_len,
                arena,
                arena_len,
                list,
                inputs,
                outputs,
            }) => [
                program,
                list,
                program_len,
                arena,
                arena_len,
                inputs as u64 | (outputs as u64) << 32,
            ],
        }
    }

    /// The entry for this command as request `req_id`, asking for an interrupt.
    pub fn entry(&self, req_id: u32) -> SubmissionEntry {
        SubmissionEntry {
            opcode: self.opcode() as u16,
            flags: FLAG_IRQ,
            req_id,
            args: self.args(),
            reserved: 0,
        }
    }

    /// The command an entry holds; anything but a known opcode with known flags, a zero
    /// reserved word and zeros in every argument it does not use is refused.
    pub fn decode(e: &SubmissionEntry) -> Result<Command, CommandError> {
        let opcode = Opcode::from_u16(e.opcode).ok_or(CommandError::Opcode(e.opcode))?;
        if e.flags & !FLAG_IRQ != 0 {
            return Err(CommandError::Flags(e.flags));
        }
        if e.reserved != 0 {
            return Err(CommandError::Reserved);
        }
        let [a, b, c, d, r, f] = e.args;
        let cmd = match opcode {
            Opcode::Nop => Command::Nop,
            Opcode::Fence => Command::Fence,
            Opcode::DmaCopy => Command::DmaCopy {
                src: a,
                dst: b,
                len: c,
            },
            Opcode::DmaSg => Command::DmaSg { list: a, count: d },
            Opcode::RunProgram => Command::RunProgram {
                addr: a,
                len: c,
                loop_timeout_ns: d,
                report: r,
            },
            Opcode::Timestamp => Command::Timestamp { dst: b },
            Opcode::Job => Command::Job(JobArgs {
                program: a,
                list: b,
                program_len: c,
                arena: d,
                arena_len: r,
                inputs: f as u32,
                outputs: (f >> 32) as u32,
            }),
        };
        // What the command does not use must be zero: the re-encoded arguments match.
        let used = cmd.args();
        match (0..6).find(|&i| e.args[i] != used[i]) {
            Some(index) => Err(CommandError::UnusedArgument { opcode, index }),
            None => Ok(cmd),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubmissionEntry {
    pub opcode: u16,
    pub flags: u16,
    pub req_id: u32,
    pub args: [u64; 6],
    pub reserved: u64,
}

impl SubmissionEntry {
    pub fn new(op: Opcode, req_id: u32, args: [u64; 6]) -> Self {
        Self {
            opcode: op as u16,
            flags: FLAG_IRQ,
            req_id,
            args,
            reserved: 0,
        }
    }

    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..2].copy_from_slice(&self.opcode.to_le_bytes());
        b[2..4].copy_from_slice(&self.flags.to_le_bytes());
        b[4..8].copy_from_slice(&self.req_id.to_le_bytes());
        for (i, a) in self.args.iter().enumerate() {
            b[8 + i * 8..16 + i * 8].copy_from_slice(&a.to_le_bytes());
        }
        b[56..64].copy_from_slice(&self.reserved.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; 64]) -> Self {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        Self {
            opcode: u16::from_le_bytes([b[0], b[1]]),
            flags: u16::from_le_bytes([b[2], b[3]]),
            req_id: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            args: std::array::from_fn(|i| u64_at(8 + i * 8)),
            reserved: u64_at(56),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompletionEntry {
    pub req_id: u32,
    pub status: u16,
    pub phase: bool,
    pub sq_head: u32,
    pub detail: u32,
    pub device_ns: u64,
    pub fault_addr: u64,
}

impl CompletionEntry {
    pub fn encode(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..4].copy_from_slice(&self.req_id.to_le_bytes());
        b[4..6].copy_from_slice(&self.status.to_le_bytes());
        b[6..8].copy_from_slice(&(self.phase as u16).to_le_bytes());
        b[8..12].copy_from_slice(&self.sq_head.to_le_bytes());
        b[12..16].copy_from_slice(&self.detail.to_le_bytes());
        b[16..24].copy_from_slice(&self.device_ns.to_le_bytes());
        b[24..32].copy_from_slice(&self.fault_addr.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; 32]) -> Self {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        Self {
            req_id: u32_at(0),
            status: u16::from_le_bytes([b[4], b[5]]),
            phase: b[6] & 1 == 1,
            sq_head: u32_at(8),
            detail: u32_at(12),
            device_ns: u64_at(16),
            fault_addr: u64_at(24),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn submission_round_trip(op in any::<u16>(), flags in any::<u16>(), id in any::<u32>(),
                                 args in any::<[u64; 6]>(), r in any::<u64>()) {
            let e = SubmissionEntry { opcode: op, flags, req_id: id, args, reserved: r };
            prop_assert_eq!(SubmissionEntry::decode(&e.encode()), e);
        }

        #[test]
        fn completion_round_trip(id in any::<u32>(), st in any::<u16>(), ph in any::<bool>(),
                                 h in any::<u32>(), d in any::<u32>(), ns in any::<u64>(), fa in any::<u64>()) {
            let e = CompletionEntry { req_id: id, status: st, phase: ph, sq_head: h, detail: d, device_ns: ns, fault_addr: fa };
            prop_assert_eq!(CompletionEntry::decode(&e.encode()), e);
        }

        #[test]
        fn command_round_trip(cmd in any_command(), id in any::<u32>()) {
            let e = cmd.entry(id);
            let bytes = e.encode();
            let back = SubmissionEntry::decode(&bytes);
            prop_assert_eq!(back.req_id, id);
            prop_assert_eq!(Command::decode(&back), Ok(cmd));
        }

        /// Any 64 bytes decode to a command or a typed error, never a panic; a command
        /// decoded re-encodes to the very same bytes (nothing it ignored was set).
        #[test]
        fn hostile_entries_decode_or_are_refused(
            mut bytes in any::<[u8; 64]>(),
            opcode in prop_oneof![0u16..=7, any::<u16>()],
        ) {
            // Every opcode's decode is reached (a random u16 is almost never one).
            bytes[0..2].copy_from_slice(&opcode.to_le_bytes());
            let e = SubmissionEntry::decode(&bytes);
            if let Ok(cmd) = Command::decode(&e) {
                let mut again = cmd.entry(e.req_id);
                again.flags = e.flags;
                prop_assert_eq!(again.encode(), bytes);
            }
        }

        #[test]
        fn only_used_arguments_may_be_set(cmd in any_command(), index in 0usize..6, v in 1..=u64::MAX) {
            let mut e = cmd.entry(1);
            e.args[index] = v;
            match Command::decode(&e) {
                // A word the command uses: the same command with that argument changed.
                Ok(other) => {
                    prop_assert_eq!(other.opcode(), cmd.opcode());
                    prop_assert_eq!(other.args()[index], v);
                }
                Err(err) => prop_assert_eq!(
                    err,
                    CommandError::UnusedArgument { opcode: cmd.opcode(), index }
                ),
            }
        }
    }

    fn any_command() -> impl Strategy<Value = Command> {
        let w = any::<u64>;
        prop_oneof![
            Just(Command::Nop),
            Just(Command::Fence),
            (w(), w(), w()).prop_map(|(src, dst, len)| Command::DmaCopy { src, dst, len }),
            (w(), w()).prop_map(|(list, count)| Command::DmaSg { list, count }),
            (w(), w(), w(), w()).prop_map(|(addr, len, loop_timeout_ns, report)| {
                Command::RunProgram {
                    addr,
                    len,
                    loop_timeout_ns,
                    report,
                }
            }),
            w().prop_map(|dst| Command::Timestamp { dst }),
            (w(), w(), w(), w(), w(), any::<u32>(), any::<u32>()).prop_map(
                |(program, program_len, arena, arena_len, list, inputs, outputs)| {
                    Command::Job(JobArgs {
                        program,
                        program_len,
                        arena,
                        arena_len,
                        list,
                        inputs,
                        outputs,
                    })
                }
            ),
        ]
    }

    #[test]
    fn unknown_opcodes_and_flags_are_refused() {
        let mut e = Command::Nop.entry(1);
        e.opcode = 99;
        assert_eq!(Command::decode(&e), Err(CommandError::Opcode(99)));
        let mut e = Command::Fence.entry(1);
        e.flags |= 4;
        assert_eq!(Command::decode(&e), Err(CommandError::Flags(FLAG_IRQ | 4)));
        let mut e = Command::Fence.entry(1);
        e.reserved = 1;
        assert_eq!(Command::decode(&e), Err(CommandError::Reserved));
        let mut e = Command::DmaCopy {
            src: 1,
            dst: 2,
            len: 3,
        }
        .entry(1);
        e.args[3] = 7;
        let refused = CommandError::UnusedArgument {
            opcode: Opcode::DmaCopy,
            index: 3,
        };
        assert_eq!(Command::decode(&e), Err(refused));
    }
}
