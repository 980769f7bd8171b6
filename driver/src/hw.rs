//! The hardware layer: what a kernel driver does for the device. It owns the emulated
//! device, its queue pair, the IOVA and DRAM allocators, and an interrupt thread that
//! routes each completion to the batch waiting for it and runs the watchdog: a device that
//! stops making progress (or latches a fault) has its in-flight batches failed, is reset
//! through CONTROL, and gets a fresh queue; `epoch` counts resets so prepared models know
//! to upload their device memory again (a reset clears it).

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use thiserror::Error;
use vnpu_emu::host::{wait_irq, HostQueue};
use vnpu_emu::iommu::PAGE_SIZE;
use vnpu_emu::regs;
use vnpu_emu::ring::{JobArgs, SubmissionEntry, FLAG_IRQ, SG_ENTRY_SIZE};
use vnpu_emu::shm::SharedRegion;
use vnpu_emu::{Device, DeviceConfig};

pub use vnpu_emu::iommu::Perm;
pub use vnpu_emu::ring::{Command, CompletionEntry, CopyDescriptor, Status};

use crate::alloc::RangeAllocator;
use crate::config::WatchdogConfig;

const QUEUE_ENTRIES: u32 = 256;
const RING_IOVA: u64 = 0x10_0000;
/// Where jobs' copy lists live in the device's address space (below the pool space):
/// `JOB_SLOTS` slots of `JOB_SLOT_BYTES`, each holding one job's list until it completes.
const JOB_LIST_IOVA: u64 = 0x80_0000;
const JOB_SLOTS: u64 = 64;
const JOB_SLOT_BYTES: u64 = 4096;
/// Host buffers are mapped into the IOVA space from here up.
const IOVA_POOL_START: u64 = 0x100_0000;
const IOVA_POOL_END: u64 = vnpu_emu::DRAM_BASE;
/// The last-resort bound on one wait, should the watchdog itself be stuck.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes of one entry of a program's shape report (`RunProgram`'s `report`).
pub const REPORT_ENTRY: u64 = vnpu_emu::engine::compute::REPORT_ENTRY;
/// How long a reset may take to take effect.
const RESET_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, Error)]
pub enum HwError {
    #[error("device: {0}")]
    Device(#[from] vnpu_emu::DeviceError),
    #[error("iommu: {0}")]
    Iommu(#[from] vnpu_emu::error::IommuError),
    #[error("out of device memory ({0} bytes requested)")]
    OutOfDeviceMemory(u64),
    #[error("out of IOVA space ({0} bytes requested)")]
    OutOfIova(u64),
    #[error(
        "command {index} of the batch failed: {status:?} (detail {detail}, address {addr:#x})"
    )]
    Command {
        index: usize,
        status: Option<Status>,
        detail: u32,
        addr: u64,
    },
    #[error("the device did not complete the batch in time")]
    Timeout,
    #[error("a batch of {0} commands does not fit in one submission")]
    BatchTooLarge(usize),
    #[error("the device stopped making progress; the watchdog failed the batch and reset it")]
    Hung,
    #[error("the device was reset since the work was prepared (its device memory is gone)")]
    Reset,
    #[error("the device is lost")]
    Lost,
    #[error("host staging memory: {0}")]
    Staging(#[from] vnpu_emu::error::MemError),
}

impl HwError {
    /// The HAL code an execution, preparation or buffer copy failing this way reports.
    pub fn status(&self) -> crate::hal::ErrorStatus {
        use crate::hal::ErrorStatus;
        tracing::debug!("device: {self}");
        match self {
            HwError::Lost => ErrorStatus::DeviceUnavailable,
            HwError::Hung | HwError::Reset => ErrorStatus::GeneralFailure,
            HwError::Command {
                status: Some(Status::LoopTimeout),
                ..
            } => ErrorStatus::MissedDeadlineTransient,
            HwError::OutOfDeviceMemory(_) | HwError::OutOfIova(_) => {
                ErrorStatus::ResourceExhaustedTransient
            }
            _ => ErrorStatus::GeneralFailure,
        }
    }
}

/// A range of device DRAM; freed when dropped.
#[derive(Debug)]
pub struct DramBlock {
    hw: Arc<Hardware>,
    pub addr: u64,
    pub len: u64,
}

impl Drop for DramBlock {
    fn drop(&mut self) {
        self.hw
            .dram
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .free(self.addr, self.len);
    }
}

/// A host fd range mapped into the device's IOVA space; unmapped when dropped.
#[derive(Debug)]
pub struct IoMapping {
    hw: Arc<Hardware>,
    /// The device address of the mapped file offset.
    pub iova: u64,
    base: u64,
    span: u64,
}

impl Drop for IoMapping {
    fn drop(&mut self) {
        let _ = self.hw.device.iommu().unmap(self.base);
        self.hw
            .iova
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .free(self.base, self.span);
    }
}

/// A batch on the device ([`Hardware::submit`]); waited for by [`Submitted::wait`] or,
/// failing that, when dropped.
#[derive(Debug)]
pub struct Submitted<'a> {
    hw: &'a Hardware,
    pending: Option<(Arc<Batch>, u32)>,
}

impl Submitted<'_> {
    /// Waits for the batch's completions; any failed command fails it.
    pub fn wait(mut self) -> Result<Vec<CompletionEntry>, HwError> {
        match self.pending.take() {
            Some((batch, first)) => self.hw.finish_batch(&batch, first),
            None => Ok(Vec::new()),
        }
    }
}

