//! Integer cores of the quantised convolution family: CONV_2D, DEPTHWISE_CONV_2D and
//! FULLY_CONNECTED over plain NHWC (row-major) slices whose shapes the caller has validated.
//!
//! Every output element is
//! `clamp(multiply_by_quantized_multiplier(sum((x - in_zp) * (w - w_zp)) + bias, m, s) + out_zp)`
//! in wrapping `i32`, as in each path of the NNAPI CPU reference:
//!
//! - uint8 per-tensor CONV_2D and FULLY_CONNECTED: TFLite's legacy optimized `Conv` /
//!   `FullyConnected` with gemmlowp's `OutputStageScaleInt32ByFixedPointAndExponent` (the same
//!   arithmetic as `MultiplyByQuantizedMultiplier`);
//! - uint8 per-tensor DEPTHWISE_CONV_2D: TFLite's `reference_ops::DepthwiseConv`
//!   (`kAwayFromZero` rounding, i.e. `MultiplyByQuantizedMultiplier`);
//! - int8 per-tensor CONV_2D / DEPTHWISE_CONV_2D: NNAPI shifts int8 by 128 and runs the uint8
//!   path, which gives the same integers as running on int8 directly;
//! - per-channel (uint8 or int8 input, int8 symmetric filter): NNAPI's own loops in
//!   `convQuant8PerChannelNhwc` / `depthwiseConvQuant8PerChannelNhwc` and TFLite's
//!   `reference_integer_ops::ConvPerChannel`;
//! - int8 FULLY_CONNECTED: TFLite's `reference_integer_ops::FullyConnected`.
//!
//! In all of them the multiplier comes from NNAPI's `QuantizeMultiplier` (see
//! [`per_tensor_multiplier`], [`per_channel_multipliers`]). Older NNAPI releases quantised the
//! per-tensor multiplier with `QuantizeMultiplierSmallerThanOneExp`: where that succeeds it
//! returns the same pair, and the rescaling is then identical.
//!
//! An integer sum modulo 2^32 does not depend on the order of its terms, so the loops here
//! are free to reorder and factor it and stay bit-identical with the reference (whose
//! overflow, undefined in C++, wraps in practice).

mod bytes;
mod depthwise_simd;
mod shallow;

pub use bytes::pack_filter;

use std::cell::RefCell;
use std::rc::Rc;

use super::igemm;
use super::isa::isa;
use super::quant::{
    get_quantized_convolution_multiplier, quantize_multiplier, QuantElem, QuantError,
};
use super::requant::{memoised, Epilogue, Memo, Requant};
use super::simd::{vectorized, Body};

type Result<T> = std::result::Result<T, QuantError>;

/// A quantity given once for the whole tensor or once per output channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerChannel<'a> {
    /// The same value for every output channel (per-tensor quantisation).
    Uniform(i32),
    /// One value per output channel, indexed by output channel.
    Each(&'a [i32]),
}

/// The quantisation of a kernel's operands and its output stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuantParams<'a> {
    /// Zero point of the input.
    pub input_zero_point: i32,
    /// Zero point of the filter (weights); 0 for NNAPI's symmetric per-channel filters.
    pub filter_zero_point: PerChannel<'a>,
    /// Zero point of the output, added after rescaling.
    pub output_zero_point: i32,
    /// Q31 output multipliers, as [`quantize_multiplier`] returns them.
    pub output_multiplier: PerChannel<'a>,
    /// Output shifts, positive to the left, as [`quantize_multiplier`] returns them.
    pub output_shift: PerChannel<'a>,
    /// Lower clamp bound, zero point included (see
    /// [`quantized_activation_range`](super::quant::quantized_activation_range)).
    pub act_min: i32,
    /// Upper clamp bound, zero point included; must not be below `act_min`.
    pub act_max: i32,
    /// A fused op applied to each clamped result before it is stored (its output's type
    /// is then the output's).
    pub epilogue: Option<&'a Epilogue>,
}

/// The spatial geometry of a convolution over NHWC tensors.
///
/// Output pixel `(oy, ox)` reads input rows `oy * stride_h + ky * dilation_h - pad_top` and
/// columns `ox * stride_w + kx * dilation_w - pad_left`; taps outside the input are skipped
/// (they contribute 0, as in the reference). The output size is given rather than derived, so
/// that the caller's NNAPI shape rules stay the single source of truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConvGeometry {
    /// Batch size (may be 0).
    pub batches: usize,
    /// Input height.
    pub in_h: usize,
    /// Input width.
    pub in_w: usize,
    /// Input channels.
    pub in_c: usize,
    /// Output height.
    pub out_h: usize,
    /// Output width.
    pub out_w: usize,
    /// Filter height.
    pub filter_h: usize,
    /// Filter width.
    pub filter_w: usize,
    /// Vertical stride, at least 1.
    pub stride_h: usize,
    /// Horizontal stride, at least 1.
    pub stride_w: usize,
    /// Vertical dilation, at least 1.
    pub dilation_h: usize,
    /// Horizontal dilation, at least 1.
    pub dilation_w: usize,
    /// Rows of padding above the input (the bottom padding only shows in `out_h`).
    pub pad_top: usize,
    /// Columns of padding left of the input (the right padding only shows in `out_w`).
    pub pad_left: usize,
}

/// Parameters of [`conv2d`]: input `[batches, in_h, in_w, in_c]`, filter
/// `[out_c, filter_h, filter_w, in_c]`, bias `[out_c]`, output `[batches, out_h, out_w, out_c]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Conv2dParams<'a> {
    /// Spatial geometry.
    pub geometry: ConvGeometry,
    /// Output channels.
    pub out_c: usize,
    /// Quantisation; per-channel values are indexed by output channel.
    pub quant: QuantParams<'a>,
}

/// Parameters of [`depthwise_conv2d`]: input `[batches, in_h, in_w, in_c]`, filter
/// `[1, filter_h, filter_w, in_c * depth_multiplier]`, bias `[in_c * depth_multiplier]`,
/// output `[batches, out_h, out_w, in_c * depth_multiplier]`; output channel
/// `c * depth_multiplier + m` reads input channel `c`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DepthwiseConv2dParams<'a> {
    /// Spatial geometry.
    pub geometry: ConvGeometry,
    /// Output channels per input channel.
    pub depth_multiplier: usize,
    /// Quantisation; per-channel values are indexed by output channel.
    pub quant: QuantParams<'a>,
}

/// Parameters of [`fully_connected`]: input `[batches, input_size]`, weights
/// `[output_size, input_size]`, bias `[output_size]`, output `[batches, output_size]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FullyConnectedParams<'a> {
    /// Rows of the input.
    pub batches: usize,
    /// Length of each input row (K).
    pub input_size: usize,
    /// Output units (N).
    pub output_size: usize,
    /// Quantisation; per-channel values are indexed by output unit.
    pub quant: QuantParams<'a>,
}

/// The output multiplier and shift of a per-tensor quantised conv or fully-connected layer:
/// NNAPI's `GetQuantizedConvolutionMultiplier` (which checks the bias scale) followed by
/// `QuantizeMultiplier`, as `Conv2D.cpp`, `DepthwiseConv2D.cpp` and `FullyConnected.cpp` do.
pub fn per_tensor_multiplier(
    input_scale: f32,
    filter_scale: f32,
    bias_scale: f32,
    output_scale: f32,
) -> Result<(i32, i32)> {
    let real =
        get_quantized_convolution_multiplier(input_scale, filter_scale, bias_scale, output_scale)?;
    Ok(quantize_multiplier(real))
}

/// The output multipliers and shifts of a per-channel quantised conv, one per entry of
/// `filter_scales`, as NNAPI's `convQuant8PerChannelNhwc` and
/// `depthwiseConvQuant8PerChannelNhwc` compute them: the bias scale of channel `i` is taken
/// as `filter_scales[i] * input_scale` (in `f32`), then as [`per_tensor_multiplier`].
pub fn per_channel_multipliers(
    input_scale: f32,
    filter_scales: &[f32],
    output_scale: f32,
) -> Result<(Vec<i32>, Vec<i32>)> {
    let mut multipliers = Vec::with_capacity(filter_scales.len());
    let mut shifts = Vec::with_capacity(filter_scales.len());
    for &fs in filter_scales {
        let (m, s) = per_tensor_multiplier(input_scale, fs, fs * input_scale, output_scale)?;
        multipliers.push(m);
        shifts.push(s);
    }
    Ok((multipliers, shifts))
}

/// Checked product of sizes.
fn product(items: &[usize]) -> Result<usize> {
    items
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or(QuantError::TooLarge)
}

fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(QuantError::Length {
            what,
            expected,
            got,
        })
    }
}

/// `s[start..start + len]`, or an error instead of a panic (unreachable after the length
/// checks).
fn window<T>(s: &[T], start: usize, len: usize) -> Result<&[T]> {
    start
        .checked_add(len)
        .and_then(|end| s.get(start..end))
        .ok_or(QuantError::InvalidParams("index out of bounds"))
}

/// The per-output-channel constants of the output stage.
#[derive(Debug, Clone, Copy)]
struct Channel {
    bias: i32,
    filter_zp: i32,
    multiplier: i32,
    shift: i32,
}

/// The validated output stage: per-channel constants, and the requantisation's rows.
struct OutputStage {
    channels: Vec<Channel>,
    /// The same constants for the vectorised rows.
    rows: Requant,
}

thread_local! {
    /// The output stages built on this thread ([`OutputStage::new`]).
    static STAGES: Memo<OutputStage> = RefCell::default();
}

impl OutputStage {
    /// The stage of `q` over `channels` channels with `bias`, built once per thread
    /// ([`memoised`]).
    fn new(q: &QuantParams<'_>, channels: usize, bias: &[i32]) -> Result<Rc<Self>> {
        let key = |key: &mut Vec<u32>| {
            key.extend([channels as u32, bias.len() as u32]);
            // Whole slices at a time (a copy, not a loop per word).
            key.extend_from_slice(bytemuck::cast_slice(bias));
            for p in [q.filter_zero_point, q.output_multiplier, q.output_shift] {
                match p {
                    PerChannel::Uniform(v) => key.extend([0, v as u32]),
                    PerChannel::Each(v) => {
                        key.extend([1, v.len() as u32]);
                        key.extend_from_slice(bytemuck::cast_slice(v));
                    }
                }
            }
            key.extend([q.output_zero_point, q.act_min, q.act_max].map(|v| v as u32));
            if let Some(e) = q.epilogue {
                e.key(key);
            }
        };
        memoised(&STAGES, key, || Self::build(q, channels, bias))
    }

