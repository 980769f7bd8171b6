//! Lookup and random kernels: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION (with the
//! FarmHash fingerprint it hashes with) and RANDOM_MULTINOMIAL.

pub mod embedding;
pub mod farmhash;
pub mod hashtable;
pub mod lsh;
pub mod multinomial;

use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType};

/// Requires a rank-1 TENSOR_INT32 and returns its length.
pub(crate) fn int_vector(op: &'static str, what: &str, t: &TensorType) -> Result<usize> {
    if t.dtype != DType::I32 {
        return Err(KernelError::DType {
            expected: DType::I32,
            got: t.dtype,
        });
    }
    match t.shape.as_slice() {
        [n] => Ok(*n),
        s => Err(bad_shape(op, format!("{what} must have rank 1, got {s:?}"))),
    }
}

/// `rows` rows of `values` picked by `pick` (`None`: a zero row), copied byte-wise into
/// `out`: the shared body of the two table lookups.
pub(crate) fn gather_rows(
    values: &[u8],
    row_bytes: usize,
    out: &mut [u8],
    picks: impl Iterator<Item = Option<usize>>,
) {
    if row_bytes == 0 {
        return;
    }
    for (dst, pick) in out.chunks_exact_mut(row_bytes).zip(picks) {
        match pick.and_then(|r| values.get(r * row_bytes..(r + 1) * row_bytes)) {
            Some(src) => dst.copy_from_slice(src),
            None => dst.fill(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::{run_f32, KernelOp};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(128))]

        /// Arbitrary parameter words and shapes never panic the lookup kernels.
        #[test]
        fn hostile_params_and_shapes_never_panic(
            opcode in 140u32..=143,
            words in proptest::collection::vec(prop_oneof![3 => 0u32..4, 1 => any::<u32>()], 0..4),
            shapes in proptest::collection::vec(proptest::collection::vec(0usize..5, 0..=3), 0..4),
        ) {
            if let Ok(op) = KernelOp::decode(opcode, &words) {
                prop_assert_eq!(op.encode_params(), words);
                let inputs: Vec<(&[usize], Vec<f32>)> = shapes
                    .iter()
                    .map(|s| (s.as_slice(), vec![7.5; s.iter().product()]))
                    .collect();
                let ins: Vec<(&[usize], &[f32])> = inputs.iter().map(|(s, d)| (*s, d.as_slice())).collect();
                let _ = run_f32(&op, &ins);
            }
        }
    }
}
