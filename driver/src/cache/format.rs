//! The model cache file: a fixed header, the body (the model's structure, its scalar
//! constants, where each constant tensor sits in the data cache, and the compiled program
//! for the model's own input shapes) and the MAC over both.
//!
//! ```text
//! header, 64 bytes: "VNPUCACH" | u32 format version | u32 0 | u64 body_len | u64 data_len
//!                   | [32] digest of the data cache (mac::DataDigest)
//! body:             body_len bytes (see `encode_body`)
//! mac:              32 bytes, keyed BLAKE3 (see `mac`)
//! ```
//! The data cache file is exactly `data_len` bytes: the constant block as the device
//! holds it.

use vnpu_emu::kernels::KernelOp;
use vnpu_emu::tensor::Layout;

use super::mac::MAC_LEN;
use super::wire::{Reader, Writer};
use super::CacheError;
use crate::compile::{Compiled, Growth, Lowered, Placement};
use crate::hal::{
    DataLocation, ExtensionNameAndPrefix, ExtraParams, Model, Operand, OperandLifeTime,
    OperandType, Operation, OperationType, Subgraph, SymmPerChannelQuantParams,
};

/// The cache format version (part of the build id the MAC binds; 5: the saved programs'
/// tensor entries hold 12 dimensions; 6: int8 filters in `Layout::IntPanels` are the byte
/// GEMM's groups of four with column sums).
pub const FORMAT_VERSION: u32 = 6;
/// Where the saved program's arena starts: its constants are encoded at their offsets in
/// the data cache (base 0), its arena tensors at this plus their arena offsets, and a
/// load relocates both ([`vnpu_emu::program::relocate`]).
pub const ARENA_TAG: u64 = 1 << 56;
const MAGIC: &[u8; 8] = b"VNPUCACH";
/// Bytes of the header.
pub const HEADER_LEN: usize = 64;
/// The largest model cache accepted (the data cache holds the weights).
pub const MAX_MODEL_CACHE: u64 = 256 << 20;
/// The largest data cache accepted.
pub const MAX_DATA_CACHE: u64 = 16 << 30;

/// The fixed header of a model cache file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Bytes of the body.
    pub body_len: u64,
    /// Bytes of the data cache.
    pub data_len: u64,
    /// Digest of the data cache ([`super::mac::DataDigest`]).
    pub data_digest: [u8; 32],
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[16..24].copy_from_slice(&self.body_len.to_le_bytes());
        h[24..32].copy_from_slice(&self.data_len.to_le_bytes());
        h[32..64].copy_from_slice(&self.data_digest);
        h
    }

    /// Parses a header and checks it against the file's length: a file must be exactly
    /// header + body + MAC long, so appended bytes are refused.
    pub fn decode(file: &[u8]) -> Result<Header, CacheError> {
        let mut r = Reader::new(
            file.get(..HEADER_LEN)
                .ok_or(CacheError::Malformed("header"))?,
        );
        let magic = r.u64()?.to_le_bytes();
        if &magic != MAGIC || r.u32()? != FORMAT_VERSION || r.u32()? != 0 {
            return Err(CacheError::Malformed("magic or version"));
        }
        let body_len = r.u64()?;
        let data_len = r.u64()?;
        let mut data_digest = [0u8; 32];
        for b in &mut data_digest {
            *b = r.u8()?;
        }
        let want = body_len
            .checked_add((HEADER_LEN + MAC_LEN) as u64)
            .ok_or(CacheError::Malformed("body length"))?;
        if want != file.len() as u64 || data_len > MAX_DATA_CACHE {
            return Err(CacheError::Malformed("file length"));
        }
        Ok(Header {
            body_len,
            data_len,
            data_digest,
        })
    }
}

/// The bytes of a constant held in the model cache. Kernel parameters are scalars, so
/// values up to [`InlineBytes::SMALL`] bytes are held in place, without an allocation
/// each (a load parses a hundred or more of them), longer ones on the heap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InlineBytes {
    /// `len` bytes at the start of `bytes`.
    Small {
        /// How many bytes of `bytes` are the value.
        len: u8,
        /// The value, then zeros.
        bytes: [u8; InlineBytes::SMALL],
    },
    /// A longer value.
    Large(Vec<u8>),
}

impl InlineBytes {
    /// The longest value held in place.
    pub const SMALL: usize = 16;

    /// The value `b`.
    pub fn new(b: &[u8]) -> InlineBytes {
        match u8::try_from(b.len()) {
            Ok(len) if b.len() <= Self::SMALL => {
                let mut bytes = [0u8; Self::SMALL];
                bytes[..b.len()].copy_from_slice(b);
                InlineBytes::Small { len, bytes }
            }
            _ => InlineBytes::Large(b.to_vec()),
        }
    }

