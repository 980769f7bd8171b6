//! TFLite builtin operators to NNAPI operations, one entry each in [`MAPPINGS`]: the
//! builtin code, its name and how its inputs and options become the NNAPI operation's
//! operands (the options tables' slots are the schema's, noted beside each read).

use super::import::{quantisation, tensor_type, Builder, Graph, OpRec, Sparsity};
use super::schema::Table;
use super::ImportError;
use crate::hal::{ExtraParams, HalVersion, Operand, OperandType, OperationType as Op};

/// A mapped operator.
pub struct Mapped;

type MapFn = fn(&mut Ctx<'_, '_>) -> Result<Mapped, ImportError>;

/// One builtin's mapping.
struct Mapping {
    code: i32,
    name: &'static str,
    map: MapFn,
    /// Where the options the mapping reads sit in the C parameter struct the runtime hands
    /// a delegate (`builtin_op_data.h`), for rebuilding the options table from it.
    c: &'static [CParam],
}

/// A field of a builtin's C parameter struct, by byte offset, and how the FlatBuffer
/// options table holds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CField {
    /// A C `int` kept as an int32 option.
    I32(usize),
    /// A C enum `int` (fused activation, weights format) kept as a byte option.
    Enum(usize),
    /// A C `bool` kept as a byte option.
    Bool(usize),
    /// A C `float`.
    F32(usize),
    /// `TfLitePadding` (SAME 1, VALID 2) as the file's Padding byte (SAME 0, VALID 1).
    Padding(usize),
    /// An `int32_t[max]` array with its `int` count at `count_at`, kept as an int vector.
    Ints {
        /// The array's offset.
        at: usize,
        /// The count's offset.
        count_at: usize,
        /// The array's capacity.
        max: usize,
    },
}

/// One option: its options-table slot and its C field.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CParam {
    /// The options table's vtable slot.
    pub slot: u16,
    /// Where the runtime's C struct holds it.
    pub field: CField,
}

const fn cp(slot: u16, field: CField) -> CParam {
    CParam { slot, field }
}

/// An option value for an options table.
#[derive(Clone, Debug, PartialEq)]
pub enum OptValue {
    /// A byte (enums, bools).
    I8(i8),
    /// An int32.
    I32(i32),
    /// A float32.
    F32(f32),
    /// A vector of int32.
    Ints(Vec<i32>),
}

use CField::{Bool, Enum, Padding, F32, I32};
/// The fused activation is the struct's first field, options slot 4.
const ACT0: &[CParam] = &[cp(4, Enum(0))];
const POOL: &[CParam] = &[
    cp(4, Padding(0)),
    cp(6, I32(4)),
    cp(8, I32(8)),
    cp(10, I32(12)),
    cp(12, I32(16)),
    cp(14, Enum(20)),
];
const CONV: &[CParam] = &[
    cp(4, Padding(0)),
    cp(6, I32(4)),
    cp(8, I32(8)),
    cp(10, Enum(12)),
    cp(12, I32(16)),
    cp(14, I32(20)),
];
const DEPTHWISE: &[CParam] = &[
    cp(4, Padding(0)),
    cp(6, I32(4)),
    cp(8, I32(8)),
    cp(10, I32(12)),
    cp(12, Enum(16)),
    cp(14, I32(20)),
    cp(16, I32(24)),
];
const TRANSPOSE_CONV: &[CParam] = &[
    cp(4, Padding(0)),
    cp(6, I32(4)),
    cp(8, I32(8)),
    cp(10, Enum(12)),
];
const FULLY_CONNECTED: &[CParam] = &[cp(4, Enum(0)), cp(6, Enum(4)), cp(8, Bool(8))];
const CONCATENATION: &[CParam] = &[cp(4, I32(0)), cp(6, Enum(4))];
const RESHAPE: &[CParam] = &[cp(
    4,
    CField::Ints {
        at: 0,
        count_at: 32,
        max: 8,
    },
)];
const SQUEEZE: &[CParam] = &[cp(
    4,
    CField::Ints {
        at: 0,
        count_at: 32,
        max: 8,
    },
)];
const STRIDED_SLICE: &[CParam] = &[
    cp(4, I32(0)),
    cp(6, I32(4)),
    cp(8, I32(8)),
    cp(10, I32(12)),
    cp(12, I32(16)),
    cp(14, Bool(20)),
];
const RESIZE_BILINEAR: &[CParam] = &[cp(8, Bool(0)), cp(10, Bool(1))];
const RESIZE_NEAREST: &[CParam] = &[cp(4, Bool(0)), cp(6, Bool(1))];
const INT0: &[CParam] = &[cp(4, I32(0))];
const TWO_INTS: &[CParam] = &[cp(4, I32(0)), cp(6, I32(4))];
const FLOAT0: &[CParam] = &[cp(4, F32(0))];
const KEEP_DIMS: &[CParam] = &[cp(4, Bool(0))];

/// What a mapping sees: the builder, the operator's tensors and its options.
struct Ctx<'b, 'a> {
    b: &'b mut Builder<'a>,
    ins: &'b [Option<usize>],
    outs: &'b [Option<usize>],
    options: Option<Table<'a>>,
    /// A custom operator's options bytes.
    custom_options: &'a [u8],
}

/// The most output channels a filter without a bias may have (its zero bias is made
/// by the importer; a real model has far fewer).
const MAX_ZERO_BIAS: u32 = 1 << 24;

fn unsupported(reason: impl Into<String>) -> ImportError {
    ImportError::Unsupported {
        index: 0,
        op: String::new(),
        reason: reason.into(),
    }
}

fn bad(reason: impl Into<String>) -> ImportError {
    ImportError::Operator {
        index: 0,
        op: String::new(),
        reason: reason.into(),
    }
}

impl Ctx<'_, '_> {
    fn tensor_in(&self, k: usize) -> Result<usize, ImportError> {
        self.ins
            .get(k)
            .copied()
            .flatten()
            .ok_or_else(|| bad(format!("input {k} missing")))
    }

    fn input(&mut self, k: usize) -> Result<u32, ImportError> {
        let t = self.tensor_in(k)?;
        self.b.operand(t)
    }

    fn output(&mut self, k: usize) -> Result<u32, ImportError> {
        let t = self
            .outs
            .get(k)
            .copied()
            .flatten()
            .ok_or_else(|| bad(format!("output {k} missing")))?;
        self.b.output(t)
    }

    fn opt_i32(&self, slot: u16, default: i32) -> Result<i32, ImportError> {
        match &self.options {
            Some(o) => o.scalar::<i32>(slot, default),
            None => Ok(default),
        }
    }

    fn opt_i8(&self, slot: u16, default: i8) -> Result<i8, ImportError> {
        match &self.options {
            Some(o) => o.scalar::<i8>(slot, default),
            None => Ok(default),
        }
    }

    fn opt_bool(&self, slot: u16) -> Result<bool, ImportError> {
        Ok(self.opt_i8(slot, 0)? != 0)
    }

