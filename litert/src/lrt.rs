//! The LiteRT vendor C ABI the compiler plugin and the dispatch library meet
//! (`litert/vendors/c/litert_compiler_plugin.h`, `litert_dispatch.h`,
//! `litert_dispatch_api.h`, `litert/c/internal/litert_{compiler,runtime}_context.h` and the
//! value types of `litert/c`), written as `#[repr(C)]` mirrors for a 64-bit target.
//!
//! The two context tables grow by appending fields; only the prefix up to the last field
//! vnpu calls is declared, and [`check_header`] refuses a table that is not the pinned
//! wheel's (`ai-edge-litert==2.3.0`), so a prefix offset can never be wrong at run time.

use std::ffi::{c_char, c_int, c_void};

/// `LiteRtStatus`.
pub type Status = c_int;
/// `kLiteRtStatusOk`.
pub const OK: Status = 0;
/// `kLiteRtStatusErrorInvalidArgument`.
pub const INVALID_ARGUMENT: Status = 1;
/// `kLiteRtStatusErrorRuntimeFailure`.
pub const RUNTIME_FAILURE: Status = 3;
/// `kLiteRtStatusErrorUnsupported`.
pub const UNSUPPORTED: Status = 5;
/// `kLiteRtStatusErrorWrongVersion`.
pub const WRONG_VERSION: Status = 8;
/// `kLiteRtStatusErrorCompilation`.
pub const COMPILATION: Status = 504;
/// `kLiteRtStatusErrorIndexOOB`.
pub const INDEX_OOB: Status = 1000;
/// `kLiteRtStatusErrorIncompatibleByteCodeVersion`.
pub const INCOMPATIBLE_BYTECODE: Status = 4002;

/// The API version the 2.3.0 runtime requires of both vendor libraries, exactly.
pub const API_VERSION: ApiVersion = ApiVersion {
    major: 0,
    minor: 1,
    patch: 0,
};

/// `kLiteRtHwAcceleratorNpu`.
pub const HW_NPU: c_int = 1 << 2;
/// `kLiteRtDispatchCapabilitiesBasic`.
pub const CAPABILITIES_BASIC: c_int = 1;
/// `kLiteRtTensorBufferTypeHostMemory`.
pub const BUFFER_HOST_MEMORY: c_int = 1;
/// `kLiteRtTensorBufferLockModeRead`.
pub const LOCK_READ: c_int = 0;
/// `kLiteRtTensorBufferLockModeWrite`.
pub const LOCK_WRITE: c_int = 1;
/// `kLiteRtDispatchExecutableTypeMlModel`: byte code in a buffer.
pub const EXEC_ML_MODEL: c_int = 2;
/// `kLiteRtRankedTensorType`.
pub const RANKED: c_int = 0;
/// `kLiteRtQuantizationPerTensor`.
pub const QUANT_PER_TENSOR: c_int = 1;
/// `kLiteRtQuantizationPerChannel`.
pub const QUANT_PER_CHANNEL: c_int = 2;
/// `kLiteRtAnyTypeInt`.
pub const ANY_INT: c_int = 2;
/// `LITERT_TENSOR_MAX_RANK`.
pub const MAX_RANK: usize = 8;

/// `LiteRtAbiHeader`: the first member of every versioned table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AbiHeader {
    /// The table's size in bytes.
    pub struct_size: u16,
    /// Its major version.
    pub major_version: u16,
    /// Its minor version.
    pub minor_version: u16,
    /// Zero.
    pub reserved: u16,
}

/// `LiteRtApiVersion`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ApiVersion {
    /// Major.
    pub major: c_int,
    /// Minor.
    pub minor: c_int,
    /// Patch.
    pub patch: c_int,
}

/// `LiteRtLayout`: `rank` in bits 0..7 and `has_strides` in bit 7 of the first word.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Layout {
    /// The bit fields.
    pub bits: u32,
    /// Dimensions (negative: dynamic).
    pub dimensions: [i32; MAX_RANK],
    /// Strides, when `has_strides`.
    pub strides: [u32; MAX_RANK],
}

impl Layout {
    /// The rank.
    pub fn rank(&self) -> usize {
        (self.bits & 0x7f) as usize
    }

    /// The dimensions (empty when the rank is out of range).
    pub fn dims(&self) -> &[i32] {
        self.dimensions.get(..self.rank()).unwrap_or(&[])
    }
}

