//! NNAPI TRANSPOSE_CONV_2D: every input pixel scatters `input * filter` into a
//! `KH x KW` output window at `(y * stride_h - pad_top, x * stride_w - pad_left)`; taps
//! outside the output are dropped. float32 directly; float16 computes in float32; quantised
//! inputs accumulate `(x - in_zp) * (w - w_zp)` in wrapping int32 and requantise with the
//! conv multipliers (per-tensor or per-channel), as the NNAPI reference does.
//!
//! Parameter words: pad_left, pad_top, out_h, out_w, stride_w, stride_h, act, nchw.
//! Inputs: input, filter `[O,KH,KW,C]`, bias `[O]`; output `[N,out_h,out_w,O]` in the input's
//! layout. The driver derives the output size (and the padding of the implicit form).

use crate::kernels::conv::window::{decode_act_layout, encode_act_layout, ConvShapes};
use crate::kernels::conv::{conv_kernel_methods, qerr, ConvArgs, ConvCore, QStage};
use crate::kernels::kernel::{Cost, Kernel, Words};
use crate::kernels::layout::{layout_shape, nhwc_dims, with_nhwc};
use crate::kernels::qconv::PerChannel;
use crate::kernels::quant::{multiply_by_quantized_multiplier, QuantElem};
use crate::kernels::{Activation, KernelError, Result};
use crate::tensor::TensorType;

/// A transposed 2-D convolution.
#[derive(Debug, Clone, PartialEq)]
pub struct TransposeConv2d {
    /// Columns cut from the left of the full output.
    pub pad_left: u32,
    /// Rows cut from the top of the full output.
    pub pad_top: u32,
    /// Output height.
    pub out_h: u32,
    /// Output width.
    pub out_w: u32,
    /// Horizontal stride.
    pub stride_w: u32,
    /// Vertical stride.
    pub stride_h: u32,
    /// Fused activation.
    pub act: Activation,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

/// The geometry shared by the float and integer loops (NHWC).
struct Geo {
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    oh: usize,
    ow: usize,
    o: usize,
    kh: usize,
    kw: usize,
}

impl TransposeConv2d {
    /// Calls `f(out_index, filter_row_offset, in_pixel_offset)` for every contributing
    /// (output channel, tap, input pixel); sizes were validated by `output_shapes`.
    fn for_each_tap(&self, g: &Geo, mut f: impl FnMut(usize, usize, usize)) {
        let (sh, sw) = (self.stride_h as usize, self.stride_w as usize);
        let (pt, pl) = (self.pad_top as usize, self.pad_left as usize);
        for b in 0..g.n {
            for y in 0..g.h {
                for x in 0..g.w {
                    let src = ((b * g.h + y) * g.w + x) * g.c;
                    for i in 0..g.kh {
                        let py = y * sh + i;
                        if py < pt || py - pt >= g.oh {
                            continue;
                        }
                        for j in 0..g.kw {
                            let px = x * sw + j;
                            if px < pl || px - pl >= g.ow {
                                continue;
                            }
                            let dst = ((b * g.oh + py - pt) * g.ow + px - pl) * g.o;
                            for k in 0..g.o {
                                f(dst + k, ((k * g.kh + i) * g.kw + j) * g.c, src);
                            }
                        }
                    }
                }
            }
        }
    }

    fn geo(&self, x: &[usize], f: &[usize], out: &[usize]) -> Result<Geo> {
        let (n, h, w, c) = nhwc_dims(x, self.nchw).ok_or(KernelError::TooLarge)?;
        let (_, oh, ow, o) = nhwc_dims(out, self.nchw).ok_or(KernelError::TooLarge)?;
        Ok(Geo {
            n,
            h,
            w,
            c,
            oh,
            ow,
            o,
            kh: f[1],
            kw: f[2],
        })
    }
}

impl ConvCore for TransposeConv2d {
    const CHANNEL_AXIS: usize = 0;

    fn activation(&self) -> Activation {
        self.act
    }

