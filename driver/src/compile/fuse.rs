//! Activation fusion: a RELU, RELU1 or RELU6 whose input comes from an operation with a
//! fused activation code (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, ADD/SUB/MUL/DIV,
//! the poolings) that has none is folded into that operation: it writes the RELU's output
//! with the clamp applied as it stores. Converted models are full of these pairs (the
//! MediaPipe face detectors have one after nearly every convolution); folding one saves a
//! pass over the tensor and its arena space, as an NPU compiler's epilogue fusion does.
//!
//! The result is the same bits: a fused activation is the same clamp the RELU applies
//! (NaN passing through), on the same values. It is done only where nothing else could
//! tell: the intermediate tensor is internal, written once, read only by the RELU, and of
//! the same type (shape, element type, quantisation) as the RELU's output, in a program
//! without control flow.

use vnpu_emu::kernels::{Activation, KernelOp};

use super::lower::Lowered;
use super::operand_types;
use crate::hal::{OperandLifeTime, Subgraph};

/// Folds every RELU* it can into its input's producer (see the module documentation);
/// returns how many it folded.
pub(super) fn fuse_activations(
    sg: &Subgraph,
    shapes: &[Option<Vec<usize>>],
    dynamic: &[bool],
    ops: &mut Vec<Lowered>,
) -> usize {
    let control = |l: &Lowered| l.op.branch_target().is_some() || matches!(l.op, KernelOp::Copy(_));
    if ops.iter().any(control) {
        return 0;
    }
    let n = sg.operands.len();
    let (mut readers, mut writers) = (vec![0u32; n], vec![0u32; n]);
    let mut producer = vec![None; n];
    for (k, l) in ops.iter().enumerate() {
        for &i in &l.inputs {
            if let Some(r) = readers.get_mut(i as usize) {
                *r += 1;
            }
        }
        for (slot, &o) in l.outputs.iter().enumerate() {
            if let Some(w) = writers.get_mut(o as usize) {
                *w += 1;
                producer[o as usize] = Some((k, slot));
            }
        }
    }
    let mut folded = vec![false; ops.len()];
    for j in 0..ops.len() {
        let Some(act) = ops[j].op.kernel().as_activation() else {
            continue;
        };
        let (&[t], &[u]) = (&ops[j].inputs[..], &ops[j].outputs[..]) else {
            continue;
        };
        let (ti, ui) = (t as usize, u as usize);
        let internal = sg
            .operands
            .get(ti)
            .is_some_and(|o| o.lifetime == OperandLifeTime::TEMPORARY_VARIABLE);
        let once = internal
            && readers[ti] == 1
            && writers[ti] == 1
            && writers.get(ui) == Some(&1)
            && !dynamic.get(ti).copied().unwrap_or(true)
            && !dynamic.get(ui).copied().unwrap_or(true);
        let Some((i, slot)) = producer[ti].filter(|_| once) else {
            continue;
        };
        if folded[i] || ops[i].op.kernel().fused_activation() != Some(Activation::None) {
            continue;
        }
        let same_type = match (
            operand_types(sg, shapes, &[t]),
            operand_types(sg, shapes, &[u]),
        ) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        if !same_type {
            continue;
        }
        let mut fused = ops[i].op.clone();
        if !fused.kernel_mut().set_fused_activation(act)
            || !still_valid(sg, shapes, &ops[i], &fused)
        {
            continue;
        }
        ops[i].op = fused;
        ops[i].outputs[slot] = u;
        folded[j] = true;
    }
    let count = folded.iter().filter(|&&f| f).count();
    let mut k = 0;
    ops.retain(|_| {
        k += 1;
        !folded[k - 1]
    });
    count
}

/// Whether the fused op decodes and validates on the original op's operands (a kernel may
/// refuse an activation on some element type, as ADD on int32 does).
fn still_valid(
    sg: &Subgraph,
    shapes: &[Option<Vec<usize>>],
    original: &Lowered,
    fused: &KernelOp,
) -> bool {
    if KernelOp::decode(fused.opcode(), &fused.encode_params()).is_err() {
        return false;
    }
    let (Ok(ins), Ok(outs)) = (
        operand_types(sg, shapes, &original.inputs),
        operand_types(sg, shapes, &original.outputs),
    ) else {
        return false;
    };
    let ins: Vec<_> = ins.iter().collect();
    let outs: Vec<_> = outs.iter().collect();
    fused.output_shapes(&ins).is_ok() && fused.check(&ins, &outs).is_ok()
}

#[cfg(test)]
mod tests {
    use crate::compile::ModelPlan;
    use crate::hal::{
        DataLocation, Model, Operand, OperandLifeTime, OperandType, Operation, OperationType,
        Subgraph,
    };
    use vnpu_emu::kernels::{Activation, KernelOp};

