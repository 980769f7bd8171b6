//! Quantised ADD, SUB and MUL of same-shaped int8/uint8 operands, vectorised with the
//! rescaling fused into the store: eight elements per AVX2 step, sixteen per AVX-512 step,
//! each lane through the NNAPI reference's integer steps (the output stage's lane
//! primitives, `requant::x86`), so every level gives [`super::binary`]'s integers.
//!
//! ADD/SUB: `t_i = RoundingDivideByPOT(SRDHM((off_i + v_i) << 20, m_i), r_i)`, then
//! `RoundingDivideByPOT(SRDHM(t_1 + t_2, m), r) + zp`, clamped. MUL:
//! `MultiplyByQuantizedMultiplier((off_1 + v_1) * (off_2 + v_2), m, shift) + zp`, clamped.
//! With both offsets within `[-255, 255]` (a valid zero point's) every intermediate stays
//! far inside `i32`: `|off + v| <= 510`, so the shifted operand is below `2^29`, each term
//! below `2^29` (no saturating add can trigger) and a product below `2^18`; the high
//! multiply's one saturating case (`i32::MIN x i32::MIN`) needs a multiplier of
//! `i32::MIN`, which [`Consts::vector_ok`] excludes.
//!
//! ADD/SUB's input terms take 16-bit lanes where the multipliers allow
//! ([`Consts::halves`]): `off + v` fits an `i16`, so each element is one pair word
//! `(y, y)` and the 64-bit product `y * m` splits into two `vpmaddwd` of `i16` halves of
//! `m` (`m = 2^16 mh + ml`, `y * m = 2^15 y (2 mh + 1) + y (ml - 2^15)`), and
//! `floor((y m + 2^10) / 2^11) = 16 y (2 mh + 1) + floor((y (ml - 2^15) + 2^10) / 2^11)`
//! exactly; thirty-two elements (AVX-512) or sixteen (AVX2) a step, widened and narrowed
//! once. `RoundingDivideByPOT(x, r)` is `(x + 2^(r-1) - [x < 0]) >> r` for `r >= 1`.

use crate::kernels::isa::Isa;
use crate::kernels::quant::QuantElem;

/// The fixed-point constants of one quantised ADD/SUB/MUL (shifts positive to the left).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Consts {
    /// MUL (else ADD/SUB, SUB's second multiplier negated).
    pub mul: bool,
    /// Offsets added to the stored values (minus the zero points).
    pub off: [i32; 2],
    /// ADD/SUB: each input's multiplier and shift.
    pub input: [(i32, i32); 2],
    /// The output multiplier and shift.
    pub out: (i32, i32),
    /// Output zero point.
    pub zp: i32,
    /// Clamp (zero point included).
    pub lo: i32,
    /// Clamp (zero point included).
    pub hi: i32,
}

impl Consts {
    /// Whether the vector lanes give the reference's integers for these constants (see
    /// the module comment): offsets within `[-255, 255]`, no multiplier `i32::MIN`, ADD's
    /// shifts within `[-31, 0]` and MUL's within `[-31, 31]`.
    fn vector_ok(&self) -> bool {
        let right = |s: i32| (-31..=0).contains(&s);
        let offsets = self.off.iter().all(|o| (-255..=255).contains(o));
        let mults = [self.input[0].0, self.input[1].0, self.out.0]
            .iter()
            .all(|&m| m != i32::MIN);
        let shifts = if self.mul {
            (-31..=31).contains(&self.out.1)
        } else {
            right(self.input[0].1) && right(self.input[1].1) && right(self.out.1)
        };
        offsets && mults && shifts
    }

    /// ADD/SUB's input multipliers as the 16-bit lanes' pair words, each
    /// `(pair(mh, mh + 1), pair(ml - 2^15, 0))` for `m = 2^16 mh + ml` (see the module
    /// comment); `None` for MUL, or where an `mh + 1` would not fit an `i16` (`m` within
    /// `2^16` of `2^31`).
    fn halves(&self) -> Option<[(i32, i32); 2]> {
        let words = |m: i32| {
            let (mh, ml) = (m >> 16, (m & 0xffff) - (1 << 15));
            (mh < i32::from(i16::MAX)).then(|| {
                (
                    crate::kernels::igemm::pair(mh, mh + 1),
                    crate::kernels::igemm::pair(ml, 0),
                )
            })
        };
        if self.mul {
            return None;
        }
        Some([words(self.input[0].0)?, words(self.input[1].0)?])
    }
}

