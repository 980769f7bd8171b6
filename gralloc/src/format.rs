//! Pixel formats, usage bits and the plane layout rules of the allocator.

use crate::metadata::{
    ExtendableType, PlaneLayout, PlaneLayoutComponent, PLANE_LAYOUT_COMPONENT_TYPE,
};

/// `android.hardware.graphics.common.PixelFormat` values.
pub mod pixel_format {
    #![allow(missing_docs)]
    pub const UNSPECIFIED: i32 = 0;
    pub const RGBA_8888: i32 = 0x1;
    pub const RGBX_8888: i32 = 0x2;
    pub const RGB_888: i32 = 0x3;
    pub const RGB_565: i32 = 0x4;
    pub const BGRA_8888: i32 = 0x5;
    pub const YCBCR_422_SP: i32 = 0x10;
    pub const YCRCB_420_SP: i32 = 0x11;
    pub const YCBCR_422_I: i32 = 0x14;
    pub const RGBA_FP16: i32 = 0x16;
    pub const RAW16: i32 = 0x20;
    pub const BLOB: i32 = 0x21;
    pub const IMPLEMENTATION_DEFINED: i32 = 0x22;
    pub const YCBCR_420_888: i32 = 0x23;
    pub const RAW_OPAQUE: i32 = 0x24;
    pub const RAW10: i32 = 0x25;
    pub const RAW12: i32 = 0x26;
    pub const RGBA_1010102: i32 = 0x2B;
    pub const YCBCR_P010: i32 = 0x36;
    pub const R_8: i32 = 0x38;
    pub const Y8: i32 = 0x2020_3859;
    pub const Y16: i32 = 0x2036_3159;
    pub const YV12: i32 = 0x3231_5659;
}

/// `android.hardware.graphics.common.BufferUsage` bits.
pub mod usage {
    #![allow(missing_docs)]
    pub const CPU_READ_MASK: u64 = 0xF;
    pub const CPU_READ_NEVER: u64 = 0;
    pub const CPU_READ_RARELY: u64 = 2;
    pub const CPU_READ_OFTEN: u64 = 3;
    pub const CPU_WRITE_MASK: u64 = 0xF0;
    pub const CPU_WRITE_NEVER: u64 = 0;
    pub const CPU_WRITE_RARELY: u64 = 0x20;
    pub const CPU_WRITE_OFTEN: u64 = 0x30;
    pub const GPU_TEXTURE: u64 = 1 << 8;
    pub const GPU_RENDER_TARGET: u64 = 1 << 9;
    pub const COMPOSER_OVERLAY: u64 = 1 << 11;
    pub const COMPOSER_CLIENT_TARGET: u64 = 1 << 12;
    pub const PROTECTED: u64 = 1 << 14;
    pub const COMPOSER_CURSOR: u64 = 1 << 15;
    pub const VIDEO_ENCODER: u64 = 1 << 16;
    pub const CAMERA_OUTPUT: u64 = 1 << 17;
    pub const CAMERA_INPUT: u64 = 1 << 18;
    pub const RENDERSCRIPT: u64 = 1 << 20;
    pub const VIDEO_DECODER: u64 = 1 << 22;
    pub const SENSOR_DIRECT_DATA: u64 = 1 << 23;
    pub const GPU_DATA_BUFFER: u64 = 1 << 24;
    pub const GPU_CUBE_MAP: u64 = 1 << 25;
    pub const GPU_MIPMAP_COMPLETE: u64 = 1 << 26;
    pub const HW_IMAGE_ENCODER: u64 = 1 << 27;
    pub const VENDOR_MASK: u64 = 0xF << 28;
    pub const FRONT_BUFFER: u64 = 1 << 32;
    pub const VENDOR_MASK_HI: u64 = 0xFFFF << 48;
    /// Both CPU nibbles.
    pub const CPU_MASK: u64 = CPU_READ_MASK | CPU_WRITE_MASK;
    /// Every bit BufferUsage defines (vendor ranges included).
    pub const KNOWN: u64 = CPU_MASK
        | GPU_TEXTURE
        | GPU_RENDER_TARGET
        | COMPOSER_OVERLAY
        | COMPOSER_CLIENT_TARGET
        | PROTECTED
        | COMPOSER_CURSOR
        | VIDEO_ENCODER
        | CAMERA_OUTPUT
        | CAMERA_INPUT
        | RENDERSCRIPT
        | VIDEO_DECODER
        | SENSOR_DIRECT_DATA
        | GPU_DATA_BUFFER
        | GPU_CUBE_MAP
        | GPU_MIPMAP_COMPLETE
        | HW_IMAGE_ENCODER
        | VENDOR_MASK
        | FRONT_BUFFER
        | VENDOR_MASK_HI;
}