/// `LiteRtRankedTensorType`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RankedTensorType {
    /// `LiteRtElementType` (the `TfLiteType` values).
    pub element_type: c_int,
    /// The shape.
    pub layout: Layout,
}

/// `LiteRtQuantizationPerTensor`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct QuantPerTensor {
    /// Scale.
    pub scale: f32,
    /// Zero point.
    pub zero_point: i64,
}

/// `LiteRtQuantizationPerChannel`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct QuantPerChannel {
    /// The quantised dimension.
    pub quantized_dimension: i32,
    /// How many channels.
    pub num_channels: u64,
    /// Their scales.
    pub scales: *const f32,
    /// Their zero points.
    pub zero_points: *const i64,
}

/// `LiteRtMemBuffer`: where byte code lies (in memory, or at an offset of a file).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemBuffer {
    /// A descriptor of the mapped file, or -1.
    pub fd: c_int,
    /// The base address (null when only the descriptor is given).
    pub base_addr: *const c_void,
    /// The byte code's offset from `base_addr`.
    pub offset: usize,
    /// Its size.
    pub size: usize,
    /// Where `base_addr` lies in the file.
    pub alloc_base_file_offset: usize,
}

/// `LiteRtAny` (type tag and an 8-byte union).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Any {
    /// `LiteRtAnyType`.
    pub kind: c_int,
    /// The value's bits.
    pub value: i64,
}

/// `LiteRtMetric`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// Its name.
    pub name: *const c_char,
    /// Its value.
    pub value: Any,
}

/// An opaque handle of the runtime (`LiteRtOp`, `LiteRtTensor`, ...).
pub type Handle = *mut c_void;

type Get<T> = Option<unsafe extern "C" fn(Handle, *mut T) -> Status>;
type GetAt<T> = Option<unsafe extern "C" fn(Handle, usize, *mut T) -> Status>;

/// The leading part of `LiteRtCompilerContext` (2.3.0: 1408 bytes, version 1.3), through
/// `get_custom_options`. Field order is the header's; unused runs are padding arrays.
#[repr(C)]
pub struct CompilerContext {
    /// The ABI header.
    pub header: AbiHeader,
    /// Subgraphs of a model.
    pub get_num_model_subgraphs: Get<usize>,
    /// One subgraph of a model.
    pub get_model_subgraph: GetAt<Handle>,
    /// Operators of a subgraph.
    pub get_num_subgraph_ops: Get<usize>,
    /// One operator.
    pub get_subgraph_op: GetAt<Handle>,
    /// Inputs of a subgraph.
    pub get_num_subgraph_inputs: Get<usize>,
    /// One input.
    pub get_subgraph_input: GetAt<Handle>,
    /// Outputs of a subgraph.
    pub get_num_subgraph_outputs: Get<usize>,
    /// One output.
    pub get_subgraph_output: GetAt<Handle>,
    /// An operator's `LiteRtOpCode` (the TFLite builtin codes).
    pub get_op_code: Get<c_int>,
    /// A custom operator's name.
    pub get_custom_code: Get<*const c_char>,
    /// Inputs of an operator.
    pub get_num_op_inputs: Get<usize>,
    /// One input.
    pub get_op_input: GetAt<Handle>,
    /// Outputs of an operator.
    pub get_num_op_outputs: Get<usize>,
    /// One output.
    pub get_op_output: GetAt<Handle>,
    /// A tensor's name.
    pub get_tensor_name: Get<*const c_char>,
    /// A tensor's index.
    pub get_tensor_index: Get<u32>,
    /// Ranked or unranked.
    pub get_tensor_type_id: Get<c_int>,
    /// A ranked tensor's type.
    pub get_ranked_tensor_type: Get<RankedTensorType>,
    _unranked: *const c_void,
    /// The quantisation kind.
    pub get_quantization_type_id: Get<c_int>,
    /// Per-tensor quantisation.
    pub get_per_tensor_quantization: Get<QuantPerTensor>,
    /// Per-channel quantisation.
    pub get_per_channel_quantization: Get<QuantPerChannel>,
    _uses_and_defining_op: [*const c_void; 3],
    /// A tensor's weights (constant data).
    pub get_tensor_weights: Get<Handle>,
    _buffer_id: *const c_void,
    /// The bytes of weights.
    pub get_weights_bytes:
        Option<unsafe extern "C" fn(Handle, *mut *const c_void, *mut usize) -> Status>,
    _composite: [*const c_void; 4],
    /// Selects an operator for partition `k`.
    pub push_op: Option<unsafe extern "C" fn(Handle, Handle, usize) -> Status>,
    _options: [*const c_void; 4],
    /// The option getters, `get_strided_slice_begin_mask_option` (index 0) through
    /// `get_squeeze_dims_option` (index 90), each `(op, *out) -> status` (the array ones
    /// `(op, *const i32*, *i32)`); see [`crate::plugin::options`].
    pub option_getters: [*const c_void; OPTION_GETTERS],
    /// A custom operator's options bytes.
    pub get_custom_options:
        Option<unsafe extern "C" fn(Handle, *mut *const u8, *mut i32) -> Status>,
}

