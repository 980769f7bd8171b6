//! Control flow (NN HAL 1.3 IF and WHILE) run as device control: a nested IF in a WHILE, a
//! WHILE whose body grows its state (an output whose shape changes on every iteration,
//! past the capacity the compiler first gives it), and a loop that never ends, stopped by
//! the loop timeout with the prepared model usable afterwards.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{device, prepare};
use vnpu_driver::device::IPreparedModel;
use vnpu_driver::hal::builder::ModelBuilder;
use vnpu_driver::hal::{
    DataLocation, ErrorStatus, MeasureTiming, Memory, Model, OperandType as T, OperationType as Op,
    OptionalTimePoint, OptionalTimeoutDuration, OutputShape, Request, RequestArgument,
    RequestMemoryPool,
};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A `[1]` float32 operand.
const ONE: &[u32] = &[1];

/// `a <op> b` with no fused activation.
fn arith(b: &mut ModelBuilder, op: Op, x: u32, y: u32, out: u32) {
    let none = b.constant(T::INT32, &[], &0i32.to_le_bytes());
    b.op(op, &[x, y, none], &[out]);
}

/// A subgraph of float32 `[1]` inputs (`n` of them) whose first output is `f(inputs)`.
fn subgraph(
    n: usize,
    outs: &[(T, &[u32])],
    body: impl FnOnce(&mut ModelBuilder, &[u32], &[u32]),
) -> ModelBuilder {
    let mut b = ModelBuilder::default();
    let ins: Vec<u32> = (0..n).map(|_| b.input(T::TENSOR_FLOAT32, ONE)).collect();
    let o: Vec<u32> = outs.iter().map(|&(t, d)| b.output(t, d)).collect();
    body(&mut b, &ins, &o);
    b
}

