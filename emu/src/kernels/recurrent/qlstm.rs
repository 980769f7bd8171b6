//! NNAPI QUANTIZED_LSTM: one LSTM step on signed 8-bit activations, 8-bit symmetric
//! weights and a 16-bit cell state, bit-exact with the NNAPI reference (`QLSTM.cpp` with
//! `QuantUtils`): each gate accumulates `input x weights` and `previous output x recurrent
//! weights` (the inputs' zero points folded into per-row biases), rescales each product to
//! the gate's intermediate scale in Q3.12, adds the peephole term, optionally layer-normalises
//! (the gate bias enters only there, as in the reference), and applies the 16-bit
//! fixed-point sigmoid or tanh ([`crate::kernels::quant::fixed`], 16-bit). Optional: CIFG, peephole, projection
//! (with bias), layer normalisation, cell and projection clipping.
//!
//! The input and forget peepholes read the previous cell state and the output peephole the
//! new one (the reference reads its output buffer for the first two).
//!
//! Inputs, by slot (presence mask, see [`super`]): 0 input (i8 `[batch, input]`),
//! 1..=4 input-to-{input, forget, cell, output} weights (i8 `[units, input]`), 5..=8
//! recurrent-to-{...} weights (i8 `[units, output]`), 9..=11 cell-to-{input, forget, output}
//! weights (i16 `[units]`), 12..=15 gate biases (i32 `[units]`), 16 projection weights (i8
//! `[output, units]`), 17 projection bias (i32 `[output]`), 18 previous output (i8
//! `[batch, output]`), 19 previous cell state (i16 `[batch, units]`, scale a power of two
//! <= 2^-9), 20..=23 {input, forget, cell, output} layer-norm weights (i16 `[units]`).
//! Outputs: output state, cell state, output (the previous ones' shapes and types).
//!
//! Parameter words: presence mask, cell clip, projection clip, the input, forget, cell and
//! output intermediate scales (f32 each), hidden state zero point (i32), hidden state scale
//! (f32).

use std::ops::RangeInclusive;

use super::spread;
use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::quant::fixed::{self, inv_sqrt_quantized_multiplier_exp};
use crate::kernels::quant::{
    multiply_by_quantized_multiplier as mbqm, quantize_multiplier, rounding_divide_by_pot,
};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// QUANTIZED_LSTM.
#[derive(Debug, Clone, PartialEq)]
pub struct QLstm {
    /// Presence mask of the 24 input slots.
    pub present: u32,
    /// Cell clip (0: none).
    pub cell_clip: f32,
    /// Projection clip (0: none).
    pub proj_clip: f32,
    /// Intermediate scales of the input, forget, cell and output gates.
    pub gate_scales: [f32; 4],
    /// Zero point of the hidden state.
    pub hidden_zero_point: i32,
    /// Scale of the hidden state.
    pub hidden_scale: f32,
}

/// Input slots of [`QLstm`].
pub const QLSTM_SLOTS: usize = 24;
const REQUIRED: [usize; 12] = [0, 2, 3, 4, 6, 7, 8, 13, 14, 15, 18, 19];
const PREV_OUT: usize = 18;
const PREV_CELL: usize = 19;

/// NNAPI's `CheckedLog2`: the rounded base-2 logarithm, if `x` is (nearly) a power of two.
fn checked_log2(x: f32) -> Option<i32> {
    let l = x.ln() * (1.0 / 2f32.ln());
    let r = l.round();
    ((l - r).abs() < 1e-3).then_some(r as i32)
}

fn want(t: &TensorType, dtype: DType, shape: &[usize], op: &'static str, k: usize) -> Result<()> {
    if t.dtype != dtype {
        return Err(KernelError::DType {
            expected: dtype,
            got: t.dtype,
        });
    }
    if t.shape != shape {
        return Err(bad_shape(
            op,
            format!("slot {k} has shape {:?}, expected {shape:?}", t.shape),
        ));
    }
    Ok(())
}

/// `output[b, r] = clamp(output[b, r] + mbqm(bias[r] + sum_c x[b, c] w[r, c]) + zp)`: the
/// reference's int8 matrix-vector product with its rescale.
#[allow(clippy::too_many_arguments)]
fn mat_vec<T: Copy + Into<i32>>(
    x: &[i8],
    bias: &[i32],
    w: &[i8],
    (m, s): (i32, i32),
    batch: usize,
    n_in: usize,
    n_out: usize,
    zp: i32,
    out: &mut [T],
    from: impl Fn(i32) -> T,
    (lo, hi): (i32, i32),
) {
    for b in 0..batch {
        for r in 0..n_out {
            let mut acc = bias[r];
            for c in 0..n_in {
                acc = acc.wrapping_add(i32::from(x[b * n_in + c]) * i32::from(w[r * n_in + c]));
            }
            let v = mbqm(acc, m, s)
                .wrapping_add(zp)
                .wrapping_add(out[b * n_out + r].into());
            out[b * n_out + r] = from(v.clamp(lo, hi));
        }
    }
}

