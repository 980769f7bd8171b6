//! Standard metadata types and their byte-exact encoding (gralloc4 /
//! IMapperMetadataTypes.h: native little-endian, packed, `i64` lengths).

use crate::error::DecodeError;

/// Name of the standard metadata type namespace.
pub const STANDARD_METADATA_TYPE: &str = "android.hardware.graphics.common.StandardMetadataType";
/// ExtendableType name of PlaneLayoutComponentType.
pub const PLANE_LAYOUT_COMPONENT_TYPE: &str =
    "android.hardware.graphics.common.PlaneLayoutComponentType";
/// ExtendableType name of Compression.
pub const COMPRESSION: &str = "android.hardware.graphics.common.Compression";
/// ExtendableType name of Interlaced.
pub const INTERLACED: &str = "android.hardware.graphics.common.Interlaced";
/// ExtendableType name of ChromaSiting.
pub const CHROMA_SITING: &str = "android.hardware.graphics.common.ChromaSiting";
/// Bytes of the header that prefixes every non-empty standard value.
pub const HEADER_SIZE: usize = 8 + STANDARD_METADATA_TYPE.len() + 8;
/// Upper bound on counts (planes, components, rects) accepted by the decoder.
pub const MAX_COUNT: i64 = 10_000;

/// `StandardMetadataType` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i64)]
#[allow(missing_docs)]
pub enum StandardMetadataType {
    Invalid = 0,
    BufferId = 1,
    Name = 2,
    Width = 3,
    Height = 4,
    LayerCount = 5,
    PixelFormatRequested = 6,
    PixelFormatFourcc = 7,
    PixelFormatModifier = 8,
    Usage = 9,
    AllocationSize = 10,
    ProtectedContent = 11,
    Compression = 12,
    Interlaced = 13,
    ChromaSiting = 14,
    PlaneLayouts = 15,
    Crop = 16,
    Dataspace = 17,
    BlendMode = 18,
    Smpte2086 = 19,
    Cta861_3 = 20,
    Smpte2094_40 = 21,
    Smpte2094_10 = 22,
    Stride = 23,
}

impl StandardMetadataType {
    /// Every valid (non-INVALID) type, in value order.
    pub const ALL: [StandardMetadataType; 23] = {
        use StandardMetadataType::*;
        [
            BufferId,
            Name,
            Width,
            Height,
            LayerCount,
            PixelFormatRequested,
            PixelFormatFourcc,
            PixelFormatModifier,
            Usage,
            AllocationSize,
            ProtectedContent,
            Compression,
            Interlaced,
            ChromaSiting,
            PlaneLayouts,
            Crop,
            Dataspace,
            BlendMode,
            Smpte2086,
            Cta861_3,
            Smpte2094_40,
            Smpte2094_10,
            Stride,
        ]
    };

    /// The type for a raw value; INVALID, negative and unknown values give `None`.
    pub fn from_i64(v: i64) -> Option<Self> {
        if (1..=23).contains(&v) {
            Some(Self::ALL[(v - 1) as usize])
        } else {
            None
        }
    }

    /// The raw value.
    pub const fn value(self) -> i64 {
        self as i64
    }

    /// Optional types: absent encodes as zero bytes.
    pub const fn is_optional(self) -> bool {
        matches!(
            self,
            StandardMetadataType::Smpte2086
                | StandardMetadataType::Cta861_3
                | StandardMetadataType::Smpte2094_40
                | StandardMetadataType::Smpte2094_10
        )
    }

    /// The types a mapper must reject with BAD_VALUE on set (constant after allocation).
    pub const fn is_constant(self) -> bool {
        matches!(
            self,
            StandardMetadataType::BufferId
                | StandardMetadataType::Name
                | StandardMetadataType::Width
                | StandardMetadataType::Height
                | StandardMetadataType::LayerCount
                | StandardMetadataType::PixelFormatRequested
                | StandardMetadataType::Usage
        )
    }

    /// Whether this mapper accepts sets of the type.
    pub const fn is_settable(self) -> bool {
        matches!(
            self,
            StandardMetadataType::Dataspace
                | StandardMetadataType::BlendMode
                | StandardMetadataType::Smpte2086
                | StandardMetadataType::Cta861_3
                | StandardMetadataType::Smpte2094_40
                | StandardMetadataType::Smpte2094_10
        )
    }
}

