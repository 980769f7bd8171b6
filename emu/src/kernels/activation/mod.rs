//! Activation kernels that work along an axis.

pub mod log_softmax;
pub mod softmax;
