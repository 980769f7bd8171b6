//! The compilation cache: prepareModel from scratch (`prepare_cold`), prepareModelFromCache
//! on the io_uring path (`from_cache`) and on the pread fallback (`from_cache_fallback`),
//! and the physical floor (`floor`: the same two files read with one pread each and the
//! data copied into device memory with one DMA), on a model with 16 MiB of weights
//! (`big`: four 1024x1024 float FULLY_CONNECTED layers, weights in a shared-memory pool)
//! and on the corpus MobileNet. `mac/*` compares the MAC candidates on 16 MiB.
//!
//! Goals (issue 8): from_cache <= 1.5 x floor; from_cache <= 0.2 x prepare_cold on big.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use vnpu_driver::cache::{CacheConfig, IoChoice};
use vnpu_driver::conformance::lookup;
use vnpu_driver::device::{IDevice, PreparedModelSlot, VnpuDevice};
use vnpu_driver::device::{PrepareArgs, PrepareFromCacheArgs};
use vnpu_driver::hal::{
    DataLocation, ErrorStatus, Memory, Model, NativeHandle, Operand, OperandLifeTime, OperandType,
    Operation, OperationType, Subgraph,
};
use vnpu_emu::iommu::Perm;
use vnpu_emu::shm::SharedRegion;
use vnpu_emu::DeviceConfig;

const WIDTH: u32 = 1024;
const LAYERS: u32 = 4;

/// `LAYERS` FULLY_CONNECTED layers of WIDTH x WIDTH float weights (16 MiB), weights and
/// biases CONSTANT_REFERENCE into one pool.
fn big_model() -> Model {
    let w_bytes = (WIDTH * WIDTH * 4) as usize;
    let b_bytes = (WIDTH * 4) as usize;
    let mut pool = Vec::with_capacity(LAYERS as usize * (w_bytes + b_bytes));
    let t = |dims: Vec<u32>, lifetime, consumers| Operand {
        r#type: OperandType::TENSOR_FLOAT32,
        dimensions: dims,
        number_of_consumers: consumers,
        lifetime,
        ..Operand::default()
    };
    let mut operands = vec![t(vec![1, WIDTH], OperandLifeTime::SUBGRAPH_INPUT, 1)];
    operands.push(Operand {
        r#type: OperandType::INT32,
        number_of_consumers: LAYERS,
        lifetime: OperandLifeTime::CONSTANT_COPY,
        location: DataLocation {
            pool_index: 0,
            offset: 0,
            length: 4,
        },
        ..Operand::default()
    });
    let act = 1u32;
    let mut operations = Vec::new();
    let mut prev = 0u32;
    for layer in 0..LAYERS {
        let mut reference = |len: usize, seed: u32| {
            let offset = pool.len() as u32;
            pool.extend((0..len / 4).flat_map(|i| {
                let v = ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32;
                (v * 1e-6).to_le_bytes()
            }));
            DataLocation {
                pool_index: 0,
                offset,
                length: len as u32,
            }
        };
        let w = Operand {
            location: reference(w_bytes, layer),
            ..t(vec![WIDTH, WIDTH], OperandLifeTime::CONSTANT_REFERENCE, 1)
        };
        let b = Operand {
            location: reference(b_bytes, layer + 100),
            ..t(vec![WIDTH], OperandLifeTime::CONSTANT_REFERENCE, 1)
        };
        operands.push(w);
        operands.push(b);
        let last = layer + 1 == LAYERS;
        operands.push(if last {
            t(vec![1, WIDTH], OperandLifeTime::SUBGRAPH_OUTPUT, 0)
        } else {
            t(vec![1, WIDTH], OperandLifeTime::TEMPORARY_VARIABLE, 1)
        });
        let n = operands.len() as u32;
        operations.push(Operation {
            r#type: OperationType::FULLY_CONNECTED,
            inputs: vec![prev, n - 3, n - 2, act],
            outputs: vec![n - 1],
        });
        prev = n - 1;
    }
    Model {
        main: Subgraph {
            operands,
            operations,
            input_indexes: vec![0],
            output_indexes: vec![prev],
        },
        operand_values: 0i32.to_le_bytes().to_vec(),
        pools: vec![Memory::ashmem_with(&pool).expect("pool")],
        ..Model::default()
    }
}

fn mobilenet() -> Model {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance");
    lookup(
        &[dir.join("V1_0.jsonl.gz")],
        "mobilenet_224_gender_basic_fixed",
    )
    .expect("corpus case")
    .model
}

fn device(io: IoChoice, key: &std::path::Path) -> Arc<VnpuDevice> {
    let config = CacheConfig {
        key_path: key.to_path_buf(),
        io,
    };
    VnpuDevice::with_cache(DeviceConfig::default(), config).expect("device")
}

fn open_rw(path: &std::path::Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .expect("cache file")
}

fn handle(f: &File) -> Vec<NativeHandle> {
    vec![NativeHandle {
        fds: vec![Arc::new(OwnedFd::from(f.try_clone().expect("dup")))],
        ints: Vec::new(),
    }]
}

