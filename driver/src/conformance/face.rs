//! The interface a run speaks (`--interface`): the HIDL 1.3 traits, or the AIDL V4 traits
//! ([`crate::aidl`]) over the same device, as a client that enabled NNAPI's experimental
//! features (so the experimental corpus's DENSIFY is valid). Under AIDL every case goes
//! through V4: getSupportedOperations, prepareModelWithConfig, and the execution path
//! (`--path`) mapped to its V4 call.

use std::sync::Arc;

use crate::aidl::{self, AidlDevice, IDevice as _, PrepareModelConfig, PreparedModelSlot};
use crate::hal::{ErrorStatus, Model, OutputShape, Request, Timing};
use crate::interface::{IDevice, IPreparedModel};

use super::exec::{self, ExecPath};
use super::Preparation;

/// The interface the runner drives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Interface {
    /// HIDL NN HAL 1.3 (`IDevice` 1.3, `IPreparedModel` 1.3).
    #[default]
    Hidl,
    /// AIDL NN HAL V4.
    Aidl,
}

/// A prepared model as the interface gave it.
#[derive(Clone)]
pub enum Prepared {
    /// Through HIDL 1.3.
    Hidl(Arc<dyn IPreparedModel>),
    /// Through AIDL V4.
    Aidl(Arc<dyn aidl::IPreparedModel>),
}

/// What one execution gave, and the reusable execution to run again (`--path reusable`).
pub struct Executed {
    /// Status, output shapes, timing (µs).
    pub result: (ErrorStatus, Vec<OutputShape>, Timing),
    /// The IExecution the result came from, run again by the runner.
    pub again: Option<Arc<dyn aidl::IExecution>>,
}

fn face(device: &dyn IDevice) -> AidlDevice<&dyn IDevice> {
    AidlDevice::experimental(device)
}

/// getSupportedOperations through the interface.
pub fn supported(
    device: &dyn IDevice,
    model: &Model,
    iface: Interface,
) -> (ErrorStatus, Vec<bool>) {
    match iface {
        Interface::Hidl => device.get_supported_operations_1_3(model),
        Interface::Aidl => {
            let ops = aidl::convert::model_to_aidl(model)
                .and_then(|m| face(device).get_supported_operations(&m));
            match ops {
                Ok(ops) => (ErrorStatus::None, ops),
                Err(e) => (e.0, Vec::new()),
            }
        }
    }
}

/// Prepares `model` through the interface (HIDL: with `hidl`, e.g. [`super::prepare_plain`];
/// AIDL: prepareModelWithConfig with the default configuration), waiting for the
/// notification: the launch's status, the notified status and the model.
pub fn prepare(
    device: &dyn IDevice,
    model: &Model,
    iface: Interface,
    hidl: &dyn Fn(&dyn IDevice, &Model) -> Preparation,
) -> (ErrorStatus, ErrorStatus, Option<Prepared>) {
    match iface {
        Interface::Hidl => {
            let (ret, status, p) = hidl(device, model);
            (ret, status, p.map(Prepared::Hidl))
        }
        Interface::Aidl => {
            let model = match aidl::convert::model_to_aidl(model) {
                Ok(m) => m,
                Err(e) => return (e.0, e.0, None),
            };
            let slot = PreparedModelSlot::new();
            let config = PrepareModelConfig::default();
            let ret = face(device).prepare_model_with_config(&model, &config, Some(slot.clone()));
            let (status, p) = slot.wait();
            let ret = ret.err().map_or(ErrorStatus::None, |e| e.0);
            (ret, status, p.map(Prepared::Aidl))
        }
    }
}

/// The case's inputs and outputs in driver-managed buffers, allocated through the
/// interface the model was prepared through.
pub fn device_memories(
    device: &dyn IDevice,
    prepared: &Prepared,
    case: &super::corpus::TestCase,
    request: &mut Request,
) -> Result<exec::DeviceMemories, String> {
    match prepared {
        Prepared::Hidl(p) => exec::DeviceMemories::set_up(device, p, case, request),
        Prepared::Aidl(p) => exec::DeviceMemories::set_up_aidl(&face(device), p, case, request),
    }
}

/// V4 timing (ns, -1 unmeasured) in the runner's µs.
fn micros(t: aidl::Timing) -> Timing {
    let us = |ns: i64| match ns {
        ns if ns < 0 => u64::MAX,
        ns => ns as u64 / 1000,
    };
    match t == aidl::Timing::NONE {
        true => Timing::NONE,
        false => Timing {
            time_on_device: us(t.time_on_device_ns),
            time_in_driver: us(t.time_in_driver_ns),
        },
    }
}

