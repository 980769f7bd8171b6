//! NNAPI BOX_WITH_NMS_LIMIT: per-class non-maximum suppression (hard, linear or gaussian)
//! of scored per-class boxes, batch by batch, keeping the best `max_detections` per batch.
//!
//! Inputs: scores `[R, C]` (C > 1, class 0 is the background and never kept), boxes
//! `[R, 4 * C]` (one box per roi and class), batch index per roi (int32 `[R]`; rois of one
//! batch must be contiguous, each run of equal indices is processed as one batch). float32,
//! float16 (computed in float32), or 8-bit asymmetric scores with 16-bit boxes (scale 0.125,
//! zero point 0).
//!
//! Per batch and class, the candidates scoring above `score_threshold` go through NMS
//! ([`super::nms::soft_nms`] with the chosen kernel, removing candidates whose rescored
//! score falls below `nms_score_threshold`), at most `max_detections` kept per class (a
//! negative value: no limit); the batch's kept candidates are sorted by score, cut to
//! `max_detections`, then ordered by class and, within a class, by score.
//!
//! Outputs (data-dependent size K, see [`Kernel::run_sized`]; the capacity is
//! `R * (C - 1)`): scores `[K]` (rescored, in the scores' type and quantisation), boxes
//! `[K, 4]` (copied from the input), classes (int32 `[K]`), batch indices (int32 `[K]`).
//!
//! Parameter words: score_threshold (f32), max_detections (i32), nms_kernel (0 hard,
//! 1 linear, 2 gaussian), iou_threshold (f32), sigma (f32), nms_score_threshold (f32).

use super::nms::{multi_class, NmsKernel, PerClass};
use super::{bad_value, check_box_quant, elems, from_f32, to_f32, want_dtype, want_rank};
use crate::kernels::kernel::{enc, Cost, Kernel, Words};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// BOX_WITH_NMS_LIMIT.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxWithNmsLimit {
    /// Candidates must score above this.
    pub score_threshold: f32,
    /// Most boxes kept per batch (and per class); negative: no limit.
    pub max_detections: i32,
    /// The NMS flavour.
    pub kernel: NmsKernel,
    /// IoU threshold of hard and linear NMS.
    pub iou_threshold: f32,
    /// Sigma of gaussian NMS.
    pub sigma: f32,
    /// Rescored candidates below this are dropped.
    pub nms_score_threshold: f32,
}

const NAME: &str = "BOX_WITH_NMS_LIMIT";

impl BoxWithNmsLimit {
    /// Runs the NMS on real values: returns the kept `(roi * C + class)` indices, the batch
    /// (run) each came from, and the rescored scores.
    fn select(
        &self,
        scores: &mut [f32],
        boxes: &[f32],
        batches: &[i32],
        classes: usize,
    ) -> Result<(Vec<usize>, Vec<i32>)> {
        let rois = batches.len();
        let mut selected: Vec<usize> = Vec::new();
        let mut batch_of: Vec<i32> = Vec::new();
        let mut start = 0usize;
        while start < rois {
            let b = batches[start];
            let len = batches[start..].iter().take_while(|&&x| x == b).count();
            // The reference checks the first `len` boxes of the run's flat box array.
            let box_base = start * classes * 4;
            for i in 0..len {
                let bx = boxes
                    .get(box_base + i * 4..box_base + i * 4 + 4)
                    .ok_or(KernelError::TooLarge)?;
                if !(bx[0] <= bx[2] && bx[1] <= bx[3]) {
                    return Err(bad_value(NAME, format!("invalid box {bx:?}")));
                }
            }
            let score_base = start * classes;
            let run_scores = &mut scores[score_base..score_base + len * classes];
            let run_boxes = &boxes[box_base..box_base + len * classes * 4];
            let get = |i: u32| {
                let i = i as usize * 4;
                run_boxes
                    .get(i..i + 4)
                    .and_then(|s| s.try_into().ok())
                    .unwrap_or([f32::NAN; 4])
            };
            let (k, thr, sigma) = (self.kernel, self.iou_threshold, self.sigma);
            let factor = move |iou: f32| k.factor(iou, thr, sigma);
            let mut kept = multi_class(
                run_scores,
                classes,
                len,
                self.score_threshold,
                self.max_detections,
                self.max_detections,
                &get,
                &PerClass::Soft {
                    score_threshold: self.nms_score_threshold,
                    kernel: &factor,
                },
            );
            // Then by class, and by score within a class.
            let s = &*run_scores;
            let score = |i: u32| s.get(i as usize).copied().unwrap_or(f32::NAN);
            kept.sort_by(|&a, &b| {
                (a as usize % classes)
                    .cmp(&(b as usize % classes))
                    .then_with(|| super::nms::desc(score(a), score(b)))
            });
            for i in kept {
                selected.push(score_base + i as usize);
                batch_of.push(b);
            }
            start += len;
        }
        Ok((selected, batch_of))
    }
}

