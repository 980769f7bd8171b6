//! TOPK_V2 (input, k; outputs values and int32 indices).

use vnpu_emu::kernels::TopK;

use super::types::FLOAT_QUANT8_INT32;
use super::Lowered;
use super::{arg, Arg, HalVersion::*, OpDef, Signature, Ty};
use crate::hal::{OperandType as T, OperationType};

const OUTS: &[Arg] = &[
    arg("values", Ty::T),
    arg("indices", Ty::Is(T::TENSOR_INT32)),
];

/// TOPK_V2.
pub const TOPK_V2: OpDef = OpDef {
    op: OperationType::TOPK_V2,
    signatures: &[Signature::new(
        V1_2,
        FLOAT_QUANT8_INT32,
        &[arg("input", Ty::T), arg("k", Ty::Int)],
        OUTS,
    )],
    check: None,
    runs: FLOAT_QUANT8_INT32,
    lower: Some(|a| {
        let k = a.positive("k")?;
        Ok(Lowered {
            op: TopK { k }.into(),
            inputs: vec![a.input("input")?],
            outputs: vec![a.output(0)?, a.output(1)?],
        })
    }),
};
