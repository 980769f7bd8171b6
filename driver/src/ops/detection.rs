//! Detection operations: ROI_ALIGN, ROI_POOLING, BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS,
//! DETECTION_POSTPROCESSING, HEATMAP_MAX_KEYPOINT, AXIS_ALIGNED_BBOX_TRANSFORM.
//!
//! Their float forms take boxes of the main type; their 8-bit quantised forms take boxes as
//! TENSOR_QUANT16_ASYMM (scale 0.125, zero point 0; GENERATE_PROPOSALS' anchors as
//! TENSOR_QUANT16_SYMM) and float parameters as FLOAT32, so each has a float signature and
//! a quantised one. BOX_WITH_NMS_LIMIT and GENERATE_PROPOSALS have data-dependent output
//! sizes: their kernels report the real shapes at execution.

use vnpu_emu::kernels::{
    BboxTransform, BoxWithNmsLimit, DetectionPostprocess, GenerateProposals, HeatmapMaxKeypoint,
    NmsKernel, RoiAlign, RoiPooling,
};

use super::types::{FLOATS, FLOAT_QUANT8};
use super::{arg, Arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{OperandType as T, OperationType};

const INT32S: Ty = Ty::Is(T::TENSOR_INT32);
const BOX16: Ty = Ty::Is(T::TENSOR_QUANT16_ASYMM);
const Q8A: &[T] = &[T::TENSOR_QUANT8_ASYMM];
const Q8AS: &[T] = &[T::TENSOR_QUANT8_ASYMM_SIGNED];
const QUANT8: &[T] = &[T::TENSOR_QUANT8_ASYMM, T::TENSOR_QUANT8_ASYMM_SIGNED];

/// A float argument that must be finite and > 0.
fn positive_f32(a: &Args<'_>, name: &str) -> Result<f32, CompileError> {
    let v = a.f32(name)?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(a.invalid(format!("{name} = {v}")))
    }
}

/// A float argument that must be finite.
fn finite_f32(a: &Args<'_>, name: &str) -> Result<f32, CompileError> {
    let v = a.f32(name)?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(a.invalid(format!("{name} = {v}")))
    }
}

/// One kernel reading `inputs` (by name) and writing every output.
fn all_outputs(
    a: &Args<'_>,
    op: impl Into<vnpu_emu::kernels::KernelOp>,
    inputs: &[&str],
) -> Result<Lowered, CompileError> {
    let ins = inputs
        .iter()
        .map(|n| a.input(n))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Lowered {
        op: op.into(),
        inputs: ins,
        outputs: a.outputs().to_vec(),
    })
}

// ---- ROI_ALIGN ----

const fn roi_align_args(rois: Ty) -> [Arg; 10] {
    [
        arg("input", Ty::T),
        arg("rois", rois),
        arg("batches", INT32S),
        arg("out_h", Ty::Int),
        arg("out_w", Ty::Int),
        arg("h_stride", Ty::Scalar),
        arg("w_stride", Ty::Scalar),
        arg("h_ratio", Ty::Int),
        arg("w_ratio", Ty::Int),
        arg("layout", Ty::Bool),
    ]
}

const ROI_ALIGN_F: [Arg; 10] = roi_align_args(Ty::T);
const ROI_ALIGN_Q: [Arg; 10] = roi_align_args(BOX16);
const OUT: &[Arg] = &[arg("output", Ty::T)];

/// ROI_ALIGN.
pub const ROI_ALIGN: OpDef = OpDef {
    op: OperationType::ROI_ALIGN,
    signatures: &[
        Signature::new(V1_2, FLOATS, &ROI_ALIGN_F, OUT),
        Signature::new(V1_2, Q8A, &ROI_ALIGN_Q, OUT),
        Signature::new(V1_3, Q8AS, &ROI_ALIGN_Q, OUT),
    ],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| {
        let k = RoiAlign {
            out_h: a.positive("out_h")?,
            out_w: a.positive("out_w")?,
            height_stride: positive_f32(a, "h_stride")?,
            width_stride: positive_f32(a, "w_stride")?,
            h_ratio: a.non_negative("h_ratio")?,
            w_ratio: a.non_negative("w_ratio")?,
            nchw: a.bool("layout")?,
        };
        a.kernel(k, &["input", "rois", "batches"])
    }),
};

// ---- ROI_POOLING ----

const fn roi_pooling_args(rois: Ty) -> [Arg; 8] {
    [
        arg("input", Ty::T),
        arg("rois", rois),
        arg("batches", INT32S),
        arg("out_h", Ty::Int),
        arg("out_w", Ty::Int),
        arg("h_stride", Ty::Scalar),
        arg("w_stride", Ty::Scalar),
        arg("layout", Ty::Bool),
    ]
}

const ROI_POOLING_F: [Arg; 8] = roi_pooling_args(Ty::T);
const ROI_POOLING_Q: [Arg; 8] = roi_pooling_args(BOX16);

