//! NN HAL 1.3 types (`android.hardware.neuralnetworks@1.0..1.3::types.hal`) as plain Rust
//! values.
//!
//! Enumerations that arrive from a client are *open*: they are newtypes over the wire
//! integer so that an out-of-range value can be represented, carried to the validator and
//! rejected with INVALID_ARGUMENT instead of failing to decode.

use std::fmt;
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// Declares an open enum: a newtype over `i32` with named associated constants, a
/// `name()`/`from_name()` pair and a list of all named values.
macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $value:expr ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
        pub struct $name(pub i32);

        impl $name {
            $( $(#[$vmeta])* pub const $variant: $name = $name($value); )+

            /// Every named value, in declaration order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant ),+ ];

            /// The HAL name of a known value (`None` for an unnamed wire value).
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( v if v == $value => Some(stringify!($variant)), )+
                    _ => None,
                }
            }

            /// The value with this HAL name, if any (exact, case-sensitive).
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $( stringify!($variant) => Some($name::$variant), )+
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "{}({})", stringify!($name), self.0),
                }
            }
        }
    };
}

open_enum! {
    /// `OperandType` (1.3). Values above 0xFFFF are extension types: the high 16 bits are
    /// the prefix declared in `Model::extension_name_to_prefix`, the low 16 bits the type.
    OperandType {
        FLOAT32 = 0,
        INT32 = 1,
        UINT32 = 2,
        TENSOR_FLOAT32 = 3,
        TENSOR_INT32 = 4,
        TENSOR_QUANT8_ASYMM = 5,
        BOOL = 6,
        TENSOR_QUANT16_SYMM = 7,
        TENSOR_FLOAT16 = 8,
        TENSOR_BOOL8 = 9,
        FLOAT16 = 10,
        TENSOR_QUANT8_SYMM_PER_CHANNEL = 11,
        TENSOR_QUANT16_ASYMM = 12,
        TENSOR_QUANT8_SYMM = 13,
        TENSOR_QUANT8_ASYMM_SIGNED = 14,
        SUBGRAPH = 15,
        OEM = 10000,
        TENSOR_OEM_BYTE = 10001,
    }
}

/// Highest fundamental operand type value.
pub const OPERAND_TYPE_FUNDAMENTAL_MAX: i32 = 15;
/// Highest fundamental operation type value.
pub const OPERATION_TYPE_FUNDAMENTAL_MAX: i32 = 101;
/// Largest non-extension enum value (`OperandTypeRange::BASE_MAX`, `OperationTypeRange::BASE_MAX`).
pub const TYPE_BASE_MAX: i32 = 0xFFFF;
/// `ExtensionTypeEncoding::HIGH_BITS_PREFIX`.
pub const EXTENSION_HIGH_BITS_PREFIX: u32 = 16;
/// `ExtensionTypeEncoding::LOW_BITS_TYPE`.
pub const EXTENSION_LOW_BITS_TYPE: u32 = 16;

/// Split a type value into (extension prefix, type within the extension) if it is an
/// extension value (non-zero prefix: above BASE_MAX as an unsigned 32-bit value, so
/// prefixes 0x8000 and up, whose values are negative as `i32`, count), else `None`.
pub fn extension_parts(value: i32) -> Option<(u16, u16)> {
    let v = value as u32;
    if v > TYPE_BASE_MAX as u32 {
        Some(((v >> EXTENSION_LOW_BITS_TYPE) as u16, (v & 0xFFFF) as u16))
    } else {
        None
    }
}

impl OperandType {
    /// A fundamental (0..=15) or OEM type.
    pub fn is_known(self) -> bool {
        (0..=OPERAND_TYPE_FUNDAMENTAL_MAX).contains(&self.0)
            || self == Self::OEM
            || self == Self::TENSOR_OEM_BYTE
    }

    /// An extension type (non-zero prefix in the high 16 bits).
    pub fn is_extension(self) -> bool {
        extension_parts(self.0).is_some()
    }

