//! NNAPI STRIDED_SLICE and SLICE: per input dimension, `count` elements starting at
//! `begin` with step `stride` (negative steps walk backwards); the result is then viewed
//! with the given output shape (STRIDED_SLICE's shrunk axes are dropped). Any element type.
//! The driver resolves masks, negative indices and clamping to these plain triples.
//!
//! Parameter words: rank, then per dimension begin (i32), stride (i32, non-zero), count;
//! then the output shape (a list) whose element count is the product of the counts.

use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::layout::strides;
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::movement::{copy_elems, unflatten};
use crate::kernels::{bad_shape, KernelError, Result, MAX_RANK};
use crate::tensor::{TensorType, View, ViewMut};

/// One dimension of a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceDim {
    /// The first index.
    pub begin: i32,
    /// The step (non-zero).
    pub stride: i32,
    /// How many elements.
    pub count: u32,
}

/// A strided slice.
#[derive(Debug, Clone, PartialEq)]
pub struct StridedSlice {
    /// One entry per input dimension.
    pub dims: Vec<SliceDim>,
    /// The output shape (same element count as the counts).
    pub shape: Vec<u32>,
}

impl Kernel for StridedSlice {
    fn name(&self) -> &'static str {
        "STRIDED_SLICE"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let n = w.len("rank", MAX_RANK)?;
        let mut dims = Vec::with_capacity(n);
        for _ in 0..n {
            let begin = w.i32("begin")?;
            let stride = w.i32("stride")?;
            if stride == 0 {
                return Err(w.err("stride must be non-zero"));
            }
            dims.push(SliceDim {
                begin,
                stride,
                count: w.u32("count")?,
            });
        }
        let shape = w.list("output rank", MAX_RANK)?;
        Ok(StridedSlice { dims, shape })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.dims.len() as u32);
        for d in &self.dims {
            w.extend([enc::i(d.begin), enc::i(d.stride), d.count]);
        }
        enc::list(w, self.shape.iter().copied());
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let shape = &inputs[0].shape;
        if shape.len() != self.dims.len() {
            return Err(bad_shape(
                self.name(),
                format!("{} slice dims for rank {}", self.dims.len(), shape.len()),
            ));
        }
        let mut n = 1usize;
        for (i, (d, &size)) in self.dims.iter().zip(shape).enumerate() {
            if d.count > 0 {
                let last = i64::from(d.begin) + i64::from(d.stride) * (i64::from(d.count) - 1);
                let ok = |v: i64| v >= 0 && v < size as i64;
                if !ok(i64::from(d.begin)) || !ok(last) {
                    return Err(bad_shape(
                        self.name(),
                        format!("dimension {i}: slice out of range of size {size}"),
                    ));
                }
            }
            n = n
                .checked_mul(d.count as usize)
                .ok_or(KernelError::TooLarge)?;
        }
        let out: Vec<usize> = self.shape.iter().map(|&d| d as usize).collect();
        let m = out
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or(KernelError::TooLarge)?;
        if m != n {
            return Err(bad_shape(
                self.name(),
                format!("output shape {out:?} does not hold {n} elements"),
            ));
        }
        Ok(vec![out])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let es = x.ty.dtype.size() as usize;
        let istr = strides(x.shape());
        let counts: Vec<usize> = self.dims.iter().map(|d| d.count as usize).collect();
        let mut idx = vec![0usize; counts.len()];
        let dims = &self.dims;
        copy_elems(es, x.bytes, outputs[0].bytes, &[], |i| {
            unflatten(i, &counts, &mut idx);
            let mut off = 0i64;
            for ((d, &k), &s) in dims.iter().zip(&idx).zip(&istr) {
                off += (i64::from(d.begin) + i64::from(d.stride) * k as i64) * s as i64;
            }
            usize::try_from(off).ok()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    #[test]
    fn reverses_and_steps() {
        let ty = TensorType::new(DType::U8, &[2, 3]);
        let k = StridedSlice {
            dims: vec![
                SliceDim {
                    begin: 1,
                    stride: -1,
                    count: 2,
                },
                SliceDim {
                    begin: 0,
                    stride: 2,
                    count: 2,
                },
            ],
            shape: vec![4],
        };
        let oshape = k.output_shapes(&[&ty]).unwrap().remove(0);
        let oty = TensorType::new(DType::U8, &oshape);
        let data = [1u8, 2, 3, 4, 5, 6];
        let mut out = [0u8; 4];
        k.run(
            &[View {
                ty: &ty,
                bytes: &data,
            }],
            &mut [ViewMut {
                ty: &oty,
                bytes: &mut out,
            }],
        )
        .unwrap();
        assert_eq!(out, [4, 6, 1, 3]);
        let mut w = Vec::new();
        k.encode(&mut w);
        let mut words = Words::new(0, &w);
        assert_eq!(StridedSlice::decode(&mut words).unwrap(), k);
    }
}
