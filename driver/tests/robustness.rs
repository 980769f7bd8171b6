//! The driver survives its device and its clients: short input locations, panics in
//! preparation and in the device's engines, pool files that shrink, a hung device,
//! ten thousand queued executions, and a long run under a seeded fault plan.

mod common;

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use common::{execute, Mode};
use vnpu_driver::config::{DriverConfig, DriverFaults, WatchdogConfig};
use vnpu_driver::conformance::corpus::TestCase;
use vnpu_driver::conformance::{default_corpus, lookup, outputs_match, prepare_plain};
use vnpu_driver::device::PrepareArgs;
use vnpu_driver::device::{ExecutionCallback, ExecutionSlot, IDevice, IPreparedModel, VnpuDevice};
use vnpu_driver::hal::{
    DeviceStatus, ErrorStatus, MeasureTiming, Memory, NativeHandle, OptionalTimePoint,
    OptionalTimeoutDuration, Request, RequestMemoryPool, MEMORY_MMAP_FD,
};
use vnpu_emu::fault::{Fault, FaultPlan};
use vnpu_emu::DeviceConfig;

/// The tests here measure the whole process (threads, fds, RSS) and reset devices: they
/// run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn case(name: &str) -> TestCase {
    lookup(&default_corpus(), name).expect("corpus case")
}

/// A conv model with constants (so preparation uploads them) and one input.
fn conv() -> TestCase {
    case("conv_float")
}

/// A device under `plan` whose watchdog fires after 1 s without progress: well above any
/// stall a loaded CI machine causes, so only injected hangs trip it.
fn device_with(plan: FaultPlan, faults: DriverFaults) -> Arc<VnpuDevice> {
    device_with_watchdog(plan, faults, Duration::from_secs(1))
}

fn device_with_watchdog(plan: FaultPlan, faults: DriverFaults, floor: Duration) -> Arc<VnpuDevice> {
    VnpuDevice::with_driver_config(DriverConfig {
        faults,
        watchdog: WatchdogConfig {
            floor,
            ..Default::default()
        },
        ..DriverConfig::with_device(DeviceConfig {
            dram_size: 256 << 20,
            faults: plan,
            ..Default::default()
        })
    })
    .expect("device")
}

fn prepare_on(
    dev: &VnpuDevice,
    model: &TestCase,
) -> (ErrorStatus, Option<Arc<dyn IPreparedModel>>) {
    let (ret, status, prepared) = prepare_plain(dev, &model.model);
    assert!(ret == ErrorStatus::None || ret == status);
    (status, prepared)
}

/// Executes `case` and checks its outputs against the reference: `Ok(true)` when they
/// match, `Ok(false)` when they do not, `Err(status)` when the execution failed.
fn run_checked(
    prepared: &Arc<dyn IPreparedModel>,
    case: &TestCase,
    mode: Mode,
) -> Result<bool, ErrorStatus> {
    let (request, pool, locations) = case.make_request().expect("request");
    let (status, _, _) = execute(prepared, &request, mode, MeasureTiming::NO);
    if status != ErrorStatus::None {
        return Err(status);
    }
    Ok(outputs_match(case, &pool, &locations))
}

#[test]
fn input_location_too_short() {
    let _serial = serial();
    let dev = device_with(FaultPlan::default(), DriverFaults::default());
    let case = conv();
    let prepared = prepare_on(&dev, &case).1.unwrap();
    let (request, pool, _) = case.make_request().unwrap();
    for mode in [Mode::Sync, Mode::Async] {
        let mut short = request.clone();
        assert!(short.inputs[0].location.length >= 8);
        short.inputs[0].location.length -= 4;
        let (status, shapes, _) = execute(&prepared, &short, mode, MeasureTiming::YES);
        assert_eq!(status, ErrorStatus::InvalidArgument, "{mode:?}");
        assert!(shapes.is_empty());
    }
    // "Nothing read": the request was refused before the device saw it; the pool still
    // holds what the client wrote and the device did no work.
    let before = dev
        .hardware()
        .device()
        .read_reg(vnpu_emu::regs::COMPLETED_LO);
    let mut short = request.clone();
    short.inputs[0].location.length = 4;
    let (status, _, _) = execute(&prepared, &short, Mode::Sync, MeasureTiming::NO);
    assert_eq!(status, ErrorStatus::InvalidArgument);
    let after = dev
        .hardware()
        .device()
        .read_reg(vnpu_emu::regs::COMPLETED_LO);
    assert_eq!(before, after, "no command reached the device");
    drop(pool);
}

