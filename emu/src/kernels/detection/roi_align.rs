//! NNAPI ROI_ALIGN: average of bilinearly interpolated samples over a regular grid of
//! sampling points in each output bin of each region of interest.
//!
//! Inputs: feature map `[N, H, W, C]` (or NCHW), rois `[R, 4]` as `[x1, y1, x2, y2]` in image
//! coordinates (the feature map is the image scaled by `1 / stride`), batch index per roi
//! (int32 `[R]`). float32, float16 (computed in float32), or 8-bit asymmetric features with
//! 16-bit rois (scale 0.125, zero point 0); the quantised path is the reference's integer
//! one: bilinear weights quantised to 1/255, accumulated in int32 and rescaled with a
//! fixed-point multiplier into the output's quantisation. Output `[R, out_h, out_w, C]`
//! (or NCHW). A roi outside the feature map, inverted, NaN, or with a batch index out of
//! range is an error.
//!
//! A roi is at least 1x1 feature cells; each bin samples `h_ratio x w_ratio` points (a ratio
//! of 0 means `ceil(bin size)`).
//!
//! Parameter words: out_h, out_w (>= 1), height_stride, width_stride (f32 > 0), h_ratio,
//! w_ratio (sampling points per bin, 0 adaptive), nchw.

use super::{bad_value, batch_index, check_box_quant, elems, from_f32, to_f32, want_dtype};
use crate::kernels::kernel::{enc, Cost, Kernel, Words};
use crate::kernels::layout::{image_dims, layout_shape, nchw_to_nhwc, nhwc_to_nchw};
use crate::kernels::quant::{
    multiply_by_quantized_multiplier, quantize_multiplier_smaller_than_one,
};
use crate::kernels::{bad_shape, checked_product, KernelError, Result, MAX_ELEMENTS};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// ROI_ALIGN.
#[derive(Debug, Clone, PartialEq)]
pub struct RoiAlign {
    /// Output bins vertically.
    pub out_h: u32,
    /// Output bins horizontally.
    pub out_w: u32,
    /// Image pixels per feature cell, vertically.
    pub height_stride: f32,
    /// Image pixels per feature cell, horizontally.
    pub width_stride: f32,
    /// Sampling points per bin vertically (0: adaptive).
    pub h_ratio: u32,
    /// Sampling points per bin horizontally (0: adaptive).
    pub w_ratio: u32,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

const NAME: &str = "ROI_ALIGN";

/// Decodes a stride: finite and > 0.
pub(crate) fn stride(w: &mut Words<'_>, what: &str) -> Result<f32> {
    let v = w.finite_f32(what)?;
    if v > 0.0 {
        Ok(v)
    } else {
        Err(w.err(format!("{what} must be > 0, got {v}")))
    }
}

/// Validates the shared inputs of ROI_ALIGN and ROI_POOLING and returns the output shape.
pub(crate) fn roi_output_shape(
    op: &'static str,
    inputs: &[&TensorType],
    out_h: u32,
    out_w: u32,
    nchw: bool,
) -> Result<Vec<usize>> {
    let [x, rois, batches] = inputs else {
        return Err(bad_shape(op, "needs 3 inputs"));
    };
    want_dtype(rois, super::box_dtype(op, x.dtype)?)?;
    want_dtype(batches, DType::I32)?;
    check_box_quant(op, "rois", rois)?;
    let (n, h, w, c) = image_dims(op, &x.shape, nchw)?;
    if n == 0 || h == 0 || w == 0 || c == 0 {
        return Err(bad_shape(
            op,
            format!("input {:?} has a zero dimension", x.shape),
        ));
    }
    let r = match rois.shape[..] {
        [r, 4] => r,
        _ => {
            return Err(bad_shape(
                op,
                format!("rois {:?} must be [R, 4]", rois.shape),
            ))
        }
    };
    if batches.shape != [r] {
        return Err(bad_shape(
            op,
            format!("batch indices {:?} must be [{r}]", batches.shape),
        ));
    }
    Ok(layout_shape(r, out_h as usize, out_w as usize, c, nchw))
}

/// A roi's validity as ROI_ALIGN and ROI_POOLING require it: inside the feature map once
/// scaled, not inverted, no NaN.
pub(crate) fn check_roi(
    op: &'static str,
    roi: &[f32],
    h_scale: f32,
    w_scale: f32,
    h: usize,
    w: usize,
) -> Result<()> {
    let (h, w) = (h as f32, w as f32);
    let ok = roi.iter().all(|&v| v >= 0.0)
        && roi[0] * w_scale <= w
        && roi[1] * h_scale <= h
        && roi[2] * w_scale <= w
        && roi[3] * h_scale <= h
        && roi[0] <= roi[2]
        && roi[1] <= roi[3];
    if !ok {
        return Err(bad_value(
            op,
            format!("roi {roi:?} is inverted or outside the feature map"),
        ));
    }
    Ok(())
}

/// One roi's sampling geometry.
struct Geometry {
    h_start: f32,
    w_start: f32,
    h_step: f32,
    w_step: f32,
    h_samples: usize,
    w_samples: usize,
}

/// The bilinear taps of one sampling point: four cell indices (`y * W + x`) and weights.
fn taps(y: f32, x: f32, h: usize, w: usize) -> ([usize; 4], [f32; 4]) {
    // `as` saturates; the rois were checked to lie inside the map, so y, x >= 0.
    let (mut x1, mut y1) = (x.floor() as usize, y.floor() as usize);
    let (mut x2, mut y2) = (x1.saturating_add(1), y1.saturating_add(1));
    let mut dx1 = x - x1 as f32;
    let mut dy1 = y - y1 as f32;
    if x1 >= w - 1 {
        x1 = w - 1;
        x2 = w - 1;
        dx1 = 0.0;
    }
    if y1 >= h - 1 {
        y1 = h - 1;
        y2 = h - 1;
        dy1 = 0.0;
    }
    let (dx2, dy2) = (1.0 - dx1, 1.0 - dy1);
    (
        [y1 * w + x1, y1 * w + x2, y2 * w + x1, y2 * w + x2],
        [dx2 * dy2, dx1 * dy2, dx2 * dy1, dx1 * dy1],
    )
}

impl RoiAlign {
    fn geometry(&self, roi: &[f32], h_scale: f32, w_scale: f32) -> Result<Geometry> {
        let (ws, hs) = (roi[0] * w_scale, roi[1] * h_scale);
        let (we, he) = (roi[2] * w_scale, roi[3] * h_scale);
        let roi_w = (we - ws).max(1.0);
        let roi_h = (he - hs).max(1.0);
        let w_step = roi_w / self.out_w as f32;
        let h_step = roi_h / self.out_h as f32;
        let pick = |ratio: u32, step: f32| {
            if ratio > 0 {
                ratio as usize
            } else {
                step.ceil() as usize
            }
        };
        let (h_samples, w_samples) = (pick(self.h_ratio, h_step), pick(self.w_ratio, w_step));
        let work = [
            self.out_h as usize,
            self.out_w as usize,
            h_samples.max(1),
            w_samples.max(1),
        ];
        if checked_product(&work).is_err() {
            return Err(KernelError::TooLarge);
        }
        Ok(Geometry {
            h_start: hs,
            w_start: ws,
            h_step,
            w_step,
            h_samples,
            w_samples,
        })
    }

