//! Lowering: one NNAPI operation, with its scalar and constant-tensor parameters, to one
//! device kernel. NNAPI's conventions (implicit padding schemes, operand-order variants,
//! optional inputs, negative axes, -1 in RESHAPE) are resolved here, so the device sees
//! only explicit parameters.

use vnpu_emu::kernels::{Activation, BinaryKind, KernelOp, Padding, PoolKind, UnaryKind};

use super::CompileError;
use crate::hal::{OperandLifeTime, OperandType, OperationType, Subgraph};

/// Read access to a subgraph's operands: types, shapes known so far, constant values.
pub struct Operands<'a> {
    pub subgraph: &'a Subgraph,
    /// Constant bytes of each operand (CONSTANT_COPY / CONSTANT_REFERENCE), if any.
    pub constants: &'a [Option<Vec<u8>>],
    /// Shapes known so far (model dims, request dims or inferred).
    pub shapes: &'a [Option<Vec<usize>>],
    /// Operands whose values the host learns only at execution (non-float model inputs
    /// used as parameters, such as RESHAPE's shape).
    pub deferred: &'a [bool],
    /// Model inputs the request leaves out (`hasNoValue`): treated as NO_VALUE.
    pub omitted: &'a [bool],
}

/// The operations the compiler lowers (float32), for `vnpu info` and tests.
pub const SUPPORTED_OPERATIONS: &[OperationType] = &[
    OperationType::ADD,
    OperationType::SUB,
    OperationType::MUL,
    OperationType::DIV,
    OperationType::FULLY_CONNECTED,
    OperationType::CONV_2D,
    OperationType::DEPTHWISE_CONV_2D,
    OperationType::AVERAGE_POOL_2D,
    OperationType::MAX_POOL_2D,
    OperationType::L2_POOL_2D,
    OperationType::RELU,
    OperationType::RELU1,
    OperationType::RELU6,
    OperationType::LOGISTIC,
    OperationType::TANH,
    OperationType::SOFTMAX,
    OperationType::RESHAPE,
    OperationType::CONCATENATION,
    OperationType::FLOOR,
    OperationType::L2_NORMALIZATION,
    OperationType::DEPTH_TO_SPACE,
    OperationType::SPACE_TO_DEPTH,
    OperationType::RESIZE_BILINEAR,
    OperationType::PAD,
    OperationType::TRANSPOSE,
    OperationType::MEAN,
    OperationType::SQUEEZE,
];

/// A lowered operation: the kernel plus the operands that become its tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct Lowered {
    pub op: KernelOp,
    pub inputs: Vec<u32>,
    pub outputs: Vec<u32>,
}

fn unsupported(msg: impl Into<String>) -> CompileError {
    CompileError::Unsupported(msg.into())
}

