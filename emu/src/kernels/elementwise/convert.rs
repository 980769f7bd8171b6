//! NNAPI CAST, QUANTIZE and DEQUANTIZE: element type conversions.
//!
//! - CAST between float32, float16, int32 and uint8 (quantised types as their stored
//!   integers, as the reference): to int32 truncates toward zero (saturating), to uint8
//!   clamps to [0, 255] then truncates; any other type only to itself (a copy).
//! - QUANTIZE float32/float16 -> uint8/int8: `clamp(zero_point + round(x / scale))`, in
//!   float32 as the reference does (the reference itself quantises in float).
//! - DEQUANTIZE uint8/int8 (per-tensor or per-channel) -> float32/float16:
//!   `scale * (q - zero_point)` in float32, then narrowed for float16.
//! - REQUANTIZE (the device's own, no NNAPI operation): uint8/int8 per-tensor -> uint8/int8,
//!   exactly DEQUANTIZE to float32 then QUANTIZE, then the fused activation's clamp (as a
//!   quantised RELU* applies it). The compiler folds such a pair (and a RELU after it) into
//!   one (`driver/src/compile/fuse.rs`): TFLite's quantised-to-quantised QUANTIZE and its
//!   rescaling activations import as that pair. Every stored value has one result, so it
//!   runs as a table of 256 built by the two conversions' own arithmetic.
//! - REQUANTIZE_PRELU (the device's own too): DEQUANTIZE of a uint8/int8 per-tensor input
//!   to float32, PRELU with a float32 slope (the second input, repeated whole along the
//!   input: a per-channel vector, say), QUANTIZE to uint8/int8, as one pass with the three
//!   operations' float32 arithmetic (`quantize_simd`). A quantiser without an int8 PRELU
//!   leaves such chains (MediaPipe's iris model has 53); the compiler folds them.
//!
//! Parameter words: kind (Cast 0, Quantize 1, Dequantize 2, Requantize 3, RequantizePrelu
//! 4); Requantize then its activation (0 none, 1 relu, 2 relu1, 3 relu6).

use half::f16;