/// `PlaneLayoutComponentType` values.
pub mod component {
    #![allow(missing_docs)]
    pub const Y: i64 = 1;
    pub const CB: i64 = 2;
    pub const CR: i64 = 4;
    pub const R: i64 = 1 << 10;
    pub const G: i64 = 1 << 11;
    pub const B: i64 = 1 << 12;
    pub const RAW: i64 = 1 << 20;
    pub const A: i64 = 1 << 30;
}

/// Largest width or height (in pixels) of an image format.
pub const MAX_DIMENSION: u32 = 16384;
/// Largest pixel allocation in bytes.
pub const MAX_ALLOCATION: u64 = 1 << 30;
/// Page size used for rounding allocations.
pub const PAGE_SIZE: u64 = 4096;

const fn fourcc(a: u8, b: u8, c: u8, d: u8) -> u32 {
    (a as u32) | (b as u32) << 8 | (c as u32) << 16 | (d as u32) << 24
}

/// DRM fourcc codes used by PIXEL_FORMAT_FOURCC.
pub mod drm {
    #![allow(missing_docs)]
    use super::fourcc;
    pub const ABGR8888: u32 = fourcc(b'A', b'B', b'2', b'4');
    pub const XBGR8888: u32 = fourcc(b'X', b'B', b'2', b'4');
    pub const ARGB8888: u32 = fourcc(b'A', b'R', b'2', b'4');
    pub const BGR888: u32 = fourcc(b'B', b'G', b'2', b'4');
    pub const RGB565: u32 = fourcc(b'R', b'G', b'1', b'6');
    pub const ABGR16161616F: u32 = fourcc(b'A', b'B', b'4', b'H');
    pub const ABGR2101010: u32 = fourcc(b'A', b'B', b'3', b'0');
    pub const R8: u32 = fourcc(b'R', b'8', b' ', b' ');
    pub const R16: u32 = fourcc(b'R', b'1', b'6', b' ');
    pub const YVU420: u32 = fourcc(b'Y', b'V', b'1', b'2');
    pub const NV12: u32 = fourcc(b'N', b'V', b'1', b'2');
    pub const NV21: u32 = fourcc(b'N', b'V', b'2', b'1');
    pub const P010: u32 = fourcc(b'P', b'0', b'1', b'0');
}

/// Maximum number of planes of any supported format.
pub const MAX_PLANES: usize = 3;

/// One component of a plane: (type, offset in bits, size in bits).
type Comp = (i64, i64, i64);

