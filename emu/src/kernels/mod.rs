//! The compute engine's kernels: NN operations with Android NNAPI semantics on typed
//! tensors (float32, float16, int32, quantised 8/16-bit, bool8).
//!
//! Every kernel is one type implementing [`Kernel`] in its own file under
//! `kernels/<family>/`, registered once in the [`registry!`] list below. The list generates
//! [`KernelOp`] (the sum of all kernels), its opcode table, decoder and dispatch, so adding
//! a kernel is one new file plus one line here. The program container stores a kernel as an
//! opcode plus `u32` parameter words ([`KernelOp::opcode`], [`KernelOp::encode_params`]);
//! the device parses untrusted words with [`KernelOp::decode`], validates types and shapes
//! with [`KernelOp::output_shapes`] / [`KernelOp::check_outputs`], and runs the kernel with
//! [`execute`]. None of these panic on any input: sizes use checked arithmetic and every
//! tensor is capped at [`MAX_ELEMENTS`] elements.
//!
//! Parameter words: `u32` as is, `i32` as its two's-complement bits, `f32` as
//! `f32::to_bits`, `bool` as 0/1, an enum as its number, a list as its length followed by
//! its items, `Padding` as left, right, top, bottom. Each kernel's file documents its words.
//! Enum numbers: `Activation` None 0, Relu 1, Relu1 2, Relu6 3 (the NNAPI FuseCode).
//!
//! # Semantics notes
//!
//! - Fused activations clamp after the op; a NaN passes through the clamp unchanged (as the
//!   C++ `std::min(std::max(x, lo), hi)` of the NNAPI reference does).
//! - float16 kernels compute in float32 and round the result to float16, as the NNAPI
//!   reference does ([`crate::tensor::widen_f16`]).
//! - Zero-sized tensors: a batch (or any non-spatial, non-channel dimension) may be 0, as
//!   NNAPI allows; the kernel then writes nothing.

pub mod activation;
pub mod control;
pub mod conv;
pub mod detection;
pub mod elementwise;
pub mod extension;
pub mod igemm;
pub mod image;
pub mod index;
pub mod isa;
pub mod kernel;
pub(crate) mod layout;
pub mod lookup;
pub mod movement;
pub mod normalization;
pub mod pool;
pub mod qconv;
pub mod quant;
pub mod recurrent;
pub mod reduction;
pub(crate) mod requant;

pub(crate) mod gemm;
#[cfg(test)]
mod reference;
pub(crate) mod simd;
#[cfg(test)]
mod tests;

/// A property-test configuration of `cases` cases, unless the `PROPTEST_CASES` environment
/// variable asks for another number.
#[cfg(test)]
pub(crate) fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    proptest::test_runner::Config {
        cases,
        ..proptest::test_runner::Config::default()
    }
}

use std::ops::RangeInclusive;

pub use kernel::{Cost, Kernel, Words};

