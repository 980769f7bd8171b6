//! A 256-entry byte table applied to a byte slice, `dst[i] = table[src[i]]`, with vector
//! byte shuffles: the table is sixteen slices of sixteen bytes, `pshufb` looks every byte
//! up in every slice by its low nibble, and the four bits of its high nibble pick the
//! slice in a tree of byte blends (8 + 4 + 2 + 1). Sixty-four bytes a step on AVX-512BW
//! (no VBMI needed: the first level is a masked `pshufb`), thirty-two on AVX2, the plain
//! loop elsewhere; every level gives the table's bytes.

use crate::kernels::isa::Isa;

/// `dst[i] = table[src[i]]` for the common length, at the instruction-set level `level`
/// (at most what the CPU has).
pub(crate) fn lookup_at(level: Isa, table: &[u8; 256], src: &[u8], dst: &mut [u8]) {
    let level = level.min(crate::kernels::isa::detected());
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        if level >= Isa::Avx512 {
            // SAFETY: the level is at most what the CPU has, so it has AVX-512F and BW.
            return unsafe { x86::lookup_avx512(table, src, dst) };
        }
        if level >= Isa::Avx2 {
            // SAFETY: the level is at most what the CPU has, so it has AVX2.
            return unsafe { x86::lookup_avx2(table, src, dst) };
        }
    }
    let _ = level;
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = table[usize::from(s)];
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// The table's sixteen slices, each in every 128-bit lane of a 512-bit vector.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn slices_512(table: &[u8; 256]) -> [__m512i; 16] {
        std::array::from_fn(|k| {
            let mut s = [0u8; 16];
            s.copy_from_slice(&table[16 * k..16 * k + 16]);
            // SAFETY: `s` is sixteen bytes, one unaligned 128-bit load.
            _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(s.as_ptr().cast()) })
        })
    }

    /// Sixty-four bytes looked up.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn lookup_64(t: &[__m512i; 16], x: __m512i) -> __m512i {
        let lo = _mm512_and_si512(x, _mm512_set1_epi8(0x0F));
        let bit = |b: i8| _mm512_test_epi8_mask(x, _mm512_set1_epi8(b));
        // Level one: the even slice, its odd neighbour where bit 4 is set.
        let b4 = bit(0x10);
        let l1: [__m512i; 8] = std::array::from_fn(|j| {
            let even = _mm512_shuffle_epi8(t[2 * j], lo);
            _mm512_mask_shuffle_epi8(even, b4, t[2 * j + 1], lo)
        });
        let b5 = bit(0x20);
        let l2: [__m512i; 4] =
            std::array::from_fn(|j| _mm512_mask_blend_epi8(b5, l1[2 * j], l1[2 * j + 1]));
        let b6 = bit(0x40);
        let l3 = [
            _mm512_mask_blend_epi8(b6, l2[0], l2[1]),
            _mm512_mask_blend_epi8(b6, l2[2], l2[3]),
        ];
        _mm512_mask_blend_epi8(bit(i8::MIN), l3[0], l3[1])
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn lookup_avx512(table: &[u8; 256], src: &[u8], dst: &mut [u8]) {
        let t = slices_512(table);
        let n = src.len().min(dst.len());
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        for at in (0..n).step_by(64) {
            let m = (n - at).min(64);
            // A short step's masked load and store touch only its `m` bytes.
            // SAFETY: `at + m <= n`, within both slices.
            unsafe {
                if m == 64 {
                    let x = _mm512_loadu_si512(s.add(at).cast());
                    _mm512_storeu_si512(d.add(at).cast(), lookup_64(&t, x));
                } else {
                    let k = u64::MAX >> (64 - m);
                    let x = _mm512_maskz_loadu_epi8(k, s.add(at).cast());
                    _mm512_mask_storeu_epi8(d.add(at).cast(), k, lookup_64(&t, x));
                }
            }
        }
    }

    /// The table's sixteen slices, each in both 128-bit lanes of a 256-bit vector.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn slices_256(table: &[u8; 256]) -> [__m256i; 16] {
        std::array::from_fn(|k| {
            let mut s = [0u8; 16];
            s.copy_from_slice(&table[16 * k..16 * k + 16]);
            // SAFETY: `s` is sixteen bytes, one unaligned 128-bit load.
            _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(s.as_ptr().cast()) })
        })
    }

    /// Thirty-two bytes looked up. `pblendvb` picks by each byte's top bit, so bit `b` of
    /// the high nibble is shifted up to it (a 16-bit shift: a byte's top bit after a shift
    /// by `7 - b` is its own bit `b`).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn lookup_32(t: &[__m256i; 16], x: __m256i) -> __m256i {
        let lo = _mm256_and_si256(x, _mm256_set1_epi8(0x0F));
        let r: [__m256i; 16] = std::array::from_fn(|k| _mm256_shuffle_epi8(t[k], lo));
        let b4 = _mm256_slli_epi16::<3>(x);
        let l1: [__m256i; 8] =
            std::array::from_fn(|j| _mm256_blendv_epi8(r[2 * j], r[2 * j + 1], b4));
        let b5 = _mm256_slli_epi16::<2>(x);
        let l2: [__m256i; 4] =
            std::array::from_fn(|j| _mm256_blendv_epi8(l1[2 * j], l1[2 * j + 1], b5));
        let b6 = _mm256_slli_epi16::<1>(x);
        let l3 = [
            _mm256_blendv_epi8(l2[0], l2[1], b6),
            _mm256_blendv_epi8(l2[2], l2[3], b6),
        ];
        _mm256_blendv_epi8(l3[0], l3[1], x)
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn lookup_avx2(table: &[u8; 256], src: &[u8], dst: &mut [u8]) {
        let t = slices_256(table);
        let n = src.len().min(dst.len());
        let mut at = 0;
        while at + 32 <= n {
            // SAFETY: `at + 32 <= n`, within both slices: unaligned 256-bit accesses.
            unsafe {
                let x = _mm256_loadu_si256(src.as_ptr().add(at).cast());
                _mm256_storeu_si256(dst.as_mut_ptr().add(at).cast(), lookup_32(&t, x));
            }
            at += 32;
        }
        if at < n {
            // The short end through a copy.
            let mut buf = [0u8; 32];
            buf[..n - at].copy_from_slice(&src[at..]);
            // SAFETY: `buf` is thirty-two bytes: unaligned 256-bit accesses.
            unsafe {
                let x = _mm256_loadu_si256(buf.as_ptr().cast());
                _mm256_storeu_si256(buf.as_mut_ptr().cast(), lookup_32(&t, x));
            }
            dst[at..].copy_from_slice(&buf[..n - at]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::isa::detected;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(256))]
        /// Every level gives the table's byte for every source byte, whole vectors and
        /// short ends alike.
        #[test]
        fn lookup_matches_the_table_at_every_level(
            table in proptest::collection::vec(any::<u8>(), 256),
            src in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let table: [u8; 256] = table.try_into().unwrap();
            let want: Vec<u8> = src.iter().map(|&s| table[usize::from(s)]).collect();
            for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                if level > detected() {
                    continue;
                }
                let mut got = vec![0u8; src.len()];
                lookup_at(level, &table, &src, &mut got);
                prop_assert_eq!(&got, &want, "{:?}", level);
            }
        }
    }

    /// All 256 byte values through every level, with a table of distinct entries (so a
    /// wrong slice or lane shows).
    #[test]
    fn lookup_takes_every_byte_value() {
        let table: [u8; 256] =
            std::array::from_fn(|i| (i as u8).wrapping_mul(167).wrapping_add(13));
        let src: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        let want: Vec<u8> = src.iter().map(|&s| table[usize::from(s)]).collect();
        for level in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            if level > detected() {
                continue;
            }
            let mut got = vec![0u8; src.len()];
            lookup_at(level, &table, &src, &mut got);
            assert_eq!(got, want, "{level:?}");
        }
    }
}
