//! Fuzz the LiteRT dispatch library's byte code decoder (`vnpu_delegate::bytecode::decode`)
//! with arbitrary bytes: hostile byte code gives an error, never a panic or a hang, and
//! memory stays bounded by the input. What decodes is a valid model (at some level: 1.3, or
//! a later one for a partition with AIDL V2's PACK, say) whose input and
//! output maps name only its own inputs and outputs, and encodes again to bytes that
//! decode to the same maps.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vnpu_delegate::bytecode::{decode, encode};
use vnpu_driver::tflite::model_level;

fuzz_target!(|data: &[u8]| {
    let Ok(code) = decode(data) else {
        return;
    };
    let m = &code.model;
    assert!(model_level(m).is_ok());
    let (n_in, n_out) = (m.main.input_indexes.len(), m.main.output_indexes.len());
    assert!(code.inputs.iter().flatten().all(|&k| (k as usize) < n_in));
    assert!(code.outputs.iter().all(|&k| (k as usize) < n_out));
    let again = encode(m, &code.inputs, &code.outputs).expect("a decoded model encodes");
    let back = decode(&again).expect("re-encoded byte code decodes");
    assert_eq!(back.inputs, code.inputs);
    assert_eq!(back.outputs, code.outputs);
});
