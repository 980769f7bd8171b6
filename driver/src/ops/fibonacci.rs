//! EXAMPLE_FIBONACCI of "com.example.fibonacci" (`crate::extensions::fibonacci`): n → the
//! first n Fibonacci numbers. n is an EXAMPLE_INT64 scalar or a one-element TENSOR_FLOAT32
//! (truncated to an integer, as the example driver does), read when the program is built
//! (a constant, or a model input the host reads from the request); it must be at least 1.
//! The output is a 1-D EXAMPLE_TENSOR_QUANT64_ASYMM, quantised by the scale and zero point
//! of its extension parameters, or a TENSOR_FLOAT32. Runs as the device's FIBONACCI kernel.

use vnpu_emu::kernels::Fibonacci;

use super::{arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::extensions::fibonacci::{Quant64Params, FIBONACCI, INT64, TENSOR_QUANT64_ASYMM};
use crate::hal::{Operand, OperandType as T};

const N_TYPES: &[T] = &[INT64, T::TENSOR_FLOAT32];

/// The largest n: the output must fit the device's tensor limit.
pub const MAX_N: i64 = 1 << 24;

/// The extension's validator: a float n has exactly one element; the output is 1-D.
fn check(ins: &[&Operand], outs: &[&Operand]) -> Result<(), String> {
    let (n, out) = (ins[0], outs[0]);
    if n.r#type == T::TENSOR_FLOAT32 {
        let one = !n.dimensions.is_empty() && n.dimensions.iter().all(|&d| d == 1);
        if !one {
            return Err(format!(
                "a TENSOR_FLOAT32 n must hold exactly one element, has dimensions {:?}",
                n.dimensions
            ));
        }
    }
    if out.dimensions.len() > 1 {
        return Err(format!(
            "the output is 1-D, has dimensions {:?}",
            out.dimensions
        ));
    }
    Ok(())
}

fn lower(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let ops = a.operands;
    let n_index = a.input("n")?;
    let bytes = ops.constant(n_index)?;
    let n: i64 = if a.main == INT64 {
        let b: [u8; 8] = bytes
            .get(..8)
            .and_then(|s| s.try_into().ok())
            .ok_or(CompileError::ShortConstant(n_index))?;
        i64::from_le_bytes(b)
    } else {
        let b: [u8; 4] = bytes
            .get(..4)
            .and_then(|s| s.try_into().ok())
            .ok_or(CompileError::ShortConstant(n_index))?;
        let f = f32::from_le_bytes(b);
        if !f.is_finite() {
            return Err(a.invalid(format!("n = {f}")));
        }
        f as i64
    };
    if !(1..=MAX_N).contains(&n) {
        return Err(a.invalid(format!("n = {n}, must be in 1..={MAX_N}")));
    }
    let out = ops.operand(a.output(0)?)?;
    let (scale, zero_point) = if out.r#type == TENSOR_QUANT64_ASYMM {
        let p = Quant64Params::of(out).map_err(|e| a.invalid(e))?;
        (p.scale, p.zero_point)
    } else {
        (1.0, 0)
    };
    a.kernel(
        Fibonacci {
            n: n as u32,
            scale,
            zero_point,
        },
        &[],
    )
}

/// EXAMPLE_FIBONACCI.
pub const EXAMPLE_FIBONACCI: OpDef = OpDef {
    op: FIBONACCI,
    signatures: &[Signature::new(
        V1_2,
        N_TYPES,
        &[arg("n", Ty::Value(N_TYPES))],
        &[arg(
            "output",
            Ty::OneOf(&[TENSOR_QUANT64_ASYMM, T::TENSOR_FLOAT32]),
        )],
    )],
    check: Some(check),
    runs: N_TYPES,
    lower: Some(lower),
};
