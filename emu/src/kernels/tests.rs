//! Property tests: every kernel against the naive reference, the parameter codec round trip,
//! and robustness of `decode`, `output_shapes` and `execute` on arbitrary input.

use super::reference as r;
use super::*;
use crate::tensor::{DType, Staged, TensorType, View, ViewMut};
use proptest::prelude::*;

const CASES: u32 = 64;

fn cfg() -> ProptestConfig {
    crate::kernels::proptest_config(CASES)
}

/// Runs `op` on float32 tensors through `output_shapes` and `execute`.
fn run(op: &KernelOp, inputs: &[(Vec<usize>, Vec<f32>)]) -> Result<(Vec<usize>, Vec<f32>)> {
    let ins: Vec<(&[usize], &[f32])> = inputs
        .iter()
        .map(|(s, d)| (s.as_slice(), d.as_slice()))
        .collect();
    Ok(run_f32(op, &ins)?.remove(0))
}

/// Float32 tensor types of these shapes.
fn f32_types(shapes: &[&[usize]]) -> Vec<TensorType> {
    shapes
        .iter()
        .map(|s| TensorType::new(DType::F32, s))
        .collect()
}

/// Output shapes of `op` on float32 inputs of these shapes.
fn shapes_of(op: &KernelOp, shapes: &[&[usize]]) -> Result<Vec<Vec<usize>>> {
    let tys = f32_types(shapes);
    let refs: Vec<&TensorType> = tys.iter().collect();
    op.output_shapes(&refs)
}

fn close(got: &[f32], want: &[f32]) -> std::result::Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan())
            || g == w
            || (g - w).abs() <= 1e-4 * (1.0 + w.abs().max(g.abs()));
        prop_assert!(ok, "element {}: got {}, want {}", i, g, w);
    }
    Ok(())
}

fn arb_act() -> impl Strategy<Value = Activation> {
    prop_oneof![
        Just(Activation::None),
        Just(Activation::Relu),
        Just(Activation::Relu1),
        Just(Activation::Relu6)
    ]
}

fn data(n: usize) -> impl Strategy<Value = Vec<f32>> {
    proptest::collection::vec(-3.0f32..3.0, n)
}

fn tensor(shape: Vec<usize>) -> impl Strategy<Value = (Vec<usize>, Vec<f32>)> {
    let n = shape.iter().product();
    data(n).prop_map(move |d| (shape.clone(), d))
}

fn arb_shape(
    min_rank: usize,
    max_rank: usize,
    max_dim: usize,
) -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(1..=max_dim, min_rank..=max_rank)
}

fn arb_pad(max: u32) -> impl Strategy<Value = Padding> {
    (0..=max, 0..=max, 0..=max, 0..=max).prop_map(|(left, right, top, bottom)| Padding {
        left,
        right,
        top,
        bottom,
    })
}

/// A broadcast pair: the output shape and two shapes that broadcast to it.
fn arb_broadcast() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    (arb_shape(0, 4, 4), any::<u64>(), 0usize..=4, 0usize..=4).prop_map(|(out, bits, da, db)| {
        let mk = |salt: u64, drop: usize| {
            let drop = drop.min(out.len());
            out[drop..]
                .iter()
                .enumerate()
                .map(|(i, &d)| {
                    if (bits >> ((i as u64 + salt) % 64)) & 1 == 1 {
                        1
                    } else {
                        d
                    }
                })
                .collect::<Vec<_>>()
        };
        (mk(0, da), mk(17, db))
    })
}

fn arb_binary_kind() -> impl Strategy<Value = BinaryKind> {
    prop_oneof![
        Just(BinaryKind::Add),
        Just(BinaryKind::Sub),
        Just(BinaryKind::Mul),
        Just(BinaryKind::Div)
    ]
}

fn arb_unary_kind() -> impl Strategy<Value = UnaryKind> {
    prop_oneof![
        Just(UnaryKind::Relu),
        Just(UnaryKind::Relu1),
        Just(UnaryKind::Relu6),
        Just(UnaryKind::Logistic),
        Just(UnaryKind::Tanh),
        Just(UnaryKind::Floor)
    ]
}

