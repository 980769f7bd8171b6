//! REQUANTIZE_PRELU of one-byte values as an affine form of `d = q - zero_point` with a
//! coefficient per lane: `t = d A + B`, `A` the positive side's for `d >= 0` and the
//! lane's slope's otherwise, the result `t >> k` (see `affine`): one multiply, a
//! compare and a blend where the float lanes take a conversion, two multiplies, a
//! division and a rounding. The form is fitted to the constants and the slope vector as
//! [`super::quantize_simd::prelu_at`] repeats it, and kept only after its lanes, run
//! over every stored value in every lane, gave the float arithmetic's results (flagged
//! lanes recomputed by it): exact by exhaustion.

use super::affine::{few_flagged, same, Lanes, Shape, Window};
use super::quantize_simd::{Byte, PreluQuant};
use crate::kernels::isa::Isa;

/// The fewest lanes of a kept form's slope coefficients: a chunk of `run` per run of
/// them, and chunks of 64 elements (24x24x64) had cost four times as much an element
/// as chunks of 256 (face_landmark_int8 at AVX2).
const RUN: usize = 2048;

/// The affine form of one REQUANTIZE_PRELU (see the module comment).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PreluForm {
    /// The input's zero point.
    zero: i32,
    /// The coefficient of `d >= 0`.
    pos: i32,
    /// Each lane's coefficient of `d < 0` (whole runs of the slope
    /// vector, a multiple of 16 long; see [`PreluForm::repeated`]).
    neg: Vec<i32>,
    /// The output's zero point and the rounding half (and the window's upper part),
    /// scaled by `2^k`.
    b: i32,
    /// The lanes' shift, window and clamp.
    shape: Shape,
    /// Every lane's negative coefficient is the positive one (a REQUANTIZE: slope 1):
    /// `t = q A + (B - zero A)`, no compare and blend.
    uniform: bool,
}

impl PreluForm {
    /// The form of `p` with the slopes `alpha` (repeated whole along the input, its
    /// length a multiple of 16) from `T` to `U`, kept only if its lanes at `level` give
    /// `exact`'s results (the float lanes) for every stored value in every lane; `None`
    /// where the level has no lanes, the constants are not bounded (see
    /// [`PreluQuant::bounded_over`]) or no form flags few enough lanes.
    pub fn fit<T: Byte, U: Byte>(
        level: Isa,
        p: &PreluQuant,
        alpha: &[f32],
        exact: impl Fn(&[T], &mut [U]),
    ) -> Option<PreluForm> {
        let level = level.min(crate::kernels::isa::detected());
        let lanes = alpha.len();
        let ok = level >= Isa::Avx2 && lanes > 0 && lanes.is_multiple_of(16);
        if !ok || !p.bounded_over((T::MIN, T::MAX), (U::MIN, U::MAX), alpha) {
            return None;
        }
        let x: Vec<T> = (T::MIN..=T::MAX)
            .flat_map(|v| std::iter::repeat_n(T::saturate_from_i32(v), lanes))
            .collect();
        let mut want = vec![U::from_f32(0.0); x.len()];
        exact(&x, &mut want);
        let mut form = Self::scaled::<T>(p, alpha)?;
        let mut got = want.clone();
        form.run(level, p, &x, alpha, &mut got);
        let t = |i: usize| form.t(x[i].to_i32(), i % lanes);
        let window = Window::of(form.shape.k, &got, &want, t)?;
        window.apply(&mut form.b, &mut form.shape)?;
        if !form.fits::<T>() {
            return None;
        }
        let run = form.run(level, p, &x, alpha, &mut got);
        let kept = few_flagged(run.flagged, x.len());
        (kept && same(&got, &want)).then(|| form.repeated())
    }

    /// The form with its slope coefficients repeated whole to at least [`RUN`] lanes:
    /// each lane keeps its coefficient, so the fit's exhaustive check still holds, and
    /// `run` goes through fewer, longer chunks.
    fn repeated(mut self) -> PreluForm {
        self.neg = self.neg.repeat(RUN.div_ceil(self.neg.len()));
        self
    }

