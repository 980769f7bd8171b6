//! QUANTIZE's float32 arithmetic, vectorised: `clamp(zero_point + round(x / scale))` to
//! int8/uint8, and the same after DEQUANTIZE's `scale * (q - zero_point)` and PRELU's
//! `x >= 0 ? x : x * alpha` (the three operations of a float PRELU between quantised
//! tensors, fused). Sixteen lanes a step on AVX-512, eight on AVX2, the plain loop
//! elsewhere; every path gives the scalar operations' bits: the division is IEEE's, the
//! rounding half away from zero is built from a truncation and the exact remainder, the
//! clamp lets NaN through as the scalar `clamp` does and NaN converts to 0 as `as` does.

use super::super::isa::{isa, Isa};
use super::super::quant::QuantElem;

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
#[derive(Clone, Copy, Debug)]
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
#[derive(Clone, Copy, Debug)]
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
        let v = self.in_scale * q.to_i32().wrapping_sub(self.in_zp) as f32;
        let p = if v >= 0.0 { v } else { v * alpha };
        self.out.one(p)
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
    #[cfg(target_arch = "x86_64")]
    {
        if level >= Isa::Avx512 {
            // SAFETY: the level is at most what the CPU has, so it has AVX-512F and BW.
            return unsafe { x86::prelu_avx512(p, x, alpha, dst) };
        }
        if level >= Isa::Avx2 {
            // SAFETY: the level is at most what the CPU has, so it has AVX2.
            return unsafe { x86::prelu_avx2(p, x, alpha, dst) };
        }
    }
    for (x, d) in x.chunks(alpha.len()).zip(dst.chunks_mut(alpha.len())) {
        for ((d, &q), &a) in d.iter_mut().zip(x).zip(alpha) {
            *d = p.one(q, a);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Byte, PreluQuant, Quantizer};
    use std::arch::x86_64::*;

    const TRUNC: i32 = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;

    /// Up to `N` elements of `src` from `at`, the rest `fill` (a vector's worth, so the
    /// tail of a slice runs through the same vector code).
    #[inline(always)]
    fn lanes<T: Copy, const N: usize>(src: &[T], at: usize, fill: T) -> [T; N] {
        match src
            .get(at..at + N)
            .and_then(|s| <&[T; N]>::try_from(s).ok())
        {
            Some(full) => *full,
            None => {
                let mut out = [fill; N];
                let rest = src.get(at..).unwrap_or(&[]);
                let k = rest.len().min(N);
                out[..k].copy_from_slice(&rest[..k]);
                out
            }
        }
    }

    /// The first `N` bytes of `v` stored as `dst[at..]`, as far as it goes.
    #[inline(always)]
    fn put<T: Byte, const N: usize>(v: [u8; 16], dst: &mut [T], at: usize) {
        if let Some(whole) = dst.get_mut(at..at + N) {
            // A whole vector's copy has a constant length (one store, not a `memcpy`
            // call: that call was most of the loop's time).
            // SAFETY: T is a one-byte type (i8 or u8), so `whole` is N <= 16 bytes, and
            // `v` holds sixteen.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), whole.as_mut_ptr().cast(), N) };
            return;
        }
        let lanes = dst.get_mut(at..).unwrap_or_default();
        let k = lanes.len().min(N);
        // SAFETY: as above, `lanes` is at least `k` <= N <= 16 bytes.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), lanes.as_mut_ptr().cast(), k) };
    }

    /// The bytes of one-byte elements.
    #[inline(always)]
    fn bytes<T: Byte>(x: &[T]) -> &[u8] {
        // SAFETY: T is a one-byte plain integer (i8 or u8), so its slice is as many
        // initialised bytes.
        unsafe { std::slice::from_raw_parts(x.as_ptr().cast(), x.len()) }
    }

    /// QUANTIZE of sixteen floats to i32 lanes (already in the type's range; NaN to 0).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn quantize_16(q: &Quantizer, v: __m512) -> __m512i {
        let d = _mm512_div_ps(v, _mm512_set1_ps(q.scale));
        let t = _mm512_roundscale_ps::<TRUNC>(d);
        // The remainder of a truncation is exact; half or more rounds away from zero.
        let up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(
            _mm512_abs_ps(_mm512_sub_ps(d, t)),
            _mm512_set1_ps(0.5),
        );
        let sign = _mm512_and_si512(_mm512_castps_si512(d), _mm512_set1_epi32(i32::MIN));
        let step = _mm512_castsi512_ps(_mm512_or_si512(
            sign,
            _mm512_castps_si512(_mm512_set1_ps(1.0)),
        ));
        let r = _mm512_mask_add_ps(t, up, t, step);
        let x = _mm512_add_ps(_mm512_set1_ps(q.zp), r);
        let (lo, hi) = (_mm512_set1_ps(q.lo), _mm512_set1_ps(q.hi));
        let x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo), x, lo);
        let x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, hi), x, hi);
        _mm512_maskz_cvttps_epi32(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(x, x), x)
    }

    /// Sixteen i32 lanes (in the type's range) stored as `dst[at..]`, as far as it goes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn store_16<T: Byte>(v: __m512i, dst: &mut [T], at: usize) {
        let mut out = [0u8; 16];
        // SAFETY: `out` is sixteen bytes, one unaligned 128-bit store.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(v)) };
        put::<T, 16>(out, dst, at);
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn quantize_avx512<T: Byte>(q: &Quantizer, src: &[f32], dst: &mut [T]) {
        let n = src.len().min(dst.len());
        let mut at = 0;
        while at < n {
            let v: [f32; 16] = lanes(&src[..n], at, 0.0);
            // SAFETY: `v` is sixteen floats, one unaligned 512-bit load.
            let v = unsafe { _mm512_loadu_ps(v.as_ptr()) };
            store_16(quantize_16(q, v), &mut dst[..n], at);
            at += 16;
        }
    }

    /// Sixteen one-byte elements widened to i32 lanes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn widen_16<T: Byte>(x: &[T], at: usize) -> __m512i {
        let b: [u8; 16] = lanes(bytes(x), at, 0);
        // SAFETY: `b` is sixteen bytes, one unaligned 128-bit load.
        let b = unsafe { _mm_loadu_si128(b.as_ptr().cast()) };
        if T::SIGNED {
            _mm512_cvtepi8_epi32(b)
        } else {
            _mm512_cvtepu8_epi32(b)
        }
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn prelu_avx512<T: Byte, U: Byte>(
        p: &PreluQuant,
        x: &[T],
        alpha: &[f32],
        dst: &mut [U],
    ) {
        let (scale, zp) = (_mm512_set1_ps(p.in_scale), _mm512_set1_epi32(p.in_zp));
        // One run of the slope vector a chunk (the caller repeats `alpha` whole).
        for (x, dst) in x.chunks(alpha.len()).zip(dst.chunks_mut(alpha.len())) {
            let n = x.len().min(alpha.len()).min(dst.len());
            let mut at = 0;
            while at < n {
                let q = _mm512_sub_epi32(widen_16(&x[..n], at), zp);
                let v = _mm512_mul_ps(scale, _mm512_cvtepi32_ps(q));
                let a: [f32; 16] = lanes(&alpha[..n], at, 0.0);
                // SAFETY: `a` is sixteen floats, one unaligned 512-bit load.
                let a = unsafe { _mm512_loadu_ps(a.as_ptr()) };
                // Not `v >= 0` (NaN included) takes the slope, as the scalar branch does.
                let neg = !_mm512_cmp_ps_mask::<_CMP_GE_OQ>(v, _mm512_setzero_ps());
                let v = _mm512_mask_mul_ps(v, neg, v, a);
                store_16(quantize_16(&p.out, v), &mut dst[..n], at);
                at += 16;
            }
        }
    }

    /// QUANTIZE of eight floats to i32 lanes (already in the type's range; NaN to 0).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn quantize_8(q: &Quantizer, v: __m256) -> __m256i {
        let d = _mm256_div_ps(v, _mm256_set1_ps(q.scale));
        let t = _mm256_round_ps::<TRUNC>(d);
        let sign = _mm256_set1_ps(-0.0);
        let up = _mm256_cmp_ps::<_CMP_GE_OQ>(
            _mm256_andnot_ps(sign, _mm256_sub_ps(d, t)),
            _mm256_set1_ps(0.5),
        );
        let step = _mm256_or_ps(_mm256_and_ps(d, sign), _mm256_set1_ps(1.0));
        let r = _mm256_blendv_ps(t, _mm256_add_ps(t, step), up);
        let x = _mm256_add_ps(_mm256_set1_ps(q.zp), r);
        let (lo, hi) = (_mm256_set1_ps(q.lo), _mm256_set1_ps(q.hi));
        let x = _mm256_blendv_ps(x, lo, _mm256_cmp_ps::<_CMP_LT_OQ>(x, lo));
        let x = _mm256_blendv_ps(x, hi, _mm256_cmp_ps::<_CMP_GT_OQ>(x, hi));
        let x = _mm256_and_ps(x, _mm256_cmp_ps::<_CMP_ORD_Q>(x, x));
        _mm256_cvttps_epi32(x)
    }

    /// Eight i32 lanes (in the type's range) stored as `dst[at..]`, as far as it goes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn store_8<T: Byte>(v: __m256i, dst: &mut [T], at: usize) {
        // In range already, so the saturating packs only narrow.
        let v16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let v8 = if T::SIGNED {
            _mm_packs_epi16(v16, v16)
        } else {
            _mm_packus_epi16(v16, v16)
        };
        let mut out = [0u8; 16];
        // SAFETY: `out` is sixteen bytes, one unaligned 128-bit store.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), v8) };
        put::<T, 8>(out, dst, at);
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn quantize_avx2<T: Byte>(q: &Quantizer, src: &[f32], dst: &mut [T]) {
        let n = src.len().min(dst.len());
        let mut at = 0;
        while at < n {
            let v: [f32; 8] = lanes(&src[..n], at, 0.0);
            // SAFETY: `v` is eight floats, one unaligned 256-bit load.
            let v = unsafe { _mm256_loadu_ps(v.as_ptr()) };
            store_8(quantize_8(q, v), &mut dst[..n], at);
            at += 8;
        }
    }

    /// Eight one-byte elements widened to i32 lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn widen_8<T: Byte>(x: &[T], at: usize) -> __m256i {
        let b: [u8; 16] = lanes(bytes(x), at, 0);
        // SAFETY: `b` is sixteen bytes; the load reads its first eight.
        let b = unsafe { _mm_loadl_epi64(b.as_ptr().cast()) };
        if T::SIGNED {
            _mm256_cvtepi8_epi32(b)
        } else {
            _mm256_cvtepu8_epi32(b)
        }
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn prelu_avx2<T: Byte, U: Byte>(
        p: &PreluQuant,
        x: &[T],
        alpha: &[f32],
        dst: &mut [U],
    ) {
        let (scale, zp) = (_mm256_set1_ps(p.in_scale), _mm256_set1_epi32(p.in_zp));
        // One run of the slope vector a chunk (the caller repeats `alpha` whole).
        for (x, dst) in x.chunks(alpha.len()).zip(dst.chunks_mut(alpha.len())) {
            let n = x.len().min(alpha.len()).min(dst.len());
            let mut at = 0;
            while at < n {
                let q = _mm256_sub_epi32(widen_8(&x[..n], at), zp);
                let v = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(q));
                let a: [f32; 8] = lanes(&alpha[..n], at, 0.0);
                // SAFETY: `a` is eight floats, one unaligned 256-bit load.
                let a = unsafe { _mm256_loadu_ps(a.as_ptr()) };
                let ge = _mm256_cmp_ps::<_CMP_GE_OQ>(v, _mm256_setzero_ps());
                let v = _mm256_blendv_ps(_mm256_mul_ps(v, a), v, ge);
                store_8(quantize_8(&p.out, v), &mut dst[..n], at);
                at += 8;
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
