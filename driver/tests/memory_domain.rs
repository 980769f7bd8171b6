//! Port of the VTS MemoryDomainTests: allocation (every way `allocate` must refuse its
//! arguments), copyFrom/copyTo (sizes, dimensions, initialised state) and executions with
//! driver-managed buffers as request pools, on every execution path the suite uses; plus a
//! proptest that any sequence of allocate/copyFrom/copyTo/execute/free obeys the state
//! machine.
//!
//! The test model stands in for the suite's CONV_2D: out = ADD(in, zeros[8], NONE), so the
//! output equals the input exactly for every type, including the quantised ones.

mod common;

use std::os::fd::AsFd;
use std::sync::Arc;

use common::{device, execute, prepare, Mode, MODES};
use proptest::prelude::*;
use vnpu_driver::device::PrepareArgs;
use vnpu_driver::device::{IBuffer, IDevice, IPreparedModel, VnpuDevice};
use vnpu_driver::hal::{
    BufferDesc, BufferRole, DataLocation, ErrorStatus, MeasureTiming, Memory, Model, Operand,
    OperandLifeTime, OperandType, Operation, OperationType, OutputShape, Request, RequestArgument,
    RequestMemoryPool, Subgraph, Timing,
};

const DIMS: [u32; 4] = [1, 32, 32, 8];
const TYPES: [OperandType; 4] = [
    OperandType::TENSOR_FLOAT32,
    OperandType::TENSOR_FLOAT16,
    OperandType::TENSOR_QUANT8_ASYMM,
    OperandType::TENSOR_QUANT8_ASYMM_SIGNED,
];

/// The operand every role names: type, dimensions, scale, zero point.
#[derive(Clone, Debug)]
struct TestOperand {
    ty: OperandType,
    dims: Vec<u32>,
    scale: f32,
    zero_point: i32,
}

fn test_operand(ty: OperandType) -> TestOperand {
    TestOperand {
        ty,
        dims: DIMS.to_vec(),
        scale: if ty.is_quantized() { 0.5 } else { 0.0 },
        zero_point: 0,
    }
}

fn size_of(op: &TestOperand) -> u64 {
    let e = op.ty.element_size().unwrap() as u64;
    DIMS.iter().map(|&d| d as u64).product::<u64>() * e
}

/// out = ADD(in, zeros[8], act); `act_input` makes the activation a (scalar) model input.
fn add_model(op: &TestOperand, act_input: bool) -> Model {
    let tensor = |dims: Vec<u32>, lifetime| Operand {
        r#type: op.ty,
        dimensions: dims,
        scale: op.scale,
        zero_point: op.zero_point,
        lifetime,
        ..Default::default()
    };
    let mut input = tensor(op.dims.clone(), OperandLifeTime::SUBGRAPH_INPUT);
    input.number_of_consumers = 1;
    let es = op.ty.element_size().unwrap() as u32;
    let mut zeros = tensor(vec![8], OperandLifeTime::CONSTANT_COPY);
    zeros.number_of_consumers = 1;
    zeros.location = DataLocation {
        pool_index: 0,
        offset: 0,
        length: 8 * es,
    };
    let mut act = Operand {
        r#type: OperandType::INT32,
        number_of_consumers: 1,
        lifetime: OperandLifeTime::CONSTANT_COPY,
        location: DataLocation {
            pool_index: 0,
            offset: 8 * es,
            length: 4,
        },
        ..Default::default()
    };
    let mut inputs = vec![0];
    if act_input {
        act.lifetime = OperandLifeTime::SUBGRAPH_INPUT;
        act.location = DataLocation::default();
        inputs.push(2);
    }
    let output = tensor(op.dims.clone(), OperandLifeTime::SUBGRAPH_OUTPUT);
    Model {
        main: Subgraph {
            operands: vec![input, zeros, act, output],
            operations: vec![Operation {
                r#type: OperationType::ADD,
                inputs: vec![0, 1, 2],
                outputs: vec![3],
            }],
            input_indexes: inputs,
            output_indexes: vec![3],
        },
        operand_values: vec![0; (8 * es + 4) as usize],
        ..Default::default()
    }
}

fn prepared(op: &TestOperand) -> Arc<dyn IPreparedModel> {
    let (status, p) = prepare(&add_model(op, false));
    assert_eq!(status, ErrorStatus::None);
    p.unwrap()
}

