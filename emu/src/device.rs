//! The device: register file, command processor, engines and interrupts.
//!
//! Threads: the *command processor* owns the queues. A doorbell (a register write on
//! the host's thread) wakes it; it fetches submission entries through the IOMMU,
//! dispatches DMA commands to the DMA engine thread and programs to the compute engine
//! thread, and is the only writer of the completion ring. Engines report back to it.
//! Commands on one engine run in order; DMA and compute may overlap, so the host puts
//! a FENCE between dependent commands, as on real hardware.
//!
//! Inline doorbell ([`DeviceConfig::inline_small_commands`]): when the device is idle, a
//! doorbell is handled on the thread that rang it, as an emulator's MMIO handler runs on
//! the vCPU thread, and small commands ([`is_small`]) run there too. The command
//! processor's code does it (same validation, same completions, same timing model and
//! trace); only the thread hops (tens of microseconds each on a small VM) are gone.

use std::os::fd::{AsFd, BorrowedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use nix::sys::eventfd::{EfdFlags, EventFd};
use thiserror::Error;

use crate::engine::compute::Decoded;
use crate::engine::programs::ProgramCache;
use crate::engine::{compute, dma, job, Outcome};
use crate::error::{IommuError, MemError};
use crate::fault::{Fault, FaultInjector, FaultPlan};
use crate::iommu::{Iommu, Iotlb, Perm, Window};
use crate::regs::{self, RegisterFile};
use crate::ring::{
    Command, CompletionEntry, Status, SubmissionEntry, CQ_ENTRY_SIZE, FLAG_IRQ, SQ_ENTRY_SIZE,
};
use crate::shm::SharedRegion;
use crate::tensor::Staged;
use crate::timing::TimingModel;
use crate::trace::{TraceEvent, Tracer};
use crate::weights::WeightCache;
use crate::DRAM_BASE;

#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Bytes of device DRAM (a memfd; pages are only used once touched).
    pub dram_size: u64,
    pub timing: TimingModel,
    pub faults: FaultPlan,
    /// Largest single DMA transfer.
    pub max_dma_len: u64,
    /// Record an engine activity trace (see [`Device::take_trace`]).
    pub trace: bool,
    /// Handle a doorbell on the ringing thread when the device is idle, running small
    /// commands there (see the module documentation).
    pub inline_small_commands: bool,
    /// Bytes of the compute engine's weight cache ([`crate::weights`]; 0: none).
    pub weight_cache_bytes: usize,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            dram_size: 1 << 30,
            timing: TimingModel::default(),
            faults: FaultPlan::default(),
            max_dma_len: 1 << 30,
            trace: false,
            inline_small_commands: true,
            weight_cache_bytes: crate::weights::DEFAULT_WEIGHT_CACHE_BYTES,
        }
    }
}

