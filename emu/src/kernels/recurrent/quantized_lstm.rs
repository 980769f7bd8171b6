//! NNAPI QUANTIZED_16BIT_LSTM: one LSTM step in 8/16-bit fixed point, bit-exact with the
//! NNAPI reference (TFLite's legacy quantised `LstmCell` with 4 state integer bits).
//!
//! The four gates' weights are packed as the reference packs them: one `[4 * output,
//! output + input]` matrix whose rows are the input, cell, forget and output gates, with
//! the recurrent weights in columns `0..output` and the input weights from column
//! `output` on; it multiplies the concatenation `[input, previous output]` (both as
//! `value - 128`), accumulates in int32 from the int32 bias, rescales by
//! `4096 * bias_scale` to Q3.12, and runs the gates in gemmlowp 16-bit fixed point
//! ([`crate::kernels::quant::fixed`], 16-bit).
//!
//! Inputs: input (u8 `[batch, input]`), input-to-{input, forget, cell, output} weights
//! (u8 `[output, input]`), recurrent-to-{input, forget, cell, output} weights (u8
//! `[output, output]`, all weights one scale and zero point), {input, forget, cell, output}
//! gate biases (int32 `[output]`), previous cell state (i16 `[batch, output]`, scale
//! 2^-11), previous output (u8 `[batch, output]`). Outputs: cell state (i16), output (u8),
//! with the previous ones' shapes and quantisation. No parameter words.

use std::ops::RangeInclusive;

use super::expect_shape;
use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::quant::fixed::{self, rescale, Raw};
use crate::kernels::quant::{multiply_by_quantized_multiplier, quantize_multiplier};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// QUANTIZED_16BIT_LSTM.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedLstm;

fn dtype(t: &TensorType, want: DType) -> Result<()> {
    if t.dtype != want {
        return Err(KernelError::DType {
            expected: want,
            got: t.dtype,
        });
    }
    Ok(())
}

