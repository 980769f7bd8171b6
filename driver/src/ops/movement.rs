//! Operations that only move elements: RESHAPE, SQUEEZE, EXPAND_DIMS, CONCATENATION,
//! DEPTH_TO_SPACE, SPACE_TO_DEPTH, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND, PAD, PAD_V2,
//! TRANSPOSE, STRIDED_SLICE, SLICE, GATHER, SPLIT, TILE, CHANNEL_SHUFFLE, plus FILL and RANK
//! (outputs independent of element values). The device kernels are element-type generic;
//! each definition lists the operand types the HAL allows for it. Shapes, paddings,
//! begin/end and the like (`Ty::Ints`) are read by the compiler (from constants, or from
//! model inputs at execution); GATHER's indices and a computed FILL value are device data.

use vnpu_emu::kernels::{
    BatchToSpace, ChannelShuffle, Concatenation, DepthToSpace, Fill, Gather, Pad, Rank, Reshape,
    RuntimeSlice, SliceDim, SpaceToBatch, SpaceToDepth, Split, StridedSlice, Tile, Transpose,
};

use super::is_quant8;
use super::types::{FLOATS, FLOAT_QUANT8, FLOAT_QUANT8_INT32, QUANT8};
use super::{arg, Arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{Operand, OperandType, OperationType};

const OUT: &[Arg] = &[arg("output", Ty::T)];

/// RESHAPE's target: at most one -1, resolved from the element count.
pub fn resolve_reshape(want: &[i32], numel: usize) -> Option<Vec<usize>> {
    let mut known = 1usize;
    let mut infer = None;
    for (i, &d) in want.iter().enumerate() {
        match d {
            -1 if infer.is_none() => infer = Some(i),
            d if d >= 0 => known = known.checked_mul(d as usize)?,
            _ => return None,
        }
    }
    let mut out: Vec<usize> = want.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return None;
        }
        out[i] = numel / known;
    } else if known != numel {
        return None;
    }
    Some(out)
}

fn lower_reshape(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let want = a.ints("shape")?;
    let numel = a
        .shape("input")?
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| a.invalid("too many elements"))?;
    let shape = resolve_reshape(&want, numel)
        .ok_or_else(|| a.invalid(format!("cannot reshape {numel} elements to {want:?}")))?;
    a.kernel(Reshape { shape }, &["input"])
}

fn lower_squeeze(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let shape = a.shape("input")?;
    let axes: Vec<u32> = if a.has("squeeze_dims") {
        a.ints("squeeze_dims")?
            .into_iter()
            .map(|x| a.axis(x, shape.len()))
            .collect::<Result<_, _>>()?
    } else {
        (0..shape.len() as u32)
            .filter(|&d| shape[d as usize] == 1)
            .collect()
    };
    let mut out = Vec::new();
    for (d, &s) in shape.iter().enumerate() {
        if axes.contains(&(d as u32)) {
            if s != 1 {
                return Err(a.invalid(format!("squeezing dimension {d} of size {s}")));
            }
        } else {
            out.push(s);
        }
    }
    // NNAPI (as its CPU reference) keeps a squeezed-away tensor as shape [1], not rank 0.
    if out.is_empty() {
        out.push(1);
    }
    a.kernel(Reshape { shape: out }, &["input"])
}

/// At most 4 dimensions per input, and the inputs' element counts add up to the output's.
fn check_concat(ins: &[&Operand], outs: &[&Operand]) -> Result<(), String> {
    let tensors = &ins[..ins.len().saturating_sub(1)];
    if let Some(o) = tensors.iter().find(|o| o.dimensions.len() > 4) {
        return Err(format!("input rank {} exceeds 4", o.dimensions.len()));
    }
    let count = |o: &Operand| -> Option<u64> {
        if o.dimensions.is_empty() || o.dimensions.contains(&0) {
            return None;
        }
        o.dimensions
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(u64::from(d)))
    };
    let total: Option<u64> = tensors
        .iter()
        .try_fold(0u64, |acc, o| count(o).and_then(|n| acc.checked_add(n)));
    if let (Some(total), Some(out)) = (total, outs.first().and_then(|o| count(o))) {
        if total != out {
            return Err(format!("inputs hold {total} elements, the output {out}"));
        }
    }
    Ok(())
}

