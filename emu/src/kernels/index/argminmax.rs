//! NNAPI ARGMAX and ARGMIN along one axis: the int32 index of the first extreme element
//! (ties keep the lowest index, as the reference's strict comparison). The axis is
//! removed from the output shape (a rank-1 input gives `[1]`). Inputs float32, float16, int32, u8, i8 (quantised values
//! compare as stored integers, which orders them as their real values).
//!
//! Parameter words: is_max, axis (i32).

use crate::kernels::kernel::{enc, same_dtype, Kernel, Words};
use crate::kernels::layout::resolve_axis;
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// ARGMAX (`is_max`) or ARGMIN.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgMinMax {
    /// ARGMAX (else ARGMIN).
    pub is_max: bool,
    /// The axis (negative counts from the end).
    pub axis: i32,
}

/// The index of the first extreme element of each line along the axis.
fn arg_impl<T: Copy + PartialOrd>(
    x: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    is_max: bool,
    out: &mut [i32],
) {
    if n == 0 {
        out.fill(0);
        return;
    }
    for o in 0..outer {
        for j in 0..inner {
            let mut best = x[o * n * inner + j];
            let mut idx = 0usize;
            for i in 1..n {
                let v = x[(o * n + i) * inner + j];
                if (is_max && v > best) || (!is_max && v < best) {
                    best = v;
                    idx = i;
                }
            }
            out[o * inner + j] = i32::try_from(idx).unwrap_or(i32::MAX);
        }
    }
}

impl Kernel for ArgMinMax {
    fn name(&self) -> &'static str {
        if self.is_max {
            "ARGMAX"
        } else {
            "ARGMIN"
        }
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(ArgMinMax {
            is_max: w.bool("is_max")?,
            axis: w.axis("axis")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([enc::b(self.is_max), enc::i(self.axis)]);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        same_dtype(
            self.name(),
            inputs,
            &[DType::F32, DType::F16, DType::I32, DType::U8, DType::I8],
        )?;
        let x = &inputs[0].shape;
        if x.is_empty() {
            return Err(bad_shape(self.name(), "input must have rank >= 1"));
        }
        let axis = resolve_axis(self.name(), self.axis, x.len())?;
        let mut out = x.clone();
        out.remove(axis);
        // A rank-1 input gives shape [1], as the reference.
        if out.is_empty() {
            out.push(1);
        }
        Ok(vec![out])
    }

    fn check_outputs(&self, _inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        match outputs.first() {
            Some(o) if o.dtype != DType::I32 => Err(KernelError::DType {
                expected: DType::I32,
                got: o.dtype,
            }),
            _ => Ok(()),
        }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let shape = x.shape();
        let axis = resolve_axis(self.name(), self.axis, shape.len())?;
        let n = shape[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        let outer: usize = shape[..axis].iter().product();
        let out = outputs[0].i32s_mut()?;
        let m = self.is_max;
        match x.ty.dtype {
            DType::F32 => arg_impl(x.f32s()?, outer, n, inner, m, out),
            DType::F16 => arg_impl(x.f16s()?, outer, n, inner, m, out),
            DType::I32 => arg_impl(x.i32s()?, outer, n, inner, m, out),
            DType::U8 => arg_impl(x.u8s()?, outer, n, inner, m, out),
            DType::I8 => arg_impl(x.i8s()?, outer, n, inner, m, out),
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
    fn ties_keep_first() {
        let mut out = [9i32; 1];
        arg_impl(&[1.0f32, 3.0, 3.0, 0.0], 1, 4, 1, true, &mut out);
        assert_eq!(out, [1]);
        arg_impl(&[1.0f32, 0.0, 3.0, 0.0], 1, 4, 1, false, &mut out);
        assert_eq!(out, [1]);
    }

    proptest! {
        #[test]
        fn matches_naive(xs in proptest::collection::vec(-5i32..5, 12), is_max: bool) {
            // shape [3, 4], axis 1
            let mut out = [0i32; 3];
            arg_impl(&xs, 3, 4, 1, is_max, &mut out);
            for r in 0..3 {
                let row = &xs[r * 4..r * 4 + 4];
                let best = if is_max { *row.iter().max().unwrap() } else { *row.iter().min().unwrap() };
                let want = row.iter().position(|&v| v == best).unwrap() as i32;
                prop_assert_eq!(out[r], want);
            }
        }
    }
}
