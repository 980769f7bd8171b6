//! Non-maximum suppression as the NNAPI reference does it, shared by BOX_WITH_NMS_LIMIT,
//! GENERATE_PROPOSALS and DETECTION_POSTPROCESSING.
//!
//! The candidates are a list of indices (into a score array and, through a box lookup, a
//! box array) that NMS reorders in place: each round moves the highest-scoring remaining
//! candidate (the first one on a tie) to the front of the unprocessed part and moves every
//! suppressed candidate to the back, by swaps. The kept candidates end up first, in the
//! order they were picked. The exact swap order matters for ties, so it is reproduced.

use std::cmp::Ordering;

/// A box `[x1, y1, x2, y2]`.
pub(crate) type Box4 = [f32; 4];

/// Intersection over union of two axis-aligned boxes, computed as the reference does
/// (a zero union gives NaN, which suppresses nothing).
pub(crate) fn iou(a: &Box4, b: &Box4) -> f32 {
    let area_a = (a[2] - a[0]) * (a[3] - a[1]);
    let area_b = (b[2] - b[0]) * (b[3] - b[1]);
    let x1 = a[0].max(b[0]);
    let x2 = a[2].min(b[2]);
    let y1 = a[1].max(b[1]);
    let y2 = a[3].min(b[3]);
    let w = cmax(x2 - x1, 0.0);
    let h = cmax(y2 - y1, 0.0);
    let inter = w * h;
    inter / (area_a + area_b - inter)
}

/// C++ `std::max(x, y)`: `x < y ? y : x` (a NaN `x` stays).
fn cmax(x: f32, y: f32) -> f32 {
    if x < y {
        y
    } else {
        x
    }
}

/// Descending order of scores, total (NaN sorts after everything; -0 equals +0) so that
/// sorting never sees an inconsistent comparison.
pub(crate) fn desc(a: f32, b: f32) -> Ordering {
    let canon = |x: f32| if x == 0.0 { 0.0 } else { x };
    canon(b).total_cmp(&canon(a))
}

/// The position in `sel[start..end]` of the first highest score (`std::max_element`
/// with `<`: a NaN is never the maximum unless it comes first).
fn argmax(scores: &[f32], sel: &[u32], start: usize, end: usize) -> usize {
    let score = |k: usize| score_of(scores, sel[k]);
    let mut best = start;
    for k in start + 1..end {
        if score(best) < score(k) {
            best = k;
        }
    }
    best
}

/// `scores[i]`, NaN when out of range (indices come from the kernels, so never).
fn score_of(scores: &[f32], i: u32) -> f32 {
    scores.get(i as usize).copied().unwrap_or(f32::NAN)
}

/// The limit on kept candidates: a negative `max` means all of them.
fn limit(max: i32, len: usize) -> usize {
    usize::try_from(max).unwrap_or(len)
}

/// Hard NMS of the candidates `sel` (indices into `scores`, boxes by `boxes`): keeps the
/// best, drops every remaining candidate whose IoU with it is `>= iou_threshold`, repeats
/// until `max` are kept (negative: no limit) or none remain. Reorders `sel` so the kept
/// ones come first, in pick order, and returns how many were kept.
pub(crate) fn hard_nms(
    scores: &[f32],
    iou_threshold: f32,
    max: i32,
    boxes: &dyn Fn(u32) -> Box4,
    sel: &mut [u32],
) -> usize {
    let max = limit(max, sel.len());
    let (mut start, mut end, mut kept) = (0usize, sel.len(), 0usize);
    while start < end && kept < max {
        let best = argmax(scores, sel, start, end);
        sel.swap(best, start);
        let top = boxes(sel[start]);
        let mut i = start + 1;
        while i < end {
            if iou(&boxes(sel[i]), &top) >= iou_threshold {
                end -= 1;
                sel.swap(i, end);
            } else {
                i += 1;
            }
        }
        start += 1;
        kept += 1;
    }
    start
}

