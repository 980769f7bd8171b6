//! VNPU_RESIZE_BILINEAR_INTEGER of "dev.vnpu.litert" (`crate::extensions::litert`):
//! RESIZE_BILINEAR with LiteRT's fixed-point arithmetic, for quantised tensors. Inputs: a
//! TENSOR_QUANT8_ASYMM or TENSOR_QUANT8_ASYMM_SIGNED NHWC tensor, output_width and
//! output_height (INT32), align_corners and half_pixel_centers (BOOL, not both true).
//! Output: the input's type, scale and zero point. Runs as the device's
//! RESIZE_BILINEAR_INTEGER kernel.

use vnpu_emu::kernels::ResizeBilinearInteger;

use super::types::QUANT8;
use super::{arg, HalVersion::*, OpDef, Signature, Ty};
use crate::extensions::litert::RESIZE_BILINEAR_INTEGER;
use crate::hal::Operand;

/// The output keeps the input's quantisation (the integers are interpolated as stored).
fn check(ins: &[&Operand], outs: &[&Operand]) -> Result<(), String> {
    let (x, out) = (ins[0], outs[0]);
    if x.scale != out.scale || x.zero_point != out.zero_point {
        return Err(format!(
            "the output's scale and zero point ({}, {}) must be the input's ({}, {})",
            out.scale, out.zero_point, x.scale, x.zero_point
        ));
    }
    Ok(())
}

/// VNPU_RESIZE_BILINEAR_INTEGER.
pub const VNPU_RESIZE_BILINEAR_INTEGER: OpDef = OpDef {
    op: RESIZE_BILINEAR_INTEGER,
    signatures: &[Signature::new(
        V1_2,
        QUANT8,
        &[
            arg("input", Ty::T),
            arg("output_width", Ty::Int),
            arg("output_height", Ty::Int),
            arg("align_corners", Ty::Bool),
            arg("half_pixel_centers", Ty::Bool),
        ],
        &[arg("output", Ty::T)],
    )],
    check: Some(check),
    runs: QUANT8,
    lower: Some(|a| {
        let (align_corners, half_pixel_centers) =
            (a.flag("align_corners")?, a.flag("half_pixel_centers")?);
        if align_corners && half_pixel_centers {
            return Err(a.invalid("align_corners and half_pixel_centers are exclusive"));
        }
        a.kernel(
            ResizeBilinearInteger {
                out_h: a.positive("output_height")?,
                out_w: a.positive("output_width")?,
                align_corners,
                half_pixel_centers,
            },
            &["input"],
        )
    }),
};