fn lower_concat(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let tensors = a.all("input");
    let first = *tensors.first().ok_or_else(|| a.invalid("no inputs"))?;
    let rank = a.operands.shape(first)?.len();
    let axis = a.axis(a.i32("axis")?, rank)?;
    Ok(Lowered {
        op: Concatenation { axis }.into(),
        inputs: tensors,
        outputs: vec![a.output(0)?],
    })
}

fn lower_pad(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let rank = a.shape("input")?.len();
    let p = a.ints("paddings")?;
    if p.len() != rank * 2 {
        return Err(a.invalid(format!("paddings has {} values for rank {rank}", p.len())));
    }
    let pads = p
        .chunks_exact(2)
        .map(|c| match (u32::try_from(c[0]), u32::try_from(c[1])) {
            (Ok(x), Ok(y)) => Ok((x, y)),
            _ => Err(a.invalid(format!("negative padding {c:?}"))),
        })
        .collect::<Result<_, _>>()?;
    // PAD fills with real 0: the zero point of a quantised tensor.
    let zero_point = a.operands.operand(a.input("input")?)?.zero_point;
    a.kernel(
        Pad {
            pads,
            value: zero_point as f32,
        },
        &["input"],
    )
}

fn lower_transpose(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let rank = a.shape("input")?.len();
    let perm: Vec<u32> = if a.has("perm") {
        a.ints("perm")?
            .into_iter()
            .map(|p| u32::try_from(p).map_err(|_| a.invalid(format!("perm {p}"))))
            .collect::<Result<_, _>>()?
    } else {
        (0..rank as u32).rev().collect()
    };
    a.kernel(Transpose { perm }, &["input"])
}

fn depth_space(a: &Args<'_>, to_space: bool) -> Result<Lowered, CompileError> {
    let block = a.positive("block_size")?;
    let nchw = a.flag("layout")?;
    if to_space {
        a.kernel(DepthToSpace { block, nchw }, &["input"])
    } else {
        a.kernel(SpaceToDepth { block, nchw }, &["input"])
    }
}

const BLOCK_SIGS: &[Signature] = &[Signature::new(
    V1_0,
    FLOAT_QUANT8,
    &[arg("input", Ty::T), arg("block_size", Ty::Int)],
    OUT,
)
.optional(&[&[arg("layout", Ty::Bool)]])];

const RESHAPE_IN: &[Arg] = &[arg("input", Ty::T), arg("shape", Ty::Ints)];

/// RESHAPE.
pub const RESHAPE: OpDef = OpDef {
    op: OperationType::RESHAPE,
    signatures: &[
        Signature::new(V1_0, FLOAT_QUANT8, RESHAPE_IN, OUT),
        // int32 tensors from AIDL V2 (feature level 6).
        Signature::new(AidlV2, &[OperandType::TENSOR_INT32], RESHAPE_IN, OUT),
    ],
    check: None,
    runs: FLOAT_QUANT8_INT32,
    lower: Some(lower_reshape),
};

/// SQUEEZE.
pub const SQUEEZE: OpDef = OpDef {
    op: OperationType::SQUEEZE,
    signatures: &[
        Signature::new(V1_1, FLOAT_QUANT8, &[arg("input", Ty::T)], OUT)
            .optional(&[&[arg("squeeze_dims", Ty::Ints)]]),
    ],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(lower_squeeze),
};

