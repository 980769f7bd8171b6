//! Pooling: NNAPI AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D with explicit padding. AVERAGE and
//! L2 average over the in-bounds part of each window only.

use super::shape::{nhwc_dims, with_nhwc};
use super::{KernelError, KernelOp, PoolKind, Result, Tensor, TensorMut};

/// The in-bounds input range `[lo, hi)` of a window starting at padded position `start`.
fn window(start: usize, len: usize, pad: usize, size: usize) -> (usize, usize) {
    let lo = start.max(pad) - pad;
    let hi = (start + len).min(pad + size).saturating_sub(pad);
    (lo, hi.max(lo))
}

pub(crate) fn pool(op: &KernelOp, x: Tensor<'_>, out: TensorMut<'_>) -> Result<()> {
    let KernelOp::Pool {
        kind,
        pad,
        stride_w,
        stride_h,
        filter_w,
        filter_h,
        act,
        nchw,
    } = *op
    else {
        return Err(super::bad_shape(op, "not a pooling op"));
    };
    let (n, h, w, c) = nhwc_dims(x.shape, nchw).ok_or(KernelError::TooLarge)?;
    let (_, oh, ow, _) = nhwc_dims(out.shape, nchw).ok_or(KernelError::TooLarge)?;
    let (sh, sw) = (stride_h as usize, stride_w as usize);
    let (fh, fw) = (filter_h as usize, filter_w as usize);
    let (pt, pl) = (pad.top as usize, pad.left as usize);
    with_nhwc(nchw, x, out, |src, dst| {
        for b in 0..n {
            for oy in 0..oh {
                let (y0, y1) = window(oy * sh, fh, pt, h);
                for ox in 0..ow {
                    let (x0, x1) = window(ox * sw, fw, pl, w);
                    let acc = &mut dst[((b * oh + oy) * ow + ox) * c..][..c];
                    let init = if kind == PoolKind::Max { f32::MIN } else { 0.0 };
                    acc.fill(init);
                    for iy in y0..y1 {
                        for ix in x0..x1 {
                            let inp = &src[((b * h + iy) * w + ix) * c..][..c];
                            match kind {
                                PoolKind::Average => {
                                    for (a, &v) in acc.iter_mut().zip(inp) {
                                        *a += v;
                                    }
                                }
                                PoolKind::L2 => {
                                    for (a, &v) in acc.iter_mut().zip(inp) {
                                        *a += v * v;
                                    }
                                }
                                PoolKind::Max => {
                                    for (a, &v) in acc.iter_mut().zip(inp) {
                                        if v > *a {
                                            *a = v;
                                        }
                                    }
                                }
                            }
                        }
                    }
                    let count = (y1 - y0) * (x1 - x0);
                    if count > 0 && kind != PoolKind::Max {
                        let inv = 1.0 / count as f32;
                        for a in acc.iter_mut() {
                            *a = if kind == PoolKind::L2 {
                                (*a * inv).sqrt()
                            } else {
                                *a * inv
                            };
                        }
                    }
                }
            }
        }
        act.apply_slice(dst);
        Ok(())
    })
}
