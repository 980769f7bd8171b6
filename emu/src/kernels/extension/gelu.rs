//! GELU (the vnpu "com.vnpu.fused" extension): the Gaussian error linear unit in one pass,
//! `0.5 x (1 + erf(x / sqrt 2))`, or with `approximate` its tanh form
//! `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`, on float32 and float16 (computed
//! in float32, as every float16 kernel). NNAPI has no GELU: a client composes the tanh
//! form from nine MUL / ADD / TANH operations, each a kernel that reads and writes a whole
//! tensor. Fused, the device reads the input once and writes the output once.
//!
//! The tanh form computes in float32; erf is evaluated in f64 with the Chebyshev-fitted
//! erfc of Numerical Recipes (fractional error below 1.2e-7), far inside float32
//! tolerance after rounding.
//!
//! Parameter words: approximate (bool).

use crate::kernels::kernel::{same_dtype, Cost, Kernel, Words};
use crate::kernels::Result;
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

/// GELU, exact (erf) or tanh-approximated.
#[derive(Debug, Clone, PartialEq)]
pub struct Gelu {
    /// Use the tanh approximation.
    pub approximate: bool,
}

/// erf(x), |error| < 1.2e-7 relative on erfc.
pub fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 {
        1.0 - erfc
    } else {
        erfc - 1.0
    }
}

/// sqrt(2 / pi).
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// GELU of one value: the tanh form in float32 (as the NNAPI chain it replaces computes),
/// the erf form through the f64 erf.
pub fn gelu(x: f32, approximate: bool) -> f32 {
    if approximate {
        // Plain multiply-adds: `mul_add` is a library call without FMA hardware.
        let inner = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
        0.5 * x * (1.0 + inner.tanh())
    } else {
        let v = f64::from(x);
        (0.5 * v * (1.0 + erf(v / std::f64::consts::SQRT_2))) as f32
    }
}

impl Kernel for Gelu {
    fn name(&self) -> &'static str {
        "GELU"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(Gelu {
            approximate: w.bool("approximate")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(u32::from(self.approximate));
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        same_dtype(self.name(), inputs, &[DType::F32, DType::F16])?;
        Ok(vec![inputs[0].shape.clone()])
    }

    /// One read and one write per element, plus the erf / tanh evaluation on the vector
    /// unit's special-function path, which costs two more element passes.
    fn cost(&self, inputs: &[&TensorType], _outputs: &[Vec<usize>]) -> Cost {
        let n = inputs.first().map_or(0, |t| {
            t.shape
                .iter()
                .fold(1u64, |a, &d| a.saturating_mul(d as u64))
        });
        Cost {
            macs: 0,
            elems: n.saturating_mul(4),
        }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        widen_f16(inputs, outputs, |ins, outs| {
            let x = ins[0].f32s()?;
            for (o, &v) in outs[0].f32s_mut()?.iter_mut().zip(x) {
                *o = gelu(v, self.approximate);
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{run_f32, KernelOp};
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        // erf(0.5) = 0.5204998778, erf(1) = 0.8427007929, erf(2) = 0.9953222650.
        for (x, want) in [
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (2.0, 0.995_322_265),
        ] {
            assert!((erf(x) - want).abs() < 2e-7, "erf({x})");
            assert!((erf(-x) + want).abs() < 2e-7, "erf(-{x})");
        }
        assert_eq!(gelu(0.0, false), 0.0);
        assert!((gelu(1.0, false) - 0.841_344_7).abs() < 1e-6);
        assert!((gelu(1.0, true) - 0.841_192).abs() < 1e-5);
        assert!(gelu(-10.0, false).abs() < 1e-6);
    }

    #[test]
    fn refuses_other_types_and_flags() {
        assert!(KernelOp::decode(101, &[2]).is_err());
        let op = KernelOp::from(Gelu { approximate: true });
        let ints = TensorType::new(DType::I32, &[4]);
        assert!(op.output_shapes(&[&ints]).is_err());
    }

    proptest! {
        /// Against the unfused definition the client would build from NNAPI operations:
        /// MUL, MUL, MUL, ADD, MUL, TANH, ADD, MUL, MUL in float32.
        #[test]
        fn tanh_form_matches_the_unfused_sequence(xs in proptest::collection::vec(-8.0f32..8.0, 1..64)) {
            let op = KernelOp::from(Gelu { approximate: true });
            let shape = [xs.len()];
            let got = run_f32(&op, &[(&shape, &xs)]).unwrap().remove(0).1;
            let k = (2.0f32 / std::f32::consts::PI).sqrt();
            for (i, (&g, &x)) in got.iter().zip(&xs).enumerate() {
                let x3 = x * x * x;
                let inner = (x + x3 * 0.044_715) * k;
                let want = x * (inner.tanh() + 1.0) * 0.5;
                prop_assert!((g - want).abs() <= 1e-5 * (1.0 + want.abs()), "element {}: {} vs {}", i, g, want);
            }
        }
    }
}
