//! Port of VTS 1.3 `ValidateModel.cpp`: every mutation of every V1_0 corpus model must be
//! rejected with INVALID_ARGUMENT, and the unmutated models must be accepted.
//!
//! Each test applies one VTS mutation (named after it) to every model of
//! `conformance/V1_0.jsonl.gz`. The assertion lives in one place, [`expect_invalid_model`]:
//! the validator rejects the mutant, and so does the IDevice (getSupportedOperations_1_3
//! returns INVALID_ARGUMENT, prepareModel_1_3 returns and notifies INVALID_ARGUMENT with no
//! model).
//!
//! Where this port differs from VTS:
//! - `mutate_operation_operand_type` only mutates operands all of whose readers and writers
//!   have a signature table in `hal::operations` (other operations get generic checks only);
//!   with the current tables that is every V1_0 operation.
//! - Operations added or rewired by a mutation keep `number_of_consumers` consistent (as
//!   the HIDL 1.3 VTS does), so that each mutation tests the rule it is about.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use vnpu_driver::conformance::corpus::{self, TestCase};
use vnpu_driver::device::PrepareArgs;
use vnpu_driver::device::{IDevice, PreparedModelSlot};
use vnpu_driver::hal::{
    validate_execution_preference, validate_priority, DataLocation, ErrorStatus,
    ExecutionPreference, ExtraParams, Model, Operand, OperandLifeTime, OperandType, Operation,
    OperationType, Priority, SymmPerChannelQuantParams,
};
use vnpu_driver::validate::validate_model;

type L = OperandLifeTime;
type T = OperandType;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance")
}

/// The V1_0 corpus, loaded once per test binary.
fn cases() -> &'static [TestCase] {
    static CASES: OnceLock<Vec<TestCase>> = OnceLock::new();
    CASES.get_or_init(|| {
        let path = corpus_dir().join("V1_0.jsonl.gz");
        let entries = corpus::read_corpus(&path).expect("open V1_0 corpus");
        let cases: Vec<TestCase> = entries
            .into_iter()
            .map(|(line, c)| c.unwrap_or_else(|e| panic!("V1_0 line {line}: {e}")))
            .collect();
        assert!(
            cases.len() > 300,
            "V1_0 corpus has only {} cases",
            cases.len()
        );
        cases
    })
}

/// The assertion every mutant goes through: the model must be rejected with
/// INVALID_ARGUMENT.
fn expect_invalid_model(model: &Model) {
    match validate_model(model) {
        Ok(()) => panic!("mutated model was accepted"),
        Err(e) => assert_eq!(e.status(), ErrorStatus::InvalidArgument, "{e}"),
    }
    let (status, supported) = common::device().get_supported_operations_1_3(model);
    assert_eq!(
        status,
        ErrorStatus::InvalidArgument,
        "getSupportedOperations_1_3"
    );
    assert!(supported.is_empty());
    let (status, prepared) = common::prepare(model);
    assert_eq!(status, ErrorStatus::InvalidArgument, "prepareModel_1_3");
    assert!(prepared.is_none());
}

/// The assertion for invalid preparation arguments on a valid model.
fn expect_invalid_prepare(model: &Model, preference: ExecutionPreference, priority: Priority) {
    let r = validate_model(model)
        .and_then(|()| validate_execution_preference(preference))
        .and_then(|()| validate_priority(priority));
    match r {
        Ok(()) => panic!("preference {preference} / priority {priority} accepted"),
        Err(e) => assert_eq!(e.status(), ErrorStatus::InvalidArgument, "{e}"),
    }
    let slot = PreparedModelSlot::new();
    let ret = common::device().prepare_model_1_3(PrepareArgs {
        preference,
        priority,
        ..PrepareArgs::new(model, Some(slot.clone()))
    });
    assert_eq!(ret, ErrorStatus::InvalidArgument);
    assert_eq!(slot.wait().0, ErrorStatus::InvalidArgument);
    assert!(slot.wait().1.is_none());
}