/// ROI_POOLING.
pub const ROI_POOLING: OpDef = OpDef {
    op: OperationType::ROI_POOLING,
    signatures: &[
        Signature::new(V1_2, FLOATS, &ROI_POOLING_F, OUT),
        Signature::new(V1_2, Q8A, &ROI_POOLING_Q, OUT),
        Signature::new(V1_3, Q8AS, &ROI_POOLING_Q, OUT),
    ],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| {
        let k = RoiPooling {
            out_h: a.positive("out_h")?,
            out_w: a.positive("out_w")?,
            height_stride: positive_f32(a, "h_stride")?,
            width_stride: positive_f32(a, "w_stride")?,
            nchw: a.bool("layout")?,
        };
        a.kernel(k, &["input", "rois", "batches"])
    }),
};

// ---- BOX_WITH_NMS_LIMIT ----

const fn nms_args(boxes: Ty) -> [Arg; 9] {
    [
        arg("scores", Ty::T),
        arg("boxes", boxes),
        arg("batches", INT32S),
        arg("score_threshold", Ty::Scalar),
        arg("max_detections", Ty::Int),
        arg("nms_kernel", Ty::Int),
        arg("iou_threshold", Ty::Scalar),
        arg("sigma", Ty::Scalar),
        arg("nms_score_threshold", Ty::Scalar),
    ]
}

const fn nms_outs(boxes: Ty) -> [Arg; 4] {
    [
        arg("scores", Ty::T),
        arg("boxes", boxes),
        arg("classes", INT32S),
        arg("batches", INT32S),
    ]
}

const NMS_F: [Arg; 9] = nms_args(Ty::T);
const NMS_Q: [Arg; 9] = nms_args(BOX16);
const NMS_OUT_F: [Arg; 4] = nms_outs(Ty::T);
const NMS_OUT_Q: [Arg; 4] = nms_outs(BOX16);

/// BOX_WITH_NMS_LIMIT.
pub const BOX_WITH_NMS_LIMIT: OpDef = OpDef {
    op: OperationType::BOX_WITH_NMS_LIMIT,
    signatures: &[
        Signature::new(V1_2, FLOATS, &NMS_F, &NMS_OUT_F),
        Signature::new(V1_2, Q8A, &NMS_Q, &NMS_OUT_Q),
        Signature::new(V1_3, Q8AS, &NMS_Q, &NMS_OUT_Q),
    ],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| {
        let kernel = a.i32("nms_kernel")?;
        let kernel = u32::try_from(kernel)
            .ok()
            .and_then(NmsKernel::from_u32)
            .ok_or_else(|| a.invalid(format!("nms_kernel = {kernel}")))?;
        let k = BoxWithNmsLimit {
            score_threshold: finite_f32(a, "score_threshold")?,
            max_detections: a.i32("max_detections")?,
            kernel,
            iou_threshold: finite_f32(a, "iou_threshold")?,
            sigma: finite_f32(a, "sigma")?,
            nms_score_threshold: finite_f32(a, "nms_score_threshold")?,
        };
        all_outputs(a, k, &["scores", "boxes", "batches"])
    }),
};

// ---- GENERATE_PROPOSALS ----

const fn proposals_args(anchors: Ty, info: Ty) -> [Arg; 11] {
    [
        arg("scores", Ty::T),
        arg("deltas", Ty::T),
        arg("anchors", anchors),
        arg("image_info", info),
        arg("h_stride", Ty::Scalar),
        arg("w_stride", Ty::Scalar),
        arg("pre_nms", Ty::Int),
        arg("post_nms", Ty::Int),
        arg("iou_threshold", Ty::Scalar),
        arg("min_size", Ty::Scalar),
        arg("layout", Ty::Bool),
    ]
}

const fn proposals_outs(boxes: Ty) -> [Arg; 3] {
    [
        arg("scores", Ty::T),
        arg("rois", boxes),
        arg("batches", INT32S),
    ]
}

const PROPOSALS_F: [Arg; 11] = proposals_args(Ty::T, Ty::T);
const PROPOSALS_Q: [Arg; 11] = proposals_args(Ty::Is(T::TENSOR_QUANT16_SYMM), BOX16);
const PROPOSALS_OUT_F: [Arg; 3] = proposals_outs(Ty::T);
const PROPOSALS_OUT_Q: [Arg; 3] = proposals_outs(BOX16);

/// GENERATE_PROPOSALS.
pub const GENERATE_PROPOSALS: OpDef = OpDef {
    op: OperationType::GENERATE_PROPOSALS,
    signatures: &[
        Signature::new(V1_2, FLOATS, &PROPOSALS_F, &PROPOSALS_OUT_F),
        Signature::new(V1_2, Q8A, &PROPOSALS_Q, &PROPOSALS_OUT_Q),
        Signature::new(V1_3, Q8AS, &PROPOSALS_Q, &PROPOSALS_OUT_Q),
    ],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| {
        let k = GenerateProposals {
            height_stride: positive_f32(a, "h_stride")?,
            width_stride: positive_f32(a, "w_stride")?,
            pre_nms_top_n: a.i32("pre_nms")?,
            post_nms_top_n: a.i32("post_nms")?,
            iou_threshold: finite_f32(a, "iou_threshold")?,
            min_size: finite_f32(a, "min_size")?,
            nchw: a.bool("layout")?,
        };
        all_outputs(a, k, &["scores", "deltas", "anchors", "image_info"])
    }),
};

