//! The integer GEMM of the quantised convolution family: `C = A x B` with A the im2col
//! rows of the input, B the filter (zero points removed) and C the exact wrapping `i32`
//! sums. A wrapping integer sum does not depend on its order, so every micro-kernel (and
//! the plain fallbacks) gives the bits of the reference's scalar loop.
//!
//! Two operand forms:
//!
//! - [`quads`]: A as bytes (`u8`: a uint8 input as it is, an int8 one with its sign bit
//!   flipped), B as `i8` in groups of four depth entries, the input zero point folded
//!   into per-column start values. The form of every int8 model (symmetric filters), read
//!   by `vpdpbusd` (AVX-512 VNNI, four products a lane) or widened to `i16`
//!   (AVX2, AVX-512BW);
//! - [`pairs`]: A and B as `i16` pairs (`vpmaddwd`, `vpdpwssd`), for the zero points the
//!   byte form cannot take (a filter value minus its zero point outside `i8`, an input
//!   zero point outside its element type).

pub mod pairs;
pub mod quads;
mod vnni;
mod widen;

pub use pairs::*;
#[cfg(target_arch = "x86_64")]
pub use vnni::{panels, PanelSink, ROWS as VNNI_ROWS};
#[cfg(target_arch = "x86_64")]
pub use widen::{bytes_to_pairs, quads_to_pairs};
