//! NNAPI BIDIRECTIONAL_SEQUENCE_RNN: a forward RNN over a sequence and a backward one over
//! the reversed sequence, with separate or merged outputs, optional final hidden states
//! and an optional aux input (parallel linking without aux weights: the backward direction
//! reads the aux input; cross linking with aux weights: both directions add their aux
//! weights times the aux input). float32 and float16.
//!
//! Inputs, by slot: 0 input, 1 forward weights, 2 forward recurrent weights, 3 forward
//! bias, 4 forward hidden state, 5..=8 the same for the backward direction, 9 aux input,
//! 10 forward aux weights, 11 backward aux weights (slots 9..=11 optional). Outputs:
//! forward output (with `merge`, both directions concatenated on the last axis), the
//! backward output unless `merge`, then with `state_outputs` the forward and backward final
//! hidden states.
//!
//! Parameter words: presence mask, activation, time major, merge outputs, state outputs.

use std::ops::RangeInclusive;

use super::cell::{self, SeqIn, SeqOut};
use super::rnn::{check_rnn_dir, rnn_dir};
use super::sequence_lstm::seq_dims;
use super::{act_word, float_dtype, spread, RecurrentActivation};
use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::{bad_shape, Result};
use crate::tensor::{widen_f16, TensorType, View, ViewMut};

/// A bidirectional RNN.
#[derive(Debug, Clone, PartialEq)]
pub struct BidiRnn {
    /// Presence mask of the input slots.
    pub present: u32,
    /// The activation.
    pub activation: RecurrentActivation,
    /// `[time, batch, input]` rather than `[batch, time, input]`.
    pub time_major: bool,
    /// One output with both directions concatenated.
    pub merge: bool,
    /// Also output the final hidden states.
    pub state_outputs: bool,
}

/// Input slots of [`BidiRnn`].
pub const BIDI_RNN_SLOTS: usize = 12;

impl Kernel for BidiRnn {
    fn name(&self) -> &'static str {
        "BIDIRECTIONAL_SEQUENCE_RNN"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let present = w.u32("presence mask")?;
        if present >> BIDI_RNN_SLOTS != 0 || present & 0x1ff != 0x1ff {
            return Err(w.err("bad presence mask"));
        }
        let aux = present >> 9 & 7;
        if !(aux == 0 || aux == 1 || aux == 7) {
            return Err(w.err("unsupported aux input / aux weights combination"));
        }
        Ok(BidiRnn {
            present,
            activation: act_word(w)?,
            time_major: w.bool("time major")?,
            merge: w.bool("merge outputs")?,
            state_outputs: w.bool("state outputs")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.present);
        w.push(self.activation.code());
        w.push(enc::b(self.time_major));
        w.push(enc::b(self.merge));
        w.push(enc::b(self.state_outputs));
    }

    fn input_count(&self) -> RangeInclusive<usize> {
        let n = self.present.count_ones() as usize;
        n..=n
    }

