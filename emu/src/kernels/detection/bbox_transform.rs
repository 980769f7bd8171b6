//! NNAPI AXIS_ALIGNED_BBOX_TRANSFORM: applies per-class box deltas `(dx, dy, dw, dh)` to
//! regions of interest and clips the results to their image.
//!
//! A box `[x1, y1, x2, y2]` of width `w`, height `h` and centre `(cx, cy)` becomes the box
//! of centre `(cx + dx * w, cy + dy * h)` and size `(w * exp(dw), h * exp(dh))`, each
//! coordinate clamped to `[0, image width]` or `[0, image height]`.
//!
//! Inputs: rois `[R, 4]`, deltas `[R, 4 * C]`, batch index per roi (int32 `[R]`), image info
//! `[B, 2]` (height, width per batch). float32, float16 (computed in float32), or 16-bit
//! boxes (scale 0.125, zero point 0) with 8-bit asymmetric deltas. Output `[R, 4 * C]` of the
//! rois' type. A batch index outside `0..B` or an inverted roi is an error.
//!
//! No parameter words.

use super::{
    bad_value, batch_index, check_box_quant, elems, from_f32, to_f32, want_dtype, want_rank,
};
use crate::kernels::kernel::{Cost, Kernel, Words};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// AXIS_ALIGNED_BBOX_TRANSFORM.
#[derive(Debug, Clone, PartialEq)]
pub struct BboxTransform;

const NAME: &str = "AXIS_ALIGNED_BBOX_TRANSFORM";

/// Applies `delta` (dx, dy, dw, dh) to `roi` and clips to the image `(height, width)`.
pub(crate) fn transform(roi: &[f32], delta: &[f32], height: f32, width: f32) -> [f32; 4] {
    let (w, h) = (roi[2] - roi[0], roi[3] - roi[1]);
    let (cx, cy) = ((roi[0] + roi[2]) / 2.0, (roi[1] + roi[3]) / 2.0);
    let nw = delta[2].exp() * w;
    let nh = delta[3].exp() * h;
    let ncx = cx + delta[0] * w;
    let ncy = cy + delta[1] * h;
    // C++ `std::min(std::max(v, 0), limit)`.
    let clip = |v: f32, limit: f32| {
        let v = if v < 0.0 { 0.0 } else { v };
        if limit < v {
            limit
        } else {
            v
        }
    };
    [
        clip(ncx - nw / 2.0, width),
        clip(ncy - nh / 2.0, height),
        clip(ncx + nw / 2.0, width),
        clip(ncy + nh / 2.0, height),
    ]
}

/// Requires a valid box: `x1 <= x2` and `y1 <= y2` (NaN fails).
pub(crate) fn check_box(op: &'static str, b: &[f32]) -> Result<()> {
    if !(b[0] <= b[2] && b[1] <= b[3]) {
        return Err(bad_value(op, format!("invalid box {b:?}")));
    }
    Ok(())
}

