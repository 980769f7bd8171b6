//! vnpu byte code: what the compiler plugin emits per partition and the dispatch library
//! loads. It is the partition's HAL model in the driver's own model encoding (the model
//! cache's body, [`vnpu_driver::cache::format`]), its constants in a data block beside it,
//! and which HAL input and output each of the LiteRT dispatch op's tensors is.
//!
//! ```text
//! u64 magic "VNPULRT\0" | u32 version | list of i32 input map (-1: a constant the model
//! holds) | list of u32 output map | bytes: model body | bytes: data block
//! ```
//! (lists and byte strings are u64-length-prefixed, little-endian, as in
//! [`vnpu_driver::cache::wire`]). A byte code file is hostile until [`decode`] accepts it:
//! every length and offset is checked, the model is validated as the HAL validates a
//! client's, and any fault is a [`ByteCodeError`], never a panic.

use std::collections::HashMap;

use vnpu_driver::cache::format::{decode_body, encode_body, ConstValue, Image, InlineBytes};
use vnpu_driver::cache::wire::{Reader, Writer};
use vnpu_driver::hal::{DataLocation, HalVersion, Memory, Model, OperandLifeTime};
use vnpu_driver::tflite::model_level;
use vnpu_driver::validate::has_unspecified_dimensions;
use vnpu_emu::tensor::Layout;

/// The first eight bytes.
pub const MAGIC: [u8; 8] = *b"VNPULRT\0";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;
/// Constants up to this many bytes sit in the model body; longer ones in the data block.
const INLINE_MAX: usize = InlineBytes::SMALL;
/// Alignment of each constant in the data block.
const ALIGN: usize = 64;

/// Why byte code could not be written or read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ByteCodeError {
    /// Not vnpu byte code at all.
    #[error("not vnpu byte code (bad magic)")]
    Magic,
    /// Byte code of another format version.
    #[error("vnpu byte code version {0}; this vnpu reads version {VERSION}")]
    Version(u32),
    /// Truncated, overlong or inconsistent.
    #[error("malformed vnpu byte code: {0}")]
    Malformed(String),
    /// A model the format cannot carry.
    #[error("cannot encode the partition as byte code: {0}")]
    Unencodable(String),
    /// Creating the constants' memory failed.
    #[error("memory for the byte code's constants: {0}")]
    Memory(String),
}

fn bad(why: impl Into<String>) -> ByteCodeError {
    ByteCodeError::Malformed(why.into())
}

/// A partition as byte code carries it.
#[derive(Debug)]
pub struct ByteCode {
    /// The HAL model, its constants in `operand_values` and one pool (validated).
    pub model: Model,
    /// For each input of the dispatch op, the model input it is (`None`: a constant the
    /// model already holds, its buffer ignored).
    pub inputs: Vec<Option<u32>>,
    /// For each output of the dispatch op, the model output it is.
    pub outputs: Vec<u32>,
    /// The lowest interface level the model is valid at (what it is prepared at).
    pub level: HalVersion,
}

/// The bytes of every constant operand of the main subgraph.
fn constant_values(model: &Model) -> Result<Vec<(u32, Vec<u8>)>, ByteCodeError> {
    let mut pools: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut out = Vec::new();
    for (i, o) in model.main.operands.iter().enumerate() {
        let (start, len) = (o.location.offset as usize, o.location.length as usize);
        let bytes = match o.lifetime {
            OperandLifeTime::CONSTANT_COPY => model.operand_values.get(start..start + len),
            OperandLifeTime::CONSTANT_REFERENCE => {
                let p = o.location.pool_index;
                if let std::collections::hash_map::Entry::Vacant(e) = pools.entry(p) {
                    let pool = model
                        .pools
                        .get(p as usize)
                        .ok_or_else(|| ByteCodeError::Unencodable(format!("pool {p}")))?;
                    let bytes = vnpu_driver::memory::read_pool(pool)
                        .map_err(|e| ByteCodeError::Unencodable(e.to_string()))?;
                    e.insert(bytes);
                }
                pools[&p].get(start..start + len)
            }
            _ => continue,
        };
        let bytes =
            bytes.ok_or_else(|| ByteCodeError::Unencodable(format!("operand {i} out of range")))?;
        out.push((i as u32, bytes.to_vec()));
    }
    Ok(out)
}