fn role(model_index: u32, io_index: u32) -> BufferRole {
    BufferRole {
        model_index,
        io_index,
        frequency: 1.0,
    }
}

fn allocate_with(
    models: &[Option<Arc<dyn IPreparedModel>>],
    inputs: &[BufferRole],
    outputs: &[BufferRole],
    dims: &[u32],
) -> (ErrorStatus, Option<Arc<dyn IBuffer>>, u32) {
    device().allocate(
        &BufferDesc {
            dimensions: dims.to_vec(),
        },
        models,
        inputs,
        outputs,
    )
}

/// Allocation that must fail with INVALID_ARGUMENT or GENERAL_FAILURE, null and token 0.
fn assert_refused(r: (ErrorStatus, Option<Arc<dyn IBuffer>>, u32)) {
    assert!(
        matches!(
            r.0,
            ErrorStatus::InvalidArgument | ErrorStatus::GeneralFailure
        ),
        "{}",
        r.0
    );
    assert!(r.1.is_none());
    assert_eq!(r.2, 0);
}

/// A buffer for input 0 and/or output 0 of `p`; `None` when the driver declines it with
/// GENERAL_FAILURE (the suite then skips the test).
fn buffer(
    p: &Arc<dyn IPreparedModel>,
    input: bool,
    output: bool,
    dims: &[u32],
) -> Option<(Arc<dyn IBuffer>, u32)> {
    let ins: Vec<_> = input.then(|| role(0, 0)).into_iter().collect();
    let outs: Vec<_> = output.then(|| role(0, 0)).into_iter().collect();
    let (status, b, token) = allocate_with(&[Some(Arc::clone(p))], &ins, &outs, dims);
    if status == ErrorStatus::GeneralFailure {
        assert!(b.is_none());
        return None;
    }
    assert_eq!(status, ErrorStatus::None);
    assert!(token > 0);
    Some((b.unwrap(), token))
}

fn ashmem(size: u64) -> Memory {
    Memory::ashmem(size).unwrap()
}

fn pattern(op: &TestOperand) -> Vec<u8> {
    let n = size_of(op) as usize / op.ty.element_size().unwrap();
    match op.ty {
        OperandType::TENSOR_FLOAT32 => (0..n)
            .flat_map(|i| ((i % 97) as f32 * 0.25).to_le_bytes())
            .collect(),
        OperandType::TENSOR_FLOAT16 => (0..n)
            .flat_map(|i| half::f16::from_f32((i % 97) as f32 * 0.25).to_le_bytes())
            .collect(),
        _ => (0..n).map(|i| (i % 100) as u8).collect(),
    }
}

fn read_all(mem: &Memory) -> Vec<u8> {
    let mut b = vec![0u8; mem.size as usize];
    nix::sys::uio::pread(mem.fd().unwrap().as_fd(), &mut b, 0).unwrap();
    b
}

fn initialise(b: &Arc<dyn IBuffer>, op: &TestOperand) {
    let src = Memory::ashmem_with(&pattern(op)).unwrap();
    assert_eq!(b.copy_from(&src, &[]), ErrorStatus::None);
}

/// Where an execution argument lives: a shared pool (index 0) or the device pool (1).
#[derive(Clone, Copy)]
enum At {
    Shared,
    Device,
}

fn request(op: &TestOperand, token: u32, input: At, output: At) -> Request {
    let size = size_of(op) as u32;
    let arg = |at: At, offset: u32| match at {
        At::Shared => RequestArgument {
            location: DataLocation {
                pool_index: 0,
                offset,
                length: size,
            },
            ..Default::default()
        },
        At::Device => RequestArgument {
            location: DataLocation {
                pool_index: 1,
                offset: 0,
                length: 0,
            },
            ..Default::default()
        },
    };
    Request {
        inputs: vec![arg(input, 0)],
        outputs: vec![arg(output, size)],
        pools: vec![
            RequestMemoryPool::HidlMemory(ashmem(2 * size as u64)),
            RequestMemoryPool::Token(token),
        ],
    }
}

/// Executes on `mode` and checks the error-path rules: no shapes, no timing.
fn run(
    p: &Arc<dyn IPreparedModel>,
    r: &Request,
    mode: Mode,
) -> (ErrorStatus, Vec<OutputShape>, Timing) {
    let out = execute(p, r, mode, MeasureTiming::YES);
    if out.0 != ErrorStatus::None {
        assert!(out.1.is_empty(), "shapes on error");
        assert_eq!(out.2, Timing::NONE, "timing on error");
    }
    out
}

