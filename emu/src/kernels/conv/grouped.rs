//! NNAPI GROUPED_CONV_2D: the input channels and the output channels are split into
//! `groups` equal parts and part `g` of the output is CONV_2D of part `g` of the input.
//! Each group runs the CONV_2D cores (float32 GEMM, float16 in float32, integer cores for
//! quantised tensors with per-tensor or per-channel filters).
//!
//! Parameter words: the undilated [`ConvWindow`] (pad(4), stride_w, stride_h), groups, act,
//! nchw.
//! Inputs: input `[N,H,W,C]`, filter `[O,KH,KW,C/groups]`, bias `[O]`.

use crate::kernels::conv::conv2d::{conv2d_f32, Conv2d};
use crate::kernels::conv::window::{decode_act_layout, encode_act_layout, ConvShapes};
use crate::kernels::conv::{
    conv_cost, conv_kernel_methods, qerr, ConvArgs, ConvCore, ConvWindow, QStage,
};
use crate::kernels::kernel::{Cost, Kernel, Words};
use crate::kernels::layout::{layout_shape, nhwc_dims, with_nhwc};
use crate::kernels::qconv::{self, Conv2dParams, PerChannel, QuantParams};
use crate::kernels::quant::QuantElem;
use crate::kernels::{bad_shape, Activation, KernelError, Result, Tensor, TensorMut};
use crate::tensor::TensorType;

/// A grouped 2-D convolution.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupedConv2d {
    /// Padding and strides; the dilation must be 1 (GROUPED_CONV_2D has none and its
    /// parameter words carry none).
    pub window: ConvWindow,
    /// Number of groups.
    pub groups: u32,
    /// Fused activation.
    pub act: Activation,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

/// Copies channels `[c0, c0 + len)` of every pixel of an NHWC buffer with `c` channels.
fn gather_channels<T: Copy>(src: &[T], c: usize, c0: usize, len: usize) -> Vec<T> {
    src.chunks_exact(c)
        .flat_map(|px| px[c0..c0 + len].iter().copied())
        .collect()
}

/// Writes an NHWC buffer with `len` channels to channels `[c0, c0 + len)` of `dst`.
fn scatter_channels<T: Copy>(part: &[T], dst: &mut [T], c: usize, c0: usize, len: usize) {
    for (d, s) in dst.chunks_exact_mut(c).zip(part.chunks_exact(len)) {
        d[c0..c0 + len].copy_from_slice(s);
    }
}

impl GroupedConv2d {
    /// The per-group convolution.
    fn conv(&self) -> Conv2d {
        Conv2d {
            window: self.window,
            act: self.act,
            nchw: false,
            epilogue: None,
        }
    }

    /// Runs `f(group, in_part, out_part)` over NHWC group buffers.
    fn per_group<T: Copy + Default>(
        &self,
        x: Tensor<'_, T>,
        out: TensorMut<'_, T>,
        mut f: impl FnMut(usize, (&[usize], &[T]), (&[usize], &mut [T])) -> Result<()>,
    ) -> Result<()> {
        let (n, h, w, c) = nhwc_dims(x.shape, self.nchw).ok_or(KernelError::TooLarge)?;
        let (_, oh, ow, o) = nhwc_dims(out.shape, self.nchw).ok_or(KernelError::TooLarge)?;
        let groups = self.groups as usize;
        let (cg, og) = (c / groups, o / groups);
        let in_shape = [n, h, w, cg];
        let out_shape = [n, oh, ow, og];
        with_nhwc(self.nchw, x, out, |src, dst| {
            if og == 0 || cg == 0 {
                return Ok(());
            }
            let mut part_out = vec![T::default(); n * oh * ow * og];
            for g in 0..groups {
                let part_in = gather_channels(src, c, g * cg, cg);
                f(g, (&in_shape, &part_in), (&out_shape, &mut part_out))?;
                scatter_channels(&part_out, dst, o, g * og, og);
            }
            Ok(())
        })
    }
}

impl ConvCore for GroupedConv2d {
    const CHANNEL_AXIS: usize = 0;

    fn activation(&self) -> Activation {
        self.act
    }