impl Drop for Submitted<'_> {
    fn drop(&mut self) {
        if let Some((batch, first)) = self.pending.take() {
            let _ = self.hw.finish_batch(&batch, first);
        }
    }
}

/// Completions of one submitted batch.
#[derive(Debug)]
struct Batch {
    expected: usize,
    /// The timing model's device time for the batch (the watchdog's yardstick).
    estimate_ns: u64,
    got: Mutex<BatchState>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct BatchState {
    entries: Vec<CompletionEntry>,
    /// The watchdog gave up on the batch.
    hung: bool,
    /// Its submitter sleeps on `done` (a wake-up is a system call: only made for a sleeper).
    sleeping: bool,
}

impl Batch {
    fn fail_hung(&self) {
        self.got.lock().unwrap_or_else(|p| p.into_inner()).hung = true;
        self.done.notify_all();
    }
}

#[derive(Debug)]
struct QueueState {
    /// `None` only when a reset could not bring the queue back (the device is failed).
    queue: Option<HostQueue>,
    next_req_id: u32,
    /// First request id of each batch in flight.
    batches: BTreeMap<u32, Arc<Batch>>,
    /// The jobs in flight on the single-command path, by copy-list slot (their
    /// completions go to `Hardware::cells`); request id 0 marks a free slot.
    singles: [Single; JOB_SLOTS as usize],
    /// How many `singles` are in flight.
    single_count: usize,
    /// The completion-ring drain's buffer, reused (reaping allocates nothing).
    reaped: Vec<CompletionEntry>,
    /// Submitters sleeping on `room` for ring slots.
    room_waiters: usize,
    /// The last (PROGRESS, COMPLETED) seen, and when it last moved.
    progress: (u32, u64),
    progress_at: Instant,
}

/// A job in flight on the single-command path ([`Hardware::run_job`]).
#[derive(Clone, Copy, Debug, Default)]
struct Single {
    /// Its request id (0: the slot is free).
    req_id: u32,
    /// The timing model's time for it (the watchdog's yardstick).
    estimate_ns: u64,
}

impl QueueState {
    /// Whether any work is in flight (batches or single jobs).
    fn outstanding(&self) -> bool {
        !self.batches.is_empty() || self.single_count > 0
    }
}

/// What the driver knows of the device's health (getStatus reports it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Health {
    /// Working.
    Ready = 0,
    /// The watchdog is resetting it.
    Recovering = 1,
    /// A reset did not bring it back, or it reported itself lost.
    Failed = 2,
}

/// The device as a kernel driver sees it: queue, allocators, interrupt routing, watchdog.
#[derive(Debug)]
pub struct Hardware {
    device: Device,
    queue: Mutex<QueueState>,
    /// Signalled when submission slots free up.
    room: Condvar,
    dram: Mutex<RangeAllocator>,
    iova: Mutex<RangeAllocator>,
    stop: AtomicBool,
    watchdog: WatchdogConfig,
    health: AtomicU8,
    /// Resets so far: device memory uploaded before the current epoch is gone.
    epoch: AtomicU64,
    /// The jobs' copy lists (mapped read-only into the device at `JOB_LIST_IOVA`).
    job_lists: SharedRegion,
    /// Which of its slots are in use (bit k: slot k).
    job_slots: AtomicU64,
    /// Where the completion of the job holding copy-list slot k goes: made once and
    /// reused, so a job allocates nothing.
    cells: Box<[Batch]>,
}

/// One execution as one device command ([`Hardware::run_job`]): the copies into the
/// program's arena, the program, the copies out.
#[derive(Clone, Debug)]
pub struct Job {
    /// The program's device address and length.
    program: (u64, u64),
    /// The arena's device address and length: the device memory the copies may touch.
    arena: (u64, u64),
    /// Host memory (IOVA) to the arena.
    inputs: Vec<CopyDescriptor>,
    /// The arena to host memory (IOVA).
    outputs: Vec<CopyDescriptor>,
    /// The timing model's time for the program (the watchdog's yardstick).
    program_ns: u64,
    /// The copy list as the device reads it (inputs, then outputs), encoded once: a job
    /// run again (a burst's memo) only writes it into its slot.
    list: Vec<u8>,
}

impl Job {
    /// The job of the program at `program` (address, length) over the arena `arena`:
    /// `inputs` into it, `outputs` out of it; `program_ns` is the timing model's time for
    /// the program.
    pub fn new(
        program: (u64, u64),
        arena: (u64, u64),
        inputs: Vec<CopyDescriptor>,
        outputs: Vec<CopyDescriptor>,
        program_ns: u64,
    ) -> Job {
        let list = inputs
            .iter()
            .chain(&outputs)
            .flat_map(|c| c.encode())
            .collect();
        Job {
            program,
            arena,
            inputs,
            outputs,
            program_ns,
            list,
        }
    }

    /// The same work as a command list: copies in, a fence, the program, a fence, copies
    /// out (for a job whose list does not fit a slot, or when every slot is taken).
    fn commands(&self) -> Vec<Command> {
        let dma = |c: &CopyDescriptor| Command::DmaCopy {
            src: c.src,
            dst: c.dst,
            len: c.len,
        };
        let run = Command::RunProgram {
            addr: self.program.0,
            len: self.program.1,
            loop_timeout_ns: 0,
            report: 0,
        };
        let ins = self.inputs.iter().map(dma);
        let outs = self.outputs.iter().map(dma);
        ins.chain([Command::Fence, run, Command::Fence])
            .chain(outs)
            .collect()
    }
}

