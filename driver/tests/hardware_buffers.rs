//! Hardware-buffer pools ("hardware_buffer_blob", "hardware_buffer") from vnpu-gralloc as a
//! client passes them: request pools for inputs and outputs on every execution path, model
//! pools, `IBuffer` copies; a handle the mapper refuses (forged, freed) is a
//! GENERAL_FAILURE; a buffer a client holds locked for write is read only after the fence
//! the client signals once it unlocked.

mod common;

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use common::{execute, prepare, supported_cases, Mode, MODES};
use vnpu_driver::conformance::corpus::TestCase;
use vnpu_driver::conformance::{output_matches, outputs_match};
use vnpu_driver::device::{IDevice, IPreparedModel};
use vnpu_driver::fence::SyncFence;
use vnpu_driver::hal::{
    BufferDesc, BufferRole, DataLocation, ErrorStatus, MeasureTiming, Memory, OptionalTimePoint,
    OptionalTimeoutDuration, Request, RequestMemoryPool, MEMORY_HARDWARE_BUFFER,
};
use vnpu_driver::hwbuf::{allocate_blob, memory_from};
use vnpu_gralloc::{pixel_format, usage, Allocator, BufferDescriptorInfo, Mapper, RawHandle, Rect};

/// A few supported cases of different operand types (float32, float16, quantised).
fn some_cases() -> Vec<TestCase> {
    let mut cases = Vec::new();
    for file in ["V1_0.jsonl.gz", "V1_2.jsonl.gz"] {
        let all = supported_cases(file);
        cases.extend(
            all.into_iter()
                .filter(|c| !c.expect_failure && !c.outputs.is_empty())
                .step_by(97)
                .take(4),
        );
    }
    assert!(cases.len() >= 6, "enough corpus cases");
    cases
}

/// The first `len` bytes of a pool's (pixel) file.
fn prefix(pool: &Memory, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    let n = nix::sys::uio::pread(pool.fd().unwrap().as_fd(), &mut b, 0).unwrap();
    assert_eq!(n, len);
    b
}

fn pool_bytes(pool: &Memory) -> Vec<u8> {
    prefix(pool, pool.size as usize)
}

/// The case's request with its inputs in one BLOB buffer and its outputs in another
/// (same offsets); returns the request and the output buffer.
fn blob_request(case: &TestCase) -> (Request, Memory, Vec<DataLocation>) {
    let (mut request, pool, locations) = case.make_request().unwrap();
    let inputs = allocate_blob(&pool_bytes(&pool)).unwrap();
    let outputs = allocate_blob(&vec![0u8; pool.size as usize]).unwrap();
    request.pools = vec![
        RequestMemoryPool::HidlMemory(inputs),
        RequestMemoryPool::HidlMemory(outputs.clone()),
    ];
    for o in &mut request.outputs {
        o.location.pool_index = 1;
    }
    (request, outputs, locations)
}

#[test]
fn blob_buffers_carry_inputs_and_outputs_on_every_path() {
    for case in some_cases() {
        let prepared = prepare(&case.model).1.expect("prepared");
        for &mode in MODES {
            let (request, outputs, locations) = blob_request(&case);
            let (status, _, _) = execute(&prepared, &request, mode, MeasureTiming::YES);
            assert_eq!(status, ErrorStatus::None, "{} {mode:?}", case.name);
            assert!(
                outputs_match(&case, &outputs, &locations),
                "{} {mode:?}: outputs differ from the reference",
                case.name
            );
        }
    }
}

/// A non-BLOB (R_8) buffer whose pixel memory holds `bytes` at its start, as a
/// "hardware_buffer" memory (size 0).
fn non_blob_with(bytes: &[u8]) -> Memory {
    let width = 64;
    let height = i32::try_from(bytes.len().div_ceil(64).max(1)).unwrap();
    let info = BufferDescriptorInfo::new(
        width,
        height,
        pixel_format::R_8,
        usage::CPU_READ_OFTEN | usage::CPU_WRITE_OFTEN | usage::GPU_TEXTURE,
    );
    let handle = Allocator::new()
        .allocate(&info, 1)
        .unwrap()
        .buffers
        .remove(0);
    let mem = memory_from(&handle, MEMORY_HARDWARE_BUFFER, 0).unwrap();
    nix::sys::uio::pwrite(mem.fd().unwrap().as_fd(), bytes, 0).unwrap();
    mem
}

