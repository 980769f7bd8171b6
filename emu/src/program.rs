//! The program format (version 2): the driver's compiled form of a model, stored in device
//! DRAM, which the compute engine validates in full before running any of it.
//!
//! ```text
//! header, 32 bytes:  u32 magic "VNPG" | u32 version 2 | u32 tensor_count | u32 op_count
//!                    u32 total_len | u32 scale_count | u64 reserved (0)
//! tensor table:      tensor_count x 64 bytes:
//!                    u32 dtype (low 16 bits; high 16 bits: layout) | u32 rank
//!                    | u32 dims[6] | u64 dram_addr | u64 byte_len
//!                    f32 scale | i32 zero_point | u32 channel_axis (0xFFFF_FFFF: none)
//!                    u32 channel_count
//! scale table:       scale_count x f32: the per-channel scales of every per-channel
//!                    tensor, in tensor order (each takes the next channel_count)
//! op stream:         op_count records:
//!                    u32 opcode | u16 n_in | u16 n_out | u32 n_params |
//!                    u32 inputs[n_in] | u32 outputs[n_out] | u32 params[n_params]
//! ```
//! Tensor addresses are absolute device addresses in DRAM, aligned to the element size.
//! Bit 31 of the dtype word marks a *dynamic* tensor: its shape in the table is a capacity
//! (`byte_len` bytes), and its real shape is set at run time by the op that writes it (a
//! kernel whose output shapes depend on the input values, or one that reads a dynamic
//! tensor). A dynamic tensor is plain. Bit 30 marks a *transient* tensor: only ops after
//! its one writer read it (in a program without control flow) and the driver never does, so
//! the engine may keep it in its local memory until its last reader without writing it to
//! DRAM. The sequencer's instructions ([`crate::kernels::control`])
//! travel in the op stream; a branch target is an op index, at most `op_count`.
//! The layout ([`Layout`]) is 0 (plain, what every earlier v2 program has) or 1 (a float32
//! filter pre-packed in GEMM panels, whose `byte_len` is then the packed size); a packed
//! tensor may only be the filter (input 1) of a CONV_2D or FULLY_CONNECTED op and is never
//! written by one.
//! `dtype` is [`DType`]'s number; `opcode` and `params` are the kernel encoding of
//! [`crate::kernels::KernelOp`].

use crate::error::ProgramError;
use crate::kernels::{gemm, igemm};
use crate::kernels::{KernelOp, MAX_RANK};
pub use crate::tensor::DType;
use crate::tensor::{Layout, PerChannel, Quant, TensorType};

/// "VNPG".
pub const MAGIC: u32 = u32::from_le_bytes(*b"VNPG");
/// The format version this device runs (3: tensor entries hold 12 dimensions, were 6).
pub const VERSION: u32 = 3;
/// Bytes of the header.
pub const HEADER_SIZE: usize = 32;
/// Bytes of one tensor-table entry: dtype word, rank, [`MAX_RANK`] dimensions, address,
/// length, scale, zero point, per-channel axis and count.
pub const TENSOR_SIZE: usize = 8 + 4 * MAX_RANK + 32;
/// The most tensors a program may declare.
pub const MAX_TENSORS: u32 = 1 << 16;
/// The most ops a program may hold.
pub const MAX_OPS: u32 = 1 << 16;
/// The most per-channel scales a program may hold.
pub const MAX_SCALES: u32 = 1 << 20;
/// The largest program, in bytes.
pub const MAX_PROGRAM_LEN: u64 = 64 << 20;

const NO_AXIS: u32 = u32::MAX;
/// The dtype word's bit marking a dynamic tensor.
const DYNAMIC: u32 = 1 << 31;
/// The dtype word's bit marking a transient tensor.
const TRANSIENT: u32 = 1 << 30;

/// A tensor of the program: its type and where it lives in device DRAM.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorDesc {
    /// Element type, shape and quantisation.
    pub ty: TensorType,
    /// Device address.
    pub addr: u64,
    /// Bytes: element count times element size (for a dynamic tensor: its capacity).
    pub byte_len: u64,
    /// The shape is a capacity; the real shape is known at run time.
    pub dynamic: bool,
    /// Only ops after its writer read it, and the driver never does: it need not reach
    /// DRAM.
    pub transient: bool,
}

