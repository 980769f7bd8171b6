//! NNAPI SOFTMAX: `exp(beta*(x-max))` normalised along `axis` (negative counts from the end).
//! float32; float16 computes in float32. Quantised u8/i8 (output scale 1/256, zero point 0
//! / -128) compute in fixed point as the NNAPI reference does (see `softmax_q`).
//!
//! Parameter words: beta (f32, finite, > 0), axis (i32).

use crate::kernels::kernel::{enc, fixed_quant_check, same_dtype, Kernel, Words};
use crate::kernels::layout::resolve_axis;
use crate::kernels::quant::fixed::{self, InputStage};
use crate::kernels::quant::{
    qerr, rounding_divide_by_pot, saturating_rounding_doubling_high_mul, QuantElem,
};
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

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        fixed_quant_check(self.name(), inputs, outputs, |dt| match dt {
            DType::U8 => Some((1.0 / 256.0, 0)),
            DType::I8 => Some((1.0 / 256.0, -128)),
            _ => None,
        })
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let axis = resolve_axis(self.name(), self.axis, x.shape().len())?;
        let scale = x.ty.quant.scale;
        match x.ty.dtype {
            DType::U8 => {
                let o = outputs[0].u8s_mut()?;
                return softmax_q(self.beta, scale, axis, x.shape(), x.u8s()?, o);
            }
            DType::I8 => {
                let o = outputs[0].i8s_mut()?;
                return softmax_q(self.beta, scale, axis, x.shape(), x.i8s()?, o);
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

/// Integer bits of the rescaled input differences (Q5.26): differences below -32 (before
/// beta) contribute nothing.
const SCALED_DIFF_INTEGER_BITS: i32 = 5;
/// Integer bits of the accumulated sum of exponentials (Q12.19).
const ACCUMULATION_INTEGER_BITS: i32 = 12;

/// Quantised softmax of stored integers `xs` along `axis`, as the NNAPI reference: the
/// differences from the row maximum are rescaled by `beta * input_scale` into Q5.26,
/// exponentiated with gemmlowp's fixed-point `exp`, summed in Q12.19, and each exponential
/// is multiplied by the fixed-point reciprocal of the sum and rounded to 8 fractional bits.
/// The output's zero is the type's minimum (scale 1/256, zero point 0 / -128).
fn softmax_q<T: QuantElem>(
    beta: f32,
    input_scale: f32,
    axis: usize,
    shape: &[usize],
    xs: &[T],
    out: &mut [T],
) -> Result<()> {
    let real = (f64::from(beta)
        * f64::from(input_scale)
        * f64::from(1u32 << (31 - SCALED_DIFF_INTEGER_BITS)))
    .min(f64::from(i32::MAX));
    let stage = InputStage::new(real, SCALED_DIFF_INTEGER_BITS).map_err(qerr("SOFTMAX"))?;
    let diff_min = -stage.radius;
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    // exp(diff) in Q0, or None for a difference too negative to count.
    let exp_of = |diff: i32| {
        (diff >= diff_min)
            .then(|| fixed::exp_on_negative_values(stage.rescale(diff), SCALED_DIFF_INTEGER_BITS))
    };
    for o in 0..outer {
        let base = o * n * inner;
        for i in 0..inner {
            let at = |k: usize| base + k * inner + i;
            let max = (0..n).map(|k| xs[at(k)].to_i32()).fold(T::MIN, i32::max);
            let sum = (0..n)
                .filter_map(|k| exp_of(xs[at(k)].to_i32() - max))
                .fold(0i32, |acc, e| {
                    acc.wrapping_add(fixed::rescale(e, 0, ACCUMULATION_INTEGER_BITS))
                });
            let (inv_sum, bits_over_unit) = fixed::reciprocal(sum, ACCUMULATION_INTEGER_BITS);
            for k in 0..n {
                let q = match exp_of(xs[at(k)].to_i32() - max) {
                    Some(e) => {
                        let p = saturating_rounding_doubling_high_mul(inv_sum, e);
                        rounding_divide_by_pot(p, bits_over_unit + 31 - 8).saturating_add(T::MIN)
                    }
                    None => T::MIN,
                };
                out[at(k)] = T::saturate_from_i32(q);
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
            let mut out = vec![0u8; 6];
            softmax_q(1.0, scale, 0, &[6], &xs, &mut out).unwrap();
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
