//! Shape inference for every op, and the data-movement kernels: RESHAPE (a copy, in
//! `mod.rs`), CONCATENATION, DEPTH_TO_SPACE, SPACE_TO_DEPTH, RESIZE_BILINEAR, PAD, TRANSPOSE,
//! plus the NCHW <-> NHWC helpers used by the spatial kernels.

use super::{
    bad_shape, checked_product, KernelError, KernelOp, Padding, Result, Tensor, TensorMut,
};

/// Resolves a possibly negative axis against `rank`.
pub(crate) fn resolve_axis(op: &KernelOp, axis: i32, rank: usize) -> Result<usize> {
    let r = i64::try_from(rank).map_err(|_| KernelError::TooLarge)?;
    let a = i64::from(axis);
    let a = if a < 0 { a + r } else { a };
    if a < 0 || a >= r {
        return Err(bad_shape(
            op,
            format!("axis {axis} out of range for rank {rank}"),
        ));
    }
    usize::try_from(a).map_err(|_| KernelError::TooLarge)
}

/// Output (height, width) of a convolution window sliding over a padded input.
fn window_out(
    (h, w): (usize, usize),
    pad: &Padding,
    (kh, kw): (usize, usize),
    (dh, dw): (u32, u32),
    (sh, sw): (u32, u32),
) -> std::result::Result<(usize, usize), String> {
    let oh = conv_out_size(h, pad.top, pad.bottom, kh, dh, sh)
        .ok_or_else(|| "filter taller than the padded input".to_string())?;
    let ow = conv_out_size(w, pad.left, pad.right, kw, dw, sw)
        .ok_or_else(|| "filter wider than the padded input".to_string())?;
    Ok((oh, ow))
}

/// `(in + pad_a + pad_b - ((k-1)*dilation+1)) / stride + 1`, or `None` if the padded input is
/// smaller than the effective filter or anything overflows.
pub(crate) fn conv_out_size(
    input: usize,
    pad_a: u32,
    pad_b: u32,
    k: usize,
    dilation: u32,
    stride: u32,
) -> Option<usize> {
    let eff = k
        .checked_sub(1)?
        .checked_mul(dilation as usize)?
        .checked_add(1)?;
    let total = input
        .checked_add(pad_a as usize)?
        .checked_add(pad_b as usize)?;
    let span = total.checked_sub(eff)?;
    if stride == 0 {
        return None;
    }
    (span / stride as usize).checked_add(1)
}

/// `(n, h, w, c)` of a rank-4 shape in the given layout.
pub(crate) fn nhwc_dims(shape: &[usize], nchw: bool) -> Option<(usize, usize, usize, usize)> {
    match *shape {
        [n, c, h, w] if nchw => Some((n, h, w, c)),
        [n, h, w, c] if !nchw => Some((n, h, w, c)),
        _ => None,
    }
}

pub(crate) fn layout_shape(n: usize, h: usize, w: usize, c: usize, nchw: bool) -> Vec<usize> {
    if nchw {
        vec![n, c, h, w]
    } else {
        vec![n, h, w, c]
    }
}

/// Copies an NCHW tensor into a new NHWC buffer.
pub(crate) fn nchw_to_nhwc(src: &[f32], n: usize, c: usize, h: usize, w: usize) -> Vec<f32> {
    let mut dst = vec![0.0f32; src.len()];
    let hw = h * w;
    for b in 0..n {
        let s = &src[b * c * hw..(b + 1) * c * hw];
        let d = &mut dst[b * c * hw..(b + 1) * c * hw];
        for ch in 0..c {
            for p in 0..hw {
                d[p * c + ch] = s[ch * hw + p];
            }
        }
    }
    dst
}

