//! Image kernels: resizing.

pub mod resize_bilinear;
