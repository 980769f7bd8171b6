//! Shape and layout helpers shared by kernels: axes, strides, broadcasting, convolution
//! windows, NCHW <-> NHWC, and element-size dispatch for kernels that only move elements.

use super::{bad_shape, KernelError, Padding, Result, Tensor, TensorMut};

/// Resolves a possibly negative axis against `rank`.
pub(crate) fn resolve_axis(op: &'static str, axis: i32, rank: usize) -> Result<usize> {
    let r = i64::try_from(rank).map_err(|_| KernelError::TooLarge)?;
    let a = i64::from(axis);
    let a = if a < 0 { a + r } else { a };
    if a < 0 || a >= r {
        return Err(bad_shape(
            op,
            format!("axis {axis} out of range for rank {rank}"),
        ));
    }
    usize::try_from(a).map_err(|_| KernelError::TooLarge)
}

/// Row-major strides of a shape.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The numpy-style broadcast of two shapes.
pub(crate) fn broadcast_shape(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        if i < rank - s.len() {
            1
        } else {
            s[i - (rank - s.len())]
        }
    };
    (0..rank)
        .map(|i| {
            let (da, db) = (dim(a, i), dim(b, i));
            if da == db || db == 1 {
                Ok(da)
            } else if da == 1 {
                Ok(db)
            } else {
                Err(bad_shape(
                    op,
                    format!("shapes {a:?} and {b:?} do not broadcast"),
                ))
            }
        })
        .collect()
}

/// Broadcast strides of `shape` against an output shape: 0 on broadcast dims.
pub(crate) fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let rank = out.len();
    let lead = rank - shape.len();
    let own = strides(shape);
    (0..rank)
        .map(|i| {
            if i < lead || shape[i - lead] == 1 && out[i] != 1 {
                0
            } else {
                own[i - lead]
            }
        })
        .collect()
}