// ---- Allocate ------------------------------------------------------------------------

#[test]
fn allocate_empty_role() {
    let p = prepared(&test_operand(TYPES[0]));
    assert_refused(allocate_with(&[Some(p)], &[], &[], &[]));
}

#[test]
fn allocate_nullptr_prepared_model() {
    assert_refused(allocate_with(&[None], &[role(0, 0)], &[], &[]));
    assert_refused(allocate_with(&[None], &[], &[role(0, 0)], &[]));
}

/// A prepared model of another service: one this device cannot know, and one of another
/// device.
#[test]
fn allocate_invalid_prepared_model() {
    struct Foreign;
    impl IPreparedModel for Foreign {
        fn execute_1_3(
            &self,
            _: &Request,
            _: MeasureTiming,
            _: vnpu_driver::hal::OptionalTimePoint,
            _: vnpu_driver::hal::OptionalTimeoutDuration,
            _: Option<Arc<dyn vnpu_driver::device::ExecutionCallback>>,
        ) -> ErrorStatus {
            ErrorStatus::GeneralFailure
        }
        fn execute_synchronously_1_3(
            &self,
            _: &Request,
            _: MeasureTiming,
            _: vnpu_driver::hal::OptionalTimePoint,
            _: vnpu_driver::hal::OptionalTimeoutDuration,
        ) -> (ErrorStatus, Vec<OutputShape>, Timing) {
            (ErrorStatus::GeneralFailure, Vec::new(), Timing::NONE)
        }
        fn execute_fenced(
            &self,
            _: &Request,
            _: &[vnpu_driver::hal::NativeHandle],
            _: MeasureTiming,
            _: vnpu_driver::hal::OptionalTimePoint,
            _: vnpu_driver::hal::OptionalTimeoutDuration,
            _: vnpu_driver::hal::OptionalTimeoutDuration,
        ) -> vnpu_driver::device::FencedResult {
            (ErrorStatus::GeneralFailure, None, None)
        }
        fn configure_execution_burst(
            &self,
            _: Arc<dyn vnpu_driver::interface::IBurstCallback>,
            _: std::os::fd::BorrowedFd<'_>,
            _: std::os::fd::BorrowedFd<'_>,
        ) -> vnpu_driver::interface::BurstResult {
            (ErrorStatus::GeneralFailure, None)
        }
    }
    let foreign: Arc<dyn IPreparedModel> = Arc::new(Foreign);
    assert_refused(allocate_with(
        &[Some(foreign.clone())],
        &[role(0, 0)],
        &[],
        &[],
    ));
    assert_refused(allocate_with(&[Some(foreign)], &[], &[role(0, 0)], &[]));

    let other = VnpuDevice::new().unwrap();
    let slot = vnpu_driver::device::PreparedModelSlot::new();
    other.prepare_model_1_3(PrepareArgs {
        preference: Default::default(),
        priority: Default::default(),
        deadline: Default::default(),
        ..PrepareArgs::new(
            &add_model(&test_operand(TYPES[0]), false),
            Some(slot.clone()),
        )
    });
    let theirs = slot.wait().1.unwrap();
    assert_refused(allocate_with(&[Some(theirs)], &[role(0, 0)], &[], &[]));
}

#[test]
fn allocate_invalid_model_index() {
    let p = prepared(&test_operand(TYPES[0]));
    assert_refused(allocate_with(&[Some(p.clone())], &[role(1, 0)], &[], &[]));
    assert_refused(allocate_with(&[Some(p)], &[], &[role(1, 0)], &[]));
}

#[test]
fn allocate_invalid_io_index() {
    let p = prepared(&test_operand(TYPES[0]));
    assert_refused(allocate_with(&[Some(p.clone())], &[role(0, 1)], &[], &[]));
    assert_refused(allocate_with(&[Some(p)], &[], &[role(0, 1)], &[]));
}

#[test]
fn allocate_invalid_frequency() {
    let p = prepared(&test_operand(TYPES[0]));
    for frequency in [10.0, 0.0, -0.5, f32::NAN] {
        let bad = BufferRole {
            model_index: 0,
            io_index: 0,
            frequency,
        };
        assert_refused(allocate_with(&[Some(p.clone())], &[bad], &[], &[]));
        assert_refused(allocate_with(&[Some(p.clone())], &[], &[bad], &[]));
    }
}

