//! NNAPI AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D with explicit padding. AVERAGE and L2
//! average over the in-bounds part of each window only; a window lying wholly in the
//! padding gives 0, and MAX pooling of such a window gives `f32::MIN` (the initial value of
//! the TFLite kernel), before the fused activation. float16 computes in float32.
//! Quantised (u8, i8; AVERAGE and MAX only) pools the stored integers as the NNAPI
//! reference does: the average rounds half away from zero in integer division, the output
//! has the input's scale and zero point, and the activation clamps to the output's
//! quantised activation range.
//!
//! Parameter words: kind (Average 0, Max 1, L2 2), pad(4), stride_w, stride_h, filter_w,
//! filter_h, act, nchw.

use super::qmax_simd;
use crate::kernels::isa::isa;
use crate::kernels::kernel::{enc, same_dtype, Cost, Kernel, Words};
use crate::kernels::layout::{conv_out_size, image_dims, layout_shape, nhwc_dims, with_nhwc};
use crate::kernels::quant::{quantized_activation_range, QuantElem};
use crate::kernels::simd::{vectorized, Body};
use crate::kernels::{bad_shape, Activation, KernelError, Padding, Result, Tensor, TensorMut};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

/// Which pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// Mean of the window.
    Average,
    /// Maximum of the window.
    Max,
    /// Root mean square of the window.
    L2,
}

const KINDS: [(PoolKind, &str); 3] = [
    (PoolKind::Average, "AVERAGE_POOL_2D"),
    (PoolKind::Max, "MAX_POOL_2D"),
    (PoolKind::L2, "L2_POOL_2D"),
];

/// A 2-D pooling window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pool {
    /// Which pooling.
    pub kind: PoolKind,
    /// Explicit padding.
    pub pad: Padding,
    /// Horizontal stride.
    pub stride_w: u32,
    /// Vertical stride.
    pub stride_h: u32,
    /// Window width.
    pub filter_w: u32,
    /// Window height.
    pub filter_h: u32,
    /// Fused activation.
    pub act: Activation,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

impl Pool {
    fn index(&self) -> usize {
        KINDS.iter().position(|(k, _)| *k == self.kind).unwrap_or(0)
    }
}

impl Kernel for Pool {
    /// Each output pixel starts from its initial value (fill), then its window.
    fn overwrites_f32_outputs(&self) -> bool {
        true
    }

    /// The quantised pools write each output pixel from its window as well.
    fn overwrites_quant8_outputs(&self) -> bool {
        true
    }

    crate::kernels::kernel::fused_activation_field!();

    fn name(&self) -> &'static str {
        KINDS[self.index()].1
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let k = w.u32("kind")?;
        let (kind, _) = *KINDS
            .get(k as usize)
            .ok_or_else(|| w.err(format!("bad pool kind {k}")))?;
        Ok(Pool {
            kind,
            pad: w.padding()?,
            stride_w: w.nonzero("stride_w")?,
            stride_h: w.nonzero("stride_h")?,
            filter_w: w.nonzero("filter_w")?,
            filter_h: w.nonzero("filter_h")?,
            act: w.act()?,
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.index() as u32);
        w.extend(enc::pad(&self.pad));
        w.extend([
            self.stride_w,
            self.stride_h,
            self.filter_w,
            self.filter_h,
            self.act as u32,
            enc::b(self.nchw),
        ]);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let dt = same_dtype(
            name,
            inputs,
            &[DType::F32, DType::F16, DType::U8, DType::I8],
        )?;
        if matches!(dt, DType::U8 | DType::I8) && self.kind == PoolKind::L2 {
            return Err(KernelError::UnsupportedDType {
                op: name,
                dtype: dt,
            });
        }
        let x = &inputs[0].shape;
        let (n, h, w, c) = image_dims(name, x, self.nchw)?;
        if h == 0 || w == 0 || c == 0 {
            return Err(bad_shape(
                name,
                format!("input {x:?} has a zero spatial or channel size"),
            ));
        }
        let oh = conv_out_size(
            h,
            self.pad.top,
            self.pad.bottom,
            self.filter_h as usize,
            1,
            self.stride_h,
        )
        .ok_or_else(|| bad_shape(name, "filter taller than the padded input"))?;
        let ow = conv_out_size(
            w,
            self.pad.left,
            self.pad.right,
            self.filter_w as usize,
            1,
            self.stride_w,
        )
        .ok_or_else(|| bad_shape(name, "filter wider than the padded input"))?;
        Ok(vec![layout_shape(n, oh, ow, c, self.nchw)])
    }

