//! int8/uint8 MAX_POOL_2D in NHWC, vectorised across channels: each output pixel's
//! channels are a run of bytes, so a vector of them takes the byte maximum over the
//! window's pixels, then the activation's clamp, and is stored once. Sixty-four channels
//! a step on AVX-512BW (a short block masked), thirty-two on AVX2 (sixteen for fewer
//! channels; a short block is the last whole vector of the pixel, overlapping the one
//! before, whose lanes it recomputes with the same values), the plain loop elsewhere and
//! below sixteen channels on AVX2. The integers are those of `pool2d`'s reference loop:
//! the maximum of the stored values (the type's minimum for an empty window), clamped.

use crate::kernels::isa::Isa;

/// The shape of one pooling, in NHWC.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    /// Input `(n, h, w, c)`.
    pub input: (usize, usize, usize, usize),
    /// Output `(oh, ow)`.
    pub out_hw: (usize, usize),
    /// `(stride_h, stride_w)`.
    pub stride: (usize, usize),
    /// `(filter_h, filter_w)`.
    pub filter: (usize, usize),
    /// `(top, left)` padding.
    pub pad: (usize, usize),
}

impl Geometry {
    /// Every output pixel's index (in pixels) with its window's in-bounds input rows and
    /// columns.
    fn for_each_window(&self, mut f: impl FnMut(usize, usize, (usize, usize), (usize, usize))) {
        let (n, h, w, _) = self.input;
        let (oh, ow) = self.out_hw;
        for b in 0..n {
            for oy in 0..oh {
                let rows = super::pool2d::window(oy * self.stride.0, self.filter.0, self.pad.0, h);
                for ox in 0..ow {
                    let cols =
                        super::pool2d::window(ox * self.stride.1, self.filter.1, self.pad.1, w);
                    f((b * oh + oy) * ow + ox, b * h, rows, cols);
                }
            }
        }
    }
}

