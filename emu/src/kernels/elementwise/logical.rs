//! NNAPI LOGICAL_AND, LOGICAL_OR (bool8, broadcast), LOGICAL_NOT (bool8) and SELECT
//! (`cond ? a : b` element-wise, all of one shape; float32, float16, int32 copied, uint8 /
//! int8 requantised to the output's quantisation as the reference does).
//!
//! Parameter words: kind (And 0, Or 1, Not 2, Select 3).

use super::minmax::requantize;
use super::{decode_kind, kind_enum};
use crate::kernels::kernel::{same_dtype, Kernel, Words};
use crate::kernels::layout::{broadcast_shape, for_each_broadcast};
use crate::kernels::quant::QuantElem;
use crate::kernels::{KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

kind_enum! {
    /// Which operation.
    pub enum LogicalKind {
        /// a && b
        And => "LOGICAL_AND",
        /// a || b
        Or => "LOGICAL_OR",
        /// !a
        Not => "LOGICAL_NOT",
        /// cond ? a : b
        Select => "SELECT",
    }
}

/// One logical operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Logical {
    /// The operation.
    pub kind: LogicalKind,
}

fn select_quant<T: QuantElem>(c: &[u8], a: &[T], b: &[T], o: &mut [T], tys: [&TensorType; 3]) {
    for (i, d) in o.iter_mut().enumerate() {
        let v = if c[i] != 0 {
            requantize(a[i], &tys[0].quant, &tys[2].quant)
        } else {
            requantize(b[i], &tys[1].quant, &tys[2].quant)
        };
        *d = T::saturate_from_i32(v);
    }
}

