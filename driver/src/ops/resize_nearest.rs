//! RESIZE_NEAREST_NEIGHBOR (output size or scale factors; layout required, optional
//! align_corners and half_pixel_centers).

use vnpu_emu::kernels::ResizeNearest;

use super::image::output_size;
use super::types::FLOAT_QUANT8;
use super::{arg, Arg, HalVersion::*, OpDef, Signature, Ty};
use crate::hal::OperationType;

const OUT: &[Arg] = &[arg("output", Ty::T)];
const FLAGS: &[&[Arg]] = &[&[
    arg("align_corners", Ty::Bool),
    arg("half_pixel_centers", Ty::Bool),
]];

const SIGS: [Signature; 2] = [
    Signature::new(
        V1_2,
        FLOAT_QUANT8,
        &[
            arg("input", Ty::T),
            arg("output_width", Ty::Int),
            arg("output_height", Ty::Int),
            arg("layout", Ty::Bool),
        ],
        OUT,
    )
    .optional(FLAGS),
    Signature::new(
        V1_2,
        FLOAT_QUANT8,
        &[
            arg("input", Ty::T),
            arg("width_scale", Ty::Scalar),
            arg("height_scale", Ty::Scalar),
            arg("layout", Ty::Bool),
        ],
        OUT,
    )
    .optional(FLAGS),
];

/// RESIZE_NEAREST_NEIGHBOR.
pub const RESIZE_NEAREST_NEIGHBOR: OpDef = OpDef {
    op: OperationType::RESIZE_NEAREST_NEIGHBOR,
    signatures: &SIGS,
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| {
        let nchw = a.bool("layout")?;
        let (out_w, out_h) = output_size(a, nchw)?;
        a.kernel(
            ResizeNearest {
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
