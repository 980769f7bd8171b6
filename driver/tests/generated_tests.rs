//! Port of the VTS GeneratedTestHarness (GeneratedTest and DynamicOutputShapeTest) over the
//! project's corpus: every case the device supports, through sync and async execution, with
//! and without timing, checked with the corpus's tolerances.

mod common;

use common::{execute, prepare, supported_cases, Mode};
use vnpu_driver::conformance::compare;
use vnpu_driver::conformance::corpus::TestCase;
use vnpu_driver::hal::{ErrorStatus, MeasureTiming, Memory, Timing};

fn read(pool: &Memory, offset: u32, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let fd = pool.fd().expect("fd");
    nix::sys::uio::pread(fd, &mut buf, offset as i64).expect("pread");
    buf
}

fn check_outputs(case: &TestCase, pool: &Memory, locations: &[vnpu_driver::hal::DataLocation]) {
    for (want, loc) in case.outputs.iter().zip(locations) {
        let ty = case.operand_type(want.operand).unwrap();
        let got = read(pool, loc.offset, want.data.len());
        let r = compare(
            want.operand,
            ty,
            &want.data,
            &got,
            case.relaxed,
            want.ignored,
        );
        assert_eq!(
            r.mismatches, 0,
            "{}: output operand {} max error {}",
            case.name, want.operand, r.max_error
        );
    }
}

fn generated_test(file: &str) {
    let cases = supported_cases(file);
    assert!(!cases.is_empty());
    for case in cases.iter().filter(|c| !c.expect_failure) {
        let (status, prepared) = prepare(&case.model);
        assert_eq!(status, ErrorStatus::None, "{}", case.name);
        let prepared = prepared.unwrap();
        for mode in [Mode::Sync, Mode::Async] {
            for measure in [MeasureTiming::NO, MeasureTiming::YES] {
                let (request, pool, locations) = case.make_request().unwrap();
                let (status, shapes, timing) = execute(&prepared, &request, mode, measure);
                assert_eq!(status, ErrorStatus::None, "{} {mode:?}", case.name);
                assert_eq!(shapes.len(), case.outputs.len());
                for (s, want) in shapes.iter().zip(&case.outputs) {
                    assert!(s.is_sufficient);
                    assert_eq!(s.dimensions, want.dimensions, "{}", case.name);
                }
                if measure == MeasureTiming::NO {
                    assert_eq!(timing, Timing::NONE);
                } else {
                    assert!(timing.time_on_device <= timing.time_in_driver, "{timing:?}");
                    assert_ne!(timing.time_in_driver, u64::MAX);
                }
                check_outputs(case, &pool, &locations);
            }
        }
    }
}

#[test]
fn generated_test_v1_0() {
    generated_test("V1_0.jsonl.gz");
}

#[test]
fn generated_test_v1_1() {
    generated_test("V1_1.jsonl.gz");
}

#[test]
fn generated_test_v1_2() {
    generated_test("V1_2.jsonl.gz");
}

#[test]
fn generated_test_v1_3() {
    generated_test("V1_3.jsonl.gz");
}

/// Output dimensions zeroed in the model: the driver returns the real shapes; with
/// output 0 one byte short, OUTPUT_INSUFFICIENT_SIZE and `isSufficient` false for it only.
#[test]
fn dynamic_output_shape_test() {
    for case in supported_cases("V1_0.jsonl.gz")
        .iter()
        .filter(|c| !c.expect_failure)
    {
        let mut model = case.model.clone();
        for &o in &model.main.output_indexes.clone() {
            let dims = &mut model.main.operands[o as usize].dimensions;
            dims.iter_mut().for_each(|d| *d = 0);
        }
        let (status, prepared) = prepare(&model);
        assert_eq!(status, ErrorStatus::None, "{}", case.name);
        let prepared = prepared.unwrap();
        let (mut request, pool, locations) = case.make_request().unwrap();
        for out in &mut request.outputs {
            out.dimensions.clear();
        }
        let (status, shapes, _) = execute(&prepared, &request, Mode::Sync, MeasureTiming::NO);
        assert_eq!(status, ErrorStatus::None, "{}", case.name);
        for (s, want) in shapes.iter().zip(&case.outputs) {
            assert_eq!(s.dimensions, want.dimensions, "{}", case.name);
        }
        check_outputs(case, &pool, &locations);

        let needs = case.outputs[0].data.len() as u32;
        if needs == 0 {
            continue;
        }
        request.outputs[0].location.length = needs - 1;
        let (status, shapes, timing) =
            execute(&prepared, &request, Mode::Async, MeasureTiming::YES);
        assert_eq!(status, ErrorStatus::OutputInsufficientSize, "{}", case.name);
        assert_eq!(timing, Timing::NONE);
        assert!(!shapes[0].is_sufficient);
        assert!(shapes[1..].iter().all(|s| s.is_sufficient));
        assert!(
            shapes[0].dimensions.is_empty() || shapes[0].dimensions == case.outputs[0].dimensions
        );
    }
}

/// Several clients at once, on different prepared models and on the same one: the
/// interrupt thread routes every completion to its own batch, and results stay right.
#[test]
fn concurrent_executions() {
    let cases: Vec<TestCase> = supported_cases("V1_0.jsonl.gz")
        .into_iter()
        .filter(|c| !c.expect_failure)
        .step_by(20)
        .take(6)
        .collect();
    let prepared: Vec<_> = cases.iter().map(|c| prepare(&c.model).1.unwrap()).collect();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (cases, prepared) = (&cases, &prepared);
            s.spawn(move || {
                for round in 0..15 {
                    let k = (t + round) % cases.len();
                    let (request, pool, locations) = cases[k].make_request().unwrap();
                    let mode = if round % 2 == 0 {
                        Mode::Sync
                    } else {
                        Mode::Async
                    };
                    let (status, _, _) = execute(&prepared[k], &request, mode, MeasureTiming::YES);
                    assert_eq!(status, ErrorStatus::None, "{}", cases[k].name);
                    check_outputs(&cases[k], &pool, &locations);
                }
            });
        }
    });
}