/// `ExtendableType {String name; long value}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExtendableType {
    /// Namespace name.
    pub name: String,
    /// Value within the namespace.
    pub value: i64,
}

impl ExtendableType {
    /// Builds an ExtendableType.
    pub fn new(name: &str, value: i64) -> Self {
        Self {
            name: name.to_owned(),
            value,
        }
    }
}

/// `PlaneLayoutComponent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaneLayoutComponent {
    /// PlaneLayoutComponentType (or a vendor type).
    pub type_: ExtendableType,
    /// Offset of the component in a sample, in bits.
    pub offset_in_bits: i64,
    /// Size of the component, in bits (−1 for unknown).
    pub size_in_bits: i64,
}

/// `PlaneLayout`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct PlaneLayout {
    pub components: Vec<PlaneLayoutComponent>,
    pub offset_in_bytes: i64,
    pub sample_increment_in_bits: i64,
    pub stride_in_bytes: i64,
    pub width_in_samples: i64,
    pub height_in_samples: i64,
    pub total_size_in_bytes: i64,
    pub horizontal_subsampling: i64,
    pub vertical_subsampling: i64,
}

/// `Rect {int left, top, right, bottom}` (also `ARect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
#[allow(missing_docs)]
pub struct Rect {
    pub left: i32,
    pub top: i32,
    pub right: i32,
    pub bottom: i32,
}

/// `XyColor {float x, y}`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[allow(missing_docs)]
pub struct XyColor {
    pub x: f32,
    pub y: f32,
}

/// `Smpte2086`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[allow(missing_docs)]
pub struct Smpte2086 {
    pub primary_red: XyColor,
    pub primary_green: XyColor,
    pub primary_blue: XyColor,
    pub white_point: XyColor,
    pub max_luminance: f32,
    pub min_luminance: f32,
}

impl Smpte2086 {
    /// The ten floats in encoding order.
    pub fn to_array(&self) -> [f32; 10] {
        [
            self.primary_red.x,
            self.primary_red.y,
            self.primary_green.x,
            self.primary_green.y,
            self.primary_blue.x,
            self.primary_blue.y,
            self.white_point.x,
            self.white_point.y,
            self.max_luminance,
            self.min_luminance,
        ]
    }

    /// From the ten floats in encoding order.
    pub fn from_array(a: [f32; 10]) -> Self {
        Self {
            primary_red: XyColor { x: a[0], y: a[1] },
            primary_green: XyColor { x: a[2], y: a[3] },
            primary_blue: XyColor { x: a[4], y: a[5] },
            white_point: XyColor { x: a[6], y: a[7] },
            max_luminance: a[8],
            min_luminance: a[9],
        }
    }
}

/// `Cta861_3`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[allow(missing_docs)]
pub struct Cta861_3 {
    pub max_content_light_level: f32,
    pub max_frame_average_light_level: f32,
}

/// `BlendMode` values.
pub mod blend_mode {
    #![allow(missing_docs)]
    pub const INVALID: i32 = 0;
    pub const NONE: i32 = 1;
    pub const PREMULTIPLIED: i32 = 2;
    pub const COVERAGE: i32 = 3;
}

/// A few `Dataspace` values.
pub mod dataspace {
    #![allow(missing_docs)]
    pub const UNKNOWN: i32 = 0;
    pub const ARBITRARY: i32 = 1;
    pub const SRGB_LINEAR: i32 = 1 << 16 | 1 << 22 | 1 << 27;
    pub const SRGB: i32 = 1 << 16 | 2 << 22 | 1 << 27;
    pub const BT709: i32 = 1 << 16 | 3 << 22 | 2 << 27;
    pub const DISPLAY_P3: i32 = 10 << 16 | 2 << 22 | 1 << 27;
    pub const BT2020: i32 = 6 << 16 | 3 << 22 | 1 << 27;
    pub const BT2020_PQ: i32 = 6 << 16 | 7 << 22 | 1 << 27;
}

