//! The V4 parcelables and unions (`aidl_api/android.hardware.neuralnetworks/4/`). Values the
//! AIDL shares unchanged with HAL 1.3 (Capabilities, OutputShape, Subgraph, Operand,
//! BufferDesc, BufferRole, Extension, ExtensionNameAndPrefix and the enums) are the
//! [`crate::hal`] types, re-exported here; what V4 changed or added is defined below.

use std::os::fd::OwnedFd;
use std::sync::Arc;

pub use crate::hal::{
    BufferDesc, BufferRole, Capabilities, DeviceType, ErrorStatus, ExecutionPreference,
    ExtensionNameAndPrefix, NativeHandle, OutputShape, Priority, Subgraph,
};
pub use crate::interface::{Extension, ExtensionOperandTypeInformation};

use super::traits::{IBuffer, IFencedExecutionCallback, IPreparedModel};

/// A `ParcelFileDescriptor`: one descriptor, shared so values can be cloned.
pub type ParcelFileDescriptor = Arc<OwnedFd>;

/// `IDevice::BYTE_SIZE_OF_CACHE_TOKEN`.
pub const BYTE_SIZE_OF_CACHE_TOKEN: usize = 32;
/// `IDevice::MAX_NUMBER_OF_CACHE_FILES`.
pub const MAX_NUMBER_OF_CACHE_FILES: usize = 32;
/// `IDevice::EXTENSION_TYPE_HIGH_BITS_PREFIX` (the sign bit is never part of a prefix).
pub const EXTENSION_TYPE_HIGH_BITS_PREFIX: u32 = 15;
/// `IDevice::EXTENSION_TYPE_LOW_BITS_TYPE`.
pub const EXTENSION_TYPE_LOW_BITS_TYPE: u32 = 16;
/// `IDevice::OPERAND_TYPE_BASE_MAX`.
pub const OPERAND_TYPE_BASE_MAX: i32 = 0xFFFF;
/// `IDevice::OPERATION_TYPE_BASE_MAX`.
pub const OPERATION_TYPE_BASE_MAX: i32 = 0xFFFF;
/// `IPreparedModel::DEFAULT_LOOP_TIMEOUT_DURATION_NS` (2 s).
pub const DEFAULT_LOOP_TIMEOUT_DURATION_NS: i64 = 2_000_000_000;
/// `IPreparedModel::MAXIMUM_LOOP_TIMEOUT_DURATION_NS` (15 s).
pub const MAXIMUM_LOOP_TIMEOUT_DURATION_NS: i64 = 15_000_000_000;
/// The value of an omitted deadline, duration or loop timeout, and of a time not measured.
pub const OMITTED: i64 = -1;

/// `android.hardware.common.Ashmem`.
#[derive(Clone, Debug)]
pub struct Ashmem {
    /// fd
    pub fd: ParcelFileDescriptor,
    /// size
    pub size: i64,
}

/// `android.hardware.common.MappableFile`.
#[derive(Clone, Debug)]
pub struct MappableFile {
    /// length
    pub length: i64,
    /// prot (`PROT_READ` | `PROT_WRITE`)
    pub prot: i32,
    /// fd
    pub fd: ParcelFileDescriptor,
    /// offset
    pub offset: i64,
}

/// `android.hardware.graphics.common.HardwareBufferDescription`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HardwareBufferDescription {
    /// width (a BLOB buffer's size in bytes)
    pub width: i32,
    /// height
    pub height: i32,
    /// layers
    pub layers: i32,
    /// format (`PixelFormat`; BLOB is 0x21)
    pub format: i32,
    /// usage (`BufferUsage` bits)
    pub usage: i64,
    /// stride
    pub stride: i32,
}

/// `android.hardware.graphics.common.HardwareBuffer`.
#[derive(Clone, Debug)]
pub struct HardwareBuffer {
    /// description
    pub description: HardwareBufferDescription,
    /// handle (the gralloc native handle)
    pub handle: NativeHandle,
}

/// `PixelFormat::BLOB`.
pub const PIXEL_FORMAT_BLOB: i32 = 0x21;

/// `Memory` (union).
#[derive(Clone, Debug)]
pub enum Memory {
    /// ashmem
    Ashmem(Ashmem),
    /// mappableFile
    MappableFile(MappableFile),
    /// hardwareBuffer
    HardwareBuffer(HardwareBuffer),
}

/// `RequestMemoryPool` (union).
#[derive(Clone, Debug)]
pub enum RequestMemoryPool {
    /// pool
    Pool(Memory),
    /// token (of a driver-managed buffer, `IDevice::allocate`)
    Token(i32),
}

/// `DataLocation`: V4 widens offset and length to 64 bits and adds `padding`, the bytes
/// after the data the device may touch (never output data).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataLocation {
    /// poolIndex
    pub pool_index: i32,
    /// offset
    pub offset: i64,
    /// length
    pub length: i64,
    /// padding
    pub padding: i64,
}

/// `RequestArgument`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestArgument {
    /// hasNoValue
    pub has_no_value: bool,
    /// location
    pub location: DataLocation,
    /// dimensions
    pub dimensions: Vec<i32>,
}

