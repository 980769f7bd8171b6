//! RELU, RELU1, RELU6, LOGISTIC, TANH, FLOOR (element-wise) and SOFTMAX.

use vnpu_emu::kernels::{Softmax, Unary, UnaryKind};

use super::types::{FLOATS, FLOAT_QUANT8};
use super::{arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::OperationType;

const UNARY_ARGS: &[super::Arg] = &[arg("input", Ty::T)];
const OUT: &[super::Arg] = &[arg("output", Ty::T)];
const ACTIVATION: &[Signature] = &[Signature::new(V1_0, FLOAT_QUANT8, UNARY_ARGS, OUT)];
const FLOAT_ONLY: &[Signature] = &[Signature::new(V1_0, FLOATS, UNARY_ARGS, OUT)];

fn unary(kind: UnaryKind, a: &Args<'_>) -> Result<Lowered, CompileError> {
    a.kernel(Unary { kind }, &["input"])
}

macro_rules! unary_def {
    ($(#[$doc:meta] $name:ident, $op:ident, $sigs:expr, $kind:ident;)*) => {$(
        #[$doc]
        pub const $name: OpDef = OpDef {
            op: OperationType::$op,
            signatures: $sigs,
            check: None,
            runs: if matches!(UnaryKind::$kind, UnaryKind::Floor) {
                FLOATS
            } else {
                FLOAT_QUANT8
            },
            lower: Some(|a| unary(UnaryKind::$kind, a)),
        };
    )*};
}

unary_def! {
    /// RELU.
    RELU, RELU, ACTIVATION, Relu;
    /// RELU1.
    RELU1, RELU1, ACTIVATION, Relu1;
    /// RELU6.
    RELU6, RELU6, ACTIVATION, Relu6;
    /// LOGISTIC.
    LOGISTIC, LOGISTIC, ACTIVATION, Logistic;
    /// TANH.
    TANH, TANH, ACTIVATION, Tanh;
    /// FLOOR.
    FLOOR, FLOOR, FLOAT_ONLY, Floor;
}

/// SOFTMAX: beta, and (1.2) an axis.
pub const SOFTMAX: OpDef = OpDef {
    op: OperationType::SOFTMAX,
    signatures: &[Signature::new(
        V1_0,
        FLOAT_QUANT8,
        &[arg("input", Ty::T), arg("beta", Ty::Scalar)],
        OUT,
    )
    .optional(&[&[arg("axis", Ty::Int)]])],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| {
        a.kernel(
            Softmax {
                beta: a.f32("beta")?,
                axis: a.opt_i32("axis")?.unwrap_or(-1),
            },
            &["input"],
        )
    }),
};
