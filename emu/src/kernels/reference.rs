//! Plain, obviously-correct reference implementations for the property tests: naive nested
//! loops over multi-indices, written independently of the fast kernels (no shared helpers
//! apart from the public op types).

use super::{Activation, BinaryKind, Padding, PoolKind, UnaryKind};

/// Row-major flat index of a multi-index.
pub fn flat(shape: &[usize], idx: &[usize]) -> usize {
    let mut f = 0;
    for (d, &i) in shape.iter().zip(idx) {
        f = f * d + i;
    }
    f
}

/// Multi-index of a row-major flat index.
pub fn unflat(shape: &[usize], mut f: usize) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = f % shape[d];
        f /= shape[d];
    }
    idx
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

pub fn act(a: Activation, x: f32) -> f32 {
    let (lo, hi) = match a {
        Activation::None => return x,
        Activation::Relu => (0.0, f32::INFINITY),
        Activation::Relu1 => (-1.0, 1.0),
        Activation::Relu6 => (0.0, 6.0),
    };
    if x.is_nan() {
        x
    } else {
        x.max(lo).min(hi)
    }
}

pub fn binary(
    kind: BinaryKind,
    a_act: Activation,
    sa: &[usize],
    a: &[f32],
    sb: &[usize],
    b: &[f32],
) -> (Vec<usize>, Vec<f32>) {
    let rank = sa.len().max(sb.len());
    let pad = |s: &[usize]| {
        let mut v = vec![1; rank - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(sa), pad(sb));
    let out: Vec<usize> = (0..rank)
        .map(|i| if pa[i] == 1 { pb[i] } else { pa[i] })
        .collect();
    let mut data = Vec::new();
    for f in 0..numel(&out) {
        let idx = unflat(&out, f);
        let ia: Vec<usize> = (0..rank)
            .map(|i| if pa[i] == 1 { 0 } else { idx[i] })
            .collect();
        let ib: Vec<usize> = (0..rank)
            .map(|i| if pb[i] == 1 { 0 } else { idx[i] })
            .collect();
        let (x, y) = (a[flat(&pa, &ia)], b[flat(&pb, &ib)]);
        let v = match kind {
            BinaryKind::Add => x + y,
            BinaryKind::Sub => x - y,
            BinaryKind::Mul => x * y,
            BinaryKind::Div => x / y,
        };
        data.push(act(a_act, v));
    }
    (out, data)
}

pub fn unary(kind: UnaryKind, x: &[f32]) -> Vec<f32> {
    x.iter()
        .map(|&v| match kind {
            UnaryKind::Relu => act(Activation::Relu, v),
            UnaryKind::Relu1 => act(Activation::Relu1, v),
            UnaryKind::Relu6 => act(Activation::Relu6, v),
            UnaryKind::Logistic => (1.0 / (1.0 + f64::from(-v).exp())) as f32,
            UnaryKind::Tanh => f64::from(v).tanh() as f32,
            UnaryKind::Floor => v.floor(),
        })
        .collect()
}

/// Reads element (b, y, x, c) of a rank-4 tensor in either layout.
fn at4(shape: &[usize], data: &[f32], nchw: bool, b: usize, y: usize, x: usize, c: usize) -> f32 {
    if nchw {
        data[flat(shape, &[b, c, y, x])]
    } else {
        data[flat(shape, &[b, y, x, c])]
    }
}

fn dims4(shape: &[usize], nchw: bool) -> (usize, usize, usize, usize) {
    if nchw {
        (shape[0], shape[2], shape[3], shape[1])
    } else {
        (shape[0], shape[1], shape[2], shape[3])
    }
}

/// Writes a logical NHWC result `[n][y][x][c]` into the given layout.
fn store4(
    nchw: bool,
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    nhwc: &[f64],
) -> (Vec<usize>, Vec<f32>) {
    let shape = if nchw {
        vec![n, c, h, w]
    } else {
        vec![n, h, w, c]
    };
    let mut out = vec![0.0f32; nhwc.len()];
    for b in 0..n {
        for y in 0..h {
            for x in 0..w {
                for ch in 0..c {
                    let v = nhwc[((b * h + y) * w + x) * c + ch] as f32;
                    let i = if nchw {
                        flat(&shape, &[b, ch, y, x])
                    } else {
                        flat(&shape, &[b, y, x, ch])
                    };
                    out[i] = v;
                }
            }
        }
    }
    (shape, out)
}

fn out_dim(input: usize, pa: u32, pb: u32, k: usize, dil: u32, stride: u32) -> usize {
    let eff = (k - 1) * dil as usize + 1;
    (input + pa as usize + pb as usize - eff) / stride as usize + 1
}

/// Seven-loop convolution, f64 accumulation.
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    xs: &[usize],
    x: &[f32],
    fs: &[usize],
    f: &[f32],
    bias: &[f32],
    pad: Padding,
    stride: (u32, u32),
    dilation: (u32, u32),
    a: Activation,
    nchw: bool,
) -> (Vec<usize>, Vec<f32>) {
    let (n, h, w, c) = dims4(xs, nchw);
    let (o, kh, kw) = (fs[0], fs[1], fs[2]);
    let oh = out_dim(h, pad.top, pad.bottom, kh, dilation.1, stride.1);
    let ow = out_dim(w, pad.left, pad.right, kw, dilation.0, stride.0);
    let mut out = vec![0.0f64; n * oh * ow * o];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for oc in 0..o {
                    let mut s = f64::from(bias[oc]);
                    for ky in 0..kh {
                        for kx in 0..kw {
                            for ic in 0..c {
                                let iy = (oy * stride.1 as usize + ky * dilation.1 as usize) as i64
                                    - i64::from(pad.top);
                                let ix = (ox * stride.0 as usize + kx * dilation.0 as usize) as i64
                                    - i64::from(pad.left);
                                if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                                    continue;
                                }
                                let v = at4(xs, x, nchw, b, iy as usize, ix as usize, ic);
                                s += f64::from(v) * f64::from(f[flat(fs, &[oc, ky, kx, ic])]);
                            }
                        }
                    }
                    out[((b * oh + oy) * ow + ox) * o + oc] = f64::from(act(a, s as f32));
                }
            }
        }
    }
    store4(nchw, n, oh, ow, o, &out)
}

