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

use vnpu_emu::kernels::{Activation, ConvEpilogue, Convert, ConvertKind, KernelOp, MinMaxKind};
use vnpu_emu::tensor::DType;

use super::operand_types;
use super::Lowered;
use crate::hal::{OperandLifeTime, Subgraph};

/// Readers, writers and the producing (op, output slot) of every operand of `ops`.
pub(super) type Uses = (Vec<u32>, Vec<u32>, Vec<Option<(usize, usize)>>);

/// The [`Uses`] of `ops` over `n` operands.
pub(super) fn uses(n: usize, ops: &[Lowered]) -> Uses {
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
    (readers, writers, producer)
}

/// Whether an op's output `u` may take the place of its input `t` when the op folds into
/// `t`'s producer: `t` internal, written once and read once (by the folding op), `u`
/// written once, both of static shape.
fn folds_through(
    sg: &Subgraph,
    (readers, writers): (&[u32], &[u32]),
    dynamic: &[bool],
    t: u32,
    u: u32,
) -> bool {
    let (ti, ui) = (t as usize, u as usize);
    let internal = sg
        .operands
        .get(ti)
        .is_some_and(|o| o.lifetime == OperandLifeTime::TEMPORARY_VARIABLE);
    internal
        && readers.get(ti) == Some(&1)
        && writers.get(ti) == Some(&1)
        && writers.get(ui) == Some(&1)
        && !dynamic.get(ti).copied().unwrap_or(true)
        && !dynamic.get(ui).copied().unwrap_or(true)
}

/// Whether `ops` has control flow (then nothing is fused).
pub(super) fn has_control(ops: &[Lowered]) -> bool {
    ops.iter()
        .any(|l| l.op.branch_target().is_some() || matches!(l.op, KernelOp::Copy(_)))
}

/// Folds each DEQUANTIZE of a per-tensor uint8/int8 tensor to float32 whose result only a
/// QUANTIZE reads into one REQUANTIZE (`ConvertKind::Requantize`, the same arithmetic as
/// the pair, one pass and no float32 intermediate): TFLite's quantised-to-quantised
/// QUANTIZE and its rescaling activations import as such pairs. The same conditions as
/// for activations apply (an internal intermediate, written once, read once, static
/// shapes, no control flow). Returns how many it folded. Run it before
/// [`fuse_activations`], so that a RELU after the pair folds into the REQUANTIZE.
pub(super) fn fuse_requantize(
    sg: &Subgraph,
    shapes: &[Option<Vec<usize>>],
    dynamic: &[bool],
    ops: &mut Vec<Lowered>,
) -> usize {
    if has_control(ops) {
        return 0;
    }
    let (readers, writers, producer) = uses(sg.operands.len(), ops);
    let mut folded = vec![false; ops.len()];
    for j in 0..ops.len() {
        if !matches!(&ops[j].op, KernelOp::Convert(c) if c.kind == ConvertKind::Quantize) {
            continue;
        }
        let (&[t], &[u]) = (&ops[j].inputs[..], &ops[j].outputs[..]) else {
            continue;
        };
        let ti = t as usize;
        let once = folds_through(sg, (&readers, &writers), dynamic, t, u);
        let Some((i, 0)) = producer[ti].filter(|_| once) else {
            continue;
        };
        if folded[i]
            || !matches!(&ops[i].op, KernelOp::Convert(c) if c.kind == ConvertKind::Dequantize)
        {
            continue;
        }
        // The pair's arithmetic is the table's only through a float32 intermediate.
        let float32 = operand_types(sg, shapes, &[t]).is_ok_and(|t| t[0].dtype == DType::F32);
        if !float32 {
            continue;
        }
        let requant = Lowered {
            op: KernelOp::Convert(Convert::from(ConvertKind::Requantize)),
            inputs: ops[i].inputs.clone(),
            outputs: vec![u],
        };
        if !still_valid(sg, shapes, &requant, &requant.op) {
            continue;
        }
        ops[i] = requant;
        folded[j] = true;
    }
    let count = folded.iter().filter(|&&f| f).count();
    drop_folded(ops, &folded);
    count
}

