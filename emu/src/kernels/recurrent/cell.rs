//! The float math the recurrent kernels share: one LSTM step and one RNN step over a batch,
//! and an LSTM or RNN run over a time-major sequence in either direction, following the
//! NNAPI reference (`LSTMCell::LSTMStep`, `RNN::RNNStep`) operation by operation.

use super::RecurrentActivation;

/// The per-direction tensor slots of the float LSTM kernels, in the HAL's input order.
pub mod slot {
    /// input-to-input weights `[cells, input]` (absent: CIFG).
    pub const I2I: usize = 0;
    /// input-to-forget weights.
    pub const I2F: usize = 1;
    /// input-to-cell weights.
    pub const I2C: usize = 2;
    /// input-to-output weights.
    pub const I2O: usize = 3;
    /// recurrent-to-input weights `[cells, output]` (absent: CIFG).
    pub const R2I: usize = 4;
    /// recurrent-to-forget weights.
    pub const R2F: usize = 5;
    /// recurrent-to-cell weights.
    pub const R2C: usize = 6;
    /// recurrent-to-output weights.
    pub const R2O: usize = 7;
    /// cell-to-input peephole weights `[cells]`.
    pub const C2I: usize = 8;
    /// cell-to-forget peephole weights.
    pub const C2F: usize = 9;
    /// cell-to-output peephole weights.
    pub const C2O: usize = 10;
    /// input gate bias `[cells]` (absent: CIFG).
    pub const IB: usize = 11;
    /// forget gate bias.
    pub const FB: usize = 12;
    /// cell bias.
    pub const CB: usize = 13;
    /// output gate bias.
    pub const OB: usize = 14;
    /// projection weights `[output, cells]`.
    pub const PW: usize = 15;
    /// projection bias `[output]`.
    pub const PB: usize = 16;
    /// output state in `[batch, output]`.
    pub const H0: usize = 17;
    /// cell state in `[batch, cells]`.
    pub const C0: usize = 18;
    /// input layer-norm weights `[cells]`.
    pub const LNI: usize = 19;
    /// forget layer-norm weights.
    pub const LNF: usize = 20;
    /// cell layer-norm weights.
    pub const LNC: usize = 21;
    /// output layer-norm weights.
    pub const LNO: usize = 22;
    /// aux-input-to-input weights `[cells, aux_input]`.
    pub const AI: usize = 23;
    /// aux-input-to-forget weights.
    pub const AF: usize = 24;
    /// aux-input-to-cell weights.
    pub const AC: usize = 25;
    /// aux-input-to-output weights.
    pub const AO: usize = 26;
    /// Slots per direction.
    pub const COUNT: usize = 27;
    /// The slots every direction needs.
    pub const REQUIRED: [usize; 11] = [I2F, I2C, I2O, R2F, R2C, R2O, FB, CB, OB, H0, C0];
}

/// The scalar parameters of an LSTM.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LstmParams {
    /// The cell and hidden activation.
    pub activation: RecurrentActivation,
    /// Cell state clip (0: none).
    pub cell_clip: f32,
    /// Projection clip (0: none).
    pub proj_clip: f32,
}

/// One direction's tensors (float32), by slot.
pub struct LstmDir<'a> {
    /// The tensors, indexed by [`slot`] constants.
    pub t: [Option<&'a [f32]>; slot::COUNT],
    /// Input size.
    pub n_input: usize,
    /// Aux input size (0 without aux weights).
    pub n_aux: usize,
    /// Number of cells.
    pub n_cell: usize,
    /// Output size.
    pub n_output: usize,
}

impl LstmDir<'_> {
    fn get(&self, k: usize) -> &[f32] {
        self.t[k].unwrap_or(&[])
    }

    /// CIFG: no input gate.
    pub fn cifg(&self) -> bool {
        self.t[slot::I2I].is_none()
    }

    fn layer_norm(&self) -> bool {
        self.t[slot::LNO].is_some()
    }
}

/// `out[b, r] += sum_c m[r, c] * v[b, c]`, the dot product accumulated on its own first
/// (TFLite's MatrixBatchVectorMultiplyAccumulate).
pub(crate) fn mat_vec_acc(
    m: &[f32],
    rows: usize,
    cols: usize,
    v: &[f32],
    batch: usize,
    out: &mut [f32],
) {
    if cols == 0 {
        return;
    }
    for b in 0..batch {
        let vb = &v[b * cols..(b + 1) * cols];
        for r in 0..rows {
            let mr = &m[r * cols..(r + 1) * cols];
            let dot: f32 = mr.iter().zip(vb).map(|(a, x)| a * x).sum();
            out[b * rows + r] += dot;
        }
    }
}

