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
    /// Every output byte is a copied input byte or the pad value.
    fn overwrites_f32_outputs(&self) -> bool {
        true
    }

    fn overwrites_quant8_outputs(&self) -> bool {
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

    /// Each run of the input that stays contiguous in the output (everything inside the
    /// last padded dimension) is copied once, and the gaps between runs are filled (byte
    /// outputs are filled whole first instead): a channel pad copies one pixel and fills
    /// its padded channels at a time.
    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let out = &mut outputs[0];
        let es = x.ty.dtype.size() as usize;
        let fill = fill_bytes(x.ty.dtype, self.value)
            .ok_or_else(|| bad_shape("PAD", "unrepresentable pad value"))?;
        // A gap between two runs (or before the first, after the last) is padding.
        let uniform = fill
            .first()
            .filter(|&&b| fill.iter().all(|&f| f == b))
            .copied();
        let fill_gap = |gap: &mut [u8]| match uniform {
            Some(b) => fill_short(gap, b),
            None => repeat_fill(gap, &fill),
        };
        // Byte elements: one fill of the whole output, then the copies (measured faster
        // than a few padded bytes filled between each pixel's copies: face_detection_
        // short_range_int8's PADs 0.13 vs 0.18 ms); wider ones fill only the gaps.
        let gaps = es > 1 && !x.bytes.is_empty();
        if !gaps {
            fill_gap(out.bytes);
            if x.bytes.is_empty() {
                return Ok(());
            }
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
        // Runs come in increasing output order: the bytes between them are padding.
        let mut at = 0;
        for r in 0..runs {
            let mut off = self.pads[last].0 as usize * ostr[last];
            for d in 0..last {
                off += (idx[d] + self.pads[d].0 as usize) * ostr[d];
            }
            let off = off * es;
            if gaps {
                fill_gap(&mut out.bytes[at..off]);
            }
            copy_short(
                &mut out.bytes[off..off + run],
                &x.bytes[r * run..(r + 1) * run],
            );
            at = off + run;
            for d in (0..last).rev() {
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        if gaps {
            fill_gap(&mut out.bytes[at..]);
        }
        Ok(())
    }
}

/// `dst.fill(b)`, with runs of 16 to 64 bytes (a pixel's padded channels) as 16-byte
/// moves, the last one overlapping, instead of a call.
#[inline(always)]
fn fill_short(dst: &mut [u8], b: u8) {
    let n = dst.len();
    if !(16..=64).contains(&n) {
        dst.fill(b);
        return;
    }
    let v = [b; 16];
    let mut at = 0;
    while at + 16 < n {
        dst[at..at + 16].copy_from_slice(&v);
        at += 16;
    }
    dst[n - 16..].copy_from_slice(&v);
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

    /// Int8 PAD over outputs full of garbage (as the engine hands them, since the kernel
    /// says it writes every byte) gives each output element the input element it maps
    /// to, else the pad value: channel pads with gaps around 16-64 bytes, every dimension.
    #[test]
    fn int8_pad_writes_every_byte() {
        use crate::kernels::Kernel;
        use crate::tensor::{DType, Quant, TensorType, View, ViewMut};
        type Case<'a> = (&'a [usize], &'a [(u32, u32)]);
        let cases: [Case<'_>; 6] = [
            (&[1, 3, 4, 24], &[(0, 0), (0, 0), (0, 0), (0, 24)]),
            (&[1, 2, 2, 16], &[(0, 0), (1, 1), (0, 2), (0, 48)]),
            (&[2, 3, 5], &[(1, 0), (0, 2), (3, 1)]),
            (&[4, 40], &[(0, 0), (17, 0)]),
            (&[3], &[(2, 5)]),
            (&[2, 0, 3], &[(1, 1), (1, 0), (0, 1)]),
        ];
        for (shape, pads) in cases {
            let pad = super::Pad {
                pads: pads.to_vec(),
                value: -7.0,
            };
            let q = Quant::new(0.5, 3);
            let xt = TensorType {
                quant: q.clone(),
                ..TensorType::new(DType::I8, shape)
            };
            let oshape: Vec<usize> = shape
                .iter()
                .zip(pads)
                .map(|(&d, &(a, b))| d + (a + b) as usize)
                .collect();
            let ot = TensorType {
                quant: q,
                ..TensorType::new(DType::I8, &oshape)
            };
            let x: Vec<u8> = (0..xt.numel()).map(|i| (i * 37 % 251) as u8).collect();
            let mut out = vec![0xA5u8; ot.numel()];
            let inputs = [View { ty: &xt, bytes: &x }];
            let mut outputs = [ViewMut {
                ty: &ot,
                bytes: &mut out,
            }];
            pad.run(&inputs, &mut outputs).unwrap();
            for (i, &got) in out.iter().enumerate() {
                // Output index -> coordinates -> input element, if inside.
                let mut rest = i;
                let mut src = Some(0usize);
                for (d, (&xd, &(before, _))) in shape.iter().zip(pads).enumerate() {
                    let below: usize = oshape[d + 1..].iter().product();
                    let c = rest / below;
                    rest %= below;
                    let inner: usize = shape[d + 1..].iter().product();
                    src = match c.checked_sub(before as usize).filter(|&c| c < xd) {
                        Some(c) => src.map(|s| s + c * inner),
                        None => None,
                    };
                }
                let want = src.map_or(-7i8 as u8, |s| x[s]);
                assert_eq!(got, want, "{shape:?} {pads:?} at {i}");
            }
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