/// Folds each DEQUANTIZE (per-tensor uint8/int8 to float32) -> PRELU (float32) -> QUANTIZE
/// chain into one REQUANTIZE_PRELU (`ConvertKind::RequantizePrelu`: the same float32
/// arithmetic, one pass over the quantised tensor, no float32 intermediates). A quantiser
/// without an int8 PRELU leaves such chains around every PRELU of a model (MediaPipe's
/// iris model, quantised, has 53). Both intermediates must be internal, written once,
/// read once (the float tensor as the PRELU's input, not its slope), with static shapes,
/// the slope written before the DEQUANTIZE (a constant, usually) and repeating whole
/// along the input (the kernel validates that), in a program without control flow.
/// Returns how many chains it folded. Run it before [`fuse_requantize`].
pub(super) fn fuse_prelu(
    sg: &Subgraph,
    shapes: &[Option<Vec<usize>>],
    dynamic: &[bool],
    ops: &mut Vec<Lowered>,
) -> usize {
    if has_control(ops) {
        return 0;
    }
    let (readers, writers, producer) = uses(sg.operands.len(), ops);
    // The operand `t` read only by one op, written once by op `k` (output 0) before it.
    let single_use = |t: u32| -> Option<usize> {
        let ti = t as usize;
        let internal = sg
            .operands
            .get(ti)
            .is_some_and(|o| o.lifetime == OperandLifeTime::TEMPORARY_VARIABLE);
        let once = internal
            && readers[ti] == 1
            && writers[ti] == 1
            && !dynamic.get(ti).copied().unwrap_or(true);
        let float32 = operand_types(sg, shapes, &[t]).is_ok_and(|t| t[0].dtype == DType::F32);
        match producer[ti] {
            Some((k, 0)) if once && float32 => Some(k),
            _ => None,
        }
    };
    let mut folded = vec![false; ops.len()];
    for j in 0..ops.len() {
        if !matches!(&ops[j].op, KernelOp::Convert(c) if c.kind == ConvertKind::Quantize) {
            continue;
        }
        let (&[p], &[u]) = (&ops[j].inputs[..], &ops[j].outputs[..]) else {
            continue;
        };
        if writers.get(u as usize) != Some(&1) || dynamic.get(u as usize).copied().unwrap_or(true) {
            continue;
        }
        let Some(k) = single_use(p) else { continue };
        let (&[t, alpha], false) = (&ops[k].inputs[..], folded[k]) else {
            continue;
        };
        if !matches!(&ops[k].op, KernelOp::MinMax(m) if m.kind == MinMaxKind::Prelu) {
            continue;
        }
        let Some(i) = single_use(t) else { continue };
        if folded[i]
            || !matches!(&ops[i].op, KernelOp::Convert(c) if c.kind == ConvertKind::Dequantize)
        {
            continue;
        }
        // The fused op runs where the DEQUANTIZE ran: the slope must exist by then.
        let slope_ready = alpha != t && producer[alpha as usize].is_none_or(|(a, _)| a < i);
        if !slope_ready {
            continue;
        }
        let fused = Lowered {
            op: KernelOp::Convert(Convert::from(ConvertKind::RequantizePrelu)),
            inputs: vec![ops[i].inputs[0], alpha],
            outputs: vec![u],
        };
        if ops[i].inputs.len() != 1 || !still_valid(sg, shapes, &fused, &fused.op) {
            continue;
        }
        ops[i] = fused;
        folded[k] = true;
        folded[j] = true;
    }
    let count = folded.iter().filter(|&&f| f).count() / 2;
    drop_folded(ops, &folded);
    count
}