use super::lut_simd;
use super::quantize_simd::{self, Byte, PreluQuant, Quantizer};
use super::{decode_kind, kind_enum, repeats_along_leading};
use crate::kernels::isa::{detected, isa, Isa};
use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::quant::{quantized_activation_range, QuantElem};
use crate::kernels::{Activation, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

kind_enum! {
    /// Which conversion.
    pub enum ConvertKind {
        /// CAST.
        Cast => "CAST",
        /// QUANTIZE.
        Quantize => "QUANTIZE",
        /// DEQUANTIZE.
        Dequantize => "DEQUANTIZE",
        /// DEQUANTIZE then QUANTIZE (see the module documentation).
        Requantize => "REQUANTIZE",
        /// DEQUANTIZE, float32 PRELU, QUANTIZE (see the module documentation).
        RequantizePrelu => "REQUANTIZE_PRELU",
    }
}

/// One conversion.
#[derive(Debug, Clone, PartialEq)]
pub struct Convert {
    /// The conversion.
    pub kind: ConvertKind,
    /// The clamp applied after a requantisation ([`ConvertKind::Requantize`] only; `None`
    /// for the others).
    pub act: Activation,
}

impl From<ConvertKind> for Convert {
    fn from(kind: ConvertKind) -> Self {
        Convert {
            kind,
            act: Activation::None,
        }
    }
}

impl Convert {
    fn bad(&self, reason: String) -> KernelError {
        KernelError::InvalidShape {
            op: self.name(),
            reason,
        }
    }
}

/// The elements of `v` as f64 (stored values; exact for every type read here).
fn raw(v: &View<'_>) -> Result<Vec<f64>> {
    Ok(match v.ty.dtype {
        DType::F32 => v.f32s()?.iter().map(|&x| f64::from(x)).collect(),
        DType::F16 => v.f16s()?.iter().map(|x| x.to_f64()).collect(),
        DType::I32 => v.i32s()?.iter().map(|&x| f64::from(x)).collect(),
        DType::U8 => v.u8s()?.iter().map(|&x| f64::from(x)).collect(),
        DType::I8 => v.i8s()?.iter().map(|&x| f64::from(x)).collect(),
        d => {
            return Err(KernelError::UnsupportedDType {
                op: "CAST",
                dtype: d,
            })
        }
    })
}

/// Writes `vals` (already converted values) into `o`, narrowing as a C++ static_cast.
fn write(o: &mut ViewMut<'_>, vals: impl Iterator<Item = f64>) -> Result<()> {
    match o.ty.dtype {
        DType::F32 => o
            .f32s_mut()?
            .iter_mut()
            .zip(vals)
            .for_each(|(d, v)| *d = v as f32),
        DType::F16 => o
            .f16s_mut()?
            .iter_mut()
            .zip(vals)
            .for_each(|(d, v)| *d = f16::from_f64(v)),
        // `as` truncates toward zero and saturates (NaN gives 0).
        DType::I32 => o
            .i32s_mut()?
            .iter_mut()
            .zip(vals)
            .for_each(|(d, v)| *d = v as i32),
        DType::U8 => o
            .u8s_mut()?
            .iter_mut()
            .zip(vals)
            .for_each(|(d, v)| *d = v as u8),
        DType::I8 => o
            .i8s_mut()?
            .iter_mut()
            .zip(vals)
            .for_each(|(d, v)| *d = v as i8),
        d => {
            return Err(KernelError::UnsupportedDType {
                op: "CAST",
                dtype: d,
            })
        }
    }
    Ok(())
}

/// `dst[i] = f(src[i])`.
#[inline]
fn zip_map<A: Copy, B>(src: &[A], dst: &mut [B], f: impl Fn(A) -> B) {
    for (d, &v) in dst.iter_mut().zip(src) {
        *d = f(v);
    }
}

const CAST_TYPES: [DType; 4] = [DType::F32, DType::F16, DType::I32, DType::U8];

impl Kernel for Convert {
    /// Each conversion maps every element of its input to the same element of its output.
    fn overwrites_quant8_outputs(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let kind = decode_kind(w, "conversion", ConvertKind::from_word)?;
        let act = if kind == ConvertKind::Requantize {
            let a = w.u32("activation")?;
            Activation::from_u32(a).ok_or_else(|| w.err(format!("bad activation {a}")))?
        } else {
            Activation::None
        };
        Ok(Convert { kind, act })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.kind.word());
        if self.kind == ConvertKind::Requantize {
            w.push(self.act as u32);
        }
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        if self.kind == ConvertKind::RequantizePrelu {
            2..=2
        } else {
            1..=1
        }
    }

    fn fused_activation(&self) -> Option<Activation> {
        (self.kind == ConvertKind::Requantize).then_some(self.act)
    }

    fn set_fused_activation(&mut self, act: Activation) -> bool {
        if self.kind != ConvertKind::Requantize {
            return false;
        }
        self.act = act;
        true
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let t = inputs[0];
        let ok = match self.kind {
            ConvertKind::Cast => true,
            ConvertKind::Quantize => t.dtype.is_float(),
            ConvertKind::Dequantize | ConvertKind::Requantize | ConvertKind::RequantizePrelu => {
                matches!(t.dtype, DType::U8 | DType::I8)
            }
        };
        if !ok {
            return Err(KernelError::UnsupportedDType {
                op: self.name(),
                dtype: t.dtype,
            });
        }
        let requant = matches!(
            self.kind,
            ConvertKind::Requantize | ConvertKind::RequantizePrelu
        );
        if requant || self.kind == ConvertKind::Dequantize {
            t.validate_quant().map_err(|e| self.bad(e))?;
        }
        if requant && t.quant.per_channel.is_some() {
            return Err(self.bad("a requantised input is quantised per tensor".into()));
        }
        if self.kind == ConvertKind::RequantizePrelu {
            let a = inputs[1];
            if a.dtype != DType::F32 {
                return Err(KernelError::UnsupportedDType {
                    op: self.name(),
                    dtype: a.dtype,
                });
            }
            if a.numel() == 0 || !repeats_along_leading(&a.shape, &t.shape) {
                return Err(self.bad(format!(
                    "slope {:?} does not repeat whole along the input {:?}",
                    a.shape, t.shape
                )));
            }
        }
        Ok(vec![t.shape.clone()])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let (i, o) = (inputs[0].dtype, outputs[0].dtype);
        let ok = match self.kind {
            ConvertKind::Cast => i == o || (CAST_TYPES.contains(&i) && CAST_TYPES.contains(&o)),
            ConvertKind::Quantize | ConvertKind::Requantize | ConvertKind::RequantizePrelu => {
                matches!(o, DType::U8 | DType::I8)
            }
            ConvertKind::Dequantize => o.is_float(),
        };
        if !ok {
            return Err(self.bad(format!("cannot convert {i:?} to {o:?}")));
        }
        if matches!(
            self.kind,
            ConvertKind::Quantize | ConvertKind::Requantize | ConvertKind::RequantizePrelu
        ) {
            let s = outputs[0].quant.scale;
            if !(s > 0.0 && s.is_finite()) {
                return Err(self.bad("output scale must be > 0".into()));
            }
        }
        Ok(())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let o = &mut outputs[0];
        match self.kind {
            ConvertKind::Cast => {
                if x.ty.dtype == o.ty.dtype {
                    o.bytes.copy_from_slice(x.bytes);
                    return Ok(());
                }
                let clamp_u8 = o.ty.dtype == DType::U8;
                let v = raw(&x)?;
                write(
                    o,
                    v.into_iter()
                        .map(|v| if clamp_u8 { v.clamp(0.0, 255.0) } else { v }),
                )
            }
            ConvertKind::Quantize => {
                let (lo, hi) = if o.ty.dtype == DType::U8 {
                    (0.0f32, 255.0f32)
                } else {
                    (-128.0, 127.0)
                };
                let (s, zp) = (o.ty.quant.scale, o.ty.quant.zero_point as f32);
                if x.ty.dtype == DType::F32 {
                    // The same arithmetic straight from float32 to the stored type.
                    let zp = o.ty.quant.zero_point;
                    let src = x.f32s()?;
                    match o.ty.dtype {
                        DType::I8 => {
                            quantize_simd::quantize(&Quantizer::new::<i8>(s, zp), src, o.i8s_mut()?)
                        }
                        _ => {
                            quantize_simd::quantize(&Quantizer::new::<u8>(s, zp), src, o.u8s_mut()?)
                        }
                    }
                    return Ok(());
                }
                let v = raw(&x)?;
                // In f32 as the reference: zero_point + round(x / scale), clamped.
                write(
                    o,
                    v.into_iter().map(|v| {
                        let q = zp + (v as f32 / s).round();
                        f64::from(q.clamp(lo, hi))
                    }),
                )
            }
            ConvertKind::RequantizePrelu => {
                let alpha = inputs[1].f32s()?;
                match (x.ty.dtype, o.ty.dtype) {
                    (DType::U8, DType::U8) => prelu(x.ty, o.ty, x.u8s()?, alpha, o.u8s_mut()?),
                    (DType::U8, _) => prelu(x.ty, o.ty, x.u8s()?, alpha, o.i8s_mut()?),
                    (DType::I8, DType::U8) => prelu(x.ty, o.ty, x.i8s()?, alpha, o.u8s_mut()?),
                    _ => prelu(x.ty, o.ty, x.i8s()?, alpha, o.i8s_mut()?),
                }
                Ok(())
            }
            ConvertKind::Requantize => requantize_at(isa(), self.name(), self.act, x, o),
            ConvertKind::Dequantize => {
                let q = &x.ty.quant;
                if q.per_channel.is_none() && o.ty.dtype == DType::F32 {
                    // Per tensor, every stored value has one result: a table of 256.
                    let (s, zp) = (q.scale, q.zero_point);
                    let dq = |v: i32| s * (v - zp) as f32;
                    let dst = o.f32s_mut()?;
                    if x.ty.dtype == DType::U8 {
                        let table: Vec<f32> = (0..=255).map(dq).collect();
                        zip_map(x.u8s()?, dst, |v| table[usize::from(v)]);
                    } else {
                        let table: Vec<f32> = (-128..=127).map(dq).collect();
                        zip_map(x.i8s()?, dst, |v| table[(i32::from(v) + 128) as usize]);
                    }
                    return Ok(());
                }
                let v = raw(&x)?;
                let scale_of: Box<dyn Fn(usize) -> f32> = match &q.per_channel {
                    Some(pc) => {
                        let axis = pc.axis as usize;
                        let inner: usize = x.ty.shape[axis + 1..].iter().product();
                        let dim = x.ty.shape[axis].max(1);
                        let scales = pc.scales.clone();
                        Box::new(move |i| {
                            scales.get((i / inner.max(1)) % dim).copied().unwrap_or(0.0)
                        })
                    }
                    None => {
                        let s = q.scale;
                        Box::new(move |_| s)
                    }
                };
                let zp = q.zero_point;
                write(
                    o,
                    v.into_iter()
                        .enumerate()
                        .map(|(i, v)| f64::from(scale_of(i) * (v as i32 - zp) as f32)),
                )
            }
        }
    }
}

