//! NNAPI RELU, RELU1, RELU6, LOGISTIC, TANH, FLOOR on float32 and float16; RELU, RELU1,
//! RELU6, LOGISTIC and TANH also on uint8 / int8.
//!
//! Quantised RELU* clamp the stored values to the activation range of the input's
//! quantisation (as the NNAPI reference: no requantisation, the output keeps the input's
//! parameters). Quantised LOGISTIC / TANH require the HAL's fixed output quantisation
//! (logistic 1/256 with zero point 0 (u8) / -128 (i8), tanh 1/128 with 128 / 0); they
//! compute as the NNAPI reference (TFLite's uint8 `optimized_ops` and int8
//! `reference_integer_ops` kernels): the input difference is rescaled to a Q4.27 number,
//! gemmlowp's fixed-point `logistic` / `tanh` gives a Q0.31 result, which is rounded to the
//! output grid; differences beyond the Q4 range saturate.
//!
//! Parameter words: kind (Relu 0, Relu1 1, Relu6 2, Logistic 3, Tanh 4, Floor 5).

use super::{decode_kind, kind_enum};
use crate::kernels::kernel::{fixed_quant_check, same_dtype, Kernel, Words};
use crate::kernels::quant::fixed::{self, InputStage};
use crate::kernels::quant::{qerr, quantized_activation_range, rounding_divide_by_pot, QuantElem};
use crate::kernels::simd::{vectorized, Body};
use crate::kernels::{clamp_nan, KernelError, Result};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

kind_enum! {
    /// Which function.
    pub enum UnaryKind {
        /// max(x, 0)
        Relu => "RELU",
        /// clamp(x, -1, 1)
        Relu1 => "RELU1",
        /// clamp(x, 0, 6)
        Relu6 => "RELU6",
        /// 1 / (1 + e^-x)
        Logistic => "LOGISTIC",
        /// tanh(x)
        Tanh => "TANH",
        /// floor(x)
        Floor => "FLOOR",
    }
}

/// `out[i] = f(x[i])`.
#[derive(Debug, Clone, PartialEq)]
pub struct Unary {
    /// The function.
    pub kind: UnaryKind,
}

/// Applies `kind` element-wise.
pub(crate) fn unary_f32(kind: UnaryKind, x: &[f32], out: &mut [f32]) {
    // One loop per function (a closure per kind, not a call per element), built for the
    // widest vector unit.
    struct Map<'a, F>(&'a [f32], &'a mut [f32], F);
    impl<F: Fn(f32) -> f32> Body for Map<'_, F> {
        type Out = ();
        #[inline(always)]
        fn run(self) {
            let Map(x, out, f) = self;
            for (o, &v) in out.iter_mut().zip(x) {
                *o = f(v);
            }
        }
    }
    fn map(x: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
        vectorized(Map(x, out, f));
    }
    match kind {
        UnaryKind::Relu => map(x, out, |v| clamp_nan(v, 0.0, f32::INFINITY)),
        UnaryKind::Relu1 => map(x, out, |v| clamp_nan(v, -1.0, 1.0)),
        UnaryKind::Relu6 => map(x, out, |v| clamp_nan(v, 0.0, 6.0)),
        UnaryKind::Logistic => map(x, out, |v| 1.0 / (1.0 + (-v).exp())),
        UnaryKind::Tanh => map(x, out, f32::tanh),
        UnaryKind::Floor => map(x, out, f32::floor),
    }
}

impl Unary {
    /// The quantised forms (see the module documentation).
    fn run_quant<T: QuantElem>(&self, it: &TensorType, x: &[T], out: &mut [T]) -> Result<()> {
        let (s, zp) = (it.quant.scale, it.quant.zero_point);
        let act = match self.kind {
            UnaryKind::Relu => Some(1),
            UnaryKind::Relu1 => Some(2),
            UnaryKind::Relu6 => Some(3),
            _ => None,
        };
        if let Some(act) = act {
            let (lo, hi) = quantized_activation_range(act, s, zp, T::MIN, T::MAX);
            for (o, &v) in out.iter_mut().zip(x) {
                *o = T::saturate_from_i32(v.to_i32().clamp(lo, hi.max(lo)));
            }
            return Ok(());
        }
        // The reference's input stage: 4 integer bits (|x| < 16).
        const INPUT_INTEGER_BITS: i32 = 4;
        let stage = InputStage::new(
            f64::from(s) * f64::from(1u32 << (31 - INPUT_INTEGER_BITS)),
            INPUT_INTEGER_BITS,
        )
        .map_err(qerr(self.name()))?;
        // The Q0 result to the output grid: logistic has 8 fractional bits and the zero at
        // the type's minimum, tanh 7 fractional bits and the zero 128 above the minimum.
        let (f, right_shift, offset): (fn(i32, i32) -> i32, i32, i32) = match self.kind {
            UnaryKind::Logistic => (fixed::logistic, 23, T::MIN),
            UnaryKind::Tanh => (fixed::tanh, 24, T::MIN + 128),
            _ => {
                return Err(KernelError::UnsupportedDType {
                    op: self.name(),
                    dtype: it.dtype,
                })
            }
        };
        for (o, &v) in out.iter_mut().zip(x) {
            let centred = v.to_i32() - zp;
            *o = if centred <= -stage.radius {
                T::saturate_from_i32(T::MIN)
            } else if centred >= stage.radius {
                T::saturate_from_i32(T::MAX)
            } else {
                let q0 = f(stage.rescale(centred), INPUT_INTEGER_BITS);
                // The reference clamps a rounded 1.0 (256 for logistic) to the maximum.
                T::saturate_from_i32(rounding_divide_by_pot(q0, right_shift) + offset)
            };
        }
        Ok(())
    }
}

