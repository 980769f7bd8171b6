//! The float32 GEMM the convolution family runs on: B packed in panels, micro-kernels per
//! vector unit (the quantised kernels run on the integer GEMM, [`super::igemm`]).

use super::simd::{vectorized, Body};
use super::{clamp_nan, KernelError, Result};

/// The largest index touched by a strided `rows x cols` matrix, checked.
fn max_index(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1)
        .checked_mul(rs)?
        .checked_add((cols - 1).checked_mul(cs)?)
}

/// A strided read-only matrix view: element `(i, j)` is `data[i*rs + j*cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a, T = f32> {
    pub data: &'a [T],
    pub rs: usize,
    pub cs: usize,
}

/// A row-major mutable matrix view with row stride `rs` (column stride 1).
pub(crate) struct MatMut<'a, T = f32> {
    pub data: &'a mut [T],
    pub rs: usize,
}

/// Columns of one panel of a packed B (the device's GEMM panel width).
pub const NR: usize = 16;
/// Rows of A one micro-kernel call multiplies.
const MR: usize = 6;
/// Depth of one block of the product (B panel rows kept in L1 per pass); the deepest
/// product [`gemm_packed_rows`] takes.
pub(crate) const KC: usize = 256;
/// Rows of A packed per block.
const MC: usize = 72;

/// Floats of a `k x n` matrix B packed into panels: `ceil(n / NR)` panels of `k` rows of
/// [`NR`] values each (row `l` of panel `p` holds `B[l][p*NR .. p*NR + NR]`, zero beyond
/// column `n`). `None` if the size overflows.
pub fn packed_len(k: usize, n: usize) -> Option<usize> {
    n.div_ceil(NR).checked_mul(NR)?.checked_mul(k)
}

/// Packs `k x n` matrix `b` into panels ([`packed_len`] floats in `out`).
pub(crate) fn pack_b(k: usize, n: usize, b: Mat<'_>, out: &mut [f32]) -> Result<()> {
    let len = packed_len(k, n).ok_or(KernelError::TooLarge)?;
    if n > 0 && k > 0 && max_index(k, n, b.rs, b.cs).is_none_or(|i| i >= b.data.len()) {
        return Err(KernelError::TooLarge);
    }
    let out = out.get_mut(..len).ok_or(KernelError::TooLarge)?;
    for (p, panel) in out
        .chunks_exact_mut(NR * k.max(1))
        .enumerate()
        .take(n.div_ceil(NR))
    {
        let j0 = p * NR;
        let cols = NR.min(n - j0);
        for (l, row) in panel.chunks_exact_mut(NR).enumerate().take(k) {
            for (jj, v) in row.iter_mut().enumerate() {
                *v = if jj < cols {
                    b.data[l * b.rs + (j0 + jj) * b.cs]
                } else {
                    0.0
                };
            }
        }
    }
    Ok(())
}

/// A `k x n` matrix B packed into panels ([`pack_b`]).
#[derive(Clone, Copy)]
pub(crate) struct Packed<'a> {
    /// The panels.
    pub data: &'a [f32],
    /// Rows of B.
    pub k: usize,
    /// Columns of B.
    pub n: usize,
}

/// `C += A * B` in float32 with `B` packed into panels: A `m x k`, C `m x n` row-major with
/// row stride `rsc`; with `bias`, `C = bias + A * B` instead (C's old contents unread; an
/// empty bias is zeros), added to each row in the micro-kernel's store rather than in a
/// pass of its own. With `clamp` `(lo, hi)`, each finished sum is clamped as
/// [`Activation::apply`](super::Activation::apply) does (NaN kept), in the same store:
/// a fused activation without a pass over C of its own. Every float32 GEMM runs here (an
/// unpacked B is packed first), so a product is bit-identical whether its B came packed or
/// not.
pub(crate) fn gemm_packed(
    m: usize,
    a: Mat<'_>,
    b: Packed<'_>,
    c: MatMut<'_>,
    bias: Option<&[f32]>,
    clamp: Option<(f32, f32)>,
) -> Result<()> {
    if m == 0 || b.n == 0 {
        return Ok(());
    }
    let fits = max_index(m, b.k, a.rs, a.cs).is_some_and(|i| i < a.data.len());
    if !fits {
        return Err(KernelError::TooLarge);
    }
    run_blocked(kernels(), m, ASrc::Mat(a), b, c, bias, clamp)
}

/// Checks B, C and the bias against `m` rows and runs [`Blocked`] with `kernels` (A's
/// rows were checked by the caller).
fn run_blocked(
    kernels: Kernels,
    m: usize,
    a: ASrc<'_>,
    b: Packed<'_>,
    c: MatMut<'_>,
    bias: Option<&[f32]>,
    clamp: Option<(f32, f32)>,
) -> Result<()> {
    let Packed { data: bp, k, n } = b;
    let MatMut { data: c, rs: rsc } = c;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if bias.is_some_and(|b| !b.is_empty() && b.len() < n) {
        return Err(KernelError::TooLarge);
    }
    if k == 0 || packed_len(k, n).is_none_or(|l| l > bp.len()) {
        return Err(KernelError::TooLarge);
    }
    match max_index(m, n, rsc, 1) {
        Some(i) if i < c.len() => {}
        _ => return Err(KernelError::TooLarge),
    }
    vectorized(Blocked {
        kernels,
        m,
        a,
        b,
        c,
        rsc,
        bias,
        clamp,
    });
    Ok(())
}

/// Rows of A read in segments: row `i`'s element `l` is
/// `rows[i].0[(l / seg) * rows[i].1 + l % seg]` (a base slice and a pitch per row), e.g. a
/// convolution window read in place in its image, one segment per filter row.
#[derive(Clone, Copy)]
pub(crate) struct SegRows<'a> {
    /// Each row's base slice and segment pitch.
    pub rows: &'a [(&'a [f32], usize)],
    /// Floats per segment.
    pub seg: usize,
}

/// `C = bias + A * B` as [`gemm_packed`] with A's rows in segments ([`SegRows`]); the
/// depth `k` must be one block (at most [`KC`]) and a whole number of segments. The sums
/// run in the same order as for the same rows given contiguous, so the bits are the same.
pub(crate) fn gemm_packed_rows(
    a: SegRows<'_>,
    b: Packed<'_>,
    c: MatMut<'_>,
    bias: Option<&[f32]>,
    clamp: Option<(f32, f32)>,
) -> Result<()> {
    let (k, seg, m) = (b.k, a.seg, a.rows.len());
    if m == 0 || b.n == 0 {
        return Ok(());
    }
    if k == 0 || k > KC || seg == 0 || !k.is_multiple_of(seg) {
        return Err(KernelError::TooLarge);
    }
    // Each row's last segment ends inside its slice.
    let last = k / seg - 1;
    let short = a.rows.iter().any(|&(row, pitch)| {
        last.checked_mul(pitch)
            .and_then(|at| at.checked_add(seg))
            .is_none_or(|end| end > row.len())
    });
    if short {
        return Err(KernelError::TooLarge);
    }
    run_blocked(kernels(), m, ASrc::Seg(a), b, c, bias, clamp)
}

