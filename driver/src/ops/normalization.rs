//! L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION.

use vnpu_emu::kernels::{L2Normalization, LocalResponseNorm};

use super::types::{FLOATS, FLOAT_QUANT8};
use super::{arg, Arg, HalVersion::*, OpDef, Signature, Ty};
use crate::hal::OperationType;

const OUT: &[Arg] = &[arg("output", Ty::T)];
const AXIS: &[&[Arg]] = &[&[arg("axis", Ty::Int)]];

/// L2_NORMALIZATION.
pub const L2_NORMALIZATION: OpDef = OpDef {
    op: OperationType::L2_NORMALIZATION,
    signatures: &[Signature::new(V1_0, FLOAT_QUANT8, &[arg("input", Ty::T)], OUT).optional(AXIS)],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| {
        a.kernel(
            L2Normalization {
                axis: a.opt_i32("axis")?.unwrap_or(-1),
            },
            &["input"],
        )
    }),
};

/// LOCAL_RESPONSE_NORMALIZATION.
pub const LOCAL_RESPONSE_NORMALIZATION: OpDef = OpDef {
    op: OperationType::LOCAL_RESPONSE_NORMALIZATION,
    signatures: &[Signature::new(
        V1_0,
        FLOATS,
        &[
            arg("input", Ty::T),
            arg("radius", Ty::Int),
            arg("bias", Ty::Scalar),
            arg("alpha", Ty::Scalar),
            arg("beta", Ty::Scalar),
        ],
        OUT,
    )
    .optional(AXIS)],
    check: None,
    runs: FLOATS,
    lower: Some(|a| {
        let radius = a.non_negative("radius")?;
        a.kernel(
            LocalResponseNorm {
                radius,
                bias: a.f32("bias")?,
                alpha: a.f32("alpha")?,
                beta: a.f32("beta")?,
                axis: a.opt_i32("axis")?.unwrap_or(-1),
            },
            &["input"],
        )
    }),
};
