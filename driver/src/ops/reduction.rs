//! MEAN.

use vnpu_emu::kernels::Mean;

use super::types::FLOAT_QUANT8;
use super::{arg, HalVersion::*, OpDef, Signature, Ty};
use crate::hal::OperationType;

/// MEAN.
pub const MEAN: OpDef = OpDef {
    op: OperationType::MEAN,
    signatures: &[Signature::new(
        V1_1,
        FLOAT_QUANT8,
        &[
            arg("input", Ty::T),
            arg("axes", Ty::Ints),
            arg("keep_dims", Ty::Int),
        ],
        &[arg("output", Ty::T)],
    )],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| {
        let rank = a.shape("input")?.len();
        let mut axes: Vec<u32> = a
            .ints("axes")?
            .into_iter()
            .map(|x| a.axis(x, rank))
            .collect::<Result<_, _>>()?;
        axes.sort_unstable();
        axes.dedup();
        let keep_dims = a.i32("keep_dims")? != 0;
        a.kernel(Mean { axes, keep_dims }, &["input"])
    }),
};
