//! The float32 depthwise convolution with multiplier 1 written with AVX-512F intrinsics:
//! 16 channels per register, the sums of up to eight output pixels of a row held in
//! registers across all the taps, so each tap costs one weight load and, per pixel, one
//! input load and a fused multiply-add (no accumulator traffic through memory). The
//! compiler did not find this blocking in plain Rust (it mixed vector widths and spilled).
//!
//! Each sum is the bias, then `input * weight` added tap by tap in filter order, skipping
//! taps outside the input, each as one fused multiply-add (one rounding): the same
//! operations in the same order as the portable loops (`f32::mul_add`), so the bits are
//! the same on every CPU. Channels past the last multiple of 16 go through masked loads and
//! stores.

use crate::kernels::qconv::ConvGeometry;

/// One depthwise convolution with multiplier 1 in NHWC, before the activation.
pub(crate) struct Args<'a> {
    /// The geometry; `in_c` is also the output channel count.
    pub(crate) g: &'a ConvGeometry,
    /// The input, `[batches, in_h, in_w, in_c]`.
    pub(crate) src: &'a [f32],
    /// The output, `[batches, out_h, out_w, in_c]`.
    pub(crate) dst: &'a mut [f32],
    /// The filter, `[1, filter_h, filter_w, in_c]`.
    pub(crate) filter: &'a [f32],
    /// The bias, `[in_c]`.
    pub(crate) bias: &'a [f32],
}

/// A depthwise kernel: one [`Args`].
pub(crate) type Depthwise = fn(Args<'_>);

/// The AVX-512 kernel, where the CPU has AVX-512 and `VNPU_ISA` allows it (chosen once); else `None`, and the
/// caller runs the portable loops.
pub(crate) fn kernel() -> Option<Depthwise> {
    static CHOSEN: std::sync::OnceLock<Option<Depthwise>> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::kernels::isa::isa() >= crate::kernels::isa::Isa::Avx512 {
                return Some(x86::avx512 as Depthwise);
            }
        }
        None
    })
}

