//! Convolution family: CONV_2D (im2col or direct 1x1 GEMM), DEPTHWISE_CONV_2D (direct) and
//! FULLY_CONNECTED (GEMM), all with bias and fused activation. GEMMs go to
//! `matrixmultiply::sgemm`.

use super::shape::{nhwc_dims, with_nhwc};
use super::{Activation, KernelError, KernelOp, Result, Tensor, TensorMut, MAX_ELEMENTS};

/// Scratch budget of one im2col tile, in floats (2 MiB). Tiny under test, so that the
/// property tests exercise the multi-tile path on small shapes.
const IM2COL_TILE: usize = if cfg!(test) { 64 } else { 1 << 19 };

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
pub(crate) struct Mat<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

/// A row-major mutable matrix view with row stride `rs` (column stride 1).
pub(crate) struct MatMut<'a> {
    pub data: &'a mut [f32],
    pub rs: usize,
}

/// `C = A * B + beta * C` with `A` `m x k`, `B` `k x n`, `C` `m x n` row-major with row stride
/// `rsc`. A safe wrapper over `matrixmultiply::sgemm` that checks every view's bounds first.
pub(crate) fn gemm(
    m: usize,
    k: usize,
    n: usize,
    a: Mat<'_>,
    b: Mat<'_>,
    beta: f32,
    c: MatMut<'_>,
) -> Result<()> {
    let MatMut { data: c, rs: rsc } = c;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let oob = || KernelError::TooLarge;
    let fits = |mat: &Mat<'_>, rows, cols| {
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
    // SAFETY: every access sgemm makes is in bounds and unaliased, as shown above.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.data.as_ptr(),
            rsa,
            csa,
            b.data.as_ptr(),
            rsb,
            csb,
            beta,
            c.as_mut_ptr(),
            rsc,
            1,
        );
    }
    Ok(())
}

/// Fills each `row_len` row of `out` with `bias`.
fn fill_bias(out: &mut [f32], bias: &[f32]) {
    if bias.is_empty() {
        return;
    }
    for row in out.chunks_exact_mut(bias.len()) {
        row.copy_from_slice(bias);
    }
}

pub(crate) fn fully_connected(
    act: Activation,
    x: Tensor<'_>,
    w: Tensor<'_>,
    bias: Tensor<'_>,
    out: TensorMut<'_>,
) -> Result<()> {
    let (n, k) = (w.shape[0], w.shape[1]);
    let m = x.data.len() / k;
    fill_bias(out.data, bias.data);
    gemm(
        m,
        k,
        n,
        Mat {
            data: x.data,
            rs: k,
            cs: 1,
        },
        Mat {
            data: w.data,
            rs: 1,
            cs: k,
        },
        1.0,
        MatMut {
            data: out.data,
            rs: n,
        },
    )?;
    act.apply_slice(out.data);
    Ok(())
}

