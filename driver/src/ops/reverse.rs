//! REVERSE (AIDL V3, feature level 7): the input with its elements along one axis in
//! reverse order. The axis is a one-element TENSOR_INT32 the compiler reads, `0..rank`
//! (no negative axes, as the NNAPI reference refuses them).

use vnpu_emu::kernels::Reverse;

use super::types::FLOAT_QUANT8_INT32;
use super::{arg, same_quantisation, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{Operand, OperationType};

fn check(ins: &[&Operand], outs: &[&Operand]) -> Result<(), String> {
    let (x, axis, out) = (ins[0], ins[1], outs[0]);
    match axis.dimensions[..] {
        [] | [0] | [1] => {}
        _ => {
            return Err(format!(
                "axis has dimensions {:?}, not one element",
                axis.dimensions
            ))
        }
    }
    same_quantisation(x, out, "the input")?;
    let (ri, ro) = (x.dimensions.len(), out.dimensions.len());
    if ri != 0 && ro != 0 && ri != ro {
        return Err(format!("input rank {ri}, output rank {ro}"));
    }
    Ok(())
}

fn lower(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let rank = a.shape("input")?.len();
    let axis = match a.ints("axis")?[..] {
        [v] if (0..rank as i64).contains(&i64::from(v)) => v as u32,
        ref v => return Err(a.invalid(format!("axis {v:?} for rank {rank}"))),
    };
    a.kernel(Reverse { axis }, &["input"])
}

/// REVERSE.
pub const REVERSE: OpDef = OpDef {
    op: OperationType::REVERSE,
    signatures: &[Signature::new(
        AidlV3,
        FLOAT_QUANT8_INT32,
        &[arg("input", Ty::T), arg("axis", Ty::Ints)],
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
    use crate::ops::testing::{check, ints, quant};

    fn model(axis_dims: &[u32], out_zero_point: i32, out_dims: &[u32]) -> crate::hal::Model {
        let t = T::TENSOR_QUANT8_ASYMM;
        let mut b = ModelBuilder::default();
        let x = b.input(t, &[2, 3]);
        quant(&mut b, x, 0.5, 1);
        let values: Vec<i32> = vec![1; axis_dims.iter().product::<u32>() as usize];
        let axis = ints(&mut b, axis_dims, &values);
        let o = b.output(t, out_dims);
        quant(&mut b, o, 0.5, out_zero_point);
        b.op(OperationType::REVERSE, &[x, axis], &[o]);
        b.build(Vec::new())
    }

    #[test]
    fn valid_from_aidl_v3_only() {
        let m = model(&[1], 1, &[2, 3]);
        assert!(check(&m, HalVersion::V1_3).is_err());
        assert!(check(&m, HalVersion::AidlV2).is_err());
        check(&m, HalVersion::AidlV3).unwrap();
    }

    #[test]
    fn bad_axis_quantisation_or_rank_is_refused() {
        let at = HalVersion::AidlV4;
        assert!(check(&model(&[2], 1, &[2, 3]), at)
            .unwrap_err()
            .contains("one element"));
        assert!(check(&model(&[1, 1], 1, &[2, 3]), at).is_err());
        assert!(check(&model(&[1], 2, &[2, 3]), at)
            .unwrap_err()
            .contains("zero point"));
        assert!(check(&model(&[1], 1, &[6]), at)
            .unwrap_err()
            .contains("rank"));
    }
}
