//! Runs a kernel's loops compiled for the widest vector unit the CPU has. The loops stay
//! plain Rust, written as a [`Body`]: [`vectorized`] inlines its `run` into a copy built for
//! AVX2 or AVX-512 (chosen once at run time, see [`super::isa`]), where the compiler may use those registers.
//! Only element-wise vectorisation happens (no FMA contraction, no reassociation), so every
//! path gives bit-identical results. The vector levels have FMA, so a loop's explicit
//! `f32::mul_add` is one instruction there (and the same bits, from a library call, on the
//! plain path).

/// The vector units the dispatch chooses from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Plain,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// The level of [`super::isa::isa`] (so `VNPU_ISA` narrows it too).
fn level() -> Level {
    use super::isa::{isa, Isa};
    match isa() {
        Isa::Scalar => Level::Plain,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Level::Avx2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Avx512Vnni => Level::Avx512,
        #[cfg(not(target_arch = "x86_64"))]
        _ => Level::Plain,
    }
}

/// A loop nest to vectorise: its inputs are the fields, its work is `run`, which must be
/// `#[inline(always)]` (that is what puts it inside the copy built for the vector unit).
pub(crate) trait Body {
    /// What the loops produce.
    type Out;
    /// The loops.
    fn run(self) -> Self::Out;
}

/// Runs `f`, its loops compiled for the widest vector unit this CPU has.
#[inline]
pub(crate) fn vectorized<B: Body>(f: B) -> B::Out {
    match level() {
        Level::Plain => f.run(),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: chosen only where the CPU has AVX2 and FMA.
        Level::Avx2 => unsafe { x86::avx2(f) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: chosen only where the CPU has AVX-512F.
        Level::Avx512 => unsafe { x86::avx512(f) },
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Body;

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn avx2<B: Body>(f: B) -> B::Out {
        f.run()
    }

    #[target_feature(enable = "avx512f")]
    pub(super) fn avx512<B: Body>(f: B) -> B::Out {
        f.run()
    }
}

#[cfg(test)]
mod tests {
    struct Scale<'a>(&'a mut [f32], f32);

    impl super::Body for Scale<'_> {
        type Out = usize;
        #[inline(always)]
        fn run(self) -> usize {
            self.0.iter_mut().for_each(|v| *v *= self.1);
            self.0.len()
        }
    }

    #[test]
    fn the_body_runs_and_returns_its_value() {
        let mut v: Vec<f32> = (0..100).map(|i| i as f32).collect();
        assert_eq!(super::vectorized(Scale(&mut v, 0.5)), 100);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as f32 * 0.5));
    }
}
