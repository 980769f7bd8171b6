//! NNAPI CONV_2D with explicit padding, strides, dilation, fused activation, NHWC or NCHW.
//! float32 runs on the GEMM (1x1 stride-1 convolutions directly, others through tiled
//! im2col); float16 computes in float32; quantised tensors run on the integer core
//! [`qconv::conv2d`](crate::kernels::qconv::conv2d).
//!
//! Parameter words: the [`ConvWindow`] (pad(4), stride_w, stride_h, dilation_w,
//! dilation_h), act, nchw.
//! Inputs: input, filter `[O,KH,KW,I]`, bias `[O]`; output in the input's layout.

use crate::kernels::conv::window::{decode_act_layout, encode_act_layout, ConvShapes};
use crate::kernels::conv::{
    conv_cost, conv_kernel_methods, qerr, shallow, ConvArgs, ConvCore, ConvEpilogue, ConvWindow,
    QStage,
};
use crate::kernels::gemm::{
    gemm_packed, gemm_packed_rows, pack_b, packed_len, Mat, MatMut, Packed, SegRows, KC,
};
use crate::kernels::kernel::{Cost, Kernel, Words};
use crate::kernels::layout::{layout_shape, with_nhwc};
use crate::kernels::qconv::{self, Conv2dParams, ConvGeometry};
use crate::kernels::quant::QuantElem;
use crate::kernels::{Activation, KernelError, Padding, Result, MAX_ELEMENTS};
use crate::tensor::TensorType;

/// Scratch budget of one im2col tile, in floats (128 KiB): small enough that the tile
/// stays in L2 between being written and the GEMM reading it, and that its buffer comes
/// from the allocator's pool rather than a fresh (page-faulting) mapping each run. Tiny
/// under test, so that the property tests exercise the multi-tile path on small shapes.
const IM2COL_TILE: usize = if cfg!(test) { 64 } else { 1 << 15 };

/// A 2-D convolution.
#[derive(Debug, Clone, PartialEq)]
pub struct Conv2d {
    /// Padding, strides and dilation.
    pub window: ConvWindow,
    /// Fused activation.
    pub act: Activation,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
    /// A fused requantisation of the output (quantised NHWC only).
    pub epilogue: Option<ConvEpilogue>,
}

impl Kernel for Conv2d {
    /// The GEMM stores bias + sums into every output element (no accumulation into old contents).
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
        "CONV_2D"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let window = ConvWindow::decode(w)?;
        let (act, nchw) = decode_act_layout(w)?;
        let epilogue = ConvEpilogue::decode(w, nchw)?;
        Ok(Conv2d {
            window,
            act,
            nchw,
            epilogue,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        self.window.encode(w);
        w.extend(encode_act_layout(self.act, self.nchw));
        ConvEpilogue::encode(&self.epilogue, w);
    }

    conv_kernel_methods!();

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let s = ConvShapes::new(name, inputs, self.nchw, Self::CHANNEL_AXIS)?;
        s.check_filter_channels(name, s.c)?;
        let (oh, ow) = self.window.output_size(name, (s.h, s.w), s.kernel())?;
        Ok(vec![layout_shape(s.n, oh, ow, s.out_c, self.nchw)])
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        conv_cost(outputs, &inputs[1].shape[1..])
    }
}

impl ConvCore for Conv2d {
    const CHANNEL_AXIS: usize = 0;

    fn activation(&self) -> Activation {
        self.act
    }

    fn epilogue(&self) -> Option<ConvEpilogue> {
        self.epilogue
    }

    fn run_f32(&self, a: ConvArgs<'_>) -> Result<()> {
        conv2d_f32(self, a)
    }

    fn run_f32_packed(&self, a: ConvArgs<'_>) -> Result<()> {
        conv2d_f32_with(self, a, true)
    }

    fn run_quant_packed<T: QuantElem + Default>(
        &self,
        stage: &QStage,
        a: ConvArgs<'_, T, i32, i32>,
    ) -> Result<()> {
        let ConvArgs { x, f, bias, out } = a;
        let (geometry, out_c) = self
            .window
            .geometry(x.shape, out.shape, f.shape, self.nchw)?;
        let p = Conv2dParams {
            geometry,
            out_c,
            quant: stage.params(),
        };
        with_nhwc(self.nchw, x, out, |src, dst| {
            qconv::conv2d_packed(&p, src, f.data, bias, dst).map_err(qerr(self.name()))
        })
    }

