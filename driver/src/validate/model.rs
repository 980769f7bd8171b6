//! Model validation: operands, operations (with their signatures, at the interface's
//! level), subgraph inputs and outputs, subgraph references (see the module above).

use std::collections::HashSet;

use super::is_scalar_type;
use crate::hal::types::*;
use crate::hal::validate::{
    bail, operand_size, validate_execution_preference, validate_memory, validate_priority,
    ValidationError, ValidationKind,
};
use crate::ops::check_operation_signature;

/// Whether the model holds OEM operand types or OEM_OPERATION (deprecated since NN HAL
/// 1.2 in favour of vendor extensions; refused).
fn is_oem_operand(t: OperandType) -> bool {
    t == OperandType::OEM || t == OperandType::TENSOR_OEM_BYTE
}

/// Whether `o` is a constant (its value in the model).
fn is_constant(o: &Operand) -> bool {
    matches!(
        o.lifetime,
        OperandLifeTime::CONSTANT_COPY | OperandLifeTime::CONSTANT_REFERENCE
    )
}

/// A known (or extension) type that is not OEM, and a rank the type allows.
fn type_and_rank(o: &Operand, w: &str) -> Result<(), ValidationError> {
    let t = o.r#type;
    if is_oem_operand(t) {
        bail!(
            Operand,
            "{w}: {t} is deprecated (OEM types are replaced by vendor extensions)"
        );
    }
    // Extension types were checked against the prefix map and the declarations when
    // the model was made canonical.
    if !t.is_known() && !t.is_extension() {
        bail!(Operand, "{w}: invalid operand type {}", t.0);
    }
    if t.is_scalar() && !o.dimensions.is_empty() {
        bail!(Operand, "{w}: scalar {t} has rank {}", o.dimensions.len());
    }
    let tensor = t.is_tensor() || (t.is_extension() && !is_scalar_type(t));
    if tensor && is_constant(o) && o.dimensions.is_empty() {
        bail!(Operand, "{w}: constant tensor has rank 0");
    }
    Ok(())
}

/// The scale and zero point the type allows.
fn quantisation(o: &Operand, w: &str) -> Result<(), ValidationError> {
    let t = o.r#type;
    let s = o.scale;
    match t {
        T::TENSOR_INT32 => {
            if s.is_nan() || s < 0.0 {
                bail!(Operand, "{w}: TENSOR_INT32 scale {s} is negative");
            }
        }
        T::TENSOR_QUANT8_ASYMM
        | T::TENSOR_QUANT8_ASYMM_SIGNED
        | T::TENSOR_QUANT8_SYMM
        | T::TENSOR_QUANT16_ASYMM
        | T::TENSOR_QUANT16_SYMM => {
            if !is_positive_finite(s) {
                bail!(Operand, "{w}: {t} scale {s} is not positive");
            }
        }
        T::OEM | T::TENSOR_OEM_BYTE => {}
        _ => {
            if s != 0.0 {
                bail!(Operand, "{w}: {t} scale {s} is not 0");
            }
        }
    }
    let z = o.zero_point;
    let z_ok = match t {
        T::TENSOR_QUANT8_ASYMM => (0..=255).contains(&z),
        T::TENSOR_QUANT8_ASYMM_SIGNED => (-128..=127).contains(&z),
        T::TENSOR_QUANT16_ASYMM => (0..=65535).contains(&z),
        T::OEM | T::TENSOR_OEM_BYTE => true,
        _ => z == 0,
    };
    if !z_ok {
        bail!(Operand, "{w}: {t} zero point {z} is out of range");
    }
    Ok(())
}

