//! Quantised DEPTHWISE_CONV_2D's sums with a depth multiplier of 1 and one-byte operands,
//! vectorised over prepared input rows: each input row a window reads is turned once into
//! one `i32` word per column and channel holding a *group* of its horizontal taps, and the
//! filter is held as words of the same taps, so a window's row of taps is a few
//! multiply-adds of a prepared word and a filter word per channel lane: no shuffle per
//! output pixel, and each prepared row serves every output row and pixel that reads it.
//! Two groupings:
//! - *pairs* (AVX2 and AVX-512): column `j`'s word of channel `ch` holds `x[j] - in_zp` and
//!   `x[j + dilation_w] - in_zp` as `i16` (0 for a column outside the input), the filter
//!   `w - w_zp` of the same two taps (the high half 0 past the filter's width), summed by
//!   `vpmaddwd` + `vpaddd`. Exact, because each operand is within `[-32767, 32767]`.
//! - *quads* (AVX-512 VNNI, 16 channels or more, every `w - w_zp` within `i8`: every
//!   symmetric int8 filter): the word holds the bytes of four taps `x[j + t * dilation_w]`
//!   as `u8` (an `i8` input flipped by `0x80`, a column outside the input the zero point's
//!   byte), the filter `w - w_zp` of the same four taps as `i8` (0 past the filter's
//!   width), summed by one `vpdpbusd`. The sum is `sum x_u * w`; the input zero point's
//!   share `z_u * sum w` is subtracted per channel for the filter rows inside the input
//!   (a column outside adds `z_u * w`, cancelled the same way).
//!
//! The words lie in channel order, so a step of eight (AVX2) or sixteen (AVX-512) lanes
//! is any run of channels. At eight lanes a channel count that is not a whole number of
//! steps ends with one step over the last channels, which overlaps the one before (its
//! sums are the same integers, stored twice); at sixteen, a column's words are padded to
//! whole lines of sixteen and the last step is masked. The sums are requantised in
//! registers by the output stage and stored as bytes (or stored as words, through the
//! same kernels, where the stage has no vector form). Rows wholly outside the input are skipped (their taps add 0).
//! Wrapping `i32` sums do not depend on the order of their terms, so every level gives
//! the plain loop's integers.

use super::{ConvGeometry, QuantElem};
use crate::kernels::isa::Isa;
use crate::kernels::requant::{memoised, Memo, Requant};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;

#[cfg(target_arch = "x86_64")]
mod quads;

/// The largest magnitude of an operand for the pair sums to be exact (as the integer
/// GEMM's).
const MAX_OPERAND: i64 = crate::kernels::igemm::MAX_OPERAND as i64;

/// Words past the end of each prepared row, of the filter and of `start`: a sixteen-lane
/// step reads sixteen channels from a multiple of sixteen, so the last step of a row
/// whose channel count is not a multiple reads up to fifteen words past its last
/// channel (their sums are never stored).
const PAD: usize = 16;

/// Words past what a buffer needs, to start it on a 64-byte boundary.
const SLACK: usize = 15;

/// The first word of `v` on a 64-byte boundary (at most [`SLACK`] words in; 0 should
/// the pointer not say).
fn aligned(v: &[i32]) -> usize {
    Some(v.as_ptr().align_offset(64))
        .filter(|&o| o <= SLACK)
        .unwrap_or(0)
}

/// How a filter row's taps are grouped into one word per channel (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Two `i16` taps a word.
    Pairs,
    /// Four byte taps a word.
    Quads,
}

impl Kind {
    /// Taps per word.
    fn taps(self) -> usize {
        match self {
            Kind::Pairs => 2,
            Kind::Quads => 4,
        }
    }
}

/// One prepared input row: which row of which image it is, and its words.
struct Slot {
    /// `(image address, input row)`, or `None` when empty.
    tag: Option<(usize, usize)>,
    /// `cols * pitch` words from `off` (then `PAD`).
    words: Vec<i32>,
    /// Where the words start: the first 64-byte boundary of `words` ([`aligned`]).
    off: usize,
}

/// One layer's filter and input zero point, prepared for the vector rows: built on a
/// layer's first execution and kept per thread ([`LAYERS`]), with the scratch rows of
/// the last execution to finish.
struct Layer {
    /// The grouping of the taps.
    kind: Kind,
    /// The level the steps run at (AVX2 or wider, capped at the CPU's).
    level: Isa,
    /// The geometry the layer was prepared for.
    g: ConvGeometry,
    /// Words per filter row: `ceil(filter_w / kind.taps())`.
    groups: usize,
    /// Taps a prepared word holds from the input: `kind.taps()`, at most `filter_w` for
    /// quads (the rest of the word meets zero weights).
    loads: usize,
    /// Prepared column `k` is input column `k * step - pad_left`.
    step: usize,
    /// Output pixel `ox`, group `p` reads prepared column `ox * a + p * b`.
    a: usize,
    /// See `a`.
    b: usize,
    /// Prepared columns per row.
    cols: usize,
    /// The filter as words `[filter_h][groups][pitch]` from `filter_off`, channels in
    /// order.
    filter: Vec<i32>,
    /// Where the filter's words start ([`aligned`]).
    filter_off: usize,
    /// Words a prepared column and a filter group take: the channel count, rounded up to
    /// a multiple of sixteen at the sixteen-lane levels (so, the rows starting on a
    /// 64-byte boundary, every sixteen-lane load of a step is one cache line).
    pitch: usize,
    /// Quads: per filter row and channel, `z_u * sum_kx (w - w_zp)` (`[filter_h][c]`).
    share: Vec<i32>,
    /// `c` copies of the input zero point's byte: what a column outside the input
    /// reads.
    zp_row: Vec<u8>,
    /// The input zero point.
    zp: i16,
    /// The scratch of an execution that finished, for the next to take (none while one
    /// runs).
    spare: RefCell<Option<Scratch>>,
}

/// What an execution changes as it goes: the prepared input rows kept between output
/// rows and the lists of the output row being summed.
struct Scratch {
    /// Quads: the negated shares of the output row being summed (`c`).
    start: Vec<i32>,
    /// Up to `filter_h` prepared input rows.
    slots: Vec<Slot>,
    /// `(ky, iy)` of the output row being summed: its filter rows inside the input.
    rows: Vec<(usize, usize)>,
    /// `(prepared row, filter row)` of the output row being summed.
    live: Vec<(*const i32, *const i32)>,
}

thread_local! {
    /// The prepared layers of this thread, by everything they are built from.
    static LAYERS: Memo<Layer> = RefCell::default();
}

/// One execution's view of a prepared layer: the layer, and the scratch it took from
/// it (handed back when dropped).
pub(super) struct Prepared<T> {
    /// The layer.
    l: Rc<Layer>,
    /// This execution's scratch.
    s: Scratch,
    /// The element type of the images.
    _t: PhantomData<T>,
}

impl<T> Drop for Prepared<T> {
    fn drop(&mut self) {
        // The rows' tags name images by address, which the next execution may reuse
        // for other values: the rows are kept only as buffers.
        let mut s = std::mem::replace(&mut self.s, Scratch::empty());
        for slot in &mut s.slots {
            slot.tag = None;
        }
        self.l.spare.replace(Some(s));
    }
}

impl Scratch {
    /// Scratch holding nothing (no allocation).
    fn empty() -> Self {
        Scratch {
            start: Vec::new(),
            slots: Vec::new(),
            rows: Vec::new(),
            live: Vec::new(),
        }
    }

    /// Fresh scratch for `l`.
    fn new(l: &Layer) -> Self {
        let g = &l.g;
        Scratch {
            start: vec![0; g.in_c + PAD],
            slots: (0..g.filter_h)
                .map(|_| Slot {
                    tag: None,
                    words: Vec::new(),
                    off: 0,
                })
                .collect(),
            rows: Vec::with_capacity(g.filter_h),
            live: Vec::with_capacity(g.filter_h),
        }
    }
}

