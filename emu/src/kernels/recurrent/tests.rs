//! Property tests of the recurrent kernels against a step-by-step reference: a sequence
//! kernel over T steps equals T single-step kernels chained by their states, and a
//! bidirectional kernel equals a forward sequence plus a backward sequence over the
//! reversed input. Plus robustness on hostile parameters and shapes.

use proptest::prelude::*;

use super::cell::{slot, LstmParams};
use super::*;
use crate::kernels::{run_f32, KernelOp};

fn cfg() -> ProptestConfig {
    crate::kernels::proptest_config(48)
}

type T = (Vec<usize>, Vec<f32>);

fn run(op: impl Into<KernelOp>, inputs: &[T]) -> Vec<T> {
    let op = op.into();
    let ins: Vec<(&[usize], &[f32])> = inputs
        .iter()
        .map(|(s, d)| (s.as_slice(), d.as_slice()))
        .collect();
    run_f32(&op, &ins).unwrap()
}

/// Deterministic small values from a seed.
fn vals(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
        })
        .collect()
}

fn close(a: &[f32], b: &[f32]) -> std::result::Result<(), TestCaseError> {
    prop_assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        prop_assert!((x - y).abs() <= 1e-5 + 1e-5 * y.abs(), "{x} vs {y}");
    }
    Ok(())
}

/// The options of an LSTM direction.
#[derive(Debug, Clone, Copy)]
struct Opts {
    cifg: bool,
    peephole: bool,
    projection: bool,
    proj_bias: bool,
    layer_norm: bool,
}

fn arb_opts() -> impl Strategy<Value = Opts> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(cifg, peephole, projection, proj_bias, layer_norm)| Opts {
            cifg,
            peephole,
            projection,
            proj_bias: projection && proj_bias,
            layer_norm,
        })
}

/// One direction's tensors by slot (0..=22), `None` when absent.
fn lstm_dir(o: Opts, batch: usize, ni: usize, nc: usize, no: usize, seed: u64) -> Vec<Option<T>> {
    let mut s: Vec<Option<T>> = vec![None; 23];
    let mut k = seed;
    let mut t = |shape: Vec<usize>, scale: f32| {
        k += 1;
        let n = shape.iter().product();
        Some((shape, vals(n, k, scale)))
    };
    let no = if o.projection { no } else { nc };
    for i in [slot::I2F, slot::I2C, slot::I2O] {
        s[i] = t(vec![nc, ni], 1.0);
    }
    for i in [slot::R2F, slot::R2C, slot::R2O] {
        s[i] = t(vec![nc, no], 1.0);
    }
    for i in [slot::FB, slot::CB, slot::OB] {
        s[i] = t(vec![nc], 1.0);
    }
    if !o.cifg {
        s[slot::I2I] = t(vec![nc, ni], 1.0);
        s[slot::R2I] = t(vec![nc, no], 1.0);
        s[slot::IB] = t(vec![nc], 1.0);
    }
    if o.peephole {
        if !o.cifg {
            s[slot::C2I] = t(vec![nc], 1.0);
        }
        s[slot::C2F] = t(vec![nc], 1.0);
        s[slot::C2O] = t(vec![nc], 1.0);
    }
    if o.projection {
        s[slot::PW] = t(vec![no, nc], 1.0);
        if o.proj_bias {
            s[slot::PB] = t(vec![no], 1.0);
        }
    }
    s[slot::H0] = t(vec![batch, no], 1.0);
    s[slot::C0] = t(vec![batch, nc], 1.0);
    if o.layer_norm {
        if !o.cifg {
            s[slot::LNI] = t(vec![nc], 1.0);
        }
        for i in [slot::LNF, slot::LNC, slot::LNO] {
            s[i] = t(vec![nc], 1.0);
        }
    }
    s
}

/// The mask and inputs of slot list `slots` (slot 0 first).
fn pack(slots: &[Option<T>]) -> (u64, Vec<T>) {
    let mut mask = 0;
    let mut ins = Vec::new();
    for (k, s) in slots.iter().enumerate() {
        if let Some(t) = s {
            mask |= 1 << k;
            ins.push(t.clone());
        }
    }
    (mask, ins)
}