pub use activation::{log_softmax::LogSoftmax, softmax::Softmax};
pub use control::{
    branch::{BranchIfFalse, Jump},
    copy::Copy,
};
pub use conv::{
    batch_matmul::BatchMatMul, conv2d::Conv2d, depthwise::DepthwiseConv2d,
    fully_connected::FullyConnected, grouped::GroupedConv2d, transpose::TransposeConv2d,
    window::ConvWindow, ConvEpilogue,
};
pub use detection::{
    bbox_transform::BboxTransform, box_nms::BoxWithNmsLimit, generate_proposals::GenerateProposals,
    heatmap::HeatmapMaxKeypoint, nms::NmsKernel, postprocess::DetectionPostprocess,
    roi_align::RoiAlign, roi_pooling::RoiPooling,
};
pub use elementwise::binary::{Binary, BinaryKind};
pub use elementwise::compare::{Compare, CompareKind};
pub use elementwise::convert::{Convert, ConvertKind};
pub use elementwise::logical::{Logical, LogicalKind};
pub use elementwise::math::{Math, MathKind};
pub use elementwise::minmax::{MinMax, MinMaxKind};
pub use elementwise::unary::{Unary, UnaryKind};
pub use extension::{fibonacci::Fibonacci, gelu::Gelu};
pub use image::{
    resize_bilinear::ResizeBilinear, resize_bilinear_integer::ResizeBilinearInteger,
    resize_nearest::ResizeNearest,
};
pub use index::{argminmax::ArgMinMax, topk::TopK};
pub use lookup::{
    embedding::EmbeddingLookup, hashtable::HashtableLookup, lsh::LshProjection,
    multinomial::RandomMultinomial,
};
pub use movement::{
    channel_shuffle::ChannelShuffle, concat::Concatenation, depth_space::DepthToSpace,
    depth_space::SpaceToDepth, fill::Fill, fill::Rank, gather::Gather, mirror_pad::MirrorPad,
    pack::Pack, pad::Pad, reshape::Reshape, reverse::Reverse, scatter::Scatter,
    slice::RuntimeSlice, space_batch::BatchToSpace, space_batch::SpaceToBatch, split::Split,
    strided_slice::SliceDim, strided_slice::StridedSlice, tile::Tile, transpose::Transpose,
};
pub use normalization::{instance::InstanceNorm, l2::L2Normalization, lrn::LocalResponseNorm};
pub use pool::pool2d::{Pool, PoolKind};
pub use recurrent::{
    bidi_lstm::BidiLstm, bidi_rnn::BidiRnn, cell::LstmParams, lstm::Lstm, qlstm::QLstm,
    quantized_lstm::QuantizedLstm, rnn::Rnn, sequence_lstm::SequenceLstm,
    sequence_rnn::SequenceRnn, svdf::Svdf, RecurrentActivation,
};
pub use reduction::{
    mean::Mean,
    reduce::{Reduce, ReduceKind},
};

use crate::tensor::{DType, Staged, TensorType, View, ViewMut};