    fn opt_f32(&self, slot: u16, default: f32) -> Result<f32, ImportError> {
        match &self.options {
            Some(o) => o.scalar::<f32>(slot, default),
            None => Ok(default),
        }
    }

    /// A fused activation (TFLite's codes 0-3 are NNAPI's FuseCode).
    fn act(&mut self, slot: u16) -> Result<u32, ImportError> {
        let a = self.opt_i8(slot, 0)?;
        if !(0..=3).contains(&a) {
            return Err(unsupported(format!("fused activation {a}")));
        }
        Ok(self.b.int(i32::from(a)))
    }

    /// TFLite padding (SAME 0, VALID 1) as NNAPI's implicit scheme (SAME 1, VALID 2).
    fn padding(&mut self, slot: u16) -> Result<u32, ImportError> {
        match self.opt_i8(slot, 0)? {
            0 => Ok(self.b.int(1)),
            1 => Ok(self.b.int(2)),
            p => Err(bad(format!("padding {p}"))),
        }
    }

    fn positive(&mut self, slot: u16, default: i32, what: &str) -> Result<u32, ImportError> {
        let v = self.opt_i32(slot, default)?;
        if v < 1 {
            return Err(bad(format!("{what} {v}")));
        }
        Ok(self.b.int(v))
    }

    /// An input the NNAPI operation takes as a constant INT32 tensor (a shape, axes).
    fn const_ints(&mut self, k: usize) -> Result<Vec<i32>, ImportError> {
        let t = self.tensor_in(k)?;
        self.b
            .ints(t)?
            .ok_or_else(|| unsupported(format!("input {k} must be a constant int32 tensor")))
    }

    /// An input holding one constant int32 (an axis), as an INT32 scalar operand.
    fn const_axis(&mut self, k: usize) -> Result<u32, ImportError> {
        match self.const_ints(k)?[..] {
            [axis] => Ok(self.b.int(axis)),
            _ => Err(bad("the axis must hold one value")),
        }
    }

    fn done(&mut self, op: Op, inputs: Vec<u32>, outputs: Vec<u32>) -> Result<Mapped, ImportError> {
        self.b.op(op, inputs, outputs);
        Ok(Mapped)
    }

    /// `op(input 0 ... input n-1) -> output 0`.
    fn plain(&mut self, op: Op, n: usize) -> Result<Mapped, ImportError> {
        let ins = (0..n)
            .map(|k| self.input(k))
            .collect::<Result<Vec<_>, _>>()?;
        let out = self.output(0)?;
        self.done(op, ins, vec![out])
    }

    /// Requantises `x` into `out` (both quantised), as TFLite's quantised-to-quantised
    /// QUANTIZE does. NNAPI has no requantise operation (its QUANTIZE takes float input
    /// only), so the value goes through a float32 temporary: DEQUANTIZE, then QUANTIZE.
    /// It rounds as TFLite's fixed-point rescale except where the exact value lies within
    /// float rounding of a half step (one step apart there).
    fn requantize_into(&mut self, x: u32, out: u32) {
        let real = self
            .b
            .temporary(OperandType::TENSOR_FLOAT32, self.b.dims_of(x), 0.0, 0);
        self.b.op(Op::DEQUANTIZE, vec![x], vec![real]);
        self.b.op(Op::QUANTIZE, vec![real], vec![out]);
    }

    /// A new temporary holding `x` requantised to `like`'s type, scale and zero point.
    fn requantized(&mut self, x: u32, like: u32) -> u32 {
        let (scale, zero_point) = self.b.quant_of(like);
        let q = self.b.temporary(
            self.b.operand_type(like),
            self.b.dims_of(x),
            scale,
            zero_point,
        );
        self.requantize_into(x, q);
        q
    }

    /// Whether operands `x` and `out` are quantised with different parameters (an
    /// operation NNAPI requires to keep its input's then needs `x` requantised first).
    fn rescales(&self, x: u32, out: u32) -> bool {
        let (tx, to) = (self.b.operand_type(x), self.b.operand_type(out));
        tx.is_quantized() && tx == to && self.b.quant_of(x) != self.b.quant_of(out)
    }

    /// An activation (RELU, RELU1, RELU6). NNAPI's output keeps the input's quantisation;
    /// TFLite's may differ (it rescales, then clamps), so a rescaling one becomes a
    /// requantisation to the output's parameters, then the activation on those.
    fn activation(&mut self, op: Op) -> Result<Mapped, ImportError> {
        let mut x = self.input(0)?;
        let out = self.output(0)?;
        if self.rescales(x, out) {
            x = self.requantized(x, out);
        }
        self.done(op, vec![x], vec![out])
    }

    /// A bias for a filter with `channels` outputs: the given one, or zeros.
    fn bias(&mut self, k: usize, channels: u32, filter: u32) -> Result<u32, ImportError> {
        if self.ins.get(k).copied().flatten().is_some() {
            return self.input(k);
        }
        let f = self.b.operand_type(filter);
        let (t, es) = match f {
            OperandType::TENSOR_FLOAT32 => (OperandType::TENSOR_FLOAT32, 4),
            OperandType::TENSOR_FLOAT16 => (OperandType::TENSOR_FLOAT16, 2),
            _ => return Err(unsupported("a quantised filter without a bias")),
        };
        // The zeros are allocated here, from a size the file gives: bounded first.
        if channels > MAX_ZERO_BIAS {
            return Err(unsupported(format!(
                "a filter of {channels} output channels without a bias"
            )));
        }
        Ok(self.b.zeros(t, channels, es))
    }

    /// The weights (input `k`) of a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED. A
    /// hybrid (dynamic-range quantised) operator has float input and int8 weights; the
    /// HAL has no such signature, so the weights are dequantised to float32 here, once,
    /// and the operation runs in float.
    fn weights(&mut self, k: usize) -> Result<u32, ImportError> {
        let t = self.tensor_in(k)?;
        let x = self.tensor_in(0)?;
        let hybrid = self.b.tensors[x].ty == tensor_type::FLOAT32
            && matches!(self.b.tensors[t].ty, tensor_type::INT8 | tensor_type::UINT8);
        if hybrid && self.b.replaced[t].is_none() {
            let Some(bytes) = self.b.constant(t)? else {
                return Err(unsupported("hybrid weights that are not constant"));
            };
            let dims = self.b.dims(t)?;
            let w = &self.b.tensors[t];
            let values = dequantize_weights(bytes, w.ty, &dims, &w.scales, &w.zero_points, w.axis)?;
            self.b.replaced[t] = Some(values);
        }
        self.input(k)
    }

    /// Output `k`'s tensor.
    fn tensor_out(&self, k: usize) -> Result<usize, ImportError> {
        self.outs
            .get(k)
            .copied()
            .flatten()
            .ok_or_else(|| bad(format!("output {k} missing")))
    }