    /// The real form scaled by the largest `2^k` (at most `2^24`) for which every `t`,
    /// with room for a window, stays within `±2^30`.
    fn scaled<T: Byte>(p: &PreluQuant, alpha: &[f32]) -> Option<PreluForm> {
        let o = &p.out;
        let unit = f64::from(p.in_scale) / f64::from(o.scale);
        (8..=24u32).rev().find_map(|k| {
            let scale = f64::from(1u32 << k);
            let coefficient = |slope: f64| {
                let c = (unit * slope * scale).round();
                (c.abs() < f64::from(1u32 << 21)).then_some(c as i32)
            };
            let b = ((f64::from(o.zp) + 0.5) * scale).floor();
            if b.abs() >= f64::from(1u32 << 29) {
                return None;
            }
            let pos = coefficient(1.0)?;
            let neg: Vec<i32> = alpha
                .iter()
                .map(|&a| coefficient(f64::from(a)))
                .collect::<Option<_>>()?;
            let form = PreluForm {
                zero: p.in_zp,
                pos,
                uniform: neg.iter().all(|&n| n == pos),
                neg,
                b: b as i32,
                shape: Shape {
                    k,
                    window: 0,
                    lo: o.lo as i32,
                    hi: o.hi as i32,
                },
            };
            form.fits::<T>().then_some(form)
        })
    }

    /// Whether every `t` (plus the window) of `T`'s values stays within `±2^30`.
    fn fits<T: Byte>(&self) -> bool {
        let limit = 1i64 << 30;
        let ends = [T::MIN, T::MAX];
        (0..self.neg.len()).all(|lane| {
            ends.iter().all(|&q| {
                let t = self.t(q, lane);
                t.abs() < limit && (t + i64::from(self.shape.window)).abs() < limit
            })
        })
    }

    /// `t` of the stored value `q` in lane `lane`, exactly.
    fn t(&self, q: i32, lane: usize) -> i64 {
        let d = q - self.zero;
        let a = if d >= 0 { self.pos } else { self.neg[lane] };
        i64::from(d) * i64::from(a) + i64::from(self.b)
    }

