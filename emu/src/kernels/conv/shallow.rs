//! CONV_2D over a three-channel input (an image network's first layer) as a direct
//! convolution with vector intrinsics. On the GEMM such a layer has a depth of 27 or 75 and
//! 16-32 output channels: the per-row bookkeeping of the windows (a row pointer each,
//! checked per segment of `kw * 3` floats) cost more than its few multiply-adds. Here a
//! tile of output pixels along a row reads its windows at fixed offsets from one pointer
//! per filter row (the stride and the filter width are compile-time constants), each tap
//! one multiply-add with a broadcast operand.
//!
//! Each output is the GEMM's sum: zero, then `x * w` added tap by tap in the filter's
//! `(ky, kx, ci)` order as one fused multiply-add each (padding taps as `0 * w`), then the
//! bias added and the activation's clamp applied — the same operations in the same order as
//! the in-place and im2col GEMM paths, so the bits are the same (proptest
//! `shallow_matches_the_gemm_path`).

use crate::kernels::gemm::NR;
use crate::kernels::qconv::ConvGeometry;

/// Input channels this kernel takes.
const C: usize = 3;

/// One convolution as the GEMM path would run it: the filter in B panels.
pub(crate) struct Args<'a> {
    /// The geometry (dilation 1).
    pub(crate) g: &'a ConvGeometry,
    /// Output channels.
    pub(crate) o: usize,
    /// The input, `[batches, in_h, in_w, 3]`.
    pub(crate) src: &'a [f32],
    /// The output, `[batches, out_h, out_w, o]`.
    pub(crate) dst: &'a mut [f32],
    /// The filter as the GEMM's B panels (`ceil(o / 16)` panels of `k x 16`).
    pub(crate) panels: &'a [f32],
    /// The bias, `[o]`.
    pub(crate) bias: &'a [f32],
    /// The fused activation's clamp, if any.
    pub(crate) clamp: Option<(f32, f32)>,
}

/// Runs the convolution if this kernel takes it (3 input channels, a 3- or 5-wide filter,
/// horizontal stride 1 or 2, dilation 1, consistent lengths, a CPU with AVX-512 or AVX2
/// that `VNPU_ISA` allows); returns whether it ran (else the caller runs the GEMM path).
pub(crate) fn try_run(a: Args<'_>) -> bool {
    try_run_at(a, crate::kernels::isa::isa())
}

/// [`try_run`] at instruction-set level `level` (capped at what the CPU has).
pub(crate) fn try_run_at(a: Args<'_>, level: crate::kernels::isa::Isa) -> bool {
    let g = a.g;
    let k = g.filter_h * g.filter_w * C;
    let fits = g.in_c == C
        && matches!(g.filter_w, 3 | 5)
        && matches!(g.stride_w, 1 | 2)
        && g.dilation_h == 1
        && g.dilation_w == 1
        && g.filter_h >= 1
        && a.o >= 1
        && a.bias.len() == a.o
        && a.panels.len() == a.o.div_ceil(NR) * k * NR
        && Some(a.src.len()) == mul(&[g.batches, g.in_h, g.in_w, C])
        && Some(a.dst.len()) == mul(&[g.batches, g.out_h, g.out_w, a.o]);
    if !fits {
        return false;
    }
    let _ = level;
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::isa::{detected, Isa};
        match level.min(detected()) {
            Isa::Avx512 | Isa::Avx512Vnni => {
                // SAFETY: the CPU has AVX-512F and FMA (the level is capped at `detected`).
                unsafe { x86::run512(a) };
                return true;
            }
            Isa::Avx2 => {
                // SAFETY: the CPU has AVX2 and FMA.
                unsafe { x86::run256(a) };
                return true;
            }
            Isa::Scalar => {}
        }
    }
    false
}

