//! NNAPI LSTM: one step of a long short-term memory cell over a batch, with every optional
//! part of the HAL operation (CIFG, peephole, projection with optional bias, layer
//! normalisation, cell and projection clipping). float32 and float16.
//!
//! Inputs, by slot (see [`super`] for presence masks): 0 input `[batch, input]`, then
//! slots 1..=23 are the direction slots [`cell::slot`] 0..=22 (weights, biases, states,
//! layer-norm weights), all of the input's type. Outputs: scratch `[batch, cells * 4]`
//! (`* 3` with CIFG), output state `[batch, output]`, cell state `[batch, cells]`, output
//! `[batch, output]`.
//!
//! Parameter words: presence mask (bit `k` = slot `k`), activation
//! ([`super::RecurrentActivation`] code), cell clip (f32, >= 0), projection clip (f32,
//! >= 0).

use std::ops::RangeInclusive;

use super::cell::{self, slot, LstmDir, LstmParams};
use super::{act_word, float_dtype, ranked, spread, RecurrentActivation};
use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::{bad_shape, Result};
use crate::tensor::{widen_f16, TensorType, View, ViewMut};

/// One LSTM step.
#[derive(Debug, Clone, PartialEq)]
pub struct Lstm {
    /// Presence mask of the input slots.
    pub present: u32,
    /// Activation, cell clip, projection clip.
    pub params: LstmParams,
}

/// Input slots of [`Lstm`]: the input, then the direction slots 0..=22.
pub const LSTM_SLOTS: usize = 24;

/// Reads the activation and the two clips.
pub(crate) fn decode_params(w: &mut Words<'_>) -> Result<LstmParams> {
    let activation = act_word(w)?;
    let cell_clip = w.finite_f32("cell clip")?;
    let proj_clip = w.finite_f32("projection clip")?;
    if cell_clip < 0.0 || proj_clip < 0.0 {
        return Err(w.err("clips must be >= 0"));
    }
    Ok(LstmParams {
        activation,
        cell_clip,
        proj_clip,
    })
}

/// Writes the activation and the two clips.
pub(crate) fn encode_params(p: &LstmParams, w: &mut Vec<u32>) {
    w.push(p.activation.code());
    w.push(p.cell_clip.to_bits());
    w.push(p.proj_clip.to_bits());
}

/// Checks that the required direction slots starting at `base` are in `mask`.
pub(crate) fn check_required(w: &Words<'_>, mask: u64, base: usize) -> Result<()> {
    for k in slot::REQUIRED {
        if mask >> (base + k) & 1 == 0 {
            return Err(w.err(format!("required LSTM slot {k} is absent")));
        }
    }
    Ok(())
}

/// Validates one direction's tensor shapes (the reference's `CheckInputTensorDimensions`
/// plus the shapes of the states) and returns `(cells, output)`. `n_aux` is the aux input
/// size when an aux input is given.
pub(crate) fn check_dir(
    op: &'static str,
    t: &[Option<&TensorType>],
    batch: usize,
    n_input: usize,
    n_aux: Option<usize>,
) -> Result<(usize, usize)> {
    use slot::*;
    let get = |k: usize| t.get(k).copied().flatten();
    let need = |k: usize| get(k).ok_or_else(|| bad_shape(op, format!("LSTM slot {k} is absent")));
    let i2o = ranked(op, "input-to-output weights", need(I2O)?, 2)?;
    let r2o = ranked(op, "recurrent-to-output weights", need(R2O)?, 2)?;
    let (nc, no) = (i2o[0], r2o[1]);
    if i2o[1] != n_input || r2o[0] != nc {
        return Err(bad_shape(
            op,
            "weights do not match the input size or cell count",
        ));
    }
    let shape_is = |k: usize, want: &[usize]| -> Result<()> {
        match get(k) {
            Some(x) if x.shape != want => Err(bad_shape(
                op,
                format!("LSTM slot {k} has shape {:?}, expected {want:?}", x.shape),
            )),
            _ => Ok(()),
        }
    };
    for k in [I2I, I2F, I2C] {
        shape_is(k, &[nc, n_input])?;
    }
    for k in [R2I, R2F, R2C] {
        shape_is(k, &[nc, no])?;
    }
    for k in [C2I, C2F, C2O, IB, FB, CB, OB, LNI, LNF, LNC, LNO] {
        shape_is(k, &[nc])?;
    }
    shape_is(PW, &[no, nc])?;
    shape_is(PB, &[no])?;
    shape_is(H0, &[batch, no])?;
    shape_is(C0, &[batch, nc])?;
    for k in [I2F, I2C, R2F, R2C, FB, CB, OB, H0, C0] {
        need(k)?;
    }
    let has = |k: usize| get(k).is_some();
    let cifg = !has(I2I);
    if has(I2I) != has(R2I) {
        return Err(bad_shape(
            op,
            "input-gate weights must be all present or all absent",
        ));
    }
    let peep_all = (has(C2I) || cifg) && has(C2F) && has(C2O);
    let peep_none = !has(C2I) && !has(C2F) && !has(C2O);
    if !(peep_all || peep_none) {
        return Err(bad_shape(
            op,
            "peephole weights must be all present or all absent",
        ));
    }
    if cifg == has(IB) {
        return Err(bad_shape(
            op,
            "input gate bias must be present exactly without CIFG",
        ));
    }
    if has(PB) && !has(PW) {
        return Err(bad_shape(op, "projection bias without projection weights"));
    }
    if !has(PW) && no != nc {
        return Err(bad_shape(
            op,
            "without projection the output size must equal the cell count",
        ));
    }
    let ln = [has(LNF), has(LNC), has(LNO)];
    let ln_ok = if cifg {
        !has(LNI) && (ln.iter().all(|&b| b) || ln.iter().all(|&b| !b))
    } else {
        (has(LNI) && ln.iter().all(|&b| b)) || (!has(LNI) && ln.iter().all(|&b| !b))
    };
    if !ln_ok {
        return Err(bad_shape(
            op,
            "layer-norm weights must be all present or all absent",
        ));
    }
    let aux = [has(AF), has(AC), has(AO)];
    if aux.iter().any(|&b| b) || has(AI) {
        let all = aux.iter().all(|&b| b) && (cifg != has(AI));
        let Some(na) = n_aux.filter(|_| all) else {
            return Err(bad_shape(
                op,
                "aux weights need an aux input and must be complete",
            ));
        };
        for k in [AI, AF, AC, AO] {
            shape_is(k, &[nc, na])?;
        }
    }
    Ok((nc, no))
}

