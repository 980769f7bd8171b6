//! NNAPI ABS, EXP, LOG, NEG, RSQRT, SIN, SQRT, ELU and HARD_SWISH (element-wise math).
//!
//! float32, and float16 computed in float32 as the reference does. ABS and NEG also take
//! int32 (wrapping). RSQRT also takes uint8 / int8: the reference itself dequantises in
//! float32, applies `1 / sqrt`, and quantises with `zero_point + round(y / scale)`, which
//! this does too. ELU: `max(0, x) + min(0, alpha * (exp(x) - 1))`. HARD_SWISH:
//! `x * relu6(x + 3) / 6`; on uint8 / int8 with the reference's 16-bit fixed-point path
//! (TFLite's reference HardSwish).
//!
//! Parameter words: kind (Abs 0, Exp 1, Log 2, Neg 3, Rsqrt 4, Sin 5, Sqrt 6, Elu 7,
//! HardSwish 8), alpha (f32 bits; ELU only, 0 otherwise).

use super::{decode_kind, kind_enum};
use crate::kernels::kernel::{same_dtype, Kernel, Words};
use crate::kernels::quant::{quantize_multiplier, rounding_divide_by_pot, QuantElem};
use crate::kernels::{KernelError, Result};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

kind_enum! {
    /// Which function.
    pub enum MathKind {
        /// |x|
        Abs => "ABS",
        /// e^x
        Exp => "EXP",
        /// ln x
        Log => "LOG",
        /// -x
        Neg => "NEG",
        /// 1 / sqrt(x)
        Rsqrt => "RSQRT",
        /// sin x
        Sin => "SIN",
        /// sqrt x
        Sqrt => "SQRT",
        /// exponential linear unit with `alpha`
        Elu => "ELU",
        /// x * relu6(x + 3) / 6
        HardSwish => "HARD_SWISH",
    }
}

/// `out[i] = f(x[i])`.
#[derive(Debug, Clone, PartialEq)]
pub struct Math {
    /// The function.
    pub kind: MathKind,
    /// ELU's alpha (0 for the others).
    pub alpha: f32,
}

impl Math {
    fn f(&self, x: f32) -> f32 {
        match self.kind {
            MathKind::Abs => x.abs(),
            MathKind::Exp => x.exp(),
            MathKind::Log => x.ln(),
            MathKind::Neg => -x,
            MathKind::Rsqrt => 1.0 / x.sqrt(),
            MathKind::Sin => x.sin(),
            MathKind::Sqrt => x.sqrt(),
            MathKind::Elu => 0f32.max(x) + 0f32.min(self.alpha * (x.exp() - 1.0)),
            MathKind::HardSwish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
        }
    }

    fn run_quant<T: QuantElem>(&self, it: &TensorType, ot: &TensorType, x: &[T], o: &mut [T]) {
        if self.kind == MathKind::HardSwish {
            hard_swish_quant(it, ot, x, o);
            return;
        }
        let (s, zp) = (it.quant.scale, it.quant.zero_point);
        let (os, ozp) = (ot.quant.scale, ot.quant.zero_point as f32);
        for (d, &v) in o.iter_mut().zip(x) {
            let y = self.f(s * (v.to_i32() - zp) as f32);
            let q = (ozp + (y / os).round()).clamp(T::MIN as f32, T::MAX as f32);
            // In range (NaN casts to 0).
            *d = T::saturate_from_i32(q as i32);
        }
    }
}

/// gemmlowp's 16-bit `SaturatingRoundingDoublingHighMul`.
fn srdhm16(a: i16, b: i16) -> i16 {
    if a == i16::MIN && b == i16::MIN {
        return i16::MAX;
    }
    let ab = i32::from(a) * i32::from(b);
    let nudge = if ab >= 0 { 1 << 14 } else { 1 - (1 << 14) };
    ((ab + nudge) / (1 << 15)) as i16
}

/// TFLite's 16-bit `SaturatingDoublingHighMul` (truncating).
fn sdhm16(a: i16, b: i16) -> i16 {
    if a == i16::MIN && b == i16::MIN {
        return i16::MAX;
    }
    ((i32::from(a) * i32::from(b)) / (1 << 15)) as i16
}

/// `v * 2^shift` saturated to i16 (`shift` in 0..=15).
fn sat_shl16(v: i16, shift: i32) -> i16 {
    let s = shift.clamp(0, 15) as u32;
    (i32::from(v) << s).clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16
}

/// TFLite's `DownScaleInt32ToInt16Multiplier`.
fn downscale16(m: i32) -> i16 {
    const ROUND: i32 = 1 << 15;
    if m >= i32::MAX - ROUND {
        return i16::MAX;
    }
    ((m + ROUND) >> 16) as i16
}

