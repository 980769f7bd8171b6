//! NNAPI L2_NORMALIZATION along any axis: `x / max(sqrt(sum x^2), 1e-6)` (TFLite's float
//! kernel, which NNAPI uses for the last axis; NNAPI's own loop for other axes omits the
//! epsilon, which only differs for an all-zero vector, where it would give NaN).
//! float32; float16 computes in float32. Quantised u8/i8 (output scale 1/128, zero point
//! 128 / 0): the integer differences from the input zero point are normalised in fixed
//! point as the NNAPI reference does (see `l2_q`).
//!
//! Parameter words: axis (i32).

use crate::kernels::kernel::{enc, fixed_quant_check, same_dtype, Kernel, Words};
use crate::kernels::layout::resolve_axis;
use crate::kernels::quant::fixed;
use crate::kernels::quant::{
    multiply_by_quantized_multiplier, multiply_by_quantized_multiplier_smaller_than_one_exp,
    QuantElem,
};
use crate::kernels::{bad_shape, Result, Tensor};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

/// L2 normalisation along an axis.
#[derive(Debug, Clone, PartialEq)]
pub struct L2Normalization {
    /// The axis (negative counts from the end).
    pub axis: i32,
}

impl Kernel for L2Normalization {
    fn name(&self) -> &'static str {
        "L2_NORMALIZATION"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(L2Normalization {
            axis: w.axis("axis")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(enc::i(self.axis));
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
            DType::U8 => Some((1.0 / 128.0, 128)),
            DType::I8 => Some((1.0 / 128.0, 0)),
            _ => None,
        })
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let axis = resolve_axis(self.name(), self.axis, x.shape().len())?;
        let zp = x.ty.quant.zero_point;
        match x.ty.dtype {
            DType::U8 => {
                l2_q(axis, x.shape(), x.u8s()?, zp, outputs[0].u8s_mut()?);
                return Ok(());
            }
            DType::I8 => {
                l2_q(axis, x.shape(), x.i8s()?, zp, outputs[0].i8s_mut()?);
                return Ok(());
            }
            _ => {}
        }
        widen_f16(inputs, outputs, |ins, outs| {
            let x = Tensor::f32(&ins[0])?;
            let axis = resolve_axis(self.name(), self.axis, x.shape.len())?;
            l2_normalization_f32(axis, x, outs[0].f32s_mut()?);
            Ok(())
        })
    }
}

/// Quantised L2 normalisation of `xs` (zero point `zp`) along `axis`, as the NNAPI
/// reference: the sum of squared differences gets a fixed-point inverse square root
/// (TFLite's `GetInvSqrtQuantizedMultiplierExp`), by which each difference is multiplied
/// into the output grid (scale 1/128, zero point 128 for u8, 0 for i8).
///
/// The reference has two roundings: uint8 on any axis and int8 off the last axis multiply
/// `128 * diff` and shift right; int8 on the last axis (TFLite's integer kernel) folds the
/// `* 128` into the shift of one `MultiplyByQuantizedMultiplier`.
fn l2_q<T: QuantElem>(axis: usize, shape: &[usize], xs: &[T], zp: i32, out: &mut [T]) {
    /// The output's 7 fractional bits (scale 1/128).
    const OUTPUT_SHIFT: i32 = 7;
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let out_zp = T::MIN + 128;
    let folded_shift = T::MIN < 0 && axis + 1 == shape.len();
    for o in 0..outer {
        let base = o * n * inner;
        for i in 0..inner {
            let at = |k: usize| base + k * inner + i;
            let diff = |k: usize| xs[at(k)].to_i32() - zp;
            let sum = (0..n).fold(0i32, |acc, k| acc.wrapping_add(diff(k) * diff(k)));
            let (inv, shift) = fixed::inv_sqrt_quantized_multiplier_exp(sum, -1);
            for k in 0..n {
                let scaled = if folded_shift {
                    multiply_by_quantized_multiplier(diff(k), inv, shift + OUTPUT_SHIFT)
                } else {
                    multiply_by_quantized_multiplier_smaller_than_one_exp(
                        diff(k) << OUTPUT_SHIFT,
                        inv,
                        shift,
                    )
                };
                out[at(k)] = T::saturate_from_i32(scaled + out_zp);
            }
        }
    }
}

/// TFLite's epsilon: the norm is clamped from below to this value.
pub(crate) const L2_EPSILON: f32 = 1e-6;

/// `out = x / max(sqrt(sum(x^2 along axis)), 1e-6)`.
pub(crate) fn l2_normalization_f32(axis: usize, x: Tensor<'_>, out: &mut [f32]) {
    let n = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let outer: usize = x.shape[..axis].iter().product();
    for o in 0..outer {
        let base = o * n * inner;
        for i in 0..inner {
            let mut sum = 0.0f32;
            for k in 0..n {
                let v = x.data[base + k * inner + i];
                sum += v * v;
            }
            let norm = sum.sqrt().max(L2_EPSILON);
            for k in 0..n {
                let at = base + k * inner + i;
                out[at] = x.data[at] / norm;
            }
        }
    }
}

#[cfg(test)]
mod quant_tests {
    use super::*;
    use crate::kernels::conv::testref::{small_shape, Q8};
    use crate::kernels::conv::testutil::run_typed;
    use crate::kernels::KernelOp;
    use proptest::prelude::*;

    proptest! {
        /// u8 / i8 on any axis against dequantise -> f64 `x / |x|` -> requantise (scale
        /// 1/128), within 1; an all-zero vector gives the output zero point.
        #[test]
        fn quant_normalises_within_one_of_f64(
            shape in small_shape(),
            axis_pick in 0usize..4,
            q in Q8::arb(),
            raw in proptest::collection::vec(0i32..256, 27),
            centre in any::<bool>(),
        ) {
            let axis = axis_pick % shape.len();
            let n: usize = shape.iter().product();
            let oq = Q8 { scale: 1.0 / 128.0, zp: q.lo() + 128, ..q };
            // Sometimes every element sits on the zero point.
            let raw: Vec<i32> = raw[..n].iter().map(|&v| if centre { q.zp - q.lo() } else { v }).collect();
            let (xs, bytes) = q.store(&raw);
            let op = KernelOp::from(L2Normalization { axis: axis as i32 });
            let out = oq.load(&run_typed(&op, &[(q.ty(&shape), bytes)], oq.ty(&shape)).unwrap());
            let real: Vec<f64> = xs.iter().map(|&v| q.real(v)).collect();
            let inner: usize = shape[axis + 1..].iter().product();
            let len = shape[axis];
            for (i, &got) in out.iter().enumerate() {
                // The vector through element i: same outer and inner index.
                let base = i - (i / inner % len) * inner;
                let norm = (0..len).map(|k| real[base + k * inner].powi(2)).sum::<f64>().sqrt();
                let want = oq.quantize(if norm > 0.0 { real[i] / norm } else { 0.0 });
                prop_assert!((got - want).abs() <= 1, "{} vs {} at {}", got, want, i);
            }
        }
    }
}