impl Layer {
    /// [`Prepared::new`]'s layer for images of `T` (`zps` the filter zero points, `level`
    /// capped at the CPU's already).
    fn build<T: QuantElem, F: QuantElem>(
        level: Isa,
        g: &ConvGeometry,
        filter: &[F],
        zps: &[i32],
        in_zp: i32,
    ) -> Option<Self> {
        let c = g.in_c;
        let taps = g.filter_h.checked_mul(g.filter_w)?;
        let one_byte = std::mem::size_of::<T>() == 1 && std::mem::size_of::<F>() == 1;
        let zp_fits = T::saturate_from_i32(in_zp).to_i32() == in_zp;
        if !cfg!(target_arch = "x86_64")
            || level < Isa::Avx2
            || !one_byte
            || !zp_fits
            || c < 8
            || taps == 0
            || g.stride_w == 0
            || taps.checked_mul(c) != Some(filter.len())
        {
            return None;
        }
        // The filter values less their zero points, `[filter_h][filter_w][c]`.
        let mut weights = Vec::with_capacity(filter.len());
        for tap in filter.chunks_exact(c) {
            weights.extend(
                tap.iter()
                    .zip(zps)
                    .map(|(w, &zp)| i64::from(w.to_i32()) - i64::from(zp)),
            );
        }
        let fits = |zp: &i32| {
            let r = -MAX_OPERAND..=MAX_OPERAND;
            r.contains(&(i64::from(F::MIN) - i64::from(*zp)))
                && r.contains(&(i64::from(F::MAX) - i64::from(*zp)))
        };
        let byte_weights = || {
            let r = i64::from(i8::MIN)..=i64::from(i8::MAX);
            weights.iter().all(|w| r.contains(w))
        };
        let kind = if level >= Isa::Avx512Vnni && c >= 16 && byte_weights() {
            Kind::Quads
        } else if zps.iter().all(fits) {
            Kind::Pairs
        } else {
            return None;
        };
        let per = kind.taps();
        let groups = g.filter_w.div_ceil(per);
        // Pixel `ox`'s group `p` starts at input column `ox * stride + p * taps *
        // dilation - pad`: where the stride divides the group's span, only every
        // `stride`-th column is read.
        let span = g.dilation_w.checked_mul(per)?;
        let (step, a, b) = if span.is_multiple_of(g.stride_w) {
            (g.stride_w, 1, span / g.stride_w)
        } else {
            (1, g.stride_w, span)
        };
        let cols = match g.out_w {
            0 => 0,
            w => (w - 1)
                .checked_mul(a)?
                .checked_add((groups - 1).checked_mul(b)?)?
                .checked_add(1)?,
        };
        let pitch = match level >= Isa::Avx512 {
            true => c.checked_next_multiple_of(16)?,
            false => c,
        };
        cols.checked_mul(pitch)?
            .checked_mul(g.filter_h)?
            .checked_add(PAD + SLACK)?;
        // Tap `kx` of a filter row is part `kx % per` of word `kx / per`: the low half
        // of a pair (`pair(lo, hi)`), or byte `kx % 4` of a quad; taps past the width 0.
        let bits = 32 / per;
        let mask = (1u64 << bits) - 1;
        let mut words = vec![0i32; g.filter_h * groups * pitch + PAD + SLACK];
        let filter_off = aligned(&words);
        let mut share = vec![
            0i32;
            if kind == Kind::Quads {
                g.filter_h * c
            } else {
                0
            }
        ];
        for ky in 0..g.filter_h {
            for kx in 0..g.filter_w {
                let tap = &weights[(ky * g.filter_w + kx) * c..][..c];
                let shift = bits * (kx % per);
                let word = &mut words[filter_off + (ky * groups + kx / per) * pitch..][..c];
                for (o, &w) in word.iter_mut().zip(tap) {
                    *o |= (((w as u64) & mask) << shift) as u32 as i32;
                }
                if let Some(share) = share.get_mut(ky * c..(ky + 1) * c) {
                    for (s, &w) in share.iter_mut().zip(tap) {
                        *s = s.wrapping_add(w as i32);
                    }
                }
            }
        }
        // The input zero point as the byte a quad holds (an `i8` flipped by 0x80), times
        // the sum of each filter row's weights.
        let z_u = if T::MIN < 0 { in_zp + 128 } else { in_zp };
        for s in &mut share {
            *s = s.wrapping_mul(z_u);
        }
        let loads = match kind {
            Kind::Pairs => 2,
            Kind::Quads => g.filter_w.min(4),
        };
        Some(Self {
            kind,
            level,
            g: *g,
            groups,
            loads,
            step,
            a,
            b,
            cols,
            filter: words,
            filter_off,
            pitch,
            share,
            zp_row: vec![T::saturate_from_i32(in_zp).to_i32() as u8; c],
            zp: in_zp as i16,
            spare: RefCell::new(None),
        })
    }
}

impl<T: QuantElem> Prepared<T> {
    /// The prepared layer for filter `[filter_h, filter_w, in_c]` with per-channel filter
    /// zero points `filter_zp(channel)` and input zero point `in_zp`, or `None` where the
    /// vector rows do not apply: no vector level, operands wider than a byte, fewer than
    /// eight channels, no taps, a zero point outside the element type's range (a filter
    /// value minus its zero point outside `[-32767, 32767]`), or lengths that disagree.
    /// The filter's words are built on the layer's first execution on this thread and
    /// looked up after (the lookup's key is every input of the build).
    pub(super) fn new<F: QuantElem>(
        level: Isa,
        g: &ConvGeometry,
        filter: &[F],
        filter_zp: impl Fn(usize) -> i32,
        in_zp: i32,
    ) -> Option<Self> {
        let level = level.min(crate::kernels::isa::detected());
        let one_byte = std::mem::size_of::<T>() == 1 && std::mem::size_of::<F>() == 1;
        if level < Isa::Avx2
            || !one_byte
            || g.in_c < 8
            || g.filter_h
                .checked_mul(g.filter_w)
                .and_then(|t| t.checked_mul(g.in_c))
                != Some(filter.len())
        {
            return None;
        }
        let zps: Vec<i32> = (0..g.in_c).map(&filter_zp).collect();
        let dims = [
            g.batches,
            g.in_h,
            g.in_w,
            g.in_c,
            g.out_h,
            g.out_w,
            g.filter_h,
            g.filter_w,
            g.stride_h,
            g.stride_w,
            g.dilation_h,
            g.dilation_w,
            g.pad_top,
            g.pad_left,
        ];
        let key = |key: &mut Vec<u32>| {
            key.extend([level as u32, T::MIN as u32, F::MIN as u32, in_zp as u32]);
            key.extend(
                dims.iter()
                    .flat_map(|&d| [d as u32, (d as u64 >> 32) as u32]),
            );
            key.extend(zps.iter().map(|&z| z as u32));
            key.extend(filter.chunks(4).map(|w| {
                w.iter()
                    .rev()
                    .fold(0u32, |k, v| k << 8 | u32::from(v.to_i32() as u8))
            }));
        };
        let l = memoised(&LAYERS, key, || {
            Layer::build::<T, F>(level, g, filter, &zps, in_zp).ok_or(())
        })
        .ok()?;
        let s = l.spare.take().unwrap_or_else(|| Scratch::new(&l));
        Some(Prepared {
            l,
            s,
            _t: PhantomData,
        })
    }

    /// Whether the words are byte quads (for the tests: which path a case reaches).
    #[cfg(test)]
    fn quads(&self) -> bool {
        self.l.kind == Kind::Quads
    }

