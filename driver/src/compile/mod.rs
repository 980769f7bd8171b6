//! The compiler: a validated HAL model to a device program. Lowering resolves NNAPI's
//! conventions to explicit kernels, shape inference fills in what the model leaves
//! unknown, constants get a fixed place in DRAM and activations share an arena by
//! liveness.

pub mod constants;
mod fold;
pub mod lower;
pub mod plan;

use thiserror::Error;
use vnpu_emu::kernels::KernelOp;
use vnpu_emu::program::{pack_panels, DType, OpDesc, Program, TensorDesc};
use vnpu_emu::tensor::{Layout, PerChannel, Quant, TensorType};

use crate::hal::{
    ErrorStatus, ExtraParams, Model, Operand, OperandLifeTime, OperandType, OperationType, Subgraph,
};
pub use fold::fold_constants;
pub use lower::{lower, Lowered, Operands};
use plan::{Interval, ALIGN};

/// Why a model does not compile for the device.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CompileError {
    /// The operation has no lowering.
    #[error("operation {0} is not supported")]
    Unsupported(&'static str),
    /// The operation's main operand type is one the device does not run it on.
    #[error("{op} does not run on {type}")]
    UnsupportedType {
        /// The operation.
        op: &'static str,
        /// The main operand type.
        r#type: OperandType,
    },
    /// The operands fit none of the operation's signatures.
    #[error("{0}: operands fit none of its signatures")]
    Signature(&'static str),
    /// A parameter's value is out of range.
    #[error("{op}: invalid parameter: {reason}")]
    InvalidParam {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// An operand index out of range.
    #[error("operand {0} out of range")]
    OperandRange(u32),
    /// An operand of the wrong type.
    #[error("operand {operand} must be {want}, is {got}")]
    OperandType {
        /// The operand.
        operand: u32,
        /// The type required.
        want: OperandType,
        /// The type it has.
        got: OperandType,
    },
    /// A parameter that must be constant is not.
    #[error("operand {0} must be a constant")]
    NotConstant(u32),
    /// A constant shorter than its type.
    #[error("operand {0}: constant too short")]
    ShortConstant(u32),
    /// A tensor larger than the device takes.
    #[error("operand {operand} would take {bytes} bytes, more than the device's limit")]
    TooLarge {
        /// The operand.
        operand: u32,
        /// Its size.
        bytes: u64,
    },
    /// The shape of an operand is not known yet.
    #[error("the shape of operand {0} is not known")]
    UnknownShape(u32),
    /// A parameter's value is known only at execution.
    #[error("the value of operand {0} is known only at execution")]
    UnknownValue(u32),
    /// The model's shape contradicts the computed one.
    #[error("operand {operand}: the model says {model:?}, the computation gives {inferred:?}")]
    ShapeMismatch {
        /// The operand.
        operand: u32,
        /// What the model says.
        model: Vec<u32>,
        /// What the kernel computes.
        inferred: Vec<usize>,
    },
    /// The device kernel rejects the operation (parameters, shapes or types).
    #[error("kernel rejects operation {index}: {reason}")]
    Kernel {
        /// Operation index.
        index: usize,
        /// The kernel's reason.
        reason: String,
    },
    /// A constant's location is out of range.
    #[error("cannot read constant operand {0}: location out of range")]
    Constant(u32),
    /// The operand type has no device element type.
    #[error("operand {0}: {1} has no device element type")]
    NoDeviceType(u32, OperandType),
}

impl CompileError {
    /// The HAL status a preparation failing this way reports.
    pub fn status(&self) -> ErrorStatus {
        ErrorStatus::InvalidArgument
    }
}

/// The device element type of an operand type.
pub fn device_dtype(t: OperandType) -> Option<DType> {
    use OperandType as T;
    Some(match t {
        T::TENSOR_FLOAT32 | T::FLOAT32 => DType::F32,
        T::TENSOR_FLOAT16 | T::FLOAT16 => DType::F16,
        T::TENSOR_INT32 | T::INT32 | T::UINT32 => DType::I32,
        T::TENSOR_QUANT8_ASYMM => DType::U8,
        T::TENSOR_QUANT8_ASYMM_SIGNED
        | T::TENSOR_QUANT8_SYMM
        | T::TENSOR_QUANT8_SYMM_PER_CHANNEL => DType::I8,
        T::TENSOR_QUANT16_SYMM => DType::I16,
        T::TENSOR_QUANT16_ASYMM => DType::U16,
        T::TENSOR_BOOL8 | T::BOOL => DType::Bool8,
        _ => return crate::extensions::device_dtype(t),
    })
}

/// The device tensor type of an operand with a concrete shape.
pub fn tensor_type(o: &Operand, shape: &[usize]) -> Option<TensorType> {
    let dtype = device_dtype(o.r#type)?;
    let per_channel = match &o.extra_params {
        ExtraParams::ChannelQuant(p) => Some(PerChannel {
            axis: p.channel_dim,
            scales: p.scales.clone(),
        }),
        _ => None,
    };
    let (scale, zero_point) = if dtype.is_float() || dtype == DType::Bool8 {
        (0.0, 0)
    } else {
        (o.scale, o.zero_point)
    };
    Some(TensorType {
        dtype,
        shape: shape.to_vec(),
        quant: Quant {
            scale,
            zero_point,
            per_channel,
        },
        layout: Layout::Plain,
    })
}

/// Bytes of an operand of `shape` on the device.
fn device_bytes(o: &Operand, shape: &[usize]) -> u64 {
    let size = device_dtype(o.r#type).map_or(0, |d| d.size());
    // Saturating: [`compile`] refuses anything above MAX_TENSOR_BYTES before it is used.
    shape.iter().fold(size, |n, &d| n.saturating_mul(d as u64))
}

/// The largest tensor the device takes (its DMA and memory limits are far below this):
/// every size computed from model or request data is checked against it, so no sum or
/// product of sizes downstream can overflow.
pub const MAX_TENSOR_BYTES: u64 = 1 << 32;

/// Refuses a shape whose device size exceeds [`MAX_TENSOR_BYTES`].
fn bounded(sg: &Subgraph, i: u32, shape: &[usize]) -> Result<(), CompileError> {
    let o = sg
        .operands
        .get(i as usize)
        .ok_or(CompileError::OperandRange(i))?;
    let bytes = device_bytes(o, shape);
    if bytes > MAX_TENSOR_BYTES {
        return Err(CompileError::TooLarge { operand: i, bytes });
    }
    Ok(())
}

/// Where a tensor lives in device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Offset in the prepared model's constant block.
    Constant(u64),
    /// Offset in the execution's activation arena.
    Arena(u64),
}

/// A compiled model for one set of input shapes.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub ops: Vec<Lowered>,
    /// Shape of every operand the program touches (inferred where the model left it open).
    pub shapes: Vec<Option<Vec<usize>>>,
    pub placement: Vec<Option<Placement>>,
    pub arena_size: u64,
    /// The subgraph's operands (types and quantisation of the device tensors).
    pub operands: Vec<Operand>,
}

/// The constant tensors of a model, laid out for upload in the device's format:
/// shape-independent, so a prepared model uploads them once.
#[derive(Clone, Debug, Default)]
pub struct ConstantBlock {
    pub bytes: Vec<u8>,
    /// Offset of each constant tensor operand in `bytes`.
    pub offsets: Vec<Option<u64>>,
    /// How each constant lies in `bytes` (missing: plain): the float32 filters of CONV_2D
    /// and FULLY_CONNECTED are pre-packed as the device GEMM's panels
    /// ([`Layout::GemmPanels`]), so executions never pack them again.
    pub layouts: Vec<Layout>,
}

impl ConstantBlock {
    /// The layout of operand `i`'s constant.
    pub fn layout(&self, i: u32) -> Layout {
        self.layouts.get(i as usize).copied().unwrap_or_default()
    }
}

/// Operands the constant block holds pre-packed ([`Layout::GemmPanels`]): float32 tensors
/// of rank 2 or more that every operation using them takes as the filter (input 1) of
/// CONV_2D or FULLY_CONNECTED, which lower to the device kernels that read the panels.
pub fn gemm_filters(sg: &Subgraph) -> Vec<bool> {
    let mut uses: Vec<Option<bool>> = vec![None; sg.operands.len()];
    for op in &sg.operations {
        let gemm = matches!(
            op.r#type,
            OperationType::CONV_2D | OperationType::FULLY_CONNECTED
        );
        for (pos, &i) in op.inputs.iter().enumerate() {
            if let Some(u) = uses.get_mut(i as usize) {
                *u = Some(u.unwrap_or(true) && gemm && pos == 1);
            }
        }
    }
    sg.operands
        .iter()
        .zip(uses)
        .map(|(o, u)| {
            u == Some(true) && o.r#type == OperandType::TENSOR_FLOAT32 && o.dimensions.len() >= 2
        })
        .collect()
}

/// Constant bytes of every operand of `sg` (CONSTANT_COPY from operandValues,
/// CONSTANT_REFERENCE from the model's pools, already read into `pools`).
pub fn constant_values(
    model: &Model,
    sg: &Subgraph,
    pools: &[Vec<u8>],
) -> Result<Vec<Option<Vec<u8>>>, CompileError> {
    sg.operands
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let loc = &o.location;
            let range = loc.offset as usize..loc.offset as usize + loc.length as usize;
            let src = match o.lifetime {
                OperandLifeTime::CONSTANT_COPY => model.operand_values.get(range),
                OperandLifeTime::CONSTANT_REFERENCE => pools
                    .get(loc.pool_index as usize)
                    .and_then(|p| p.get(range)),
                _ => return Ok(None),
            };
            src.map(|b| Some(b.to_vec()))
                .ok_or(CompileError::Constant(i as u32))
        })
        .collect()
}

