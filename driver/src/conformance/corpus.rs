//! Loader for the conformance corpus (`conformance/*.jsonl[.gz]`, format in
//! `conformance/README.md`): one JSON object per line, each a generated NNAPI test case.
//!
//! Each case is turned into a HAL [`Model`] the way a faithful client builds one:
//! CONSTANT_COPY values are appended to `operand_values` at 4-byte aligned offsets,
//! CONSTANT_REFERENCE values go into one "ashmem" pool at 64-byte aligned offsets, SUBGRAPH
//! operands carry their `referenced` index in `location.offset`, and `number_of_consumers`
//! is computed from the operations. Input and output values are kept as little-endian bytes
//! in the operand's element type. AIDL-only operations (BATCH_MATMUL, PACK, MIRROR_PAD,
//! REVERSE, DENSIFY) are loaded with their AIDL values; `validate::validate_model` rejects them.
//!
//! Vendor extensions: a model may carry `extension_name_to_prefix` (`[{"name": ..,
//! "prefix": ..}]`, the HAL's `Model.extensionNameToPrefix`); an operand or operation type
//! is then either a HAL name, `"<extension name>:<type name or number>"` (encoded with the
//! prefix the model gives that extension; type names are those of the extensions this
//! driver supports), or the raw 32-bit HAL value as a JSON number. An operand's
//! `extension_params` (an array of bytes) becomes its `extraParams.extension`. Values of an
//! extension type are written as integers (64-bit types of the supported extensions).
//!
//! Every line is hostile input: malformed JSON, wrong types, out-of-range values and unknown
//! names are reported as [`CorpusError`]s, never panics.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::extensions::{self, ValueKind};
use crate::hal::{
    DataLocation, ExtensionNameAndPrefix, ExtraParams, Memory, Model, Operand, OperandLifeTime,
    OperandType, Operation, OperationType, Request, RequestArgument, RequestMemoryPool, Subgraph,
    SymmPerChannelQuantParams,
};

/// Alignment of CONSTANT_COPY values in `operand_values`.
const COPY_ALIGN: usize = 4;
/// Alignment of CONSTANT_REFERENCE values in the pool, and of request arguments.
const POOL_ALIGN: usize = 64;

/// A corpus error.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A line is not a JSON test case of the expected shape.
    #[error("malformed test case: {0}")]
    Json(#[from] serde_json::Error),
    /// A line is well-formed JSON but describes an invalid case.
    #[error("invalid test case: {0}")]
    Invalid(String),
    /// Shared memory for a pool could not be created.
    #[error("cannot create a memory pool: {0}")]
    Memory(std::io::Error),
    /// A line of a file failed.
    #[error("{path}:{line}: {source}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The cause.
        #[source]
        source: Box<CorpusError>,
    },
    /// No case of that name.
    #[error("no test case named {0:?}")]
    NotFound(String),
}

fn invalid(msg: impl Into<String>) -> CorpusError {
    CorpusError::Invalid(msg.into())
}

/// One conformance test case.
#[derive(Clone, Debug)]
pub struct TestCase {
    /// Unique name, `<spec>/<variant>`.
    pub name: String,
    /// The spec file it came from.
    pub spec: String,
    /// "V1_0".."V1_3", "AIDL_V1".., or "UNKNOWN".
    pub min_hal_version: String,
    /// The model, built as a client would.
    pub model: Model,
    /// Preparing or executing this model must fail.
    pub expect_failure: bool,
    /// > 0 only for RANDOM_MULTINOMIAL (distribution check).
    pub multinomial_tolerance: f64,
    /// One per main input, in order.
    pub inputs: Vec<TestBuffer>,
    /// One per main output, in order.
    pub outputs: Vec<TestOutput>,
    /// The model is relaxed (flag set) or holds any TENSOR_FLOAT16 operand anywhere.
    pub relaxed: bool,
}

/// An input value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestBuffer {
    /// Operand index in the main subgraph.
    pub operand: u32,
    /// Dimensions.
    pub dimensions: Vec<u32>,
    /// Little-endian bytes in the operand's element type.
    pub data: Vec<u8>,
    /// Omitted optional input (`"data": []`; the VTS harness treats every input without
    /// data as omitted, including those with a zero dimension).
    pub has_no_value: bool,
}

/// An expected output value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestOutput {
    /// Operand index in the main subgraph.
    pub operand: u32,
    /// Expected dimensions.
    pub dimensions: Vec<u32>,
    /// Little-endian bytes in the operand's element type.
    pub data: Vec<u8>,
    /// Not compared.
    pub ignored: bool,
}

/// Bytes per element of `t` (`None` for types without a fixed size); an extension type
/// with the driver's internal prefix has its extension's size.
pub fn element_size(t: OperandType) -> Option<usize> {
    t.element_size().or_else(|| extensions::element_size(t))
}

// ---------------------------------------------------------------------------------------
// Raw JSON shapes.

#[derive(Deserialize)]
struct RawCase {
    name: String,
    spec: String,
    min_hal_version: String,
    model: RawModel,
    expect_failure: bool,
    #[serde(default)]
    multinomial_tolerance: f64,
    inputs: Vec<RawIo>,
    outputs: Vec<RawIo>,
}

