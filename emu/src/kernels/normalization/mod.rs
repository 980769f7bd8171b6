//! Normalisation kernels.

pub mod instance;
pub mod l2;
pub mod lrn;
