//! Detection kernels: region-of-interest pooling, box transforms, non-maximum suppression
//! and proposal generation, with NNAPI semantics.
//!
//! Boxes are `[x1, y1, x2, y2]` in image coordinates (DETECTION_POSTPROCESSING's outputs are
//! `[y1, x1, y2, x2]`, as NNAPI defines them). Quantised models carry boxes as 16-bit
//! asymmetric tensors of scale 0.125 and zero point 0; the kernels check that where the
//! NNAPI reference does.
//!
//! Like the NNAPI reference, every kernel but ROI_ALIGN's quantised path computes in
//! float32: float16 and quantised tensors are widened (dequantised as
//! `(stored - zero_point) * scale`) and the results rounded back (quantised as
//! `round(x / scale + zero_point)`, halves away from zero, saturated).
//!
//! Values that the reference rejects at execution (a batch index out of range, an inverted
//! or out-of-image box, a NaN coordinate) give a [`crate::kernels::KernelError`], never a
//! panic.

pub mod bbox_transform;
pub mod box_nms;
pub mod generate_proposals;
pub mod heatmap;
pub(crate) mod nms;
pub mod postprocess;
#[cfg(test)]
mod props;
pub mod roi_align;
pub mod roi_pooling;

use half::f16;

use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// The scale every 16-bit quantised box tensor has.
pub(crate) const BOX_SCALE: f32 = 0.125;

/// The real values of a tensor as float32: float16 widened, integers dequantised with the
/// tensor's scale and zero point, int32 converted.
pub(crate) fn to_f32(v: &View<'_>) -> Result<Vec<f32>> {
    let q = &v.ty.quant;
    let (scale, zp) = (q.scale, q.zero_point as f32);
    let deq = |s: f32| (s - zp) * scale;
    Ok(match v.ty.dtype {
        DType::F32 => v.f32s()?.to_vec(),
        DType::F16 => v.f16s()?.iter().map(|x| x.to_f32()).collect(),
        DType::U8 => v.u8s()?.iter().map(|&x| deq(f32::from(x))).collect(),
        DType::I8 => v.i8s()?.iter().map(|&x| deq(f32::from(x))).collect(),
        DType::U16 => v.u16s()?.iter().map(|&x| deq(f32::from(x))).collect(),
        DType::I16 => v.i16s()?.iter().map(|&x| deq(f32::from(x))).collect(),
        DType::I32 => v.i32s()?.iter().map(|&x| x as f32).collect(),
        dtype => {
            return Err(KernelError::UnsupportedDType {
                op: "detection",
                dtype,
            })
        }
    })
}

/// NNAPI's float-to-quantised conversion: `round(x / scale + zero_point)` (halves away from
/// zero) saturated to `[lo, hi]`; NaN gives 0, clamped to `[lo, hi]`.
pub(crate) fn quantize(x: f32, scale: f32, zero_point: i32, lo: i32, hi: i32) -> i32 {
    // `as` saturates and maps NaN to 0, where the C++ cast is undefined.
    let v = (x / scale + zero_point as f32).round() as i32;
    v.clamp(lo, hi)
}

/// Writes `data` (real values) into the first `data.len()` elements of `out`: float32 as
/// is, float16 rounded to nearest even, integer types quantised with the output's scale and
/// zero point ([`quantize`]).
pub(crate) fn from_f32(out: &mut ViewMut<'_>, data: &[f32]) -> Result<()> {
    let q = out.ty.quant.clone();
    let quant = |x: f32, lo: i32, hi: i32| quantize(x, q.scale, q.zero_point, lo, hi);
    let short = || bad_shape("detection", "output smaller than its data");
    match out.ty.dtype {
        DType::F32 => out
            .f32s_mut()?
            .get_mut(..data.len())
            .ok_or_else(short)?
            .copy_from_slice(data),
        DType::F16 => {
            for (o, &x) in out.f16s_mut()?.iter_mut().zip(data) {
                *o = f16::from_f32(x);
            }
        }
        DType::U8 => {
            for (o, &x) in out.u8s_mut()?.iter_mut().zip(data) {
                *o = quant(x, 0, 255) as u8;
            }
        }
        DType::I8 => {
            for (o, &x) in out.i8s_mut()?.iter_mut().zip(data) {
                *o = quant(x, -128, 127) as i8;
            }
        }
        DType::U16 => {
            for (o, &x) in out.u16s_mut()?.iter_mut().zip(data) {
                *o = quant(x, 0, 65535) as u16;
            }
        }
        DType::I16 => {
            for (o, &x) in out.i16s_mut()?.iter_mut().zip(data) {
                *o = quant(x, -32768, 32767) as i16;
            }
        }
        dtype => {
            return Err(KernelError::UnsupportedDType {
                op: "detection",
                dtype,
            })
        }
    }
    Ok(())
}

