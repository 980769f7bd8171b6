//! The one place the V4 values become HAL 1.3 values and back. A V4 value that the 1.3
//! core cannot carry (a negative size, offset or dimension, a DataLocation past its pool
//! or padded where padding is not allowed, an offset or length of 4 GiB or more: the core
//! addresses pools with 32-bit offsets) is INVALID_ARGUMENT here, before the core runs.

use std::sync::Arc;

use super::error::{AidlResult, ServiceSpecific, INVALID};
use super::traits::IFencedExecutionCallback;
use super::types::{
    Ashmem, DataLocation, ExecutionInfo, ExecutionResult, FencedExecutionResult, HardwareBuffer,
    HardwareBufferDescription, MappableFile, Memory, Model, ParcelFileDescriptor, Request,
    RequestArgument, RequestMemoryPool, Timing, OMITTED, PIXEL_FORMAT_BLOB,
};
use crate::hal::{self, ErrorStatus, NativeHandle, OptionalTimePoint, OptionalTimeoutDuration};
use crate::interface::{self, FencedResult};

fn invalid(what: &str) -> ServiceSpecific {
    tracing::debug!("AIDL argument: {what}");
    INVALID
}

fn non_negative(v: i64, what: &str) -> AidlResult<u64> {
    u64::try_from(v).map_err(|_| invalid(what))
}

fn u32_of(v: i64, what: &str) -> AidlResult<u32> {
    u32::try_from(v).map_err(|_| invalid(what))
}

/// A V4 memory as the 1.3 memory the core opens.
pub fn memory(m: &Memory) -> AidlResult<hal::Memory> {
    let one = |fd: &ParcelFileDescriptor, ints: Vec<i32>| NativeHandle {
        fds: vec![Arc::clone(fd)],
        ints,
    };
    Ok(match m {
        Memory::Ashmem(a) => hal::Memory {
            name: hal::MEMORY_ASHMEM.into(),
            size: non_negative(a.size, "ashmem size")?,
            handle: one(&a.fd, Vec::new()),
        },
        Memory::MappableFile(f) => {
            let offset = non_negative(f.offset, "mappableFile offset")?;
            hal::Memory {
                name: hal::MEMORY_MMAP_FD.into(),
                size: non_negative(f.length, "mappableFile length")?,
                handle: one(
                    &f.fd,
                    vec![f.prot, offset as u32 as i32, (offset >> 32) as i32],
                ),
            }
        }
        Memory::HardwareBuffer(b) => {
            let d = &b.description;
            let blob = d.format == PIXEL_FORMAT_BLOB;
            let size = match blob {
                true => d.width as i64,
                // Not read by the core: a non-BLOB buffer is always used whole.
                false => (d.stride as i64)
                    .saturating_mul(d.height as i64)
                    .saturating_mul(d.layers as i64),
            };
            hal::Memory {
                name: match blob {
                    true => hal::MEMORY_HARDWARE_BUFFER_BLOB,
                    false => hal::MEMORY_HARDWARE_BUFFER,
                }
                .into(),
                size: non_negative(size, "hardwareBuffer size")?,
                handle: b.handle.clone(),
            }
        }
    })
}

/// A 1.3 memory as a V4 one (a BLOB buffer described as `width` bytes; a non-BLOB
/// buffer's description is not known without its metadata, so it cannot be given).
pub fn memory_to_aidl(m: &hal::Memory) -> AidlResult<Memory> {
    let fd = || {
        m.handle
            .fds
            .first()
            .cloned()
            .ok_or_else(|| invalid("no fd"))
    };
    let size = i64::try_from(m.size).map_err(|_| invalid("size"))?;
    Ok(match m.name.as_str() {
        hal::MEMORY_ASHMEM => Memory::Ashmem(Ashmem { fd: fd()?, size }),
        hal::MEMORY_MMAP_FD => {
            let [prot, lo, hi] = m.handle.ints[..] else {
                return Err(invalid("mmap_fd ints"));
            };
            Memory::MappableFile(MappableFile {
                length: size,
                prot,
                fd: fd()?,
                offset: ((hi as u32 as i64) << 32) | lo as u32 as i64,
            })
        }
        hal::MEMORY_HARDWARE_BUFFER_BLOB => Memory::HardwareBuffer(HardwareBuffer {
            description: HardwareBufferDescription {
                width: i32::try_from(m.size).map_err(|_| invalid("BLOB size"))?,
                height: 1,
                layers: 1,
                format: PIXEL_FORMAT_BLOB,
                usage: crate::hwbuf::BLOB_USAGE as i64,
                stride: 0,
            },
            handle: m.handle.clone(),
        }),
        _ => return Err(invalid("a memory kind V4 cannot describe")),
    })
}