fn arb_pool_kind() -> impl Strategy<Value = PoolKind> {
    prop_oneof![
        Just(PoolKind::Average),
        Just(PoolKind::Max),
        Just(PoolKind::L2)
    ]
}

/// Any convolution window with small strides and dilations.
fn arb_window() -> impl Strategy<Value = ConvWindow> {
    let small = 1u32..4;
    (
        arb_pad(3),
        [small.clone(), small.clone(), small.clone(), small],
    )
        .prop_map(
            |(pad, [stride_w, stride_h, dilation_w, dilation_h])| ConvWindow {
                pad,
                stride_w,
                stride_h,
                dilation_w,
                dilation_h,
            },
        )
}

/// Valid ops (as decode accepts them), with small parameters.
fn arb_op() -> impl Strategy<Value = KernelOp> {
    let small = 1u32..4;
    prop_oneof![
        (arb_binary_kind(), arb_act()).prop_map(|(kind, act)| KernelOp::from(Binary { kind, act })),
        arb_act().prop_map(|act| KernelOp::from(FullyConnected { act })),
        (arb_window(), arb_act(), any::<bool>()).prop_map(|(window, act, nchw)| KernelOp::from(
            Conv2d {
                window,
                act,
                nchw,
                epilogue: None
            }
        )),
        (arb_window(), small.clone(), arb_act(), any::<bool>()).prop_map(
            |(window, depth_multiplier, act, nchw)| {
                KernelOp::from(DepthwiseConv2d {
                    window,
                    depth_multiplier,
                    act,
                    nchw,
                    epilogue: None,
                })
            }
        ),
        (
            arb_pool_kind(),
            arb_pad(3),
            (small.clone(), small.clone(), small.clone(), small.clone()),
            arb_act(),
            any::<bool>()
        )
            .prop_map(
                |(kind, pad, (stride_w, stride_h, filter_w, filter_h), act, nchw)| {
                    KernelOp::from(Pool {
                        kind,
                        pad,
                        stride_w,
                        stride_h,
                        filter_w,
                        filter_h,
                        act,
                        nchw,
                    })
                }
            ),
        arb_unary_kind().prop_map(|kind| KernelOp::from(Unary { kind })),
        (0.01f32..10.0, -6i32..6).prop_map(|(beta, axis)| KernelOp::from(Softmax { beta, axis })),
        arb_shape(0, 6, 5).prop_map(|shape| KernelOp::from(Reshape { shape })),
        (0u32..6).prop_map(|axis| KernelOp::from(Concatenation { axis })),
        (-6i32..6).prop_map(|axis| KernelOp::from(L2Normalization { axis })),
        (small.clone(), any::<bool>())
            .prop_map(|(block, nchw)| KernelOp::from(DepthToSpace { block, nchw })),
        (small.clone(), any::<bool>())
            .prop_map(|(block, nchw)| KernelOp::from(SpaceToDepth { block, nchw })),
        (1u32..9, 1u32..9, 0u32..3, any::<bool>()).prop_map(|(out_h, out_w, mode, nchw)| {
            KernelOp::from(ResizeBilinear {
                out_h,
                out_w,
                align_corners: mode == 1,
                half_pixel_centers: mode == 2,
                nchw,
            })
        }),
        (
            proptest::collection::vec((0u32..3, 0u32..3), 1..=6),
            -5.0f32..5.0
        )
            .prop_map(|(pads, value)| KernelOp::from(Pad { pads, value })),
        (0usize..=6)
            .prop_flat_map(|n| Just((0..n as u32).collect::<Vec<_>>()).prop_shuffle())
            .prop_map(|perm| KernelOp::from(Transpose { perm })),
        (
            proptest::collection::btree_set(0u32..6, 0..=6),
            any::<bool>(),
            any::<u64>()
        )
            .prop_map(|(set, keep_dims, seed)| {
                let mut axes: Vec<u32> = set.into_iter().collect();
                let by = (seed as usize) % axes.len().max(1);
                axes.rotate_left(by);
                KernelOp::from(Mean { axes, keep_dims })
            }),
    ]
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn codec_round_trip(op in arb_op()) {
        let words = op.encode_params();
        prop_assert_eq!(KernelOp::decode(op.opcode(), &words), Ok(op.clone()));
    }

    /// Every registered kernel's decode accepts only what its encode reproduces:
    /// `encode(decode(words)) == words` (and unknown opcodes are refused, not a panic).
    #[test]
    fn decode_then_encode_is_identity(
        opcode in prop_oneof![4 => proptest::sample::select(OPCODES), 1 => any::<u32>()],
        words in proptest::collection::vec(prop_oneof![3 => 0u32..3, 2 => 0u32..8, 1 => any::<u32>()], 0..24),
    ) {
        if let Ok(op) = KernelOp::decode(opcode, &words) {
            prop_assert_eq!(op.opcode(), opcode);
            prop_assert_eq!(op.encode_params(), words);
        }
    }

    #[test]
    fn shapes_and_execute_never_panic(
        op in prop_oneof![
            arb_op(),
            (0u32..20, proptest::collection::vec(0u32..6, 0..24))
                .prop_filter_map("invalid", |(o, w)| KernelOp::decode(o, &w).ok()),
        ],
        shapes in proptest::collection::vec(proptest::collection::vec(0usize..5, 0..=7), 0..4),
    ) {
        let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        if let Ok(outs) = shapes_of(&op, &refs) {
            prop_assert_eq!(outs.len(), op.output_count());
            let inputs: Vec<(Vec<usize>, Vec<f32>)> = shapes
                .iter()
                .map(|s| (s.clone(), vec![0.5; s.iter().product()]))
                .collect();
            let (shape, _) = run(&op, &inputs).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&shape, &outs[0]);
        }
    }

    #[test]
    fn binary_matches_reference(
        (sa, sb) in arb_broadcast(),
        kind in arb_binary_kind(),
        act in arb_act(),
        seed in any::<u64>(),
    ) {
        let a: Vec<f32> = (0..sa.iter().product::<usize>()).map(|i| ((i as u64 * 7 + seed) % 11) as f32 - 5.0).collect();
        let b: Vec<f32> = (0..sb.iter().product::<usize>()).map(|i| ((i as u64 * 5 + seed / 3) % 13) as f32 * 0.5 - 3.0).collect();
        let op = KernelOp::from(Binary { kind, act });
        let (shape, got) = run(&op, &[(sa.clone(), a.clone()), (sb.clone(), b.clone())]).unwrap();
        let (ws, want) = r::binary(kind, act, &sa, &a, &sb, &b);
        prop_assert_eq!(shape, ws);
        close(&got, &want)?;
    }

    #[test]
    fn unary_matches_reference(x in arb_shape(0, 4, 4).prop_flat_map(tensor), kind in arb_unary_kind()) {
        let op = KernelOp::from(Unary { kind });
        let (shape, got) = run(&op, std::slice::from_ref(&x)).unwrap();
        prop_assert_eq!(&shape, &x.0);
        close(&got, &r::unary(kind, &x.1))?;
    }

    #[test]
    fn softmax_matches_reference(
        x in arb_shape(1, 4, 4).prop_flat_map(tensor),
        beta in 0.05f32..4.0,
        axis_seed in any::<u8>(),
        negative in any::<bool>(),
    ) {
        let rank = x.0.len();
        let axis = axis_seed as usize % rank;
        let a = if negative { axis as i32 - rank as i32 } else { axis as i32 };
        let (_, got) = run(&KernelOp::from(Softmax { beta, axis: a }), std::slice::from_ref(&x)).unwrap();
        close(&got, &r::softmax(&x.0, &x.1, beta, axis))?;
    }

    #[test]
    fn l2_normalization_matches_reference(
        x in arb_shape(1, 4, 4).prop_flat_map(tensor),
        axis_seed in any::<u8>(),
        negative in any::<bool>(),
    ) {
        let rank = x.0.len();
        let axis = axis_seed as usize % rank;
        let a = if negative { axis as i32 - rank as i32 } else { axis as i32 };
        let (_, got) = run(&KernelOp::from(L2Normalization { axis: a }), std::slice::from_ref(&x)).unwrap();
        close(&got, &r::l2_normalization(&x.0, &x.1, axis))?;
    }

    #[test]
    fn fully_connected_matches_reference(
        (batch, extra, k, n) in (0usize..4, 1usize..3, 1usize..7, 1usize..6),
        act in arb_act(),
        seed in any::<u32>(),
    ) {
        let xs = vec![batch, extra, k];
        let nx = batch * extra * k;
        let f = |i: usize, m: u32| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 7) % m) as f32 * 0.25 - 1.0;
        let x: Vec<f32> = (0..nx).map(|i| f(i, 13)).collect();
        let w: Vec<f32> = (0..n * k).map(|i| f(i + 100, 11)).collect();
        let bias: Vec<f32> = (0..n).map(|i| f(i + 1000, 7)).collect();
        let op = KernelOp::from(FullyConnected { act });
        let (shape, got) = run(&op, &[(xs.clone(), x.clone()), (vec![n, k], w.clone()), (vec![n], bias.clone())]).unwrap();
        let (ws, want) = r::fully_connected(&xs, &x, &[n, k], &w, &bias, act);
        prop_assert_eq!(shape, ws);
        close(&got, &want)?;
    }

    #[test]
    fn conv2d_matches_reference(
        (n, h, w, c, o, kh, kw) in (0usize..3, 1usize..8, 1usize..8, 1usize..5, 1usize..5, 1usize..4, 1usize..4),
        pad in prop_oneof![Just(Padding::default()), arb_pad(2)],
        (sw, sh, dw, dh) in prop_oneof![Just((1u32, 1u32, 1u32, 1u32)), (1u32..4, 1u32..4, 1u32..3, 1u32..3)],
        act in arb_act(),
        nchw in any::<bool>(),
        seed in any::<u32>(),
    ) {
        let xs = if nchw { vec![n, c, h, w] } else { vec![n, h, w, c] };
        let fs = vec![o, kh, kw, c];
        let g = |i: usize, m: u32| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 9) % m) as f32 * 0.25 - 1.5;
        let x: Vec<f32> = (0..n * h * w * c).map(|i| g(i, 13)).collect();
        let f: Vec<f32> = (0..o * kh * kw * c).map(|i| g(i + 7777, 11)).collect();
        let bias: Vec<f32> = (0..o).map(|i| g(i + 99, 5)).collect();
        let op = KernelOp::from(Conv2d { window: ConvWindow { pad, stride_w: sw, stride_h: sh, dilation_w: dw, dilation_h: dh }, act, nchw, epilogue: None });
        let res = run(&op, &[(xs.clone(), x.clone()), (fs.clone(), f.clone()), (vec![o], bias.clone())]);
        let fits = h + (pad.top + pad.bottom) as usize > (kh - 1) * dh as usize
            && w + (pad.left + pad.right) as usize > (kw - 1) * dw as usize;
        prop_assert_eq!(res.is_ok(), fits, "{:?}", res);
        if let Ok((shape, got)) = res {
            let (ws, want) = r::conv2d(&xs, &x, &fs, &f, &bias, pad, (sw, sh), (dw, dh), act, nchw);
            prop_assert_eq!(shape, ws);
            close(&got, &want)?;
        }
    }

    #[test]
    fn depthwise_matches_reference(
        // Channels past one and two 16-lane blocks and rows of 16 outputs or more too (the
        // AVX-512 kernel works in blocks of 16 channels, on rows that wide).
        (n, h, w, c, m, kh, kw) in (0usize..3, 1usize..8, prop_oneof![1usize..8, 16usize..24], prop_oneof![1usize..5, 14usize..36], 1usize..4, 1usize..4, 1usize..4),
        pad in arb_pad(2),
        (sw, sh, dw, dh) in (1u32..4, 1u32..4, 1u32..3, 1u32..3),
        act in arb_act(),
        nchw in any::<bool>(),
        seed in any::<u32>(),
    ) {
        let xs = if nchw { vec![n, c, h, w] } else { vec![n, h, w, c] };
        let fs = vec![1, kh, kw, c * m];
        let g = |i: usize, md: u32| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 9) % md) as f32 * 0.25 - 1.5;
        let x: Vec<f32> = (0..n * h * w * c).map(|i| g(i, 13)).collect();
        let f: Vec<f32> = (0..kh * kw * c * m).map(|i| g(i + 555, 11)).collect();
        let bias: Vec<f32> = (0..c * m).map(|i| g(i + 99, 5)).collect();
        let op = KernelOp::from(DepthwiseConv2d { window: ConvWindow { pad, stride_w: sw, stride_h: sh, dilation_w: dw, dilation_h: dh },
            depth_multiplier: m as u32, act, nchw, epilogue: None,
        });
        let res = run(&op, &[(xs.clone(), x.clone()), (fs.clone(), f.clone()), (vec![c * m], bias.clone())]);
        let fits = h + (pad.top + pad.bottom) as usize > (kh - 1) * dh as usize
            && w + (pad.left + pad.right) as usize > (kw - 1) * dw as usize;
        prop_assert_eq!(res.is_ok(), fits, "{:?}", res);
        if let Ok((shape, got)) = res {
            let (ws, want) = r::depthwise(&xs, &x, &fs, &f, &bias, pad, (sw, sh), (dw, dh), m, act, nchw);
            prop_assert_eq!(shape, ws);
            close(&got, &want)?;
        }
    }

    #[test]
    fn pool_matches_reference(
        // Channels past one and two 16-lane blocks too (max pooling works in blocks of 16).
        (n, h, w, c) in (0usize..3, 1usize..7, 1usize..7, prop_oneof![1usize..4, 14usize..36]),
        kind in arb_pool_kind(),
        pad in arb_pad(2),
        (sw, sh, fw, fh) in (1u32..4, 1u32..4, 1u32..4, 1u32..4),
        act in arb_act(),
        nchw in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let xs = if nchw { vec![n, c, h, w] } else { vec![n, h, w, c] };
        let x: Vec<f32> = (0..n * h * w * c).map(|i| ((i as u64 * 2654435761 + seed) % 17) as f32 * 0.5 - 4.0).collect();
        let op = KernelOp::from(Pool { kind, pad, stride_w: sw, stride_h: sh, filter_w: fw, filter_h: fh, act, nchw });
        let res = run(&op, &[(xs.clone(), x.clone())]);
        let fits = h + (pad.top + pad.bottom) as usize >= fh as usize && w + (pad.left + pad.right) as usize >= fw as usize;
        prop_assert_eq!(res.is_ok(), fits, "{:?}", res);
        if let Ok((shape, got)) = res {
            let (ws, want) = r::pool(kind, &xs, &x, pad, (sw, sh), (fw, fh), act, nchw);
            prop_assert_eq!(shape, ws);
            close(&got, &want)?;
        }
    }

    #[test]
    fn mean_matches_reference(
        x in arb_shape(1, 4, 4).prop_flat_map(tensor),
        mask in any::<u8>(),
        keep_dims in any::<bool>(),
    ) {
        let axes: Vec<u32> = (0..x.0.len() as u32).rev().filter(|a| mask >> a & 1 == 1).collect();
        let (shape, got) = run(&KernelOp::from(Mean { axes: axes.clone(), keep_dims }), std::slice::from_ref(&x)).unwrap();
        let (ws, want) = r::mean(&x.0, &x.1, &axes, keep_dims);
        prop_assert_eq!(shape, ws);
        close(&got, &want)?;
    }

    #[test]
    fn concatenation_matches_reference(
        base in arb_shape(1, 4, 3),
        axis_seed in any::<u8>(),
        sizes in proptest::collection::vec(0usize..4, 1..5),
        seed in any::<u32>(),
    ) {
        let axis = axis_seed as usize % base.len();
        let shapes: Vec<Vec<usize>> = sizes.iter().map(|&s| { let mut v = base.clone(); v[axis] = s; v }).collect();
        let datas: Vec<Vec<f32>> = shapes.iter().enumerate().map(|(t, s)| {
            (0..s.iter().product::<usize>()).map(|i| (i as u32 * 31 + t as u32 * 1000 + seed % 100) as f32).collect()
        }).collect();
        let inputs: Vec<(Vec<usize>, Vec<f32>)> = shapes.iter().cloned().zip(datas.iter().cloned()).collect();
        let (shape, got) = run(&KernelOp::from(Concatenation { axis: axis as u32 }), &inputs).unwrap();
        let (ws, want) = r::concat(&shapes, &datas, axis);
        prop_assert_eq!(shape, ws);
        close(&got, &want)?;
    }

    #[test]
    fn depth_space_match_reference(
        (n, h, w, c, b) in (0usize..3, 1usize..4, 1usize..4, 1usize..4, 1usize..4),
        nchw in any::<bool>(),
    ) {
        // DEPTH_TO_SPACE of [n,h,w,c*b*b], SPACE_TO_DEPTH of [n,h*b,w*b,c].
        let d2s_in = if nchw { vec![n, c * b * b, h, w] } else { vec![n, h, w, c * b * b] };
        let s2d_in = if nchw { vec![n, c, h * b, w * b] } else { vec![n, h * b, w * b, c] };
        let x: Vec<f32> = (0..n * h * w * c * b * b).map(|i| i as f32).collect();
        let (shape, got) = run(&KernelOp::from(DepthToSpace { block: b as u32, nchw }), &[(d2s_in.clone(), x.clone())]).unwrap();
        let (ws, want) = r::depth_to_space(&d2s_in, &x, b, nchw);
        prop_assert_eq!(&shape, &ws);
        close(&got, &want)?;
        let (shape2, got2) = run(&KernelOp::from(SpaceToDepth { block: b as u32, nchw }), &[(s2d_in.clone(), x.clone())]).unwrap();
        let (ws2, want2) = r::space_to_depth(&s2d_in, &x, b, nchw);
        prop_assert_eq!(&shape2, &ws2);
        close(&got2, &want2)?;
        // SPACE_TO_DEPTH undoes DEPTH_TO_SPACE.
        let (_, back) = run(&KernelOp::from(SpaceToDepth { block: b as u32, nchw }), &[(shape, got)]).unwrap();
        prop_assert_eq!(back, x);
    }

    #[test]
    fn resize_bilinear_matches_reference(
        x in (0usize..3, 1usize..6, 1usize..6, 1usize..4, any::<bool>())
            .prop_flat_map(|(n, h, w, c, nchw)| (tensor(if nchw { vec![n, c, h, w] } else { vec![n, h, w, c] }), Just(nchw))),
        (oh, ow) in (1u32..9, 1u32..9),
        mode in 0u32..3,
    ) {
        let ((xs, xd), nchw) = x;
        let (align, half) = (mode == 1, mode == 2);
        let op = KernelOp::from(ResizeBilinear { out_h: oh, out_w: ow, align_corners: align, half_pixel_centers: half, nchw });
        let (shape, got) = run(&op, &[(xs.clone(), xd.clone())]).unwrap();
        let (ws, want) = r::resize_bilinear(&xs, &xd, oh as usize, ow as usize, align, half, nchw);
        prop_assert_eq!(shape, ws);
        close(&got, &want)?;
    }

    #[test]
    fn pad_matches_reference(
        x in arb_shape(1, 4, 3).prop_flat_map(tensor),
        pads in proptest::collection::vec((0u32..3, 0u32..3), 4),
        value in -2.0f32..2.0,
    ) {
        let pads = pads[..x.0.len()].to_vec();
        let (shape, got) = run(&KernelOp::from(Pad { pads: pads.clone(), value }), std::slice::from_ref(&x)).unwrap();
        let (ws, want) = r::pad(&x.0, &x.1, &pads, value);
        prop_assert_eq!(shape, ws);
        close(&got, &want)?;
    }

    #[test]
    fn transpose_matches_reference(
        (x, perm) in arb_shape(0, 5, 4).prop_flat_map(|s| {
            let n = s.len() as u32;
            (tensor(s), Just((0..n).collect::<Vec<u32>>()).prop_shuffle())
        }),
    ) {
        let (shape, got) = run(&KernelOp::from(Transpose { perm: perm.clone() }), std::slice::from_ref(&x)).unwrap();
        let (ws, want) = r::transpose(&x.0, &x.1, &perm);
        prop_assert_eq!(shape, ws);
        close(&got, &want)?;
    }

    #[test]
    fn reshape_copies(x in arb_shape(0, 4, 4).prop_flat_map(tensor)) {
        let mut target = x.0.clone();
        target.reverse();
        target.push(1);
        let (shape, got) = run(&KernelOp::from(Reshape { shape: target.clone() }), std::slice::from_ref(&x)).unwrap();
        prop_assert_eq!(shape, target);
        prop_assert_eq!(got, x.1);
    }
}

