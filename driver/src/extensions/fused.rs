//! "dev.vnpu.fused": operations the vnpu accelerator runs as one fused kernel where NNAPI
//! needs a chain of operations. GELU (`0.5 x (1 + erf(x / sqrt 2))`, or its tanh
//! approximation) takes nine NNAPI operations (MUL, MUL, MUL, ADD, MUL, TANH, ADD, MUL,
//! MUL), nine kernels each reading and writing a whole tensor; fused, it is one pass. The
//! operation's definition is `crate::ops::gelu`; it runs as the device's GELU kernel.
//! The extension declares no operand types of its own.

use super::{encode_type, ExtensionDef, OperandTypeDef};
use crate::hal::{Operand, OperationType};

/// The extension's name.
pub const NAME: &str = "dev.vnpu.fused";
/// The driver's internal prefix for it.
pub const PREFIX: u16 = 2;

/// `VNPU_GELU` within the extension.
pub const VNPU_GELU: u16 = 0;

/// VNPU_GELU under the internal prefix.
pub const GELU: OperationType = OperationType(encode_type(PREFIX, VNPU_GELU));

/// The extension.
pub static EXTENSION: ExtensionDef = ExtensionDef {
    name: NAME,
    prefix: PREFIX,
    operand_types: &[],
    operations: &[(VNPU_GELU, "VNPU_GELU")],
    check_operand,
};

/// No operand types: never called.
fn check_operand(_o: &Operand, def: &OperandTypeDef) -> Result<(), String> {
    Err(format!("declares no operand type {}", def.r#type))
}