    /// `dst[i]` from `x[i]` with the slope `alpha[i % alpha.len()]` for every element
    /// (the constants and slopes the form was fitted to), at `level` (capped at the
    /// CPU's); flagged lanes and the last chunk's tail through the float arithmetic.
    /// Returns the lanes' count (nothing written where the level has none).
    pub fn run<T: Byte, U: Byte>(
        &self,
        level: Isa,
        p: &PreluQuant,
        x: &[T],
        alpha: &[f32],
        dst: &mut [U],
    ) -> Lanes {
        let level = level.min(crate::kernels::isa::detected());
        let mut lanes = Lanes::default();
        let run = self.neg.len();
        if level < Isa::Avx2 || alpha.is_empty() || !run.is_multiple_of(alpha.len()) {
            return lanes;
        }
        for (x, dst) in x.chunks(run).zip(dst.chunks_mut(run)) {
            let n = x.len().min(dst.len());
            let (x, dst) = (&x[..n], &mut dst[..n]);
            // A chunk starts at a whole run of the slope vector.
            let exact = |i: usize| p.one::<T, U>(x[i], alpha[i % alpha.len()]);
            #[cfg(target_arch = "x86_64")]
            {
                // The level is capped at the CPU's.
                // SAFETY: AVX-512 F and BW at Isa::Avx512 and above, AVX2 at Isa::Avx2.
                let run = unsafe {
                    if level >= Isa::Avx512 {
                        x86::run_avx512(self, x, dst, &exact)
                    } else {
                        x86::run_avx2(self, x, dst, &exact)
                    }
                };
                lanes.done += run.done;
                lanes.flagged += run.flagged;
                for (i, d) in dst.iter_mut().enumerate().skip(run.done) {
                    *d = exact(i);
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            for (i, d) in dst.iter_mut().enumerate() {
                *d = exact(i);
            }
        }
        lanes
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::PreluForm;
    use crate::kernels::elementwise::affine::{x86::*, Lanes};
    use crate::kernels::elementwise::quantize_simd::x86::{widen_16, widen_8};
    use crate::kernels::elementwise::quantize_simd::Byte;
    use std::arch::x86_64::*;

    /// `t` sixteen lanes at a time (`x` one chunk of `neg`'s length at most).
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn run_avx512<T: Byte, U: Byte>(
        f: &PreluForm,
        x: &[T],
        dst: &mut [U],
        exact: &impl Fn(usize) -> U,
    ) -> Lanes {
        let (zero, pos, b) = (
            _mm512_set1_epi32(f.zero),
            _mm512_set1_epi32(f.pos),
            _mm512_set1_epi32(f.b),
        );
        let n = x.len().min(f.neg.len());
        let t = |at: usize| {
            let (q, neg) = (&x[at..at + 16], &f.neg[at..at + 16]);
            // T is one byte: `q` is sixteen of them, `neg` sixteen i32.
            // SAFETY: sixteen bytes read within `q`, one 512-bit load within `neg`.
            let (q, neg) = unsafe {
                (
                    widen_16::<T>(q.as_ptr().cast(), 16),
                    _mm512_loadu_si512(neg.as_ptr().cast()),
                )
            };
            let d = _mm512_sub_epi32(q, zero);
            let a = _mm512_mask_blend_epi32(_mm512_cmpge_epi32_mask(d, zero_vector()), neg, pos);
            _mm512_add_epi32(_mm512_mullo_epi32(d, a), b)
        };
        lanes_avx512(&f.shape, &mut dst[..n], t, exact)
    }

    /// An all-zero vector.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn zero_vector() -> __m512i {
        _mm512_setzero_si512()
    }

    /// `t` eight lanes at a time (`x` one chunk of `neg`'s length at most).
    #[target_feature(enable = "avx2")]
    pub(super) fn run_avx2<T: Byte, U: Byte>(
        f: &PreluForm,
        x: &[T],
        dst: &mut [U],
        exact: &impl Fn(usize) -> U,
    ) -> Lanes {
        let (zero, pos, b) = (
            _mm256_set1_epi32(f.zero),
            _mm256_set1_epi32(f.pos),
            _mm256_set1_epi32(f.b),
        );
        let below = _mm256_set1_epi32(-1);
        let n = x.len().min(f.neg.len());
        if f.uniform {
            // `(q - zero) pos + b` in wrapping i32 arithmetic is `q pos + (b - zero pos)`:
            // the same bits, four operations fewer per eight values.
            let b = _mm256_set1_epi32(f.b.wrapping_sub(f.zero.wrapping_mul(f.pos)));
            let t = |at: usize| {
                let q = &x[at..at + 8];
                // SAFETY: eight bytes read within `q` (T is one byte).
                let q = unsafe { widen_8::<T>(q.as_ptr().cast(), 8) };
                _mm256_add_epi32(_mm256_mullo_epi32(q, pos), b)
            };
            return lanes_avx2(&f.shape, &mut dst[..n], t, exact);
        }
        let t = |at: usize| {
            let (q, neg) = (&x[at..at + 8], &f.neg[at..at + 8]);
            // T is one byte: `q` is eight of them, `neg` eight i32.
            // SAFETY: eight bytes read within `q`, one 256-bit load within `neg`.
            let (q, neg) = unsafe {
                (
                    widen_8::<T>(q.as_ptr().cast(), 8),
                    _mm256_loadu_si256(neg.as_ptr().cast()),
                )
            };
            let d = _mm256_sub_epi32(q, zero);
            let a = _mm256_blendv_epi8(neg, pos, _mm256_cmpgt_epi32(d, below));
            _mm256_add_epi32(_mm256_mullo_epi32(d, a), b)
        };
        lanes_avx2(&f.shape, &mut dst[..n], t, exact)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::elementwise::quantize_simd::Quantizer;

    fn constants() -> (PreluQuant, Vec<f32>) {
        let p = PreluQuant {
            in_scale: 0.0473,
            in_zp: -7,
            out: Quantizer::new::<i8>(0.0391, 5),
        };
        let alpha = (0..64).map(|c| 0.013 + 0.0171 * c as f32).collect();
        (p, alpha)
    }

    /// Ordinary constants get a form (so `prelu_matches_the_scalar_arithmetic` runs it
    /// at AVX2), whose results over a tensor of several chunks are the float
    /// arithmetic's; a reference that differs at one value the form would not flag keeps
    /// it from being used.
    #[test]
    fn forms_fit_ordinary_constants_and_only_when_every_value_agrees() {
        if crate::kernels::isa::detected() < Isa::Avx2 {
            return;
        }
        let (p, alpha) = constants();
        let exact = |odd: Option<usize>| {
            let alpha = alpha.clone();
            move |x: &[i8], o: &mut [i8]| {
                for (i, (d, &q)) in o.iter_mut().zip(x).enumerate() {
                    *d = p.one(q, alpha[i % alpha.len()]);
                    if odd == Some(i) {
                        *d = d.wrapping_add(1);
                    }
                }
            }
        };
        let form = PreluForm::fit::<i8, i8>(Isa::Avx2, &p, &alpha, exact(None)).expect("a form");
        // Past two whole chunks of the repeated coefficients, and a short one.
        let x: Vec<i8> = (0..2 * RUN + 904)
            .map(|i| (i * 37 % 256) as u8 as i8)
            .collect();
        let mut got = vec![0i8; x.len()];
        form.run(Isa::Avx2, &p, &x, &alpha, &mut got);
        for (i, (&g, &q)) in got.iter().zip(&x).enumerate() {
            assert_eq!(g, p.one::<i8, i8>(q, alpha[i % 64]), "element {i}");
        }
        // Stored value 40 in lane 3.
        let odd = (40 + 128) * 64 + 3;
        assert_eq!(
            PreluForm::fit::<i8, i8>(Isa::Avx2, &p, &alpha, exact(Some(odd))),
            None
        );
    }
}