impl Kernel for BboxTransform {
    fn name(&self) -> &'static str {
        NAME
    }

    fn decode(_w: &mut Words<'_>) -> Result<Self> {
        Ok(BboxTransform)
    }

    fn encode(&self, _w: &mut Vec<u32>) {}

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        4..=4
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let [rois, deltas, batches, info] = inputs else {
            return Err(bad_shape(NAME, "needs 4 inputs"));
        };
        match rois.dtype {
            DType::F32 | DType::F16 => want_dtype(deltas, rois.dtype)?,
            DType::U16 => {
                if !matches!(deltas.dtype, DType::U8 | DType::I8) {
                    return Err(KernelError::UnsupportedDType {
                        op: NAME,
                        dtype: deltas.dtype,
                    });
                }
            }
            dtype => return Err(KernelError::UnsupportedDType { op: NAME, dtype }),
        }
        want_dtype(info, rois.dtype)?;
        want_dtype(batches, DType::I32)?;
        want_rank(NAME, "rois", rois, 2)?;
        want_rank(NAME, "deltas", deltas, 2)?;
        want_rank(NAME, "batch indices", batches, 1)?;
        want_rank(NAME, "image info", info, 2)?;
        check_box_quant(NAME, "rois", rois)?;
        check_box_quant(NAME, "image info", info)?;
        let r = rois.shape[0];
        let d = deltas.shape[1];
        if rois.shape[1] != 4
            || deltas.shape[0] != r
            || d == 0
            || d % 4 != 0
            || batches.shape[0] != r
            || info.shape[0] == 0
            || info.shape[1] != 2
        {
            return Err(bad_shape(
                NAME,
                format!(
                    "rois {:?}, deltas {:?}, batch indices {:?}, image info {:?} do not fit",
                    rois.shape, deltas.shape, batches.shape, info.shape
                ),
            ));
        }
        Ok(vec![vec![r, d]])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        if let (Some(rois), Some(out)) = (inputs.first(), outputs.first()) {
            want_dtype(out, rois.dtype)?;
        }
        Ok(())
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
        let rois = to_f32(&inputs[0])?;
        let deltas = to_f32(&inputs[1])?;
        let batches = inputs[2].i32s()?;
        let info = to_f32(&inputs[3])?;
        let classes4 = inputs[1].shape()[1];
        let nb = inputs[3].shape()[0];
        let mut out = vec![0f32; deltas.len()];
        for (((roi, d), o), &b) in rois
            .chunks_exact(4)
            .zip(deltas.chunks_exact(classes4))
            .zip(out.chunks_exact_mut(classes4))
            .zip(batches)
        {
            let b = batch_index(NAME, b, nb)?;
            check_box(NAME, roi)?;
            let (height, width) = (info[2 * b], info[2 * b + 1]);
            for (dc, oc) in d.chunks_exact(4).zip(o.chunks_exact_mut(4)) {
                oc.copy_from_slice(&transform(roi, dc, height, width));
            }
        }
        from_f32(&mut outputs[0], &out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{run, T};
    use super::*;
    use crate::kernels::KernelOp;

    #[test]
    fn float_matches_hand_computation() {
        let op = KernelOp::from(BboxTransform);
        let rois = T::f32(&[1, 4], &[10.0, 10.0, 30.0, 20.0]);
        let deltas = T::f32(&[1, 8], &[0.0, 0.0, 0.0, 0.0, 0.5, -0.5, 0.0, 0.0]);
        let batches = T::i32(&[1], &[0]);
        let info = T::f32(&[1, 2], &[100.0, 35.0]);
        let out = run(
            &op,
            &[&rois, &deltas, &batches, &info],
            &[(DType::F32, 0.0, 0)],
        )
        .unwrap();
        assert_eq!(
            out[0].values(),
            vec![10.0, 10.0, 30.0, 20.0, 20.0, 5.0, 35.0, 15.0]
        );
    }

    #[test]
    fn quant_boxes() {
        let op = KernelOp::from(BboxTransform);
        let rois = T::u16(&[1, 4], &[80, 80, 240, 160], 0.125, 0);
        let deltas = T::u8(&[1, 4], &[128, 128, 128, 128], 0.05, 128);
        let batches = T::i32(&[1], &[0]);
        let info = T::u16(&[1, 2], &[800, 800], 0.125, 0);
        let out = run(
            &op,
            &[&rois, &deltas, &batches, &info],
            &[(DType::U16, 0.125, 0)],
        )
        .unwrap();
        assert_eq!(out[0].ints(), vec![80, 80, 240, 160]);
    }

    #[test]
    fn hostile_values_are_errors() {
        let op = KernelOp::from(BboxTransform);
        let deltas = T::f32(&[1, 4], &[0.0; 4]);
        let info = T::f32(&[1, 2], &[10.0, 10.0]);
        let good = T::f32(&[1, 4], &[0.0, 0.0, 1.0, 1.0]);
        for b in [-1, 1, i32::MAX] {
            let batches = T::i32(&[1], &[b]);
            assert!(run(
                &op,
                &[&good, &deltas, &batches, &info],
                &[(DType::F32, 0.0, 0)]
            )
            .is_err());
        }
        let batches = T::i32(&[1], &[0]);
        for bad in [[2.0, 0.0, 1.0, 1.0], [f32::NAN, 0.0, 1.0, 1.0]] {
            let rois = T::f32(&[1, 4], &bad);
            assert!(run(
                &op,
                &[&rois, &deltas, &batches, &info],
                &[(DType::F32, 0.0, 0)]
            )
            .is_err());
        }
        let rois = T::f32(&[0, 4], &[]);
        let deltas = T::f32(&[0, 4], &[]);
        let batches = T::i32(&[0], &[]);
        let out = run(
            &op,
            &[&rois, &deltas, &batches, &info],
            &[(DType::F32, 0.0, 0)],
        )
        .unwrap();
        assert_eq!(out[0].ty.shape, vec![0, 4]);
    }
}