    fn build(q: &QuantParams<'_>, channels: usize, bias: &[i32]) -> Result<Self> {
        check_len("bias", channels, bias.len())?;
        if q.act_min > q.act_max {
            return Err(QuantError::InvalidParams("act_min exceeds act_max"));
        }
        let value = |p: PerChannel<'_>, what: &'static str| match p {
            PerChannel::Uniform(_) => Ok(()),
            PerChannel::Each(v) => check_len(what, channels, v.len()),
        };
        value(q.filter_zero_point, "filter zero points")?;
        value(q.output_multiplier, "output multipliers")?;
        value(q.output_shift, "output shifts")?;
        let at = |p: PerChannel<'_>, c: usize| match p {
            PerChannel::Uniform(v) => v,
            // Lengths checked above.
            PerChannel::Each(v) => v.get(c).copied().unwrap_or(0),
        };
        let channels = bias
            .iter()
            .enumerate()
            .map(|(c, &bias)| Channel {
                bias,
                filter_zp: at(q.filter_zero_point, c),
                multiplier: at(q.output_multiplier, c),
                shift: at(q.output_shift, c),
            })
            .collect();
        let channels: Vec<Channel> = channels;
        let rows = Requant::new(
            channels.iter().map(|c| c.bias).collect(),
            channels.iter().map(|c| c.multiplier).collect(),
            channels.iter().map(|c| c.shift).collect(),
            q.output_zero_point,
            q.act_min,
            q.act_max,
        )
        .with_epilogue(q.epilogue.cloned());
        Ok(Self { channels, rows })
    }

    /// Requantises one pixel's sums (one per channel) into `dst`.
    #[inline]
    fn requantize_row<T: QuantElem>(&self, sums: &[i32], dst: &mut [T]) {
        self.rows.row(sums, dst);
    }

    /// Writes every channel of every pixel of `output` from a zero accumulator (an empty
    /// reduction, e.g. zero input channels).
    fn fill_bias_only<T: QuantElem>(&self, output: &mut [T]) {
        let n = self.channels.len().max(1);
        for px in output.chunks_mut(n) {
            for (c, dst) in px.iter_mut().enumerate() {
                *dst = self.rows.one(0, c);
            }
        }
    }
}

/// `sum(x[i] * w[i])`, wrapping; contiguous so that it vectorises.
#[inline]
fn dot<F: QuantElem>(x: &[i32], w: &[F]) -> i32 {
    x.iter().zip(w).fold(0i32, |acc, (&a, &b)| {
        acc.wrapping_add(a.wrapping_mul(b.to_i32()))
    })
}

/// Wrapping sum.
#[inline]
fn sum(x: &[i32]) -> i32 {
    x.iter().fold(0i32, |acc, &a| acc.wrapping_add(a))
}

impl ConvGeometry {
    /// Checks strides and dilations, and that every row/column index a window can reach
    /// (before subtracting the padding) is representable, so the loops cannot overflow.
    fn validate(&self) -> Result<()> {
        if self.stride_h == 0 || self.stride_w == 0 || self.dilation_h == 0 || self.dilation_w == 0
        {
            return Err(QuantError::InvalidParams(
                "strides and dilations must be at least 1",
            ));
        }
        let reach = |out: usize, stride: usize, filter: usize, dilation: usize| {
            if out == 0 || filter == 0 {
                return Some(0);
            }
            (out - 1)
                .checked_mul(stride)?
                .checked_add((filter - 1).checked_mul(dilation)?)
        };
        reach(self.out_h, self.stride_h, self.filter_h, self.dilation_h)
            .and(reach(
                self.out_w,
                self.stride_w,
                self.filter_w,
                self.dilation_w,
            ))
            .map(|_| ())
            .ok_or(QuantError::TooLarge)
    }

    /// The input row (or column) of tap `k` of output position `o`, if inside the input.
    #[inline]
    fn tap(
        o: usize,
        stride: usize,
        k: usize,
        dilation: usize,
        pad: usize,
        size: usize,
    ) -> Option<usize> {
        // No overflow: bounded by the reach checked in `validate`.
        (o * stride + k * dilation)
            .checked_sub(pad)
            .filter(|&i| i < size)
    }
}

/// Fills `patch` (`filter_h * filter_w * in_c`, tap-major like a filter row) with
/// `x - in_zp` for the window of output pixel `(oy, ox)` of image `img`, 0 for padding.
#[inline]
fn gather<T: QuantElem>(
    g: &ConvGeometry,
    img: &[T],
    oy: usize,
    ox: usize,
    in_zp: i32,
    patch: &mut [i32],
) -> Result<()> {
    let c = g.in_c;
    // Every column of the window inside the input, one apart: each filter row's taps are
    // one contiguous run of the input row (one loop of `filter_w * c`, not `filter_w`
    // loops of `c`: a first layer's three channels made the per-tap work most of it).
    let whole_cols = g.dilation_w == 1
        && (ox * g.stride_w)
            .checked_sub(g.pad_left)
            .is_some_and(|x| x + g.filter_w <= g.in_w);
    if whole_cols {
        let x0 = ox * g.stride_w - g.pad_left;
        let run = g.filter_w * c;
        for (ky, dst) in patch
            .chunks_exact_mut(run.max(1))
            .enumerate()
            .take(g.filter_h)
        {
            match ConvGeometry::tap(oy, g.stride_h, ky, g.dilation_h, g.pad_top, g.in_h) {
                Some(iy) => {
                    let src = window(img, (iy * g.in_w + x0) * c, run)?;
                    for (d, &s) in dst.iter_mut().zip(src) {
                        *d = s.to_i32().wrapping_sub(in_zp);
                    }
                }
                None => dst.fill(0),
            }
        }
        return Ok(());
    }
    let mut taps = patch.chunks_exact_mut(c.max(1));
    for ky in 0..g.filter_h {
        let iy = ConvGeometry::tap(oy, g.stride_h, ky, g.dilation_h, g.pad_top, g.in_h);
        for kx in 0..g.filter_w {
            let ix = ConvGeometry::tap(ox, g.stride_w, kx, g.dilation_w, g.pad_left, g.in_w);
            let tap = taps
                .next()
                .ok_or(QuantError::InvalidParams("index out of bounds"))?;
            match (iy, ix) {
                (Some(iy), Some(ix)) => {
                    let src = window(img, (iy * g.in_w + ix) * c, c)?;
                    for (d, &s) in tap.iter_mut().zip(src) {
                        *d = s.to_i32().wrapping_sub(in_zp);
                    }
                }
                _ => tap.fill(0),
            }
        }
    }
    Ok(())
}

/// Quantised CONV_2D (NHWC, filter OHWI) with a per-tensor or per-output-channel filter zero
/// point and output multiplier/shift, int32 bias and clamp to `[act_min, act_max]`.
///
/// An integer GEMM of the im2col rows and the filter: on bytes (one-byte input with its
/// zero point in range, filter minus zero point within `i8`: [`pack_filter`]), else on
/// `i16` pairs, else (zero points far outside the types) a dot product per pixel and
/// channel. Errors (never panics) on inconsistent lengths or parameters.
pub fn conv2d<T: QuantElem, F: QuantElem>(
    p: &Conv2dParams<'_>,
    input: &[T],
    filter: &[F],
    bias: &[i32],
    output: &mut [T],
) -> Result<()> {
    let g = &p.geometry;
    g.validate()?;
    let image = product(&[g.in_h, g.in_w, g.in_c])?;
    check_len("input", product(&[g.batches, image])?, input.len())?;
    let k = product(&[g.filter_h, g.filter_w, g.in_c])?;
    check_len("filter", product(&[p.out_c, k])?, filter.len())?;
    check_len(
        "output",
        product(&[g.batches, g.out_h, g.out_w, p.out_c])?,
        output.len(),
    )?;
    let stage = OutputStage::new(&p.quant, p.out_c, bias)?;
    if output.is_empty() {
        return Ok(());
    }
    if k == 0 {
        stage.fill_bias_only(output);
        return Ok(());
    }
    // Here out_c >= 1 (output is not empty) and k >= 1.
    let in_zp = p.quant.input_zero_point;
    if let Some(pad) = bytes::zero_byte::<T>(in_zp) {
        if let Some(packed) = stage.pack_bytes(filter, k) {
            return bytes::conv_bytes(isa(), g, p.out_c, input, &packed, &stage, pad, output);
        }
    }
    match stage.pack(filter, k) {
        Some(packed) if input_fits::<T>(in_zp) => conv_igemm(
            igemm::kernel(),
            g,
            p.out_c,
            input,
            &packed,
            &stage,
            in_zp,
            output,
        ),
        _ => conv_plain(g, p.out_c, input, filter, &stage, in_zp, output),
    }
}

/// Quantised CONV_2D as [`conv2d`], with the filter already packed by [`pack_filter`]
/// (zero points removed; the bytes as little-endian words, as a filter in
/// `Layout::IntPanels` lies in memory).
pub fn conv2d_packed<T: QuantElem>(
    p: &Conv2dParams<'_>,
    input: &[T],
    packed: &[i32],
    bias: &[i32],
    output: &mut [T],
) -> Result<()> {
    let g = &p.geometry;
    g.validate()?;
    let image = product(&[g.in_h, g.in_w, g.in_c])?;
    check_len("input", product(&[g.batches, image])?, input.len())?;
    let k = product(&[g.filter_h, g.filter_w, g.in_c])?;
    let want = igemm::quads::packed_len(k, p.out_c).ok_or(QuantError::TooLarge)?;
    check_len("packed filter", want, std::mem::size_of_val(packed))?;
    check_len(
        "output",
        product(&[g.batches, g.out_h, g.out_w, p.out_c])?,
        output.len(),
    )?;
    #[cfg(not(target_endian = "little"))]
    return Err(QuantError::InvalidParams(
        "packed filters need a little-endian host",
    ));
    let packed: &[u8] = bytemuck::cast_slice(packed);
    let Some(pad) = bytes::zero_byte::<T>(p.quant.input_zero_point) else {
        // An input the byte GEMM cannot take: the plain filter, on the other paths.
        let plain = bytes::unpack_filter(packed, k, p.out_c)
            .ok_or(QuantError::InvalidParams("packed filter size"))?;
        let q = QuantParams {
            filter_zero_point: PerChannel::Uniform(0),
            ..p.quant
        };
        return conv2d(
            &Conv2dParams { quant: q, ..*p },
            input,
            &plain,
            bias,
            output,
        );
    };
    let stage = OutputStage::new(&p.quant, p.out_c, bias)?;
    if output.is_empty() {
        return Ok(());
    }
    if k == 0 {
        stage.fill_bias_only(output);
        return Ok(());
    }
    bytes::conv_bytes(isa(), g, p.out_c, input, packed, &stage, pad, output)
}

/// The filter `[out_c, k]` (OHWI rows) with each row's zero point removed, packed as the
/// `i16` pair GEMM's B (`k x out_c`); `None` where a value does not fit the GEMM's exact
/// range (a zero point far outside the element type's range).
fn pack_pairs<F: QuantElem>(
    filter: &[F],
    k: usize,
    out_c: usize,
    zero_point: impl Fn(usize) -> i32,
) -> Option<Vec<i32>> {
    if filter.len() != k.checked_mul(out_c)? {
        return None;
    }
    let mut packed = vec![0; igemm::packed_len(k, out_c)?];
    igemm::pack_b(
        k,
        out_c,
        |kk, j| filter[j * k + kk].to_i32().saturating_sub(zero_point(j)),
        &mut packed,
    )?;
    Some(packed)
}

/// Whether every `x - in_zp` of a `T` input is within the integer GEMM's exact range.
fn input_fits<T: QuantElem>(in_zp: i32) -> bool {
    let r = -i64::from(igemm::MAX_OPERAND)..=i64::from(igemm::MAX_OPERAND);
    r.contains(&(i64::from(T::MIN) - i64::from(in_zp)))
        && r.contains(&(i64::from(T::MAX) - i64::from(in_zp)))
}