/// The one list of kernels: `opcode => Variant(path::Type)`. Opcodes are stable (they are
/// the program format); never reuse a number.
macro_rules! registry {
    ($($opcode:literal => $variant:ident($ty:path),)*) => {
        /// One kernel invocation: any registered kernel with its parameters.
        #[derive(Debug, Clone, PartialEq)]
        pub enum KernelOp {
            $(
                #[doc = concat!("`", stringify!($ty), "`, opcode ", stringify!($opcode), ".")]
                $variant($ty),
            )*
        }

        $(
            impl From<$ty> for KernelOp {
                fn from(k: $ty) -> KernelOp {
                    KernelOp::$variant(k)
                }
            }
        )*

        /// Every registered opcode, in list order.
        pub const OPCODES: &[u32] = &[$($opcode),*];

        impl KernelOp {
            /// The stable opcode.
            pub fn opcode(&self) -> u32 {
                match self {
                    $(KernelOp::$variant(_) => $opcode,)*
                }
            }

            /// Parses an opcode and its parameter words (untrusted), validating every word.
            pub fn decode(opcode: u32, params: &[u32]) -> Result<KernelOp> {
                let mut w = Words::new(opcode, params);
                let op = match opcode {
                    $($opcode => KernelOp::$variant(<$ty as Kernel>::decode(&mut w)?),)*
                    _ => return Err(KernelError::UnknownOpcode(opcode)),
                };
                w.finish()?;
                Ok(op)
            }

            /// The kernel, as a trait object.
            pub fn kernel(&self) -> &dyn DynKernel {
                match self {
                    $(KernelOp::$variant(k) => k,)*
                }
            }

            /// The kernel, as a mutable trait object.
            pub fn kernel_mut(&mut self) -> &mut dyn DynKernel {
                match self {
                    $(KernelOp::$variant(k) => k,)*
                }
            }
        }
    };
}
registry! {
    1 => Binary(elementwise::binary::Binary),
    2 => FullyConnected(conv::fully_connected::FullyConnected),
    3 => Conv2d(conv::conv2d::Conv2d),
    4 => DepthwiseConv2d(conv::depthwise::DepthwiseConv2d),
    5 => Pool(pool::pool2d::Pool),
    6 => Unary(elementwise::unary::Unary),
    7 => Softmax(activation::softmax::Softmax),
    8 => Reshape(movement::reshape::Reshape),
    9 => Concatenation(movement::concat::Concatenation),
    10 => L2Normalization(normalization::l2::L2Normalization),
    11 => DepthToSpace(movement::depth_space::DepthToSpace),
    12 => SpaceToDepth(movement::depth_space::SpaceToDepth),
    13 => ResizeBilinear(image::resize_bilinear::ResizeBilinear),
    17 => ResizeBilinearInteger(image::resize_bilinear_integer::ResizeBilinearInteger),
    14 => Pad(movement::pad::Pad),
    15 => Transpose(movement::transpose::Transpose),
    16 => Mean(reduction::mean::Mean),
    20 => TransposeConv2d(conv::transpose::TransposeConv2d),
    21 => GroupedConv2d(conv::grouped::GroupedConv2d),
    22 => BatchMatMul(conv::batch_matmul::BatchMatMul),
    30 => Compare(elementwise::compare::Compare),
    31 => Convert(elementwise::convert::Convert),
    60 => ResizeNearest(image::resize_nearest::ResizeNearest),
    61 => Reduce(reduction::reduce::Reduce),
    62 => LocalResponseNorm(normalization::lrn::LocalResponseNorm),
    80 => SpaceToBatch(movement::space_batch::SpaceToBatch),
    81 => BatchToSpace(movement::space_batch::BatchToSpace),
    82 => StridedSlice(movement::strided_slice::StridedSlice),
    83 => Gather(movement::gather::Gather),
    84 => ChannelShuffle(movement::channel_shuffle::ChannelShuffle),
    85 => Tile(movement::tile::Tile),
    86 => Split(movement::split::Split),
    32 => MinMax(elementwise::minmax::MinMax),
    33 => Math(elementwise::math::Math),
    34 => Logical(elementwise::logical::Logical),
    63 => ArgMinMax(index::argminmax::ArgMinMax),
    64 => TopK(index::topk::TopK),
    65 => InstanceNorm(normalization::instance::InstanceNorm),
    66 => LogSoftmax(activation::log_softmax::LogSoftmax),
    87 => Fill(movement::fill::Fill),
    88 => Rank(movement::fill::Rank),
    89 => Copy(control::copy::Copy),
    90 => BranchIfFalse(control::branch::BranchIfFalse),
    91 => Jump(control::branch::Jump),
    92 => RuntimeSlice(movement::slice::RuntimeSlice),
    93 => MirrorPad(movement::mirror_pad::MirrorPad),
    94 => Reverse(movement::reverse::Reverse),
    95 => Scatter(movement::scatter::Scatter),
    96 => Pack(movement::pack::Pack),
    100 => Fibonacci(extension::fibonacci::Fibonacci),
    101 => Gelu(extension::gelu::Gelu),
    110 => BboxTransform(detection::bbox_transform::BboxTransform),
    111 => BoxWithNmsLimit(detection::box_nms::BoxWithNmsLimit),
    112 => GenerateProposals(detection::generate_proposals::GenerateProposals),
    113 => DetectionPostprocess(detection::postprocess::DetectionPostprocess),
    114 => HeatmapMaxKeypoint(detection::heatmap::HeatmapMaxKeypoint),
    115 => RoiAlign(detection::roi_align::RoiAlign),
    116 => RoiPooling(detection::roi_pooling::RoiPooling),
    130 => Lstm(recurrent::lstm::Lstm),
    131 => SequenceLstm(recurrent::sequence_lstm::SequenceLstm),
    132 => BidiLstm(recurrent::bidi_lstm::BidiLstm),
    133 => Rnn(recurrent::rnn::Rnn),
    134 => SequenceRnn(recurrent::sequence_rnn::SequenceRnn),
    135 => BidiRnn(recurrent::bidi_rnn::BidiRnn),
    136 => Svdf(recurrent::svdf::Svdf),
    137 => QuantizedLstm(recurrent::quantized_lstm::QuantizedLstm),
    138 => QLstm(recurrent::qlstm::QLstm),
    140 => EmbeddingLookup(lookup::embedding::EmbeddingLookup),
    141 => HashtableLookup(lookup::hashtable::HashtableLookup),
    142 => LshProjection(lookup::lsh::LshProjection),
    143 => RandomMultinomial(lookup::multinomial::RandomMultinomial),
}

