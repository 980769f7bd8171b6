//! The compute engine's kernels: NN operations on float32 tensors with Android NNAPI
//! semantics.
//!
//! A kernel is described by a [`KernelOp`] (the operation and its scalar parameters). The
//! program container stores it as an opcode plus a list of `u32` parameter words
//! ([`KernelOp::opcode`], [`KernelOp::encode_params`]); the device parses untrusted words with
//! [`KernelOp::decode`], validates shapes with [`KernelOp::output_shapes`] and runs the kernel
//! with [`execute`]. None of these panic on any input: every size is computed with checked
//! arithmetic and every tensor is capped at [`MAX_ELEMENTS`] elements.
//!
//! # Opcodes and parameter words
//!
//! Parameter encoding: `u32` as is, `i32` as its two's-complement bits, `f32` as
//! `f32::to_bits`, `bool` as 0/1, an enum as the number in the table below, a `Vec` as its
//! length followed by its items, `Padding` as left, right, top, bottom.
//!
//! | opcode | op                | parameter words                                                            | inputs                      |
//! |-------:|-------------------|----------------------------------------------------------------------------|-----------------------------|
//! | 0      | (reserved)        | invalid                                                                    |                             |
//! | 1      | `Binary`          | kind, act                                                                  | a, b                        |
//! | 2      | `FullyConnected`  | act                                                                        | input, weights \[N,K\], bias \[N\] |
//! | 3      | `Conv2d`          | pad(4), stride_w, stride_h, dilation_w, dilation_h, act, nchw              | input, filter \[O,KH,KW,I\], bias \[O\] |
//! | 4      | `DepthwiseConv2d` | pad(4), stride_w, stride_h, dilation_w, dilation_h, depth_multiplier, act, nchw | input, filter \[1,KH,KW,C*M\], bias \[C*M\] |
//! | 5      | `Pool`            | kind, pad(4), stride_w, stride_h, filter_w, filter_h, act, nchw            | input                       |
//! | 6      | `Unary`           | kind                                                                       | input                       |
//! | 7      | `Softmax`         | beta (f32), axis (i32)                                                     | input                       |
//! | 8      | `Reshape`         | rank, dims...                                                              | input                       |
//! | 9      | `Concatenation`   | axis                                                                       | 1..=64 inputs               |
//! | 10     | `L2Normalization` | axis (i32)                                                                 | input                       |
//! | 11     | `DepthToSpace`    | block, nchw                                                                | input                       |
//! | 12     | `SpaceToDepth`    | block, nchw                                                                | input                       |
//! | 13     | `ResizeBilinear`  | out_h, out_w, align_corners, half_pixel_centers, nchw                      | input                       |
//! | 14     | `Pad`             | rank, (before, after) * rank, value (f32)                                  | input                       |
//! | 15     | `Transpose`       | rank, perm...                                                              | input                       |
//! | 16     | `Mean`            | count, axes..., keep_dims                                                  | input                       |
//!
//! Enum numbers: `Activation` None 0, Relu 1, Relu1 2, Relu6 3 (the NNAPI FuseCode);
//! `BinaryKind` Add 0, Sub 1, Mul 2, Div 3; `UnaryKind` Relu 0, Relu1 1, Relu6 2, Logistic 3,
//! Tanh 4, Floor 5; `PoolKind` Average 0, Max 1, L2 2.
//!
//! Every op has exactly one output.
//!
//! # Semantics notes
//!
//! - Fused activations clamp after the op; a NaN passes through the clamp unchanged (as the
//!   C++ `std::min(std::max(x, lo), hi)` of the NNAPI reference does).
//! - Zero-sized tensors: a batch (or any non-spatial, non-channel dimension) may be 0, as
//!   NNAPI allows; the kernel then writes nothing.
//! - AVERAGE and L2 pooling average over the in-bounds elements of each window only; a window
//!   lying wholly in the padding gives 0, and MAX pooling of such a window gives `f32::MIN`
//!   (the initial value of the TFLite kernel), before the fused activation.
//! - L2_NORMALIZATION divides by `max(sqrt(sum x^2), 1e-6)` along the axis (TFLite's float
//!   kernel, which NNAPI uses for the last axis; NNAPI's own loop for other axes omits the
//!   epsilon, which only differs for an all-zero vector, where it would give NaN).
//! - MEAN that removes every dimension gives shape `[1]`, as NNAPI does.

mod activation;
mod conv;
mod elementwise;
mod normalization;
mod pool;
pub(crate) mod qconv;
pub(crate) mod quant;
mod reduction;
mod shape;

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

use std::ops::RangeInclusive;

/// The largest tensor rank the kernels accept.
pub const MAX_RANK: usize = 6;