#[derive(Deserialize)]
struct RawModel {
    main: RawSubgraph,
    #[serde(default)]
    referenced: Vec<RawSubgraph>,
    #[serde(default)]
    relax_fp32_to_fp16: bool,
    #[serde(default)]
    extension_name_to_prefix: Vec<RawExtensionPrefix>,
}

#[derive(Deserialize)]
struct RawExtensionPrefix {
    name: String,
    prefix: u16,
}

/// A type: a name (HAL, or `extension:type`) or the raw HAL value.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawType {
    Name(String),
    Value(i32),
}

#[derive(Deserialize)]
struct RawSubgraph {
    operands: Vec<RawOperand>,
    operations: Vec<RawOperation>,
    input_indexes: Vec<u32>,
    output_indexes: Vec<u32>,
}

#[derive(Deserialize)]
struct RawOperand {
    r#type: RawType,
    dimensions: Vec<u32>,
    #[serde(default)]
    scale: f32,
    #[serde(default)]
    zero_point: i32,
    lifetime: String,
    #[serde(default)]
    channel_quant: Option<RawChannelQuant>,
    #[serde(default)]
    data: Option<Vec<Value>>,
    #[serde(default)]
    extension_params: Option<Vec<u8>>,
}

#[derive(Deserialize)]
struct RawChannelQuant {
    channel_dim: u32,
    scales: Vec<f32>,
}

#[derive(Deserialize)]
struct RawOperation {
    r#type: RawType,
    inputs: Vec<u32>,
    outputs: Vec<u32>,
}

#[derive(Deserialize)]
struct RawIo {
    operand: u32,
    dimensions: Vec<u32>,
    data: Vec<Value>,
    #[serde(default)]
    ignored: bool,
}

// ---------------------------------------------------------------------------------------
// Value encoding.

fn value_f64(v: &Value) -> Result<f64, CorpusError> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| invalid(format!("bad number {n}"))),
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Inf" => Ok(f64::INFINITY),
            "-Inf" => Ok(f64::NEG_INFINITY),
            _ => Err(invalid(format!("expected a number, got string {s:?}"))),
        },
        other => Err(invalid(format!("expected a number, got {other}"))),
    }
}

fn value_int(v: &Value, min: i64, max: i64, what: &str) -> Result<i64, CorpusError> {
    let n = match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i
            } else if n.as_u64().is_some() {
                return Err(invalid(format!("{n} is out of range for {what}")));
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f.fract() != 0.0 || !f.is_finite() || f.abs() > 9.0e15 {
                    return Err(invalid(format!("{n} is not an integer ({what})")));
                }
                f as i64
            }
        }
        Value::Bool(b) => i64::from(*b),
        other => {
            return Err(invalid(format!(
                "expected an integer for {what}, got {other}"
            )))
        }
    };
    if n < min || n > max {
        return Err(invalid(format!("{n} is out of range for {what}")));
    }
    Ok(n)
}

/// How values of a type of `model` are written: the extension's value kind for an
/// extension type of a supported extension.
fn extension_kind(model: &Model, t: OperandType) -> Option<ValueKind> {
    let canonical = extensions::canonical_operand_type(model, t)?;
    extensions::operand_type_def(canonical).map(|(_, d)| d.value)
}

/// Encode JSON values as little-endian bytes of `t`'s element type (`ext`: the value kind
/// of an extension type).
fn encode(
    t: OperandType,
    ext: Option<ValueKind>,
    values: &[Value],
) -> Result<Vec<u8>, CorpusError> {
    let size = t.element_size().unwrap_or(match t {
        OperandType::SUBGRAPH => 4,
        OperandType::OEM => 1,
        _ => 0,
    });
    let mut out = Vec::with_capacity(values.len().saturating_mul(size));
    for v in values {
        if t.is_extension() {
            match ext {
                Some(ValueKind::I64) => {
                    let n = value_int(v, i64::MIN, i64::MAX, "int64")?;
                    out.extend_from_slice(&n.to_le_bytes());
                }
                Some(ValueKind::U64) => {
                    let n = match v {
                        Value::Number(n) => n.as_u64(),
                        _ => None,
                    }
                    .ok_or_else(|| invalid(format!("expected a uint64, got {v}")))?;
                    out.extend_from_slice(&n.to_le_bytes());
                }
                None => return Err(invalid(format!("cannot encode values of type {t}"))),
            }
            continue;
        }
        match t {
            OperandType::FLOAT32 | OperandType::TENSOR_FLOAT32 => {
                let f = value_f64(v)?;
                if f.is_finite() && f.abs() > f64::from(f32::MAX) {
                    return Err(invalid(format!("{f} is out of range for float32")));
                }
                out.extend_from_slice(&(f as f32).to_le_bytes());
            }
            OperandType::FLOAT16 | OperandType::TENSOR_FLOAT16 => {
                let f = value_f64(v)?;
                if f.is_finite() && f.abs() > 65504.0 {
                    return Err(invalid(format!("{f} is out of range for float16")));
                }
                // Through f32, as the old hand-written conversion did: each step rounds to
                // nearest even (half's f64 path truncates before rounding).
                out.extend_from_slice(&half::f16::from_f32(f as f32).to_le_bytes());
            }
            OperandType::INT32 | OperandType::TENSOR_INT32 => {
                let n = value_int(v, i32::MIN.into(), i32::MAX.into(), "int32")?;
                out.extend_from_slice(&(n as i32).to_le_bytes());
            }
            OperandType::UINT32 | OperandType::SUBGRAPH => {
                let n = value_int(v, 0, u32::MAX.into(), "uint32")?;
                out.extend_from_slice(&(n as u32).to_le_bytes());
            }
            OperandType::TENSOR_QUANT8_ASYMM | OperandType::OEM | OperandType::TENSOR_OEM_BYTE => {
                out.push(value_int(v, 0, 255, "uint8")? as u8);
            }
            OperandType::TENSOR_QUANT8_SYMM
            | OperandType::TENSOR_QUANT8_ASYMM_SIGNED
            | OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL => {
                out.push(value_int(v, -128, 127, "int8")? as i8 as u8);
            }
            OperandType::TENSOR_QUANT16_SYMM => {
                let n = value_int(v, i16::MIN.into(), i16::MAX.into(), "int16")?;
                out.extend_from_slice(&(n as i16).to_le_bytes());
            }
            OperandType::TENSOR_QUANT16_ASYMM => {
                let n = value_int(v, 0, u16::MAX.into(), "uint16")?;
                out.extend_from_slice(&(n as u16).to_le_bytes());
            }
            OperandType::BOOL | OperandType::TENSOR_BOOL8 => {
                out.push(value_int(v, 0, 1, "bool8")? as u8);
            }
            other => return Err(invalid(format!("cannot encode values of type {other}"))),
        }
    }
    Ok(out)
}

