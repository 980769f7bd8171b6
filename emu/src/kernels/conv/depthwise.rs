//! NNAPI DEPTHWISE_CONV_2D: output channel `c*M+m` reads input channel `c`.
//! float32 direct; float16 computes in float32; quantised tensors run on the integer core
//! [`qconv::depthwise_conv2d`](crate::kernels::qconv::depthwise_conv2d).
//!
//! Parameter words: the [`ConvWindow`] (pad(4), stride_w, stride_h, dilation_w,
//! dilation_h), depth_multiplier, act, nchw. Inputs: input, filter `[1,KH,KW,C*M]`, bias `[C*M]`.

use crate::kernels::conv::depthwise_simd::{self, Args};
use crate::kernels::conv::window::{decode_act_layout, encode_act_layout, ConvShapes};
use crate::kernels::conv::{
    conv_cost, conv_kernel_methods, qerr, ConvArgs, ConvCore, ConvEpilogue, ConvWindow, QStage,
};
use crate::kernels::kernel::{Cost, Kernel, Words};
use crate::kernels::layout::{layout_shape, with_nhwc};
use crate::kernels::qconv::{self, ConvGeometry, DepthwiseConv2dParams};
use crate::kernels::quant::QuantElem;
use crate::kernels::simd::{vectorized, Body};
use crate::kernels::{bad_shape, Activation, KernelError, Result};
use crate::tensor::TensorType;

/// A depthwise 2-D convolution.
#[derive(Debug, Clone, PartialEq)]
pub struct DepthwiseConv2d {
    /// Padding, strides and dilation.
    pub window: ConvWindow,
    /// Output channels per input channel.
    pub depth_multiplier: u32,
    /// Fused activation.
    pub act: Activation,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
    /// A fused requantisation of the output (quantised NHWC only).
    pub epilogue: Option<ConvEpilogue>,
}

impl Kernel for DepthwiseConv2d {
    /// Every output starts from its bias, then adds its taps.
    fn overwrites_f32_outputs(&self) -> bool {
        true
    }

    /// The integer cores write every output element too (each from its bias and taps).
    fn overwrites_quant8_outputs(&self) -> bool {
        true
    }

    /// The activation of the output stage; none to fold once a requantisation is fused
    /// (it would clamp the intermediate, not the output).
    fn fused_activation(&self) -> Option<Activation> {
        self.epilogue.is_none().then_some(self.act)
    }

    fn set_fused_activation(&mut self, act: Activation) -> bool {
        if self.epilogue.is_some() {
            return false;
        }
        self.act = act;
        true
    }

    fn name(&self) -> &'static str {
        "DEPTHWISE_CONV_2D"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let window = ConvWindow::decode(w)?;
        let depth_multiplier = w.nonzero("depth_multiplier")?;
        let (act, nchw) = decode_act_layout(w)?;
        let epilogue = ConvEpilogue::decode(w, nchw)?;
        Ok(DepthwiseConv2d {
            window,
            depth_multiplier,
            act,
            nchw,
            epilogue,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        self.window.encode(w);
        w.push(self.depth_multiplier);
        w.extend(encode_act_layout(self.act, self.nchw));
        ConvEpilogue::encode(&self.epilogue, w);
    }

    conv_kernel_methods!();

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let s = ConvShapes::new(name, inputs, self.nchw, Self::CHANNEL_AXIS)?;
        if s.filter[0] != 1 {
            return Err(bad_shape(
                name,
                format!("filter {:?} must be [1,KH,KW,C*M]", s.filter),
            ));
        }
        let want =
            s.c.checked_mul(self.depth_multiplier as usize)
                .ok_or(KernelError::TooLarge)?;
        if s.out_c != want {
            return Err(bad_shape(
                name,
                format!(
                    "filter {:?} has {} channels, input channels {} * multiplier {} = {want}",
                    s.filter, s.out_c, s.c, self.depth_multiplier
                ),
            ));
        }
        let (oh, ow) = self.window.output_size(name, (s.h, s.w), s.kernel())?;
        Ok(vec![layout_shape(s.n, oh, ow, s.out_c, self.nchw)])
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        conv_cost(outputs, &inputs[1].shape[1..3])
    }
}

impl ConvCore for DepthwiseConv2d {
    const CHANNEL_AXIS: usize = 3;

    fn activation(&self) -> Activation {
        self.act
    }

    fn epilogue(&self) -> Option<ConvEpilogue> {
        self.epilogue
    }

    fn run_f32(&self, a: ConvArgs<'_>) -> Result<()> {
        depthwise_f32(self, a)
    }

    /// The quantised depthwise convolution on the integer core.
    fn run_quant<T: QuantElem + Default, F: QuantElem>(
        &self,
        stage: &QStage,
        a: ConvArgs<'_, T, F, i32>,
    ) -> Result<()> {
        let ConvArgs { x, f, bias, out } = a;
        let (geometry, _) = self
            .window
            .geometry(x.shape, out.shape, f.shape, self.nchw)?;
        let p = DepthwiseConv2dParams {
            geometry,
            depth_multiplier: self.depth_multiplier as usize,
            quant: stage.params(),
        };
        with_nhwc(self.nchw, x, out, |src, dst| {
            qconv::depthwise_conv2d(&p, src, f.data, bias, dst).map_err(qerr(self.name()))
        })
    }
}

