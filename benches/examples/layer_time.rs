//! Times single face_landmark layers on the device's kernels (min and median of many runs),
//! in float32 and (names starting `int8`) in int8 with per-channel filters; an argument
//! keeps only the lines whose name contains it. Filters are packed as preparation packs
//! them (float and int8 CONV_2D). The first line names the instruction set
//! the kernels ran with (`VNPU_ISA=avx2|avx512|scalar` narrows it).
use std::time::Instant;
use vnpu_benches::{pseudo, staged};
use vnpu_emu::kernels::*;
use vnpu_emu::program::{pack_int_panels, pack_panels};
use vnpu_emu::tensor::{DType, Layout, PerChannel, Quant, Staged, TensorType, View, ViewMut};

fn time(name: &str, op: KernelOp, ins: Vec<(Vec<usize>, Vec<f32>)>, pack: bool) {
    // `layer_time [FILTER]`: only the layers whose name contains FILTER.
    if std::env::args().nth(1).is_some_and(|f| !name.contains(&f)) {
        return;
    }
    let mut ins: Vec<(TensorType, Staged)> = ins
        .into_iter()
        .map(|(s, d)| {
            (
                TensorType::new(DType::F32, &s),
                staged(bytemuck::cast_slice(&d)),
            )
        })
        .collect();
    if pack {
        let p = pack_panels(&ins[1].0.shape, ins[1].1.bytes()).unwrap();
        ins[1] = (
            TensorType {
                layout: Layout::GemmPanels,
                ..ins[1].0.clone()
            },
            staged(&p),
        );
    }
    run_timed(name, &op, &ins, DType::F32, Quant::new(0.0, 0));
}

/// int8 layer `name`: activations int8 (scale 1/64, zero point -3), the filter (input 1)
/// int8 symmetric per output channel along `filter_axis`, the bias (input 2) int32 at
/// input scale x filter scale; other inputs as the first.
fn time_q(name: &str, op: KernelOp, ins: Vec<(Vec<usize>, Vec<f32>)>, filter_axis: Option<u32>) {
    if std::env::args().nth(1).is_some_and(|f| !name.contains(&f)) {
        return;
    }
    let act = Quant::new(1.0 / 64.0, -3);
    let q8 = |v: &[f32]| -> Vec<u8> {
        v.iter()
            .map(|&x| ((x * 200.0).round().clamp(-128.0, 127.0) as i8) as u8)
            .collect()
    };
    let mut filter_scales = vec![];
    let ins: Vec<(TensorType, Staged)> = ins
        .into_iter()
        .enumerate()
        .map(|(i, (shape, d))| match (i, filter_axis) {
            (1, Some(axis)) => {
                let n = shape[axis as usize];
                filter_scales = (0..n).map(|c| 0.002 + 0.0001 * c as f32).collect();
                let ty = TensorType {
                    quant: Quant {
                        scale: 0.0,
                        zero_point: 0,
                        per_channel: Some(PerChannel {
                            axis,
                            scales: filter_scales.clone(),
                        }),
                    },
                    ..TensorType::new(DType::I8, &shape)
                };
                (ty, staged(&q8(&d)))
            }
            (3, Some(_)) => {
                // A fused REQUANTIZE_PRELU's slope: float32, one per output channel.
                let slope: Vec<f32> = d.iter().map(|&x| 0.05 + x.abs() * 0.2).collect();
                (
                    TensorType::new(DType::F32, &shape),
                    staged(bytemuck::cast_slice(&slope)),
                )
            }
            (2, Some(_)) => {
                let mut ty = TensorType::new(DType::I32, &shape);
                ty.quant = Quant::new(act.scale * filter_scales[0], 0);
                let b: Vec<i32> = d.iter().map(|&x| (x * 1000.0) as i32).collect();
                (ty, staged(bytemuck::cast_slice(&b)))
            }
            _ => {
                // ADD's operands on scales of their own, as in real models (scales in
                // simple ratios put many sums on a rounding step).
                let scale = match filter_axis {
                    None => act.scale * (1.13 + 0.37 * i as f32),
                    Some(_) => act.scale,
                };
                let ty = TensorType {
                    quant: Quant::new(scale, act.zero_point),
                    ..TensorType::new(DType::I8, &shape)
                };
                (ty, staged(&q8(&d)))
            }
        })
        .collect();
    // A quantised CONV_2D's filter packed as preparation packs it (`Layout::IntPanels`),
    // so the timing is the kernel's, not a packing per call.
    let mut ins = ins;
    if matches!(op, KernelOp::Conv2d(_)) {
        if let Some(p) = pack_int_panels(&ins[1].0.shape, ins[1].1.bytes()) {
            ins[1] = (
                TensorType {
                    layout: Layout::IntPanels,
                    ..ins[1].0.clone()
                },
                staged(&p),
            );
        }
    }
    run_timed(name, &op, &ins, DType::I8, Quant::new(1.0 / 32.0, 2));
}