#[test]
fn prepare_panic_is_failure() {
    let _serial = serial();
    let dev = device_with(FaultPlan::default(), DriverFaults { prepare_panics: 1 });
    let case = conv();
    let (status, prepared) = prepare_on(&dev, &case);
    assert_eq!(status, ErrorStatus::GeneralFailure);
    assert!(prepared.is_none());
    assert_eq!(
        dev.prepared_models(),
        0,
        "the failed preparation holds nothing"
    );
    let (status, prepared) = prepare_on(&dev, &case);
    assert_eq!(status, ErrorStatus::None, "the next preparation works");
    assert_eq!(run_checked(&prepared.unwrap(), &case, Mode::Sync), Ok(true));
}

/// `case`'s request with its pool replaced by `file` holding the same bytes (mmap_fd).
fn request_in_file(case: &TestCase, file: &std::fs::File) -> (Request, Memory) {
    let (mut request, pool, _) = case.make_request().unwrap();
    let mut bytes = vec![0u8; pool.size as usize];
    nix::sys::uio::pread(pool.fd().unwrap().as_fd(), &mut bytes, 0).unwrap();
    nix::sys::uio::pwrite(file.as_fd(), &bytes, 0).unwrap();
    let fd: std::os::fd::OwnedFd = file.try_clone().unwrap().into();
    let mem = Memory {
        name: MEMORY_MMAP_FD.into(),
        size: pool.size,
        handle: NativeHandle {
            fds: vec![Arc::new(fd)],
            ints: vec![libc::PROT_READ | libc::PROT_WRITE, 0, 0],
        },
    };
    request.pools = vec![RequestMemoryPool::HidlMemory(mem.clone())];
    (request, mem)
}

/// A pool file that shrinks between executions: errors, no signal, and the device keeps
/// working for others.
fn shrink_between_executions(file: std::fs::File) {
    let dev = device_with(FaultPlan::default(), DriverFaults::default());
    let case = conv();
    let prepared = prepare_on(&dev, &case).1.unwrap();
    let (request, mem) = request_in_file(&case, &file);
    for mode in [Mode::Sync, Mode::Async] {
        let (status, _, _) = execute(&prepared, &request, mode, MeasureTiming::NO);
        assert_eq!(status, ErrorStatus::None);
        let (_, _, locations) = case.make_request().unwrap();
        assert!(outputs_match(&case, &mem, &locations));
    }
    file.set_len(16).unwrap();
    for mode in [Mode::Sync, Mode::Async] {
        let (status, _, _) = execute(&prepared, &request, mode, MeasureTiming::NO);
        assert_eq!(status, ErrorStatus::GeneralFailure, "{mode:?}");
    }
    // Shrunk to nothing, then grown back to a hole: still an error or a clean run,
    // never a signal.
    file.set_len(0).unwrap();
    let (status, _, _) = execute(&prepared, &request, Mode::Sync, MeasureTiming::NO);
    assert_ne!(status, ErrorStatus::None);
    assert_eq!(run_checked(&prepared, &case, Mode::Sync), Ok(true));
}