/// The reference's quantised HARD_SWISH (parameters computed in f32 as it does).
fn hard_swish_quant<T: QuantElem>(it: &TensorType, ot: &TensorType, x: &[T], o: &mut [T]) {
    let hires_input_scale = (1.0f32 / 128.0) * it.quant.scale;
    let reluish_scale = 3.0f32 / 32768.0;
    let (om, oe) = quantize_multiplier(f64::from(hires_input_scale / ot.quant.scale));
    let (rm, re) = quantize_multiplier(f64::from(hires_input_scale / reluish_scale));
    let (om16, rm16) = (downscale16(om), downscale16(rm));
    let (izp, ozp) = (it.quant.zero_point, ot.quant.zero_point);
    for (d, &v) in o.iter_mut().zip(x) {
        // |v - zp| <= 255, so both products fit i16.
        let input = (v.to_i32() - izp) as i16;
        let hires = input.wrapping_mul(1 << 7);
        let preshift_out = srdhm16(hires, om16);
        let mut reluish = hires;
        if re > 0 {
            reluish = sat_shl16(reluish, re - 1);
        }
        reluish = srdhm16(reluish, rm16);
        if re > 0 {
            reluish = sat_shl16(reluish, 1);
        }
        if re < 0 {
            reluish = rounding_divide_by_pot(i32::from(reluish), -re) as i16;
        }
        let reluish = ((i32::from(reluish) + (1 << 15)) >> 1) as i16;
        let pre = sdhm16(reluish, preshift_out);
        let out = rounding_divide_by_pot(i32::from(pre), -oe) + ozp;
        *d = T::saturate_from_i32(out);
    }
}

impl Kernel for Math {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let kind = decode_kind(w, "math", MathKind::from_word)?;
        let alpha = w.finite_f32("alpha")?;
        Ok(Math { kind, alpha })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([self.kind.word(), self.alpha.to_bits()]);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let allowed: &[DType] = match self.kind {
            MathKind::Abs | MathKind::Neg => &[DType::F32, DType::F16, DType::I32],
            MathKind::Rsqrt | MathKind::HardSwish => {
                &[DType::F32, DType::F16, DType::U8, DType::I8]
            }
            _ => &[DType::F32, DType::F16],
        };
        let dt = same_dtype(self.name(), inputs, allowed)?;
        if matches!(dt, DType::U8 | DType::I8)
            && !(inputs[0].quant.scale > 0.0 && inputs[0].quant.scale.is_finite())
        {
            return Err(KernelError::InvalidShape {
                op: self.name(),
                reason: "input scale must be > 0".into(),
            });
        }
        Ok(vec![inputs[0].shape.clone()])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let want = inputs[0].dtype;
        for o in outputs {
            if o.dtype != want {
                return Err(KernelError::DType {
                    expected: want,
                    got: o.dtype,
                });
            }
            if matches!(want, DType::U8 | DType::I8)
                && !(o.quant.scale > 0.0 && o.quant.scale.is_finite())
            {
                return Err(KernelError::InvalidShape {
                    op: self.name(),
                    reason: "output scale must be > 0".into(),
                });
            }
        }
        Ok(())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        match x.ty.dtype {
            DType::I32 => {
                let neg = self.kind == MathKind::Neg;
                let v = x.i32s()?;
                for (d, &s) in outputs[0].i32s_mut()?.iter_mut().zip(v) {
                    *d = if neg {
                        s.wrapping_neg()
                    } else {
                        s.wrapping_abs()
                    };
                }
                return Ok(());
            }
            DType::U8 => {
                let ot = outputs[0].ty;
                self.run_quant(x.ty, ot, x.u8s()?, outputs[0].u8s_mut()?);
                return Ok(());
            }
            DType::I8 => {
                let ot = outputs[0].ty;
                self.run_quant(x.ty, ot, x.i8s()?, outputs[0].i8s_mut()?);
                return Ok(());
            }
            _ => {}
        }
        widen_f16(inputs, outputs, |ins, outs| {
            let v = ins[0].f32s()?;
            for (d, &s) in outs[0].f32s_mut()?.iter_mut().zip(v) {
                *d = self.f(s);
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions() {
        let m = |kind, alpha| Math { kind, alpha };
        assert_eq!(m(MathKind::Abs, 0.0).f(-2.0), 2.0);
        assert_eq!(m(MathKind::Neg, 0.0).f(2.0), -2.0);
        assert_eq!(m(MathKind::Rsqrt, 0.0).f(4.0), 0.5);
        assert_eq!(m(MathKind::Sqrt, 0.0).f(9.0), 3.0);
        assert_eq!(m(MathKind::HardSwish, 0.0).f(3.0), 3.0);
        assert_eq!(m(MathKind::HardSwish, 0.0).f(-4.0), 0.0);
        assert!((m(MathKind::Elu, 1.0).f(-1.0) - ((-1f32).exp() - 1.0)).abs() < 1e-7);
        assert_eq!(m(MathKind::Elu, 1.0).f(2.0), 2.0);
    }

    #[test]
    fn hard_swish_quant_near_float() {
        let it = TensorType::quantized(DType::U8, &[256], 0.05, 128);
        let ot = TensorType::quantized(DType::U8, &[256], 0.03, 40);
        let x: Vec<u8> = (0..=255).collect();
        let mut o = vec![0u8; 256];
        hard_swish_quant(&it, &ot, &x, &mut o);
        for (&v, &q) in x.iter().zip(&o) {
            let r = 0.05 * (f64::from(v) - 128.0);
            let y = r * (r + 3.0).clamp(0.0, 6.0) / 6.0;
            let want = ((y / 0.03).round() + 40.0).clamp(0.0, 255.0);
            assert!((f64::from(q) - want).abs() <= 1.0, "{v}: {q} vs {want}");
        }
    }
}
