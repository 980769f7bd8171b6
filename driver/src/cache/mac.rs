//! What seals the model cache: BLAKE3 in keyed mode over a domain string, the token, the
//! driver build, the device identity and the file's contents (whose header holds the
//! digest of the data cache). BLAKE3 because it keeps up with memory bandwidth on large
//! inputs (SIMD across chunks) where HMAC-SHA-256 runs at SHA-NI speed, about a third of
//! it on the machines measured (`cargo bench --bench cache -- mac`).
//!
//! The data cache's digest is XXH3-128, not a cryptographic hash: the data cache holds
//! only weights, which the HAL does not treat as security-sensitive (a forged data cache
//! may give wrong results, never a crash), so its digest has to catch corruption, torn
//! writes and another model's file, and nothing more. At ~10x BLAKE3's single-thread
//! speed it lets a load run at the speed of the reads; the MAC still covers the digest.
//! It is computed by `twox-hash`, which picks its AVX2 loop at run time (the
//! `xxhash-rust` crate used before chose at compile time, so a default build ran SSE2:
//! ~2x slower, as long as the DMA of the data it should hide behind). Same algorithm,
//! same digests (a test checks them against `xxhash-rust`).

use crate::hal::BYTE_SIZE_OF_CACHE_TOKEN;
use crate::hw::Hardware;

/// Bytes of a MAC and of a digest.
pub const MAC_LEN: usize = 32;

const DOMAIN: &[u8] = b"vnpu model cache MAC v1\0";

/// The driver build a cache belongs to: crate, version, the cache format and the device
/// program format. A cache from another build never loads.
pub fn build_id() -> Vec<u8> {
    format!(
        "{}-{}/cache-v{}/program-v{}",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION"),
        super::format::FORMAT_VERSION,
        vnpu_emu::program::VERSION
    )
    .into_bytes()
}

/// The device a cache belongs to: identification, version and capability registers and
/// the size of its memory.
pub fn device_identity(hw: &Hardware) -> Vec<u8> {
    let (regs, dram_size) = hw.identity();
    let mut v = Vec::with_capacity(24);
    for r in regs {
        v.extend_from_slice(&r.to_le_bytes());
    }
    v.extend_from_slice(&dram_size.to_le_bytes());
    v
}

/// What binds a MAC to its context: everything but the sealed contents.
#[derive(Clone, Debug)]
pub struct Binding {
    /// The application's cache token.
    pub token: [u8; BYTE_SIZE_OF_CACHE_TOKEN],
    /// [`build_id`].
    pub build: Vec<u8>,
    /// [`device_identity`].
    pub device: Vec<u8>,
}

fn framed(h: &mut blake3::Hasher, part: &[u8]) {
    h.update(&(part.len() as u64).to_le_bytes());
    h.update(part);
}

/// The keyed MAC of `contents` in context `b`.
pub fn mac(key: &[u8; 32], b: &Binding, contents: &[u8]) -> [u8; MAC_LEN] {
    let mut h = blake3::Hasher::new_keyed(key);
    framed(&mut h, DOMAIN);
    framed(&mut h, &b.token);
    framed(&mut h, &b.build);
    framed(&mut h, &b.device);
    framed(&mut h, contents);
    *h.finalize().as_bytes()
}

/// The data cache's digest, computed as the bytes arrive (see the module comment).
#[derive(Default)]
pub struct DataDigest(twox_hash::xxhash3_128::Hasher);

impl DataDigest {
    /// Adds the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    /// The digest, as the header stores it (16 bytes of XXH3-128, then zeros).
    pub fn finish(&self) -> [u8; MAC_LEN] {
        let mut out = [0u8; MAC_LEN];
        out[..16].copy_from_slice(&self.0.finish_128().to_le_bytes());
        out
    }

    /// The digest of `bytes` at once.
    pub fn of(bytes: &[u8]) -> [u8; MAC_LEN] {
        let mut d = Self::default();
        d.update(bytes);
        d.finish()
    }
}

/// Checks a MAC in constant time.
pub fn verify(key: &[u8; 32], b: &Binding, contents: &[u8], tag: &[u8]) -> bool {
    let Ok(tag) = <[u8; MAC_LEN]>::try_from(tag) else {
        return false;
    };
    blake3::Hash::from_bytes(mac(key, b, contents)) == blake3::Hash::from_bytes(tag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference XXH3-128 (the crate the format was first written with).
    fn reference(bytes: &[u8]) -> [u8; MAC_LEN] {
        let mut out = [0u8; MAC_LEN];
        out[..16].copy_from_slice(&xxhash_rust::xxh3::xxh3_128(bytes).to_le_bytes());
        out
    }

    #[test]
    fn digest_matches_the_reference_across_sizes() {
        // Around the stripe (64), block (1024) and internal buffer sizes, and large.
        for len in [
            0,
            1,
            16,
            17,
            128,
            129,
            240,
            241,
            1023,
            1024,
            1025,
            65_536,
            1 << 20,
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
            assert_eq!(DataDigest::of(&data), reference(&data), "len {len}");
        }
    }

    proptest! {
        /// Fed in arbitrary pieces, the digest is XXH3-128 of the whole.
        #[test]
        fn streamed_digest_matches_the_reference(
            data in proptest::collection::vec(any::<u8>(), 0..5000),
            cuts in proptest::collection::vec(0usize..5000, 0..8),
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut d = DataDigest::default();
            let mut at = 0;
            for c in cuts.into_iter().chain([data.len()]) {
                d.update(&data[at..c]);
                at = c;
            }
            prop_assert_eq!(d.finish(), reference(&data));
        }
    }
}