/// MAX_POOL_2D of stored bytes (`SIGNED`: int8, else uint8) from `src` into `dst`, each
/// output clamped to `[lo, hi]` (stored values, `lo <= hi`), at `level` (capped at the
/// CPU's). The slices hold the geometry's tensors (checked by the caller).
pub(crate) fn max_pool_at<const SIGNED: bool>(
    level: Isa,
    g: &Geometry,
    src: &[u8],
    dst: &mut [u8],
    (lo, hi): (u8, u8),
) {
    let level = level.min(crate::kernels::isa::detected());
    let c = g.input.3;
    #[cfg(target_arch = "x86_64")]
    {
        if level >= Isa::Avx512 {
            // SAFETY: the level is at most what the CPU has, so it has AVX-512F and BW.
            return unsafe { x86::max_pool_avx512::<SIGNED>(g, src, dst, (lo, hi)) };
        }
        if level >= Isa::Avx2 && c >= 16 {
            // SAFETY: the level is at most what the CPU has, so it has AVX2.
            return unsafe { x86::max_pool_avx2::<SIGNED>(g, src, dst, (lo, hi)) };
        }
    }
    let _ = level;
    // In the element type's order: int8's bytes flipped at the sign bit compare as uint8.
    let key = |v: u8| if SIGNED { v ^ 0x80 } else { v };
    let (klo, khi) = (key(lo), key(hi));
    let (_, _, w, _) = g.input;
    g.for_each_window(|o, base, rows, cols| {
        let out = &mut dst[o * c..][..c];
        for (ch, d) in out.iter_mut().enumerate() {
            let mut m = 0u8;
            for iy in rows.0..rows.1 {
                for ix in cols.0..cols.1 {
                    m = m.max(key(src[((base + iy) * w + ix) * c + ch]));
                }
            }
            *d = key(m.clamp(klo, khi));
        }
    });
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Geometry;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn max_pool_avx512<const SIGNED: bool>(
        g: &Geometry,
        src: &[u8],
        dst: &mut [u8],
        (lo, hi): (u8, u8),
    ) {
        let (_, _, w, c) = g.input;
        let max = |a, b| {
            if SIGNED {
                _mm512_max_epi8(a, b)
            } else {
                _mm512_max_epu8(a, b)
            }
        };
        let min = |a, b| {
            if SIGNED {
                _mm512_min_epi8(a, b)
            } else {
                _mm512_min_epu8(a, b)
            }
        };
        let first = _mm512_set1_epi8(if SIGNED { i8::MIN } else { 0 });
        let (lo, hi) = (_mm512_set1_epi8(lo as i8), _mm512_set1_epi8(hi as i8));
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        g.for_each_window(|o, base, rows, cols| {
            for j in (0..c).step_by(64) {
                let k = u64::MAX >> (64 - (c - j).min(64));
                let mut m = first;
                for iy in rows.0..rows.1 {
                    for ix in cols.0..cols.1 {
                        let at = ((base + iy) * w + ix) * c + j;
                        // The pixel's channels `at - j .. at - j + c` are inside `src`
                        // (the caller's geometry).
                        // SAFETY: the masked load reads only the block's channels of them.
                        m = max(m, unsafe { _mm512_maskz_loadu_epi8(k, s.add(at).cast()) });
                    }
                }
                // SAFETY: as above for the output pixel's channels in `dst`.
                unsafe { _mm512_mask_storeu_epi8(d.add(o * c + j).cast(), k, min(max(m, lo), hi)) };
            }
        });
    }

    /// The AVX2 loop over every window at one vector width: `$load`/`$store` move
    /// `$lanes` bytes, `$max`/`$min` are the signed and unsigned byte maxima and minima.
    /// Whole blocks of channels, the last one ending at the pixel's last channel (the
    /// caller has at least `$lanes` channels).
    macro_rules! avx2_width {
        ($g:expr, $src:expr, $dst:expr, ($lo:expr, $hi:expr), $lanes:literal,
         $set1:ident, $load:ident, $store:ident, $max:ident / $maxu:ident, $min:ident / $minu:ident) => {{
            let (_, _, w, c) = $g.input;
            let max = |a, b| if SIGNED { $max(a, b) } else { $maxu(a, b) };
            let min = |a, b| if SIGNED { $min(a, b) } else { $minu(a, b) };
            let first = $set1(if SIGNED { i8::MIN } else { 0 });
            let (lo, hi) = ($set1($lo as i8), $set1($hi as i8));
            let (s, d) = ($src.as_ptr(), $dst.as_mut_ptr());
            $g.for_each_window(|o, base, rows, cols| {
                for j in (0..c).step_by($lanes).map(|j| j.min(c - $lanes)) {
                    let mut m = first;
                    for iy in rows.0..rows.1 {
                        for ix in cols.0..cols.1 {
                            let at = ((base + iy) * w + ix) * c + j;
                            // SAFETY: `j + $lanes <= c`: inside the pixel's channels,
                            // inside `src` (the caller's geometry).
                            m = max(m, unsafe { $load(s.add(at).cast()) });
                        }
                    }
                    // SAFETY: as above for the output pixel's channels in `dst`.
                    unsafe { $store(d.add(o * c + j).cast(), min(max(m, lo), hi)) };
                }
            });
        }};
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn max_pool_avx2<const SIGNED: bool>(
        g: &Geometry,
        src: &[u8],
        dst: &mut [u8],
        (lo, hi): (u8, u8),
    ) {
        if g.input.3 >= 32 {
            avx2_width!(
                g,
                src,
                dst,
                (lo, hi),
                32,
                _mm256_set1_epi8,
                _mm256_loadu_si256,
                _mm256_storeu_si256,
                _mm256_max_epi8 / _mm256_max_epu8,
                _mm256_min_epi8 / _mm256_min_epu8
            )
        } else {
            avx2_width!(
                g,
                src,
                dst,
                (lo, hi),
                16,
                _mm_set1_epi8,
                _mm_loadu_si128,
                _mm_storeu_si128,
                _mm_max_epi8 / _mm_max_epu8,
                _mm_min_epi8 / _mm_min_epu8
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::isa::detected;
    use proptest::prelude::*;

    /// The reference loop of `pool2d` on stored values (as i32), for one geometry.
    fn reference(g: &Geometry, src: &[i32], (lo, hi): (i32, i32), min: i32) -> Vec<i32> {
        let (_, _, w, c) = g.input;
        let mut out = vec![0; g.input.0 * g.out_hw.0 * g.out_hw.1 * c];
        g.for_each_window(|o, base, rows, cols| {
            for ch in 0..c {
                let mut m = min;
                for iy in rows.0..rows.1 {
                    for ix in cols.0..cols.1 {
                        m = m.max(src[((base + iy) * w + ix) * c + ch]);
                    }
                }
                out[o * c + ch] = m.clamp(lo, hi);
            }
        });
        out
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(128))]
        /// Every level gives the reference loop's bytes, for both types, any channel
        /// count (whole vectors, short blocks, and below a vector), windows reaching into
        /// the padding or lying wholly in it, and any clamp.
        #[test]
        fn quant_max_pool_matches_the_reference_at_every_level(
            (n, h, w, c) in (1usize..3, 1usize..6, 1usize..6, prop_oneof![1usize..20, 28usize..40, 60usize..140]),
            (fh, fw, sh, sw) in (1usize..4, 1usize..4, 1usize..3, 1usize..3),
            (pt, pl) in (0usize..4, 0usize..4),
            (a, b) in (any::<u8>(), any::<u8>()),
            seed in any::<u64>(),
        ) {
            let oh = (h + pt + 1).saturating_sub(fh) / sh + 1;
            let ow = (w + pl + 1).saturating_sub(fw) / sw + 1;
            let g = Geometry { input: (n, h, w, c), out_hw: (oh, ow), stride: (sh, sw), filter: (fh, fw), pad: (pt, pl) };
            let src: Vec<u8> = (0..(n * h * w * c) as u64)
                .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed).rotate_left(29) as u8)
                .collect();
            for signed in [false, true] {
                let val = |v: u8| if signed { i32::from(v as i8) } else { i32::from(v) };
                let (lo, hi) = if val(a) <= val(b) { (a, b) } else { (b, a) };
                let vals: Vec<i32> = src.iter().map(|&v| val(v)).collect();
                let want = reference(&g, &vals, (val(lo), val(hi)), if signed { -128 } else { 0 });
                for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                    if level > detected() {
                        continue;
                    }
                    let mut got = vec![0x5Au8; want.len()];
                    if signed {
                        max_pool_at::<true>(level, &g, &src, &mut got, (lo, hi));
                    } else {
                        max_pool_at::<false>(level, &g, &src, &mut got, (lo, hi));
                    }
                    let got: Vec<i32> = got.iter().map(|&v| val(v)).collect();
                    prop_assert_eq!(&got, &want, "{:?} signed {}", level, signed);
                }
            }
        }
    }
}