pub(crate) fn conv2d(
    op: &KernelOp,
    x: Tensor<'_>,
    f: Tensor<'_>,
    bias: Tensor<'_>,
    out: TensorMut<'_>,
) -> Result<()> {
    let KernelOp::Conv2d {
        pad,
        stride_w,
        stride_h,
        dilation_w,
        dilation_h,
        act,
        nchw,
    } = *op
    else {
        return Err(super::bad_shape(op, "not a CONV_2D"));
    };
    let (n, h, w, c) = nhwc_dims(x.shape, nchw).ok_or(KernelError::TooLarge)?;
    let (_, oh, ow, o) = nhwc_dims(out.shape, nchw).ok_or(KernelError::TooLarge)?;
    let (kh, kw) = (f.shape[1], f.shape[2]);
    let k = kh * kw * c;
    let (sh, sw) = (stride_h as usize, stride_w as usize);
    let (dh, dw) = (dilation_h as usize, dilation_w as usize);
    let (pt, pl) = (pad.top as usize, pad.left as usize);
    let wmat = Mat {
        data: f.data,
        rs: 1,
        cs: k,
    };
    with_nhwc(nchw, x, out, |src, dst| {
        fill_bias(dst, bias.data);
        let direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && pad == Default::default();
        if direct {
            // 1x1, stride 1, no padding: the input is already the [N*H*W, C] matrix.
            let m = n * h * w;
            let a = Mat {
                data: src,
                rs: c,
                cs: 1,
            };
            gemm(m, k, o, a, wmat, 1.0, MatMut { data: dst, rs: o })?;
        } else {
            let pixels = oh * ow;
            let tile = (IM2COL_TILE / k).max(16).min(pixels.max(1));
            let scratch_len = tile.checked_mul(k).ok_or(KernelError::TooLarge)?;
            if scratch_len > MAX_ELEMENTS.max(k) {
                return Err(KernelError::TooLarge);
            }
            let mut scratch = vec![0.0f32; scratch_len];
            for b in 0..n {
                let img = &src[b * h * w * c..(b + 1) * h * w * c];
                let obatch = &mut dst[b * pixels * o..(b + 1) * pixels * o];
                let mut p0 = 0;
                while p0 < pixels {
                    let rows = tile.min(pixels - p0);
                    for r in 0..rows {
                        let p = p0 + r;
                        let (oy, ox) = (p / ow, p % ow);
                        let row = &mut scratch[r * k..(r + 1) * k];
                        for ky in 0..kh {
                            // Position in padded coordinates; in the input if in [pt, pt+h).
                            let py = oy * sh + ky * dh;
                            let iy = py.wrapping_sub(pt);
                            for kx in 0..kw {
                                let seg = &mut row[(ky * kw + kx) * c..][..c];
                                let px = ox * sw + kx * dw;
                                let ix = px.wrapping_sub(pl);
                                if py >= pt && iy < h && px >= pl && ix < w {
                                    seg.copy_from_slice(&img[(iy * w + ix) * c..][..c]);
                                } else {
                                    seg.fill(0.0);
                                }
                            }
                        }
                    }
                    let a = Mat {
                        data: &scratch[..rows * k],
                        rs: k,
                        cs: 1,
                    };
                    let c = MatMut {
                        data: &mut obatch[p0 * o..],
                        rs: o,
                    };
                    gemm(rows, k, o, a, wmat, 1.0, c)?;
                    p0 += rows;
                }
            }
        }
        act.apply_slice(dst);
        Ok(())
    })
}

pub(crate) fn depthwise_conv2d(
    op: &KernelOp,
    x: Tensor<'_>,
    f: Tensor<'_>,
    bias: Tensor<'_>,
    out: TensorMut<'_>,
) -> Result<()> {
    let KernelOp::DepthwiseConv2d {
        pad,
        stride_w,
        stride_h,
        dilation_w,
        dilation_h,
        depth_multiplier,
        act,
        nchw,
    } = *op
    else {
        return Err(super::bad_shape(op, "not a DEPTHWISE_CONV_2D"));
    };
    let (_, h, w, c) = nhwc_dims(x.shape, nchw).ok_or(KernelError::TooLarge)?;
    let (_, oh, ow, oc) = nhwc_dims(out.shape, nchw).ok_or(KernelError::TooLarge)?;
    let (kh, kw) = (f.shape[1], f.shape[2]);
    let mult = depth_multiplier as usize;
    let (sh, sw) = (stride_h as usize, stride_w as usize);
    let (dh, dw) = (dilation_h as usize, dilation_w as usize);
    let (pt, pl) = (pad.top as usize, pad.left as usize);
    with_nhwc(nchw, x, out, |src, dst| {
        if oc == 0 {
            return Ok(());
        }
        for (pix, acc) in dst.chunks_exact_mut(oc).enumerate() {
            let b = pix / (oh * ow);
            let (oy, ox) = ((pix / ow) % oh, pix % ow);
            acc.copy_from_slice(bias.data);
            for ky in 0..kh {
                let py = oy * sh + ky * dh;
                let iy = py.wrapping_sub(pt);
                if py < pt || iy >= h {
                    continue;
                }
                for kx in 0..kw {
                    let px = ox * sw + kx * dw;
                    let ix = px.wrapping_sub(pl);
                    if px < pl || ix >= w {
                        continue;
                    }
                    let inp = &src[((b * h + iy) * w + ix) * c..][..c];
                    let wt = &f.data[(ky * kw + kx) * oc..][..oc];
                    if mult == 1 {
                        for ((a, &v), &k) in acc.iter_mut().zip(inp).zip(wt) {
                            *a += v * k;
                        }
                    } else {
                        for ((a, k), &v) in acc
                            .chunks_exact_mut(mult)
                            .zip(wt.chunks_exact(mult))
                            .zip(inp)
                        {
                            for (a, &k) in a.iter_mut().zip(k) {
                                *a += v * k;
                            }
                        }
                    }
                }
            }
        }
        act.apply_slice(dst);
        Ok(())
    })
}
