//! What the 2-D convolutions share: the sliding window ([`ConvWindow`]: padding, strides,
//! dilation, its parameter words and its output size) and the checks of an (input,
//! filter, bias) triple ([`ConvShapes`]).

use crate::kernels::conv::check_conv_types;
use crate::kernels::kernel::{enc, Words};
use crate::kernels::layout::{image_dims, nhwc_dims, window_out};
use crate::kernels::qconv::ConvGeometry;
use crate::kernels::{bad_shape, Activation, KernelError, Padding, Result};
use crate::tensor::TensorType;

/// The window of a 2-D convolution: explicit padding, strides and dilation.
///
/// Parameter words: pad(4) (left, right, top, bottom), stride_w, stride_h, then, in the
/// dilated form ([`ConvWindow::decode`]), dilation_w, dilation_h.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvWindow {
    /// Explicit padding.
    pub pad: Padding,
    /// Horizontal stride, at least 1.
    pub stride_w: u32,
    /// Vertical stride, at least 1.
    pub stride_h: u32,
    /// Horizontal dilation, at least 1.
    pub dilation_w: u32,
    /// Vertical dilation, at least 1.
    pub dilation_h: u32,
}

impl Default for ConvWindow {
    /// No padding, stride 1, dilation 1.
    fn default() -> Self {
        ConvWindow {
            pad: Padding::default(),
            stride_w: 1,
            stride_h: 1,
            dilation_w: 1,
            dilation_h: 1,
        }
    }
}

impl ConvWindow {
    /// Padding `pad` and strides `(stride_w, stride_h)`, dilation 1.
    pub fn strided(pad: Padding, (stride_w, stride_h): (u32, u32)) -> Self {
        ConvWindow {
            pad,
            stride_w,
            stride_h,
            ..ConvWindow::default()
        }
    }

    /// Reads pad(4), stride_w, stride_h, dilation_w, dilation_h.
    pub fn decode(w: &mut Words<'_>) -> Result<Self> {
        let mut win = Self::decode_undilated(w)?;
        win.dilation_w = w.nonzero("dilation_w")?;
        win.dilation_h = w.nonzero("dilation_h")?;
        Ok(win)
    }

    /// Reads pad(4), stride_w, stride_h; the dilation is 1 (the form of operations that
    /// have none).
    pub fn decode_undilated(w: &mut Words<'_>) -> Result<Self> {
        Ok(ConvWindow {
            pad: w.padding()?,
            stride_w: w.nonzero("stride_w")?,
            stride_h: w.nonzero("stride_h")?,
            dilation_w: 1,
            dilation_h: 1,
        })
    }

    /// Writes the words [`ConvWindow::decode`] reads.
    pub fn encode(&self, w: &mut Vec<u32>) {
        self.encode_undilated(w);
        w.extend([self.dilation_w, self.dilation_h]);
    }

    /// Writes the words [`ConvWindow::decode_undilated`] reads; the dilation is not
    /// written (see [`ConvWindow::check_undilated`]).
    pub fn encode_undilated(&self, w: &mut Vec<u32>) {
        w.extend(enc::pad(&self.pad));
        w.extend([self.stride_w, self.stride_h]);
    }

    /// Fails unless the dilation is 1: an operation whose words carry no dilation must not
    /// be built with one.
    pub fn check_undilated(&self, op: &'static str) -> Result<()> {
        if (self.dilation_w, self.dilation_h) != (1, 1) {
            return Err(bad_shape(op, "this convolution has no dilation"));
        }
        Ok(())
    }

    /// The output (height, width) over an input of `(h, w)` with a `(kh, kw)` filter, in
    /// checked arithmetic; an error if the filter does not fit the padded input.
    pub fn output_size(
        &self,
        op: &'static str,
        (h, w): (usize, usize),
        (kh, kw): (usize, usize),
    ) -> Result<(usize, usize)> {
        window_out(
            (h, w),
            &self.pad,
            (kh, kw),
            (self.dilation_h, self.dilation_w),
            (self.stride_h, self.stride_w),
        )
        .map_err(|r| bad_shape(op, r))
    }