/// Per-channel quantisation exactly where the type needs it (scales for every channel),
/// an extension's parameters only on an extension type (checked by its definition).
fn extra_params(o: &Operand, w: &str) -> Result<(), ValidationError> {
    let t = o.r#type;
    let extension = t.is_extension();
    match (&o.extra_params, t) {
        (ExtraParams::ChannelQuant(p), T::TENSOR_QUANT8_SYMM_PER_CHANNEL) => {
            let Some(&n) = o.dimensions.get(p.channel_dim as usize) else {
                bail!(
                    Operand,
                    "{w}: channel_dim {} out of range for rank {}",
                    p.channel_dim,
                    o.dimensions.len()
                );
            };
            if n == 0 {
                bail!(
                    Operand,
                    "{w}: channel dimension {} is unknown",
                    p.channel_dim
                );
            }
            if p.scales.len() != n as usize {
                bail!(
                    Operand,
                    "{w}: {} per-channel scales for {n} channels",
                    p.scales.len()
                );
            }
            if let Some(bad) = p.scales.iter().find(|&&s| !is_positive_finite(s)) {
                bail!(Operand, "{w}: per-channel scale {bad} is not positive");
            }
        }
        (_, T::TENSOR_QUANT8_SYMM_PER_CHANNEL) => {
            bail!(
                Operand,
                "{w}: TENSOR_QUANT8_SYMM_PER_CHANNEL without channel quantization parameters"
            )
        }
        (ExtraParams::None, _) => {}
        (ExtraParams::Extension(_), _) if extension => {}
        (_, _) => bail!(Operand, "{w}: {t} has unexpected extra parameters"),
    }
    if extension {
        if let Err(e) = crate::extensions::check_operand(o) {
            bail!(Operand, "{w}: {e}");
        }
    }
    Ok(())
}

/// A constant's length is its value's size (an unsupported extension type's size is
/// not known: not checked).
fn constant_length(o: &Operand, w: &str) -> Result<(), ValidationError> {
    if !is_constant(o) {
        return Ok(());
    }
    let (t, length) = (o.r#type, o.location.length);
    if t.is_extension() {
        // The size of a supported extension's type is known; a foreign one's is not.
        if crate::extensions::operand_type_def(t).is_some() {
            let size = crate::extensions::byte_size(t, &o.dimensions);
            if size != Some(u64::from(length)) {
                bail!(
                    Operand,
                    "{w}: constant length {length} does not match its size {size:?}"
                );
            }
        }
        return Ok(());
    }
    let Some(size) = operand_size(t, &o.dimensions) else {
        bail!(Operand, "{w}: size of {t} {:?} overflows", o.dimensions);
    };
    if size != u64::from(length) {
        bail!(
            Operand,
            "{w}: constant length {length} does not match its size {size}"
        );
    }
    Ok(())
}

struct ModelCtx<'a> {
    model: &'a Model,
    /// The interface's level: what is newer is invalid.
    level: HalVersion,
}

