//! NNAPI ABS, EXP, LOG, NEG, RSQRT, SIN, SQRT, ELU and HARD_SWISH (element-wise math).
//!
//! float32, and float16 computed in float32 as the reference does. ABS and NEG also take
//! int32 (wrapping). RSQRT also takes uint8 / int8: the reference itself dequantises in
//! float32, applies `1 / sqrt`, and quantises with `zero_point + round(y / scale)`, which
//! this does too. ELU: `max(0, x) + min(0, alpha * (exp(x) - 1))`. HARD_SWISH (float only
//! here): `x * relu6(x + 3) / 6`.
//!
//! Parameter words: kind (Abs 0, Exp 1, Log 2, Neg 3, Rsqrt 4, Sin 5, Sqrt 6, Elu 7,
//! HardSwish 8), alpha (f32 bits; ELU only, 0 otherwise).

use crate::kernels::kernel::{same_dtype, Kernel, Words};
use crate::kernels::quant::QuantElem;
use crate::kernels::{KernelError, Result};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

/// Which function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MathKind {
    /// |x|
    Abs,
    /// e^x
    Exp,
    /// ln x
    Log,
    /// -x
    Neg,
    /// 1 / sqrt(x)
    Rsqrt,
    /// sin x
    Sin,
    /// sqrt x
    Sqrt,
    /// exponential linear unit with `alpha`
    Elu,
    /// x * relu6(x + 3) / 6
    HardSwish,
}

const KINDS: [(MathKind, &str); 9] = [
    (MathKind::Abs, "ABS"),
    (MathKind::Exp, "EXP"),
    (MathKind::Log, "LOG"),
    (MathKind::Neg, "NEG"),
    (MathKind::Rsqrt, "RSQRT"),
    (MathKind::Sin, "SIN"),
    (MathKind::Sqrt, "SQRT"),
    (MathKind::Elu, "ELU"),
    (MathKind::HardSwish, "HARD_SWISH"),
];

/// `out[i] = f(x[i])`.
#[derive(Debug, Clone, PartialEq)]
pub struct Math {
    /// The function.
    pub kind: MathKind,
    /// ELU's alpha (0 for the others).
    pub alpha: f32,
}

impl Math {
    fn index(&self) -> usize {
        KINDS.iter().position(|(k, _)| *k == self.kind).unwrap_or(0)
    }

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

impl Kernel for Math {
    fn name(&self) -> &'static str {
        KINDS[self.index()].1
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let k = w.u32("kind")?;
        let (kind, _) = *KINDS
            .get(k as usize)
            .ok_or_else(|| w.err(format!("bad math kind {k}")))?;
        let alpha = w.finite_f32("alpha")?;
        Ok(Math { kind, alpha })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([self.index() as u32, self.alpha.to_bits()]);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let allowed: &[DType] = match self.kind {
            MathKind::Abs | MathKind::Neg => &[DType::F32, DType::F16, DType::I32],
            MathKind::Rsqrt => &[DType::F32, DType::F16, DType::U8, DType::I8],
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
}
