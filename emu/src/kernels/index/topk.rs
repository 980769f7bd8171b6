//! NNAPI TOPK_V2: the `k` largest elements of each innermost row, in descending order,
//! and their int32 indices. Ties order as the reference (which sorts `(value, index)` pairs
//! and reverses them): equal values give the higher index first. Inputs float32, float16,
//! int32, u8, i8 (quantised values compare as stored integers; the values output keeps the
//! input's scale and zero point).
//!
//! Parameter words: k (>= 1). Outputs: values, indices.

use std::cmp::Ordering;

use crate::kernels::kernel::{same_dtype, Kernel, Words};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// Top-k along the last axis.
#[derive(Debug, Clone, PartialEq)]
pub struct TopK {
    /// How many elements per row.
    pub k: u32,
}

/// Top-k of each row of `x` (rows of `n`) into `vals` / `idx` (rows of `k`).
fn topk_impl<T: Copy + PartialOrd>(x: &[T], n: usize, k: usize, vals: &mut [T], idx: &mut [i32]) {
    if n == 0 || k == 0 {
        return;
    }
    let mut pairs: Vec<(T, usize)> = Vec::with_capacity(n);
    for (r, row) in x.chunks_exact(n).enumerate() {
        pairs.clear();
        pairs.extend(row.iter().copied().zip(0..));
        // Descending by (value, index).
        pairs.sort_by(|a, b| {
            b.0.partial_cmp(&a.0)
                .unwrap_or(Ordering::Equal)
                .then(b.1.cmp(&a.1))
        });
        for (j, &(v, i)) in pairs.iter().take(k).enumerate() {
            vals[r * k + j] = v;
            idx[r * k + j] = i32::try_from(i).unwrap_or(i32::MAX);
        }
    }
}

impl Kernel for TopK {
    fn name(&self) -> &'static str {
        "TOPK_V2"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(TopK { k: w.nonzero("k")? })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.k);
    }

    fn output_count(&self) -> usize {
        2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        same_dtype(
            self.name(),
            inputs,
            &[DType::F32, DType::F16, DType::I32, DType::U8, DType::I8],
        )?;
        let x = &inputs[0].shape;
        let Some(&last) = x.last() else {
            return Err(bad_shape(self.name(), "input must have rank >= 1"));
        };
        if self.k as usize > last {
            return Err(bad_shape(
                self.name(),
                format!("k {} exceeds the last dimension {last}", self.k),
            ));
        }
        let mut out = x.clone();
        if let Some(l) = out.last_mut() {
            *l = self.k as usize;
        }
        Ok(vec![out.clone(), out])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        if let (Some(i), Some(o)) = (inputs.first(), outputs.first()) {
            if i.dtype != o.dtype {
                return Err(KernelError::DType {
                    expected: i.dtype,
                    got: o.dtype,
                });
            }
        }
        match outputs.get(1) {
            Some(o) if o.dtype != DType::I32 => Err(KernelError::DType {
                expected: DType::I32,
                got: o.dtype,
            }),
            _ => Ok(()),
        }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let n = x.shape().last().copied().unwrap_or(0);
        let k = self.k as usize;
        let [vals, idx] = outputs else {
            return Err(bad_shape(self.name(), "needs two outputs"));
        };
        let idx = idx.i32s_mut()?;
        match x.ty.dtype {
            DType::F32 => topk_impl(x.f32s()?, n, k, vals.f32s_mut()?, idx),
            DType::F16 => topk_impl(x.f16s()?, n, k, vals.f16s_mut()?, idx),
            DType::I32 => topk_impl(x.i32s()?, n, k, vals.i32s_mut()?, idx),
            DType::U8 => topk_impl(x.u8s()?, n, k, vals.u8s_mut()?, idx),
            DType::I8 => topk_impl(x.i8s()?, n, k, vals.i8s_mut()?, idx),
            dtype => {
                return Err(KernelError::UnsupportedDType {
                    op: self.name(),
                    dtype,
                })
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ties_give_higher_index_first() {
        let (mut v, mut i) = ([0i32; 2], [0i32; 2]);
        topk_impl(&[5, 7, 7, 1], 4, 2, &mut v, &mut i);
        assert_eq!(v, [7, 7]);
        assert_eq!(i, [2, 1]);
    }

    proptest! {
        #[test]
        fn values_are_sorted_top(xs in proptest::collection::vec(-9i32..9, 8), k in 1usize..8) {
            let (mut v, mut i) = (vec![0i32; k], vec![0i32; k]);
            topk_impl(&xs, 8, k, &mut v, &mut i);
            let mut sorted = xs.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            prop_assert_eq!(&v[..], &sorted[..k]);
            for (vv, ii) in v.iter().zip(&i) {
                prop_assert_eq!(xs[*ii as usize], *vv);
            }
        }
    }
}
