//! INSTANCE_NORMALIZATION (input, gamma, beta, epsilon, layout).

use vnpu_emu::kernels::InstanceNorm;

use super::types::FLOATS;
use super::{arg, HalVersion::*, OpDef, Signature, Ty};
use crate::hal::OperationType;

/// INSTANCE_NORMALIZATION.
pub const INSTANCE_NORMALIZATION: OpDef = OpDef {
    op: OperationType::INSTANCE_NORMALIZATION,
    signatures: &[Signature::new(
        V1_2,
        FLOATS,
        &[
            arg("input", Ty::T),
            arg("gamma", Ty::Scalar),
            arg("beta", Ty::Scalar),
            arg("epsilon", Ty::Scalar),
            arg("layout", Ty::Bool),
        ],
        &[arg("output", Ty::T)],
    )],
    check: None,
    runs: FLOATS,
    lower: Some(|a| {
        a.kernel(
            InstanceNorm {
                gamma: a.f32("gamma")?,
                beta: a.f32("beta")?,
                epsilon: a.f32("epsilon")?,
                nchw: a.bool("layout")?,
            },
            &["input"],
        )
    }),
};
