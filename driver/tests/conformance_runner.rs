//! The conformance runner and the `vnpu` CLI contract: V1_0 runs with no failure, every
//! case made only of the core float32 operations passes, skips come only from
//! getSupportedOperations, and the CLI's output and exit codes are as documented.

mod common;

use std::process::Command;

use common::{cases, device};
use vnpu_driver::conformance::corpus::TestCase;
use vnpu_driver::conformance::{run_case, Verdict};
use vnpu_driver::device::IDevice;
use vnpu_driver::hal::{Operation, OperationType};

/// The operations left to "Operations II" (recurrent, detection, lookup, random): a case
/// using one of them may be skipped.
const OPERATIONS_II: &[&str] = &[
    "LSTM",
    "RNN",
    "SVDF",
    "BIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_RNN",
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "UNIDIRECTIONAL_SEQUENCE_RNN",
    "QUANTIZED_16BIT_LSTM",
    "QUANTIZED_LSTM",
    "ROI_ALIGN",
    "ROI_POOLING",
    "BOX_WITH_NMS_LIMIT",
    "GENERATE_PROPOSALS",
    "DETECTION_POSTPROCESSING",
    "HEATMAP_MAX_KEYPOINT",
    "AXIS_ALIGNED_BBOX_TRANSFORM",
    "EMBEDDING_LOOKUP",
    "HASHTABLE_LOOKUP",
    "LSH_PROJECTION",
    "RANDOM_MULTINOMIAL",
];

const FILES: &[&str] = &[
    "V1_0.jsonl.gz",
    "V1_1.jsonl.gz",
    "V1_2.jsonl.gz",
    "V1_3.jsonl.gz",
    "V1_3_cts_only.jsonl.gz",
];

