//! One LSTM step through the driver on the emulated device: a float32 LSTM operation of a
//! speech-model size (batch 1, input 256, 512 cells, output 512, no peephole or projection,
//! weights as constants, input and states as model inputs), prepared once and executed
//! synchronously. Group `recurrent`, function `lstm_step`. The modelled device time (the
//! timing model's `timeOnDevice`, µs) is printed once before it is measured.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use vnpu_driver::conformance::corpus::{TestBuffer, TestCase, TestOutput};
use vnpu_driver::device::{IPreparedModel, VnpuDevice};
use vnpu_driver::hal::builder::ModelBuilder;
use vnpu_driver::hal::{
    ErrorStatus, MeasureTiming, Model, OperandLifeTime, OperandType as T, OperationType,
    OptionalTimePoint, OptionalTimeoutDuration, Request,
};

const BATCH: u32 = 1;
const INPUT: u32 = 256;
const CELLS: u32 = 512;
const OUTPUT: u32 = 512;

fn values(n: u32, seed: u32, scale: f32) -> Vec<u8> {
    (0..n)
        .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 1000.0 - 0.5)
        .flat_map(|v| (v * scale).to_le_bytes())
        .collect()
}

/// The LSTM model: inputs (input, output state, cell state), outputs (scratch, output
/// state, cell state, output).
fn lstm_model() -> Model {
    let f = T::TENSOR_FLOAT32;
    let mut b = ModelBuilder::default();
    let x = b.input(f, &[BATCH, INPUT]);
    let mut seed = 1;
    let mut weights = |b: &mut ModelBuilder, rows: u32, cols: u32| {
        seed += 1;
        b.constant(f, &[rows, cols], &values(rows * cols, seed, 0.1))
    };
    let i2x: Vec<u32> = (0..4).map(|_| weights(&mut b, CELLS, INPUT)).collect();
    let r2x: Vec<u32> = (0..4).map(|_| weights(&mut b, CELLS, OUTPUT)).collect();
    let none = |b: &mut ModelBuilder, dims: &[u32]| b.operand(f, dims, OperandLifeTime::NO_VALUE);
    let peephole: Vec<u32> = (0..3).map(|_| none(&mut b, &[0])).collect();
    let biases: Vec<u32> = (0..4)
        .map(|k| b.constant(f, &[CELLS], &values(CELLS, 100 + k, 1.0)))
        .collect();
    let proj_w = none(&mut b, &[0, 0]);
    let proj_b = none(&mut b, &[0]);
    let h0 = b.input(f, &[BATCH, OUTPUT]);
    let c0 = b.input(f, &[BATCH, CELLS]);
    let act = b.constant(T::INT32, &[], &4i32.to_le_bytes());
    let clip = b.constant(T::FLOAT32, &[], &0f32.to_le_bytes());
    let proj_clip = b.constant(T::FLOAT32, &[], &0f32.to_le_bytes());
    let scratch = b.output(f, &[BATCH, CELLS * 4]);
    let h1 = b.output(f, &[BATCH, OUTPUT]);
    let c1 = b.output(f, &[BATCH, CELLS]);
    let out = b.output(f, &[BATCH, OUTPUT]);
    let mut inputs = vec![x];
    inputs.extend(&i2x);
    inputs.extend(&r2x);
    inputs.extend(&peephole);
    inputs.extend(&biases);
    inputs.extend([proj_w, proj_b, h0, c0, act, clip, proj_clip]);
    b.op(OperationType::LSTM, &inputs, &[scratch, h1, c1, out]);
    b.build(Vec::new())
}

fn request(model: &Model) -> (Request, TestCase) {
    let main = &model.main;
    let dims = |i: u32| main.operands[i as usize].dimensions.clone();
    let input = |k: usize, seed: u32| {
        let operand = main.input_indexes[k];
        let d = dims(operand);
        TestBuffer {
            operand,
            data: values(d.iter().product(), seed, 1.0),
            dimensions: d,
            has_no_value: false,
        }
    };
    let output = |operand: u32| {
        let d = dims(operand);
        TestOutput {
            operand,
            data: vec![0; d.iter().product::<u32>() as usize * 4],
            dimensions: d,
            ignored: false,
        }
    };
    let case = TestCase {
        name: "lstm_step".into(),
        spec: "recurrent".into(),
        min_hal_version: "V1_0".into(),
        model: model.clone(),
        expect_failure: false,
        multinomial_tolerance: 0.0,
        inputs: vec![input(0, 7), input(1, 8), input(2, 9)],
        outputs: main.output_indexes.iter().map(|&o| output(o)).collect(),
        relaxed: false,
    };
    let (request, _pool, _) = case.make_request().expect("request");
    (request, case)
}

fn run(prepared: &Arc<dyn IPreparedModel>, request: &Request, measure: MeasureTiming) -> u64 {
    let (status, _, timing) = prepared.execute_synchronously_1_3(
        request,
        measure,
        OptionalTimePoint::NONE,
        OptionalTimeoutDuration(None),
    );
    assert_eq!(status, ErrorStatus::None);
    timing.time_on_device
}

fn lstm_step(c: &mut Criterion) {
    let dev = VnpuDevice::new().expect("device");
    let model = lstm_model();
    let (_, status, prepared) = vnpu_driver::conformance::prepare_plain(&*dev, &model);
    assert_eq!(status, ErrorStatus::None);
    let prepared = prepared.expect("prepared");
    let (request, _case) = request(&model);
    let device_us = run(&prepared, &request, MeasureTiming::YES);
    eprintln!(
        "lstm_step: batch {BATCH}, input {INPUT}, {CELLS} cells, output {OUTPUT}: modelled device \
         time {device_us} us"
    );
    let mut g = c.benchmark_group("recurrent");
    g.bench_function("lstm_step", |b| {
        b.iter(|| run(&prepared, &request, MeasureTiming::NO))
    });
    g.finish();
}

criterion_group!(benches, lstm_step);
criterion_main!(benches);