/// Copies an NHWC buffer into an NCHW destination.
pub(crate) fn nhwc_to_nchw(src: &[f32], n: usize, h: usize, w: usize, c: usize, dst: &mut [f32]) {
    let hw = h * w;
    for b in 0..n {
        let s = &src[b * c * hw..(b + 1) * c * hw];
        let d = &mut dst[b * c * hw..(b + 1) * c * hw];
        for p in 0..hw {
            for ch in 0..c {
                d[ch * hw + p] = s[p * c + ch];
            }
        }
    }
}

/// Runs an NHWC kernel on a tensor in either layout: NCHW data is transposed in and out.
/// `f(input_nhwc, output_nhwc)`; the output's NHWC dims are `out_nhwc`.
pub(crate) fn with_nhwc<F>(nchw: bool, x: Tensor<'_>, out: TensorMut<'_>, f: F) -> Result<()>
where
    F: FnOnce(&[f32], &mut [f32]) -> Result<()>,
{
    if !nchw {
        return f(x.data, out.data);
    }
    let (n, h, w, c) = nhwc_dims(x.shape, true).ok_or(KernelError::TooLarge)?;
    let (on, oh, ow, oc) = nhwc_dims(out.shape, true).ok_or(KernelError::TooLarge)?;
    let xin = nchw_to_nhwc(x.data, n, c, h, w);
    let mut tmp = vec![0.0f32; out.data.len()];
    f(&xin, &mut tmp)?;
    nhwc_to_nchw(&tmp, on, oh, ow, oc, out.data);
    Ok(())
}