    /// A non-extension tensor type.
    pub fn is_tensor(self) -> bool {
        matches!(
            self,
            Self::TENSOR_FLOAT32
                | Self::TENSOR_INT32
                | Self::TENSOR_QUANT8_ASYMM
                | Self::TENSOR_QUANT16_SYMM
                | Self::TENSOR_FLOAT16
                | Self::TENSOR_BOOL8
                | Self::TENSOR_QUANT8_SYMM_PER_CHANNEL
                | Self::TENSOR_QUANT16_ASYMM
                | Self::TENSOR_QUANT8_SYMM
                | Self::TENSOR_QUANT8_ASYMM_SIGNED
                | Self::TENSOR_OEM_BYTE
        )
    }

    /// A non-extension scalar type (including SUBGRAPH and OEM), which must have rank 0.
    pub fn is_scalar(self) -> bool {
        matches!(
            self,
            Self::FLOAT32
                | Self::INT32
                | Self::UINT32
                | Self::BOOL
                | Self::FLOAT16
                | Self::SUBGRAPH
                | Self::OEM
        )
    }

    /// Bytes per element (per value for scalars); `None` for SUBGRAPH, OEM, extension and
    /// unknown types.
    pub fn element_size(self) -> Option<usize> {
        Some(match self {
            Self::FLOAT32
            | Self::INT32
            | Self::UINT32
            | Self::TENSOR_FLOAT32
            | Self::TENSOR_INT32 => 4,
            Self::TENSOR_QUANT16_SYMM
            | Self::TENSOR_FLOAT16
            | Self::FLOAT16
            | Self::TENSOR_QUANT16_ASYMM => 2,
            Self::TENSOR_QUANT8_ASYMM
            | Self::BOOL
            | Self::TENSOR_BOOL8
            | Self::TENSOR_QUANT8_SYMM_PER_CHANNEL
            | Self::TENSOR_QUANT8_SYMM
            | Self::TENSOR_QUANT8_ASYMM_SIGNED
            | Self::TENSOR_OEM_BYTE => 1,
            _ => return None,
        })
    }

    /// A quantized tensor type (scale must be > 0, except per-channel which carries its own).
    pub fn is_quantized(self) -> bool {
        matches!(
            self,
            Self::TENSOR_QUANT8_ASYMM
                | Self::TENSOR_QUANT16_SYMM
                | Self::TENSOR_QUANT16_ASYMM
                | Self::TENSOR_QUANT8_SYMM
                | Self::TENSOR_QUANT8_ASYMM_SIGNED
                | Self::TENSOR_QUANT8_SYMM_PER_CHANNEL
        )
    }
}

