//! Port of VTS 1.3 `ValidateRequest.cpp`: removing any input or any output of a request
//! built for a V1_0 corpus model must be rejected with INVALID_ARGUMENT, and the unmutated
//! request must be accepted.
//!
//! The assertion lives in one place, [`expect_invalid_request`]: the validator rejects the
//! mutant, and so does every execution path of a model prepared on the device
//! (execute_1_3 returned and notified, executeSynchronously_1_3). Burst and executeFenced
//! join when they land.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use std::sync::{Arc, Mutex};
use vnpu_driver::conformance::corpus::{self, TestCase};

use common::Mode;
use vnpu_driver::device::IPreparedModel;
use vnpu_driver::hal::{ErrorStatus, MeasureTiming, Model, Request, Timing};
use vnpu_driver::validate::validate_request;

fn cases() -> &'static [TestCase] {
    static CASES: OnceLock<Vec<TestCase>> = OnceLock::new();
    CASES.get_or_init(|| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance/V1_0.jsonl.gz");
        let entries = corpus::read_corpus(&path).expect("open V1_0 corpus");
        entries
            .into_iter()
            .map(|(line, c)| c.unwrap_or_else(|e| panic!("V1_0 line {line}: {e}")))
            .collect()
    })
}

/// The assertion every mutant goes through: the request must be rejected with
/// INVALID_ARGUMENT.
fn expect_invalid_request(request: &Request, model: &Model) {
    for allow_unspecified_output in [true, false] {
        match validate_request(request, model, allow_unspecified_output) {
            Ok(()) => panic!("mutated request was accepted"),
            Err(e) => assert_eq!(e.status(), ErrorStatus::InvalidArgument, "{e}"),
        }
    }
    if let Some(prepared) = prepared(model) {
        for mode in [Mode::Sync, Mode::Async] {
            for measure in [MeasureTiming::NO, MeasureTiming::YES] {
                let (status, shapes, timing) = common::execute(&prepared, request, mode, measure);
                assert_eq!(status, ErrorStatus::InvalidArgument, "{mode:?}");
                assert!(shapes.is_empty());
                assert_eq!(timing, Timing::NONE);
            }
        }
    }
}

/// The model prepared on the device, once per model, if the device supports it.
fn prepared(model: &Model) -> Option<Arc<dyn IPreparedModel>> {
    type Cache = Mutex<Vec<(Model, Option<Arc<dyn IPreparedModel>>)>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(Vec::new()));
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = cache.iter().find(|(m, _)| m == model) {
        return p.clone();
    }
    let (_, p) = common::prepare(model);
    cache.push((model.clone(), p.clone()));
    p
}

fn requests() -> impl Iterator<Item = (&'static TestCase, Request)> {
    cases().iter().map(|c| {
        let (request, _pool, _outputs) = c
            .make_request()
            .unwrap_or_else(|e| panic!("{}: make_request: {e}", c.name));
        (c, request)
    })
}

#[test]
fn unmutated_requests_are_valid() {
    for (c, r) in requests() {
        for allow in [true, false] {
            if let Err(e) = validate_request(&r, &c.model, allow) {
                panic!("{}: {e}", c.name);
            }
        }
    }
}

#[test]
fn remove_input() {
    for (c, r) in requests() {
        for i in 0..r.inputs.len() {
            let mut m = r.clone();
            m.inputs.remove(i);
            let res = std::panic::catch_unwind(|| expect_invalid_request(&m, &c.model));
            assert!(res.is_ok(), "{}: removing input {i} was accepted", c.name);
        }
    }
}

#[test]
fn remove_output() {
    for (c, r) in requests() {
        for i in 0..r.outputs.len() {
            let mut m = r.clone();
            m.outputs.remove(i);
            let res = std::panic::catch_unwind(|| expect_invalid_request(&m, &c.model));
            assert!(res.is_ok(), "{}: removing output {i} was accepted", c.name);
        }
    }
}
