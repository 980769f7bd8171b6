//! NNAPI HEATMAP_MAX_KEYPOINT: the location and score of each keypoint's heatmap maximum,
//! refined to sub-pixel precision by a quadratic fit around the maximum, mapped into its box.
//!
//! Inputs: heatmaps `[N, S, S, K]` (NHWC) or `[N, K, S, S]` (NCHW), S >= 2; boxes `[N, 4]`.
//! float32, float16 (computed in float32, with a looser singularity tolerance), or 8-bit
//! asymmetric heatmaps with 16-bit boxes (scale 0.125, zero point 0). Outputs: scores
//! `[N, K]` (the heatmaps' type; quantised with the output's own scale), keypoints
//! `[N, K, 2]` as `(x, y)` (the boxes' type). An inverted box is an error.
//!
//! Parameter words: nchw.

use super::{bad_value, check_box_quant, elems, from_f32, to_f32, want_dtype, want_rank};
use crate::kernels::kernel::{enc, Cost, Kernel, Words};
use crate::kernels::layout::{nchw_to_nhwc, nhwc_dims};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// HEATMAP_MAX_KEYPOINT.
#[derive(Debug, Clone, PartialEq)]
pub struct HeatmapMaxKeypoint {
    /// NCHW heatmaps (else NHWC).
    pub nchw: bool,
}

const NAME: &str = "HEATMAP_MAX_KEYPOINT";

/// Fits a quadratic to the 3x3 `grid` around a maximum: returns the offset `(dx, dy)` of
/// the fitted peak (each at most 1.5 in magnitude, scaled down together) and its value, or
/// `None` when the system is singular within `atol + rtol * |A00 * A11|`.
fn solve_for_delta(grid: &[[f32; 3]; 3], atol: f32, rtol: f32) -> Option<([f32; 2], f32)> {
    let b = [
        -(grid[1][2] - grid[1][0]) / 2.0,
        -(grid[2][1] - grid[0][1]) / 2.0,
    ];
    let a00 = grid[1][0] - 2.0 * grid[1][1] + grid[1][2];
    let a01 = (grid[2][2] - grid[2][0] - grid[0][2] + grid[0][0]) / 4.0;
    let a10 = a01;
    let a11 = grid[0][1] - 2.0 * grid[1][1] + grid[2][1];
    let cross1 = a00 * a11;
    let cross2 = a01 * a10;
    let det = cross1 - cross2;
    if det.abs() < atol + rtol * cross1 {
        return None;
    }
    let mut d = [
        (a11 * b[0] - a01 * b[1]) / det,
        (a00 * b[1] - a10 * b[0]) / det,
    ];
    if d[0].abs() > 1.5 || d[1].abs() > 1.5 {
        let m = if d[0].abs() < d[1].abs() {
            d[1].abs()
        } else {
            d[0].abs()
        };
        let scale = 1.5 / m;
        d[0] *= scale;
        d[1] *= scale;
    }
    let score = grid[1][1] - b[0] * d[0] - b[1] * d[1]
        + ((a00 * d[0] + a01 * d[1]) * d[0] + (a10 * d[0] + a11 * d[1]) * d[1]) / 2.0;
    Some((d, score))
}

