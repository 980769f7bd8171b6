//! PAD fusion: a PAD with zeros of the height and width of a float32 NHWC tensor that only a
//! CONV_2D or DEPTHWISE_CONV_2D reads is folded into that convolution's explicit padding.
//! Converted models carry such PADs before their stride-2 convolutions (TFLite's SAME
//! padding is asymmetric at stride 2; the pruned face detector has 43 of them): each is
//! a copy of the whole tensor into a larger one, a pass an NPU compiler folds into the
//! convolution's window.
//!
//! The values are the same: a padded tap adds `0 * w`, which is a zero when `w` is finite
//! (checked: the filter is a constant with finite values), and adding a zero changes no
//! sum but a sum of exactly -0 (to +0), so only a zero's sign can differ. Fused only where
//! nothing else can tell: the padded tensor is internal, written once, read only by the
//! convolution as its input, with static shapes, in a program without control flow.

use vnpu_emu::kernels::{ConvWindow, KernelOp};
use vnpu_emu::tensor::DType;

use super::fuse::{drop_folded, has_control, still_valid, uses};
use super::operand_types;
use super::Lowered;
use crate::hal::{OperandLifeTime, Subgraph};

/// Folds every PAD it can (see the module documentation); returns how many it folded.
pub(super) fn fuse_pads(
    sg: &Subgraph,
    shapes: &[Option<Vec<usize>>],
    dynamic: &[bool],
    constants: &[Option<Vec<u8>>],
    ops: &mut Vec<Lowered>,
) -> usize {
    if has_control(ops) {
        return 0;
    }
    let (readers, writers, producer) = uses(sg.operands.len(), ops);
    let mut folded = vec![false; ops.len()];
    for j in 0..ops.len() {
        let Some(window) = nhwc_window(&ops[j].op) else {
            continue;
        };
        let (Some(&t), Some(&filter)) = (ops[j].inputs.first(), ops[j].inputs.get(1)) else {
            continue;
        };
        let ti = t as usize;
        let once = sg
            .operands
            .get(ti)
            .is_some_and(|o| o.lifetime == OperandLifeTime::TEMPORARY_VARIABLE)
            && readers[ti] == 1
            && writers[ti] == 1
            && !dynamic.get(ti).copied().unwrap_or(true);
        let Some((i, 0)) = producer[ti].filter(|_| once) else {
            continue;
        };
        let KernelOp::Pad(pad) = &ops[i].op else {
            continue;
        };
        let &[x] = &ops[i].inputs[..] else {
            continue;
        };
        // Zeros (+0: a -0 fill would add -0 products) around height and width only.
        let [(0, 0), (top, bottom), (left, right), (0, 0)] = pad.pads[..] else {
            continue;
        };
        if pad.value.to_bits() != 0
            || dynamic.get(x as usize).copied().unwrap_or(true)
            || !matches!(operand_types(sg, shapes, &[x]).as_deref(), Ok([ty]) if ty.dtype == DType::F32)
            || !finite_constant(sg, constants, filter)
        {
            continue;
        }
        let Some(grown) = grow(window, top, bottom, left, right) else {
            continue;
        };
        let mut fused = ops[j].op.clone();
        set_window(&mut fused, grown);
        let mut reading_x = ops[j].clone();
        reading_x.inputs[0] = x;
        if !still_valid(sg, shapes, &reading_x, &fused) {
            continue;
        }
        ops[j].op = fused;
        ops[j].inputs[0] = x;
        folded[i] = true;
    }
    let count = folded.iter().filter(|&&f| f).count();
    drop_folded(ops, &folded);
    count
}

/// The window of an NHWC CONV_2D or DEPTHWISE_CONV_2D.
fn nhwc_window(op: &KernelOp) -> Option<ConvWindow> {
    match op {
        KernelOp::Conv2d(c) if !c.nchw => Some(c.window),
        KernelOp::DepthwiseConv2d(d) if !d.nchw => Some(d.window),
        _ => None,
    }
}

fn set_window(op: &mut KernelOp, window: ConvWindow) {
    match op {
        KernelOp::Conv2d(c) => c.window = window,
        KernelOp::DepthwiseConv2d(d) => d.window = window,
        _ => {}
    }
}

/// `window` with the PAD's rows and columns added to its explicit padding.
fn grow(window: ConvWindow, top: u32, bottom: u32, left: u32, right: u32) -> Option<ConvWindow> {
    let mut w = window;
    w.pad.top = w.pad.top.checked_add(top)?;
    w.pad.bottom = w.pad.bottom.checked_add(bottom)?;
    w.pad.left = w.pad.left.checked_add(left)?;
    w.pad.right = w.pad.right.checked_add(right)?;
    Some(w)
}