/// The largest number of elements in any tensor (and in any scratch buffer derived from the
/// shapes): 2^28 floats, 1 GiB.
pub const MAX_ELEMENTS: usize = 1 << 28;

/// The largest number of inputs of a CONCATENATION.
pub const MAX_CONCAT_INPUTS: usize = 64;

/// A read-only float32 tensor: a row-major (C order) view of `data` with dimensions `shape`.
#[derive(Debug, Clone, Copy)]
pub struct Tensor<'a> {
    pub shape: &'a [usize],
    pub data: &'a [f32],
}

/// A writable float32 tensor: a row-major view of `data` with dimensions `shape`.
#[derive(Debug)]
pub struct TensorMut<'a> {
    pub shape: &'a [usize],
    pub data: &'a mut [f32],
}

/// A fused activation (NNAPI FuseCode), applied to the result of an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u32)]
pub enum Activation {
    #[default]
    None = 0,
    Relu = 1,
    Relu1 = 2,
    Relu6 = 3,
}

/// Explicit padding of the two spatial dimensions, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Padding {
    pub left: u32,
    pub right: u32,
    pub top: u32,
    pub bottom: u32,
}

/// The element-wise binary ops (NNAPI ADD, SUB, MUL, DIV).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryKind {
    Add,
    Sub,
    Mul,
    Div,
}

/// The element-wise unary ops (NNAPI RELU, RELU1, RELU6, LOGISTIC, TANH, FLOOR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryKind {
    Relu,
    Relu1,
    Relu6,
    Logistic,
    Tanh,
    Floor,
}

/// The pooling ops (NNAPI AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolKind {
    Average,
    Max,
    L2,
}

/// One kernel invocation's operation and scalar parameters. See the module documentation for
/// the opcode table and the inputs of each op.
#[derive(Debug, Clone, PartialEq)]
pub enum KernelOp {
    /// 2 inputs, numpy-style broadcasting (NNAPI ADD/SUB/MUL/DIV); DIV by 0 follows IEEE.
    Binary {
        kind: BinaryKind,
        act: Activation,
    },
    /// Inputs: input (rank >= 2, flattened to `[numel/K, K]`), weights `[N,K]`, bias `[N]`;
    /// output `[B,N]`.
    FullyConnected {
        act: Activation,
    },
    /// Input NHWC (NCHW if `nchw`), filter `[O,KH,KW,I]`, bias `[O]`; output in the input's
    /// layout.
    Conv2d {
        pad: Padding,
        stride_w: u32,
        stride_h: u32,
        dilation_w: u32,
        dilation_h: u32,
        act: Activation,
        nchw: bool,
    },
    /// Filter `[1,KH,KW,C*M]`, bias `[C*M]`; output channel `c*M+m` reads input channel `c`.
    DepthwiseConv2d {
        pad: Padding,
        stride_w: u32,
        stride_h: u32,
        dilation_w: u32,
        dilation_h: u32,
        depth_multiplier: u32,
        act: Activation,
        nchw: bool,
    },
    /// AVERAGE/L2 average only over in-bounds elements, as NNAPI.
    Pool {
        kind: PoolKind,
        pad: Padding,
        stride_w: u32,
        stride_h: u32,
        filter_w: u32,
        filter_h: u32,
        act: Activation,
        nchw: bool,
    },
    Unary {
        kind: UnaryKind,
    },
    /// `exp(beta*(x-max))` normalised along `axis` (negative counts from the end).
    Softmax {
        beta: f32,
        axis: i32,
    },
    /// RESHAPE and SQUEEZE: a copy into `shape` (numel must match).
    Reshape {
        shape: Vec<usize>,
    },
    /// `n >= 1` inputs joined along `axis`.
    Concatenation {
        axis: u32,
    },
    L2Normalization {
        axis: i32,
    },
    DepthToSpace {
        block: u32,
        nchw: bool,
    },
    SpaceToDepth {
        block: u32,
        nchw: bool,
    },
    ResizeBilinear {
        out_h: u32,
        out_w: u32,
        align_corners: bool,
        half_pixel_centers: bool,
        nchw: bool,
    },
    /// `(before, after)` per dimension; `pads.len()` == input rank.
    Pad {
        pads: Vec<(u32, u32)>,
        value: f32,
    },
    /// `perm.len()` == input rank; output dim `i` is input dim `perm[i]`.
    Transpose {
        perm: Vec<u32>,
    },
    /// Mean over `axes`.
    Mean {
        axes: Vec<u32>,
        keep_dims: bool,
    },
}

