//! Lowering: one NNAPI operation, bound to its definition's signature, to one device
//! kernel. The per-operation rules live in `crate::ops`, with what they read and give
//! (`crate::ops::lowering`); this module dispatches through the registry.

use crate::hal::{Operand, Operation, Subgraph};
use crate::ops::{self, Args, CompileError, Lowered, Operands};

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
