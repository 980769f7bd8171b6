//! The AIDL V4 face's executions of the one-op ADD (the fixed cost of a request): the 1.3
//! executeSynchronously as the baseline, V4's executeSynchronously (conversions on top),
//! a reusable execution (request validated and memory mapped once, the run repeated from
//! its memo) and an IBurst with a memory identifier token.

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use vnpu_driver::aidl::convert::request_to_aidl;
use vnpu_driver::aidl::{self, AidlDevice, IDevice as _, PrepareModelConfig, PreparedModelSlot};
use vnpu_driver::conformance::lookup;
use vnpu_driver::device::VnpuDevice;
use vnpu_driver::hal::{ErrorStatus, MeasureTiming, OptionalTimePoint, OptionalTimeoutDuration};

fn aidl(c: &mut Criterion) {
    let dev = VnpuDevice::new().expect("device");
    let face = AidlDevice::new(Arc::clone(&dev));
    let corpus =
        vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance/V1_0.jsonl.gz")];
    let case = lookup(&corpus, "add").expect("case");
    let slot = PreparedModelSlot::new();
    let model = aidl::convert::model_to_aidl(&case.model).expect("V4 model");
    face.prepare_model_with_config(&model, &PrepareModelConfig::default(), Some(slot.clone()))
        .expect("prepare");
    let (status, prepared) = slot.wait();
    assert_eq!(status, ErrorStatus::None);
    let prepared = prepared.expect("prepared");
    let core = prepared.core().expect("core");
    let (request, _pool, _) = case.make_request().expect("request");
    let v4 = request_to_aidl(&request).expect("V4 request");
    let mut g = c.benchmark_group("aidl_execute");
    g.bench_function("hidl_sync_add_1op", |b| {
        b.iter(|| {
            let (s, _, _) = core.execute_synchronously_1_3(
                &request,
                MeasureTiming::NO,
                OptionalTimePoint::NONE,
                OptionalTimeoutDuration(None),
            );
            assert_eq!(s, ErrorStatus::None);
        })
    });
    g.bench_function("v4_sync_add_1op", |b| {
        b.iter(|| {
            let r = prepared.execute_synchronously(&v4, false, -1, -1);
            assert!(r.expect("run").output_sufficient_size);
        })
    });
    let execution = prepared
        .create_reusable_execution(&v4, &aidl::ExecutionConfig::default())
        .expect("reusable");
    g.bench_function("v4_reusable_add_1op", |b| {
        b.iter(|| {
            let r = execution.execute_synchronously(-1);
            assert!(r.expect("run").output_sufficient_size);
        })
    });
    let burst = prepared.configure_execution_burst().expect("burst");
    let tokens: Vec<i64> = (0..v4.pools.len() as i64).collect();
    g.bench_function("v4_burst_add_1op", |b| {
        b.iter(|| {
            let r = burst.execute_synchronously(&v4, &tokens, false, -1, -1);
            assert!(r.expect("run").output_sufficient_size);
        })
    });
    g.finish();
}

criterion_group!(benches, aidl);
criterion_main!(benches);