open_enum! {
    /// `OperationType` (1.3): 0..=101 plus OEM_OPERATION. Values above 0xFFFF are extension
    /// operations.
    OperationType {
        ADD = 0,
        AVERAGE_POOL_2D = 1,
        CONCATENATION = 2,
        CONV_2D = 3,
        DEPTHWISE_CONV_2D = 4,
        DEPTH_TO_SPACE = 5,
        DEQUANTIZE = 6,
        EMBEDDING_LOOKUP = 7,
        FLOOR = 8,
        FULLY_CONNECTED = 9,
        HASHTABLE_LOOKUP = 10,
        L2_NORMALIZATION = 11,
        L2_POOL_2D = 12,
        LOCAL_RESPONSE_NORMALIZATION = 13,
        LOGISTIC = 14,
        LSH_PROJECTION = 15,
        LSTM = 16,
        MAX_POOL_2D = 17,
        MUL = 18,
        RELU = 19,
        RELU1 = 20,
        RELU6 = 21,
        RESHAPE = 22,
        RESIZE_BILINEAR = 23,
        RNN = 24,
        SOFTMAX = 25,
        SPACE_TO_DEPTH = 26,
        SVDF = 27,
        TANH = 28,
        BATCH_TO_SPACE_ND = 29,
        DIV = 30,
        MEAN = 31,
        PAD = 32,
        SPACE_TO_BATCH_ND = 33,
        SQUEEZE = 34,
        STRIDED_SLICE = 35,
        SUB = 36,
        TRANSPOSE = 37,
        ABS = 38,
        ARGMAX = 39,
        ARGMIN = 40,
        AXIS_ALIGNED_BBOX_TRANSFORM = 41,
        BIDIRECTIONAL_SEQUENCE_LSTM = 42,
        BIDIRECTIONAL_SEQUENCE_RNN = 43,
        BOX_WITH_NMS_LIMIT = 44,
        CAST = 45,
        CHANNEL_SHUFFLE = 46,
        DETECTION_POSTPROCESSING = 47,
        EQUAL = 48,
        EXP = 49,
        EXPAND_DIMS = 50,
        GATHER = 51,
        GENERATE_PROPOSALS = 52,
        GREATER = 53,
        GREATER_EQUAL = 54,
        GROUPED_CONV_2D = 55,
        HEATMAP_MAX_KEYPOINT = 56,
        INSTANCE_NORMALIZATION = 57,
        LESS = 58,
        LESS_EQUAL = 59,
        LOG = 60,
        LOGICAL_AND = 61,
        LOGICAL_NOT = 62,
        LOGICAL_OR = 63,
        LOG_SOFTMAX = 64,
        MAXIMUM = 65,
        MINIMUM = 66,
        NEG = 67,
        NOT_EQUAL = 68,
        PAD_V2 = 69,
        POW = 70,
        PRELU = 71,
        QUANTIZE = 72,
        QUANTIZED_16BIT_LSTM = 73,
        RANDOM_MULTINOMIAL = 74,
        REDUCE_ALL = 75,
        REDUCE_ANY = 76,
        REDUCE_MAX = 77,
        REDUCE_MIN = 78,
        REDUCE_PROD = 79,
        REDUCE_SUM = 80,
        ROI_ALIGN = 81,
        ROI_POOLING = 82,
        RSQRT = 83,
        SELECT = 84,
        SIN = 85,
        SLICE = 86,
        SPLIT = 87,
        SQRT = 88,
        TILE = 89,
        TOPK_V2 = 90,
        TRANSPOSE_CONV_2D = 91,
        UNIDIRECTIONAL_SEQUENCE_LSTM = 92,
        UNIDIRECTIONAL_SEQUENCE_RNN = 93,
        RESIZE_NEAREST_NEIGHBOR = 94,
        QUANTIZED_LSTM = 95,
        IF = 96,
        WHILE = 97,
        ELU = 98,
        HARD_SWISH = 99,
        FILL = 100,
        RANK = 101,
        OEM_OPERATION = 10000,
    }
}

impl OperationType {
    /// BATCH_MATMUL (AIDL V2 only; not a HAL 1.3 operation).
    pub const BATCH_MATMUL: OperationType = OperationType(102);
    /// PACK (AIDL V2 only).
    pub const PACK: OperationType = OperationType(103);
    /// MIRROR_PAD (AIDL V3 only).
    pub const MIRROR_PAD: OperationType = OperationType(104);
    /// REVERSE (AIDL V3 only).
    pub const REVERSE: OperationType = OperationType(105);
    /// DENSIFY (experimental, AIDL only).
    pub const DENSIFY: OperationType = OperationType(20000);

    /// Like [`OperationType::from_name`], also accepting the AIDL-only operations (which a
    /// HAL 1.3 model cannot contain: `validate_model` rejects them).
    pub fn from_name_any(name: &str) -> Option<Self> {
        Self::from_name(name).or(match name {
            "BATCH_MATMUL" => Some(Self::BATCH_MATMUL),
            "PACK" => Some(Self::PACK),
            "MIRROR_PAD" => Some(Self::MIRROR_PAD),
            "REVERSE" => Some(Self::REVERSE),
            "DENSIFY" => Some(Self::DENSIFY),
            _ => None,
        })
    }

    /// The name of a HAL 1.3 or AIDL-only operation.
    pub fn name_any(self) -> Option<&'static str> {
        self.name().or(match self {
            Self::BATCH_MATMUL => Some("BATCH_MATMUL"),
            Self::PACK => Some("PACK"),
            Self::MIRROR_PAD => Some("MIRROR_PAD"),
            Self::REVERSE => Some("REVERSE"),
            Self::DENSIFY => Some("DENSIFY"),
            _ => None,
        })
    }

    /// A fundamental (0..=101) or OEM operation.
    pub fn is_known(self) -> bool {
        (0..=OPERATION_TYPE_FUNDAMENTAL_MAX).contains(&self.0) || self == Self::OEM_OPERATION
    }

    /// The level that introduced a non-extension operation (`None`: not an operation
    /// at any level): 0..=101 and OEM_OPERATION by HAL 1.3, BATCH_MATMUL and PACK by AIDL
    /// V2 (feature level 6), MIRROR_PAD and REVERSE by AIDL V3 (feature level 7), DENSIFY
    /// only with NNAPI's experimental features.
    pub fn introduced(self) -> Option<HalVersion> {
        match self {
            t if t.is_known() => Some(HalVersion::V1_3),
            Self::BATCH_MATMUL | Self::PACK => Some(HalVersion::AidlV2),
            Self::MIRROR_PAD | Self::REVERSE => Some(HalVersion::AidlV3),
            Self::DENSIFY => Some(HalVersion::Experimental),
            _ => None,
        }
    }

    /// An operation an interface at `level` knows (extension operations aside).
    pub fn is_known_at(self, level: HalVersion) -> bool {
        self.introduced().is_some_and(|v| v <= level)
    }

    /// An extension operation (non-zero prefix in the high 16 bits).
    pub fn is_extension(self) -> bool {
        extension_parts(self.0).is_some()
    }
}

