//! Port of the VTS QualityOfServiceTests (DeadlineTest): every priority with deadlines
//! NOW, SHORT (5 ms) and UNLIMITED, for preparation and for execution on the
//! asynchronous, synchronous and fenced paths; and GeneratedTestHarness's
//! FencedComputeTest (a zero-sized output is refused on the fenced path).

mod common;

use common::{execute_with, prepare, prepare_with, supported_cases, Mode, MODES};
use vnpu_driver::hal::{
    ErrorStatus, MeasureTiming, NativeHandle, OptionalTimePoint, OptionalTimeoutDuration, Priority,
    Timing,
};

#[derive(Clone, Copy, Debug)]
enum Deadline {
    Now,
    Short,
    Unlimited,
}

fn point(d: Deadline) -> OptionalTimePoint {
    match d {
        Deadline::Now => OptionalTimePoint(Some(OptionalTimePoint::now_ns())),
        Deadline::Short => OptionalTimePoint::after_ns(5_000_000),
        Deadline::Unlimited => OptionalTimePoint::NONE,
    }
}

fn allowed(status: ErrorStatus, d: Deadline) -> bool {
    match d {
        Deadline::Unlimited => status == ErrorStatus::None,
        _ => matches!(
            status,
            ErrorStatus::None
                | ErrorStatus::MissedDeadlineTransient
                | ErrorStatus::MissedDeadlinePersistent
        ),
    }
}

#[test]
fn deadline_test() {
    let case = supported_cases("V1_0.jsonl.gz")
        .into_iter()
        .find(|c| c.name.starts_with("conv_float/"))
        .unwrap();
    for priority in [Priority::LOW, Priority::MEDIUM, Priority::HIGH] {
        for d in [Deadline::Now, Deadline::Short, Deadline::Unlimited] {
            let (status, prepared) = prepare_with(&case.model, priority, point(d));
            assert!(allowed(status, d), "prepare {priority:?} {d:?}: {status}");
            let Some(prepared) = prepared else { continue };
            for e in [Deadline::Now, Deadline::Short, Deadline::Unlimited] {
                for &mode in MODES {
                    let (request, _, _) = case.make_request().unwrap();
                    let (status, shapes, timing) =
                        execute_with(&prepared, &request, mode, MeasureTiming::NO, point(e));
                    assert!(allowed(status, e), "execute {mode:?} {e:?}: {status}");
                    assert_eq!(timing, Timing::NONE);
                    if status != ErrorStatus::None {
                        assert!(shapes.is_empty());
                    }
                }
            }
        }
    }
}

#[test]
fn a_passed_deadline_is_missed() {
    let case = supported_cases("V1_0.jsonl.gz").into_iter().next().unwrap();
    let past = OptionalTimePoint(Some(1));
    assert_eq!(
        prepare_with(&case.model, Priority::HIGH, past).0,
        ErrorStatus::MissedDeadlinePersistent
    );
    let prepared = prepare_with(&case.model, Priority::LOW, OptionalTimePoint::NONE)
        .1
        .unwrap();
    let (request, _, _) = case.make_request().unwrap();
    let (status, _, _) = execute_with(&prepared, &request, Mode::Sync, MeasureTiming::YES, past);
    assert_eq!(status, ErrorStatus::MissedDeadlinePersistent);
}