/// Errors of decoding, validating and running kernels.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelError {
    #[error("unknown kernel opcode {0}")]
    UnknownOpcode(u32),
    #[error("kernel opcode {opcode}: invalid parameters: {reason}")]
    InvalidParams { opcode: u32, reason: String },
    #[error("{op}: expected {min}..={max} inputs, got {got}")]
    InputCount {
        op: &'static str,
        min: usize,
        max: usize,
        got: usize,
    },
    #[error("{op}: expected {expected} outputs, got {got}")]
    OutputCount {
        op: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{op}: invalid input shapes: {reason}")]
    InvalidShape { op: &'static str, reason: String },
    #[error("tensor rank {rank} exceeds the maximum rank {MAX_RANK}")]
    RankTooLarge { rank: usize },
    #[error("tensor or buffer too large: more than {MAX_ELEMENTS} elements")]
    TooLarge,
    #[error("{op}: {which} {index} holds {got} elements but its shape {shape:?} needs {expected}")]
    DataLength {
        op: &'static str,
        which: &'static str,
        index: usize,
        shape: Vec<usize>,
        expected: usize,
        got: usize,
    },
    #[error("{op}: output {index} has shape {got:?}, expected {expected:?}")]
    OutputShape {
        op: &'static str,
        index: usize,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
}

pub(crate) type Result<T> = std::result::Result<T, KernelError>;

/// Number of elements of a shape, checked against overflow, [`MAX_RANK`] and
/// [`MAX_ELEMENTS`].
pub fn num_elements(shape: &[usize]) -> Result<usize> {
    if shape.len() > MAX_RANK {
        return Err(KernelError::RankTooLarge { rank: shape.len() });
    }
    let mut n: usize = 1;
    for &d in shape {
        n = n.checked_mul(d).ok_or(KernelError::TooLarge)?;
    }
    if n > MAX_ELEMENTS {
        return Err(KernelError::TooLarge);
    }
    Ok(n)
}

/// Checked product of sizes that must stay within [`MAX_ELEMENTS`] (scratch buffers, loop
/// bounds).
pub(crate) fn checked_product(items: &[usize]) -> Result<usize> {
    let mut n: usize = 1;
    for &d in items {
        n = n.checked_mul(d).ok_or(KernelError::TooLarge)?;
    }
    if n > MAX_ELEMENTS {
        return Err(KernelError::TooLarge);
    }
    Ok(n)
}

impl Activation {
    /// The clamp range of the activation.
    pub fn range(self) -> (f32, f32) {
        match self {
            Activation::None => (f32::NEG_INFINITY, f32::INFINITY),
            Activation::Relu => (0.0, f32::INFINITY),
            Activation::Relu1 => (-1.0, 1.0),
            Activation::Relu6 => (0.0, 6.0),
        }
    }

    /// Applies the activation to one value (NaN passes through).
    #[inline]
    pub fn apply(self, x: f32) -> f32 {
        let (lo, hi) = self.range();
        clamp_nan(x, lo, hi)
    }

    /// Applies the activation to a slice in place.
    pub fn apply_slice(self, xs: &mut [f32]) {
        if self == Activation::None {
            return;
        }
        let (lo, hi) = self.range();
        for x in xs {
            *x = clamp_nan(*x, lo, hi);
        }
    }

    fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Activation::None,
            1 => Activation::Relu,
            2 => Activation::Relu1,
            3 => Activation::Relu6,
            _ => return None,
        })
    }
}

/// `min(max(x, lo), hi)` with the C++ `std::max`/`std::min` treatment of NaN: NaN stays NaN.
#[inline]
pub(crate) fn clamp_nan(x: f32, lo: f32, hi: f32) -> f32 {
    if x < lo {
        lo
    } else if x > hi {
        hi
    } else {
        x
    }
}

impl BinaryKind {
    fn to_u32(self) -> u32 {
        match self {
            BinaryKind::Add => 0,
            BinaryKind::Sub => 1,
            BinaryKind::Mul => 2,
            BinaryKind::Div => 3,
        }
    }
    fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => BinaryKind::Add,
            1 => BinaryKind::Sub,
            2 => BinaryKind::Mul,
            3 => BinaryKind::Div,
            _ => return None,
        })
    }
}

impl UnaryKind {
    fn to_u32(self) -> u32 {
        match self {
            UnaryKind::Relu => 0,
            UnaryKind::Relu1 => 1,
            UnaryKind::Relu6 => 2,
            UnaryKind::Logistic => 3,
            UnaryKind::Tanh => 4,
            UnaryKind::Floor => 5,
        }
    }
    fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => UnaryKind::Relu,
            1 => UnaryKind::Relu1,
            2 => UnaryKind::Relu6,
            3 => UnaryKind::Logistic,
            4 => UnaryKind::Tanh,
            5 => UnaryKind::Floor,
            _ => return None,
        })
    }
}

impl PoolKind {
    fn to_u32(self) -> u32 {
        match self {
            PoolKind::Average => 0,
            PoolKind::Max => 1,
            PoolKind::L2 => 2,
        }
    }
    fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => PoolKind::Average,
            1 => PoolKind::Max,
            2 => PoolKind::L2,
            _ => return None,
        })
    }
}

