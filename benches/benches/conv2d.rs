//! CONV_2D throughput of the emulated device's compute kernels on MobileNet v1 layers:
//! `conv2d/f32/<layer>` (float32 kernel), `conv2d/q8/<layer>` (quant8 asymm kernel, integer
//! core) and `conv2d/sgemm/<layer>` (`matrixmultiply::sgemm` alone on the layer's GEMM shape,
//! M = output pixels, K = kh*kw*cin, N = cout: the float GEMM's ceiling), plus the whole
//! MobileNet v1 224 convolution stack (conv, depthwise, pointwise, average pool, fully
//! connected). Throughput is reported in multiply-accumulates ("elements").
//! `conv2d/f32_packed/<layer>` and `mobilenet_v1_224/all_layers_packed` give the float32
//! CONV_2D and FULLY_CONNECTED filters pre-packed in the device GEMM's panels
//! (`Layout::GemmPanels`, as the driver's compiler lays them out), so no run packs them.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use vnpu_benches::{pseudo, staged};
use vnpu_emu::kernels::{
    execute, Activation, Conv2d, ConvWindow, DepthwiseConv2d, FullyConnected, KernelOp, Padding,
    Pool, PoolKind,
};
use vnpu_emu::program::pack_panels;
use vnpu_emu::tensor::{DType, Layout, Staged, TensorType, View, ViewMut};

/// A layer with its constant operands and preallocated output.
struct Layer {
    op: KernelOp,
    inputs: Vec<(TensorType, Staged)>,
    out_ty: TensorType,
    out: Staged,
    macs: u64,
}

impl Layer {
    fn new(op: KernelOp, inputs: Vec<(Vec<usize>, Vec<f32>)>, macs_per_out: u64) -> Layer {
        let inputs: Vec<(TensorType, Vec<u8>)> = inputs
            .into_iter()
            .map(|(s, d)| {
                (
                    TensorType::new(DType::F32, &s),
                    bytemuck::cast_slice(&d).to_vec(),
                )
            })
            .collect();
        Layer::typed(op, inputs, TensorType::new(DType::F32, &[]), macs_per_out)
    }

    /// A layer over typed inputs; `out` gives the output's type and quantisation (its shape
    /// comes from the kernel).
    fn typed(
        op: KernelOp,
        inputs: Vec<(TensorType, Vec<u8>)>,
        mut out: TensorType,
        macs_per_out: u64,
    ) -> Layer {
        let inputs: Vec<(TensorType, Staged)> =
            inputs.into_iter().map(|(t, d)| (t, staged(&d))).collect();
        let tys: Vec<&TensorType> = inputs.iter().map(|(t, _)| t).collect();
        out.shape = op.output_shapes(&tys).expect("valid layer").remove(0);
        let n = out.numel();
        Layer {
            op,
            inputs,
            out: Staged::zeroed(n * out.dtype.size() as usize),
            out_ty: out,
            macs: n as u64 * macs_per_out,
        }
    }

    /// The same layer with a float32 CONV_2D / FULLY_CONNECTED filter pre-packed.
    fn packed(mut self) -> Layer {
        let gemm = matches!(self.op, KernelOp::Conv2d(_) | KernelOp::FullyConnected(_));
        let Some((ty, bytes)) = self.inputs.get(1).filter(|_| gemm) else {
            return self;
        };
        if ty.dtype == DType::F32 {
            let panels = pack_panels(&ty.shape, bytes.bytes()).expect("a float32 filter");
            let ty = TensorType {
                layout: Layout::GemmPanels,
                ..ty.clone()
            };
            self.inputs[1] = (ty, staged(&panels));
        }
        self
    }

    fn run(&mut self) {
        let ins: Vec<View<'_>> = self
            .inputs
            .iter()
            .map(|(ty, b)| View {
                ty,
                bytes: b.bytes(),
            })
            .collect();
        execute(
            &self.op,
            &ins,
            &mut [ViewMut {
                ty: &self.out_ty,
                bytes: self.out.bytes_mut(),
            }],
        )
        .expect("kernel runs");
    }
}

/// Pseudo-random quant8 values.
fn pseudo_u8(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 16) as u8)
        .collect()
}

fn conv_op(stride: u32, pad: Padding) -> KernelOp {
    KernelOp::from(Conv2d {
        window: ConvWindow::strided(pad, (stride, stride)),
        act: Activation::Relu6,
        nchw: false,
        epilogue: None,
    })
}

