//! NNAPI RESIZE_NEAREST_NEIGHBOR (TFLite's coordinates: align_corners rounds, otherwise
//! floors; half_pixel_centers samples at pixel centres), NHWC or NCHW. Any element type
//! (pure data movement, so float16 and quantised tensors are copied bit for bit).
//!
//! Parameter words: out_h, out_w, align_corners, half_pixel_centers, nchw.

use crate::kernels::image::resize_bilinear::resize_scale;
use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::layout::{by_size, image_dims, layout_shape};
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::{bad_shape, Result};
use crate::tensor::{TensorType, View, ViewMut};

/// Nearest-neighbour resize to a fixed output size.
#[derive(Debug, Clone, PartialEq)]
pub struct ResizeNearest {
    /// Output height.
    pub out_h: u32,
    /// Output width.
    pub out_w: u32,
    /// Align the corner pixels of input and output (round instead of floor).
    pub align_corners: bool,
    /// Sample at pixel centres.
    pub half_pixel_centers: bool,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

/// The source index of output index `dst`, as the NNAPI reference computes it (in f32).
pub(crate) fn nearest_index(
    dst: usize,
    scale: f32,
    align_corners: bool,
    half_pixel: bool,
    size: usize,
) -> usize {
    let v = if half_pixel {
        (dst as f32 + 0.5) * scale
    } else {
        dst as f32 * scale
    };
    // `f32::round` rounds half away from zero, as C's roundf.
    let v = if align_corners { v.round() } else { v.floor() };
    if v <= 0.0 {
        0
    } else if v >= size as f32 {
        size - 1
    } else {
        (v as usize).min(size - 1)
    }
}

impl Kernel for ResizeNearest {
    fn name(&self) -> &'static str {
        "RESIZE_NEAREST_NEIGHBOR"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(ResizeNearest {
            out_h: w.nonzero("out_h")?,
            out_w: w.nonzero("out_w")?,
            align_corners: w.bool("align_corners")?,
            half_pixel_centers: w.bool("half_pixel_centers")?,
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([
            self.out_h,
            self.out_w,
            enc::b(self.align_corners),
            enc::b(self.half_pixel_centers),
            enc::b(self.nchw),
        ]);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let x = &inputs[0].shape;
        let (n, h, w, c) = image_dims(name, x, self.nchw)?;
        if h == 0 || w == 0 || c == 0 {
            return Err(bad_shape(
                name,
                format!("input {x:?} has a zero spatial or channel size"),
            ));
        }
        Ok(vec![layout_shape(
            n,
            self.out_h as usize,
            self.out_w as usize,
            c,
            self.nchw,
        )])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let (x, out) = (inputs[0], &mut outputs[0]);
        let (n, h, w, c) = image_dims(self.name(), x.shape(), self.nchw)?;
        let (oh, ow) = (self.out_h as usize, self.out_w as usize);
        let sy = resize_scale(h, oh, self.align_corners);
        let sx = resize_scale(w, ow, self.align_corners);
        let (ac, hp) = (self.align_corners, self.half_pixel_centers);
        let ys: Vec<usize> = (0..oh).map(|i| nearest_index(i, sy, ac, hp, h)).collect();
        let xs: Vec<usize> = (0..ow).map(|i| nearest_index(i, sx, ac, hp, w)).collect();
        let nchw = self.nchw;
        by_size!(x.ty.dtype.size(), x.bytes, &mut *out.bytes, |s, d| {
            let mut pos = 0;
            if nchw {
                for b in 0..n {
                    for ch in 0..c {
                        let plane = &s[(b * c + ch) * h * w..][..h * w];
                        for &y in &ys {
                            for &xx in &xs {
                                d[pos] = plane[y * w + xx];
                                pos += 1;
                            }
                        }
                    }
                }
            } else {
                for b in 0..n {
                    let img = &s[b * h * w * c..][..h * w * c];
                    for &y in &ys {
                        for &xx in &xs {
                            d[pos..pos + c].copy_from_slice(&img[(y * w + xx) * c..][..c]);
                            pos += c;
                        }
                    }
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Plain reference in f64 arithmetic on the same coordinate rules.
    fn reference_index(dst: usize, inp: usize, out: usize, ac: bool, hp: bool) -> usize {
        let scale = if ac && out > 1 {
            (inp - 1) as f32 / (out - 1) as f32
        } else {
            inp as f32 / out as f32
        };
        let off = if hp { 0.5f32 } else { 0.0 };
        let v = (dst as f32 + off) * scale;
        let v = if ac { v.round() } else { v.floor() };
        (v.max(0.0) as usize).min(inp - 1)
    }

    #[test]
    fn upscale_2x_nhwc() {
        assert_eq!(nearest_index(0, 0.5, false, false, 2), 0);
        assert_eq!(nearest_index(1, 0.5, false, false, 2), 0);
        assert_eq!(nearest_index(2, 0.5, false, false, 2), 1);
        assert_eq!(nearest_index(3, 0.5, false, false, 2), 1);
    }

    proptest! {
        #[test]
        fn index_in_range(
            inp in 1usize..40,
            (out, d) in (1usize..40).prop_flat_map(|out| (Just(out), 0..out)),
            ac: bool,
            hp: bool,
        ) {
            let s = resize_scale(inp, out, ac);
            let i = nearest_index(d, s, ac, hp, inp);
            prop_assert!(i < inp);
            prop_assert_eq!(i, reference_index(d, inp, out, ac, hp));
        }
    }
}
