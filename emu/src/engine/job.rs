//! The JOB command: one execution as one command. Its copy list is read and checked when
//! the command is fetched ([`Job::fetch`]); the compute engine then copies the inputs
//! into the arena, runs the program and copies the outputs out ([`Job::run`]), and the
//! command completes once.

use std::sync::Arc;

use super::compute::{self, Copies, Run};
use super::{dma, Outcome};
use crate::fault::Fault;
use crate::iommu::{KeptTranslation, Perm};
use crate::ring::{CopyDescriptor, JobArgs, Status, MAX_JOB_COPIES, SG_ENTRY_SIZE};
use crate::Bus;

/// A fetched and checked JOB.
#[derive(Debug)]
pub struct Job {
    run: Run,
    /// The device memory its copies may touch: (address, length).
    arena: (u64, u64),
    /// The copies in, then the copies out (inline for small lists: a job allocates
    /// nothing).
    copies: smallvec::SmallVec<[CopyDescriptor; 4]>,
    inputs: usize,
    /// The bytes its copies move.
    bytes: u64,
}

/// Why a job's copies are refused: the index of the first bad copy and the address at
/// fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadCopy {
    pub index: usize,
    pub addr: u64,
}

/// Checks a job's copies: the first `inputs` read host memory (wholly below
/// `dram_base`) and write inside `arena`; the rest read inside `arena` and write host
/// memory. Nothing else of device memory (the program, constants, other arenas) can be
/// reached by a job's copies.
pub fn check_copies(
    copies: &[CopyDescriptor],
    inputs: usize,
    (arena, arena_len): (u64, u64),
    dram_base: u64,
) -> Result<(), BadCopy> {
    let host = |a: u64, len: u64| a.checked_add(len).is_some_and(|end| end <= dram_base);
    let inside = |a: u64, len: u64| {
        a >= arena
            && a.checked_add(len)
                .zip(arena.checked_add(arena_len))
                .is_some_and(|(end, arena_end)| end <= arena_end)
    };
    for (index, c) in copies.iter().enumerate() {
        let bad = if index < inputs {
            (!host(c.src, c.len))
                .then_some(c.src)
                .or((!inside(c.dst, c.len)).then_some(c.dst))
        } else {
            (!inside(c.src, c.len))
                .then_some(c.src)
                .or((!host(c.dst, c.len)).then_some(c.dst))
        };
        if let Some(addr) = bad {
            return Err(BadCopy { index, addr });
        }
    }
    Ok(())
}

/// What the command processor keeps of the jobs it fetched: the translation of the last
/// list it read (the host reuses a few list slots), and the last job it accepted with the
/// command and list bytes it came from. Whether a job is valid depends on nothing else,
/// so a command whose arguments and freshly read list bytes equal those is that job,
/// accepted without being decoded and checked again (a burst's jobs repeat).
#[derive(Debug, Default)]
pub struct Fetched {
    list: KeptTranslation,
    last: Option<(JobArgs, [u8; SMALL_LIST], Arc<Job>)>,
}

/// The bytes of the longest copy list read onto the stack (and remembered in
/// [`Fetched`]); a longer one is read onto the heap.
const SMALL_LIST: usize = 8 * SG_ENTRY_SIZE as usize;

impl Job {
    /// Reads the job's copy list from host memory and checks it (an INVALID_COMMAND or
    /// DMA_FAULT outcome otherwise).
    pub fn fetch(bus: &Bus, a: JobArgs, kept: &mut Fetched) -> Result<Arc<Job>, Outcome> {
        let count = a.inputs as u64 + a.outputs as u64;
        let dram_end = bus.dram_base + bus.dram.len() as u64;
        let arena_ok = a.arena >= bus.dram_base
            && a.arena
                .checked_add(a.arena_len)
                .is_some_and(|e| e <= dram_end);
        if count > MAX_JOB_COPIES || !arena_ok {
            return Err(Outcome::fail(Status::InvalidCommand, 0, a.arena));
        }
        let bytes = count * SG_ENTRY_SIZE;
        let mut raw = [0u8; SMALL_LIST];
        let mut heap = Vec::new();
        // Copied out first: the host may rewrite the list while the job runs.
        let buf: &mut [u8] = match bytes as usize <= SMALL_LIST {
            true => &mut raw[..bytes as usize],
            false => {
                heap.resize(bytes as usize, 0);
                &mut heap
            }
        };
        if count > 0 {
            let read = match a.list < bus.dram_base {
                true => kept
                    .list
                    .translate(&bus.iommu, a.list, bytes, Perm::READ)
                    .ok()
                    .and_then(|w| w.region.read(w.offset, buf).ok()),
                false => bus
                    .resolve(a.list, bytes, Perm::READ)
                    .ok()
                    .and_then(|w| w.region.read(w.offset, buf).ok()),
            };
            if read.is_none() {
                return Err(Outcome::fail(Status::DmaFault, 0, a.list));
            }
        }
        let small = buf.len() <= SMALL_LIST;
        if let Some((_, _, job)) = kept
            .last
            .as_ref()
            .filter(|(args, was, _)| small && *args == a && was[..buf.len()] == *buf)
        {
            return Ok(Arc::clone(job));
        }
        let job = Arc::new(Job::check(bus, a, buf)?);
        if small {
            kept.last = Some((a, raw, Arc::clone(&job)));
        }
        Ok(job)
    }

