//! gemmlowp-style fixed-point transcendental functions, bit-exact with the NNAPI CPU
//! reference's quantised SOFTMAX, LOGISTIC, TANH and L2_NORMALIZATION (32-bit) and its
//! quantised LSTMs' gates (16-bit): one implementation over the raw width ([`Raw`]).
//!
//! A fixed-point number here is a raw `i32` (or `i16`) with a number of integer bits `I`
//! (gemmlowp's `FixedPoint<int32_t, I>`): its value is `raw / 2^(31 - I)` (`2^(15 - I)`). The functions take and return
//! raw values and say which formats they use (`Q0` = 0 integer bits, i.e. `[-1, 1)`).
//! gemmlowp's additions and subtractions wrap here (they are undefined on overflow in the
//! C++, which never overflows on the inputs the kernels produce); multiplications are
//! [`Raw::mul`], the saturating rounding doubling high multiply.
//!
//! Sources of the algorithms (read for their semantics): gemmlowp `fixedpoint/fixedpoint.h`
//! (`exp_on_negative_values`, `one_over_one_plus_x_for_x_in_0_1`, `logistic`, `tanh`,
//! `Rescale`, `SaturatingRoundingMultiplyByPOT`, `RoundingHalfSum`), TFLite
//! `kernels/internal/common.h` (`GetReciprocal`, `GetInvSqrtQuantizedMultiplierExp`) and
//! NNAPI `common/OperationsExecutionUtils.cpp` (`CalculateInputRadius`).

use super::{
    multiply_by_quantized_multiplier_greater_than_one, quantize_multiplier_greater_than_one,
    rounding_divide_by_pot, saturating_rounding_doubling_high_mul as mul, QuantError,
};

/// The raw integer of a gemmlowp fixed-point number (`FixedPoint<tRawType, I>`): `i32`
/// for the quantised SOFTMAX, LOGISTIC, TANH and L2_NORMALIZATION, `i16` for the
/// quantised LSTMs. A raw `r` with `I` integer bits has the value `r / 2^(BITS - 1 - I)`.
/// The algorithms below are written once over this trait; what differs between the
/// widths (rounding edges, gemmlowp's `AddSaturatingIf16Bit`, constants given in 32 bits)
/// is here.
pub trait Raw: Copy + Eq + Ord + std::fmt::Debug {
    /// Bits of the raw integer.
    const BITS: i32;
    /// The largest raw value (just below 1.0 in Q0).
    const MAX: Self;
    /// Zero.
    const ZERO: Self;
    /// A gemmlowp constant given as its 32-bit raw value, in this width (gemmlowp rounds it
    /// with `RoundingDivideByPOT(v, 32 - BITS)`).
    fn constant(v: i32) -> Self;
    /// `2^shift` as a raw value (`0 <= shift < BITS - 1`).
    fn pow2(shift: i32) -> Self;
    /// gemmlowp's `+` (wrapping here: it never overflows on the kernels' inputs).
    fn add(self, o: Self) -> Self;
    /// gemmlowp's `-` (wrapping).
    fn sub(self, o: Self) -> Self;
    /// Whether bit `bit` of the raw value is set.
    fn bit(self, bit: i32) -> bool;
    /// The raw value with only the bits of `mask` kept.
    fn and(self, mask: Self) -> Self;
    /// `SaturatingRoundingDoublingHighMul`.
    fn mul(self, o: Self) -> Self;
    /// `RoundingDivideByPOT`: `self / 2^exponent` rounded to nearest, halves away from zero.
    fn rounding_divide_by_pot(self, exponent: i32) -> Self;
    /// `SaturatingRoundingMultiplyByPOT`: `self * 2^exponent`, saturating for a positive
    /// exponent, rounding for a negative one.
    fn saturating_rounding_multiply_by_pot(self, exponent: i32) -> Self;
    /// `AddSaturatingIf16Bit`: saturating in 16 bits, gemmlowp's `+` in 32.
    fn add_saturating_if_16bit(self, o: Self) -> Self;
    /// `RoundingHalfSum`: `(self + o) / 2` rounded to nearest, halves away from zero.
    fn rounding_half_sum(self, o: Self) -> Self;
}