#[derive(Debug, Error)]
pub enum DeviceError {
    #[error("device memory: {0}")]
    Mem(#[from] MemError),
    #[error("iommu: {0}")]
    Iommu(#[from] IommuError),
    #[error("os: {0}")]
    Os(#[from] std::io::Error),
}

/// What the engines share: the memory the device can reach and its cost model.
#[derive(Debug)]
pub struct Bus {
    pub dram: Arc<SharedRegion>,
    pub dram_base: u64,
    pub iommu: Iommu,
    pub timing: TimingModel,
    pub max_dma_len: u64,
    pub trace: Tracer,
    /// The PROGRESS register: steps the engines finished (see [`regs::PROGRESS`]).
    pub progress: AtomicU32,
    /// Resets so far: engines abandon work queued before the latest one.
    pub generation: AtomicU64,
    /// Engines running a job right now (a reset waits for them to stop).
    pub busy: AtomicU32,
    /// Tensors the compute engine keeps across runs, coherent with DRAM.
    pub weights: WeightCache,
    /// Programs the compute engine keeps decoded across runs.
    pub programs: ProgramCache<Decoded>,
    /// The compute engine's scratch buffers, kept from one run for the next.
    pub scratch: Mutex<Vec<Staged>>,
}

impl Bus {
    /// Resolves a device address: DRAM above `DRAM_BASE`, host memory (IOMMU) below. A
    /// write into DRAM drops what the weight and program caches hold of those bytes; the writer calls
    /// [`Bus::wrote`] when done.
    pub fn resolve(&self, addr: u64, len: u64, need: Perm) -> Result<Window, IommuError> {
        if addr >= self.dram_base {
            let off = addr - self.dram_base;
            self.dram.check(off, len)?;
            if need.allows(Perm::WRITE) {
                self.weights.invalidate(addr, len);
                self.programs.invalidate(addr, len);
            }
            Ok(Window {
                region: Arc::clone(&self.dram),
                offset: off,
            })
        } else {
            self.iommu.translate(addr, len, need)
        }
    }

    /// Says a write of `[addr, addr + len)` resolved for [`Perm::WRITE`] is done, so the
    /// weight and program caches drop anything they loaded while the write was under way.
    pub fn wrote(&self, addr: u64, len: u64) {
        if addr >= self.dram_base {
            self.weights.invalidate(addr, len);
            self.programs.invalidate(addr, len);
        }
    }
}

enum Event {
    /// A register write that the command processor must act on.
    Kick,
    Done {
        generation: u64,
        req_id: u32,
        irq: bool,
        outcome: Outcome,
    },
    Shutdown,
}

enum Task {
    Copy {
        src: u64,
        dst: u64,
        len: u64,
    },
    Sg {
        list: u64,
        count: u64,
    },
    Program {
        addr: u64,
        len: u64,
        /// Loop timeout (0: the program has no loops).
        loop_timeout_ns: u64,
        /// Where to report the run-time shapes of dynamic tensors (0: nowhere).
        report: u64,
    },
    /// A JOB, its copy list fetched and checked.
    Job(Arc<job::Job>),
}

/// A FENCE or TIMESTAMP command waiting for the engines to drain.
#[derive(Clone, Copy)]
struct Barrier {
    req_id: u32,
    irq: bool,
    cmd: Command,
}

struct Work {
    generation: u64,
    req_id: u32,
    irq: bool,
    fault: Option<(Fault, u64)>,
    job: Task,
}

struct Shared {
    regs: RegisterFile,
    bus: Bus,
    irq: EventFd,
    /// The device clock: the sum of modelled device time, in ns.
    clock: AtomicU64,
    events: Mutex<Sender<Event>>,
    /// A Kick is queued and not yet taken: register writes coalesce into it, so a host
    /// hammering the doorbell queues one message, not one per write.
    kick_pending: AtomicBool,
    /// The command processor stopped for want of completion-ring room: only then does a
    /// CQ_HEAD write need to wake it (a host reaping every completion would otherwise
    /// wake it once per batch, and keep it busy when the next doorbell comes).
    cq_stalled: AtomicBool,
}

impl Shared {
    fn kick(&self) {
        if self.kick_pending.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(tx) = self.events.lock() {
            let _ = tx.send(Event::Kick);
        }
    }

    fn raise(&self, bits: u32) {
        self.regs.fetch_or(regs::IRQ_STATUS, bits);
        if self.regs.get(regs::IRQ_MASK) & bits != 0 {
            let _ = self.irq.write(1);
        }
    }
}

/// The largest DMA copy run inline.
pub const INLINE_DMA_BYTES: u64 = 64 << 10;
/// The longest scatter list run inline.
pub const INLINE_SG_ENTRIES: u64 = 16;
/// The largest program run inline (a handful of kernels).
pub const INLINE_PROGRAM_BYTES: u64 = 4 << 10;

/// The commands a doorbell handled on its own thread runs there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inline {
    /// The small ones ([`regs::SQ_TAIL`]).
    Small,
    /// Every one without a loop ([`regs::SQ_TAIL_WAIT`]: the host waits for them).
    LoopFree,
}

impl Inline {
    fn admits(self, job: &Task) -> bool {
        match self {
            Inline::Small => is_small(job),
            Inline::LoopFree => loop_free(job),
        }
    }
}

/// Whether a command runs without a loop (a program with one may run long: never on
/// the doorbell's thread).
fn loop_free(job: &Task) -> bool {
    !matches!(job, &Task::Program { loop_timeout_ns, .. } if loop_timeout_ns != 0)
}

/// Whether a command is small enough to run on the doorbell's thread.
fn is_small(job: &Task) -> bool {
    match job {
        &Task::Copy { len, .. } => len <= INLINE_DMA_BYTES,
        &Task::Sg { count, .. } => count <= INLINE_SG_ENTRIES,
        &Task::Program { len, .. } => len <= INLINE_PROGRAM_BYTES && loop_free(job),
        // A job has no loops.
        Task::Job(j) => {
            let (program, bytes) = j.size();
            program <= INLINE_PROGRAM_BYTES && bytes <= INLINE_DMA_BYTES
        }
    }
}

/// The emulated accelerator. Dropping it stops its threads.
pub struct Device {
    shared: Arc<Shared>,
    cp: Arc<Mutex<CommandProcessor>>,
    inline: bool,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("dram_size", &self.dram_size())
            .finish()
    }
}

impl Device {
    pub fn new(config: DeviceConfig) -> Result<Device, DeviceError> {
        let dram = SharedRegion::new("vnpu-dram", config.dram_size as usize)?;
        let irq = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(std::io::Error::from)?;
        let (tx, rx) = channel();
        let shared = Arc::new(Shared {
            regs: RegisterFile::default(),
            bus: Bus {
                dram: Arc::new(dram),
                dram_base: DRAM_BASE,
                iommu: Iommu::default(),
                timing: config.timing,
                max_dma_len: config.max_dma_len,
                trace: Tracer::new(config.trace),
                progress: AtomicU32::new(0),
                generation: AtomicU64::new(0),
                busy: AtomicU32::new(0),
                weights: WeightCache::new(config.weight_cache_bytes),
                programs: ProgramCache::default(),
                scratch: Mutex::new(Vec::new()),
            },
            irq,
            clock: AtomicU64::new(0),
            events: Mutex::new(tx.clone()),
            kick_pending: AtomicBool::new(false),
            cq_stalled: AtomicBool::new(false),
        });
        init_registers(&shared.regs, &config);
        let (dma_tx, dma_rx) = channel::<Work>();
        let (cmp_tx, cmp_rx) = channel::<Work>();
        let mut threads = Vec::new();
        for (name, rx) in [("vnpu-dma", dma_rx), ("vnpu-compute", cmp_rx)] {
            let s = Arc::clone(&shared);
            let done = tx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || engine_loop(&s, rx, done))?,
            );
        }
        let faults = FaultInjector::new(config.faults);
        let cp = Arc::new(Mutex::new(CommandProcessor::new(
            Arc::clone(&shared),
            dma_tx,
            cmp_tx,
            faults,
        )));
        let thread_cp = Arc::clone(&cp);
        threads.push(
            std::thread::Builder::new()
                .name("vnpu-cp".into())
                .spawn(move || command_processor_loop(&thread_cp, rx))?,
        );
        Ok(Device {
            shared,
            cp,
            inline: config.inline_small_commands,
            threads,
        })
    }

    /// A register read, as over MMIO.
    pub fn read_reg(&self, offset: u32) -> u32 {
        let regs = &self.shared.regs;
        if RegisterFile::index(offset).is_none() {
            regs.set(regs::BUS_ERRORS, regs.get(regs::BUS_ERRORS).wrapping_add(1));
            return u32::MAX;
        }
        match offset {
            regs::SCRATCH => !regs.get(offset),
            regs::PROGRESS => self.shared.bus.progress.load(Ordering::Acquire),
            regs::SQ_TAIL_WAIT => regs.get(regs::SQ_TAIL),
            _ => regs.get(offset),
        }
    }

    /// A register write, as over MMIO. Read-only registers ignore writes.
    pub fn write_reg(&self, offset: u32, value: u32) {
        let regs = &self.shared.regs;
        match offset {
            regs::SCRATCH
            | regs::SQ_BASE_LO
            | regs::SQ_BASE_HI
            | regs::SQ_SIZE
            | regs::CQ_BASE_LO
            | regs::CQ_BASE_HI
            | regs::CQ_SIZE
            | regs::IRQ_MASK => regs.set(offset, value),
            regs::IRQ_STATUS => regs.fetch_and(offset, !value),
            regs::SQ_TAIL_WAIT if self.inline => {
                // The host waits for what it submits: it also waits for the command
                // processor to be free (it holds the processor only to book an event),
                // and publishes the tail only then, so that no event the processor has
                // still queued takes the new entries to the engines: a device with
                // nothing in flight always runs them here.
                let mut cp = self.cp.lock().unwrap_or_else(|p| p.into_inner());
                regs.set(regs::SQ_TAIL, value);
                cp.handle_inline(Inline::LoopFree);
            }
            regs::SQ_TAIL if self.inline => {
                regs.set(regs::SQ_TAIL, value);
                // Handled here if the command processor is free; else it is woken.
                match self.cp.try_lock() {
                    Ok(mut cp) => cp.handle_inline(Inline::Small),
                    Err(_) => self.shared.kick(),
                }
            }
            regs::CQ_HEAD => {
                regs.set(offset, value);
                // Pairs with the processor's fence in `pump`: either it sees this head or
                // this sees its stall.
                std::sync::atomic::fence(Ordering::SeqCst);
                if self.shared.cq_stalled.swap(false, Ordering::SeqCst) {
                    self.shared.kick();
                }
            }
            regs::SQ_TAIL | regs::SQ_TAIL_WAIT => {
                regs.set(regs::SQ_TAIL, value);
                self.shared.kick();
            }
            regs::CONTROL => {
                regs.set(offset, value);
                self.shared.kick();
            }
            _ => regs.set(regs::BUS_ERRORS, regs.get(regs::BUS_ERRORS).wrapping_add(1)),
        }
    }

    /// The IOMMU, programmed by the host (as a kernel's IOMMU driver would).
    pub fn iommu(&self) -> &Iommu {
        &self.shared.bus.iommu
    }

    /// The completion interrupt: an eventfd the host polls or reads.
    pub fn irq_fd(&self) -> BorrowedFd<'_> {
        self.shared.irq.as_fd()
    }

    pub fn dram_base(&self) -> u64 {
        DRAM_BASE
    }

    pub fn dram_size(&self) -> u64 {
        self.shared.bus.dram.len() as u64
    }

    pub fn timing(&self) -> TimingModel {
        self.shared.bus.timing
    }

    /// Turns the engine activity trace on or off.
    pub fn set_tracing(&self, on: bool) {
        self.shared.bus.trace.set_enabled(on);
    }

    /// Takes the trace events recorded so far (write them with [`crate::trace::chrome_json`]).
    pub fn take_trace(&self) -> Vec<TraceEvent> {
        self.shared.bus.trace.take()
    }

    /// The device clock (sum of modelled device time), in ns.
    pub fn clock_ns(&self) -> u64 {
        self.shared.clock.load(Ordering::Acquire)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Ok(tx) = self.shared.events.lock() {
            let _ = tx.send(Event::Shutdown);
        }
        // The engines end when their queues close.
        self.cp.lock().unwrap_or_else(|p| p.into_inner()).engines = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn init_registers(r: &RegisterFile, c: &DeviceConfig) {
    for off in (0..regs::COMPLETED_HI + 4).step_by(4) {
        r.set(off, 0);
    }
    r.set(regs::ID, regs::ID_VALUE);
    r.set(regs::VERSION, regs::VERSION_VALUE);
    r.set(
        regs::CAPS,
        regs::CAP_DMA_COPY
            | regs::CAP_PROGRAM
            | regs::CAP_FENCE
            | regs::CAP_TIMESTAMP
            | regs::CAP_SCATTER_GATHER
            | regs::CAP_EMULATED,
    );
    r.set64(regs::DRAM_SIZE_LO, regs::DRAM_SIZE_HI, c.dram_size);
    r.set(regs::MAX_DMA_LEN, c.max_dma_len.min(u32::MAX as u64) as u32);
}

/// Runs one job on its engine. A panic inside (a bug in the device model, or an injected
/// `EnginePanic`) is caught here: the command completes with `EngineFault` and the engine
/// goes on with the next job, as a hardware engine's watchdog would restart it.
fn run_guarded(bus: &Bus, w: &Work) -> Outcome {
    let run = || {
        if matches!(w.fault, Some((Fault::EnginePanic, _))) {
            // Unwinds like a panic, without the panic hook's (slow) report.
            std::panic::resume_unwind(Box::new(format!(
                "injected engine panic (request {})",
                w.req_id
            )));
        }
        match w.job {
            Task::Copy { src, dst, len } => dma::run_copy(bus, src, dst, len, w.fault),
            Task::Sg { list, count } => dma::run_sg(bus, list, count, w.fault),
            Task::Job(ref j) => j.run(bus, w.fault, w.req_id),
            Task::Program {
                addr,
                len,
                loop_timeout_ns,
                report,
            } => compute::run_program(
                bus,
                compute::Run {
                    addr,
                    len,
                    loop_timeout_ns,
                    report,
                },
                w.req_id,
            ),
        }
    };
    catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|_| {
        tracing::error!("engine panicked running request {}; restarted", w.req_id);
        Outcome::fail(Status::EngineFault, 0, 0)
    })
}