impl Kernel for BoxWithNmsLimit {
    fn name(&self) -> &'static str {
        NAME
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let score_threshold = w.finite_f32("score_threshold")?;
        let max_detections = w.i32("max_detections")?;
        let k = w.u32("nms_kernel")?;
        let kernel = NmsKernel::from_u32(k).ok_or_else(|| w.err(format!("nms kernel {k}")))?;
        Ok(BoxWithNmsLimit {
            score_threshold,
            max_detections,
            kernel,
            iou_threshold: w.finite_f32("iou_threshold")?,
            sigma: w.finite_f32("sigma")?,
            nms_score_threshold: w.finite_f32("nms_score_threshold")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([
            self.score_threshold.to_bits(),
            enc::i(self.max_detections),
            self.kernel as u32,
            self.iou_threshold.to_bits(),
            self.sigma.to_bits(),
            self.nms_score_threshold.to_bits(),
        ]);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        3..=3
    }

    fn output_count(&self) -> usize {
        4
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let [scores, boxes, batches] = inputs else {
            return Err(bad_shape(NAME, "needs 3 inputs"));
        };
        want_dtype(boxes, super::box_dtype(NAME, scores.dtype)?)?;
        want_dtype(batches, DType::I32)?;
        want_rank(NAME, "scores", scores, 2)?;
        want_rank(NAME, "boxes", boxes, 2)?;
        want_rank(NAME, "batch indices", batches, 1)?;
        check_box_quant(NAME, "boxes", boxes)?;
        let (r, c) = (scores.shape[0], scores.shape[1]);
        if c < 2
            || boxes.shape[0] != r
            || Some(boxes.shape[1]) != c.checked_mul(4)
            || batches.shape[0] != r
        {
            return Err(bad_shape(
                NAME,
                format!(
                    "scores {:?}, boxes {:?}, batch indices {:?} do not fit",
                    scores.shape, boxes.shape, batches.shape
                ),
            ));
        }
        let k = r.checked_mul(c - 1).ok_or(KernelError::TooLarge)?;
        Ok(vec![vec![k], vec![k, 4], vec![k], vec![k]])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let [scores, boxes, _] = inputs else {
            return Err(bad_shape(NAME, "needs 3 inputs"));
        };
        let [s, b, c, n] = outputs else {
            return Err(bad_shape(NAME, "needs 4 outputs"));
        };
        want_dtype(s, scores.dtype)?;
        want_dtype(b, boxes.dtype)?;
        want_dtype(c, DType::I32)?;
        want_dtype(n, DType::I32)
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let ins: Vec<&[usize]> = inputs.iter().map(|t| &t.shape[..]).collect();
        let outs: Vec<&[usize]> = outputs.iter().map(|s| &s[..]).collect();
        // NMS compares candidate pairs: rois^2 per class, bounded here by rois * boxes.
        let r = inputs
            .first()
            .and_then(|t| t.shape.first())
            .copied()
            .unwrap_or(0) as u64;
        let c = inputs
            .get(1)
            .and_then(|t| t.shape.get(1))
            .copied()
            .unwrap_or(0) as u64;
        Cost {
            macs: 0,
            elems: elems(&ins)
                .saturating_add(elems(&outs))
                .saturating_add(r.saturating_mul(r).saturating_mul(c)),
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
        let classes = inputs[0].shape()[1];
        let mut scores = to_f32(&inputs[0])?;
        let boxes = to_f32(&inputs[1])?;
        let batches = inputs[2].i32s()?;
        let (selected, batch_of) = self.select(&mut scores, &boxes, batches, classes)?;
        let k = selected.len();
        let [s_out, b_out, c_out, n_out] = outputs else {
            return Err(bad_shape(NAME, "needs 4 outputs"));
        };
        let out_scores: Vec<f32> = selected.iter().map(|&i| scores[i]).collect();
        from_f32(s_out, &out_scores)?;
        // Boxes are copied as stored.
        let size = inputs[1].ty.dtype.size() as usize;
        let src = inputs[1].bytes;
        for (j, &i) in selected.iter().enumerate() {
            let from = (i * 4) * size;
            let to = j * 4 * size;
            let chunk = src
                .get(from..from + 4 * size)
                .ok_or(KernelError::TooLarge)?;
            b_out
                .bytes
                .get_mut(to..to + 4 * size)
                .ok_or(KernelError::TooLarge)?
                .copy_from_slice(chunk);
        }
        let classes_out = c_out.i32s_mut()?;
        let batches_out = n_out.i32s_mut()?;
        for (j, (&i, &b)) in selected.iter().zip(&batch_of).enumerate() {
            classes_out[j] = (i % classes) as i32;
            batches_out[j] = b;
        }
        Ok(Some(vec![vec![k], vec![k, 4], vec![k], vec![k]]))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{run, T};
    use super::*;
    use crate::kernels::KernelOp;

    fn op(kernel: NmsKernel, max: i32) -> KernelOp {
        BoxWithNmsLimit {
            score_threshold: 0.3,
            max_detections: max,
            kernel,
            iou_threshold: 0.4,
            sigma: 0.5,
            nms_score_threshold: 0.3,
        }
        .into()
    }

    const F: (DType, f32, i32) = (DType::F32, 0.0, 0);
    const I: (DType, f32, i32) = (DType::I32, 0.0, 0);

    /// Two rois of batch 0 that overlap in class 1, a third in batch 1.
    fn inputs() -> (T, T, T) {
        let scores = T::f32(&[3, 2], &[0.0, 0.9, 0.0, 0.8, 0.0, 0.7]);
        let boxes = T::f32(
            &[3, 8],
            &[
                0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 10.0, 10.0, //
                0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 10.0, 10.0, //
                0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 10.0, 10.0,
            ],
        );
        let batches = T::i32(&[3], &[0, 0, 1]);
        (scores, boxes, batches)
    }

    #[test]
    fn hard_suppresses_overlaps_per_batch() {
        let (s, b, n) = inputs();
        let out = run(&op(NmsKernel::Hard, -1), &[&s, &b, &n], &[F, F, I, I]).unwrap();
        assert_eq!(out[0].ty.shape, vec![2]);
        assert_eq!(out[0].values(), vec![0.9f32 as f64, 0.7f32 as f64]);
        assert_eq!(
            out[1].values(),
            vec![0.0, 0.0, 10.0, 10.0, 0.0, 0.0, 10.0, 10.0]
        );
        assert_eq!(out[2].ints(), vec![1, 1]);
        assert_eq!(out[3].ints(), vec![0, 1]);
    }

    #[test]
    fn linear_rescores() {
        let (s, b, n) = inputs();
        let out = run(&op(NmsKernel::Linear, -1), &[&s, &b, &n], &[F, F, I, I]).unwrap();
        // IoU of the two batch-0 boxes is 81/100: 0.8 * 0.19 < 0.3, dropped.
        assert_eq!(out[0].ty.shape, vec![2]);
        let mut k = BoxWithNmsLimit {
            score_threshold: 0.3,
            max_detections: 1,
            kernel: NmsKernel::Gaussian,
            iou_threshold: 0.4,
            sigma: 10.0,
            nms_score_threshold: 0.0,
        };
        let out = run(&k.clone().into(), &[&s, &b, &n], &[F, F, I, I]).unwrap();
        assert_eq!(out[0].ty.shape, vec![2]);
        k.max_detections = -1;
        let out = run(&k.into(), &[&s, &b, &n], &[F, F, I, I]).unwrap();
        assert_eq!(out[0].ty.shape, vec![3]);
        let iou: f32 = 81.0 / 100.0;
        let want = 0.8f32 * (-iou * iou / 10.0).exp();
        assert!((out[0].values()[1] - f64::from(want)).abs() < 1e-6);
    }

    #[test]
    fn quant_types() {
        let scores = T::u8(&[2, 2], &[128, 137, 128, 136], 0.1, 128);
        let boxes = T::u16(
            &[2, 8],
            &[0, 0, 8, 8, 0, 0, 80, 80, 0, 0, 8, 8, 0, 0, 80, 80],
            0.125,
            0,
        );
        let batches = T::i32(&[2], &[0, 0]);
        let out = run(
            &op(NmsKernel::Hard, -1),
            &[&scores, &boxes, &batches],
            &[(DType::U8, 0.1, 128), (DType::U16, 0.125, 0), I, I],
        )
        .unwrap();
        assert_eq!(out[0].ints(), vec![137]);
        assert_eq!(out[1].ints(), vec![0, 0, 80, 80]);
    }

    #[test]
    fn empty_and_hostile() {
        let o = op(NmsKernel::Hard, -1);
        let s = T::f32(&[0, 2], &[]);
        let b = T::f32(&[0, 8], &[]);
        let n = T::i32(&[0], &[]);
        let out = run(&o, &[&s, &b, &n], &[F, F, I, I]).unwrap();
        assert_eq!(out[1].ty.shape, vec![0, 4]);
        let s = T::f32(&[1, 2], &[f32::NAN, f32::NAN]);
        let b = T::f32(&[1, 8], &[f32::NAN; 8]);
        let n = T::i32(&[1], &[-7]);
        assert!(run(&o, &[&s, &b, &n], &[F, F, I, I]).is_err());
        let b = T::f32(
            &[1, 8],
            &[0.0, 0.0, 1.0, 1.0, f32::NAN, 0.0, 0.0, f32::INFINITY],
        );
        let out = run(&o, &[&s, &b, &n], &[F, F, I, I]).unwrap();
        assert_eq!(out[0].ty.shape, vec![0]);
        let s = T::f32(&[1, 2], &[0.0, 1.0]);
        let out = run(&o, &[&s, &b, &n], &[F, F, I, I]).unwrap();
        assert_eq!(out[3].ints(), vec![-7]);
    }
}
