//! A TFLite main subgraph to an NN HAL 1.3 model, as the runtime's NNAPI delegate does:
//! tensors to operands (types, shapes, quantisation, per-channel filters), buffers to
//! constants (CONSTANT_REFERENCE from one memfd pool for anything over 128 bytes), builtin
//! operators to NNAPI operations with their options as scalar operands. float16 weights
//! behind a DEQUANTIZE are converted to float32 constants here (the op disappears).

use std::collections::BTreeMap;

use super::ops::{self, Mapped};
use super::schema::{slot, Table};
use super::ImportError;
use crate::hal::{
    DataLocation, ExtensionNameAndPrefix, ExtraParams, HalVersion, Memory, Model, Operand,
    OperandLifeTime, OperandType, Operation, OperationType, Subgraph, SymmPerChannelQuantParams,
};

/// Constants up to this size are copied into the model (CONSTANT_COPY); larger ones live in
/// the model's memory pool (CONSTANT_REFERENCE), as the NNAPI delegate does.
const COPY_LIMIT: usize = 128;
/// The most tensors or operators a subgraph may have.
const MAX_ITEMS: usize = 1 << 20;
/// The largest rank the device takes.
const MAX_RANK: usize = 6;

/// TFLite `TensorType` values.
pub(super) mod tensor_type {
    pub const FLOAT32: i8 = 0;
    pub const FLOAT16: i8 = 1;
    pub const INT32: i8 = 2;
    pub const UINT8: i8 = 3;
    pub const BOOL: i8 = 6;
    pub const INT16: i8 = 7;
    pub const INT8: i8 = 9;
}

/// A graph input or output: its name, shape and HAL type.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// The TFLite tensor's name.
    pub name: String,
    /// Its shape.
    pub dims: Vec<u32>,
    /// Its HAL operand type.
    pub r#type: OperandType,
    /// Quantisation scale (0 for float tensors).
    pub scale: f32,
    /// Quantisation zero point.
    pub zero_point: i32,
    /// For a float tensor a DEQUANTIZE makes from a per-tensor quantised one: that tensor's
    /// scale (the step an error budget for it counts in).
    pub dequantized_step: Option<f32>,
}

/// An imported model.
#[derive(Debug)]
pub struct Imported {
    /// The HAL model (validated).
    pub model: Model,
    /// Its inputs, in order.
    pub inputs: Vec<TensorInfo>,
    /// Its outputs, in order.
    pub outputs: Vec<TensorInfo>,
    /// NNAPI operations by name, with counts.
    pub operations: BTreeMap<&'static str, usize>,
    /// With `partial`: the operator the import stopped at (index, builtin name, reason).
    pub stopped: Option<(usize, String, String)>,
    /// Bytes of constants (weights).
    pub constant_bytes: usize,
    /// The TFLite tensor of each input, in order.
    pub input_tensors: Vec<usize>,
    /// The TFLite tensor of each output, in order.
    pub output_tensors: Vec<usize>,
    /// The lowest interface level whose models it is valid at ([`model_level`]): NN HAL
    /// 1.3 unless an operation needs a later one (PACK: AIDL V2; DENSIFY: NNAPI's
    /// experimental features). Prepare it at this level (`IDevice::prepare_model_at`).
    pub level: HalVersion,
}

/// The levels an imported model is tried at, lowest first.
const LEVELS: &[HalVersion] = &[
    HalVersion::V1_3,
    HalVersion::AidlV1,
    HalVersion::AidlV2,
    HalVersion::AidlV3,
    HalVersion::AidlV4,
    HalVersion::Experimental,
];

/// The lowest interface level (NN HAL 1.3 or later) at which `model` is valid; the error is
/// the one the newest level gives.
pub fn model_level(model: &Model) -> Result<HalVersion, crate::hal::ValidationError> {
    let mut last = None;
    for &level in LEVELS {
        match crate::validate::validate_model_at(model, level) {
            Ok(()) => return Ok(level),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("LEVELS is not empty"))
}

/// A sparse tensor's format (TFLite `SparsityParameters`): its buffer holds only the values
/// the traversal stores.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sparsity {
    /// The order the dimensions are traversed in (the tensor's, then the blocks').
    pub traversal_order: Vec<i32>,
    /// The tensor dimension each block dimension splits.
    pub block_map: Vec<i32>,
    /// Per traversed dimension, in traversal order.
    pub dims: Vec<SparseDim>,
}

/// One traversed dimension of a sparse tensor (TFLite `DimensionMetadata`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseDim {
    /// SPARSE_CSR (else DENSE).
    pub csr: bool,
    /// A DENSE dimension's size.
    pub dense_size: i32,
    /// A SPARSE_CSR dimension's segments.
    pub segments: Vec<i32>,
    /// A SPARSE_CSR dimension's indices.
    pub indices: Vec<i32>,
}

