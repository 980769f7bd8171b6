//! Typed errors and their AIMapper / IAllocator codes.

use thiserror::Error;

/// `AIMapper_Error` codes (IMapper.h, stable-C v5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum AIMapperError {
    /// AIMAPPER_ERROR_NONE
    None = 0,
    /// AIMAPPER_ERROR_BAD_DESCRIPTOR
    BadDescriptor = 1,
    /// AIMAPPER_ERROR_BAD_BUFFER
    BadBuffer = 2,
    /// AIMAPPER_ERROR_BAD_VALUE
    BadValue = 3,
    /// AIMAPPER_ERROR_NO_RESOURCES
    NoResources = 5,
    /// AIMAPPER_ERROR_UNSUPPORTED
    Unsupported = 7,
}

impl AIMapperError {
    /// The numeric code as it crosses the C ABI.
    pub const fn code(self) -> i32 {
        self as i32
    }
}

/// Errors of the mapper. Each maps to exactly one `AIMapper_Error`; the
/// string says why, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MapperError {
    /// The handle is null, not imported, malformed or forged.
    #[error("bad buffer: {0}")]
    BadBuffer(&'static str),
    /// An argument is out of range or inconsistent with the buffer.
    #[error("bad value: {0}")]
    BadValue(&'static str),
    /// A transient resource shortage (fds, address space, fence timeout).
    #[error("no resources: {0}")]
    NoResources(&'static str),
    /// The operation or metadata type is not supported (or malformed).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
}

impl MapperError {
    /// The `AIMapper_Error` this error maps to.
    pub const fn kind(&self) -> AIMapperError {
        match self {
            MapperError::BadBuffer(_) => AIMapperError::BadBuffer,
            MapperError::BadValue(_) => AIMapperError::BadValue,
            MapperError::NoResources(_) => AIMapperError::NoResources,
            MapperError::Unsupported(_) => AIMapperError::Unsupported,
        }
    }

    /// The numeric `AIMapper_Error` code.
    pub const fn code(&self) -> i32 {
        self.kind().code()
    }
}

/// `AllocationError` of IAllocator (service-specific codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum AllocationErrorCode {
    /// BAD_DESCRIPTOR
    BadDescriptor = 0,
    /// NO_RESOURCES
    NoResources = 1,
    /// UNSUPPORTED
    Unsupported = 2,
}

/// Errors of the allocator.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AllocError {
    /// The descriptor is invalid (zero sizes, unknown usage bits, ...).
    #[error("bad descriptor: {0}")]
    BadDescriptor(&'static str),
    /// The allocation could not be satisfied right now (memfd, seals, ...).
    #[error("no resources: {0}")]
    NoResources(&'static str),
    /// The descriptor is valid but not supported by this allocator.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
}

impl AllocError {
    /// The IAllocator `AllocationError` code.
    pub const fn code(&self) -> AllocationErrorCode {
        match self {
            AllocError::BadDescriptor(_) => AllocationErrorCode::BadDescriptor,
            AllocError::NoResources(_) => AllocationErrorCode::NoResources,
            AllocError::Unsupported(_) => AllocationErrorCode::Unsupported,
        }
    }

    /// The closest `AIMapper_Error`, used by the C allocation entry point.
    pub const fn mapper_code(&self) -> AIMapperError {
        match self {
            AllocError::BadDescriptor(_) => AIMapperError::BadDescriptor,
            AllocError::NoResources(_) => AIMapperError::NoResources,
            AllocError::Unsupported(_) => AIMapperError::Unsupported,
        }
    }
}

/// Errors decoding a metadata byte string.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Fewer bytes than the encoding needs.
    #[error("short read")]
    ShortRead,
    /// The header's name or type does not match the expected type.
    #[error("header mismatch")]
    HeaderMismatch,
    /// A length or count is negative or implausible.
    #[error("bad length or count")]
    BadLength,
    /// Bytes left after the value.
    #[error("trailing bytes")]
    TrailingBytes,
    /// A string is not UTF-8.
    #[error("invalid utf-8")]
    BadUtf8,
    /// The type cannot be decoded (INVALID or unknown).
    #[error("unknown metadata type")]
    UnknownType,
}