impl Raw for i32 {
    const BITS: i32 = 32;
    const MAX: i32 = i32::MAX;
    const ZERO: i32 = 0;
    fn constant(v: i32) -> i32 {
        v
    }
    fn pow2(shift: i32) -> i32 {
        1 << shift
    }
    fn add(self, o: i32) -> i32 {
        self.wrapping_add(o)
    }
    fn sub(self, o: i32) -> i32 {
        self.wrapping_sub(o)
    }
    fn bit(self, bit: i32) -> bool {
        self & (1i32 << bit) != 0
    }
    fn and(self, mask: i32) -> i32 {
        self & mask
    }
    #[inline]
    fn mul(self, o: i32) -> i32 {
        mul(self, o)
    }
    #[inline]
    fn rounding_divide_by_pot(self, exponent: i32) -> i32 {
        rounding_divide_by_pot(self, exponent)
    }
    #[inline]
    fn saturating_rounding_multiply_by_pot(self, exponent: i32) -> i32 {
        match exponent {
            0 => self,
            e if e > 0 => {
                let shifted = i64::from(self) << e.min(32);
                // In range after the clamp, so the cast is exact.
                shifted.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
            }
            e => rounding_divide_by_pot(self, e.saturating_neg()),
        }
    }
    fn add_saturating_if_16bit(self, o: i32) -> i32 {
        self.wrapping_add(o)
    }
    fn rounding_half_sum(self, o: i32) -> i32 {
        let sum = i64::from(self) + i64::from(o);
        let sign = if sum >= 0 { 1 } else { -1 };
        // |sum + sign| / 2 <= 2^31, and only 2 * i32::MAX + 1 reaches it: halved it fits.
        ((sum + sign) / 2) as i32
    }
}

impl Raw for i16 {
    const BITS: i32 = 16;
    const MAX: i16 = i16::MAX;
    const ZERO: i16 = 0;
    fn constant(v: i32) -> i16 {
        // |v / 2^16| rounded fits in i16.
        rounding_divide_by_pot(v, 16) as i16
    }
    fn pow2(shift: i32) -> i16 {
        1 << shift
    }
    fn add(self, o: i16) -> i16 {
        self.wrapping_add(o)
    }
    fn sub(self, o: i16) -> i16 {
        self.wrapping_sub(o)
    }
    fn bit(self, bit: i32) -> bool {
        i32::from(self) & (1i32 << bit) != 0
    }
    fn and(self, mask: i16) -> i16 {
        self & mask
    }
    #[inline]
    fn mul(self, o: i16) -> i16 {
        if self == i16::MIN && o == i16::MIN {
            return i16::MAX;
        }
        let ab = i32::from(self) * i32::from(o);
        let nudge = if ab >= 0 { 1 << 14 } else { 1 - (1 << 14) };
        ((ab + nudge) / (1 << 15)) as i16
    }
    #[inline]
    fn rounding_divide_by_pot(self, exponent: i32) -> i16 {
        // Within 16 bits: an exponent over 15 divides by 2^15.
        rounding_divide_by_pot(i32::from(self), exponent.min(15)) as i16
    }
    #[inline]
    fn saturating_rounding_multiply_by_pot(self, exponent: i32) -> i16 {
        if exponent > 0 {
            let v = i32::from(self) << exponent.min(16);
            v.clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16
        } else {
            self.rounding_divide_by_pot(-exponent)
        }
    }
    fn add_saturating_if_16bit(self, o: i16) -> i16 {
        self.saturating_add(o)
    }
    fn rounding_half_sum(self, o: i16) -> i16 {
        let sum = i32::from(self) + i32::from(o);
        let sign = if sum >= 0 { 1 } else { -1 };
        ((sum + sign) / 2) as i16
    }
}

/// gemmlowp's `SaturatingRoundingMultiplyByPOT` ([`Raw::saturating_rounding_multiply_by_pot`]).
#[inline]
pub fn saturating_rounding_multiply_by_pot<R: Raw>(x: R, exponent: i32) -> R {
    x.saturating_rounding_multiply_by_pot(exponent)
}