/// One TFLite tensor as read.
#[derive(Clone)]
pub(super) struct Tensor<'a> {
    pub shape: Vec<i32>,
    pub ty: i8,
    pub name: String,
    pub data: &'a [u8],
    pub scales: Vec<f32>,
    pub zero_points: Vec<i64>,
    pub axis: i32,
    /// A sparse tensor's format (DENSIFY reads it).
    pub sparsity: Option<Box<Sparsity>>,
    /// `shape_signature` (-1 where the size is only known at run time; empty when the
    /// file gives none).
    pub signature: Vec<i32>,
}

/// The model under construction, from a TFLite subgraph.
pub(super) struct Builder<'a> {
    pub tensors: Vec<Tensor<'a>>,
    /// The operand of each tensor, once made.
    operand_of: Vec<Option<u32>>,
    /// Values that replace a tensor: float32 for weights dequantised here (float16, or the
    /// int8 weights of a hybrid operator), int32 for a folded shape.
    pub replaced: Vec<Option<Vec<u8>>>,
    /// Whether each tensor holds a value yet (a constant, an input, or written).
    pub written: Vec<bool>,
    /// The scale of the quantised tensor a DEQUANTIZE made each float tensor from.
    pub dequantized_step: Vec<Option<f32>>,
    operands: Vec<Operand>,
    values: Vec<u8>,
    pool: Vec<u8>,
    operations: Vec<Operation>,
    /// NNAPI operations made, by name.
    pub counts: BTreeMap<&'static str, usize>,
    /// The newest interface level whose operations the import may use.
    pub level: HalVersion,
}

fn invalid(reason: impl Into<String>) -> ImportError {
    ImportError::Malformed(reason.into())
}

impl<'a> Builder<'a> {
    /// The HAL type and element size of a tensor.
    pub fn hal_type(&self, t: usize) -> Result<(OperandType, usize), ImportError> {
        let x = &self.tensors[t];
        // A replaced int32 tensor is a folded shape; any other holds dequantised weights.
        if self.replaced[t].is_some() && x.ty != tensor_type::INT32 {
            return Ok((OperandType::TENSOR_FLOAT32, 4));
        }
        Ok(match x.ty {
            tensor_type::FLOAT32 => (OperandType::TENSOR_FLOAT32, 4),
            tensor_type::FLOAT16 => (OperandType::TENSOR_FLOAT16, 2),
            tensor_type::INT32 => (OperandType::TENSOR_INT32, 4),
            tensor_type::UINT8 => (OperandType::TENSOR_QUANT8_ASYMM, 1),
            tensor_type::INT8 if x.scales.len() > 1 => {
                (OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL, 1)
            }
            tensor_type::INT8 => (OperandType::TENSOR_QUANT8_ASYMM_SIGNED, 1),
            tensor_type::INT16 => (OperandType::TENSOR_QUANT16_SYMM, 2),
            tensor_type::BOOL => (OperandType::TENSOR_BOOL8, 1),
            t => {
                return Err(ImportError::Tensor {
                    index: t as usize,
                    reason: format!("tensor type {t} is not supported"),
                })
            }
        })
    }

    /// The tensor's shape as HAL dims (checked).
    pub fn dims(&self, t: usize) -> Result<Vec<u32>, ImportError> {
        let s = &self.tensors[t].shape;
        if s.len() > MAX_RANK {
            return Err(ImportError::Tensor {
                index: t,
                reason: format!("rank {} above {MAX_RANK}", s.len()),
            });
        }
        s.iter()
            .map(|&d| {
                u32::try_from(d).map_err(|_| ImportError::Tensor {
                    index: t,
                    reason: format!("dimension {d}"),
                })
            })
            .collect()
    }

    /// The constant bytes of a tensor (its buffer, or its replacement), checked to hold its
    /// shape; `None` for a tensor without data.
    pub fn constant(&self, t: usize) -> Result<Option<&[u8]>, ImportError> {
        if let Some(r) = &self.replaced[t] {
            return Ok(Some(r));
        }
        let data = self.tensors[t].data;
        if data.is_empty() {
            return Ok(None);
        }
        let (_, es) = self.hal_type(t)?;
        let n = self
            .dims(t)?
            .iter()
            .try_fold(es, |a, &d| a.checked_mul(d as usize))
            .ok_or_else(|| ImportError::Tensor {
                index: t,
                reason: "size overflows".into(),
            })?;
        if data.len() < n {
            return Err(ImportError::Tensor {
                index: t,
                reason: format!("buffer of {} bytes for {n} bytes of data", data.len()),
            });
        }
        Ok(Some(&data[..n]))
    }

    /// A tensor's int32 values (a constant shape, size, axes list).
    pub fn ints(&self, t: usize) -> Result<Option<Vec<i32>>, ImportError> {
        if self.tensors[t].ty != tensor_type::INT32 {
            return Ok(None);
        }
        Ok(self.constant(t)?.map(|b| {
            b.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        }))
    }

    fn push(&mut self, o: Operand) -> u32 {
        self.operands.push(o);
        (self.operands.len() - 1) as u32
    }

