//! The integer GEMM on bytes: A is `u8`, B is `i8`, C the exact wrapping `i32` sums plus a
//! start value per column.
//!
//! A quantised convolution's sum `sum_k (x[k] - zp) * w[k][j]` is computed here as
//! `sum_k u[k] * w[k][j] - z * sum_k w[k][j]`, with `u = x - T::MIN` (a uint8 input as
//! it is, an int8 one as `x ^ 0x80`: both `u8`) and `z = zp - T::MIN`; the first term is
//! what `vpdpbusd` multiplies (`u8 x i8`, four products per 32-bit lane, each at most
//! `255 * 128`, added without saturation), the second is the column's *start value*
//! ([`start_values`]), from the column sums the packed filter carries. Padding taps hold
//! `z` (the zero point's byte), so they add `(z - z) * w = 0` as in the reference; every
//! sum wraps, so the result is the reference's bits.
//!
//! B (`k x n`) is packed once ([`pack`]) into panels of [`NR`] columns: `ceil(k / 4)`
//! *groups* of [`GROUP_BYTES`] bytes (column `l`'s four depth entries `4g .. 4g + 4` at
//! bytes `4l .. 4l + 4`, zeros past `k` and `n`), then the panel's [`NR`] column sums as
//! little-endian `i32`. One layout for every level: the AVX-512 VNNI kernel reads the
//! groups as they are, the AVX2 and AVX-512BW kernels widen them to `i16` (see
//! `widen.rs`), the plain one reads bytes.
//!
//! A is a block of rows of [`row_bytes`] bytes ([`ABytes`], written in place by the
//! im2col), which the micro-kernels read a tile of their row count at a time.

use super::pairs::NR;
use crate::kernels::isa::{detected, isa, Isa};

/// Depth entries of one group (the four bytes `vpdpbusd` adds into a lane).
pub const GROUP: usize = 4;

/// Bytes of one group of a panel: [`GROUP`] depth entries of [`NR`] columns.
pub const GROUP_BYTES: usize = GROUP * NR;

/// Groups of a depth `k`.
#[inline]
pub fn groups(k: usize) -> usize {
    k.div_ceil(GROUP)
}

/// Bytes of one row of A of depth `k` (whole groups; the bytes past `k` meet B's zeros).
#[inline]
pub fn row_bytes(k: usize) -> usize {
    groups(k) * GROUP
}

/// Bytes of one panel of depth `k`: its groups and its column sums.
pub fn panel_len(k: usize) -> Option<usize> {
    groups(k).checked_add(1)?.checked_mul(GROUP_BYTES)
}

/// Bytes of B (`k x n`) packed by [`pack`].
pub fn packed_len(k: usize, n: usize) -> Option<usize> {
    n.div_ceil(NR).checked_mul(panel_len(k)?)
}

/// Packs B (`k x n`, entry `(kk, j)` given by `at`) as described in the module notes.
/// Returns `None` (and leaves `out` partly written) if an entry is outside `i8` or `out`
/// is not [`packed_len`] long.
pub fn pack(k: usize, n: usize, at: impl Fn(usize, usize) -> i32, out: &mut [u8]) -> Option<()> {
    let panel = panel_len(k)?;
    if Some(out.len()) != packed_len(k, n) {
        return None;
    }
    for (q, p) in out.chunks_exact_mut(panel).enumerate() {
        let (body, tail) = p.split_at_mut(panel - GROUP_BYTES);
        let mut sums = [0i32; NR];
        for (g, group) in body.chunks_exact_mut(GROUP_BYTES).enumerate() {
            for (l, quad) in group.chunks_exact_mut(GROUP).enumerate() {
                let j = q * NR + l;
                for (t, byte) in quad.iter_mut().enumerate() {
                    let kk = g * GROUP + t;
                    let v = if kk < k && j < n { at(kk, j) } else { 0 };
                    let v = i8::try_from(v).ok()?;
                    sums[l] = sums[l].wrapping_add(i32::from(v));
                    *byte = v as u8;
                }
            }
        }
        for (s, b) in sums.iter().zip(tail.chunks_exact_mut(4)) {
            b.copy_from_slice(&s.to_le_bytes());
        }
    }
    Some(())
}