/// Whether operand `i` is a constant of the model (given, or folded at preparation, as a
/// sparse model's densified filters are) whose float32 values are all finite. A model
/// input's value, known to one instance only, is not one.
fn finite_constant(sg: &Subgraph, constants: &[Option<Vec<u8>>], i: u32) -> bool {
    let constant = sg.operands.get(i as usize).is_some_and(|o| {
        matches!(
            o.lifetime,
            OperandLifeTime::CONSTANT_COPY
                | OperandLifeTime::CONSTANT_REFERENCE
                | OperandLifeTime::TEMPORARY_VARIABLE
        )
    });
    match constants.get(i as usize) {
        Some(Some(bytes)) if constant && bytes.len() % 4 == 0 => bytes
            .chunks_exact(4)
            .all(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use crate::compile::ModelPlan;
    use crate::hal::{
        DataLocation, Model, Operand, OperandLifeTime, OperandType, Operation, OperationType,
        Subgraph,
    };
    use vnpu_emu::kernels::KernelOp;

    /// x [1,4,4,2] -> PAD (rows 1,2; columns 0,1) -> t [1,7,5,2] -> DEPTHWISE_CONV_2D
    /// (3x3, explicit padding 0, stride 1, RELU) -> y [1,5,3,2]. Operands: 0 x, 1 paddings,
    /// 2 t, 3 filter, 4 bias, 5-12 the scalars, 13 y.
    fn model(filter: [f32; 18], pad_batch: bool) -> Model {
        let mut values = Vec::new();
        let mut at = |bytes: &[u8]| {
            let loc = DataLocation {
                pool_index: 0,
                offset: values.len() as u32,
                length: bytes.len() as u32,
            };
            values.extend_from_slice(bytes);
            loc
        };
        let ints = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>();
        let floats = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>();
        let tensor = |ty, dims: Vec<u32>, lifetime, location| Operand {
            r#type: ty,
            dimensions: dims,
            number_of_consumers: 1,
            lifetime,
            location,
            ..Default::default()
        };
        let f32t = OperandType::TENSOR_FLOAT32;
        let none = DataLocation::default();
        let batch = if pad_batch { 1 } else { 0 };
        let paddings = at(&ints(&[batch, 0, 1, 2, 0, 1, 0, 0]));
        let t_dims = vec![1 + batch as u32, 7, 5, 2];
        let filter_loc = at(&floats(&filter));
        let bias_loc = at(&floats(&[0.5, -0.5]));
        let mut operands = vec![
            tensor(
                f32t,
                vec![1, 4, 4, 2],
                OperandLifeTime::SUBGRAPH_INPUT,
                none,
            ),
            tensor(
                OperandType::TENSOR_INT32,
                vec![4, 2],
                OperandLifeTime::CONSTANT_COPY,
                paddings,
            ),
            tensor(f32t, t_dims, OperandLifeTime::TEMPORARY_VARIABLE, none),
            tensor(
                f32t,
                vec![1, 3, 3, 2],
                OperandLifeTime::CONSTANT_COPY,
                filter_loc,
            ),
            tensor(f32t, vec![2], OperandLifeTime::CONSTANT_COPY, bias_loc),
        ];
        // Padding left, right, top, bottom; strides; multiplier; activation (RELU).
        for v in [0, 0, 0, 0, 1, 1, 1, 1] {
            let loc = at(&ints(&[v]));
            operands.push(tensor(
                OperandType::INT32,
                vec![],
                OperandLifeTime::CONSTANT_COPY,
                loc,
            ));
        }
        let y_batch = 1 + batch as u32;
        operands.push(Operand {
            number_of_consumers: 0,
            ..tensor(
                f32t,
                vec![y_batch, 5, 3, 2],
                OperandLifeTime::SUBGRAPH_OUTPUT,
                none,
            )
        });
        Model {
            main: Subgraph {
                operands,
                operations: vec![
                    Operation {
                        r#type: OperationType::PAD,
                        inputs: vec![0, 1],
                        outputs: vec![2],
                    },
                    Operation {
                        r#type: OperationType::DEPTHWISE_CONV_2D,
                        inputs: (2..13).collect(),
                        outputs: vec![13],
                    },
                ],
                input_indexes: vec![0],
                output_indexes: vec![13],
            },
            operand_values: values,
            ..Default::default()
        }
    }

    fn ops_of(m: &Model) -> Vec<crate::compile::Lowered> {
        crate::validate::validate_model(m).unwrap();
        let plan = ModelPlan::new(m.clone()).unwrap();
        plan.instance(&[vec![1, 4, 4, 2]], &[], &[], None)
            .unwrap()
            .ops
    }

    #[test]
    fn a_zero_pad_folds_into_the_convolution_window() {
        let ops = ops_of(&model([0.25; 18], false));
        assert_eq!(ops.len(), 1);
        assert_eq!(ops[0].inputs[0], 0, "the convolution reads the PAD's input");
        let KernelOp::DepthwiseConv2d(d) = &ops[0].op else {
            panic!("{:?}", ops[0].op)
        };
        let p = d.window.pad;
        assert_eq!((p.top, p.bottom, p.left, p.right), (1, 2, 0, 1));
    }

    #[test]
    fn a_pad_stays_where_folding_could_change_a_value() {
        // A filter with an infinity: a padded tap adds 0 * inf = NaN, a skipped one nothing.
        let mut filter = [0.25; 18];
        filter[4] = f32::INFINITY;
        assert_eq!(ops_of(&model(filter, false)).len(), 2);
        // Padding the batch is no window's.
        assert_eq!(ops_of(&model([0.25; 18], true)).len(), 2);
        // The padded tensor is also a model output.
        let mut m = model([0.25; 18], false);
        m.main.operands[2].lifetime = OperandLifeTime::SUBGRAPH_OUTPUT;
        m.main.operands[2].number_of_consumers = 1;
        m.main.output_indexes.push(2);
        assert_eq!(ops_of(&m).len(), 2);
    }
}
