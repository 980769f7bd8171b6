//! Quantised ADD/SUB of same-shaped one-byte operands as one affine form of the stored
//! values, found for the operation's constants and checked against the reference over
//! every pair of operand values before it is used.
//!
//! The reference rounds three times (each operand's rescaled term, then the sum's
//! rescale), but the result is within a rounding of `floor(u + 1/2)` for the real
//! `u = a_1 v_1 + a_2 v_2 + c` the constants imply. So `t = v_1 A_1 + v_2 A_2 + B` with
//! `A_i`, `B` that real form scaled by `2^k` gives the result as `t >> k`, except where the
//! fraction `t mod 2^k` lies within the approximation's error of a step: a pair whose
//! fraction falls below `window` is *flagged* and takes the reference's integers instead.
//! [`Affine::fit`] chooses `k` as large as `i32` allows, computes the form, runs it over
//! all 65,536 operand pairs against the exact path, widens the window until every pair
//! it gets wrong is flagged, and runs it once more: a form is only kept when every pair
//! it does not flag is exact (and few are flagged). So a lane costs two multiplies, two
//! adds, a shift and a mask test, and a 64-element step (32 on AVX2) is narrowed by two
//! packs and a permutation and clamped as bytes: about 0.9 vector operations an element
//! (2.9 before on AVX-512, 6 on AVX2), and the results are the reference's by
//! exhaustion, not by an error bound.

use crate::kernels::isa::Isa;
use crate::kernels::quant::QuantElem;

/// The affine form of one ADD/SUB (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Affine {
    /// The stored values' coefficients.
    a: [i32; 2],
    /// The constant: offsets, the rounding half, the zero point and the window's upper
    /// part, all scaled by `2^k`.
    b: i32,
    /// The shift.
    k: u32,
    /// A fraction `t mod 2^k` below this is flagged.
    window: i32,
    /// The clamp.
    lo: i32,
    /// The clamp.
    hi: i32,
}

/// Flagged pairs a form may leave out of the 65,536 (a form flagging more is not kept:
/// operands whose scales make many sums land on a rounding step stay on the exact lanes).
const MOST_FLAGGED: usize = 1 << 10;

/// The ADD/SUB constants a form is fitted to: the real coefficient of each operand's
/// stored value and the real constant, in output steps, and the clamp.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Real {
    /// Each operand's coefficient.
    pub a: [f64; 2],
    /// The constant (offsets and zero point included).
    pub c: f64,
    /// The clamp (zero point included).
    pub lo: i32,
    /// The clamp (zero point included).
    pub hi: i32,
}

