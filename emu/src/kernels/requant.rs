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
        self.rows(sums, dst, sums.len().min(dst.len()));
    }

    /// [`Requant::row`] for each row of `width` channels of `sums` into the same row of
    /// `dst` (row-major, pitch `width`; a last partial row as far as both go): one call for
    /// a block of pixels, so the checks and constants are set up once.
    pub fn rows<T: QuantElem>(&self, sums: &[i32], dst: &mut [T], width: usize) {
        self.rows_at(isa(), sums, dst, width);
    }

    /// [`Requant::rows`] at the instruction-set level `level` (capped at what the CPU
    /// has), so that each twin can be tested on the widest machine.
    fn rows_at<T: QuantElem>(&self, level: Isa, sums: &[i32], dst: &mut [T], width: usize) {
        if width == 0 {
            return;
        }
        let level = level.min(super::isa::detected());
        #[cfg(target_arch = "x86_64")]
        if level >= Isa::Avx2 && self.shift.iter().all(|s| (-31..=31).contains(s)) {
            if level >= Isa::Avx512 {
                // SAFETY: the level is capped at the CPU's, so it has AVX-512 F and BW.
                unsafe { x86::rows_avx512(self, sums, dst, width) };
            } else {
                // SAFETY: the level is capped at the CPU's, so it has AVX2.
                unsafe { x86::rows_avx2(self, sums, dst, width) };
            }
            return;
        }
        for (s, d) in sums.chunks(width).zip(dst.chunks_mut(width)) {
            self.row_plain(s, d, 0);
        }
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

    /// [`high_half`] on 512-bit vectors.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn high_half_512(ab: __m512i) -> __m512i {
        let neg = _mm512_cmplt_epi64_mask(ab, _mm512_setzero_si512());
        let nudge = _mm512_mask_blend_epi64(
            neg,
            _mm512_set1_epi64(1 << 30),
            _mm512_set1_epi64(1 - (1 << 30)),
        );
        let v = _mm512_add_epi64(ab, nudge);
        let v = _mm512_mask_add_epi64(v, neg, v, _mm512_set1_epi64((1 << 31) - 1));
        _mm512_srli_epi64(v, 31)
    }

    /// Sixteen lanes of `s[at..]`, zero past its end (a masked load touches no lane the
    /// mask leaves out).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_16(s: &[i32], at: usize, mask: __mmask16) -> __m512i {
        let rest = s.get(at..).unwrap_or(&[]);
        let mask = if rest.len() >= 16 {
            mask
        } else {
            mask & ((1u32 << rest.len()) - 1) as u16
        };
        // SAFETY: only the lanes of `mask` are read, and each lies inside `rest`.
        unsafe { _mm512_maskz_loadu_epi32(mask, rest.as_ptr().cast()) }
    }

    /// [`row_avx2`] sixteen channels a step (the last step masked), over each row of
    /// `width` channels.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn rows_avx512<T: QuantElem>(
        q: &Requant,
        sums: &[i32],
        dst: &mut [T],
        width: usize,
    ) {
        for (s, d) in sums.chunks(width).zip(dst.chunks_mut(width)) {
            row_avx512(q, s, d);
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn row_avx512<T: QuantElem>(q: &Requant, sums: &[i32], dst: &mut [T]) {
        let n = sums
            .len()
            .min(dst.len())
            .min(q.bias.len())
            .min(q.mult.len())
            .min(q.shift.len());
        let zero = _mm512_setzero_si512();
        let one = _mm512_set1_epi32(1);
        let (zp, lo, hi) = (
            _mm512_set1_epi32(q.zp),
            _mm512_set1_epi32(q.lo),
            _mm512_set1_epi32(q.hi),
        );
        let min = _mm512_set1_epi32(i32::MIN);
        let mut c = 0;
        while c < n {
            let mask: __mmask16 = if n - c >= 16 {
                0xFFFF
            } else {
                ((1u32 << (n - c)) - 1) as u16
            };
            let x = _mm512_add_epi32(load_16(sums, c, mask), load_16(&q.bias, c, mask));
            let m = load_16(&q.mult, c, mask);
            let shift = load_16(&q.shift, c, mask);
            let left = _mm512_max_epi32(shift, zero);
            let right = _mm512_max_epi32(_mm512_sub_epi32(zero, shift), zero);
            let x = _mm512_sllv_epi32(x, left);
            let even = high_half_512(_mm512_mul_epi32(x, m));
            let odd = high_half_512(_mm512_mul_epi32(
                _mm512_srli_epi64(x, 32),
                _mm512_srli_epi64(m, 32),
            ));
            let r = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
            let both_min = _mm512_cmpeq_epi32_mask(x, min) & _mm512_cmpeq_epi32_mask(m, min);
            let r = _mm512_mask_blend_epi32(both_min, r, _mm512_set1_epi32(i32::MAX));
            let pot = _mm512_sub_epi32(_mm512_sllv_epi32(one, right), one);
            let rem = _mm512_and_si512(r, pot);
            let thr = _mm512_add_epi32(
                _mm512_srli_epi32(pot, 1),
                _mm512_and_si512(_mm512_srai_epi32(r, 31), one),
            );
            let up = _mm512_cmpgt_epi32_mask(rem, thr);
            let v = _mm512_srav_epi32(r, right);
            let v = _mm512_mask_add_epi32(v, up, v, one);
            let v = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(v, zp), lo), hi);
            let lanes = &mut dst[c..(c + 16).min(n)];
            if std::mem::size_of::<T>() == 1 {
                // Saturating narrowing: the clamp of `saturate_from_i32` for i8 and u8.
                let v8 = if T::MIN < 0 {
                    _mm512_cvtsepi32_epi8(v)
                } else {
                    _mm512_cvtusepi32_epi8(_mm512_max_epi32(v, zero))
                };
                let mut out = [0u8; 16];
                // SAFETY: `out` is sixteen bytes, one unaligned 128-bit store.
                unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), v8) };
                // SAFETY: T is a one-byte QuantElem (u8 or i8), so `lanes` is
                // `lanes.len()` bytes, and `out` holds at least that many.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        out.as_ptr(),
                        lanes.as_mut_ptr().cast::<u8>(),
                        lanes.len(),
                    )
                };
            } else {
                let mut out = [0i32; 16];
                // SAFETY: `out` is sixteen i32, one unaligned 512-bit store.
                unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), v) };
                for (d, &v) in lanes.iter_mut().zip(&out) {
                    *d = T::saturate_from_i32(v);
                }
            }
            c += 16;
        }
    }

    /// [`row_avx2`] over each row of `width` channels.
    #[target_feature(enable = "avx2")]
    pub(super) fn rows_avx2<T: QuantElem>(q: &Requant, sums: &[i32], dst: &mut [T], width: usize) {
        for (s, d) in sums.chunks(width).zip(dst.chunks_mut(width)) {
            row_avx2(q, s, d);
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn row_avx2<T: QuantElem>(q: &Requant, sums: &[i32], dst: &mut [T]) {
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
            prop_assert_eq!(got, want.clone());
            // Each twin this CPU can run, forced (AVX2 on an AVX-512 machine, say).
            for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                let mut got = vec![0i16; sums.len()];
                q.rows_at(level, &sums, &mut got, sums.len().max(1));
                prop_assert_eq!(&got, &want, "{:?}", level);
                let mut got8 = vec![0i8; sums.len()];
                q.rows_at(level, &sums, &mut got8, sums.len().max(1));
                let mut want8 = vec![0i8; sums.len()];
                q.row_plain(&sums, &mut want8, 0);
                prop_assert_eq!(&got8, &want8, "{:?}", level);
                let mut gotu = vec![0u8; sums.len()];
                q.rows_at(level, &sums, &mut gotu, sums.len().max(1));
                let mut wantu = vec![0u8; sums.len()];
                q.row_plain(&sums, &mut wantu, 0);
                prop_assert_eq!(&gotu, &wantu, "{:?}", level);
            }
            // Rows of a block (the last one partial) as one call.
            let width = sums.len() / 3 + 1;
            let block: Vec<i32> = sums.iter().cycle().take(sums.len() * 2 + 1).copied().collect();
            let mut got = vec![0i8; block.len()];
            q.rows(&block, &mut got, width);
            let mut want = vec![0i8; block.len()];
            for (s, d) in block.chunks(width).zip(want.chunks_mut(width)) {
                q.row_plain(s, d, 0);
            }
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
