//! Kernels that only move elements (any element type): RESHAPE, CONCATENATION,
//! DEPTH_TO_SPACE, SPACE_TO_DEPTH, PAD, TRANSPOSE.

pub mod concat;
pub mod depth_space;
pub mod pad;
pub mod reshape;
pub mod transpose;