/// A V4 execution's outcome as the runner's (status, shapes, timing).
pub fn outcome(
    r: aidl::AidlResult<aidl::ExecutionResult>,
) -> (ErrorStatus, Vec<OutputShape>, Timing) {
    match r {
        Ok(r) => {
            let status = match r.output_sufficient_size {
                true => ErrorStatus::None,
                false => ErrorStatus::OutputInsufficientSize,
            };
            (status, r.output_shapes, micros(r.timing))
        }
        Err(e) => (e.0, Vec::new(), Timing::NONE),
    }
}

/// A V4 fenced execution's outcome, once its fence signalled.
fn fenced_outcome(
    r: aidl::AidlResult<aidl::FencedExecutionResult>,
) -> Result<(ErrorStatus, Vec<OutputShape>, Timing), String> {
    let r = match r {
        Ok(r) => r,
        Err(e) => return Ok((e.0, Vec::new(), Timing::NONE)),
    };
    if let Some(fd) = r.sync_fence {
        let h = crate::hal::NativeHandle {
            fds: vec![fd],
            ints: Vec::new(),
        };
        crate::fence::wait_all(&[h], crate::hal::OptionalTimePoint::NONE)
            .map_err(|e| e.to_string())?;
    }
    let info = r
        .callback
        .get_execution_info()
        .map_err(|e| format!("getExecutionInfo: {e}"))?;
    Ok((info.status, Vec::new(), micros(info.timing_fenced)))
}

/// Executes `request` on `path` through the interface, with timing measured. Under AIDL:
/// the default path is executeSynchronouslyWithConfig (AIDL has no callback execution),
/// sync executeSynchronously, fenced executeFenced, burst an IBurst with one memory
/// identifier token per shared pool (released after), reusable an IExecution.
pub fn execute(prepared: &Prepared, request: &Request, path: ExecPath) -> Result<Executed, String> {
    let p = match prepared {
        Prepared::Hidl(p) => {
            if path == ExecPath::Reusable {
                return Err("--path reusable needs --interface aidl".into());
            }
            let result = exec::execute(p, request, path)?;
            return Ok(Executed {
                result,
                again: None,
            });
        }
        Prepared::Aidl(p) => p,
    };
    let request =
        aidl::convert::request_to_aidl(request).map_err(|e| format!("the V4 request: {e}"))?;
    const NONE: i64 = aidl::OMITTED;
    let config = aidl::ExecutionConfig {
        measure_timing: true,
        ..aidl::ExecutionConfig::default()
    };
    let done = |r| Executed {
        result: outcome(r),
        again: None,
    };
    Ok(match path {
        ExecPath::Async => done(p.execute_synchronously_with_config(&request, &config, NONE)),
        ExecPath::Sync => done(p.execute_synchronously(&request, true, NONE, NONE)),
        ExecPath::Fenced => Executed {
            result: fenced_outcome(p.execute_fenced(&request, &[], true, NONE, NONE, NONE))?,
            again: None,
        },
        ExecPath::Burst => {
            let burst = p
                .configure_execution_burst()
                .map_err(|e| format!("configureExecutionBurst: {e}"))?;
            let mut next = 0;
            let slots: Vec<i64> = request
                .pools
                .iter()
                .map(|pool| match pool {
                    aidl::RequestMemoryPool::Pool(_) => {
                        next += 1;
                        next - 1
                    }
                    aidl::RequestMemoryPool::Token(_) => -1,
                })
                .collect();
            let r = burst.execute_synchronously(&request, &slots, true, NONE, NONE);
            for &s in slots.iter().filter(|&&s| s >= 0) {
                burst
                    .release_memory_resource(s)
                    .map_err(|e| format!("releaseMemoryResource({s}): {e}"))?;
            }
            done(r)
        }
        ExecPath::Reusable => match p.create_reusable_execution(&request, &config) {
            Err(e) => done(Err(e)),
            Ok(execution) => Executed {
                result: outcome(execution.execute_synchronously(NONE)),
                again: Some(execution),
            },
        },
    })
}

/// Runs a reusable execution again.
pub fn run_again(execution: &Arc<dyn aidl::IExecution>) -> (ErrorStatus, Vec<OutputShape>, Timing) {
    outcome(execution.execute_synchronously(aidl::OMITTED))
}