/// gemmlowp's `Rescale`: the raw value of `x` (with `src_bits` integer bits) re-expressed
/// with `dst_bits` integer bits, rounding and saturating.
#[inline]
pub fn rescale<R: Raw>(x: R, src_bits: i32, dst_bits: i32) -> R {
    x.saturating_rounding_multiply_by_pot(src_bits - dst_bits)
}

/// gemmlowp's `RoundingHalfSum` ([`Raw::rounding_half_sum`]).
#[inline]
pub fn rounding_half_sum<R: Raw>(a: R, b: R) -> R {
    a.rounding_half_sum(b)
}

/// `exp(a)` for `a` in `[-1/4, 0)`, both Q0: a Taylor expansion around `-1/8` to the fourth
/// power.
fn exp_on_interval_between_negative_one_quarter_and_0_excl<R: Raw>(a: R) -> R {
    // `exp(-1/8)` and `1/3` in Q0.
    let exp_minus_one_eighth = R::constant(1_895_147_668);
    let one_third = R::constant(715_827_883);
    // x = a + 1/8, so that the expansion is around 0.
    let x = a.add(R::pow2(R::BITS - 4));
    let x2 = x.mul(x);
    let x3 = x2.mul(x);
    let x4 = x2.mul(x2);
    let x4_over_4 = x4.saturating_rounding_multiply_by_pot(-2);
    // x^4/24 + x^3/6 + x^2/2 = ((x^4/4 + x^3) / 3 + x^2) / 2.
    let higher = x4_over_4
        .add(x3)
        .mul(one_third)
        .add(x2)
        .saturating_rounding_multiply_by_pot(-1);
    exp_minus_one_eighth.add_saturating_if_16bit(exp_minus_one_eighth.mul(x.add(higher)))
}

/// `exp(-2^k)` in Q0 (32-bit raw values) for `k = -2..=4`, the factors of the barrel
/// shifter over the integer part of the argument.
const EXP_OF_MINUS_POWERS_OF_TWO: [(i32, i32); 7] = [
    (-2, 1_672_461_947),
    (-1, 1_302_514_674),
    (0, 790_015_084),
    (1, 290_630_308),
    (2, 39_332_535),
    (3, 720_401),
    (4, 242),
];

/// gemmlowp's `exp_on_negative_values`: `exp(a)` in Q0 for `a <= 0` with `integer_bits`
/// integer bits (`0..=BITS - 3`; other values are clamped into that range).
///
/// `a` is split into a multiple of 1/4 and a remainder in `[-1/4, 0)`; the remainder goes
/// through the Taylor expansion and the multiple through a product of `exp(-2^k)` factors,
/// one per set bit. Below -32 (only representable with more than 5 integer bits) the result
/// is 0; `exp(0)` is the largest Q0 value.
pub fn exp_on_negative_values<R: Raw>(a: R, integer_bits: i32) -> R {
    let integer_bits = integer_bits.clamp(0, R::BITS - 3);
    let fractional_bits = R::BITS - 1 - integer_bits;
    let one_quarter = R::pow2(fractional_bits - 2);
    let a_mod_quarter_minus_one_quarter = a.and(one_quarter.sub(R::pow2(0))).sub(one_quarter);
    let mut result = exp_on_interval_between_negative_one_quarter_and_0_excl(rescale(
        a_mod_quarter_minus_one_quarter,
        integer_bits,
        0,
    ));
    let remainder = a_mod_quarter_minus_one_quarter.sub(a);
    for (k, factor) in EXP_OF_MINUS_POWERS_OF_TWO {
        if integer_bits > k && remainder.bit(fractional_bits + k) {
            result = result.mul(R::constant(factor));
        }
    }
    if integer_bits > 5 && a < R::constant(-(1i32 << (36 - integer_bits))) {
        result = R::ZERO;
    }
    if a == R::ZERO {
        result = R::MAX;
    }
    result
}

