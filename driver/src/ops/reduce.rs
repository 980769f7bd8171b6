//! REDUCE_SUM, REDUCE_PROD, REDUCE_MAX, REDUCE_MIN, REDUCE_ANY, REDUCE_ALL.

use vnpu_emu::kernels::{Reduce, ReduceKind};

use super::types::{FLOATS, FLOAT_QUANT8};
use super::{arg, Arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{OperandType as T, OperationType};

const BOOLS: &[T] = &[T::TENSOR_BOOL8];

const ARGS: &[Arg] = &[
    arg("input", Ty::T),
    arg("axes", Ty::Ints),
    arg("keep_dims", Ty::Bool),
];
const OUT: &[Arg] = &[arg("output", Ty::T)];

const fn sig(types: &'static [T]) -> Signature {
    Signature::new(V1_2, types, ARGS, OUT)
}

const FLOAT_SIGS: [Signature; 1] = [sig(FLOATS)];
const QUANT_SIGS: [Signature; 1] = [sig(FLOAT_QUANT8)];
const BOOL_SIGS: [Signature; 1] = [sig(BOOLS)];

fn lower(kind: ReduceKind, a: &Args<'_>) -> Result<Lowered, CompileError> {
    let rank = a.shape("input")?.len();
    let mut axes: Vec<u32> = a
        .ints("axes")?
        .into_iter()
        .map(|x| a.axis(x, rank))
        .collect::<Result<_, _>>()?;
    axes.sort_unstable();
    axes.dedup();
    let keep_dims = a.bool("keep_dims")?;
    a.kernel(
        Reduce {
            kind,
            axes,
            keep_dims,
        },
        &["input"],
    )
}

/// REDUCE_SUM.
pub const REDUCE_SUM: OpDef = OpDef {
    op: OperationType::REDUCE_SUM,
    signatures: &FLOAT_SIGS,
    check: None,
    runs: FLOATS,
    lower: Some(|a| lower(ReduceKind::Sum, a)),
};

/// REDUCE_PROD.
pub const REDUCE_PROD: OpDef = OpDef {
    op: OperationType::REDUCE_PROD,
    signatures: &FLOAT_SIGS,
    check: None,
    runs: FLOATS,
    lower: Some(|a| lower(ReduceKind::Prod, a)),
};

/// REDUCE_MAX.
pub const REDUCE_MAX: OpDef = OpDef {
    op: OperationType::REDUCE_MAX,
    signatures: &QUANT_SIGS,
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| lower(ReduceKind::Max, a)),
};

/// REDUCE_MIN.
pub const REDUCE_MIN: OpDef = OpDef {
    op: OperationType::REDUCE_MIN,
    signatures: &QUANT_SIGS,
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| lower(ReduceKind::Min, a)),
};

/// REDUCE_ANY.
pub const REDUCE_ANY: OpDef = OpDef {
    op: OperationType::REDUCE_ANY,
    signatures: &BOOL_SIGS,
    check: None,
    runs: BOOLS,
    lower: Some(|a| lower(ReduceKind::Any, a)),
};

/// REDUCE_ALL.
pub const REDUCE_ALL: OpDef = OpDef {
    op: OperationType::REDUCE_ALL,
    signatures: &BOOL_SIGS,
    check: None,
    runs: BOOLS,
    lower: Some(|a| lower(ReduceKind::All, a)),
};
