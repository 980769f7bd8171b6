//! LiteRT's quantised bilinear resize (TFLite's `ResizeBilinearInteger`), NHWC, u8 / i8:
//! source coordinates in 10-bit fixed point and the four-tap sum in 20-bit fixed point,
//! rounded half away from zero. NNAPI's RESIZE_BILINEAR (`super::resize_bilinear`)
//! interpolates the stored integers in float32 and truncates instead, so the two part by
//! a step on many values; a network with several resizes (face_detection_full_range's
//! feature pyramid) then ends many steps from LiteRT's reference. The driver runs this
//! kernel for the LiteRT models it imports (the "dev.vnpu.litert" extension).
//!
//! Parameter words: out_h, out_w, align_corners, half_pixel_centers.

use super::resize_bilinear::{decode_geometry, encode_geometry, resized_shape};
use crate::kernels::kernel::{Cost, Kernel, Words};
use crate::kernels::layout::image_dims;
use crate::kernels::quant::QuantElem;
use crate::kernels::simd::{vectorized, Body};
use crate::kernels::{bad_shape, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// One in 10-bit fixed point.
const ONE: i64 = 1 << 10;

/// Bilinear resize to a fixed output size with LiteRT's integer arithmetic.
#[derive(Debug, Clone, PartialEq)]
pub struct ResizeBilinearInteger {
    /// Output height.
    pub out_h: u32,
    /// Output width.
    pub out_w: u32,
    /// Align the corner pixels of input and output.
    pub align_corners: bool,
    /// Sample at pixel centres.
    pub half_pixel_centers: bool,
}

/// The step between source positions in 10-bit fixed point, rounded to nearest.
fn scale_10(input: usize, output: usize, align_corners: bool) -> i64 {
    let (i, o) = if align_corners && output > 1 {
        (input as i64 - 1, output as i64 - 1)
    } else {
        (input as i64, output as i64)
    };
    (ONE * i + o / 2) / o
}

/// One output index's taps: the lower and upper source index and the weight of the upper
/// one in 10-bit fixed point (the lower one weighs `ONE - weight`). Division truncates
/// toward zero, as C's does; the lower index is kept inside the input, where the
/// reference's rounding could step one past it.
fn taps(dst: usize, scale_10: i64, half_pixel: bool, size: usize) -> (usize, usize, i64) {
    let v = if half_pixel {
        dst as i64 * scale_10 + scale_10 / 2 - ONE / 2
    } else {
        dst as i64 * scale_10
    };
    let last = size as i64 - 1;
    let lo = (v / ONE).clamp(0, last);
    let hi = ((v + ONE - 1) / ONE).min(last);
    (lo as usize, hi as usize, v - ONE * lo)
}

/// `sum / 2^20`, rounded half away from zero (the sum within `±2^30`: see [`Resize`]).
#[inline(always)]
fn round_20(sum: i32) -> i32 {
    let half = 1 << 19;
    (sum + if sum > 0 { half } else { -half }) / (1 << 20)
}

/// The loops of one resize, for [`vectorized`]: per output pixel the four taps' weights
/// (products of 10-bit weights, so in 20-bit fixed point), then per channel a four-term sum
/// in i32, which the vector copies run 8 or 16 channels at a time.
///
/// Exactness: a tap's stored value is at most 128 in size. Where both distances lie in
/// [0, 1] the weights' sizes add up to 2^20; the half-pixel offset's positions before the
/// first row or column (distances down to -0.5) take them to at most 2^22. Then the sum is
/// within 2^29, inside i32 with the rounding's 2^19 added. Only a far upsampling, whose
/// rounded step carries the last positions past the input's end (1 -> 2000 pixels, say),
/// weighs more: such a pixel takes the same arithmetic in i64.
struct Resize<'a, T> {
    dims: (usize, usize, usize, usize),
    out: (usize, usize),
    /// The vertical and horizontal taps (lower, upper, upper weight).
    ys: &'a [(usize, usize, i64)],
    xs: &'a [(usize, usize, i64)],
    src: &'a [T],
    dst: &'a mut [T],
}