#[test]
fn execute_rejects_bad_buffers() {
    let op = KernelOp::from(Unary {
        kind: UnaryKind::Relu,
    });
    let x = [1.0f32, -1.0];
    let xb: &[u8] = bytemuck::cast_slice(&x);
    let mut o = Staged::zeroed(8);
    let t2 = TensorType::new(DType::F32, &[2]);
    let t3 = TensorType::new(DType::F32, &[3]);
    let t12 = TensorType::new(DType::F32, &[1, 2]);
    let ti = TensorType::new(DType::I32, &[2]);
    let view = |ty| View { ty, bytes: xb };
    // Wrong input data length.
    let e = execute(
        &op,
        &[view(&t3)],
        &mut [ViewMut {
            ty: &t3,
            bytes: o.bytes_mut(),
        }],
    );
    assert!(matches!(e, Err(KernelError::DataLength { .. })), "{e:?}");
    // Wrong output shape.
    let e = execute(
        &op,
        &[view(&t2)],
        &mut [ViewMut {
            ty: &t12,
            bytes: o.bytes_mut(),
        }],
    );
    assert!(matches!(e, Err(KernelError::OutputShape { .. })), "{e:?}");
    // Wrong element type.
    let e = execute(
        &op,
        &[view(&ti)],
        &mut [ViewMut {
            ty: &ti,
            bytes: o.bytes_mut(),
        }],
    );
    assert!(
        matches!(e, Err(KernelError::UnsupportedDType { .. })),
        "{e:?}"
    );
    // Wrong counts.
    let e = execute(&op, &[], &mut []);
    assert!(matches!(e, Err(KernelError::InputCount { .. })), "{e:?}");
    let e = execute(&op, &[view(&t2)], &mut []);
    assert!(matches!(e, Err(KernelError::OutputCount { .. })), "{e:?}");
    // And the happy path.
    execute(
        &op,
        &[view(&t2)],
        &mut [ViewMut {
            ty: &t2,
            bytes: o.bytes_mut(),
        }],
    )
    .unwrap();
    let got: &[f32] = bytemuck::cast_slice(o.bytes());
    assert_eq!(got, [1.0, 0.0]);
}

