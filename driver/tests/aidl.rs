//! The AIDL NN HAL V4 face: reusable executions, bursts with memory identifier tokens,
//! prepareModelWithConfig and its hints, ExecutionConfig's loop timeout, DataLocation
//! padding, mappable-file pools and fenced executions with a duration; and ports of the AIDL
//! VTS ValidateModel / ValidateRequest / ValidateBurst mutations for what V4 added.

mod common;

use std::os::fd::OwnedFd;
use std::sync::Arc;

use common::device;
use vnpu_driver::aidl::convert::{memory_to_aidl, model_to_aidl, request_to_aidl};
use vnpu_driver::aidl::{
    self, AidlDevice, DataLocation, ExecutionConfig, ExecutionResult, ExtensionNameAndPrefix,
    IDevice, IPreparedModel, IPreparedModelParcel, MappableFile, Memory, PrepareModelConfig,
    PreparedModelSlot, Request, RequestArgument, RequestMemoryPool, ServiceSpecific,
    TokenValuePair,
};
use vnpu_driver::conformance::corpus::{self, TestCase};
use vnpu_driver::device::VnpuDevice;
use vnpu_driver::hal::builder::ModelBuilder;
use vnpu_driver::hal::{
    self, BufferDesc, BufferRole, ErrorStatus, ExecutionPreference, Model, OperandType as T,
    OperationType as Op, Priority,
};

const INVALID: ServiceSpecific = ServiceSpecific(ErrorStatus::InvalidArgument);
const NO_DEADLINE: i64 = -1;
const OMITTED: i64 = -1;

type Prepared = aidl::PrepareResult;