/// The float32 depthwise convolution; shapes were validated by `output_shapes`.
pub(crate) fn depthwise_f32(p: &DepthwiseConv2d, a: ConvArgs<'_>) -> Result<()> {
    let ConvArgs { x, f, bias, out } = a;
    let (g, oc) = p.window.geometry(x.shape, out.shape, f.shape, p.nchw)?;
    let mult = p.depth_multiplier as usize;
    with_nhwc(p.nchw, x, out, |src, dst| {
        if oc == 0 {
            return Ok(());
        }
        // Narrow rows are mostly border pixels, which the vector kernel sums one at a
        // time: measured (AVX-512), it only wins from 16 output columns on.
        let simd = if mult == 1 && g.out_w >= 16 {
            depthwise_simd::kernel()
        } else {
            None
        };
        if let Some(k) = simd {
            k(Args {
                g: &g,
                src,
                dst: &mut *dst,
                filter: f.data,
                bias,
                act: p.act,
            });
            return Ok(());
        } else if mult == 1 && g.stride_w == 1 && g.dilation_w == 1 {
            vectorized(DepthwiseRows::new(&g, src, dst, f.data, bias));
        } else {
            vectorized(DepthwisePixels {
                g: &g,
                mult,
                oc,
                src,
                dst: &mut *dst,
                filter: f.data,
                bias,
            });
        }
        p.act.apply_slice(dst);
        Ok(())
    })
}

/// The portable per-pixel loops with multiplier 1 (what the vector kernels must equal).
#[cfg(test)]
pub(crate) fn pixels_f32(
    g: &ConvGeometry,
    src: &[f32],
    dst: &mut [f32],
    filter: &[f32],
    bias: &[f32],
) {
    vectorized(DepthwisePixels {
        g,
        mult: 1,
        oc: g.in_c,
        src,
        dst,
        filter,
        bias,
    });
}

/// Pixels per chunk of a [`DepthwiseRows`] span: about 256 floats, whatever the channels.
fn pixels_per_chunk(c: usize) -> usize {
    (256 / c.max(1)).max(1)
}

/// A float32 depthwise convolution with multiplier 1 and unit horizontal stride and
/// dilation, in NHWC, before the activation, row by row: each tap adds `input * weight`
/// over the whole span of an output row it reaches, which is contiguous in both tensors.
/// The weights are tiled to a chunk of pixels, so the inner loop runs over hundreds of
/// floats instead of one pixel's channels. Each output still sums its bias and taps in
/// the same order as [`DepthwisePixels`], so the results are identical.
struct DepthwiseRows<'a> {
    g: &'a ConvGeometry,
    src: &'a [f32],
    dst: &'a mut [f32],
    /// Per tap, its `c` weights repeated for [`pixels_per_chunk`] pixels.
    tiled: Vec<f32>,
    /// The bias repeated the same way.
    bias: Vec<f32>,
}

impl<'a> DepthwiseRows<'a> {
    fn new(
        g: &'a ConvGeometry,
        src: &'a [f32],
        dst: &'a mut [f32],
        filter: &[f32],
        bias: &[f32],
    ) -> Self {
        let c = g.in_c;
        let t = pixels_per_chunk(c);
        let taps = g.filter_h * g.filter_w;
        let mut tiled = Vec::with_capacity(taps * c * t);
        for w in filter.chunks_exact(c).take(taps) {
            for _ in 0..t {
                tiled.extend_from_slice(w);
            }
        }
        DepthwiseRows {
            g,
            src,
            dst,
            tiled,
            bias: bias.repeat(t),
        }
    }
}

impl Body for DepthwiseRows<'_> {
    type Out = ();

    #[inline(always)]
    fn run(self) {
        let DepthwiseRows {
            g,
            src,
            dst,
            tiled,
            bias,
        } = self;
        let (h, w, c, oh, ow) = (g.in_h, g.in_w, g.in_c, g.out_h, g.out_w);
        let (kh, kw, sh, dh) = (g.filter_h, g.filter_w, g.stride_h, g.dilation_h);
        let (pt, pl) = (g.pad_top, g.pad_left);
        let span = pixels_per_chunk(c) * c;
        if ow * c == 0 {
            return;
        }
        for (row, acc) in dst.chunks_exact_mut(ow * c).enumerate() {
            let (b, oy) = (row / oh, row % oh);
            for chunk in acc.chunks_mut(span) {
                chunk.copy_from_slice(&bias[..chunk.len()]);
            }
            for ky in 0..kh {
                let py = oy * sh + ky * dh;
                let iy = py.wrapping_sub(pt);
                if py < pt || iy >= h {
                    continue;
                }
                let in_row = &src[(b * h + iy) * w * c..][..w * c];
                for kx in 0..kw {
                    // Output x reads input x + kx - pl: the outputs whose input is inside.
                    let ox0 = pl.saturating_sub(kx).min(ow);
                    let ox1 = (w + pl).saturating_sub(kx).min(ow).max(ox0);
                    if ox0 == ox1 {
                        continue;
                    }
                    let ix0 = ox0 + kx - pl;
                    let out = &mut acc[ox0 * c..ox1 * c];
                    let inp = &in_row[ix0 * c..][..out.len()];
                    let wt = &tiled[(ky * kw + kx) * span..][..span];
                    for (a, x) in out.chunks_mut(span).zip(inp.chunks(span)) {
                        for ((a, &v), &k) in a.iter_mut().zip(x).zip(wt) {
                            *a = v.mul_add(k, *a);
                        }
                    }
                }
            }
        }
    }
}