/// CONCATENATION.
pub const CONCATENATION: OpDef = OpDef {
    op: OperationType::CONCATENATION,
    signatures: &[Signature::new(
        V1_0,
        FLOAT_QUANT8,
        &[arg("input", Ty::T), arg("axis", Ty::Int)],
        OUT,
    )
    .repeat_first()],
    check: Some(check_concat),
    runs: FLOAT_QUANT8,
    lower: Some(lower_concat),
};

/// DEPTH_TO_SPACE.
pub const DEPTH_TO_SPACE: OpDef = OpDef {
    op: OperationType::DEPTH_TO_SPACE,
    signatures: BLOCK_SIGS,
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| depth_space(a, true)),
};

/// SPACE_TO_DEPTH.
pub const SPACE_TO_DEPTH: OpDef = OpDef {
    op: OperationType::SPACE_TO_DEPTH,
    signatures: BLOCK_SIGS,
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(|a| depth_space(a, false)),
};

/// PAD.
pub const PAD: OpDef = OpDef {
    op: OperationType::PAD,
    signatures: &[Signature::new(
        V1_1,
        FLOAT_QUANT8,
        &[arg("input", Ty::T), arg("paddings", Ty::Ints)],
        OUT,
    )],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(lower_pad),
};

/// TRANSPOSE.
pub const TRANSPOSE: OpDef = OpDef {
    op: OperationType::TRANSPOSE,
    signatures: &[
        Signature::new(V1_1, FLOAT_QUANT8, &[arg("input", Ty::T)], OUT)
            .optional(&[&[arg("perm", Ty::Ints)]]),
    ],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(lower_transpose),
};

/// `[height, width]` of a block_shape argument (both at least 1).
fn block_shape(a: &Args<'_>) -> Result<[u32; 2], CompileError> {
    let b = a.ints("block_shape")?;
    match b[..] {
        [h, w] if h >= 1 && w >= 1 => Ok([h as u32, w as u32]),
        _ => Err(a.invalid(format!("block_shape {b:?}"))),
    }
}

fn lower_space_to_batch(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let block = block_shape(a)?;
    let p = a.ints("paddings")?;
    let pads: Vec<u32> = p
        .iter()
        .map(|&v| u32::try_from(v).map_err(|_| a.invalid(format!("negative padding {v}"))))
        .collect::<Result<_, _>>()?;
    let pads: [u32; 4] = pads
        .try_into()
        .map_err(|_| a.invalid(format!("paddings {p:?} must be 2x2")))?;
    let nchw = a.flag("layout")?;
    // The padding holds real 0: the zero point of a quantised tensor.
    let zero_point = a.operands.operand(a.input("input")?)?.zero_point;
    a.kernel(
        SpaceToBatch {
            block,
            pads,
            nchw,
            value: zero_point as f32,
        },
        &["input"],
    )
}

fn lower_batch_to_space(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let block = block_shape(a)?;
    let nchw = a.flag("layout")?;
    a.kernel(BatchToSpace { block, nchw }, &["input"])
}

/// An index clamped into a dimension as the NNAPI reference does for STRIDED_SLICE.
fn clamped_index(index: i32, dim: i32, positive_stride: bool) -> i32 {
    let rem = |v: i32| (dim + v % dim) % dim;
    if positive_stride {
        if index >= dim {
            dim
        } else {
            rem(index.clamp(-dim, dim))
        }
    } else if index < -dim {
        -1
    } else {
        rem(index.min(dim - 1))
    }
}

