//! REQUANTIZE of one-byte values on AVX2 as an affine form of the stored value `q`:
//! `t = q A + B`, the result `t >> k` clamped to the table's range (see `affine`), fitted
//! to the operation's table of 256 results and kept only if it gives every entry: exact
//! by exhaustion. The table's byte lookup on AVX2 is sixteen shuffles and fifteen blends
//! for 32 bytes, with its sixteen table vectors spilled (ADD -> REQUANTIZE(RELU) is
//! how face_detection_short_range_int8 rescales its 20 residual sums); the form is a
//! multiply and an add for 8 and a shared narrowing.

use super::affine::Shape;
use super::quantize_simd::Byte;
use crate::kernels::isa::{detected, Isa};
use crate::kernels::requant::{memoised, Memo};
use std::cell::RefCell;

/// The affine form of one REQUANTIZE table (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq)]
struct RequantForm {
    /// The coefficient of `q`.
    a: i32,
    /// The constant (the rounding's offset included).
    b: i32,
    /// The shift and clamp (no window: every value is checked).
    shape: Shape,
}

thread_local! {
    /// The forms fitted on this thread, by table.
    static FORMS: Memo<Option<RequantForm>> = RefCell::default();
}

/// `dst[i] = table[x[i] - T::MIN]` (each entry an integer of `U`) by the affine form of
/// the table, `ratio` (the input scale over the output's) suggesting its slope, at
/// `level` (capped at the CPU's); false (nothing written) where the level is not AVX2
/// or no form gives every entry.
pub(crate) fn lookup<T: Byte, U: Byte>(
    level: Isa,
    ratio: f64,
    table: &[i32; 256],
    x: &[T],
    dst: &mut [U],
) -> bool {
    if level.min(detected()) != Isa::Avx2 {
        return false;
    }
    let key = |w: &mut Vec<u32>| {
        w.extend([T::MIN, U::MIN].map(|v| v as u32));
        w.extend(
            ratio
                .to_bits()
                .to_le_bytes()
                .chunks(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        w.extend(table.iter().map(|&v| v as u32));
    };
    let fit = || Ok::<_, std::convert::Infallible>(fit::<T, U>(ratio, table));
    let form = match memoised(&FORMS, key, fit) {
        Ok(form) => form,
        Err(never) => match never {},
    };
    let Some(form) = form.as_ref() else {
        return false;
    };
    let n = x.len().min(dst.len());
    let (x, dst) = (&x[..n], &mut dst[..n]);
    let exact = |i: usize| U::saturate_from_i32(table[(x[i].to_i32() - T::MIN) as usize]);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the level, capped at the CPU's, is AVX2.
        let run = unsafe { x86::run_avx2(form, x, dst, &exact) };
        for (i, d) in dst.iter_mut().enumerate().skip(run.done) {
            *d = exact(i);
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = exact;
        false
    }
}

/// The form giving every entry of `table` (from `T` to `U`), its slope `ratio * 2^k`
/// within two of rounding, for the largest `k` (at most 22) that has one: each entry
/// bounds `B` (from both sides inside the clamp, from one at its ends), the bounds'
/// meet is checked and every entry recomputed as the lanes compute it.
fn fit<T: Byte, U: Byte>(ratio: f64, table: &[i32; 256]) -> Option<RequantForm> {
    let (lo, hi) = (*table.iter().min()?, *table.iter().max()?);
    if !ratio.is_finite() || lo < U::MIN || hi > U::MAX {
        return None;
    }
    let values = || (T::MIN..=T::MAX).zip(table.iter().copied());
    (8..=22u32).rev().find_map(|k| {
        let step = 1i64 << k;
        let a0 = (ratio * step as f64).round();
        if a0.abs() >= f64::from(1u32 << 22) {
            return None;
        }
        [0i64, -1, 1, -2, 2].into_iter().find_map(|delta| {
            let a = a0 as i64 + delta;
            let (mut below, mut above) = (i64::MIN, i64::MAX);
            for (q, y) in values() {
                let qa = i64::from(q) * a;
                if y > lo {
                    below = below.max(i64::from(y) * step - qa);
                }
                if y < hi {
                    above = above.min((i64::from(y) + 1) * step - qa - 1);
                }
            }
            if below > above {
                return None;
            }
            let b = 0i64.clamp(below, above);
            let form = RequantForm {
                a: i32::try_from(a).ok()?,
                b: i32::try_from(b).ok()?,
                shape: Shape {
                    k,
                    window: 0,
                    lo,
                    hi,
                },
            };
            values()
                .all(|(q, y)| form.one(q) == Some(y))
                .then_some(form)
        })
    })
}

impl RequantForm {
    /// The lanes' result for the stored value `q`: `None` where `t` leaves `i32`.
    fn one(&self, q: i32) -> Option<i32> {
        let t = i32::try_from(i64::from(q) * i64::from(self.a) + i64::from(self.b)).ok()?;
        Some((t >> self.shape.k).clamp(self.shape.lo, self.shape.hi))
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::RequantForm;
    use crate::kernels::elementwise::affine::{x86::lanes_avx2, Lanes};
    use crate::kernels::elementwise::quantize_simd::x86::widen_8;
    use crate::kernels::elementwise::quantize_simd::Byte;
    use std::arch::x86_64::*;

    /// `t` eight lanes at a time; the last `x.len() % 16` elements are left.
    #[target_feature(enable = "avx2")]
    pub(super) fn run_avx2<T: Byte, U: Byte>(
        f: &RequantForm,
        x: &[T],
        dst: &mut [U],
        exact: &impl Fn(usize) -> U,
    ) -> Lanes {
        let (a, b) = (_mm256_set1_epi32(f.a), _mm256_set1_epi32(f.b));
        let n = x.len().min(dst.len());
        let t = |at: usize| {
            let q = &x[at..at + 8];
            // T is one byte: `q` is eight of them.
            // SAFETY: eight bytes read within `q`.
            let q = unsafe { widen_8::<T>(q.as_ptr().cast(), 8) };
            _mm256_add_epi32(_mm256_mullo_epi32(q, a), b)
        };
        lanes_avx2(&f.shape, &mut dst[..n], t, exact)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// REQUANTIZE's table as `convert` builds it: DEQUANTIZE's and QUANTIZE's float32
    /// arithmetic, then a clamp to `lo..=hi` (an activation's).
    fn table<T: Byte, U: Byte>(
        (s_in, zp_in): (f32, i32),
        (s, zp): (f32, i32),
        (lo, hi): (i32, i32),
    ) -> [i32; 256] {
        std::array::from_fn(|k| {
            let real = s_in * (T::MIN + k as i32 - zp_in) as f32;
            let q = (zp as f32 + (real / s).round()).clamp(U::MIN as f32, U::MAX as f32);
            (q as i32).clamp(lo, hi.max(lo))
        })
    }

    fn check<T: Byte, U: Byte + PartialEq + std::fmt::Debug>(
        s_in: f32,
        s: f32,
        (zp_in, zp): (i32, i32),
        relu: bool,
        x: &[u8],
    ) -> Result<(), TestCaseError> {
        let lo = if relu {
            zp.clamp(U::MIN, U::MAX)
        } else {
            U::MIN
        };
        let t = table::<T, U>((s_in, zp_in), (s, zp), (lo, U::MAX));
        let x: Vec<T> = x
            .iter()
            .map(|&b| T::saturate_from_i32(i32::from(b) + T::MIN))
            .collect();
        let want: Vec<U> = x
            .iter()
            .map(|&q| U::saturate_from_i32(t[(q.to_i32() - T::MIN) as usize]))
            .collect();
        let mut got = vec![U::saturate_from_i32(0); x.len()];
        let ratio = f64::from(s_in) / f64::from(s);
        if lookup(Isa::Avx2, ratio, &t, &x, &mut got) {
            prop_assert_eq!(got, want);
        }
        Ok(())
    }

    /// Ordinary constants (face_detection_short_range_int8's kind) have a form, so the
    /// proptest below runs the lanes; a table one entry off has none.
    #[test]
    fn forms_fit_ordinary_tables_and_only_those() {
        let t = table::<i8, i8>((0.0473, -7), (0.0391, -128), (-128, 127));
        let ratio = 0.0473f64 / 0.0391;
        assert!(fit::<i8, i8>(ratio, &t).is_some());
        let mut odd = t;
        odd[200] += 1;
        assert_eq!(fit::<i8, i8>(ratio, &odd), None);
    }

    proptest! {
        /// The form's lanes give the table's entries for every type pair, with and
        /// without a RELU's clamp, lengths with and without a tail.
        #[test]
        fn requantize_forms_give_the_table(
            s_in in 1e-3f32..1.0,
            s in 1e-3f32..1.0,
            zps in (-128i32..=127, -128i32..=127),
            relu in any::<bool>(),
            x in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            check::<i8, i8>(s_in, s, zps, relu, &x)?;
            check::<u8, u8>(s_in, s, (zps.0 + 128, zps.1 + 128), relu, &x)?;
            check::<i8, u8>(s_in, s, (zps.0, zps.1 + 128), relu, &x)?;
            check::<u8, i8>(s_in, s, (zps.0 + 128, zps.1), relu, &x)?;
        }
    }
}
