//! NNAPI CONCATENATION: `n >= 1` inputs joined along `axis`. Any element type; quantised
//! inputs whose scale or zero point differ from the output's are requantised as the NNAPI
//! reference does (TFLite's scaled concatenation: `round(x * s_in/s_out - zp_in * s_in/s_out)
//! + zp_out`, clamped).
//!
//! Parameter words: axis.

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::{bad_shape, KernelError, Result, MAX_CONCAT_INPUTS, MAX_RANK};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// Concatenation along an axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Concatenation {
    /// The axis (non-negative).
    pub axis: u32,
}

impl Kernel for Concatenation {
    /// The inputs' pieces tile the whole output.
    fn overwrites_f32_outputs(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "CONCATENATION"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let axis = w.u32("axis")?;
        if axis as usize >= MAX_RANK {
            return Err(w.err(format!("axis {axis} out of range")));
        }
        Ok(Concatenation { axis })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.axis);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        1..=MAX_CONCAT_INPUTS
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let first = &inputs[0].shape;
        let axis = self.axis as usize;
        if axis >= first.len() {
            return Err(bad_shape(
                name,
                format!("axis {axis} out of range for rank {}", first.len()),
            ));
        }
        let mut out = first.clone();
        for t in &inputs[1..] {
            if t.dtype != inputs[0].dtype {
                return Err(KernelError::DType {
                    expected: inputs[0].dtype,
                    got: t.dtype,
                });
            }
            let s = &t.shape;
            if s.len() != first.len()
                || s.iter()
                    .zip(first)
                    .enumerate()
                    .any(|(i, (a, b))| i != axis && a != b)
            {
                return Err(bad_shape(
                    name,
                    format!("shapes {first:?} and {s:?} differ outside axis {axis}"),
                ));
            }
            out[axis] = out[axis]
                .checked_add(s[axis])
                .ok_or(KernelError::TooLarge)?;
        }
        Ok(vec![out])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let out_ty = outputs[0].ty;
        let es = out_ty.dtype.size() as usize;
        let axis = self.axis as usize;
        let outer: usize = out_ty.shape[..axis].iter().product();
        let inner: usize = out_ty.shape[axis + 1..].iter().product::<usize>() * es;
        let out = &mut *outputs[0].bytes;
        let mut pos = 0;
        for o in 0..outer {
            for t in inputs {
                let chunk = t.ty.shape[axis] * inner;
                let src = &t.bytes[o * chunk..(o + 1) * chunk];
                let dst = &mut out[pos..pos + chunk];
                if needs_requant(t.ty, out_ty) {
                    requantize(t.ty, out_ty, src, dst);
                } else {
                    dst.copy_from_slice(src);
                }
                pos += chunk;
            }
        }
        Ok(())
    }
}

fn needs_requant(x: &TensorType, out: &TensorType) -> bool {
    matches!(x.dtype, DType::U8 | DType::I8)
        && (x.quant.scale != out.quant.scale || x.quant.zero_point != out.quant.zero_point)
}

/// Requantises 8-bit elements from `x`'s parameters to `out`'s.
fn requantize(x: &TensorType, out: &TensorType, src: &[u8], dst: &mut [u8]) {
    let scale = x.quant.scale / out.quant.scale;
    let bias = -(x.quant.zero_point as f32) * scale;
    let signed = x.dtype == DType::I8;
    let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
    for (d, &s) in dst.iter_mut().zip(src) {
        let v = if signed {
            i32::from(s as i8)
        } else {
            i32::from(s)
        };
        let q = ((v as f32 * scale + bias).round() as i32 + out.quant.zero_point).clamp(lo, hi);
        *d = if signed { (q as i8) as u8 } else { q as u8 };
    }
}
