//! The output stage of the quantised convolution family, vectorised: for one pixel's
//! per-channel `i32` sums, `clamp(multiply_by_quantized_multiplier(acc + bias, m, shift)
//! + zp, lo, hi)` with NNAPI's rounding, eight channels at a time on AVX2 (the 64-bit
//! products of `vpmuldq`, the rounding of gemmlowp's `SaturatingRoundingDoublingHighMul` and
//! `RoundingDivideByPOT` lane by lane), the same integers as
//! [`multiply_by_quantized_multiplier`] for every input.

use super::isa::{isa, Isa};
use super::quant::{multiply_by_quantized_multiplier, QuantElem};

/// The per-channel constants, one entry per output channel (structure of arrays, so that a
/// vector of channels loads each constant in one go).
#[derive(Debug, Clone, Default)]
pub struct Requant {
    /// Bias added to the sum.
    pub bias: Vec<i32>,
    /// Q31 multiplier.
    pub mult: Vec<i32>,
    /// Shift, positive to the left.
    pub shift: Vec<i32>,
    /// Output zero point.
    pub zp: i32,
    /// Lower clamp.
    pub lo: i32,
    /// Upper clamp.
    pub hi: i32,
}

impl Requant {
    /// One output, as the reference computes it.
    #[inline(always)]
    fn one<T: QuantElem>(&self, acc: i32, c: usize) -> T {
        let at = |v: &[i32]| v.get(c).copied().unwrap_or(0);
        let v = multiply_by_quantized_multiplier(
            acc.wrapping_add(at(&self.bias)),
            at(&self.mult),
            at(&self.shift),
        )
        .wrapping_add(self.zp);
        T::saturate_from_i32(v.max(self.lo).min(self.hi))
    }

    /// `dst[c] = requantise(sums[c])` for channel `c` (up to the shortest length).
    pub fn row<T: QuantElem>(&self, sums: &[i32], dst: &mut [T]) {
        #[cfg(target_arch = "x86_64")]
        if isa() >= Isa::Avx2 && self.shift.iter().all(|s| (-31..=31).contains(s)) {
            // SAFETY: isa() is at least AVX2 only where the CPU has it.
            unsafe { x86::row_avx2(self, sums, dst) };
            return;
        }
        self.row_plain(sums, dst, 0);
    }

