//! Vendor extensions: the accelerator's fused GELU ("dev.vnpu.fused" VNPU_GELU) against the
//! nine-operation NNAPI chain a client without the extension runs (MUL, MUL, MUL, ADD, MUL,
//! TANH, ADD, MUL, MUL), both prepared once and executed synchronously through the driver on
//! the emulated device. Group `extensions`, functions `fused/gelu_<elements>` and
//! `unfused/gelu_<elements>`. Each model's modelled device time (the timing model's
//! `timeOnDevice`, µs) is printed once before it is measured.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use vnpu_driver::conformance::corpus::{TestBuffer, TestCase, TestOutput};
use vnpu_driver::device::{IPreparedModel, VnpuDevice};
use vnpu_driver::extensions::fused::gelu_models;
use vnpu_driver::hal::{
    ErrorStatus, MeasureTiming, Model, OptionalTimePoint, OptionalTimeoutDuration, Request,
};

fn prepare(dev: &VnpuDevice, model: &Model) -> Arc<dyn IPreparedModel> {
    let (_, status, prepared) = vnpu_driver::conformance::prepare_plain(dev, model);
    assert_eq!(status, ErrorStatus::None);
    prepared.expect("prepared")
}

/// A request for `model` with `x` as its input and room for its output.
fn request(model: &Model, dims: &[u32], x: &[f32]) -> (Request, TestCase) {
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let case = TestCase {
        name: "gelu".into(),
        spec: "extensions".into(),
        min_hal_version: "V1_2".into(),
        model: model.clone(),
        expect_failure: false,
        multinomial_tolerance: 0.0,
        inputs: vec![TestBuffer {
            operand: model.main.input_indexes[0],
            dimensions: dims.to_vec(),
            data: bytes.clone(),
            has_no_value: false,
        }],
        outputs: vec![TestOutput {
            operand: model.main.output_indexes[0],
            dimensions: dims.to_vec(),
            data: bytes,
            ignored: false,
        }],
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

fn gelu(c: &mut Criterion) {
    let dev = VnpuDevice::new().expect("device");
    let mut g = c.benchmark_group("extensions");
    for dims in [[1u32, 32, 32, 32], [1, 64, 64, 64]] {
        let len: u32 = dims.iter().product();
        let x: Vec<f32> = (0..len)
            .map(|i| -6.0 + 12.0 * i as f32 / len as f32)
            .collect();
        let (fused, unfused) = gelu_models(&dims, 1);
        for (kind, model) in [("fused", fused), ("unfused", unfused)] {
            let prepared = prepare(&dev, &model);
            let (request, _case) = request(&model, &dims, &x);
            let device_us = run(&prepared, &request, MeasureTiming::YES);
            eprintln!(
                "{kind}/gelu_{len}: {} operations, modelled device time {device_us} us",
                model.main.operations.len()
            );
            g.bench_function(format!("{kind}/gelu_{len}"), |b| {
                b.iter(|| run(&prepared, &request, MeasureTiming::NO))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, gelu);
criterion_main!(benches);
