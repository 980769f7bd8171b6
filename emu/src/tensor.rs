//! Typed tensors: what the device knows of a tensor (element type, shape, quantisation)
//! and the typed views kernels compute on.
//!
//! A kernel never sees raw device memory: the compute engine stages each tensor into an
//! 8-byte-aligned local buffer and hands the kernel a [`View`] / [`ViewMut`] over it, whose
//! typed accessors ([`View::f32s`], [`View::u8s`], ...) check the element type and return
//! [`crate::kernels::KernelError::DType`] on a mismatch instead of reinterpreting bytes.

use half::f16;

use crate::kernels::{KernelError, Result};

/// The element type of a device tensor. The numbers are the program format's encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DType {
    /// IEEE binary32.
    F32 = 1,
    /// Two's-complement 32-bit integer.
    I32 = 2,
    /// IEEE binary16.
    F16 = 3,
    /// Unsigned 8-bit (asymmetric quantised, scale + zero point).
    U8 = 4,
    /// Signed 8-bit (asymmetric or symmetric quantised, or per-channel filters).
    I8 = 5,
    /// Signed 16-bit (symmetric quantised).
    I16 = 6,
    /// Unsigned 16-bit (asymmetric quantised).
    U16 = 7,
    /// One byte per element, 0 = false, 1 = true.
    Bool8 = 8,
    /// Unsigned 64-bit integer (vendor-extension tensors such as the example extension's
    /// 64-bit asymmetric quantised type, whose parameters travel as kernel parameters).
    U64 = 9,
}

impl DType {
    /// Every element type, in encoding order.
    pub const ALL: [DType; 9] = [
        DType::F32,
        DType::I32,
        DType::F16,
        DType::U8,
        DType::I8,
        DType::I16,
        DType::U16,
        DType::Bool8,
        DType::U64,
    ];

    /// Decodes the program format's number.
    pub fn from_u32(v: u32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| *d as u32 == v)
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::U64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::I16 | DType::U16 => 2,
            DType::U8 | DType::I8 | DType::Bool8 => 1,
        }
    }

    /// The range of stored values of an integer type (for zero points and clamping).
    pub fn int_range(self) -> Option<(i32, i32)> {
        match self {
            DType::U8 => Some((0, 255)),
            DType::I8 => Some((-128, 127)),
            DType::U16 => Some((0, 65535)),
            DType::I16 => Some((-32768, 32767)),
            DType::I32 => Some((i32::MIN, i32::MAX)),
            _ => None,
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16)
    }
}

/// Per-channel quantisation: one scale per index of dimension `axis` (zero point 0).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PerChannel {
    /// The channel dimension.
    pub axis: u32,
    /// One positive scale per channel.
    pub scales: Vec<f32>,
}

/// Quantisation parameters: `real = scale * (stored - zero_point)`. Float tensors carry
/// scale 0 and zero point 0.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Quant {
    /// The step between consecutive stored values.
    pub scale: f32,
    /// The stored value that represents real 0.
    pub zero_point: i32,
    /// Per-channel scales, for symmetric per-channel filters.
    pub per_channel: Option<PerChannel>,
}

impl Quant {
    /// Per-tensor parameters.
    pub fn new(scale: f32, zero_point: i32) -> Quant {
        Quant {
            scale,
            zero_point,
            per_channel: None,
        }
    }

    /// The real value of a stored value.
    pub fn dequantize(&self, q: i32) -> f32 {
        self.scale * (q - self.zero_point) as f32
    }
}

/// How a tensor's elements lie in memory. The numbers are the program format's encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u32)]
pub enum Layout {
    /// Row-major, as its shape says.
    #[default]
    Plain = 0,
    /// A float32 filter `[O, d1, ...]` (O output channels, K = d1 * ...) pre-packed as the
    /// device GEMM's B panels: `ceil(O / 16)` panels, each K rows of 16 values (row `l` of
    /// panel `p` holds elements `l` of output channels `16p .. 16p + 16`, zero past O).
    /// Only the filter of a float32 CONV_2D or FULLY_CONNECTED takes it.
    GemmPanels = 1,
    /// An int8 filter `[O, d1, ...]` with zero point 0 (symmetric, per tensor or per output
    /// channel) pre-packed as the byte GEMM's B panels (`kernels::igemm::quads::pack`):
    /// `ceil(O / 16)` panels, each `ceil(K / 4)` groups of 64 bytes (bytes `4l .. 4l + 4`
    /// of group `g` holding elements `4g .. 4g + 4` of output channel `16q + l`, zero past K
    /// and O) followed by the panel's 16 column sums as little-endian `i32`. Only the
    /// filter of a quantised CONV_2D takes it.
    IntPanels = 2,
}

