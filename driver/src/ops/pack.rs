//! PACK (AIDL V2, feature level 6): the axis (an INT32 scalar, input 0) then one or more
//! tensors of one shape, stacked along a new axis `0..=rank` (the device's PACK kernel).
//! Every tensor shares the output's type, and an 8-bit quantised one its scale and zero
//! point, so nothing is requantised.

use vnpu_emu::kernels::Pack;

use super::types::FLOAT_QUANT8_INT32;
use super::{arg, same_quantisation, Arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{Operand, OperationType};

const TENSOR: &[Arg] = &[arg("input", Ty::T)];

/// The tensors after the first, each an optional group of its own. The HAL sets no
/// bound; this one is far above what the device's kernel takes (which then refuses the
/// model at preparation).
const MORE: &[&[Arg]] = &[TENSOR; 1023];

fn check(ins: &[&Operand], outs: &[&Operand]) -> Result<(), String> {
    let out = outs[0];
    // A rank every tensor must have, once one is known (0: none yet).
    let mut rank = out.dimensions.len().saturating_sub(1);
    for (k, x) in ins[1..].iter().enumerate() {
        same_quantisation(x, out, &format!("tensor {k}"))?;
        let r = x.dimensions.len();
        if r != 0 {
            if rank != 0 && r != rank {
                return Err(format!("tensor {k} has rank {r}, not {rank}"));
            }
            rank = r;
        }
    }
    Ok(())
}

fn lower(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let tensors = a.all("input");
    let first = *tensors.first().ok_or_else(|| a.invalid("no tensors"))?;
    let rank = a.operands.shape(first)?.len();
    let axis = a.i32("axis")?;
    let axis = u32::try_from(axis)
        .ok()
        .filter(|&v| v as usize <= rank)
        .ok_or_else(|| a.invalid(format!("axis {axis} for tensors of rank {rank}")))?;
    Ok(Lowered {
        op: Pack { axis }.into(),
        inputs: tensors,
        outputs: vec![a.output(0)?],
    })
}

/// PACK.
pub const PACK: OpDef = OpDef {
    op: OperationType::PACK,
    signatures: &[Signature::new(
        AidlV2,
        FLOAT_QUANT8_INT32,
        &[arg("axis", Ty::Int), arg("input", Ty::T)],
        &[arg("output", Ty::T)],
    )
    .main(1)
    .optional(MORE)],
    check: Some(check),
    runs: FLOAT_QUANT8_INT32,
    lower: Some(lower),
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hal::builder::ModelBuilder;
    use crate::hal::{HalVersion, OperandType as T};
    use crate::ops::testing::{check, int, quant};

    /// PACK of tensors of `dims` (zero points `zps`) into an output of `out_dims`.
    fn model(t: T, dims: &[&[u32]], zps: &[i32], out_dims: &[u32]) -> crate::hal::Model {
        let mut b = ModelBuilder::default();
        let axis = int(&mut b, 0);
        let mut ins = vec![axis];
        for (d, &zp) in dims.iter().zip(zps) {
            let x = b.input(t, d);
            if t.is_quantized() {
                quant(&mut b, x, 0.5, zp);
            }
            ins.push(x);
        }
        let o = b.output(t, out_dims);
        if t.is_quantized() {
            quant(&mut b, o, 0.5, 3);
        }
        b.op(OperationType::PACK, &ins, &[o]);
        b.build(Vec::new())
    }

    #[test]
    fn valid_from_aidl_v2_only() {
        let m = model(T::TENSOR_FLOAT16, &[&[2, 3], &[2, 3]], &[0, 0], &[2, 2, 3]);
        assert!(check(&m, HalVersion::V1_3).is_err());
        check(&m, HalVersion::AidlV2).unwrap();
        // One tensor, and many.
        check(
            &model(T::TENSOR_INT32, &[&[4]], &[0], &[1, 4]),
            HalVersion::AidlV2,
        )
        .unwrap();
        let many: Vec<&[u32]> = vec![&[2]; 70];
        let m = model(T::TENSOR_FLOAT32, &many, &[0; 70], &[70, 2]);
        check(&m, HalVersion::AidlV2).unwrap();
    }

    #[test]
    fn bad_types_quantisation_or_ranks_are_refused() {
        let at = HalVersion::AidlV4;
        let q = T::TENSOR_QUANT8_ASYMM;
        check(&model(q, &[&[2], &[2]], &[3, 3], &[2, 2]), at).unwrap();
        assert!(check(&model(q, &[&[2], &[2]], &[3, 4], &[2, 2]), at)
            .unwrap_err()
            .contains("zero point"));
        assert!(check(&model(q, &[&[2], &[2, 1]], &[3, 3], &[]), at)
            .unwrap_err()
            .contains("rank"));
        assert!(check(&model(q, &[&[2], &[2]], &[3, 3], &[2, 2, 1]), at)
            .unwrap_err()
            .contains("rank"));
        assert!(check(&model(T::TENSOR_BOOL8, &[&[2]], &[0], &[1, 2]), at)
            .unwrap_err()
            .contains("fit none"));
        // The axis must be an INT32 scalar.
        let mut m = model(T::TENSOR_FLOAT32, &[&[2]], &[0], &[1, 2]);
        m.main.operands[0].r#type = T::FLOAT32;
        m.operand_values[..4].copy_from_slice(&0f32.to_le_bytes());
        assert!(check(&m, at).unwrap_err().contains("fit none"));
    }
}
