//! LOG_SOFTMAX (input, beta, axis).

use vnpu_emu::kernels::LogSoftmax;

use super::types::FLOATS;
use super::{arg, HalVersion::*, OpDef, Signature, Ty};
use crate::hal::OperationType;

/// LOG_SOFTMAX.
pub const LOG_SOFTMAX: OpDef = OpDef {
    op: OperationType::LOG_SOFTMAX,
    signatures: &[Signature::new(
        V1_2,
        FLOATS,
        &[
            arg("input", Ty::T),
            arg("beta", Ty::Scalar),
            arg("axis", Ty::Int),
        ],
        &[arg("output", Ty::T)],
    )],
    check: None,
    runs: FLOATS,
    lower: Some(|a| {
        a.kernel(
            LogSoftmax {
                beta: a.f32("beta")?,
                axis: a.i32("axis")?,
            },
            &["input"],
        )
    }),
};
