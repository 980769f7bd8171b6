//! The one list of operation definitions.

use super::{
    activation, argminmax, arith, batch_matmul, cast, comparison, conv, densify, detection,
    fibonacci, gelu, image, instance_norm, log_softmax, logical, lookup, math, mirror_pad,
    movement, normalization, pack, pool, recurrent, reduce, reduction, resize_bilinear_integer,
    resize_nearest, reverse, topk, OpDef,
};
use crate::hal::OperationType;

/// Every defined operation. Add a definition here and nowhere else.
pub static REGISTRY: &[&OpDef] = &[
    &arith::ADD,
    &arith::SUB,
    &arith::MUL,
    &arith::DIV,
    &activation::RELU,
    &activation::RELU1,
    &activation::RELU6,
    &activation::LOGISTIC,
    &activation::TANH,
    &activation::FLOOR,
    &activation::SOFTMAX,
    &conv::CONV_2D,
    &conv::DEPTHWISE_CONV_2D,
    &conv::FULLY_CONNECTED,
    &conv::GROUPED_CONV_2D,
    &conv::TRANSPOSE_CONV_2D,
    &pool::AVERAGE_POOL_2D,
    &pool::MAX_POOL_2D,
    &pool::L2_POOL_2D,
    &movement::RESHAPE,
    &movement::SQUEEZE,
    &movement::CONCATENATION,
    &movement::DEPTH_TO_SPACE,
    &movement::SPACE_TO_DEPTH,
    &movement::PAD,
    &movement::TRANSPOSE,
    &movement::BATCH_TO_SPACE_ND,
    &movement::SPACE_TO_BATCH_ND,
    &movement::STRIDED_SLICE,
    &movement::GATHER,
    &movement::CHANNEL_SHUFFLE,
    &movement::SLICE,
    &movement::PAD_V2,
    &movement::EXPAND_DIMS,
    &movement::TILE,
    &movement::SPLIT,
    &movement::FILL,
    &movement::RANK,
    &normalization::L2_NORMALIZATION,
    &normalization::LOCAL_RESPONSE_NORMALIZATION,
    &image::RESIZE_BILINEAR,
    &resize_nearest::RESIZE_NEAREST_NEIGHBOR,
    &reduction::MEAN,
    &cast::CAST,
    &cast::QUANTIZE,
    &cast::DEQUANTIZE,
    &logical::LOGICAL_AND,
    &logical::LOGICAL_OR,
    &logical::LOGICAL_NOT,
    &logical::SELECT,
    &math::ABS,
    &math::EXP,
    &math::LOG,
    &math::NEG,
    &math::RSQRT,
    &math::SIN,
    &math::SQRT,
    &math::HARD_SWISH,
    &math::ELU,
    &math::MAXIMUM,
    &math::MINIMUM,
    &math::POW,
    &math::PRELU,
    &comparison::EQUAL,
    &comparison::NOT_EQUAL,
    &comparison::LESS,
    &comparison::LESS_EQUAL,
    &comparison::GREATER,
    &comparison::GREATER_EQUAL,
    &reduce::REDUCE_SUM,
    &reduce::REDUCE_PROD,
    &reduce::REDUCE_MAX,
    &reduce::REDUCE_MIN,
    &reduce::REDUCE_ANY,
    &reduce::REDUCE_ALL,
    &argminmax::ARGMAX,
    &argminmax::ARGMIN,
    &topk::TOPK_V2,
    &instance_norm::INSTANCE_NORMALIZATION,
    &log_softmax::LOG_SOFTMAX,
    &detection::ROI_ALIGN,
    &detection::ROI_POOLING,
    &detection::BOX_WITH_NMS_LIMIT,
    &detection::GENERATE_PROPOSALS,
    &detection::DETECTION_POSTPROCESSING,
    &detection::HEATMAP_MAX_KEYPOINT,
    &detection::AXIS_ALIGNED_BBOX_TRANSFORM,
    &lookup::EMBEDDING_LOOKUP,
    &lookup::HASHTABLE_LOOKUP,
    &lookup::LSH_PROJECTION,
    &lookup::RANDOM_MULTINOMIAL,
    &recurrent::LSTM,
    &recurrent::UNIDIRECTIONAL_SEQUENCE_LSTM,
    &recurrent::BIDIRECTIONAL_SEQUENCE_LSTM,
    &recurrent::RNN,
    &recurrent::UNIDIRECTIONAL_SEQUENCE_RNN,
    &recurrent::BIDIRECTIONAL_SEQUENCE_RNN,
    &recurrent::SVDF,
    &recurrent::QUANTIZED_16BIT_LSTM,
    &recurrent::QUANTIZED_LSTM,
    // AIDL V2 and V3 (feature levels 6 and 7), and NNAPI's experimental DENSIFY.
    &batch_matmul::BATCH_MATMUL,
    &pack::PACK,
    &mirror_pad::MIRROR_PAD,
    &reverse::REVERSE,
    &densify::DENSIFY,
    // Vendor extensions (`crate::extensions`), under the driver's internal prefixes.
    &fibonacci::EXAMPLE_FIBONACCI,
    &gelu::VNPU_GELU,
    &resize_bilinear_integer::VNPU_RESIZE_BILINEAR_INTEGER,
];

/// The definition of `op`, if it has one.
pub fn definition(op: OperationType) -> Option<&'static OpDef> {
    REGISTRY.iter().copied().find(|d| d.op == op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_operation_is_defined_once() {
        for (i, d) in REGISTRY.iter().enumerate() {
            assert!(
                REGISTRY[..i].iter().all(|e| e.op != d.op),
                "{} is registered twice",
                d.name()
            );
            assert!(!d.signatures.is_empty(), "{} has no signature", d.name());
            assert_eq!(d.lower.is_some(), !d.runs.is_empty(), "{}", d.name());
        }
    }
}