    /// t = x + c (no activation); y = RELU6(t). Operands: 0 x, 1 c, 2 act code, 3 t, 4 y.
    fn model() -> Model {
        let tensor = |lifetime| Operand {
            r#type: OperandType::TENSOR_FLOAT32,
            dimensions: vec![2],
            number_of_consumers: 1,
            lifetime,
            ..Default::default()
        };
        let mut c = tensor(OperandLifeTime::CONSTANT_COPY);
        c.location = DataLocation {
            pool_index: 0,
            offset: 0,
            length: 8,
        };
        let act = Operand {
            r#type: OperandType::INT32,
            number_of_consumers: 1,
            lifetime: OperandLifeTime::CONSTANT_COPY,
            location: DataLocation {
                pool_index: 0,
                offset: 8,
                length: 4,
            },
            ..Default::default()
        };
        let mut values: Vec<u8> = [1.0f32, -9.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        values.extend_from_slice(&0i32.to_le_bytes());
        Model {
            main: Subgraph {
                operands: vec![
                    tensor(OperandLifeTime::SUBGRAPH_INPUT),
                    c,
                    act,
                    tensor(OperandLifeTime::TEMPORARY_VARIABLE),
                    Operand {
                        number_of_consumers: 0,
                        ..tensor(OperandLifeTime::SUBGRAPH_OUTPUT)
                    },
                ],
                operations: vec![
                    Operation {
                        r#type: OperationType::ADD,
                        inputs: vec![0, 1, 2],
                        outputs: vec![3],
                    },
                    Operation {
                        r#type: OperationType::RELU6,
                        inputs: vec![3],
                        outputs: vec![4],
                    },
                ],
                input_indexes: vec![0],
                output_indexes: vec![4],
            },
            operand_values: values,
            ..Default::default()
        }
    }

    fn ops_of(m: &Model) -> Vec<crate::compile::Lowered> {
        crate::hal::validate_model(m).unwrap();
        let plan = ModelPlan::new(m.clone()).unwrap();
        plan.instance(&[vec![2]], &[], &[], None).unwrap().ops
    }

    #[test]
    fn a_relu_folds_into_its_producer() {
        let ops = ops_of(&model());
        assert_eq!(ops.len(), 1);
        assert_eq!(ops[0].outputs, [4]);
        assert_eq!(
            ops[0].op.kernel().fused_activation(),
            Some(Activation::Relu6)
        );
    }

    #[test]
    fn a_relu_whose_input_is_seen_elsewhere_stays() {
        // The intermediate is also a model output.
        let mut m = model();
        m.main.operands[3].lifetime = OperandLifeTime::SUBGRAPH_OUTPUT;
        m.main.output_indexes.push(3);
        assert_eq!(ops_of(&m).len(), 2);
        // The intermediate has a second reader.
        let mut m = model();
        m.main.operands.push(m.main.operands[4].clone());
        m.main.operands[3].number_of_consumers = 2;
        m.main.operations.push(Operation {
            r#type: OperationType::RELU,
            inputs: vec![3],
            outputs: vec![5],
        });
        m.main.output_indexes.push(5);
        let ops = ops_of(&m);
        assert_eq!(ops.len(), 3);
        assert!(ops
            .iter()
            .all(|l| l.op.kernel().fused_activation() != Some(Activation::Relu6)));
    }

    #[test]
    fn a_producer_with_its_own_activation_keeps_the_relu() {
        let mut m = model();
        m.operand_values[8..12].copy_from_slice(&1i32.to_le_bytes());
        let ops = ops_of(&m);
        assert_eq!(ops.len(), 2);
        assert!(matches!(ops[1].op, KernelOp::Unary(_)));
    }

    #[test]
    fn quantised_pairs_fold_only_with_equal_quantisation() {
        let quantise = |m: &mut Model, out_scale: f32| {
            for i in [0usize, 1, 3, 4] {
                let o = &mut m.main.operands[i];
                o.r#type = OperandType::TENSOR_QUANT8_ASYMM;
                o.scale = 0.5;
                o.zero_point = 128;
            }
            m.main.operands[4].scale = out_scale;
            m.main.operands[1].location.length = 2;
            m.operand_values[..2].copy_from_slice(&[130, 100]);
        };
        let mut m = model();
        quantise(&mut m, 0.5);
        assert_eq!(ops_of(&m).len(), 1);
        let mut m = model();
        quantise(&mut m, 0.25);
        // The model is invalid or keeps both ops; either way nothing is folded.
        if crate::hal::validate_model(&m).is_ok() {
            let plan = ModelPlan::new(m).unwrap();
            if let Ok(c) = plan.instance(&[vec![2]], &[], &[], None) {
                assert_eq!(c.ops.len(), 2);
            }
        }
    }
}