/// Apply `mutate` to a copy of `case`'s model and expect it to be rejected; on failure,
/// report the case and the mutation.
fn mutant(case: &TestCase, what: &str, mutate: impl FnOnce(&mut Model)) {
    let mut m = case.model.clone();
    mutate(&mut m);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| expect_invalid_model(&m)));
    if let Err(p) = r {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!("{}: {what}: {msg}", case.name);
    }
}

/// Real consumer counts of the main subgraph (independent of the stored field).
fn number_of_consumers(m: &Model) -> Vec<u32> {
    let mut n = vec![0u32; m.main.operands.len()];
    for op in &m.main.operations {
        for &i in &op.inputs {
            n[i as usize] += 1;
        }
    }
    n
}

/// Size in bytes of an operand as VTS `sizeOfData` computes it (0 when unknown).
fn size_of_data(o: &Operand) -> usize {
    let Some(es) = o.r#type.element_size() else {
        return 0;
    };
    if o.r#type.is_scalar() {
        return es;
    }
    if o.dimensions.is_empty() {
        return 0;
    }
    o.dimensions.iter().fold(es, |acc, &d| acc * d as usize)
}

/// Turn operand `i` (lifetime already set) into a CONSTANT_COPY at offset 0.
fn become_constant_copy(m: &mut Model, i: usize) {
    let size = size_of_data(&m.main.operands[i]);
    m.main.operands[i].location = DataLocation {
        pool_index: 0,
        offset: 0,
        length: size as u32,
    };
    if m.operand_values.len() < size {
        m.operand_values.resize(size, 0);
    }
}

/// A new INT32 scalar operand with the given lifetime and consumer count.
fn add_operand(m: &mut Model, lifetime: OperandLifeTime, consumers: u32) -> u32 {
    m.main.operands.push(Operand {
        r#type: T::INT32,
        dimensions: vec![],
        number_of_consumers: consumers,
        scale: 0.0,
        zero_point: 0,
        lifetime,
        location: DataLocation::default(),
        extra_params: ExtraParams::None,
    });
    (m.main.operands.len() - 1) as u32
}

#[test]
fn unmutated_models_are_valid() {
    for c in cases() {
        if let Err(e) = validate_model(&c.model) {
            panic!("{}: {e}", c.name);
        }
    }
}

#[test]
fn mutate_execution_order() {
    for c in cases() {
        let m = &c.model;
        let consumers = number_of_consumers(m);
        for (k, op) in m.main.operations.iter().enumerate() {
            let reads_written = op.inputs.iter().any(|&i| {
                matches!(
                    m.main.operands[i as usize].lifetime,
                    L::TEMPORARY_VARIABLE | L::SUBGRAPH_OUTPUT
                )
            });
            if reads_written {
                mutant(c, &format!("operation {k} moved first (reader)"), |m| {
                    m.main.operations[..=k].rotate_right(1);
                });
            }
            if op.outputs.iter().any(|&o| consumers[o as usize] > 0) {
                mutant(c, &format!("operation {k} moved last (writer)"), |m| {
                    m.main.operations[k..].rotate_left(1);
                });
            }
        }
    }
}

#[test]
fn mutate_operand_type() {
    for c in cases() {
        for i in 0..c.model.main.operands.len() {
            for bad in [-1, 16, 9999, 10002] {
                mutant(c, &format!("operand {i} type {bad}"), |m| {
                    m.main.operands[i].r#type = OperandType(bad)
                });
            }
        }
    }
}

#[test]
fn mutate_operand_rank() {
    for c in cases() {
        for (i, o) in c.model.main.operands.iter().enumerate() {
            if matches!(
                o.r#type,
                T::FLOAT16 | T::FLOAT32 | T::INT32 | T::UINT32 | T::BOOL
            ) {
                mutant(c, &format!("operand {i} rank 1"), |m| {
                    m.main.operands[i].dimensions = vec![0]
                });
            }
        }
    }
}

