//! gemmlowp's 16-bit fixed point (`FixedPoint<int16_t, I>`), as the quantised LSTMs use it:
//! a raw `i16` whose value is `raw / 2^(15 - I)`. Bit-exact with gemmlowp's generic
//! (non-SIMD) implementation: additions wrap, multiplications are the 16-bit
//! saturating rounding doubling high multiply, constants are gemmlowp's 32-bit constants
//! rounded down by 16 bits, and `exp`, `tanh` and `logistic` follow the same algorithms as
//! the 32-bit ones in [`crate::kernels::quant::fixed`].

/// The 16-bit `SaturatingRoundingDoublingHighMul`.
#[inline]
pub fn mul(a: i16, b: i16) -> i16 {
    if a == i16::MIN && b == i16::MIN {
        return i16::MAX;
    }
    let ab = i32::from(a) * i32::from(b);
    let nudge = if ab >= 0 { 1 << 14 } else { 1 - (1 << 14) };
    ((ab + nudge) / (1 << 15)) as i16
}

/// The 16-bit `RoundingDivideByPOT` (`exponent` in `0..=15`).
#[inline]
pub fn rounding_divide_by_pot(x: i16, exponent: i32) -> i16 {
    if exponent <= 0 {
        return x;
    }
    let e = exponent.min(15);
    let x32 = i32::from(x);
    let mask = (1i32 << e) - 1;
    let remainder = x32 & mask;
    let threshold = (mask >> 1) + i32::from(x < 0);
    ((x32 >> e) + i32::from(remainder > threshold)) as i16
}

/// The 16-bit `SaturatingRoundingMultiplyByPOT`.
#[inline]
pub fn saturating_rounding_multiply_by_pot(x: i16, exponent: i32) -> i16 {
    if exponent > 0 {
        let v = i32::from(x) << exponent.min(16);
        v.clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16
    } else {
        rounding_divide_by_pot(x, -exponent)
    }
}

/// `Rescale`: the raw value with `src` integer bits re-expressed with `dst`.
#[inline]
pub fn rescale(x: i16, src: i32, dst: i32) -> i16 {
    saturating_rounding_multiply_by_pot(x, src - dst)
}

/// The 16-bit `SaturatingAdd`.
#[inline]
pub fn saturating_add(a: i16, b: i16) -> i16 {
    a.saturating_add(b)
}

/// A gemmlowp 32-bit constant as a 16-bit raw value.
const fn k(v: i32) -> i16 {
    // RoundingDivideByPOT(v, 16), in i64 so the nudge cannot overflow.
    let x = v as i64;
    let mask = (1i64 << 16) - 1;
    let remainder = x & mask;
    let threshold = (mask >> 1) + if x < 0 { 1 } else { 0 };
    ((x >> 16) + if remainder > threshold { 1 } else { 0 }) as i16
}

/// `exp(a)` for `a` in `[-1/4, 0)`, both Q0.
fn exp_quarter(a: i16) -> i16 {
    let constant_term = k(1_895_147_668);
    let one_third = k(715_827_883);
    let x = a.wrapping_add(1 << 12);
    let x2 = mul(x, x);
    let x3 = mul(x2, x);
    let x4 = mul(x2, x2);
    let x4_over_4 = saturating_rounding_multiply_by_pot(x4, -2);
    let poly = saturating_rounding_multiply_by_pot(
        mul(x4_over_4.wrapping_add(x3), one_third).wrapping_add(x2),
        -1,
    );
    saturating_add(constant_term, mul(constant_term, x.wrapping_add(poly)))
}

/// `exp(a)` in Q0 for `a <= 0` with `integer_bits` integer bits (0..=14).
pub fn exp_on_negative_values(a: i16, integer_bits: i32) -> i16 {
    let ib = integer_bits.clamp(0, 14);
    let fb = 15 - ib;
    let one_quarter: i16 = 1 << (fb - 2);
    let mask = one_quarter.wrapping_sub(1);
    let a_mod = (a & mask).wrapping_sub(one_quarter);
    let mut result = exp_quarter(rescale(a_mod, ib, 0));
    let remainder = a_mod.wrapping_sub(a);
    const SHIFTER: [(i32, i32); 7] = [
        (-2, 1_672_461_947),
        (-1, 1_302_514_674),
        (0, 790_015_084),
        (1, 290_630_308),
        (2, 39_332_535),
        (3, 720_401),
        (4, 242),
    ];
    for (e, m) in SHIFTER {
        if ib > e {
            let bit = fb + e;
            if i32::from(remainder) & (1i32 << bit) != 0 {
                result = mul(result, k(m));
            }
        }
    }
    if ib > 5 {
        let clamp = k(-(1i32 << (36 - ib)));
        if a < clamp {
            result = 0;
        }
    }
    if a == 0 {
        result = i16::MAX;
    }
    result
}

/// Three Newton-Raphson steps of gemmlowp's reciprocal, `x ~= 1 / half_denominator` in Q2.
fn newton(half_denominator: i16) -> i16 {
    let c48 = k(1_515_870_810);
    let c32 = k(-1_010_580_540);
    let one_q2: i16 = 1 << 13;
    let mut x = c48.wrapping_add(mul(half_denominator, c32));
    for _ in 0..3 {
        let hdx = mul(half_denominator, x);
        let one_minus = one_q2.wrapping_sub(hdx);
        x = x.wrapping_add(rescale(mul(x, one_minus), 4, 2));
    }
    x
}

fn rounding_half_sum(a: i16, b: i16) -> i16 {
    let sum = i32::from(a) + i32::from(b);
    let sign = if sum >= 0 { 1 } else { -1 };
    ((sum + sign) / 2) as i16
}

/// `logistic(a)` in Q0 for `a` with `integer_bits` integer bits.
pub fn logistic(a: i16, integer_bits: i32) -> i16 {
    if a == 0 {
        return k(1 << 30);
    }
    let abs = if a > 0 { a } else { a.wrapping_neg() };
    let e = exp_on_negative_values(abs.wrapping_neg(), integer_bits);
    let x = newton(rounding_half_sum(e, i16::MAX));
    // ExactMulByPot<-1>: the same raw read in Q1; then Rescale<0>.
    let pos = rescale(x, 1, 0);
    if a > 0 {
        pos
    } else {
        i16::MAX.wrapping_sub(pos)
    }
}

/// `tanh(a)` in Q0 for `a` with `integer_bits` integer bits.
pub fn tanh(a: i16, integer_bits: i32) -> i16 {
    if a == 0 {
        return 0;
    }
    let n = if a < 0 { a } else { a.wrapping_neg() };
    let e = exp_on_negative_values(n, integer_bits + 1);
    let x = newton(rounding_half_sum(e, i16::MAX));
    let t = rescale(x.wrapping_sub(1 << 13), 2, 0);
    if a < 0 {
        t.wrapping_neg()
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_track_their_real_values() {
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
    }
}
