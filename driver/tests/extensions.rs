//! Vendor extensions (issue 12): the registry as getSupportedExtensions reports it, valid
//! extension models run on the device with their results checked against independent
//! computations, every validation failure (INVALID_ARGUMENT from getSupportedOperations and
//! from prepareModel), getSupportedOperations on a model mixing extension and standard
//! operations, the fused GELU against the unfused NNAPI chain (results and modelled device
//! time), and the example-extension case files through `vnpu run`.

mod common;

use vnpu_driver::hal::builder::ModelBuilder;

use std::process::Command;

use common::{device, prepare};
use proptest::prelude::*;
use vnpu_driver::conformance::corpus::{parse_case, TestBuffer, TestCase, TestOutput};
use vnpu_driver::conformance::{run_case, CaseReport, Verdict};
use vnpu_driver::device::IDevice;
use vnpu_driver::device::{PrepareArgs, PrepareFromCacheArgs};
use vnpu_driver::extensions::encode_type;
use vnpu_driver::extensions::fibonacci::Quant64Params;
use vnpu_driver::extensions::fused::gelu_models;
use vnpu_driver::hal::{
    DataLocation, ErrorStatus, ExtensionNameAndPrefix, ExtraParams, Model, OperandLifeTime,
    OperandType, OperationType, SymmPerChannelQuantParams, ValidationKind,
};
use vnpu_driver::validate::validate_model;

const FIB: &str = "com.example.fibonacci";
const FUSED: &str = "dev.vnpu.fused";
const LITERT: &str = "dev.vnpu.litert";
/// Types within "com.example.fibonacci".
const INT64: u16 = 0;
const QUANT64: u16 = 1;
const FIBONACCI: u16 = 0;
/// VNPU_GELU within "dev.vnpu.fused".
const GELU: u16 = 0;
/// VNPU_RESIZE_BILINEAR_INTEGER within "dev.vnpu.litert".
const RESIZE_INTEGER: u16 = 0;

fn ext_operand(prefix: u16, t: u16) -> OperandType {
    OperandType(encode_type(prefix, t))
}

