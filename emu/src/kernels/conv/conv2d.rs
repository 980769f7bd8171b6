//! NNAPI CONV_2D with explicit padding, strides, dilation, fused activation, NHWC or NCHW.
//! float32 runs on the GEMM (1x1 stride-1 convolutions directly, others through tiled
//! im2col); float16 computes in float32; quantised tensors run on the integer core
//! [`qconv::conv2d`](crate::kernels::qconv::conv2d).
//!
//! Parameter words: pad(4), stride_w, stride_h, dilation_w, dilation_h, act, nchw.
//! Inputs: input, filter `[O,KH,KW,I]`, bias `[O]`; output in the input's layout.

use crate::kernels::conv::{check_conv_types, qerr, quant_dispatch, QStage};
use crate::kernels::gemm::{fill_bias, gemm, Mat, MatMut};
use crate::kernels::kernel::default_check;
use crate::kernels::kernel::{enc, Cost, Kernel, Words};
use crate::kernels::layout::{image_dims, layout_shape, nhwc_dims, window_out, with_nhwc};
use crate::kernels::qconv::{self, Conv2dParams, ConvGeometry};
use crate::kernels::quant::QuantElem;
use crate::kernels::{
    bad_shape, Activation, KernelError, Padding, Result, Tensor, TensorMut, MAX_ELEMENTS,
};
use crate::tensor::{widen_f16, TensorType, View, ViewMut};

/// Scratch budget of one im2col tile, in floats (2 MiB). Tiny under test, so that the
/// property tests exercise the multi-tile path on small shapes.
const IM2COL_TILE: usize = if cfg!(test) { 64 } else { 1 << 19 };