impl TensorDesc {
    /// A descriptor whose byte length follows from the type (its shape and layout).
    pub fn new(ty: TensorType, addr: u64) -> TensorDesc {
        let byte_len = ty.layout.byte_len(ty.dtype, &ty.shape).unwrap_or(u64::MAX);
        TensorDesc {
            ty,
            addr,
            byte_len,
            dynamic: false,
            transient: false,
        }
    }
}

/// One kernel invocation of the program.
#[derive(Clone, Debug, PartialEq)]
pub struct OpDesc {
    /// The kernel and its parameters.
    pub op: KernelOp,
    /// Input tensor ids.
    pub inputs: Vec<u32>,
    /// Output tensor ids.
    pub outputs: Vec<u32>,
}

/// A decoded, validated program.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// The tensor table.
    pub tensors: Vec<TensorDesc>,
    /// The ops, in execution order.
    pub ops: Vec<OpDesc>,
}

impl Program {
    /// Encodes the program. Used by the driver's compiler and by tests.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Vec::new();
        let put = |w: &mut Vec<u8>, v: u32| w.extend_from_slice(&v.to_le_bytes());
        let scales: Vec<f32> = self
            .tensors
            .iter()
            .filter_map(|t| t.ty.quant.per_channel.as_ref())
            .flat_map(|pc| pc.scales.iter().copied())
            .collect();
        put(&mut w, MAGIC);
        put(&mut w, VERSION);
        put(&mut w, self.tensors.len() as u32);
        put(&mut w, self.ops.len() as u32);
        put(&mut w, 0); // total_len, patched below
        put(&mut w, scales.len() as u32);
        w.extend_from_slice(&0u64.to_le_bytes());
        for t in &self.tensors {
            let dynamic =
                if t.dynamic { DYNAMIC } else { 0 } | if t.transient { TRANSIENT } else { 0 };
            put(
                &mut w,
                t.ty.dtype as u32 | (t.ty.layout as u32) << 16 | dynamic,
            );
            put(&mut w, t.ty.shape.len() as u32);
            for i in 0..MAX_RANK {
                put(&mut w, t.ty.shape.get(i).copied().unwrap_or(0) as u32);
            }
            w.extend_from_slice(&t.addr.to_le_bytes());
            w.extend_from_slice(&t.byte_len.to_le_bytes());
            put(&mut w, t.ty.quant.scale.to_bits());
            put(&mut w, t.ty.quant.zero_point as u32);
            match &t.ty.quant.per_channel {
                Some(pc) => {
                    put(&mut w, pc.axis);
                    put(&mut w, pc.scales.len() as u32);
                }
                None => {
                    put(&mut w, NO_AXIS);
                    put(&mut w, 0);
                }
            }
        }
        for s in scales {
            put(&mut w, s.to_bits());
        }
        for o in &self.ops {
            let params = o.op.encode_params();
            put(&mut w, o.op.opcode());
            w.extend_from_slice(&(o.inputs.len() as u16).to_le_bytes());
            w.extend_from_slice(&(o.outputs.len() as u16).to_le_bytes());
            put(&mut w, params.len() as u32);
            for &v in o.inputs.iter().chain(&o.outputs).chain(&params) {
                put(&mut w, v);
            }
        }
        let len = w.len() as u32;
        w[16..20].copy_from_slice(&len.to_le_bytes());
        w
    }

    /// Decodes and validates untrusted program bytes against a DRAM window
    /// `[dram_base, dram_base + dram_size)`.
    pub fn decode(bytes: &[u8], dram_base: u64, dram_size: u64) -> Result<Program, ProgramError> {
        let mut r = Reader { b: bytes, pos: 0 };
        let magic = r.u32("header")?;
        if magic != MAGIC {
            return Err(ProgramError::Header(format!("bad magic {magic:#x}")));
        }
        let version = r.u32("header")?;
        if version != VERSION {
            return Err(ProgramError::Header(format!(
                "unsupported version {version}"
            )));
        }
        let tensor_count = r.u32("header")?;
        let op_count = r.u32("header")?;
        let total_len = r.u32("header")?;
        let scale_count = r.u32("header")?;
        let reserved = r.u64("header")?;
        if reserved != 0 {
            return Err(ProgramError::Header("reserved fields must be zero".into()));
        }
        if total_len as usize != bytes.len() {
            return Err(ProgramError::Header(format!(
                "total_len {total_len} does not match {} bytes",
                bytes.len()
            )));
        }
        if tensor_count > MAX_TENSORS || op_count > MAX_OPS || scale_count > MAX_SCALES {
            return Err(ProgramError::Header(
                "too many tensors, ops or scales".into(),
            ));
        }
        let table_len = tensor_count as usize * TENSOR_SIZE + scale_count as usize * 4;
        if bytes.len() < HEADER_SIZE + table_len {
            return Err(ProgramError::Truncated("tensor table"));
        }
        let dram_end = dram_base.saturating_add(dram_size);
        // Entries first; per-channel scales come from the table after them.
        let mut raw = Vec::with_capacity(tensor_count as usize);
        for index in 0..tensor_count {
            let bad = |reason: String| ProgramError::Tensor { index, reason };
            let word = r.u32("tensor")?;
            let dtype_raw = word & 0xFFFF;
            let dtype =
                DType::from_u32(dtype_raw).ok_or_else(|| bad(format!("dtype {dtype_raw}")))?;
            let dynamic = word & DYNAMIC != 0;
            let transient = word & TRANSIENT != 0;
            let layout_raw = (word & !(DYNAMIC | TRANSIENT)) >> 16;
            let layout =
                Layout::from_u32(layout_raw).ok_or_else(|| bad(format!("layout {layout_raw}")))?;
            if dynamic && layout != Layout::Plain {
                return Err(bad("a dynamic tensor must be plain".into()));
            }
            let rank = r.u32("tensor")? as usize;
            let mut dims = [0u32; MAX_RANK];
            for d in &mut dims {
                *d = r.u32("tensor")?;
            }
            let addr = r.u64("tensor")?;
            let byte_len = r.u64("tensor")?;
            let scale = f32::from_bits(r.u32("tensor")?);
            let zero_point = r.u32("tensor")? as i32;
            let axis = r.u32("tensor")?;
            let channels = r.u32("tensor")?;
            if rank > MAX_RANK {
                return Err(bad(format!("rank {rank} > {MAX_RANK}")));
            }
            if dims[rank..].iter().any(|&d| d != 0) {
                return Err(bad("dims beyond rank must be zero".into()));
            }
            let shape: Vec<usize> = dims[..rank].iter().map(|&d| d as usize).collect();
            let want = layout
                .byte_len(dtype, &shape)
                .ok_or_else(|| bad(format!("no {layout:?} {dtype:?} tensor of shape {shape:?}")))?;
            if want != byte_len {
                return Err(bad(format!(
                    "byte_len {byte_len} does not match {layout:?} shape {shape:?}"
                )));
            }
            let end = addr
                .checked_add(byte_len)
                .ok_or_else(|| bad("address overflows".into()))?;
            if addr < dram_base || end > dram_end || addr % dtype.size() != 0 {
                return Err(bad(format!(
                    "[{addr:#x}, +{byte_len:#x}) is not aligned device DRAM"
                )));
            }
            if (axis == NO_AXIS) != (channels == 0) {
                return Err(bad("channel axis and channel count disagree".into()));
            }
            raw.push((
                (dtype, layout, dynamic, transient),
                shape,
                addr,
                byte_len,
                scale,
                zero_point,
                axis,
                channels,
            ));
        }
        let mut scales = Vec::with_capacity(scale_count as usize);
        for _ in 0..scale_count {
            scales.push(f32::from_bits(r.u32("scale table")?));
        }
        let mut next_scale = 0usize;
        let mut tensors = Vec::with_capacity(raw.len());
        for (
            index,
            (
                (dtype, layout, dynamic, transient),
                shape,
                addr,
                byte_len,
                scale,
                zero_point,
                axis,
                channels,
            ),
        ) in raw.into_iter().enumerate()
        {
            let bad = |reason: String| ProgramError::Tensor {
                index: index as u32,
                reason,
            };
            let per_channel = if axis == NO_AXIS {
                None
            } else {
                let end = next_scale
                    .checked_add(channels as usize)
                    .filter(|&e| e <= scales.len())
                    .ok_or_else(|| bad("per-channel scales overrun the scale table".into()))?;
                let pc = PerChannel {
                    axis,
                    scales: scales[next_scale..end].to_vec(),
                };
                next_scale = end;
                Some(pc)
            };
            let ty = TensorType {
                dtype,
                shape,
                quant: Quant {
                    scale,
                    zero_point,
                    per_channel,
                },
                layout,
            };
            ty.validate_quant().map_err(bad)?;
            tensors.push(TensorDesc {
                ty,
                addr,
                byte_len,
                dynamic,
                transient,
            });
        }
        if next_scale != scales.len() {
            return Err(ProgramError::Header("unused per-channel scales".into()));
        }
        let mut ops = Vec::with_capacity(op_count.min(4096) as usize);
        for index in 0..op_count {
            let bad = |reason: String| ProgramError::Op { index, reason };
            let opcode = r.u32("op")?;
            let n_in = r.u16("op")? as usize;
            let n_out = r.u16("op")? as usize;
            let n_params = r.u32("op")? as usize;
            let inputs = r.words(n_in, "op inputs")?;
            let outputs = r.words(n_out, "op outputs")?;
            let params = r.words(n_params, "op params")?;
            let op = KernelOp::decode(opcode, &params).map_err(|e| bad(e.to_string()))?;
            if !op.input_count().contains(&n_in) || n_out != op.output_count() {
                return Err(bad(format!("wrong operand counts {n_in}/{n_out}")));
            }
            let get = |id: u32| {
                tensors
                    .get(id as usize)
                    .ok_or_else(|| bad(format!("tensor id {id} out of range")))
            };
            let ins: Vec<&TensorDesc> = inputs.iter().map(|&i| get(i)).collect::<Result<_, _>>()?;
            let outs: Vec<&TensorDesc> =
                outputs.iter().map(|&i| get(i)).collect::<Result<_, _>>()?;
            let in_tys: Vec<&TensorType> = ins.iter().map(|t| &t.ty).collect();
            let out_tys: Vec<&TensorType> = outs.iter().map(|t| &t.ty).collect();
            // Shapes of dynamic tensors are known at run time, where every op is checked
            // again on the tensors' current shapes.
            if !ins.iter().chain(&outs).any(|t| t.dynamic) {
                op.check(&in_tys, &out_tys)
                    .map_err(|e| bad(e.to_string()))?;
            }
            check_layouts(&op, &in_tys, &out_tys).map_err(bad)?;
            for (&o, t) in outputs.iter().zip(&outs) {
                for (&i, s) in inputs.iter().zip(&ins) {
                    if overlaps(s, t) {
                        return Err(bad(format!("output tensor {o} overlaps input tensor {i}")));
                    }
                }
            }
            ops.push(OpDesc {
                op,
                inputs,
                outputs,
            });
        }
        if r.pos != bytes.len() {
            return Err(ProgramError::Header("trailing bytes".into()));
        }
        for (index, o) in ops.iter().enumerate() {
            if let Some(t) = o.op.branch_target() {
                if t as usize > ops.len() {
                    return Err(ProgramError::Op {
                        index: index as u32,
                        reason: format!("branch target {t} beyond the program's end"),
                    });
                }
            }
        }
        Ok(Program { tensors, ops })
    }
}

