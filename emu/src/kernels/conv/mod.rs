//! The convolution family: CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, GROUPED_CONV_2D,
//! TRANSPOSE_CONV_2D, and BATCH_MATMUL. Quantised tensors (uint8 / int8, per-tensor or int8 per-channel
//! filters, int32 bias) run on the integer cores of [`crate::kernels::qconv`] with the output
//! stage ([`QStage`]) derived from the tensors' quantisation.

pub mod batch_matmul;
pub mod conv2d;
pub mod depthwise;
mod depthwise_simd;
mod epilogue;
pub mod fully_connected;
pub mod grouped;
mod shallow;
pub mod transpose;
pub mod window;

pub use epilogue::ConvEpilogue;
pub use window::ConvWindow;

use crate::kernels::kernel::{default_check, Cost, Kernel};
use crate::kernels::qconv::{
    per_channel_multipliers, per_tensor_multiplier, PerChannel, QuantParams,
};
pub(crate) use crate::kernels::quant::qerr;
use crate::kernels::quant::quantized_activation_range;
use crate::kernels::quant::QuantElem;
use crate::kernels::requant::{memoised, Epilogue, Memo};
use crate::kernels::{bad_shape, Activation, KernelError, Result, Tensor, TensorMut};
use crate::tensor::{widen_f16, DType, Layout, Quant, TensorType, View, ViewMut};
use std::cell::RefCell;
use std::rc::Rc;

/// Checks the element types of a (input, filter, bias) triple: float32 or float16
/// throughout, or quantised input with a same-typed or per-channel int8 filter and an
/// int32 bias.
pub(crate) fn check_conv_types(
    op: &'static str,
    x: &TensorType,
    f: &TensorType,
    b: &TensorType,
) -> Result<()> {
    let ok = match x.dtype {
        DType::F32 | DType::F16 => f.dtype == x.dtype && b.dtype == x.dtype,
        DType::U8 => matches!(f.dtype, DType::U8 | DType::I8) && b.dtype == DType::I32,
        DType::I8 => f.dtype == DType::I8 && b.dtype == DType::I32,
        d => return Err(KernelError::UnsupportedDType { op, dtype: d }),
    };
    if !ok {
        return Err(bad_shape(
            op,
            format!(
                "input {:?}, filter {:?}, bias {:?} do not go together",
                x.dtype, f.dtype, b.dtype
            ),
        ));
    }
    if f.dtype == DType::I8 && x.dtype == DType::U8 && f.quant.per_channel.is_none() {
        return Err(bad_shape(
            op,
            "an int8 filter of a uint8 input must be per-channel",
        ));
    }
    Ok(())
}

/// The output stage of a quantised convolution, derived from the tensors' quantisation:
/// zero points, one or per-channel output multipliers and shifts (NNAPI's
/// `QuantizeMultiplier` of `input_scale * filter_scale / output_scale`) and the clamp range
/// of the fused activation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QStage {
    in_zp: i32,
    filter_zp: i32,
    out_zp: i32,
    multipliers: Vec<i32>,
    shifts: Vec<i32>,
    per_channel: bool,
    act_min: i32,
    act_max: i32,
    /// A fused requantisation after the stage.
    epilogue: Option<Epilogue>,
}

impl QStage {
    /// Validates the quantisation of input `x`, filter `f` (per-channel along `axis` with
    /// `channels` entries, or per-tensor), bias `b` and output `out`, and derives the stage.
    pub(crate) fn new(
        op: &'static str,
        act: Activation,
        [x, f, b, out]: [&TensorType; 4],
        channels: usize,
        axis: u32,
    ) -> Result<QStage> {
        if out.dtype != x.dtype {
            return Err(KernelError::DType {
                expected: x.dtype,
                got: out.dtype,
            });
        }
        let (qmin, qmax) = x
            .dtype
            .int_range()
            .ok_or(KernelError::UnsupportedDType { op, dtype: x.dtype })?;
        for (what, t) in [("input", x), ("filter", f), ("output", out)] {
            if !(t.quant.scale.is_finite() && t.quant.scale > 0.0) && t.quant.per_channel.is_none()
            {
                return Err(bad_shape(op, format!("{what} scale must be positive")));
            }
        }
        let (multipliers, shifts, per_channel, filter_zp) = match &f.quant.per_channel {
            Some(pc) => {
                if pc.axis != axis || pc.scales.len() != channels {
                    return Err(bad_shape(
                        op,
                        format!("per-channel filter must have {channels} scales along axis {axis}"),
                    ));
                }
                let (m, s) = per_channel_multipliers(x.quant.scale, &pc.scales, out.quant.scale)
                    .map_err(qerr(op))?;
                (m, s, true, 0)
            }
            None => {
                let (m, s) = per_tensor_multiplier(
                    x.quant.scale,
                    f.quant.scale,
                    b.quant.scale,
                    out.quant.scale,
                )
                .map_err(qerr(op))?;
                (vec![m], vec![s], false, f.quant.zero_point)
            }
        };
        let (act_min, act_max) = quantized_activation_range(
            act as u32,
            out.quant.scale,
            out.quant.zero_point,
            qmin,
            qmax,
        );
        Ok(QStage {
            in_zp: x.quant.zero_point,
            filter_zp,
            out_zp: out.quant.zero_point,
            multipliers,
            shifts,
            per_channel,
            act_min,
            act_max,
            epilogue: None,
        })
    }

    /// The stage as the integer cores take it.
    pub(crate) fn params(&self) -> QuantParams<'_> {
        fn pick(each: bool, v: &[i32]) -> PerChannel<'_> {
            match v {
                [one] if !each => PerChannel::Uniform(*one),
                _ => PerChannel::Each(v),
            }
        }
        QuantParams {
            input_zero_point: self.in_zp,
            filter_zero_point: PerChannel::Uniform(self.filter_zp),
            output_zero_point: self.out_zp,
            output_multiplier: pick(self.per_channel, &self.multipliers),
            output_shift: pick(self.per_channel, &self.shifts),
            act_min: self.act_min,
            act_max: self.act_max,
            epilogue: self.epilogue.as_ref(),
        }
    }
}

