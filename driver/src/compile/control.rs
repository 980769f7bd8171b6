//! IF and WHILE, as the device sees them: at preparation the referenced subgraphs are
//! expanded into the main subgraph, each call site getting its own operands, between
//! structured control markers; the compiler turns the markers into the device's branch and
//! jump instructions ([`vnpu_emu::kernels::control`]). A condition is read on the device,
//! a loop iterates on the device: no host round trip per branch or iteration.
//!
//! ```text
//! IF(c, then, else, args) -> outs:   IF_BEGIN(c)  <then, args -> outs>  ELSE
//!                                    <else, args -> outs>  END_IF
//! WHILE(cond, body, in) -> outs:     COPY(in[j] -> s[j])...  LOOP_BEGIN
//!                                    <cond, s ++ inputs-only -> c>  BREAK_UNLESS(c)
//!                                    <body, s ++ inputs-only -> b>  COPY(b[j] -> s[j])...
//!                                    LOOP_END  COPY(s[j] -> outs[j])...
//! ```
//! A callee's inputs are the caller's operands themselves (no copy); an IF's branches
//! write the IF's outputs directly. The markers are operations of types no client can
//! send (validation refuses unknown types), so they only ever come from here.

use super::CompileError;
use crate::hal::{Model, Operand, OperandLifeTime, Operation, OperationType, Subgraph};

/// `COPY(src) -> dst`: the value and shape of `src` into `dst`.
pub const COPY: OperationType = OperationType(-1);
/// `IF_BEGIN(cond)`: runs what follows when `cond` is true, else skips to after `ELSE`.
pub const IF_BEGIN: OperationType = OperationType(-2);
/// `ELSE`: the end of the then branch (continues after `END_IF`).
pub const ELSE: OperationType = OperationType(-3);
/// `END_IF`: the end of the else branch.
pub const END_IF: OperationType = OperationType(-4);
/// `LOOP_BEGIN`: a loop's header, where each iteration starts.
pub const LOOP_BEGIN: OperationType = OperationType(-5);
/// `BREAK_UNLESS(cond)`: leaves the loop (to after `LOOP_END`) when `cond` is false.
pub const BREAK_UNLESS: OperationType = OperationType(-6);
/// `LOOP_END`: back to the loop's header.
pub const LOOP_END: OperationType = OperationType(-7);

/// How deeply IF and WHILE may nest.
pub const MAX_DEPTH: usize = 16;
/// The most operations an expanded model may have.
const MAX_OPERATIONS: usize = 1 << 16;

/// Whether `t` is one of the control markers (or COPY).
pub fn is_marker(t: OperationType) -> bool {
    (-7..=-1).contains(&t.0)
}