/// Opcode numbers (see the table in the module documentation).
pub mod opcodes {
    pub const BINARY: u32 = 1;
    pub const FULLY_CONNECTED: u32 = 2;
    pub const CONV_2D: u32 = 3;
    pub const DEPTHWISE_CONV_2D: u32 = 4;
    pub const POOL: u32 = 5;
    pub const UNARY: u32 = 6;
    pub const SOFTMAX: u32 = 7;
    pub const RESHAPE: u32 = 8;
    pub const CONCATENATION: u32 = 9;
    pub const L2_NORMALIZATION: u32 = 10;
    pub const DEPTH_TO_SPACE: u32 = 11;
    pub const SPACE_TO_DEPTH: u32 = 12;
    pub const RESIZE_BILINEAR: u32 = 13;
    pub const PAD: u32 = 14;
    pub const TRANSPOSE: u32 = 15;
    pub const MEAN: u32 = 16;
}

/// A cursor over untrusted parameter words.
struct Words<'a> {
    opcode: u32,
    words: &'a [u32],
    pos: usize,
}

impl<'a> Words<'a> {
    fn err(&self, reason: impl Into<String>) -> KernelError {
        KernelError::InvalidParams {
            opcode: self.opcode,
            reason: reason.into(),
        }
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let w = self
            .words
            .get(self.pos)
            .copied()
            .ok_or_else(|| self.err(format!("too few parameter words (missing {what})")))?;
        self.pos += 1;
        Ok(w)
    }
    fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(i32::from_ne_bytes(self.u32(what)?.to_ne_bytes()))
    }
    fn f32(&mut self, what: &str) -> Result<f32> {
        Ok(f32::from_bits(self.u32(what)?))
    }
    fn nonzero(&mut self, what: &str) -> Result<u32> {
        let v = self.u32(what)?;
        if v == 0 {
            return Err(self.err(format!("{what} must be at least 1")));
        }
        Ok(v)
    }
    fn bool(&mut self, what: &str) -> Result<bool> {
        match self.u32(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.err(format!("{what} must be 0 or 1, got {v}"))),
        }
    }
    fn act(&mut self) -> Result<Activation> {
        let v = self.u32("activation")?;
        Activation::from_u32(v).ok_or_else(|| self.err(format!("bad activation {v}")))
    }
    fn padding(&mut self) -> Result<Padding> {
        Ok(Padding {
            left: self.u32("padding left")?,
            right: self.u32("padding right")?,
            top: self.u32("padding top")?,
            bottom: self.u32("padding bottom")?,
        })
    }
    fn len(&mut self, what: &str, max: usize) -> Result<usize> {
        let n = self.u32(what)?;
        match usize::try_from(n) {
            Ok(n) if n <= max => Ok(n),
            _ => Err(self.err(format!("{what} {n} exceeds {max}"))),
        }
    }
    fn finish(&self) -> Result<()> {
        if self.pos != self.words.len() {
            return Err(self.err(format!(
                "{} trailing parameter words",
                self.words.len() - self.pos
            )));
        }
        Ok(())
    }
}

fn check_axis(w: &Words<'_>, axis: i32) -> Result<()> {
    // MAX_RANK is tiny, the cast cannot truncate.
    let r = MAX_RANK as i64;
    if i64::from(axis) < -r || i64::from(axis) >= r {
        return Err(w.err(format!("axis {axis} out of range for rank <= {MAX_RANK}")));
    }
    Ok(())
}