#[derive(Clone, Copy)]
enum Kind {
    /// Single plane, `bpp` bytes per pixel, components.
    Packed { bpp: u64, comps: &'static [Comp] },
    /// Bytes: width = size, height 1.
    Blob,
    /// YV12: Y, Cr, Cb planes.
    Yv12,
    /// Y plane then one interleaved chroma plane; `wide` = 16-bit samples (P010).
    SemiPlanar { chroma: &'static [Comp], wide: bool },
}

const RGBA: &[Comp] = &[
    (component::R, 0, 8),
    (component::G, 8, 8),
    (component::B, 16, 8),
    (component::A, 24, 8),
];
const RGBX: &[Comp] = &[
    (component::R, 0, 8),
    (component::G, 8, 8),
    (component::B, 16, 8),
];
const BGRA: &[Comp] = &[
    (component::B, 0, 8),
    (component::G, 8, 8),
    (component::R, 16, 8),
    (component::A, 24, 8),
];
const RGB: &[Comp] = &[
    (component::R, 0, 8),
    (component::G, 8, 8),
    (component::B, 16, 8),
];
const RGB565: &[Comp] = &[
    (component::B, 0, 5),
    (component::G, 5, 6),
    (component::R, 11, 5),
];
const FP16: &[Comp] = &[
    (component::R, 0, 16),
    (component::G, 16, 16),
    (component::B, 32, 16),
    (component::A, 48, 16),
];
const RGBA1010102: &[Comp] = &[
    (component::R, 0, 10),
    (component::G, 10, 10),
    (component::B, 20, 10),
    (component::A, 30, 2),
];
const R8: &[Comp] = &[(component::R, 0, 8)];
const Y8: &[Comp] = &[(component::Y, 0, 8)];
const Y16: &[Comp] = &[(component::Y, 0, 16)];
const RAW16: &[Comp] = &[(component::RAW, 0, 16)];
const CR8: &[Comp] = &[(component::CR, 0, 8)];
const CB8: &[Comp] = &[(component::CB, 0, 8)];
const NV12_UV: &[Comp] = &[(component::CB, 0, 8), (component::CR, 8, 8)];
const NV21_VU: &[Comp] = &[(component::CR, 0, 8), (component::CB, 8, 8)];
const P010_Y: &[Comp] = &[(component::Y, 6, 10)];
const P010_UV: &[Comp] = &[(component::CB, 6, 10), (component::CR, 22, 10)];

/// What the allocator knows about a format: its layout kind and fourcc.
#[derive(Clone, Copy)]
pub struct FormatInfo {
    kind: Kind,
    /// DRM fourcc reported as PIXEL_FORMAT_FOURCC.
    pub fourcc: u32,
}

/// The format description, or `None` when the allocator does not support it.
/// IMPLEMENTATION_DEFINED resolves to RGBA_8888 (CPU usage is rejected elsewhere).
pub fn format_info(format: i32) -> Option<FormatInfo> {
    use pixel_format as pf;
    let packed = |bpp, comps| Kind::Packed { bpp, comps };
    let (kind, fourcc) = match format {
        pf::RGBA_8888 | pf::IMPLEMENTATION_DEFINED => (packed(4, RGBA), drm::ABGR8888),
        pf::RGBX_8888 => (packed(4, RGBX), drm::XBGR8888),
        pf::BGRA_8888 => (packed(4, BGRA), drm::ARGB8888),
        pf::RGB_888 => (packed(3, RGB), drm::BGR888),
        pf::RGB_565 => (packed(2, RGB565), drm::RGB565),
        pf::RGBA_FP16 => (packed(8, FP16), drm::ABGR16161616F),
        pf::RGBA_1010102 => (packed(4, RGBA1010102), drm::ABGR2101010),
        pf::R_8 => (packed(1, R8), drm::R8),
        pf::Y8 => (packed(1, Y8), drm::R8),
        pf::Y16 => (packed(2, Y16), drm::R16),
        pf::RAW16 => (packed(2, RAW16), drm::R16),
        pf::BLOB => (Kind::Blob, drm::R8),
        pf::YV12 => (Kind::Yv12, drm::YVU420),
        pf::YCBCR_420_888 => (
            Kind::SemiPlanar {
                chroma: NV12_UV,
                wide: false,
            },
            drm::NV12,
        ),
        pf::YCRCB_420_SP => (
            Kind::SemiPlanar {
                chroma: NV21_VU,
                wide: false,
            },
            drm::NV21,
        ),
        pf::YCBCR_P010 => (
            Kind::SemiPlanar {
                chroma: P010_UV,
                wide: true,
            },
            drm::P010,
        ),
        _ => return None,
    };
    Some(FormatInfo { kind, fourcc })
}

/// Geometry of one plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlaneGeom {
    /// Byte offset of the plane in the pixel memory.
    pub offset: u64,
    /// Bytes between rows.
    pub stride_bytes: u64,
    /// Samples per row.
    pub width_samples: u64,
    /// Rows.
    pub height_samples: u64,
    /// Bytes of the plane (stride × rows).
    pub size: u64,
    /// Bits between samples.
    pub sample_increment_bits: i64,
    /// Horizontal subsampling.
    pub h_sub: i64,
    /// Vertical subsampling.
    pub v_sub: i64,
}

/// The full layout of a buffer, derived from (format, width, height) only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Stride in pixels (AllocationResult.stride, STRIDE metadata).
    pub stride: u32,
    /// Number of planes.
    pub num_planes: usize,
    /// Plane geometry; entries past `num_planes` are zero.
    pub planes: [PlaneGeom; MAX_PLANES],
    /// Bytes of pixel memory (page rounded).
    pub size: u64,
    /// Bytes per pixel of plane 0 (for region maths); 0 for planar YUV.
    pub bytes_per_pixel: u64,
    comps: [&'static [Comp]; MAX_PLANES],
}

/// Why a layout cannot be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// Zero or negative sizes, BLOB with height != 1.
    Invalid,
    /// Unsupported format, odd YUV sizes, or too large.
    Unsupported,
}

