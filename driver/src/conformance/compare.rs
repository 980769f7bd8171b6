//! Output comparison with the corpus's tolerances (conformance/CRITERIA.md).

use crate::hal::OperandType;

/// One output compared with its expectation.
#[derive(Clone, Debug)]
pub struct OutputReport {
    /// The output's operand index in the main subgraph.
    pub operand: u32,
    /// Its operand type (how its bytes were decoded).
    pub r#type: OperandType,
    /// The expected values.
    pub expected: Vec<f64>,
    /// The values the driver produced.
    pub actual: Vec<f64>,
    /// The largest |actual - expected| (infinity for a NaN error).
    pub max_error: f64,
    /// Values out of tolerance, plus the difference in counts.
    pub mismatches: usize,
    /// The corpus marks this output as not compared.
    pub ignored: bool,
}

/// Decodes little-endian elements of `ty` to f64 (an extension type under the driver's
/// internal prefix by its extension's value kind).
pub fn decode(ty: OperandType, b: &[u8]) -> Vec<f64> {
    let ext = crate::extensions::operand_type_def(ty).map(|(_, d)| d.value);
    let w = super::corpus::element_size(ty).unwrap_or(1).max(1);
    b.chunks_exact(w)
        .map(|c| match ty {
            _ if ext.is_some() => {
                let mut v = [0u8; 8];
                let n = c.len().min(8);
                v[..n].copy_from_slice(&c[..n]);
                match ext {
                    Some(crate::extensions::ValueKind::I64) => i64::from_le_bytes(v) as f64,
                    _ => u64::from_le_bytes(v) as f64,
                }
            }
            OperandType::TENSOR_FLOAT32 | OperandType::FLOAT32 => {
                f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64
            }
            OperandType::TENSOR_FLOAT16 | OperandType::FLOAT16 => {
                half::f16::from_le_bytes([c[0], c[1]]).to_f64()
            }
            OperandType::TENSOR_INT32 | OperandType::INT32 => {
                i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64
            }
            OperandType::UINT32 => u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
            OperandType::TENSOR_QUANT8_ASYMM | OperandType::BOOL | OperandType::TENSOR_BOOL8 => {
                c[0] as f64
            }
            OperandType::TENSOR_QUANT8_ASYMM_SIGNED | OperandType::TENSOR_QUANT8_SYMM => {
                c[0] as i8 as f64
            }
            OperandType::TENSOR_QUANT16_ASYMM => u16::from_le_bytes([c[0], c[1]]) as f64,
            OperandType::TENSOR_QUANT16_SYMM => i16::from_le_bytes([c[0], c[1]]) as f64,
            _ => f64::NAN,
        })
        .collect()
}

/// (atol, rtol) of CRITERIA.md for an output of `ty`.
pub fn tolerance(ty: OperandType, relaxed: bool) -> (f64, f64) {
    const F16: f64 = 5.0 / 1024.0;
    match ty {
        OperandType::TENSOR_FLOAT32 if relaxed => (F16, F16),
        OperandType::TENSOR_FLOAT32 => (1e-5, 5.0 * 2f64.powi(-23)),
        OperandType::TENSOR_FLOAT16 => (F16, F16),
        OperandType::TENSOR_BOOL8 => (0.0, 0.0),
        _ => (1.0, 0.0),
    }
}

/// Compares one output element-wise: |a - e| <= atol + rtol * |e|.
pub fn compare(
    operand: u32,
    ty: OperandType,
    expected: &[u8],
    actual: &[u8],
    relaxed: bool,
    ignored: bool,
) -> OutputReport {
    let e = decode(ty, expected);
    let a = decode(ty, actual);
    let (atol, rtol) = tolerance(ty, relaxed);
    let mut max_error = 0f64;
    let mut mismatches = 0;
    if !ignored {
        for (x, y) in a.iter().zip(&e) {
            let err = (x - y).abs();
            max_error = max_error.max(if err.is_nan() { f64::INFINITY } else { err });
            // A NaN error is out of tolerance.
            let within = err
                .partial_cmp(&(atol + rtol * y.abs()))
                .is_some_and(|o| o.is_le());
            mismatches += usize::from(!within);
        }
        mismatches += e.len().abs_diff(a.len());
    }
    OutputReport {
        operand,
        r#type: ty,
        expected: e,
        actual: a,
        max_error,
        mismatches,
        ignored,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float32_tolerance_is_5_ulp_plus_1e5() {
        let (atol, rtol) = tolerance(OperandType::TENSOR_FLOAT32, false);
        assert_eq!(atol, 1e-5);
        assert!((rtol - 5.0 * 2f64.powi(-23)).abs() < 1e-15);
    }

    #[test]
    fn compare_counts_mismatches() {
        let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let r = compare(
            0,
            OperandType::TENSOR_FLOAT32,
            &f(&[1.0, 2.0]),
            &f(&[1.0, 2.1]),
            false,
            false,
        );
        assert_eq!(r.mismatches, 1);
        let r = compare(
            0,
            OperandType::TENSOR_FLOAT32,
            &f(&[1.0, 2.0]),
            &f(&[1.0, 2.0001]),
            true,
            false,
        );
        assert_eq!(r.mismatches, 0);
        let r = compare(
            0,
            OperandType::TENSOR_FLOAT32,
            &f(&[1.0]),
            &f(&[f32::NAN]),
            false,
            false,
        );
        assert_eq!(r.mismatches, 1);
        let r = compare(
            0,
            OperandType::TENSOR_FLOAT32,
            &f(&[1.0]),
            &f(&[9.0]),
            false,
            true,
        );
        assert_eq!(r.mismatches, 0, "ignored outputs are not compared");
    }
}