#[test]
fn non_blob_buffers_serve_executions_only() {
    let whole = DataLocation::default();
    for case in some_cases().into_iter().take(3) {
        let prepared = prepare(&case.model).1.expect("prepared");
        let (mut request, _, _) = case.make_request().unwrap();
        // One buffer per argument, named whole (offset and length 0).
        request.pools.clear();
        let mut images = Vec::new();
        for (arg, input) in request.inputs.iter_mut().zip(&case.inputs) {
            if arg.has_no_value {
                continue;
            }
            request
                .pools
                .push(RequestMemoryPool::HidlMemory(non_blob_with(&input.data)));
            arg.location = DataLocation {
                pool_index: request.pools.len() as u32 - 1,
                ..whole
            };
        }
        for (arg, output) in request.outputs.iter_mut().zip(&case.outputs) {
            let image = non_blob_with(&vec![0; output.data.len()]);
            request
                .pools
                .push(RequestMemoryPool::HidlMemory(image.clone()));
            arg.location = DataLocation {
                pool_index: request.pools.len() as u32 - 1,
                ..whole
            };
            images.push(image);
        }
        let (status, _, _) = execute(&prepared, &request, Mode::Sync, MeasureTiming::NO);
        assert_eq!(status, ErrorStatus::None, "{}", case.name);
        for (k, (want, image)) in case.outputs.iter().zip(&images).enumerate() {
            let got = prefix(image, want.data.len());
            assert!(output_matches(&case, k, &got), "{} output {k}", case.name);
        }
    }
    // Not as a model pool (NN allows non-BLOB buffers in requests only).
    let case = constants_case();
    let mut model = case.model.clone();
    model.pools[0] = non_blob_with(&pool_bytes(&case.model.pools[0]));
    assert_ne!(prepare(&model).0, ErrorStatus::None);
}

fn constants_case() -> TestCase {
    supported_cases("V1_0.jsonl.gz")
        .into_iter()
        .find(|c| c.model.pools.len() == 1 && !c.expect_failure)
        .expect("a case with CONSTANT_REFERENCE operands")
}

#[test]
fn blob_buffers_hold_model_constants() {
    let case = constants_case();
    let mut model = case.model.clone();
    model.pools[0] = allocate_blob(&pool_bytes(&case.model.pools[0])).unwrap();
    let prepared = prepare(&model).1.expect("prepared from a BLOB model pool");
    let (request, pool, locations) = case.make_request().unwrap();
    let (status, _, _) = execute(&prepared, &request, Mode::Async, MeasureTiming::NO);
    assert_eq!(status, ErrorStatus::None);
    assert!(outputs_match(&case, &pool, &locations));
}

/// `mem` with its magic int corrupted.
fn forged(mem: &Memory) -> Memory {
    let mut m = mem.clone();
    m.handle.ints[0] ^= 0x40;
    m
}

/// `mem` after its buffer was freed and its descriptor numbers reused: the ints of the
/// freed buffer over the files of another live buffer of the same size.
fn freed(mem: &Memory) -> Memory {
    let other = allocate_blob(&vec![0u8; mem.size as usize]).unwrap();
    Memory {
        handle: vnpu_driver::hal::NativeHandle {
            fds: other.handle.fds.clone(),
            ints: mem.handle.ints.clone(),
        },
        ..mem.clone()
    }
}

#[test]
fn forged_or_freed_handles_are_general_failures() {
    let case = constants_case();
    let prepared = prepare(&case.model).1.expect("prepared");
    for bad in [forged as fn(&Memory) -> Memory, freed] {
        for &mode in MODES {
            for pool in 0..2 {
                let (mut request, _, _) = blob_request(&case);
                let RequestMemoryPool::HidlMemory(m) = &request.pools[pool] else {
                    unreachable!()
                };
                request.pools[pool] = RequestMemoryPool::HidlMemory(bad(m));
                let (status, _, _) = execute(&prepared, &request, mode, MeasureTiming::NO);
                assert_eq!(status, ErrorStatus::GeneralFailure, "{mode:?} pool {pool}");
            }
        }
        let mut model = case.model.clone();
        model.pools[0] = bad(&allocate_blob(&pool_bytes(&case.model.pools[0])).unwrap());
        assert_eq!(prepare(&model).0, ErrorStatus::GeneralFailure);
    }
}