impl Operands<'_> {
    fn ty(&self, i: u32) -> Result<OperandType, CompileError> {
        self.subgraph
            .operands
            .get(i as usize)
            .map(|o| o.r#type)
            .ok_or_else(|| unsupported(format!("operand {i} out of range")))
    }

    fn omitted(&self, i: u32) -> bool {
        self.subgraph
            .operands
            .get(i as usize)
            .is_some_and(|o| o.lifetime == OperandLifeTime::NO_VALUE)
            || self.omitted.get(i as usize).copied().unwrap_or(false)
    }

    fn constant(&self, i: u32) -> Result<&[u8], CompileError> {
        if let Some(c) = self.constants.get(i as usize).and_then(|c| c.as_deref()) {
            return Ok(c);
        }
        if self.deferred.get(i as usize).copied().unwrap_or(false) {
            return Err(CompileError::UnknownValue(i));
        }
        Err(unsupported(format!("operand {i} must be a constant")))
    }

    /// The 4 bytes of a constant scalar operand that must have type `want`.
    fn scalar4(&self, i: u32, want: OperandType) -> Result<[u8; 4], CompileError> {
        let t = self.ty(i)?;
        if t != want {
            return Err(unsupported(format!(
                "operand {i} must be {want:?}, is {t:?}"
            )));
        }
        self.constant(i)?
            .get(..4)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| unsupported("short scalar"))
    }

    fn scalar_i32(&self, i: u32) -> Result<i32, CompileError> {
        self.scalar4(i, OperandType::INT32).map(i32::from_le_bytes)
    }

    fn scalar_f32(&self, i: u32) -> Result<f32, CompileError> {
        self.scalar4(i, OperandType::FLOAT32)
            .map(f32::from_le_bytes)
    }

    fn scalar_bool(&self, i: u32) -> Result<bool, CompileError> {
        let t = self.ty(i)?;
        if t != OperandType::BOOL {
            return Err(unsupported(format!("operand {i} must be BOOL, is {t:?}")));
        }
        Ok(self.constant(i)?.first().is_some_and(|&b| b != 0))
    }

    fn tensor_i32(&self, i: u32) -> Result<Vec<i32>, CompileError> {
        if self.ty(i)? != OperandType::TENSOR_INT32 {
            return Err(unsupported(format!("operand {i} must be TENSOR_INT32")));
        }
        Ok(self
            .constant(i)?
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn shape(&self, i: u32) -> Result<&[usize], CompileError> {
        self.shapes
            .get(i as usize)
            .and_then(|s| s.as_deref())
            .ok_or(CompileError::UnknownShape(i))
    }

    fn float_tensor(&self, i: u32) -> Result<(), CompileError> {
        match self.ty(i)? {
            OperandType::TENSOR_FLOAT32 => Ok(()),
            t => Err(unsupported(format!(
                "operand {i} has type {t:?}; the device computes float32"
            ))),
        }
    }

    /// An optional trailing input: `None` if absent or omitted.
    fn opt(&self, inputs: &[u32], k: usize) -> Option<u32> {
        inputs.get(k).copied().filter(|&i| !self.omitted(i))
    }
}

fn act(code: i32) -> Result<Activation, CompileError> {
    Ok(match code {
        0 => Activation::None,
        1 => Activation::Relu,
        2 => Activation::Relu1,
        3 => Activation::Relu6,
        c => return Err(CompileError::InvalidParam(format!("fused activation {c}"))),
    })
}

fn positive(v: i32, what: &str) -> Result<u32, CompileError> {
    u32::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| CompileError::InvalidParam(format!("{what} = {v}")))
}

fn non_negative(v: i32, what: &str) -> Result<u32, CompileError> {
    u32::try_from(v).map_err(|_| CompileError::InvalidParam(format!("{what} = {v}")))
}

/// NNAPI's implicit padding: (before, after) for one spatial dimension.
fn implicit_padding(
    scheme: i32,
    input: usize,
    filter: u32,
    stride: u32,
    dilation: u32,
) -> Result<(u32, u32), CompileError> {
    let eff = (filter as u64 - 1) * dilation as u64 + 1;
    match scheme {
        1 => {
            // SAME
            let out = (input as u64).div_ceil(stride as u64);
            let needed = ((out.max(1) - 1) * stride as u64 + eff).saturating_sub(input as u64);
            let before = needed / 2;
            Ok((before as u32, (needed - before) as u32))
        }
        2 => Ok((0, 0)), // VALID
        s => Err(CompileError::InvalidParam(format!("padding scheme {s}"))),
    }
}

/// Spatial (height, width) of a 4-D activation in NHWC or NCHW.
fn spatial(shape: &[usize], nchw: bool) -> Result<(usize, usize), CompileError> {
    if shape.len() != 4 {
        return Err(CompileError::InvalidParam(format!(
            "expected a 4-D input, got {shape:?}"
        )));
    }
    Ok(if nchw {
        (shape[2], shape[3])
    } else {
        (shape[1], shape[2])
    })
}

fn axis(a: i32, rank: usize) -> Result<u32, CompileError> {
    let r = rank as i32;
    if a < -r || a >= r {
        return Err(CompileError::InvalidParam(format!(
            "axis {a} for rank {rank}"
        )));
    }
    Ok(if a < 0 { (a + r) as u32 } else { a as u32 })
}

/// Conv/depthwise/pool geometry shared by the explicit and implicit forms.
struct Window {
    pad: Padding,
    stride_w: u32,
    stride_h: u32,
}

