//! NNAPI GENERATE_PROPOSALS: region proposals from anchor scores and box deltas (Faster
//! R-CNN's region proposal network output stage).
//!
//! Per batch: every anchor `a` placed at every feature-map position `(h, w)` (shifted by
//! `(w * width_stride, h * height_stride)`) is transformed by its deltas as
//! AXIS_ALIGNED_BBOX_TRANSFORM does and clipped to the batch's image; the `pre_nms_top_n`
//! best-scoring ones (all if not positive) are kept, those not larger than `min_size` in both
//! dimensions or whose centre lies outside the image are dropped, and hard NMS keeps at most
//! `post_nms_top_n` (all if negative).
//!
//! Inputs: scores `[N, H, W, A]`, deltas `[N, H, W, 4 * A]` (or both NCHW), anchors `[A, 4]`,
//! image info `[N, 2]` (height, width). float32, float16 (computed in float32), or 8-bit
//! asymmetric scores and deltas with 16-bit symmetric anchors and 16-bit asymmetric image
//! info (scale 0.125). Outputs (data-dependent size K, see [`Kernel::run_sized`]): scores
//! `[K]` (the input scores' type), boxes `[K, 4]` (float type, or 16-bit asymmetric),
//! batch indices (int32 `[K]`).
//!
//! Parameter words: height_stride (f32 > 0), width_stride (f32 > 0), pre_nms_top_n (i32),
//! post_nms_top_n (i32), iou_threshold (f32), min_size (f32), nchw.

use super::bbox_transform::{check_box, transform};
use super::nms::{desc, hard_nms};
use super::{check_box_quant, elems, from_f32, to_f32, want_dtype, want_rank};
use crate::kernels::kernel::{enc, Cost, Kernel, Words};
use crate::kernels::layout::{nchw_to_nhwc, nhwc_dims};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// GENERATE_PROPOSALS.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateProposals {
    /// Feature-map stride in image pixels, vertically.
    pub height_stride: f32,
    /// Feature-map stride in image pixels, horizontally.
    pub width_stride: f32,
    /// Best candidates kept before NMS (not positive: all).
    pub pre_nms_top_n: i32,
    /// Most proposals kept per batch after NMS (negative: all).
    pub post_nms_top_n: i32,
    /// The NMS IoU threshold.
    pub iou_threshold: f32,
    /// Proposals must be larger than this in both dimensions.
    pub min_size: f32,
    /// NCHW scores and deltas (else NHWC).
    pub nchw: bool,
}

const NAME: &str = "GENERATE_PROPOSALS";

impl GenerateProposals {
    /// The most proposals one batch of `per_batch` candidates can give.
    fn per_batch_capacity(&self, per_batch: usize) -> usize {
        let mut k = per_batch;
        if let Ok(pre) = usize::try_from(self.pre_nms_top_n) {
            if pre > 0 {
                k = k.min(pre);
            }
        }
        if let Ok(post) = usize::try_from(self.post_nms_top_n) {
            k = k.min(post);
        }
        k
    }
}

