//! QUANTIZE's float32 arithmetic, vectorised: `clamp(zero_point + round(x / scale))` to
//! int8/uint8, and the same after DEQUANTIZE's `scale * (q - zero_point)` and PRELU's
//! `x >= 0 ? x : x * alpha` (the three operations of a float PRELU between quantised
//! tensors, fused). Sixteen lanes a step on AVX-512, eight on AVX2, the plain loop
//! elsewhere; every path gives the scalar operations' bits: the division is IEEE's, the
//! rounding half away from zero is a truncation of the quotient plus the float just below
//! one half (exact, see the `x86` module), the clamp lets NaN through as the scalar
//! `clamp` does and NaN converts to 0 as `as` does.

use super::super::isa::{isa, Isa};
use super::super::quant::QuantElem;
use super::super::requant::{memoised, Memo};
use super::quant_prelu_affine::PreluForm;
use std::cell::RefCell;
use std::rc::Rc;

/// A one-byte quantised element (int8 or uint8).
pub(crate) trait Byte: QuantElem {
    /// Whether the type is signed.
    const SIGNED: bool;
    /// `v as Self` (truncation, saturating, NaN to 0).
    fn from_f32(v: f32) -> Self;
}

impl Byte for i8 {
    const SIGNED: bool = true;
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as i8
    }
}

impl Byte for u8 {
    const SIGNED: bool = false;
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as u8
    }
}

/// QUANTIZE's constants for one output type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Quantizer {
    /// Output scale.
    pub scale: f32,
    /// Output zero point, as float32.
    pub zp: f32,
    /// The type's smallest value.
    pub lo: f32,
    /// The type's largest value.
    pub hi: f32,
}

impl Quantizer {
    /// The constants of quantising to `T` with `scale` and `zero_point`.
    pub fn new<T: Byte>(scale: f32, zero_point: i32) -> Self {
        Quantizer {
            scale,
            zp: zero_point as f32,
            lo: T::MIN as f32,
            hi: T::MAX as f32,
        }
    }

    /// One value, as QUANTIZE computes it.
    #[inline(always)]
    pub fn one<T: Byte>(&self, v: f32) -> T {
        T::from_f32((self.zp + (v / self.scale).round()).clamp(self.lo, self.hi))
    }
}

/// DEQUANTIZE (per tensor) -> PRELU -> QUANTIZE: the input's scale and zero point, then
/// the output's quantisation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PreluQuant {
    /// Input scale.
    pub in_scale: f32,
    /// Input zero point.
    pub in_zp: i32,
    /// The output's quantisation.
    pub out: Quantizer,
}

impl PreluQuant {
    /// One value with its `alpha`, as the three operations compute it.
    #[inline(always)]
    pub fn one<T: Byte, U: Byte>(&self, q: T, alpha: f32) -> U {
        U::from_f32(self.value(q.to_i32(), alpha) as f32)
    }

    /// Whether every quotient `p / scale` of these constants with the slopes `alpha` is
    /// finite and below 2^22 in magnitude, the zero point and clamp being integers of
    /// the same order: the vector lanes may then round with an integer conversion and
    /// clamp in integers (no NaN, infinity or out-of-range conversion can occur, and
    /// every sum is exact). Bounded in f64 with a margin for the three float32
    /// roundings before the quotient's.
    fn bounded<T: Byte, U: Byte>(&self, alpha: &[f32]) -> bool {
        self.bounded_over((T::MIN, T::MAX), (U::MIN, U::MAX), alpha)
    }

    /// [`PreluQuant::bounded`] for inputs in `input` (the stored values' range) and
    /// outputs of the type whose range is `output`.
    pub(crate) fn bounded_over(
        &self,
        input: (i32, i32),
        output: (i32, i32),
        alpha: &[f32],
    ) -> bool {
        let q = &self.out;
        let span = [input.0, input.1]
            .iter()
            .map(|&m| (f64::from(m) - f64::from(self.in_zp)).abs())
            .fold(0.0, f64::max);
        let slope = alpha.iter().map(|a| f64::from(a.abs())).fold(1.0, f64::max);
        let bound = f64::from(self.in_scale.abs()) * span * slope / f64::from(q.scale);
        let ints = [q.zp, q.lo, q.hi]
            .iter()
            .all(|&v| v.fract() == 0.0 && v.abs() <= 1048576.0);
        self.in_scale.is_finite()
            && alpha.iter().all(|a| a.is_finite())
            && q.scale >= f32::MIN_POSITIVE
            && q.scale.is_finite()
            && bound * (1.0 + 1e-6) < 4194304.0
            && ints
            && q.lo <= q.hi
            && q.lo >= output.0 as f32
            && q.hi <= output.1 as f32
    }

