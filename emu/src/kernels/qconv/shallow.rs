//! CONV_2D on bytes over an input of at most four channels (an image network's first
//! layer) as a direct convolution, the byte twin of the float `conv/shallow.rs`. On the
//! byte GEMM such a layer's im2col wrote each output pixel's row a few bytes at a time (a
//! first layer's three channels: a 9-byte run per filter row), and that bookkeeping cost
//! several times the multiply-adds.
//!
//! Here a band of input rows is copied once into a padded image: every byte as the byte
//! GEMM reads it (`x - T::MIN`), the input zero point's byte around it, so every window
//! lies inside. A tile of [`TILE`] output pixels along a row then reads its windows at
//! fixed offsets: for each filter row, its `kw * C` bytes as `ceil(kw * C / 4)` quads
//! broadcast straight from the padded image (the bytes past the run meet zero weights),
//! each multiplied against the filter's matching group (`vpdpbusd`, or widened to `i16`
//! and `vpmaddwd` where there is no VNNI). The filter arrives packed for the GEMM
//! ([`quads::pack`]) and is re-ordered per call into these per-filter-row groups (a first
//! layer's filter is a few kilobytes at most).
//!
//! Every tap is a real tap (padding holds the zero point's byte, adding `(z - z) * w = 0`),
//! so the start values are the GEMM's (`-z * column sum`), and the integer sums, being
//! exact and wrapping, are the GEMM's bits; the same output stage requantises them
//! (proptest `shallow_bytes_match_the_gemm`).

use std::cell::Cell;

use super::bytes::copy_bytes;
use super::{window, ConvGeometry, OutputStage, QuantElem, QuantError, Result};
use crate::kernels::igemm::quads::{self, GROUP, GROUP_BYTES};
use crate::kernels::igemm::NR;
use crate::kernels::isa::{detected, Isa};

/// Output pixels of one tile (the AVX-512 kernels' accumulators; the AVX2 one runs six
/// tiles of two). The padded image is as wide as whole tiles need.
const TILE: usize = 12;

/// The most input channels this path takes.
const MAX_C: usize = 4;

/// The widest filter this path takes.
const MAX_KW: usize = 5;

/// Bytes of padded image a band holds (it stays in the second-level cache while its
/// output rows are computed; rows shared with the next band are copied again).
const BAND_BYTES: usize = 64 << 10;

/// Whether the direct kernel takes a convolution of geometry `g`: at most [`MAX_C`]
/// channels, a filter at most [`MAX_KW`] wide and not 1x1 (the GEMM reads a 1x1 window's
/// pixels in place), horizontal stride 1 or 2, no dilation.
pub(super) fn takes(g: &ConvGeometry) -> bool {
    (1..=MAX_C).contains(&g.in_c)
        && (1..=MAX_KW).contains(&g.filter_w)
        && g.filter_h >= 1
        && g.filter_h * g.filter_w > 1
        && matches!(g.stride_w, 1 | 2)
        && g.stride_h >= 1
        && g.dilation_h == 1
        && g.dilation_w == 1
}