    /// The value's bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            InlineBytes::Small { len, bytes } => &bytes[..usize::from(*len).min(Self::SMALL)],
            InlineBytes::Large(v) => v,
        }
    }
}

/// Where a constant's bytes are.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstValue {
    /// In the model cache (scalars: parameters of kernels).
    Inline(InlineBytes),
    /// In the data cache.
    Data {
        /// Offset in the data cache.
        offset: u64,
        /// Bytes of the value (plain).
        len: u64,
        /// How it lies in the data cache (a float32 filter may be pre-packed: then it
        /// takes the packed size of its operand's shape there).
        layout: Layout,
    },
}

/// The compiled program for one set of input shapes.
#[derive(Clone, Debug)]
pub struct Instance {
    /// The input shapes it was compiled for.
    pub input_shapes: Vec<Vec<usize>>,
    /// The compilation.
    pub compiled: Compiled,
    /// Its device program, encoded with constants at base 0 and the arena at
    /// [`ARENA_TAG`] (a load relocates it instead of encoding it again).
    pub program: Vec<u8>,
    /// The timing model's time for the program.
    pub program_ns: u64,
}

/// Everything a model cache holds.
#[derive(Clone, Debug)]
pub struct Image {
    /// The model without its constant values (no pools, no operand values).
    pub model: Model,
    /// Every constant operand's value, by operand index.
    pub constants: Vec<(u32, ConstValue)>,
    /// The compiled program for the model's input shapes, when they are known.
    pub instance: Option<Instance>,
}

fn put_operand(w: &mut Writer, o: &Operand) {
    w.i32(o.r#type.0);
    w.u32s(&o.dimensions);
    w.u32(o.number_of_consumers);
    w.f32(o.scale);
    w.i32(o.zero_point);
    w.i32(o.lifetime.0);
    for v in [o.location.pool_index, o.location.offset, o.location.length] {
        w.u32(v);
    }
    match &o.extra_params {
        ExtraParams::None => w.u8(0),
        ExtraParams::ChannelQuant(p) => {
            w.u8(1);
            w.list(&p.scales, |w, &s| w.f32(s));
            w.u32(p.channel_dim);
        }
        ExtraParams::Extension(b) => {
            w.u8(2);
            w.bytes(b);
        }
    }
}

fn get_operand(r: &mut Reader<'_>) -> Result<Operand, CacheError> {
    Ok(Operand {
        r#type: OperandType(r.i32()?),
        dimensions: r.u32s()?,
        number_of_consumers: r.u32()?,
        scale: r.f32()?,
        zero_point: r.i32()?,
        lifetime: OperandLifeTime(r.i32()?),
        location: DataLocation {
            pool_index: r.u32()?,
            offset: r.u32()?,
            length: r.u32()?,
        },
        extra_params: match r.u8()? {
            0 => ExtraParams::None,
            1 => ExtraParams::ChannelQuant(SymmPerChannelQuantParams {
                scales: r.list(4, |r| r.f32())?,
                channel_dim: r.u32()?,
            }),
            2 => ExtraParams::Extension(r.bytes()?),
            _ => return Err(CacheError::Malformed("extra params")),
        },
    })
}

fn put_subgraph(w: &mut Writer, sg: &Subgraph) {
    w.list(&sg.operands, put_operand);
    w.list(&sg.operations, |w, op| {
        w.i32(op.r#type.0);
        w.u32s(&op.inputs);
        w.u32s(&op.outputs);
    });
    w.u32s(&sg.input_indexes);
    w.u32s(&sg.output_indexes);
}

fn get_subgraph(r: &mut Reader<'_>) -> Result<Subgraph, CacheError> {
    Ok(Subgraph {
        operands: r.list(40, get_operand)?,
        operations: r.list(20, |r| {
            Ok(Operation {
                r#type: OperationType(r.i32()?),
                inputs: r.u32s()?,
                outputs: r.u32s()?,
            })
        })?,
        input_indexes: r.u32s()?,
        output_indexes: r.u32s()?,
    })
}

fn put_compiled(w: &mut Writer, c: &Compiled) {
    w.list(&c.ops, |w, l| {
        w.u32(l.op.opcode());
        w.u32s(&l.op.encode_params());
        w.u32s(&l.inputs);
        w.u32s(&l.outputs);
    });
    w.list(&c.shapes, |w, s| match s {
        None => w.u8(0),
        Some(s) => {
            w.u8(1);
            w.usizes(s);
        }
    });
    w.list(&c.placement, |w, p| match p {
        None => w.u8(0),
        Some(Placement::Constant(o)) => {
            w.u8(1);
            w.u64(*o);
        }
        Some(Placement::Arena(o)) => {
            w.u8(2);
            w.u64(*o);
        }
    });
    w.u64(c.arena_size);
    w.list(&c.dynamic, |w, &d| w.u8(u8::from(d)));
    w.u8(u8::from(c.loops));
    w.list(&c.grown, |w, g| {
        w.u32(g.operand);
        w.usizes(&g.initial);
        w.usizes(&g.cap);
    });
}

fn get_compiled(r: &mut Reader<'_>, operands: &[Operand]) -> Result<Compiled, CacheError> {
    // One buffer for every kernel's parameters (decoded, not kept).
    let mut params = Vec::new();
    let ops = r.list(28, |r| {
        let opcode = r.u32()?;
        r.u32s_into(&mut params)?;
        Ok(Lowered {
            op: KernelOp::decode(opcode, &params)
                .map_err(|_| CacheError::Malformed("kernel parameters"))?,
            inputs: r.u32s()?,
            outputs: r.u32s()?,
        })
    })?;
    let shapes = r.list(1, |r| match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(r.usizes()?)),
        _ => Err(CacheError::Malformed("shape")),
    })?;
    let placement = r.list(1, |r| match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(Placement::Constant(r.u64()?))),
        2 => Ok(Some(Placement::Arena(r.u64()?))),
        _ => Err(CacheError::Malformed("placement")),
    })?;
    let arena_size = r.u64()?;
    let flag = |r: &mut Reader<'_>| match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(CacheError::Malformed("flag")),
    };
    let dynamic = r.list(1, flag)?;
    let loops = flag(r)?;
    let grown = r.list(12, |r| {
        Ok(Growth {
            operand: r.u32()?,
            initial: r.usizes()?,
            cap: r.usizes()?,
        })
    })?;
    Ok(Compiled {
        ops,
        shapes,
        placement,
        arena_size,
        operands: operands.to_vec(),
        dynamic,
        loops,
        grown,
    })
}

