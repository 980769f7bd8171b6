//! NNAPI ADD, SUB, MUL, DIV with numpy-style broadcasting and a fused activation.
//! float32 (IEEE division), float16 (computed in float32), int32 (wrapping add/sub/mul;
//! DIV rounds toward negative infinity and gives 0 for a zero divisor; no activation).
//!
//! Parameter words: kind (Add 0, Sub 1, Mul 2, Div 3), act. Inputs: a, b. Output: one.

use crate::kernels::kernel::{same_dtype, Kernel, Words};
use crate::kernels::layout::{broadcast_shape, for_each_broadcast};
use crate::kernels::{Activation, KernelError, Result};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

/// Which arithmetic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryKind {
    /// a + b
    Add,
    /// a - b
    Sub,
    /// a * b
    Mul,
    /// a / b
    Div,
}

const KINDS: [BinaryKind; 4] = [
    BinaryKind::Add,
    BinaryKind::Sub,
    BinaryKind::Mul,
    BinaryKind::Div,
];

/// `out = act(a op b)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Binary {
    /// The operation.
    pub kind: BinaryKind,
    /// Fused activation.
    pub act: Activation,
}

/// Integer division rounding toward negative infinity; 0 for a zero divisor (NNAPI leaves
/// it undefined but must not crash).
fn floor_div(p: i32, q: i32) -> i32 {
    if q == 0 {
        return 0;
    }
    let r = p.wrapping_div(q);
    if p.wrapping_rem(q) != 0 && ((p < 0) != (q < 0)) {
        r.wrapping_sub(1)
    } else {
        r
    }
}

impl Kernel for Binary {
    fn name(&self) -> &'static str {
        match self.kind {
            BinaryKind::Add => "ADD",
            BinaryKind::Sub => "SUB",
            BinaryKind::Mul => "MUL",
            BinaryKind::Div => "DIV",
        }
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let k = w.u32("kind")?;
        let kind = *KINDS
            .get(k as usize)
            .ok_or_else(|| w.err(format!("bad binary kind {k}")))?;
        Ok(Binary {
            kind,
            act: w.act()?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        let k = KINDS.iter().position(|k| *k == self.kind).unwrap_or(0) as u32;
        w.extend([k, self.act as u32]);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        2..=2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let dt = same_dtype(self.name(), inputs, &[DType::F32, DType::F16, DType::I32])?;
        if dt == DType::I32 && self.act != Activation::None {
            return Err(KernelError::InvalidShape {
                op: self.name(),
                reason: "int32 arithmetic takes no activation".into(),
            });
        }
        Ok(vec![broadcast_shape(
            self.name(),
            &inputs[0].shape,
            &inputs[1].shape,
        )?])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let (a, b) = (inputs[0], inputs[1]);
        let out_shape = outputs[0].ty.shape.clone();
        if a.ty.dtype == DType::I32 {
            let (x, y) = (a.i32s()?, b.i32s()?);
            let o = outputs[0].i32s_mut()?;
            let f: fn(i32, i32) -> i32 = match self.kind {
                BinaryKind::Add => i32::wrapping_add,
                BinaryKind::Sub => i32::wrapping_sub,
                BinaryKind::Mul => i32::wrapping_mul,
                BinaryKind::Div => floor_div,
            };
            for_each_broadcast(a.shape(), b.shape(), &out_shape, |i, ia, ib| {
                o[i] = f(x[ia], y[ib]);
            });
            return Ok(());
        }
        let kind = self.kind;
        let act = self.act;
        widen_f16(inputs, outputs, |ins, outs| {
            let (x, y) = (ins[0].f32s()?, ins[1].f32s()?);
            let o = outs[0].f32s_mut()?;
            let f: fn(f32, f32) -> f32 = match kind {
                BinaryKind::Add => |p, q| p + q,
                BinaryKind::Sub => |p, q| p - q,
                BinaryKind::Mul => |p, q| p * q,
                BinaryKind::Div => |p, q| p / q,
            };
            for_each_broadcast(ins[0].shape(), ins[1].shape(), &out_shape, |i, ia, ib| {
                o[i] = f(x[ia], y[ib]);
            });
            act.apply_slice(o);
            Ok(())
        })
    }
}