impl Kernel for Unary {
    /// Every element is mapped from its input.
    fn overwrites_f32_outputs(&self) -> bool {
        true
    }

    fn as_activation(&self) -> Option<crate::kernels::Activation> {
        use crate::kernels::Activation;
        match self.kind {
            UnaryKind::Relu => Some(Activation::Relu),
            UnaryKind::Relu1 => Some(Activation::Relu1),
            UnaryKind::Relu6 => Some(Activation::Relu6),
            _ => None,
        }
    }

    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let kind = decode_kind(w, "unary", UnaryKind::from_word)?;
        Ok(Unary { kind })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.kind.word());
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let allowed: &[DType] = if self.kind == UnaryKind::Floor {
            &[DType::F32, DType::F16]
        } else {
            &[DType::F32, DType::F16, DType::U8, DType::I8]
        };
        same_dtype(self.name(), inputs, allowed)?;
        Ok(vec![inputs[0].shape.clone()])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let kind = self.kind;
        fixed_quant_check(self.name(), inputs, outputs, |dt| match (kind, dt) {
            (UnaryKind::Logistic, DType::U8) => Some((1.0 / 256.0, 0)),
            (UnaryKind::Logistic, DType::I8) => Some((1.0 / 256.0, -128)),
            (UnaryKind::Tanh, DType::U8) => Some((1.0 / 128.0, 128)),
            (UnaryKind::Tanh, DType::I8) => Some((1.0 / 128.0, 0)),
            _ => None,
        })?;
        let dt = inputs[0].dtype;
        if matches!(dt, DType::U8 | DType::I8)
            && !(inputs[0].quant.scale > 0.0 && inputs[0].quant.scale.is_finite())
        {
            return Err(KernelError::InvalidShape {
                op: self.name(),
                reason: "input scale must be > 0".into(),
            });
        }
        Ok(())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        match inputs[0].ty.dtype {
            DType::U8 => {
                let x = inputs[0].u8s()?;
                return self.run_quant(inputs[0].ty, x, outputs[0].u8s_mut()?);
            }
            DType::I8 => {
                let x = inputs[0].i8s()?;
                return self.run_quant(inputs[0].ty, x, outputs[0].i8s_mut()?);
            }
            _ => {}
        }
        widen_f16(inputs, outputs, |ins, outs| {
            unary_f32(self.kind, ins[0].f32s()?, outs[0].f32s_mut()?);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn quant_relu_logistic_tanh(
            kind in 0usize..5,
            s in 0.01f32..0.5,
            zp in 0i32..256,
            x in proptest::collection::vec(0u8..=255, 1..32),
        ) {
            let kind = UnaryKind::ALL[kind];
            let k = Unary { kind };
            let it = TensorType::quantized(DType::U8, &[x.len()], s, zp);
            let ot = match kind {
                UnaryKind::Logistic => TensorType::quantized(DType::U8, &[x.len()], 1.0 / 256.0, 0),
                UnaryKind::Tanh => TensorType::quantized(DType::U8, &[x.len()], 1.0 / 128.0, 128),
                _ => it.clone(),
            };
            k.check_outputs(&[&it], &[&ot]).unwrap();
            let mut out = vec![0u8; x.len()];
            k.run_quant(&it, &x, &mut out).unwrap();
            for (i, (&v, &o)) in x.iter().zip(&out).enumerate() {
                let real = f64::from(s) * f64::from(i32::from(v) - zp);
                let f = match kind {
                    UnaryKind::Relu => real.max(0.0),
                    UnaryKind::Relu1 => real.clamp(-1.0, 1.0),
                    UnaryKind::Relu6 => real.clamp(0.0, 6.0),
                    UnaryKind::Logistic => 1.0 / (1.0 + (-real).exp()),
                    _ => real.tanh(),
                };
                let want = ((f / f64::from(ot.quant.scale)).round() as i64
                    + i64::from(ot.quant.zero_point))
                    .clamp(0, 255);
                prop_assert!((i64::from(o) - want).abs() <= 1, "{:?} {}: {} vs {}", kind, i, o, want);
            }
        }
    }
}