fn align_up(n: usize, a: usize) -> usize {
    n.div_ceil(a).saturating_mul(a)
}

fn to_u32(n: usize, what: &str) -> Result<u32, CorpusError> {
    u32::try_from(n).map_err(|_| invalid(format!("{what} {n} does not fit in u32")))
}

/// Number of elements of fully specified `dims` (1 for a scalar); `None` on overflow.
fn element_count(dims: &[u32]) -> Option<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
}

struct ModelBuilder {
    operand_values: Vec<u8>,
    pool_bytes: Vec<u8>,
    /// The model's extension prefixes (and nothing else), to resolve types.
    prefixes: Model,
}

impl ModelBuilder {
    /// A type given as `extension:type` (type by name or number), encoded with the
    /// model's prefix for the extension.
    fn extension_type(&self, s: &str, operand: bool) -> Result<Option<i32>, CorpusError> {
        let Some((name, t)) = s.split_once(':') else {
            return Ok(None);
        };
        let prefix = self
            .prefixes
            .extension_name_to_prefix
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.prefix)
            .ok_or_else(|| {
                invalid(format!(
                    "{s:?}: {name:?} is not in extension_name_to_prefix"
                ))
            })?;
        let number = match t.parse::<u16>() {
            Ok(n) => n,
            Err(_) => {
                let ext = extensions::by_name(name)
                    .ok_or_else(|| invalid(format!("{s:?}: unknown extension {name:?}")))?;
                let found = if operand {
                    ext.operand_types
                        .iter()
                        .find(|d| d.name == t)
                        .map(|d| d.r#type)
                } else {
                    ext.operations.iter().find(|o| o.1 == t).map(|o| o.0)
                };
                found.ok_or_else(|| invalid(format!("{s:?}: {name} declares no {t:?}")))?
            }
        };
        Ok(Some(extensions::encode_type(prefix, number)))
    }

    fn operand_type(&self, raw: &RawType) -> Result<OperandType, CorpusError> {
        match raw {
            RawType::Value(v) => Ok(OperandType(*v)),
            RawType::Name(n) => match self.extension_type(n, true)? {
                Some(v) => Ok(OperandType(v)),
                None => {
                    OperandType::from_name(n).ok_or_else(|| invalid(format!("unknown type {n:?}")))
                }
            },
        }
    }

    fn operation_type(&self, raw: &RawType) -> Result<OperationType, CorpusError> {
        match raw {
            RawType::Value(v) => Ok(OperationType(*v)),
            RawType::Name(n) => match self.extension_type(n, false)? {
                Some(v) => Ok(OperationType(v)),
                None => OperationType::from_name_any(n)
                    .ok_or_else(|| invalid(format!("unknown type {n:?}"))),
            },
        }
    }

