//! Benchmarks live in `benches/` (and timing examples in `examples/`); this library holds
//! the helpers they share.

use vnpu_emu::tensor::Staged;

/// `n` deterministic pseudo-random floats in [-0.5, 0.5] for `seed` (layer inputs and
/// weights).
pub fn pseudo(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let v = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 16;
            (v % 255) as f32 / 255.0 - 0.5
        })
        .collect()
}

/// A staged (device-buffer) copy of `bytes`.
pub fn staged(bytes: &[u8]) -> Staged {
    let mut b = Staged::zeroed(bytes.len());
    b.bytes_mut().copy_from_slice(bytes);
    b
}