open_enum! {
    /// `OperandLifeTime` (1.3).
    OperandLifeTime {
        TEMPORARY_VARIABLE = 0,
        SUBGRAPH_INPUT = 1,
        SUBGRAPH_OUTPUT = 2,
        CONSTANT_COPY = 3,
        CONSTANT_REFERENCE = 4,
        NO_VALUE = 5,
        SUBGRAPH = 6,
    }
}

open_enum! {
    /// `ExecutionPreference` (1.1).
    ExecutionPreference {
        LOW_POWER = 0,
        FAST_SINGLE_ANSWER = 1,
        SUSTAINED_SPEED = 2,
    }
}

impl Default for ExecutionPreference {
    fn default() -> Self {
        Self::FAST_SINGLE_ANSWER
    }
}

open_enum! {
    /// `Priority` (1.3).
    Priority {
        LOW = 0,
        MEDIUM = 1,
        HIGH = 2,
    }
}

impl Default for Priority {
    fn default() -> Self {
        Self::MEDIUM
    }
}

open_enum! {
    /// `MeasureTiming` (1.2).
    MeasureTiming {
        NO = 0,
        YES = 1,
    }
}

impl Default for MeasureTiming {
    fn default() -> Self {
        Self::NO
    }
}

/// `ErrorStatus` (1.3).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ErrorStatus {
    /// NONE
    None = 0,
    /// DEVICE_UNAVAILABLE
    DeviceUnavailable = 1,
    /// GENERAL_FAILURE
    GeneralFailure = 2,
    /// OUTPUT_INSUFFICIENT_SIZE
    OutputInsufficientSize = 3,
    /// INVALID_ARGUMENT
    InvalidArgument = 4,
    /// MISSED_DEADLINE_TRANSIENT
    MissedDeadlineTransient = 5,
    /// MISSED_DEADLINE_PERSISTENT
    MissedDeadlinePersistent = 6,
    /// RESOURCE_EXHAUSTED_TRANSIENT
    ResourceExhaustedTransient = 7,
    /// RESOURCE_EXHAUSTED_PERSISTENT
    ResourceExhaustedPersistent = 8,
}

impl ErrorStatus {
    /// The HAL name, e.g. `INVALID_ARGUMENT`.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "NONE",
            Self::DeviceUnavailable => "DEVICE_UNAVAILABLE",
            Self::GeneralFailure => "GENERAL_FAILURE",
            Self::OutputInsufficientSize => "OUTPUT_INSUFFICIENT_SIZE",
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::MissedDeadlineTransient => "MISSED_DEADLINE_TRANSIENT",
            Self::MissedDeadlinePersistent => "MISSED_DEADLINE_PERSISTENT",
            Self::ResourceExhaustedTransient => "RESOURCE_EXHAUSTED_TRANSIENT",
            Self::ResourceExhaustedPersistent => "RESOURCE_EXHAUSTED_PERSISTENT",
        }
    }

    /// The status for a wire value, if it is one.
    pub fn from_i32(v: i32) -> Option<Self> {
        Some(match v {
            0 => Self::None,
            1 => Self::DeviceUnavailable,
            2 => Self::GeneralFailure,
            3 => Self::OutputInsufficientSize,
            4 => Self::InvalidArgument,
            5 => Self::MissedDeadlineTransient,
            6 => Self::MissedDeadlinePersistent,
            7 => Self::ResourceExhaustedTransient,
            8 => Self::ResourceExhaustedPersistent,
            _ => return None,
        })
    }
}