/// Requires `t` to have element type `want`.
pub(crate) fn want_dtype(t: &TensorType, want: DType) -> Result<()> {
    if t.dtype != want {
        return Err(KernelError::DType {
            expected: want,
            got: t.dtype,
        });
    }
    Ok(())
}

/// Requires `t` to have rank `rank`, naming it `what` in the error.
pub(crate) fn want_rank(op: &'static str, what: &str, t: &TensorType, rank: usize) -> Result<()> {
    if t.shape.len() != rank {
        return Err(bad_shape(
            op,
            format!("{what} {:?} must have rank {rank}", t.shape),
        ));
    }
    Ok(())
}

/// The element type boxes must have next to a main tensor of type `main`: the same float
/// type, or 16-bit asymmetric for 8-bit quantised tensors.
pub(crate) fn box_dtype(op: &'static str, main: DType) -> Result<DType> {
    match main {
        DType::F32 | DType::F16 => Ok(main),
        DType::U8 | DType::I8 => Ok(DType::U16),
        dtype => Err(KernelError::UnsupportedDType { op, dtype }),
    }
}

/// Requires a 16-bit box tensor to have scale 0.125 and zero point 0 (float tensors pass).
pub(crate) fn check_box_quant(op: &'static str, what: &str, t: &TensorType) -> Result<()> {
    if matches!(t.dtype, DType::U16 | DType::I16)
        && (t.quant.scale != BOX_SCALE || t.quant.zero_point != 0)
    {
        return Err(bad_shape(
            op,
            format!(
                "{what} must have scale 0.125 and zero point 0, has {} and {}",
                t.quant.scale, t.quant.zero_point
            ),
        ));
    }
    Ok(())
}

/// An error for an input value the operation rejects (a bad box or batch index).
pub(crate) fn bad_value(op: &'static str, reason: impl Into<String>) -> KernelError {
    bad_shape(op, reason)
}

/// The batch index `b` as an index below `batches`, or an error.
pub(crate) fn batch_index(op: &'static str, b: i32, batches: usize) -> Result<usize> {
    usize::try_from(b)
        .ok()
        .filter(|&b| b < batches)
        .ok_or_else(|| bad_value(op, format!("batch index {b} outside 0..{batches}")))
}

