//! NNAPI TRANSPOSE: output dimension `i` is input dimension `perm[i]`. Any element type.
//!
//! Parameter words: perm (a permutation of `0..rank`, as a list).

use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::layout::{by_size, strides};
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::{bad_shape, Result, MAX_RANK};
use crate::tensor::{TensorType, View, ViewMut};

/// A permutation of dimensions.
#[derive(Debug, Clone, PartialEq)]
pub struct Transpose {
    /// `perm.len()` == input rank.
    pub perm: Vec<u32>,
}

impl Kernel for Transpose {
    fn name(&self) -> &'static str {
        "TRANSPOSE"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let perm = w.list("rank", MAX_RANK)?;
        let n = perm.len();
        let mut seen = [false; MAX_RANK];
        for &p in &perm {
            match seen.get_mut(p as usize) {
                Some(s) if (p as usize) < n && !*s => *s = true,
                _ => return Err(w.err(format!("perm is not a permutation of 0..{n}"))),
            }
        }
        Ok(Transpose { perm })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        enc::list(w, self.perm.iter().copied());
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let first = &inputs[0].shape;
        if self.perm.len() != first.len() {
            return Err(bad_shape(
                self.name(),
                format!(
                    "perm of length {} for an input of rank {}",
                    self.perm.len(),
                    first.len()
                ),
            ));
        }
        Ok(vec![self.perm.iter().map(|&p| first[p as usize]).collect()])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let out_shape = outputs[0].ty.shape.clone();
        let perm = &self.perm;
        by_size!(
            x.ty.dtype.size(),
            x.bytes,
            &mut *outputs[0].bytes,
            |s, d| {
                transpose(perm, x.shape(), s, &out_shape, d);
                Ok(())
            }
        )
    }
}

/// Generic transpose over plain elements; shapes were validated.
pub(crate) fn transpose<T: Copy>(
    perm: &[u32],
    in_shape: &[usize],
    x: &[T],
    out_shape: &[usize],
    out: &mut [T],
) {
    if out.is_empty() {
        return;
    }
    let rank = in_shape.len();
    if rank == 0 {
        out.copy_from_slice(x);
        return;
    }
    let istr = strides(in_shape);
    // Input stride of each output dimension.
    let s: Vec<usize> = perm.iter().map(|&p| istr[p as usize]).collect();
    let last = rank - 1;
    let (n_last, s_last) = (out_shape[last], s[last]);
    let mut idx = vec![0usize; rank];
    let mut pos = 0;
    while pos < out.len() {
        let base: usize = (0..last).map(|d| idx[d] * s[d]).sum();
        for (j, o) in out[pos..pos + n_last].iter_mut().enumerate() {
            *o = x[base + j * s_last];
        }
        pos += n_last;
        for d in (0..last).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}