/// REQUANTIZE_PRELU of `x` (of type `it`) with the slope `alpha` into `dst` (of type `ot`).
fn prelu<T: Byte, U: Byte>(
    it: &TensorType,
    ot: &TensorType,
    x: &[T],
    alpha: &[f32],
    dst: &mut [U],
) {
    let p = PreluQuant {
        in_scale: it.quant.scale,
        in_zp: it.quant.zero_point,
        out: Quantizer::new::<U>(ot.quant.scale, ot.quant.zero_point),
    };
    quantize_simd::prelu(&p, x, alpha, dst);
}

/// REQUANTIZE of `x` into `o` with the activation `act`, at the instruction-set level
/// `level`. At AVX2, REQUANTIZE_PRELU's affine form with every slope 1 where one fits
/// (its `value` is then this requantisation, the activation's clamp in its output range):
/// integer lanes where the byte table takes forty vector operations per 32 bytes
/// (face_detection_full_range_int8's 20 RELUs that requantise, at AVX2: 194 -> 84 us;
/// every one fits). Elsewhere, and where no form fits, the byte table, 64 bytes a step on
/// AVX-512BW.
fn requantize_at(
    level: Isa,
    name: &'static str,
    act: Activation,
    x: View<'_>,
    o: &mut ViewMut<'_>,
) -> Result<()> {
    for t in [x.ty, o.ty] {
        if !matches!(t.dtype, DType::U8 | DType::I8) {
            return Err(KernelError::UnsupportedDType {
                op: name,
                dtype: t.dtype,
            });
        }
    }
    if level.min(detected()) == Isa::Avx2 {
        let (ot, s) = (o.ty, o.ty.quant.scale);
        let (lo, hi) = activation_range(ot, act);
        let p = PreluQuant {
            in_scale: x.ty.quant.scale,
            in_zp: x.ty.quant.zero_point,
            out: Quantizer {
                scale: s,
                zp: ot.quant.zero_point as f32,
                lo: lo as f32,
                hi: hi as f32,
            },
        };
        let done = lo <= hi
            && match (x.ty.dtype, ot.dtype) {
                (DType::U8, DType::U8) => {
                    quantize_simd::requantize_affine(&p, x.u8s()?, o.u8s_mut()?)
                }
                (DType::U8, _) => quantize_simd::requantize_affine(&p, x.u8s()?, o.i8s_mut()?),
                (DType::I8, DType::U8) => {
                    quantize_simd::requantize_affine(&p, x.i8s()?, o.u8s_mut()?)
                }
                _ => quantize_simd::requantize_affine(&p, x.i8s()?, o.i8s_mut()?),
            };
        if done {
            return Ok(());
        }
    }
    let table = requantize_table(x.ty, o.ty, act);
    // Indexed by the stored byte's bits (the table starts at the input type's minimum),
    // each entry the output's stored byte.
    let first = if x.ty.dtype == DType::I8 { -128 } else { 0 };
    let bytes: [u8; 256] = std::array::from_fn(|b| {
        let v = if first < 0 {
            i32::from(b as u8 as i8)
        } else {
            b as i32
        };
        table[(v - first) as usize] as u8
    });
    // Both types are one-byte: the stored bytes.
    lut_simd::lookup_at(level, &bytes, x.bytes, o.bytes);
    Ok(())
}

