//! NNAPI ROI_POOLING: the maximum over each output bin of each region of interest, with
//! the roi snapped to whole feature cells.
//!
//! Inputs: feature map `[N, H, W, C]` (or NCHW), rois `[R, 4]` as `[x1, y1, x2, y2]` in image
//! coordinates (the map is the image scaled by `1 / stride`), batch index per roi (int32
//! `[R]`). float32, float16, or 8-bit asymmetric features with 16-bit rois (scale 0.125,
//! zero point 0); quantised values are compared and copied as stored, so the output has the
//! input's quantisation. An empty bin gives the input's zero point (0.0 for floats). Output
//! `[R, out_h, out_w, C]` (or NCHW). A roi outside the feature map, inverted, NaN, or with
//! a batch index out of range is an error.
//!
//! Parameter words: out_h, out_w (>= 1), height_stride, width_stride (f32 > 0), nchw.

use super::roi_align::{check_roi, roi_output_shape, stride};
use super::{batch_index, elems, to_f32};
use crate::kernels::kernel::{enc, Cost, Kernel, Words};
use crate::kernels::layout::{image_dims, nchw_to_nhwc, nhwc_to_nchw};
use crate::kernels::{KernelError, Result, MAX_ELEMENTS};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// ROI_POOLING.
#[derive(Debug, Clone, PartialEq)]
pub struct RoiPooling {
    /// Output bins vertically.
    pub out_h: u32,
    /// Output bins horizontally.
    pub out_w: u32,
    /// Image pixels per feature cell, vertically.
    pub height_stride: f32,
    /// Image pixels per feature cell, horizontally.
    pub width_stride: f32,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

const NAME: &str = "ROI_POOLING";

/// Max pooling of NHWC `map` (`h x w x c`) over the rois into `out` (`R x oh x ow x c`,
/// NHWC); `empty` fills empty bins.
#[allow(clippy::too_many_arguments)]
fn pool<T: Copy + PartialOrd>(
    k: &RoiPooling,
    map: &[T],
    dims: (usize, usize, usize, usize),
    rois: &[f32],
    batches: &[i32],
    empty: T,
    out: &mut [T],
) -> Result<()> {
    let (n, h, w, c) = dims;
    let (oh, ow) = (k.out_h as usize, k.out_w as usize);
    let (h_scale, w_scale) = (1.0 / k.height_stride, 1.0 / k.width_stride);
    let plane = h * w * c;
    for (r, (roi, &b)) in rois.chunks_exact(4).zip(batches).enumerate() {
        let b = batch_index(NAME, b, n)?;
        check_roi(NAME, roi, h_scale, w_scale, h, w)?;
        // C++ `std::round` (halves away from zero), then int32.
        let ws = (roi[0] * w_scale).round() as i32;
        let hs = (roi[1] * h_scale).round() as i32;
        let we = (roi[2] * w_scale).round() as i32;
        let he = (roi[3] * h_scale).round() as i32;
        let roi_w = we.saturating_sub(ws).saturating_add(1).max(1) as f32;
        let roi_h = he.saturating_sub(hs).saturating_add(1).max(1) as f32;
        let w_step = roi_w / ow as f32;
        let h_step = roi_h / oh as f32;
        let img = &map[b * plane..(b + 1) * plane];
        // `as usize` saturates negatives to 0, as the C++ values are never negative here.
        let at = |v: f32, limit: usize| (v as usize).min(limit);
        for i in 0..oh {
            let y0 = at((h_step * i as f32 + hs as f32).floor(), h);
            let y1 = at((h_step * (i + 1) as f32 + hs as f32).ceil(), h);
            for j in 0..ow {
                let x0 = at((w_step * j as f32 + ws as f32).floor(), w);
                let x1 = at((w_step * (j + 1) as f32 + ws as f32).ceil(), w);
                let o = &mut out[((r * oh + i) * ow + j) * c..][..c];
                for (ch, ov) in o.iter_mut().enumerate() {
                    let mut best: Option<T> = None;
                    for y in y0..y1 {
                        for x in x0..x1 {
                            let v = img[(y * w + x) * c + ch];
                            if best.is_none_or(|m| v > m) {
                                best = Some(v);
                            }
                        }
                    }
                    *ov = best.unwrap_or(empty);
                }
            }
        }
    }
    Ok(())
}

impl RoiPooling {
    fn run_typed<T: Copy + PartialOrd + Default>(
        &self,
        data: &[T],
        shape: &[usize],
        rois: &[f32],
        batches: &[i32],
        empty: T,
        out: &mut [T],
    ) -> Result<()> {
        let (n, h, w, c) = image_dims(NAME, shape, self.nchw)?;
        let r = batches.len();
        let (oh, ow) = (self.out_h as usize, self.out_w as usize);
        if !self.nchw {
            return pool(self, data, (n, h, w, c), rois, batches, empty, out);
        }
        let x = nchw_to_nhwc(data, n, c, h, w);
        let mut tmp = vec![T::default(); out.len()];
        pool(self, &x, (n, h, w, c), rois, batches, empty, &mut tmp)?;
        nhwc_to_nchw(&tmp, r, oh, ow, c, out);
        Ok(())
    }
}

impl Kernel for RoiPooling {
    fn name(&self) -> &'static str {
        NAME
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(RoiPooling {
            out_h: w.nonzero("out_h")?,
            out_w: w.nonzero("out_w")?,
            height_stride: stride(w, "height_stride")?,
            width_stride: stride(w, "width_stride")?,
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([
            self.out_h,
            self.out_w,
            self.height_stride.to_bits(),
            self.width_stride.to_bits(),
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
        let ins: Vec<&[usize]> = inputs.iter().map(|t| &t.shape[..]).collect();
        let outs: Vec<&[usize]> = outputs.iter().map(|s| &s[..]).collect();
        Cost {
            macs: 0,
            elems: elems(&ins).saturating_add(elems(&outs).saturating_mul(4)),
        }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let rois = to_f32(&inputs[1])?;
        let batches = inputs[2].i32s()?;
        let shape = x.shape();
        let out = &mut outputs[0];
        if out.ty.numel() > MAX_ELEMENTS {
            return Err(KernelError::TooLarge);
        }
        let zp = x.ty.quant.zero_point;
        match x.ty.dtype {
            DType::F32 => self.run_typed(x.f32s()?, shape, &rois, batches, 0.0, out.f32s_mut()?),
            DType::F16 => {
                let xs: Vec<f32> = x.f16s()?.iter().map(|v| v.to_f32()).collect();
                let mut o = vec![0f32; out.ty.numel()];
                self.run_typed(&xs, shape, &rois, batches, 0.0, &mut o)?;
                for (d, s) in out.f16s_mut()?.iter_mut().zip(&o) {
                    *d = half::f16::from_f32(*s);
                }
                Ok(())
            }
            DType::U8 => {
                let empty = zp.clamp(0, 255) as u8;
                self.run_typed(x.u8s()?, shape, &rois, batches, empty, out.u8s_mut()?)
            }
            DType::I8 => {
                let empty = zp.clamp(-128, 127) as i8;
                self.run_typed(x.i8s()?, shape, &rois, batches, empty, out.i8s_mut()?)
            }
            dtype => Err(KernelError::UnsupportedDType { op: NAME, dtype }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{run, T};
    use super::*;
    use crate::kernels::KernelOp;

    fn op(nchw: bool) -> KernelOp {
        RoiPooling {
            out_h: 2,
            out_w: 2,
            height_stride: 2.0,
            width_stride: 2.0,
            nchw,
        }
        .into()
    }

    #[test]
    fn max_of_each_bin() {
        let data: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let x = T::f32(&[1, 4, 4, 1], &data);
        // Image box [0, 0, 6, 6] is cells 0..=3 at stride 2: bins of 2x2.
        let rois = T::f32(&[1, 4], &[0.0, 0.0, 6.0, 6.0]);
        let b = T::i32(&[1], &[0]);
        let f = (DType::F32, 0.0, 0);
        let out = run(&op(false), &[&x, &rois, &b], &[f]).unwrap();
        assert_eq!(out[0].values(), vec![5.0, 7.0, 13.0, 15.0]);
        let xc = T::f32(&[1, 1, 4, 4], &data);
        let out = run(&op(true), &[&xc, &rois, &b], &[f]).unwrap();
        assert_eq!(out[0].values(), vec![5.0, 7.0, 13.0, 15.0]);
        let xq = T::i8(&[1, 4, 4, 1], &(0..16).collect::<Vec<i8>>(), 0.5, 3);
        let rq = T::u16(&[1, 4], &[0, 0, 48, 48], 0.125, 0);
        let out = run(&op(false), &[&xq, &rq, &b], &[(DType::I8, 0.5, 3)]).unwrap();
        assert_eq!(out[0].ints(), vec![5, 7, 13, 15]);
    }

    #[test]
    fn hostile() {
        let x = T::f32(&[1, 2, 2, 1], &[f32::NAN; 4]);
        let b = T::i32(&[1], &[0]);
        let f = (DType::F32, 0.0, 0);
        let rois = T::f32(&[1, 4], &[0.0, 0.0, 2.0, 2.0]);
        run(&op(false), &[&x, &rois, &b], &[f]).unwrap();
        let rois = T::f32(&[1, 4], &[0.0, 0.0, 5.0, 2.0]);
        assert!(run(&op(false), &[&x, &rois, &b], &[f]).is_err());
        let rois = T::f32(&[1, 4], &[0.0, 0.0, 2.0, 2.0]);
        let b = T::i32(&[1], &[3]);
        assert!(run(&op(false), &[&x, &rois, &b], &[f]).is_err());
    }
}