/// Runs one job as its engine does: skipped if queued before a reset, counted in
/// PROGRESS, traced. `None` when the command does not complete (abandoned, or an
/// injected hang).
fn run_job(bus: &Bus, w: &Work) -> Option<Outcome> {
    // Busy before the generation check, so a reset that waits for idle engines cannot
    // miss a job that is about to start.
    bus.busy.fetch_add(1, Ordering::SeqCst);
    if w.generation != bus.generation.load(Ordering::SeqCst) {
        bus.busy.fetch_sub(1, Ordering::SeqCst);
        return None; // queued before a reset: abandoned, as the silicon would
    }
    // The trace's clock read, only when tracing (a clock read costs on every command).
    let start = bus.trace.enabled().then(std::time::Instant::now);
    let (engine, name) = match w.job {
        Task::Copy { .. } => ("dma", "DMA_COPY"),
        Task::Sg { .. } => ("dma", "DMA_SG"),
        Task::Program { .. } => ("compute", "RUN_PROGRAM"),
        Task::Job(_) => ("compute", "JOB"),
    };
    let outcome = run_guarded(bus, w);
    bus.busy.fetch_sub(1, Ordering::SeqCst);
    bus.progress.fetch_add(1, Ordering::AcqRel);
    if let Some(start) = start {
        bus.trace
            .record(engine, name, start, w.req_id, outcome.device_ns);
    }
    if matches!(w.fault, Some((Fault::Hang, _))) {
        return None; // the command never completes
    }
    Some(outcome)
}