    /// The quantised convolution on the integer core.
    fn run_quant<T: QuantElem + Default, F: QuantElem>(
        &self,
        stage: &QStage,
        a: ConvArgs<'_, T, F, i32>,
    ) -> Result<()> {
        let ConvArgs { x, f, bias, out } = a;
        let (geometry, out_c) = self
            .window
            .geometry(x.shape, out.shape, f.shape, self.nchw)?;
        let p = Conv2dParams {
            geometry,
            out_c,
            quant: stage.params(),
        };
        with_nhwc(self.nchw, x, out, |src, dst| {
            qconv::conv2d(&p, src, f.data, bias, dst).map_err(qerr(self.name()))
        })
    }
}

/// The float32 convolution; shapes were validated by `output_shapes`.
pub(crate) fn conv2d_f32(p: &Conv2d, a: ConvArgs<'_>) -> Result<()> {
    conv2d_f32_with(p, a, false)
}

/// The float32 convolution with its filter `[O, KH, KW, I]` as given, or (`packed`)
/// already in GEMM panels (B = the filter transposed, `KH*KW*I x O`).
fn conv2d_f32_with(p: &Conv2d, a: ConvArgs<'_>, packed: bool) -> Result<()> {
    let ConvArgs { x, f, bias, out } = a;
    let (g, o) = p.window.geometry(x.shape, out.shape, f.shape, p.nchw)?;
    let (n, h, w, c) = (g.batches, g.in_h, g.in_w, g.in_c);
    let (kh, kw) = (g.filter_h, g.filter_w);
    let k = kh * kw * c;
    let (sh, sw, dh, dw) = (g.stride_h, g.stride_w, g.dilation_h, g.dilation_w);
    let mut own = Vec::new();
    let panels = if packed {
        f.data
    } else {
        own.resize(packed_len(k, o).ok_or(KernelError::TooLarge)?, 0.0);
        let wmat = Mat {
            data: f.data,
            rs: 1,
            cs: k,
        };
        pack_b(k, o, wmat, &mut own)?;
        &own
    };
    let wmat = Packed {
        data: panels,
        k,
        n: o,
    };
    with_nhwc(p.nchw, x, out, |src, dst| {
        let direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && p.window.pad == Padding::default();
        if direct {
            // 1x1, stride 1, no padding: the input is already the [N*H*W, C] matrix.
            let m = n * h * w;
            let a = Mat {
                data: src,
                rs: c,
                cs: 1,
            };
            let c = MatMut { data: dst, rs: o };
            gemm_packed(m, a, wmat, c, Some(bias), p.act.clamp())?;
        } else {
            // A three-channel input (a first layer) runs the direct kernel where it can.
            let shallow = shallow::Args {
                g: &g,
                o,
                src,
                dst: &mut *dst,
                panels,
                bias,
                clamp: p.act.clamp(),
            };
            if !shallow::try_run(shallow) {
                // Windows are read in place where the whole depth is one GEMM block and
                // the filter's rows are contiguous runs of the image (dilation 1).
                let in_place = k <= KC && dh == 1 && dw == 1;
                conv_tiles(&g, o, src, dst, wmat, bias, p.act, in_place)?;
            }
        }
        Ok(())
    })
}

