//! Fixed-point arithmetic of the quantised kernels, bit-exact with the NNAPI CPU reference.
//!
//! NNAPI's quantised CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED accumulate in `i32` and
//! then rescale the accumulator by a real multiplier stored as a Q31 fixed-point number and a
//! power-of-two exponent. The helpers here reproduce, without undefined behaviour:
//!
//! - `QuantizeMultiplier`, `QuantizeMultiplierSmallerThanOne[Exp]`,
//!   `QuantizeMultiplierGreaterThanOne`, `GetQuantizedConvolutionMultiplier` and
//!   `CalculateActivationRange{Uint8,Int8}` of NNAPI's `common/OperationsExecutionUtils.cpp`;
//! - gemmlowp's `SaturatingRoundingDoublingHighMul` and `RoundingDivideByPOT`
//!   (`fixedpoint/fixedpoint.h`);
//! - TFLite's `MultiplyByQuantizedMultiplier` and its `SmallerThanOneExp` / `GreaterThanOne`
//!   variants (`tensorflow/lite/kernels/internal/common.h`, the default double-rounding
//!   build).
//!
//! The transcendental functions of the quantised SOFTMAX, LOGISTIC, TANH and
//! L2_NORMALIZATION (gemmlowp's fixed-point `exp`, `logistic`, `tanh`, reciprocal and
//! TFLite's inverse square root) are in [`fixed`].
//!
//! Where the C++ has undefined behaviour (signed overflow, out-of-range shifts, casts of
//! non-finite floats) each function documents the total behaviour chosen here; inside the
//! C++ functions' defined domain the results are identical.

// The engine's quantised ops are not wired in yet; these are their building blocks.
#![allow(dead_code)]

pub mod fixed;

/// Errors of the quantisation helpers and of the quantised kernels.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuantError {
    /// A real multiplier outside the domain of the helper (NNAPI's check fails).
    #[error("real multiplier {value} is outside the accepted range ({expected})")]
    MultiplierOutOfRange {
        /// The rejected multiplier.
        value: f64,
        /// The accepted range, for the message.
        expected: &'static str,
    },
    /// The bias scale differs from input scale * filter scale by more than NNAPI's relative
    /// tolerance of 1e-6.
    #[error("bias scale {bias_scale} is not input scale * filter scale ({product})")]
    BiasScaleMismatch {
        /// `input_scale * filter_scale`, computed in `f32` as NNAPI does.
        product: f64,
        /// The bias scale.
        bias_scale: f64,
    },
    /// Scales that give a negative product or a non-finite multiplier.
    #[error("invalid scales: {0}")]
    InvalidScale(&'static str),
    /// A buffer whose length does not match the kernel geometry.
    #[error("{what}: expected {expected} elements, got {got}")]
    Length {
        /// Which buffer.
        what: &'static str,
        /// The length the geometry needs.
        expected: usize,
        /// The buffer's length.
        got: usize,
    },
    /// Kernel parameters that cannot describe a valid operation.
    #[error("invalid kernel parameters: {0}")]
    InvalidParams(&'static str),
    /// A size or index computation overflowed.
    #[error("kernel geometry too large")]
    TooLarge,
}

/// A quantisation-helper error as a kernel error of `op`.
pub(crate) fn qerr(op: &'static str) -> impl Fn(QuantError) -> crate::kernels::KernelError {
    move |e| crate::kernels::bad_shape(op, e.to_string())
}

/// An element type of a quantised tensor: its range and conversions to and from the `i32`
/// the arithmetic runs in (plain old data, so a slice of it can be read as its bytes).
pub trait QuantElem: bytemuck::Pod + Send + Sync + std::fmt::Debug + 'static {
    /// The smallest value, as `i32`.
    const MIN: i32;
    /// The largest value, as `i32`.
    const MAX: i32;
    /// The value as `i32` (exact).
    fn to_i32(self) -> i32;
    /// `v` clamped to `[MIN, MAX]`.
    fn saturate_from_i32(v: i32) -> Self;
}