fn engine_loop(s: &Shared, rx: Receiver<Work>, done: Sender<Event>) {
    while let Ok(w) = rx.recv() {
        let Some(outcome) = run_job(&s.bus, &w) else {
            continue;
        };
        let ev = Event::Done {
            generation: w.generation,
            req_id: w.req_id,
            irq: w.irq,
            outcome,
        };
        if done.send(ev).is_err() {
            return;
        }
    }
}

/// The command processor's thread: events (doorbells, engine results) one at a time.
fn command_processor_loop(cp: &Mutex<CommandProcessor>, rx: Receiver<Event>) {
    while let Ok(ev) = rx.recv() {
        if matches!(ev, Event::Shutdown) {
            return;
        }
        cp.lock()
            .unwrap_or_else(|p| p.into_inner())
            .handle_guarded(ev);
    }
}

/// Queue configuration, checked when the host enables the device.
#[derive(Clone, Copy)]
struct Queues {
    sq_base: u64,
    sq_size: u32,
    cq_base: u64,
    cq_size: u32,
}

struct CommandProcessor {
    s: Arc<Shared>,
    /// The engines' queues; `None` once the device shuts down (so the engines end).
    engines: Option<(Sender<Work>, Sender<Work>)>,
    faults: FaultInjector,
    queues: Option<Queues>,
    generation: u64,
    sq_head: u32,
    cq_tail: u32,
    cq_phase: bool,
    in_flight: u32,
    /// A FENCE or TIMESTAMP waiting for in-flight work to drain.
    blocked_on: Option<Barrier>,
    lost: bool,
    /// The processor faulted (STATUS_FAULT): it ignores everything but a reset.
    halted: bool,
    completed: u64,
    /// Handling a doorbell on the ringing thread: which commands run here.
    inline_pass: Option<Inline>,
    /// The rings' translations.
    tlb: Iotlb,
    /// The translation of the last JOB's copy list.
    job_list: job::Fetched,
}

