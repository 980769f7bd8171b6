//! NNAPI CAST, QUANTIZE and DEQUANTIZE: element type conversions.
//!
//! - CAST between float32, float16, int32 and uint8 (quantised types as their stored
//!   integers, as the reference): to int32 truncates toward zero (saturating), to uint8
//!   clamps to [0, 255] then truncates; any other type only to itself (a copy).
//! - QUANTIZE float32/float16 -> uint8/int8: `clamp(zero_point + round(x / scale))`, in
//!   float32 as the reference does (the reference itself quantises in float).
//! - DEQUANTIZE uint8/int8 (per-tensor or per-channel) -> float32/float16:
//!   `scale * (q - zero_point)` in float32, then narrowed for float16.
//!
//! Parameter words: kind (Cast 0, Quantize 1, Dequantize 2).

use half::f16;

use super::{decode_kind, kind_enum};
use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::{KernelError, Result};
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
    }
}

/// One conversion.
#[derive(Debug, Clone, PartialEq)]
pub struct Convert {
    /// The conversion.
    pub kind: ConvertKind,
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
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let kind = decode_kind(w, "conversion", ConvertKind::from_word)?;
        Ok(Convert { kind })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.kind.word());
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let t = inputs[0];
        let ok = match self.kind {
            ConvertKind::Cast => true,
            ConvertKind::Quantize => t.dtype.is_float(),
            ConvertKind::Dequantize => matches!(t.dtype, DType::U8 | DType::I8),
        };
        if !ok {
            return Err(KernelError::UnsupportedDType {
                op: self.name(),
                dtype: t.dtype,
            });
        }
        if self.kind == ConvertKind::Dequantize {
            t.validate_quant().map_err(|e| self.bad(e))?;
        }
        Ok(vec![t.shape.clone()])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let (i, o) = (inputs[0].dtype, outputs[0].dtype);
        let ok = match self.kind {
            ConvertKind::Cast => i == o || (CAST_TYPES.contains(&i) && CAST_TYPES.contains(&o)),
            ConvertKind::Quantize => matches!(o, DType::U8 | DType::I8),
            ConvertKind::Dequantize => o.is_float(),
        };
        if !ok {
            return Err(self.bad(format!("cannot convert {i:?} to {o:?}")));
        }
        if self.kind == ConvertKind::Quantize {
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
                    let q = |v: f32| (zp + (v / s).round()).clamp(lo, hi);
                    let src = x.f32s()?;
                    match o.ty.dtype {
                        DType::I8 => zip_map(src, o.i8s_mut()?, |v| q(v) as i8),
                        _ => zip_map(src, o.u8s_mut()?, |v| q(v) as u8),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{PerChannel, Staged};

    fn run(kind: ConvertKind, it: &TensorType, ot: &TensorType, data: &[u8]) -> Vec<u8> {
        let k = Convert { kind };
        k.output_shapes(&[it]).unwrap();
        k.check_outputs(&[it], &[ot]).unwrap();
        let mut si = Staged::zeroed(data.len());
        si.bytes_mut().copy_from_slice(data);
        let mut so = Staged::zeroed(ot.numel() * ot.dtype.size() as usize);
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
}
