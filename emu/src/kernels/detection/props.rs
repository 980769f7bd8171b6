//! Property tests of the detection kernels: layouts agree (NCHW is NHWC transposed), the
//! quantised ROI_ALIGN stays within its weight-rounding error of the float one, float16
//! stays within float16 rounding of float32, and ROI_POOLING matches a brute-force max.

use proptest::prelude::*;

use super::testutil::{run, T};
use crate::kernels::{GenerateProposals, HeatmapMaxKeypoint, KernelOp, RoiAlign, RoiPooling};
use crate::tensor::DType;

const F: (DType, f32, i32) = (DType::F32, 0.0, 0);
const I: (DType, f32, i32) = (DType::I32, 0.0, 0);

/// NHWC `[n, h, w, c]` data as NCHW.
fn to_nchw(x: &[f32], n: usize, h: usize, w: usize, c: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for b in 0..n {
        for y in 0..h {
            for xx in 0..w {
                for ch in 0..c {
                    out[((b * c + ch) * h + y) * w + xx] = x[((b * h + y) * w + xx) * c + ch];
                }
            }
        }
    }
    out
}

/// A feature map `[n, h, w, c]` with values in [-8, 8) (multiples of 1/16) and `r` valid
/// rois (image = map at stride 2) with batch indices.
fn roi_case() -> impl Strategy<Value = (usize, usize, usize, usize, Vec<f32>, Vec<f32>, Vec<i32>)> {
    (1usize..3, 1usize..6, 1usize..6, 1usize..4, 1usize..5).prop_flat_map(|(n, h, w, c, r)| {
        let data = proptest::collection::vec(-128i32..=127, n * h * w * c)
            .prop_map(|v| v.into_iter().map(|x| x as f32 / 16.0).collect::<Vec<f32>>());
        let rois =
            proptest::collection::vec((0.0f32..1.0, 0.0f32..1.0, 0.0f32..1.0, 0.0f32..1.0), r)
                .prop_map(move |v| {
                    let (iw, ih) = (2.0 * w as f32, 2.0 * h as f32);
                    v.into_iter()
                        .flat_map(|(a, b, c2, d)| {
                            // Multiples of 1/8 so that 16-bit boxes hold them exactly.
                            let q = |x: f32| (x * 8.0).floor() / 8.0;
                            let (x1, x2) = (q(a.min(c2) * iw), q(a.max(c2) * iw));
                            let (y1, y2) = (q(b.min(d) * ih), q(b.max(d) * ih));
                            [x1, y1, x2, y2]
                        })
                        .collect::<Vec<f32>>()
                });
        let batches = proptest::collection::vec(0..n as i32, r);
        (Just(n), Just(h), Just(w), Just(c), data, rois, batches)
    })
}

