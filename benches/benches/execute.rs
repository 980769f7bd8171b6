//! End-to-end executions through the driver on the emulated device: a one-op model (the
//! fixed cost of a request: validation, pool mapping, DMA, program run, completion
//! routing) and the corpus MobileNet (real work).

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use vnpu_driver::conformance::lookup;
use vnpu_driver::device::PrepareArgs;
use vnpu_driver::device::{IDevice, IPreparedModel, PreparedModelSlot, VnpuDevice};
use vnpu_driver::hal::{ErrorStatus, MeasureTiming, OptionalTimePoint, OptionalTimeoutDuration};

fn corpus() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance");
    vec![dir.join("V1_0.jsonl.gz")]
}

fn prepare(
    dev: &VnpuDevice,
    name: &str,
) -> (
    Arc<dyn IPreparedModel>,
    vnpu_driver::conformance::corpus::TestCase,
) {
    let case = lookup(&corpus(), name).expect("case");
    let slot = PreparedModelSlot::new();
    dev.prepare_model_1_3(PrepareArgs::new(&case.model, Some(slot.clone())));
    let (status, prepared) = slot.wait();
    assert_eq!(status, ErrorStatus::None);
    (prepared.expect("prepared"), case)
}

fn execute(c: &mut Criterion) {
    let dev = VnpuDevice::new().expect("device");
    let mut g = c.benchmark_group("execute_sync");
    for (label, name) in [
        ("add_1op", "add"),
        ("mobilenet_224_gender", "mobilenet_224_gender_basic_fixed"),
    ] {
        let (prepared, case) = prepare(&dev, name);
        let (request, _pool, _) = case.make_request().expect("request");
        g.bench_function(label, |b| {
            b.iter(|| {
                let (status, _, _) = prepared.execute_synchronously_1_3(
                    &request,
                    MeasureTiming::NO,
                    OptionalTimePoint::NONE,
                    OptionalTimeoutDuration(None),
                );
                assert_eq!(status, ErrorStatus::None);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, execute);
criterion_main!(benches);