    fn run_quant<T: QuantElem + Default, F: QuantElem>(
        &self,
        stage: &QStage,
        a: ConvArgs<'_, T, F, i32>,
    ) -> Result<()> {
        let ConvArgs { x, f, bias, out } = a;
        let name = self.name();
        let fs = f.shape;
        let q = stage.params();
        let og = fs[0] / self.groups as usize;
        let k = fs[1] * fs[2] * fs[3];
        fn slice(v: PerChannel<'_>, g: usize, og: usize) -> PerChannel<'_> {
            match v {
                PerChannel::Each(s) => PerChannel::Each(s.get(g * og..(g + 1) * og).unwrap_or(&[])),
                u => u,
            }
        }
        self.per_group(x, out, |g, (is, src), (os, dst)| {
            let p = Conv2dParams {
                geometry: self.window.geometry(is, os, fs, false)?.0,
                out_c: og,
                quant: QuantParams {
                    output_multiplier: slice(q.output_multiplier, g, og),
                    output_shift: slice(q.output_shift, g, og),
                    ..q
                },
            };
            qconv::conv2d(
                &p,
                src,
                &f.data[g * og * k..(g + 1) * og * k],
                &bias[g * og..(g + 1) * og],
                dst,
            )
            .map_err(qerr(name))
        })
    }

    fn run_f32(&self, a: ConvArgs<'_>) -> Result<()> {
        let ConvArgs { x, f, bias, out } = a;
        let conv = self.conv();
        let o = f.shape[0];
        let og = o / self.groups as usize;
        let fshape = [og, f.shape[1], f.shape[2], f.shape[3]];
        let k = f.shape[1] * f.shape[2] * f.shape[3];
        self.per_group(x, out, |g, (is, src), (os, dst)| {
            let f = Tensor {
                shape: &fshape,
                data: &f.data[g * og * k..(g + 1) * og * k],
            };
            let x = Tensor {
                shape: is,
                data: src,
            };
            let out = TensorMut {
                shape: os,
                data: dst,
            };
            let bias = &bias[g * og..(g + 1) * og];
            conv2d_f32(&conv, ConvArgs { x, f, bias, out })
        })
    }
}

impl Kernel for GroupedConv2d {
    fn name(&self) -> &'static str {
        "GROUPED_CONV_2D"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let window = ConvWindow::decode_undilated(w)?;
        let groups = w.nonzero("groups")?;
        let (act, nchw) = decode_act_layout(w)?;
        Ok(GroupedConv2d {
            window,
            groups,
            act,
            nchw,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        self.window.encode_undilated(w);
        w.push(self.groups);
        w.extend(encode_act_layout(self.act, self.nchw));
    }

    conv_kernel_methods!();

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        self.window.check_undilated(name)?;
        let s = ConvShapes::new(name, inputs, self.nchw, Self::CHANNEL_AXIS)?;
        let groups = self.groups as usize;
        if s.c % groups != 0 || s.out_c % groups != 0 {
            return Err(bad_shape(
                name,
                format!(
                    "input {:?} and filter {:?} do not split into {groups} groups",
                    inputs[0].shape, s.filter
                ),
            ));
        }
        s.check_filter_channels(name, s.c / groups)?;
        let (oh, ow) = self.window.output_size(name, (s.h, s.w), s.kernel())?;
        Ok(vec![layout_shape(s.n, oh, ow, s.out_c, self.nchw)])
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        conv_cost(outputs, &inputs[1].shape[1..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::conv::testref::{act, in_layout, quantize, to_nchw};
    use crate::kernels::conv::testutil::{pick, run_conv_f32, run_typed};
    use crate::kernels::{KernelOp, Padding};
    use crate::tensor::{DType, PerChannel, Quant};
    use proptest::prelude::*;

    /// Plain grouped convolution over NHWC f64 data: `(output shape, output)`.
    fn reference(
        t: &GroupedConv2d,
        [n, h, w, c]: [usize; 4],
        x: &[f64],
        [o, kh, kw]: [usize; 3],
        f: &[f64],
        bias: &[f64],
    ) -> ([usize; 4], Vec<f64>) {
        let g = t.groups as usize;
        let (cg, og) = (c / g, o / g);
        let win = &t.window;
        let p = &win.pad;
        let oh = (h + (p.top + p.bottom) as usize - kh) / win.stride_h as usize + 1;
        let ow = (w + (p.left + p.right) as usize - kw) / win.stride_w as usize + 1;
        let mut out = Vec::new();
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for k in 0..o {
                        let grp = k / og;
                        let mut s = bias[k];
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (oy * win.stride_h as usize + i) as i64 - p.top as i64;
                                let ix = (ox * win.stride_w as usize + j) as i64 - p.left as i64;
                                if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                                    continue;
                                }
                                for d in 0..cg {
                                    s += x[((b * h + iy as usize) * w + ix as usize) * c
                                        + grp * cg
                                        + d]
                                        * f[((k * kh + i) * kw + j) * cg + d];
                                }
                            }
                        }
                        out.push(act(t.act, s));
                    }
                }
            }
        }
        ([n, oh, ow, o], out)
    }

    fn arb() -> impl Strategy<Value = (GroupedConv2d, [usize; 4], [usize; 3], u32)> {
        (
            (
                0usize..3,
                1usize..6,
                1usize..6,
                1usize..3,
                1usize..3,
                1u32..4,
            ),
            (1usize..3, 1usize..3),
            (0u32..2, 0u32..2, 1u32..3, 1u32..3),
            (0u32..4, any::<bool>(), any::<u32>()),
        )
            .prop_map(
                |((n, h, w, cg, og, g), (kh, kw), (pw, ph, sw, sh), (a, nchw, seed))| {
                    let t = GroupedConv2d {
                        window: ConvWindow::strided(
                            Padding {
                                left: pw,
                                right: pw,
                                top: ph,
                                bottom: ph,
                            },
                            (sw, sh),
                        ),
                        groups: g,
                        act: [
                            Activation::None,
                            Activation::Relu,
                            Activation::Relu1,
                            Activation::Relu6,
                        ][a as usize],
                        nchw,
                    };
                    let g = g as usize;
                    let kh = kh.min(h + 2 * ph as usize);
                    let kw = kw.min(w + 2 * pw as usize);
                    (t, [n, h, w, cg * g], [og * g, kh, kw], seed)
                },
            )
    }

    proptest! {
        #[test]
        fn float_matches_reference((t, xs, [o, kh, kw], seed) in arb()) {
            let [n, h, w, c] = xs;
            let cg = c / t.groups as usize;
            let x: Vec<f32> = (0..n * h * w * c).map(|i| pick(i, seed, -8, 8) as f32 * 0.25).collect();
            let f: Vec<f32> = (0..o * kh * kw * cg).map(|i| pick(i + 999, seed, -8, 8) as f32 * 0.25).collect();
            let bias: Vec<f32> = (0..o).map(|i| pick(i + 77, seed, -4, 4) as f32 * 0.5).collect();
            let got = run_conv_f32(&KernelOp::from(t.clone()), t.nchw, (xs, &x), (&[o, kh, kw, cg], &f), &bias);
            let f64s = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<_>>();
            let (os, want) = reference(&t, xs, &f64s(&x), [o, kh, kw], &f64s(&f), &f64s(&bias));
            let want = if t.nchw { to_nchw(&want, os) } else { want };
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert!((f64::from(*g) - w).abs() <= 1e-4 * (1.0 + w.abs()), "{} vs {}", g, w);
            }
        }

        #[test]
        fn quant_within_one_of_real((t, xs, [o, kh, kw], seed) in arb(), per_channel in any::<bool>()) {
            let [n, h, w, c] = xs;
            let cg = c / t.groups as usize;
            let (in_s, in_zp, out_s, out_zp) = (0.5f32, 130, 1.5f32, 120);
            let x: Vec<u8> = (0..n * h * w * c).map(|i| pick(i, seed, 0, 255) as u8).collect();
            let fscales: Vec<f32> = (0..o).map(|k| if per_channel { 0.01 * (k + 1) as f32 } else { 0.02 }).collect();
            let (fty, fbytes, fr): (TensorType, Vec<u8>, Vec<f64>) = if per_channel {
                let f: Vec<i8> = (0..o * kh * kw * cg).map(|i| pick(i + 999, seed, -127, 127) as i8).collect();
                let mut ty = TensorType::quantized(DType::I8, &[o, kh, kw, cg], 0.0, 0);
                ty.quant = Quant { scale: 0.0, zero_point: 0, per_channel: Some(PerChannel { axis: 0, scales: fscales.clone() }) };
                let fr = f.iter().enumerate().map(|(i, &q)| f64::from(fscales[i / (kh * kw * cg)]) * f64::from(q)).collect();
                (ty, bytemuck::cast_slice(&f).to_vec(), fr)
            } else {
                let f: Vec<u8> = (0..o * kh * kw * cg).map(|i| pick(i + 999, seed, 0, 255) as u8).collect();
                let fr = f.iter().map(|&q| 0.02 * f64::from(i32::from(q) - 128)).collect();
                (TensorType::quantized(DType::U8, &[o, kh, kw, cg], 0.02, 128), f, fr)
            };
            let bias: Vec<i32> = (0..o).map(|i| pick(i + 77, seed, -500, 500)).collect();
            let xin = if t.nchw { to_nchw(&x, xs) } else { x.clone() };
            let ins = vec![
                (TensorType::quantized(DType::U8, &in_layout(xs, t.nchw), in_s, in_zp), xin),
                (fty, fbytes),
                (TensorType::quantized(DType::I32, &[o], if per_channel { 0.0 } else { in_s * 0.02 }, 0), bytemuck::cast_slice(&bias).to_vec()),
            ];
            let op = KernelOp::from(t.clone());
            let got = run_typed(&op, &ins, TensorType::quantized(DType::U8, &[], out_s, out_zp)).unwrap();
            let xr: Vec<f64> = x.iter().map(|&q| f64::from(in_s) * f64::from(i32::from(q) - in_zp)).collect();
            let br: Vec<f64> = bias.iter().enumerate().map(|(k, &q)| f64::from(q) * f64::from(in_s) * f64::from(fscales[k])).collect();
            let (os, want) = reference(&t, xs, &xr, [o, kh, kw], &fr, &br);
            let want: Vec<i32> = want.iter().map(|&v| quantize(v, f64::from(out_s), out_zp, 0, 255)).collect();
            let want = if t.nchw { to_nchw(&want, os) } else { want };
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert!((i32::from(*g) - w).abs() <= 1, "{} vs {}", g, w);
            }
        }
    }
}