/// Soft NMS: like [`hard_nms`], but each round multiplies the remaining candidates' scores
/// (in `scores`, in place) by `kernel(iou)` and drops those that fall below
/// `score_threshold`.
pub(crate) fn soft_nms(
    scores: &mut [f32],
    score_threshold: f32,
    max: i32,
    boxes: &dyn Fn(u32) -> Box4,
    kernel: &dyn Fn(f32) -> f32,
    sel: &mut [u32],
) -> usize {
    let max = limit(max, sel.len());
    let (mut start, mut end, mut kept) = (0usize, sel.len(), 0usize);
    while start < end && kept < max {
        let best = argmax(scores, sel, start, end);
        sel.swap(best, start);
        let top = boxes(sel[start]);
        let mut i = start + 1;
        while i < end {
            let k = kernel(iou(&boxes(sel[i]), &top));
            let s = match scores.get_mut(sel[i] as usize) {
                Some(s) => {
                    *s *= k;
                    *s
                }
                None => f32::NAN,
            };
            if s < score_threshold {
                end -= 1;
                sel.swap(i, end);
            } else {
                i += 1;
            }
        }
        start += 1;
        kept += 1;
    }
    start
}

/// The NMS flavour of BOX_WITH_NMS_LIMIT (its `nms_kernel` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NmsKernel {
    /// Hard: a candidate with IoU >= threshold gets score 0.
    Hard = 0,
    /// Linear: a candidate with IoU >= threshold has its score scaled by `1 - iou`.
    Linear = 1,
    /// Gaussian: every candidate has its score scaled by `exp(-iou^2 / sigma)`.
    Gaussian = 2,
}

impl NmsKernel {
    /// From its NNAPI number.
    pub fn from_u32(v: u32) -> Option<NmsKernel> {
        Some(match v {
            0 => NmsKernel::Hard,
            1 => NmsKernel::Linear,
            2 => NmsKernel::Gaussian,
            _ => return None,
        })
    }

    /// The score factor for an IoU.
    pub(crate) fn factor(self, iou: f32, iou_threshold: f32, sigma: f32) -> f32 {
        match self {
            NmsKernel::Hard => {
                if iou < iou_threshold {
                    1.0
                } else {
                    0.0
                }
            }
            NmsKernel::Linear => {
                if iou < iou_threshold {
                    1.0
                } else {
                    1.0 - iou
                }
            }
            NmsKernel::Gaussian => (-iou * iou / sigma).exp(),
        }
    }
}

/// How NMS runs per class in [`multi_class`].
pub(crate) enum PerClass<'a> {
    /// [`hard_nms`] with this IoU threshold.
    Hard { iou_threshold: f32 },
    /// [`soft_nms`] with this score threshold and kernel.
    Soft {
        score_threshold: f32,
        kernel: &'a dyn Fn(f32) -> f32,
    },
}

