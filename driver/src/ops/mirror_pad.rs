//! MIRROR_PAD (AIDL V3, feature level 7): every dimension padded with a mirror image of the
//! input's edge. The paddings (`[rank, 2]` TENSOR_INT32) and the mode (0 REFLECT, 1
//! SYMMETRIC) are read by the compiler; how far a mode may pad is the device kernel's to
//! check.

use vnpu_emu::kernels::MirrorPad;

use super::types::FLOAT_QUANT8_INT32;
use super::{arg, same_quantisation, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{Operand, OperationType};

fn check(ins: &[&Operand], outs: &[&Operand]) -> Result<(), String> {
    let (x, pads, out) = (ins[0], ins[1], outs[0]);
    if !pads.dimensions.is_empty() {
        match pads.dimensions[..] {
            [_, 0] | [_, 2] => {}
            _ => {
                return Err(format!(
                    "paddings has dimensions {:?}, not [rank, 2]",
                    pads.dimensions
                ))
            }
        }
    }
    same_quantisation(x, out, "the input")?;
    let rank = x.dimensions.len() as u32;
    if rank != 0 {
        if let Some(&d0) = pads.dimensions.first().filter(|&&d| d != 0) {
            if d0 != rank {
                return Err(format!("{d0} rows of paddings for an input of rank {rank}"));
            }
        }
        let ro = out.dimensions.len() as u32;
        if ro != 0 && ro != rank {
            return Err(format!("input rank {rank}, output rank {ro}"));
        }
    }
    Ok(())
}

fn lower(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let rank = a.shape("input")?.len();
    let p = a.ints("paddings")?;
    if p.len() != rank * 2 {
        return Err(a.invalid(format!("paddings has {} values for rank {rank}", p.len())));
    }
    let pads = p
        .chunks_exact(2)
        .map(|c| match (u32::try_from(c[0]), u32::try_from(c[1])) {
            (Ok(x), Ok(y)) => Ok((x, y)),
            _ => Err(a.invalid(format!("negative padding {c:?}"))),
        })
        .collect::<Result<_, _>>()?;
    let symmetric = match a.i32("mode")? {
        0 => false,
        1 => true,
        m => return Err(a.invalid(format!("mode {m} is neither REFLECT (0) nor SYMMETRIC (1)"))),
    };
    a.kernel(MirrorPad { symmetric, pads }, &["input"])
}

/// MIRROR_PAD.
pub const MIRROR_PAD: OpDef = OpDef {
    op: OperationType::MIRROR_PAD,
    signatures: &[Signature::new(
        AidlV3,
        FLOAT_QUANT8_INT32,
        &[
            arg("input", Ty::T),
            arg("paddings", Ty::Ints),
            arg("mode", Ty::Int),
        ],
        &[arg("output", Ty::T)],
    )],
    check: Some(check),
    runs: FLOAT_QUANT8_INT32,
    lower: Some(lower),
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hal::builder::ModelBuilder;
    use crate::hal::{HalVersion, OperandType as T};
    use crate::ops::testing::{check, int, ints, quant};

    fn model(t: T, pad_dims: &[u32], out_scale: f32, out_dims: &[u32]) -> crate::hal::Model {
        let mut b = ModelBuilder::default();
        let x = b.input(t, &[2, 3]);
        let values: Vec<i32> = vec![1; pad_dims.iter().product::<u32>() as usize];
        let pads = ints(&mut b, pad_dims, &values);
        let mode = int(&mut b, 0);
        let o = b.output(t, out_dims);
        if t.is_quantized() {
            quant(&mut b, x, 0.5, 0);
            quant(&mut b, o, out_scale, 0);
        }
        b.op(OperationType::MIRROR_PAD, &[x, pads, mode], &[o]);
        b.build(Vec::new())
    }

    #[test]
    fn valid_from_aidl_v3_only() {
        let m = model(T::TENSOR_INT32, &[2, 2], 0.5, &[4, 5]);
        assert!(check(&m, HalVersion::V1_3).is_err());
        assert!(check(&m, HalVersion::AidlV2).is_err());
        check(&m, HalVersion::AidlV3).unwrap();
    }

    #[test]
    fn bad_paddings_quantisation_or_rank_is_refused() {
        let at = HalVersion::AidlV4;
        let q = T::TENSOR_QUANT8_ASYMM_SIGNED;
        assert!(check(&model(q, &[2, 3], 0.5, &[4, 5]), at)
            .unwrap_err()
            .contains("[rank, 2]"));
        assert!(check(&model(q, &[3, 2], 0.5, &[4, 5]), at)
            .unwrap_err()
            .contains("rank 2"));
        assert!(check(&model(q, &[2, 2], 0.25, &[4, 5]), at)
            .unwrap_err()
            .contains("scale"));
        assert!(check(&model(q, &[2, 2], 0.5, &[20]), at)
            .unwrap_err()
            .contains("output rank"));
        // BOOL8 is not among its types.
        assert!(check(&model(T::TENSOR_BOOL8, &[2, 2], 0.5, &[4, 5]), at)
            .unwrap_err()
            .contains("fit none"));
    }
}
