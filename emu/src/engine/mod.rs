//! The device's engines. Each runs on its own thread, takes jobs from the command
//! processor in order, and reports each result back to it.

pub mod compute;
pub mod dma;
pub mod job;
pub mod job_plan;
pub mod programs;

use crate::ring::Status;

/// The outcome of one command on an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub status: Status,
    /// Modelled device time.
    pub device_ns: u64,
    /// Failing op index (programs) or 0.
    pub detail: u32,
    /// Faulting address, for DMA faults.
    pub fault_addr: u64,
}

impl Outcome {
    pub fn ok(device_ns: u64) -> Self {
        Self {
            status: Status::Ok,
            device_ns,
            detail: 0,
            fault_addr: 0,
        }
    }

    pub fn fail(status: Status, detail: u32, fault_addr: u64) -> Self {
        Self {
            status,
            device_ns: 0,
            detail,
            fault_addr,
        }
    }
}