/// The product of `dims`, if it does not overflow.
fn mul(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// For output row `oy`: whether every window of the row lies inside the image vertically,
/// and the output columns `x0..x1` whose windows lie inside horizontally.
fn interior(g: &ConvGeometry, oy: usize) -> Option<(usize, usize)> {
    let iy = (oy * g.stride_h).checked_sub(g.pad_top)?;
    if iy + g.filter_h > g.in_h {
        return None;
    }
    // ox * sw >= pad_left, and ox * sw - pad_left + kw <= in_w.
    let x0 = g.pad_left.div_ceil(g.stride_w).min(g.out_w);
    let x1 = match (g.in_w + g.pad_left).checked_sub(g.filter_w) {
        Some(last) => (last / g.stride_w + 1).min(g.out_w),
        None => 0,
    };
    Some((x0, x1.max(x0)))
}

/// The image offset of tap `(ky, kx)` of output pixel `(oy, ox)`, if inside the image.
#[inline]
fn tap(g: &ConvGeometry, oy: usize, ox: usize, ky: usize, kx: usize) -> Option<usize> {
    let iy = (oy * g.stride_h + ky).checked_sub(g.pad_top)?;
    let ix = (ox * g.stride_w + kx).checked_sub(g.pad_left)?;
    (iy < g.in_h && ix < g.in_w).then_some((iy * g.in_w + ix) * C)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{interior, tap, Args, C, NR};
    use std::arch::x86_64::*;

    /// Output pixels of one AVX-512 tile (twelve rows of sums, one or two panels each).
    const R512: usize = 12;
    /// Output pixels of one AVX2 tile (six rows of two 8-lane halves of a panel).
    const R256: usize = 6;
    /// Output pixels of one AVX2 tile over a panel's first half alone (twelve rows of one
    /// 8-lane half: the accumulators of [`R256`]'s tile).
    const R256H: usize = 12;

    /// A [`tile512`] instance.
    type Tile512 = unsafe fn(*const f32, usize, usize, &[f32], usize, usize) -> [[__m512; 2]; R512];
    /// A [`tile256`] instance: `R` pixels, `H` halves of a panel.
    type Tile256<const R: usize, const H: usize> =
        unsafe fn(*const f32, usize, usize, &[f32]) -> [[__m256; H]; R];

    /// The lanes of panel `p` that hold output channels (of `o`), as a bit mask.
    fn lanes(o: usize, p: usize) -> usize {
        (o - p * NR).min(NR)
    }

    /// Every output pixel of `a`: tiles of [`R512`] pixels where their windows lie inside
    /// the image (the last tile of a row overlapping the one before it, its pixels
    /// computed again to the same bits), single pixels elsewhere.
    ///
    /// # Safety
    /// The CPU has AVX-512F and FMA; `a` passed [`super::try_run`]'s checks.
    #[target_feature(enable = "avx512f,fma")]
    pub(super) unsafe fn run512(a: Args<'_>) {
        let Args {
            g,
            o,
            src,
            dst,
            panels,
            bias,
            clamp,
        } = a;
        let (h, w, oh, ow) = (g.in_h, g.in_w, g.out_h, g.out_w);
        let k = g.filter_h * g.filter_w * C;
        let np = o.div_ceil(NR);
        // The tile kernels over one and two panels for this filter width and stride.
        let tiles: (Tile512, Tile512) = match (g.filter_w, g.stride_w) {
            (3, 1) => (tile512::<3, 1, 1>, tile512::<3, 1, 2>),
            (3, _) => (tile512::<3, 2, 1>, tile512::<3, 2, 2>),
            (_, 1) => (tile512::<5, 1, 1>, tile512::<5, 1, 2>),
            (_, _) => (tile512::<5, 2, 1>, tile512::<5, 2, 2>),
        };
        let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
        let masks: Vec<__mmask16> = (0..np)
            .map(|p| ((1u32 << lanes(o, p)) - 1) as __mmask16)
            .collect();
        // The bias per panel (lanes past `o` zero, never stored).
        let biases: Vec<__m512> = (0..np)
            // SAFETY: the mask keeps the lanes below `lanes(o, p)`, inside `bias` (`o` long).
            .map(|p| unsafe { _mm512_maskz_loadu_ps(masks[p], bias.as_ptr().add(p * NR)) })
            .collect();
        let store = |out: &mut [f32], p: usize, sums: __m512| {
            let v = _mm512_add_ps(biases[p], sums);
            // Max and min return their second operand when one is NaN: NaN kept.
            let v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
            let dst = &mut out[p * NR..][..lanes(o, p)];
            // SAFETY: `dst` is `lanes(o, p)` floats; the mask writes only those lanes.
            unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr(), masks[p], v) };
        };
        for b in 0..g.batches {
            let img = &src[b * h * w * C..][..h * w * C];
            let out = &mut dst[b * oh * ow * o..][..oh * ow * o];
            for oy in 0..oh {
                let inside = interior(g, oy).filter(|&(x0, x1)| x1 - x0 >= R512);
                let mut ox = 0;
                while ox < ow {
                    let Some((x0, x1)) = inside.filter(|&(x0, x1)| (x0..x1).contains(&ox)) else {
                        // One pixel, padding taps as zeros.
                        let px = &mut out[(oy * ow + ox) * o..][..o];
                        for p in 0..np {
                            let panel = &panels[p * k * NR..][..k * NR];
                            let mut acc = _mm512_setzero_ps();
                            for ky in 0..g.filter_h {
                                for kx in 0..g.filter_w {
                                    let at = tap(g, oy, ox, ky, kx);
                                    for ci in 0..C {
                                        let x = at.map_or(0.0, |at| img[at + ci]);
                                        let t = (ky * g.filter_w + kx) * C + ci;
                                        let w = panel[t * NR..].as_ptr();
                                        // SAFETY: `panel` is `k * NR` floats and `t < k`.
                                        let wv = unsafe { _mm512_loadu_ps(w) };
                                        acc = _mm512_fmadd_ps(_mm512_set1_ps(x), wv, acc);
                                    }
                                }
                            }
                            store(px, p, acc);
                        }
                        ox += 1;
                        continue;
                    };
                    // A tile inside `x0..x1` (the row's last one moved back to fit).
                    let start = ox.min(x1 - R512);
                    debug_assert!(start >= x0);
                    // The tile's first window's top-left tap; the rows of the windows are
                    // `w * C` floats apart, pixel `r`'s window `r * stride_w * C` further.
                    let first = tap(g, oy, start, 0, 0).unwrap_or(0);
                    // The furthest tap read: pixel R512 - 1's bottom-right one.
                    let last = tap(g, oy, start + R512 - 1, g.filter_h - 1, g.filter_w - 1);
                    assert!(last.is_some_and(|l| l + C <= img.len()));
                    let base = img[first..].as_ptr();
                    let tile_out = &mut out[(oy * ow + start) * o..][..R512 * o];
                    let mut p = 0;
                    while p < np {
                        let two = p + 1 < np;
                        let tile = if two { tiles.1 } else { tiles.0 };
                        // Every tap the tile reads lies between `first` and `last` (checked
                        // above) inside `img`; `panels` holds `np` panels of `k * NR` floats.
                        // SAFETY: as just said, and `p + 1 < np` for two panels.
                        let sums = unsafe { tile(base, w * C, g.filter_h, panels, p, k) };
                        for (r, row) in sums.iter().enumerate() {
                            let px = &mut tile_out[r * o..][..o];
                            store(px, p, row[0]);
                            if two {
                                store(px, p + 1, row[1]);
                            }
                        }
                        p += if two { 2 } else { 1 };
                    }
                    ox = start + R512;
                }
            }
        }
    }

    /// The sums of [`R512`] output pixels along a row over panels `p..p + P` (of `k * NR`
    /// floats each in `panels`): `base` is the first pixel's window's top-left tap, input
    /// rows `pitch` floats apart, `kh` filter rows. `P` is 1 or 2.
    ///
    /// # Safety
    /// The CPU has AVX-512F and FMA; every tap `base + ky * pitch + r * SW * C + kx * C + ci`
    /// (`ky < kh`, `r < R512`, `kx < KW`, `ci < C`) is readable; `panels` holds panels
    /// `p..p + P` of `k = kh * KW * C` rows each.
    #[target_feature(enable = "avx512f,fma")]
    #[inline]
    unsafe fn tile512<const KW: usize, const SW: usize, const P: usize>(
        base: *const f32,
        pitch: usize,
        kh: usize,
        panels: &[f32],
        p: usize,
        k: usize,
    ) -> [[__m512; 2]; R512] {
        // Panels past `P` stay zero (not stored).
        let mut acc = [[_mm512_setzero_ps(); 2]; R512];
        let pan: [&[f32]; P] = std::array::from_fn(|q| &panels[(p + q) * k * NR..][..k * NR]);
        for ky in 0..kh {
            // SAFETY: the caller's promise (this is the row of tap row `ky`).
            let row = unsafe { base.add(ky * pitch) };
            for kx in 0..KW {
                for ci in 0..C {
                    let t = (ky * KW + kx) * C + ci;
                    // SAFETY: each panel is `k * NR` floats and `t < k`.
                    let wv: [__m512; P] = std::array::from_fn(|q| unsafe {
                        _mm512_loadu_ps(pan[q][t * NR..].as_ptr())
                    });
                    for (r, acc) in acc.iter_mut().enumerate() {
                        // SAFETY: the caller's promise.
                        let x = _mm512_set1_ps(unsafe { *row.add(r * SW * C + kx * C + ci) });
                        for q in 0..P {
                            acc[q] = _mm512_fmadd_ps(x, wv[q], acc[q]);
                        }
                    }
                }
            }
        }
        acc
    }

    /// [`run512`] for AVX2: tiles of [`R256`] pixels, each panel as two 8-lane halves; a
    /// last panel of at most 8 channels on its own in tiles of [`R256H`] pixels over its
    /// first half (the six-row tile multiplied its empty second half too: a quarter of the
    /// multiply-adds of a 24-channel layer).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `a` passed [`super::try_run`]'s checks.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn run256(a: Args<'_>) {
        let Args {
            g,
            o,
            src,
            dst,
            panels,
            bias,
            clamp,
        } = a;
        let (h, w, oh, ow) = (g.in_h, g.in_w, g.out_h, g.out_w);
        let np = o.div_ceil(NR);
        let whole = if lanes(o, np - 1) <= 8 { np - 1 } else { np };
        let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        // Bias padded to whole panels (lanes past `o` zero, never stored).
        let mut padded = vec![0.0f32; np * NR];
        padded[..o].copy_from_slice(bias);
        let cx = Cx256 {
            g,
            o,
            k: g.filter_h * g.filter_w * C,
            panels,
            bias: &padded,
            lo: _mm256_set1_ps(lo),
            hi: _mm256_set1_ps(hi),
        };
        let (tile, tile_half) = (pick256::<R256, 2>(g), pick256::<R256H, 1>(g));
        for b in 0..g.batches {
            let img = &src[b * h * w * C..][..h * w * C];
            let out = &mut dst[b * oh * ow * o..][..oh * ow * o];
            for oy in 0..oh {
                // SAFETY: the CPU has AVX2 and FMA; the tiles are this geometry's.
                unsafe {
                    cx.row(img, out, oy, 0..whole, tile);
                    cx.row(img, out, oy, whole..np, tile_half);
                }
            }
        }
    }

    /// The tile kernel for `g`'s filter width and stride.
    fn pick256<const R: usize, const H: usize>(g: &super::ConvGeometry) -> Tile256<R, H> {
        match (g.filter_w, g.stride_w) {
            (3, 1) => tile256::<3, 1, R, H>,
            (3, _) => tile256::<3, 2, R, H>,
            (_, 1) => tile256::<5, 1, R, H>,
            (_, _) => tile256::<5, 2, R, H>,
        }
    }

    /// What [`run256`]'s rows share: the convolution, the bias padded to whole panels and
    /// the clamp's bounds.
    struct Cx256<'a> {
        g: &'a super::ConvGeometry,
        o: usize,
        k: usize,
        panels: &'a [f32],
        bias: &'a [f32],
        lo: __m256,
        hi: __m256,
    }

    impl Cx256<'_> {
        /// Output row `oy`'s channels of panels `ps`: tiles of `R` pixels (`H` halves of a
        /// panel each) where their windows lie inside the image (the last tile of a row
        /// overlapping the one before it, its pixels computed again to the same bits),
        /// single pixels elsewhere.
        ///
        /// # Safety
        /// The CPU has AVX2 and FMA; `tile` is [`pick256`]'s for this geometry; `img` and
        /// `out` are one batch's image and output.
        #[target_feature(enable = "avx2,fma")]
        unsafe fn row<const R: usize, const H: usize>(
            &self,
            img: &[f32],
            out: &mut [f32],
            oy: usize,
            ps: std::ops::Range<usize>,
            tile: Tile256<R, H>,
        ) {
            let Cx256 {
                g, o, k, panels, ..
            } = *self;
            let (w, ow) = (g.in_w, g.out_w);
            if ps.is_empty() {
                return;
            }
            let inside = interior(g, oy).filter(|&(x0, x1)| x1 - x0 >= R);
            let mut ox = 0;
            while ox < ow {
                let Some((x0, x1)) = inside.filter(|&(x0, x1)| (x0..x1).contains(&ox)) else {
                    // One pixel, padding taps as zeros.
                    let px = &mut out[(oy * ow + ox) * o..][..o];
                    for p in ps.clone() {
                        let panel = &panels[p * k * NR..][..k * NR];
                        let mut acc = [_mm256_setzero_ps(); H];
                        for ky in 0..g.filter_h {
                            for kx in 0..g.filter_w {
                                let at = tap(g, oy, ox, ky, kx);
                                for ci in 0..C {
                                    let x = _mm256_set1_ps(at.map_or(0.0, |at| img[at + ci]));
                                    let t = (ky * g.filter_w + kx) * C + ci;
                                    let wr = &panel[t * NR..][..NR];
                                    for (half, acc) in acc.iter_mut().enumerate() {
                                        let half = wr[half * 8..].as_ptr();
                                        // SAFETY: `wr` is 16 floats: 8 from `half * 8`.
                                        let wv = unsafe { _mm256_loadu_ps(half) };
                                        *acc = _mm256_fmadd_ps(x, wv, *acc);
                                    }
                                }
                            }
                        }
                        self.store(px, p, &acc);
                    }
                    ox += 1;
                    continue;
                };
                // A tile inside `x0..x1` (the row's last one moved back to fit).
                let start = ox.min(x1 - R);
                debug_assert!(start >= x0);
                // The tile's first window's top-left tap; the furthest tap read: pixel
                // R - 1's bottom-right one.
                let first = tap(g, oy, start, 0, 0).unwrap_or(0);
                let last = tap(g, oy, start + R - 1, g.filter_h - 1, g.filter_w - 1);
                assert!(last.is_some_and(|l| l + C <= img.len()));
                let base = img[first..].as_ptr();
                let tile_out = &mut out[(oy * ow + start) * o..][..R * o];
                for p in ps.clone() {
                    let panel = &panels[p * k * NR..][..k * NR];
                    // Every tap the tile reads lies between `first` and `last` (checked
                    // above) inside `img`.
                    // SAFETY: as just said, and `panel` is `k * NR` floats.
                    let sums = unsafe { tile(base, w * C, g.filter_h, panel) };
                    for (r, sums) in sums.iter().enumerate() {
                        self.store(&mut tile_out[r * o..][..o], p, sums);
                    }
                }
                ox = start + R;
            }
        }

        /// Stores one pixel's sums over panel `p` (its first `H` halves) into `px` (the
        /// pixel's `o` channels): bias added, clamped, the channels past `o` left out. In
        /// place, with a masked store for a part-filled half (through a 16-float buffer
        /// and a copy of the live lanes, each store was a call to `memmove`).
        #[target_feature(enable = "avx2,fma")]
        #[inline]
        fn store<const H: usize>(&self, px: &mut [f32], p: usize, sums: &[__m256; H]) {
            let iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            for (half, s) in sums.iter().enumerate() {
                let at = p * NR + half * 8;
                let n = self.o.saturating_sub(at).min(8);
                if n == 0 {
                    break;
                }
                // SAFETY: the bias is padded to whole panels: 8 floats from `at`.
                let b = unsafe { _mm256_loadu_ps(self.bias[at..][..8].as_ptr()) };
                let v = _mm256_add_ps(b, *s);
                // Max and min return their second operand when one is NaN: NaN kept.
                let v = _mm256_min_ps(self.hi, _mm256_max_ps(self.lo, v));
                let dst = &mut px[at..][..n];
                // SAFETY: `dst` is `n` floats; the mask writes the lanes below `n` only.
                unsafe {
                    if n == 8 {
                        _mm256_storeu_ps(dst.as_mut_ptr(), v);
                    } else {
                        let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), iota);
                        _mm256_maskstore_ps(dst.as_mut_ptr(), mask, v);
                    }
                }
            }
        }
    }

    /// [`tile512`] for AVX2: `R` pixels over the first `H` 8-lane halves of one panel
    /// (`k * NR` floats).
    ///
    /// # Safety
    /// As [`tile512`]'s, with AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn tile256<const KW: usize, const SW: usize, const R: usize, const H: usize>(
        base: *const f32,
        pitch: usize,
        kh: usize,
        panel: &[f32],
    ) -> [[__m256; H]; R] {
        // At most a panel's two halves (the loads below read `wr` up to `H * 8`).
        const { assert!(H <= 2) };
        let mut acc = [[_mm256_setzero_ps(); H]; R];
        let k = kh * KW * C;
        let panel = &panel[..k * NR];
        for ky in 0..kh {
            // SAFETY: the caller's promise (this is the row of tap row `ky`).
            let row = unsafe { base.add(ky * pitch) };
            for kx in 0..KW {
                for ci in 0..C {
                    let t = (ky * KW + kx) * C + ci;
                    let wr = &panel[t * NR..][..NR];
                    let wv: [__m256; H] = std::array::from_fn(|q| {
                        // SAFETY: `wr` is 16 floats: 8 from `q * 8` (H <= 2).
                        unsafe { _mm256_loadu_ps(wr[q * 8..].as_ptr()) }
                    });
                    for (r, acc) in acc.iter_mut().enumerate() {
                        // SAFETY: the caller's promise.
                        let x = _mm256_set1_ps(unsafe { *row.add(r * SW * C + kx * C + ci) });
                        for q in 0..H {
                            acc[q] = _mm256_fmadd_ps(x, wv[q], acc[q]);
                        }
                    }
                }
            }
        }
        acc
    }
}
