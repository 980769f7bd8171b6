//! Quantised DEPTHWISE_CONV_2D's sums with a depth multiplier of 1 and one-byte operands,
//! vectorised as *pair sums*: the taps of a window are taken two at a time, each
//! channel's two inputs (`x - in_zp`, as `i16`) interleaved next to its two filter
//! values (`w - w_zp`, prepared once per layer as pair words, see
//! [`igemm::pair`](crate::kernels::igemm::pair)), and `vpmaddwd` gives
//! `x_a * w_a + x_b * w_b` per `i32` lane, exact because each operand is within
//! `[-32767, 32767]`. Eight, sixteen or thirty-two channels a step (SSE-width and AVX2
//! steps on AVX2, AVX-512BW steps where there are 32 channels or more); a channel count
//! that is not a whole number of steps ends with one step over the last channels, which
//! overlaps the one before (its sums are the same integers, stored twice).
//!
//! A tap outside the input reads a row of `in_zp` (so `x - in_zp` is 0), and a window's
//! odd last tap meets a filter word whose high half is 0: every pixel runs the same
//! loop. Wrapping `i32` sums do not depend on the order of their terms, so every level
//! gives the plain loop's integers.

use super::{ConvGeometry, QuantElem};
use crate::kernels::igemm::pair;
use crate::kernels::isa::Isa;

/// The largest magnitude of an operand for the pair sums to be exact (as the integer
/// GEMM's).
const MAX_OPERAND: i64 = crate::kernels::igemm::MAX_OPERAND as i64;

/// One layer's filter and input zero point, prepared for the vector rows, and the tap
/// lists kept between rows and pixels (no allocation per pixel).
pub(super) struct Prepared<T> {
    /// The level the steps run at (AVX2 or wider, capped at the CPU's).
    level: Isa,
    /// Channels per step: 8, 16 or 32.
    block: usize,
    /// Channels of the input (and output).
    c: usize,
    /// The filter as pair words, step by step: for step `b` and tap pair `q`, `block`
    /// words in the lanes' order (see [`Prepared::new`]).
    filter: Vec<i32>,
    /// `c` copies of the input zero point: what a tap outside the input reads.
    zp_row: Vec<T>,
    /// The input zero point.
    zp: i16,
    /// Per tap, where a window wholly inside the input reads (for the current run).
    whole: Vec<*const u8>,
    /// Per tap, where a window over the padding reads.
    own: Vec<*const u8>,
}

impl<T: QuantElem> Prepared<T> {
    /// The prepared layer for filter `[filter_h, filter_w, in_c]` with per-channel filter
    /// zero points `filter_zp(channel)` and input zero point `in_zp`, or `None` where the
    /// vector rows do not apply: no vector level, operands wider than a byte, fewer than
    /// eight channels, no taps, a zero point outside the element type's range (a filter
    /// value minus its zero point outside `[-32767, 32767]`), or lengths that disagree.
    pub(super) fn new<F: QuantElem>(
        level: Isa,
        g: &ConvGeometry,
        filter: &[F],
        filter_zp: impl Fn(usize) -> i32,
        in_zp: i32,
    ) -> Option<Self> {
        let level = level.min(crate::kernels::isa::detected());
        let c = g.in_c;
        let taps = g.filter_h.checked_mul(g.filter_w)?;
        let one_byte = std::mem::size_of::<T>() == 1 && std::mem::size_of::<F>() == 1;
        let zp_fits = T::saturate_from_i32(in_zp).to_i32() == in_zp;
        if !cfg!(target_arch = "x86_64")
            || level < Isa::Avx2
            || !one_byte
            || !zp_fits
            || c < 8
            || taps == 0
            || taps.checked_mul(c) != Some(filter.len())
        {
            return None;
        }
        let fits = |zp: i32| {
            let r = -MAX_OPERAND..=MAX_OPERAND;
            r.contains(&(i64::from(F::MIN) - i64::from(zp)))
                && r.contains(&(i64::from(F::MAX) - i64::from(zp)))
        };
        if !(0..c).all(|ch| fits(filter_zp(ch))) {
            return None;
        }
        let block = if level >= Isa::Avx512 && c >= 32 {
            32
        } else if c >= 16 {
            16
        } else {
            8
        };
        let pairs = taps.div_ceil(2);
        let steps = c.div_ceil(block);
        let mut words = Vec::with_capacity(steps * pairs * block);
        // Lane order of a step (see `x86`): the low half of the words is channels
        // `8j..8j+4` of each group `j` of eight, the high half channels `8j+4..8j+8`.
        for b in 0..steps {
            let s = (b * block).min(c - block);
            for q in 0..pairs {
                for h in 0..2 {
                    for j in 0..block / 8 {
                        for i in 0..4 {
                            let ch = s + 8 * j + 4 * h + i;
                            let w = |t: usize| {
                                filter
                                    .get(t * c + ch)
                                    .map_or(0, |w| w.to_i32() - filter_zp(ch))
                            };
                            words.push(pair(w(2 * q), w(2 * q + 1)));
                        }
                    }
                }
            }
        }
        Some(Self {
            level,
            block,
            c,
            filter: words,
            zp_row: vec![T::saturate_from_i32(in_zp); c],
            zp: in_zp as i16,
            whole: Vec::with_capacity(taps),
            own: Vec::with_capacity(taps),
        })
    }

