//! The float32 depthwise convolution with multiplier 1 written with vector intrinsics, in
//! two builds from one body: AVX-512F (16 channels per register) and AVX2 + FMA (8). The
//! sums of up to eight output pixels of a row are held in registers across all the taps,
//! so each tap costs one weight load and, per pixel, one input load and a fused
//! multiply-add (no accumulator traffic through memory); the fused activation's clamp is
//! applied in the store. The compiler did not find this blocking in plain Rust (it mixed
//! vector widths and spilled).
//!
//! Each sum is the bias, then `input * weight` added tap by tap in filter order, skipping
//! taps outside the input, each as one fused multiply-add (one rounding): the same
//! operations in the same order as the portable loops (`f32::mul_add`), so the bits are
//! the same on every CPU; the clamp is [`Activation::apply`]'s (NaN passes through).
//! Channels past the last whole register go through masked loads and stores.

use crate::kernels::qconv::ConvGeometry;
use crate::kernels::Activation;

/// One depthwise convolution with multiplier 1 in NHWC, its activation applied.
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
    /// The fused activation, applied to each sum as it is stored.
    pub(crate) act: Activation,
}

/// A depthwise kernel: one [`Args`].
pub(crate) type Depthwise = fn(Args<'_>);

/// The widest kernel the CPU has and `VNPU_ISA` allows (AVX-512, else AVX2; chosen once);
/// `None` without either, and the caller runs the portable loops.
pub(crate) fn kernel() -> Option<Depthwise> {
    static CHOSEN: std::sync::OnceLock<Option<Depthwise>> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| kernel_for(crate::kernels::isa::isa()))
}

