//! CONV_2D and FULLY_CONNECTED on the byte GEMM ([`igemm::quads`]): the im2col copies
//! each tap's run of input bytes as they lie (`x - T::MIN`: a uint8 input unchanged, an
//! int8 one with its sign bit flipped), padding taps the input zero point's byte; the
//! zero point itself enters once per column, as the GEMM's start values. The path of
//! every one-byte input whose zero point is inside its type and whose filter, minus its
//! zero point, fits `i8` (every TFLite int8 model: symmetric filters).

use super::{
    shallow, window, ConvGeometry, ConvRows, FcRows, OutputStage, QuantElem, QuantError, Result,
};
use crate::kernels::igemm::quads;
use crate::kernels::isa::Isa;
use crate::kernels::simd::{vectorized, Body};

/// Bytes of im2col rows the byte GEMM multiplies per call (the block stays in L2 while
/// every B panel passes over it).
const A_BLOCK_BYTES: usize = 64 << 10;

/// The most rows of one block.
const MAX_BLOCK_ROWS: usize = 288;

/// The byte GEMM's operand for an input value: `x - T::MIN` (for int8, `x ^ 0x80`).
#[inline(always)]
fn to_byte<T: QuantElem>(x: T) -> u8 {
    x.to_i32().wrapping_sub(T::MIN) as u8
}

/// The byte of the input zero point (what a padding tap reads), if `T` is one byte wide
/// and `in_zp` one of its values: the inputs the byte GEMM takes.
pub(super) fn zero_byte<T: QuantElem>(in_zp: i32) -> Option<u8> {
    (T::MAX - T::MIN == 255 && (T::MIN..=T::MAX).contains(&in_zp))
        .then(|| in_zp.wrapping_sub(T::MIN) as u8)
}

/// The filter `[out_c, k]` (OHWI rows) with each row's zero point removed, packed as the
/// byte GEMM's B (`k x out_c`, [`quads::pack`]); `None` where a value minus its zero point
/// does not fit `i8` (the `i16` pair form then takes it).
pub fn pack_filter<F: QuantElem>(
    filter: &[F],
    k: usize,
    out_c: usize,
    zero_point: impl Fn(usize) -> i32,
) -> Option<Vec<u8>> {
    if filter.len() != k.checked_mul(out_c)? {
        return None;
    }
    let mut packed = vec![0; quads::packed_len(k, out_c)?];
    quads::pack(
        k,
        out_c,
        |kk, j| filter[j * k + kk].to_i32().saturating_sub(zero_point(j)),
        &mut packed,
    )?;
    Some(packed)
}

/// The plain filter `[out_c, k]` (zero points removed) of one packed by [`pack_filter`].
pub(super) fn unpack_filter(packed: &[u8], k: usize, out_c: usize) -> Option<Vec<i8>> {
    let mut plain = vec![0i8; k.checked_mul(out_c)?];
    quads::unpack(k, out_c, packed, |kk, j, v| plain[j * k + kk] = v)?;
    Some(plain)
}

impl OutputStage {
    /// [`pack_filter`] with this stage's per-channel filter zero points.
    pub(super) fn pack_bytes<F: QuantElem>(&self, filter: &[F], k: usize) -> Option<Vec<u8>> {
        pack_filter(filter, k, self.channels.len(), |j| {
            self.channels.get(j).map_or(0, |c| c.filter_zp)
        })
    }
}

/// Where the byte rows of A come from.
pub(super) trait ByteRows<T> {
    /// Writes rows `first..first + m` into rows `0..m` of `a` (the first `k` bytes of
    /// each).
    fn fill(&mut self, first: usize, m: usize, a: &mut quads::ABytes) -> Result<()>;
}

