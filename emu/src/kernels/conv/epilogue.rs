//! The fused requantisation of a quantised convolution ([`ConvEpilogue`]): its
//! parameter words and its validation into the output stage's [`Epilogue`].

use crate::kernels::elementwise::quantize_simd::{PreluQuant, Quantizer};
use crate::kernels::elementwise::repeats_along_leading;
use crate::kernels::kernel::Words;
use crate::kernels::quant::quantized_activation_range;
use crate::kernels::requant::Epilogue;
use crate::kernels::{bad_shape, Activation, Result};
use crate::tensor::{DType, TensorType};

/// A REQUANTIZE (with its activation) or REQUANTIZE_PRELU that the compiler folded into
/// a quantised CONV_2D or DEPTHWISE_CONV_2D reading its output (`driver/src/compile/
/// fuse.rs`): the convolution's output stage produces the intermediate tensor's integers
/// (its clamp is the intermediate's) and [`Epilogue`] maps each to the fused op's result
/// before it is stored, so neither the intermediate nor the second pass exists. NHWC
/// only; the intermediate and the output are of the input's element type; a
/// REQUANTIZE_PRELU's slope (float32, one value or one per output channel) is the
/// convolution's fourth input.
///
/// Parameter words, after the convolution's own: kind (1 REQUANTIZE, 2
/// REQUANTIZE_PRELU), the REQUANTIZE's activation (0 for a PRELU), the intermediate's
/// scale (float32 bits, finite, > 0) and zero point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConvEpilogue {
    /// REQUANTIZE_PRELU (else REQUANTIZE).
    pub prelu: bool,
    /// The REQUANTIZE's fused activation (`None` for a PRELU).
    pub act: Activation,
    /// The intermediate tensor's scale.
    pub scale: f32,
    /// The intermediate tensor's zero point.
    pub zero_point: i32,
}

impl ConvEpilogue {
    /// The trailing epilogue words of a convolution of layout `nchw`, if any (untrusted).
    pub(crate) fn decode(w: &mut Words<'_>, nchw: bool) -> Result<Option<Self>> {
        if w.at_end() {
            return Ok(None);
        }
        let prelu = match w.u32("epilogue")? {
            1 => false,
            2 => true,
            k => return Err(w.err(format!("bad epilogue {k}"))),
        };
        let act = w.act()?;
        let scale = w.finite_f32("intermediate scale")?;
        let zero_point = w.i32("intermediate zero point")?;
        if nchw || (prelu && act != Activation::None) || scale <= 0.0 {
            return Err(w.err("an epilogue needs NHWC, a positive scale, no PRELU activation"));
        }
        Ok(Some(ConvEpilogue {
            prelu,
            act,
            scale,
            zero_point,
        }))
    }

    /// Appends the words [`ConvEpilogue::decode`] reads.
    pub(crate) fn encode(e: &Option<Self>, w: &mut Vec<u32>) {
        if let Some(e) = e {
            w.extend([
                1 + u32::from(e.prelu),
                e.act as u32,
                e.scale.to_bits(),
                e.zero_point as u32,
            ]);
        }
    }

    /// The inputs a convolution with epilogue `e` takes.
    pub(crate) fn inputs(e: &Option<Self>) -> std::ops::RangeInclusive<usize> {
        let n = 3 + e.map_or(0, |e| usize::from(e.prelu));
        n..=n
    }

