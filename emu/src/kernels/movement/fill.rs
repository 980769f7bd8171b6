//! NNAPI FILL and RANK: kernels whose outputs do not depend on input element values.
//!
//! FILL writes one value to every element of a float32, float16 or int32 output of the
//! given shape. The value is either a parameter (a constant) or the kernel's one-element
//! input (a device tensor, e.g. computed by another operation). Parameter words: shape (a
//! list), has value (bool), value (f32 bits for float outputs, i32 bits for int32 ones;
//! 0 without has value).
//!
//! RANK writes the input's rank to an int32 rank-0 output. No parameter words.

use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::KernelError;
use crate::kernels::{bad_shape, num_elements, Result, MAX_RANK};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// A tensor filled with one value.
#[derive(Debug, Clone, PartialEq)]
pub struct Fill {
    /// The output shape.
    pub shape: Vec<u32>,
    /// The value as a parameter (f32 bits, or i32 bits for an int32 output); `None`: the
    /// value is input 0.
    pub value: Option<u32>,
}

/// The rank of the input, as an int32 scalar.
#[derive(Debug, Clone, PartialEq)]
pub struct Rank;

impl Kernel for Fill {
    fn name(&self) -> &'static str {
        "FILL"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let shape = w.list("rank", MAX_RANK)?;
        let has = w.bool("has value")?;
        let v = w.u32("value")?;
        if !has && v != 0 {
            // Encode writes 0 there: anything else would not round-trip.
            return Err(w.err(format!("value word {v} without a value must be 0")));
        }
        Ok(Fill {
            shape,
            value: has.then_some(v),
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        enc::list(w, self.shape.iter().copied());
        w.extend([enc::b(self.value.is_some()), self.value.unwrap_or(0)]);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        if self.value.is_some() {
            0..=0
        } else {
            1..=1
        }
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        if let Some(v) = inputs.first() {
            if num_elements(&v.shape)? != 1 {
                return Err(bad_shape(self.name(), "the value must have one element"));
            }
        }
        let shape: Vec<usize> = self.shape.iter().map(|&d| d as usize).collect();
        num_elements(&shape)?;
        Ok(vec![shape])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let dtype = inputs.first().map_or(outputs[0].dtype, |t| t.dtype);
        if !matches!(dtype, DType::F32 | DType::F16 | DType::I32) {
            return Err(KernelError::UnsupportedDType { op: "FILL", dtype });
        }
        if outputs[0].dtype != dtype {
            return Err(KernelError::DType {
                expected: dtype,
                got: outputs[0].dtype,
            });
        }
        Ok(())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let out = &mut outputs[0];
        let bits = self.value.map(|v| match out.ty.dtype {
            DType::F16 => half::f16::from_f32(f32::from_bits(v))
                .to_le_bytes()
                .to_vec(),
            _ => v.to_le_bytes().to_vec(),
        });
        let v = match (&bits, inputs.first()) {
            (Some(b), _) => b.as_slice(),
            (None, Some(x)) => x.bytes,
            (None, None) => return Err(KernelError::Misaligned),
        };
        if v.is_empty() {
            return Err(KernelError::Misaligned);
        }
        for c in out.bytes.chunks_exact_mut(v.len()) {
            c.copy_from_slice(v);
        }
        Ok(())
    }
}

impl Kernel for Rank {
    fn name(&self) -> &'static str {
        "RANK"
    }

    fn decode(_w: &mut Words<'_>) -> Result<Self> {
        Ok(Rank)
    }

    fn encode(&self, _w: &mut Vec<u32>) {}

    fn output_shapes(&self, _inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        Ok(vec![Vec::new()])
    }

    fn check_outputs(&self, _inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        if outputs[0].dtype != DType::I32 {
            return Err(KernelError::DType {
                expected: DType::I32,
                got: outputs[0].dtype,
            });
        }
        Ok(())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let rank = inputs[0].shape().len() as i32;
        outputs[0].bytes.copy_from_slice(&rank.to_le_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_with_the_value() {
        let k = Fill {
            shape: vec![3],
            value: None,
        };
        let vty = TensorType::new(DType::F16, &[]);
        let ty = TensorType::new(DType::F16, &[3]);
        let v = half::f16::from_f32(2.5).to_le_bytes();
        let mut out = vec![0u8; 6];
        k.run(
            &[View {
                ty: &vty,
                bytes: &v,
            }],
            &mut [ViewMut {
                ty: &ty,
                bytes: &mut out,
            }],
        )
        .unwrap();
        assert_eq!(out, v.repeat(3));
    }

    #[test]
    fn rank_of_a_matrix() {
        let ty = TensorType::new(DType::U8, &[2, 3]);
        let oty = TensorType::new(DType::I32, &[]);
        let mut out = [0u8; 4];
        Rank.run(
            &[View {
                ty: &ty,
                bytes: &[0; 6],
            }],
            &mut [ViewMut {
                ty: &oty,
                bytes: &mut out,
            }],
        )
        .unwrap();
        assert_eq!(i32::from_le_bytes(out), 2);
    }
}
