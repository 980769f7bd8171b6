//! The emulated vnpu accelerator.
