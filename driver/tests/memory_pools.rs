//! Memory pools as clients pass them: "ashmem" and "mmap_fd" (with an offset and a
//! protection), for constants (CONSTANT_REFERENCE) and for requests; bad pools give an
//! error, never a crash.

mod common;

use std::os::fd::AsFd;
use std::sync::Arc;

use common::{execute, prepare, supported_cases, Mode};
use vnpu_driver::conformance::corpus::TestCase;
use vnpu_driver::hal::{
    ErrorStatus, MeasureTiming, Memory, NativeHandle, RequestMemoryPool, MEMORY_MMAP_FD,
};

/// The same bytes as `mem`, at `offset` of a new file, as an mmap_fd pool.
fn as_mmap_fd(mem: &Memory, offset: u64, prot: i32) -> Memory {
    let mut bytes = vec![0u8; mem.size as usize];
    nix::sys::uio::pread(mem.fd().unwrap().as_fd(), &mut bytes, 0).unwrap();
    let mut padded = vec![0xAAu8; offset as usize];
    padded.extend_from_slice(&bytes);
    let file = Memory::ashmem_with(&padded).unwrap();
    Memory {
        name: MEMORY_MMAP_FD.into(),
        size: mem.size,
        handle: NativeHandle {
            fds: file.handle.fds.clone(),
            ints: vec![prot, offset as u32 as i32, (offset >> 32) as i32],
        },
    }
}

fn conv_case() -> TestCase {
    supported_cases("V1_0.jsonl.gz")
        .into_iter()
        .find(|c| c.model.pools.len() == 1 && !c.expect_failure)
        .expect("a case with CONSTANT_REFERENCE operands")
}

fn output_bytes(pool: &Memory, offset: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    nix::sys::uio::pread(pool.fd().unwrap().as_fd(), &mut b, offset as i64).unwrap();
    b
}

#[test]
fn mmap_fd_pools_with_an_offset_work_for_constants_and_requests() {
    let case = conv_case();
    let mut model = case.model.clone();
    model.pools[0] = as_mmap_fd(&case.model.pools[0], 4096 + 12, libc::PROT_READ);
    let (status, prepared) = prepare(&model);
    assert_eq!(status, ErrorStatus::None);
    let prepared = prepared.unwrap();

    let (mut request, pool, locations) = case.make_request().unwrap();
    let offset = 100;
    let mapped = as_mmap_fd(&pool, offset, libc::PROT_READ | libc::PROT_WRITE);
    request.pools = vec![RequestMemoryPool::HidlMemory(mapped.clone())];
    let (status, _, _) = execute(&prepared, &request, Mode::Sync, MeasureTiming::NO);
    assert_eq!(status, ErrorStatus::None);
    for (want, loc) in case.outputs.iter().zip(&locations) {
        let ty = case.operand_type(want.operand).unwrap();
        let got = output_bytes(&mapped, offset + loc.offset as u64, want.data.len());
        let r = vnpu_driver::conformance::compare(
            want.operand,
            ty,
            &want.data,
            &got,
            case.relaxed,
            want.ignored,
        );
        assert_eq!(r.mismatches, 0);
    }
}

#[test]
fn a_read_only_pool_cannot_take_outputs() {
    let case = conv_case();
    let prepared = prepare(&case.model).1.unwrap();
    let (mut request, pool, _) = case.make_request().unwrap();
    request.pools = vec![RequestMemoryPool::HidlMemory(as_mmap_fd(
        &pool,
        0,
        libc::PROT_READ,
    ))];
    let (status, shapes, _) = execute(&prepared, &request, Mode::Async, MeasureTiming::YES);
    assert_eq!(status, ErrorStatus::GeneralFailure);
    assert!(shapes.is_empty());
}

#[test]
fn pools_larger_than_their_file_are_refused() {
    let case = conv_case();
    let prepared = prepare(&case.model).1.unwrap();
    let (mut request, pool, _) = case.make_request().unwrap();
    let mut big = pool.clone();
    big.size += 1 << 20;
    request.pools = vec![RequestMemoryPool::HidlMemory(big)];
    let (status, _, _) = execute(&prepared, &request, Mode::Sync, MeasureTiming::NO);
    assert_ne!(status, ErrorStatus::None);

    let mut model = case.model.clone();
    model.pools[0].size += 1 << 20;
    assert_ne!(prepare(&model).0, ErrorStatus::None);
}

#[test]
fn a_pool_fd_that_is_not_a_file_is_refused() {
    let case = conv_case();
    let prepared = prepare(&case.model).1.unwrap();
    let (mut request, pool, _) = case.make_request().unwrap();
    let (r, _w) = nix::unistd::pipe().unwrap();
    let mut bad = pool.clone();
    bad.handle.fds = vec![Arc::new(r)];
    request.pools = vec![RequestMemoryPool::HidlMemory(bad)];
    let (status, _, _) = execute(&prepared, &request, Mode::Sync, MeasureTiming::NO);
    assert_ne!(status, ErrorStatus::None);
}

/// An unsealed memfd could shrink under a device mapping, so it is never mapped: its
/// arguments are staged (positioned reads in, positioned writes back) and the execution
/// works as with any other pool.
#[test]
fn a_memfd_that_can_shrink_is_staged_not_mapped() {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let case = conv_case();
    let prepared = prepare(&case.model).1.unwrap();
    let (mut request, pool, locations) = case.make_request().unwrap();
    let fd = memfd_create(
        c"unsealed",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .unwrap();
    let bytes = output_bytes(&pool, 0, pool.size as usize);
    nix::sys::uio::pwrite(&fd, &bytes, 0).unwrap();
    let mut unsealed = pool.clone();
    unsealed.handle.fds = vec![Arc::new(fd)];
    request.pools = vec![RequestMemoryPool::HidlMemory(unsealed.clone())];
    let (status, _, _) = execute(&prepared, &request, Mode::Sync, MeasureTiming::NO);
    assert_eq!(status, ErrorStatus::None);
    assert!(vnpu_driver::conformance::outputs_match(
        &case, &unsealed, &locations
    ));
}