proptest! {
    #![proptest_config(crate::kernels::proptest_config(128))]

    #[test]
    fn roi_align_layouts_quant_and_half_agree(
        (n, h, w, c, data, rois, batches) in roi_case(),
        oh in 1u32..4,
        ow in 1u32..4,
        ratio in 0u32..3,
    ) {
        let r = batches.len();
        let op = |nchw| -> KernelOp {
            RoiAlign {
                out_h: oh,
                out_w: ow,
                height_stride: 2.0,
                width_stride: 2.0,
                h_ratio: ratio,
                w_ratio: ratio,
                nchw,
            }
            .into()
        };
        let rt = T::f32(&[r, 4], &rois);
        let bt = T::i32(&[r], &batches);
        let nhwc = run(&op(false), &[&T::f32(&[n, h, w, c], &data), &rt, &bt], &[F]).unwrap();
        let x = T::f32(&[n, c, h, w], &to_nchw(&data, n, h, w, c));
        let nchw = run(&op(true), &[&x, &rt, &bt], &[F]).unwrap();
        let (oh, ow) = (oh as usize, ow as usize);
        let want = to_nchw(
            &nhwc[0].values().iter().map(|&v| v as f32).collect::<Vec<_>>(),
            r,
            oh,
            ow,
            c,
        );
        prop_assert_eq!(nchw[0].values(), want.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());

        // Float16: within float16 rounding of the float32 result (inputs are exact).
        let half = run(
            &op(false),
            &[&T::f16(&[n, h, w, c], &data), &T::f16(&[r, 4], &rois), &bt],
            &[(DType::F16, 0.0, 0)],
        )
        .unwrap();
        for (a, e) in half[0].values().iter().zip(nhwc[0].values()) {
            prop_assert!((a - e).abs() <= 1e-3 * (1.0 + e.abs()), "{a} {e}");
        }

        // Quantised: stored = 16 * value + 128 (scale 1/16, zero point 128), the same
        // output quantisation. Bilinear weights are rounded to 1/255: each sample is off by
        // at most 4 * 0.5/255 * 128 stored units, plus the final rounding.
        let xq: Vec<u8> = data.iter().map(|&v| (v * 16.0 + 128.0) as u8).collect();
        let rq: Vec<u16> = rois.iter().map(|&v| (v * 8.0) as u16).collect();
        let q = run(
            &op(false),
            &[
                &T::u8(&[n, h, w, c], &xq, 1.0 / 16.0, 128),
                &T::u16(&[r, 4], &rq, 0.125, 0),
                &bt,
            ],
            &[(DType::U8, 1.0 / 16.0, 128)],
        )
        .unwrap();
        for (qv, e) in q[0].ints().iter().zip(nhwc[0].values()) {
            let want = (e * 16.0 + 128.0).clamp(0.0, 255.0);
            prop_assert!((*qv as f64 - want).abs() <= 2.1, "{qv} {want}");
        }
    }

    #[test]
    fn roi_pooling_is_a_brute_force_max(
        (n, h, w, c, data, rois, batches) in roi_case(),
        oh in 1u32..4,
        ow in 1u32..4,
    ) {
        let r = batches.len();
        let op = |nchw| -> KernelOp {
            RoiPooling { out_h: oh, out_w: ow, height_stride: 2.0, width_stride: 2.0, nchw }
                .into()
        };
        let rt = T::f32(&[r, 4], &rois);
        let bt = T::i32(&[r], &batches);
        let got = run(&op(false), &[&T::f32(&[n, h, w, c], &data), &rt, &bt], &[F]).unwrap();
        let got = got[0].values();
        let (oh, ow) = (oh as usize, ow as usize);
        for k in 0..r {
            let roi = &rois[k * 4..k * 4 + 4];
            // Cells as the reference snaps them, in float32 as it computes.
            let cell = |v: f32| (v * 0.5).round() as i32;
            let (x1, y1, x2, y2) = (cell(roi[0]), cell(roi[1]), cell(roi[2]), cell(roi[3]));
            let rw = (x2 - x1 + 1).max(1) as f32;
            let rh = (y2 - y1 + 1).max(1) as f32;
            let (sh, sw) = (rh / oh as f32, rw / ow as f32);
            for i in 0..oh {
                let ys = ((sh * i as f32 + y1 as f32).floor() as usize).min(h);
                let ye = ((sh * (i + 1) as f32 + y1 as f32).ceil() as usize).min(h);
                for j in 0..ow {
                    let xs = ((sw * j as f32 + x1 as f32).floor() as usize).min(w);
                    let xe = ((sw * (j + 1) as f32 + x1 as f32).ceil() as usize).min(w);
                    for ch in 0..c {
                        let b = batches[k] as usize;
                        let mut best: Option<f32> = None;
                        for y in ys..ye {
                            for x in xs..xe {
                                let v = data[((b * h + y) * w + x) * c + ch];
                                best = Some(best.map_or(v, |m| m.max(v)));
                            }
                        }
                        let at = ((k * oh + i) * ow + j) * c + ch;
                        prop_assert_eq!(got[at], f64::from(best.unwrap_or(0.0)));
                    }
                }
            }
        }
        let x = T::f32(&[n, c, h, w], &to_nchw(&data, n, h, w, c));
        let nchw = run(&op(true), &[&x, &rt, &bt], &[F]).unwrap();
        let want = to_nchw(&got.iter().map(|&v| v as f32).collect::<Vec<_>>(), r, oh, ow, c);
        prop_assert_eq!(nchw[0].values(), want.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
    }

    #[test]
    fn heatmap_and_proposals_layouts_agree(
        (n, h, w, c, data, _rois, _batches) in roi_case(),
        pre in -1i32..6,
        post in -1i32..6,
    ) {
        // HEATMAP_MAX_KEYPOINT on square maps: use h x h.
        let s = h.max(2);
        let heat: Vec<f32> = (0..n * s * s * c).map(|i| data[i % data.len()]).collect();
        let boxes: Vec<f32> = (0..n).flat_map(|b| [b as f32, 1.0, 9.0 + b as f32, 5.0]).collect();
        let bt = T::f32(&[n, 4], &boxes);
        let a = run(
            &HeatmapMaxKeypoint { nchw: false }.into(),
            &[&T::f32(&[n, s, s, c], &heat), &bt],
            &[F, F],
        )
        .unwrap();
        let b = run(
            &HeatmapMaxKeypoint { nchw: true }.into(),
            &[&T::f32(&[n, c, s, s], &to_nchw(&heat, n, s, s, c)), &bt],
            &[F, F],
        )
        .unwrap();
        prop_assert_eq!(a[0].values(), b[0].values());
        prop_assert_eq!(a[1].values(), b[1].values());

        // GENERATE_PROPOSALS with `c` anchors per position.
        let scores: Vec<f32> = (0..n * h * w * c).map(|i| data[(i * 7) % data.len()]).collect();
        let deltas: Vec<f32> =
            (0..n * h * w * c * 4).map(|i| data[(i * 3) % data.len()] / 8.0).collect();
        let anchors: Vec<f32> = (0..c).flat_map(|k| [0.0, 0.0, 2.0 + k as f32, 3.0]).collect();
        let info: Vec<f32> = (0..n).flat_map(|_| [2.0 * h as f32, 2.0 * w as f32]).collect();
        let op = |nchw| -> KernelOp {
            GenerateProposals {
                height_stride: 2.0,
                width_stride: 2.0,
                pre_nms_top_n: pre,
                post_nms_top_n: post,
                iou_threshold: 0.5,
                min_size: 0.5,
                nchw,
            }
            .into()
        };
        let at = T::f32(&[c, 4], &anchors);
        let it = T::f32(&[n, 2], &info);
        let a = run(
            &op(false),
            &[&T::f32(&[n, h, w, c], &scores), &T::f32(&[n, h, w, 4 * c], &deltas), &at, &it],
            &[F, F, I],
        )
        .unwrap();
        let b = run(
            &op(true),
            &[
                &T::f32(&[n, c, h, w], &to_nchw(&scores, n, h, w, c)),
                &T::f32(&[n, 4 * c, h, w], &to_nchw(&deltas, n, h, w, 4 * c)),
                &at,
                &it,
            ],
            &[F, F, I],
        )
        .unwrap();
        for k in 0..3 {
            prop_assert_eq!(&a[k].ty.shape, &b[k].ty.shape);
            prop_assert_eq!(a[k].values(), b[k].values());
        }
        // Scores come out in non-increasing order within each batch.
        let sc = a[0].values();
        let bs = a[2].ints();
        for i in 1..sc.len() {
            if bs[i] == bs[i - 1] {
                prop_assert!(sc[i] <= sc[i - 1]);
            }
        }
    }
}