    fn place(&mut self, bytes: &[u8]) -> (OperandLifeTime, DataLocation) {
        let (lifetime, store, pool_index) = if bytes.len() <= COPY_LIMIT {
            (OperandLifeTime::CONSTANT_COPY, &mut self.values, 0)
        } else {
            (OperandLifeTime::CONSTANT_REFERENCE, &mut self.pool, 0)
        };
        let offset = store.len().next_multiple_of(64);
        store.resize(offset, 0);
        store.extend_from_slice(bytes);
        (
            lifetime,
            DataLocation {
                pool_index,
                offset: offset as u32,
                length: bytes.len() as u32,
            },
        )
    }

    /// A new constant operand of `bytes`.
    pub fn scalar(&mut self, r#type: OperandType, bytes: &[u8]) -> u32 {
        let dims = if r#type.is_tensor() {
            vec![(bytes.len() / 4) as u32]
        } else {
            Vec::new()
        };
        let (lifetime, location) = self.place(bytes);
        self.push(Operand {
            r#type,
            dimensions: dims,
            lifetime,
            location,
            ..Operand::default()
        })
    }

    /// An INT32 scalar operand.
    pub fn int(&mut self, v: i32) -> u32 {
        self.scalar(OperandType::INT32, &v.to_le_bytes())
    }

    /// A BOOL scalar operand.
    pub fn bool(&mut self, v: bool) -> u32 {
        self.scalar(OperandType::BOOL, &[u8::from(v)])
    }

    /// A FLOAT32 scalar operand.
    pub fn float(&mut self, v: f32) -> u32 {
        self.scalar(OperandType::FLOAT32, &v.to_le_bytes())
    }

    /// A constant TENSOR_INT32 operand.
    pub fn int_tensor(&mut self, v: &[i32]) -> u32 {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.scalar(OperandType::TENSOR_INT32, &b)
    }

    /// A constant tensor of `n` zeros of `r#type` (`es` bytes each): a missing bias.
    pub fn zeros(&mut self, r#type: OperandType, n: u32, es: usize) -> u32 {
        let (lifetime, location) = self.place(&vec![0u8; n as usize * es]);
        self.push(Operand {
            r#type,
            dimensions: vec![n],
            lifetime,
            location,
            ..Operand::default()
        })
    }

    /// A new constant operand like `template` (type, dimensions, quantisation) holding
    /// `bytes`.
    pub fn constant_like(&mut self, template: Operand, bytes: &[u8]) -> u32 {
        let (lifetime, location) = self.place(bytes);
        self.push(Operand {
            lifetime,
            location,
            ..template
        })
    }

    /// The type of operand `o`.
    pub fn operand_type(&self, o: u32) -> OperandType {
        self.operands[o as usize].r#type
    }

    /// The scale and zero point of operand `o`.
    pub fn quant_of(&self, o: u32) -> (f32, i32) {
        let x = &self.operands[o as usize];
        (x.scale, x.zero_point)
    }

    /// A new temporary operand no TFLite tensor names: an intermediate value the import
    /// adds (a requantisation's float32 step, say).
    pub fn temporary(
        &mut self,
        r#type: OperandType,
        dimensions: Vec<u32>,
        scale: f32,
        zero_point: i32,
    ) -> u32 {
        self.push(Operand {
            r#type,
            dimensions,
            scale,
            zero_point,
            lifetime: OperandLifeTime::TEMPORARY_VARIABLE,
            ..Operand::default()
        })
    }

    /// The dimensions of operand `o`.
    pub fn dims_of(&self, o: u32) -> Vec<u32> {
        self.operands[o as usize].dimensions.clone()
    }

    /// The operand of tensor `t`, made on first use (a constant when it has data). Reading a
    /// tensor nothing has written yet is an error (a cyclic or unordered graph).
    pub fn operand(&mut self, t: usize) -> Result<u32, ImportError> {
        if t >= self.tensors.len() {
            return Err(invalid(format!("tensor {t} out of range")));
        }
        if let Some(o) = self.operand_of[t] {
            return Ok(o);
        }
        if self.tensors[t].sparsity.is_some() {
            return Err(ImportError::Tensor {
                index: t,
                reason: "a sparse tensor is read by an operator other than DENSIFY".into(),
            });
        }
        let (r#type, _) = self.hal_type(t)?;
        let dims = self.dims(t)?;
        let x = &self.tensors[t];
        let (scale, zero_point, extra) = quantisation(t, x, r#type)?;
        let mut o = Operand {
            r#type,
            dimensions: dims,
            scale,
            zero_point,
            extra_params: extra,
            ..Operand::default()
        };
        match self.constant(t)? {
            Some(bytes) => {
                let bytes = bytes.to_vec();
                let (lifetime, location) = self.place(&bytes);
                o.lifetime = lifetime;
                o.location = location;
                self.written[t] = true;
            }
            None if self.written[t] => o.lifetime = OperandLifeTime::TEMPORARY_VARIABLE,
            None => {
                return Err(ImportError::Graph(format!(
                    "tensor {t} ({}) is read before any operator writes it: the graph is cyclic or out of order",
                    self.tensors[t].name
                )))
            }
        }
        let i = self.push(o);
        self.operand_of[t] = Some(i);
        Ok(i)
    }

    /// Folded tensor `t` as an operation's output: a runtime can draw a partition's edge
    /// through weights the import folded (a float16 DEQUANTIZE read by the next partition),
    /// and a model output cannot be a constant, so the constant goes through a RESHAPE to
    /// its own shape.
    pub fn materialised(&mut self, t: usize) -> Result<u32, ImportError> {
        let c = self.operand(t)?;
        let template = self.operands[c as usize].clone();
        let shape: Vec<i32> = template.dimensions.iter().map(|&d| d as i32).collect();
        let s = self.int_tensor(&shape);
        let out = self.push(Operand {
            lifetime: OperandLifeTime::TEMPORARY_VARIABLE,
            location: DataLocation::default(),
            ..template
        });
        self.op(OperationType::RESHAPE, vec![c, s], vec![out]);
        Ok(out)
    }

    /// The operand an operator writes for tensor `t` (never a constant, written once).
    pub fn output(&mut self, t: usize) -> Result<u32, ImportError> {
        if self.tensors.get(t).is_none() {
            return Err(invalid(format!("tensor {t} out of range")));
        }
        if self.written[t] || self.operand_of[t].is_some() {
            return Err(ImportError::Graph(format!(
                "tensor {t} ({}) is written twice or is a constant",
                self.tensors[t].name
            )));
        }
        self.written[t] = true;
        self.operand(t)
    }

    /// Adds an NNAPI operation.
    pub fn op(&mut self, r#type: OperationType, inputs: Vec<u32>, outputs: Vec<u32>) {
        *self
            .counts
            .entry(
                r#type
                    .name_any()
                    .or_else(|| crate::extensions::operation_name(r#type))
                    .unwrap_or("?"),
            )
            .or_default() += 1;
        self.operations.push(Operation {
            r#type,
            inputs,
            outputs,
        });
    }
}

/// The scale, zero point and per-channel parameters of tensor `t` as HAL type `ty`.
pub(super) fn quantisation(
    t: usize,
    x: &Tensor<'_>,
    ty: OperandType,
) -> Result<(f32, i32, ExtraParams), ImportError> {
    let bad = |reason: String| ImportError::Tensor { index: t, reason };
    let quantised = matches!(
        ty,
        OperandType::TENSOR_QUANT8_ASYMM
            | OperandType::TENSOR_QUANT8_ASYMM_SIGNED
            | OperandType::TENSOR_QUANT16_SYMM
            | OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL
    );
    if ty == OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL {
        if x.zero_points.iter().any(|&z| z != 0) {
            return Err(bad("per-channel zero points must be 0".into()));
        }
        let axis =
            u32::try_from(x.axis).map_err(|_| bad(format!("quantized dimension {}", x.axis)))?;
        return Ok((
            0.0,
            0,
            ExtraParams::ChannelQuant(SymmPerChannelQuantParams {
                scales: x.scales.clone(),
                channel_dim: axis,
            }),
        ));
    }
    if !quantised {
        // An int32 bias of a quantised operator carries its scale too.
        if ty == OperandType::TENSOR_INT32 {
            if let (Some(&s), Some(&z)) = (x.scales.first(), x.zero_points.first()) {
                let z = i32::try_from(z).map_err(|_| bad(format!("zero point {z}")))?;
                return Ok((s, z, ExtraParams::None));
            }
        }
        return Ok((0.0, 0, ExtraParams::None));
    }
    let (Some(&s), Some(&z)) = (x.scales.first(), x.zero_points.first()) else {
        return Err(bad("a quantised tensor without scale and zero point".into()));
    };
    let z = i32::try_from(z).map_err(|_| bad(format!("zero point {z}")))?;
    Ok((s, z, ExtraParams::None))
}

fn read_tensor<'a>(
    t: &Table<'a>,
    buffers: &[Table<'a>],
    index: usize,
) -> Result<Tensor<'a>, ImportError> {
    let bad = |reason: String| ImportError::Tensor { index, reason };
    let buffer = t.scalar::<u32>(slot::tensor::BUFFER, 0)? as usize;
    let b = buffers
        .get(buffer)
        .ok_or_else(|| bad(format!("buffer {buffer} out of range")))?;
    // Data outside the FlatBuffer: `size` bytes at `offset` in the file (offset 0 or 1
    // means none, as the format reserves them).
    let offset = b.scalar::<u64>(slot::buffer::OFFSET, 0)?;
    let outside = if offset > 1 {
        let size = b.scalar::<u64>(slot::buffer::SIZE, 0)?;
        let file = b.file();
        let range = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(o, n)| Some(o..o.checked_add(n)?))
            .filter(|r| r.end <= file.len())
            .ok_or_else(|| {
                bad(format!(
                    "buffer {buffer}: {size} bytes at {offset} lie outside the file"
                ))
            })?;
        Some(&file[range])
    } else {
        None
    };
    let (scales, zero_points, axis) = match t.table(slot::tensor::QUANTIZATION)? {
        Some(q) => (
            q.scalars::<f32>(slot::quantization::SCALE)?,
            q.scalars::<i64>(slot::quantization::ZERO_POINT)?,
            q.scalar::<i32>(slot::quantization::QUANTIZED_DIMENSION, 0)?,
        ),
        None => (Vec::new(), Vec::new(), 0),
    };
    Ok(Tensor {
        shape: t.scalars::<i32>(slot::tensor::SHAPE)?,
        ty: t.scalar::<i8>(slot::tensor::TYPE, 0)?,
        name: t.string(slot::tensor::NAME)?,
        data: match outside {
            Some(d) => d,
            None => b.bytes(slot::buffer::DATA)?,
        },
        scales,
        zero_points,
        axis,
        sparsity: match t.table(slot::tensor::SPARSITY)? {
            Some(p) => Some(Box::new(read_sparsity(&p).map_err(bad)?)),
            None => None,
        },
        signature: t.scalars::<i32>(slot::tensor::SHAPE_SIGNATURE)?,
    })
}

/// A tensor's `SparsityParameters` table (the values it holds are checked when DENSIFY
/// reads it).
pub fn read_sparsity(p: &Table<'_>) -> Result<Sparsity, String> {
    use slot::dimension as d;
    let e = |e: ImportError| format!("sparsity: {e}");
    // A SparseIndexVector union member's values, by its type byte.
    let index_vector = |m: &Table<'_>, ty: u16, at: u16| -> Result<Vec<i32>, String> {
        let Some(v) = m.table(at).map_err(e)? else {
            return Ok(Vec::new());
        };
        let values = slot::index_vector::VALUES;
        Ok(match m.scalar::<u8>(ty, 0).map_err(e)? {
            1 => v.scalars::<i32>(values).map_err(e)?,
            2 => v
                .scalars::<u16>(values)
                .map_err(e)?
                .into_iter()
                .map(i32::from)
                .collect(),
            3 => v
                .scalars::<u8>(values)
                .map_err(e)?
                .into_iter()
                .map(i32::from)
                .collect(),
            t => return Err(format!("sparsity: index vector type {t}")),
        })
    };
    let dims = p
        .tables(slot::sparsity::DIM_METADATA)
        .map_err(e)?
        .iter()
        .map(|m| {
            Ok(SparseDim {
                csr: match m.scalar::<i8>(d::FORMAT, 0).map_err(e)? {
                    0 => false,
                    1 => true,
                    f => return Err(format!("sparsity: dimension format {f}")),
                },
                dense_size: m.scalar::<i32>(d::DENSE_SIZE, 0).map_err(e)?,
                segments: index_vector(m, d::SEGMENTS_TYPE, d::SEGMENTS)?,
                indices: index_vector(m, d::INDICES_TYPE, d::INDICES)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Sparsity {
        traversal_order: p
            .scalars::<i32>(slot::sparsity::TRAVERSAL_ORDER)
            .map_err(e)?,
        block_map: p.scalars::<i32>(slot::sparsity::BLOCK_MAP).map_err(e)?,
        dims,
    })
}

fn index_list(v: Vec<i32>, n: usize, what: &str) -> Result<Vec<usize>, ImportError> {
    v.into_iter()
        .map(|i| {
            usize::try_from(i)
                .ok()
                .filter(|&i| i < n)
                .ok_or_else(|| invalid(format!("{what} tensor index {i} out of range")))
        })
        .collect()
}

/// One operator of the main subgraph as read (indices checked).
#[derive(Clone)]
pub(super) struct OpRec<'a> {
    /// Builtin code (`CUSTOM` for a custom operator).
    pub code: i32,
    /// A custom operator's name (empty for builtins).
    pub custom: String,
    /// Input tensors (`None`: an optional input left out).
    pub ins: Vec<Option<usize>>,
    /// Output tensors.
    pub outs: Vec<Option<usize>>,
    /// The builtin options table.
    pub options: Option<Table<'a>>,
    /// A custom operator's options bytes.
    pub custom_options: &'a [u8],
}

impl OpRec<'_> {
    /// The operator's name as reports give it: the builtin's, or the custom name.
    pub fn name(&self) -> String {
        ops::name_of(self.code, &self.custom)
    }

    /// Tensors it reads (optional inputs left out skipped).
    pub fn inputs(&self) -> impl Iterator<Item = usize> + '_ {
        self.ins.iter().flatten().copied()
    }

    /// Tensors it writes.
    pub fn outputs(&self) -> impl Iterator<Item = usize> + '_ {
        self.outs.iter().flatten().copied()
    }
}

