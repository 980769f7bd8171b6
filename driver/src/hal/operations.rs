//! Per-operation signatures: input/output counts and operand types, as NN's
//! `validateOperation` checks them for a HAL 1.3 model (the union of what HAL 1.0–1.3
//! allow, since a 1.3 driver accepts models of every earlier version).
//!
//! A signature is chosen from the type of the first input (the main tensor) and, for
//! operations with optional inputs, from the input count; every input and output type is
//! then compared with the expected list.
//!
//! Operations with a table: every HAL 1.0 operation (ADD … TANH) plus the HAL 1.1 set
//! (BATCH_TO_SPACE_ND, DIV, MEAN, PAD, SPACE_TO_BATCH_ND, SQUEEZE, STRIDED_SLICE, SUB,
//! TRANSPOSE), with the operand types each gained in 1.2 (float16, per-channel filters,
//! layout and dilation inputs) and 1.3 (quant8 signed, int32 arithmetic, resize flags).
//! All other operations get generic checks only (known type, indices in range); their
//! tables are left for the "full operation set" issue.

use super::types::{Operand, OperandType, OperationType};

use OperandType as T;

/// Operations that have a signature table here.
pub const OPERATIONS_WITH_SIGNATURES: &[OperationType] = &[
    OperationType::ADD,
    OperationType::AVERAGE_POOL_2D,
    OperationType::CONCATENATION,
    OperationType::CONV_2D,
    OperationType::DEPTHWISE_CONV_2D,
    OperationType::DEPTH_TO_SPACE,
    OperationType::DEQUANTIZE,
    OperationType::EMBEDDING_LOOKUP,
    OperationType::FLOOR,
    OperationType::FULLY_CONNECTED,
    OperationType::HASHTABLE_LOOKUP,
    OperationType::L2_NORMALIZATION,
    OperationType::L2_POOL_2D,
    OperationType::LOCAL_RESPONSE_NORMALIZATION,
    OperationType::LOGISTIC,
    OperationType::LSH_PROJECTION,
    OperationType::LSTM,
    OperationType::MAX_POOL_2D,
    OperationType::MUL,
    OperationType::RELU,
    OperationType::RELU1,
    OperationType::RELU6,
    OperationType::RESHAPE,
    OperationType::RESIZE_BILINEAR,
    OperationType::RNN,
    OperationType::SOFTMAX,
    OperationType::SPACE_TO_DEPTH,
    OperationType::SVDF,
    OperationType::TANH,
    OperationType::BATCH_TO_SPACE_ND,
    OperationType::DIV,
    OperationType::MEAN,
    OperationType::PAD,
    OperationType::SPACE_TO_BATCH_ND,
    OperationType::SQUEEZE,
    OperationType::STRIDED_SLICE,
    OperationType::SUB,
    OperationType::TRANSPOSE,
];

/// Whether `op` has a signature table (otherwise only generic checks apply).
pub fn has_signature(op: OperationType) -> bool {
    OPERATIONS_WITH_SIGNATURES.contains(&op)
}

/// The usual "same type in, same type out" tensor types.
const FLOAT_QUANT: &[OperandType] = &[
    T::TENSOR_FLOAT32,
    T::TENSOR_FLOAT16,
    T::TENSOR_QUANT8_ASYMM,
    T::TENSOR_QUANT8_ASYMM_SIGNED,
];
const FLOATS: &[OperandType] = &[T::TENSOR_FLOAT32, T::TENSOR_FLOAT16];