/// Lowers one operation. `inputs`/`outputs` are the operation's operand indices.
pub fn lower(
    ops: &Operands<'_>,
    ty: OperationType,
    inputs: &[u32],
    outputs: &[u32],
) -> Result<Lowered, CompileError> {
    let n = inputs.len();
    let arg = |k: usize| {
        inputs
            .get(k)
            .copied()
            .ok_or_else(|| unsupported(format!("missing input {k}")))
    };
    let out0 = *outputs.first().ok_or_else(|| unsupported("no output"))?;
    ops.float_tensor(out0)?;
    let data = |ids: Vec<u32>, op: KernelOp| {
        Ok(Lowered {
            op,
            inputs: ids,
            outputs: vec![out0],
        })
    };

    match ty {
        OperationType::ADD | OperationType::SUB | OperationType::MUL | OperationType::DIV => {
            let kind = match ty {
                OperationType::ADD => BinaryKind::Add,
                OperationType::SUB => BinaryKind::Sub,
                OperationType::MUL => BinaryKind::Mul,
                _ => BinaryKind::Div,
            };
            ops.float_tensor(arg(0)?)?;
            ops.float_tensor(arg(1)?)?;
            data(
                vec![arg(0)?, arg(1)?],
                KernelOp::Binary {
                    kind,
                    act: act(ops.scalar_i32(arg(2)?)?)?,
                },
            )
        }
        OperationType::FULLY_CONNECTED => {
            for k in 0..3 {
                ops.float_tensor(arg(k)?)?;
            }
            data(
                vec![arg(0)?, arg(1)?, arg(2)?],
                KernelOp::FullyConnected {
                    act: act(ops.scalar_i32(arg(3)?)?)?,
                },
            )
        }
        OperationType::CONV_2D | OperationType::DEPTHWISE_CONV_2D => {
            let depthwise = ty == OperationType::DEPTHWISE_CONV_2D;
            for k in 0..3 {
                ops.float_tensor(arg(k)?)?;
            }
            // Explicit padding has 4 pad scalars where implicit has 1 scheme; tell them
            // apart by the type of the operand where the layout flag would sit.
            let extra = depthwise as usize; // depth multiplier
            let explicit = n >= 10 + extra && ops.ty(arg(7 + extra)?)? == OperandType::INT32;
            // Index of the stride-height operand; the multiplier (depthwise), the
            // activation and the optional layout flag follow it.
            let geom_end = if explicit { 8 } else { 5 };
            let mult = if depthwise {
                positive(ops.scalar_i32(arg(geom_end + 1)?)?, "depth multiplier")?
            } else {
                1
            };
            let a = act(ops.scalar_i32(arg(geom_end + 1 + extra)?)?)?;
            let layout_k = geom_end + 2 + extra;
            let nchw = match ops.opt(inputs, layout_k) {
                Some(i) => ops.scalar_bool(i)?,
                None => false,
            };
            let dil_w = ops
                .opt(inputs, layout_k + 1)
                .map(|i| ops.scalar_i32(i))
                .transpose()?
                .unwrap_or(1);
            let dil_h = ops
                .opt(inputs, layout_k + 2)
                .map(|i| ops.scalar_i32(i))
                .transpose()?
                .unwrap_or(1);
            let (dilation_w, dilation_h) =
                (positive(dil_w, "dilation")?, positive(dil_h, "dilation")?);
            let filter = ops.shape(arg(1)?)?;
            let (kh, kw) = (
                *filter.get(1).ok_or_else(|| unsupported("filter rank"))? as u32,
                *filter.get(2).ok_or_else(|| unsupported("filter rank"))? as u32,
            );
            let w = window(
                ops,
                inputs,
                explicit,
                geom_end,
                arg(0)?,
                nchw,
                (kw, kh),
                (dilation_w, dilation_h),
            )?;
            let ids = vec![arg(0)?, arg(1)?, arg(2)?];
            if depthwise {
                data(
                    ids,
                    KernelOp::DepthwiseConv2d {
                        pad: w.pad,
                        stride_w: w.stride_w,
                        stride_h: w.stride_h,
                        dilation_w,
                        dilation_h,
                        depth_multiplier: mult,
                        act: a,
                        nchw,
                    },
                )
            } else {
                data(
                    ids,
                    KernelOp::Conv2d {
                        pad: w.pad,
                        stride_w: w.stride_w,
                        stride_h: w.stride_h,
                        dilation_w,
                        dilation_h,
                        act: a,
                        nchw,
                    },
                )
            }
        }
        OperationType::AVERAGE_POOL_2D | OperationType::MAX_POOL_2D | OperationType::L2_POOL_2D => {
            let kind = match ty {
                OperationType::AVERAGE_POOL_2D => PoolKind::Average,
                OperationType::MAX_POOL_2D => PoolKind::Max,
                _ => PoolKind::L2,
            };
            ops.float_tensor(arg(0)?)?;
            let explicit = n >= 10;
            let (f, a_at, layout_at) = if explicit { (7, 9, 10) } else { (4, 6, 7) };
            let filter_w = positive(ops.scalar_i32(arg(f)?)?, "filter width")?;
            let filter_h = positive(ops.scalar_i32(arg(f + 1)?)?, "filter height")?;
            let a = act(ops.scalar_i32(arg(a_at)?)?)?;
            let nchw = ops
                .opt(inputs, layout_at)
                .map(|i| ops.scalar_bool(i))
                .transpose()?
                .unwrap_or(false);
            let geom_end = if explicit { 6 } else { 3 };
            let w = window(
                ops,
                inputs,
                explicit,
                geom_end,
                arg(0)?,
                nchw,
                (filter_w, filter_h),
                (1, 1),
            )?;
            data(
                vec![arg(0)?],
                KernelOp::Pool {
                    kind,
                    pad: w.pad,
                    stride_w: w.stride_w,
                    stride_h: w.stride_h,
                    filter_w,
                    filter_h,
                    act: a,
                    nchw,
                },
            )
        }
        OperationType::RELU
        | OperationType::RELU1
        | OperationType::RELU6
        | OperationType::LOGISTIC
        | OperationType::TANH
        | OperationType::FLOOR => {
            let kind = match ty {
                OperationType::RELU => UnaryKind::Relu,
                OperationType::RELU1 => UnaryKind::Relu1,
                OperationType::RELU6 => UnaryKind::Relu6,
                OperationType::LOGISTIC => UnaryKind::Logistic,
                OperationType::TANH => UnaryKind::Tanh,
                _ => UnaryKind::Floor,
            };
            ops.float_tensor(arg(0)?)?;
            data(vec![arg(0)?], KernelOp::Unary { kind })
        }
        OperationType::SOFTMAX => {
            ops.float_tensor(arg(0)?)?;
            let beta = ops.scalar_f32(arg(1)?)?;
            let ax = ops
                .opt(inputs, 2)
                .map(|i| ops.scalar_i32(i))
                .transpose()?
                .unwrap_or(-1);
            data(vec![arg(0)?], KernelOp::Softmax { beta, axis: ax })
        }
        OperationType::RESHAPE => {
            ops.float_tensor(arg(0)?)?;
            let want = ops.tensor_i32(arg(1)?)?;
            let numel: usize = ops.shape(arg(0)?)?.iter().product();
            data(
                vec![arg(0)?],
                KernelOp::Reshape {
                    shape: resolve_reshape(&want, numel)?,
                },
            )
        }
        OperationType::SQUEEZE => {
            ops.float_tensor(arg(0)?)?;
            let shape = ops.shape(arg(0)?)?;
            let axes: Vec<u32> = match ops.opt(inputs, 1) {
                Some(i) => ops
                    .tensor_i32(i)?
                    .into_iter()
                    .map(|a| axis(a, shape.len()))
                    .collect::<Result<_, _>>()?,
                None => (0..shape.len() as u32)
                    .filter(|&d| shape[d as usize] == 1)
                    .collect(),
            };
            let mut out = Vec::new();
            for (d, &s) in shape.iter().enumerate() {
                if axes.contains(&(d as u32)) {
                    if s != 1 {
                        return Err(CompileError::InvalidParam(format!(
                            "squeezing dimension {d} of size {s}"
                        )));
                    }
                } else {
                    out.push(s);
                }
            }
            data(vec![arg(0)?], KernelOp::Reshape { shape: out })
        }
        OperationType::CONCATENATION => {
            let (&ax_id, tensors) = inputs
                .split_last()
                .ok_or_else(|| unsupported("no inputs"))?;
            for &t in tensors {
                ops.float_tensor(t)?;
            }
            let rank = ops
                .shape(*tensors.first().ok_or_else(|| unsupported("no inputs"))?)?
                .len();
            data(
                tensors.to_vec(),
                KernelOp::Concatenation {
                    axis: axis(ops.scalar_i32(ax_id)?, rank)?,
                },
            )
        }
        OperationType::L2_NORMALIZATION => {
            ops.float_tensor(arg(0)?)?;
            let ax = ops
                .opt(inputs, 1)
                .map(|i| ops.scalar_i32(i))
                .transpose()?
                .unwrap_or(-1);
            data(vec![arg(0)?], KernelOp::L2Normalization { axis: ax })
        }
        OperationType::DEPTH_TO_SPACE | OperationType::SPACE_TO_DEPTH => {
            ops.float_tensor(arg(0)?)?;
            let block = positive(ops.scalar_i32(arg(1)?)?, "block size")?;
            let nchw = ops
                .opt(inputs, 2)
                .map(|i| ops.scalar_bool(i))
                .transpose()?
                .unwrap_or(false);
            let op = if ty == OperationType::DEPTH_TO_SPACE {
                KernelOp::DepthToSpace { block, nchw }
            } else {
                KernelOp::SpaceToDepth { block, nchw }
            };
            data(vec![arg(0)?], op)
        }
        OperationType::RESIZE_BILINEAR => {
            ops.float_tensor(arg(0)?)?;
            let nchw = ops
                .opt(inputs, 3)
                .map(|i| ops.scalar_bool(i))
                .transpose()?
                .unwrap_or(false);
            let align_corners = ops
                .opt(inputs, 4)
                .map(|i| ops.scalar_bool(i))
                .transpose()?
                .unwrap_or(false);
            let half_pixel_centers = ops
                .opt(inputs, 5)
                .map(|i| ops.scalar_bool(i))
                .transpose()?
                .unwrap_or(false);
            let (out_w, out_h) = if ops.ty(arg(1)?)? == OperandType::FLOAT32 {
                let (h, w) = spatial(ops.shape(arg(0)?)?, nchw)?;
                let sw = ops.scalar_f32(arg(1)?)?;
                let sh = ops.scalar_f32(arg(2)?)?;
                let scaled = |n: usize, s: f32| -> Result<u32, CompileError> {
                    let v = (n as f64 * s as f64).floor();
                    if !(1.0..=65536.0).contains(&v) {
                        return Err(CompileError::InvalidParam(format!("resize scale {s}")));
                    }
                    Ok(v as u32)
                };
                (scaled(w, sw)?, scaled(h, sh)?)
            } else {
                (
                    positive(ops.scalar_i32(arg(1)?)?, "output width")?,
                    positive(ops.scalar_i32(arg(2)?)?, "output height")?,
                )
            };
            data(
                vec![arg(0)?],
                KernelOp::ResizeBilinear {
                    out_h,
                    out_w,
                    align_corners,
                    half_pixel_centers,
                    nchw,
                },
            )
        }
        OperationType::PAD => {
            ops.float_tensor(arg(0)?)?;
            let rank = ops.shape(arg(0)?)?.len();
            let p = ops.tensor_i32(arg(1)?)?;
            if p.len() != rank * 2 {
                return Err(CompileError::InvalidParam(format!(
                    "paddings has {} values for rank {rank}",
                    p.len()
                )));
            }
            let pads = p
                .chunks_exact(2)
                .map(|c| {
                    Ok((
                        non_negative(c[0], "padding")?,
                        non_negative(c[1], "padding")?,
                    ))
                })
                .collect::<Result<_, CompileError>>()?;
            data(vec![arg(0)?], KernelOp::Pad { pads, value: 0.0 })
        }
        OperationType::TRANSPOSE => {
            ops.float_tensor(arg(0)?)?;
            let rank = ops.shape(arg(0)?)?.len();
            let perm: Vec<u32> = match ops.opt(inputs, 1) {
                Some(i) => ops
                    .tensor_i32(i)?
                    .into_iter()
                    .map(|p| non_negative(p, "perm"))
                    .collect::<Result<_, _>>()?,
                None => (0..rank as u32).rev().collect(),
            };
            data(vec![arg(0)?], KernelOp::Transpose { perm })
        }
        OperationType::MEAN => {
            ops.float_tensor(arg(0)?)?;
            let rank = ops.shape(arg(0)?)?.len();
            let mut axes: Vec<u32> = ops
                .tensor_i32(arg(1)?)?
                .into_iter()
                .map(|a| axis(a, rank))
                .collect::<Result<_, _>>()?;
            axes.sort_unstable();
            axes.dedup();
            let keep_dims = ops.scalar_i32(arg(2)?)? != 0;
            data(vec![arg(0)?], KernelOp::Mean { axes, keep_dims })
        }
        t => Err(unsupported(format!(
            "operation {} is not supported",
            t.name().unwrap_or("(unknown)")
        ))),
    }
}