macro_rules! quant_elem {
    ($($t:ty),*) => {$(
        impl QuantElem for $t {
            const MIN: i32 = <$t>::MIN as i32;
            const MAX: i32 = <$t>::MAX as i32;
            #[inline(always)]
            fn to_i32(self) -> i32 {
                i32::from(self)
            }
            #[inline(always)]
            fn saturate_from_i32(v: i32) -> Self {
                // In range after the clamp, so the cast is exact.
                v.clamp(<Self as QuantElem>::MIN, <Self as QuantElem>::MAX) as $t
            }
        }
    )*};
}
quant_elem!(u8, i8, u16, i16);

/// `x = q * 2^e` with `0.5 <= |q| < 1` for finite non-zero `x` (C's `frexp`); `(x, 0)` for
/// zero and non-finite `x`.
fn frexp(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    const EXP_MASK: u64 = 0x7ff << 52;
    let bits = x.to_bits();
    let biased = ((bits & EXP_MASK) >> 52) as i32;
    if biased == 0 {
        // Subnormal: scale into the normal range first (2^64 is exact).
        let (q, e) = frexp(x * f64::from_bits(0x43f0_0000_0000_0000));
        return (q, e - 64);
    }
    // Keep sign and mantissa, set the exponent of [0.5, 1).
    let q = f64::from_bits((bits & !EXP_MASK) | (1022 << 52));
    (q, biased - 1022)
}

/// `round(q * 2^31)` for `|q| < 1`, rounding half away from zero as `std::round`.
fn q31(q: f64) -> i64 {
    // |q * 2^31| < 2^31, so the cast is exact.
    (q * 2_147_483_648.0).round() as i64
}

/// NNAPI's `QuantizeMultiplier`: `real ~= multiplier * 2^(shift - 31)` with `multiplier` in
/// `[2^30, 2^31)` (negated for negative `real`) and `shift` positive to the left.
///
/// Zero gives `(0, 0)`, and so does any `|real|` small enough that `shift < -31` (NNAPI
/// flushes those to zero). A mantissa that rounds up to `2^31` is halved and the shift
/// incremented. Non-finite `real` (undefined behaviour in the C++) gives `(0, 0)`.
pub fn quantize_multiplier(real: f64) -> (i32, i32) {
    if real == 0.0 || !real.is_finite() {
        return (0, 0);
    }
    let (q, mut shift) = frexp(real);
    let mut fixed = q31(q);
    if fixed == 1 << 31 {
        fixed /= 2;
        shift += 1;
    }
    if shift < -31 {
        return (0, 0);
    }
    // |fixed| <= 2^31 and +2^31 was halved above, so it fits.
    (fixed as i32, shift)
}

/// NNAPI's `QuantizeMultiplierSmallerThanOneExp`: [`quantize_multiplier`] for `0 < real < 1`,
/// returning `(multiplier, left_shift)` with `left_shift <= 0`.
///
/// Errors when `real` is not in `(0, 1)`, or when it rounds up to 1 (`left_shift` would be
/// positive).
pub fn quantize_multiplier_smaller_than_one_exp(real: f64) -> Result<(i32, i32), QuantError> {
    let range = || QuantError::MultiplierOutOfRange {
        value: real,
        expected: "0 < m < 1",
    };
    if !(real > 0.0 && real < 1.0) {
        return Err(range());
    }
    let (m, shift) = quantize_multiplier(real);
    if shift > 0 {
        return Err(range());
    }
    Ok((m, shift))
}