#[test]
fn mutate_operand_scale() {
    for c in cases() {
        for (i, o) in c.model.main.operands.iter().enumerate() {
            let bad = match o.r#type {
                T::FLOAT16
                | T::FLOAT32
                | T::INT32
                | T::UINT32
                | T::BOOL
                | T::TENSOR_BOOL8
                | T::TENSOR_FLOAT16
                | T::TENSOR_FLOAT32
                | T::TENSOR_QUANT8_SYMM_PER_CHANNEL
                | T::SUBGRAPH => 1.0,
                T::TENSOR_INT32 => -1.0,
                _ => 0.0,
            };
            mutant(c, &format!("operand {i} scale {bad}"), |m| {
                m.main.operands[i].scale = bad
            });
        }
    }
}

#[test]
fn mutate_operand_zero_point() {
    for c in cases() {
        for (i, o) in c.model.main.operands.iter().enumerate() {
            let bad: &[i32] = match o.r#type {
                T::FLOAT16
                | T::FLOAT32
                | T::INT32
                | T::UINT32
                | T::BOOL
                | T::TENSOR_BOOL8
                | T::TENSOR_FLOAT16
                | T::TENSOR_FLOAT32
                | T::TENSOR_INT32
                | T::TENSOR_QUANT8_SYMM_PER_CHANNEL
                | T::SUBGRAPH => &[1],
                T::TENSOR_QUANT8_ASYMM => &[-1, 256],
                T::TENSOR_QUANT8_ASYMM_SIGNED => &[-129, 128],
                T::TENSOR_QUANT8_SYMM => &[-129, -1, 1, 128],
                T::TENSOR_QUANT16_ASYMM => &[-1, 65536],
                T::TENSOR_QUANT16_SYMM => &[-32769, -1, 1, 32768],
                _ => &[],
            };
            for &z in bad {
                mutant(c, &format!("operand {i} zero point {z}"), |m| {
                    m.main.operands[i].zero_point = z
                });
            }
        }
    }
}

#[test]
fn mutate_operand_lifetime() {
    for c in cases() {
        for (i, o) in c.model.main.operands.iter().enumerate() {
            let mut bad: Vec<OperandLifeTime> = match o.lifetime {
                L::SUBGRAPH_OUTPUT | L::TEMPORARY_VARIABLE => {
                    vec![L::SUBGRAPH_INPUT, L::CONSTANT_COPY]
                }
                L::CONSTANT_COPY | L::CONSTANT_REFERENCE | L::SUBGRAPH_INPUT => {
                    vec![L::TEMPORARY_VARIABLE, L::SUBGRAPH_OUTPUT]
                }
                _ => vec![],
            };
            if size_of_data(o) == 0 {
                bad.retain(|&l| l != L::CONSTANT_COPY);
            }
            for l in bad {
                mutant(
                    c,
                    &format!("operand {i} lifetime {} -> {l}", o.lifetime),
                    |m| {
                        let idx = i as u32;
                        match m.main.operands[i].lifetime {
                            L::SUBGRAPH_INPUT => m.main.input_indexes.retain(|&x| x != idx),
                            L::SUBGRAPH_OUTPUT => m.main.output_indexes.retain(|&x| x != idx),
                            _ => {}
                        }
                        m.main.operands[i].lifetime = l;
                        m.main.operands[i].location = DataLocation::default();
                        match l {
                            L::CONSTANT_COPY => become_constant_copy(m, i),
                            L::SUBGRAPH_INPUT => m.main.input_indexes.push(idx),
                            L::SUBGRAPH_OUTPUT => m.main.output_indexes.push(idx),
                            _ => {}
                        }
                    },
                );
            }
        }
    }
}