    /// The plain loop from channel `from` on.
    fn row_plain<T: QuantElem>(&self, sums: &[i32], dst: &mut [T], from: usize) {
        for (c, (d, &acc)) in dst.iter_mut().zip(sums).enumerate().skip(from) {
            *d = self.one(acc, c);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Requant;
    use crate::kernels::quant::QuantElem;
    use std::arch::x86_64::*;

    /// Eight lanes of `v` from `s[at..at + 8]` (the caller checks the length).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn load(s: &[i32], at: usize) -> __m256i {
        match <&[i32; 8]>::try_from(&s[at..at + 8]) {
            // SAFETY: eight i32, one unaligned 256-bit load.
            Ok(a) => unsafe { _mm256_loadu_si256(a.as_ptr().cast()) },
            Err(_) => _mm256_setzero_si256(),
        }
    }

    /// The 64-bit products `ab` of one parity, divided by 2^31 with gemmlowp's nudge and
    /// truncation toward zero; the quotient in each qword's low half.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn high_half(ab: __m256i) -> __m256i {
        let neg = _mm256_cmpgt_epi64(_mm256_setzero_si256(), ab);
        let nudge = _mm256_blendv_epi8(
            _mm256_set1_epi64x(1 << 30),
            _mm256_set1_epi64x(1 - (1 << 30)),
            neg,
        );
        let v = _mm256_add_epi64(ab, nudge);
        // Truncation toward zero: add 2^31 - 1 to negative values before a floor shift.
        let v = _mm256_add_epi64(v, _mm256_and_si256(neg, _mm256_set1_epi64x((1 << 31) - 1)));
        // A logical shift: its low 32 bits are the arithmetic shift's, and the quotient
        // fits 32 bits.
        _mm256_srli_epi64(v, 31)
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn row_avx2<T: QuantElem>(q: &Requant, sums: &[i32], dst: &mut [T]) {
        let n = sums
            .len()
            .min(dst.len())
            .min(q.bias.len())
            .min(q.mult.len())
            .min(q.shift.len());
        let zero = _mm256_setzero_si256();
        let one = _mm256_set1_epi32(1);
        let (zp, lo, hi) = (
            _mm256_set1_epi32(q.zp),
            _mm256_set1_epi32(q.lo),
            _mm256_set1_epi32(q.hi),
        );
        let mut c = 0;
        while c + 8 <= n {
            let x = _mm256_add_epi32(load(sums, c), load(&q.bias, c));
            let m = load(&q.mult, c);
            let shift = load(&q.shift, c);
            let left = _mm256_max_epi32(shift, zero);
            let right = _mm256_max_epi32(_mm256_sub_epi32(zero, shift), zero);
            let x = _mm256_sllv_epi32(x, left);
            // SaturatingRoundingDoublingHighMul, even and odd lanes.
            let even = high_half(_mm256_mul_epi32(x, m));
            let odd = high_half(_mm256_mul_epi32(
                _mm256_srli_epi64(x, 32),
                _mm256_srli_epi64(m, 32),
            ));
            let r = _mm256_blend_epi32::<0b1010_1010>(even, _mm256_slli_epi64(odd, 32));
            let min = _mm256_set1_epi32(i32::MIN);
            let both_min = _mm256_and_si256(_mm256_cmpeq_epi32(x, min), _mm256_cmpeq_epi32(m, min));
            let r = _mm256_blendv_epi8(r, _mm256_set1_epi32(i32::MAX), both_min);
            // RoundingDivideByPOT by `right` (0..=31).
            let mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, right), one);
            let rem = _mm256_and_si256(r, mask);
            let thr = _mm256_add_epi32(
                _mm256_srli_epi32(mask, 1),
                _mm256_and_si256(_mm256_srai_epi32(r, 31), one),
            );
            let up = _mm256_cmpgt_epi32(rem, thr);
            let v = _mm256_sub_epi32(_mm256_srav_epi32(r, right), up);
            let v = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(v, zp), lo), hi);
            let lanes = &mut dst[c..c + 8];
            if std::mem::size_of::<T>() == 1 {
                // Saturating packs: the clamp of `saturate_from_i32` for i8 and u8.
                let v16 =
                    _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
                let v8 = if T::MIN < 0 {
                    _mm_packs_epi16(v16, v16)
                } else {
                    _mm_packus_epi16(v16, v16)
                };
                // SAFETY: `lanes` is eight one-byte elements (T is u8 or i8: a one-byte
                // QuantElem), one unaligned 64-bit store.
                unsafe { _mm_storel_epi64(lanes.as_mut_ptr().cast(), v8) };
            } else {
                let mut out = [0i32; 8];
                // SAFETY: `out` is eight i32, one unaligned 256-bit store.
                unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) };
                for (d, &v) in lanes.iter_mut().zip(&out) {
                    *d = T::saturate_from_i32(v);
                }
            }
            c += 8;
        }
        q.row_plain(sums, dst, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(256))]
        /// The vector path gives the reference's integers for any sums and constants,
        /// extremes included.
        #[test]
        fn requant_row_matches_the_reference(
            consts in proptest::collection::vec(
                (any::<i32>(), prop_oneof![any::<i32>(), Just(i32::MIN), 1i32 << 30..i32::MAX],
                 -31i32..=31, prop_oneof![any::<i32>(), Just(i32::MIN), -70000i32..70000]),
                0..40),
            zp in -300i32..300,
            lo in -200i32..0,
            span in 0i32..400,
        ) {
            let q = Requant {
                bias: consts.iter().map(|c| c.0).collect(),
                mult: consts.iter().map(|c| c.1).collect(),
                shift: consts.iter().map(|c| c.2).collect(),
                zp,
                lo,
                hi: lo + span,
            };
            let sums: Vec<i32> = consts.iter().map(|c| c.3).collect();
            let mut got = vec![0i16; sums.len()];
            q.row(&sums, &mut got);
            let mut want = vec![0i16; sums.len()];
            q.row_plain(&sums, &mut want, 0);
            prop_assert_eq!(got, want);
            // One-byte outputs (stored by packs); the clamp may leave their range.
            let mut got = vec![0i8; sums.len()];
            q.row(&sums, &mut got);
            let mut want = vec![0i8; sums.len()];
            q.row_plain(&sums, &mut want, 0);
            prop_assert_eq!(got, want);
            let mut got = vec![0u8; sums.len()];
            q.row(&sums, &mut got);
            let mut want = vec![0u8; sums.len()];
            q.row_plain(&sums, &mut want, 0);
            prop_assert_eq!(got, want);
        }
    }
}