/// Check `op`'s signature against the given input and output operands. Returns `Ok(true)`
/// if a table was applied, `Ok(false)` if `op` has none.
pub fn check_operation_signature(
    op: OperationType,
    inputs: &[&Operand],
    outputs: &[&Operand],
) -> Result<bool, String> {
    if !has_signature(op) {
        return Ok(false);
    }
    let name = op.name().unwrap_or("?");
    let ins: Vec<OperandType> = inputs.iter().map(|o| o.r#type).collect();
    let outs: Vec<OperandType> = outputs.iter().map(|o| o.r#type).collect();
    let Some(&t) = ins.first() else {
        return Err(format!("{name}: no inputs"));
    };
    check_signature(op, t, &ins, &outs, inputs, outputs).map_err(|e| format!("{name}: {e}"))?;
    Ok(true)
}

fn counts(
    ins: &[OperandType],
    outs: &[OperandType],
    n_in: &[usize],
    n_out: usize,
) -> Result<(), String> {
    if !n_in.contains(&ins.len()) {
        return Err(format!("{} inputs, expected one of {n_in:?}", ins.len()));
    }
    if outs.len() != n_out {
        return Err(format!("{} outputs, expected {n_out}", outs.len()));
    }
    Ok(())
}

fn expect(got: &[OperandType], want: &[OperandType], what: &str) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} {what}s, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g != w {
            return Err(format!("{what} {i} has type {g}, expected {w}"));
        }
    }
    Ok(())
}

fn one_of(t: OperandType, allowed: &[OperandType], what: &str) -> Result<(), String> {
    if allowed.contains(&t) {
        Ok(())
    } else {
        Err(format!("unsupported {what} type {t}"))
    }
}

/// The scalar type of float parameters for tensor type `t` (FLOAT16 for float16 tensors).
fn float_scalar(t: OperandType) -> OperandType {
    if t == T::TENSOR_FLOAT16 {
        T::FLOAT16
    } else {
        T::FLOAT32
    }
}

/// The bias type of a convolution / fully connected layer over input type `t`.
fn bias_of(t: OperandType) -> OperandType {
    match t {
        T::TENSOR_QUANT8_ASYMM | T::TENSOR_QUANT8_ASYMM_SIGNED => T::TENSOR_INT32,
        other => other,
    }
}

fn with(prefix: &[OperandType], rest: &[OperandType]) -> Vec<OperandType> {
    let mut v = prefix.to_vec();
    v.extend_from_slice(rest);
    v
}

