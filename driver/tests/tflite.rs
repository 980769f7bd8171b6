//! Real models (.tflite) through the driver: every shipped model, float and int8, imports,
//! prepares, runs and matches its committed LiteRT reference outputs within the budget
//! (`scripts/litert_compare.py` made them: float within 1e-4 of each output's range,
//! int8 within one step with at most 1% of values two steps off); hostile files give
//! errors; an operator vnpu cannot map is named with its index, and `--partial` runs the
//! prefix before it.

mod common;

use std::path::PathBuf;

use common::{device, prepare};
use flatbuffers::{FlatBufferBuilder, WIPOffset};
use vnpu_driver::hal::ErrorStatus;
use vnpu_driver::tflite::npy::{self, Array, Dtype};
use vnpu_driver::tflite::run::{run, within_budget};
use vnpu_driver::tflite::{import, ImportError};

const MODELS: &[&str] = &[
    "face_detection_short_range",
    "face_detection_full_range",
    "face_landmark",
    "iris_landmark",
    // int8 (scripts/quantize_models.py), against LiteRT's reference kernels.
    "face_detection_short_range_int8",
    "iris_landmark_int8",
];

fn models_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models")
}

fn read_npy(path: PathBuf) -> Array {
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    npy::read(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The files `input_K.npy` / `output_K.npy` of a reference directory, in order.
fn arrays(dir: &std::path::Path, prefix: &str) -> Vec<Array> {
    (0..)
        .map(|k| dir.join(format!("{prefix}_{k}.npy")))
        .take_while(|p| p.exists())
        .map(read_npy)
        .collect()
}

#[test]
fn shipped_models_match_litert() {
    for name in MODELS {
        let bytes = std::fs::read(models_dir().join(format!("{name}.tflite"))).unwrap();
        let imported = import(&bytes, false).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(imported.stopped.is_none());
        let (status, prepared) = prepare(&imported.model);
        assert_eq!(status, ErrorStatus::None, "{name}");
        let reference = models_dir().join("reference").join(name);
        let inputs = arrays(&reference, "input");
        let want = arrays(&reference, "output");
        assert_eq!(inputs.len(), imported.inputs.len(), "{name}");
        assert_eq!(want.len(), imported.outputs.len(), "{name}");
        let report = run(&prepared.unwrap(), &imported, &inputs, 1).unwrap();
        for (k, (w, g)) in want.iter().zip(&report.outputs).enumerate() {
            if let Err(e) = within_budget(w, g, imported.outputs[k].dequantized_step) {
                panic!("{name} output {k}: {e}");
            }
        }
    }
}

#[test]
fn int8_models_run_integer_operations() {
    use vnpu_driver::hal::{OperandType, OperationType};
    for name in MODELS.iter().filter(|n| n.ends_with("_int8")) {
        let bytes = std::fs::read(models_dir().join(format!("{name}.tflite"))).unwrap();
        let imported = import(&bytes, false).unwrap();
        let m = &imported.model.main;
        for t in imported.inputs.iter().chain(&imported.outputs) {
            assert_eq!(t.r#type, OperandType::TENSOR_QUANT8_ASYMM_SIGNED, "{name}");
        }
        let convs: Vec<_> = m
            .operations
            .iter()
            .filter(|o| {
                matches!(
                    o.r#type,
                    OperationType::CONV_2D | OperationType::DEPTHWISE_CONV_2D
                )
            })
            .collect();
        assert!(!convs.is_empty(), "{name}");
        for o in convs {
            let ty = |k: usize| m.operands[o.inputs[k] as usize].r#type;
            assert_eq!(ty(0), OperandType::TENSOR_QUANT8_ASYMM_SIGNED, "{name}");
            assert_eq!(ty(1), OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL, "{name}");
            assert_eq!(ty(2), OperandType::TENSOR_INT32, "{name}");
            let out = m.operands[o.outputs[0] as usize].r#type;
            assert_eq!(out, OperandType::TENSOR_QUANT8_ASYMM_SIGNED, "{name}");
        }
    }
}

/// A tiny TFLite writer: float32 tensors, builtin operators with no options.
#[derive(Default)]
struct Tiny {
    /// (shape, buffer data)
    tensors: Vec<(Vec<i32>, Vec<u8>)>,
    /// Per tensor: its TFLite type and quantisation (scale, zero point), when not float32.
    quant: Vec<Option<(i8, f32, i64)>>,
    /// (builtin code, inputs, outputs)
    ops: Vec<(i32, Vec<i32>, Vec<i32>)>,
    inputs: Vec<i32>,
    outputs: Vec<i32>,
    /// Constants after the FlatBuffer (Buffer.offset/size), as large-model writers put them.
    outside: bool,
}

impl Tiny {
    fn tensor(&mut self, shape: &[i32], data: &[f32]) -> i32 {
        let bytes = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensors.push((shape.to_vec(), bytes));
        self.quant.push(None);
        (self.tensors.len() - 1) as i32
    }

    /// An int8 tensor with scale and zero point (constant when `data` is not empty).
    fn int8(&mut self, shape: &[i32], data: &[i8], scale: f32, zero_point: i64) -> i32 {
        let bytes = data.iter().map(|&v| v as u8).collect();
        self.tensors.push((shape.to_vec(), bytes));
        self.quant.push(Some((INT8, scale, zero_point)));
        (self.tensors.len() - 1) as i32
    }

    fn op(&mut self, code: i32, ins: &[i32], outs: &[i32]) {
        self.ops.push((code, ins.to_vec(), outs.to_vec()));
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = FlatBufferBuilder::new();
        let mut codes: Vec<i32> = self.ops.iter().map(|o| o.0).collect();
        codes.dedup();
        let code_tables: Vec<WIPOffset<_>> = codes
            .iter()
            .map(|&c| {
                let t = b.start_table();
                b.push_slot::<i8>(4, c.min(127) as i8, 0);
                b.push_slot::<i32>(10, c, 0);
                b.end_table(t)
            })
            .collect();
        // Buffer 0 is the empty buffer, as converters write.
        let mut buffers = vec![{
            let t = b.start_table();
            b.end_table(t)
        }];
        let mut tensors = Vec::new();
        // Data placed after the FlatBuffer: (offset within the appended bytes, data).
        let mut appended: Vec<u8> = Vec::new();
        let mut placeholders = Vec::new();
        for ((shape, data), quant) in self.tensors.iter().zip(&self.quant) {
            let buffer = if data.is_empty() {
                0
            } else if self.outside {
                let at = appended.len();
                appended.extend_from_slice(data);
                let t = b.start_table();
                // Patched below, once the FlatBuffer's size is known: a unique marker.
                let marker = 0x5A5A_0000_0000_0000u64 | at as u64;
                placeholders.push(marker);
                b.push_slot::<u64>(6, marker, 0);
                b.push_slot::<u64>(8, data.len() as u64, 0);
                buffers.push(b.end_table(t));
                buffers.len() as u32 - 1
            } else {
                let d = b.create_vector(data);
                let t = b.start_table();
                b.push_slot_always(4, d);
                buffers.push(b.end_table(t));
                buffers.len() as u32 - 1
            };
            // QuantizationParameters: scale 8, zero_point 10.
            let q = quant.map(|(_, scale, zp)| {
                let sc = b.create_vector(&[scale]);
                let z = b.create_vector(&[zp]);
                let q = b.start_table();
                b.push_slot_always(8, sc);
                b.push_slot_always(10, z);
                b.end_table(q)
            });
            let s = b.create_vector(shape);
            let name = b.create_string("t");
            let t = b.start_table();
            b.push_slot_always(4, s);
            b.push_slot::<i8>(6, quant.map_or(0, |q| q.0), 0);
            b.push_slot::<u32>(8, buffer, 0);
            b.push_slot_always(10, name);
            if let Some(q) = q {
                b.push_slot_always(12, q);
            }
            tensors.push(b.end_table(t));
        }
        let ops: Vec<WIPOffset<_>> = self
            .ops
            .iter()
            .map(|(code, ins, outs)| {
                let index = codes.iter().position(|c| c == code).unwrap() as u32;
                let i = b.create_vector(ins);
                let o = b.create_vector(outs);
                let t = b.start_table();
                b.push_slot::<u32>(4, index, 0);
                b.push_slot_always(6, i);
                b.push_slot_always(8, o);
                b.end_table(t)
            })
            .collect();
        let tensors = b.create_vector(&tensors);
        let ops = b.create_vector(&ops);
        let ins = b.create_vector(&self.inputs);
        let outs = b.create_vector(&self.outputs);
        let sg = b.start_table();
        b.push_slot_always(4, tensors);
        b.push_slot_always(6, ins);
        b.push_slot_always(8, outs);
        b.push_slot_always(10, ops);
        let sg = b.end_table(sg);
        let subgraphs = b.create_vector(&[sg]);
        let codes = b.create_vector(&code_tables);
        let buffers = b.create_vector(&buffers);
        let m = b.start_table();
        b.push_slot::<u32>(4, 3, 0);
        b.push_slot_always(6, codes);
        b.push_slot_always(8, subgraphs);
        b.push_slot_always(12, buffers);
        let m = b.end_table(m);
        b.finish(m, Some("TFL3"));
        let mut file = b.finished_data().to_vec();
        let base = file.len() as u64;
        for marker in placeholders {
            let at = file
                .windows(8)
                .position(|w| w == marker.to_le_bytes())
                .expect("marker");
            let offset = base + (marker & 0xFFFF_FFFF);
            file[at..at + 8].copy_from_slice(&offset.to_le_bytes());
        }
        file.extend_from_slice(&appended);
        file
    }
}

const ADD: i32 = 0;
const RELU: i32 = 19;
const QUANTIZE: i32 = 114;
const DEQUANTIZE: i32 = 6;
/// TFLite's INT8 tensor type.
const INT8: i8 = 9;
/// A builtin vnpu does not map (SQUARED_DIFFERENCE).
const UNMAPPED: i32 = 99;

fn int8_array(shape: &[usize], v: &[i8]) -> Array {
    Array {
        dtype: Dtype::I8,
        shape: shape.to_vec(),
        data: v.iter().map(|&x| x as u8).collect(),
    }
}

fn run_int8(t: &Tiny, x: &[i8]) -> (Vec<i8>, std::collections::BTreeMap<&'static str, usize>) {
    let imported = import(&t.bytes(), false).unwrap();
    let (status, prepared) = prepare(&imported.model);
    assert_eq!(status, ErrorStatus::None);
    let report = run(
        &prepared.unwrap(),
        &imported,
        &[int8_array(&[x.len()], x)],
        1,
    )
    .unwrap();
    let out = report.outputs[0].data.iter().map(|&v| v as i8).collect();
    (out, imported.operations)
}

/// TFLite's rescale of int8 `q` from (scale, zero point) `from` to `to`, in exact
/// arithmetic, rounded half away from zero and clamped.
fn rescale(q: i8, from: (f32, i64), to: (f32, i64)) -> i8 {
    let real = (f64::from(q) - from.1 as f64) * f64::from(from.0);
    (real / f64::from(to.0) + to.1 as f64)
        .round()
        .clamp(-128.0, 127.0) as i8
}

#[test]
fn an_int8_quantize_requantises() {
    // QUANTIZE from int8 to int8 with other parameters (as quantised models put before a
    // CONCATENATION): NNAPI's QUANTIZE takes float only, so it goes through float32.
    let (from, to) = ((0.05f32, -3i64), (0.13f32, 10i64));
    let mut t = Tiny::default();
    let x = t.int8(&[256], &[], from.0, from.1);
    let y = t.int8(&[256], &[], to.0, to.1);
    t.op(QUANTIZE, &[x], &[y]);
    t.inputs = vec![x];
    t.outputs = vec![y];
    let input: Vec<i8> = (-128..=127).collect();
    let (got, ops) = run_int8(&t, &input);
    assert_eq!(ops.get("DEQUANTIZE"), Some(&1), "{ops:?}");
    assert_eq!(ops.get("QUANTIZE"), Some(&1), "{ops:?}");
    for (&q, &g) in input.iter().zip(&got) {
        assert_eq!(g, rescale(q, from, to), "input {q}");
    }
}

#[test]
fn an_int8_relu_that_rescales_is_requantised_first() {
    // TFLite's int8 RELU may give its output other parameters than its input's; NNAPI's
    // keeps the input's, so the import requantises, then applies RELU.
    let (from, to) = ((0.03f32, 5i64), (0.015f32, -128i64));
    let mut t = Tiny::default();
    let x = t.int8(&[256], &[], from.0, from.1);
    let y = t.int8(&[256], &[], to.0, to.1);
    t.op(RELU, &[x], &[y]);
    t.inputs = vec![x];
    t.outputs = vec![y];
    let input: Vec<i8> = (-128..=127).collect();
    let (got, ops) = run_int8(&t, &input);
    assert_eq!(ops.get("RELU"), Some(&1), "{ops:?}");
    for (&q, &g) in input.iter().zip(&got) {
        let want = rescale(q, from, to).max(to.1 as i8);
        assert_eq!(g, want, "input {q}");
    }
    // With equal parameters, RELU alone.
    let mut t = Tiny::default();
    let x = t.int8(&[256], &[], from.0, from.1);
    let y = t.int8(&[256], &[], from.0, from.1);
    t.op(RELU, &[x], &[y]);
    t.inputs = vec![x];
    t.outputs = vec![y];
    let (got, ops) = run_int8(&t, &input);
    assert_eq!(ops.len(), 1, "{ops:?}");
    for (&q, &g) in input.iter().zip(&got) {
        assert_eq!(g, q.max(from.1 as i8), "input {q}");
    }
}

#[test]
fn a_dequantized_output_is_budgeted_in_its_steps() {
    let mut t = Tiny::default();
    let x = t.int8(&[4], &[], 0.25, 3);
    let y = t.tensor(&[4], &[]);
    t.op(DEQUANTIZE, &[x], &[y]);
    t.inputs = vec![x];
    t.outputs = vec![y];
    let imported = import(&t.bytes(), false).unwrap();
    let step = imported.outputs[0].dequantized_step;
    assert_eq!(step, Some(0.25));
    let (status, prepared) = prepare(&imported.model);
    assert_eq!(status, ErrorStatus::None);
    let report = run(
        &prepared.unwrap(),
        &imported,
        &[int8_array(&[4], &[3, 7, -1, 127])],
        1,
    )
    .unwrap();
    let f32s = |v: &[f32]| Array {
        dtype: Dtype::F32,
        shape: vec![4],
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    let got = &report.outputs[0];
    assert_eq!(got.data, f32s(&[0.0, 1.0, -1.0, 31.0]).data);
    // One step off everywhere is within the budget; two steps off anywhere in four values
    // (over 1%) or three anywhere is not.
    assert!(within_budget(&f32s(&[0.25, 0.75, -1.25, 31.25]), got, step).is_ok());
    assert!(within_budget(&f32s(&[0.5, 1.0, -1.0, 31.0]), got, step).is_err());
    assert!(within_budget(&f32s(&[0.75, 1.0, -1.0, 31.0]), got, step).is_err());
    // Without the step, the float budget (1e-4 of the range) applies.
    assert!(within_budget(&f32s(&[0.25, 1.0, -1.0, 31.0]), got, None).is_err());
}

/// `relu(x + c) -> y`, then `relu(y) -> z`.
fn two_ops() -> Tiny {
    let mut t = Tiny::default();
    let x = t.tensor(&[1, 4], &[]);
    let c = t.tensor(&[1, 4], &[1.0, -2.0, 3.0, -4.0]);
    let y = t.tensor(&[1, 4], &[]);
    let z = t.tensor(&[1, 4], &[]);
    t.op(ADD, &[x, c], &[y]);
    t.op(RELU, &[y], &[z]);
    t.inputs = vec![x];
    t.outputs = vec![z];
    t
}

#[test]
fn a_written_model_runs() {
    let imported = import(&two_ops().bytes(), false).unwrap();
    let (status, prepared) = prepare(&imported.model);
    assert_eq!(status, ErrorStatus::None);
    let x = Array {
        dtype: Dtype::F32,
        shape: vec![1, 4],
        data: [0.5f32, 0.5, -5.0, 5.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    };
    let report = run(&prepared.unwrap(), &imported, &[x], 1).unwrap();
    let got: Vec<f32> = report.outputs[0]
        .data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(got, [1.5, 0.0, 0.0, 1.0]);
}

#[test]
fn constants_outside_the_flatbuffer() {
    let mut t = two_ops();
    t.outside = true;
    let bytes = t.bytes();
    let imported = import(&bytes, false).unwrap();
    assert!(imported.constant_bytes >= 16);
    // Data that would run past the end of the file.
    let e = import(&bytes[..bytes.len() - 4], false).unwrap_err();
    assert!(
        matches!(&e, ImportError::Tensor { reason, .. } if reason.contains("outside the file")),
        "{e}"
    );
}

#[test]
fn hostile_files_give_errors() {
    let good = two_ops().bytes();
    // Truncated anywhere.
    for cut in [0, 4, 7, 8, 16, good.len() / 2, good.len() - 1] {
        assert!(import(&good[..cut], false).is_err(), "cut at {cut}");
    }
    // Wrong identifier.
    let mut bad = good.clone();
    bad[4..8].copy_from_slice(b"TFL2");
    assert!(matches!(import(&bad, false), Err(ImportError::Malformed(m)) if m.contains("TFL3")));
    // The root offset out of range.
    let mut bad = good.clone();
    bad[0..4].copy_from_slice(&(good.len() as u32 + 64).to_le_bytes());
    assert!(matches!(
        import(&bad, false),
        Err(ImportError::Malformed(_))
    ));
    // Every single-byte corruption: an error or a model, never a panic.
    for at in 0..good.len() {
        let mut b = good.clone();
        b[at] ^= 0xA5;
        let _ = import(&b, false);
    }
}

#[test]
fn a_cyclic_graph_is_refused() {
    let mut t = Tiny::default();
    let x = t.tensor(&[4], &[]);
    let y = t.tensor(&[4], &[]);
    let z = t.tensor(&[4], &[]);
    t.op(ADD, &[x, z], &[y]);
    t.op(ADD, &[y, x], &[z]);
    t.inputs = vec![x];
    t.outputs = vec![z];
    let e = import(&t.bytes(), false).unwrap_err();
    assert!(
        matches!(&e, ImportError::Graph(m) if m.contains("cyclic")),
        "{e}"
    );
}

#[test]
fn a_buffer_smaller_than_its_tensor_is_refused() {
    let mut t = two_ops();
    t.tensors[1].1.truncate(10);
    let e = import(&t.bytes(), false).unwrap_err();
    assert!(
        matches!(&e, ImportError::Tensor { index: 1, reason } if reason.contains("buffer")),
        "{e}"
    );
}

#[test]
fn an_unmapped_operator_is_named_and_partial_runs_the_prefix() {
    let mut t = two_ops();
    let z = t.outputs[0];
    let w = t.tensor(&[1, 1, 1, 4], &[]);
    t.op(UNMAPPED, &[z], &[w]);
    t.outputs = vec![w];
    let e = import(&t.bytes(), false).unwrap_err();
    assert!(
        matches!(&e, ImportError::Unsupported { index: 2, op, .. } if op == "BUILTIN_99"),
        "{e}"
    );
    let partial = import(&t.bytes(), true).unwrap();
    let (index, op, _) = partial.stopped.clone().unwrap();
    assert_eq!((index, op.as_str()), (2, "BUILTIN_99"));
    assert_eq!(
        partial.outputs.len(),
        1,
        "the prefix's output is what the rest reads"
    );
    assert_eq!(partial.outputs[0].dims, [1, 4]);
    let (status, _) = prepare(&partial.model);
    assert_eq!(status, ErrorStatus::None);
    let _ = device();
}

/// A model input whose shape is far larger than the device takes gives exit status 2 and a
/// clear error, never an abort or a panic: its random data is made only after preparation
/// accepted the shapes, and every size is checked before it is allocated (float and int8,
/// with a product that would wrap, and with `--input` naming every input).
#[test]
fn huge_input_shape_rejected_before_allocation() {
    let dir = std::env::temp_dir().join(format!("vnpu-huge-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let max = i32::MAX;
    let shapes: [&[i32]; 4] = [
        &[1, 65536, 65536, 3],
        &[max, max, max, max],
        &[1, 1 << 20, 1 << 20, 1],
        &[1, 2, 2, 3],
    ];
    for (k, shape) in shapes.iter().enumerate() {
        for int8 in [false, true] {
            let mut t = Tiny::default();
            let (x, y) = if int8 {
                (t.int8(shape, &[], 0.5, 0), t.int8(shape, &[], 0.5, 0))
            } else {
                (t.tensor(shape, &[]), t.tensor(shape, &[]))
            };
            t.op(RELU, &[x], &[y]);
            t.inputs = vec![x];
            t.outputs = vec![y];
            let path = dir.join(format!("m{k}_{int8}.tflite"));
            std::fs::write(&path, t.bytes()).unwrap();
            let path = path.to_str().unwrap();
            let (code, stderr, rss_kib) = common::cli::vnpu_measured(&["run", path]);
            if k == shapes.len() - 1 {
                // The same model at a size the device takes runs.
                assert_eq!(code, Some(0), "{shape:?} int8 {int8}: {stderr}");
                continue;
            }
            assert_eq!(code, Some(2), "{shape:?} int8 {int8}: {stderr}");
            assert!(stderr.contains("vnpu: "), "{stderr}");
            // Nothing near the input's size (1 TiB at the smallest) was allocated.
            assert!(rss_kib < 150 << 10, "{shape:?}: peak RSS {rss_kib} KiB");
        }
    }
    // `--input` giving the input: a file whose header claims the huge shape is refused for
    // its size, and no random data is made for an input a file gives.
    let mut t = Tiny::default();
    let x = t.tensor(&[1, 65536, 65536, 3], &[]);
    let y = t.tensor(&[1, 65536, 65536, 3], &[]);
    t.op(RELU, &[x], &[y]);
    t.inputs = vec![x];
    t.outputs = vec![y];
    let model = dir.join("given.tflite");
    std::fs::write(&model, t.bytes()).unwrap();
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 65536, 65536, 3), }";
    let mut npy_bytes = b"\x93NUMPY\x01\x00".to_vec();
    npy_bytes.extend_from_slice(&(header.len() as u16 + 1).to_le_bytes());
    npy_bytes.extend_from_slice(header.as_bytes());
    npy_bytes.push(b'\n');
    let input = dir.join("x.npy");
    std::fs::write(&input, npy_bytes).unwrap();
    let given = format!("0={}", input.display());
    let (code, stderr, rss_kib) =
        common::cli::vnpu_measured(&["run", model.to_str().unwrap(), "--input", &given]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(rss_kib < 150 << 10, "peak RSS {rss_kib} KiB");
    std::fs::remove_dir_all(&dir).unwrap();
}
