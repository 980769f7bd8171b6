//! NNAPI LOCAL_RESPONSE_NORMALIZATION along any axis:
//! `out[i] = x[i] * (bias + alpha * sum_{|d - i| <= radius} x[d]^2)^-beta`, the window
//! clipped to the axis, computed in float32 as the reference. float16 computes in float32.
//!
//! Parameter words: radius (u32), bias, alpha, beta (finite f32), axis (i32).

use crate::kernels::kernel::{enc, same_dtype, Kernel, Words};
use crate::kernels::layout::resolve_axis;
use crate::kernels::{bad_shape, Result, Tensor};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

/// Local response normalisation along an axis.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalResponseNorm {
    /// Half-width of the window.
    pub radius: u32,
    /// Added to the scaled sum of squares.
    pub bias: f32,
    /// Scale of the sum of squares.
    pub alpha: f32,
    /// Exponent.
    pub beta: f32,
    /// The axis (negative counts from the end).
    pub axis: i32,
}

impl Kernel for LocalResponseNorm {
    fn name(&self) -> &'static str {
        "LOCAL_RESPONSE_NORMALIZATION"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(LocalResponseNorm {
            radius: w.u32("radius")?,
            bias: w.finite_f32("bias")?,
            alpha: w.finite_f32("alpha")?,
            beta: w.finite_f32("beta")?,
            axis: w.axis("axis")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([
            self.radius,
            self.bias.to_bits(),
            self.alpha.to_bits(),
            self.beta.to_bits(),
            enc::i(self.axis),
        ]);
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
            lrn_f32(self, axis, x, outs[0].f32s_mut()?);
            Ok(())
        })
    }
}

/// The float32 kernel; `axis` was resolved.
pub(crate) fn lrn_f32(p: &LocalResponseNorm, axis: usize, x: Tensor<'_>, out: &mut [f32]) {
    let n = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let outer: usize = x.shape[..axis].iter().product();
    let r = (p.radius as usize).min(n);
    for o in 0..outer {
        let base = o * n * inner;
        for j in 0..inner {
            let at = |k: usize| base + k * inner + j;
            for i in 0..n {
                let lo = i.saturating_sub(r);
                let hi = (i + r + 1).min(n);
                let mut sum = 0.0f32;
                for d in lo..hi {
                    let v = x.data[at(d)];
                    sum += v * v;
                }
                let m = (p.bias + p.alpha * sum).powf(-p.beta);
                out[at(i)] = x.data[at(i)] * m;
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
        fn matches_f64_reference(xs in proptest::collection::vec(-4.0f32..4.0, 6), radius in 0u32..4) {
            let p = LocalResponseNorm { radius, bias: 1.0, alpha: 0.5, beta: 0.75, axis: -1 };
            let shape = [2usize, 3];
            let mut out = vec![0f32; 6];
            lrn_f32(&p, 1, Tensor { shape: &shape, data: &xs }, &mut out);
            for row in 0..2 {
                for i in 0..3usize {
                    let r = radius as usize;
                    let s: f64 = (i.saturating_sub(r)..(i + r + 1).min(3))
                        .map(|d| f64::from(xs[row * 3 + d]).powi(2)).sum();
                    let want = f64::from(xs[row * 3 + i]) * (1.0 + 0.5 * s).powf(-0.75);
                    prop_assert!((f64::from(out[row * 3 + i]) - want).abs() < 1e-4);
                }
            }
        }
    }
}