fn ext_op(prefix: u16, t: u16) -> OperationType {
    OperationType(encode_type(prefix, t))
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A case under construction: the model, and its inputs' values and outputs' expected
/// values.
#[derive(Default)]
struct Builder {
    model: ModelBuilder,
    inputs: Vec<TestBuffer>,
    outputs: Vec<TestOutput>,
    extensions: Vec<ExtensionNameAndPrefix>,
}

impl Builder {
    fn new(extensions: &[(&str, u16)]) -> Builder {
        Builder {
            extensions: extensions
                .iter()
                .map(|&(name, prefix)| ExtensionNameAndPrefix {
                    name: name.into(),
                    prefix,
                })
                .collect(),
            ..Builder::default()
        }
    }

    fn constant(&mut self, t: OperandType, dims: &[u32], bytes: &[u8]) -> u32 {
        self.model.constant(t, dims, bytes)
    }

    fn input(&mut self, t: OperandType, dims: &[u32], data: Vec<u8>) -> u32 {
        let i = self.model.input(t, dims);
        self.inputs.push(TestBuffer {
            operand: i,
            dimensions: dims.to_vec(),
            data,
            has_no_value: false,
        });
        i
    }

    fn output(&mut self, t: OperandType, dims: &[u32], expected: Vec<u8>) -> u32 {
        let i = self.model.output(t, dims);
        self.outputs.push(TestOutput {
            operand: i,
            dimensions: dims.to_vec(),
            data: expected,
            ignored: false,
        });
        i
    }

    fn temp(&mut self, t: OperandType, dims: &[u32]) -> u32 {
        self.model.temp(t, dims)
    }

    fn op(&mut self, t: OperationType, inputs: &[u32], outputs: &[u32]) {
        self.model.op(t, inputs, outputs);
    }

    fn extra_params(&mut self, operand: u32, p: ExtraParams) {
        if let Some(o) = self.model.operand_mut(operand) {
            o.extra_params = p;
        }
    }

    fn case(self, name: &str) -> TestCase {
        TestCase {
            name: name.into(),
            spec: "extensions".into(),
            min_hal_version: "V1_2".into(),
            model: self.model.build(self.extensions),
            expect_failure: false,
            multinomial_tolerance: 0.0,
            inputs: self.inputs,
            outputs: self.outputs,
            relaxed: false,
        }
    }
}

/// The first `n` Fibonacci numbers (u64, wrapping), computed here independently.
fn fibonacci(n: usize) -> Vec<u64> {
    let mut v: Vec<u64> = Vec::with_capacity(n);
    for i in 0..n {
        let next = if i < 2 {
            1
        } else {
            v[i - 1].wrapping_add(v[i - 2])
        };
        v.push(next);
    }
    v
}

/// n (an EXAMPLE_INT64 model input) → EXAMPLE_TENSOR_QUANT64_ASYMM [n] with `params`.
fn fibonacci_quant64(prefix: u16, n: i64, params: Quant64Params) -> TestCase {
    let mut b = Builder::new(&[(FIB, prefix)]);
    let input = b.input(ext_operand(prefix, INT64), &[], n.to_le_bytes().to_vec());
    let expected: Vec<u8> = fibonacci(n as usize)
        .iter()
        .flat_map(|&f| ((f as f64 / params.scale + params.zero_point as f64) as u64).to_le_bytes())
        .collect();
    let out = b.output(ext_operand(prefix, QUANT64), &[n as u32], expected);
    b.extra_params(out, ExtraParams::Extension(params.to_bytes().to_vec()));
    b.op(ext_op(prefix, FIBONACCI), &[input], &[out]);
    b.case("fibonacci_quant64")
}

/// Runs a case that must pass; returns its report.
fn run_passing(case: &TestCase) -> CaseReport {
    let report = run_case(device().as_ref(), case);
    assert_eq!(report.verdict, Verdict::Pass, "{}", case.name);
    report
}

/// getSupportedOperations and prepareModel both say INVALID_ARGUMENT.
fn assert_invalid(model: &Model, what: &str) {
    let (status, supported) = device().get_supported_operations_1_3(model);
    assert_eq!(
        status,
        ErrorStatus::InvalidArgument,
        "{what}: getSupportedOperations"
    );
    assert!(supported.is_empty(), "{what}");
    let (status, prepared) = prepare(model);
    assert_eq!(status, ErrorStatus::InvalidArgument, "{what}: prepareModel");
    assert!(prepared.is_none(), "{what}");
}

#[test]
fn get_supported_extensions_lists_each_extension_with_its_operand_types() {
    let (status, exts) = device().get_supported_extensions();
    assert_eq!(status, ErrorStatus::None);
    let names: Vec<&str> = exts.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, [FIB, FUSED, LITERT]);
    let fib = &exts[0].operand_types;
    assert_eq!(fib.len(), 2);
    assert_eq!(
        (fib[0].r#type, fib[0].is_tensor, fib[0].byte_size),
        (INT64, false, 8)
    );
    assert_eq!(
        (fib[1].r#type, fib[1].is_tensor, fib[1].byte_size),
        (QUANT64, true, 8)
    );
    assert!(exts[1].operand_types.is_empty());
    assert!(exts[2].operand_types.is_empty());
}

/// VNPU_RESIZE_BILINEAR_INTEGER of an int8 [1, 1, 2, 1] tensor to width 4 with half-pixel
/// centres, the model naming the extension with `prefix`; the output's quantisation is
/// `out_quant` (the input's is (0.5, 3)).
fn resize_integer(prefix: u16, out_quant: (f32, i32), expected: &[i8]) -> TestCase {
    let mut b = Builder::new(&[(LITERT, prefix)]);
    let t = OperandType::TENSOR_QUANT8_ASYMM_SIGNED;
    let x = b.input(t, &[1, 1, 2, 1], vec![(-100i8) as u8, 50]);
    let bytes: Vec<u8> = expected.iter().map(|&v| v as u8).collect();
    let out = b.output(t, &[1, 1, 4, 1], bytes);
    for (o, (scale, zero_point)) in [(x, (0.5, 3)), (out, out_quant)] {
        let operand = b.model.operand_mut(o).unwrap();
        operand.scale = scale;
        operand.zero_point = zero_point;
    }
    let int = |b: &mut Builder, v: i32| b.constant(OperandType::INT32, &[], &v.to_le_bytes());
    let (w, h) = (int(&mut b, 4), int(&mut b, 1));
    let no = b.constant(OperandType::BOOL, &[], &[0]);
    let yes = b.constant(OperandType::BOOL, &[], &[1]);
    b.op(ext_op(prefix, RESIZE_INTEGER), &[x, w, h, no, yes], &[out]);
    b.case("litert_resize_bilinear_integer")
}

#[test]
fn litert_resize_bilinear_rounds_in_fixed_point_under_any_prefix() {
    // Sources at -0.25 (clamped), 0.25, 0.75 and 1.25 (clamped): -100, 0.75 * -100 + 0.25
    // * 50 = -62.5 and 0.25 * -100 + 0.75 * 50 = 12.5, rounded half away from zero as
    // LiteRT does (NNAPI's RESIZE_BILINEAR truncates them to -62 and 12), then 50.
    for prefix in [1, 9, 300] {
        run_passing(&resize_integer(prefix, (0.5, 3), &[-100, -63, 13, 50]));
    }
    // The output keeps the input's quantisation.
    assert_invalid(
        &resize_integer(9, (0.25, 3), &[0; 4]).model,
        "a requantising resize",
    );
}

#[test]
fn fibonacci_quant64_runs_on_the_device_under_any_prefix() {
    let params = Quant64Params {
        scale: 0.25,
        zero_point: 3,
    };
    // 0xFFFF: type values that are negative as i32.
    for prefix in [1u16, 2, 7, 0x1234, 0x8000, 0xFFFF] {
        for n in [1i64, 2, 3, 17, 60] {
            let case = fibonacci_quant64(prefix, n, params);
            let report = run_passing(&case);
            let want: Vec<f64> = fibonacci(n as usize)
                .iter()
                .map(|&f| (f * 4 + 3) as f64)
                .collect();
            assert_eq!(report.outputs[0].actual, want, "prefix {prefix} n {n}");
        }
    }
}

#[test]
fn fibonacci_float32_truncates_a_float_n() {
    let mut b = Builder::new(&[(FIB, 40)]);
    let n = b.input(OperandType::TENSOR_FLOAT32, &[1], f32_bytes(&[7.9]));
    let want = [1.0f32, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0];
    let out = b.output(OperandType::TENSOR_FLOAT32, &[7], f32_bytes(&want));
    b.op(ext_op(40, FIBONACCI), &[n], &[out]);
    let report = run_passing(&b.case("fibonacci_float32"));
    let got: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
    assert_eq!(report.outputs[0].actual, got);
}

fn gelu_erf(x: f64) -> f64 {
    // Reference values of 0.5 x (1 + erf(x / sqrt 2)) (to 16 digits).
    match x {
        -3.0 => -0.004_049_694_095_645_746,
        -0.5 => -0.154_268_769_362_993_4,
        0.0 => 0.0,
        1.0 => 0.841_344_746_068_542_9,
        2.0 => 1.954_499_736_103_641_6,
        _ => unreachable!(),
    }
}

fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044_715 * x.powi(3))).tanh())
}

