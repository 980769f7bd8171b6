//! The contract between an operation's definition and the compiler: what a lowering reads
//! ([`Operands`]: the subgraph's operands, shapes known so far, constant values), what it
//! gives ([`Lowered`]: one device kernel and its operands) and how it fails
//! ([`CompileError`], the compiler's error). It lives here, below `crate::compile`, so the
//! definitions never import the compiler that dispatches through them.

use thiserror::Error;
use vnpu_emu::kernels::KernelOp;

use crate::hal::{ErrorStatus, Operand, OperandLifeTime, OperandType, Subgraph};

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
