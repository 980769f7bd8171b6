//! NNAPI BIDIRECTIONAL_SEQUENCE_LSTM: a forward LSTM over a sequence and a backward one
//! over the reversed sequence, with separate or merged outputs, optional final states and
//! an optional aux input (parallel linking: the backward direction reads the aux input;
//! cross linking: both directions add their aux weights times the aux input). float32 and
//! float16.
//!
//! Inputs, by slot: 0 input, 1..=27 the forward direction's [`super::cell::slot`]s,
//! 28..=54 the backward direction's, 55 the aux input (the input's layout). Outputs:
//! forward output (with `merge`, both directions concatenated on the last axis), the
//! backward output unless `merge`, then with `state_outputs` the forward output state,
//! forward cell state, backward output state, backward cell state.
//!
//! Parameter words: presence mask low word, high word, activation, cell clip, projection
//! clip, time major, merge outputs, state outputs (0/1 each).

use std::ops::RangeInclusive;

use super::cell::{self, slot, LstmParams, SeqIn, SeqOut};
use super::lstm::{check_dir, check_required, decode_params, dir_from, encode_params};
use super::sequence_lstm::seq_dims;
use super::{float_dtype, spread};
use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::{bad_shape, Result};
use crate::tensor::{widen_f16, TensorType, View, ViewMut};

/// A bidirectional LSTM.
#[derive(Debug, Clone, PartialEq)]
pub struct BidiLstm {
    /// Presence mask of the input slots.
    pub present: u64,
    /// Activation and clips.
    pub params: LstmParams,
    /// `[time, batch, input]` rather than `[batch, time, input]`.
    pub time_major: bool,
    /// One output with both directions concatenated.
    pub merge: bool,
    /// Also output the final states.
    pub state_outputs: bool,
}

/// Input slots of [`BidiLstm`].
pub const BIDI_LSTM_SLOTS: usize = 2 + 2 * slot::COUNT;
/// The forward direction's first slot.
pub const FW: usize = 1;
/// The backward direction's first slot.
pub const BW: usize = 1 + slot::COUNT;
/// The aux input's slot.
pub const AUX: usize = 1 + 2 * slot::COUNT;

impl BidiLstm {
    fn aux_weights(&self) -> bool {
        self.present >> (FW + slot::AF) & 1 == 1
    }

    fn has_aux(&self) -> bool {
        self.present >> AUX & 1 == 1
    }
}

impl Kernel for BidiLstm {
    fn name(&self) -> &'static str {
        "BIDIRECTIONAL_SEQUENCE_LSTM"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let lo = w.u32("presence mask")?;
        let hi = w.u32("presence mask")?;
        let present = u64::from(lo) | u64::from(hi) << 32;
        if present >> BIDI_LSTM_SLOTS != 0 || present & 1 == 0 {
            return Err(w.err("bad presence mask"));
        }
        check_required(w, present, FW)?;
        check_required(w, present, BW)?;
        let k = BidiLstm {
            present,
            params: decode_params(w)?,
            time_major: w.bool("time major")?,
            merge: w.bool("merge outputs")?,
            state_outputs: w.bool("state outputs")?,
        };
        let bw_aux = present >> (BW + slot::AF) & 1 == 1;
        if k.aux_weights() != bw_aux || (k.aux_weights() && !k.has_aux()) {
            return Err(w.err("aux weights need an aux input in both directions"));
        }
        Ok(k)
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.present as u32);
        w.push((self.present >> 32) as u32);
        encode_params(&self.params, w);
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
        outs + if self.state_outputs { 4 } else { 0 }
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let s = spread(name, self.present, BIDI_LSTM_SLOTS, inputs)?;
        float_dtype(name, &s)?;
        let input = s[0].ok_or_else(|| bad_shape(name, "no input"))?;
        let (steps, batch, n_input) = seq_dims(name, input, self.time_major)?;
        let aux = match s[AUX] {
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
        let cross = aux.filter(|_| self.aux_weights());
        let (fc, fo) = check_dir(name, &s[FW..BW], batch, n_input, cross)?;
        let bw_input = if cross.is_none() {
            aux.unwrap_or(n_input)
        } else {
            n_input
        };
        let (bc, bo) = check_dir(name, &s[BW..AUX], batch, bw_input, cross)?;
        let dims = |n: usize| {
            let mut d = input.shape.clone();
            d[2] = n;
            d
        };
        let mut shapes = if self.merge {
            vec![dims(fo + bo)]
        } else {
            vec![dims(fo), dims(bo)]
        };
        if self.state_outputs {
            shapes.extend([
                vec![batch, fo],
                vec![batch, fc],
                vec![batch, bo],
                vec![batch, bc],
            ]);
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
            let s = spread(name, self.present, BIDI_LSTM_SLOTS, inputs)?;
            let x = s[0].ok_or_else(|| bad_shape(name, "no input"))?;
            let (steps, batch, n_input) = seq_dims(name, x.ty, self.time_major)?;
            let seq = |v: View<'_>| -> Result<(Vec<f32>, usize)> {
                Ok((v.f32s()?.to_vec(), v.shape()[2]))
            };
            let (xs, _) = seq(x)?;
            let aux = s[AUX].map(seq).transpose()?;
            let n_aux = aux.as_ref().map_or(0, |a| a.1);
            let cross = self.aux_weights();
            let fw = dir_from(&s, FW, n_input, n_aux)?;
            let bw_in = match (&aux, cross) {
                (Some(a), false) => a.clone(),
                _ => (xs.clone(), n_input),
            };
            let bw = dir_from(&s, BW, bw_in.1, n_aux)?;
            let base = SeqIn {
                data: &[],
                time_major: self.time_major,
                steps,
                batch,
                n: 0,
            };
            let fw_seq = SeqIn {
                data: &xs,
                n: n_input,
                ..base
            };
            let bw_seq = SeqIn {
                data: &bw_in.0,
                n: bw_in.1,
                ..base
            };
            let aux_seq = aux.as_ref().filter(|_| cross).map(|a| SeqIn {
                data: &a.0,
                n: a.1,
                ..base
            });
            let (fo, bo) = (fw.n_output, bw.n_output);
            let (main, rest) = outputs
                .split_first_mut()
                .ok_or_else(|| bad_shape(name, "no output"))?;
            let (fw_state, bw_state);
            if self.merge {
                let mut out = SeqOut {
                    data: main.f32s_mut()?,
                    time_major: self.time_major,
                    steps,
                    batch,
                    width: fo + bo,
                    offset: 0,
                };
                fw_state = cell::lstm_sequence(
                    &self.params,
                    &fw,
                    &fw_seq,
                    aux_seq.as_ref(),
                    true,
                    &mut out,
                );
                out.offset = fo;
                bw_state = cell::lstm_sequence(
                    &self.params,
                    &bw,
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
                    width: fo,
                    offset: 0,
                };
                fw_state = cell::lstm_sequence(
                    &self.params,
                    &fw,
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
                    width: bo,
                    offset: 0,
                };
                bw_state = cell::lstm_sequence(
                    &self.params,
                    &bw,
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
            if let [fh, fc, bh, bc] = states {
                fh.f32s_mut()?.copy_from_slice(&fw_state.0);
                fc.f32s_mut()?.copy_from_slice(&fw_state.1);
                bh.f32s_mut()?.copy_from_slice(&bw_state.0);
                bc.f32s_mut()?.copy_from_slice(&bw_state.1);
            }
            Ok(())
        })
    }
}