impl KernelOp {
    /// The op's name, for errors and traces.
    pub fn name(&self) -> &'static str {
        match self {
            KernelOp::Binary { kind, .. } => match kind {
                BinaryKind::Add => "ADD",
                BinaryKind::Sub => "SUB",
                BinaryKind::Mul => "MUL",
                BinaryKind::Div => "DIV",
            },
            KernelOp::FullyConnected { .. } => "FULLY_CONNECTED",
            KernelOp::Conv2d { .. } => "CONV_2D",
            KernelOp::DepthwiseConv2d { .. } => "DEPTHWISE_CONV_2D",
            KernelOp::Pool { kind, .. } => match kind {
                PoolKind::Average => "AVERAGE_POOL_2D",
                PoolKind::Max => "MAX_POOL_2D",
                PoolKind::L2 => "L2_POOL_2D",
            },
            KernelOp::Unary { kind } => match kind {
                UnaryKind::Relu => "RELU",
                UnaryKind::Relu1 => "RELU1",
                UnaryKind::Relu6 => "RELU6",
                UnaryKind::Logistic => "LOGISTIC",
                UnaryKind::Tanh => "TANH",
                UnaryKind::Floor => "FLOOR",
            },
            KernelOp::Softmax { .. } => "SOFTMAX",
            KernelOp::Reshape { .. } => "RESHAPE",
            KernelOp::Concatenation { .. } => "CONCATENATION",
            KernelOp::L2Normalization { .. } => "L2_NORMALIZATION",
            KernelOp::DepthToSpace { .. } => "DEPTH_TO_SPACE",
            KernelOp::SpaceToDepth { .. } => "SPACE_TO_DEPTH",
            KernelOp::ResizeBilinear { .. } => "RESIZE_BILINEAR",
            KernelOp::Pad { .. } => "PAD",
            KernelOp::Transpose { .. } => "TRANSPOSE",
            KernelOp::Mean { .. } => "MEAN",
        }
    }

    /// The stable opcode (see the table in the module documentation).
    pub fn opcode(&self) -> u32 {
        use opcodes::*;
        match self {
            KernelOp::Binary { .. } => BINARY,
            KernelOp::FullyConnected { .. } => FULLY_CONNECTED,
            KernelOp::Conv2d { .. } => CONV_2D,
            KernelOp::DepthwiseConv2d { .. } => DEPTHWISE_CONV_2D,
            KernelOp::Pool { .. } => POOL,
            KernelOp::Unary { .. } => UNARY,
            KernelOp::Softmax { .. } => SOFTMAX,
            KernelOp::Reshape { .. } => RESHAPE,
            KernelOp::Concatenation { .. } => CONCATENATION,
            KernelOp::L2Normalization { .. } => L2_NORMALIZATION,
            KernelOp::DepthToSpace { .. } => DEPTH_TO_SPACE,
            KernelOp::SpaceToDepth { .. } => SPACE_TO_DEPTH,
            KernelOp::ResizeBilinear { .. } => RESIZE_BILINEAR,
            KernelOp::Pad { .. } => PAD,
            KernelOp::Transpose { .. } => TRANSPOSE,
            KernelOp::Mean { .. } => MEAN,
        }
    }

    /// The parameter words (see the module documentation for the encoding).
    pub fn encode_params(&self) -> Vec<u32> {
        fn pad(p: &Padding) -> [u32; 4] {
            [p.left, p.right, p.top, p.bottom]
        }
        fn b(v: bool) -> u32 {
            u32::from(v)
        }
        fn i(v: i32) -> u32 {
            u32::from_ne_bytes(v.to_ne_bytes())
        }
        fn len(n: usize) -> u32 {
            // Lengths of valid ops are <= MAX_RANK; an absurd length saturates, and decode
            // rejects it.
            u32::try_from(n).unwrap_or(u32::MAX)
        }
        let mut w = Vec::new();
        match self {
            KernelOp::Binary { kind, act } => w.extend([kind.to_u32(), *act as u32]),
            KernelOp::FullyConnected { act } => w.push(*act as u32),
            KernelOp::Conv2d {
                pad: p,
                stride_w,
                stride_h,
                dilation_w,
                dilation_h,
                act,
                nchw,
            } => {
                w.extend(pad(p));
                w.extend([
                    *stride_w,
                    *stride_h,
                    *dilation_w,
                    *dilation_h,
                    *act as u32,
                    b(*nchw),
                ]);
            }
            KernelOp::DepthwiseConv2d {
                pad: p,
                stride_w,
                stride_h,
                dilation_w,
                dilation_h,
                depth_multiplier,
                act,
                nchw,
            } => {
                w.extend(pad(p));
                w.extend([
                    *stride_w,
                    *stride_h,
                    *dilation_w,
                    *dilation_h,
                    *depth_multiplier,
                    *act as u32,
                    b(*nchw),
                ]);
            }
            KernelOp::Pool {
                kind,
                pad: p,
                stride_w,
                stride_h,
                filter_w,
                filter_h,
                act,
                nchw,
            } => {
                w.push(kind.to_u32());
                w.extend(pad(p));
                w.extend([
                    *stride_w,
                    *stride_h,
                    *filter_w,
                    *filter_h,
                    *act as u32,
                    b(*nchw),
                ]);
            }
            KernelOp::Unary { kind } => w.push(kind.to_u32()),
            KernelOp::Softmax { beta, axis } => w.extend([beta.to_bits(), i(*axis)]),
            KernelOp::Reshape { shape } => {
                w.push(len(shape.len()));
                w.extend(shape.iter().map(|&d| u32::try_from(d).unwrap_or(u32::MAX)));
            }
            KernelOp::Concatenation { axis } => w.push(*axis),
            KernelOp::L2Normalization { axis } => w.push(i(*axis)),
            KernelOp::DepthToSpace { block, nchw } | KernelOp::SpaceToDepth { block, nchw } => {
                w.extend([*block, b(*nchw)])
            }
            KernelOp::ResizeBilinear {
                out_h,
                out_w,
                align_corners,
                half_pixel_centers,
                nchw,
            } => w.extend([
                *out_h,
                *out_w,
                b(*align_corners),
                b(*half_pixel_centers),
                b(*nchw),
            ]),
            KernelOp::Pad { pads, value } => {
                w.push(len(pads.len()));
                for (before, after) in pads {
                    w.extend([*before, *after]);
                }
                w.push(value.to_bits());
            }
            KernelOp::Transpose { perm } => {
                w.push(len(perm.len()));
                w.extend(perm.iter().copied());
            }
            KernelOp::Mean { axes, keep_dims } => {
                w.push(len(axes.len()));
                w.extend(axes.iter().copied());
                w.push(b(*keep_dims));
            }
        }
        w
    }

    /// Parses an opcode and its parameter words (untrusted) into an op, validating every
    /// word: unknown opcodes, wrong lengths, zero strides/dilations/blocks/filters, bad enum
    /// or bool values, ranks above [`MAX_RANK`], non-finite or non-positive softmax beta.
    pub fn decode(opcode: u32, params: &[u32]) -> Result<KernelOp> {
        use opcodes::*;
        let mut w = Words {
            opcode,
            words: params,
            pos: 0,
        };
        let op = match opcode {
            BINARY => {
                let k = w.u32("kind")?;
                let kind =
                    BinaryKind::from_u32(k).ok_or_else(|| w.err(format!("bad binary kind {k}")))?;
                KernelOp::Binary {
                    kind,
                    act: w.act()?,
                }
            }
            FULLY_CONNECTED => KernelOp::FullyConnected { act: w.act()? },
            CONV_2D => KernelOp::Conv2d {
                pad: w.padding()?,
                stride_w: w.nonzero("stride_w")?,
                stride_h: w.nonzero("stride_h")?,
                dilation_w: w.nonzero("dilation_w")?,
                dilation_h: w.nonzero("dilation_h")?,
                act: w.act()?,
                nchw: w.bool("nchw")?,
            },
            DEPTHWISE_CONV_2D => KernelOp::DepthwiseConv2d {
                pad: w.padding()?,
                stride_w: w.nonzero("stride_w")?,
                stride_h: w.nonzero("stride_h")?,
                dilation_w: w.nonzero("dilation_w")?,
                dilation_h: w.nonzero("dilation_h")?,
                depth_multiplier: w.nonzero("depth_multiplier")?,
                act: w.act()?,
                nchw: w.bool("nchw")?,
            },
            POOL => {
                let k = w.u32("kind")?;
                let kind =
                    PoolKind::from_u32(k).ok_or_else(|| w.err(format!("bad pool kind {k}")))?;
                KernelOp::Pool {
                    kind,
                    pad: w.padding()?,
                    stride_w: w.nonzero("stride_w")?,
                    stride_h: w.nonzero("stride_h")?,
                    filter_w: w.nonzero("filter_w")?,
                    filter_h: w.nonzero("filter_h")?,
                    act: w.act()?,
                    nchw: w.bool("nchw")?,
                }
            }
            UNARY => {
                let k = w.u32("kind")?;
                let kind =
                    UnaryKind::from_u32(k).ok_or_else(|| w.err(format!("bad unary kind {k}")))?;
                KernelOp::Unary { kind }
            }
            SOFTMAX => {
                let beta = w.f32("beta")?;
                if !(beta.is_finite() && beta > 0.0) {
                    return Err(w.err(format!("beta must be finite and > 0, got {beta}")));
                }
                let axis = w.i32("axis")?;
                check_axis(&w, axis)?;
                KernelOp::Softmax { beta, axis }
            }
            RESHAPE => {
                let n = w.len("rank", MAX_RANK)?;
                let mut shape = Vec::with_capacity(n);
                for _ in 0..n {
                    let d = w.u32("dimension")?;
                    let d = usize::try_from(d).map_err(|_| w.err("dimension too large"))?;
                    shape.push(d);
                }
                num_elements(&shape).map_err(|e| w.err(e.to_string()))?;
                KernelOp::Reshape { shape }
            }
            CONCATENATION => {
                let axis = w.u32("axis")?;
                if axis as usize >= MAX_RANK {
                    return Err(w.err(format!("axis {axis} out of range")));
                }
                KernelOp::Concatenation { axis }
            }
            L2_NORMALIZATION => {
                let axis = w.i32("axis")?;
                check_axis(&w, axis)?;
                KernelOp::L2Normalization { axis }
            }
            DEPTH_TO_SPACE => KernelOp::DepthToSpace {
                block: w.nonzero("block")?,
                nchw: w.bool("nchw")?,
            },
            SPACE_TO_DEPTH => KernelOp::SpaceToDepth {
                block: w.nonzero("block")?,
                nchw: w.bool("nchw")?,
            },
            RESIZE_BILINEAR => {
                let out_h = w.nonzero("out_h")?;
                let out_w = w.nonzero("out_w")?;
                let align_corners = w.bool("align_corners")?;
                let half_pixel_centers = w.bool("half_pixel_centers")?;
                if align_corners && half_pixel_centers {
                    return Err(w.err("align_corners and half_pixel_centers are exclusive"));
                }
                KernelOp::ResizeBilinear {
                    out_h,
                    out_w,
                    align_corners,
                    half_pixel_centers,
                    nchw: w.bool("nchw")?,
                }
            }
            PAD => {
                let n = w.len("rank", MAX_RANK)?;
                if n == 0 {
                    return Err(w.err("rank must be at least 1"));
                }
                let mut pads = Vec::with_capacity(n);
                for _ in 0..n {
                    pads.push((w.u32("pad before")?, w.u32("pad after")?));
                }
                KernelOp::Pad {
                    pads,
                    value: w.f32("value")?,
                }
            }
            TRANSPOSE => {
                let n = w.len("rank", MAX_RANK)?;
                let mut perm = Vec::with_capacity(n);
                let mut seen = [false; MAX_RANK];
                for _ in 0..n {
                    let p = w.u32("perm")?;
                    match seen.get_mut(p as usize) {
                        Some(s) if (p as usize) < n && !*s => *s = true,
                        _ => return Err(w.err(format!("perm is not a permutation of 0..{n}"))),
                    }
                    perm.push(p);
                }
                KernelOp::Transpose { perm }
            }
            MEAN => {
                let n = w.len("axis count", MAX_RANK)?;
                let mut axes = Vec::with_capacity(n);
                let mut seen = [false; MAX_RANK];
                for _ in 0..n {
                    let a = w.u32("axis")?;
                    match seen.get_mut(a as usize) {
                        Some(s) if !*s => *s = true,
                        _ => return Err(w.err(format!("axis {a} out of range or repeated"))),
                    }
                    axes.push(a);
                }
                KernelOp::Mean {
                    axes,
                    keep_dims: w.bool("keep_dims")?,
                }
            }
            _ => return Err(KernelError::UnknownOpcode(opcode)),
        };
        w.finish()?;
        Ok(op)
    }

    /// The accepted number of inputs.
    pub fn input_count(&self) -> RangeInclusive<usize> {
        match self {
            KernelOp::Binary { .. } => 2..=2,
            KernelOp::FullyConnected { .. }
            | KernelOp::Conv2d { .. }
            | KernelOp::DepthwiseConv2d { .. } => 3..=3,
            KernelOp::Concatenation { .. } => 1..=MAX_CONCAT_INPUTS,
            _ => 1..=1,
        }
    }

    /// An estimate of the arithmetic work of the op on these input shapes, for a timing
    /// model: multiply-accumulates for CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED, window
    /// elements for pooling, and otherwise the number of elements read and written.
    /// Validates the shapes as [`KernelOp::output_shapes`] does; saturates instead of
    /// overflowing.
    pub fn cost(&self, inputs: &[&[usize]]) -> Result<u64> {
        let out = self.output_shapes(inputs)?.remove(0);
        let n = |s: &[usize]| s.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64));
        let out_n = n(&out);
        let k = |i: usize, dims: &[usize]| {
            inputs.get(i).map_or(1, |s| {
                dims.iter()
                    .map(|&d| s.get(d).copied().unwrap_or(1) as u64)
                    .product()
            })
        };
        Ok(match self {
            KernelOp::Conv2d { .. } => out_n.saturating_mul(k(1, &[1, 2, 3])),
            KernelOp::DepthwiseConv2d { .. } => out_n.saturating_mul(k(1, &[1, 2])),
            KernelOp::FullyConnected { .. } => out_n.saturating_mul(k(1, &[1])),
            KernelOp::Pool {
                filter_w, filter_h, ..
            } => out_n
                .saturating_mul(u64::from(*filter_w))
                .saturating_mul(u64::from(*filter_h)),
            KernelOp::ResizeBilinear { .. } => out_n.saturating_mul(4),
            _ => inputs.iter().fold(out_n, |a, s| a.saturating_add(n(s))),
        })
    }

    /// The number of outputs (1 for every op).
    pub fn output_count(&self) -> usize {
        1
    }

    /// Validates the input shapes (count, ranks, dimensions) and returns each output's shape.
    pub fn output_shapes(&self, inputs: &[&[usize]]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        let range = self.input_count();
        if !range.contains(&inputs.len()) {
            return Err(KernelError::InputCount {
                op: name,
                min: *range.start(),
                max: *range.end(),
                got: inputs.len(),
            });
        }
        for s in inputs {
            num_elements(s)?;
        }
        let out = shape::output_shape(self, inputs)?;
        num_elements(&out)?;
        Ok(vec![out])
    }
}