/// Runs `op` on `ins` RUNS times (default 400) and prints the min and median.
fn run_timed(name: &str, op: &KernelOp, ins: &[(TensorType, Staged)], dtype: DType, q: Quant) {
    let tys: Vec<&TensorType> = ins.iter().map(|(t, _)| t).collect();
    let mut out = TensorType::new(dtype, &[]);
    out.quant = q;
    out.shape = op.output_shapes(&tys).unwrap().remove(0);
    let mut ob = Staged::zeroed(out.numel() * dtype.size() as usize);
    let mut ts = vec![];
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    for _ in 0..runs {
        let views: Vec<View<'_>> = ins
            .iter()
            .map(|(ty, b)| View {
                ty,
                bytes: b.bytes(),
            })
            .collect();
        let t = Instant::now();
        execute(
            op,
            &views,
            &mut [ViewMut {
                ty: &out,
                bytes: ob.bytes_mut(),
            }],
        )
        .unwrap();
        ts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{name:28} min {:8.1} us  median {:8.1} us",
        ts[0],
        ts[ts.len() / 2]
    );
}

/// An int8 convolution: name, padding, stride, input shape, filter shape.
type QLayer<'a> = (&'a str, Padding, u32, [usize; 4], [usize; 4]);

fn main() {
    println!("isa {}", vnpu_emu::kernels::isa::isa().name());
    let same = |t, b, l, r| Padding {
        top: t,
        bottom: b,
        left: l,
        right: r,
    };
    let conv = |pad, s| {
        KernelOp::from(Conv2d {
            window: ConvWindow::strided(pad, (s, s)),
            act: Activation::None,
            nchw: false,
            epilogue: None,
        })
    };
    let dw = |pad, s| {
        KernelOp::from(DepthwiseConv2d {
            window: ConvWindow::strided(pad, (s, s)),
            depth_multiplier: 1,
            act: Activation::None,
            nchw: false,
            epilogue: None,
        })
    };
    time(
        "conv0 192x192x3->16 3x3s2",
        conv(same(0, 1, 0, 1), 2),
        vec![
            (vec![1, 192, 192, 3], pseudo(192 * 192 * 3, 1)),
            (vec![16, 3, 3, 3], pseudo(432, 2)),
            (vec![16], pseudo(16, 3)),
        ],
        true,
    );
    time(
        "conv0 192x192x3->32 3x3s2",
        conv(same(0, 1, 0, 1), 2),
        vec![
            (vec![1, 192, 192, 3], pseudo(192 * 192 * 3, 1)),
            (vec![32, 3, 3, 3], pseudo(864, 2)),
            (vec![32], pseudo(32, 3)),
        ],
        true,
    );
    time(
        "conv 96x96x8->16 3x3s1",
        conv(same(1, 1, 1, 1), 1),
        vec![
            (vec![1, 96, 96, 8], pseudo(96 * 96 * 8, 1)),
            (vec![16, 3, 3, 8], pseudo(16 * 72, 2)),
            (vec![16], pseudo(16, 3)),
        ],
        true,
    );
    time(
        "conv 48x48x16->32 3x3s1",
        conv(same(1, 1, 1, 1), 1),
        vec![
            (vec![1, 48, 48, 16], pseudo(48 * 48 * 16, 1)),
            (vec![32, 3, 3, 16], pseudo(32 * 144, 2)),
            (vec![32], pseudo(32, 3)),
        ],
        true,
    );
    time(
        "pw 32x32x32->64",
        conv(Padding::default(), 1),
        vec![
            (vec![1, 32, 32, 32], pseudo(32 * 32 * 32, 1)),
            (vec![64, 1, 1, 32], pseudo(64 * 32, 2)),
            (vec![64], pseudo(64, 3)),
        ],
        true,
    );
    time(
        "pw 32x32x64->32",
        conv(Padding::default(), 1),
        vec![
            (vec![1, 32, 32, 64], pseudo(32 * 32 * 64, 1)),
            (vec![32, 1, 1, 64], pseudo(32 * 64, 2)),
            (vec![32], pseudo(32, 3)),
        ],
        true,
    );
    time(
        "pw 16x16x64->128",
        conv(Padding::default(), 1),
        vec![
            (vec![1, 16, 16, 64], pseudo(16 * 16 * 64, 1)),
            (vec![128, 1, 1, 64], pseudo(128 * 64, 2)),
            (vec![128], pseudo(128, 3)),
        ],
        true,
    );
    time(
        "pw 16x16x128->64",
        conv(Padding::default(), 1),
        vec![
            (vec![1, 16, 16, 128], pseudo(16 * 16 * 128, 1)),
            (vec![64, 1, 1, 128], pseudo(64 * 128, 2)),
            (vec![64], pseudo(64, 3)),
        ],
        true,
    );
    time(
        "pw 96x96x16->16",
        conv(Padding::default(), 1),
        vec![
            (vec![1, 96, 96, 16], pseudo(96 * 96 * 16, 1)),
            (vec![16, 1, 1, 16], pseudo(256, 2)),
            (vec![16], pseudo(16, 3)),
        ],
        true,
    );
    time(
        "pw 48x48x32->32",
        conv(Padding::default(), 1),
        vec![
            (vec![1, 48, 48, 32], pseudo(48 * 48 * 32, 1)),
            (vec![32, 1, 1, 32], pseudo(1024, 2)),
            (vec![32], pseudo(32, 3)),
        ],
        true,
    );
    time(
        "pw 24x24x64->64",
        conv(Padding::default(), 1),
        vec![
            (vec![1, 24, 24, 64], pseudo(24 * 24 * 64, 1)),
            (vec![64, 1, 1, 64], pseudo(4096, 2)),
            (vec![64], pseudo(64, 3)),
        ],
        true,
    );
    // face_detection_full_range's shallow 1x1 layers.
    time(
        "pw 96x96x8->32",
        conv(Padding::default(), 1),
        vec![
            (vec![1, 96, 96, 8], pseudo(96 * 96 * 8, 1)),
            (vec![32, 1, 1, 8], pseudo(256, 2)),
            (vec![32], pseudo(32, 3)),
        ],
        true,
    );
    time(
        "pw 96x96x32->8",
        conv(Padding::default(), 1),
        vec![
            (vec![1, 96, 96, 32], pseudo(96 * 96 * 32, 1)),
            (vec![8, 1, 1, 32], pseudo(256, 2)),
            (vec![8], pseudo(8, 3)),
        ],
        true,
    );
    time(
        "dw 96x96x16 3x3s1",
        dw(same(1, 1, 1, 1), 1),
        vec![
            (vec![1, 96, 96, 16], pseudo(96 * 96 * 16, 1)),
            (vec![1, 3, 3, 16], pseudo(144, 2)),
            (vec![16], pseudo(16, 3)),
        ],
        false,
    );
    time(
        "dw 48x48x32 3x3s1",
        dw(same(1, 1, 1, 1), 1),
        vec![
            (vec![1, 48, 48, 32], pseudo(48 * 48 * 32, 1)),
            (vec![1, 3, 3, 32], pseudo(288, 2)),
            (vec![32], pseudo(32, 3)),
        ],
        false,
    );
    time(
        "prelu 96x96x16",
        KernelOp::from(MinMax {
            kind: MinMaxKind::Prelu,
        }),
        vec![
            (vec![1, 96, 96, 16], pseudo(96 * 96 * 16, 1)),
            (vec![1, 1, 16], pseudo(16, 2)),
        ],
        false,
    );
    time(
        "add 96x96x16",
        KernelOp::from(Binary {
            kind: BinaryKind::Add,
            act: Activation::None,
        }),
        vec![
            (vec![1, 96, 96, 16], pseudo(96 * 96 * 16, 1)),
            (vec![1, 96, 96, 16], pseudo(96 * 96 * 16, 2)),
        ],
        false,
    );
    time(
        "maxpool 96x96x16 2x2s2",
        KernelOp::from(Pool {
            kind: PoolKind::Max,
            pad: Padding::default(),
            stride_w: 2,
            stride_h: 2,
            filter_w: 2,
            filter_h: 2,
            act: Activation::None,
            nchw: false,
        }),
        vec![(vec![1, 96, 96, 16], pseudo(96 * 96 * 16, 1))],
        false,
    );
    let q_layers: [QLayer<'_>; 7] = [
        (
            "int8 conv0 64x64x3->32 3x3s2",
            same(0, 1, 0, 1),
            2,
            [1, 64, 64, 3],
            [32, 3, 3, 3],
        ),
        (
            "int8 conv0 64x64x3->64 3x3s2",
            same(0, 1, 0, 1),
            2,
            [1, 64, 64, 3],
            [64, 3, 3, 3],
        ),
        (
            "int8 pw 32x32x64->32",
            Padding::default(),
            1,
            [1, 32, 32, 64],
            [32, 1, 1, 64],
        ),
        (
            "int8 conv 32x32x32->32 3x3s1",
            same(1, 1, 1, 1),
            1,
            [1, 32, 32, 32],
            [32, 3, 3, 32],
        ),
        (
            "int8 pw 32x32x32->64",
            Padding::default(),
            1,
            [1, 32, 32, 32],
            [64, 1, 1, 32],
        ),
        (
            "int8 pw 16x16x128->128",
            Padding::default(),
            1,
            [1, 16, 16, 128],
            [128, 1, 1, 128],
        ),
        (
            "int8 pw 32x32x24->24",
            Padding::default(),
            1,
            [1, 32, 32, 24],
            [24, 1, 1, 24],
        ),
    ];
    for (name, pad, stride, x, f) in q_layers {
        let n = |s: &[usize]| s.iter().product::<usize>();
        time_q(
            name,
            conv(pad, stride),
            vec![
                (x.to_vec(), pseudo(n(&x), 1)),
                (f.to_vec(), pseudo(n(&f), 2)),
                (vec![f[0]], pseudo(f[0], 3)),
            ],
            Some(0),
        );
    }
    // iris_landmark's 64->32 pointwise layer with its fused REQUANTIZE_PRELU.
    time_q(
        "int8 pw 32x32x64->32 +prelu",
        KernelOp::from(Conv2d {
            window: ConvWindow::strided(Padding::default(), (1, 1)),
            act: Activation::None,
            nchw: false,
            epilogue: Some(ConvEpilogue {
                prelu: true,
                act: Activation::None,
                scale: 1.0 / 40.0,
                zero_point: 1,
            }),
        }),
        vec![
            (vec![1, 32, 32, 64], pseudo(32 * 32 * 64, 1)),
            (vec![32, 1, 1, 64], pseudo(32 * 64, 2)),
            (vec![32], pseudo(32, 3)),
            (vec![32], pseudo(32, 4)),
        ],
        Some(0),
    );
    // int8 depthwise layers of the shipped int8 models' shapes (5x5: face_detection).
    let q_dw: [(&str, Padding, u32, [usize; 4], usize); 6] = [
        (
            "int8 dw 96x96x16 3x3s1",
            same(1, 1, 1, 1),
            1,
            [1, 96, 96, 16],
            3,
        ),
        (
            "int8 dw 32x32x32 3x3s1",
            same(1, 1, 1, 1),
            1,
            [1, 32, 32, 32],
            3,
        ),
        (
            "int8 dw 32x32x64 3x3s1",
            same(1, 1, 1, 1),
            1,
            [1, 32, 32, 64],
            3,
        ),
        (
            "int8 dw 64x64x24 5x5s1",
            same(2, 2, 2, 2),
            1,
            [1, 64, 64, 24],
            5,
        ),
        (
            "int8 dw 64x64x24 5x5s2",
            same(1, 2, 1, 2),
            2,
            [1, 64, 64, 24],
            5,
        ),
        (
            "int8 dw 16x16x88 5x5s1",
            same(2, 2, 2, 2),
            1,
            [1, 16, 16, 88],
            5,
        ),
    ];
    for (name, pad, stride, x, k) in q_dw {
        let c = x[3];
        time_q(
            name,
            dw(pad, stride),
            vec![
                (x.to_vec(), pseudo(x.iter().product(), 1)),
                (vec![1, k, k, c], pseudo(k * k * c, 2)),
                (vec![c], pseudo(c, 3)),
            ],
            Some(3),
        );
    }
    time_q(
        "int8 add 32x32x64",
        KernelOp::from(Binary {
            kind: BinaryKind::Add,
            act: Activation::None,
        }),
        vec![
            (vec![1, 32, 32, 64], pseudo(32 * 32 * 64, 1)),
            (vec![1, 32, 32, 64], pseudo(32 * 32 * 64, 2)),
        ],
        None,
    );
}
