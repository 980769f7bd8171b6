//! The corpus cases of the operations newer than HAL 1.3 (AIDL_V2: BATCH_MATMUL, PACK,
//! int32 RESHAPE; AIDL_V3: MIRROR_PAD, REVERSE, quantised RSQRT; experimental: DENSIFY)
//! through the driver's one preparation core at the AIDL levels, executed synchronously and
//! compared with the corpus's tolerances; below their level the same models are invalid,
//! and the HAL 1.3 runner skips them as needing AIDL.

mod common;

use common::{cases, device};
use vnpu_driver::conformance::exec::{ExecOptions, ExecPath};
use vnpu_driver::conformance::{run_case, run_case_at, Verdict, NEEDS_AIDL};
use vnpu_driver::device::{PrepareArgs, PreparedModelSlot};
use vnpu_driver::hal::{ErrorStatus, HalVersion};

/// Each file, the level its cases run at (the AIDL face's own, V4, or V4 with
/// experimental features) and the level just below the one its operations need.
const FILES: &[(&str, HalVersion, HalVersion)] = &[
    ("AIDL_V2.jsonl.gz", HalVersion::AidlV4, HalVersion::AidlV1),
    ("AIDL_V3.jsonl.gz", HalVersion::AidlV4, HalVersion::AidlV2),
    (
        "experimental.jsonl.gz",
        HalVersion::Experimental,
        HalVersion::AidlV4,
    ),
];

/// Runs every case of every file at its level with `exec`; returns how many passed, having
/// failed if any did not (all listed).
fn run_all(exec: ExecOptions) -> usize {
    let dev = device();
    let mut passed = 0;
    let mut others = Vec::new();
    for &(file, level, _) in FILES {
        for case in cases(file) {
            let report = run_case_at(&dev, &case, level, exec);
            match &report.verdict {
                Verdict::Pass => passed += 1,
                v => others.push(format!("{file} {} at {level:?}: {v:?}", case.name)),
            }
        }
    }
    assert!(
        others.is_empty(),
        "{} cases did not pass ({exec:?}):\n{}",
        others.len(),
        others.join("\n")
    );
    assert_eq!(dev.worker_panics(), 0);
    passed
}

#[test]
fn aidl_corpus_cases_pass_at_their_levels() {
    let exec = ExecOptions {
        path: ExecPath::Sync,
        ..ExecOptions::default()
    };
    assert_eq!(run_all(exec), 417, "every visible case of the three files");
}

#[test]
fn aidl_corpus_cases_pass_with_unknown_output_shapes() {
    // The suite's dynamic-output variant: every output's dimensions unknown, the real
    // shapes returned, and an output one byte short refused with its shape.
    let exec = ExecOptions {
        path: ExecPath::Sync,
        dynamic_shapes: true,
        ..ExecOptions::default()
    };
    assert_eq!(run_all(exec), 417);
}

#[test]
fn aidl_corpus_models_are_invalid_below_their_level() {
    let dev = device();
    for &(file, _, below) in FILES {
        for case in cases(file) {
            for level in [HalVersion::V1_3, below] {
                let (status, _) = dev.supported_operations_at(level, &case.model);
                assert_eq!(status, ErrorStatus::InvalidArgument, "{file} {}", case.name);
                let slot = PreparedModelSlot::new();
                let ret = dev.prepare_at(level, PrepareArgs::new(&case.model, Some(slot.clone())));
                assert_eq!(ret, ErrorStatus::InvalidArgument, "{file} {}", case.name);
                assert_eq!(slot.wait().0, ErrorStatus::InvalidArgument);
            }
        }
    }
}

#[test]
fn hidl_runner_skips_aidl_cases_as_needing_aidl() {
    let dev = device();
    for &(file, _, _) in FILES {
        for case in cases(file) {
            let report = run_case(dev.as_ref(), &case);
            assert_eq!(
                report.verdict,
                Verdict::Skip(NEEDS_AIDL.into()),
                "{file} {}",
                case.name
            );
        }
    }
}

#[test]
fn hostile_densify_metadata_is_refused_never_a_panic() {
    use vnpu_driver::conformance::exec::execute;
    use vnpu_driver::hal::{OperandLifeTime, OperationType};
    let dev = device();
    let all = cases("experimental.jsonl.gz");
    let mut refused = 0;
    for name in ["densify_5/densify_5", "densify_8/densify_8"] {
        let case = all.iter().find(|c| c.name == name).expect("case");
        let main = &case.model.main;
        let op = main
            .operations
            .iter()
            .find(|o| o.r#type == OperationType::DENSIFY)
            .expect("DENSIFY");
        for &i in &op.inputs[1..] {
            let o = &main.operands[i as usize];
            assert_eq!(
                o.lifetime,
                OperandLifeTime::CONSTANT_COPY,
                "{name} operand {i}"
            );
            for k in 0..o.location.length as usize / 4 {
                for bad in [-1, 0, 1, 3, 7, 1 << 30, i32::MIN] {
                    let mut model = case.model.clone();
                    let at = o.location.offset as usize + 4 * k;
                    model.operand_values[at..at + 4].copy_from_slice(&bad.to_le_bytes());
                    let slot = PreparedModelSlot::new();
                    dev.prepare_at(
                        HalVersion::Experimental,
                        PrepareArgs::new(&model, Some(slot.clone())),
                    );
                    let (status, prepared) = slot.wait();
                    let Some(prepared) = prepared else {
                        assert_eq!(
                            status,
                            ErrorStatus::InvalidArgument,
                            "{name} {i}[{k}] = {bad}"
                        );
                        refused += 1;
                        continue;
                    };
                    // Metadata that still describes a tensor runs; whatever it gives, the
                    // device never writes outside the output.
                    let (request, _, _) = case.make_request().expect("request");
                    execute(&prepared, &request, ExecPath::Sync).expect("execution");
                }
            }
        }
    }
    assert!(refused > 0);
    assert_eq!(dev.worker_panics(), 0);
}
