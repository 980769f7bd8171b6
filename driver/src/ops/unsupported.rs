//! Operations the device does not run yet, defined here by their signatures only so that
//! model validation checks them. Each moves to its family's file when it gains a lowering.

use super::types::FLOATS;
use super::{arg, Arg, HalVersion::*, OpDef, Signature, Ty};
use crate::hal::{OperandType as T, OperationType};

const OUT: &[Arg] = &[arg("output", Ty::T)];

const fn validate_only(op: OperationType, signatures: &'static [Signature]) -> OpDef {
    OpDef {
        op,
        signatures,
        check: None,
        runs: &[],
        lower: None,
    }
}

/// EMBEDDING_LOOKUP ("Operations II").
pub const EMBEDDING_LOOKUP: OpDef = validate_only(
    OperationType::EMBEDDING_LOOKUP,
    &[Signature::new(
        V1_0,
        &[
            T::TENSOR_FLOAT32,
            T::TENSOR_FLOAT16,
            T::TENSOR_INT32,
            T::TENSOR_QUANT8_ASYMM,
            T::TENSOR_QUANT8_ASYMM_SIGNED,
        ],
        &[
            arg("lookups", Ty::Is(T::TENSOR_INT32)),
            arg("values", Ty::T),
        ],
        OUT,
    )
    .main(1)],
);

/// HASHTABLE_LOOKUP ("Operations II").
pub const HASHTABLE_LOOKUP: OpDef = validate_only(
    OperationType::HASHTABLE_LOOKUP,
    &[Signature::new(
        V1_0,
        &[T::TENSOR_FLOAT32, T::TENSOR_INT32, T::TENSOR_QUANT8_ASYMM],
        &[
            arg("lookups", Ty::Is(T::TENSOR_INT32)),
            arg("keys", Ty::Is(T::TENSOR_INT32)),
            arg("values", Ty::T),
        ],
        &[
            arg("output", Ty::T),
            arg("hits", Ty::Is(T::TENSOR_QUANT8_ASYMM)),
        ],
    )
    .main(2)],
);

/// LSH_PROJECTION ("Operations II").
pub const LSH_PROJECTION: OpDef = validate_only(
    OperationType::LSH_PROJECTION,
    &[Signature::new(
        V1_0,
        FLOATS,
        &[
            arg("hash", Ty::T),
            arg(
                "input",
                Ty::OneOf(&[
                    T::TENSOR_FLOAT32,
                    T::TENSOR_FLOAT16,
                    T::TENSOR_INT32,
                    T::TENSOR_QUANT8_ASYMM,
                ]),
            ),
            arg("weight", Ty::T),
            arg("type", Ty::Int),
        ],
        &[arg("output", Ty::Is(T::TENSOR_INT32))],
    )],
);