    /// A tensor's shape when the file fixes it (no dimension only known at run time).
    fn static_shape(&self, t: usize) -> Option<Vec<i32>> {
        let x = &self.b.tensors[t];
        (!x.signature.contains(&-1)).then(|| x.shape.clone())
    }
}

/// int8/uint8 weights as float32 bytes: `(q - zero point) * scale`, per tensor or per
/// channel along `axis`.
fn dequantize_weights(
    bytes: &[u8],
    ty: i8,
    dims: &[u32],
    scales: &[f32],
    zero_points: &[i64],
    axis: i32,
) -> Result<Vec<u8>, ImportError> {
    let channels = match scales.len() {
        0 => return Err(bad("quantised weights without a scale")),
        1 => 1,
        n => {
            let a = usize::try_from(axis)
                .ok()
                .filter(|&a| a < dims.len())
                .ok_or_else(|| bad(format!("quantized dimension {axis}")))?;
            if dims[a] as usize != n || (!zero_points.is_empty() && zero_points.len() != n) {
                return Err(bad("per-channel scales do not match the weights' shape"));
            }
            n
        }
    };
    let inner: usize = match channels {
        1 => 1,
        _ => dims[axis as usize + 1..]
            .iter()
            .map(|&d| d as usize)
            .product(),
    };
    let mut out = Vec::with_capacity(bytes.len() * 4);
    for (i, &b) in bytes.iter().enumerate() {
        let c = if channels == 1 {
            0
        } else {
            (i / inner.max(1)) % channels
        };
        let q = if ty == tensor_type::UINT8 {
            i64::from(b)
        } else {
            i64::from(b as i8)
        };
        let z = zero_points.get(c).copied().unwrap_or(0);
        // The zero point is the file's: any i64 (a hostile one must not overflow).
        let d = q
            .checked_sub(z)
            .ok_or_else(|| bad(format!("zero point {z}")))?;
        out.extend_from_slice(&((d as f32) * scales[c]).to_le_bytes());
    }
    Ok(out)
}

/// Every mapped builtin, by code.
#[rustfmt::skip]
static MAPPINGS: &[Mapping] = &[
    Mapping { code: 0, name: "ADD", map: |c| arith(c, Op::ADD), c: ACT0 },
    Mapping { code: 1, name: "AVERAGE_POOL_2D", map: |c| pool(c, Op::AVERAGE_POOL_2D), c: POOL },
    Mapping { code: 2, name: "CONCATENATION", map: concatenation, c: CONCATENATION },
    Mapping { code: 3, name: "CONV_2D", map: conv, c: CONV },
    Mapping { code: 4, name: "DEPTHWISE_CONV_2D", map: depthwise, c: DEPTHWISE },
    Mapping { code: 5, name: "DEPTH_TO_SPACE", map: |c| block(c, Op::DEPTH_TO_SPACE), c: INT0 },
    Mapping { code: 6, name: "DEQUANTIZE", map: dequantize, c: &[] },
    Mapping { code: 8, name: "FLOOR", map: |c| c.plain(Op::FLOOR, 1), c: &[] },
    Mapping { code: 9, name: "FULLY_CONNECTED", map: fully_connected, c: FULLY_CONNECTED },
    Mapping { code: 11, name: "L2_NORMALIZATION", map: l2_normalization, c: ACT0 },
    Mapping { code: 14, name: "LOGISTIC", map: |c| c.plain(Op::LOGISTIC, 1), c: &[] },
    Mapping { code: 17, name: "MAX_POOL_2D", map: |c| pool(c, Op::MAX_POOL_2D), c: POOL },
    Mapping { code: 18, name: "MUL", map: |c| arith(c, Op::MUL), c: ACT0 },
    Mapping { code: 19, name: "RELU", map: |c| c.activation(Op::RELU), c: &[] },
    Mapping { code: 20, name: "RELU_N1_TO_1", map: |c| c.activation(Op::RELU1), c: &[] },
    Mapping { code: 21, name: "RELU6", map: |c| c.activation(Op::RELU6), c: &[] },
    Mapping { code: 22, name: "RESHAPE", map: reshape, c: RESHAPE },
    Mapping { code: 23, name: "RESIZE_BILINEAR", map: |c| resize(c, Op::RESIZE_BILINEAR, 8, 10), c: RESIZE_BILINEAR },
    Mapping { code: 25, name: "SOFTMAX", map: softmax, c: FLOAT0 },
    Mapping { code: 26, name: "SPACE_TO_DEPTH", map: |c| block(c, Op::SPACE_TO_DEPTH), c: INT0 },
    Mapping { code: 28, name: "TANH", map: |c| c.plain(Op::TANH, 1), c: &[] },
    Mapping { code: 34, name: "PAD", map: |c| c.plain(Op::PAD, 2), c: &[] },
    Mapping { code: 36, name: "GATHER", map: gather, c: TWO_INTS },
    Mapping { code: 37, name: "BATCH_TO_SPACE_ND", map: batch_to_space, c: &[] },
    Mapping { code: 38, name: "SPACE_TO_BATCH_ND", map: space_to_batch, c: &[] },
    Mapping { code: 39, name: "TRANSPOSE", map: |c| c.plain(Op::TRANSPOSE, 2), c: &[] },
    Mapping { code: 40, name: "MEAN", map: mean, c: KEEP_DIMS },
    Mapping { code: 41, name: "SUB", map: |c| arith(c, Op::SUB), c: ACT0 },
    Mapping { code: 42, name: "DIV", map: |c| arith(c, Op::DIV), c: ACT0 },
    Mapping { code: 43, name: "SQUEEZE", map: squeeze, c: SQUEEZE },
    Mapping { code: 45, name: "STRIDED_SLICE", map: strided_slice, c: STRIDED_SLICE },
    Mapping { code: 47, name: "EXP", map: |c| c.plain(Op::EXP, 1), c: &[] },
    Mapping { code: 49, name: "SPLIT", map: split, c: INT0 },
    Mapping { code: 50, name: "LOG_SOFTMAX", map: log_softmax, c: &[] },
    Mapping { code: 53, name: "CAST", map: |c| c.plain(Op::CAST, 1), c: &[] },
    Mapping { code: 54, name: "PRELU", map: |c| c.plain(Op::PRELU, 2), c: &[] },
    Mapping { code: 55, name: "MAXIMUM", map: |c| c.plain(Op::MAXIMUM, 2), c: &[] },
    Mapping { code: 56, name: "ARG_MAX", map: |c| arg_min_max(c, Op::ARGMAX), c: &[] },
    Mapping { code: 57, name: "MINIMUM", map: |c| c.plain(Op::MINIMUM, 2), c: &[] },
    Mapping { code: 59, name: "NEG", map: |c| c.plain(Op::NEG, 1), c: &[] },
    Mapping { code: 65, name: "SLICE", map: |c| c.plain(Op::SLICE, 3), c: &[] },
    Mapping { code: 66, name: "SIN", map: |c| c.plain(Op::SIN, 1), c: &[] },
    Mapping { code: 67, name: "TRANSPOSE_CONV", map: transpose_conv, c: TRANSPOSE_CONV },
    Mapping { code: 69, name: "TILE", map: |c| c.plain(Op::TILE, 2), c: &[] },
    Mapping { code: 70, name: "EXPAND_DIMS", map: expand_dims, c: &[] },
    Mapping { code: 73, name: "LOG", map: |c| c.plain(Op::LOG, 1), c: &[] },
    Mapping { code: 74, name: "SUM", map: |c| reduce(c, Op::REDUCE_SUM), c: KEEP_DIMS },
    Mapping { code: 75, name: "SQRT", map: |c| c.plain(Op::SQRT, 1), c: &[] },
    Mapping { code: 76, name: "RSQRT", map: |c| c.plain(Op::RSQRT, 1), c: &[] },
    Mapping { code: 78, name: "POW", map: |c| c.plain(Op::POW, 2), c: &[] },
    Mapping { code: 79, name: "ARG_MIN", map: |c| arg_min_max(c, Op::ARGMIN), c: &[] },
    Mapping { code: 81, name: "REDUCE_PROD", map: |c| reduce(c, Op::REDUCE_PROD), c: KEEP_DIMS },
    Mapping { code: 82, name: "REDUCE_MAX", map: |c| reduce(c, Op::REDUCE_MAX), c: KEEP_DIMS },
    Mapping { code: 89, name: "REDUCE_MIN", map: |c| reduce(c, Op::REDUCE_MIN), c: KEEP_DIMS },
    Mapping { code: 97, name: "RESIZE_NEAREST_NEIGHBOR", map: |c| resize(c, Op::RESIZE_NEAREST_NEIGHBOR, 4, 6), c: RESIZE_NEAREST },
    Mapping { code: 98, name: "LEAKY_RELU", map: leaky_relu, c: FLOAT0 },
    Mapping { code: 101, name: "ABS", map: |c| c.plain(Op::ABS, 1), c: &[] },
    Mapping { code: 111, name: "ELU", map: elu, c: &[] },
    Mapping { code: 114, name: "QUANTIZE", map: quantize, c: &[] },
    Mapping { code: 77, name: "SHAPE", map: shape, c: &[] },
    Mapping { code: 83, name: "PACK", map: pack, c: TWO_INTS },
    Mapping { code: 117, name: "HARD_SWISH", map: |c| c.plain(Op::HARD_SWISH, 1), c: &[] },
    Mapping { code: 124, name: "DENSIFY", map: densify, c: &[] },
    // Custom operators, by their custom name.
    Mapping { code: CUSTOM, name: "Convolution2DTransposeBias", map: transpose_conv_bias, c: &[] },
];