impl CommandProcessor {
    fn new(
        s: Arc<Shared>,
        dma: Sender<Work>,
        compute: Sender<Work>,
        faults: FaultInjector,
    ) -> Self {
        Self {
            s,
            engines: Some((dma, compute)),
            faults,
            queues: None,
            generation: 0,
            sq_head: 0,
            cq_tail: 0,
            cq_phase: true,
            in_flight: 0,
            blocked_on: None,
            lost: false,
            halted: false,
            completed: 0,
            inline_pass: None,
            tlb: Iotlb::default(),
            job_list: job::Fetched::default(),
        }
    }

    /// Handles one event. A panic here (a bug in the model, or an injected
    /// ProcessorPanic) must not kill the processor silently: latch STATUS_FAULT, tell the
    /// host, wait for reset.
    fn handle_guarded(&mut self, ev: Event) {
        if catch_unwind(AssertUnwindSafe(|| self.handle(ev))).is_err() {
            tracing::error!("command processor panicked; halted until reset");
            self.halted = true;
            self.regs().fetch_or(regs::STATUS, regs::STATUS_FAULT);
            self.s.raise(regs::IRQ_ERROR);
        }
    }

    /// A doorbell handled on the ringing thread, running the commands `which` admits.
    fn handle_inline(&mut self, which: Inline) {
        self.inline_pass = Some(which);
        self.handle_guarded(Event::Kick);
        self.inline_pass = None;
    }

