//! The one list of operation definitions.

use super::{
    activation, arith, conv, image, movement, normalization, pool, reduction, unsupported, OpDef,
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
    &reduction::MEAN,
    &unsupported::DEQUANTIZE,
    &unsupported::EMBEDDING_LOOKUP,
    &unsupported::HASHTABLE_LOOKUP,
    &unsupported::LSH_PROJECTION,
    &unsupported::RNN,
    &unsupported::SVDF,
    &unsupported::LSTM,
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