    /// The sums of output row `oy` of image `img` (`[in_h, in_w, in_c]`), every channel of
    /// every pixel, into `accs` (`out_w * in_c`, overwritten):
    /// `sum over valid taps (x - in_zp) * (w - w_zp)` per channel. Writes nothing and
    /// returns false where a length disagrees with the geometry (the caller validated
    /// them: unreachable).
    pub(super) fn row_sums(
        &mut self,
        g: &ConvGeometry,
        img: &[T],
        oy: usize,
        accs: &mut [i32],
    ) -> bool {
        let c = self.c;
        let sizes_ok = g.in_c == c
            && g.in_h.checked_mul(g.in_w).and_then(|p| p.checked_mul(c)) == Some(img.len())
            && g.out_w.checked_mul(c) == Some(accs.len())
            && g.filter_h
                .checked_mul(g.filter_w)
                .map(|t| t.div_ceil(2))
                .and_then(|p| p.checked_mul(c.div_ceil(self.block) * self.block))
                == Some(self.filter.len());
        if !sizes_ok {
            return false;
        }
        // A window wholly inside the input reads the same taps as any other, relative to
        // its first input pixel; consecutive such windows are one run.
        let inside = |o: usize, stride: usize, f: usize, d: usize, pad: usize, size: usize| {
            (o * stride)
                .checked_sub(pad)
                .filter(|&i| i + (f - 1) * d < size)
        };
        let row_start = inside(oy, g.stride_h, g.filter_h, g.dilation_h, g.pad_top, g.in_h);
        let col_start =
            |ox: usize| inside(ox, g.stride_w, g.filter_w, g.dilation_w, g.pad_left, g.in_w);
        let step = g.stride_w * c;
        let mut ox = 0;
        while ox < g.out_w {
            if let (Some(y), Some(x)) = (row_start, col_start(ox)) {
                let end = (ox + 1..g.out_w)
                    .find(|&o| col_start(o).is_none())
                    .unwrap_or(g.out_w);
                let first = (y * g.in_w + x) * c;
                let last_tap = ((g.filter_h - 1) * g.dilation_h * g.in_w
                    + (g.filter_w - 1) * g.dilation_w)
                    * c;
                // The taps' offsets grow, so the last pixel's last tap is the furthest read.
                let furthest = (end - ox - 1)
                    .checked_mul(step)
                    .and_then(|d| d.checked_add(first + last_tap + c));
                if furthest.is_none_or(|e| e > img.len()) {
                    return false;
                }
                self.whole.clear();
                for ky in 0..g.filter_h {
                    for kx in 0..g.filter_w {
                        let at = first + (ky * g.dilation_h * g.in_w + kx * g.dilation_w) * c;
                        self.whole.push(img[at..].as_ptr().cast());
                    }
                }
                let run = &mut accs[ox * c..end * c];
                self.run(true, step, end - ox, run);
                ox = end;
                continue;
            }
            self.own.clear();
            for ky in 0..g.filter_h {
                let iy = ConvGeometry::tap(oy, g.stride_h, ky, g.dilation_h, g.pad_top, g.in_h);
                for kx in 0..g.filter_w {
                    let ix =
                        ConvGeometry::tap(ox, g.stride_w, kx, g.dilation_w, g.pad_left, g.in_w);
                    let src = match (iy, ix) {
                        (Some(iy), Some(ix)) => img.get((iy * g.in_w + ix) * c..),
                        _ => None,
                    };
                    // Checked lengths: every pixel's channels are inside the image.
                    let src = src.filter(|s| s.len() >= c).unwrap_or(&self.zp_row);
                    self.own.push(src.as_ptr().cast());
                }
            }
            self.run(false, 0, 1, &mut accs[ox * c..(ox + 1) * c]);
            ox += 1;
        }
        true
    }

