//! NNAPI INSTANCE_NORMALIZATION, NHWC or NCHW: per batch and channel,
//! `(x - mean) * gamma / sqrt(var + epsilon) + beta` over the spatial positions, with the
//! population variance, in float32 as the reference's float32 kernel. float16 computes in
//! float32 (the reference accumulates in float16; the corpus tolerance covers it).
//!
//! Parameter words: gamma, beta, epsilon (finite f32), nchw.

use crate::kernels::kernel::{enc, same_dtype, Kernel, Words};
use crate::kernels::layout::{image_dims, nhwc_dims, with_nhwc};
use crate::kernels::{KernelError, Result, Tensor, TensorMut};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

/// Instance normalisation.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceNorm {
    /// Scale.
    pub gamma: f32,
    /// Offset.
    pub beta: f32,
    /// Added to the variance.
    pub epsilon: f32,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

impl Kernel for InstanceNorm {
    fn name(&self) -> &'static str {
        "INSTANCE_NORMALIZATION"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(InstanceNorm {
            gamma: w.finite_f32("gamma")?,
            beta: w.finite_f32("beta")?,
            epsilon: w.finite_f32("epsilon")?,
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([
            self.gamma.to_bits(),
            self.beta.to_bits(),
            self.epsilon.to_bits(),
            enc::b(self.nchw),
        ]);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        same_dtype(self.name(), inputs, &[DType::F32, DType::F16])?;
        image_dims(self.name(), &inputs[0].shape, self.nchw)?;
        Ok(vec![inputs[0].shape.clone()])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        widen_f16(inputs, outputs, |ins, outs| {
            instance_f32(self, Tensor::f32(&ins[0])?, TensorMut::f32(&mut outs[0])?)
        })
    }
}

/// The float32 kernel; shapes were validated.
pub(crate) fn instance_f32(p: &InstanceNorm, x: Tensor<'_>, out: TensorMut<'_>) -> Result<()> {
    let (n, h, w, c) = nhwc_dims(x.shape, p.nchw).ok_or(KernelError::TooLarge)?;
    let hw = h * w;
    with_nhwc(p.nchw, x, out, |src, dst| {
        if hw == 0 {
            return Ok(());
        }
        for b in 0..n {
            for d in 0..c {
                let base = b * hw * c + d;
                let at = |i: usize| base + i * c;
                let mut mean = 0.0f32;
                for i in 0..hw {
                    mean += src[at(i)];
                }
                mean /= hw as f32;
                let mut var = 0.0f32;
                for i in 0..hw {
                    let v = src[at(i)] - mean;
                    var += v * v;
                }
                let sigma = (var / hw as f32 + p.epsilon).sqrt();
                for i in 0..hw {
                    dst[at(i)] = (src[at(i)] - mean) * p.gamma / sigma + p.beta;
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn matches_f64(xs in proptest::collection::vec(-3.0f32..3.0, 8)) {
            let p = InstanceNorm { gamma: 2.0, beta: 0.5, epsilon: 1e-3, nchw: false };
            let shape = [1usize, 2, 2, 2];
            let mut out = vec![0f32; 8];
            instance_f32(&p, Tensor { shape: &shape, data: &xs }, TensorMut { shape: &shape, data: &mut out }).unwrap();
            for d in 0..2 {
                let v: Vec<f64> = (0..4).map(|i| f64::from(xs[i * 2 + d])).collect();
                let m = v.iter().sum::<f64>() / 4.0;
                let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / 4.0;
                for i in 0..4 {
                    let want = (v[i] - m) * 2.0 / (var + 1e-3).sqrt() + 0.5;
                    prop_assert!((f64::from(out[i * 2 + d]) - want).abs() < 1e-3);
                }
            }
        }
    }
}