/// Encodes a partition's model with its dispatch input and output maps.
pub fn encode(
    model: &Model,
    inputs: &[Option<u32>],
    outputs: &[u32],
) -> Result<Vec<u8>, ByteCodeError> {
    if !model.referenced.is_empty() {
        return Err(ByteCodeError::Unencodable(
            "a model with referenced subgraphs".into(),
        ));
    }
    let mut data = Vec::new();
    let mut constants = Vec::new();
    for (i, bytes) in constant_values(model)? {
        let v = if bytes.len() <= INLINE_MAX {
            ConstValue::Inline(InlineBytes::new(&bytes))
        } else {
            let offset = data.len().next_multiple_of(ALIGN);
            data.resize(offset, 0);
            data.extend_from_slice(&bytes);
            ConstValue::Data {
                offset: offset as u64,
                len: bytes.len() as u64,
                layout: Layout::Plain,
            }
        };
        constants.push((i, v));
    }
    let image = Image {
        model: Model {
            operand_values: Vec::new(),
            pools: Vec::new(),
            ..model.clone()
        },
        constants,
        instance: None,
    };
    let mut w = Writer::new();
    w.u64(u64::from_le_bytes(MAGIC));
    w.u32(VERSION);
    w.list(inputs, |w, i| w.i32(i.map_or(-1, |k| k as i32)));
    w.u32s(outputs);
    w.bytes(&encode_body(&image));
    w.bytes(&data);
    Ok(w.into_bytes())
}

/// Decodes and validates byte code.
pub fn decode(bytes: &[u8]) -> Result<ByteCode, ByteCodeError> {
    let mut r = Reader::new(bytes);
    let short = |_| bad("truncated");
    if r.u64().map_err(|_| ByteCodeError::Magic)?.to_le_bytes() != MAGIC {
        return Err(ByteCodeError::Magic);
    }
    let version = r.u32().map_err(short)?;
    if version != VERSION {
        return Err(ByteCodeError::Version(version));
    }
    let inputs = r
        .list(4, |r| {
            let i = r.i32()?;
            Ok((i >= 0).then_some(i as u32))
        })
        .map_err(|e| bad(format!("input map: {e}")))?;
    let outputs = r.u32s().map_err(|e| bad(format!("output map: {e}")))?;
    let body = r.byte_slice().map_err(|e| bad(format!("model: {e}")))?;
    let data = r.byte_slice().map_err(|e| bad(format!("data: {e}")))?;
    r.finish().map_err(|_| bad("bytes after the data block"))?;
    let image = decode_body(body, data.len() as u64).map_err(|e| bad(e.to_string()))?;
    if image.instance.is_some() {
        return Err(bad("a compiled instance (this version carries none)"));
    }
    if !image.model.referenced.is_empty() {
        return Err(bad("referenced subgraphs (this version carries none)"));
    }
    let (model, level) = rebuild(image, data)?;
    let (n_in, n_out) = (
        model.main.input_indexes.len(),
        model.main.output_indexes.len(),
    );
    if let Some(k) = inputs.iter().flatten().find(|&&k| k as usize >= n_in) {
        return Err(bad(format!("input map names model input {k} of {n_in}")));
    }
    if (0..n_in as u32).any(|k| !inputs.contains(&Some(k))) {
        return Err(bad("a model input no dispatch input feeds"));
    }
    if let Some(k) = outputs.iter().find(|&&k| k as usize >= n_out) {
        return Err(bad(format!("output map names model output {k} of {n_out}")));
    }
    let io = model
        .main
        .input_indexes
        .iter()
        .chain(&model.main.output_indexes);
    for &i in io {
        let o = &model.main.operands[i as usize];
        if has_unspecified_dimensions(o.r#type, &o.dimensions) {
            return Err(bad(format!(
                "operand {i}: an input or output of unknown shape"
            )));
        }
    }
    Ok(ByteCode {
        model,
        inputs,
        outputs,
        level,
    })
}