/// `dst[i] = to_byte(src[i])`: a copy for uint8, a copy flipping the sign bit for int8.
/// Runs of a few channels are common (a first layer's three, a tap's 16): whole words,
/// the last one overlapping the one before, rather than a loop whose vector body such a
/// run never reaches.
#[inline(always)]
pub(super) fn copy_bytes<T: QuantElem>(src: &[T], dst: &mut [u8]) {
    if size_of::<T>() != 1 {
        // Not an input of the byte GEMM (`zero_byte` refuses it); correct all the same.
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = to_byte(s);
        }
        return;
    }
    // The values' own bytes, and the flip as a mask over a word (`x - T::MIN` is the byte
    // with its top bit flipped for int8, the byte itself for uint8).
    let src: &[u8] = bytemuck::cast_slice(src);
    let flip = to_byte(T::saturate_from_i32(0));
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    match n {
        64.. => words::<64>(src, dst, flip),
        16.. => words::<16>(src, dst, flip),
        8.. => words::<8>(src, dst, flip),
        4.. => {
            let mask = u32::from_ne_bytes([flip; 4]);
            for i in [0, n - 4] {
                let (Some(s), Some(d)) = (
                    src.get(i..).and_then(<[u8]>::first_chunk::<4>),
                    dst.get_mut(i..).and_then(<[u8]>::first_chunk_mut::<4>),
                ) else {
                    return;
                };
                *d = (u32::from_ne_bytes(*s) ^ mask).to_ne_bytes();
            }
        }
        _ => {
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = s ^ flip;
            }
        }
    }
}

/// [`copy_bytes`] of `n >= N` bytes (`N` a multiple of 8), `N` at a time as 64-bit
/// words, the last chunk ending at `n`.
#[inline(always)]
fn words<const N: usize>(src: &[u8], dst: &mut [u8], flip: u8) {
    let n = src.len().min(dst.len());
    let mask = u64::from_ne_bytes([flip; 8]);
    let mut at = 0;
    while at < n {
        // The last chunk ends at `n` (overlapping the one before it, if any).
        let i = at.min(n - N);
        let s = src.get(i..).and_then(<[u8]>::first_chunk::<N>);
        let d = dst.get_mut(i..).and_then(<[u8]>::first_chunk_mut::<N>);
        let (Some(s), Some(d)) = (s, d) else {
            return;
        };
        for (d, s) in d.chunks_exact_mut(8).zip(s.chunks_exact(8)) {
            let w = u64::from_ne_bytes(s.try_into().unwrap_or([0; 8])) ^ mask;
            d.copy_from_slice(&w.to_ne_bytes());
        }
        at = i + N;
    }
}

/// The im2col bytes of output pixel `(oy, ox)` of image `img` into `dst` (`filter_h *
/// filter_w * in_c` bytes, tap-major like a filter row), `pad` for taps outside the input.
#[inline(always)]
fn gather_bytes<T: QuantElem>(
    g: &ConvGeometry,
    img: &[T],
    (oy, ox): (usize, usize),
    pad: u8,
    dst: &mut [u8],
) -> Result<()> {
    let oob = || QuantError::InvalidParams("index out of bounds");
    let c = g.in_c;
    // Every column of the window inside the input, one apart: each filter row's taps are
    // one contiguous run of the input row.
    let whole_cols = g.dilation_w == 1
        && (ox * g.stride_w)
            .checked_sub(g.pad_left)
            .is_some_and(|x| x + g.filter_w <= g.in_w);
    if whole_cols {
        let x0 = ox * g.stride_w - g.pad_left;
        let run = g.filter_w * c;
        for ky in 0..g.filter_h {
            let d = dst.get_mut(ky * run..(ky + 1) * run).ok_or_else(oob)?;
            match ConvGeometry::tap(oy, g.stride_h, ky, g.dilation_h, g.pad_top, g.in_h) {
                Some(iy) => copy_bytes(window(img, (iy * g.in_w + x0) * c, run)?, d),
                None => d.fill(pad),
            }
        }
        return Ok(());
    }
    for ky in 0..g.filter_h {
        let iy = ConvGeometry::tap(oy, g.stride_h, ky, g.dilation_h, g.pad_top, g.in_h);
        for kx in 0..g.filter_w {
            let ix = ConvGeometry::tap(ox, g.stride_w, kx, g.dilation_w, g.pad_left, g.in_w);
            let at = (ky * g.filter_w + kx) * c;
            let d = dst.get_mut(at..at + c).ok_or_else(oob)?;
            match (iy, ix) {
                (Some(iy), Some(ix)) => copy_bytes(window(img, (iy * g.in_w + ix) * c, c)?, d),
                _ => d.fill(pad),
            }
        }
    }
    Ok(())
}