    /// The sums of output row `oy` of image `img` (`[in_h, in_w, in_c]`), every channel of
    /// every pixel, into `accs` (`out_w * in_c`, overwritten):
    /// `sum over valid taps (x - in_zp) * (w - w_zp)` per channel. Writes nothing and
    /// returns false where the geometry or a length disagrees with the prepared layer
    /// (the caller validated them: unreachable). Prepared rows are kept by the image's
    /// address and row: an image must not change while its rows are summed.
    pub(super) fn row_sums(
        &mut self,
        g: &ConvGeometry,
        img: &[T],
        oy: usize,
        accs: &mut [i32],
    ) -> bool {
        let Some(live) = self.live_rows(g, img, oy, accs.len()) else {
            return false;
        };
        #[cfg(target_arch = "x86_64")]
        {
            let c = self.l.g.in_c;
            let mut sink = x86::Words::new(accs, c);
            // The contract of `run16` / `run8` for this level (`live_rows` checked that `accs` is
            // `out_w * c` words).
            // SAFETY: by the above.
            unsafe {
                if self.l.level >= Isa::Avx512 {
                    self.run16(&live, &mut sink);
                } else {
                    self.run8(&live, &mut sink);
                }
            }
        }
        self.s.live = live;
        true
    }

    /// Output row `oy` of image `img` as [`Prepared::row_sums`] sums it, requantised by
    /// `stage` in registers and stored into `out` (`out_w * in_c` bytes): no row of sums
    /// is stored and read back. Writes nothing and returns false where the stage has no
    /// vector form or too few channels, or a length disagrees (the caller then
    /// requantises [`Prepared::row_sums`]'s sums).
    pub(super) fn row_requantised(
        &mut self,
        g: &ConvGeometry,
        img: &[T],
        oy: usize,
        stage: &Requant,
        out: &mut [T],
    ) -> bool {
        let Some((lanes, full, epi)) = stage.vector_form() else {
            return false;
        };
        if std::mem::size_of::<T>() != 1 || stage.channels() < self.l.g.in_c {
            return false;
        }
        let Some(live) = self.live_rows(g, img, oy, out.len()) else {
            return false;
        };
        #[cfg(target_arch = "x86_64")]
        {
            let c = self.l.g.in_c;
            let wide = self.l.level >= Isa::Avx512;
            macro_rules! run {
                ($full:literal, $epi:literal) => {
                    // T is one byte (checked above); the level is capped at the CPU's, so it has
                    // AVX-512 F and BW where `wide`, AVX2 otherwise; the contract of `run16` /
                    // `run8` as in `row_sums` (`out` is `out_w * c` elements, checked by
                    // `live_rows`).
                    // SAFETY: by the above.
                    unsafe {
                        if wide {
                            x86::with_bytes16::<T, $full, $epi>(stage, lanes, out, c, |s| {
                                self.run16(&live, s)
                            })
                        } else {
                            x86::with_bytes8::<T, $full, $epi>(stage, lanes, out, c, |s| {
                                self.run8(&live, s)
                            })
                        }
                    }
                };
            }
            match (full, epi) {
                (false, false) => run!(false, false),
                (true, false) => run!(true, false),
                (false, true) => run!(false, true),
                (true, true) => run!(true, true),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (lanes, full, epi);
        self.s.live = live;
        true
    }

    /// The live rows of output row `oy` (its `(prepared row, filter row)` per tap row
    /// inside the input), the rows prepared as needed, for an output row of `len`
    /// elements; `None` (nothing changed) where the geometry or a length disagrees with
    /// the prepared layer. Hand the list back to `self.s.live` when done.
    fn live_rows(
        &mut self,
        g: &ConvGeometry,
        img: &[T],
        oy: usize,
        len: usize,
    ) -> Option<Vec<(*const i32, *const i32)>> {
        let c = self.l.g.in_c;
        let sizes_ok = *g == self.l.g
            && g.in_h.checked_mul(g.in_w).and_then(|p| p.checked_mul(c)) == Some(img.len())
            && g.out_w.checked_mul(c) == Some(len);
        if !sizes_ok {
            return None;
        }
        // The input rows this output row reads (its taps' rows inside the input).
        let (mut rows, mut live) = (
            std::mem::take(&mut self.s.rows),
            std::mem::take(&mut self.s.live),
        );
        rows.clear();
        live.clear();
        rows.extend((0..g.filter_h).filter_map(|ky| {
            ConvGeometry::tap(oy, g.stride_h, ky, g.dilation_h, g.pad_top, g.in_h)
                .map(|iy| (ky, iy))
        }));
        let image = img.as_ptr() as usize;
        for &(ky, iy) in &rows {
            let tag = Some((image, iy));
            let at = match self.s.slots.iter().position(|s| s.tag == tag) {
                Some(at) => at,
                None => {
                    // A slot no row of this output row needs (there are `filter_h`).
                    let at = self.s.slots.iter().position(|s| {
                        s.tag.is_none_or(|(im, r)| {
                            im != image || !rows.iter().any(|&(_, need)| need == r)
                        })
                    })?;
                    self.prepare_row(img, iy, at);
                    at
                }
            };
            let slot = &self.s.slots[at];
            let filter_row = self.l.filter_off + ky * self.l.groups * self.l.pitch;
            live.push((
                slot.words[slot.off..].as_ptr(),
                self.l.filter[filter_row..].as_ptr(),
            ));
        }
        if self.l.kind == Kind::Quads {
            // Every sum starts at minus the zero point's share of the live filter rows.
            self.s.start.fill(0);
            for &(ky, _) in &rows {
                let share = &self.l.share[ky * c..(ky + 1) * c];
                for (s, &z) in self.s.start.iter_mut().zip(share) {
                    *s = s.wrapping_sub(z);
                }
            }
        }
        self.s.rows = rows;
        Some(live)
    }

    /// Prepares input row `iy` of `img` (checked by the caller to be inside) into slot
    /// `at`.
    fn prepare_row(&mut self, img: &[T], iy: usize, at: usize) {
        let g = &self.l.g;
        let c = g.in_c;
        let row = &img[iy * g.in_w * c..(iy + 1) * g.in_w * c];
        let slot = &mut self.s.slots[at];
        slot.tag = None;
        slot.words
            .resize(self.l.cols * self.l.pitch + PAD + SLACK, 0);
        slot.off = aligned(&slot.words);
        #[cfg(target_arch = "x86_64")]
        {
            // Column pointers by arithmetic, per column as the kernels read them (no
            // table of them built per row): a column inside the row points at its
            // pixel, one outside at `zp_row`.
            let cols = x86::Columns {
                base: row.as_ptr().cast(),
                zp_row: self.l.zp_row.as_ptr().cast(),
                pad: g.pad_left,
                width: g.in_w,
                c,
            };
            let (step, d, loads, n, pitch) = (
                self.l.step,
                g.dilation_w,
                self.l.loads,
                self.l.cols,
                self.l.pitch,
            );
            let (zp, words) = (self.l.zp, &mut slot.words[slot.off..]);
            // Each call's contract: the level is capped at the CPU's (AVX2 at least,
            // AVX-512 F and BW at Isa::Avx512 and above, VNNI for quads); every column
            // pointer `cols` gives was taken from a slice of at least `c` one-byte
            // elements (a pixel of the row, or `zp_row`); `words` is `cols * pitch + PAD`
            // long (`pitch >= c` after `off <= SLACK`); each step range is at least one
            // step wide and within `c` (see `Steps`; quads have `c >= 16`).
            // SAFETY: the contract of `build`, as just listed.
            unsafe {
                match self.l.kind {
                    Kind::Quads => quads::build::<T>(cols, n, step, d, loads, pitch, words),
                    Kind::Pairs => {
                        let s = Steps::of(self.l.level, c);
                        if let Some(to) = s.wide {
                            x86::build16::<T>(cols, n, step, d, pitch, 0, to, zp, words);
                        }
                        if let Some(from) = s.narrow {
                            x86::build8::<T>(cols, n, step, d, pitch, from, c, zp, words);
                        }
                    }
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = row;
        slot.tag = Some((img.as_ptr() as usize, iy));
    }

    /// The sums of every pixel of an output row from its live rows into `sink`, sixteen
    /// lanes a step (quads, or pairs at AVX-512).
    ///
    /// # Safety
    /// The level is AVX-512 or above (so the CPU has AVX-512 F and BW, and VNNI for
    /// quads); `live` from `live_rows`; the sink takes `out_w` pixels of `c` channels.
    #[cfg(target_arch = "x86_64")]
    unsafe fn run16<S: x86::Sink16>(&self, live: &[(*const i32, *const i32)], sink: &mut S) {
        let (c, pitch) = (self.l.g.in_c, self.l.pitch);
        let (groups, a, b, n) = (self.l.groups, self.l.a, self.l.b, self.l.g.out_w);
        // Each prepared row is `cols * pitch + PAD` words and each filter row has
        // `groups * pitch + PAD` after it (of `filter_h * groups * pitch + PAD`), so
        // pixel `ox < out_w`, group `p < groups` reads words up to `((out_w - 1) * a +
        // (groups - 1) * b + 1) * pitch + PAD = cols * pitch + PAD`; `start` is
        // `c + PAD`; `pitch >= c >= 8`.
        // SAFETY: the contract of `sums`, as just listed, and the caller's.
        unsafe {
            match self.l.kind {
                Kind::Quads => quads::sums(live, groups, a, b, c, pitch, n, &self.s.start, sink),
                Kind::Pairs => x86::sums16(live, groups, a, b, c, pitch, n, sink),
            }
        }
    }

    /// [`Prepared::run16`] eight lanes a step (pairs at AVX2).
    ///
    /// # Safety
    /// The CPU has AVX2; `live` from `live_rows`; the sink takes `out_w` pixels of `c`
    /// channels.
    #[cfg(target_arch = "x86_64")]
    unsafe fn run8<S: x86::Sink8>(&self, live: &[(*const i32, *const i32)], sink: &mut S) {
        let c = self.l.g.in_c;
        let (groups, a, b, n) = (self.l.groups, self.l.a, self.l.b, self.l.g.out_w);
        // SAFETY: as for `run16`; pairs (quads need VNNI, so a wide level).
        unsafe { x86::sums8(live, groups, a, b, c, self.l.pitch, n, sink) }
    }
}

/// How a row's `c >= 8` channels split into steps: sixteen-lane steps over channels
/// `0..wide` (AVX-512, `c >= 16`), then eight-lane steps over `narrow..c`. Each range
/// is a whole number of steps, or ends with one step overlapping the one before.
struct Steps {
    wide: Option<usize>,
    narrow: Option<usize>,
}

impl Steps {
    fn of(level: Isa, c: usize) -> Steps {
        if level < Isa::Avx512 || c < 16 {
            return Steps {
                wide: None,
                narrow: Some(0),
            };
        }
        match c % 16 {
            // A last step of sixteen overlapping by at most seven lanes, or none.
            r if r == 0 || r > 8 => Steps {
                wide: Some(c),
                narrow: None,
            },
            // Eight lanes end it with less overlap.
            r => Steps {
                wide: Some(c - r),
                narrow: Some(c - 8),
            },
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::QuantElem;
    use crate::kernels::requant::x86::{
        store_bytes16, store_bytes8, Stage256, Stage512, Step256, Step512,
    };
    use crate::kernels::requant::{Lanes, Requant};
    use std::arch::x86_64::*;
    use std::marker::PhantomData;

    /// The step starts over channels `from..to` for `v` lanes: whole steps, then one
    /// ending at `to` if some are left (`to - from >= v`).
    #[inline(always)]
    pub(super) fn starts(from: usize, to: usize, v: usize) -> impl Iterator<Item = usize> {
        let whole = (to - from) / v;
        let tail = (!(to - from).is_multiple_of(v)).then_some(to - v);
        (0..whole).map(move |i| from + i * v).chain(tail)
    }

    /// Where a sixteen-lane sums kernel puts an output row's sums: channel step by
    /// channel step (`c0` a multiple of sixteen), pixel by pixel, each step's constants
    /// made once for the row.
    pub(super) trait Sink16 {
        /// A step's constants.
        type Step;
        /// The constants of channels `c0..c0 + 16`.
        ///
        /// # Safety
        /// The CPU has AVX-512 F and BW.
        unsafe fn step(&self, c0: usize) -> Self::Step;
        /// Lanes `..n` of `acc`: channels `c0..c0 + n` of pixel `ox`.
        ///
        /// # Safety
        /// The CPU has AVX-512 F and BW; pixel `ox` and channels `c0..c0 + n` lie in the
        /// sink's row.
        unsafe fn put(&mut self, st: &Self::Step, ox: usize, c0: usize, n: usize, acc: __m512i);
    }

    /// [`Sink16`] for eight-lane kernels, whose steps are all eight lanes (the last
    /// overlapping the one before).
    pub(super) trait Sink8 {
        /// A step's constants.
        type Step;
        /// The constants of channels `c0..c0 + 8`.
        ///
        /// # Safety
        /// The CPU has AVX2.
        unsafe fn step(&self, c0: usize) -> Self::Step;
        /// Channels `c0..c0 + 8` of pixel `ox`.
        ///
        /// # Safety
        /// The CPU has AVX2; pixel `ox` and channels `c0..c0 + 8` lie in the sink's row.
        unsafe fn put(&mut self, st: &Self::Step, ox: usize, c0: usize, acc: __m256i);
        /// Channels `c0..c0 + 16` of pixel `ox`: `lo` the first eight (constants
        /// `st[0]`), `hi` the next eight (`st[1]`).
        ///
        /// # Safety
        /// The CPU has AVX2; pixel `ox` and channels `c0..c0 + 16` lie in the sink's row.
        unsafe fn put2(
            &mut self,
            st: &[Self::Step; 2],
            ox: usize,
            c0: usize,
            lo: __m256i,
            hi: __m256i,
        );
    }

    /// A row of sums stored as words, `c` a pixel.
    pub(super) struct Words<'a> {
        out: *mut i32,
        c: usize,
        _row: PhantomData<&'a mut [i32]>,
    }

    impl<'a> Words<'a> {
        /// The sink writing `accs` (the caller's kernel writes only `out_w * c` words).
        pub(super) fn new(accs: &'a mut [i32], c: usize) -> Self {
            Words {
                out: accs.as_mut_ptr(),
                c,
                _row: PhantomData,
            }
        }
    }

    impl Sink16 for Words<'_> {
        type Step = ();

        #[inline(always)]
        unsafe fn step(&self, _: usize) {}

        #[inline(always)]
        unsafe fn put(&mut self, _: &(), ox: usize, c0: usize, n: usize, acc: __m512i) {
            let mask = ((1u32 << n.min(16)) - 1) as u16;
            // The masked store writes channels `c0..c0 + n` of pixel `ox`, inside the row (the
            // caller's contract).
            // SAFETY: by the above.
            unsafe { _mm512_mask_storeu_epi32(self.out.add(ox * self.c + c0).cast(), mask, acc) };
        }
    }

    impl Sink8 for Words<'_> {
        type Step = ();

        #[inline(always)]
        unsafe fn step(&self, _: usize) {}

        #[inline(always)]
        unsafe fn put(&mut self, _: &(), ox: usize, c0: usize, acc: __m256i) {
            // SAFETY: channels `c0..c0 + 8` of pixel `ox`, inside the row (the caller's).
            unsafe { _mm256_storeu_si256(self.out.add(ox * self.c + c0).cast(), acc) };
        }

        #[inline(always)]
        unsafe fn put2(&mut self, _: &[(); 2], ox: usize, c0: usize, lo: __m256i, hi: __m256i) {
            // SAFETY: channels `c0..c0 + 16` of pixel `ox`, inside the row (the caller's).
            unsafe {
                let at = self.out.add(ox * self.c + c0);
                _mm256_storeu_si256(at.cast(), lo);
                _mm256_storeu_si256(at.add(8).cast(), hi);
            }
        }
    }

    /// A row of sums requantised by a stage (`Stage512` or `Stage256`) in registers and
    /// stored as the one-byte `T`, `c` a pixel; `FULL` and `EPI` the stage's kind.
    pub(super) struct Bytes<'a, S, T, const FULL: bool, const EPI: bool> {
        stage: S,
        out: *mut T,
        c: usize,
        _row: PhantomData<&'a mut [T]>,
    }

    impl<T: QuantElem, const FULL: bool, const EPI: bool> Sink16
        for Bytes<'_, Stage512<'_>, T, FULL, EPI>
    {
        type Step = Step512;

        #[inline(always)]
        unsafe fn step(&self, c0: usize) -> Step512 {
            // SAFETY: the CPU has AVX-512F (this function's contract).
            unsafe { self.stage.step(c0) }
        }

        #[inline(always)]
        unsafe fn put(&mut self, st: &Step512, ox: usize, c0: usize, n: usize, acc: __m512i) {
            // The CPU has AVX-512F and BW, and the `n` bytes of channels `c0..c0 + n` of pixel `ox`
            // lie in the row (this function's contract); T is one byte (`with_bytes16`).
            // SAFETY: by the above.
            unsafe {
                let v = self.stage.apply::<FULL, EPI>(st, acc);
                store_bytes16(v, self.out.add(ox * self.c + c0), n);
            }
        }
    }

    impl<T: QuantElem, const FULL: bool, const EPI: bool> Sink8
        for Bytes<'_, Stage256<'_>, T, FULL, EPI>
    {
        type Step = Step256;

        #[inline(always)]
        unsafe fn step(&self, c0: usize) -> Step256 {
            // SAFETY: the CPU has AVX2 (this function's contract).
            unsafe { self.stage.step(c0) }
        }

        #[inline(always)]
        unsafe fn put(&mut self, st: &Step256, ox: usize, c0: usize, acc: __m256i) {
            // The CPU has AVX2, and the eight bytes of channels `c0..c0 + 8` of pixel `ox` lie in
            // the row (this function's contract); T is one byte (`with_bytes8`).
            // SAFETY: by the above.
            unsafe {
                let v = self.stage.apply::<FULL, EPI>(st, acc);
                store_bytes8(v, self.out.add(ox * self.c + c0), 8);
            }
        }

        #[inline(always)]
        unsafe fn put2(
            &mut self,
            st: &[Step256; 2],
            ox: usize,
            c0: usize,
            lo: __m256i,
            hi: __m256i,
        ) {
            // The CPU has AVX2, and the sixteen bytes of channels `c0..c0 + 16` of pixel `ox` lie
            // in the row (this function's contract); T is one byte (`with_bytes8`).
            // SAFETY: by the above.
            unsafe {
                let lo = self.stage.apply::<FULL, EPI>(&st[0], lo);
                let hi = self.stage.apply::<FULL, EPI>(&st[1], hi);
                store_bytes8x2(lo, hi, self.out.add(ox * self.c + c0));
            }
        }
    }

    /// Stores `lo` and `hi` as sixteen bytes at `at`, each narrowed as `store_bytes8`
    /// narrows it (saturating to `i16`, then to `T`).
    ///
    /// # Safety
    /// The CPU has AVX2; T is one byte wide; `at` has sixteen writable bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store_bytes8x2<T: QuantElem>(lo: __m256i, hi: __m256i, at: *mut T) {
        // Both halves in one register: dwords 0 and 4 hold `lo`'s bytes, 1 and 5 `hi`'s.
        let v16 = _mm256_packs_epi32(lo, hi);
        let v8 = match T::MIN < 0 {
            true => _mm256_packs_epi16(v16, v16),
            false => _mm256_packus_epi16(v16, v16),
        };
        let v = _mm256_permutevar8x32_epi32(v8, _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5));
        // SAFETY: `at` has sixteen writable bytes (the caller's contract).
        unsafe { _mm_storeu_si128(at.cast(), _mm256_castsi256_si128(v)) };
    }

    /// Runs `body` with the sink requantising by `q` (its vector constants `l`) into
    /// `out` on sixteen lanes.
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW; T is one byte wide.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn with_bytes16<T: QuantElem, const FULL: bool, const EPI: bool>(
        q: &Requant,
        l: &Lanes,
        out: &mut [T],
        c: usize,
        body: impl FnOnce(&mut Bytes<'_, Stage512<'_>, T, FULL, EPI>),
    ) {
        body(&mut Bytes {
            stage: Stage512::new::<T>(q, l),
            out: out.as_mut_ptr(),
            c,
            _row: PhantomData,
        });
    }

    /// [`with_bytes16`] on eight lanes.
    ///
    /// # Safety
    /// The CPU has AVX2; T is one byte wide.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn with_bytes8<T: QuantElem, const FULL: bool, const EPI: bool>(
        q: &Requant,
        l: &Lanes,
        out: &mut [T],
        c: usize,
        body: impl FnOnce(&mut Bytes<'_, Stage256<'_>, T, FULL, EPI>),
    ) {
        body(&mut Bytes {
            stage: Stage256::new::<T>(q, l),
            out: out.as_mut_ptr(),
            c,
            _row: PhantomData,
        });
    }

