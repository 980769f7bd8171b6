//! NNAPI EQUAL, NOT_EQUAL, LESS, LESS_EQUAL, GREATER, GREATER_EQUAL with numpy-style
//! broadcasting: bool8 output. Inputs bool8, float32, float16, int32 (compared exactly)
//! or uint8 / int8 quantised, compared as the reference does: each side dequantised in
//! float32, `(q - zero_point) * scale`, so inputs of different scales compare by value.
//!
//! Parameter words: kind (Equal 0, NotEqual 1, Less 2, LessEqual 3, Greater 4,
//! GreaterEqual 5). Inputs: a, b. Output: one bool8.

use super::{decode_kind, kind_enum};
use crate::kernels::kernel::{same_dtype, Kernel, Words};
use crate::kernels::layout::{broadcast_shape, for_each_broadcast};
use crate::kernels::{KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

kind_enum! {
    /// Which comparison.
    pub enum CompareKind {
        /// a == b
        Equal => "EQUAL",
        /// a != b
        NotEqual => "NOT_EQUAL",
        /// a < b
        Less => "LESS",
        /// a <= b
        LessEqual => "LESS_EQUAL",
        /// a > b
        Greater => "GREATER",
        /// a >= b
        GreaterEqual => "GREATER_EQUAL",
    }
}

/// `out = a cmp b` as bool8.
#[derive(Debug, Clone, PartialEq)]
pub struct Compare {
    /// The comparison.
    pub kind: CompareKind,
}

/// The elements of `v` as the values the reference compares (exact in f64: f32/f16/i32
/// widen exactly, quantised values are dequantised in f32 first).
fn values(v: &View<'_>) -> Result<Vec<f64>> {
    let q = &v.ty.quant;
    let deq = |x: i32| f64::from((x - q.zero_point) as f32 * q.scale);
    Ok(match v.ty.dtype {
        DType::F32 => v.f32s()?.iter().map(|&x| f64::from(x)).collect(),
        DType::F16 => v.f16s()?.iter().map(|x| x.to_f64()).collect(),
        DType::I32 => v.i32s()?.iter().map(|&x| f64::from(x)).collect(),
        DType::Bool8 => v
            .bools()?
            .iter()
            .map(|&x| f64::from(u8::from(x != 0)))
            .collect(),
        DType::U8 => v.u8s()?.iter().map(|&x| deq(i32::from(x))).collect(),
        DType::I8 => v.i8s()?.iter().map(|&x| deq(i32::from(x))).collect(),
        d => {
            return Err(KernelError::UnsupportedDType {
                op: "COMPARE",
                dtype: d,
            })
        }
    })
}

impl Kernel for Compare {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let kind = decode_kind(w, "comparison", CompareKind::from_word)?;
        Ok(Compare { kind })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.kind.word());
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        2..=2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        same_dtype(
            self.name(),
            inputs,
            &[
                DType::F32,
                DType::F16,
                DType::I32,
                DType::Bool8,
                DType::U8,
                DType::I8,
            ],
        )?;
        Ok(vec![broadcast_shape(
            self.name(),
            &inputs[0].shape,
            &inputs[1].shape,
        )?])
    }

    fn check_outputs(&self, _inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        for o in outputs {
            if o.dtype != DType::Bool8 {
                return Err(KernelError::DType {
                    expected: DType::Bool8,
                    got: o.dtype,
                });
            }
        }
        Ok(())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let (a, b) = (inputs[0], inputs[1]);
        let (x, y) = (values(&a)?, values(&b)?);
        let out_shape = outputs[0].ty.shape.clone();
        let o = outputs[0].bools_mut()?;
        let f: fn(f64, f64) -> bool = match self.kind {
            CompareKind::Equal => |p, q| p == q,
            CompareKind::NotEqual => |p, q| p != q,
            CompareKind::Less => |p, q| p < q,
            CompareKind::LessEqual => |p, q| p <= q,
            CompareKind::Greater => |p, q| p > q,
            CompareKind::GreaterEqual => |p, q| p >= q,
        };
        for_each_broadcast(a.shape(), b.shape(), &out_shape, |i, ia, ib| {
            o[i] = u8::from(f(x[ia], y[ib]));
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Staged;

    #[test]
    fn quantised_compare_by_value() {
        let ta = TensorType::quantized(DType::U8, &[3], 1.0, 128);
        let tb = TensorType::quantized(DType::U8, &[1], 2.0, 128);
        let to = TensorType::new(DType::Bool8, &[3]);
        let a = [127u8, 130, 132];
        let b = [129u8];
        let mut so = Staged::zeroed(3);
        let k = Compare {
            kind: CompareKind::Less,
        };
        k.check_outputs(&[&ta, &tb], &[&to]).unwrap();
        let ins = [View { ty: &ta, bytes: &a }, View { ty: &tb, bytes: &b }];
        let mut outs = [ViewMut {
            ty: &to,
            bytes: so.bytes_mut(),
        }];
        k.run(&ins, &mut outs).unwrap();
        // a = -1, 2, 4; b = 2.
        assert_eq!(so.bytes(), &[1, 0, 0]);
    }
}