#[test]
fn mutate_operand_input_output() {
    for c in cases() {
        for (i, o) in c.model.main.operands.iter().enumerate() {
            let changed = match o.lifetime {
                L::CONSTANT_COPY | L::CONSTANT_REFERENCE => Some(L::SUBGRAPH_INPUT),
                L::SUBGRAPH_INPUT if size_of_data(o) > 0 => Some(L::CONSTANT_COPY),
                L::SUBGRAPH_OUTPUT => Some(L::TEMPORARY_VARIABLE),
                L::TEMPORARY_VARIABLE => Some(L::SUBGRAPH_OUTPUT),
                _ => None,
            };
            if let Some(l) = changed {
                mutant(
                    c,
                    &format!("operand {i} lifetime {} -> {l}", o.lifetime),
                    |m| {
                        m.main.operands[i].lifetime = l;
                        m.main.operands[i].location = DataLocation::default();
                        if l == L::CONSTANT_COPY {
                            become_constant_copy(m, i);
                        }
                    },
                );
            }
        }
    }
}

#[test]
fn mutate_operand_number_of_consumers() {
    for c in cases() {
        for (i, o) in c.model.main.operands.iter().enumerate() {
            let n = o.number_of_consumers;
            let mut bad = vec![n + 1];
            if n > 0 {
                bad.push(n - 1);
            }
            for b in bad {
                mutant(c, &format!("operand {i} consumers {n} -> {b}"), |m| {
                    m.main.operands[i].number_of_consumers = b;
                });
            }
        }
    }
}

#[test]
fn mutate_operand_add_writer() {
    for c in cases() {
        for (k, op) in c.model.main.operations.iter().enumerate() {
            for bad_output in 0..op.outputs.len() {
                mutant(
                    c,
                    &format!("operation {k} duplicated writing output {bad_output}"),
                    |m| {
                        let mut new_op = m.main.operations[k].clone();
                        for (j, out) in new_op.outputs.iter_mut().enumerate() {
                            if j == bad_output {
                                continue;
                            }
                            let mut o = m.main.operands[*out as usize].clone();
                            if o.lifetime == L::SUBGRAPH_OUTPUT {
                                o.lifetime = L::TEMPORARY_VARIABLE;
                            }
                            o.number_of_consumers = 0;
                            *out = m.main.operands.len() as u32;
                            m.main.operands.push(o);
                        }
                        for &i in &new_op.inputs {
                            m.main.operands[i as usize].number_of_consumers += 1;
                        }
                        m.main.operations.push(new_op);
                    },
                );
            }
        }
    }
}

/// VTS `mutateOperand`: change an operand's type, fixing up the fields that type needs.
fn mutate_operand(o: &mut Operand, t: OperandType) {
    let dims_or_one = |o: &Operand| {
        if o.dimensions.is_empty() {
            vec![1]
        } else {
            o.dimensions.clone()
        }
    };
    let old = o.clone();
    o.r#type = t;
    match t {
        T::FLOAT16 | T::FLOAT32 | T::INT32 | T::UINT32 | T::BOOL => {
            o.dimensions = vec![];
            o.scale = 0.0;
            o.zero_point = 0;
        }
        T::TENSOR_BOOL8 | T::TENSOR_FLOAT16 | T::TENSOR_FLOAT32 => {
            o.dimensions = dims_or_one(&old);
            o.scale = 0.0;
            o.zero_point = 0;
        }
        T::TENSOR_INT32 => {
            o.dimensions = dims_or_one(&old);
            o.zero_point = 0;
        }
        T::TENSOR_QUANT8_ASYMM
        | T::TENSOR_QUANT8_SYMM
        | T::TENSOR_QUANT16_ASYMM
        | T::TENSOR_QUANT16_SYMM => {
            o.dimensions = dims_or_one(&old);
            o.scale = if old.scale != 0.0 { old.scale } else { 1.0 };
        }
        T::TENSOR_QUANT8_SYMM_PER_CHANNEL => {
            o.dimensions = dims_or_one(&old);
            o.scale = 0.0;
            o.zero_point = 0;
            let n = old.dimensions.first().copied().unwrap_or(0) as usize;
            o.extra_params = ExtraParams::ChannelQuant(SymmPerChannelQuantParams {
                scales: vec![1.0; n],
                channel_dim: 0,
            });
        }
        _ => {}
    }
}