/// The main subgraph of a verified model: tensors, operators in execution order, the
/// graph's inputs and outputs.
pub struct Graph<'a> {
    pub(super) tensors: Vec<Tensor<'a>>,
    pub(super) ops: Vec<OpRec<'a>>,
    pub(super) inputs: Vec<usize>,
    pub(super) outputs: Vec<usize>,
    /// The newest interface level the import may use operations of.
    pub(super) level: HalVersion,
}

impl<'a> Graph<'a> {
    /// The graph imported for an interface at `level`: operations newer than it are
    /// mapped another way where one exists (PACK as RESHAPE and CONCATENATION below AIDL
    /// V2), else refused (sparse tensors need DENSIFY, an experimental feature). The
    /// default is the newest, [`HalVersion::Experimental`].
    pub fn at_level(mut self, level: HalVersion) -> Self {
        self.level = level;
        self
    }

    /// Reads the main subgraph of `buf` (verified first).
    pub fn read(buf: &'a [u8]) -> Result<Graph<'a>, ImportError> {
        super::schema::verify(buf)?;
        read_graph(buf)
    }

    /// How many operators the graph has.
    pub fn op_count(&self) -> usize {
        self.ops.len()
    }

    /// Operator `k`'s name (its builtin name or custom name).
    pub fn op_name(&self, k: usize) -> String {
        self.ops.get(k).map(OpRec::name).unwrap_or_default()
    }

    /// Whether tensor `t` holds constant data in the file.
    pub fn is_constant(&self, t: usize) -> bool {
        self.tensors.get(t).is_some_and(|x| !x.data.is_empty())
    }

    /// The graph's output tensors.
    pub fn output_tensors(&self) -> &[usize] {
        &self.outputs
    }

    /// The tensors operator `k` reads and writes.
    pub fn op_tensors(&self, k: usize) -> (Vec<usize>, Vec<usize>) {
        match self.ops.get(k) {
            Some(o) => (o.inputs().collect(), o.outputs().collect()),
            None => (Vec::new(), Vec::new()),
        }
    }

    /// Operators `folds` would turn into constants at import (SHAPE of a static shape,
    /// DEQUANTIZE of float16 weights): they make no device work.
    pub fn folded_ops(&self) -> Vec<bool> {
        self.ops.iter().map(|o| ops::foldable(self, o)).collect()
    }

    /// A builder over this graph, with every tensor that a foldable operator writes and
    /// `wanted` reads replaced by its constant value.
    fn builder(&self, wanted: &[usize]) -> Result<Builder<'a>, ImportError> {
        let n = self.tensors.len();
        let mut b = Builder {
            operand_of: vec![None; n],
            replaced: vec![None; n],
            written: vec![false; n],
            dequantized_step: vec![None; n],
            tensors: self.tensors.clone(),
            operands: Vec::new(),
            values: Vec::new(),
            pool: Vec::new(),
            operations: Vec::new(),
            counts: BTreeMap::new(),
            level: self.level,
        };
        let mut reads = vec![false; n];
        for &k in wanted {
            for t in self.ops[k].inputs() {
                reads[t] = true;
            }
            for t in self.ops[k].outputs() {
                reads[t] = true;
            }
        }
        for o in &self.ops {
            if !ops::foldable(self, o) || !o.outputs().any(|t| reads[t]) {
                continue;
            }
            if let Some((t, v)) = ops::fold(self, o)? {
                b.replaced[t] = Some(v);
            }
        }
        Ok(b)
    }
}