    fn handle(&mut self, ev: Event) {
        if self.halted && !matches!(ev, Event::Kick) {
            return;
        }
        {
            match ev {
                Event::Shutdown => {}
                Event::Kick => {
                    self.s.kick_pending.store(false, Ordering::SeqCst);
                    self.on_control()
                }
                Event::Done {
                    generation,
                    req_id,
                    irq,
                    outcome,
                } => {
                    if generation == self.generation {
                        self.in_flight -= 1;
                        self.complete(req_id, irq, outcome);
                    }
                }
            }
            self.pump();
            if self.in_flight > 0 || self.blocked_on.is_some() {
                self.regs().fetch_or(regs::STATUS, regs::STATUS_BUSY);
            } else {
                self.regs().fetch_and(regs::STATUS, !regs::STATUS_BUSY);
            }
        }
    }

    fn regs(&self) -> &RegisterFile {
        &self.s.regs
    }

    fn on_control(&mut self) {
        let control = self.regs().get(regs::CONTROL);
        if control & regs::CONTROL_RESET != 0 {
            self.reset();
            return;
        }
        if self.halted {
            return;
        }
        let enabled = self.regs().get(regs::STATUS) & regs::STATUS_ENABLED != 0;
        if control & regs::CONTROL_ENABLE != 0 && !enabled && !self.lost {
            match self.read_queue_config() {
                Some(q) => {
                    self.queues = Some(q);
                    self.regs().fetch_or(regs::STATUS, regs::STATUS_ENABLED);
                }
                None => self.queue_error(0),
            }
        } else if control & regs::CONTROL_ENABLE == 0 && enabled {
            self.queues = None;
            self.regs().fetch_and(regs::STATUS, !regs::STATUS_ENABLED);
        }
    }

    fn read_queue_config(&self) -> Option<Queues> {
        let r = self.regs();
        let q = Queues {
            sq_base: r.get64(regs::SQ_BASE_LO, regs::SQ_BASE_HI),
            sq_size: r.get(regs::SQ_SIZE),
            cq_base: r.get64(regs::CQ_BASE_LO, regs::CQ_BASE_HI),
            cq_size: r.get(regs::CQ_SIZE),
        };
        let size_ok = |n: u32| n.is_power_of_two() && (2..=regs::MAX_QUEUE_ENTRIES).contains(&n);
        let ok = size_ok(q.sq_size)
            && size_ok(q.cq_size)
            && q.sq_base.is_multiple_of(SQ_ENTRY_SIZE)
            && q.cq_base.is_multiple_of(CQ_ENTRY_SIZE);
        ok.then_some(q)
    }

