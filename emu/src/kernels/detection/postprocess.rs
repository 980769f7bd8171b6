//! NNAPI DETECTION_POSTPROCESSING: decodes SSD-style box encodings against anchors and
//! runs NMS, giving a fixed number of detection slots per batch.
//!
//! Inputs: class scores `[N, A, C]` (C > 1, class 0 the background), box encodings
//! `[N, A, L]` (L >= 4: `(ty, tx, th, tw)` first), anchors `[A, 4]` as
//! `(y_centre, x_centre, height, width)`. float32 or float16 (computed in float32).
//!
//! A box decodes to centre `(ya + ha * ty / scale_y, xa + wa * tx / scale_x)` and size
//! `(ha * exp(th / scale_h), wa * exp(tw / scale_w))`, written `[y1, x1, y2, x2]`.
//! With regular NMS every non-background class goes through hard NMS (at most
//! `max_per_class` kept) and the best `max_detections` over all classes are kept; with fast
//! NMS each anchor's best non-background score goes through one hard NMS (at most
//! `max_detections` kept) and each kept anchor reports its `max_classes_per_detection` best
//! classes. Candidates must score above `score_threshold`.
//!
//! Outputs: scores `[N, D]`, boxes `[N, D, 4]`, classes (int32 `[N, D]`, minus one unless
//! `bg_in_label`), detection counts (int32 `[N]`), with `D = max_detections` (regular) or
//! `max_detections * max_classes_per_detection` (fast); unused slots are zero.
//!
//! Parameter words: scale_y, scale_x, scale_h, scale_w (f32 > 0), regular_nms,
//! max_detections (>= 1), max_classes_per_detection (i32), max_per_class (i32),
//! score_threshold (f32 >= 0), iou_threshold (f32 >= 0), bg_in_label.

use super::nms::{desc, hard_nms, multi_class, Box4, PerClass};
use super::{elems, from_f32, to_f32, want_dtype, want_rank};
use crate::kernels::kernel::{enc, Cost, Kernel, Words};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// DETECTION_POSTPROCESSING.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectionPostprocess {
    /// Divisor of the y-centre encoding.
    pub scale_y: f32,
    /// Divisor of the x-centre encoding.
    pub scale_x: f32,
    /// Divisor of the height encoding.
    pub scale_h: f32,
    /// Divisor of the width encoding.
    pub scale_w: f32,
    /// Regular (per-class) NMS, else fast NMS.
    pub regular_nms: bool,
    /// Most detections per batch (>= 1).
    pub max_detections: u32,
    /// Classes reported per kept anchor (fast NMS; >= 1 then).
    pub max_classes_per_detection: i32,
    /// Detections kept per class (regular NMS; >= 1 then).
    pub max_per_class: i32,
    /// Candidates must score above this.
    pub score_threshold: f32,
    /// The NMS IoU threshold.
    pub iou_threshold: f32,
    /// Report class numbers counting the background (else minus one).
    pub bg_in_label: bool,
}

const NAME: &str = "DETECTION_POSTPROCESSING";

impl DetectionPostprocess {
    /// Detection slots per batch.
    fn slots(&self) -> Option<usize> {
        let max = self.max_detections as usize;
        if self.regular_nms {
            Some(max)
        } else {
            usize::try_from(self.max_classes_per_detection)
                .ok()?
                .checked_mul(max)
        }
    }

    /// Decodes one anchor's box `[y1, x1, y2, x2]`.
    fn decode_box(&self, anchor: &[f32], delta: &[f32]) -> Box4 {
        let yc = anchor[0] + anchor[2] * delta[0] / self.scale_y;
        let xc = anchor[1] + anchor[3] * delta[1] / self.scale_x;
        let hh = anchor[2] * (delta[2] / self.scale_h).exp() * 0.5;
        let wh = anchor[3] * (delta[3] / self.scale_w).exp() * 0.5;
        [yc - hh, xc - wh, yc + hh, xc + wh]
    }
}