impl ModelCtx<'_> {
    /// NN's `validateOperands` for one operand: its type and rank, its quantisation, its
    /// extra parameters, its lifetime and location, and a constant's length.
    fn operand(&self, i: usize, o: &Operand, where_: &str) -> Result<(), ValidationError> {
        let w = format!("{where_} operand {i}");
        type_and_rank(o, &w)?;
        quantisation(o, &w)?;
        extra_params(o, &w)?;
        self.location(o, &w)?;
        constant_length(o, &w)
    }

    /// The operand's location as its lifetime requires: a constant inside the operand
    /// values or its pool, a subgraph reference in range, anything else nowhere.
    fn location(&self, o: &Operand, w: &str) -> Result<(), ValidationError> {
        let loc = o.location;
        match o.lifetime {
            OperandLifeTime::CONSTANT_COPY => {
                if loc.pool_index != 0 {
                    bail!(
                        Operand,
                        "{w}: CONSTANT_COPY with pool index {}",
                        loc.pool_index
                    );
                }
                let end = u64::from(loc.offset) + u64::from(loc.length);
                if end > self.model.operand_values.len() as u64 {
                    bail!(
                        Operand,
                        "{w}: CONSTANT_COPY [{}, {end}) outside operand values of {} bytes",
                        loc.offset,
                        self.model.operand_values.len()
                    );
                }
            }
            OperandLifeTime::CONSTANT_REFERENCE => {
                let Some(pool) = self.model.pools.get(loc.pool_index as usize) else {
                    bail!(
                        Operand,
                        "{w}: CONSTANT_REFERENCE pool index {} out of range",
                        loc.pool_index
                    );
                };
                let end = u64::from(loc.offset) + u64::from(loc.length);
                if end > pool.size {
                    bail!(
                        Operand,
                        "{w}: CONSTANT_REFERENCE [{}, {end}) outside pool of {} bytes",
                        loc.offset,
                        pool.size
                    );
                }
            }
            OperandLifeTime::TEMPORARY_VARIABLE
            | OperandLifeTime::SUBGRAPH_INPUT
            | OperandLifeTime::SUBGRAPH_OUTPUT
            | OperandLifeTime::NO_VALUE => {
                if loc != DataLocation::default() {
                    bail!(
                        Operand,
                        "{w}: {} operand has a non-zero location",
                        o.lifetime
                    );
                }
            }
            OperandLifeTime::SUBGRAPH => {
                if loc.pool_index != 0 || loc.length != 0 {
                    bail!(Operand, "{w}: SUBGRAPH operand with a pool index or length");
                }
                if loc.offset as usize >= self.model.referenced.len() {
                    bail!(Operand, "{w}: SUBGRAPH index {} out of range", loc.offset);
                }
            }
            other => bail!(Operand, "{w}: invalid lifetime {}", other.0),
        }
        if (o.r#type == T::SUBGRAPH) != (o.lifetime == OperandLifeTime::SUBGRAPH) {
            bail!(
                Operand,
                "{w}: type {} with lifetime {}",
                o.r#type,
                o.lifetime
            );
        }
        Ok(())
    }

    fn subgraph(&self, s: &Subgraph, where_: &str) -> Result<(), ValidationError> {
        for (i, o) in s.operands.iter().enumerate() {
            self.operand(i, o, where_)?;
        }
        let n = s.operands.len();
        let mut written = vec![false; n];
        let mut consumers = vec![0u64; n];
        for (k, op) in s.operations.iter().enumerate() {
            let w = format!("{where_} operation {k}");
            if op.r#type == OperationType::OEM_OPERATION {
                bail!(
                    Operation,
                    "{w}: OEM_OPERATION is deprecated (replaced by vendor extensions)"
                );
            }
            if !op.r#type.is_known_at(self.level) && !op.r#type.is_extension() {
                match op.r#type.introduced() {
                    Some(v) => bail!(
                        Operation,
                        "{w}: {} is an operation of {v:?}, newer than this interface ({:?})",
                        op.r#type.name_any().unwrap_or("?"),
                        self.level
                    ),
                    None => bail!(Operation, "{w}: invalid operation type {}", op.r#type.0),
                }
            }
            for &i in op.inputs.iter().chain(&op.outputs) {
                if i as usize >= n {
                    bail!(
                        Operation,
                        "{w}: operand index {i} out of range ({n} operands)"
                    );
                }
            }
            let ins: Vec<&Operand> = op.inputs.iter().map(|&i| &s.operands[i as usize]).collect();
            let outs: Vec<&Operand> = op
                .outputs
                .iter()
                .map(|&i| &s.operands[i as usize])
                .collect();
            check_operation_signature(op.r#type, self.level, &ins, &outs).map_err(|e| {
                ValidationError::new(ValidationKind::Signature, format!("{w}: {e}"))
            })?;
            for &i in &op.inputs {
                let i = i as usize;
                let lt = s.operands[i].lifetime;
                if !written[i]
                    && matches!(
                        lt,
                        OperandLifeTime::TEMPORARY_VARIABLE | OperandLifeTime::SUBGRAPH_OUTPUT
                    )
                {
                    bail!(Operation, "{w}: reads operand {i} before it is written");
                }
                consumers[i] += 1;
            }
            for &i in &op.outputs {
                let i = i as usize;
                let lt = s.operands[i].lifetime;
                if !matches!(
                    lt,
                    OperandLifeTime::TEMPORARY_VARIABLE | OperandLifeTime::SUBGRAPH_OUTPUT
                ) {
                    bail!(Operation, "{w}: writes operand {i} whose lifetime is {lt}");
                }
                if written[i] {
                    bail!(Operation, "{w}: operand {i} is written more than once");
                }
                written[i] = true;
            }
        }
        for (i, o) in s.operands.iter().enumerate() {
            if !written[i]
                && matches!(
                    o.lifetime,
                    OperandLifeTime::TEMPORARY_VARIABLE | OperandLifeTime::SUBGRAPH_OUTPUT
                )
            {
                bail!(
                    Operation,
                    "{where_} operand {i} ({}) is never written",
                    o.lifetime
                );
            }
            if u64::from(o.number_of_consumers) != consumers[i] {
                bail!(Operation,
                    "{where_} operand {i} has number_of_consumers {}, but {} operation inputs read it",
                    o.number_of_consumers,
                    consumers[i]
                );
            }
        }
        io_indexes(
            s,
            &s.input_indexes,
            OperandLifeTime::SUBGRAPH_INPUT,
            where_,
            "input",
        )?;
        io_indexes(
            s,
            &s.output_indexes,
            OperandLifeTime::SUBGRAPH_OUTPUT,
            where_,
            "output",
        )?;
        Ok(())
    }
}