impl Layout {
    /// Decodes the program format's number.
    pub fn from_u32(v: u32) -> Option<Layout> {
        [Layout::Plain, Layout::GemmPanels, Layout::IntPanels]
            .into_iter()
            .find(|l| *l as u32 == v)
    }

    /// Bytes a tensor of `dtype` and `shape` takes in this layout (`None` if the size
    /// overflows, or the layout does not apply to such a tensor).
    pub fn byte_len(self, dtype: DType, shape: &[usize]) -> Option<u64> {
        let elems = match self {
            Layout::Plain => shape
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d as u64))?,
            Layout::GemmPanels => {
                let (&o, rest) = shape.split_first().filter(|_| dtype == DType::F32)?;
                let k = rest.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
                crate::kernels::gemm::packed_len(k, o)? as u64
            }
            Layout::IntPanels => {
                let (&o, rest) = shape.split_first().filter(|_| dtype == DType::I8)?;
                let k = rest.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
                // Bytes, of a one-byte element type.
                crate::kernels::igemm::quads::packed_len(k, o)? as u64
            }
        };
        elems.checked_mul(dtype.size())
    }
}

/// What the device knows of a tensor apart from its memory: element type, shape,
/// quantisation and layout.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, row-major.
    pub shape: Vec<usize>,
    /// Quantisation (all zero for float and bool tensors).
    pub quant: Quant,
    /// How the elements lie in memory.
    pub layout: Layout,
}

impl TensorType {
    /// A tensor type without quantisation.
    pub fn new(dtype: DType, shape: &[usize]) -> TensorType {
        TensorType {
            dtype,
            shape: shape.to_vec(),
            quant: Quant::default(),
            layout: Layout::Plain,
        }
    }

    /// A quantised tensor type.
    pub fn quantized(dtype: DType, shape: &[usize], scale: f32, zero_point: i32) -> TensorType {
        TensorType {
            dtype,
            shape: shape.to_vec(),
            quant: Quant::new(scale, zero_point),
            layout: Layout::Plain,
        }
    }

    /// Number of elements (the caller has checked the shape with
    /// [`crate::kernels::num_elements`]).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The same type with another element type (quantisation dropped), for widened copies.
    pub fn with_dtype(&self, dtype: DType) -> TensorType {
        TensorType::new(dtype, &self.shape)
    }

    /// Checks the quantisation parameters against the element type and shape: finite
    /// non-negative scale, zero point in the stored range, per-channel axis in range with
    /// one positive scale per channel.
    pub fn validate_quant(&self) -> std::result::Result<(), String> {
        let q = &self.quant;
        if !(q.scale.is_finite() && q.scale >= 0.0) {
            return Err(format!("scale {} is not finite and >= 0", q.scale));
        }
        let range = self.dtype.int_range().filter(|_| self.dtype != DType::I32);
        match range {
            Some((lo, hi)) if q.zero_point < lo || q.zero_point > hi => {
                return Err(format!("zero point {} outside {lo}..={hi}", q.zero_point));
            }
            None if self.dtype != DType::I32 && q.zero_point != 0 => {
                return Err(format!(
                    "zero point {} on a {:?} tensor",
                    q.zero_point, self.dtype
                ));
            }
            _ => {}
        }
        if let Some(pc) = &q.per_channel {
            let dim = self.shape.get(pc.axis as usize).ok_or_else(|| {
                format!("channel axis {} outside rank {}", pc.axis, self.shape.len())
            })?;
            if pc.scales.len() != *dim {
                return Err(format!("{} scales for {dim} channels", pc.scales.len()));
            }
            if pc.scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
                return Err("per-channel scales must be finite and > 0".into());
            }
            if q.zero_point != 0 {
                return Err("per-channel tensors have zero point 0".into());
            }
        }
        Ok(())
    }
}