impl Kernel for HeatmapMaxKeypoint {
    fn name(&self) -> &'static str {
        NAME
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(HeatmapMaxKeypoint {
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(enc::b(self.nchw));
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        2..=2
    }

    fn output_count(&self) -> usize {
        2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let [heat, boxes] = inputs else {
            return Err(bad_shape(NAME, "needs 2 inputs"));
        };
        want_dtype(boxes, super::box_dtype(NAME, heat.dtype)?)?;
        want_rank(NAME, "heatmaps", heat, 4)?;
        want_rank(NAME, "boxes", boxes, 2)?;
        check_box_quant(NAME, "boxes", boxes)?;
        let (n, h, w, k) = nhwc_dims(&heat.shape, self.nchw).ok_or(KernelError::TooLarge)?;
        if h != w || h < 2 || boxes.shape != [n, 4] {
            return Err(bad_shape(
                NAME,
                format!(
                    "heatmaps {:?} (square, size >= 2) and boxes {:?} do not fit",
                    heat.shape, boxes.shape
                ),
            ));
        }
        Ok(vec![vec![n, k], vec![n, k, 2]])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let [heat, boxes] = inputs else {
            return Err(bad_shape(NAME, "needs 2 inputs"));
        };
        let [s, p] = outputs else {
            return Err(bad_shape(NAME, "needs 2 outputs"));
        };
        want_dtype(s, heat.dtype)?;
        want_dtype(p, boxes.dtype)
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let ins: Vec<&[usize]> = inputs.iter().map(|t| &t.shape[..]).collect();
        let outs: Vec<&[usize]> = outputs.iter().map(|s| &s[..]).collect();
        Cost {
            macs: 0,
            elems: elems(&ins).saturating_add(elems(&outs).saturating_mul(16)),
        }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let (n, size, _, k) =
            nhwc_dims(inputs[0].shape(), self.nchw).ok_or(KernelError::TooLarge)?;
        let mut heat = to_f32(&inputs[0])?;
        if self.nchw {
            heat = nchw_to_nhwc(&heat, n, k, size, size);
        }
        let boxes = to_f32(&inputs[1])?;
        let tol = if inputs[0].ty.dtype == DType::F16 {
            1e-3
        } else {
            1e-5
        };
        let mut scores = vec![0f32; n * k];
        let mut points = vec![0f32; n * k * 2];
        let plane = size * size * k;
        for i in 0..n {
            let bx = &boxes[i * 4..i * 4 + 4];
            if !(bx[0] <= bx[2] && bx[1] <= bx[3]) {
                return Err(bad_value(NAME, format!("invalid box {bx:?}")));
            }
            let map = &heat[i * plane..(i + 1) * plane];
            for j in 0..k {
                let (mut best, mut best_score) = (0usize, -f32::MAX);
                for p in 0..size * size {
                    let v = map[p * k + j];
                    if best_score < v {
                        best_score = v;
                        best = p;
                    }
                }
                let (bw, bh) = (best % size, best / size);
                let mut grid = [[0f32; 3]; 3];
                for (dh, row) in grid.iter_mut().enumerate() {
                    for (dw, g) in row.iter_mut().enumerate() {
                        // A neighbour off the map reflects to the other side of the max.
                        let reflect = |c: usize, d: usize| match (c + d).checked_sub(1) {
                            None => 1,
                            Some(x) if x >= size => size - 2,
                            Some(x) => x,
                        };
                        let (y, x) = (reflect(bh, dh), reflect(bw, dw));
                        *g = map[(y * size + x) * k + j];
                    }
                }
                let (delta, score) =
                    solve_for_delta(&grid, tol, tol).unwrap_or(([0.0, 0.0], best_score));
                let (w0, h0) = (bx[0], bx[1]);
                let (rw, rh) = (bx[2] - w0, bx[3] - h0);
                let wpos = (bw as f32 + delta[0] + 0.5) / size as f32;
                let hpos = (bh as f32 + delta[1] + 0.5) / size as f32;
                scores[i * k + j] = score;
                points[(i * k + j) * 2] = wpos * rw + w0;
                points[(i * k + j) * 2 + 1] = hpos * rh + h0;
            }
        }
        from_f32(&mut outputs[0], &scores)?;
        from_f32(&mut outputs[1], &points)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{run, T};
    use super::*;
    use crate::kernels::KernelOp;

    const F: (DType, f32, i32) = (DType::F32, 0.0, 0);

    #[test]
    fn symmetric_peak_is_exact() {
        // A peak at (1, 1) of a 3x3 map, symmetric: no sub-pixel shift.
        let heat = T::f32(
            &[1, 3, 3, 1],
            &[0.0, 1.0, 0.0, 1.0, 4.0, 1.0, 0.0, 1.0, 0.0],
        );
        let boxes = T::f32(&[1, 4], &[0.0, 0.0, 30.0, 60.0]);
        let op = KernelOp::from(HeatmapMaxKeypoint { nchw: false });
        let out = run(&op, &[&heat, &boxes], &[F, F]).unwrap();
        assert_eq!(out[0].values(), vec![4.0]);
        assert_eq!(out[1].values(), vec![15.0, 30.0]);
        let op = KernelOp::from(HeatmapMaxKeypoint { nchw: true });
        let heat = T::f32(
            &[1, 1, 3, 3],
            &[0.0, 1.0, 0.0, 1.0, 4.0, 1.0, 0.0, 1.0, 0.0],
        );
        let out = run(&op, &[&heat, &boxes], &[F, F]).unwrap();
        assert_eq!(out[1].values(), vec![15.0, 30.0]);
    }

    #[test]
    fn corner_peak_reflects_and_hostile_boxes_fail() {
        let heat = T::f32(&[1, 2, 2, 1], &[9.0, 1.0, 1.0, 0.0]);
        let boxes = T::f32(&[1, 4], &[0.0, 0.0, 2.0, 2.0]);
        let op = KernelOp::from(HeatmapMaxKeypoint { nchw: false });
        run(&op, &[&heat, &boxes], &[F, F]).unwrap();
        let bad = T::f32(&[1, 4], &[3.0, 0.0, 2.0, f32::NAN]);
        assert!(run(&op, &[&heat, &bad], &[F, F]).is_err());
        let nan = T::f32(&[1, 2, 2, 1], &[f32::NAN; 4]);
        run(&op, &[&nan, &boxes], &[F, F]).unwrap();
    }

    #[test]
    fn quantised() {
        let heat = T::u8(&[1, 2, 2, 1], &[200, 128, 128, 128], 0.5, 128);
        let boxes = T::u16(&[1, 4], &[0, 0, 16, 16], 0.125, 0);
        let op = KernelOp::from(HeatmapMaxKeypoint { nchw: false });
        let out = run(
            &op,
            &[&heat, &boxes],
            &[(DType::U8, 0.5, 128), (DType::U16, 0.125, 0)],
        )
        .unwrap();
        assert_eq!(out[0].ty.shape, vec![1, 1]);
    }
}
