//! AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D (implicit or explicit padding, optional
//! layout).

use vnpu_emu::kernels::{Pool, PoolKind};

use super::conv::window;
use super::types::{FLOATS, FLOAT_QUANT8};
use super::{arg, Arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::OperationType;

const OUT: &[Arg] = &[arg("output", Ty::T)];
const LAYOUT: &[&[Arg]] = &[&[arg("layout", Ty::Bool)]];

/// A pooling operation's two forms for the main types `$types`.
macro_rules! pool_signatures {
    ($types:expr) => {
        padded_signatures!(
            V1_0,
            $types,
            [arg("input", Ty::T)],
            [
                arg("filter_w", Ty::Int),
                arg("filter_h", Ty::Int),
                arg("activation", Ty::Int),
            ],
            OUT,
            LAYOUT,
        )
    };
}

const QUANT_SIGS: [Signature; 2] = pool_signatures!(FLOAT_QUANT8);
const FLOAT_SIGS: [Signature; 2] = pool_signatures!(FLOATS);

fn lower(kind: PoolKind, a: &Args<'_>) -> Result<Lowered, CompileError> {
    let nchw = a.flag("layout")?;
    let filter_w = a.positive("filter_w")?;
    let filter_h = a.positive("filter_h")?;
    let w = window(a, nchw, (filter_w, filter_h), (1, 1))?;
    a.kernel(
        Pool {
            kind,
            pad: w.pad,
            stride_w: w.stride_w,
            stride_h: w.stride_h,
            filter_w,
            filter_h,
            act: a.act("activation")?,
            nchw,
        },
        &["input"],
    )
}

/// AVERAGE_POOL_2D.
pub const AVERAGE_POOL_2D: OpDef = OpDef {
    op: OperationType::AVERAGE_POOL_2D,
    signatures: &QUANT_SIGS,
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| lower(PoolKind::Average, a)),
};

/// MAX_POOL_2D.
pub const MAX_POOL_2D: OpDef = OpDef {
    op: OperationType::MAX_POOL_2D,
    signatures: &QUANT_SIGS,
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| lower(PoolKind::Max, a)),
};

/// L2_POOL_2D.
pub const L2_POOL_2D: OpDef = OpDef {
    op: OperationType::L2_POOL_2D,
    signatures: &FLOAT_SIGS,
    check: None,
    runs: FLOATS,
    lower: Some(|a| lower(PoolKind::L2, a)),
};