/// A 2-D convolution.
#[derive(Debug, Clone, PartialEq)]
pub struct Conv2d {
    /// Explicit padding.
    pub pad: Padding,
    /// Horizontal stride.
    pub stride_w: u32,
    /// Vertical stride.
    pub stride_h: u32,
    /// Horizontal dilation.
    pub dilation_w: u32,
    /// Vertical dilation.
    pub dilation_h: u32,
    /// Fused activation.
    pub act: Activation,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

impl Kernel for Conv2d {
    fn name(&self) -> &'static str {
        "CONV_2D"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(Conv2d {
            pad: w.padding()?,
            stride_w: w.nonzero("stride_w")?,
            stride_h: w.nonzero("stride_h")?,
            dilation_w: w.nonzero("dilation_w")?,
            dilation_h: w.nonzero("dilation_h")?,
            act: w.act()?,
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend(enc::pad(&self.pad));
        w.extend([
            self.stride_w,
            self.stride_h,
            self.dilation_w,
            self.dilation_h,
            self.act as u32,
            enc::b(self.nchw),
        ]);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        3..=3
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        check_conv_types(name, inputs[0], inputs[1], inputs[2])?;
        let (x, f, bias) = (&inputs[0].shape, &inputs[1].shape, &inputs[2].shape);
        let (n, h, w, c) = image_dims(name, x, self.nchw)?;
        let &[o, kh, kw, fi] = f.as_slice() else {
            return Err(bad_shape(name, format!("filter {f:?} must have rank 4")));
        };
        if h == 0 || w == 0 || c == 0 {
            return Err(bad_shape(
                name,
                format!("input {x:?} has a zero spatial or channel size"),
            ));
        }
        if o == 0 || kh == 0 || kw == 0 {
            return Err(bad_shape(
                name,
                format!("filter {f:?} has a zero dimension"),
            ));
        }
        if fi != c {
            return Err(bad_shape(
                name,
                format!("filter {f:?} has {fi} input channels, input has {c}"),
            ));
        }
        if bias.as_slice() != [o] {
            return Err(bad_shape(name, format!("bias {bias:?} must be [{o}]")));
        }
        let (oh, ow) = window_out(
            (h, w),
            &self.pad,
            (kh, kw),
            (self.dilation_h, self.dilation_w),
            (self.stride_h, self.stride_w),
        )
        .map_err(|r| bad_shape(name, r))?;
        Ok(vec![layout_shape(n, oh, ow, o, self.nchw)])
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let out: u64 = outputs[0].iter().map(|&d| d as u64).product();
        let k: u64 = inputs[1].shape[1..].iter().map(|&d| d as u64).product();
        Cost {
            macs: out.saturating_mul(k),
            elems: out,
        }
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        if inputs[0].dtype.is_float() {
            return default_check(inputs, outputs);
        }
        let o = inputs[1].shape.first().copied().unwrap_or(0);
        QStage::new(
            self.name(),
            self.act,
            [inputs[0], inputs[1], inputs[2], outputs[0]],
            o,
            0,
        )
        .map(|_| ())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        quant_dispatch!(
            inputs,
            outputs,
            |x, f, bias, out, ty| self.run_quant(inputs, ty, x, f, bias, out),
            widen_f16(inputs, outputs, |ins, outs| {
                let (x, f, b) = (
                    Tensor::f32(&ins[0])?,
                    Tensor::f32(&ins[1])?,
                    Tensor::f32(&ins[2])?,
                );
                conv2d_f32(self, x, f, b, TensorMut::f32(&mut outs[0])?)
            })
        )
    }
}

impl Conv2d {
    /// The quantised convolution on the integer core (NNAPI reference rounding).
    fn run_quant<T: QuantElem + Default, F: QuantElem>(
        &self,
        inputs: &[View<'_>],
        out_ty: &TensorType,
        x: Tensor<'_, T>,
        f: &[F],
        bias: &[i32],
        out: TensorMut<'_, T>,
    ) -> Result<()> {
        let name = self.name();
        let fs = inputs[1].shape();
        let stage = QStage::new(
            name,
            self.act,
            [inputs[0].ty, inputs[1].ty, inputs[2].ty, out_ty],
            fs[0],
            0,
        )?;
        let (n, h, w, c) = nhwc_dims(x.shape, self.nchw).ok_or(KernelError::TooLarge)?;
        let (_, oh, ow, o) = nhwc_dims(out.shape, self.nchw).ok_or(KernelError::TooLarge)?;
        let p = Conv2dParams {
            geometry: ConvGeometry {
                batches: n,
                in_h: h,
                in_w: w,
                in_c: c,
                out_h: oh,
                out_w: ow,
                filter_h: fs[1],
                filter_w: fs[2],
                stride_h: self.stride_h as usize,
                stride_w: self.stride_w as usize,
                dilation_h: self.dilation_h as usize,
                dilation_w: self.dilation_w as usize,
                pad_top: self.pad.top as usize,
                pad_left: self.pad.left as usize,
            },
            out_c: o,
            quant: stage.params(),
        };
        with_nhwc(self.nchw, x, out, |src, dst| {
            qconv::conv2d(&p, src, f, bias, dst).map_err(qerr(name))
        })
    }
}

/// The float32 convolution; shapes were validated by `output_shapes`.
pub(crate) fn conv2d_f32(
    p: &Conv2d,
    x: Tensor<'_>,
    f: Tensor<'_>,
    bias: Tensor<'_>,
    out: TensorMut<'_>,
) -> Result<()> {
    let (n, h, w, c) = nhwc_dims(x.shape, p.nchw).ok_or(KernelError::TooLarge)?;
    let (_, oh, ow, o) = nhwc_dims(out.shape, p.nchw).ok_or(KernelError::TooLarge)?;
    let (kh, kw) = (f.shape[1], f.shape[2]);
    let k = kh * kw * c;
    let (sh, sw) = (p.stride_h as usize, p.stride_w as usize);
    let (dh, dw) = (p.dilation_h as usize, p.dilation_w as usize);
    let (pt, pl) = (p.pad.top as usize, p.pad.left as usize);
    let wmat = Mat {
        data: f.data,
        rs: 1,
        cs: k,
    };
    with_nhwc(p.nchw, x, out, |src, dst| {
        fill_bias(dst, bias.data);
        let direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && p.pad == Padding::default();
        if direct {
            // 1x1, stride 1, no padding: the input is already the [N*H*W, C] matrix.
            let m = n * h * w;
            let a = Mat {
                data: src,
                rs: c,
                cs: 1,
            };
            gemm(m, k, o, a, wmat, 1.0, MatMut { data: dst, rs: o })?;
        } else {
            let pixels = oh * ow;
            let tile = (IM2COL_TILE / k).max(16).min(pixels.max(1));
            let scratch_len = tile.checked_mul(k).ok_or(KernelError::TooLarge)?;
            if scratch_len > MAX_ELEMENTS.max(k) {
                return Err(KernelError::TooLarge);
            }
            let mut scratch = vec![0.0f32; scratch_len];
            for b in 0..n {
                let img = &src[b * h * w * c..(b + 1) * h * w * c];
                let obatch = &mut dst[b * pixels * o..(b + 1) * pixels * o];
                let mut p0 = 0;
                while p0 < pixels {
                    let rows = tile.min(pixels - p0);
                    for r in 0..rows {
                        let px_i = p0 + r;
                        let (oy, ox) = (px_i / ow, px_i % ow);
                        let row = &mut scratch[r * k..(r + 1) * k];
                        for ky in 0..kh {
                            // Position in padded coordinates; in the input if in [pt, pt+h).
                            let py = oy * sh + ky * dh;
                            let iy = py.wrapping_sub(pt);
                            for kx in 0..kw {
                                let seg = &mut row[(ky * kw + kx) * c..][..c];
                                let px = ox * sw + kx * dw;
                                let ix = px.wrapping_sub(pl);
                                if py >= pt && iy < h && px >= pl && ix < w {
                                    seg.copy_from_slice(&img[(iy * w + ix) * c..][..c]);
                                } else {
                                    seg.fill(0.0);
                                }
                            }
                        }
                    }
                    let a = Mat {
                        data: &scratch[..rows * k],
                        rs: k,
                        cs: 1,
                    };
                    let cm = MatMut {
                        data: &mut obatch[p0 * o..],
                        rs: o,
                    };
                    gemm(rows, k, o, a, wmat, 1.0, cm)?;
                    p0 += rows;
                }
            }
        }
        p.act.apply_slice(dst);
        Ok(())
    })
}
