//! Burst round trips in one process, for instruction counts per thread: the client
//! (`BurstController::execute`) and the burst thread (its packet handler and the job it
//! runs inline on the doorbell), the same code on both sides as `burst/burst_cross_process`.
//!
//! `valgrind --tool=callgrind --separate-threads=yes target/release/examples/burst_round N`
//! twice (N = 2000 and 4000): the difference per thread over 2000 is one round trip's
//! instructions (the setup cancels out; valgrind yields on a spin loop's `pause`, so a
//! waiting side adds a turn or two, tens of instructions).

use std::path::PathBuf;
use std::time::Duration;

use vnpu_driver::burst::controller::{BurstController, CHANNEL_LENGTH};
use vnpu_driver::burst::server::DEFAULT_SPIN;
use vnpu_driver::conformance::{lookup, prepare_plain};
use vnpu_driver::device::VnpuDevice;
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
    let (request, _pool, _) = case.make_request().expect("request");
    let burst = BurstController::new(
        prepared.as_ref(),
        CHANNEL_LENGTH,
        DEFAULT_SPIN,
        Duration::from_secs(60),
    )
    .expect("burst");
    for _ in 0..n {
        let (status, shapes, _) = burst.execute(&request, MeasureTiming::NO);
        assert_eq!(status, ErrorStatus::None);
        std::hint::black_box(shapes);
    }
}