/// The body's bytes.
pub fn encode_body(image: &Image) -> Vec<u8> {
    let mut w = Writer::new();
    let m = &image.model;
    put_subgraph(&mut w, &m.main);
    w.list(&m.referenced, put_subgraph);
    w.bool(m.relax_computation_float32_to_float16);
    w.list(&m.extension_name_to_prefix, |w, e| {
        w.bytes(e.name.as_bytes());
        w.u32(e.prefix as u32);
    });
    w.list(&image.constants, |w, (i, v)| {
        w.u32(*i);
        match v {
            ConstValue::Inline(b) => {
                w.u8(0);
                w.bytes(b.as_slice());
            }
            ConstValue::Data {
                offset,
                len,
                layout,
            } => {
                w.u8(match layout {
                    Layout::Plain => 1,
                    Layout::GemmPanels => 2,
                    Layout::IntPanels => 3,
                });
                w.u64(*offset);
                w.u64(*len);
            }
        }
    });
    match &image.instance {
        None => w.u8(0),
        Some(inst) => {
            w.u8(1);
            w.list(&inst.input_shapes, |w, s| w.usizes(s));
            put_compiled(&mut w, &inst.compiled);
            w.bytes(&inst.program);
            w.u64(inst.program_ns);
        }
    }
    w.into_bytes()
}

/// Parses a body. The result is structurally checked ([`check`]) but the caller must
/// have verified the MAC first.
pub fn decode_body(body: &[u8], data_len: u64) -> Result<Image, CacheError> {
    let mut r = Reader::new(body);
    let main = get_subgraph(&mut r)?;
    let referenced = r.list(32, get_subgraph)?;
    let relax = r.bool()?;
    let ext = r.list(12, |r| {
        let name =
            String::from_utf8(r.bytes()?).map_err(|_| CacheError::Malformed("extension name"))?;
        let prefix =
            u16::try_from(r.u32()?).map_err(|_| CacheError::Malformed("extension prefix"))?;
        Ok(ExtensionNameAndPrefix { name, prefix })
    })?;
    let constants = r.list(5, |r| {
        let i = r.u32()?;
        let v = match r.u8()? {
            0 => ConstValue::Inline(InlineBytes::new(r.byte_slice()?)),
            tag @ (1..=3) => ConstValue::Data {
                offset: r.u64()?,
                len: r.u64()?,
                layout: match tag {
                    1 => Layout::Plain,
                    2 => Layout::GemmPanels,
                    _ => Layout::IntPanels,
                },
            },
            _ => return Err(CacheError::Malformed("constant")),
        };
        Ok((i, v))
    })?;
    let instance = match r.u8()? {
        0 => None,
        1 => {
            let input_shapes = r.list(8, |r| r.usizes())?;
            let compiled = get_compiled(&mut r, &main.operands)?;
            Some(Instance {
                input_shapes,
                compiled,
                program: r.bytes()?,
                program_ns: r.u64()?,
            })
        }
        _ => return Err(CacheError::Malformed("instance")),
    };
    r.finish()?;
    let image = Image {
        model: Model {
            main,
            referenced,
            operand_values: Vec::new(),
            pools: Vec::new(),
            relax_computation_float32_to_float16: relax,
            extension_name_to_prefix: ext,
        },
        constants,
        instance,
    };
    check(&image, data_len)?;
    Ok(image)
}

