//! Validation of HAL values received from a client, following what NN's `ValidateHal.cpp`
//! checks for a HAL 1.3 model and request. Every failure is INVALID_ARGUMENT.
//!
//! Model (`validate_model`), for the main subgraph and each referenced one:
//! - extensions (`crate::extensions::canonical_model`): the prefix map is one-to-one with
//!   well-formed names and no prefix 0; every extension type's prefix is in it and, for an
//!   extension the driver supports, the type is one the extension declares; the rest of
//!   the checks run on the model with the driver's internal prefixes;
//! - operands: type known (fundamental, or extension); OEM and TENSOR_OEM_BYTE are
//!   deprecated and refused; scalars have rank 0; constant tensors have a rank;
//!   scale and zero point per type; per-channel parameters; lifetime known and location
//!   consistent with it (CONSTANT_COPY within `operand_values`, CONSTANT_REFERENCE within
//!   its pool, SUBGRAPH indexing `referenced`, others all zero); SUBGRAPH type iff SUBGRAPH
//!   lifetime; constant lengths equal the operand's size; extension operands have scale
//!   and zero point 0, extra parameters none or extension, and pass their extension's own
//!   validator (`crate::extensions::check_operand`);
//! - operations: type known at the interface's level (`validate_model_at`: an operation
//!   newer than the level is as invalid as an unknown value; OEM_OPERATION is deprecated
//!   and refused; an extension operation is checked against its definition like any
//!   other), operand indexes in range, signature (see [`super::operations`]; only the
//!   forms whose `since` is at or below the level), each input written before it is read,
//!   each output a temporary or subgraph output written exactly once, every temporary and
//!   output written, and `number_of_consumers` equal to the real count (which, with
//!   write-before-read, also rules out cycles);
//! - input/output indexes: in range, no duplicates, lifetimes SUBGRAPH_INPUT/OUTPUT, and
//!   every operand with such a lifetime listed;
//! - no subgraph references itself directly or indirectly; pools are valid memories.
//!
//! Not checked here (left to preparation): IF/WHILE operand compatibility with the
//! referenced subgraphs, and values of constant parameters.

use std::collections::HashSet;

use super::types::*;
use crate::ops::check_operation_signature;

/// What part of a HAL value failed validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValidationKind {
    /// An execution preference, priority or measure-timing value.
    Parameter,
    /// A memory pool (handle shape, protection, size).
    Memory,
    /// An operand (type, rank, scale, zero point, lifetime, location, extra parameters).
    Operand,
    /// An operation (type, operand indexes, data flow, consumers).
    Operation,
    /// An operation's operands fit none of its signatures (see `crate::ops`).
    Signature,
    /// A subgraph's input or output index list.
    IoIndexes,
    /// SUBGRAPH references (cycles).
    SubgraphReference,
    /// Extension names and prefixes.
    Extension,
    /// A request's arguments or pools.
    Request,
}

/// A HAL value failed validation. The HAL code is always INVALID_ARGUMENT.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValidationError {
    kind: ValidationKind,
    message: String,
}

