//! CONV_2D, DEPTHWISE_CONV_2D (implicit or explicit padding, optional layout and
//! dilation) and FULLY_CONNECTED.

use vnpu_emu::kernels::{
    Conv2d, ConvWindow, DepthwiseConv2d, FullyConnected, GroupedConv2d, Padding, TransposeConv2d,
};

use super::types::FLOAT_QUANT8;
use super::{arg, channel_dim, Arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{Operand, OperandType, OperationType};

const OUT: &[Arg] = &[arg("output", Ty::T)];
const LAYOUT_DILATION: &[&[Arg]] = &[
    &[arg("layout", Ty::Bool)],
    &[arg("dilation_w", Ty::Int), arg("dilation_h", Ty::Int)],
];

/// A convolution's two padding forms ([`padded_signatures`]): input, filter and bias,
/// the padding and strides, then `[tail]`.
macro_rules! conv_signatures {
    ($since:expr, [$($tail:expr),* $(,)?], $optional:expr $(,)?) => {
        padded_signatures!(
            $since,
            FLOAT_QUANT8,
            [arg("input", Ty::T), arg("filter", Ty::Filter), arg("bias", Ty::Bias)],
            [$($tail),*],
            OUT,
            $optional,
        )
    };
}

const CONV_SIGS: &[Signature] =
    &conv_signatures!(V1_0, [arg("activation", Ty::Int)], LAYOUT_DILATION);

const DEPTHWISE_SIGS: &[Signature] = &conv_signatures!(
    V1_0,
    [arg("depth_multiplier", Ty::Int), arg("activation", Ty::Int)],
    LAYOUT_DILATION,
);

/// A per-channel filter must be quantised along its output-channel dimension.
fn filter_axis(ins: &[&Operand], want: u32) -> Result<(), String> {
    match ins.get(1).and_then(|o| channel_dim(o)) {
        Some(d) if d != want => Err(format!(
            "per-channel filter channel_dim must be {want}, is {d}"
        )),
        _ => Ok(()),
    }
}

/// Known ranks must be 4 for the input and the filter (as NNAPI's CONV_2D validation
/// requires), and a depthwise filter's first dimension, when known, must be 1.
fn check_ranks(ins: &[&Operand], depthwise: bool) -> Result<(), String> {
    for (k, what) in [(0, "input"), (1, "filter")] {
        let rank = ins.get(k).map_or(0, |o| o.dimensions.len());
        if rank != 0 && rank != 4 {
            return Err(format!("{what} must have rank 4, has rank {rank}"));
        }
    }
    if depthwise {
        if let Some(&d0) = ins.get(1).and_then(|o| o.dimensions.first()) {
            if d0 != 1 && d0 != 0 {
                return Err(format!("depthwise filter dimension 0 must be 1, is {d0}"));
            }
        }
    }
    Ok(())
}

/// NNAPI's implicit padding (1 SAME, 2 VALID): (before, after) for one spatial dimension.
pub fn implicit_padding(
    scheme: i32,
    input: usize,
    filter: u32,
    stride: u32,
    dilation: u32,
) -> Option<(u32, u32)> {
    let eff = (u64::from(filter).max(1) - 1) * u64::from(dilation) + 1;
    match scheme {
        1 => {
            let out = (input as u64).div_ceil(u64::from(stride.max(1)));
            let needed = ((out.max(1) - 1) * u64::from(stride) + eff).saturating_sub(input as u64);
            let before = needed / 2;
            Some((
                u32::try_from(before).ok()?,
                u32::try_from(needed - before).ok()?,
            ))
        }
        2 => Some((0, 0)),
        _ => None,
    }
}

/// Spatial (height, width) of a 4-D activation in NHWC or NCHW.
pub fn spatial(a: &Args<'_>, shape: &[usize], nchw: bool) -> Result<(usize, usize), CompileError> {
    match *shape {
        [_, c_or_h, h_or_w, w_or_c] => Ok(if nchw {
            (h_or_w, w_or_c)
        } else {
            (c_or_h, h_or_w)
        }),
        _ => Err(a.invalid(format!("expected a 4-D input, got {shape:?}"))),
    }
}

/// Reads the window of a convolution or pooling (padding from either the explicit or the
/// implicit form, strides, and the given dilation): `filter` is (width, height),
/// `dilation` (width, height).
pub fn window(
    a: &Args<'_>,
    nchw: bool,
    (filter_w, filter_h): (u32, u32),
    (dilation_w, dilation_h): (u32, u32),
) -> Result<ConvWindow, CompileError> {
    let stride_w = a.positive("stride_w")?;
    let stride_h = a.positive("stride_h")?;
    let pad = if a.has("padding_scheme") {
        let scheme = a.i32("padding_scheme")?;
        let (h, w) = spatial(a, a.shape("input")?, nchw)?;
        let bad = || a.invalid(format!("padding scheme {scheme}"));
        let (left, right) =
            implicit_padding(scheme, w, filter_w, stride_w, dilation_w).ok_or_else(bad)?;
        let (top, bottom) =
            implicit_padding(scheme, h, filter_h, stride_h, dilation_h).ok_or_else(bad)?;
        Padding {
            left,
            right,
            top,
            bottom,
        }
    } else {
        Padding {
            left: a.non_negative("pad_left")?,
            right: a.non_negative("pad_right")?,
            top: a.non_negative("pad_top")?,
            bottom: a.non_negative("pad_bottom")?,
        }
    };
    Ok(ConvWindow {
        pad,
        stride_w,
        stride_h,
        dilation_w,
        dilation_h,
    })
}

/// Dilation factors (width, height), 1 when absent.
fn dilation(a: &Args<'_>) -> Result<(u32, u32), CompileError> {
    if a.has("dilation_w") {
        Ok((a.positive("dilation_w")?, a.positive("dilation_h")?))
    } else {
        Ok((1, 1))
    }
}

/// Filter (height, width) from a `[_, KH, KW, _]` filter.
fn filter_hw(a: &Args<'_>) -> Result<(u32, u32), CompileError> {
    match *a.shape("filter")? {
        [_, kh, kw, _] => Ok((
            u32::try_from(kh).map_err(|_| a.invalid("filter too large"))?,
            u32::try_from(kw).map_err(|_| a.invalid("filter too large"))?,
        )),
        ref s => Err(a.invalid(format!("filter {s:?} must have rank 4"))),
    }
}

fn lower_conv(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let nchw = a.flag("layout")?;
    let (kh, kw) = filter_hw(a)?;
    a.kernel(
        Conv2d {
            window: window(a, nchw, (kw, kh), dilation(a)?)?,
            act: a.act("activation")?,
            nchw,
            epilogue: None,
        },
        &["input", "filter", "bias"],
    )
}

fn lower_depthwise(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let nchw = a.flag("layout")?;
    let (kh, kw) = filter_hw(a)?;
    a.kernel(
        DepthwiseConv2d {
            window: window(a, nchw, (kw, kh), dilation(a)?)?,
            depth_multiplier: a.positive("depth_multiplier")?,
            act: a.act("activation")?,
            nchw,
            epilogue: None,
        },
        &["input", "filter", "bias"],
    )
}

/// CONV_2D.
pub const CONV_2D: OpDef = OpDef {
    op: OperationType::CONV_2D,
    signatures: CONV_SIGS,
    check: Some(|ins, _| {
        check_ranks(ins, false)?;
        filter_axis(ins, 0)
    }),
    runs: FLOAT_QUANT8,
    lower: Some(lower_conv),
};

/// DEPTHWISE_CONV_2D.
pub const DEPTHWISE_CONV_2D: OpDef = OpDef {
    op: OperationType::DEPTHWISE_CONV_2D,
    signatures: DEPTHWISE_SIGS,
    check: Some(|ins, _| {
        check_ranks(ins, true)?;
        filter_axis(ins, 3)
    }),
    runs: FLOAT_QUANT8,
    lower: Some(lower_depthwise),
};

/// FULLY_CONNECTED.
pub const FULLY_CONNECTED: OpDef = OpDef {
    op: OperationType::FULLY_CONNECTED,
    signatures: &[Signature::new(
        V1_0,
        FLOAT_QUANT8,
        &[
            arg("input", Ty::T),
            arg("weights", Ty::T),
            arg("bias", Ty::Bias),
            arg("activation", Ty::Int),
        ],
        OUT,
    )],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| {
        a.kernel(
            FullyConnected {
                act: a.act("activation")?,
            },
            &["input", "weights", "bias"],
        )
    }),
};

