//! Activations: NNAPI RELU, RELU1, RELU6, LOGISTIC, TANH, FLOOR (element-wise) and SOFTMAX.

use super::{clamp_nan, Tensor, UnaryKind};

/// `out[i] = f(x[i])`; lengths were validated by `execute`.
pub(crate) fn unary(kind: UnaryKind, x: &[f32], out: &mut [f32]) {
    let f: fn(f32) -> f32 = match kind {
        UnaryKind::Relu => |v| clamp_nan(v, 0.0, f32::INFINITY),
        UnaryKind::Relu1 => |v| clamp_nan(v, -1.0, 1.0),
        UnaryKind::Relu6 => |v| clamp_nan(v, 0.0, 6.0),
        UnaryKind::Logistic => |v| 1.0 / (1.0 + (-v).exp()),
        UnaryKind::Tanh => f32::tanh,
        UnaryKind::Floor => f32::floor,
    };
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}

/// `out = exp(beta * (x - max)) / sum` along `axis`.
pub(crate) fn softmax(beta: f32, axis: usize, x: Tensor<'_>, out: &mut [f32]) {
    let n = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let outer: usize = x.shape[..axis].iter().product();
    if n == 0 || inner == 0 {
        return;
    }
    if inner == 1 {
        for (xs, os) in x.data.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f32;
            for (o, &v) in os.iter_mut().zip(xs) {
                *o = ((v - max) * beta).exp();
                sum += *o;
            }
            let inv = 1.0 / sum;
            for o in os.iter_mut() {
                *o *= inv;
            }
        }
        return;
    }
    for o in 0..outer {
        let base = o * n * inner;
        for i in 0..inner {
            let at = |k: usize| base + k * inner + i;
            let max = (0..n)
                .map(|k| x.data[at(k)])
                .fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f32;
            for k in 0..n {
                let e = ((x.data[at(k)] - max) * beta).exp();
                out[at(k)] = e;
                sum += e;
            }
            let inv = 1.0 / sum;
            for k in 0..n {
                out[at(k)] *= inv;
            }
        }
    }
}
