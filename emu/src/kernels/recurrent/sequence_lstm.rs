//! NNAPI UNIDIRECTIONAL_SEQUENCE_LSTM: an LSTM run over every step of a sequence (time
//! major `[time, batch, input]` or batch major `[batch, time, input]`), with the optional
//! parts of [`super::lstm`]. float32 and float16.
//!
//! Inputs, by slot: 0 input, then slots 1..=23 are the direction slots
//! [`super::cell::slot`] 0..=22. Outputs: output (the input's layout with `output` as last
//! dimension), then with `state_outputs` the final output state `[batch, output]` and cell
//! state `[batch, cells]`.
//!
//! Parameter words: presence mask, activation, cell clip, projection clip, time major
//! (0/1), state outputs (0/1).

use std::ops::RangeInclusive;

use super::cell::{self, LstmParams, SeqIn, SeqOut};
use super::lstm::{check_dir, check_required, decode_params, dir_from, encode_params, LSTM_SLOTS};
use super::{float_dtype, ranked, spread};
use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::{bad_shape, Result};
use crate::tensor::{widen_f16, TensorType, View, ViewMut};

/// An LSTM over a sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceLstm {
    /// Presence mask of the input slots.
    pub present: u32,
    /// Activation and clips.
    pub params: LstmParams,
    /// `[time, batch, input]` rather than `[batch, time, input]`.
    pub time_major: bool,
    /// Also output the final states.
    pub state_outputs: bool,
}

/// `(time, batch, input)` of a sequence input shape.
pub(crate) fn seq_dims(
    op: &'static str,
    t: &TensorType,
    time_major: bool,
) -> Result<(usize, usize, usize)> {
    let s = ranked(op, "input", t, 3)?;
    Ok(if time_major {
        (s[0], s[1], s[2])
    } else {
        (s[1], s[0], s[2])
    })
}

impl Kernel for SequenceLstm {
    fn name(&self) -> &'static str {
        "UNIDIRECTIONAL_SEQUENCE_LSTM"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let present = w.u32("presence mask")?;
        if present >> LSTM_SLOTS != 0 || present & 1 == 0 {
            return Err(w.err("bad presence mask"));
        }
        check_required(w, u64::from(present), 1)?;
        Ok(SequenceLstm {
            present,
            params: decode_params(w)?,
            time_major: w.bool("time major")?,
            state_outputs: w.bool("state outputs")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.present);
        encode_params(&self.params, w);
        w.push(enc::b(self.time_major));
        w.push(enc::b(self.state_outputs));
    }

    fn input_count(&self) -> RangeInclusive<usize> {
        let n = self.present.count_ones() as usize;
        n..=n
    }

    fn output_count(&self) -> usize {
        if self.state_outputs {
            3
        } else {
            1
        }
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let s = spread(self.name(), self.present.into(), LSTM_SLOTS, inputs)?;
        float_dtype(self.name(), &s)?;
        let input = s[0].ok_or_else(|| bad_shape(self.name(), "no input"))?;
        let (_, batch, n_input) = seq_dims(self.name(), input, self.time_major)?;
        let (nc, no) = check_dir(self.name(), &s[1..], batch, n_input, None)?;
        let mut out = input.shape.clone();
        out[2] = no;
        let mut shapes = vec![out];
        if self.state_outputs {
            shapes.push(vec![batch, no]);
            shapes.push(vec![batch, nc]);
        }
        Ok(shapes)
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> crate::kernels::Cost {
        let elems: u64 = inputs.iter().map(|t| t.numel() as u64).sum::<u64>()
            + outputs
                .iter()
                .map(|s| s.iter().product::<usize>() as u64)
                .sum::<u64>();
        crate::kernels::Cost { macs: elems, elems }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let name = self.name();
        widen_f16(inputs, outputs, |inputs, outputs| {
            let s = spread(name, self.present.into(), LSTM_SLOTS, inputs)?;
            let x = s[0].ok_or_else(|| bad_shape(name, "no input"))?;
            let (steps, batch, n_input) = seq_dims(name, x.ty, self.time_major)?;
            let d = dir_from(&s, 1, n_input, 0)?;
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
                width: d.n_output,
                offset: 0,
            };
            let (h, c) = cell::lstm_sequence(&self.params, &d, &input, None, true, &mut out);
            if let [h_out, c_out] = rest {
                h_out.f32s_mut()?.copy_from_slice(&h);
                c_out.f32s_mut()?.copy_from_slice(&c);
            }
            Ok(())
        })
    }
}