#[test]
fn gelu_exact_and_tanh_forms_give_the_reference_values() {
    let xs = [-3.0f32, -0.5, 0.0, 1.0, 2.0];
    for approximate in [false, true] {
        let mut b = Builder::new(&[(FUSED, 9)]);
        let x = b.input(OperandType::TENSOR_FLOAT32, &[5], f32_bytes(&xs));
        let flag = b.constant(OperandType::BOOL, &[], &[u8::from(approximate)]);
        let want: Vec<f32> = xs
            .iter()
            .map(|&v| {
                let v = f64::from(v);
                (if approximate {
                    gelu_tanh(v)
                } else {
                    gelu_erf(v)
                }) as f32
            })
            .collect();
        let out = b.output(OperandType::TENSOR_FLOAT32, &[5], f32_bytes(&want));
        b.op(ext_op(9, GELU), &[x, flag], &[out]);
        let report = run_passing(&b.case("gelu"));
        for (g, w) in report.outputs[0].actual.iter().zip(&want) {
            assert!((g - f64::from(*w)).abs() <= 1e-6, "{g} vs {w}");
        }
    }
}

/// `x` of `len` values spread over [-6, 6].
fn ramp(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| -6.0 + 12.0 * i as f32 / len.max(2) as f32)
        .collect()
}

