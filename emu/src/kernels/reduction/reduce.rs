//! NNAPI REDUCE_SUM, REDUCE_PROD, REDUCE_MAX, REDUCE_MIN, REDUCE_ANY, REDUCE_ALL over a set
//! of axes, keeping the reduced dimensions as 1 or dropping them (a full reduction without
//! keep_dims gives `[1]`). As the NNAPI reference (TFLite's ReduceGeneric), the input is
//! visited in row-major order and accumulated in the element type itself: float16 sums and
//! products round to float16 at every step, quantised MAX/MIN compare stored integers (the
//! output keeps the input's scale and zero point). PROD short-circuits a zero factor to 0.
//! Types: SUM/PROD float32/16; MAX/MIN float32/16, u8, i8; ANY/ALL bool8.
//!
//! Parameter words: kind (Sum 0, Prod 1, Max 2, Min 3, Any 4, All 5), axes (list),
//! keep_dims.

use half::f16;

use crate::kernels::kernel::{enc, same_dtype, Kernel, Words};
use crate::kernels::reduction::mean::reduced_shape;
use crate::kernels::{Result, MAX_RANK};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// Which reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Logical or.
    Any,
    /// Logical and.
    All,
}

const KINDS: [(ReduceKind, &str, &[DType]); 6] = [
    (ReduceKind::Sum, "REDUCE_SUM", &[DType::F32, DType::F16]),
    (ReduceKind::Prod, "REDUCE_PROD", &[DType::F32, DType::F16]),
    (
        ReduceKind::Max,
        "REDUCE_MAX",
        &[DType::F32, DType::F16, DType::U8, DType::I8],
    ),
    (
        ReduceKind::Min,
        "REDUCE_MIN",
        &[DType::F32, DType::F16, DType::U8, DType::I8],
    ),
    (ReduceKind::Any, "REDUCE_ANY", &[DType::Bool8]),
    (ReduceKind::All, "REDUCE_ALL", &[DType::Bool8]),
];

/// A reduction over axes.
#[derive(Debug, Clone, PartialEq)]
pub struct Reduce {
    /// Which reduction.
    pub kind: ReduceKind,
    /// The reduced axes (non-negative, no repeats).
    pub axes: Vec<u32>,
    /// Keep reduced dimensions as size 1.
    pub keep_dims: bool,
}

impl Reduce {
    fn index(&self) -> usize {
        KINDS
            .iter()
            .position(|(k, _, _)| *k == self.kind)
            .unwrap_or(0)
    }
}