#[test]
fn hostile_sizes_are_errors() {
    let big = [1usize << 20, 1 << 20];
    let op = KernelOp::from(Unary {
        kind: UnaryKind::Tanh,
    });
    assert_eq!(shapes_of(&op, &[&big]), Err(KernelError::TooLarge));
    let overflow = [usize::MAX, 2];
    assert_eq!(shapes_of(&op, &[&overflow]), Err(KernelError::TooLarge));
    let op = KernelOp::from(Pad {
        pads: vec![(u32::MAX, u32::MAX)],
        value: 0.0,
    });
    assert!(shapes_of(&op, &[&[4]]).is_err());
    let conv = KernelOp::from(Conv2d {
        window: ConvWindow {
            pad: Padding {
                left: u32::MAX,
                right: u32::MAX,
                top: u32::MAX,
                bottom: u32::MAX,
            },
            stride_w: 1,
            stride_h: 1,
            dilation_w: u32::MAX,
            dilation_h: u32::MAX,
        },
        act: Activation::None,
        nchw: false,
        epilogue: None,
    });
    // Huge padding and dilation are valid: the centre tap (offset dilation == padding) lands
    // on the input, the others in the padding.
    let (s, d) = run(
        &conv,
        &[
            (vec![1, 4, 4, 1], vec![1.0; 16]),
            (vec![1, 3, 3, 1], vec![1.0; 9]),
            (vec![1], vec![0.5]),
        ],
    )
    .unwrap();
    assert_eq!(s, [1, 4, 4, 1]);
    assert_eq!(d, [1.5; 16]);
    let tys = f32_types(&[&[1, 4, 4, 1], &[1, 3, 3, 1], &[1]]);
    let refs: Vec<&TensorType> = tys.iter().collect();
    assert_eq!(conv.cost(&refs).macs, 16 * 9);
    let too_deep = [1usize; crate::kernels::MAX_RANK + 1];
    assert!(matches!(
        shapes_of(&op, &[&too_deep]),
        Err(KernelError::RankTooLarge { .. })
    ));
    assert!(matches!(
        KernelOp::decode(7, &[f32::NAN.to_bits(), 0]),
        Err(KernelError::InvalidParams { .. })
    ));
    assert!(matches!(
        KernelOp::decode(999, &[]),
        Err(KernelError::UnknownOpcode(999))
    ));
}