impl Hardware {
    /// Powers up a device, sets up its queue and starts the interrupt thread.
    pub fn open(config: DeviceConfig) -> Result<Arc<Hardware>, HwError> {
        Self::open_with(config, WatchdogConfig::default())
    }

    /// [`Hardware::open`] with a given watchdog.
    pub fn open_with(
        config: DeviceConfig,
        watchdog: WatchdogConfig,
    ) -> Result<Arc<Hardware>, HwError> {
        let device = Device::new(config)?;
        let queue = HostQueue::create(&device, QUEUE_ENTRIES, RING_IOVA)?;
        let dram = RangeAllocator::new(device.dram_base(), device.dram_size());
        let job_lists = SharedRegion::new("vnpu-job-lists", (JOB_SLOTS * JOB_SLOT_BYTES) as usize)?;
        device.iommu().map(
            JOB_LIST_IOVA,
            job_lists.fd(),
            0,
            JOB_SLOTS * JOB_SLOT_BYTES,
            Perm::READ,
        )?;
        let hw = Arc::new(Hardware {
            device,
            queue: Mutex::new(QueueState {
                queue: Some(queue),
                next_req_id: 1,
                batches: BTreeMap::new(),
                singles: [Single::default(); JOB_SLOTS as usize],
                single_count: 0,
                reaped: Vec::with_capacity(QUEUE_ENTRIES as usize),
                room_waiters: 0,
                progress: (0, 0),
                progress_at: Instant::now(),
            }),
            room: Condvar::new(),
            dram: Mutex::new(dram),
            iova: Mutex::new(RangeAllocator::new(
                IOVA_POOL_START,
                IOVA_POOL_END - IOVA_POOL_START,
            )),
            stop: AtomicBool::new(false),
            watchdog,
            health: AtomicU8::new(Health::Ready as u8),
            epoch: AtomicU64::new(0),
            job_lists,
            job_slots: AtomicU64::new(0),
            cells: (0..JOB_SLOTS)
                .map(|_| Batch {
                    expected: 1,
                    estimate_ns: 0,
                    got: Mutex::new(BatchState {
                        entries: Vec::with_capacity(1),
                        ..BatchState::default()
                    }),
                    done: Condvar::new(),
                })
                .collect(),
        });
        let weak = Arc::downgrade(&hw);
        std::thread::Builder::new()
            .name("vnpu-irq".into())
            .spawn(move || {
                let mut watched = Instant::now();
                while let Some(hw) = weak.upgrade() {
                    if hw.stop.load(Ordering::Acquire) {
                        return;
                    }
                    wait_irq(&hw.device, hw.watchdog.period);
                    // The interrupt thread is the watchdog: it must outlive its own bugs.
                    let round = catch_unwind(AssertUnwindSafe(|| {
                        hw.route_completions();
                        // Once a period, not per interrupt: the watchdog takes the queue
                        // lock, which the woken submitter wants right then.
                        if watched.elapsed() >= hw.watchdog.period {
                            hw.watch();
                            watched = Instant::now();
                        }
                    }));
                    if round.is_err() {
                        tracing::error!("interrupt thread panicked; carrying on");
                    }
                }
            })
            .map_err(vnpu_emu::DeviceError::Os)?;
        Ok(hw)
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device reported itself lost, or a reset failed to bring it back.
    pub fn is_lost(&self) -> bool {
        self.device.read_reg(regs::STATUS) & regs::STATUS_LOST != 0
            || self.health() == Health::Failed
    }

    /// The driver's view of the device's health.
    pub fn health(&self) -> Health {
        match self.health.load(Ordering::Acquire) {
            0 => Health::Ready,
            1 => Health::Recovering,
            _ => Health::Failed,
        }
    }

    /// Resets so far; device memory written in an earlier epoch is gone.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Bytes in use now: (device DRAM allocated, device address space mapped).
    pub fn memory_in_use(&self) -> (u64, u64) {
        let lock = |m: &Mutex<RangeAllocator>| m.lock().unwrap_or_else(|p| p.into_inner()).in_use();
        (lock(&self.dram), lock(&self.iova))
    }

    pub fn alloc_dram(self: &Arc<Self>, len: u64) -> Result<DramBlock, HwError> {
        // A size can come from a hostile cache file: rounding it must not overflow.
        let len =
            (len.max(1).checked_next_multiple_of(64)).ok_or(HwError::OutOfDeviceMemory(len))?;
        let addr = self
            .dram
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .alloc(len, 64)
            .ok_or(HwError::OutOfDeviceMemory(len))?;
        Ok(DramBlock {
            hw: Arc::clone(self),
            addr,
            len,
        })
    }

    /// Maps `len` bytes of `fd` from `offset` into the device, page-rounded.
    pub fn map(
        self: &Arc<Self>,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        perm: Perm,
    ) -> Result<IoMapping, HwError> {
        let skew = offset % PAGE_SIZE;
        let span = len
            .checked_add(skew)
            .and_then(|n| n.max(1).checked_next_multiple_of(PAGE_SIZE))
            .ok_or(HwError::OutOfIova(len))?;
        let iova = self
            .iova
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .alloc(span, PAGE_SIZE)
            .ok_or(HwError::OutOfIova(span))?;
        let mapped = self
            .device
            .iommu()
            .map(iova, fd, offset - skew, len + skew, perm);
        if let Err(e) = mapped {
            self.iova
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .free(iova, span);
            return Err(e.into());
        }
        Ok(IoMapping {
            hw: Arc::clone(self),
            iova: iova + skew,
            base: iova,
            span,
        })
    }

    /// The identification, version and capability registers and the size of device
    /// memory: what a cache binds itself to.
    pub fn identity(&self) -> ([u32; 3], u64) {
        let d = &self.device;
        let regs = [regs::ID, regs::VERSION, regs::CAPS].map(|r| d.read_reg(r));
        (regs, d.dram_size())
    }

    /// One DMA copy of `len` bytes from `src` to `dst`, in device epoch `epoch`.
    pub fn copy(&self, src: u64, dst: u64, len: u64, epoch: u64) -> Result<(), HwError> {
        self.run(vec![Command::DmaCopy { src, dst, len }], 0, Some(epoch))?;
        Ok(())
    }

    /// Runs `job` as one JOB command in device epoch `epoch` (see [`Hardware::run`]); as
    /// a command list when its copy list does not fit a slot or every slot is taken.
    /// Returns the device time its completions report (ns).
    ///
    /// The single-command path: no batch object, no completion vector, no map entry; the
    /// copy-list slot's own completion cell ([`Hardware::cells`]) takes the completion
    /// when the job is still running after the doorbell, and a job the device ran on the
    /// doorbell is reaped right there, under the lock that queued it.
    pub fn run_job(&self, job: &Job, epoch: u64) -> Result<u64, HwError> {
        let count = job.inputs.len() + job.outputs.len();
        let slot = match count as u64 * SG_ENTRY_SIZE <= JOB_SLOT_BYTES {
            true => self.take_job_slot(),
            false => None,
        };
        let Some(k) = slot else {
            let done = self.run(job.commands(), job.program_ns, Some(epoch))?;
            return Ok(device_ns(&done));
        };
        let list = k * JOB_SLOT_BYTES;
        let result = self.write_job_list(list, job).and_then(|()| {
            let cmd = Command::Job(JobArgs {
                program: job.program.0,
                program_len: job.program.1,
                arena: job.arena.0,
                arena_len: job.arena.1,
                list: JOB_LIST_IOVA + list,
                inputs: job.inputs.len() as u32,
                outputs: job.outputs.len() as u32,
            });
            self.run_single(k as usize, cmd, job.program_ns, epoch)
        });
        // The device read the list when it fetched the command, long before completing it.
        self.job_slots.fetch_and(!(1 << k), Ordering::Release);
        result
    }

    /// Writes a job's copy list (inputs, then outputs) at `list` in the list region.
    fn write_job_list(&self, list: u64, job: &Job) -> Result<(), HwError> {
        Ok(self.job_lists.write(list, &job.list)?)
    }

    /// Queues one command for copy-list slot `k`'s job and waits for its completion.
    fn run_single(
        &self,
        k: usize,
        cmd: Command,
        estimate_ns: u64,
        epoch: u64,
    ) -> Result<u64, HwError> {
        if self.is_lost() {
            return Err(HwError::Lost);
        }
        let cell = &self.cells[k];
        {
            // The slot is ours: whatever a watchdog left in its cell is stale.
            let mut got = cell.got.lock().unwrap_or_else(|p| p.into_inner());
            got.entries.clear();
            got.hung = false;
        }
        let id = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            let Some(queue) = &q.queue else {
                return Err(HwError::Lost);
            };
            if queue.free_slots(&self.device) < 1 {
                // No room in the ring: the batch path waits for it.
                drop(q);
                let done = self.run_batch(&[cmd], estimate_ns, Some(epoch))?;
                return Ok(device_ns(&done));
            }
            // Resets happen under this lock (see `submit_batch`).
            if epoch != self.epoch() {
                return Err(HwError::Reset);
            }
            let id = q.next_req_id;
            q.next_req_id = id.wrapping_add(1).max(1);
            let mut entry = cmd.entry(id);
            entry.flags &= !FLAG_IRQ;
            let Some(queue) = q.queue.as_mut() else {
                return Err(HwError::Lost);
            };
            // The caller waits for the job: the device may run it on this thread.
            queue
                .submit_waiting(&self.device, &[entry])
                .map_err(|_| HwError::Timeout)?;
            // Polled: a job the device ran on the doorbell is complete already.
            if let Some(c) = self.reap(&mut q, id) {
                drop(q);
                return checked(c);
            }
            if !q.outstanding() {
                // The watchdog measures stalls from when work was first outstanding.
                q.progress_at = Instant::now();
            }
            q.singles[k] = Single {
                req_id: id,
                estimate_ns,
            };
            q.single_count += 1;
            id
        };
        let got = self.wait_batch(cell).map(|mut got| {
            let c = got.entries.first().copied();
            got.entries.clear();
            c
        });
        {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            if q.singles[k].req_id == id {
                q.singles[k].req_id = 0;
                q.single_count -= 1;
            }
        }
        match got? {
            Some(c) => checked(c),
            None => Err(HwError::Timeout),
        }
    }

