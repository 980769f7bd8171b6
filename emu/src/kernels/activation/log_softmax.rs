//! NNAPI LOG_SOFTMAX: `beta * (x - max) - log(sum(exp(beta * (x - max))))` along `axis`,
//! the exponentials and logarithm in f64 as the reference. float32; float16 computes in
//! float32.
//!
//! Parameter words: beta (finite f32), axis (i32).

use crate::kernels::kernel::{enc, same_dtype, Kernel, Words};
use crate::kernels::layout::resolve_axis;
use crate::kernels::{bad_shape, Result, Tensor};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

/// Log-softmax along an axis.
#[derive(Debug, Clone, PartialEq)]
pub struct LogSoftmax {
    /// The inverse temperature.
    pub beta: f32,
    /// The axis (negative counts from the end).
    pub axis: i32,
}

impl Kernel for LogSoftmax {
    fn name(&self) -> &'static str {
        "LOG_SOFTMAX"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(LogSoftmax {
            beta: w.finite_f32("beta")?,
            axis: w.axis("axis")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([self.beta.to_bits(), enc::i(self.axis)]);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        same_dtype(self.name(), inputs, &[DType::F32, DType::F16])?;
        let x = &inputs[0].shape;
        if x.is_empty() {
            return Err(bad_shape(self.name(), "input must have rank >= 1"));
        }
        resolve_axis(self.name(), self.axis, x.len())?;
        Ok(vec![x.clone()])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        widen_f16(inputs, outputs, |ins, outs| {
            let x = Tensor::f32(&ins[0])?;
            let axis = resolve_axis(self.name(), self.axis, x.shape.len())?;
            log_softmax_f32(self.beta, axis, x, outs[0].f32s_mut()?);
            Ok(())
        })
    }
}

/// The float32 kernel; `axis` was resolved.
pub(crate) fn log_softmax_f32(beta: f32, axis: usize, x: Tensor<'_>, out: &mut [f32]) {
    let n = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let outer: usize = x.shape[..axis].iter().product();
    if n == 0 {
        return;
    }
    for o in 0..outer {
        let base = o * n * inner;
        for i in 0..inner {
            let at = |k: usize| base + k * inner + i;
            let max = (0..n)
                .map(|k| x.data[at(k)])
                .fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f32;
            for k in 0..n {
                sum += f64::from((x.data[at(k)] - max) * beta).exp() as f32;
            }
            let log_sum = f64::from(sum).ln() as f32;
            for k in 0..n {
                out[at(k)] = (x.data[at(k)] - max) * beta - log_sum;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn exp_sums_to_one(xs in proptest::collection::vec(-5.0f32..5.0, 5)) {
            let mut out = vec![0f32; 5];
            log_softmax_f32(1.0, 0, Tensor { shape: &[5], data: &xs }, &mut out);
            let s: f64 = out.iter().map(|&v| f64::from(v).exp()).sum();
            prop_assert!((s - 1.0).abs() < 1e-4);
        }
    }
}