#[test]
fn allocate_same_role_specified_twice() {
    let p = prepared(&test_operand(TYPES[0]));
    let one = [Some(p.clone())];
    assert_refused(allocate_with(&one, &[role(0, 0), role(0, 0)], &[], &[]));
    assert_refused(allocate_with(&one, &[], &[role(0, 0), role(0, 0)], &[]));
    // The same model under two indexes is still the same role.
    let two = [Some(p.clone()), Some(p)];
    assert_refused(allocate_with(&two, &[role(0, 0), role(1, 0)], &[], &[]));
    assert_refused(allocate_with(&two, &[], &[role(0, 0), role(1, 0)], &[]));
}

/// Two prepared models whose operands differ as `change` says: every mix of their roles
/// must be refused (types whose models the change makes invalid are left out).
fn assert_conflict(change: impl Fn(&mut TestOperand)) {
    for ty in TYPES {
        let a = test_operand(ty);
        let mut b = a.clone();
        change(&mut b);
        if let Some(pb) = prepare(&add_model(&b, false)).1 {
            assert_roles_conflict(prepared(&a), pb);
        }
    }
}

/// Roles of `a` and `b` together are refused, as inputs, outputs or both.
fn assert_roles_conflict(a: Arc<dyn IPreparedModel>, b: Arc<dyn IPreparedModel>) {
    let models = [Some(a), Some(b)];
    assert_refused(allocate_with(&models, &[role(0, 0), role(1, 0)], &[], &[]));
    assert_refused(allocate_with(&models, &[role(0, 0)], &[role(1, 0)], &[]));
    assert_refused(allocate_with(&models, &[], &[role(0, 0), role(1, 0)], &[]));
}

#[test]
fn allocate_conflict_operand_type() {
    assert_conflict(|o| {
        o.ty = if o.ty == OperandType::TENSOR_FLOAT32 {
            OperandType::TENSOR_FLOAT16
        } else {
            OperandType::TENSOR_FLOAT32
        };
        o.scale = 0.0;
    });
}

#[test]
fn allocate_conflict_scale() {
    assert_conflict(|o| o.scale = 1.0);
}

#[test]
fn allocate_conflict_zero_point() {
    assert_conflict(|o| o.zero_point = 10);
}

/// The first type's operand with dimensions `a` against the same with `b`.
fn assert_dims_conflict(a: &[u32], b: &[u32]) {
    let with = |dims: &[u32]| TestOperand {
        dims: dims.to_vec(),
        ..test_operand(TYPES[0])
    };
    assert_roles_conflict(prepared(&with(a)), prepared(&with(b)));
}

#[test]
fn allocate_conflict_rank_between_roles() {
    // Unknown dimensions, so both models prepare.
    assert_dims_conflict(&[0, 0, 0, 0], &[0, 0, 0]);
}

#[test]
fn allocate_conflict_dimensions_between_roles() {
    assert_dims_conflict(&[1, 0, 0, 8], &[2, 0, 0, 8]);
}

#[test]
fn allocate_conflict_rank_between_role_and_desc() {
    let p = prepared(&test_operand(TYPES[0]));
    assert_refused(allocate_with(
        &[Some(p.clone())],
        &[role(0, 0)],
        &[],
        &[1, 32, 32],
    ));
    assert_refused(allocate_with(
        &[Some(p)],
        &[],
        &[role(0, 0)],
        &[1, 32, 32, 8, 1],
    ));
}

#[test]
fn allocate_conflict_dimensions_between_role_and_desc() {
    let p = prepared(&test_operand(TYPES[0]));
    assert_refused(allocate_with(
        &[Some(p.clone())],
        &[role(0, 0)],
        &[],
        &[2, 32, 32, 8],
    ));
    assert_refused(allocate_with(
        &[Some(p)],
        &[],
        &[role(0, 0)],
        &[1, 32, 32, 4],
    ));
}

#[test]
fn allocate_conflict_rank_with_scalar_role() {
    let op = test_operand(TYPES[0]);
    let (status, p) = prepare(&add_model(&op, true));
    assert_eq!(status, ErrorStatus::None);
    // Input 1 is the scalar activation: a desc of rank 1 conflicts.
    assert_refused(allocate_with(&[p], &[role(0, 1)], &[], &[1]));
}

// ---- Copy ----------------------------------------------------------------------------