/// Sums of element counts for [`crate::kernels::Cost`], saturating.
pub(crate) fn elems(shapes: &[&[usize]]) -> u64 {
    shapes
        .iter()
        .map(|s| s.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64)))
        .fold(0u64, u64::saturating_add)
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Building views for the detection kernels' tests.

    use crate::kernels::{execute, KernelOp};
    use crate::tensor::{DType, Staged, TensorType, View, ViewMut};

    /// A test tensor: its type and bytes.
    pub struct T {
        pub ty: TensorType,
        pub buf: Staged,
    }

    impl T {
        fn raw(ty: TensorType, bytes: &[u8]) -> T {
            let mut buf = Staged::zeroed(bytes.len());
            buf.bytes_mut().copy_from_slice(bytes);
            T { ty, buf }
        }

        /// A float32 tensor.
        pub fn f32(shape: &[usize], data: &[f32]) -> T {
            T::raw(
                TensorType::new(DType::F32, shape),
                bytemuck::cast_slice(data),
            )
        }

        /// An int32 tensor.
        pub fn i32(shape: &[usize], data: &[i32]) -> T {
            T::raw(
                TensorType::new(DType::I32, shape),
                bytemuck::cast_slice(data),
            )
        }

        /// A float16 tensor from float32 values.
        pub fn f16(shape: &[usize], data: &[f32]) -> T {
            let h: Vec<half::f16> = data.iter().map(|&x| half::f16::from_f32(x)).collect();
            T::raw(TensorType::new(DType::F16, shape), bytemuck::cast_slice(&h))
        }

        /// A u8 tensor.
        pub fn u8(shape: &[usize], data: &[u8], scale: f32, zp: i32) -> T {
            T::raw(TensorType::quantized(DType::U8, shape, scale, zp), data)
        }

        /// An i8 tensor.
        pub fn i8(shape: &[usize], data: &[i8], scale: f32, zp: i32) -> T {
            T::raw(
                TensorType::quantized(DType::I8, shape, scale, zp),
                bytemuck::cast_slice(data),
            )
        }

        /// A u16 tensor.
        pub fn u16(shape: &[usize], data: &[u16], scale: f32, zp: i32) -> T {
            T::raw(
                TensorType::quantized(DType::U16, shape, scale, zp),
                bytemuck::cast_slice(data),
            )
        }

        /// An i16 tensor.
        pub fn i16(shape: &[usize], data: &[i16], scale: f32, zp: i32) -> T {
            T::raw(
                TensorType::quantized(DType::I16, shape, scale, zp),
                bytemuck::cast_slice(data),
            )
        }

        /// The elements as f64 (dequantised).
        pub fn values(&self) -> Vec<f64> {
            let v = View {
                ty: &self.ty,
                bytes: self.buf.bytes(),
            };
            (0..self.ty.numel()).filter_map(|i| v.get_f64(i)).collect()
        }

        /// The stored integers of an integer tensor.
        pub fn ints(&self) -> Vec<i64> {
            let b = self.buf.bytes();
            match self.ty.dtype {
                DType::U8 => b.iter().map(|&x| i64::from(x)).collect(),
                DType::I8 => b.iter().map(|&x| i64::from(x as i8)).collect(),
                DType::U16 => bytemuck::cast_slice::<u8, u16>(b)
                    .iter()
                    .map(|&x| i64::from(x))
                    .collect(),
                DType::I16 => bytemuck::cast_slice::<u8, i16>(b)
                    .iter()
                    .map(|&x| i64::from(x))
                    .collect(),
                DType::I32 => bytemuck::cast_slice::<u8, i32>(b)
                    .iter()
                    .map(|&x| i64::from(x))
                    .collect(),
                _ => Vec::new(),
            }
        }
    }

    /// Output `ty`s from `op.output_shapes`, each with the dtype and quantisation given.
    pub fn outputs(
        op: &KernelOp,
        inputs: &[&T],
        kinds: &[(DType, f32, i32)],
    ) -> crate::kernels::Result<Vec<T>> {
        let refs: Vec<&TensorType> = inputs.iter().map(|t| &t.ty).collect();
        let shapes = op.output_shapes(&refs)?;
        Ok(shapes
            .iter()
            .zip(kinds)
            .map(|(s, &(d, scale, zp))| {
                let ty = TensorType::quantized(d, s, scale, zp);
                let n = ty.numel() * d.size() as usize;
                T {
                    ty,
                    buf: Staged::zeroed(n),
                }
            })
            .collect())
    }

    /// Runs `op`, returning the outputs cut to their real shapes.
    pub fn run(
        op: &KernelOp,
        inputs: &[&T],
        kinds: &[(DType, f32, i32)],
    ) -> crate::kernels::Result<Vec<T>> {
        let mut outs = outputs(op, inputs, kinds)?;
        let views: Vec<View<'_>> = inputs
            .iter()
            .map(|t| View {
                ty: &t.ty,
                bytes: t.buf.bytes(),
            })
            .collect();
        let real = {
            let mut ov: Vec<ViewMut<'_>> = outs
                .iter_mut()
                .map(|t| ViewMut {
                    ty: &t.ty,
                    bytes: t.buf.bytes_mut(),
                })
                .collect();
            execute(op, &views, &mut ov)?
        };
        if let Some(real) = real {
            for (t, s) in outs.iter_mut().zip(real) {
                let mut ty = t.ty.clone();
                ty.shape = s;
                let n = ty.numel() * ty.dtype.size() as usize;
                *t = T::raw(ty, &t.buf.bytes()[..n]);
            }
        }
        Ok(outs)
    }
}

#[cfg(test)]
mod hostile {
    //! Hostile inputs (garbage values, NaN, infinities, bad batch indices, empty and
    //! mismatched shapes) give a result or a `KernelError`, never a panic.

    use super::testutil::{run, T};
    use super::*;
    use crate::kernels::{
        BboxTransform, BoxWithNmsLimit, DetectionPostprocess, GenerateProposals,
        HeatmapMaxKeypoint, KernelOp, NmsKernel, RoiAlign, RoiPooling,
    };
    use proptest::prelude::*;