/// VTS `mutateOperationOperandTypeSkip`: operand types an operation legitimately accepts in
/// several forms.
fn operation_operand_type_skip(m: &Model, operand: u32, t: OperandType) -> bool {
    if t == m.main.operands[operand as usize].r#type || t == T::OEM || t == T::TENSOR_OEM_BYTE {
        return true;
    }
    let any_of = |ts: &[OperandType]| ts.contains(&t);
    for op in &m.main.operations {
        let in0 = op.inputs.first() == Some(&operand);
        let in1 = op.inputs.get(1) == Some(&operand);
        let out0 = op.outputs.first() == Some(&operand);
        let skip = match op.r#type {
            OperationType::LSH_PROJECTION => in1,
            OperationType::CAST | OperationType::ARGMAX | OperationType::ARGMIN => any_of(&[
                T::TENSOR_FLOAT16,
                T::TENSOR_FLOAT32,
                T::TENSOR_INT32,
                T::TENSOR_QUANT8_ASYMM,
                T::TENSOR_QUANT8_ASYMM_SIGNED,
            ]),
            OperationType::QUANTIZE => {
                (in0 && any_of(&[T::TENSOR_FLOAT16, T::TENSOR_FLOAT32]))
                    || (out0 && any_of(&[T::TENSOR_QUANT8_ASYMM, T::TENSOR_QUANT8_ASYMM_SIGNED]))
            }
            OperationType::RANDOM_MULTINOMIAL => {
                in0 && any_of(&[T::TENSOR_FLOAT16, T::TENSOR_FLOAT32])
            }
            OperationType::DEQUANTIZE => {
                (in0 && any_of(&[
                    T::TENSOR_QUANT8_ASYMM,
                    T::TENSOR_QUANT8_ASYMM_SIGNED,
                    T::TENSOR_QUANT8_SYMM,
                    T::TENSOR_QUANT8_SYMM_PER_CHANNEL,
                ])) || (out0 && any_of(&[T::TENSOR_FLOAT16, T::TENSOR_FLOAT32]))
            }
            OperationType::TRANSPOSE_CONV_2D
            | OperationType::GROUPED_CONV_2D
            | OperationType::DEPTHWISE_CONV_2D
            | OperationType::CONV_2D => {
                in1 && any_of(&[T::TENSOR_QUANT8_ASYMM, T::TENSOR_QUANT8_SYMM_PER_CHANNEL])
            }
            OperationType::AXIS_ALIGNED_BBOX_TRANSFORM => {
                in1 && any_of(&[T::TENSOR_QUANT8_ASYMM, T::TENSOR_QUANT8_ASYMM_SIGNED])
            }
            _ => false,
        };
        if skip {
            return true;
        }
    }
    false
}