fn mean_stddev_norm(x: &mut [f32], n: usize) {
    if n == 0 {
        return;
    }
    for row in x.chunks_exact_mut(n) {
        let mean = row.iter().sum::<f32>() / n as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n as f32;
        let inv = 1.0 / (var + 1e-8).sqrt();
        for v in row.iter_mut() {
            *v = (*v - mean) * inv;
        }
    }
}

/// Gate pre-activation: peephole, layer norm (with its bias), then the gate function.
#[allow(clippy::too_many_arguments)]
fn finish_gate(
    gate: &mut [f32],
    n_cell: usize,
    peephole: Option<(&[f32], &[f32])>,
    ln: Option<&[f32]>,
    bias: &[f32],
    f: impl Fn(f32) -> f32,
) {
    if let Some((w, c)) = peephole {
        for (b, row) in gate.chunks_exact_mut(n_cell).enumerate() {
            for (j, g) in row.iter_mut().enumerate() {
                *g += w[j] * c[b * n_cell + j];
            }
        }
    }
    if let Some(lw) = ln {
        mean_stddev_norm(gate, n_cell);
        for row in gate.chunks_exact_mut(n_cell) {
            for (j, g) in row.iter_mut().enumerate() {
                *g = *g * lw[j] + bias[j];
            }
        }
    }
    for g in gate.iter_mut() {
        *g = f(*g);
    }
}

/// One LSTM step over `batch` rows. `x` is `[batch, n_input]`, `aux` `[batch, n_aux]` (used
/// only with aux weights), `h`/`c` the states in; writes `h_out` `[batch, n_output]`,
/// `c_out` `[batch, n_cell]` and `scratch` (`[3 or 4, batch, n_cell]`: the gates as the
/// reference leaves them).
#[allow(clippy::too_many_arguments)]
pub fn lstm_step(
    p: &LstmParams,
    d: &LstmDir<'_>,
    batch: usize,
    x: &[f32],
    aux: Option<&[f32]>,
    h: &[f32],
    c: &[f32],
    h_out: &mut [f32],
    c_out: &mut [f32],
    scratch: &mut [f32],
) {
    use slot::*;
    let (nc, ni, no) = (d.n_cell, d.n_input, d.n_output);
    let cifg = d.cifg();
    let ln = d.layer_norm();
    let bc = batch * nc;
    let (ig, rest) = if cifg {
        scratch.split_at_mut(0)
    } else {
        scratch.split_at_mut(bc)
    };
    let (cg, rest) = rest.split_at_mut(bc);
    let (fg, og) = rest.split_at_mut(bc);
    let og = &mut og[..bc];
    let init = |g: &mut [f32], bias: &[f32]| {
        for row in g.chunks_exact_mut(nc) {
            if ln {
                row.fill(0.0);
            } else {
                row.copy_from_slice(&bias[..nc]);
            }
        }
    };
    if !cifg {
        init(ig, d.get(IB));
    }
    init(fg, d.get(FB));
    init(cg, d.get(CB));
    init(og, d.get(OB));
    let aux = aux.filter(|_| d.t[AF].is_some() && d.n_aux > 0);
    if !cifg {
        mat_vec_acc(d.get(I2I), nc, ni, x, batch, ig);
    }
    mat_vec_acc(d.get(I2F), nc, ni, x, batch, fg);
    mat_vec_acc(d.get(I2C), nc, ni, x, batch, cg);
    mat_vec_acc(d.get(I2O), nc, ni, x, batch, og);
    if let Some(a) = aux {
        let na = d.n_aux;
        if !cifg {
            mat_vec_acc(d.get(AI), nc, na, a, batch, ig);
        }
        mat_vec_acc(d.get(AF), nc, na, a, batch, fg);
        mat_vec_acc(d.get(AC), nc, na, a, batch, cg);
        mat_vec_acc(d.get(AO), nc, na, a, batch, og);
    }
    if !cifg {
        mat_vec_acc(d.get(R2I), nc, no, h, batch, ig);
    }
    mat_vec_acc(d.get(R2F), nc, no, h, batch, fg);
    mat_vec_acc(d.get(R2C), nc, no, h, batch, cg);
    mat_vec_acc(d.get(R2O), nc, no, h, batch, og);
    let lnw = |k: usize| if ln { d.t[k] } else { None };
    if !cifg {
        finish_gate(
            ig,
            nc,
            d.t[C2I].map(|w| (w, c)),
            lnw(LNI),
            d.get(IB),
            super::sigmoid,
        );
    }
    finish_gate(
        fg,
        nc,
        d.t[C2F].map(|w| (w, c)),
        lnw(LNF),
        d.get(FB),
        super::sigmoid,
    );
    let act = p.activation;
    finish_gate(cg, nc, None, lnw(LNC), d.get(CB), |v| act.apply(v));
    for k in 0..bc {
        let gate_in = if cifg { 1.0 - fg[k] } else { ig[k] };
        let mut v = fg[k] * c[k] + cg[k] * gate_in;
        if p.cell_clip > 0.0 {
            v = v.clamp(-p.cell_clip, p.cell_clip);
        }
        c_out[k] = v;
    }
    if cifg {
        for f in fg.iter_mut() {
            *f = 1.0 - *f;
        }
    }
    finish_gate(
        og,
        nc,
        d.t[C2O].map(|w| (w, &*c_out)),
        lnw(LNO),
        d.get(OB),
        super::sigmoid,
    );
    for k in 0..bc {
        cg[k] = act.apply(c_out[k]);
        og[k] *= cg[k];
    }
    match d.t[PW] {
        Some(pw) => {
            for b in 0..batch {
                let row = &mut h_out[b * no..(b + 1) * no];
                match d.t[PB] {
                    Some(pb) => row.copy_from_slice(&pb[..no]),
                    None => row.fill(0.0),
                }
            }
            mat_vec_acc(pw, no, nc, og, batch, h_out);
            if p.proj_clip > 0.0 {
                for v in h_out.iter_mut() {
                    *v = v.clamp(-p.proj_clip, p.proj_clip);
                }
            }
        }
        None => h_out[..batch * no].copy_from_slice(&og[..batch * no]),
    }
}