/// Explicit padding first, as NNAPI lists GROUPED_CONV_2D's forms.
const GROUPED_SIGS: &[Signature] = &{
    let [implicit, explicit] = conv_signatures!(
        V1_2,
        [
            arg("groups", Ty::Int),
            arg("activation", Ty::Int),
            arg("layout", Ty::Bool),
        ],
        &[],
    );
    [explicit, implicit]
};

fn lower_grouped(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let nchw = a.flag("layout")?;
    let (kh, kw) = filter_hw(a)?;
    a.kernel(
        GroupedConv2d {
            window: window(a, nchw, (kw, kh), (1, 1))?,
            groups: a.positive("groups")?,
            act: a.act("activation")?,
            nchw,
        },
        &["input", "filter", "bias"],
    )
}

/// GROUPED_CONV_2D.
pub const GROUPED_CONV_2D: OpDef = OpDef {
    op: OperationType::GROUPED_CONV_2D,
    signatures: GROUPED_SIGS,
    check: Some(|ins, _| filter_axis(ins, 0)),
    runs: FLOAT_QUANT8,
    lower: Some(lower_grouped),
};

/// The explicit form is a convolution's; the implicit one names the output shape first.
const TRANSPOSE_SIGS: &[Signature] = &{
    let [_, explicit] = conv_signatures!(
        V1_2,
        [arg("activation", Ty::Int), arg("layout", Ty::Bool)],
        &[],
    );
    let implicit = Signature::new(
        V1_2,
        FLOAT_QUANT8,
        &[
            arg("input", Ty::T),
            arg("filter", Ty::Filter),
            arg("bias", Ty::Bias),
            arg("output_shape", Ty::Is(OperandType::TENSOR_INT32)),
            arg("padding_scheme", Ty::Int),
            arg("stride_w", Ty::Int),
            arg("stride_h", Ty::Int),
            arg("activation", Ty::Int),
            arg("layout", Ty::Bool),
        ],
        OUT,
    );
    [explicit, implicit]
};