#[test]
fn pool_file_shrunk() {
    let _serial = serial();
    let path = std::env::temp_dir().join(format!("vnpu-pool-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    shrink_between_executions(file);
}

#[test]
fn unsealed_memfd_shrunk() {
    let _serial = serial();
    let fd = nix::sys::memfd::memfd_create(
        c"unsealed",
        nix::sys::memfd::MFdFlags::MFD_CLOEXEC | nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING,
    )
    .unwrap();
    shrink_between_executions(std::fs::File::from(fd));
}

/// Preparation of `conv` takes two commands (constants, program); the execution after
/// it starts at command 3.
const FIRST_EXECUTION_COMMAND: u64 = 3;

#[test]
fn device_hang_recovers() {
    let _serial = serial();
    let dev = device_with(
        FaultPlan {
            at: Some((FIRST_EXECUTION_COMMAND, Fault::Hang)),
            ..Default::default()
        },
        DriverFaults::default(),
    );
    let case = conv();
    let (status, prepared) = prepare_on(&dev, &case);
    assert_eq!(status, ErrorStatus::None);
    let prepared = prepared.unwrap();
    let started = std::time::Instant::now();
    assert_eq!(
        run_checked(&prepared, &case, Mode::Sync),
        Err(ErrorStatus::GeneralFailure),
        "the hung execution fails"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the watchdog, not the 60 s backstop"
    );
    assert_eq!(dev.hardware().epoch(), 1, "the device was reset once");
    // Device memory was cleared by the reset: the model uploads again and runs right.
    for mode in [Mode::Sync, Mode::Async, Mode::Sync] {
        assert_eq!(run_checked(&prepared, &case, mode), Ok(true), "{mode:?}");
    }
    assert_eq!(dev.get_status(), DeviceStatus::Available);
    let (status, again) = prepare_on(&dev, &case);
    assert_eq!(status, ErrorStatus::None);
    assert_eq!(run_checked(&again.unwrap(), &case, Mode::Async), Ok(true));
}

/// A reset clears device memory: a driver-managed buffer written before it is lost
/// (copyTo and use as an input fail with GENERAL_FAILURE, never read zeros) until it is
/// written again.
#[test]
fn a_reset_loses_driver_managed_buffers() {
    use vnpu_driver::hal::{BufferDesc, BufferRole, DataLocation};
    let _serial = serial();
    // Commands: constants, program (preparation), copyFrom; the execution's first hangs.
    let dev = device_with(
        FaultPlan {
            at: Some((FIRST_EXECUTION_COMMAND + 1, Fault::Hang)),
            ..Default::default()
        },
        DriverFaults::default(),
    );
    let case = conv();
    let prepared = prepare_on(&dev, &case).1.unwrap();
    let role = BufferRole {
        model_index: 0,
        io_index: 0,
        frequency: 1.0,
    };
    let (status, buffer, token) = dev.allocate(
        &BufferDesc::default(),
        &[Some(prepared.clone())],
        &[role],
        &[],
    );
    assert_eq!(status, ErrorStatus::None);
    let buffer = buffer.unwrap();
    let data = &case.inputs[0].data;
    let src = Memory::ashmem_with(data).unwrap();
    assert_eq!(buffer.copy_from(&src, &[]), ErrorStatus::None);
    assert_eq!(
        run_checked(&prepared, &case, Mode::Sync),
        Err(ErrorStatus::GeneralFailure)
    );
    assert_eq!(dev.hardware().epoch(), 1, "the device was reset");
    let dst = Memory::ashmem(data.len() as u64).unwrap();
    assert_eq!(buffer.copy_to(&dst), ErrorStatus::GeneralFailure);
    let (mut request, _, _) = case.make_request().unwrap();
    request.pools.push(RequestMemoryPool::Token(token));
    request.inputs[0].location = DataLocation {
        pool_index: 1,
        offset: 0,
        length: 0,
    };
    let status = execute(&prepared, &request, Mode::Sync, MeasureTiming::NO).0;
    assert_eq!(status, ErrorStatus::GeneralFailure, "lost, not zeros");
    assert_eq!(buffer.copy_from(&src, &[]), ErrorStatus::None);
    assert_eq!(buffer.copy_to(&dst), ErrorStatus::None);
    let mut back = vec![0u8; data.len()];
    nix::sys::uio::pread(dst.fd().unwrap().as_fd(), &mut back, 0).unwrap();
    assert_eq!(&back, data);
    let status = execute(&prepared, &request, Mode::Sync, MeasureTiming::NO).0;
    assert_eq!(status, ErrorStatus::None);
}

#[test]
fn engine_panic_is_failure() {
    let _serial = serial();
    let dev = device_with(
        FaultPlan {
            at: Some((FIRST_EXECUTION_COMMAND, Fault::EnginePanic)),
            ..Default::default()
        },
        DriverFaults::default(),
    );
    let case = conv();
    let prepared = prepare_on(&dev, &case).1.unwrap();
    assert_eq!(
        run_checked(&prepared, &case, Mode::Async),
        Err(ErrorStatus::GeneralFailure)
    );
    for mode in [Mode::Sync, Mode::Async] {
        assert_eq!(run_checked(&prepared, &case, mode), Ok(true), "{mode:?}");
    }
    assert_eq!(dev.hardware().epoch(), 0, "an engine fault needs no reset");
    assert_eq!(dev.get_status(), DeviceStatus::Available);
}

/// Threads of this process, from /proc.
fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// Resident set size in KiB, from /proc.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// fds and RSS once the last asynchronous execution's worker has let go of its request
/// (it drops its copy, and so the pool's fd, just after notifying).
fn settled_fds_and_rss() -> (usize, u64) {
    std::thread::sleep(Duration::from_millis(100));
    (fd_count(), rss_kib())
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[test]
fn bounded_async_executions() {
    let _serial = serial();
    const N: usize = 10_000;
    let dev = device_with(FaultPlan::default(), DriverFaults::default());
    let case = case("add");
    let prepared = prepare_on(&dev, &case).1.unwrap();
    let (request, pool, locations) = case.make_request().unwrap();
    let threads_before = thread_count();
    let rss_before = rss_kib();
    let mut max_threads = threads_before;
    let mut slots = Vec::with_capacity(N);
    for i in 0..N {
        let slot = ExecutionSlot::new();
        let ret = prepared.execute_1_3(
            &request,
            MeasureTiming::NO,
            OptionalTimePoint::NONE,
            OptionalTimeoutDuration(None),
            Some(slot.clone() as Arc<dyn ExecutionCallback>),
        );
        assert_eq!(ret, ErrorStatus::None, "execution {i} was queued");
        slots.push(slot);
        if i % 500 == 0 {
            max_threads = max_threads.max(thread_count());
        }
    }
    for slot in &slots {
        assert_eq!(slot.wait().0, ErrorStatus::None);
        assert_eq!(slot.notifications(), 1);
    }
    max_threads = max_threads.max(thread_count());
    let workers = dev.config().execution_workers;
    assert!(
        max_threads <= threads_before + workers,
        "{max_threads} threads with {threads_before} before and {workers} workers"
    );
    let grown = rss_kib().saturating_sub(rss_before);
    assert!(
        grown < 64 * 1024,
        "RSS grew {grown} KiB for {N} queued executions"
    );
    assert!(outputs_match(&case, &pool, &locations));
}

/// 10 000 executions of small models and MobileNet under DMA faults, bit flips and
/// hangs: each matches the reference or fails; nothing hangs; fds and memory stay flat.
#[test]
fn fault_soak() {
    let _serial = serial();
    const N: usize = 10_000;
    // A short watchdog: hangs are frequent here, and a false alarm only fails one
    // execution, which the soak accepts.
    let dev = device_with_watchdog(
        FaultPlan {
            seed: 0x50a6,
            dma_fault_ppm: 2_000,
            bit_flip_ppm: 2_000,
            hang_ppm: 100,
            ..Default::default()
        },
        DriverFaults::default(),
        Duration::from_millis(200),
    );
    let small = [conv(), case("add"), case("avg_pool_float_1")];
    let mobilenet = case("mobilenet_224_gender_basic_fixed");
    let prepare_retrying = |c: &TestCase| loop {
        // Preparation uploads by DMA too, so it may fail under the plan: retry.
        if let (ErrorStatus::None, Some(p)) = prepare_on(&dev, c) {
            return p;
        }
    };
    let models: Vec<(Arc<dyn IPreparedModel>, &TestCase)> = small
        .iter()
        .chain([&mobilenet])
        .map(|c| (prepare_retrying(c), c))
        .collect();
    let (mut ok, mut failed) = (0, 0);
    let mut baseline = None;
    for i in 0..N {
        // MobileNet once in a hundred; the small models otherwise.
        let (prepared, case) = if i % 100 == 50 {
            &models[3]
        } else {
            &models[i % 3]
        };
        let mode = if i % 2 == 0 { Mode::Sync } else { Mode::Async };
        match run_checked(prepared, case, mode) {
            Ok(true) => ok += 1,
            Ok(false) => panic!("execution {i} of {} gave a wrong result", case.name),
            Err(_) => failed += 1,
        }
        // The baseline after ten MobileNet runs: the engine keeps its scratch buffers
        // across runs, and by then they (and the allocator's per-thread arenas they pass
        // through) have seen the working set; a leak still grows over the 9 000 after.
        if i == 999 {
            baseline = Some(settled_fds_and_rss());
        }
    }
    let (fds, rss) = baseline.unwrap();
    let (fds_end, rss_end) = settled_fds_and_rss();
    assert!(
        fds_end as f64 <= fds as f64 * 1.05,
        "fds {fds} after 1000, {fds_end} at the end"
    );
    assert!(
        rss_end as f64 <= rss as f64 * 1.05,
        "RSS {rss} KiB after 1000, {rss_end} KiB at the end"
    );
    assert!(failed > 0, "the plan injected faults");
    assert!(ok > N * 9 / 10, "{ok} of {N} ran clean");
    assert_eq!(dev.get_status(), DeviceStatus::Available);
}

/// What the `prepare_execute` fuzz target does, as a property over mutated corpus models:
/// a dimension or a constant's bytes changed at random, the model is prepared and (if
/// that works) executed. Every outcome is a status: no panic in a worker (the guards
/// would turn one into GENERAL_FAILURE, so their count is checked) or in the caller.
mod mutated_models {
    use super::*;
    use proptest::prelude::*;

    fn seeds() -> &'static [TestCase] {
        static SEEDS: std::sync::OnceLock<Vec<TestCase>> = std::sync::OnceLock::new();
        SEEDS.get_or_init(|| {
            [
                "conv_float",
                "depthwise_conv2d_float",
                "avg_pool_float_1",
                "add",
                "resize_bilinear",
                "fully_connected_float",
                "l2_normalization",
                "concat_float_1",
                "reshape",
            ]
            .iter()
            .filter_map(|n| lookup(&default_corpus(), n).ok())
            .collect()
        })
    }

    #[derive(Debug, Clone)]
    enum Mutation {
        Dimension {
            operand: usize,
            dim: usize,
            value: u32,
        },
        ConstantWord {
            offset: usize,
            value: i32,
        },
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let value = prop_oneof![Just(0u32), Just(1), 2u32..70, Just(u32::MAX), Just(1 << 16)];
        let word = prop_oneof![
            Just(0i32),
            Just(-1),
            Just(i32::MIN),
            Just(i32::MAX),
            -4i32..70
        ];
        prop_oneof![
            (any::<usize>(), any::<usize>(), value).prop_map(|(operand, dim, value)| {
                Mutation::Dimension {
                    operand,
                    dim,
                    value,
                }
            }),
            (any::<usize>(), word)
                .prop_map(|(offset, value)| Mutation::ConstantWord { offset, value }),
        ]
    }

    fn apply(case: &mut TestCase, m: &Mutation) {
        let model = &mut case.model;
        match *m {
            Mutation::Dimension {
                operand,
                dim,
                value,
            } => {
                let n = model.main.operands.len();
                let dims = &mut model.main.operands[operand % n].dimensions;
                if !dims.is_empty() {
                    let k = dim % dims.len();
                    dims[k] = value;
                }
            }
            Mutation::ConstantWord { offset, value } => {
                let values = &mut model.operand_values;
                if values.len() >= 4 {
                    let at = (offset % (values.len() / 4)) * 4;
                    values[at..at + 4].copy_from_slice(&value.to_le_bytes());
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        #[test]
        fn mutated_models_prepare_and_execute_without_panics(
            seed in any::<usize>(),
            mutations in proptest::collection::vec(mutation(), 1..4),
        ) {
            let _serial = serial();
            let dev = shared_device();
            let mut case = seeds()[seed % seeds().len()].clone();
            for m in &mutations {
                apply(&mut case, m);
            }
            let (status, prepared) = prepare_on(dev, &case);
            prop_assert_eq!(dev.worker_panics(), 0);
            if let (ErrorStatus::None, Some(prepared)) = (status, prepared) {
                if let Ok((request, _, _)) = case.make_request() {
                    let _ = execute(&prepared, &request, Mode::Sync, MeasureTiming::NO);
                    let _ = execute(&prepared, &request, Mode::Async, MeasureTiming::NO);
                    prop_assert_eq!(dev.worker_panics(), 0);
                }
            }
        }
    }

    fn shared_device() -> &'static Arc<VnpuDevice> {
        static DEV: std::sync::OnceLock<Arc<VnpuDevice>> = std::sync::OnceLock::new();
        DEV.get_or_init(|| device_with(FaultPlan::default(), DriverFaults::default()))
    }
}

/// Dropping the device while preparations are still queued behind each other notifies
/// every callback exactly once (an earlier build left 19 of 20 waiting forever); a
/// preparation that completes gives a model that still runs on the dropped device's
/// hardware, which its prepared models keep alive.
#[test]
fn device_dropped_with_queued_preparations_notifies_all() {
    let _serial = serial();
    let case = conv();
    for round in 0..3 {
        let dev = device_with(FaultPlan::default(), DriverFaults::default());
        let slots: Vec<_> = (0..20)
            .map(|k| {
                let slot = vnpu_driver::device::PreparedModelSlot::new();
                let ret = dev.prepare_model_1_3(PrepareArgs {
                    priority: vnpu_driver::hal::Priority(k % 3 - 1),
                    ..PrepareArgs::new(&case.model, Some(slot.clone()))
                });
                (ret, slot)
            })
            .collect();
        drop(dev);
        let mut prepared = None;
        for (k, (ret, slot)) in slots.iter().enumerate() {
            let (status, model) = slot
                .wait_for(Duration::from_secs(60))
                .unwrap_or_else(|| panic!("round {round}: preparation {k} never notified"));
            assert!(
                *ret == ErrorStatus::None || *ret == status,
                "{ret} vs {status}"
            );
            assert_eq!(status == ErrorStatus::None, model.is_some());
            if model.is_some() {
                prepared = model;
            }
        }
        // Exactly once, also after everything settled.
        std::thread::sleep(Duration::from_millis(50));
        for (k, (_, slot)) in slots.iter().enumerate() {
            assert_eq!(slot.notifications(), 1, "round {round}: preparation {k}");
        }
        if let Some(p) = prepared {
            assert_eq!(run_checked(&p, &case, Mode::Sync), Ok(true));
        }
    }
}