    const VALUES: [f32; 14] = [
        0.0,
        1.0,
        -1.0,
        0.5,
        2.0,
        7.5,
        100.0,
        -100.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e30,
        3.0,
        f32::MIN_POSITIVE,
    ];

    /// A tensor of `dtype` and `shape` whose values come from `seed`.
    fn tensor(dtype: DType, shape: &[usize], seed: &mut u64) -> T {
        let n: usize = shape.iter().product();
        let mut next = || {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (*seed >> 33) as u32
        };
        let f: Vec<f32> = (0..n)
            .map(|_| VALUES[next() as usize % VALUES.len()])
            .collect();
        match dtype {
            DType::F32 => T::f32(shape, &f),
            DType::F16 => T::f16(shape, &f),
            DType::I32 => T::i32(
                shape,
                &(0..n).map(|_| (next() % 7) as i32 - 2).collect::<Vec<_>>(),
            ),
            DType::U8 => T::u8(
                shape,
                &(0..n).map(|_| next() as u8).collect::<Vec<_>>(),
                0.5,
                3,
            ),
            DType::I8 => T::i8(
                shape,
                &(0..n).map(|_| next() as i8).collect::<Vec<_>>(),
                0.25,
                -3,
            ),
            DType::U16 => T::u16(
                shape,
                &(0..n).map(|_| (next() % 128) as u16).collect::<Vec<_>>(),
                0.125,
                0,
            ),
            _ => T::i16(
                shape,
                &(0..n)
                    .map(|_| (next() % 128) as i16 - 8)
                    .collect::<Vec<_>>(),
                0.125,
                0,
            ),
        }
    }

    fn main_dtype(k: u8) -> DType {
        [DType::F32, DType::F16, DType::U8, DType::I8][k as usize % 4]
    }

    fn float(k: u8) -> f32 {
        VALUES[k as usize % VALUES.len()]
    }