/// A's rows as [`Blocked`] reads them.
#[derive(Clone, Copy)]
enum ASrc<'a> {
    /// A strided matrix.
    Mat(Mat<'a>),
    /// Rows in segments, the depth one block.
    Seg(SegRows<'a>),
}

/// The blocked loops of [`gemm_packed`] on checked views; built for the widest vector
/// unit, so packing A and adding the micro-kernels' sums into C use it too.
struct Blocked<'a> {
    kernels: Kernels,
    m: usize,
    a: ASrc<'a>,
    b: Packed<'a>,
    c: &'a mut [f32],
    rsc: usize,
    bias: Option<&'a [f32]>,
    clamp: Option<(f32, f32)>,
}

impl Body for Blocked<'_> {
    type Out = ();

    #[inline(always)]
    fn run(self) {
        let Blocked {
            kernels,
            m,
            a,
            b,
            c,
            rsc,
            bias,
            clamp,
        } = self;
        let Packed { data: bp, k, n } = b;
        let Kernels {
            micro,
            wide,
            tall,
            few,
        } = kernels;
        let zeros = vec![0.0f32; KC.min(k)];
        // A strided A (not row-contiguous) is copied row by row first; a contiguous one is
        // read where it is (as are segmented rows).
        let strided = match a {
            ASrc::Mat(a) => a.cs != 1,
            ASrc::Seg(_) => false,
        };
        let mut apack = if strided {
            vec![0.0f32; MC * KC.min(k)]
        } else {
            Vec::new()
        };
        let panels = n.div_ceil(NR);
        let mut k0 = 0;
        while k0 < k {
            let kc = KC.min(k - k0);
            // The last block of the depth finishes the sums: its store clamps them.
            let clamp = clamp.filter(|_| k0 + kc == k);
            let mut i0 = 0;
            while i0 < m {
                let mc = MC.min(m - i0);
                if let (true, ASrc::Mat(a)) = (strided, a) {
                    for (r, row) in apack.chunks_exact_mut(kc).take(mc).enumerate() {
                        let at = (i0 + r) * a.rs + k0 * a.cs;
                        let src = a.data[at..].iter().step_by(a.cs);
                        row.iter_mut().zip(src).for_each(|(v, &x)| *v = x);
                    }
                }
                // Row `i` of A's block: its base and segment pitch (a plain row is one
                // segment of `kc`).
                let row = |i: usize| -> (&[f32], usize) {
                    match a {
                        ASrc::Seg(s) => s.rows[i],
                        ASrc::Mat(_) if strided => (&apack[(i - i0) * kc..][..kc], 0),
                        ASrc::Mat(a) => (&a.data[i * a.rs + k0..][..kc], 0),
                    }
                };
                let seg = match a {
                    ASrc::Seg(s) => s.seg,
                    ASrc::Mat(_) => kc,
                };
                // The first block of the depth stores bias + sums; later ones add.
                let start = |j0: usize, cols: usize| -> Option<[f32; 2 * NR]> {
                    let b = bias.filter(|_| k0 == 0)?;
                    let mut z = [0.0f32; 2 * NR];
                    if !b.is_empty() {
                        z[..cols].copy_from_slice(&b[j0..j0 + cols]);
                    }
                    Some(z)
                };
                // A's rows for the tile at `r0` (zeros past `rows`).
                let a_rows = |r0: usize, rows: usize| -> Rows<'_, MR> {
                    tile_rows(&zeros[..kc], seg, rows, |r| row(i0 + r0 + r))
                };
                // The rows past the last whole six-row tile run across several panels at
                // once where the CPU has a kernel for it (AVX2); else as a part-filled tile.
                let tail = few.map_or(0, |_| mc % MR);
                let body = mc - tail;
                let mut p = 0;
                while p < panels {
                    let panel = &bp[(p * k + k0) * NR..][..kc * NR];
                    let j0 = p * NR;
                    // Two panels at once where the CPU has the registers for it.
                    let pair = wide.filter(|_| p + 1 < panels);
                    let cols = (if pair.is_some() { 2 * NR } else { NR }).min(n - j0);
                    let z = start(j0, cols);
                    let mut r0 = 0;
                    while r0 < body {
                        let c = &mut c[(i0 + r0) * rsc + j0..];
                        // Twelve rows at a time where the CPU has the registers (twice
                        // the sums in flight, each A value feeding twice as many).
                        if let Some((one, two)) = tall.filter(|_| body - r0 >= TR) {
                            let a = tile_rows(&zeros[..kc], seg, TR, |r| row(i0 + r0 + r));
                            let start = z.as_ref().map(|z| &z[..]);
                            match pair {
                                Some(_) => two(TallTile {
                                    a,
                                    b: [panel, &bp[((p + 1) * k + k0) * NR..][..kc * NR]],
                                    c,
                                    rsc,
                                    cols,
                                    start,
                                    clamp,
                                }),
                                None => one(TallTile {
                                    a,
                                    b: [panel],
                                    c,
                                    rsc,
                                    cols,
                                    start,
                                    clamp,
                                }),
                            }
                            r0 += TR;
                            continue;
                        }
                        let (at, rows) = (r0, MR.min(body - r0));
                        r0 += MR;
                        match pair {
                            Some(wide) => wide(WideTile {
                                a: a_rows(at, rows),
                                b: [panel, &bp[((p + 1) * k + k0) * NR..][..kc * NR]],
                                c,
                                rsc,
                                rows,
                                cols,
                                start: z.as_ref(),
                                clamp,
                            }),
                            None => micro(Tile {
                                a: a_rows(at, rows),
                                b: panel,
                                c,
                                rsc,
                                rows,
                                cols,
                                start: z.as_ref().map(|z| &z[..NR]),
                                clamp,
                            }),
                        }
                    }
                    p += if pair.is_some() { 2 } else { 1 };
                }
                let mut p = 0;
                while let Some(few) = few.filter(|_| tail > 0 && p < panels) {
                    let q = (FEW_SUMS / tail).min(panels - p);
                    let j0 = p * NR;
                    let cols = (q * NR).min(n - j0);
                    let b = std::array::from_fn(|t| {
                        if t < q {
                            &bp[((p + t) * k + k0) * NR..][..kc * NR]
                        } else {
                            &[][..]
                        }
                    });
                    let z = bias.filter(|_| k0 == 0).map(|b| {
                        let mut z = [0.0f32; FEW_SUMS * NR];
                        if !b.is_empty() {
                            z[..cols].copy_from_slice(&b[j0..j0 + cols]);
                        }
                        z
                    });
                    few(FewTile {
                        a: a_rows(body, tail),
                        rows: tail,
                        b,
                        panels: q,
                        c: &mut c[(i0 + body) * rsc + j0..],
                        rsc,
                        cols,
                        start: z.as_ref().map(|z| &z[..]),
                        clamp,
                    });
                    p += q;
                }
                i0 += mc;
            }
            k0 += kc;
        }
    }
}

/// [`gemm_packed`] with an unpacked `B` (`k x n`): packs B first.
// The shape and the bias and clamp of `gemm_packed`: a struct would only rename them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_f32(
    m: usize,
    k: usize,
    n: usize,
    a: Mat<'_>,
    b: Mat<'_>,
    c: MatMut<'_>,
    bias: Option<&[f32]>,
    clamp: Option<(f32, f32)>,
) -> Result<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    let mut bp = vec![0.0f32; packed_len(k, n).ok_or(KernelError::TooLarge)?];
    pack_b(k, n, b, &mut bp)?;
    gemm_packed(m, a, Packed { data: &bp, k, n }, c, bias, clamp)
}

