//! Port of the VTS BasicTests (1.0-1.3): status, capabilities, identity, cache counts,
//! cycles.

mod common;

use common::{device, prepare};
use vnpu_driver::device::IDevice;
use vnpu_driver::hal::{
    DataLocation, DeviceStatus, DeviceType, ErrorStatus, Model, Operand, OperandLifeTime,
    OperandType, Operation, OperationType, Subgraph, MAX_NUMBER_OF_CACHE_FILES,
};

#[test]
fn status_test() {
    assert_eq!(device().get_status(), DeviceStatus::Available);
}

#[test]
fn get_capabilities_test() {
    let (status, caps) = device().get_capabilities_1_3();
    assert_eq!(status, ErrorStatus::None);
    let perf = caps.operand_performance;
    assert!(!perf.is_empty());
    assert!(
        perf.windows(2).all(|w| w[0].r#type.0 < w[1].r#type.0),
        "sorted by type"
    );
    assert!(perf.iter().all(|p| p.r#type != OperandType::SUBGRAPH));
    assert!(perf
        .iter()
        .all(|p| p.info.exec_time > 0.0 && p.info.power_usage > 0.0));
    let f32_perf = perf
        .iter()
        .find(|p| p.r#type == OperandType::TENSOR_FLOAT32)
        .unwrap();
    assert!(
        f32_perf.info.exec_time < 1.0,
        "faster than the CPU yardstick"
    );
    assert!(caps.relaxed_float32_to_float16_performance_tensor.exec_time > 0.0);
}

#[test]
fn identity() {
    let d = device();
    assert_eq!(d.get_type(), (ErrorStatus::None, DeviceType::Accelerator));
    let (status, version) = d.get_version_string();
    assert_eq!(status, ErrorStatus::None);
    assert!(!version.is_empty());
    let name = d.name();
    let (vendor, rest) = name.split_once('-').expect("name has the form vendor-x");
    assert!(!vendor.is_empty() && !rest.is_empty());
    // VTS 1.2: every extension name is lowercase [a-z0-9_.] with a '.', listed once.
    let (status, extensions) = d.get_supported_extensions();
    assert_eq!(status, ErrorStatus::None);
    assert!(!extensions.is_empty());
    for (i, e) in extensions.iter().enumerate() {
        assert!(e.name.contains('.'), "{}", e.name);
        assert!(
            e.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.'),
            "{}",
            e.name
        );
        assert!(extensions[..i].iter().all(|o| o.name != e.name));
    }
}

#[test]
fn get_number_of_cache_files_needed() {
    let (status, model, data) = device().get_number_of_cache_files_needed();
    assert_eq!(status, ErrorStatus::None);
    assert!(
        model as usize <= MAX_NUMBER_OF_CACHE_FILES && data as usize <= MAX_NUMBER_OF_CACHE_FILES
    );
}

fn tensor(lifetime: OperandLifeTime, consumers: u32) -> Operand {
    Operand {
        r#type: OperandType::TENSOR_FLOAT32,
        dimensions: vec![1],
        number_of_consumers: consumers,
        lifetime,
        ..Operand::default()
    }
}

/// ADD(a, t1) -> t0, ADD(t0, b) -> t1: a cycle through two temporaries.
#[test]
fn cycle_test() {
    let act = Operand {
        r#type: OperandType::INT32,
        number_of_consumers: 2,
        lifetime: OperandLifeTime::CONSTANT_COPY,
        location: DataLocation {
            pool_index: 0,
            offset: 0,
            length: 4,
        },
        ..Operand::default()
    };
    let model = Model {
        main: Subgraph {
            operands: vec![
                tensor(OperandLifeTime::SUBGRAPH_INPUT, 1),
                tensor(OperandLifeTime::SUBGRAPH_INPUT, 1),
                tensor(OperandLifeTime::TEMPORARY_VARIABLE, 1),
                tensor(OperandLifeTime::TEMPORARY_VARIABLE, 1),
                act,
                tensor(OperandLifeTime::SUBGRAPH_OUTPUT, 0),
            ],
            operations: vec![
                Operation {
                    r#type: OperationType::ADD,
                    inputs: vec![0, 3, 4],
                    outputs: vec![2],
                },
                Operation {
                    r#type: OperationType::ADD,
                    inputs: vec![2, 1, 4],
                    outputs: vec![3],
                },
                Operation {
                    r#type: OperationType::ADD,
                    inputs: vec![2, 3, 4],
                    outputs: vec![5],
                },
            ],
            input_indexes: vec![0, 1],
            output_indexes: vec![5],
        },
        operand_values: vec![0; 4],
        ..Model::default()
    };
    let (status, supported) = device().get_supported_operations_1_3(&model);
    assert_eq!(status, ErrorStatus::InvalidArgument);
    assert!(supported.is_empty());
    assert_eq!(prepare(&model).0, ErrorStatus::InvalidArgument);
}