    /// A free copy-list slot, marked taken.
    fn take_job_slot(&self) -> Option<u64> {
        let mut taken = self.job_slots.load(Ordering::Acquire);
        loop {
            let k = (!taken).trailing_zeros() as u64;
            if k >= JOB_SLOTS {
                return None;
            }
            match self.job_slots.compare_exchange_weak(
                taken,
                taken | 1 << k,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(k),
                Err(now) => taken = now,
            }
        }
    }

    /// Copies host bytes into fresh device DRAM (a staging region and one DMA), in
    /// device epoch `epoch`.
    pub fn upload(self: &Arc<Self>, bytes: &[u8], epoch: u64) -> Result<DramBlock, HwError> {
        let block = self.alloc_dram(bytes.len() as u64)?;
        self.write_dram(bytes, block.addr, epoch)?;
        Ok(block)
    }

    /// Copies host bytes to device address `dst` (a staging region and one DMA), in
    /// device epoch `epoch`.
    pub fn write_dram(self: &Arc<Self>, bytes: &[u8], dst: u64, epoch: u64) -> Result<(), HwError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let staging = SharedRegion::new("vnpu-staging", bytes.len())?;
        staging.write(0, bytes)?;
        let map = self.map(staging.fd(), 0, bytes.len() as u64, Perm::READ)?;
        self.copy(map.iova, dst, bytes.len() as u64, epoch)
    }

    /// Reads `len` bytes at device address `src` (one DMA into a staging region), in
    /// device epoch `epoch`.
    pub fn read_dram(self: &Arc<Self>, src: u64, len: u64, epoch: u64) -> Result<Vec<u8>, HwError> {
        let n = usize::try_from(len).map_err(|_| HwError::OutOfIova(len))?;
        let mut bytes = vec![0u8; n];
        if n == 0 {
            return Ok(bytes);
        }
        let staging = SharedRegion::new("vnpu-readback", n)?;
        let map = self.map(staging.fd(), 0, len, Perm::WRITE)?;
        self.copy(src, map.iova, len, epoch)?;
        drop(map);
        staging.read(0, &mut bytes)?;
        Ok(bytes)
    }

    /// Submits commands (request ids are assigned here) and waits for all their
    /// completions. Any failed command fails the batch. `program_ns` is the timing
    /// model's time for each RUN_PROGRAM among them (the watchdog's yardstick).
    ///
    /// With `epoch`, the batch is refused (`Reset`) unless the device is still in that
    /// epoch when it is queued: work that relies on device memory uploaded in an earlier
    /// epoch never runs on the cleared memory of a later one.
    pub fn run(
        &self,
        cmds: Vec<Command>,
        program_ns: u64,
        epoch: Option<u64>,
    ) -> Result<Vec<CompletionEntry>, HwError> {
        // A batch larger than the ring goes in ring-sized pieces, each finished before the
        // next starts, which keeps the order (and so every FENCE's meaning).
        let max = (QUEUE_ENTRIES / 2) as usize;
        if cmds.len() <= max {
            return self.run_batch(&cmds, program_ns, epoch);
        }
        let mut all = Vec::with_capacity(cmds.len());
        for piece in cmds.chunks(max) {
            all.extend(self.run_batch(piece, program_ns, epoch)?);
        }
        Ok(all)
    }

    /// The timing model's device time for a batch.
    fn estimate_ns(&self, cmds: &[Command], program_ns: u64) -> u64 {
        let timing = self.device.timing();
        cmds.iter()
            .map(|c| match c {
                Command::DmaCopy { len, .. } => timing.dma_ns(*len),
                Command::RunProgram { .. } | Command::Job(_) => program_ns,
                _ => 0,
            })
            .fold(0, u64::saturating_add)
    }

    /// Submits one batch of at most half the ring without waiting for it: the caller
    /// does other work meanwhile, then [`Submitted::wait`]s (dropping it waits too, so no
    /// buffer the batch names is released while the device may still use it).
    pub fn submit(
        &self,
        cmds: Vec<Command>,
        program_ns: u64,
        epoch: Option<u64>,
    ) -> Result<Submitted<'_>, HwError> {
        if cmds.len() > (QUEUE_ENTRIES / 2) as usize {
            return Err(HwError::BatchTooLarge(cmds.len()));
        }
        let pending = self.submit_batch(&cmds, program_ns, epoch, false)?;
        Ok(Submitted { hw: self, pending })
    }

    fn run_batch(
        &self,
        cmds: &[Command],
        program_ns: u64,
        epoch: Option<u64>,
    ) -> Result<Vec<CompletionEntry>, HwError> {
        match self.submit_batch(cmds, program_ns, epoch, true)? {
            Some((batch, first)) => self.finish_batch(&batch, first),
            None => Ok(Vec::new()),
        }
    }

    /// Queues a batch (`None` for an empty one) and rings the doorbell (`waiting`: the
    /// caller waits for the batch next, so an idle device may run it on this thread).
    fn submit_batch(
        &self,
        cmds: &[Command],
        program_ns: u64,
        epoch: Option<u64>,
        waiting: bool,
    ) -> Result<Option<(Arc<Batch>, u32)>, HwError> {
        if cmds.is_empty() {
            return Ok(None);
        }
        if self.is_lost() {
            return Err(HwError::Lost);
        }
        let batch = Arc::new(Batch {
            expected: cmds.len(),
            estimate_ns: self.estimate_ns(cmds, program_ns),
            got: Mutex::new(BatchState {
                entries: Vec::with_capacity(cmds.len()),
                ..BatchState::default()
            }),
            done: Condvar::new(),
        });
        let first;
        {
            let deadline = Instant::now() + COMMAND_TIMEOUT;
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                let Some(queue) = &q.queue else {
                    return Err(HwError::Lost);
                };
                if queue.free_slots(&self.device) >= cmds.len() as u32 {
                    break;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(HwError::Timeout);
                }
                q.room_waiters += 1;
                q = self
                    .room
                    .wait_timeout(q, left.min(Duration::from_millis(10)))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                q.room_waiters -= 1;
            }
            first = q.next_req_id;
            // No interrupts: a batch the device runs inline is reaped by its submitter,
            // and one that is not asks for an interrupt then ([`Self::wait_batch`]).
            let mut next = || {
                let id = q.next_req_id;
                q.next_req_id = id.wrapping_add(1).max(1);
                id
            };
            let entry = |c: &Command, id| {
                let mut e = c.entry(id);
                e.flags &= !FLAG_IRQ;
                e
            };
            // Small batches (a job, an upload) are written from the stack.
            let mut small = [SubmissionEntry::default(); 8];
            let mut large = Vec::new();
            let entries: &[SubmissionEntry] = match cmds.len() <= small.len() {
                true => {
                    for (slot, c) in small.iter_mut().zip(cmds) {
                        *slot = entry(c, next());
                    }
                    &small[..cmds.len()]
                }
                false => {
                    large.extend(cmds.iter().map(|c| entry(c, next())));
                    &large
                }
            };
            // Resets happen under this lock, so the epoch cannot move until the batch is
            // queued (and then a reset fails it).
            if epoch.is_some_and(|e| e != self.epoch()) {
                return Err(HwError::Reset);
            }
            if !q.outstanding() {
                // The watchdog measures stalls from when work was first outstanding.
                q.progress_at = Instant::now();
            }
            let dev = &self.device;
            let Some(queue) = q.queue.as_mut() else {
                return Err(HwError::Lost);
            };
            match waiting {
                true => queue.submit_waiting(dev, entries),
                false => queue.submit(dev, entries),
            }
            .map_err(|_| HwError::Timeout)?;
            q.batches.insert(first, Arc::clone(&batch));
        }
        Ok(Some((batch, first)))
    }

    /// Waits for a submitted batch and checks its completions.
    fn finish_batch(&self, batch: &Batch, first: u32) -> Result<Vec<CompletionEntry>, HwError> {
        let result = self
            .wait_batch(batch)
            .map(|mut got| std::mem::take(&mut got.entries));
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .batches
            .remove(&first);
        let mut got = result?;
        got.sort_by_key(|c| c.req_id.wrapping_sub(first));
        for (index, c) in got.iter().enumerate() {
            if c.status != Status::Ok as u16 {
                return Err(HwError::Command {
                    index,
                    status: Status::from_u16(c.status),
                    detail: c.detail,
                    addr: c.fault_addr,
                });
            }
        }
        Ok(got)
    }

    /// Waits until `batch` has all its completions; they are in the returned guard.
    fn wait_batch<'b>(
        &self,
        batch: &'b Batch,
    ) -> Result<std::sync::MutexGuard<'b, BatchState>, HwError> {
        // Read only when there is something to wait for (a clock read costs).
        let mut deadline = None;
        // Polled completion (as blk-mq polls): a batch the device ran inline on the
        // doorbell is complete already; reaping it here saves an interrupt, the interrupt
        // thread's wake-up and its routing. (Not under the batch's lock: routing takes it.)
        self.route_completions();
        let pending = {
            let got = batch.got.lock().unwrap_or_else(|p| p.into_inner());
            got.entries.len() < batch.expected && !got.hung
        };
        // Still running: ask for an interrupt when it is done. Without room in the ring
        // for the request, poll instead.
        let woken = !pending || self.request_interrupt();
        let mut got = batch.got.lock().unwrap_or_else(|p| p.into_inner());
        while got.entries.len() < batch.expected {
            if got.hung {
                return Err(HwError::Hung);
            }
            if self.is_lost() {
                return Err(HwError::Lost);
            }
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + COMMAND_TIMEOUT);
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() {
                return Err(HwError::Timeout);
            }
            let nap = if woken { 100 } else { 1 };
            got.sleeping = true;
            got = batch
                .done
                .wait_timeout(got, left.min(Duration::from_millis(nap)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            got.sleeping = false;
            if !woken && got.entries.len() < batch.expected {
                drop(got);
                self.route_completions();
                got = batch.got.lock().unwrap_or_else(|p| p.into_inner());
            }
        }
        Ok(got)
    }

    /// Queues a FENCE that raises an interrupt once everything before it is done (the
    /// batches themselves go without); false if the ring has no room or is gone.
    fn request_interrupt(&self) -> bool {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let id = q.next_req_id;
        let Some(queue) = q.queue.as_mut() else {
            return false;
        };
        if queue.free_slots(&self.device) < 1 {
            return false;
        }
        let fence = Command::Fence.entry(id);
        if queue.submit(&self.device, &[fence]).is_err() {
            return false;
        }
        q.next_req_id = id.wrapping_add(1).max(1);
        true
    }

    /// Drains the completion ring and hands each entry to its batch.
    fn route_completions(&self) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        self.reap(&mut q, 0);
    }

    /// Drains the completion ring and hands each entry to its batch or single job, except
    /// request `mine`'s, which it returns (0: none is the caller's).
    fn reap(&self, q: &mut MutexGuard<'_, QueueState>, mine: u32) -> Option<CompletionEntry> {
        let mut done = std::mem::take(&mut q.reaped);
        done.clear();
        if let Some(queue) = q.queue.as_mut() {
            queue.drain_into(&self.device, &mut done);
        }
        let mut found = None;
        // Completions come in order, a batch's together: each run of them goes to its
        // batch under one look-up and one lock.
        let mut rest = &done[..];
        while let Some(c) = rest.first() {
            if mine != 0 && c.req_id == mine {
                found = Some(*c);
                rest = &rest[1..];
                continue;
            }
            if q.single_count > 0 {
                if let Some(k) = q.singles.iter().position(|s| s.req_id == c.req_id) {
                    let cell = &self.cells[k];
                    let mut got = cell.got.lock().unwrap_or_else(|p| p.into_inner());
                    got.entries.push(*c);
                    if got.sleeping {
                        cell.done.notify_all();
                    }
                    rest = &rest[1..];
                    continue;
                }
            }
            let owner = q
                .batches
                .range(..=c.req_id)
                .next_back()
                .filter(|(first, b)| c.req_id.wrapping_sub(**first) < b.expected as u32);
            let Some((&first, b)) = owner else {
                rest = &rest[1..];
                continue;
            };
            let ours = rest
                .iter()
                .take_while(|c| c.req_id.wrapping_sub(first) < b.expected as u32)
                .count();
            let mut got = b.got.lock().unwrap_or_else(|p| p.into_inner());
            got.entries.extend_from_slice(&rest[..ours]);
            if got.entries.len() >= b.expected && got.sleeping {
                b.done.notify_all();
            }
            rest = &rest[ours..];
        }
        let drained = !done.is_empty();
        q.reaped = done;
        if drained && q.room_waiters > 0 {
            self.room.notify_all();
        }
        found
    }
}

