//! Element-wise binary ops with numpy-style broadcasting: NNAPI ADD, SUB, MUL, DIV (float32,
//! IEEE division, fused activation after the op).

use super::{Activation, BinaryKind, Tensor, TensorMut};

#[inline]
fn op_fn(kind: BinaryKind) -> fn(f32, f32) -> f32 {
    match kind {
        BinaryKind::Add => |a, b| a + b,
        BinaryKind::Sub => |a, b| a - b,
        BinaryKind::Mul => |a, b| a * b,
        BinaryKind::Div => |a, b| a / b,
    }
}

/// Broadcast strides of `shape` against an output of rank `rank`: 0 on broadcast dims.
fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let rank = out.len();
    let lead = rank - shape.len();
    let own = super::shape::strides(shape);
    (0..rank)
        .map(|i| {
            if i < lead || shape[i - lead] == 1 && out[i] != 1 {
                0
            } else {
                own[i - lead]
            }
        })
        .collect()
}

/// `out = act(a op b)`; shapes were validated by `output_shapes`.
pub(crate) fn binary(
    kind: BinaryKind,
    act: Activation,
    a: Tensor<'_>,
    b: Tensor<'_>,
    out: TensorMut<'_>,
) {
    let f = op_fn(kind);
    let o = out.data;
    if o.is_empty() {
        return;
    }
    if a.data.len() == o.len() && b.data.len() == o.len() {
        for ((o, &x), &y) in o.iter_mut().zip(a.data).zip(b.data) {
            *o = f(x, y);
        }
    } else if b.data.len() == 1 && a.data.len() == o.len() {
        let y = b.data[0];
        for (o, &x) in o.iter_mut().zip(a.data) {
            *o = f(x, y);
        }
    } else if a.data.len() == 1 && b.data.len() == o.len() {
        let x = a.data[0];
        for (o, &y) in o.iter_mut().zip(b.data) {
            *o = f(x, y);
        }
    } else {
        let shape = out.shape;
        let rank = shape.len();
        let sa = broadcast_strides(a.shape, shape);
        let sb = broadcast_strides(b.shape, shape);
        let last = rank - 1;
        let n = shape[last];
        let (la, lb) = (sa[last], sb[last]);
        let mut idx = vec![0usize; rank];
        let mut pos = 0;
        while pos < o.len() {
            let (mut ia, mut ib) = (0, 0);
            for d in 0..last {
                ia += idx[d] * sa[d];
                ib += idx[d] * sb[d];
            }
            for (j, v) in o[pos..pos + n].iter_mut().enumerate() {
                *v = f(a.data[ia + j * la], b.data[ib + j * lb]);
            }
            pos += n;
            for d in (0..last).rev() {
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
    act.apply_slice(o);
}