/// Where a sequence kernel writes its per-step outputs: an `[T, B, width]` (time major) or
/// `[B, T, width]` buffer, each step's rows at columns `offset..offset + n`.
pub struct SeqOut<'a> {
    /// The buffer.
    pub data: &'a mut [f32],
    /// Time major (`[T, B, width]`) or batch major.
    pub time_major: bool,
    /// Steps.
    pub steps: usize,
    /// Batch.
    pub batch: usize,
    /// Row width.
    pub width: usize,
    /// Column offset of this direction.
    pub offset: usize,
}

impl SeqOut<'_> {
    /// Writes step `t`'s `[batch, n]` rows.
    pub fn write(&mut self, t: usize, rows: &[f32], n: usize) {
        for b in 0..self.batch {
            let r = if self.time_major {
                t * self.batch + b
            } else {
                b * self.steps + t
            };
            let at = r * self.width + self.offset;
            if let (Some(dst), Some(src)) =
                (self.data.get_mut(at..at + n), rows.get(b * n..(b + 1) * n))
            {
                dst.copy_from_slice(src);
            }
        }
    }
}

/// A sequence input: `[T, B, n]` time major or `[B, T, n]`.
pub struct SeqIn<'a> {
    /// The elements.
    pub data: &'a [f32],
    /// Time major.
    pub time_major: bool,
    /// Steps.
    pub steps: usize,
    /// Batch.
    pub batch: usize,
    /// Row width.
    pub n: usize,
}

impl SeqIn<'_> {
    /// Step `t`'s `[batch, n]` rows.
    pub fn step(&self, t: usize) -> Vec<f32> {
        if self.time_major {
            let at = t * self.batch * self.n;
            return self
                .data
                .get(at..at + self.batch * self.n)
                .map(<[f32]>::to_vec)
                .unwrap_or_default();
        }
        let mut v = Vec::with_capacity(self.batch * self.n);
        for b in 0..self.batch {
            let at = (b * self.steps + t) * self.n;
            if let Some(s) = self.data.get(at..at + self.n) {
                v.extend_from_slice(s);
            }
        }
        v
    }
}

