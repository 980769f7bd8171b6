//! The driver over a misbehaving device (the emulator's seeded fault plan): DMA faults
//! and a lost device become HAL errors, never a hang or a wrong result.

mod common;

use std::sync::Arc;

use common::supported_cases;
use vnpu_driver::device::PrepareArgs;
use vnpu_driver::device::{IDevice, IPreparedModel, PreparedModelSlot, VnpuDevice};
use vnpu_driver::hal::{
    DeviceStatus, ErrorStatus, MeasureTiming, OptionalTimePoint, OptionalTimeoutDuration,
};
use vnpu_emu::fault::FaultPlan;
use vnpu_emu::DeviceConfig;

fn faulty(plan: FaultPlan) -> Arc<VnpuDevice> {
    VnpuDevice::with_config(DeviceConfig {
        dram_size: 64 << 20,
        faults: plan,
        ..Default::default()
    })
    .unwrap()
}

fn prepare_on(
    dev: &VnpuDevice,
    case: &vnpu_driver::conformance::corpus::TestCase,
) -> (ErrorStatus, Option<Arc<dyn IPreparedModel>>) {
    let slot = PreparedModelSlot::new();
    let ret = dev.prepare_model_1_3(PrepareArgs::new(&case.model, Some(slot.clone())));
    let r = slot.wait();
    assert!(
        ret == ErrorStatus::None || ret == r.0,
        "return and notify disagree"
    );
    r
}

#[test]
fn dma_faults_fail_the_operation() {
    let dev = faulty(FaultPlan {
        seed: 9,
        dma_fault_ppm: 1_000_000,
        ..Default::default()
    });
    let case = supported_cases("V1_0.jsonl.gz")
        .into_iter()
        .find(|c| c.name.starts_with("conv_float/"))
        .unwrap();
    // Preparation uploads constants by DMA: every DMA faults, so preparation fails.
    let (status, prepared) = prepare_on(&dev, &case);
    assert_eq!(status, ErrorStatus::GeneralFailure);
    assert!(prepared.is_none());
}

#[test]
fn a_lost_device_is_unavailable() {
    // Enough commands for preparation (constant upload, program upload), then lost.
    let dev = faulty(FaultPlan {
        lose_after: Some(2),
        ..Default::default()
    });
    let case = supported_cases("V1_0.jsonl.gz")
        .into_iter()
        .find(|c| c.name.starts_with("conv_float/"))
        .unwrap();
    let (status, prepared) = prepare_on(&dev, &case);
    assert_eq!(status, ErrorStatus::None);
    let (request, _, _) = case.make_request().unwrap();
    let (status, shapes, _) = prepared.unwrap().execute_synchronously_1_3(
        &request,
        MeasureTiming::YES,
        OptionalTimePoint::NONE,
        OptionalTimeoutDuration(None),
    );
    assert_eq!(status, ErrorStatus::DeviceUnavailable);
    assert!(shapes.is_empty());
    assert_eq!(dev.get_status(), DeviceStatus::Offline);
}
