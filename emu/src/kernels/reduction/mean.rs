//! NNAPI MEAN over a set of axes, keeping the reduced dimensions as 1 or dropping them.
//! Removing every dimension gives shape `[1]`, as NNAPI does. float32 (accumulated in f64);
//! float16 computes in float32. Quantised u8/i8: as the NNAPI reference (TFLite's generic
//! Mean on the stored type), the stored integers are summed and divided by the count with
//! truncating integer division; the output keeps the input's scale and zero point.
//!
//! Parameter words: axes (list, each < MAX_RANK, no repeats), keep_dims.

use crate::kernels::kernel::{enc, same_dtype, Kernel, Words};
use crate::kernels::quant::QuantElem;
use crate::kernels::{bad_shape, Result, Tensor, MAX_RANK};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};

/// Mean over axes.
#[derive(Debug, Clone, PartialEq)]
pub struct Mean {
    /// The reduced axes (non-negative).
    pub axes: Vec<u32>,
    /// Keep reduced dimensions as size 1.
    pub keep_dims: bool,
}

/// The shape left after reducing `axes` of `shape` (NNAPI gives `[1]` for a full
/// reduction without keep_dims).
pub(crate) fn reduced_shape(
    op: &'static str,
    shape: &[usize],
    axes: &[u32],
    keep_dims: bool,
) -> Result<Vec<usize>> {
    if shape.is_empty() {
        return Err(bad_shape(op, "input must have rank >= 1"));
    }
    let mut reduce = [false; MAX_RANK];
    for &a in axes {
        let a = a as usize;
        match reduce.get_mut(a) {
            Some(r) if a < shape.len() && !*r => *r = true,
            _ => {
                return Err(bad_shape(
                    op,
                    format!(
                        "axes {axes:?} out of range for rank {} or repeated",
                        shape.len()
                    ),
                ))
            }
        }
    }
    let mut out = Vec::with_capacity(shape.len());
    for (i, &d) in shape.iter().enumerate() {
        if !reduce[i] {
            out.push(d);
        } else if keep_dims {
            out.push(1);
        }
    }
    if out.is_empty() {
        out.push(1);
    }
    Ok(out)
}

