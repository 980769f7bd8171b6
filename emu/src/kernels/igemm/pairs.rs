//! The integer GEMM on `i16` pairs: A and B hold small integers (zero points already
//! removed, each in `[-32767, 32767]`), the path for zero points the byte form
//! ([`super::quads`]) cannot take.
//!
//! Both operands are stored as *pairs*: one `i32` holds two consecutive depth entries
//! (`lo = k`, `hi = k + 1`, as `i16` halves), the form `vpmaddwd` (AVX2, AVX-512BW) and
//! `vpdpwssd` (AVX-512 VNNI) multiply: each 32-bit lane gets `a_lo * b_lo + a_hi * b_hi`,
//! exact because both products are at most `32767^2` (so the pair sum stays below
//! `2^31`). The lanes are then added with wrapping 32-bit adds, and a wrapping integer sum
//! does not depend on its order, so every level (and the plain fallback) gives the bits of
//! the reference's scalar loop.
//!
//! B (the filter) is packed once into panels of [`NR`] columns (see [`pack_b`]); A (im2col
//! rows) is a block of rows of pair words ([`ATiles`]), which the micro-kernels read in
//! place, a tile of their row count at a time.

use crate::kernels::isa::{detected, isa, Isa};

/// Columns of one B panel (one 512-bit register of `i32` lanes, two 256-bit ones).
pub const NR: usize = 16;

/// The largest magnitude an operand may have for the pair sums to be exact.
pub const MAX_OPERAND: i32 = i16::MAX as i32;

/// Two depth entries as one pair word (`lo` in the low half). Both must fit `i16`.
#[inline(always)]
pub fn pair(lo: i32, hi: i32) -> i32 {
    (u32::from(lo as u16) | (u32::from(hi as u16) << 16)) as i32
}

/// Number of pair words of a depth `k`.
#[inline]
pub fn pairs(k: usize) -> usize {
    k.div_ceil(2)
}

/// `i32` words of B (`k x n`) packed by [`pack_b`].
pub fn packed_len(k: usize, n: usize) -> Option<usize> {
    n.div_ceil(NR).checked_mul(pairs(k))?.checked_mul(NR)
}

/// Packs B (`k x n`, entry `(kk, j)` given by `at`) into panels: panel `q` holds columns
/// `q*NR ..`, pair `p` of it the [`NR`] words `pair(B[2p][j], B[2p+1][j])` (zeros past `k`
/// and `n`). Returns `None` (and leaves `out` partly written) if an entry is outside
/// `[-MAX_OPERAND, MAX_OPERAND]` or `out` is not [`packed_len`] long.
pub fn pack_b(k: usize, n: usize, at: impl Fn(usize, usize) -> i32, out: &mut [i32]) -> Option<()> {
    if Some(out.len()) != packed_len(k, n) {
        return None;
    }
    let k2 = pairs(k);
    if k2 == 0 {
        return Some(());
    }
    let fits = |v: i32| (-MAX_OPERAND..=MAX_OPERAND).contains(&v);
    for (q, panel) in out.chunks_exact_mut(k2 * NR).enumerate() {
        for (p, words) in panel.chunks_exact_mut(NR).enumerate() {
            for (l, w) in words.iter_mut().enumerate() {
                let j = q * NR + l;
                let get = |kk: usize| if kk < k && j < n { at(kk, j) } else { 0 };
                let (lo, hi) = (get(2 * p), get(2 * p + 1));
                if !fits(lo) || !fits(hi) {
                    return None;
                }
                *w = pair(lo, hi);
            }
        }
    }
    Some(())
}

/// A micro-kernel: `out[r][l] = sum_p madd(a[r*k2 + p], b[p*NR + l])` for one tile of A
/// (`R` rows of `k2` pair words, row-major) and one panel of B (`k2 * NR` words); `out`
/// is `R * NR` words, row-major. A tile shorter than `R * k2` words, or an `out` shorter
/// than `R * NR`, leaves `out` unchanged.
type Micro = fn(&[i32], &[i32], &mut [i32]);

