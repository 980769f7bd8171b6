//! NNAPI LSH_PROJECTION: locality-sensitive hashing of the input's rows by sign of a
//! (weighted) sum of FarmHash fingerprints, one bit per seed of the hash tensor.
//!
//! For seed `s` (a hash element, as f32) the bit is `sum_i w_i * f(s, row_i) > 0`, where
//! `f` is [`super::farmhash::fingerprint64`] of the seed's four little-endian bytes followed
//! by row `i`'s bytes, read as a signed 64-bit value and summed in f64 (`w_i = 1` without
//! weights). Sparse projection (type 1, deprecated, and type 3) packs each hash
//! function's `bits` bits into one int32 (type 3 adds `i << bits` for function `i`); dense
//! projection (type 2) writes every bit.
//!
//! Inputs: hash (float32 or float16 `[functions, bits]`, bits <= 32), input (float32,
//! float16, int32 or u8, rank >= 1), then the weight (`[rows]`, the hash's type) when
//! `has_weight`. Output: int32 `[functions]` (sparse) or `[functions * bits]` (dense).
//!
//! Parameter words: type (1, 2 or 3), has weight (0/1).

use std::ops::RangeInclusive;

use super::farmhash::fingerprint64;
use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// LSH_PROJECTION.
#[derive(Debug, Clone, PartialEq)]
pub struct LshProjection {
    /// 1 sparse (deprecated), 2 dense, 3 sparse.
    pub kind: u32,
    /// Whether a weight input is given.
    pub has_weight: bool,
}

/// Float values of a float32 or float16 view.
fn floats(v: &View<'_>) -> Result<Vec<f32>> {
    match v.ty.dtype {
        DType::F32 => Ok(v.f32s()?.to_vec()),
        DType::F16 => Ok(v.f16s()?.iter().map(|h| h.to_f32()).collect()),
        dtype => Err(KernelError::UnsupportedDType {
            op: "LSH_PROJECTION",
            dtype,
        }),
    }
}

impl Kernel for LshProjection {
    fn name(&self) -> &'static str {
        "LSH_PROJECTION"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let kind = w.u32("type")?;
        if !(1..=3).contains(&kind) {
            return Err(w.err(format!("LSH projection type {kind}")));
        }
        Ok(LshProjection {
            kind,
            has_weight: w.bool("has weight")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.kind);
        w.push(enc::b(self.has_weight));
    }

    fn input_count(&self) -> RangeInclusive<usize> {
        let n = 2 + usize::from(self.has_weight);
        n..=n
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let hash = inputs[0];
        if !hash.dtype.is_float() {
            return Err(KernelError::UnsupportedDType {
                op: name,
                dtype: hash.dtype,
            });
        }
        let [functions, bits] = hash.shape[..] else {
            return Err(bad_shape(name, "hash must have rank 2"));
        };
        if bits > 32 {
            return Err(bad_shape(name, "at most 32 bits per hash function"));
        }
        let input = inputs[1];
        if !matches!(
            input.dtype,
            DType::F32 | DType::F16 | DType::I32 | DType::U8
        ) {
            return Err(KernelError::UnsupportedDType {
                op: name,
                dtype: input.dtype,
            });
        }
        let Some(&rows) = input.shape.first() else {
            return Err(bad_shape(name, "input must have rank >= 1"));
        };
        if let Some(w) = inputs.get(2) {
            if w.dtype != hash.dtype {
                return Err(KernelError::DType {
                    expected: hash.dtype,
                    got: w.dtype,
                });
            }
            if w.shape != [rows] {
                return Err(bad_shape(name, "weight must be [input rows]"));
            }
        }
        let n = if self.kind == 2 {
            functions.checked_mul(bits).ok_or(KernelError::TooLarge)?
        } else {
            functions
        };
        Ok(vec![vec![n]])
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
        let seeds = floats(&inputs[0])?;
        let bits = inputs[0].shape()[1];
        let input = inputs[1];
        let rows = input.shape()[0];
        let row_bytes = input.bytes.len().checked_div(rows).unwrap_or(0);
        let weights = inputs.get(2).map(floats).transpose()?;
        let mut key = Vec::with_capacity(4 + row_bytes);
        let bit = |seed: f32, key: &mut Vec<u8>| -> i32 {
            let mut score = 0f64;
            for r in 0..rows {
                key.clear();
                key.extend_from_slice(&seed.to_le_bytes());
                key.extend_from_slice(&input.bytes[r * row_bytes..(r + 1) * row_bytes]);
                let h = fingerprint64(key) as i64 as f64;
                score += match &weights {
                    Some(w) => f64::from(w[r]) * h,
                    None => h,
                };
            }
            i32::from(score > 0.0)
        };
        let out = outputs[0].i32s_mut()?;
        if bits == 0 {
            out.fill(0);
            if self.kind == 3 {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = i as i32;
                }
            }
            return Ok(());
        }
        if self.kind == 2 {
            for (o, &s) in out.iter_mut().zip(&seeds) {
                *o = bit(s, &mut key);
            }
        } else {
            for (i, (o, fs)) in out.iter_mut().zip(seeds.chunks_exact(bits)).enumerate() {
                let mut sig: i32 = 0;
                for &s in fs {
                    sig = (sig << 1) | bit(s, &mut key);
                }
                if self.kind == 3 {
                    sig = sig.wrapping_add((i as i32).wrapping_mul(1i32.wrapping_shl(bits as u32)));
                }
                *o = sig;
            }
        }
        Ok(())
    }
}