/// The quant8 asymm version of [`conv`]: uint8 input, filter and output, int32 bias.
fn conv_q8(input: [usize; 4], out_c: usize, k: usize, stride: u32, pad: Padding) -> Layer {
    let c = input[3];
    let (in_scale, f_scale) = (1.0 / 128.0, 1.0 / 256.0);
    let bias: Vec<i32> = (0..out_c as i32).map(|i| (i * 37) % 1000 - 500).collect();
    Layer::typed(
        conv_op(stride, pad),
        vec![
            (
                TensorType::quantized(DType::U8, &input, in_scale, 128),
                pseudo_u8(input.iter().product(), 1),
            ),
            (
                TensorType::quantized(DType::U8, &[out_c, k, k, c], f_scale, 127),
                pseudo_u8(out_c * k * k * c, 2),
            ),
            (
                TensorType::quantized(DType::I32, &[out_c], in_scale * f_scale, 0),
                bytemuck::cast_slice(&bias).to_vec(),
            ),
        ],
        TensorType::quantized(DType::U8, &[], 6.0 / 255.0, 0),
        (k * k * c) as u64,
    )
}

/// `matrixmultiply::sgemm` alone on a convolution's GEMM shape.
struct Sgemm {
    m: usize,
    k: usize,
    n: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl Sgemm {
    /// The GEMM of a `k x k` convolution of `input` to `out_c` channels at `stride`
    /// (SAME output size).
    fn for_conv(input: [usize; 4], out_c: usize, k: usize, stride: usize) -> Sgemm {
        let (oh, ow) = (input[1].div_ceil(stride), input[2].div_ceil(stride));
        let (m, kk, n) = (input[0] * oh * ow, k * k * input[3], out_c);
        Sgemm {
            m,
            k: kk,
            n,
            a: pseudo(m * kk, 11),
            b: pseudo(kk * n, 12),
            c: vec![0.0; m * n],
        }
    }

    fn macs(&self) -> u64 {
        (self.m * self.k * self.n) as u64
    }

    fn run(&mut self) {
        let (m, k, n) = (self.m, self.k, self.n);
        assert!(self.a.len() >= m * k && self.b.len() >= k * n && self.c.len() >= m * n);
        // SAFETY: row-major A (m x k), B (k x n) and C (m x n) with the strides given; the
        // lengths were checked above.
        unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                1.0,
                self.a.as_ptr(),
                k as isize,
                1,
                self.b.as_ptr(),
                n as isize,
                1,
                0.0,
                self.c.as_mut_ptr(),
                n as isize,
                1,
            );
        }
    }
}

fn conv(input: [usize; 4], out_c: usize, k: usize, stride: u32, pad: Padding) -> Layer {
    let c = input[3];
    Layer::new(
        conv_op(stride, pad),
        vec![
            (input.to_vec(), pseudo(input.iter().product(), 1)),
            (vec![out_c, k, k, c], pseudo(out_c * k * k * c, 2)),
            (vec![out_c], pseudo(out_c, 3)),
        ],
        (k * k * c) as u64,
    )
}

fn depthwise(input: [usize; 4], stride: u32, pad: Padding) -> Layer {
    let c = input[3];
    let op = KernelOp::from(DepthwiseConv2d {
        window: ConvWindow::strided(pad, (stride, stride)),
        depth_multiplier: 1,
        act: Activation::Relu6,
        nchw: false,
        epilogue: None,
    });
    Layer::new(
        op,
        vec![
            (input.to_vec(), pseudo(input.iter().product(), 4)),
            (vec![1, 3, 3, c], pseudo(9 * c, 5)),
            (vec![c], pseudo(c, 6)),
        ],
        9,
    )
}

/// TF "SAME" padding for a 3x3 filter: 1/1 at stride 1, 0/1 at stride 2 on even sizes.
fn same(stride: u32) -> Padding {
    let before = if stride == 1 { 1 } else { 0 };
    Padding {
        left: before,
        right: 1,
        top: before,
        bottom: 1,
    }
}