/// The bytes of a plain float32 filter `[O, ...]` (little-endian) laid out as
/// [`Layout::GemmPanels`]; `None` if `bytes` is not that filter.
pub fn pack_panels(shape: &[usize], bytes: &[u8]) -> Option<Vec<u8>> {
    let (o, k) = filter_dims(shape, bytes)?;
    let plain: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let mut out = vec![0.0f32; gemm::packed_len(k, o)?];
    let b = gemm::Mat {
        data: &plain,
        rs: 1,
        cs: k,
    };
    gemm::pack_b(k, o, b, &mut out).ok()?;
    Some(out.iter().flat_map(|v| v.to_le_bytes()).collect())
}

/// The plain bytes of a float32 filter `[O, ...]` held as [`Layout::GemmPanels`]: the
/// inverse of [`pack_panels`]; `None` if `packed` has the wrong size.
pub fn unpack_panels(shape: &[usize], packed: &[u8]) -> Option<Vec<u8>> {
    let plain_len = shape.iter().try_fold(4usize, |a, &d| a.checked_mul(d))?;
    let (o, k) = filter_dims(shape, &vec![0; plain_len])?;
    if Layout::GemmPanels.byte_len(DType::F32, shape)? != packed.len() as u64 {
        return None;
    }
    let mut out = vec![0u8; plain_len];
    for j in 0..o {
        let (p, jj) = (j / gemm::NR, j % gemm::NR);
        for l in 0..k {
            let at = ((p * k + l) * gemm::NR + jj) * 4;
            out[(j * k + l) * 4..][..4].copy_from_slice(&packed[at..at + 4]);
        }
    }
    Some(out)
}