/// Runs `model` once with float32 `inputs` and outputs of `out_bytes` bytes each;
/// returns the status, the output shapes and the output values.
fn run(
    prepared: &Arc<dyn IPreparedModel>,
    inputs: &[Vec<f32>],
    out_bytes: &[usize],
    loop_timeout: Option<Duration>,
) -> (ErrorStatus, Vec<OutputShape>, Vec<Vec<f32>>) {
    let mut bytes = Vec::new();
    let arg = |data: &[u8], bytes: &mut Vec<u8>| {
        let offset = bytes.len().next_multiple_of(64);
        bytes.resize(offset, 0);
        bytes.extend_from_slice(data);
        RequestArgument {
            has_no_value: false,
            location: DataLocation {
                pool_index: 0,
                offset: offset as u32,
                length: data.len() as u32,
            },
            dimensions: Vec::new(),
        }
    };
    let ins: Vec<RequestArgument> = inputs
        .iter()
        .map(|v| arg(&f32_bytes(v), &mut bytes))
        .collect();
    let outs: Vec<RequestArgument> = out_bytes
        .iter()
        .map(|&n| arg(&vec![0; n], &mut bytes))
        .collect();
    bytes.resize(bytes.len().next_multiple_of(64).max(64), 0);
    let pool = Memory::ashmem_with(&bytes).expect("pool");
    let request = Request {
        inputs: ins,
        outputs: outs.clone(),
        pools: vec![RequestMemoryPool::HidlMemory(pool.clone())],
    };
    let timeout = OptionalTimeoutDuration(loop_timeout.map(|d| d.as_nanos() as u64));
    let (status, shapes, _) = prepared.execute_synchronously_1_3(
        &request,
        MeasureTiming::NO,
        OptionalTimePoint::NONE,
        timeout,
    );
    let fd = pool.fd().expect("fd");
    let values = outs
        .iter()
        .map(|a| {
            let mut b = vec![0u8; a.location.length as usize];
            nix::sys::uio::pread(fd, &mut b, a.location.offset as i64).expect("pread");
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
        .collect();
    (status, shapes, values)
}

fn prepared(model: &Model) -> Arc<dyn IPreparedModel> {
    let (status, supported) =
        vnpu_driver::device::IDevice::get_supported_operations_1_3(device().as_ref(), model);
    assert_eq!(status, ErrorStatus::None);
    assert!(supported.iter().all(|&s| s), "{supported:?}");
    let (status, p) = prepare(model);
    assert_eq!(status, ErrorStatus::None);
    p.expect("prepared")
}

/// `x, i = x0, 0; while i < n { i += 1; x = if x > i { x - 1 } else { x + i } }`.
fn nested_if_model() -> Model {
    // referenced: 0 cond, 1 body, 2 then, 3 else.
    let cond = subgraph(4, &[(T::TENSOR_BOOL8, ONE)], |b, i, o| {
        b.op(Op::LESS, &[i[1], i[2]], &[o[0]]);
    });
    let body = subgraph(
        4,
        &[(T::TENSOR_FLOAT32, ONE), (T::TENSOR_FLOAT32, ONE)],
        |b, i, o| {
            let (x, k, one) = (i[0], i[1], i[3]);
            arith(b, Op::ADD, k, one, o[1]);
            let g = b.temp(T::TENSOR_BOOL8, ONE);
            b.op(Op::GREATER, &[x, o[1]], &[g]);
            let (then, otherwise) = (b.subgraph(2), b.subgraph(3));
            b.op(Op::IF, &[g, then, otherwise, x, o[1], one], &[o[0]]);
        },
    );
    let then = subgraph(3, &[(T::TENSOR_FLOAT32, ONE)], |b, i, o| {
        arith(b, Op::SUB, i[0], i[2], o[0]);
    });
    let otherwise = subgraph(3, &[(T::TENSOR_FLOAT32, ONE)], |b, i, o| {
        arith(b, Op::ADD, i[0], i[1], o[0]);
    });
    let mut m = ModelBuilder::default();
    let x0 = m.input(T::TENSOR_FLOAT32, ONE);
    let n = m.input(T::TENSOR_FLOAT32, ONE);
    let zero = m.constant(T::TENSOR_FLOAT32, ONE, &f32_bytes(&[0.0]));
    let one = m.constant(T::TENSOR_FLOAT32, ONE, &f32_bytes(&[1.0]));
    let x = m.output(T::TENSOR_FLOAT32, ONE);
    let k = m.temp(T::TENSOR_FLOAT32, ONE);
    let (c, b) = (m.subgraph(0), m.subgraph(1));
    m.op(Op::WHILE, &[c, b, x0, zero, n, one], &[x, k]);
    m.build_with(vec![cond, body, then, otherwise], Vec::new())
}

/// The host's answer for [`nested_if_model`].
fn nested_if_reference(x0: f32, n: f32) -> f32 {
    let (mut x, mut i) = (x0, 0.0f32);
    while i < n {
        i += 1.0;
        x = if x > i { x - 1.0 } else { x + i };
    }
    x
}

#[test]
fn nested_if_in_while() {
    let p = prepared(&nested_if_model());
    for (x0, n) in [(10.0f32, 6.0f32), (0.0, 4.0), (3.0, 0.0), (-5.0, 9.0)] {
        let (status, shapes, out) = run(&p, &[vec![x0], vec![n]], &[4], None);
        assert_eq!(status, ErrorStatus::None, "x0 {x0} n {n}");
        assert_eq!(shapes[0].dimensions, [1]);
        assert_eq!(out[0], [nested_if_reference(x0, n)], "x0 {x0} n {n}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(32))]
    /// Any start and iteration count: the device's loop and branches give the host's answer.
    #[test]
    fn nested_control_flow_matches_the_host(x0 in -50i32..50, n in 0i32..40) {
        use std::sync::OnceLock;
        static P: OnceLock<Arc<dyn IPreparedModel>> = OnceLock::new();
        let p = P.get_or_init(|| prepared(&nested_if_model()));
        let (x0, n) = (x0 as f32, n as f32);
        let (status, _, out) = run(p, &[vec![x0], vec![n]], &[4], None);
        proptest::prop_assert_eq!(status, ErrorStatus::None);
        proptest::prop_assert_eq!(out[0][0], nested_if_reference(x0, n));
    }
}

/// `x, i = [[1]], 0; while i < n { i += 1; x = concat(x, [[i]]) }`: x ends `[1, n+1]`,
/// a shape the model leaves unknown.
fn growing_model() -> Model {
    let row = &[1u32, 1][..];
    let cond = subgraph(3, &[(T::TENSOR_BOOL8, ONE)], |b, i, o| {
        b.op(Op::LESS, &[i[1], i[2]], &[o[0]]);
    });
    let mut body = ModelBuilder::default();
    let x = body.input(T::TENSOR_FLOAT32, &[1, 0]);
    let k = body.input(T::TENSOR_FLOAT32, ONE);
    let _n = body.input(T::TENSOR_FLOAT32, ONE);
    let x2 = body.output(T::TENSOR_FLOAT32, &[1, 0]);
    let k2 = body.output(T::TENSOR_FLOAT32, ONE);
    let one = body.constant(T::TENSOR_FLOAT32, ONE, &f32_bytes(&[1.0]));
    arith(&mut body, Op::ADD, k, one, k2);
    let shape = body.constant(
        T::TENSOR_INT32,
        &[2],
        &[1i32, 1]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>(),
    );
    let cell = body.temp(T::TENSOR_FLOAT32, row);
    body.op(Op::RESHAPE, &[k2, shape], &[cell]);
    let axis = body.constant(T::INT32, &[], &1i32.to_le_bytes());
    body.op(Op::CONCATENATION, &[x, cell, axis], &[x2]);
    let mut m = ModelBuilder::default();
    let n = m.input(T::TENSOR_FLOAT32, ONE);
    let x0 = m.constant(T::TENSOR_FLOAT32, row, &f32_bytes(&[1.0]));
    let zero = m.constant(T::TENSOR_FLOAT32, ONE, &f32_bytes(&[0.0]));
    let out = m.output(T::TENSOR_FLOAT32, &[1, 0]);
    let k = m.temp(T::TENSOR_FLOAT32, ONE);
    let (c, b) = (m.subgraph(0), m.subgraph(1));
    m.op(Op::WHILE, &[c, b, x0, zero, n], &[out, k]);
    m.build_with(vec![cond, body], Vec::new())
}

#[test]
fn while_body_changes_an_outputs_shape() {
    let p = prepared(&growing_model());
    // 40 iterations outgrow the first capacity (16 steps) twice over.
    for n in [0usize, 3, 16, 40, 5] {
        let want: Vec<f32> = std::iter::once(1.0)
            .chain((1..=n).map(|v| v as f32))
            .collect();
        let (status, shapes, out) = run(&p, &[vec![n as f32]], &[4 * (n + 1)], None);
        assert_eq!(status, ErrorStatus::None, "n {n}");
        assert_eq!(shapes[0].dimensions, [1, n as u32 + 1], "n {n}");
        assert!(shapes[0].is_sufficient);
        assert_eq!(out[0], want, "n {n}");
        // One element short: the real shape, and insufficient.
        let (status, shapes, _) = run(&p, &[vec![n as f32]], &[4 * n], None);
        assert_eq!(status, ErrorStatus::OutputInsufficientSize, "n {n}");
        assert_eq!(shapes[0].dimensions, [1, n as u32 + 1]);
        assert!(!shapes[0].is_sufficient);
    }
}

/// `x = 0; while x != limit { x += 1 }`: endless for a limit below 0.
fn counting_model() -> Model {
    let cond = subgraph(3, &[(T::TENSOR_BOOL8, ONE)], |b, i, o| {
        b.op(Op::NOT_EQUAL, &[i[0], i[1]], &[o[0]]);
    });
    let body = subgraph(3, &[(T::TENSOR_FLOAT32, ONE)], |b, i, o| {
        arith(b, Op::ADD, i[0], i[2], o[0]);
    });
    let mut m = ModelBuilder::default();
    let limit = m.input(T::TENSOR_FLOAT32, ONE);
    let zero = m.constant(T::TENSOR_FLOAT32, ONE, &f32_bytes(&[0.0]));
    let one = m.constant(T::TENSOR_FLOAT32, ONE, &f32_bytes(&[1.0]));
    let x = m.output(T::TENSOR_FLOAT32, ONE);
    let (c, b) = (m.subgraph(0), m.subgraph(1));
    m.op(Op::WHILE, &[c, b, zero, limit, one], &[x]);
    m.build_with(vec![cond, body], Vec::new())
}

#[test]
fn infinite_loop_timeout() {
    let p = prepared(&counting_model());
    let (status, _, out) = run(&p, &[vec![7.0]], &[4], None);
    assert_eq!(status, ErrorStatus::None);
    assert_eq!(out[0], [7.0]);
    // The default timeout (2 s).
    let start = Instant::now();
    let (status, _, _) = run(&p, &[vec![-1.0]], &[4], None);
    assert_eq!(status, ErrorStatus::MissedDeadlineTransient);
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    let (status, _, out) = run(&p, &[vec![3.0]], &[4], None);
    assert_eq!(
        status,
        ErrorStatus::None,
        "the same prepared model runs again"
    );
    assert_eq!(out[0], [3.0]);
    // A timeout the execution sets.
    let start = Instant::now();
    let (status, _, _) = run(&p, &[vec![-1.0]], &[4], Some(Duration::from_millis(50)));
    assert_eq!(status, ErrorStatus::MissedDeadlineTransient);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    let (status, _, out) = run(&p, &[vec![12.0]], &[4], Some(Duration::from_millis(50)));
    assert_eq!(status, ErrorStatus::None);
    assert_eq!(out[0], [12.0]);
}

/// `x, i = [[1]], 0; while i < n { i += 1; x = concat(x, x) }`: x doubles each time.
fn doubling_model() -> Model {
    let row = &[1u32, 1][..];
    let cond = subgraph(3, &[(T::TENSOR_BOOL8, ONE)], |b, i, o| {
        b.op(Op::LESS, &[i[1], i[2]], &[o[0]]);
    });
    let mut body = ModelBuilder::default();
    let x = body.input(T::TENSOR_FLOAT32, &[1, 0]);
    let k = body.input(T::TENSOR_FLOAT32, ONE);
    let _n = body.input(T::TENSOR_FLOAT32, ONE);
    let x2 = body.output(T::TENSOR_FLOAT32, &[1, 0]);
    let k2 = body.output(T::TENSOR_FLOAT32, ONE);
    let one = body.constant(T::TENSOR_FLOAT32, ONE, &f32_bytes(&[1.0]));
    arith(&mut body, Op::ADD, k, one, k2);
    let axis = body.constant(T::INT32, &[], &1i32.to_le_bytes());
    body.op(Op::CONCATENATION, &[x, x, axis], &[x2]);
    let mut m = ModelBuilder::default();
    let n = m.input(T::TENSOR_FLOAT32, ONE);
    let x0 = m.constant(T::TENSOR_FLOAT32, row, &f32_bytes(&[1.0]));
    let zero = m.constant(T::TENSOR_FLOAT32, ONE, &f32_bytes(&[0.0]));
    let out = m.output(T::TENSOR_FLOAT32, &[1, 0]);
    let k = m.temp(T::TENSOR_FLOAT32, ONE);
    let (c, b) = (m.subgraph(0), m.subgraph(1));
    m.op(Op::WHILE, &[c, b, x0, zero, n], &[out, k]);
    m.build_with(vec![cond, body], Vec::new())
}

#[test]
fn a_state_that_grows_without_bound_fails_cleanly() {
    let p = prepared(&doubling_model());
    // 2^6 elements fit after regrowing.
    let (status, shapes, out) = run(&p, &[vec![6.0]], &[4 * 64], None);
    assert_eq!(status, ErrorStatus::None);
    assert_eq!(shapes[0].dimensions, [1, 64]);
    assert!(out[0].iter().all(|&v| v == 1.0));
    // 2^60 elements never fit: an error, not a hang or a crash.
    let start = Instant::now();
    let (status, _, _) = run(&p, &[vec![60.0]], &[4], None);
    assert_ne!(status, ErrorStatus::None);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    // The prepared model still runs.
    let (status, shapes, _) = run(&p, &[vec![2.0]], &[16], None);
    assert_eq!(status, ErrorStatus::None);
    assert_eq!(shapes[0].dimensions, [1, 4]);
}