/// Padding and strides from either form. `geom_end` is the index of the stride-height
/// operand; the padding operands sit just before the strides.
#[allow(clippy::too_many_arguments)]
fn window(
    ops: &Operands<'_>,
    inputs: &[u32],
    explicit: bool,
    geom_end: usize,
    input: u32,
    nchw: bool,
    (filter_w, filter_h): (u32, u32),
    (dil_w, dil_h): (u32, u32),
) -> Result<Window, CompileError> {
    let at = |k: usize| {
        inputs
            .get(k)
            .copied()
            .ok_or_else(|| unsupported(format!("missing input {k}")))
    };
    let stride_w = positive(ops.scalar_i32(at(geom_end - 1)?)?, "stride")?;
    let stride_h = positive(ops.scalar_i32(at(geom_end)?)?, "stride")?;
    let pad = if explicit {
        let p = |k| {
            ops.scalar_i32(at(k)?)
                .and_then(|v| non_negative(v, "padding"))
        };
        Padding {
            left: p(geom_end - 5)?,
            right: p(geom_end - 4)?,
            top: p(geom_end - 3)?,
            bottom: p(geom_end - 2)?,
        }
    } else {
        let scheme = ops.scalar_i32(at(geom_end - 2)?)?;
        let (h, w) = spatial(ops.shape(input)?, nchw)?;
        let (left, right) = implicit_padding(scheme, w, filter_w, stride_w, dil_w)?;
        let (top, bottom) = implicit_padding(scheme, h, filter_h, stride_h, dil_h)?;
        Padding {
            left,
            right,
            top,
            bottom,
        }
    };
    Ok(Window {
        pad,
        stride_w,
        stride_h,
    })
}

