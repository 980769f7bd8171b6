//! The harness's distribution check for RANDOM_MULTINOMIAL cases (CRITERIA.md,
//! `expectMultinomialDistributionWithinTolerance`): when a case has
//! `multinomial_tolerance > 0`, only this check runs (the expected output data is not used
//! and the output is marked ignored).
//!
//! The model has one operation, one input `[batch, classes]` and one output
//! `[batch, samples]`. Every class's count over *all* output elements, divided by the
//! samples per batch, must lie within the tolerance of its softmax probability in each
//! batch. As in the harness, batch `b`'s probabilities are read from
//! `input[batch * b + i]` (its indexing, kept as is).

use super::corpus::TestCase;
use crate::hal::OperandType;

/// The check on plain values: `logits` is `[batch, classes]`, `samples` is
/// `[batch, per_batch]` class indices.
pub fn within_tolerance(
    logits: &[f32],
    batch: usize,
    classes: usize,
    samples: &[i32],
    per_batch: usize,
    tolerance: f64,
) -> Result<(), String> {
    if logits.len() != batch * classes || samples.len() != batch * per_batch || per_batch == 0 {
        return Err("RANDOM_MULTINOMIAL: input or output size does not fit the case".into());
    }
    let mut counts = vec![0usize; classes];
    for &s in samples {
        let c = usize::try_from(s)
            .ok()
            .filter(|&c| c < classes)
            .ok_or_else(|| format!("RANDOM_MULTINOMIAL: sampled class {s} outside 0..{classes}"))?;
        counts[c] += 1;
    }
    let tol = tolerance as f32;
    for b in 0..batch {
        let row = |i: usize| logits.get(batch * b + i).copied().unwrap_or(0.0);
        let sum: f32 = (0..classes).map(|i| row(i).exp()).sum();
        for (i, &count) in counts.iter().enumerate() {
            let got = count as f32 / per_batch as f32;
            let want = row(i).exp() / sum;
            let within = (got - want)
                .abs()
                .partial_cmp(&tol)
                .is_some_and(|o| o.is_le());
            if !within {
                return Err(format!(
                    "RANDOM_MULTINOMIAL: class {i} frequency {got} vs probability {want} \
                     (batch {b}, tolerance {tol})"
                ));
            }
        }
    }
    Ok(())
}

/// The check for a corpus case, given the bytes its output 0 received.
pub fn check(case: &TestCase, output: &[u8]) -> Result<(), String> {
    let input = case
        .inputs
        .first()
        .ok_or("RANDOM_MULTINOMIAL case without an input")?;
    let out = case
        .outputs
        .first()
        .ok_or("RANDOM_MULTINOMIAL case without an output")?;
    let (&[batch, classes], &[_, per_batch]) = (&input.dimensions[..], &out.dimensions[..]) else {
        return Err("RANDOM_MULTINOMIAL: input and output must have rank 2".into());
    };
    let logits: Vec<f32> = match case.operand_type(input.operand) {
        Some(OperandType::TENSOR_FLOAT16) => input
            .data
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => input
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    };
    let samples: Vec<i32> = output
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    within_tolerance(
        &logits,
        batch as usize,
        classes as usize,
        &samples,
        per_batch as usize,
        case.multinomial_tolerance,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use vnpu_emu::kernels::{execute, KernelOp, RandomMultinomial};
    use vnpu_emu::tensor::{DType, Staged, TensorType, View, ViewMut};

    fn sample(logits: &[f32], classes: usize, samples: usize, seeds: [i32; 2]) -> Vec<i32> {
        let batch = logits.len() / classes;
        let op = KernelOp::from(RandomMultinomial {
            samples: samples as u32,
        });
        let lt = TensorType::new(DType::F32, &[batch, classes]);
        let st = TensorType::new(DType::I32, &[2]);
        let ot = TensorType::new(DType::I32, &[batch, samples]);
        let staged = |b: &[u8]| {
            let mut s = Staged::zeroed(b.len());
            s.bytes_mut().copy_from_slice(b);
            s
        };
        let lb = staged(
            &logits
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        );
        let sb = staged(
            &seeds
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        );
        let mut ob = Staged::zeroed(batch * samples * 4);
        let ins = [
            View {
                ty: &lt,
                bytes: lb.bytes(),
            },
            View {
                ty: &st,
                bytes: sb.bytes(),
            },
        ];
        let mut outs = [ViewMut {
            ty: &ot,
            bytes: ob.bytes_mut(),
        }];
        execute(&op, &ins, &mut outs).unwrap();
        ob.bytes()
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn the_device_passes_the_distribution_check() {
        // The corpus's shape: one batch of 1024 logits in [0, 1), 128 samples.
        let logits: Vec<f32> = (0..1024u32)
            .map(|i| (i * 7919 % 1024) as f32 / 1024.0)
            .collect();
        let s = sample(&logits, 1024, 128, [37, 42]);
        within_tolerance(&logits, 1, 1024, &s, 128, 0.025).unwrap();
        // A skewed distribution: class 0 dominates.
        let logits = [5.0f32, 0.0, 0.0, 0.0];
        let s = sample(&logits, 4, 4000, [1, 2]);
        within_tolerance(&logits, 1, 4, &s, 4000, 0.025).unwrap();
    }

    #[test]
    fn a_biased_sampler_fails() {
        let logits = [0.0f32; 4];
        let all_zero = vec![0i32; 100];
        assert!(within_tolerance(&logits, 1, 4, &all_zero, 100, 0.025).is_err());
        assert!(within_tolerance(&logits, 1, 4, &[9], 1, 0.025).is_err());
    }
}