#[test]
fn copy_from_invalid_memory_size() {
    for ty in TYPES {
        let op = test_operand(ty);
        let p = prepared(&op);
        let Some((b, _)) = buffer(&p, true, false, &[]) else {
            continue;
        };
        let size = size_of(&op);
        for bad in [size / 2, size * 2] {
            assert_eq!(b.copy_from(&ashmem(bad), &[]), ErrorStatus::InvalidArgument);
        }
        assert_eq!(b.copy_from(&ashmem(size), &[]), ErrorStatus::None);
    }
}

#[test]
fn copy_from_invalid_memory_size_dynamic_shape() {
    for ty in TYPES {
        let full = test_operand(ty);
        let op = TestOperand {
            dims: vec![0, 32, 32, 8],
            ..full.clone()
        };
        let p = prepared(&op);
        // A buffer of unknown size is declined with GENERAL_FAILURE, as in the sample
        // driver (and the suite then skips the rest).
        let Some((b, _)) = buffer(&p, true, false, &[]) else {
            continue;
        };
        let size = size_of(&full);
        for bad in [size / 2, size * 2] {
            assert_eq!(b.copy_from(&ashmem(bad), &[]), ErrorStatus::InvalidArgument);
            assert_eq!(
                b.copy_from(&ashmem(bad), &DIMS),
                ErrorStatus::InvalidArgument
            );
        }
        assert_eq!(b.copy_from(&ashmem(size), &DIMS), ErrorStatus::None);
        assert_eq!(
            b.copy_from(&ashmem(size), &[2, 32, 32, 8]),
            ErrorStatus::InvalidArgument
        );
    }
}

#[test]
fn copy_from_invalid_dimensions() {
    for ty in TYPES {
        let op = test_operand(ty);
        let p = prepared(&op);
        let Some((b, _)) = buffer(&p, true, false, &[]) else {
            continue;
        };
        let mem = ashmem(size_of(&op));
        for bad in [vec![1, 32, 32], vec![2, 32, 32, 8], vec![0, 32, 32, 8]] {
            assert_eq!(
                b.copy_from(&mem, &bad),
                ErrorStatus::InvalidArgument,
                "{bad:?}"
            );
        }
        assert_eq!(b.copy_from(&mem, &[]), ErrorStatus::None);
        assert_eq!(b.copy_from(&mem, &DIMS), ErrorStatus::None);
    }
}

#[test]
fn copy_from_invalid_dimensions_dynamic_shape() {
    for ty in TYPES {
        let full = test_operand(ty);
        let op = TestOperand {
            dims: vec![0, 32, 32, 8],
            ..full.clone()
        };
        let p = prepared(&op);
        let Some((b, _)) = buffer(&p, true, false, &[]) else {
            continue;
        };
        let mem = ashmem(size_of(&full));
        for bad in [
            vec![],
            vec![1, 32, 32],
            vec![2, 32, 32, 8],
            vec![0, 32, 32, 8],
        ] {
            assert_eq!(
                b.copy_from(&mem, &bad),
                ErrorStatus::InvalidArgument,
                "{bad:?}"
            );
        }
        assert_eq!(b.copy_from(&mem, &DIMS), ErrorStatus::None);
    }
}

#[test]
fn copy_to_uninitialized_memory() {
    for ty in TYPES {
        let op = test_operand(ty);
        let p = prepared(&op);
        let Some((b, _)) = buffer(&p, true, false, &[]) else {
            continue;
        };
        assert_eq!(
            b.copy_to(&ashmem(size_of(&op))),
            ErrorStatus::GeneralFailure
        );
        // A failed copyFrom leaves it uninitialised too.
        initialise(&b, &op);
        assert_eq!(b.copy_from(&ashmem(1), &[]), ErrorStatus::InvalidArgument);
        assert_eq!(
            b.copy_to(&ashmem(size_of(&op))),
            ErrorStatus::GeneralFailure
        );
    }
}

#[test]
fn copy_to_invalid_memory_size() {
    for ty in TYPES {
        let op = test_operand(ty);
        let p = prepared(&op);
        let Some((b, _)) = buffer(&p, true, false, &[]) else {
            continue;
        };
        initialise(&b, &op);
        let size = size_of(&op);
        for bad in [size / 2, size * 2] {
            assert_eq!(b.copy_to(&ashmem(bad)), ErrorStatus::InvalidArgument);
        }
        let out = ashmem(size);
        assert_eq!(b.copy_to(&out), ErrorStatus::None);
        assert_eq!(read_all(&out), pattern(&op), "{ty}: the value round-trips");
    }
}