/// Folds each REQUANTIZE or REQUANTIZE_PRELU (after [`fuse_prelu`], [`fuse_requantize`]
/// and [`fuse_activations`]) whose input is a quantised NHWC CONV_2D's or
/// DEPTHWISE_CONV_2D's output into that convolution as its epilogue
/// ([`ConvEpilogue`]: the output stage maps each intermediate integer to the fused op's
/// result before it stores it; the same arithmetic, so the same bytes). The
/// intermediate must be internal, written once, read once, of static shape, of the
/// convolution's element type as the output is, in a program without control flow; a
/// PRELU's slope written before the convolution (a constant, usually) and one value or
/// one per channel (the kernel validates that). Returns how many it folded.
pub(super) fn fuse_epilogues(
    sg: &Subgraph,
    shapes: &[Option<Vec<usize>>],
    dynamic: &[bool],
    ops: &mut Vec<Lowered>,
) -> usize {
    if has_control(ops) {
        return 0;
    }
    let (readers, writers, producer) = uses(sg.operands.len(), ops);
    let mut folded = vec![false; ops.len()];
    for j in 0..ops.len() {
        let (prelu, act) = match &ops[j].op {
            KernelOp::Convert(c) if c.kind == ConvertKind::Requantize => (false, c.act),
            KernelOp::Convert(c) if c.kind == ConvertKind::RequantizePrelu => (true, c.act),
            _ => continue,
        };
        let (Some(&t), &[u]) = (ops[j].inputs.first(), &ops[j].outputs[..]) else {
            continue;
        };
        let ti = t as usize;
        let once = folds_through(sg, (&readers, &writers), dynamic, t, u);
        let Some((i, 0)) = producer[ti].filter(|_| once) else {
            continue;
        };
        if folded[i] || ops[i].inputs.len() != 3 {
            continue;
        }
        let slope = match &ops[j].inputs[..] {
            &[_, a] if prelu => {
                if a == t || producer[a as usize].is_some_and(|(k, _)| k >= i) {
                    continue;
                }
                Some(a)
            }
            [_] if !prelu => None,
            _ => continue,
        };
        let (Ok(mid), Ok(out), Ok(x)) = (
            operand_types(sg, shapes, &[t]),
            operand_types(sg, shapes, &[u]),
            operand_types(sg, shapes, &ops[i].inputs[..1]),
        ) else {
            continue;
        };
        let (mid, out, x) = (&mid[0], &out[0], &x[0]);
        let same_types = matches!(x.dtype, DType::U8 | DType::I8)
            && mid.dtype == x.dtype
            && out.dtype == x.dtype
            && mid.shape == out.shape;
        if !same_types {
            continue;
        }
        let epilogue = Some(ConvEpilogue {
            prelu,
            act,
            scale: mid.quant.scale,
            zero_point: mid.quant.zero_point,
        });
        let mut op = ops[i].op.clone();
        match &mut op {
            KernelOp::Conv2d(c) if !c.nchw && c.epilogue.is_none() => c.epilogue = epilogue,
            KernelOp::DepthwiseConv2d(d) if !d.nchw && d.epilogue.is_none() => {
                d.epilogue = epilogue
            }
            _ => continue,
        }
        let fused = Lowered {
            op,
            inputs: ops[i].inputs.iter().copied().chain(slope).collect(),
            outputs: vec![u],
        };
        if !still_valid(sg, shapes, &fused, &fused.op) {
            continue;
        }
        ops[i] = fused;
        folded[j] = true;
    }
    let count = folded.iter().filter(|&&f| f).count();
    drop_folded(ops, &folded);
    count
}