/// `(O, K)` of a plain float32 filter `[O, ...]` of `bytes`.
fn filter_dims(shape: &[usize], bytes: &[u8]) -> Option<(usize, usize)> {
    filter_dims_of(shape, bytes, 4)
}

/// `(O, K)` of a plain filter `[O, ...]` of `bytes`, elements of `size` bytes.
fn filter_dims_of(shape: &[usize], bytes: &[u8], size: usize) -> Option<(usize, usize)> {
    let (&o, rest) = shape.split_first()?;
    let k = rest.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    (o.checked_mul(k)?.checked_mul(size)? == bytes.len() && !rest.is_empty()).then_some((o, k))
}

/// The bytes of a plain int8 filter `[O, ...]` with zero point 0 laid out as
/// [`Layout::IntPanels`]; `None` if `bytes` is not that filter.
pub fn pack_int_panels(shape: &[usize], bytes: &[u8]) -> Option<Vec<u8>> {
    let (o, k) = filter_dims_of(shape, bytes, 1)?;
    let mut out = vec![0u8; igemm::quads::packed_len(k, o)?];
    igemm::quads::pack(k, o, |kk, j| i32::from(bytes[j * k + kk] as i8), &mut out)?;
    Some(out)
}

/// The plain bytes of an int8 filter `[O, ...]` held as [`Layout::IntPanels`]: the inverse
/// of [`pack_int_panels`]; `None` if `packed` has the wrong size.
pub fn unpack_int_panels(shape: &[usize], packed: &[u8]) -> Option<Vec<u8>> {
    let plain_len = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    let (o, k) = filter_dims_of(shape, &vec![0; plain_len], 1)?;
    if Layout::IntPanels.byte_len(DType::I8, shape)? != packed.len() as u64 {
        return None;
    }
    let mut out = vec![0u8; plain_len];
    igemm::quads::unpack(k, o, packed, |kk, j, v| out[j * k + kk] = v as u8)?;
    Some(out)
}