/// Runs the convolution (`packed` the filter by [`super::bytes::pack_filter`], `z` the
/// input zero point's byte) if this kernel takes it ([`takes`]) at instruction-set level
/// `level` (capped at what the CPU has; AVX2 at least); returns whether it ran (else the
/// caller runs the byte GEMM). The caller has checked the lengths of `input` and `output`
/// against `g` and `out_c`; they are checked again here (an error, never a panic).
#[allow(clippy::too_many_arguments)]
pub(super) fn run<T: QuantElem>(
    level: Isa,
    g: &ConvGeometry,
    out_c: usize,
    input: &[T],
    packed: &[u8],
    stage: &OutputStage,
    z: u8,
    output: &mut [T],
) -> Result<bool> {
    let level = level.min(detected());
    if !takes(g) || out_c == 0 || level < Isa::Avx2 {
        return Ok(false);
    }
    let c = g.in_c;
    let (step, nq) = (g.stride_w * c, (g.filter_w * c).div_ceil(GROUP));
    let Some(row) = row_kernel(level, step, nq) else {
        return Ok(false);
    };
    let oob = || QuantError::InvalidParams("index out of bounds");
    let k = g.filter_h * g.filter_w * c;
    let start = quads::start_values(k, out_c, packed, i32::from(z))
        .ok_or(QuantError::InvalidParams("packed filter size"))?;
    let mut s = SCRATCH.take();
    reorder(g, out_c, nq, packed, &mut s.w8).ok_or_else(oob)?;
    if level < Isa::Avx512Vnni {
        s.w16.clear();
        s.w16.extend(s.w8.iter().map(|&b| i16::from(b as i8)));
    }
    let done = run_bands(g, out_c, input, row, &start, stage, z, output, &mut s);
    SCRATCH.set(s);
    done.map(|()| true)
}

/// The filter's groups in this kernel's order, into `w8`: for each panel of [`NR`]
/// output channels, for each filter row, `nq` groups of [`GROUP_BYTES`] (column `l`'s
/// four entries at bytes `4l..4l + 4`), entry `t` of group `q` being the row's entry
/// `4q + t` (`kx * C + ci`), zero past the row's `kw * C`. `None` if `packed` is short.
fn reorder(
    g: &ConvGeometry,
    out_c: usize,
    nq: usize,
    packed: &[u8],
    w8: &mut Vec<u8>,
) -> Option<()> {
    let run = g.filter_w * g.in_c;
    let k = g.filter_h * run;
    let panel = quads::panel_len(k)?;
    let np = out_c.div_ceil(NR);
    w8.clear();
    w8.resize(np * g.filter_h * nq * GROUP_BYTES, 0);
    for p in 0..np {
        let src = packed.get(p * panel..(p + 1) * panel)?;
        for ky in 0..g.filter_h {
            for q in 0..nq {
                let at = ((p * g.filter_h + ky) * nq + q) * GROUP_BYTES;
                let dst = w8.get_mut(at..at + GROUP_BYTES)?;
                for t in (0..GROUP).filter(|&t| q * GROUP + t < run) {
                    let kk = ky * run + q * GROUP + t;
                    let from = src.get((kk / GROUP) * GROUP_BYTES + kk % GROUP..)?;
                    for (d, s) in dst[t..]
                        .iter_mut()
                        .step_by(GROUP)
                        .zip(from.iter().step_by(GROUP))
                    {
                        *d = *s;
                    }
                }
            }
        }
    }
    Some(())
}