/// The micro-kernel the chosen [`Isa`] runs, and its row count R.
#[derive(Clone, Copy)]
pub struct Kernel {
    rows: usize,
    run: Micro,
}

impl Kernel {
    /// Rows of A one call multiplies.
    pub fn rows(&self) -> usize {
        self.rows
    }
}

/// The micro-kernel for [`isa()`].
pub fn kernel() -> Kernel {
    kernel_for(isa())
}

/// The micro-kernel for `level`, capped at what the CPU has ([`detected`]):
/// a level the CPU lacks never selects a kernel built for it.
pub fn kernel_for(level: Isa) -> Kernel {
    match level.min(detected()) {
        Isa::Scalar => Kernel {
            rows: 4,
            run: tile_plain::<4>,
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Kernel {
            rows: x86::ROWS256,
            run: x86::avx2,
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => Kernel {
            rows: x86::ROWS512,
            run: x86::avx512,
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => Kernel {
            rows: x86::ROWS512,
            run: x86::vnni,
        },
        #[cfg(not(target_arch = "x86_64"))]
        _ => kernel_for(Isa::Scalar),
    }
}

/// The plain micro-kernel (also the reference of the vector ones).
fn tile_plain<const R: usize>(a: &[i32], b: &[i32], out: &mut [i32]) {
    let k2 = b.len() / NR;
    if a.len() < R * k2 || out.len() < R * NR {
        return;
    }
    let mut acc = [[0i32; NR]; R];
    for (row, a) in acc.iter_mut().zip(a.chunks_exact(k2.max(1))) {
        for (&x, bp) in a.iter().zip(b.chunks_exact(NR)) {
            let (xl, xh) = (i32::from(x as i16), x >> 16);
            for (s, &y) in row.iter_mut().zip(bp) {
                let (yl, yh) = (i32::from(y as i16), y >> 16);
                *s = s.wrapping_add((xl * yl).wrapping_add(xh * yh));
            }
        }
    }
    for (o, row) in out.chunks_exact_mut(NR).zip(&acc) {
        o.copy_from_slice(row);
    }
}

#[cfg(target_arch = "x86_64")]
pub use x86::{panels_avx2, PanelSink256, ROWS256};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::NR;
    use std::arch::x86_64::*;

    /// Rows of the AVX-512 tiles: twelve accumulators, one B register, a broadcast.
    pub(super) const ROWS512: usize = 12;

    /// The first word of each of the `R` rows of a tile of `k2`-word rows (`a` holds at
    /// least `R * k2` words: the callers check).
    #[inline(always)]
    fn row_starts<const R: usize>(a: &[i32], k2: usize) -> [*const i32; R] {
        std::array::from_fn(|r| a.get(r * k2..).map_or(a.as_ptr(), <[i32]>::as_ptr))
    }

    /// Rows of the AVX2 tiles: two accumulators a row (16 columns), B's two vectors and
    /// a broadcast: 15 of 16 registers.
    pub const ROWS256: usize = 6;

    /// The sums of `R` rows of pair words (row `r` from `rows[r]`, `b.len() / NR` words
    /// each) by one panel `b` of pair words, from `init` (columns 0-7, 8-15) in every row.
    ///
    /// # Safety
    /// The CPU has AVX2; each row has `b.len() / NR` readable words.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sums_avx2<const R: usize>(
        rows: &[*const i32; R],
        b: &[i32],
        init: [__m256i; 2],
    ) -> [[__m256i; 2]; R] {
        let mut acc = [init; R];
        for (p, bp) in b.chunks_exact(NR).enumerate() {
            let Ok(bp) = <&[i32; NR]>::try_from(bp) else {
                continue;
            };
            // SAFETY: `bp` is 16 words: two unaligned 256-bit loads inside it.
            let (b0, b1) = unsafe {
                (
                    _mm256_loadu_si256(bp.as_ptr().cast()),
                    _mm256_loadu_si256(bp.as_ptr().add(8).cast()),
                )
            };
            for (s, &row) in acc.iter_mut().zip(rows) {
                // Row `r` has `b.len() / NR` words (the caller's contract) and `p` is below that.
                // SAFETY: by the above.
                let x = _mm256_set1_epi32(unsafe { *row.add(p) });
                s[0] = _mm256_add_epi32(s[0], _mm256_madd_epi16(x, b0));
                s[1] = _mm256_add_epi32(s[1], _mm256_madd_epi16(x, b1));
            }
        }
        acc
    }

    #[target_feature(enable = "avx2")]
    fn tile_avx2<const R: usize>(a: &[i32], b: &[i32], out: &mut [i32]) {
        let k2 = b.len() / NR;
        if a.len() < R * k2 || out.len() < R * NR {
            return;
        }
        let rows = row_starts::<R>(a, k2);
        let zero = _mm256_setzero_si256();
        // The CPU has AVX2 (this function's feature) and row `r` starts at word `r * k2` of `a`,
        // which holds `R * k2` words (checked above).
        // SAFETY: by the above.
        let acc = unsafe { sums_avx2(&rows, b, [zero, zero]) };
        for (o, s) in out.chunks_exact_mut(NR).zip(&acc) {
            let Ok(o) = <&mut [i32; NR]>::try_from(o) else {
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

    /// A tile of [`ROWS256`] rows of pair words (`k2` each, row `r` at word `r * k2` of
    /// `a`) times every panel of `b` (`k2 * NR` words a panel), each panel's sums plus
    /// its sixteen start values (`start`) handed to `sink`; false (no call) if the sizes
    /// disagree. The AVX2 form of the byte GEMM's whole tiles (`widen.rs` widens its
    /// operands to pairs).
    ///
    /// # Safety
    /// The CPU has AVX2 (as for calling any function with this target feature).
    #[target_feature(enable = "avx2")]
    pub fn panels_avx2<S: PanelSink256>(
        a: &[i32],
        k2: usize,
        b: &[i32],
        start: &[i32],
        sink: &mut S,
    ) -> bool {
        let panel = k2 * NR;
        let fits = panel > 0
            && a.len() >= ROWS256 * k2
            && b.len().is_multiple_of(panel)
            && start.len() == b.len() / panel * NR;
        if !fits {
            return false;
        }
        let rows = row_starts::<ROWS256>(a, k2);
        for (q, (p, s)) in b
            .chunks_exact(panel)
            .zip(start.chunks_exact(NR))
            .enumerate()
        {
            // SAFETY: `s` is 16 words: two unaligned 256-bit loads inside it.
            let init = unsafe {
                [
                    _mm256_loadu_si256(s.as_ptr().cast()),
                    _mm256_loadu_si256(s.as_ptr().add(8).cast()),
                ]
            };
            // SAFETY: the CPU has AVX2; each row holds `k2` words (checked above).
            let sums = unsafe { sums_avx2(&rows, p, init) };
            // SAFETY: the CPU has AVX2 (this function's contract).
            unsafe { sink.put(q, &sums) };
        }
        true
    }

    macro_rules! tile512 {
        ($name:ident, $features:literal, $step:expr) => {
            #[target_feature(enable = $features)]
            fn $name<const R: usize>(a: &[i32], b: &[i32], out: &mut [i32]) {
                let k2 = b.len() / NR;
                if a.len() < R * k2 || out.len() < R * NR {
                    return;
                }
                let rows = row_starts::<R>(a, k2);
                let mut acc = [_mm512_setzero_si512(); R];
                for (p, bp) in b.chunks_exact(NR).enumerate() {
                    let Ok(bp) = <&[i32; NR]>::try_from(bp) else {
                        continue;
                    };
                    // SAFETY: `bp` is 16 words, one unaligned 512-bit load.
                    let y = unsafe { _mm512_loadu_si512(bp.as_ptr().cast()) };
                    for (s, &row) in acc.iter_mut().zip(&rows) {
                        // Row `r` starts at word `r * k2` of `a`, which holds `R * k2` words
                        // (checked above), and `p < k2`.
                        // SAFETY: by the above.
                        let x = _mm512_set1_epi32(unsafe { *row.add(p) });
                        *s = $step(*s, x, y);
                    }
                }
                for (o, s) in out.chunks_exact_mut(NR).zip(&acc) {
                    let Ok(o) = <&mut [i32; NR]>::try_from(o) else {
                        continue;
                    };
                    // SAFETY: `o` is 16 words, one unaligned 512-bit store.
                    unsafe { _mm512_storeu_si512(o.as_mut_ptr().cast(), *s) };
                }
            }
        };
    }

    tile512!(tile_avx512, "avx512f,avx512bw", |s, x, y| _mm512_add_epi32(
        s,
        _mm512_madd_epi16(x, y)
    ));
    tile512!(tile_vnni, "avx512f,avx512bw,avx512vnni", |s, x, y| {
        _mm512_dpwssd_epi32(s, x, y)
    });

    pub(super) fn avx2(a: &[i32], b: &[i32], out: &mut [i32]) {
        // Chosen by `kernel_for` only at Isa::Avx2 or above, after capping the level at the CPU's,
        // so the CPU has AVX2.
        // SAFETY: by the above.
        unsafe { tile_avx2::<ROWS256>(a, b, out) }
    }

    pub(super) fn avx512(a: &[i32], b: &[i32], out: &mut [i32]) {
        // SAFETY: chosen only at Isa::Avx512 or above (the CPU has AVX-512F and BW).
        unsafe { tile_avx512::<ROWS512>(a, b, out) }
    }

    pub(super) fn vnni(a: &[i32], b: &[i32], out: &mut [i32]) {
        // SAFETY: chosen only at Isa::Avx512Vnni (the CPU has AVX-512F, BW and VNNI).
        unsafe { tile_vnni::<ROWS512>(a, b, out) }
    }
}

/// A block of A's rows as pair words, row `r`'s pair `p` at word `r*k2 + p` (written
/// contiguously, so the element conversion vectorises; the micro-kernels read a tile of
/// their row count in place). Rows never set are 0 after [`ATiles::new`], and whatever
/// the buffer held after [`ATiles::reuse`]: either way their sums are never stored, and
/// the half word past an odd depth meets B's zero padding (any `i16` times 0 is 0).
pub struct ATiles {
    rows: usize,
    capacity: usize,
    k2: usize,
    data: Vec<i32>,
}

impl ATiles {
    /// Room for `m` rows of depth `k` in tiles of `rows` (= [`Kernel::rows`]).
    pub fn new(m: usize, k: usize, rows: usize) -> Self {
        let k2 = pairs(k);
        let tiles = m.div_ceil(rows.max(1));
        Self {
            rows: rows.max(1),
            capacity: tiles * rows.max(1),
            k2,
            data: vec![0; tiles * rows.max(1) * k2],
        }
    }

    /// [`ATiles::new`] in `buffer` (a block's worth of the last use, say: grown where
    /// short, never cleared, so a layer neither allocates nor zeroes it).
    pub fn reuse(m: usize, k: usize, rows: usize, mut buffer: Vec<i32>) -> Self {
        let k2 = pairs(k);
        let rows = rows.max(1);
        let capacity = m.div_ceil(rows) * rows;
        let len = capacity * k2;
        if buffer.len() < len {
            buffer.resize(len, 0);
        } else {
            buffer.truncate(len);
        }
        Self {
            rows,
            capacity,
            k2,
            data: buffer,
        }
    }

    /// The buffer, for the next [`ATiles::reuse`].
    pub fn into_buffer(self) -> Vec<i32> {
        self.data
    }

    /// Sets row `r` from its `k` values (each within `[-MAX_OPERAND, MAX_OPERAND]`; the
    /// caller checks). Rows outside the block are ignored.
    #[inline]
    pub fn set_row(&mut self, r: usize, values: &[i32]) {
        self.set_row_map(r, values, |v| v);
    }

    /// [`ATiles::set_row`] from `values` mapped by `f` (an input row with its zero point
    /// removed, say, without an intermediate row).
    #[inline]
    pub fn set_row_map<V: Copy>(&mut self, r: usize, values: &[V], f: impl Fn(V) -> i32) {
        let Some(row) = self.data.get_mut(r * self.k2..(r + 1) * self.k2) else {
            return;
        };
        // A pair word is its two `i16` halves, low first: on a little-endian machine the
        // row is the values as consecutive `i16`s (a plain narrowing loop).
        #[cfg(target_endian = "little")]
        {
            let halves: &mut [i16] = bytemuck::cast_slice_mut(row);
            for (h, &v) in halves.iter_mut().zip(values) {
                *h = f(v) as i16;
            }
        }
        #[cfg(not(target_endian = "little"))]
        {
            let mut two = values.chunks_exact(2);
            for (w, v) in row.iter_mut().zip(two.by_ref()) {
                *w = pair(f(v[0]), f(v[1]));
            }
            if let ([last], Some(w)) = (two.remainder(), row.get_mut(values.len() / 2)) {
                *w = pair(f(*last), 0);
            }
        }
    }
}

/// The largest row count of a micro-kernel (the AVX-512 tiles').
const MAX_ROWS: usize = 12;

/// `C[r][j] = sum_kk A[r][kk] * B[kk][j]` (wrapping) for the first `m` rows of `a` and the
/// `n` columns of `b` (packed by [`pack_b`] for depth `k`), into `c` with row pitch `ldc`.
/// Returns `None` if the sizes do not agree (nothing is then written).
pub fn igemm(
    kernel: Kernel,
    m: usize,
    a: &ATiles,
    b: &[i32],
    n: usize,
    c: &mut [i32],
    ldc: usize,
) -> Option<()> {
    if n > ldc || (m > 0 && c.len() < (m - 1) * ldc + n) {
        return None;
    }
    igemm_each(
        kernel,
        m,
        a,
        b,
        n,
        &mut vec![0; kernel.rows * n],
        |row0, sums| {
            for (i, row) in sums.chunks_exact(n.max(1)).enumerate() {
                let at = (row0 + i) * ldc;
                c[at..at + n].copy_from_slice(row);
            }
        },
    )
}

/// The rows of [`igemm`] a tile at a time: for each tile of the kernel's row count,
/// `sink(first_row, sums)` with `sums` the tile's rows of C (row-major, pitch `n`; the
/// last tile's rows past `m` left out), from `tile` (at least `kernel.rows() * n` words,
/// a small buffer that stays in the first-level cache). Returns `None` if the sizes do
/// not agree (`sink` is then never called).
pub fn igemm_each(
    kernel: Kernel,
    m: usize,
    a: &ATiles,
    b: &[i32],
    n: usize,
    tile: &mut [i32],
    mut sink: impl FnMut(usize, &[i32]),
) -> Option<()> {
    let (r, k2) = (kernel.rows, a.k2);
    let ok = a.rows == r
        && r <= MAX_ROWS
        && Some(b.len()) == n.div_ceil(NR).checked_mul(k2 * NR)
        && m <= a.capacity
        && tile.len() >= r * n;
    if !ok {
        return None;
    }
    let mut out = [0i32; MAX_ROWS * NR];
    for row0 in (0..m).step_by(r) {
        let rows = r.min(m - row0);
        let sums = &mut tile[..rows * n];
        if k2 == 0 {
            // An empty depth: every sum is 0 (and B has no panel words to walk).
            sums.fill(0);
            sink(row0, sums);
            continue;
        }
        let a_tile = a.data.get(row0 * k2..(row0 + r) * k2).unwrap_or_default();
        for (q, panel) in b.chunks_exact(k2 * NR).enumerate() {
            (kernel.run)(a_tile, panel, &mut out);
            let cols = NR.min(n - q * NR);
            for (i, got) in out.chunks_exact(NR).take(rows).enumerate() {
                let at = i * n + q * NR;
                sums[at..at + cols].copy_from_slice(&got[..cols]);
            }
        }
        sink(row0, sums);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every level this CPU has.
    fn levels() -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni]
            .into_iter()
            .filter(|&l| l <= detected())
            .collect()
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(64))]
        /// Every micro-kernel gives the wrapping integer sums of a plain triple loop,
        /// including operands at the extremes of the exact range.
        #[test]
        fn igemm_matches_plain_sums(
            m in 0usize..30,
            k in 0usize..40,
            n in 1usize..40,
            seed in any::<u64>(),
            extreme in any::<bool>(),
        ) {
            let mut s = seed | 1;
            let mut next = || {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                if extreme {
                    [-MAX_OPERAND, MAX_OPERAND, 0, 1][(s % 4) as usize]
                } else {
                    (s % 511) as i32 - 255
                }
            };
            let av: Vec<i32> = (0..m * k).map(|_| next()).collect();
            let bv: Vec<i32> = (0..k * n).map(|_| next()).collect();
            let mut want = vec![0i32; m * n];
            for i in 0..m {
                for j in 0..n {
                    want[i * n + j] = (0..k).fold(0i32, |acc, kk| {
                        acc.wrapping_add(av[i * k + kk].wrapping_mul(bv[kk * n + j]))
                    });
                }
            }
            let mut packed = vec![0; packed_len(k, n).unwrap()];
            pack_b(k, n, |kk, j| bv[kk * n + j], &mut packed).unwrap();
            for level in levels() {
                let kern = kernel_for(level);
                let mut a = ATiles::new(m, k, kern.rows());
                for i in 0..m {
                    a.set_row(i, &av[i * k..(i + 1) * k]);
                }
                let ldc = n + 3;
                let mut c = vec![7i32; m * ldc];
                igemm(kern, m, &a, &packed, n, &mut c, ldc).unwrap();
                for i in 0..m {
                    prop_assert_eq!(&c[i * ldc..i * ldc + n], &want[i * n..(i + 1) * n], "{:?}", level);
                }
            }
        }
    }

    #[test]
    fn kernel_for_caps_the_level_at_the_cpu() {
        let cpu = detected();
        for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
            let want = kernel_for(level.min(cpu));
            let got = kernel_for(level);
            assert_eq!(got.rows(), want.rows(), "{level:?}");
            assert!(std::ptr::fn_addr_eq(got.run, want.run), "{level:?}");
        }
    }

    #[test]
    fn igemm_refuses_bad_sizes_and_operands() {
        let mut packed = vec![0; packed_len(3, 2).unwrap()];
        assert!(pack_b(3, 2, |_, _| 40000, &mut packed).is_none());
        assert!(pack_b(3, 2, |_, _| 1, &mut packed[1..]).is_none());
        pack_b(3, 2, |_, _| 1, &mut packed).unwrap();
        let kern = kernel();
        let a = ATiles::new(2, 3, kern.rows());
        let mut c = vec![0; 4];
        assert!(igemm(kern, 2, &a, &packed, 2, &mut c, 2).is_some());
        assert!(igemm(kern, 2, &a, &packed, 2, &mut c[..3], 2).is_none());
        assert!(igemm(kern, 2, &a, &packed, 3, &mut c, 2).is_none());
        let other = ATiles::new(2, 5, kern.rows());
        assert!(igemm(kern, 2, &other, &packed, 2, &mut c, 2).is_none());
    }
}