/// Try each candidate input list; Ok if any matches exactly.
fn any_form(ins: &[OperandType], forms: &[Vec<OperandType>]) -> Result<(), String> {
    let mut last = String::from("no matching form");
    for f in forms {
        match expect(ins, f, "input") {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn check_signature(
    op: OperationType,
    t: OperandType,
    ins: &[OperandType],
    outs: &[OperandType],
    operands: &[&Operand],
    output_operands: &[&Operand],
) -> Result<(), String> {
    const I: OperandType = T::INT32;
    const B: OperandType = T::BOOL;
    match op {
        OperationType::ADD | OperationType::MUL | OperationType::SUB | OperationType::DIV => {
            counts(ins, outs, &[3], 1)?;
            let allowed: &[OperandType] = match op {
                OperationType::DIV => &[T::TENSOR_FLOAT32, T::TENSOR_FLOAT16, T::TENSOR_INT32],
                _ => &[
                    T::TENSOR_FLOAT32,
                    T::TENSOR_FLOAT16,
                    T::TENSOR_QUANT8_ASYMM,
                    T::TENSOR_QUANT8_ASYMM_SIGNED,
                    T::TENSOR_INT32,
                ],
            };
            one_of(t, allowed, "input")?;
            expect(ins, &[t, t, I], "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::FLOOR => {
            counts(ins, outs, &[1], 1)?;
            one_of(t, FLOATS, "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::RELU
        | OperationType::RELU1
        | OperationType::RELU6
        | OperationType::LOGISTIC
        | OperationType::TANH => {
            counts(ins, outs, &[1], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::SOFTMAX => {
            counts(ins, outs, &[2, 3], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            let beta = float_scalar(t);
            let want: &[OperandType] = if ins.len() == 3 {
                &[t, beta, I]
            } else {
                &[t, beta]
            };
            expect(ins, want, "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::FULLY_CONNECTED => {
            counts(ins, outs, &[4], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            expect(ins, &[t, t, bias_of(t), I], "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::CONV_2D | OperationType::DEPTHWISE_CONV_2D => {
            let depthwise = op == OperationType::DEPTHWISE_CONV_2D;
            let n_in: &[usize] = if depthwise {
                &[8, 9, 11, 12, 14]
            } else {
                &[7, 8, 10, 11, 13]
            };
            counts(ins, outs, n_in, 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            let filter = ins.get(1).copied().unwrap_or(t);
            let filter_ok = filter == t
                || (filter == T::TENSOR_QUANT8_SYMM_PER_CHANNEL
                    && matches!(t, T::TENSOR_QUANT8_ASYMM | T::TENSOR_QUANT8_ASYMM_SIGNED));
            if !filter_ok {
                return Err(format!(
                    "filter type {filter} does not match input type {t}"
                ));
            }
            if filter == T::TENSOR_QUANT8_SYMM_PER_CHANNEL {
                let want_dim = if depthwise { 3 } else { 0 };
                if let Some(super::types::ExtraParams::ChannelQuant(p)) =
                    operands.get(1).map(|o| &o.extra_params)
                {
                    if p.channel_dim != want_dim {
                        return Err(format!("per-channel filter channel_dim must be {want_dim}"));
                    }
                }
            }
            let head = [t, filter, bias_of(t)];
            // Implicit padding: scheme, stride w/h, [multiplier], act.
            let mut implicit = vec![I, I, I];
            let mut explicit = vec![I, I, I, I, I, I];
            if depthwise {
                implicit.push(I);
                explicit.push(I);
            }
            implicit.push(I);
            explicit.push(I);
            let mut forms = Vec::new();
            for tail in [&implicit, &explicit] {
                forms.push(with(&head, tail));
                forms.push(with(&head, &with(tail, &[B])));
                forms.push(with(&head, &with(tail, &[B, I, I])));
            }
            any_form(ins, &forms)?;
            expect(outs, &[t], "output")
        }
        OperationType::AVERAGE_POOL_2D | OperationType::MAX_POOL_2D | OperationType::L2_POOL_2D => {
            counts(ins, outs, &[7, 8, 10, 11], 1)?;
            let allowed = if op == OperationType::L2_POOL_2D {
                FLOATS
            } else {
                FLOAT_QUANT
            };
            one_of(t, allowed, "input")?;
            let mut forms = Vec::new();
            for n in [6usize, 9] {
                let tail = vec![I; n];
                forms.push(with(&[t], &tail));
                forms.push(with(&[t], &with(&tail, &[B])));
            }
            any_form(ins, &forms)?;
            expect(outs, &[t], "output")
        }
        OperationType::RESHAPE => {
            counts(ins, outs, &[2], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            expect(ins, &[t, T::TENSOR_INT32], "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::CONCATENATION => {
            if ins.len() < 2 {
                return Err(format!("{} inputs, expected at least 2", ins.len()));
            }
            counts(ins, outs, &[ins.len()], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            let mut want = vec![t; ins.len() - 1];
            want.push(I);
            expect(ins, &want, "input")?;
            expect(outs, &[t], "output")?;
            // NNAPI: "Supported tensor rank: up to 4".
            if let Some(o) = operands[..operands.len() - 1]
                .iter()
                .find(|o| o.dimensions.len() > 4)
            {
                return Err(format!("input rank {} exceeds 4", o.dimensions.len()));
            }
            // When every shape is fully known, the output holds exactly the inputs' elements.
            let count = |o: &Operand| -> Option<u64> {
                if o.dimensions.is_empty() || o.dimensions.contains(&0) {
                    return None;
                }
                o.dimensions
                    .iter()
                    .try_fold(1u64, |acc, &d| acc.checked_mul(u64::from(d)))
            };
            let tensors = &operands[..operands.len() - 1];
            let total: Option<u64> = tensors
                .iter()
                .try_fold(0u64, |acc, o| count(o).and_then(|n| acc.checked_add(n)));
            if let (Some(total), Some(out)) =
                (total, output_operands.first().and_then(|o| count(o)))
            {
                if total != out {
                    return Err(format!("inputs hold {total} elements, the output {out}"));
                }
            }
            Ok(())
        }
        OperationType::L2_NORMALIZATION => {
            counts(ins, outs, &[1, 2], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            let want: &[OperandType] = if ins.len() == 2 { &[t, I] } else { &[t] };
            expect(ins, want, "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::LOCAL_RESPONSE_NORMALIZATION => {
            counts(ins, outs, &[5, 6], 1)?;
            one_of(t, FLOATS, "input")?;
            let f = float_scalar(t);
            let mut want = vec![t, I, f, f, f];
            if ins.len() == 6 {
                want.push(I);
            }
            expect(ins, &want, "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::DEPTH_TO_SPACE | OperationType::SPACE_TO_DEPTH => {
            counts(ins, outs, &[2, 3], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            let want: &[OperandType] = if ins.len() == 3 { &[t, I, B] } else { &[t, I] };
            expect(ins, want, "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::BATCH_TO_SPACE_ND => {
            counts(ins, outs, &[2, 3], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            let want: &[OperandType] = if ins.len() == 3 {
                &[t, T::TENSOR_INT32, B]
            } else {
                &[t, T::TENSOR_INT32]
            };
            expect(ins, want, "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::SPACE_TO_BATCH_ND => {
            counts(ins, outs, &[3, 4], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            let mut want = vec![t, T::TENSOR_INT32, T::TENSOR_INT32];
            if ins.len() == 4 {
                want.push(B);
            }
            expect(ins, &want, "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::RESIZE_BILINEAR => {
            counts(ins, outs, &[3, 4, 6], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            let mut forms = Vec::new();
            for s in [I, float_scalar(t)] {
                forms.push(vec![t, s, s]);
                forms.push(vec![t, s, s, B]);
                forms.push(vec![t, s, s, B, B, B]);
            }
            any_form(ins, &forms)?;
            expect(outs, &[t], "output")
        }
        OperationType::PAD | OperationType::TRANSPOSE | OperationType::SQUEEZE => {
            counts(ins, outs, &[2], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            expect(ins, &[t, T::TENSOR_INT32], "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::MEAN => {
            counts(ins, outs, &[3], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            expect(ins, &[t, T::TENSOR_INT32, I], "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::STRIDED_SLICE => {
            counts(ins, outs, &[7], 1)?;
            one_of(t, FLOAT_QUANT, "input")?;
            let ti = T::TENSOR_INT32;
            expect(ins, &[t, ti, ti, ti, I, I, I], "input")?;
            expect(outs, &[t], "output")
        }
        OperationType::DEQUANTIZE => {
            counts(ins, outs, &[1], 1)?;
            one_of(
                t,
                &[
                    T::TENSOR_QUANT8_ASYMM,
                    T::TENSOR_QUANT8_ASYMM_SIGNED,
                    T::TENSOR_QUANT8_SYMM,
                    T::TENSOR_QUANT8_SYMM_PER_CHANNEL,
                ],
                "input",
            )?;
            one_of(outs[0], FLOATS, "output")
        }
        OperationType::EMBEDDING_LOOKUP => {
            counts(ins, outs, &[2], 1)?;
            one_of(t, &[T::TENSOR_INT32], "lookups")?;
            let v = ins[1];
            one_of(
                v,
                &[
                    T::TENSOR_FLOAT32,
                    T::TENSOR_FLOAT16,
                    T::TENSOR_INT32,
                    T::TENSOR_QUANT8_ASYMM,
                    T::TENSOR_QUANT8_ASYMM_SIGNED,
                ],
                "values",
            )?;
            expect(outs, &[v], "output")
        }
        OperationType::HASHTABLE_LOOKUP => {
            counts(ins, outs, &[3], 2)?;
            let v = ins[2];
            one_of(
                v,
                &[T::TENSOR_FLOAT32, T::TENSOR_INT32, T::TENSOR_QUANT8_ASYMM],
                "values",
            )?;
            expect(ins, &[T::TENSOR_INT32, T::TENSOR_INT32, v], "input")?;
            expect(outs, &[v, T::TENSOR_QUANT8_ASYMM], "output")
        }
        OperationType::LSH_PROJECTION => {
            counts(ins, outs, &[4], 1)?;
            one_of(t, FLOATS, "hash")?;
            // Input 1 may have any type.
            if ins[2] != t {
                return Err(format!(
                    "weight type {} does not match hash type {t}",
                    ins[2]
                ));
            }
            expect(&ins[3..], &[I], "type input")?;
            expect(outs, &[T::TENSOR_INT32], "output")
        }
        OperationType::RNN => {
            counts(ins, outs, &[6], 2)?;
            one_of(t, FLOATS, "input")?;
            expect(ins, &[t, t, t, t, t, I], "input")?;
            expect(outs, &[t, t], "output")
        }
        OperationType::SVDF => {
            counts(ins, outs, &[7], 2)?;
            one_of(t, FLOATS, "input")?;
            expect(ins, &[t, t, t, t, t, I, I], "input")?;
            expect(outs, &[t, t], "output")
        }
        OperationType::LSTM => {
            counts(ins, outs, &[23, 27], 4)?;
            one_of(t, FLOATS, "input")?;
            let f = float_scalar(t);
            let mut want = vec![t; 20];
            want.extend_from_slice(&[I, f, f]);
            if ins.len() == 27 {
                want.extend_from_slice(&[t; 4]);
            }
            expect(ins, &want, "input")?;
            expect(outs, &[t; 4], "output")
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(types: &[OperandType]) -> Vec<Operand> {
        types
            .iter()
            .map(|&t| Operand {
                r#type: t,
                ..Default::default()
            })
            .collect()
    }

    fn check(op: OperationType, ins: &[OperandType], outs: &[OperandType]) -> Result<bool, String> {
        let i = ops(ins);
        let o = ops(outs);
        let ir: Vec<&Operand> = i.iter().collect();
        let or: Vec<&Operand> = o.iter().collect();
        check_operation_signature(op, &ir, &or)
    }

    #[test]
    fn add_signatures() {
        let f = T::TENSOR_FLOAT32;
        assert_eq!(check(OperationType::ADD, &[f, f, T::INT32], &[f]), Ok(true));
        assert!(check(OperationType::ADD, &[f, f], &[f]).is_err());
        assert!(check(OperationType::ADD, &[f, T::TENSOR_FLOAT16, T::INT32], &[f]).is_err());
        assert!(check(OperationType::ADD, &[f, f, T::UINT32], &[f]).is_err());
        assert!(check(OperationType::DIV, &[T::TENSOR_QUANT8_ASYMM; 2], &[]).is_err());
        assert_eq!(check(OperationType::SELECT, &[], &[]), Ok(false));
    }

    #[test]
    fn conv_forms() {
        let q = T::TENSOR_QUANT8_ASYMM;
        let pc = T::TENSOR_QUANT8_SYMM_PER_CHANNEL;
        let b = T::TENSOR_INT32;
        let i = T::INT32;
        let explicit = [q, q, b, i, i, i, i, i, i, i];
        assert_eq!(check(OperationType::CONV_2D, &explicit, &[q]), Ok(true));
        let implicit_layout_dilation = [q, pc, b, i, i, i, i, T::BOOL, i, i];
        assert_eq!(
            check(OperationType::CONV_2D, &implicit_layout_dilation, &[q]),
            Ok(true)
        );
        let mut bad = explicit;
        bad[9] = T::BOOL;
        assert!(check(OperationType::CONV_2D, &bad, &[q]).is_err());
        let f = T::TENSOR_FLOAT32;
        assert!(check(OperationType::CONV_2D, &[f, pc, f, i, i, i, i], &[f]).is_err());
        let dw = [f, f, f, i, i, i, i, i];
        assert_eq!(check(OperationType::DEPTHWISE_CONV_2D, &dw, &[f]), Ok(true));
    }
}