    /// The output stage's [`Epilogue`] for output `out` of `channels` channels, the
    /// intermediate being `mid`, the slope `slope` (its values, or none for a check).
    pub(super) fn stage(
        &self,
        op: &'static str,
        (mid, out): (&TensorType, &TensorType),
        slope: (Option<&TensorType>, &[f32]),
        channels: usize,
    ) -> Result<Epilogue> {
        let bad = |r: &str| bad_shape(op, format!("fused requantisation: {r}"));
        let (Some(range), Some(mid_range)) = (out.dtype.int_range(), mid.dtype.int_range()) else {
            return Err(bad("not a quantised output"));
        };
        if out.dtype != mid.dtype || out.quant.per_channel.is_some() {
            return Err(bad("the output is of the input's type, per tensor"));
        }
        out.validate_quant().map_err(|e| bad(&e))?;
        if out.quant.scale <= 0.0 || out.quant.scale.is_nan() {
            return Err(bad("output scale must be > 0"));
        }
        match slope.0 {
            Some(a) if self.prelu => {
                let whole = a.numel() == 1 || a.numel() == channels;
                if a.dtype != DType::F32 || !whole || !repeats_along_leading(&a.shape, &out.shape) {
                    return Err(bad("the slope is float32, one value or one per channel"));
                }
            }
            None if !self.prelu => {}
            _ => return Err(bad("a slope with a PRELU only")),
        }
        let (lo, hi) = match self.act {
            Activation::None => range,
            act => {
                let q = &out.quant;
                let (lo, hi) =
                    quantized_activation_range(act as u32, q.scale, q.zero_point, range.0, range.1);
                (lo, hi.max(lo))
            }
        };
        let prelu = PreluQuant {
            in_scale: mid.quant.scale,
            in_zp: mid.quant.zero_point,
            out: Quantizer {
                scale: out.quant.scale,
                zp: out.quant.zero_point as f32,
                lo: range.0 as f32,
                hi: range.1 as f32,
            },
        };
        Ok(Epilogue::new(
            prelu,
            (mid_range, range),
            slope.1,
            channels,
            (lo, hi),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::conv::testutil::run_typed;
    use crate::kernels::{
        Conv2d, ConvWindow, Convert, ConvertKind, DepthwiseConv2d, KernelOp, Padding,
    };
    use crate::tensor::{PerChannel, Quant};
    use proptest::prelude::*;

    /// Slopes with the cases that matter: ordinary, zero, negative, huge, non-finite.
    fn slope() -> impl Strategy<Value = f32> {
        prop_oneof![
            4 => -2.0f32..2.0,
            1 => Just(0.0f32),
            1 => Just(-0.0f32),
            1 => Just(1e30f32),
            1 => Just(f32::NAN),
            1 => Just(f32::INFINITY),
            1 => any::<f32>(),
        ]
    }

    fn scale() -> impl Strategy<Value = f32> {
        prop_oneof![
            6 => 1e-3f32..2.0,
            1 => Just(1e-30f32),
            1 => Just(3e30f32),
            1 => Just(1.0f32),
        ]
    }

    fn act() -> impl Strategy<Value = Activation> {
        prop_oneof![
            Just(Activation::None),
            Just(Activation::Relu),
            Just(Activation::Relu1),
            Just(Activation::Relu6)
        ]
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(192))]
        /// A convolution with a fused REQUANTIZE or REQUANTIZE_PRELU writes the bytes of
        /// the convolution and the op run one after the other, over both convolution
        /// kinds, both element types, per-tensor and per-channel filters, every
        /// activation, any scales and zero points and any slopes (one or per channel).
        #[test]
        fn fused_requantisation_matches_the_two_ops(
            (signed, per_channel, depthwise) in (any::<bool>(), any::<bool>(), any::<bool>()),
            (n, h, w, c, o, k) in (1usize..3, 1usize..6, 1usize..6, 1usize..5, 1usize..21, 1usize..4),
            (in_scale, mid_scale, out_scale) in (scale(), scale(), scale()),
            (in_zp, mid_zp, out_zp) in (0i32..256, 0i32..256, 0i32..256),
            (conv_act, requant_act) in (act(), act()),
            prelu in any::<bool>(),
            slopes in proptest::collection::vec(slope(), 21),
            one_slope in any::<bool>(),
            bytes in proptest::collection::vec(any::<u8>(), 600),
        ) {
            let dtype = if signed { DType::I8 } else { DType::U8 };
            let shift = if signed { 128 } else { 0 };
            // A uint8 input takes an int8 filter only per channel.
            let fdtype = if per_channel || signed { DType::I8 } else { DType::U8 };
            let o = if depthwise { c } else { o };
            let fshape = if depthwise { vec![1, k, k, o] } else { vec![o, k, k, c] };
            let axis = if depthwise { 3 } else { 0 };
            let mut fty = TensorType::quantized(fdtype, &fshape, 0.02, if fdtype == DType::U8 { 131 } else { 0 });
            if per_channel {
                fty.quant = Quant {
                    scale: 0.0,
                    zero_point: 0,
                    per_channel: Some(PerChannel {
                        axis,
                        scales: (0..o).map(|i| 0.003 * (i + 1) as f32).collect(),
                    }),
                };
            }
            let take = |len: usize, from: usize| -> Vec<u8> {
                (0..len).map(|i| bytes[(from + i * 7) % bytes.len()]).collect()
            };
            let xty = TensorType::quantized(dtype, &[n, h, w, c], in_scale, in_zp - shift);
            let x = take(n * h * w * c, 0);
            let mut f = take(fshape.iter().product(), 11);
            if per_channel {
                // Symmetric int8: no -128.
                f.iter_mut().for_each(|b| if *b == 0x80 { *b = 0x81 });
            }
            let bias: Vec<i32> = (0..o).map(|i| i32::from(bytes[i * 13 % bytes.len()]) * 37 - 4000).collect();
            let bias_scale = if per_channel { 0.0 } else { in_scale * 0.02 };
            let bty = TensorType::quantized(DType::I32, &[o], bias_scale, 0);
            let slope_shape = if one_slope { vec![1] } else { vec![1, 1, o] };
            let slope: Vec<f32> = slopes[..slope_shape.iter().product()].to_vec();
            let aty = TensorType::new(DType::F32, &slope_shape);
            let abytes: Vec<u8> = slope.iter().flat_map(|v| v.to_le_bytes()).collect();
            let window = ConvWindow {
                pad: Padding { left: 1, right: 0, top: 0, bottom: 1 },
                stride_w: 1, stride_h: 2, dilation_w: 1, dilation_h: 1,
            };
            let conv = |epilogue: Option<ConvEpilogue>| -> KernelOp {
                if depthwise {
                    KernelOp::from(DepthwiseConv2d { window, depth_multiplier: 1, act: conv_act, nchw: false, epilogue })
                } else {
                    KernelOp::from(Conv2d { window, act: conv_act, nchw: false, epilogue })
                }
            };
            let mid = TensorType::quantized(dtype, &[], mid_scale, mid_zp - shift);
            let out = TensorType::quantized(dtype, &[], out_scale, out_zp - shift);
            let ins = [(xty, x), (fty, f), (bty, bytemuck::cast_slice(&bias).to_vec())];
            // The two ops.
            let Ok(first) = run_typed(&conv(None), &ins, mid.clone()) else {
                // An output stage out of range (a huge scale ratio) fails fused too.
                let e = ConvEpilogue { prelu, act: if prelu { Activation::None } else { requant_act }, scale: mid_scale, zero_point: mid_zp - shift };
                let mut fused_ins = ins.to_vec();
                if prelu { fused_ins.push((aty, abytes)); }
                prop_assert!(run_typed(&conv(Some(e)), &fused_ins, out).is_err());
                return Ok(());
            };
            let mut mid_ty = mid.clone();
            mid_ty.shape = KernelOp::output_shapes(&conv(None), &ins.iter().map(|(t, _)| t).collect::<Vec<_>>()).unwrap()[0].clone();
            let (second, epilogue) = if prelu {
                let op = KernelOp::from(Convert::from(ConvertKind::RequantizePrelu));
                let two = run_typed(&op, &[(mid_ty, first), (aty.clone(), abytes.clone())], out.clone()).unwrap();
                (two, ConvEpilogue { prelu, act: Activation::None, scale: mid_scale, zero_point: mid_zp - shift })
            } else {
                let op = KernelOp::from(Convert { kind: ConvertKind::Requantize, act: requant_act });
                let two = run_typed(&op, &[(mid_ty, first)], out.clone()).unwrap();
                (two, ConvEpilogue { prelu, act: requant_act, scale: mid_scale, zero_point: mid_zp - shift })
            };
            // The fused op, through its parameter words as a program carries them.
            let fused = conv(Some(epilogue));
            let fused = KernelOp::decode(fused.opcode(), &fused.encode_params()).unwrap();
            let mut fused_ins = ins.to_vec();
            if prelu {
                fused_ins.push((aty, abytes));
            }
            let got = run_typed(&fused, &fused_ins, out).unwrap();
            prop_assert_eq!(got, second);
        }
    }

    /// Hostile words and types are refused: a bad kind, an NCHW convolution, a PRELU
    /// with an activation, a non-positive or non-finite scale; a float convolution, an
    /// output of another type, a slope of the wrong length or type, a missing slope.
    #[test]
    fn bad_epilogues_are_refused() {
        let conv = |e: Option<ConvEpilogue>, nchw: bool| {
            KernelOp::from(Conv2d {
                window: ConvWindow {
                    pad: Padding::default(),
                    stride_w: 1,
                    stride_h: 1,
                    dilation_w: 1,
                    dilation_h: 1,
                },
                act: Activation::None,
                nchw,
                epilogue: e,
            })
        };
        let e = ConvEpilogue {
            prelu: true,
            act: Activation::None,
            scale: 0.5,
            zero_point: 3,
        };
        let words = |op: &KernelOp| op.encode_params();
        let ok = conv(Some(e), false);
        assert_eq!(KernelOp::decode(ok.opcode(), &words(&ok)).unwrap(), ok);
        assert!(KernelOp::decode(ok.opcode(), &words(&conv(Some(e), true))).is_err());
        for bad in [
            ConvEpilogue {
                act: Activation::Relu,
                ..e
            },
            ConvEpilogue { scale: 0.0, ..e },
            ConvEpilogue { scale: -1.0, ..e },
            ConvEpilogue {
                scale: f32::INFINITY,
                ..e
            },
        ] {
            assert!(KernelOp::decode(ok.opcode(), &words(&conv(Some(bad), false))).is_err());
        }
        let mut w = words(&ok);
        let at = w.len() - 4;
        w[at] = 3;
        assert!(KernelOp::decode(ok.opcode(), &w).is_err());
        // Types.
        let x = TensorType::quantized(DType::I8, &[1, 2, 2, 3], 0.5, 0);
        let f = TensorType::quantized(DType::I8, &[4, 1, 1, 3], 0.5, 0);
        let b = TensorType::quantized(DType::I32, &[4], 0.25, 0);
        let a = TensorType::new(DType::F32, &[4]);
        let out = TensorType::quantized(DType::I8, &[1, 2, 2, 4], 0.1, -5);
        let check = |ins: &[&TensorType], out: &TensorType| ok.check(ins, &[out]);
        check(&[&x, &f, &b, &a], &out).unwrap();
        assert!(check(&[&x, &f, &b], &out).is_err(), "no slope");
        let a3 = TensorType::new(DType::F32, &[3]);
        assert!(check(&[&x, &f, &b, &a3], &out).is_err(), "slope length");
        let ai = TensorType::new(DType::I32, &[4]);
        assert!(check(&[&x, &f, &b, &ai], &out).is_err(), "slope type");
        let out_u8 = TensorType::quantized(DType::U8, &[1, 2, 2, 4], 0.1, 5);
        assert!(check(&[&x, &f, &b, &a], &out_u8).is_err(), "output type");
        let fl = |s: &[usize]| TensorType::new(DType::F32, s);
        let fx = [fl(&[1, 2, 2, 3]), fl(&[4, 1, 1, 3]), fl(&[4])];
        assert!(
            check(&[&fx[0], &fx[1], &fx[2], &a], &fl(&[1, 2, 2, 4])).is_err(),
            "float"
        );
    }
}