#[allow(clippy::too_many_arguments)]
pub fn depthwise(
    xs: &[usize],
    x: &[f32],
    fs: &[usize],
    f: &[f32],
    bias: &[f32],
    pad: Padding,
    stride: (u32, u32),
    dilation: (u32, u32),
    mult: usize,
    a: Activation,
    nchw: bool,
) -> (Vec<usize>, Vec<f32>) {
    let (n, h, w, c) = dims4(xs, nchw);
    let (kh, kw, oc) = (fs[1], fs[2], fs[3]);
    let oh = out_dim(h, pad.top, pad.bottom, kh, dilation.1, stride.1);
    let ow = out_dim(w, pad.left, pad.right, kw, dilation.0, stride.0);
    let mut out = vec![0.0f64; n * oh * ow * oc];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for ic in 0..c {
                    for m in 0..mult {
                        let o = ic * mult + m;
                        let mut s = f64::from(bias[o]);
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * stride.1 as usize + ky * dilation.1 as usize) as i64
                                    - i64::from(pad.top);
                                let ix = (ox * stride.0 as usize + kx * dilation.0 as usize) as i64
                                    - i64::from(pad.left);
                                if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                                    continue;
                                }
                                let v = at4(xs, x, nchw, b, iy as usize, ix as usize, ic);
                                s += f64::from(v) * f64::from(f[flat(fs, &[0, ky, kx, o])]);
                            }
                        }
                        out[((b * oh + oy) * ow + ox) * oc + o] = f64::from(act(a, s as f32));
                    }
                }
            }
        }
    }
    store4(nchw, n, oh, ow, oc, &out)
}

#[allow(clippy::too_many_arguments)]
pub fn pool(
    kind: PoolKind,
    xs: &[usize],
    x: &[f32],
    pad: Padding,
    stride: (u32, u32),
    filter: (u32, u32),
    a: Activation,
    nchw: bool,
) -> (Vec<usize>, Vec<f32>) {
    let (n, h, w, c) = dims4(xs, nchw);
    let (fw, fh) = (filter.0 as usize, filter.1 as usize);
    let oh = out_dim(h, pad.top, pad.bottom, fh, 1, stride.1);
    let ow = out_dim(w, pad.left, pad.right, fw, 1, stride.0);
    let mut out = vec![0.0f64; n * oh * ow * c];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for ch in 0..c {
                    let mut vals = Vec::new();
                    for ky in 0..fh {
                        for kx in 0..fw {
                            let iy = (oy * stride.1 as usize + ky) as i64 - i64::from(pad.top);
                            let ix = (ox * stride.0 as usize + kx) as i64 - i64::from(pad.left);
                            if iy >= 0 && ix >= 0 && iy < h as i64 && ix < w as i64 {
                                vals.push(f64::from(at4(
                                    xs,
                                    x,
                                    nchw,
                                    b,
                                    iy as usize,
                                    ix as usize,
                                    ch,
                                )));
                            }
                        }
                    }
                    let r = match kind {
                        PoolKind::Max => vals.iter().copied().fold(f64::from(f32::MIN), f64::max),
                        _ if vals.is_empty() => 0.0,
                        PoolKind::Average => vals.iter().sum::<f64>() / vals.len() as f64,
                        PoolKind::L2 => {
                            (vals.iter().map(|v| v * v).sum::<f64>() / vals.len() as f64).sqrt()
                        }
                    };
                    out[((b * oh + oy) * ow + ox) * c + ch] = f64::from(act(a, r as f32));
                }
            }
        }
    }
    store4(nchw, n, oh, ow, c, &out)
}

