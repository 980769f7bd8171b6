//! Pooling kernels.

pub mod pool2d;
mod qmax_simd;