    /// One kernel, its inputs and its outputs' `(dtype, scale, zero point)`.
    fn case(
        which: u8,
        d: [usize; 5],
        p: [u8; 6],
        seed: u64,
    ) -> (KernelOp, Vec<T>, Vec<(DType, f32, i32)>) {
        let mut s = seed;
        let main = main_dtype(p[0]);
        let boxes = box_dtype("t", main).unwrap_or(DType::U16);
        let q = |dt: DType| (dt, if dt.is_float() { 0.0 } else { 0.125 }, 0);
        let i32t = (DType::I32, 0.0, 0);
        let [a, b, c, e, f] = d;
        match which % 7 {
            0 => {
                let op = RoiAlign {
                    out_h: 1 + u32::from(p[1] % 3),
                    out_w: 1 + u32::from(p[2] % 3),
                    height_stride: float(p[3]).abs().max(0.25),
                    width_stride: 0.5,
                    h_ratio: u32::from(p[4] % 3),
                    w_ratio: u32::from(p[5] % 3),
                    nchw: p[1].is_multiple_of(2),
                };
                let ins = vec![
                    tensor(main, &[a, b, c, e], &mut s),
                    tensor(boxes, &[f, 4], &mut s),
                    tensor(DType::I32, &[f], &mut s),
                ];
                (op.into(), ins, vec![q(main)])
            }
            1 => {
                let op = RoiPooling {
                    out_h: 1 + u32::from(p[1] % 3),
                    out_w: 1 + u32::from(p[2] % 3),
                    height_stride: 0.5,
                    width_stride: float(p[3]).abs().max(0.25),
                    nchw: p[1].is_multiple_of(2),
                };
                let ins = vec![
                    tensor(main, &[a, b, c, e], &mut s),
                    tensor(boxes, &[f, 4], &mut s),
                    tensor(DType::I32, &[f], &mut s),
                ];
                (op.into(), ins, vec![q(main)])
            }
            2 => {
                let op = BoxWithNmsLimit {
                    score_threshold: float(p[1]).clamp(-1.0, 1.0),
                    max_detections: i32::from(p[2] % 5) - 1,
                    kernel: NmsKernel::from_u32(u32::from(p[3] % 3)).unwrap_or(NmsKernel::Hard),
                    iou_threshold: float(p[4]).clamp(-1.0, 1.0),
                    sigma: float(p[5]).clamp(-1.0, 1.0),
                    nms_score_threshold: float(p[1]).clamp(-1.0, 1.0),
                };
                let cl = b.max(2);
                let ins = vec![
                    tensor(main, &[a, cl], &mut s),
                    tensor(boxes, &[a, 4 * cl], &mut s),
                    tensor(DType::I32, &[a], &mut s),
                ];
                (op.into(), ins, vec![q(main), q(boxes), i32t, i32t])
            }
            3 => {
                let op = GenerateProposals {
                    height_stride: 1.0,
                    width_stride: float(p[1]).abs().clamp(0.5, 1e6),
                    pre_nms_top_n: i32::from(p[2] % 5) - 1,
                    post_nms_top_n: i32::from(p[3] % 5) - 1,
                    iou_threshold: float(p[4]).clamp(-1.0, 1.0),
                    min_size: float(p[5]).clamp(-1.0, 1.0),
                    nchw: p[1].is_multiple_of(2),
                };
                let (anchors, info) = if main.is_float() {
                    (main, main)
                } else {
                    (DType::I16, DType::U16)
                };
                let ins = if op.nchw {
                    vec![
                        tensor(main, &[a, e, b, c], &mut s),
                        tensor(main, &[a, 4 * e, b, c], &mut s),
                        tensor(anchors, &[e, 4], &mut s),
                        tensor(info, &[a, 2], &mut s),
                    ]
                } else {
                    vec![
                        tensor(main, &[a, b, c, e], &mut s),
                        tensor(main, &[a, b, c, 4 * e], &mut s),
                        tensor(anchors, &[e, 4], &mut s),
                        tensor(info, &[a, 2], &mut s),
                    ]
                };
                (op.into(), ins, vec![q(main), q(boxes), i32t])
            }
            4 => {
                let main = if main.is_float() { main } else { DType::F32 };
                let regular = p[1].is_multiple_of(2);
                let op = DetectionPostprocess {
                    scale_y: 1.0,
                    scale_x: float(p[2]).abs().clamp(0.5, 1e6),
                    scale_h: 0.5,
                    scale_w: 2.0,
                    regular_nms: regular,
                    max_detections: 1 + u32::from(p[3] % 3),
                    max_classes_per_detection: 1 + i32::from(p[4] % 3),
                    max_per_class: 1 + i32::from(p[5] % 3),
                    score_threshold: 0.0,
                    iou_threshold: float(p[4]).abs().min(1.0),
                    bg_in_label: p[2].is_multiple_of(2),
                };
                let ins = vec![
                    tensor(main, &[a, b, c.max(2)], &mut s),
                    tensor(main, &[a, b, 4 + e], &mut s),
                    tensor(main, &[b, 4], &mut s),
                ];
                (op.into(), ins, vec![q(main), q(main), i32t, i32t])
            }
            5 => {
                let op = HeatmapMaxKeypoint {
                    nchw: p[1].is_multiple_of(2),
                };
                let size = b.max(2);
                let ins = vec![
                    tensor(main, &[a, size, size, c], &mut s),
                    tensor(boxes, &[a, 4], &mut s),
                ];
                let qs = if main.is_float() {
                    q(main)
                } else {
                    (main, 0.5, 1)
                };
                (op.into(), ins, vec![qs, q(boxes)])
            }
            _ => {
                let (rois, deltas) = if main.is_float() {
                    (main, main)
                } else {
                    (DType::U16, main)
                };
                let ins = vec![
                    tensor(rois, &[a, 4], &mut s),
                    tensor(deltas, &[a, 4 * b.max(1)], &mut s),
                    tensor(DType::I32, &[a], &mut s),
                    tensor(rois, &[c, 2], &mut s),
                ];
                (BboxTransform.into(), ins, vec![q(rois)])
            }
        }
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(512))]

        #[test]
        fn never_panics(
            which in any::<u8>(),
            d in proptest::array::uniform5(0usize..5),
            p in proptest::array::uniform6(any::<u8>()),
            seed in any::<u64>(),
        ) {
            let (op, ins, kinds) = case(which, d, p, seed);
            // The device decodes the words first: a non-finite parameter stops there.
            let Ok(decoded) = KernelOp::decode(op.opcode(), &op.encode_params()) else {
                return Ok(());
            };
            prop_assert_eq!(&decoded, &op);
            let refs: Vec<&T> = ins.iter().collect();
            // Any outcome but a panic.
            let _ = run(&decoded, &refs, &kinds);
        }
    }
}