    fn cost(&self, _inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let out: u64 = outputs[0].iter().map(|&d| d as u64).product();
        let win = u64::from(self.filter_w) * u64::from(self.filter_h);
        Cost {
            macs: 0,
            elems: out.saturating_mul(win),
        }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let (x, out) = (inputs[0], &mut outputs[0]);
        let q = out.ty.quant.clone();
        let oshape = out.ty.shape.clone();
        if self.kind == PoolKind::Max && !self.nchw {
            match x.ty.dtype {
                DType::U8 => return max_q::<false>(self, x, out),
                DType::I8 => return max_q::<true>(self, x, out),
                _ => {}
            }
        }
        match x.ty.dtype {
            DType::U8 => pool_q(
                self,
                Tensor {
                    shape: x.shape(),
                    data: x.u8s()?,
                },
                TensorMut {
                    shape: &oshape,
                    data: out.u8s_mut()?,
                },
                q.scale,
                q.zero_point,
            ),
            DType::I8 => pool_q(
                self,
                Tensor {
                    shape: x.shape(),
                    data: x.i8s()?,
                },
                TensorMut {
                    shape: &oshape,
                    data: out.i8s_mut()?,
                },
                q.scale,
                q.zero_point,
            ),
            _ => widen_f16(inputs, outputs, |ins, outs| {
                pool_f32(self, Tensor::f32(&ins[0])?, TensorMut::f32(&mut outs[0])?)
            }),
        }
    }
}

/// The quantised MAX_POOL_2D in NHWC on stored bytes (`SIGNED`: int8, else uint8),
/// vectorised (`qmax_simd`); shapes were validated.
fn max_q<const SIGNED: bool>(p: &Pool, x: View<'_>, out: &mut ViewMut<'_>) -> Result<()> {
    let (n, h, w, c) = nhwc_dims(x.shape(), false).ok_or(KernelError::TooLarge)?;
    let (_, oh, ow, _) = nhwc_dims(&out.ty.shape, false).ok_or(KernelError::TooLarge)?;
    let (min, max) = if SIGNED { (-128, 127) } else { (0, 255) };
    let q = &out.ty.quant;
    let (lo, hi) = quantized_activation_range(p.act as u32, q.scale, q.zero_point, min, max);
    // The reference clamps to `[lo, max(lo, hi)]`, then saturates to the type.
    let (lo, hi) = (lo.clamp(min, max), hi.max(lo).clamp(min, max));
    let g = qmax_simd::Geometry {
        input: (n, h, w, c),
        out_hw: (oh, ow),
        stride: (p.stride_h as usize, p.stride_w as usize),
        filter: (p.filter_h as usize, p.filter_w as usize),
        pad: (p.pad.top as usize, p.pad.left as usize),
    };
    if x.bytes.len() < n * h * w * c || out.bytes.len() < n * oh * ow * c {
        return Err(KernelError::TooLarge);
    }
    qmax_simd::max_pool_at::<SIGNED>(isa(), &g, x.bytes, out.bytes, (lo as u8, hi as u8));
    Ok(())
}