/// A read-only typed view of a staged tensor.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    /// Element type, shape and quantisation.
    pub ty: &'a TensorType,
    /// `numel * dtype.size()` bytes, 8-byte aligned.
    pub bytes: &'a [u8],
}

/// A writable typed view of a staged output tensor.
#[derive(Debug)]
pub struct ViewMut<'a> {
    /// Element type, shape and quantisation.
    pub ty: &'a TensorType,
    /// `numel * dtype.size()` bytes, 8-byte aligned.
    pub bytes: &'a mut [u8],
}

fn dtype_err(ty: &TensorType, want: DType) -> KernelError {
    KernelError::DType {
        expected: want,
        got: ty.dtype,
    }
}

macro_rules! accessors {
    ($($get:ident, $get_mut:ident, $t:ty, $d:expr;)*) => {
        impl<'a> View<'a> {
            $(
                #[doc = concat!("The elements as `", stringify!($t), "`; an error unless the dtype is ", stringify!($d), ".")]
                pub fn $get(&self) -> Result<&'a [$t]> {
                    if self.ty.dtype != $d {
                        return Err(dtype_err(self.ty, $d));
                    }
                    bytemuck::try_cast_slice(self.bytes).map_err(|_| KernelError::Misaligned)
                }
            )*
        }
        impl ViewMut<'_> {
            $(
                #[doc = concat!("The elements as mutable `", stringify!($t), "`; an error unless the dtype is ", stringify!($d), ".")]
                pub fn $get_mut(&mut self) -> Result<&mut [$t]> {
                    if self.ty.dtype != $d {
                        return Err(dtype_err(self.ty, $d));
                    }
                    bytemuck::try_cast_slice_mut(self.bytes).map_err(|_| KernelError::Misaligned)
                }
            )*
        }
    };
}

accessors! {
    f32s, f32s_mut, f32, DType::F32;
    i32s, i32s_mut, i32, DType::I32;
    f16s, f16s_mut, f16, DType::F16;
    u8s, u8s_mut, u8, DType::U8;
    i8s, i8s_mut, i8, DType::I8;
    i16s, i16s_mut, i16, DType::I16;
    u16s, u16s_mut, u16, DType::U16;
    bools, bools_mut, u8, DType::Bool8;
    u64s, u64s_mut, u64, DType::U64;
}

impl<'a> View<'a> {
    /// The shape.
    pub fn shape(&self) -> &'a [usize] {
        &self.ty.shape
    }

    /// Element `i` as f64 (dequantised for quantised types), for reference paths and
    /// tests; `None` out of range.
    pub fn get_f64(&self, i: usize) -> Option<f64> {
        let sz = self.ty.dtype.size() as usize;
        let b = self.bytes.get(i * sz..(i + 1) * sz)?;
        let q = &self.ty.quant;
        let deq = |v: i32| f64::from(q.scale) * f64::from(v - q.zero_point);
        Some(match self.ty.dtype {
            DType::F32 => f64::from(f32::from_le_bytes(b.try_into().ok()?)),
            DType::F16 => f16::from_le_bytes(b.try_into().ok()?).to_f64(),
            DType::I32 => f64::from(i32::from_le_bytes(b.try_into().ok()?)),
            DType::U8 => deq(i32::from(b[0])),
            DType::I8 => deq(i32::from(b[0] as i8)),
            DType::I16 => deq(i32::from(i16::from_le_bytes(b.try_into().ok()?))),
            DType::U16 => deq(i32::from(u16::from_le_bytes(b.try_into().ok()?))),
            DType::Bool8 => f64::from(u8::from(b[0] != 0)),
            DType::U64 => u64::from_le_bytes(b.try_into().ok()?) as f64,
        })
    }
}

impl ViewMut<'_> {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.ty.shape
    }

    /// A read-only view of the same bytes.
    pub fn as_view(&self) -> View<'_> {
        View {
            ty: self.ty,
            bytes: self.bytes,
        }
    }
}

/// An owned, 8-byte-aligned staging buffer for one tensor.
#[derive(Clone, Debug, Default)]
pub struct Staged {
    words: Vec<u64>,
    len: usize,
}