/// The stored values of the one-byte type `dtype` (uint8, else int8).
fn byte_range(dtype: DType) -> (i32, i32) {
    if dtype == DType::U8 {
        (u8::MIN.to_i32(), u8::MAX.to_i32())
    } else {
        (i8::MIN.to_i32(), i8::MAX.to_i32())
    }
}

/// The stored values a quantised RELU* `act` leaves of `ot` (its whole range for none).
fn activation_range(ot: &TensorType, act: Activation) -> (i32, i32) {
    let (qmin, qmax) = byte_range(ot.dtype);
    quantized_activation_range(act as u32, ot.quant.scale, ot.quant.zero_point, qmin, qmax)
}

/// The requantisation of every stored value of `it` (from its type's minimum on) into
/// `ot`'s type: DEQUANTIZE's float32 `scale * (q - zero_point)`, then QUANTIZE's float32
/// `clamp(zero_point + round(x / scale))`, then the activation's clamp as a quantised RELU*
/// applies it; the values are `ot`'s stored integers.
fn requantize_table(it: &TensorType, ot: &TensorType, act: Activation) -> [i32; 256] {
    let (s_in, zp_in) = (it.quant.scale, it.quant.zero_point);
    let (s, zp) = (ot.quant.scale, ot.quant.zero_point as f32);
    let (qmin, qmax) = byte_range(ot.dtype);
    let (lo, hi) = activation_range(ot, act);
    let first = if it.dtype == DType::I8 { -128 } else { 0 };
    let mut table = [0i32; 256];
    for (k, t) in table.iter_mut().enumerate() {
        let real = s_in * (first + k as i32 - zp_in) as f32;
        let q = (zp + (real / s).round()).clamp(qmin as f32, qmax as f32) as i32;
        *t = if act == Activation::None {
            q
        } else {
            q.clamp(lo, hi.max(lo))
        };
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::KernelOp;
    use crate::tensor::{PerChannel, Staged};

    fn run(kind: ConvertKind, it: &TensorType, ot: &TensorType, data: &[u8]) -> Vec<u8> {
        let k = Convert::from(kind);
        k.output_shapes(&[it]).unwrap();
        k.check_outputs(&[it], &[ot]).unwrap();
        let mut si = Staged::zeroed(data.len());
        si.bytes_mut().copy_from_slice(data);
        let mut so = Staged::zeroed(ot.numel() * ot.dtype.size() as usize);
        // As the engine does, an output the kernel says it overwrites comes uncleared.
        if k.overwrites_quant8_outputs() && matches!(ot.dtype, DType::U8 | DType::I8) {
            so.bytes_mut().fill(0xA5);
        }
        let ins = [View {
            ty: it,
            bytes: si.bytes(),
        }];
        let mut outs = [ViewMut {
            ty: ot,
            bytes: so.bytes_mut(),
        }];
        k.run(&ins, &mut outs).unwrap();
        so.bytes().to_vec()
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn cast_float_to_u8_and_i32() {
        let it = TensorType::new(DType::F32, &[4]);
        let data = f32_bytes(&[-3.5, 2.7, 300.0, 255.9]);
        let to_u8 = TensorType::quantized(DType::U8, &[4], 1.0, 0);
        assert_eq!(
            run(ConvertKind::Cast, &it, &to_u8, &data),
            vec![0, 2, 255, 255]
        );
        let to_i32 = TensorType::new(DType::I32, &[4]);
        let got = run(ConvertKind::Cast, &it, &to_i32, &data);
        let got: Vec<i32> = got
            .chunks(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, vec![-3, 2, 300, 255]);
    }

    #[test]
    fn quantize_and_dequantize_per_channel() {
        let it = TensorType::new(DType::F32, &[3]);
        let ot = TensorType::quantized(DType::U8, &[3], 0.5, 10);
        let data = f32_bytes(&[-100.0, 1.25, 1.0]);
        // round(2.5) = 3 (half away from zero).
        assert_eq!(run(ConvertKind::Quantize, &it, &ot, &data), vec![0, 13, 12]);

        let mut it = TensorType::quantized(DType::I8, &[2, 2], 0.0, 0);
        it.quant.per_channel = Some(PerChannel {
            axis: 1,
            scales: vec![1.0, 0.5],
        });
        let ot = TensorType::new(DType::F32, &[2, 2]);
        let got = run(ConvertKind::Dequantize, &it, &ot, &[2, 2, 0xFE, 4]);
        let got: Vec<f32> = got
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, vec![2.0, 1.0, -2.0, 2.0]);
    }

    proptest::proptest! {
        #![proptest_config(crate::kernels::proptest_config(64))]
        /// REQUANTIZE gives the bits of DEQUANTIZE to float32, QUANTIZE and the quantised
        /// RELU* it folds, for any per-tensor parameters and both element types, at every
        /// instruction-set level.
        #[test]
        fn requantize_is_dequantize_then_quantize(
            signed_in in proptest::bool::ANY,
            signed_out in proptest::bool::ANY,
            s_in in 1e-4f32..10.0,
            s_out in 1e-4f32..10.0,
            zp_in in 0i32..256,
            zp_out in 0i32..256,
            act in 0u32..4,
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
        ) {
            let ty = |signed: bool, s, zp: i32| if signed {
                TensorType::quantized(DType::I8, &[data.len()], s, zp - 128)
            } else {
                TensorType::quantized(DType::U8, &[data.len()], s, zp)
            };
            let (it, ot) = (ty(signed_in, s_in, zp_in), ty(signed_out, s_out, zp_out));
            let ft = TensorType::new(DType::F32, &[data.len()]);
            let real = run(ConvertKind::Dequantize, &it, &ft, &data);
            let mut want = run(ConvertKind::Quantize, &ft, &ot, &real);
            let act = Activation::from_u32(act).unwrap();
            if act != Activation::None {
                let relu = crate::kernels::Unary {
                    kind: match act {
                        Activation::Relu => crate::kernels::UnaryKind::Relu,
                        Activation::Relu1 => crate::kernels::UnaryKind::Relu1,
                        _ => crate::kernels::UnaryKind::Relu6,
                    },
                };
                let k = KernelOp::from(relu);
                let mut so = Staged::zeroed(want.len());
                let mut si = Staged::zeroed(want.len());
                si.bytes_mut().copy_from_slice(&want);
                crate::kernels::execute(&k, &[View { ty: &ot, bytes: si.bytes() }],
                    &mut [ViewMut { ty: &ot, bytes: so.bytes_mut() }]).unwrap();
                want = so.bytes().to_vec();
            }
            let k = Convert { kind: ConvertKind::Requantize, act };
            k.output_shapes(&[&it]).unwrap();
            k.check_outputs(&[&it], &[&ot]).unwrap();
            let mut si = Staged::zeroed(data.len());
            si.bytes_mut().copy_from_slice(&data);
            let mut so = Staged::zeroed(data.len());
            k.run(&[View { ty: &it, bytes: si.bytes() }], &mut [ViewMut { ty: &ot, bytes: so.bytes_mut() }]).unwrap();
            proptest::prop_assert_eq!(so.bytes(), &want[..]);
            // Every level the CPU has (the affine form at AVX2, the byte table elsewhere).
            for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512].into_iter().filter(|&l| l <= detected()) {
                let mut so = Staged::zeroed(data.len());
                requantize_at(level, "REQUANTIZE", act, View { ty: &it, bytes: si.bytes() },
                    &mut ViewMut { ty: &ot, bytes: so.bytes_mut() }).unwrap();
                proptest::prop_assert_eq!(so.bytes(), &want[..], "{:?}", level);
            }
            // The parameter words round-trip.
            let mut w = vec![];
            k.encode(&mut w);
            proptest::prop_assert_eq!(KernelOp::decode(31, &w).unwrap(), KernelOp::Convert(k));
        }

        /// REQUANTIZE_PRELU gives the bits of DEQUANTIZE to float32, float32 PRELU with the
        /// same slope and QUANTIZE, each run by its own kernel, for any per-tensor
        /// parameters, both element types on each side and a per-channel or single slope.
        #[test]
        fn requantize_prelu_is_dequantize_prelu_quantize(
            signed_in in proptest::bool::ANY,
            signed_out in proptest::bool::ANY,
            s_in in 1e-4f32..10.0,
            s_out in 1e-4f32..10.0,
            zp_in in 0i32..256,
            zp_out in 0i32..256,
            pixels in 0usize..40,
            alpha in proptest::collection::vec(-3.0f32..3.0, 1..24),
            single in proptest::bool::ANY,
            seed in proptest::num::u64::ANY,
        ) {
            let c = alpha.len();
            let shape = [1, pixels, c];
            let alpha_shape: Vec<usize> = if single { vec![1] } else { vec![1, 1, c] };
            let alpha = if single { alpha[..1].to_vec() } else { alpha };
            let n = pixels * c;
            let data: Vec<u8> = (0..n as u64)
                .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed).rotate_left(17) as u8)
                .collect();
            let ty = |signed: bool, s, zp: i32| if signed {
                TensorType::quantized(DType::I8, &shape, s, zp - 128)
            } else {
                TensorType::quantized(DType::U8, &shape, s, zp)
            };
            let (it, ot) = (ty(signed_in, s_in, zp_in), ty(signed_out, s_out, zp_out));
            let ft = TensorType::new(DType::F32, &shape);
            let at = TensorType::new(DType::F32, &alpha_shape);
            let alpha_bytes = f32_bytes(&alpha);
            let run2 = |k: KernelOp, ins: [(&TensorType, &[u8]); 2], ot: &TensorType| {
                let staged: Vec<Staged> = ins.iter().map(|(_, b)| {
                    let mut s = Staged::zeroed(b.len());
                    s.bytes_mut().copy_from_slice(b);
                    s
                }).collect();
                let views: Vec<View> = ins.iter().zip(&staged)
                    .map(|((t, _), s)| View { ty: t, bytes: s.bytes() }).collect();
                let mut so = Staged::zeroed(ot.numel() * ot.dtype.size() as usize);
                if k.overwrites_outputs_of(ot.dtype) {
                    so.bytes_mut().fill(0xA5);
                }
                crate::kernels::execute(&k, &views,
                    &mut [ViewMut { ty: ot, bytes: so.bytes_mut() }]).unwrap();
                so.bytes().to_vec()
            };
            let real = run(ConvertKind::Dequantize, &it, &ft, &data);
            let prelu = KernelOp::from(crate::kernels::MinMax {
                kind: crate::kernels::MinMaxKind::Prelu,
            });
            let slope = run2(prelu, [(&ft, &real), (&at, &alpha_bytes)], &ft);
            let want = run(ConvertKind::Quantize, &ft, &ot, &slope);
            let k = Convert::from(ConvertKind::RequantizePrelu);
            let got = run2(KernelOp::Convert(k.clone()), [(&it, &data), (&at, &alpha_bytes)], &ot);
            proptest::prop_assert_eq!(got, want);
            let mut w = vec![];
            k.encode(&mut w);
            proptest::prop_assert_eq!(KernelOp::decode(31, &w).unwrap(), KernelOp::Convert(k));
        }
    }
}
