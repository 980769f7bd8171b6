//! Quantised DEPTHWISE_CONV_2D's sums with a depth multiplier of 1 and one-byte operands,
//! vectorised: per output pixel the valid taps are listed once, then each block of
//! channels keeps its sums in registers over all the taps (`(x - in_zp) * w`, widened to
//! `i32` lanes, wrapping multiply and add), sixteen channels a step on AVX2, thirty-two on
//! AVX-512, the last channels in plain code. Wrapping `i32` sums do not depend on the
//! order of their terms, so every level gives the plain loop's integers.
//!
//! The filter's zero-point correction (`w_zp * sum(x - in_zp)`) is not done here: the
//! caller takes this path only when every filter zero point is 0 (int8 filters are
//! symmetric).

use super::{ConvGeometry, QuantElem};
use crate::kernels::isa::Isa;

/// One valid tap of an output pixel: where its input pixel's channels start in the image
/// and where its filter row starts in the filter (both in elements).
#[derive(Clone, Copy, Debug)]
struct Tap {
    src: usize,
    filter: usize,
}

/// The tap lists, kept between rows and pixels (no allocation per pixel): the taps of a
/// window wholly inside the input (relative to its first pixel), and of one that is not.
#[derive(Default)]
pub(super) struct Taps {
    whole: Vec<Tap>,
    own: Vec<Tap>,
}

/// Whether [`row_sums`] has a vector path for these element types at `level`.
pub(super) fn applies<T: QuantElem, F: QuantElem>(level: Isa) -> bool {
    std::mem::size_of::<T>() == 1
        && std::mem::size_of::<F>() == 1
        && level.min(crate::kernels::isa::detected()) >= Isa::Avx2
}

/// The sums of output row `oy` of image `img` (`[in_h, in_w, in_c]`), every channel of
/// every pixel, into `accs` (`out_w * in_c`, overwritten), for a depth multiplier of 1
/// and filter `[filter_h, filter_w, in_c]`. Writes nothing and returns false where a
/// length disagrees with the geometry (the caller validated them: unreachable). At a
/// level without a vector path (see [`applies`]) the sums are the plain loop's.
#[allow(clippy::too_many_arguments)]
pub(super) fn row_sums<T: QuantElem, F: QuantElem>(
    level: Isa,
    g: &ConvGeometry,
    img: &[T],
    oy: usize,
    filter: &[F],
    in_zp: i32,
    taps: &mut Taps,
    accs: &mut [i32],
) -> bool {
    let c = g.in_c;
    let sizes_ok = g.in_h.checked_mul(g.in_w).and_then(|p| p.checked_mul(c)) == Some(img.len())
        && g.filter_h
            .checked_mul(g.filter_w)
            .and_then(|p| p.checked_mul(c))
            == Some(filter.len())
        && g.out_w.checked_mul(c) == Some(accs.len());
    if !sizes_ok || c == 0 {
        return false;
    }
    let level = if applies::<T, F>(level) {
        level.min(crate::kernels::isa::detected())
    } else {
        Isa::Scalar
    };
    // A window wholly inside the input has the same taps as any other, relative to its
    // first input pixel: listed once per row; a window over the padding lists its own.
    let inside = |o: usize, stride: usize, f: usize, d: usize, pad: usize, size: usize| {
        (o * stride)
            .checked_sub(pad)
            .filter(|&i| i + (f - 1) * d < size)
    };
    let row_start = inside(oy, g.stride_h, g.filter_h, g.dilation_h, g.pad_top, g.in_h);
    let (whole, own) = (&mut taps.whole, &mut taps.own);
    whole.clear();
    if row_start.is_some() {
        for ky in 0..g.filter_h {
            for kx in 0..g.filter_w {
                whole.push(Tap {
                    src: (ky * g.dilation_h * g.in_w + kx * g.dilation_w) * c,
                    filter: (ky * g.filter_w + kx) * c,
                });
            }
        }
    }
    let iy = |ky: usize| ConvGeometry::tap(oy, g.stride_h, ky, g.dilation_h, g.pad_top, g.in_h);
    let col_start =
        |ox: usize| inside(ox, g.stride_w, g.filter_w, g.dilation_w, g.pad_left, g.in_w);
    let mut ox = 0;
    while ox < g.out_w {
        if let (Some(y), Some(x)) = (row_start, col_start(ox)) {
            // The run of windows inside the input from here (they are consecutive).
            let end = (ox + 1..g.out_w)
                .find(|&o| col_start(o).is_none())
                .unwrap_or(g.out_w);
            let step = g.stride_w * c;
            let run = &mut accs[ox * c..end * c];
            pixels(
                level,
                img,
                (y * g.in_w + x) * c,
                step,
                filter,
                whole,
                in_zp,
                c,
                run,
            );
            ox = end;
            continue;
        }
        own.clear();
        for ky in 0..g.filter_h {
            let Some(iy) = iy(ky) else { continue };
            for kx in 0..g.filter_w {
                let ix = ConvGeometry::tap(ox, g.stride_w, kx, g.dilation_w, g.pad_left, g.in_w);
                if let Some(ix) = ix {
                    own.push(Tap {
                        src: (iy * g.in_w + ix) * c,
                        filter: (ky * g.filter_w + kx) * c,
                    });
                }
            }
        }
        let acc = &mut accs[ox * c..(ox + 1) * c];
        pixels(level, img, 0, 0, filter, own, in_zp, c, acc);
        ox += 1;
    }
    true
}