/// Folds every RELU* it can into its input's producer (see the module documentation);
/// returns how many it folded.
pub(super) fn fuse_activations(
    sg: &Subgraph,
    shapes: &[Option<Vec<usize>>],
    dynamic: &[bool],
    ops: &mut Vec<Lowered>,
) -> usize {
    if has_control(ops) {
        return 0;
    }
    let (readers, writers, producer) = uses(sg.operands.len(), ops);
    let mut folded = vec![false; ops.len()];
    for j in 0..ops.len() {
        let Some(act) = ops[j].op.kernel().as_activation() else {
            continue;
        };
        let (&[t], &[u]) = (&ops[j].inputs[..], &ops[j].outputs[..]) else {
            continue;
        };
        let ti = t as usize;
        let once = folds_through(sg, (&readers, &writers), dynamic, t, u);
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
    drop_folded(ops, &folded);
    count
}

/// Whether the fused op decodes and validates on the original op's operands (a kernel may
/// refuse an activation on some element type, as ADD on int32 does).
pub(super) fn still_valid(
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

/// Removes the ops a fusion folded into another (`folded[i]` for op `i`).
pub(super) fn drop_folded(ops: &mut Vec<Lowered>, folded: &[bool]) {
    let mut k = 0;
    ops.retain(|_| {
        k += 1;
        !folded[k - 1]
    });
}

#[cfg(test)]
mod tests {
    use crate::compile::ModelPlan;
    use crate::hal::{
        DataLocation, Model, Operand, OperandLifeTime, OperandType, Operation, OperationType,
        Subgraph,
    };
    use vnpu_emu::kernels::{Activation, ConvertKind, KernelOp};

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
        ops_of_shape(m, vec![2])
    }

    fn ops_of_shape(m: &Model, input: Vec<usize>) -> Vec<crate::compile::Lowered> {
        crate::validate::validate_model(m).unwrap();
        let plan = ModelPlan::new(m.clone()).unwrap();
        plan.instance(&[input], &[], &[], None).unwrap().ops
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

    /// x (int8) -> DEQUANTIZE -> t (float32) -> QUANTIZE -> y (int8, another scale) ->
    /// RELU -> z: one REQUANTIZE with the RELU's clamp; with t also a model output,
    /// nothing folds but the RELU (into nothing: QUANTIZE has no activation).
    #[test]
    fn a_requantisation_through_float_folds_into_one_op() {
        let q = |scale: f32, lifetime| Operand {
            r#type: OperandType::TENSOR_QUANT8_ASYMM_SIGNED,
            dimensions: vec![4],
            scale,
            zero_point: -3,
            number_of_consumers: 1,
            lifetime,
            ..Default::default()
        };
        let model = |t_out: bool| {
            let mut t = q(0.0, OperandLifeTime::TEMPORARY_VARIABLE);
            t.r#type = OperandType::TENSOR_FLOAT32;
            t.zero_point = 0;
            let mut outputs = vec![3];
            if t_out {
                t.lifetime = OperandLifeTime::SUBGRAPH_OUTPUT;
                outputs.push(1);
            }
            Model {
                main: Subgraph {
                    operands: vec![
                        q(0.5, OperandLifeTime::SUBGRAPH_INPUT),
                        t,
                        q(0.25, OperandLifeTime::TEMPORARY_VARIABLE),
                        Operand {
                            number_of_consumers: 0,
                            ..q(0.25, OperandLifeTime::SUBGRAPH_OUTPUT)
                        },
                    ],
                    operations: vec![
                        Operation {
                            r#type: OperationType::DEQUANTIZE,
                            inputs: vec![0],
                            outputs: vec![1],
                        },
                        Operation {
                            r#type: OperationType::QUANTIZE,
                            inputs: vec![1],
                            outputs: vec![2],
                        },
                        Operation {
                            r#type: OperationType::RELU,
                            inputs: vec![2],
                            outputs: vec![3],
                        },
                    ],
                    input_indexes: vec![0],
                    output_indexes: outputs,
                },
                ..Default::default()
            }
        };
        let ops = ops_of_shape(&model(false), vec![4]);
        assert_eq!(ops.len(), 1);
        assert_eq!(
            (&ops[0].inputs[..], &ops[0].outputs[..]),
            (&[0u32][..], &[3u32][..])
        );
        assert!(matches!(&ops[0].op, KernelOp::Convert(c)
            if c.kind == ConvertKind::Requantize && c.act == Activation::Relu));
        assert_eq!(ops_of_shape(&model(true), vec![4]).len(), 3);
    }

    /// x (int8 [1,2,3]) -> DEQUANTIZE -> t -> PRELU(t, slope [3] constant) -> p ->
    /// QUANTIZE -> y: one REQUANTIZE_PRELU reading x and the slope; with p also a model
    /// output, or the slope as the PRELU's first input, nothing folds.
    #[test]
    fn a_float_prelu_between_quantised_tensors_folds_into_one_op() {
        let model = |p_out: bool, swapped: bool| {
            let q = |lifetime| Operand {
                r#type: OperandType::TENSOR_QUANT8_ASYMM_SIGNED,
                dimensions: vec![1, 2, 3],
                scale: 0.5,
                zero_point: -3,
                number_of_consumers: 1,
                lifetime,
                ..Default::default()
            };
            let f = |lifetime, dimensions| Operand {
                r#type: OperandType::TENSOR_FLOAT32,
                dimensions,
                number_of_consumers: 1,
                lifetime,
                ..Default::default()
            };
            let mut slope = f(OperandLifeTime::CONSTANT_COPY, vec![3]);
            slope.location = DataLocation {
                pool_index: 0,
                offset: 0,
                length: 12,
            };
            let mut p = f(OperandLifeTime::TEMPORARY_VARIABLE, vec![1, 2, 3]);
            let mut outputs = vec![4];
            if p_out {
                p.lifetime = OperandLifeTime::SUBGRAPH_OUTPUT;
                outputs.push(3);
            }
            let prelu_in = if swapped { vec![2, 1] } else { vec![1, 2] };
            Model {
                main: Subgraph {
                    operands: vec![
                        q(OperandLifeTime::SUBGRAPH_INPUT),
                        f(OperandLifeTime::TEMPORARY_VARIABLE, vec![1, 2, 3]),
                        slope,
                        p,
                        Operand {
                            number_of_consumers: 0,
                            scale: 0.25,
                            ..q(OperandLifeTime::SUBGRAPH_OUTPUT)
                        },
                    ],
                    operations: vec![
                        Operation {
                            r#type: OperationType::DEQUANTIZE,
                            inputs: vec![0],
                            outputs: vec![1],
                        },
                        Operation {
                            r#type: OperationType::PRELU,
                            inputs: prelu_in,
                            outputs: vec![3],
                        },
                        Operation {
                            r#type: OperationType::QUANTIZE,
                            inputs: vec![3],
                            outputs: vec![4],
                        },
                    ],
                    input_indexes: vec![0],
                    output_indexes: outputs,
                },
                operand_values: [0.25f32, -1.0, 2.0]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
                ..Default::default()
            }
        };
        let ops = ops_of_shape(&model(false, false), vec![1, 2, 3]);
        assert_eq!(ops.len(), 1);
        assert_eq!(
            (&ops[0].inputs[..], &ops[0].outputs[..]),
            (&[0u32, 2][..], &[4u32][..])
        );
        assert!(matches!(&ops[0].op, KernelOp::Convert(c)
            if c.kind == ConvertKind::RequantizePrelu));
        assert_eq!(ops_of_shape(&model(true, false), vec![1, 2, 3]).len(), 3);
        assert_eq!(ops_of_shape(&model(false, true), vec![1, 2, 3]).len(), 3);
    }

    /// x (int8 [1,2,2,3]) -> CONV_2D (1x1, 4 channels) -> t (int8) -> DEQUANTIZE ->
    /// PRELU (slope [4] constant) -> QUANTIZE -> y, or t -> DEQUANTIZE -> QUANTIZE -> y:
    /// one CONV_2D with the fused requantisation, reading the slope as its fourth input;
    /// with t also a model output, the convolution keeps its output.
    #[test]
    fn a_requantisation_after_a_quantised_convolution_folds_into_it() {
        let model = |prelu: bool, t_out: bool| {
            let q = |dimensions: Vec<u32>, scale: f32, lifetime| Operand {
                r#type: OperandType::TENSOR_QUANT8_ASYMM_SIGNED,
                dimensions,
                scale,
                zero_point: -2,
                number_of_consumers: 1,
                lifetime,
                ..Default::default()
            };
            let at = |offset: u32, length: u32| DataLocation {
                pool_index: 0,
                offset,
                length,
            };
            let mut values: Vec<u8> = vec![1, 255, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
            values.extend([10i32, -20, 30, 40].iter().flat_map(|v| v.to_le_bytes()));
            values.extend([1i32, 1, 1, 0].iter().flat_map(|v| v.to_le_bytes()));
            values.extend(
                [0.25f32, -1.0, 2.0, 0.0]
                    .iter()
                    .flat_map(|v| v.to_le_bytes()),
            );
            let mut filter = q(vec![4, 1, 1, 3], 0.5, OperandLifeTime::CONSTANT_COPY);
            filter.zero_point = 0;
            filter.location = at(0, 12);
            let bias = Operand {
                r#type: OperandType::TENSOR_INT32,
                dimensions: vec![4],
                scale: 0.25,
                number_of_consumers: 1,
                lifetime: OperandLifeTime::CONSTANT_COPY,
                location: at(12, 16),
                ..Default::default()
            };
            let int = |k: u32| Operand {
                r#type: OperandType::INT32,
                number_of_consumers: 1,
                lifetime: OperandLifeTime::CONSTANT_COPY,
                location: at(28 + 4 * k, 4),
                ..Default::default()
            };
            let float = |lifetime| Operand {
                r#type: OperandType::TENSOR_FLOAT32,
                dimensions: vec![1, 2, 2, 4],
                number_of_consumers: 1,
                lifetime,
                ..Default::default()
            };
            let mut slope = float(OperandLifeTime::CONSTANT_COPY);
            slope.dimensions = vec![4];
            slope.location = at(44, 16);
            let mut t = q(vec![1, 2, 2, 4], 0.75, OperandLifeTime::TEMPORARY_VARIABLE);
            // y is operand 11 after a PRELU's 9 and 10, else 9.
            let yi = if prelu { 11 } else { 9 };
            let mut outputs = vec![yi];
            if t_out {
                t.lifetime = OperandLifeTime::SUBGRAPH_OUTPUT;
                outputs.push(7);
            }
            let mut y = q(vec![1, 2, 2, 4], 0.3, OperandLifeTime::SUBGRAPH_OUTPUT);
            y.number_of_consumers = 0;
            let op = |r#type, inputs: Vec<u32>, outputs: Vec<u32>| Operation {
                r#type,
                inputs,
                outputs,
            };
            // 0 x, 1 filter, 2 bias, 3-6 padding code, strides, activation, 7 t,
            // 8 dequantised, 9 slope, 10 PRELU's output, 11 y.
            let mut operations = vec![
                op(OperationType::CONV_2D, vec![0, 1, 2, 3, 4, 5, 6], vec![7]),
                op(OperationType::DEQUANTIZE, vec![7], vec![8]),
            ];
            if prelu {
                operations.push(op(OperationType::PRELU, vec![8, 9], vec![10]));
                operations.push(op(OperationType::QUANTIZE, vec![10], vec![11]));
            } else {
                operations.push(op(OperationType::QUANTIZE, vec![8], vec![9]));
            }
            let mut operands = vec![
                q(vec![1, 2, 2, 3], 0.5, OperandLifeTime::SUBGRAPH_INPUT),
                filter,
                bias,
                int(0),
                int(1),
                int(2),
                int(3),
                t,
                float(OperandLifeTime::TEMPORARY_VARIABLE),
            ];
            if prelu {
                operands.extend([slope, float(OperandLifeTime::TEMPORARY_VARIABLE)]);
            }
            operands.push(y);
            Model {
                main: Subgraph {
                    operands,
                    operations,
                    input_indexes: vec![0],
                    output_indexes: outputs,
                },
                operand_values: values,
                ..Default::default()
            }
        };
        for prelu in [true, false] {
            let ops = ops_of_shape(&model(prelu, false), vec![1, 2, 2, 3]);
            assert_eq!(ops.len(), 1, "{ops:?}");
            let KernelOp::Conv2d(c) = &ops[0].op else {
                panic!("{:?}", ops[0].op);
            };
            let e = c.epilogue.expect("an epilogue");
            assert_eq!((e.prelu, e.scale, e.zero_point), (prelu, 0.75, -2));
            let (inputs, y): (&[u32], u32) = if prelu {
                (&[0, 1, 2, 9], 11)
            } else {
                (&[0, 1, 2], 9)
            };
            assert_eq!(
                (&ops[0].inputs[..], &ops[0].outputs[..]),
                (inputs, &[y][..])
            );
            let ops = ops_of_shape(&model(prelu, true), vec![1, 2, 2, 3]);
            assert!(ops.len() > 1, "{ops:?}");
            assert!(ops
                .iter()
                .all(|l| !matches!(&l.op, KernelOp::Conv2d(c) if c.epilogue.is_some())));
        }
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
        if crate::validate::validate_model(&m).is_ok() {
            let plan = ModelPlan::new(m).unwrap();
            if let Ok(c) = plan.instance(&[vec![2]], &[], &[], None) {
                assert_eq!(c.ops.len(), 2);
            }
        }
    }
}