impl OutputStage {
    /// [`pack_pairs`] with this stage's per-channel filter zero points.
    fn pack<F: QuantElem>(&self, filter: &[F], k: usize) -> Option<Vec<i32>> {
        pack_pairs(filter, k, self.channels.len(), |j| {
            self.channels.get(j).map_or(0, |c| c.filter_zp)
        })
    }
}

/// Input rows from which FULLY_CONNECTED packs its weights for the integer GEMM (below, a
/// dot product per output reads each weight once, as packing would).
const FC_GEMM_ROWS: usize = 4;

/// Words of im2col pairs the conv core multiplies per GEMM call (64 KiB: the A block stays
/// in L2 while every B panel passes over it).
const A_BLOCK_WORDS: usize = 16 << 10;

/// The convolution on the integer GEMM: im2col rows (`x - in_zp`, zeros for padding) of a
/// block of output pixels times the packed filter, then the output stage.
#[allow(clippy::too_many_arguments)]
fn conv_igemm<T: QuantElem>(
    kern: igemm::Kernel,
    g: &ConvGeometry,
    out_c: usize,
    input: &[T],
    packed: &[i32],
    stage: &OutputStage,
    in_zp: i32,
    output: &mut [T],
) -> Result<()> {
    let k = g.filter_h * g.filter_w * g.in_c;
    let rows = g.batches * g.out_h * g.out_w;
    let fill = ConvRows::new(g, input, in_zp, 0);
    igemm_rows(kern, rows, k, out_c, fill, in_zp, packed, stage, output)
}

/// Where the rows of A come from (`row(at, patch)`: either writes row `at`'s `k` values
/// into `patch` and returns `None`, or returns the `k` input values whose `x - in_zp` is
/// the row). A trait (not a closure) so that its `#[inline(always)]` puts it inside the
/// vectorised fill loop.
trait RowSource<'x, T> {
    /// Row `at` (rows are asked in increasing order within a block).
    fn row(&mut self, at: usize, patch: &mut [i32]) -> Result<Option<&'x [T]>>;
}

/// The im2col rows of a convolution.
struct ConvRows<'x, 'g, T> {
    g: &'g ConvGeometry,
    input: &'x [T],
    image: usize,
    /// A 1x1 window without padding: the row is the input pixel's channels.
    one_pixel: bool,
    /// Moreover stride 1 over an output as large as the input: row `at` is pixel `at`.
    same_pixels: bool,
    in_zp: i32,
    /// The input zero point's byte (the byte GEMM's padding).
    pad: u8,
    pos: Position,
}

impl<'x, 'g, T> ConvRows<'x, 'g, T> {
    /// The rows of a convolution over `input` (the pair GEMM's zero point `in_zp`, the
    /// byte GEMM's padding byte `pad`).
    fn new(g: &'g ConvGeometry, input: &'x [T], in_zp: i32, pad: u8) -> Self {
        // A 1x1 window without padding reads one input pixel: its channels are A's row as
        // they lie (no im2col).
        let one_pixel = g.filter_h == 1
            && g.filter_w == 1
            && g.pad_top == 0
            && g.pad_left == 0
            && g.out_h.saturating_sub(1) * g.stride_h < g.in_h
            && g.out_w.saturating_sub(1) * g.stride_w < g.in_w;
        // A stride-1 1x1 window over an output as large as the input: row `at` is input
        // pixel `at` (batches included).
        let same_pixels = one_pixel
            && g.stride_h == 1
            && g.stride_w == 1
            && g.out_h == g.in_h
            && g.out_w == g.in_w;
        Self {
            g,
            input,
            image: g.in_h * g.in_w * g.in_c,
            one_pixel,
            same_pixels,
            in_zp,
            pad,
            pos: Position::default(),
        }
    }
}

impl<'x, T: QuantElem> RowSource<'x, T> for ConvRows<'x, '_, T> {
    #[inline(always)]
    fn row(&mut self, at: usize, patch: &mut [i32]) -> Result<Option<&'x [T]>> {
        let g = self.g;
        if self.same_pixels {
            return window(self.input, at * g.in_c, g.in_c).map(Some);
        }
        // The rows come in order: the output pixel is stepped, not divided out (two
        // 64-bit divisions a row were a tenth of a 1x1 layer's time).
        let (n, oy, ox) = self.pos.at(at, g.out_h, g.out_w);
        let img = window(self.input, n * self.image, self.image)?;
        if self.one_pixel {
            let at = (oy * g.stride_h * g.in_w + ox * g.stride_w) * g.in_c;
            return window(img, at, g.in_c).map(Some);
        }
        gather(g, img, oy, ox, self.in_zp, patch).map(|()| None)
    }
}

/// The rows of FULLY_CONNECTED's input (`k` values each).
struct FcRows<'x, T> {
    input: &'x [T],
    k: usize,
}

impl<'x, T: QuantElem> RowSource<'x, T> for FcRows<'x, T> {
    #[inline(always)]
    fn row(&mut self, at: usize, _: &mut [i32]) -> Result<Option<&'x [T]>> {
        window(self.input, at * self.k, self.k).map(Some)
    }
}

/// The (image, row, column) of an output pixel index, stepped from the last one asked.
#[derive(Default)]
struct Position {
    /// The last index asked and its pixel, if any.
    last: Option<(usize, [usize; 3])>,
}

impl Position {
    /// The pixel of index `at` over `out_h x out_w` images (both at least 1).
    #[inline]
    fn at(&mut self, at: usize, out_h: usize, out_w: usize) -> (usize, usize, usize) {
        let [n, oy, ox] = match self.last {
            Some((prev, [n, oy, ox])) if prev + 1 == at => {
                if ox + 1 < out_w {
                    [n, oy, ox + 1]
                } else if oy + 1 < out_h {
                    [n, oy + 1, 0]
                } else {
                    [n + 1, 0, 0]
                }
            }
            _ => {
                let per_image = out_h * out_w;
                let px = at % per_image;
                [at / per_image, px / out_w, px % out_w]
            }
        };
        self.last = Some((at, [n, oy, ox]));
        (n, oy, ox)
    }
}

/// `rows` rows of A (row `i` written by `fill(i, row)`, `k` values, or given by it as `k`
/// input values whose `x - in_zp` is the row) times the packed B (`out_c` columns), each
/// result row requantised into the next `out_c` outputs; A is formed a block of rows at a
/// time.
#[allow(clippy::too_many_arguments)]
fn igemm_rows<'x, T: QuantElem>(
    kern: igemm::Kernel,
    rows: usize,
    k: usize,
    out_c: usize,
    mut fill: impl RowSource<'x, T>,
    in_zp: i32,
    packed: &[i32],
    stage: &OutputStage,
    output: &mut [T],
) -> Result<()> {
    let r = kern.rows();
    // Never more rows than the layer has (a small layer's block of 144 rows was most of
    // its time when the block was allocated and zeroed per call).
    let block = (A_BLOCK_WORDS / igemm::pairs(k).max(1) / r * r)
        .clamp(r, 24 * r)
        .min(rows.div_ceil(r) * r);
    let (a_buf, mut tile) = GEMM_SCRATCH.take();
    let mut a = igemm::ATiles::reuse(block, k, r, a_buf);
    // One tile of sums (the kernel's rows x out_c), requantised as soon as it is done,
    // while it is in the first-level cache.
    tile.resize(r * out_c, 0);
    let mut patch = vec![0i32; k];
    let mut start = 0;
    while start < rows {
        let m = block.min(rows - start);
        vectorized(FillRows {
            fill: &mut fill,
            a: &mut a,
            patch: &mut patch,
            start,
            m,
            in_zp,
            input: std::marker::PhantomData,
        })?;
        let px = output
            .get_mut(start * out_c..(start + m) * out_c)
            .ok_or(QuantError::InvalidParams("index out of bounds"))?;
        igemm::igemm_each(kern, m, &a, packed, out_c, &mut tile, |row0, sums| {
            if let Some(dst) = px.get_mut(row0 * out_c..row0 * out_c + sums.len()) {
                stage.rows.rows(sums, dst, out_c);
            }
        })
        .ok_or(QuantError::InvalidParams("integer GEMM sizes"))?;
        start += m;
    }
    GEMM_SCRATCH.set((a.into_buffer(), tile));
    Ok(())
}

/// Rows `start..start + m` of A into `a` (from row 0), compiled for the widest vector
/// unit (the zero point's removal and the narrowing to pair halves vectorise).
struct FillRows<'a, 'x, T, G> {
    fill: &'a mut G,
    a: &'a mut igemm::ATiles,
    patch: &'a mut [i32],
    start: usize,
    m: usize,
    in_zp: i32,
    input: std::marker::PhantomData<&'x [T]>,
}

impl<'x, T: QuantElem, G: RowSource<'x, T>> Body for FillRows<'_, 'x, T, G> {
    type Out = Result<()>;

    #[inline(always)]
    fn run(self) -> Result<()> {
        let in_zp = self.in_zp;
        for i in 0..self.m {
            match self.fill.row(self.start + i, self.patch)? {
                Some(x) => self.a.set_row_map(i, x, |v| v.to_i32().wrapping_sub(in_zp)),
                None => self.a.set_row(i, self.patch),
            }
        }
        Ok(())
    }
}

thread_local! {
    /// The integer GEMM's A block and tile of sums, kept between layers on this thread
    /// (the engine runs the layers of a model on one thread): a layer allocates and
    /// zeroes neither. Taken out for the duration of a call (a nested call would find
    /// them empty and grow its own).
    static GEMM_SCRATCH: std::cell::Cell<(Vec<i32>, Vec<i32>)> =
        const { std::cell::Cell::new((Vec::new(), Vec::new())) };
}

/// The convolution in plain wrapping `i32` (for zero points outside the GEMM's exact
/// range): per pixel, the gathered window dotted with each filter row.
fn conv_plain<T: QuantElem, F: QuantElem>(
    g: &ConvGeometry,
    out_c: usize,
    input: &[T],
    filter: &[F],
    stage: &OutputStage,
    in_zp: i32,
    output: &mut [T],
) -> Result<()> {
    let k = g.filter_h * g.filter_w * g.in_c;
    let image = g.in_h * g.in_w * g.in_c;
    let mut patch = vec![0i32; k];
    let mut sums = vec![0i32; out_c];
    let per_image = g.out_h * g.out_w;
    for (at, px) in output.chunks_exact_mut(out_c).enumerate() {
        let (n, p) = (at / per_image, at % per_image);
        let img = window(input, n * image, image)?;
        gather(g, img, p / g.out_w, p % g.out_w, in_zp, &mut patch)?;
        let total = sum(&patch);
        for ((s, w), ch) in sums
            .iter_mut()
            .zip(filter.chunks_exact(k))
            .zip(&stage.channels)
        {
            *s = dot(&patch, w).wrapping_sub(ch.filter_zp.wrapping_mul(total));
        }
        stage.requantize_row(&sums, px);
    }
    Ok(())
}

