//! NNAPI SVDF: a singular-value-decomposition filter over a memory of past feature
//! activations. float32 and float16.
//!
//! Inputs: input `[batch, input]`, feature weights `[filters, input]`, time weights
//! `[filters, memory]`, then the bias `[units]` when `has_bias`, then the state in
//! `[batch, memory * filters]` (`filters = units * rank`). Outputs: state out (same shape as
//! the state in), output `[batch, units]`.
//!
//! Each step: the state's newest column takes the feature activations, each filter's
//! memory is dotted with its time weights, the `rank` filters of each unit are summed, the
//! bias added and the activation applied; then the memory shifts by one (the newest column
//! zeroed), as the NNAPI reference does.
//!
//! Parameter words: rank (>= 1), activation ([`super::RecurrentActivation`] code), has bias
//! (0/1).

use std::ops::RangeInclusive;

use super::cell::mat_vec_acc;
use super::{act_word, expect_shape, float_dtype, ranked, RecurrentActivation};
use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::{bad_shape, Result};
use crate::tensor::{widen_f16, TensorType, View, ViewMut};

/// SVDF.
#[derive(Debug, Clone, PartialEq)]
pub struct Svdf {
    /// Filters per unit.
    pub rank: u32,
    /// The activation.
    pub activation: RecurrentActivation,
    /// Whether a bias input is given.
    pub has_bias: bool,
}

impl Kernel for Svdf {
    fn name(&self) -> &'static str {
        "SVDF"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(Svdf {
            rank: w.nonzero("rank")?,
            activation: act_word(w)?,
            has_bias: w.bool("has bias")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.rank);
        w.push(self.activation.code());
        w.push(enc::b(self.has_bias));
    }

    fn input_count(&self) -> RangeInclusive<usize> {
        let n = 4 + usize::from(self.has_bias);
        n..=n
    }

    fn output_count(&self) -> usize {
        2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let opts: Vec<Option<&TensorType>> = inputs.iter().copied().map(Some).collect();
        float_dtype(name, &opts)?;
        let x = ranked(name, "input", inputs[0], 2)?;
        let (batch, n_input) = (x[0], x[1]);
        let filters = ranked(name, "feature weights", inputs[1], 2)?[0];
        expect_shape(name, "feature weights", inputs[1], &[filters, n_input])?;
        let memory = ranked(name, "time weights", inputs[2], 2)?[1];
        expect_shape(name, "time weights", inputs[2], &[filters, memory])?;
        let rank = self.rank as usize;
        if filters % rank != 0 || memory == 0 {
            return Err(bad_shape(
                name,
                "filters must be a multiple of rank, memory >= 1",
            ));
        }
        let units = filters / rank;
        if self.has_bias {
            expect_shape(name, "bias", inputs[3], &[units])?;
        }
        let state = inputs[inputs.len() - 1];
        let state_len = memory
            .checked_mul(filters)
            .ok_or(crate::kernels::KernelError::TooLarge)?;
        expect_shape(name, "state", state, &[batch, state_len])?;
        Ok(vec![vec![batch, state_len], vec![batch, units]])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let name = self.name();
        widen_f16(inputs, outputs, |inputs, outputs| {
            let x = inputs[0];
            let (batch, n_input) = (x.shape()[0], x.shape()[1]);
            let filters = inputs[1].shape()[0];
            let memory = inputs[2].shape()[1];
            let rank = self.rank as usize;
            let units = filters / rank;
            let wf = inputs[1].f32s()?;
            let wt = inputs[2].f32s()?;
            let bias = if self.has_bias {
                Some(inputs[3].f32s()?)
            } else {
                None
            };
            let state_in = inputs[inputs.len() - 1].f32s()?;
            let [state_out, out] = outputs else {
                return Err(bad_shape(name, "needs two outputs"));
            };
            let state = state_out.f32s_mut()?;
            state.copy_from_slice(state_in);
            let mut scratch = vec![0.0f32; batch * filters];
            mat_vec_acc(wf, filters, n_input, x.f32s()?, batch, &mut scratch);
            for (i, s) in scratch.iter().enumerate() {
                state[i * memory + memory - 1] = *s;
            }
            for b in 0..batch {
                for f in 0..filters {
                    let mem = &state[(b * filters + f) * memory..(b * filters + f + 1) * memory];
                    let w = &wt[f * memory..(f + 1) * memory];
                    scratch[b * filters + f] = w.iter().zip(mem).map(|(a, c)| a * c).sum();
                }
            }
            let out = out.f32s_mut()?;
            for (k, o) in out.iter_mut().enumerate() {
                let mut v: f32 = scratch[k * rank..(k + 1) * rank].iter().sum();
                if let Some(bias) = bias {
                    v += bias[k % units];
                }
                *o = self.activation.apply(v);
            }
            for mem in state.chunks_exact_mut(memory) {
                mem.copy_within(1.., 0);
                mem[memory - 1] = 0.0;
            }
            Ok(())
        })
    }
}

impl Svdf {
    /// An SVDF kernel.
    pub fn new(rank: u32, activation: RecurrentActivation, has_bias: bool) -> Svdf {
        Svdf {
            rank,
            activation,
            has_bias,
        }
    }
}