    /// The sums of `n` pixels into `accs` (`n * c`), pixel `p`'s tap `t` reading the `c`
    /// elements from `taps[t] + p * step` (the whole-window list, or this pixel's own).
    fn run(&self, whole: bool, step: usize, n: usize, accs: &mut [i32]) {
        let taps = if whole { &self.whole } else { &self.own };
        #[cfg(target_arch = "x86_64")]
        {
            let (f, c, zp) = (&self.filter[..], self.c, self.zp);
            // Each call's contract holds: `Prepared::new` gave a vector level capped at
            // the CPU's (AVX2 at least; AVX-512F and BW for 32-channel steps, chosen only
            // at Isa::Avx512 and above), one-byte T, `c >= block` and `filter` of `steps *
            // pairs * block` words (checked again by `row_sums`); every tap pointer of
            // every pixel was taken from a slice of at least `c` elements (`row_sums`
            // checked the run's furthest read), and `accs` is `n * c` words.
            // SAFETY: the contract of `pixels8/16/32`, as just listed.
            unsafe {
                match self.block {
                    32 if self.level >= Isa::Avx512 => {
                        x86::pixels32::<T>(taps, step, n, c, f, zp, accs)
                    }
                    16 => x86::pixels16::<T>(taps, step, n, c, f, zp, accs),
                    _ => x86::pixels8::<T>(taps, step, n, c, f, zp, accs),
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (taps, step, n, accs);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::QuantElem;
    use std::arch::x86_64::*;

    /// Eight one-byte elements at `p` as `i16` lanes (sign-extended for a signed type).
    ///
    /// # Safety
    /// `p` points at eight readable bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn widen8<E: QuantElem>(p: *const u8) -> __m128i {
        // SAFETY: eight readable bytes (the caller's contract), one unaligned 64-bit load.
        let b = unsafe { _mm_loadl_epi64(p.cast()) };
        if E::MIN < 0 {
            _mm_cvtepi8_epi16(b)
        } else {
            _mm_cvtepu8_epi16(b)
        }
    }

    /// Sixteen one-byte elements at `p` as `i16` lanes.
    ///
    /// # Safety
    /// `p` points at sixteen readable bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn widen16<E: QuantElem>(p: *const u8) -> __m256i {
        // SAFETY: sixteen readable bytes (the caller's contract), one unaligned load.
        let b = unsafe { _mm_loadu_si128(p.cast()) };
        if E::MIN < 0 {
            _mm256_cvtepi8_epi16(b)
        } else {
            _mm256_cvtepu8_epi16(b)
        }
    }

    /// Thirty-two one-byte elements at `p` as `i16` lanes.
    ///
    /// # Safety
    /// `p` points at thirty-two readable bytes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn widen32<E: QuantElem>(p: *const u8) -> __m512i {
        // SAFETY: thirty-two readable bytes (the caller's contract), one unaligned load.
        let b = unsafe { _mm256_loadu_si256(p.cast()) };
        if E::MIN < 0 {
            _mm512_cvtepi8_epi16(b)
        } else {
            _mm512_cvtepu8_epi16(b)
        }
    }

    /// The eight sums of a step (`lo`: channels 0..4, `hi`: 4..8) stored in order.
    ///
    /// # Safety
    /// `p` points at eight writable `i32`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store8(p: *mut i32, lo: __m128i, hi: __m128i) {
        // SAFETY: eight writable words (the caller's contract), two unaligned stores.
        unsafe {
            _mm_storeu_si128(p.cast(), lo);
            _mm_storeu_si128(p.add(4).cast(), hi);
        }
    }