impl fmt::Display for ErrorStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `DeviceType` (1.2).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum DeviceType {
    /// OTHER
    Other = 1,
    /// CPU
    Cpu = 2,
    /// GPU
    Gpu = 3,
    /// ACCELERATOR
    Accelerator = 4,
}

/// `DeviceStatus` (1.0).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum DeviceStatus {
    /// AVAILABLE
    Available = 0,
    /// BUSY
    Busy = 1,
    /// OFFLINE
    Offline = 2,
    /// UNKNOWN
    Unknown = 3,
}

/// `Constant::BYTE_SIZE_OF_CACHE_TOKEN`.
pub const BYTE_SIZE_OF_CACHE_TOKEN: usize = 32;
/// `Constant::MAX_NUMBER_OF_CACHE_FILES`.
pub const MAX_NUMBER_OF_CACHE_FILES: usize = 32;
/// `LoopTimeoutDurationNs::DEFAULT` (2 s).
pub const LOOP_TIMEOUT_DEFAULT_NS: u64 = 2_000_000_000;
/// `LoopTimeoutDurationNs::MAXIMUM` (15 s).
pub const LOOP_TIMEOUT_MAXIMUM_NS: u64 = 15_000_000_000;

/// `DataLocation`: where an operand's or argument's bytes live.
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DataLocation {
    /// Index into the model's or request's pools.
    pub pool_index: u32,
    /// Byte offset in the pool (for SUBGRAPH operands: the index into `Model::referenced`).
    pub offset: u32,
    /// Length in bytes.
    pub length: u32,
}

/// `SymmPerChannelQuantParams` (1.2).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SymmPerChannelQuantParams {
    /// One scale per channel.
    pub scales: Vec<f32>,
    /// The channel dimension.
    pub channel_dim: u32,
}

/// `Operand.ExtraParams` (1.2 safe_union).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ExtraParams {
    /// none
    #[default]
    None,
    /// channelQuant
    ChannelQuant(SymmPerChannelQuantParams),
    /// extension
    Extension(Vec<u8>),
}

/// `Operand` (1.3).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    /// Element or scalar type.
    pub r#type: OperandType,
    /// Dimensions; empty for scalars or unknown rank, 0 for an unknown dimension.
    pub dimensions: Vec<u32>,
    /// How many operation inputs read this operand.
    pub number_of_consumers: u32,
    /// Quantization scale.
    pub scale: f32,
    /// Quantization zero point.
    pub zero_point: i32,
    /// Lifetime.
    pub lifetime: OperandLifeTime,
    /// Where a constant's bytes live.
    pub location: DataLocation,
    /// Per-channel quantization or extension parameters.
    pub extra_params: ExtraParams,
}

impl Default for Operand {
    fn default() -> Self {
        Self {
            r#type: OperandType::TENSOR_FLOAT32,
            dimensions: Vec::new(),
            number_of_consumers: 0,
            scale: 0.0,
            zero_point: 0,
            lifetime: OperandLifeTime::TEMPORARY_VARIABLE,
            location: DataLocation::default(),
            extra_params: ExtraParams::None,
        }
    }
}

/// `Operation` (1.3).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// Operation type.
    pub r#type: OperationType,
    /// Operand indexes read.
    pub inputs: Vec<u32>,
    /// Operand indexes written.
    pub outputs: Vec<u32>,
}

/// `Subgraph` (1.3).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Subgraph {
    /// Operands.
    pub operands: Vec<Operand>,
    /// Operations, in execution order.
    pub operations: Vec<Operation>,
    /// Indexes of SUBGRAPH_INPUT operands, in argument order.
    pub input_indexes: Vec<u32>,
    /// Indexes of SUBGRAPH_OUTPUT operands, in argument order.
    pub output_indexes: Vec<u32>,
}

/// A `native_handle_t`: file descriptors plus integers. Fds are shared (`Arc`) so that a
/// handle can be cloned without duplicating descriptors.
#[derive(Clone, Debug, Default)]
pub struct NativeHandle {
    /// The descriptors.
    pub fds: Vec<Arc<OwnedFd>>,
    /// The integers.
    pub ints: Vec<i32>,
}

