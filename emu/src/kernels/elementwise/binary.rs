//! NNAPI ADD, SUB, MUL, DIV with numpy-style broadcasting and a fused activation.
//! float32 (IEEE division), float16 (computed in float32), int32 (wrapping add/sub/mul;
//! DIV rounds toward negative infinity and gives 0 for a zero divisor; no activation).
//!
//! Quantised (uint8 / int8) ADD, SUB and MUL follow the NNAPI reference's integer paths:
//! add/sub scale both inputs (shifted left by 20) by multipliers relative to twice the
//! larger input scale, sum, and rescale to the output; mul multiplies the offset-corrected
//! values and rescales by `s1 * s2 / s_out`. DIV has no quantised form.
//!
//! Parameter words: kind (Add 0, Sub 1, Mul 2, Div 3), act. Inputs: a, b. Output: one.

use super::{decode_kind, kind_enum};
use crate::kernels::elementwise::quant_add_affine::{Affine, Real};
use crate::kernels::elementwise::{quant_binary_simd, zip_f32};
use crate::kernels::isa::{isa, Isa};
use crate::kernels::kernel::{same_dtype, Kernel, Words};
use crate::kernels::layout::{broadcast_shape, for_each_broadcast};
use crate::kernels::quant::{
    multiply_by_quantized_multiplier, multiply_by_quantized_multiplier_smaller_than_one_exp,
    quantize_multiplier, quantize_multiplier_smaller_than_one_exp, quantized_activation_range,
    QuantElem,
};
use crate::kernels::requant::{memoised, Memo, Requant};
use crate::kernels::{Activation, KernelError, Result};
use crate::tensor::{widen_f16, DType, TensorType, View, ViewMut};
use std::cell::RefCell;
use std::rc::Rc;

kind_enum! {
    /// Which arithmetic operation.
    pub enum BinaryKind {
        /// a + b
        Add => "ADD",
        /// a - b
        Sub => "SUB",
        /// a * b
        Mul => "MUL",
        /// a / b
        Div => "DIV",
    }
}

/// `out = act(a op b)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Binary {
    /// The operation.
    pub kind: BinaryKind,
    /// Fused activation.
    pub act: Activation,
}

/// Fixed-point parameters of a quantised ADD/SUB/MUL.
#[derive(Debug, Clone, Copy)]
struct QuantParams {
    kind: BinaryKind,
    off1: i32,
    off2: i32,
    out_off: i32,
    m1: (i32, i32),
    m2: (i32, i32),
    out: (i32, i32),
    lo: i32,
    hi: i32,
}

/// The reference's left shift of add/sub inputs.
const LEFT_SHIFT: i32 = 20;

impl Binary {
    /// The reference's fixed-point parameters from the quantisation of a, b and the output.
    fn quant_params(&self, ts: &[&TensorType; 3]) -> Result<QuantParams> {
        let bad = |reason: String| KernelError::InvalidShape {
            op: self.name(),
            reason,
        };
        let (s1, s2, so) = (ts[0].quant.scale, ts[1].quant.scale, ts[2].quant.scale);
        if !(s1 > 0.0 && s2 > 0.0 && so > 0.0) {
            return Err(bad("quantised scales must be > 0".into()));
        }
        let (qmin, qmax) = if ts[2].dtype == DType::U8 {
            (0, 255)
        } else {
            (-128, 127)
        };
        let (lo, hi) =
            quantized_activation_range(self.act as u32, so, ts[2].quant.zero_point, qmin, qmax);
        let mut p = QuantParams {
            kind: self.kind,
            off1: -ts[0].quant.zero_point,
            off2: -ts[1].quant.zero_point,
            out_off: ts[2].quant.zero_point,
            m1: (0, 0),
            m2: (0, 0),
            out: (0, 0),
            lo,
            hi,
        };
        let err = |e: crate::kernels::quant::QuantError| bad(e.to_string());
        match self.kind {
            BinaryKind::Add | BinaryKind::Sub => {
                let twice_max = 2.0 * f64::from(s1.max(s2));
                p.m1 = quantize_multiplier_smaller_than_one_exp(f64::from(s1) / twice_max)
                    .map_err(err)?;
                p.m2 = quantize_multiplier_smaller_than_one_exp(f64::from(s2) / twice_max)
                    .map_err(err)?;
                if self.kind == BinaryKind::Sub {
                    p.m2.0 = -p.m2.0;
                }
                let real_out = twice_max / (f64::from(1u32 << LEFT_SHIFT) * f64::from(so));
                p.out = quantize_multiplier_smaller_than_one_exp(real_out).map_err(err)?;
            }
            BinaryKind::Mul => {
                // The reference computes the product of the scales in float.
                let real = f64::from(s1 * s2) / f64::from(so);
                if !(real.is_finite() && real > 0.0) {
                    return Err(bad(format!("bad output multiplier {real}")));
                }
                p.out = quantize_multiplier(real);
            }
            BinaryKind::Div => return Err(bad("DIV has no quantised form".into())),
        }
        Ok(p)
    }
}

