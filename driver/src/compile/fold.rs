//! Constant folding: an operation whose inputs are all constants is run once, at
//! preparation, by the same kernel the device would run, and its outputs become constants.
//! Converted models are full of these (DEQUANTIZE of float16 or quantised weights, a
//! RESHAPE or TRANSPOSE of a weight tensor); folding them takes their cost out of every
//! execution, and the compilation cache keeps the result.
//!
//! Folding never changes what a model computes: an operation is folded only when its
//! outputs are internal (TEMPORARY_VARIABLE) tensors whose model shapes are fully known
//! and equal to the inferred ones; anything that does not lower or run is left to the
//! compiler, which reports it as it would have.

use vnpu_emu::kernels::{self, KernelOp};
use vnpu_emu::tensor::{Staged, TensorType, View, ViewMut};

use super::{bounded, operand_types};
use super::{lower, Operands};
use crate::hal::{Model, OperandLifeTime, Operation, Subgraph};

/// Outputs larger than this are left to the device (folding them would move a large
/// computation onto the host at preparation for a once-only gain).
const MAX_FOLDED_BYTES: u64 = 16 << 20;

/// Folds every operation of the main subgraph whose inputs are all constants, in order,
/// adding its outputs to `constants` (`deferred`: the model inputs the host reads).
/// Returns how many operations were folded.
pub fn fold_constants(
    model: &Model,
    deferred: &[bool],
    constants: &mut [Option<Vec<u8>>],
) -> usize {
    let sg = &model.main;
    let omitted = vec![false; sg.operands.len()];
    let mut folded = 0;
    // An operand with two writers (an IF's result, a loop's state) is no constant.
    let mut writers = vec![0u32; sg.operands.len()];
    for op in &sg.operations {
        for &o in &op.outputs {
            if let Some(w) = writers.get_mut(o as usize) {
                *w += 1;
            }
        }
    }
    for op in &sg.operations {
        if !foldable(sg, op, constants) || op.outputs.iter().any(|&o| writers[o as usize] > 1) {
            continue;
        }
        let shapes: Vec<Option<Vec<usize>>> = sg
            .operands
            .iter()
            .zip(constants.iter())
            .map(|(o, c)| {
                c.as_ref()
                    .map(|_| o.dimensions.iter().map(|&d| d as usize).collect())
            })
            .collect();
        let ops = Operands {
            subgraph: sg,
            constants,
            shapes: &shapes,
            deferred,
            omitted: &omitted,
            dynamic: &[],
        };
        let Ok(l) = lower(&ops, op) else { continue };
        let Some(values) = run_on_host(sg, &shapes, constants, &l.op, &l.inputs, &l.outputs) else {
            continue;
        };
        for (&o, v) in l.outputs.iter().zip(values) {
            constants[o as usize] = Some(v);
        }
        folded += 1;
    }
    folded
}

/// Every input constant (or absent), every output an internal tensor not yet known.
fn foldable(sg: &Subgraph, op: &Operation, constants: &[Option<Vec<u8>>]) -> bool {
    let constant = |i: u32| constants.get(i as usize).is_some_and(|c| c.is_some());
    let absent = |i: u32| {
        sg.operands
            .get(i as usize)
            .is_some_and(|o| o.lifetime == OperandLifeTime::NO_VALUE)
    };
    let internal = |i: u32| {
        sg.operands.get(i as usize).is_some_and(|o| {
            o.lifetime == OperandLifeTime::TEMPORARY_VARIABLE
                && !o.dimensions.is_empty()
                && !o.dimensions.contains(&0)
        }) && !constant(i)
    };
    !op.inputs.is_empty()
        && op.inputs.iter().all(|&i| constant(i) || absent(i))
        && op.inputs.iter().any(|&i| constant(i))
        && op.outputs.iter().all(|&o| internal(o))
}

