//! vnpu as a LiteRT (TFLite) accelerator, over the driver's public interface, three ways:
//! - the external delegate `libvnpu_delegate.so` ([`delegate`]) for the `Interpreter` API
//!   (`ai_edge_litert.interpreter.load_delegate`): the graph the runtime hands over is read
//!   into the driver's one TFLite importer and partitioner ([`graph`]);
//! - the NPU vendor pair for `CompiledModel(hardware_accel=NPU|CPU)`: the compiler plugin
//!   `libLiteRtCompilerPlugin_Vnpu.so` ([`plugin`]: the same partitioner, then vnpu byte
//!   code per partition, [`bytecode`]) and the dispatch library `libLiteRtDispatch_Vnpu.so`
//!   ([`dispatch`]: loads the byte code and runs it), each built by its own small crate
//!   (`litert/plugin`, `litert/dispatch`) around [`export_compiler_plugin`] and
//!   [`export_dispatch`].
//!
//! Partitions run through `IDevice` ([`kernel`]): in this process, or a `vnpu serve`
//! service (`socket` option or `VNPU_SOCKET`). Whatever vnpu does not take stays on the
//! CPU, with the reason in the partition report.
//!
//! Pinned to `ai-edge-litert==2.3.0`: the C structs in [`ffi`] and [`lrt`] are that
//! release's, and the versioned tables are checked at run time.

pub mod bytecode;
pub mod delegate;
pub mod dispatch;
pub mod ffi;
pub mod graph;
pub mod kernel;
pub mod lrt;
pub mod plugin;
pub mod trace;

pub use delegate::{
    tflite_plugin_create_delegate, tflite_plugin_destroy_delegate, Delegate, Options,
};