impl ValidationError {
    /// A validation error of `kind` with a human-readable message.
    pub fn new(kind: ValidationKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// What failed.
    pub fn kind(&self) -> ValidationKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HAL status for this error: INVALID_ARGUMENT.
    pub fn status(&self) -> ErrorStatus {
        ErrorStatus::InvalidArgument
    }
}

macro_rules! bail {
    ($kind:ident, $($arg:tt)*) => {
        return Err(ValidationError::new(ValidationKind::$kind, format!($($arg)*)))
    };
}

/// Validate an execution preference.
pub fn validate_execution_preference(p: ExecutionPreference) -> Result<(), ValidationError> {
    if p.name().is_none() {
        bail!(Parameter, "invalid execution preference {}", p.0);
    }
    Ok(())
}

/// Validate a priority.
pub fn validate_priority(p: Priority) -> Result<(), ValidationError> {
    if p.name().is_none() {
        bail!(Parameter, "invalid priority {}", p.0);
    }
    Ok(())
}

/// Validate a measure-timing flag.
pub fn validate_measure_timing(m: MeasureTiming) -> Result<(), ValidationError> {
    if m.name().is_none() {
        bail!(Parameter, "invalid measure timing {}", m.0);
    }
    Ok(())
}

/// Validate a hidl_memory: a known name with the right number of fds and ints.
pub fn validate_memory(memory: &Memory) -> Result<(), ValidationError> {
    let fds = memory.handle.fds.len();
    let ints = memory.handle.ints.len();
    match memory.name.as_str() {
        MEMORY_ASHMEM => {
            if fds != 1 || ints != 0 {
                bail!(
                    Memory,
                    "ashmem memory must have 1 fd and 0 ints, has {fds} and {ints}"
                );
            }
        }
        MEMORY_MMAP_FD => {
            if fds != 1 || ints != 3 {
                bail!(
                    Memory,
                    "mmap_fd memory must have 1 fd and 3 ints, has {fds} and {ints}"
                );
            }
            let prot = memory.handle.ints[0];
            if prot & !(libc::PROT_READ | libc::PROT_WRITE) != 0 {
                bail!(Memory, "mmap_fd memory has invalid protection {prot:#x}");
            }
            let offset = (u64::from(memory.handle.ints[2] as u32) << 32)
                | u64::from(memory.handle.ints[1] as u32);
            if offset
                .checked_add(memory.size)
                .is_none_or(|end| end > i64::MAX as u64)
            {
                bail!(
                    Memory,
                    "mmap_fd memory offset {offset} + size {} overflows",
                    memory.size
                );
            }
        }
        MEMORY_HARDWARE_BUFFER_BLOB => {
            if fds == 0 {
                bail!(Memory, "hardware_buffer_blob memory has no fd");
            }
            if memory.size == 0 {
                bail!(Memory, "hardware_buffer_blob memory has size 0");
            }
        }
        MEMORY_HARDWARE_BUFFER => {
            if fds == 0 {
                bail!(Memory, "hardware_buffer memory has no fd");
            }
            if memory.size != 0 {
                bail!(
                    Memory,
                    "hardware_buffer memory must have size 0, has {}",
                    memory.size
                );
            }
        }
        other => bail!(Memory, "unsupported memory type {other:?}"),
    }
    Ok(())
}

/// Size in bytes of a non-extension operand of type `t` with `dims` (scalars: the element
/// size; unknown dimensions give 0). `None` on overflow or for types without a size.
pub fn operand_size(t: OperandType, dims: &[u32]) -> Option<u64> {
    let es = t.element_size()? as u64;
    if t.is_scalar() {
        return Some(es);
    }
    dims.iter()
        .try_fold(es, |acc, &d| acc.checked_mul(u64::from(d)))
}

/// Whether a tensor operand has unknown rank or any unknown dimension.
pub fn has_unspecified_dimensions(t: OperandType, dims: &[u32]) -> bool {
    !is_scalar_type(t) && (dims.is_empty() || dims.contains(&0))
}

/// A scalar type: a non-extension scalar, or an extension type (with the driver's internal
/// prefix) its extension declares a scalar.
pub fn is_scalar_type(t: OperandType) -> bool {
    t.is_scalar() || crate::extensions::operand_type_def(t).is_some_and(|(_, d)| !d.is_tensor)
}

/// Whether the model holds OEM operand types or OEM_OPERATION (deprecated since NN HAL
/// 1.2 in favour of vendor extensions; refused).
fn is_oem_operand(t: OperandType) -> bool {
    t == OperandType::OEM || t == OperandType::TENSOR_OEM_BYTE
}

struct ModelCtx<'a> {
    model: &'a Model,
    /// The interface's level: what is newer is invalid.
    level: HalVersion,
}

