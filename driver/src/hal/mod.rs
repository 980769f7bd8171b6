//! NN HAL 1.3 types, the bottom of the driver: nothing here imports another module of it.
//!
//! - [`types`]: the HAL structures and open enums (invalid wire values are representable).
//! - [`validate`]: the validation error ([`ValidationError`], INVALID_ARGUMENT) and the
//!   checks that need only these types (parameters, memory pools, operand sizes).
//!
//! Models and requests are validated by [`crate::validate`] (`validate_model`,
//! `validate_request`), which reads the operation definitions of [`crate::ops`] and the
//! extension registry of [`crate::extensions`].

pub mod builder;
pub mod types;
pub mod validate;

pub use types::*;
pub use validate::*;