    fn run_f32(&self, a: ConvArgs<'_>) -> Result<()> {
        let ConvArgs { x, f, bias, out } = a;
        let g = self.geo(x.shape, f.shape, out.shape)?;
        with_nhwc(self.nchw, x, out, |src, dst| {
            dst.fill(0.0);
            self.for_each_tap(&g, |d, fo, so| {
                let acc: f32 = src[so..so + g.c]
                    .iter()
                    .zip(&f.data[fo..fo + g.c])
                    .map(|(a, b)| a * b)
                    .sum();
                dst[d] += acc;
            });
            if g.o > 0 {
                for px in dst.chunks_exact_mut(g.o) {
                    for (v, b) in px.iter_mut().zip(bias) {
                        *v += b;
                    }
                }
            }
            self.act.apply_slice(dst);
            Ok(())
        })
    }

    fn run_quant<T: QuantElem + Default, F: QuantElem>(
        &self,
        stage: &QStage,
        a: ConvArgs<'_, T, F, i32>,
    ) -> Result<()> {
        let ConvArgs { x, f, bias, out } = a;
        let name = self.name();
        let g = self.geo(x.shape, f.shape, out.shape)?;
        let q = stage.params();
        let in_zp = q.input_zero_point;
        let PerChannel::Uniform(w_zp) = q.filter_zero_point else {
            return Err(qerr(name)(
                crate::kernels::quant::QuantError::InvalidParams("filter zero point"),
            ));
        };
        let pick = |v: PerChannel<'_>, k: usize| match v {
            PerChannel::Uniform(m) => m,
            PerChannel::Each(s) => s.get(k).copied().unwrap_or(0),
        };
        with_nhwc(self.nchw, x, out, |src, dst| {
            let mut acc = vec![0i32; dst.len()];
            self.for_each_tap(&g, |d, fo, so| {
                let s =
                    src[so..so + g.c]
                        .iter()
                        .zip(&f.data[fo..fo + g.c])
                        .fold(0i32, |s, (a, b)| {
                            s.wrapping_add((a.to_i32() - in_zp).wrapping_mul(b.to_i32() - w_zp))
                        });
                acc[d] = acc[d].wrapping_add(s);
            });
            if g.o > 0 {
                for (po, pa) in dst.chunks_exact_mut(g.o).zip(acc.chunks_exact(g.o)) {
                    for (k, (v, &a)) in po.iter_mut().zip(pa).enumerate() {
                        let r = multiply_by_quantized_multiplier(
                            a.wrapping_add(bias[k]),
                            pick(q.output_multiplier, k),
                            pick(q.output_shift, k),
                        )
                        .saturating_add(q.output_zero_point)
                        .clamp(q.act_min, q.act_max);
                        *v = T::saturate_from_i32(r);
                    }
                }
            }
            Ok(())
        })
    }
}