/// The convolution (NHWC, not a plain 1x1) as GEMMs over tiles of output pixels. With
/// `in_place`, a pixel whose window lies inside the image is A's row as it stands: `kh`
/// segments of `kw * c` floats, an image row apart; only windows reaching into the padding
/// are copied (into im2col rows). Else every pixel gets an im2col row. Either way each
/// output sums the same products in the same order, so the bits are the same. The GEMM
/// applies `act` in its store.
#[allow(clippy::too_many_arguments)]
fn conv_tiles(
    g: &ConvGeometry,
    o: usize,
    src: &[f32],
    dst: &mut [f32],
    wmat: Packed<'_>,
    bias: &[f32],
    act: Activation,
    in_place: bool,
) -> Result<()> {
    let (n, h, w, c) = (g.batches, g.in_h, g.in_w, g.in_c);
    let (oh, ow, kh, kw) = (g.out_h, g.out_w, g.filter_h, g.filter_w);
    let k = kh * kw * c;
    let pixels = oh * ow;
    let tile = (IM2COL_TILE / k).max(16).min(pixels.max(1));
    let scratch_len = tile.checked_mul(k).ok_or(KernelError::TooLarge)?;
    if scratch_len > MAX_ELEMENTS.max(k) {
        return Err(KernelError::TooLarge);
    }
    let mut scratch = vec![0.0f32; scratch_len];
    let image = h * w * c;
    for b in 0..n {
        let img = src
            .get(b * image..(b + 1) * image)
            .ok_or(KernelError::TooLarge)?;
        let obatch = dst
            .get_mut(b * pixels * o..(b + 1) * pixels * o)
            .ok_or(KernelError::TooLarge)?;
        let mut p0 = 0;
        while p0 < pixels {
            let rows = tile.min(pixels - p0);
            let cm = MatMut {
                data: &mut obatch[p0 * o..],
                rs: o,
            };
            if in_place {
                // Each pixel's row: its window in the image, or (in the padding) an
                // im2col row in its scratch slot. `(oy, ox)` steps along, no divisions.
                let (mut oy, mut ox) = (p0 / ow, p0 % ow);
                let mut a = Vec::with_capacity(rows);
                for slot in scratch.chunks_exact_mut(k).take(rows) {
                    a.push(match window_start(g, oy, ox) {
                        Some(i) => (img.get(i..).unwrap_or_default(), w * c),
                        None => {
                            im2col_row(g, img, oy, ox, slot);
                            let slot: &[f32] = slot;
                            (slot, kw * c)
                        }
                    });
                    ox += 1;
                    if ox == ow {
                        (oy, ox) = (oy + 1, 0);
                    }
                }
                let a = SegRows {
                    rows: &a,
                    seg: kw * c,
                };
                gemm_packed_rows(a, wmat, cm, Some(bias), act.clamp())?;
            } else {
                for (r, row) in scratch.chunks_exact_mut(k).take(rows).enumerate() {
                    im2col_row(g, img, (p0 + r) / ow, (p0 + r) % ow, row);
                }
                let a = Mat {
                    data: &scratch[..rows * k],
                    rs: k,
                    cs: 1,
                };
                gemm_packed(rows, a, wmat, cm, Some(bias), act.clamp())?;
            }
            p0 += rows;
        }
    }
    Ok(())
}

/// Where the window of output pixel `(oy, ox)` starts in the image, if it lies wholly
/// inside (dilation 1): its rows are then `kw * c` floats each, an image row apart.
fn window_start(g: &ConvGeometry, oy: usize, ox: usize) -> Option<usize> {
    let iy = (oy * g.stride_h).checked_sub(g.pad_top)?;
    let ix = (ox * g.stride_w).checked_sub(g.pad_left)?;
    let inside = iy + g.filter_h <= g.in_h && ix + g.filter_w <= g.in_w;
    inside.then_some((iy * g.in_w + ix) * g.in_c)
}