/// The `R` rows of a tile whose row `r` is `row(r)` (base and segment pitch), rows from
/// `rows` on reading `zeros`; in a plain loop: built with `array::from_fn`, the row
/// lookups were calls.
#[inline(always)]
fn tile_rows<'a, const R: usize>(
    zeros: &'a [f32],
    seg: usize,
    rows: usize,
    row: impl Fn(usize) -> (&'a [f32], usize),
) -> Rows<'a, R> {
    let mut t = Rows {
        base: [zeros; R],
        pitch: [0; R],
        seg,
    };
    for r in 0..rows.min(R) {
        (t.base[r], t.pitch[r]) = row(r);
    }
    t
}

/// A tile's `R` rows of A, each read in segments of `seg` floats: row `r`'s element `l`
/// is `base[r][(l / seg) * pitch[r] + l % seg]` (a contiguous row is one segment).
pub(crate) struct Rows<'a, const R: usize> {
    base: [&'a [f32]; R],
    pitch: [usize; R],
    seg: usize,
}

impl<'a, const R: usize> Rows<'a, R> {
    /// The `S` rows from row `at` on (`at + S <= R`).
    #[inline(always)]
    fn part<const S: usize>(&self, at: usize) -> Rows<'a, S> {
        Rows {
            base: std::array::from_fn(|r| self.base[at + r]),
            pitch: std::array::from_fn(|r| self.pitch[at + r]),
            seg: self.seg,
        }
    }
}

/// One `MR x NR` tile of `C += A * B`: `a` holds A's `MR` rows (each `kc` long; rows past
/// `rows` are zeros), `b` a B panel (`kc` rows of [`NR`]), `c` the tile's first row of C
/// (row stride `rsc`); only `rows x cols` of C are written: `C = start + sums` with a
/// `start` row, else `C += sums`; then, with `clamp`, clamped (the depth's last block).
pub(crate) struct Tile<'a> {
    a: Rows<'a, MR>,
    b: &'a [f32],
    c: &'a mut [f32],
    rsc: usize,
    rows: usize,
    cols: usize,
    start: Option<&'a [f32]>,
    clamp: Option<(f32, f32)>,
}