/// The MobileNet v1 (1.0, 224) layer stack.
fn mobilenet() -> Vec<Layer> {
    let mut layers = vec![conv([1, 224, 224, 3], 32, 3, 2, same(2))];
    let blocks: [(usize, u32); 13] = [
        (64, 1),
        (128, 2),
        (128, 1),
        (256, 2),
        (256, 1),
        (512, 2),
        (512, 1),
        (512, 1),
        (512, 1),
        (512, 1),
        (512, 1),
        (1024, 2),
        (1024, 1),
    ];
    let (mut hw, mut c) = (112usize, 32usize);
    for (out_c, stride) in blocks {
        layers.push(depthwise([1, hw, hw, c], stride, same(stride)));
        hw /= stride as usize;
        layers.push(conv([1, hw, hw, c], out_c, 1, 1, Padding::default()));
        c = out_c;
    }
    let pool = KernelOp::from(Pool {
        kind: PoolKind::Average,
        pad: Padding::default(),
        stride_w: 1,
        stride_h: 1,
        filter_w: 7,
        filter_h: 7,
        act: Activation::None,
        nchw: false,
    });
    layers.push(Layer::new(
        pool,
        vec![(vec![1, 7, 7, 1024], pseudo(7 * 7 * 1024, 7))],
        49,
    ));
    let fc = KernelOp::from(FullyConnected {
        act: Activation::None,
    });
    layers.push(Layer::new(
        fc,
        vec![
            (vec![1, 1024], pseudo(1024, 8)),
            (vec![1001, 1024], pseudo(1001 * 1024, 9)),
            (vec![1001], pseudo(1001, 10)),
        ],
        1024,
    ));
    layers
}

/// A benchmarked convolution: name, input, out channels, kernel size, stride, padding.
type ConvLayer = (&'static str, [usize; 4], usize, usize, u32, Padding);

fn bench_layers(c: &mut Criterion) {
    let mut group = c.benchmark_group("conv2d");
    let layers: [ConvLayer; 4] = [
        ("3x3s2_224x224x3_to_32", [1, 224, 224, 3], 32, 3, 2, same(2)),
        (
            "1x1_112x112x32_to_64",
            [1, 112, 112, 32],
            64,
            1,
            1,
            Padding::default(),
        ),
        ("3x3s1_56x56x64_to_64", [1, 56, 56, 64], 64, 3, 1, same(1)),
        (
            "1x1_14x14x512_to_512",
            [1, 14, 14, 512],
            512,
            1,
            1,
            Padding::default(),
        ),
    ];
    for (name, input, out_c, k, stride, pad) in layers {
        for (kind, mut layer) in [
            ("f32", conv(input, out_c, k, stride, pad)),
            ("f32_packed", conv(input, out_c, k, stride, pad).packed()),
            ("q8", conv_q8(input, out_c, k, stride, pad)),
        ] {
            group.throughput(Throughput::Elements(layer.macs));
            group.bench_function(format!("{kind}/{name}"), |b| {
                b.iter(|| {
                    layer.run();
                    black_box(&layer.out);
                })
            });
        }
        let mut gemm = Sgemm::for_conv(input, out_c, k, stride as usize);
        group.throughput(Throughput::Elements(gemm.macs()));
        group.bench_function(format!("sgemm/{name}"), |b| {
            b.iter(|| {
                gemm.run();
                black_box(&gemm.c);
            })
        });
    }
    let mut dw = depthwise([1, 112, 112, 32], 1, same(1));
    group.throughput(Throughput::Elements(dw.macs));
    group.bench_function("depthwise_f32/3x3_112x112x32", |b| {
        b.iter(|| {
            dw.run();
            black_box(&dw.out);
        })
    });
    group.finish();

    let mut net = mobilenet();
    let macs: u64 = net.iter().map(|l| l.macs).sum();
    let mut group = c.benchmark_group("mobilenet_v1_224");
    group.sample_size(10);
    group.throughput(Throughput::Elements(macs));
    group.bench_function("all_layers", |b| {
        b.iter(|| {
            // Each layer reads its own preallocated input of the right shape: the same work
            // as chaining the outputs, without copies.
            for layer in net.iter_mut() {
                layer.run();
            }
            black_box(net.last().map(|l| l.out.bytes()[0]))
        })
    });
    let mut net: Vec<Layer> = net.into_iter().map(Layer::packed).collect();
    group.bench_function("all_layers_packed", |b| {
        b.iter(|| {
            for layer in net.iter_mut() {
                layer.run();
            }
            black_box(net.last().map(|l| l.out.bytes()[0]))
        })
    });
    group.finish();
}

criterion_group!(benches, bench_layers);
criterion_main!(benches);
