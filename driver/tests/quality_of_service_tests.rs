//! Port of the VTS QualityOfServiceTests (DeadlineTest): every priority with deadlines
//! NOW, SHORT (5 ms) and UNLIMITED, for preparation and for execution.

mod common;

use common::{execute_with, prepare_with, supported_cases, Mode};
use vnpu_driver::hal::{ErrorStatus, MeasureTiming, OptionalTimePoint, Priority, Timing};

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
                for mode in [Mode::Sync, Mode::Async] {
                    let (request, _, _) = case.make_request().unwrap();
                    let (status, shapes, timing) =
                        execute_with(&prepared, &request, mode, MeasureTiming::NO, point(e));
                    assert!(allowed(status, e), "execute {e:?}: {status}");
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
