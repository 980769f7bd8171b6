//! Recurrent kernels: LSTM (one step, unidirectional and bidirectional sequences), RNN (one
//! step and sequences), SVDF and the two quantised LSTMs, with NNAPI semantics.
//!
//! # Optional inputs
//!
//! NNAPI's recurrent operations have many optional tensors (CIFG drops the input gate,
//! peephole, projection, layer normalisation, auxiliary inputs). A kernel receives only the
//! tensors that are present: its first parameter word(s) hold a *presence mask* whose bit
//! `k` says that slot `k` of the kernel's slot list is present, and its inputs are the
//! present slots' tensors in slot order (so `input_count` is the mask's population count).
//! Each kernel file lists its slots; the float LSTM kernels share [`lstm`]'s slot layout.
//!
//! float16 kernels compute in float32 and round the outputs to float16 (the NNAPI
//! reference widens float16 LSTM, SVDF and sequence inputs the same way).

pub mod bidi_lstm;
pub mod bidi_rnn;
pub mod cell;
pub mod lstm;
pub mod qlstm;
pub mod quantized_lstm;
pub mod rnn;
pub mod sequence_lstm;
pub mod sequence_rnn;
pub mod svdf;

#[cfg(test)]
mod tests;

use crate::kernels::{bad_shape, Cost, KernelError, Result};
use crate::tensor::{DType, TensorType};

/// The activation of a recurrent operation (TFLite's `TfLiteFusedActivation` codes, which
/// NNAPI's recurrent operations use): none 0, relu 1, relu1 2, relu6 3, tanh 4, sigmoid 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecurrentActivation {
    /// Identity.
    #[default]
    None,
    /// max(0, x).
    Relu,
    /// clamp(x, -1, 1).
    Relu1,
    /// clamp(x, 0, 6).
    Relu6,
    /// tanh(x).
    Tanh,
    /// 1 / (1 + exp(-x)).
    Sigmoid,
}

impl RecurrentActivation {
    /// The code of a parameter word.
    pub fn from_code(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::None,
            1 => Self::Relu,
            2 => Self::Relu1,
            3 => Self::Relu6,
            4 => Self::Tanh,
            6 => Self::Sigmoid,
            _ => return None,
        })
    }

    /// The parameter word.
    pub fn code(self) -> u32 {
        match self {
            Self::None => 0,
            Self::Relu => 1,
            Self::Relu1 => 2,
            Self::Relu6 => 3,
            Self::Tanh => 4,
            Self::Sigmoid => 6,
        }
    }

    /// Applies the activation to one value.
    #[inline]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Self::None => x,
            Self::Relu => x.max(0.0),
            Self::Relu1 => x.clamp(-1.0, 1.0),
            Self::Relu6 => x.clamp(0.0, 6.0),
            Self::Tanh => x.tanh(),
            Self::Sigmoid => sigmoid(x),
        }
    }
}

/// The logistic function.
#[inline]
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Reads a recurrent activation word.
pub(crate) fn act_word(w: &mut crate::kernels::Words<'_>) -> Result<RecurrentActivation> {
    let v = w.u32("activation")?;
    RecurrentActivation::from_code(v).ok_or_else(|| w.err(format!("bad activation {v}")))
}

/// The inputs of a presence-masked kernel spread back to their slots: `None` for absent
/// slots. Fails if the count of inputs does not match the mask.
pub(crate) fn spread<T: Copy>(
    op: &'static str,
    mask: u64,
    slots: usize,
    inputs: &[T],
) -> Result<Vec<Option<T>>> {
    let mut out = vec![None; slots];
    let mut it = inputs.iter();
    for (k, o) in out.iter_mut().enumerate() {
        if mask >> k & 1 == 1 {
            *o = Some(
                *it.next()
                    .ok_or_else(|| bad_shape(op, "fewer inputs than the mask"))?,
            );
        }
    }
    if it.next().is_some() {
        return Err(bad_shape(op, "more inputs than the mask"));
    }
    Ok(out)
}

/// Requires every present tensor to be float32 or float16, all the same.
pub(crate) fn float_dtype(op: &'static str, ts: &[Option<&TensorType>]) -> Result<DType> {
    let mut dtype = None;
    for t in ts.iter().flatten() {
        match dtype {
            None => {
                if !t.dtype.is_float() {
                    return Err(KernelError::UnsupportedDType { op, dtype: t.dtype });
                }
                dtype = Some(t.dtype);
            }
            Some(d) if d != t.dtype => {
                return Err(KernelError::DType {
                    expected: d,
                    got: t.dtype,
                })
            }
            _ => {}
        }
    }
    dtype.ok_or_else(|| bad_shape(op, "no tensors"))
}

/// Requires `t`'s shape to be `want`.
pub(crate) fn expect_shape(
    op: &'static str,
    what: &str,
    t: &TensorType,
    want: &[usize],
) -> Result<()> {
    if t.shape != want {
        return Err(bad_shape(
            op,
            format!("{what} has shape {:?}, expected {want:?}", t.shape),
        ));
    }
    Ok(())
}

/// Requires a rank-`rank` shape and returns it.
pub(crate) fn ranked<'a>(
    op: &'static str,
    what: &str,
    t: &'a TensorType,
    rank: usize,
) -> Result<&'a [usize]> {
    if t.shape.len() != rank {
        return Err(bad_shape(
            op,
            format!("{what} must have rank {rank}, got {:?}", t.shape),
        ));
    }
    Ok(&t.shape)
}

/// The work of a recurrent kernel for the timing model: every rank-2 tensor after the
/// input (the weight matrices, and the small state rows) multiplied once per input row
/// (`batch`, times `time` for a sequence), plus every element touched.
pub(crate) fn recurrent_cost(inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
    let n = |s: &[usize]| s.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64));
    let rows = inputs.first().map_or(0, |x| {
        let last = x.shape.last().copied().unwrap_or(1).max(1) as u64;
        n(&x.shape) / last
    });
    let macs = inputs
        .iter()
        .skip(1)
        .filter(|t| t.shape.len() == 2)
        .fold(0u64, |a, t| {
            a.saturating_add(n(&t.shape).saturating_mul(rows))
        });
    let elems = inputs
        .iter()
        .map(|t| n(&t.shape))
        .chain(outputs.iter().map(|s| n(s)))
        .fold(0u64, u64::saturating_add);
    Cost { macs, elems }
}