use OperandType as T;

fn is_positive_finite(x: f32) -> bool {
    x.is_finite() && x > 0.0
}

fn io_indexes(
    s: &Subgraph,
    indexes: &[u32],
    lifetime: OperandLifeTime,
    where_: &str,
    what: &str,
) -> Result<(), ValidationError> {
    let mut seen = HashSet::new();
    for &i in indexes {
        let Some(o) = s.operands.get(i as usize) else {
            bail!(IoIndexes, "{where_} {what} index {i} out of range");
        };
        if o.lifetime != lifetime {
            bail!(
                IoIndexes,
                "{where_} {what} operand {i} has lifetime {} instead of {lifetime}",
                o.lifetime
            );
        }
        if !seen.insert(i) {
            bail!(
                IoIndexes,
                "{where_} {what} operand {i} is listed more than once"
            );
        }
    }
    for (i, o) in s.operands.iter().enumerate() {
        if o.lifetime == lifetime && !seen.contains(&(i as u32)) {
            bail!(
                IoIndexes,
                "{where_} operand {i} has lifetime {lifetime} but is not a subgraph {what}"
            );
        }
    }
    Ok(())
}

/// Reject subgraph reference cycles (a subgraph that, through SUBGRAPH operands, refers to
/// itself). Subgraph 0 is main, i + 1 is `referenced[i]`.
fn check_no_reference_cycles(model: &Model) -> Result<(), ValidationError> {
    let n = model.referenced.len() + 1;
    let edges = |g: usize| -> Vec<usize> {
        model
            .subgraph(g)
            .map(|s| {
                s.operands
                    .iter()
                    .filter(|o| o.lifetime == OperandLifeTime::SUBGRAPH)
                    .map(|o| o.location.offset as usize + 1)
                    .filter(|&r| r < n)
                    .collect()
            })
            .unwrap_or_default()
    };
    // Iterative DFS with colours: 0 unvisited, 1 on stack, 2 done.
    let mut colour = vec![0u8; n];
    for root in 0..n {
        if colour[root] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, Vec<usize>)> = vec![(root, edges(root))];
        colour[root] = 1;
        while let Some((g, next)) = stack.last_mut() {
            match next.pop() {
                Some(r) => match colour[r] {
                    0 => {
                        colour[r] = 1;
                        let e = edges(r);
                        stack.push((r, e));
                    }
                    1 => bail!(
                        SubgraphReference,
                        "subgraph {} refers back to subgraph {r} (reference cycle)",
                        *g
                    ),
                    _ => {}
                },
                None => {
                    colour[*g] = 2;
                    stack.pop();
                }
            }
        }
    }
    Ok(())
}

/// Validate a HAL 1.3 model (see the module documentation for what is checked).
pub fn validate_model(model: &Model) -> Result<(), ValidationError> {
    validate_model_at(model, HalVersion::V1_3)
}

/// Validate a model as an interface at `level` does (the HIDL 1.3 face at `V1_3`, the AIDL
/// face at `AidlV4`): operand types and operations newer than `level` are invalid.
pub fn validate_model_at(model: &Model, level: HalVersion) -> Result<(), ValidationError> {
    let canonical = crate::extensions::canonical_model(model)?;
    let model: &Model = &canonical;
    for (i, pool) in model.pools.iter().enumerate() {
        validate_memory(pool).map_err(|e| {
            ValidationError::new(ValidationKind::Memory, format!("model pool {i}: {e}"))
        })?;
    }
    let ctx = ModelCtx { model, level };
    ctx.subgraph(&model.main, "main")?;
    for (i, s) in model.referenced.iter().enumerate() {
        ctx.subgraph(s, &format!("referenced[{i}]"))?;
    }
    check_no_reference_cycles(model)
}

/// Validate a model together with the preparation arguments.
pub fn validate_prepare(
    model: &Model,
    preference: ExecutionPreference,
    priority: Priority,
) -> Result<(), ValidationError> {
    validate_model(model)?;
    validate_execution_preference(preference)?;
    validate_priority(priority)
}