/// A decoded standard metadata value.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum StandardMetadata {
    BufferId(u64),
    Name(String),
    Width(u64),
    Height(u64),
    LayerCount(u64),
    PixelFormatRequested(i32),
    PixelFormatFourcc(u32),
    PixelFormatModifier(u64),
    Usage(u64),
    AllocationSize(u64),
    ProtectedContent(u64),
    Compression(ExtendableType),
    Interlaced(ExtendableType),
    ChromaSiting(ExtendableType),
    PlaneLayouts(Vec<PlaneLayout>),
    Crop(Vec<Rect>),
    Dataspace(i32),
    BlendMode(i32),
    Smpte2086(Option<Smpte2086>),
    Cta861_3(Option<Cta861_3>),
    Smpte2094_40(Option<Vec<u8>>),
    Smpte2094_10(Option<Vec<u8>>),
    Stride(u32),
}

/// Appends little-endian encodings to a byte vector.
#[derive(Default)]
pub struct Writer {
    /// The bytes written so far.
    pub buf: Vec<u8>,
}

impl Writer {
    /// With a capacity hint.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            buf: Vec::with_capacity(n),
        }
    }
    /// Appends an i64.
    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends an i32.
    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends an f32.
    pub fn f32(&mut self, v: f32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a string: i64 length + bytes, no NUL.
    pub fn string(&mut self, s: &[u8]) {
        self.i64(s.len() as i64);
        self.buf.extend_from_slice(s);
    }
    /// Appends an ExtendableType.
    pub fn ext(&mut self, e: &ExtendableType) {
        self.string(e.name.as_bytes());
        self.i64(e.value);
    }
    /// Appends a metadata header: type namespace name + value.
    pub fn header(&mut self, name: &str, value: i64) {
        self.string(name.as_bytes());
        self.i64(value);
    }
}

/// Reads little-endian values, failing on short reads.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }
    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }
    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::ShortRead);
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }
    /// An i64.
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.arr()?))
    }
    /// A u64.
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    /// An i32.
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.arr()?))
    }
    /// A u32.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    /// An f32.
    pub fn f32(&mut self) -> Result<f32, DecodeError> {
        Ok(f32::from_le_bytes(self.arr()?))
    }
    /// A length-prefixed byte string.
    pub fn string_bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.i64()?;
        if len < 0 {
            return Err(DecodeError::BadLength);
        }
        let len = usize::try_from(len).map_err(|_| DecodeError::BadLength)?;
        self.bytes(len)
    }
    /// A UTF-8 string.
    pub fn string(&mut self) -> Result<String, DecodeError> {
        let b = self.string_bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| DecodeError::BadUtf8)
    }
    /// An ExtendableType.
    pub fn ext(&mut self) -> Result<ExtendableType, DecodeError> {
        let name = self.string()?;
        let value = self.i64()?;
        Ok(ExtendableType { name, value })
    }
    /// A count (i64) that must be in `0..=MAX_COUNT` and plausible for the bytes left.
    pub fn count(&mut self, min_item_size: usize) -> Result<usize, DecodeError> {
        let n = self.i64()?;
        if !(0..=MAX_COUNT).contains(&n) {
            return Err(DecodeError::BadLength);
        }
        let n = n as usize;
        if n.saturating_mul(min_item_size) > self.remaining() {
            return Err(DecodeError::ShortRead);
        }
        Ok(n)
    }
    /// Checks a header against `name` and `value`.
    pub fn header(&mut self, name: &str, value: i64) -> Result<(), DecodeError> {
        let n = self.string_bytes()?;
        let v = self.i64()?;
        if n != name.as_bytes() || v != value {
            return Err(DecodeError::HeaderMismatch);
        }
        Ok(())
    }
    /// Fails if bytes are left.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.remaining() != 0 {
            return Err(DecodeError::TrailingBytes);
        }
        Ok(())
    }
}