impl<T: QuantElem> Body for Resize<'_, T> {
    type Out = ();

    #[inline(always)]
    fn run(self) {
        let (n, h, w, c) = self.dims;
        let (oh, ow) = self.out;
        let mut pixels = self.dst.chunks_exact_mut(c);
        for img in self.src.chunks_exact(h * w * c).take(n) {
            for &(y0, y1, dy) in &self.ys[..oh] {
                for &(x0, x1, dx) in &self.xs[..ow] {
                    let at = |yy: usize, xx: usize| &img[(yy * w + xx) * c..][..c];
                    let (p00, p01, p10, p11) = (at(y0, x0), at(y0, x1), at(y1, x0), at(y1, x1));
                    let ws = [
                        (ONE - dy) * (ONE - dx),
                        dy * (ONE - dx),
                        (ONE - dy) * dx,
                        dy * dx,
                    ];
                    let Some(out) = pixels.next() else { return };
                    if ws.iter().map(|v| v.abs()).sum::<i64>() <= 1 << 22 {
                        let [w00, w10, w01, w11] = ws.map(|v| v as i32);
                        for ch in 0..c {
                            let sum = p00[ch].to_i32() * w00
                                + p10[ch].to_i32() * w10
                                + p01[ch].to_i32() * w01
                                + p11[ch].to_i32() * w11;
                            out[ch] = T::saturate_from_i32(round_20(sum));
                        }
                    } else {
                        for (ch, o) in out.iter_mut().enumerate() {
                            let sum = i64::from(p00[ch].to_i32()) * ws[0]
                                + i64::from(p10[ch].to_i32()) * ws[1]
                                + i64::from(p01[ch].to_i32()) * ws[2]
                                + i64::from(p11[ch].to_i32()) * ws[3];
                            let half = 1 << 19;
                            let q = (sum + if sum > 0 { half } else { -half }) / (1 << 20);
                            *o = T::saturate_from_i32(q.clamp(-256, 256) as i32);
                        }
                    }
                }
            }
        }
    }
}

impl ResizeBilinearInteger {
    fn resize<T: QuantElem>(&self, dims: (usize, usize, usize, usize), src: &[T], dst: &mut [T]) {
        let (_, h, w, _) = dims;
        let (oh, ow) = (self.out_h as usize, self.out_w as usize);
        let (sy, sx) = (
            scale_10(h, oh, self.align_corners),
            scale_10(w, ow, self.align_corners),
        );
        let half = self.half_pixel_centers;
        let ys: Vec<_> = (0..oh).map(|y| taps(y, sy, half, h)).collect();
        let xs: Vec<_> = (0..ow).map(|x| taps(x, sx, half, w)).collect();
        vectorized(Resize {
            dims,
            out: (oh, ow),
            ys: &ys,
            xs: &xs,
            src,
            dst,
        });
    }
}

