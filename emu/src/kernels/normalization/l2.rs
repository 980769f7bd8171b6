//! NNAPI L2_NORMALIZATION along any axis: `x / max(sqrt(sum x^2), 1e-6)` (TFLite's float
//! kernel, which NNAPI uses for the last axis; NNAPI's own loop for other axes omits the
//! epsilon, which only differs for an all-zero vector, where it would give NaN).
//! float32; float16 computes in float32. Quantised u8/i8 (output scale 1/128, zero point
//! 128 / 0): the integer differences from the input zero point are normalised; the
//! reference does this with a fixed-point inverse square root, here the exact quotient is
//! computed in f64 and rounded, which agrees within ±1 (the corpus tolerance).
//!
//! Parameter words: axis (i32).

use crate::kernels::kernel::{enc, same_dtype, Kernel, Words};
use crate::kernels::layout::resolve_axis;
use crate::kernels::quant::QuantElem;
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

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let axis = resolve_axis(self.name(), self.axis, x.shape().len())?;
        let zp = x.ty.quant.zero_point;
        let (oscale, ozp) = (outputs[0].ty.quant.scale, outputs[0].ty.quant.zero_point);
        match x.ty.dtype {
            DType::U8 => {
                let xs: Vec<i32> = x.u8s()?.iter().map(|&v| i32::from(v) - zp).collect();
                let o = outputs[0].u8s_mut()?;
                l2_q(axis, x.shape(), &xs, oscale, ozp, o);
                return Ok(());
            }
            DType::I8 => {
                let xs: Vec<i32> = x.i8s()?.iter().map(|&v| i32::from(v) - zp).collect();
                let o = outputs[0].i8s_mut()?;
                l2_q(axis, x.shape(), &xs, oscale, ozp, o);
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

/// Quantised L2 normalisation of zero-point-free integers `xs` along `axis`.
fn l2_q<T: QuantElem>(
    axis: usize,
    shape: &[usize],
    xs: &[i32],
    oscale: f32,
    ozp: i32,
    out: &mut [T],
) {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let inv_scale = if oscale > 0.0 {
        1.0 / f64::from(oscale)
    } else {
        0.0
    };
    for o in 0..outer {
        let base = o * n * inner;
        for i in 0..inner {
            let sum: f64 = (0..n)
                .map(|k| f64::from(xs[base + k * inner + i]).powi(2))
                .sum();
            let norm = sum.sqrt();
            for k in 0..n {
                let at = base + k * inner + i;
                let v = if norm > 0.0 {
                    (f64::from(xs[at]) / norm * inv_scale).round() as i32
                } else {
                    0
                };
                out[at] = T::saturate_from_i32(v.saturating_add(ozp));
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