    fn reset(&mut self) {
        self.generation += 1;
        // Abandon queued engine work and let running jobs finish before memory is cleared,
        // so nothing from before the reset touches memory after it.
        self.s
            .bus
            .generation
            .store(self.generation, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while self.s.bus.busy.load(Ordering::SeqCst) != 0 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        // Device memory does not survive a reset: the host must upload again.
        if let Err(e) = self.s.bus.dram.discard() {
            tracing::warn!("reset could not clear device memory: {e}");
        }
        self.s.bus.weights.clear();
        self.s.bus.programs.clear();
        self.queues = None;
        self.sq_head = 0;
        self.cq_tail = 0;
        self.cq_phase = true;
        self.in_flight = 0;
        self.blocked_on = None;
        self.s.cq_stalled.store(false, Ordering::SeqCst);
        self.lost = false;
        self.halted = false;
        self.completed = 0;
        // The configuration registers keep nothing across a reset.
        let r = self.regs();
        for off in [
            regs::STATUS,
            regs::CONTROL,
            regs::IRQ_STATUS,
            regs::IRQ_MASK,
            regs::SQ_BASE_LO,
            regs::SQ_BASE_HI,
            regs::SQ_SIZE,
            regs::SQ_TAIL,
            regs::SQ_HEAD,
            regs::CQ_BASE_LO,
            regs::CQ_BASE_HI,
            regs::CQ_SIZE,
            regs::CQ_HEAD,
            regs::CQ_TAIL,
            regs::FAULT_ADDR_LO,
            regs::FAULT_ADDR_HI,
            regs::FAULT_CODE,
            regs::COMPLETED_LO,
            regs::COMPLETED_HI,
        ] {
            r.set(off, 0);
        }
    }

    fn queue_error(&mut self, addr: u64) {
        let r = self.regs();
        r.fetch_or(regs::STATUS, regs::STATUS_QUEUE_ERROR);
        r.set64(regs::FAULT_ADDR_LO, regs::FAULT_ADDR_HI, addr);
        r.set(regs::FAULT_CODE, Status::InvalidCommand as u32);
        self.s.raise(regs::IRQ_ERROR);
    }

    /// Completion-ring slots the host has not consumed yet, plus work that will need one.
    fn cq_committed(&self, q: &Queues) -> Option<u32> {
        let head = self.regs().get(regs::CQ_HEAD);
        if head >= q.cq_size {
            return None;
        }
        let used = (self.cq_tail + q.cq_size - head) % q.cq_size;
        Some(used + self.in_flight)
    }

    /// Fetches and dispatches submissions while there is work, room and no fence.
    fn pump(&mut self) {
        let Some(q) = self.queues else { return };
        if self.lost || self.halted || self.regs().get(regs::STATUS) & regs::STATUS_QUEUE_ERROR != 0
        {
            return;
        }
        let tail = self.regs().get(regs::SQ_TAIL);
        if tail >= q.sq_size {
            self.queue_error(tail as u64);
            return;
        }
        // Bounded: at most one pass over the ring per kick.
        for _ in 0..=q.sq_size {
            if let Some(e) = self.blocked_on {
                if self.in_flight > 0 {
                    return;
                }
                self.blocked_on = None;
                self.finish_barrier(e);
                continue;
            }
            if self.sq_head == tail {
                return;
            }
            match self.cq_committed(&q) {
                Some(n) if n + 1 < q.cq_size => {}
                Some(_) => {
                    // Completion ring full: wait for the host's CQ_HEAD, unless it moved
                    // before the stall was visible (checked again after announcing it).
                    self.s.cq_stalled.store(true, Ordering::SeqCst);
                    std::sync::atomic::fence(Ordering::SeqCst);
                    match self.cq_committed(&q) {
                        Some(n) if n + 1 < q.cq_size => {
                            self.s.cq_stalled.store(false, Ordering::SeqCst);
                        }
                        Some(_) => return,
                        None => {
                            self.queue_error(self.regs().get(regs::CQ_HEAD) as u64);
                            return;
                        }
                    }
                }
                None => {
                    self.queue_error(self.regs().get(regs::CQ_HEAD) as u64);
                    return;
                }
            }
            let addr = q.sq_base + self.sq_head as u64 * SQ_ENTRY_SIZE;
            let entry = match self.fetch(addr) {
                Some(e) => e,
                None => {
                    self.queue_error(addr);
                    return;
                }
            };
            self.sq_head = (self.sq_head + 1) % q.sq_size;
            self.regs().set(regs::SQ_HEAD, self.sq_head);
            self.dispatch(entry);
            if self.lost {
                return;
            }
        }
    }

    fn fetch(&mut self, addr: u64) -> Option<SubmissionEntry> {
        let q = self.queues?;
        let ring = (q.sq_base, q.sq_size as u64 * SQ_ENTRY_SIZE);
        let mut b = [0u8; 64];
        self.in_ring(ring, addr, SQ_ENTRY_SIZE, Perm::READ, |r, at| {
            r.read(at, &mut b).ok()
        })?;
        Some(SubmissionEntry::decode(&b))
    }

    /// `access` on `[addr, addr + len)` inside one of the rings, given the region and the
    /// offset in it: in host memory through the IOTLB, else (device memory, or a ring
    /// that does not translate whole) resolved on its own. `None` if it does not
    /// translate or `access` fails.
    fn in_ring<T>(
        &mut self,
        ring: (u64, u64),
        addr: u64,
        len: u64,
        need: Perm,
        access: impl FnOnce(&SharedRegion, u64) -> Option<T>,
    ) -> Option<T> {
        let bus = &self.s.bus;
        if ring.0.saturating_add(ring.1) <= bus.dram_base {
            if let Some((r, at)) = self.tlb.lookup(&bus.iommu, ring, addr, len, need) {
                return access(r, at);
            }
        }
        let w = bus.resolve(addr, len, need).ok()?;
        access(&w.region, w.offset)
    }

    fn dispatch(&mut self, e: SubmissionEntry) {
        let irq = e.flags & FLAG_IRQ != 0;
        let cmd = match Command::decode(&e) {
            Ok(cmd) => cmd,
            Err(err) => {
                tracing::debug!(req_id = e.req_id, "refused command: {err}");
                self.complete(e.req_id, irq, Outcome::fail(Status::InvalidCommand, 0, 0));
                return;
            }
        };
        let is_dma = matches!(
            cmd,
            Command::DmaCopy { .. } | Command::DmaSg { .. } | Command::Job(_)
        );
        let fault = self.faults.draw(is_dma).map(|f| (f, self.faults.random()));
        if let Some((Fault::ProcessorPanic, _)) = fault {
            std::panic::resume_unwind(Box::new(format!(
                "injected command processor panic (request {})",
                e.req_id
            )));
        }
        if let Some((Fault::DeviceLost, _)) = fault {
            self.lost = true;
            self.regs().fetch_or(regs::STATUS, regs::STATUS_LOST);
            self.s.raise(regs::IRQ_ERROR);
            return;
        }
        let job = match cmd {
            Command::Nop => {
                self.complete(e.req_id, irq, Outcome::ok(0));
                return;
            }
            Command::Fence | Command::Timestamp { .. } => {
                self.blocked_on = Some(Barrier {
                    req_id: e.req_id,
                    irq,
                    cmd,
                });
                return;
            }
            Command::DmaCopy { src, dst, len } => Task::Copy { src, dst, len },
            Command::DmaSg { list, count } => Task::Sg { list, count },
            Command::Job(args) => match job::Job::fetch(&self.s.bus, args, &mut self.job_list) {
                Ok(j) => Task::Job(j),
                Err(o) => {
                    self.complete(e.req_id, irq, o);
                    return;
                }
            },
            Command::RunProgram {
                addr,
                len,
                loop_timeout_ns,
                report,
            } => Task::Program {
                addr,
                len,
                loop_timeout_ns,
                report,
            },
        };
        let Some((dma, compute)) = &self.engines else {
            return;
        };
        let to = if matches!(job, Task::Program { .. } | Task::Job(_)) {
            compute
        } else {
            dma
        };
        let work = Work {
            generation: self.generation,
            req_id: e.req_id,
            irq,
            fault,
            job,
        };
        // Idle engines and a command the doorbell admits: run it here, in order by
        // construction.
        let here = self
            .inline_pass
            .is_some_and(|which| which.admits(&work.job));
        if here && self.in_flight == 0 {
            if let Some(outcome) = run_job(&self.s.bus, &work) {
                self.complete(work.req_id, irq, outcome);
            }
            return;
        }
        if to.send(work).is_ok() {
            self.in_flight += 1;
        }
    }

    fn finish_barrier(&mut self, b: Barrier) {
        let outcome = match b.cmd {
            Command::Timestamp { dst } => {
                let now = self.s.clock.load(Ordering::Acquire);
                let ok = self
                    .s
                    .bus
                    .resolve(dst, 8, Perm::WRITE)
                    .and_then(|w| Ok(w.region.write(w.offset, &now.to_le_bytes())?));
                self.s.bus.wrote(dst, 8);
                match ok {
                    Ok(()) => Outcome::ok(0),
                    Err(_) => Outcome::fail(Status::DmaFault, 0, dst),
                }
            }
            _ => Outcome::ok(0),
        };
        self.complete(b.req_id, b.irq, outcome);
    }

    /// Posts one completion entry and, if asked, an interrupt.
    fn complete(&mut self, req_id: u32, irq: bool, o: Outcome) {
        let Some(q) = self.queues else { return };
        self.s.clock.fetch_add(o.device_ns, Ordering::AcqRel);
        let entry = CompletionEntry {
            req_id,
            status: o.status as u16,
            phase: self.cq_phase,
            sq_head: self.sq_head,
            detail: o.detail,
            device_ns: o.device_ns,
            fault_addr: o.fault_addr,
        };
        let addr = q.cq_base + self.cq_tail as u64 * CQ_ENTRY_SIZE;
        let ring = (q.cq_base, q.cq_size as u64 * CQ_ENTRY_SIZE);
        let written = self.in_ring(ring, addr, CQ_ENTRY_SIZE, Perm::WRITE, |r, at| {
            // Write the body first and the word holding the phase bit last, so the host
            // never sees a new phase with a stale body.
            let b = entry.encode();
            r.write(at + 8, &b[8..]).ok()?;
            r.write(at, &b[..4]).ok()?;
            let status_phase = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            r.store_u32(at + 4, status_phase).ok()
        });
        self.s.bus.wrote(addr, CQ_ENTRY_SIZE);
        if written.is_none() {
            self.queue_error(addr);
            return;
        }
        self.cq_tail = (self.cq_tail + 1) % q.cq_size;
        if self.cq_tail == 0 {
            self.cq_phase = !self.cq_phase;
        }
        self.completed += 1;
        let r = self.regs();
        r.set(regs::CQ_TAIL, self.cq_tail);
        r.set64(regs::COMPLETED_LO, regs::COMPLETED_HI, self.completed);
        if irq {
            self.s.raise(regs::IRQ_COMPLETION);
        }
    }
}
