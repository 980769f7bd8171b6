//! One partition on the device: its HAL model prepared through `IDevice`, a shared pool
//! holding its inputs and outputs, and an execution per invoke. The runtime's tensors are
//! copied into the pool before and out of it after (`pwrite`/`pread` on the pool's fd: no
//! mapping the device also writes is ever referenced from Rust).
//!
//! Every invoke runs the same request over the same pool, so it runs as a reusable
//! execution (AIDL V4's): validated and its pool mapped into the device once, and a
//! repeat submits only the device work (one JOB command where the program allows). A
//! model that cannot make one runs each invoke as a synchronous execution.

use std::os::fd::AsFd;
use std::sync::{Arc, OnceLock};

use std::path::Path;

use vnpu_driver::cache;
use vnpu_driver::device::{IDevice, IPreparedModel};
use vnpu_driver::hal::{
    validate::operand_size, DataLocation, ErrorStatus, HalVersion, MeasureTiming, Memory, Model,
    OptionalTimePoint, OptionalTimeoutDuration, OutputShape, Request, RequestArgument,
    RequestMemoryPool, Timing,
};
use vnpu_driver::interface::IReusableExecution;
use vnpu_driver::tflite::Imported;

/// Why a partition could not be prepared or run.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The device refused or failed to prepare the model.
    #[error("prepareModel: {0}")]
    Prepare(ErrorStatus),
    /// The device failed the execution.
    #[error("execution: {0}")]
    Execute(ErrorStatus),
    /// A tensor's size differs from the model's operand.
    #[error("tensor {tensor}: {got} bytes, the partition's model takes {want}")]
    Size {
        /// The tensor's index.
        tensor: usize,
        /// Its bytes.
        got: usize,
        /// The operand's bytes.
        want: usize,
    },
    /// Creating, reading or writing the pool failed.
    #[error("memory: {0}")]
    Memory(String),
}

/// A prepared partition.
pub struct Kernel {
    prepared: Arc<dyn IPreparedModel>,
    request: Request,
    pool: Memory,
    /// (tensor index, location) of each input, in order.
    inputs: Vec<(usize, DataLocation)>,
    /// Likewise for outputs.
    outputs: Vec<(usize, DataLocation)>,
    /// The request as a reusable execution, without and with timing measured (made at
    /// the first invoke of each kind; `None`: the model cannot make one).
    reusable: [OnceLock<Option<Arc<dyn IReusableExecution>>>; 2],
}

impl Kernel {
    /// Prepares `imported` on `device`, through the compilation cache in `cache_dir` when
    /// one is given (the token derived from the model's contents). Inputs and outputs are
    /// named by their TFLite tensors.
    pub fn prepare(
        device: &dyn IDevice,
        imported: &Imported,
        cache_dir: Option<&Path>,
    ) -> Result<Kernel, KernelError> {
        Kernel::prepare_model(
            device,
            &imported.model,
            imported.level,
            &imported.input_tensors,
            &imported.output_tensors,
            cache_dir,
        )
    }