/// The fused GELU and the unfused NNAPI chain (`extensions::fused::gelu_models`) on the
/// same input, each checked against the tanh form evaluated here; both reports.
fn fused_and_unfused(dims: &[u32]) -> (CaseReport, CaseReport) {
    let len = dims.iter().product::<u32>() as usize;
    let xs = ramp(len);
    let k = (2.0f32 / std::f32::consts::PI).sqrt();
    let want: Vec<f32> = xs
        .iter()
        .map(|&x| x * ((x + x * x * x * 0.044_715) * k).tanh().mul_add(0.5, 0.5))
        .collect();
    let (fused, unfused) = gelu_models(dims, 3);
    let case = |name: &str, model: Model| TestCase {
        name: name.into(),
        spec: "extensions".into(),
        min_hal_version: "V1_2".into(),
        inputs: vec![TestBuffer {
            operand: model.main.input_indexes[0],
            dimensions: dims.to_vec(),
            data: f32_bytes(&xs),
            has_no_value: false,
        }],
        outputs: vec![TestOutput {
            operand: model.main.output_indexes[0],
            dimensions: dims.to_vec(),
            data: f32_bytes(&want),
            ignored: false,
        }],
        model,
        expect_failure: false,
        multinomial_tolerance: 0.0,
        relaxed: false,
    };
    assert_eq!(fused.main.operations.len(), 1);
    assert_eq!(unfused.main.operations.len(), 9);
    (
        run_passing(&case("gelu_fused", fused)),
        run_passing(&case("gelu_unfused", unfused)),
    )
}

#[test]
fn fused_gelu_matches_the_unfused_chain_and_costs_less_device_time() {
    let (fused, unfused) = fused_and_unfused(&[4, 96]);
    for (a, b) in fused.outputs[0]
        .actual
        .iter()
        .zip(&unfused.outputs[0].actual)
    {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
    }
    // Large enough for the modelled time to show in microseconds: one kernel of 4 element
    // passes against nine kernels of 22 passes in all, the same DMA in and out of the
    // device around them (which takes about half of the fused total).
    let (fused, unfused) = fused_and_unfused(&[1, 64, 64, 32]);
    let (f, u) = (fused.timing.time_on_device, unfused.timing.time_on_device);
    assert!(f != u64::MAX && u != u64::MAX, "timing measured");
    assert!(f > 0 && f * 3 < u * 2, "fused {f} us, unfused {u} us");
}

#[test]
fn two_extensions_and_standard_operations_in_one_model() {
    // x + fibonacci(6) (float32), then GELU: extension → standard → extension.
    let mut b = Builder::new(&[(FUSED, 0x0101), (FIB, 0x0202)]);
    let f = OperandType::TENSOR_FLOAT32;
    let xs = [0.5f32, -1.0, -4.0, 0.25, -9.0, -7.5];
    let x = b.input(f, &[6], f32_bytes(&xs));
    let n = b.constant(ext_operand(0x0202, INT64), &[], &6i64.to_le_bytes());
    let fib = b.temp(f, &[6]);
    b.op(ext_op(0x0202, FIBONACCI), &[n], &[fib]);
    let none = b.constant(OperandType::INT32, &[], &0i32.to_le_bytes());
    let sum = b.temp(f, &[6]);
    b.op(OperationType::ADD, &[x, fib, none], &[sum]);
    let flag = b.constant(OperandType::BOOL, &[], &[1]);
    let want: Vec<f32> = xs
        .iter()
        .zip(fibonacci(6))
        .map(|(&x, f)| gelu_tanh(f64::from(x + f as f32)) as f32)
        .collect();
    let out = b.output(f, &[6], f32_bytes(&want));
    b.op(ext_op(0x0101, GELU), &[sum, flag], &[out]);
    let case = b.case("mixed");
    let (status, supported) = device().get_supported_operations_1_3(&case.model);
    assert_eq!((status, supported), (ErrorStatus::None, vec![true; 3]));
    run_passing(&case);
}