impl Kernel for TransposeConv2d {
    fn name(&self) -> &'static str {
        "TRANSPOSE_CONV_2D"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let pad_left = w.u32("pad_left")?;
        let pad_top = w.u32("pad_top")?;
        let out_h = w.nonzero("out_h")?;
        let out_w = w.nonzero("out_w")?;
        let stride_w = w.nonzero("stride_w")?;
        let stride_h = w.nonzero("stride_h")?;
        let (act, nchw) = decode_act_layout(w)?;
        Ok(TransposeConv2d {
            pad_left,
            pad_top,
            out_h,
            out_w,
            stride_w,
            stride_h,
            act,
            nchw,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([
            self.pad_left,
            self.pad_top,
            self.out_h,
            self.out_w,
            self.stride_w,
            self.stride_h,
        ]);
        w.extend(encode_act_layout(self.act, self.nchw));
    }

    conv_kernel_methods!();

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let s = ConvShapes::new(name, inputs, self.nchw, Self::CHANNEL_AXIS)?;
        let (kh, kw) = s.kernel();
        s.check_filter_channels(name, s.c)?;
        // Every index the loops form must fit: y * stride + kh stays small.
        let reach = |len: usize, st: u32, k: usize| {
            len.checked_mul(st as usize)
                .and_then(|v| v.checked_add(k))
                .is_some_and(|v| v < (1 << 40))
        };
        if !reach(s.h, self.stride_h, kh) || !reach(s.w, self.stride_w, kw) {
            return Err(KernelError::TooLarge);
        }
        Ok(vec![layout_shape(
            s.n,
            self.out_h as usize,
            self.out_w as usize,
            s.out_c,
            self.nchw,
        )])
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let inp: u64 = inputs[0].shape.iter().map(|&d| d as u64).product();
        let k: u64 = inputs[1].shape[..3].iter().map(|&d| d as u64).product();
        let out: u64 = outputs[0].iter().map(|&d| d as u64).product();
        Cost {
            macs: inp.saturating_mul(k),
            elems: out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::conv::testref::{act, in_layout, quantize, to_nchw};
    use crate::kernels::conv::testutil::{pick, run_conv_f32, run_typed};
    use crate::kernels::KernelOp;
    use crate::tensor::{DType, PerChannel, Quant};
    use proptest::prelude::*;

    /// Plain scatter reference over NHWC f64 data; returns the NHWC output.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        t: &TransposeConv2d,
        [n, h, w, c]: [usize; 4],
        x: &[f64],
        [o, kh, kw]: [usize; 3],
        f: &[f64],
        bias: &[f64],
    ) -> Vec<f64> {
        let (oh, ow) = (t.out_h as i64, t.out_w as i64);
        let mut out = vec![0.0; n * (oh * ow) as usize * o];
        for b in 0..n {
            for y in 0..h {
                for xx in 0..w {
                    for i in 0..kh {
                        for j in 0..kw {
                            let py = (y * t.stride_h as usize + i) as i64 - t.pad_top as i64;
                            let px = (xx * t.stride_w as usize + j) as i64 - t.pad_left as i64;
                            if py < 0 || py >= oh || px < 0 || px >= ow {
                                continue;
                            }
                            for k in 0..o {
                                for d in 0..c {
                                    let di = ((b as i64 * oh + py) * ow + px) as usize * o + k;
                                    out[di] += x[((b * h + y) * w + xx) * c + d]
                                        * f[((k * kh + i) * kw + j) * c + d];
                                }
                            }
                        }
                    }
                }
            }
        }
        for (i, v) in out.iter_mut().enumerate() {
            *v = act(t.act, *v + bias[i % o]);
        }
        out
    }

    fn arb() -> impl Strategy<Value = (TransposeConv2d, [usize; 4], [usize; 3], u32)> {
        (
            (0usize..3, 1usize..5, 1usize..5, 1usize..4),
            (1usize..4, 1usize..4, 1usize..4),
            (0u32..3, 0u32..3, 1u32..4, 1u32..4),
            (0u32..4, any::<bool>(), any::<u32>()),
        )
            .prop_map(
                |((n, h, w, c), (o, kh, kw), (pl, pt, sw, sh), (a, nchw, seed))| {
                    let full_h = (h - 1) * sh as usize + kh;
                    let full_w = (w - 1) * sw as usize + kw;
                    let t = TransposeConv2d {
                        pad_left: pl,
                        pad_top: pt,
                        out_h: (full_h as u32).saturating_sub(pt).max(1),
                        out_w: (full_w as u32).saturating_sub(pl).max(1),
                        stride_w: sw,
                        stride_h: sh,
                        act: [
                            Activation::None,
                            Activation::Relu,
                            Activation::Relu1,
                            Activation::Relu6,
                        ][a as usize],
                        nchw,
                    };
                    (t, [n, h, w, c], [o, kh, kw], seed)
                },
            )
    }

    proptest! {
        #[test]
        fn float_matches_reference((t, xs, [o, kh, kw], seed) in arb()) {
            let [n, h, w, c] = xs;
            let x: Vec<f32> = (0..n * h * w * c).map(|i| pick(i, seed, -8, 8) as f32 * 0.25).collect();
            let f: Vec<f32> = (0..o * kh * kw * c).map(|i| pick(i + 999, seed, -8, 8) as f32 * 0.25).collect();
            let bias: Vec<f32> = (0..o).map(|i| pick(i + 77, seed, -4, 4) as f32 * 0.5).collect();
            let got = run_conv_f32(&KernelOp::from(t.clone()), t.nchw, (xs, &x), (&[o, kh, kw, c], &f), &bias);
            let f64s = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<_>>();
            let want = reference(&t, xs, &f64s(&x), [o, kh, kw], &f64s(&f), &f64s(&bias));
            let os = [n, t.out_h as usize, t.out_w as usize, o];
            let want = if t.nchw { to_nchw(&want, os) } else { want };
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert!((f64::from(*g) - w).abs() <= 1e-4 * (1.0 + w.abs()), "{} vs {}", g, w);
            }
        }

        #[test]
        fn quant_within_one_of_real((t, xs, [o, kh, kw], seed) in arb(), per_channel in any::<bool>()) {
            let [n, h, w, c] = xs;
            let (in_s, in_zp, out_s, out_zp) = (0.5f32, -3, 1.5f32, 7);
            let x: Vec<i8> = (0..n * h * w * c).map(|i| pick(i, seed, -128, 127) as i8).collect();
            let f: Vec<i8> = (0..o * kh * kw * c).map(|i| pick(i + 999, seed, -127, 127) as i8).collect();
            let bias: Vec<i32> = (0..o).map(|i| pick(i + 77, seed, -500, 500)).collect();
            let fscales: Vec<f32> = (0..o).map(|k| if per_channel { 0.01 * (k + 1) as f32 } else { 0.02 }).collect();
            let mut fty = TensorType::quantized(DType::I8, &[o, kh, kw, c], 0.02, 0);
            if per_channel {
                fty.quant = Quant { scale: 0.0, zero_point: 0, per_channel: Some(PerChannel { axis: 0, scales: fscales.clone() }) };
            }
            let xin = if t.nchw { to_nchw(&x, xs) } else { x.clone() };
            let ins = vec![
                (TensorType::quantized(DType::I8, &in_layout(xs, t.nchw), in_s, in_zp), bytemuck::cast_slice(&xin).to_vec()),
                (fty, bytemuck::cast_slice(&f).to_vec()),
                (TensorType::quantized(DType::I32, &[o], if per_channel { 0.0 } else { in_s * 0.02 }, 0), bytemuck::cast_slice(&bias).to_vec()),
            ];
            let op = KernelOp::from(t.clone());
            let got = run_typed(&op, &ins, TensorType::quantized(DType::I8, &[], out_s, out_zp)).unwrap();
            let got: Vec<i8> = bytemuck::cast_slice(&got).to_vec();
            let xr: Vec<f64> = x.iter().map(|&q| f64::from(in_s) * f64::from(i32::from(q) - in_zp)).collect();
            let fr: Vec<f64> = f.iter().enumerate().map(|(i, &q)| f64::from(fscales[i / (kh * kw * c)]) * f64::from(q)).collect();
            let br: Vec<f64> = bias.iter().enumerate().map(|(k, &q)| f64::from(q) * f64::from(in_s) * f64::from(fscales[k])).collect();
            let want = reference(&t, xs, &xr, [o, kh, kw], &fr, &br);
            let os = [n, t.out_h as usize, t.out_w as usize, o];
            let want: Vec<i32> = want.iter().map(|&v| quantize(v, f64::from(out_s), out_zp, -128, 127)).collect();
            let want = if t.nchw { to_nchw(&want, os) } else { want };
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert!((i32::from(*g) - w).abs() <= 1, "{} vs {}", g, w);
            }
        }
    }
}
