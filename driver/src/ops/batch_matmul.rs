//! BATCH_MATMUL (AIDL V2, feature level 6): batches of matrix products, either side
//! optionally transposed (`adj_x`, `adj_y`). float32, float16, int32 and int8 asymmetric;
//! the ranks (2 to 4, equal) and the product's shapes are the device kernel's to check.

use vnpu_emu::kernels::BatchMatMul;

use super::{arg, Arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{OperandType as T, OperationType};

/// The element types the HAL allows (not the unsigned 8-bit one).
const TYPES: &[T] = &[
    T::TENSOR_FLOAT32,
    T::TENSOR_FLOAT16,
    T::TENSOR_QUANT8_ASYMM_SIGNED,
    T::TENSOR_INT32,
];

const INPUTS: &[Arg] = &[
    arg("lhs", Ty::T),
    arg("rhs", Ty::T),
    arg("adj_x", Ty::Bool),
    arg("adj_y", Ty::Bool),
];

fn lower(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let op = BatchMatMul {
        adj_x: a.bool("adj_x")?,
        adj_y: a.bool("adj_y")?,
    };
    a.kernel(op, &["lhs", "rhs"])
}

/// BATCH_MATMUL.
pub const BATCH_MATMUL: OpDef = OpDef {
    op: OperationType::BATCH_MATMUL,
    signatures: &[Signature::new(
        AidlV2,
        TYPES,
        INPUTS,
        &[arg("output", Ty::T)],
    )],
    check: None,
    runs: TYPES,
    lower: Some(lower),
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hal::builder::ModelBuilder;
    use crate::hal::HalVersion;
    use crate::ops::testing::{check, flag};

    fn model(lhs: T, rhs: T, adj: T, out: T) -> crate::hal::Model {
        let mut b = ModelBuilder::default();
        let x = b.input(lhs, &[2, 3]);
        let y = b.input(rhs, &[3, 4]);
        let ax = flag(&mut b, false);
        let ay = if adj == T::BOOL {
            flag(&mut b, false)
        } else {
            crate::ops::testing::int(&mut b, 0)
        };
        let o = b.output(out, &[2, 4]);
        for (i, t) in [(x, lhs), (y, rhs), (o, out)] {
            if t.is_quantized() {
                crate::ops::testing::quant(&mut b, i, 0.5, 0);
            }
        }
        b.op(OperationType::BATCH_MATMUL, &[x, y, ax, ay], &[o]);
        b.build(Vec::new())
    }

    #[test]
    fn valid_from_aidl_v2_only() {
        let f = T::TENSOR_FLOAT32;
        let m = model(f, f, T::BOOL, f);
        assert!(check(&m, HalVersion::V1_3)
            .unwrap_err()
            .contains("newer than this interface"));
        assert!(check(&m, HalVersion::AidlV1).is_err());
        check(&m, HalVersion::AidlV2).unwrap();
        check(&m, HalVersion::AidlV4).unwrap();
    }

    #[test]
    fn mismatched_or_unsupported_types_are_refused() {
        let (f, h, u8q) = (T::TENSOR_FLOAT32, T::TENSOR_FLOAT16, T::TENSOR_QUANT8_ASYMM);
        for (lhs, rhs, adj, out) in [
            (f, h, T::BOOL, f),
            (f, f, T::BOOL, h),
            (f, f, T::INT32, f),
            (u8q, u8q, T::BOOL, u8q),
        ] {
            let e = check(&model(lhs, rhs, adj, out), HalVersion::AidlV4).unwrap_err();
            assert!(e.contains("fit none"), "{lhs} {rhs} {adj} {out}: {e}");
        }
    }
}
