//! The compute engine: validates a program from DRAM, then runs its kernels, staging
//! each operand from DRAM into local scratch and writing results back (the model of an
//! accelerator's load-compute-store over its SRAM).

use super::Outcome;
use crate::iommu::Perm;
use crate::kernels::{self, Tensor, TensorMut};
use crate::program::{Program, TensorDesc, MAX_PROGRAM_LEN};
use crate::ring::Status;
use crate::Bus;

fn load(bus: &Bus, t: &TensorDesc) -> Result<Vec<f32>, u64> {
    let n = (t.byte_len / 4) as usize;
    let mut v = vec![0f32; n];
    let w = bus
        .resolve(t.addr, t.byte_len, Perm::READ)
        .map_err(|_| t.addr)?;
    w.region.read_f32(w.offset, &mut v).map_err(|_| t.addr)?;
    Ok(v)
}

fn store(bus: &Bus, t: &TensorDesc, data: &[f32]) -> Result<(), u64> {
    let w = bus
        .resolve(t.addr, t.byte_len, Perm::WRITE)
        .map_err(|_| t.addr)?;
    w.region.write_f32(w.offset, data).map_err(|_| t.addr)
}

/// Fetches, validates and runs the program at `addr` (device DRAM), `len` bytes.
/// `req_id` labels the trace events of its kernels.
pub fn run_program(bus: &Bus, addr: u64, len: u64, req_id: u32) -> Outcome {
    if len == 0 || len > MAX_PROGRAM_LEN || addr < bus.dram_base {
        return Outcome::fail(Status::InvalidProgram, 0, addr);
    }
    // Copy the program out of DRAM first, so nothing can change it between
    // validation and use.
    let Ok(w) = bus.resolve(addr, len, Perm::READ) else {
        return Outcome::fail(Status::DmaFault, 0, addr);
    };
    let mut bytes = vec![0u8; len as usize];
    if w.region.read(w.offset, &mut bytes).is_err() {
        return Outcome::fail(Status::DmaFault, 0, addr);
    }
    let program = match Program::decode(&bytes, bus.dram_base, bus.dram.len() as u64) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!("program rejected: {e}");
            return Outcome::fail(Status::InvalidProgram, 0, addr);
        }
    };
    let mut ns = 0;
    for (index, op) in program.ops.iter().enumerate() {
        let start = std::time::Instant::now();
        let fail = |status, fault| Outcome::fail(status, index as u32, fault);
        let descs: Vec<&TensorDesc> = op
            .inputs
            .iter()
            .map(|&i| &program.tensors[i as usize])
            .collect();
        let mut data = Vec::with_capacity(descs.len());
        for d in &descs {
            match load(bus, d) {
                Ok(v) => data.push(v),
                Err(a) => return fail(Status::DmaFault, a),
            }
        }
        let inputs: Vec<Tensor<'_>> = descs
            .iter()
            .zip(&data)
            .map(|(d, v)| Tensor {
                shape: &d.shape,
                data: v,
            })
            .collect();
        let out_descs: Vec<&TensorDesc> = op
            .outputs
            .iter()
            .map(|&i| &program.tensors[i as usize])
            .collect();
        let mut out_data: Vec<Vec<f32>> = out_descs
            .iter()
            .map(|d| vec![0f32; (d.byte_len / 4) as usize])
            .collect();
        {
            let mut outputs: Vec<TensorMut<'_>> = out_descs
                .iter()
                .zip(out_data.iter_mut())
                .map(|(d, v)| TensorMut {
                    shape: &d.shape,
                    data: v,
                })
                .collect();
            if let Err(e) = kernels::execute(&op.op, &inputs, &mut outputs) {
                tracing::debug!("kernel {index} failed: {e}");
                return fail(Status::KernelError, 0);
            }
        }
        for (d, v) in out_descs.iter().zip(&out_data) {
            if let Err(a) = store(bus, d, v) {
                return fail(Status::DmaFault, a);
            }
        }
        let in_shapes: Vec<&[usize]> = descs.iter().map(|d| d.shape.as_slice()).collect();
        let op_ns = bus.timing.op_ns(&op.op, &in_shapes);
        bus.trace
            .record("compute", op.op.name(), start, req_id, op_ns);
        ns += op_ns;
    }
    Outcome::ok(ns)
}