/// The bytes a V4 pool offers a DataLocation: its size for memory used by sub-regions,
/// `None` for a pool used whole (a driver-managed buffer, a non-BLOB hardware buffer).
fn pool_room(p: &RequestMemoryPool) -> Option<u64> {
    match p {
        RequestMemoryPool::Token(_) => None,
        RequestMemoryPool::Pool(Memory::HardwareBuffer(b))
            if b.description.format != PIXEL_FORMAT_BLOB =>
        {
            None
        }
        RequestMemoryPool::Pool(Memory::Ashmem(a)) => u64::try_from(a.size).ok(),
        RequestMemoryPool::Pool(Memory::MappableFile(f)) => u64::try_from(f.length).ok(),
        RequestMemoryPool::Pool(Memory::HardwareBuffer(b)) => {
            u64::try_from(b.description.width).ok()
        }
    }
}

/// A request argument's location: offset + length + padding within its pool, padding 0
/// for an omitted argument and for a pool used whole. The padding is dropped: the core
/// never touches bytes past `length`, so it only has to be checked.
fn location(a: &RequestArgument, pools: &[RequestMemoryPool]) -> AidlResult<hal::DataLocation> {
    let DataLocation {
        pool_index,
        offset,
        length,
        padding,
    } = a.location;
    let pool_index = u32::try_from(pool_index).map_err(|_| invalid("negative poolIndex"))?;
    let (offset, length) = (u32_of(offset, "offset")?, u32_of(length, "length")?);
    let padding = non_negative(padding, "padding")?;
    if padding > 0 {
        let whole = pools
            .get(pool_index as usize)
            .is_some_and(|p| pool_room(p).is_none());
        if a.has_no_value || whole {
            return Err(invalid("padding where the location must be all 0"));
        }
    }
    if let Some(room) = pools.get(pool_index as usize).and_then(pool_room) {
        let end = (offset as u64) + (length as u64) + padding;
        if !a.has_no_value && end > room {
            return Err(invalid("offset + length + padding past the pool's end"));
        }
    }
    Ok(hal::DataLocation {
        pool_index,
        offset,
        length,
    })
}

fn dimensions(d: &[i32]) -> AidlResult<Vec<u32>> {
    d.iter()
        .map(|&x| u32::try_from(x).map_err(|_| invalid("negative dimension")))
        .collect()
}

/// A V4 request as the 1.3 request the core runs.
pub fn request(r: &Request) -> AidlResult<hal::Request> {
    let args = |args: &[RequestArgument]| -> AidlResult<Vec<hal::RequestArgument>> {
        args.iter()
            .map(|a| {
                Ok(hal::RequestArgument {
                    has_no_value: a.has_no_value,
                    location: location(a, &r.pools)?,
                    dimensions: dimensions(&a.dimensions)?,
                })
            })
            .collect()
    };
    let pools = r
        .pools
        .iter()
        .map(|p| {
            Ok(match p {
                RequestMemoryPool::Pool(m) => hal::RequestMemoryPool::HidlMemory(memory(m)?),
                RequestMemoryPool::Token(t) => hal::RequestMemoryPool::Token(
                    u32::try_from(*t).map_err(|_| invalid("negative token"))?,
                ),
            })
        })
        .collect::<AidlResult<Vec<_>>>()?;
    Ok(hal::Request {
        inputs: args(&r.inputs)?,
        outputs: args(&r.outputs)?,
        pools,
    })
}