impl Kernel for QuantizedLstm {
    fn name(&self) -> &'static str {
        "QUANTIZED_16BIT_LSTM"
    }

    fn decode(_: &mut Words<'_>) -> Result<Self> {
        Ok(QuantizedLstm)
    }

    fn encode(&self, _: &mut Vec<u32>) {}

    fn input_count(&self) -> RangeInclusive<usize> {
        15..=15
    }

    fn output_count(&self) -> usize {
        2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let input = inputs[0];
        dtype(input, DType::U8)?;
        let [batch, n_input] = input.shape[..] else {
            return Err(bad_shape(name, "input must have rank 2"));
        };
        let prev_out = inputs[14];
        dtype(prev_out, DType::U8)?;
        let [_, n_out] = prev_out.shape[..] else {
            return Err(bad_shape(name, "previous output must have rank 2"));
        };
        expect_shape(name, "previous output", prev_out, &[batch, n_out])?;
        let wq = &inputs[1].quant;
        for (k, t) in inputs[1..9].iter().enumerate() {
            dtype(t, DType::U8)?;
            let cols = if k < 4 { n_input } else { n_out };
            expect_shape(name, "weights", t, &[n_out, cols])?;
            if t.quant.scale != wq.scale || t.quant.zero_point != wq.zero_point {
                return Err(bad_shape(
                    name,
                    "all weights must share scale and zero point",
                ));
            }
        }
        let bq = &inputs[9].quant;
        for t in &inputs[9..13] {
            dtype(t, DType::I32)?;
            expect_shape(name, "bias", t, &[n_out])?;
            if t.quant.scale != bq.scale || t.quant.zero_point != 0 {
                return Err(bad_shape(name, "all biases must share their scale"));
            }
        }
        let cell = inputs[13];
        dtype(cell, DType::I16)?;
        expect_shape(name, "previous cell state", cell, &[batch, n_out])?;
        if cell.quant.scale != 1.0 / 2048.0 {
            return Err(bad_shape(name, "cell state scale must be 2^-11"));
        }
        Ok(vec![cell.shape.clone(), prev_out.shape.clone()])
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> crate::kernels::Cost {
        super::recurrent_cost(inputs, outputs)
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        dtype(outputs[0], DType::I16)?;
        dtype(outputs[1], DType::U8)?;
        if outputs[0].quant.scale != inputs[13].quant.scale
            || outputs[1].quant.scale != inputs[14].quant.scale
            || outputs[1].quant.zero_point != inputs[14].quant.zero_point
        {
            return Err(bad_shape(
                self.name(),
                "outputs must keep the states' quantisation",
            ));
        }
        Ok(())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0].u8s()?;
        let (batch, n_in) = (inputs[0].shape()[0], inputs[0].shape()[1]);
        let prev = inputs[14].u8s()?;
        let n_out = inputs[14].shape()[1];
        let width = n_in + n_out;
        let rows = 4 * n_out;
        // Rows: input, cell, forget, output gates; HAL order of the weights is input,
        // forget, cell, output.
        let gate_src = [0usize, 2, 1, 3];
        let mut w = vec![0u8; rows * width];
        let mut bias = vec![0i32; rows];
        for (g, &src) in gate_src.iter().enumerate() {
            let iw = inputs[1 + src].u8s()?;
            let rw = inputs[5 + src].u8s()?;
            let b = inputs[9 + src].i32s()?;
            for r in 0..n_out {
                let row = &mut w[(g * n_out + r) * width..(g * n_out + r + 1) * width];
                row[..n_out].copy_from_slice(&rw[r * n_out..(r + 1) * n_out]);
                row[n_out..].copy_from_slice(&iw[r * n_in..(r + 1) * n_in]);
            }
            bias[g * n_out..(g + 1) * n_out].copy_from_slice(b);
        }
        let w_zp = inputs[1].ty.quant.zero_point;
        let (am, ashift) = quantize_multiplier(4096.0 * f64::from(inputs[9].ty.quant.scale));
        let prev_cell = inputs[13].i16s()?;
        let mut concat = vec![0u8; width];
        let mut act = vec![0i16; rows];
        let [cell_out, out] = outputs else {
            return Err(bad_shape(self.name(), "needs two outputs"));
        };
        let cell_out = cell_out.i16s_mut()?;
        let out = out.u8s_mut()?;
        for b in 0..batch {
            concat[..n_in].copy_from_slice(&x[b * n_in..(b + 1) * n_in]);
            concat[n_in..].copy_from_slice(&prev[b * n_out..(b + 1) * n_out]);
            for (o, a) in act.iter_mut().enumerate() {
                let mut acc = bias[o];
                for (d, &c) in concat.iter().enumerate() {
                    let iv = i32::from(c) - 128;
                    let wv = i32::from(w[o * width + d]) - w_zp;
                    acc = acc.wrapping_add(iv.wrapping_mul(wv));
                }
                let acc = multiply_by_quantized_multiplier(acc, am, ashift);
                *a = acc.clamp(-32768, 32767) as i16;
            }
            for c in 0..n_out {
                let ig = fixed::logistic(act[c], 3);
                let mg = fixed::tanh(act[n_out + c], 3);
                let fg = fixed::logistic(act[2 * n_out + c], 3);
                let og = fixed::logistic(act[3 * n_out + c], 3);
                let i_times_m = Raw::mul(ig, mg);
                let prev_c = prev_cell[b * n_out + c];
                // Q0 * Q4 -> Q4.
                let prev_times_f = Raw::mul(fg, prev_c);
                let new_state = rescale(i_times_m, 0, 4).saturating_add(prev_times_f);
                let new_f3 = rescale(new_state, 4, 3);
                let o = Raw::mul(og, fixed::tanh(new_f3, 3));
                cell_out[b * n_out + c] = new_state;
                let r = Raw::rounding_divide_by_pot(o, 8).clamp(-128, 127);
                out[b * n_out + c] = (128 + i32::from(r)) as u8;
            }
        }
        Ok(())
    }
}
