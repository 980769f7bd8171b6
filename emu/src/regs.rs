//! The register file: the device's only control path, as over MMIO. All registers are
//! 32 bits wide at 4-byte-aligned offsets; an access anywhere else reads all-ones and
//! writes are dropped (and counted as a bus error), never a panic.

use std::sync::atomic::{AtomicU32, Ordering};

pub const ID: u32 = 0x00;
pub const VERSION: u32 = 0x04;
/// Liveness scratch: reads return the bitwise inverse of what was last written.
pub const SCRATCH: u32 = 0x08;
pub const CAPS: u32 = 0x0C;
pub const STATUS: u32 = 0x10;
pub const CONTROL: u32 = 0x14;
/// Write 1 to clear.
pub const IRQ_STATUS: u32 = 0x18;
pub const IRQ_MASK: u32 = 0x1C;
pub const SQ_BASE_LO: u32 = 0x20;
pub const SQ_BASE_HI: u32 = 0x24;
/// Entries, a power of two in `[2, MAX_QUEUE_ENTRIES]`.
pub const SQ_SIZE: u32 = 0x28;
/// Doorbell: the host writes the new tail index.
pub const SQ_TAIL: u32 = 0x2C;
pub const SQ_HEAD: u32 = 0x30;
pub const CQ_BASE_LO: u32 = 0x34;
pub const CQ_BASE_HI: u32 = 0x38;
pub const CQ_SIZE: u32 = 0x3C;
/// The host writes the index of the next completion it will consume.
pub const CQ_HEAD: u32 = 0x40;
pub const CQ_TAIL: u32 = 0x44;
pub const DRAM_SIZE_LO: u32 = 0x48;
pub const DRAM_SIZE_HI: u32 = 0x4C;
pub const FAULT_ADDR_LO: u32 = 0x50;
pub const FAULT_ADDR_HI: u32 = 0x54;
pub const FAULT_CODE: u32 = 0x58;
pub const BUS_ERRORS: u32 = 0x5C;
pub const MAX_DMA_LEN: u32 = 0x60;
pub const COMPLETED_LO: u32 = 0x64;
pub const COMPLETED_HI: u32 = 0x68;
/// Work the engines have finished, counted in steps (an op of a program, a DMA command):
/// it moves while a long program runs, so a host watchdog can tell slow from hung.
pub const PROGRESS: u32 = 0x6C;
/// Doorbell of a host that waits for what it submits (a synchronous execution, a
/// burst): the new tail, as [`SQ_TAIL`]; a device with nothing in flight runs every
/// command without a loop on the writing thread, not only the small ones (the host
/// blocks either way, and the hops to an engine thread and back cost tens of
/// microseconds on a small VM); the write waits for the command processor to finish
/// the event it is booking, so that an idle device always does. Reads as [`SQ_TAIL`].
pub const SQ_TAIL_WAIT: u32 = 0x70;
const REG_COUNT: usize = 0x74 / 4;

pub const ID_VALUE: u32 = 0x5550_4E56; // "VNPU"
pub const VERSION_VALUE: u32 = 0x0001_0000;

/// CAPS bits.
pub const CAP_DMA_COPY: u32 = 1 << 0;
pub const CAP_PROGRAM: u32 = 1 << 1;
pub const CAP_FENCE: u32 = 1 << 2;
pub const CAP_TIMESTAMP: u32 = 1 << 3;
pub const CAP_SCATTER_GATHER: u32 = 1 << 4;
/// The platform is an emulator (like ivpu's PLATFORM_TYPE).
pub const CAP_EMULATED: u32 = 1 << 31;

/// STATUS bits.
pub const STATUS_ENABLED: u32 = 1 << 0;
pub const STATUS_QUEUE_ERROR: u32 = 1 << 1;
pub const STATUS_LOST: u32 = 1 << 2;
pub const STATUS_BUSY: u32 = 1 << 3;
/// The command processor faulted internally and stopped; only a reset clears it.
pub const STATUS_FAULT: u32 = 1 << 4;

/// CONTROL bits.
pub const CONTROL_ENABLE: u32 = 1 << 0;
pub const CONTROL_RESET: u32 = 1 << 1;

/// IRQ bits.
pub const IRQ_COMPLETION: u32 = 1 << 0;
pub const IRQ_ERROR: u32 = 1 << 1;

pub const MAX_QUEUE_ENTRIES: u32 = 4096;

/// Raw register storage; the device decides what each read and write means.
#[derive(Debug)]
pub struct RegisterFile {
    regs: [AtomicU32; REG_COUNT],
}

impl Default for RegisterFile {
    fn default() -> Self {
        Self {
            regs: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }
}

impl RegisterFile {
    pub fn index(offset: u32) -> Option<usize> {
        offset
            .is_multiple_of(4)
            .then_some(offset as usize / 4)
            .filter(|&i| i < REG_COUNT)
    }

    pub fn get(&self, offset: u32) -> u32 {
        Self::index(offset).map_or(u32::MAX, |i| self.regs[i].load(Ordering::Acquire))
    }

    pub fn set(&self, offset: u32, v: u32) {
        if let Some(i) = Self::index(offset) {
            self.regs[i].store(v, Ordering::Release);
        }
    }

    pub fn fetch_or(&self, offset: u32, bits: u32) {
        if let Some(i) = Self::index(offset) {
            self.regs[i].fetch_or(bits, Ordering::AcqRel);
        }
    }

    pub fn fetch_and(&self, offset: u32, bits: u32) {
        if let Some(i) = Self::index(offset) {
            self.regs[i].fetch_and(bits, Ordering::AcqRel);
        }
    }

    pub fn get64(&self, lo: u32, hi: u32) -> u64 {
        (self.get(hi) as u64) << 32 | self.get(lo) as u64
    }

    pub fn set64(&self, lo: u32, hi: u32, v: u64) {
        self.set(lo, v as u32);
        self.set(hi, (v >> 32) as u32);
    }
}
