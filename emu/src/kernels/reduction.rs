//! Reductions: NNAPI MEAN over a set of axes (keep_dims or not).

use super::{bad_shape, KernelOp, Result, Tensor};

pub(crate) fn mean(op: &KernelOp, axes: &[u32], x: Tensor<'_>, out: &mut [f32]) -> Result<()> {
    let rank = x.shape.len();
    let mut reduce = [false; super::MAX_RANK];
    for &a in axes {
        match reduce.get_mut(a as usize) {
            Some(r) if (a as usize) < rank => *r = true,
            _ => return Err(bad_shape(op, format!("axis {a} out of range"))),
        }
    }
    // Output stride of each input dimension: 0 on reduced dims.
    let mut ostride = vec![0usize; rank];
    let mut s = 1usize;
    for d in (0..rank).rev() {
        if !reduce[d] {
            ostride[d] = s;
            s *= x.shape[d];
        }
    }
    let count: usize = (0..rank)
        .filter(|&d| reduce[d])
        .map(|d| x.shape[d])
        .product();
    let mut acc = vec![0.0f64; out.len()];
    if !x.data.is_empty() {
        let last = rank - 1;
        let (n_last, s_last) = (x.shape[last], ostride[last]);
        let mut idx = vec![0usize; rank];
        let mut pos = 0;
        while pos < x.data.len() {
            let base: usize = (0..last).map(|d| idx[d] * ostride[d]).sum();
            for (j, &v) in x.data[pos..pos + n_last].iter().enumerate() {
                acc[base + j * s_last] += f64::from(v);
            }
            pos += n_last;
            for d in (0..last).rev() {
                idx[d] += 1;
                if idx[d] < x.shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = (a / count as f64) as f32;
    }
    Ok(())
}