impl Affine {
    /// The form of `real` for the one-byte type `T`, kept only if, run at `level` over
    /// every pair of `T`'s values, every pair it does not flag gives what `exact` gives
    /// (the reference's integers for a block of pairs); `None` where no such form
    /// exists with at most [`MOST_FLAGGED`] pairs flagged, or `level` has no lanes.
    pub fn fit<T: QuantElem>(
        level: Isa,
        real: &Real,
        exact: impl Fn(&[T], &[T], &mut [T]),
        exact_one: impl Fn(T, T) -> T,
    ) -> Option<Affine> {
        if std::mem::size_of::<T>() != 1 || level.min(crate::kernels::isa::detected()) < Isa::Avx2 {
            return None;
        }
        if !(real.a.iter().all(|a| a.is_finite()) && real.c.is_finite()) {
            return None;
        }
        let values: Vec<T> = (T::MIN..=T::MAX).map(T::saturate_from_i32).collect();
        let x: Vec<T> = values
            .iter()
            .flat_map(|&v| std::iter::repeat_n(v, values.len()))
            .collect();
        let y: Vec<T> = (0..values.len())
            .flat_map(|_| values.iter().copied())
            .collect();
        let mut want = vec![T::saturate_from_i32(0); x.len()];
        exact(&x, &y, &mut want);
        let mut form = Self::scaled::<T>(real)?;
        // The form as it is, no pair flagged: where it is wrong, how far the fraction is
        // from its step tells how wide the window must be.
        let mut got = want.clone();
        if form.run(level, &x, &y, &mut got, &exact_one).done != x.len() {
            return None;
        }
        let (mut below, mut above) = (0i64, 0i64);
        let step = 1i64 << form.k;
        for ((&g, &w), (&p, &q)) in got.iter().zip(&want).zip(x.iter().zip(&y)) {
            let (g, w) = (g.to_i32(), w.to_i32());
            if g == w {
                continue;
            }
            let fraction = form.t(p.to_i32(), q.to_i32()) & (step - 1);
            if w == g - 1 {
                below = below.max(fraction + 1);
            } else if w == g + 1 {
                above = above.max(step - fraction);
            } else {
                return None;
            }
        }
        if below + above >= step / 4 {
            return None;
        }
        form.b = i32::try_from(i64::from(form.b) + above).ok()?;
        form.window = (below + above) as i32;
        if !form.fits::<T>() {
            return None;
        }
        // The kept form, flagged pairs computed exactly: every pair must agree.
        let lanes = form.run(level, &x, &y, &mut got, &exact_one);
        let same = bytemuck::cast_slice::<T, u8>(&got) == bytemuck::cast_slice::<T, u8>(&want);
        (lanes.done == x.len() && same && lanes.flagged <= MOST_FLAGGED).then_some(form)
    }

    /// `real` scaled by the largest `2^k` (at most `2^24`) for which every `t` of `T`'s
    /// values, with room for a window, stays within `±2^30`.
    fn scaled<T: QuantElem>(real: &Real) -> Option<Affine> {
        (8..=24u32).rev().find_map(|k| {
            let scale = f64::from(1u32 << k);
            let a = real.a.map(|a| (a * scale).round());
            let b = ((real.c + 0.5) * scale).floor();
            let form = Affine {
                a: [a[0] as i32, a[1] as i32],
                b: b as i32,
                k,
                window: 0,
                lo: real.lo,
                hi: real.hi,
            };
            let limit = f64::from(1u32 << 29);
            let ok = a.iter().all(|v| v.abs() < limit) && b.abs() < limit && form.fits::<T>();
            ok.then_some(form)
        })
    }

    /// Whether every `t` (plus the window) of `T`'s values stays within `±2^30`.
    fn fits<T: QuantElem>(&self) -> bool {
        let ends = [T::MIN, T::MAX];
        let limit = 1i64 << 30;
        ends.iter().all(|&p| {
            ends.iter().all(|&q| {
                let t = self.t(p, q);
                t.abs() < limit && (t + i64::from(self.window)).abs() < limit
            })
        })
    }

    /// `t` of the stored values `p` and `q`, exactly.
    fn t(&self, p: i32, q: i32) -> i64 {
        i64::from(p) * i64::from(self.a[0])
            + i64::from(q) * i64::from(self.a[1])
            + i64::from(self.b)
    }

    /// `o[i]` from `x[i]` and `y[i]` (one-byte types, the same length) for the first
    /// elements at `level` (capped at the CPU's), flagged lanes through `exact_one`:
    /// how many it wrote (whole vectors; the rest are the caller's) and how many of
    /// those were flagged.
    pub fn run<T: QuantElem>(
        &self,
        level: Isa,
        x: &[T],
        y: &[T],
        o: &mut [T],
        exact_one: &impl Fn(T, T) -> T,
    ) -> Lanes {
        let level = level.min(crate::kernels::isa::detected());
        let n = x.len().min(y.len()).min(o.len());
        if std::mem::size_of::<T>() != 1 || level < Isa::Avx2 {
            return Lanes::default();
        }
        #[cfg(target_arch = "x86_64")]
        {
            let (x, y, o) = (&x[..n], &y[..n], &mut o[..n]);
            // SAFETY: the level is capped at the CPU's: AVX-512 F and BW at Isa::Avx512
            // and above, AVX2 at Isa::Avx2 and above; T is one byte (checked above).
            unsafe {
                if level >= Isa::Avx512 {
                    x86::run_avx512(self, x, y, o, exact_one)
                } else {
                    x86::run_avx2(self, x, y, o, exact_one)
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (n, exact_one);
            Lanes::default()
        }
    }
}

/// What one [`Affine::run`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Lanes {
    /// Elements written.
    pub done: usize,
    /// Of those, the flagged ones (computed by the exact path).
    pub flagged: usize,
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Affine, Lanes};
    use crate::kernels::quant::QuantElem;
    use std::arch::x86_64::*;

