//! Control flow and the whole corpus, group `control_flow`:
//! - `while_16`: a WHILE of 16 iterations (`x = 0; while x != 16 { x += 1 }`), prepared once
//!   and executed synchronously through the driver: the loop runs on the device, so this
//!   is one round trip however many iterations it makes. Its modelled device time is
//!   printed once.
//! - `corpus`: every case of the visible corpus (V1_0 to V1_3 and V1_3_cts_only) through
//!   the whole driver path in one process, on as many workers as the machine has cores
//!   (issue 13's goal: at most 60 s on 2 cores).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use vnpu_driver::conformance::corpus::{TestBuffer, TestCase, TestOutput};
use vnpu_driver::conformance::suite::{run_suite, SuiteOptions};
use vnpu_driver::device::{IPreparedModel, VnpuDevice};
use vnpu_driver::hal::builder::ModelBuilder;
use vnpu_driver::hal::{
    ErrorStatus, MeasureTiming, Model, OperandType as T, OperationType as Op, OptionalTimePoint,
    OptionalTimeoutDuration, Request,
};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `x = 0; while x != limit { x += 1 }`.
fn counting_model() -> Model {
    let one_dim = &[1u32][..];
    let sub = |n_out: usize, f: &dyn Fn(&mut ModelBuilder, &[u32], u32)| {
        let mut b = ModelBuilder::default();
        let ins: Vec<u32> = (0..3)
            .map(|_| b.input(T::TENSOR_FLOAT32, one_dim))
            .collect();
        let t = if n_out == 0 {
            T::TENSOR_BOOL8
        } else {
            T::TENSOR_FLOAT32
        };
        let out = b.output(t, one_dim);
        f(&mut b, &ins, out);
        b
    };
    let cond = sub(0, &|b, i, o| b.op(Op::NOT_EQUAL, &[i[0], i[1]], &[o]));
    let body = sub(1, &|b, i, o| {
        let none = b.constant(T::INT32, &[], &0i32.to_le_bytes());
        b.op(Op::ADD, &[i[0], i[2], none], &[o]);
    });
    let mut m = ModelBuilder::default();
    let limit = m.input(T::TENSOR_FLOAT32, one_dim);
    let zero = m.constant(T::TENSOR_FLOAT32, one_dim, &f32_bytes(&[0.0]));
    let one = m.constant(T::TENSOR_FLOAT32, one_dim, &f32_bytes(&[1.0]));
    let x = m.output(T::TENSOR_FLOAT32, one_dim);
    let (c, b) = (m.subgraph(0), m.subgraph(1));
    m.op(Op::WHILE, &[c, b, zero, limit, one], &[x]);
    m.build_with(vec![cond, body], Vec::new())
}

fn request(model: &Model, limit: f32) -> Request {
    let case = TestCase {
        name: "while_16".into(),
        spec: "control_flow".into(),
        min_hal_version: "V1_3".into(),
        model: model.clone(),
        expect_failure: false,
        multinomial_tolerance: 0.0,
        inputs: vec![TestBuffer {
            operand: model.main.input_indexes[0],
            dimensions: vec![1],
            data: f32_bytes(&[limit]),
            has_no_value: false,
        }],
        outputs: vec![TestOutput {
            operand: model.main.output_indexes[0],
            dimensions: vec![1],
            data: f32_bytes(&[limit]),
            ignored: false,
        }],
        relaxed: false,
    };
    case.make_request().expect("request").0
}

fn execute(prepared: &Arc<dyn IPreparedModel>, request: &Request, measure: MeasureTiming) -> u64 {
    let (status, _, timing) = prepared.execute_synchronously_1_3(
        request,
        measure,
        OptionalTimePoint::NONE,
        OptionalTimeoutDuration(None),
    );
    assert_eq!(status, ErrorStatus::None);
    timing.time_on_device
}

fn corpus() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance");
    ["V1_0", "V1_1", "V1_2", "V1_3", "V1_3_cts_only"]
        .iter()
        .map(|f| dir.join(format!("{f}.jsonl.gz")))
        .collect()
}

fn bench(c: &mut Criterion) {
    let dev = VnpuDevice::new().expect("device");
    let model = counting_model();
    let (_, status, prepared) = vnpu_driver::conformance::prepare_plain(dev.as_ref(), &model);
    assert_eq!(status, ErrorStatus::None);
    let prepared = prepared.expect("prepared");
    let req = request(&model, 16.0);
    let on_device = execute(&prepared, &req, MeasureTiming::YES);
    println!("control_flow/while_16: modelled device time {on_device} µs");
    let mut g = c.benchmark_group("control_flow");
    g.bench_function("while_16", |b| {
        b.iter(|| execute(&prepared, &req, MeasureTiming::NO))
    });
    let files = corpus();
    let options = SuiteOptions::default();
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.bench_function("corpus", |b| {
        b.iter(|| {
            let records = run_suite(dev.as_ref(), &files, &options, &mut || {});
            assert!(records.len() > 7000);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