impl PartialEq for NativeHandle {
    /// Equal when the same descriptor numbers and integers are held.
    fn eq(&self, other: &Self) -> bool {
        self.ints == other.ints
            && self.fds.len() == other.fds.len()
            && self
                .fds
                .iter()
                .zip(&other.fds)
                .all(|(a, b)| a.as_raw_fd() == b.as_raw_fd())
    }
}

/// `hidl_memory`: a named native handle and a size.
#[derive(Clone, Debug, PartialEq)]
pub struct Memory {
    /// "ashmem", "mmap_fd", "hardware_buffer_blob" or "hardware_buffer".
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// The handle.
    pub handle: NativeHandle,
}

/// Name of a memfd/ashmem pool.
pub const MEMORY_ASHMEM: &str = "ashmem";
/// Name of an mmap'able fd pool (ints: prot, offset low, offset high).
pub const MEMORY_MMAP_FD: &str = "mmap_fd";
/// Name of a BLOB AHardwareBuffer pool.
pub const MEMORY_HARDWARE_BUFFER_BLOB: &str = "hardware_buffer_blob";
/// Name of a non-BLOB AHardwareBuffer pool.
pub const MEMORY_HARDWARE_BUFFER: &str = "hardware_buffer";

impl Memory {
    /// A new zero-filled "ashmem" memory of `size` bytes (a memfd, as on Android's ashmem).
    /// Like an ashmem region, its size is fixed: the memfd is sealed against shrinking
    /// and growing, so a device mapping of it can never fault.
    pub fn ashmem(size: u64) -> std::io::Result<Memory> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::memfd::{memfd_create, MFdFlags};
        let fd = memfd_create(
            c"vnpu-ashmem",
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )
        .map_err(std::io::Error::from)?;
        let len = i64::try_from(size)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        nix::unistd::ftruncate(&fd, len).map_err(std::io::Error::from)?;
        let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).map_err(std::io::Error::from)?;
        Ok(Memory {
            name: MEMORY_ASHMEM.to_string(),
            size,
            handle: NativeHandle {
                fds: vec![Arc::new(fd)],
                ints: Vec::new(),
            },
        })
    }

    /// A new "ashmem" memory holding a copy of `bytes`.
    pub fn ashmem_with(bytes: &[u8]) -> std::io::Result<Memory> {
        let mem = Self::ashmem(bytes.len() as u64)?;
        if !bytes.is_empty() {
            let fd = mem
                .fd()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?
                .try_clone()?;
            let mut file = std::fs::File::from(fd);
            file.seek(SeekFrom::Start(0))?;
            file.write_all(bytes)?;
        }
        Ok(mem)
    }

    /// The first descriptor of the handle, if any.
    pub fn fd(&self) -> Option<&OwnedFd> {
        self.handle.fds.first().map(|a| a.as_ref())
    }
}

/// `Model.ExtensionNameAndPrefix` (1.2).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtensionNameAndPrefix {
    /// Extension name, e.g. "com.example.fibonacci".
    pub name: String,
    /// The prefix used in this model's type values for that extension.
    pub prefix: u16,
}

/// A vendor extension's operand type (`Extension::OperandTypeInformation`).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtensionOperandTypeInformation {
    /// The type within the extension (the low 16 bits).
    pub r#type: u16,
    /// A tensor type (else a scalar).
    pub is_tensor: bool,
    /// Bytes per element (per value for a scalar).
    pub byte_size: u32,
}

/// A vendor extension (`Extension`), as `getSupportedExtensions` reports it.
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extension {
    /// Its name, e.g. "com.example.fibonacci".
    pub name: String,
    /// The operand types it declares.
    pub operand_types: Vec<ExtensionOperandTypeInformation>,
}

/// `Model` (1.3).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Model {
    /// The main subgraph.
    pub main: Subgraph,
    /// Subgraphs referenced by SUBGRAPH operands (IF/WHILE bodies).
    pub referenced: Vec<Subgraph>,
    /// CONSTANT_COPY bytes.
    pub operand_values: Vec<u8>,
    /// CONSTANT_REFERENCE pools.
    #[cfg_attr(feature = "service", serde(skip))]
    pub pools: Vec<Memory>,
    /// Float32 may be computed with float16 range and precision.
    pub relax_computation_float32_to_float16: bool,
    /// Extension prefixes used by this model.
    pub extension_name_to_prefix: Vec<ExtensionNameAndPrefix>,
}

