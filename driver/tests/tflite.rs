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
use vnpu_driver::hal::HalVersion;
use vnpu_driver::tflite::npy::{self, Array, Dtype};
use vnpu_driver::tflite::run::{run, within_budget};
use vnpu_driver::tflite::{import, import_at, ImportError, Imported};

const MODELS: &[&str] = &[
    "face_detection_short_range",
    "face_detection_full_range",
    "face_landmark",
    "iris_landmark",
    // int8 (scripts/quantize_models.py), against LiteRT's reference kernels.
    "face_detection_short_range_int8",
    "iris_landmark_int8",
    "face_landmark_int8",
    "face_detection_full_range_int8",
    // Sparse float16 weights behind DENSIFY (NNAPI's experimental DENSIFY).
    "face_detection_full_range_sparse",
];

/// Prepares an imported model at its level (1.3 unless it needs a later operation).
fn prepare_imported(
    imported: &Imported,
) -> (
    ErrorStatus,
    Option<std::sync::Arc<dyn vnpu_driver::device::IPreparedModel>>,
) {
    let (_, status, prepared) =
        vnpu_driver::conformance::prepare_at(device().as_ref(), &imported.model, imported.level);
    (status, prepared)
}

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
        let (status, prepared) = prepare_imported(&imported);
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
            // Per output channel; a filter of one output channel has one scale, which
            // TFLite cannot tell from per tensor (symmetric: zero point 0).
            let filter = &m.operands[o.inputs[1] as usize];
            let one_channel = filter.dimensions.first() == Some(&1)
                && filter.r#type == OperandType::TENSOR_QUANT8_ASYMM_SIGNED
                && filter.zero_point == 0
                && o.r#type == OperationType::CONV_2D;
            assert!(
                filter.r#type == OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL || one_channel,
                "{name}: filter {filter:?}"
            );
            assert_eq!(ty(2), OperandType::TENSOR_INT32, "{name}");
            let out = m.operands[o.outputs[0] as usize].r#type;
            assert_eq!(out, OperandType::TENSOR_QUANT8_ASYMM_SIGNED, "{name}");
        }
    }
}

/// A tiny TFLite writer: float32 tensors, builtin operators with no options.
#[derive(Clone, Default)]
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
    /// Per operator: int32 option slots (slot, value) of its options table.
    options: std::collections::BTreeMap<usize, Vec<(u16, i32)>>,
    /// Per operator: a custom operator's name and options bytes.
    custom: std::collections::BTreeMap<usize, (String, Vec<u8>)>,
    /// Per tensor: per-channel scales and the quantized dimension.
    channels: std::collections::BTreeMap<usize, (Vec<f32>, i32)>,
    /// Per tensor: sparsity parameters.
    sparse: std::collections::BTreeMap<usize, Sparse>,
}

/// A tensor's SparsityParameters: traversal order, block map, and per traversed dimension
/// (SPARSE_CSR, dense_size, segments, indices); segments are written as an Int32Vector,
/// indices as a Uint8Vector.
#[derive(Clone)]
struct Sparse {
    traversal: Vec<i32>,
    block_map: Vec<i32>,
    dims: Vec<(bool, i32, Vec<i32>, Vec<u8>)>,
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

    /// A tensor of TFLite type `ty` with raw `data` (empty: not constant).
    fn typed(&mut self, shape: &[i32], ty: i8, data: Vec<u8>) -> i32 {
        self.tensors.push((shape.to_vec(), data));
        self.quant.push(Some((ty, 0.0, 0)));
        (self.tensors.len() - 1) as i32
    }

    fn op(&mut self, code: i32, ins: &[i32], outs: &[i32]) {
        self.ops.push((code, ins.to_vec(), outs.to_vec()));
    }

    /// A builtin operator with int32 options at the given slots.
    fn op_with(&mut self, code: i32, ins: &[i32], outs: &[i32], options: &[(u16, i32)]) {
        self.options.insert(self.ops.len(), options.to_vec());
        self.op(code, ins, outs);
    }

