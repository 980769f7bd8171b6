//! Kernels behind vendor-extension operations: the example extension's FIBONACCI and the
//! accelerator's own fused GELU. The device knows nothing of extensions (the driver maps
//! an extension operation to one of these like any other operation).

pub mod fibonacci;
pub mod gelu;
