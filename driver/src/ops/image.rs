//! RESIZE_BILINEAR (output size or scale factors; optional layout, align_corners,
//! half_pixel_centers).

use vnpu_emu::kernels::ResizeBilinear;

use super::conv::spatial;
use super::types::FLOAT_QUANT8;
use super::CompileError;
use super::{arg, Arg, Args, HalVersion::*, OpDef, Signature, Ty};
use crate::hal::OperationType;

const OUT: &[Arg] = &[arg("output", Ty::T)];
const FLAGS: &[&[Arg]] = &[
    &[arg("layout", Ty::Bool)],
    &[
        arg("align_corners", Ty::Bool),
        arg("half_pixel_centers", Ty::Bool),
    ],
];

/// Output (width, height) from either the size or the scale form.
pub fn output_size(a: &Args<'_>, nchw: bool) -> Result<(u32, u32), CompileError> {
    if a.has("output_width") {
        return Ok((a.positive("output_width")?, a.positive("output_height")?));
    }
    let (h, w) = spatial(a, a.shape("input")?, nchw)?;
    let scaled = |n: usize, s: f32| -> Result<u32, CompileError> {
        // The reference computes the size in float32.
        let v = f64::from((n as f32 * s).floor());
        if !(1.0..=65536.0).contains(&v) {
            return Err(a.invalid(format!("resize scale {s}")));
        }
        Ok(v as u32)
    };
    Ok((
        scaled(w, a.f32("width_scale")?)?,
        scaled(h, a.f32("height_scale")?)?,
    ))
}

const BY_SIZE: &[Arg] = &[
    arg("input", Ty::T),
    arg("output_width", Ty::Int),
    arg("output_height", Ty::Int),
];
const BY_SCALE: &[Arg] = &[
    arg("input", Ty::T),
    arg("width_scale", Ty::Scalar),
    arg("height_scale", Ty::Scalar),
];

/// The two forms (size, scale) of a resize over `types`.
pub const fn resize_signatures(types: &'static [crate::hal::OperandType]) -> [Signature; 2] {
    [
        Signature::new(V1_0, types, BY_SIZE, OUT).optional(FLAGS),
        Signature::new(V1_2, types, BY_SCALE, OUT).optional(FLAGS),
    ]
}

const SIGS: [Signature; 2] = resize_signatures(FLOAT_QUANT8);

/// RESIZE_BILINEAR.
pub const RESIZE_BILINEAR: OpDef = OpDef {
    op: OperationType::RESIZE_BILINEAR,
    signatures: &SIGS,
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| {
        let nchw = a.flag("layout")?;
        let (out_w, out_h) = output_size(a, nchw)?;
        a.kernel(
            ResizeBilinear {
                out_h,
                out_w,
                align_corners: a.flag("align_corners")?,
                half_pixel_centers: a.flag("half_pixel_centers")?,
                nchw,
            },
            &["input"],
        )
    }),
};