/// Rows `t` of a `[T, B, n]` / `[B, T, n]` sequence.
fn step_rows(
    x: &[f32],
    time_major: bool,
    steps: usize,
    batch: usize,
    n: usize,
    t: usize,
) -> Vec<f32> {
    let mut v = Vec::new();
    for b in 0..batch {
        let r = if time_major {
            t * batch + b
        } else {
            b * steps + t
        };
        v.extend_from_slice(&x[r * n..(r + 1) * n]);
    }
    v
}

/// A `[T, B, n]` / `[B, T, n]` sequence with its time axis reversed.
fn reverse_time(x: &[f32], time_major: bool, steps: usize, batch: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for t in 0..steps {
        for b in 0..batch {
            let (r, q) = if time_major {
                (t * batch + b, (steps - 1 - t) * batch + b)
            } else {
                (b * steps + t, b * steps + steps - 1 - t)
            };
            out[q * n..(q + 1) * n].copy_from_slice(&x[r * n..(r + 1) * n]);
        }
    }
    out
}

fn seq_shape(time_major: bool, steps: usize, batch: usize, n: usize) -> Vec<usize> {
    if time_major {
        vec![steps, batch, n]
    } else {
        vec![batch, steps, n]
    }
}

fn arb_act() -> impl Strategy<Value = RecurrentActivation> {
    prop_oneof![
        Just(RecurrentActivation::Tanh),
        Just(RecurrentActivation::Relu),
        Just(RecurrentActivation::Sigmoid),
        Just(RecurrentActivation::None),
        Just(RecurrentActivation::Relu6),
    ]
}