#[test]
fn copy_to_invalid_memory_size_dynamic_shape() {
    for ty in TYPES {
        let full = test_operand(ty);
        let op = TestOperand {
            dims: vec![0, 32, 32, 8],
            ..full.clone()
        };
        let p = prepared(&op);
        // Fully specified by the descriptor, so the buffer's size is known.
        let Some((b, _)) = buffer(&p, true, false, &DIMS) else {
            continue;
        };
        initialise(&b, &full);
        let size = size_of(&full);
        for bad in [size / 2, size * 2] {
            assert_eq!(b.copy_to(&ashmem(bad)), ErrorStatus::InvalidArgument);
        }
        assert_eq!(b.copy_to(&ashmem(size)), ErrorStatus::None);
    }
}

// ---- Execution -----------------------------------------------------------------------

#[test]
fn execution_invalid_token() {
    let op = test_operand(TYPES[0]);
    let p = prepared(&op);
    for &mode in MODES {
        for token in [0, 100, u32::MAX - 1] {
            for (input, output) in [(At::Device, At::Shared), (At::Shared, At::Device)] {
                let r = request(&op, token, input, output);
                assert_eq!(
                    run(&p, &r, mode).0,
                    ErrorStatus::InvalidArgument,
                    "{mode:?} {token}"
                );
            }
        }
    }
}

#[test]
fn execution_invalid_prepared_model() {
    let op = test_operand(TYPES[0]);
    let (p, other) = (prepared(&op), prepared(&op));
    let (b, token) = buffer(&p, true, true, &[]).unwrap();
    initialise(&b, &op);
    for &mode in MODES {
        for (input, output) in [(At::Device, At::Shared), (At::Shared, At::Device)] {
            let r = request(&op, token, input, output);
            assert_eq!(run(&other, &r, mode).0, ErrorStatus::InvalidArgument);
        }
    }
}

#[test]
fn execution_invalid_io_index() {
    let op = test_operand(TYPES[0]);
    let (status, p) = prepare(&add_model(&op, true));
    assert_eq!(status, ErrorStatus::None);
    let p = p.unwrap();
    let plain = prepared(&op);
    // A buffer for input 0 and output 0 of the model with two inputs, used as its input 1.
    let (status, b, token) = allocate_with(&[Some(p.clone())], &[role(0, 0)], &[role(0, 0)], &[]);
    assert_eq!(status, ErrorStatus::None);
    initialise(b.as_ref().unwrap(), &op);
    let _ = plain;
    let size = size_of(&op) as u32;
    for &mode in MODES {
        let r = Request {
            inputs: vec![
                RequestArgument {
                    location: DataLocation {
                        pool_index: 0,
                        offset: 0,
                        length: size,
                    },
                    ..Default::default()
                },
                RequestArgument {
                    location: DataLocation {
                        pool_index: 1,
                        offset: 0,
                        length: 0,
                    },
                    ..Default::default()
                },
            ],
            outputs: vec![RequestArgument {
                location: DataLocation {
                    pool_index: 0,
                    offset: size,
                    length: size,
                },
                ..Default::default()
            }],
            pools: vec![
                RequestMemoryPool::HidlMemory(ashmem(2 * size as u64)),
                RequestMemoryPool::Token(token),
            ],
        };
        assert_eq!(
            run(&p, &r, mode).0,
            ErrorStatus::InvalidArgument,
            "{mode:?}"
        );
    }
}

#[test]
fn execution_invalid_io_type() {
    let op = test_operand(TYPES[0]);
    let p = prepared(&op);
    let (input_only, in_token) = buffer(&p, true, false, &[]).unwrap();
    let (_output_only, out_token) = buffer(&p, false, true, &[]).unwrap();
    initialise(&input_only, &op);
    for &mode in MODES {
        let r = request(&op, in_token, At::Shared, At::Device);
        assert_eq!(run(&p, &r, mode).0, ErrorStatus::InvalidArgument);
        let r = request(&op, out_token, At::Device, At::Shared);
        assert_eq!(run(&p, &r, mode).0, ErrorStatus::InvalidArgument);
    }
}