/// Runs an LSTM direction over a sequence (forward or reversed), writing each step's output
/// into `out` and returning the final output and cell states.
pub fn lstm_sequence(
    p: &LstmParams,
    d: &LstmDir<'_>,
    input: &SeqIn<'_>,
    aux: Option<&SeqIn<'_>>,
    forward: bool,
    out: &mut SeqOut<'_>,
) -> (Vec<f32>, Vec<f32>) {
    let batch = input.batch;
    let mut h = d.get(slot::H0).to_vec();
    let mut c = d.get(slot::C0).to_vec();
    let mut h2 = vec![0.0; batch * d.n_output];
    let mut c2 = vec![0.0; batch * d.n_cell];
    let gates = if d.cifg() { 3 } else { 4 };
    let mut scratch = vec![0.0; gates * batch * d.n_cell];
    for s in 0..input.steps {
        let t = if forward { s } else { input.steps - 1 - s };
        let x = input.step(t);
        let a = aux.map(|a| a.step(t));
        lstm_step(
            p,
            d,
            batch,
            &x,
            a.as_deref(),
            &h,
            &c,
            &mut h2,
            &mut c2,
            &mut scratch,
        );
        out.write(t, &h2, d.n_output);
        std::mem::swap(&mut h, &mut h2);
        std::mem::swap(&mut c, &mut c2);
    }
    (h, c)
}

/// One RNN direction's tensors (float32).
pub struct RnnDir<'a> {
    /// Weights `[units, input]`.
    pub w: &'a [f32],
    /// Recurrent weights `[units, units]`.
    pub r: &'a [f32],
    /// Bias `[units]`.
    pub bias: &'a [f32],
    /// Hidden state in `[batch, units]`.
    pub h0: &'a [f32],
    /// Aux weights `[units, aux_input]`, if any.
    pub aux_w: Option<&'a [f32]>,
    /// Units.
    pub units: usize,
    /// Input size.
    pub n_input: usize,
    /// Aux input size.
    pub n_aux: usize,
}

/// One RNN step: `out[b] = act(bias + W x[b] + A aux[b] + R h[b])`.
#[allow(clippy::too_many_arguments)]
pub fn rnn_step(
    d: &RnnDir<'_>,
    act: RecurrentActivation,
    batch: usize,
    x: &[f32],
    aux: Option<&[f32]>,
    h: &[f32],
    out: &mut [f32],
) {
    let (u, ni) = (d.units, d.n_input);
    for b in 0..batch {
        let xb = &x[b * ni..(b + 1) * ni];
        let hb = &h[b * u..(b + 1) * u];
        let ob = &mut out[b * u..(b + 1) * u];
        ob.copy_from_slice(&d.bias[..u]);
        for (o, v) in ob.iter_mut().enumerate() {
            for (i, xv) in xb.iter().enumerate() {
                *v += xv * d.w[o * ni + i];
            }
        }
        if let (Some(aw), Some(a)) = (d.aux_w, aux) {
            let na = d.n_aux;
            let ab = &a[b * na..(b + 1) * na];
            for (o, v) in ob.iter_mut().enumerate() {
                for (i, av) in ab.iter().enumerate() {
                    *v += av * aw[o * na + i];
                }
            }
        }
        for (o, v) in ob.iter_mut().enumerate() {
            for (k, hv) in hb.iter().enumerate() {
                *v += hv * d.r[o * u + k];
            }
        }
        for v in ob.iter_mut() {
            *v = act.apply(*v);
        }
    }
}

/// Runs an RNN direction over a sequence, writing each step's output into `out` and
/// returning the final hidden state.
pub fn rnn_sequence(
    d: &RnnDir<'_>,
    act: RecurrentActivation,
    input: &SeqIn<'_>,
    aux: Option<&SeqIn<'_>>,
    forward: bool,
    out: &mut SeqOut<'_>,
) -> Vec<f32> {
    let batch = input.batch;
    let mut h = d.h0.to_vec();
    let mut h2 = vec![0.0; batch * d.units];
    for s in 0..input.steps {
        let t = if forward { s } else { input.steps - 1 - s };
        let x = input.step(t);
        let a = aux.map(|a| a.step(t));
        rnn_step(d, act, batch, &x, a.as_deref(), &h, &mut h2);
        out.write(t, &h2, d.units);
        std::mem::swap(&mut h, &mut h2);
    }
    h
}
