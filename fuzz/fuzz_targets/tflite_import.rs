//! Fuzz the TFLite importer (`tflite::import`) with arbitrary bytes, seeded with the
//! shipped models (`models/*.tflite`; `cargo fuzz run tflite_import models/`): a hostile
//! file gives an error, never a panic or a hang, and memory stays bounded by the file (the
//! verifier's table and depth limits; no length read from the file allocates before it is
//! checked against the file's size). A model that imports must also pass the HAL's
//! validation, as the importer promises; so must each operator imported alone, as the
//! partitioner imports it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vnpu_driver::hal::validate_model;
use vnpu_driver::tflite::{import, import_ops, Graph};

fuzz_target!(|data: &[u8]| {
    for partial in [false, true] {
        if let Ok(m) = import(data, partial) {
            assert!(validate_model(&m.model).is_ok());
            assert_eq!(m.inputs.len(), m.model.main.input_indexes.len());
            assert_eq!(m.outputs.len(), m.model.main.output_indexes.len());
        }
    }
    if let Ok(g) = Graph::read(data) {
        for k in 0..g.op_count().min(64) {
            if let Ok(m) = import_ops(&g, &[k]) {
                assert!(validate_model(&m.model).is_ok());
                assert_eq!(m.input_tensors.len(), m.inputs.len());
                assert_eq!(m.output_tensors.len(), m.outputs.len());
            }
        }
    }
});