/// The output shape of `op` for the given input shapes (count and per-tensor size limits are
/// already checked by the caller).
pub(crate) fn output_shape(op: &KernelOp, inputs: &[&[usize]]) -> Result<Vec<usize>> {
    let bad = |reason: String| bad_shape(op, reason);
    let first = inputs.first().copied().unwrap_or(&[]);
    match op {
        KernelOp::Binary { .. } => {
            let (a, b) = (first, inputs.get(1).copied().unwrap_or(&[]));
            let rank = a.len().max(b.len());
            let mut out = vec![0usize; rank];
            for i in 0..rank {
                let da = if i < rank - a.len() {
                    1
                } else {
                    a[i - (rank - a.len())]
                };
                let db = if i < rank - b.len() {
                    1
                } else {
                    b[i - (rank - b.len())]
                };
                out[i] = if da == db || db == 1 {
                    da
                } else if da == 1 {
                    db
                } else {
                    return Err(bad(format!("shapes {a:?} and {b:?} do not broadcast")));
                };
            }
            Ok(out)
        }
        KernelOp::Unary { .. } => Ok(first.to_vec()),
        KernelOp::Softmax { axis, .. } | KernelOp::L2Normalization { axis } => {
            if first.is_empty() {
                return Err(bad("input must have rank >= 1".into()));
            }
            resolve_axis(op, *axis, first.len())?;
            Ok(first.to_vec())
        }
        KernelOp::FullyConnected { .. } => {
            let (x, wt, bias) = (first, inputs[1], inputs[2]);
            if x.len() < 2 {
                return Err(bad(format!("input rank {} < 2", x.len())));
            }
            let &[n, k] = wt else {
                return Err(bad(format!("weights must be [N,K], got {wt:?}")));
            };
            if n == 0 || k == 0 {
                return Err(bad(format!("weights {wt:?} have a zero dimension")));
            }
            if bias != [n] {
                return Err(bad(format!("bias {bias:?} must be [{n}]")));
            }
            let numel = checked_product(x)?;
            if numel % k != 0 {
                return Err(bad(format!(
                    "input {x:?} has {numel} elements, not a multiple of K={k}"
                )));
            }
            Ok(vec![numel / k, n])
        }
        KernelOp::Conv2d {
            pad,
            stride_w,
            stride_h,
            dilation_w,
            dilation_h,
            nchw,
            ..
        } => {
            let (x, f, bias) = (first, inputs[1], inputs[2]);
            let (n, h, w, c) =
                nhwc_dims(x, *nchw).ok_or_else(|| bad(format!("input {x:?} must have rank 4")))?;
            let &[o, kh, kw, fi] = f else {
                return Err(bad(format!("filter {f:?} must have rank 4")));
            };
            if h == 0 || w == 0 || c == 0 {
                return Err(bad(format!(
                    "input {x:?} has a zero spatial or channel size"
                )));
            }
            if o == 0 || kh == 0 || kw == 0 {
                return Err(bad(format!("filter {f:?} has a zero dimension")));
            }
            if fi != c {
                return Err(bad(format!(
                    "filter {f:?} has {fi} input channels, input has {c}"
                )));
            }
            if bias != [o] {
                return Err(bad(format!("bias {bias:?} must be [{o}]")));
            }
            let (oh, ow) = window_out(
                (h, w),
                pad,
                (kh, kw),
                (*dilation_h, *dilation_w),
                (*stride_h, *stride_w),
            )
            .map_err(bad)?;
            Ok(layout_shape(n, oh, ow, o, *nchw))
        }
        KernelOp::DepthwiseConv2d {
            pad,
            stride_w,
            stride_h,
            dilation_w,
            dilation_h,
            depth_multiplier,
            nchw,
            ..
        } => {
            let (x, f, bias) = (first, inputs[1], inputs[2]);
            let (n, h, w, c) =
                nhwc_dims(x, *nchw).ok_or_else(|| bad(format!("input {x:?} must have rank 4")))?;
            let &[one, kh, kw, oc] = f else {
                return Err(bad(format!("filter {f:?} must have rank 4")));
            };
            if h == 0 || w == 0 || c == 0 {
                return Err(bad(format!(
                    "input {x:?} has a zero spatial or channel size"
                )));
            }
            if one != 1 || kh == 0 || kw == 0 {
                return Err(bad(format!(
                    "filter {f:?} must be [1,KH,KW,C*M], KH,KW > 0"
                )));
            }
            let want = c
                .checked_mul(*depth_multiplier as usize)
                .ok_or(KernelError::TooLarge)?;
            if oc != want {
                return Err(bad(format!(
                    "filter {f:?} has {oc} channels, input channels {c} * multiplier {depth_multiplier} = {want}"
                )));
            }
            if bias != [oc] {
                return Err(bad(format!("bias {bias:?} must be [{oc}]")));
            }
            let (oh, ow) = window_out(
                (h, w),
                pad,
                (kh, kw),
                (*dilation_h, *dilation_w),
                (*stride_h, *stride_w),
            )
            .map_err(bad)?;
            Ok(layout_shape(n, oh, ow, oc, *nchw))
        }
        KernelOp::Pool {
            pad,
            stride_w,
            stride_h,
            filter_w,
            filter_h,
            nchw,
            ..
        } => {
            let (n, h, w, c) = nhwc_dims(first, *nchw)
                .ok_or_else(|| bad(format!("input {first:?} must have rank 4")))?;
            if h == 0 || w == 0 || c == 0 {
                return Err(bad(format!(
                    "input {first:?} has a zero spatial or channel size"
                )));
            }
            if *filter_w == 0 || *filter_h == 0 {
                return Err(bad("zero filter size".into()));
            }
            let oh = conv_out_size(h, pad.top, pad.bottom, *filter_h as usize, 1, *stride_h)
                .ok_or_else(|| bad("filter taller than the padded input".into()))?;
            let ow = conv_out_size(w, pad.left, pad.right, *filter_w as usize, 1, *stride_w)
                .ok_or_else(|| bad("filter wider than the padded input".into()))?;
            Ok(layout_shape(n, oh, ow, c, *nchw))
        }
        KernelOp::Reshape { shape } => {
            let a = checked_product(first)?;
            let b = checked_product(shape)?;
            if shape.len() > super::MAX_RANK {
                return Err(KernelError::RankTooLarge { rank: shape.len() });
            }
            if a != b {
                return Err(bad(format!(
                    "cannot reshape {first:?} ({a} elements) to {shape:?} ({b} elements)"
                )));
            }
            Ok(shape.clone())
        }
        KernelOp::Concatenation { axis } => {
            let axis = *axis as usize;
            if axis >= first.len() {
                return Err(bad(format!(
                    "axis {axis} out of range for rank {}",
                    first.len()
                )));
            }
            let mut out = first.to_vec();
            for s in &inputs[1..] {
                if s.len() != first.len()
                    || s.iter()
                        .zip(first)
                        .enumerate()
                        .any(|(i, (a, b))| i != axis && a != b)
                {
                    return Err(bad(format!(
                        "shapes {first:?} and {s:?} differ outside axis {axis}"
                    )));
                }
                out[axis] = out[axis]
                    .checked_add(s[axis])
                    .ok_or(KernelError::TooLarge)?;
            }
            Ok(out)
        }
        KernelOp::DepthToSpace { block, nchw } => {
            let b = *block as usize;
            let (n, h, w, c) = nhwc_dims(first, *nchw)
                .ok_or_else(|| bad(format!("input {first:?} must have rank 4")))?;
            let bb = b.checked_mul(b).ok_or(KernelError::TooLarge)?;
            if b == 0 || c % bb != 0 {
                return Err(bad(format!("channels {c} not divisible by block^2 = {bb}")));
            }
            let oh = h.checked_mul(b).ok_or(KernelError::TooLarge)?;
            let ow = w.checked_mul(b).ok_or(KernelError::TooLarge)?;
            Ok(layout_shape(n, oh, ow, c / bb, *nchw))
        }
        KernelOp::SpaceToDepth { block, nchw } => {
            let b = *block as usize;
            let (n, h, w, c) = nhwc_dims(first, *nchw)
                .ok_or_else(|| bad(format!("input {first:?} must have rank 4")))?;
            if b == 0 || h % b != 0 || w % b != 0 {
                return Err(bad(format!(
                    "height {h} and width {w} must be multiples of block {b}"
                )));
            }
            let bb = b.checked_mul(b).ok_or(KernelError::TooLarge)?;
            let oc = c.checked_mul(bb).ok_or(KernelError::TooLarge)?;
            Ok(layout_shape(n, h / b, w / b, oc, *nchw))
        }
        KernelOp::ResizeBilinear {
            out_h,
            out_w,
            align_corners,
            half_pixel_centers,
            nchw,
        } => {
            let (n, h, w, c) = nhwc_dims(first, *nchw)
                .ok_or_else(|| bad(format!("input {first:?} must have rank 4")))?;
            if h == 0 || w == 0 || c == 0 {
                return Err(bad(format!(
                    "input {first:?} has a zero spatial or channel size"
                )));
            }
            if *out_h == 0 || *out_w == 0 {
                return Err(bad("zero output size".into()));
            }
            if *align_corners && *half_pixel_centers {
                return Err(bad(
                    "align_corners and half_pixel_centers are exclusive".into()
                ));
            }
            Ok(layout_shape(n, *out_h as usize, *out_w as usize, c, *nchw))
        }
        KernelOp::Pad { pads, .. } => {
            if pads.len() != first.len() || first.is_empty() {
                return Err(bad(format!(
                    "{} paddings for an input of rank {}",
                    pads.len(),
                    first.len()
                )));
            }
            first
                .iter()
                .zip(pads)
                .map(|(&d, &(a, b))| {
                    d.checked_add(a as usize)
                        .and_then(|v| v.checked_add(b as usize))
                        .ok_or(KernelError::TooLarge)
                })
                .collect()
        }
        KernelOp::Transpose { perm } => {
            if perm.len() != first.len() {
                return Err(bad(format!(
                    "perm of length {} for an input of rank {}",
                    perm.len(),
                    first.len()
                )));
            }
            let mut seen = [false; super::MAX_RANK];
            let mut out = Vec::with_capacity(perm.len());
            for &p in perm {
                let p = p as usize;
                match seen.get_mut(p) {
                    Some(s) if p < first.len() && !*s => *s = true,
                    _ => return Err(bad(format!("{perm:?} is not a permutation"))),
                }
                out.push(first[p]);
            }
            Ok(out)
        }
        KernelOp::Mean { axes, keep_dims } => {
            if first.is_empty() {
                return Err(bad("input must have rank >= 1".into()));
            }
            let mut reduce = [false; super::MAX_RANK];
            for &a in axes {
                let a = a as usize;
                match reduce.get_mut(a) {
                    Some(r) if a < first.len() && !*r => *r = true,
                    _ => {
                        return Err(bad(format!(
                            "axes {axes:?} out of range for rank {} or repeated",
                            first.len()
                        )))
                    }
                }
            }
            let mut out = Vec::with_capacity(first.len());
            for (i, &d) in first.iter().enumerate() {
                if !reduce[i] {
                    out.push(d);
                } else if *keep_dims {
                    out.push(1);
                }
            }
            if out.is_empty() {
                out.push(1);
            }
            Ok(out)
        }
    }
}

