//! The allocator: descriptors in, sealed memfd-backed native handles out.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::AllocError;
use crate::format::{
    compute_layout, format_info, pixel_format, usage, usage_is_known, Layout, LayoutError,
    PAGE_SIZE,
};
use crate::handle::{idx, join64, split64, NativeHandle, HANDLE_MAGIC, HANDLE_VERSION, NUM_INTS};
use crate::metadata::ExtendableType;
use crate::shared::{sealed_memfd, Mapping, MetaMapping, MAX_RESERVED, META_HEADER_SIZE};

/// `BufferDescriptorInfo` of IAllocator V2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferDescriptorInfo {
    /// Debug name (at most 127 bytes are kept, cut at the first NUL).
    pub name: String,
    /// Width in pixels (bytes for BLOB).
    pub width: i32,
    /// Height in pixels (1 for BLOB).
    pub height: i32,
    /// Layers (only 1 is supported).
    pub layer_count: i32,
    /// PixelFormat.
    pub format: i32,
    /// BufferUsage bits.
    pub usage: u64,
    /// Bytes of the reserved region.
    pub reserved_size: i64,
    /// Additional options (none are supported).
    pub additional_options: Vec<ExtendableType>,
}

impl BufferDescriptorInfo {
    /// A descriptor with no name, one layer, no reserved region.
    pub fn new(width: i32, height: i32, format: i32, usage: u64) -> Self {
        Self {
            name: String::new(),
            width,
            height,
            layer_count: 1,
            format,
            usage,
            reserved_size: 0,
            additional_options: Vec::new(),
        }
    }

    /// Sets the name.
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Sets the reserved size.
    pub fn with_reserved(mut self, reserved: i64) -> Self {
        self.reserved_size = reserved;
        self
    }
}

/// `AllocationResult`: the stride (pixels) and one raw handle per buffer.
#[derive(Debug)]
pub struct AllocationResult {
    /// Stride in pixels, shared by all buffers.
    pub stride: u32,
    /// Raw (not imported) handles; the caller owns them.
    pub buffers: Vec<NativeHandle>,
}

/// The validated, typed description of a buffer (from a descriptor or from
/// handle ints). Every int of a handle is derived from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Desc {
    pub id: u64,
    pub width: i32,
    pub height: i32,
    pub layer_count: i32,
    pub format: i32,
    pub usage: u64,
    pub layout: Layout,
    pub meta_size: u64,
    pub reserved_size: u64,
}

fn page_align(v: u64) -> u64 {
    v.div_ceil(PAGE_SIZE) * PAGE_SIZE
}

/// Checks the parts of a descriptor that do not depend on memory.
pub(crate) fn validate(
    width: i32,
    height: i32,
    layer_count: i32,
    format: i32,
    usage_bits: u64,
    reserved: i64,
) -> Result<(Layout, u64), AllocError> {
    if width <= 0 || height <= 0 {
        return Err(AllocError::BadDescriptor(
            "width and height must be positive",
        ));
    }
    if layer_count <= 0 {
        return Err(AllocError::BadDescriptor("layerCount must be positive"));
    }
    if reserved < 0 {
        return Err(AllocError::BadDescriptor("negative reservedSize"));
    }
    if !usage_is_known(usage_bits) {
        return Err(AllocError::BadDescriptor("unknown usage bits"));
    }
    if usage_bits & usage::PROTECTED != 0 {
        return Err(AllocError::Unsupported(
            "PROTECTED buffers cannot be backed by memfd",
        ));
    }
    if format == pixel_format::IMPLEMENTATION_DEFINED && usage_bits & usage::CPU_MASK != 0 {
        return Err(AllocError::Unsupported(
            "IMPLEMENTATION_DEFINED with CPU usage",
        ));
    }
    if layer_count != 1 {
        return Err(AllocError::Unsupported("only one layer is supported"));
    }
    if format_info(format).is_none() {
        return Err(AllocError::Unsupported("pixel format not supported"));
    }
    if reserved as u64 > MAX_RESERVED {
        return Err(AllocError::Unsupported("reservedSize too large"));
    }
    let layout = compute_layout(format, width, height).map_err(|e| match e {
        LayoutError::Invalid => AllocError::BadDescriptor("invalid geometry for the format"),
        LayoutError::Unsupported => {
            AllocError::Unsupported("geometry not supported for the format")
        }
    })?;
    Ok((layout, reserved as u64))
}

impl Desc {
    fn from_info(info: &BufferDescriptorInfo, id: u64) -> Result<Self, AllocError> {
        if !info.additional_options.is_empty() {
            return Err(AllocError::Unsupported(
                "additionalOptions are not supported",
            ));
        }
        let (layout, reserved) = validate(
            info.width,
            info.height,
            info.layer_count,
            info.format,
            info.usage,
            info.reserved_size,
        )?;
        Ok(Self {
            id,
            width: info.width,
            height: info.height,
            layer_count: info.layer_count,
            format: info.format,
            usage: info.usage,
            meta_size: META_HEADER_SIZE + page_align(reserved),
            layout,
            reserved_size: reserved,
        })
    }

