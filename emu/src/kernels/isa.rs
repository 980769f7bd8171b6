//! The vector instruction set the kernels run with: the widest this CPU has, or a narrower
//! one named by the environment variable `VNPU_ISA` (`scalar`, `avx2`, `avx512`,
//! `avx512vnni`), read once per process. Forcing a narrower level lets the AVX2 and plain
//! twins of every kernel be tested and timed on an AVX-512 machine; a level the CPU lacks
//! is never chosen (the request is capped at what the CPU has).

use std::sync::OnceLock;

/// An instruction-set level, ordered from narrowest to widest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Plain Rust, no explicit vector code.
    Scalar,
    /// AVX2 and FMA (256-bit vectors).
    Avx2,
    /// AVX-512 F and BW (512-bit vectors, 32 registers).
    Avx512,
    /// AVX-512 with the VNNI dot-product instructions.
    Avx512Vnni,
}

impl Isa {
    /// The name `VNPU_ISA` takes for this level.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Avx512Vnni => "avx512vnni",
        }
    }

    /// The level a `VNPU_ISA` value names, if any.
    pub fn parse(s: &str) -> Option<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni]
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(s.trim()))
    }
}

/// The widest level this CPU supports.
pub fn detected() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let avx2 = has!("avx2") && has!("fma");
        if avx2 && has!("avx512f") && has!("avx512bw") {
            if has!("avx512vnni") {
                return Isa::Avx512Vnni;
            }
            return Isa::Avx512;
        }
        if avx2 {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

/// The level the kernels use: [`detected`], lowered to `VNPU_ISA` where that names a
/// narrower level (an unknown name is ignored with a warning).
pub fn isa() -> Isa {
    static CHOSEN: OnceLock<Isa> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let cpu = detected();
        match std::env::var("VNPU_ISA") {
            Ok(v) => match Isa::parse(&v) {
                Some(wanted) => wanted.min(cpu),
                None => {
                    tracing::warn!("VNPU_ISA={v:?} is not one of scalar, avx2, avx512, avx512vnni");
                    cpu
                }
            },
            Err(_) => cpu,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isa_names_round_trip_and_order() {
        for l in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
            assert_eq!(Isa::parse(l.name()), Some(l));
        }
        assert_eq!(Isa::parse(" AVX2 "), Some(Isa::Avx2));
        assert_eq!(Isa::parse("sse"), None);
        assert!(Isa::Scalar < Isa::Avx2 && Isa::Avx512 < Isa::Avx512Vnni);
        assert!(isa() <= detected());
    }
}
