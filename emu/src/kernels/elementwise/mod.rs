//! Element-wise kernels: broadcast binary arithmetic and unary functions.

pub mod binary;
pub mod compare;
pub mod convert;
pub mod logical;
pub mod math;
pub mod minmax;
pub mod unary;

use crate::kernels::{Result, Words};

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