fn lower_strided_slice(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let shape = a.shape("input")?.to_vec();
    let rank = shape.len();
    let (begin, end, strides) = (a.ints("begin")?, a.ints("end")?, a.ints("strides")?);
    if begin.len() != rank || end.len() != rank || strides.len() != rank {
        return Err(a.invalid(format!(
            "begin/end/strides of lengths {}/{}/{} for rank {rank}",
            begin.len(),
            end.len(),
            strides.len()
        )));
    }
    let (bm, em, sm) = (
        a.i32("begin_mask")?,
        a.i32("end_mask")?,
        a.i32("shrink_axis_mask")?,
    );
    let mut dims = Vec::with_capacity(rank);
    let mut out = Vec::new();
    for i in 0..rank {
        let dim = i32::try_from(shape[i]).map_err(|_| a.invalid("dimension too large"))?;
        let stride = strides[i];
        if stride == 0 {
            return Err(a.invalid(format!("stride 0 in dimension {i}")));
        }
        let pos = stride > 0;
        let bit = 1 << i;
        let b = if bm & bit != 0 {
            if pos {
                0
            } else {
                dim - 1
            }
        } else if dim == 0 {
            0
        } else {
            clamped_index(begin[i], dim, pos)
        };
        let e = if em & bit != 0 {
            if pos {
                dim
            } else {
                -1
            }
        } else if dim == 0 {
            0
        } else {
            clamped_index(end[i], dim, pos)
        };
        let span = i64::from(e) - i64::from(b);
        let s = i64::from(stride);
        let count = if (span > 0) == (s > 0) && span != 0 {
            (span + s - s.signum()) / s
        } else {
            0
        };
        let count = u32::try_from(count).map_err(|_| a.invalid("slice too large"))?;
        if sm & bit != 0 {
            if stride < 0 || count != 1 {
                return Err(a.invalid(format!("shrinking dimension {i} of {count} elements")));
            }
        } else {
            out.push(count);
        }
        dims.push(SliceDim {
            begin: b,
            stride,
            count,
        });
    }
    if out.is_empty() {
        out.push(1);
    }
    a.kernel(StridedSlice { dims, shape: out }, &["input"])
}

fn lower_gather(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let rank = a.shape("input")?.len();
    let axis = a.axis(a.i32("axis")?, rank)?;
    a.kernel(Gather { axis }, &["input", "indices"])
}

fn lower_channel_shuffle(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let rank = a.shape("input")?.len();
    let groups = a.positive("num_groups")?;
    let axis = a.axis(a.i32("axis")?, rank)?;
    a.kernel(ChannelShuffle { groups, axis }, &["input"])
}

/// BATCH_TO_SPACE_ND.
pub const BATCH_TO_SPACE_ND: OpDef = OpDef {
    op: OperationType::BATCH_TO_SPACE_ND,
    signatures: &[Signature::new(
        V1_1,
        FLOAT_QUANT8,
        &[arg("input", Ty::T), arg("block_shape", Ty::Ints)],
        OUT,
    )
    .optional(&[&[arg("layout", Ty::Bool)]])],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(lower_batch_to_space),
};

/// SPACE_TO_BATCH_ND.
pub const SPACE_TO_BATCH_ND: OpDef = OpDef {
    op: OperationType::SPACE_TO_BATCH_ND,
    signatures: &[Signature::new(
        V1_1,
        FLOAT_QUANT8,
        &[
            arg("input", Ty::T),
            arg("block_shape", Ty::Ints),
            arg("paddings", Ty::Ints),
        ],
        OUT,
    )
    .optional(&[&[arg("layout", Ty::Bool)]])],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(lower_space_to_batch),
};

/// STRIDED_SLICE.
pub const STRIDED_SLICE: OpDef = OpDef {
    op: OperationType::STRIDED_SLICE,
    signatures: &[Signature::new(
        V1_1,
        FLOAT_QUANT8,
        &[
            arg("input", Ty::T),
            arg("begin", Ty::Ints),
            arg("end", Ty::Ints),
            arg("strides", Ty::Ints),
            arg("begin_mask", Ty::Int),
            arg("end_mask", Ty::Int),
            arg("shrink_axis_mask", Ty::Int),
        ],
        OUT,
    )],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(lower_strided_slice),
};

