//! Vendor extensions: the registry of the extensions this driver supports, the decoding of a
//! model's extension types through its `extensionNameToPrefix`, and the runtime-side
//! allowlist ([`allowlist`]).
//!
//! A model names extension operand and operation types as `prefix << 16 | type`, where the
//! prefix is the one the model's `extension_name_to_prefix` gives the extension: prefixes
//! are chosen per model, so the same operation can carry different numbers in two models.
//! [`canonical_model`] rewrites every extension type of a model to the prefix this driver
//! gives the extension once and for all ([`ExtensionDef::prefix`]), after checking the
//! prefix map (names well formed, one-to-one, no prefix 0), that every prefix used is
//! declared and that every type is one the extension declares. Past that point the rest
//! of the driver sees fixed numbers: the operation definitions of `crate::ops` name
//! extension types as constants, the compiler and the compilation cache work unchanged.
//!
//! An extension the driver does not know (a well-formed name that is not in [`EXTENSIONS`])
//! gets a private prefix from [`FOREIGN_BASE`] on: its operand types get only the generic
//! checks, and its operations are never supported (getSupportedOperations says false,
//! preparation refuses), as NN's runtime expects of a driver that lacks the extension.

pub mod allowlist;
pub mod fibonacci;
pub mod fused;
pub mod litert;

use std::borrow::Cow;

use vnpu_emu::tensor::DType;

use crate::hal::{
    extension_parts, Extension, ExtensionNameAndPrefix, ExtensionOperandTypeInformation, Model,
    Operand, OperandType, OperationType, ValidationError, ValidationKind, EXTENSION_LOW_BITS_TYPE,
};

/// How the values of an extension operand type are stored (little-endian elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    /// Signed 64-bit integers.
    I64,
    /// Unsigned 64-bit integers.
    U64,
}

impl ValueKind {
    /// Bytes per element.
    pub fn size(self) -> usize {
        8
    }
}

/// One operand type an extension declares (`Extension::OperandTypeInformation`, plus what
/// the driver needs to run it).
#[derive(Clone, Copy, Debug)]
pub struct OperandTypeDef {
    /// Its name in the extension's header, e.g. `EXAMPLE_INT64`.
    pub name: &'static str,
    /// The type within the extension (the low 16 bits).
    pub r#type: u16,
    /// A tensor type (else a scalar).
    pub is_tensor: bool,
    /// Bytes per element (per value for a scalar).
    pub byte_size: u32,
    /// How its values are stored.
    pub value: ValueKind,
    /// The device element type of its tensors, if the device holds them.
    pub dtype: Option<DType>,
}

/// An extension's own check of one of its operands (extra parameters, ranks), given the
/// operand (its type already canonical) and the declaration of its type.
pub type OperandCheckFn = fn(&Operand, &OperandTypeDef) -> Result<(), String>;

/// One supported vendor extension.
#[derive(Clone, Copy, Debug)]
pub struct ExtensionDef {
    /// The extension's name, e.g. "com.example.fibonacci".
    pub name: &'static str,
    /// The prefix this driver uses for it internally (after [`canonical_model`]). Never 0,
    /// below [`FOREIGN_BASE`], and distinct across [`EXTENSIONS`].
    pub prefix: u16,
    /// Its operand types.
    pub operand_types: &'static [OperandTypeDef],
    /// Its operations: (type within the extension, name). Each has one definition in
    /// `crate::ops`, registered in the one operation list.
    pub operations: &'static [(u16, &'static str)],
    /// The extension's validator for operands of its types.
    pub check_operand: OperandCheckFn,
}

impl ExtensionDef {
    /// The declaration of operand type `t` (within the extension).
    pub fn operand_type(&self, t: u16) -> Option<&'static OperandTypeDef> {
        self.operand_types.iter().find(|d| d.r#type == t)
    }

    /// The name of operation `t` (within the extension), if declared.
    pub fn operation(&self, t: u16) -> Option<&'static str> {
        self.operations
            .iter()
            .find(|(o, _)| *o == t)
            .map(|&(_, n)| n)
    }

    /// What getSupportedExtensions reports for it.
    pub fn info(&self) -> Extension {
        Extension {
            name: self.name.to_string(),
            operand_types: self
                .operand_types
                .iter()
                .map(|d| ExtensionOperandTypeInformation {
                    r#type: d.r#type,
                    is_tensor: d.is_tensor,
                    byte_size: d.byte_size,
                })
                .collect(),
        }
    }
}

