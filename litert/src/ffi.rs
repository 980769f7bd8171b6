//! The TFLite C structs an external delegate meets (`tflite/core/c/common.h` of the LiteRT
//! release the pinned `ai-edge-litert==2.3.0` wheel ships), written from their documented
//! layouts for a 64-bit target. Only the leading fields of `TfLiteContext` the delegate
//! calls are declared: the runtime owns that struct and the delegate only reads it.
//! The sizes the wheel was verified with are asserted at compile time.

use std::ffi::{c_char, c_int, c_void};

/// `TfLiteStatus` values.
pub const OK: c_int = 0;
/// `kTfLiteError`.
pub const ERROR: c_int = 1;
/// `kTfLiteMmapRo`: a tensor whose data is a constant of the model.
pub const MMAP_RO: c_int = 1;
/// `kTfLiteAffineQuantization`.
pub const AFFINE_QUANTIZATION: c_int = 1;
/// `kTfLiteBuiltinDelegate`: the builtin code of a delegate's kernel.
pub const BUILTIN_DELEGATE: i32 = 51;

/// `TfLiteIntArray`: a count, then that many ints.
#[repr(C)]
pub struct TfLiteIntArray {
    /// How many.
    pub size: c_int,
    /// The values (a flexible array member).
    pub data: [c_int; 0],
}

/// `TfLiteFloatArray`.
#[repr(C)]
pub struct TfLiteFloatArray {
    /// How many.
    pub size: c_int,
    /// The values.
    pub data: [f32; 0],
}

/// `TfLiteQuantizationParams` (the per-tensor legacy form).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TfLiteQuantizationParams {
    /// Scale.
    pub scale: f32,
    /// Zero point.
    pub zero_point: i32,
}

/// `TfLiteQuantization`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TfLiteQuantization {
    /// `TfLiteQuantizationType`.
    pub kind: c_int,
    /// `TfLiteAffineQuantization*` for the affine kind.
    pub params: *mut c_void,
}

/// `TfLiteAffineQuantization`.
#[repr(C)]
pub struct TfLiteAffineQuantization {
    /// Scales.
    pub scale: *mut TfLiteFloatArray,
    /// Zero points.
    pub zero_point: *mut TfLiteIntArray,
    /// The quantised dimension.
    pub quantized_dimension: i32,
}

/// `TfLiteDimensionMetadata`: one traversed dimension of a sparse tensor.
#[repr(C)]
pub struct TfLiteDimensionMetadata {
    /// `TfLiteDimensionType` (dense 0, sparse CSR 1).
    pub format: c_int,
    /// A dense dimension's size.
    pub dense_size: c_int,
    /// A sparse dimension's segments.
    pub array_segments: *mut TfLiteIntArray,
    /// A sparse dimension's indices.
    pub array_indices: *mut TfLiteIntArray,
}

/// `TfLiteSparsity`: a sparse tensor's format.
#[repr(C)]
pub struct TfLiteSparsity {
    /// The traversal order.
    pub traversal_order: *mut TfLiteIntArray,
    /// The block map.
    pub block_map: *mut TfLiteIntArray,
    /// `dim_metadata_size` entries, in traversal order.
    pub dim_metadata: *mut TfLiteDimensionMetadata,
    /// How many.
    pub dim_metadata_size: c_int,
}

/// `TfLiteTensor`.
#[repr(C)]
pub struct TfLiteTensor {
    /// `TfLiteType`.
    pub kind: c_int,
    /// The data (`TfLitePtrUnion`).
    pub data: *mut c_void,
    /// Its shape.
    pub dims: *mut TfLiteIntArray,
    /// Per-tensor quantisation.
    pub params: TfLiteQuantizationParams,
    /// `TfLiteAllocationType`.
    pub allocation_type: c_int,
    /// Bytes of data.
    pub bytes: usize,
    /// The allocation.
    pub allocation: *const c_void,
    /// Its name.
    pub name: *const c_char,
    /// The delegate owning its buffer handle.
    pub delegate: *mut TfLiteDelegate,
    /// `TfLiteBufferHandle`.
    pub buffer_handle: c_int,
    /// Whether the data must be copied from the buffer handle.
    pub data_is_stale: bool,
    /// A variable tensor.
    pub is_variable: bool,
    /// Quantisation.
    pub quantization: TfLiteQuantization,
    /// `TfLiteSparsity*`.
    pub sparsity: *mut TfLiteSparsity,
    /// The shape signature (-1: known at run time), or null.
    pub dims_signature: *const TfLiteIntArray,
}

/// `TfLiteNode`.
#[repr(C)]
pub struct TfLiteNode {
    /// Input tensors.
    pub inputs: *mut TfLiteIntArray,
    /// Output tensors.
    pub outputs: *mut TfLiteIntArray,
    /// Intermediate tensors.
    pub intermediates: *mut TfLiteIntArray,
    /// Temporaries.
    pub temporaries: *mut TfLiteIntArray,
    /// What the kernel's `init` returned.
    pub user_data: *mut c_void,
    /// The builtin's C parameter struct (or, for a delegate kernel, its parameters).
    pub builtin_data: *mut c_void,
    /// A custom operator's options.
    pub custom_initial_data: *const c_void,
    /// Their size.
    pub custom_initial_data_size: c_int,
    /// The delegate that took the node.
    pub delegate: *mut TfLiteDelegate,
    /// Whether it has side effects.
    pub might_have_side_effect: bool,
}

