//! FIBONACCI (the "com.example.fibonacci" example extension): writes the first `n`
//! Fibonacci numbers (1, 1, 2, 3, 5, ...), quantised as `stored = fib / scale + zero_point`.
//!
//! No inputs: `n` is known when the program is built (it fixes the output shape), so it
//! is a parameter. The output is a `[n]` tensor of unsigned 64-bit integers (the
//! extension's 64-bit asymmetric quantised type, whose scale and zero point are a double
//! and an int64, more than a device tensor's f32 / i32 quantisation holds, so they are
//! parameters too) or of float32. As the example driver does, the u64 sequence wraps on
//! overflow (past the 93rd number) and the quantised value is converted to u64 with
//! saturation (Rust's `as`, where the C++ conversion is undefined out of range).
//!
//! Parameter words: n (1..=MAX_ELEMENTS), scale (f64 bits, low word then high word;
//! finite and > 0), zero point (i64, low word then high word).

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::{KernelError, Result, MAX_ELEMENTS};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// The first `n` Fibonacci numbers, quantised.
#[derive(Debug, Clone, PartialEq)]
pub struct Fibonacci {
    /// How many numbers (the output length), at least 1.
    pub n: u32,
    /// Quantisation scale of the output (1.0 for a float32 output).
    pub scale: f64,
    /// Quantisation zero point of the output (0 for a float32 output).
    pub zero_point: i64,
}

fn split(v: u64) -> [u32; 2] {
    [v as u32, (v >> 32) as u32]
}

fn join(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// The unquantised sequence as u64 (wrapping, as the example driver's uint64 additions).
pub fn sequence_u64(n: usize) -> impl Iterator<Item = u64> {
    let mut pair = (1u64, 1u64);
    (0..n).map(move |_| {
        let v = pair.0;
        pair = (pair.1, pair.0.wrapping_add(pair.1));
        v
    })
}

impl Kernel for Fibonacci {
    fn name(&self) -> &'static str {
        "FIBONACCI"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let n = w.nonzero("n")?;
        if n as usize > MAX_ELEMENTS {
            return Err(w.err(format!("n {n} exceeds {MAX_ELEMENTS}")));
        }
        let scale = f64::from_bits(join(w.u32("scale low")?, w.u32("scale high")?));
        if !(scale.is_finite() && scale > 0.0) {
            return Err(w.err(format!("scale {scale} must be finite and > 0")));
        }
        let zero_point = join(w.u32("zero point low")?, w.u32("zero point high")?) as i64;
        Ok(Fibonacci {
            n,
            scale,
            zero_point,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.n);
        w.extend(split(self.scale.to_bits()));
        w.extend(split(self.zero_point as u64));
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        0..=0
    }

    fn output_shapes(&self, _inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        Ok(vec![vec![self.n as usize]])
    }

    fn check_outputs(&self, _inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let out = outputs[0];
        if !matches!(out.dtype, DType::U64 | DType::F32) {
            return Err(KernelError::UnsupportedDType {
                op: "FIBONACCI",
                dtype: out.dtype,
            });
        }
        if out.quant.scale != 0.0 || out.quant.zero_point != 0 || out.quant.per_channel.is_some() {
            return Err(KernelError::InvalidShape {
                op: "FIBONACCI",
                reason: "the output's quantisation travels in the parameters".into(),
            });
        }
        Ok(())
    }

    fn run(&self, _inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let out = &mut outputs[0];
        let zp = self.zero_point as f64;
        match out.ty.dtype {
            DType::U64 => {
                for (o, f) in out
                    .u64s_mut()?
                    .iter_mut()
                    .zip(sequence_u64(self.n as usize))
                {
                    *o = (f as f64 / self.scale + zp) as u64;
                }
            }
            _ => {
                // As the example driver's float path: the sequence in float32.
                let mut pair = (1f32, 1f32);
                for o in out.f32s_mut()? {
                    *o = (f64::from(pair.0) / self.scale + zp) as f32;
                    pair = (pair.1, pair.0 + pair.1);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{execute, KernelOp};
    use crate::tensor::Staged;
    use proptest::prelude::*;

    fn run(op: &Fibonacci, dtype: DType) -> Staged {
        let ty = TensorType::new(dtype, &[op.n as usize]);
        let mut buf = Staged::zeroed(op.n as usize * dtype.size() as usize);
        let mut outs = [ViewMut {
            ty: &ty,
            bytes: buf.bytes_mut(),
        }];
        execute(&KernelOp::from(op.clone()), &[], &mut outs).unwrap();
        buf
    }

    #[test]
    fn first_numbers_and_quantisation() {
        let op = Fibonacci {
            n: 8,
            scale: 0.5,
            zero_point: 3,
        };
        let got: Vec<u64> = bytemuck::cast_slice(run(&op, DType::U64).bytes()).to_vec();
        assert_eq!(got, [5, 5, 7, 9, 13, 19, 29, 45]);
        let op = Fibonacci {
            n: 6,
            scale: 1.0,
            zero_point: 0,
        };
        let got: Vec<f32> = bytemuck::cast_slice(run(&op, DType::F32).bytes()).to_vec();
        assert_eq!(got, [1.0, 1.0, 2.0, 3.0, 5.0, 8.0]);
    }

    #[test]
    fn bad_parameters_and_outputs_are_refused() {
        let words = |scale: f64| {
            let mut w = vec![3];
            w.extend(split(scale.to_bits()));
            w.extend([0, 0]);
            w
        };
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(KernelOp::decode(100, &words(bad)).is_err(), "{bad}");
        }
        assert!(KernelOp::decode(100, &[0, 0, 0x3FF0_0000, 0, 0]).is_err());
        let op = KernelOp::from(Fibonacci {
            n: 2,
            scale: 1.0,
            zero_point: 0,
        });
        let i32_out = TensorType::new(DType::I32, &[2]);
        assert!(op.check(&[], &[&i32_out]).is_err());
        let wrong_len = TensorType::new(DType::U64, &[3]);
        assert!(op.check(&[], &[&wrong_len]).is_err());
    }

    proptest! {
        /// Against the naive definition: f(0) = f(1) = 1, f(i) = f(i-1) + f(i-2) (wrapping),
        /// then `fib / scale + zero_point` saturated to u64.
        #[test]
        fn matches_the_naive_sequence(n in 1u32..200, scale in 0.01f64..100.0, zp in -1000i64..1000) {
            let op = Fibonacci { n, scale, zero_point: zp };
            let got: Vec<u64> = bytemuck::cast_slice(run(&op, DType::U64).bytes()).to_vec();
            let mut naive = vec![1u64; n as usize];
            for i in 2..n as usize {
                naive[i] = naive[i - 1].wrapping_add(naive[i - 2]);
            }
            for (i, (&g, &f)) in got.iter().zip(&naive).enumerate() {
                let want = (f as f64 / scale + zp as f64) as u64;
                prop_assert_eq!(g, want, "element {}", i);
            }
            let words = KernelOp::from(op.clone()).encode_params();
            prop_assert_eq!(KernelOp::decode(100, &words), Ok(KernelOp::from(op)));
        }
    }
}
