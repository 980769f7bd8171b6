//! NNAPI MAXIMUM, MINIMUM, POW and PRELU: broadcast binary functions.
//!
//! - MAXIMUM / MINIMUM: float32, float16, int32 exactly; uint8 / int8 requantise each input
//!   to the output's quantisation first (as the reference, in floating point: it does
//!   so itself), then take the max / min.
//! - POW: float32 (`powf`), float16 computed in float32.
//! - PRELU: `x >= 0 ? x : x * alpha`; uint8 / int8 with the reference's integer path
//!   (two output multipliers, `s_in / s_out` and `s_in * s_alpha / s_out`).
//!
//! Parameter words: kind (Maximum 0, Minimum 1, Pow 2, Prelu 3). Inputs: a, b. Output: one.

use super::{decode_kind, kind_enum};
use crate::kernels::elementwise::zip_f32;
use crate::kernels::kernel::{same_dtype, Kernel, Words};
use crate::kernels::layout::{broadcast_shape, for_each_broadcast};
use crate::kernels::quant::{multiply_by_quantized_multiplier, quantize_multiplier, QuantElem};
use crate::kernels::{Activation, KernelError, Result};
use crate::tensor::{widen_f16, DType, Quant, TensorType, View, ViewMut};

kind_enum! {
    /// Which function.
    pub enum MinMaxKind {
        /// max(a, b)
        Maximum => "MAXIMUM",
        /// min(a, b)
        Minimum => "MINIMUM",
        /// a^b
        Pow => "POW",
        /// a >= 0 ? a : a * b
        Prelu => "PRELU",
    }
}

/// `out = f(a, b)` with broadcasting.
#[derive(Debug, Clone, PartialEq)]
pub struct MinMax {
    /// The function.
    pub kind: MinMaxKind,
}

/// The reference's `requantize`: the real value (computed in float32) divided by the new
/// scale plus the new zero point, in double, clamped and rounded half away from zero.
pub(crate) fn requantize<T: QuantElem>(v: T, from: &Quant, to: &Quant) -> i32 {
    let real = f64::from((v.to_i32() - from.zero_point) as f32 * from.scale);
    let r = real / f64::from(to.scale) + f64::from(to.zero_point);
    if r < f64::from(T::MIN) {
        T::MIN
    } else if r > f64::from(T::MAX) {
        T::MAX
    } else {
        r.round() as i32
    }
}

#[allow(clippy::too_many_arguments)]
fn run_quant<T: QuantElem>(
    kind: MinMaxKind,
    qa: &Quant,
    qb: &Quant,
    qo: &Quant,
    x: &[T],
    y: &[T],
    o: &mut [T],
    shapes: [&[usize]; 3],
) {
    match kind {
        MinMaxKind::Prelu => {
            let (off_in, off_alpha, off_out) = (-qa.zero_point, -qb.zero_point, qo.zero_point);
            let pos = quantize_multiplier(f64::from(qa.scale) / f64::from(qo.scale));
            let neg = quantize_multiplier(f64::from(qa.scale * qb.scale) / f64::from(qo.scale));
            for_each_broadcast(shapes[0], shapes[1], shapes[2], |i, ia, ib| {
                let input = off_in + x[ia].to_i32();
                let v = if input >= 0 {
                    off_out + multiply_by_quantized_multiplier(input, pos.0, pos.1)
                } else {
                    let alpha = off_alpha + y[ib].to_i32();
                    off_out + multiply_by_quantized_multiplier(input * alpha, neg.0, neg.1)
                };
                o[i] = T::saturate_from_i32(v);
            });
        }
        _ => {
            let min = kind == MinMaxKind::Minimum;
            for_each_broadcast(shapes[0], shapes[1], shapes[2], |i, ia, ib| {
                let a = requantize(x[ia], qa, qo);
                let b = requantize(y[ib], qb, qo);
                o[i] = T::saturate_from_i32(if min { a.min(b) } else { a.max(b) });
            });
        }
    }
}