/// NNAPI's `QuantizeMultiplierSmallerThanOne`: `(multiplier, right_shift)` for
/// `0 <= real < 1`, with `right_shift >= 0`.
///
/// Unlike [`quantize_multiplier`] it does not flush tiny values to zero (the right shift may
/// exceed 31). Errors when `real` is not in `[0, 1)` or rounds up to 1.
pub fn quantize_multiplier_smaller_than_one(real: f64) -> Result<(i32, i32), QuantError> {
    let range = || QuantError::MultiplierOutOfRange {
        value: real,
        expected: "0 <= m < 1",
    };
    if !(0.0..1.0).contains(&real) {
        return Err(range());
    }
    if real == 0.0 {
        return Ok((0, 0));
    }
    let (q, exp) = frexp(real);
    let mut right_shift = -exp;
    let mut fixed = q31(q);
    if fixed == 1 << 31 {
        fixed /= 2;
        right_shift -= 1;
    }
    if right_shift < 0 {
        return Err(range());
    }
    Ok((fixed as i32, right_shift))
}

/// NNAPI's `QuantizeMultiplierGreaterThanOne`: `(multiplier, left_shift)` for `real > 1`,
/// with `left_shift >= 1`.
///
/// Errors when `real` is not greater than 1 or is not finite (the C++ is undefined for
/// infinity).
pub fn quantize_multiplier_greater_than_one(real: f64) -> Result<(i32, i32), QuantError> {
    if !(real > 1.0 && real.is_finite()) {
        return Err(QuantError::MultiplierOutOfRange {
            value: real,
            expected: "finite m > 1",
        });
    }
    let (q, mut shift) = frexp(real);
    let mut fixed = q31(q);
    if fixed == 1 << 31 {
        fixed /= 2;
        shift += 1;
    }
    Ok((fixed as i32, shift))
}

/// NNAPI's `GetQuantizedConvolutionMultiplier` (the overload with a bias):
/// `input_scale * filter_scale / output_scale`.
///
/// The check is NNAPI's: the bias scale must equal the product (computed in `f32`, as NNAPI
/// does) within a relative `1e-6`. The multiplier itself takes the product in `f64`, as
/// TFLite's `PopulateConvolutionQuantizationParams` does, not in `f32` as NNAPI's reference
/// does: both are within NNAPI's one-step tolerance, but an accumulator a few millionths of
/// a step from a half rounds by the exact product, and a deep int8 network turns that one
/// step into many at its outputs (face_detection_short_range_int8 was 42 steps from
/// LiteRT's reference kernels on one input). Errors on a mismatch, a negative product, or
/// (an addition: NNAPI would go on into undefined behaviour) a non-finite multiplier.
pub fn get_quantized_convolution_multiplier(
    input_scale: f32,
    filter_scale: f32,
    bias_scale: f32,
    output_scale: f32,
) -> Result<f64, QuantError> {
    let product = f64::from(input_scale * filter_scale);
    let bias = f64::from(bias_scale);
    // False for NaN, so NaN fails as the C++ check does.
    let matches = (product - bias).abs() <= 1e-6 * product.min(bias);
    if !matches {
        return Err(QuantError::BiasScaleMismatch {
            product,
            bias_scale: bias,
        });
    }
    if product.is_nan() || product < 0.0 {
        return Err(QuantError::InvalidScale(
            "input scale * filter scale is negative",
        ));
    }
    let m = f64::from(input_scale) * f64::from(filter_scale) / f64::from(output_scale);
    if !m.is_finite() {
        return Err(QuantError::InvalidScale(
            "the output multiplier is not finite",
        ));
    }
    Ok(m)
}