/// Where packed layouts may appear: only as the float32 filter (input 1) of CONV_2D and
/// FULLY_CONNECTED, never as an output.
pub(crate) fn check_layouts(
    op: &KernelOp,
    inputs: &[&TensorType],
    outputs: &[&TensorType],
) -> Result<(), String> {
    let takes_panels = matches!(op, KernelOp::Conv2d(_) | KernelOp::FullyConnected(_))
        && inputs.iter().all(|t| t.dtype == DType::F32);
    // A quantised CONV_2D takes a symmetric int8 filter as integer panels.
    let takes_int_panels = matches!(op, KernelOp::Conv2d(_))
        && inputs
            .get(1)
            .is_some_and(|f| f.dtype == DType::I8 && f.quant.zero_point == 0 && f.shape.len() >= 2)
        && inputs
            .first()
            .is_some_and(|x| matches!(x.dtype, DType::I8 | DType::U8));
    for (i, t) in inputs.iter().enumerate() {
        let allowed = match t.layout {
            Layout::Plain => true,
            Layout::GemmPanels => takes_panels && i == 1,
            Layout::IntPanels => takes_int_panels && i == 1,
        };
        if !allowed {
            return Err(format!(
                "input {i} of {} cannot be {:?}",
                op.name(),
                t.layout
            ));
        }
    }
    if outputs.iter().any(|t| t.layout != Layout::Plain) {
        return Err(format!("{} writes plain tensors only", op.name()));
    }
    Ok(())
}

