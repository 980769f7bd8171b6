//! The conformance runner and the `vnpu` CLI contract: V1_0 runs with no failure, every
//! case made only of the core float32 operations passes, skips come only from
//! getSupportedOperations, and the CLI's output and exit codes are as documented.

mod common;

use std::process::Command;

use common::{cases, device};
use vnpu_driver::conformance::{run_case, Verdict};
use vnpu_driver::device::IDevice;
use vnpu_driver::hal::{OperandType, OperationType};

const CORE: &[&str] = &[
    "ADD",
    "SUB",
    "MUL",
    "DIV",
    "FULLY_CONNECTED",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "AVERAGE_POOL_2D",
    "MAX_POOL_2D",
    "L2_POOL_2D",
    "RELU",
    "RELU1",
    "RELU6",
    "LOGISTIC",
    "TANH",
    "SOFTMAX",
    "RESHAPE",
    "CONCATENATION",
    "FLOOR",
    "L2_NORMALIZATION",
    "DEPTH_TO_SPACE",
    "SPACE_TO_DEPTH",
    "RESIZE_BILINEAR",
    "PAD",
    "TRANSPOSE",
    "MEAN",
    "SQUEEZE",
];

#[test]
fn v1_0_core_cases_pass_and_the_rest_are_skipped() {
    let dev = device();
    let mut core_cases = 0;
    for case in cases("V1_0.jsonl.gz") {
        let report = run_case(dev.as_ref(), &case);
        let core_ops = case
            .model
            .main
            .operations
            .iter()
            .all(|o| CORE.contains(&o.r#type.name().unwrap_or("")));
        let float_types = case.model.main.operands.iter().all(|o| {
            matches!(
                o.r#type,
                OperandType::TENSOR_FLOAT32
                    | OperandType::TENSOR_INT32
                    | OperandType::INT32
                    | OperandType::FLOAT32
                    | OperandType::BOOL
            )
        });
        match &report.verdict {
            Verdict::Fail(why) => panic!("{}: {why}", case.name),
            Verdict::Skip(_) => {
                let (_, supported) = dev.get_supported_operations_1_3(&case.model);
                assert!(
                    supported.contains(&false),
                    "{}: skipped though every operation is supported",
                    case.name
                );
                assert!(
                    !(core_ops && float_types),
                    "{}: a core float32 case was skipped",
                    case.name
                );
            }
            Verdict::Pass => {}
        }
        if core_ops && float_types {
            core_cases += 1;
            assert_eq!(report.verdict, Verdict::Pass, "{}", case.name);
        }
    }
    assert!(core_cases > 150, "{core_cases}");
}

#[test]
fn expected_failures_pass_when_refused_and_fail_when_everything_succeeds() {
    let dev = device();
    let all = cases("V1_0.jsonl.gz");
    // Refused by getSupportedOperations: skipped normally, a pass when failure is expected.
    let mut lstm = all
        .iter()
        .find(|c| c.name.starts_with("lstm/"))
        .unwrap()
        .clone();
    assert!(matches!(
        run_case(dev.as_ref(), &lstm).verdict,
        Verdict::Skip(_)
    ));
    lstm.expect_failure = true;
    assert_eq!(run_case(dev.as_ref(), &lstm).verdict, Verdict::Pass);
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
    let case = cases("V1_0.jsonl.gz")
        .into_iter()
        .find(|c| c.name.starts_with("lstm/"))
        .unwrap();
    let (_, supported) = device().get_supported_operations_1_3(&case.model);
    for (op, s) in case.model.main.operations.iter().zip(supported) {
        assert_eq!(s, op.r#type != OperationType::LSTM);
    }
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