/// The kernel for instruction-set level `isa` (which the CPU must have), if any.
fn kernel_for(isa: crate::kernels::isa::Isa) -> Option<Depthwise> {
    use crate::kernels::isa::Isa;
    #[cfg(target_arch = "x86_64")]
    {
        match isa {
            Isa::Avx512 | Isa::Avx512Vnni => return Some(x86::avx512 as Depthwise),
            Isa::Avx2 => return Some(x86::avx2 as Depthwise),
            Isa::Scalar => {}
        }
    }
    let _ = isa;
    None
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

/// The kernel's loops over the vector primitives of module `$v` (`LANES`, `V`, `Mask`,
/// `mask`, `load`, `load_ptr`, `splat`, `fma`, `clamp`, `store`), built with `$feat`.
#[cfg(target_arch = "x86_64")]
macro_rules! depthwise_body {
    ($v:ident, $feat:literal) => {
        use super::super::{interior, Args};
        use super::$v::{clamp, fma, load, load_ptr, mask, splat, store, Mask, LANES, V};
        use crate::kernels::qconv::ConvGeometry;

        /// Pixels of one sliding group ([`group_s1`]): eight with 32 registers; six with
        /// AVX2's 16, where eight sums, the filter row and the input columns the compiler
        /// loads ahead did not fit and the sums were spilled to the stack on every tap
        /// (dw 96x96x16 3x3s1 at VNPU_ISA=avx2: 53 -> 48-51 us, 48x48x32: 26.5 -> 23.8 us).
        const SN: usize = if LANES == 8 { 6 } else { 8 };

        /// What every pixel of one output row shares.
        struct Row<'a> {
            g: &'a ConvGeometry,
            /// The batch's input image, `[in_h, in_w, in_c]`.
            img: &'a [f32],
            filter: &'a [f32],
            bias: &'a [f32],
            oy: usize,
            /// The activation's clamp, if it has one.
            clamp: Option<(V, V)>,
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

            /// Stores sum `a` (clamped) at `at` of `out`, `m`'s lanes only.
            #[target_feature(enable = $feat)]
            #[inline]
            fn put(&self, out: &mut [f32], at: usize, m: Mask, a: V) {
                let a = match self.clamp {
                    Some((lo, hi)) => clamp(a, lo, hi),
                    None => a,
                };
                store(out, at, m, a);
            }
        }

        /// Sums `N` adjacent output pixels from `ox` on, all in the row's interior (every
        /// tap inside the input), into `out` (the row's output).
        #[target_feature(enable = $feat)]
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
            for cb in (0..c).step_by(LANES) {
                let m = mask(c, cb);
                let mut acc = [load(r.bias, cb, m); N];
                for ky in 0..kh {
                    let Some(row) = r.input(ky) else { continue };
                    for kx in 0..kw {
                        let wv = load(r.filter, (ky * kw + kx) * c + cb, m);
                        let at = (first + kx * dw) * c + cb;
                        for (p, a) in acc.iter_mut().enumerate() {
                            // Pixel `p` reads input column `first + kx * dw + p * sw`, at
                            // most `last < w`, channels `cb..` that `m` keeps below `c`.
                            // SAFETY: so the load stays inside `row` (`w * c` floats).
                            let x = unsafe { load_ptr(row.as_ptr().add(at + p * sw * c), m) };
                            *a = fma(x, wv, *a);
                        }
                    }
                }
                for (p, &a) in acc.iter().enumerate() {
                    r.put(out, p * c + cb, m, a);
                }
            }
        }

        /// [`group`] for stride 1, dilation 1 and `KW` filter columns: along a filter row the
        /// `N` pixels read the `N + KW - 1` input columns from the first on, so each column
        /// is loaded once and feeds every pixel whose window holds it (`N * KW` loads become
        /// `N + KW - 1`). Each sum still takes its taps in filter order (for a pixel, column
        /// `j` is tap `j - p`, rising with `j`): the same bits.
        #[target_feature(enable = $feat)]
        #[inline]
        fn group_s1<const N: usize, const KW: usize>(r: &Row<'_>, out: &mut [f32], ox: usize) {
            let g = r.g;
            let (c, w, kh) = (g.in_c, g.in_w, g.filter_h);
            let first = ox - g.pad_left;
            assert!(first + N + KW - 1 <= w && g.filter_w == KW);
            let out = &mut out[ox * c..][..N * c];
            for cb in (0..c).step_by(LANES) {
                let m = mask(c, cb);
                let mut acc = [load(r.bias, cb, m); N];
                for ky in 0..kh {
                    let Some(row) = r.input(ky) else { continue };
                    let mut wv = [splat(0.0); KW];
                    for (kx, v) in wv.iter_mut().enumerate() {
                        *v = load(r.filter, (ky * KW + kx) * c + cb, m);
                    }
                    for j in 0..N + KW - 1 {
                        // Column `first + j < w` (asserted), channels `cb..` that `m` keeps
                        // below `c`.
                        // SAFETY: so the load stays inside `row` (`w * c` floats).
                        let x = unsafe { load_ptr(row.as_ptr().add((first + j) * c + cb), m) };
                        for (kx, &wk) in wv.iter().enumerate() {
                            if let Some(p) = j.checked_sub(kx).filter(|&p| p < N) {
                                acc[p] = fma(x, wk, acc[p]);
                            }
                        }
                    }
                }
                for (p, &a) in acc.iter().enumerate() {
                    r.put(out, p * c + cb, m, a);
                }
            }
        }

        /// Sums output pixel `ox` of the row into `out`, skipping the taps outside the
        /// input (those of columns `kx` outside the range found first).
        #[target_feature(enable = $feat)]
        #[inline]
        fn pixel(r: &Row<'_>, out: &mut [f32], ox: usize) {
            let g = r.g;
            let (c, w, kh, kw) = (g.in_c, g.in_w, g.filter_h, g.filter_w);
            let (dw, base) = (g.dilation_w, ox * g.stride_w);
            // The taps `kx` whose column `base + kx * dw - pad_left` lies in `[0, w)`.
            let kx0 = g.pad_left.saturating_sub(base).div_ceil(dw).min(kw);
            let kx1 = match (w + g.pad_left).checked_sub(base + 1) {
                Some(reach) => (reach / dw + 1).min(kw),
                None => 0,
            };
            let out = &mut out[ox * c..][..c];
            for cb in (0..c).step_by(LANES) {
                let m = mask(c, cb);
                let mut acc = load(r.bias, cb, m);
                for ky in 0..kh {
                    let Some(row) = r.input(ky) else { continue };
                    for kx in kx0..kx1 {
                        let ix = base + kx * dw - g.pad_left;
                        let x = load(row, ix * c + cb, m);
                        let wv = load(r.filter, (ky * kw + kx) * c + cb, m);
                        acc = fma(x, wv, acc);
                    }
                }
                r.put(out, cb, m, acc);
            }
        }

        #[target_feature(enable = $feat)]
        pub(in super::super) fn run(a: Args<'_>) {
            let Args {
                g,
                src,
                dst,
                filter,
                bias,
                act,
            } = a;
            let (h, w, c, oh, ow) = (g.in_h, g.in_w, g.in_c, g.out_h, g.out_w);
            if ow * c == 0 || oh == 0 {
                return;
            }
            let (filter, bias) = (&filter[..g.filter_h * g.filter_w * c], &bias[..c]);
            let clamp = (act != crate::kernels::Activation::None).then(|| {
                let (lo, hi) = act.range();
                (splat(lo), splat(hi))
            });
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
                    clamp,
                };
                // Stride 1, dilation 1, three or five filter columns: the sliding group.
                let slide = (g.stride_w == 1 && g.dilation_w == 1)
                    .then_some(g.filter_w)
                    .filter(|k| matches!(k, 3 | 5));
                let mut ox = 0;
                while ox < ow {
                    if ox >= x0 && ox + SN <= x1 && slide == Some(3) {
                        group_s1::<SN, 3>(&r, out, ox);
                        ox += SN;
                    } else if ox >= x0 && ox + SN <= x1 && slide == Some(5) {
                        group_s1::<SN, 5>(&r, out, ox);
                        ox += SN;
                    } else if ox >= x0 && ox + 8 <= x1 {
                        group::<8>(&r, out, ox);
                        ox += 8;
                    } else if ox >= x0 && ox + 4 <= x1 {
                        group::<4>(&r, out, ox);
                        ox += 4;
                    } else if ox >= x0 && ox + 2 <= x1 {
                        group::<2>(&r, out, ox);
                        ox += 2;
                    } else if ox >= x0 && ox < x1 {
                        group::<1>(&r, out, ox);
                        ox += 1;
                    } else {
                        pixel(&r, out, ox);
                        ox += 1;
                    }
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Args;

    /// AVX-512F primitives: 16 lanes, bit masks.
    mod v512 {
        use std::arch::x86_64::*;

        pub(super) const LANES: usize = 16;
        pub(super) type V = __m512;

        /// The low lanes of a block that hold channels.
        #[derive(Clone, Copy)]
        pub(super) struct Mask(__mmask16);

        /// The lanes of the block starting at channel `cb` (of `c`) that hold channels.
        #[inline(always)]
        pub(super) fn mask(c: usize, cb: usize) -> Mask {
            let n = (c - cb).min(LANES);
            Mask(((1u32 << n) - 1) as __mmask16)
        }

        /// Loads `m`'s lanes from `p` (the others read as zero, not touched).
        ///
        /// # Safety
        /// `m`'s lanes from `p` on must be readable.
        #[target_feature(enable = "avx512f")]
        #[inline]
        pub(super) unsafe fn load_ptr(p: *const f32, m: Mask) -> V {
            // SAFETY: the caller's promise.
            unsafe { _mm512_maskz_loadu_ps(m.0, p) }
        }

        /// Loads the block of `s` at `at`, `m`'s lanes.
        #[target_feature(enable = "avx512f")]
        #[inline]
        pub(super) fn load(s: &[f32], at: usize, m: Mask) -> V {
            assert!(at + m.0.count_ones() as usize <= s.len());
            // SAFETY: `m`'s lanes are its low ones, in bounds as just checked.
            unsafe { load_ptr(s.as_ptr().add(at), m) }
        }

        /// Stores `m`'s lanes of `v` at `at` of `s`.
        #[target_feature(enable = "avx512f")]
        #[inline]
        pub(super) fn store(s: &mut [f32], at: usize, m: Mask, v: V) {
            assert!(at + m.0.count_ones() as usize <= s.len());
            // SAFETY: in bounds as just checked; only `m`'s (low) lanes are written.
            unsafe { _mm512_mask_storeu_ps(s.as_mut_ptr().add(at), m.0, v) }
        }

        #[target_feature(enable = "avx512f")]
        #[inline]
        pub(super) fn splat(x: f32) -> V {
            _mm512_set1_ps(x)
        }

        #[target_feature(enable = "avx512f")]
        #[inline]
        pub(super) fn fma(x: V, w: V, a: V) -> V {
            _mm512_fmadd_ps(x, w, a)
        }

        /// `v` clamped to `[lo, hi]`, NaN kept (max and min return their second operand
        /// when one is NaN).
        #[target_feature(enable = "avx512f")]
        #[inline]
        pub(super) fn clamp(v: V, lo: V, hi: V) -> V {
            _mm512_min_ps(hi, _mm512_max_ps(lo, v))
        }
    }

    /// AVX2 + FMA primitives: 8 lanes, masks as lane vectors (a whole block unmasked).
    mod v256 {
        use std::arch::x86_64::*;

        pub(super) const LANES: usize = 8;
        pub(super) type V = __m256;

        /// How many low lanes of a block hold channels, and the lane mask saying so.
        #[derive(Clone, Copy)]
        pub(super) struct Mask(usize, __m256i);

        /// The lanes of the block starting at channel `cb` (of `c`) that hold channels.
        #[target_feature(enable = "avx2")]
        #[inline]
        pub(super) fn mask(c: usize, cb: usize) -> Mask {
            let n = (c - cb).min(LANES);
            let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            Mask(n, _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), lanes))
        }

        /// Loads `m`'s lanes from `p` (the others read as zero, not touched).
        ///
        /// # Safety
        /// `m`'s lanes from `p` on must be readable.
        #[target_feature(enable = "avx2")]
        #[inline]
        pub(super) unsafe fn load_ptr(p: *const f32, m: Mask) -> V {
            if m.0 == LANES {
                // SAFETY: the caller's promise (all eight lanes).
                unsafe { _mm256_loadu_ps(p) }
            } else {
                // SAFETY: the caller's promise; masked-off lanes are not accessed.
                unsafe { _mm256_maskload_ps(p, m.1) }
            }
        }

        /// Loads the block of `s` at `at`, `m`'s lanes.
        #[target_feature(enable = "avx2")]
        #[inline]
        pub(super) fn load(s: &[f32], at: usize, m: Mask) -> V {
            assert!(at + m.0 <= s.len());
            // SAFETY: `m`'s lanes are its low ones, in bounds as just checked.
            unsafe { load_ptr(s.as_ptr().add(at), m) }
        }

        /// Stores `m`'s lanes of `v` at `at` of `s`.
        #[target_feature(enable = "avx2")]
        #[inline]
        pub(super) fn store(s: &mut [f32], at: usize, m: Mask, v: V) {
            assert!(at + m.0 <= s.len());
            let p = s[at..].as_mut_ptr();
            if m.0 == LANES {
                // SAFETY: eight floats in bounds as just checked.
                unsafe { _mm256_storeu_ps(p, v) }
            } else {
                // SAFETY: in bounds as just checked; only `m`'s (low) lanes are written.
                unsafe { _mm256_maskstore_ps(p, m.1, v) }
            }
        }

        #[target_feature(enable = "avx2")]
        #[inline]
        pub(super) fn splat(x: f32) -> V {
            _mm256_set1_ps(x)
        }

        #[target_feature(enable = "avx2,fma")]
        #[inline]
        pub(super) fn fma(x: V, w: V, a: V) -> V {
            _mm256_fmadd_ps(x, w, a)
        }

        /// `v` clamped to `[lo, hi]`, NaN kept (max and min return their second operand
        /// when one is NaN).
        #[target_feature(enable = "avx2")]
        #[inline]
        pub(super) fn clamp(v: V, lo: V, hi: V) -> V {
            _mm256_min_ps(hi, _mm256_max_ps(lo, v))
        }
    }

    mod k512 {
        depthwise_body!(v512, "avx512f");
    }

    mod k256 {
        depthwise_body!(v256, "avx2,fma");
    }

    pub(super) fn avx512(a: Args<'_>) {
        // SAFETY: chosen by `kernel_for` only where the CPU has AVX-512F.
        unsafe { k512::run(a) }
    }

    pub(super) fn avx2(a: Args<'_>) {
        // SAFETY: chosen by `kernel_for` only where the CPU has AVX2 and FMA.
        unsafe { k256::run(a) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::conv::depthwise::pixels_f32;
    use crate::kernels::isa::{detected, Isa};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(96))]

        /// Every vector kernel the CPU can run (AVX2, AVX-512) gives bit-identical results
        /// to the portable per-pixel loop then the activation: channels below, at and past
        /// whole registers, strides, dilations, padding on every side, batches, every
        /// activation (NaN inputs included).
        #[test]
        fn simd_kernels_match_pixels_exactly(
            (n, h, w) in (1usize..3, 1usize..7, 1usize..30),
            c in prop_oneof![1usize..17, Just(17usize), Just(35usize), 30usize..70],
            (kh, kw, sh, sw, dh, dw) in (1usize..6, 1usize..6, 1usize..3, 1usize..3, 1usize..3, 1usize..3),
            (pt, pl, pb, pr) in (0usize..3, 0usize..3, 0usize..3, 0usize..3),
            act in prop_oneof![
                Just(Activation::None), Just(Activation::Relu),
                Just(Activation::Relu1), Just(Activation::Relu6),
            ],
            seed in any::<u32>(),
        ) {
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
            let mut x: Vec<f32> =
                (0..n * h * w * c).map(|i| val(i, 97) as f32 * 0.1 - 4.8).collect();
            if seed % 4 == 0 {
                let at = seed as usize % x.len();
                x[at] = f32::NAN;
            }
            let f: Vec<f32> = (0..kh * kw * c).map(|i| val(i + 7, 89) as f32 * 0.021 - 0.9).collect();
            let bias: Vec<f32> = (0..c).map(|i| val(i + 3, 13) as f32 * 0.1).collect();
            let mut want = vec![0.0f32; n * oh * ow * c];
            pixels_f32(&g, &x, &mut want, &f, &bias);
            act.apply_slice(&mut want);
            for isa in [Isa::Avx2, Isa::Avx512].into_iter().filter(|&l| l <= detected()) {
                let Some(k) = kernel_for(isa) else { continue };
                let mut got = vec![f32::NAN; n * oh * ow * c];
                k(Args { g: &g, src: &x, dst: &mut got, filter: &f, bias: &bias, act });
                let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                prop_assert!(same, "{} differs", isa.name());
            }
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