impl Staged {
    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Staged {
        Staged {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }

    /// This buffer's memory reused for `len` bytes: what it held stays (the caller
    /// overwrites or [`Staged::clear`]s it); only bytes past the most it ever held are
    /// zeroed (a shorter use keeps the words past its end, so a longer one later does
    /// not zero them again: that was a memset per operation).
    pub fn recycled(mut self, len: usize) -> Staged {
        let words = len.div_ceil(8);
        if self.words.len() < words {
            self.words.resize(words, 0);
        }
        self.len = len;
        self
    }

    /// Bytes the buffer can hold without growing.
    pub fn capacity(&self) -> usize {
        self.words.capacity() * 8
    }

    /// Zeroes every byte.
    pub fn clear(&mut self) {
        let words = self.len.div_ceil(8);
        self.words[..words].fill(0);
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    /// The bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

/// Runs a float kernel on float16 tensors the way the NNAPI reference does: every
/// TENSOR_FLOAT16 input is widened to float32, `f` computes in float32, and every float16
/// output is rounded back (round to nearest even). Tensors of other types pass through
/// unchanged, so `f` sees F32 wherever there was F16.
pub fn widen_f16<F>(inputs: &[View<'_>], outputs: &mut [ViewMut<'_>], f: F) -> Result<()>
where
    F: FnOnce(&[View<'_>], &mut [ViewMut<'_>]) -> Result<()>,
{
    let is16 = |t: &TensorType| t.dtype == DType::F16;
    if !inputs.iter().any(|v| is16(v.ty)) && !outputs.iter().any(|v| is16(v.ty)) {
        return f(inputs, outputs);
    }
    let widen_ty = |t: &TensorType| {
        if is16(t) {
            t.with_dtype(DType::F32)
        } else {
            t.clone()
        }
    };
    let in_tys: Vec<TensorType> = inputs.iter().map(|v| widen_ty(v.ty)).collect();
    let out_tys: Vec<TensorType> = outputs.iter().map(|v| widen_ty(v.ty)).collect();
    let mut in_bufs = Vec::with_capacity(inputs.len());
    for v in inputs {
        if is16(v.ty) {
            let mut s = Staged::zeroed(v.ty.numel() * 4);
            let dst: &mut [f32] = bytemuck::cast_slice_mut(s.bytes_mut());
            for (d, x) in dst.iter_mut().zip(v.f16s()?) {
                *d = x.to_f32();
            }
            in_bufs.push(Some(s));
        } else {
            in_bufs.push(None);
        }
    }
    let mut out_bufs: Vec<Option<Staged>> = outputs
        .iter()
        .map(|v| is16(v.ty).then(|| Staged::zeroed(v.ty.numel() * 4)))
        .collect();
    {
        let ins: Vec<View<'_>> = inputs
            .iter()
            .zip(&in_bufs)
            .zip(&in_tys)
            .map(|((v, b), ty)| View {
                ty,
                bytes: b.as_ref().map_or(v.bytes, |b| b.bytes()),
            })
            .collect();
        let mut outs: Vec<ViewMut<'_>> = outputs
            .iter_mut()
            .zip(out_bufs.iter_mut())
            .zip(&out_tys)
            .map(|((v, b), ty)| ViewMut {
                ty,
                bytes: match b {
                    Some(b) => b.bytes_mut(),
                    None => &mut *v.bytes,
                },
            })
            .collect();
        f(&ins, &mut outs)?;
    }
    for (v, b) in outputs.iter_mut().zip(&out_bufs) {
        if let Some(b) = b {
            let src: &[f32] = bytemuck::cast_slice(b.bytes());
            for (d, x) in v.f16s_mut()?.iter_mut().zip(src) {
                *d = f16::from_f32(*x);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Staged;

    #[test]
    fn a_recycled_buffer_keeps_its_bytes_and_zeroes_only_new_ones() {
        let mut s = Staged::zeroed(16);
        s.bytes_mut().fill(7);
        // Shorter, then longer again: the old bytes come back (nothing re-zeroed), bytes
        // never held before are zero, and clear zeroes exactly the current length.
        let s = s.recycled(4).recycled(24);
        assert_eq!(s.bytes().len(), 24);
        assert_eq!(&s.bytes()[..16], &[7; 16]);
        assert_eq!(&s.bytes()[16..], &[0; 8]);
        let mut s = s.recycled(8);
        s.clear();
        assert_eq!(s.bytes(), &[0; 8]);
        assert_eq!(&s.recycled(16).bytes()[8..], &[7; 8]);
    }
}
