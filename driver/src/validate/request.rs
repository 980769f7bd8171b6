//! Request validation: pools, and each argument against the model operand it gives.

use super::{has_unspecified_dimensions, is_scalar_type, known_byte_size};
use crate::hal::types::*;
use crate::hal::validate::{bail, validate_memory, ValidationError, ValidationKind};

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