    /// Where a prepared row's input columns are: column `j`, counted from the first of
    /// the left padding, is pixel `j - pad` of the row at `base` where that is inside
    /// the row, else the zero point's pixel `zp_row`.
    #[derive(Clone, Copy)]
    pub(super) struct Columns {
        /// The row's first pixel.
        pub(super) base: *const u8,
        /// `c` bytes of the input zero point.
        pub(super) zp_row: *const u8,
        /// Columns of left padding.
        pub(super) pad: usize,
        /// Pixels in the row.
        pub(super) width: usize,
        /// Bytes a pixel (the channel count).
        pub(super) c: usize,
    }

    impl Columns {
        /// The `c` bytes of column `j` (computed, not looked up: a table of them cost
        /// as much to build per row as the vector work on sixteen channels).
        #[inline(always)]
        pub(super) fn at(&self, j: usize) -> *const u8 {
            match j.checked_sub(self.pad) {
                Some(x) if x < self.width => self.base.wrapping_add(x * self.c),
                _ => self.zp_row,
            }
        }

        /// `f(k, a, b)` for each prepared column `k < n`, `a` and `b` the bytes of input
        /// columns `k * step` and `k * step + d` (`step >= 1`): the columns whose two
        /// are inside the row by stepping a pointer, the others by [`Columns::at`] (a
        /// product and a compare per column cost about as much as the vector work of
        /// sixteen channels).
        #[inline(always)]
        pub(super) fn pairs(
            &self,
            n: usize,
            step: usize,
            d: usize,
            mut f: impl FnMut(usize, *const u8, *const u8),
        ) {
            // Both inside for `k` in `lo..hi`: `k * step >= pad` and `k * step + d <
            // pad + width`.
            let lo = self.pad.div_ceil(step).min(n);
            let hi = match (self.pad + self.width).checked_sub(d + 1) {
                Some(last) => (last / step + 1).clamp(lo, n),
                None => lo,
            };
            for k in 0..lo {
                f(k, self.at(k * step), self.at(k * step + d));
            }
            let mut a = self
                .base
                .wrapping_add((lo * step).wrapping_sub(self.pad).wrapping_mul(self.c));
            for k in lo..hi {
                f(k, a, a.wrapping_add(d * self.c));
                a = a.wrapping_add(step * self.c);
            }
            for k in hi..n {
                f(k, self.at(k * step), self.at(k * step + d));
            }
        }
    }

