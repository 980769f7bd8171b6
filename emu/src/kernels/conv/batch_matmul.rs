//! NNAPI BATCH_MATMUL (feature level 6): `out[..., i, j] = sum_k lhs[..., i, k] *
//! rhs[..., k, j]` over batches of matrices (rank 2 to 4, the same batch dimensions on
//! both sides), either side optionally transposed first (`adj_x`, `adj_y`). float32;
//! float16 (computed in float32); int32 (wrapping, as the reference's int32 accumulator
//! does in practice); int8 asymmetric quantised: `(lhs - zl) * (rhs - zr)` summed in int32,
//! then scaled by `sl * sr / so` (NNAPI's QuantizeMultiplier and
//! MultiplyByQuantizedMultiplier), plus the output zero point, clamped to int8.
//!
//! Parameter words: adj_x, adj_y (bools).

use crate::kernels::kernel::{enc, same_dtype, Cost, Kernel, Words};
use crate::kernels::quant::{multiply_by_quantized_multiplier, quantize_multiplier};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, Quant, TensorType, View, ViewMut};

/// Batched matrix multiplication.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchMatMul {
    /// Transpose each left-hand matrix first.
    pub adj_x: bool,
    /// Transpose each right-hand matrix first.
    pub adj_y: bool,
}

/// The element types BATCH_MATMUL takes.
const TYPES: &[DType] = &[DType::F32, DType::F16, DType::I32, DType::I8];

/// One multiplication's geometry: `batches` products of `[m, k] x [k, n]`.
struct Dims {
    batches: usize,
    m: usize,
    k: usize,
    n: usize,
}

impl BatchMatMul {
    fn dims(&self, lhs: &[usize], rhs: &[usize]) -> Result<Dims> {
        let name = self.name();
        let r = lhs.len();
        if !(2..=4).contains(&r) || rhs.len() != r {
            return Err(bad_shape(
                name,
                format!("ranks {} and {} (both 2 to 4, equal)", r, rhs.len()),
            ));
        }
        if lhs[..r - 2] != rhs[..r - 2] {
            return Err(bad_shape(
                name,
                format!(
                    "batch dimensions {:?} and {:?} differ",
                    &lhs[..r - 2],
                    &rhs[..r - 2]
                ),
            ));
        }
        let (m, k) = if self.adj_x {
            (lhs[r - 1], lhs[r - 2])
        } else {
            (lhs[r - 2], lhs[r - 1])
        };
        let (k2, n) = if self.adj_y {
            (rhs[r - 1], rhs[r - 2])
        } else {
            (rhs[r - 2], rhs[r - 1])
        };
        if k != k2 || m == 0 || n == 0 || k == 0 {
            return Err(bad_shape(
                name,
                format!(
                    "cannot multiply {lhs:?} (adj {}) by {rhs:?} (adj {})",
                    self.adj_x, self.adj_y
                ),
            ));
        }
        Ok(Dims {
            batches: lhs[..r - 2].iter().product(),
            m,
            k,
            n,
        })
    }

    /// The quantised output's multiplier `sl * sr / so` (NNAPI: the product in float32,
    /// the division in float64), checked finite and non-negative.
    fn multiplier(&self, qx: &Quant, qy: &Quant, qo: &Quant) -> Result<f64> {
        let real = f64::from(qx.scale * qy.scale) / f64::from(qo.scale);
        if real.is_finite() && real >= 0.0 {
            Ok(real)
        } else {
            Err(bad_shape(self.name(), format!("output multiplier {real}")))
        }
    }

    /// Runs `out[b, i, j] = store(sum_k mul(lhs(b, i, k), rhs(b, k, j)))` with elements read
    /// by `get` from their flat index (the transposes applied here).
    fn each<A: Copy, T>(
        &self,
        d: &Dims,
        lhs: impl Fn(usize) -> A,
        rhs: impl Fn(usize) -> A,
        zero: T,
        mac: impl Fn(T, A, A) -> T,
        mut store: impl FnMut(usize, T),
    ) where
        T: Copy,
    {
        let (m, k, n) = (d.m, d.k, d.n);
        for b in 0..d.batches {
            let (lb, rb, ob) = (b * m * k, b * k * n, b * m * n);
            for i in 0..m {
                for j in 0..n {
                    let mut acc = zero;
                    for p in 0..k {
                        let l = if self.adj_x { p * m + i } else { i * k + p };
                        let r = if self.adj_y { j * k + p } else { p * n + j };
                        acc = mac(acc, lhs(lb + l), rhs(rb + r));
                    }
                    store(ob + i * n + j, acc);
                }
            }
        }
    }
}