/// Quantised DEPTHWISE_CONV_2D (NHWC, filter `[1, H, W, C*M]`) with a per-tensor or
/// per-output-channel filter zero point and output multiplier/shift, int32 bias and clamp.
///
/// Each output pixel accumulates, tap by tap, into a vector of all output channels, so for
/// `depth_multiplier == 1` the inner loop is an element-wise multiply-add over contiguous
/// channels. Errors (never panics) on inconsistent lengths or parameters.
pub fn depthwise_conv2d<T: QuantElem, F: QuantElem>(
    p: &DepthwiseConv2dParams<'_>,
    input: &[T],
    filter: &[F],
    bias: &[i32],
    output: &mut [T],
) -> Result<()> {
    let g = &p.geometry;
    g.validate()?;
    let m = p.depth_multiplier;
    let out_c = product(&[g.in_c, m])?;
    let image = product(&[g.in_h, g.in_w, g.in_c])?;
    check_len("input", product(&[g.batches, image])?, input.len())?;
    check_len(
        "filter",
        product(&[g.filter_h, g.filter_w, out_c])?,
        filter.len(),
    )?;
    check_len(
        "output",
        product(&[g.batches, g.out_h, g.out_w, out_c])?,
        output.len(),
    )?;
    let stage = OutputStage::new(&p.quant, out_c, bias)?;
    if output.is_empty() {
        return Ok(());
    }
    // Here out_c >= 1, so in_c >= 1 and m >= 1.
    vectorized(DepthwiseLoops {
        g,
        m,
        out_c,
        image,
        input,
        filter,
        stage: &stage,
        in_zp: p.quant.input_zero_point,
        output,
    })
}

/// The loops of [`depthwise_conv2d`] after validation, compiled for the widest vector unit
/// (integer arithmetic: every level gives the same bits).
struct DepthwiseLoops<'a, T, F> {
    g: &'a ConvGeometry,
    m: usize,
    out_c: usize,
    image: usize,
    input: &'a [T],
    filter: &'a [F],
    stage: &'a OutputStage,
    in_zp: i32,
    output: &'a mut [T],
}

impl<T: QuantElem, F: QuantElem> Body for DepthwiseLoops<'_, T, F> {
    type Out = Result<()>;

    #[inline(always)]
    fn run(self) -> Result<()> {
        let DepthwiseLoops {
            g,
            m,
            out_c,
            image,
            input,
            filter,
            stage,
            in_zp,
            output,
        } = self;
        // One output row's sums, requantised together once the row is done.
        let mut accs = vec![0i32; g.out_w * out_c];
        // Per input channel: sum(x - in_zp) over the valid taps, for the filter zero point;
        // not needed for symmetric (per-channel) filters.
        let mut xsum = vec![0i32; g.in_c];
        let need_xsum = stage.channels.iter().any(|ch| ch.filter_zp != 0);
        // A depth multiplier of 1 with one-byte operands: the vector rows (filter
        // zero points included).
        let mut simd = (m == 1)
            .then(|| {
                depthwise_simd::Prepared::<T>::new(
                    isa(),
                    g,
                    filter,
                    |c| stage.channels.get(c).map_or(0, |ch| ch.filter_zp),
                    in_zp,
                )
            })
            .flatten();
        let mut out_rows = output.chunks_exact_mut(g.out_w * out_c);
        for n in 0..g.batches {
            let img = window(input, n * image, image)?;
            for oy in 0..g.out_h {
                let out_row = out_rows
                    .next()
                    .ok_or(QuantError::InvalidParams("index out of bounds"))?;
                if let Some(simd) = simd.as_mut() {
                    // Requantised in registers where the stage allows it, else the sums
                    // and the stage's rows.
                    if simd.row_requantised(g, img, oy, &stage.rows, out_row) {
                        continue;
                    }
                    if simd.row_sums(g, img, oy, &mut accs) {
                        stage.rows.rows(&accs, out_row, out_c);
                        continue;
                    }
                }
                for (ox, acc) in accs.chunks_exact_mut(out_c).enumerate() {
                    acc.fill(0);
                    xsum.fill(0);
                    let mut rows = filter.chunks_exact(out_c);
                    for ky in 0..g.filter_h {
                        let iy =
                            ConvGeometry::tap(oy, g.stride_h, ky, g.dilation_h, g.pad_top, g.in_h);
                        for kx in 0..g.filter_w {
                            let ix = ConvGeometry::tap(
                                ox,
                                g.stride_w,
                                kx,
                                g.dilation_w,
                                g.pad_left,
                                g.in_w,
                            );
                            let row = rows
                                .next()
                                .ok_or(QuantError::InvalidParams("index out of bounds"))?;
                            let (Some(iy), Some(ix)) = (iy, ix) else {
                                continue;
                            };
                            let src = window(img, (iy * g.in_w + ix) * g.in_c, g.in_c)?;
                            depthwise_tap(
                                acc,
                                need_xsum.then_some(&mut xsum[..]),
                                src,
                                row,
                                m,
                                in_zp,
                            );
                        }
                    }
                    if need_xsum {
                        let groups = acc
                            .chunks_exact_mut(m)
                            .zip(stage.channels.chunks_exact(m))
                            .zip(&xsum);
                        for ((accs, chs), &s) in groups {
                            for (a, ch) in accs.iter_mut().zip(chs) {
                                *a = a.wrapping_sub(ch.filter_zp.wrapping_mul(s));
                            }
                        }
                    }
                }
                stage.rows.rows(&accs, out_row, out_c);
            }
        }
        Ok(())
    }
}

/// Adds one tap: `acc[c*m + j] += (x[c] - in_zp) * w[c*m + j]` and, if given,
/// `xsum[c] += x[c] - in_zp`.
#[inline(always)]
fn depthwise_tap<T: QuantElem, F: QuantElem>(
    acc: &mut [i32],
    xsum: Option<&mut [i32]>,
    src: &[T],
    row: &[F],
    m: usize,
    in_zp: i32,
) {
    if m == 1 {
        for ((a, &x), &w) in acc.iter_mut().zip(src).zip(row) {
            *a = a.wrapping_add(x.to_i32().wrapping_sub(in_zp).wrapping_mul(w.to_i32()));
        }
    } else {
        let groups = acc.chunks_exact_mut(m).zip(row.chunks_exact(m)).zip(src);
        for ((accs, ws), &x) in groups {
            let x = x.to_i32().wrapping_sub(in_zp);
            for (a, &w) in accs.iter_mut().zip(ws) {
                *a = a.wrapping_add(x.wrapping_mul(w.to_i32()));
            }
        }
    }
    if let Some(xsum) = xsum {
        for (s, &x) in xsum.iter_mut().zip(src) {
            *s = s.wrapping_add(x.to_i32().wrapping_sub(in_zp));
        }
    }
}

/// Quantised FULLY_CONNECTED: `output[b][n] = requantize(sum_k (x[b][k] - in_zp) *
/// (w[n][k] - w_zp) + bias[n])`, with a per-tensor or per-unit weight zero point and output
/// multiplier/shift.
///
/// Each input row is converted once; each output is then a contiguous dot product with a
/// weight row. Errors (never panics) on inconsistent lengths or parameters.
pub fn fully_connected<T: QuantElem, F: QuantElem>(
    p: &FullyConnectedParams<'_>,
    input: &[T],
    weights: &[F],
    bias: &[i32],
    output: &mut [T],
) -> Result<()> {
    let k = p.input_size;
    check_len("input", product(&[p.batches, k])?, input.len())?;
    check_len("weights", product(&[p.output_size, k])?, weights.len())?;
    check_len(
        "output",
        product(&[p.batches, p.output_size])?,
        output.len(),
    )?;
    let stage = OutputStage::new(&p.quant, p.output_size, bias)?;
    if output.is_empty() {
        return Ok(());
    }
    if k == 0 {
        stage.fill_bias_only(output);
        return Ok(());
    }
    // Here output_size >= 1 and k >= 1.
    let in_zp = p.quant.input_zero_point;
    let n = p.output_size;
    if p.batches >= FC_GEMM_ROWS {
        if let Some(pad) = bytes::zero_byte::<T>(in_zp) {
            if let Some(packed) = stage.pack_bytes(weights, k) {
                return bytes::fc_bytes(p.batches, k, n, input, &packed, &stage, pad, output);
            }
        }
    }
    if p.batches >= FC_GEMM_ROWS && input_fits::<T>(in_zp) {
        if let Some(packed) = stage.pack(weights, k) {
            // Each input row, its zero point removed, is A's row.
            let fill = FcRows { input, k };
            return igemm_rows(
                igemm::kernel(),
                p.batches,
                k,
                n,
                fill,
                in_zp,
                &packed,
                &stage,
                output,
            );
        }
    }
    let mut row = vec![0i32; k];
    for (x, out) in input
        .chunks_exact(k)
        .zip(output.chunks_exact_mut(p.output_size))
    {
        for (r, &v) in row.iter_mut().zip(x) {
            *r = v.to_i32().wrapping_sub(in_zp);
        }
        let row_sum = sum(&row);
        let cols = out
            .iter_mut()
            .zip(weights.chunks_exact(k))
            .zip(&stage.channels);
        for (c, ((dst, w), ch)) in cols.enumerate() {
            let acc = dot(&row, w).wrapping_sub(ch.filter_zp.wrapping_mul(row_sum));
            *dst = stage.rows.one(acc, c);
        }
    }
    Ok(())
}

#[cfg(test)]
mod quant_tests {
    use super::super::quant::quantized_activation_range;
    use super::*;
    use crate::kernels::isa::Isa;
    use proptest::prelude::*;
    use std::ops::Range;

    fn cfg() -> ProptestConfig {
        crate::kernels::proptest_config(128)
    }

    /// An element type the tests can draw from random bytes.
    trait Elem: QuantElem {
        fn from_byte(b: u8) -> Self;
    }
    impl Elem for u8 {
        fn from_byte(b: u8) -> Self {
            b
        }
    }
    impl Elem for i8 {
        fn from_byte(b: u8) -> Self {
            i8::from_ne_bytes([b])
        }
    }

    fn per_tensor(s_in: f32, s_f: f32, s_b: f32, s_out: f32) -> (i32, i32) {
        per_tensor_multiplier(s_in, s_f, s_b, s_out).unwrap()
    }