/// The builtin code of a custom operator (its name is in the operator code's
/// `custom_code`).
const CUSTOM: i32 = 32;
/// SHAPE's builtin code.
const SHAPE: i32 = 77;
/// DEQUANTIZE's builtin code.
const DEQUANTIZE: i32 = 6;

/// The options a delegate must rebuild for builtin `code` from its C parameter struct, and
/// the bytes of that struct they span (empty for an operator without options vnpu reads).
pub fn c_params(code: i32) -> (&'static [CParam], usize) {
    let params = mapping(code, "").map_or(&[][..], |m| m.c);
    let end = params
        .iter()
        .map(|p| match p.field {
            CField::I32(at) | CField::Enum(at) | CField::F32(at) | CField::Padding(at) => at + 4,
            CField::Bool(at) => at + 1,
            CField::Ints { at, count_at, max } => (at + 4 * max).max(count_at + 4),
        })
        .max()
        .unwrap_or(0);
    (params, end)
}

/// The options of builtin `code` from the bytes of its C parameter struct (at least
/// [`c_params`]' length), as slot values for an options table.
pub fn options_from_c(code: i32, c: &[u8]) -> Result<Vec<(u16, OptValue)>, ImportError> {
    let (params, end) = c_params(code);
    if c.len() < end {
        return Err(bad(format!(
            "{} bytes of parameters, {end} expected",
            c.len()
        )));
    }
    let int = |at: usize| i32::from_le_bytes([c[at], c[at + 1], c[at + 2], c[at + 3]]);
    params
        .iter()
        .map(|p| {
            let v = match p.field {
                CField::I32(at) => OptValue::I32(int(at)),
                CField::Enum(at) => OptValue::I8(
                    i8::try_from(int(at)).map_err(|_| bad(format!("enum value {}", int(at))))?,
                ),
                CField::Bool(at) => OptValue::I8(i8::from(c[at] != 0)),
                CField::F32(at) => OptValue::F32(f32::from_bits(int(at) as u32)),
                CField::Padding(at) => match int(at) {
                    1 => OptValue::I8(0),
                    2 => OptValue::I8(1),
                    p => return Err(bad(format!("padding {p}"))),
                },
                CField::Ints { at, count_at, max } => {
                    let n = usize::try_from(int(count_at))
                        .ok()
                        .filter(|&n| n <= max)
                        .ok_or_else(|| bad(format!("{} dimensions", int(count_at))))?;
                    OptValue::Ints((0..n).map(|k| int(at + 4 * k)).collect())
                }
            };
            Ok((p.slot, v))
        })
        .collect()
}

fn mapping(code: i32, custom: &str) -> Option<&'static Mapping> {
    MAPPINGS
        .iter()
        .find(|m| m.code == code && (code != CUSTOM || m.name == custom))
}

/// The builtin's name (`BUILTIN_<code>` for one vnpu does not map).
pub fn name(code: i32) -> String {
    name_of(code, "")
}

/// An operator's name: the builtin's (`BUILTIN_<code>` for one vnpu does not map), or for
/// a custom operator `custom NAME`.
pub fn name_of(code: i32, custom: &str) -> String {
    if code == CUSTOM {
        return match custom {
            "" => "CUSTOM".into(),
            c => format!("custom {c}"),
        };
    }
    mapping(code, "").map_or_else(|| format!("BUILTIN_{code}"), |m| m.name.to_string())
}

/// Maps one operator; `Unsupported` when vnpu has no mapping for it (or its options).
pub(super) fn map<'a>(b: &mut Builder<'a>, op: &OpRec<'a>) -> Result<Mapped, ImportError> {
    let m = mapping(op.code, &op.custom).ok_or_else(|| match op.code {
        CUSTOM => unsupported(format!(
            "custom operator \"{}\" has no NNAPI mapping in vnpu",
            op.custom
        )),
        code => unsupported(format!(
            "builtin operator {code} has no NNAPI mapping in vnpu"
        )),
    })?;
    (m.map)(&mut Ctx {
        b,
        ins: &op.ins,
        outs: &op.outs,
        options: op.options,
        custom_options: op.custom_options,
    })
}