    /// A custom operator.
    fn custom_op(&mut self, name: &str, ins: &[i32], outs: &[i32], options: &[u8]) {
        self.custom
            .insert(self.ops.len(), (name.to_string(), options.to_vec()));
        self.op(CUSTOM, ins, outs);
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = FlatBufferBuilder::new();
        // Operator codes: (builtin, custom name).
        let key = |k: usize| {
            (
                self.ops[k].0,
                self.custom.get(&k).map(|c| c.0.clone()).unwrap_or_default(),
            )
        };
        let mut codes: Vec<(i32, String)> = Vec::new();
        for k in 0..self.ops.len() {
            if !codes.contains(&key(k)) {
                codes.push(key(k));
            }
        }
        let code_tables: Vec<WIPOffset<_>> = codes
            .iter()
            .map(|(c, name)| {
                let name = (!name.is_empty()).then(|| b.create_string(name));
                let t = b.start_table();
                b.push_slot::<i8>(4, (*c).min(127) as i8, 0);
                if let Some(name) = name {
                    b.push_slot_always(6, name);
                }
                b.push_slot::<i32>(10, *c, 0);
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
        for (k, ((shape, data), quant)) in self.tensors.iter().zip(&self.quant).enumerate() {
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
            // QuantizationParameters: scale 8, zero_point 10, quantized_dimension 16.
            let q = match (quant, self.channels.get(&k)) {
                (_, Some((scales, axis))) => {
                    let sc = b.create_vector(scales);
                    let z = b.create_vector(&vec![0i64; scales.len()]);
                    let q = b.start_table();
                    b.push_slot_always(8, sc);
                    b.push_slot_always(10, z);
                    b.push_slot::<i32>(16, *axis, 0);
                    Some(b.end_table(q))
                }
                (Some((_, scale, zp)), None) if *scale != 0.0 => {
                    let sc = b.create_vector(&[*scale]);
                    let z = b.create_vector(&[*zp]);
                    let q = b.start_table();
                    b.push_slot_always(8, sc);
                    b.push_slot_always(10, z);
                    Some(b.end_table(q))
                }
                _ => None,
            };
            let sparsity = self.sparse.get(&k).map(|sp| {
                let dims: Vec<WIPOffset<_>> = sp
                    .dims
                    .iter()
                    .map(|(csr, size, segments, indices)| {
                        let sv = b.create_vector(segments);
                        let seg = b.start_table();
                        b.push_slot_always(4, sv);
                        let seg = b.end_table(seg);
                        let iv = b.create_vector(indices);
                        let ind = b.start_table();
                        b.push_slot_always(4, iv);
                        let ind = b.end_table(ind);
                        let m = b.start_table();
                        b.push_slot::<i8>(4, i8::from(*csr), 0);
                        b.push_slot::<i32>(6, *size, 0);
                        if *csr {
                            b.push_slot::<u8>(8, 1, 0);
                            b.push_slot_always(10, seg);
                            b.push_slot::<u8>(12, 3, 0);
                            b.push_slot_always(14, ind);
                        }
                        b.end_table(m)
                    })
                    .collect();
                let tv = b.create_vector(&sp.traversal);
                let bm = b.create_vector(&sp.block_map);
                let dv = b.create_vector(&dims);
                let t = b.start_table();
                b.push_slot_always(4, tv);
                b.push_slot_always(6, bm);
                b.push_slot_always(8, dv);
                b.end_table(t)
            });
            let s = b.create_vector(shape);
            let name = b.create_string("t");
            let t = b.start_table();
            b.push_slot_always(4, s);
            if let Some(sp) = sparsity {
                b.push_slot_always(16, sp);
            }
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
            .enumerate()
            .map(|(k, (_, ins, outs))| {
                let index = codes.iter().position(|c| *c == key(k)).unwrap() as u32;
                let i = b.create_vector(ins);
                let o = b.create_vector(outs);
                let options = self.options.get(&k).map(|slots| {
                    let t = b.start_table();
                    for &(slot, v) in slots {
                        b.push_slot_always::<i32>(slot, v);
                    }
                    b.end_table(t)
                });
                let custom = self.custom.get(&k).map(|c| b.create_vector(&c.1));
                let t = b.start_table();
                b.push_slot::<u32>(4, index, 0);
                b.push_slot_always(6, i);
                b.push_slot_always(8, o);
                if let Some(options) = options {
                    // builtin_options_type: any member (the importer reads by slot).
                    b.push_slot::<u8>(10, 1, 0);
                    b.push_slot_always(12, options);
                }
                if let Some(custom) = custom {
                    b.push_slot_always(14, custom);
                }
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

const CUSTOM: i32 = 32;
const FULLY_CONNECTED: i32 = 9;
const CONV_2D: i32 = 3;
const RESHAPE: i32 = 22;
const TRANSPOSE_CONV: i32 = 67;
const SHAPE: i32 = 77;
const PACK: i32 = 83;
/// TFLite's INT32 tensor type.
const INT32: i8 = 2;

fn f32_array(shape: &[usize], v: &[f32]) -> Array {
    Array {
        dtype: Dtype::F32,
        shape: shape.to_vec(),
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

fn floats(a: &Array) -> Vec<f32> {
    a.data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Imports, prepares and runs `t` on float inputs; the outputs and the HAL operations.
fn run_float(
    t: &Tiny,
    inputs: &[Array],
) -> (
    Vec<Vec<f32>>,
    std::collections::BTreeMap<&'static str, usize>,
) {
    run_float_at(t, inputs, HalVersion::Experimental)
}

/// [`run_float`] with the model imported for an interface at `level`.
fn run_float_at(
    t: &Tiny,
    inputs: &[Array],
    level: HalVersion,
) -> (
    Vec<Vec<f32>>,
    std::collections::BTreeMap<&'static str, usize>,
) {
    let imported = import_at(&t.bytes(), false, level).unwrap_or_else(|e| panic!("{e}"));
    let (status, prepared) = prepare_imported(&imported);
    assert_eq!(status, ErrorStatus::None);
    let report = run(&prepared.unwrap(), &imported, inputs, 1).unwrap();
    (
        report.outputs.iter().map(floats).collect(),
        imported.operations,
    )
}

#[test]
fn shape_folds_and_pack_becomes_reshape_and_concatenation() {
    let mut t = Tiny::default();
    let x = t.tensor(&[2, 3], &[]);
    let y = t.tensor(&[3, 2], &[]);
    let s = t.typed(&[2], INT32, Vec::new());
    let r = t.tensor(&[2, 3], &[]);
    let p = t.tensor(&[2, 2, 3], &[]);
    t.op(SHAPE, &[x], &[s]);
    t.op(RESHAPE, &[y, s], &[r]);
    // PackOptions: values_count 4, axis 6 (-2 is axis 1 of the rank-3 result).
    t.op_with(PACK, &[x, r], &[p], &[(4, 2), (6, -2)]);
    t.inputs = vec![x, y];
    t.outputs = vec![p];
    let xs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let ys = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0];
    let inputs = [f32_array(&[2, 3], &xs), f32_array(&[3, 2], &ys)];
    let want = [
        1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 4.0, 5.0, 6.0, 40.0, 50.0, 60.0,
    ];
    // For the 1.3 face, which has no PACK.
    let (out, ops) = run_float_at(&t, &inputs, HalVersion::V1_3);
    assert_eq!(out[0], want);
    assert_eq!(ops.get("RESHAPE"), Some(&3), "{ops:?}");
    assert_eq!(ops.get("CONCATENATION"), Some(&1), "{ops:?}");
    assert!(!ops.contains_key("SHAPE"), "SHAPE is folded: {ops:?}");
    // From AIDL V2 on, PACK is NNAPI's PACK, the same values.
    let (out, ops) = run_float(&t, &inputs);
    assert_eq!(out[0], want);
    assert_eq!(ops.get("PACK"), Some(&1), "{ops:?}");
    assert_eq!(ops.get("RESHAPE"), Some(&1), "{ops:?}");
    assert!(!ops.contains_key("CONCATENATION"), "{ops:?}");
    let imported = import(&t.bytes(), false).unwrap();
    assert_eq!(imported.level, HalVersion::AidlV2);
    // The 1.3 face refuses the model; the AIDL V2 one takes it.
    assert_eq!(prepare(&imported.model).0, ErrorStatus::InvalidArgument);
    // An axis outside the result's rank.
    t.options.insert(2, vec![(4, 2), (6, 3)]);
    let e = import(&t.bytes(), false).unwrap_err();
    assert!(
        matches!(&e, ImportError::Operator { index: 2, op, .. } if op == "PACK"),
        "{e}"
    );
}

/// TFLite's DENSIFY.
const DENSIFY: i32 = 124;

#[test]
fn sparse_weights_become_densify() {
    // A [4, 4] weight in 2x2 blocks; block (0, 0) is all zeros and not stored: block rows
    // DENSE (2), block columns SPARSE_CSR (row 0 holds column 1, row 1 columns 0 and 1),
    // then each block's 2x2 DENSE.
    let mut t = Tiny::default();
    let x = t.tensor(&[4, 4], &[]);
    let values: Vec<f32> = (1..=12).map(|v| v as f32).collect();
    let w = t.tensor(&[4, 4], &values);
    t.sparse.insert(
        w as usize,
        Sparse {
            traversal: vec![0, 1, 2, 3],
            block_map: vec![0, 1],
            dims: vec![
                (false, 2, vec![], vec![]),
                (true, 0, vec![0, 1, 3], vec![1, 0, 1]),
                (false, 2, vec![], vec![]),
                (false, 2, vec![], vec![]),
            ],
        },
    );
    let d = t.tensor(&[4, 4], &[]);
    let y = t.tensor(&[4, 4], &[]);
    t.op(DENSIFY, &[w], &[d]);
    t.op(ADD, &[x, d], &[y]);
    t.inputs = vec![x];
    t.outputs = vec![y];
    let xs: Vec<f32> = (0..16).map(|v| 100.0 * v as f32).collect();
    let (out, ops) = run_float(&t, &[f32_array(&[4, 4], &xs)]);
    #[rustfmt::skip]
    let dense = [
        0.0, 0.0, 1.0, 2.0,
        0.0, 0.0, 3.0, 4.0,
        5.0, 6.0, 9.0, 10.0,
        7.0, 8.0, 11.0, 12.0,
    ];
    let want: Vec<f32> = xs.iter().zip(dense).map(|(a, b)| a + b).collect();
    assert_eq!(out[0], want);
    assert_eq!(ops.get("DENSIFY"), Some(&1), "{ops:?}");
    assert_eq!(
        import(&t.bytes(), false).unwrap().level,
        HalVersion::Experimental
    );
    // Without experimental features there is no DENSIFY: the operator is named.
    let e = import_at(&t.bytes(), false, HalVersion::AidlV4).unwrap_err();
    assert!(
        matches!(&e, ImportError::Unsupported { index: 0, op, .. } if op == "DENSIFY"),
        "{e}"
    );
    // Read by anything but DENSIFY, a sparse tensor is refused.
    t.ops[1].1 = vec![x, w];
    let e = import(&t.bytes(), false).unwrap_err();
    assert!(e.to_string().contains("sparse"), "{e}");
    // A block size that does not divide its dimension.
    t.ops[1].1 = vec![x, d];
    t.sparse.get_mut(&(w as usize)).unwrap().dims[2].1 = 3;
    assert!(import(&t.bytes(), false).is_err());
}

#[test]
fn a_folded_tensor_wanted_as_a_partition_output_is_materialised() {
    use vnpu_driver::tflite::{import_ops_with_outputs, Graph};
    // float16 weights behind a DEQUANTIZE (folded at import) that a runtime's partition
    // edge passes on to the next partition.
    let mut t = Tiny::default();
    let halves: Vec<u8> = [0x3C00u16, 0x4000, 0xB800, 0x3400]
        .iter()
        .flat_map(|h| h.to_le_bytes())
        .collect();
    let w = t.typed(&[4], 1, halves);
    let d = t.tensor(&[4], &[]);
    let x = t.tensor(&[4], &[]);
    let y = t.tensor(&[4], &[]);
    t.op(DEQUANTIZE, &[w], &[d]);
    t.op(ADD, &[x, d], &[y]);
    t.inputs = vec![x];
    t.outputs = vec![y];
    let bytes = t.bytes();
    let g = Graph::read(&bytes).unwrap();
    let imported = import_ops_with_outputs(&g, &[0], &[d as usize]).unwrap();
    assert_eq!(imported.output_tensors, [d as usize]);
    let (status, prepared) = prepare_imported(&imported);
    assert_eq!(status, ErrorStatus::None);
    let report = run(&prepared.unwrap(), &imported, &[], 1).unwrap();
    assert_eq!(floats(&report.outputs[0]), [1.0, 2.0, -0.5, 0.25]);
}

#[test]
fn the_sparse_face_detector_densifies_its_weights() {
    let bytes =
        std::fs::read(models_dir().join("face_detection_full_range_sparse.tflite")).unwrap();
    let imported = import(&bytes, false).unwrap();
    assert_eq!(imported.level, HalVersion::Experimental);
    // 46 sparse float16 filters: DENSIFY, then float16 to float32 (CAST).
    assert_eq!(imported.operations.get("DENSIFY"), Some(&46));
    assert_eq!(imported.operations.get("CAST"), Some(&46));
    let e = import_at(&bytes, false, HalVersion::AidlV4).unwrap_err();
    assert!(
        matches!(&e, ImportError::Unsupported { op, .. } if op == "DENSIFY"),
        "{e}"
    );
}

/// `x [1,2,2,1]` through a 3x3 transposed convolution of stride 2, SAME padding, bias 0.5,
/// as MediaPipe's custom operator or as the builtin.
fn transpose_conv_model(custom: bool) -> Tiny {
    let mut t = Tiny::default();
    let x = t.tensor(&[1, 2, 2, 1], &[]);
    let w: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let w = t.tensor(&[1, 3, 3, 1], &w);
    let bias = t.tensor(&[1], &[0.5]);
    let y = t.tensor(&[1, 4, 4, 1], &[]);
    if custom {
        // padding SAME (1), stride_w 2, stride_h 2.
        let opts: Vec<u8> = [1i32, 2, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
        t.custom_op("Convolution2DTransposeBias", &[x, w, bias], &[y], &opts);
    } else {
        let shape = t.typed(
            &[4],
            INT32,
            [1i32, 4, 4, 1]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        );
        // TransposeConvOptions: padding 4 (SAME 0), stride_w 6, stride_h 8.
        t.op_with(
            TRANSPOSE_CONV,
            &[shape, w, x, bias],
            &[y],
            &[(4, 0), (6, 2), (8, 2)],
        );
    }
    t.inputs = vec![x];
    t.outputs = vec![y];
    t
}

#[test]
fn convolution_2d_transpose_bias_is_transpose_conv_with_bias() {
    let x = f32_array(&[1, 2, 2, 1], &[1.0, -2.0, 3.0, 0.25]);
    let (custom, ops) = run_float(&transpose_conv_model(true), std::slice::from_ref(&x));
    let (builtin, _) = run_float(&transpose_conv_model(false), &[x]);
    assert_eq!(ops.get("TRANSPOSE_CONV_2D"), Some(&1), "{ops:?}");
    assert_eq!(custom, builtin);
    // Output (0, 0) sees only x(0, 0) under weight (0, 0), plus the bias.
    assert_eq!(custom[0][0], 0.5 + 1.0);
    // Options too short to hold padding and strides.
    let mut t = transpose_conv_model(true);
    t.custom.get_mut(&0).unwrap().1.truncate(8);
    let e = import(&t.bytes(), false).unwrap_err();
    assert!(
        matches!(&e, ImportError::Operator { index: 0, reason, .. } if reason.contains("12 expected")),
        "{e}"
    );
}

#[test]
fn a_custom_operator_is_named_by_its_custom_name() {
    let mut t = two_ops();
    let z = t.outputs[0];
    let w = t.tensor(&[1, 4], &[]);
    t.custom_op("MyVendorOp", &[z], &[w], &[]);
    t.outputs = vec![w];
    let e = import(&t.bytes(), false).unwrap_err();
    assert!(
        matches!(&e, ImportError::Unsupported { index: 2, op, reason }
            if op == "custom MyVendorOp" && reason.contains("\"MyVendorOp\"")),
        "{e}"
    );
    assert!(e.to_string().contains("custom MyVendorOp"), "{e}");
}

#[test]
fn hybrid_weights_are_dequantised_at_import() {
    use vnpu_driver::hal::{OperandType, OperationType};
    // FULLY_CONNECTED: float input, int8 weights (scale 0.5, zero point 1), float bias.
    let mut t = Tiny::default();
    let x = t.tensor(&[1, 4], &[]);
    let w = t.int8(&[2, 4], &[3, 5, -1, 1, 1, 1, 1, 9], 0.5, 1);
    let b = t.tensor(&[2], &[0.25, -0.25]);
    let y = t.tensor(&[1, 2], &[]);
    t.op(FULLY_CONNECTED, &[x, w, b], &[y]);
    t.inputs = vec![x];
    t.outputs = vec![y];
    let (out, _) = run_float(&t, &[f32_array(&[1, 4], &[1.0, 2.0, 3.0, 4.0])]);
    // Weights (q - 1) * 0.5: [1, 2, -1, 0] and [0, 0, 0, 4].
    assert_eq!(out[0], [1.0 + 4.0 - 3.0 + 0.25, 16.0 - 0.25]);
    let imported = import(&t.bytes(), false).unwrap();
    let fc = &imported.model.main.operations[0];
    assert_eq!(fc.r#type, OperationType::FULLY_CONNECTED);
    let weights = &imported.model.main.operands[fc.inputs[1] as usize];
    assert_eq!(weights.r#type, OperandType::TENSOR_FLOAT32);
    // A hostile zero point (found by the tflite_import fuzz target: it overflowed).
    let mut hostile = t.clone();
    hostile.quant[w as usize] = Some((INT8, 0.5, i64::MIN));
    let e = import(&hostile.bytes(), false).unwrap_err();
    assert!(e.to_string().contains("zero point"), "{e}");

    // CONV_2D with per-channel int8 weights (scales 0.5 and 0.25 along the output axis).
    let mut t = Tiny::default();
    let x = t.tensor(&[1, 1, 1, 2], &[]);
    let w = t.int8(&[2, 1, 1, 2], &[2, 4, 4, -8], 0.0, 0);
    t.channels.insert(w as usize, (vec![0.5, 0.25], 0));
    let b = t.tensor(&[2], &[0.0, 1.0]);
    let y = t.tensor(&[1, 1, 1, 2], &[]);
    t.op(CONV_2D, &[x, w, b], &[y]);
    t.inputs = vec![x];
    t.outputs = vec![y];
    let (out, _) = run_float(&t, &[f32_array(&[1, 1, 1, 2], &[1.0, 1.0])]);
    // Channel 0: [1, 2]; channel 1: [1, -2].
    assert_eq!(out[0], [3.0, 1.0 - 1.0]);
}

#[test]
fn the_partition_report_places_each_operator_with_its_reason() {
    use vnpu_driver::tflite::partition::{plan, Placement};
    // relu(x + c) -> y; SHAPE(y) -> s; Foo(y, s) -> w (custom: the CPU); relu(w) -> z.
    let mut t = two_ops();
    let (x, z) = (t.inputs[0], t.outputs[0]);
    let s = t.typed(&[2], INT32, Vec::new());
    let w = t.tensor(&[1, 4], &[]);
    let v = t.tensor(&[1, 4], &[]);
    t.op(SHAPE, &[z], &[s]);
    t.custom_op("Foo", &[z, s], &[w], &[]);
    t.op(RELU, &[w], &[v]);
    t.outputs = vec![v];
    let bytes = t.bytes();
    let dev = device();
    let plan = plan(&bytes, dev.as_ref()).unwrap();
    let places: Vec<&Placement> = plan.ops.iter().map(|o| &o.placement).collect();
    assert_eq!(places[0], &Placement::Vnpu(0));
    assert_eq!(places[1], &Placement::Vnpu(0));
    assert!(
        matches!(places[2], Placement::Cpu(why) if why.contains("operator 3 (custom Foo)")),
        "{places:?}"
    );
    assert!(
        matches!(places[3], Placement::Cpu(why) if why.contains("\"Foo\"")),
        "{places:?}"
    );
    assert_eq!(places[4], &Placement::Vnpu(1));
    assert_eq!((plan.on_vnpu(), plan.on_cpu()), (3, 2));
    let report = plan.to_string();
    assert!(
        report.starts_with("operators   5 (3 on vnpu in 2 partitions, 2 on CPU)"),
        "{report}"
    );
    assert!(report.contains("custom Foo"), "{report}");
    // Each partition is a model of its own: the first gives y (the CPU reads it), the
    // second takes w. Run them around an identity in place of Foo.
    let [first, second] = &plan.partitions[..] else {
        panic!("two partitions: {report}");
    };
    assert_eq!(first.imported.input_tensors, [x as usize]);
    assert_eq!(first.imported.output_tensors, [z as usize]);
    assert_eq!(second.imported.input_tensors, [w as usize]);
    let run_part = |imported: &vnpu_driver::tflite::Imported, input: Array| {
        let (status, prepared) = prepare(&imported.model);
        assert_eq!(status, ErrorStatus::None);
        run(&prepared.unwrap(), imported, &[input], 1)
            .unwrap()
            .outputs[0]
            .clone()
    };
    let mid = run_part(&first.imported, f32_array(&[1, 4], &[0.5, 0.5, -5.0, 5.0]));
    assert_eq!(floats(&mid), [1.5, 0.0, 0.0, 1.0]);
    let end = run_part(&second.imported, mid);
    assert_eq!(floats(&end), [1.5, 0.0, 0.0, 1.0]);
}

#[test]
fn the_shipped_models_run_whole_on_vnpu() {
    use vnpu_driver::tflite::partition::plan;
    let dev = device();
    for name in MODELS {
        let bytes = std::fs::read(models_dir().join(format!("{name}.tflite"))).unwrap();
        let plan = plan(&bytes, dev.as_ref()).unwrap();
        assert_eq!(plan.on_cpu(), 0, "{name}:\n{plan}");
        assert_eq!(plan.partitions.len(), 1, "{name}");
        let whole = import(&bytes, false).unwrap();
        assert_eq!(
            plan.partitions[0].imported.operations, whole.operations,
            "{name}"
        );
    }
}

/// A chain of `ops` on a `[1, 4]` float tensor: 0 = ADD of a constant, 1 = RELU, 2 = an
/// operator vnpu does not map (the "CPU" here computes it as x - 1).
fn chain(ops: &[u8]) -> Tiny {
    let mut t = Tiny::default();
    let x = t.tensor(&[1, 4], &[]);
    let mut cur = x;
    for &o in ops {
        let next = t.tensor(&[1, 4], &[]);
        match o {
            0 => {
                let c = t.tensor(&[1, 4], &[0.5, -1.5, 2.0, -0.25]);
                t.op(ADD, &[cur, c], &[next]);
            }
            1 => t.op(RELU, &[cur], &[next]),
            _ => t.op(UNMAPPED, &[cur], &[next]),
        }
        cur = next;
    }
    t.inputs = vec![x];
    t.outputs = vec![cur];
    t
}

fn chain_reference(ops: &[u8], x: &[f32]) -> Vec<f32> {
    let c = [0.5, -1.5, 2.0, -0.25];
    let mut v = x.to_vec();
    for &o in ops {
        for (k, e) in v.iter_mut().enumerate() {
            *e = match o {
                0 => *e + c[k],
                1 => e.max(0.0),
                _ => *e - 1.0,
            };
        }
    }
    v
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// Every operator is placed once; partitions are the maximal runs of mapped operators,
    /// each a valid model from the tensor before the run to the one after it; running them
    /// with the CPU's operators between gives the graph's result.
    #[test]
    fn partitions_are_maximal_runs_that_compose(ops in proptest::collection::vec(0u8..3, 1..9)) {
        use vnpu_driver::tflite::partition::{plan, Placement};
        let dev = device();
        let p = plan(&chain(&ops).bytes(), dev.as_ref()).unwrap();
        proptest::prop_assert_eq!(p.ops.len(), ops.len());
        let mut runs: Vec<Vec<usize>> = Vec::new();
        for (k, &o) in ops.iter().enumerate() {
            let on_vnpu = o != 2;
            proptest::prop_assert_eq!(matches!(p.ops[k].placement, Placement::Vnpu(_)), on_vnpu);
            if on_vnpu {
                match runs.last_mut() {
                    Some(r) if *r.last().unwrap() + 1 == k => r.push(k),
                    _ => runs.push(vec![k]),
                }
            }
        }
        let got_runs: Vec<Vec<usize>> = p.partitions.iter().map(|q| q.ops.clone()).collect();
        proptest::prop_assert_eq!(&got_runs, &runs);
        // Run the chain: the CPU's operators here, each partition on the device.
        let x = [0.75f32, -0.5, 3.0, -2.0];
        let mut v = x.to_vec();
        let mut next_op = 0;
        for q in &p.partitions {
            while next_op < q.ops[0] {
                v.iter_mut().for_each(|e| *e -= 1.0);
                next_op += 1;
            }
            proptest::prop_assert_eq!(q.imported.inputs.len(), 1);
            proptest::prop_assert_eq!(q.imported.outputs.len(), 1);
            let (status, prepared) = prepare(&q.imported.model);
            proptest::prop_assert_eq!(status, ErrorStatus::None);
            let out = run(&prepared.unwrap(), &q.imported, &[f32_array(&[1, 4], &v)], 1).unwrap();
            v = floats(&out.outputs[0]);
            next_op = q.ops.last().unwrap() + 1;
        }
        while next_op < ops.len() {
            v.iter_mut().for_each(|e| *e -= 1.0);
            next_op += 1;
        }
        proptest::prop_assert_eq!(v, chain_reference(&ops, &x));
    }
}