    /// Calls `f(bin, taps, weights)` for every sampling point of every bin of a roi
    /// (`bin = i * out_w + j`).
    fn for_each_sample(
        &self,
        g: &Geometry,
        h: usize,
        w: usize,
        mut f: impl FnMut(usize, &[usize; 4], &[f32; 4]),
    ) {
        let h_bin = g.h_step / g.h_samples as f32;
        let w_bin = g.w_step / g.w_samples as f32;
        let ow = self.out_w as usize;
        for i in 0..self.out_h as usize {
            for j in 0..ow {
                let w0 = g.w_step * j as f32 + g.w_start;
                let h0 = g.h_step * i as f32 + g.h_start;
                for yi in 0..g.h_samples {
                    let y = h0 + h_bin / 2.0 + h_bin * yi as f32;
                    for xi in 0..g.w_samples {
                        let x = w0 + w_bin / 2.0 + w_bin * xi as f32;
                        let (t, wt) = taps(y, x, h, w);
                        f(i * ow + j, &t, &wt);
                    }
                }
            }
        }
    }
}

impl Kernel for RoiAlign {
    fn name(&self) -> &'static str {
        NAME
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(RoiAlign {
            out_h: w.nonzero("out_h")?,
            out_w: w.nonzero("out_w")?,
            height_stride: stride(w, "height_stride")?,
            width_stride: stride(w, "width_stride")?,
            h_ratio: w.u32("h_ratio")?,
            w_ratio: w.u32("w_ratio")?,
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([
            self.out_h,
            self.out_w,
            self.height_stride.to_bits(),
            self.width_stride.to_bits(),
            self.h_ratio,
            self.w_ratio,
            enc::b(self.nchw),
        ]);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        3..=3
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let x = inputs.first().map(|t| t.dtype);
        if !matches!(x, Some(DType::F32 | DType::F16 | DType::U8 | DType::I8)) {
            return Err(KernelError::UnsupportedDType {
                op: NAME,
                dtype: x.unwrap_or(DType::Bool8),
            });
        }
        Ok(vec![roi_output_shape(
            NAME, inputs, self.out_h, self.out_w, self.nchw,
        )?])
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let outs: Vec<&[usize]> = outputs.iter().map(|s| &s[..]).collect();
        let ins: Vec<&[usize]> = inputs.iter().map(|t| &t.shape[..]).collect();
        let ratio = u64::from(self.h_ratio.max(1)) * u64::from(self.w_ratio.max(1));
        Cost {
            macs: elems(&outs).saturating_mul(4).saturating_mul(ratio),
            elems: elems(&ins).saturating_add(elems(&outs)),
        }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let (n, h, w, c) = image_dims(NAME, x.shape(), self.nchw)?;
        let rois = to_f32(&inputs[1])?;
        let batches = inputs[2].i32s()?;
        let (h_scale, w_scale) = (1.0 / self.height_stride, 1.0 / self.width_stride);
        let bins = self.out_h as usize * self.out_w as usize;
        let r = batches.len();
        let total = r
            .checked_mul(bins)
            .and_then(|v| v.checked_mul(c))
            .filter(|&v| v <= MAX_ELEMENTS)
            .ok_or(KernelError::TooLarge)?;
        let plane = h * w * c;
        let quant = matches!(x.ty.dtype, DType::U8 | DType::I8);
        let mut out_f = vec![0f32; if quant { 0 } else { total }];
        let mut out_q = vec![0i32; if quant { total } else { 0 }];
        if quant {
            let mut xs: Vec<i32> = match x.ty.dtype {
                DType::U8 => x.u8s()?.iter().map(|&v| i32::from(v)).collect(),
                _ => x.i8s()?.iter().map(|&v| i32::from(v)).collect(),
            };
            if self.nchw {
                xs = nchw_to_nhwc(&xs, n, c, h, w);
            }
            let in_zp = x.ty.quant.zero_point;
            let oq = &outputs[0].ty.quant;
            let (out_scale, out_zp) = (oq.scale, oq.zero_point);
            let (lo, hi) = outputs[0].ty.dtype.int_range().unwrap_or((0, 255));
            let w_unit = 1.0f32 / 255.0;
            for (k, (roi, &b)) in rois.chunks_exact(4).zip(batches).enumerate() {
                let b = batch_index(NAME, b, n)?;
                check_roi(NAME, roi, h_scale, w_scale, h, w)?;
                let g = self.geometry(roi, h_scale, w_scale)?;
                let points = (g.h_samples * g.w_samples) as f32;
                let real = x.ty.quant.scale * w_unit / out_scale / points;
                let (mult, right) = quantize_multiplier_smaller_than_one(f64::from(real))
                    .map_err(|e| bad_value(NAME, e.to_string()))?;
                let map = &xs[b * plane..(b + 1) * plane];
                let mut acc = vec![0i32; bins * c];
                self.for_each_sample(&g, h, w, |bin, t, wt| {
                    let q = wt.map(|v| (v / w_unit).round() as i32);
                    let a = &mut acc[bin * c..(bin + 1) * c];
                    for (ch, av) in a.iter_mut().enumerate() {
                        let mut s = 0i32;
                        for (tap, qw) in t.iter().zip(q) {
                            s = s.wrapping_add(qw.wrapping_mul(map[tap * c + ch] - in_zp));
                        }
                        *av = av.wrapping_add(s);
                    }
                });
                let o = &mut out_q[k * bins * c..(k + 1) * bins * c];
                for (ov, &av) in o.iter_mut().zip(&acc) {
                    let v =
                        multiply_by_quantized_multiplier(av, mult, -right).saturating_add(out_zp);
                    *ov = v.clamp(lo, hi);
                }
            }
            if self.nchw {
                let mut t = vec![0i32; total];
                nhwc_to_nchw(
                    &out_q,
                    r,
                    self.out_h as usize,
                    self.out_w as usize,
                    c,
                    &mut t,
                );
                out_q = t;
            }
            let out = &mut outputs[0];
            match out.ty.dtype {
                DType::U8 => {
                    for (o, &v) in out.u8s_mut()?.iter_mut().zip(&out_q) {
                        *o = v as u8;
                    }
                }
                _ => {
                    for (o, &v) in out.i8s_mut()?.iter_mut().zip(&out_q) {
                        *o = v as i8;
                    }
                }
            }
            return Ok(());
        }
        let mut xs = to_f32(&x)?;
        if self.nchw {
            xs = nchw_to_nhwc(&xs, n, c, h, w);
        }
        for (k, (roi, &b)) in rois.chunks_exact(4).zip(batches).enumerate() {
            let b = batch_index(NAME, b, n)?;
            check_roi(NAME, roi, h_scale, w_scale, h, w)?;
            let g = self.geometry(roi, h_scale, w_scale)?;
            let points = (g.h_samples * g.w_samples) as f32;
            let map = &xs[b * plane..(b + 1) * plane];
            let o = &mut out_f[k * bins * c..(k + 1) * bins * c];
            self.for_each_sample(&g, h, w, |bin, t, wt| {
                let a = &mut o[bin * c..(bin + 1) * c];
                for (ch, av) in a.iter_mut().enumerate() {
                    let mut s = 0f32;
                    for (tap, wv) in t.iter().zip(wt) {
                        s += wv * map[tap * c + ch];
                    }
                    *av += s;
                }
            });
            for v in o.iter_mut() {
                *v /= points;
            }
        }
        if self.nchw {
            let mut t = vec![0f32; total];
            nhwc_to_nchw(
                &out_f,
                r,
                self.out_h as usize,
                self.out_w as usize,
                c,
                &mut t,
            );
            out_f = t;
        }
        from_f32(&mut outputs[0], &out_f)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{run, T};
    use super::*;
    use crate::kernels::KernelOp;

    fn op(nchw: bool) -> KernelOp {
        RoiAlign {
            out_h: 2,
            out_w: 2,
            height_stride: 1.0,
            width_stride: 1.0,
            h_ratio: 0,
            w_ratio: 0,
            nchw,
        }
        .into()
    }

    const F: (DType, f32, i32) = (DType::F32, 0.0, 0);

    #[test]
    fn whole_map_of_a_ramp() {
        // 4x4 ramp x + 4y; the roi covers the whole map: 2x2 bins of 2x2 samples each.
        let data: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let x = T::f32(&[1, 4, 4, 1], &data);
        let rois = T::f32(&[1, 4], &[0.0, 0.0, 4.0, 4.0]);
        let b = T::i32(&[1], &[0]);
        let out = run(&op(false), &[&x, &rois, &b], &[F]).unwrap();
        // Samples at 0.5, 1.5 (bin 0) and 2.5, 3.5 (bin 1, the last clamped to 3).
        // Bin (0,0): mean over y,x in {0.5,1.5} of x + 4y = 1 + 4 = 5.
        let v = out[0].values();
        assert_eq!(v[0], 5.0);
        assert_eq!(out[0].ty.shape, vec![1, 2, 2, 1]);
        let out = run(&op(true), &[&T::f32(&[1, 1, 4, 4], &data), &rois, &b], &[F]).unwrap();
        assert_eq!(out[0].values(), v);
    }

    #[test]
    fn quantised_matches_float_within_one() {
        let data: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let xf = T::f32(&[1, 4, 4, 1], &data);
        let xq = T::u8(
            &[1, 4, 4, 1],
            &data
                .iter()
                .map(|&v| (v * 4.0 + 10.0) as u8)
                .collect::<Vec<_>>(),
            0.25,
            10,
        );
        let rf = T::f32(&[2, 4], &[0.0, 0.0, 4.0, 4.0, 1.0, 0.5, 3.0, 2.0]);
        let rq = T::u16(&[2, 4], &[0, 0, 32, 32, 8, 4, 24, 16], 0.125, 0);
        let b = T::i32(&[2], &[0, 0]);
        let f = run(&op(false), &[&xf, &rf, &b], &[F]).unwrap();
        let q = run(&op(false), &[&xq, &rq, &b], &[(DType::U8, 0.125, 5)]).unwrap();
        for (fv, qv) in f[0].values().iter().zip(q[0].ints()) {
            let want = (fv / 0.125 + 5.0).round() as i64;
            assert!((want - qv).abs() <= 1, "{fv} {qv}");
        }
    }

    #[test]
    fn hostile_rois_and_batches() {
        let x = T::f32(&[1, 2, 2, 1], &[1.0; 4]);
        let b = T::i32(&[1], &[0]);
        for roi in [
            [0.0, 0.0, 3.0, 1.0],
            [-1.0, 0.0, 1.0, 1.0],
            [1.0, 0.0, 0.0, 1.0],
            [f32::NAN, 0.0, 1.0, 1.0],
        ] {
            let rois = T::f32(&[1, 4], &roi);
            assert!(run(&op(false), &[&x, &rois, &b], &[F]).is_err());
        }
        let rois = T::f32(&[1, 4], &[0.0, 0.0, 2.0, 2.0]);
        for bad in [1, -1] {
            let b = T::i32(&[1], &[bad]);
            assert!(run(&op(false), &[&x, &rois, &b], &[F]).is_err());
        }
        let none = T::f32(&[0, 4], &[]);
        let b = T::i32(&[0], &[]);
        let out = run(&op(false), &[&x, &none, &b], &[F]).unwrap();
        assert_eq!(out[0].ty.shape, vec![0, 2, 2, 1]);
    }
}
