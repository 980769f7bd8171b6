//! NNAPI PAD and PAD_V2: `(before, after)` per dimension, filled with `value`. Any element
//! type: `value` is the real value for float tensors and the stored value (e.g. the zero
//! point) for integer and quantised ones.
//!
//! Parameter words: pads (list of `(before, after)` pairs, length = input rank, as
//! `2*rank` words after the count `rank`), value (f32).

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::layout::strides;
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::{bad_shape, KernelError, Result, MAX_RANK};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// Padding of every dimension with a constant.
#[derive(Debug, Clone, PartialEq)]
pub struct Pad {
    /// `(before, after)` per dimension.
    pub pads: Vec<(u32, u32)>,
    /// The fill value.
    pub value: f32,
}

/// The element bytes of `value` in `dtype`, or `None` if it is not representable.
pub(crate) fn fill_bytes(dtype: DType, value: f32) -> Option<Vec<u8>> {
    let int = |lo: i64, hi: i64| {
        let v = value as i64;
        (v as f32 == value && (lo..=hi).contains(&v)).then_some(v)
    };
    Some(match dtype {
        DType::F32 => value.to_le_bytes().to_vec(),
        DType::F16 => half::f16::from_f32(value).to_le_bytes().to_vec(),
        DType::I32 => (int(i32::MIN.into(), i32::MAX.into())? as i32)
            .to_le_bytes()
            .to_vec(),
        DType::U8 | DType::Bool8 => vec![int(0, 255)? as u8],
        DType::I8 => vec![int(-128, 127)? as i8 as u8],
        DType::I16 => (int(-32768, 32767)? as i16).to_le_bytes().to_vec(),
        DType::U16 => (int(0, 65535)? as u16).to_le_bytes().to_vec(),
        // Extension tensors only: nothing pads them.
        DType::U64 => return None,
    })
}

/// Fills `out` with copies of the element `fill`: one element written, then the filled
/// prefix copied onto the rest, doubling each time (log n copies, not one per element).
pub(crate) fn repeat_fill(out: &mut [u8], fill: &[u8]) {
    let es = fill.len();
    if es == 0 || out.len() < es {
        return;
    }
    let whole = out.len() - out.len() % es;
    out[..es].copy_from_slice(fill);
    let mut done = es;
    while done < whole {
        let n = done.min(whole - done);
        out.copy_within(..n, done);
        done += n;
    }
}

impl Kernel for Pad {
    /// The pad value fills the whole output before the input is copied in.
    fn overwrites_f32_outputs(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "PAD"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let n = w.len("rank", MAX_RANK)?;
        if n == 0 {
            return Err(w.err("rank must be at least 1"));
        }
        let mut pads = Vec::with_capacity(n);
        for _ in 0..n {
            pads.push((w.u32("pad before")?, w.u32("pad after")?));
        }
        Ok(Pad {
            pads,
            value: w.f32("value")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.pads.len() as u32);
        for (before, after) in &self.pads {
            w.extend([*before, *after]);
        }
        w.push(self.value.to_bits());
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let x = &inputs[0];
        if self.pads.len() != x.shape.len() || x.shape.is_empty() {
            return Err(bad_shape(
                self.name(),
                format!(
                    "{} paddings for an input of rank {}",
                    self.pads.len(),
                    x.shape.len()
                ),
            ));
        }
        if fill_bytes(x.dtype, self.value).is_none() {
            return Err(bad_shape(
                self.name(),
                format!("pad value {} is not a {:?}", self.value, x.dtype),
            ));
        }
        let shape = x
            .shape
            .iter()
            .zip(&self.pads)
            .map(|(&d, &(a, b))| {
                d.checked_add(a as usize)
                    .and_then(|v| v.checked_add(b as usize))
                    .ok_or(KernelError::TooLarge)
            })
            .collect::<Result<_>>()?;
        Ok(vec![shape])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    /// The output is filled, then each run of the input that stays contiguous in the
    /// output (everything inside the last padded dimension) is copied once: a channel
    /// pad copies one pixel at a time, not one element.
    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let out = &mut outputs[0];
        let es = x.ty.dtype.size() as usize;
        let fill = fill_bytes(x.ty.dtype, self.value)
            .ok_or_else(|| bad_shape("PAD", "unrepresentable pad value"))?;
        match *fill.as_slice() {
            [b] => out.bytes.fill(b),
            _ => repeat_fill(out.bytes, &fill),
        }
        if x.bytes.is_empty() {
            return Ok(());
        }
        let shape = x.shape();
        let rank = shape.len();
        // The last padded dimension: the ones after it are copied whole.
        let last = (0..rank)
            .rev()
            .find(|&d| self.pads[d] != (0, 0))
            .unwrap_or(0);
        let ostr = strides(&out.ty.shape);
        let block = ostr[last] * es;
        let run = shape[last] * block;
        let runs = x.bytes.len() / run;
        let mut idx = vec![0usize; last];
        for r in 0..runs {
            let mut off = self.pads[last].0 as usize * ostr[last];
            for d in 0..last {
                off += (idx[d] + self.pads[d].0 as usize) * ostr[d];
            }
            let off = off * es;
            copy_short(
                &mut out.bytes[off..off + run],
                &x.bytes[r * run..(r + 1) * run],
            );
            for d in (0..last).rev() {
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Ok(())
    }
}

/// `dst.copy_from_slice(src)`, with runs of 16 to 64 bytes (a pixel's channels) as
/// 16-byte moves, the last one overlapping, instead of a call.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if !(16..=64).contains(&n) || dst.len() != n {
        dst.copy_from_slice(src);
        return;
    }
    let mut at = 0;
    while at + 16 < n {
        dst[at..at + 16].copy_from_slice(&src[at..at + 16]);
        at += 16;
    }
    dst[n - 16..].copy_from_slice(&src[n - 16..]);
}

#[cfg(test)]
mod tests {
    #[test]
    fn repeat_fill_writes_every_element() {
        for n in 0..40 {
            let mut out = vec![0u8; n * 3 + 1];
            super::repeat_fill(&mut out, &[1, 2, 3]);
            let want: Vec<u8> = (0..n * 3).map(|i| [1, 2, 3][i % 3]).collect();
            assert_eq!(&out[..n * 3], &want[..]);
            assert_eq!(out[n * 3], 0, "a partial element is left alone");
        }
    }

    #[test]
    fn copy_short_copies_every_length() {
        for n in 0..80 {
            let src: Vec<u8> = (0..n as u8).map(|v| v.wrapping_mul(7) ^ 0x5a).collect();
            let mut dst = vec![0u8; n];
            super::copy_short(&mut dst, &src);
            assert_eq!(dst, src);
        }
    }
}