/// Lays out the constant tensors of `sg` for upload (scalars are folded into kernels and
/// need no device memory).
pub fn constant_block(sg: &Subgraph, constants: &[Option<Vec<u8>>]) -> ConstantBlock {
    let mut block = ConstantBlock {
        bytes: Vec::new(),
        offsets: vec![None; sg.operands.len()],
        layouts: vec![Layout::Plain; sg.operands.len()],
    };
    let filters = gemm_filters(sg);
    for (i, o) in sg.operands.iter().enumerate() {
        if !o.r#type.is_tensor() {
            continue;
        }
        if let Some(Some(c)) = constants.get(i) {
            let at = block.bytes.len().next_multiple_of(ALIGN as usize);
            block.bytes.resize(at, 0);
            let dims: Vec<usize> = o.dimensions.iter().map(|&d| d as usize).collect();
            match filters[i].then(|| pack_panels(&dims, c)).flatten() {
                Some(panels) => {
                    block.bytes.extend_from_slice(&panels);
                    block.layouts[i] = Layout::GemmPanels;
                }
                None => block.bytes.extend_from_slice(c),
            }
            block.offsets[i] = Some(at as u64);
        }
    }
    block
}

/// Model inputs the host reads at execution instead of the device: those some operation
/// reads as a parameter (e.g. RESHAPE's shape).
pub fn deferred_inputs(sg: &Subgraph) -> Vec<bool> {
    let values = lower::value_operands(sg);
    let mut d = vec![false; sg.operands.len()];
    for &i in &sg.input_indexes {
        if let Some(slot) = d.get_mut(i as usize) {
            *slot = values.get(i as usize).copied().unwrap_or(false);
        }
    }
    d
}

