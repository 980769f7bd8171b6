//! The GEMM the convolution family runs on: a bounds-checked wrapper over
//! `matrixmultiply::{sgemm, dgemm}` (float32 for float kernels; float64 for the quantised
//! ones, whose integer sums it computes exactly).

use super::{KernelError, Result};

/// The largest index touched by a strided `rows x cols` matrix, checked.
fn max_index(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1)
        .checked_mul(rs)?
        .checked_add((cols - 1).checked_mul(cs)?)
}

fn to_isize(v: usize) -> Result<isize> {
    isize::try_from(v).map_err(|_| KernelError::TooLarge)
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

/// An element type `matrixmultiply` multiplies.
pub(crate) trait Scalar: Copy {
    /// `matrixmultiply::{s,d}gemm` with alpha 1.
    ///
    /// # Safety
    /// As `matrixmultiply::sgemm`: every element the strides reach is in bounds and C
    /// aliases neither A nor B.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm_raw(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        beta: Self,
        c: *mut Self,
        rsc: isize,
    );
}

macro_rules! scalar {
    ($t:ty, $f:ident) => {
        impl Scalar for $t {
            unsafe fn gemm_raw(
                m: usize,
                k: usize,
                n: usize,
                a: *const $t,
                rsa: isize,
                csa: isize,
                b: *const $t,
                rsb: isize,
                csb: isize,
                beta: $t,
                c: *mut $t,
                rsc: isize,
            ) {
                // SAFETY: the caller's contract is matrixmultiply's.
                unsafe {
                    matrixmultiply::$f(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, beta, c, rsc, 1)
                }
            }
        }
    };
}
scalar!(f32, sgemm);
scalar!(f64, dgemm);

/// `C = A * B + beta * C` with `A` `m x k`, `B` `k x n`, `C` `m x n` row-major with row stride
/// `rsc`. A safe wrapper over `matrixmultiply::sgemm` that checks every view's bounds first.
pub(crate) fn gemm<T: Scalar>(
    m: usize,
    k: usize,
    n: usize,
    a: Mat<'_, T>,
    b: Mat<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
) -> Result<()> {
    let MatMut { data: c, rs: rsc } = c;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let oob = || KernelError::TooLarge;
    let fits = |mat: &Mat<'_, T>, rows, cols| {
        max_index(rows, cols, mat.rs, mat.cs).is_some_and(|i| i < mat.data.len())
    };
    if k == 0 || !fits(&a, m, k) || !fits(&b, k, n) {
        return Err(oob());
    }
    match max_index(m, n, rsc, 1) {
        Some(i) if i < c.len() => {}
        _ => return Err(oob()),
    }
    let (rsa, csa) = (to_isize(a.rs)?, to_isize(a.cs)?);
    let (rsb, csb) = (to_isize(b.rs)?, to_isize(b.cs)?);
    let rsc = to_isize(rsc)?;
    // sgemm reads A at offsets i*rsa + l*csa (i < m, l < k), B at l*rsb + j*csb
    // (l < k, j < n) and reads/writes C at i*rsc + j (i < m, j < n). The checks above prove
    // the largest such offset of each matrix is inside its slice (all strides are
    // non-negative, so the smallest is 0), and the isize conversions succeeded. `c` is a
    // unique borrow, so C aliases neither A nor B, and nothing else accesses it meanwhile.
    // SAFETY: every access the GEMM makes is in bounds and unaliased, as shown above.
    unsafe {
        T::gemm_raw(
            m,
            k,
            n,
            a.data.as_ptr(),
            rsa,
            csa,
            b.data.as_ptr(),
            rsb,
            csb,
            beta,
            c.as_mut_ptr(),
            rsc,
        );
    }
    Ok(())
}

/// Fills each `row_len` row of `out` with `bias`.
pub(crate) fn fill_bias(out: &mut [f32], bias: &[f32]) {
    if bias.is_empty() {
        return;
    }
    for row in out.chunks_exact_mut(bias.len()) {
        row.copy_from_slice(bias);
    }
}