/// NMS per class over `rois` candidates of `classes` classes (score of candidate `r`,
/// class `c` at `r * classes + c`): class 0 (background) is skipped; per class the
/// candidates scoring above `score_threshold` go through NMS keeping at most `max_per_class`;
/// all the kept ones are then sorted by score, descending (stably), and cut to
/// `max_total` (negative: no cut). Returns the kept `r * classes + c` indices.
#[allow(clippy::too_many_arguments)]
pub(crate) fn multi_class(
    scores: &mut [f32],
    classes: usize,
    rois: usize,
    score_threshold: f32,
    max_total: i32,
    max_per_class: i32,
    boxes: &dyn Fn(u32) -> Box4,
    nms: &PerClass<'_>,
) -> Vec<u32> {
    let mut select: Vec<u32> = Vec::new();
    for c in 1..classes {
        let base = select.len();
        for r in 0..rois {
            let index = r * classes + c;
            if score_of(scores, index as u32) > score_threshold {
                select.push(index as u32);
            }
        }
        let seg = &mut select[base..];
        let kept = match nms {
            PerClass::Hard { iou_threshold } => {
                hard_nms(scores, *iou_threshold, max_per_class, boxes, seg)
            }
            PerClass::Soft {
                score_threshold,
                kernel,
            } => soft_nms(scores, *score_threshold, max_per_class, boxes, kernel, seg),
        };
        select.truncate(base + kept);
    }
    select.sort_by(|&a, &b| desc(score_of(scores, a), score_of(scores, b)));
    if let Ok(max) = usize::try_from(max_total) {
        select.truncate(max);
    }
    select
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Textbook greedy NMS: pick the best remaining, rescore or drop the rest, repeat.
    /// Returns the picked indices in pick order (and the final scores).
    fn brute_force(
        scores: &[f32],
        boxes: &[Box4],
        max: i32,
        rescore: &dyn Fn(f32, f32) -> Option<f32>,
    ) -> (Vec<u32>, Vec<f32>) {
        let mut s = scores.to_vec();
        let mut live: Vec<usize> = (0..scores.len()).collect();
        let mut picked = Vec::new();
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        while !live.is_empty() && picked.len() < max {
            let (pos, _) =
                live.iter()
                    .enumerate()
                    .fold((0, f32::NEG_INFINITY), |(bp, bs), (p, &i)| {
                        if s[i] > bs {
                            (p, s[i])
                        } else {
                            (bp, bs)
                        }
                    });
            let top = live.remove(pos);
            picked.push(top as u32);
            live.retain(|&i| match rescore(s[i], iou(&boxes[i], &boxes[top])) {
                Some(v) => {
                    s[i] = v;
                    true
                }
                None => false,
            });
        }
        (picked, s)
    }

    fn arb_boxes(n: usize) -> impl Strategy<Value = Vec<Box4>> {
        proptest::collection::vec(
            (0u8..16, 0u8..16, 1u8..10, 1u8..10).prop_map(|(x, y, w, h)| {
                let (x, y) = (f32::from(x), f32::from(y));
                [x, y, x + f32::from(w), y + f32::from(h)]
            }),
            n,
        )
    }

    /// `n` distinct scores in (0.1, 1), irregular enough that rescoring by the IoU of
    /// integer boxes does not make two of them equal (ties are broken by the swap order,
    /// which the textbook reference does not model).
    fn arb_scores(n: usize) -> impl Strategy<Value = Vec<f32>> {
        Just(
            (1..=n as u32)
                .map(|i| 0.1 + 0.9 * (i as f32 * 0.618_034).fract())
                .collect::<Vec<f32>>(),
        )
        .prop_shuffle()
    }

    fn case() -> impl Strategy<Value = (Vec<f32>, Vec<Box4>, i32, f32)> {
        (1usize..24).prop_flat_map(|n| {
            (
                arb_scores(n),
                arb_boxes(n),
                -1i32..(n as i32 + 2),
                0.05f32..0.95,
            )
        })
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(256))]

        #[test]
        fn hard_nms_matches_brute_force((scores, boxes, max, thr) in case()) {
            let mut sel: Vec<u32> = (0..scores.len() as u32).collect();
            let get = |i: u32| boxes[i as usize];
            let kept = hard_nms(&scores, thr, max, &get, &mut sel);
            let (want, _) = brute_force(&scores, &boxes, max, &|s, iou| (iou < thr).then_some(s));
            prop_assert_eq!(&sel[..kept], &want[..]);
            // `sel` stays a permutation.
            let mut all = sel.clone();
            all.sort_unstable();
            prop_assert_eq!(all, (0..scores.len() as u32).collect::<Vec<_>>());
        }

        #[test]
        fn soft_nms_matches_brute_force(
            (scores, boxes, max, thr) in case(),
            kind in 0u32..3,
            sigma in 0.1f32..2.0,
            score_thr in 0.01f32..0.5,
        ) {
            let k = NmsKernel::from_u32(kind).unwrap();
            let kernel = |iou: f32| k.factor(iou, thr, sigma);
            let mut s = scores.clone();
            let mut sel: Vec<u32> = (0..scores.len() as u32).collect();
            let get = |i: u32| boxes[i as usize];
            let kept = soft_nms(&mut s, score_thr, max, &get, &kernel, &mut sel);
            let (want, want_scores) = brute_force(&scores, &boxes, max, &|sc, iou| {
                let v = sc * kernel(iou);
                (v >= score_thr).then_some(v)
            });
            prop_assert_eq!(&sel[..kept], &want[..]);
            for &i in &want {
                prop_assert_eq!(s[i as usize], want_scores[i as usize]);
            }
        }

        #[test]
        fn multi_class_matches_brute_force(
            rois in 1usize..8,
            classes in 2usize..5,
            seed in any::<u64>(),
            max_total in -1i32..6,
            max_per_class in -1i32..4,
            thr in 0.1f32..0.9,
        ) {
            let n = rois * classes;
            let mut rng = seed;
            let mut next = || {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (rng >> 33) as u32
            };
            // Distinct scores: a shuffled ramp.
            let mut scores: Vec<f32> = (0..n).map(|i| (i + 1) as f32 / n as f32).collect();
            for i in (1..n).rev() {
                scores.swap(i, next() as usize % (i + 1));
            }
            let boxes: Vec<Box4> = (0..n)
                .map(|_| {
                    let (x, y) = ((next() % 12) as f32, (next() % 12) as f32);
                    [x, y, x + 1.0 + (next() % 6) as f32, y + 1.0 + (next() % 6) as f32]
                })
                .collect();
            let get = |i: u32| boxes[i as usize];
            let mut s = scores.clone();
            let got = multi_class(
                &mut s, classes, rois, 0.2, max_total, max_per_class, &get,
                &PerClass::Hard { iou_threshold: thr },
            );
            // Brute force: per class, greedy NMS over the candidates above 0.2.
            let mut want: Vec<u32> = Vec::new();
            for c in 1..classes {
                let idx: Vec<usize> = (0..rois)
                    .map(|r| r * classes + c)
                    .filter(|&i| scores[i] > 0.2)
                    .collect();
                let sc: Vec<f32> = idx.iter().map(|&i| scores[i]).collect();
                let bx: Vec<Box4> = idx.iter().map(|&i| boxes[i]).collect();
                let (p, _) = brute_force(&sc, &bx, max_per_class, &|v, iou| (iou < thr).then_some(v));
                want.extend(p.iter().map(|&k| idx[k as usize] as u32));
            }
            want.sort_by(|&a, &b| scores[b as usize].total_cmp(&scores[a as usize]));
            if max_total >= 0 {
                want.truncate(max_total as usize);
            }
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn ties_pick_the_first() {
        let boxes = [
            [0.0, 0.0, 1.0, 1.0],
            [5.0, 5.0, 6.0, 6.0],
            [0.0, 0.0, 1.0, 1.0],
        ];
        let scores = [0.5, 0.5, 0.5];
        let mut sel = vec![0, 1, 2];
        let get = |i: u32| boxes[i as usize];
        let kept = hard_nms(&scores, 0.5, -1, &get, &mut sel);
        assert_eq!(&sel[..kept], &[0, 1]);
    }

    #[test]
    fn nan_scores_and_degenerate_boxes_do_not_panic() {
        let boxes = [[f32::NAN; 4], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]];
        let mut scores = [f32::NAN, 0.3, f32::INFINITY];
        let get = |i: u32| boxes[i as usize];
        let mut sel = vec![0, 1, 2];
        hard_nms(&scores, 0.5, -1, &get, &mut sel);
        let mut sel = vec![0, 1, 2];
        let k = |iou: f32| NmsKernel::Gaussian.factor(iou, 0.5, 0.0);
        soft_nms(&mut scores, 0.1, 2, &get, &k, &mut sel);
        let mut s = vec![f32::NAN; 6];
        multi_class(
            &mut s,
            3,
            2,
            0.0,
            1,
            1,
            &|_| [0.0; 4],
            &PerClass::Hard { iou_threshold: 0.5 },
        );
    }
}