fn read_graph(buf: &[u8]) -> Result<Graph<'_>, ImportError> {
    let root = Table::root(buf)?;
    let codes = root.tables(slot::model::OPERATOR_CODES)?;
    let subgraphs = root.tables(slot::model::SUBGRAPHS)?;
    let buffers = root.tables(slot::model::BUFFERS)?;
    let main = subgraphs
        .first()
        .ok_or_else(|| invalid("the model has no subgraph"))?;
    let raw = main.tables(slot::subgraph::TENSORS)?;
    let operators = main.tables(slot::subgraph::OPERATORS)?;
    if raw.len() > MAX_ITEMS || operators.len() > MAX_ITEMS {
        return Err(invalid("too many tensors or operators"));
    }
    let tensors = raw
        .iter()
        .enumerate()
        .map(|(k, t)| read_tensor(t, &buffers, k))
        .collect::<Result<Vec<_>, _>>()?;
    let n = tensors.len();
    let inputs = index_list(main.scalars::<i32>(slot::subgraph::INPUTS)?, n, "input")?;
    let outputs = index_list(main.scalars::<i32>(slot::subgraph::OUTPUTS)?, n, "output")?;
    let mut ops = Vec::with_capacity(operators.len());
    for (index, op) in operators.iter().enumerate() {
        let code = op.scalar::<u32>(slot::operator::OPCODE_INDEX, 0)? as usize;
        let c = codes.get(code).ok_or_else(|| {
            invalid(format!(
                "operator {index}: opcode index {code} out of range"
            ))
        })?;
        let builtin = c
            .scalar::<i32>(slot::operator_code::BUILTIN_CODE, 0)?
            .max(i32::from(c.scalar::<i8>(
                slot::operator_code::DEPRECATED_BUILTIN_CODE,
                0,
            )?));
        let optional = |v: Vec<i32>| -> Result<Vec<Option<usize>>, ImportError> {
            v.into_iter()
                .map(|i| {
                    if i < 0 {
                        return Ok(None);
                    }
                    let i = i as usize;
                    (i < n).then_some(Some(i)).ok_or_else(|| {
                        invalid(format!("operator {index}: tensor index {i} out of range"))
                    })
                })
                .collect()
        };
        ops.push(OpRec {
            code: builtin,
            custom: c.string(slot::operator_code::CUSTOM_CODE)?,
            ins: optional(op.scalars::<i32>(slot::operator::INPUTS)?)?,
            outs: optional(op.scalars::<i32>(slot::operator::OUTPUTS)?)?,
            options: op.table(slot::operator::OPTIONS)?,
            custom_options: op.bytes(slot::operator::CUSTOM_OPTIONS)?,
        });
    }
    Ok(Graph {
        tensors,
        ops,
        inputs,
        outputs,
        level: HalVersion::Experimental,
    })
}