/// `-zp * sum_c w[r, c]` (+ bias): the zero-point correction of a weight matrix.
fn zero_point_bias(zp: i32, w: &[i8], rows: usize, cols: usize, bias: Option<&[i32]>) -> Vec<i32> {
    (0..rows)
        .map(|r| {
            let sum: i32 = w[r * cols..(r + 1) * cols]
                .iter()
                .map(|&v| i32::from(v))
                .sum();
            bias.map_or(0, |b| b[r]).wrapping_add(sum.wrapping_mul(zp))
        })
        .collect()
}

/// The reference's integer layer normalisation of one gate (`ApplyLayerNorm`).
fn layer_norm(x: &mut [i16], w: &[i16], bias: &[i32], (la, lb): (i32, i32), limit: i32, n: usize) {
    if n == 0 {
        return;
    }
    const GUARD: i64 = 1 << 20;
    for row in x.chunks_exact_mut(n) {
        let sum: i64 = row.iter().map(|&v| i64::from(v)).sum();
        let sum_sq: i64 = row
            .iter()
            .map(|&v| i64::from(i32::from(v) * i32::from(v)))
            .sum();
        let mean = (sum * 1024 / n as i64) as i32;
        let temp = GUARD / n as i64;
        let variance = sum_sq * temp - i64::from(mean) * i64::from(mean);
        let mut v2 = (variance / GUARD) as i32;
        if v2 < 1 {
            v2 = limit;
        }
        let (ia, ib) = inv_sqrt_quantized_multiplier_exp(v2, -1);
        for (j, v) in row.iter_mut().enumerate() {
            let shifted = (1024 * i32::from(*v)).wrapping_sub(mean);
            let rescaled = mbqm(shifted, ia, ib);
            let val3 = i64::from(rescaled.wrapping_mul(i32::from(w[j])).wrapping_add(bias[j]));
            let val4 = (if val3 > 0 { val3 + 512 } else { val3 - 512 } / 1024) as i32;
            let val5 = mbqm(val4, la, lb + 12);
            *v = val5.clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16;
        }
    }
}

/// `result += mbqm(v[j] * c[b, j])`, saturating to i16.
fn peephole(v: &[i16], c: &[i16], (m, s): (i32, i32), n: usize, out: &mut [i16]) {
    for (k, o) in out.iter_mut().enumerate() {
        let prod = mbqm(i32::from(v[k % n]) * i32::from(c[k]), m, s);
        *o = (prod + i32::from(*o)).clamp(-32768, 32767) as i16;
    }
}

impl Kernel for QLstm {
    fn name(&self) -> &'static str {
        "QUANTIZED_LSTM"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let present = w.u32("presence mask")?;
        if present >> QLSTM_SLOTS != 0 || REQUIRED.iter().any(|&k| present >> k & 1 == 0) {
            return Err(w.err("bad presence mask"));
        }
        let cell_clip = w.finite_f32("cell clip")?;
        let proj_clip = w.finite_f32("projection clip")?;
        let mut gate_scales = [0f32; 4];
        for s in &mut gate_scales {
            *s = w.finite_f32("intermediate scale")?;
        }
        let hidden_zero_point = w.i32("hidden zero point")?;
        let hidden_scale = w.finite_f32("hidden scale")?;
        if cell_clip < 0.0
            || proj_clip < 0.0
            || hidden_scale <= 0.0
            || !(-128..=127).contains(&hidden_zero_point)
        {
            return Err(w.err("bad clip, hidden scale or hidden zero point"));
        }
        Ok(QLstm {
            present,
            cell_clip,
            proj_clip,
            gate_scales,
            hidden_zero_point,
            hidden_scale,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.present);
        w.push(self.cell_clip.to_bits());
        w.push(self.proj_clip.to_bits());
        w.extend(self.gate_scales.iter().map(|s| s.to_bits()));
        w.push(enc::i(self.hidden_zero_point));
        w.push(self.hidden_scale.to_bits());
    }

    fn input_count(&self) -> RangeInclusive<usize> {
        let n = self.present.count_ones() as usize;
        n..=n
    }