/// Computes the first elements of `o` from `x` and `y` (one-byte types, same length) at
/// `level` (capped at the CPU's); returns how many it wrote (a multiple of the step,
/// [`width`]; 0 where the level has no vector path or the constants do not qualify), the
/// rest being the caller's.
pub(crate) fn same_shape<T: QuantElem>(
    level: Isa,
    c: &Consts,
    x: &[T],
    y: &[T],
    o: &mut [T],
) -> usize {
    let level = level.min(crate::kernels::isa::detected());
    // The clamp inside the type's range: the AVX-512 store narrows by truncation.
    let in_range = T::MIN <= c.lo && c.hi <= T::MAX;
    if std::mem::size_of::<T>() != 1 || level < Isa::Avx2 || !c.vector_ok() || !in_range {
        return 0;
    }
    let n = x.len().min(y.len()).min(o.len());
    #[cfg(target_arch = "x86_64")]
    {
        let (x, y, o) = (&x[..n], &y[..n], &mut o[..n]);
        // SAFETY: (each call) the level is capped at the CPU's, so it has AVX-512 F and BW
        // at Isa::Avx512 and above, AVX2 at Isa::Avx2 and above.
        unsafe {
            if let Some(h) = c.halves() {
                return if level >= Isa::Avx512 {
                    x86::add16_avx512::<T>(c, &h, x, y, o)
                } else {
                    x86::add16_avx2::<T>(c, &h, x, y, o)
                };
            }
            match (level >= Isa::Avx512, c.mul) {
                (true, false) => x86::run_avx512::<T, false>(c, x, y, o),
                (true, true) => x86::run_avx512::<T, true>(c, x, y, o),
                (false, false) => x86::run_avx2::<T, false>(c, x, y, o),
                (false, true) => x86::run_avx2::<T, true>(c, x, y, o),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = n;
        0
    }
}

/// Elements a step of [`same_shape`] takes at `level` (capped at the CPU's) for these
/// constants: 0 where it takes none.
#[cfg(test)]
fn width(level: Isa, c: &Consts) -> usize {
    let level = level.min(crate::kernels::isa::detected());
    match (level, c.vector_ok(), c.halves().is_some()) {
        (Isa::Scalar, _, _) | (_, false, _) => 0,
        (Isa::Avx2, _, true) => 16,
        (Isa::Avx2, _, false) => 8,
        (_, _, true) => 32,
        (_, _, false) => 16,
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Consts;
    use crate::kernels::quant::QuantElem;
    use crate::kernels::requant::x86::{
        rdbpot_avx2, rdbpot_avx512, srdhm_avx2, srdhm_avx512, store8_avx2,
    };
    use std::arch::x86_64::*;

    /// Eight one-byte elements widened to `i32` lanes (sign-extended for a signed type).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn load8<T: QuantElem>(v: &[T; 8]) -> __m128i {
        // SAFETY: T is one byte (checked by `same_shape`), so `v` is eight bytes: one
        // unaligned 64-bit load.
        unsafe { _mm_loadl_epi64(v.as_ptr().cast()) }
    }

    /// `srdhm_avx2(y << 20, m)` for `|y| <= 510` and `m` the same in every lane:
    /// `floor((y * m * 2^20 + 2^30) / 2^31)` is `floor((y * m + 2^10) / 2^11)` (the shift
    /// divides out of the 64-bit product), so the operand's shift and one of the odd
    /// lanes' shifts go.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn shifted_srdhm_avx2(y: __m256i, m: __m256i) -> __m256i {
        let half = _mm256_set1_epi64x(1 << 10);
        // A logical shift: its low 32 bits are the arithmetic shift's, and the quotient
        // fits 32 bits.
        let even = _mm256_srli_epi64(_mm256_add_epi64(_mm256_mul_epi32(y, m), half), 11);
        // Odd lanes: bits 11..42 of the sum moved to the qword's high half.
        let odd = _mm256_slli_epi64(
            _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(y, 32), m), half),
            21,
        );
        _mm256_blend_epi32::<0b1010_1010>(even, odd)
    }

    /// [`shifted_srdhm_avx2`] on 512-bit vectors.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn shifted_srdhm_avx512(y: __m512i, m: __m512i) -> __m512i {
        let half = _mm512_set1_epi64(1 << 10);
        let even = _mm512_srli_epi64(_mm512_add_epi64(_mm512_mul_epi32(y, m), half), 11);
        let odd = _mm512_slli_epi64(
            _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(y, 32), m), half),
            21,
        );
        _mm512_mask_blend_epi32(0xAAAA, even, odd)
    }

    /// The shift constants of a multiplier's shift: (left, right, right's mask).
    fn split(shift: i32) -> (i32, i32, i32) {
        let right = (-shift).clamp(0, 31);
        (shift.max(0), right, ((1i64 << right) - 1) as i32)
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn run_avx2<T: QuantElem, const MUL: bool>(
        c: &Consts,
        x: &[T],
        y: &[T],
        o: &mut [T],
    ) -> usize {
        let set = _mm256_set1_epi32;
        let widen = |b: __m128i| {
            if T::MIN < 0 {
                _mm256_cvtepi8_epi32(b)
            } else {
                _mm256_cvtepu8_epi32(b)
            }
        };
        let (off1, off2) = (set(c.off[0]), set(c.off[1]));
        let stage = |s: (i32, i32)| {
            let (l, r, m) = split(s.1);
            (set(s.0), set(l), set(r), set(m))
        };
        let (m1, _, r1, k1) = stage(c.input[0]);
        let (m2, _, r2, k2) = stage(c.input[1]);
        let (mo, lo_shift, ro, ko) = stage(c.out);
        let (zp, lo, hi) = (set(c.zp), set(c.lo), set(c.hi));
        let mut done = 0;
        for ((a, b), d) in x
            .chunks_exact(8)
            .zip(y.chunks_exact(8))
            .zip(o.chunks_exact_mut(8))
        {
            let (Ok(a), Ok(b)) = (<&[T; 8]>::try_from(a), <&[T; 8]>::try_from(b)) else {
                break;
            };
            let a = _mm256_add_epi32(widen(load8(a)), off1);
            let b = _mm256_add_epi32(widen(load8(b)), off2);
            let acc = if MUL {
                _mm256_sllv_epi32(_mm256_mullo_epi32(a, b), lo_shift)
            } else {
                let t1 = rdbpot_avx2(shifted_srdhm_avx2(a, m1), r1, k1);
                let t2 = rdbpot_avx2(shifted_srdhm_avx2(b, m2), r2, k2);
                _mm256_add_epi32(t1, t2)
            };
            let v = rdbpot_avx2(srdhm_avx2(acc, mo), ro, ko);
            let v = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(v, zp), lo), hi);
            store8_avx2(v, d);
            done += 8;
        }
        done
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn run_avx512<T: QuantElem, const MUL: bool>(
        c: &Consts,
        x: &[T],
        y: &[T],
        o: &mut [T],
    ) -> usize {
        let set = _mm512_set1_epi32;
        let load = |v: &[T; 16]| {
            // SAFETY: T is one byte (checked by `same_shape`), so `v` is sixteen bytes:
            // one unaligned 128-bit load.
            let b = unsafe { _mm_loadu_si128(v.as_ptr().cast()) };
            if T::MIN < 0 {
                _mm512_cvtepi8_epi32(b)
            } else {
                _mm512_cvtepu8_epi32(b)
            }
        };
        let (off1, off2) = (set(c.off[0]), set(c.off[1]));
        let stage = |s: (i32, i32)| {
            let (l, r, m) = split(s.1);
            (set(s.0), set(l), set(r), set(m))
        };
        let (m1, _, r1, k1) = stage(c.input[0]);
        let (m2, _, r2, k2) = stage(c.input[1]);
        let (mo, lo_shift, ro, ko) = stage(c.out);
        let (zp, lo, hi) = (set(c.zp), set(c.lo), set(c.hi));
        let mut done = 0;
        for ((a, b), d) in x
            .chunks_exact(16)
            .zip(y.chunks_exact(16))
            .zip(o.chunks_exact_mut(16))
        {
            let (Ok(a), Ok(b)) = (<&[T; 16]>::try_from(a), <&[T; 16]>::try_from(b)) else {
                break;
            };
            let a = _mm512_add_epi32(load(a), off1);
            let b = _mm512_add_epi32(load(b), off2);
            let acc = if MUL {
                _mm512_sllv_epi32(_mm512_mullo_epi32(a, b), lo_shift)
            } else {
                let t1 = rdbpot_avx512(shifted_srdhm_avx512(a, m1), r1, k1);
                let t2 = rdbpot_avx512(shifted_srdhm_avx512(b, m2), r2, k2);
                _mm512_add_epi32(t1, t2)
            };
            let v = rdbpot_avx512(srdhm_avx512(acc, mo), ro, ko);
            let v = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(v, zp), lo), hi);
            // The clamp is inside the type's range (checked by `same_shape`), so the
            // narrowing only drops the high bytes: one plain store (a masked one is slower).
            // SAFETY: `d` is sixteen one-byte elements (T is one byte, checked by
            // `same_shape`), one unaligned 128-bit store.
            unsafe { _mm_storeu_si128(d.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(v)) };
            done += 16;
        }
        done
    }

    /// One body for ADD/SUB's 16-bit lanes at both widths (see the module comment):
    /// `$step` elements widened to `i16` and offset, each half of them spread to pair
    /// words `(y, y)` by unpacking with itself, the two halves' results packed back in
    /// order (the unpacks and the pack work within the same 128-bit lanes).
    macro_rules! add16 {
        ($name:ident, $feature:literal, $step:literal, $vec:ty, $half:ty, $load:ident,
         $widen_s:ident, $widen_u:ident, $set1_16:ident, $set1:ident, $add16:ident,
         $lo:ident, $hi:ident, $madd:ident, $add:ident, $slli:ident, $srai:ident,
         $and:ident, $sra:ident, $srdhm:ident, $min:ident, $max:ident, $packs:ident,
         $narrow:ident, $store:ident) => {
            /// See [`add16`].
            #[target_feature(enable = $feature)]
            pub(super) fn $name<T: QuantElem>(
                c: &Consts,
                halves: &[(i32, i32); 2],
                x: &[T],
                y: &[T],
                o: &mut [T],
            ) -> usize {
                let set = $set1;
                // RoundingDivideByPOT by `-shift` (in `0..=31`): the rounding constant, the
                // negative values' correction (none for a zero shift) and the count.
                let divide = |shift: i32| {
                    let r = (-shift).clamp(0, 31);
                    (
                        set(if r > 0 { 1 << (r - 1) } else { 0 }),
                        set(-i32::from(r > 0)),
                        _mm_cvtsi32_si128(r),
                    )
                };
                let rdbpot = |q: $vec, (k, e, r): ($vec, $vec, __m128i)| {
                    $sra($add($add(q, k), $and($srai::<31>(q), e)), r)
                };
                let (off1, off2) = ($set1_16(c.off[0] as i16), $set1_16(c.off[1] as i16));
                let (h1, l1) = (set(halves[0].0), set(halves[0].1));
                let (h2, l2) = (set(halves[1].0), set(halves[1].1));
                let (d1, d2, dout) = (divide(c.input[0].1), divide(c.input[1].1), divide(c.out.1));
                let (mo, round) = (set(c.out.0), set(1 << 10));
                let (zp, lo, hi) = (set(c.zp), set(c.lo), set(c.hi));
                let term = |yy: $vec, h: $vec, l: $vec, d| {
                    let q = $add(
                        $slli::<4>($madd(yy, h)),
                        $srai::<11>($add($madd(yy, l), round)),
                    );
                    rdbpot(q, d)
                };
                let out = |a: $vec, b: $vec| {
                    let acc = $add(term(a, h1, l1, d1), term(b, h2, l2, d2));
                    let v = rdbpot($srdhm(acc, mo), dout);
                    $min($max($add(v, zp), lo), hi)
                };
                let mut done = 0;
                for ((a, b), d) in x
                    .chunks_exact($step)
                    .zip(y.chunks_exact($step))
                    .zip(o.chunks_exact_mut($step))
                {
                    let (a, b) = (a.as_ptr().cast::<$half>(), b.as_ptr().cast::<$half>());
                    // SAFETY: T is one byte (checked by `same_shape`), so each chunk is
                    // `$step` bytes: one unaligned load each.
                    let (a, b): ($half, $half) = unsafe { ($load(a), $load(b)) };
                    let (a, b) = if T::MIN < 0 {
                        ($widen_s(a), $widen_s(b))
                    } else {
                        ($widen_u(a), $widen_u(b))
                    };
                    let (a, b) = ($add16(a, off1), $add16(b, off2));
                    let first = out($lo(a, a), $lo(b, b));
                    let second = out($hi(a, a), $hi(b, b));
                    // The clamp is inside the type's range (checked by `same_shape`).
                    let v: $half = $narrow::<T>($packs(first, second));
                    // SAFETY: `d` is `$step` one-byte elements, one unaligned store.
                    unsafe { $store(d.as_mut_ptr().cast(), v) };
                    done += $step;
                }
                done
            }
        };
    }

    /// Sixteen `i16` lanes (in order) narrowed to bytes, saturating (values in T's range).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn narrow16<T: QuantElem>(w: __m256i) -> __m128i {
        let (lo, hi) = (_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
        if T::MIN < 0 {
            _mm_packs_epi16(lo, hi)
        } else {
            _mm_packus_epi16(lo, hi)
        }
    }

    /// Thirty-two `i16` lanes narrowed to bytes by truncation (values in T's range).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn narrow32<T: QuantElem>(w: __m512i) -> __m256i {
        _mm512_cvtepi16_epi8(w)
    }

    add16!(
        add16_avx2,
        "avx2",
        16,
        __m256i,
        __m128i,
        _mm_loadu_si128,
        _mm256_cvtepi8_epi16,
        _mm256_cvtepu8_epi16,
        _mm256_set1_epi16,
        _mm256_set1_epi32,
        _mm256_add_epi16,
        _mm256_unpacklo_epi16,
        _mm256_unpackhi_epi16,
        _mm256_madd_epi16,
        _mm256_add_epi32,
        _mm256_slli_epi32,
        _mm256_srai_epi32,
        _mm256_and_si256,
        _mm256_sra_epi32,
        srdhm_avx2,
        _mm256_min_epi32,
        _mm256_max_epi32,
        _mm256_packs_epi32,
        narrow16,
        _mm_storeu_si128
    );
    add16!(
        add16_avx512,
        "avx512f,avx512bw",
        32,
        __m512i,
        __m256i,
        _mm256_loadu_si256,
        _mm512_cvtepi8_epi16,
        _mm512_cvtepu8_epi16,
        _mm512_set1_epi16,
        _mm512_set1_epi32,
        _mm512_add_epi16,
        _mm512_unpacklo_epi16,
        _mm512_unpackhi_epi16,
        _mm512_madd_epi16,
        _mm512_add_epi32,
        _mm512_slli_epi32,
        _mm512_srai_epi32,
        _mm512_and_si512,
        _mm512_sra_epi32,
        srdhm_avx512,
        _mm512_min_epi32,
        _mm512_max_epi32,
        _mm512_packs_epi32,
        narrow32,
        _mm256_storeu_si256
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::quant::{
        multiply_by_quantized_multiplier, multiply_by_quantized_multiplier_smaller_than_one_exp,
    };
    use proptest::prelude::*;

    /// The lanes take every whole step where the CPU has the level (so the bit-identity
    /// proptests exercise them), and nothing for constants outside their range.
    #[test]
    fn quant_binary_lanes_take_whole_vectors() {
        let mut c = Consts {
            mul: false,
            off: [3, -5],
            input: [(1 << 30, -1), (1 << 30, -2)],
            out: (1 << 30, -3),
            zp: 1,
            lo: -128,
            hi: 127,
        };
        let (x, y) = ([7i8; 77], [-9i8; 77]);
        let cpu = crate::kernels::isa::detected();
        // ADD's 16-bit lanes, the 32-bit ones (a multiplier too close to 2^31), MUL's.
        for (big, mul, steps) in [
            (false, false, [0, 16, 32]),
            (true, false, [0, 8, 16]),
            (false, true, [0, 8, 16]),
        ] {
            c.input[0].0 = if big { i32::MAX } else { 1 << 30 };
            c.mul = mul;
            for (level, step) in [Isa::Scalar, Isa::Avx2, Isa::Avx512].into_iter().zip(steps) {
                if level > cpu {
                    continue;
                }
                assert_eq!(width(level, &c), step, "{level:?}");
                let mut o = [0i8; 77];
                let want = 77 / step.max(1) * step;
                assert_eq!(same_shape(level, &c, &x, &y, &mut o), want, "{level:?}");
            }
        }
        c.off[0] = 300;
        let mut o = [0i8; 37];
        assert_eq!(
            same_shape(Isa::Avx512Vnni, &c, &x[..37], &y[..37], &mut o),
            0
        );
    }

    /// The reference's integers for one element (`binary::quant_elem`'s steps).
    fn reference(c: &Consts, a: i32, b: i32) -> i32 {
        let (v1, v2) = (c.off[0] + a, c.off[1] + b);
        let v = if c.mul {
            multiply_by_quantized_multiplier(v1 * v2, c.out.0, c.out.1)
        } else {
            let t = |v: i32, (m, s): (i32, i32)| {
                multiply_by_quantized_multiplier_smaller_than_one_exp(v << 20, m, s)
            };
            multiply_by_quantized_multiplier_smaller_than_one_exp(
                t(v1, c.input[0]).saturating_add(t(v2, c.input[1])),
                c.out.0,
                c.out.1,
            )
        };
        (c.zp + v).clamp(c.lo, c.hi)
    }

    fn check<T: QuantElem + PartialEq + std::fmt::Debug>(
        c: &Consts,
        x: &[T],
        y: &[T],
    ) -> Result<(), TestCaseError> {
        let want: Vec<T> = x
            .iter()
            .zip(y)
            .map(|(a, b)| T::saturate_from_i32(reference(c, a.to_i32(), b.to_i32())))
            .collect();
        for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
            let mut got = want.clone();
            let done = same_shape(level, c, x, y, &mut got);
            prop_assert_eq!(done, x.len() / width(level, c).max(1) * width(level, c));
            for t in &mut got[done..] {
                *t = T::saturate_from_i32(0);
            }
            prop_assert_eq!(&got[..done], &want[..done], "{:?} {:?}", level, c);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(256))]
        /// Every level gives the reference's integers over the whole range of the
        /// constants the lanes take: multipliers of either sign up to `i32::MAX` (on both
        /// sides of the 16-bit lanes' limit), every right shift, offsets and zero points,
        /// int8 and uint8, ADD/SUB and MUL.
        #[test]
        fn quant_binary_lanes_bit_identical_over_constants(
            mul in any::<bool>(),
            off in [-255i32..=255, -255i32..=255],
            m in [prop_oneof![any::<i32>(), (i32::MAX - 70000)..=i32::MAX, (1i32 << 30)..=i32::MAX], prop_oneof![any::<i32>(), (i32::MAX - 70000)..=i32::MAX, (1i32 << 30)..=i32::MAX]],
            shifts in [-31i32..=0, -31i32..=0],
            out in (prop_oneof![any::<i32>(), (1i32 << 30)..=i32::MAX], -31i32..=0),
            mul_shift in -12i32..=0,
            zp in -255i32..=255,
            data in proptest::collection::vec((any::<u8>(), any::<u8>()), 0..140),
        ) {
            prop_assume!(m[0] != i32::MIN && m[1] != i32::MIN && out.0 != i32::MIN);
            let c = Consts {
                mul,
                off,
                input: [(m[0], shifts[0]), (m[1], shifts[1])],
                out: (out.0, if mul { mul_shift } else { out.1 }),
                zp,
                lo: -128,
                hi: 127,
            };
            let (x, y): (Vec<u8>, Vec<u8>) = data.into_iter().unzip();
            let (sx, sy): (Vec<i8>, Vec<i8>) =
                (x.iter().map(|&v| v as i8).collect(), y.iter().map(|&v| v as i8).collect());
            check::<i8>(&c, &sx, &sy)?;
            check::<u8>(&Consts { lo: 0, hi: 255, ..c }, &x, &y)?;
        }
    }
}