/// Builds an [`KernelError::InvalidShape`].
pub(crate) fn bad_shape(op: &KernelOp, reason: impl Into<String>) -> KernelError {
    KernelError::InvalidShape {
        op: op.name(),
        reason: reason.into(),
    }
}

/// Runs `op`: checks the input and output counts, that each tensor's data length is the
/// product of its shape, and that the output shapes equal [`KernelOp::output_shapes`]; then
/// computes the outputs.
pub fn execute(op: &KernelOp, inputs: &[Tensor<'_>], outputs: &mut [TensorMut<'_>]) -> Result<()> {
    let name = op.name();
    let in_shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape).collect();
    let expected = op.output_shapes(&in_shapes)?;
    if outputs.len() != op.output_count() {
        return Err(KernelError::OutputCount {
            op: name,
            expected: op.output_count(),
            got: outputs.len(),
        });
    }
    for (index, t) in inputs.iter().enumerate() {
        let n = num_elements(t.shape)?;
        if t.data.len() != n {
            return Err(KernelError::DataLength {
                op: name,
                which: "input",
                index,
                shape: t.shape.to_vec(),
                expected: n,
                got: t.data.len(),
            });
        }
    }
    for (index, (t, want)) in outputs.iter().zip(&expected).enumerate() {
        if t.shape != want.as_slice() {
            return Err(KernelError::OutputShape {
                op: name,
                index,
                expected: want.clone(),
                got: t.shape.to_vec(),
            });
        }
        let n = num_elements(t.shape)?;
        if t.data.len() != n {
            return Err(KernelError::DataLength {
                op: name,
                which: "output",
                index,
                shape: t.shape.to_vec(),
                expected: n,
                got: t.data.len(),
            });
        }
    }
    let Some(out) = outputs.first_mut() else {
        return Ok(());
    };
    let out = TensorMut {
        shape: out.shape,
        data: &mut *out.data,
    };
    run(op, inputs, out)
}