#[test]
fn execution_uninitialized_memory() {
    for ty in TYPES {
        let op = test_operand(ty);
        let p = prepared(&op);
        for &mode in MODES {
            let (_b, token) = buffer(&p, true, true, &[]).unwrap();
            let r = request(&op, token, At::Device, At::Shared);
            assert_eq!(run(&p, &r, mode).0, ErrorStatus::GeneralFailure, "{mode:?}");
            // Written as an output, it becomes readable.
            let write = request(&op, token, At::Shared, At::Device);
            if let RequestMemoryPool::HidlMemory(m) = &write.pools[0] {
                let bytes = pattern(&op);
                nix::sys::uio::pwrite(m.fd().unwrap().as_fd(), &bytes, 0).unwrap();
            }
            let (status, shapes, _) = run(&p, &write, mode);
            assert_eq!(status, ErrorStatus::None, "{mode:?}");
            if mode != Mode::Fenced {
                assert_eq!(shapes[0].dimensions, DIMS);
            }
            let (status, _, _) = run(&p, &r, mode);
            assert_eq!(status, ErrorStatus::None, "{mode:?}");
            // And it holds what the execution wrote.
            let RequestMemoryPool::HidlMemory(m) = &r.pools[0] else {
                unreachable!()
            };
            let size = size_of(&op) as usize;
            assert_eq!(
                &read_all(m)[size..],
                pattern(&op).as_slice(),
                "{ty} {mode:?}"
            );
        }
    }
}

#[test]
fn execution_same_request_multiple_roles() {
    let op = test_operand(TYPES[0]);
    // A model with two inputs and one output: the buffer may play all three roles.
    let (status, p) = prepare(&two_input_model(&op));
    assert_eq!(status, ErrorStatus::None);
    let p = p.unwrap();
    let (status, b, token) = allocate_with(
        &[Some(p.clone())],
        &[role(0, 0), role(0, 1)],
        &[role(0, 0)],
        &[],
    );
    assert_eq!(status, ErrorStatus::None);
    initialise(b.as_ref().unwrap(), &op);
    let size = size_of(&op) as u32;
    let shared = |offset| RequestArgument {
        location: DataLocation {
            pool_index: 0,
            offset,
            length: size,
        },
        ..Default::default()
    };
    let device = RequestArgument {
        location: DataLocation {
            pool_index: 1,
            offset: 0,
            length: 0,
        },
        ..Default::default()
    };
    let req = |inputs: Vec<RequestArgument>, output: RequestArgument| Request {
        inputs,
        outputs: vec![output],
        pools: vec![
            RequestMemoryPool::HidlMemory(ashmem(3 * size as u64)),
            RequestMemoryPool::Token(token),
        ],
    };
    for &mode in MODES {
        let r = req(vec![device.clone(), shared(0)], device.clone());
        assert_eq!(run(&p, &r, mode).0, ErrorStatus::InvalidArgument);
        let r = req(vec![device.clone(), device.clone()], shared(2 * size));
        assert_eq!(run(&p, &r, mode).0, ErrorStatus::None, "{mode:?}");
    }
}

/// out = ADD(a, b, NONE) with both operands model inputs.
fn two_input_model(op: &TestOperand) -> Model {
    let mut m = add_model(op, false);
    m.main.operands[1] = m.main.operands[0].clone();
    m.main.input_indexes = vec![0, 1];
    m
}

#[test]
fn execution_invalid_dimensions() {
    let full = test_operand(TYPES[0]);
    let op = TestOperand {
        dims: vec![0, 32, 32, 8],
        ..full.clone()
    };
    let p = prepared(&op);
    let (b, token) = buffer(&p, true, true, &DIMS).unwrap();
    initialise(&b, &full);
    let size = size_of(&full) as u32;
    let bad = vec![2, 32, 32, 8];
    // Fenced execution does not take dynamic shapes (as in the suite).
    for &mode in MODES.iter().filter(|m| **m != Mode::Fenced) {
        let mut r = request(&full, token, At::Device, At::Shared);
        r.inputs[0].dimensions = bad.clone();
        r.outputs[0].location.length = 2 * size;
        r.pools[0] = RequestMemoryPool::HidlMemory(ashmem(3 * size as u64));
        assert_eq!(
            run(&p, &r, mode).0,
            ErrorStatus::InvalidArgument,
            "{mode:?}"
        );
        // An output larger than the buffer.
        let r = Request {
            inputs: vec![RequestArgument {
                location: DataLocation {
                    pool_index: 0,
                    offset: 0,
                    length: 2 * size,
                },
                dimensions: bad.clone(),
                ..Default::default()
            }],
            outputs: vec![RequestArgument {
                location: DataLocation {
                    pool_index: 1,
                    offset: 0,
                    length: 0,
                },
                ..Default::default()
            }],
            pools: vec![
                RequestMemoryPool::HidlMemory(ashmem(2 * size as u64)),
                RequestMemoryPool::Token(token),
            ],
        };
        assert_eq!(run(&p, &r, mode).0, ErrorStatus::GeneralFailure, "{mode:?}");
    }
}