/// The device time completions report (ns).
fn device_ns(done: &[CompletionEntry]) -> u64 {
    done.iter()
        .map(|c| c.device_ns)
        .fold(0, u64::saturating_add)
}

/// A single command's completion: its device time, or its failure.
fn checked(c: CompletionEntry) -> Result<u64, HwError> {
    match c.status == Status::Ok as u16 {
        true => Ok(c.device_ns),
        false => Err(HwError::Command {
            index: 0,
            status: Status::from_u16(c.status),
            detail: c.detail,
            addr: c.fault_addr,
        }),
    }
}

impl Hardware {
    /// The watchdog: with work outstanding and no completion or engine step for longer
    /// than the bound (see [`WatchdogConfig`]), or with a fault latched, reset the device.
    fn watch(&self) {
        let status = self.device.read_reg(regs::STATUS);
        if status & regs::STATUS_LOST != 0 || self.health() == Health::Failed {
            return;
        }
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let faulted = status & (regs::STATUS_FAULT | regs::STATUS_QUEUE_ERROR) != 0;
        let seen = (
            self.device.read_reg(regs::PROGRESS),
            (self.device.read_reg(regs::COMPLETED_HI) as u64) << 32
                | self.device.read_reg(regs::COMPLETED_LO) as u64,
        );
        if seen != q.progress || !q.outstanding() {
            q.progress = seen;
            q.progress_at = now;
        }
        if !q.outstanding() && !faulted {
            return;
        }
        let singles = q.singles.iter().filter(|s| s.req_id != 0);
        let in_flight_ns = q
            .batches
            .values()
            .map(|b| b.estimate_ns)
            .chain(singles.map(|s| s.estimate_ns))
            .fold(0u64, u64::saturating_add);
        let bound = self.watchdog.floor
            + Duration::from_nanos(in_flight_ns.saturating_mul(self.watchdog.slack as u64));
        if faulted || now.duration_since(q.progress_at) > bound {
            self.recover(&mut q, faulted);
        }
    }