    /// Prepares a row of pairs sixteen lanes a step: for prepared column `k < n` and
    /// channel `ch` in the steps of `from..to`, word `k * pitch + ch` =
    /// `pair(a - zp, b - zp)` of the bytes `ch` of input columns `k * step` and
    /// `k * step + d`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW, T is one byte, every column of `cols` has `to`
    /// readable bytes, `words` is `n * pitch` long or longer, and `16 <= to - from`,
    /// `to <= pitch`.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn build16<T: QuantElem>(
        cols: Columns,
        n: usize,
        step: usize,
        d: usize,
        pitch: usize,
        from: usize,
        to: usize,
        zp: i16,
        words: &mut [i32],
    ) {
        let zp = _mm512_set1_epi16(zp);
        let out = words.as_mut_ptr();
        cols.pairs(n, step, d, |k, pa, pb| {
            for s in starts(from, to, 16) {
                // `s + 16 <= to` bytes from each column, and word `k * pitch + s + 16 <=
                // words.len()` (the caller's contract).
                // SAFETY: by the above.
                unsafe {
                    let (xa, xb) = (
                        _mm_loadu_si128(pa.add(s).cast()),
                        _mm_loadu_si128(pb.add(s).cast()),
                    );
                    let (xa, xb) = if T::MIN < 0 {
                        (_mm512_cvtepi8_epi32(xa), _mm512_cvtepi8_epi32(xb))
                    } else {
                        (_mm512_cvtepu8_epi32(xa), _mm512_cvtepu8_epi32(xb))
                    };
                    let v = _mm512_mask_blend_epi16(0xAAAA_AAAA, xa, _mm512_slli_epi32::<16>(xb));
                    _mm512_storeu_si512(out.add(k * pitch + s).cast(), _mm512_sub_epi16(v, zp));
                }
            }
        });
    }

    /// [`build16`] on AVX2, eight lanes a step: the bytes of the two columns are
    /// interleaved first and then widened to `i16`, so a pair word costs one
    /// interleave and one widening per eight channels (sixteen channels a step where
    /// two steps fit: one load of each column for both).
    ///
    /// # Safety
    /// The CPU has AVX2, T is one byte, every column of `cols` has `to` readable bytes,
    /// `words` is `n * pitch` long or longer, and `8 <= to - from`, `to <= pitch`.
    #[target_feature(enable = "avx2")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn build8<T: QuantElem>(
        cols: Columns,
        n: usize,
        step: usize,
        d: usize,
        pitch: usize,
        from: usize,
        to: usize,
        zp: i16,
        words: &mut [i32],
    ) {
        let zp = _mm256_set1_epi16(zp);
        let widen = |v: __m128i| match T::MIN < 0 {
            true => _mm256_cvtepi8_epi16(v),
            false => _mm256_cvtepu8_epi16(v),
        };
        // Sixteen-channel steps over `from..to` while they fit whole, then the rest
        // in eight-channel steps, the last overlapping the one before (`to - from >= 8`).
        let wide = (to - from) / 16;
        let rest = from + wide * 16;
        let out = words.as_mut_ptr();
        cols.pairs(n, step, d, |k, pa, pb| {
            // SAFETY: word `k * pitch + to <= words.len()` (the caller's contract).
            let o = unsafe { out.add(k * pitch) };
            for i in 0..wide {
                let s = from + i * 16;
                // `s + 16 <= to` bytes from each column, words `s + 16 <= to <= pitch` of
                // column `k` (the caller's contract).
                // SAFETY: by the above.
                unsafe {
                    let (xa, xb) = (
                        _mm_loadu_si128(pa.add(s).cast()),
                        _mm_loadu_si128(pb.add(s).cast()),
                    );
                    let lo = _mm256_sub_epi16(widen(_mm_unpacklo_epi8(xa, xb)), zp);
                    let hi = _mm256_sub_epi16(widen(_mm_unpackhi_epi8(xa, xb)), zp);
                    _mm256_storeu_si256(o.add(s).cast(), lo);
                    _mm256_storeu_si256(o.add(s + 8).cast(), hi);
                }
            }
            if rest == to {
                return;
            }
            for s in starts(rest.min(to - 8), to, 8) {
                // `s + 8 <= to` bytes from each column (`s >= from`), words `s + 8 <= pitch`
                // of column `k` (the caller's contract).
                // SAFETY: by the above.
                unsafe {
                    let (xa, xb) = (
                        _mm_loadl_epi64(pa.add(s).cast()),
                        _mm_loadl_epi64(pb.add(s).cast()),
                    );
                    let v = _mm256_sub_epi16(widen(_mm_unpacklo_epi8(xa, xb)), zp);
                    _mm256_storeu_si256(o.add(s).cast(), v);
                }
            }
        });
    }

    /// The sixteen-lane pair sums of `n` pixels into `sink`: pixel `ox`, channel `ch`
    /// is the sum over live rows `(h, w)` and pairs `p` of the pair products of words
    /// `h[(ox * a + p * b) * pitch + ch]` and `w[p * pitch + ch]`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW; each `h` has
    /// `((n - 1) * a + (pairs - 1) * b + 1) * pitch + 16` readable words and each `w`
    /// `pairs * pitch + 16`; the sink takes `n` pixels of `c` channels; `pitch >= c >=
    /// 16`.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn sums16<S: Sink16>(
        live: &[(*const i32, *const i32)],
        pairs: usize,
        a: usize,
        b: usize,
        c: usize,
        pitch: usize,
        n: usize,
        sink: &mut S,
    ) {
        let (da, db) = (a * pitch, b * pitch);
        for (s, k) in steps16(c) {
            // SAFETY: the CPU has the features (the caller's contract).
            let st = unsafe { sink.step(s) };
            let mut ox = 0;
            // Four pixels at once: each filter word loaded once for four.
            while ox + 4 <= n {
                let mut acc = [_mm512_setzero_si512(); 4];
                for &(h, w) in live {
                    for p in 0..pairs {
                        // Pixels `ox..ox + 4 <= n`, pair `p < pairs`, lanes `s..s + 16 <=
                        // pitch + 16`: inside the rows' words (the caller's contract).
                        // SAFETY: by the above.
                        unsafe {
                            let wv = _mm512_loadu_si512(w.add(p * pitch + s).cast());
                            let at = h.add(ox * da + p * db + s);
                            for (i, acc) in acc.iter_mut().enumerate() {
                                let x = _mm512_loadu_si512(at.add(i * da).cast());
                                *acc = _mm512_add_epi32(*acc, _mm512_madd_epi16(x, wv));
                            }
                        }
                    }
                }
                for (i, &acc) in acc.iter().enumerate() {
                    // SAFETY: pixels `ox..ox + 4 <= n`, channels `s..s + k <= c`.
                    unsafe { sink.put(&st, ox + i, s, k, acc) };
                }
                ox += 4;
            }
            while ox < n {
                let mut acc = _mm512_setzero_si512();
                for &(h, w) in live {
                    for p in 0..pairs {
                        // SAFETY: as above, for one pixel.
                        unsafe {
                            let wv = _mm512_loadu_si512(w.add(p * pitch + s).cast());
                            let x = _mm512_loadu_si512(h.add(ox * da + p * db + s).cast());
                            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x, wv));
                        }
                    }
                }
                // SAFETY: pixel `ox < n`, channels `s..s + k <= c`.
                unsafe { sink.put(&st, ox, s, k, acc) };
                ox += 1;
            }
        }
    }

    /// The steps of sixteen lanes over `c` channels: `(first channel, lanes)`, each
    /// starting at a multiple of sixteen, the last masked to the channels left.
    #[inline(always)]
    pub(super) fn steps16(c: usize) -> impl Iterator<Item = (usize, usize)> {
        (0..c).step_by(16).map(move |s| (s, (c - s).min(16)))
    }

    /// [`sums16`] on AVX2: blocks of sixteen channels as two eight-lane halves where
    /// they fit (a pixel's sixteen sums requantised and stored at once), then
    /// eight-lane steps over the rest, the last overlapping the one before; four pixels
    /// at once, each filter word loaded once for the four.
    ///
    /// # Safety
    /// The CPU has AVX2; each `h` has `((n - 1) * a + (pairs - 1) * b + 1) * pitch`
    /// readable words and each `w` `pairs * pitch`; the sink takes `n` pixels of `c`
    /// channels; `pitch >= c >= 8`.
    #[target_feature(enable = "avx2")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn sums8<S: Sink8>(
        live: &[(*const i32, *const i32)],
        pairs: usize,
        a: usize,
        b: usize,
        c: usize,
        pitch: usize,
        n: usize,
        sink: &mut S,
    ) {
        // The pair counts of 3- to 6-tap filter rows with the loop over them unrolled
        // (3x3 and 5x5 filters); others counted at run time.
        // SAFETY: the caller's contract is each call's.
        unsafe {
            match pairs {
                2 => sums8_of::<2, S>(live, pairs, a, b, c, pitch, n, sink),
                3 => sums8_of::<3, S>(live, pairs, a, b, c, pitch, n, sink),
                _ => sums8_of::<0, S>(live, pairs, a, b, c, pitch, n, sink),
            }
        }
    }

    /// [`sums8`] for `P` pairs a filter row (`P == 0`: `pairs`).
    ///
    /// # Safety
    /// As for [`sums8`]; `P` is 0 or `pairs`.
    #[inline]
    #[target_feature(enable = "avx2")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn sums8_of<const P: usize, S: Sink8>(
        live: &[(*const i32, *const i32)],
        pairs: usize,
        a: usize,
        b: usize,
        c: usize,
        pitch: usize,
        n: usize,
        sink: &mut S,
    ) {
        let pairs = if P == 0 { pairs } else { P };
        let (da, db) = (a * pitch, b * pitch);
        let ld = |p: *const i32| {
            // The callers below say why their words lie in a row or filter row.
            // SAFETY: every word read lies in a row or filter row (callers' contract).
            unsafe { _mm256_loadu_si256(p.cast()) }
        };
        let mac =
            |acc: __m256i, x: __m256i, w: __m256i| _mm256_add_epi32(acc, _mm256_madd_epi16(x, w));
        // Pixels `ox + $i` of the block of sixteen channels from `s` (the indices written
        // out: an array indexed in a loop was kept in memory, not in registers).
        macro_rules! halves {
            ($ox:expr, $s:expr, $st:expr; $($i:literal)+) => {{
                let mut acc = [$({ let _ = $i; [_mm256_setzero_si256(); 2] }),+];
                for &(h, w) in live {
                    for p in 0..pairs {
                        // Pixels `ox + $i < n`, pair `p < pairs`, channels `s..s + 16 <= c <=
                        // pitch`: inside the rows' words (the caller's contract).
                        let (wp, at) = (
                            w.wrapping_add(p * pitch + $s),
                            h.wrapping_add($ox * da + p * db + $s),
                        );
                        let (w0, w1) = (ld(wp), ld(wp.wrapping_add(8)));
                        $(
                            let x = at.wrapping_add($i * da);
                            acc[$i][0] = mac(acc[$i][0], ld(x), w0);
                            acc[$i][1] = mac(acc[$i][1], ld(x.wrapping_add(8)), w1);
                        )+
                    }
                }
                $(
                    // SAFETY: pixel `ox + $i < n`, channels `s..s + 16 <= c`.
                    unsafe { sink.put2($st, $ox + $i, $s, acc[$i][0], acc[$i][1]) };
                )+
            }};
        }
        // Pixels `ox + $i` of the eight channels from `s`.
        macro_rules! step {
            ($ox:expr, $s:expr, $st:expr; $($i:literal)+) => {{
                let mut acc = [$({ let _ = $i; _mm256_setzero_si256() }),+];
                for &(h, w) in live {
                    for p in 0..pairs {
                        // Pixels `ox + $i < n`, pair `p < pairs`, channels `s..s + 8 <= c <=
                        // pitch`: inside the rows' words (the caller's contract).
                        let wv = ld(w.wrapping_add(p * pitch + $s));
                        let at = h.wrapping_add($ox * da + p * db + $s);
                        $(
                            acc[$i] = mac(acc[$i], ld(at.wrapping_add($i * da)), wv);
                        )+
                    }
                }
                $(
                    // SAFETY: pixel `ox + $i < n`, channels `s..s + 8 <= c`.
                    unsafe { sink.put(&$st, $ox + $i, $s, acc[$i]) };
                )+
            }};
        }
        let wide = c / 16;
        for s in (0..wide).map(|i| i * 16) {
            // SAFETY: the CPU has AVX2 (the caller's contract).
            let st = unsafe { [sink.step(s), sink.step(s + 8)] };
            let mut ox = 0;
            while ox + 4 <= n {
                halves!(ox, s, &st; 0 1 2 3);
                ox += 4;
            }
            while ox < n {
                halves!(ox, s, &st; 0);
                ox += 1;
            }
        }
        let rest = wide * 16;
        if rest == c {
            return;
        }
        for s in starts(rest.min(c - 8), c, 8) {
            // SAFETY: the CPU has AVX2 (the caller's contract).
            let st = unsafe { sink.step(s) };
            let mut ox = 0;
            while ox + 4 <= n {
                step!(ox, s, st; 0 1 2 3);
                ox += 4;
            }
            while ox < n {
                step!(ox, s, st; 0);
                ox += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The sums straight from the definition (taps outside the input skipped).
    fn want<T: QuantElem, F: QuantElem>(
        g: &ConvGeometry,
        img: &[T],
        oy: usize,
        filter: &[F],
        in_zp: i32,
        w_zp: &[i32],
    ) -> Vec<i32> {
        let c = g.in_c;
        let mut out = vec![0i32; g.out_w * c];
        for ox in 0..g.out_w {
            for k in 0..c {
                let mut s = 0i32;
                for ky in 0..g.filter_h {
                    for kx in 0..g.filter_w {
                        let iy = (oy * g.stride_h + ky * g.dilation_h).checked_sub(g.pad_top);
                        let ix = (ox * g.stride_w + kx * g.dilation_w).checked_sub(g.pad_left);
                        let (Some(iy), Some(ix)) = (iy, ix) else {
                            continue;
                        };
                        if iy >= g.in_h || ix >= g.in_w {
                            continue;
                        }
                        let x = img[(iy * g.in_w + ix) * c + k].to_i32() - in_zp;
                        let w = filter[(ky * g.filter_w + kx) * c + k].to_i32() - w_zp[k];
                        s = s.wrapping_add(x * w);
                    }
                }
                out[ox * c + k] = s;
            }
        }
        out
    }

    /// What the output stage is in a case: per channel `(bias, multiplier, shift)`
    /// cycled over the channels, the output zero point, and whether an epilogue (a
    /// fused REQUANTIZE_PRELU) follows.
    #[derive(Clone, Debug)]
    struct StageCase {
        consts: Vec<(i32, i32, i32)>,
        zp: i32,
        epilogue: bool,
    }

    /// The stage of `case` over `c` channels for outputs of type `T`.
    fn stage_of<T: QuantElem>(case: &StageCase, c: usize) -> Requant {
        use crate::kernels::elementwise::quantize_simd::{PreluQuant, Quantizer};
        use crate::kernels::requant::Epilogue;
        let at = |k: usize| case.consts[k % case.consts.len()];
        let (lo, hi) = (T::MIN, T::MAX);
        let q = Requant::new(
            (0..c).map(|k| at(k).0).collect(),
            (0..c).map(|k| at(k).1).collect(),
            (0..c).map(|k| at(k).2).collect(),
            case.zp.clamp(lo, hi),
            lo,
            hi,
        );
        if !case.epilogue {
            return q;
        }
        let prelu = PreluQuant {
            in_scale: 0.05,
            in_zp: (lo + hi) / 2,
            out: Quantizer {
                scale: 0.07,
                zp: ((lo + hi) / 2 + 3) as f32,
                lo: lo as f32,
                hi: hi as f32,
            },
        };
        let alpha: Vec<f32> = (0..c).map(|k| 0.25 - 0.1 * (k % 7) as f32).collect();
        let e = Epilogue::new(prelu, ((lo, hi), (lo, hi)), &alpha, c, (lo + 5, hi - 9));
        q.with_epilogue(Some(e))
    }

    /// Every vector level this CPU has gives the definition's sums, and the stage's
    /// bytes of them when requantising in registers, or declines (only where the rows
    /// do not apply).
    fn check<T: QuantElem, F: QuantElem>(
        g: &ConvGeometry,
        img: &[T],
        filter: &[F],
        in_zp: i32,
        w_zp: &[i32],
        stage: &StageCase,
    ) -> Result<(), TestCaseError> {
        let stage = stage_of::<T>(stage, g.in_c);
        // Two executions of each level: the second finds the layer built by the first
        // and takes its scratch rows, with other values in the same image buffer (so at
        // the same address the first execution's rows were kept by).
        let mut img = img.to_vec();
        for (pass, level) in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni]
            .into_iter()
            .flat_map(|l| [(0, l), (1, l)])
        {
            if pass == 1 {
                img.reverse();
            }
            let img = &img[..];
            let prepared = Prepared::<T>::new(level, g, filter, |c| w_zp[c], in_zp);
            let applies = cfg!(target_arch = "x86_64")
                && level.min(crate::kernels::isa::detected()) >= Isa::Avx2
                && g.in_c >= 8
                && (T::MIN..=T::MAX).contains(&in_zp);
            prop_assert_eq!(prepared.is_some(), applies, "{:?}", level);
            let Some(mut prepared) = prepared else {
                continue;
            };
            // Quads wherever VNNI runs 16 channels or more of byte weights.
            let byte_weights = filter
                .iter()
                .enumerate()
                .all(|(i, w)| (-128..=127).contains(&(w.to_i32() - w_zp[i % g.in_c])));
            let quads = level.min(crate::kernels::isa::detected()) >= Isa::Avx512Vnni
                && g.in_c >= 16
                && byte_weights;
            prop_assert_eq!(prepared.quads(), quads, "{:?}", level);
            for oy in 0..g.out_h {
                let want = want(g, img, oy, filter, in_zp, w_zp);
                let mut got = vec![7i32; g.out_w * g.in_c];
                prop_assert!(prepared.row_sums(g, img, oy, &mut got));
                prop_assert_eq!(&got, &want, "{:?} pass {} row {}", level, pass, oy);
                let want: Vec<i32> = want
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| stage.one::<T>(v, i % g.in_c).to_i32())
                    .collect();
                let mut got = vec![T::saturate_from_i32(7); g.out_w * g.in_c];
                prop_assert!(prepared.row_requantised(g, img, oy, &stage, &mut got));
                let got: Vec<i32> = got.iter().map(|v| v.to_i32()).collect();
                prop_assert_eq!(
                    &got,
                    &want,
                    "{:?} pass {} requantised row {}",
                    level,
                    pass,
                    oy
                );
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(crate::kernels::proptest_config(128))]
        /// Every level gives the definition's sums, pairs and quads: channel counts
        /// across the step widths (an overlapping last step), padding (rows and columns
        /// outside at every border), strides (one that does not divide a tap group's
        /// span too), dilations, tap counts from 1 to 6 a row (one and two quads, odd
        /// and even pairs), input zero points at the types' extremes, filter zero
        /// points that keep the weights within a byte or not, signed and unsigned
        /// operands; and the same rows requantised in registers give the output stage's
        /// bytes of those sums (right and left shifts, the saturating multiplier, with
        /// and without a fused REQUANTIZE_PRELU); and so does an execution of a layer
        /// built before (kept rows must not be taken for the new image's).
        #[test]
        fn quant_depthwise_row_sums_match_the_definition(
            c in 1usize..80,
            in_h in 1usize..7,
            in_w in 1usize..8,
            fh in 1usize..6,
            fw in 1usize..7,
            stride in 1usize..4,
            dilation in 1usize..3,
            pad in 0usize..3,
            zp in prop_oneof![
                -128i32..=255,
                Just(-128),
                Just(127),
                Just(0),
                Just(255),
                Just(i32::MIN),
                Just(1000)
            ],
            w_zp in prop_oneof![Just(0i32), -128i32..=255],
            seed in any::<u64>(),
            stage in (
                proptest::collection::vec(
                    (-5000i32..5000,
                     prop_oneof![1i32 << 29..i32::MAX, Just(i32::MIN), Just(i32::MAX)],
                     prop_oneof![-12i32..=-1, -31i32..=2]),
                    1..5),
                -300i32..300,
                any::<bool>(),
            ).prop_map(|(consts, zp, epilogue)| StageCase { consts, zp, epilogue }),
        ) {
            let out = |n: usize, f: usize| (n + 2 * pad).saturating_sub((f - 1) * dilation + 1) / stride + 1;
            let g = ConvGeometry {
                batches: 1, in_h, in_w, in_c: c,
                out_h: out(in_h, fh), out_w: out(in_w, fw),
                filter_h: fh, filter_w: fw,
                stride_h: stride, stride_w: stride,
                dilation_h: dilation, dilation_w: dilation,
                pad_top: pad, pad_left: pad,
            };
            let mut s = seed | 1;
            let mut byte = || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s as u8 };
            let img: Vec<u8> = (0..in_h * in_w * c).map(|_| byte()).collect();
            let filter: Vec<u8> = (0..fh * fw * c).map(|_| byte()).collect();
            let w_zps: Vec<i32> = (0..c).map(|k| if k % 3 == 0 { w_zp } else { 0 }).collect();
            let simg: Vec<i8> = img.iter().map(|&v| v as i8).collect();
            let sfilter: Vec<i8> = filter.iter().map(|&v| v as i8).collect();
            check::<i8, i8>(&g, &simg, &sfilter, zp, &vec![0; c], &stage)?;
            check::<u8, i8>(&g, &img, &sfilter, zp, &vec![0; c], &stage)?;
            check::<u8, u8>(&g, &img, &filter, zp, &w_zps, &stage)?;
            // Unsigned weights within a byte of their zero point (quads on VNNI).
            let near: Vec<u8> = filter
                .iter()
                .enumerate()
                .map(|(i, &v)| (w_zps[i % c] + i32::from(v as i8)).clamp(0, 255) as u8)
                .collect();
            check::<u8, u8>(&g, &img, &near, zp, &w_zps, &stage)?;
            check::<i8, u8>(&g, &simg, &near, zp, &w_zps, &stage)?;
        }
    }

    #[test]
    fn quant_depthwise_row_sums_refuse_bad_lengths() {
        let g = ConvGeometry {
            batches: 1,
            in_h: 2,
            in_w: 2,
            in_c: 8,
            out_h: 1,
            out_w: 1,
            filter_h: 2,
            filter_w: 2,
            stride_h: 1,
            stride_w: 1,
            dilation_h: 1,
            dilation_w: 1,
            pad_top: 0,
            pad_left: 0,
        };
        assert!(Prepared::<i8>::new(Isa::Avx2, &g, &[0i8; 31], |_| 0, 0).is_none());
        let Some(mut p) = Prepared::<i8>::new(Isa::Avx2, &g, &[1i8; 32], |_| 0, 0) else {
            // No vector level on this CPU: nothing to refuse.
            assert!(crate::kernels::isa::detected() < Isa::Avx2);
            return;
        };
        let mut acc = [5i32; 8];
        assert!(!p.row_sums(&g, &[0i8; 31], 0, &mut acc));
        assert!(!p.row_sums(&g, &[0i8; 32], 0, &mut acc[..7]));
        assert_eq!(acc, [5; 8]);
        assert!(p.row_sums(&g, &[1i8; 32], 0, &mut acc));
        assert_eq!(acc, [4; 8]);
    }
}