/// Every image of the input, a band of output rows at a time: the band's padded rows,
/// then each output row's tiles into the sums of the row, requantised into the output.
#[allow(clippy::too_many_arguments)]
fn run_bands<T: QuantElem>(
    g: &ConvGeometry,
    out_c: usize,
    input: &[T],
    row: RowFn,
    start: &[i32],
    stage: &OutputStage,
    z: u8,
    output: &mut [T],
    s: &mut Scratch,
) -> Result<()> {
    let oob = || QuantError::InvalidParams("index out of bounds");
    let c = g.in_c;
    let tiles = g.out_w.div_ceil(TILE);
    // Padded pixels per row: the last tile's last window's right edge.
    let pw = (tiles * TILE - 1) * g.stride_w + g.filter_w;
    let pitch = pw * c;
    let band_out = (BAND_BYTES / (g.stride_h * pitch).max(1)).clamp(1, g.out_h.max(1));
    let image = g.in_h * g.in_w * c;
    let out_image = g.out_h * g.out_w * out_c;
    let out_row = g.out_w * out_c;
    s.sums.resize(tiles * TILE * out_c, 0);
    for b in 0..g.batches {
        let img = window(input, b * image, image)?;
        let out = output
            .get_mut(b * out_image..(b + 1) * out_image)
            .ok_or_else(oob)?;
        for oy0 in (0..g.out_h).step_by(band_out) {
            let oy1 = (oy0 + band_out).min(g.out_h);
            let rows = (oy1 - oy0 - 1) * g.stride_h + g.filter_h;
            // Whole rows, and a quad of slack for the last window's last quad.
            let need = rows * pitch + GROUP;
            if s.band.len() < need {
                s.band.resize(need, z);
            }
            let band = &mut s.band[..need];
            for (i, dst) in band.chunks_exact_mut(pitch).take(rows).enumerate() {
                pad_row(g, img, oy0 * g.stride_h + i, pw, z, dst)?;
            }
            band[rows * pitch..].fill(z);
            for oy in oy0..oy1 {
                let args = RowArgs {
                    band: &s.band[..need],
                    at: (oy - oy0) * g.stride_h * pitch,
                    pitch,
                    kh: g.filter_h,
                    tiles,
                    w8: &s.w8,
                    w16: &s.w16,
                    start,
                    out_c,
                    sums: &mut s.sums,
                };
                // `row` was chosen by `row_kernel` for a level capped at the CPU's (`run`);
                // it checks its slices itself.
                // SAFETY: so the CPU has the features `row` was compiled for.
                if !unsafe { row(args) } {
                    return Err(QuantError::InvalidParams("shallow convolution sizes"));
                }
                let dst = out
                    .get_mut(oy * out_row..(oy + 1) * out_row)
                    .ok_or_else(oob)?;
                stage.rows.rows(&s.sums[..out_row], dst, out_c);
            }
        }
    }
    Ok(())
}

/// Padded row `py` (`pw` pixels) of image `img` into `dst`: input row `py - pad_top`
/// as the byte GEMM reads it, shifted right by `pad_left` pixels, `z` outside the input.
fn pad_row<T: QuantElem>(
    g: &ConvGeometry,
    img: &[T],
    py: usize,
    pw: usize,
    z: u8,
    dst: &mut [u8],
) -> Result<()> {
    let c = g.in_c;
    let Some(iy) = py.checked_sub(g.pad_top).filter(|&iy| iy < g.in_h) else {
        dst.fill(z);
        return Ok(());
    };
    let left = g.pad_left.min(pw);
    let cols = g.in_w.min(pw - left);
    let (head, rest) = dst.split_at_mut(left * c);
    head.fill(z);
    let (mid, tail) = rest.split_at_mut(cols * c);
    copy_bytes(window(img, iy * g.in_w * c, cols * c)?, mid);
    tail.fill(z);
    Ok(())
}

/// The thread's buffers, kept between layers (the engine runs a model's layers on one
/// thread): the padded band, the re-ordered filter (bytes, and widened to `i16` for the
/// kernels without VNNI) and one output row's sums.
#[derive(Default)]
struct Scratch {
    band: Vec<u8>,
    w8: Vec<u8>,
    w16: Vec<i16>,
    sums: Vec<i32>,
}

thread_local! {
    /// This thread's [`Scratch`], taken out for the duration of a call.
    static SCRATCH: Cell<Scratch> = const {
        Cell::new(Scratch { band: Vec::new(), w8: Vec::new(), w16: Vec::new(), sums: Vec::new() })
    };
}

/// One output row's operands.
struct RowArgs<'a> {
    /// The padded band (with a quad of slack past its last row).
    band: &'a [u8],
    /// Byte of `band` where the row's first window's top-left tap is.
    at: usize,
    /// Bytes from one padded row to the next.
    pitch: usize,
    /// Filter rows.
    kh: usize,
    /// Tiles of [`TILE`] pixels in the row (the padded image holds them all).
    tiles: usize,
    /// The re-ordered filter ([`reorder`]).
    w8: &'a [u8],
    /// The same widened to `i16` (the kernels without VNNI).
    w16: &'a [i16],
    /// The start value of every column, whole panels.
    start: &'a [i32],
    /// Output channels.
    out_c: usize,
    /// The row's sums, `tiles * TILE` pixels of `out_c`.
    sums: &'a mut [i32],
}