/// Output pixel `(oy, ox)`'s im2col row (`kh * kw * c` floats: the window's taps in order,
/// zeros for those in the padding).
fn im2col_row(g: &ConvGeometry, img: &[f32], oy: usize, ox: usize, row: &mut [f32]) {
    let (h, w, c) = (g.in_h, g.in_w, g.in_c);
    let (kh, kw) = (g.filter_h, g.filter_w);
    let (sh, sw, dh, dw) = (g.stride_h, g.stride_w, g.dilation_h, g.dilation_w);
    let (pt, pl) = (g.pad_top, g.pad_left);
    for ky in 0..kh {
        // Position in padded coordinates; in the input if in [pt, pt+h).
        let py = oy * sh + ky * dh;
        let iy = py.wrapping_sub(pt);
        // A whole filter row inside the input is one contiguous run of `kw * c` floats
        // (dilation 1): one copy, not `kw`.
        let ix0 = (ox * sw).wrapping_sub(pl);
        let inside = py >= pt && iy < h && ox * sw >= pl && ix0 + kw <= w;
        if dw == 1 && inside {
            row[ky * kw * c..][..kw * c].copy_from_slice(&img[(iy * w + ix0) * c..][..kw * c]);
            continue;
        }
        for kx in 0..kw {
            let seg = &mut row[(ky * kw + kx) * c..][..c];
            let px = ox * sw + kx * dw;
            let ix = px.wrapping_sub(pl);
            if py >= pt && iy < h && px >= pl && ix < w {
                seg.copy_from_slice(&img[(iy * w + ix) * c..][..c]);
            } else {
                seg.fill(0.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::conv::testutil::floats;
    use proptest::prelude::*;

    /// The geometry of input `[n, h, w, c]` under filter `[kh, kw]`, strides `[sh, sw]`
    /// and padding `[top, bottom, left, right]` (dilation 1).
    fn geometry(
        [n, h, w, c]: [usize; 4],
        [kh, kw, sh, sw]: [usize; 4],
        [pt, pb, pl, pr]: [usize; 4],
    ) -> ConvGeometry {
        ConvGeometry {
            batches: n,
            in_h: h,
            in_w: w,
            in_c: c,
            out_h: (h + pt + pb - kh) / sh + 1,
            out_w: (w + pl + pr - kw) / sw + 1,
            filter_h: kh,
            filter_w: kw,
            stride_h: sh,
            stride_w: sw,
            dilation_h: 1,
            dilation_w: 1,
            pad_top: pt,
            pad_left: pl,
        }
    }

    proptest! {
        /// Windows read in place give the im2col path's bits, over every border case
        /// (each side's padding on its own) and panel remainder.
        #[test]
        fn in_place_windows_match_im2col(
            (n, h, w, c, o) in (1usize..3, 1usize..10, 1usize..10, 1usize..9, 1usize..41),
            (kh, kw, sh, sw) in (1usize..6, 1usize..6, 1usize..4, 1usize..4),
            (pt, pb, pl, pr) in (0usize..3, 0usize..3, 0usize..3, 0usize..3),
            act in prop_oneof![Just(Activation::None), Just(Activation::Relu1)],
            seed in any::<u32>(),
        ) {
            prop_assume!(h + pt + pb >= kh && w + pl + pr >= kw);
            let g = geometry([n, h, w, c], [kh, kw, sh, sw], [pt, pb, pl, pr]);
            let k = kh * kw * c;
            let x = floats(n * h * w * c, seed);
            let f = floats(o * k, seed ^ 7);
            let bias = floats(o, seed ^ 9);
            let mut panels = vec![0.0; packed_len(k, o).unwrap()];
            pack_b(k, o, Mat { data: &f, rs: 1, cs: k }, &mut panels).unwrap();
            let wmat = Packed { data: &panels, k, n: o };
            let len = n * g.out_h * g.out_w * o;
            let (mut want, mut got) = (vec![f32::NAN; len], vec![f32::NAN; len]);
            conv_tiles(&g, o, &x, &mut want, wmat, &bias, act, false).unwrap();
            conv_tiles(&g, o, &x, &mut got, wmat, &bias, act, true).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&want), bits(&got));
        }

        /// The direct kernel for three-channel inputs gives the GEMM path's bits at every
        /// instruction-set level the CPU has, over borders, strides, both filter widths,
        /// one and two panels a tile with a remainder, and images too narrow for a tile.
        #[test]
        fn shallow_matches_the_gemm_path(
            (n, h, w, o) in (1usize..3, 1usize..12, 1usize..40, 1usize..41),
            (kh, kw, sh, sw) in (1usize..6, prop_oneof![Just(3usize), Just(5)], 1usize..3, 1usize..3),
            (pt, pb, pl, pr) in (0usize..3, 0usize..3, 0usize..3, 0usize..3),
            act in prop_oneof![Just(Activation::None), Just(Activation::Relu), Just(Activation::Relu1)],
            zeros in any::<bool>(),
            seed in any::<u32>(),
        ) {
            prop_assume!(h + pt + pb >= kh && w + pl + pr >= kw);
            let c = 3;
            let g = geometry([n, h, w, c], [kh, kw, sh, sw], [pt, pb, pl, pr]);
            let k = kh * kw * c;
            let mut x = floats(n * h * w * c, seed);
            if zeros {
                // Exact zeros and negative zeros: signs of zero sums must match too.
                x.iter_mut().step_by(3).for_each(|v| *v = -0.0);
            }
            let f = floats(o * k, seed ^ 7);
            let bias = floats(o, seed ^ 9);
            let mut panels = vec![0.0; packed_len(k, o).unwrap()];
            pack_b(k, o, Mat { data: &f, rs: 1, cs: k }, &mut panels).unwrap();
            let wmat = Packed { data: &panels, k, n: o };
            let len = n * g.out_h * g.out_w * o;
            let mut want = vec![f32::NAN; len];
            conv_tiles(&g, o, &x, &mut want, wmat, &bias, act, true).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            use crate::kernels::isa::{detected, Isa};
            for level in [Isa::Avx2, Isa::Avx512].into_iter().filter(|&l| l <= detected()) {
                let mut got = vec![f32::NAN; len];
                let args = shallow::Args {
                    g: &g,
                    o,
                    src: &x,
                    dst: &mut got,
                    panels: &panels,
                    bias: &bias,
                    clamp: act.clamp(),
                };
                prop_assert!(shallow::try_run_at(args, level), "{:?} not taken", level);
                prop_assert_eq!(bits(&want), bits(&got), "{:?}", level);
            }
        }
    }
}