/// Three Newton-Raphson steps towards `1 / (2 * half_denominator)`, starting from gemmlowp's
/// `48/17 - 32/17 * d`; `half_denominator` is Q0 in `[1/2, 1)`, the result Q2.
fn newton_reciprocal_of_double<R: Raw>(half_denominator: R) -> R {
    // `48/17` and `-32/17` in Q2; 1.0 in Q2.
    let forty_eight_seventeenths = R::constant(1_515_870_810);
    let minus_thirty_two_seventeenths = R::constant(-1_010_580_540);
    let one_q2 = R::pow2(R::BITS - 3);
    let mut x = forty_eight_seventeenths.add(half_denominator.mul(minus_thirty_two_seventeenths));
    for _ in 0..3 {
        let one_minus_dx = one_q2.sub(half_denominator.mul(x));
        // x * (1 - d x) is Q4; back to Q2.
        x = x.add(rescale(x.mul(one_minus_dx), 4, 2));
    }
    x
}

/// gemmlowp's `one_over_one_plus_x_for_x_in_0_1`: `1 / (1 + a)` for `a` in `[0, 1)`, both
/// Q0.
pub fn one_over_one_plus_x_for_x_in_0_1<R: Raw>(a: R) -> R {
    let x = newton_reciprocal_of_double(a.rounding_half_sum(R::MAX));
    // x approximates 1 / (1 + a) * 2 in Q2, i.e. 1 / (1 + a) in Q1.
    rescale(x, 1, 0)
}

/// gemmlowp's `one_minus_x_over_one_plus_x_for_x_in_0_1`: `(1 - a) / (1 + a)` for `a` in
/// `[0, 1)`, both Q0.
pub fn one_minus_x_over_one_plus_x_for_x_in_0_1<R: Raw>(a: R) -> R {
    let x = newton_reciprocal_of_double(a.rounding_half_sum(R::MAX));
    // 2 / (1 + a) - 1 = (1 - a) / (1 + a).
    rescale(x.sub(R::pow2(R::BITS - 3)), 2, 0)
}

/// gemmlowp's `logistic`: `1 / (1 + exp(-a))` in Q0 for `a` with `integer_bits` integer
/// bits.
pub fn logistic<R: Raw>(a: R, integer_bits: i32) -> R {
    if a == R::ZERO {
        return R::pow2(R::BITS - 2);
    }
    let minus_abs = if a > R::ZERO { R::ZERO.sub(a) } else { a };
    let of_abs = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(minus_abs, integer_bits));
    if a > R::ZERO {
        of_abs
    } else {
        R::MAX.sub(of_abs)
    }
}

/// gemmlowp's `tanh`: `tanh(a)` in Q0 for `a` with `integer_bits` integer bits, as
/// `(1 - exp(-2|a|)) / (1 + exp(-2|a|))` with the sign of `a`.
pub fn tanh<R: Raw>(a: R, integer_bits: i32) -> R {
    if a == R::ZERO {
        return R::ZERO;
    }
    let minus_abs = if a < R::ZERO { a } else { R::ZERO.sub(a) };
    // Doubling is exact: the same raw value read with one more integer bit.
    let t = one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(
        minus_abs,
        integer_bits + 1,
    ));
    if a < R::ZERO {
        R::ZERO.sub(t)
    } else {
        t
    }
}

/// TFLite's `GetReciprocal`: for a positive `x` with `integer_bits` integer bits, the Q0
/// mantissa of `1 / x` and the number of bits of `x` above 1.0 (`1/x` is
/// `mantissa * 2^-bits_over_unit`).
pub fn reciprocal(x: i32, integer_bits: i32) -> (i32, i32) {
    let ux = x as u32;
    let headroom_plus_one = ux.leading_zeros() as i32;
    let bits_over_unit = integer_bits - headroom_plus_one;
    // x normalised to [1, 2), minus 1, as Q0 (u32 arithmetic as the C++).
    let normalised = ux.checked_shl(headroom_plus_one as u32).unwrap_or(0);
    let shifted_minus_one = normalised.wrapping_sub(1 << 31) as i32;
    (
        one_over_one_plus_x_for_x_in_0_1(shifted_minus_one),
        bits_over_unit,
    )
}

