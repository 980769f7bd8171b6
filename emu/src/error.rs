//! Typed errors of the device model.

use thiserror::Error;

/// Shared-memory access errors.
#[derive(Debug, Error)]
pub enum MemError {
    #[error("range [{offset:#x}, +{len:#x}) is out of bounds")]
    OutOfBounds { offset: u64, len: u64 },
    #[error("offset {offset:#x} is not aligned")]
    Misaligned { offset: u64 },
    #[error("zero-length region")]
    Empty,
    #[error("os error: {0}")]
    Os(#[from] std::io::Error),
}

/// IOMMU programming and translation errors.
#[derive(Debug, Error)]
pub enum IommuError {
    #[error("iova {iova:#x} or length {len:#x} is not page-aligned or is zero")]
    Unaligned { iova: u64, len: u64 },
    #[error(
        "iova range [{iova:#x}, +{len:#x}) overlaps an existing mapping or leaves the IOVA space"
    )]
    Overlap { iova: u64, len: u64 },
    #[error("file is smaller ({size} bytes) than the mapped range end {end}")]
    FileTooSmall { size: u64, end: u64 },
    #[error("the file could shrink under the mapping (only memfds sealed with F_SEAL_SHRINK can be mapped; stage anything else)")]
    Shrinkable,
    #[error("no mapping at iova {iova:#x}")]
    NotMapped { iova: u64 },
    #[error("access [{addr:#x}, +{len:#x}) is not covered by one mapping")]
    OutOfRange { addr: u64, len: u64 },
    #[error("access at {addr:#x} needs {need} permission")]
    Permission { addr: u64, need: &'static str },
    #[error(transparent)]
    Mem(#[from] MemError),
}

/// Program validation errors (the device rejects the program before running any of it).
#[derive(Debug, Error)]
pub enum ProgramError {
    #[error("program truncated: {0}")]
    Truncated(&'static str),
    #[error("bad program header: {0}")]
    Header(String),
    #[error("tensor {index}: {reason}")]
    Tensor { index: u32, reason: String },
    #[error("op {index}: {reason}")]
    Op { index: u32, reason: String },
}
