//! vnpu as a LiteRT (TFLite) accelerator: the external delegate `libvnpu_delegate.so`
//! (`ai_edge_litert.interpreter.load_delegate`). A face over the driver's public interface:
//! the graph the runtime hands over is read into the driver's one TFLite importer and
//! partitioner, partitions run through `IDevice` (in this process, or a `vnpu serve`
//! service with the `socket` option or `VNPU_SOCKET`), and whatever vnpu does not take stays
//! on the CPU, with the reason in the partition report (`log` option).
//!
//! Pinned to `ai-edge-litert==2.3.0`: the C structs in [`ffi`] are that release's.

pub mod delegate;
pub mod ffi;
pub mod graph;
pub mod kernel;

pub use delegate::{
    tflite_plugin_create_delegate, tflite_plugin_destroy_delegate, Delegate, Options,
};