#[test]
fn nnapi_examples() {
    // AVERAGE_POOL_2D from the NNAPI tests: 2x2 filter over [[1,2],[3,4]] padded by one on
    // the right/bottom, stride 1: averages of in-bounds elements only.
    let op = KernelOp::from(Pool {
        kind: PoolKind::Average,
        pad: Padding {
            left: 0,
            right: 1,
            top: 0,
            bottom: 1,
        },
        stride_w: 1,
        stride_h: 1,
        filter_w: 2,
        filter_h: 2,
        act: Activation::None,
        nchw: false,
    });
    let (s, d) = run(&op, &[(vec![1, 2, 2, 1], vec![1.0, 2.0, 3.0, 4.0])]).unwrap();
    assert_eq!(s, [1, 2, 2, 1]);
    assert_eq!(d, [2.5, 3.0, 3.5, 4.0]);
    // RESIZE_BILINEAR 2x2 -> 3x3 (NNAPI resize_bilinear test): [1,1,2,2] -> ...
    let op = KernelOp::from(ResizeBilinear {
        out_h: 3,
        out_w: 3,
        align_corners: false,
        half_pixel_centers: false,
        nchw: false,
    });
    let (_, d) = run(&op, &[(vec![1, 2, 2, 1], vec![1.0, 1.0, 2.0, 2.0])]).unwrap();
    let want = [
        1.0,
        1.0,
        1.0,
        1.666_666_7,
        1.666_666_7,
        1.666_666_7,
        2.0,
        2.0,
        2.0,
    ];
    for (a, b) in d.iter().zip(want) {
        assert!((a - b).abs() < 1e-5, "{d:?}");
    }
    // L2_NORMALIZATION of a zero vector is zero (epsilon), not NaN.
    let (_, d) = run(
        &KernelOp::from(L2Normalization { axis: -1 }),
        &[(vec![1, 3], vec![0.0; 3])],
    )
    .unwrap();
    assert_eq!(d, [0.0; 3]);
    // MEAN over every axis without keep_dims gives [1].
    let (s, d) = run(
        &KernelOp::from(Mean {
            axes: vec![0, 1],
            keep_dims: false,
        }),
        &[(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0])],
    )
    .unwrap();
    assert_eq!((s, d), (vec![1], vec![2.5]));
}

proptest! {
    /// The select form of `clamp_nan` is the chained clamp for every float (NaN, signed
    /// zeros and infinities included) and every ordered range.
    #[test]
    fn clamp_nan_is_the_chained_clamp(
        bits in any::<u32>(),
        special in prop_oneof![Just(None), Just(Some(f32::NAN)), Just(Some(-0.0f32)), Just(Some(f32::INFINITY)), Just(Some(f32::NEG_INFINITY)), Just(Some(6.0f32))],
        range in prop_oneof![Just((0.0f32, f32::INFINITY)), Just((-1.0f32, 1.0)), Just((0.0f32, 6.0)), (-10.0f32..10.0, 0.0f32..10.0).prop_map(|(lo, d)| (lo, lo + d))],
    ) {
        let x = special.unwrap_or(f32::from_bits(bits));
        let (lo, hi) = range;
        let chained = if x < lo { lo } else if x > hi { hi } else { x };
        prop_assert_eq!(clamp_nan(x, lo, hi).to_bits(), chained.to_bits());
    }
}