    fn subgraph(
        &mut self,
        raw: &RawSubgraph,
        n_referenced: usize,
        where_: &str,
    ) -> Result<Subgraph, CorpusError> {
        let mut operations = Vec::with_capacity(raw.operations.len());
        let mut consumers = vec![0u32; raw.operands.len()];
        for (i, op) in raw.operations.iter().enumerate() {
            let t = self
                .operation_type(&op.r#type)
                .map_err(|e| invalid(format!("{where_} operation {i}: {e}")))?;
            for &input in &op.inputs {
                let c = consumers.get_mut(input as usize).ok_or_else(|| {
                    invalid(format!(
                        "{where_} operation {i}: input {input} out of range"
                    ))
                })?;
                *c = c.saturating_add(1);
            }
            operations.push(Operation {
                r#type: t,
                inputs: op.inputs.clone(),
                outputs: op.outputs.clone(),
            });
        }
        let mut operands = Vec::with_capacity(raw.operands.len());
        for (i, o) in raw.operands.iter().enumerate() {
            let what = format!("{where_} operand {i}");
            let t = self
                .operand_type(&o.r#type)
                .map_err(|e| invalid(format!("{what}: {e}")))?;
            let lifetime = OperandLifeTime::from_name(&o.lifetime)
                .ok_or_else(|| invalid(format!("{what}: unknown lifetime {:?}", o.lifetime)))?;
            let mut location = DataLocation::default();
            match lifetime {
                OperandLifeTime::CONSTANT_COPY | OperandLifeTime::CONSTANT_REFERENCE => {
                    let data = o
                        .data
                        .as_deref()
                        .ok_or_else(|| invalid(format!("{what}: constant without data")))?;
                    let kind = extension_kind(&self.prefixes, t);
                    let bytes =
                        encode(t, kind, data).map_err(|e| invalid(format!("{what}: {e}")))?;
                    let buf = if lifetime == OperandLifeTime::CONSTANT_COPY {
                        &mut self.operand_values
                    } else {
                        &mut self.pool_bytes
                    };
                    let align = if lifetime == OperandLifeTime::CONSTANT_COPY {
                        COPY_ALIGN
                    } else {
                        POOL_ALIGN
                    };
                    let offset = align_up(buf.len(), align);
                    buf.resize(offset, 0);
                    buf.extend_from_slice(&bytes);
                    location = DataLocation {
                        pool_index: 0,
                        offset: to_u32(offset, "constant offset")?,
                        length: to_u32(bytes.len(), "constant length")?,
                    };
                }
                OperandLifeTime::SUBGRAPH => {
                    let data = o
                        .data
                        .as_deref()
                        .ok_or_else(|| invalid(format!("{what}: SUBGRAPH without an index")))?;
                    let [v] = data else {
                        return Err(invalid(format!("{what}: SUBGRAPH data must be one index")));
                    };
                    let index = value_int(v, 0, u32::MAX.into(), "subgraph index")?;
                    if index as usize >= n_referenced {
                        return Err(invalid(format!(
                            "{what}: subgraph index {index} out of range"
                        )));
                    }
                    location.offset = index as u32;
                }
                _ => {}
            }
            let extra_params = match (&o.channel_quant, &o.extension_params) {
                (Some(cq), None) => ExtraParams::ChannelQuant(SymmPerChannelQuantParams {
                    scales: cq.scales.clone(),
                    channel_dim: cq.channel_dim,
                }),
                (None, Some(bytes)) => ExtraParams::Extension(bytes.clone()),
                (None, None) => ExtraParams::None,
                (Some(_), Some(_)) => {
                    return Err(invalid(format!(
                        "{what}: both channel_quant and extension_params"
                    )))
                }
            };
            operands.push(Operand {
                r#type: t,
                dimensions: o.dimensions.clone(),
                number_of_consumers: consumers[i],
                scale: o.scale,
                zero_point: o.zero_point,
                lifetime,
                location,
                extra_params,
            });
        }
        Ok(Subgraph {
            operands,
            operations,
            input_indexes: raw.input_indexes.clone(),
            output_indexes: raw.output_indexes.clone(),
        })
    }
}

/// Checks a case's inputs and outputs against its model before anything is sized from
/// them: they must be the main subgraph's inputs and outputs, in order; given dimensions
/// must agree with the operand's where the model specifies them; and the values given must
/// be as many as the dimensions say (so that an output buffer sized from its dimensions is
/// never larger than the line that describes it, or than the model's own operand for an
/// expected failure's output given without values).
fn check_arguments(
    main: &Subgraph,
    inputs: &[RawIo],
    outputs: &[RawIo],
    expect_failure: bool,
) -> Result<(), CorpusError> {
    for (what, given, model) in [
        ("input", inputs, &main.input_indexes),
        ("output", outputs, &main.output_indexes),
    ] {
        if given.len() != model.len() {
            return Err(invalid(format!(
                "INVALID_ARGUMENT: {} {what}s given, the model has {}",
                given.len(),
                model.len()
            )));
        }
        for (k, (io, &operand)) in given.iter().zip(model).enumerate() {
            if io.operand != operand {
                return Err(invalid(format!(
                    "INVALID_ARGUMENT: {what} {k} names operand {}, which is not the model's {what} {k} (operand {operand})",
                    io.operand
                )));
            }
            let declared = main
                .operands
                .get(operand as usize)
                .map(|o| o.dimensions.as_slice())
                .ok_or_else(|| invalid(format!("{what} {k}: operand {operand} out of range")))?;
            let agrees = declared.is_empty()
                || (declared.len() == io.dimensions.len()
                    && declared
                        .iter()
                        .zip(&io.dimensions)
                        .all(|(&d, &g)| d == 0 || d == g));
            if !agrees {
                return Err(invalid(format!(
                    "INVALID_ARGUMENT: {what} {k} has dimensions {:?}, the model's operand {operand} {declared:?}",
                    io.dimensions
                )));
            }
            // An omitted input has no values, whatever its dimensions; a case that expects
            // failure may leave out its outputs' values (they are never compared), but then
            // their size is the model's own, fully specified.
            let omitted = io.data.is_empty()
                && match what {
                    "input" => true,
                    _ => {
                        expect_failure
                            && !declared.is_empty()
                            && !declared.contains(&0)
                            && declared == io.dimensions.as_slice()
                    }
                };
            if !omitted && element_count(&io.dimensions) != Some(io.data.len()) {
                return Err(invalid(format!(
                    "INVALID_ARGUMENT: {what} {k} has dimensions {:?} but {} values",
                    io.dimensions,
                    io.data.len()
                )));
            }
        }
    }
    Ok(())
}

/// Parse one corpus line into a test case.
pub fn parse_case(json_line: &str) -> Result<TestCase, CorpusError> {
    let raw: RawCase = serde_json::from_str(json_line)?;
    let n_ref = raw.model.referenced.len();
    let extension_name_to_prefix: Vec<ExtensionNameAndPrefix> = raw
        .model
        .extension_name_to_prefix
        .iter()
        .map(|e| ExtensionNameAndPrefix {
            name: e.name.clone(),
            prefix: e.prefix,
        })
        .collect();
    let mut b = ModelBuilder {
        operand_values: Vec::new(),
        pool_bytes: Vec::new(),
        prefixes: Model {
            extension_name_to_prefix: extension_name_to_prefix.clone(),
            ..Model::default()
        },
    };
    let main = b.subgraph(&raw.model.main, n_ref, "main")?;
    let mut referenced = Vec::with_capacity(n_ref);
    for (i, s) in raw.model.referenced.iter().enumerate() {
        referenced.push(b.subgraph(s, n_ref, &format!("referenced[{i}]"))?);
    }
    let pools = if b.pool_bytes.is_empty() {
        Vec::new()
    } else {
        vec![Memory::ashmem_with(&b.pool_bytes).map_err(CorpusError::Memory)?]
    };
    let model = Model {
        main,
        referenced,
        operand_values: b.operand_values,
        pools,
        relax_computation_float32_to_float16: raw.model.relax_fp32_to_fp16,
        extension_name_to_prefix,
    };

    let main_type = |operand: u32, what: &str| -> Result<OperandType, CorpusError> {
        model
            .main
            .operands
            .get(operand as usize)
            .map(|o| o.r#type)
            .ok_or_else(|| invalid(format!("{what} refers to operand {operand}, out of range")))
    };
    check_arguments(&model.main, &raw.inputs, &raw.outputs, raw.expect_failure)?;
    let mut inputs = Vec::with_capacity(raw.inputs.len());
    for (i, io) in raw.inputs.iter().enumerate() {
        let t = main_type(io.operand, &format!("input {i}"))?;
        let kind = extension_kind(&model, t);
        let data = encode(t, kind, &io.data).map_err(|e| invalid(format!("input {i}: {e}")))?;
        // As the VTS harness does: an input without data is omitted ("has no value"), whatever
        // its dimensions (optional LSTM inputs are given as `[0]` with no data).
        let has_no_value = io.data.is_empty();
        inputs.push(TestBuffer {
            operand: io.operand,
            dimensions: io.dimensions.clone(),
            data,
            has_no_value,
        });
    }
    let mut outputs = Vec::with_capacity(raw.outputs.len());
    for (i, io) in raw.outputs.iter().enumerate() {
        let t = main_type(io.operand, &format!("output {i}"))?;
        let kind = extension_kind(&model, t);
        let data = encode(t, kind, &io.data).map_err(|e| invalid(format!("output {i}: {e}")))?;
        outputs.push(TestOutput {
            operand: io.operand,
            dimensions: io.dimensions.clone(),
            data,
            ignored: io.ignored,
        });
    }
    if !raw.multinomial_tolerance.is_finite() || raw.multinomial_tolerance < 0.0 {
        return Err(invalid(
            "multinomial_tolerance must be a non-negative number",
        ));
    }
    let relaxed = model.relax_computation_float32_to_float16
        || std::iter::once(&model.main)
            .chain(&model.referenced)
            .flat_map(|s| &s.operands)
            .any(|o| o.r#type == OperandType::TENSOR_FLOAT16);
    Ok(TestCase {
        name: raw.name,
        spec: raw.spec,
        min_hal_version: raw.min_hal_version,
        model,
        expect_failure: raw.expect_failure,
        multinomial_tolerance: raw.multinomial_tolerance,
        inputs,
        outputs,
        relaxed,
    })
}

impl TestCase {
    /// The main-subgraph operand type of `operand` (for decoding buffers); an extension
    /// type under the driver's internal prefix (see `crate::extensions`), so that its
    /// values can be decoded without the model's prefix map.
    pub fn operand_type(&self, operand: u32) -> Option<OperandType> {
        let t = self.model.main.operands.get(operand as usize)?.r#type;
        if t.is_extension() {
            return extensions::canonical_operand_type(&self.model, t);
        }
        Some(t)
    }

    /// Build a request with one "ashmem" pool holding every input's bytes, then space for
    /// every expected output (size from the expected dimensions and element size), each at a
    /// 64-byte aligned offset. Omitted inputs are passed as `has_no_value`. Returns the
    /// request, the pool (also in the request) and the output locations.
    pub fn make_request(&self) -> std::io::Result<(Request, Memory, Vec<DataLocation>)> {
        let bad = |msg: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, msg);
        let mut bytes = Vec::new();
        let mut inputs = Vec::with_capacity(self.inputs.len());
        for input in &self.inputs {
            if input.has_no_value {
                inputs.push(RequestArgument {
                    has_no_value: true,
                    ..Default::default()
                });
                continue;
            }
            let offset = align_up(bytes.len(), POOL_ALIGN);
            bytes.resize(offset, 0);
            bytes.extend_from_slice(&input.data);
            inputs.push(RequestArgument {
                has_no_value: false,
                location: DataLocation {
                    pool_index: 0,
                    offset: u32::try_from(offset).map_err(|_| bad("request too large".into()))?,
                    length: u32::try_from(input.data.len())
                        .map_err(|_| bad("input too large".into()))?,
                },
                dimensions: input.dimensions.clone(),
            });
        }
        let mut outputs = Vec::with_capacity(self.outputs.len());
        let mut locations = Vec::with_capacity(self.outputs.len());
        for output in &self.outputs {
            let t = self
                .operand_type(output.operand)
                .ok_or_else(|| bad(format!("output operand {} out of range", output.operand)))?;
            let size = element_size(t)
                .and_then(|es| element_count(&output.dimensions).and_then(|n| n.checked_mul(es)))
                .ok_or_else(|| bad(format!("output operand {} has no size", output.operand)))?;
            let offset = align_up(bytes.len(), POOL_ALIGN);
            bytes.resize(offset.saturating_add(size), 0);
            let location = DataLocation {
                pool_index: 0,
                offset: u32::try_from(offset).map_err(|_| bad("request too large".into()))?,
                length: u32::try_from(size).map_err(|_| bad("output too large".into()))?,
            };
            locations.push(location);
            outputs.push(RequestArgument {
                has_no_value: false,
                location,
                dimensions: output.dimensions.clone(),
            });
        }
        // Never an empty pool: a zero-length mapping cannot be created.
        let total = align_up(bytes.len().max(1), POOL_ALIGN);
        bytes.resize(total, 0);
        let pool = Memory::ashmem_with(&bytes)?;
        let request = Request {
            inputs,
            outputs,
            pools: vec![RequestMemoryPool::HidlMemory(pool.clone())],
        };
        Ok((request, pool, locations))
    }
}

/// One line of a corpus file: its 1-based line number and the parsed case or its error.
pub type CorpusEntry = (usize, Result<TestCase, CorpusError>);

/// The longest corpus line read, in bytes (64 MiB; the shipped corpus's longest line is
/// far below it). A longer line is skipped unread (it never sits in memory) and reported as
/// an error of its own; the lines after it are read as usual.
pub const MAX_LINE: usize = 64 << 20;

/// Lazy reader over the raw lines of a corpus file, yielding `(line_number, text)` for every
/// non-blank line. It holds at most one line of at most [`MAX_LINE`] bytes. A read error (a
/// truncated or corrupt gzip stream) is yielded once and ends the iteration.
pub struct CorpusLines {
    path: PathBuf,
    reader: BufReader<Box<dyn Read + Send>>,
    limit: usize,
    line: usize,
    failed: bool,
}

impl CorpusLines {
    /// The file being read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads lines of `reader` (named `path` in errors), each at most `limit` bytes.
    pub fn with_limit(path: &Path, reader: Box<dyn Read + Send>, limit: usize) -> CorpusLines {
        CorpusLines {
            path: path.to_path_buf(),
            reader: BufReader::new(reader),
            limit,
            line: 0,
            failed: false,
        }
    }

    /// The next raw line without its end: `None` at the end of the stream, `Some(None)`
    /// for a line over the limit (consumed, not kept).
    fn read_line(&mut self) -> std::io::Result<Option<Option<Vec<u8>>>> {
        let mut buf = Vec::new();
        let mut overlong = false;
        let mut any = false;
        loop {
            let chunk = match self.reader.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                break;
            }
            any = true;
            let (part, done) = match chunk.iter().position(|&b| b == b'\n') {
                Some(k) => (&chunk[..k], k + 1),
                None => (chunk, chunk.len()),
            };
            if !overlong {
                if buf.len() + part.len() > self.limit {
                    overlong = true;
                    buf = Vec::new();
                } else {
                    buf.extend_from_slice(part);
                }
            }
            let ended = done > part.len();
            self.reader.consume(done);
            if ended {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        Ok(Some((!overlong).then_some(buf)))
    }
}

impl Iterator for CorpusLines {
    type Item = (usize, Result<String, CorpusError>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            let next = self.read_line();
            self.line += 1;
            let err = match next {
                Ok(None) => return None,
                Ok(Some(Some(bytes))) => match String::from_utf8(bytes) {
                    Ok(s) if s.trim().is_empty() => continue,
                    Ok(s) => return Some((self.line, Ok(s))),
                    Err(_) => invalid("the line is not UTF-8"),
                },
                Ok(Some(None)) => invalid(format!(
                    "the line is longer than the corpus line limit ({})",
                    if self.limit.is_multiple_of(1 << 20) {
                        format!("{} MiB", self.limit >> 20)
                    } else {
                        format!("{} bytes", self.limit)
                    }
                )),
                Err(source) => {
                    self.failed = true;
                    CorpusError::Io {
                        path: self.path.clone(),
                        source,
                    }
                }
            };
            return Some((self.line, Err(at_line(&self.path, self.line, err))));
        }
    }
}

fn at_line(path: &Path, line: usize, e: CorpusError) -> CorpusError {
    CorpusError::Line {
        path: path.to_path_buf(),
        line,
        source: Box::new(e),
    }
}

/// Parses line `line` of corpus file `path` (its errors say where they come from).
pub fn parse_line(path: &Path, line: usize, text: &str) -> Result<TestCase, CorpusError> {
    parse_case(text).map_err(|e| at_line(path, line, e))
}

/// Lazy reader over a corpus file, yielding `(line_number, case)` for every non-blank line.
pub struct CorpusReader {
    lines: CorpusLines,
}

impl Iterator for CorpusReader {
    type Item = CorpusEntry;

    fn next(&mut self) -> Option<Self::Item> {
        let (line, text) = self.lines.next()?;
        let r = text.and_then(|t| parse_line(&self.lines.path, line, &t));
        Some((line, r))
    }
}

/// Open a `.jsonl` or `.jsonl.gz` corpus file for lazy reading of its raw lines.
pub fn open_lines(path: &Path) -> Result<CorpusLines, CorpusError> {
    let io = |source| CorpusError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let reader: Box<dyn Read + Send> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    Ok(CorpusLines::with_limit(path, reader, MAX_LINE))
}

/// Open a `.jsonl` or `.jsonl.gz` corpus file for lazy reading.
pub fn open_corpus(path: &Path) -> Result<CorpusReader, CorpusError> {
    Ok(CorpusReader {
        lines: open_lines(path)?,
    })
}

/// The number of cases (non-blank lines) in corpus files, without parsing them; files that
/// cannot be read count what could be read.
pub fn count_cases(paths: &[PathBuf]) -> usize {
    paths
        .iter()
        .filter_map(|p| open_lines(p).ok())
        .map(Iterator::count)
        .sum()
}

/// Read a whole `.jsonl` or `.jsonl.gz` corpus file: one `(line_number, case)` per
/// non-blank line. Only failing to open the file is an outer error.
pub fn read_corpus(path: &Path) -> Result<Vec<CorpusEntry>, CorpusError> {
    Ok(open_corpus(path)?.collect())
}

/// Find the case called `name` in the given corpus files (first match wins). Lines that fail
/// to parse are skipped unless their name matches, in which case their error is returned.
pub fn find_case(paths: &[PathBuf], name: &str) -> Result<TestCase, CorpusError> {
    let needle = format!("\"name\":\"{name}\"");
    for path in paths {
        for (line, text) in open_lines(path)? {
            let text = text?;
            // Cheap pre-filter before a full parse.
            if !text.contains(&needle) && !text.contains(name) {
                continue;
            }
            let case = parse_line(path, line, &text)?;
            if case.name == name {
                return Ok(case);
            }
        }
    }
    Err(CorpusError::NotFound(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADD: &str = r#"{"name":"add/add","spec":"add","min_hal_version":"V1_0","model":{"main":{"operands":[{"type":"TENSOR_FLOAT32","dimensions":[2],"scale":0.0,"zero_point":0,"lifetime":"SUBGRAPH_INPUT","channel_quant":null,"data":null},{"type":"TENSOR_FLOAT32","dimensions":[2],"scale":0.0,"zero_point":0,"lifetime":"SUBGRAPH_INPUT","channel_quant":null,"data":null},{"type":"INT32","dimensions":[],"scale":0.0,"zero_point":0,"lifetime":"CONSTANT_COPY","channel_quant":null,"data":[0]},{"type":"TENSOR_FLOAT32","dimensions":[2],"scale":0.0,"zero_point":0,"lifetime":"SUBGRAPH_OUTPUT","channel_quant":null,"data":null}],"operations":[{"type":"ADD","inputs":[0,1,2],"outputs":[3]}],"input_indexes":[0,1],"output_indexes":[3]},"referenced":[],"relax_fp32_to_fp16":false},"expect_failure":false,"multinomial_tolerance":0.0,"inputs":[{"operand":0,"dimensions":[2],"data":[1.0,2.0]},{"operand":1,"dimensions":[2],"data":[3.0,4.0]}],"outputs":[{"operand":3,"dimensions":[2],"data":[4.0,6.0],"ignored":false}]}"#;

    #[test]
    fn parses_add() {
        let c = parse_case(ADD).unwrap();
        assert_eq!(c.name, "add/add");
        assert_eq!(c.model.main.operands.len(), 4);
        assert_eq!(c.model.main.operands[0].number_of_consumers, 1);
        assert_eq!(c.model.main.operands[3].number_of_consumers, 0);
        assert_eq!(c.model.operand_values, vec![0, 0, 0, 0]);
        assert_eq!(
            c.model.main.operands[2].location,
            DataLocation {
                pool_index: 0,
                offset: 0,
                length: 4
            }
        );
        assert_eq!(
            c.inputs[0].data,
            [1.0f32.to_le_bytes(), 2.0f32.to_le_bytes()].concat()
        );
        assert!(!c.relaxed);
        let (req, pool, locs) = c.make_request().unwrap();
        assert_eq!(req.inputs.len(), 2);
        assert_eq!(
            locs,
            vec![DataLocation {
                pool_index: 0,
                offset: 128,
                length: 8
            }]
        );
        assert!(pool.size >= 136);
    }

    const FIB: &str = include_str!("../../../cases/extensions/fibonacci_quant64.json");

    #[test]
    fn parses_extension_fields() {
        let c = parse_case(FIB.trim()).unwrap();
        let m = &c.model;
        assert_eq!(m.extension_name_to_prefix.len(), 1);
        assert_eq!(m.extension_name_to_prefix[0].prefix, 7);
        assert_eq!(m.main.operands[0].r#type, OperandType(7 << 16));
        assert_eq!(m.main.operations[0].r#type, OperationType(7 << 16));
        assert!(
            matches!(&m.main.operands[1].extra_params, ExtraParams::Extension(b) if b.len() == 16)
        );
        assert_eq!(c.inputs[0].data, 10i64.to_le_bytes());
        assert_eq!(c.outputs[0].data.len(), 80);
        // Buffers are decoded by the driver's internal type.
        assert_eq!(
            c.operand_type(1),
            Some(crate::extensions::fibonacci::TENSOR_QUANT64_ASYMM)
        );
        let (_, _, locs) = c.make_request().unwrap();
        assert_eq!(locs[0].length, 80);
        // Raw values and numbered types.
        let raw = FIB
            .replace("\"com.example.fibonacci:EXAMPLE_FIBONACCI\"", "458752")
            .replace(
                "com.example.fibonacci:EXAMPLE_INT64",
                "com.example.fibonacci:0",
            );
        let r = parse_case(raw.trim()).unwrap();
        assert_eq!(r.model, c.model);
    }

    #[test]
    fn hostile_extension_fields_are_errors() {
        for bad in [
            FIB.replace("\"prefix\":7", "\"prefix\":70000"),
            FIB.replace("\"prefix\":7", "\"prefix\":-1"),
            FIB.replace(
                "com.example.fibonacci:EXAMPLE_INT64",
                "com.example.fibonacci:NOPE",
            ),
            FIB.replace("com.example.fibonacci:EXAMPLE_INT64", "com.other.x:0"),
            FIB.replace(
                "com.example.fibonacci:EXAMPLE_INT64",
                "com.example.fibonacci:70000",
            ),
            FIB.replace("\"extension_params\":[0,", "\"extension_params\":[300,"),
            FIB.replace(
                "\"extension_params\":[",
                "\"channel_quant\":{\"channel_dim\":0,\"scales\":[1.0]},\"extension_params\":[",
            ),
            FIB.replace("\"data\":[10]", "\"data\":[1.5]"),
            FIB.replace("\"data\":[12,", "\"data\":[-12,"),
            FIB.replace("\"data\":[12,", "\"data\":[\"x\","),
            FIB.replace("\"data\":[10]", "\"data\":[99999999999999999999]"),
        ] {
            assert_ne!(bad, FIB, "the mutation applies");
            assert!(parse_case(bad.trim()).is_err(), "{bad}");
        }
    }

    #[test]
    fn lines_over_the_limit_are_skipped_and_reported() {
        let long = "x".repeat(ADD.len() + 1);
        // Line 3 blank, line 4 not UTF-8, line 5 without a final newline.
        let mut bytes = format!("{ADD}\n{long}\n\n").into_bytes();
        bytes.extend_from_slice(b"\xff\n");
        bytes.extend_from_slice(ADD.as_bytes());
        let lines: Vec<_> = CorpusLines::with_limit(
            Path::new("t.jsonl"),
            Box::new(std::io::Cursor::new(bytes)),
            ADD.len(),
        )
        .collect();
        let got: Vec<(usize, bool)> = lines.iter().map(|(n, r)| (*n, r.is_ok())).collect();
        assert_eq!(got, [(1, true), (2, false), (4, false), (5, true)]);
        let err = lines[1].1.as_ref().unwrap_err().to_string();
        assert!(
            err.contains("t.jsonl:2") && err.contains("line limit"),
            "{err}"
        );
        assert_eq!(lines[3].1.as_ref().unwrap(), ADD);
    }

    #[test]
    fn hostile_lines_are_errors() {
        for bad in [
            "",
            "{",
            "[]",
            "{\"name\":1}",
            &ADD.replace("\"TENSOR_FLOAT32\"", "\"TENSOR_FLOAT64\""),
            &ADD.replace("SUBGRAPH_INPUT", "SOMETIMES"),
            &ADD.replace("\"data\":[0]", "\"data\":[1e12]"),
            &ADD.replace("\"data\":[0]", "\"data\":[0.5]"),
            &ADD.replace("\"data\":[0]", "\"data\":[\"x\"]"),
            &ADD.replace("\"data\":[1.0,2.0]", "\"data\":[1e300,2.0]"),
            &ADD.replace("\"operand\":0", "\"operand\":99"),
            &ADD.replace("\"inputs\":[0,1,2]", "\"inputs\":[0,1,7]"),
            &ADD.replace("\"dimensions\":[2]", "\"dimensions\":[-2]"),
        ] {
            assert!(parse_case(bad).is_err(), "{bad}");
        }
    }
}