/// Whether the import folds `op` into a constant: SHAPE of a tensor whose shape the file
/// fixes (to int32), DEQUANTIZE of float16 constant weights. Such an operator makes no
/// device work; its output is a constant wherever it is read.
pub(super) fn foldable(g: &Graph<'_>, op: &OpRec<'_>) -> bool {
    let (Some(&Some(x)), [Some(out)]) = (op.ins.first(), &op.outs[..]) else {
        return false;
    };
    let (x, o) = (&g.tensors[x], &g.tensors[*out]);
    if !o.data.is_empty() {
        return false;
    }
    match op.code {
        SHAPE => {
            !x.signature.contains(&-1)
                && o.ty == tensor_type::INT32
                && o.shape == [x.shape.len() as i32]
        }
        DEQUANTIZE => {
            x.ty == tensor_type::FLOAT16
                && !x.data.is_empty()
                && x.sparsity.is_none()
                && o.shape == x.shape
        }
        _ => false,
    }
}

/// The constant a [`foldable`] operator's output holds: `(tensor, bytes)`.
pub(super) fn fold(g: &Graph<'_>, op: &OpRec<'_>) -> Result<Option<(usize, Vec<u8>)>, ImportError> {
    let (Some(&Some(x)), [Some(out)]) = (op.ins.first(), &op.outs[..]) else {
        return Ok(None);
    };
    let t = &g.tensors[x];
    let bytes: Vec<u8> = match op.code {
        SHAPE => t.shape.iter().flat_map(|d| d.to_le_bytes()).collect(),
        DEQUANTIZE => {
            let n = t
                .shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(usize::try_from(d).ok()?))
                .ok_or_else(|| ImportError::Tensor {
                    index: x,
                    reason: "bad shape".into(),
                })?;
            let data = t
                .data
                .get(..n.saturating_mul(2))
                .ok_or_else(|| ImportError::Tensor {
                    index: x,
                    reason: format!("buffer of {} bytes for {n} float16 values", t.data.len()),
                })?;
            data.chunks_exact(2)
                .flat_map(|h| {
                    half::f16::from_le_bytes([h[0], h[1]])
                        .to_f32()
                        .to_le_bytes()
                })
                .collect()
        }
        _ => return Ok(None),
    };
    Ok(Some((*out, bytes)))
}

/// ADD, SUB, MUL: options `fused_activation_function` at slot 4.
fn arith(c: &mut Ctx<'_, '_>, op: Op) -> Result<Mapped, ImportError> {
    let (x, y) = (c.input(0)?, c.input(1)?);
    let act = c.act(4)?;
    let out = c.output(0)?;
    c.done(op, vec![x, y, act], vec![out])
}

/// Pool2DOptions: padding 4, stride_w 6, stride_h 8, filter_width 10, filter_height 12,
/// fused_activation_function 14.
fn pool(c: &mut Ctx<'_, '_>, op: Op) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let pad = c.padding(4)?;
    let sw = c.positive(6, 1, "stride")?;
    let sh = c.positive(8, 1, "stride")?;
    let fw = c.positive(10, 1, "filter width")?;
    let fh = c.positive(12, 1, "filter height")?;
    let act = c.act(14)?;
    let out = c.output(0)?;
    c.done(op, vec![x, pad, sw, sh, fw, fh, act], vec![out])
}

/// ConcatenationOptions: axis 4, fused_activation_function 6 (NONE only).
fn concatenation(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    if c.opt_i8(6, 0)? != 0 {
        return Err(unsupported("CONCATENATION with a fused activation"));
    }
    let mut ins = (0..c.ins.len())
        .map(|k| c.input(k))
        .collect::<Result<Vec<_>, _>>()?;
    let axis = c.opt_i32(4, 0)?;
    ins.push(c.b.int(axis));
    let out = c.output(0)?;
    c.done(Op::CONCATENATION, ins, vec![out])
}

/// Conv2DOptions: padding 4, stride_w 6, stride_h 8, fused_activation_function 10,
/// dilation_w_factor 12, dilation_h_factor 14. TFLite's filter is OHWI, as NNAPI's.
fn conv(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let f = c.weights(1)?;
    let channels = c.b.dims_of(f).first().copied().unwrap_or(0);
    let bias = c.bias(2, channels, f)?;
    let pad = c.padding(4)?;
    let sw = c.positive(6, 1, "stride")?;
    let sh = c.positive(8, 1, "stride")?;
    let act = c.act(10)?;
    let nchw = c.b.bool(false);
    let dw = c.positive(12, 1, "dilation")?;
    let dh = c.positive(14, 1, "dilation")?;
    let out = c.output(0)?;
    c.done(
        Op::CONV_2D,
        vec![x, f, bias, pad, sw, sh, act, nchw, dw, dh],
        vec![out],
    )
}

/// DepthwiseConv2DOptions: padding 4, stride_w 6, stride_h 8, depth_multiplier 10,
/// fused_activation_function 12, dilation_w_factor 14, dilation_h_factor 16. The filter
/// is `[1, H, W, O]`, as NNAPI's.
fn depthwise(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let f = c.weights(1)?;
    let channels = c.b.dims_of(f).last().copied().unwrap_or(0);
    let bias = c.bias(2, channels, f)?;
    let pad = c.padding(4)?;
    let sw = c.positive(6, 1, "stride")?;
    let sh = c.positive(8, 1, "stride")?;
    let mult = c.positive(10, 1, "depth multiplier")?;
    let act = c.act(12)?;
    let nchw = c.b.bool(false);
    let dw = c.positive(14, 1, "dilation")?;
    let dh = c.positive(16, 1, "dilation")?;
    let out = c.output(0)?;
    c.done(
        Op::DEPTHWISE_CONV_2D,
        vec![x, f, bias, pad, sw, sh, mult, act, nchw, dw, dh],
        vec![out],
    )
}

/// DEQUANTIZE: a constant float16 tensor (weights stored in half precision) becomes a
/// float32 constant ([`fold`]); anything else maps to NNAPI DEQUANTIZE (and a float tensor made
/// from a per-tensor quantised one remembers its step, for error budgets).
fn dequantize(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let t = c.tensor_in(0)?;
    if c.b.tensors[t].ty == tensor_type::FLOAT16 {
        if c.b.replaced[c.tensor_out(0)?].is_some() {
            // Folded: the output is a float32 constant wherever it is read.
            return Ok(Mapped);
        }
        // float16 values made at run time (DENSIFY's, of sparse float16 weights): NNAPI's
        // DEQUANTIZE takes quantised input only, its CAST converts float16 to float32.
        return c.plain(Op::CAST, 1);
    }
    let (x, out) = (c.input(0)?, c.output(0)?);
    let ty = c.b.operand_type(x);
    if ty == OperandType::TENSOR_QUANT8_ASYMM || ty == OperandType::TENSOR_QUANT8_ASYMM_SIGNED {
        if let Some(o) = c.outs.first().copied().flatten() {
            c.b.dequantized_step[o] = Some(c.b.quant_of(x).0);
        }
    }
    c.done(Op::DEQUANTIZE, vec![x], vec![out])
}