proptest! {
    #![proptest_config(cfg())]

    /// UNIDIRECTIONAL_SEQUENCE_LSTM over T steps equals T chained LSTM steps.
    #[test]
    fn sequence_lstm_is_chained_steps(
        o in arb_opts(), act in arb_act(), time_major in any::<bool>(),
        steps in 0usize..4, batch in 1usize..3, ni in 1usize..4, nc in 1usize..5, no in 1usize..4,
        clip in prop_oneof![Just(0.0f32), Just(0.7f32)], seed in any::<u64>(),
    ) {
        let params = LstmParams { activation: act, cell_clip: clip, proj_clip: clip };
        let dir = lstm_dir(o, batch, ni, nc, no, seed);
        let x = vals(steps * batch * ni, seed ^ 99, 2.0);
        let mut slots = vec![Some((seq_shape(time_major, steps, batch, ni), x.clone()))];
        slots.extend(dir.iter().cloned());
        let (mask, ins) = pack(&slots);
        let seq = run(
            sequence_lstm::SequenceLstm { present: mask as u32, params, time_major, state_outputs: true },
            &ins,
        );
        let no = if o.projection { no } else { nc };
        let mut h = dir[slot::H0].clone().unwrap();
        let mut c = dir[slot::C0].clone().unwrap();
        let mut want = vec![0.0; steps * batch * no];
        for t in 0..steps {
            let mut slots = vec![Some((vec![batch, ni], step_rows(&x, time_major, steps, batch, ni, t)))];
            slots.extend(dir.iter().cloned());
            slots[1 + slot::H0] = Some(h.clone());
            slots[1 + slot::C0] = Some(c.clone());
            let (mask, ins) = pack(&slots);
            let outs = run(lstm::Lstm { present: mask as u32, params }, &ins);
            for b in 0..batch {
                let r = if time_major { t * batch + b } else { b * steps + t };
                want[r * no..(r + 1) * no].copy_from_slice(&outs[3].1[b * no..(b + 1) * no]);
            }
            h = outs[1].clone();
            c = outs[2].clone();
        }
        close(&seq[0].1, &want)?;
        close(&seq[1].1, &h.1)?;
        close(&seq[2].1, &c.1)?;
    }

    /// BIDIRECTIONAL_SEQUENCE_LSTM (merged, with states) equals a forward sequence plus a
    /// backward sequence over the time-reversed input.
    #[test]
    fn bidi_lstm_is_forward_plus_reversed(
        fo in arb_opts(), bo in arb_opts(), act in arb_act(), time_major in any::<bool>(),
        steps in 0usize..4, batch in 1usize..3, ni in 1usize..4, nc in 1usize..4, seed in any::<u64>(),
    ) {
        let params = LstmParams { activation: act, cell_clip: 0.0, proj_clip: 0.0 };
        let fw = lstm_dir(fo, batch, ni, nc, 2, seed);
        let bw = lstm_dir(bo, batch, ni, nc + 1, 3, seed ^ 5);
        let x = vals(steps * batch * ni, seed ^ 77, 2.0);
        let xs = (seq_shape(time_major, steps, batch, ni), x.clone());
        let mut slots = vec![Some(xs.clone())];
        for d in [&fw, &bw] {
            slots.extend(d.iter().cloned());
            slots.extend([None, None, None, None]);
        }
        slots.push(None);
        let (mask, ins) = pack(&slots);
        let bidi = run(
            bidi_lstm::BidiLstm { present: mask, params, time_major, merge: true, state_outputs: true },
            &ins,
        );
        let uni = |d: &[Option<T>], x: Vec<f32>| {
            let mut slots = vec![Some((xs.0.clone(), x))];
            slots.extend(d.iter().cloned());
            let (mask, ins) = pack(&slots);
            run(sequence_lstm::SequenceLstm { present: mask as u32, params, time_major, state_outputs: true }, &ins)
        };
        let f = uni(&fw, x.clone());
        let b = uni(&bw, reverse_time(&x, time_major, steps, batch, ni));
        let (fw_n, bw_n) = (f[0].0[2], b[0].0[2]);
        let b_out = reverse_time(&b[0].1, time_major, steps, batch, bw_n);
        let mut want = Vec::new();
        for r in 0..steps * batch {
            want.extend_from_slice(&f[0].1[r * fw_n..(r + 1) * fw_n]);
            want.extend_from_slice(&b_out[r * bw_n..(r + 1) * bw_n]);
        }
        close(&bidi[0].1, &want)?;
        close(&bidi[1].1, &f[1].1)?;
        close(&bidi[2].1, &f[2].1)?;
        close(&bidi[3].1, &b[1].1)?;
        close(&bidi[4].1, &b[2].1)?;
    }

    /// UNIDIRECTIONAL_SEQUENCE_RNN over T steps equals T chained RNN steps.
    #[test]
    fn sequence_rnn_is_chained_steps(
        act in arb_act(), time_major in any::<bool>(),
        steps in 0usize..5, batch in 1usize..3, ni in 1usize..4, units in 1usize..5, seed in any::<u64>(),
    ) {
        let w = (vec![units, ni], vals(units * ni, seed, 1.0));
        let r = (vec![units, units], vals(units * units, seed + 1, 1.0));
        let bias = (vec![units], vals(units, seed + 2, 1.0));
        let h0 = (vec![batch, units], vals(batch * units, seed + 3, 1.0));
        let x = vals(steps * batch * ni, seed + 4, 2.0);
        let seq = run(
            sequence_rnn::SequenceRnn { activation: act, time_major, state_output: true },
            &[(seq_shape(time_major, steps, batch, ni), x.clone()), w.clone(), r.clone(), bias.clone(), h0.clone()],
        );
        let mut h = h0;
        let mut want = vec![0.0; steps * batch * units];
        for t in 0..steps {
            let xt = (vec![batch, ni], step_rows(&x, time_major, steps, batch, ni, t));
            let outs = run(rnn::Rnn { activation: act }, &[xt, w.clone(), r.clone(), bias.clone(), h.clone()]);
            for b in 0..batch {
                let q = if time_major { t * batch + b } else { b * steps + t };
                want[q * units..(q + 1) * units].copy_from_slice(&outs[1].1[b * units..(b + 1) * units]);
            }
            h = outs[0].clone();
        }
        close(&seq[0].1, &want)?;
        close(&seq[1].1, &h.1)?;
    }

    /// BIDIRECTIONAL_SEQUENCE_RNN (separate outputs, with states; cross-linked aux input
    /// or none) equals two unidirectional runs, the backward one over the reversed input.
    #[test]
    fn bidi_rnn_is_forward_plus_reversed(
        act in arb_act(), time_major in any::<bool>(), aux in any::<bool>(),
        steps in 0usize..4, batch in 1usize..3, ni in 1usize..4, seed in any::<u64>(),
    ) {
        let dir = |units: usize, s: u64| {
            vec![
                (vec![units, ni], vals(units * ni, s, 1.0)),
                (vec![units, units], vals(units * units, s + 1, 1.0)),
                (vec![units], vals(units, s + 2, 1.0)),
                (vec![batch, units], vals(batch * units, s + 3, 1.0)),
            ]
        };
        let (fw, bw) = (dir(2, seed), dir(3, seed ^ 9));
        let shape = seq_shape(time_major, steps, batch, ni);
        let x = vals(steps * batch * ni, seed + 7, 2.0);
        let mut ins = vec![(shape.clone(), x.clone())];
        ins.extend(fw.iter().cloned());
        ins.extend(bw.iter().cloned());
        let mut present = 0x1ff;
        if aux {
            // Aux weights of zero: the result equals the run without aux input.
            ins.push((shape.clone(), vals(x.len(), seed + 8, 2.0)));
            ins.push((vec![2, ni], vec![0.0; 2 * ni]));
            ins.push((vec![3, ni], vec![0.0; 3 * ni]));
            present |= 7 << 9;
        }
        let bidi = run(
            bidi_rnn::BidiRnn { present, activation: act, time_major, merge: false, state_outputs: true },
            &ins,
        );
        let uni = |d: &[T], x: Vec<f32>| {
            let mut ins = vec![(shape.clone(), x)];
            ins.extend(d.iter().cloned());
            run(sequence_rnn::SequenceRnn { activation: act, time_major, state_output: true }, &ins)
        };
        let f = uni(&fw, x.clone());
        let b = uni(&bw, reverse_time(&x, time_major, steps, batch, ni));
        close(&bidi[0].1, &f[0].1)?;
        close(&bidi[1].1, &reverse_time(&b[0].1, time_major, steps, batch, 3))?;
        close(&bidi[2].1, &f[1].1)?;
        close(&bidi[3].1, &b[1].1)?;
    }

    /// Arbitrary parameter words and shapes never panic the recurrent kernels.
    #[test]
    fn hostile_params_and_shapes_never_panic(
        opcode in 130u32..=139,
        words in proptest::collection::vec(prop_oneof![3 => 0u32..3, 2 => 0u32..8, 1 => any::<u32>()], 0..10),
        shapes in proptest::collection::vec(proptest::collection::vec(0usize..4, 0..=4), 0..8),
    ) {
        if let Ok(op) = KernelOp::decode(opcode, &words) {
            prop_assert_eq!(op.encode_params(), words);
            let inputs: Vec<(&[usize], Vec<f32>)> = shapes
                .iter()
                .map(|s| (s.as_slice(), vec![0.25; s.iter().product()]))
                .collect();
            let ins: Vec<(&[usize], &[f32])> = inputs.iter().map(|(s, d)| (*s, d.as_slice())).collect();
            let _ = run_f32(&op, &ins);
        }
    }
}

