//! Reduction kernels.

pub mod mean;
