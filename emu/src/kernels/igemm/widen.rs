//! The AVX2 and AVX-512BW micro-kernels of the byte GEMM ([`super::quads`]), for CPUs
//! without VNNI: A's four bytes of a group and B's are widened to `i16` (`vpmovzxbw`,
//! `vpmovsxbw`) and multiplied with `vpmaddwd`, which is exact here (`u8 x i8` products,
//! two to a lane). (`vpmaddubsw` would multiply the bytes directly but saturates its pair
//! sums at `i16`, which `255 * 127 * 2` exceeds.)
//!
//! A widened group of four columns is eight lanes, two per column (depth entries 0-1 and
//! 2-3 of the group); the two are added once, when the tile is stored.
//!
//! The whole-tile AVX2 path (the output stage in the store, `qconv/bytes.rs`) instead
//! widens its operands once a call, A's block with [`bytes_to_pairs`] and B with
//! [`quads_to_pairs`], and runs the pair GEMM's six-row tiles (`pairs::panels_avx2`):
//! the per-tile widening cost a shuffle for every row's group and for each quarter of B's,
//! and the three-row tile (four accumulators a row) loaded B's groups twice as often.

#[cfg(target_arch = "x86_64")]
pub(super) use x86::{avx2, avx512, ROWS256, ROWS512};
#[cfg(target_arch = "x86_64")]
pub use x86::{bytes_to_pairs, quads_to_pairs};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::pairs::NR;
    use super::super::quads::{tile_fits, GROUP, GROUP_BYTES};
    use std::arch::x86_64::*;

    /// Rows of the AVX2 tile: four accumulators a row (16 columns, two lanes each), the
    /// rows' widened bytes and one widened quarter of the group: 16 registers at 3.
    pub(crate) const ROWS256: usize = 3;

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
        // Each row holds `4g` bytes (`tile_fits`), `b` is whole groups and `start` 16 words.
        // SAFETY: by the above.
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

    /// A block of the byte GEMM's A rows (`src`, whole groups a row) as the pair GEMM's
    /// rows (`dst`): byte `i` becomes half word `i`, zero-extended, so a row of `4g` bytes
    /// is a row of `2g` pair words (depth entries `2p`, `2p + 1` in word `p`). False (and
    /// `dst` untouched) if `dst` holds fewer than `src.len() / 2` words or `src` is not
    /// whole words.
    ///
    /// # Safety
    /// The CPU has AVX2 (as for calling any function with this target feature).
    #[target_feature(enable = "avx2")]
    pub fn bytes_to_pairs(src: &[u8], dst: &mut [i32]) -> bool {
        if !src.len().is_multiple_of(4) || dst.len() < src.len() / 2 {
            return false;
        }
        let (body, tail) = src.split_at(src.len() / 16 * 16);
        let (dst_body, dst_tail) = dst.split_at_mut(body.len() / 2);
        for (s, d) in body.chunks_exact(16).zip(dst_body.chunks_exact_mut(8)) {
            // `s` is 16 bytes and `d` 8 words: one unaligned 128-bit load, one unaligned 256-bit
            // store.
            // SAFETY: by the above.
            unsafe {
                let w = _mm256_cvtepu8_epi16(_mm_loadu_si128(s.as_ptr().cast()));
                _mm256_storeu_si256(d.as_mut_ptr().cast(), w);
            }
        }
        for (s, d) in tail.chunks_exact(2).zip(dst_tail) {
            *d = i32::from(s[0]) | i32::from(s[1]) << 16;
        }
        true
    }

    /// B packed for the byte GEMM (`quads::pack`: panels of `groups` groups and the
    /// panel's column sums) as the pair GEMM's panels (the layout of `pairs::pack_b` at
    /// depth `4 * groups`: panel `q`'s pair `p` is the sixteen words
    /// `pair(B[2p][j], B[2p + 1][j])`), into the first `n * groups * 32` words of `out`
    /// (grown where short, never shortened: refilling a regrown tail with zeros would
    /// cost as much as the conversion). Returns the panel count `n`; `None` (and `out`
    /// unchanged) if `packed` is not whole panels.
    ///
    /// # Safety
    /// The CPU has AVX2 (as for calling any function with this target feature).
    #[target_feature(enable = "avx2")]
    pub fn quads_to_pairs(packed: &[u8], groups: usize, out: &mut Vec<i32>) -> Option<usize> {
        let panel = groups.checked_add(1)?.checked_mul(GROUP_BYTES)?;
        if !packed.len().is_multiple_of(panel) {
            return None;
        }
        let n = packed.len() / panel;
        // A group (four depth entries of sixteen columns) is two pair rows of 16 words.
        let len = n * groups * 2 * NR;
        if out.len() < len {
            out.resize(len, 0);
        }
        // Per 128-bit half: the even words (depth 0-1) of a group's four columns first,
        // then the odd ones (depth 2-3).
        let evens_first = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
        let groups_of = packed
            .chunks_exact(panel)
            .flat_map(|p| p[..groups * GROUP_BYTES].chunks_exact(GROUP_BYTES));
        for (g, d) in groups_of.zip(out[..len].chunks_exact_mut(2 * NR)) {
            // `g` is 64 bytes (four unaligned 128-bit loads inside it) and `d` 32 words (four
            // unaligned 256-bit stores inside it).
            // SAFETY: by the above.
            unsafe {
                let w: [__m256i; 4] = std::array::from_fn(|c| {
                    let x = _mm_loadu_si128(g.as_ptr().add(16 * c).cast());
                    _mm256_permutevar8x32_epi32(_mm256_cvtepi8_epi16(x), evens_first)
                });
                let d = d.as_mut_ptr().cast::<__m256i>();
                _mm256_storeu_si256(d, _mm256_permute2x128_si256(w[0], w[1], 0x20));
                _mm256_storeu_si256(d.add(1), _mm256_permute2x128_si256(w[2], w[3], 0x20));
                _mm256_storeu_si256(d.add(2), _mm256_permute2x128_si256(w[0], w[1], 0x31));
                _mm256_storeu_si256(d.add(3), _mm256_permute2x128_si256(w[2], w[3], 0x31));
            }
        }
        Some(n)
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
        // Chosen by `quads::kernel_for` only at Isa::Avx2 or above, after capping the level at the
        // CPU's, so the CPU has AVX2.
        // SAFETY: by the above.
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

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::super::{pairs, quads};
    use super::*;
    use crate::kernels::isa::{detected, Isa};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(64))]
        /// B packed for the byte GEMM, widened, is B packed for the pair GEMM at the
        /// groups' depth (zeros past `k` and `n`); A's bytes widened are the pair rows
        /// of the same values; wrong sizes are refused.
        #[test]
        fn widened_operands_are_the_pair_gemm_operands(
            k in 0usize..40,
            n in 1usize..40,
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            seed in any::<u64>(),
        ) {
            if detected() < Isa::Avx2 {
                return Ok(());
            }
            let b = |kk: usize, j: usize| i32::from((seed.rotate_left((kk * 7 + j) as u32) as u8 ^ (kk * 31 + j) as u8) as i8);
            let mut packed = vec![0; quads::packed_len(k, n).unwrap()];
            quads::pack(k, n, b, &mut packed).unwrap();
            let groups = quads::groups(k);
            let depth = 4 * groups;
            let mut want = vec![0; pairs::packed_len(depth, n).unwrap()];
            pairs::pack_b(depth, n, |kk, j| if kk < k { b(kk, j) } else { 0 }, &mut want).unwrap();
            let mut got = vec![9; 3];
            // SAFETY: the CPU has AVX2 (checked above).
            let panels = unsafe { quads_to_pairs(&packed, groups, &mut got) };
            prop_assert_eq!(panels, Some(n.div_ceil(16)));
            prop_assert_eq!(&got[..want.len()], &want[..]);
            // SAFETY: as above.
            prop_assert_eq!(unsafe { quads_to_pairs(&packed[1..], groups, &mut got) }, None);

            let whole = &bytes[..bytes.len() / 4 * 4];
            let mut words = vec![7; whole.len() / 2 + 1];
            // SAFETY: as above.
            let widened = unsafe { bytes_to_pairs(whole, &mut words) };
            prop_assert!(widened);
            let want: Vec<i32> = whole
                .chunks_exact(2)
                .map(|p| pairs::pair(i32::from(p[0]), i32::from(p[1])))
                .collect();
            prop_assert_eq!(&words[..want.len()], &want[..]);
            prop_assert_eq!(words[want.len()], 7);
            if !want.is_empty() {
                // SAFETY: as above.
                let short = unsafe { bytes_to_pairs(whole, &mut words[..want.len() - 1]) };
                prop_assert!(!short);
            }
        }
    }
}