/// Whether the definition list itself refuses `op` (no definition, no lowering, or a main
/// operand type outside what the definition runs), decided from the registry directly
/// rather than through getSupportedOperations.
fn refused_by_definitions(case: &TestCase, op: &Operation) -> bool {
    let Some(def) = vnpu_driver::ops::definition(op.r#type) else {
        return true;
    };
    let operands = &case.model.main.operands;
    let ins: Vec<_> = op.inputs.iter().map(|&i| &operands[i as usize]).collect();
    let outs: Vec<_> = op.outputs.iter().map(|&i| &operands[i as usize]).collect();
    match def.bind(&ins, &outs) {
        None => true,
        Some((sig, _)) => def.lower.is_none() || !def.runs.contains(&ins[sig.main].r#type),
    }
}

/// For every visible corpus file: no case fails, a skipped case has an operation the
/// definition list refuses, and every case whose operations all lie outside "Operations II"
/// passes.
#[test]
fn corpus_files_have_no_failures_and_skip_only_refused_operations() {
    let dev = device();
    let mut outside_ops_ii_skipped = 0;
    for file in FILES {
        let (mut passed, mut skipped) = (0, 0);
        for case in cases(file) {
            let report = run_case(dev.as_ref(), &case);
            match &report.verdict {
                Verdict::Fail(why) => panic!("{file} {}: {why}", case.name),
                Verdict::Skip(_) => {
                    skipped += 1;
                    let ops = &case.model.main.operations;
                    assert!(
                        ops.iter().any(|op| refused_by_definitions(&case, op)),
                        "{file} {}: skipped though the definitions run every operation",
                        case.name
                    );
                    let uses_ops_ii = case
                        .model
                        .main
                        .operations
                        .iter()
                        .chain(case.model.referenced.iter().flat_map(|s| &s.operations))
                        .any(|o| OPERATIONS_II.contains(&o.r#type.name().unwrap_or("")));
                    if !uses_ops_ii {
                        outside_ops_ii_skipped += 1;
                    }
                }
                Verdict::Pass => passed += 1,
            }
        }
        eprintln!("{file}: {passed} passed, {skipped} skipped");
        assert!(passed > 0, "{file}");
    }
    assert_eq!(
        outside_ops_ii_skipped, 0,
        "cases outside Operations II were skipped"
    );
}

/// `conv_float` with one more operation, of a vendor extension the driver does not know
/// (valid, and refused by getSupportedOperations, as NNAPI intends): operation 1.
fn with_foreign_operation() -> TestCase {
    use vnpu_driver::hal::{ExtensionNameAndPrefix, Operand, OperandLifeTime};
    let mut case = cases("V1_0.jsonl.gz")
        .into_iter()
        .find(|c| c.name == "conv_float/conv_float")
        .unwrap();
    let m = &mut case.model;
    m.extension_name_to_prefix.push(ExtensionNameAndPrefix {
        name: "com.example.unknown".into(),
        prefix: 1,
    });
    let out = m.main.output_indexes[0];
    let mut o: Operand = m.main.operands[out as usize].clone();
    o.lifetime = OperandLifeTime::TEMPORARY_VARIABLE;
    o.number_of_consumers = 0;
    m.main.operands.push(o);
    let extra = (m.main.operands.len() - 1) as u32;
    m.main.operands[out as usize].number_of_consumers += 1;
    m.main.operations.push(Operation {
        r#type: OperationType(1 << 16),
        inputs: vec![out],
        outputs: vec![extra],
    });
    case
}

#[test]
fn expected_failures_pass_when_refused_and_fail_when_everything_succeeds() {
    let dev = device();
    let all = cases("V1_0.jsonl.gz");
    // Refused by getSupportedOperations: skipped normally, a pass when failure is expected.
    let mut foreign = with_foreign_operation();
    assert!(matches!(
        run_case(dev.as_ref(), &foreign).verdict,
        Verdict::Skip(_)
    ));
    foreign.expect_failure = true;
    assert_eq!(run_case(dev.as_ref(), &foreign).verdict, Verdict::Pass);
    // A supported case that runs fine fails when failure was expected.
    let mut conv = all
        .iter()
        .find(|c| c.name == "conv_float/conv_float")
        .unwrap()
        .clone();
    assert_eq!(run_case(dev.as_ref(), &conv).verdict, Verdict::Pass);
    conv.expect_failure = true;
    assert!(matches!(
        run_case(dev.as_ref(), &conv).verdict,
        Verdict::Fail(_)
    ));
    // An invalid model: a failure with its reason normally, a pass when failure is expected.
    conv.expect_failure = false;
    conv.model.main.operations[0].inputs[0] = 999;
    match run_case(dev.as_ref(), &conv).verdict {
        Verdict::Fail(why) => assert!(why.contains("INVALID_ARGUMENT"), "{why}"),
        v => panic!("{v:?}"),
    }
    conv.expect_failure = true;
    assert_eq!(run_case(dev.as_ref(), &conv).verdict, Verdict::Pass);
}

#[test]
fn unsupported_operations_are_reported_per_operation() {
    let case = with_foreign_operation();
    let (status, supported) = device().get_supported_operations_1_3(&case.model);
    assert_eq!(status, vnpu_driver::hal::ErrorStatus::None);
    assert_eq!(supported, [true, false]);
}

fn vnpu(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vnpu"))
        .args(args)
        .output()
        .expect("run vnpu");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_run_passes_a_case_by_name() {
    let (code, out, _) = vnpu(&["run", "conv_float"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.lines().last(), Some("PASS"));
}

#[test]
fn cli_run_rejects_malformed_json_with_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("vnpu-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"name\": \"x\", \"model\": [").unwrap();
    let (code, _, err) = vnpu(&["run", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("bad.json"), "{err}");
    let (code, _, err) = vnpu(&["run", "no_such_case_anywhere"]);
    assert_eq!(code, 2);
    assert!(err.contains("no_such_case_anywhere"), "{err}");
}

#[test]
fn cli_conformance_ends_with_the_count_line_and_writes_json() {
    let corpus = common::corpus_path("V1_0.jsonl.gz");
    let report = std::env::temp_dir().join(format!("vnpu-report-{}.json", std::process::id()));
    let (code, out, _) = vnpu(&[
        "conformance",
        corpus.to_str().unwrap(),
        "--filter",
        "softmax",
        "--json",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    let last = out.lines().last().unwrap();
    let nums: Vec<&str> = last.split(", ").collect();
    assert_eq!(nums.len(), 3, "{last}");
    assert!(
        nums[0].ends_with(" passed")
            && nums[1].ends_with(" failed")
            && nums[2].ends_with(" skipped"),
        "{last}"
    );
    assert!(out.contains("SOFTMAX"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let cases = json.as_array().unwrap();
    assert!(!cases.is_empty());
    assert!(cases
        .iter()
        .all(|c| c["name"].as_str().unwrap().contains("softmax")));
    assert!(cases
        .iter()
        .all(|c| ["passed", "failed", "skipped"].contains(&c["status"].as_str().unwrap())));
    // Every operation of the main subgraph with the type of its input 0.
    assert!(cases.iter().all(|c| {
        let ops = c["operations"].as_array().unwrap();
        !ops.is_empty()
            && ops.iter().all(|o| {
                o["operation"].as_str().is_some_and(|s| !s.is_empty())
                    && o["input_type"].as_str().is_some_and(|s| !s.is_empty())
            })
    }));
    assert!(cases.iter().any(|c| c["operations"]
        .as_array()
        .unwrap()
        .iter()
        .any(|o| o["operation"] == "SOFTMAX" && o["input_type"] == "TENSOR_FLOAT32")));

    // The markdown table of docs/CONFORMANCE.md from that report.
    let (code, md, err) = vnpu(&["conformance-table", report.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(md.starts_with("# Conformance"), "{md}");
    assert!(md
        .lines()
        .any(|l| l.starts_with("| SOFTMAX | TENSOR_FLOAT32 | ")));
    let (code, _, err) = vnpu(&["conformance-table", corpus.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("not a conformance report"), "{err}");
}

#[test]
fn cli_conformance_output_does_not_depend_on_jobs() {
    let corpus = common::corpus_path("V1_0.jsonl.gz");
    let run = |jobs: &str| {
        let (code, out, err) = vnpu(&[
            "conformance",
            corpus.to_str().unwrap(),
            "--filter",
            "conv",
            "--jobs",
            jobs,
        ]);
        assert_eq!(code, 0, "{out}");
        // Not a terminal: no progress bar, nothing on stderr.
        assert_eq!(err, "");
        out
    };
    let one = run("1");
    assert!(one.contains("CONV_2D"));
    assert_eq!(one, run("3"));
}

/// `--path` and `--memory` pass the same cases as the default mode (checked here on
/// V1_0; the whole corpus is checked by hand, see docs/ARCHITECTURE.md).
#[test]
fn cli_conformance_paths_and_memories_agree_with_the_default() {
    let corpus = common::corpus_path("V1_0.jsonl.gz");
    let run = |extra: &[&str]| {
        let mut args = vec!["conformance", corpus.to_str().unwrap(), "--jobs", "2"];
        args.extend_from_slice(extra);
        let (code, out, err) = vnpu(&args);
        assert_eq!(code, 0, "{extra:?}: {out}{err}");
        out
    };
    let default = run(&[]);
    for extra in [
        &["--path", "sync"][..],
        &["--path", "fenced"],
        &["--memory", "device"],
        &["--path", "fenced", "--memory", "device"],
        &["--memory", "blob"],
        &["--path", "sync", "--memory", "blob"],
    ] {
        assert_eq!(run(extra), default, "{extra:?}");
    }
    let (code, _, _) = vnpu(&["conformance", corpus.to_str().unwrap(), "--memory", "nope"]);
    assert_ne!(code, 0);
}

/// In device mode a case's inputs and outputs really live in driver-managed buffers.
#[test]
fn device_memory_mode_uses_driver_managed_buffers() {
    use vnpu_driver::conformance::exec::{DeviceMemories, ExecOptions, ExecPath, MemoryMode};
    use vnpu_driver::conformance::{prepare_plain, run_case_opts};
    let dev = device();
    let case = cases("V1_0.jsonl.gz")
        .into_iter()
        .find(|c| c.name.starts_with("conv_float/"))
        .unwrap();
    let prepared = prepare_plain(dev.as_ref(), &case.model).2.unwrap();
    let (mut request, _, _) = case.make_request().unwrap();
    let m = DeviceMemories::set_up(dev.as_ref(), &prepared, &case, &mut request).unwrap();
    assert_eq!(m.buffers(), case.inputs.len() + case.outputs.len());
    for path in [ExecPath::Async, ExecPath::Sync, ExecPath::Fenced] {
        let exec = ExecOptions {
            path,
            memory: MemoryMode::Device,
            ..Default::default()
        };
        let report = run_case_opts(dev.as_ref(), &case, &prepare_plain, exec);
        assert_eq!(report.verdict, Verdict::Pass, "{path:?}");
    }
}

/// The dynamic-output-shape variant (`vnpu conformance --dynamic-shapes`): with the main
/// outputs' dimensions unknown the driver reports the real shapes, and one byte short gives
/// OUTPUT_INSUFFICIENT_SIZE with the real shape.
#[test]
fn dynamic_shapes_variant() {
    use vnpu_driver::conformance::{dynamic, prepare_plain, run_case_opts, ExecOptions, ExecPath};
    let dev = device();
    let case = cases("V1_0.jsonl.gz")
        .into_iter()
        .find(|c| c.name.starts_with("conv_float/"))
        .unwrap();
    assert!(dynamic::applies(&case));
    let unknown = dynamic::with_unknown_outputs(&case);
    let out = unknown.model.main.output_indexes[0] as usize;
    assert!(unknown.model.main.operands[out]
        .dimensions
        .iter()
        .all(|&d| d == 0));
    let prepared = prepare_plain(dev.as_ref(), &unknown.model).2.unwrap();
    let (mut request, _, _) = unknown.make_request().unwrap();
    dynamic::unspecified(&mut request);
    let (status, shapes, _) =
        vnpu_driver::conformance::exec::execute(&prepared, &request, ExecPath::Sync).unwrap();
    assert_eq!(status, vnpu_driver::hal::ErrorStatus::None);
    assert_eq!(shapes[0].dimensions, case.outputs[0].dimensions);
    let short = dynamic::one_byte_short(&request).unwrap();
    let (status, shapes, _) =
        vnpu_driver::conformance::exec::execute(&prepared, &short, ExecPath::Sync).unwrap();
    dynamic::check_short(status, &shapes, &case.outputs[0].dimensions).unwrap();
    assert!(dynamic::check_short(
        vnpu_driver::hal::ErrorStatus::None,
        &shapes,
        &case.outputs[0].dimensions
    )
    .is_err());
    for path in [ExecPath::Async, ExecPath::Sync, ExecPath::Burst] {
        let exec = ExecOptions {
            path,
            dynamic_shapes: true,
            ..Default::default()
        };
        let report = run_case_opts(dev.as_ref(), &case, &prepare_plain, exec);
        assert_eq!(report.verdict, Verdict::Pass, "{path:?}");
    }
}