impl Model {
    /// The subgraph with index 0 = main, i = referenced[i - 1].
    pub fn subgraph(&self, index: usize) -> Option<&Subgraph> {
        if index == 0 {
            Some(&self.main)
        } else {
            self.referenced.get(index - 1)
        }
    }
}

/// `RequestArgument` (1.0).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestArgument {
    /// The argument is omitted (optional input, or output not wanted).
    pub has_no_value: bool,
    /// Where the data is in the request's pools.
    pub location: DataLocation,
    /// Dimensions overriding the model's (empty: as in the model).
    pub dimensions: Vec<u32>,
}

/// `Request.MemoryPool` (1.3 safe_union).
#[derive(Clone, Debug, PartialEq)]
pub enum RequestMemoryPool {
    /// hidlMemory
    HidlMemory(Memory),
    /// token of a driver-managed buffer (IDevice::allocate)
    Token(u32),
}

/// `Request` (1.3).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    /// One per main input.
    pub inputs: Vec<RequestArgument>,
    /// One per main output.
    pub outputs: Vec<RequestArgument>,
    /// Pools.
    #[cfg_attr(feature = "service", serde(skip))]
    pub pools: Vec<RequestMemoryPool>,
}

/// `OutputShape` (1.2).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputShape {
    /// Actual dimensions.
    pub dimensions: Vec<u32>,
    /// Whether the provided buffer was large enough.
    pub is_sufficient: bool,
}

/// `Timing` (1.2), in microseconds; `u64::MAX` means not measured.
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Time on the device.
    pub time_on_device: u64,
    /// Time in the driver (including device time).
    pub time_in_driver: u64,
}

impl Timing {
    /// No timing information: both fields `u64::MAX`.
    pub const NONE: Timing = Timing {
        time_on_device: u64::MAX,
        time_in_driver: u64::MAX,
    };
}

impl Default for Timing {
    fn default() -> Self {
        Self::NONE
    }
}

/// `PerformanceInfo` (1.0): relative to the CPU, lower is better.
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct PerformanceInfo {
    /// Execution time ratio.
    pub exec_time: f32,
    /// Power usage ratio.
    pub power_usage: f32,
}

/// `Capabilities.OperandPerformance` (1.3).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OperandPerformance {
    /// Operand type.
    pub r#type: OperandType,
    /// Its performance.
    pub info: PerformanceInfo,
}

/// `Capabilities` (1.3).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Capabilities {
    /// relaxedFloat32toFloat16PerformanceScalar
    pub relaxed_float32_to_float16_performance_scalar: PerformanceInfo,
    /// relaxedFloat32toFloat16PerformanceTensor
    pub relaxed_float32_to_float16_performance_tensor: PerformanceInfo,
    /// Per operand type, sorted by type, no SUBGRAPH entry.
    pub operand_performance: Vec<OperandPerformance>,
    /// ifPerformance
    pub if_performance: PerformanceInfo,
    /// whilePerformance
    pub while_performance: PerformanceInfo,
}

/// Nanoseconds on CLOCK_MONOTONIC (the clock of `std::chrono::steady_clock` on Android).
pub fn now_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_MONOTONIC).map_or(0, |ts| {
        (ts.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec() as u64)
    })
}

/// `OptionalTimePoint` (1.3): a deadline in nanoseconds on CLOCK_MONOTONIC, or none.
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptionalTimePoint(pub Option<u64>);

impl OptionalTimePoint {
    /// No deadline.
    pub const NONE: OptionalTimePoint = OptionalTimePoint(None);

    /// Nanoseconds on CLOCK_MONOTONIC now.
    pub fn now_ns() -> u64 {
        now_ns()
    }

    /// A deadline `ns` nanoseconds from now.
    pub fn after_ns(ns: u64) -> Self {
        OptionalTimePoint(Some(now_ns().saturating_add(ns)))
    }

    /// Whether the deadline (if any) has passed.
    pub fn has_passed(self) -> bool {
        matches!(self.0, Some(t) if now_ns() >= t)
    }
}

/// `OptionalTimeoutDuration` (1.3): a duration in nanoseconds, or none.
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptionalTimeoutDuration(pub Option<u64>);