/// Calls `put(kk, j, value)` for every entry of B (`k x n`) packed by [`pack`]; `None`
/// (and no call) if `packed` is not [`packed_len`] long.
pub fn unpack(
    k: usize,
    n: usize,
    packed: &[u8],
    mut put: impl FnMut(usize, usize, i8),
) -> Option<()> {
    let panel = panel_len(k)?;
    if Some(packed.len()) != packed_len(k, n) {
        return None;
    }
    for j in 0..n {
        let (q, l) = (j / NR, j % NR);
        for kk in 0..k {
            let at = q * panel + (kk / GROUP) * GROUP_BYTES + l * GROUP + kk % GROUP;
            put(kk, j, packed[at] as i8);
        }
    }
    Some(())
}

/// The start value of every column (padded to whole panels) of B (`k x n`, packed by
/// [`pack`]) for A's offset `z` (the input zero point minus the element type's minimum):
/// `-z * sum_k B[k][j]`, wrapping. `None` if `packed` is not [`packed_len`] long.
pub fn start_values(k: usize, n: usize, packed: &[u8], z: i32) -> Option<Vec<i32>> {
    let panel = panel_len(k)?;
    if Some(packed.len()) != packed_len(k, n) {
        return None;
    }
    let minus_z = z.wrapping_neg();
    // A plain loop over each panel's sixteen sums (an iterator chain over the panels'
    // tails cost more than the sums: this runs on every execution of every layer).
    let mut out = vec![0i32; n.div_ceil(NR) * NR];
    for (dst, p) in out.chunks_exact_mut(NR).zip(packed.chunks_exact(panel)) {
        let sums = &p[panel - GROUP_BYTES..];
        for (d, b) in dst.iter_mut().zip(sums.chunks_exact(4)) {
            *d = i32::from_le_bytes([b[0], b[1], b[2], b[3]]).wrapping_mul(minus_z);
        }
    }
    Some(out)
}

/// A micro-kernel: `out[r*ldo + l] = start[l] + sum_t a[r*pitch + t] * b[t of column l]`
/// for one tile of A (`R` rows, `pitch` bytes apart, each at least the panel's groups
/// long) and the groups of one panel of B (`b`, whole groups), into `R` rows of [`NR`]
/// words of `out`, `ldo` apart. A tile or `out` too short leaves `out` unchanged.
type Micro = fn(&[u8], usize, &[u8], &[i32; NR], &mut [i32], usize);

/// The micro-kernel the chosen [`Isa`] runs, and its row count R.
#[derive(Clone, Copy)]
pub struct Kernel {
    rows: usize,
    run: Micro,
    level: Isa,
}

impl Kernel {
    /// Rows of A one call multiplies.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The instruction-set level of the kernel (at AVX-512 VNNI and AVX2 the byte GEMM
    /// also runs whole tiles handing their sums over in registers: `vnni::panels`, and
    /// `pairs::panels_avx2` on operands `widen.rs` widens).
    pub fn level(&self) -> Isa {
        self.level
    }

    /// Rows of C [`igemm_each`] hands its sink at a time: whole tiles, about a dozen rows
    /// (the AVX2 tile's three rows would make the output stage's calls four times as
    /// many).
    pub fn sink_rows(&self) -> usize {
        MAX_ROWS.div_ceil(self.rows.max(1)) * self.rows
    }
}

/// The micro-kernel for [`isa()`].
pub fn kernel() -> Kernel {
    kernel_for(isa())
}

