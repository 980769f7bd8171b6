//! The output stage of the quantised convolution family, vectorised: for one pixel's
//! per-channel `i32` sums, `clamp(multiply_by_quantized_multiplier(acc + bias, m, shift)
//! + zp, lo, hi)` with NNAPI's rounding, eight channels per AVX2 step or sixteen per
//! AVX-512 step, the same integers as [`multiply_by_quantized_multiplier`] for every input.
//!
//! The per-channel constants are prepared once ([`Requant::new`]): the left and right
//! shifts split, the rounding masks of the right shifts and their halves; a stage whose
//! shifts are all right shifts, and whose multipliers are never `i32::MIN`, runs a loop
//! without the left shift and the saturating case. A call runs a block of rows (pixels),
//! channel step by channel step, so each step's constants are loaded once per block, not
//! once per row; on AVX2 a row whose channel count is not a multiple of eight ends with
//! one step over its last eight channels (overlapping the one before: the same integers
//! stored twice), not with plain code.
//!
//! gemmlowp's `SaturatingRoundingDoublingHighMul` nudges the 64-bit product `ab` by
//! `2^30` (or `1 - 2^30` when negative) and divides by `2^31` truncating toward zero; both
//! cases are `floor((ab + 2^30) / 2^31)`, so a lane is one add and one shift of its
//! product ([`x86::srdhm_avx2`]). The lane primitives are shared with the quantised
//! element-wise kernels.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;
use std::thread::LocalKey;

use super::elementwise::quantize_simd::PreluQuant;

/// A per-thread memo of built output stages, keyed by the words of everything they are
/// built from (so a hit is the same stage, bit for bit).
pub(crate) type Memo<V> = RefCell<HashMap<Vec<u32>, Rc<V>, BuildHasherDefault<WordHasher>>>;

/// A multiply-rotate hash of the key's bytes eight at a time (the default SipHash was
/// a third of a lookup; the keys are the program's own, a collision costs only a compare).
#[derive(Default)]
pub(crate) struct WordHasher(u64);

impl WordHasher {
    /// Words of a long key the hash reads (a key is compared whole on a hit anyway, so
    /// hashing a sample of it only risks a compare, and a layer's key runs to hundreds
    /// of words: per-channel constants, read on every execution). Eight spread over a
    /// layer's biases and multipliers tell its layers apart; 32 took a tenth of a small
    /// layer's run (each word one multiply on a dependent chain).
    const SAMPLE: usize = 8;