/// A 1.3 request as a V4 one (no padding).
pub fn request_to_aidl(r: &hal::Request) -> AidlResult<Request> {
    let args = |args: &[hal::RequestArgument]| -> AidlResult<Vec<RequestArgument>> {
        args.iter()
            .map(|a| {
                Ok(RequestArgument {
                    has_no_value: a.has_no_value,
                    location: DataLocation {
                        pool_index: i32::try_from(a.location.pool_index)
                            .map_err(|_| invalid("poolIndex"))?,
                        offset: a.location.offset as i64,
                        length: a.location.length as i64,
                        padding: 0,
                    },
                    dimensions: a
                        .dimensions
                        .iter()
                        .map(|&d| i32::try_from(d).map_err(|_| invalid("dimension")))
                        .collect::<AidlResult<_>>()?,
                })
            })
            .collect()
    };
    let pools = r
        .pools
        .iter()
        .map(|p| {
            Ok(match p {
                hal::RequestMemoryPool::HidlMemory(m) => {
                    RequestMemoryPool::Pool(memory_to_aidl(m)?)
                }
                hal::RequestMemoryPool::Token(t) => {
                    RequestMemoryPool::Token(i32::try_from(*t).map_err(|_| invalid("token"))?)
                }
            })
        })
        .collect::<AidlResult<Vec<_>>>()?;
    Ok(Request {
        inputs: args(&r.inputs)?,
        outputs: args(&r.outputs)?,
        pools,
    })
}

/// A V4 model as the 1.3 model the core validates (at the face's level) and prepares.
pub fn model(m: &Model) -> AidlResult<hal::Model> {
    Ok(hal::Model {
        main: m.main.clone(),
        referenced: m.referenced.clone(),
        operand_values: m.operand_values.clone(),
        pools: m.pools.iter().map(memory).collect::<AidlResult<_>>()?,
        relax_computation_float32_to_float16: m.relax_computation_float32_to_float16,
        extension_name_to_prefix: m.extension_name_to_prefix.clone(),
    })
}

/// A 1.3 model as a V4 one.
pub fn model_to_aidl(m: &hal::Model) -> AidlResult<Model> {
    Ok(Model {
        main: m.main.clone(),
        referenced: m.referenced.clone(),
        operand_values: m.operand_values.clone(),
        pools: m
            .pools
            .iter()
            .map(memory_to_aidl)
            .collect::<AidlResult<_>>()?,
        relax_computation_float32_to_float16: m.relax_computation_float32_to_float16,
        extension_name_to_prefix: m.extension_name_to_prefix.clone(),
    })
}

/// 1.3 timing (µs, `u64::MAX` unmeasured) as V4 timing (ns, -1 unmeasured).
pub fn timing(t: hal::Timing) -> Timing {
    let ns = |us: u64| match us {
        u64::MAX => OMITTED,
        us => i64::try_from(us.saturating_mul(1000)).unwrap_or(i64::MAX),
    };
    Timing {
        time_on_device_ns: ns(t.time_on_device),
        time_in_driver_ns: ns(t.time_in_driver),
    }
}

fn boot_minus_monotonic() -> i64 {
    use nix::time::{clock_gettime, ClockId};
    let ns = |c| {
        clock_gettime(c).map_or(0, |ts| {
            ts.tv_sec()
                .saturating_mul(1_000_000_000)
                .saturating_add(ts.tv_nsec())
        })
    };
    (ns(ClockId::CLOCK_BOOTTIME) - ns(ClockId::CLOCK_MONOTONIC)).max(0)
}

/// A V4 deadline (ns since boot, CLOCK_BOOTTIME; -1: none) as the core's deadline
/// (CLOCK_MONOTONIC). Other negative values are INVALID_ARGUMENT.
pub fn deadline(deadline_ns: i64) -> AidlResult<OptionalTimePoint> {
    match deadline_ns {
        OMITTED => Ok(OptionalTimePoint::NONE),
        d if d < 0 => Err(invalid("negative deadline")),
        d => Ok(OptionalTimePoint(Some(
            d.saturating_sub(boot_minus_monotonic()).max(0) as u64,
        ))),
    }
}

/// A V4 duration (-1: none) as the core's; other negative values are INVALID_ARGUMENT.
pub fn duration(ns: i64) -> AidlResult<OptionalTimeoutDuration> {
    match ns {
        OMITTED => Ok(OptionalTimeoutDuration(None)),
        d if d < 0 => Err(invalid("negative duration")),
        d => Ok(OptionalTimeoutDuration(Some(d as u64))),
    }
}

/// A V4 loop timeout (-1: the default) as the core's (which caps it at the maximum).
pub fn loop_timeout(ns: i64) -> AidlResult<OptionalTimeoutDuration> {
    duration(ns)
}

/// A measure flag as the core's.
pub fn measure(yes: bool) -> hal::MeasureTiming {
    match yes {
        true => hal::MeasureTiming::YES,
        false => hal::MeasureTiming::NO,
    }
}