#[test]
fn get_supported_operations_on_a_model_mixing_extension_and_standard_operations() {
    // FIBONACCI, ADD, GELU, and an operation of an extension the driver does not have.
    let mut b = Builder::new(&[(FIB, 5), ("com.other.vendor", 6), (FUSED, 8)]);
    let f = OperandType::TENSOR_FLOAT32;
    let n = b.constant(ext_operand(5, INT64), &[], &4i64.to_le_bytes());
    let fib = b.temp(f, &[4]);
    b.op(ext_op(5, FIBONACCI), &[n], &[fib]);
    let x = b.input(f, &[4], f32_bytes(&[0.0; 4]));
    let none = b.constant(OperandType::INT32, &[], &0i32.to_le_bytes());
    let sum = b.temp(f, &[4]);
    b.op(OperationType::ADD, &[x, fib, none], &[sum]);
    let flag = b.constant(OperandType::BOOL, &[], &[0]);
    let g = b.temp(f, &[4]);
    b.op(ext_op(8, GELU), &[sum, flag], &[g]);
    let out = b.output(f, &[4], Vec::new());
    b.op(ext_op(6, 3), &[g], &[out]);
    let case = b.case("mixed_support");
    validate_model(&case.model).expect("a valid model");
    let (status, supported) = device().get_supported_operations_1_3(&case.model);
    assert_eq!(status, ErrorStatus::None);
    assert_eq!(supported, [true, true, true, false]);
    // Not fully supported: preparation refuses it.
    assert_eq!(prepare(&case.model).0, ErrorStatus::InvalidArgument);
}

/// A valid FIBONACCI model (prefix 7, n a constant 5, QUANT64 output) to mutate.
fn fib_model() -> Model {
    let mut b = Builder::new(&[(FIB, 7)]);
    let n = b.constant(ext_operand(7, INT64), &[], &5i64.to_le_bytes());
    let out = b.output(ext_operand(7, QUANT64), &[5], Vec::new());
    b.extra_params(
        out,
        ExtraParams::Extension(
            Quant64Params {
                scale: 1.0,
                zero_point: 0,
            }
            .to_bytes()
            .to_vec(),
        ),
    );
    b.op(ext_op(7, FIBONACCI), &[n], &[out]);
    b.case("fib").model
}

/// A valid GELU model (prefix 9, [2, 3] float32, approximate a constant) to mutate.
fn gelu_model() -> Model {
    let mut b = Builder::new(&[(FUSED, 9)]);
    let x = b.input(OperandType::TENSOR_FLOAT32, &[2, 3], Vec::new());
    let flag = b.constant(OperandType::BOOL, &[], &[0]);
    let out = b.output(OperandType::TENSOR_FLOAT32, &[2, 3], Vec::new());
    b.op(ext_op(9, GELU), &[x, flag], &[out]);
    b.case("gelu").model
}

type Mutation = Box<dyn Fn(&mut Model)>;