/// TFLite's `GetInvSqrtQuantizedMultiplierExp`: `1 / sqrt(input)` for `input >= 0` as a Q31
/// multiplier and a shift, the shift multiplied by `reverse_shift` (-1 gives a left shift,
/// as `MultiplyByQuantizedMultiplier*` take it).
///
/// Inputs 0 and 1 give `(i32::MAX, 0)` (TFLite treats 0 as 1). Five Newton-Raphson steps in
/// Q3 on the input normalised to `[2^27, 2^29)`. A negative input (undefined in the C++) is
/// taken as 0.
pub fn inv_sqrt_quantized_multiplier_exp(input: i32, reverse_shift: i32) -> (i32, i32) {
    if input <= 1 {
        return (i32::MAX, 0);
    }
    let mut input = input;
    let mut shift: i32 = 11;
    while input >= 1 << 29 {
        input /= 4;
        shift += 1;
    }
    // 2 <= input < 2^29: 2 <= leading zeros <= 30.
    let max_left_shift_bits = input.leading_zeros() as i32 - 1;
    let left_shift_bit_pairs = max_left_shift_bits / 2 - 1;
    shift -= left_shift_bit_pairs;
    input <<= 2 * left_shift_bit_pairs;
    /// `1.5` in Q3.
    const THREE_HALVES: i32 = (1 << 28) + (1 << 27);
    /// `sqrt(2) / 2` in Q0.
    const HALF_SQRT_2: i32 = 1_518_500_250;
    let half_input = saturating_rounding_multiply_by_pot(input >> 1, -1);
    // x = 1.0 in Q3.
    let mut x: i32 = 1 << 28;
    for _ in 0..5 {
        // x^3 is Q9.
        let x3 = rescale(mul(mul(x, x), x), 9, 3);
        // 1.5 x - input/2 * x^3, both Q6.
        x = rescale(mul(THREE_HALVES, x).wrapping_sub(mul(half_input, x3)), 6, 3);
    }
    let mut inv_sqrt = mul(x, HALF_SQRT_2);
    if shift < 0 {
        inv_sqrt = inv_sqrt.wrapping_shl(shift.unsigned_abs());
        shift = 0;
    }
    (inv_sqrt, shift * reverse_shift)
}

/// NNAPI's `CalculateInputRadius`: the largest input difference (before the rescale by
/// `2^left_shift`) whose rescaled value stays within `integer_bits` integer bits, floored.
pub fn calculate_input_radius(integer_bits: i32, left_shift: i32) -> i32 {
    let integer_bits = integer_bits.clamp(0, 30);
    let max_input_rescaled = f64::from((1i32 << integer_bits) - 1) * 2f64.powi(31 - integer_bits)
        / 2f64.powi(left_shift);
    // `as` saturates; the value is below 2^31 for left_shift >= 0.
    max_input_rescaled.floor() as i32
}

/// The input stage of the quantised SOFTMAX, LOGISTIC and TANH: integer input differences
/// are rescaled by a real multiplier greater than one into a fixed-point number with
/// `integer_bits` integer bits; differences of `radius` or more in magnitude would not fit
/// and are handled by the caller (saturated, or dropped from a softmax).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputStage {
    /// The Q31 multiplier (NNAPI's `QuantizeMultiplierGreaterThanOne`).
    pub multiplier: i32,
    /// Its left shift (>= 1).
    pub left_shift: i32,
    /// [`calculate_input_radius`] of the integer bits and the shift.
    pub radius: i32,
}

impl InputStage {
    /// The stage of `real_multiplier` (the input scale times `2^(31 - integer_bits)`, and
    /// beta for softmax). Errors, as NNAPI does, unless it is finite and greater than one.
    pub fn new(real_multiplier: f64, integer_bits: i32) -> Result<InputStage, QuantError> {
        let (multiplier, left_shift) = quantize_multiplier_greater_than_one(real_multiplier)?;
        Ok(InputStage {
            multiplier,
            left_shift,
            radius: calculate_input_radius(integer_bits, left_shift),
        })
    }