    /// The handle ints of this description.
    pub fn to_ints(&self) -> [i32; NUM_INTS] {
        let mut v = [0i32; NUM_INTS];
        v[idx::MAGIC] = HANDLE_MAGIC;
        v[idx::VERSION] = HANDLE_VERSION;
        v[idx::ID_LO..=idx::ID_HI].copy_from_slice(&split64(self.id));
        v[idx::WIDTH] = self.width;
        v[idx::HEIGHT] = self.height;
        v[idx::LAYER_COUNT] = self.layer_count;
        v[idx::FORMAT] = self.format;
        v[idx::USAGE_LO..=idx::USAGE_HI].copy_from_slice(&split64(self.usage));
        v[idx::STRIDE] = self.layout.stride as i32;
        v[idx::NUM_PLANES] = self.layout.num_planes as i32;
        for i in 0..self.layout.num_planes {
            v[idx::PLANE_OFFSET + i] = self.layout.planes[i].offset as i32;
            v[idx::PLANE_STRIDE + i] = self.layout.planes[i].stride_bytes as i32;
        }
        v[idx::PIXEL_SIZE_LO..idx::PIXEL_SIZE_LO + 2].copy_from_slice(&split64(self.layout.size));
        v[idx::META_SIZE_LO..idx::META_SIZE_LO + 2].copy_from_slice(&split64(self.meta_size));
        v[idx::RESERVED_SIZE_LO..idx::RESERVED_SIZE_LO + 2]
            .copy_from_slice(&split64(self.reserved_size));
        v
    }

    /// Rebuilds a description from untrusted ints: the core fields are
    /// validated like a descriptor, every derived int must match exactly.
    pub fn from_ints(ints: &[i32]) -> Result<Self, &'static str> {
        if ints.len() != NUM_INTS {
            return Err("wrong int count");
        }
        if ints[idx::MAGIC] != HANDLE_MAGIC {
            return Err("bad magic");
        }
        if ints[idx::VERSION] != HANDLE_VERSION {
            return Err("bad handle version");
        }
        let reserved = join64(ints[idx::RESERVED_SIZE_LO], ints[idx::RESERVED_SIZE_LO + 1]);
        let reserved = i64::try_from(reserved).map_err(|_| "bad reserved size")?;
        let info = BufferDescriptorInfo {
            name: String::new(),
            width: ints[idx::WIDTH],
            height: ints[idx::HEIGHT],
            layer_count: ints[idx::LAYER_COUNT],
            format: ints[idx::FORMAT],
            usage: join64(ints[idx::USAGE_LO], ints[idx::USAGE_HI]),
            reserved_size: reserved,
            additional_options: Vec::new(),
        };
        let id = join64(ints[idx::ID_LO], ints[idx::ID_HI]);
        if id == 0 {
            return Err("zero buffer id");
        }
        let d = Self::from_info(&info, id).map_err(|_| "handle describes an invalid buffer")?;
        if d.to_ints()[..] != ints[..] {
            return Err("handle geometry is inconsistent");
        }
        Ok(d)
    }
}

/// The allocator (stateless; buffer ids come from a process-wide counter).
#[derive(Debug, Default, Clone, Copy)]
pub struct Allocator;

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

fn next_id() -> u64 {
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    ((std::process::id() as u64) << 32) | n as u64
}

/// Cuts a name like `byte[128]` with `name[127] = 0` would.
fn descriptor_name(name: &str) -> Vec<u8> {
    let b = name.as_bytes();
    let end = b
        .iter()
        .position(|&c| c == 0)
        .unwrap_or(b.len())
        .min(crate::shared::NAME_MAX);
    // Keep whole UTF-8 characters.
    let mut end = end;
    while end > 0 && !name.is_char_boundary(end) {
        end -= 1;
    }
    b[..end].to_vec()
}

impl Allocator {
    /// A new allocator.
    pub fn new() -> Self {
        Self
    }

    /// `isSupported`: true when `allocate(info, 1)` would not be refused for
    /// the descriptor's content.
    pub fn is_supported(&self, info: &BufferDescriptorInfo) -> bool {
        Desc::from_info(info, 1).is_ok()
    }

    /// `allocate2(info, count)`.
    pub fn allocate(
        &self,
        info: &BufferDescriptorInfo,
        count: u32,
    ) -> Result<AllocationResult, AllocError> {
        if count == 0 {
            return Err(AllocError::BadDescriptor("count must be at least 1"));
        }
        if count > 64 {
            return Err(AllocError::NoResources("too many buffers in one call"));
        }
        let name = descriptor_name(&info.name);
        let mut buffers = Vec::with_capacity(count as usize);
        let mut stride = 0;
        for _ in 0..count {
            let desc = Desc::from_info(info, next_id())?;
            stride = desc.layout.stride;
            buffers.push(self.allocate_one(&desc, &name)?);
        }
        tracing::debug!(name = %String::from_utf8_lossy(&name), count, stride, "allocated");
        Ok(AllocationResult { stride, buffers })
    }

    fn allocate_one(&self, desc: &Desc, name: &[u8]) -> Result<NativeHandle, AllocError> {
        let label = String::from_utf8_lossy(name);
        let pixels = sealed_memfd(&format!("vnpu-gralloc {label}"), desc.layout.size)
            .map_err(|_| AllocError::NoResources("memfd for pixels"))?;
        let meta = sealed_memfd(&format!("vnpu-gralloc {label} metadata"), desc.meta_size)
            .map_err(|_| AllocError::NoResources("memfd for metadata"))?;
        let ints = desc.to_ints();
        let pixel_id = crate::shared::file_id(std::os::fd::AsRawFd::as_raw_fd(&pixels))
            .map_err(|_| AllocError::NoResources("fstat pixels"))?;
        {
            let map = Mapping::map(std::os::fd::AsRawFd::as_raw_fd(&meta), desc.meta_size)
                .ok()
                .and_then(MetaMapping::new)
                .ok_or(AllocError::NoResources("mapping metadata"))?;
            map.view().init(&ints, name, pixel_id);
        }
        NativeHandle::new(vec![pixels, meta], &ints).ok_or(AllocError::NoResources("native handle"))
    }
}
