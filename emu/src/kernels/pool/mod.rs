//! Pooling kernels.

pub mod pool2d;
