//! NNAPI SOFTMAX: `exp(beta*(x-max))` normalised along `axis` (negative counts from the end).
//! float32; float16 computes in float32. Quantised u8/i8 (output scale 1/256, zero point 0
//! / -128): the NNAPI reference uses gemmlowp's fixed-point exp; this kernel computes the
//! same probabilities in f64 from the stored integer differences and rounds them to the
//! output grid, which agrees within ±1 (the corpus tolerance).
//!
//! Parameter words: beta (f32, finite, > 0), axis (i32).

use crate::kernels::kernel::{enc, same_dtype, Kernel, Words};
use crate::kernels::layout::resolve_axis;
use crate::kernels::quant::QuantElem;
use crate::kernels::{bad_shape, Result, Tensor};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

/// Softmax along an axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Softmax {
    /// The inverse temperature.
    pub beta: f32,
    /// The axis (negative counts from the end).
    pub axis: i32,
}

impl Kernel for Softmax {
    fn name(&self) -> &'static str {
        "SOFTMAX"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let beta = w.f32("beta")?;
        if !(beta.is_finite() && beta > 0.0) {
            return Err(w.err(format!("beta must be finite and > 0, got {beta}")));
        }
        Ok(Softmax {
            beta,
            axis: w.axis("axis")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([self.beta.to_bits(), enc::i(self.axis)]);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        same_dtype(
            self.name(),
            inputs,
            &[DType::F32, DType::F16, DType::U8, DType::I8],
        )?;
        let x = &inputs[0].shape;
        if x.is_empty() {
            return Err(bad_shape(self.name(), "input must have rank >= 1"));
        }
        resolve_axis(self.name(), self.axis, x.len())?;
        Ok(vec![x.clone()])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let axis = resolve_axis(self.name(), self.axis, x.shape().len())?;
        let coef = f64::from(self.beta) * f64::from(x.ty.quant.scale);
        let (oscale, ozp) = (outputs[0].ty.quant.scale, outputs[0].ty.quant.zero_point);
        match x.ty.dtype {
            DType::U8 => {
                let xs: Vec<i32> = x.u8s()?.iter().map(|&v| i32::from(v)).collect();
                let o = outputs[0].u8s_mut()?;
                return softmax_q(coef, axis, x.shape(), &xs, oscale, ozp, o);
            }
            DType::I8 => {
                let xs: Vec<i32> = x.i8s()?.iter().map(|&v| i32::from(v)).collect();
                let o = outputs[0].i8s_mut()?;
                return softmax_q(coef, axis, x.shape(), &xs, oscale, ozp, o);
            }
            _ => {}
        }
        widen_f16(inputs, outputs, |ins, outs| {
            let x = Tensor::f32(&ins[0])?;
            let axis = resolve_axis(self.name(), self.axis, x.shape.len())?;
            softmax_f32(self.beta, axis, x, outs[0].f32s_mut()?);
            Ok(())
        })
    }
}

/// Quantised softmax of stored integers `xs` (`coef` = beta * input scale) along `axis`.
fn softmax_q<T: QuantElem>(
    coef: f64,
    axis: usize,
    shape: &[usize],
    xs: &[i32],
    oscale: f32,
    ozp: i32,
    out: &mut [T],
) -> Result<()> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    if n == 0 || inner == 0 || oscale.is_nan() || oscale <= 0.0 {
        return Ok(());
    }
    let inv_scale = 1.0 / f64::from(oscale);
    let mut e = vec![0f64; n];
    for o in 0..outer {
        let base = o * n * inner;
        for i in 0..inner {
            let at = |k: usize| base + k * inner + i;
            let max = (0..n).map(|k| xs[at(k)]).max().unwrap_or(0);
            let mut sum = 0.0;
            for (k, ek) in e.iter_mut().enumerate() {
                *ek = (coef * f64::from(xs[at(k)] - max)).exp();
                sum += *ek;
            }
            for (k, &ek) in e.iter().enumerate() {
                let q = (ek / sum * inv_scale).round() as i32;
                out[at(k)] = T::saturate_from_i32(q.saturating_add(ozp));
            }
        }
    }
    Ok(())
}

/// `out = exp(beta * (x - max)) / sum` along `axis`.
pub(crate) fn softmax_f32(beta: f32, axis: usize, x: Tensor<'_>, out: &mut [f32]) {
    let n = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let outer: usize = x.shape[..axis].iter().product();
    if n == 0 || inner == 0 {
        return;
    }
    if inner == 1 {
        for (xs, os) in x.data.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f32;
            for (o, &v) in os.iter_mut().zip(xs) {
                *o = ((v - max) * beta).exp();
                sum += *o;
            }
            let inv = 1.0 / sum;
            for o in os.iter_mut() {
                *o *= inv;
            }
        }
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
                let e = ((x.data[at(k)] - max) * beta).exp();
                out[at(k)] = e;
                sum += e;
            }
            let inv = 1.0 / sum;
            for k in 0..n {
                out[at(k)] *= inv;
            }
        }
    }
}

#[cfg(test)]
mod quant_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The u8 kernel against dequantise -> f64 softmax -> requantise, within 1.
        #[test]
        fn u8_within_one_of_f64(xs in proptest::collection::vec(0u8..=255, 6), scale in 0.01f32..0.5) {
            let q: Vec<i32> = xs.iter().map(|&v| i32::from(v)).collect();
            let mut out = vec![0u8; 6];
            softmax_q(f64::from(scale), 0, &[6], &q, 1.0 / 256.0, 0, &mut out).unwrap();
            let real: Vec<f64> = xs.iter().map(|&v| f64::from(scale) * (f64::from(v) - 128.0)).collect();
            let m = real.iter().cloned().fold(f64::MIN, f64::max);
            let s: f64 = real.iter().map(|r| (r - m).exp()).sum();
            for (o, r) in out.iter().zip(&real) {
                let want = ((r - m).exp() / s * 256.0).round().min(255.0);
                prop_assert!((f64::from(*o) - want).abs() <= 1.0);
            }
        }
    }
}