/// A micro-kernel: one [`Tile`].
type Micro = fn(Tile<'_>);

/// One `MR x 2NR` tile over two adjacent B panels (`b`): twice the sums per A value
/// loaded; otherwise as [`Tile`] (`cols` up to `2 * NR`). Each sum runs in the same order
/// as in a [`Tile`], so the results are the same bits.
pub(crate) struct WideTile<'a> {
    a: Rows<'a, MR>,
    b: [&'a [f32]; 2],
    c: &'a mut [f32],
    rsc: usize,
    rows: usize,
    cols: usize,
    start: Option<&'a [f32; 2 * NR]>,
    clamp: Option<(f32, f32)>,
}

/// A wide micro-kernel: one [`WideTile`].
type Wide = fn(WideTile<'_>);

/// Rows of a [`TallTile`].
const TR: usize = 12;

/// One full `TR x (P * NR)` tile over `P` adjacent B panels (one or two): twelve
/// independent sums per column in flight, where a six-row tile over one panel waits on the
/// multiply-add latency, and each A value loaded feeds `P` of them. Otherwise as [`Tile`]
/// (every row present, `cols` up to `P * NR`); each sum runs in the same order, so the
/// results are the same bits.
pub(crate) struct TallTile<'a, const P: usize> {
    a: Rows<'a, TR>,
    b: [&'a [f32]; P],
    c: &'a mut [f32],
    rsc: usize,
    cols: usize,
    start: Option<&'a [f32]>,
    clamp: Option<(f32, f32)>,
}

/// A tall micro-kernel over one panel: one [`TallTile`].
type Tall = fn(TallTile<'_, 1>);
/// A tall micro-kernel over two panels: one [`TallTile`].
type TallWide = fn(TallTile<'_, 2>);

/// Panels times rows of a [`FewTile`]: its sums' registers in pairs (AVX2's six-row tile
/// has six rows of one panel).
const FEW_SUMS: usize = 6;

/// The rows of a block past its last whole six-row tile (`rows`, fewer than [`MR`]) over
/// `panels` adjacent B panels (`b`, up to `FEW_SUMS / rows`; the others empty): the
/// registers a six-row tile spends on its zero rows hold more panels instead (a layer of
/// one output pixel ran one row in a six-row tile). `cols` (up to `panels * NR`) columns
/// of C from `c` written, `start` holding as many; otherwise as [`Tile`], each sum in the
/// same order, so the results are the same bits.
pub(crate) struct FewTile<'a> {
    a: Rows<'a, MR>,
    rows: usize,
    b: [&'a [f32]; FEW_SUMS],
    panels: usize,
    c: &'a mut [f32],
    rsc: usize,
    cols: usize,
    start: Option<&'a [f32]>,
    clamp: Option<(f32, f32)>,
}

/// A few-row micro-kernel: one [`FewTile`].
type Few = fn(FewTile<'_>);

// The prologue (C = start, A's rows sliced) is written out in both bodies: shared through
// an inlined function, the models ran about 5% slower.
macro_rules! wide_body {
    ($t:expr, $fma:expr) => {{
        let WideTile {
            a,
            b: [b0, b1],
            c,
            rsc,
            rows,
            cols,
            start,
            clamp,
        } = $t;
        let kc = b0.len() / NR;
        if let Some(z) = start {
            for r in 0..rows {
                for (d, &z) in c[r * rsc..][..cols].iter_mut().zip(z) {
                    *d = z;
                }
            }
        }
        let Rows { base, pitch, seg } = a;
        let b1 = &b1[..kc * NR];
        // Two accumulator blocks, each indexed only by constants once unrolled, so both
        // stay in registers.
        let mut lo = [[0.0f32; NR]; MR];
        let mut hi = [[0.0f32; NR]; MR];
        let step = seg * NR;
        for (s, (b0, b1)) in b0.chunks_exact(step).zip(b1.chunks_exact(step)).enumerate() {
            // The six rows' segments, each sliced to `seg` so the loop needs no bounds checks.
            let [a0, a1, a2, a3, a4, a5] = base;
            let [p0, p1, p2, p3, p4, p5] = pitch;
            let (a0, a1, a2) = (
                &a0[s * p0..][..seg],
                &a1[s * p1..][..seg],
                &a2[s * p2..][..seg],
            );
            let (a3, a4, a5) = (
                &a3[s * p3..][..seg],
                &a4[s * p4..][..seg],
                &a5[s * p5..][..seg],
            );
            for (l, (r0, r1)) in b0.chunks_exact(NR).zip(b1.chunks_exact(NR)).enumerate() {
                let r0: &[f32; NR] = r0.try_into().unwrap_or(&[0.0; NR]);
                let r1: &[f32; NR] = r1.try_into().unwrap_or(&[0.0; NR]);
                let col = [a0[l], a1[l], a2[l], a3[l], a4[l], a5[l]];
                for ((lo_r, hi_r), &x) in lo.iter_mut().zip(hi.iter_mut()).zip(&col) {
                    for (s, &y) in lo_r.iter_mut().zip(r0) {
                        *s = $fma(x, y, *s);
                    }
                    for (s, &y) in hi_r.iter_mut().zip(r1) {
                        *s = $fma(x, y, *s);
                    }
                }
            }
        }
        let left = cols.min(NR);
        for r in 0..rows {
            let row = &mut c[r * rsc..][..cols];
            let (d_lo, d_hi) = row.split_at_mut(left);
            crate::kernels::gemm::add_sums(d_lo, &lo[r], clamp);
            crate::kernels::gemm::add_sums(d_hi, &hi[r], clamp);
        }
    }};
}

macro_rules! micro_body {
    ($t:expr, $fma:expr) => {{
        let Tile {
            a,
            b,
            c,
            rsc,
            rows,
            cols,
            start,
            clamp,
        } = $t;
        // C = start + sums is C = start, then C += sums (the same one addition).
        if let Some(z) = start {
            for r in 0..rows {
                for (d, &z) in c[r * rsc..][..cols].iter_mut().zip(z) {
                    *d = z;
                }
            }
        }
        let Rows { base, pitch, seg } = a;
        let mut acc = [[0.0f32; NR]; MR];
        for (s, b) in b.chunks_exact(seg * NR).enumerate() {
            // The six rows' segments, each sliced to `seg` so the loop needs no bounds checks.
            let [a0, a1, a2, a3, a4, a5] = base;
            let [p0, p1, p2, p3, p4, p5] = pitch;
            let (a0, a1, a2) = (
                &a0[s * p0..][..seg],
                &a1[s * p1..][..seg],
                &a2[s * p2..][..seg],
            );
            let (a3, a4, a5) = (
                &a3[s * p3..][..seg],
                &a4[s * p4..][..seg],
                &a5[s * p5..][..seg],
            );
            for (l, row) in b.chunks_exact(NR).enumerate() {
                let row: &[f32; NR] = row.try_into().unwrap_or(&[0.0; NR]);
                let col = [a0[l], a1[l], a2[l], a3[l], a4[l], a5[l]];
                for (acc_r, &x) in acc.iter_mut().zip(&col) {
                    for (s, &y) in acc_r.iter_mut().zip(row) {
                        *s = $fma(x, y, *s);
                    }
                }
            }
        }
        for (r, sums) in acc.iter().enumerate().take(rows) {
            crate::kernels::gemm::add_sums(&mut c[r * rsc..][..cols], sums, clamp);
        }
    }};
}

/// `d += sums` element by element (as far as the shorter goes), then each result clamped
/// to `clamp` as [`clamp_nan`] does: two loops the compiler vectorises (one loop doing
/// both took twice the instructions in the AVX2 build, callgrind).
#[inline(always)]
fn add_sums(d: &mut [f32], sums: &[f32], clamp: Option<(f32, f32)>) {
    d.iter_mut().zip(sums).for_each(|(d, &v)| *d += v);
    if let Some((lo, hi)) = clamp {
        let n = d.len().min(sums.len());
        d[..n].iter_mut().for_each(|d| *d = clamp_nan(*d, lo, hi));
    }
}

fn micro_plain(t: Tile<'_>) {
    micro_body!(t, |x: f32, y: f32, s: f32| x * y + s)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{FewTile, Rows, TallTile, Tile, WideTile, FEW_SUMS, MR, NR, TR};
    use std::arch::x86_64::*;

    /// [`Tile`] with AVX2 intrinsics: the twelve accumulators (six rows of two 8-lane
    /// halves) are registers, and the store adds the start (or C), clamps and writes in
    /// one pass with masked loads and stores for a part-filled panel (the plain-Rust
    /// body's store, clamp included, ran scalar). A panel of at most 8 columns multiplies
    /// its first half only (its second half's sums were never stored).
    #[target_feature(enable = "avx2,fma")]
    fn tile_avx2(t: Tile<'_>) {
        let Tile {
            a,
            b,
            c,
            rsc,
            rows,
            cols,
            start,
            clamp,
        } = t;
        let kc = b.len() / NR;
        if a.seg == 0 || !kc.is_multiple_of(a.seg) {
            return;
        }
        let cols = cols.min(NR);
        let start = start.map(|z| &z[..cols]);
        let rows = rows.min(MR);
        if cols <= 8 {
            let acc = sums_avx2::<MR, 1>(&a, b);
            store_avx2(&acc[..rows], c, rsc, cols, start, clamp);
        } else {
            let acc = sums_avx2::<MR, 2>(&a, b);
            store_avx2(&acc[..rows], c, rsc, cols, start, clamp);
        }
    }

    /// [`TallTile`] over one panel with AVX2 intrinsics: a panel of at most 8 columns (a
    /// layer's last) as twelve rows of its first half, the twelve accumulators of
    /// [`tile_avx2`] (which multiplied both halves); a wider one as two six-row tiles.
    #[target_feature(enable = "avx2,fma")]
    fn tall_avx2(t: TallTile<'_, 1>) {
        let TallTile {
            a,
            b: [b],
            c,
            rsc,
            cols,
            start,
            clamp,
        } = t;
        let kc = b.len() / NR;
        if a.seg == 0 || !kc.is_multiple_of(a.seg) {
            return;
        }
        let cols = cols.min(NR);
        let start = start.map(|z| &z[..cols]);
        if cols <= 8 {
            let acc = sums_avx2::<TR, 1>(&a, b);
            store_avx2(&acc, c, rsc, cols, start, clamp);
        } else {
            for half in 0..TR / MR {
                let acc = sums_avx2::<MR, 2>(&a.part::<MR>(half * MR), b);
                let c = &mut c[half * MR * rsc..];
                store_avx2(&acc, c, rsc, cols, start, clamp);
            }
        }
    }

    /// [`FewTile`] with AVX2 intrinsics: one to five rows over as many panels as twelve
    /// accumulators hold (six, three, two, one, one).
    #[target_feature(enable = "avx2,fma")]
    fn few_avx2(t: FewTile<'_>) {
        let kc = t.b[0].len() / NR;
        if t.a.seg == 0 || !kc.is_multiple_of(t.a.seg) || t.panels * t.rows > FEW_SUMS {
            return;
        }
        match (t.rows, t.panels) {
            (1, 6) => few_run::<1, 6>(t),
            (1, 5) => few_run::<1, 5>(t),
            (1, 4) => few_run::<1, 4>(t),
            (1, 3) => few_run::<1, 3>(t),
            (1, 2) => few_run::<1, 2>(t),
            (1, 1) => few_run::<1, 1>(t),
            (2, 3) => few_run::<2, 3>(t),
            (2, 2) => few_run::<2, 2>(t),
            (2, 1) => few_run::<2, 1>(t),
            (3, 2) => few_run::<3, 2>(t),
            (3, 1) => few_run::<3, 1>(t),
            (4, 1) => few_run::<4, 1>(t),
            (5, 1) => few_run::<5, 1>(t),
            _ => {}
        }
    }

    /// [`few_avx2`] for `R` rows over `P` panels.
    // `l` indexes R rows' segments at once, not one slice.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn few_run<const R: usize, const P: usize>(t: FewTile<'_>) {
        let FewTile {
            a,
            b,
            c,
            rsc,
            cols,
            start,
            clamp,
            ..
        } = t;
        let Rows { base, pitch, seg } = a.part::<R>(0);
        let kc = b[0].len() / NR;
        let b: [&[f32]; P] = std::array::from_fn(|q| &b[q][..kc * NR]);
        let mut acc = [[[_mm256_setzero_ps(); 2]; R]; P];
        for s in 0..kc / seg {
            // Each row's segment and each panel's rows for it, bounds-checked once here.
            let mut rows_s = [std::ptr::null::<f32>(); R];
            for r in 0..R {
                rows_s[r] = base[r][s * pitch[r]..][..seg].as_ptr();
            }
            let panels = b.map(|b| b[s * seg * NR..][..seg * NR].as_ptr());
            for l in 0..seg {
                let x: [__m256; R] = std::array::from_fn(|r| {
                    // SAFETY: `rows_s[r]` starts `seg` floats (checked above), `l < seg`.
                    _mm256_set1_ps(unsafe { *rows_s[r].add(l) })
                });
                for q in 0..P {
                    for h in 0..2 {
                        // `panels[q]` starts `seg * NR` floats (checked above) and
                        // `l < seg`: 8 floats from `l * NR + h * 8`, h < 2, inside them.
                        // SAFETY: so the load stays inside the panel's rows.
                        let bv = unsafe { _mm256_loadu_ps(panels[q].add(l * NR + h * 8)) };
                        for r in 0..R {
                            acc[q][r][h] = _mm256_fmadd_ps(x[r], bv, acc[q][r][h]);
                        }
                    }
                }
            }
        }
        for (q, acc) in acc.iter().enumerate() {
            let cols = cols.saturating_sub(q * NR).min(NR);
            if cols == 0 {
                break;
            }
            let start = start.map(|z| &z[q * NR..][..cols]);
            store_avx2(acc, &mut c[q * NR..], rsc, cols, start, clamp);
        }
    }

    /// The sums of `R` rows of A (`a`) times the first `H` 8-lane halves of a B panel
    /// (`b`, `kc` rows of [`NR`], `kc` a whole number of `a`'s segments): each an
    /// accumulator register, zero then one fused multiply-add per step of the depth.
    // `l` indexes R rows' segments at once, not one slice.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn sums_avx2<const R: usize, const H: usize>(a: &Rows<'_, R>, b: &[f32]) -> [[__m256; H]; R] {
        // At most a panel's two halves (the loads below read a step's row up to `H * 8`).
        const { assert!(H <= 2) };
        let Rows { base, pitch, seg } = *a;
        let mut acc = [[_mm256_setzero_ps(); H]; R];
        for (s, bs) in b.chunks_exact(seg * NR).enumerate() {
            // Each row's segment, bounds-checked once here; the step loop reads through
            // the pointers (as the AVX-512 tall kernel does).
            let mut rows_s = [std::ptr::null::<f32>(); R];
            for r in 0..R {
                rows_s[r] = base[r][s * pitch[r]..][..seg].as_ptr();
            }
            let panel = bs.as_ptr();
            for l in 0..seg {
                let bv: [__m256; H] = std::array::from_fn(|q| {
                    // `bs` is `seg * NR` floats and `l < seg`: 8 floats from
                    // `l * NR + q * 8`, q < H <= 2, lie inside the step's NR = 16.
                    // SAFETY: so the load stays inside `bs`.
                    unsafe { _mm256_loadu_ps(panel.add(l * NR + q * 8)) }
                });
                for r in 0..R {
                    // SAFETY: `rows_s[r]` starts `seg` floats (checked above), `l < seg`.
                    let x = _mm256_set1_ps(unsafe { *rows_s[r].add(l) });
                    for q in 0..H {
                        acc[r][q] = _mm256_fmadd_ps(x, bv[q], acc[r][q]);
                    }
                }
            }
        }
        acc
    }

    /// Stores a tile's sums (`acc`, a row each, `H` 8-lane halves) into the `cols`
    /// (at most `H * 8`) first columns of C's rows from `c` (row stride `rsc`):
    /// `C = start + sums`, else `C += sums`, then clamped with `clamp`; one pass, masked
    /// loads and stores for a part-filled half.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn store_avx2<const H: usize>(
        acc: &[[__m256; H]],
        c: &mut [f32],
        rsc: usize,
        cols: usize,
        start: Option<&[f32]>,
        clamp: Option<(f32, f32)>,
    ) {
        let clamp = clamp.map(|(lo, hi)| (_mm256_set1_ps(lo), _mm256_set1_ps(hi)));
        if cols == H * 8 {
            // Whole halves: each row checked once, then unmasked loads and stores.
            for (r, sums) in acc.iter().enumerate() {
                let row = &mut c[r * rsc..][..H * 8];
                let from = start.map_or(row.as_ptr(), |z| z[..H * 8].as_ptr());
                for (q, &sums) in sums.iter().enumerate() {
                    // `from` is H * 8 floats (a row of C or `start`, sliced above).
                    // SAFETY: so 8 from `q * 8`, q < H, are inside it.
                    let before = unsafe { _mm256_loadu_ps(from.add(q * 8)) };
                    let mut v = _mm256_add_ps(before, sums);
                    if let Some((lo, hi)) = clamp {
                        // Max and min return their second operand when one is NaN: NaN kept.
                        v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
                    }
                    // SAFETY: `row` is H * 8 floats: 8 from `q * 8`, q < H.
                    unsafe { _mm256_storeu_ps(row.as_mut_ptr().add(q * 8), v) };
                }
            }
            return;
        }
        let iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        for (r, sums) in acc.iter().enumerate() {
            let row = &mut c[r * rsc..][..cols];
            for (q, &sums) in sums.iter().enumerate() {
                let lanes = cols.saturating_sub(q * 8).min(8);
                if lanes == 0 {
                    break;
                }
                let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes as i32), iota);
                let dst = &mut row[q * 8..][..lanes];
                // C = start + sums, else C += sums (the same one addition as the plain
                // body's).
                let from = match start {
                    Some(z) => z[q * 8..][..lanes].as_ptr(),
                    None => dst.as_ptr(),
                };
                // `from` is `lanes` floats (of a row of C or of start, sliced above).
                // SAFETY: so is the load, `mask` selecting the lanes below `lanes` only.
                let before = unsafe {
                    if lanes == 8 {
                        _mm256_loadu_ps(from)
                    } else {
                        _mm256_maskload_ps(from, mask)
                    }
                };
                let mut v = _mm256_add_ps(before, sums);
                if let Some((lo, hi)) = clamp {
                    // Max and min return their second operand when one is NaN: NaN kept.
                    v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
                }
                // SAFETY: `dst` is `lanes` floats; only the lanes below `lanes` are written.
                unsafe {
                    if lanes == 8 {
                        _mm256_storeu_ps(dst.as_mut_ptr(), v)
                    } else {
                        _mm256_maskstore_ps(dst.as_mut_ptr(), mask, v)
                    }
                }
            }
        }
    }

    #[target_feature(enable = "avx512f,fma")]
    pub(super) fn micro_avx512(t: Tile<'_>) {
        micro_body!(t, |x: f32, y: f32, s: f32| x.mul_add(y, s))
    }

    #[target_feature(enable = "avx512f,fma")]
    pub(super) fn wide_avx512(t: WideTile<'_>) {
        wide_body!(t, |x: f32, y: f32, s: f32| x.mul_add(y, s))
    }

    /// [`TallTile`] with AVX-512 intrinsics: the accumulators (12 or 24) are registers
    /// (in plain Rust the compiler kept them on the stack).
    // `l` indexes twelve rows' segments at once, not one slice.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx512f,fma")]
    fn tall_avx512<const P: usize>(t: TallTile<'_, P>) {
        let TallTile {
            a,
            b,
            c,
            rsc,
            cols,
            start,
            clamp,
        } = t;
        let Rows { base, pitch, seg } = a;
        let kc = b[0].len() / NR;
        if seg == 0 || !kc.is_multiple_of(seg) || b.iter().any(|b| b.len() < kc * NR) {
            return;
        }
        let mut acc = [[_mm512_setzero_ps(); P]; TR];
        for s in 0..kc / seg {
            // Each row's segment and each panel's rows for it, bounds-checked once here:
            // the step loop below reads through their pointers (checks and slice
            // lengths kept in registers inside it doubled its instructions).
            let mut rows = [std::ptr::null::<f32>(); TR];
            for r in 0..TR {
                rows[r] = base[r][s * pitch[r]..][..seg].as_ptr();
            }
            let panels = b.map(|b| b[s * seg * NR..][..seg * NR].as_ptr());
            for l in 0..seg {
                let mut bv = [_mm512_setzero_ps(); P];
                for (v, panel) in bv.iter_mut().zip(panels) {
                    // `panel` starts `seg * NR` floats (checked above) and `l < seg`.
                    // SAFETY: so NR = 16 floats from `l * NR`, one unaligned load.
                    *v = unsafe { _mm512_loadu_ps(panel.add(l * NR)) };
                }
                for r in 0..TR {
                    // SAFETY: `rows[r]` starts `seg` floats (checked above), `l < seg`.
                    let x = _mm512_set1_ps(unsafe { *rows[r].add(l) });
                    for q in 0..P {
                        acc[r][q] = _mm512_fmadd_ps(x, bv[q], acc[r][q]);
                    }
                }
            }
        }
        let cols = cols.min(P * NR);
        let start = start.map(|z| &z[..cols]);
        let clamp = clamp.map(|(lo, hi)| (_mm512_set1_ps(lo), _mm512_set1_ps(hi)));
        for (r, sums) in acc.iter().enumerate() {
            let row = &mut c[r * rsc..][..cols];
            for (q, &sums) in sums.iter().enumerate() {
                let lanes = cols.saturating_sub(q * NR).min(NR);
                if lanes == 0 {
                    break;
                }
                let mask = ((1u32 << lanes) - 1) as __mmask16;
                let dst = &mut row[q * NR..][..lanes];
                // C = start + sums, else C += sums (the same one addition as the six-row
                // kernels').
                let from = match start {
                    Some(z) => z[q * NR..][..lanes].as_ptr(),
                    None => dst.as_ptr(),
                };
                // `from` is `lanes` floats (of a row of C or of start, sliced above).
                // SAFETY: `mask` selects the lanes below `lanes` only.
                let before = unsafe { _mm512_maskz_loadu_ps(mask, from) };
                let mut v = _mm512_add_ps(before, sums);
                if let Some((lo, hi)) = clamp {
                    // Max and min return their second operand when one is NaN: NaN kept.
                    v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
                }
                // SAFETY: `dst` is `lanes` floats; only the lanes below `lanes` are written.
                unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr(), mask, v) };
            }
        }
    }

    pub(super) fn tall512(t: TallTile<'_, 1>) {
        // SAFETY: chosen by `kernels_for` only where the CPU has AVX-512F and FMA.
        unsafe { tall_avx512(t) }
    }

    pub(super) fn tall_wide512(t: TallTile<'_, 2>) {
        // SAFETY: chosen by `kernels_for` only where the CPU has AVX-512F and FMA.
        unsafe { tall_avx512(t) }
    }

    pub(super) fn wide512(t: WideTile<'_>) {
        // SAFETY: chosen by `kernels_for` only where the CPU has AVX-512F and FMA.
        unsafe { wide_avx512(t) }
    }

    pub(super) fn avx2(t: Tile<'_>) {
        // SAFETY: chosen by `kernels_for` only where the CPU has AVX2 and FMA.
        unsafe { tile_avx2(t) }
    }

    pub(super) fn few256(t: FewTile<'_>) {
        // SAFETY: chosen by `kernels_for` only where the CPU has AVX2 and FMA.
        unsafe { few_avx2(t) }
    }

    pub(super) fn tall256(t: TallTile<'_, 1>) {
        // SAFETY: chosen by `kernels_for` only where the CPU has AVX2 and FMA.
        unsafe { tall_avx2(t) }
    }

    /// [`tall256`] over two panels, one after the other (AVX2 has no two-panel kernel,
    /// so the blocked loops never pair panels for it; this keeps the pair correct).
    pub(super) fn tall_wide256(t: TallTile<'_, 2>) {
        let TallTile {
            a,
            b: [b0, b1],
            c,
            rsc,
            cols,
            start,
            clamp,
        } = t;
        let first = cols.min(NR);
        tall256(TallTile {
            a: a.part::<TR>(0),
            b: [b0],
            c: &mut c[..],
            rsc,
            cols: first,
            start: start.map(|z| &z[..first]),
            clamp,
        });
        if cols > NR {
            tall256(TallTile {
                a,
                b: [b1],
                c: &mut c[NR..],
                rsc,
                cols: cols - NR,
                start: start.map(|z| &z[NR..]),
                clamp,
            });
        }
    }

    pub(super) fn avx512(t: Tile<'_>) {
        // SAFETY: chosen by `kernels_for` only where the CPU has AVX-512F and FMA.
        unsafe { micro_avx512(t) }
    }
}