/// The object-safe face of [`Kernel`], implemented for every kernel.
pub trait DynKernel {
    /// See [`Kernel::name`].
    fn name(&self) -> &'static str;
    /// See [`Kernel::encode`].
    fn encode(&self, w: &mut Vec<u32>);
    /// See [`Kernel::input_count`].
    fn input_count(&self) -> RangeInclusive<usize>;
    /// See [`Kernel::output_count`].
    fn output_count(&self) -> usize;
    /// See [`Kernel::output_shapes`].
    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>>;
    /// See [`Kernel::check_outputs`].
    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()>;
    /// See [`Kernel::cost`].
    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost;
    /// See [`Kernel::run`].
    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()>;
    /// See [`Kernel::shapes_depend_on_values`].
    fn shapes_depend_on_values(&self) -> bool;
    /// See [`Kernel::overwrites_f32_outputs`].
    fn overwrites_f32_outputs(&self) -> bool;
    /// See [`Kernel::overwrites_quant8_outputs`].
    fn overwrites_quant8_outputs(&self) -> bool;
    /// See [`Kernel::fused_activation`].
    fn fused_activation(&self) -> Option<Activation>;
    /// See [`Kernel::set_fused_activation`].
    fn set_fused_activation(&mut self, act: Activation) -> bool;
    /// See [`Kernel::as_activation`].
    fn as_activation(&self) -> Option<Activation>;
    /// See [`Kernel::run_sized`].
    fn run_sized(
        &self,
        inputs: &[View<'_>],
        outputs: &mut [ViewMut<'_>],
    ) -> Result<Option<Vec<Vec<usize>>>>;
}

impl<K: Kernel> DynKernel for K {
    fn name(&self) -> &'static str {
        Kernel::name(self)
    }
    fn encode(&self, w: &mut Vec<u32>) {
        Kernel::encode(self, w)
    }
    fn input_count(&self) -> RangeInclusive<usize> {
        Kernel::input_count(self)
    }
    fn output_count(&self) -> usize {
        Kernel::output_count(self)
    }
    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        Kernel::output_shapes(self, inputs)
    }
    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        Kernel::check_outputs(self, inputs, outputs)
    }
    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        Kernel::cost(self, inputs, outputs)
    }
    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        Kernel::run(self, inputs, outputs)
    }
    fn shapes_depend_on_values(&self) -> bool {
        Kernel::shapes_depend_on_values(self)
    }
    fn overwrites_f32_outputs(&self) -> bool {
        Kernel::overwrites_f32_outputs(self)
    }
    fn overwrites_quant8_outputs(&self) -> bool {
        Kernel::overwrites_quant8_outputs(self)
    }
    fn fused_activation(&self) -> Option<Activation> {
        Kernel::fused_activation(self)
    }
    fn set_fused_activation(&mut self, act: Activation) -> bool {
        Kernel::set_fused_activation(self, act)
    }
    fn as_activation(&self) -> Option<Activation> {
        Kernel::as_activation(self)
    }
    fn run_sized(
        &self,
        inputs: &[View<'_>],
        outputs: &mut [ViewMut<'_>],
    ) -> Result<Option<Vec<Vec<usize>>>> {
        Kernel::run_sized(self, inputs, outputs)
    }
}

impl KernelOp {
    /// The op index a sequencer instruction may continue at (`None` for everything that
    /// runs straight on).
    pub fn branch_target(&self) -> Option<u32> {
        match self {
            KernelOp::BranchIfFalse(b) => Some(b.target),
            KernelOp::Jump(j) => Some(j.target),
            _ => None,
        }
    }

    /// Whether the kernel's output shapes depend on its input values
    /// ([`Kernel::shapes_depend_on_values`]).
    pub fn shapes_depend_on_values(&self) -> bool {
        self.kernel().shapes_depend_on_values()
    }

    /// See [`Kernel::overwrites_f32_outputs`].
    pub fn overwrites_f32_outputs(&self) -> bool {
        self.kernel().overwrites_f32_outputs()
    }

    /// Whether the kernel writes every element of its outputs of element type `dtype`, so
    /// the engine may hand it uncleared buffers ([`Kernel::overwrites_f32_outputs`],
    /// [`Kernel::overwrites_quant8_outputs`]).
    pub fn overwrites_outputs_of(&self, dtype: DType) -> bool {
        match dtype {
            DType::F32 => self.overwrites_f32_outputs(),
            DType::U8 | DType::I8 => self.kernel().overwrites_quant8_outputs(),
            _ => false,
        }
    }

    /// The op's name, for errors and traces.
    pub fn name(&self) -> &'static str {
        self.kernel().name()
    }

    /// The parameter words.
    pub fn encode_params(&self) -> Vec<u32> {
        let mut w = Vec::new();
        self.kernel().encode(&mut w);
        w
    }

    /// The accepted number of inputs.
    pub fn input_count(&self) -> RangeInclusive<usize> {
        self.kernel().input_count()
    }

    /// The number of outputs.
    pub fn output_count(&self) -> usize {
        self.kernel().output_count()
    }

    /// Validates the inputs (count, ranks, dimensions, element types, quantisation) and
    /// returns each output's shape.
    pub fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let range = self.input_count();
        if !range.contains(&inputs.len()) {
            return Err(KernelError::InputCount {
                op: self.name(),
                min: *range.start(),
                max: *range.end(),
                got: inputs.len(),
            });
        }
        for t in inputs {
            num_elements(&t.shape)?;
            t.validate_quant()
                .map_err(|reason| KernelError::InvalidShape {
                    op: self.name(),
                    reason,
                })?;
        }
        let out = self.kernel().output_shapes(inputs)?;
        if out.len() != self.output_count() {
            return Err(KernelError::OutputCount {
                op: self.name(),
                expected: self.output_count(),
                got: out.len(),
            });
        }
        for s in &out {
            num_elements(s)?;
        }
        Ok(out)
    }

    /// Validates a whole invocation's tensor types: the inputs, then that each output has
    /// the shape the kernel computes and an element type and quantisation it accepts.
    pub fn check(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let want = self.output_shapes(inputs)?;
        if outputs.len() != want.len() {
            return Err(KernelError::OutputCount {
                op: self.name(),
                expected: want.len(),
                got: outputs.len(),
            });
        }
        for (index, (t, s)) in outputs.iter().zip(&want).enumerate() {
            if &t.shape != s {
                return Err(KernelError::OutputShape {
                    op: self.name(),
                    index,
                    expected: s.clone(),
                    got: t.shape.clone(),
                });
            }
            t.validate_quant()
                .map_err(|reason| KernelError::InvalidShape {
                    op: self.name(),
                    reason,
                })?;
        }
        self.kernel().check_outputs(inputs, outputs)
    }

    /// The work of the op on these inputs, for the timing model (zero if invalid).
    pub fn cost(&self, inputs: &[&TensorType]) -> Cost {
        match self.output_shapes(inputs) {
            Ok(out) => self.kernel().cost(inputs, &out),
            Err(_) => Cost::default(),
        }
    }
}