/// Reduces `x` (row-major, `shape`) over `axes` into `out` with `f`, starting from `init`.
fn reduce_generic<T: Copy>(
    shape: &[usize],
    axes: &[u32],
    x: &[T],
    out: &mut [T],
    init: T,
    f: impl Fn(T, T) -> T,
) {
    let rank = shape.len();
    let mut reduce = [false; MAX_RANK];
    for &a in axes {
        if let Some(r) = reduce.get_mut(a as usize) {
            *r = true;
        }
    }
    // Output stride of each input dimension: 0 on reduced dims.
    let mut ostride = vec![0usize; rank];
    let mut s = 1usize;
    for d in (0..rank).rev() {
        if !reduce[d] {
            ostride[d] = s;
            s *= shape[d];
        }
    }
    out.fill(init);
    if x.is_empty() || rank == 0 {
        return;
    }
    let mut idx = vec![0usize; rank];
    for &v in x {
        let o: usize = idx.iter().zip(&ostride).map(|(i, s)| i * s).sum();
        if let Some(slot) = out.get_mut(o) {
            *slot = f(*slot, v);
        }
        for d in (0..rank).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

impl Kernel for Reduce {
    fn name(&self) -> &'static str {
        KINDS[self.index()].1
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let k = w.u32("kind")?;
        let (kind, _, _) = *KINDS
            .get(k as usize)
            .ok_or_else(|| w.err(format!("bad reduce kind {k}")))?;
        Ok(Reduce {
            kind,
            axes: w.axes("axes")?,
            keep_dims: w.bool("keep_dims")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.index() as u32);
        enc::list(w, self.axes.iter().copied());
        w.push(enc::b(self.keep_dims));
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        same_dtype(self.name(), inputs, KINDS[self.index()].2)?;
        Ok(vec![reduced_shape(
            self.name(),
            &inputs[0].shape,
            &self.axes,
            self.keep_dims,
        )?])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let shape = x.shape();
        let axes = &self.axes;
        let out = &mut outputs[0];
        use ReduceKind::*;
        match (self.kind, x.ty.dtype) {
            (Sum, DType::F32) => {
                reduce_generic(shape, axes, x.f32s()?, out.f32s_mut()?, 0.0, |a, b| a + b)
            }
            (Sum, DType::F16) => reduce_generic(
                shape,
                axes,
                x.f16s()?,
                out.f16s_mut()?,
                f16::ZERO,
                |a, b| a + b,
            ),
            (Prod, DType::F32) => {
                reduce_generic(shape, axes, x.f32s()?, out.f32s_mut()?, 1.0, |a, b| {
                    if a == 0.0 || b == 0.0 {
                        0.0
                    } else {
                        a * b
                    }
                })
            }
            (Prod, DType::F16) => {
                reduce_generic(shape, axes, x.f16s()?, out.f16s_mut()?, f16::ONE, |a, b| {
                    if a == f16::ZERO || b == f16::ZERO {
                        f16::ZERO
                    } else {
                        a * b
                    }
                })
            }
            // `std::max(a, b)` keeps `a` unless `a < b`.
            (Max, DType::F32) => {
                reduce_generic(shape, axes, x.f32s()?, out.f32s_mut()?, f32::MIN, |a, b| {
                    if a < b {
                        b
                    } else {
                        a
                    }
                })
            }
            (Max, DType::F16) => {
                reduce_generic(shape, axes, x.f16s()?, out.f16s_mut()?, f16::MIN, |a, b| {
                    if a < b {
                        b
                    } else {
                        a
                    }
                })
            }
            (Max, DType::U8) => reduce_generic(shape, axes, x.u8s()?, out.u8s_mut()?, 0, u8::max),
            (Max, DType::I8) => {
                reduce_generic(shape, axes, x.i8s()?, out.i8s_mut()?, i8::MIN, i8::max)
            }
            // `std::min(a, b)` keeps `a` unless `b < a`.
            (Min, DType::F32) => {
                reduce_generic(shape, axes, x.f32s()?, out.f32s_mut()?, f32::MAX, |a, b| {
                    if b < a {
                        b
                    } else {
                        a
                    }
                })
            }
            (Min, DType::F16) => {
                reduce_generic(shape, axes, x.f16s()?, out.f16s_mut()?, f16::MAX, |a, b| {
                    if b < a {
                        b
                    } else {
                        a
                    }
                })
            }
            (Min, DType::U8) => {
                reduce_generic(shape, axes, x.u8s()?, out.u8s_mut()?, u8::MAX, u8::min)
            }
            (Min, DType::I8) => {
                reduce_generic(shape, axes, x.i8s()?, out.i8s_mut()?, i8::MAX, i8::min)
            }
            (Any, DType::Bool8) => {
                reduce_generic(shape, axes, x.bools()?, out.bools_mut()?, 0, |a, b| {
                    u8::from(a != 0 || b != 0)
                })
            }
            (All, DType::Bool8) => {
                reduce_generic(shape, axes, x.bools()?, out.bools_mut()?, 1, |a, b| {
                    u8::from(a != 0 && b != 0)
                })
            }
            (_, dtype) => {
                return Err(crate::kernels::KernelError::UnsupportedDType {
                    op: self.name(),
                    dtype,
                })
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn sum_matches_naive(rows in 1usize..5, cols in 1usize..5, seed in 0u32..1000, axis in 0u32..2) {
            let x: Vec<f32> = (0..rows * cols).map(|i| ((i as u32 * 7 + seed) % 13) as f32).collect();
            let shape = [rows, cols];
            let n_out = if axis == 0 { cols } else { rows };
            let mut out = vec![0f32; n_out];
            reduce_generic(&shape, &[axis], &x, &mut out, 0.0, |a, b| a + b);
            for (o, &got) in out.iter().enumerate() {
                let want: f32 = if axis == 0 {
                    (0..rows).map(|r| x[r * cols + o]).sum()
                } else {
                    (0..cols).map(|c| x[o * cols + c]).sum()
                };
                prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn max_of_u8_over_all() {
        let mut out = [0u8];
        reduce_generic(&[2, 2], &[0, 1], &[3, 9, 1, 4], &mut out, 0, u8::max);
        assert_eq!(out, [9]);
    }
}
