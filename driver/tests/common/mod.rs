//! Shared helpers of the driver's integration tests.
#![allow(dead_code)]

pub mod cli;
pub mod service;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use vnpu_driver::conformance::corpus::{open_corpus, TestCase};
use vnpu_driver::device::PrepareArgs;
use vnpu_driver::device::{
    ExecutionCallback, ExecutionSlot, IDevice, IPreparedModel, PreparedModelSlot, VnpuDevice,
};
use vnpu_driver::hal::{
    ErrorStatus, MeasureTiming, Model, OptionalTimePoint, OptionalTimeoutDuration, OutputShape,
    Priority, Request, Timing,
};

/// One device shared by a test binary (as a HAL service is shared by its clients).
pub fn device() -> Arc<VnpuDevice> {
    static DEV: OnceLock<Arc<VnpuDevice>> = OnceLock::new();
    Arc::clone(DEV.get_or_init(|| VnpuDevice::new().expect("device")))
}

pub fn corpus_path(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../conformance")
        .join(file)
}

pub fn cases(file: &str) -> Vec<TestCase> {
    open_corpus(&corpus_path(file))
        .expect("corpus")
        .map(|(_, c)| c.expect("case parses"))
        .collect()
}

/// Cases every operation of which the device supports.
pub fn supported_cases(file: &str) -> Vec<TestCase> {
    let dev = device();
    cases(file)
        .into_iter()
        .filter(|c| {
            let (st, s) = dev.get_supported_operations_1_3(&c.model);
            st == ErrorStatus::None && s.iter().all(|&b| b)
        })
        .collect()
}

/// prepareModel_1_3, checking that return and notification agree and come once.
pub fn prepare(model: &Model) -> (ErrorStatus, Option<Arc<dyn IPreparedModel>>) {
    prepare_with(model, Priority::MEDIUM, OptionalTimePoint::NONE)
}

pub fn prepare_with(
    model: &Model,
    priority: Priority,
    deadline: OptionalTimePoint,
) -> (ErrorStatus, Option<Arc<dyn IPreparedModel>>) {
    let slot = PreparedModelSlot::new();
    let ret = device().prepare_model_1_3(PrepareArgs {
        priority,
        deadline,
        ..PrepareArgs::new(model, Some(slot.clone()))
    });
    let (status, prepared) = slot.wait();
    // The HAL's rule: a launch that failed is notified with the same status; a launch that
    // succeeded may still end in an error (a deadline that passes while the work is queued).
    assert!(
        ret == ErrorStatus::None || ret == status,
        "prepareModel_1_3 returned {ret} but notified {status}"
    );
    assert_eq!(slot.notifications(), 1, "notified exactly once");
    assert_eq!(prepared.is_some(), status == ErrorStatus::None);
    (status, prepared)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Async,
    Sync,
    Fenced,
}

/// Every execution path the VTS suites drive.
pub const MODES: &[Mode] = &[Mode::Async, Mode::Sync, Mode::Fenced];

pub fn execute(
    prepared: &Arc<dyn IPreparedModel>,
    request: &Request,
    mode: Mode,
    measure: MeasureTiming,
) -> (ErrorStatus, Vec<OutputShape>, Timing) {
    execute_with(prepared, request, mode, measure, OptionalTimePoint::NONE)
}

pub fn execute_with(
    prepared: &Arc<dyn IPreparedModel>,
    request: &Request,
    mode: Mode,
    measure: MeasureTiming,
    deadline: OptionalTimePoint,
) -> (ErrorStatus, Vec<OutputShape>, Timing) {
    let timeout = OptionalTimeoutDuration(None);
    match mode {
        Mode::Sync => prepared.execute_synchronously_1_3(request, measure, deadline, timeout),
        Mode::Async => {
            let slot = ExecutionSlot::new();
            let ret = prepared.execute_1_3(
                request,
                measure,
                deadline,
                timeout,
                Some(slot.clone() as Arc<dyn ExecutionCallback>),
            );
            let r = slot.wait();
            if ret != ErrorStatus::None {
                assert_eq!(ret, r.0, "execute_1_3 return and notify disagree");
            }
            r
        }
        Mode::Fenced => {
            let (status, fence, callback) =
                prepared.execute_fenced(request, &[], measure, deadline, timeout, timeout);
            if status != ErrorStatus::None {
                assert!(
                    fence.is_none() && callback.is_none(),
                    "null fence and callback on error"
                );
                return (status, Vec::new(), Timing::NONE);
            }
            let fence = fence.expect("a fence");
            vnpu_driver::fence::wait_all(&[fence], OptionalTimePoint::NONE).expect("fence");
            let (status, since_launch, since_fence) =
                callback.expect("a callback").get_execution_info();
            if measure == MeasureTiming::NO || status != ErrorStatus::None {
                assert_eq!(since_launch, Timing::NONE);
                assert_eq!(since_fence, Timing::NONE);
            } else {
                for t in [since_launch, since_fence] {
                    assert!(t.time_on_device <= t.time_in_driver, "{t:?}");
                }
                assert!(since_fence.time_in_driver <= since_launch.time_in_driver);
            }
            // Fenced execution reports no output shapes.
            (status, Vec::new(), since_fence)
        }
    }
}
