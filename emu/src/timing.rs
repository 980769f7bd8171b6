//! The timing model: the device time each command would take on the modelled silicon.
//! It is reported in completions (and so in the HAL's timeOnDevice) and is the source of
//! the driver's capability figures. The emulator does not sleep to match it.

use crate::kernels::KernelOp;
use crate::program::Program;
use crate::tensor::TensorType;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimingModel {
    /// DMA bandwidth, bytes per nanosecond (16.0 = 16 GB/s).
    pub dma_bytes_per_ns: f64,
    /// Fixed cost of starting a DMA transfer.
    pub dma_setup_ns: u64,
    /// Multiply-accumulate throughput of the MAC array, FLOPs per ns.
    pub flops_per_ns: f64,
    /// Vector unit throughput for elementwise and data-movement work, elements per ns.
    pub elems_per_ns: f64,
    /// Fixed cost of dispatching one kernel.
    pub op_overhead_ns: u64,
}

impl Default for TimingModel {
    fn default() -> Self {
        Self {
            dma_bytes_per_ns: 16.0,
            dma_setup_ns: 400,
            flops_per_ns: 512.0,
            elems_per_ns: 32.0,
            op_overhead_ns: 150,
        }
    }
}

impl TimingModel {
    pub fn dma_ns(&self, bytes: u64) -> u64 {
        self.dma_setup_ns + (bytes as f64 / self.dma_bytes_per_ns) as u64
    }

    /// Device time of one kernel on these inputs: multiply-accumulates on the MAC array,
    /// everything else on the vector unit (work from [`KernelOp::cost`]).
    pub fn op_ns(&self, op: &KernelOp, inputs: &[&TensorType]) -> u64 {
        let cost = op.cost(inputs);
        let ns = 2.0 * cost.macs as f64 / self.flops_per_ns + cost.elems as f64 / self.elems_per_ns;
        self.op_overhead_ns + ns as u64
    }

    /// Device time of a whole program: the sum of its kernels' times.
    pub fn program_ns(&self, program: &Program) -> u64 {
        program
            .ops
            .iter()
            .map(|op| {
                let inputs: Vec<&TensorType> = op
                    .inputs
                    .iter()
                    .filter_map(|&i| program.tensors.get(i as usize).map(|t| &t.ty))
                    .collect();
                self.op_ns(&op.op, &inputs)
            })
            .fold(0u64, u64::saturating_add)
    }
}