    /// `diff` rescaled to the fixed-point format (meaningful for `|diff| < radius`).
    #[inline]
    pub fn rescale(&self, diff: i32) -> i32 {
        multiply_by_quantized_multiplier_greater_than_one(diff, self.multiplier, self.left_shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn to_f64(raw: i32, integer_bits: i32) -> f64 {
        f64::from(raw) / 2f64.powi(31 - integer_bits)
    }

    #[test]
    fn srmpot_edges() {
        assert_eq!(saturating_rounding_multiply_by_pot(3, 2), 12);
        assert_eq!(saturating_rounding_multiply_by_pot(1 << 30, 1), i32::MAX);
        assert_eq!(saturating_rounding_multiply_by_pot(-(1 << 30), 1), i32::MIN);
        assert_eq!(
            saturating_rounding_multiply_by_pot(-(1 << 30) - 1, 1),
            i32::MIN
        );
        assert_eq!(saturating_rounding_multiply_by_pot(5, -1), 3);
        assert_eq!(saturating_rounding_multiply_by_pot(-5, -1), -3);
        assert_eq!(saturating_rounding_multiply_by_pot(7, 40), i32::MAX);
    }

    #[test]
    fn half_sum() {
        assert_eq!(rounding_half_sum(i32::MAX, i32::MAX), i32::MAX);
        assert_eq!(rounding_half_sum(i32::MIN, i32::MIN), i32::MIN);
        assert_eq!(rounding_half_sum(1, 2), 2);
        assert_eq!(rounding_half_sum(-1, -2), -2);
    }

    #[test]
    fn exp_golden_points() {
        assert_eq!(exp_on_negative_values(0, 5), i32::MAX);
        // exp(-1) with 5 integer bits: -1.0 is -2^26.
        let e1 = to_f64(exp_on_negative_values(-(1 << 26), 5), 0);
        assert!((e1 - (-1f64).exp()).abs() < 2e-7, "{e1}");
        // Below -32 (representable with 6 integer bits) the result is 0.
        assert_eq!(exp_on_negative_values(-(33 << 25), 6), 0);
    }

    #[test]
    fn inv_sqrt_small_inputs() {
        assert_eq!(inv_sqrt_quantized_multiplier_exp(0, -1), (i32::MAX, 0));
        assert_eq!(inv_sqrt_quantized_multiplier_exp(1, -1), (i32::MAX, 0));
        for n in [2, 3, 4, 100, 65_025, 1 << 29, i32::MAX] {
            let (m, s) = inv_sqrt_quantized_multiplier_exp(n, -1);
            let got = f64::from(m) * 2f64.powi(s - 31);
            let want = 1.0 / f64::from(n).sqrt();
            // Five Newton steps from 1.0 leave about 2e-6 at the far end of the range.
            assert!((got - want).abs() <= want * 1e-5, "{n}: {got} vs {want}");
        }
    }

    /// Outputs of gemmlowp's own `fixedpoint.h` (compiled as C++) and of TFLite's
    /// `GetInvSqrtQuantizedMultiplierExp`, to the bit. Columns: `a`, then
    /// `exp_on_negative_values` of `-|a|` with 5, 4 and 0 integer bits, `logistic` and
    /// `tanh` of `a` with 4, `one_over_one_plus_x_for_x_in_0_1` and
    /// `one_minus_x_over_one_plus_x_for_x_in_0_1` of `|a|`.
    #[test]
    fn gemmlowp_golden() {
        let rows: [[i32; 8]; 4] = [
            [
                -69331536,
                764277998,
                1281122247,
                2079259239,
                802422079,
                -1020142396,
                2080320474,
                2013157300,
            ],
            [
                -1372797541,
                3,
                77608,
                1133191616,
                77609,
                -2147483647,
                1310033428,
                472583208,
            ],
            [
                659725008, 115485, 15748068, 1579468429, 2131850224, 2147252684, 1642801292,
                1138118936,
            ],
            [
                1126861797, 110, 484944, 1270690900, 2146998816, 2147483432, 1408429896, 669376144,
            ],
        ];
        for [a, e5, e4, e0, lg, th, inv, omx] in rows {
            let neg = -a.abs();
            assert_eq!(exp_on_negative_values(neg, 5), e5, "{a}");
            assert_eq!(exp_on_negative_values(neg, 4), e4, "{a}");
            assert_eq!(exp_on_negative_values(neg, 0), e0, "{a}");
            assert_eq!(logistic(a, 4), lg, "{a}");
            assert_eq!(tanh(a, 4), th, "{a}");
            assert_eq!(one_over_one_plus_x_for_x_in_0_1(a.abs()), inv, "{a}");
            assert_eq!(
                one_minus_x_over_one_plus_x_for_x_in_0_1(a.abs()),
                omx,
                "{a}"
            );
        }
        for (n, m, s) in [
            (3, 1239850284, 0),
            (16, 536870914, 0),
            (49, 306783385, 0),
            (243, 275522279, -1),
        ] {
            assert_eq!(inv_sqrt_quantized_multiplier_exp(n, -1), (m, s), "{n}");
        }
    }

    #[test]
    fn input_radius() {
        // NNAPI's value for 4 integer bits and a left shift of 0: 15 * 2^27.
        assert_eq!(calculate_input_radius(4, 0), 15 << 27);
        assert_eq!(calculate_input_radius(5, 31), 0);
        assert_eq!(calculate_input_radius(4, 27), 15);
        assert_eq!(calculate_input_radius(4, 20), (15 << 27) >> 20);
    }

    proptest! {
        #[test]
        fn quant_exp_is_close(a in i32::MIN..=0, bits in 0i32..=8) {
            let got = to_f64(exp_on_negative_values(a, bits), 0);
            let want = to_f64(a, bits).exp();
            let want = if bits > 5 && to_f64(a, bits) < -32.0 { 0.0 } else { want };
            prop_assert!((got - want).abs() < 5e-7, "{} vs {}", got, want);
        }

        #[test]
        fn quant_reciprocals_are_close(a in 0i32..=i32::MAX) {
            let x = to_f64(a, 0);
            let got = to_f64(one_over_one_plus_x_for_x_in_0_1(a), 0);
            prop_assert!((got - 1.0 / (1.0 + x)).abs() < 1e-8, "{} at {}", got, x);
            let got = to_f64(one_minus_x_over_one_plus_x_for_x_in_0_1(a), 0);
            prop_assert!((got - (1.0 - x) / (1.0 + x)).abs() < 1e-8, "{} at {}", got, x);
        }

        #[test]
        fn quant_logistic_tanh_are_close(a in any::<i32>()) {
            let x = to_f64(a, 4);
            let got = to_f64(logistic(a, 4), 0);
            prop_assert!((got - 1.0 / (1.0 + (-x).exp())).abs() < 1e-6, "{} at {}", got, x);
            let got = to_f64(tanh(a, 4), 0);
            prop_assert!((got - x.tanh()).abs() < 1e-6, "{} at {}", got, x);
        }

        #[test]
        fn quant_reciprocal_scales(x in 1i32..=i32::MAX, bits in 0i32..=12) {
            let (m, over) = reciprocal(x, bits);
            let got = to_f64(m, 0) * 2f64.powi(-over);
            let want = 1.0 / to_f64(x, bits);
            prop_assert!((got - want).abs() <= want * 1e-7, "{} vs {}", got, want);
        }
    }

    /// The 16-bit width (the quantised LSTMs' gates) tracks the real functions too. (When
    /// it replaced the LSTMs' own 16-bit copy, it was checked equal to it on every i16
    /// input, every rescale exponent and integer bits 0..=13.)
    #[test]
    fn sixteen_bit_functions_track_their_real_values() {
        for raw in (-32768i32..32768).step_by(97) {
            let a = raw as i16;
            let x = f64::from(a) / 4096.0; // Q3
            let l = f64::from(logistic(a, 3)) / 32768.0;
            let t = f64::from(tanh(a, 3)) / 32768.0;
            assert!(
                (l - 1.0 / (1.0 + (-x).exp())).abs() < 2e-3,
                "logistic({x}) = {l}"
            );
            assert!((t - x.tanh()).abs() < 2e-3, "tanh({x}) = {t}");
        }
        assert_eq!(<i16 as Raw>::constant(1 << 30), 1 << 14);
        assert_eq!(exp_on_negative_values(0i16, 3), i16::MAX);
    }
}
