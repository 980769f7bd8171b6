//! What the affine forms of quantised element-wise operations share (ADD/SUB in
//! `quant_add_affine`, REQUANTIZE_PRELU in `quant_prelu_affine`): an operation whose
//! reference rounds a real `u` built from one-byte stored values is computed as
//! `t = round(2^k (u + 1/2))` in 32-bit lanes and `t >> k`, a lane whose fraction
//! `t mod 2^k` falls below `window` being *flagged* and recomputed by the reference.
//! Each form is fitted ([`Window`]) and kept only after its lanes gave the reference's
//! integers for every input it can see; these are its lanes: the shift, the flags, the
//! clamp and the narrowing, by packing (64 elements a step on AVX-512, 32 on AVX2; a
//! `vpmovdb` per 16 cost twice as much), and the mending of flagged lanes.

use crate::kernels::quant::QuantElem;

/// Flagged inputs a form may leave out of each 65,536 (a form flagging more is not kept:
/// constants that put many results on a rounding step stay on the exact path).
const MOST_FLAGGED_PER_64K: usize = 1 << 10;

/// The shift, window and clamp of a form's lanes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Shape {
    /// The shift.
    pub k: u32,
    /// A fraction `t mod 2^k` below this is flagged.
    pub window: i32,
    /// The clamp (inside the output type's range).
    pub lo: i32,
    /// The clamp.
    pub hi: i32,
}

/// What one run of a form's lanes did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Lanes {
    /// Elements written.
    pub done: usize,
    /// Of those, the flagged ones (computed by the exact path).
    pub flagged: usize,
}

/// The window a form needs, from the inputs where its unflagged lanes (window 0) were
/// wrong: a result one above the reference's has its `t` just past a step (the fraction
/// must be flagged from below), one below has it just short of one (from above, by
/// raising `t`). `None` where a result is off by more than one or the window would span
/// a quarter of a step.
#[derive(Debug, Default)]
pub(crate) struct Window {
    below: i64,
    above: i64,
}

impl Window {
    /// The window of a form of shift `k` whose lanes, unflagged, gave `got` where the
    /// reference gives `want`; `t(i)` is element `i`'s `t`.
    pub fn of<T: QuantElem>(
        k: u32,
        got: &[T],
        want: &[T],
        t: impl Fn(usize) -> i64,
    ) -> Option<Window> {
        let mut window = Window::default();
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            if g.to_i32() != w.to_i32() {
                window.take(k, g.to_i32(), w.to_i32(), t(i))?;
            }
        }
        Some(window)
    }

    /// Takes one wrong lane: its result `got`, the reference's `want`, its `t`.
    fn take(&mut self, k: u32, got: i32, want: i32, t: i64) -> Option<()> {
        let step = 1i64 << k;
        let fraction = t & (step - 1);
        if want == got - 1 {
            self.below = self.below.max(fraction + 1);
        } else if want == got + 1 {
            self.above = self.above.max(step - fraction);
        } else {
            return None;
        }
        (self.below + self.above < step / 4).then_some(())
    }

    /// Sets the window in `shape`, raising the form's constant `b` by its upper part.
    pub fn apply(&self, b: &mut i32, shape: &mut Shape) -> Option<()> {
        *b = i32::try_from(i64::from(*b) + self.above).ok()?;
        shape.window = (self.below + self.above) as i32;
        Some(())
    }
}

/// Whether a form that flagged `flagged` of `len` inputs flags few enough to be kept.
pub(crate) fn few_flagged(flagged: usize, len: usize) -> bool {
    flagged * (1 << 16) <= MOST_FLAGGED_PER_64K * len
}