/// Rewrites the device address of every tensor of encoded program `bytes` through
/// `map(addr, byte_len)` (`None` refuses the program): how a driver moves a program it
/// encoded once to other device memory without encoding it again. Only the tensor
/// table's address fields change; the device validates the result as any program.
pub fn relocate(
    bytes: &mut [u8],
    mut map: impl FnMut(u64, u64) -> Option<u64>,
) -> Result<(), ProgramError> {
    let word = |b: &[u8], at: usize| -> Result<u32, ProgramError> {
        b.get(at..at + 4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
            .ok_or(ProgramError::Truncated("header"))
    };
    if word(bytes, 0)? != MAGIC || word(bytes, 4)? != VERSION {
        return Err(ProgramError::Header("not a program".into()));
    }
    let count = word(bytes, 8)? as usize;
    if count > MAX_TENSORS as usize {
        return Err(ProgramError::Header("too many tensors".into()));
    }
    for index in 0..count {
        let at = HEADER_SIZE + index * TENSOR_SIZE + ADDR_AT;
        let field = bytes
            .get_mut(at..at + 16)
            .ok_or(ProgramError::Truncated("tensor table"))?;
        let addr = u64::from_le_bytes(field[..8].try_into().unwrap_or_default());
        let len = u64::from_le_bytes(field[8..].try_into().unwrap_or_default());
        let moved = map(addr, len).ok_or_else(|| ProgramError::Tensor {
            index: index as u32,
            reason: format!("address {addr:#x} cannot be relocated"),
        })?;
        field[..8].copy_from_slice(&moved.to_le_bytes());
    }
    Ok(())
}

/// Where a tensor-table entry holds its device address (then its byte length).
const ADDR_AT: usize = 8 + 4 * MAX_RANK;

fn overlaps(a: &TensorDesc, b: &TensorDesc) -> bool {
    a.byte_len > 0 && b.byte_len > 0 && a.addr < b.addr + b.byte_len && b.addr < a.addr + a.byte_len
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], ProgramError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(ProgramError::Truncated(what))?;
        let s = self
            .b
            .get(self.pos..end)
            .ok_or(ProgramError::Truncated(what))?;
        self.pos = end;
        Ok(s)
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, ProgramError> {
        let s = self.take(2, what)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, ProgramError> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, ProgramError> {
        Ok(self.u32(what)? as u64 | (self.u32(what)? as u64) << 32)
    }
    fn words(&mut self, n: usize, what: &'static str) -> Result<Vec<u32>, ProgramError> {
        let bytes = self.take(n.checked_mul(4).ok_or(ProgramError::Truncated(what))?, what)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{Activation, Binary, BinaryKind};
    use proptest::prelude::*;

    const BASE: u64 = crate::DRAM_BASE;

    fn t(shape: &[usize], addr: u64) -> TensorDesc {
        TensorDesc::new(TensorType::new(DType::F32, shape), BASE + addr)
    }

    fn add_program() -> Program {
        Program {
            tensors: vec![t(&[2, 3], 0), t(&[2, 3], 64), t(&[2, 3], 128)],
            ops: vec![OpDesc {
                op: Binary {
                    kind: BinaryKind::Add,
                    act: Activation::None,
                }
                .into(),
                inputs: vec![0, 1],
                outputs: vec![2],
            }],
        }
    }

    #[test]
    fn round_trip() {
        let p = add_program();
        assert_eq!(Program::decode(&p.encode(), BASE, 4096).unwrap(), p);
    }

    proptest! {
        /// Packing a filter and unpacking it gives it back; the packed size is the
        /// layout's.
        #[test]
        fn panels_round_trip(o in 1usize..40, k in 1usize..40) {
            let plain: Vec<u8> = (0..o * k)
                .flat_map(|i| (i as f32 * 0.5 - 3.0).to_le_bytes())
                .collect();
            let packed = pack_panels(&[o, k], &plain).unwrap();
            prop_assert_eq!(
                Some(packed.len() as u64),
                Layout::GemmPanels.byte_len(DType::F32, &[o, k])
            );
            prop_assert_eq!(unpack_panels(&[o, k], &packed).unwrap(), plain);
            prop_assert!(unpack_panels(&[o, k], &packed[1..]).is_none());
        }
    }

    #[test]
    fn packed_filters_only_where_a_gemm_takes_them() {
        use crate::kernels::FullyConnected;
        let f = |layout| TensorType {
            layout,
            ..TensorType::new(DType::F32, &[3, 4])
        };
        let fc = |w: TensorType| Program {
            tensors: vec![
                t(&[2, 4], 0),
                TensorDesc::new(w, BASE + 64),
                t(&[3], 1024),
                t(&[2, 3], 1088),
            ],
            ops: vec![OpDesc {
                op: FullyConnected {
                    act: Activation::None,
                }
                .into(),
                inputs: vec![0, 1, 2],
                outputs: vec![3],
            }],
        };
        let packed = fc(f(Layout::GemmPanels));
        assert_eq!(packed.tensors[1].byte_len, 16 * 4 * 4);
        assert_eq!(
            Program::decode(&packed.encode(), BASE, 4096).unwrap(),
            packed
        );
        // The wrong size for the layout.
        let mut wrong = packed.clone();
        wrong.tensors[1].byte_len = 48;
        assert!(Program::decode(&wrong.encode(), BASE, 4096).is_err());
        // Packed where no GEMM takes it: the input of an ADD, an output.
        let mut add = add_program();
        add.tensors[0] = TensorDesc::new(f(Layout::GemmPanels), BASE);
        add.tensors[1].ty.shape = vec![3, 4];
        add.tensors[1].byte_len = 48;
        add.tensors[1].addr = BASE + 1024;
        add.tensors[2].ty.shape = vec![3, 4];
        add.tensors[2].byte_len = 48;
        add.tensors[2].addr = BASE + 2048;
        assert!(Program::decode(&add.encode(), BASE, 4096).is_err());
        let mut out = fc(f(Layout::Plain));
        out.tensors[3].ty.layout = Layout::GemmPanels;
        assert!(Program::decode(&out.encode(), BASE, 4096).is_err());
        // An unknown layout number.
        let mut b = packed.encode();
        b[HEADER_SIZE + TENSOR_SIZE + 2] = 7;
        assert!(Program::decode(&b, BASE, 4096).is_err());
    }

    #[test]
    fn relocation_moves_every_address() {
        let p = add_program();
        let mut b = p.encode();
        relocate(&mut b, |a, len| (len == 24).then_some(a + 4096)).unwrap();
        let q = Program::decode(&b, BASE, 8192).unwrap();
        for (t, u) in p.tensors.iter().zip(&q.tensors) {
            assert_eq!(u.addr, t.addr + 4096);
        }
        assert!(relocate(&mut b, |_, _| None).is_err());
        assert!(relocate(&mut b[..40], |a, _| Some(a)).is_err(), "truncated");
    }

    #[test]
    fn rejects_bad_programs() {
        let mut p = add_program();
        p.tensors[2].ty.shape = vec![3, 2];
        assert!(
            Program::decode(&p.encode(), BASE, 4096).is_err(),
            "wrong output shape"
        );
        let mut p = add_program();
        p.tensors[2].addr = BASE + 8;
        assert!(
            Program::decode(&p.encode(), BASE, 4096).is_err(),
            "aliasing"
        );
        let p = add_program();
        assert!(
            Program::decode(&p.encode(), BASE, 100).is_err(),
            "outside DRAM"
        );
        let mut b = add_program().encode();
        b.push(0);
        assert!(Program::decode(&b, BASE, 4096).is_err(), "trailing");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Program::decode(&bytes, BASE, 1 << 20);
        }

        #[test]
        fn corrupted_valid_program_never_panics(pos in 0usize..200, val in any::<u8>()) {
            let mut b = add_program().encode();
            let pos = pos % b.len();
            b[pos] = val;
            let _ = Program::decode(&b, BASE, 1 << 20);
        }
    }
}