    /// The job `a` and its list's bytes `buf` describe, checked.
    fn check(bus: &Bus, a: JobArgs, buf: &[u8]) -> Result<Job, Outcome> {
        let mut copies = smallvec::SmallVec::with_capacity(buf.len() / SG_ENTRY_SIZE as usize);
        // Pushes: SmallVec's `extend` costs more for the few copies a job has.
        for entry in buf.chunks_exact(SG_ENTRY_SIZE as usize) {
            copies.push(CopyDescriptor::decode(entry));
        }
        let inputs = a.inputs as usize;
        if let Err(b) = check_copies(&copies, inputs, (a.arena, a.arena_len), bus.dram_base) {
            return Err(Outcome::fail(
                Status::InvalidCommand,
                b.index as u32,
                b.addr,
            ));
        }
        let bytes = copies.iter().map(|c| c.len).fold(0, u64::saturating_add);
        Ok(Job {
            bytes,
            run: Run {
                addr: a.program,
                len: a.program_len,
                loop_timeout_ns: 0,
                report: 0,
            },
            arena: (a.arena, a.arena_len),
            copies,
            inputs,
        })
    }

    /// The program's length and the bytes the job copies (what makes it small).
    pub fn size(&self) -> (u64, u64) {
        (self.run.len, self.bytes)
    }

    /// Copies in, runs, copies out ([`compute::run_job`]).
    pub fn run(&self, bus: &Bus, fault: Option<(Fault, u64)>, req_id: u32) -> Outcome {
        if let Some((Fault::DmaFault, _)) = fault {
            let at = self.copies.first().map_or(0, |c| c.src);
            return Outcome::fail(Status::DmaFault, 0, at);
        }
        let (inputs, outputs) = self.copies.split_at(self.inputs);
        let done = compute::run_job(
            bus,
            self.run,
            self.arena,
            Copies { inputs, outputs },
            req_id,
        );
        if let (Some((Fault::BitFlip, r)), Status::Ok) = (fault, done.status) {
            // The flip lands in an output, and the transfer's check reports it.
            if let Some(c) = outputs.iter().find(|c| c.len > 0) {
                let at = dma::flip_bit(bus, c.dst, c.len, r);
                return Outcome::fail(Status::DataError, 0, at);
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DRAM: u64 = 1 << 36;
    const ARENA: (u64, u64) = (DRAM + 0x1000, 0x1000);

    fn c(src: u64, dst: u64, len: u64) -> CopyDescriptor {
        CopyDescriptor { src, dst, len }
    }

    #[test]
    fn copies_stay_between_host_memory_and_the_arena() {
        let ok = [c(0x2000, ARENA.0, 16), c(ARENA.0 + 16, 0x3000, 16)];
        assert_eq!(check_copies(&ok, 1, ARENA, DRAM), Ok(()));
        // An input written past the arena, an output read from before it.
        let past = [c(0x2000, ARENA.0 + 0xff8, 16)];
        assert_eq!(
            check_copies(&past, 1, ARENA, DRAM),
            Err(BadCopy {
                index: 0,
                addr: ARENA.0 + 0xff8
            })
        );
        let before = [c(0x2000, ARENA.0, 4), c(DRAM, 0x3000, 4)];
        assert_eq!(
            check_copies(&before, 1, ARENA, DRAM),
            Err(BadCopy {
                index: 1,
                addr: DRAM
            })
        );
        // Device memory as the host side: refused (a job reaches only host memory).
        let dram_src = [c(DRAM + 0x8000, ARENA.0, 4)];
        assert!(check_copies(&dram_src, 1, ARENA, DRAM).is_err());
        let wraps = [c(u64::MAX - 2, ARENA.0, 4)];
        assert!(check_copies(&wraps, 1, ARENA, DRAM).is_err());
    }

    proptest! {
        /// Whatever a hostile list says, an accepted copy moves bytes only between host
        /// memory and the arena.
        #[test]
        fn accepted_copies_touch_only_host_memory_and_the_arena(
            list in proptest::collection::vec((any::<u64>(), any::<u64>(), 0u64..0x2000), 0..8),
            inputs in 0usize..8,
        ) {
            let copies: Vec<_> = list.iter().map(|&(s, d, l)| c(s % (2 * DRAM), d % (2 * DRAM), l)).collect();
            if check_copies(&copies, inputs, ARENA, DRAM).is_ok() {
                for (i, x) in copies.iter().enumerate() {
                    let (host, dev) = if i < inputs { (x.src, x.dst) } else { (x.dst, x.src) };
                    prop_assert!(host + x.len <= DRAM);
                    prop_assert!(dev >= ARENA.0 && dev + x.len <= ARENA.0 + ARENA.1);
                }
            }
        }
    }
}