#[test]
fn svdf_matches_hand_computation() {
    // batch 1, input 2, rank 1, units 2 (filters 2), memory 2.
    let op = svdf::Svdf::new(1, RecurrentActivation::None, true);
    let outs = run(
        op,
        &[
            (vec![1, 2], vec![1.0, 2.0]),
            (vec![2, 2], vec![1.0, 0.0, 0.0, 1.0]),
            (vec![2, 2], vec![0.5, 1.0, 2.0, 1.0]),
            (vec![2], vec![0.1, 0.2]),
            (vec![1, 4], vec![3.0, 9.0, 4.0, 9.0]),
        ],
    );
    // Filter 0: memory [3, x0=1] . [0.5, 1] = 2.5; filter 1: [4, x1=2] . [2, 1] = 10.
    assert_eq!(outs[1].1, vec![2.6, 10.2]);
    assert_eq!(outs[0].1, vec![1.0, 0.0, 2.0, 0.0]);
}

#[test]
fn lstm_rejects_inconsistent_optional_inputs() {
    // Peephole forget weights without the output ones.
    let o = Opts {
        cifg: false,
        peephole: false,
        projection: false,
        proj_bias: false,
        layer_norm: false,
    };
    let mut dir = lstm_dir(o, 1, 2, 3, 3, 1);
    dir[slot::C2F] = Some((vec![3], vec![0.0; 3]));
    let mut slots = vec![Some((vec![1, 2], vec![0.0; 2]))];
    slots.extend(dir);
    let (mask, ins) = pack(&slots);
    let op = KernelOp::from(lstm::Lstm {
        present: mask as u32,
        params: LstmParams::default(),
    });
    let refs: Vec<(&[usize], &[f32])> = ins
        .iter()
        .map(|(s, d)| (s.as_slice(), d.as_slice()))
        .collect();
    assert!(run_f32(&op, &refs).is_err());
}