impl StandardMetadata {
    /// The type of this value.
    pub fn metadata_type(&self) -> StandardMetadataType {
        use StandardMetadata as M;
        use StandardMetadataType as T;
        match self {
            M::BufferId(_) => T::BufferId,
            M::Name(_) => T::Name,
            M::Width(_) => T::Width,
            M::Height(_) => T::Height,
            M::LayerCount(_) => T::LayerCount,
            M::PixelFormatRequested(_) => T::PixelFormatRequested,
            M::PixelFormatFourcc(_) => T::PixelFormatFourcc,
            M::PixelFormatModifier(_) => T::PixelFormatModifier,
            M::Usage(_) => T::Usage,
            M::AllocationSize(_) => T::AllocationSize,
            M::ProtectedContent(_) => T::ProtectedContent,
            M::Compression(_) => T::Compression,
            M::Interlaced(_) => T::Interlaced,
            M::ChromaSiting(_) => T::ChromaSiting,
            M::PlaneLayouts(_) => T::PlaneLayouts,
            M::Crop(_) => T::Crop,
            M::Dataspace(_) => T::Dataspace,
            M::BlendMode(_) => T::BlendMode,
            M::Smpte2086(_) => T::Smpte2086,
            M::Cta861_3(_) => T::Cta861_3,
            M::Smpte2094_40(_) => T::Smpte2094_40,
            M::Smpte2094_10(_) => T::Smpte2094_10,
            M::Stride(_) => T::Stride,
        }
    }

    /// Encodes the value (header included; absent optionals give no bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(128);
        self.encode_into(&mut w);
        w.buf
    }

    /// Encodes into a writer.
    pub fn encode_into(&self, w: &mut Writer) {
        use StandardMetadata as M;
        match self {
            M::Smpte2086(None)
            | M::Cta861_3(None)
            | M::Smpte2094_40(None)
            | M::Smpte2094_10(None) => return,
            _ => {}
        }
        w.header(STANDARD_METADATA_TYPE, self.metadata_type().value());
        match self {
            M::BufferId(v)
            | M::Width(v)
            | M::Height(v)
            | M::LayerCount(v)
            | M::PixelFormatModifier(v)
            | M::Usage(v)
            | M::AllocationSize(v)
            | M::ProtectedContent(v) => w.u64(*v),
            M::Name(s) => w.string(s.as_bytes()),
            M::PixelFormatRequested(v) | M::Dataspace(v) | M::BlendMode(v) => w.i32(*v),
            M::PixelFormatFourcc(v) | M::Stride(v) => w.u32(*v),
            M::Compression(e) | M::Interlaced(e) | M::ChromaSiting(e) => w.ext(e),
            M::PlaneLayouts(planes) => {
                w.i64(planes.len() as i64);
                for p in planes {
                    w.i64(p.components.len() as i64);
                    for c in &p.components {
                        w.ext(&c.type_);
                        w.i64(c.offset_in_bits);
                        w.i64(c.size_in_bits);
                    }
                    for v in [
                        p.offset_in_bytes,
                        p.sample_increment_in_bits,
                        p.stride_in_bytes,
                        p.width_in_samples,
                        p.height_in_samples,
                        p.total_size_in_bytes,
                        p.horizontal_subsampling,
                        p.vertical_subsampling,
                    ] {
                        w.i64(v);
                    }
                }
            }
            M::Crop(rects) => {
                w.i64(rects.len() as i64);
                for r in rects {
                    w.i32(r.left);
                    w.i32(r.top);
                    w.i32(r.right);
                    w.i32(r.bottom);
                }
            }
            M::Smpte2086(Some(s)) => {
                for f in s.to_array() {
                    w.f32(f);
                }
            }
            M::Cta861_3(Some(c)) => {
                w.f32(c.max_content_light_level);
                w.f32(c.max_frame_average_light_level);
            }
            M::Smpte2094_40(Some(b)) | M::Smpte2094_10(Some(b)) => w.string(b),
            M::Smpte2086(None)
            | M::Cta861_3(None)
            | M::Smpte2094_40(None)
            | M::Smpte2094_10(None) => {}
        }
    }

    /// Decodes a value of type `ty` strictly: header must match, no trailing
    /// bytes, counts bounded. An empty input decodes to `None` for optionals.
    pub fn decode(ty: StandardMetadataType, data: &[u8]) -> Result<Self, DecodeError> {
        use StandardMetadata as M;
        use StandardMetadataType as T;
        if data.is_empty() && ty.is_optional() {
            return Ok(match ty {
                T::Smpte2086 => M::Smpte2086(None),
                T::Cta861_3 => M::Cta861_3(None),
                T::Smpte2094_40 => M::Smpte2094_40(None),
                _ => M::Smpte2094_10(None),
            });
        }
        let mut r = Reader::new(data);
        r.header(STANDARD_METADATA_TYPE, ty.value())?;
        let v = match ty {
            T::Invalid => return Err(DecodeError::UnknownType),
            T::BufferId => M::BufferId(r.u64()?),
            T::Name => M::Name(r.string()?),
            T::Width => M::Width(r.u64()?),
            T::Height => M::Height(r.u64()?),
            T::LayerCount => M::LayerCount(r.u64()?),
            T::PixelFormatRequested => M::PixelFormatRequested(r.i32()?),
            T::PixelFormatFourcc => M::PixelFormatFourcc(r.u32()?),
            T::PixelFormatModifier => M::PixelFormatModifier(r.u64()?),
            T::Usage => M::Usage(r.u64()?),
            T::AllocationSize => M::AllocationSize(r.u64()?),
            T::ProtectedContent => M::ProtectedContent(r.u64()?),
            T::Compression => M::Compression(r.ext()?),
            T::Interlaced => M::Interlaced(r.ext()?),
            T::ChromaSiting => M::ChromaSiting(r.ext()?),
            T::PlaneLayouts => {
                let n = r.count(8 + 64)?;
                let mut planes = Vec::with_capacity(n);
                for _ in 0..n {
                    let nc = r.count(8 + 8 + 16)?;
                    let mut components = Vec::with_capacity(nc);
                    for _ in 0..nc {
                        let type_ = r.ext()?;
                        let offset_in_bits = r.i64()?;
                        let size_in_bits = r.i64()?;
                        components.push(PlaneLayoutComponent {
                            type_,
                            offset_in_bits,
                            size_in_bits,
                        });
                    }
                    planes.push(PlaneLayout {
                        components,
                        offset_in_bytes: r.i64()?,
                        sample_increment_in_bits: r.i64()?,
                        stride_in_bytes: r.i64()?,
                        width_in_samples: r.i64()?,
                        height_in_samples: r.i64()?,
                        total_size_in_bytes: r.i64()?,
                        horizontal_subsampling: r.i64()?,
                        vertical_subsampling: r.i64()?,
                    });
                }
                M::PlaneLayouts(planes)
            }
            T::Crop => {
                let n = r.count(16)?;
                let mut rects = Vec::with_capacity(n);
                for _ in 0..n {
                    rects.push(Rect {
                        left: r.i32()?,
                        top: r.i32()?,
                        right: r.i32()?,
                        bottom: r.i32()?,
                    });
                }
                M::Crop(rects)
            }
            T::Dataspace => M::Dataspace(r.i32()?),
            T::BlendMode => M::BlendMode(r.i32()?),
            T::Smpte2086 => {
                let mut a = [0f32; 10];
                for f in a.iter_mut() {
                    *f = r.f32()?;
                }
                M::Smpte2086(Some(Smpte2086::from_array(a)))
            }
            T::Cta861_3 => M::Cta861_3(Some(Cta861_3 {
                max_content_light_level: r.f32()?,
                max_frame_average_light_level: r.f32()?,
            })),
            T::Smpte2094_40 => M::Smpte2094_40(Some(r.string_bytes()?.to_vec())),
            T::Smpte2094_10 => M::Smpte2094_10(Some(r.string_bytes()?.to_vec())),
            T::Stride => M::Stride(r.u32()?),
        };
        r.finish()?;
        Ok(v)
    }
}

