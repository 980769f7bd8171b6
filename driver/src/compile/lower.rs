//! Lowering: one NNAPI operation, bound to its definition's signature, to one device
//! kernel. The per-operation rules live in `crate::ops`; this module gives them read access
//! to the subgraph's operands and dispatches through the registry.

use vnpu_emu::kernels::KernelOp;

use super::CompileError;
use crate::hal::{Operand, OperandLifeTime, OperandType, Operation, Subgraph};
use crate::ops::{self, Args};

/// Read access to a subgraph's operands: types, shapes known so far, constant values.
pub struct Operands<'a> {
    /// The subgraph.
    pub subgraph: &'a Subgraph,
    /// Constant bytes of each operand (CONSTANT_COPY / CONSTANT_REFERENCE), if any.
    pub constants: &'a [Option<Vec<u8>>],
    /// Shapes known so far (model dims, request dims or inferred).
    pub shapes: &'a [Option<Vec<usize>>],
    /// Operands whose values the host learns only at execution (model inputs read as
    /// parameters, such as RESHAPE's shape).
    pub deferred: &'a [bool],
    /// Model inputs the request leaves out (`hasNoValue`): treated as NO_VALUE.
    pub omitted: &'a [bool],
    /// Operands whose shape is known only at run time (`shapes` holds their capacity).
    pub dynamic: &'a [bool],
}

/// A lowered operation: the kernel plus the operands that become its tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct Lowered {
    /// The kernel.
    pub op: KernelOp,
    /// Operand indices of its inputs.
    pub inputs: Vec<u32>,
    /// Operand indices of its outputs.
    pub outputs: Vec<u32>,
}

impl Operands<'_> {
    /// Operand `i`.
    pub fn operand(&self, i: u32) -> Result<&Operand, CompileError> {
        self.subgraph
            .operands
            .get(i as usize)
            .ok_or(CompileError::OperandRange(i))
    }

    /// Whether operand `i` has no value (NO_VALUE, or omitted by the request).
    pub fn omitted(&self, i: u32) -> bool {
        self.subgraph
            .operands
            .get(i as usize)
            .is_some_and(|o| o.lifetime == OperandLifeTime::NO_VALUE)
            || self.omitted.get(i as usize).copied().unwrap_or(false)
    }

    /// The bytes of a constant (or known deferred) operand.
    pub fn constant(&self, i: u32) -> Result<&[u8], CompileError> {
        if let Some(c) = self.constants.get(i as usize).and_then(|c| c.as_deref()) {
            return Ok(c);
        }
        if self.deferred.get(i as usize).copied().unwrap_or(false) {
            return Err(CompileError::UnknownValue(i));
        }
        Err(CompileError::NotConstant(i))
    }

    fn scalar<const N: usize>(&self, i: u32, want: OperandType) -> Result<[u8; N], CompileError> {
        let t = self.operand(i)?.r#type;
        if t != want {
            return Err(CompileError::OperandType {
                operand: i,
                want,
                got: t,
            });
        }
        self.constant(i)?
            .get(..N)
            .and_then(|s| s.try_into().ok())
            .ok_or(CompileError::ShortConstant(i))
    }

    /// An INT32 scalar.
    pub fn scalar_i32(&self, i: u32) -> Result<i32, CompileError> {
        self.scalar(i, OperandType::INT32).map(i32::from_le_bytes)
    }

    /// A FLOAT32 scalar, or a FLOAT16 one widened.
    pub fn scalar_float(&self, i: u32) -> Result<f32, CompileError> {
        if self.operand(i)?.r#type == OperandType::FLOAT16 {
            return self
                .scalar(i, OperandType::FLOAT16)
                .map(|b| half::f16::from_le_bytes(b).to_f32());
        }
        self.scalar(i, OperandType::FLOAT32).map(f32::from_le_bytes)
    }

    /// A BOOL scalar.
    pub fn scalar_bool(&self, i: u32) -> Result<bool, CompileError> {
        self.scalar::<1>(i, OperandType::BOOL).map(|b| b[0] != 0)
    }

    /// The values of a constant TENSOR_INT32.
    pub fn tensor_i32(&self, i: u32) -> Result<Vec<i32>, CompileError> {
        let t = self.operand(i)?.r#type;
        if t != OperandType::TENSOR_INT32 {
            return Err(CompileError::OperandType {
                operand: i,
                want: OperandType::TENSOR_INT32,
                got: t,
            });
        }
        Ok(self
            .constant(i)?
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Whether operand `i`'s shape is known only at run time.
    pub fn is_dynamic(&self, i: u32) -> bool {
        self.dynamic.get(i as usize).copied().unwrap_or(false)
    }

    /// The known shape of operand `i`.
    pub fn shape(&self, i: u32) -> Result<&[usize], CompileError> {
        self.shapes
            .get(i as usize)
            .and_then(|s| s.as_deref())
            .ok_or(CompileError::UnknownShape(i))
    }
}

/// Lowers one operation through its definition.
pub fn lower(ops: &Operands<'_>, op: &Operation) -> Result<Lowered, CompileError> {
    let name = op.r#type.name_any().unwrap_or("(unknown)");
    let def = ops::definition(op.r#type).ok_or(CompileError::Unsupported(name))?;
    let lower = def.lower.ok_or(CompileError::Unsupported(name))?;
    let ins: Vec<&Operand> = op
        .inputs
        .iter()
        .map(|&i| ops.operand(i))
        .collect::<Result<_, _>>()?;
    let outs: Vec<&Operand> = op
        .outputs
        .iter()
        .map(|&i| ops.operand(i))
        .collect::<Result<_, _>>()?;
    let (sig, args) = def.bind(&ins, &outs).ok_or(CompileError::Signature(name))?;
    let main = ins
        .get(sig.main)
        .map(|o| o.r#type)
        .ok_or(CompileError::Signature(name))?;
    if !def.runs.contains(&main) {
        return Err(CompileError::UnsupportedType {
            op: name,
            r#type: main,
        });
    }
    let a = Args::new(op.r#type, ops, main, &args, &op.inputs, &op.outputs);
    lower(&a)
}

/// For each operand of `sg`, whether some operation reads its value at compile time
/// (scalars and parameter tensors), by the signatures of the operations that consume it.
pub fn value_operands(sg: &Subgraph) -> Vec<bool> {
    value_operands_among(sg, None)
}

/// [`value_operands`], looking only at the operations that read an operand `wanted`
/// marks (all of them without it): binding every signature of a large model costs a
/// cache load more than the rest of its restore.
pub fn value_operands_among(sg: &Subgraph, wanted: Option<&[bool]>) -> Vec<bool> {
    let mut v = vec![false; sg.operands.len()];
    for op in &sg.operations {
        if let Some(w) = wanted {
            if !op.inputs.iter().any(|&i| w.get(i as usize) == Some(&true)) {
                continue;
            }
        }
        let Some(def) = ops::definition(op.r#type) else {
            continue;
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
            continue;
        };
        if let Some((_, args)) = def.bind(&ins, &outs) {
            for (a, &i) in args.iter().zip(&op.inputs) {
                if a.ty.is_value() {
                    if let Some(slot) = v.get_mut(i as usize) {
                        *slot = true;
                    }
                }
            }
        }
    }
    v
}