/// The micro-kernel for `level`, capped at what the CPU has ([`detected`]): a level the
/// CPU lacks never selects a kernel built for it.
pub fn kernel_for(level: Isa) -> Kernel {
    match level.min(detected()) {
        Isa::Scalar => Kernel {
            rows: 4,
            run: tile_plain::<4>,
            level: Isa::Scalar,
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Kernel {
            rows: super::widen::ROWS256,
            run: super::widen::avx2,
            level: Isa::Avx2,
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => Kernel {
            rows: super::widen::ROWS512,
            run: super::widen::avx512,
            level: Isa::Avx512,
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => Kernel {
            rows: super::vnni::ROWS,
            run: super::vnni::vnni,
            level: Isa::Avx512Vnni,
        },
        #[cfg(not(target_arch = "x86_64"))]
        _ => kernel_for(Isa::Scalar),
    }
}

/// Whether a tile of `R` rows `pitch` bytes apart covers `groups` groups in `a`, and `out`
/// holds `R` rows of [`NR`] sums `ldo` apart: the check every micro-kernel makes before
/// reading or writing.
#[inline(always)]
pub(super) fn tile_fits<const R: usize>(
    a: &[u8],
    pitch: usize,
    groups: usize,
    out: &[i32],
    ldo: usize,
) -> bool {
    let span = |rows: usize, pitch: usize, last: usize| {
        rows.checked_sub(1)?.checked_mul(pitch)?.checked_add(last)
    };
    pitch >= groups * GROUP
        && ldo >= NR
        && span(R, pitch, groups * GROUP).is_some_and(|need| a.len() >= need)
        && span(R, ldo, NR).is_some_and(|need| out.len() >= need)
}

/// The panel size and count of `b` (B packed for `groups` groups) if a tile of `R` rows of
/// A `pitch` bytes apart in `a` covers those groups and `start` holds sixteen start values
/// a panel: the check the whole-tile kernel (`vnni::panels`) makes
/// before reading.
#[inline(always)]
pub(super) fn panels_fit<const R: usize>(
    a: &[u8],
    pitch: usize,
    b: &[u8],
    groups: usize,
    start: &[i32],
) -> Option<(usize, usize)> {
    let panel = groups.checked_add(1)?.checked_mul(GROUP_BYTES)?;
    let n = b.len() / panel;
    let need = (R - 1).checked_mul(pitch)?.checked_add(groups * GROUP)?;
    (b.len() == n * panel && start.len() == n * NR && pitch >= groups * GROUP && a.len() >= need)
        .then_some((panel, n))
}

/// The plain micro-kernel (also the reference of the vector ones).
fn tile_plain<const R: usize>(
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
    for r in 0..R {
        let o = &mut out[r * ldo..r * ldo + NR];
        let mut acc = *start;
        let row = &a[r * pitch..r * pitch + g * GROUP];
        for (quad, group) in row.chunks_exact(GROUP).zip(b.chunks_exact(GROUP_BYTES)) {
            for (s, w) in acc.iter_mut().zip(group.chunks_exact(GROUP)) {
                for (&x, &y) in quad.iter().zip(w) {
                    *s = s.wrapping_add(i32::from(x) * i32::from(y as i8));
                }
            }
        }
        o.copy_from_slice(&acc);
    }
}

/// A block of A's rows as bytes, row `r` at byte `r * row_bytes(k)` (written in place by
/// the im2col; the micro-kernels read a tile of their row count in place). Rows never set
/// are 0 after [`ABytes::new`], and whatever the buffer held after [`ABytes::reuse`]:
/// either way their sums are never stored, and the bytes past `k` meet B's zero padding.
pub struct ABytes {
    rows: usize,
    capacity: usize,
    pitch: usize,
    data: Vec<u8>,
}

impl ABytes {
    /// Room for `m` rows of depth `k` in tiles of `rows` (= [`Kernel::rows`]).
    pub fn new(m: usize, k: usize, rows: usize) -> Self {
        Self::reuse(m, k, rows, Vec::new())
    }

    /// [`ABytes::new`] in `buffer` (the last layer's, say: grown where short, never
    /// cleared or shortened, so a layer neither allocates nor zeroes it: a buffer cut to
    /// one layer's block would be zero-filled again for the next, larger one).
    pub fn reuse(m: usize, k: usize, rows: usize, mut buffer: Vec<u8>) -> Self {
        let rows = rows.max(1);
        let capacity = m.div_ceil(rows) * rows;
        let pitch = row_bytes(k);
        let len = capacity * pitch;
        if buffer.len() < len {
            buffer.resize(len, 0);
        }
        Self {
            rows,
            capacity,
            pitch,
            data: buffer,
        }
    }

    /// The buffer, for the next [`ABytes::reuse`].
    pub fn into_buffer(self) -> Vec<u8> {
        self.data
    }

    /// Bytes from one row to the next ([`row_bytes`]).
    pub fn pitch(&self) -> usize {
        self.pitch
    }

    /// The bytes from row `r` to the end of the block (a tile's rows in place).
    #[inline]
    pub fn from_row(&self, r: usize) -> &[u8] {
        r.checked_mul(self.pitch)
            .and_then(|at| self.data.get(at..))
            .unwrap_or_default()
    }

    /// Rows `0..m` as one slice (`m` pitches), or `None` past the block.
    #[inline]
    pub fn rows_mut(&mut self, m: usize) -> Option<&mut [u8]> {
        self.data.get_mut(..m.checked_mul(self.pitch)?)
    }

    /// Row `r` ([`row_bytes`] long: the first `k` bytes are the row, the rest are read
    /// against B's zeros), or `None` outside the block.
    #[inline]
    pub fn row_mut(&mut self, r: usize) -> Option<&mut [u8]> {
        let at = r.checked_mul(self.pitch)?;
        self.data.get_mut(at..at.checked_add(self.pitch)?)
    }
}

/// The largest row count of a micro-kernel.
const MAX_ROWS: usize = 12;

/// `C[r][j] = start[j] + sum_kk A[r][kk] * B[kk][j]` (wrapping) for the first `m` rows of
/// `a` and the `n` columns of `b` (packed by [`pack`] for `a`'s depth), into `c` with row
/// pitch `ldc`. Returns `None` if the sizes do not agree (nothing is then written).
#[allow(clippy::too_many_arguments)]
pub fn igemm(
    kernel: Kernel,
    m: usize,
    a: &ABytes,
    b: &[u8],
    start: &[i32],
    n: usize,
    c: &mut [i32],
    ldc: usize,
) -> Option<()> {
    if n > ldc || (m > 0 && c.len() < (m - 1) * ldc + n) {
        return None;
    }
    let mut tile = vec![0; kernel.sink_rows() * n];
    igemm_each(kernel, m, a, b, start, n, &mut tile, |row0, sums| {
        for (i, row) in sums.chunks_exact(n.max(1)).enumerate() {
            let at = (row0 + i) * ldc;
            c[at..at + n].copy_from_slice(row);
        }
    })
}

/// The rows of [`igemm`] a few tiles at a time: for each [`Kernel::sink_rows`] rows,
/// `sink(first_row, sums)` with `sums` those rows of C (row-major, pitch `n`; the last
/// rows past `m` left out), from `tile` (at least `kernel.sink_rows() * n` words,
/// a small buffer that stays in the first-level cache); `start` holds a start value per
/// column, whole panels ([`start_values`]). Returns `None` if the sizes do not agree
/// (`sink` is then never called).
#[allow(clippy::too_many_arguments)]
pub fn igemm_each(
    kernel: Kernel,
    m: usize,
    a: &ABytes,
    b: &[u8],
    start: &[i32],
    n: usize,
    tile: &mut [i32],
    mut sink: impl FnMut(usize, &[i32]),
) -> Option<()> {
    let r = kernel.rows;
    let g = a.pitch / GROUP;
    let panel = (g + 1) * GROUP_BYTES;
    let ok = a.rows == r
        && r <= MAX_ROWS
        && Some(b.len()) == n.div_ceil(NR).checked_mul(panel)
        && start.len() == n.div_ceil(NR) * NR
        && m <= a.capacity
        && tile.len() >= kernel.sink_rows() * n;
    if !ok {
        return None;
    }
    // The last panel's sums when it is not whole (the others go straight to `tile`, all
    // of the kernel's rows: `tile` holds them).
    let mut part = [0i32; MAX_ROWS * NR];
    let block = kernel.sink_rows();
    for row0 in (0..m).step_by(block) {
        let rows = block.min(m - row0);
        // Tile by tile into rows `sub..` of `tile` (a kernel writes all its rows, which
        // `tile` holds).
        for sub in (0..rows).step_by(r) {
            let a_tile = a.data.get((row0 + sub) * a.pitch..).unwrap_or_default();
            let out = &mut tile[sub * n..];
            for (q, (p, s)) in b
                .chunks_exact(panel)
                .zip(start.chunks_exact(NR))
                .enumerate()
            {
                let Ok(s) = <&[i32; NR]>::try_from(s) else {
                    continue;
                };
                let (col, groups) = (q * NR, &p[..g * GROUP_BYTES]);
                if col + NR <= n {
                    (kernel.run)(a_tile, a.pitch, groups, s, &mut out[col..], n);
                    continue;
                }
                (kernel.run)(a_tile, a.pitch, groups, s, &mut part, NR);
                let cols = n - col;
                for (i, got) in part.chunks_exact(NR).take(r.min(rows - sub)).enumerate() {
                    let at = i * n + col;
                    out[at..at + cols].copy_from_slice(&got[..cols]);
                }
            }
        }
        sink(row0, &tile[..rows * n]);
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
        /// Every micro-kernel gives the wrapping integer sums of a plain triple loop
        /// (start values included), operands at the extremes of `u8 x i8` included; the
        /// packing round-trips.
        #[test]
        fn igemm_quads_match_plain_sums(
            m in 0usize..30,
            k in 0usize..40,
            n in 1usize..40,
            seed in any::<u64>(),
            extreme in any::<bool>(),
            z in any::<i32>(),
        ) {
            let mut s = seed | 1;
            let mut next = || {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s
            };
            let av: Vec<u8> = (0..m * k)
                .map(|_| if extreme { [0, 255, 1, 128][(next() % 4) as usize] } else { next() as u8 })
                .collect();
            let bv: Vec<i32> = (0..k * n)
                .map(|_| if extreme { [-128, 127, 0, -1][(next() % 4) as usize] } else { i32::from(next() as i8) })
                .collect();
            let mut packed = vec![0; packed_len(k, n).unwrap()];
            pack(k, n, |kk, j| bv[kk * n + j], &mut packed).unwrap();
            let mut back = vec![0i32; k * n];
            unpack(k, n, &packed, |kk, j, v| back[kk * n + j] = i32::from(v)).unwrap();
            prop_assert_eq!(&back, &bv);
            let start = start_values(k, n, &packed, z).unwrap();
            let mut want = vec![0i32; m * n];
            for i in 0..m {
                for j in 0..n {
                    let col: i32 = (0..k).fold(0i32, |acc, kk| acc.wrapping_add(bv[kk * n + j]));
                    want[i * n + j] = (0..k).fold(col.wrapping_mul(z.wrapping_neg()), |acc, kk| {
                        acc.wrapping_add(i32::from(av[i * k + kk]) * bv[kk * n + j])
                    });
                }
            }
            for level in levels() {
                let kern = kernel_for(level);
                // A reused buffer full of garbage: the bytes past k must not matter.
                let mut a = ABytes::reuse(m, k, kern.rows(), vec![0xA5; 7]);
                for i in 0..m {
                    a.row_mut(i).unwrap()[..k].copy_from_slice(&av[i * k..(i + 1) * k]);
                }
                let ldc = n + 3;
                let mut c = vec![7i32; m * ldc];
                igemm(kern, m, &a, &packed, &start, n, &mut c, ldc).unwrap();
                for i in 0..m {
                    prop_assert_eq!(&c[i * ldc..i * ldc + n], &want[i * n..(i + 1) * n], "{:?}", level);
                }
            }
        }
    }

    #[test]
    fn quads_kernel_for_caps_the_level_at_the_cpu() {
        let cpu = detected();
        for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
            let want = kernel_for(level.min(cpu));
            let got = kernel_for(level);
            assert_eq!(got.rows(), want.rows(), "{level:?}");
            assert!(std::ptr::fn_addr_eq(got.run, want.run), "{level:?}");
        }
    }

    #[test]
    fn quads_refuse_bad_sizes_and_operands() {
        let mut packed = vec![0; packed_len(5, 2).unwrap()];
        assert_eq!(packed.len(), 3 * GROUP_BYTES);
        assert!(pack(5, 2, |_, _| 128, &mut packed).is_none());
        assert!(pack(5, 2, |_, _| -129, &mut packed).is_none());
        assert!(pack(5, 2, |_, _| 1, &mut packed[1..]).is_none());
        pack(5, 2, |_, _| -128, &mut packed).unwrap();
        assert!(unpack(5, 2, &packed[1..], |_, _, _| ()).is_none());
        assert!(start_values(5, 2, &packed[1..], 3).is_none());
        let start = start_values(5, 2, &packed, 3).unwrap();
        assert_eq!(&start[..3], &[1920, 1920, 0]);
        let kern = kernel();
        let a = ABytes::new(2, 5, kern.rows());
        let mut c = vec![0; 4];
        assert!(igemm(kern, 2, &a, &packed, &start, 2, &mut c, 2).is_some());
        assert_eq!(c, [1920; 4]);
        assert!(igemm(kern, 2, &a, &packed, &start, 2, &mut c[..3], 2).is_none());
        assert!(igemm(kern, 2, &a, &packed, &start, 3, &mut c, 2).is_none());
        assert!(igemm(kern, 2, &a, &packed, &start[1..], 2, &mut c, 2).is_none());
        let other = ABytes::new(2, 9, kern.rows());
        assert!(igemm(kern, 2, &other, &packed, &start, 2, &mut c, 2).is_none());
        assert!(igemm(kern, 3 * kern.rows(), &a, &packed, &start, 2, &mut c, 2).is_none());
    }
}
