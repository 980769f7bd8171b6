//! The AVX-512 VNNI micro-kernel of the byte GEMM ([`super::quads`]): `vpdpbusd` adds the
//! four `u8 x i8` products of a 32-bit lane into it (no saturation: each product is at
//! most `255 * 128` in magnitude, and the lane's sum wraps as the reference's does).
//! Twelve rows of one panel: twelve accumulators, the panel's group (one register, 16
//! columns x 4 depth entries) and a broadcast of each row's four bytes.

#[cfg(target_arch = "x86_64")]
pub(super) use x86::vnni;
#[cfg(target_arch = "x86_64")]
pub use x86::{panels, PanelSink, ROWS};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::pairs::NR;
    use super::super::quads::{panels_fit, tile_fits, GROUP, GROUP_BYTES};
    use std::arch::x86_64::*;

    /// Rows of a tile.
    pub const ROWS: usize = 12;

    /// What [`panels`] does with the sums of each panel of its tile (sixteen columns of
    /// `ROWS` rows, in registers): requantise and store them, say, so they never pass
    /// through memory as `i32`.
    pub trait PanelSink {
        /// Takes the sums of panel `q` (columns `16q..16q + 16`): row `r`'s in `acc[r]`.
        ///
        /// # Safety
        /// Called only where the CPU has AVX-512F, BW and VNNI.
        unsafe fn put(&mut self, q: usize, acc: &[__m512i; ROWS]);
    }

    /// The tile of `ROWS` rows of A (`pitch` bytes apart from the start of `a`, each at
    /// least `groups * 4` bytes) times every panel of `b` (B packed by `quads::pack` for
    /// a depth of `groups` groups: whole panels of groups and column sums), from `start`
    /// (sixteen start values a panel), each panel's sums handed to `sink`: one call for
    /// a tile's every column, the rows' addresses worked out once. Returns false (no
    /// call of `sink`) if the sizes disagree.
    ///
    /// # Safety
    /// The CPU has AVX-512F, BW and VNNI (as for calling any function with these target
    /// features).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub fn panels<S: PanelSink>(
        a: &[u8],
        pitch: usize,
        b: &[u8],
        groups: usize,
        start: &[i32],
        sink: &mut S,
    ) -> bool {
        let Some((panel, _)) = panels_fit::<ROWS>(a, pitch, b, groups, start) else {
            return false;
        };
        let rows: [*const u8; ROWS] = std::array::from_fn(|r| a[r * pitch..].as_ptr());
        for (q, (p, s)) in b
            .chunks_exact(panel)
            .zip(start.chunks_exact(NR))
            .enumerate()
        {
            // SAFETY: `s` is 16 words, one unaligned 512-bit load.
            let s = unsafe { _mm512_loadu_si512(s.as_ptr().cast()) };
            let mut acc = [s; ROWS];
            for t in 0..groups {
                // SAFETY: group `t < groups` of the panel is 64 bytes inside `p`.
                let y = unsafe { _mm512_loadu_si512(p.as_ptr().add(t * GROUP_BYTES).cast()) };
                for (s, &row) in acc.iter_mut().zip(&rows) {
                    // Row `r` starts at byte `r * pitch` of `a`, which holds
                    // `(ROWS - 1) * pitch + groups * 4` bytes (checked), and `t < groups`.
                    // SAFETY: so the four bytes at `4t` of the row are inside `a`.
                    let x = unsafe { row.add(t * GROUP).cast::<i32>().read_unaligned() };
                    *s = _mm512_dpbusd_epi32(*s, _mm512_set1_epi32(x), y);
                }
            }
            // SAFETY: this function's target features are the CPU's (its caller's
            // contract for calling it).
            unsafe { sink.put(q, &acc) };
        }
        true
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    fn tile<const R: usize>(
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
        // SAFETY: `start` is 16 words, one unaligned 512-bit load.
        let s = unsafe { _mm512_loadu_si512(start.as_ptr().cast()) };
        let mut acc = [s; R];
        let rows: [*const u8; R] = std::array::from_fn(|r| a[r * pitch..].as_ptr());
        for (t, group) in b.chunks_exact(GROUP_BYTES).enumerate() {
            // SAFETY: `group` is 64 bytes, one unaligned 512-bit load.
            let y = unsafe { _mm512_loadu_si512(group.as_ptr().cast()) };
            for (s, &row) in acc.iter_mut().zip(&rows) {
                // Row `r` starts at byte `r * pitch` of `a`, which holds
                // `(R - 1) * pitch + g * 4` bytes (`tile_fits`), and `t < g`.
                // SAFETY: so the four bytes at `4t` of the row are inside `a`.
                let x = unsafe { row.add(t * GROUP).cast::<i32>().read_unaligned() };
                *s = _mm512_dpbusd_epi32(*s, _mm512_set1_epi32(x), y);
            }
        }
        // Row by row at `r * ldo` (not `chunks_mut(ldo)`, whose count is a division).
        for (r, s) in acc.iter().enumerate() {
            let Some(o) = out
                .get_mut(r * ldo..)
                .and_then(<[i32]>::first_chunk_mut::<NR>)
            else {
                continue;
            };
            // SAFETY: `o` is 16 words, one unaligned 512-bit store.
            unsafe { _mm512_storeu_si512(o.as_mut_ptr().cast(), *s) };
        }
    }

    pub(crate) fn vnni(
        a: &[u8],
        pitch: usize,
        b: &[u8],
        start: &[i32; NR],
        out: &mut [i32],
        ldo: usize,
    ) {
        // SAFETY: chosen by `quads::kernel_for` only at Isa::Avx512Vnni, after capping
        // the level at the CPU's, so the CPU has AVX-512F, BW and VNNI.
        unsafe { tile::<ROWS>(a, pitch, b, start, out, ldo) }
    }
}