/// The sums of `accs.len() / c` pixels, pixel `p`'s window starting at element
/// `base + p * step` of `img`:
/// `accs[p*c + k] = sum over taps (img[base + p*step + src + k] - in_zp) * filter[filter + k]`
/// for each channel `k < c`. The taps are in increasing
/// order of both offsets (as listed above), so the last pixel's last tap bounds them all:
/// where its channels are not inside both slices (unreachable), the plain loop runs (which
/// reads only inside them).
#[allow(clippy::too_many_arguments)]
fn pixels<T: QuantElem, F: QuantElem>(
    level: Isa,
    img: &[T],
    base: usize,
    step: usize,
    filter: &[F],
    taps: &[Tap],
    in_zp: i32,
    c: usize,
    accs: &mut [i32],
) {
    let n = accs.len() / c.max(1);
    if n == 0 {
        return;
    }
    let last = step.checked_mul(n - 1).and_then(|d| d.checked_add(base));
    let inside = taps.last().is_none_or(|t| {
        last.and_then(|b| b.checked_add(t.src))
            .and_then(|e| e.checked_add(c))
            .is_some_and(|e| e <= img.len())
            && t.filter.checked_add(c).is_some_and(|e| e <= filter.len())
    });
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if inside {
        let img = img.get(base..).unwrap_or_default();
        if level >= Isa::Avx512 {
            // `level` was capped at the CPU's and is a vector level only for one-byte T
            // and F (`applies`); `inside` checked the last pixel's last tap, the largest.
            // SAFETY: the CPU has AVX-512 F and BW, every pixel's taps' `c` channels lie
            // inside both slices.
            done = unsafe { x86::pixels_avx512(img, step, filter, taps, in_zp, c, accs) };
        } else if level >= Isa::Avx2 {
            // SAFETY: as above, with AVX2.
            done = unsafe { x86::pixels_avx2(img, step, filter, taps, in_zp, c, accs) };
        }
    }
    let _ = (level, inside);
    if done < c {
        for (p, acc) in accs.chunks_exact_mut(c).enumerate() {
            let at = base.saturating_add(p.saturating_mul(step));
            plain(
                img.get(at..).unwrap_or_default(),
                filter,
                taps,
                in_zp,
                acc,
                done,
            );
        }
    }
}

