//! Normalisation: NNAPI L2_NORMALIZATION along any axis.

use super::Tensor;

/// TFLite's epsilon: the norm is clamped from below to this value.
pub(crate) const L2_EPSILON: f32 = 1e-6;

/// `out = x / max(sqrt(sum(x^2 along axis)), 1e-6)`.
pub(crate) fn l2_normalization(axis: usize, x: Tensor<'_>, out: &mut [f32]) {
    let n = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let outer: usize = x.shape[..axis].iter().product();
    for o in 0..outer {
        let base = o * n * inner;
        for i in 0..inner {
            let mut sum = 0.0f32;
            for k in 0..n {
                let v = x.data[base + k * inner + i];
                sum += v * v;
            }
            let norm = sum.sqrt().max(L2_EPSILON);
            for k in 0..n {
                let at = base + k * inner + i;
                out[at] = x.data[at] / norm;
            }
        }
    }
}
