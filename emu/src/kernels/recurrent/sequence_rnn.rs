//! NNAPI UNIDIRECTIONAL_SEQUENCE_RNN: [`super::rnn`] over every step of a sequence (time
//! major `[time, batch, input]` or batch major `[batch, time, input]`). float32 and float16.
//!
//! Inputs: input, weights `[units, input]`, recurrent weights `[units, units]`, bias
//! `[units]`, hidden state `[batch, units]`. Outputs: output (the input's layout with
//! `units` as last dimension), then with `state_output` the final hidden state.
//!
//! Parameter words: activation, time major (0/1), state output (0/1).

use std::ops::RangeInclusive;

use super::cell::{self, SeqIn, SeqOut};
use super::rnn::{check_rnn_dir, rnn_dir};
use super::sequence_lstm::seq_dims;
use super::{act_word, float_dtype, RecurrentActivation};
use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::{bad_shape, Result};
use crate::tensor::{widen_f16, TensorType, View, ViewMut};

/// An RNN over a sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceRnn {
    /// The activation.
    pub activation: RecurrentActivation,
    /// `[time, batch, input]` rather than `[batch, time, input]`.
    pub time_major: bool,
    /// Also output the final hidden state.
    pub state_output: bool,
}

impl Kernel for SequenceRnn {
    fn name(&self) -> &'static str {
        "UNIDIRECTIONAL_SEQUENCE_RNN"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(SequenceRnn {
            activation: act_word(w)?,
            time_major: w.bool("time major")?,
            state_output: w.bool("state output")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.activation.code());
        w.push(enc::b(self.time_major));
        w.push(enc::b(self.state_output));
    }

    fn input_count(&self) -> RangeInclusive<usize> {
        5..=5
    }

    fn output_count(&self) -> usize {
        1 + usize::from(self.state_output)
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let opts: Vec<Option<&TensorType>> = inputs.iter().copied().map(Some).collect();
        float_dtype(self.name(), &opts)?;
        let (_, batch, n_input) = seq_dims(self.name(), inputs[0], self.time_major)?;
        let units = check_rnn_dir(
            self.name(),
            [inputs[1], inputs[2], inputs[3], inputs[4]],
            None,
            batch,
            n_input,
            None,
        )?;
        let mut out = inputs[0].shape.clone();
        out[2] = units;
        let mut shapes = vec![out];
        if self.state_output {
            shapes.push(vec![batch, units]);
        }
        Ok(shapes)
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let name = self.name();
        widen_f16(inputs, outputs, |inputs, outputs| {
            let x = inputs[0];
            let (steps, batch, n_input) = seq_dims(name, x.ty, self.time_major)?;
            let d = rnn_dir(
                [inputs[1], inputs[2], inputs[3], inputs[4]],
                None,
                n_input,
                0,
            )?;
            let input = SeqIn {
                data: x.f32s()?,
                time_major: self.time_major,
                steps,
                batch,
                n: n_input,
            };
            let (first, rest) = outputs
                .split_first_mut()
                .ok_or_else(|| bad_shape(name, "no output"))?;
            let mut out = SeqOut {
                data: first.f32s_mut()?,
                time_major: self.time_major,
                steps,
                batch,
                width: d.units,
                offset: 0,
            };
            let h = cell::rnn_sequence(&d, self.activation, &input, None, true, &mut out);
            if let Some(s) = rest.first_mut() {
                s.f32s_mut()?.copy_from_slice(&h);
            }
            Ok(())
        })
    }
}