/// The output columns `[x0, x1)` whose every tap lies inside the input row.
fn interior(g: &ConvGeometry) -> (usize, usize) {
    let (w, ow, sw, pl) = (g.in_w, g.out_w, g.stride_w, g.pad_left);
    // ox * sw >= pl, and ox * sw + (kw - 1) * dw - pl <= w - 1.
    let x0 = pl.div_ceil(sw).min(ow);
    let reach = g.filter_w.saturating_sub(1) * g.dilation_w;
    let x1 = match (w + pl).checked_sub(reach + 1) {
        Some(last) => (last / sw + 1).min(ow),
        None => 0,
    };
    (x0, x1.max(x0))
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{interior, Args};
    use crate::kernels::qconv::ConvGeometry;
    use std::arch::x86_64::*;

    /// What every pixel of one output row shares.
    struct Row<'a> {
        g: &'a ConvGeometry,
        /// The batch's input image, `[in_h, in_w, in_c]`.
        img: &'a [f32],
        filter: &'a [f32],
        bias: &'a [f32],
        oy: usize,
    }

    impl Row<'_> {
        /// The input row tap row `ky` reads, if it lies inside the input.
        #[inline(always)]
        fn input(&self, ky: usize) -> Option<&[f32]> {
            let g = self.g;
            let iy = (self.oy * g.stride_h + ky * g.dilation_h).checked_sub(g.pad_top)?;
            let len = g.in_w * g.in_c;
            (iy < g.in_h).then(|| &self.img[iy * len..][..len])
        }
    }

    /// The lanes of the 16-channel block starting at `cb` that hold channels.
    #[inline(always)]
    fn block_mask(c: usize, cb: usize) -> __mmask16 {
        let n = (c - cb).min(16);
        ((1u32 << n) - 1) as __mmask16
    }

    /// Loads the block of `s` at `at` (lanes outside `mask` read as zero, not touched).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn load(s: &[f32], at: usize, mask: __mmask16) -> __m512 {
        assert!(at + mask.count_ones() as usize <= s.len());
        // SAFETY: the lanes `mask` selects are its low ones (`block_mask`), in bounds as
        // just checked; masked-off lanes are not accessed.
        unsafe { _mm512_maskz_loadu_ps(mask, s.as_ptr().add(at)) }
    }

    /// Sums `N` adjacent output pixels from `ox` on, all in the row's interior (every tap
    /// inside the input), into `out` (the row's output).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn group<const N: usize>(r: &Row<'_>, out: &mut [f32], ox: usize) {
        let g = r.g;
        let (c, w, kh, kw) = (g.in_c, g.in_w, g.filter_h, g.filter_w);
        let (sw, dw, pl) = (g.stride_w, g.dilation_w, g.pad_left);
        // The input columns the group reads run from `first` to `last`: the pointer
        // arithmetic below stays inside each input row.
        let first = ox * sw - pl;
        let last = (ox + N - 1) * sw + (kw - 1) * dw - pl;
        assert!(last < w);
        let out = &mut out[ox * c..][..N * c];
        for cb in (0..c).step_by(16) {
            let mask = block_mask(c, cb);
            let mut acc = [load(r.bias, cb, mask); N];
            for ky in 0..kh {
                let Some(row) = r.input(ky) else { continue };
                for kx in 0..kw {
                    let wv = load(r.filter, (ky * kw + kx) * c + cb, mask);
                    let at = (first + kx * dw) * c + cb;
                    for (p, a) in acc.iter_mut().enumerate() {
                        // Pixel `p` reads input column `first + kx * dw + p * sw`, at most
                        // `last < w`, channels `cb..` that `mask` keeps below `c`.
                        // SAFETY: so the load stays inside `row` (`w * c` floats).
                        let x = unsafe {
                            _mm512_maskz_loadu_ps(mask, row.as_ptr().add(at + p * sw * c))
                        };
                        *a = _mm512_fmadd_ps(x, wv, *a);
                    }
                }
            }
            for (p, &a) in acc.iter().enumerate() {
                let at = p * c + cb;
                assert!(at + mask.count_ones() as usize <= out.len());
                // SAFETY: in bounds as just checked; only `mask`'s lanes are written.
                unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr().add(at), mask, a) };
            }
        }
    }

    /// Sums output pixel `ox` of the row into `out`, skipping the taps outside the input.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn pixel(r: &Row<'_>, out: &mut [f32], ox: usize) {
        let g = r.g;
        let (c, w, kh, kw) = (g.in_c, g.in_w, g.filter_h, g.filter_w);
        let out = &mut out[ox * c..][..c];
        for cb in (0..c).step_by(16) {
            let mask = block_mask(c, cb);
            let mut acc = load(r.bias, cb, mask);
            for ky in 0..kh {
                let Some(row) = r.input(ky) else { continue };
                for kx in 0..kw {
                    let ix = (ox * g.stride_w + kx * g.dilation_w).wrapping_sub(g.pad_left);
                    if ix >= w {
                        continue;
                    }
                    let x = load(row, ix * c + cb, mask);
                    let wv = load(r.filter, (ky * kw + kx) * c + cb, mask);
                    acc = _mm512_fmadd_ps(x, wv, acc);
                }
            }
            assert!(cb + mask.count_ones() as usize <= out.len());
            // SAFETY: in bounds as just checked; only `mask`'s lanes are written.
            unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr().add(cb), mask, acc) };
        }
    }

    #[target_feature(enable = "avx512f")]
    fn run_avx512(a: Args<'_>) {
        let Args {
            g,
            src,
            dst,
            filter,
            bias,
        } = a;
        let (h, w, c, oh, ow) = (g.in_h, g.in_w, g.in_c, g.out_h, g.out_w);
        if ow * c == 0 || oh == 0 {
            return;
        }
        let (filter, bias) = (&filter[..g.filter_h * g.filter_w * c], &bias[..c]);
        let (x0, x1) = interior(g);
        for (row, out) in dst.chunks_exact_mut(ow * c).enumerate() {
            let (b, oy) = (row / oh, row % oh);
            let img = &src[b * h * w * c..][..h * w * c];
            let r = Row {
                g,
                img,
                filter,
                bias,
                oy,
            };
            let mut ox = 0;
            while ox < ow {
                if ox >= x0 && ox + 8 <= x1 {
                    group::<8>(&r, out, ox);
                    ox += 8;
                } else if ox >= x0 && ox + 4 <= x1 {
                    group::<4>(&r, out, ox);
                    ox += 4;
                } else {
                    pixel(&r, out, ox);
                    ox += 1;
                }
            }
        }
    }

    pub(super) fn avx512(a: Args<'_>) {
        // SAFETY: chosen by `kernel` only where the CPU has AVX-512F.
        unsafe { run_avx512(a) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::conv::depthwise::pixels_f32;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(96))]

        /// The AVX-512 kernel gives bit-identical results to the portable per-pixel loop:
        /// channels below, at and past 16-lane blocks, strides, dilations, padding on every
        /// side, batches.
        #[test]
        fn avx512_matches_pixels_exactly(
            (n, h, w) in (1usize..3, 1usize..7, 1usize..30),
            c in prop_oneof![1usize..17, Just(17usize), Just(35usize), 30usize..70],
            (kh, kw, sh, sw, dh, dw) in (1usize..4, 1usize..4, 1usize..3, 1usize..3, 1usize..3, 1usize..3),
            (pt, pl, pb, pr) in (0usize..3, 0usize..3, 0usize..3, 0usize..3),
            seed in any::<u32>(),
        ) {
            let Some(k) = kernel() else { return Ok(()) };
            prop_assume!(h + pt + pb > (kh - 1) * dh && w + pl + pr > (kw - 1) * dw);
            let oh = (h + pt + pb - (kh - 1) * dh - 1) / sh + 1;
            let ow = (w + pl + pr - (kw - 1) * dw - 1) / sw + 1;
            let g = ConvGeometry {
                batches: n, in_h: h, in_w: w, in_c: c, out_h: oh, out_w: ow,
                filter_h: kh, filter_w: kw, stride_h: sh, stride_w: sw,
                dilation_h: dh, dilation_w: dw, pad_top: pt, pad_left: pl,
            };
            let val = |i: usize, md: u32| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 7) % md
            };
            let x: Vec<f32> = (0..n * h * w * c).map(|i| val(i, 97) as f32 * 0.013 - 0.6).collect();
            let f: Vec<f32> = (0..kh * kw * c).map(|i| val(i + 7, 89) as f32 * 0.021 - 0.9).collect();
            let bias: Vec<f32> = (0..c).map(|i| val(i + 3, 13) as f32 * 0.1).collect();
            let mut simd = vec![f32::NAN; n * oh * ow * c];
            let mut pixels = vec![0.0f32; n * oh * ow * c];
            k(Args { g: &g, src: &x, dst: &mut simd, filter: &f, bias: &bias });
            pixels_f32(&g, &x, &mut pixels, &f, &bias);
            prop_assert!(simd.iter().zip(&pixels).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }

    #[test]
    fn the_interior_is_where_every_tap_is_inside() {
        let g = |w, ow, kw, sw, dw, pl| ConvGeometry {
            batches: 1,
            in_h: 1,
            in_w: w,
            in_c: 1,
            out_h: 1,
            out_w: ow,
            filter_h: 1,
            filter_w: kw,
            stride_h: 1,
            stride_w: sw,
            dilation_h: 1,
            dilation_w: dw,
            pad_top: 0,
            pad_left: pl,
        };
        // 96 wide, 3 taps, SAME padding: the first and last columns read padding.
        assert_eq!(interior(&g(96, 96, 3, 1, 1, 1)), (1, 95));
        // Stride 2, padding only on the right: the last column reads padding.
        assert_eq!(interior(&g(96, 48, 3, 2, 1, 0)), (0, 47));
        // A filter wider than the input: no interior.
        assert_eq!(interior(&g(2, 3, 5, 1, 1, 2)), (2, 2));
        assert_eq!(interior(&g(4, 2, 3, 1, 1, 0)), (0, 2));
    }
}
