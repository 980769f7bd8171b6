//! DMA host -> device copy of 64 MiB through the emulated device (submission, doorbell,
//! IOMMU translation, the copy, completion and interrupt), against a plain memcpy of the
//! same size between two memfd mappings in the same run. Goal: >= 0.8 of memcpy.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use vnpu_emu::host::HostQueue;
use vnpu_emu::iommu::Perm;
use vnpu_emu::ring::{Opcode, Status, SubmissionEntry};
use vnpu_emu::shm::{copy_between, SharedRegion};
use vnpu_emu::{Device, DeviceConfig, DRAM_BASE};

const LEN: u64 = 64 << 20;
const RING_IOVA: u64 = 0x10_0000;
const BUF_IOVA: u64 = 0x100_0000;

fn dma_vs_memcpy(c: &mut Criterion) {
    let mut g = c.benchmark_group("copy_64MiB");
    g.throughput(Throughput::Bytes(LEN));
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(5));

    let src = SharedRegion::new("bench-src", LEN as usize).unwrap();
    let dst = SharedRegion::new("bench-dst", LEN as usize).unwrap();
    // Touch every page so neither side measures page faults.
    src.write(0, &vec![1u8; LEN as usize]).unwrap();
    dst.write(0, &vec![2u8; LEN as usize]).unwrap();
    g.bench_function("memcpy", |b| {
        b.iter(|| copy_between(&src, 0, &dst, 0, LEN).unwrap())
    });

    let dev = Device::new(DeviceConfig {
        dram_size: LEN,
        ..Default::default()
    })
    .unwrap();
    let mut q = HostQueue::create(&dev, 16, RING_IOVA).unwrap();
    dev.iommu()
        .map(BUF_IOVA, src.fd(), 0, LEN, Perm::READ)
        .unwrap();
    let copy = SubmissionEntry::new(Opcode::DmaCopy, 1, [BUF_IOVA, DRAM_BASE, LEN, 0, 0, 0]);
    let mut run = || {
        q.submit(&dev, &[copy]).unwrap();
        let done = q.wait(&dev, Duration::from_secs(10));
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].status, Status::Ok as u16);
    };
    run(); // fault in device DRAM once
    g.bench_function("dma_host_to_device", |b| b.iter(&mut run));
    g.finish();
}

criterion_group!(benches, dma_vs_memcpy);
criterion_main!(benches);