/// Whether every operation touching `operand` has a signature table (and at least one does).
fn covered_by_signature_tables(m: &Model, operand: u32) -> bool {
    let touching: Vec<&Operation> = m
        .main
        .operations
        .iter()
        .filter(|op| op.inputs.contains(&operand) || op.outputs.contains(&operand))
        .collect();
    !touching.is_empty()
        && touching
            .iter()
            .all(|op| vnpu_driver::ops::definition(op.r#type).is_some())
}

#[test]
fn mutate_operation_operand_type() {
    for c in cases() {
        for i in 0..c.model.main.operands.len() as u32 {
            if !covered_by_signature_tables(&c.model, i) {
                continue;
            }
            for &t in OperandType::ALL {
                if operation_operand_type_skip(&c.model, i, t) {
                    continue;
                }
                mutant(c, &format!("operand {i} set to type {t}"), |m| {
                    mutate_operand(&mut m.main.operands[i as usize], t)
                });
            }
        }
    }
}

#[test]
fn mutate_operation_type() {
    for c in cases() {
        for k in 0..c.model.main.operations.len() {
            for bad in [102, 9999, 10001] {
                mutant(c, &format!("operation {k} type {bad}"), |m| {
                    m.main.operations[k].r#type = OperationType(bad)
                });
            }
        }
    }
}

#[test]
fn mutate_operation_input_operand_index() {
    for c in cases() {
        let bad = c.model.main.operands.len() as u32;
        for (k, op) in c.model.main.operations.iter().enumerate() {
            for j in 0..op.inputs.len() {
                mutant(c, &format!("operation {k} input {j} -> {bad}"), |m| {
                    m.main.operations[k].inputs[j] = bad
                });
            }
        }
    }
}

#[test]
fn mutate_operation_output_operand_index() {
    for c in cases() {
        let bad = c.model.main.operands.len() as u32;
        for (k, op) in c.model.main.operations.iter().enumerate() {
            for j in 0..op.outputs.len() {
                mutant(c, &format!("operation {k} output {j} -> {bad}"), |m| {
                    m.main.operations[k].outputs[j] = bad
                });
            }
        }
    }
}

#[test]
fn mutate_operation_remove_write() {
    for c in cases() {
        let consumers = number_of_consumers(&c.model);
        for (k, op) in c.model.main.operations.iter().enumerate() {
            for (j, &out) in op.outputs.iter().enumerate() {
                if consumers[out as usize] == 0 {
                    continue;
                }
                mutant(c, &format!("operation {k} output {j} redirected"), |m| {
                    let mut o = m.main.operands[out as usize].clone();
                    if o.lifetime == L::SUBGRAPH_OUTPUT {
                        o.lifetime = L::TEMPORARY_VARIABLE;
                    }
                    o.number_of_consumers = 0;
                    m.main.operations[k].outputs[j] = m.main.operands.len() as u32;
                    m.main.operands.push(o);
                });
            }
        }
    }
}

/// VTS `removeValueAndDecrementGreaterValues`.
fn remove_and_shift(v: &mut Vec<u32>, value: u32) {
    v.retain(|&x| x != value);
    for x in v.iter_mut() {
        if *x > value {
            *x -= 1;
        }
    }
}

#[test]
fn remove_operand() {
    for c in cases() {
        let m0 = &c.model;
        let consumers = number_of_consumers(m0);
        for i in 0..m0.main.operands.len() as u32 {
            let written = m0.main.operations.iter().any(|op| op.outputs.contains(&i));
            // Removing an operand nobody reads or writes changes nothing.
            if consumers[i as usize] == 0 && !written {
                continue;
            }
            let skip = m0.main.operations.iter().any(|op| {
                matches!(
                    op.r#type,
                    OperationType::SPLIT
                        | OperationType::UNIDIRECTIONAL_SEQUENCE_LSTM
                        | OperationType::UNIDIRECTIONAL_SEQUENCE_RNN
                        | OperationType::BIDIRECTIONAL_SEQUENCE_LSTM
                        | OperationType::BIDIRECTIONAL_SEQUENCE_RNN
                ) && op.outputs.contains(&i)
            });
            if skip {
                continue;
            }
            mutant(c, &format!("operand {i} removed"), |m| {
                m.main.operands.remove(i as usize);
                for op in &mut m.main.operations {
                    remove_and_shift(&mut op.inputs, i);
                    remove_and_shift(&mut op.outputs, i);
                }
                remove_and_shift(&mut m.main.input_indexes, i);
                remove_and_shift(&mut m.main.output_indexes, i);
            });
        }
    }
}

#[test]
fn remove_operation() {
    for c in cases() {
        for k in 0..c.model.main.operations.len() {
            mutant(c, &format!("operation {k} removed"), |m| {
                let op = m.main.operations.remove(k);
                for i in op.inputs {
                    m.main.operands[i as usize].number_of_consumers -= 1;
                }
            });
        }
    }
}

/// VTS `removeOperationInputSkip`: inputs whose removal leaves a valid operation.
fn remove_operation_input_skip(op: &Operation, input: usize) -> bool {
    let n = op.inputs.len();
    match op.r#type {
        OperationType::CONCATENATION => n > 2 && input != n - 1,
        OperationType::DEPTHWISE_CONV_2D => (n == 12 && input == 11) || (n == 9 && input == 8),
        OperationType::CONV_2D
        | OperationType::AVERAGE_POOL_2D
        | OperationType::MAX_POOL_2D
        | OperationType::L2_POOL_2D => (n == 11 && input == 10) || (n == 8 && input == 7),
        OperationType::RESIZE_BILINEAR => n >= 4 && input >= 3,
        OperationType::RESIZE_NEAREST_NEIGHBOR => n >= 5 && input >= 3,
        OperationType::SPACE_TO_DEPTH
        | OperationType::DEPTH_TO_SPACE
        | OperationType::BATCH_TO_SPACE_ND => n == 3 && input == 2,
        OperationType::SPACE_TO_BATCH_ND => n == 4 && input == 3,
        OperationType::L2_NORMALIZATION => n == 2 && input == 1,
        OperationType::LOCAL_RESPONSE_NORMALIZATION => n == 6 && input == 5,
        OperationType::SOFTMAX => n == 3 && input == 2,
        _ => false,
    }
}

#[test]
fn remove_operation_input() {
    for c in cases() {
        for (k, op) in c.model.main.operations.iter().enumerate() {
            for j in 0..op.inputs.len() {
                if remove_operation_input_skip(op, j) {
                    continue;
                }
                mutant(c, &format!("operation {k} input {j} removed"), |m| {
                    let i = m.main.operations[k].inputs.remove(j);
                    m.main.operands[i as usize].number_of_consumers -= 1;
                });
            }
        }
    }
}

#[test]
fn remove_operation_output() {
    for c in cases() {
        for (k, op) in c.model.main.operations.iter().enumerate() {
            for j in 0..op.outputs.len() {
                mutant(c, &format!("operation {k} output {j} removed"), |m| {
                    m.main.operations[k].outputs.remove(j);
                });
            }
        }
    }
}

#[test]
fn add_operation_input() {
    for c in cases() {
        for (k, op) in c.model.main.operations.iter().enumerate() {
            let n = op.inputs.len();
            let skip = match op.r#type {
                OperationType::L2_NORMALIZATION => n == 1,
                OperationType::LOCAL_RESPONSE_NORMALIZATION => n == 5,
                OperationType::SOFTMAX => n == 2,
                OperationType::RESIZE_BILINEAR | OperationType::RESIZE_NEAREST_NEIGHBOR => n < 6,
                _ => false,
            };
            if skip {
                continue;
            }
            mutant(c, &format!("operation {k} gains an input"), |m| {
                let i = add_operand(m, L::SUBGRAPH_INPUT, 1);
                m.main.operations[k].inputs.push(i);
                m.main.input_indexes.push(i);
            });
        }
    }
}

