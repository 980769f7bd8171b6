//! Normalisation kernels.

pub mod l2;