impl<T: QuantElem> ByteRows<T> for ConvRows<'_, '_, T> {
    #[inline(always)]
    fn fill(&mut self, first: usize, m: usize, a: &mut quads::ABytes) -> Result<()> {
        let g = self.g;
        let oob = || QuantError::InvalidParams("index out of bounds");
        let k = g.filter_h * g.filter_w * g.in_c;
        if self.same_pixels {
            let src = window(self.input, first * g.in_c, m * g.in_c)?;
            if a.pitch() == g.in_c {
                // Rows as they lie in the input: one copy of the block.
                copy_bytes(src, a.rows_mut(m).ok_or_else(oob)?);
            } else {
                for (i, s) in src.chunks_exact(g.in_c.max(1)).enumerate() {
                    copy_bytes(s, a.row_mut(i).ok_or_else(oob)?);
                }
            }
            return Ok(());
        }
        for i in 0..m {
            let dst = a.row_mut(i).and_then(|r| r.get_mut(..k)).ok_or_else(oob)?;
            let (n, oy, ox) = self.pos.at(first + i, g.out_h, g.out_w);
            let img = window(self.input, n * self.image, self.image)?;
            if self.one_pixel {
                let at = (oy * g.stride_h * g.in_w + ox * g.stride_w) * g.in_c;
                copy_bytes(window(img, at, g.in_c)?, dst);
            } else {
                gather_bytes(g, img, (oy, ox), self.pad, dst)?;
            }
        }
        Ok(())
    }
}

impl<T: QuantElem> ByteRows<T> for FcRows<'_, T> {
    #[inline(always)]
    fn fill(&mut self, first: usize, m: usize, a: &mut quads::ABytes) -> Result<()> {
        let oob = || QuantError::InvalidParams("index out of bounds");
        let src = window(self.input, first * self.k, m * self.k)?;
        for (i, s) in src.chunks_exact(self.k.max(1)).enumerate() {
            copy_bytes(s, a.row_mut(i).ok_or_else(oob)?);
        }
        Ok(())
    }
}

/// The convolution on bytes at instruction-set level `level` (`pad` the input zero
/// point's byte, [`zero_byte`]; `packed` the filter by [`pack_filter`]): an input of a
/// few channels by the direct kernel ([`shallow`]), any other on the byte GEMM.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_bytes<T: QuantElem>(
    level: Isa,
    g: &ConvGeometry,
    out_c: usize,
    input: &[T],
    packed: &[u8],
    stage: &OutputStage,
    pad: u8,
    output: &mut [T],
) -> Result<()> {
    if shallow::run(level, g, out_c, input, packed, stage, pad, output)? {
        return Ok(());
    }
    let kern = quads::kernel_for(level);
    conv_gemm(kern, g, out_c, input, packed, stage, pad, output)
}

/// The convolution on the byte GEMM (`pad` the input zero point's byte,
/// [`zero_byte`]; `packed` the filter by [`pack_filter`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_gemm<T: QuantElem>(
    kern: quads::Kernel,
    g: &ConvGeometry,
    out_c: usize,
    input: &[T],
    packed: &[u8],
    stage: &OutputStage,
    pad: u8,
    output: &mut [T],
) -> Result<()> {
    let k = g.filter_h * g.filter_w * g.in_c;
    let rows = g.batches * g.out_h * g.out_w;
    let fill = ConvRows::new(g, input, 0, pad);
    byte_rows(kern, rows, k, out_c, fill, pad, packed, stage, output)
}

/// FULLY_CONNECTED on the byte GEMM: `batches` rows of `k` input values.
#[allow(clippy::too_many_arguments)]
pub(super) fn fc_bytes<T: QuantElem>(
    batches: usize,
    k: usize,
    n: usize,
    input: &[T],
    packed: &[u8],
    stage: &OutputStage,
    pad: u8,
    output: &mut [T],
) -> Result<()> {
    let fill = FcRows { input, k };
    byte_rows(
        quads::kernel(),
        batches,
        k,
        n,
        fill,
        pad,
        packed,
        stage,
        output,
    )
}