/// Dispatches to the kernel; shapes and lengths are already validated.
fn run(op: &KernelOp, inputs: &[Tensor<'_>], out: TensorMut<'_>) -> Result<()> {
    let input = |i: usize| {
        inputs
            .get(i)
            .copied()
            .ok_or_else(|| bad_shape(op, format!("missing input {i}")))
    };
    match op {
        KernelOp::Binary { kind, act } => {
            elementwise::binary(*kind, *act, input(0)?, input(1)?, out);
            Ok(())
        }
        KernelOp::Unary { kind } => {
            activation::unary(*kind, input(0)?.data, out.data);
            Ok(())
        }
        KernelOp::Softmax { beta, axis } => {
            let x = input(0)?;
            let axis = shape::resolve_axis(op, *axis, x.shape.len())?;
            activation::softmax(*beta, axis, x, out.data);
            Ok(())
        }
        KernelOp::FullyConnected { act } => {
            conv::fully_connected(*act, input(0)?, input(1)?, input(2)?, out)
        }
        KernelOp::Conv2d { .. } => conv::conv2d(op, input(0)?, input(1)?, input(2)?, out),
        KernelOp::DepthwiseConv2d { .. } => {
            conv::depthwise_conv2d(op, input(0)?, input(1)?, input(2)?, out)
        }
        KernelOp::Pool { .. } => pool::pool(op, input(0)?, out),
        KernelOp::L2Normalization { axis } => {
            let x = input(0)?;
            let axis = shape::resolve_axis(op, *axis, x.shape.len())?;
            normalization::l2_normalization(axis, x, out.data);
            Ok(())
        }
        KernelOp::Mean { axes, .. } => reduction::mean(op, axes, input(0)?, out.data),
        KernelOp::Reshape { .. } => {
            out.data.copy_from_slice(input(0)?.data);
            Ok(())
        }
        KernelOp::Concatenation { axis } => shape::concatenation(*axis as usize, inputs, out),
        KernelOp::DepthToSpace { block, nchw } => {
            shape::depth_to_space(*block as usize, *nchw, input(0)?, out)
        }
        KernelOp::SpaceToDepth { block, nchw } => {
            shape::space_to_depth(*block as usize, *nchw, input(0)?, out)
        }
        KernelOp::ResizeBilinear {
            align_corners,
            half_pixel_centers,
            nchw,
            ..
        } => shape::resize_bilinear(*align_corners, *half_pixel_centers, *nchw, input(0)?, out),
        KernelOp::Pad { pads, value } => shape::pad(pads, *value, input(0)?, out),
        KernelOp::Transpose { perm } => shape::transpose(perm, input(0)?, out),
    }
}