    /// Mixes in up to eight bytes (a short chunk, the key's tail, zero-padded).
    #[inline(always)]
    fn mix(&mut self, c: &[u8]) {
        // A whole word is read as one (a byte copy per word was most of a lookup's hash).
        let w = match <[u8; 8]>::try_from(c) {
            Ok(w) => w,
            Err(_) => {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                w
            }
        };
        self.0 =
            (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let words = bytes.len().div_ceil(8);
        if words <= 2 * Self::SAMPLE {
            bytes.chunks(8).for_each(|c| self.mix(c));
            return;
        }
        // The length, the first and last words, and words spread evenly between.
        self.mix(&(bytes.len() as u64).to_le_bytes());
        let step = words / Self::SAMPLE;
        let last = bytes.len().saturating_sub(8);
        for at in (0..Self::SAMPLE).map(|i| i * step * 8).chain([last]) {
            self.mix(&bytes[at..(at + 8).min(bytes.len())]);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Entries a [`Memo`] keeps before it starts over (a model has a few hundred layers).
const MEMO_ENTRIES: usize = 1024;

thread_local! {
    /// The buffer [`memoised`] writes keys into, kept between lookups: a lookup that hits
    /// (every run of a layer but its first) allocates nothing. Taken out for the duration
    /// of a lookup (a nested one, from a `build`, finds it empty and grows its own).
    static KEY: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The stage `build` makes from what `key` describes (the words it appends), built once
/// per thread and kept in `memo` (the engine runs a model's layers on one thread,
/// execution after execution: a layer's multipliers, shifts and vector constants are
/// worked out on its first run, not on every one). Failures are not kept.
pub(crate) fn memoised<V: 'static, E>(
    memo: &'static LocalKey<Memo<V>>,
    key: impl FnOnce(&mut Vec<u32>),
    build: impl FnOnce() -> Result<V, E>,
) -> Result<Rc<V>, E> {
    let mut words = KEY.take();
    words.clear();
    key(&mut words);
    let hit = memo.with_borrow(|m| m.get(words.as_slice()).cloned());
    let got = match hit {
        Some(v) => Ok(v),
        None => build().map(|v| {
            let v = Rc::new(v);
            memo.with_borrow_mut(|m| {
                if m.len() >= MEMO_ENTRIES {
                    m.clear();
                }
                m.insert(words.clone(), v.clone());
            });
            v
        }),
    };
    KEY.set(words);
    got
}
use super::isa::{isa, Isa};
use super::quant::{multiply_by_quantized_multiplier, QuantElem};

/// A quantised REQUANTIZE or REQUANTIZE_PRELU fused into the output stage (the compiler
/// folds one that reads a quantised convolution's output into the convolution): each
/// requantised value, an integer of the intermediate tensor's type, is mapped by the
/// fused op's float32 arithmetic ([`PreluQuant`]: DEQUANTIZE with the intermediate's
/// quantisation, PRELU with the channel's slope, QUANTIZE to the output's) and clamped to
/// `[lo, hi]` (REQUANTIZE's fused activation), before it is narrowed and stored. A
/// REQUANTIZE is the same with every slope 1 (`v * 1 == v` for every float).
#[derive(Debug, Clone, PartialEq)]
pub struct Epilogue {
    /// The fused op's quantisations.
    prelu: PreluQuant,
    /// One slope per channel, padded with zeros to a multiple of sixteen.
    alpha: Vec<f32>,
    /// Whether the vector lanes may round and clamp in integers
    /// ([`PreluQuant::bounded_over`]).
    bounded: bool,
    /// Lower clamp of the result.
    lo: i32,
    /// Upper clamp of the result.
    hi: i32,
}

impl Epilogue {
    /// The epilogue of `prelu` over `channels` channels whose intermediate values lie in
    /// `input` (the intermediate type's range) and whose outputs are of the type of range
    /// `output`, the slope of channel `c` being `alpha[c % alpha.len()]` (1 if `alpha` is
    /// empty), the result clamped to `[lo, hi]`.
    pub(crate) fn new(
        prelu: PreluQuant,
        (input, output): ((i32, i32), (i32, i32)),
        alpha: &[f32],
        channels: usize,
        (lo, hi): (i32, i32),
    ) -> Self {
        let mut slopes: Vec<f32> = (0..channels)
            .map(|c| alpha.get(c % alpha.len().max(1)).copied().unwrap_or(1.0))
            .collect();
        // The bounded lanes leave the output's clamp to this one inside it.
        let inside = prelu.out.lo <= lo as f32 && hi as f32 <= prelu.out.hi;
        let bounded = inside && prelu.bounded_over(input, output, &slopes);
        slopes.resize(channels.div_ceil(16) * 16, 0.0);
        Epilogue {
            prelu,
            alpha: slopes,
            bounded,
            lo,
            hi,
        }
    }

    /// Appends the words of everything the epilogue is (a [`memoised`] key).
    pub(crate) fn key(&self, w: &mut Vec<u32>) {
        let p = &self.prelu;
        let o = &p.out;
        w.extend([p.in_scale, o.scale, o.zp, o.lo, o.hi].map(f32::to_bits));
        w.extend([p.in_zp, self.lo, self.hi, i32::from(self.bounded)].map(|v| v as u32));
        w.push(self.alpha.len() as u32);
        w.extend_from_slice(bytemuck::cast_slice(&self.alpha));
    }

    /// The result of intermediate value `q` of channel `c`.
    #[inline(always)]
    fn one(&self, q: i32, c: usize) -> i32 {
        let a = self.alpha.get(c).copied().unwrap_or(0.0);
        self.prelu.value(q, a).max(self.lo).min(self.hi)
    }
}

/// The per-channel constants in the vector loops' form: one entry per channel, padded
/// with zeros to a multiple of sixteen (an AVX-512 step reads sixteen from any multiple of
/// sixteen, an AVX2 step eight from any channel up to the last eight).
#[derive(Debug, Clone, Default)]
pub(crate) struct Lanes {
    /// Bias added to the sum.
    bias: Vec<i32>,
    /// Q31 multiplier.
    mult: Vec<i32>,
    /// `max(shift, 0)`.
    left: Vec<i32>,
    /// `max(-shift, 0)`.
    right: Vec<i32>,
    /// `2^right - 1`: the remainder mask of the rounding right shift.
    mask: Vec<i32>,
    /// `mask >> 1`: the rounding threshold of a non-negative value.
    half: Vec<i32>,
    /// The one-rounding form of a stage without left shifts (see [`wide_constants`]):
    /// per block of sixteen channels, the 64-bit addend, shift and negative adjustment
    /// of its even channels, then of its odd ones (`[k; 8][k; 8][s; 8][s; 8][a; 8][a; 8]`).
    wide: Vec<i64>,
}

/// The 64-bit constants that let a stage without left shifts round once. With the
/// product `p = x * m` (exact in 64 bits) and right shift `e`, gemmlowp's two roundings,
/// `y = floor((p + 2^30) / 2^31)` and then `floor((y + 2^(e-1) - [y < 0]) / 2^e)` (the
/// rounding division for `e > 0`), are one floor division, since
/// `floor((floor(a / b) + c) / d) = floor((a + c * b) / (b * d))`: the result is
/// `(p + k - [p < -2^30] * a) >> s` with `k = 2^30 + 2^(30 + e)`, `a = 2^31` and
/// `s = 31 + e` (for `e = 0`: `k = 2^30`, `a = 0`, `s = 31`). As `|p| <= 2^62` and
/// `k <= 2^30 + 2^61`, nothing overflows. Laid out as [`Lanes::wide`] for `right` (one
/// shift per channel, a multiple of sixteen long).
fn wide_constants(right: &[i32]) -> Vec<i64> {
    let mut out = Vec::with_capacity(right.len() * 3);
    for block in right.chunks(16) {
        let e = |i: usize| i64::from(block.get(i).copied().unwrap_or(0));
        let k = |e: i64| (1i64 << 30) + if e > 0 { 1i64 << (30 + e) } else { 0 };
        let a = |e: i64| if e > 0 { 1i64 << 31 } else { 0 };
        for f in [k, |e: i64| 31 + e, a] {
            out.extend((0..8).map(|i| f(e(2 * i))));
            out.extend((0..8).map(|i| f(e(2 * i + 1))));
        }
    }
    out
}

/// The per-channel constants, one entry per output channel, and their vector form.
#[derive(Debug, Clone, Default)]
pub struct Requant {
    /// Bias added to the sum.
    bias: Vec<i32>,
    /// Q31 multiplier.
    mult: Vec<i32>,
    /// Shift, positive to the left.
    shift: Vec<i32>,
    /// The same for the vector loops (`None` unless every shift is within `[-31, 31]`,
    /// the vector loops' range, and the three lists are as long).
    lanes: Option<Lanes>,
    /// Output zero point.
    zp: i32,
    /// Lower clamp.
    lo: i32,
    /// Upper clamp.
    hi: i32,
    /// Some shift is to the left, or some multiplier is `i32::MIN` (the one saturating
    /// case of the high multiply).
    full: bool,
    /// A fused op applied to each result before it is stored.
    epilogue: Option<Epilogue>,
}

impl Requant {
    /// The stage for channels with these constants (`bias`, `mult` and `shift` one entry
    /// per channel; a channel past the shortest of them is not written by the rows).
    pub fn new(bias: Vec<i32>, mult: Vec<i32>, shift: Vec<i32>, zp: i32, lo: i32, hi: i32) -> Self {
        let vector_ok = shift.iter().all(|s| (-31..=31).contains(s))
            && bias.len() == mult.len()
            && mult.len() == shift.len();
        let lanes = vector_ok.then(|| {
            let padded = |v: Vec<i32>| {
                let mut v = v;
                v.resize(v.len().div_ceil(16) * 16, 0);
                v
            };
            let right: Vec<i32> = shift.iter().map(|&s| (-s).max(0)).collect();
            let mask: Vec<i32> = right.iter().map(|&r| ((1i64 << r) - 1) as i32).collect();
            Lanes {
                bias: padded(bias.clone()),
                mult: padded(mult.clone()),
                left: padded(shift.iter().map(|&s| s.max(0)).collect()),
                half: padded(mask.iter().map(|&m| m >> 1).collect()),
                wide: wide_constants(&padded(right.clone())),
                right: padded(right),
                mask: padded(mask),
            }
        });
        Self {
            full: shift.iter().any(|&s| s > 0) || mult.contains(&i32::MIN),
            lanes,
            bias,
            mult,
            shift,
            zp,
            lo,
            hi,
            epilogue: None,
        }
    }

    /// The stage with `epilogue` applied to each result (the clamp `[lo, hi]` being
    /// then the intermediate's).
    pub fn with_epilogue(self, epilogue: Option<Epilogue>) -> Self {
        Requant { epilogue, ..self }
    }

    /// The vector form of the stage, if its shifts allow it, and its kind: `(lanes,
    /// full, epilogue)` (`full`: some shift is to the left or some multiplier is
    /// `i32::MIN`), for kernels that requantise their sums in registers.
    pub(crate) fn vector_form(&self) -> Option<(&Lanes, bool, bool)> {
        Some((self.lanes.as_ref()?, self.full, self.epilogue.is_some()))
    }

    /// Start values `start` (one per column, whole panels) with each channel's bias
    /// added, into `out` (cleared first): for a GEMM whose sums then go to the vector
    /// stages' `finish`, which adds no bias.
    pub(crate) fn with_bias(&self, start: &[i32], out: &mut Vec<i32>) {
        out.clear();
        out.extend(
            start
                .iter()
                .enumerate()
                .map(|(j, &s)| s.wrapping_add(self.bias.get(j).copied().unwrap_or(0))),
        );
    }

    /// Channels the stage has constants for (a channel past them is not written).
    pub(crate) fn channels(&self) -> usize {
        self.bias.len().min(self.mult.len()).min(self.shift.len())
    }

    /// One output of channel `c`, as the reference computes it.
    #[inline(always)]
    pub(crate) fn one<T: QuantElem>(&self, acc: i32, c: usize) -> T {
        let at = |v: &[i32]| v.get(c).copied().unwrap_or(0);
        let v = multiply_by_quantized_multiplier(
            acc.wrapping_add(at(&self.bias)),
            at(&self.mult),
            at(&self.shift),
        )
        .wrapping_add(self.zp);
        // With lo <= hi the reference's clamps (max-then-min or min-then-max) agree.
        let v = v.max(self.lo).min(self.hi);
        match &self.epilogue {
            Some(e) => T::saturate_from_i32(e.one(v, c)),
            None => T::saturate_from_i32(v),
        }
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
        // The whole rows, then a last partial row (as far as both go) as a block of one.
        let len = sums.len().min(dst.len());
        let whole = len / width * width;
        let (sums, dst) = (&sums[..len], &mut dst[..len]);
        let ((rows, last), (rows_dst, last_dst)) = (sums.split_at(whole), dst.split_at_mut(whole));
        self.block_at(level, rows, rows_dst, width);
        if whole < len {
            self.block_at(level, last, last_dst, len - whole);
        }
    }

    /// The stage over whole rows of `width` channels (`sums` and `dst` as long, a
    /// multiple of `width`, at least 1).
    fn block_at<T: QuantElem>(&self, level: Isa, sums: &[i32], dst: &mut [T], width: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(lanes) = &self.lanes {
            // (each call) the level is capped at the CPU's, so it has AVX-512 F and BW at
            // Isa::Avx512 and above, AVX2 at Isa::Avx2 and above.
            // SAFETY: by the above.
            let done = unsafe {
                match (level, self.full, self.epilogue.is_some()) {
                    (Isa::Scalar, _, _) => false,
                    (Isa::Avx2, false, false) => {
                        x86::rows_avx2::<T, false, false>(self, lanes, sums, dst, width)
                    }
                    (Isa::Avx2, true, false) => {
                        x86::rows_avx2::<T, true, false>(self, lanes, sums, dst, width)
                    }
                    (Isa::Avx2, false, true) => {
                        x86::rows_avx2::<T, false, true>(self, lanes, sums, dst, width)
                    }
                    (Isa::Avx2, true, true) => {
                        x86::rows_avx2::<T, true, true>(self, lanes, sums, dst, width)
                    }
                    (_, false, false) => {
                        x86::rows_avx512::<T, false, false>(self, lanes, sums, dst, width)
                    }
                    (_, true, false) => {
                        x86::rows_avx512::<T, true, false>(self, lanes, sums, dst, width)
                    }
                    (_, false, true) => {
                        x86::rows_avx512::<T, false, true>(self, lanes, sums, dst, width)
                    }
                    (_, true, true) => {
                        x86::rows_avx512::<T, true, true>(self, lanes, sums, dst, width)
                    }
                }
            };
            if done {
                return;
            }
        }
        let _ = level;
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

/// Vector lanes of the output stage (and of the quantised element-wise kernels).
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::{Lanes, Requant};
    use crate::kernels::elementwise::quantize_simd::x86::{Prelu16, Prelu8};
    use crate::kernels::quant::QuantElem;
    use std::arch::x86_64::*;

    /// gemmlowp's `SaturatingRoundingDoublingHighMul` of each lane, except that
    /// `i32::MIN x i32::MIN` gives `i32::MIN` (the caller saturates it where it can occur):
    /// `floor((x * m + 2^30) / 2^31)` over the 64-bit products of even and odd lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn srdhm_avx2(x: __m256i, m: __m256i) -> __m256i {
        let half = _mm256_set1_epi64x(1 << 30);
        // A logical shift: its low 32 bits are the arithmetic shift's, and the quotient
        // fits 32 bits.
        let even = _mm256_srli_epi64(_mm256_add_epi64(_mm256_mul_epi32(x, m), half), 31);
        // Odd lanes: bits 31..62 of the sum moved to the qword's high half.
        let odd = _mm256_slli_epi64(
            _mm256_add_epi64(
                _mm256_mul_epi32(_mm256_srli_epi64(x, 32), _mm256_srli_epi64(m, 32)),
                half,
            ),
            1,
        );
        _mm256_blend_epi32::<0b1010_1010>(even, odd)
    }

    /// gemmlowp's `RoundingDivideByPOT` of each lane by `right` (each in `0..=31`), `mask`
    /// being `2^right - 1`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn rdbpot_avx2(r: __m256i, right: __m256i, mask: __m256i) -> __m256i {
        let rem = _mm256_and_si256(r, mask);
        // The threshold is half the mask, plus one for a negative value.
        let thr = _mm256_sub_epi32(_mm256_srli_epi32(mask, 1), _mm256_srai_epi32(r, 31));
        let up = _mm256_cmpgt_epi32(rem, thr);
        _mm256_sub_epi32(_mm256_srav_epi32(r, right), up)
    }

    /// Eight lanes stored into `lanes` (eight elements), one-byte types by saturating
    /// packs (the clamp of `saturate_from_i32` for i8 and u8).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn store8_avx2<T: QuantElem>(v: __m256i, lanes: &mut [T]) {
        let Ok(lanes) = <&mut [T; 8]>::try_from(lanes) else {
            return;
        };
        if std::mem::size_of::<T>() == 1 {
            let v16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
            let v8 = if T::MIN < 0 {
                _mm_packs_epi16(v16, v16)
            } else {
                _mm_packus_epi16(v16, v16)
            };
            // `lanes` is eight one-byte elements (T is u8 or i8: a one-byte QuantElem), one
            // unaligned 64-bit store.
            // SAFETY: by the above.
            unsafe { _mm_storel_epi64(lanes.as_mut_ptr().cast(), v8) };
        } else {
            let mut out = [0i32; 8];
            // SAFETY: `out` is eight i32, one unaligned 256-bit store.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) };
            for (d, &v) in lanes.iter_mut().zip(&out) {
                *d = T::saturate_from_i32(v);
            }
        }
    }

    /// The first `n <= 8` lanes of `v` stored as the one-byte `T` at `at`, saturating.
    ///
    /// # Safety
    /// `T` is one byte wide and `at` has `n` writable bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn store_bytes8<T: QuantElem>(v: __m256i, at: *mut T, n: usize) {
        let v16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let v8 = if T::MIN < 0 {
            _mm_packs_epi16(v16, v16)
        } else {
            _mm_packus_epi16(v16, v16)
        };
        let bytes = (_mm_cvtsi128_si64(v8) as u64).to_le_bytes();
        // SAFETY: `at` has `n` writable bytes (the caller's), `n.min(8)` are written.
        unsafe {
            if n >= 8 {
                _mm_storel_epi64(at.cast(), v8);
            } else {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), at.cast::<u8>(), n);
            }
        }
    }

    /// [`srdhm_avx2`] on 512-bit vectors.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn srdhm_avx512(x: __m512i, m: __m512i) -> __m512i {
        let half = _mm512_set1_epi64(1 << 30);
        let even = _mm512_srli_epi64(_mm512_add_epi64(_mm512_mul_epi32(x, m), half), 31);
        let odd = _mm512_slli_epi64(
            _mm512_add_epi64(
                _mm512_mul_epi32(_mm512_srli_epi64(x, 32), _mm512_srli_epi64(m, 32)),
                half,
            ),
            1,
        );
        _mm512_mask_blend_epi32(0xAAAA, even, odd)
    }

    /// [`rdbpot_avx2`] on 512-bit vectors.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn rdbpot_avx512(r: __m512i, right: __m512i, mask: __m512i) -> __m512i {
        let rem = _mm512_and_si512(r, mask);
        let thr = _mm512_sub_epi32(_mm512_srli_epi32(mask, 1), _mm512_srai_epi32(r, 31));
        let up = _mm512_cmpgt_epi32_mask(rem, thr);
        let v = _mm512_srav_epi32(r, right);
        _mm512_mask_add_epi32(v, up, v, _mm512_set1_epi32(1))
    }

    /// The first `n <= 16` lanes of `v` stored as the one-byte `T` at `at`, saturating.
    ///
    /// # Safety
    /// `T` is one byte wide and `at` has `n` writable bytes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(crate) unsafe fn store_bytes16<T: QuantElem>(v: __m512i, at: *mut T, n: usize) {
        let mask = ((1u32 << n.min(16)) - 1) as u16;
        // The narrowing stores are AVX-512F (the 128-bit masked byte store would need
        // AVX-512VL, which these functions do not enable: it ran as a call per store).
        // SAFETY: the masked store writes only the first `n` bytes (the caller's).
        unsafe {
            if T::MIN < 0 {
                _mm512_mask_cvtsepi32_storeu_epi8(at.cast(), mask, v);
            } else {
                let v = _mm512_max_epi32(v, _mm512_setzero_si512());
                _mm512_mask_cvtusepi32_storeu_epi8(at.cast(), mask, v);
            }
        }
    }

    /// The lanes of `mask` (at most 16, the first ones) stored into `lanes`, one-byte
    /// types by saturating narrowing.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(crate) fn store16_avx512<T: QuantElem>(v: __m512i, lanes: &mut [T]) {
        if std::mem::size_of::<T>() == 1 {
            let n = lanes.len().min(16);
            // SAFETY: T is a one-byte QuantElem (u8 or i8), so `lanes` is `n` bytes or more.
            unsafe { store_bytes16(v, lanes.as_mut_ptr(), n) };
        } else {
            let mut out = [0i32; 16];
            // SAFETY: `out` is sixteen i32, one unaligned 512-bit store.
            unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), v) };
            for (d, &v) in lanes.iter_mut().zip(&out) {
                *d = T::saturate_from_i32(v);
            }
        }
    }

    /// Eight words of `v` from `at` (the caller keeps `at + 8 <= v.len()`; past it, zeros).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn ld8(v: &[i32], at: usize) -> __m256i {
        match v.get(at..at + 8) {
            // SAFETY: eight i32, one unaligned 256-bit load.
            Some(w) => unsafe { _mm256_loadu_si256(w.as_ptr().cast()) },
            None => _mm256_setzero_si256(),
        }
    }

    /// Sixteen words of `v` from `at` (the caller keeps `at + 16 <= v.len()`; past it,
    /// zeros).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn ld16(v: &[i32], at: usize) -> __m512i {
        match v.get(at..at + 16) {
            // SAFETY: sixteen i32, one unaligned 512-bit load.
            Some(w) => unsafe { _mm512_loadu_si512(w.as_ptr().cast()) },
            None => _mm512_setzero_si512(),
        }
    }

    /// Sixteen lanes of `s` (at most sixteen words), zero past its end (a masked load
    /// touches no lane the mask leaves out).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_16(s: &[i32]) -> __m512i {
        if let Ok(a) = <&[i32; 16]>::try_from(s) {
            // SAFETY: sixteen i32, one unaligned 512-bit load.
            return unsafe { _mm512_loadu_si512(a.as_ptr().cast()) };
        }
        let mask = ((1u32 << s.len().min(16)) - 1) as u16;
        // SAFETY: only the lanes of `mask` are read, and each lies inside `s`.
        unsafe { _mm512_maskz_loadu_epi32(mask, s.as_ptr().cast()) }
    }

    /// The per-call constants of the stage on sixteen lanes (zero point, clamps, the
    /// epilogue's); [`Stage512::step`] adds a step's per-channel ones.
    /// Whether a stage storing into `T` clamps: not when it stores bytes by saturating
    /// narrowing ([`store_bytes16`], [`store_bytes8`]) and its clamp is the whole type's
    /// range (a layer without an activation), which the narrowing gives; always before
    /// an epilogue (it maps the intermediate type's values).
    fn clamps<T: QuantElem>(q: &Requant) -> bool {
        size_of::<T>() != 1 || q.epilogue.is_some() || q.lo > T::MIN || q.hi < T::MAX
    }

    pub(crate) struct Stage512<'a> {
        q: &'a Requant,
        l: &'a Lanes,
        zp: __m512i,
        lo: __m512i,
        hi: __m512i,
        prelu: Option<Prelu16>,
        bounded: bool,
        e_lo: __m512i,
        e_hi: __m512i,
        clamp: bool,
    }

    /// The constants of channels `c0..c0 + 16` of a stage, in registers.
    pub(crate) struct Step512 {
        bias: __m512i,
        m: __m512i,
        m_odd: __m512i,
        k: [__m512i; 2],
        s: [__m512i; 2],
        adj: [__m512i; 2],
        left: __m512i,
        right: __m512i,
        mask: __m512i,
        half: __m512i,
        alpha: __m512,
    }

    impl<'a> Stage512<'a> {
        /// The stage `q` (its vector constants `l`) storing into `T`.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn new<T: QuantElem>(q: &'a Requant, l: &'a Lanes) -> Self {
            let epi = q.epilogue.as_ref();
            let (e_lo, e_hi) = epi.map_or((0, 0), |e| (e.lo, e.hi));
            Stage512 {
                q,
                l,
                zp: _mm512_set1_epi32(q.zp),
                lo: _mm512_set1_epi32(q.lo),
                hi: _mm512_set1_epi32(q.hi),
                prelu: epi.map(|e| Prelu16::new(&e.prelu)),
                bounded: epi.is_some_and(|e| e.bounded),
                clamp: clamps::<T>(q),
                e_lo: _mm512_set1_epi32(e_lo),
                e_hi: _mm512_set1_epi32(e_hi),
            }
        }

        /// Channels the stage has constants for.
        pub(crate) fn channels(&self) -> usize {
            self.q.bias.len()
        }

        /// The constants of channels `c0..c0 + 16` (`c0` a multiple of sixteen; lanes
        /// past the stage's channels are zeros).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn step(&self, c0: usize) -> Step512 {
            let l = self.l;
            let m = ld16(&l.mult, c0);
            let w = |i: usize| match l.wide.get(c0 * 3 + i * 8..c0 * 3 + i * 8 + 8) {
                // SAFETY: eight i64, one unaligned 512-bit load.
                Some(v) => unsafe { _mm512_loadu_si512(v.as_ptr().cast()) },
                None => _mm512_setzero_si512(),
            };
            let alpha = match self
                .q
                .epilogue
                .as_ref()
                .and_then(|e| e.alpha.get(c0..c0 + 16))
            {
                // SAFETY: sixteen floats, one unaligned 512-bit load.
                Some(a) => unsafe { _mm512_loadu_ps(a.as_ptr()) },
                None => _mm512_setzero_ps(),
            };
            Step512 {
                bias: ld16(&l.bias, c0),
                m,
                m_odd: _mm512_shuffle_epi32::<0xF5>(m),
                k: [w(0), w(1)],
                s: [w(2), w(3)],
                adj: [w(4), w(5)],
                left: ld16(&l.left, c0),
                right: ld16(&l.right, c0),
                mask: ld16(&l.mask, c0),
                half: ld16(&l.half, c0),
                alpha,
            }
        }

        /// The stored integers of sixteen channels' sums `acc` (bias not yet added);
        /// `FULL`: with the left shifts and the saturating case; `EPI`: with the
        /// stage's epilogue.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn apply<const FULL: bool, const EPI: bool>(
            &self,
            st: &Step512,
            acc: __m512i,
        ) -> __m512i {
            self.finish::<FULL, EPI>(st, _mm512_add_epi32(acc, st.bias))
        }

        /// [`Stage512::apply`] of sums that include the bias already (a GEMM whose
        /// start values hold it).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn finish<const FULL: bool, const EPI: bool>(
            &self,
            st: &Step512,
            x: __m512i,
        ) -> __m512i {
            let v = if FULL {
                let x = _mm512_sllv_epi32(x, st.left);
                // `srdhm_avx512` with the multiplier's odd lanes moved once per step.
                let h = _mm512_set1_epi64(1 << 30);
                let even = _mm512_srli_epi64(_mm512_add_epi64(_mm512_mul_epi32(x, st.m), h), 31);
                let odd = _mm512_slli_epi64(
                    _mm512_add_epi64(
                        _mm512_mul_epi32(_mm512_shuffle_epi32::<0xF5>(x), st.m_odd),
                        h,
                    ),
                    1,
                );
                let mut r = _mm512_mask_blend_epi32(0xAAAA, even, odd);
                let min = _mm512_set1_epi32(i32::MIN);
                let both = _mm512_cmpeq_epi32_mask(x, min) & _mm512_cmpeq_epi32_mask(st.m, min);
                r = _mm512_mask_blend_epi32(both, r, _mm512_set1_epi32(i32::MAX));
                // `rdbpot_avx512` with the threshold's half precomputed.
                let rem = _mm512_and_si512(r, st.mask);
                let thr = _mm512_sub_epi32(st.half, _mm512_srai_epi32(r, 31));
                let up = _mm512_cmpgt_epi32_mask(rem, thr);
                let v = _mm512_srav_epi32(r, st.right);
                _mm512_mask_add_epi32(v, up, v, _mm512_set1_epi32(1))
            } else {
                // One rounding of the 64-bit products ([`super::wide_constants`]): even
                // channels in the low halves of the qwords, odd ones moved there.
                let neg = _mm512_set1_epi64(-(1 << 30));
                let round = |p: __m512i, i: usize| {
                    let t = _mm512_add_epi64(p, st.k[i]);
                    let t = _mm512_mask_sub_epi64(t, _mm512_cmplt_epi64_mask(p, neg), t, st.adj[i]);
                    _mm512_srav_epi64(t, st.s[i])
                };
                let even = round(_mm512_mul_epi32(x, st.m), 0);
                let odd = round(
                    _mm512_mul_epi32(_mm512_shuffle_epi32::<0xF5>(x), st.m_odd),
                    1,
                );
                // Each odd result's low half into the odd lane above it.
                _mm512_mask_shuffle_epi32::<0xA0>(even, 0xAAAA, odd)
            };
            let mut v = _mm512_add_epi32(v, self.zp);
            if self.clamp {
                v = _mm512_min_epi32(_mm512_max_epi32(v, self.lo), self.hi);
            }
            if let (true, Some(p)) = (EPI, &self.prelu) {
                v = match self.bounded {
                    true => p.apply::<true>(v, st.alpha),
                    false => p.apply::<false>(v, st.alpha),
                };
                v = _mm512_min_epi32(_mm512_max_epi32(v, self.e_lo), self.e_hi);
            }
            v
        }
    }

    /// The stage over the whole rows of `width` channels in `sums` and `dst` (as long),
    /// sixteen channels a step (the last step masked), each step's constants loaded once
    /// for all the rows; `FULL`: with the left shifts and the saturating case; `EPI`:
    /// with the stage's epilogue. Returns true (it always applies).
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn rows_avx512<T: QuantElem, const FULL: bool, const EPI: bool>(
        q: &Requant,
        l: &Lanes,
        sums: &[i32],
        dst: &mut [T],
        width: usize,
    ) -> bool {
        let stage = Stage512::new::<T>(q, l);
        let n = width.min(stage.channels());
        let rows = sums.len().min(dst.len()) / width.max(1);
        for c0 in (0..n).step_by(16) {
            let k = (n - c0).min(16);
            let st = stage.step(c0);
            for r in 0..rows {
                let at = r * width + c0;
                let (Some(s), Some(d)) = (sums.get(at..at + k), dst.get_mut(at..at + k)) else {
                    continue;
                };
                store16_avx512(stage.apply::<FULL, EPI>(&st, load_16(s)), d);
            }
        }
        true
    }

    /// [`Stage512`] on eight lanes (AVX2: the two roundings of the reference, there being
    /// no 64-bit arithmetic shift).
    pub(crate) struct Stage256<'a> {
        q: &'a Requant,
        l: &'a Lanes,
        zp: __m256i,
        lo: __m256i,
        hi: __m256i,
        prelu: Option<Prelu8>,
        bounded: bool,
        e_lo: __m256i,
        e_hi: __m256i,
        clamp: bool,
    }

    /// The constants of channels `c0..c0 + 8` of a stage, in registers.
    pub(crate) struct Step256 {
        bias: __m256i,
        m: __m256i,
        m_odd: __m256i,
        left: __m256i,
        right: __m256i,
        mask: __m256i,
        half: __m256i,
        alpha: __m256,
    }

    impl<'a> Stage256<'a> {
        /// The stage `q` (its vector constants `l`) storing into `T`.
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn new<T: QuantElem>(q: &'a Requant, l: &'a Lanes) -> Self {
            let epi = q.epilogue.as_ref();
            let (e_lo, e_hi) = epi.map_or((0, 0), |e| (e.lo, e.hi));
            Stage256 {
                q,
                l,
                zp: _mm256_set1_epi32(q.zp),
                lo: _mm256_set1_epi32(q.lo),
                hi: _mm256_set1_epi32(q.hi),
                prelu: epi.map(|e| Prelu8::new(&e.prelu)),
                bounded: epi.is_some_and(|e| e.bounded),
                clamp: clamps::<T>(q),
                e_lo: _mm256_set1_epi32(e_lo),
                e_hi: _mm256_set1_epi32(e_hi),
            }
        }

        /// Channels the stage has constants for.
        pub(crate) fn channels(&self) -> usize {
            self.q.bias.len()
        }

        /// The constants of channels `c0..c0 + 8` (zeros past the stage's channels).
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn step(&self, c0: usize) -> Step256 {
            let l = self.l;
            let m = ld8(&l.mult, c0);
            let alpha = match self
                .q
                .epilogue
                .as_ref()
                .and_then(|e| e.alpha.get(c0..c0 + 8))
            {
                // SAFETY: eight floats, one unaligned 256-bit load.
                Some(a) => unsafe { _mm256_loadu_ps(a.as_ptr()) },
                None => _mm256_setzero_ps(),
            };
            Step256 {
                bias: ld8(&l.bias, c0),
                m,
                m_odd: _mm256_shuffle_epi32::<0xF5>(m),
                left: ld8(&l.left, c0),
                right: ld8(&l.right, c0),
                mask: ld8(&l.mask, c0),
                half: ld8(&l.half, c0),
                alpha,
            }
        }

        /// The stored integers of eight channels' sums `acc` (bias not yet added);
        /// `FULL` and `EPI` as for [`Stage512::apply`].
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn apply<const FULL: bool, const EPI: bool>(
            &self,
            st: &Step256,
            acc: __m256i,
        ) -> __m256i {
            self.finish::<FULL, EPI>(st, _mm256_add_epi32(acc, st.bias))
        }

        /// [`Stage256::apply`] of sums that include the bias already.
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn finish<const FULL: bool, const EPI: bool>(
            &self,
            st: &Step256,
            x: __m256i,
        ) -> __m256i {
            let x = if FULL {
                _mm256_sllv_epi32(x, st.left)
            } else {
                x
            };
            // `srdhm_avx2` with the multiplier's odd lanes moved once per step (a shuffle:
            // after a 64-bit shift LLVM expands `vpmuldq` into three `vpmuludq`).
            let h = _mm256_set1_epi64x(1 << 30);
            let even = _mm256_srli_epi64(_mm256_add_epi64(_mm256_mul_epi32(x, st.m), h), 31);
            let odd = _mm256_slli_epi64(
                _mm256_add_epi64(
                    _mm256_mul_epi32(_mm256_shuffle_epi32::<0xF5>(x), st.m_odd),
                    h,
                ),
                1,
            );
            let mut r = _mm256_blend_epi32::<0b1010_1010>(even, odd);
            if FULL {
                let min = _mm256_set1_epi32(i32::MIN);
                let both =
                    _mm256_and_si256(_mm256_cmpeq_epi32(x, min), _mm256_cmpeq_epi32(st.m, min));
                r = _mm256_blendv_epi8(r, _mm256_set1_epi32(i32::MAX), both);
            }
            // `rdbpot_avx2` with the threshold's half precomputed.
            let rem = _mm256_and_si256(r, st.mask);
            let thr = _mm256_sub_epi32(st.half, _mm256_srai_epi32(r, 31));
            let up = _mm256_cmpgt_epi32(rem, thr);
            let v = _mm256_sub_epi32(_mm256_srav_epi32(r, st.right), up);
            let mut v = _mm256_add_epi32(v, self.zp);
            if self.clamp {
                v = _mm256_min_epi32(_mm256_max_epi32(v, self.lo), self.hi);
            }
            if let (true, Some(p)) = (EPI, &self.prelu) {
                v = match self.bounded {
                    true => p.apply::<true>(v, st.alpha),
                    false => p.apply::<false>(v, st.alpha),
                };
                v = _mm256_min_epi32(_mm256_max_epi32(v, self.e_lo), self.e_hi);
            }
            v
        }
    }

    /// The stage over the whole rows of `width` channels eight channels a step (a row
    /// of eight or more that is not a multiple of eight ending with a step over its last
    /// eight), each step's constants loaded once for all the rows; `FULL` as for
    /// [`rows_avx512`]. Returns false (nothing written) for rows of fewer than eight
    /// channels.
    #[target_feature(enable = "avx2")]
    pub(super) fn rows_avx2<T: QuantElem, const FULL: bool, const EPI: bool>(
        q: &Requant,
        l: &Lanes,
        sums: &[i32],
        dst: &mut [T],
        width: usize,
    ) -> bool {
        let stage = Stage256::new::<T>(q, l);
        let n = width.min(stage.channels());
        if n < 8 {
            return false;
        }
        let rows = sums.len().min(dst.len()) / width.max(1);
        for step in 0..n.div_ceil(8) {
            let c0 = (step * 8).min(n - 8);
            let st = stage.step(c0);
            for r in 0..rows {
                let at = r * width + c0;
                let (Some(s), Some(d)) = (sums.get(at..at + 8), dst.get_mut(at..at + 8)) else {
                    continue;
                };
                store8_avx2(stage.apply::<FULL, EPI>(&st, ld8(s, 0)), d);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::elementwise::quantize_simd::Quantizer;
    use proptest::prelude::*;

    /// The stage of `consts` (bias, multiplier, shift) with an epilogue of these
    /// constants whose output is of the type of range `out`.
    fn with_epilogue(
        q: &Requant,
        (in_scale, in_zp): (f32, i32),
        (out_scale, out_zp): (f32, i32),
        out: (i32, i32),
        alpha: &[f32],
        (lo, hi): (i32, i32),
    ) -> Requant {
        let prelu = PreluQuant {
            in_scale,
            in_zp,
            out: Quantizer {
                scale: out_scale,
                zp: out_zp as f32,
                lo: out.0 as f32,
                hi: out.1 as f32,
            },
        };
        let channels = q.bias.len();
        let e = Epilogue::new(prelu, ((q.lo, q.hi), out), alpha, channels, (lo, hi));
        q.clone().with_epilogue(Some(e))
    }

    thread_local! {
        static TEST_MEMO: Memo<u32> = RefCell::default();
    }

    /// Long keys that differ only in words the hash does not read are still told apart
    /// (the map compares whole keys).
    #[test]
    fn memo_tells_apart_keys_that_hash_alike() {
        let key = |v: u32| {
            let mut k = vec![7u32; 1000];
            k[3] = v;
            k
        };
        let hash = |k: &Vec<u32>| {
            use std::hash::BuildHasher;
            BuildHasherDefault::<WordHasher>::default().hash_one(k)
        };
        assert_eq!(hash(&key(1)), hash(&key(2)), "word 3 is not sampled");
        for v in [1, 2, 1, 2] {
            let got = memoised(&TEST_MEMO, |w| w.extend(key(v)), || Ok::<u32, ()>(v)).unwrap();
            assert_eq!(*got, v);
        }
        assert_eq!(TEST_MEMO.with_borrow(|m| m.len()), 2);
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(256))]
        /// With an epilogue, every vector level gives the plain loop's integers (which
        /// the convolution tests hold to the two ops run apart), for both one-byte types,
        /// any slopes (NaN, infinite, huge) and scales that take either rounding path.
        #[test]
        fn requant_rows_with_an_epilogue_match_the_plain_loop(
            consts in proptest::collection::vec(
                (-5000i32..5000, 1i32 << 29..i32::MAX, -12i32..=2, any::<i32>()), 1..40),
            rows in 1usize..4,
            (in_scale, out_scale) in (
                prop_oneof![1e-3f32..4.0, Just(1e-30f32), Just(3e30f32)],
                prop_oneof![1e-3f32..4.0, Just(1e-30f32)]),
            (in_zp, out_zp) in (-128i32..128, -128i32..128),
            alpha in proptest::collection::vec(
                prop_oneof![-3.0f32..3.0, Just(f32::NAN), Just(f32::INFINITY), Just(1e30f32)], 0..40),
            (lo, span) in (-128i32..0, 0i32..255),
        ) {
            let width = consts.len();
            let q = Requant::new(
                consts.iter().map(|c| c.0).collect(),
                consts.iter().map(|c| c.1).collect(),
                consts.iter().map(|c| c.2).collect(),
                in_zp,
                -128,
                127,
            );
            let sums: Vec<i32> = (0..rows).flat_map(|r| consts.iter().map(move |c| c.3.wrapping_add(r as i32 * 77))).collect();
            let i8s = with_epilogue(&q, (in_scale, in_zp), (out_scale, out_zp), (-128, 127), &alpha, (lo, lo + span));
            let u8s = with_epilogue(&q, (in_scale, in_zp), (out_scale, out_zp + 128), (0, 255), &alpha, (lo + 128, lo + 128 + span));
            let mut want8 = vec![0i8; sums.len()];
            let mut wantu = vec![0u8; sums.len()];
            for (s, (d8, du)) in sums.chunks(width).zip(want8.chunks_mut(width).zip(wantu.chunks_mut(width))) {
                i8s.row_plain(s, d8, 0);
                u8s.row_plain(s, du, 0);
            }
            for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                let mut got8 = vec![0i8; sums.len()];
                i8s.rows_at(level, &sums, &mut got8, width);
                prop_assert_eq!(&got8, &want8, "{:?}", level);
                let mut gotu = vec![0u8; sums.len()];
                u8s.rows_at(level, &sums, &mut gotu, width);
                prop_assert_eq!(&gotu, &wantu, "{:?}", level);
            }
        }

        /// Each AVX-512 lane, unclamped, is the reference's integer for any sum and
        /// constants: the one-rounding form of stages without left shifts and the
        /// two-rounding form of the others (sums near the rounding boundaries included).
        #[test]
        #[cfg(target_arch = "x86_64")]
        fn requant_lanes_round_as_the_reference(
            lanes in proptest::collection::vec(
                (any::<i32>(), prop_oneof![any::<i32>(), Just(i32::MIN), 1i32 << 30..i32::MAX],
                 -31i32..=31, prop_oneof![any::<i32>(), -70000i32..70000, Just(i32::MIN)]),
                16),
            right_only in any::<bool>(),
        ) {
            if crate::kernels::isa::detected() < Isa::Avx512 {
                return Ok(());
            }
            let (mult, shift): (Vec<i32>, Vec<i32>) = lanes
                .iter()
                .map(|c| if right_only { (c.1.max(0), -c.2.abs()) } else { (c.1, c.2) })
                .unzip();
            let bias: Vec<i32> = lanes.iter().map(|c| c.0).collect();
            let sums: Vec<i32> = lanes.iter().map(|c| c.3).collect();
            let q = Requant::new(bias.clone(), mult.clone(), shift.clone(), 0, i32::MIN, i32::MAX);
            let want: Vec<i32> = (0..16)
                .map(|c| multiply_by_quantized_multiplier(sums[c].wrapping_add(bias[c]), mult[c], shift[c]))
                .collect();
            let mut got = [0i32; 16];
            // The CPU has AVX-512F (checked above); one unaligned 512-bit load and store of sixteen
            // words.
            // SAFETY: by the above.
            unsafe {
                let l = q.lanes.as_ref().unwrap();
                let stage = x86::Stage512::new::<i16>(&q, l);
                let st = stage.step(0);
                let acc = std::arch::x86_64::_mm512_loadu_si512(sums.as_ptr().cast());
                let v = if q.full {
                    stage.apply::<true, false>(&st, acc)
                } else {
                    stage.apply::<false, false>(&st, acc)
                };
                std::arch::x86_64::_mm512_storeu_si512(got.as_mut_ptr().cast(), v);
            }
            prop_assert_eq!(&got[..], &want[..]);
        }

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
            right_only in any::<bool>(),
        ) {
            // `right_only`: the stage of real layers (no left shift, no i32::MIN
            // multiplier), which runs the vector loops without those cases.
            let (mult, shift): (Vec<i32>, Vec<i32>) = consts
                .iter()
                .map(|c| if right_only { (c.1.max(0), -c.2.abs()) } else { (c.1, c.2) })
                .unzip();
            let q = Requant::new(
                consts.iter().map(|c| c.0).collect(),
                mult,
                shift,
                zp,
                lo,
                lo + span,
            );
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
            prop_assert_eq!(&got, &want);
            // The same block at each level, into a longer output (the rows go as far as
            // both do) and an output of an i16 type.
            for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                let mut got = vec![3i8; block.len() + 5];
                q.rows_at(level, &block, &mut got, width);
                prop_assert_eq!(&got[..block.len()], &want[..], "{:?}", level);
                prop_assert!(got[block.len()..].iter().all(|&v| v == 3));
                let mut got16 = vec![0i16; block.len()];
                q.rows_at(level, &block, &mut got16, width);
                let mut want16 = vec![0i16; block.len()];
                for (s, d) in block.chunks(width).zip(want16.chunks_mut(width)) {
                    q.row_plain(s, d, 0);
                }
                prop_assert_eq!(&got16, &want16, "{:?}", level);
            }
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
