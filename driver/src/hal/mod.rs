//! NN HAL 1.3 types and their validation.
//!
//! - [`types`]: the HAL structures and open enums (invalid wire values are representable).
//! - [`validate`]: `validate_model`, `validate_request` and friends, mirroring what NN's
//!   `ValidateHal.cpp` checks for HAL 1.3, with INVALID_ARGUMENT as the HAL code.
//!
//! Per-operation signatures live with each operation's definition in [`crate::ops`].

pub mod builder;
pub mod types;
pub mod validate;

pub use types::*;
pub use validate::*;