impl ModelCtx<'_> {
    fn operand(&self, i: usize, o: &Operand, where_: &str) -> Result<(), ValidationError> {
        let t = o.r#type;
        let w = format!("{where_} operand {i}");
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
        let extension = t.is_extension();
        let constant = matches!(
            o.lifetime,
            OperandLifeTime::CONSTANT_COPY | OperandLifeTime::CONSTANT_REFERENCE
        );
        // Rank.
        if t.is_scalar() && !o.dimensions.is_empty() {
            bail!(Operand, "{w}: scalar {t} has rank {}", o.dimensions.len());
        }
        let tensor = t.is_tensor() || (extension && !is_scalar_type(t));
        if tensor && constant && o.dimensions.is_empty() {
            bail!(Operand, "{w}: constant tensor has rank 0");
        }
        // Scale.
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
        // Zero point.
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
        // Extra params.
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
        // Lifetime and location.
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
        if (t == T::SUBGRAPH) != (o.lifetime == OperandLifeTime::SUBGRAPH) {
            bail!(Operand, "{w}: type {t} with lifetime {}", o.lifetime);
        }
        if constant && extension {
            // The size of a supported extension's type is known; a foreign one's is not.
            if crate::extensions::operand_type_def(t).is_some() {
                let size = crate::extensions::byte_size(t, &o.dimensions);
                if size != Some(u64::from(loc.length)) {
                    bail!(
                        Operand,
                        "{w}: constant length {} does not match its size {size:?}",
                        loc.length
                    );
                }
            }
        } else if constant {
            let Some(size) = operand_size(t, &o.dimensions) else {
                bail!(Operand, "{w}: size of {t} {:?} overflows", o.dimensions);
            };
            if size != u64::from(loc.length) {
                bail!(
                    Operand,
                    "{w}: constant length {} does not match its size {size}",
                    loc.length
                );
            }
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

fn request_arguments(
    args: &[RequestArgument],
    indexes: &[u32],
    operands: &[Operand],
    pool_sizes: &[Option<u64>],
    allow_unspecified: bool,
    what: &str,
) -> Result<(), ValidationError> {
    if args.len() != indexes.len() {
        bail!(
            Request,
            "request has {} {what}s, the model has {}",
            args.len(),
            indexes.len()
        );
    }
    for (i, (arg, &index)) in args.iter().zip(indexes).enumerate() {
        let Some(operand) = operands.get(index as usize) else {
            bail!(
                Request,
                "model {what} {i} refers to operand {index}, out of range"
            );
        };
        let loc = arg.location;
        if arg.has_no_value {
            if loc != DataLocation::default() || !arg.dimensions.is_empty() {
                bail!(
                    Request,
                    "request {what} {i} has no value but a location or dimensions"
                );
            }
            continue;
        }
        let Some(&size) = pool_sizes.get(loc.pool_index as usize) else {
            bail!(
                Request,
                "request {what} {i}: pool index {} out of range",
                loc.pool_index
            );
        };
        match size {
            // A driver-managed buffer (token) or a non-BLOB hardware buffer: the whole
            // buffer is the argument.
            None => {
                if loc.offset != 0 || loc.length != 0 {
                    bail!(Request, "request {what} {i}: a whole-buffer argument must have offset 0 and length 0");
                }
            }
            Some(size) => {
                let end = u64::from(loc.offset) + u64::from(loc.length);
                if end > size {
                    bail!(
                        Request,
                        "request {what} {i}: [{}, {end}) is outside its pool of {size} bytes",
                        loc.offset
                    );
                }
            }
        }
        let dims = &arg.dimensions;
        if !dims.is_empty() {
            if !operand.dimensions.is_empty() && dims.len() != operand.dimensions.len() {
                bail!(
                    Request,
                    "request {what} {i} has rank {}, the model operand has rank {}",
                    dims.len(),
                    operand.dimensions.len()
                );
            }
            if is_scalar_type(operand.r#type) {
                bail!(Request, "request {what} {i} gives dimensions for a scalar");
            }
            for (d, (&r, &m)) in dims
                .iter()
                .zip(operand.dimensions.iter().chain(std::iter::repeat(&0)))
                .enumerate()
            {
                if m != 0 && r != m {
                    bail!(
                        Request,
                        "request {what} {i} dimension {d} is {r}, the model says {m}"
                    );
                }
                if r == 0 && !allow_unspecified {
                    bail!(Request, "request {what} {i} dimension {d} is unspecified");
                }
            }
        } else if !allow_unspecified
            && has_unspecified_dimensions(operand.r#type, &operand.dimensions)
        {
            bail!(
                Request,
                "request {what} {i} leaves the model's unspecified dimensions unspecified"
            );
        }
        // An input is read whole: a location shorter than the operand would make the device
        // read bytes that belong to something else.
        if what == "input" && size.is_some() {
            let dims = if dims.is_empty() {
                &operand.dimensions
            } else {
                dims
            };
            if let Some(need) = known_byte_size(operand.r#type, dims) {
                if u64::from(loc.length) < need {
                    bail!(
                        Request,
                        "request input {i}: location of {} bytes is shorter than the operand's {need}",
                        loc.length
                    );
                }
            }
        }
    }
    Ok(())
}

/// The byte size of a value of `ty` with these dimensions, when every dimension is known
/// (saturating: no real buffer is `u64::MAX` bytes).
pub fn known_byte_size(ty: OperandType, dims: &[u32]) -> Option<u64> {
    if ty.is_extension() {
        return crate::extensions::byte_size(ty, dims);
    }
    let element = ty.element_size()? as u64;
    if ty.is_scalar() {
        return Some(element);
    }
    if dims.contains(&0) || (dims.is_empty() && !ty.is_scalar()) {
        return None;
    }
    Some(
        dims.iter()
            .fold(element, |n, &d| n.saturating_mul(u64::from(d))),
    )
}

/// Validate a request against the model it will run on. `allow_unspecified_output` is
/// false for fenced execution.
pub fn validate_request(
    request: &Request,
    model: &Model,
    allow_unspecified_output: bool,
) -> Result<(), ValidationError> {
    let mut pool_sizes = Vec::with_capacity(request.pools.len());
    for (i, pool) in request.pools.iter().enumerate() {
        match pool {
            RequestMemoryPool::HidlMemory(m) => {
                validate_memory(m).map_err(|e| {
                    ValidationError::new(ValidationKind::Memory, format!("request pool {i}: {e}"))
                })?;
                // A non-BLOB hardware buffer (size 0), like a driver-managed buffer, is
                // named whole: offset and length 0.
                pool_sizes.push((m.name != MEMORY_HARDWARE_BUFFER).then_some(m.size));
            }
            RequestMemoryPool::Token(0) => bail!(Request, "request pool {i}: token 0 is invalid"),
            RequestMemoryPool::Token(_) => pool_sizes.push(None),
        }
    }
    let main = &model.main;
    request_arguments(
        &request.inputs,
        &main.input_indexes,
        &main.operands,
        &pool_sizes,
        false,
        "input",
    )?;
    request_arguments(
        &request.outputs,
        &main.output_indexes,
        &main.operands,
        &pool_sizes,
        allow_unspecified_output,
        "output",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    type Mutation<T> = Box<dyn Fn(&mut T)>;

    fn tensor(t: OperandType, dims: &[u32], lifetime: OperandLifeTime) -> Operand {
        Operand {
            r#type: t,
            dimensions: dims.to_vec(),
            lifetime,
            ..Default::default()
        }
    }

    /// out = in0 + in1 (float32 [2]), activation a CONSTANT_COPY.
    fn add_model() -> Model {
        let f = OperandType::TENSOR_FLOAT32;
        let mut a = tensor(f, &[2], OperandLifeTime::SUBGRAPH_INPUT);
        a.number_of_consumers = 1;
        let b = a.clone();
        let mut act = tensor(OperandType::INT32, &[], OperandLifeTime::CONSTANT_COPY);
        act.number_of_consumers = 1;
        act.location = DataLocation {
            pool_index: 0,
            offset: 0,
            length: 4,
        };
        let out = tensor(f, &[2], OperandLifeTime::SUBGRAPH_OUTPUT);
        Model {
            main: Subgraph {
                operands: vec![a, b, act, out],
                operations: vec![Operation {
                    r#type: OperationType::ADD,
                    inputs: vec![0, 1, 2],
                    outputs: vec![3],
                }],
                input_indexes: vec![0, 1],
                output_indexes: vec![3],
            },
            operand_values: vec![0; 4],
            ..Default::default()
        }
    }

    fn request(m: &Model) -> Request {
        let pool = Memory::ashmem(64).unwrap();
        let arg = |offset| RequestArgument {
            has_no_value: false,
            location: DataLocation {
                pool_index: 0,
                offset,
                length: 8,
            },
            dimensions: vec![],
        };
        let _ = m;
        Request {
            inputs: vec![arg(0), arg(8)],
            outputs: vec![arg(16)],
            pools: vec![RequestMemoryPool::HidlMemory(pool)],
        }
    }

    #[test]
    fn valid_model_and_request() {
        let m = add_model();
        validate_model(&m).unwrap();
        validate_request(&request(&m), &m, false).unwrap();
    }

    #[test]
    fn model_mutations() {
        let cases: Vec<(&str, Mutation<Model>)> = vec![
            (
                "type",
                Box::new(|m| m.main.operands[0].r#type = OperandType(16)),
            ),
            (
                "ext type",
                Box::new(|m| m.main.operands[0].r#type = OperandType(-1)),
            ),
            (
                "scalar rank",
                Box::new(|m| m.main.operands[2].dimensions = vec![1]),
            ),
            ("scale", Box::new(|m| m.main.operands[0].scale = 1.0)),
            (
                "zero point",
                Box::new(|m| m.main.operands[0].zero_point = 1),
            ),
            (
                "consumers",
                Box::new(|m| m.main.operands[0].number_of_consumers = 2),
            ),
            (
                "copy oob",
                Box::new(|m| m.main.operands[2].location.offset = 1),
            ),
            (
                "copy pool",
                Box::new(|m| m.main.operands[2].location.pool_index = 1),
            ),
            (
                "length",
                Box::new(|m| {
                    m.operand_values.resize(8, 0);
                    m.main.operands[2].location.length = 8;
                }),
            ),
            (
                "lifetime",
                Box::new(|m| m.main.operands[2].lifetime = OperandLifeTime(9)),
            ),
            (
                "temp location",
                Box::new(|m| m.main.operands[3].location.length = 1),
            ),
            (
                "op type",
                Box::new(|m| m.main.operations[0].r#type = OperationType(102)),
            ),
            ("op index", Box::new(|m| m.main.operations[0].inputs[0] = 4)),
            ("never written", Box::new(|m| m.main.operations.clear())),
            (
                "inputs dup",
                Box::new(|m| m.main.input_indexes = vec![0, 0, 1]),
            ),
            (
                "input missing",
                Box::new(|m| m.main.input_indexes = vec![0]),
            ),
            (
                "bad pool",
                Box::new(|m| {
                    m.pools.push(Memory {
                        name: "nope".into(),
                        size: 0,
                        handle: Default::default(),
                    })
                }),
            ),
            (
                "subgraph type",
                Box::new(|m| m.main.operands[2].r#type = OperandType::SUBGRAPH),
            ),
            (
                "self reference",
                Box::new(|m| {
                    let mut s = m.main.clone();
                    s.operands.push(Operand {
                        r#type: OperandType::SUBGRAPH,
                        lifetime: OperandLifeTime::SUBGRAPH,
                        ..Default::default()
                    });
                    m.referenced.push(s);
                }),
            ),
        ];
        for (name, mutate) in cases {
            let mut m = add_model();
            mutate(&mut m);
            let e = validate_model(&m).expect_err(name);
            assert_eq!(e.status(), ErrorStatus::InvalidArgument);
        }
    }

    #[test]
    fn request_mutations() {
        let m = add_model();
        let cases: Vec<(&str, Mutation<Request>)> = vec![
            ("remove input", Box::new(|r| drop(r.inputs.pop()))),
            ("remove output", Box::new(|r| drop(r.outputs.pop()))),
            (
                "pool index",
                Box::new(|r| r.inputs[0].location.pool_index = 1),
            ),
            ("oob", Box::new(|r| r.inputs[0].location.offset = 60)),
            (
                "overflow",
                Box::new(|r| r.inputs[0].location.offset = u32::MAX),
            ),
            ("rank", Box::new(|r| r.inputs[0].dimensions = vec![2, 1])),
            ("dim", Box::new(|r| r.inputs[0].dimensions = vec![3])),
            (
                "unspecified input",
                Box::new(|r| r.inputs[0].dimensions = vec![0]),
            ),
            (
                "token 0",
                Box::new(|r| r.pools.push(RequestMemoryPool::Token(0))),
            ),
            (
                "token with offset",
                Box::new(|r| {
                    r.pools.push(RequestMemoryPool::Token(5));
                    r.outputs[0].location.pool_index = 1;
                }),
            ),
            (
                "no value with location",
                Box::new(|r| r.inputs[0].has_no_value = true),
            ),
        ];
        for (name, mutate) in cases {
            let mut r = request(&m);
            mutate(&mut r);
            assert!(validate_request(&r, &m, true).is_err(), "{name}");
        }
        // Unspecified output dims: fine unless disallowed.
        let mut m2 = m.clone();
        m2.main.operands[3].dimensions = vec![0];
        let r = request(&m2);
        validate_request(&r, &m2, true).unwrap();
        assert!(validate_request(&r, &m2, false).is_err());
        // Token pool with zero location is fine.
        let mut r = request(&m);
        r.pools.push(RequestMemoryPool::Token(5));
        r.outputs[0].location = DataLocation {
            pool_index: 1,
            offset: 0,
            length: 0,
        };
        validate_request(&r, &m, false).unwrap();
    }

    #[test]
    fn preference_priority() {
        assert!(validate_execution_preference(ExecutionPreference(-1)).is_err());
        assert!(validate_execution_preference(ExecutionPreference(3)).is_err());
        assert!(validate_priority(Priority(3)).is_err());
        validate_priority(Priority::HIGH).unwrap();
    }

    #[test]
    fn errors_say_what_failed() {
        let kind = |m: &Model| validate_model(m).unwrap_err().kind();
        let mut m = add_model();
        m.main.operands[2].dimensions = vec![1];
        assert_eq!(kind(&m), ValidationKind::Operand);
        let mut m = add_model();
        m.main.operations[0].inputs.pop();
        assert_eq!(kind(&m), ValidationKind::Signature);
        let mut m = add_model();
        m.main.input_indexes.push(0);
        assert_eq!(kind(&m), ValidationKind::IoIndexes);
        let m = add_model();
        let mut r = request(&m);
        r.inputs.pop();
        assert_eq!(
            validate_request(&r, &m, true).unwrap_err().kind(),
            ValidationKind::Request
        );
        assert_eq!(
            validate_priority(Priority(3)).unwrap_err().kind(),
            ValidationKind::Parameter
        );
    }
}