/// A metadata type: namespace name + value (`AIMapper_MetadataType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MetadataType<'a> {
    /// Namespace.
    pub name: &'a str,
    /// Value in the namespace.
    pub value: i64,
}

/// Vendor metadata of this mapper.
pub mod vendor {
    /// Namespace of the vendor metadata types.
    pub const NAME: &str = "com.vnpu.graphics.gralloc.MetadataType";
    /// Process id of the allocating process (`u64`), gettable.
    pub const ALLOCATOR_PID: i64 = 1;
    /// Opaque client bytes (`i64 len` + bytes, up to [`USER_DATA_MAX`]), gettable
    /// and settable, shared across processes; absent = zero bytes.
    pub const USER_DATA: i64 = 2;
    /// Capacity of USER_DATA.
    pub const USER_DATA_MAX: usize = 1024;
}

/// Description of a supported metadata type (listSupportedMetadataTypes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataTypeDescription {
    /// The type.
    pub metadata_type: MetadataType<'static>,
    /// Description (required for vendor types).
    pub description: Option<&'static str>,
    /// Gettable.
    pub gettable: bool,
    /// Settable.
    pub settable: bool,
}

/// The static list of supported metadata types.
pub fn supported_metadata_types() -> &'static [MetadataTypeDescription] {
    static LIST: std::sync::LazyLock<Vec<MetadataTypeDescription>> =
        std::sync::LazyLock::new(|| {
            let mut v: Vec<MetadataTypeDescription> = StandardMetadataType::ALL
                .iter()
                .map(|t| MetadataTypeDescription {
                    metadata_type: MetadataType {
                        name: STANDARD_METADATA_TYPE,
                        value: t.value(),
                    },
                    description: None,
                    gettable: true,
                    settable: t.is_settable(),
                })
                .collect();
            v.push(MetadataTypeDescription {
                metadata_type: MetadataType {
                    name: vendor::NAME,
                    value: vendor::ALLOCATOR_PID,
                },
                description: Some("pid of the allocating process (u64)"),
                gettable: true,
                settable: false,
            });
            v.push(MetadataTypeDescription {
                metadata_type: MetadataType {
                    name: vendor::NAME,
                    value: vendor::USER_DATA,
                },
                description: Some(
                    "opaque client bytes shared across processes (i64 len + bytes, max 1024)",
                ),
                gettable: true,
                settable: true,
            });
            v
        });
    &LIST
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_spec() {
        assert_eq!(HEADER_SIZE, 69);
        assert_eq!(StandardMetadata::BufferId(7).encode().len(), 77);
        assert_eq!(StandardMetadata::Dataspace(0).encode().len(), 73);
        let name = StandardMetadata::Name("Hello".into()).encode();
        assert_eq!(
            &name[69..],
            &[5, 0, 0, 0, 0, 0, 0, 0, b'H', b'e', b'l', b'l', b'o']
        );
        assert_eq!(
            StandardMetadata::Compression(ExtendableType::new(COMPRESSION, 0))
                .encode()
                .len(),
            129
        );
        assert_eq!(
            StandardMetadata::Interlaced(ExtendableType::new(INTERLACED, 0))
                .encode()
                .len(),
            128
        );
        assert_eq!(
            StandardMetadata::ChromaSiting(ExtendableType::new(CHROMA_SITING, 0))
                .encode()
                .len(),
            130
        );
        assert_eq!(
            StandardMetadata::Crop(vec![Rect::default()]).encode().len(),
            93
        );
        assert_eq!(
            StandardMetadata::Smpte2086(Some(Smpte2086::default()))
                .encode()
                .len(),
            109
        );
        assert_eq!(
            StandardMetadata::Cta861_3(Some(Cta861_3::default()))
                .encode()
                .len(),
            77
        );
        assert_eq!(StandardMetadata::Smpte2094_10(None).encode().len(), 0);
        assert_eq!(
            StandardMetadata::Smpte2094_10(Some(vec![])).encode().len(),
            77
        );
        let h = StandardMetadata::Stride(1).encode();
        assert_eq!(&h[..8], &[0x35, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn plane_layout_sizes() {
        use crate::format::{compute_layout, pixel_format as pf};
        let enc = |f| {
            StandardMetadata::PlaneLayouts(compute_layout(f, 64, 64).unwrap().plane_layouts())
                .encode()
                .len()
        };
        assert_eq!(enc(pf::RGBA_8888), 505);
        assert_eq!(enc(pf::YCRCB_420_SP), 488);
        assert_eq!(enc(pf::YV12), 560);
    }

    #[test]
    fn decode_rejects_malformed() {
        let mut b = StandardMetadata::Width(3).encode();
        assert_eq!(
            StandardMetadata::decode(StandardMetadataType::Height, &b),
            Err(DecodeError::HeaderMismatch)
        );
        b.push(0);
        assert_eq!(
            StandardMetadata::decode(StandardMetadataType::Width, &b),
            Err(DecodeError::TrailingBytes)
        );
        b.truncate(70);
        assert_eq!(
            StandardMetadata::decode(StandardMetadataType::Width, &b),
            Err(DecodeError::ShortRead)
        );
        assert!(StandardMetadata::decode(StandardMetadataType::Width, &[]).is_err());
    }
}