/// Runs one lowered kernel on constant inputs; `None` unless it runs and its output
/// shapes are exactly the model's.
fn run_on_host(
    sg: &Subgraph,
    shapes: &[Option<Vec<usize>>],
    constants: &[Option<Vec<u8>>],
    op: &KernelOp,
    inputs: &[u32],
    outputs: &[u32],
) -> Option<Vec<Vec<u8>>> {
    let in_tys = operand_types(sg, shapes, inputs).ok()?;
    let in_refs: Vec<&TensorType> = in_tys.iter().collect();
    let out_shapes = op.output_shapes(&in_refs).ok()?;
    let mut out_known = shapes.to_vec();
    for (&o, s) in outputs.iter().zip(&out_shapes) {
        let model: Vec<usize> = sg
            .operands
            .get(o as usize)?
            .dimensions
            .iter()
            .map(|&d| d as usize)
            .collect();
        if &model != s {
            return None;
        }
        bounded(sg, o, s).ok()?;
        out_known[o as usize] = Some(s.clone());
    }
    let out_tys = operand_types(sg, &out_known, outputs).ok()?;
    // The sizes were bounded above (MAX_TENSOR_BYTES), so this product cannot wrap.
    let byte_len = |t: &TensorType| (t.numel() * t.dtype.size() as usize) as u64;
    if out_tys.iter().any(|t| byte_len(t) > MAX_FOLDED_BYTES) {
        return None;
    }
    let staged_in: Vec<Staged> = inputs
        .iter()
        .map(|&i| {
            let bytes = constants.get(i as usize)?.as_deref()?;
            let mut s = Staged::zeroed(bytes.len());
            s.bytes_mut().copy_from_slice(bytes);
            Some(s)
        })
        .collect::<Option<_>>()?;
    let views: Vec<View<'_>> = in_tys
        .iter()
        .zip(&staged_in)
        .map(|(ty, s)| View {
            ty,
            bytes: s.bytes(),
        })
        .collect();
    let mut staged_out: Vec<Staged> = out_tys
        .iter()
        .map(|t| Staged::zeroed(byte_len(t) as usize))
        .collect();
    {
        let mut outs: Vec<ViewMut<'_>> = out_tys
            .iter()
            .zip(staged_out.iter_mut())
            .map(|(ty, s)| ViewMut {
                ty,
                bytes: s.bytes_mut(),
            })
            .collect();
        kernels::execute(op, &views, &mut outs).ok()?;
    }
    Some(staged_out.iter().map(|s| s.bytes().to_vec()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hal::{DataLocation, Operand, OperandType, OperationType};

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// t = a + b (both constant); out = x + t.
    fn model() -> Model {
        let f = OperandType::TENSOR_FLOAT32;
        let tensor = |lifetime, at: u32| Operand {
            r#type: f,
            dimensions: vec![2],
            number_of_consumers: 1,
            lifetime,
            location: DataLocation {
                pool_index: 0,
                offset: at,
                length: if at == u32::MAX { 0 } else { 8 },
            },
            ..Default::default()
        };
        let none = u32::MAX;
        let mut act = tensor(OperandLifeTime::CONSTANT_COPY, 16);
        act.r#type = OperandType::INT32;
        act.dimensions = Vec::new();
        act.location.length = 4;
        act.number_of_consumers = 2;
        let mut operands = vec![
            tensor(OperandLifeTime::CONSTANT_COPY, 0),
            tensor(OperandLifeTime::CONSTANT_COPY, 8),
            act,
            tensor(OperandLifeTime::TEMPORARY_VARIABLE, none),
            tensor(OperandLifeTime::SUBGRAPH_INPUT, none),
            tensor(OperandLifeTime::SUBGRAPH_OUTPUT, none),
        ];
        for o in &mut operands[3..] {
            o.location = DataLocation::default();
        }
        operands[5].number_of_consumers = 0;
        let mut values = f32s(&[1.0, 2.0, 10.0, 20.0]);
        values.extend_from_slice(&0i32.to_le_bytes());
        Model {
            main: Subgraph {
                operands,
                operations: vec![
                    Operation {
                        r#type: OperationType::ADD,
                        inputs: vec![0, 1, 2],
                        outputs: vec![3],
                    },
                    Operation {
                        r#type: OperationType::ADD,
                        inputs: vec![4, 3, 2],
                        outputs: vec![5],
                    },
                ],
                input_indexes: vec![4],
                output_indexes: vec![5],
            },
            operand_values: values,
            ..Default::default()
        }
    }

    #[test]
    fn an_operation_on_constants_becomes_a_constant() {
        let m = model();
        crate::validate::validate_model(&m).unwrap();
        let mut constants = super::super::constant_values(&m, &m.main, &[]).unwrap();
        let deferred = super::super::deferred_inputs(&m.main);
        assert_eq!(fold_constants(&m, &deferred, &mut constants), 1);
        assert_eq!(constants[3].as_deref(), Some(&f32s(&[11.0, 22.0])[..]));
        // The compiled program keeps only the operation that reads the input.
        let plan = super::super::ModelPlan::new(m).unwrap();
        assert_eq!(plan.constants.get()[3], constants[3]);
        let c = plan.instance(&[vec![2]], &[], &[], None).unwrap();
        assert_eq!(c.ops.len(), 1);
        assert_eq!(c.ops[0].inputs, [4, 3]);
    }

    #[test]
    fn operations_on_inputs_or_producing_outputs_stay() {
        let mut m = model();
        // Make the folded tensor a model output: it must stay an operation.
        m.main.operands[3].lifetime = OperandLifeTime::SUBGRAPH_OUTPUT;
        m.main.output_indexes.push(3);
        let mut constants = super::super::constant_values(&m, &m.main, &[]).unwrap();
        let deferred = super::super::deferred_inputs(&m.main);
        assert_eq!(fold_constants(&m, &deferred, &mut constants), 0);
        assert!(constants[3].is_none() && constants[5].is_none());
    }

    /// Through the device: the folded tensor comes from the constant block.
    #[test]
    fn a_folded_model_runs_on_the_device() {
        use crate::device::{IDevice, PrepareArgs, PreparedModelSlot, VnpuDevice};
        use crate::hal::{
            MeasureTiming, Memory, OptionalTimePoint, OptionalTimeoutDuration, Request,
            RequestArgument, RequestMemoryPool,
        };
        let dev = VnpuDevice::with_config(vnpu_emu::DeviceConfig {
            dram_size: 1 << 20,
            ..Default::default()
        })
        .unwrap();
        let slot = PreparedModelSlot::new();
        dev.prepare_model_1_3(PrepareArgs::new(&model(), Some(slot.clone())));
        let (status, prepared) = slot.wait();
        assert_eq!(status, crate::hal::ErrorStatus::None);
        let pool = Memory::ashmem_with(&f32s(&[0.5, 0.25, 0.0, 0.0])).unwrap();
        let arg = |offset| RequestArgument {
            location: DataLocation {
                pool_index: 0,
                offset,
                length: 8,
            },
            ..Default::default()
        };
        let request = Request {
            inputs: vec![arg(0)],
            outputs: vec![arg(8)],
            pools: vec![RequestMemoryPool::HidlMemory(pool.clone())],
        };
        let (status, _, _) = prepared.unwrap().execute_synchronously_1_3(
            &request,
            MeasureTiming::NO,
            OptionalTimePoint::NONE,
            OptionalTimeoutDuration(None),
        );
        assert_eq!(status, crate::hal::ErrorStatus::None);
        let mut out = [0u8; 8];
        nix::sys::uio::pread(std::os::fd::AsFd::as_fd(&*pool.handle.fds[0]), &mut out, 8).unwrap();
        assert_eq!(out.to_vec(), f32s(&[11.5, 22.25]));
    }
}