/// NNAPI's `CalculateActivationRange{Uint8,Int8}`: the clamp range of the fused activation
/// `act` (0 none, 1 relu, 2 relu1, 3 relu6) for an output quantised with `scale` and
/// `zero_point`, within `[qmin, qmax]`.
///
/// A bound is `zero_point + round(x / scale)`, computed in `f32` and rounded half away from
/// zero, as NNAPI does. RELU keeps `qmax` as its upper bound. An unknown `act` gives
/// `(0, 0)`: NNAPI only logs an error and its callers keep their zero-initialised bounds.
/// Where the C++ is undefined (a quotient outside `i32`, or `zero_point` plus it
/// overflowing) the result saturates.
pub fn quantized_activation_range(
    act: u32,
    scale: f32,
    zero_point: i32,
    qmin: i32,
    qmax: i32,
) -> (i32, i32) {
    // `as` saturates (NaN gives 0).
    let quantize = |x: f32| zero_point.saturating_add((x / scale).round() as i32);
    match act {
        0 => (qmin, qmax),
        1 => (qmin.max(quantize(0.0)), qmax),
        2 => (qmin.max(quantize(-1.0)), qmax.min(quantize(1.0))),
        3 => (qmin.max(quantize(0.0)), qmax.min(quantize(6.0))),
        _ => (0, 0),
    }
}

/// gemmlowp's `SaturatingRoundingDoublingHighMul`: the high 32 bits of `2 * a * b`, rounded
/// to nearest with halves towards positive infinity, i.e. `floor((a * b + 2^30) / 2^31)`.
///
/// The only overflowing case, `a == b == i32::MIN`, saturates to `i32::MAX`.
#[inline]
pub fn saturating_rounding_doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == i32::MIN && b == i32::MIN {
        return i32::MAX;
    }
    let ab = i64::from(a) * i64::from(b);
    let nudge: i64 = if ab >= 0 { 1 << 30 } else { 1 - (1 << 30) };
    // gemmlowp divides with truncation towards zero; the nudge makes that round to nearest.
    // |ab| <= 2^62 here, so `ab + nudge` cannot overflow and the quotient fits in i32.
    ((ab + nudge) / (1i64 << 31)) as i32
}

/// gemmlowp's `RoundingDivideByPOT`: `x / 2^exponent` rounded to nearest, halves away from
/// zero.
///
/// gemmlowp requires `0 <= exponent <= 31`. Here a negative exponent is taken as 0 and a
/// larger one divides exactly as well (the result is 0 from 33 on).
#[inline]
pub fn rounding_divide_by_pot(x: i32, exponent: i32) -> i32 {
    if exponent <= 0 {
        return x;
    }
    if exponent > 32 {
        return 0;
    }
    // In i64 so that the mask of exponent 32 is representable.
    let x = i64::from(x);
    let mask = (1i64 << exponent) - 1;
    let remainder = x & mask;
    let threshold = (mask >> 1) + i64::from(x < 0);
    let q = (x >> exponent) + i64::from(remainder > threshold);
    // |q| <= 2^31 / 2 + 1 for exponent >= 1.
    q as i32
}

/// `x * 2^left_shift` wrapped to 32 bits (the C++ `x * (1 << left_shift)` with the wrapping
/// the hardware gives); a shift of 32 or more gives 0, a negative one is taken as 0.
#[inline]
fn wrapping_shift_left(x: i32, left_shift: i32) -> i32 {
    match u32::try_from(left_shift) {
        Ok(s) => x.checked_shl(s).unwrap_or(0),
        Err(_) => x,
    }
}

/// TFLite's `MultiplyByQuantizedMultiplier`: `x * multiplier * 2^(shift - 31)` as a left
/// shift (for `shift > 0`), then [`saturating_rounding_doubling_high_mul`], then
/// [`rounding_divide_by_pot`] (for `shift < 0`).
///
/// This is also exactly gemmlowp's `OutputStageScaleInt32ByFixedPointAndExponent`, which the
/// NNAPI uint8 per-tensor conv and fully-connected paths use. The left shift wraps as the
/// C++ does in practice (it is undefined behaviour there).
#[inline]
pub fn multiply_by_quantized_multiplier(x: i32, multiplier: i32, shift: i32) -> i32 {
    let (left, right) = if shift > 0 { (shift, 0) } else { (0, -shift) };
    rounding_divide_by_pot(
        saturating_rounding_doubling_high_mul(wrapping_shift_left(x, left), multiplier),
        right,
    )
}

