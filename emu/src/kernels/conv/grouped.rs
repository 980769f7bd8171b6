//! NNAPI GROUPED_CONV_2D: the input channels and the output channels are split into
//! `groups` equal parts and part `g` of the output is CONV_2D of part `g` of the input.
//! Each group runs the CONV_2D cores (float32 GEMM, float16 in float32, integer cores for
//! quantised tensors with per-tensor or per-channel filters).
//!
//! Parameter words: pad(4), stride_w, stride_h, groups, act, nchw.
//! Inputs: input `[N,H,W,C]`, filter `[O,KH,KW,C/groups]`, bias `[O]`.

use crate::kernels::conv::conv2d::{conv2d_f32, Conv2d};
use crate::kernels::conv::{check_conv_types, qerr, quant_dispatch, QStage};
use crate::kernels::kernel::{default_check, enc, Cost, Kernel, Words};
use crate::kernels::layout::{image_dims, layout_shape, nhwc_dims, window_out, with_nhwc};
use crate::kernels::qconv::{self, Conv2dParams, ConvGeometry, PerChannel, QuantParams};
use crate::kernels::quant::QuantElem;
use crate::kernels::{bad_shape, Activation, KernelError, Padding, Result, Tensor, TensorMut};
use crate::tensor::{widen_f16, TensorType, View, ViewMut};

/// A grouped 2-D convolution.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupedConv2d {
    /// Explicit padding.
    pub pad: Padding,
    /// Horizontal stride.
    pub stride_w: u32,
    /// Vertical stride.
    pub stride_h: u32,
    /// Number of groups.
    pub groups: u32,
    /// Fused activation.
    pub act: Activation,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

/// Copies channels `[c0, c0 + len)` of every pixel of an NHWC buffer with `c` channels.
fn gather_channels<T: Copy>(src: &[T], c: usize, c0: usize, len: usize) -> Vec<T> {
    src.chunks_exact(c)
        .flat_map(|px| px[c0..c0 + len].iter().copied())
        .collect()
}

/// Writes an NHWC buffer with `len` channels to channels `[c0, c0 + len)` of `dst`.
fn scatter_channels<T: Copy>(part: &[T], dst: &mut [T], c: usize, c0: usize, len: usize) {
    for (d, s) in dst.chunks_exact_mut(c).zip(part.chunks_exact(len)) {
        d[c0..c0 + len].copy_from_slice(s);
    }
}

impl GroupedConv2d {
    /// The per-group convolution.
    fn conv(&self) -> Conv2d {
        Conv2d {
            pad: self.pad,
            stride_w: self.stride_w,
            stride_h: self.stride_h,
            dilation_w: 1,
            dilation_h: 1,
            act: self.act,
            nchw: false,
        }
    }