impl Kernel for GenerateProposals {
    fn name(&self) -> &'static str {
        NAME
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let positive = |w: &mut Words<'_>, what: &str| {
            let v = w.finite_f32(what)?;
            if v > 0.0 {
                Ok(v)
            } else {
                Err(w.err(format!("{what} must be > 0, got {v}")))
            }
        };
        Ok(GenerateProposals {
            height_stride: positive(w, "height_stride")?,
            width_stride: positive(w, "width_stride")?,
            pre_nms_top_n: w.i32("pre_nms_top_n")?,
            post_nms_top_n: w.i32("post_nms_top_n")?,
            iou_threshold: w.finite_f32("iou_threshold")?,
            min_size: w.finite_f32("min_size")?,
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([
            self.height_stride.to_bits(),
            self.width_stride.to_bits(),
            enc::i(self.pre_nms_top_n),
            enc::i(self.post_nms_top_n),
            self.iou_threshold.to_bits(),
            self.min_size.to_bits(),
            enc::b(self.nchw),
        ]);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        4..=4
    }

    fn output_count(&self) -> usize {
        3
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let [scores, deltas, anchors, info] = inputs else {
            return Err(bad_shape(NAME, "needs 4 inputs"));
        };
        want_dtype(deltas, scores.dtype)?;
        match scores.dtype {
            DType::F32 | DType::F16 => {
                want_dtype(anchors, scores.dtype)?;
                want_dtype(info, scores.dtype)?;
            }
            DType::U8 | DType::I8 => {
                want_dtype(anchors, DType::I16)?;
                want_dtype(info, DType::U16)?;
                if scores.dtype == DType::U8 {
                    check_box_quant(NAME, "anchors", anchors)?;
                    check_box_quant(NAME, "image info", info)?;
                }
            }
            dtype => return Err(KernelError::UnsupportedDType { op: NAME, dtype }),
        }
        want_rank(NAME, "scores", scores, 4)?;
        want_rank(NAME, "deltas", deltas, 4)?;
        want_rank(NAME, "anchors", anchors, 2)?;
        want_rank(NAME, "image info", info, 2)?;
        let (n, h, w, a) = nhwc_dims(&scores.shape, self.nchw).ok_or(KernelError::TooLarge)?;
        let (dn, dh, dw, da) = nhwc_dims(&deltas.shape, self.nchw).ok_or(KernelError::TooLarge)?;
        if (dn, dh, dw) != (n, h, w)
            || Some(da) != a.checked_mul(4)
            || info.shape != [n, 2]
            || anchors.shape != [a, 4]
        {
            return Err(bad_shape(
                NAME,
                format!(
                    "scores {:?}, deltas {:?}, anchors {:?}, image info {:?} do not fit",
                    scores.shape, deltas.shape, anchors.shape, info.shape
                ),
            ));
        }
        let per_batch = crate::kernels::checked_product(&[h, w, a])?;
        let k = n
            .checked_mul(self.per_batch_capacity(per_batch))
            .ok_or(KernelError::TooLarge)?;
        Ok(vec![vec![k], vec![k, 4], vec![k]])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let [s, b, n] = outputs else {
            return Err(bad_shape(NAME, "needs 3 outputs"));
        };
        let main = inputs.first().map_or(DType::F32, |t| t.dtype);
        want_dtype(s, main)?;
        want_dtype(b, super::box_dtype(NAME, main)?)?;
        want_dtype(n, DType::I32)
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let ins: Vec<&[usize]> = inputs.iter().map(|t| &t.shape[..]).collect();
        let outs: Vec<&[usize]> = outputs.iter().map(|s| &s[..]).collect();
        let k = outputs
            .first()
            .and_then(|s| s.first())
            .copied()
            .unwrap_or(0) as u64;
        Cost {
            macs: 0,
            elems: elems(&ins)
                .saturating_mul(4)
                .saturating_add(elems(&outs))
                .saturating_add(k.saturating_mul(k)),
        }
    }

    fn shapes_depend_on_values(&self) -> bool {
        true
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        self.run_sized(inputs, outputs).map(|_| ())
    }

    fn run_sized(
        &self,
        inputs: &[View<'_>],
        outputs: &mut [ViewMut<'_>],
    ) -> Result<Option<Vec<Vec<usize>>>> {
        let (n, h, w, a) = nhwc_dims(inputs[0].shape(), self.nchw).ok_or(KernelError::TooLarge)?;
        let mut scores = to_f32(&inputs[0])?;
        let mut deltas = to_f32(&inputs[1])?;
        if self.nchw {
            scores = nchw_to_nhwc(&scores, n, a, h, w);
            deltas = nchw_to_nhwc(&deltas, n, 4 * a, h, w);
        }
        let anchors = to_f32(&inputs[2])?;
        let info = to_f32(&inputs[3])?;
        let per_batch = h * w * a;
        if per_batch == 0 || n == 0 {
            return Ok(Some(vec![vec![0], vec![0, 4], vec![0]]));
        }
        // The anchors at every position, shared by all batches.
        let mut grid = vec![0f32; per_batch * 4];
        for (p, g) in grid.chunks_exact_mut(4 * a).enumerate() {
            let (y, x) = (p / w, p % w);
            let (dy, dx) = (y as f32 * self.height_stride, x as f32 * self.width_stride);
            for (anchor, gb) in anchors.chunks_exact(4).zip(g.chunks_exact_mut(4)) {
                gb.copy_from_slice(&[
                    anchor[0] + dx,
                    anchor[1] + dy,
                    anchor[2] + dx,
                    anchor[3] + dy,
                ]);
                check_box(NAME, gb)?;
            }
        }
        let mut out_scores: Vec<f32> = Vec::new();
        let mut out_boxes: Vec<f32> = Vec::new();
        let mut out_batches: Vec<i32> = Vec::new();
        let mut boxes = vec![0f32; per_batch * 4];
        for b in 0..n {
            let sc = &scores[b * per_batch..(b + 1) * per_batch];
            let dl = &deltas[b * per_batch * 4..(b + 1) * per_batch * 4];
            let (height, width) = (info[2 * b], info[2 * b + 1]);
            for ((g, d), o) in grid
                .chunks_exact(4)
                .zip(dl.chunks_exact(4))
                .zip(boxes.chunks_exact_mut(4))
            {
                o.copy_from_slice(&transform(g, d, height, width));
            }
            let mut select: Vec<u32> = (0..per_batch as u32).collect();
            if let Ok(pre) = usize::try_from(self.pre_nms_top_n) {
                if pre > 0 && pre < select.len() {
                    select.sort_by(|&x, &y| desc(sc[x as usize], sc[y as usize]));
                    select.truncate(pre);
                }
            }
            select.retain(|&i| {
                let r = &boxes[i as usize * 4..i as usize * 4 + 4];
                let (bw, bh) = (r[2] - r[0], r[3] - r[1]);
                let (cx, cy) = (r[0] + bw / 2.0, r[1] + bh / 2.0);
                bw > self.min_size && bh > self.min_size && cx < width && cy < height
            });
            let get = |i: u32| {
                let i = i as usize * 4;
                boxes
                    .get(i..i + 4)
                    .and_then(|s| s.try_into().ok())
                    .unwrap_or([f32::NAN; 4])
            };
            let kept = hard_nms(
                sc,
                self.iou_threshold,
                self.post_nms_top_n,
                &get,
                &mut select,
            );
            for &i in &select[..kept] {
                let i = i as usize;
                out_boxes.extend_from_slice(&boxes[i * 4..i * 4 + 4]);
                out_scores.push(sc[i]);
                out_batches.push(b as i32);
            }
        }
        let k = out_scores.len();
        let [s_out, b_out, n_out] = outputs else {
            return Err(bad_shape(NAME, "needs 3 outputs"));
        };
        if k > s_out.ty.numel() {
            return Err(bad_shape(NAME, "more proposals than the capacity"));
        }
        from_f32(s_out, &out_scores)?;
        from_f32(b_out, &out_boxes)?;
        n_out
            .i32s_mut()?
            .get_mut(..k)
            .ok_or(KernelError::TooLarge)?
            .copy_from_slice(&out_batches);
        Ok(Some(vec![vec![k], vec![k, 4], vec![k]]))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{run, T};
    use super::*;
    use crate::kernels::KernelOp;

    fn op(pre: i32, post: i32, nchw: bool) -> KernelOp {
        GenerateProposals {
            height_stride: 4.0,
            width_stride: 4.0,
            pre_nms_top_n: pre,
            post_nms_top_n: post,
            iou_threshold: 0.3,
            min_size: 1.0,
            nchw,
        }
        .into()
    }

    const F: (DType, f32, i32) = (DType::F32, 0.0, 0);
    const I: (DType, f32, i32) = (DType::I32, 0.0, 0);

    #[test]
    fn two_by_two_grid_one_anchor() {
        // Four anchors of 4x4 at (0,0), (4,0), (0,4), (4,4); no deltas.
        let scores = T::f32(&[1, 2, 2, 1], &[0.1, 0.4, 0.3, 0.2]);
        let deltas = T::f32(&[1, 2, 2, 4], &[0.0; 16]);
        let anchors = T::f32(&[1, 4], &[0.0, 0.0, 4.0, 4.0]);
        let info = T::f32(&[1, 2], &[8.0, 8.0]);
        let out = run(
            &op(-1, -1, false),
            &[&scores, &deltas, &anchors, &info],
            &[F, F, I],
        )
        .unwrap();
        let f = |x: f32| f64::from(x);
        assert_eq!(out[0].values(), vec![f(0.4), f(0.3), f(0.2), f(0.1)]);
        assert_eq!(
            out[1].values()[..8],
            [4.0, 0.0, 8.0, 4.0, 0.0, 4.0, 4.0, 8.0]
        );
        let out = run(
            &op(2, 1, false),
            &[&scores, &deltas, &anchors, &info],
            &[F, F, I],
        )
        .unwrap();
        assert_eq!(out[0].values(), vec![f(0.4)]);
        // NCHW with one anchor is the same data.
        let scores = T::f32(&[1, 1, 2, 2], &[0.1, 0.4, 0.3, 0.2]);
        let deltas = T::f32(&[1, 4, 2, 2], &[0.0; 16]);
        let out = run(
            &op(-1, -1, true),
            &[&scores, &deltas, &anchors, &info],
            &[F, F, I],
        )
        .unwrap();
        assert_eq!(out[2].ints(), vec![0, 0, 0, 0]);
    }

    #[test]
    fn quant_and_hostile() {
        let scores = T::u8(&[1, 1, 1, 1], &[138], 0.1, 128);
        let deltas = T::u8(&[1, 1, 1, 4], &[128; 4], 0.1, 128);
        let anchors = T::i16(&[1, 4], &[0, 0, 32, 32], 0.125, 0);
        let info = T::u16(&[1, 2], &[64, 64], 0.125, 0);
        let out = run(
            &op(-1, -1, false),
            &[&scores, &deltas, &anchors, &info],
            &[(DType::U8, 0.1, 128), (DType::U16, 0.125, 0), I],
        )
        .unwrap();
        assert_eq!(out[0].ints(), vec![138]);
        assert_eq!(out[1].ints(), vec![0, 0, 32, 32]);
        let bad = T::f32(&[1, 4], &[4.0, 0.0, 0.0, f32::NAN]);
        let s = T::f32(&[1, 1, 1, 1], &[f32::NAN]);
        let d = T::f32(&[1, 1, 1, 4], &[f32::INFINITY; 4]);
        let i = T::f32(&[1, 2], &[f32::NAN, 1.0]);
        assert!(run(&op(-1, -1, false), &[&s, &d, &bad, &i], &[F, F, I]).is_err());
        let good = T::f32(&[1, 4], &[0.0, 0.0, 1.0, 1.0]);
        run(&op(5, 0, false), &[&s, &d, &good, &i], &[F, F, I]).unwrap();
    }
}