/// The operand validator of an extension that declares no operand types: never called
/// (no operand can have one of its types).
pub fn no_operand_types(_o: &Operand, def: &OperandTypeDef) -> Result<(), String> {
    Err(format!("declares no operand type {}", def.r#type))
}

/// Every extension the driver supports. Add an extension here and nowhere else (its
/// operations go in `crate::ops`'s one list).
pub static EXTENSIONS: &[&ExtensionDef] =
    &[&fibonacci::EXTENSION, &fused::EXTENSION, &litert::EXTENSION];

/// Internal prefixes from here on stand for extensions the driver does not know, one per
/// entry of the model's prefix map.
pub const FOREIGN_BASE: u16 = 0x8000;

/// The type value `prefix << 16 | t` (an extension type when `prefix` is not 0).
pub const fn encode_type(prefix: u16, t: u16) -> i32 {
    (((prefix as u32) << EXTENSION_LOW_BITS_TYPE) | t as u32) as i32
}

/// (prefix, type within the extension) of an extension type value; `None` for a
/// non-extension value (prefix 0).
pub fn decode_type(value: i32) -> Option<(u16, u16)> {
    extension_parts(value)
}

/// The extension named `name`, if supported.
pub fn by_name(name: &str) -> Option<&'static ExtensionDef> {
    EXTENSIONS.iter().copied().find(|e| e.name == name)
}

/// The extension with internal prefix `prefix`, if supported.
pub fn by_prefix(prefix: u16) -> Option<&'static ExtensionDef> {
    EXTENSIONS.iter().copied().find(|e| e.prefix == prefix)
}

/// getSupportedExtensions: every extension with its operand types.
pub fn supported_extensions() -> Vec<Extension> {
    EXTENSIONS.iter().map(|e| e.info()).collect()
}

/// Whether `name` is a well-formed extension name: lowercase `[a-z0-9_.]`, at least one
/// '.', no empty component, and starting with a reverse domain (the first component, a
/// top-level domain, is letters only).
pub fn is_valid_name(name: &str) -> bool {
    let chars_ok = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.');
    let mut parts = name.split('.');
    let tld_ok = parts
        .next()
        .is_some_and(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_lowercase()));
    let rest: Vec<&str> = parts.collect();
    chars_ok && tld_ok && !rest.is_empty() && rest.iter().all(|p| !p.is_empty())
}

/// The declaration of a (canonical) extension operand type, with its extension; `None`
/// for non-extension and foreign types.
pub fn operand_type_def(
    t: OperandType,
) -> Option<(&'static ExtensionDef, &'static OperandTypeDef)> {
    let (prefix, ty) = decode_type(t.0)?;
    let ext = by_prefix(prefix)?;
    Some((ext, ext.operand_type(ty)?))
}

/// The device element type of a (canonical) extension operand type, if any.
pub fn device_dtype(t: OperandType) -> Option<DType> {
    operand_type_def(t).and_then(|(_, d)| d.dtype)
}

/// Bytes per element of a (canonical) extension operand type.
pub fn element_size(t: OperandType) -> Option<usize> {
    operand_type_def(t).map(|(_, d)| d.byte_size as usize)
}

/// "extension:OPERATION" for a (canonical) extension operation type.
pub fn operation_name(op: OperationType) -> Option<&'static str> {
    let (prefix, t) = decode_type(op.0)?;
    by_prefix(prefix)?.operation(t)
}

/// The internal prefix of each entry of a model's prefix map, after checking the map:
/// every name well formed, no name or prefix twice (one-to-one), no prefix 0.
fn prefix_map(entries: &[ExtensionNameAndPrefix]) -> Result<Vec<(u16, u16)>, ValidationError> {
    let bad = |m: String| Err(ValidationError::new(ValidationKind::Extension, m));
    let mut map = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        if !is_valid_name(&e.name) {
            return bad(format!("extension name {:?} is not well formed", e.name));
        }
        if e.prefix == 0 {
            return bad(format!("extension {:?} has prefix 0", e.name));
        }
        if entries[..i].iter().any(|o| o.name == e.name) {
            return bad(format!("extension {:?} is listed more than once", e.name));
        }
        if entries[..i].iter().any(|o| o.prefix == e.prefix) {
            return bad(format!(
                "prefix {} is given to more than one extension (the map must be one-to-one)",
                e.prefix
            ));
        }
        let internal = match by_name(&e.name) {
            Some(def) => def.prefix,
            None => match u16::try_from(i)
                .ok()
                .and_then(|i| FOREIGN_BASE.checked_add(i))
            {
                Some(p) => p,
                None => return bad("too many extensions".into()),
            },
        };
        map.push((e.prefix, internal));
    }
    Ok(map)
}

