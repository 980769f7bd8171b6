//! Reduction kernels.

pub mod mean;
pub mod reduce;
