//! The AVX-512 VNNI steps of the depthwise rows' byte quads (see the parent module): a
//! prepared word holds four input bytes of one channel as `u8`, a filter word the four
//! matching `i8` weights, and one `vpdpbusd` adds their four products to a lane.

use super::x86::{starts, steps16, Columns, Sink16};
use super::QuantElem;
use std::arch::x86_64::*;

/// Sixteen channels a step.
const LANES: usize = 16;

/// Prepares a row of quads: for column `k < n` and channel `ch`, word `k * pitch + ch`
/// holds the bytes `ch` of input column `k * step + t * d` of `cols` for `t < loads`
/// (0 above), each
/// flipped by `0x80` for an `i8` input (so it reads as `x + 128`; a byte above `loads`
/// meets a zero weight).
///
/// Where the step is `m < loads` dilations, column `k + 1`'s taps are column `k`'s
/// moved down `m` bytes and `m` new ones: one shift and `m` loads a column, not `loads`.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VNNI; T is one byte; `1 <= loads <= 4`; every column
/// of `cols` has `c` readable bytes; `words` is `n * pitch` long; `pitch >= c >= 16`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn build<T: QuantElem>(
    cols: Columns,
    n: usize,
    step: usize,
    d: usize,
    loads: usize,
    pitch: usize,
    words: &mut [i32],
) {
    // The flip of bytes `ts` (the bytes above `loads` stay 0, so that a shift moves
    // no byte into a tap).
    let flip = |ts: std::ops::Range<usize>| match T::MIN < 0 {
        true => ts.fold(0u32, |f, t| f | 0x80 << (8 * t)),
        false => 0,
    };
    if n == 0 {
        return;
    }
    let c = cols.c;
    let out = words.as_mut_ptr();
    // The bytes of input column `j` for channels `s..s + 16`, zero-extended to lanes
    // and moved to byte `t` of each.
    let tap = |j: usize, t: usize, s: usize| {
        // Column `j` has `s + 16 <= c` readable bytes (the caller's contract).
        // SAFETY: by the above.
        let x = unsafe { _mm_loadu_si128(cols.at(j).add(s).cast()) };
        _mm512_sllv_epi32(_mm512_cvtepu8_epi32(x), _mm512_set1_epi32(8 * t as i32))
    };
    let every = flip(0..loads);
    // Column `k` from its own `loads` taps.
    let whole = |k: usize, s: usize| {
        let mut v = _mm512_set1_epi32(every as i32);
        for t in 0..loads {
            v = _mm512_xor_si512(v, tap(k * step + t * d, t, s));
        }
        v
    };
    // Column `k + 1` reads column `k`'s taps from the `m`-th on (`step = m * d`).
    let m = step.checked_div(d).filter(|&m| m * d == step && m < loads);
    let (m, shifted) = (m.unwrap_or(0), m.is_some());
    // The flip of a shifted column's `m` new bytes.
    let fresh = flip(loads - m..loads);
    let down = _mm512_set1_epi32(8 * m as i32);
    if shifted && m == 1 {
        // One new tap a column (a stride of one dilation, the common case): its byte
        // flipped and moved to the top tap off the chain from column to column, which
        // is then one shift and one `or`.
        let top = loads - 1;
        let (up, fresh) = (
            _mm512_set1_epi32(8 * top as i32),
            _mm512_set1_epi32(fresh as i32),
        );
        for s in starts(0, c, LANES) {
            let mut v = whole(0, s);
            // SAFETY: words `s + 16 <= pitch` (the caller's contract; `n >= 1` here).
            unsafe { _mm512_storeu_si512(out.add(s).cast(), v) };
            for k in 1..n {
                // Column `k * step + top * d` has `s + 16 <= c` readable bytes (the caller's
                // contract).
                // SAFETY: by the above.
                let x = unsafe { _mm_loadu_si128(cols.at(k * step + top * d).add(s).cast()) };
                let new = _mm512_xor_si512(_mm512_sllv_epi32(_mm512_cvtepu8_epi32(x), up), fresh);
                v = _mm512_or_si512(_mm512_srli_epi32::<8>(v), new);
                // SAFETY: words `k * pitch + s + 16 <= n * pitch` (the caller's).
                unsafe { _mm512_storeu_si512(out.add(k * pitch + s).cast(), v) };
            }
        }
        return;
    }
    for s in starts(0, c, LANES) {
        let mut v = _mm512_setzero_si512();
        for k in 0..n {
            v = if k == 0 || !shifted {
                whole(k, s)
            } else {
                let mut n = _mm512_srlv_epi32(v, down);
                for t in loads - m..loads {
                    n = _mm512_or_si512(n, tap(k * step + t * d, t, s));
                }
                _mm512_xor_si512(n, _mm512_set1_epi32(fresh as i32))
            };
            // SAFETY: words `k * pitch + s + 16 <= n * pitch` (the caller's contract).
            unsafe { _mm512_storeu_si512(out.add(k * pitch + s).cast(), v) };
        }
    }
}

