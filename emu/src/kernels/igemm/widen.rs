//! The AVX2 and AVX-512BW micro-kernels of the byte GEMM ([`super::quads`]), for CPUs
//! without VNNI: A's four bytes of a group and B's are widened to `i16` (`vpmovzxbw`,
//! `vpmovsxbw`) and multiplied with `vpmaddwd`, which is exact here (`u8 x i8` products,
//! two to a lane). (`vpmaddubsw` would multiply the bytes directly but saturates its pair
//! sums at `i16`, which `255 * 127 * 2` exceeds.)
//!
//! A widened group of four columns is eight lanes, two per column (depth entries 0-1 and
//! 2-3 of the group); the two are added once, when the tile is stored.

#[cfg(target_arch = "x86_64")]
pub(super) use x86::{avx2, avx512, ROWS512};
#[cfg(target_arch = "x86_64")]
pub use x86::{panels_avx2, PanelSink256, ROWS256};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::pairs::NR;
    use super::super::quads::{panels_fit, tile_fits, GROUP, GROUP_BYTES};
    use std::arch::x86_64::*;

    /// Rows of the AVX2 tile: four accumulators a row (16 columns, two lanes each), the
    /// rows' widened bytes and one widened quarter of the group: 16 registers at 3.
    pub const ROWS256: usize = 3;

    /// Rows of the AVX-512BW tile: two accumulators a row, of 32 registers.
    pub(crate) const ROWS512: usize = 12;

    /// The four bytes of row `row`'s group `t`.
    ///
    /// # Safety
    /// `row + 4t .. row + 4t + 4` must be readable.
    #[inline(always)]
    unsafe fn quad(row: *const u8, t: usize) -> i32 {
        // SAFETY: the caller's contract.
        unsafe { row.add(t * GROUP).cast::<i32>().read_unaligned() }
    }

    /// The sums of `R` rows (`rows`) by one panel's `g` groups (`b`), columns in order
    /// (two vectors of eight a row) plus the panel's start values.
    ///
    /// # Safety
    /// The CPU has AVX2; each row has `4g` readable bytes, `b` is `g * 64` bytes and
    /// `start` 16 words.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sums_avx2<const R: usize>(
        rows: &[*const u8; R],
        b: &[u8],
        start: *const i32,
    ) -> [[__m256i; 2]; R] {
        let mut acc = [[_mm256_setzero_si256(); 4]; R];
        for (t, group) in b.chunks_exact(GROUP_BYTES).enumerate() {
            let x: [__m256i; R] = std::array::from_fn(|r| {
                // SAFETY: row `r` has `4g` readable bytes and `t < g`.
                let q = unsafe { quad(rows[r], t) };
                _mm256_cvtepu8_epi16(_mm_set1_epi32(q))
            });
            for (c, quarter) in group.chunks_exact(16).enumerate() {
                // SAFETY: `quarter` is 16 bytes, one unaligned 128-bit load.
                let y = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(quarter.as_ptr().cast()) });
                for (s, x) in acc.iter_mut().zip(&x) {
                    s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(*x, y));
                }
            }
        }
        // SAFETY: `start` is 16 words: two unaligned 256-bit loads inside it.
        let (s0, s1) = unsafe {
            (
                _mm256_loadu_si256(start.cast()),
                _mm256_loadu_si256(start.add(8).cast()),
            )
        };
        acc.map(|s| {
            // hadd gives columns 0 1 4 5 | 2 3 6 7; the 64-bit permute puts them in order.
            let lo = _mm256_permute4x64_epi64(_mm256_hadd_epi32(s[0], s[1]), 0b11_01_10_00);
            let hi = _mm256_permute4x64_epi64(_mm256_hadd_epi32(s[2], s[3]), 0b11_01_10_00);
            [_mm256_add_epi32(lo, s0), _mm256_add_epi32(hi, s1)]
        })
    }

    #[target_feature(enable = "avx2")]
    fn tile_avx2<const R: usize>(
        a: &[u8],
        pitch: usize,
        b: &[u8],
        start: &[i32; NR],
        out: &mut [i32],
        ldo: usize,
    ) {
        let g = b.len() / GROUP_BYTES;
        if !tile_fits::<R>(a, pitch, g, out, ldo) {
            return;
        }
        let rows: [*const u8; R] = std::array::from_fn(|r| a[r * pitch..].as_ptr());
        // SAFETY: each row holds `4g` bytes (`tile_fits`), `b` is whole groups and
        // `start` 16 words.
        let sums = unsafe { sums_avx2(&rows, &b[..g * GROUP_BYTES], start.as_ptr()) };
        // Row by row at `r * ldo` (not `chunks_mut(ldo)`, whose count is a division).
        for (r, s) in sums.iter().enumerate() {
            let Some(o) = out
                .get_mut(r * ldo..)
                .and_then(<[i32]>::first_chunk_mut::<NR>)
            else {
                continue;
            };
            // SAFETY: `o` is 16 words: two unaligned 256-bit stores inside it.
            unsafe {
                _mm256_storeu_si256(o.as_mut_ptr().cast(), s[0]);
                _mm256_storeu_si256(o.as_mut_ptr().add(8).cast(), s[1]);
            }
        }
    }

    /// What [`panels_avx2`] does with the sums of each panel of its tile (in registers).
    pub trait PanelSink256 {
        /// Takes the sums of panel `q` (columns `16q..16q + 16`): row `r`'s columns
        /// `16q..16q + 8` in `acc[r][0]`, the next eight in `acc[r][1]`.
        ///
        /// # Safety
        /// Called only where the CPU has AVX2.
        unsafe fn put(&mut self, q: usize, acc: &[[__m256i; 2]; ROWS256]);
    }

    /// The AVX2 twin of `vnni::panels`: the tile of [`ROWS256`] rows of A times every
    /// panel of `b`, each panel's sums handed to `sink`; false (no call) if the sizes
    /// disagree.
    ///
    /// # Safety
    /// The CPU has AVX2 (as for calling any function with this target feature).
    #[target_feature(enable = "avx2")]
    pub fn panels_avx2<S: PanelSink256>(
        a: &[u8],
        pitch: usize,
        b: &[u8],
        groups: usize,
        start: &[i32],
        sink: &mut S,
    ) -> bool {
        let Some((panel, _)) = panels_fit::<ROWS256>(a, pitch, b, groups, start) else {
            return false;
        };
        let rows: [*const u8; ROWS256] = std::array::from_fn(|r| a[r * pitch..].as_ptr());
        for (q, (p, s)) in b
            .chunks_exact(panel)
            .zip(start.chunks_exact(NR))
            .enumerate()
        {
            // SAFETY: each row holds `4 * groups` bytes (checked), the panel's groups are
            // `groups * 64` bytes and `s` 16 words.
            let sums = unsafe { sums_avx2(&rows, &p[..groups * GROUP_BYTES], s.as_ptr()) };
            // SAFETY: the CPU has AVX2 (this function's contract).
            unsafe { sink.put(q, &sums) };
        }
        true
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    fn tile_avx512<const R: usize>(
        a: &[u8],
        pitch: usize,
        b: &[u8],
        start: &[i32; NR],
        out: &mut [i32],
        ldo: usize,
    ) {
        let g = b.len() / GROUP_BYTES;
        if !tile_fits::<R>(a, pitch, g, out, ldo) {
            return;
        }
        let rows: [*const u8; R] = std::array::from_fn(|r| a[r * pitch..].as_ptr());
        let mut acc = [[_mm512_setzero_si512(); 2]; R];
        for (t, group) in b.chunks_exact(GROUP_BYTES).enumerate() {
            // SAFETY: `group` is 64 bytes: two unaligned 256-bit loads inside it.
            let (y0, y1) = unsafe {
                (
                    _mm512_cvtepi8_epi16(_mm256_loadu_si256(group.as_ptr().cast())),
                    _mm512_cvtepi8_epi16(_mm256_loadu_si256(group.as_ptr().add(32).cast())),
                )
            };
            for (s, &row) in acc.iter_mut().zip(&rows) {
                // SAFETY: as in the AVX2 tile: `tile_fits` and `t < g`.
                let x = _mm512_cvtepu8_epi16(_mm256_set1_epi32(unsafe { quad(row, t) }));
                s[0] = _mm512_add_epi32(s[0], _mm512_madd_epi16(x, y0));
                s[1] = _mm512_add_epi32(s[1], _mm512_madd_epi16(x, y1));
            }
        }
        // SAFETY: `start` is 16 words, one unaligned 512-bit load.
        let s = unsafe { _mm512_loadu_si512(start.as_ptr().cast()) };
        // Lanes 2j and 2j + 1 of the pair of accumulators are column j's two halves.
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        // Row by row at `r * ldo` (not `chunks_mut(ldo)`, whose count is a division).
        for (r, a) in acc.iter().enumerate() {
            let Some(o) = out
                .get_mut(r * ldo..)
                .and_then(<[i32]>::first_chunk_mut::<NR>)
            else {
                continue;
            };
            let sum = _mm512_add_epi32(
                _mm512_permutex2var_epi32(a[0], even, a[1]),
                _mm512_permutex2var_epi32(a[0], odd, a[1]),
            );
            // SAFETY: `o` is 16 words, one unaligned 512-bit store.
            unsafe { _mm512_storeu_si512(o.as_mut_ptr().cast(), _mm512_add_epi32(sum, s)) };
        }
    }

    pub(crate) fn avx2(
        a: &[u8],
        pitch: usize,
        b: &[u8],
        start: &[i32; NR],
        out: &mut [i32],
        ldo: usize,
    ) {
        // SAFETY: chosen by `quads::kernel_for` only at Isa::Avx2 or above, after capping
        // the level at the CPU's, so the CPU has AVX2.
        unsafe { tile_avx2::<ROWS256>(a, pitch, b, start, out, ldo) }
    }

    pub(crate) fn avx512(
        a: &[u8],
        pitch: usize,
        b: &[u8],
        start: &[i32; NR],
        out: &mut [i32],
        ldo: usize,
    ) {
        // SAFETY: chosen only at Isa::Avx512 or above (the CPU has AVX-512F and BW).
        unsafe { tile_avx512::<ROWS512>(a, pitch, b, start, out, ldo) }
    }
}