#[test]
fn add_operation_output() {
    for c in cases() {
        for k in 0..c.model.main.operations.len() {
            mutant(c, &format!("operation {k} gains an output"), |m| {
                let i = add_operand(m, L::SUBGRAPH_OUTPUT, 0);
                m.main.operations[k].outputs.push(i);
                m.main.output_indexes.push(i);
            });
        }
    }
}

#[test]
fn mutate_preference_and_priority() {
    for c in cases() {
        for p in [-1, 3] {
            expect_invalid_prepare(&c.model, ExecutionPreference(p), Priority::MEDIUM);
            expect_invalid_prepare(
                &c.model,
                ExecutionPreference::FAST_SINGLE_ANSWER,
                Priority(p),
            );
        }
    }
}

/// Every HAL 1.x corpus model (V1_0 … V1_3, V1_3_cts_only) that is not expected to fail
/// is a valid HAL 1.3 model.
#[test]
fn all_hal_corpora_are_valid() {
    for f in ["V1_1", "V1_2", "V1_3", "V1_3_cts_only"] {
        let path = corpus_dir().join(format!("{f}.jsonl.gz"));
        for (line, c) in corpus::open_corpus(&path).expect("open corpus") {
            let c = c.unwrap_or_else(|e| panic!("{f}:{line}: {e}"));
            if c.expect_failure {
                continue;
            }
            if let Err(e) = validate_model(&c.model) {
                panic!("{f} {}: {e}", c.name);
            }
        }
    }
}