// ---- DETECTION_POSTPROCESSING ----

/// DETECTION_POSTPROCESSING.
pub const DETECTION_POSTPROCESSING: OpDef = OpDef {
    op: OperationType::DETECTION_POSTPROCESSING,
    signatures: &[Signature::new(
        V1_2,
        FLOATS,
        &[
            arg("scores", Ty::T),
            arg("deltas", Ty::T),
            arg("anchors", Ty::T),
            arg("scale_y", Ty::Scalar),
            arg("scale_x", Ty::Scalar),
            arg("scale_h", Ty::Scalar),
            arg("scale_w", Ty::Scalar),
            arg("regular_nms", Ty::Bool),
            arg("max_detections", Ty::Int),
            arg("max_classes_per_detection", Ty::Int),
            arg("max_per_class", Ty::Int),
            arg("score_threshold", Ty::Scalar),
            arg("iou_threshold", Ty::Scalar),
            arg("bg_in_label", Ty::Bool),
        ],
        &[
            arg("scores", Ty::T),
            arg("boxes", Ty::T),
            arg("classes", INT32S),
            arg("detections", INT32S),
        ],
    )],
    check: None,
    runs: FLOATS,
    lower: Some(|a| {
        let regular_nms = a.bool("regular_nms")?;
        let max_classes_per_detection = a.i32("max_classes_per_detection")?;
        let max_per_class = a.i32("max_per_class")?;
        if regular_nms && max_per_class <= 0 {
            return Err(a.invalid(format!("max_per_class = {max_per_class}")));
        }
        if !regular_nms && max_classes_per_detection <= 0 {
            return Err(a.invalid(format!(
                "max_classes_per_detection = {max_classes_per_detection}"
            )));
        }
        let non_negative = |name: &str| {
            let v = finite_f32(a, name)?;
            if v >= 0.0 {
                Ok(v)
            } else {
                Err(a.invalid(format!("{name} = {v}")))
            }
        };
        let k = DetectionPostprocess {
            scale_y: positive_f32(a, "scale_y")?,
            scale_x: positive_f32(a, "scale_x")?,
            scale_h: positive_f32(a, "scale_h")?,
            scale_w: positive_f32(a, "scale_w")?,
            regular_nms,
            max_detections: a.positive("max_detections")?,
            max_classes_per_detection,
            max_per_class,
            score_threshold: non_negative("score_threshold")?,
            iou_threshold: non_negative("iou_threshold")?,
            bg_in_label: a.bool("bg_in_label")?,
        };
        all_outputs(a, k, &["scores", "deltas", "anchors"])
    }),
};

// ---- HEATMAP_MAX_KEYPOINT ----

/// HEATMAP_MAX_KEYPOINT.
pub const HEATMAP_MAX_KEYPOINT: OpDef = OpDef {
    op: OperationType::HEATMAP_MAX_KEYPOINT,
    signatures: &[
        Signature::new(
            V1_2,
            FLOATS,
            &[
                arg("heatmaps", Ty::T),
                arg("boxes", Ty::T),
                arg("layout", Ty::Bool),
            ],
            &[arg("scores", Ty::T), arg("keypoints", Ty::T)],
        ),
        Signature::new(
            V1_2,
            QUANT8,
            &[
                arg("heatmaps", Ty::T),
                arg("boxes", BOX16),
                arg("layout", Ty::Bool),
            ],
            &[arg("scores", Ty::T), arg("keypoints", BOX16)],
        ),
    ],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| {
        let k = HeatmapMaxKeypoint {
            nchw: a.bool("layout")?,
        };
        all_outputs(a, k, &["heatmaps", "boxes"])
    }),
};

// ---- AXIS_ALIGNED_BBOX_TRANSFORM ----

/// AXIS_ALIGNED_BBOX_TRANSFORM (main type: the rois').
pub const AXIS_ALIGNED_BBOX_TRANSFORM: OpDef = OpDef {
    op: OperationType::AXIS_ALIGNED_BBOX_TRANSFORM,
    signatures: &[
        Signature::new(
            V1_2,
            FLOATS,
            &[
                arg("rois", Ty::T),
                arg("deltas", Ty::T),
                arg("batches", INT32S),
                arg("image_info", Ty::T),
            ],
            OUT,
        ),
        Signature::new(
            V1_2,
            &[T::TENSOR_QUANT16_ASYMM],
            &[
                arg("rois", Ty::T),
                arg("deltas", Ty::OneOf(QUANT8)),
                arg("batches", INT32S),
                arg("image_info", Ty::T),
            ],
            OUT,
        ),
    ],
    check: None,
    runs: &[
        T::TENSOR_FLOAT32,
        T::TENSOR_FLOAT16,
        T::TENSOR_QUANT16_ASYMM,
    ],
    lower: Some(|a| a.kernel(BboxTransform, &["rois", "deltas", "batches", "image_info"])),
};
