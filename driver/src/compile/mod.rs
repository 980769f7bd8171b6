//! The compiler: a validated HAL model to a device program. Lowering resolves NNAPI's
//! conventions to explicit kernels, shape inference fills in what the model leaves
//! unknown, constants get a fixed place in DRAM and activations share an arena by
//! liveness.

pub mod constants;
pub mod control;
mod fold;
mod fuse;
mod fuse_pad;
pub mod lower;
mod model_plan;
pub mod plan;

use vnpu_emu::kernels::KernelOp;
use vnpu_emu::program::{pack_int_panels, pack_panels, DType, OpDesc, Program, TensorDesc};
use vnpu_emu::tensor::{Layout, PerChannel, Quant, TensorType};

use crate::hal::{
    ExtraParams, Model, Operand, OperandLifeTime, OperandType, OperationType, Subgraph,
};
pub use crate::ops::{CompileError, Lowered, Operands};
use fold::fold_constants;
pub use lower::lower;
pub use model_plan::{ModelPlan, PlanError};
use plan::{Interval, ALIGN};

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
    /// Operands whose shape is known only at run time (`shapes` holds their capacity):
    /// outputs of kernels whose shapes depend on values, whatever reads those, and IF
    /// results whose branches disagree on a shape.
    pub dynamic: Vec<bool>,
    /// Whether the program loops (a WHILE), so needs a loop timeout.
    pub loops: bool,
    /// The loop states that change shape, with the capacities given to them.
    pub grown: Vec<Growth>,
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
    /// ([`Layout::GemmPanels`]), the symmetric int8 filters of CONV_2D as the integer
    /// GEMM's ([`Layout::IntPanels`]), so executions never pack them again.
    pub layouts: Vec<Layout>,
}

impl ConstantBlock {
    /// The layout of operand `i`'s constant.
    pub fn layout(&self, i: u32) -> Layout {
        self.layouts.get(i as usize).copied().unwrap_or_default()
    }
}

/// How the constant block holds each operand: pre-packed as [`Layout::GemmPanels`] for
/// float32 tensors of rank 2 or more that every operation using them takes as the filter
/// (input 1) of CONV_2D or FULLY_CONNECTED, as [`Layout::IntPanels`] for int8 tensors with
/// zero point 0 (per channel or per tensor) of rank 2 or more that every operation using
/// them takes as the filter of CONV_2D (the device kernels that read the panels), plain
/// otherwise.
pub fn gemm_filters(sg: &Subgraph) -> Vec<Layout> {
    // Per operand: (only ever a CONV_2D / FULLY_CONNECTED filter, only ever CONV_2D's).
    let mut uses: Vec<Option<(bool, bool)>> = vec![None; sg.operands.len()];
    for op in &sg.operations {
        let conv = op.r#type == OperationType::CONV_2D;
        let gemm = conv || op.r#type == OperationType::FULLY_CONNECTED;
        for (pos, &i) in op.inputs.iter().enumerate() {
            if let Some(u) = uses.get_mut(i as usize) {
                let (g, c) = u.unwrap_or((true, true));
                *u = Some((g && gemm && pos == 1, c && conv && pos == 1));
            }
        }
    }
    sg.operands
        .iter()
        .zip(uses)
        .map(|(o, u)| {
            let (gemm, conv) = u.unwrap_or((false, false));
            let symmetric_int8 = match o.r#type {
                OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL => true,
                OperandType::TENSOR_QUANT8_ASYMM_SIGNED => o.zero_point == 0,
                _ => false,
            };
            if o.dimensions.len() < 2 {
                Layout::Plain
            } else if gemm && o.r#type == OperandType::TENSOR_FLOAT32 {
                Layout::GemmPanels
            } else if conv && symmetric_int8 {
                Layout::IntPanels
            } else {
                Layout::Plain
            }
        })
        .collect()
}