/// NNAPI's output size of a transposed convolution: `in * stride + filter - stride - pads`.
fn transpose_out(input: usize, filter: u32, stride: u32, head: i64, tail: i64) -> Option<u32> {
    let v = i64::try_from(input).ok()? * i64::from(stride) + i64::from(filter)
        - i64::from(stride)
        - head
        - tail;
    u32::try_from(v).ok().filter(|&v| v > 0)
}

/// NNAPI's implicit padding of a transposed convolution over an output of size `out`:
/// (head, tail); the tail may be negative (it only fits the last stride tightly).
fn transpose_padding(scheme: i32, out: i64, stride: u32, filter: u32) -> Option<(i64, i64)> {
    match scheme {
        1 => {
            let s = i64::from(stride);
            let out_size = (out + s - 1) / s;
            let tmp = (out_size - 1) * s + i64::from(filter);
            let head = if tmp > out { (tmp - out) / 2 } else { 0 };
            Some((head, tmp - out - head))
        }
        2 => Some((0, 0)),
        _ => None,
    }
}

fn lower_transpose(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let nchw = a.flag("layout")?;
    let (kh, kw) = filter_hw(a)?;
    let (h, w) = spatial(a, a.shape("input")?, nchw)?;
    let stride_w = a.positive("stride_w")?;
    let stride_h = a.positive("stride_h")?;
    let ((left, right), (top, bottom)) = if a.has("padding_scheme") {
        let scheme = a.i32("padding_scheme")?;
        let shape = a.ints("output_shape")?;
        let &[_, d1, d2, d3] = shape.as_slice() else {
            return Err(a.invalid(format!("output shape {shape:?} must have 4 entries")));
        };
        let (oh, ow) = if nchw { (d2, d3) } else { (d1, d2) };
        let bad = || a.invalid(format!("padding scheme {scheme}"));
        (
            transpose_padding(scheme, i64::from(ow), stride_w, kw).ok_or_else(bad)?,
            transpose_padding(scheme, i64::from(oh), stride_h, kh).ok_or_else(bad)?,
        )
    } else {
        (
            (
                i64::from(a.non_negative("pad_left")?),
                i64::from(a.non_negative("pad_right")?),
            ),
            (
                i64::from(a.non_negative("pad_top")?),
                i64::from(a.non_negative("pad_bottom")?),
            ),
        )
    };
    let bad_size = || a.invalid("transposed convolution has an empty or too large output");
    let out_w = transpose_out(w, kw, stride_w, left, right).ok_or_else(bad_size)?;
    let out_h = transpose_out(h, kh, stride_h, top, bottom).ok_or_else(bad_size)?;
    let pad = |v: i64| u32::try_from(v).map_err(|_| a.invalid("negative padding"));
    a.kernel(
        TransposeConv2d {
            pad_left: pad(left)?,
            pad_top: pad(top)?,
            out_h,
            out_w,
            stride_w,
            stride_h,
            act: a.act("activation")?,
            nchw,
        },
        &["input", "filter", "bias"],
    )
}

/// TRANSPOSE_CONV_2D.
pub const TRANSPOSE_CONV_2D: OpDef = OpDef {
    op: OperationType::TRANSPOSE_CONV_2D,
    signatures: TRANSPOSE_SIGS,
    check: Some(|ins, _| filter_axis(ins, 0)),
    runs: FLOAT_QUANT8,
    lower: Some(lower_transpose),
};