    /// Prepares `model` on `device` at interface `level` (its `model_level`), through
    /// `cache_dir` when given; `input_ids` and `output_ids` name the model's inputs and
    /// outputs, in order, for [`Kernel::invoke`]'s callbacks.
    pub fn prepare_model(
        device: &dyn IDevice,
        model: &Model,
        level: HalVersion,
        input_ids: &[usize],
        output_ids: &[usize],
        cache_dir: Option<&Path>,
    ) -> Result<Kernel, KernelError> {
        let sizes = |indexes: &[u32]| -> Result<Vec<usize>, KernelError> {
            indexes
                .iter()
                .map(|&i| {
                    model
                        .main
                        .operands
                        .get(i as usize)
                        .and_then(|o| operand_size(o.r#type, &o.dimensions))
                        .and_then(|n| usize::try_from(n).ok())
                        .filter(|&n| n <= u32::MAX as usize)
                        .ok_or_else(|| KernelError::Memory(format!("operand {i} has no size")))
                })
                .collect()
        };
        let (in_sizes, out_sizes) = (
            sizes(&model.main.input_indexes)?,
            sizes(&model.main.output_indexes)?,
        );
        if in_sizes.len() != input_ids.len() || out_sizes.len() != output_ids.len() {
            return Err(KernelError::Memory(
                "the model's inputs or outputs differ from those named".into(),
            ));
        }
        let p = match cache_dir.map(|d| (d, cache::model_token(model))) {
            Some((dir, Ok(token))) => cache::dir::prepare_in_dir(device, model, level, dir, &token),
            Some((_, Err(e))) => return Err(KernelError::Memory(e.to_string())),
            None => cache::dir::prepare_plain(device, model, level),
        };
        if !p.line.is_empty() {
            tracing::info!("vnpu: {}", p.line);
        }
        let prepared = match (p.ret, p.status, p.prepared) {
            (ErrorStatus::None, ErrorStatus::None, Some(prepared)) => prepared,
            (ErrorStatus::None, s, _) | (s, _, _) => return Err(KernelError::Prepare(s)),
        };
        let mut size = 0usize;
        let mut place = |n: usize| {
            let offset = size.next_multiple_of(64);
            size = offset + n;
            DataLocation {
                pool_index: 0,
                offset: offset as u32,
                length: n as u32,
            }
        };
        let inputs: Vec<(usize, DataLocation)> = input_ids
            .iter()
            .zip(in_sizes)
            .map(|(&t, n)| (t, place(n)))
            .collect();
        let outputs: Vec<(usize, DataLocation)> = output_ids
            .iter()
            .zip(out_sizes)
            .map(|(&t, n)| (t, place(n)))
            .collect();
        if u32::try_from(size).is_err() {
            return Err(KernelError::Memory("inputs and outputs over 4 GiB".into()));
        }
        let pool = Memory::ashmem_with(&vec![0u8; size.next_multiple_of(64).max(64)])
            .map_err(|e| KernelError::Memory(e.to_string()))?;
        let arg = |l: &(usize, DataLocation)| RequestArgument {
            has_no_value: false,
            location: l.1,
            dimensions: Vec::new(),
        };
        let request = Request {
            inputs: inputs.iter().map(arg).collect(),
            outputs: outputs.iter().map(arg).collect(),
            pools: vec![RequestMemoryPool::HidlMemory(pool.clone())],
        };
        Ok(Kernel {
            prepared,
            request,
            pool,
            inputs,
            outputs,
            reusable: Default::default(),
        })
    }

    /// Runs the request once: as its reusable execution when the model makes one.
    fn execute(&self, measure: MeasureTiming) -> (ErrorStatus, Vec<OutputShape>, Timing) {
        let kind = usize::from(measure == MeasureTiming::YES);
        let reusable = self.reusable[kind].get_or_init(|| {
            let no_limit = OptionalTimeoutDuration(None);
            let made = self
                .prepared
                .create_reusable_execution(&self.request, measure, no_limit);
            made.ok()
        });
        match reusable {
            Some(run) => run.execute_synchronously(OptionalTimePoint::NONE),
            None => self.prepared.execute_synchronously_1_3(
                &self.request,
                measure,
                OptionalTimePoint::NONE,
                OptionalTimeoutDuration(None),
            ),
        }
    }

    /// The (tensor, bytes) of each input.
    pub fn input_sizes(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.inputs.iter().map(|(t, l)| (*t, l.length as usize))
    }

    /// The (tensor, bytes) of each output.
    pub fn output_sizes(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.outputs.iter().map(|(t, l)| (*t, l.length as usize))
    }

    /// Runs once: `read(id)` gives each input's bytes, `write(id, bytes)` takes each
    /// output's. With `measure`, the device's timing (modelled device time and driver time,
    /// in microseconds; `u64::MAX` where unknown).
    pub fn invoke<'a>(
        &self,
        read: impl Fn(usize) -> &'a [u8],
        mut write: impl FnMut(usize, &[u8]) -> Result<(), KernelError>,
        measure: bool,
    ) -> Result<Timing, KernelError> {
        let fd = self
            .pool
            .fd()
            .ok_or_else(|| KernelError::Memory("the pool has no descriptor".into()))?;
        let io = |e: nix::Error| KernelError::Memory(e.to_string());
        for (t, l) in &self.inputs {
            let data = read(*t);
            if data.len() != l.length as usize {
                return Err(KernelError::Size {
                    tensor: *t,
                    got: data.len(),
                    want: l.length as usize,
                });
            }
            let mut done = 0;
            while done < data.len() {
                done += nix::sys::uio::pwrite(
                    fd.as_fd(),
                    &data[done..],
                    (l.offset as usize + done) as i64,
                )
                .map_err(io)?;
            }
        }
        let (status, _, timing) = self.execute(match measure {
            true => MeasureTiming::YES,
            false => MeasureTiming::NO,
        });
        if status != ErrorStatus::None {
            return Err(KernelError::Execute(status));
        }
        let mut buf = Vec::new();
        for (t, l) in &self.outputs {
            buf.resize(l.length as usize, 0);
            let mut done = 0;
            while done < buf.len() {
                let n = nix::sys::uio::pread(
                    fd.as_fd(),
                    &mut buf[done..],
                    (l.offset as usize + done) as i64,
                )
                .map_err(io)?;
                if n == 0 {
                    return Err(KernelError::Memory("short read from the pool".into()));
                }
                done += n;
            }
            write(*t, &buf)?;
        }
        Ok(timing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use vnpu_driver::device::VnpuDevice;
    use vnpu_driver::hal::builder::ModelBuilder;
    use vnpu_driver::hal::{OperandType, OperationType};

    /// `y = x + w` over 4 floats: input tensor 0, output tensor 1.
    fn add_kernel(device: &VnpuDevice, w: [f32; 4]) -> Kernel {
        let mut b = ModelBuilder::default();
        let x = b.input(OperandType::TENSOR_FLOAT32, &[4]);
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let c = b.constant(OperandType::TENSOR_FLOAT32, &[4], &bytes);
        let act = b.constant(OperandType::INT32, &[], &0i32.to_le_bytes());
        let y = b.output(OperandType::TENSOR_FLOAT32, &[4]);
        b.op(OperationType::ADD, &[x, c, act], &[y]);
        let model = b.build(Vec::new());
        Kernel::prepare_model(device, &model, HalVersion::V1_3, &[0], &[1], None).unwrap()
    }

    fn floats(bytes: &[u8]) -> Vec<f32> {
        let words = bytes.chunks(4).map(|c| [c[0], c[1], c[2], c[3]]);
        words.map(f32::from_le_bytes).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Invokes run one kernel's kept executions (one per timing mode) again and
        /// again: each invoke computes from the inputs it is given then, never from an
        /// earlier invoke's.
        #[test]
        fn every_invoke_computes_from_its_own_inputs(
            w in prop::array::uniform4(-100f32..100.0),
            runs in prop::collection::vec((prop::array::uniform4(-100f32..100.0), any::<bool>()), 1..6),
        ) {
            let device = VnpuDevice::new().unwrap();
            let kernel = add_kernel(&device, w);
            for (x, measure) in runs {
                let input: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
                let mut got = Vec::new();
                let write = |k: usize, bytes: &[u8]| {
                    assert_eq!(k, 1, "the output is tensor 1");
                    got = floats(bytes);
                    Ok(())
                };
                let timing = kernel.invoke(|_| &input[..], write, measure).unwrap();
                let want: Vec<f32> = x.iter().zip(w).map(|(a, b)| a + b).collect();
                prop_assert_eq!(got, want);
                prop_assert_eq!(timing.time_on_device != u64::MAX, measure);
            }
        }
    }
}
