//! Real models: steady-state `execute` (executeSynchronously_1_3) of each shipped .tflite
//! model through the driver on the emulated device, prepared once, on its committed
//! reference inputs. Group `models`, one function per model (`models/<model>`). LiteRT's
//! single-thread XNNPACK time for the same model on the same machine, when
//! `scripts/litert_compare.py MODEL --bench` recorded it in target/litert_times.json, is
//! printed beside it (issue 14's goal: vnpu at most 2x LiteRT on the float models). Run
//! with `VNPU_ISA=avx2`, it prints the time `--isa avx2` recorded (LiteRT capped alike).

use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion};
use vnpu_driver::device::VnpuDevice;
use vnpu_driver::hal::ErrorStatus;
use vnpu_driver::tflite::{import, npy, run};

const MODELS: &[&str] = &[
    "face_detection_short_range",
    "face_detection_full_range",
    "face_landmark",
    "iris_landmark",
    // int8, made by scripts/quantize_models.py.
    "face_detection_short_range_int8",
    "iris_landmark_int8",
    "face_landmark_int8",
    "face_detection_full_range_int8",
    // Sparse float16 weights behind DENSIFY (prepared with experimental features).
    "face_detection_full_range_sparse",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// LiteRT's recorded time for `model` at the level the kernels run with: the key is the
/// model's name, with `@avx2` (say) when `VNPU_ISA` narrows the CPU's level.
fn litert_key(model: &str) -> String {
    use vnpu_emu::kernels::isa::{detected, isa};
    if isa() < detected() {
        format!("{model}@{}", isa().name())
    } else {
        model.to_string()
    }
}

fn litert_ms(key: &str) -> Option<f64> {
    let text = std::fs::read_to_string(root().join("target/litert_times.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get(key)?.as_f64()
}

fn inputs(dir: &Path) -> Vec<npy::Array> {
    (0..)
        .map(|k| dir.join(format!("input_{k}.npy")))
        .take_while(|p| p.exists())
        .map(|p| npy::read(&std::fs::read(p).expect("input")).expect("npy"))
        .collect()
}

fn bench(c: &mut Criterion) {
    let dev = VnpuDevice::new().expect("device");
    let mut g = c.benchmark_group("models");
    for name in MODELS {
        let bytes =
            std::fs::read(root().join("models").join(format!("{name}.tflite"))).expect("model");
        let imported = import(&bytes, false).expect("import");
        let (_, status, prepared) =
            vnpu_driver::conformance::prepare_at(dev.as_ref(), &imported.model, imported.level);
        assert_eq!(status, ErrorStatus::None);
        let prepared = prepared.expect("prepared");
        let arrays = inputs(&root().join("models/reference").join(name));
        let (request, _pool) = run::request(&imported, &arrays).expect("request");
        let key = litert_key(name);
        match litert_ms(&key) {
            Some(ms) => println!("models/{name}: LiteRT (XNNPACK, 1 thread) {ms:.3} ms ({key})"),
            None => {
                let flag = key.split_once('@').map(|(_, l)| format!(" --isa {l}"));
                let flag = flag.unwrap_or_default();
                println!("models/{name}: no LiteRT time (scripts/litert_compare.py models/{name}.tflite --bench{flag})")
            }
        }
        g.bench_function(*name, |b| {
            b.iter(|| {
                let (status, _, _) = vnpu_driver::device::IPreparedModel::execute_synchronously_1_3(
                    prepared.as_ref(),
                    &request,
                    vnpu_driver::hal::MeasureTiming::NO,
                    vnpu_driver::hal::OptionalTimePoint::NONE,
                    vnpu_driver::hal::OptionalTimeoutDuration(None),
                );
                assert_eq!(status, ErrorStatus::None);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