    /// [`PreluQuant::one`] of a stored value `q` (an integer of the input type), as the
    /// output type's stored integer (`from_f32` of an integer in range, NaN as 0).
    #[inline(always)]
    pub(crate) fn value(&self, q: i32, alpha: f32) -> i32 {
        let v = self.in_scale * q.wrapping_sub(self.in_zp) as f32;
        let p = if v >= 0.0 { v } else { v * alpha };
        let o = &self.out;
        (o.zp + (p / o.scale).round()).clamp(o.lo, o.hi) as i32
    }
}

/// `dst[i] = q.one(src[i])`, vectorised.
pub(crate) fn quantize<T: Byte>(q: &Quantizer, src: &[f32], dst: &mut [T]) {
    quantize_at(isa(), q, src, dst);
}

/// [`quantize`] at the instruction-set level `level` (at most what the CPU has).
pub(crate) fn quantize_at<T: Byte>(level: Isa, q: &Quantizer, src: &[f32], dst: &mut [T]) {
    let level = level.min(super::super::isa::detected());
    #[cfg(target_arch = "x86_64")]
    {
        if level >= Isa::Avx512 {
            // SAFETY: the level is at most what the CPU has, so it has AVX-512F and BW.
            return unsafe { x86::quantize_avx512(q, src, dst) };
        }
        if level >= Isa::Avx2 {
            // SAFETY: the level is at most what the CPU has, so it has AVX2.
            return unsafe { x86::quantize_avx2(q, src, dst) };
        }
    }
    let _ = level;
    for (d, &v) in dst.iter_mut().zip(src) {
        *d = q.one(v);
    }
}

/// `dst[i] = p.one(x[i], alpha[i % alpha.len()])` for `alpha` repeated whole along `x`
/// (a per-channel slope), vectorised. An empty `alpha` writes nothing.
pub(crate) fn prelu<T: Byte, U: Byte>(p: &PreluQuant, x: &[T], alpha: &[f32], dst: &mut [U]) {
    prelu_at(isa(), p, x, alpha, dst);
}

/// [`prelu`] at the instruction-set level `level` (at most what the CPU has).
pub(crate) fn prelu_at<T: Byte, U: Byte>(
    level: Isa,
    p: &PreluQuant,
    x: &[T],
    alpha: &[f32],
    dst: &mut [U],
) {
    if alpha.is_empty() {
        return;
    }
    // A short slope vector, or one that ends inside a vector, is repeated out first (to
    // a multiple of 16 lanes, at least 256; a long one is left as it is), so each run
    // fills whole vectors.
    let widened: Vec<f32>;
    let alpha = if alpha.len() < 64 || (!alpha.len().is_multiple_of(16) && alpha.len() < 1024) {
        let unit = (1..=16)
            .find(|r| (alpha.len() * r).is_multiple_of(16))
            .unwrap_or(16);
        let runs = unit * 256usize.div_ceil(alpha.len() * unit);
        widened = alpha.repeat(runs);
        &widened[..]
    } else {
        alpha
    };
    let level = level.min(super::super::isa::detected());
    // The affine form on AVX2 only: on AVX-512 the float lanes measured faster
    // (Zen 5: 7.3 against 10.9 us for 32x32x64; on AVX2 the form saves a third).
    if level > Isa::Avx2 {
        return prelu_exact(level, p, x, alpha, dst);
    }
    if let Some(form) = prelu_form::<T, U>(level, p, alpha).as_ref() {
        form.run(level, p, x, alpha, dst);
        return;
    }
    prelu_exact(level, p, x, alpha, dst);
}

/// REQUANTIZE as REQUANTIZE_PRELU's affine form at AVX2, every slope 1: `p.value(q, 1.0)`
/// is DEQUANTIZE's `in_scale * (q - in_zp)` then QUANTIZE's rounding and clamp (to
/// `p.out`'s range, which may be an activation's), so the form fitted and checked for
/// REQUANTIZE_PRELU is one for REQUANTIZE. Writes `dst` and returns true where a form
/// fits; false (`dst` untouched) where none does.
pub(crate) fn requantize_affine<T: Byte, U: Byte>(p: &PreluQuant, x: &[T], dst: &mut [U]) -> bool {
    // As `prelu_at` repeats a short slope vector.
    const ONES: [f32; 256] = [1.0; 256];
    match prelu_form::<T, U>(Isa::Avx2, p, &ONES).as_ref() {
        Some(form) => {
            form.run(Isa::Avx2, p, x, &ONES, dst);
            true
        }
        None => false,
    }
}

