//! Image kernels: resizing.

pub mod resize_bilinear;
pub mod resize_nearest;