struct Canon<'a> {
    map: &'a [(u16, u16)],
}

impl Canon<'_> {
    fn internal(&self, value: i32, what: &str) -> Result<(u16, u16), ValidationError> {
        let (prefix, t) = decode_type(value).ok_or_else(|| {
            ValidationError::new(
                ValidationKind::Extension,
                format!("{what} {value} is not an extension type"),
            )
        })?;
        let internal = self
            .map
            .iter()
            .find(|(p, _)| *p == prefix)
            .map(|&(_, i)| i)
            .ok_or_else(|| {
                ValidationError::new(
                    ValidationKind::Extension,
                    format!("{what} {value:#x}: prefix {prefix} is not in the model's extensionNameToPrefix"),
                )
            })?;
        Ok((internal, t))
    }

    fn operand(&self, t: OperandType) -> Result<OperandType, ValidationError> {
        if !t.is_extension() {
            return Ok(t);
        }
        let (p, ty) = self.internal(t.0, "operand type")?;
        if let Some(ext) = by_prefix(p) {
            if ext.operand_type(ty).is_none() {
                return Err(ValidationError::new(
                    ValidationKind::Operand,
                    format!("{} declares no operand type {ty}", ext.name),
                ));
            }
        }
        Ok(OperandType(encode_type(p, ty)))
    }

    fn operation(&self, t: OperationType) -> Result<OperationType, ValidationError> {
        if !t.is_extension() {
            return Ok(t);
        }
        let (p, ty) = self.internal(t.0, "operation type")?;
        if let Some(ext) = by_prefix(p) {
            if ext.operation(ty).is_none() {
                return Err(ValidationError::new(
                    ValidationKind::Operation,
                    format!("{} declares no operation {ty}", ext.name),
                ));
            }
        }
        Ok(OperationType(encode_type(p, ty)))
    }
}