    /// Fails every batch in flight, resets the device and sets its queue up again.
    fn recover(&self, q: &mut QueueState, faulted: bool) {
        self.health
            .store(Health::Recovering as u8, Ordering::Release);
        tracing::warn!(
            faulted,
            batches = q.batches.len(),
            "device stopped making progress: resetting it"
        );
        for b in std::mem::take(&mut q.batches).into_values() {
            b.fail_hung();
        }
        for (k, s) in q.singles.iter_mut().enumerate() {
            if s.req_id != 0 {
                s.req_id = 0;
                self.cells[k].fail_hung();
            }
        }
        q.single_count = 0;
        let dev = &self.device;
        dev.write_reg(regs::CONTROL, regs::CONTROL_RESET);
        let deadline = Instant::now() + RESET_TIMEOUT;
        while dev.read_reg(regs::STATUS) & !regs::STATUS_LOST != 0
            || dev.read_reg(regs::SQ_SIZE) != 0
        {
            if Instant::now() > deadline {
                tracing::error!("the device did not come out of reset: marked failed");
                self.health.store(Health::Failed as u8, Ordering::Release);
                return;
            }
            std::thread::yield_now();
        }
        if let Some(old) = q.queue.take() {
            old.release(dev, RING_IOVA);
        }
        match HostQueue::create(dev, QUEUE_ENTRIES, RING_IOVA) {
            Ok(queue) => {
                q.queue = Some(queue);
                q.progress_at = Instant::now();
                self.epoch.fetch_add(1, Ordering::AcqRel);
                self.health.store(Health::Ready as u8, Ordering::Release);
            }
            Err(e) => {
                tracing::error!("queue set-up after reset failed: {e}; device marked failed");
                self.health.store(Health::Failed as u8, Ordering::Release);
            }
        }
        self.room.notify_all();
    }
}