impl Kernel for MinMax {
    /// Every output index is visited once by the (broadcast) walk.
    fn overwrites_f32_outputs(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let kind = decode_kind(w, "min/max", MinMaxKind::from_word)?;
        Ok(MinMax { kind })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.kind.word());
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        2..=2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let allowed: &[DType] = match self.kind {
            MinMaxKind::Maximum | MinMaxKind::Minimum => {
                &[DType::F32, DType::F16, DType::I32, DType::U8, DType::I8]
            }
            MinMaxKind::Pow => &[DType::F32, DType::F16],
            MinMaxKind::Prelu => &[DType::F32, DType::F16, DType::U8, DType::I8],
        };
        let dt = same_dtype(self.name(), inputs, allowed)?;
        if matches!(dt, DType::U8 | DType::I8)
            && inputs
                .iter()
                .any(|t| !(t.quant.scale > 0.0 && t.quant.scale.is_finite()))
        {
            return Err(KernelError::InvalidShape {
                op: self.name(),
                reason: "quantised scales must be > 0".into(),
            });
        }
        Ok(vec![broadcast_shape(
            self.name(),
            &inputs[0].shape,
            &inputs[1].shape,
        )?])
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
        let (a, b) = (inputs[0], inputs[1]);
        let out_shape = outputs[0].ty.shape.clone();
        let kind = self.kind;
        let shapes = [a.shape(), b.shape(), out_shape.as_slice()];
        match a.ty.dtype {
            DType::U8 => {
                let qo = outputs[0].ty.quant.clone();
                let o = outputs[0].u8s_mut()?;
                run_quant(
                    kind,
                    &a.ty.quant,
                    &b.ty.quant,
                    &qo,
                    a.u8s()?,
                    b.u8s()?,
                    o,
                    shapes,
                );
                return Ok(());
            }
            DType::I8 => {
                let qo = outputs[0].ty.quant.clone();
                let o = outputs[0].i8s_mut()?;
                run_quant(
                    kind,
                    &a.ty.quant,
                    &b.ty.quant,
                    &qo,
                    a.i8s()?,
                    b.i8s()?,
                    o,
                    shapes,
                );
                return Ok(());
            }
            DType::I32 => {
                let (x, y) = (a.i32s()?, b.i32s()?);
                let o = outputs[0].i32s_mut()?;
                let min = kind == MinMaxKind::Minimum;
                for_each_broadcast(a.shape(), b.shape(), &out_shape, |i, ia, ib| {
                    o[i] = if min {
                        x[ia].min(y[ib])
                    } else {
                        x[ia].max(y[ib])
                    };
                });
                return Ok(());
            }
            _ => {}
        }
        widen_f16(inputs, outputs, |ins, outs| {
            let (x, y) = (ins[0].f32s()?, ins[1].f32s()?);
            let o = outs[0].f32s_mut()?;
            let shapes = [ins[0].shape(), ins[1].shape(), &out_shape[..]];
            match kind {
                MinMaxKind::Maximum => {
                    zip_f32(
                        shapes,
                        x,
                        y,
                        o,
                        Activation::None,
                        |p, q| if p < q { q } else { p },
                    )
                }
                MinMaxKind::Minimum => {
                    zip_f32(
                        shapes,
                        x,
                        y,
                        o,
                        Activation::None,
                        |p, q| if q < p { q } else { p },
                    )
                }
                MinMaxKind::Pow => zip_f32(shapes, x, y, o, Activation::None, f32::powf),
                MinMaxKind::Prelu => zip_f32(shapes, x, y, o, Activation::None, |p, q| {
                    if p >= 0.0 {
                        p
                    } else {
                        p * q
                    }
                }),
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requantize_and_prelu_quant() {
        let from = Quant::new(0.5, 128);
        let to = Quant::new(1.0, 100);
        // (130 - 128) * 0.5 = 1 -> 101.
        assert_eq!(requantize(130u8, &from, &to), 101);
        let qa = Quant::new(1.0, 128);
        let qb = Quant::new(0.5, 0);
        let qo = Quant::new(1.0, 128);
        let x = [120u8, 130];
        let y = [1u8];
        let mut o = [0u8; 2];
        run_quant(
            MinMaxKind::Prelu,
            &qa,
            &qb,
            &qo,
            &x,
            &y,
            &mut o,
            [&[2], &[1], &[2]],
        );
        // -8 * 0.5 = -4 -> 124; 2 -> 130.
        assert_eq!(o, [124, 130]);
    }
}
