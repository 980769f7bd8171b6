//! Preparation and execution themselves, not only the validator: a conformance-case line
//! (hostile JSON, or a mutated corpus case) is prepared on the device and, when that
//! works, executed synchronously. Never a panic (the workers' guards would hide one as
//! GENERAL_FAILURE, so their panic count is checked too), never a hang.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use vnpu_driver::device::VnpuDevice;
use vnpu_driver::hal::{ErrorStatus, MeasureTiming, OptionalTimePoint, OptionalTimeoutDuration};
use vnpu_emu::DeviceConfig;

fn device() -> &'static Arc<VnpuDevice> {
    static DEV: OnceLock<Arc<VnpuDevice>> = OnceLock::new();
    DEV.get_or_init(|| {
        VnpuDevice::with_config(DeviceConfig {
            dram_size: 64 << 20,
            ..Default::default()
        })
        .expect("device")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(case) = vnpu_driver::conformance::corpus::parse_case(text) else { return };
    let dev = device();
    let (_, status, prepared) = vnpu_driver::conformance::prepare_plain(dev.as_ref(), &case.model);
    assert_eq!(dev.worker_panics(), 0, "a preparation panicked");
    let (ErrorStatus::None, Some(prepared)) = (status, prepared) else { return };
    if let Ok((request, _pool, _)) = case.make_request() {
        let _ = prepared.execute_synchronously_1_3(
            &request,
            MeasureTiming::YES,
            OptionalTimePoint::NONE,
            OptionalTimeoutDuration(None),
        );
    }
});