/// The core's execution outcome as a V4 result: OUTPUT_INSUFFICIENT_SIZE is a result
/// (outputSufficientSize false, with the shapes), other errors are thrown.
pub fn execution_result(r: interface::ExecutionResult) -> AidlResult<ExecutionResult> {
    let (status, output_shapes, t) = r;
    match status {
        ErrorStatus::None | ErrorStatus::OutputInsufficientSize => Ok(ExecutionResult {
            output_sufficient_size: status == ErrorStatus::None,
            output_shapes,
            timing: timing(t),
        }),
        s => Err(ServiceSpecific(s)),
    }
}

/// Sync fence descriptors as the core's one-fd handles.
pub fn fences(wait_for: &[ParcelFileDescriptor]) -> Vec<NativeHandle> {
    wait_for
        .iter()
        .map(|fd| NativeHandle {
            fds: vec![Arc::clone(fd)],
            ints: Vec::new(),
        })
        .collect()
}

/// Cache file descriptors as the core's one-fd handles.
pub fn cache_files(files: &[ParcelFileDescriptor]) -> Vec<NativeHandle> {
    fences(files)
}

/// The core's fenced outcome as a V4 result.
pub fn fenced_result(r: FencedResult) -> AidlResult<FencedExecutionResult> {
    match r {
        (ErrorStatus::None, fence, Some(callback)) => Ok(FencedExecutionResult {
            callback: Arc::new(FencedCallback(callback)),
            sync_fence: fence.and_then(|h| h.fds.first().cloned()),
        }),
        (ErrorStatus::None, _, None) => Err(ServiceSpecific(ErrorStatus::GeneralFailure)),
        (s, _, _) => Err(ServiceSpecific(s)),
    }
}

/// The core's fenced-execution report behind a V4 callback.
struct FencedCallback(Arc<dyn interface::IFencedExecutionCallback>);

impl IFencedExecutionCallback for FencedCallback {
    fn get_execution_info(&self) -> AidlResult<ExecutionInfo> {
        let (status, launched, fenced) = self.0.get_execution_info();
        Ok(ExecutionInfo {
            status,
            timing_launched: timing(launched),
            timing_fenced: timing(fenced),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ashmem(size: i64) -> RequestMemoryPool {
        let m = hal::Memory::ashmem(size as u64).unwrap();
        RequestMemoryPool::Pool(memory_to_aidl(&m).unwrap())
    }

    fn arg(offset: i64, length: i64, padding: i64) -> RequestArgument {
        RequestArgument {
            has_no_value: false,
            location: DataLocation {
                pool_index: 0,
                offset,
                length,
                padding,
            },
            dimensions: Vec::new(),
        }
    }

    #[test]
    fn padding_within_the_pool_is_dropped_past_it_refused() {
        let r = Request {
            inputs: vec![arg(0, 4, 60)],
            outputs: vec![arg(64, 4, 60)],
            pools: vec![ashmem(128)],
        };
        let h = request(&r).unwrap();
        assert_eq!(h.inputs[0].location.length, 4);
        assert_eq!(h.outputs[0].location.offset, 64);
        let mut past = r.clone();
        past.outputs[0].location.padding = 61;
        assert_eq!(request(&past).unwrap_err(), INVALID);
        let mut negative = r.clone();
        negative.inputs[0].location.padding = -1;
        assert_eq!(request(&negative).unwrap_err(), INVALID);
        let mut token = r;
        token.pools.push(RequestMemoryPool::Token(1));
        token.inputs[0].location = DataLocation {
            pool_index: 1,
            padding: 8,
            ..DataLocation::default()
        };
        assert_eq!(request(&token).unwrap_err(), INVALID);
    }

    #[test]
    fn timing_and_times() {
        assert_eq!(timing(hal::Timing::NONE), Timing::NONE);
        let t = timing(hal::Timing {
            time_on_device: 3,
            time_in_driver: 5,
        });
        assert_eq!((t.time_on_device_ns, t.time_in_driver_ns), (3000, 5000));
        assert_eq!(deadline(-1).unwrap(), OptionalTimePoint::NONE);
        assert_eq!(deadline(-2).unwrap_err(), INVALID);
        assert_eq!(duration(-5).unwrap_err(), INVALID);
        assert!(deadline(0).unwrap().has_passed());
    }
}