/// Maps operator `index` into `b`, naming it in the error.
fn map_op<'a>(b: &mut Builder<'a>, op: &OpRec<'a>, index: usize) -> Result<(), ImportError> {
    match ops::map(b, op) {
        Ok(Mapped) => Ok(()),
        Err(ImportError::Unsupported { reason, .. }) => Err(ImportError::Unsupported {
            index,
            op: op.name(),
            reason,
        }),
        Err(ImportError::Operator { reason, .. }) | Err(ImportError::Malformed(reason)) => {
            Err(ImportError::Operator {
                index,
                op: op.name(),
                reason,
            })
        }
        Err(e) => Err(e),
    }
}

/// Imports the main subgraph of a verified model for an interface at `level`.
pub(super) fn import_verified(
    buf: &[u8],
    partial: bool,
    level: HalVersion,
) -> Result<Imported, ImportError> {
    let g = read_graph(buf)?.at_level(level);
    let all: Vec<usize> = (0..g.ops.len()).collect();
    let mut b = g.builder(&all)?;
    for &i in &g.inputs {
        b.written[i] = true;
    }
    let input_ops = g
        .inputs
        .iter()
        .map(|&i| b.operand(i))
        .collect::<Result<Vec<_>, _>>()?;
    let mut stopped = None;
    let mut done = g.ops.len();
    for (index, op) in g.ops.iter().enumerate() {
        match map_op(&mut b, op, index) {
            Ok(()) => {}
            Err(ImportError::Unsupported { reason, op, .. }) if partial => {
                stopped = Some((index, op, reason));
                done = index;
                break;
            }
            Err(e) => return Err(e),
        }
    }
    // The outputs: the graph's, or (stopped early) whatever the prefix wrote that the
    // rest reads.
    let wanted: Vec<usize> = match &stopped {
        None => g.outputs.clone(),
        Some(_) => {
            let mut w: Vec<usize> = Vec::new();
            for op in &g.ops[done..] {
                for i in op.inputs() {
                    if b.written[i]
                        && b.tensors[i].data.is_empty()
                        && !g.inputs.contains(&i)
                        && !w.contains(&i)
                    {
                        w.push(i);
                    }
                }
            }
            for &o in &g.outputs {
                if b.written[o] && !w.contains(&o) {
                    w.push(o);
                }
            }
            w
        }
    };
    let inputs = g.inputs.clone();
    finish_selected(b, &inputs, input_ops, &wanted, stopped)
}

