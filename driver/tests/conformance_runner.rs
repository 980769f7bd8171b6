//! The conformance runner and the `vnpu` CLI contract: V1_0 runs with no failure, every
//! case made only of the core float32 operations passes, skips come only from
//! getSupportedOperations, and the CLI's output and exit codes are as documented.

mod common;

use std::path::PathBuf;
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

/// A scratch directory of its own for one test.
fn scratch(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vnpu-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The corpus line of `add/add` (the first case of V1_0).
fn add_line() -> String {
    let path = common::corpus_path("V1_0.jsonl.gz");
    let mut lines = vnpu_driver::conformance::corpus::open_lines(&path).unwrap();
    let (_, line) = lines.next().unwrap();
    let line = line.unwrap();
    assert!(line.starts_with("{\"name\":\"add/add\""), "{line}");
    line
}

/// `add/add` with its JSON changed by `edit`.
fn edited_add(edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&add_line()).unwrap();
    edit(&mut v);
    serde_json::to_string(&v).unwrap()
}

/// Runs `vnpu conformance FILE --jobs 1` on `lines`: (exit status, stdout, stderr).
fn conformance_on(test: &str, lines: &[String]) -> (i32, String, String) {
    let dir = scratch(test);
    let file = dir.join("cases.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let r = vnpu(&["conformance", file.to_str().unwrap(), "--jobs", "1"]);
    std::fs::remove_dir_all(&dir).unwrap();
    r
}

/// An expected output whose dimensions say 16 GiB is refused before anything is sized from
/// it (the dimensions must agree with the model's output operand, and the values given
/// with the dimensions): the case fails with INVALID_ARGUMENT and the run goes on.
#[test]
fn huge_expected_output_dims_rejected() {
    let huge = [1073741824u64, 4];
    let lines = vec![
        // Against the model's specified dimensions [2].
        edited_add(|v| v["outputs"][0]["dimensions"] = serde_json::json!(huge)),
        // The model's output of unknown rank: the values given do not fill the dimensions.
        edited_add(|v| {
            v["model"]["main"]["operands"][3]["dimensions"] = serde_json::json!([]);
            v["outputs"][0]["dimensions"] = serde_json::json!(huge);
        }),
        // Unknown dimensions of known rank, likewise.
        edited_add(|v| {
            v["model"]["main"]["operands"][3]["dimensions"] = serde_json::json!([0]);
            v["outputs"][0]["dimensions"] = serde_json::json!([4294967295u64]);
        }),
        add_line(),
    ];
    let (code, out, err) = conformance_on("huge-dims", &lines);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(
        out.lines().last(),
        Some("1 passed, 3 failed, 0 skipped"),
        "{out}"
    );
    let fails: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL ")).collect();
    assert_eq!(fails.len(), 3, "{out}");
    assert!(
        fails.iter().all(|l| l.contains("INVALID_ARGUMENT")),
        "{out}"
    );
    // `vnpu run` on such a case: a clear error, exit status 2.
    let dir = scratch("huge-dims-run");
    let file = dir.join("huge.json");
    std::fs::write(&file, &lines[0]).unwrap();
    let (code, _, err) = vnpu(&["run", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("INVALID_ARGUMENT"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A case naming as its output an operand that is not the model's output (a constant, an
/// input, or the outputs out of order) fails with INVALID_ARGUMENT; the run goes on.
#[test]
fn output_operand_not_an_output_rejected() {
    let lines = vec![
        edited_add(|v| {
            v["outputs"][0]["operand"] = serde_json::json!(2);
            v["outputs"][0]["dimensions"] = serde_json::json!([]);
            v["outputs"][0]["data"] = serde_json::json!([0]);
        }),
        edited_add(|v| v["outputs"][0]["operand"] = serde_json::json!(0)),
        edited_add(|v| {
            let o = v["outputs"][0].clone();
            v["outputs"] = serde_json::json!([o.clone(), o]);
        }),
        edited_add(|v| v["outputs"] = serde_json::json!([])),
        edited_add(|v| {
            let inputs = v["inputs"].as_array().unwrap().clone();
            v["inputs"] = serde_json::json!([inputs[1], inputs[0]]);
        }),
        add_line(),
    ];
    let (code, out, err) = conformance_on("not-an-output", &lines);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(
        out.lines().last(),
        Some("1 passed, 5 failed, 0 skipped"),
        "{out}"
    );
    let fails: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL ")).collect();
    assert_eq!(fails.len(), 5, "{out}");
    assert!(
        fails.iter().all(|l| l.contains("INVALID_ARGUMENT")),
        "{out}"
    );
}

/// A corpus line of 1 GiB (in a gzip file of 1 MB) is skipped as it streams by, never held:
/// it fails as too long, the lines around it run, and the runner's peak memory stays far
/// below the line's size.
#[test]
fn overlong_line_rejected() {
    use std::io::Write;
    let gz = |bytes: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    };
    // Concatenated gzip members read as one stream: the line's middle is one compressed
    // MiB of 'x', 1024 times.
    let mut file = gz(format!("{}\n{{\"name\":\"", add_line()).as_bytes());
    let mib = gz(&vec![b'x'; 1 << 20]);
    for _ in 0..1024 {
        file.extend_from_slice(&mib);
    }
    file.extend_from_slice(&gz(format!("\"}}\n{}\n", add_line()).as_bytes()));
    assert!(file.len() < 8 << 20);
    let dir = scratch("overlong");
    let path = dir.join("long.jsonl.gz");
    std::fs::write(&path, &file).unwrap();
    let (code, out, err, rss_kib) =
        common::cli::vnpu_measured_out(&["conformance", path.to_str().unwrap(), "--jobs", "1"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert_eq!(
        out.lines().last(),
        Some("2 passed, 1 failed, 0 skipped"),
        "{out}"
    );
    let fail = out.lines().find(|l| l.starts_with("FAIL ")).unwrap();
    assert!(
        fail.contains(":2:") && fail.contains("longer than the corpus line limit (64 MiB)"),
        "{fail}"
    );
    // At most one line of at most 64 MiB is held.
    assert!(rss_kib < 256 << 10, "peak RSS {rss_kib} KiB");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An empty corpus runs no case: exit status 2, "no case matched".
#[test]
fn empty_corpus_exits_2() {
    let dir = scratch("empty");
    let file = dir.join("empty.jsonl");
    std::fs::write(&file, "").unwrap();
    let (code, out, err) = vnpu(&["conformance", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("no case matched"), "{err}");
    assert_eq!(out.lines().last(), Some("0 passed, 0 failed, 0 skipped"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `--filter` that matches no case: exit status 2, "no case matched".
#[test]
fn filter_matching_nothing_exits_2() {
    let corpus = common::corpus_path("V1_0.jsonl.gz");
    let (code, out, err) = vnpu(&[
        "conformance",
        corpus.to_str().unwrap(),
        "--filter",
        "no-case-is-called-this",
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("no case matched"), "{err}");
}

/// A trace that cannot be written (no such directory, a full disk) is an error: exit
/// status 2 with the OS's reason.
#[test]
fn trace_write_failure_exits_2() {
    for (path, why) in [
        ("/nonexistent/t.json", "No such file or directory"),
        ("/dev/full", "No space left on device"),
    ] {
        let (code, _, err) = vnpu(&["run", "add", "--trace", path]);
        assert_eq!(code, 2, "{path}: {err}");
        assert!(err.contains(path) && err.contains(why), "{path}: {err}");
    }
    // The other outputs likewise: the JSON report, a model's output directory.
    let corpus = common::corpus_path("V1_0.jsonl.gz");
    let (code, _, err) = vnpu(&[
        "conformance",
        corpus.to_str().unwrap(),
        "--filter",
        "add/add",
        "--json",
        "/dev/full",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models/face_detection_short_range_int8.tflite");
    let (code, _, err) = vnpu(&[
        "run",
        model.to_str().unwrap(),
        "--output-dir",
        "/dev/full/outputs",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/dev/full/outputs"), "{err}");
}

/// stdout on a full disk, or a pipe nobody reads: exit status 2 and the reason on stderr,
/// never a panic.
#[test]
fn stdout_write_failure_exits_2() {
    let corpus = common::corpus_path("V1_0.jsonl.gz");
    let commands: [&[&str]; 3] = [
        &["run", "add"],
        &["conformance", corpus.to_str().unwrap(), "--filter", "add/"],
        &["info"],
    ];
    for args in commands {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_vnpu"))
            .args(args)
            .stdout(full)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("cannot write to stdout") && err.contains("No space left on device"),
            "{args:?}: {err}"
        );
        // A closed pipe.
        let mut child = Command::new(env!("CARGO_BIN_EXE_vnpu"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("Broken pipe"), "{args:?}: {err}");
    }
}

/// A service that dies during `vnpu conformance --remote` ends the run at once with one
/// error and exit status 2, not a FAIL line for each case left.
#[test]
fn remote_service_lost_stops_run() {
    let mut service = common::service::Service::start("lost-run");
    let corpus = common::corpus_path("V1_2.jsonl.gz");
    let out_path = std::env::temp_dir().join(format!("vnpu-lost-run-{}", std::process::id()));
    let runner = Command::new(env!("CARGO_BIN_EXE_vnpu"))
        .args([
            "conformance",
            corpus.to_str().unwrap(),
            "--jobs",
            "2",
            "--remote",
        ])
        .arg(&service.socket)
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the service once the runner is connected and has run cases.
    let probe = service.connect();
    assert!(common::service::eventually(
        std::time::Duration::from_secs(30),
        || probe.usage().is_ok_and(|u| u.device.prepared_models > 0)
    ));
    drop(probe);
    service.child.kill().unwrap();
    service.child.wait().unwrap();
    let t = std::time::Instant::now();
    let out = runner.wait_with_output().unwrap();
    let waited = t.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = std::fs::read_to_string(&out_path).unwrap();
    let _ = std::fs::remove_file(&out_path);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.matches("vnpu: ").count(), 1, "{err}");
    assert!(err.contains("the run stopped"), "{err}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    assert!(waited < std::time::Duration::from_secs(10), "{waited:?}");
}