    fn output_count(&self) -> usize {
        3
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let s = spread(name, self.present.into(), QLSTM_SLOTS, inputs)?;
        let need = |k: usize| s[k].ok_or_else(|| bad_shape(name, format!("slot {k} absent")));
        let x = need(0)?;
        let [batch, n_in] = x.shape[..] else {
            return Err(bad_shape(name, "input must have rank 2"));
        };
        let units = need(4)?.shape.first().copied().unwrap_or(0);
        let n_out = need(8)?.shape.get(1).copied().unwrap_or(0);
        want(x, DType::I8, &[batch, n_in], name, 0)?;
        for (k, t) in s.iter().enumerate().skip(1) {
            let Some(t) = t else { continue };
            let (dtype, shape) = match k {
                1..=4 => (DType::I8, vec![units, n_in]),
                5..=8 => (DType::I8, vec![units, n_out]),
                9..=11 | 20..=23 => (DType::I16, vec![units]),
                12..=15 => (DType::I32, vec![units]),
                16 => (DType::I8, vec![n_out, units]),
                17 => (DType::I32, vec![n_out]),
                PREV_OUT => (DType::I8, vec![batch, n_out]),
                _ => (DType::I16, vec![batch, units]),
            };
            want(t, dtype, &shape, name, k)?;
        }
        let has = |k: usize| s[k].is_some();
        let cifg = !has(1);
        if has(5) == cifg || has(12) == cifg || (cifg && (has(9) || has(20))) {
            return Err(bad_shape(
                name,
                "input gate tensors must be all present or all absent",
            ));
        }
        if has(17) && !has(16) {
            return Err(bad_shape(
                name,
                "projection bias without projection weights",
            ));
        }
        if !has(16) && n_out != units {
            return Err(bad_shape(
                name,
                "without projection the output size must equal units",
            ));
        }
        let peep_all = (has(9) || cifg) && has(10) && has(11);
        let peep_none = !has(9) && !has(10) && !has(11);
        if !(peep_all || peep_none) {
            return Err(bad_shape(
                name,
                "peephole weights must be all present or all absent",
            ));
        }
        let ln = [has(21), has(22), has(23)];
        if !(ln.iter().all(|&b| b) || ln.iter().all(|&b| !b)) || (!cifg && has(20) != ln[0]) {
            return Err(bad_shape(
                name,
                "layer-norm weights must be all present or all absent",
            ));
        }
        let cell_scale = need(PREV_CELL)?.quant.scale;
        if !checked_log2(cell_scale).is_some_and(|s| (-15..=-9).contains(&s)) {
            return Err(bad_shape(name, "cell state scale must be 2^-15 ..= 2^-9"));
        }
        Ok(vec![
            vec![batch, n_out],
            vec![batch, units],
            vec![batch, n_out],
        ])
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> crate::kernels::Cost {
        super::recurrent_cost(inputs, outputs)
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let (Some(prev_out), Some(prev_cell)) = (
            inputs.get(
                inputs
                    .len()
                    .wrapping_sub(2 + (self.present >> 20).count_ones() as usize),
            ),
            inputs.get(
                inputs
                    .len()
                    .wrapping_sub(1 + (self.present >> 20).count_ones() as usize),
            ),
        ) else {
            return Err(bad_shape(self.name(), "missing states"));
        };
        for (o, like) in outputs.iter().zip([prev_out, prev_cell, prev_out]) {
            if o.dtype != like.dtype {
                return Err(KernelError::DType {
                    expected: like.dtype,
                    got: o.dtype,
                });
            }
        }
        Ok(())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let name = self.name();
        let s = spread(name, self.present.into(), QLSTM_SLOTS, inputs)?;
        let need = |k: usize| s[k].ok_or_else(|| bad_shape(name, format!("slot {k} absent")));
        let i8s = |k: usize| s[k].map(|v| v.i8s()).transpose();
        let i16s = |k: usize| s[k].map(|v| v.i16s()).transpose();
        let i32s = |k: usize| s[k].map(|v| v.i32s()).transpose();
        let x_v = need(0)?;
        let (batch, n_in) = (x_v.shape()[0], x_v.shape()[1]);
        let units = need(4)?.shape()[0];
        let n_out = need(8)?.shape()[1];
        let x = x_v.i8s()?;
        let prev_out_v = need(PREV_OUT)?;
        let prev_out = prev_out_v.i8s()?;
        let prev_cell_v = need(PREV_CELL)?;
        let prev_cell = prev_cell_v.i16s()?;
        let cell_shift = checked_log2(prev_cell_v.ty.quant.scale).unwrap_or(-15);
        let in_scale = x_v.ty.quant.scale;
        let in_zp = x_v.ty.quant.zero_point;
        let out_scale = prev_out_v.ty.quant.scale;
        let out_zp = prev_out_v.ty.quant.zero_point;
        let wscale = |k: usize| s[k].map_or(0.0, |v| v.ty.quant.scale);
        let qm = |real: f32| quantize_multiplier(f64::from(real));
        let cifg = s[1].is_none();
        // Gates in the order input, forget, cell, output.
        let mut gates = [
            vec![0i16; batch * units],
            vec![0i16; batch * units],
            vec![0i16; batch * units],
            vec![0i16; batch * units],
        ];
        let peep_slot = [Some(9), Some(10), None, Some(11)];
        let ln_slot = [20, 21, 22, 23];
        let bias_slot = [12, 13, 14, 15];
        let cell_pow = 2f64.powi(cell_shift);
        let compute = |g: usize, gate: &mut [i16], cell: &[i16]| -> Result<()> {
            let inter = self.gate_scales[g];
            let (iw, rw) = (1 + g, 5 + g);
            let (Some(wi), Some(wr)) = (i8s(iw)?, i8s(rw)?) else {
                return Ok(());
            };
            let bi = zero_point_bias(-in_zp, wi, units, n_in, None);
            let br = zero_point_bias(-out_zp, wr, units, n_out, None);
            let range = (-32768, 32767);
            mat_vec(
                x,
                &bi,
                wi,
                qm(wscale(iw) * in_scale / inter),
                batch,
                n_in,
                units,
                0,
                gate,
                |v| v as i16,
                range,
            );
            mat_vec(
                prev_out,
                &br,
                wr,
                qm(wscale(rw) * out_scale / inter),
                batch,
                n_out,
                units,
                0,
                gate,
                |v| v as i16,
                range,
            );
            if let Some(p) = peep_slot[g] {
                if let Some(pw) = i16s(p)? {
                    let eff = (cell_pow * f64::from(wscale(p)) / f64::from(inter)) as f32;
                    peephole(pw, cell, qm(eff), units, gate);
                }
            }
            if let Some(lw) = i16s(ln_slot[g])? {
                let bias = i32s(bias_slot[g])?.unwrap_or(&[]);
                let limit = (10000.0 * wscale(ln_slot[g])) as i32;
                layer_norm(gate, lw, bias, qm(wscale(ln_slot[g])), limit.min(1), units);
            }
            for v in gate.iter_mut() {
                *v = if g == 2 {
                    fixed::tanh(*v, 3)
                } else {
                    fixed::logistic(*v, 3)
                };
            }
            Ok(())
        };
        let [ig, fg, cg, og] = &mut gates;
        compute(1, fg, prev_cell)?;
        compute(2, cg, prev_cell)?;
        if cifg {
            for (i, f) in ig.iter_mut().zip(fg.iter()) {
                *i = 32767 - *f;
            }
        } else {
            compute(0, ig, prev_cell)?;
        }
        let [out_state, cell_out, out] = outputs else {
            return Err(bad_shape(name, "needs three outputs"));
        };
        let cell = cell_out.i16s_mut()?;
        let cell_clip = if self.cell_clip > 0.0 {
            (self.cell_clip / prev_cell_v.ty.quant.scale).clamp(-32768.0, 32767.0) as i32 as i16
        } else {
            0
        };
        for k in 0..batch * units {
            let f = rounding_divide_by_pot(i32::from(fg[k]) * i32::from(prev_cell[k]), 15);
            let i = rounding_divide_by_pot(i32::from(ig[k]) * i32::from(cg[k]), 30 + cell_shift);
            let mut c = (i32::from(f as i16) + i32::from(i as i16)).clamp(-32768, 32767) as i16;
            if cell_clip > 0 {
                c = c.clamp(-cell_clip, cell_clip);
            }
            cell[k] = c;
        }
        let cell: Vec<i16> = cell.to_vec();
        compute(3, og, &cell)?;
        let hidden = quantize_multiplier(f64::from(
            (2f64.powi(-15) / f64::from(self.hidden_scale) * 2f64.powi(-15)) as f32,
        ));
        let mut buf8 = vec![0i8; batch * units];
        for k in 0..batch * units {
            let t = fixed::tanh(cell[k], cell_shift + 15);
            let v =
                mbqm(i32::from(og[k]) * i32::from(t), hidden.0, hidden.1) - self.hidden_zero_point;
            buf8[k] = v.clamp(-128, 127) as i8;
        }
        let out = out.i8s_mut()?;
        match i8s(16)? {
            Some(pw) => {
                out.fill(0);
                let pb = zero_point_bias(self.hidden_zero_point, pw, n_out, units, i32s(17)?);
                let scale = wscale(16) * self.hidden_scale / out_scale;
                mat_vec(
                    &buf8,
                    &pb,
                    pw,
                    qm(scale),
                    batch,
                    units,
                    n_out,
                    out_zp,
                    out,
                    |v| v as i8,
                    (-128, 127),
                );
                if self.proj_clip > 0.0 {
                    let clip = (self.proj_clip / wscale(16)).clamp(-128.0, 127.0) as i32 as i8;
                    if clip > 0 {
                        for v in out.iter_mut() {
                            *v = (*v).clamp(-clip, clip);
                        }
                    }
                }
            }
            None => out.copy_from_slice(&buf8[..batch * n_out]),
        }
        let snapshot = out.to_vec();
        out_state.i8s_mut()?.copy_from_slice(&snapshot);
        Ok(())
    }
}