impl Kernel for DetectionPostprocess {
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
        let scale_y = positive(w, "scale_y")?;
        let scale_x = positive(w, "scale_x")?;
        let scale_h = positive(w, "scale_h")?;
        let scale_w = positive(w, "scale_w")?;
        let regular_nms = w.bool("regular_nms")?;
        let max_detections = w.nonzero("max_detections")?;
        if i32::try_from(max_detections).is_err() {
            return Err(w.err("max_detections exceeds i32"));
        }
        let max_classes_per_detection = w.i32("max_classes_per_detection")?;
        let max_per_class = w.i32("max_per_class")?;
        if regular_nms && max_per_class <= 0 {
            return Err(w.err("max_per_class must be > 0 with regular NMS"));
        }
        if !regular_nms && max_classes_per_detection <= 0 {
            return Err(w.err("max_classes_per_detection must be > 0 with fast NMS"));
        }
        let non_negative = |w: &mut Words<'_>, what: &str| {
            let v = w.finite_f32(what)?;
            if v >= 0.0 {
                Ok(v)
            } else {
                Err(w.err(format!("{what} must be >= 0, got {v}")))
            }
        };
        Ok(DetectionPostprocess {
            scale_y,
            scale_x,
            scale_h,
            scale_w,
            regular_nms,
            max_detections,
            max_classes_per_detection,
            max_per_class,
            score_threshold: non_negative(w, "score_threshold")?,
            iou_threshold: non_negative(w, "iou_threshold")?,
            bg_in_label: w.bool("bg_in_label")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([
            self.scale_y.to_bits(),
            self.scale_x.to_bits(),
            self.scale_h.to_bits(),
            self.scale_w.to_bits(),
            enc::b(self.regular_nms),
            self.max_detections,
            enc::i(self.max_classes_per_detection),
            enc::i(self.max_per_class),
            self.score_threshold.to_bits(),
            self.iou_threshold.to_bits(),
            enc::b(self.bg_in_label),
        ]);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        3..=3
    }

    fn output_count(&self) -> usize {
        4
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let [scores, deltas, anchors] = inputs else {
            return Err(bad_shape(NAME, "needs 3 inputs"));
        };
        if !matches!(scores.dtype, DType::F32 | DType::F16) {
            return Err(KernelError::UnsupportedDType {
                op: NAME,
                dtype: scores.dtype,
            });
        }
        want_dtype(deltas, scores.dtype)?;
        want_dtype(anchors, scores.dtype)?;
        want_rank(NAME, "scores", scores, 3)?;
        want_rank(NAME, "box encodings", deltas, 3)?;
        want_rank(NAME, "anchors", anchors, 2)?;
        let (n, a, c) = (scores.shape[0], scores.shape[1], scores.shape[2]);
        if c < 2
            || deltas.shape[0] != n
            || deltas.shape[1] != a
            || deltas.shape[2] < 4
            || anchors.shape != [a, 4]
        {
            return Err(bad_shape(
                NAME,
                format!(
                    "scores {:?}, box encodings {:?}, anchors {:?} do not fit",
                    scores.shape, deltas.shape, anchors.shape
                ),
            ));
        }
        let d = self.slots().ok_or(KernelError::TooLarge)?;
        Ok(vec![vec![n, d], vec![n, d, 4], vec![n, d], vec![n]])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let main = inputs.first().map_or(DType::F32, |t| t.dtype);
        let [s, b, c, k] = outputs else {
            return Err(bad_shape(NAME, "needs 4 outputs"));
        };
        want_dtype(s, main)?;
        want_dtype(b, main)?;
        want_dtype(c, DType::I32)?;
        want_dtype(k, DType::I32)
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let ins: Vec<&[usize]> = inputs.iter().map(|t| &t.shape[..]).collect();
        let outs: Vec<&[usize]> = outputs.iter().map(|s| &s[..]).collect();
        let a = inputs
            .first()
            .and_then(|t| t.shape.get(1))
            .copied()
            .unwrap_or(0) as u64;
        Cost {
            macs: 0,
            elems: elems(&ins)
                .saturating_mul(2)
                .saturating_add(elems(&outs))
                .saturating_add(a.saturating_mul(a)),
        }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let (n, a, c) = match *inputs[0].shape() {
            [n, a, c] => (n, a, c),
            _ => return Err(bad_shape(NAME, "scores must have rank 3")),
        };
        let len = inputs[1].shape()[2];
        let scores = to_f32(&inputs[0])?;
        let deltas = to_f32(&inputs[1])?;
        let anchors = to_f32(&inputs[2])?;
        let d = self.slots().ok_or(KernelError::TooLarge)?;
        let mut out_scores = vec![0f32; n * d];
        let mut out_boxes = vec![0f32; n * d * 4];
        let mut out_classes = vec![0i32; n * d];
        let mut counts = vec![0i32; n];
        let label = |class: usize| class as i32 - i32::from(!self.bg_in_label);
        let mut boxes: Vec<Box4> = vec![[0.0; 4]; a];
        for b in 0..n {
            for (i, bx) in boxes.iter_mut().enumerate() {
                let anchor = &anchors[i * 4..i * 4 + 4];
                let delta = &deltas[(b * a + i) * len..(b * a + i) * len + 4];
                *bx = self.decode_box(anchor, delta);
            }
            let sc = &scores[b * a * c..(b + 1) * a * c];
            let os = &mut out_scores[b * d..(b + 1) * d];
            let ob = &mut out_boxes[b * d * 4..(b + 1) * d * 4];
            let oc = &mut out_classes[b * d..(b + 1) * d];
            let max = self.max_detections as i32;
            if self.regular_nms {
                let get = |i: u32| boxes.get(i as usize / c).copied().unwrap_or([f32::NAN; 4]);
                let mut s = sc.to_vec();
                let kept = multi_class(
                    &mut s,
                    c,
                    a,
                    self.score_threshold,
                    max,
                    self.max_per_class,
                    &get,
                    &PerClass::Hard {
                        iou_threshold: self.iou_threshold,
                    },
                );
                for (j, &ind) in kept.iter().enumerate().take(d) {
                    let ind = ind as usize;
                    os[j] = sc[ind];
                    ob[j * 4..j * 4 + 4].copy_from_slice(&boxes[ind / c]);
                    oc[j] = label(ind % c);
                }
                counts[b] = kept.len().min(d) as i32;
            } else {
                let per = (c - 1).min(self.max_classes_per_detection as usize);
                // Each anchor's best non-background score (the first on a tie).
                let best: Vec<f32> = sc
                    .chunks_exact(c)
                    .map(|row| {
                        row[2..]
                            .iter()
                            .fold(row[1], |m, &x| if m < x { x } else { m })
                    })
                    .collect();
                let mut select: Vec<u32> = (0..a as u32)
                    .filter(|&i| best[i as usize] > self.score_threshold)
                    .collect();
                let get = |i: u32| boxes.get(i as usize).copied().unwrap_or([f32::NAN; 4]);
                let kept = hard_nms(&best, self.iou_threshold, max, &get, &mut select);
                let mut slot = 0usize;
                for &i in &select[..kept] {
                    let row = &sc[i as usize * c..(i as usize + 1) * c];
                    let mut order: Vec<usize> = (1..c).collect();
                    order.sort_by(|&x, &y| desc(row[x], row[y]));
                    for &class in order.iter().take(per) {
                        if slot >= d {
                            break;
                        }
                        os[slot] = row[class];
                        ob[slot * 4..slot * 4 + 4].copy_from_slice(&boxes[i as usize]);
                        oc[slot] = label(class);
                        slot += 1;
                    }
                }
                counts[b] = slot as i32;
            }
        }
        let [s_out, b_out, c_out, k_out] = outputs else {
            return Err(bad_shape(NAME, "needs 4 outputs"));
        };
        from_f32(s_out, &out_scores)?;
        from_f32(b_out, &out_boxes)?;
        c_out.i32s_mut()?.copy_from_slice(&out_classes);
        k_out.i32s_mut()?.copy_from_slice(&counts);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{run, T};
    use super::*;
    use crate::kernels::KernelOp;

    fn op(regular: bool) -> DetectionPostprocess {
        DetectionPostprocess {
            scale_y: 10.0,
            scale_x: 10.0,
            scale_h: 5.0,
            scale_w: 5.0,
            regular_nms: regular,
            max_detections: 3,
            max_classes_per_detection: 1,
            max_per_class: 1,
            score_threshold: 0.0,
            iou_threshold: 0.5,
            bg_in_label: false,
        }
    }

    const F: (DType, f32, i32) = (DType::F32, 0.0, 0);
    const I: (DType, f32, i32) = (DType::I32, 0.0, 0);

    fn inputs() -> (T, T, T) {
        // Three anchors: two overlapping, one apart.
        let scores = T::f32(&[1, 3, 3], &[0.0, 0.9, 0.1, 0.0, 0.8, 0.6, 0.0, 0.2, 0.7]);
        let deltas = T::f32(&[1, 3, 4], &[0.0; 12]);
        let anchors = T::f32(
            &[3, 4],
            &[0.5, 0.5, 1.0, 1.0, 0.5, 0.55, 1.0, 1.0, 5.5, 5.5, 1.0, 1.0],
        );
        (scores, deltas, anchors)
    }

    #[test]
    fn fast_nms() {
        let (s, d, a) = inputs();
        let out = run(&KernelOp::from(op(false)), &[&s, &d, &a], &[F, F, I, I]).unwrap();
        let f = |x: f32| f64::from(x);
        assert_eq!(out[0].values(), vec![f(0.9), f(0.7), 0.0]);
        assert_eq!(out[2].ints(), vec![0, 1, 0]);
        assert_eq!(out[3].ints(), vec![2]);
        assert_eq!(out[1].values()[..4], [0.0, 0.0, 1.0, 1.0]);
    }

    #[test]
    fn regular_nms() {
        let (s, d, a) = inputs();
        let out = run(&KernelOp::from(op(true)), &[&s, &d, &a], &[F, F, I, I]).unwrap();
        let f = |x: f32| f64::from(x);
        // Class 1 keeps anchor 0 (0.9); class 2 keeps anchor 2 (0.7), max 1 per class.
        assert_eq!(out[0].values(), vec![f(0.9), f(0.7), 0.0]);
        assert_eq!(out[2].ints(), vec![0, 1, 0]);
        assert_eq!(out[3].ints(), vec![2]);
        let mut o = op(true);
        o.max_per_class = 3;
        o.bg_in_label = true;
        let out = run(&KernelOp::from(o), &[&s, &d, &a], &[F, F, I, I]).unwrap();
        assert_eq!(out[0].values(), vec![f(0.9), f(0.7), f(0.6)]);
        assert_eq!(out[2].ints(), vec![1, 2, 2]);
    }

    #[test]
    fn float16_and_nan() {
        let s = T::f16(&[1, 1, 2], &[0.0, f32::NAN]);
        let d = T::f16(&[1, 1, 4], &[f32::NAN; 4]);
        let a = T::f16(&[1, 4], &[0.0; 4]);
        let h = (DType::F16, 0.0, 0);
        run(&KernelOp::from(op(false)), &[&s, &d, &a], &[h, h, I, I]).unwrap();
        run(&KernelOp::from(op(true)), &[&s, &d, &a], &[h, h, I, I]).unwrap();
    }
}
