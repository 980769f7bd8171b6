//! A two-model chain (out = ADD(ADD(x, 0), 0) as two prepared models) whose intermediate
//! tensor either stays in a driver-managed buffer (`IDevice::allocate`: model A writes it
//! as its output, model B reads it as its input, device-to-device) or round-trips through
//! shared memory (A's output DMA'd to an ashmem pool, B's input DMA'd back from it).
//! The difference is the host round trip memory domains save.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use vnpu_driver::device::{IBuffer, IDevice, IPreparedModel, VnpuDevice};
use vnpu_driver::hal::{
    BufferDesc, BufferRole, DataLocation, ErrorStatus, MeasureTiming, Memory, Model, Operand,
    OperandLifeTime, OperandType, Operation, OperationType, OptionalTimePoint,
    OptionalTimeoutDuration, Request, RequestArgument, RequestMemoryPool, Subgraph,
};

/// The intermediate tensor: [1, 256, 256, 16] float32, 4 MiB.
const DIMS: [u32; 4] = [1, 256, 256, 16];
const BYTES: u32 = 256 * 256 * 16 * 4;

/// out = ADD(in, zeros[16], NONE).
fn add_model() -> Model {
    let tensor = |dims: Vec<u32>, lifetime, consumers| Operand {
        r#type: OperandType::TENSOR_FLOAT32,
        dimensions: dims,
        number_of_consumers: consumers,
        lifetime,
        ..Default::default()
    };
    let mut zeros = tensor(vec![16], OperandLifeTime::CONSTANT_COPY, 1);
    zeros.location = DataLocation {
        pool_index: 0,
        offset: 0,
        length: 64,
    };
    let act = Operand {
        r#type: OperandType::INT32,
        number_of_consumers: 1,
        lifetime: OperandLifeTime::CONSTANT_COPY,
        location: DataLocation {
            pool_index: 0,
            offset: 64,
            length: 4,
        },
        ..Default::default()
    };
    Model {
        main: Subgraph {
            operands: vec![
                tensor(DIMS.to_vec(), OperandLifeTime::SUBGRAPH_INPUT, 1),
                zeros,
                act,
                tensor(DIMS.to_vec(), OperandLifeTime::SUBGRAPH_OUTPUT, 0),
            ],
            operations: vec![Operation {
                r#type: OperationType::ADD,
                inputs: vec![0, 1, 2],
                outputs: vec![3],
            }],
            input_indexes: vec![0],
            output_indexes: vec![3],
        },
        operand_values: vec![0; 68],
        ..Default::default()
    }
}

fn prepare(dev: &VnpuDevice) -> Arc<dyn IPreparedModel> {
    let (_, status, prepared) = vnpu_driver::conformance::prepare_plain(dev, &add_model());
    assert_eq!(status, ErrorStatus::None);
    prepared.expect("prepared")
}

fn arg(pool_index: u32, offset: u32, length: u32) -> RequestArgument {
    RequestArgument {
        location: DataLocation {
            pool_index,
            offset,
            length,
        },
        ..Default::default()
    }
}

fn run(p: &Arc<dyn IPreparedModel>, r: &Request) {
    let none = OptionalTimeoutDuration(None);
    let (status, _, _) =
        p.execute_synchronously_1_3(r, MeasureTiming::NO, OptionalTimePoint::NONE, none);
    assert_eq!(status, ErrorStatus::None);
}

fn chain(c: &mut Criterion) {
    let dev = VnpuDevice::new().expect("device");
    let (a, b) = (prepare(&dev), prepare(&dev));
    // Pool 0 (shared): x at 0, the intermediate at BYTES, the result at 2 * BYTES.
    let shared = RequestMemoryPool::HidlMemory(Memory::ashmem(3 * BYTES as u64).unwrap());

    let (status, buffer, token) = dev.allocate(
        &BufferDesc::default(),
        &[Some(Arc::clone(&a)), Some(Arc::clone(&b))],
        &[BufferRole {
            model_index: 1,
            io_index: 0,
            frequency: 1.0,
        }],
        &[BufferRole {
            model_index: 0,
            io_index: 0,
            frequency: 1.0,
        }],
    );
    assert_eq!(status, ErrorStatus::None);
    let _buffer: Arc<dyn IBuffer> = buffer.expect("buffer");
    let device = RequestMemoryPool::Token(token);

    let round_trip = (
        Request {
            inputs: vec![arg(0, 0, BYTES)],
            outputs: vec![arg(0, BYTES, BYTES)],
            pools: vec![shared.clone()],
        },
        Request {
            inputs: vec![arg(0, BYTES, BYTES)],
            outputs: vec![arg(0, 2 * BYTES, BYTES)],
            pools: vec![shared.clone()],
        },
    );
    let in_device = (
        Request {
            inputs: vec![arg(0, 0, BYTES)],
            outputs: vec![arg(1, 0, 0)],
            pools: vec![shared.clone(), device.clone()],
        },
        Request {
            inputs: vec![arg(1, 0, 0)],
            outputs: vec![arg(0, 2 * BYTES, BYTES)],
            pools: vec![shared, device],
        },
    );

    let mut g = c.benchmark_group("chain_4MiB_intermediate");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(BYTES as u64));
    for (label, (first, second)) in [
        ("shared_memory_round_trip", &round_trip),
        ("driver_managed_buffer", &in_device),
    ] {
        g.bench_function(label, |bench| {
            bench.iter(|| {
                run(&a, first);
                run(&b, second);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, chain);
criterion_main!(benches);