/// Imports the operators `selected` (indices in execution order) of the main subgraph of a
/// verified model as one model, the way a delegate takes a partition: its inputs are the
/// non-constant tensors they read but do not write (in order of first use), its outputs
/// the tensors they write that the graph outputs or another operator reads.
pub fn import_ops(g: &Graph<'_>, selected: &[usize]) -> Result<Imported, ImportError> {
    import_partition(g, selected, None)
}

/// [`import_ops`] with the outputs given (a runtime that knows its graph's outputs says
/// which tensors the rest of the graph needs, as TFLite's delegate parameters do). Each
/// must be written by the operators.
pub fn import_ops_with_outputs(
    g: &Graph<'_>,
    selected: &[usize],
    outputs: &[usize],
) -> Result<Imported, ImportError> {
    import_partition(g, selected, Some(outputs))
}

fn import_partition(
    g: &Graph<'_>,
    selected: &[usize],
    outputs: Option<&[usize]>,
) -> Result<Imported, ImportError> {
    if selected.windows(2).any(|w| w[0] >= w[1]) || selected.iter().any(|&k| k >= g.ops.len()) {
        return Err(ImportError::Graph(
            "the operators of a partition must be distinct, in order and in range".into(),
        ));
    }
    let mut b = g.builder(selected)?;
    let mut inside = vec![false; g.ops.len()];
    for &k in selected {
        inside[k] = true;
    }
    let mut writes = vec![false; g.tensors.len()];
    let mut inputs = Vec::new();
    for &k in selected {
        for t in g.ops[k].inputs() {
            if !writes[t]
                && g.tensors[t].data.is_empty()
                && b.replaced[t].is_none()
                && !inputs.contains(&t)
            {
                inputs.push(t);
            }
        }
        for t in g.ops[k].outputs() {
            writes[t] = true;
        }
    }
    for &i in &inputs {
        b.written[i] = true;
    }
    let input_ops = inputs
        .iter()
        .map(|&i| b.operand(i))
        .collect::<Result<Vec<_>, _>>()?;
    for &k in selected {
        map_op(&mut b, &g.ops[k], k)?;
    }
    let mut wanted = Vec::new();
    if let Some(outputs) = outputs {
        for &t in outputs {
            if t >= writes.len() || !writes[t] {
                return Err(ImportError::Graph(format!(
                    "tensor {t} is not written by the partition's operators"
                )));
            }
        }
        wanted = outputs.to_vec();
    }
    for &k in selected.iter().filter(|_| outputs.is_none()) {
        for t in g.ops[k].outputs() {
            let read_outside = g
                .ops
                .iter()
                .enumerate()
                .any(|(j, o)| !inside[j] && o.inputs().any(|x| x == t));
            if (read_outside || g.outputs.contains(&t))
                && b.replaced[t].is_none()
                && !wanted.contains(&t)
            {
                wanted.push(t);
            }
        }
    }
    finish_selected(b, &inputs, input_ops, &wanted, None)
}