/// Calls `f(out_index, a_index, b_index)` for every element of a broadcast binary op.
pub(crate) fn for_each_broadcast(
    a: &[usize],
    b: &[usize],
    out: &[usize],
    mut f: impl FnMut(usize, usize, usize),
) {
    let n: usize = out.iter().product();
    if n == 0 {
        return;
    }
    let (na, nb): (usize, usize) = (a.iter().product(), b.iter().product());
    if na == n && nb == n {
        (0..n).for_each(|i| f(i, i, i));
        return;
    }
    if nb == 1 && na == n {
        (0..n).for_each(|i| f(i, i, 0));
        return;
    }
    if na == 1 && nb == n {
        (0..n).for_each(|i| f(i, 0, i));
        return;
    }
    let rank = out.len();
    let sa = broadcast_strides(a, out);
    let sb = broadcast_strides(b, out);
    let last = rank - 1;
    let inner = out[last];
    let (la, lb) = (sa[last], sb[last]);
    let mut idx = vec![0usize; rank];
    let mut pos = 0;
    while pos < n {
        let (mut ia, mut ib) = (0, 0);
        for d in 0..last {
            ia += idx[d] * sa[d];
            ib += idx[d] * sb[d];
        }
        for j in 0..inner {
            f(pos + j, ia + j * la, ib + j * lb);
        }
        pos += inner;
        for d in (0..last).rev() {
            idx[d] += 1;
            if idx[d] < out[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Output (height, width) of a convolution window sliding over a padded input.
pub(crate) fn window_out(
    (h, w): (usize, usize),
    pad: &Padding,
    (kh, kw): (usize, usize),
    (dh, dw): (u32, u32),
    (sh, sw): (u32, u32),
) -> std::result::Result<(usize, usize), String> {
    let oh = conv_out_size(h, pad.top, pad.bottom, kh, dh, sh)
        .ok_or_else(|| "filter taller than the padded input".to_string())?;
    let ow = conv_out_size(w, pad.left, pad.right, kw, dw, sw)
        .ok_or_else(|| "filter wider than the padded input".to_string())?;
    Ok((oh, ow))
}

/// `(in + pad_a + pad_b - ((k-1)*dilation+1)) / stride + 1`, or `None` if the padded input is
/// smaller than the effective filter or anything overflows.
pub(crate) fn conv_out_size(
    input: usize,
    pad_a: u32,
    pad_b: u32,
    k: usize,
    dilation: u32,
    stride: u32,
) -> Option<usize> {
    let eff = k
        .checked_sub(1)?
        .checked_mul(dilation as usize)?
        .checked_add(1)?;
    let total = input
        .checked_add(pad_a as usize)?
        .checked_add(pad_b as usize)?;
    let span = total.checked_sub(eff)?;
    if stride == 0 {
        return None;
    }
    (span / stride as usize).checked_add(1)
}

/// `(n, h, w, c)` of a rank-4 shape in the given layout.
pub(crate) fn nhwc_dims(shape: &[usize], nchw: bool) -> Option<(usize, usize, usize, usize)> {
    match *shape {
        [n, c, h, w] if nchw => Some((n, h, w, c)),
        [n, h, w, c] if !nchw => Some((n, h, w, c)),
        _ => None,
    }
}

/// `(n, h, w, c)` of a rank-4 shape, or an InvalidShape error naming `op`.
pub(crate) fn image_dims(
    op: &'static str,
    shape: &[usize],
    nchw: bool,
) -> Result<(usize, usize, usize, usize)> {
    nhwc_dims(shape, nchw).ok_or_else(|| bad_shape(op, format!("input {shape:?} must have rank 4")))
}

/// A rank-4 shape in the given layout.
pub(crate) fn layout_shape(n: usize, h: usize, w: usize, c: usize, nchw: bool) -> Vec<usize> {
    if nchw {
        vec![n, c, h, w]
    } else {
        vec![n, h, w, c]
    }
}

/// Copies an NCHW tensor into a new NHWC buffer.
pub(crate) fn nchw_to_nhwc<T: Copy + Default>(
    src: &[T],
    n: usize,
    c: usize,
    h: usize,
    w: usize,
) -> Vec<T> {
    let mut dst = vec![T::default(); src.len()];
    let hw = h * w;
    for b in 0..n {
        let s = &src[b * c * hw..(b + 1) * c * hw];
        let d = &mut dst[b * c * hw..(b + 1) * c * hw];
        for ch in 0..c {
            for p in 0..hw {
                d[p * c + ch] = s[ch * hw + p];
            }
        }
    }
    dst
}

/// Copies an NHWC buffer into an NCHW destination.
pub(crate) fn nhwc_to_nchw<T: Copy>(
    src: &[T],
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    dst: &mut [T],
) {
    let hw = h * w;
    for b in 0..n {
        let s = &src[b * c * hw..(b + 1) * c * hw];
        let d = &mut dst[b * c * hw..(b + 1) * c * hw];
        for p in 0..hw {
            for ch in 0..c {
                d[ch * hw + p] = s[p * c + ch];
            }
        }
    }
}

/// Runs an NHWC kernel on a tensor in either layout: NCHW data is transposed in and out.
/// `f(input_nhwc, output_nhwc)`.
pub(crate) fn with_nhwc<T, F>(
    nchw: bool,
    x: Tensor<'_, T>,
    out: TensorMut<'_, T>,
    f: F,
) -> Result<()>
where
    T: Copy + Default,
    F: FnOnce(&[T], &mut [T]) -> Result<()>,
{
    if !nchw {
        return f(x.data, out.data);
    }
    let (n, h, w, c) = nhwc_dims(x.shape, true).ok_or(KernelError::TooLarge)?;
    let (on, oh, ow, oc) = nhwc_dims(out.shape, true).ok_or(KernelError::TooLarge)?;
    let xin = nchw_to_nhwc(x.data, n, c, h, w);
    let mut tmp = vec![T::default(); out.data.len()];
    f(&xin, &mut tmp)?;
    nhwc_to_nchw(&tmp, on, oh, ow, oc, out.data);
    Ok(())
}

/// Runs a generic element-moving function on the bytes of `src` and `dst` viewed as
/// elements of `size` bytes (1, 2 or 4): `by_size!(size, src, dst, |s, d| expr)` where `s`
/// and `d` are `&[T]` / `&mut [T]` of u8, u16 or u32.
macro_rules! by_size {
    ($size:expr, $src:expr, $dst:expr, |$s:ident, $d:ident| $body:expr) => {{
        use $crate::kernels::KernelError;
        match $size {
            1 => {
                let $s: &[u8] = $src;
                let $d: &mut [u8] = $dst;
                $body
            }
            2 => {
                let $s: &[u16] =
                    bytemuck::try_cast_slice($src).map_err(|_| KernelError::Misaligned)?;
                let $d: &mut [u16] =
                    bytemuck::try_cast_slice_mut($dst).map_err(|_| KernelError::Misaligned)?;
                $body
            }
            4 => {
                let $s: &[u32] =
                    bytemuck::try_cast_slice($src).map_err(|_| KernelError::Misaligned)?;
                let $d: &mut [u32] =
                    bytemuck::try_cast_slice_mut($dst).map_err(|_| KernelError::Misaligned)?;
                $body
            }
            _ => Err(KernelError::Misaligned),
        }
    }};
}
pub(crate) use by_size;
