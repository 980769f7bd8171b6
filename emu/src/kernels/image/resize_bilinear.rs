//! NNAPI RESIZE_BILINEAR (TFLite's coordinates: align_corners, half_pixel_centers), NHWC or
//! NCHW. float32; float16 computes in float32. Quantised u8/i8: the NNAPI reference
//! (TFLite's templated ResizeBilinear) interpolates the stored integers in float and casts
//! the result back (truncating); this kernel does the same, and the output keeps the input's
//! scale and zero point.
//!
//! Parameter words: out_h, out_w, align_corners, half_pixel_centers, nchw.

use crate::kernels::kernel::{enc, same_dtype, Cost, Kernel, Words};
use crate::kernels::layout::{image_dims, layout_shape, nhwc_dims, with_nhwc};
use crate::kernels::{bad_shape, KernelError, Result, Tensor, TensorMut};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

/// Bilinear resize to a fixed output size.
#[derive(Debug, Clone, PartialEq)]
pub struct ResizeBilinear {
    /// Output height.
    pub out_h: u32,
    /// Output width.
    pub out_w: u32,
    /// Align the corner pixels of input and output.
    pub align_corners: bool,
    /// Sample at pixel centres.
    pub half_pixel_centers: bool,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

impl Kernel for ResizeBilinear {
    /// Every output pixel is interpolated in turn.
    fn overwrites_f32_outputs(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "RESIZE_BILINEAR"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let (out_h, out_w, align_corners, half_pixel_centers) = decode_geometry(w)?;
        Ok(ResizeBilinear {
            out_h,
            out_w,
            align_corners,
            half_pixel_centers,
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        let geometry = (self.out_h, self.out_w);
        encode_geometry(w, geometry, self.align_corners, self.half_pixel_centers);
        w.push(enc::b(self.nchw));
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let types = [DType::F32, DType::F16, DType::U8, DType::I8];
        let size = (self.out_h, self.out_w);
        resized_shape(self.name(), inputs, &types, size, self.nchw)
    }

    fn cost(&self, _inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let out: u64 = outputs[0].iter().map(|&d| d as u64).product();
        Cost {
            macs: 0,
            elems: out.saturating_mul(4),
        }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let xf: Vec<f32> = match x.ty.dtype {
            DType::U8 => x.u8s()?.iter().map(|&v| f32::from(v)).collect(),
            DType::I8 => x.i8s()?.iter().map(|&v| f32::from(v)).collect(),
            _ => Vec::new(),
        };
        if matches!(x.ty.dtype, DType::U8 | DType::I8) {
            let oshape = outputs[0].ty.shape.clone();
            let mut of = vec![0f32; outputs[0].bytes.len()];
            resize_bilinear_f32(
                self.align_corners,
                self.half_pixel_centers,
                self.nchw,
                Tensor {
                    shape: x.shape(),
                    data: &xf,
                },
                TensorMut {
                    shape: &oshape,
                    data: &mut of,
                },
            )?;
            // `as` truncates toward zero (and saturates), as the C++ static_cast.
            match x.ty.dtype {
                DType::U8 => {
                    for (o, &v) in outputs[0].u8s_mut()?.iter_mut().zip(&of) {
                        *o = v as u8;
                    }
                }
                _ => {
                    for (o, &v) in outputs[0].i8s_mut()?.iter_mut().zip(&of) {
                        *o = v as i8;
                    }
                }
            }
            return Ok(());
        }
        widen_f16(inputs, outputs, |ins, outs| {
            resize_bilinear_f32(
                self.align_corners,
                self.half_pixel_centers,
                self.nchw,
                Tensor::f32(&ins[0])?,
                TensorMut::f32(&mut outs[0])?,
            )
        })
    }
}

/// The parameter words both bilinear resizes begin with: out_h, out_w (not 0),
/// align_corners and half_pixel_centers (not both).
pub(crate) fn decode_geometry(w: &mut Words<'_>) -> Result<(u32, u32, bool, bool)> {
    let out_h = w.nonzero("out_h")?;
    let out_w = w.nonzero("out_w")?;
    let align_corners = w.bool("align_corners")?;
    let half_pixel_centers = w.bool("half_pixel_centers")?;
    if align_corners && half_pixel_centers {
        return Err(w.err("align_corners and half_pixel_centers are exclusive"));
    }
    Ok((out_h, out_w, align_corners, half_pixel_centers))
}

/// Writes the words [`decode_geometry`] reads.
pub(crate) fn encode_geometry(
    w: &mut Vec<u32>,
    (out_h, out_w): (u32, u32),
    align_corners: bool,
    half_pixel_centers: bool,
) {
    w.extend([
        out_h,
        out_w,
        enc::b(align_corners),
        enc::b(half_pixel_centers),
    ]);
}

/// The output shape of resizing image `inputs[0]` (of one of `types`, every input alike)
/// to `(out_h, out_w)`, after checking it has no zero size.
pub(crate) fn resized_shape(
    name: &'static str,
    inputs: &[&TensorType],
    types: &[DType],
    (out_h, out_w): (u32, u32),
    nchw: bool,
) -> Result<Vec<Vec<usize>>> {
    same_dtype(name, inputs, types)?;
    let x = &inputs[0].shape;
    let (n, h, w, c) = image_dims(name, x, nchw)?;
    if h == 0 || w == 0 || c == 0 {
        return Err(bad_shape(
            name,
            format!("input {x:?} has a zero spatial or channel size"),
        ));
    }
    Ok(vec![layout_shape(
        n,
        out_h as usize,
        out_w as usize,
        c,
        nchw,
    )])
}

/// TFLite's interpolation coordinates: the source position and its clamped lower and upper
/// neighbours.
fn interp(dst: usize, scale: f32, half_pixel: bool, size: usize) -> (f32, usize, usize) {
    let v = if half_pixel {
        (dst as f32 + 0.5) * scale - 0.5
    } else {
        dst as f32 * scale
    };
    let last = size - 1;
    let lo = v.floor();
    let lo = if lo <= 0.0 {
        0
    } else {
        (lo as usize).min(last)
    };
    let hi = v.ceil();
    let hi = if hi <= 0.0 {
        0
    } else {
        (hi as usize).min(last)
    };
    (v, lo, hi)
}

pub(crate) fn resize_scale(input: usize, output: usize, align_corners: bool) -> f32 {
    if align_corners && output > 1 {
        (input - 1) as f32 / (output - 1) as f32
    } else {
        input as f32 / output as f32
    }
}

/// The float32 resize; shapes were validated by `output_shapes`.
pub(crate) fn resize_bilinear_f32(
    align_corners: bool,
    half_pixel: bool,
    nchw: bool,
    x: Tensor<'_>,
    out: TensorMut<'_>,
) -> Result<()> {
    let (n, h, w, c) = nhwc_dims(x.shape, nchw).ok_or(KernelError::TooLarge)?;
    let (_, oh, ow, _) = nhwc_dims(out.shape, nchw).ok_or(KernelError::TooLarge)?;
    let sy = resize_scale(h, oh, align_corners);
    let sx = resize_scale(w, ow, align_corners);
    let xs: Vec<(f32, usize, usize)> = (0..ow).map(|i| interp(i, sx, half_pixel, w)).collect();
    with_nhwc(nchw, x, out, |src, dst| {
        let mut pos = 0;
        for b in 0..n {
            let img = &src[b * h * w * c..(b + 1) * h * w * c];
            for oy in 0..oh {
                let (fy, y0, y1) = interp(oy, sy, half_pixel, h);
                let dy = fy - y0 as f32;
                for &(fx, x0, x1) in &xs {
                    let dx = fx - x0 as f32;
                    let p00 = &img[(y0 * w + x0) * c..][..c];
                    let p01 = &img[(y0 * w + x1) * c..][..c];
                    let p10 = &img[(y1 * w + x0) * c..][..c];
                    let p11 = &img[(y1 * w + x1) * c..][..c];
                    for ch in 0..c {
                        dst[pos + ch] = p00[ch] * (1.0 - dy) * (1.0 - dx)
                            + p10[ch] * dy * (1.0 - dx)
                            + p01[ch] * (1.0 - dy) * dx
                            + p11[ch] * dy * dx;
                    }
                    pos += c;
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod quant_tests {
    use super::*;
    use crate::kernels::conv::testref::Q8;
    use crate::kernels::conv::testutil::run_typed;
    use crate::kernels::KernelOp;
    use proptest::prelude::*;

    /// TFLite's source coordinate of output index `d` and its clamped neighbours, in f64.
    fn source(
        d: usize,
        input: usize,
        output: usize,
        align: bool,
        half: bool,
    ) -> (f64, usize, usize) {
        let scale = if align && output > 1 {
            (input - 1) as f64 / (output - 1) as f64
        } else {
            input as f64 / output as f64
        };
        let v = if half {
            (d as f64 + 0.5) * scale - 0.5
        } else {
            d as f64 * scale
        };
        let lo = (v.floor().max(0.0) as usize).min(input - 1);
        let hi = (v.ceil().max(0.0) as usize).min(input - 1);
        (v, lo, hi)
    }

    proptest! {
        /// u8 / i8 NHWC against dequantise -> f64 interpolation -> requantise (the output
        /// keeps the input's quantisation), within 1.
        #[test]
        fn quant_interpolates_within_one_of_f64(
            (h, w, c) in (1usize..4, 1usize..4, 1usize..3),
            (oh, ow) in (1u32..7, 1u32..7),
            mode in 0u8..3,
            q in Q8::arb(),
            raw in proptest::collection::vec(0i32..256, 18),
        ) {
            let (align, half) = (mode == 1, mode == 2);
            let (xs, bytes) = q.store(&raw[..h * w * c]);
            let op = KernelOp::from(ResizeBilinear { out_h: oh, out_w: ow, align_corners: align, half_pixel_centers: half, nchw: false });
            let out = q.load(&run_typed(&op, &[(q.ty(&[1, h, w, c]), bytes)], q.ty(&[1])).unwrap());
            let (oh, ow) = (oh as usize, ow as usize);
            prop_assert_eq!(out.len(), oh * ow * c);
            let real = |y: usize, x: usize, ch: usize| q.real(xs[(y * w + x) * c + ch]);
            for oy in 0..oh {
                let (fy, y0, y1) = source(oy, h, oh, align, half);
                let dy = fy - y0 as f64;
                for ox in 0..ow {
                    let (fx, x0, x1) = source(ox, w, ow, align, half);
                    let dx = fx - x0 as f64;
                    for ch in 0..c {
                        let v = real(y0, x0, ch) * (1.0 - dy) * (1.0 - dx)
                            + real(y1, x0, ch) * dy * (1.0 - dx)
                            + real(y0, x1, ch) * (1.0 - dy) * dx
                            + real(y1, x1, ch) * dy * dx;
                        let (want, got) = (q.quantize(v), out[(oy * ow + ox) * c + ch]);
                        prop_assert!((got - want).abs() <= 1, "{} vs {}", got, want);
                    }
                }
            }
        }
    }
}