/// Whether the main subgraph holds IF or WHILE.
pub fn has_control_flow(model: &Model) -> bool {
    model
        .main
        .operations
        .iter()
        .any(|o| matches!(o.r#type, OperationType::IF | OperationType::WHILE))
}

/// The model with every IF and WHILE of its main subgraph expanded (itself when it has
/// none). Main's operands keep their indexes, so requests still name them.
pub fn flatten(mut model: Model) -> Result<Model, CompileError> {
    if !has_control_flow(&model) {
        return Ok(model);
    }
    let main = &model.main;
    let mut out = Subgraph {
        operands: main.operands.clone(),
        operations: Vec::new(),
        input_indexes: main.input_indexes.clone(),
        output_indexes: main.output_indexes.clone(),
    };
    let map: Vec<u32> = (0..main.operands.len() as u32).collect();
    Expander {
        model: &model,
        out: &mut out,
    }
    .expand(&model.main, &map, 0)?;
    model.main = out;
    Ok(model)
}

struct Expander<'m, 'o> {
    model: &'m Model,
    out: &'o mut Subgraph,
}

fn bad(reason: impl Into<String>) -> CompileError {
    CompileError::InvalidParam {
        op: "IF/WHILE",
        reason: reason.into(),
    }
}

impl Expander<'_, '_> {
    fn push(
        &mut self,
        r#type: OperationType,
        inputs: Vec<u32>,
        outputs: Vec<u32>,
    ) -> Result<(), CompileError> {
        if self.out.operations.len() >= MAX_OPERATIONS {
            return Err(bad("the expanded model has too many operations"));
        }
        self.out.operations.push(Operation {
            r#type,
            inputs,
            outputs,
        });
        Ok(())
    }

    /// A new operand like `like`, internal to the expansion.
    fn fresh(&mut self, like: &Operand) -> u32 {
        let mut o = like.clone();
        if matches!(
            o.lifetime,
            OperandLifeTime::SUBGRAPH_INPUT | OperandLifeTime::SUBGRAPH_OUTPUT
        ) {
            o.lifetime = OperandLifeTime::TEMPORARY_VARIABLE;
        }
        o.number_of_consumers = 0;
        self.out.operands.push(o);
        (self.out.operands.len() - 1) as u32
    }

    /// The subgraph a SUBGRAPH operand (flat index) refers to.
    fn callee(&self, flat: u32) -> Result<&Subgraph, CompileError> {
        let o = self
            .out
            .operands
            .get(flat as usize)
            .ok_or(CompileError::OperandRange(flat))?;
        if o.lifetime != OperandLifeTime::SUBGRAPH {
            return Err(bad(format!("operand {flat} is not a subgraph reference")));
        }
        self.model
            .referenced
            .get(o.location.offset as usize)
            .ok_or_else(|| bad("subgraph reference out of range"))
    }

    fn expand(&mut self, sg: &Subgraph, map: &[u32], depth: usize) -> Result<(), CompileError> {
        if depth > MAX_DEPTH {
            return Err(bad(format!("control flow nests deeper than {MAX_DEPTH}")));
        }
        let flat = |ids: &[u32]| -> Result<Vec<u32>, CompileError> {
            ids.iter()
                .map(|&i| {
                    map.get(i as usize)
                        .copied()
                        .ok_or(CompileError::OperandRange(i))
                })
                .collect()
        };
        for op in &sg.operations {
            let ins = flat(&op.inputs)?;
            let outs = flat(&op.outputs)?;
            match op.r#type {
                OperationType::IF => self.expand_if(&ins, &outs, depth)?,
                OperationType::WHILE => self.expand_while(&ins, &outs, depth)?,
                t => self.push(t, ins, outs)?,
            }
        }
        Ok(())
    }

    /// Expands `callee` with its inputs bound to `args` and its outputs to `outs` (fresh
    /// operands when `None`); returns the operands holding its outputs.
    fn call(
        &mut self,
        reference: u32,
        args: &[u32],
        outs: Option<&[u32]>,
        depth: usize,
    ) -> Result<Vec<u32>, CompileError> {
        let callee = self.callee(reference)?.clone();
        if callee.input_indexes.len() != args.len() {
            return Err(bad(format!(
                "the subgraph takes {} inputs, given {}",
                callee.input_indexes.len(),
                args.len()
            )));
        }
        if let Some(o) = outs {
            if callee.output_indexes.len() != o.len() {
                return Err(bad(format!(
                    "the subgraph gives {} outputs, {} expected",
                    callee.output_indexes.len(),
                    o.len()
                )));
            }
        }
        let mut map: Vec<Option<u32>> = vec![None; callee.operands.len()];
        let bind = |map: &mut Vec<Option<u32>>, at: u32, to: u32, this: &Self| {
            let (Some(slot), Some(theirs), Some(ours)) = (
                map.get_mut(at as usize),
                callee.operands.get(at as usize),
                this.out.operands.get(to as usize),
            ) else {
                return Err(CompileError::OperandRange(at));
            };
            if !same_type(theirs, ours) {
                return Err(bad(format!(
                    "operand {to} ({}) does not match the subgraph's ({})",
                    ours.r#type, theirs.r#type
                )));
            }
            *slot = Some(to);
            Ok(())
        };
        for (&at, &to) in callee.input_indexes.iter().zip(args) {
            bind(&mut map, at, to, self)?;
        }
        if let Some(o) = outs {
            for (&at, &to) in callee.output_indexes.iter().zip(o) {
                bind(&mut map, at, to, self)?;
            }
        }
        let map: Vec<u32> = callee
            .operands
            .iter()
            .zip(map)
            .map(|(o, m)| m.unwrap_or_else(|| self.fresh(o)))
            .collect();
        self.expand(&callee, &map, depth + 1)?;
        Ok(callee
            .output_indexes
            .iter()
            .map(|&i| map[i as usize])
            .collect())
    }

    fn expand_if(&mut self, ins: &[u32], outs: &[u32], depth: usize) -> Result<(), CompileError> {
        let [cond, then, otherwise, args @ ..] = ins else {
            return Err(bad("IF takes a condition and two subgraphs"));
        };
        self.push(IF_BEGIN, vec![*cond], Vec::new())?;
        self.call(*then, args, Some(outs), depth)?;
        self.push(ELSE, Vec::new(), Vec::new())?;
        self.call(*otherwise, args, Some(outs), depth)?;
        self.push(END_IF, Vec::new(), Vec::new())
    }

    fn expand_while(
        &mut self,
        ins: &[u32],
        outs: &[u32],
        depth: usize,
    ) -> Result<(), CompileError> {
        let [cond, body, inputs @ ..] = ins else {
            return Err(bad("WHILE takes two subgraphs"));
        };
        let carried = self.callee(*body)?.output_indexes.len();
        if carried < outs.len() || carried > inputs.len() {
            return Err(bad(
                "WHILE's body outputs do not match its inputs and outputs",
            ));
        }
        let mut state = Vec::with_capacity(carried);
        for &i in &inputs[..carried] {
            let like = self.out.operands[i as usize].clone();
            let s = self.fresh(&like);
            self.out.operands[s as usize].lifetime = OperandLifeTime::TEMPORARY_VARIABLE;
            self.push(COPY, vec![i], vec![s])?;
            state.push(s);
        }
        let args: Vec<u32> = state.iter().chain(&inputs[carried..]).copied().collect();
        self.push(LOOP_BEGIN, Vec::new(), Vec::new())?;
        let c = self.call(*cond, &args, None, depth)?;
        let [c] = c[..] else {
            return Err(bad("WHILE's condition must give one output"));
        };
        self.push(BREAK_UNLESS, vec![c], Vec::new())?;
        let next = self.call(*body, &args, None, depth)?;
        for (&n, &s) in next.iter().zip(&state) {
            self.push(COPY, vec![n], vec![s])?;
        }
        self.push(LOOP_END, Vec::new(), Vec::new())?;
        for (&s, &o) in state.iter().zip(outs) {
            self.push(COPY, vec![s], vec![o])?;
        }
        Ok(())
    }
}

/// Whether a caller's operand may stand for a callee's: the same type and quantisation
/// (dimensions may differ: either side may leave them unknown).
fn same_type(a: &Operand, b: &Operand) -> bool {
    a.r#type == b.r#type && a.scale == b.scale && a.zero_point == b.zero_point
}
