//! The CPU work of one burst execution on the server's side, without the queues: for
//! instruction counts (`valgrind --tool=callgrind target/release/examples/burst_work`).

use std::path::PathBuf;

use vnpu_driver::burst::datum::{deserialize_request, serialize_request, serialize_result};
use vnpu_driver::conformance::{lookup, prepare_plain};
use vnpu_driver::device::VnpuDevice;
use vnpu_driver::execute::VnpuPreparedModel;
use vnpu_driver::hal::{ErrorStatus, MeasureTiming};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance");
    let case = lookup(&[dir.join("V1_0.jsonl.gz")], "add").expect("the 1-element ADD case");
    let device = VnpuDevice::new().expect("device");
    let (_, status, prepared) = prepare_plain(device.as_ref(), &case.model);
    assert_eq!(status, ErrorStatus::None);
    let prepared = prepared.expect("prepared");
    let model = prepared
        .as_any()
        .and_then(|a| a.downcast_ref::<VnpuPreparedModel>())
        .expect("a vnpu model");
    let (request, pool, _) = case.make_request().expect("request");
    let pins = vec![model.pin(&pool)];
    let packet = serialize_request(&request, &[0], MeasureTiming::NO);
    // A burst's memo of its last execution (`--no-memo`: every execution runs the full path).
    let use_memo = !std::env::args().any(|a| a == "--no-memo");
    let mut memo = None;
    for _ in 0..n {
        let (req, _slots, measure) = deserialize_request(&packet).expect("packet");
        let mut req = req;
        req.pools = request.pools.clone();
        if !use_memo {
            memo = None;
        }
        let (status, shapes, timing) = model.execute_pinned(&req, measure, &pins, &mut memo);
        assert_eq!(status, ErrorStatus::None);
        std::hint::black_box(serialize_result(status, &shapes, timing));
    }
}