/// GATHER: the indices are data (a device tensor), not compile-time values.
pub const GATHER: OpDef = OpDef {
    op: OperationType::GATHER,
    signatures: &[Signature::new(
        V1_2,
        FLOAT_QUANT8_INT32,
        &[
            arg("input", Ty::T),
            arg("axis", Ty::Int),
            arg("indices", Ty::Is(OperandType::TENSOR_INT32)),
        ],
        OUT,
    )],
    check: None,
    runs: FLOAT_QUANT8_INT32,
    lower: Some(lower_gather),
};

/// CHANNEL_SHUFFLE.
pub const CHANNEL_SHUFFLE: OpDef = OpDef {
    op: OperationType::CHANNEL_SHUFFLE,
    signatures: &[Signature::new(
        V1_2,
        FLOAT_QUANT8,
        &[
            arg("input", Ty::T),
            arg("num_groups", Ty::Int),
            arg("axis", Ty::Int),
        ],
        OUT,
    )],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(lower_channel_shuffle),
};

fn lower_slice(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let shape = a.shape("input")?.to_vec();
    let dynamic_input = a.operands.is_dynamic(a.input("input")?);
    let (begin, size) = match (a.ints("begin"), a.ints("size")) {
        // A run-time shaped input (a zero-row NMS result, say): the window is resolved on
        // the device against the real shape.
        (Ok(_), Ok(s)) if dynamic_input => {
            let shape = Some(&s)
                .filter(|s| s.len() == shape.len())
                .and_then(|s| s.iter().map(|&d| u32::try_from(d).ok()).collect());
            return a.kernel(RuntimeSlice { shape }, &["input", "begin", "size"]);
        }
        (Ok(b), Ok(s)) => (b, s),
        // Computed on the device (a loop's counter, say): the device reads them and
        // the output's shape is known at run time.
        (Err(CompileError::NotConstant(_)), _) | (_, Err(CompileError::NotConstant(_))) => {
            // Sizes known now (no -1) make the output shape static.
            let shape = a
                .ints("size")
                .ok()
                .filter(|s| s.len() == shape.len())
                .and_then(|s| s.iter().map(|&d| u32::try_from(d).ok()).collect());
            return a.kernel(RuntimeSlice { shape }, &["input", "begin", "size"]);
        }
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    if begin.len() != shape.len() || size.len() != shape.len() {
        return Err(a.invalid(format!(
            "begin/size of lengths {}/{} for rank {}",
            begin.len(),
            size.len(),
            shape.len()
        )));
    }
    let mut dims = Vec::with_capacity(shape.len());
    for ((&d, &b), &s) in shape.iter().zip(&begin).zip(&size) {
        let d = i64::try_from(d).map_err(|_| a.invalid("dimension too large"))?;
        let (b64, s64) = (i64::from(b), i64::from(s));
        let count = if s == -1 { d - b64 } else { s64 };
        if b64 < 0 || count < 0 || b64 + count > d {
            return Err(a.invalid(format!("slice begin {b} size {s} of a dimension {d}")));
        }
        dims.push(SliceDim {
            begin: b,
            stride: 1,
            count: count as u32,
        });
    }
    let out = dims.iter().map(|d| d.count).collect();
    a.kernel(StridedSlice { dims, shape: out }, &["input"])
}

fn lower_pad_v2(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let rank = a.shape("input")?.len();
    let p = a.ints("paddings")?;
    if p.len() != rank * 2 {
        return Err(a.invalid(format!("paddings has {} values for rank {rank}", p.len())));
    }
    let pads = p
        .chunks_exact(2)
        .map(|c| match (u32::try_from(c[0]), u32::try_from(c[1])) {
            (Ok(x), Ok(y)) => Ok((x, y)),
            _ => Err(a.invalid(format!("negative padding {c:?}"))),
        })
        .collect::<Result<_, _>>()?;
    // Float tensors pad with the real value; quantised ones with the stored INT32 value.
    let value = if is_quant8(a.main) {
        a.i32("pad_value")? as f32
    } else {
        a.f32("pad_value")?
    };
    a.kernel(Pad { pads, value }, &["input"])
}

fn lower_expand_dims(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let mut shape = a.shape("input")?.to_vec();
    let axis = a.axis(a.i32("axis")?, shape.len() + 1)?;
    shape.insert(axis as usize, 1);
    a.kernel(Reshape { shape }, &["input"])
}

/// SLICE.
pub const SLICE: OpDef = OpDef {
    op: OperationType::SLICE,
    signatures: &[Signature::new(
        V1_2,
        FLOAT_QUANT8_INT32,
        &[
            arg("input", Ty::T),
            arg("begin", Ty::Ints),
            arg("size", Ty::Ints),
        ],
        OUT,
    )],
    check: None,
    runs: FLOAT_QUANT8_INT32,
    lower: Some(lower_slice),
};

/// PAD_V2: the pad value is a float scalar for float tensors, an INT32 stored value for
/// quantised ones.
pub const PAD_V2: OpDef = OpDef {
    op: OperationType::PAD_V2,
    signatures: &[
        Signature::new(
            V1_2,
            FLOATS,
            &[
                arg("input", Ty::T),
                arg("paddings", Ty::Ints),
                arg("pad_value", Ty::Scalar),
            ],
            OUT,
        ),
        Signature::new(
            V1_2,
            QUANT8,
            &[
                arg("input", Ty::T),
                arg("paddings", Ty::Ints),
                arg("pad_value", Ty::Int),
            ],
            OUT,
        ),
    ],
    check: None,
    runs: FLOAT_QUANT8,
    lower: Some(lower_pad_v2),
};

/// EXPAND_DIMS.
pub const EXPAND_DIMS: OpDef = OpDef {
    op: OperationType::EXPAND_DIMS,
    signatures: &[Signature::new(
        V1_2,
        FLOAT_QUANT8_INT32,
        &[arg("input", Ty::T), arg("axis", Ty::Int)],
        OUT,
    )],
    check: None,
    runs: FLOAT_QUANT8_INT32,
    lower: Some(lower_expand_dims),
};

fn lower_tile(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let m = a.ints("multiples")?;
    let multiples = m
        .iter()
        .map(|&v| {
            u32::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| a.invalid(format!("multiple {v}")))
        })
        .collect::<Result<_, _>>()?;
    a.kernel(Tile { multiples }, &["input"])
}

