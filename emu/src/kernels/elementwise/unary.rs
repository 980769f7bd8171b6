//! NNAPI RELU, RELU1, RELU6, LOGISTIC, TANH, FLOOR on float32 and float16.
//!
//! Parameter words: kind (Relu 0, Relu1 1, Relu6 2, Logistic 3, Tanh 4, Floor 5).

use crate::kernels::kernel::{same_dtype, Kernel, Words};
use crate::kernels::{clamp_nan, Result};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

/// Which function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryKind {
    /// max(x, 0)
    Relu,
    /// clamp(x, -1, 1)
    Relu1,
    /// clamp(x, 0, 6)
    Relu6,
    /// 1 / (1 + e^-x)
    Logistic,
    /// tanh(x)
    Tanh,
    /// floor(x)
    Floor,
}

const KINDS: [(UnaryKind, &str); 6] = [
    (UnaryKind::Relu, "RELU"),
    (UnaryKind::Relu1, "RELU1"),
    (UnaryKind::Relu6, "RELU6"),
    (UnaryKind::Logistic, "LOGISTIC"),
    (UnaryKind::Tanh, "TANH"),
    (UnaryKind::Floor, "FLOOR"),
];

/// `out[i] = f(x[i])`.
#[derive(Debug, Clone, PartialEq)]
pub struct Unary {
    /// The function.
    pub kind: UnaryKind,
}

impl Unary {
    fn index(&self) -> usize {
        KINDS.iter().position(|(k, _)| *k == self.kind).unwrap_or(0)
    }
}

/// Applies `kind` element-wise.
pub(crate) fn unary_f32(kind: UnaryKind, x: &[f32], out: &mut [f32]) {
    let f: fn(f32) -> f32 = match kind {
        UnaryKind::Relu => |v| clamp_nan(v, 0.0, f32::INFINITY),
        UnaryKind::Relu1 => |v| clamp_nan(v, -1.0, 1.0),
        UnaryKind::Relu6 => |v| clamp_nan(v, 0.0, 6.0),
        UnaryKind::Logistic => |v| 1.0 / (1.0 + (-v).exp()),
        UnaryKind::Tanh => f32::tanh,
        UnaryKind::Floor => f32::floor,
    };
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}

impl Kernel for Unary {
    fn name(&self) -> &'static str {
        KINDS[self.index()].1
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let k = w.u32("kind")?;
        let (kind, _) = *KINDS
            .get(k as usize)
            .ok_or_else(|| w.err(format!("bad unary kind {k}")))?;
        Ok(Unary { kind })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.index() as u32);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        same_dtype(self.name(), inputs, &[DType::F32, DType::F16])?;
        Ok(vec![inputs[0].shape.clone()])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        widen_f16(inputs, outputs, |ins, outs| {
            unary_f32(self.kind, ins[0].f32s()?, outs[0].f32s_mut()?);
            Ok(())
        })
    }
}