#[test]
fn a_buffer_locked_elsewhere_for_write_is_read_after_its_fence() {
    let case = constants_case();
    let prepared = prepare(&case.model).1.expect("prepared");
    let (mut request, pool, locations) = case.make_request().unwrap();
    let bytes = pool_bytes(&pool);
    // The client's buffer starts zeroed; the client fills it under a write lock.
    let blob = allocate_blob(&vec![0u8; bytes.len()]).unwrap();
    request.pools = vec![RequestMemoryPool::HidlMemory(blob.clone())];
    let mapper = Mapper::new();
    let fds: Vec<_> = blob
        .handle
        .fds
        .iter()
        .map(|f| std::os::fd::AsRawFd::as_raw_fd(f.as_ref()))
        .collect();
    let raw = RawHandle {
        version: vnpu_gralloc::handle::NATIVE_HANDLE_VERSION,
        fds: &fds,
        ints: &blob.handle.ints,
    };
    let client = mapper.import_buffer(raw).unwrap();
    let ptr = mapper
        .lock(client, usage::CPU_WRITE_OFTEN, Rect::default(), None)
        .unwrap();
    let fence = SyncFence::new().unwrap();
    let wait_for = fence.handle().unwrap();
    let run = {
        let prepared: Arc<dyn IPreparedModel> = Arc::clone(&prepared);
        let request = request.clone();
        std::thread::spawn(move || {
            let none = OptionalTimeoutDuration(None);
            let (status, done, callback) = prepared.execute_fenced(
                &request,
                &[wait_for],
                MeasureTiming::NO,
                OptionalTimePoint::NONE,
                none,
                none,
            );
            assert_eq!(status, ErrorStatus::None);
            vnpu_driver::fence::wait_all(&[done.unwrap()], OptionalTimePoint::NONE).unwrap();
            callback.unwrap().get_execution_info().0
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !run.is_finished(),
        "the execution waits for the client's fence"
    );
    // SAFETY: `ptr` is the start of the locked buffer's pixel mapping, at least
    // `bytes.len()` long; the driver touches the buffer only after the fence below.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
    assert!(mapper.unlock(client).unwrap().is_none());
    fence.signal().unwrap();
    assert_eq!(run.join().unwrap(), ErrorStatus::None);
    assert!(
        outputs_match(&case, &blob, &locations),
        "the execution saw the bytes written under the lock"
    );
    mapper.free_buffer(client).unwrap();
}

#[test]
fn driver_managed_buffers_copy_from_and_to_blob_buffers() {
    let dev = common::device();
    let case = constants_case();
    let prepared = prepare(&case.model).1.expect("prepared");
    let role = BufferRole {
        model_index: 0,
        io_index: 0,
        frequency: 1.0,
    };
    let (status, buffer, _) = dev.allocate(
        &BufferDesc::default(),
        &[Some(Arc::clone(&prepared))],
        &[role],
        &[],
    );
    assert_eq!(status, ErrorStatus::None);
    let buffer = buffer.unwrap();
    let data = &case.inputs[0].data;
    let src = allocate_blob(data).unwrap();
    assert_eq!(buffer.copy_from(&src, &[]), ErrorStatus::None);
    let dst = allocate_blob(&vec![0u8; data.len()]).unwrap();
    assert_eq!(buffer.copy_to(&dst), ErrorStatus::None);
    assert_eq!(&pool_bytes(&dst), data);
    assert_eq!(buffer.copy_to(&freed(&dst)), ErrorStatus::GeneralFailure);
    assert_eq!(buffer.copy_to(&forged(&dst)), ErrorStatus::GeneralFailure);
    assert_eq!(
        buffer.copy_from(&forged(&src), &[]),
        ErrorStatus::GeneralFailure
    );
    let image = non_blob_with(data);
    assert_eq!(buffer.copy_from(&image, &[]), ErrorStatus::GeneralFailure);
}