impl Kernel for Mean {
    fn name(&self) -> &'static str {
        "MEAN"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(Mean {
            axes: w.axes("axes")?,
            keep_dims: w.bool("keep_dims")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        enc::list(w, self.axes.iter().copied());
        w.push(enc::b(self.keep_dims));
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        same_dtype(
            self.name(),
            inputs,
            &[DType::F32, DType::F16, DType::U8, DType::I8],
        )?;
        Ok(vec![reduced_shape(
            self.name(),
            &inputs[0].shape,
            &self.axes,
            self.keep_dims,
        )?])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        if matches!(x.ty.dtype, DType::U8 | DType::I8) {
            let xf: Vec<f32> = match x.ty.dtype {
                DType::U8 => x.u8s()?.iter().map(|&v| f32::from(v)).collect(),
                _ => x.i8s()?.iter().map(|&v| f32::from(v)).collect(),
            };
            let count: usize = self
                .axes
                .iter()
                .filter_map(|&a| x.shape().get(a as usize))
                .product();
            let mut mean = vec![0f32; outputs[0].ty.shape.iter().product()];
            mean_f32(
                &self.axes,
                Tensor {
                    shape: x.shape(),
                    data: &xf,
                },
                &mut mean,
            )?;
            // Recover the integer sums from the means (exact for small counts; for huge
            // sums the f32 mean can be one step off, within the ±1 tolerance) and divide
            // with truncation, as the reference's integer division.
            let div = |m: f32| -> i32 {
                let sum = (f64::from(m) * count as f64).round() as i64;
                (sum / (count.max(1) as i64)) as i32
            };
            match x.ty.dtype {
                DType::U8 => {
                    for (o, &m) in outputs[0].u8s_mut()?.iter_mut().zip(&mean) {
                        *o = u8::saturate_from_i32(div(m));
                    }
                }
                _ => {
                    for (o, &m) in outputs[0].i8s_mut()?.iter_mut().zip(&mean) {
                        *o = i8::saturate_from_i32(div(m));
                    }
                }
            }
            return Ok(());
        }
        widen_f16(inputs, outputs, |ins, outs| {
            mean_f32(&self.axes, Tensor::f32(&ins[0])?, outs[0].f32s_mut()?)
        })
    }
}

/// The float32 mean; axes were validated by `output_shapes`.
pub(crate) fn mean_f32(axes: &[u32], x: Tensor<'_>, out: &mut [f32]) -> Result<()> {
    let rank = x.shape.len();
    let mut reduce = [false; MAX_RANK];
    for &a in axes {
        match reduce.get_mut(a as usize) {
            Some(r) if (a as usize) < rank => *r = true,
            _ => return Err(bad_shape("MEAN", format!("axis {a} out of range"))),
        }
    }
    // Output stride of each input dimension: 0 on reduced dims.
    let mut ostride = vec![0usize; rank];
    let mut s = 1usize;
    for d in (0..rank).rev() {
        if !reduce[d] {
            ostride[d] = s;
            s *= x.shape[d];
        }
    }
    let count: usize = (0..rank)
        .filter(|&d| reduce[d])
        .map(|d| x.shape[d])
        .product();
    let mut acc = vec![0.0f64; out.len()];
    if !x.data.is_empty() {
        let last = rank - 1;
        let (n_last, s_last) = (x.shape[last], ostride[last]);
        let mut idx = vec![0usize; rank];
        let mut pos = 0;
        while pos < x.data.len() {
            let base: usize = (0..last).map(|d| idx[d] * ostride[d]).sum();
            for (j, &v) in x.data[pos..pos + n_last].iter().enumerate() {
                acc[base + j * s_last] += f64::from(v);
            }
            pos += n_last;
            for d in (0..last).rev() {
                idx[d] += 1;
                if idx[d] < x.shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = (a / count as f64) as f32;
    }
    Ok(())
}

#[cfg(test)]
mod quant_tests {
    use super::*;
    use crate::kernels::conv::testref::{small_shape, Q8};
    use crate::kernels::conv::testutil::run_typed;
    use crate::kernels::KernelOp;
    use proptest::prelude::*;

    proptest! {
        /// u8 / i8 MEAN over a random axis set against dequantise -> f64 mean ->
        /// requantise (the output keeps the input's quantisation), within 1.
        #[test]
        fn quant_averages_within_one_of_f64(
            shape in small_shape(),
            mask in 1u32..8,
            keep_dims in any::<bool>(),
            q in Q8::arb(),
            raw in proptest::collection::vec(0i32..256, 27),
        ) {
            let rank = shape.len();
            let axes: Vec<u32> = (0..rank as u32).filter(|a| mask & (1 << a) != 0).collect();
            prop_assume!(!axes.is_empty());
            let (xs, bytes) = q.store(&raw[..shape.iter().product::<usize>()]);
            let op = KernelOp::from(Mean { axes: axes.clone(), keep_dims });
            let out = q.load(&run_typed(&op, &[(q.ty(&shape), bytes)], q.ty(&[1])).unwrap());
            // f64 reference: accumulate each input into its output slot (row-major over
            // the kept dimensions).
            let mut sums = vec![0f64; out.len()];
            let mut counts = vec![0usize; out.len()];
            for (i, &v) in xs.iter().enumerate() {
                let (mut rem, mut slot) = (i, 0usize);
                let mut idx = vec![0usize; rank];
                for d in (0..rank).rev() {
                    idx[d] = rem % shape[d];
                    rem /= shape[d];
                }
                for d in 0..rank {
                    if !axes.contains(&(d as u32)) {
                        slot = slot * shape[d] + idx[d];
                    }
                }
                sums[slot] += q.real(v);
                counts[slot] += 1;
            }
            for (k, &got) in out.iter().enumerate() {
                let want = q.quantize(sums[k] / counts[k] as f64);
                prop_assert!((got - want).abs() <= 1, "{} vs {} at {}", got, want, k);
            }
        }
    }
}