fn lower_split(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let rank = a.shape("input")?.len();
    let axis = a.axis(a.i32("axis")?, rank)?;
    let count = a.positive("num_splits")?;
    if count as usize != a.outputs().len() {
        return Err(a.invalid(format!(
            "num_splits {count} for {} outputs",
            a.outputs().len()
        )));
    }
    Ok(Lowered {
        op: Split { axis, count }.into(),
        inputs: vec![a.input("input")?],
        outputs: a.outputs().to_vec(),
    })
}

/// TILE.
pub const TILE: OpDef = OpDef {
    op: OperationType::TILE,
    signatures: &[Signature::new(
        V1_2,
        FLOAT_QUANT8_INT32,
        &[arg("input", Ty::T), arg("multiples", Ty::Ints)],
        OUT,
    )],
    check: None,
    runs: FLOAT_QUANT8_INT32,
    lower: Some(lower_tile),
};

/// SPLIT: one output per part.
pub const SPLIT: OpDef = OpDef {
    op: OperationType::SPLIT,
    signatures: &[Signature::new(
        V1_2,
        FLOAT_QUANT8_INT32,
        &[
            arg("input", Ty::T),
            arg("axis", Ty::Int),
            arg("num_splits", Ty::Int),
        ],
        OUT,
    )
    .variadic_outputs()],
    check: None,
    runs: FLOAT_QUANT8_INT32,
    lower: Some(lower_split),
};