    /// The sixteen sums of a step (`lo`: channels 0..4 and 8..12, `hi`: 4..8 and 12..16,
    /// the 128-bit lanes' order of the interleaving) stored in order.
    ///
    /// # Safety
    /// `p` points at sixteen writable `i32`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store16(p: *mut i32, lo: __m256i, hi: __m256i) {
        let first = _mm256_permute2x128_si256::<0x20>(lo, hi);
        let second = _mm256_permute2x128_si256::<0x31>(lo, hi);
        // SAFETY: sixteen writable words (the caller's contract), two unaligned stores.
        unsafe {
            _mm256_storeu_si256(p.cast(), first);
            _mm256_storeu_si256(p.add(8).cast(), second);
        }
    }

    /// The thirty-two sums of a step (`lo`: channels `8j..8j+4` of each 128-bit lane `j`,
    /// `hi`: `8j+4..8j+8`) stored in order.
    ///
    /// # Safety
    /// `p` points at thirty-two writable `i32`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn store32(p: *mut i32, lo: __m512i, hi: __m512i) {
        // Quadwords: 0-7 from `lo`, 8-15 from `hi`.
        let first = _mm512_permutex2var_epi64(lo, _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), hi);
        let second =
            _mm512_permutex2var_epi64(lo, _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4), hi);
        // SAFETY: thirty-two writable words (the caller's contract), two unaligned stores.
        unsafe {
            _mm512_storeu_si512(p.cast(), first);
            _mm512_storeu_si512(p.add(16).cast(), second);
        }
    }

    /// One body for the three widths: [`super::Prepared::run`]'s sums, `$lanes` channels
    /// a step (the last step ending at channel `c`).
    macro_rules! pixels_body {
        ($name:ident, $feature:literal, $lanes:literal, $vec:ty, $widen:ident, $store:ident,
         $set1:ident, $zero:ident, $sub:ident, $add:ident, $madd:ident, $lo:ident, $hi:ident,
         $load:ident) => {
            /// See [`pixels_body`].
            ///
            /// # Safety
            /// The CPU has the target features, T is one byte, and for each pixel
            /// `p < n` every tap's `c` elements from `p * step` are readable.
            #[target_feature(enable = $feature)]
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn $name<T: QuantElem>(
                taps: &[*const u8],
                step: usize,
                n: usize,
                c: usize,
                filter: &[i32],
                zp: i16,
                accs: &mut [i32],
            ) {
                let pairs = taps.len().div_ceil(2);
                let steps = c.div_ceil($lanes);
                let ok = !taps.is_empty()
                    && c >= $lanes
                    && filter.len() >= steps * pairs * $lanes
                    && n.checked_mul(c).is_some_and(|e| e <= accs.len());
                if !ok {
                    return;
                }
                let last = taps.len() - 1;
                let zp = $set1(zp);
                for (p, acc) in accs.chunks_exact_mut(c).take(n).enumerate() {
                    let at = p * step;
                    for b in 0..steps {
                        let s = (b * $lanes).min(c - $lanes);
                        let words = &filter[b * pairs * $lanes..(b + 1) * pairs * $lanes];
                        let (mut lo, mut hi) = ($zero(), $zero());
                        for (q, w) in words.chunks_exact($lanes).enumerate() {
                            let (ta, tb) = (taps[2 * q], taps[(2 * q + 1).min(last)]);
                            // `s + $lanes <= c`, each tap's `c` elements (one byte each)
                            // from `at` are readable (the caller's contract), `w` is
                            // `$lanes` words.
                            // SAFETY: so every load stays inside what it reads.
                            let (xa, xb, wl, wh) = unsafe {
                                (
                                    $widen::<T>(ta.add(at + s)),
                                    $widen::<T>(tb.add(at + s)),
                                    $load(w.as_ptr().cast()),
                                    $load(w.as_ptr().add($lanes / 2).cast()),
                                )
                            };
                            let (xa, xb) = ($sub(xa, zp), $sub(xb, zp));
                            lo = $add(lo, $madd($lo(xa, xb), wl));
                            hi = $add(hi, $madd($hi(xa, xb), wh));
                        }
                        // SAFETY: `acc` is `c` words and `s + $lanes <= c`.
                        unsafe { $store(acc.as_mut_ptr().add(s), lo, hi) };
                    }
                }
            }
        };
    }

    pixels_body!(
        pixels8,
        "avx2",
        8,
        __m128i,
        widen8,
        store8,
        _mm_set1_epi16,
        _mm_setzero_si128,
        _mm_sub_epi16,
        _mm_add_epi32,
        _mm_madd_epi16,
        _mm_unpacklo_epi16,
        _mm_unpackhi_epi16,
        _mm_loadu_si128
    );
    pixels_body!(
        pixels16,
        "avx2",
        16,
        __m256i,
        widen16,
        store16,
        _mm256_set1_epi16,
        _mm256_setzero_si256,
        _mm256_sub_epi16,
        _mm256_add_epi32,
        _mm256_madd_epi16,
        _mm256_unpacklo_epi16,
        _mm256_unpackhi_epi16,
        _mm256_loadu_si256
    );
    pixels_body!(
        pixels32,
        "avx512f,avx512bw",
        32,
        __m512i,
        widen32,
        store32,
        _mm512_set1_epi16,
        _mm512_setzero_si512,
        _mm512_sub_epi16,
        _mm512_add_epi32,
        _mm512_madd_epi16,
        _mm512_unpacklo_epi16,
        _mm512_unpackhi_epi16,
        _mm512_loadu_si512
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The sums straight from the definition (taps outside the input skipped).
    fn want<T: QuantElem, F: QuantElem>(
        g: &ConvGeometry,
        img: &[T],
        oy: usize,
        filter: &[F],
        in_zp: i32,
        w_zp: &[i32],
    ) -> Vec<i32> {
        let c = g.in_c;
        let mut out = vec![0i32; g.out_w * c];
        for ox in 0..g.out_w {
            for k in 0..c {
                let mut s = 0i32;
                for ky in 0..g.filter_h {
                    for kx in 0..g.filter_w {
                        let iy = (oy * g.stride_h + ky * g.dilation_h).checked_sub(g.pad_top);
                        let ix = (ox * g.stride_w + kx * g.dilation_w).checked_sub(g.pad_left);
                        let (Some(iy), Some(ix)) = (iy, ix) else {
                            continue;
                        };
                        if iy >= g.in_h || ix >= g.in_w {
                            continue;
                        }
                        let x = img[(iy * g.in_w + ix) * c + k].to_i32() - in_zp;
                        let w = filter[(ky * g.filter_w + kx) * c + k].to_i32() - w_zp[k];
                        s = s.wrapping_add(x * w);
                    }
                }
                out[ox * c + k] = s;
            }
        }
        out
    }

    /// Every vector level this CPU has gives the definition's sums, or declines (only
    /// where the rows do not apply).
    fn check<T: QuantElem, F: QuantElem>(
        g: &ConvGeometry,
        img: &[T],
        filter: &[F],
        in_zp: i32,
        w_zp: &[i32],
    ) -> Result<(), TestCaseError> {
        for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
            let prepared = Prepared::<T>::new(level, g, filter, |c| w_zp[c], in_zp);
            let applies = cfg!(target_arch = "x86_64")
                && level.min(crate::kernels::isa::detected()) >= Isa::Avx2
                && g.in_c >= 8
                && (T::MIN..=T::MAX).contains(&in_zp);
            prop_assert_eq!(prepared.is_some(), applies, "{:?}", level);
            let Some(mut prepared) = prepared else {
                continue;
            };
            for oy in 0..g.out_h {
                let want = want(g, img, oy, filter, in_zp, w_zp);
                let mut got = vec![7i32; g.out_w * g.in_c];
                prop_assert!(prepared.row_sums(g, img, oy, &mut got));
                prop_assert_eq!(&got, &want, "{:?} row {}", level, oy);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(128))]
        /// Every level gives the definition's sums: channel counts across the step
        /// widths (an overlapping last step), padding, strides, dilations, odd and even
        /// tap counts, input and filter zero points, signed and unsigned operands.
        #[test]
        fn quant_depthwise_row_sums_match_the_definition(
            c in 1usize..80,
            in_h in 1usize..7,
            in_w in 1usize..8,
            fh in 1usize..4,
            fw in 1usize..6,
            stride in 1usize..3,
            dilation in 1usize..3,
            pad in 0usize..3,
            zp in prop_oneof![-128i32..=255, Just(i32::MIN), Just(1000)],
            w_zp in prop_oneof![Just(0i32), -128i32..=255],
            seed in any::<u64>(),
        ) {
            let out = |n: usize, f: usize| (n + 2 * pad).saturating_sub((f - 1) * dilation + 1) / stride + 1;
            let g = ConvGeometry {
                batches: 1, in_h, in_w, in_c: c,
                out_h: out(in_h, fh), out_w: out(in_w, fw),
                filter_h: fh, filter_w: fw,
                stride_h: stride, stride_w: stride,
                dilation_h: dilation, dilation_w: dilation,
                pad_top: pad, pad_left: pad,
            };
            let mut s = seed | 1;
            let mut byte = || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s as u8 };
            let img: Vec<u8> = (0..in_h * in_w * c).map(|_| byte()).collect();
            let filter: Vec<u8> = (0..fh * fw * c).map(|_| byte()).collect();
            let w_zps: Vec<i32> = (0..c).map(|k| if k % 3 == 0 { w_zp } else { 0 }).collect();
            let simg: Vec<i8> = img.iter().map(|&v| v as i8).collect();
            let sfilter: Vec<i8> = filter.iter().map(|&v| v as i8).collect();
            check::<i8, i8>(&g, &simg, &sfilter, zp, &vec![0; c])?;
            check::<u8, i8>(&g, &img, &sfilter, zp, &vec![0; c])?;
            check::<u8, u8>(&g, &img, &filter, zp, &w_zps)?;
        }
    }

    #[test]
    fn quant_depthwise_row_sums_refuse_bad_lengths() {
        let g = ConvGeometry {
            batches: 1,
            in_h: 2,
            in_w: 2,
            in_c: 8,
            out_h: 1,
            out_w: 1,
            filter_h: 2,
            filter_w: 2,
            stride_h: 1,
            stride_w: 1,
            dilation_h: 1,
            dilation_w: 1,
            pad_top: 0,
            pad_left: 0,
        };
        assert!(Prepared::<i8>::new(Isa::Avx2, &g, &[0i8; 31], |_| 0, 0).is_none());
        let Some(mut p) = Prepared::<i8>::new(Isa::Avx2, &g, &[1i8; 32], |_| 0, 0) else {
            // No vector level on this CPU: nothing to refuse.
            assert!(crate::kernels::isa::detected() < Isa::Avx2);
            return;
        };
        let mut acc = [5i32; 8];
        assert!(!p.row_sums(&g, &[0i8; 31], 0, &mut acc));
        assert!(!p.row_sums(&g, &[0i8; 32], 0, &mut acc[..7]));
        assert_eq!(acc, [5; 8]);
        assert!(p.row_sums(&g, &[1i8; 32], 0, &mut acc));
        assert_eq!(acc, [4; 8]);
    }
}
