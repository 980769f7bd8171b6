//! Running an imported model through the driver: inputs (from `.npy` arrays or seeded
//! random data) into one shared pool, `repeat` synchronous executions with timing, the
//! outputs back as arrays.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::npy::{Array, Dtype};
use super::{Imported, TensorInfo};
use crate::compile::MAX_TENSOR_BYTES;
use crate::device::IPreparedModel;
use crate::hal::{
    DataLocation, ErrorStatus, MeasureTiming, Memory, OptionalTimePoint, OptionalTimeoutDuration,
    Request, RequestArgument, RequestMemoryPool,
};

/// What running a model gave.
#[derive(Debug)]
pub struct RunReport {
    /// Wall time of each execution.
    pub executions: Vec<Duration>,
    /// The modelled device time of each execution, µs.
    pub device_us: Vec<u64>,
    /// The outputs of the last execution.
    pub outputs: Vec<Array>,
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RunError {
    /// An input array does not fit the model's input.
    #[error("input {index} ({name}): {reason}")]
    Input {
        /// The input's position.
        index: usize,
        /// Its tensor name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A model output the run cannot make room for.
    #[error("output {index} ({name}): {reason}")]
    Output {
        /// The output's position.
        index: usize,
        /// Its tensor name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The driver refused or failed the execution.
    #[error("execution: {0}")]
    Execution(ErrorStatus),
    /// Creating or reading the request's memory failed.
    #[error("memory: {0}")]
    Memory(String),
}

/// Bytes of a tensor of `t`'s type and shape: an error when the product overflows or
/// exceeds the largest tensor the device takes ([`MAX_TENSOR_BYTES`]), checked before
/// anything of that size is allocated (a model's shapes are hostile input).
pub fn tensor_bytes(t: &TensorInfo) -> Result<usize, String> {
    let size = Dtype::of(t.r#type).map_or(1, Dtype::size);
    t.dims
        .iter()
        .try_fold(size as u64, |n, &d| n.checked_mul(u64::from(d)))
        .filter(|&n| n <= MAX_TENSOR_BYTES)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            format!(
                "INVALID_ARGUMENT: shape {:?} of {} is larger than the device takes ({} GiB)",
                t.dims,
                t.r#type,
                MAX_TENSOR_BYTES >> 30
            )
        })
}

/// Seeded random inputs: floats uniform in [-1, 1), quantised values uniform over the
/// type's range, int32 in [0, 8) (indices, sizes). Each size is checked
/// ([`tensor_bytes`]) before it is allocated.
pub fn random_inputs(inputs: &[TensorInfo], seed: u64) -> Result<Vec<Array>, RunError> {
    fill_inputs(inputs, seed, inputs.iter().map(|_| None).collect())
}

/// The model's inputs: each array `given`, else seeded random data as [`random_inputs`]
/// makes it (the seed's sequence is drawn for the inputs not given only).
pub fn fill_inputs(
    inputs: &[TensorInfo],
    seed: u64,
    given: Vec<Option<Array>>,
) -> Result<Vec<Array>, RunError> {
    let mut s = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        // splitmix64
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut given = given.into_iter();
    inputs
        .iter()
        .enumerate()
        .map(|(index, t)| {
            if let Some(a) = given.next().flatten() {
                return Ok(a);
            }
            let bytes = tensor_bytes(t).map_err(|reason| RunError::Input {
                index,
                name: t.name.clone(),
                reason,
            })?;
            let dtype = Dtype::of(t.r#type).unwrap_or(Dtype::U8);
            let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
            let n = bytes / dtype.size().max(1);
            let mut data = Vec::with_capacity(bytes);
            for _ in 0..n {
                let r = next();
                match dtype {
                    Dtype::F32 => {
                        let v = (r >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                        data.extend_from_slice(&v.to_le_bytes());
                    }
                    Dtype::F16 => {
                        let v = (r >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                        data.extend_from_slice(&half::f16::from_f32(v).to_le_bytes());
                    }
                    Dtype::I32 => data.extend_from_slice(&((r % 8) as i32).to_le_bytes()),
                    Dtype::I16 => data.extend_from_slice(&(r as i16).to_le_bytes()),
                    Dtype::I8 | Dtype::U8 => data.push(r as u8),
                    Dtype::Bool => data.push((r & 1) as u8),
                }
            }
            Ok(Array { dtype, shape, data })
        })
        .collect()
}

/// Checks `arrays` against the model's inputs.
fn check_inputs(inputs: &[TensorInfo], arrays: &[Array]) -> Result<(), RunError> {
    for (index, (t, a)) in inputs.iter().zip(arrays).enumerate() {
        let bad = |reason: String| RunError::Input {
            index,
            name: t.name.clone(),
            reason,
        };
        if Some(a.dtype) != Dtype::of(t.r#type) {
            return Err(bad(format!("{:?} data for a {} input", a.dtype, t.r#type)));
        }
        let want: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
        if a.shape != want {
            return Err(bad(format!(
                "shape {:?}, the model takes {want:?}",
                a.shape
            )));
        }
    }
    if arrays.len() != inputs.len() {
        return Err(RunError::Input {
            index: arrays.len().min(inputs.len()),
            name: String::new(),
            reason: format!("{} arrays for {} inputs", arrays.len(), inputs.len()),
        });
    }
    Ok(())
}

/// A request with `arrays` as inputs and room for every output, in one pool.
pub fn request(imported: &Imported, arrays: &[Array]) -> Result<(Request, Memory), RunError> {
    check_inputs(&imported.inputs, arrays)?;
    let mut bytes = Vec::new();
    let arg = |data: &[u8], bytes: &mut Vec<u8>| {
        let offset = bytes.len().next_multiple_of(64);
        bytes.resize(offset, 0);
        bytes.extend_from_slice(data);
        RequestArgument {
            has_no_value: false,
            location: DataLocation {
                pool_index: 0,
                offset: offset as u32,
                length: data.len() as u32,
            },
            dimensions: Vec::new(),
        }
    };
    let inputs: Vec<RequestArgument> = arrays.iter().map(|a| arg(&a.data, &mut bytes)).collect();
    let mut outputs = Vec::with_capacity(imported.outputs.len());
    for (index, t) in imported.outputs.iter().enumerate() {
        let n = tensor_bytes(t).map_err(|reason| RunError::Output {
            index,
            name: t.name.clone(),
            reason,
        })?;
        // The pool is bounded as each tensor is: checked before it grows.
        if (bytes.len() as u64).saturating_add(n as u64 + 64) > MAX_TENSOR_BYTES {
            return Err(RunError::Memory(format!(
                "the request needs more than the {} GiB the device takes",
                MAX_TENSOR_BYTES >> 30
            )));
        }
        outputs.push(arg(&vec![0u8; n], &mut bytes));
    }
    bytes.resize(bytes.len().next_multiple_of(64).max(64), 0);
    let pool = Memory::ashmem_with(&bytes).map_err(|e| RunError::Memory(e.to_string()))?;
    Ok((
        Request {
            inputs,
            outputs,
            pools: vec![RequestMemoryPool::HidlMemory(pool.clone())],
        },
        pool,
    ))
}

/// Executes `prepared` `repeat` times (at least once) on `arrays`.
pub fn run(
    prepared: &Arc<dyn IPreparedModel>,
    imported: &Imported,
    arrays: &[Array],
    repeat: usize,
) -> Result<RunReport, RunError> {
    let (req, pool) = request(imported, arrays)?;
    let mut executions = Vec::new();
    let mut device_us = Vec::new();
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        let (status, _, timing) = prepared.execute_synchronously_1_3(
            &req,
            MeasureTiming::YES,
            OptionalTimePoint::NONE,
            OptionalTimeoutDuration(None),
        );
        executions.push(start.elapsed());
        if status != ErrorStatus::None {
            return Err(RunError::Execution(status));
        }
        device_us.push(timing.time_on_device);
    }
    let fd = pool
        .fd()
        .ok_or_else(|| RunError::Memory("the pool has no descriptor".into()))?;
    let outputs = imported
        .outputs
        .iter()
        .zip(&req.outputs)
        .map(|(t, a)| {
            let mut data = vec![0u8; a.location.length as usize];
            let mut done = 0;
            while done < data.len() {
                let n = nix::sys::uio::pread(
                    fd,
                    &mut data[done..],
                    (a.location.offset as usize + done) as i64,
                )
                .map_err(|e| RunError::Memory(e.to_string()))?;
                if n == 0 {
                    return Err(RunError::Memory("short read".into()));
                }
                done += n;
            }
            Ok(Array {
                dtype: Dtype::of(t.r#type).unwrap_or(Dtype::U8),
                shape: t.dims.iter().map(|&d| d as usize).collect(),
                data,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(RunReport {
        executions,
        device_us,
        outputs,
    })
}

/// Whether `got` is within the error budget of the reference `want` (LiteRT's output):
/// float outputs within 1e-4 of the reference's range (of its magnitude when it is
/// constant); quantised ones within 1 step, with at most 1% of values 2 steps off; a
/// float output dequantised from a quantised tensor of scale `step` (its
/// [`TensorInfo::dequantized_step`]) likewise, in steps of that scale.
pub fn within_budget(want: &Array, got: &Array, step: Option<f32>) -> Result<(), String> {
    if want.dtype != got.dtype || want.shape != got.shape {
        return Err(format!(
            "{:?} {:?}, expected {:?} {:?}",
            got.dtype, got.shape, want.dtype, want.shape
        ));
    }
    let (w, g) = (values(want), values(got));
    let err = w
        .iter()
        .zip(&g)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let float = matches!(want.dtype, Dtype::F32 | Dtype::F16);
    if let (true, Some(step)) = (float, step.filter(|s| *s > 0.0)) {
        // In steps, with a little slack for the float rounding of `step * (q - zp)`.
        let step = f64::from(step);
        let two = w
            .iter()
            .zip(&g)
            .filter(|(a, b)| (*a - *b).abs() / step > 1.0 + 1e-3)
            .count();
        return match err / step <= 2.0 + 1e-3 && two * 100 <= w.len() {
            true => Ok(()),
            false => Err(format!(
                "max error {:.3} steps of {step:.4e}, {two} of {} values 2 steps off",
                err / step,
                w.len()
            )),
        };
    }
    if float {
        let (lo, hi) = w
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &v| (l.min(v), h.max(v)));
        let mut span = if w.is_empty() { 0.0 } else { hi - lo };
        if span == 0.0 {
            span = w.iter().fold(0.0, |m, v| f64::max(m, v.abs()));
        }
        let budget = 1e-4 * span.max(1e-6);
        return match err <= budget {
            true => Ok(()),
            false => Err(format!(
                "max abs error {err:.3e} over the budget {budget:.3e}"
            )),
        };
    }
    let two = w
        .iter()
        .zip(&g)
        .filter(|(a, b)| (*a - *b).abs() > 1.0)
        .count();
    match err <= 2.0 && two * 100 <= w.len() {
        true => Ok(()),
        false => Err(format!(
            "max error {err} steps, {two} of {} values 2 steps off",
            w.len()
        )),
    }
}

/// An array's values as f64.
fn values(a: &Array) -> Vec<f64> {
    let d = &a.data;
    match a.dtype {
        Dtype::F32 => d
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        Dtype::F16 => d
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        Dtype::I32 => d
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        Dtype::I16 => d
            .chunks_exact(2)
            .map(|c| i16::from_le_bytes([c[0], c[1]]) as f64)
            .collect(),
        Dtype::I8 => d.iter().map(|&v| v as i8 as f64).collect(),
        Dtype::U8 | Dtype::Bool => d.iter().map(|&v| v as f64).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hal::OperandType;

    /// Every tensor type a `.tflite` file can give a model input: random inputs of that type
    /// pass the request's own check (found by the `tflite_import` fuzz target: a per-channel
    /// filter left as a model input got U8 data, which the request then refused).
    #[test]
    fn random_inputs_fit_every_importable_input_type() {
        for r#type in [
            OperandType::TENSOR_FLOAT32,
            OperandType::TENSOR_FLOAT16,
            OperandType::TENSOR_INT32,
            OperandType::TENSOR_QUANT16_SYMM,
            OperandType::TENSOR_QUANT8_ASYMM,
            OperandType::TENSOR_QUANT8_ASYMM_SIGNED,
            OperandType::TENSOR_QUANT8_SYMM,
            OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL,
            OperandType::TENSOR_BOOL8,
        ] {
            let t = TensorInfo {
                name: "x".into(),
                dims: vec![2, 3],
                r#type,
                scale: 0.5,
                zero_point: 0,
                dequantized_step: None,
            };
            let arrays = random_inputs(std::slice::from_ref(&t), 1).unwrap();
            assert_eq!(check_inputs(&[t], &arrays), Ok(()), "{type}");
        }
    }
}