/// QUANTIZE: float input maps to NNAPI QUANTIZE; a quantised input (TFLite's requantise,
/// which quantised models put before a CONCATENATION, say) is requantised.
fn quantize(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let out = c.output(0)?;
    if !c.b.operand_type(x).is_quantized() {
        return c.done(Op::QUANTIZE, vec![x], vec![out]);
    }
    if !c.b.operand_type(out).is_quantized() {
        return Err(unsupported("QUANTIZE to a type that is not quantised"));
    }
    c.requantize_into(x, out);
    Ok(Mapped)
}

/// FullyConnectedOptions: fused_activation_function 4, weights_format 6 (DEFAULT only),
/// keep_num_dims 8 (false only).
fn fully_connected(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    if c.opt_i8(6, 0)? != 0 {
        return Err(unsupported("FULLY_CONNECTED with shuffled weights"));
    }
    if c.opt_bool(8)? {
        return Err(unsupported(
            "FULLY_CONNECTED keeping its input's dimensions",
        ));
    }
    let x = c.input(0)?;
    let w = c.weights(1)?;
    let units = c.b.dims_of(w).first().copied().unwrap_or(0);
    let bias = c.bias(2, units, w)?;
    let act = c.act(4)?;
    let out = c.output(0)?;
    c.done(Op::FULLY_CONNECTED, vec![x, w, bias, act], vec![out])
}

/// RESHAPE: the shape from input 1 (a constant) or ReshapeOptions new_shape (slot 4).
fn reshape(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let shape = if let Some(t) = c.ins.get(1).copied().flatten() {
        // A shape computed in the graph: the output's, when the file fixes it.
        match c.b.ints(t)? {
            Some(v) => v,
            None => {
                let out = c.tensor_out(0)?;
                c.static_shape(out)
                    .ok_or_else(|| unsupported("RESHAPE to a shape only known at run time"))?
            }
        }
    } else {
        match &c.options {
            Some(o) => o.scalars::<i32>(4)?,
            None => return Err(bad("RESHAPE without a shape")),
        }
    };
    let s = c.b.int_tensor(&shape);
    let out = c.output(0)?;
    c.done(Op::RESHAPE, vec![x, s], vec![out])
}

/// RESIZE_BILINEAR (ResizeBilinearOptions align_corners 8, half_pixel_centers 10) and
/// RESIZE_NEAREST_NEIGHBOR (its options' 4 and 6): the size `[h, w]` from input 1 (a
/// constant). A quantised RESIZE_BILINEAR becomes "dev.vnpu.litert"'s
/// VNPU_RESIZE_BILINEAR_INTEGER.
fn resize(c: &mut Ctx<'_, '_>, op: Op, align: u16, half: u16) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let size = c.const_ints(1)?;
    let [h, w] = size[..] else {
        return Err(bad("the size must be [height, width]"));
    };
    let (w, h) = (c.b.int(w), c.b.int(h));
    let nchw = c.b.bool(false);
    let (align, half) = (c.opt_bool(align)?, c.opt_bool(half)?);
    let (align, half) = (c.b.bool(align), c.b.bool(half));
    let out = c.output(0)?;
    let quantised = matches!(
        c.b.operand_type(x),
        OperandType::TENSOR_QUANT8_ASYMM | OperandType::TENSOR_QUANT8_ASYMM_SIGNED
    );
    if op == Op::RESIZE_BILINEAR && quantised {
        // LiteRT's fixed-point interpolation, not NNAPI's float one (see the extension).
        let op = crate::extensions::litert::RESIZE_BILINEAR_INTEGER;
        return c.done(op, vec![x, w, h, align, half], vec![out]);
    }
    c.done(op, vec![x, w, h, nchw, align, half], vec![out])
}

/// SoftmaxOptions: beta 4.
fn softmax(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let beta = c.opt_f32(4, 1.0)?;
    let beta = c.b.float(beta);
    let out = c.output(0)?;
    c.done(Op::SOFTMAX, vec![x, beta], vec![out])
}

/// MEAN: axes from input 1 (a constant); ReducerOptions keep_dims 4.
fn mean(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let axes = c.const_ints(1)?;
    let axes = c.b.int_tensor(&axes);
    let keep = c.opt_bool(4)?;
    let keep = c.b.int(i32::from(keep));
    let out = c.output(0)?;
    c.done(Op::MEAN, vec![x, axes, keep], vec![out])
}

/// DEPTH_TO_SPACE, SPACE_TO_DEPTH: block_size at slot 4.
fn block(c: &mut Ctx<'_, '_>, op: Op) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let size = c.positive(4, 0, "block size")?;
    let nchw = c.b.bool(false);
    let out = c.output(0)?;
    c.done(op, vec![x, size, nchw], vec![out])
}

/// L2NormOptions: fused_activation_function 4 (NONE only); the last axis.
fn l2_normalization(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    if c.opt_i8(4, 0)? != 0 {
        return Err(unsupported("L2_NORMALIZATION with a fused activation"));
    }
    c.plain(Op::L2_NORMALIZATION, 1)
}

/// GATHER: inputs params, indices; GatherOptions axis 4, batch_dims 6 (0 only).
fn gather(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    if c.opt_i32(6, 0)? != 0 {
        return Err(unsupported("GATHER with batch dimensions"));
    }
    let x = c.input(0)?;
    let idx = c.input(1)?;
    let axis = c.opt_i32(4, 0)?;
    let axis = c.b.int(axis);
    let out = c.output(0)?;
    c.done(Op::GATHER, vec![x, axis, idx], vec![out])
}

/// BATCH_TO_SPACE_ND: inputs x, block_shape, crops (all zero: NNAPI has no crops).
fn batch_to_space(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    if c.const_ints(2)?.iter().any(|&v| v != 0) {
        return Err(unsupported("BATCH_TO_SPACE_ND with crops"));
    }
    let x = c.input(0)?;
    let b = c.input(1)?;
    let nchw = c.b.bool(false);
    let out = c.output(0)?;
    c.done(Op::BATCH_TO_SPACE_ND, vec![x, b, nchw], vec![out])
}

/// SPACE_TO_BATCH_ND: inputs x, block_shape, paddings.
fn space_to_batch(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let b = c.input(1)?;
    let p = c.input(2)?;
    let nchw = c.b.bool(false);
    let out = c.output(0)?;
    c.done(Op::SPACE_TO_BATCH_ND, vec![x, b, p, nchw], vec![out])
}