/// One quantised element of ADD/SUB/MUL, as the reference's integer path.
#[inline]
fn quant_elem(p: &QuantParams, x: i32, y: i32) -> i32 {
    let v1 = p.off1 + x;
    let v2 = p.off2 + y;
    let raw = match p.kind {
        BinaryKind::Mul => p.out_off + multiply_by_quantized_multiplier(v1 * v2, p.out.0, p.out.1),
        _ => {
            let s1 = multiply_by_quantized_multiplier_smaller_than_one_exp(
                v1 << LEFT_SHIFT,
                p.m1.0,
                p.m1.1,
            );
            let s2 = multiply_by_quantized_multiplier_smaller_than_one_exp(
                v2 << LEFT_SHIFT,
                p.m2.0,
                p.m2.1,
            );
            p.out_off
                + multiply_by_quantized_multiplier_smaller_than_one_exp(
                    s1.saturating_add(s2),
                    p.out.0,
                    p.out.1,
                )
        }
    };
    raw.clamp(p.lo, p.hi)
}

/// [`quant_elem`] of two stored values, as the output's stored value.
#[inline]
fn quant_one<T: QuantElem>(p: &QuantParams, x: T, y: T) -> T {
    T::saturate_from_i32(quant_elem(p, x.to_i32(), y.to_i32()))
}

fn run_quant<T: QuantElem>(
    p: &QuantParams,
    x: &[T],
    y: &[T],
    o: &mut [T],
    sa: &[usize],
    sb: &[usize],
    so: &[usize],
) {
    run_quant_at(isa(), p, x, y, o, sa, sb, so);
}

/// [`run_quant`] at the vector level `level` (capped at the CPU's): same shapes run
/// ADD/SUB's affine form where one was found for the constants (`quant_add_affine`),
/// else [`exact_same_shape`]; other shapes element by element.
#[allow(clippy::too_many_arguments)]
fn run_quant_at<T: QuantElem>(
    level: Isa,
    p: &QuantParams,
    x: &[T],
    y: &[T],
    o: &mut [T],
    sa: &[usize],
    sb: &[usize],
    so: &[usize],
) {
    if sa == so && sb == so {
        let done = match affine_form::<T>(level, p).as_ref() {
            Some(form) => form.run(level, x, y, o, &|a, b| quant_one(p, a, b)).done,
            None => 0,
        };
        exact_same_shape(level, p, &x[done..], &y[done..], &mut o[done..]);
        return;
    }
    for_each_broadcast(sa, sb, so, |i, ia, ib| {
        o[i] = quant_one(p, x[ia], y[ib]);
    });
}

thread_local! {
    /// The affine forms fitted on this thread, by constants ([`affine_form`]).
    static FORMS: Memo<Option<Affine>> = RefCell::default();
}