/// One direction's float32 tensors from its views (slot `k` at `views[base + k]`).
pub(crate) fn dir_from<'a>(
    views: &[Option<View<'a>>],
    base: usize,
    n_input: usize,
    n_aux: usize,
) -> Result<LstmDir<'a>> {
    let mut t = [None; slot::COUNT];
    for (k, s) in t.iter_mut().enumerate() {
        if let Some(v) = views.get(base + k).copied().flatten() {
            *s = Some(v.f32s()?);
        }
    }
    let dim = |k: usize, i: usize| {
        views
            .get(base + k)
            .copied()
            .flatten()
            .and_then(|v| v.shape().get(i).copied())
            .unwrap_or(0)
    };
    Ok(LstmDir {
        t,
        n_input,
        n_aux: if t[slot::AF].is_some() { n_aux } else { 0 },
        n_cell: dim(slot::I2O, 0),
        n_output: dim(slot::R2O, 1),
    })
}

impl Kernel for Lstm {
    fn name(&self) -> &'static str {
        "LSTM"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let present = w.u32("presence mask")?;
        if present >> LSTM_SLOTS != 0 || present & 1 == 0 {
            return Err(w.err("bad presence mask"));
        }
        check_required(w, u64::from(present), 1)?;
        Ok(Lstm {
            present,
            params: decode_params(w)?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.present);
        encode_params(&self.params, w);
    }

    fn input_count(&self) -> RangeInclusive<usize> {
        let n = self.present.count_ones() as usize;
        n..=n
    }

    fn output_count(&self) -> usize {
        4
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let s = spread(self.name(), self.present.into(), LSTM_SLOTS, inputs)?;
        float_dtype(self.name(), &s)?;
        let input = s[0].ok_or_else(|| bad_shape(self.name(), "no input"))?;
        let x = ranked(self.name(), "input", input, 2)?;
        let (batch, n_input) = (x[0], x[1]);
        let (nc, no) = check_dir(self.name(), &s[1..], batch, n_input, None)?;
        let gates = if s[1 + slot::I2I].is_some() { 4 } else { 3 };
        Ok(vec![
            vec![batch, nc * gates],
            vec![batch, no],
            vec![batch, nc],
            vec![batch, no],
        ])
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
            let (batch, n_input) = (x.shape()[0], x.shape()[1]);
            let d = dir_from(&s, 1, n_input, 0)?;
            let [scratch, h_out, c_out, out] = outputs else {
                return Err(bad_shape(name, "needs four outputs"));
            };
            let (h, c) = (d.t[slot::H0].unwrap_or(&[]), d.t[slot::C0].unwrap_or(&[]));
            cell::lstm_step(
                &self.params,
                &d,
                batch,
                x.f32s()?,
                None,
                h,
                c,
                h_out.f32s_mut()?,
                c_out.f32s_mut()?,
                scratch.f32s_mut()?,
            );
            let h_new = h_out.f32s_mut()?.to_vec();
            out.f32s_mut()?.copy_from_slice(&h_new);
            Ok(())
        })
    }
}

impl Lstm {
    /// A kernel with the given presence mask and parameters.
    pub fn new(
        present: u32,
        activation: RecurrentActivation,
        cell_clip: f32,
        proj_clip: f32,
    ) -> Lstm {
        Lstm {
            present,
            params: LstmParams {
                activation,
                cell_clip,
                proj_clip,
            },
        }
    }
}
