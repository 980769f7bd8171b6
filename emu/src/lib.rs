//! The emulated vnpu accelerator: a device model in pure Rust.
//!
//! The host controls it only through [`Device::read_reg`]/[`Device::write_reg`], rings
//! in host memory reached through the [`iommu`], and an interrupt eventfd. Device DRAM
//! is a memfd at device addresses from [`DRAM_BASE`]; the compute engine runs validated
//! [`program`]s of [`kernels`]. See docs/ARCHITECTURE.md.

pub mod coherence;
pub mod device;
pub mod engine;
pub mod error;
pub mod fault;
pub mod host;
pub mod iommu;
pub mod kernels;
pub mod program;
pub mod regs;
pub mod ring;
pub mod shm;
pub mod tensor;
pub mod timing;
pub mod trace;
pub mod weights;

pub use device::{Bus, Device, DeviceConfig, DeviceError};

/// Device DRAM's first device address; IOVAs (host memory) live below it.
pub const DRAM_BASE: u64 = 0x10_0000_0000;