/// `Request`.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// inputs
    pub inputs: Vec<RequestArgument>,
    /// outputs
    pub outputs: Vec<RequestArgument>,
    /// pools
    pub pools: Vec<RequestMemoryPool>,
}

/// `Model`: its subgraphs are the 1.3 ones (an operand's location has no padding: it must
/// be 0 in an Operand); its pools are V4 memories.
#[derive(Clone, Debug, Default)]
pub struct Model {
    /// main
    pub main: Subgraph,
    /// referenced
    pub referenced: Vec<Subgraph>,
    /// operandValues
    pub operand_values: Vec<u8>,
    /// pools
    pub pools: Vec<Memory>,
    /// relaxComputationFloat32toFloat16
    pub relax_computation_float32_to_float16: bool,
    /// extensionNameToPrefix
    pub extension_name_to_prefix: Vec<ExtensionNameAndPrefix>,
}

/// `Timing`, in nanoseconds; -1 when not measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// timeOnDeviceNs
    pub time_on_device_ns: i64,
    /// timeInDriverNs
    pub time_in_driver_ns: i64,
}

impl Timing {
    /// Not measured.
    pub const NONE: Timing = Timing {
        time_on_device_ns: OMITTED,
        time_in_driver_ns: OMITTED,
    };
}

/// `ExecutionResult`.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionResult {
    /// outputSufficientSize (false: OUTPUT_INSUFFICIENT_SIZE, with the shapes needed)
    pub output_sufficient_size: bool,
    /// outputShapes
    pub output_shapes: Vec<OutputShape>,
    /// timing
    pub timing: Timing,
}

/// `FencedExecutionResult`.
#[derive(Clone)]
pub struct FencedExecutionResult {
    /// callback
    pub callback: Arc<dyn IFencedExecutionCallback>,
    /// syncFence (`None`: the execution was done when the call returned)
    pub sync_fence: Option<ParcelFileDescriptor>,
}

/// What `IFencedExecutionCallback::getExecutionInfo` gives: its return value and its two
/// out parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecutionInfo {
    /// The execution's status.
    pub status: ErrorStatus,
    /// timingLaunched
    pub timing_launched: Timing,
    /// timingFenced
    pub timing_fenced: Timing,
}

/// `TokenValuePair`: a vendor hint, `token` = extension prefix << 16 | hint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenValuePair {
    /// token
    pub token: i32,
    /// value
    pub value: Vec<u8>,
}

/// `ExecutionConfig`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionConfig {
    /// measureTiming
    pub measure_timing: bool,
    /// loopTimeoutDurationNs (-1: the default)
    pub loop_timeout_duration_ns: i64,
    /// executionHints
    pub execution_hints: Vec<TokenValuePair>,
    /// extensionNameToPrefix (of the hints' tokens)
    pub extension_name_to_prefix: Vec<ExtensionNameAndPrefix>,
}

impl Default for ExecutionConfig {
    /// No timing, the default loop timeout, no hints.
    fn default() -> Self {
        ExecutionConfig {
            measure_timing: false,
            loop_timeout_duration_ns: OMITTED,
            execution_hints: Vec::new(),
            extension_name_to_prefix: Vec::new(),
        }
    }
}

/// `PrepareModelConfig`.
#[derive(Clone, Debug)]
pub struct PrepareModelConfig {
    /// preference
    pub preference: ExecutionPreference,
    /// priority
    pub priority: Priority,
    /// deadlineNs (-1: none)
    pub deadline_ns: i64,
    /// modelCache
    pub model_cache: Vec<ParcelFileDescriptor>,
    /// dataCache
    pub data_cache: Vec<ParcelFileDescriptor>,
    /// cacheToken
    pub cache_token: [u8; BYTE_SIZE_OF_CACHE_TOKEN],
    /// compilationHints
    pub compilation_hints: Vec<TokenValuePair>,
    /// extensionNameToPrefix (of the hints' tokens)
    pub extension_name_to_prefix: Vec<ExtensionNameAndPrefix>,
}

impl Default for PrepareModelConfig {
    /// FAST_SINGLE_ANSWER, MEDIUM, no deadline, no cache, no hints.
    fn default() -> Self {
        PrepareModelConfig {
            preference: ExecutionPreference::FAST_SINGLE_ANSWER,
            priority: Priority::MEDIUM,
            deadline_ns: OMITTED,
            model_cache: Vec::new(),
            data_cache: Vec::new(),
            cache_token: [0; BYTE_SIZE_OF_CACHE_TOKEN],
            compilation_hints: Vec::new(),
            extension_name_to_prefix: Vec::new(),
        }
    }
}

/// `NumberOfCacheFiles`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NumberOfCacheFiles {
    /// numModelCache
    pub num_model_cache: i32,
    /// numDataCache
    pub num_data_cache: i32,
}

/// `DeviceBuffer`.
#[derive(Clone)]
pub struct DeviceBuffer {
    /// buffer
    pub buffer: Arc<dyn IBuffer>,
    /// token (> 0)
    pub token: i32,
}

/// `IPreparedModelParcel`.
#[derive(Clone)]
pub struct IPreparedModelParcel {
    /// preparedModel
    pub prepared_model: Option<Arc<dyn IPreparedModel>>,
}