#[test]
fn every_validation_failure_is_invalid_argument() {
    let params = |m: &mut Model, p: ExtraParams| m.main.operands[1].extra_params = p;
    let fib: Vec<(&str, ValidationKind, Mutation)> = vec![
        (
            "unknown prefix (operand)",
            ValidationKind::Extension,
            Box::new(|m| m.main.operands[0].r#type = ext_operand(8, INT64)),
        ),
        (
            "unknown prefix (operation)",
            ValidationKind::Extension,
            Box::new(|m| m.main.operations[0].r#type = ext_op(8, FIBONACCI)),
        ),
        (
            "no prefix map at all",
            ValidationKind::Extension,
            Box::new(|m| m.extension_name_to_prefix.clear()),
        ),
        (
            "one prefix for two extensions",
            ValidationKind::Extension,
            Box::new(|m| {
                m.extension_name_to_prefix.push(ExtensionNameAndPrefix {
                    name: FUSED.into(),
                    prefix: 7,
                })
            }),
        ),
        (
            "one extension under two prefixes",
            ValidationKind::Extension,
            Box::new(|m| {
                m.extension_name_to_prefix.push(ExtensionNameAndPrefix {
                    name: FIB.into(),
                    prefix: 8,
                })
            }),
        ),
        (
            "prefix 0",
            ValidationKind::Extension,
            Box::new(|m| {
                m.extension_name_to_prefix.push(ExtensionNameAndPrefix {
                    name: FUSED.into(),
                    prefix: 0,
                })
            }),
        ),
        (
            "upper-case name",
            ValidationKind::Extension,
            Box::new(|m| {
                m.extension_name_to_prefix.push(ExtensionNameAndPrefix {
                    name: "com.Example.x".into(),
                    prefix: 9,
                })
            }),
        ),
        (
            "name without a dot",
            ValidationKind::Extension,
            Box::new(|m| {
                m.extension_name_to_prefix.push(ExtensionNameAndPrefix {
                    name: "fibonacci".into(),
                    prefix: 9,
                })
            }),
        ),
        (
            "name not starting with a reverse domain",
            ValidationKind::Extension,
            Box::new(|m| {
                m.extension_name_to_prefix.push(ExtensionNameAndPrefix {
                    name: "9com.x".into(),
                    prefix: 9,
                })
            }),
        ),
        (
            "undeclared operand type",
            ValidationKind::Operand,
            Box::new(|m| m.main.operands[1].r#type = ext_operand(7, 5)),
        ),
        (
            "undeclared operation type",
            ValidationKind::Operation,
            Box::new(|m| m.main.operations[0].r#type = ext_op(7, 1)),
        ),
        (
            "per-channel parameters on an extension operand",
            ValidationKind::Operand,
            Box::new(move |m| {
                params(
                    m,
                    ExtraParams::ChannelQuant(SymmPerChannelQuantParams {
                        scales: vec![1.0; 5],
                        channel_dim: 0,
                    }),
                )
            }),
        ),
        (
            "QUANT64 without its parameters",
            ValidationKind::Operand,
            Box::new(move |m| params(m, ExtraParams::None)),
        ),
        (
            "QUANT64 parameters of the wrong size",
            ValidationKind::Operand,
            Box::new(move |m| params(m, ExtraParams::Extension(vec![0; 15]))),
        ),
        (
            "QUANT64 scale 0",
            ValidationKind::Operand,
            Box::new(move |m| params(m, ExtraParams::Extension(vec![0; 16]))),
        ),
        (
            "QUANT64 scale NaN",
            ValidationKind::Operand,
            Box::new(move |m| {
                let mut b = f64::NAN.to_le_bytes().to_vec();
                b.extend_from_slice(&[0; 8]);
                params(m, ExtraParams::Extension(b))
            }),
        ),
        (
            "EXAMPLE_INT64 with extension parameters",
            ValidationKind::Operand,
            Box::new(|m| m.main.operands[0].extra_params = ExtraParams::Extension(vec![1])),
        ),
        (
            "extension parameters on a standard operand",
            ValidationKind::Operand,
            Box::new(|m| {
                m.main.operands[1].r#type = OperandType::TENSOR_FLOAT32;
                m.main.operands[1].extra_params = ExtraParams::Extension(vec![0; 16]);
            }),
        ),
        (
            "extension operand with a scale",
            ValidationKind::Operand,
            Box::new(|m| m.main.operands[0].scale = 0.5),
        ),
        (
            "extension operand with a zero point",
            ValidationKind::Operand,
            Box::new(|m| m.main.operands[0].zero_point = 1),
        ),
        (
            "extension scalar with a rank",
            ValidationKind::Operand,
            Box::new(|m| m.main.operands[0].dimensions = vec![1]),
        ),
        (
            "extension constant of the wrong length",
            ValidationKind::Operand,
            Box::new(|m| m.main.operands[0].location.length = 4),
        ),
        (
            "FIBONACCI's validator: a 2-D output",
            ValidationKind::Signature,
            Box::new(|m| m.main.operands[1].dimensions = vec![5, 1]),
        ),
        (
            "FIBONACCI's validator: a float n of two elements",
            ValidationKind::Signature,
            Box::new(|m| {
                let n = &mut m.main.operands[0];
                n.r#type = OperandType::TENSOR_FLOAT32;
                n.dimensions = vec![2];
                n.location.length = 8;
            }),
        ),
        (
            "FIBONACCI's signature: an int32 output",
            ValidationKind::Signature,
            Box::new(|m| {
                m.main.operands[1].r#type = OperandType::TENSOR_INT32;
                m.main.operands[1].extra_params = ExtraParams::None;
            }),
        ),
        (
            "OEM_OPERATION",
            ValidationKind::Operation,
            Box::new(|m| m.main.operations[0].r#type = OperationType::OEM_OPERATION),
        ),
        (
            "OEM operand",
            ValidationKind::Operand,
            Box::new(|m| {
                m.main.operands[1].r#type = OperandType::OEM;
                m.main.operands[1].dimensions.clear();
                m.main.operands[1].extra_params = ExtraParams::None;
            }),
        ),
        (
            "TENSOR_OEM_BYTE operand",
            ValidationKind::Operand,
            Box::new(|m| {
                m.main.operands[1].r#type = OperandType::TENSOR_OEM_BYTE;
                m.main.operands[1].extra_params = ExtraParams::None;
            }),
        ),
    ];
    let gelu: Vec<(&str, ValidationKind, Mutation)> = vec![
        (
            "GELU's validator: rank 5",
            ValidationKind::Signature,
            Box::new(|m| {
                m.main.operands[0].dimensions = vec![1, 1, 1, 2, 3];
                m.main.operands[2].dimensions = vec![1, 1, 1, 2, 3];
            }),
        ),
        (
            "GELU's validator: output shape differs",
            ValidationKind::Signature,
            Box::new(|m| m.main.operands[2].dimensions = vec![3, 2]),
        ),
        (
            "GELU's validator: approximate not a constant",
            ValidationKind::Signature,
            Box::new(|m| {
                let flag = &mut m.main.operands[1];
                flag.lifetime = OperandLifeTime::SUBGRAPH_INPUT;
                flag.location = DataLocation::default();
                m.main.input_indexes.push(1);
            }),
        ),
        (
            "GELU's signature: an int32 input",
            ValidationKind::Signature,
            Box::new(|m| {
                m.main.operands[0].r#type = OperandType::TENSOR_INT32;
                m.main.operands[2].r#type = OperandType::TENSOR_INT32;
            }),
        ),
        (
            "GELU under the fibonacci extension's operation number space",
            ValidationKind::Operation,
            Box::new(|m| m.main.operations[0].r#type = ext_op(9, 1)),
        ),
    ];
    for (base, cases) in [(fib_model(), fib), (gelu_model(), gelu)] {
        validate_model(&base).expect("the unmutated model is valid");
        let (status, supported) = device().get_supported_operations_1_3(&base);
        assert_eq!((status, supported), (ErrorStatus::None, vec![true]));
        for (what, kind, mutate) in cases {
            let mut m = base.clone();
            mutate(&mut m);
            let e = validate_model(&m).expect_err(what);
            assert_eq!(e.status(), ErrorStatus::InvalidArgument, "{what}");
            assert_eq!(e.kind(), kind, "{what}: {e}");
            assert_invalid(&m, what);
        }
    }
}

#[test]
fn fibonacci_n_below_one_fails_preparation() {
    for n in [0i64, -3] {
        let mut m = fib_model();
        m.operand_values[..8].copy_from_slice(&n.to_le_bytes());
        // The value is the extension's to check when it builds the program.
        validate_model(&m).expect("valid as a model");
        let (status, prepared) = prepare(&m);
        assert_eq!(status, ErrorStatus::InvalidArgument, "n = {n}");
        assert!(prepared.is_none());
    }
}

#[test]
fn case_files_pass_through_vnpu_run() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cases/extensions");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("cases/extensions")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).expect("case file");
        let case = parse_case(text.trim()).expect("case parses");
        assert!(!case.model.extension_name_to_prefix.is_empty(), "{f:?}");
        let out = Command::new(env!("CARGO_BIN_EXE_vnpu"))
            .arg("run")
            .arg(f)
            .output()
            .expect("vnpu runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("PASS"),
            "{f:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The report names extension operations through the case's prefix map.
        let ext = &case.model.extension_name_to_prefix[0].name;
        assert!(stdout.contains(&format!("{ext}:")), "{f:?}: {stdout}");
    }
}

/// An extension model saved to the compilation cache and loaded back (the cache holds the
/// model with the driver's internal prefixes) runs with the same results.
#[test]
fn extension_models_survive_the_compilation_cache() {
    use std::sync::Arc;
    use vnpu_driver::cache::{CacheConfig, IoChoice};
    use vnpu_driver::conformance::{run_case_with, Preparation};
    use vnpu_driver::device::{PreparedModelSlot, VnpuDevice};
    use vnpu_driver::hal::NativeHandle;

    let dir = std::env::temp_dir().join(format!("vnpu-ext-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let config = CacheConfig {
        key_path: dir.join("cache.key"),
        io: IoChoice::Auto,
    };
    let dev = VnpuDevice::with_cache(vnpu_emu::DeviceConfig::default(), config).expect("device");
    let handle = |name: &str| {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join(name))
            .expect("cache file");
        vec![NativeHandle {
            fds: vec![Arc::new(std::os::fd::OwnedFd::from(f))],
            ints: Vec::new(),
        }]
    };
    let cases = [
        fibonacci_quant64(
            0x4321,
            12,
            Quant64Params {
                scale: 2.0,
                zero_point: 5,
            },
        ),
        {
            let (fused, _) = gelu_models(&[8], 0xABCD);
            let xs = ramp(8);
            let want: Vec<f32> = xs.iter().map(|&x| gelu_tanh(f64::from(x)) as f32).collect();
            TestCase {
                name: "gelu_cached".into(),
                spec: "extensions".into(),
                min_hal_version: "V1_2".into(),
                inputs: vec![TestBuffer {
                    operand: fused.main.input_indexes[0],
                    dimensions: vec![8],
                    data: f32_bytes(&xs),
                    has_no_value: false,
                }],
                outputs: vec![TestOutput {
                    operand: fused.main.output_indexes[0],
                    dimensions: vec![8],
                    data: f32_bytes(&want),
                    ignored: false,
                }],
                model: fused,
                expect_failure: false,
                multinomial_tolerance: 0.0,
                relaxed: false,
            }
        },
    ];
    for (k, case) in cases.iter().enumerate() {
        let token = [k as u8 + 1; 32];
        let (model_file, data_file) = (format!("{k}.model"), format!("{k}.data"));
        let slot = PreparedModelSlot::new();
        dev.prepare_model_1_3(PrepareArgs {
            model_cache: &handle(&model_file),
            data_cache: &handle(&data_file),
            token: &token,
            ..PrepareArgs::new(&case.model, Some(slot.clone()))
        });
        assert_eq!(slot.wait().0, ErrorStatus::None, "{}: saved", case.name);
        let load = |dev: &dyn IDevice, _model: &Model| -> Preparation {
            let reopen = |name: &str| {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(dir.join(name))
                    .expect("cache file");
                vec![NativeHandle {
                    fds: vec![Arc::new(std::os::fd::OwnedFd::from(f))],
                    ints: Vec::new(),
                }]
            };
            let slot = PreparedModelSlot::new();
            let (model_cache, data_cache) = (reopen(&model_file), reopen(&data_file));
            let ret = dev.prepare_model_from_cache_1_3(PrepareFromCacheArgs::new(
                &model_cache,
                &data_cache,
                &token,
                Some(slot.clone()),
            ));
            let (status, prepared) = slot.wait();
            (ret, status, prepared)
        };
        let report = run_case_with(dev.as_ref(), case, &load);
        assert_eq!(
            report.verdict,
            Verdict::Pass,
            "{}: from the cache",
            case.name
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any non-zero prefix names the extension (validation and support agree); the same
    /// types under a prefix the map does not declare are refused.
    #[test]
    fn any_prefix_decodes_and_undeclared_ones_fail(prefix in 1u16.., other in 1u16..) {
        prop_assume!(prefix != other);
        let mut m = fib_model();
        m.extension_name_to_prefix[0].prefix = prefix;
        m.main.operands[0].r#type = ext_operand(prefix, INT64);
        m.main.operands[1].r#type = ext_operand(prefix, QUANT64);
        m.main.operations[0].r#type = ext_op(prefix, FIBONACCI);
        prop_assert!(validate_model(&m).is_ok());
        let (status, supported) = device().get_supported_operations_1_3(&m);
        prop_assert_eq!((status, supported), (ErrorStatus::None, vec![true]));
        m.main.operations[0].r#type = ext_op(other, FIBONACCI);
        let e = validate_model(&m).unwrap_err();
        prop_assert_eq!(e.kind(), ValidationKind::Extension);
    }
}
