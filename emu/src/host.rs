//! The host side of the queue protocol: what a kernel driver does to talk to the
//! device. It owns the ring memory (memfds mapped into the device through the IOMMU),
//! writes submissions, rings the doorbell and drains completions by phase bit.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::device::{Device, DeviceError};
use crate::iommu::{Perm, PAGE_SIZE};
use crate::regs;
use crate::ring::{CompletionEntry, SubmissionEntry, CQ_ENTRY_SIZE, SQ_ENTRY_SIZE};
use crate::shm::SharedRegion;

/// One submission/completion queue pair, set up and enabled on a device.
#[derive(Debug)]
pub struct HostQueue {
    sq: SharedRegion,
    cq: SharedRegion,
    size: u32,
    sq_tail: u32,
    cq_head: u32,
    phase: bool,
}

fn round_up(n: u64) -> u64 {
    n.div_ceil(PAGE_SIZE) * PAGE_SIZE
}

impl HostQueue {
    /// Allocates rings of `entries` (a power of two), maps them at `iova` and
    /// `iova + round_up(sq bytes)`, programs the queue registers and enables the device.
    pub fn create(dev: &Device, entries: u32, iova: u64) -> Result<HostQueue, DeviceError> {
        let sq_len = round_up(entries as u64 * SQ_ENTRY_SIZE);
        let cq_len = round_up(entries as u64 * CQ_ENTRY_SIZE);
        let sq = SharedRegion::new("vnpu-sq", sq_len as usize)?;
        let cq = SharedRegion::new("vnpu-cq", cq_len as usize)?;
        dev.iommu().map(iova, sq.fd(), 0, sq_len, Perm::READ)?;
        dev.iommu()
            .map(iova + sq_len, cq.fd(), 0, cq_len, Perm::WRITE)?;
        let cq_iova = iova + sq_len;
        dev.write_reg(regs::SQ_BASE_LO, iova as u32);
        dev.write_reg(regs::SQ_BASE_HI, (iova >> 32) as u32);
        dev.write_reg(regs::SQ_SIZE, entries);
        dev.write_reg(regs::CQ_BASE_LO, cq_iova as u32);
        dev.write_reg(regs::CQ_BASE_HI, (cq_iova >> 32) as u32);
        dev.write_reg(regs::CQ_SIZE, entries);
        dev.write_reg(regs::IRQ_MASK, regs::IRQ_COMPLETION | regs::IRQ_ERROR);
        dev.write_reg(regs::CONTROL, regs::CONTROL_ENABLE);
        Ok(HostQueue {
            sq,
            cq,
            size: entries,
            sq_tail: 0,
            cq_head: 0,
            phase: true,
        })
    }

    /// Unmaps the rings from the device (after a reset, before creating a new queue).
    pub fn release(self, dev: &Device, iova: u64) {
        let sq_len = round_up(self.size as u64 * SQ_ENTRY_SIZE);
        let _ = dev.iommu().unmap(iova);
        let _ = dev.iommu().unmap(iova + sq_len);
    }

    /// Submission slots free right now (one slot stays empty to tell full from empty).
    pub fn free_slots(&self, dev: &Device) -> u32 {
        let head = dev.read_reg(regs::SQ_HEAD) % self.size;
        self.size - 1 - (self.sq_tail + self.size - head) % self.size
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// Writes entries and rings the doorbell once. Fails (writing nothing) if they do not fit.
    pub fn submit(&mut self, dev: &Device, entries: &[SubmissionEntry]) -> Result<(), QueueFull> {
        self.submit_to(dev, entries, regs::SQ_TAIL)
    }

    /// [`HostQueue::submit`] by the doorbell of a host that waits for these entries
    /// ([`regs::SQ_TAIL_WAIT`]): a device with nothing in flight runs them all before the
    /// write returns.
    pub fn submit_waiting(
        &mut self,
        dev: &Device,
        entries: &[SubmissionEntry],
    ) -> Result<(), QueueFull> {
        self.submit_to(dev, entries, regs::SQ_TAIL_WAIT)
    }

    fn submit_to(
        &mut self,
        dev: &Device,
        entries: &[SubmissionEntry],
        doorbell: u32,
    ) -> Result<(), QueueFull> {
        if entries.len() as u32 > self.free_slots(dev) {
            return Err(QueueFull);
        }
        for e in entries {
            let off = self.sq_tail as u64 * SQ_ENTRY_SIZE;
            // In bounds by construction: sq_tail < size and the ring holds size entries.
            if self.sq.write(off, &e.encode()).is_err() {
                return Err(QueueFull);
            }
            self.sq_tail = (self.sq_tail + 1) % self.size;
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        dev.write_reg(doorbell, self.sq_tail);
        Ok(())
    }

    /// Takes every completion the device has posted, and tells the device how far we read.
    pub fn drain(&mut self, dev: &Device) -> Vec<CompletionEntry> {
        let mut out = Vec::with_capacity(8);
        self.drain_into(dev, &mut out);
        out
    }

    /// [`HostQueue::drain`] appending to `out` (a buffer the caller reuses).
    pub fn drain_into(&mut self, dev: &Device, out: &mut Vec<CompletionEntry>) {
        let before = out.len();
        loop {
            let off = self.cq_head as u64 * CQ_ENTRY_SIZE;
            let Ok(word) = self.cq.load_u32(off + 4) else {
                break;
            };
            if (word >> 16) & 1 != self.phase as u32 {
                break;
            }
            let mut b = [0u8; 32];
            if self.cq.read(off, &mut b).is_err() {
                break;
            }
            out.push(CompletionEntry::decode(&b));
            self.cq_head = (self.cq_head + 1) % self.size;
            if self.cq_head == 0 {
                self.phase = !self.phase;
            }
        }
        if out.len() > before {
            dev.write_reg(regs::CQ_HEAD, self.cq_head);
        }
    }

    /// Waits for the interrupt (or `timeout`), then drains. Returns what was drained.
    pub fn wait(&mut self, dev: &Device, timeout: Duration) -> Vec<CompletionEntry> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.drain(dev);
            if !got.is_empty() {
                return got;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return got;
            }
            wait_irq(dev, left);
        }
    }
}

/// Blocks until the interrupt eventfd fires (and acknowledges it) or `timeout` passes.
pub fn wait_irq(dev: &Device, timeout: Duration) {
    let fd = dev.irq_fd();
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
    if let Ok(n) = poll(
        &mut fds,
        PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
    ) {
        if n > 0 {
            let mut buf = [0u8; 8];
            let _ = nix::unistd::read(fd, &mut buf);
            dev.write_reg(regs::IRQ_STATUS, regs::IRQ_COMPLETION | regs::IRQ_ERROR);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("submission queue full")]
pub struct QueueFull;