/// [`pixels`]' plain loop for one pixel, from channel `from` on.
fn plain<T: QuantElem, F: QuantElem>(
    img: &[T],
    filter: &[F],
    taps: &[Tap],
    in_zp: i32,
    acc: &mut [i32],
    from: usize,
) {
    for (k, a) in acc.iter_mut().enumerate().skip(from) {
        *a = taps.iter().fold(0i32, |s, t| {
            let x = img
                .get(t.src + k)
                .map_or(0, |v| v.to_i32().wrapping_sub(in_zp));
            let w = filter.get(t.filter + k).map_or(0, |v| v.to_i32());
            s.wrapping_add(x.wrapping_mul(w))
        });
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{QuantElem, Tap};
    use std::arch::x86_64::*;

    /// Eight one-byte elements at `p` widened to `i32` lanes (sign-extended for a signed
    /// type).
    ///
    /// # Safety
    /// `p` points at eight readable bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn widen8<E: QuantElem>(p: *const u8) -> __m256i {
        // SAFETY: eight readable bytes (the caller's contract), one unaligned 64-bit load.
        let b = unsafe { _mm_loadl_epi64(p.cast()) };
        if E::MIN < 0 {
            _mm256_cvtepi8_epi32(b)
        } else {
            _mm256_cvtepu8_epi32(b)
        }
    }

    /// Sixteen one-byte elements at `p` widened to `i32` lanes.
    ///
    /// # Safety
    /// `p` points at sixteen readable bytes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn widen16<E: QuantElem>(p: *const u8) -> __m512i {
        // SAFETY: sixteen readable bytes (the caller's contract), one unaligned load.
        let b = unsafe { _mm_loadu_si128(p.cast()) };
        if E::MIN < 0 {
            _mm512_cvtepi8_epi32(b)
        } else {
            _mm512_cvtepu8_epi32(b)
        }
    }

    /// One body for both widths: [`super::pixels`] (from `base` = 0) for the channels of
    /// whole `$lanes`-lane vectors (in blocks of two vectors, then one); returns how many
    /// channels of each pixel it did.
    macro_rules! pixels_body {
        ($name:ident, $feature:literal, $lanes:literal, $vec:ty, $widen:ident,
         $set1:ident, $zero:ident, $sub:ident, $add:ident, $mul:ident, $store:ident) => {
            /// See [`pixels_body`].
            ///
            /// # Safety
            /// The CPU has the target features, T and F are one byte, and for each pixel
            /// `p` every tap's `c` elements from `p * step` lie inside `img` and `filter`.
            #[target_feature(enable = $feature)]
            pub(super) unsafe fn $name<T: QuantElem, F: QuantElem>(
                img: &[T],
                step: usize,
                filter: &[F],
                taps: &[Tap],
                in_zp: i32,
                c: usize,
                accs: &mut [i32],
            ) -> usize {
                let mut done = 0;
                for (p, acc) in accs.chunks_exact_mut(c.max(1)).enumerate() {
                    // Inside (the caller's contract); were it not, the plain loop redoes
                    // them all.
                    let Some(img) = img.get(p * step..) else {
                        return 0;
                    };
                    let (x, w) = (img.as_ptr().cast::<u8>(), filter.as_ptr().cast::<u8>());
                    let zp = $set1(in_zp);
                    let mut ch = 0;
                    while ch + $lanes <= c {
                        // Two vectors a step where they fit, else one.
                        let two = ch + 2 * $lanes <= c;
                        let mut s: [$vec; 2] = [$zero(); 2];
                        for t in taps {
                            for (h, s) in s.iter_mut().enumerate().take(1 + usize::from(two)) {
                                let at = ch + $lanes * h;
                                // SAFETY: `at + $lanes <= c` and the tap's `c` elements (one
                                // byte each) lie inside `img` and `filter` (the caller's
                                // contract).
                                let (xv, wv) = unsafe {
                                    (
                                        $widen::<T>(x.add(t.src + at)),
                                        $widen::<F>(w.add(t.filter + at)),
                                    )
                                };
                                let xv = $sub(xv, zp);
                                *s = $add(*s, $mul(xv, wv));
                            }
                        }
                        for (h, s) in s.iter().enumerate().take(1 + usize::from(two)) {
                            let at = ch + $lanes * h;
                            if let Some(out) = acc.get_mut(at..at + $lanes) {
                                // SAFETY: `out` is `$lanes` i32, one unaligned store.
                                unsafe { $store(out.as_mut_ptr().cast(), *s) };
                            }
                        }
                        ch += if two { 2 * $lanes } else { $lanes };
                    }
                    done = ch;
                }
                done
            }
        };
    }

    pixels_body!(
        pixels_avx2,
        "avx2",
        8,
        __m256i,
        widen8,
        _mm256_set1_epi32,
        _mm256_setzero_si256,
        _mm256_sub_epi32,
        _mm256_add_epi32,
        _mm256_mullo_epi32,
        _mm256_storeu_si256
    );
    pixels_body!(
        pixels_avx512,
        "avx512f,avx512bw",
        16,
        __m512i,
        widen16,
        _mm512_set1_epi32,
        _mm512_setzero_si512,
        _mm512_sub_epi32,
        _mm512_add_epi32,
        _mm512_mullo_epi32,
        _mm512_storeu_si512
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every level this CPU has.
    fn levels() -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni]
            .into_iter()
            .filter(|&l| l <= crate::kernels::isa::detected())
            .collect()
    }

    /// The sums straight from the definition (taps outside the input skipped).
    fn want<T: QuantElem, F: QuantElem>(
        g: &ConvGeometry,
        img: &[T],
        oy: usize,
        filter: &[F],
        in_zp: i32,
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
                        let x = img[(iy * g.in_w + ix) * c + k].to_i32().wrapping_sub(in_zp);
                        let w = filter[(ky * g.filter_w + kx) * c + k].to_i32();
                        s = s.wrapping_add(x.wrapping_mul(w));
                    }
                }
                out[ox * c + k] = s;
            }
        }
        out
    }

    fn check<T: QuantElem, F: QuantElem>(
        g: &ConvGeometry,
        img: &[T],
        filter: &[F],
        in_zp: i32,
    ) -> Result<(), TestCaseError> {
        for oy in 0..g.out_h {
            let want = want(g, img, oy, filter, in_zp);
            for level in levels() {
                let mut got = vec![7i32; g.out_w * g.in_c];
                let mut taps = Taps::default();
                prop_assert!(row_sums(
                    level, g, img, oy, filter, in_zp, &mut taps, &mut got
                ));
                prop_assert_eq!(&got, &want, "{:?} row {}", level, oy);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(128))]
        /// Every level gives the definition's wrapping sums: odd channel counts (vector
        /// blocks and a plain tail), padding, strides, dilations, any input zero point
        /// (also far outside the byte range), signed and unsigned operands.
        #[test]
        fn quant_depthwise_row_sums_match_the_definition(
            c in 1usize..70,
            in_h in 1usize..7,
            in_w in 1usize..7,
            fh in 1usize..4,
            fw in 1usize..4,
            stride in 1usize..3,
            dilation in 1usize..3,
            pad in 0usize..3,
            zp in prop_oneof![-128i32..=255, Just(i32::MIN), Just(i32::MAX)],
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
            let simg: Vec<i8> = img.iter().map(|&v| v as i8).collect();
            let sfilter: Vec<i8> = filter.iter().map(|&v| v as i8).collect();
            check::<i8, i8>(&g, &simg, &sfilter, zp)?;
            check::<u8, i8>(&g, &img, &sfilter, zp)?;
            check::<u8, u8>(&g, &img, &filter, zp)?;
        }
    }

    #[test]
    fn quant_depthwise_row_sums_refuse_bad_lengths() {
        let g = ConvGeometry {
            batches: 1,
            in_h: 2,
            in_w: 2,
            in_c: 3,
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
        let mut taps = Taps::default();
        let mut acc = [5i32; 3];
        assert!(!row_sums(
            Isa::Avx2,
            &g,
            &[0i8; 11],
            0,
            &[0i8; 12],
            0,
            &mut taps,
            &mut acc
        ));
        assert!(!row_sums(
            Isa::Avx2,
            &g,
            &[0i8; 12],
            0,
            &[0i8; 13],
            0,
            &mut taps,
            &mut acc
        ));
        assert_eq!(acc, [5; 3]);
        assert!(row_sums(
            Isa::Avx2,
            &g,
            &[1i8; 12],
            0,
            &[1i8; 12],
            0,
            &mut taps,
            &mut acc
        ));
        assert_eq!(acc, [4; 3]);
    }
}
