//! Image kernels: resizing.

pub mod resize_bilinear;
pub mod resize_bilinear_integer;
pub mod resize_nearest;