/// `init` of a kernel.
pub type InitFn = unsafe extern "C" fn(
    ctx: *mut TfLiteContext,
    buffer: *const c_char,
    length: usize,
) -> *mut c_void;
/// `free` of a kernel.
pub type FreeFn = unsafe extern "C" fn(ctx: *mut TfLiteContext, data: *mut c_void);
/// `prepare` and `invoke` of a kernel.
pub type NodeFn = unsafe extern "C" fn(ctx: *mut TfLiteContext, node: *mut TfLiteNode) -> c_int;

/// `TfLiteRegistration` (passed by value).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TfLiteRegistration {
    /// Makes the kernel's data.
    pub init: Option<InitFn>,
    /// Frees it.
    pub free: Option<FreeFn>,
    /// Prepares.
    pub prepare: Option<NodeFn>,
    /// Runs.
    pub invoke: Option<NodeFn>,
    /// A profiling label.
    pub profiling_string: *const c_void,
    /// `TfLiteBuiltinOperator`.
    pub builtin_code: i32,
    /// A custom operator's name.
    pub custom_name: *const c_char,
    /// The operator's version.
    pub version: c_int,
    /// `TfLiteOperator*`.
    pub registration_external: *mut c_void,
    /// The async kernel getter.
    pub async_kernel: *const c_void,
    /// In-place flags.
    pub inplace_operator: u64,
}

/// `TfLiteDelegate`.
#[repr(C)]
pub struct TfLiteDelegate {
    /// The delegate's own data.
    pub data: *mut c_void,
    /// Called by the runtime to take nodes.
    pub prepare: Option<unsafe extern "C" fn(*mut TfLiteContext, *mut TfLiteDelegate) -> c_int>,
    /// Buffer-handle copies (unused: null).
    pub copy_from_buffer_handle: *const c_void,
    /// Buffer-handle copies (unused: null).
    pub copy_to_buffer_handle: *const c_void,
    /// Buffer-handle release (unused: null).
    pub free_buffer_handle: *const c_void,
    /// `TfLiteDelegateFlags`.
    pub flags: i64,
    /// Unused: null.
    pub opaque_delegate_builder: *mut c_void,
}

/// `TfLiteDelegateParams`: what a delegate kernel's `init` receives.
#[repr(C)]
pub struct TfLiteDelegateParams {
    /// The delegate.
    pub delegate: *mut TfLiteDelegate,
    /// The nodes the kernel replaces.
    pub nodes_to_replace: *mut TfLiteIntArray,
    /// Its input tensors.
    pub input_tensors: *mut TfLiteIntArray,
    /// Its output tensors.
    pub output_tensors: *mut TfLiteIntArray,
}

/// `ReportError`: printf-style.
pub type ReportErrorFn = unsafe extern "C" fn(ctx: *mut TfLiteContext, fmt: *const c_char, ...);

/// The leading fields of `TfLiteContext`, up to the last one the delegate calls.
#[repr(C)]
pub struct TfLiteContext {
    /// How many tensors.
    pub tensors_size: usize,
    /// The nodes in execution order.
    pub get_execution_plan:
        Option<unsafe extern "C" fn(*mut TfLiteContext, *mut *mut TfLiteIntArray) -> c_int>,
    /// The tensors.
    pub tensors: *mut TfLiteTensor,
    /// The runtime's.
    pub impl_: *mut c_void,
    /// Resizes a tensor.
    pub resize_tensor: *const c_void,
    /// Reports an error.
    pub report_error: Option<ReportErrorFn>,
    /// Adds tensors.
    pub add_tensors: *const c_void,
    /// A node and its registration.
    pub get_node_and_registration: Option<
        unsafe extern "C" fn(
            *mut TfLiteContext,
            c_int,
            *mut *mut TfLiteNode,
            *mut *mut TfLiteRegistration,
        ) -> c_int,
    >,
    /// Hands node subsets to the delegate's kernels.
    pub replace_node_subsets_with_delegate_kernels: Option<
        unsafe extern "C" fn(
            *mut TfLiteContext,
            TfLiteRegistration,
            *const TfLiteIntArray,
            *mut TfLiteDelegate,
        ) -> c_int,
    >,
}

// The sizes the pinned wheel was verified with (x86-64): a mismatch here means these
// definitions do not describe that runtime.
const _: () = assert!(std::mem::size_of::<TfLiteRegistration>() == 88);
const _: () = assert!(std::mem::size_of::<TfLiteTensor>() == 112);
const _: () = assert!(std::mem::size_of::<TfLiteNode>() == 80);
const _: () = assert!(std::mem::size_of::<TfLiteDelegate>() == 56);

/// Copies an int array's values (empty for null).
///
/// # Safety
/// `a` is null or points to a valid `TfLiteIntArray` with `size` values.
pub unsafe fn ints(a: *const TfLiteIntArray) -> Vec<i32> {
    if a.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller promises a valid array; a negative size reads nothing.
    unsafe {
        let n = usize::try_from((*a).size).unwrap_or(0);
        std::slice::from_raw_parts((*a).data.as_ptr(), n).to_vec()
    }
}

/// A `TfLiteIntArray` the delegate owns (the wheel exports no `TfLiteIntArrayCreate`).
pub struct OwnedIntArray {
    words: Vec<c_int>,
}

impl OwnedIntArray {
    /// An array of `values`.
    pub fn new(values: &[i32]) -> OwnedIntArray {
        let mut words = Vec::with_capacity(values.len() + 1);
        words.push(values.len() as c_int);
        words.extend_from_slice(values);
        OwnedIntArray { words }
    }

    /// The array, valid while `self` lives.
    pub fn as_ptr(&self) -> *const TfLiteIntArray {
        self.words.as_ptr().cast()
    }
}
