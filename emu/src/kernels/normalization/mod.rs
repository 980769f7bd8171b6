//! Normalisation kernels.

pub mod l2;
pub mod lrn;