impl Kernel for Logical {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let kind = decode_kind(w, "logical", LogicalKind::from_word)?;
        Ok(Logical { kind })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.kind.word());
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        match self.kind {
            LogicalKind::And | LogicalKind::Or => 2..=2,
            LogicalKind::Not => 1..=1,
            LogicalKind::Select => 3..=3,
        }
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        match self.kind {
            LogicalKind::And | LogicalKind::Or => {
                same_dtype(self.name(), inputs, &[DType::Bool8])?;
                Ok(vec![broadcast_shape(
                    self.name(),
                    &inputs[0].shape,
                    &inputs[1].shape,
                )?])
            }
            LogicalKind::Not => {
                same_dtype(self.name(), inputs, &[DType::Bool8])?;
                Ok(vec![inputs[0].shape.clone()])
            }
            LogicalKind::Select => {
                same_dtype(self.name(), &inputs[..1], &[DType::Bool8])?;
                let dt = same_dtype(
                    self.name(),
                    &inputs[1..],
                    &[DType::F32, DType::F16, DType::I32, DType::U8, DType::I8],
                )?;
                if inputs[1].shape != inputs[0].shape || inputs[2].shape != inputs[0].shape {
                    return Err(KernelError::InvalidShape {
                        op: self.name(),
                        reason: "condition and inputs must have one shape".into(),
                    });
                }
                if matches!(dt, DType::U8 | DType::I8)
                    && inputs[1..]
                        .iter()
                        .any(|t| !(t.quant.scale > 0.0 && t.quant.scale.is_finite()))
                {
                    return Err(KernelError::InvalidShape {
                        op: self.name(),
                        reason: "quantised scales must be > 0".into(),
                    });
                }
                Ok(vec![inputs[0].shape.clone()])
            }
        }
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let want = if self.kind == LogicalKind::Select {
            inputs[1].dtype
        } else {
            DType::Bool8
        };
        for o in outputs {
            if o.dtype != want {
                return Err(KernelError::DType {
                    expected: want,
                    got: o.dtype,
                });
            }
            if matches!(want, DType::U8 | DType::I8)
                && !(o.quant.scale > 0.0 && o.quant.scale.is_finite())
            {
                return Err(KernelError::InvalidShape {
                    op: self.name(),
                    reason: "output scale must be > 0".into(),
                });
            }
        }
        Ok(())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        match self.kind {
            LogicalKind::And | LogicalKind::Or => {
                let (a, b) = (inputs[0], inputs[1]);
                let (x, y) = (a.bools()?, b.bools()?);
                let out_shape = outputs[0].ty.shape.clone();
                let o = outputs[0].bools_mut()?;
                let and = self.kind == LogicalKind::And;
                for_each_broadcast(a.shape(), b.shape(), &out_shape, |i, ia, ib| {
                    let (p, q) = (x[ia] != 0, y[ib] != 0);
                    o[i] = u8::from(if and { p && q } else { p || q });
                });
            }
            LogicalKind::Not => {
                let x = inputs[0].bools()?;
                for (d, &v) in outputs[0].bools_mut()?.iter_mut().zip(x) {
                    *d = u8::from(v == 0);
                }
            }
            LogicalKind::Select => {
                let c = inputs[0].bools()?;
                let (a, b) = (inputs[1], inputs[2]);
                let ot = outputs[0].ty;
                match a.ty.dtype {
                    DType::U8 => {
                        let o = outputs[0].u8s_mut()?;
                        select_quant(c, a.u8s()?, b.u8s()?, o, [a.ty, b.ty, ot]);
                    }
                    DType::I8 => {
                        let o = outputs[0].i8s_mut()?;
                        select_quant(c, a.i8s()?, b.i8s()?, o, [a.ty, b.ty, ot]);
                    }
                    _ => {
                        // float32, float16, int32: copy the chosen element's bytes.
                        let sz = a.ty.dtype.size() as usize;
                        let o = &mut *outputs[0].bytes;
                        for (i, &cv) in c.iter().enumerate() {
                            let src = if cv != 0 { a.bytes } else { b.bytes };
                            let r = i * sz..(i + 1) * sz;
                            if let (Some(d), Some(s)) = (o.get_mut(r.clone()), src.get(r)) {
                                d.copy_from_slice(s);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::conv::testref::quantize;
    use crate::kernels::conv::testutil::run_typed;
    use crate::kernels::KernelOp;
    use proptest::prelude::*;

    /// Runs `kind` on typed inputs (raw bytes), the output typed `out`.
    fn run(kind: LogicalKind, ins: &[(TensorType, Vec<u8>)], out: TensorType) -> Vec<u8> {
        run_typed(&KernelOp::from(Logical { kind }), ins, out).unwrap()
    }

    /// A 2-D shape `[h, w]` and a broadcast partner (each dimension kept or 1).
    fn broadcast_pair() -> impl Strategy<Value = ([usize; 2], [usize; 2])> {
        (1usize..4, 1usize..4, any::<bool>(), any::<bool>())
            .prop_map(|(h, w, bh, bw)| ([h, w], [if bh { 1 } else { h }, if bw { 1 } else { w }]))
    }

    proptest! {
        /// AND / OR against the truth table on broadcast operands (any non-zero byte is
        /// true; the output is 0 / 1), either operand order.
        #[test]
        fn and_or_match_truth_table(
            (full, part) in broadcast_pair(),
            swap in any::<bool>(),
            and in any::<bool>(),
            bytes in proptest::collection::vec(0u8..3, 18),
        ) {
            let (sa, sb) = if swap { (part, full) } else { (full, part) };
            let (na, nb) = (sa[0] * sa[1], sb[0] * sb[1]);
            let (a, b) = (bytes[..na].to_vec(), bytes[9..9 + nb].to_vec());
            let kind = if and { LogicalKind::And } else { LogicalKind::Or };
            let ty = |s: [usize; 2]| TensorType::new(DType::Bool8, &s);
            let out = run(kind, &[(ty(sa), a.clone()), (ty(sb), b.clone())], ty(full));
            let at = |s: [usize; 2], i: usize, j: usize| (i % s[0]) * s[1] + j % s[1];
            for i in 0..full[0] {
                for j in 0..full[1] {
                    let (p, q) = (a[at(sa, i, j)] != 0, b[at(sb, i, j)] != 0);
                    let want = if and { p && q } else { p || q };
                    prop_assert_eq!(out[i * full[1] + j], u8::from(want));
                }
            }
        }

        /// NOT flips truth and normalises to 0 / 1.
        #[test]
        fn not_flips(bytes in proptest::collection::vec(0u8..3, 1..12)) {
            let ty = TensorType::new(DType::Bool8, &[bytes.len()]);
            let out = run(LogicalKind::Not, &[(ty.clone(), bytes.clone())], ty);
            for (o, b) in out.iter().zip(&bytes) {
                prop_assert_eq!(*o, u8::from(*b == 0));
            }
        }

        /// int32 SELECT copies the chosen element exactly.
        #[test]
        fn select_i32_exact(
            c in proptest::collection::vec(0u8..2, 6),
            a in proptest::collection::vec(any::<i32>(), 6),
            b in proptest::collection::vec(any::<i32>(), 6),
        ) {
            let ty = TensorType::new(DType::I32, &[2, 3]);
            let bytes = |v: &[i32]| v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
            let out = run(
                LogicalKind::Select,
                &[(TensorType::new(DType::Bool8, &[2, 3]), c.clone()), (ty.clone(), bytes(&a)), (ty.clone(), bytes(&b))],
                ty,
            );
            for (i, o) in out.chunks_exact(4).enumerate() {
                let got = i32::from_ne_bytes([o[0], o[1], o[2], o[3]]);
                prop_assert_eq!(got, if c[i] != 0 { a[i] } else { b[i] });
            }
        }

        /// uint8 SELECT against dequantise -> pick -> requantise: within 1, and exact when
        /// the chosen input has the output's quantisation.
        #[test]
        fn select_u8_requantises(
            c in proptest::collection::vec(0u8..2, 6),
            a in proptest::collection::vec(any::<u8>(), 6),
            b in proptest::collection::vec(any::<u8>(), 6),
            (sa, za) in (0.01f32..2.0, 0i32..256),
            (sb, zb) in (0.01f32..2.0, 0i32..256),
            (so, zo) in (0.01f32..2.0, 0i32..256),
            same in any::<bool>(),
        ) {
            let (so, zo) = if same { (sa, za) } else { (so, zo) };
            let q = |s, z| TensorType::quantized(DType::U8, &[6], s, z);
            let out = run(
                LogicalKind::Select,
                &[(TensorType::new(DType::Bool8, &[6]), c.clone()), (q(sa, za), a.clone()), (q(sb, zb), b.clone())],
                q(so, zo),
            );
            for i in 0..6 {
                let (v, s, z) = if c[i] != 0 { (a[i], sa, za) } else { (b[i], sb, zb) };
                let real = f64::from(s) * f64::from(i32::from(v) - z);
                let want = quantize(real, f64::from(so), zo, 0, 255);
                let diff = (i32::from(out[i]) - want).abs();
                if same && c[i] != 0 {
                    prop_assert_eq!(diff, 0, "{} vs {}", out[i], want);
                } else {
                    prop_assert!(diff <= 1, "{} vs {}", out[i], want);
                }
            }
        }
    }
}