    /// The flagged lanes of a step at `at` (bit `i` of `flags` is element `at + i`),
    /// recomputed exactly.
    #[inline(never)]
    fn mend<T: QuantElem>(
        mut flags: u64,
        at: usize,
        x: &[T],
        y: &[T],
        o: &mut [T],
        exact_one: &impl Fn(T, T) -> T,
    ) -> usize {
        let count = flags.count_ones() as usize;
        while flags != 0 {
            let i = at + flags.trailing_zeros() as usize;
            if let (Some(&p), Some(&q), Some(d)) = (x.get(i), y.get(i), o.get_mut(i)) {
                *d = exact_one(p, q);
            }
            flags &= flags - 1;
        }
        count
    }

    /// Sixty-four elements a step (sixteen for the tail) in 32-bit lanes.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn run_avx512<T: QuantElem>(
        f: &Affine,
        x: &[T],
        y: &[T],
        o: &mut [T],
        exact_one: &impl Fn(T, T) -> T,
    ) -> Lanes {
        let set = _mm512_set1_epi32;
        let (a1, a2, b) = (set(f.a[0]), set(f.a[1]), set(f.b));
        let (mask, window) = (set((1 << f.k) - 1), set(f.window));
        let (lo, hi, k) = (set(f.lo), set(f.hi), _mm_cvtsi32_si128(f.k as i32));
        let widen = |v: &[T]| {
            // SAFETY: T is one byte (checked by `Affine::run`) and `v` is a whole step
            // of sixteen: one unaligned 128-bit load.
            let b = unsafe { _mm_loadu_si128(v.as_ptr().cast()) };
            if T::MIN < 0 {
                _mm512_cvtepi8_epi32(b)
            } else {
                _mm512_cvtepu8_epi32(b)
            }
        };
        // Sixteen `t` from element `at`, and the lanes flagged.
        let form = |at: usize| {
            let (p, q) = (widen(&x[at..at + 16]), widen(&y[at..at + 16]));
            let t = _mm512_add_epi32(
                _mm512_add_epi32(_mm512_mullo_epi32(p, a1), _mm512_mullo_epi32(q, a2)),
                b,
            );
            let flags = _mm512_cmplt_epi32_mask(_mm512_and_si512(t, mask), window);
            (_mm512_sra_epi32(t, k), u64::from(flags))
        };
        let mut lanes = Lanes::default();
        // Sixty-four a step, narrowed by packing (each 128-bit lane of the packed bytes
        // holds four elements of each quarter: a dword permutation puts them in order),
        // clamped as bytes (the packs saturate to T's range, the clamp is inside it).
        let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        let (lo8, hi8) = (_mm512_set1_epi8(f.lo as i8), _mm512_set1_epi8(f.hi as i8));
        let quads = x.len() / 64;
        for s in 0..quads {
            let at = 64 * s;
            let (v0, f0) = form(at);
            let (v1, f1) = form(at + 16);
            let (v2, f2) = form(at + 32);
            let (v3, f3) = form(at + 48);
            let (w01, w23) = (_mm512_packs_epi32(v0, v1), _mm512_packs_epi32(v2, v3));
            let bytes = if T::MIN < 0 {
                let b = _mm512_permutexvar_epi32(order, _mm512_packs_epi16(w01, w23));
                _mm512_min_epi8(_mm512_max_epi8(b, lo8), hi8)
            } else {
                let b = _mm512_permutexvar_epi32(order, _mm512_packus_epi16(w01, w23));
                _mm512_min_epu8(_mm512_max_epu8(b, lo8), hi8)
            };
            let d = &mut o[at..at + 64];
            // SAFETY: `d` is sixty-four one-byte elements: one unaligned 512-bit store.
            unsafe { _mm512_storeu_si512(d.as_mut_ptr().cast(), bytes) };
            let flags = f0 | f1 << 16 | f2 << 32 | f3 << 48;
            if flags != 0 {
                lanes.flagged += mend(flags, at, x, y, o, exact_one);
            }
        }
        for s in 4 * quads..x.len() / 16 {
            let at = 16 * s;
            let (t, flags) = form(at);
            let v = _mm512_min_epi32(_mm512_max_epi32(t, lo), hi);
            let d = &mut o[at..at + 16];
            // The clamp is inside T's range, so the narrowing only drops high bytes.
            // SAFETY: `d` is sixteen one-byte elements: one unaligned 128-bit store.
            unsafe { _mm_storeu_si128(d.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(v)) };
            if flags != 0 {
                lanes.flagged += mend(flags, at, x, y, o, exact_one);
            }
        }
        lanes.done = x.len() / 16 * 16;
        lanes
    }

    /// Thirty-two elements a step (sixteen for the tail) in 32-bit lanes.
    #[target_feature(enable = "avx2")]
    pub(super) fn run_avx2<T: QuantElem>(
        f: &Affine,
        x: &[T],
        y: &[T],
        o: &mut [T],
        exact_one: &impl Fn(T, T) -> T,
    ) -> Lanes {
        let set = _mm256_set1_epi32;
        let (a1, a2, b) = (set(f.a[0]), set(f.a[1]), set(f.b));
        let (mask, window) = (set((1 << f.k) - 1), set(f.window));
        let (lo, hi, k) = (set(f.lo), set(f.hi), _mm_cvtsi32_si128(f.k as i32));
        let widen = |v: &[T]| {
            // SAFETY: T is one byte (checked by `Affine::run`) and `v` is a half step of
            // eight: one unaligned 64-bit load.
            let b = unsafe { _mm_loadl_epi64(v.as_ptr().cast()) };
            if T::MIN < 0 {
                _mm256_cvtepi8_epi32(b)
            } else {
                _mm256_cvtepu8_epi32(b)
            }
        };
        // Eight `t` from element `at`, shifted, and the lanes flagged.
        let form = |at: usize| {
            let (p, q) = (widen(&x[at..at + 8]), widen(&y[at..at + 8]));
            let t = _mm256_add_epi32(
                _mm256_add_epi32(_mm256_mullo_epi32(p, a1), _mm256_mullo_epi32(q, a2)),
                b,
            );
            let low = _mm256_cmpgt_epi32(window, _mm256_and_si256(t, mask));
            let flags = _mm256_movemask_ps(_mm256_castsi256_ps(low)) as u32;
            (_mm256_sra_epi32(t, k), u64::from(flags))
        };
        let mut lanes = Lanes::default();
        // Thirty-two a step, narrowed by packing (each 128-bit lane of the packed bytes
        // holds four elements of each quarter: a dword permutation puts them in order),
        // clamped as bytes (the packs saturate to T's range, the clamp is inside it).
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let (lo8, hi8) = (_mm256_set1_epi8(f.lo as i8), _mm256_set1_epi8(f.hi as i8));
        let quads = x.len() / 32;
        for s in 0..quads {
            let at = 32 * s;
            let (v0, f0) = form(at);
            let (v1, f1) = form(at + 8);
            let (v2, f2) = form(at + 16);
            let (v3, f3) = form(at + 24);
            let (w01, w23) = (_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
            let bytes = if T::MIN < 0 {
                let b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), order);
                _mm256_min_epi8(_mm256_max_epi8(b, lo8), hi8)
            } else {
                let b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w01, w23), order);
                _mm256_min_epu8(_mm256_max_epu8(b, lo8), hi8)
            };
            let d = &mut o[at..at + 32];
            // SAFETY: `d` is thirty-two one-byte elements: one unaligned 256-bit store.
            unsafe { _mm256_storeu_si256(d.as_mut_ptr().cast(), bytes) };
            let flags = f0 | f1 << 8 | f2 << 16 | f3 << 24;
            if flags != 0 {
                lanes.flagged += mend(flags, at, x, y, o, exact_one);
            }
        }
        // Eight results (clamped, so inside T's range) as eight `i16` lanes.
        let half = |v: __m256i| {
            let v = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
            _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))
        };
        let steps = x.len() / 16;
        for s in 2 * quads..steps {
            let at = 16 * s;
            let ((v0, f0), (v1, f1)) = (form(at), form(at + 8));
            let (v0, v1) = (half(v0), half(v1));
            let bytes = if T::MIN < 0 {
                _mm_packs_epi16(v0, v1)
            } else {
                _mm_packus_epi16(v0, v1)
            };
            let d = &mut o[at..at + 16];
            // SAFETY: `d` is sixteen one-byte elements: one unaligned 128-bit store.
            unsafe { _mm_storeu_si128(d.as_mut_ptr().cast(), bytes) };
            let flags = f0 | f1 << 8;
            if flags != 0 {
                lanes.flagged += mend(flags, at, x, y, o, exact_one);
            }
        }
        lanes.done = 16 * steps;
        lanes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `floor(0.3137 v_1 + 0.4519 v_2 + 0.7113)` clamped: a "reference" a form can
    /// match (coefficients in no simple ratio, so few sums sit on a step).
    fn plain(p: i8, q: i8) -> i8 {
        let v = 0.3137 * f64::from(p) + 0.4519 * f64::from(q) + 0.7113;
        v.floor().clamp(-128.0, 127.0) as i8
    }

    const REAL: Real = Real {
        a: [0.3137, 0.4519],
        c: 0.2113,
        lo: -128,
        hi: 127,
    };

    /// A form is kept when it gives the reference over every pair, and not when the
    /// reference differs from it at one pair it would not flag.
    #[test]
    fn forms_are_kept_only_when_every_pair_agrees() {
        let level = crate::kernels::isa::detected();
        if level < Isa::Avx2 {
            return;
        }
        let exact = |odd: Option<(i8, i8)>| {
            move |x: &[i8], y: &[i8], o: &mut [i8]| {
                for ((d, &p), &q) in o.iter_mut().zip(x).zip(y) {
                    *d = plain(p, q);
                    if odd == Some((p, q)) {
                        *d = d.wrapping_add(1);
                    }
                }
            }
        };
        let form = Affine::fit(level, &REAL, exact(None), plain).expect("a form");
        // It runs whole vectors and leaves the tail.
        let (x, y) = ([5i8; 37], [-9i8; 37]);
        let mut o = [0i8; 37];
        assert_eq!(form.run(level, &x, &y, &mut o, &plain).done, 32);
        assert!(o[..32].iter().all(|&v| v == plain(5, -9)));
        assert_eq!(
            Affine::fit(level, &REAL, exact(Some((17, -40))), plain),
            None
        );
    }

    /// No form where the level has no lanes or the constants are not finite.
    #[test]
    fn no_form_without_lanes_or_finite_constants() {
        let exact = |x: &[i8], y: &[i8], o: &mut [i8]| {
            for ((d, &p), &q) in o.iter_mut().zip(x).zip(y) {
                *d = plain(p, q);
            }
        };
        assert_eq!(Affine::fit(Isa::Scalar, &REAL, exact, plain), None);
        let nan = Real {
            c: f64::NAN,
            ..REAL
        };
        assert_eq!(Affine::fit(Isa::Avx512Vnni, &nan, exact, plain), None);
    }
}