/// FILL's value scalar type for each output type.
fn fill_value_type(out: OperandType) -> Option<OperandType> {
    match out {
        OperandType::TENSOR_FLOAT32 => Some(OperandType::FLOAT32),
        OperandType::TENSOR_FLOAT16 => Some(OperandType::FLOAT16),
        OperandType::TENSOR_INT32 => Some(OperandType::INT32),
        _ => None,
    }
}

/// FILL's value has the scalar type of its output's element type.
fn check_fill(ins: &[&Operand], outs: &[&Operand]) -> Result<(), String> {
    match (ins.get(1), outs.first()) {
        (Some(v), Some(o)) if fill_value_type(o.r#type) == Some(v.r#type) => Ok(()),
        (Some(v), Some(o)) => Err(format!("value {} for an output {}", v.r#type, o.r#type)),
        _ => Err("missing operands".into()),
    }
}

fn lower_fill(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let dims = a.ints("dims")?;
    let shape = dims
        .iter()
        .map(|&d| u32::try_from(d).map_err(|_| a.invalid(format!("dimension {d}"))))
        .collect::<Result<_, _>>()?;
    // A known value (constant) is a kernel parameter; otherwise the value is device data
    // computed by another operation (e.g. RANK).
    let id = a.input("value")?;
    let known = if a.operands.operand(id)?.r#type == OperandType::INT32 {
        a.i32("value")
            .ok()
            .map(|v| u32::from_ne_bytes(v.to_ne_bytes()))
    } else {
        a.f32("value").ok().map(f32::to_bits)
    };
    match known {
        Some(v) => Ok(Lowered {
            op: Fill {
                shape,
                value: Some(v),
            }
            .into(),
            inputs: Vec::new(),
            outputs: vec![a.output(0)?],
        }),
        None => a.kernel(Fill { shape, value: None }, &["value"]),
    }
}

fn lower_rank(a: &Args<'_>) -> Result<Lowered, CompileError> {
    a.kernel(Rank, &["input"])
}

/// FILL: the main type is the dims tensor; the output type follows the value's.
pub const FILL: OpDef = OpDef {
    op: OperationType::FILL,
    signatures: &[Signature::new(
        V1_3,
        &[OperandType::TENSOR_INT32],
        &[arg("dims", Ty::Ints), arg("value", Ty::OneOf(FILL_VALUES))],
        &[arg("output", Ty::OneOf(FILL_OUTPUTS))],
    )],
    check: Some(check_fill),
    runs: &[OperandType::TENSOR_INT32],
    lower: Some(lower_fill),
};

const FILL_VALUES: &[OperandType] = &[
    OperandType::FLOAT32,
    OperandType::FLOAT16,
    OperandType::INT32,
];
const FILL_OUTPUTS: &[OperandType] = &[
    OperandType::TENSOR_FLOAT32,
    OperandType::TENSOR_FLOAT16,
    OperandType::TENSOR_INT32,
];

/// Every tensor type RANK accepts.
const RANK_INPUTS: &[OperandType] = &[
    OperandType::TENSOR_FLOAT16,
    OperandType::TENSOR_FLOAT32,
    OperandType::TENSOR_INT32,
    OperandType::TENSOR_QUANT8_ASYMM,
    OperandType::TENSOR_QUANT16_SYMM,
    OperandType::TENSOR_BOOL8,
    OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL,
    OperandType::TENSOR_QUANT16_ASYMM,
    OperandType::TENSOR_QUANT8_SYMM,
    OperandType::TENSOR_QUANT8_ASYMM_SIGNED,
];

/// RANK: an INT32 scalar output.
pub const RANK: OpDef = OpDef {
    op: OperationType::RANK,
    signatures: &[Signature::new(
        V1_3,
        RANK_INPUTS,
        &[arg("input", Ty::T)],
        &[arg("output", Ty::Is(OperandType::INT32))],
    )],
    check: None,
    runs: RANK_INPUTS,
    lower: Some(lower_rank),
};