/// `rows` rows of A (written by `fill`) times the packed B (`out_c` columns), from start
/// values for the input zero point's byte `z`, each result row requantised into the next
/// `out_c` outputs; A is formed a block of rows at a time.
#[allow(clippy::too_many_arguments)]
fn byte_rows<T: QuantElem>(
    kern: quads::Kernel,
    rows: usize,
    k: usize,
    out_c: usize,
    mut fill: impl ByteRows<T>,
    z: u8,
    packed: &[u8],
    stage: &OutputStage,
    output: &mut [T],
) -> Result<()> {
    let start = quads::start_values(k, out_c, packed, i32::from(z))
        .ok_or(QuantError::InvalidParams("packed filter size"))?;
    let r = kern.rows();
    // Never more rows than the layer has (a block is neither allocated nor zeroed per
    // call, but filling rows nobody reads would still cost).
    let block = (A_BLOCK_BYTES / quads::row_bytes(k).max(1) / r * r)
        .clamp(r, MAX_BLOCK_ROWS / r * r)
        .min(rows.div_ceil(r) * r);
    let (a_buf, mut tile) = BYTE_SCRATCH.take();
    let mut a = quads::ABytes::reuse(block, k, r, a_buf);
    // A few tiles of sums (about a dozen rows x out_c), requantised as soon as they are
    // done, while they are in the first-level cache.
    tile.resize(kern.sink_rows() * out_c, 0);
    let mut first = 0;
    let done = loop {
        if first >= rows {
            break Ok(());
        }
        let m = block.min(rows - first);
        let filled = vectorized(FillBytes {
            fill: &mut fill,
            a: &mut a,
            first,
            m,
            input: std::marker::PhantomData,
        });
        if let Err(e) = filled {
            break Err(e);
        }
        let Some(px) = output.get_mut(first * out_c..(first + m) * out_c) else {
            break Err(QuantError::InvalidParams("index out of bounds"));
        };
        if fused::requantised(kern, &a, m, k, packed, &start, stage, px) {
            first += m;
            continue;
        }
        let ran = quads::igemm_each(
            kern,
            m,
            &a,
            packed,
            &start,
            out_c,
            &mut tile,
            |row0, sums| {
                if let Some(dst) = px.get_mut(row0 * out_c..row0 * out_c + sums.len()) {
                    stage.rows.rows(sums, dst, out_c);
                }
            },
        );
        if ran.is_none() {
            break Err(QuantError::InvalidParams("integer GEMM sizes"));
        }
        first += m;
    };
    BYTE_SCRATCH.set((a.into_buffer(), tile));
    done
}

/// Rows `first..first + m` of A into `a` (from row 0), compiled for the widest vector
/// unit (the copies and the sign flip vectorise).
struct FillBytes<'a, T, G> {
    fill: &'a mut G,
    a: &'a mut quads::ABytes,
    first: usize,
    m: usize,
    input: std::marker::PhantomData<T>,
}

impl<T: QuantElem, G: ByteRows<T>> Body for FillBytes<'_, T, G> {
    type Out = Result<()>;

    #[inline(always)]
    fn run(self) -> Result<()> {
        self.fill.fill(self.first, self.m, self.a)
    }
}

thread_local! {
    /// The byte GEMM's A block and tile of sums, kept between layers on this thread (the
    /// engine runs the layers of a model on one thread): a layer allocates and zeroes
    /// neither. Taken out for the duration of a call (a nested call would find them
    /// empty and grow its own).
    static BYTE_SCRATCH: std::cell::Cell<(Vec<u8>, Vec<i32>)> =
        const { std::cell::Cell::new((Vec::new(), Vec::new())) };
}

/// The tiles with the output stage in their store (AVX-512 VNNI and AVX2): each panel's
/// sums requantised in registers and written as bytes, never stored as `i32` and read
/// back.
mod fused {
    use super::{quads, OutputStage, QuantElem};
    use crate::kernels::isa::Isa;

