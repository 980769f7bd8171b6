//! Element-wise kernels: broadcast binary arithmetic and unary functions.

mod affine;
pub mod binary;
pub mod compare;
pub mod convert;
pub mod logical;
mod lut_simd;
pub mod math;
pub mod minmax;
mod quant_add_affine;
mod quant_binary_simd;
mod quant_prelu_affine;
mod quant_requantize_affine;
pub(crate) mod quantize_simd;
pub mod unary;

use crate::kernels::layout::for_each_broadcast;
use crate::kernels::simd::{vectorized, Body};
use crate::kernels::{clamp_nan, Activation, Result, Words};

/// `o = act(f(x, y))` element-wise with broadcasting (`shapes` are x's, y's and o's), as
/// one loop per `f` (callers pass a closure per operation, never a function pointer).
/// Equal shapes, and an operand that repeats along leading dimensions only (a per-channel
/// vector, say), run as straight slices built for the widest vector unit, the activation's
/// clamp in the same pass (the unbounded clamp of [`Activation::None`] changes nothing).
pub(crate) fn zip_f32(
    shapes: [&[usize]; 3],
    x: &[f32],
    y: &[f32],
    o: &mut [f32],
    act: Activation,
    f: impl Fn(f32, f32) -> f32,
) {
    let [sx, sy, so] = shapes;
    let straight = if sx == so && sy == so {
        Some(Repeat::Neither)
    } else if sx == so && repeats_along_leading(sy, so) && !y.is_empty() {
        Some(Repeat::Y)
    } else if sy == so && repeats_along_leading(sx, so) && !x.is_empty() {
        Some(Repeat::X)
    } else {
        None
    };
    // A short repeating operand (a per-channel vector) is repeated out to a few hundred
    // elements first, so each straight run is long enough for the vector loop.
    let widened: Vec<f32>;
    let (x, y) = match straight {
        Some(Repeat::Y) if y.len() < MIN_RUN => {
            widened = y.repeat(MIN_RUN.div_ceil(y.len()));
            (x, &widened[..])
        }
        Some(Repeat::X) if x.len() < MIN_RUN => {
            widened = x.repeat(MIN_RUN.div_ceil(x.len()));
            (&widened[..], y)
        }
        _ => (x, y),
    };
    match straight {
        Some(repeat) => vectorized(Zip {
            x,
            y,
            o,
            repeat,
            range: act.range(),
            f,
        }),
        None => {
            for_each_broadcast(sx, sy, so, |i, ia, ib| {
                o[i] = f(x[ia], y[ib]);
            });
            act.apply_slice(o);
        }
    }
}

/// The shortest straight run [`zip_f32`] gives the vector loop (AVX-512's unrolled loop
/// takes 64 floats a step; shorter runs go element by element).
const MIN_RUN: usize = 256;

/// Which operand of a straight [`Zip`] repeats whole along the output.
#[derive(Clone, Copy)]
enum Repeat {
    Neither,
    X,
    Y,
}

/// The straight-slice loops of [`zip_f32`].
struct Zip<'a, F> {
    x: &'a [f32],
    y: &'a [f32],
    o: &'a mut [f32],
    repeat: Repeat,
    range: (f32, f32),
    f: F,
}

impl<F: Fn(f32, f32) -> f32> Body for Zip<'_, F> {
    type Out = ();

    #[inline(always)]
    fn run(self) {
        let Zip {
            x,
            y,
            o,
            repeat,
            range: (lo, hi),
            f,
        } = self;
        let each = |o: &mut [f32], x: &[f32], y: &[f32]| {
            for ((o, &p), &q) in o.iter_mut().zip(x).zip(y) {
                *o = clamp_nan(f(p, q), lo, hi);
            }
        };
        match repeat {
            Repeat::Neither => each(o, x, y),
            Repeat::Y => {
                for (o, x) in o.chunks_mut(y.len()).zip(x.chunks(y.len())) {
                    each(o, x, y);
                }
            }
            Repeat::X => {
                for (o, y) in o.chunks_mut(x.len()).zip(y.chunks(x.len())) {
                    each(o, x, y);
                }
            }
        }
    }
}

