//! Element-wise kernels: broadcast binary arithmetic and unary functions.

pub mod binary;
pub mod unary;
