//! Buffer allocator and AIMapper v5 mapper over memfd.
//!
//! * [`Allocator`] turns a [`BufferDescriptorInfo`] into raw [`NativeHandle`]s:
//!   two sealed memfds (pixels; shared metadata + reserved region) plus ints
//!   (magic, version, geometry, unique id) — see [`handle`] for the layout.
//! * [`Mapper`] implements the 15 AIMapper v5 functions with their exact
//!   error codes over a process-wide import registry.
//! * [`ffi`] exports the stable-C ABI (`AIMapper_loadIMapper`, version
//!   symbols, the `AIMapper` table, `vnpu_gralloc_allocate`); the C header is
//!   `include/vnpu_mapper.h`.
//! * [`strict`] is the opt-in strict-lock mode (userfaultfd write protection).

pub mod allocator;
pub mod error;
pub mod fence;
pub mod ffi;
pub mod format;
pub mod handle;
pub mod mapper;
pub mod metadata;
mod shared;
pub mod strict;

pub use allocator::{AllocationResult, Allocator, BufferDescriptorInfo};
pub use error::{AIMapperError, AllocError, AllocationErrorCode, DecodeError, MapperError};
pub use fence::Fence;
pub use format::{pixel_format, usage};
pub use handle::{native_handle_t, NativeHandle, RawHandle};
pub use mapper::{BufferHandle, BufferInfo, Mapper};
pub use metadata::{
    MetadataType, MetadataTypeDescription, PlaneLayout, PlaneLayoutComponent, Rect,
    StandardMetadata, StandardMetadataType,
};
pub use shared::{MAX_RESERVED, META_HEADER_SIZE};