impl Drop for Hardware {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hw() -> Arc<Hardware> {
        Hardware::open(DeviceConfig {
            dram_size: 1 << 20,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn batches_larger_than_the_ring_run_in_order() {
        let hw = hw();
        let buf = SharedRegion::new("t", 4096).unwrap();
        let map = hw.map(buf.fd(), 0, 4096, Perm::READ_WRITE).unwrap();
        let dram = hw.alloc_dram(4096).unwrap();
        // 600 copies, each overwriting the same word with its index: the last one wins
        // only if order is kept across pieces.
        let mut cmds = Vec::new();
        for i in 0..600u64 {
            buf.write(8 + i * 4, &(i as u32).to_le_bytes()).unwrap();
            cmds.push(Command::DmaCopy {
                src: map.iova + 8 + i * 4,
                dst: dram.addr,
                len: 4,
            });
            cmds.push(Command::Fence);
        }
        cmds.push(Command::DmaCopy {
            src: dram.addr,
            dst: map.iova,
            len: 4,
        });
        let done = hw.run(cmds, 0, None).unwrap();
        assert_eq!(done.len(), 1201);
        let mut b = [0u8; 4];
        buf.read(0, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), 599);
    }

    #[test]
    fn mappings_and_dram_are_returned_when_dropped() {
        let hw = hw();
        let base = hw.device().iommu().mapping_count();
        let buf = SharedRegion::new("t", 10_000).unwrap();
        let a = hw.map(buf.fd(), 100, 5000, Perm::READ).unwrap();
        let b = hw.map(buf.fd(), 0, 10_000, Perm::WRITE).unwrap();
        assert_eq!(a.iova % 4096, 100);
        assert_eq!(hw.device().iommu().mapping_count(), base + 2);
        drop((a, b));
        assert_eq!(hw.device().iommu().mapping_count(), base);
        let d = hw.alloc_dram(3 << 18).unwrap();
        assert!(hw.alloc_dram(3 << 18).is_err(), "only 1 MiB of DRAM");
        drop(d);
        assert!(hw.alloc_dram(3 << 18).is_ok());
    }

    /// Sizes read from a cache file or a request can be anything: rounding them up is
    /// checked (`u64::MAX` overflowed `next_multiple_of`; found by the cache_load target).
    #[test]
    fn sizes_near_u64_max_are_refused_not_overflowed() {
        let hw = hw();
        for len in [u64::MAX, u64::MAX - 63, u64::MAX - 4096] {
            assert!(matches!(
                hw.alloc_dram(len),
                Err(HwError::OutOfDeviceMemory(_))
            ));
        }
        let buf = SharedRegion::new("t", 4096).unwrap();
        for len in [u64::MAX, u64::MAX - 100] {
            assert!(hw.map(buf.fd(), 100, len, Perm::READ).is_err());
        }
    }

    #[test]
    fn a_submitted_batch_completes_while_the_caller_works() {
        let hw = hw();
        let buf = SharedRegion::new("t", 4096).unwrap();
        buf.write(0, &[5; 64]).unwrap();
        let map = hw.map(buf.fd(), 0, 4096, Perm::READ_WRITE).unwrap();
        let dram = hw.alloc_dram(64).unwrap();
        let copy = |src, dst| Command::DmaCopy { src, dst, len: 64 };
        let fence = Command::Fence;
        let pending = hw
            .submit(
                vec![
                    copy(map.iova, dram.addr),
                    fence,
                    copy(dram.addr, map.iova + 64),
                ],
                0,
                None,
            )
            .unwrap();
        assert_eq!(pending.wait().unwrap().len(), 3);
        let mut b = [0u8; 64];
        buf.read(64, &mut b).unwrap();
        assert_eq!(b, [5; 64]);
        let many = vec![fence; QUEUE_ENTRIES as usize];
        assert!(matches!(
            hw.submit(many, 0, None),
            Err(HwError::BatchTooLarge(_))
        ));
        // Dropped unwaited: the drop waits, so the next batch finds the ring free.
        drop(hw.submit(vec![fence], 0, None).unwrap());
        assert_eq!(hw.run(vec![fence], 0, None).unwrap().len(), 1);
    }

    #[test]
    fn a_failed_command_fails_the_batch_with_its_index() {
        let hw = hw();
        let bad = Command::DmaCopy {
            src: 0xdead_0000,
            dst: hw.device().dram_base(),
            len: 4,
        };
        let nop = Command::Nop;
        match hw.run(vec![nop, bad, nop], 0, None) {
            Err(HwError::Command {
                index: 1,
                status: Some(Status::DmaFault),
                addr: 0xdead_0000,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
    }
}
