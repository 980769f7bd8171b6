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
}

/// Computes the first elements of `o` from `x` and `y` (one-byte types, same length) at
/// `level` (capped at the CPU's); returns how many it wrote (a multiple of the vector
/// width; 0 where the level has no vector path or the constants do not qualify), the
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lanes take every whole vector where the CPU has the level (so the bit-identity
    /// proptest in `binary` exercises them), and nothing for constants outside their range.
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
        let (x, y) = ([7i8; 37], [-9i8; 37]);
        let cpu = crate::kernels::isa::detected();
        for (level, width) in [(Isa::Scalar, 0), (Isa::Avx2, 8), (Isa::Avx512, 16)] {
            if level > cpu {
                continue;
            }
            let mut o = [0i8; 37];
            let want = 37 / width.max(1) * width;
            assert_eq!(same_shape(level, &c, &x, &y, &mut o), want, "{level:?}");
        }
        c.off[0] = 300;
        let mut o = [0i8; 37];
        assert_eq!(same_shape(Isa::Avx512Vnni, &c, &x, &y, &mut o), 0);
    }
}
