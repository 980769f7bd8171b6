//! Element-wise kernels: broadcast binary arithmetic and unary functions.

pub mod binary;
pub mod compare;
pub mod convert;
pub mod logical;
pub mod math;
pub mod minmax;
pub mod unary;