/// Names the model's inputs and outputs, then finishes it.
fn finish_selected(
    b: Builder<'_>,
    inputs: &[usize],
    input_ops: Vec<u32>,
    wanted: &[usize],
    stopped: Option<(usize, String, String)>,
) -> Result<Imported, ImportError> {
    let mut b = b;
    let mut output_ops = Vec::with_capacity(wanted.len());
    for &o in wanted {
        if b.replaced[o].is_some() && b.operand_of[o].is_none() {
            output_ops.push(b.materialised(o)?);
            continue;
        }
        if !b.written[o] || b.operand_of[o].is_none() {
            return Err(ImportError::Graph(format!(
                "output tensor {o} ({}) is never written",
                b.tensors[o].name
            )));
        }
        output_ops.push(b.operand(o)?);
    }
    let info = |b: &Builder<'_>, t: usize, op: u32| -> TensorInfo {
        let o = &b.operands[op as usize];
        TensorInfo {
            name: b.tensors[t].name.clone(),
            dims: o.dimensions.clone(),
            r#type: o.r#type,
            scale: o.scale,
            zero_point: o.zero_point,
            dequantized_step: b.dequantized_step[t],
        }
    };
    let in_info: Vec<TensorInfo> = inputs
        .iter()
        .zip(&input_ops)
        .map(|(&t, &o)| info(&b, t, o))
        .collect();
    let out_info: Vec<TensorInfo> = wanted
        .iter()
        .zip(&output_ops)
        .map(|(&t, &o)| info(&b, t, o))
        .collect();
    let mut imported = finish(b, input_ops, output_ops, in_info, out_info, stopped)?;
    imported.input_tensors = inputs.to_vec();
    imported.output_tensors = wanted.to_vec();
    Ok(imported)
}

fn finish(
    mut b: Builder<'_>,
    input_ops: Vec<u32>,
    output_ops: Vec<u32>,
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
    stopped: Option<(usize, String, String)>,
) -> Result<Imported, ImportError> {
    for &i in &input_ops {
        b.operands[i as usize].lifetime = OperandLifeTime::SUBGRAPH_INPUT;
    }
    for &o in &output_ops {
        if b.operands[o as usize].lifetime != OperandLifeTime::TEMPORARY_VARIABLE {
            return Err(ImportError::Graph(
                "a graph output is a graph input or a constant".into(),
            ));
        }
        b.operands[o as usize].lifetime = OperandLifeTime::SUBGRAPH_OUTPUT;
    }
    for op in &b.operations {
        for &i in &op.inputs {
            b.operands[i as usize].number_of_consumers += 1;
        }
    }
    let constant_bytes = b.values.len() + b.pool.len();
    let pools = if b.pool.is_empty() {
        Vec::new()
    } else {
        vec![Memory::ashmem_with(&b.pool).map_err(|e| ImportError::Io(e.to_string()))?]
    };
    // The extensions the import's operations use, under the driver's own prefixes.
    let mut extensions: Vec<ExtensionNameAndPrefix> = Vec::new();
    for op in &b.operations {
        let ext = crate::extensions::decode_type(op.r#type.0)
            .and_then(|(prefix, _)| crate::extensions::by_prefix(prefix));
        if let Some(e) = ext.filter(|e| extensions.iter().all(|n| n.name != e.name)) {
            extensions.push(ExtensionNameAndPrefix {
                name: e.name.to_string(),
                prefix: e.prefix,
            });
        }
    }
    let model = Model {
        main: Subgraph {
            operands: b.operands,
            operations: b.operations,
            input_indexes: input_ops,
            output_indexes: output_ops,
        },
        operand_values: b.values,
        pools,
        extension_name_to_prefix: extensions,
        ..Model::default()
    };
    let level = model_level(&model)
        .map_err(|e| ImportError::Graph(format!("the imported model is not valid: {e}")))?;
    Ok(Imported {
        model,
        inputs,
        outputs,
        operations: b.counts,
        stopped,
        constant_bytes,
        input_tensors: Vec::new(),
        output_tensors: Vec::new(),
        level,
    })
}