/// The sums of `n` pixels into `sink`: pixel `ox`, channel `ch` is `start[ch]` plus,
/// over live rows `(h, w)` and groups `p`, the quad products of words
/// `h[(ox * a + p * b) * pitch + ch]` (`u8`) and `w[p * pitch + ch]` (`i8`). The channel
/// steps start at multiples of sixteen, the last masked ([`steps16`]): lanes past `c`
/// read words after the channels', which are there (`+ 16` below) and whose sums no
/// sink stores.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VNNI; each `h` has
/// `((n - 1) * a + (groups - 1) * b + 1) * pitch + 16` readable words and each `w`
/// `groups * pitch + 16`; `start` is `c + 16` words; the sink takes `n` pixels of `c`
/// channels; `pitch >= c`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn sums<S: Sink16>(
    live: &[(*const i32, *const i32)],
    groups: usize,
    a: usize,
    b: usize,
    c: usize,
    pitch: usize,
    n: usize,
    start: &[i32],
    sink: &mut S,
) {
    let (da, db) = (a * pitch, b * pitch);
    // Pixels `ox + $i` at once: each filter word loaded once for all of them (the
    // indices written out: an array indexed in a loop may be kept in memory).
    macro_rules! block {
        ($ox:expr, $s:expr, $k:expr, $init:expr, $st:expr; $($i:literal)+) => {{
            let mut acc = [$({ let _ = $i; $init }),+];
            for &(h, w) in live {
                for p in 0..groups {
                    // Pixels `ox + $i < n`, group `p < groups`, lanes `s..s + 16 <= pitch + 16`:
                    // inside the rows' words (the caller's contract).
                    // SAFETY: by the above.
                    unsafe {
                        let wv = _mm512_loadu_si512(w.add(p * pitch + $s).cast());
                        let at = h.add($ox * da + p * db + $s);
                        $(
                            let x = _mm512_loadu_si512(at.add($i * da).cast());
                            acc[$i] = _mm512_dpbusd_epi32(acc[$i], x, wv);
                        )+
                    }
                }
            }
            $(
                // SAFETY: pixel `ox + $i < n`, channels `s..s + k <= c`.
                unsafe { sink.put($st, $ox + $i, $s, $k, acc[$i]) };
            )+
        }};
    }
    for (s, k) in steps16(c) {
        // SAFETY: `s + 16 <= c + 16` words of `start`.
        let init = unsafe { _mm512_loadu_si512(start.as_ptr().add(s).cast()) };
        // SAFETY: the CPU has AVX-512 F and BW.
        let st = unsafe { sink.step(s) };
        let mut ox = 0;
        while ox + 8 <= n {
            block!(ox, s, k, init, &st; 0 1 2 3 4 5 6 7);
            ox += 8;
        }
        if ox + 4 <= n {
            block!(ox, s, k, init, &st; 0 1 2 3);
            ox += 4;
        }
        while ox < n {
            block!(ox, s, k, init, &st; 0);
            ox += 1;
        }
    }
}
