//! The burst server's packet handling: arbitrary bytes, cut into 24-byte elements, are
//! sent as a request packet to a live burst on a prepared one-op model (whose memory is
//! known under slot 0). Whatever arrives, exactly one well-formed result packet comes
//! back; never a panic, never a hang.
#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use vnpu_driver::burst::controller::{BurstController, CHANNEL_LENGTH};
use vnpu_driver::burst::datum::deserialize_result;
use vnpu_driver::burst::fmq::{Element, ELEMENT};
use vnpu_driver::conformance::corpus::TestCase;
use vnpu_driver::device::{IPreparedModel, VnpuDevice};
use vnpu_driver::hal::{MeasureTiming, Memory};

struct Fixture {
    burst: BurstController,
    /// Kept alive so slot 0 stays known.
    _memory: Memory,
    _prepared: Arc<dyn IPreparedModel>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let device = VnpuDevice::new().expect("device");
        let corpus = vnpu_driver::conformance::default_corpus();
        let case: TestCase = vnpu_driver::conformance::lookup(&corpus, "add").expect("case");
        let (_, _, prepared) = vnpu_driver::conformance::prepare_plain(device.as_ref(), &case.model);
        let prepared = prepared.expect("prepared");
        let burst = BurstController::new(
            prepared.as_ref(),
            CHANNEL_LENGTH,
            Duration::ZERO,
            Duration::from_secs(30),
        )
        .expect("burst");
        let (request, memory, _) = case.make_request().expect("request");
        let (status, _, _) = burst.execute(&request, MeasureTiming::NO);
        assert_eq!(status, vnpu_driver::hal::ErrorStatus::None);
        Fixture {
            burst,
            _memory: memory,
            _prepared: prepared,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let packet: Vec<Element> = data
        .chunks_exact(ELEMENT)
        .take(CHANNEL_LENGTH as usize)
        .map(|c| c.try_into().expect("24 bytes"))
        .collect();
    if packet.is_empty() {
        return;
    }
    let result = f.burst.send_raw(&packet).expect("a result comes back");
    deserialize_result(&result).expect("the result packet is well formed");
});