/// Whether `got` and `want` hold the same values.
pub(crate) fn same<T: QuantElem>(got: &[T], want: &[T]) -> bool {
    bytemuck::cast_slice::<T, u8>(got) == bytemuck::cast_slice::<T, u8>(want)
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::{Lanes, Shape};
    use crate::kernels::quant::QuantElem;
    use std::arch::x86_64::*;

    /// The flagged lanes of a run's steps, noted in a small array and mended when it
    /// fills and after the run: mending inside the loop made the compiler keep the
    /// lanes' constants in memory, and moving each step's flags to a general register was
    /// half the lanes' time.
    struct Notes {
        /// The noted steps' starts and flags (bit `i` is element `at + i`).
        steps: [(usize, u64); 32],
        /// How many are noted.
        len: usize,
        /// Lanes mended so far.
        mended: usize,
    }

    impl Notes {
        fn new() -> Self {
            Notes {
                steps: [(0, 0); 32],
                len: 0,
                mended: 0,
            }
        }

        /// Notes the flagged lanes of the step at `at`, mending the noted ones first if
        /// the array is full.
        #[inline(always)]
        fn note<T: QuantElem>(
            &mut self,
            at: usize,
            flags: u64,
            o: &mut [T],
            exact: &impl Fn(usize) -> T,
        ) {
            if self.len == self.steps.len() {
                self.mend(o, exact);
            }
            if let Some(s) = self.steps.get_mut(self.len) {
                *s = (at, flags);
                self.len += 1;
            }
        }

        /// Recomputes every noted lane by `exact` (of an element's index).
        #[cold]
        #[inline(never)]
        fn mend<T: QuantElem>(&mut self, o: &mut [T], exact: &impl Fn(usize) -> T) {
            for &(at, flags) in &self.steps[..self.len] {
                self.mended += mend(flags, at, o, exact);
            }
            self.len = 0;
        }

        /// The run's lanes: `done` elements written, the noted ones mended.
        fn finish<T: QuantElem>(
            mut self,
            done: usize,
            o: &mut [T],
            exact: &impl Fn(usize) -> T,
        ) -> Lanes {
            self.mend(o, exact);
            Lanes {
                done,
                flagged: self.mended,
            }
        }
    }

    /// The flagged lanes of a step at `at` (bit `i` of `flags` is element `at + i`),
    /// recomputed by `exact`; returns their count.
    fn mend<T: QuantElem>(
        mut flags: u64,
        at: usize,
        o: &mut [T],
        exact: &impl Fn(usize) -> T,
    ) -> usize {
        let count = flags.count_ones() as usize;
        while flags != 0 {
            let i = at + flags.trailing_zeros() as usize;
            if let Some(d) = o.get_mut(i) {
                *d = exact(i);
            }
            flags &= flags - 1;
        }
        count
    }

    /// The first `o.len() / 16 * 16` elements of `o` from `t(at)`, the sixteen `t` of
    /// elements `at..at + 16`; flagged lanes through `exact`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(crate) fn lanes_avx512<T: QuantElem>(
        shape: &Shape,
        o: &mut [T],
        t: impl Fn(usize) -> __m512i,
        exact: &impl Fn(usize) -> T,
    ) -> Lanes {
        // A window of 0 flags nothing (most fitted forms): no flags computed at all.
        match shape.window {
            0 => lanes_avx512_as::<T, false>(shape, o, &t, exact),
            _ => lanes_avx512_as::<T, true>(shape, o, &t, exact),
        }
    }

    /// [`lanes_avx512`], with the flags only if `FLAGGED`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn lanes_avx512_as<T: QuantElem, const FLAGGED: bool>(
        shape: &Shape,
        o: &mut [T],
        t: impl Fn(usize) -> __m512i,
        exact: &impl Fn(usize) -> T,
    ) -> Lanes {
        let set = _mm512_set1_epi32;
        let (mask, window) = (set((1 << shape.k) - 1), set(shape.window));
        let k = _mm512_set1_epi32(shape.k as i32);
        // A lane is flagged when its fraction is below the window: the sign of their
        // difference (both lie in `0..2^k`).
        let shifted = |at: usize| {
            let t = t(at);
            let low = match FLAGGED {
                true => _mm512_sub_epi32(_mm512_and_si512(t, mask), window),
                false => _mm512_setzero_si512(),
            };
            (_mm512_srav_epi32(t, k), low)
        };
        // Each 128-bit lane of the packed bytes holds four elements of each quarter: a
        // dword permutation puts them in order; the packs saturate to T's range, the
        // clamp (inside it) is then a byte clamp.
        let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        let (lo, hi) = (
            _mm512_set1_epi8(shape.lo as i8),
            _mm512_set1_epi8(shape.hi as i8),
        );
        let pack = |v: [__m512i; 4]| {
            let (w01, w23) = (
                _mm512_packs_epi32(v[0], v[1]),
                _mm512_packs_epi32(v[2], v[3]),
            );
            if T::MIN < 0 {
                let b = _mm512_permutexvar_epi32(order, _mm512_packs_epi16(w01, w23));
                _mm512_min_epi8(_mm512_max_epi8(b, lo), hi)
            } else {
                let b = _mm512_permutexvar_epi32(order, _mm512_packus_epi16(w01, w23));
                _mm512_min_epu8(_mm512_max_epu8(b, lo), hi)
            }
        };
        let steps = o.len() / 16;
        let mut notes = Notes::new();
        let zero = _mm512_setzero_si512();
        let mut store = |at: usize, quarters: usize, bytes: __m512i, low: [__m512i; 4]| {
            let d = &mut o[at..at + 16 * quarters];
            // `d` is `16 * quarters` one-byte elements (T is one byte: the callers
            // check); a masked store of the whole is slower than a plain one.
            // SAFETY: one unaligned store within `d`, masked to it when short.
            unsafe {
                if quarters == 4 {
                    _mm512_storeu_si512(d.as_mut_ptr().cast(), bytes);
                } else {
                    let keep = u64::MAX >> (64 - 16 * quarters);
                    _mm512_mask_storeu_epi8(d.as_mut_ptr().cast(), keep, bytes);
                }
            }
            if !FLAGGED {
                return;
            }
            // One test of the four steps' signs; their bits only when one is set.
            let any = _mm512_or_si512(
                _mm512_or_si512(low[0], low[1]),
                _mm512_or_si512(low[2], low[3]),
            );
            if _mm512_cmplt_epi32_mask(any, zero) != 0 {
                let bits = |v: __m512i| u64::from(_mm512_cmplt_epi32_mask(v, zero));
                let flags = (0..4)
                    .map(|j| bits(low[j]) << (16 * j))
                    .fold(0, |a, b| a | b);
                notes.note(at, flags, o, exact);
            }
        };
        for at in (0..steps / 4).map(|s| 64 * s) {
            let (v0, f0) = shifted(at);
            let (v1, f1) = shifted(at + 16);
            let (v2, f2) = shifted(at + 32);
            let (v3, f3) = shifted(at + 48);
            store(at, 4, pack([v0, v1, v2, v3]), [f0, f1, f2, f3]);
        }
        let (at, quarters) = (steps / 4 * 64, steps % 4);
        if quarters > 0 {
            // Unused quarters: zeros, unflagged (a difference of 0 has no sign).
            let (mut v, mut low) = ([zero; 4], [zero; 4]);
            for j in 0..quarters {
                (v[j], low[j]) = shifted(at + 16 * j);
            }
            store(at, quarters, pack(v), low);
        }
        notes.finish(16 * steps, o, exact)
    }

    /// [`lanes_avx512`] on AVX2: `t(at)` gives the eight `t` of elements `at..at + 8`,
    /// sixteen elements a step at the least.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn lanes_avx2<T: QuantElem>(
        shape: &Shape,
        o: &mut [T],
        t: impl Fn(usize) -> __m256i,
        exact: &impl Fn(usize) -> T,
    ) -> Lanes {
        match shape.window {
            0 => lanes_avx2_as::<T, false>(shape, o, &t, exact),
            _ => lanes_avx2_as::<T, true>(shape, o, &t, exact),
        }
    }

    /// [`lanes_avx2`], with the flags only if `FLAGGED`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn lanes_avx2_as<T: QuantElem, const FLAGGED: bool>(
        shape: &Shape,
        o: &mut [T],
        t: impl Fn(usize) -> __m256i,
        exact: &impl Fn(usize) -> T,
    ) -> Lanes {
        let set = _mm256_set1_epi32;
        let (mask, window) = (set((1 << shape.k) - 1), set(shape.window));
        let k = _mm256_set1_epi32(shape.k as i32);
        let shifted = |at: usize| {
            let t = t(at);
            let low = match FLAGGED {
                true => _mm256_cmpgt_epi32(window, _mm256_and_si256(t, mask)),
                false => _mm256_setzero_si256(),
            };
            (_mm256_srav_epi32(t, k), low)
        };
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let (lo, hi) = (
            _mm256_set1_epi8(shape.lo as i8),
            _mm256_set1_epi8(shape.hi as i8),
        );
        let pack = |v: [__m256i; 4]| {
            let (w01, w23) = (
                _mm256_packs_epi32(v[0], v[1]),
                _mm256_packs_epi32(v[2], v[3]),
            );
            if T::MIN < 0 {
                let b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), order);
                _mm256_min_epi8(_mm256_max_epi8(b, lo), hi)
            } else {
                let b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w01, w23), order);
                _mm256_min_epu8(_mm256_max_epu8(b, lo), hi)
            }
        };
        let steps = o.len() / 16;
        let mut notes = Notes::new();
        let mut store = |at: usize, quarters: usize, bytes: __m256i, low: [__m256i; 4]| {
            let d = &mut o[at..at + 8 * quarters];
            // `d` is `8 * quarters` (16 or 32) one-byte elements (T is one byte: the
            // callers check).
            // SAFETY: one unaligned 256- or 128-bit store within `d`.
            unsafe {
                if quarters == 4 {
                    _mm256_storeu_si256(d.as_mut_ptr().cast(), bytes);
                } else {
                    _mm_storeu_si128(d.as_mut_ptr().cast(), _mm256_castsi256_si128(bytes));
                }
            }
            if !FLAGGED {
                return;
            }
            // One test of the four flag vectors; their bits only when one is set.
            let any = _mm256_or_si256(
                _mm256_or_si256(low[0], low[1]),
                _mm256_or_si256(low[2], low[3]),
            );
            if _mm256_testz_si256(any, any) == 0 {
                let bits = |v: __m256i| _mm256_movemask_ps(_mm256_castsi256_ps(v)) as u8;
                let flags = (0..4)
                    .map(|j| u64::from(bits(low[j])) << (8 * j))
                    .fold(0, |a, b| a | b);
                notes.note(at, flags, o, exact);
            }
        };
        for at in (0..steps / 2).map(|s| 32 * s) {
            let (v0, f0) = shifted(at);
            let (v1, f1) = shifted(at + 8);
            let (v2, f2) = shifted(at + 16);
            let (v3, f3) = shifted(at + 24);
            store(at, 4, pack([v0, v1, v2, v3]), [f0, f1, f2, f3]);
        }
        if steps % 2 == 1 {
            let at = steps / 2 * 32;
            let (v0, f0) = shifted(at);
            let (v1, f1) = shifted(at + 8);
            let zero = _mm256_setzero_si256();
            store(at, 2, pack([v0, v1, zero, zero]), [f0, f1, zero, zero]);
        }
        notes.finish(16 * steps, o, exact)
    }
}
