//! The DMA engine: copies between host memory (through the IOMMU) and device DRAM.

use super::Outcome;
use crate::fault::Fault;
use crate::iommu::Perm;
use crate::ring::{CopyDescriptor, Status, MAX_SG_ENTRIES, SG_ENTRY_SIZE};
use crate::shm::copy_between;
use crate::Bus;

/// One copy. A fault anywhere moves nothing for that segment and reports its address.
pub(crate) fn copy(bus: &Bus, src: u64, dst: u64, len: u64) -> Result<(), u64> {
    if len == 0 {
        return Ok(());
    }
    if len > bus.max_dma_len {
        return Err(src);
    }
    let s = bus.resolve(src, len, Perm::READ).map_err(|_| src)?;
    let d = bus.resolve(dst, len, Perm::WRITE).map_err(|_| dst)?;
    let copied = copy_between(&s.region, s.offset, &d.region, d.offset, len).map_err(|_| dst);
    bus.wrote(dst, len);
    copied
}

/// Flips one bit of `[dst, dst + len)`; returns the corrupted address.
pub(crate) fn flip_bit(bus: &Bus, dst: u64, len: u64, random: u64) -> u64 {
    if len == 0 {
        return dst;
    }
    let at = dst + random % len;
    if let Ok(w) = bus.resolve(at, 1, Perm::WRITE) {
        let mut b = [0u8];
        if w.region.read(w.offset, &mut b).is_ok() {
            b[0] ^= 1 << ((random >> 32) % 8);
            let _ = w.region.write(w.offset, &b);
        }
        bus.wrote(at, 1);
    }
    at
}

/// A single contiguous copy.
pub fn run_copy(bus: &Bus, src: u64, dst: u64, len: u64, fault: Option<(Fault, u64)>) -> Outcome {
    if let Some((Fault::DmaFault, _)) = fault {
        return Outcome::fail(Status::DmaFault, 0, src);
    }
    match copy(bus, src, dst, len) {
        Ok(()) => {
            if let Some((Fault::BitFlip, r)) = fault {
                // The flip lands, and the transfer's end-to-end check reports it
                // (detected-uncorrected, as ECC/CRC-protected silicon does).
                let at = flip_bit(bus, dst, len, r);
                return Outcome::fail(Status::DataError, 0, at);
            }
            Outcome::ok(bus.timing.dma_ns(len))
        }
        Err(addr) => Outcome::fail(Status::DmaFault, 0, addr),
    }
}

/// A scatter-gather list of `count` {src, dst, len} descriptors at `list`.
pub fn run_sg(bus: &Bus, list: u64, count: u64, fault: Option<(Fault, u64)>) -> Outcome {
    if count == 0 || count > MAX_SG_ENTRIES {
        return Outcome::fail(Status::InvalidCommand, 0, list);
    }
    if let Some((Fault::DmaFault, _)) = fault {
        return Outcome::fail(Status::DmaFault, 0, list);
    }
    let bytes = count * SG_ENTRY_SIZE;
    let Ok(w) = bus.resolve(list, bytes, Perm::READ) else {
        return Outcome::fail(Status::DmaFault, 0, list);
    };
    // Copy the list out first: the host may rewrite it while we work.
    let mut raw = vec![0u8; bytes as usize];
    if w.region.read(w.offset, &mut raw).is_err() {
        return Outcome::fail(Status::DmaFault, 0, list);
    }
    let mut ns = 0;
    for (i, d) in raw.chunks_exact(SG_ENTRY_SIZE as usize).enumerate() {
        let CopyDescriptor { src, dst, len } = CopyDescriptor::decode(d);
        if let Err(addr) = copy(bus, src, dst, len) {
            return Outcome::fail(Status::DmaFault, i as u32, addr);
        }
        ns += bus.timing.dma_ns(len);
    }
    Outcome::ok(ns)
}
