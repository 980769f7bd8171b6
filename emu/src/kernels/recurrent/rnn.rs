//! NNAPI RNN: one step of a fully connected recurrent cell,
//! `h' = act(bias + W x + R h)`. float32 and float16.
//!
//! Inputs: input `[batch, input]`, weights `[units, input]`, recurrent weights
//! `[units, units]`, bias `[units]`, hidden state `[batch, units]`. Outputs: hidden state
//! out, output (both `[batch, units]`, equal).
//!
//! Parameter words: activation ([`super::RecurrentActivation`] code).

use std::ops::RangeInclusive;

use super::cell::{self, RnnDir};
use super::{act_word, expect_shape, float_dtype, ranked, RecurrentActivation};
use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::Result;
use crate::tensor::{widen_f16, TensorType, View, ViewMut};

/// One RNN step.
#[derive(Debug, Clone, PartialEq)]
pub struct Rnn {
    /// The activation.
    pub activation: RecurrentActivation,
}

/// Validates one RNN direction (`w`, `r`, `bias`, `h0`, optional aux weights) and returns
/// the unit count.
pub(crate) fn check_rnn_dir(
    op: &'static str,
    t: [&TensorType; 4],
    aux_w: Option<&TensorType>,
    batch: usize,
    n_input: usize,
    n_aux: Option<usize>,
) -> Result<usize> {
    let [w, r, bias, h0] = t;
    let units = ranked(op, "weights", w, 2)?[0];
    expect_shape(op, "weights", w, &[units, n_input])?;
    expect_shape(op, "recurrent weights", r, &[units, units])?;
    expect_shape(op, "bias", bias, &[units])?;
    expect_shape(op, "hidden state", h0, &[batch, units])?;
    if let Some(a) = aux_w {
        let na =
            n_aux.ok_or_else(|| crate::kernels::bad_shape(op, "aux weights without aux input"))?;
        expect_shape(op, "aux weights", a, &[units, na])?;
    }
    Ok(units)
}

/// One direction's float32 tensors from views `[w, r, bias, h0]`.
pub(crate) fn rnn_dir<'a>(
    t: [View<'a>; 4],
    aux_w: Option<View<'a>>,
    n_input: usize,
    n_aux: usize,
) -> Result<RnnDir<'a>> {
    let [w, r, bias, h0] = t;
    Ok(RnnDir {
        units: w.shape()[0],
        w: w.f32s()?,
        r: r.f32s()?,
        bias: bias.f32s()?,
        h0: h0.f32s()?,
        aux_w: aux_w.map(|v| v.f32s()).transpose()?,
        n_input,
        n_aux,
    })
}

impl Kernel for Rnn {
    fn name(&self) -> &'static str {
        "RNN"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(Rnn {
            activation: act_word(w)?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.activation.code());
    }

    fn input_count(&self) -> RangeInclusive<usize> {
        5..=5
    }

    fn output_count(&self) -> usize {
        2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let opts: Vec<Option<&TensorType>> = inputs.iter().copied().map(Some).collect();
        float_dtype(self.name(), &opts)?;
        let x = ranked(self.name(), "input", inputs[0], 2)?;
        let (batch, n_input) = (x[0], x[1]);
        let units = check_rnn_dir(
            self.name(),
            [inputs[1], inputs[2], inputs[3], inputs[4]],
            None,
            batch,
            n_input,
            None,
        )?;
        Ok(vec![vec![batch, units], vec![batch, units]])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        widen_f16(inputs, outputs, |inputs, outputs| {
            let x = inputs[0];
            let (batch, n_input) = (x.shape()[0], x.shape()[1]);
            let d = rnn_dir(
                [inputs[1], inputs[2], inputs[3], inputs[4]],
                None,
                n_input,
                0,
            )?;
            let mut h = vec![0.0; batch * d.units];
            cell::rnn_step(&d, self.activation, batch, x.f32s()?, None, d.h0, &mut h);
            for o in outputs.iter_mut() {
                o.f32s_mut()?.copy_from_slice(&h);
            }
            Ok(())
        })
    }
}