/// The cores of a convolution-family kernel (the float32 one and the generic integer
/// one), from which [`run_conv`] and [`check_conv_outputs`] make the kernel's `run` and
/// `check_outputs`.
/// The cost of a convolution computing, per output element, a dot product over the
/// filter dimensions `taps`.
pub(crate) fn conv_cost(outputs: &[Vec<usize>], taps: &[usize]) -> Cost {
    let out: u64 = outputs[0].iter().map(|&d| d as u64).product();
    let k: u64 = taps.iter().map(|&d| d as u64).product();
    Cost {
        macs: out.saturating_mul(k),
        elems: out,
    }
}

/// The operands of one run of a convolution core: input, filter, bias, output.
pub(crate) struct ConvArgs<'a, T = f32, F = f32, B = f32> {
    /// The input.
    pub(crate) x: Tensor<'a, T>,
    /// The filter (weights).
    pub(crate) f: Tensor<'a, F>,
    /// The bias, one per output channel.
    pub(crate) bias: &'a [B],
    /// The output.
    pub(crate) out: TensorMut<'a, T>,
}

/// The Kernel methods every convolution shares: three inputs, and `check_outputs` and
/// `run` from its [`ConvCore`].
macro_rules! conv_kernel_methods {
    () => {
        fn input_count(&self) -> std::ops::RangeInclusive<usize> {
            $crate::kernels::conv::ConvEpilogue::inputs(&$crate::kernels::conv::ConvCore::epilogue(
                self,
            ))
        }

        fn check_outputs(
            &self,
            inputs: &[&$crate::tensor::TensorType],
            outputs: &[&$crate::tensor::TensorType],
        ) -> $crate::kernels::Result<()> {
            $crate::kernels::conv::check_conv_outputs(self, inputs, outputs)
        }

        fn run(
            &self,
            inputs: &[$crate::tensor::View<'_>],
            outputs: &mut [$crate::tensor::ViewMut<'_>],
        ) -> $crate::kernels::Result<()> {
            $crate::kernels::conv::run_conv(self, inputs, outputs)
        }
    };
}
pub(crate) use conv_kernel_methods;

pub(crate) trait ConvCore: Kernel {
    /// The filter's axis of output channels (that of its per-channel quantisation).
    const CHANNEL_AXIS: usize;

    /// The fused activation.
    fn activation(&self) -> Activation;

    /// The fused requantisation, for the kernels that take one.
    fn epilogue(&self) -> Option<ConvEpilogue> {
        None
    }

    /// The float32 computation; shapes were validated by `output_shapes`.
    fn run_f32(&self, a: ConvArgs<'_>) -> Result<()>;

    /// The float32 computation with the filter pre-packed in GEMM panels
    /// ([`Layout::GemmPanels`]), for the kernels that take it.
    fn run_f32_packed(&self, a: ConvArgs<'_>) -> Result<()> {
        let _ = a;
        Err(bad_shape(self.name(), "a packed filter is not taken here"))
    }

    /// The quantised computation with a symmetric int8 filter pre-packed in integer GEMM
    /// panels ([`Layout::IntPanels`]; `a.f` holds the panel words under the filter's
    /// shape), for the kernels that take it.
    fn run_quant_packed<T: QuantElem + Default>(
        &self,
        stage: &QStage,
        a: ConvArgs<'_, T, i32, i32>,
    ) -> Result<()> {
        let _ = (stage, a);
        Err(bad_shape(self.name(), "a packed filter is not taken here"))
    }

    /// The quantised computation with output stage `stage` (NNAPI reference rounding).
    fn run_quant<T: QuantElem + Default, F: QuantElem>(
        &self,
        stage: &QStage,
        a: ConvArgs<'_, T, F, i32>,
    ) -> Result<()>;

    /// The output stage of quantised input, filter, bias and output types.
    fn stage(&self, [x, f, b, out]: [&TensorType; 4]) -> Result<QStage> {
        let channels = f.shape.get(Self::CHANNEL_AXIS).copied().unwrap_or(0);
        QStage::new(
            self.name(),
            self.activation(),
            [x, f, b, out],
            channels,
            Self::CHANNEL_AXIS as u32,
        )
    }
}

/// `Kernel::check_outputs` of a convolution: the float default, or a valid output stage.
pub(crate) fn check_conv_outputs<K: ConvCore>(
    k: &K,
    inputs: &[&TensorType],
    outputs: &[&TensorType],
) -> Result<()> {
    if inputs[0].dtype.is_float() {
        if k.epilogue().is_some() {
            return Err(bad_shape(
                k.name(),
                "a fused requantisation of float tensors",
            ));
        }
        return default_check(inputs, outputs);
    }
    conv_stage(k, inputs, outputs[0], &[]).map(|_| ())
}

thread_local! {
    /// The convolutions' output stages built on this thread ([`conv_stage`]).
    static STAGES: Memo<QStage> = RefCell::default();
}

/// Appends the words of a tensor type's element type, shape and quantisation.
fn type_key(t: &TensorType, w: &mut Vec<u32>) {
    let q = &t.quant;
    w.extend([t.dtype as u32, t.layout as u32, t.shape.len() as u32]);
    w.extend(t.shape.iter().map(|&d| d as u32));
    w.extend([q.scale.to_bits(), q.zero_point as u32]);
    if let Some(pc) = &q.per_channel {
        w.extend([pc.axis, pc.scales.len() as u32]);
        // The scales' bits, copied whole (a loop per word cost more than the lookup).
        w.extend_from_slice(bytemuck::cast_slice(&pc.scales));
    }
}

/// The output stage of a quantised convolution with inputs `inputs` and output `out`,
/// its fused requantisation included (with the slope's values `slope`, or 1 for a check),
/// built once per thread for the same types and slope ([`memoised`]).
fn conv_stage<K: ConvCore>(
    k: &K,
    inputs: &[&TensorType],
    out: &TensorType,
    slope: &[f32],
) -> Result<Rc<QStage>> {
    let key = |key: &mut Vec<u32>| {
        key.extend([K::CHANNEL_AXIS as u32, k.activation() as u32]);
        ConvEpilogue::encode(&k.epilogue(), key);
        for t in inputs.iter().copied().chain([out]) {
            type_key(t, key);
        }
        key.extend_from_slice(bytemuck::cast_slice(slope));
    };
    memoised(&STAGES, key, || build_stage(k, inputs, out, slope))
}

/// [`conv_stage`], built.
fn build_stage<K: ConvCore>(
    k: &K,
    inputs: &[&TensorType],
    out: &TensorType,
    slope: &[f32],
) -> Result<QStage> {
    let Some(e) = k.epilogue() else {
        return k.stage([inputs[0], inputs[1], inputs[2], out]);
    };
    let mid = TensorType {
        quant: Quant {
            scale: e.scale,
            zero_point: e.zero_point,
            per_channel: None,
        },
        ..out.clone()
    };
    mid.validate_quant()
        .map_err(|r| bad_shape(k.name(), format!("intermediate: {r}")))?;
    let mut stage = k.stage([inputs[0], inputs[1], inputs[2], &mid])?;
    let channels = inputs[1].shape.get(K::CHANNEL_AXIS).copied().unwrap_or(0);
    let slope = (inputs.get(3).copied(), slope);
    stage.epilogue = Some(e.stage(k.name(), (&mid, out), slope, channels)?);
    Ok(stage)
}

/// `Kernel::run` of a convolution: the integer core for each quantised (input, filter)
/// pair, the float32 core for float32 and (widened) float16.
pub(crate) fn run_conv<K: ConvCore>(
    k: &K,
    inputs: &[View<'_>],
    outputs: &mut [ViewMut<'_>],
) -> Result<()> {
    fn quant<K: ConvCore, T: QuantElem + Default, F: QuantElem>(
        k: &K,
        inputs: &[View<'_>],
        out_ty: &TensorType,
        (x, f): (&[T], &[F]),
        out: &mut [T],
    ) -> Result<()> {
        let stage = run_stage(k, inputs, out_ty)?;
        let x = Tensor {
            shape: inputs[0].shape(),
            data: x,
        };
        let f = Tensor {
            shape: inputs[1].shape(),
            data: f,
        };
        let out = TensorMut {
            shape: &out_ty.shape,
            data: out,
        };
        let bias = inputs[2].i32s()?;
        k.run_quant(&stage, ConvArgs { x, f, bias, out })
    }
    /// [`ConvCore::run_quant_packed`] on the views, the panel words read from the
    /// filter's bytes (copied only if they are not 4-byte aligned).
    fn quant_packed<K: ConvCore, T: QuantElem + Default>(
        k: &K,
        inputs: &[View<'_>],
        out_ty: &TensorType,
        x: &[T],
        out: &mut [T],
    ) -> Result<()> {
        let stage = run_stage(k, inputs, out_ty)?;
        let own: Vec<i32>;
        let words: &[i32] = match bytemuck::try_cast_slice(inputs[1].bytes) {
            Ok(w) => w,
            Err(_) => {
                own = inputs[1]
                    .bytes
                    .chunks_exact(4)
                    .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                &own
            }
        };
        let args = ConvArgs {
            x: Tensor {
                shape: inputs[0].shape(),
                data: x,
            },
            f: Tensor {
                shape: inputs[1].shape(),
                data: words,
            },
            bias: inputs[2].i32s()?,
            out: TensorMut {
                shape: &out_ty.shape,
                data: out,
            },
        };
        k.run_quant_packed(&stage, args)
    }
    /// The stage of the views, the slope's values read.
    fn run_stage<K: ConvCore>(
        k: &K,
        inputs: &[View<'_>],
        out_ty: &TensorType,
    ) -> Result<Rc<QStage>> {
        // On the stack: a convolution has at most four inputs.
        let tys: smallvec::SmallVec<[&TensorType; 4]> = inputs.iter().map(|v| v.ty).collect();
        let slope = match inputs.get(3) {
            Some(a) => a.f32s()?,
            None => &[],
        };
        conv_stage(k, &tys, out_ty, slope)
    }
    let ty = outputs[0].ty;
    if k.epilogue().is_some() && inputs[0].ty.dtype.is_float() {
        return Err(bad_shape(
            k.name(),
            "a fused requantisation of float tensors",
        ));
    }
    if inputs[1].ty.layout == Layout::IntPanels {
        let ok = inputs[0].ty.layout == Layout::Plain
            && inputs[2].ty.layout == Layout::Plain
            && inputs[1].ty.dtype == DType::I8
            && inputs[1].ty.quant.zero_point == 0
            && Layout::IntPanels.byte_len(DType::I8, inputs[1].shape())
                == Some(inputs[1].bytes.len() as u64);
        if !ok || !cfg!(target_endian = "little") {
            return Err(bad_shape(
                k.name(),
                "packed int8 filter of the wrong type or size",
            ));
        }
        return match inputs[0].ty.dtype {
            DType::U8 => quant_packed(k, inputs, ty, inputs[0].u8s()?, outputs[0].u8s_mut()?),
            DType::I8 => quant_packed(k, inputs, ty, inputs[0].i8s()?, outputs[0].i8s_mut()?),
            d => Err(KernelError::UnsupportedDType {
                op: k.name(),
                dtype: d,
            }),
        };
    }
    if inputs.iter().any(|v| v.ty.layout != Layout::Plain) {
        let packed_f32 = inputs[1].ty.layout == Layout::GemmPanels
            && [&inputs[0], &inputs[2]]
                .iter()
                .all(|v| v.ty.layout == Layout::Plain)
            && [&inputs[0], &inputs[1], &inputs[2]]
                .iter()
                .all(|v| v.ty.dtype == DType::F32);
        if !packed_f32 {
            return Err(bad_shape(k.name(), "only a float32 filter may come packed"));
        }
        let need = Layout::GemmPanels.byte_len(DType::F32, inputs[1].shape());
        if need != Some(inputs[1].bytes.len() as u64) {
            return Err(bad_shape(k.name(), "packed filter of the wrong size"));
        }
        let x = Tensor::f32(&inputs[0])?;
        let f = Tensor::f32(&inputs[1])?;
        let b = Tensor::f32(&inputs[2])?;
        let out = TensorMut::f32(&mut outputs[0])?;
        return k.run_f32_packed(ConvArgs {
            x,
            f,
            bias: b.data,
            out,
        });
    }
    match (inputs[0].ty.dtype, inputs[1].ty.dtype) {
        (DType::U8, DType::U8) => {
            let xf = (inputs[0].u8s()?, inputs[1].u8s()?);
            quant(k, inputs, ty, xf, outputs[0].u8s_mut()?)
        }
        (DType::U8, DType::I8) => {
            let xf = (inputs[0].u8s()?, inputs[1].i8s()?);
            quant(k, inputs, ty, xf, outputs[0].u8s_mut()?)
        }
        (DType::I8, DType::I8) => {
            let xf = (inputs[0].i8s()?, inputs[1].i8s()?);
            quant(k, inputs, ty, xf, outputs[0].i8s_mut()?)
        }
        _ => widen_f16(inputs, outputs, |ins, outs| {
            let (x, f, b) = (
                Tensor::f32(&ins[0])?,
                Tensor::f32(&ins[1])?,
                Tensor::f32(&ins[2])?,
            );
            let out = TensorMut::f32(&mut outs[0])?;
            k.run_f32(ConvArgs {
                x,
                f,
                bias: b.data,
                out,
            })
        }),
    }
}

/// Helpers of the convolution tests: running a kernel on typed tensors.
#[cfg(test)]
pub(crate) mod testutil {
    use crate::kernels::{KernelOp, Result};
    use crate::tensor::{Staged, TensorType, View, ViewMut};

    /// Runs `op` on typed inputs given as raw bytes; the output has type `out` with the
    /// shape `output_shapes` returns. Returns the output's bytes.
    pub(crate) fn run_typed(
        op: &KernelOp,
        ins: &[(TensorType, Vec<u8>)],
        mut out: TensorType,
    ) -> Result<Vec<u8>> {
        let tys: Vec<&TensorType> = ins.iter().map(|(t, _)| t).collect();
        let shapes = op.output_shapes(&tys)?;
        out.shape = shapes[0].clone();
        let bufs: Vec<Staged> = ins
            .iter()
            .map(|(_, b)| {
                let mut s = Staged::zeroed(b.len());
                s.bytes_mut().copy_from_slice(b);
                s
            })
            .collect();
        let mut ob = Staged::zeroed(out.numel() * out.dtype.size() as usize);
        // As the engine does, an output the kernel says it overwrites comes uncleared
        // (garbage here): every test through here then checks that it is.
        if op.overwrites_outputs_of(out.dtype) {
            ob.bytes_mut().fill(0xA5);
        }
        let views: Vec<View<'_>> = ins
            .iter()
            .zip(&bufs)
            .map(|((ty, _), b)| View {
                ty,
                bytes: b.bytes(),
            })
            .collect();
        let mut outs = [ViewMut {
            ty: &out,
            bytes: ob.bytes_mut(),
        }];
        crate::kernels::execute(op, &views, &mut outs)?;
        Ok(ob.bytes().to_vec())
    }

    /// Runs the float32 convolution `op` on NHWC input `x` of shape `xs` (given to the
    /// kernel in NCHW when `nchw`), filter `f` of shape `fs` and `bias`; returns the output.
    pub(crate) fn run_conv_f32(
        op: &KernelOp,
        nchw: bool,
        (xs, x): ([usize; 4], &[f32]),
        (fs, f): (&[usize], &[f32]),
        bias: &[f32],
    ) -> Vec<f32> {
        use crate::kernels::conv::testref::{in_layout, to_nchw};
        use crate::tensor::DType;
        let xin = if nchw { to_nchw(x, xs) } else { x.to_vec() };
        let ins = [
            (in_layout(xs, nchw), xin),
            (fs.to_vec(), f.to_vec()),
            (vec![bias.len()], bias.to_vec()),
        ]
        .map(|(shape, v)| {
            let ty = TensorType::new(DType::F32, &shape);
            (ty, bytemuck::cast_slice(&v).to_vec())
        });
        let got = run_typed(op, &ins, TensorType::new(DType::F32, &[])).unwrap();
        got.chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    /// `n` deterministic pseudo-random floats in [-1, 1] for `seed`.
    pub(crate) fn floats(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let v = (i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8;
                (v % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// A deterministic pseudo-random integer in `[lo, hi]` for index `i` and `seed`.
    pub(crate) fn pick(i: usize, seed: u32, lo: i32, hi: i32) -> i32 {
        let h = (i as u32)
            .wrapping_mul(2654435761)
            .wrapping_add(seed)
            .rotate_left(13)
            .wrapping_mul(0x9e37_79b9);
        lo + ((h >> 8) % ((hi - lo + 1) as u32)) as i32
    }
}

/// Shared reference arithmetic of the convolution tests (f64, NHWC).
#[cfg(test)]
pub(crate) mod testref {
    use crate::kernels::Activation;
    use crate::tensor::{DType, TensorType};

    /// The activation in the real domain.
    pub(crate) fn act(a: Activation, v: f64) -> f64 {
        match a {
            Activation::None => v,
            Activation::Relu => v.max(0.0),
            Activation::Relu1 => v.clamp(-1.0, 1.0),
            Activation::Relu6 => v.clamp(0.0, 6.0),
        }
    }

    /// NHWC `[n,h,w,c]` to NCHW.
    pub(crate) fn to_nchw<T: Copy>(v: &[T], [n, h, w, c]: [usize; 4]) -> Vec<T> {
        let mut out = Vec::with_capacity(v.len());
        for b in 0..n {
            for ch in 0..c {
                for p in 0..h * w {
                    out.push(v[(b * h * w + p) * c + ch]);
                }
            }
        }
        out
    }

    /// NHWC dimensions `[n,h,w,c]` as a shape in the given layout.
    pub(crate) fn in_layout([n, h, w, c]: [usize; 4], nchw: bool) -> Vec<usize> {
        crate::kernels::layout::layout_shape(n, h, w, c, nchw)
    }

    /// Quantises `v` with (scale, zp) into `[lo, hi]`.
    pub(crate) fn quantize(v: f64, scale: f64, zp: i32, lo: i32, hi: i32) -> i32 {
        ((v / scale).round() as i64 + i64::from(zp)).clamp(i64::from(lo), i64::from(hi)) as i32
    }

    /// A shape of rank 1 to 3 with dimensions 1 to 3 (at most 27 elements).
    pub(crate) fn small_shape() -> impl proptest::strategy::Strategy<Value = Vec<usize>> {
        proptest::collection::vec(1usize..4, 1..4)
    }

    /// An 8-bit quantised test type: uint8 or int8 with a scale and a zero point.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Q8 {
        /// int8 (else uint8).
        pub(crate) signed: bool,
        /// The scale.
        pub(crate) scale: f32,
        /// The zero point, in the type's range.
        pub(crate) zp: i32,
    }

    impl Q8 {
        /// Any u8 / i8 type with a scale in `[0.01, 2)`.
        pub(crate) fn arb() -> impl proptest::strategy::Strategy<Value = Q8> {
            use proptest::prelude::*;
            (any::<bool>(), 0.01f32..2.0, 0i32..256).prop_map(|(signed, scale, z)| Q8 {
                signed,
                scale,
                zp: z + if signed { -128 } else { 0 },
            })
        }

        /// The type's smallest value (its largest is 255 above).
        pub(crate) fn lo(&self) -> i32 {
            if self.signed {
                -128
            } else {
                0
            }
        }

        /// The tensor type of `shape`.
        pub(crate) fn ty(&self, shape: &[usize]) -> TensorType {
            let dt = if self.signed { DType::I8 } else { DType::U8 };
            TensorType::quantized(dt, shape, self.scale, self.zp)
        }

        /// Values `0..256` moved into the type's range, and their stored bytes.
        pub(crate) fn store(&self, raw: &[i32]) -> (Vec<i32>, Vec<u8>) {
            let vals: Vec<i32> = raw.iter().map(|&v| v + self.lo()).collect();
            let bytes = vals.iter().map(|&v| v as u8).collect();
            (vals, bytes)
        }

        /// Stored bytes read back as values.
        pub(crate) fn load(&self, bytes: &[u8]) -> Vec<i32> {
            bytes
                .iter()
                .map(|&b| {
                    if self.signed {
                        i32::from(b as i8)
                    } else {
                        i32::from(b)
                    }
                })
                .collect()
        }

        /// The real value of stored `q`.
        pub(crate) fn real(&self, q: i32) -> f64 {
            f64::from(self.scale) * f64::from(q - self.zp)
        }

        /// `v` quantised to this type, rounded and clamped.
        pub(crate) fn quantize(&self, v: f64) -> i32 {
            quantize(
                v,
                f64::from(self.scale),
                self.zp,
                self.lo(),
                self.lo() + 255,
            )
        }
    }
}

/// Float32 CONV_2D and FULLY_CONNECTED with the filter pre-packed in GEMM panels give
/// bit-identical results to the plain filter.
#[cfg(test)]
mod packed_tests {
    use super::testutil::run_typed;
    use crate::kernels::{Activation, Conv2d, ConvWindow, FullyConnected, KernelOp, Padding};
    use crate::program::pack_panels;
    use crate::tensor::{DType, Layout, TensorType};
    use proptest::prelude::*;

    fn floats(n: usize, seed: u32) -> Vec<u8> {
        super::testutil::floats(n, seed)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    /// The op's output with the filter plain and packed.
    fn both(op: KernelOp, x: (&[usize], u32), f: &[usize], seed: u32) -> (Vec<u8>, Vec<u8>) {
        let o = f[0];
        let ty = |s: &[usize]| TensorType::new(DType::F32, s);
        let fb = floats(f.iter().product(), seed ^ 7);
        let ins = |filter: (TensorType, Vec<u8>)| {
            vec![
                (ty(x.0), floats(x.0.iter().product(), x.1)),
                filter,
                (ty(&[o]), floats(o, seed ^ 9)),
            ]
        };
        let plain = run_typed(&op, &ins((ty(f), fb.clone())), ty(&[])).unwrap();
        let packed_ty = TensorType {
            layout: Layout::GemmPanels,
            ..ty(f)
        };
        let packed = pack_panels(f, &fb).unwrap();
        let got = run_typed(&op, &ins((packed_ty, packed)), ty(&[])).unwrap();
        (plain, got)
    }

    proptest! {
        #[test]
        fn conv2d_packed_is_bit_identical(
            (n, h, w, c, o, k) in (1usize..3, 1usize..9, 1usize..9, 1usize..20, 1usize..40, 1usize..4),
            (pad, stride) in (0u32..2, 1u32..3),
            nchw in any::<bool>(),
            seed in any::<u32>(),
        ) {
            prop_assume!(h + 2 * pad as usize >= k && w + 2 * pad as usize >= k);
            let op = Conv2d {
                window: ConvWindow {
                    pad: Padding { left: pad, right: pad, top: pad, bottom: pad },
                    stride_w: stride, stride_h: stride, dilation_w: 1, dilation_h: 1,
                },
                act: Activation::Relu6,
                nchw,
                epilogue: None,
            };
            let xs = if nchw { [n, c, h, w] } else { [n, h, w, c] };
            let (plain, packed) = both(op.into(), (&xs, seed), &[o, k, k, c], seed);
            prop_assert_eq!(plain, packed);
        }

        #[test]
        fn fully_connected_packed_is_bit_identical(
            (b, k, units) in (1usize..5, 1usize..300, 1usize..40),
            seed in any::<u32>(),
        ) {
            let op = FullyConnected { act: Activation::None };
            let (plain, packed) = both(op.into(), (&[b, k], seed), &[units, k], seed);
            prop_assert_eq!(plain, packed);
        }
    }

    #[test]
    fn a_packed_filter_of_the_wrong_size_or_kind_is_refused() {
        let ty = |s: &[usize]| TensorType::new(DType::F32, s);
        let packed = TensorType {
            layout: Layout::GemmPanels,
            ..ty(&[3, 4])
        };
        let fc = KernelOp::from(FullyConnected {
            act: Activation::None,
        });
        let ins = |f: Vec<u8>| {
            vec![
                (ty(&[1, 4]), floats(4, 1)),
                (packed.clone(), f),
                (ty(&[3]), floats(3, 2)),
            ]
        };
        assert!(
            run_typed(&fc, &ins(floats(12, 3)), ty(&[])).is_err(),
            "plain-sized"
        );
        assert!(run_typed(&fc, &ins(floats(64, 3)), ty(&[])).is_ok());
    }
}

/// Quantised CONV_2D with its symmetric int8 filter pre-packed in integer GEMM panels
/// ([`Layout::IntPanels`]) gives the bits of the plain filter.
#[cfg(test)]
mod int_packed_tests {
    use super::testutil::{pick, run_typed};
    use crate::kernels::{Activation, Conv2d, ConvWindow, KernelOp, Padding};
    use crate::program::{pack_int_panels, unpack_int_panels};
    use crate::tensor::{DType, Layout, PerChannel, TensorType};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn conv2d_int_packed_is_bit_identical(
            (n, h, w, c, o, k) in (1usize..3, 1usize..8, 1usize..8, 1usize..20, 1usize..40, 1usize..4),
            (pad, stride) in (0u32..2, 1u32..3),
            nchw in any::<bool>(),
            unsigned in any::<bool>(),
            per_channel in any::<bool>(),
            seed in any::<u32>(),
            zp_at in 0i32..256,
        ) {
            prop_assume!(h + 2 * pad as usize >= k && w + 2 * pad as usize >= k);
            let op = KernelOp::from(Conv2d {
                window: ConvWindow {
                    pad: Padding { left: pad, right: pad, top: pad, bottom: pad },
                    stride_w: stride, stride_h: stride, dilation_w: 1, dilation_h: 1,
                },
                act: Activation::Relu6,
                nchw,
                epilogue: None,
            });
            // uint8 input needs a per-channel int8 filter; int8 takes either.
            let per_channel = per_channel || unsigned;
            // The input zero point anywhere in its type (padding reads its byte).
            let (dt, zp, lo, hi) = if unsigned {
                (DType::U8, zp_at, 0, 255)
            } else {
                (DType::I8, zp_at - 128, -128, 127)
            };
            let xs = if nchw { [n, c, h, w] } else { [n, h, w, c] };
            let xn: usize = xs.iter().product();
            let x: Vec<u8> = (0..xn).map(|i| pick(i, seed, lo, hi) as u8).collect();
            let fs = [o, k, k, c];
            let fb: Vec<u8> = (0..fs.iter().product::<usize>())
                .map(|i| pick(i, seed ^ 3, -128, 127) as i8 as u8)
                .collect();
            let mut fty = TensorType::quantized(DType::I8, &fs, 0.01, 0);
            if per_channel {
                fty.quant.scale = 0.0;
                fty.quant.per_channel = Some(PerChannel {
                    axis: 0,
                    scales: (0..o).map(|j| 0.002 + 0.001 * j as f32).collect(),
                });
            }
            let bias: Vec<u8> = (0..o)
                .flat_map(|j| pick(j, seed ^ 5, -3000, 3000).to_le_bytes())
                .collect();
            let bias_ty = |f: &TensorType| {
                let s = if per_channel { 0.0 } else { 0.25 * f.quant.scale };
                let mut b = TensorType::quantized(DType::I32, &[o], s, 0);
                if per_channel {
                    b.quant.per_channel = None;
                }
                b
            };
            let out = TensorType::quantized(dt, &[], 0.5, (zp + 2).min(hi));
            let ins = |f: (TensorType, Vec<u8>)| vec![
                (TensorType::quantized(dt, &xs, 0.25, zp), x.clone()),
                (f.0.clone(), f.1),
                (bias_ty(&f.0), bias.clone()),
            ];
            let plain = run_typed(&op, &ins((fty.clone(), fb.clone())), out.clone()).unwrap();
            let packed = pack_int_panels(&fs, &fb).unwrap();
            prop_assert_eq!(unpack_int_panels(&fs, &packed), Some(fb.clone()));
            let pty = TensorType { layout: Layout::IntPanels, ..fty.clone() };
            let got = run_typed(&op, &ins((pty.clone(), packed.clone())), out.clone()).unwrap();
            prop_assert_eq!(plain, got);
            // Panels of the wrong size are refused.
            prop_assert!(run_typed(&op, &ins((pty, fb)), out).is_err());
        }
    }
}

/// The quantised CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED kernels (wiring of the
/// integer cores: quantisation from the tensor types, NCHW) against a dequantise -> f64 ->
/// requantise reference, within 1.
#[cfg(test)]
mod quant_tests {
    use super::testref::{act, quantize, to_nchw};
    use super::testutil::{pick, run_typed};
    use crate::kernels::{
        Activation, Conv2d, ConvWindow, DepthwiseConv2d, FullyConnected, KernelOp, Padding,
    };
    use crate::tensor::{DType, PerChannel, Quant, TensorType};
    use proptest::prelude::*;

    /// A quantised operand: its type, bytes and real values.
    struct Q {
        ty: TensorType,
        bytes: Vec<u8>,
        real: Vec<f64>,
    }

    /// An activation-like tensor of `dtype` (U8 or I8).
    fn act_tensor(dtype: DType, shape: &[usize], seed: u32) -> Q {
        let n: usize = shape.iter().product();
        let (scale, zp) = (0.25f32, if dtype == DType::U8 { 131 } else { -5 });
        let (lo, hi) = dtype.int_range().unwrap();
        let q: Vec<i32> = (0..n).map(|i| pick(i, seed, lo, hi)).collect();
        Q {
            ty: TensorType::quantized(dtype, shape, scale, zp),
            bytes: q.iter().map(|&v| v as u8).collect(),
            real: q
                .iter()
                .map(|&v| f64::from(scale) * f64::from(v - zp))
                .collect(),
        }
    }

    /// A filter of `dtype` with `o` output channels along `axis`, per-channel when asked
    /// (int8 symmetric), plus the scale of each output channel.
    fn filter(
        dtype: DType,
        shape: &[usize],
        axis: usize,
        per_channel: bool,
        seed: u32,
    ) -> (Q, Vec<f32>) {
        let n: usize = shape.iter().product();
        let o = shape[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        let scales: Vec<f32> = (0..o)
            .map(|k| {
                if per_channel {
                    0.005 * (k + 1) as f32
                } else {
                    0.01
                }
            })
            .collect();
        let zp = if per_channel || dtype == DType::I8 {
            0
        } else {
            128
        };
        let (lo, hi) = if per_channel {
            (-127, 127)
        } else {
            dtype.int_range().unwrap()
        };
        let q: Vec<i32> = (0..n).map(|i| pick(i + 5000, seed, lo, hi)).collect();
        let mut ty = TensorType::quantized(dtype, shape, 0.01, zp);
        if per_channel {
            ty.quant = Quant {
                scale: 0.0,
                zero_point: 0,
                per_channel: Some(PerChannel {
                    axis: axis as u32,
                    scales: scales.clone(),
                }),
            };
        }
        let real = q
            .iter()
            .enumerate()
            .map(|(i, &v)| f64::from(scales[(i / inner) % o]) * f64::from(v - zp))
            .collect();
        (
            Q {
                ty,
                bytes: q.iter().map(|&v| v as u8).collect(),
                real,
            },
            scales,
        )
    }

    fn bias(o: usize, in_scale: f32, scales: &[f32], per_channel: bool, seed: u32) -> Q {
        let q: Vec<i32> = (0..o).map(|i| pick(i + 9000, seed, -300, 300)).collect();
        Q {
            ty: TensorType::quantized(
                DType::I32,
                &[o],
                if per_channel { 0.0 } else { in_scale * 0.01 },
                0,
            ),
            bytes: bytemuck::cast_slice(&q).to_vec(),
            real: q
                .iter()
                .enumerate()
                .map(|(k, &v)| f64::from(v) * f64::from(in_scale) * f64::from(scales[k]))
                .collect(),
        }
    }

    fn check(dtype: DType, got: &[u8], want: &[f64], a: Activation) -> Result<(), TestCaseError> {
        let (lo, hi) = dtype.int_range().unwrap();
        let (scale, zp) = (0.5, if dtype == DType::U8 { 100 } else { 3 });
        prop_assert_eq!(got.len(), want.len());
        for (&g, &w) in got.iter().zip(want) {
            let g = if dtype == DType::U8 {
                i32::from(g)
            } else {
                i32::from(g as i8)
            };
            let w = quantize(act(a, w), scale, zp, lo, hi);
            prop_assert!((g - w).abs() <= 1, "got {} want {}", g, w);
        }
        Ok(())
    }

    fn out_ty(dtype: DType) -> TensorType {
        TensorType::quantized(dtype, &[], 0.5, if dtype == DType::U8 { 100 } else { 3 })
    }

    fn arb_case() -> impl Strategy<Value = (DType, DType, bool)> {
        prop_oneof![
            Just((DType::U8, DType::U8, false)),
            Just((DType::U8, DType::I8, true)),
            Just((DType::I8, DType::I8, false)),
            Just((DType::I8, DType::I8, true)),
        ]
    }

    fn arb_act() -> impl Strategy<Value = Activation> {
        prop_oneof![
            Just(Activation::None),
            Just(Activation::Relu),
            Just(Activation::Relu1),
            Just(Activation::Relu6)
        ]
    }

    proptest! {
        #[test]
        fn conv2d_within_one(
            (xd, fd, pc) in arb_case(),
            (n, h, w, c, o, k) in (0usize..3, 1usize..6, 1usize..6, 1usize..4, 1usize..4, 1usize..4),
            (pad, stride, dil) in (0u32..2, 1u32..3, 1u32..3),
            a in arb_act(),
            nchw in any::<bool>(),
            seed in any::<u32>(),
        ) {
            prop_assume!(h + 2 * pad as usize > (k - 1) * dil as usize && w + 2 * pad as usize > (k - 1) * dil as usize);
            let x = act_tensor(xd, &[n, h, w, c], seed);
            let (f, scales) = filter(fd, &[o, k, k, c], 0, pc, seed);
            let b = bias(o, 0.25, &scales, pc, seed);
            let op = Conv2d {
                window: ConvWindow {
                    pad: Padding { left: pad, right: pad, top: pad, bottom: pad },
                    stride_w: stride, stride_h: stride, dilation_w: dil, dilation_h: dil,
                },
                act: a, nchw,
                epilogue: None,
            };
            // Plain reference.
            let (p, s, d) = (pad as i64, stride as usize, dil as usize);
            let oh = (h + 2 * pad as usize - (k - 1) * d - 1) / s + 1;
            let ow = (w + 2 * pad as usize - (k - 1) * d - 1) / s + 1;
            let mut want = Vec::new();
            for bi in 0..n { for oy in 0..oh { for ox in 0..ow { for oc in 0..o {
                let mut acc = b.real[oc];
                for i in 0..k { for j in 0..k {
                    let iy = (oy * s + i * d) as i64 - p;
                    let ix = (ox * s + j * d) as i64 - p;
                    if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 { continue; }
                    for ci in 0..c {
                        acc += x.real[((bi * h + iy as usize) * w + ix as usize) * c + ci]
                            * f.real[((oc * k + i) * k + j) * c + ci];
                    }
                }}
                want.push(acc);
            }}}}
            let (xt, xb, want) = if nchw {
                let mut t = x.ty.clone();
                t.shape = vec![n, c, h, w];
                (t, to_nchw(&x.bytes, [n, h, w, c]), to_nchw(&want, [n, oh, ow, o]))
            } else {
                (x.ty.clone(), x.bytes.clone(), want)
            };
            let got = run_typed(&KernelOp::from(op), &[(xt, xb), (f.ty, f.bytes), (b.ty, b.bytes)], out_ty(xd)).unwrap();
            check(xd, &got, &want, a)?;
        }

        #[test]
        fn depthwise_within_one(
            (xd, fd, pc) in arb_case(),
            (n, h, w, c, m, k) in (0usize..3, 1usize..6, 1usize..6, 1usize..4, 1usize..3, 1usize..4),
            (pad, stride) in (0u32..2, 1u32..3),
            a in arb_act(),
            nchw in any::<bool>(),
            seed in any::<u32>(),
        ) {
            prop_assume!(h + 2 * pad as usize >= k && w + 2 * pad as usize >= k);
            let oc_n = c * m;
            let x = act_tensor(xd, &[n, h, w, c], seed);
            let (f, scales) = filter(fd, &[1, k, k, oc_n], 3, pc, seed);
            let b = bias(oc_n, 0.25, &scales, pc, seed);
            let op = DepthwiseConv2d {
                window: ConvWindow {
                    pad: Padding { left: pad, right: pad, top: pad, bottom: pad },
                    stride_w: stride, stride_h: stride, dilation_w: 1, dilation_h: 1,
                },
                depth_multiplier: m as u32, act: a, nchw,
                epilogue: None,
            };
            let (p, s) = (pad as i64, stride as usize);
            let oh = (h + 2 * pad as usize - k) / s + 1;
            let ow = (w + 2 * pad as usize - k) / s + 1;
            let mut want = Vec::new();
            for bi in 0..n { for oy in 0..oh { for ox in 0..ow { for oc in 0..oc_n {
                let mut acc = b.real[oc];
                for i in 0..k { for j in 0..k {
                    let iy = (oy * s + i) as i64 - p;
                    let ix = (ox * s + j) as i64 - p;
                    if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 { continue; }
                    acc += x.real[((bi * h + iy as usize) * w + ix as usize) * c + oc / m]
                        * f.real[(i * k + j) * oc_n + oc];
                }}
                want.push(acc);
            }}}}
            let (xt, xb, want) = if nchw {
                let mut t = x.ty.clone();
                t.shape = vec![n, c, h, w];
                (t, to_nchw(&x.bytes, [n, h, w, c]), to_nchw(&want, [n, oh, ow, oc_n]))
            } else {
                (x.ty.clone(), x.bytes.clone(), want)
            };
            let got = run_typed(&KernelOp::from(op), &[(xt, xb), (f.ty, f.bytes), (b.ty, b.bytes)], out_ty(xd)).unwrap();
            check(xd, &got, &want, a)?;
        }

        #[test]
        fn fully_connected_within_one(
            xd in prop_oneof![Just(DType::U8), Just(DType::I8)],
            (batches, kk, units) in (0usize..4, 1usize..20, 1usize..6),
            a in arb_act(),
            seed in any::<u32>(),
        ) {
            let x = act_tensor(xd, &[batches, kk], seed);
            let (f, scales) = filter(xd, &[units, kk], 0, false, seed);
            let b = bias(units, 0.25, &scales, false, seed);
            let mut want = Vec::new();
            for bi in 0..batches { for u in 0..units {
                let mut acc = b.real[u];
                for i in 0..kk { acc += x.real[bi * kk + i] * f.real[u * kk + i]; }
                want.push(acc);
            }}
            let op = FullyConnected { act: a };
            let got = run_typed(&KernelOp::from(op), &[(x.ty, x.bytes), (f.ty, f.bytes), (b.ty, b.bytes)], out_ty(xd)).unwrap();
            check(xd, &got, &want, a)?;
        }
    }
}
