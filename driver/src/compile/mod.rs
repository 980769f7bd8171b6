//! The compiler: a validated HAL model to a device program. Lowering resolves NNAPI's
//! conventions to explicit kernels, shape inference fills in what the model leaves
//! unknown, constants get a fixed place in DRAM and activations share an arena by
//! liveness.

pub mod lower;
pub mod plan;

use thiserror::Error;
use vnpu_emu::program::{DType, OpDesc, Program, TensorDesc};

use crate::hal::{ErrorStatus, Model, OperandLifeTime, OperandType, OperationType, Subgraph};
use lower::{lower, Lowered, Operands};
use plan::{Interval, ALIGN};

#[derive(Debug, Error, Clone, PartialEq)]
pub enum CompileError {
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("invalid parameter: {0}")]
    InvalidParam(String),
    #[error("the shape of operand {0} is not known")]
    UnknownShape(u32),
    #[error("the value of operand {0} is known only at execution")]
    UnknownValue(u32),
    #[error("operand {operand}: the model says {model:?}, the computation gives {inferred:?}")]
    ShapeMismatch {
        operand: u32,
        model: Vec<u32>,
        inferred: Vec<usize>,
    },
    #[error("kernel rejects operation {index}: {reason}")]
    Kernel { index: usize, reason: String },
    #[error("cannot read constant operand {0}: {1}")]
    Constant(u32, String),
}

impl CompileError {
    pub fn status(&self) -> ErrorStatus {
        ErrorStatus::InvalidArgument
    }
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
}

/// The constant tensors of a model, laid out for upload: shape-independent, so a prepared
/// model uploads them once.
#[derive(Clone, Debug, Default)]
pub struct ConstantBlock {
    pub bytes: Vec<u8>,
    /// Offset of each constant tensor operand in `bytes`.
    pub offsets: Vec<Option<u64>>,
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
                .ok_or_else(|| CompileError::Constant(i as u32, "location out of range".into()))
        })
        .collect()
}

pub fn constant_block(sg: &Subgraph, constants: &[Option<Vec<u8>>]) -> ConstantBlock {
    let mut block = ConstantBlock {
        bytes: Vec::new(),
        offsets: vec![None; sg.operands.len()],
    };
    for (i, o) in sg.operands.iter().enumerate() {
        if o.r#type != OperandType::TENSOR_FLOAT32 {
            continue;
        }
        if let Some(Some(c)) = constants.get(i) {
            let at = block.bytes.len().next_multiple_of(ALIGN as usize);
            block.bytes.resize(at, 0);
            block.bytes.extend_from_slice(c);
            block.offsets[i] = Some(at as u64);
        }
    }
    block
}

/// Model inputs the host reads at execution instead of the device: non-float tensors,
/// which only ever serve as parameters (e.g. RESHAPE's shape).
pub fn deferred_inputs(sg: &Subgraph) -> Vec<bool> {
    let mut d = vec![false; sg.operands.len()];
    for &i in &sg.input_indexes {
        if let Some(o) = sg.operands.get(i as usize) {
            d[i as usize] = o.r#type != OperandType::TENSOR_FLOAT32;
        }
    }
    d
}

fn model_shape(dims: &[u32]) -> Option<Vec<usize>> {
    (!dims.contains(&0)).then(|| dims.iter().map(|&d| d as usize).collect())
}

/// Whether each operation of the main subgraph will prepare and run on the device.
pub fn supported_operations(model: &Model, constants: &[Option<Vec<u8>>]) -> Vec<bool> {
    let sg = &model.main;
    let shapes: Vec<Option<Vec<usize>>> = sg
        .operands
        .iter()
        .map(|o| model_shape(&o.dimensions))
        .collect();
    let deferred = deferred_inputs(sg);
    let ops = Operands {
        subgraph: sg,
        constants,
        shapes: &shapes,
        deferred: &deferred,
        omitted: &[],
    };
    sg.operations
        .iter()
        .map(|op| {
            if matches!(op.r#type, OperationType::IF | OperationType::WHILE) {
                return false;
            }
            let touches_io_types = op.inputs.iter().chain(&op.outputs).all(|&i| {
                sg.operands.get(i as usize).is_some_and(|o| {
                    matches!(
                        o.r#type,
                        OperandType::TENSOR_FLOAT32
                            | OperandType::TENSOR_INT32
                            | OperandType::INT32
                            | OperandType::FLOAT32
                            | OperandType::BOOL
                    )
                })
            });
            if !touches_io_types {
                return false;
            }
            match lower(&ops, op.r#type, &op.inputs, &op.outputs) {
                Ok(l) => check_shapes(&l, &shapes, sg).is_ok(),
                Err(CompileError::UnknownShape(_) | CompileError::UnknownValue(_)) => true,
                Err(_) => false,
            }
        })
        .collect()
}

/// Checks one lowered op's output shapes against the model where all inputs are known.
fn check_shapes(
    l: &Lowered,
    shapes: &[Option<Vec<usize>>],
    sg: &Subgraph,
) -> Result<(), CompileError> {
    let ins: Option<Vec<&[usize]>> = l
        .inputs
        .iter()
        .map(|&i| shapes.get(i as usize)?.as_deref())
        .collect();
    let Some(ins) = ins else { return Ok(()) };
    let outs = l.op.output_shapes(&ins).map_err(|e| CompileError::Kernel {
        index: 0,
        reason: e.to_string(),
    })?;
    for (&o, s) in l.outputs.iter().zip(&outs) {
        let dims = &sg.operands[o as usize].dimensions;
        if !dims_compatible(dims, s) {
            return Err(CompileError::ShapeMismatch {
                operand: o,
                model: dims.clone(),
                inferred: s.clone(),
            });
        }
    }
    Ok(())
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
        shapes[idx as usize] = Some(s.clone());
    }
    let deferred = deferred_inputs(sg);
    let mut lowered = Vec::with_capacity(sg.operations.len());
    for (index, op) in sg.operations.iter().enumerate() {
        let ops = Operands {
            subgraph: sg,
            constants,
            shapes: &shapes,
            deferred: &deferred,
            omitted,
        };
        let l = lower(&ops, op.r#type, &op.inputs, &op.outputs)?;
        let ins: Vec<&[usize]> = l
            .inputs
            .iter()
            .map(|&i| {
                shapes[i as usize]
                    .as_deref()
                    .ok_or(CompileError::UnknownShape(i))
            })
            .collect::<Result<_, _>>()?;
        let outs = l.op.output_shapes(&ins).map_err(|e| CompileError::Kernel {
            index,
            reason: e.to_string(),
        })?;
        for (&o, s) in l.outputs.iter().zip(outs) {
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
        lowered.push(l);
    }
    let (placement, arena_size) = place(sg, &lowered, &shapes, constants);
    Ok(Compiled {
        ops: lowered,
        shapes,
        placement,
        arena_size,
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
        let size = shape.iter().product::<usize>() as u64 * 4;
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
        self.shapes
            .get(i as usize)
            .and_then(|s| s.as_ref())
            .map_or(0, |s| s.iter().product::<usize>() as u64 * 4)
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
                .ok_or_else(|| {
                    CompileError::Unsupported(format!("operand {i} has no device memory"))
                })?;
            let t = tensors.len() as u32;
            tensors.push(TensorDesc {
                dtype: DType::F32,
                byte_len: self.byte_len(i),
                shape,
                addr,
            });
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