    fn output_count(&self) -> usize {
        let outs = if self.merge { 1 } else { 2 };
        outs + if self.state_outputs { 2 } else { 0 }
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let s = spread(name, self.present.into(), BIDI_RNN_SLOTS, inputs)?;
        float_dtype(name, &s)?;
        let need = |k: usize| s[k].ok_or_else(|| bad_shape(name, format!("slot {k} absent")));
        let input = need(0)?;
        let (steps, batch, n_input) = seq_dims(name, input, self.time_major)?;
        let aux = match s[9] {
            Some(a) => {
                let (t, b, n) = seq_dims(name, a, self.time_major)?;
                if (t, b) != (steps, batch) {
                    return Err(bad_shape(
                        name,
                        "aux input steps or batch differ from the input",
                    ));
                }
                Some(n)
            }
            None => None,
        };
        let cross = s[10].is_some();
        let fu = check_rnn_dir(
            name,
            [need(1)?, need(2)?, need(3)?, need(4)?],
            s[10],
            batch,
            n_input,
            aux,
        )?;
        let bw_input = if cross {
            n_input
        } else {
            aux.unwrap_or(n_input)
        };
        let bu = check_rnn_dir(
            name,
            [need(5)?, need(6)?, need(7)?, need(8)?],
            s[11],
            batch,
            bw_input,
            aux,
        )?;
        let dims = |n: usize| {
            let mut d = input.shape.clone();
            d[2] = n;
            d
        };
        let mut shapes = if self.merge {
            vec![dims(fu + bu)]
        } else {
            vec![dims(fu), dims(bu)]
        };
        if self.state_outputs {
            shapes.extend([vec![batch, fu], vec![batch, bu]]);
        }
        Ok(shapes)
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let name = self.name();
        widen_f16(inputs, outputs, |inputs, outputs| {
            let s = spread(name, self.present.into(), BIDI_RNN_SLOTS, inputs)?;
            let need = |k: usize| s[k].ok_or_else(|| bad_shape(name, format!("slot {k} absent")));
            let x = need(0)?;
            let (steps, batch, n_input) = seq_dims(name, x.ty, self.time_major)?;
            let cross = s[10].is_some();
            let n_aux = s[9].map_or(0, |a| a.shape()[2]);
            let fw = rnn_dir(
                [need(1)?, need(2)?, need(3)?, need(4)?],
                s[10],
                n_input,
                n_aux,
            )?;
            let (bw_x, bw_n) = match s[9] {
                Some(a) if !cross => (a, n_aux),
                _ => (x, n_input),
            };
            let bw = rnn_dir([need(5)?, need(6)?, need(7)?, need(8)?], s[11], bw_n, n_aux)?;
            let mk = |v: View<'_>, n: usize| -> Result<(Vec<f32>, usize)> {
                Ok((v.f32s()?.to_vec(), n))
            };
            let fx = mk(x, n_input)?;
            let bx = mk(bw_x, bw_n)?;
            let ax = match s[9] {
                Some(a) if cross => Some(mk(a, n_aux)?),
                _ => None,
            };
            let seq = |d: &(Vec<f32>, usize)| SeqIn {
                data: &[],
                time_major: self.time_major,
                steps,
                batch,
                n: d.1,
            };
            let fw_seq = SeqIn {
                data: &fx.0,
                ..seq(&fx)
            };
            let bw_seq = SeqIn {
                data: &bx.0,
                ..seq(&bx)
            };
            let aux_seq = ax.as_ref().map(|a| SeqIn {
                data: &a.0,
                ..seq(a)
            });
            let (fu, bu) = (fw.units, bw.units);
            let (main, rest) = outputs
                .split_first_mut()
                .ok_or_else(|| bad_shape(name, "no output"))?;
            let (fh, bh);
            if self.merge {
                let mut out = SeqOut {
                    data: main.f32s_mut()?,
                    time_major: self.time_major,
                    steps,
                    batch,
                    width: fu + bu,
                    offset: 0,
                };
                fh = cell::rnn_sequence(
                    &fw,
                    self.activation,
                    &fw_seq,
                    aux_seq.as_ref(),
                    true,
                    &mut out,
                );
                out.offset = fu;
                bh = cell::rnn_sequence(
                    &bw,
                    self.activation,
                    &bw_seq,
                    aux_seq.as_ref(),
                    false,
                    &mut out,
                );
            } else {
                let mut out = SeqOut {
                    data: main.f32s_mut()?,
                    time_major: self.time_major,
                    steps,
                    batch,
                    width: fu,
                    offset: 0,
                };
                fh = cell::rnn_sequence(
                    &fw,
                    self.activation,
                    &fw_seq,
                    aux_seq.as_ref(),
                    true,
                    &mut out,
                );
                let bw_out = rest
                    .first_mut()
                    .ok_or_else(|| bad_shape(name, "no backward output"))?;
                let mut out = SeqOut {
                    data: bw_out.f32s_mut()?,
                    time_major: self.time_major,
                    steps,
                    batch,
                    width: bu,
                    offset: 0,
                };
                bh = cell::rnn_sequence(
                    &bw,
                    self.activation,
                    &bw_seq,
                    aux_seq.as_ref(),
                    false,
                    &mut out,
                );
            }
            let states = if self.merge {
                &mut rest[..]
            } else {
                &mut rest[1..]
            };
            if let [f, b] = states {
                f.f32s_mut()?.copy_from_slice(&fh);
                b.f32s_mut()?.copy_from_slice(&bh);
            }
            Ok(())
        })
    }
}