/// ADD/SUB's affine form for `p` and the one-byte type `T`, fitted once per thread
/// (about 50 µs: two runs over every pair of values, see `quant_add_affine`); `None` for
/// MUL, for other types and where no form passes.
fn affine_form<T: QuantElem>(level: Isa, p: &QuantParams) -> Rc<Option<Affine>> {
    let key = |w: &mut Vec<u32>| {
        w.extend([T::MIN, p.kind as i32, p.off1, p.off2, p.out_off].map(|v| v as u32));
        w.extend(
            [p.m1, p.m2, p.out]
                .iter()
                .flat_map(|&(m, s)| [m as u32, s as u32]),
        );
        w.extend([p.lo as u32, p.hi as u32]);
    };
    let fit = || {
        if p.kind == BinaryKind::Mul || std::mem::size_of::<T>() != 1 {
            return Ok::<_, std::convert::Infallible>(None);
        }
        // Each operand's term is `v m_i 2^(s_i) / 2^11` (its shift left by 20, the high
        // multiply's 2^31), the output `acc m_o 2^(s_o) / 2^31`.
        let scale = |(m, s): (i32, i32)| f64::from(m) * 2f64.powi(s);
        let out = scale(p.out) / 2f64.powi(31 + 11);
        let a = [scale(p.m1) * out, scale(p.m2) * out];
        let real = Real {
            a,
            c: f64::from(p.off1) * a[0] + f64::from(p.off2) * a[1] + f64::from(p.out_off),
            lo: p.lo,
            hi: p.hi,
        };
        Ok(Affine::fit(
            level,
            &real,
            |x: &[T], y: &[T], o: &mut [T]| exact_same_shape(level, p, x, y, o),
            |a, b| quant_one(p, a, b),
        ))
    };
    match memoised(&FORMS, key, fit) {
        Ok(form) => form,
        Err(never) => match never {},
    }
}

/// Elements from which [`add_same_shape`]'s tables pay.
const TABLES_FROM: usize = 256;

/// Same-shaped operands through the reference's integers: the vector lanes
/// (`quant_binary_simd`) as far as they go, ADD/SUB otherwise (and at the plain level)
/// their tables, the rest element by element.
fn exact_same_shape<T: QuantElem>(level: Isa, p: &QuantParams, x: &[T], y: &[T], o: &mut [T]) {
    let consts = quant_binary_simd::Consts {
        mul: p.kind == BinaryKind::Mul,
        off: [p.off1, p.off2],
        input: [p.m1, p.m2],
        out: p.out,
        zp: p.out_off,
        lo: p.lo,
        hi: p.hi,
    };
    let done = quant_binary_simd::same_shape(level, &consts, x, y, o);
    let (x, y, o) = (&x[done..], &y[done..], &mut o[done..]);
    // The tables cost as much as some hundreds of elements: not for a vector step's tail.
    if done == 0 && p.kind != BinaryKind::Mul && x.len() >= TABLES_FROM {
        add_same_shape(p, x, y, o);
    } else {
        for ((d, &a), &b) in o.iter_mut().zip(x).zip(y) {
            *d = quant_one(p, a, b);
        }
    }
}

/// ADD/SUB of same-shaped operands: each operand's rescaled term depends on its stored
/// value only, so it comes from a table of the type's values; only the output rescale
/// is computed per element, a block at a time by the vectorised output stage of the
/// convolutions (`requant::Requant` with bias 0, rows of 64: the same integers as [`quant_elem`], its
/// multiplier's shift never being positive).
fn add_same_shape<T: QuantElem>(p: &QuantParams, x: &[T], y: &[T], o: &mut [T]) {
    // Rows of WIDTH elements (the stage's constants), BLOCK elements a call.
    const WIDTH: usize = 64;
    const BLOCK: usize = 16 * WIDTH;
    let term = |v: i32, off: i32, m: (i32, i32)| {
        multiply_by_quantized_multiplier_smaller_than_one_exp((off + v) << LEFT_SHIFT, m.0, m.1)
    };
    let t1: Vec<i32> = (T::MIN..=T::MAX).map(|v| term(v, p.off1, p.m1)).collect();
    let t2: Vec<i32> = (T::MIN..=T::MAX).map(|v| term(v, p.off2, p.m2)).collect();
    let at = |t: &[i32], v: T| t.get((v.to_i32() - T::MIN) as usize).copied().unwrap_or(0);
    let stage = Requant::new(
        vec![0; WIDTH],
        vec![p.out.0; WIDTH],
        vec![p.out.1; WIDTH],
        p.out_off,
        p.lo,
        p.hi,
    );
    let mut sums = vec![0i32; BLOCK];
    for ((d, a), b) in o
        .chunks_mut(BLOCK)
        .zip(x.chunks(BLOCK))
        .zip(y.chunks(BLOCK))
    {
        for ((s, &a), &b) in sums.iter_mut().zip(a).zip(b) {
            *s = at(&t1, a).saturating_add(at(&t2, b));
        }
        stage.rows(&sums[..d.len()], d, WIDTH);
    }
}

