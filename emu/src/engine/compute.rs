//! The compute engine: validates a program from DRAM, then runs its kernels, staging
//! each operand from DRAM into local scratch and writing results back (the model of an
//! accelerator's load-compute-store over its SRAM).

use super::Outcome;
use crate::iommu::Perm;
use crate::kernels;
use crate::program::{Program, TensorDesc, MAX_PROGRAM_LEN};
use crate::ring::Status;
use crate::tensor::{Staged, TensorType, View, ViewMut};
use crate::Bus;

fn load(bus: &Bus, t: &TensorDesc) -> Result<Staged, u64> {
    let mut s = Staged::zeroed(t.byte_len as usize);
    let w = bus
        .resolve(t.addr, t.byte_len, Perm::READ)
        .map_err(|_| t.addr)?;
    w.region.read(w.offset, s.bytes_mut()).map_err(|_| t.addr)?;
    Ok(s)
}

fn store(bus: &Bus, t: &TensorDesc, data: &Staged) -> Result<(), u64> {
    let w = bus
        .resolve(t.addr, t.byte_len, Perm::WRITE)
        .map_err(|_| t.addr)?;
    w.region.write(w.offset, data.bytes()).map_err(|_| t.addr)
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
    let generation = bus.generation.load(std::sync::atomic::Ordering::SeqCst);
    for (index, op) in program.ops.iter().enumerate() {
        // A reset stops a program between kernels.
        if bus.generation.load(std::sync::atomic::Ordering::SeqCst) != generation {
            return Outcome::fail(Status::Aborted, index as u32, 0);
        }
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
        let inputs: Vec<View<'_>> = descs
            .iter()
            .zip(&data)
            .map(|(d, v)| View {
                ty: &d.ty,
                bytes: v.bytes(),
            })
            .collect();
        let out_descs: Vec<&TensorDesc> = op
            .outputs
            .iter()
            .map(|&i| &program.tensors[i as usize])
            .collect();
        let mut out_data: Vec<Staged> = out_descs
            .iter()
            .map(|d| Staged::zeroed(d.byte_len as usize))
            .collect();
        {
            let mut outputs: Vec<ViewMut<'_>> = out_descs
                .iter()
                .zip(out_data.iter_mut())
                .map(|(d, v)| ViewMut {
                    ty: &d.ty,
                    bytes: v.bytes_mut(),
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
        let in_tys: Vec<&TensorType> = descs.iter().map(|d| &d.ty).collect();
        let op_ns = bus.timing.op_ns(&op.op, &in_tys);
        bus.trace
            .record("compute", op.op.name(), start, req_id, op_ns);
        ns += op_ns;
        bus.progress
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    Outcome::ok(ns)
}