/// The model with its constants back in `operand_values` and one pool, then validated.
fn rebuild(image: Image, data: &[u8]) -> Result<(Model, HalVersion), ByteCodeError> {
    let mut model = image.model;
    let mut has_value = vec![false; model.main.operands.len()];
    for (i, v) in image.constants {
        // decode_body checked every constant's index and data range.
        let o = &mut model.main.operands[i as usize];
        if has_value[i as usize] {
            return Err(bad(format!("operand {i} given two values")));
        }
        has_value[i as usize] = true;
        match v {
            ConstValue::Inline(b) => {
                let offset = model.operand_values.len().next_multiple_of(8);
                model.operand_values.resize(offset, 0);
                model.operand_values.extend_from_slice(b.as_slice());
                o.lifetime = OperandLifeTime::CONSTANT_COPY;
                o.location = DataLocation {
                    pool_index: 0,
                    offset: u32::try_from(offset).map_err(|_| bad("operand values too long"))?,
                    length: b.as_slice().len() as u32,
                };
            }
            ConstValue::Data {
                offset,
                len,
                layout: Layout::Plain,
            } => {
                o.lifetime = OperandLifeTime::CONSTANT_REFERENCE;
                o.location = DataLocation {
                    pool_index: 0,
                    offset: u32::try_from(offset).map_err(|_| bad("constant offset"))?,
                    length: u32::try_from(len).map_err(|_| bad("constant length"))?,
                };
            }
            ConstValue::Data { .. } => return Err(bad(format!("operand {i}: a packed layout"))),
        }
    }
    let constant = |l: OperandLifeTime| {
        l == OperandLifeTime::CONSTANT_COPY || l == OperandLifeTime::CONSTANT_REFERENCE
    };
    if let Some(i) =
        (0..has_value.len()).find(|&i| constant(model.main.operands[i].lifetime) != has_value[i])
    {
        return Err(bad(format!(
            "operand {i}: a constant without a value, or a value for a non-constant"
        )));
    }
    if !data.is_empty() {
        model.pools =
            vec![Memory::ashmem_with(data).map_err(|e| ByteCodeError::Memory(e.to_string()))?];
    }
    // At the lowest level it is valid at: a partition may hold AIDL V2's PACK, say.
    let level = model_level(&model).map_err(|e| bad(format!("the model: {e}")))?;
    Ok((model, level))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use vnpu_driver::hal::builder::ModelBuilder;
    use vnpu_driver::hal::{OperandType, OperationType};

    /// `out = in + w` (w a `n`-float constant, `in` and `out` of `n` floats), through a
    /// pool when `pooled`: the two constant lifetimes the importer makes.
    fn model(w: &[f32], pooled: bool) -> Model {
        let n = w.len() as u32;
        let mut b = ModelBuilder::default();
        let x = b.input(OperandType::TENSOR_FLOAT32, &[n]);
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let c = b.constant(OperandType::TENSOR_FLOAT32, &[n], &bytes);
        let act = b.constant(OperandType::INT32, &[], &0i32.to_le_bytes());
        let y = b.output(OperandType::TENSOR_FLOAT32, &[n]);
        b.op(OperationType::ADD, &[x, c, act], &[y]);
        let mut m = b.build(Vec::new());
        if pooled {
            let o = &mut m.main.operands[c as usize];
            let at = o.location.offset as usize;
            let pool = Memory::ashmem_with(&m.operand_values[at..at + bytes.len()]).unwrap();
            o.lifetime = OperandLifeTime::CONSTANT_REFERENCE;
            o.location = DataLocation {
                pool_index: 0,
                offset: 0,
                length: bytes.len() as u32,
            };
            m.pools = vec![pool];
        }
        m
    }

    fn values(m: &Model) -> Vec<(u32, Vec<u8>)> {
        constant_values(m).unwrap()
    }

    proptest! {
        /// Whatever the weights and maps, decode(encode(x)) is x: the same structure and
        /// the same constant bytes.
        #[test]
        fn round_trip(w in proptest::collection::vec(-1e3f32..1e3, 1..40), pooled: bool,
                      extra in 0usize..3) {
            let m = model(&w, pooled);
            let inputs: Vec<Option<u32>> =
                std::iter::once(Some(0)).chain(std::iter::repeat_n(None, extra)).collect();
            let bytes = encode(&m, &inputs, &[0]).unwrap();
            let back = decode(&bytes).unwrap();
            prop_assert_eq!(&back.inputs, &inputs);
            prop_assert_eq!(&back.outputs, &vec![0u32]);
            prop_assert_eq!(back.model.main.operations.len(), m.main.operations.len());
            prop_assert_eq!(values(&back.model), values(&m));
            prop_assert_eq!(&back.model.main.input_indexes, &m.main.input_indexes);
        }

        /// Any change of one byte, and any truncation, is either refused with an error or
        /// still decodes to a valid model: never a panic.
        #[test]
        fn corruption_is_an_error_not_a_panic(at in 0usize..4096, v: u8, cut in 0usize..4096) {
            let bytes = encode(&model(&[1.0; 9], true), &[Some(0)], &[0]).unwrap();
            let mut flipped = bytes.clone();
            let k = at % flipped.len();
            flipped[k] = v;
            let _ = decode(&flipped);
            let _ = decode(&bytes[..cut % bytes.len()]);
        }
    }

    /// A partition holding an operation newer than HAL 1.3 (AIDL V2's PACK) decodes: the
    /// model is valid at its own level.
    #[test]
    fn a_partition_newer_than_1_3_decodes() {
        let mut b = ModelBuilder::default();
        let x = b.input(OperandType::TENSOR_FLOAT32, &[2]);
        let y = b.input(OperandType::TENSOR_FLOAT32, &[2]);
        let axis = b.constant(OperandType::INT32, &[], &0i32.to_le_bytes());
        let out = b.output(OperandType::TENSOR_FLOAT32, &[2, 2]);
        b.op(OperationType::PACK, &[axis, x, y], &[out]);
        let m = b.build(Vec::new());
        let bytes = encode(&m, &[Some(0), Some(1)], &[0]).unwrap();
        let code = decode(&bytes).unwrap();
        assert_eq!(code.model.main.operations[0].r#type, OperationType::PACK);
        assert_eq!(
            model_level(&code.model).unwrap(),
            vnpu_driver::hal::HalVersion::AidlV2
        );
    }

    #[test]
    fn refuses_what_it_does_not_read() {
        let bytes = encode(&model(&[1.0; 9], false), &[Some(0)], &[0]).unwrap();
        let mut other = bytes.clone();
        other[0] ^= 1;
        assert_eq!(decode(&other).unwrap_err(), ByteCodeError::Magic);
        let mut newer = bytes.clone();
        newer[8] = 2;
        assert_eq!(decode(&newer).unwrap_err(), ByteCodeError::Version(2));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(decode(&longer), Err(ByteCodeError::Malformed(_))));
        // An input map that leaves a model input unfed, or names one out of range.
        let unfed = encode(&model(&[1.0; 9], false), &[None], &[0]).unwrap();
        assert!(matches!(decode(&unfed), Err(ByteCodeError::Malformed(_))));
        let beyond = encode(&model(&[1.0; 9], false), &[Some(0)], &[1]).unwrap();
        assert!(matches!(decode(&beyond), Err(ByteCodeError::Malformed(_))));
    }
}