/// How many option getters the table declares in a row.
pub const OPTION_GETTERS: usize = 91;

/// The compiler context of the pinned wheel: its size and version.
pub const COMPILER_CONTEXT: (u16, u16, u16) = (1408, 1, 3);

/// The leading part of `LiteRtRuntimeContext` (2.3.0: 416 bytes, version 1.2), through
/// `get_tensor_buffer_host_memory`.
#[repr(C)]
pub struct RuntimeContext {
    /// The ABI header.
    pub header: AbiHeader,
    /// `(n, types, size, n_strides, strides, *requirements)`.
    pub create_tensor_buffer_requirements: Option<
        unsafe extern "C" fn(c_int, *const c_int, usize, c_int, *const u32, *mut Handle) -> Status,
    >,
    _unused: [*const c_void; 23],
    /// A tensor buffer's size.
    pub get_tensor_buffer_size: Get<usize>,
    /// Its packed size (the tensor's bytes).
    pub get_tensor_buffer_packed_size: Get<usize>,
    /// Its offset.
    pub get_tensor_buffer_offset: Get<usize>,
    /// Locks it, giving its host address.
    pub lock_tensor_buffer: Option<unsafe extern "C" fn(Handle, *mut *mut c_void, c_int) -> Status>,
    /// Unlocks it.
    pub unlock_tensor_buffer: Option<unsafe extern "C" fn(Handle) -> Status>,
    /// Its host memory.
    pub get_tensor_buffer_host_memory: Get<*mut c_void>,
}

/// The runtime context of the pinned wheel: its size and version.
pub const RUNTIME_CONTEXT: (u16, u16, u16) = (416, 1, 2);

// Offsets the headers assert (64-bit), checked here so a slip in a padding run cannot
// go unnoticed.
const _: () = assert!(std::mem::size_of::<Layout>() == 68);
const _: () = assert!(std::mem::size_of::<RankedTensorType>() == 72);
const _: () = assert!(std::mem::size_of::<QuantPerTensor>() == 16);
const _: () = assert!(std::mem::size_of::<QuantPerChannel>() == 32);
const _: () = assert!(std::mem::size_of::<Any>() == 16);
const _: () = assert!(std::mem::offset_of!(CompilerContext, get_op_code) == 72);
const _: () = assert!(std::mem::offset_of!(CompilerContext, get_weights_bytes) == 224);
const _: () = assert!(std::mem::offset_of!(CompilerContext, push_op) == 264);
const _: () = assert!(std::mem::offset_of!(CompilerContext, option_getters) == 304);
const _: () = assert!(std::mem::offset_of!(CompilerContext, get_custom_options) == 1032);
const _: () = assert!(std::mem::offset_of!(RuntimeContext, get_tensor_buffer_size) == 200);
const _: () = assert!(std::mem::offset_of!(RuntimeContext, lock_tensor_buffer) == 224);
const _: () = assert!(std::mem::offset_of!(RuntimeContext, get_tensor_buffer_host_memory) == 240);

/// Checks a table's header against the pinned wheel's `(size, major, minor)`: `Err` names
/// both, for a runtime other than the one these mirrors describe.
pub fn check_header(what: &str, got: AbiHeader, want: (u16, u16, u16)) -> Result<(), String> {
    let (size, major, minor) = want;
    if (got.struct_size, got.major_version, got.minor_version) == want {
        return Ok(());
    }
    Err(format!(
        "{what}: this LiteRT runtime's table is {} bytes, version {}.{}; vnpu was built for \
         {size} bytes, version {major}.{minor} (ai-edge-litert==2.3.0)",
        got.struct_size, got.major_version, got.minor_version
    ))
}