fn align(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

/// Computes the layout of a `format` buffer of `width` × `height`.
pub fn compute_layout(format: i32, width: i32, height: i32) -> Result<Layout, LayoutError> {
    if width <= 0 || height <= 0 {
        return Err(LayoutError::Invalid);
    }
    let info = format_info(format).ok_or(LayoutError::Unsupported)?;
    let (w, h) = (width as u64, height as u64);
    let mut planes = [PlaneGeom::default(); MAX_PLANES];
    let mut comps: [&'static [Comp]; MAX_PLANES] = [&[]; MAX_PLANES];
    let one = |offset, stride_bytes, ws, hs, inc| PlaneGeom {
        offset,
        stride_bytes,
        width_samples: ws,
        height_samples: hs,
        size: stride_bytes * hs,
        sample_increment_bits: inc,
        h_sub: 1,
        v_sub: 1,
    };
    let (stride, num_planes, bpp) = match info.kind {
        Kind::Blob => {
            if height != 1 {
                return Err(LayoutError::Invalid);
            }
            if w > MAX_ALLOCATION {
                return Err(LayoutError::Unsupported);
            }
            planes[0] = one(0, w, w, 1, 8);
            (w, 1, 1)
        }
        Kind::Packed { bpp, comps: c } => {
            if w > MAX_DIMENSION as u64 || h > MAX_DIMENSION as u64 {
                return Err(LayoutError::Unsupported);
            }
            let stride = align(w, 16);
            planes[0] = one(0, stride * bpp, w, h, (bpp * 8) as i64);
            comps[0] = c;
            (stride, 1, bpp)
        }
        Kind::Yv12 => {
            if w > MAX_DIMENSION as u64 || h > MAX_DIMENSION as u64 || w % 2 != 0 || h % 2 != 0 {
                return Err(LayoutError::Unsupported);
            }
            let stride = align(w, 16);
            let c_stride = align(stride / 2, 16);
            let y = one(0, stride, w, h, 8);
            let mut cr = one(stride * h, c_stride, w / 2, h / 2, 8);
            cr.h_sub = 2;
            cr.v_sub = 2;
            let mut cb = cr;
            cb.offset = cr.offset + c_stride * (h / 2);
            planes = [y, cr, cb];
            comps = [Y8, CR8, CB8];
            (stride, 3, 0)
        }
        Kind::SemiPlanar { chroma, wide } => {
            if w > MAX_DIMENSION as u64 || h > MAX_DIMENSION as u64 || w % 2 != 0 || h % 2 != 0 {
                return Err(LayoutError::Unsupported);
            }
            let stride = align(w, 16);
            let sb = if wide { 2 } else { 1 };
            let y = one(0, stride * sb, w, h, 8 * sb as i64);
            let mut c = one(stride * sb * h, stride * sb, w / 2, h / 2, 16 * sb as i64);
            c.h_sub = 2;
            c.v_sub = 2;
            planes[0] = y;
            planes[1] = c;
            comps[0] = if wide { P010_Y } else { Y8 };
            comps[1] = chroma;
            (stride, 2, 0)
        }
    };
    let end = planes[..num_planes]
        .iter()
        .map(|p| p.offset + p.size)
        .max()
        .unwrap_or(0);
    if end > MAX_ALLOCATION {
        return Err(LayoutError::Unsupported);
    }
    Ok(Layout {
        stride: stride as u32,
        num_planes,
        planes,
        size: align(end.max(1), PAGE_SIZE),
        bytes_per_pixel: bpp,
        comps,
    })
}

impl Layout {
    /// The PLANE_LAYOUTS value of this layout.
    pub fn plane_layouts(&self) -> Vec<PlaneLayout> {
        (0..self.num_planes)
            .map(|i| {
                let p = &self.planes[i];
                PlaneLayout {
                    components: self.comps[i]
                        .iter()
                        .map(|&(ty, off, size)| PlaneLayoutComponent {
                            type_: ExtendableType::new(PLANE_LAYOUT_COMPONENT_TYPE, ty),
                            offset_in_bits: off,
                            size_in_bits: size,
                        })
                        .collect(),
                    offset_in_bytes: p.offset as i64,
                    sample_increment_in_bits: p.sample_increment_bits,
                    stride_in_bytes: p.stride_bytes as i64,
                    width_in_samples: p.width_samples as i64,
                    height_in_samples: p.height_samples as i64,
                    total_size_in_bytes: p.size as i64,
                    horizontal_subsampling: p.h_sub,
                    vertical_subsampling: p.v_sub,
                }
            })
            .collect()
    }
}

/// Checks a usage value against the known BufferUsage bits.
pub fn usage_is_known(u: u64) -> bool {
    u & !usage::KNOWN == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yv12_layout_matches_android_rules() {
        let l = compute_layout(pixel_format::YV12, 64, 64).unwrap();
        assert_eq!(l.stride, 64);
        assert_eq!(l.planes[1].offset, 64 * 64);
        assert_eq!(l.planes[1].stride_bytes, 32);
        assert_eq!(l.planes[2].offset, 64 * 64 + 32 * 32);
        let l = compute_layout(pixel_format::YV12, 10, 10).unwrap();
        assert_eq!(l.stride, 16);
        assert_eq!(l.planes[1].stride_bytes, 16);
    }

    #[test]
    fn blob_and_rejections() {
        let l = compute_layout(pixel_format::BLOB, 1000, 1).unwrap();
        assert_eq!(l.stride, 1000);
        assert_eq!(l.size, 4096);
        assert_eq!(
            compute_layout(pixel_format::BLOB, 10, 2),
            Err(LayoutError::Invalid)
        );
        assert_eq!(
            compute_layout(pixel_format::RAW10, 10, 2),
            Err(LayoutError::Unsupported)
        );
        assert_eq!(
            compute_layout(pixel_format::YV12, 11, 2),
            Err(LayoutError::Unsupported)
        );
        assert_eq!(
            compute_layout(pixel_format::RGBA_8888, 0, 2),
            Err(LayoutError::Invalid)
        );
        assert_eq!(drm::ABGR8888, 0x3432_4241);
        assert_eq!(drm::YVU420, 0x3231_5659);
    }
}