/// The micro-kernels one product runs with.
#[derive(Clone, Copy)]
struct Kernels {
    /// The six-row kernel over one panel.
    micro: Micro,
    /// The six-row kernel over two panels, where the CPU has the 32 vector registers its
    /// twelve accumulators need (AVX-512).
    wide: Option<Wide>,
    /// The twelve-row kernels over one and two panels: with AVX-512 (its 32 registers),
    /// and with AVX2 for a panel of at most 8 columns (a product's last; others as two
    /// six-row tiles), whose second half the six-row kernel multiplies for nothing.
    tall: Option<(Tall, TallWide)>,
    /// The kernel for a block's rows past its last whole six-row tile, over several
    /// panels at once (AVX2).
    few: Option<Few>,
}

/// The kernels for instruction-set level `isa` (which the CPU must have). The vector
/// levels multiply with fused multiply-adds, each sum in the same order, so every kernel
/// of one level gives the same bits.
fn kernels_for(isa: super::isa::Isa) -> Kernels {
    #[cfg(target_arch = "x86_64")]
    {
        use super::isa::{detected, Isa};
        match isa.min(detected()) {
            Isa::Avx512 | Isa::Avx512Vnni => {
                return Kernels {
                    micro: x86::avx512,
                    wide: Some(x86::wide512),
                    tall: Some((x86::tall512, x86::tall_wide512)),
                    few: None,
                }
            }
            Isa::Avx2 => {
                return Kernels {
                    micro: x86::avx2,
                    wide: None,
                    tall: Some((x86::tall256, x86::tall_wide256)),
                    few: Some(x86::few256),
                }
            }
            Isa::Scalar => {}
        }
    }
    let _ = isa;
    Kernels {
        micro: micro_plain,
        wide: None,
        tall: None,
        few: None,
    }
}