    fn quant<'a>(
        in_zp: i32,
        f_zp: PerChannel<'a>,
        out_zp: i32,
        m: PerChannel<'a>,
        s: PerChannel<'a>,
        range: (i32, i32),
    ) -> QuantParams<'a> {
        QuantParams {
            input_zero_point: in_zp,
            filter_zero_point: f_zp,
            output_zero_point: out_zp,
            output_multiplier: m,
            output_shift: s,
            act_min: range.0,
            act_max: range.1,
            epilogue: None,
        }
    }

    fn geom(
        batches: usize,
        hwc: [usize; 3],
        out_hw: [usize; 2],
        filter_hw: [usize; 2],
    ) -> ConvGeometry {
        ConvGeometry {
            batches,
            in_h: hwc[0],
            in_w: hwc[1],
            in_c: hwc[2],
            out_h: out_hw[0],
            out_w: out_hw[1],
            filter_h: filter_hw[0],
            filter_w: filter_hw[1],
            stride_h: 1,
            stride_w: 1,
            dilation_h: 1,
            dilation_w: 1,
            pad_top: 0,
            pad_left: 0,
        }
    }

    // Hand-checked examples: the expected outputs of NNAPI's CTS specs
    // (runtime/test/specs/V1_0, V1_2, V1_3), which the CPU reference produces.

    #[test]
    fn quant_conv_u8_per_tensor_examples() {
        let (m, s) = per_tensor(0.5, 0.5, 0.25, 1.0);
        let q = quant(
            0,
            PerChannel::Uniform(0),
            0,
            PerChannel::Uniform(m),
            PerChannel::Uniform(s),
            (0, 255),
        );
        // conv_quant8_channels.
        let p = Conv2dParams {
            geometry: geom(1, [1, 1, 3], [1, 1], [1, 1]),
            out_c: 3,
            quant: q,
        };
        let mut out = [0u8; 3];
        conv2d(
            &p,
            &[10u8, 10, 10],
            &[1u8, 2, 3, 4, 5, 6, 7, 8, 9],
            &[0; 3],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [15, 38, 60]);
        // conv_quant8_large and conv_quant8_overflow.
        let input: Vec<u8> = (1..=18).collect();
        let p = Conv2dParams {
            geometry: geom(1, [2, 3, 3], [2, 3], [1, 1]),
            out_c: 3,
            quant: q,
        };
        let mut out = [0u8; 18];
        conv2d(
            &p,
            &input,
            &[1u8, 4, 7, 2, 5, 8, 3, 6, 9],
            &[0; 3],
            &mut out,
        )
        .unwrap();
        assert_eq!(
            out,
            [8, 9, 11, 17, 21, 24, 26, 32, 38, 35, 43, 51, 44, 54, 65, 53, 66, 78]
        );
        conv2d(
            &p,
            &input,
            &[10u8, 40, 70, 20, 50, 80, 30, 60, 90],
            &[0; 3],
            &mut out,
        )
        .unwrap();
        let mut want = [255u8; 18];
        want[..6].copy_from_slice(&[75, 90, 105, 165, 203, 240]);
        assert_eq!(out, want);
        // conv_quant8_2: zero points 127, VALID padding, stride 3 across, 1 down.
        let (m, s) = per_tensor(0.5, 0.5, 0.25, 1.0);
        let q = quant(
            127,
            PerChannel::Uniform(127),
            127,
            PerChannel::Uniform(m),
            PerChannel::Uniform(s),
            (0, 255),
        );
        let g = ConvGeometry {
            stride_w: 3,
            ..geom(1, [3, 6, 1], [2, 2], [2, 2])
        };
        let p = Conv2dParams {
            geometry: g,
            out_c: 1,
            quant: q,
        };
        let input = [
            133u8, 131, 129, 125, 123, 121, 135, 133, 131, 123, 121, 119, 137, 135, 133, 121, 119,
            117,
        ];
        let mut out = [0u8; 4];
        conv2d(&p, &input, &[129u8, 131, 133, 135], &[-4], &mut out).unwrap();
        assert_eq!(out, [157, 103, 167, 93]);
    }

    #[test]
    fn quant_conv_per_channel_examples() {
        // conv2d_per_channel (uint8 input) and conv2d_quant8_signed (int8 input).
        let (m, s) = per_channel_multipliers(0.5, &[0.5, 0.75, 1.0], 1.0).unwrap();
        let filter = [1i8, 2, 1, 2, 1, 2];
        let g = geom(1, [3, 1, 2], [3, 1], [1, 1]);
        let q = |zp| {
            quant(
                zp,
                PerChannel::Uniform(0),
                zp,
                PerChannel::Each(&m),
                PerChannel::Each(&s),
                (-1000, 1000),
            )
        };
        let p = Conv2dParams {
            geometry: g,
            out_c: 3,
            quant: QuantParams {
                act_min: 0,
                act_max: 255,
                ..q(128)
            },
        };
        let mut out = [0u8; 9];
        conv2d(&p, &[138u8; 6], &filter, &[4; 3], &mut out).unwrap();
        assert_eq!(out, [137, 141, 145, 137, 141, 145, 137, 141, 145]);
        conv2d(
            &p,
            &[138u8, 108, 138, 108, 138, 108],
            &filter,
            &[4; 3],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [121, 118, 115, 121, 118, 115, 121, 118, 115]);
        let p = Conv2dParams {
            geometry: g,
            out_c: 3,
            quant: QuantParams {
                act_min: -128,
                act_max: 127,
                ..q(0)
            },
        };
        let mut out = [0i8; 9];
        conv2d(&p, &[10i8; 6], &filter, &[4; 3], &mut out).unwrap();
        assert_eq!(out, [9, 13, 17, 9, 13, 17, 9, 13, 17]);
        conv2d(
            &p,
            &[10i8, -20, 10, -20, 10, -20],
            &filter,
            &[4; 3],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [-7, -10, -13, -7, -10, -13, -7, -10, -13]);
    }

    #[test]
    fn quant_conv_i8_dilation_examples() {
        // conv2d_quant8_signed: dilation 3, VALID and SAME padding; the float values map to
        // q = v / 0.5 - 128 (input), v / 0.125 - 128 (filter and output).
        let (m, s) = per_tensor(0.5, 0.125, 0.0625, 0.125);
        let q = quant(
            -128,
            PerChannel::Uniform(-128),
            -128,
            PerChannel::Uniform(m),
            PerChannel::Uniform(s),
            (-128, 127),
        );
        let g = ConvGeometry {
            dilation_h: 3,
            dilation_w: 3,
            ..geom(1, [9, 9, 1], [3, 3], [3, 3])
        };
        let mut input = [-128i8; 81];
        for y in 3..6 {
            for x in 3..6 {
                input[y * 9 + x] = -126;
            }
        }
        let filter: Vec<i8> = (1..=9).map(|v| (v * 8 - 128) as i8).collect();
        let mut out = [0i8; 9];
        conv2d(
            &Conv2dParams {
                geometry: g,
                out_c: 1,
                quant: q,
            },
            &input,
            &filter,
            &[0],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [-88; 9]);

        let g = ConvGeometry {
            stride_h: 2,
            stride_w: 2,
            dilation_h: 3,
            dilation_w: 3,
            pad_top: 1,
            pad_left: 1,
            ..geom(1, [6, 6, 1], [3, 3], [2, 2])
        };
        let mut input = [-128i8; 36];
        input[2 * 6 + 2] = -120;
        input[2 * 6 + 3] = -122;
        input[3 * 6 + 2] = -124;
        input[3 * 6 + 3] = -126;
        let mut out = [0i8; 9];
        conv2d(
            &Conv2dParams {
                geometry: g,
                out_c: 1,
                quant: q,
            },
            &input,
            &[-120i8, -112, -104, -96],
            &[0],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [0, -128, -56, -128, -128, -128, -96, -128, -120]);
    }

    #[test]
    fn quant_depthwise_examples() {
        // depthwise_conv2d_quant8_large.
        let (m, s) = per_tensor(0.5, 0.5, 0.25, 1.0);
        let q = quant(
            0,
            PerChannel::Uniform(0),
            0,
            PerChannel::Uniform(m),
            PerChannel::Uniform(s),
            (0, 255),
        );
        let p = DepthwiseConv2dParams {
            geometry: geom(1, [2, 2, 2], [1, 1], [2, 2]),
            depth_multiplier: 1,
            quant: q,
        };
        let mut out = [0u8; 2];
        depthwise_conv2d(
            &p,
            &[4u8, 16, 4, 32, 4, 64, 4, 128],
            &[2u8, 4, 2, 0, 2, 2, 2, 0],
            &[0, 0],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [8, 48]);
        // depthwise_conv2d_per_channel "different": depth multiplier 2.
        let (m, s) = per_channel_multipliers(0.5, &[1.0, 0.5, 1.0, 0.5], 1.0).unwrap();
        let q = quant(
            128,
            PerChannel::Uniform(0),
            128,
            PerChannel::Each(&m),
            PerChannel::Each(&s),
            (0, 255),
        );
        let p = DepthwiseConv2dParams {
            geometry: geom(1, [3, 3, 2], [2, 2], [2, 2]),
            depth_multiplier: 2,
            quant: q,
        };
        let input: Vec<u8> = [129u8, 130].repeat(9);
        let mut out = [0u8; 16];
        depthwise_conv2d(&p, &input, &[1i8; 16], &[4; 4], &mut out).unwrap();
        assert_eq!(out.to_vec(), [132u8, 130, 134, 131].repeat(4));
    }

    /// A per-channel multiplier from the exact (f64) product of the scales, as TFLite's:
    /// channel 19 of face_detection_short_range_int8's first DEPTHWISE_CONV_2D (input seed
    /// 1 of `scripts/litert_compare.py`), whose accumulator 3991 is 9.49805 steps, so 24
    /// with the output zero point 15 in LiteRT's reference kernels. The product rounded to
    /// f32 first (NNAPI's reference) moves the doubling high multiply to just past a half
    /// and the result to 25; through the network that one step became 42 at its outputs.
    #[test]
    fn quant_depthwise_multiplier_from_the_exact_product() {
        let (m, s) =
            per_channel_multipliers(0.017_190_596, &[0.015_125_184], 0.109_254_43).unwrap();
        let q = quant(
            -128,
            PerChannel::Uniform(0),
            15,
            PerChannel::Each(&m),
            PerChannel::Each(&s),
            (-128, 127),
        );
        let p = DepthwiseConv2dParams {
            geometry: geom(1, [3, 3, 1], [1, 1], [3, 3]),
            depth_multiplier: 1,
            quant: q,
        };
        let x: [i8; 9] = [-105, -103, -99, -103, -112, -108, -101, -79, -105];
        let w: [i8; 9] = [-18, -83, -63, 22, -21, -44, 55, 127, 55];
        let mut out = [0i8; 1];
        depthwise_conv2d(&p, &x, &w, &[0], &mut out).unwrap();
        assert_eq!(out, [24]);
    }

    #[test]
    fn quant_fully_connected_examples() {
        // fully_connected_quant8.
        let (m, s) = per_tensor(0.5, 0.5, 0.25, 1.0);
        let q = quant(
            0,
            PerChannel::Uniform(0),
            0,
            PerChannel::Uniform(m),
            PerChannel::Uniform(s),
            (0, 255),
        );
        let p = FullyConnectedParams {
            batches: 3,
            input_size: 1,
            output_size: 1,
            quant: q,
        };
        let mut out = [0u8; 3];
        fully_connected(&p, &[2u8, 32, 16], &[2u8], &[4], &mut out).unwrap();
        assert_eq!(out, [2, 17, 9]);
        // fully_connected_quant8_2 (zero points 127, RELU) and its signed twin.
        let range = quantized_activation_range(1, 1.0, 127, 0, 255);
        let q = quant(
            127,
            PerChannel::Uniform(127),
            127,
            PerChannel::Uniform(m),
            PerChannel::Uniform(s),
            range,
        );
        let p = FullyConnectedParams {
            batches: 2,
            input_size: 10,
            output_size: 3,
            quant: q,
        };
        let weights: Vec<u8> = [129u8, 131, 133, 135, 137, 139, 141, 143, 145, 147].repeat(3);
        let input = [
            129u8, 131, 133, 135, 137, 139, 141, 143, 109, 107, 129, 131, 133, 135, 137, 139, 141,
            111, 145, 107,
        ];
        let mut out = [0u8; 6];
        fully_connected(&p, &input, &weights, &[4, 8, 12], &mut out).unwrap();
        assert_eq!(out, [151, 152, 153, 185, 186, 187]);
        let shift = |v: &[u8]| {
            v.iter()
                .map(|&x| (i32::from(x) - 128) as i8)
                .collect::<Vec<i8>>()
        };
        let range = quantized_activation_range(1, 1.0, -1, -128, 127);
        let p = FullyConnectedParams {
            quant: quant(
                -1,
                PerChannel::Uniform(-1),
                -1,
                PerChannel::Uniform(m),
                PerChannel::Uniform(s),
                range,
            ),
            ..p
        };
        let mut out = [0i8; 6];
        fully_connected(&p, &shift(&input), &shift(&weights), &[4, 8, 12], &mut out).unwrap();
        assert_eq!(out, [23, 24, 25, 57, 58, 59]);
        // fully_connected_quant8_signed: scales 0.2 x 0.2 with bias scale 0.04.
        let (m, s) = per_tensor(0.2, 0.2, 0.04, 1.0);
        let q = quant(
            -128,
            PerChannel::Uniform(-128),
            -128,
            PerChannel::Uniform(m),
            PerChannel::Uniform(s),
            (-128, 127),
        );
        let p = FullyConnectedParams {
            batches: 1,
            input_size: 5,
            output_size: 1,
            quant: q,
        };
        let mut out = [0i8; 1];
        fully_connected(
            &p,
            &[-118i8; 5],
            &[-118i8, -108, -108, -108, -118],
            &[10],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [-96]);
    }

    #[test]
    fn quant_kernels_reject_bad_params() {
        let q = quant(
            0,
            PerChannel::Uniform(0),
            0,
            PerChannel::Uniform(1 << 30),
            PerChannel::Uniform(0),
            (0, 255),
        );
        let p = Conv2dParams {
            geometry: geom(1, [2, 2, 1], [2, 2], [1, 1]),
            out_c: 2,
            quant: q,
        };
        let mut out = [0u8; 8];
        let (input, filter, bias) = ([1u8; 4], [1u8; 2], [0; 2]);
        assert!(conv2d(&p, &input, &filter, &bias, &mut out).is_ok());
        assert!(conv2d(&p, &input[..3], &filter, &bias, &mut out).is_err());
        assert!(conv2d(&p, &input, &filter, &bias[..1], &mut out).is_err());
        assert!(conv2d(&p, &input, &filter, &bias, &mut out[..7]).is_err());
        let bad = Conv2dParams {
            quant: QuantParams {
                act_min: 5,
                act_max: 4,
                ..q
            },
            ..p
        };
        assert!(conv2d(&bad, &input, &filter, &bias, &mut out).is_err());
        let bad = Conv2dParams {
            quant: QuantParams {
                output_shift: PerChannel::Each(&[0]),
                ..q
            },
            ..p
        };
        assert!(conv2d(&bad, &input, &filter, &bias, &mut out).is_err());
        let bad = Conv2dParams {
            geometry: ConvGeometry {
                stride_h: 0,
                ..p.geometry
            },
            ..p
        };
        assert!(conv2d(&bad, &input, &filter, &bias, &mut out).is_err());
        let huge = ConvGeometry {
            out_h: usize::MAX,
            stride_h: 2,
            ..p.geometry
        };
        assert!(conv2d(
            &Conv2dParams {
                geometry: huge,
                ..p
            },
            &input,
            &filter,
            &bias,
            &mut out
        )
        .is_err());
        let huge = ConvGeometry {
            batches: usize::MAX,
            in_h: 3,
            ..p.geometry
        };
        assert!(conv2d(
            &Conv2dParams {
                geometry: huge,
                ..p
            },
            &input,
            &filter,
            &bias,
            &mut out
        )
        .is_err());
        let dw = DepthwiseConv2dParams {
            geometry: p.geometry,
            depth_multiplier: usize::MAX,
            quant: q,
        };
        assert!(depthwise_conv2d(&dw, &input, &filter, &bias, &mut out).is_err());
        let fc = FullyConnectedParams {
            batches: 2,
            input_size: 2,
            output_size: 2,
            quant: q,
        };
        assert!(fully_connected(&fc, &input, &filter, &bias, &mut out[..4]).is_err());
    }

    #[test]
    fn quant_empty_reductions_and_outputs() {
        let (m, s) = quantize_multiplier(0.5);
        let q = quant(
            3,
            PerChannel::Uniform(7),
            10,
            PerChannel::Uniform(m),
            PerChannel::Uniform(s),
            (0, 255),
        );
        // No input channels: every output is requantize(bias).
        let p = Conv2dParams {
            geometry: geom(1, [2, 2, 0], [2, 2], [1, 1]),
            out_c: 2,
            quant: q,
        };
        let mut out = [0u8; 8];
        conv2d::<u8, u8>(&p, &[], &[], &[4, -6], &mut out).unwrap();
        assert_eq!(out, [12, 7, 12, 7, 12, 7, 12, 7]);
        let fc = FullyConnectedParams {
            batches: 2,
            input_size: 0,
            output_size: 2,
            quant: q,
        };
        let mut out = [0u8; 4];
        fully_connected::<u8, u8>(&fc, &[], &[], &[4, -6], &mut out).unwrap();
        assert_eq!(out, [12, 7, 12, 7]);
        // A window wholly in the padding also sums to 0.
        let g = ConvGeometry {
            pad_top: 5,
            ..geom(1, [1, 1, 1], [1, 1], [1, 1])
        };
        let mut out = [0u8; 2];
        conv2d(
            &Conv2dParams {
                geometry: g,
                out_c: 2,
                quant: q,
            },
            &[200u8],
            &[9u8, 9],
            &[4, -6],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [12, 7]);
        // No batches: nothing to do, whatever the channel count.
        let g = ConvGeometry {
            batches: 0,
            ..geom(1, [1, 1, 1], [1, 1], [1, 1])
        };
        let p = Conv2dParams {
            geometry: g,
            out_c: 1,
            quant: q,
        };
        conv2d::<u8, u8>(&p, &[], &[1], &[0], &mut []).unwrap();
    }

    /// Quantisation of a random case: scales, zero points, activation.
    #[derive(Debug, Clone)]
    struct QuantCase {
        s_in: f32,
        s_out: f32,
        /// One scale per output channel (all equal when per-tensor).
        s_f: Vec<f32>,
        in_zp: i32,
        out_zp: i32,
        /// One zero point per output channel (all equal when per-tensor).
        f_zp: Vec<i32>,
        per_channel: bool,
        act: u32,
        bias: Vec<i32>,
    }

    fn quant_case<T: Elem, F: Elem>(
        channels: usize,
        per_channel: bool,
    ) -> impl Strategy<Value = QuantCase> {
        (
            0.01f32..1.0,
            0.01f32..2.0,
            proptest::collection::vec(0.01f32..1.0, channels),
            T::MIN..=T::MAX,
            T::MIN..=T::MAX,
            proptest::collection::vec(F::MIN..=F::MAX, channels),
            0u32..4,
            proptest::collection::vec(-3000i32..3000, channels),
        )
            .prop_map(
                move |(s_in, s_out, mut s_f, in_zp, out_zp, mut f_zp, act, bias)| {
                    if !per_channel {
                        let (s, z) = (s_f[0], f_zp[0]);
                        s_f.fill(s);
                        f_zp.fill(z);
                    }
                    QuantCase {
                        s_in,
                        s_out,
                        s_f,
                        in_zp,
                        out_zp,
                        f_zp,
                        per_channel,
                        act,
                        bias,
                    }
                },
            )
    }

    impl QuantCase {
        fn multipliers(&self) -> (Vec<i32>, Vec<i32>) {
            if self.per_channel {
                per_channel_multipliers(self.s_in, &self.s_f, self.s_out).unwrap()
            } else {
                let (m, s) =
                    per_tensor(self.s_in, self.s_f[0], self.s_in * self.s_f[0], self.s_out);
                (vec![m; self.s_f.len()], vec![s; self.s_f.len()])
            }
        }

        fn range<T: QuantElem>(&self) -> (i32, i32) {
            quantized_activation_range(self.act, self.s_out, self.out_zp, T::MIN, T::MAX)
        }

        /// The kernel parameters; uniform values when per-tensor, to exercise that path.
        fn params<'a, T: QuantElem>(&'a self, m: &'a [i32], s: &'a [i32]) -> QuantParams<'a> {
            let pick = |v: &'a [i32]| {
                if self.per_channel {
                    PerChannel::Each(v)
                } else {
                    PerChannel::Uniform(v[0])
                }
            };
            quant(
                self.in_zp,
                pick(&self.f_zp),
                self.out_zp,
                pick(m),
                pick(s),
                self.range::<T>(),
            )
        }

        /// The float reference of one output: dequantise, accumulate in f64, requantise
        /// rounding half away from zero, clamp.
        fn reference<T: QuantElem>(&self, terms: &[(i32, i32)], o: usize) -> i32 {
            let (s_in, s_f, s_out) = (
                f64::from(self.s_in),
                f64::from(self.s_f[o]),
                f64::from(self.s_out),
            );
            let real: f64 = terms
                .iter()
                .map(|&(x, w)| f64::from(x - self.in_zp) * s_in * f64::from(w - self.f_zp[o]) * s_f)
                .sum::<f64>()
                + f64::from(self.bias[o]) * s_in * s_f;
            let (lo, hi) = self.range::<T>();
            let q = (real / s_out).round() + f64::from(self.out_zp);
            q.clamp(f64::from(lo), f64::from(hi)) as i32
        }
    }

    fn close<T: QuantElem>(got: &[T], want: &[i32]) -> std::result::Result<(), TestCaseError> {
        prop_assert_eq!(got.len(), want.len());
        for (i, (g, &w)) in got.iter().zip(want).enumerate() {
            prop_assert!(
                (g.to_i32() - w).abs() <= 1,
                "output {}: got {:?}, want {}",
                i,
                g,
                w
            );
        }
        Ok(())
    }

    /// Random geometry with NNAPI's output size for explicit padding; the bottom/right padding
    /// is grown when needed so that the output is never empty.
    fn geometry() -> impl Strategy<Value = ConvGeometry> {
        let dims = (0usize..3, 1usize..7, 1usize..7, 1usize..5);
        let window = (
            1usize..4,
            1usize..4,
            1usize..3,
            1usize..3,
            1usize..3,
            1usize..3,
        );
        let pads = (0usize..3, 0usize..3, 0usize..3, 0usize..3);
        (dims, window, pads).prop_map(
            |(
                (batches, in_h, in_w, in_c),
                (filter_h, filter_w, stride_h, stride_w, dilation_h, dilation_w),
                (pt, pb, pl, pr),
            )| {
                let out = |size: usize, f: usize, d: usize, s: usize, head: usize, tail: usize| {
                    let eff = (f - 1) * d + 1;
                    (size + head + tail).saturating_sub(eff) / s + 1
                };
                ConvGeometry {
                    batches,
                    in_h,
                    in_w,
                    in_c,
                    out_h: out(in_h, filter_h, dilation_h, stride_h, pt, pb),
                    out_w: out(in_w, filter_w, dilation_w, stride_w, pl, pr),
                    filter_h,
                    filter_w,
                    stride_h,
                    stride_w,
                    dilation_h,
                    dilation_w,
                    pad_top: pt,
                    pad_left: pl,
                }
            },
        )
    }

    /// The in-bounds taps `(input index, filter tap index)` of output pixel `(oy, ox)`.
    fn taps(g: &ConvGeometry, oy: usize, ox: usize) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        for ky in 0..g.filter_h {
            for kx in 0..g.filter_w {
                let iy = (oy * g.stride_h + ky * g.dilation_h) as i64 - g.pad_top as i64;
                let ix = (ox * g.stride_w + kx * g.dilation_w) as i64 - g.pad_left as i64;
                if (0..g.in_h as i64).contains(&iy) && (0..g.in_w as i64).contains(&ix) {
                    v.push(((iy as usize) * g.in_w + ix as usize, ky * g.filter_w + kx));
                }
            }
        }
        v
    }

    fn bytes(n: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), n)
    }

    fn conv_case<T: Elem, F: Elem>(
        per_channel: bool,
    ) -> impl Strategy<Value = (ConvGeometry, usize, QuantCase, Vec<u8>, Vec<u8>)> {
        (geometry(), 1usize..5).prop_flat_map(move |(g, out_c)| {
            let n_in = g.batches * g.in_h * g.in_w * g.in_c;
            let n_f = out_c * g.filter_h * g.filter_w * g.in_c;
            (
                Just(g),
                Just(out_c),
                quant_case::<T, F>(out_c, per_channel),
                bytes(n_in),
                bytes(n_f),
            )
        })
    }

    fn check_conv<T: Elem, F: Elem>(
        (g, out_c, qc, input, filter): (ConvGeometry, usize, QuantCase, Vec<u8>, Vec<u8>),
    ) -> std::result::Result<(), TestCaseError> {
        let input: Vec<T> = input.into_iter().map(T::from_byte).collect();
        let filter: Vec<F> = filter.into_iter().map(F::from_byte).collect();
        let (m, s) = qc.multipliers();
        let p = Conv2dParams {
            geometry: g,
            out_c,
            quant: qc.params::<T>(&m, &s),
        };
        let mut out = vec![T::saturate_from_i32(0); g.batches * g.out_h * g.out_w * out_c];
        conv2d(&p, &input, &filter, &qc.bias, &mut out).unwrap();
        let k = g.filter_h * g.filter_w * g.in_c;
        let mut want = Vec::new();
        for n in 0..g.batches {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    let taps = taps(&g, oy, ox);
                    for o in 0..out_c {
                        let mut terms = Vec::new();
                        for &(pix, tap) in &taps {
                            for c in 0..g.in_c {
                                let x = input[(n * g.in_h * g.in_w + pix) * g.in_c + c].to_i32();
                                let w = filter[o * k + tap * g.in_c + c].to_i32();
                                terms.push((x, w));
                            }
                        }
                        want.push(qc.reference::<T>(&terms, o));
                    }
                }
            }
        }
        close(&out, &want)
    }

    fn dw_case<T: Elem, F: Elem>(
        per_channel: bool,
    ) -> impl Strategy<Value = (ConvGeometry, usize, QuantCase, Vec<u8>, Vec<u8>)> {
        (geometry(), 1usize..4).prop_flat_map(move |(g, mult)| {
            let out_c = g.in_c * mult;
            let n_in = g.batches * g.in_h * g.in_w * g.in_c;
            let n_f = g.filter_h * g.filter_w * out_c;
            (
                Just(g),
                Just(mult),
                quant_case::<T, F>(out_c, per_channel),
                bytes(n_in),
                bytes(n_f),
            )
        })
    }

    /// [`dw_case`] with a depth multiplier of 1, 8 to 70 channels and filters 1 to 6
    /// wide (the vector rows, pair and quad words, every step width and an overlapping
    /// last step).
    fn wide_dw_case<T: Elem, F: Elem>(
        per_channel: bool,
    ) -> impl Strategy<Value = (ConvGeometry, usize, QuantCase, Vec<u8>, Vec<u8>)> {
        (geometry(), 8usize..70, 1usize..7).prop_flat_map(move |(g, in_c, filter_w)| {
            // The output width for the new filter width (the right padding as the left).
            let reach = (filter_w - 1) * g.dilation_w + 1;
            let out_w = (g.in_w + 2 * g.pad_left).saturating_sub(reach) / g.stride_w + 1;
            let g = ConvGeometry {
                in_c,
                filter_w,
                out_w,
                ..g
            };
            let n_in = g.batches * g.in_h * g.in_w * g.in_c;
            let n_f = g.filter_h * g.filter_w * in_c;
            (
                Just(g),
                Just(1),
                quant_case::<T, F>(in_c, per_channel),
                bytes(n_in),
                bytes(n_f),
            )
        })
    }

    fn check_depthwise<T: Elem, F: Elem>(
        (g, mult, qc, input, filter): (ConvGeometry, usize, QuantCase, Vec<u8>, Vec<u8>),
    ) -> std::result::Result<(), TestCaseError> {
        let input: Vec<T> = input.into_iter().map(T::from_byte).collect();
        let filter: Vec<F> = filter.into_iter().map(F::from_byte).collect();
        let (m, s) = qc.multipliers();
        let p = DepthwiseConv2dParams {
            geometry: g,
            depth_multiplier: mult,
            quant: qc.params::<T>(&m, &s),
        };
        let out_c = g.in_c * mult;
        let mut out = vec![T::saturate_from_i32(0); g.batches * g.out_h * g.out_w * out_c];
        depthwise_conv2d(&p, &input, &filter, &qc.bias, &mut out).unwrap();
        let mut want = Vec::new();
        for n in 0..g.batches {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    let taps = taps(&g, oy, ox);
                    for o in 0..out_c {
                        let c = o / mult;
                        let terms: Vec<(i32, i32)> = taps
                            .iter()
                            .map(|&(pix, tap)| {
                                (
                                    input[(n * g.in_h * g.in_w + pix) * g.in_c + c].to_i32(),
                                    filter[tap * out_c + o].to_i32(),
                                )
                            })
                            .collect();
                        want.push(qc.reference::<T>(&terms, o));
                    }
                }
            }
        }
        close(&out, &want)
    }

    /// FULLY_CONNECTED cases with batches, input size and output size drawn from the
    /// given ranges.
    fn fc_case_in<T: Elem, F: Elem>(
        per_channel: bool,
        ranges: (Range<usize>, Range<usize>, Range<usize>),
    ) -> impl Strategy<Value = (usize, usize, usize, QuantCase, Vec<u8>, Vec<u8>)> {
        ranges.prop_flat_map(move |(b, k, n)| {
            (
                Just(b),
                Just(k),
                Just(n),
                quant_case::<T, F>(n, per_channel),
                bytes(b * k),
                bytes(n * k),
            )
        })
    }

    fn fc_case<T: Elem, F: Elem>(
        per_channel: bool,
    ) -> impl Strategy<Value = (usize, usize, usize, QuantCase, Vec<u8>, Vec<u8>)> {
        fc_case_in::<T, F>(per_channel, (0..4, 1..20, 1..6))
    }

    /// Batches large enough for the integer GEMM.
    fn fc_gemm_case<T: Elem, F: Elem>(
        per_channel: bool,
    ) -> impl Strategy<Value = (usize, usize, usize, QuantCase, Vec<u8>, Vec<u8>)> {
        fc_case_in::<T, F>(per_channel, (FC_GEMM_ROWS..30, 1..40, 1..40))
    }

    /// FULLY_CONNECTED on the integer GEMM (a batch of rows) against the plain dot products
    /// (the same rows one at a time): bit-identical. Run on the drawn weights (mostly the
    /// `i16` pair form) and on weights within `i8` of each unit's zero point (the byte
    /// form).
    fn check_fc_gemm<T: Elem + PartialEq, F: Elem>(
        (b, k, n, qc, input, weights): (usize, usize, usize, QuantCase, Vec<u8>, Vec<u8>),
    ) -> std::result::Result<(), TestCaseError> {
        let near: Vec<u8> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let w = qc.f_zp[i / k.max(1)] + i32::from(w as i8);
                F::saturate_from_i32(w).to_i32() as u8
            })
            .collect();
        check_fc_rows::<T, F>((b, k, n, qc.clone(), input.clone(), weights))?;
        check_fc_rows::<T, F>((b, k, n, qc, input, near))
    }

    fn check_fc_rows<T: Elem + PartialEq, F: Elem>(
        (b, k, n, qc, input, weights): (usize, usize, usize, QuantCase, Vec<u8>, Vec<u8>),
    ) -> std::result::Result<(), TestCaseError> {
        let input: Vec<T> = input.into_iter().map(T::from_byte).collect();
        let weights: Vec<F> = weights.into_iter().map(F::from_byte).collect();
        let (m, s) = qc.multipliers();
        let p = FullyConnectedParams {
            batches: b,
            input_size: k,
            output_size: n,
            quant: qc.params::<T>(&m, &s),
        };
        let mut got = vec![T::saturate_from_i32(0); b * n];
        fully_connected(&p, &input, &weights, &qc.bias, &mut got).unwrap();
        let one = FullyConnectedParams { batches: 1, ..p };
        for (x, want) in input.chunks_exact(k).zip(got.chunks_exact(n)) {
            let mut row = vec![T::saturate_from_i32(0); n];
            fully_connected(&one, x, &weights, &qc.bias, &mut row).unwrap();
            prop_assert_eq!(&row[..], want);
        }
        Ok(())
    }

    fn check_fc<T: Elem, F: Elem>(
        (b, k, n, qc, input, weights): (usize, usize, usize, QuantCase, Vec<u8>, Vec<u8>),
    ) -> std::result::Result<(), TestCaseError> {
        let input: Vec<T> = input.into_iter().map(T::from_byte).collect();
        let weights: Vec<F> = weights.into_iter().map(F::from_byte).collect();
        let (m, s) = qc.multipliers();
        let p = FullyConnectedParams {
            batches: b,
            input_size: k,
            output_size: n,
            quant: qc.params::<T>(&m, &s),
        };
        let mut out = vec![T::saturate_from_i32(0); b * n];
        fully_connected(&p, &input, &weights, &qc.bias, &mut out).unwrap();
        let mut want = Vec::new();
        for row in 0..b {
            for o in 0..n {
                let terms: Vec<(i32, i32)> = (0..k)
                    .map(|i| (input[row * k + i].to_i32(), weights[o * k + i].to_i32()))
                    .collect();
                want.push(qc.reference::<T>(&terms, o));
            }
        }
        close(&out, &want)
    }

    /// The integer GEMM paths (byte and `i16` pair forms) against the plain `i32` loop, on
    /// every ISA level this CPU has: bit-identical outputs, over shapes that cross the
    /// GEMMs' tile, panel and group edges. Run on the drawn filter (whose values minus a
    /// random zero point mostly miss `i8`: the pair form) and on one drawn within `i8` of
    /// each channel's zero point (the byte form, whatever the zero point).
    fn check_conv_levels<T: Elem + PartialEq, F: Elem>(
        (g, out_c, qc, input, filter): (ConvGeometry, usize, QuantCase, Vec<u8>, Vec<u8>),
    ) -> std::result::Result<(), TestCaseError> {
        let k = g.filter_h * g.filter_w * g.in_c;
        let near: Vec<u8> = filter
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                let w = qc.f_zp[i / k.max(1)] + i32::from(b as i8);
                F::saturate_from_i32(w).to_i32() as u8
            })
            .collect();
        check_conv_paths::<T, F>(&g, out_c, &qc, &input, &filter)?;
        check_conv_paths::<T, F>(&g, out_c, &qc, &input, &near)
    }

    fn check_conv_paths<T: Elem + PartialEq, F: Elem>(
        g: &ConvGeometry,
        out_c: usize,
        qc: &QuantCase,
        input: &[u8],
        filter: &[u8],
    ) -> std::result::Result<(), TestCaseError> {
        let input: Vec<T> = input.iter().map(|&b| T::from_byte(b)).collect();
        let filter: Vec<F> = filter.iter().map(|&b| F::from_byte(b)).collect();
        let (m, s) = qc.multipliers();
        let q = qc.params::<T>(&m, &s);
        let stage = OutputStage::new(&q, out_c, &qc.bias).unwrap();
        let k = g.filter_h * g.filter_w * g.in_c;
        let len = g.batches * g.out_h * g.out_w * out_c;
        let mut want = vec![T::saturate_from_i32(0); len];
        conv_plain(g, out_c, &input, &filter, &stage, qc.in_zp, &mut want).unwrap();
        let pairs = stage.pack(&filter, k).unwrap();
        let packed = stage.pack_bytes(&filter, k);
        let pad = bytes::zero_byte::<T>(qc.in_zp).unwrap();
        for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
            if level > crate::kernels::isa::detected() {
                continue;
            }
            let mut got = vec![T::saturate_from_i32(0); len];
            let kern = igemm::kernel_for(level);
            conv_igemm(kern, g, out_c, &input, &pairs, &stage, qc.in_zp, &mut got).unwrap();
            prop_assert_eq!(&got, &want, "pairs {:?}", level);
            if let Some(packed) = &packed {
                let mut got = vec![T::saturate_from_i32(0); len];
                let kern = igemm::quads::kernel_for(level);
                bytes::conv_gemm(kern, g, out_c, &input, packed, &stage, pad, &mut got).unwrap();
                prop_assert_eq!(&got, &want, "bytes {:?}", level);
                // With the direct kernel where it takes the geometry.
                let mut got = vec![T::saturate_from_i32(0); len];
                bytes::conv_bytes(level, g, out_c, &input, packed, &stage, pad, &mut got).unwrap();
                prop_assert_eq!(&got, &want, "shallow bytes {:?}", level);
            }
        }
        let p = Conv2dParams {
            geometry: *g,
            out_c,
            quant: q,
        };
        let mut got = vec![T::saturate_from_i32(0); len];
        conv2d(&p, &input, &filter, &qc.bias, &mut got).unwrap();
        prop_assert_eq!(&got, &want);
        if let Some(packed) = packed {
            // As a filter in Layout::IntPanels reaches the kernel: little-endian words.
            let words: Vec<i32> = packed
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let mut got = vec![T::saturate_from_i32(0); len];
            conv2d_packed(&p, &input, &words, &qc.bias, &mut got).unwrap();
            prop_assert_eq!(&got, &want);
            // An input zero point outside the type (no padding byte): the other paths.
            let zp = qc.in_zp + 300;
            conv_plain(g, out_c, &input, &filter, &stage, zp, &mut want).unwrap();
            let far = QuantParams {
                input_zero_point: zp,
                ..q
            };
            let p = Conv2dParams { quant: far, ..p };
            conv2d_packed(&p, &input, &words, &qc.bias, &mut got).unwrap();
            prop_assert_eq!(&got, &want);
        }
        Ok(())
    }

    fn wide_conv_case<T: Elem, F: Elem>(
        per_channel: bool,
    ) -> impl Strategy<Value = (ConvGeometry, usize, QuantCase, Vec<u8>, Vec<u8>)> {
        conv_case_of::<T, F>(per_channel, geometry())
    }

    /// [`wide_conv_case`] of 1x1 windows without top or left padding (one input pixel
    /// per output pixel where the output stays inside the input).
    fn pixel_conv_case<T: Elem, F: Elem>(
        per_channel: bool,
    ) -> impl Strategy<Value = (ConvGeometry, usize, QuantCase, Vec<u8>, Vec<u8>)> {
        let g = (geometry(), 0usize..2, 0usize..2).prop_map(|(g, pb, pr)| {
            let out = |size: usize, s: usize, tail: usize| (size + tail - 1) / s + 1;
            ConvGeometry {
                filter_h: 1,
                filter_w: 1,
                pad_top: 0,
                pad_left: 0,
                out_h: out(g.in_h, g.stride_h, pb),
                out_w: out(g.in_w, g.stride_w, pr),
                ..g
            }
        });
        conv_case_of::<T, F>(per_channel, g)
    }

    fn conv_case_of<T: Elem, F: Elem>(
        per_channel: bool,
        geometry: impl Strategy<Value = ConvGeometry>,
    ) -> impl Strategy<Value = (ConvGeometry, usize, QuantCase, Vec<u8>, Vec<u8>)> {
        (geometry, 1usize..40, 1usize..24).prop_flat_map(move |(g, out_c, in_c)| {
            let g = ConvGeometry { in_c, ..g };
            let n_in = g.batches * g.in_h * g.in_w * g.in_c;
            let n_f = out_c * g.filter_h * g.filter_w * g.in_c;
            (
                Just(g),
                Just(out_c),
                quant_case::<T, F>(out_c, per_channel),
                bytes(n_in),
                bytes(n_f),
            )
        })
    }

    proptest! {
        #![proptest_config(cfg())]
        #[test]
        fn quant_fc_igemm_bit_identical_u8(case in fc_gemm_case::<u8, u8>(false)) { check_fc_gemm::<u8, u8>(case)?; }
        #[test]
        fn quant_fc_igemm_bit_identical_i8_per_channel(case in fc_gemm_case::<i8, i8>(true)) { check_fc_gemm::<i8, i8>(case)?; }
        #[test]
        fn quant_conv_igemm_bit_identical_u8(case in wide_conv_case::<u8, u8>(false)) { check_conv_levels::<u8, u8>(case)?; }
        #[test]
        fn quant_conv_igemm_bit_identical_i8(case in wide_conv_case::<i8, i8>(false)) { check_conv_levels::<i8, i8>(case)?; }
        #[test]
        fn quant_conv_igemm_bit_identical_u8_per_channel(case in wide_conv_case::<u8, i8>(true)) { check_conv_levels::<u8, i8>(case)?; }
        #[test]
        fn quant_conv_igemm_bit_identical_i8_per_channel(case in wide_conv_case::<i8, i8>(true)) { check_conv_levels::<i8, i8>(case)?; }
        #[test]
        fn quant_conv_1x1_pixels_bit_identical_u8(case in pixel_conv_case::<u8, u8>(false)) { check_conv_levels::<u8, u8>(case)?; }
        #[test]
        fn quant_conv_1x1_pixels_bit_identical_i8_per_channel(case in pixel_conv_case::<i8, i8>(true)) { check_conv_levels::<i8, i8>(case)?; }

        #[test]
        fn quant_conv_u8_per_tensor(case in conv_case::<u8, u8>(false)) { check_conv::<u8, u8>(case)?; }
        #[test]
        fn quant_conv_i8_per_tensor(case in conv_case::<i8, i8>(false)) { check_conv::<i8, i8>(case)?; }
        #[test]
        fn quant_conv_u8_per_channel(case in conv_case::<u8, i8>(true)) { check_conv::<u8, i8>(case)?; }
        #[test]
        fn quant_conv_i8_per_channel(case in conv_case::<i8, i8>(true)) { check_conv::<i8, i8>(case)?; }

        #[test]
        fn quant_depthwise_u8_per_tensor(case in dw_case::<u8, u8>(false)) { check_depthwise::<u8, u8>(case)?; }
        #[test]
        fn quant_depthwise_i8_per_tensor(case in dw_case::<i8, i8>(false)) { check_depthwise::<i8, i8>(case)?; }
        #[test]
        fn quant_depthwise_u8_per_channel(case in dw_case::<u8, i8>(true)) { check_depthwise::<u8, i8>(case)?; }
        #[test]
        fn quant_depthwise_i8_per_channel(case in dw_case::<i8, i8>(true)) { check_depthwise::<i8, i8>(case)?; }

        #[test]
        fn quant_depthwise_wide_u8_per_tensor(case in wide_dw_case::<u8, u8>(false)) { check_depthwise::<u8, u8>(case)?; }
        #[test]
        fn quant_depthwise_wide_i8_per_channel(case in wide_dw_case::<i8, i8>(true)) { check_depthwise::<i8, i8>(case)?; }
        #[test]
        fn quant_depthwise_wide_u8_per_channel(case in wide_dw_case::<u8, i8>(true)) { check_depthwise::<u8, i8>(case)?; }

        #[test]
        fn quant_fc_u8(case in fc_case::<u8, u8>(false)) { check_fc::<u8, u8>(case)?; }
        #[test]
        fn quant_fc_i8(case in fc_case::<i8, i8>(false)) { check_fc::<i8, i8>(case)?; }
        #[test]
        fn quant_fc_i8_per_channel(case in fc_case::<i8, i8>(true)) { check_fc::<i8, i8>(case)?; }

        /// Arbitrary parameters and buffers never panic.
        #[test]
        fn quant_kernels_total(
            dims in proptest::collection::vec(0usize..5, 14),
            out_c in 0usize..4,
            zps in proptest::collection::vec(any::<i32>(), 3),
            ms in proptest::collection::vec(any::<i32>(), 0..5),
            ss in proptest::collection::vec(-70i32..70, 0..5),
            act in (any::<i32>(), any::<i32>()),
            lens in proptest::collection::vec(0usize..40, 4),
        ) {
            let g = ConvGeometry {
                batches: dims[0], in_h: dims[1], in_w: dims[2], in_c: dims[3], out_h: dims[4],
                out_w: dims[5], filter_h: dims[6], filter_w: dims[7], stride_h: dims[8],
                stride_w: dims[9], dilation_h: dims[10], dilation_w: dims[11], pad_top: dims[12],
                pad_left: dims[13],
            };
            fn per(v: &[i32]) -> PerChannel<'_> {
                match v {
                    [one] => PerChannel::Uniform(*one),
                    _ => PerChannel::Each(v),
                }
            }
            let q = QuantParams {
                input_zero_point: zps[0],
                filter_zero_point: PerChannel::Uniform(zps[1]),
                output_zero_point: zps[2],
                output_multiplier: per(&ms),
                output_shift: per(&ss),
                act_min: act.0,
                act_max: act.1,
                epilogue: None,
            };
            let input = vec![7u8; lens[0]];
            let filter = vec![200u8; lens[1]];
            let bias = vec![i32::MAX; lens[2]];
            let mut out = vec![0u8; lens[3]];
            let _ = conv2d(&Conv2dParams { geometry: g, out_c, quant: q }, &input, &filter, &bias, &mut out);
            let _ = depthwise_conv2d(&DepthwiseConv2dParams { geometry: g, depth_multiplier: out_c, quant: q }, &input, &filter, &bias, &mut out);
            let fc = FullyConnectedParams { batches: dims[0], input_size: dims[1], output_size: out_c, quant: q };
            let _ = fully_connected(&fc, &input, &filter, &bias, &mut out);
        }
    }
}
