//! Lookup and random operations: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION
//! (sparse and dense, optional weight) and RANDOM_MULTINOMIAL, each one device kernel.

use vnpu_emu::kernels::{EmbeddingLookup, HashtableLookup, LshProjection, RandomMultinomial};

use super::types::FLOATS;
use super::Lowered;
use super::{arg, Arg, HalVersion::*, OpDef, Signature, Ty};
use crate::hal::{OperandType as T, OperationType};

const OUT: &[Arg] = &[arg("output", Ty::T)];

const EMBEDDING_TYPES: &[T] = &[
    T::TENSOR_FLOAT32,
    T::TENSOR_FLOAT16,
    T::TENSOR_INT32,
    T::TENSOR_QUANT8_ASYMM,
    T::TENSOR_QUANT8_ASYMM_SIGNED,
];

/// EMBEDDING_LOOKUP.
pub const EMBEDDING_LOOKUP: OpDef = OpDef {
    op: OperationType::EMBEDDING_LOOKUP,
    signatures: &[Signature::new(
        V1_0,
        EMBEDDING_TYPES,
        &[
            arg("lookups", Ty::Is(T::TENSOR_INT32)),
            arg("values", Ty::T),
        ],
        OUT,
    )
    .main(1)],
    check: None,
    runs: EMBEDDING_TYPES,
    lower: Some(|a| a.kernel(EmbeddingLookup, &["lookups", "values"])),
};

const HASHTABLE_TYPES: &[T] = &[T::TENSOR_FLOAT32, T::TENSOR_INT32, T::TENSOR_QUANT8_ASYMM];

/// HASHTABLE_LOOKUP.
pub const HASHTABLE_LOOKUP: OpDef = OpDef {
    op: OperationType::HASHTABLE_LOOKUP,
    signatures: &[Signature::new(
        V1_0,
        HASHTABLE_TYPES,
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
    check: None,
    runs: HASHTABLE_TYPES,
    lower: Some(|a| {
        Ok(Lowered {
            op: HashtableLookup.into(),
            inputs: vec![a.input("lookups")?, a.input("keys")?, a.input("values")?],
            outputs: vec![a.output(0)?, a.output(1)?],
        })
    }),
};

/// LSH_PROJECTION.
pub const LSH_PROJECTION: OpDef = OpDef {
    op: OperationType::LSH_PROJECTION,
    signatures: &[Signature::new(
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
    check: None,
    runs: FLOATS,
    lower: Some(|a| {
        let kind = a.i32("type")?;
        let kind = u32::try_from(kind)
            .ok()
            .filter(|k| (1..=3).contains(k))
            .ok_or_else(|| a.invalid(format!("type {kind}")))?;
        let has_weight = a.has("weight");
        let names: &[&str] = if has_weight {
            &["hash", "input", "weight"]
        } else {
            &["hash", "input"]
        };
        a.kernel(LshProjection { kind, has_weight }, names)
    }),
};

/// RANDOM_MULTINOMIAL.
pub const RANDOM_MULTINOMIAL: OpDef = OpDef {
    op: OperationType::RANDOM_MULTINOMIAL,
    signatures: &[Signature::new(
        V1_2,
        FLOATS,
        &[
            arg("input", Ty::T),
            arg("sample_count", Ty::Int),
            arg("seeds", Ty::Is(T::TENSOR_INT32)),
        ],
        &[arg("output", Ty::Is(T::TENSOR_INT32))],
    )],
    check: None,
    runs: FLOATS,
    lower: Some(|a| {
        let samples = a.non_negative("sample_count")?;
        a.kernel(RandomMultinomial { samples }, &["input", "seeds"])
    }),
};