#[test]
fn a_passed_deadline_is_missed_on_every_path() {
    let case = supported_cases("V1_0.jsonl.gz").into_iter().next().unwrap();
    let prepared = prepare(&case.model).1.unwrap();
    let (request, _, _) = case.make_request().unwrap();
    for &mode in MODES {
        let past = OptionalTimePoint(Some(1));
        let (status, shapes, timing) =
            execute_with(&prepared, &request, mode, MeasureTiming::YES, past);
        assert_eq!(status, ErrorStatus::MissedDeadlinePersistent, "{mode:?}");
        assert!(shapes.is_empty());
        assert_eq!(timing, Timing::NONE);
    }
    // A fenced duration that has run out while waiting for a fence that never signals.
    let never = vnpu_driver::fence::SyncFence::new().unwrap();
    let (status, fence, callback) = prepared.execute_fenced(
        &request,
        &[never.handle().unwrap()],
        MeasureTiming::YES,
        OptionalTimePoint::NONE,
        OptionalTimeoutDuration(None),
        OptionalTimeoutDuration(Some(5_000_000)),
    );
    assert_eq!(status, ErrorStatus::MissedDeadlineTransient);
    assert!(fence.is_none() && callback.is_none());
}

#[test]
fn fenced_waits_for_its_fences_and_refuses_a_null_one() {
    let case = supported_cases("V1_0.jsonl.gz").into_iter().next().unwrap();
    let prepared = prepare(&case.model).1.unwrap();
    let (request, _, _) = case.make_request().unwrap();
    let none = OptionalTimeoutDuration(None);
    let (status, fence, callback) = prepared.execute_fenced(
        &request,
        &[NativeHandle::default()],
        MeasureTiming::NO,
        OptionalTimePoint::NONE,
        none,
        none,
    );
    assert_eq!(status, ErrorStatus::InvalidArgument);
    assert!(fence.is_none() && callback.is_none());
    let gate = std::sync::Arc::new(vnpu_driver::fence::SyncFence::new().unwrap());
    let opener = {
        let gate = std::sync::Arc::clone(&gate);
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(30));
            gate.signal().unwrap();
        })
    };
    let started = std::time::Instant::now();
    let (status, fence, callback) = prepared.execute_fenced(
        &request,
        &[gate.handle().unwrap()],
        MeasureTiming::YES,
        OptionalTimePoint::NONE,
        none,
        none,
    );
    opener.join().unwrap();
    assert_eq!(status, ErrorStatus::None);
    assert!(started.elapsed() >= std::time::Duration::from_millis(30));
    assert!(fence.is_some());
    let (status, launch, after) = callback.unwrap().get_execution_info();
    assert_eq!(status, ErrorStatus::None);
    assert!(launch.time_in_driver >= 30_000, "{launch:?}");
    assert!(after.time_in_driver < launch.time_in_driver);
    assert!(after.time_on_device <= after.time_in_driver);
}

/// FencedComputeTest: a model whose output is zero-sized (its dimensions contain 0, so
/// they are not fully specified) is refused on the fenced path with INVALID_ARGUMENT.
#[test]
fn fenced_compute_zero_sized_output() {
    let mut zero_sized: Vec<_> = ["V1_2.jsonl.gz", "V1_3.jsonl.gz"]
        .into_iter()
        .flat_map(supported_cases)
        .filter(|c| !c.expect_failure && c.outputs.iter().any(|o| o.dimensions.contains(&0)))
        .take(8)
        .collect();
    // The corpus's zero-sized cases use operations the device does not run yet
    // (BOX_WITH_NMS_LIMIT, ROI_ALIGN, ...): a model whose output operand is zero-sized in
    // its first dimension stands in for them.
    let mut case = supported_cases("V1_0.jsonl.gz")
        .into_iter()
        .find(|c| c.name.starts_with("conv_float/"))
        .unwrap();
    let out = case.outputs[0].operand as usize;
    case.model.main.operands[out].dimensions[0] = 0;
    zero_sized.push(case);
    for case in zero_sized {
        let Some(prepared) = prepare(&case.model).1 else {
            continue;
        };
        let (mut request, _, _) = case.make_request().unwrap();
        for o in &mut request.outputs {
            o.dimensions.clear();
        }
        let (status, _, _) = execute_with(
            &prepared,
            &request,
            Mode::Fenced,
            MeasureTiming::NO,
            OptionalTimePoint::NONE,
        );
        assert_eq!(status, ErrorStatus::InvalidArgument, "{}", case.name);
    }
}