/// Whether each operation of the main subgraph runs on the device: its definition has a
/// lowering and runs it on these operand types. Only the definitions decide; a supported
/// operation that then fails to compile is a failure, never a skip.
pub fn supported_operations(model: &Model) -> Vec<bool> {
    let sg = &model.main;
    sg.operations
        .iter()
        .map(|op| {
            let Some(def) = crate::ops::definition(op.r#type) else {
                return false;
            };
            let ins: Option<Vec<&Operand>> = op
                .inputs
                .iter()
                .map(|&i| sg.operands.get(i as usize))
                .collect();
            let outs: Option<Vec<&Operand>> = op
                .outputs
                .iter()
                .map(|&i| sg.operands.get(i as usize))
                .collect();
            let (Some(ins), Some(outs)) = (ins, outs) else {
                return false;
            };
            def.runs_on(&ins, &outs)
        })
        .collect()
}

/// A model's dims (0 = unknown, empty = unknown rank) against a concrete shape.
pub fn dims_compatible(dims: &[u32], shape: &[usize]) -> bool {
    dims.is_empty()
        || (dims.len() == shape.len()
            && dims
                .iter()
                .zip(shape)
                .all(|(&d, &s)| d == 0 || d as usize == s))
}

/// The device tensor types of an operation's operands, by their known shapes.
fn operand_types(
    sg: &Subgraph,
    shapes: &[Option<Vec<usize>>],
    ids: &[u32],
) -> Result<Vec<TensorType>, CompileError> {
    ids.iter()
        .map(|&i| {
            let o = sg
                .operands
                .get(i as usize)
                .ok_or(CompileError::OperandRange(i))?;
            let s = shapes[i as usize]
                .as_deref()
                .ok_or(CompileError::UnknownShape(i))?;
            tensor_type(o, s).ok_or(CompileError::NoDeviceType(i, o.r#type))
        })
        .collect()
}

/// Compiles the main subgraph for concrete input shapes. `constants` includes the
/// values of deferred inputs when the caller knows them; `omitted` marks the inputs the
/// request leaves out.
pub fn compile(
    model: &Model,
    constants: &[Option<Vec<u8>>],
    input_shapes: &[Vec<usize>],
    omitted: &[bool],
) -> Result<Compiled, CompileError> {
    let sg = &model.main;
    let n = sg.operands.len();
    let mut shapes: Vec<Option<Vec<usize>>> = vec![None; n];
    for (i, o) in sg.operands.iter().enumerate() {
        if constants.get(i).is_some_and(|c| c.is_some()) {
            shapes[i] = Some(o.dimensions.iter().map(|&d| d as usize).collect());
        }
    }
    for (&idx, s) in sg.input_indexes.iter().zip(input_shapes) {
        bounded(sg, idx, s)?;
        shapes[idx as usize] = Some(s.clone());
    }
    let deferred = deferred_inputs(sg);
    let mut lowered = Vec::with_capacity(sg.operations.len());
    for (index, op) in sg.operations.iter().enumerate() {
        // Folded at preparation ([`fold_constants`]): its outputs are constants now.
        let is_constant = |o: &u32| constants.get(*o as usize).is_some_and(|c| c.is_some());
        if !op.outputs.is_empty() && op.outputs.iter().all(is_constant) {
            continue;
        }
        let ops = Operands {
            subgraph: sg,
            constants,
            shapes: &shapes,
            deferred: &deferred,
            omitted,
        };
        let l = lower(&ops, op)?;
        let kernel = |e: vnpu_emu::kernels::KernelError| CompileError::Kernel {
            index,
            reason: e.to_string(),
        };
        // The device validates parameters when it decodes the program; do the same now,
        // so a bad parameter fails preparation rather than execution.
        KernelOp::decode(l.op.opcode(), &l.op.encode_params()).map_err(kernel)?;
        let in_tys = operand_types(sg, &shapes, &l.inputs)?;
        let refs: Vec<&TensorType> = in_tys.iter().collect();
        let outs = l.op.output_shapes(&refs).map_err(kernel)?;
        for (&o, s) in l.outputs.iter().zip(outs) {
            bounded(sg, o, &s)?;
            let dims = &sg.operands[o as usize].dimensions;
            if !dims_compatible(dims, &s) {
                return Err(CompileError::ShapeMismatch {
                    operand: o,
                    model: dims.clone(),
                    inferred: s,
                });
            }
            shapes[o as usize] = Some(s);
        }
        let out_tys = operand_types(sg, &shapes, &l.outputs)?;
        let out_refs: Vec<&TensorType> = out_tys.iter().collect();
        l.op.check(&refs, &out_refs).map_err(kernel)?;
        lowered.push(l);
    }
    let (placement, arena_size) = place(sg, &lowered, &shapes, constants);
    Ok(Compiled {
        ops: lowered,
        shapes,
        placement,
        arena_size,
        operands: sg.operands.clone(),
    })
}

fn place(
    sg: &Subgraph,
    ops: &[Lowered],
    shapes: &[Option<Vec<usize>>],
    constants: &[Option<Vec<u8>>],
) -> (Vec<Option<Placement>>, u64) {
    let n = sg.operands.len();
    let end = ops.len();
    let mut live: Vec<Option<(usize, usize)>> = vec![None; n];
    let mut touch = |i: u32, step: usize| {
        let e = live[i as usize].get_or_insert((step, step));
        e.0 = e.0.min(step);
        e.1 = e.1.max(step);
    };
    for &i in &sg.input_indexes {
        touch(i, 0);
    }
    for &o in &sg.output_indexes {
        touch(o, end);
    }
    for (step, l) in ops.iter().enumerate() {
        for &i in l.inputs.iter().chain(&l.outputs) {
            touch(i, step);
        }
    }
    let mut ids = Vec::new();
    let mut intervals = Vec::new();
    for (i, l) in live.iter().enumerate() {
        let (Some((first, last)), Some(shape)) = (l, &shapes[i]) else {
            continue;
        };
        if constants.get(i).is_some_and(|c| c.is_some()) {
            continue;
        }
        let size = device_bytes(&sg.operands[i], shape);
        ids.push(i);
        intervals.push(Interval {
            size,
            first: *first,
            last: *last,
        });
    }
    let (offsets, total) = plan::plan(&intervals);
    let mut placement = vec![None; n];
    for (k, &i) in ids.iter().enumerate() {
        placement[i] = Some(Placement::Arena(offsets[k]));
    }
    (placement, total)
}

impl Compiled {
    /// Byte size of operand `i` on the device.
    pub fn byte_len(&self, i: u32) -> u64 {
        match (
            self.shapes.get(i as usize).and_then(|s| s.as_ref()),
            self.operands.get(i as usize),
        ) {
            (Some(s), Some(o)) => device_bytes(o, s),
            _ => 0,
        }
    }

    /// Device address of operand `i`.
    pub fn address(
        &self,
        i: u32,
        consts: &ConstantBlock,
        const_base: u64,
        arena_base: u64,
    ) -> Option<u64> {
        match self.placement.get(i as usize).copied().flatten() {
            Some(Placement::Arena(o)) => Some(arena_base + o),
            Some(Placement::Constant(o)) => Some(const_base + o),
            None => consts
                .offsets
                .get(i as usize)
                .copied()
                .flatten()
                .map(|o| const_base + o),
        }
    }

    /// The device program, with tensors at their final device addresses.
    pub fn program(
        &self,
        consts: &ConstantBlock,
        const_base: u64,
        arena_base: u64,
    ) -> Result<Program, CompileError> {
        let mut ids: Vec<u32> = Vec::new();
        let mut index_of = std::collections::HashMap::new();
        let mut tensors = Vec::new();
        let mut id = |i: u32, tensors: &mut Vec<TensorDesc>| -> Result<u32, CompileError> {
            if let Some(&t) = index_of.get(&i) {
                return Ok(t);
            }
            let shape = self.shapes[i as usize]
                .clone()
                .ok_or(CompileError::UnknownShape(i))?;
            let addr = self
                .address(i, consts, const_base, arena_base)
                .ok_or(CompileError::NotConstant(i))?;
            let o = self
                .operands
                .get(i as usize)
                .ok_or(CompileError::OperandRange(i))?;
            let mut ty = tensor_type(o, &shape).ok_or(CompileError::NoDeviceType(i, o.r#type))?;
            let mut byte_len = self.byte_len(i);
            let layout = consts.layout(i);
            if self.placement[i as usize].is_none() && layout != Layout::Plain {
                ty.layout = layout;
                byte_len = layout
                    .byte_len(ty.dtype, &shape)
                    .ok_or(CompileError::TooLarge {
                        operand: i,
                        bytes: u64::MAX,
                    })?;
            }
            let t = tensors.len() as u32;
            tensors.push(TensorDesc { ty, byte_len, addr });
            index_of.insert(i, t);
            ids.push(i);
            Ok(t)
        };
        let mut ops = Vec::with_capacity(self.ops.len());
        for l in &self.ops {
            let inputs = l
                .inputs
                .iter()
                .map(|&i| id(i, &mut tensors))
                .collect::<Result<_, _>>()?;
            let outputs = l
                .outputs
                .iter()
                .map(|&i| id(i, &mut tensors))
                .collect::<Result<_, _>>()?;
            ops.push(OpDesc {
                op: l.op.clone(),
                inputs,
                outputs,
            });
        }
        Ok(Program { tensors, ops })
    }
}
