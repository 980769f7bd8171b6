//! NN HAL 1.3 driver over the emulated vnpu device.
//!
//! Layers (see docs/ARCHITECTURE.md): [`hal`] types and their own checks, [`validate`]
//! (models and requests), [`compile`] (model to device program), [`hw`] (the
//! kernel-driver layer over `vnpu-emu`), [`memory`] pools, [`interface`] (the IDevice /
//! IPreparedModel traits), [`device`] (the local device), [`execute`], and the
//! [`conformance`] runner behind the `vnpu` CLI (feature `cli`, on by default).
pub mod hal;

pub mod aidl;

pub mod alloc;
pub mod burst;
pub mod cache;
pub mod compile;
pub mod config;
#[cfg(feature = "cli")]
pub mod conformance;
pub mod device;
pub mod domain;
pub mod execute;
pub mod extensions;
pub mod fence;
pub mod fileio;
pub mod hw;
pub mod hwbuf;
pub mod interface;
pub mod memory;
pub mod ops;
#[cfg(feature = "service")]
pub mod service;
pub mod tflite;
pub mod validate;
pub mod workers;
