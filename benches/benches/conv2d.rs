//! CONV_2D (float32) throughput of the emulated device's compute kernels on MobileNet v1
//! layers, plus the whole MobileNet v1 224 convolution stack (conv, depthwise, pointwise,
//! average pool, fully connected). Throughput is reported in multiply-accumulates ("elements").

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use vnpu_emu::kernels::{
    execute, Activation, Conv2d, DepthwiseConv2d, FullyConnected, KernelOp, Padding, Pool, PoolKind,
};
use vnpu_emu::tensor::{DType, Staged, TensorType, View, ViewMut};

/// A layer with its constant operands and preallocated output.
struct Layer {
    op: KernelOp,
    inputs: Vec<(TensorType, Staged)>,
    out_ty: TensorType,
    out: Staged,
    macs: u64,
}

fn pseudo(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let v = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 16;
            (v % 255) as f32 / 255.0 - 0.5
        })
        .collect()
}

impl Layer {
    fn new(op: KernelOp, inputs: Vec<(Vec<usize>, Vec<f32>)>, macs_per_out: u64) -> Layer {
        let inputs: Vec<(TensorType, Staged)> = inputs
            .into_iter()
            .map(|(s, d)| {
                let mut b = Staged::zeroed(d.len() * 4);
                b.bytes_mut().copy_from_slice(bytemuck::cast_slice(&d));
                (TensorType::new(DType::F32, &s), b)
            })
            .collect();
        let tys: Vec<&TensorType> = inputs.iter().map(|(t, _)| t).collect();
        let out_shape = op.output_shapes(&tys).expect("valid layer").remove(0);
        let n: usize = out_shape.iter().product();
        Layer {
            op,
            inputs,
            out: Staged::zeroed(n * 4),
            out_ty: TensorType::new(DType::F32, &out_shape),
            macs: n as u64 * macs_per_out,
        }
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

fn conv(input: [usize; 4], out_c: usize, k: usize, stride: u32, pad: Padding) -> Layer {
    let c = input[3];
    let op = KernelOp::from(Conv2d {
        pad,
        stride_w: stride,
        stride_h: stride,
        dilation_w: 1,
        dilation_h: 1,
        act: Activation::Relu6,
        nchw: false,
    });
    Layer::new(
        op,
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
        pad,
        stride_w: stride,
        stride_h: stride,
        dilation_w: 1,
        dilation_h: 1,
        depth_multiplier: 1,
        act: Activation::Relu6,
        nchw: false,
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

fn bench_layers(c: &mut Criterion) {
    let mut group = c.benchmark_group("conv2d");
    let cases = [
        (
            "1x1_112x112x32_to_64",
            conv([1, 112, 112, 32], 64, 1, 1, Padding::default()),
        ),
        (
            "3x3s2_224x224x3_to_32",
            conv([1, 224, 224, 3], 32, 3, 2, same(2)),
        ),
        (
            "3x3s1_56x56x64_to_64",
            conv([1, 56, 56, 64], 64, 3, 1, same(1)),
        ),
        (
            "depthwise3x3_112x112x32",
            depthwise([1, 112, 112, 32], 1, same(1)),
        ),
    ];
    for (name, mut layer) in cases {
        group.throughput(Throughput::Elements(layer.macs));
        group.bench_function(name, |b| {
            b.iter(|| {
                layer.run();
                black_box(&layer.out);
            })
        });
    }
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
    group.finish();
}

criterion_group!(benches, bench_layers);
criterion_main!(benches);