/// `model` with every extension type rewritten to the driver's internal prefixes (see the
/// module documentation), after checking the prefix map, the prefixes used and the
/// declared types. Borrowed unchanged when the model uses no extension type; idempotent.
/// Every error is INVALID_ARGUMENT.
pub fn canonical_model(model: &Model) -> Result<Cow<'_, Model>, ValidationError> {
    let map = prefix_map(&model.extension_name_to_prefix)?;
    let canon = Canon { map: &map };
    let subgraphs = || std::iter::once(&model.main).chain(&model.referenced);
    let uses_extensions = subgraphs().any(|s| {
        s.operands.iter().any(|o| o.r#type.is_extension())
            || s.operations.iter().any(|o| o.r#type.is_extension())
    });
    let identity = map.iter().all(|(p, i)| p == i);
    if !uses_extensions || identity {
        // Still check every extension type against the map and the declarations.
        for s in subgraphs() {
            for o in &s.operands {
                canon.operand(o.r#type)?;
            }
            for o in &s.operations {
                canon.operation(o.r#type)?;
            }
        }
        return Ok(Cow::Borrowed(model));
    }
    let mut m = model.clone();
    for s in std::iter::once(&mut m.main).chain(&mut m.referenced) {
        for o in &mut s.operands {
            o.r#type = canon.operand(o.r#type)?;
        }
        for o in &mut s.operations {
            o.r#type = canon.operation(o.r#type)?;
        }
    }
    for (e, (_, internal)) in m.extension_name_to_prefix.iter_mut().zip(&map) {
        e.prefix = *internal;
    }
    Ok(Cow::Owned(m))
}

/// `t` as [`canonical_model`] would rewrite it in `model` (unchanged for a non-extension
/// type); `None` if the model's prefix map or the type is invalid.
pub fn canonical_operand_type(model: &Model, t: OperandType) -> Option<OperandType> {
    let map = prefix_map(&model.extension_name_to_prefix).ok()?;
    Canon { map: &map }.operand(t).ok()
}

/// An extension operation of `model` as `extension:OPERATION` (or `extension:number` for
/// an extension the driver lacks), through the model's prefix map; `None` for a standard
/// operation or a prefix the map does not declare.
pub fn describe_operation(model: &Model, t: OperationType) -> Option<String> {
    let (prefix, ty) = decode_type(t.0)?;
    let name = &model
        .extension_name_to_prefix
        .iter()
        .find(|e| e.prefix == prefix)?
        .name;
    let op = by_name(name).and_then(|e| e.operation(ty));
    Some(match op {
        Some(op) => format!("{name}:{op}"),
        None => format!("{name}:{ty}"),
    })
}

/// The checks every operand of an extension type gets (the operand's type is canonical):
/// scale and zero point 0, extra parameters none or extension, a scalar has rank 0; for a
/// supported extension, the extension's own validator.
pub fn check_operand(o: &Operand) -> Result<(), String> {
    use crate::hal::ExtraParams;
    if o.scale != 0.0 {
        return Err(format!("extension operand with scale {}", o.scale));
    }
    if o.zero_point != 0 {
        return Err(format!(
            "extension operand with zero point {}",
            o.zero_point
        ));
    }
    if matches!(o.extra_params, ExtraParams::ChannelQuant(_)) {
        return Err("extension operand with per-channel quantisation parameters".into());
    }
    let Some((ext, def)) = operand_type_def(o.r#type) else {
        return Ok(());
    };
    if !def.is_tensor && !o.dimensions.is_empty() {
        return Err(format!(
            "{} is a scalar but has rank {}",
            def.name,
            o.dimensions.len()
        ));
    }
    (ext.check_operand)(o, def).map_err(|e| format!("{}: {e}", ext.name))
}

/// Byte size of a value of a (canonical, supported) extension type with `dims`: `None`
/// for other types, unknown dimensions or overflow.
pub fn byte_size(t: OperandType, dims: &[u32]) -> Option<u64> {
    let (_, def) = operand_type_def(t)?;
    let es = u64::from(def.byte_size);
    if !def.is_tensor {
        return Some(es);
    }
    if dims.is_empty() || dims.contains(&0) {
        return None;
    }
    dims.iter()
        .try_fold(es, |a, &d| a.checked_mul(u64::from(d)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn registry_is_consistent() {
        for (i, e) in EXTENSIONS.iter().enumerate() {
            assert!(is_valid_name(e.name), "{}", e.name);
            assert!(e.prefix != 0 && e.prefix < FOREIGN_BASE, "{}", e.name);
            assert!(EXTENSIONS[..i]
                .iter()
                .all(|o| o.prefix != e.prefix && o.name != e.name));
            for op in e.operations {
                let t = OperationType(encode_type(e.prefix, op.0));
                let def = crate::ops::definition(t)
                    .unwrap_or_else(|| panic!("{} {} has no definition", e.name, op.1));
                assert_eq!(def.name(), op.1);
            }
        }
        let exts = supported_extensions();
        assert_eq!(exts.len(), EXTENSIONS.len());
        assert_eq!(exts[0].name, "com.example.fibonacci");
    }

    #[test]
    fn names() {
        for good in ["com.example.fibonacci", "dev.vnpu.fused", "org.a_b.x1"] {
            assert!(is_valid_name(good), "{good}");
        }
        for bad in [
            "",
            "fibonacci",
            "Com.example.x",
            "com..x",
            "com.x.",
            ".com.x",
            "com.ex-ample",
            "1com.x",
            "com.exa mple",
            "com.exämple",
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    proptest! {
        /// Encoding then decoding gives back the prefix and type for every non-zero
        /// prefix, and decoding then encoding gives back every extension value.
        #[test]
        fn type_encoding_round_trip(prefix in 1u16.., t in any::<u16>(), v in any::<i32>()) {
            let e = encode_type(prefix, t);
            prop_assert_eq!(decode_type(e), Some((prefix, t)));
            prop_assert!(OperandType(e).is_extension() && OperationType(e).is_extension());
            match decode_type(v) {
                Some((p, ty)) => {
                    prop_assert!(p != 0);
                    prop_assert_eq!(encode_type(p, ty), v);
                }
                None => prop_assert!((v as u32) <= 0xFFFF),
            }
            prop_assert_eq!(decode_type(encode_type(0, t)), None);
        }
    }
}
