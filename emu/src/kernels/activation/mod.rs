//! Activation kernels that work along an axis.

pub mod softmax;