/// The kernels of this CPU's level (the same ones for every product, packed or not).
fn kernels() -> Kernels {
    static CHOSEN: std::sync::OnceLock<Kernels> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| kernels_for(super::isa::isa()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::isa::{detected, Isa};
    use proptest::prelude::*;

    /// The instruction-set levels this CPU runs.
    fn levels() -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|&l| l <= detected())
            .collect()
    }

    proptest! {
        /// The packed float32 GEMM against a float64 reference at every level the CPU
        /// has, over shapes that cross every block edge (MR, NR, KC, MC), with and
        /// without a bias and a clamp.
        #[test]
        fn packed_gemm_matches_the_reference(
            m in 1usize..90, k in 1usize..300, n in 1usize..40, seed in any::<u32>(),
            with_bias in any::<bool>(),
            clamp in prop_oneof![Just(None), Just(Some((-30.0f32, 40.0f32))), Just(Some((0.0, 6.0)))],
        ) {
            let val = |i: usize, s: u32| ((i as u32).wrapping_mul(2654435761) ^ s) % 17;
            let a: Vec<f32> = (0..m * k).map(|i| val(i, seed) as f32 - 8.0).collect();
            let b: Vec<f32> = (0..n * k).map(|i| val(i, !seed) as f32 * 0.25).collect();
            let bias: Vec<f32> = (0..n).map(|j| val(j, seed ^ 3) as f32 - 5.0).collect();
            // B as the filter `[n, k]` (B = its transpose), as the convolutions give it.
            let mut bp = vec![0.0f32; packed_len(k, n).unwrap()];
            pack_b(k, n, Mat { data: &b, rs: 1, cs: k }, &mut bp).unwrap();
            for isa in levels() {
                let mut c = vec![1.0f32; m * n];
                run_blocked(
                    kernels_for(isa), m,
                    ASrc::Mat(Mat { data: &a, rs: k, cs: 1 }),
                    Packed { data: &bp, k, n },
                    MatMut { data: &mut c, rs: n },
                    with_bias.then_some(&bias[..]),
                    clamp,
                ).unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let first = if with_bias { f64::from(bias[j]) } else { 1.0 };
                        let sum: f64 = first + (0..k)
                            .map(|l| f64::from(a[i * k + l]) * f64::from(b[j * k + l]))
                            .sum::<f64>();
                        let want = match clamp {
                            Some((lo, hi)) => sum.clamp(f64::from(lo), f64::from(hi)),
                            None => sum,
                        };
                        // Small integers and quarters: exact in float32.
                        prop_assert_eq!(f64::from(c[i * n + j]), want, "{}", isa.name());
                    }
                }
            }
        }
    }

    proptest! {
        /// The twelve-row kernels give the same bits as two six-row tiles of their level,
        /// over one and two panels, segmented rows, part-filled panels, both kinds of
        /// start and the clamp (NaN kept).
        #[test]
        fn tall_tiles_match_six_row_tiles(
            (seg, segs) in (1usize..12, 1usize..4),
            (wide, cols) in prop_oneof![
                (Just(false), 1usize..=NR),
                (Just(true), NR + 1..=2 * NR),
            ],
            with_start in any::<bool>(),
            clamp in prop_oneof![Just(None), Just(Some((-0.5f32, 0.75f32)))],
            seed in any::<u32>(),
        ) {
            for isa in levels() {
                let Kernels { micro, wide: Some(six_wide), tall: Some((tall, tall_wide)), .. } =
                    kernels_for(isa) else { continue };
                let kc = seg * segs;
                let (a, pitch) = segmented_rows(TR, seg, segs, seed);
                let b: Vec<f32> = (0..2 * kc * NR).map(|i| val(i, !seed)).collect();
                let (b0, b1) = b.split_at(kc * NR);
                let z: [f32; 2 * NR] = std::array::from_fn(|i| val(i, seed ^ 77));
                let rsc = 2 * NR;
                let c0: Vec<f32> = (0..TR * rsc).map(|i| val(i, seed ^ 5)).collect();
                let zeros = vec![0.0f32; kc];
                let row = |r: usize| (&a[r * 3..], pitch);
                let mut want = c0.clone();
                for half in 0..2 {
                    let a = tile_rows(&zeros, seg, MR, |r| row(half * MR + r));
                    let c = &mut want[half * MR * rsc..];
                    if wide {
                        six_wide(WideTile {
                            a, b: [b0, b1], c, rsc, rows: MR, cols,
                            start: with_start.then_some(&z), clamp,
                        });
                    } else {
                        micro(Tile {
                            a, b: b0, c, rsc, rows: MR, cols,
                            start: with_start.then_some(&z[..NR]), clamp,
                        });
                    }
                }
                let mut got = c0.clone();
                let a = tile_rows(&zeros, seg, TR, row);
                let start = with_start.then_some(&z[..]);
                if wide {
                    tall_wide(TallTile { a, b: [b0, b1], c: &mut got, rsc, cols, start, clamp });
                } else {
                    tall(TallTile { a, b: [b0], c: &mut got, rsc, cols, start, clamp });
                }
                let same = same_bits(&got, &want);
                prop_assert!(same, "{}", isa.name());
            }
        }
    }

    proptest! {
        /// The twelve-row kernel for a narrow panel (AVX2) gives the same bits as two
        /// six-row tiles of its level: panels of at most 8 columns (the ones it is chosen
        /// for) and wider ones, one panel or two (its pair runs them one after the other),
        /// segmented rows, both kinds of start and the clamp (NaN kept).
        #[test]
        fn half_tiles_match_six_row_tiles(
            (seg, segs) in (1usize..12, 1usize..4),
            cols in prop_oneof![1usize..=8, 9usize..=NR],
            pair in any::<bool>(),
            with_start in any::<bool>(),
            clamp in prop_oneof![Just(None), Just(Some((-0.5f32, 0.75f32)))],
            seed in any::<u32>(),
        ) {
            for isa in levels() {
                // The AVX2 level's (AVX-512's are checked against its wide tiles above).
                let Kernels { micro, wide: None, tall: Some((half, two)), .. } = kernels_for(isa)
                else { continue };
                let kc = seg * segs;
                let (a, pitch) = segmented_rows(TR, seg, segs, seed);
                let b: Vec<f32> = (0..2 * kc * NR).map(|i| val(i, !seed)).collect();
                let (b0, b1) = b.split_at(kc * NR);
                let z: [f32; 2 * NR] = std::array::from_fn(|i| val(i, seed ^ 77));
                let rsc = 2 * NR + 3;
                let c0: Vec<f32> = (0..TR * rsc).map(|i| val(i, seed ^ 5)).collect();
                let zeros = vec![0.0f32; kc];
                let row = |r: usize| (&a[r * 3..], pitch);
                // With a pair, the first panel full and `cols` of the second.
                let panels: &[(&[f32], usize)] =
                    if pair { &[(b0, NR), (b1, cols)] } else { &[(b0, cols)] };
                let mut want = c0.clone();
                for (t, &(b, cols)) in panels.iter().enumerate() {
                    for part in 0..2 {
                        let a = tile_rows(&zeros, seg, MR, |r| row(part * MR + r));
                        micro(Tile {
                            a, b, c: &mut want[part * MR * rsc + t * NR..], rsc, rows: MR, cols,
                            start: with_start.then_some(&z[t * NR..][..NR]), clamp,
                        });
                    }
                }
                let mut got = c0.clone();
                let a = tile_rows(&zeros, seg, TR, row);
                let start = with_start.then_some(&z[..]);
                if pair {
                    let cols = NR + cols;
                    two(TallTile { a, b: [b0, b1], c: &mut got, rsc, cols, start, clamp });
                } else {
                    half(TallTile { a, b: [b0], c: &mut got, rsc, cols, start, clamp });
                }
                let same = same_bits(&got, &want);
                prop_assert!(same, "{}", isa.name());
            }
        }
    }

    proptest! {
        /// The few-row kernel (AVX2) gives the same bits as six-row tiles of its level,
        /// one per panel: one to five rows, as many panels as it takes for them, the last
        /// part-filled, segmented rows, both kinds of start and the clamp (NaN kept).
        #[test]
        fn few_row_tiles_match_six_row_tiles(
            (seg, segs) in (1usize..12, 1usize..4),
            (rows, q, cols) in (1usize..MR).prop_flat_map(|rows| {
                (Just(rows), 1..=FEW_SUMS / rows)
            }).prop_flat_map(|(rows, q)| (Just(rows), Just(q), (q - 1) * NR + 1..=q * NR)),
            with_start in any::<bool>(),
            clamp in prop_oneof![Just(None), Just(Some((-0.5f32, 0.75f32)))],
            seed in any::<u32>(),
        ) {
            for isa in levels() {
                let Kernels { micro, few: Some(few), .. } = kernels_for(isa) else { continue };
                let kc = seg * segs;
                let (a, pitch) = segmented_rows(rows, seg, segs, seed);
                let b: Vec<f32> = (0..q * kc * NR).map(|i| val(i, !seed)).collect();
                let z: Vec<f32> = (0..FEW_SUMS * NR).map(|i| val(i, seed ^ 77)).collect();
                let rsc = q * NR + 3;
                let c0: Vec<f32> = (0..MR * rsc).map(|i| val(i, seed ^ 5)).collect();
                let zeros = vec![0.0f32; kc];
                let row = |r: usize| (&a[r * 3..], pitch);
                let panel = |t: usize| &b[t * kc * NR..][..kc * NR];
                let mut want = c0.clone();
                for t in 0..q {
                    micro(Tile {
                        a: tile_rows(&zeros, seg, rows, row),
                        b: panel(t),
                        c: &mut want[t * NR..],
                        rsc,
                        rows,
                        cols: (cols - t * NR).min(NR),
                        start: with_start.then(|| &z[t * NR..][..NR]),
                        clamp,
                    });
                }
                let mut got = c0.clone();
                few(FewTile {
                    a: tile_rows(&zeros, seg, rows, row),
                    rows,
                    b: std::array::from_fn(|t| if t < q { panel(t) } else { &[][..] }),
                    panels: q,
                    c: &mut got,
                    rsc,
                    cols,
                    start: with_start.then_some(&z[..]),
                    clamp,
                });
                let same = same_bits(&got, &want);
                prop_assert!(same, "{}", isa.name());
            }
        }
    }

    /// A test value of index `i` under seed `s`, in about [-1.3, 1.23].
    fn val(i: usize, s: u32) -> f32 {
        let v = (i as u32).wrapping_mul(2654435761).wrapping_add(s) >> 9;
        (v % 20011) as f32 / 7919.0 - 1.3
    }

    /// Segmented rows of `rows` rows: row r's segment t (`seg` values) starts at
    /// `r * 3 + t * pitch`, pitch = seg + 5 (returned with them); one of the rows' first
    /// three values is a NaN.
    fn segmented_rows(rows: usize, seg: usize, segs: usize, seed: u32) -> (Vec<f32>, usize) {
        let pitch = seg + 5;
        let mut a: Vec<f32> = (0..rows * 3 + segs * pitch + seg)
            .map(|i| val(i, seed))
            .collect();
        a[seed as usize % (rows * 3)] = f32::NAN;
        (a, pitch)
    }

    /// Whether `got` and `want` hold the same bits.
    fn same_bits(got: &[f32], want: &[f32]) -> bool {
        got.iter()
            .zip(want)
            .all(|(g, w)| g.to_bits() == w.to_bits())
    }

    /// The six-row body in plain Rust with `f32::mul_add`: the vector kernels' arithmetic
    /// (one rounding per multiply-add), without vector code.
    fn micro_fused(t: Tile<'_>) {
        micro_body!(t, |x: f32, y: f32, s: f32| x.mul_add(y, s))
    }

    proptest! {
        /// Every level's six-row kernel gives the bits of the plain body with fused
        /// multiply-adds: part-filled tiles and panels, segmented rows, both kinds of
        /// start, the clamp (NaN kept).
        #[test]
        fn six_row_tiles_match_the_fused_plain_body(
            (seg, segs) in (1usize..12, 1usize..4),
            rows in 1usize..=MR,
            cols in 1usize..=NR,
            with_start in any::<bool>(),
            clamp in prop_oneof![Just(None), Just(Some((-0.5f32, 0.75f32)))],
            seed in any::<u32>(),
        ) {
            let kc = seg * segs;
            let (a, pitch) = segmented_rows(MR, seg, segs, seed);
            let b: Vec<f32> = (0..kc * NR).map(|i| val(i, !seed)).collect();
            let z: [f32; NR] = std::array::from_fn(|i| val(i, seed ^ 77));
            let rsc = NR + 3;
            let c0: Vec<f32> = (0..MR * rsc).map(|i| val(i, seed ^ 5)).collect();
            let zeros = vec![0.0f32; kc];
            let row = |r: usize| (&a[r * 3..], pitch);
            let tile = |c: &mut [f32], micro: Micro| {
                let a = tile_rows(&zeros, seg, rows, row);
                micro(Tile { a, b: &b, c, rsc, rows, cols, start: with_start.then_some(&z[..]), clamp });
            };
            let mut want = c0.clone();
            tile(&mut want, micro_fused);
            for isa in levels().into_iter().filter(|&l| l > Isa::Scalar) {
                let mut got = c0.clone();
                tile(&mut got, kernels_for(isa).micro);
                let same = same_bits(&got, &want);
                prop_assert!(same, "{}", isa.name());
            }
        }
    }

    #[test]
    fn bad_views_are_refused() {
        let a = [1.0f32; 4];
        let mut c = [0.0f32; 4];
        let short = Packed {
            data: &[0.0; 8],
            k: 2,
            n: 2,
        };
        let m = MatMut {
            data: &mut c,
            rs: 2,
        };
        assert!(gemm_packed(
            2,
            Mat {
                data: &a,
                rs: 2,
                cs: 1
            },
            short,
            m,
            None,
            None
        )
        .is_err());
        let mut out = [0.0f32; 8];
        assert!(pack_b(
            2,
            3,
            Mat {
                data: &a,
                rs: 1,
                cs: 2
            },
            &mut out
        )
        .is_err());
    }
}