thread_local! {
    /// The REQUANTIZE_PRELU forms fitted on this thread, by constants and slopes.
    static PRELU_FORMS: Memo<Option<PreluForm>> = RefCell::default();
}

/// The affine form of `p` with the slopes `alpha` (as [`prelu_at`] repeats them) from
/// `T` to `U`, fitted once per thread (`quant_prelu_affine`); `None` where none passes.
fn prelu_form<T: Byte, U: Byte>(
    level: Isa,
    p: &PreluQuant,
    alpha: &[f32],
) -> Rc<Option<PreluForm>> {
    let o = &p.out;
    let key = |w: &mut Vec<u32>| {
        w.extend([T::MIN, U::MIN, p.in_zp].map(|v| v as u32));
        w.extend([p.in_scale, o.scale, o.zp, o.lo, o.hi].map(f32::to_bits));
        w.extend_from_slice(bytemuck::cast_slice(alpha));
    };
    let fit = || {
        let exact = |x: &[T], o: &mut [U]| prelu_exact(level, p, x, alpha, o);
        Ok::<_, std::convert::Infallible>(PreluForm::fit(level, p, alpha, exact))
    };
    match memoised(&PRELU_FORMS, key, fit) {
        Ok(form) => form,
        Err(never) => match never {},
    }
}

