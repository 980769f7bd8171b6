//! NNAPI DEPTHWISE_CONV_2D: output channel `c*M+m` reads input channel `c`.
//! float32 direct; float16 computes in float32; quantised tensors run on the integer core
//! [`qconv::depthwise_conv2d`](crate::kernels::qconv::depthwise_conv2d).
//!
//! Parameter words: pad(4), stride_w, stride_h, dilation_w, dilation_h, depth_multiplier,
//! act, nchw. Inputs: input, filter `[1,KH,KW,C*M]`, bias `[C*M]`.

use crate::kernels::conv::{check_conv_types, qerr, quant_dispatch, QStage};
use crate::kernels::kernel::default_check;
use crate::kernels::kernel::{enc, Cost, Kernel, Words};
use crate::kernels::layout::{image_dims, layout_shape, nhwc_dims, window_out, with_nhwc};
use crate::kernels::qconv::{self, ConvGeometry, DepthwiseConv2dParams};
use crate::kernels::quant::QuantElem;
use crate::kernels::{bad_shape, Activation, KernelError, Padding, Result, Tensor, TensorMut};
use crate::tensor::{widen_f16, TensorType, View, ViewMut};

/// A depthwise 2-D convolution.
#[derive(Debug, Clone, PartialEq)]
pub struct DepthwiseConv2d {
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
    /// Output channels per input channel.
    pub depth_multiplier: u32,
    /// Fused activation.
    pub act: Activation,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

impl Kernel for DepthwiseConv2d {
    fn name(&self) -> &'static str {
        "DEPTHWISE_CONV_2D"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(DepthwiseConv2d {
            pad: w.padding()?,
            stride_w: w.nonzero("stride_w")?,
            stride_h: w.nonzero("stride_h")?,
            dilation_w: w.nonzero("dilation_w")?,
            dilation_h: w.nonzero("dilation_h")?,
            depth_multiplier: w.nonzero("depth_multiplier")?,
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
            self.depth_multiplier,
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
        let &[one, kh, kw, oc] = f.as_slice() else {
            return Err(bad_shape(name, format!("filter {f:?} must have rank 4")));
        };
        if h == 0 || w == 0 || c == 0 {
            return Err(bad_shape(
                name,
                format!("input {x:?} has a zero spatial or channel size"),
            ));
        }
        if one != 1 || kh == 0 || kw == 0 {
            return Err(bad_shape(
                name,
                format!("filter {f:?} must be [1,KH,KW,C*M], KH,KW > 0"),
            ));
        }
        let want = c
            .checked_mul(self.depth_multiplier as usize)
            .ok_or(KernelError::TooLarge)?;
        if oc != want {
            return Err(bad_shape(
                name,
                format!(
                    "filter {f:?} has {oc} channels, input channels {c} * multiplier {} = {want}",
                    self.depth_multiplier
                ),
            ));
        }
        if bias.as_slice() != [oc] {
            return Err(bad_shape(name, format!("bias {bias:?} must be [{oc}]")));
        }
        let (oh, ow) = window_out(
            (h, w),
            &self.pad,
            (kh, kw),
            (self.dilation_h, self.dilation_w),
            (self.stride_h, self.stride_w),
        )
        .map_err(|r| bad_shape(name, r))?;
        Ok(vec![layout_shape(n, oh, ow, oc, self.nchw)])
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let out: u64 = outputs[0].iter().map(|&d| d as u64).product();
        let k: u64 = inputs[1].shape[1..3].iter().map(|&d| d as u64).product();
        Cost {
            macs: out.saturating_mul(k),
            elems: out,
        }
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        if inputs[0].dtype.is_float() {
            return default_check(inputs, outputs);
        }
        let oc = inputs[1].shape.get(3).copied().unwrap_or(0);
        QStage::new(
            self.name(),
            self.act,
            [inputs[0], inputs[1], inputs[2], outputs[0]],
            oc,
            3,
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
                depthwise_f32(self, x, f, b, TensorMut::f32(&mut outs[0])?)
            })
        )
    }
}

impl DepthwiseConv2d {
    /// The quantised depthwise convolution on the integer core (NNAPI reference rounding).
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
        let (n, h, w, c) = nhwc_dims(x.shape, self.nchw).ok_or(KernelError::TooLarge)?;
        let (_, oh, ow, oc) = nhwc_dims(out.shape, self.nchw).ok_or(KernelError::TooLarge)?;
        let stage = QStage::new(
            name,
            self.act,
            [inputs[0].ty, inputs[1].ty, inputs[2].ty, out_ty],
            oc,
            3,
        )?;
        let p = DepthwiseConv2dParams {
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
            depth_multiplier: self.depth_multiplier as usize,
            quant: stage.params(),
        };
        with_nhwc(self.nchw, x, out, |src, dst| {
            qconv::depthwise_conv2d(&p, src, f, bias, dst).map_err(qerr(name))
        })
    }
}

/// The float32 depthwise convolution; shapes were validated by `output_shapes`.
pub(crate) fn depthwise_f32(
    p: &DepthwiseConv2d,
    x: Tensor<'_>,
    f: Tensor<'_>,
    bias: Tensor<'_>,
    out: TensorMut<'_>,
) -> Result<()> {
    let (_, h, w, c) = nhwc_dims(x.shape, p.nchw).ok_or(KernelError::TooLarge)?;
    let (_, oh, ow, oc) = nhwc_dims(out.shape, p.nchw).ok_or(KernelError::TooLarge)?;
    let (kh, kw) = (f.shape[1], f.shape[2]);
    let mult = p.depth_multiplier as usize;
    let (sh, sw) = (p.stride_h as usize, p.stride_w as usize);
    let (dh, dw) = (p.dilation_h as usize, p.dilation_w as usize);
    let (pt, pl) = (p.pad.top as usize, p.pad.left as usize);
    with_nhwc(p.nchw, x, out, |src, dst| {
        if oc == 0 {
            return Ok(());
        }
        for (pix, acc) in dst.chunks_exact_mut(oc).enumerate() {
            let b = pix / (oh * ow);
            let (oy, ox) = ((pix / ow) % oh, pix % ow);
            acc.copy_from_slice(bias.data);
            for ky in 0..kh {
                let py = oy * sh + ky * dh;
                let iy = py.wrapping_sub(pt);
                if py < pt || iy >= h {
                    continue;
                }
                for kx in 0..kw {
                    let px = ox * sw + kx * dw;
                    let ix = px.wrapping_sub(pl);
                    if px < pl || ix >= w {
                        continue;
                    }
                    let inp = &src[((b * h + iy) * w + ix) * c..][..c];
                    let wt = &f.data[(ky * kw + kx) * oc..][..oc];
                    if mult == 1 {
                        for ((a, &v), &k) in acc.iter_mut().zip(inp).zip(wt) {
                            *a += v * k;
                        }
                    } else {
                        for ((a, k), &v) in acc
                            .chunks_exact_mut(mult)
                            .zip(wt.chunks_exact(mult))
                            .zip(inp)
                        {
                            for (a, &k) in a.iter_mut().zip(k) {
                                *a += v * k;
                            }
                        }
                    }
                }
            }
        }
        p.act.apply_slice(dst);
        Ok(())
    })
}