/// Whether a tensor of `shape` broadcast to `out` is its own elements repeated whole: its
/// dimensions, leading 1s dropped, are `out`'s trailing ones.
pub(crate) fn repeats_along_leading(shape: &[usize], out: &[usize]) -> bool {
    let lead = shape.iter().take_while(|&&d| d == 1).count();
    let tail = &shape[lead..];
    tail.len() <= out.len() && out.ends_with(tail)
}

/// Defines the kind enum of a kernel family from one list of its variants with their
/// NNAPI names: the enum (its parameter word is the variant's position), `ALL`, `name`,
/// `word` and `from_word`, so the two directions of the mapping cannot disagree.
macro_rules! kind_enum {
    (
        $(#[$meta:meta])*
        pub enum $kind:ident {
            $($(#[$vmeta:meta])* $variant:ident => $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $kind {
            $($(#[$vmeta])* $variant,)+
        }

        impl $kind {
            /// Every kind, in the order of their parameter words.
            pub const ALL: &'static [$kind] = &[$($kind::$variant),+];

            /// The NNAPI operation's name.
            pub const fn name(self) -> &'static str {
                match self {
                    $($kind::$variant => $text,)+
                }
            }

            /// The parameter word.
            pub const fn word(self) -> u32 {
                self as u32
            }

            /// The kind of parameter word `w`, if any.
            pub fn from_word(w: u32) -> Option<Self> {
                usize::try_from(w).ok().and_then(|i| Self::ALL.get(i)).copied()
            }
        }
    };
}
pub(crate) use kind_enum;

/// Reads a kind word with `from_word`; `what` names the family in the error.
pub(crate) fn decode_kind<K>(
    w: &mut Words<'_>,
    what: &str,
    from_word: fn(u32) -> Option<K>,
) -> Result<K> {
    let k = w.u32("kind")?;
    from_word(k).ok_or_else(|| w.err(format!("bad {what} kind {k}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::layout::broadcast_shape;
    use proptest::prelude::*;

    proptest! {
        /// The straight-slice paths of `zip_f32` agree with the general broadcast walk.
        #[test]
        fn zip_matches_the_broadcast_walk(
            out in proptest::collection::vec(1usize..5, 1..5),
            keep_x in proptest::collection::vec(any::<bool>(), 5),
            keep_y in proptest::collection::vec(any::<bool>(), 5),
            drop_x in 0usize..3,
            drop_y in 0usize..3,
        ) {
            // Each operand: `out` with some dimensions 1 and some leading ones dropped.
            let operand = |keep: &[bool], drop: usize| -> Vec<usize> {
                let s: Vec<usize> = out.iter().zip(keep).map(|(&d, &k)| if k { d } else { 1 }).collect();
                s[drop.min(s.len())..].to_vec()
            };
            let (sx, sy) = (operand(&keep_x, drop_x), operand(&keep_y, drop_y));
            let so = broadcast_shape("test", &sx, &sy).expect("broadcastable");
            let x: Vec<f32> = (0..sx.iter().product::<usize>()).map(|i| i as f32 * 0.5).collect();
            let y: Vec<f32> = (0..sy.iter().product::<usize>()).map(|i| i as f32 * 3.0 - 7.0).collect();
            let n: usize = so.iter().product();
            let f = |p: f32, q: f32| p * 2.0 - q;
            let mut got = vec![0.0; n];
            zip_f32([&sx, &sy, &so], &x, &y, &mut got, Activation::None, f);
            let mut want = vec![0.0; n];
            for_each_broadcast(&sx, &sy, &so, |i, ia, ib| want[i] = f(x[ia], y[ib]));
            prop_assert_eq!(got, want);
        }
    }
}
