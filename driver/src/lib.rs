//! NN HAL 1.3 driver over the emulated vnpu device.
pub mod corpus;
pub mod hal;
