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

use super::affine::{few_flagged, same, Lanes, Shape, Window};
use crate::kernels::isa::Isa;
use crate::kernels::quant::QuantElem;

/// Every pair of `T`'s values, as two operands: `x` steps through the values slowly,
/// `y` quickly (`x[256 i + j]` is value `i`, `y[256 i + j]` value `j`, for one-byte `T`).
pub(crate) fn every_pair<T: QuantElem>() -> (Vec<T>, Vec<T>) {
    let values: Vec<T> = (T::MIN..=T::MAX).map(T::saturate_from_i32).collect();
    let x = values
        .iter()
        .flat_map(|&v| std::iter::repeat_n(v, values.len()))
        .collect();
    let y = (0..values.len())
        .flat_map(|_| values.iter().copied())
        .collect();
    (x, y)
}

/// The affine form of one ADD/SUB (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Affine {
    /// The stored values' coefficients.
    a: [i32; 2],
    /// The constant: offsets, the rounding half, the zero point and the window's upper
    /// part, all scaled by `2^k`.
    b: i32,
    /// The lanes' shift, window and clamp.
    shape: Shape,
}

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
    /// exists that flags at most one pair in 64, or `level` has no lanes.
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
        let (x, y) = every_pair::<T>();
        let mut want = vec![T::saturate_from_i32(0); x.len()];
        exact(&x, &y, &mut want);
        let mut form = Self::scaled::<T>(real)?;
        // The form as it is, no pair flagged: where it is wrong, how far the fraction is
        // from its step tells how wide the window must be.
        let mut got = want.clone();
        if form.run(level, &x, &y, &mut got, &exact_one).done != x.len() {
            return None;
        }
        let t = |i: usize| form.t(x[i].to_i32(), y[i].to_i32());
        let window = Window::of(form.shape.k, &got, &want, t)?;
        window.apply(&mut form.b, &mut form.shape)?;
        if !form.fits::<T>() {
            return None;
        }
        // The kept form, flagged pairs computed exactly: every pair must agree.
        let lanes = form.run(level, &x, &y, &mut got, &exact_one);
        let kept = lanes.done == x.len() && few_flagged(lanes.flagged, x.len());
        (kept && same(&got, &want)).then_some(form)
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
                shape: Shape {
                    k,
                    window: 0,
                    lo: real.lo,
                    hi: real.hi,
                },
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
                t.abs() < limit && (t + i64::from(self.shape.window)).abs() < limit
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
            // The level is capped at the CPU's; T is one byte (checked above).
            // SAFETY: AVX-512 F and BW at Isa::Avx512 and above, AVX2 at Isa::Avx2.
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

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Affine;
    use crate::kernels::elementwise::affine::{x86::*, Lanes};
    use crate::kernels::quant::QuantElem;
    use std::arch::x86_64::*;

    /// `t` sixteen lanes at a time.
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
        let widen = |v: &[T]| {
            // T is one byte (checked by `Affine::run`) and `v` is sixteen elements.
            // SAFETY: one unaligned 128-bit load within `v`.
            let b = unsafe { _mm_loadu_si128(v.as_ptr().cast()) };
            if T::MIN < 0 {
                _mm512_cvtepi8_epi32(b)
            } else {
                _mm512_cvtepu8_epi32(b)
            }
        };
        let t = |at: usize| {
            let (p, q) = (widen(&x[at..at + 16]), widen(&y[at..at + 16]));
            let sum = _mm512_add_epi32(_mm512_mullo_epi32(p, a1), _mm512_mullo_epi32(q, a2));
            _mm512_add_epi32(sum, b)
        };
        lanes_avx512(&f.shape, o, t, &|i| exact_one(x[i], y[i]))
    }

    /// `t` eight lanes at a time.
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
        let widen = |v: &[T]| {
            // T is one byte (checked by `Affine::run`) and `v` is eight elements.
            // SAFETY: one unaligned 64-bit load within `v`.
            let b = unsafe { _mm_loadl_epi64(v.as_ptr().cast()) };
            if T::MIN < 0 {
                _mm256_cvtepi8_epi32(b)
            } else {
                _mm256_cvtepu8_epi32(b)
            }
        };
        let t = |at: usize| {
            let (p, q) = (widen(&x[at..at + 8]), widen(&y[at..at + 8]));
            let sum = _mm256_add_epi32(_mm256_mullo_epi32(p, a1), _mm256_mullo_epi32(q, a2));
            _mm256_add_epi32(sum, b)
        };
        lanes_avx2(&f.shape, o, t, &|i| exact_one(x[i], y[i]))
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