fn face() -> AidlDevice<Arc<VnpuDevice>> {
    AidlDevice::new(device())
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `out = a + b`, float32 `[4]`.
fn add_model() -> Model {
    let mut m = ModelBuilder::default();
    let a = m.input(T::TENSOR_FLOAT32, &[4]);
    let b = m.input(T::TENSOR_FLOAT32, &[4]);
    let none = m.constant(T::INT32, &[], &0i32.to_le_bytes());
    let out = m.output(T::TENSOR_FLOAT32, &[4]);
    m.op(Op::ADD, &[a, b, none], &[out]);
    m.build(Vec::new())
}

/// Prepares `model` through prepareModelWithConfig, checking return and notification agree.
fn prepare_with(model: &Model, config: &PrepareModelConfig) -> Prepared {
    let slot = PreparedModelSlot::new();
    let ret = face().prepare_model_with_config(
        &model_to_aidl(model).expect("V4 model"),
        config,
        Some(slot.clone()),
    );
    let (status, prepared) = slot.wait();
    assert_eq!(slot.notifications(), 1, "notified exactly once");
    match ret {
        Ok(()) => {}
        Err(ServiceSpecific(s)) => assert_eq!(s, status, "thrown and notified disagree"),
    }
    assert_eq!(prepared.is_some(), status == ErrorStatus::None);
    (status, prepared)
}

fn prepare(model: &Model) -> Arc<dyn IPreparedModel> {
    let (status, p) = prepare_with(model, &PrepareModelConfig::default());
    assert_eq!(status, ErrorStatus::None);
    p.expect("prepared")
}

/// An ADD request in one ashmem pool: a at 0, b at 64, the output at 128 (with room up
/// to 192), each `[4]` float32; returns the V4 request and the pool.
fn add_request(a: &[f32], b: &[f32]) -> (Request, hal::Memory) {
    let mut bytes = vec![0u8; 192];
    bytes[..16].copy_from_slice(&f32_bytes(a));
    bytes[64..80].copy_from_slice(&f32_bytes(b));
    let pool = hal::Memory::ashmem_with(&bytes).expect("pool");
    let arg = |offset: i64| RequestArgument {
        has_no_value: false,
        location: DataLocation {
            pool_index: 0,
            offset,
            length: 16,
            padding: 0,
        },
        dimensions: Vec::new(),
    };
    let request = Request {
        inputs: vec![arg(0), arg(64)],
        outputs: vec![arg(128)],
        pools: vec![RequestMemoryPool::Pool(
            memory_to_aidl(&pool).expect("V4 pool"),
        )],
    };
    (request, pool)
}

fn read(pool: &hal::Memory, offset: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    nix::sys::uio::pread(pool.fd().expect("fd"), &mut b, offset as i64).expect("pread");
    b
}

fn write(pool: &hal::Memory, offset: u64, bytes: &[u8]) {
    nix::sys::uio::pwrite(pool.fd().expect("fd"), bytes, offset as i64).expect("pwrite");
}

fn sufficient(r: &ExecutionResult) {
    assert!(r.output_sufficient_size, "{r:?}");
}

/// Waits for a fenced result and returns its report.
fn fenced_info(r: aidl::FencedExecutionResult) -> aidl::ExecutionInfo {
    if let Some(fd) = r.sync_fence {
        let h = hal::NativeHandle {
            fds: vec![fd],
            ints: Vec::new(),
        };
        vnpu_driver::fence::wait_all(&[h], hal::OptionalTimePoint::NONE).expect("fence");
    }
    r.callback.get_execution_info().expect("execution info")
}

#[test]
fn reusable_execution_runs_twice() {
    let p = prepare(&add_model());
    let (request, pool) = add_request(&[1.0, 2.0, 3.0, 4.0], &[10.0, 20.0, 30.0, 40.0]);
    let config = ExecutionConfig {
        measure_timing: true,
        ..ExecutionConfig::default()
    };
    let exec = p
        .create_reusable_execution(&request, &config)
        .expect("reusable execution");
    let r = exec.execute_synchronously(NO_DEADLINE).expect("first run");
    sufficient(&r);
    assert!(r.timing.time_on_device_ns <= r.timing.time_in_driver_ns);
    assert_eq!(f32s(&read(&pool, 128, 16)), [11.0, 22.0, 33.0, 44.0]);
    // The second run reads the inputs as they are now (the memory is the client's).
    write(&pool, 0, &f32_bytes(&[5.0, 6.0, 7.0, 8.0]));
    write(&pool, 128, &[0; 16]);
    let r = exec.execute_synchronously(NO_DEADLINE).expect("second run");
    sufficient(&r);
    assert_eq!(f32s(&read(&pool, 128, 16)), [15.0, 26.0, 37.0, 48.0]);
    // And a fenced run of the same execution.
    write(&pool, 128, &[0; 16]);
    let info = fenced_info(
        exec.execute_fenced(&[], NO_DEADLINE, OMITTED)
            .expect("fenced"),
    );
    assert_eq!(info.status, ErrorStatus::None);
    assert_eq!(f32s(&read(&pool, 128, 16)), [15.0, 26.0, 37.0, 48.0]);
}

#[test]
fn reusable_execution_outlives_request_memory_rejected() {
    let dev = face();
    let p = prepare(&add_model());
    let (mut request, pool) = add_request(&[1.0; 4], &[2.0; 4]);
    // Input 0 in a driver-managed buffer.
    let buffer = dev
        .allocate(
            &BufferDesc::default(),
            &[IPreparedModelParcel {
                prepared_model: Some(Arc::clone(&p)),
            }],
            &[BufferRole {
                model_index: 0,
                io_index: 0,
                frequency: 1.0,
            }],
            &[],
        )
        .expect("allocate");
    assert!(buffer.token > 0);
    let src = memory_to_aidl(&hal::Memory::ashmem_with(&f32_bytes(&[3.0; 4])).unwrap()).unwrap();
    buffer.buffer.copy_from(&src, &[]).expect("copyFrom");
    request.pools.push(RequestMemoryPool::Token(buffer.token));
    request.inputs[0].location = DataLocation {
        pool_index: 1,
        ..DataLocation::default()
    };
    let exec = p
        .create_reusable_execution(&request, &ExecutionConfig::default())
        .expect("reusable execution");
    sufficient(&exec.execute_synchronously(NO_DEADLINE).expect("run"));
    assert_eq!(f32s(&read(&pool, 128, 16)), [5.0; 4]);
    // The client's own pool may be let go: the execution holds its descriptor.
    drop(request);
    sufficient(
        &exec
            .execute_synchronously(NO_DEADLINE)
            .expect("run without the request"),
    );
    // The driver-managed buffer freed while the execution lives: its token is no longer a
    // memory, so each execution path refuses the request.
    drop(buffer);
    assert_eq!(
        exec.execute_synchronously(NO_DEADLINE).unwrap_err(),
        INVALID
    );
    let fenced = exec.execute_fenced(&[], NO_DEADLINE, OMITTED);
    assert_eq!(
        fenced.err().map(|e| e.0),
        Some(ErrorStatus::InvalidArgument)
    );
}

#[test]
fn burst_memory_token_release() {
    let p = prepare(&add_model());
    let burst = p.configure_execution_burst().expect("burst");
    let (request, pool) = add_request(&[1.0; 4], &[2.0; 4]);
    let r = burst
        .execute_synchronously(&request, &[7], false, NO_DEADLINE, OMITTED)
        .expect("execute");
    sufficient(&r);
    assert_eq!(f32s(&read(&pool, 128, 16)), [3.0; 4]);
    // Again under the same token: the cached memory, fresh inputs.
    write(&pool, 0, &f32_bytes(&[4.0; 4]));
    burst
        .execute_synchronously(&request, &[7], false, NO_DEADLINE, OMITTED)
        .expect("execute again");
    assert_eq!(f32s(&read(&pool, 128, 16)), [6.0; 4]);
    // Another memory under that same token (a client bug) still runs on that memory.
    let (other, other_pool) = add_request(&[10.0; 4], &[1.0; 4]);
    burst
        .execute_synchronously(&other, &[7], false, NO_DEADLINE, OMITTED)
        .expect("execute on another memory");
    assert_eq!(f32s(&read(&other_pool, 128, 16)), [11.0; 4]);
    // Released, then used again: mapped anew.
    burst.release_memory_resource(7).expect("release");
    burst
        .release_memory_resource(7)
        .expect("releasing an unknown token is fine");
    write(&pool, 0, &f32_bytes(&[0.5; 4]));
    burst
        .execute_synchronously(&request, &[7], false, NO_DEADLINE, OMITTED)
        .expect("execute after release");
    assert_eq!(f32s(&read(&pool, 128, 16)), [2.5; 4]);
    // -1: not cached.
    burst
        .execute_synchronously(&request, &[-1], true, NO_DEADLINE, OMITTED)
        .expect("uncached");
    assert_eq!(burst.release_memory_resource(-2).unwrap_err(), INVALID);
}

#[test]
fn prepare_model_with_config_hints() {
    let map = vec![ExtensionNameAndPrefix {
        name: "vendor.test.test_extension".into(),
        prefix: 0x7AAA,
    }];
    let hints = vec![
        TokenValuePair {
            token: 0x7AAA_000B,
            value: vec![1, 2, 3],
        },
        // A prefix the map does not name, and a token with the sign bit: ignored too.
        TokenValuePair {
            token: 0x1234_0001,
            value: Vec::new(),
        },
        TokenValuePair {
            token: -5,
            value: vec![0],
        },
    ];
    let config = PrepareModelConfig {
        compilation_hints: hints.clone(),
        extension_name_to_prefix: map.clone(),
        ..PrepareModelConfig::default()
    };
    let (status, p) = prepare_with(&add_model(), &config);
    assert_eq!(status, ErrorStatus::None, "unknown hints are ignored");
    let p = p.expect("prepared");
    let (request, pool) = add_request(&[1.0; 4], &[1.0; 4]);
    let exec_config = ExecutionConfig {
        execution_hints: hints.clone(),
        extension_name_to_prefix: map.clone(),
        ..ExecutionConfig::default()
    };
    sufficient(
        &p.execute_synchronously_with_config(&request, &exec_config, NO_DEADLINE)
            .expect("execute with hints"),
    );
    assert_eq!(f32s(&read(&pool, 128, 16)), [2.0; 4]);
    // The HAL's own rules: a token twice, a prefix twice.
    let mut twice = hints.clone();
    twice.push(hints[0].clone());
    let bad = PrepareModelConfig {
        compilation_hints: twice.clone(),
        extension_name_to_prefix: map.clone(),
        ..PrepareModelConfig::default()
    };
    assert_eq!(
        prepare_with(&add_model(), &bad).0,
        ErrorStatus::InvalidArgument
    );
    let bad_exec = ExecutionConfig {
        execution_hints: twice,
        ..ExecutionConfig::default()
    };
    assert_eq!(
        p.execute_synchronously_with_config(&request, &bad_exec, NO_DEADLINE)
            .unwrap_err(),
        INVALID
    );
    let bad_map = PrepareModelConfig {
        extension_name_to_prefix: vec![map[0].clone(), map[0].clone()],
        ..PrepareModelConfig::default()
    };
    assert_eq!(
        prepare_with(&add_model(), &bad_map).0,
        ErrorStatus::InvalidArgument
    );
}

/// `x = 0; while x != limit { x += 1 }`: endless for a limit below 0.
fn counting_model() -> Model {
    let sub = |cond: bool| {
        let mut b = ModelBuilder::default();
        let i: Vec<u32> = (0..3).map(|_| b.input(T::TENSOR_FLOAT32, &[1])).collect();
        if cond {
            let o = b.output(T::TENSOR_BOOL8, &[1]);
            b.op(Op::NOT_EQUAL, &[i[0], i[1]], &[o]);
        } else {
            let o = b.output(T::TENSOR_FLOAT32, &[1]);
            let none = b.constant(T::INT32, &[], &0i32.to_le_bytes());
            b.op(Op::ADD, &[i[0], i[2], none], &[o]);
        }
        b
    };
    let mut m = ModelBuilder::default();
    let limit = m.input(T::TENSOR_FLOAT32, &[1]);
    let zero = m.constant(T::TENSOR_FLOAT32, &[1], &f32_bytes(&[0.0]));
    let one = m.constant(T::TENSOR_FLOAT32, &[1], &f32_bytes(&[1.0]));
    let x = m.output(T::TENSOR_FLOAT32, &[1]);
    let (c, b) = (m.subgraph(0), m.subgraph(1));
    m.op(Op::WHILE, &[c, b, zero, limit, one], &[x]);
    m.build_with(vec![sub(true), sub(false)], Vec::new())
}

/// A counting request: the limit at 0, the output at 64.
fn counting_request(limit: f32) -> (Request, hal::Memory) {
    let mut bytes = vec![0u8; 128];
    bytes[..4].copy_from_slice(&limit.to_le_bytes());
    let pool = hal::Memory::ashmem_with(&bytes).expect("pool");
    let arg = |offset| RequestArgument {
        has_no_value: false,
        location: DataLocation {
            pool_index: 0,
            offset,
            length: 4,
            padding: 0,
        },
        dimensions: Vec::new(),
    };
    let request = Request {
        inputs: vec![arg(0)],
        outputs: vec![arg(64)],
        pools: vec![RequestMemoryPool::Pool(memory_to_aidl(&pool).unwrap())],
    };
    (request, pool)
}

#[test]
fn execution_config_loop_timeout() {
    let p = prepare(&counting_model());
    let short = ExecutionConfig {
        loop_timeout_duration_ns: 1_000_000,
        ..ExecutionConfig::default()
    };
    let (endless, _) = counting_request(-1.0);
    let missed = |r: Result<ExecutionResult, ServiceSpecific>| {
        let e = r.expect_err("the loop must be stopped").0;
        assert!(
            matches!(
                e,
                ErrorStatus::MissedDeadlineTransient | ErrorStatus::MissedDeadlinePersistent
            ),
            "{e}"
        );
    };
    missed(p.execute_synchronously_with_config(&endless, &short, NO_DEADLINE));
    let exec = p
        .create_reusable_execution(&endless, &short)
        .expect("reusable");
    missed(exec.execute_synchronously(NO_DEADLINE));
    missed(exec.execute_synchronously(NO_DEADLINE));
    let burst = p.configure_execution_burst().expect("burst");
    missed(burst.execute_synchronously_with_config(&endless, &[0], &short, NO_DEADLINE));
    // The same configuration lets a finite loop finish, on every path.
    let (finite, pool) = counting_request(3.0);
    sufficient(
        &p.execute_synchronously_with_config(&finite, &short, NO_DEADLINE)
            .expect("finite"),
    );
    assert_eq!(f32s(&read(&pool, 64, 4)), [3.0]);
    let exec = p.create_reusable_execution(&finite, &short).unwrap();
    write(&pool, 64, &[0; 4]);
    sufficient(&exec.execute_synchronously(NO_DEADLINE).unwrap());
    assert_eq!(f32s(&read(&pool, 64, 4)), [3.0]);
    // Above the maximum is capped, not refused; below -1 is invalid.
    let long = ExecutionConfig {
        loop_timeout_duration_ns: aidl::MAXIMUM_LOOP_TIMEOUT_DURATION_NS * 2,
        ..ExecutionConfig::default()
    };
    sufficient(
        &p.execute_synchronously_with_config(&finite, &long, NO_DEADLINE)
            .unwrap(),
    );
    let negative = ExecutionConfig {
        loop_timeout_duration_ns: -2,
        ..ExecutionConfig::default()
    };
    assert_eq!(
        p.execute_synchronously_with_config(&finite, &negative, NO_DEADLINE)
            .unwrap_err(),
        INVALID
    );
    assert_eq!(
        p.create_reusable_execution(&finite, &negative).err(),
        Some(INVALID)
    );
}

#[test]
fn data_location_padding() {
    let p = prepare(&add_model());
    let (mut request, pool) = add_request(&[1.0; 4], &[2.0; 4]);
    // Padded to 64 bytes, as the VTS harness and the runtime lay requests out.
    for a in request.inputs.iter_mut().chain(request.outputs.iter_mut()) {
        a.location.padding = 48;
    }
    sufficient(
        &p.execute_synchronously(&request, false, NO_DEADLINE, OMITTED)
            .expect("padded"),
    );
    assert_eq!(f32s(&read(&pool, 128, 16)), [3.0; 4]);
    // The padding is never output data: an output one byte short, its padding one longer,
    // is OUTPUT_INSUFFICIENT_SIZE (VTS makeOutputInsufficientSize).
    let mut short = request.clone();
    short.outputs[0].location.length -= 1;
    short.outputs[0].location.padding += 1;
    let r = p
        .execute_synchronously(&short, false, NO_DEADLINE, OMITTED)
        .expect("a result");
    assert!(!r.output_sufficient_size);
    assert_eq!(r.output_shapes[0].dimensions, [4]);
    assert!(!r.output_shapes[0].is_sufficient);
    let exec = p
        .create_reusable_execution(&short, &ExecutionConfig::default())
        .expect("reusable");
    let r = exec.execute_synchronously(NO_DEADLINE).expect("a result");
    assert!(!r.output_sufficient_size);
    // Past the pool's end (192 bytes), negative, on an omitted argument: invalid.
    let mut past = request.clone();
    past.outputs[0].location.padding = 49;
    let mut negative = request.clone();
    negative.inputs[1].location.padding = -16;
    for bad in [past, negative] {
        assert_eq!(
            p.execute_synchronously(&bad, false, NO_DEADLINE, OMITTED)
                .unwrap_err(),
            INVALID
        );
        assert_eq!(
            p.create_reusable_execution(&bad, &ExecutionConfig::default())
                .err(),
            Some(INVALID)
        );
    }
}

#[test]
fn mappable_file_pool() {
    let p = prepare(&add_model());
    // A file mapped from its second page: a at 0, b at 64, the output at 128 of the range.
    let fd: OwnedFd =
        nix::sys::memfd::memfd_create(c"vnpu-mappable", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .expect("memfd");
    nix::unistd::ftruncate(&fd, 8192).expect("size");
    nix::sys::uio::pwrite(&fd, &f32_bytes(&[1.0, 2.0, 3.0, 4.0]), 4096).unwrap();
    nix::sys::uio::pwrite(&fd, &f32_bytes(&[0.5; 4]), 4096 + 64).unwrap();
    let fd = Arc::new(fd);
    let (mut request, _) = add_request(&[0.0; 4], &[0.0; 4]);
    request.pools = vec![RequestMemoryPool::Pool(Memory::MappableFile(
        MappableFile {
            length: 4096,
            prot: libc_prot_read_write(),
            fd: Arc::clone(&fd),
            offset: 4096,
        },
    ))];
    // Clears the output before each run, so each run's answer is its own.
    let clear = || {
        nix::sys::uio::pwrite(&*fd, &[0; 16], 4096 + 128).unwrap();
    };
    clear();
    sufficient(
        &p.execute_synchronously(&request, true, NO_DEADLINE, OMITTED)
            .expect("mappable file"),
    );
    let mut out = vec![0u8; 16];
    nix::sys::uio::pread(&*fd, &mut out, 4096 + 128).unwrap();
    assert_eq!(f32s(&out), [1.5, 2.5, 3.5, 4.5]);
    // Through a burst and a reusable execution too.
    clear();
    let burst = p.configure_execution_burst().unwrap();
    sufficient(
        &burst
            .execute_synchronously(&request, &[1], false, NO_DEADLINE, OMITTED)
            .unwrap(),
    );
    nix::sys::uio::pread(&*fd, &mut out, 4096 + 128).unwrap();
    assert_eq!(f32s(&out), [1.5, 2.5, 3.5, 4.5]);
    clear();
    let exec = p
        .create_reusable_execution(&request, &ExecutionConfig::default())
        .unwrap();
    sufficient(&exec.execute_synchronously(NO_DEADLINE).unwrap());
    nix::sys::uio::pread(&*fd, &mut out, 4096 + 128).unwrap();
    assert_eq!(f32s(&out), [1.5, 2.5, 3.5, 4.5]);
    // A location past the mapped range's length is refused.
    let mut past = request.clone();
    past.outputs[0].location.offset = 4096 - 8;
    assert_eq!(
        p.execute_synchronously(&past, false, NO_DEADLINE, OMITTED)
            .unwrap_err(),
        INVALID
    );
}

/// PROT_READ | PROT_WRITE.
fn libc_prot_read_write() -> i32 {
    (nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE).bits()
}

#[test]
fn fenced_with_config_duration() {
    let p = prepare(&add_model());
    let (request, pool) = add_request(&[1.0; 4], &[4.0; 4]);
    let measured = ExecutionConfig {
        measure_timing: true,
        ..ExecutionConfig::default()
    };
    // No duration: runs, reports NONE with timings that hold together.
    let r = p
        .execute_fenced_with_config(&request, &[], &measured, NO_DEADLINE, OMITTED)
        .expect("fenced");
    let info = fenced_info(r);
    assert_eq!(info.status, ErrorStatus::None);
    for t in [info.timing_launched, info.timing_fenced] {
        assert!(t.time_on_device_ns >= 0 && t.time_on_device_ns <= t.time_in_driver_ns);
    }
    assert_eq!(f32s(&read(&pool, 128, 16)), [5.0; 4]);
    // A generous duration: runs.
    let r = p
        .execute_fenced_with_config(&request, &[], &measured, NO_DEADLINE, 60_000_000_000)
        .expect("fenced within a minute");
    assert_eq!(fenced_info(r).status, ErrorStatus::None);
    // A fence that never signals and a short duration: the deadline is missed.
    let never = vnpu_driver::fence::SyncFence::new().unwrap();
    let fd = never.handle().unwrap().fds[0].clone();
    let r = p.execute_fenced_with_config(&request, &[fd], &measured, NO_DEADLINE, 5_000_000);
    let e = r.err().expect("the duration passes while waiting").0;
    assert!(
        matches!(
            e,
            ErrorStatus::MissedDeadlineTransient | ErrorStatus::MissedDeadlinePersistent
        ),
        "{e}"
    );
    // A signalled fence: runs.
    let done = vnpu_driver::fence::SyncFence::new().unwrap();
    done.signal().unwrap();
    let fd = done.handle().unwrap().fds[0].clone();
    let r = p
        .execute_fenced_with_config(&request, &[fd], &measured, NO_DEADLINE, 60_000_000_000)
        .expect("after a signalled fence");
    assert_eq!(fenced_info(r).status, ErrorStatus::None);
    // Zero duration, negative durations and deadlines.
    let zero = p.execute_fenced_with_config(&request, &[], &measured, NO_DEADLINE, 0);
    assert!(zero.is_err());
    for (deadline, duration) in [(NO_DEADLINE, -2), (-2, OMITTED)] {
        let r = p.execute_fenced_with_config(&request, &[], &measured, deadline, duration);
        assert_eq!(r.err(), Some(INVALID));
    }
}

// ---- Ports of the AIDL VTS ValidateModel / ValidateRequest / ValidateBurst ----

fn corpus_cases() -> Vec<TestCase> {
    let path = common::corpus_path("V1_0.jsonl.gz");
    corpus::read_corpus(&path)
        .expect("V1_0 corpus")
        .into_iter()
        .filter_map(|(_, c)| c.ok())
        .filter(|c| !c.expect_failure)
        // Every fourth case: each still goes through every V4 path.
        .step_by(4)
        .collect()
}

/// The V4 request of a corpus case.
fn case_request(case: &TestCase) -> Request {
    let (request, _, _) = case.make_request().expect("request");
    request_to_aidl(&request).expect("V4 request")
}

/// VTS `validate` (ValidateRequest.cpp): a mutated request is INVALID_ARGUMENT on every
/// path: executeSynchronously, executeFenced, a burst (tokens -1), a reusable execution
/// (refused when made, or when run), and the WithConfig forms.
fn expect_invalid_everywhere(p: &Arc<dyn IPreparedModel>, request: &Request, what: &str) {
    let err = |r: Option<ServiceSpecific>, path: &str| {
        assert_eq!(r, Some(INVALID), "{what} [{path}]");
    };
    let config = ExecutionConfig::default();
    let slots = vec![-1; request.pools.len()];
    err(
        p.execute_synchronously(request, false, NO_DEADLINE, OMITTED)
            .err(),
        "executeSynchronously",
    );
    err(
        p.execute_fenced(request, &[], false, NO_DEADLINE, OMITTED, OMITTED)
            .err(),
        "executeFenced",
    );
    let burst = p.configure_execution_burst().expect("burst");
    err(
        burst
            .execute_synchronously(request, &slots, false, NO_DEADLINE, OMITTED)
            .err(),
        "burst",
    );
    match p.create_reusable_execution(request, &config) {
        Err(e) => err(Some(e), "createReusableExecution"),
        Ok(exec) => {
            err(
                exec.execute_synchronously(NO_DEADLINE).err(),
                "reusable sync",
            );
            err(
                exec.execute_fenced(&[], NO_DEADLINE, OMITTED).err(),
                "reusable fenced",
            );
        }
    }
    err(
        p.execute_synchronously_with_config(request, &config, NO_DEADLINE)
            .err(),
        "executeSynchronouslyWithConfig",
    );
    err(
        p.execute_fenced_with_config(request, &[], &config, NO_DEADLINE, OMITTED)
            .err(),
        "executeFencedWithConfig",
    );
    err(
        burst
            .execute_synchronously_with_config(request, &slots, &config, NO_DEADLINE)
            .err(),
        "burst executeSynchronouslyWithConfig",
    );
}

fn supported_prepared(case: &TestCase) -> Option<Arc<dyn IPreparedModel>> {
    let model = model_to_aidl(&case.model).ok()?;
    let supported = face().get_supported_operations(&model).ok()?;
    if !supported.iter().all(|&s| s) {
        return None;
    }
    Some(prepare(&case.model))
}

#[test]
fn vts_validate_request_remove_input_output_on_every_v4_path() {
    let mut checked = 0;
    for case in corpus_cases() {
        let Some(p) = supported_prepared(&case) else {
            continue;
        };
        let request = case_request(&case);
        for k in 0..request.inputs.len() {
            let mut r = request.clone();
            r.inputs.remove(k);
            expect_invalid_everywhere(&p, &r, &format!("{}: removed input {k}", case.name));
        }
        for k in 0..request.outputs.len() {
            let mut r = request.clone();
            r.outputs.remove(k);
            expect_invalid_everywhere(&p, &r, &format!("{}: removed output {k}", case.name));
        }
        // V4's own fields: padding past the pool, padding on an omitted input, a negative
        // offset, a negative dimension.
        let pool_size = match &request.pools[0] {
            RequestMemoryPool::Pool(Memory::Ashmem(a)) => a.size,
            _ => unreachable!("make_request builds one ashmem pool"),
        };
        if let Some(k) = request.outputs.iter().position(|a| !a.has_no_value) {
            let mut r = request.clone();
            let loc = &mut r.outputs[k].location;
            loc.padding = pool_size - loc.offset - loc.length + 1;
            expect_invalid_everywhere(&p, &r, &format!("{}: padding past the pool", case.name));
            let mut r = request.clone();
            r.outputs[k].location.offset = -64;
            expect_invalid_everywhere(&p, &r, &format!("{}: negative offset", case.name));
            let mut r = request.clone();
            r.outputs[k].dimensions = vec![-1];
            expect_invalid_everywhere(&p, &r, &format!("{}: negative dimension", case.name));
        }
        if let Some(k) = request.inputs.iter().position(|a| a.has_no_value) {
            let mut r = request.clone();
            r.inputs[k].location.padding = 4;
            expect_invalid_everywhere(&p, &r, &format!("{}: padded omitted input", case.name));
        }
        checked += 1;
    }
    assert!(checked > 20, "only {checked} cases checked");
}

#[test]
fn vts_validate_burst_memory_identifier_tokens() {
    let mut checked = 0;
    for case in corpus_cases().into_iter().take(40) {
        let Some(p) = supported_prepared(&case) else {
            continue;
        };
        let request = case_request(&case);
        let burst = p.configure_execution_burst().expect("burst");
        let test = |slots: &[i64]| {
            let r = burst.execute_synchronously(&request, slots, false, NO_DEADLINE, OMITTED);
            assert_eq!(r.err(), Some(INVALID), "{}: slots {slots:?}", case.name);
        };
        let mut slots: Vec<i64> = (0..request.pools.len() as i64).collect();
        for i in 0..slots.len() {
            let old = slots[i];
            slots[i] = -2;
            test(&slots);
            slots[i] = old;
        }
        if !request.pools.is_empty() {
            test(&vec![-1; request.pools.len() - 1]);
        }
        test(&vec![-1; request.pools.len() + 1]);
        assert_eq!(burst.release_memory_resource(-2).err(), Some(INVALID));
        // And the valid slots run.
        let r = burst.execute_synchronously(&request, &slots, false, NO_DEADLINE, OMITTED);
        assert!(r.is_ok(), "{}: {r:?}", case.name);
        checked += 1;
    }
    assert!(checked > 5, "only {checked} cases checked");
}

#[test]
fn vts_validate_model_prepare_model_with_config() {
    // prepareModelWithConfig must satisfy all requirements enforced by prepareModel: a
    // bad preference or priority, and a model mutated to invalid, are INVALID_ARGUMENT
    // thrown and notified, with no model.
    let model = add_model();
    for (preference, priority) in [
        (ExecutionPreference(-1), Priority::MEDIUM),
        (ExecutionPreference(3), Priority::MEDIUM),
        (ExecutionPreference::FAST_SINGLE_ANSWER, Priority(-1)),
        (ExecutionPreference::FAST_SINGLE_ANSWER, Priority(3)),
    ] {
        let config = PrepareModelConfig {
            preference,
            priority,
            ..PrepareModelConfig::default()
        };
        assert_eq!(
            prepare_with(&model, &config).0,
            ErrorStatus::InvalidArgument
        );
        let slot = PreparedModelSlot::new();
        let ret = face().prepare_model(
            &model_to_aidl(&model).unwrap(),
            preference,
            priority,
            NO_DEADLINE,
            &[],
            &[],
            &[0; 32],
            Some(slot.clone()),
        );
        assert_eq!(ret.err(), Some(INVALID));
        assert_eq!(slot.wait().0, ErrorStatus::InvalidArgument);
    }
    let mut bad_type = model.clone();
    bad_type.main.operands[0].r#type = T(1234);
    let mut bad_op = model.clone();
    bad_op.main.operations[0].r#type = Op(-3);
    let mut bad_index = model.clone();
    bad_index.main.operations[0].inputs[0] = 99;
    for (what, m) in [
        ("operand type", bad_type),
        ("operation type", bad_op),
        ("input index", bad_index),
    ] {
        let (status, p) = prepare_with(&m, &PrepareModelConfig::default());
        assert_eq!(status, ErrorStatus::InvalidArgument, "{what}");
        assert!(p.is_none());
        let ops = face().get_supported_operations(&model_to_aidl(&m).unwrap());
        assert_eq!(ops.err(), Some(INVALID), "{what}: getSupportedOperations");
    }
    // V4's own arguments: a negative deadline other than -1, a token of the wrong size.
    let config = PrepareModelConfig {
        deadline_ns: -2,
        ..PrepareModelConfig::default()
    };
    assert_eq!(
        prepare_with(&model, &config).0,
        ErrorStatus::InvalidArgument
    );
    let slot = PreparedModelSlot::new();
    let ret = face().prepare_model(
        &model_to_aidl(&model).unwrap(),
        ExecutionPreference::FAST_SINGLE_ANSWER,
        Priority::MEDIUM,
        NO_DEADLINE,
        &[],
        &[],
        &[0; 31],
        Some(slot.clone()),
    );
    assert_eq!(ret.err(), Some(INVALID));
    assert_eq!(slot.wait().0, ErrorStatus::InvalidArgument);
}

#[test]
fn runner_runs_cases_through_v4_on_every_path() {
    use vnpu_driver::conformance::{
        prepare_plain, run_case_opts, ExecOptions, ExecPath, Interface, MemoryMode, Verdict,
    };
    let dev = device();
    let cases: Vec<TestCase> = corpus_cases().into_iter().take(12).collect();
    for path in [
        ExecPath::Async,
        ExecPath::Sync,
        ExecPath::Fenced,
        ExecPath::Burst,
        ExecPath::Reusable,
    ] {
        for memory in [MemoryMode::Shared, MemoryMode::Blob, MemoryMode::Device] {
            let exec = ExecOptions {
                path,
                memory,
                interface: Interface::Aidl,
                ..Default::default()
            };
            for case in &cases {
                let report = run_case_opts(dev.as_ref(), case, &prepare_plain, exec);
                assert_eq!(
                    report.verdict,
                    Verdict::Pass,
                    "{} {path:?} {memory:?}",
                    case.name
                );
            }
        }
    }
    // Reusable executions are AIDL's: under HIDL the case fails with the reason.
    let exec = ExecOptions {
        path: ExecPath::Reusable,
        ..Default::default()
    };
    let report = run_case_opts(dev.as_ref(), &cases[0], &prepare_plain, exec);
    assert!(matches!(report.verdict, Verdict::Fail(ref why) if why.contains("--interface aidl")));
}

/// Every V4 call through `vnpu serve` answers as the local device does: queries,
/// prepareModelWithConfig, executions on every path (the reusable execution and the
/// burst living in the service), and corpus cases through the runner.
#[test]
fn remote_aidl_matches_local() {
    use vnpu_driver::conformance::{
        prepare_plain, run_case_opts, ExecOptions, ExecPath, Interface, Verdict,
    };
    let service = common::service::Service::start("aidl");
    let remote_core: Arc<dyn vnpu_driver::interface::IDevice> = Arc::new(service.connect());
    let remote = AidlDevice::new(Arc::clone(&remote_core));
    let local = face();
    assert_eq!(
        remote.get_capabilities().unwrap(),
        local.get_capabilities().unwrap()
    );
    assert_eq!(
        remote.get_version_string().unwrap(),
        local.get_version_string().unwrap()
    );
    assert_eq!(
        remote.get_number_of_cache_files_needed().unwrap(),
        local.get_number_of_cache_files_needed().unwrap()
    );
    let model = model_to_aidl(&add_model()).unwrap();
    assert_eq!(
        remote.get_supported_operations(&model).unwrap(),
        local.get_supported_operations(&model).unwrap()
    );
    let config = PrepareModelConfig {
        compilation_hints: vec![TokenValuePair {
            token: 0x0001_0002,
            value: vec![7],
        }],
        ..PrepareModelConfig::default()
    };
    let prepare_on = |dev: &dyn IDevice| {
        let slot = PreparedModelSlot::new();
        dev.prepare_model_with_config(&model, &config, Some(slot.clone()))
            .expect("prepareModelWithConfig");
        let (status, p) = slot.wait();
        assert_eq!(status, ErrorStatus::None);
        p.expect("prepared")
    };
    // What each face gives for the same work: every path's outputs and statuses.
    let run = |p: &Arc<dyn IPreparedModel>| -> Vec<(String, Vec<f32>)> {
        let mut seen = Vec::new();
        let (request, pool) = add_request(&[1.0, 2.0, 3.0, 4.0], &[0.5; 4]);
        let mut note = |what: &str, ok: bool| {
            seen.push((format!("{what}: {ok}"), f32s(&read(&pool, 128, 16))));
            write(&pool, 128, &[0; 16]);
        };
        let r = p.execute_synchronously(&request, true, NO_DEADLINE, OMITTED);
        note("sync", r.is_ok_and(|r| r.output_sufficient_size));
        let r = p.execute_synchronously_with_config(&request, &ExecutionConfig::default(), -1);
        note("sync with config", r.is_ok());
        let f = p.execute_fenced(&request, &[], true, NO_DEADLINE, OMITTED, OMITTED);
        note(
            "fenced",
            f.is_ok_and(|f| fenced_info(f).status == ErrorStatus::None),
        );
        let exec = p
            .create_reusable_execution(&request, &ExecutionConfig::default())
            .expect("reusable");
        for k in 0..2 {
            let r = exec.execute_synchronously(NO_DEADLINE);
            note(&format!("reusable run {k}"), r.is_ok());
        }
        let f = exec.execute_fenced(&[], NO_DEADLINE, OMITTED);
        note(
            "reusable fenced",
            f.is_ok_and(|f| fenced_info(f).status == ErrorStatus::None),
        );
        let burst = p.configure_execution_burst().expect("burst");
        for k in 0..2 {
            let r = burst.execute_synchronously(&request, &[3], false, NO_DEADLINE, OMITTED);
            note(&format!("burst run {k}"), r.is_ok());
        }
        note("release", burst.release_memory_resource(3).is_ok());
        note(
            "release -2",
            burst.release_memory_resource(-2) == Err(INVALID),
        );
        let mut short = request.clone();
        short.outputs[0].location.length -= 1;
        short.outputs[0].location.padding += 1;
        let r = p.execute_synchronously(&short, false, NO_DEADLINE, OMITTED);
        note("insufficient", r.is_ok_and(|r| !r.output_sufficient_size));
        let mut bad = request.clone();
        bad.inputs.pop();
        let r = p.create_reusable_execution(&bad, &ExecutionConfig::default());
        note("invalid reusable", r.err() == Some(INVALID));
        seen
    };
    let here = run(&prepare_on(&local));
    let there = run(&prepare_on(&remote));
    assert_eq!(here, there);
    assert!(
        here.iter().all(|(what, _)| what.ends_with("true")),
        "{here:?}"
    );
    // A reusable execution in the service outlives the client's request memory.
    let p = prepare_on(&remote);
    let (request, pool) = add_request(&[2.0; 4], &[2.0; 4]);
    let exec = p
        .create_reusable_execution(&request, &ExecutionConfig::default())
        .unwrap();
    drop(request);
    sufficient(&exec.execute_synchronously(NO_DEADLINE).unwrap());
    assert_eq!(f32s(&read(&pool, 128, 16)), [4.0; 4]);
    // Corpus cases through the runner over the service, every V4 path.
    let cases: Vec<TestCase> = corpus_cases().into_iter().take(8).collect();
    for path in [
        ExecPath::Async,
        ExecPath::Sync,
        ExecPath::Burst,
        ExecPath::Reusable,
    ] {
        let exec = ExecOptions {
            path,
            interface: Interface::Aidl,
            ..Default::default()
        };
        for case in &cases {
            let report = run_case_opts(remote_core.as_ref(), case, &prepare_plain, exec);
            assert_eq!(report.verdict, Verdict::Pass, "{} {path:?}", case.name);
        }
    }
}

/// prepareModelWithConfig saves to the cache files it is given; prepareModelFromCache
/// (V4) loads them back into a model that runs, and a wrong token is refused.
#[test]
fn prepare_model_from_cache_through_v4() {
    let dir = std::env::temp_dir().join(format!("vnpu-aidl-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let counts = face().get_number_of_cache_files_needed().unwrap();
    let path = |kind: &str, k: i32| dir.join(format!("{kind}{k}"));
    let open = |p: &std::path::Path| -> aidl::ParcelFileDescriptor {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(p)
            .unwrap();
        Arc::new(OwnedFd::from(f))
    };
    let files = || {
        let m: Vec<_> = (0..counts.num_model_cache)
            .map(|k| open(&path("model", k)))
            .collect();
        let d: Vec<_> = (0..counts.num_data_cache)
            .map(|k| open(&path("data", k)))
            .collect();
        (m, d)
    };
    let (model_cache, data_cache) = files();
    let config = PrepareModelConfig {
        model_cache,
        data_cache,
        cache_token: [7; 32],
        ..PrepareModelConfig::default()
    };
    let (status, _) = prepare_with(&add_model(), &config);
    assert_eq!(status, ErrorStatus::None);
    let from_cache = |token: [u8; 32]| {
        let (model_cache, data_cache) = files();
        let slot = PreparedModelSlot::new();
        let ret = face().prepare_model_from_cache(
            NO_DEADLINE,
            &model_cache,
            &data_cache,
            &token,
            Some(slot.clone()),
        );
        let (status, p) = slot.wait();
        assert_eq!(ret.err().map_or(ErrorStatus::None, |e| e.0), status);
        (status, p)
    };
    let (status, p) = from_cache([7; 32]);
    assert_eq!(status, ErrorStatus::None);
    let p = p.expect("loaded");
    let (request, pool) = add_request(&[1.0; 4], &[6.0; 4]);
    sufficient(
        &p.execute_synchronously(&request, false, NO_DEADLINE, OMITTED)
            .unwrap(),
    );
    assert_eq!(f32s(&read(&pool, 128, 16)), [7.0; 4]);
    let (status, p) = from_cache([8; 32]);
    assert_ne!(
        status,
        ErrorStatus::None,
        "another token's files must not load"
    );
    assert!(p.is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