    /// The geometry of the window over input shape `x`, output shape `out` (both rank 4,
    /// in layout `nchw`) and filter `[_,KH,KW,_]`, with the output's channel count.
    pub(crate) fn geometry(
        &self,
        x: &[usize],
        out: &[usize],
        f: &[usize],
        nchw: bool,
    ) -> Result<(ConvGeometry, usize)> {
        let (n, h, w, c) = nhwc_dims(x, nchw).ok_or(KernelError::TooLarge)?;
        let (_, oh, ow, o) = nhwc_dims(out, nchw).ok_or(KernelError::TooLarge)?;
        let &[_, kh, kw, _] = f else {
            return Err(KernelError::TooLarge);
        };
        let g = ConvGeometry {
            batches: n,
            in_h: h,
            in_w: w,
            in_c: c,
            out_h: oh,
            out_w: ow,
            filter_h: kh,
            filter_w: kw,
            stride_h: self.stride_h as usize,
            stride_w: self.stride_w as usize,
            dilation_h: self.dilation_h as usize,
            dilation_w: self.dilation_w as usize,
            pad_top: self.pad.top as usize,
            pad_left: self.pad.left as usize,
        };
        Ok((g, o))
    }
}

/// Reads the words every convolution ends with: activation, nchw.
pub(crate) fn decode_act_layout(w: &mut Words<'_>) -> Result<(Activation, bool)> {
    Ok((w.act()?, w.bool("nchw")?))
}

/// The words [`decode_act_layout`] reads.
pub(crate) fn encode_act_layout(act: Activation, nchw: bool) -> [u32; 2] {
    [act as u32, enc::b(nchw)]
}

/// The dimensions of a validated (input, filter `[F0,KH,KW,F3]`, bias) triple.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConvShapes {
    /// Batches of the input.
    pub(crate) n: usize,
    /// Input height.
    pub(crate) h: usize,
    /// Input width.
    pub(crate) w: usize,
    /// Input channels.
    pub(crate) c: usize,
    /// The filter's dimensions.
    pub(crate) filter: [usize; 4],
    /// Output channels: the filter's dimension along the channel axis, the bias's length.
    pub(crate) out_c: usize,
}

impl ConvShapes {
    /// Checks the element types, a rank-4 input (layout `nchw`) and filter with no zero
    /// spatial, channel or filter size, and a bias of the filter's dimension `axis`.
    pub(crate) fn new(
        op: &'static str,
        inputs: &[&TensorType],
        nchw: bool,
        axis: usize,
    ) -> Result<ConvShapes> {
        check_conv_types(op, inputs[0], inputs[1], inputs[2])?;
        let (x, f, bias) = (&inputs[0].shape, &inputs[1].shape, &inputs[2].shape);
        let (n, h, w, c) = image_dims(op, x, nchw)?;
        let &[f0, kh, kw, f3] = f.as_slice() else {
            return Err(bad_shape(op, format!("filter {f:?} must have rank 4")));
        };
        if h == 0 || w == 0 || c == 0 {
            return Err(bad_shape(
                op,
                format!("input {x:?} has a zero spatial or channel size"),
            ));
        }
        let filter = [f0, kh, kw, f3];
        let out_c = filter[axis];
        if out_c == 0 || kh == 0 || kw == 0 {
            return Err(bad_shape(op, format!("filter {f:?} has a zero dimension")));
        }
        if bias.as_slice() != [out_c] {
            return Err(bad_shape(op, format!("bias {bias:?} must be [{out_c}]")));
        }
        Ok(ConvShapes {
            n,
            h,
            w,
            c,
            filter,
            out_c,
        })
    }

    /// Fails unless the filter's input channels (its last dimension) are `want`.
    pub(crate) fn check_filter_channels(&self, op: &'static str, want: usize) -> Result<()> {
        if self.filter[3] != want {
            return Err(bad_shape(
                op,
                format!(
                    "filter {:?} has {} input channels, {want} expected (input has {})",
                    self.filter, self.filter[3], self.c
                ),
            ));
        }
        Ok(())
    }

    /// The filter's (height, width).
    pub(crate) fn kernel(&self) -> (usize, usize) {
        (self.filter[1], self.filter[2])
    }
}