/// RESHAPE's target: at most one -1, resolved from the element count.
fn resolve_reshape(want: &[i32], numel: usize) -> Result<Vec<usize>, CompileError> {
    let bad = || CompileError::InvalidParam(format!("cannot reshape {numel} elements to {want:?}"));
    let mut known = 1usize;
    let mut infer = None;
    for (i, &d) in want.iter().enumerate() {
        match d {
            -1 if infer.is_none() => infer = Some(i),
            d if d >= 0 => known = known.checked_mul(d as usize).ok_or_else(bad)?,
            _ => return Err(bad()),
        }
    }
    let mut out: Vec<usize> = want.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(bad());
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(bad());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SUPPORTED_OPERATIONS` (what `vnpu info` prints) lists exactly the operations
    /// `lower` has an arm for.
    #[test]
    fn supported_list_matches_lowering() {
        let float = crate::hal::Operand {
            r#type: OperandType::TENSOR_FLOAT32,
            ..Default::default()
        };
        let sg = Subgraph {
            operands: vec![float],
            ..Default::default()
        };
        let ops = Operands {
            subgraph: &sg,
            constants: &[],
            shapes: &[],
            deferred: &[],
            omitted: &[],
        };
        for &ty in OperationType::ALL {
            let r = lower(&ops, ty, &[], &[0]);
            let unknown =
                matches!(&r, Err(CompileError::Unsupported(m)) if m.starts_with("operation "));
            assert_eq!(
                !unknown,
                SUPPORTED_OPERATIONS.contains(&ty),
                "{ty:?}: {r:?}"
            );
        }
    }

    #[test]
    fn same_padding_matches_nnapi() {
        // in 224, filter 3, stride 2 -> out 112, total pad 1: (0, 1).
        assert_eq!(implicit_padding(1, 224, 3, 2, 1).unwrap(), (0, 1));
        // in 5, filter 3, stride 1 -> (1, 1).
        assert_eq!(implicit_padding(1, 5, 3, 1, 1).unwrap(), (1, 1));
        assert_eq!(implicit_padding(2, 5, 3, 1, 1).unwrap(), (0, 0));
        assert!(implicit_padding(3, 5, 3, 1, 1).is_err());
    }

    #[test]
    fn reshape_resolves_minus_one() {
        assert_eq!(resolve_reshape(&[-1, 4], 12).unwrap(), vec![3, 4]);
        assert!(resolve_reshape(&[-1, -1], 12).is_err());
        assert!(resolve_reshape(&[5], 12).is_err());
        assert!(resolve_reshape(&[-1, 0], 12).is_err());
    }
}