pub fn fully_connected(
    xs: &[usize],
    x: &[f32],
    ws: &[usize],
    wt: &[f32],
    bias: &[f32],
    a: Activation,
) -> (Vec<usize>, Vec<f32>) {
    let (n, k) = (ws[0], ws[1]);
    let batch = numel(xs) / k;
    let mut out = Vec::new();
    for b in 0..batch {
        for j in 0..n {
            let mut s = f64::from(bias[j]);
            for i in 0..k {
                s += f64::from(x[b * k + i]) * f64::from(wt[j * k + i]);
            }
            out.push(act(a, s as f32));
        }
    }
    (vec![batch, n], out)
}

/// Applies `f` to every 1-D lane along `axis` (values in lane order), writing the results.
fn along_axis(shape: &[usize], x: &[f32], axis: usize, f: impl Fn(&[f64]) -> Vec<f64>) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    for start in 0..x.len() {
        let idx = unflat(shape, start);
        if idx[axis] != 0 {
            continue;
        }
        let lane: Vec<usize> = (0..shape[axis])
            .map(|k| {
                let mut i = idx.clone();
                i[axis] = k;
                flat(shape, &i)
            })
            .collect();
        let vals: Vec<f64> = lane.iter().map(|&i| f64::from(x[i])).collect();
        for (&i, v) in lane.iter().zip(f(&vals)) {
            out[i] = v as f32;
        }
    }
    out
}

pub fn softmax(shape: &[usize], x: &[f32], beta: f32, axis: usize) -> Vec<f32> {
    along_axis(shape, x, axis, |v| {
        let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = v
            .iter()
            .map(|&x| ((x - m) * f64::from(beta)).exp())
            .collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    })
}

pub fn l2_normalization(shape: &[usize], x: &[f32], axis: usize) -> Vec<f32> {
    along_axis(shape, x, axis, |v| {
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-6);
        v.iter().map(|x| x / norm).collect()
    })
}

pub fn mean(shape: &[usize], x: &[f32], axes: &[u32], keep: bool) -> (Vec<usize>, Vec<f32>) {
    let red: Vec<bool> = (0..shape.len())
        .map(|d| axes.contains(&(d as u32)))
        .collect();
    let kept: Vec<usize> = (0..shape.len())
        .map(|d| if red[d] { 1 } else { shape[d] })
        .collect();
    let mut sums = vec![0.0f64; numel(&kept)];
    let mut counts = vec![0usize; numel(&kept)];
    for (f, &v) in x.iter().enumerate() {
        let mut idx = unflat(shape, f);
        for d in 0..shape.len() {
            if red[d] {
                idx[d] = 0;
            }
        }
        let o = flat(&kept, &idx);
        sums[o] += f64::from(v);
        counts[o] += 1;
    }
    let mut out_shape: Vec<usize> = if keep {
        kept.clone()
    } else {
        (0..shape.len())
            .filter(|&d| !red[d])
            .map(|d| shape[d])
            .collect()
    };
    if out_shape.is_empty() {
        out_shape.push(1);
    }
    let data = sums
        .iter()
        .zip(&counts)
        .map(|(s, &c)| (s / c as f64) as f32)
        .collect();
    (out_shape, data)
}

pub fn concat(shapes: &[Vec<usize>], datas: &[Vec<f32>], axis: usize) -> (Vec<usize>, Vec<f32>) {
    let mut out_shape = shapes[0].clone();
    out_shape[axis] = shapes.iter().map(|s| s[axis]).sum();
    let mut out = vec![0.0; numel(&out_shape)];
    for (f, o) in out.iter_mut().enumerate() {
        let mut idx = unflat(&out_shape, f);
        let mut t = 0;
        while idx[axis] >= shapes[t][axis] {
            idx[axis] -= shapes[t][axis];
            t += 1;
        }
        *o = datas[t][flat(&shapes[t], &idx)];
    }
    (out_shape, out)
}