/// The quantised pooling (AVERAGE, MAX) on stored integers; shapes were validated.
fn pool_q<T: QuantElem + Default>(
    p: &Pool,
    x: Tensor<'_, T>,
    out: TensorMut<'_, T>,
    scale: f32,
    zero_point: i32,
) -> Result<()> {
    let (n, h, w, c) = nhwc_dims(x.shape, p.nchw).ok_or(KernelError::TooLarge)?;
    let (_, oh, ow, _) = nhwc_dims(out.shape, p.nchw).ok_or(KernelError::TooLarge)?;
    let (sh, sw) = (p.stride_h as usize, p.stride_w as usize);
    let (fh, fw) = (p.filter_h as usize, p.filter_w as usize);
    let (pt, pl) = (p.pad.top as usize, p.pad.left as usize);
    let (lo, hi) = quantized_activation_range(p.act as u32, scale, zero_point, T::MIN, T::MAX);
    let mut acc = vec![0i32; c];
    with_nhwc(p.nchw, x, out, |src, dst| {
        for b in 0..n {
            for oy in 0..oh {
                let (y0, y1) = window(oy * sh, fh, pt, h);
                for ox in 0..ow {
                    let (x0, x1) = window(ox * sw, fw, pl, w);
                    let max = p.kind == PoolKind::Max;
                    acc.fill(if max { T::MIN } else { 0 });
                    for iy in y0..y1 {
                        for ix in x0..x1 {
                            let inp = &src[((b * h + iy) * w + ix) * c..][..c];
                            for (a, &v) in acc.iter_mut().zip(inp) {
                                let v = v.to_i32();
                                if max {
                                    *a = (*a).max(v);
                                } else {
                                    // At most 2^31 / 256 window elements: no overflow.
                                    *a = a.saturating_add(v);
                                }
                            }
                        }
                    }
                    let count = ((y1 - y0) * (x1 - x0)) as i64;
                    let o = &mut dst[((b * oh + oy) * ow + ox) * c..][..c];
                    for (d, &a) in o.iter_mut().zip(&acc) {
                        let v = if max || count == 0 {
                            a
                        } else {
                            let a = i64::from(a);
                            let r = if a > 0 {
                                (a + count / 2) / count
                            } else {
                                (a - count / 2) / count
                            };
                            r as i32
                        };
                        *d = T::saturate_from_i32(v.clamp(lo, hi.max(lo)));
                    }
                }
            }
        }
        Ok(())
    })
}

/// The in-bounds input range `[lo, hi)` of a window starting at padded position `start`.
pub(super) fn window(start: usize, len: usize, pad: usize, size: usize) -> (usize, usize) {
    let lo = start.max(pad) - pad;
    let hi = (start + len).min(pad + size).saturating_sub(pad);
    (lo, hi.max(lo))
}

/// The float32 pooling; shapes were validated by `output_shapes`.
pub(crate) fn pool_f32(p: &Pool, x: Tensor<'_>, out: TensorMut<'_>) -> Result<()> {
    let in_dims = nhwc_dims(x.shape, p.nchw).ok_or(KernelError::TooLarge)?;
    let (_, oh, ow, _) = nhwc_dims(out.shape, p.nchw).ok_or(KernelError::TooLarge)?;
    with_nhwc(p.nchw, x, out, |src, dst| {
        vectorized(PoolPixels {
            p,
            in_dims,
            out_hw: (oh, ow),
            src,
            dst: &mut *dst,
        });
        p.act.apply_slice(dst);
        Ok(())
    })
}

/// Every output pixel of a float32 pooling in NHWC, before the activation, vectorised
/// across channels.
struct PoolPixels<'a> {
    p: &'a Pool,
    /// The input's `(n, h, w, c)`.
    in_dims: (usize, usize, usize, usize),
    out_hw: (usize, usize),
    src: &'a [f32],
    dst: &'a mut [f32],
}