/// SQUEEZE: SqueezeOptions squeeze_dims 4 (none: every dimension of size 1).
fn squeeze(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let mut dims = match &c.options {
        Some(o) => o.scalars::<i32>(4)?,
        None => Vec::new(),
    };
    if dims.is_empty() {
        dims =
            c.b.dims_of(x)
                .iter()
                .enumerate()
                .filter(|(_, &d)| d == 1)
                .map(|(k, _)| k as i32)
                .collect();
    }
    let axes = c.b.int_tensor(&dims);
    let out = c.output(0)?;
    c.done(Op::SQUEEZE, vec![x, axes], vec![out])
}

/// STRIDED_SLICE: inputs x, begin, end, strides; StridedSliceOptions begin_mask 4,
/// end_mask 6, ellipsis_mask 8 and new_axis_mask 10 (0 only), shrink_axis_mask 12,
/// offset 14 (false only).
fn strided_slice(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    if c.opt_i32(8, 0)? != 0 || c.opt_i32(10, 0)? != 0 || c.opt_bool(14)? {
        return Err(unsupported(
            "STRIDED_SLICE with ellipsis, new-axis or offset masks",
        ));
    }
    let mut ins = (0..4).map(|k| c.input(k)).collect::<Result<Vec<_>, _>>()?;
    for slot in [4, 6, 12] {
        let m = c.opt_i32(slot, 0)?;
        ins.push(c.b.int(m));
    }
    let out = c.output(0)?;
    c.done(Op::STRIDED_SLICE, ins, vec![out])
}

/// SPLIT: inputs axis (a constant), x; SplitOptions num_splits 4.
fn split(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let axis = c.const_axis(0)?;
    let x = c.input(1)?;
    let n = c.positive(4, 0, "number of splits")?;
    let outs = (0..c.outs.len())
        .map(|k| c.output(k))
        .collect::<Result<Vec<_>, _>>()?;
    c.done(Op::SPLIT, vec![x, axis, n], outs)
}

/// LOG_SOFTMAX over the last axis, beta 1.
fn log_softmax(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let beta = c.b.float(1.0);
    let axis = c.b.int(-1);
    let out = c.output(0)?;
    c.done(Op::LOG_SOFTMAX, vec![x, beta, axis], vec![out])
}

/// ARG_MAX, ARG_MIN: inputs x, axis (a constant); an int32 output only.
fn arg_min_max(c: &mut Ctx<'_, '_>, op: Op) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let axis = c.const_axis(1)?;
    let out = c.output(0)?;
    if c.b.operand_type(out) != OperandType::TENSOR_INT32 {
        return Err(unsupported("an index output other than int32"));
    }
    c.done(op, vec![x, axis], vec![out])
}

/// TRANSPOSE_CONV: inputs output_shape, weights `[O, H, W, I]`, input, bias (optional);
/// TransposeConvOptions padding 4, stride_w 6, stride_h 8, fused_activation_function 10.
fn transpose_conv(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let shape = c.input(0)?;
    let f = c.input(1)?;
    let x = c.input(2)?;
    let channels = c.b.dims_of(f).first().copied().unwrap_or(0);
    let bias = c.bias(3, channels, f)?;
    let pad = c.padding(4)?;
    let sw = c.positive(6, 1, "stride")?;
    let sh = c.positive(8, 1, "stride")?;
    let act = c.act(10)?;
    let nchw = c.b.bool(false);
    let out = c.output(0)?;
    c.done(
        Op::TRANSPOSE_CONV_2D,
        vec![x, f, bias, shape, pad, sw, sh, act, nchw],
        vec![out],
    )
}

/// EXPAND_DIMS: inputs x, axis (a constant).
fn expand_dims(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let axis = c.const_axis(1)?;
    let out = c.output(0)?;
    c.done(Op::EXPAND_DIMS, vec![x, axis], vec![out])
}

/// SUM, REDUCE_PROD, REDUCE_MAX, REDUCE_MIN: inputs x, axes (a constant); ReducerOptions
/// keep_dims 4.
fn reduce(c: &mut Ctx<'_, '_>, op: Op) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let axes = c.const_ints(1)?;
    let axes = c.b.int_tensor(&axes);
    let keep = c.opt_bool(4)?;
    let keep = c.b.bool(keep);
    let out = c.output(0)?;
    c.done(op, vec![x, axes, keep], vec![out])
}

/// LEAKY_RELU (LeakyReluOptions alpha 4) as NNAPI PRELU with a one-element alpha.
fn leaky_relu(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    if c.b.operand_type(x) != OperandType::TENSOR_FLOAT32 {
        return Err(unsupported("LEAKY_RELU on a type other than float32"));
    }
    let alpha = c.opt_f32(4, 0.2)?;
    let alpha =
        c.b.scalar(OperandType::TENSOR_FLOAT32, &alpha.to_le_bytes());
    let out = c.output(0)?;
    c.done(Op::PRELU, vec![x, alpha], vec![out])
}

/// ELU with alpha 1.
fn elu(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let x = c.input(0)?;
    let alpha = c.b.float(1.0);
    let out = c.output(0)?;
    c.done(Op::ELU, vec![x, alpha], vec![out])
}

/// SHAPE: folded to a constant at import ([`fold`]) when the input's shape is fixed.
fn shape(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let out = c.tensor_out(0)?;
    if c.b.replaced[out].is_none() {
        let x = c.tensor_in(0)?;
        return Err(unsupported(if c.b.tensors[out].ty != tensor_type::INT32 {
            "SHAPE to a type other than int32"
        } else if c.static_shape(x).is_none() {
            "SHAPE of a tensor whose shape is only known at run time"
        } else {
            "SHAPE whose output does not hold one value per dimension"
        }));
    }
    Ok(Mapped)
}

/// PACK (PackOptions values_count 4, axis 6): NNAPI's PACK from AIDL V2 on (when every
/// tensor shares the output's quantisation, as it requires); below, or else, each input is
/// reshaped with a 1 at `axis`, then the pieces are concatenated along it.
fn pack(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let n = c.ins.len();
    let count = c.opt_i32(4, n as i32)?;
    if n == 0 || count != n as i32 {
        return Err(bad(format!("PACK of {n} inputs with values_count {count}")));
    }
    let first = c.input(0)?;
    let rank = c.b.dims_of(first).len() as i32;
    let axis = c.opt_i32(6, 0)?;
    let axis = if axis < 0 { axis + rank + 1 } else { axis };
    if !(0..=rank).contains(&axis) {
        return Err(bad(format!("PACK axis {axis} for rank {rank}")));
    }
    let out = c.output(0)?;
    if c.b.level >= HalVersion::AidlV2 {
        let tensors = (0..n).map(|k| c.input(k)).collect::<Result<Vec<_>, _>>()?;
        let quant = |o: u32| (c.b.operand_type(o), c.b.quant_of(o));
        if tensors.iter().all(|&x| quant(x) == quant(out)) {
            let mut ins = vec![c.b.int(axis)];
            ins.extend(tensors);
            return c.done(Op::PACK, ins, vec![out]);
        }
    }
    let mut pieces = Vec::with_capacity(n);
    for k in 0..n {
        let x = c.input(k)?;
        let mut dims = c.b.dims_of(x);
        if dims.len() as i32 != rank {
            return Err(bad("PACK inputs of different ranks"));
        }
        dims.insert(axis as usize, 1);
        let shape: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
        let s = c.b.int_tensor(&shape);
        let (scale, zero_point) = c.b.quant_of(x);
        let ty = c.b.operand_type(x);
        if n == 1 {
            return c.done(Op::RESHAPE, vec![x, s], vec![out]);
        }
        let piece = c.b.temporary(ty, dims, scale, zero_point);
        c.b.op(Op::RESHAPE, vec![x, s], vec![piece]);
        pieces.push(piece);
    }
    pieces.push(c.b.int(axis));
    c.done(Op::CONCATENATION, pieces, vec![out])
}