impl Kernel for ResizeBilinearInteger {
    /// Every output pixel is written.
    fn overwrites_quant8_outputs(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "RESIZE_BILINEAR_INTEGER"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let (out_h, out_w, align_corners, half_pixel_centers) = decode_geometry(w)?;
        Ok(ResizeBilinearInteger {
            out_h,
            out_w,
            align_corners,
            half_pixel_centers,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        let geometry = (self.out_h, self.out_w);
        encode_geometry(w, geometry, self.align_corners, self.half_pixel_centers);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let size = (self.out_h, self.out_w);
        let shapes = resized_shape(self.name(), inputs, &[DType::U8, DType::I8], size, false)?;
        // The fixed-point coordinates must stay well inside i64 (they do for any size
        // that fits memory; the bound keeps the arithmetic provably exact).
        let (_, h, w, _) = image_dims(self.name(), &inputs[0].shape, false)?;
        if h.max(w) > 1 << 24 || self.out_h.max(self.out_w) > 1 << 24 {
            return Err(bad_shape(self.name(), "a spatial size above 2^24"));
        }
        Ok(shapes)
    }

    /// The output keeps the input's type, scale and zero point (the integers are
    /// interpolated as they are).
    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        crate::kernels::kernel::default_check(inputs, outputs)?;
        let (x, y) = (inputs[0], outputs[0]);
        if x.quant.scale != y.quant.scale || x.quant.zero_point != y.quant.zero_point {
            return Err(bad_shape(
                self.name(),
                "the output's scale and zero point must be the input's",
            ));
        }
        Ok(())
    }

    fn cost(&self, _inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let out: u64 = outputs[0].iter().map(|&d| d as u64).product();
        Cost {
            macs: 0,
            elems: out.saturating_mul(4),
        }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let dims = image_dims(self.name(), &x.ty.shape, false)?;
        match x.ty.dtype {
            DType::U8 => self.resize(dims, x.u8s()?, outputs[0].u8s_mut()?),
            _ => self.resize(dims, x.i8s()?, outputs[0].i8s_mut()?),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::conv::testref::Q8;
    use crate::kernels::conv::testutil::run_typed;
    use crate::kernels::KernelOp;
    use proptest::prelude::*;

    /// The reference's arithmetic written out in i128, from its definition: the source
    /// coordinate `v` of output index `d` in 10-bit fixed point, its floor and ceiling
    /// clamped to the input, and the four taps weighted by the distances.
    fn reference(
        x: &[i64],
        (h, w, c): (usize, usize, usize),
        (oh, ow): (usize, usize),
        align: bool,
        half: bool,
    ) -> Vec<i64> {
        let step = |i: usize, o: usize| -> i128 {
            let (i, o) = if align && o > 1 {
                (i as i128 - 1, o as i128 - 1)
            } else {
                (i as i128, o as i128)
            };
            (1024 * i + o / 2) / o
        };
        let coord = |d: usize, s: i128, size: usize| {
            let v = if half {
                d as i128 * s + s / 2 - 512
            } else {
                d as i128 * s
            };
            let lo = (v / 1024).max(0).min(size as i128 - 1);
            let hi = ((v + 1023) / 1024).min(size as i128 - 1);
            (v, lo, hi)
        };
        let (sy, sx) = (step(h, oh), step(w, ow));
        let mut out = Vec::new();
        for oy in 0..oh {
            let (vy, y0, y1) = coord(oy, sy, h);
            for ox in 0..ow {
                let (vx, x0, x1) = coord(ox, sx, w);
                for ch in 0..c {
                    let p = |y: i128, xx: i128| {
                        i128::from(x[((y as usize) * w + xx as usize) * c + ch])
                    };
                    let (fy, fx) = (vy - 1024 * y0, vx - 1024 * x0);
                    let s = p(y0, x0) * (1024 - fy) * (1024 - fx)
                        + p(y1, x0) * fy * (1024 - fx)
                        + p(y0, x1) * (1024 - fy) * fx
                        + p(y1, x1) * fy * fx;
                    let r = if s > 0 { s + (1 << 19) } else { s - (1 << 19) };
                    out.push((r / (1 << 20)) as i64);
                }
            }
        }
        out
    }

    #[test]
    fn upsampling_by_two_with_half_pixel_centres() {
        // 1x2 -> 1x4, i8 [-100, 50]: sources at -0.25, 0.25, 0.75, 1.25 (clamped).
        let q = Q8 {
            signed: true,
            scale: 0.5,
            zp: 3,
        };
        let (_, bytes) = q.store(&[-100 + 128, 50 + 128]);
        let op = KernelOp::from(ResizeBilinearInteger {
            out_h: 1,
            out_w: 4,
            align_corners: false,
            half_pixel_centers: true,
        });
        let out = q.load(&run_typed(&op, &[(q.ty(&[1, 1, 2, 1]), bytes)], q.ty(&[1])).unwrap());
        // -100, then 0.75 * -100 + 0.25 * 50 = -62.5 -> -63 (half away from zero),
        // 0.25 * -100 + 0.75 * 50 = 12.5 -> 13, 50.
        assert_eq!(out, vec![-100, -63, 13, 50]);
    }

    #[test]
    fn far_upsampling_matches_the_definition() {
        // 2 -> 4000 columns: the step rounds to 1/1024 (from 0.51), so the last positions
        // lie up to 2.9 pixels past the input's end, weights beyond the i32 sum's bound.
        for (half, q) in [(false, 0i32), (true, 1)] {
            let q = Q8 {
                signed: q == 1,
                scale: 1.0,
                zp: 0,
            };
            let (xs, bytes) = q.store(&[0, 255, 7, 200]);
            let op = KernelOp::from(ResizeBilinearInteger {
                out_h: 1,
                out_w: 4000,
                align_corners: false,
                half_pixel_centers: half,
            });
            let got = q.load(&run_typed(&op, &[(q.ty(&[1, 1, 2, 2]), bytes)], q.ty(&[1])).unwrap());
            let stored: Vec<i64> = xs.iter().map(|&v| i64::from(v)).collect();
            let want = reference(&stored, (1, 2, 2), (1, 4000), false, half);
            let got: Vec<i64> = got.iter().map(|&v| i64::from(v)).collect();
            assert_eq!(got, want);
        }
    }

    proptest! {
        /// u8 / i8 against the reference's arithmetic in i128, every mode, up- and
        /// down-sampling.
        #[test]
        fn matches_the_fixed_point_definition(
            (h, w, c) in (1usize..6, 1usize..6, 1usize..3),
            (oh, ow) in (1u32..11, 1u32..11),
            mode in 0u8..3,
            q in Q8::arb(),
            raw in proptest::collection::vec(0i32..256, 72),
        ) {
            let (align, half) = (mode == 1, mode == 2);
            let (xs, bytes) = q.store(&raw[..h * w * c]);
            let op = KernelOp::from(ResizeBilinearInteger { out_h: oh, out_w: ow, align_corners: align, half_pixel_centers: half });
            let got = q.load(&run_typed(&op, &[(q.ty(&[1, h, w, c]), bytes)], q.ty(&[1])).unwrap());
            let stored: Vec<i64> = xs.iter().map(|&v| i64::from(v)).collect();
            let want = reference(&stored, (h, w, c), (oh as usize, ow as usize), align, half);
            let got: Vec<i64> = got.iter().map(|&v| i64::from(v)).collect();
            prop_assert_eq!(got, want);
        }
    }
}