    /// Runs `f(group, in_part, out_part)` over NHWC group buffers.
    fn per_group<T: Copy + Default>(
        &self,
        x: Tensor<'_, T>,
        out: TensorMut<'_, T>,
        mut f: impl FnMut(usize, (&[usize], &[T]), (&[usize], &mut [T])) -> Result<()>,
    ) -> Result<()> {
        let (n, h, w, c) = nhwc_dims(x.shape, self.nchw).ok_or(KernelError::TooLarge)?;
        let (_, oh, ow, o) = nhwc_dims(out.shape, self.nchw).ok_or(KernelError::TooLarge)?;
        let groups = self.groups as usize;
        let (cg, og) = (c / groups, o / groups);
        let in_shape = [n, h, w, cg];
        let out_shape = [n, oh, ow, og];
        with_nhwc(self.nchw, x, out, |src, dst| {
            if og == 0 || cg == 0 {
                return Ok(());
            }
            let mut part_out = vec![T::default(); n * oh * ow * og];
            for g in 0..groups {
                let part_in = gather_channels(src, c, g * cg, cg);
                f(g, (&in_shape, &part_in), (&out_shape, &mut part_out))?;
                scatter_channels(&part_out, dst, o, g * og, og);
            }
            Ok(())
        })
    }

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
        let o = fs[0];
        let stage = QStage::new(
            name,
            self.act,
            [inputs[0].ty, inputs[1].ty, inputs[2].ty, out_ty],
            o,
            0,
        )?;
        let q = stage.params();
        let og = o / self.groups as usize;
        let k = fs[1] * fs[2] * fs[3];
        fn slice(v: PerChannel<'_>, g: usize, og: usize) -> PerChannel<'_> {
            match v {
                PerChannel::Each(s) => PerChannel::Each(s.get(g * og..(g + 1) * og).unwrap_or(&[])),
                u => u,
            }
        }
        self.per_group(x, out, |g, (is, src), (os, dst)| {
            let p = Conv2dParams {
                geometry: ConvGeometry {
                    batches: is[0],
                    in_h: is[1],
                    in_w: is[2],
                    in_c: is[3],
                    out_h: os[1],
                    out_w: os[2],
                    filter_h: fs[1],
                    filter_w: fs[2],
                    stride_h: self.stride_h as usize,
                    stride_w: self.stride_w as usize,
                    dilation_h: 1,
                    dilation_w: 1,
                    pad_top: self.pad.top as usize,
                    pad_left: self.pad.left as usize,
                },
                out_c: og,
                quant: QuantParams {
                    output_multiplier: slice(q.output_multiplier, g, og),
                    output_shift: slice(q.output_shift, g, og),
                    ..q
                },
            };
            qconv::conv2d(
                &p,
                src,
                &f[g * og * k..(g + 1) * og * k],
                &bias[g * og..(g + 1) * og],
                dst,
            )
            .map_err(qerr(name))
        })
    }

    fn run_f32(
        &self,
        x: Tensor<'_>,
        f: Tensor<'_>,
        bias: Tensor<'_>,
        out: TensorMut<'_>,
    ) -> Result<()> {
        let conv = self.conv();
        let o = f.shape[0];
        let og = o / self.groups as usize;
        let fshape = [og, f.shape[1], f.shape[2], f.shape[3]];
        let k = f.shape[1] * f.shape[2] * f.shape[3];
        let bshape = [og];
        self.per_group(x, out, |g, (is, src), (os, dst)| {
            conv2d_f32(
                &conv,
                Tensor {
                    shape: is,
                    data: src,
                },
                Tensor {
                    shape: &fshape,
                    data: &f.data[g * og * k..(g + 1) * og * k],
                },
                Tensor {
                    shape: &bshape,
                    data: &bias.data[g * og..(g + 1) * og],
                },
                TensorMut {
                    shape: os,
                    data: dst,
                },
            )
        })
    }
}

impl Kernel for GroupedConv2d {
    fn name(&self) -> &'static str {
        "GROUPED_CONV_2D"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(GroupedConv2d {
            pad: w.padding()?,
            stride_w: w.nonzero("stride_w")?,
            stride_h: w.nonzero("stride_h")?,
            groups: w.nonzero("groups")?,
            act: w.act()?,
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend(enc::pad(&self.pad));
        w.extend([
            self.stride_w,
            self.stride_h,
            self.groups,
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
        let groups = self.groups as usize;
        if h == 0 || w == 0 || c == 0 || o == 0 || kh == 0 || kw == 0 {
            return Err(bad_shape(name, "zero spatial, channel or filter size"));
        }
        if c % groups != 0 || o % groups != 0 || fi != c / groups {
            return Err(bad_shape(
                name,
                format!("input {x:?} and filter {f:?} do not split into {groups} groups"),
            ));
        }
        if bias.as_slice() != [o] {
            return Err(bad_shape(name, format!("bias {bias:?} must be [{o}]")));
        }
        let (oh, ow) = window_out(
            (h, w),
            &self.pad,
            (kh, kw),
            (1, 1),
            (self.stride_h, self.stride_w),
        )
        .map_err(|r| bad_shape(name, r))?;
        Ok(vec![layout_shape(n, oh, ow, o, self.nchw)])
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

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let out: u64 = outputs[0].iter().map(|&d| d as u64).product();
        let k: u64 = inputs[1].shape[1..].iter().map(|&d| d as u64).product();
        Cost {
            macs: out.saturating_mul(k),
            elems: out,
        }
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
                self.run_f32(x, f, b, TensorMut::f32(&mut outs[0])?)
            })
        )
    }
}