/// Every output pixel of a float32 depthwise convolution in NHWC, before the activation,
/// vectorised across channels.
struct DepthwisePixels<'a> {
    g: &'a ConvGeometry,
    mult: usize,
    oc: usize,
    src: &'a [f32],
    dst: &'a mut [f32],
    filter: &'a [f32],
    bias: &'a [f32],
}

impl Body for DepthwisePixels<'_> {
    type Out = ();

    #[inline(always)]
    fn run(self) {
        let DepthwisePixels {
            g,
            mult,
            oc,
            src,
            dst,
            filter,
            bias,
        } = self;
        let (h, w, c, oh, ow) = (g.in_h, g.in_w, g.in_c, g.out_h, g.out_w);
        let (kh, kw) = (g.filter_h, g.filter_w);
        let (sh, sw, dh, dw) = (g.stride_h, g.stride_w, g.dilation_h, g.dilation_w);
        let (pt, pl) = (g.pad_top, g.pad_left);
        for (pix, acc) in dst.chunks_exact_mut(oc).enumerate() {
            let b = pix / (oh * ow);
            let (oy, ox) = ((pix / ow) % oh, pix % ow);
            acc.copy_from_slice(bias);
            for ky in 0..kh {
                let py = oy * sh + ky * dh;
                let iy = py.wrapping_sub(pt);
                if py < pt || iy >= h {
                    continue;
                }
                for kx in 0..kw {
                    let px = ox * sw + kx * dw;
                    let ix = px.wrapping_sub(pl);
                    if px < pl || ix >= w {
                        continue;
                    }
                    let inp = &src[((b * h + iy) * w + ix) * c..][..c];
                    let wt = &filter[(ky * kw + kx) * oc..][..oc];
                    if mult == 1 {
                        for ((a, &v), &k) in acc.iter_mut().zip(inp).zip(wt) {
                            *a = v.mul_add(k, *a);
                        }
                    } else {
                        for ((a, k), &v) in acc
                            .chunks_exact_mut(mult)
                            .zip(wt.chunks_exact(mult))
                            .zip(inp)
                        {
                            for (a, &k) in a.iter_mut().zip(k) {
                                *a = v.mul_add(k, *a);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(64))]

        /// The row-wise loops give bit-identical results to the pixel-wise ones, over rows
        /// long enough to split into several weight tiles.
        #[test]
        fn rows_match_pixels_exactly(
            (n, h, w, c) in (1usize..3, 1usize..6, 1usize..40, 1usize..70),
            (kh, kw, sh, dh) in (1usize..4, 1usize..6, 1usize..3, 1usize..3),
            (pt, pl, pr) in (0usize..3, 0usize..3, 0usize..3),
            seed in any::<u32>(),
        ) {
            // Padding at the top only, vertically.
            prop_assume!(h + pt > (kh - 1) * dh && w + pl + pr >= kw);
            let oh = (h + pt - (kh - 1) * dh - 1) / sh + 1;
            let ow = w + pl + pr + 1 - kw;
            let g = ConvGeometry {
                batches: n, in_h: h, in_w: w, in_c: c, out_h: oh, out_w: ow,
                filter_h: kh, filter_w: kw, stride_h: sh, stride_w: 1,
                dilation_h: dh, dilation_w: 1, pad_top: pt, pad_left: pl,
            };
            let val = |i: usize, md: u32| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 7) % md
            };
            let x: Vec<f32> = (0..n * h * w * c).map(|i| val(i, 97) as f32 * 0.013 - 0.6).collect();
            let f: Vec<f32> = (0..kh * kw * c).map(|i| val(i + 7, 89) as f32 * 0.021 - 0.9).collect();
            let bias: Vec<f32> = (0..c).map(|i| val(i + 3, 13) as f32 * 0.1).collect();
            let mut rows = vec![0.0f32; n * oh * ow * c];
            let mut pixels = rows.clone();
            vectorized(DepthwiseRows::new(&g, &x, &mut rows, &f, &bias));
            vectorized(DepthwisePixels {
                g: &g, mult: 1, oc: c, src: &x, dst: &mut pixels, filter: &f, bias: &bias,
            });
            prop_assert!(rows.iter().zip(&pixels).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }
}
