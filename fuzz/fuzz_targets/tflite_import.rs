//! Fuzz the TFLite importer (`tflite::import`) with arbitrary bytes, seeded with the
//! shipped models (`models/*.tflite`; `scripts/fuzz.sh` seeds them): a hostile file gives
//! an error, never a panic or a hang, and memory stays bounded by the file (the verifier's
//! table and depth limits; no length read from the file allocates before it is checked
//! against the file's size). A model that imports must also pass the HAL's validation at
//! its level (1.3, or a later one with PACK or DENSIFY), as the importer promises, and `vnpu run`'s sizing of its inputs and outputs
//! (`run::tensor_bytes`) must refuse what the device cannot take instead of allocating it.
//! So must each operator imported alone, as the partitioner imports it.
//!
//! Shape mutations: the input is also read as 8 bytes that say which dimension of which
//! tensor becomes what (0, -1, 2^16, 2^20, i32::MAX, i32::MIN or any value), then a model
//! that gets that dimension (the seeds hold each model whole and behind such a header).
#![no_main]

use libfuzzer_sys::fuzz_target;
use vnpu_driver::tflite::schema::{slot, Table};
use vnpu_driver::tflite::{import, import_ops, run, Graph};
use vnpu_driver::validate::validate_model_at;

/// The largest input or output the target lets `run` allocate (the bound is checked by
/// `tensor_bytes` for anything larger).
const ALLOCATE_UP_TO: usize = 1 << 20;

fn check(model: &[u8]) {
    for partial in [false, true] {
        let Ok(m) = import(model, partial) else {
            continue;
        };
        assert!(validate_model_at(&m.model, m.level).is_ok());
        assert_eq!(m.inputs.len(), m.model.main.input_indexes.len());
        assert_eq!(m.outputs.len(), m.model.main.output_indexes.len());
        let sizes: Vec<_> = m.inputs.iter().chain(&m.outputs).map(run::tensor_bytes).collect();
        if sizes.iter().all(|s| s.as_ref().is_ok_and(|&n| n <= ALLOCATE_UP_TO)) {
            let arrays = run::random_inputs(&m.inputs, 1).expect("sizes checked");
            run::request(&m, &arrays).expect("a request for checked sizes");
        }
    }
}

/// `model` with one dimension of one tensor of its first subgraph set as `head` says.
fn with_dimension(model: &[u8], head: &[u8; 8]) -> Option<Vec<u8>> {
    let root = Table::root(model).ok()?;
    let subgraph = root.tables(slot::model::SUBGRAPHS).ok()?.into_iter().next()?;
    let tensors = subgraph.tables(slot::subgraph::TENSORS).ok()?;
    let tensor = tensors.get(usize::from(head[0]) % tensors.len().max(1))?;
    // The shape vector's place in the file (a vector of i32; `bytes` gives its start).
    let shape = tensor.bytes(slot::tensor::SHAPE).ok()?;
    if shape.is_empty() {
        return None;
    }
    let dim = usize::from(head[1]) % shape.len();
    let at = (shape.as_ptr() as usize).checked_sub(model.as_ptr() as usize)? + 4 * dim;
    let value = match head[2] % 8 {
        0 => 0,
        1 => -1,
        2 => 1 << 16,
        3 => 1 << 20,
        4 => i32::MAX,
        5 => i32::MIN,
        _ => i32::from_le_bytes([head[4], head[5], head[6], head[7]]),
    };
    let mut mutated = model.to_vec();
    mutated.get_mut(at..at + 4)?.copy_from_slice(&value.to_le_bytes());
    Some(mutated)
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some((head, model)) = data.split_first_chunk::<8>() {
        if let Some(mutated) = with_dimension(model, head) {
            check(&mutated);
        }
    }
    if let Ok(g) = Graph::read(data) {
        for k in 0..g.op_count().min(64) {
            if let Ok(m) = import_ops(&g, &[k]) {
                assert!(validate_model_at(&m.model, m.level).is_ok());
                assert_eq!(m.input_tensors.len(), m.inputs.len());
                assert_eq!(m.output_tensors.len(), m.outputs.len());
            }
        }
    }
});
