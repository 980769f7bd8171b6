//! An operation's arguments bound by name: what a definition's lowering reads.

use vnpu_emu::kernels::Activation;

use super::Arg;
use super::{CompileError, Lowered, Operands};
use crate::hal::{OperandType, OperationType};
use vnpu_emu::kernels::KernelOp;

/// One operation's operands, each bound to its argument name by the matched signature.
pub struct Args<'a> {
    /// The operation.
    pub op: OperationType,
    /// The subgraph's operands: types, known shapes and constant values.
    pub operands: &'a Operands<'a>,
    /// The main operand type of the matched signature.
    pub main: OperandType,
    bound: Vec<(Arg, u32)>,
    outputs: &'a [u32],
}

impl<'a> Args<'a> {
    /// Binds `inputs` to `args` (from [`super::Signature::bind`]).
    pub fn new(
        op: OperationType,
        operands: &'a Operands<'a>,
        main: OperandType,
        args: &[Arg],
        inputs: &[u32],
        outputs: &'a [u32],
    ) -> Args<'a> {
        Args {
            op,
            operands,
            main,
            bound: args.iter().copied().zip(inputs.iter().copied()).collect(),
            outputs,
        }
    }

    fn bad(&self, why: impl Into<String>) -> CompileError {
        CompileError::InvalidParam {
            op: self.op.name_any().unwrap_or("?"),
            reason: why.into(),
        }
    }

    /// The operand bound to `name`, if present and not omitted.
    pub fn get(&self, name: &str) -> Option<u32> {
        self.bound
            .iter()
            .find(|(a, _)| a.name == name)
            .map(|&(_, i)| i)
            .filter(|&i| !self.operands.omitted(i))
    }

    /// Whether `name` is present (and not omitted).
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The operand bound to a required argument.
    pub fn input(&self, name: &str) -> Result<u32, CompileError> {
        self.get(name)
            .ok_or_else(|| self.bad(format!("missing input {name}")))
    }

    /// Every operand bound to `name` (a repeated argument), in order.
    pub fn all(&self, name: &str) -> Vec<u32> {
        self.bound
            .iter()
            .filter(|(a, _)| a.name == name)
            .map(|&(_, i)| i)
            .collect()
    }

    /// Output `k`.
    pub fn output(&self, k: usize) -> Result<u32, CompileError> {
        self.outputs
            .get(k)
            .copied()
            .ok_or_else(|| self.bad(format!("missing output {k}")))
    }

    /// All outputs.
    pub fn outputs(&self) -> &[u32] {
        self.outputs
    }

    /// An INT32 scalar.
    pub fn i32(&self, name: &str) -> Result<i32, CompileError> {
        self.operands.scalar_i32(self.input(name)?)
    }

    /// An optional INT32 scalar.
    pub fn opt_i32(&self, name: &str) -> Result<Option<i32>, CompileError> {
        self.get(name)
            .map(|i| self.operands.scalar_i32(i))
            .transpose()
    }

    /// A float scalar (FLOAT32, or FLOAT16 widened).
    pub fn f32(&self, name: &str) -> Result<f32, CompileError> {
        self.operands.scalar_float(self.input(name)?)
    }

    /// A BOOL scalar.
    pub fn bool(&self, name: &str) -> Result<bool, CompileError> {
        self.operands.scalar_bool(self.input(name)?)
    }

    /// An optional BOOL scalar, false when absent.
    pub fn flag(&self, name: &str) -> Result<bool, CompileError> {
        self.get(name)
            .map(|i| self.operands.scalar_bool(i))
            .transpose()
            .map(|b| b.unwrap_or(false))
    }

    /// The values of a TENSOR_INT32 argument.
    pub fn ints(&self, name: &str) -> Result<Vec<i32>, CompileError> {
        self.operands.tensor_i32(self.input(name)?)
    }

    /// The known shape of an argument.
    pub fn shape(&self, name: &str) -> Result<&[usize], CompileError> {
        self.operands.shape(self.input(name)?)
    }

    /// A fused activation code.
    pub fn act(&self, name: &str) -> Result<Activation, CompileError> {
        Ok(match self.i32(name)? {
            0 => Activation::None,
            1 => Activation::Relu,
            2 => Activation::Relu1,
            3 => Activation::Relu6,
            c => return Err(self.bad(format!("fused activation {c}"))),
        })
    }

    /// A strictly positive INT32 scalar.
    pub fn positive(&self, name: &str) -> Result<u32, CompileError> {
        let v = self.i32(name)?;
        u32::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| self.bad(format!("{name} = {v}")))
    }

    /// A non-negative INT32 scalar.
    pub fn non_negative(&self, name: &str) -> Result<u32, CompileError> {
        let v = self.i32(name)?;
        u32::try_from(v).map_err(|_| self.bad(format!("{name} = {v}")))
    }

    /// Resolves a possibly negative axis against `rank`.
    pub fn axis(&self, a: i32, rank: usize) -> Result<u32, CompileError> {
        let r = rank as i64;
        let v = i64::from(a);
        if v < -r || v >= r {
            return Err(self.bad(format!("axis {a} for rank {rank}")));
        }
        Ok(if v < 0 { (v + r) as u32 } else { v as u32 })
    }

    /// An invalid-parameter error for this operation.
    pub fn invalid(&self, why: impl Into<String>) -> CompileError {
        self.bad(why)
    }

    /// One kernel reading `inputs` (by argument name) and writing output 0.
    pub fn kernel(
        &self,
        op: impl Into<KernelOp>,
        inputs: &[&str],
    ) -> Result<Lowered, CompileError> {
        let ids = inputs
            .iter()
            .map(|n| self.input(n))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Lowered {
            op: op.into(),
            inputs: ids,
            outputs: vec![self.output(0)?],
        })
    }
}