/// Row-major strides of a shape.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

pub(crate) fn concatenation(axis: usize, inputs: &[Tensor<'_>], out: TensorMut<'_>) -> Result<()> {
    let outer: usize = out.shape[..axis].iter().product();
    let inner: usize = out.shape[axis + 1..].iter().product();
    let mut pos = 0;
    for o in 0..outer {
        for t in inputs {
            let chunk = t.shape[axis] * inner;
            out.data[pos..pos + chunk].copy_from_slice(&t.data[o * chunk..(o + 1) * chunk]);
            pos += chunk;
        }
    }
    Ok(())
}

pub(crate) fn depth_to_space(
    b: usize,
    nchw: bool,
    x: Tensor<'_>,
    out: TensorMut<'_>,
) -> Result<()> {
    let (n, h, w, c) = nhwc_dims(x.shape, nchw).ok_or(KernelError::TooLarge)?;
    let oc = c / (b * b);
    with_nhwc(nchw, x, out, |src, dst| {
        let mut pos = 0;
        for bi in 0..n {
            for y in 0..h {
                for dy in 0..b {
                    for xx in 0..w {
                        for dx in 0..b {
                            let s = ((bi * h + y) * w + xx) * c + (dy * b + dx) * oc;
                            dst[pos..pos + oc].copy_from_slice(&src[s..s + oc]);
                            pos += oc;
                        }
                    }
                }
            }
        }
        Ok(())
    })
}

pub(crate) fn space_to_depth(
    b: usize,
    nchw: bool,
    x: Tensor<'_>,
    out: TensorMut<'_>,
) -> Result<()> {
    let (n, h, w, c) = nhwc_dims(x.shape, nchw).ok_or(KernelError::TooLarge)?;
    let (oh, ow) = (h / b, w / b);
    with_nhwc(nchw, x, out, |src, dst| {
        let mut pos = 0;
        for bi in 0..n {
            for y in 0..oh {
                for xx in 0..ow {
                    for dy in 0..b {
                        for dx in 0..b {
                            let s = ((bi * h + y * b + dy) * w + xx * b + dx) * c;
                            dst[pos..pos + c].copy_from_slice(&src[s..s + c]);
                            pos += c;
                        }
                    }
                }
            }
        }
        Ok(())
    })
}

/// TFLite's interpolation coordinates: the source position and its clamped lower and upper
/// neighbours.
fn interp(dst: usize, scale: f32, half_pixel: bool, size: usize) -> (f32, usize, usize) {
    let v = if half_pixel {
        (dst as f32 + 0.5) * scale - 0.5
    } else {
        dst as f32 * scale
    };
    let last = size - 1;
    let lo = v.floor();
    let lo = if lo <= 0.0 {
        0
    } else {
        (lo as usize).min(last)
    };
    let hi = v.ceil();
    let hi = if hi <= 0.0 {
        0
    } else {
        (hi as usize).min(last)
    };
    (v, lo, hi)
}

pub(crate) fn resize_scale(input: usize, output: usize, align_corners: bool) -> f32 {
    if align_corners && output > 1 {
        (input - 1) as f32 / (output - 1) as f32
    } else {
        input as f32 / output as f32
    }
}

pub(crate) fn resize_bilinear(
    align_corners: bool,
    half_pixel: bool,
    nchw: bool,
    x: Tensor<'_>,
    out: TensorMut<'_>,
) -> Result<()> {
    let (n, h, w, c) = nhwc_dims(x.shape, nchw).ok_or(KernelError::TooLarge)?;
    let (_, oh, ow, _) = nhwc_dims(out.shape, nchw).ok_or(KernelError::TooLarge)?;
    let sy = resize_scale(h, oh, align_corners);
    let sx = resize_scale(w, ow, align_corners);
    let xs: Vec<(f32, usize, usize)> = (0..ow).map(|i| interp(i, sx, half_pixel, w)).collect();
    with_nhwc(nchw, x, out, |src, dst| {
        let mut pos = 0;
        for b in 0..n {
            let img = &src[b * h * w * c..(b + 1) * h * w * c];
            for oy in 0..oh {
                let (fy, y0, y1) = interp(oy, sy, half_pixel, h);
                let dy = fy - y0 as f32;
                for &(fx, x0, x1) in &xs {
                    let dx = fx - x0 as f32;
                    let p00 = &img[(y0 * w + x0) * c..][..c];
                    let p01 = &img[(y0 * w + x1) * c..][..c];
                    let p10 = &img[(y1 * w + x0) * c..][..c];
                    let p11 = &img[(y1 * w + x1) * c..][..c];
                    for ch in 0..c {
                        dst[pos + ch] = p00[ch] * (1.0 - dy) * (1.0 - dx)
                            + p10[ch] * dy * (1.0 - dx)
                            + p01[ch] * (1.0 - dy) * dx
                            + p11[ch] * dy * dx;
                    }
                    pos += c;
                }
            }
        }
        Ok(())
    })
}

pub(crate) fn pad(
    pads: &[(u32, u32)],
    value: f32,
    x: Tensor<'_>,
    out: TensorMut<'_>,
) -> Result<()> {
    out.data.fill(value);
    if x.data.is_empty() {
        return Ok(());
    }
    let rank = x.shape.len();
    let ostr = strides(out.shape);
    let row = x.shape[rank - 1];
    let rows = x.data.len() / row;
    let mut idx = vec![0usize; rank];
    for r in 0..rows {
        let mut off = pads[rank - 1].0 as usize;
        for d in 0..rank - 1 {
            off += (idx[d] + pads[d].0 as usize) * ostr[d];
        }
        out.data[off..off + row].copy_from_slice(&x.data[r * row..(r + 1) * row]);
        // Advance the index over all dims but the last.
        for d in (0..rank - 1).rev() {
            idx[d] += 1;
            if idx[d] < x.shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(())
}

pub(crate) fn transpose(perm: &[u32], x: Tensor<'_>, out: TensorMut<'_>) -> Result<()> {
    if out.data.is_empty() {
        return Ok(());
    }
    let rank = x.shape.len();
    if rank == 0 {
        out.data.copy_from_slice(x.data);
        return Ok(());
    }
    let istr = strides(x.shape);
    // Input stride of each output dimension.
    let s: Vec<usize> = perm.iter().map(|&p| istr[p as usize]).collect();
    let last = rank - 1;
    let (n_last, s_last) = (out.shape[last], s[last]);
    let mut idx = vec![0usize; rank];
    let mut pos = 0;
    while pos < out.data.len() {
        let base: usize = (0..last).map(|d| idx[d] * s[d]).sum();
        for (j, o) in out.data[pos..pos + n_last].iter_mut().enumerate() {
            *o = x.data[base + j * s_last];
        }
        pos += n_last;
        for d in (0..last).rev() {
            idx[d] += 1;
            if idx[d] < out.shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(())
}