// ---- Tokens and the state machine ----------------------------------------------------

#[test]
fn a_freed_token_is_invalid_and_never_reused() {
    let op = test_operand(TYPES[0]);
    let p = prepared(&op);
    let (b, token) = buffer(&p, true, false, &[]).unwrap();
    initialise(&b, &op);
    drop(b);
    let r = request(&op, token, At::Device, At::Shared);
    assert_eq!(run(&p, &r, Mode::Sync).0, ErrorStatus::InvalidArgument);
    let (_b2, token2) = buffer(&p, true, false, &[]).unwrap();
    assert_ne!(token, token2);
}

/// One step of a client's life with one buffer.
#[derive(Clone, Debug)]
enum Step {
    CopyFrom { good_size: bool, dims: u8 },
    CopyTo { good_size: bool },
    ExecuteIn,
    ExecuteOut,
    Free,
    Allocate,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (any::<bool>(), 0u8..3).prop_map(|(good_size, dims)| Step::CopyFrom { good_size, dims }),
        any::<bool>().prop_map(|good_size| Step::CopyTo { good_size }),
        Just(Step::ExecuteIn),
        Just(Step::ExecuteOut),
        Just(Step::Free),
        Just(Step::Allocate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The model: a live buffer is initialised after a good copyFrom or an execution
    /// that wrote it, uninitialised after any failed copyFrom; copyTo and use as an input
    /// succeed exactly when initialised; a freed token is refused.
    #[test]
    fn state_machine(steps in proptest::collection::vec(step(), 1..12)) {
        let op = test_operand(TYPES[0]);
        static P: std::sync::OnceLock<Arc<dyn IPreparedModel>> = std::sync::OnceLock::new();
        let p = P.get_or_init(|| prepared(&op)).clone();
        let size = size_of(&op);
        let mut live: Option<(Arc<dyn IBuffer>, u32)> = buffer(&p, true, true, &[]);
        let mut token = live.as_ref().unwrap().1;
        let mut init = false;
        for s in steps {
            match s {
                Step::Allocate => {
                    live = buffer(&p, true, true, &[]);
                    let t = live.as_ref().unwrap().1;
                    prop_assert!(t > token);
                    token = t;
                    init = false;
                }
                Step::Free => { live = None; init = false; }
                Step::CopyFrom { good_size, dims } => {
                    let Some((b, _)) = &live else { continue };
                    let dims: &[u32] = match dims { 0 => &[], 1 => &DIMS, _ => &[2, 32, 32, 8] };
                    let ok = good_size && dims != [2, 32, 32, 8];
                    let mem = ashmem(if good_size { size } else { size + 1 });
                    let status = b.copy_from(&mem, dims);
                    prop_assert_eq!(status == ErrorStatus::None, ok);
                    init = ok;
                }
                Step::CopyTo { good_size } => {
                    let Some((b, _)) = &live else { continue };
                    let status = b.copy_to(&ashmem(if good_size { size } else { size - 1 }));
                    let want = match (good_size, init) {
                        (false, _) => ErrorStatus::InvalidArgument,
                        (true, false) => ErrorStatus::GeneralFailure,
                        (true, true) => ErrorStatus::None,
                    };
                    prop_assert_eq!(status, want);
                }
                Step::ExecuteIn => {
                    let status = execute(&p, &request(&op, token, At::Device, At::Shared), Mode::Sync, MeasureTiming::NO).0;
                    let want = match (live.is_some(), init) {
                        (false, _) => ErrorStatus::InvalidArgument,
                        (true, false) => ErrorStatus::GeneralFailure,
                        (true, true) => ErrorStatus::None,
                    };
                    prop_assert_eq!(status, want);
                }
                Step::ExecuteOut => {
                    let status = execute(&p, &request(&op, token, At::Shared, At::Device), Mode::Sync, MeasureTiming::NO).0;
                    prop_assert_eq!(status == ErrorStatus::None, live.is_some());
                    init |= live.is_some();
                }
            }
        }
    }
}
