//! Kernels that only move elements (any element type): RESHAPE, CONCATENATION,
//! DEPTH_TO_SPACE, SPACE_TO_DEPTH, PAD, TRANSPOSE, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND,
//! STRIDED_SLICE (and SLICE), GATHER, CHANNEL_SHUFFLE, TILE, SPLIT, FILL,
//! RANK, MIRROR_PAD, REVERSE, PACK, and SCATTER (DENSIFY's device half).

pub mod channel_shuffle;
pub mod concat;
pub mod depth_space;
pub mod fill;
pub mod gather;
pub mod mirror_pad;
pub mod pack;
pub mod pad;
pub mod reshape;
pub mod reverse;
pub mod scatter;
pub mod slice;
pub mod space_batch;
pub mod split;
pub mod strided_slice;
pub mod tile;
pub mod transpose;

#[cfg(test)]
mod tests;

use crate::kernels::{KernelError, Result};

/// Writes every output element `i` (of `es` bytes) from input element `src(i)`, or from
/// `fill` when `src(i)` is `None`. Out-of-range sources are an error, never a panic.
pub(crate) fn copy_elems(
    es: usize,
    x: &[u8],
    out: &mut [u8],
    fill: &[u8],
    mut src: impl FnMut(usize) -> Option<usize>,
) -> Result<()> {
    if es == 0 {
        return Err(KernelError::Misaligned);
    }
    for (i, o) in out.chunks_exact_mut(es).enumerate() {
        match src(i) {
            Some(j) => {
                let from = j
                    .checked_mul(es)
                    .and_then(|a| x.get(a..a.checked_add(es)?))
                    .ok_or(KernelError::TooLarge)?;
                o.copy_from_slice(from);
            }
            None => {
                if fill.len() != es {
                    return Err(KernelError::Misaligned);
                }
                o.copy_from_slice(fill);
            }
        }
    }
    Ok(())
}

/// Row-major multi-index of flat index `i` in `shape` (written into `idx`).
pub(crate) fn unflatten(mut i: usize, shape: &[usize], idx: &mut [usize]) {
    for d in (0..shape.len()).rev() {
        let n = shape[d].max(1);
        idx[d] = i % n;
        i /= n;
    }
}

/// Writes every output element from the input element whose coordinate along each axis
/// `a` is `source(a, k, dim)` for output coordinate `k` (the input's size `dim` there):
/// TILE and MIRROR_PAD, which map each axis on its own.
pub(crate) fn copy_by_axis(
    x: crate::tensor::View<'_>,
    out: &mut crate::tensor::ViewMut<'_>,
    source: impl Fn(usize, usize, usize) -> usize,
) -> Result<()> {
    let es = x.ty.dtype.size() as usize;
    let shape = x.shape();
    let istr = crate::kernels::layout::strides(shape);
    let oshape = out.ty.shape.clone();
    let mut idx = vec![0usize; shape.len()];
    copy_elems(es, x.bytes, out.bytes, &[], |i| {
        unflatten(i, &oshape, &mut idx);
        Some(
            idx.iter()
                .enumerate()
                .map(|(a, &k)| source(a, k, shape[a]) * istr[a])
                .sum(),
        )
    })
}
