//! NNAPI RANDOM_MULTINOMIAL: `samples` class indices per batch row, drawn from the
//! categorical distribution `softmax(logits[b])`, seeded by the two int32 seeds.
//!
//! As in the NNAPI reference, non-finite logits get probability 0, each draw is a uniform
//! double in `[0, 1)` scaled by the row's total, and the class is the first whose
//! cumulative weight exceeds it. The generator is this device's own (SplitMix64 over the
//! two seeds), not TensorFlow's Philox: the result is deterministic per seed and has the
//! required distribution, but not the reference's exact samples (NNAPI checks the
//! distribution only).
//!
//! Inputs: logits (float32 or float16 `[batch, classes]`), seeds (int32 `[2]`). Output:
//! int32 `[batch, samples]`.
//!
//! Parameter words: samples.

use std::ops::RangeInclusive;

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// RANDOM_MULTINOMIAL.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomMultinomial {
    /// Draws per batch row.
    pub samples: u32,
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform double in `[0, 1)`.
    fn double(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Kernel for RandomMultinomial {
    fn name(&self) -> &'static str {
        "RANDOM_MULTINOMIAL"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(RandomMultinomial {
            samples: w.u32("samples")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.samples);
    }

    fn input_count(&self) -> RangeInclusive<usize> {
        2..=2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let logits = inputs[0];
        if !logits.dtype.is_float() {
            return Err(KernelError::UnsupportedDType {
                op: self.name(),
                dtype: logits.dtype,
            });
        }
        let [batch, _] = logits.shape[..] else {
            return Err(bad_shape(self.name(), "logits must have rank 2"));
        };
        if inputs[1].dtype != DType::I32 || inputs[1].shape != [2] {
            return Err(bad_shape(self.name(), "seeds must be int32 [2]"));
        }
        Ok(vec![vec![batch, self.samples as usize]])
    }

    fn check_outputs(&self, _: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        match outputs.first() {
            Some(o) if o.dtype != DType::I32 => Err(KernelError::DType {
                expected: DType::I32,
                got: o.dtype,
            }),
            _ => Ok(()),
        }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let logits: Vec<f32> = match inputs[0].ty.dtype {
            DType::F16 => inputs[0].f16s()?.iter().map(|h| h.to_f32()).collect(),
            _ => inputs[0].f32s()?.to_vec(),
        };
        let classes = inputs[0].shape()[1];
        let seeds = inputs[1].i32s()?;
        let seed = u64::from(seeds[0] as u32) << 32 | u64::from(seeds[1] as u32);
        let mut rng = Rng(seed ^ 0x6a09_e667_f3bc_c909);
        let out = outputs[0].i32s_mut()?;
        let n = self.samples as usize;
        if classes == 0 || n == 0 {
            out.fill(0);
            return Ok(());
        }
        let mut cdf = vec![0f64; classes];
        for (row, dst) in logits.chunks_exact(classes).zip(out.chunks_exact_mut(n)) {
            let max = row
                .iter()
                .filter(|v| v.is_finite())
                .fold(f32::MIN, |m, &v| m.max(v));
            let mut total = 0f64;
            for (c, &v) in cdf.iter_mut().zip(row) {
                if v.is_finite() {
                    total += (f64::from(v) - f64::from(max)).exp();
                }
                *c = total;
            }
            for d in dst.iter_mut() {
                let target = rng.double() * total;
                let k = cdf.partition_point(|&c| c <= target);
                *d = k.min(classes - 1) as i32;
            }
        }
        Ok(())
    }
}