/// Integer division rounding toward negative infinity; 0 for a zero divisor (NNAPI leaves
/// it undefined but must not crash).
fn floor_div(p: i32, q: i32) -> i32 {
    if q == 0 {
        return 0;
    }
    let r = p.wrapping_div(q);
    if p.wrapping_rem(q) != 0 && ((p < 0) != (q < 0)) {
        r.wrapping_sub(1)
    } else {
        r
    }
}

impl Kernel for Binary {
    /// Every output index is visited once by the (broadcast) walk.
    fn overwrites_f32_outputs(&self) -> bool {
        true
    }

    /// The quantised walks too: the vector lanes, then the tables or the element loop
    /// from where they stop, or the broadcast walk.
    fn overwrites_quant8_outputs(&self) -> bool {
        true
    }

    crate::kernels::kernel::fused_activation_field!();

    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let kind = decode_kind(w, "binary", BinaryKind::from_word)?;
        Ok(Binary {
            kind,
            act: w.act()?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([self.kind.word(), self.act as u32]);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        2..=2
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let quant_ok = self.kind != BinaryKind::Div;
        let allowed: &[DType] = if quant_ok {
            &[DType::F32, DType::F16, DType::I32, DType::U8, DType::I8]
        } else {
            &[DType::F32, DType::F16, DType::I32]
        };
        let dt = same_dtype(self.name(), inputs, allowed)?;
        if dt == DType::I32 && self.act != Activation::None {
            return Err(KernelError::InvalidShape {
                op: self.name(),
                reason: "int32 arithmetic takes no activation".into(),
            });
        }
        Ok(vec![broadcast_shape(
            self.name(),
            &inputs[0].shape,
            &inputs[1].shape,
        )?])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        let want = inputs[0].dtype;
        for o in outputs {
            if o.dtype != want {
                return Err(KernelError::DType {
                    expected: want,
                    got: o.dtype,
                });
            }
        }
        if matches!(want, DType::U8 | DType::I8) {
            let ts = [inputs[0], inputs[1], outputs[0]];
            self.quant_params(&ts)?;
        }
        Ok(())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let (a, b) = (inputs[0], inputs[1]);
        // The type outlives the borrow of `outputs` (no copy of the shape per run).
        let out_ty: &TensorType = outputs[0].ty;
        let out_shape = &out_ty.shape;
        if matches!(a.ty.dtype, DType::U8 | DType::I8) {
            let p = self.quant_params(&[a.ty, b.ty, outputs[0].ty])?;
            if a.ty.dtype == DType::U8 {
                let (x, y) = (a.u8s()?, b.u8s()?);
                let o = outputs[0].u8s_mut()?;
                run_quant(&p, x, y, o, a.shape(), b.shape(), out_shape);
            } else {
                let (x, y) = (a.i8s()?, b.i8s()?);
                let o = outputs[0].i8s_mut()?;
                run_quant(&p, x, y, o, a.shape(), b.shape(), out_shape);
            }
            return Ok(());
        }
        if a.ty.dtype == DType::I32 {
            let (x, y) = (a.i32s()?, b.i32s()?);
            let o = outputs[0].i32s_mut()?;
            let f: fn(i32, i32) -> i32 = match self.kind {
                BinaryKind::Add => i32::wrapping_add,
                BinaryKind::Sub => i32::wrapping_sub,
                BinaryKind::Mul => i32::wrapping_mul,
                BinaryKind::Div => floor_div,
            };
            for_each_broadcast(a.shape(), b.shape(), out_shape, |i, ia, ib| {
                o[i] = f(x[ia], y[ib]);
            });
            return Ok(());
        }
        let kind = self.kind;
        let act = self.act;
        widen_f16(inputs, outputs, |ins, outs| {
            let (x, y) = (ins[0].f32s()?, ins[1].f32s()?);
            let o = outs[0].f32s_mut()?;
            let shapes = [ins[0].shape(), ins[1].shape(), &out_shape[..]];
            // One loop per operation (a closure per kind, not a call per element).
            match kind {
                BinaryKind::Add => zip_f32(shapes, x, y, o, act, |p, q| p + q),
                BinaryKind::Sub => zip_f32(shapes, x, y, o, act, |p, q| p - q),
                BinaryKind::Mul => zip_f32(shapes, x, y, o, act, |p, q| p * q),
                BinaryKind::Div => zip_f32(shapes, x, y, o, act, |p, q| p / q),
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Staged;
    use proptest::prelude::*;

    /// Runs `k` on uint8 tensors of the given types and data.
    fn run_u8(k: &Binary, tys: [&TensorType; 3], a: &[u8], b: &[u8]) -> Vec<u8> {
        let stage = |d: &[u8]| {
            let mut s = Staged::zeroed(d.len());
            s.bytes_mut().copy_from_slice(d);
            s
        };
        let (sa, sb) = (stage(a), stage(b));
        let mut so = Staged::zeroed(tys[2].numel());
        // As the engine does, an output the kernel says it overwrites comes uncleared.
        if k.overwrites_quant8_outputs() {
            so.bytes_mut().fill(0xA5);
        }
        k.check_outputs(&tys[..2], &tys[2..]).unwrap();
        let ins = [
            View {
                ty: tys[0],
                bytes: sa.bytes(),
            },
            View {
                ty: tys[1],
                bytes: sb.bytes(),
            },
        ];
        let mut outs = [ViewMut {
            ty: tys[2],
            bytes: so.bytes_mut(),
        }];
        k.run(&ins, &mut outs).unwrap();
        so.bytes().to_vec()
    }

    /// Every pair of `T`'s values (then `tail` more) through [`run_quant_at`] at each
    /// level against [`quant_elem`].
    fn check_every_pair<T: QuantElem>(
        kind: BinaryKind,
        act: Activation,
        scales: [f32; 3],
        zero_points: [i32; 3],
        tail: usize,
    ) -> std::result::Result<(), TestCaseError> {
        let dt = if T::MIN < 0 { DType::I8 } else { DType::U8 };
        let ts = [0, 1, 2].map(|i| TensorType::quantized(dt, &[1], scales[i], zero_points[i]));
        let p = Binary { kind, act }
            .quant_params(&[&ts[0], &ts[1], &ts[2]])
            .unwrap();
        let (mut x, mut y) = crate::kernels::elementwise::quant_add_affine::every_pair::<T>();
        x.extend(x[..tail].to_vec());
        y.extend(y[1000..1000 + tail].to_vec());
        let want: Vec<i32> = x
            .iter()
            .zip(&y)
            .map(|(&a, &b)| quant_one(&p, a, b).to_i32())
            .collect();
        let shape = [x.len()];
        for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
            let mut got = vec![T::saturate_from_i32(0); x.len()];
            run_quant_at(level, &p, &x, &y, &mut got, &shape, &shape, &shape);
            let got: Vec<i32> = got.iter().map(|v| v.to_i32()).collect();
            prop_assert!(got == want, "{:?} {:?}", level, p);
        }
        Ok(())
    }

    /// Real models' ADD scales (distinct, not in simple ratios) get an affine form with
    /// few pairs flagged, so the proptest above runs it; equal scales put sums on
    /// rounding steps.
    #[test]
    fn affine_forms_fit_real_scales() {
        if crate::kernels::isa::detected() < Isa::Avx2 {
            return;
        }
        let form = |s: [f32; 3]| {
            let ts = [0, 1, 2].map(|i| TensorType::quantized(DType::I8, &[1], s[i], i as i32 - 5));
            let add = Binary {
                kind: BinaryKind::Add,
                act: Activation::None,
            };
            let p = add.quant_params(&[&ts[0], &ts[1], &ts[2]]).unwrap();
            affine_form::<i8>(Isa::Avx2, &p).is_some()
        };
        assert!(form([0.0213, 0.0347, 0.0411]));
        assert!(form([0.1, 0.0037, 0.0555]));
        assert!(form([0.05, 0.05, 0.05]), "one step in two is flagged");
    }

    proptest! {
        #[test]
        fn quant_matches_float_reference(
            kind in 0usize..3,
            act in 0u32..4,
            s1 in 0.01f32..1.0, s2 in 0.01f32..1.0, so in 0.05f32..2.0,
            z1 in 0i32..256, z2 in 0i32..256, zo in 0i32..256,
            data in proptest::collection::vec((0u8..=255, 0u8..=255), 1..16),
            bcast in any::<bool>(),
        ) {
            let kind = BinaryKind::ALL[kind];
            // The reference requires s1 * s2 < so for MUL.
            prop_assume!(kind != BinaryKind::Mul || f64::from(s1 * s2) < f64::from(so));
            let act = [Activation::None, Activation::Relu, Activation::Relu1, Activation::Relu6]
                [act as usize];
            let n = data.len();
            let a: Vec<u8> = data.iter().map(|p| p.0).collect();
            let b: Vec<u8> = if bcast { vec![data[0].1] } else { data.iter().map(|p| p.1).collect() };
            let ta = TensorType::quantized(DType::U8, &[n], s1, z1);
            let tb = TensorType::quantized(DType::U8, &[b.len()], s2, z2);
            let to = TensorType::quantized(DType::U8, &[n], so, zo);
            let k = Binary { kind, act };
            let got = run_u8(&k, [&ta, &tb, &to], &a, &b);
            let (lo, hi) = quantized_activation_range(act as u32, so, zo, 0, 255);
            for i in 0..n {
                let x = f64::from(s1) * f64::from(i32::from(a[i]) - z1);
                let bi = if bcast { 0 } else { i };
                let y = f64::from(s2) * f64::from(i32::from(b[bi]) - z2);
                let r = match kind {
                    BinaryKind::Add => x + y,
                    BinaryKind::Sub => x - y,
                    _ => x * y,
                };
                let want = ((r / f64::from(so)).round() as i64 + i64::from(zo))
                    .clamp(i64::from(lo), i64::from(hi));
                prop_assert!((i64::from(got[i]) - want).abs() <= 1,
                    "{:?} element {}: got {}, want {}", kind, i, got[i], want);
            }
        }
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(48))]
        /// ADD/SUB through `run_quant_at` at every level the CPU has, over every pair of
        /// operand values (plus a tail of up to 79: the 16-element steps after the wide
        /// ones, and the rest), give the reference's integers: the affine form where one
        /// is fitted (see `affine_forms_fit_real_scales`), the exact lanes elsewhere.
        #[test]
        fn quant_add_affine_forms_bit_identical(
            sub in any::<bool>(),
            signed in any::<bool>(),
            act in 0u32..4,
            s1 in 0.001f32..1.0, s2 in 0.001f32..1.0, so in 0.005f32..2.0,
            z1 in -128i32..128, z2 in -128i32..128, zo in -128i32..128,
            tail in 0usize..80,
        ) {
            let kind = if sub { BinaryKind::Sub } else { BinaryKind::Add };
            let act = [Activation::None, Activation::Relu, Activation::Relu1, Activation::Relu6]
                [act as usize];
            if signed {
                check_every_pair::<i8>(kind, act, [s1, s2, so], [z1, z2, zo], tail)?;
            } else {
                let z = [z1, z2, zo].map(|z| z + 128);
                check_every_pair::<u8>(kind, act, [s1, s2, so], z, tail)?;
            }
        }
    }

    proptest! {
        /// The table-driven same-shape ADD/SUB gives the integers of the per-element path.
        #[test]
        fn quant_add_tables_bit_identical(
            sub in any::<bool>(),
            act in 0u32..4,
            s1 in 0.01f32..1.0, s2 in 0.01f32..1.0, so in 0.05f32..2.0,
            z1 in -128i32..128, z2 in -128i32..128, zo in -128i32..128,
            data in proptest::collection::vec((any::<i8>(), any::<i8>()), 1..2500),
        ) {
            let kind = if sub { BinaryKind::Sub } else { BinaryKind::Add };
            let act = [Activation::None, Activation::Relu, Activation::Relu1, Activation::Relu6]
                [act as usize];
            let n = [data.len()];
            let ta = TensorType::quantized(DType::I8, &n, s1, z1);
            let tb = TensorType::quantized(DType::I8, &n, s2, z2);
            let to = TensorType::quantized(DType::I8, &n, so, zo);
            let p = Binary { kind, act }.quant_params(&[&ta, &tb, &to]).unwrap();
            let (x, y): (Vec<i8>, Vec<i8>) = data.into_iter().unzip();
            let mut got = vec![0i8; x.len()];
            add_same_shape(&p, &x, &y, &mut got);
            for i in 0..x.len() {
                let want = i8::saturate_from_i32(quant_elem(&p, x[i].into(), y[i].into()));
                prop_assert_eq!(got[i], want, "element {}", i);
            }
        }
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(256))]
        /// Same-shape ADD/SUB/MUL at every vector level this CPU has (and the plain one)
        /// give the integers of the per-element path, int8 and uint8, every activation,
        /// lengths around the vector widths.
        #[test]
        fn quant_binary_lanes_bit_identical(
            kind in 0usize..3,
            unsigned in any::<bool>(),
            act in 0u32..4,
            s1 in 0.001f32..2.0, s2 in 0.001f32..2.0, so in 0.001f32..4.0,
            z1 in -128i32..128, z2 in -128i32..128, zo in -128i32..128,
            data in proptest::collection::vec((any::<u8>(), any::<u8>()), 0..100),
        ) {
            let kind = BinaryKind::ALL[kind];
            let act = [Activation::None, Activation::Relu, Activation::Relu1, Activation::Relu6]
                [act as usize];
            let (dt, shift) = if unsigned { (DType::U8, 128) } else { (DType::I8, 0) };
            let n = [data.len()];
            let ta = TensorType::quantized(dt, &n, s1, z1 + shift);
            let tb = TensorType::quantized(dt, &n, s2, z2 + shift);
            let to = TensorType::quantized(dt, &n, so, zo + shift);
            let Ok(p) = (Binary { kind, act }).quant_params(&[&ta, &tb, &to]) else {
                return Ok(());
            };
            let (x, y): (Vec<u8>, Vec<u8>) = data.into_iter().unzip();
            let levels = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni];
            if unsigned {
                let want: Vec<u8> = x.iter().zip(&y)
                    .map(|(&a, &b)| u8::saturate_from_i32(quant_elem(&p, a.into(), b.into())))
                    .collect();
                for level in levels {
                    // Garbage, as the engine hands an output the kernel overwrites.
                    let mut got = vec![0xA5u8; x.len()];
                    run_quant_at(level, &p, &x, &y, &mut got, &n, &n, &n);
                    prop_assert_eq!(&got, &want, "{:?} {:?}", kind, level);
                }
            } else {
                let (x, y): (Vec<i8>, Vec<i8>) =
                    (x.iter().map(|&v| v as i8).collect(), y.iter().map(|&v| v as i8).collect());
                let want: Vec<i8> = x.iter().zip(&y)
                    .map(|(&a, &b)| i8::saturate_from_i32(quant_elem(&p, a.into(), b.into())))
                    .collect();
                for level in levels {
                    let mut got = vec![0x55i8; x.len()];
                    run_quant_at(level, &p, &x, &y, &mut got, &n, &n, &n);
                    prop_assert_eq!(&got, &want, "{:?} {:?}", kind, level);
                }
            }
        }
    }

    #[test]
    fn add_quant8_example() {
        // NNAPI add_quant8-like: scale 2 zp 0 in, scale 2 zp 0 out.
        let t = TensorType::quantized(DType::U8, &[2], 2.0, 0);
        let k = Binary {
            kind: BinaryKind::Add,
            act: Activation::None,
        };
        assert_eq!(run_u8(&k, [&t, &t, &t], &[1, 2], &[3, 4]), vec![4, 6]);
    }
}