/// `BufferRole` (1.3).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct BufferRole {
    /// Index into the prepared models given to allocate.
    pub model_index: u32,
    /// Index of the input or output.
    pub io_index: u32,
    /// Frequency of use, in (0, 1].
    pub frequency: f32,
}

/// `BufferDesc` (1.3).
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct BufferDesc {
    /// Dimensions (may be partially unknown).
    pub dimensions: Vec<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_known_from_their_level_on() {
        use HalVersion::*;
        assert!(OperationType::RANK.is_known_at(V1_3));
        for (op, level) in [
            (OperationType::BATCH_MATMUL, AidlV2),
            (OperationType::PACK, AidlV2),
            (OperationType::MIRROR_PAD, AidlV3),
            (OperationType::REVERSE, AidlV3),
            (OperationType::DENSIFY, Experimental),
        ] {
            assert_eq!(op.introduced(), Some(level), "{op}");
            assert!(!op.is_known(), "{op} is no HAL 1.3 operation");
            assert!(op.is_known_at(level) && op.is_known_at(Experimental));
            assert!(!op.is_known_at(V1_3) && !op.is_known_at(AidlV1));
        }
        assert!(!OperationType::DENSIFY.is_known_at(AidlV4));
        assert_eq!(OperationType(106).introduced(), None);
        assert!(!OperationType(20001).is_known_at(Experimental));
    }

    #[test]
    fn names_round_trip() {
        for t in OperandType::ALL {
            assert_eq!(OperandType::from_name(t.name().unwrap()), Some(*t));
        }
        assert_eq!(OperationType::ALL.len(), 103);
        for (i, t) in OperationType::ALL.iter().take(102).enumerate() {
            assert_eq!(t.0, i as i32);
            assert_eq!(OperationType::from_name(t.name().unwrap()), Some(*t));
        }
        assert_eq!(OperationType::CONV_2D.name(), Some("CONV_2D"));
        assert_eq!(OperationType(102).name(), None);
        assert_eq!(
            OperandLifeTime::from_name("NO_VALUE"),
            Some(OperandLifeTime(5))
        );
        assert_eq!(ErrorStatus::InvalidArgument.to_string(), "INVALID_ARGUMENT");
    }

    #[test]
    fn scalar_tensor_partition() {
        for t in OperandType::ALL {
            assert!(t.is_scalar() ^ t.is_tensor(), "{t}");
        }
        assert!(!OperandType(0x10001).is_scalar());
        assert_eq!(extension_parts(0x0003_0002), Some((3, 2)));
        assert_eq!(extension_parts(10001), None);
        assert_eq!(extension_parts(-1), Some((0xFFFF, 0xFFFF)));
        assert!(OperandType(i32::MIN).is_extension() && !OperandType::OEM.is_extension());
    }

    #[test]
    fn ashmem_holds_bytes() {
        use std::io::Read;
        let m = Memory::ashmem_with(&[1, 2, 3]).unwrap();
        assert_eq!(m.size, 3);
        let mut f = std::fs::File::from(m.fd().unwrap().try_clone().unwrap());
        let mut v = Vec::new();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut v).unwrap();
        assert_eq!(v, [1, 2, 3]);
        assert!(now_ns() > 0);
    }
}

/// The HAL version (NNAPI feature level) that introduced a signature, and the level an
/// interface validates models at: the HIDL 1.3 face at `V1_3`, the AIDL face at `AidlV4`
/// (or `Experimental` when the client enables experimental features). Ordered: a model is
/// valid at a level when every operand type and signature it uses is at or below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "service", derive(serde::Serialize, serde::Deserialize))]
pub enum HalVersion {
    /// NN HAL 1.0 (feature level 1).
    V1_0,
    /// NN HAL 1.1 (feature level 2).
    V1_1,
    /// NN HAL 1.2 (feature level 3).
    V1_2,
    /// NN HAL 1.3 (feature level 4).
    V1_3,
    /// AIDL NN HAL V1 (feature level 5).
    AidlV1,
    /// AIDL NN HAL V2 (feature level 6).
    AidlV2,
    /// AIDL NN HAL V3 (feature level 7).
    AidlV3,
    /// AIDL NN HAL V4 (feature level 8).
    AidlV4,
    /// NNAPI's experimental features (above every released level).
    Experimental,
}