impl Body for PoolPixels<'_> {
    type Out = ();

    #[inline(always)]
    fn run(self) {
        let PoolPixels {
            p,
            in_dims: (n, h, w, c),
            out_hw: (oh, ow),
            src,
            dst,
        } = self;
        let kind = p.kind;
        let (sh, sw) = (p.stride_h as usize, p.stride_w as usize);
        let (fh, fw) = (p.filter_h as usize, p.filter_w as usize);
        let (pt, pl) = (p.pad.top as usize, p.pad.left as usize);
        for b in 0..n {
            for oy in 0..oh {
                let (y0, y1) = window(oy * sh, fh, pt, h);
                for ox in 0..ow {
                    let (x0, x1) = window(ox * sw, fw, pl, w);
                    let acc = &mut dst[((b * oh + oy) * ow + ox) * c..][..c];
                    if kind == PoolKind::Max {
                        let img = &src[b * h * w * c..][..h * w * c];
                        max_window(acc, img, y0..y1, (x0, x1), (w, c));
                        continue;
                    }
                    acc.fill(0.0);
                    for iy in y0..y1 {
                        for ix in x0..x1 {
                            let inp = &src[((b * h + iy) * w + ix) * c..][..c];
                            match kind {
                                PoolKind::Average => {
                                    for (a, &v) in acc.iter_mut().zip(inp) {
                                        *a += v;
                                    }
                                }
                                PoolKind::L2 => {
                                    for (a, &v) in acc.iter_mut().zip(inp) {
                                        *a += v * v;
                                    }
                                }
                                PoolKind::Max => {}
                            }
                        }
                    }
                    let count = (y1 - y0) * (x1 - x0);
                    if count > 0 && kind != PoolKind::Max {
                        let inv = 1.0 / count as f32;
                        for a in acc.iter_mut() {
                            *a = if kind == PoolKind::L2 {
                                (*a * inv).sqrt()
                            } else {
                                *a * inv
                            };
                        }
                    }
                }
            }
        }
    }
}

/// Channels one pass of [`max_window`] keeps in registers (one AVX-512 vector).
const MAX_LANES: usize = 16;

/// One output pixel of a max pooling: `acc[ch]` = the largest of the window's values of
/// channel `ch` (`f32::MIN` for an empty window); `rows` are the window's input rows and
/// `[x0, x1)` its pixels in each. The maximum of each block of channels is kept in a local
/// array (a register) over the whole window and stored once: updating `acc` in memory tap
/// by tap made the compiler use masked stores, which do not forward to the next tap's load
/// (a stall per tap, 3-10x slower).
#[inline(always)]
fn max_window(
    acc: &mut [f32],
    src: &[f32],
    rows: std::ops::Range<usize>,
    (x0, x1): (usize, usize),
    (w, c): (usize, usize),
) {
    for (j, out) in acc.chunks_mut(MAX_LANES).enumerate() {
        let n = out.len();
        let mut m = [f32::MIN; MAX_LANES];
        for iy in rows.clone() {
            for ix in x0..x1 {
                let at = (iy * w + ix) * c + j * MAX_LANES;
                // All lanes at once (a short block's tail as f32::MIN), so `m` is a value
                // the compiler keeps in a register; a full block is read in place through
                // a fixed-size reference (copied into an array first, it was assembled
                // from pieces).
                let full = src
                    .get(at..at + MAX_LANES)
                    .filter(|_| n == MAX_LANES)
                    .and_then(|v| <&[f32; MAX_LANES]>::try_from(v).ok());
                let tail: [f32; MAX_LANES];
                let v = match full {
                    Some(v) => v,
                    None => {
                        tail = std::array::from_fn(|i| if i < n { src[at + i] } else { f32::MIN });
                        &tail
                    }
                };
                for i in 0..MAX_LANES {
                    // As the reference: NaN never replaces the maximum so far.
                    m[i] = if v[i] > m[i] { v[i] } else { m[i] };
                }
            }
        }
        // A full block as one fixed-size store (a slice copy of run-time length is a
        // library call per pixel).
        match <&mut [f32; MAX_LANES]>::try_from(&mut *out) {
            Ok(full) => *full = m,
            Err(_) => out.copy_from_slice(&m[..n]),
        }
    }
}

#[cfg(test)]
mod quant_tests {
    use super::*;
    use crate::kernels::conv::testref::{self, to_nchw, Q8};
    use crate::kernels::conv::testutil::run_typed;
    use crate::kernels::KernelOp;
    use proptest::prelude::*;

    /// NCHW `[n,c,h,w]` (dimensions given as NHWC) back to NHWC.
    fn from_nchw<T: Copy>(v: &[T], [n, h, w, c]: [usize; 4]) -> Vec<T> {
        let mut out = Vec::with_capacity(v.len());
        for b in 0..n {
            for p in 0..h * w {
                for ch in 0..c {
                    out.push(v[(b * c + ch) * h * w + p]);
                }
            }
        }
        out
    }