/// Runs `op`: validates the input and output types ([`KernelOp::check`]) and that each
/// view holds exactly its shape's bytes, then computes the outputs. Returns the outputs'
/// real shapes when they depend on the input values ([`Kernel::run_sized`]), checked to
/// fit the views.
pub fn execute(
    op: &KernelOp,
    inputs: &[View<'_>],
    outputs: &mut [ViewMut<'_>],
) -> Result<Option<Vec<Vec<usize>>>> {
    let in_tys: Vec<&TensorType> = inputs.iter().map(|v| v.ty).collect();
    let out_tys: Vec<&TensorType> = outputs.iter().map(|v| v.ty).collect();
    op.check(&in_tys, &out_tys)?;
    crate::program::check_layouts(op, &in_tys, &out_tys)
        .map_err(|reason| bad_shape(op.name(), reason))?;
    execute_checked(op, inputs, outputs)
}

/// [`execute`] for views whose types passed [`KernelOp::check`] and the layout checks
/// already (an op of a decoded program whose tensors are all static, which
/// [`crate::program::Program::decode`] checked): checks only that each view holds
/// exactly its shape's bytes, then runs.
pub fn execute_checked(
    op: &KernelOp,
    inputs: &[View<'_>],
    outputs: &mut [ViewMut<'_>],
) -> Result<Option<Vec<Vec<usize>>>> {
    let lens = inputs
        .iter()
        .map(|v| (v.ty, v.bytes.len(), "input"))
        .chain(outputs.iter().map(|v| (v.ty, v.bytes.len(), "output")));
    for (index, (ty, got, which)) in lens.enumerate() {
        let expected = num_elements(&ty.shape)? * ty.dtype.size() as usize;
        let expected = match ty.layout {
            crate::tensor::Layout::Plain => expected,
            l => l
                .byte_len(ty.dtype, &ty.shape)
                .and_then(|b| usize::try_from(b).ok())
                .ok_or(KernelError::TooLarge)?,
        };
        if got != expected {
            return Err(KernelError::DataLength {
                op: op.name(),
                which,
                index,
                shape: ty.shape.clone(),
                expected,
                got,
            });
        }
    }
    let real = op.kernel().run_sized(inputs, outputs)?;
    if let Some(real) = &real {
        let fits = real.len() == outputs.len()
            && real.iter().zip(outputs.iter()).all(|(r, v)| {
                r.len() == v.ty.shape.len() && r.iter().zip(&v.ty.shape).all(|(a, b)| a <= b)
            });
        if !fits {
            return Err(bad_shape(
                op.name(),
                "real output shapes exceed their capacity",
            ));
        }
    }
    Ok(real)
}

/// Runs `op` on float32 tensors given as `(shape, data)`: a convenience for tests and
/// benchmarks. Returns each output's shape and data.
pub fn run_f32(
    op: &KernelOp,
    inputs: &[(&[usize], &[f32])],
) -> Result<Vec<(Vec<usize>, Vec<f32>)>> {
    let in_tys: Vec<TensorType> = inputs
        .iter()
        .map(|(s, _)| TensorType::new(DType::F32, s))
        .collect();
    let in_bufs: Vec<Staged> = inputs
        .iter()
        .map(|(_, d)| {
            let mut s = Staged::zeroed(d.len() * 4);
            s.bytes_mut().copy_from_slice(bytemuck::cast_slice(d));
            s
        })
        .collect();
    let refs: Vec<&TensorType> = in_tys.iter().collect();
    let shapes = op.output_shapes(&refs)?;
    let out_tys: Vec<TensorType> = shapes
        .iter()
        .map(|s| TensorType::new(DType::F32, s))
        .collect();
    // As the engine does, a kernel that says it overwrites its outputs gets them full of
    // garbage (NaN bits): every test through here then checks that it does.
    let garbage = op.overwrites_f32_outputs();
    let mut out_bufs: Vec<Staged> = out_tys
        .iter()
        .map(|t| {
            let mut s = Staged::zeroed(t.numel() * 4);
            if garbage {
                s.bytes_mut().fill(0xFF);
            }
            s
        })
        .collect();
    let views: Vec<View<'_>> = in_tys
        .iter()
        .zip(&in_bufs)
        .map(|(ty, b)| View {
            ty,
            bytes: b.bytes(),
        })
        .collect();
    let mut outs: Vec<ViewMut<'_>> = out_tys
        .iter()
        .zip(out_bufs.iter_mut())
        .map(|(ty, b)| ViewMut {
            ty,
            bytes: b.bytes_mut(),
        })
        .collect();
    let real = execute(op, &views, &mut outs)?;
    drop(outs);
    let shapes = real.unwrap_or(shapes);
    Ok(shapes
        .into_iter()
        .zip(&out_bufs)
        .map(|(s, b)| {
            let n = s.iter().product::<usize>();
            let data: &[f32] = bytemuck::cast_slice(b.bytes());
            (s, data[..n].to_vec())
        })
        .collect())
}

/// The largest tensor rank the kernels accept (and the program's tensor table holds):
/// NNAPI bounds no rank, and its AIDL V3 MIRROR_PAD cases go to rank 10.
pub const MAX_RANK: usize = 12;

/// The largest number of elements in any tensor (and in any scratch buffer derived from the
/// shapes): 2^28 floats, 1 GiB.
pub const MAX_ELEMENTS: usize = 1 << 28;

/// The largest number of inputs of a CONCATENATION.
pub const MAX_CONCAT_INPUTS: usize = 64;

/// A read-only tensor of plain elements: a row-major (C order) view of `data` with
/// dimensions `shape`. What kernels' inner functions compute on.
#[derive(Debug, Clone, Copy)]
pub struct Tensor<'a, T = f32> {
    /// Dimensions.
    pub shape: &'a [usize],
    /// Elements, row-major.
    pub data: &'a [T],
}

/// A writable tensor of plain elements.
#[derive(Debug)]
pub struct TensorMut<'a, T = f32> {
    /// Dimensions.
    pub shape: &'a [usize],
    /// Elements, row-major.
    pub data: &'a mut [T],
}

impl<'a> Tensor<'a, f32> {
    /// The float32 elements of a view.
    pub fn f32(v: &View<'a>) -> Result<Self> {
        Ok(Tensor {
            shape: v.shape(),
            data: v.f32s()?,
        })
    }
}

impl<'a> TensorMut<'a, f32> {
    /// The float32 elements of a writable view.
    pub fn f32(v: &'a mut ViewMut<'_>) -> Result<Self> {
        let shape: &'a [usize] = &v.ty.shape;
        Ok(TensorMut {
            shape,
            data: v.f32s_mut()?,
        })
    }
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
    #[error("element type {got:?} where {expected:?} is required")]
    DType { expected: DType, got: DType },
    #[error("{op} does not run on {dtype:?} tensors")]
    UnsupportedDType { op: &'static str, dtype: DType },
    #[error("a staged tensor is misaligned for its element type")]
    Misaligned,
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

    /// The clamp range, or `None` for no activation (what a kernel that clamps in its
    /// store takes).
    pub(crate) fn clamp(self) -> Option<(f32, f32)> {
        (self != Activation::None).then(|| self.range())
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
        /// The clamp's loop, built for the widest vector unit.
        struct Clamp<'a>(&'a mut [f32], (f32, f32));
        impl simd::Body for Clamp<'_> {
            type Out = ();
            #[inline(always)]
            fn run(self) {
                let Clamp(xs, (lo, hi)) = self;
                for x in xs {
                    *x = clamp_nan(*x, lo, hi);
                }
            }
        }
        simd::vectorized(Clamp(xs, self.range()));
    }

    pub(crate) fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Activation::None,
            1 => Activation::Relu,
            2 => Activation::Relu1,
            3 => Activation::Relu6,
            _ => return None,
        })
    }
}

/// `min(max(x, lo), hi)` with the C++ `std::max`/`std::min` treatment of NaN: NaN stays NaN
/// (`lo <= hi`). Written as two one-comparison selects, which the compiler turns into a
/// vector max and min; the chained `if x < lo .. else if x > hi` it left scalar (a fused
/// ADD + RELU of the face detector ran one element at a time).
#[inline]
pub(crate) fn clamp_nan(x: f32, lo: f32, hi: f32) -> f32 {
    let v = if lo > x { lo } else { x };
    if hi < v {
        hi
    } else {
        v
    }
}

/// Builds an [`KernelError::InvalidShape`].
pub(crate) fn bad_shape(op: &'static str, reason: impl Into<String>) -> KernelError {
    KernelError::InvalidShape {
        op,
        reason: reason.into(),
    }
}