/// [`prelu_at`] by the float arithmetic's lanes (`alpha` already repeated out).
fn prelu_exact<T: Byte, U: Byte>(
    level: Isa,
    p: &PreluQuant,
    x: &[T],
    alpha: &[f32],
    dst: &mut [U],
) {
    // The bounded lanes leave the clamp to the store's saturation: U's whole range.
    let whole = p.out.lo == U::MIN as f32 && p.out.hi == U::MAX as f32;
    let bounded = whole && p.bounded::<T, U>(alpha);
    #[cfg(target_arch = "x86_64")]
    {
        if level >= Isa::Avx512 {
            // SAFETY: the level is at most what the CPU has, so it has AVX-512F and BW.
            return unsafe {
                if bounded {
                    x86::prelu_avx512::<T, U, true>(p, x, alpha, dst)
                } else {
                    x86::prelu_avx512::<T, U, false>(p, x, alpha, dst)
                }
            };
        }
        if level >= Isa::Avx2 {
            // SAFETY: the level is at most what the CPU has, so it has AVX2.
            return unsafe {
                if bounded {
                    x86::prelu_avx2::<T, U, true>(p, x, alpha, dst)
                } else {
                    x86::prelu_avx2::<T, U, false>(p, x, alpha, dst)
                }
            };
        }
    }
    for (x, d) in x.chunks(alpha.len()).zip(dst.chunks_mut(alpha.len())) {
        for ((d, &q), &a) in d.iter_mut().zip(x).zip(alpha) {
            *d = p.one(q, a);
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    //! Whole vectors are loaded and stored in place; the one short vector at the end of a
    //! run is masked on AVX-512 and goes through a copy on AVX2. The rounding half away
    //! from zero is `trunc(d + copysign(0.49999997, d))`, exact for every float: the
    //! constant is the float just below one half, so a sum lands on the next integer only
    //! when `d`'s fraction is at least one half (at or above 2^23 every float is an
    //! integer and the sum rounds back to it).
    use super::{Byte, PreluQuant, Quantizer};
    use std::arch::x86_64::*;

    const TRUNC: i32 = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;

    /// The float just below 0.5.
    const HALF_BELOW: f32 = 0.499_999_97;

    /// The bytes of one-byte elements.
    #[inline(always)]
    fn bytes<T: Byte>(x: &[T]) -> &[u8] {
        const { assert!(size_of::<T>() == 1) };
        // T is a one-byte plain integer (i8 or u8; asserted above at compile time).
        // SAFETY: so its slice is as many initialised bytes.
        unsafe { std::slice::from_raw_parts(x.as_ptr().cast(), x.len()) }
    }

    /// The bytes of one-byte elements, writable.
    #[inline(always)]
    fn bytes_mut<T: Byte>(x: &mut [T]) -> &mut [u8] {
        const { assert!(size_of::<T>() == 1) };
        // T is a one-byte plain integer (i8 or u8; asserted above at compile time).
        // SAFETY: so every byte is a valid value.
        unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast(), x.len()) }
    }

    /// A quantiser's constants in 512-bit vectors (the zero point also as an integer,
    /// for [`Q16::quantize_bounded`]).
    #[derive(Clone, Copy)]
    struct Q16 {
        scale: __m512,
        zp: __m512,
        lo: __m512,
        hi: __m512,
        zp_i: __m512i,
    }

    impl Q16 {
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn new(q: &Quantizer) -> Self {
            Q16 {
                scale: _mm512_set1_ps(q.scale),
                zp: _mm512_set1_ps(q.zp),
                lo: _mm512_set1_ps(q.lo),
                hi: _mm512_set1_ps(q.hi),
                zp_i: _mm512_set1_epi32(q.zp as i32),
            }
        }

        /// [`Q16::quantize`] where every quotient is finite and below 2^22 and the zero
        /// point and clamp are integers (`PreluQuant::bounded`), before the clamp: the
        /// truncation of the rounding sum is the conversion itself and the zero point's
        /// addition is exact in integers; the caller clamps (a saturating narrowing, or
        /// a clamp inside the type's range: 2 of the lanes' 16 operations saved).
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn quantize_bounded(&self, v: __m512) -> __m512i {
            let d = _mm512_div_ps(v, self.scale);
            let half = _mm512_or_si512(
                _mm512_and_si512(_mm512_castps_si512(d), _mm512_set1_epi32(i32::MIN)),
                _mm512_castps_si512(_mm512_set1_ps(HALF_BELOW)),
            );
            let r = _mm512_cvttps_epi32(_mm512_add_ps(d, _mm512_castsi512_ps(half)));
            _mm512_add_epi32(r, self.zp_i)
        }

        /// QUANTIZE of sixteen floats to i32 lanes (in the type's range; NaN to 0).
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn quantize(&self, v: __m512) -> __m512i {
            let d = _mm512_div_ps(v, self.scale);
            let half = _mm512_or_si512(
                _mm512_and_si512(_mm512_castps_si512(d), _mm512_set1_epi32(i32::MIN)),
                _mm512_castps_si512(_mm512_set1_ps(HALF_BELOW)),
            );
            let r = _mm512_roundscale_ps::<TRUNC>(_mm512_add_ps(d, _mm512_castsi512_ps(half)));
            let x = _mm512_add_ps(self.zp, r);
            // The bound first: a NaN (second operand) passes both, as `clamp` lets it.
            let x = _mm512_min_ps(self.hi, _mm512_max_ps(self.lo, x));
            _mm512_maskz_cvttps_epi32(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(x, x), x)
        }
    }

    /// The first `n` (at most 16) lanes of `v` (in the type's range) stored at `dst`.
    ///
    /// # Safety
    /// `dst` is valid for `n` bytes of writes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_16(v: __m512i, dst: *mut u8, n: usize) {
        // SAFETY: the caller's `n` bytes at `dst`; the masked store writes only those.
        unsafe {
            if n >= 16 {
                _mm_storeu_si128(dst.cast(), _mm512_cvtepi32_epi8(v));
            } else {
                _mm512_mask_cvtepi32_storeu_epi8(dst.cast(), ((1u32 << n) - 1) as u16, v);
            }
        }
    }

    /// The first `n` (at most 16) lanes of `v` stored at `dst` as `T`, saturated to its
    /// range (the clamp a bounded quantisation leaves to its store).
    ///
    /// # Safety
    /// `dst` is valid for `n` bytes of writes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_16_saturating<T: Byte>(v: __m512i, dst: *mut u8, n: usize) {
        let mask = ((1u32 << n.min(16)) - 1) as u16;
        // SAFETY: the caller's `n` bytes at `dst`; the masked stores write only those.
        unsafe {
            if T::SIGNED {
                _mm512_mask_cvtsepi32_storeu_epi8(dst.cast(), mask, v);
            } else {
                let v = _mm512_max_epi32(v, _mm512_setzero_si512());
                _mm512_mask_cvtusepi32_storeu_epi8(dst.cast(), mask, v);
            }
        }
    }

    /// Sixteen one-byte elements at `src` (the first `n`, the rest 0) widened to i32.
    ///
    /// # Safety
    /// `src` is valid for `n` bytes of reads.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(crate) unsafe fn widen_16<T: Byte>(src: *const u8, n: usize) -> __m512i {
        // SAFETY: the caller's `n` bytes at `src`; the masked load reads only those.
        let b = unsafe {
            if n >= 16 {
                _mm_loadu_si128(src.cast())
            } else {
                _mm512_castsi512_si128(_mm512_maskz_loadu_epi8((1u64 << n) - 1, src.cast()))
            }
        };
        if T::SIGNED {
            _mm512_cvtepi8_epi32(b)
        } else {
            _mm512_cvtepu8_epi32(b)
        }
    }

    /// Sixteen floats at `src` (the first `n`, the rest 0).
    ///
    /// # Safety
    /// `src` is valid for `n` floats of reads.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load_16(src: *const f32, n: usize) -> __m512 {
        // SAFETY: the caller's `n` floats at `src`; the masked load reads only those.
        unsafe {
            if n >= 16 {
                _mm512_loadu_ps(src)
            } else {
                _mm512_maskz_loadu_ps(((1u32 << n) - 1) as u16, src)
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn quantize_avx512<T: Byte>(q: &Quantizer, src: &[f32], dst: &mut [T]) {
        let k = Q16::new(q);
        let n = src.len().min(dst.len());
        let (src, dst) = (src.as_ptr(), bytes_mut(dst).as_mut_ptr());
        for at in (0..n).step_by(16) {
            let m = (n - at).min(16);
            // SAFETY: `at + m <= n`, within both slices.
            unsafe { store_16(k.quantize(load_16(src.add(at), m)), dst.add(at), m) };
        }
    }

    /// [`PreluQuant`]'s arithmetic on sixteen stored input values at a time (the one
    /// definition of its lanes: the REQUANTIZE_PRELU kernel and the convolutions' fused
    /// epilogue both run it).
    #[derive(Clone, Copy)]
    pub(crate) struct Prelu16 {
        k: Q16,
        scale: __m512,
        zp: __m512i,
    }

    impl Prelu16 {
        /// The constants of `p` in vectors.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn new(p: &PreluQuant) -> Self {
            Prelu16 {
                k: Q16::new(&p.out),
                scale: _mm512_set1_ps(p.in_scale),
                zp: _mm512_set1_epi32(p.in_zp),
            }
        }

        /// The output's stored integers of the stored inputs `q` with slopes `alpha`;
        /// `BOUNDED`: the constants qualify for [`Q16::quantize_bounded`], whose lanes
        /// the caller still clamps to the output's range (the others are clamped).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) fn apply<const BOUNDED: bool>(&self, q: __m512i, alpha: __m512) -> __m512i {
            let v = _mm512_mul_ps(self.scale, _mm512_cvtepi32_ps(_mm512_sub_epi32(q, self.zp)));
            // Not `v >= 0` (NaN included) takes the slope, as the scalar branch does.
            let neg = !_mm512_cmp_ps_mask::<_CMP_GE_OQ>(v, _mm512_setzero_ps());
            let v = _mm512_mask_mul_ps(v, neg, v, alpha);
            if BOUNDED {
                self.k.quantize_bounded(v)
            } else {
                self.k.quantize(v)
            }
        }
    }

    /// `BOUNDED`: the constants qualify for [`Q16::quantize_bounded`].
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn prelu_avx512<T: Byte, U: Byte, const BOUNDED: bool>(
        p: &PreluQuant,
        x: &[T],
        alpha: &[f32],
        dst: &mut [U],
    ) {
        let lanes = Prelu16::new(p);
        // One run of the slope vector a chunk (the caller repeats `alpha` whole).
        for (x, dst) in x.chunks(alpha.len()).zip(dst.chunks_mut(alpha.len())) {
            let n = x.len().min(alpha.len()).min(dst.len());
            let (src, a, out) = (
                bytes(x).as_ptr(),
                alpha.as_ptr(),
                bytes_mut(dst).as_mut_ptr(),
            );
            for at in (0..n).step_by(16) {
                let m = (n - at).min(16);
                // SAFETY: `at + m <= n`, within `x`, `alpha` and `dst`.
                unsafe {
                    let q = widen_16::<T>(src.add(at), m);
                    let r = lanes.apply::<BOUNDED>(q, load_16(a.add(at), m));
                    store_16_saturating::<U>(r, out.add(at), m);
                }
            }
        }
    }

    /// A quantiser's constants in 256-bit vectors (the zero point also as an integer,
    /// for [`Q8::quantize_bounded`]).
    #[derive(Clone, Copy)]
    struct Q8 {
        scale: __m256,
        zp: __m256,
        lo: __m256,
        hi: __m256,
        zp_i: __m256i,
    }

    impl Q8 {
        #[inline]
        #[target_feature(enable = "avx2")]
        fn new(q: &Quantizer) -> Self {
            Q8 {
                scale: _mm256_set1_ps(q.scale),
                zp: _mm256_set1_ps(q.zp),
                lo: _mm256_set1_ps(q.lo),
                hi: _mm256_set1_ps(q.hi),
                zp_i: _mm256_set1_epi32(q.zp as i32),
            }
        }

        /// [`Q16::quantize_bounded`] on eight lanes.
        #[inline]
        #[target_feature(enable = "avx2")]
        fn quantize_bounded(&self, v: __m256) -> __m256i {
            let d = _mm256_div_ps(v, self.scale);
            let half = _mm256_or_ps(
                _mm256_and_ps(d, _mm256_set1_ps(-0.0)),
                _mm256_set1_ps(HALF_BELOW),
            );
            let r = _mm256_cvttps_epi32(_mm256_add_ps(d, half));
            _mm256_add_epi32(r, self.zp_i)
        }

        /// QUANTIZE of eight floats to i32 lanes (in the type's range; NaN to 0).
        #[inline]
        #[target_feature(enable = "avx2")]
        fn quantize(&self, v: __m256) -> __m256i {
            let d = _mm256_div_ps(v, self.scale);
            let half = _mm256_or_ps(
                _mm256_and_ps(d, _mm256_set1_ps(-0.0)),
                _mm256_set1_ps(HALF_BELOW),
            );
            let r = _mm256_round_ps::<TRUNC>(_mm256_add_ps(d, half));
            let x = _mm256_add_ps(self.zp, r);
            // The bound first: a NaN (second operand) passes both, as `clamp` lets it.
            let x = _mm256_min_ps(self.hi, _mm256_max_ps(self.lo, x));
            let x = _mm256_and_ps(x, _mm256_cmp_ps::<_CMP_ORD_Q>(x, x));
            _mm256_cvttps_epi32(x)
        }
    }

    /// Eight i32 lanes narrowed to bytes (the low eight), saturated to the type's range.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn narrow_8<T: Byte>(v: __m256i) -> __m128i {
        let v16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        if T::SIGNED {
            _mm_packs_epi16(v16, v16)
        } else {
            _mm_packus_epi16(v16, v16)
        }
    }

    /// The first `n` (at most 8) bytes of `v` stored at `dst`.
    ///
    /// # Safety
    /// `dst` is valid for `n` bytes of writes.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store_8(v: __m128i, dst: *mut u8, n: usize) {
        if n >= 8 {
            // SAFETY: the caller's eight bytes at `dst`.
            unsafe { _mm_storel_epi64(dst.cast(), v) };
        } else {
            let mut out = [0u8; 16];
            // SAFETY: `out` is sixteen bytes; the caller's `n` < 8 bytes at `dst`.
            unsafe {
                _mm_storeu_si128(out.as_mut_ptr().cast(), v);
                std::ptr::copy_nonoverlapping(out.as_ptr(), dst, n);
            }
        }
    }

    /// Eight one-byte elements at `src` (the first `n`, the rest 0) widened to i32.
    ///
    /// # Safety
    /// `src` is valid for `n` bytes of reads.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn widen_8<T: Byte>(src: *const u8, n: usize) -> __m256i {
        let mut tail = [0u8; 8];
        let at = if n >= 8 {
            src
        } else {
            // SAFETY: the caller's `n` < 8 bytes at `src`, into the eight of `tail`.
            unsafe { std::ptr::copy_nonoverlapping(src, tail.as_mut_ptr(), n) };
            tail.as_ptr()
        };
        // SAFETY: eight readable bytes at `at` (the caller's, or `tail`).
        let b = unsafe { _mm_loadl_epi64(at.cast()) };
        if T::SIGNED {
            _mm256_cvtepi8_epi32(b)
        } else {
            _mm256_cvtepu8_epi32(b)
        }
    }

    /// Eight floats at `src` (the first `n`, the rest 0).
    ///
    /// # Safety
    /// `src` is valid for `n` floats of reads.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_8(src: *const f32, n: usize) -> __m256 {
        if n >= 8 {
            // SAFETY: the caller's eight floats at `src`.
            return unsafe { _mm256_loadu_ps(src) };
        }
        let mut tail = [0f32; 8];
        // SAFETY: the caller's `n` < 8 floats at `src`, into the eight of `tail`.
        unsafe {
            std::ptr::copy_nonoverlapping(src, tail.as_mut_ptr(), n);
            _mm256_loadu_ps(tail.as_ptr())
        }
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn quantize_avx2<T: Byte>(q: &Quantizer, src: &[f32], dst: &mut [T]) {
        let k = Q8::new(q);
        let n = src.len().min(dst.len());
        let (src, dst) = (src.as_ptr(), bytes_mut(dst).as_mut_ptr());
        for at in (0..n).step_by(8) {
            let m = (n - at).min(8);
            // SAFETY: `at + m <= n`, within both slices.
            unsafe {
                store_8(
                    narrow_8::<T>(k.quantize(load_8(src.add(at), m))),
                    dst.add(at),
                    m,
                )
            };
        }
    }

    /// [`Prelu16`] on eight lanes.
    #[derive(Clone, Copy)]
    pub(crate) struct Prelu8 {
        k: Q8,
        scale: __m256,
        zp: __m256i,
    }

    impl Prelu8 {
        /// The constants of `p` in vectors.
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn new(p: &PreluQuant) -> Self {
            Prelu8 {
                k: Q8::new(&p.out),
                scale: _mm256_set1_ps(p.in_scale),
                zp: _mm256_set1_epi32(p.in_zp),
            }
        }

        /// [`Prelu16::apply`] on eight lanes.
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn apply<const BOUNDED: bool>(&self, q: __m256i, alpha: __m256) -> __m256i {
            let v = _mm256_mul_ps(self.scale, _mm256_cvtepi32_ps(_mm256_sub_epi32(q, self.zp)));
            let ge = _mm256_cmp_ps::<_CMP_GE_OQ>(v, _mm256_setzero_ps());
            let v = _mm256_blendv_ps(_mm256_mul_ps(v, alpha), v, ge);
            if BOUNDED {
                self.k.quantize_bounded(v)
            } else {
                self.k.quantize(v)
            }
        }
    }

    /// `BOUNDED`: the constants qualify for [`Q8::quantize_bounded`].
    #[target_feature(enable = "avx2")]
    pub(super) fn prelu_avx2<T: Byte, U: Byte, const BOUNDED: bool>(
        p: &PreluQuant,
        x: &[T],
        alpha: &[f32],
        dst: &mut [U],
    ) {
        let lanes = Prelu8::new(p);
        // One run of the slope vector a chunk (the caller repeats `alpha` whole).
        for (x, dst) in x.chunks(alpha.len()).zip(dst.chunks_mut(alpha.len())) {
            let n = x.len().min(alpha.len()).min(dst.len());
            let (src, a, out) = (
                bytes(x).as_ptr(),
                alpha.as_ptr(),
                bytes_mut(dst).as_mut_ptr(),
            );
            for at in (0..n).step_by(8) {
                let m = (n - at).min(8);
                // SAFETY: `at + m <= n`, within `x`, `alpha` and `dst`.
                unsafe {
                    let q = widen_8::<T>(src.add(at), m);
                    let r = lanes.apply::<BOUNDED>(q, load_8(a.add(at), m));
                    store_8(narrow_8::<U>(r), out.add(at), m);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::isa::detected;
    use proptest::prelude::*;

    /// Every level this CPU can run.
    fn levels() -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|&l| l <= detected())
            .collect()
    }

    /// Floats with the cases that matter: halves, large, infinite, NaN, signed zeros.
    fn float() -> impl Strategy<Value = f32> {
        prop_oneof![
            -300.0f32..300.0,
            (-600i32..600).prop_map(|k| k as f32 * 0.5),
            any::<f32>(),
            Just(f32::NAN),
            Just(f32::INFINITY),
            Just(f32::NEG_INFINITY),
            Just(-0.0f32),
            Just(0.49999997f32),
            Just(-2.5f32),
            Just(8388609.0f32),
        ]
    }

    fn check_quantize<T: Byte + PartialEq>(
        q: &Quantizer,
        src: &[f32],
    ) -> Result<(), TestCaseError> {
        let want: Vec<T> = src.iter().map(|&v| q.one(v)).collect();
        for level in levels() {
            let mut got = vec![T::from_f32(0.0); src.len()];
            quantize_at(level, q, src, &mut got);
            prop_assert_eq!(&got, &want, "{:?}", level);
        }
        Ok(())
    }

    fn check_prelu<T: Byte, U: Byte + PartialEq>(
        p: &PreluQuant,
        x: &[T],
        alpha: &[f32],
    ) -> Result<(), TestCaseError> {
        let want: Vec<U> = x
            .iter()
            .enumerate()
            .map(|(i, &q)| p.one(q, alpha[i % alpha.len()]))
            .collect();
        for level in levels() {
            let mut got = vec![U::from_f32(0.0); x.len()];
            prelu_at(level, p, x, alpha, &mut got);
            prop_assert_eq!(&got, &want, "{:?}", level);
        }
        Ok(())
    }

    /// The rounding of every level agrees with `f32::round` on the floats a few ulps
    /// either side of each half-integer and integer (where a rounding built from an
    /// addition could go wrong), at scale 1, with zero points that leave every quotient
    /// in [-255, 255] visible through the clamp (and saturating beyond it, up to 2^24).
    #[test]
    fn quantize_rounds_the_neighbours_of_halves_exactly() {
        let mut src = vec![];
        let mut k = 0.25f32;
        while k < 16_777_216.0 {
            for base in [k, k + 0.5, k.floor() + 0.5] {
                let mut v = base;
                for _ in 0..4 {
                    v = f32::from_bits(v.to_bits() - 1);
                }
                for _ in 0..9 {
                    src.extend([v, -v]);
                    v = f32::from_bits(v.to_bits() + 1);
                }
            }
            k = if k < 300.0 { k + 0.25 } else { k * 1.37 };
        }
        // Scale 1 keeps the quotient the float itself.
        for zp in [0i32, -128, 127] {
            let q = Quantizer::new::<i8>(1.0, zp);
            let want: Vec<i8> = src.iter().map(|&v| q.one(v)).collect();
            for level in levels() {
                let mut got = vec![0i8; src.len()];
                quantize_at(level, &q, &src, &mut got);
                let bad = src
                    .iter()
                    .zip(got.iter().zip(&want))
                    .find(|(_, (g, w))| g != w);
                assert!(bad.is_none(), "{level:?}: {bad:?}");
            }
        }
    }

    /// Ordinary constants take the integer-rounding lanes (so the proptest below runs
    /// them); a non-finite slope, a huge input scale or a tiny output scale do not.
    #[test]
    fn prelu_bounded_takes_ordinary_constants_only() {
        let p = PreluQuant {
            in_scale: 0.05,
            in_zp: -3,
            out: Quantizer::new::<i8>(0.04, 7),
        };
        assert!(p.bounded::<i8, i8>(&[0.25, -1.5, 0.0]));
        assert!(!p.bounded::<i8, i8>(&[0.25, f32::NAN]));
        assert!(!p.bounded::<i8, i8>(&[f32::INFINITY]));
        assert!(!PreluQuant {
            in_scale: 3e38,
            ..p
        }
        .bounded::<u8, u8>(&[0.5]));
        let tiny = Quantizer::new::<u8>(1e-30, 0);
        assert!(!PreluQuant { out: tiny, ..p }.bounded::<u8, u8>(&[0.5]));
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(256))]
        /// Every vector level gives the scalar QUANTIZE's bits, tails and NaN included.
        #[test]
        fn quantize_matches_the_scalar_arithmetic(
            src in proptest::collection::vec(float(), 0..100),
            scale in prop_oneof![1e-3f32..4.0, Just(1.0f32), Just(1e-30f32), Just(3e38f32)],
            zp in -128i32..=127,
        ) {
            check_quantize::<i8>(&Quantizer::new::<i8>(scale, zp), &src)?;
            check_quantize::<u8>(&Quantizer::new::<u8>(scale, zp + 128), &src)?;
        }

        /// Every vector level gives the bits of DEQUANTIZE, PRELU and QUANTIZE one after
        /// another, for both element types on each side and any slopes.
        #[test]
        fn prelu_matches_the_scalar_arithmetic(
            x in proptest::collection::vec(any::<u8>(), 0..300),
            alpha in proptest::collection::vec(float(), 1..90),
            in_scale in prop_oneof![1e-3f32..4.0, Just(1e-30f32), Just(3e38f32)],
            out_scale in prop_oneof![1e-3f32..4.0, Just(1e-30f32)],
            in_zp in -128i32..=127,
            out_zp in -128i32..=127,
        ) {
            let p = |t_in: i32, t_out: i32, q_out: Quantizer| PreluQuant {
                in_scale,
                in_zp: in_zp + t_in,
                out: Quantizer { zp: (out_zp + t_out) as f32, ..q_out },
            };
            let signed: Vec<i8> = x.iter().map(|&v| v as i8).collect();
            check_prelu::<i8, i8>(&p(0, 0, Quantizer::new::<i8>(out_scale, 0)), &signed, &alpha)?;
            check_prelu::<i8, u8>(&p(0, 128, Quantizer::new::<u8>(out_scale, 0)), &signed, &alpha)?;
            check_prelu::<u8, i8>(&p(128, 0, Quantizer::new::<i8>(out_scale, 0)), &x, &alpha)?;
            check_prelu::<u8, u8>(&p(128, 128, Quantizer::new::<u8>(out_scale, 0)), &x, &alpha)?;
        }
    }
}