    /// Rows `0..m` of `a` times `packed` from `start`, requantised by `stage` into `out`
    /// (`m * out_c`), on the AVX-512 VNNI or AVX2 tiles; false where that path does not
    /// apply (another kernel, a wider `T`, a stage without vector constants, sizes that
    /// disagree: the caller's path then writes every output).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn requantised<T: QuantElem>(
        kern: quads::Kernel,
        a: &quads::ABytes,
        m: usize,
        k: usize,
        packed: &[u8],
        start: &[i32],
        stage: &OutputStage,
        out: &mut [T],
    ) -> bool {
        #[cfg(target_arch = "x86_64")]
        if size_of::<T>() == 1 && out.len() == m * stage.channels.len() {
            let Some((lanes, full, epi)) = stage.rows.vector_form() else {
                return false;
            };
            // The bias rides in the start values: the sinks' stage adds none.
            let mut biased = BIASED.take();
            stage.rows.with_bias(start, &mut biased);
            let args = x86::Args {
                q: &stage.rows,
                lanes,
                a,
                m,
                packed,
                groups: quads::groups(k),
                start: &biased,
                out_c: stage.channels.len(),
            };
            let run = match (kern.level(), full, epi) {
                (Isa::Avx512Vnni, false, false) => x86::vnni::<T, false, false>,
                (Isa::Avx512Vnni, true, false) => x86::vnni::<T, true, false>,
                (Isa::Avx512Vnni, false, true) => x86::vnni::<T, false, true>,
                (Isa::Avx512Vnni, true, true) => x86::vnni::<T, true, true>,
                (Isa::Avx2, false, false) => x86::avx2::<T, false, false>,
                (Isa::Avx2, true, false) => x86::avx2::<T, true, false>,
                (Isa::Avx2, false, true) => x86::avx2::<T, false, true>,
                (Isa::Avx2, true, true) => x86::avx2::<T, true, true>,
                _ => return false,
            };
            // The kernel's level is capped at the CPU's (`quads::kernel_for`): the VNNI
            // kernel is chosen only where the CPU has AVX-512F, BW and VNNI, AVX2's where
            // it has AVX2.
            // SAFETY: so the CPU has the target features of the function `run` names.
            let ran = unsafe { run(&args, out) };
            BIASED.set(biased);
            return ran;
        }
        let _ = (kern, a, m, k, packed, start, stage, out);
        false
    }

    #[cfg(target_arch = "x86_64")]
    thread_local! {
        /// The start values with the bias added, kept between calls on this thread.
        static BIASED: std::cell::Cell<Vec<i32>> = const { std::cell::Cell::new(Vec::new()) };
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use super::super::super::QuantElem;
        use crate::kernels::igemm::{
            bytes_to_pairs, panels, panels_avx2, quads, quads_to_pairs, PanelSink, PanelSink256,
            ROWS256, VNNI_ROWS,
        };
        use crate::kernels::requant::x86::{store_bytes16, store_bytes8, Stage256, Stage512};
        use crate::kernels::requant::{Lanes, Requant};
        use std::arch::x86_64::{__m256i, __m512i};

        /// What a block's tiles multiply and where they store.
        pub(super) struct Args<'a> {
            pub q: &'a Requant,
            pub lanes: &'a Lanes,
            pub a: &'a quads::ABytes,
            pub m: usize,
            pub packed: &'a [u8],
            pub groups: usize,
            pub start: &'a [i32],
            pub out_c: usize,
        }

        /// The sink of one tile: requantises each panel and stores the tile's first
        /// `rows` rows at `out` (row pitch `out_c`).
        struct Store<'s, S, T, const FULL: bool, const EPI: bool> {
            stage: &'s S,
            out: *mut T,
            out_c: usize,
            rows: usize,
        }

        impl<T: QuantElem, const FULL: bool, const EPI: bool> PanelSink
            for Store<'_, Stage512<'_>, T, FULL, EPI>
        {
            #[inline(always)]
            unsafe fn put(&mut self, q: usize, acc: &[__m512i; VNNI_ROWS]) {
                let c0 = q * 16;
                let n = self.out_c.saturating_sub(c0).min(16);
                // SAFETY: the CPU has AVX-512F and BW (this function's contract).
                let st = unsafe { self.stage.step(c0) };
                for (r, &v) in acc.iter().enumerate().take(self.rows) {
                    // SAFETY: as for `step`.
                    let v = unsafe { self.stage.finish::<FULL, EPI>(&st, v) };
                    // `out` has `rows * out_c` one-byte elements (`vnni`), and
                    // `c0 + n <= out_c`.
                    // SAFETY: so the `n` bytes at `r * out_c + c0` are inside it.
                    unsafe { store_bytes16(v, self.out.add(r * self.out_c + c0), n) };
                }
            }
        }

        impl<T: QuantElem, const FULL: bool, const EPI: bool> PanelSink256
            for Store<'_, Stage256<'_>, T, FULL, EPI>
        {
            #[inline(always)]
            unsafe fn put(&mut self, q: usize, acc: &[[__m256i; 2]; ROWS256]) {
                for half in 0..2 {
                    let c0 = q * 16 + half * 8;
                    let n = self.out_c.saturating_sub(c0).min(8);
                    if n == 0 {
                        break;
                    }
                    // SAFETY: the CPU has AVX2 (this function's contract).
                    let st = unsafe { self.stage.step(c0) };
                    for (r, v) in acc.iter().enumerate().take(self.rows) {
                        // SAFETY: as for `step`.
                        let v = unsafe { self.stage.finish::<FULL, EPI>(&st, v[half]) };
                        // `out` has `rows * out_c` one-byte elements (`avx2`), and
                        // `c0 + n <= out_c`.
                        // SAFETY: so the `n` bytes at `r * out_c + c0` are inside it.
                        unsafe { store_bytes8(v, self.out.add(r * self.out_c + c0), n) };
                    }
                }
            }
        }

        /// Whether `out` takes the block's rows as bytes, and the stage has constants for
        /// every channel.
        fn fits<T>(x: &Args<'_>, channels: usize, out: &[T]) -> bool {
            size_of::<T>() == 1 && channels >= x.out_c && out.len() >= x.m * x.out_c
        }

        /// [`super::requantised`] on the AVX-512 VNNI tiles.
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
        pub(super) fn vnni<T: QuantElem, const FULL: bool, const EPI: bool>(
            x: &Args<'_>,
            out: &mut [T],
        ) -> bool {
            let stage = Stage512::new::<T>(x.q, x.lanes);
            if !fits(x, stage.channels(), out) {
                return false;
            }
            for sub in (0..x.m).step_by(VNNI_ROWS) {
                let mut sink = Store::<_, T, FULL, EPI> {
                    stage: &stage,
                    out: out[sub * x.out_c..].as_mut_ptr(),
                    out_c: x.out_c,
                    rows: VNNI_ROWS.min(x.m - sub),
                };
                let a = x.a.from_row(sub);
                if !panels(a, x.a.pitch(), x.packed, x.groups, x.start, &mut sink) {
                    return false;
                }
            }
            true
        }

        thread_local! {
            /// The AVX2 path's A block and B widened to pair words, kept between layers
            /// on this thread (taken out for the duration of a call).
            static PAIRS: std::cell::Cell<(Vec<i32>, Vec<i32>)> =
                const { std::cell::Cell::new((Vec::new(), Vec::new())) };
        }

        /// [`super::requantised`] on the AVX2 tiles: the block and B widened to pair
        /// words once ([`bytes_to_pairs`], [`quads_to_pairs`]), then the pair GEMM's
        /// six-row tiles.
        #[target_feature(enable = "avx2")]
        pub(super) fn avx2<T: QuantElem, const FULL: bool, const EPI: bool>(
            x: &Args<'_>,
            out: &mut [T],
        ) -> bool {
            let stage = Stage256::new::<T>(x.q, x.lanes);
            // A block of one tile's rows goes to the caller's tiles, which widen B's
            // groups in registers as they read them: widening B whole first, then
            // reading it again, had cost twice as much (face_landmark_int8's last
            // layer, 1 x 288 x 1404 at AVX2: 36 -> 20 us).
            let one_tile = x.m <= ROWS256;
            if one_tile || !fits(x, stage.channels(), out) || x.a.pitch() != x.groups * quads::GROUP
            {
                return false;
            }
            let (mut a2, mut b2) = PAIRS.take();
            let k2 = 2 * x.groups;
            // Both grow where short and are never shortened (a regrown tail would be
            // zero-filled, as costly as the widening); rows past `m` are never stored.
            let need = x.m.div_ceil(ROWS256) * ROWS256 * k2;
            if a2.len() < need {
                a2.resize(need, 0);
            }
            let block = x.a.from_row(0).get(..x.m * x.a.pitch());
            let widened = block.is_some_and(|rows| bytes_to_pairs(rows, &mut a2[..need]));
            let panels = quads_to_pairs(x.packed, x.groups, &mut b2).filter(|_| widened);
            let ran = panels.is_some_and(|n| {
                let b = &b2[..n * k2 * 16];
                (0..x.m).step_by(ROWS256).all(|sub| {
                    let mut sink = Store::<_, T, FULL, EPI> {
                        stage: &stage,
                        out: out[sub * x.out_c..].as_mut_ptr(),
                        out_c: x.out_c,
                        rows: ROWS256.min(x.m - sub),
                    };
                    panels_avx2(&a2[sub * k2..need], k2, b, x.start, &mut sink)
                })
            });
            PAIRS.set((a2, b2));
            ran
        }
    }
}