    proptest! {
        /// u8 average pooling against the f64 mean of the stored values, within 1.
        #[test]
        fn u8_average_within_one(xs in proptest::collection::vec(0u8..=255, 16), f in 1u32..4) {
            let p = Pool {
                kind: PoolKind::Average,
                pad: Padding { left: 0, right: 0, top: 0, bottom: 0 },
                stride_w: 1,
                stride_h: 1,
                filter_w: f,
                filter_h: f,
                act: Activation::None,
                nchw: false,
            };
            let o = 4 - f as usize + 1;
            let shape = [1usize, 4, 4, 1];
            let oshape = [1usize, o, o, 1];
            let mut out = vec![0u8; o * o];
            pool_q(&p, Tensor { shape: &shape, data: &xs }, TensorMut { shape: &oshape, data: &mut out }, 0.5, 0).unwrap();
            for oy in 0..o {
                for ox in 0..o {
                    let mut s = 0.0f64;
                    for y in oy..oy + f as usize {
                        for x in ox..ox + f as usize {
                            s += f64::from(xs[y * 4 + x]);
                        }
                    }
                    let want = s / f64::from(f * f);
                    prop_assert!((f64::from(out[oy * o + ox]) - want).abs() <= 1.0);
                }
            }
        }

        /// u8 / i8 MAX_POOL_2D (padding, strides, fused activation, NHWC or NCHW)
        /// against dequantise -> f64 max and activation -> requantise, within 1.
        #[test]
        fn quant_max_within_one_of_f64(
            (h, w, c) in (1usize..5, 1usize..5, 1usize..3),
            (fh, fw, sh, sw) in (1u32..4, 1u32..4, 1u32..3, 1u32..3),
            (pt, pl) in (0u32..3, 0u32..3),
            act in 0u32..4,
            nchw in any::<bool>(),
            q in Q8::arb(),
            raw in proptest::collection::vec(0i32..256, 32),
        ) {
            // Padding smaller than the window: no window lies wholly in the padding.
            let pad = Padding { left: pl % fw, right: pl % fw, top: pt % fh, bottom: pt % fh };
            let act = [Activation::None, Activation::Relu, Activation::Relu1, Activation::Relu6][act as usize];
            let p = Pool { kind: PoolKind::Max, pad, stride_w: sw, stride_h: sh, filter_w: fw, filter_h: fh, act, nchw };
            let (xs, bytes) = q.store(&raw[..h * w * c]);
            let shape = if nchw { [1, c, h, w] } else { [1, h, w, c] };
            let bytes = if nchw { to_nchw(&bytes, [1, h, w, c]) } else { bytes };
            let op = KernelOp::from(p);
            let Ok(out) = run_typed(&op, &[(q.ty(&shape), bytes)], q.ty(&[1])) else {
                // A window larger than the padded input: no output size, nothing to compare.
                prop_assume!(false);
                unreachable!()
            };
            let out = q.load(&out);
            let oh = (h + 2 * pad.top as usize - fh as usize) / sh as usize + 1;
            let ow = (w + 2 * pad.left as usize - fw as usize) / sw as usize + 1;
            let out = if nchw { from_nchw(&out, [1, oh, ow, c]) } else { out };
            prop_assert_eq!(out.len(), oh * ow * c);
            for oy in 0..oh {
                for ox in 0..ow {
                    for ch in 0..c {
                        let mut m = f64::MIN;
                        for ky in 0..fh as usize {
                            for kx in 0..fw as usize {
                                let (y, x) = ((oy * sh as usize + ky) as i64 - i64::from(pad.top), (ox * sw as usize + kx) as i64 - i64::from(pad.left));
                                if (0..h as i64).contains(&y) && (0..w as i64).contains(&x) {
                                    let v = xs[((y as usize) * w + x as usize) * c + ch];
                                    m = m.max(q.real(v));
                                }
                            }
                        }
                        let want = q.quantize(testref::act(act, m));
                        let got = out[(oy * ow + ox) * c + ch];
                        prop_assert!((got - want).abs() <= 1, "{} vs {}", got, want);
                    }
                }
            }
        }
    }
}