fn prepare(dev: &VnpuDevice, model: &Model, cache: Option<(&File, &File)>) {
    let (m, d) = cache.map_or((Vec::new(), Vec::new()), |(m, d)| (handle(m), handle(d)));
    let slot = PreparedModelSlot::new();
    dev.prepare_model_1_3(PrepareArgs {
        model_cache: &m,
        data_cache: &d,
        token: &[7; 32],
        ..PrepareArgs::new(model, Some(slot.clone()))
    });
    assert_eq!(slot.wait().0, ErrorStatus::None);
}

fn from_cache(dev: &VnpuDevice, m: &[NativeHandle], d: &[NativeHandle]) {
    let slot = PreparedModelSlot::new();
    dev.prepare_model_from_cache_1_3(PrepareFromCacheArgs::new(
        m,
        d,
        &[7; 32],
        Some(slot.clone()),
    ));
    assert_eq!(slot.wait().0, ErrorStatus::None);
}

/// Host memory for the floor: allocated, pre-faulted and mapped for the device once (as
/// the cache keeps its staging buffer), so the floor is the copies alone.
struct FloorStaging {
    region: SharedRegion,
    map: vnpu_driver::hw::IoMapping,
}

impl FloorStaging {
    fn new(dev: &VnpuDevice, len: usize) -> FloorStaging {
        let region = SharedRegion::new("floor", len.max(1)).expect("staging");
        region.zero(0, len as u64).expect("fault in");
        let map = dev
            .hardware()
            .map(region.fd(), 0, len.max(1) as u64, Perm::READ)
            .expect("map");
        FloorStaging { region, map }
    }
}

/// One pread of each file and one DMA of the data into (newly allocated) device memory.
fn floor(dev: &VnpuDevice, model: &File, data: &File, staging: &FloorStaging) {
    let hw = dev.hardware();
    let mlen = model.metadata().expect("stat").len() as usize;
    let dlen = data.metadata().expect("stat").len() as usize;
    let mut buf = vec![0u8; mlen];
    nix::sys::uio::pread(model.as_fd(), &mut buf, 0).expect("pread");
    let dst = staging.region.ptr(0, dlen as u64).expect("ptr");
    // SAFETY: `dst` is valid for `dlen` bytes of our own private mapping.
    let n = unsafe { libc::pread(data.as_raw_fd(), dst.cast(), dlen, 0) };
    assert_eq!(n as usize, dlen);
    let dram = hw.alloc_dram(dlen as u64).expect("dram");
    let dma = vnpu_driver::hw::Command::DmaCopy {
        src: staging.map.iova,
        dst: dram.addr,
        len: dlen as u64,
    };
    hw.run(vec![dma], 0, None).expect("dma");
}

fn cache(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("vnpu-bench-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let key = dir.join("cache.key");
    let uring = device(IoChoice::Auto, &key);
    let fallback = device(IoChoice::Fallback, &key);
    eprintln!("cache I/O: {}", uring.cache().io().describe());
    let mut g = c.benchmark_group("cache");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for (label, model) in [("big", big_model()), ("mobilenet", mobilenet())] {
        let mf = open_rw(&dir.join(format!("{label}.model")));
        let df = open_rw(&dir.join(format!("{label}.data")));
        prepare(&uring, &model, Some((&mf, &df)));
        let (m, d) = (handle(&mf), handle(&df));
        let data_len = df.metadata().expect("stat").len();
        eprintln!(
            "{label}: model cache {} bytes, data cache {data_len} bytes",
            mf.metadata().expect("stat").len()
        );
        g.throughput(Throughput::Bytes(data_len));
        g.bench_function(BenchmarkId::new("prepare_cold", label), |b| {
            b.iter(|| prepare(&uring, &model, None))
        });
        g.bench_function(BenchmarkId::new("from_cache", label), |b| {
            b.iter(|| from_cache(&uring, &m, &d))
        });
        g.bench_function(BenchmarkId::new("from_cache_fallback", label), |b| {
            b.iter(|| from_cache(&fallback, &m, &d))
        });
        let staging = FloorStaging::new(&uring, data_len as usize);
        g.bench_function(BenchmarkId::new("floor", label), |b| {
            b.iter(|| floor(&uring, &mf, &df, &staging))
        });
    }
    let data: Vec<u8> = (0..16u32 << 20).map(|i| ((i * 31) >> 3) as u8).collect();
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function(BenchmarkId::new("mac", "blake3_keyed_16MiB"), |b| {
        b.iter(|| blake3::keyed_hash(&[1; 32], &data))
    });
    g.bench_function(BenchmarkId::new("mac", "sha256_16MiB"), |b| {
        use sha2::Digest;
        b.iter(|| sha2::Sha256::digest(&data))
    });
    g.bench_function(BenchmarkId::new("mac", "memcpy_16MiB"), |b| {
        let mut dst = vec![0u8; data.len()];
        b.iter(|| dst.copy_from_slice(&data))
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, cache);
criterion_main!(benches);