impl RowArgs<'_> {
    /// Whether every read and write of a row kernel with pixels `step` bytes apart and
    /// `nq` quads a filter row stays inside the slices (`w` the filter's length in its
    /// kernel's elements).
    fn fits(&self, step: usize, nq: usize, w: usize) -> bool {
        let np = self.out_c.div_ceil(NR);
        let reach = self.kh.checked_sub(1).and_then(|ky| {
            self.at
                .checked_add(ky.checked_mul(self.pitch)?)?
                .checked_add((self.tiles.checked_mul(TILE)? - 1).checked_mul(step)?)?
                .checked_add(nq * GROUP)
        });
        self.tiles >= 1
            && reach.is_some_and(|r| r <= self.band.len())
            && w >= np * self.kh * nq * GROUP_BYTES
            && self.start.len() >= np * NR
            && self.sums.len() >= self.tiles * TILE * self.out_c
    }
}

/// A row kernel: the sums of one output row ([`RowArgs`]); false (nothing read or
/// written) if the slices do not fit.
///
/// # Safety (of calling one)
/// The CPU has the features the kernel is compiled for.
type RowFn = unsafe fn(RowArgs<'_>) -> bool;

/// The row kernel for `level` (AVX2 at least, capped at the CPU's), pixels `step` bytes
/// apart and `nq` quads a filter row.
fn row_kernel(level: Isa, step: usize, nq: usize) -> Option<RowFn> {
    #[cfg(target_arch = "x86_64")]
    {
        use x86::{row_avx2, row_bw, row_vnni};
        macro_rules! pick {
            ($f:ident) => {
                pick!(@step $f; 1 2 3 4 6 8)
            };
            (@step $f:ident; $($s:literal)*) => {
                match step {
                    $($s => pick!(@nq $f, $s),)*
                    _ => None,
                }
            };
            (@nq $f:ident, $s:literal) => {
                match nq {
                    1 => Some($f::<$s, 1> as RowFn),
                    2 => Some($f::<$s, 2> as RowFn),
                    3 => Some($f::<$s, 3> as RowFn),
                    4 => Some($f::<$s, 4> as RowFn),
                    5 => Some($f::<$s, 5> as RowFn),
                    _ => None,
                }
            };
        }
        match level.min(detected()) {
            Isa::Avx512Vnni => pick!(row_vnni),
            Isa::Avx512 => pick!(row_bw),
            Isa::Avx2 => pick!(row_avx2),
            Isa::Scalar => None,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (level, step, nq);
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{RowArgs, GROUP, GROUP_BYTES, NR, TILE};
    use std::arch::x86_64::*;

    /// The four bytes at `p` as one word (unaligned).
    ///
    /// # Safety
    /// `p..p + 4` is readable.
    #[inline(always)]
    unsafe fn quad(p: *const u8) -> i32 {
        // SAFETY: the caller's promise.
        unsafe { p.cast::<i32>().read_unaligned() }
    }

    /// Stores the `lanes` (1..=16) first words of `v` (the sums of one pixel's panel) at
    /// `dst`, which holds at least `lanes` words.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn store512(dst: &mut [i32], lanes: usize, v: __m512i) {
        let lanes = lanes.min(NR).min(dst.len());
        let mask = ((1u32 << lanes) - 1) as __mmask16;
        // SAFETY: the mask writes only the first `lanes` words, inside `dst`.
        unsafe { _mm512_mask_storeu_epi32(dst.as_mut_ptr().cast(), mask, v) };
    }

    /// The row with `vpdpbusd`: per tile and panel, twelve accumulators from the start
    /// values, each filter row's `NQ` groups against each pixel's broadcast quads
    /// (pixels `STEP` bytes apart).
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VNNI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn row_vnni<const STEP: usize, const NQ: usize>(a: RowArgs<'_>) -> bool {
        if !a.fits(STEP, NQ, a.w8.len()) {
            return false;
        }
        let np = a.out_c.div_ceil(NR);
        let group_row = NQ * GROUP_BYTES;
        for t in 0..a.tiles {
            let base = a.at + t * TILE * STEP;
            for p in 0..np {
                // SAFETY: `start` holds `np` panels of 16 words (`fits`).
                let s = unsafe { _mm512_loadu_si512(a.start.as_ptr().add(p * NR).cast()) };
                let mut acc = [s; TILE];
                for ky in 0..a.kh {
                    // SAFETY: in `band` (`fits`: `at + (kh - 1) * pitch` and further).
                    let row = unsafe { a.band.as_ptr().add(base + ky * a.pitch) };
                    let w = (p * a.kh + ky) * group_row;
                    for q in 0..NQ {
                        // SAFETY: `w8` holds `np * kh * NQ` groups (`fits`).
                        let y = unsafe {
                            _mm512_loadu_si512(a.w8.as_ptr().add(w + q * GROUP_BYTES).cast())
                        };
                        for (r, acc) in acc.iter_mut().enumerate() {
                            // Pixel `r < TILE` of tile `t`: `fits` checked the last
                            // tile's last pixel's last quad.
                            // SAFETY: so these four bytes are inside `band`.
                            let x = unsafe { quad(row.add(r * STEP + q * GROUP)) };
                            *acc = _mm512_dpbusd_epi32(*acc, _mm512_set1_epi32(x), y);
                        }
                    }
                }
                let lanes = (a.out_c - p * NR).min(NR);
                for (r, acc) in acc.iter().enumerate() {
                    let at = (t * TILE + r) * a.out_c + p * NR;
                    if let Some(dst) = a.sums.get_mut(at..at + lanes) {
                        // SAFETY: the CPU has AVX-512F; `dst` holds `lanes` words.
                        unsafe { store512(dst, lanes, *acc) };
                    }
                }
            }
        }
        true
    }

    /// The row without VNNI on AVX-512BW: each quad widened to `i16` (`vpmovzxbw`)
    /// against the widened groups (`vpmaddwd`, exact), two accumulators a pixel (a
    /// column's two pair sums in adjacent lanes), added when stored.
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn row_bw<const STEP: usize, const NQ: usize>(a: RowArgs<'_>) -> bool {
        if !a.fits(STEP, NQ, a.w16.len()) {
            return false;
        }
        let np = a.out_c.div_ceil(NR);
        let group_row = NQ * GROUP_BYTES;
        // Lanes 2j and 2j + 1 of the pair of accumulators are column j's two halves.
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        for t in 0..a.tiles {
            let base = a.at + t * TILE * STEP;
            for p in 0..np {
                let mut acc = [[_mm512_setzero_si512(); 2]; TILE];
                for ky in 0..a.kh {
                    // SAFETY: in `band` (`fits`).
                    let row = unsafe { a.band.as_ptr().add(base + ky * a.pitch) };
                    let w = (p * a.kh + ky) * group_row;
                    for q in 0..NQ {
                        // `w16` holds `np * kh * NQ` groups of 64 (`fits`).
                        // SAFETY: two 32-lane loads inside this group.
                        let (y0, y1) = unsafe {
                            let g = a.w16.as_ptr().add(w + q * GROUP_BYTES);
                            (
                                _mm512_loadu_si512(g.cast()),
                                _mm512_loadu_si512(g.add(32).cast()),
                            )
                        };
                        for (r, acc) in acc.iter_mut().enumerate() {
                            // SAFETY: inside `band`, as in `row_vnni`.
                            let x = unsafe { quad(row.add(r * STEP + q * GROUP)) };
                            let x = _mm512_cvtepu8_epi16(_mm256_set1_epi32(x));
                            acc[0] = _mm512_add_epi32(acc[0], _mm512_madd_epi16(x, y0));
                            acc[1] = _mm512_add_epi32(acc[1], _mm512_madd_epi16(x, y1));
                        }
                    }
                }
                // SAFETY: `start` holds `np` panels of 16 words (`fits`).
                let s = unsafe { _mm512_loadu_si512(a.start.as_ptr().add(p * NR).cast()) };
                let lanes = (a.out_c - p * NR).min(NR);
                for (r, acc) in acc.iter().enumerate() {
                    let sum = _mm512_add_epi32(
                        _mm512_permutex2var_epi32(acc[0], even, acc[1]),
                        _mm512_permutex2var_epi32(acc[0], odd, acc[1]),
                    );
                    let at = (t * TILE + r) * a.out_c + p * NR;
                    if let Some(dst) = a.sums.get_mut(at..at + lanes) {
                        // SAFETY: the CPU has AVX-512F; `dst` holds `lanes` words.
                        unsafe { store512(dst, lanes, _mm512_add_epi32(sum, s)) };
                    }
                }
            }
        }
        true
    }

    /// The sixteen words `lo`, `hi` (in order) into the first `lanes` (at most 16) of
    /// `dst`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn store_16(dst: &mut [i32], lanes: usize, lo: __m256i, hi: __m256i) {
        if lanes == NR && dst.len() >= NR {
            // SAFETY: `dst` holds 16 words: two 8-word stores inside it.
            unsafe {
                _mm256_storeu_si256(dst.as_mut_ptr().cast(), lo);
                _mm256_storeu_si256(dst.as_mut_ptr().add(8).cast(), hi);
            }
            return;
        }
        let mut v = [0i32; NR];
        // SAFETY: `v` is 16 words: two 8-word stores inside it.
        unsafe {
            _mm256_storeu_si256(v.as_mut_ptr().cast(), lo);
            _mm256_storeu_si256(v.as_mut_ptr().add(8).cast(), hi);
        }
        let n = lanes.min(dst.len());
        dst[..n].copy_from_slice(&v[..n]);
    }

    /// Pixels of one AVX2 sub-tile: four accumulators a pixel (16 columns, two lanes
    /// each), the pixels' widened quads, one widened quarter of a group and a product:
    /// 12 of the 16 registers (three pixels needed 17: the accumulators spilled).
    const SUB: usize = 2;

    /// The row on AVX2, as [`row_bw`] with 256-bit vectors, [`SUB`] pixels at a time.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn row_avx2<const STEP: usize, const NQ: usize>(a: RowArgs<'_>) -> bool {
        if !a.fits(STEP, NQ, a.w16.len()) {
            return false;
        }
        let np = a.out_c.div_ceil(NR);
        let group_row = NQ * GROUP_BYTES;
        for px in (0..a.tiles * TILE).step_by(SUB) {
            let base = a.at + px * STEP;
            for p in 0..np {
                let mut acc = [[_mm256_setzero_si256(); 4]; SUB];
                for ky in 0..a.kh {
                    // SAFETY: in `band` (`fits`).
                    let row = unsafe { a.band.as_ptr().add(base + ky * a.pitch) };
                    let w = (p * a.kh + ky) * group_row;
                    for q in 0..NQ {
                        let x: [__m256i; SUB] = std::array::from_fn(|r| {
                            // Pixel `px + r` < `tiles * TILE`, as in `row_vnni`.
                            // SAFETY: so the quad lies inside `band`.
                            let x = unsafe { quad(row.add(r * STEP + q * GROUP)) };
                            _mm256_cvtepu8_epi16(_mm_set1_epi32(x))
                        });
                        for c in 0..4 {
                            // `w16` holds `np * kh * NQ` groups of 64 (`fits`).
                            // SAFETY: sixteen lanes inside this group.
                            let y = unsafe {
                                _mm256_loadu_si256(
                                    a.w16.as_ptr().add(w + q * GROUP_BYTES + c * 16).cast(),
                                )
                            };
                            for (s, x) in acc.iter_mut().zip(&x) {
                                s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(*x, y));
                            }
                        }
                    }
                }
                // SAFETY: `start` holds `np` panels of 16 words (`fits`): two 8-word loads.
                let (s0, s1) = unsafe {
                    let s = a.start.as_ptr().add(p * NR);
                    (
                        _mm256_loadu_si256(s.cast()),
                        _mm256_loadu_si256(s.add(8).cast()),
                    )
                };
                let lanes = (a.out_c - p * NR).min(NR);
                for (r, s) in acc.iter().enumerate() {
                    // hadd gives columns 0 1 4 5 | 2 3 6 7; the permute puts them in order.
                    let lo = _mm256_permute4x64_epi64(_mm256_hadd_epi32(s[0], s[1]), 0b11_01_10_00);
                    let hi = _mm256_permute4x64_epi64(_mm256_hadd_epi32(s[2], s[3]), 0b11_01_10_00);
                    let (lo, hi) = (_mm256_add_epi32(lo, s0), _mm256_add_epi32(hi, s1));
                    let at = (px + r) * a.out_c + p * NR;
                    if let Some(dst) = a.sums.get_mut(at..at + lanes) {
                        // Whole panels stored in place: through a copy, the copy's wide
                        // load of the two fresh stores could not be forwarded, and it
                        // was half the layer's time (face_landmark_int8's first layer).
                        store_16(dst, lanes, lo, hi);
                    }
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::bytes::conv_gemm;
    use super::super::{PerChannel, QuantParams};
    use super::*;
    use proptest::prelude::*;

    /// A convolution case: geometry, output channels, input zero point, per-channel
    /// filter zero points, output zero point, seed of the operands.
    type Case = (ConvGeometry, usize, i32, Vec<i32>, i32, u64);

    /// Geometries the direct kernel takes, with padding (up to a whole window) on every
    /// side, outputs narrower and wider than a tile, one or two images.
    fn case<T: QuantElem>() -> impl Strategy<Value = Case> {
        let dims = (1usize..3, 1usize..12, 1usize..30, 1usize..=MAX_C);
        let window = (1usize..=5, 1usize..=MAX_KW, 1usize..=2, 1usize..=2);
        let pads = (0usize..=5, 0usize..=5, 0usize..=5, 0usize..=5);
        let zp = |lo: i32, hi: i32| prop_oneof![Just(lo), Just(hi), lo..=hi];
        (dims, window, pads, 1usize..=64)
            .prop_filter_map(
                "a 1x1 window",
                |((n, h, w, c), (kh, kw, sh, sw), (pt, pb, pl, pr), out_c)| {
                    let out = |size: usize, f: usize, s: usize, a: usize, b: usize| {
                        (size + a.min(f) + b.min(f))
                            .checked_sub(f)
                            .map(|d| d / s + 1)
                    };
                    let g = ConvGeometry {
                        batches: n,
                        in_h: h,
                        in_w: w,
                        in_c: c,
                        out_h: out(h, kh, sh, pt, pb)?,
                        out_w: out(w, kw, sw, pl, pr)?,
                        filter_h: kh,
                        filter_w: kw,
                        stride_h: sh,
                        stride_w: sw,
                        dilation_h: 1,
                        dilation_w: 1,
                        pad_top: pt.min(kh),
                        pad_left: pl.min(kw),
                    };
                    takes(&g).then_some((g, out_c))
                },
            )
            .prop_flat_map(move |(g, out_c)| {
                (
                    Just(g),
                    Just(out_c),
                    zp(T::MIN, T::MAX),
                    proptest::collection::vec(zp(-128, 127), out_c),
                    zp(T::MIN, T::MAX),
                    any::<u64>(),
                )
            })
    }

    /// The direct kernel at every level this CPU has (from AVX2) against the byte GEMM
    /// at the plain level: the same outputs, bit for bit.
    fn check<T: QuantElem + PartialEq>(
        (g, out_c, in_zp, f_zp, out_zp, seed): Case,
    ) -> std::result::Result<(), TestCaseError> {
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let k = g.filter_h * g.filter_w * g.in_c;
        let len = g.batches * g.in_h * g.in_w * g.in_c;
        let input: Vec<T> = (0..len)
            .map(|_| T::saturate_from_i32(i32::from(next() as u8) + T::MIN))
            .collect();
        // Each channel's values within `i8` of its zero point (the byte form), the
        // extremes of the type among them.
        let filter: Vec<i8> = (0..out_c * k)
            .map(|i| {
                let d = match next() % 5 {
                    0 => -128,
                    1 => 127,
                    _ => i32::from(next() as i8),
                };
                (f_zp[i / k] + d).clamp(-128, 127) as i8
            })
            .collect();
        let bias: Vec<i32> = (0..out_c).map(|_| (next() % 6001) as i32 - 3000).collect();
        let mult: Vec<i32> = (0..out_c)
            .map(|_| (1 << 30) + (next() % (1 << 30)) as i32)
            .collect();
        let shift: Vec<i32> = (0..out_c).map(|_| -((next() % 12) as i32)).collect();
        let q = QuantParams {
            input_zero_point: in_zp,
            filter_zero_point: PerChannel::Each(&f_zp),
            output_zero_point: out_zp,
            output_multiplier: PerChannel::Each(&mult),
            output_shift: PerChannel::Each(&shift),
            act_min: T::MIN,
            act_max: T::MAX,
            epilogue: None,
        };
        let stage = OutputStage::new(&q, out_c, &bias).unwrap();
        let packed = stage.pack_bytes(&filter, k).unwrap();
        let z = super::super::bytes::zero_byte::<T>(in_zp).unwrap();
        let outs = g.batches * g.out_h * g.out_w * out_c;
        let mut want = vec![T::saturate_from_i32(0); outs];
        let plain = quads::kernel_for(Isa::Scalar);
        conv_gemm(plain, &g, out_c, &input, &packed, &stage, z, &mut want).unwrap();
        for level in [Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
            if level > detected() {
                continue;
            }
            let mut got = vec![T::saturate_from_i32(0); outs];
            let ran = run(level, &g, out_c, &input, &packed, &stage, z, &mut got).unwrap();
            prop_assert!(ran, "{:?} did not take {:?}", level, g);
            prop_assert_eq!(&got, &want, "{:?}", level);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(64))]
        #[test]
        fn shallow_bytes_match_the_gemm_i8(c in case::<i8>()) { check::<i8>(c)?; }
        #[test]
        fn shallow_bytes_match_the_gemm_u8(c in case::<u8>()) { check::<u8>(c)?; }
    }

    /// Geometries the direct kernel leaves to the GEMM: a 1x1 window, more than four
    /// channels, a filter wider than five, a stride of three, dilation.
    #[test]
    fn shallow_bytes_decline_other_geometries() {
        let g = ConvGeometry {
            batches: 1,
            in_h: 8,
            in_w: 8,
            in_c: 3,
            out_h: 4,
            out_w: 4,
            filter_h: 3,
            filter_w: 3,
            stride_h: 2,
            stride_w: 2,
            dilation_h: 1,
            dilation_w: 1,
            pad_top: 1,
            pad_left: 1,
        };
        assert!(takes(&g));
        for other in [
            ConvGeometry {
                filter_h: 1,
                filter_w: 1,
                ..g
            },
            ConvGeometry { in_c: 5, ..g },
            ConvGeometry { filter_w: 6, ..g },
            ConvGeometry { stride_w: 3, ..g },
            ConvGeometry { dilation_h: 2, ..g },
        ] {
            assert!(!takes(&other), "{other:?}");
        }
    }
}