/// Constant bytes of every operand of `sg` (CONSTANT_COPY from operandValues,
/// CONSTANT_REFERENCE from the model's pools, already read into `pools`).
fn constant_values(
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
fn constant_block(sg: &Subgraph, constants: &[Option<Vec<u8>>]) -> ConstantBlock {
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
            let packed = match filters[i] {
                Layout::Plain => None,
                Layout::GemmPanels => pack_panels(&dims, c),
                Layout::IntPanels => pack_int_panels(&dims, c),
            };
            match packed {
                Some(panels) => {
                    block.bytes.extend_from_slice(&panels);
                    block.layouts[i] = filters[i];
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
fn deferred_inputs(sg: &Subgraph) -> Vec<bool> {
    let mut inputs = vec![false; sg.operands.len()];
    for &i in &sg.input_indexes {
        if let Some(slot) = inputs.get_mut(i as usize) {
            *slot = true;
        }
    }
    let values = lower::value_operands_among(sg, Some(&inputs));
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
    operations_supported(model, &model.main, 0)
}

/// [`supported_operations`] of one subgraph. IF and WHILE run when every operation of
/// the subgraphs they reference does.
fn operations_supported(model: &Model, sg: &Subgraph, depth: usize) -> Vec<bool> {
    sg.operations
        .iter()
        .map(|op| {
            if matches!(op.r#type, OperationType::IF | OperationType::WHILE) {
                return depth < control::MAX_DEPTH
                    && op.inputs.iter().all(|&i| {
                        let Some(o) = sg.operands.get(i as usize) else {
                            return false;
                        };
                        if o.lifetime != OperandLifeTime::SUBGRAPH {
                            return true;
                        }
                        model
                            .referenced
                            .get(o.location.offset as usize)
                            .is_some_and(|r| {
                                !operations_supported(model, r, depth + 1).contains(&false)
                            })
                    });
            }
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

/// A loop state whose shape changes from one iteration to the next: the device keeps it
/// as a dynamic tensor of capacity `cap` (the shape it started with, `initial`, with
/// every changing dimension enlarged).
#[derive(Clone, Debug, PartialEq)]
pub struct Growth {
    /// The state operand.
    pub operand: u32,
    /// Its shape when the loop starts.
    pub initial: Vec<usize>,
    /// Its capacity.
    pub cap: Vec<usize>,
}

impl Growth {
    /// Room for `iterations` more steps of the change from `from` to `to`.
    fn new(operand: u32, from: &[usize], to: &[usize], iterations: usize) -> Growth {
        let cap = from
            .iter()
            .zip(to)
            .map(|(&a, &b)| {
                a.max(b)
                    .saturating_add(a.abs_diff(b).saturating_mul(iterations))
            })
            .collect();
        Growth {
            operand,
            initial: from.to_vec(),
            cap,
        }
    }

    /// Twice the room in every dimension that changes.
    fn doubled(&self) -> Growth {
        let cap = self
            .initial
            .iter()
            .zip(&self.cap)
            .map(|(&a, &c)| if a == c { c } else { c.saturating_mul(2) })
            .collect();
        Growth {
            cap,
            ..self.clone()
        }
    }
}

/// How many iterations of growth a first capacity allows for.
const FIRST_GROWTH: usize = 16;
/// How many times compilation may discover another growing loop state.
const MAX_GROWTHS: usize = 64;

/// Compiles the main subgraph for concrete input shapes ([`ModelPlan::instance`]).
/// `constants` includes the values of deferred inputs when the caller knows them;
/// `omitted` marks the inputs the request leaves out; `grown` the loop states already
/// known to grow, with their capacities.
fn compile_grown(
    model: &Model,
    constants: &[Option<Vec<u8>>],
    deferred: &[bool],
    input_shapes: &[Vec<usize>],
    omitted: &[bool],
    mut grown: Vec<Growth>,
) -> Result<Compiled, CompileError> {
    for _ in 0..MAX_GROWTHS {
        match compile_inner(model, constants, deferred, input_shapes, omitted, &grown)? {
            Pass::Grows(g) => grown.push(g),
            Pass::Done(c) => return Ok(c),
        }
    }
    Err(CompileError::InvalidParam {
        op: "WHILE",
        reason: "too many growing loop states".into(),
    })
}

/// How one pass of [`compile_inner`] ends.
enum Pass {
    /// The compiled model.
    Done(Compiled),
    /// A loop state changes shape across iterations: compile again with it dynamic.
    Grows(Growth),
}

fn compile_inner(
    model: &Model,
    constants: &[Option<Vec<u8>>],
    deferred: &[bool],
    input_shapes: &[Vec<usize>],
    omitted: &[bool],
    grown: &[Growth],
) -> Result<Pass, CompileError> {
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
    let mut lowered: Vec<Lowered> = Vec::with_capacity(sg.operations.len());
    let mut dynamic = vec![false; n];
    let mut pinned = vec![false; n];
    for g in grown {
        let at = g.operand as usize;
        if at >= n {
            return Err(CompileError::OperandRange(g.operand));
        }
        bounded(sg, g.operand, &g.cap)?;
        shapes[at] = Some(g.cap.clone());
        dynamic[at] = true;
        pinned[at] = true;
    }
    let mut written_at: Vec<Option<usize>> = vec![None; n];
    let mut control = ControlStack::default();
    for (index, op) in sg.operations.iter().enumerate() {
        if control::is_marker(op.r#type) && op.r#type != control::COPY {
            control.mark(op, &mut lowered)?;
            continue;
        }
        // Folded at preparation ([`fold_constants`]): its outputs are constants now.
        let is_constant = |o: &u32| constants.get(*o as usize).is_some_and(|c| c.is_some());
        if !op.outputs.is_empty() && op.outputs.iter().all(is_constant) {
            continue;
        }
        let l = if op.r#type == control::COPY {
            Lowered {
                op: vnpu_emu::kernels::Copy.into(),
                inputs: op.inputs.clone(),
                outputs: op.outputs.clone(),
            }
        } else {
            let ops = Operands {
                subgraph: sg,
                constants,
                shapes: &shapes,
                deferred,
                omitted,
                dynamic: &dynamic,
            };
            lower(&ops, op)?
        };
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
        let from_dynamic =
            l.op.shapes_depend_on_values() || l.inputs.iter().any(|&i| dynamic[i as usize]);
        let mut checked = !from_dynamic;
        for (&o, s) in l.outputs.iter().zip(outs) {
            bounded(sg, o, &s)?;
            let at = o as usize;
            match (&shapes[at], written_at[at]) {
                // A second writer (the other branch of an IF, a loop's next state).
                // A growing loop state keeps its capacity; the device checks each value
                // fits (and the driver compiles a larger one when one does not).
                _ if pinned[at] => {
                    if shapes[at].as_ref().is_some_and(|c| c.len() != s.len()) {
                        return Err(CompileError::InvalidParam {
                            op: "WHILE",
                            reason: format!("loop state {o} changes rank"),
                        });
                    }
                    checked = false;
                    written_at[at].get_or_insert(lowered.len());
                    continue;
                }
                (Some(prev), Some(first)) if *prev != s => {
                    if control.carried_since(first) {
                        if prev.len() != s.len() {
                            return Err(CompileError::InvalidParam {
                                op: "WHILE",
                                reason: format!("loop state {o} changes rank"),
                            });
                        }
                        return Ok(Pass::Grows(Growth::new(o, prev, &s, FIRST_GROWTH)));
                    }
                    dynamic[at] = true;
                    checked = false;
                    if checked_elems(&s) > checked_elems(prev) {
                        shapes[at] = Some(s);
                    }
                    continue;
                }
                _ => {}
            }
            dynamic[at] |= from_dynamic;
            let dims = &sg.operands[at].dimensions;
            if !dynamic[at] && !dims_compatible(dims, &s) {
                return Err(CompileError::ShapeMismatch {
                    operand: o,
                    model: dims.clone(),
                    inferred: s,
                });
            }
            shapes[at] = Some(s);
            written_at[at].get_or_insert(lowered.len());
        }
        if checked {
            let out_tys = operand_types(sg, &shapes, &l.outputs)?;
            let out_refs: Vec<&TensorType> = out_tys.iter().collect();
            l.op.check(&refs, &out_refs).map_err(kernel)?;
        }
        lowered.push(l);
    }
    control.finish()?;
    fuse::fuse_prelu(sg, &shapes, &dynamic, &mut lowered);
    fuse::fuse_requantize(sg, &shapes, &dynamic, &mut lowered);
    fuse::fuse_activations(sg, &shapes, &dynamic, &mut lowered);
    fuse::fuse_epilogues(sg, &shapes, &dynamic, &mut lowered);
    fuse_pad::fuse_pads(sg, &shapes, &dynamic, constants, &mut lowered);
    let loops = lowered
        .iter()
        .enumerate()
        .any(|(k, l)| matches!(&l.op, KernelOp::Jump(j) if (j.target as usize) <= k));
    let (placement, arena_size) = place(sg, &lowered, &shapes, constants);
    Ok(Pass::Done(Compiled {
        ops: lowered,
        shapes,
        placement,
        arena_size,
        operands: sg.operands.clone(),
        dynamic,
        loops,
        grown: grown.to_vec(),
    }))
}

/// Elements of a shape (saturating), to pick the larger of two.
fn checked_elems(s: &[usize]) -> u64 {
    s.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64))
}

/// The open IFs and loops while compiling, turning the expansion's markers
/// ([`control`]) into device branches and jumps with resolved targets.
#[derive(Default)]
struct ControlStack {
    open: Vec<Open>,
}

enum Open {
    /// The then branch, whose entry branch is at this op index.
    Then(usize),
    /// The else branch, whose entry jump (ending the then branch) is at this op index.
    Else(usize),
    /// A loop: its header's op index and its exits' branch indexes.
    Loop(usize, Vec<usize>),
}

fn unbalanced() -> CompileError {
    CompileError::InvalidParam {
        op: "IF/WHILE",
        reason: "unbalanced control markers".into(),
    }
}

fn set_target(l: &mut Lowered, target: usize) {
    let t = target as u32;
    match &mut l.op {
        KernelOp::BranchIfFalse(b) => b.target = t,
        KernelOp::Jump(j) => j.target = t,
        _ => {}
    }
}

impl ControlStack {
    fn mark(
        &mut self,
        op: &crate::hal::Operation,
        lowered: &mut Vec<Lowered>,
    ) -> Result<(), CompileError> {
        use vnpu_emu::kernels::{BranchIfFalse, Jump};
        let here = lowered.len();
        let branch = |cond: &[u32]| Lowered {
            op: BranchIfFalse { target: 0 }.into(),
            inputs: cond.to_vec(),
            outputs: Vec::new(),
        };
        let jump = |target: usize| Lowered {
            op: Jump {
                target: target as u32,
            }
            .into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        match op.r#type {
            control::IF_BEGIN => {
                lowered.push(branch(&op.inputs));
                self.open.push(Open::Then(here));
            }
            control::ELSE => {
                let Some(Open::Then(b)) = self.open.pop() else {
                    return Err(unbalanced());
                };
                lowered.push(jump(0));
                set_target(&mut lowered[b], here + 1);
                self.open.push(Open::Else(here));
            }
            control::END_IF => {
                let Some(Open::Else(j)) = self.open.pop() else {
                    return Err(unbalanced());
                };
                set_target(&mut lowered[j], here);
            }
            control::LOOP_BEGIN => self.open.push(Open::Loop(here, Vec::new())),
            control::BREAK_UNLESS => {
                let Some(Open::Loop(_, exits)) = self.open.last_mut() else {
                    return Err(unbalanced());
                };
                exits.push(here);
                lowered.push(branch(&op.inputs));
            }
            control::LOOP_END => {
                let Some(Open::Loop(header, exits)) = self.open.pop() else {
                    return Err(unbalanced());
                };
                lowered.push(jump(header));
                for e in exits {
                    set_target(&mut lowered[e], here + 1);
                }
            }
            _ => return Err(unbalanced()),
        }
        Ok(())
    }

    /// Whether an operand first written at op index `first` is carried into the loop
    /// being compiled (written before its header).
    fn carried_since(&self, first: usize) -> bool {
        self.open
            .iter()
            .any(|o| matches!(o, Open::Loop(header, _) if first < *header))
    }

    fn finish(&self) -> Result<(), CompileError> {
        if self.open.is_empty() {
            Ok(())
        } else {
            Err(unbalanced())
        }
    }
}

/// A value that lives into a loop (written before its header, used inside) is read again
/// on every iteration: it stays live until the loop's back edge. Repeated until nothing
/// changes, for nested loops.
fn extend_over_loops(ops: &[Lowered], live: &mut [Option<(usize, usize)>]) {
    let loops: Vec<(usize, usize)> = ops
        .iter()
        .enumerate()
        .filter_map(|(k, l)| match &l.op {
            KernelOp::Jump(j) if (j.target as usize) <= k => Some((j.target as usize, k)),
            _ => None,
        })
        .collect();
    let mut changed = !loops.is_empty();
    while changed {
        changed = false;
        for &(header, back) in &loops {
            for (first, last) in live.iter_mut().flatten() {
                if *first < header && *last >= header && *last < back {
                    *last = back;
                    changed = true;
                }
            }
        }
    }
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
    extend_over_loops(ops, &mut live);
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

    /// Operands only ops after their one writer read: the device keeps them in its local
    /// memory until their last reader without writing them to DRAM. Only internal arena
    /// tensors, of a program without control flow (a loop or branch would run ops again or
    /// out of order), never model outputs.
    fn transient(&self) -> Vec<bool> {
        let n = self.operands.len();
        let mut out = vec![false; n];
        if self.ops.iter().any(|l| l.op.branch_target().is_some()) {
            return out;
        }
        let mut writer: Vec<Option<usize>> = vec![None; n];
        let mut writers = vec![0u32; n];
        for (k, l) in self.ops.iter().enumerate() {
            for &o in &l.outputs {
                if let Some(w) = writer.get_mut(o as usize) {
                    *w = Some(k);
                    writers[o as usize] += 1;
                }
            }
        }
        let mut ok: Vec<Option<bool>> = vec![None; n];
        for (k, l) in self.ops.iter().enumerate() {
            for &i in &l.inputs {
                let i = i as usize;
                let after = writer.get(i).copied().flatten().map(|w| w < k);
                if let Some(slot) = ok.get_mut(i) {
                    *slot = Some(slot.unwrap_or(true) && after == Some(true));
                }
            }
        }
        for (i, t) in out.iter_mut().enumerate() {
            *t = ok[i] == Some(true)
                && writers[i] == 1
                && !self.dynamic.get(i).copied().unwrap_or(false)
                && matches!(self.placement.get(i), Some(Some(Placement::Arena(_))))
                && self
                    .operands
                    .get(i)
                    .is_some_and(|o| o.lifetime == OperandLifeTime::TEMPORARY_VARIABLE);
        }
        out
    }

    /// Operands in the order the program's tensor table lists them (first use by an op,
    /// inputs before outputs).
    fn table_order(&self) -> Vec<u32> {
        let mut seen = std::collections::HashSet::new();
        self.ops
            .iter()
            .flat_map(|l| l.inputs.iter().chain(&l.outputs))
            .copied()
            .filter(|&i| seen.insert(i))
            .collect()
    }

    /// The dynamic operands, in the order the device reports their run-time shapes.
    pub fn reported(&self) -> Vec<u32> {
        self.table_order()
            .into_iter()
            .filter(|&i| self.dynamic.get(i as usize).copied().unwrap_or(false))
            .collect()
    }

    /// The run-time shapes the device reported for [`Compiled::reported`], checked
    /// against their capacities; `None` if the report is malformed.
    pub fn parse_report(&self, bytes: &[u8]) -> Option<Vec<(u32, Vec<usize>)>> {
        let entry = crate::hw::REPORT_ENTRY as usize;
        let words = |b: &[u8]| -> Vec<u32> {
            b.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        let reported = self.reported();
        if bytes.len() != reported.len() * entry {
            return None;
        }
        reported
            .into_iter()
            .zip(bytes.chunks_exact(entry))
            .map(|(i, e)| {
                let w = words(e);
                let rank = *w.first()? as usize;
                let shape: Vec<usize> = w.get(1..1 + rank)?.iter().map(|&d| d as usize).collect();
                let cap = self.byte_len(i);
                let o = self.operands.get(i as usize)?;
                (device_bytes(o, &shape) <= cap).then_some((i, shape))
            })
            .collect()
    }

    /// Bytes of operand `i` in `shape` on the device.
    pub fn bytes_in(&self, i: u32, shape: &[usize]) -> u64 {
        self.operands
            .get(i as usize)
            .map_or(0, |o| device_bytes(o, shape))
    }

    /// The device program, with tensors at their final device addresses.
    pub fn program(
        &self,
        consts: &ConstantBlock,
        const_base: u64,
        arena_base: u64,
    ) -> Result<Program, CompileError> {
        let transient = self.transient();
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
            tensors.push(TensorDesc {
                ty,
                byte_len,
                addr,
                dynamic: self.dynamic.get(i as usize).copied().unwrap_or(false),
                transient: transient.get(i as usize).copied().unwrap_or(false),
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