impl Kernel for BatchMatMul {
    fn name(&self) -> &'static str {
        "BATCH_MATMUL"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(BatchMatMul {
            adj_x: w.bool("adj_x")?,
            adj_y: w.bool("adj_y")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([enc::b(self.adj_x), enc::b(self.adj_y)]);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        2..=2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        same_dtype(self.name(), inputs, TYPES)?;
        let (lhs, rhs) = (&inputs[0].shape, &inputs[1].shape);
        let d = self.dims(lhs, rhs)?;
        let mut out = lhs.clone();
        let r = out.len();
        out[r - 2] = d.m;
        out[r - 1] = d.n;
        Ok(vec![out])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        if outputs[0].dtype != inputs[0].dtype {
            return Err(KernelError::UnsupportedDType {
                op: self.name(),
                dtype: outputs[0].dtype,
            });
        }
        if inputs[0].dtype == DType::I8 {
            self.multiplier(&inputs[0].quant, &inputs[1].quant, &outputs[0].quant)?;
        }
        Ok(())
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let macs = self
            .dims(&inputs[0].shape, &inputs[1].shape)
            .map_or(0, |d| (d.batches * d.m * d.n * d.k) as u64);
        let elems = outputs
            .iter()
            .map(|s| s.iter().product::<usize>() as u64)
            .sum();
        Cost { macs, elems }
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let (x, y) = (inputs[0], inputs[1]);
        let d = self.dims(x.shape(), y.shape())?;
        let out = &mut *outputs[0].bytes;
        let f32_at = |b: &[u8], i: usize| {
            f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
        };
        let i32_at = |b: &[u8], i: usize| {
            i32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
        };
        let f16_at =
            |b: &[u8], i: usize| half::f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32();
        match x.ty.dtype {
            DType::F32 => self.each(
                &d,
                |i| f32_at(x.bytes, i),
                |i| f32_at(y.bytes, i),
                0f32,
                |a, l, r| l.mul_add(r, a),
                |o, v| out[4 * o..4 * o + 4].copy_from_slice(&v.to_le_bytes()),
            ),
            DType::F16 => self.each(
                &d,
                |i| f16_at(x.bytes, i),
                |i| f16_at(y.bytes, i),
                0f32,
                |a, l, r| l.mul_add(r, a),
                |o, v| out[2 * o..2 * o + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            ),
            DType::I32 => self.each(
                &d,
                |i| i32_at(x.bytes, i),
                |i| i32_at(y.bytes, i),
                0i32,
                |a, l, r| a.wrapping_add(l.wrapping_mul(r)),
                |o, v| out[4 * o..4 * o + 4].copy_from_slice(&v.to_le_bytes()),
            ),
            DType::I8 => {
                let (qx, qy, qo) = (&x.ty.quant, &y.ty.quant, &outputs[0].ty.quant);
                let (mult, shift) = quantize_multiplier(self.multiplier(qx, qy, qo)?);
                let (zx, zy, zo) = (qx.zero_point, qy.zero_point, qo.zero_point);
                self.each(
                    &d,
                    |i| i32::from(x.bytes[i] as i8) - zx,
                    |i| i32::from(y.bytes[i] as i8) - zy,
                    0i32,
                    |a, l, r| a.wrapping_add(l * r),
                    |o, v| {
                        let q = multiply_by_quantized_multiplier(v, mult, shift).saturating_add(zo);
                        out[o] = q.clamp(-128, 127) as i8 as u8;
                    },
                )
            }
            dtype => {
                return Err(KernelError::UnsupportedDType {
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
    use crate::kernels::KernelOp;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn run(
        k: &BatchMatMul,
        tx: &TensorType,
        x: &[u8],
        ty: &TensorType,
        y: &[u8],
        oq: Quant,
    ) -> Vec<u8> {
        let oshape = k.output_shapes(&[tx, ty]).unwrap().remove(0);
        let mut oty = TensorType::new(tx.dtype, &oshape);
        oty.quant = oq;
        let mut out = vec![0u8; oshape.iter().product::<usize>() * tx.dtype.size() as usize];
        k.run(
            &[View { ty: tx, bytes: x }, View { ty, bytes: y }],
            &mut [ViewMut {
                ty: &oty,
                bytes: &mut out,
            }],
        )
        .unwrap();
        out
    }

    #[test]
    fn float_products_with_and_without_transposes() {
        // [1,2,3] x [1,3,4], the NNAPI "Simple" case.
        let x: Vec<f32> = (1..=6).map(|v| v as f32).collect();
        let y: Vec<f32> = (7..=18).map(|v| v as f32).collect();
        let want = f32s(&[74., 80., 86., 92., 173., 188., 203., 218.]);
        let (tx, ty) = (
            TensorType::new(DType::F32, &[1, 2, 3]),
            TensorType::new(DType::F32, &[1, 3, 4]),
        );
        let k = BatchMatMul {
            adj_x: false,
            adj_y: false,
        };
        assert_eq!(
            run(&k, &tx, &f32s(&x), &ty, &f32s(&y), Quant::default()),
            want
        );
        // The same product with both sides given transposed.
        let xt = [1., 4., 2., 5., 3., 6.];
        let yt = [7., 11., 15., 8., 12., 16., 9., 13., 17., 10., 14., 18.];
        let (txt, tyt) = (
            TensorType::new(DType::F32, &[1, 3, 2]),
            TensorType::new(DType::F32, &[1, 4, 3]),
        );
        let k = BatchMatMul {
            adj_x: true,
            adj_y: true,
        };
        assert_eq!(
            run(&k, &txt, &f32s(&xt), &tyt, &f32s(&yt), Quant::default()),
            want
        );
    }

    #[test]
    fn quantised_product_requantises() {
        // lhs scale 0.25 zp 0, rhs scale 0.5 zp -64, out scale 1 zp -128 (the NNAPI case's
        // parameters): real 1*2*0.25*0.5... each product of reals rounded to the output.
        let mut tx = TensorType::new(DType::I8, &[1, 1, 2]);
        tx.quant = Quant::new(0.25, 0);
        let mut ty = TensorType::new(DType::I8, &[1, 2, 1]);
        ty.quant = Quant::new(0.5, -64);
        // lhs reals [1, 2], rhs reals [3, 4] -> 11 -> stored 11 - 128 = -117.
        let x = [4i8 as u8, 8i8 as u8];
        let y = [(-58i8) as u8, (-56i8) as u8];
        let k = BatchMatMul {
            adj_x: false,
            adj_y: false,
        };
        assert_eq!(
            run(&k, &tx, &x, &ty, &y, Quant::new(1.0, -128)),
            [(-117i8) as u8]
        );
    }

    #[test]
    fn mismatched_shapes_are_refused() {
        let k = BatchMatMul {
            adj_x: false,
            adj_y: false,
        };
        let a = TensorType::new(DType::F32, &[2, 2, 3]);
        assert!(k
            .output_shapes(&[&a, &TensorType::new(DType::F32, &[1, 3, 4])])
            .is_err());
        assert!(k
            .output_shapes(&[&a, &TensorType::new(DType::F32, &[2, 2, 4])])
            .is_err());
        assert!(k
            .output_shapes(&[&a, &TensorType::new(DType::F32, &[3, 4])])
            .is_err());
        assert!(k
            .output_shapes(&[&a, &TensorType::new(DType::I32, &[2, 3, 4])])
            .is_err());
        let op = KernelOp::from(k);
        let mut w = Vec::new();
        op.kernel().encode(&mut w);
        assert_eq!(KernelOp::decode(op.opcode(), &w).unwrap(), op);
    }
}
