//! "com.example.fibonacci", the example extension of NN's documentation: a signed 64-bit
//! scalar type, a tensor of unsigned 64-bit integers quantised by `{double scale; int64
//! zeroPoint}` carried in the operand's extension parameters, and FIBONACCI (n → the first
//! n Fibonacci numbers). The operation's definition is `crate::ops::fibonacci`; it runs
//! as the device's FIBONACCI kernel.

use vnpu_emu::tensor::DType;

use super::{encode_type, ExtensionDef, OperandTypeDef, ValueKind};
use crate::hal::{ExtraParams, Operand, OperandType, OperationType};

/// The extension's name.
pub const NAME: &str = "com.example.fibonacci";
/// The driver's internal prefix for it.
pub const PREFIX: u16 = 1;

/// `EXAMPLE_INT64` within the extension: a signed 64-bit scalar.
pub const EXAMPLE_INT64: u16 = 0;
/// `EXAMPLE_TENSOR_QUANT64_ASYMM` within the extension.
pub const EXAMPLE_TENSOR_QUANT64_ASYMM: u16 = 1;
/// `EXAMPLE_FIBONACCI` within the extension.
pub const EXAMPLE_FIBONACCI: u16 = 0;

/// EXAMPLE_INT64 under the internal prefix.
pub const INT64: OperandType = OperandType(encode_type(PREFIX, EXAMPLE_INT64));
/// EXAMPLE_TENSOR_QUANT64_ASYMM under the internal prefix.
pub const TENSOR_QUANT64_ASYMM: OperandType =
    OperandType(encode_type(PREFIX, EXAMPLE_TENSOR_QUANT64_ASYMM));
/// EXAMPLE_FIBONACCI under the internal prefix.
pub const FIBONACCI: OperationType = OperationType(encode_type(PREFIX, EXAMPLE_FIBONACCI));

/// The extension.
pub static EXTENSION: ExtensionDef = ExtensionDef {
    name: NAME,
    prefix: PREFIX,
    operand_types: &[
        OperandTypeDef {
            name: "EXAMPLE_INT64",
            r#type: EXAMPLE_INT64,
            is_tensor: false,
            byte_size: 8,
            value: ValueKind::I64,
            dtype: None,
        },
        OperandTypeDef {
            name: "EXAMPLE_TENSOR_QUANT64_ASYMM",
            r#type: EXAMPLE_TENSOR_QUANT64_ASYMM,
            is_tensor: true,
            byte_size: 8,
            value: ValueKind::U64,
            dtype: Some(DType::U64),
        },
    ],
    operations: &[(EXAMPLE_FIBONACCI, "EXAMPLE_FIBONACCI")],
    check_operand,
};

/// `ExampleQuant64AsymmParams`: `real = (stored - zero_point) * scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quant64Params {
    /// The scale (a double).
    pub scale: f64,
    /// The zero point (an int64).
    pub zero_point: i64,
}

impl Quant64Params {
    /// Size of the C struct: a double then an int64.
    pub const SIZE: usize = 16;

    /// The bytes a client attaches with `setOperandExtensionData` (little-endian, the C
    /// layout on every Android ABI).
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.scale.to_le_bytes());
        b[8..].copy_from_slice(&self.zero_point.to_le_bytes());
        b
    }

    /// Parses and checks the parameters: exactly 16 bytes, a finite positive scale.
    pub fn parse(bytes: &[u8]) -> Result<Quant64Params, String> {
        let b: &[u8; 16] = bytes.try_into().map_err(|_| {
            format!(
                "quantisation parameters are {} bytes, {{double, int64}} is {}",
                bytes.len(),
                Self::SIZE
            )
        })?;
        let mut s = [0u8; 8];
        s.copy_from_slice(&b[..8]);
        let mut z = [0u8; 8];
        z.copy_from_slice(&b[8..]);
        let p = Quant64Params {
            scale: f64::from_le_bytes(s),
            zero_point: i64::from_le_bytes(z),
        };
        if !(p.scale.is_finite() && p.scale > 0.0) {
            return Err(format!("scale {} is not finite and positive", p.scale));
        }
        Ok(p)
    }

    /// The parameters of an EXAMPLE_TENSOR_QUANT64_ASYMM operand.
    pub fn of(o: &Operand) -> Result<Quant64Params, String> {
        match &o.extra_params {
            ExtraParams::Extension(b) => Self::parse(b),
            _ => Err("EXAMPLE_TENSOR_QUANT64_ASYMM without its quantisation parameters".into()),
        }
    }
}

/// The extension's own operand checks: EXAMPLE_INT64 carries no extra parameters;
/// EXAMPLE_TENSOR_QUANT64_ASYMM carries valid [`Quant64Params`].
fn check_operand(o: &Operand, def: &OperandTypeDef) -> Result<(), String> {
    match def.r#type {
        EXAMPLE_INT64 => match o.extra_params {
            ExtraParams::None => Ok(()),
            _ => Err("EXAMPLE_INT64 takes no extra parameters".into()),
        },
        _ => Quant64Params::of(o).map(|_| ()),
    }
}