/// The element type of the filters a packed constant layout holds.
pub(crate) fn layout_dtype(layout: Layout) -> vnpu_emu::tensor::DType {
    match layout {
        Layout::IntPanels => vnpu_emu::tensor::DType::I8,
        Layout::Plain | Layout::GemmPanels => vnpu_emu::tensor::DType::F32,
    }
}

fn bad(what: &'static str) -> CacheError {
    CacheError::Malformed(what)
}

/// Every index in range and every size computable: what the prepared model's code
/// relies on (a validated model's invariants), checked without trusting the file.
pub fn check(image: &Image, data_len: u64) -> Result<(), CacheError> {
    let m = &image.model;
    for sg in std::iter::once(&m.main).chain(&m.referenced) {
        let n = sg.operands.len();
        let ok = |i: &u32| (*i as usize) < n;
        let in_range = sg.input_indexes.iter().all(ok)
            && sg.output_indexes.iter().all(ok)
            && sg
                .operations
                .iter()
                .all(|op| op.inputs.iter().all(ok) && op.outputs.iter().all(ok));
        if !in_range {
            return Err(bad("operand index"));
        }
    }
    let n = m.main.operands.len();
    for (i, v) in &image.constants {
        if *i as usize >= n {
            return Err(bad("constant index"));
        }
        if let ConstValue::Data {
            offset,
            len,
            layout,
        } = v
        {
            let held = match layout {
                Layout::Plain => Some(*len),
                Layout::GemmPanels | Layout::IntPanels => {
                    let dims: Vec<usize> = m.main.operands[*i as usize]
                        .dimensions
                        .iter()
                        .map(|&d| d as usize)
                        .collect();
                    let dtype = layout_dtype(*layout);
                    let plain = dims
                        .iter()
                        .try_fold(dtype.size(), |a, &d| a.checked_mul(d as u64));
                    layout
                        .byte_len(dtype, &dims)
                        .filter(|_| plain == Some(*len))
                }
            };
            if held
                .and_then(|h| offset.checked_add(h))
                .is_none_or(|e| e > data_len)
            {
                return Err(bad("constant range"));
            }
        }
    }
    let Some(inst) = &image.instance else {
        return Ok(());
    };
    let c = &inst.compiled;
    if inst.input_shapes.len() != m.main.input_indexes.len()
        || c.shapes.len() != n
        || c.placement.len() != n
        || c.dynamic.len() != n
    {
        return Err(bad("instance size"));
    }
    let in_range = |i: &u32| (*i as usize) < n;
    if !c
        .ops
        .iter()
        .all(|l| l.inputs.iter().all(in_range) && l.outputs.iter().all(in_range))
    {
        return Err(bad("instance operand index"));
    }
    for (i, s) in c.shapes.iter().enumerate() {
        let Some(s) = s else { continue };
        let elem = crate::compile::device_dtype(m.main.operands[i].r#type).map_or(0, |d| d.size());
        let bytes = s
            .iter()
            .try_fold(elem, |acc, &d| acc.checked_mul(d as u64))
            .filter(|_| s.len() <= vnpu_emu::kernels::MAX_RANK)
            .ok_or(bad("shape"))?;
        let fits = match c.placement[i] {
            None => true,
            Some(Placement::Arena(o)) => o.checked_add(bytes).is_some_and(|e| e <= c.arena_size),
            Some(Placement::Constant(o)) => o.checked_add(bytes).is_some_and(|e| e <= data_len),
        };
        if !fits {
            return Err(bad("placement"));
        }
    }
    if inst
        .input_shapes
        .iter()
        .any(|s| s.len() > vnpu_emu::kernels::MAX_RANK)
    {
        return Err(bad("input shape"));
    }
    Ok(())
}