pub fn depth_to_space(xs: &[usize], x: &[f32], bs: usize, nchw: bool) -> (Vec<usize>, Vec<f32>) {
    let (n, h, w, c) = dims4(xs, nchw);
    let oc = c / (bs * bs);
    let mut out = vec![0.0f64; x.len()];
    for b in 0..n {
        for oy in 0..h * bs {
            for ox in 0..w * bs {
                for ch in 0..oc {
                    let ic = ((oy % bs) * bs + ox % bs) * oc + ch;
                    out[((b * h * bs + oy) * w * bs + ox) * oc + ch] =
                        f64::from(at4(xs, x, nchw, b, oy / bs, ox / bs, ic));
                }
            }
        }
    }
    store4(nchw, n, h * bs, w * bs, oc, &out)
}

pub fn space_to_depth(xs: &[usize], x: &[f32], bs: usize, nchw: bool) -> (Vec<usize>, Vec<f32>) {
    let (n, h, w, c) = dims4(xs, nchw);
    let (oh, ow, oc) = (h / bs, w / bs, c * bs * bs);
    let mut out = vec![0.0f64; x.len()];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for o in 0..oc {
                    let (blk, ch) = (o / c, o % c);
                    let (dy, dx) = (blk / bs, blk % bs);
                    out[((b * oh + oy) * ow + ox) * oc + o] =
                        f64::from(at4(xs, x, nchw, b, oy * bs + dy, ox * bs + dx, ch));
                }
            }
        }
    }
    store4(nchw, n, oh, ow, oc, &out)
}

#[allow(clippy::too_many_arguments)]
pub fn resize_bilinear(
    xs: &[usize],
    x: &[f32],
    oh: usize,
    ow: usize,
    align: bool,
    half: bool,
    nchw: bool,
) -> (Vec<usize>, Vec<f32>) {
    let (n, h, w, c) = dims4(xs, nchw);
    let scale = |i: usize, o: usize| {
        if align && o > 1 {
            (i - 1) as f32 / (o - 1) as f32
        } else {
            i as f32 / o as f32
        }
    };
    let (sy, sx) = (scale(h, oh), scale(w, ow));
    let src = |d: usize, s: f32, size: usize| {
        let v = if half {
            (d as f32 + 0.5) * s - 0.5
        } else {
            d as f32 * s
        };
        let lo = (v.floor() as i64).max(0) as usize;
        let hi = (v.ceil() as i64).min(size as i64 - 1).max(0) as usize;
        (v, lo, hi)
    };
    let mut out = vec![0.0f64; n * oh * ow * c];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                let (fy, y0, y1) = src(oy, sy, h);
                let (fx, x0, x1) = src(ox, sx, w);
                let (dy, dx) = (fy - y0 as f32, fx - x0 as f32);
                for ch in 0..c {
                    let p = |y: usize, xx: usize| at4(xs, x, nchw, b, y, xx, ch);
                    let v = p(y0, x0) * (1.0 - dy) * (1.0 - dx)
                        + p(y1, x0) * dy * (1.0 - dx)
                        + p(y0, x1) * (1.0 - dy) * dx
                        + p(y1, x1) * dy * dx;
                    out[((b * oh + oy) * ow + ox) * c + ch] = f64::from(v);
                }
            }
        }
    }
    store4(nchw, n, oh, ow, c, &out)
}

pub fn pad(xs: &[usize], x: &[f32], pads: &[(u32, u32)], value: f32) -> (Vec<usize>, Vec<f32>) {
    let os: Vec<usize> = xs
        .iter()
        .zip(pads)
        .map(|(&d, &(a, b))| d + a as usize + b as usize)
        .collect();
    let mut out = Vec::new();
    for f in 0..numel(&os) {
        let idx = unflat(&os, f);
        let mut src = Vec::new();
        for d in 0..xs.len() {
            let i = idx[d] as i64 - i64::from(pads[d].0);
            if i < 0 || i >= xs[d] as i64 {
                break;
            }
            src.push(i as usize);
        }
        out.push(if src.len() == xs.len() {
            x[flat(xs, &src)]
        } else {
            value
        });
    }
    (os, out)
}

pub fn transpose(xs: &[usize], x: &[f32], perm: &[u32]) -> (Vec<usize>, Vec<f32>) {
    let os: Vec<usize> = perm.iter().map(|&p| xs[p as usize]).collect();
    let mut out = Vec::new();
    for f in 0..numel(&os) {
        let idx = unflat(&os, f);
        let mut src = vec![0; xs.len()];
        for (i, &p) in perm.iter().enumerate() {
            src[p as usize] = idx[i];
        }
        out.push(x[flat(xs, &src)]);
    }
    (os, out)
}