/// DENSIFY: a sparse constant (its buffer holds the stored values, its sparsity parameters
/// where they go) as NNAPI's DENSIFY, an experimental operation: the values as a vector,
/// then the format as int32 constants (traversal order, block map, dimension formats, each
/// traversed dimension's size, a segments/indices pair per dimension). Its inputs are all
/// constants, so the compiler folds it at preparation: sparse weights cost no execution
/// time, only file size is saved.
fn densify(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    if c.b.level < HalVersion::Experimental {
        return Err(unsupported(format!(
            "sparse weights need DENSIFY, an experimental NNAPI operation (importing for {:?})",
            c.b.level
        )));
    }
    let t = c.tensor_in(0)?;
    let x = c.b.tensors[t].clone();
    let Some(s) = x.sparsity.as_deref() else {
        return Err(unsupported(
            "its input has no sparsity parameters (LiteRT's compiler-plugin API gives none: \
             DENSIFY stays on the CPU there)",
        ));
    };
    let (ty, es) = c.b.hal_type(t)?;
    if x.data.is_empty() || !x.data.len().is_multiple_of(es) {
        return Err(bad(format!(
            "{} bytes of sparse values for {es}-byte elements",
            x.data.len()
        )));
    }
    let count = u32::try_from(x.data.len() / es).map_err(|_| bad("too many sparse values"))?;
    let (scale, zero_point, extra) = quantisation(t, &x, ty)?;
    if extra != ExtraParams::None {
        return Err(unsupported("sparse per-channel quantised weights"));
    }
    let sizes = traversed_sizes(&x.shape, s).map_err(bad)?;
    let template = Operand {
        r#type: ty,
        dimensions: vec![count],
        scale,
        zero_point,
        ..Operand::default()
    };
    let values = c.b.constant_like(template, x.data);
    let formats: Vec<i32> = s.dims.iter().map(|d| i32::from(d.csr)).collect();
    let mut ins = vec![
        values,
        c.b.int_tensor(&s.traversal_order),
        c.b.int_tensor(&s.block_map),
        c.b.int_tensor(&formats),
        c.b.int_tensor(&sizes),
    ];
    for d in &s.dims {
        ins.push(c.b.int_tensor(&d.segments));
        ins.push(c.b.int_tensor(&d.indices));
    }
    let out = c.output(0)?;
    c.done(Op::DENSIFY, ins, vec![out])
}

/// Each traversed dimension's size, as NNAPI's DENSIFY takes them: a DENSE one's
/// `dense_size`; a SPARSE_CSR one's the tensor dimension it traverses, divided by that
/// dimension's block size when it is blocked (as TFLite's format converter derives it).
fn traversed_sizes(shape: &[i32], s: &Sparsity) -> Result<Vec<i32>, String> {
    let (nk, k) = (s.traversal_order.len(), s.block_map.len());
    if s.dims.len() != nk || k > nk || nk - k != shape.len() {
        return Err(format!(
            "sparsity of {nk} traversed dimensions, {k} blocks and {} metadata entries for a \
             tensor of rank {}",
            s.dims.len(),
            shape.len()
        ));
    }
    let n = shape.len();
    let mut blocked: Vec<i32> = shape.to_vec();
    for (b, &d) in s.block_map.iter().enumerate() {
        let d = usize::try_from(d)
            .ok()
            .filter(|&d| d < n)
            .ok_or(format!("block map entry {d} for rank {n}"))?;
        let size = s
            .traversal_order
            .iter()
            .position(|&t| usize::try_from(t) == Ok(n + b))
            .map(|i| &s.dims[i])
            .filter(|m| !m.csr && m.dense_size > 0)
            .map(|m| m.dense_size)
            .ok_or(format!("block {b} has no dense size"))?;
        if blocked[d] % size != 0 {
            return Err(format!("block size {size} does not divide dimension {d}"));
        }
        blocked[d] /= size;
    }
    s.dims
        .iter()
        .zip(&s.traversal_order)
        .enumerate()
        .map(|(i, (m, &t))| match (m.csr, usize::try_from(t)) {
            (false, _) => Ok(m.dense_size),
            (true, Ok(t)) if i < n && t < n => Ok(blocked[t]),
            _ => Err(format!("sparse dimension {i} (traversing {t}) has no size")),
        })
        .collect()
}

/// MediaPipe's `Convolution2DTransposeBias`: inputs x, weights `[O, H, W, I]`, bias; its
/// custom options are three little-endian int32s, padding (1 SAME, 2 VALID), stride_w,
/// stride_h; the output shape is the output tensor's. TRANSPOSE_CONV_2D with bias.
fn transpose_conv_bias(c: &mut Ctx<'_, '_>) -> Result<Mapped, ImportError> {
    let o = c.custom_options;
    let Some(words) = o.get(..12) else {
        return Err(bad(format!(
            "custom options of {} bytes, 12 expected",
            o.len()
        )));
    };
    let word = |k: usize| {
        i32::from_le_bytes([
            words[4 * k],
            words[4 * k + 1],
            words[4 * k + 2],
            words[4 * k + 3],
        ])
    };
    let (padding, sw, sh) = (word(0), word(1), word(2));
    let padding = match padding {
        1 => 1,
        2 => 2,
        p => return Err(bad(format!("padding {p}"))),
    };
    if sw < 1 || sh < 1 {
        return Err(bad(format!("stride {sw}x{sh}")));
    }
    let x = c.input(0)?;
    let f = c.input(1)?;
    let channels = c.b.dims_of(f).first().copied().unwrap_or(0);
    let bias = c.bias(2, channels, f)?;
    let out_t = c.tensor_out(0)?;
    let shape = c
        .static_shape(out_t)
        .ok_or_else(|| unsupported("an output shape only known at run time"))?;
    let shape = c.b.int_tensor(&shape);
    let pad = c.b.int(padding);
    let (sw, sh) = (c.b.int(sw), c.b.int(sh));
    let act = c.b.int(0);
    let nchw = c.b.bool(false);
    let out = c.output(0)?;
    c.done(
        Op::TRANSPOSE_CONV_2D,
        vec![x, f, bias, shape, pad, sw, sh, act, nchw],
        vec![out],
    )
}