/// TFLite's `MultiplyByQuantizedMultiplierSmallerThanOneExp`: no left shift, then
/// [`saturating_rounding_doubling_high_mul`] and a rounding right shift by `-left_shift`.
///
/// Equal to [`multiply_by_quantized_multiplier`] for every `left_shift <= 0`, the only
/// shifts [`quantize_multiplier_smaller_than_one_exp`] returns; a positive `left_shift` is
/// taken as 0.
#[inline]
pub fn multiply_by_quantized_multiplier_smaller_than_one_exp(
    x: i32,
    multiplier: i32,
    left_shift: i32,
) -> i32 {
    rounding_divide_by_pot(
        saturating_rounding_doubling_high_mul(x, multiplier),
        left_shift.saturating_neg(),
    )
}

/// TFLite's `MultiplyByQuantizedMultiplierGreaterThanOne`: `x * 2^left_shift` (wrapping),
/// then [`saturating_rounding_doubling_high_mul`], with no right shift.
///
/// Equal to [`multiply_by_quantized_multiplier`] for every `left_shift >= 0`; a negative
/// `left_shift` is taken as 0.
#[inline]
pub fn multiply_by_quantized_multiplier_greater_than_one(
    x: i32,
    multiplier: i32,
    left_shift: i32,
) -> i32 {
    saturating_rounding_doubling_high_mul(wrapping_shift_left(x, left_shift), multiplier)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ldexp(x: f64, e: i32) -> f64 {
        x * 2f64.powi(e)
    }

    #[test]
    fn frexp_matches_c() {
        assert_eq!(frexp(1.0), (0.5, 1));
        assert_eq!(frexp(0.75), (0.75, 0));
        assert_eq!(frexp(-6.0), (-0.75, 3));
        assert_eq!(frexp(f64::MIN_POSITIVE), (0.5, -1021));
        // The smallest subnormal, 2^-1074.
        assert_eq!(frexp(f64::from_bits(1)), (0.5, -1073));
        assert_eq!(frexp(f64::from_bits(3)), (0.75, -1072));
    }

    // Golden values of NNAPI's common/UtilsTest.cpp.
    #[test]
    fn quantize_multiplier_golden() {
        let m30 = 1 << 30;
        for (v, q, s) in [
            (-4.0, -m30, 3),
            (-2.0, -m30, 2),
            (-1.0, -m30, 1),
            (-0.5, -m30, 0),
            (-0.25, -m30, -1),
            (-0.125, -m30, -2),
            (0.0, 0, 0),
            (0.125, m30, -2),
            (0.25, m30, -1),
            (0.5, m30, 0),
            (1.0, m30, 1),
            (2.0, m30, 2),
            (4.0, m30, 3),
            // Underflow.
            (ldexp(1.0, -31), m30, -30),
            (ldexp(1.0, -32), m30, -31),
            (ldexp(f64::from(0.99f32), -32), 0, 0),
            (ldexp(1.0, -33), 0, 0),
        ] {
            assert_eq!(quantize_multiplier(v), (q, s), "{v}");
        }
        assert_eq!(quantize_multiplier(f64::NAN), (0, 0));
        assert_eq!(quantize_multiplier(f64::INFINITY), (0, 0));
    }

    #[test]
    fn quantize_multiplier_smaller_than_one_exp_golden() {
        for v in [-0.1, 0.0, 1.0 - 1e-15, 1.0 - 1e-17, 1.0, f64::NAN] {
            assert!(quantize_multiplier_smaller_than_one_exp(v).is_err(), "{v}");
        }
        for (v, q, s) in [
            (0.25, 1_073_741_824, -1),
            (0.50 - 5e-9, 2_147_483_627, -1),
            (0.50 - 1e-10, 1_073_741_824, 0),
            (0.50, 1_073_741_824, 0),
            (0.75, 1_610_612_736, 0),
            (1.0 - 1e-9, 2_147_483_646, 0),
        ] {
            assert_eq!(
                quantize_multiplier_smaller_than_one_exp(v),
                Ok((q, s)),
                "{v}"
            );
        }
    }

    #[test]
    fn quantize_multiplier_greater_than_one_golden() {
        for v in [1.0 + 1e-16, 1.0, 0.5, f64::INFINITY, f64::NAN] {
            assert!(quantize_multiplier_greater_than_one(v).is_err(), "{v}");
        }
        for (v, q, s) in [
            (1.0 + 1e-11, 1_073_741_824, 1),
            (1.25, 1_342_177_280, 1),
            (1.50, 1_610_612_736, 1),
            (1.75, 1_879_048_192, 1),
            (2.0 - 1e-9, 2_147_483_647, 1),
            (2.0 - 1e-11, 1_073_741_824, 2),
            (2.0, 1_073_741_824, 2),
        ] {
            assert_eq!(quantize_multiplier_greater_than_one(v), Ok((q, s)), "{v}");
        }
    }

    #[test]
    fn quantize_multiplier_smaller_than_one_right_shift() {
        assert_eq!(quantize_multiplier_smaller_than_one(0.0), Ok((0, 0)));
        assert_eq!(quantize_multiplier_smaller_than_one(0.25), Ok((1 << 30, 1)));
        assert_eq!(quantize_multiplier_smaller_than_one(0.5), Ok((1 << 30, 0)));
        // No flush to zero: 2^-40 keeps its mantissa.
        assert_eq!(
            quantize_multiplier_smaller_than_one(ldexp(1.0, -40)),
            Ok((1 << 30, 39))
        );
        for v in [-0.1, 1.0, 1.0 - 1e-15, f64::NAN] {
            assert!(quantize_multiplier_smaller_than_one(v).is_err(), "{v}");
        }
    }

    #[test]
    fn convolution_multiplier() {
        assert_eq!(
            get_quantized_convolution_multiplier(0.5, 0.5, 0.25, 1.0),
            Ok(0.25)
        );
        // The product is exact (f64), not rounded to f32 first.
        let m = get_quantized_convolution_multiplier(0.1, 0.3, 0.1 * 0.3, 0.7).unwrap();
        assert_eq!(m, f64::from(0.1f32) * f64::from(0.3f32) / f64::from(0.7f32));
        assert_ne!(m, f64::from(0.1f32 * 0.3f32) / f64::from(0.7f32));
        // Relative tolerance 1e-6.
        assert!(get_quantized_convolution_multiplier(0.5, 0.5, 0.250_000_1, 1.0).is_ok());
        assert!(matches!(
            get_quantized_convolution_multiplier(0.5, 0.5, 0.26, 1.0),
            Err(QuantError::BiasScaleMismatch { .. })
        ));
        assert!(get_quantized_convolution_multiplier(0.5, -0.5, -0.25, 1.0).is_err());
        assert!(get_quantized_convolution_multiplier(0.5, 0.5, 0.25, 0.0).is_err());
        assert!(get_quantized_convolution_multiplier(f32::NAN, 0.5, 0.25, 1.0).is_err());
    }

    #[test]
    fn activation_ranges() {
        let u8r = |act, scale, zp| quantized_activation_range(act, scale, zp, 0, 255);
        assert_eq!(u8r(0, 0.5, 10), (0, 255));
        assert_eq!(u8r(1, 0.5, 10), (10, 255));
        assert_eq!(u8r(2, 0.5, 10), (8, 12));
        assert_eq!(u8r(3, 0.5, 10), (10, 22));
        // Clamped to the type's range.
        assert_eq!(u8r(3, 0.01, 10), (10, 255));
        assert_eq!(u8r(2, 0.001, 128), (0, 255));
        // round() of an exact half goes away from zero: 1 / 0.4 = 2.5.
        assert_eq!(u8r(2, 0.4, 100), (97, 103));
        let i8r = |act, scale, zp| quantized_activation_range(act, scale, zp, -128, 127);
        assert_eq!(i8r(1, 0.1, -128), (-128, 127));
        assert_eq!(i8r(3, 0.1, -128), (-128, -68));
        assert_eq!(i8r(2, 0.1, 0), (-10, 10));
        assert_eq!(i8r(7, 0.1, 0), (0, 0));
        // Degenerate scales do not panic.
        assert_eq!(u8r(3, 0.0, 10), (10, 255));
        assert_eq!(u8r(3, f32::NAN, 10), (10, 10));
        assert_eq!(i8r(2, 1e-30, i32::MAX), (-1, 127));
    }

    #[test]
    fn quant_elem_bounds() {
        assert_eq!((<u8 as QuantElem>::MIN, <u8 as QuantElem>::MAX), (0, 255));
        assert_eq!(<i8 as QuantElem>::MIN, -128);
        assert_eq!(u8::saturate_from_i32(300), 255);
        assert_eq!(u8::saturate_from_i32(-3), 0);
        assert_eq!(i8::saturate_from_i32(-300), -128);
        assert_eq!(i16::saturate_from_i32(40_000), i16::MAX);
        assert_eq!(u16::saturate_from_i32(40_000), 40_000);
        assert_eq!((-5i8).to_i32(), -5);
    }

    #[test]
    fn srdhm_edges() {
        assert_eq!(
            saturating_rounding_doubling_high_mul(i32::MIN, i32::MIN),
            i32::MAX
        );
        assert_eq!(
            saturating_rounding_doubling_high_mul(i32::MIN, i32::MAX),
            -i32::MAX
        );
        assert_eq!(
            saturating_rounding_doubling_high_mul(1 << 30, 1 << 30),
            1 << 29
        );
        // 2 * 1 * 2^30 / 2^32 = 0.5 rounds up; -0.5 rounds up to 0.
        assert_eq!(saturating_rounding_doubling_high_mul(1, 1 << 30), 1);
        assert_eq!(saturating_rounding_doubling_high_mul(-1, 1 << 30), 0);
        assert_eq!(saturating_rounding_doubling_high_mul(-3, 1 << 30), -1);
    }

    #[test]
    fn rdbp_edges() {
        assert_eq!(rounding_divide_by_pot(5, 1), 3);
        assert_eq!(rounding_divide_by_pot(-5, 1), -3);
        assert_eq!(rounding_divide_by_pot(-4, 1), -2);
        assert_eq!(rounding_divide_by_pot(7, 0), 7);
        assert_eq!(rounding_divide_by_pot(7, -3), 7);
        assert_eq!(rounding_divide_by_pot(i32::MIN, 31), -1);
        assert_eq!(rounding_divide_by_pot(i32::MAX, 31), 1);
        assert_eq!(rounding_divide_by_pot(i32::MIN, 32), -1);
        assert_eq!(rounding_divide_by_pot(i32::MAX, 32), 0);
        assert_eq!(rounding_divide_by_pot(i32::MIN, 33), 0);
        assert_eq!(rounding_divide_by_pot(i32::MIN, i32::MAX), 0);
    }

    #[test]
    fn mbqm_examples() {
        let (m, s) = quantize_multiplier(0.25);
        assert_eq!(multiply_by_quantized_multiplier(150, m, s), 38);
        assert_eq!(multiply_by_quantized_multiplier(-150, m, s), -38);
        let (m, s) = quantize_multiplier(3.0);
        assert_eq!(multiply_by_quantized_multiplier(7, m, s), 21);
        // Huge shifts neither panic nor read as small ones.
        assert_eq!(multiply_by_quantized_multiplier(1, 1 << 30, 40), 0);
        assert_eq!(multiply_by_quantized_multiplier(1 << 20, 1 << 30, -100), 0);
        assert_eq!(
            multiply_by_quantized_multiplier_smaller_than_one_exp(1 << 20, 1 << 30, 5),
            1 << 19
        );
        assert_eq!(
            multiply_by_quantized_multiplier_greater_than_one(3, 1 << 30, -2),
            2
        );
    }

    /// `floor(n / d)` for `d > 0`.
    fn floor_div(n: i128, d: i128) -> i128 {
        n.div_euclid(d)
    }

    /// `x / 2^e` rounded half away from zero, from the absolute value.
    fn round_away(x: i64, e: u32) -> i64 {
        let d = 1i128 << e;
        let a = i128::from(x).abs();
        let q = (2 * a + d) / (2 * d);
        (if x < 0 { -q } else { q }) as i64
    }

    proptest! {
        #[test]
        fn quant_srdhm_is_round_half_up(a in any::<i32>(), b in any::<i32>()) {
            prop_assume!(!(a == i32::MIN && b == i32::MIN));
            let want = floor_div(i128::from(a) * i128::from(b) + (1 << 30), 1 << 31);
            prop_assert_eq!(i128::from(saturating_rounding_doubling_high_mul(a, b)), want);
        }

        #[test]
        fn quant_rdbp_rounds_half_away(x in any::<i32>(), e in 0u32..=40) {
            let want = round_away(i64::from(x), e);
            prop_assert_eq!(i64::from(rounding_divide_by_pot(x, e as i32)), want);
        }

        #[test]
        fn quant_quantize_multiplier_reconstructs(real in 1e-9f64..1e9) {
            let (m, s) = quantize_multiplier(real);
            prop_assert!((1 << 30..=i32::MAX).contains(&m), "m {}", m);
            let back = f64::from(m) * 2f64.powi(s - 31);
            prop_assert!((back - real).abs() <= real * 2f64.powi(-30), "{} vs {}", back, real);
            let (nm, ns) = quantize_multiplier(-real);
            prop_assert_eq!((nm, ns), (-m, s));
            if real < 1.0 {
                prop_assert_eq!(quantize_multiplier_smaller_than_one_exp(real), Ok((m, s)));
            }
            if real > 1.0 {
                prop_assert_eq!(quantize_multiplier_greater_than_one(real), Ok((m, s)));
            }
        }

        #[test]
        fn quant_mbqm_splits(x in any::<i32>(), m in (1i32 << 30)..=i32::MAX, s in -40i32..=40) {
            let got = multiply_by_quantized_multiplier(x, m, s);
            if s <= 0 {
                prop_assert_eq!(got, multiply_by_quantized_multiplier_smaller_than_one_exp(x, m, s));
                // Two roundings stay within 1 of the exact product.
                let exact = i128::from(x) * i128::from(m);
                let d = 1i128 << (31 - s);
                let q = (2 * exact.abs() + d) / (2 * d);
                let want = if exact < 0 { -q } else { q };
                prop_assert!((i128::from(got) - want).abs() <= 1, "{} vs {}", got, want);
            } else {
                prop_assert_eq!(got, multiply_by_quantized_multiplier_greater_than_one(x, m, s));
                if let Ok(xs) = i32::try_from(i128::from(x) << s) {
                    prop_assert_eq!(got, saturating_rounding_doubling_high_mul(xs, m));
                }
            }
        }

        #[test]
        fn quant_activation_range_within_bounds(
            act in 0u32..6, scale in any::<f32>(), zp in any::<i32>(),
        ) {
            let (lo, hi) = quantized_activation_range(act, scale, zp, -128, 127);
            if act <= 3 {
                prop_assert!(lo >= -128 && hi <= 127);
            } else {
                prop_assert_eq!((lo, hi), (0, 0));
            }
        }
    }
}
