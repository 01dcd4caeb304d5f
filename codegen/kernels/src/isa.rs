//! Which instruction set the kernels run on, chosen at run time.
//!
//! Every path computes the same integers (exact products, i32 sums wrapping modulo 2^32), so the
//! choice changes speed only. A [`Kernels`] value is the proof that its path runs on this host:
//! it is only made by [`Kernels::new`], [`Kernels::detect`] and [`Kernels::from_env`], which check
//! CPUID first; the SIMD paths rely on that for their safety.

use std::fmt;

/// The environment variable that forces a path (`portable`, `avx2`, `avx512vnni`, `avx512amx`).
pub const ISA_ENV: &str = "QDQC_KERNELS_ISA";

/// One kernel path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Plain Rust, any CPU.
    Portable,
    /// x86-64 AVX2: u8 and i8 widened to i16, `vpmaddwd` pairs (exact); `vpmaddubsw`, which
    /// saturates pairs of products to int16, only on weights split into a pair-safe part and an
    /// excess (`crate::split`).
    Avx2,
    /// x86-64 AVX-512 VNNI: `vpdpbusd`, u8×i8 products summed in i32 (exact, wrapping).
    Avx512Vnni,
    /// The AVX-512 VNNI path whose u8×i8 GEMM runs on AMX tiles (`tdpbusd`, the same exact
    /// wrapping sums, 16 × 16 × 64 products per instruction); every other kernel is VNNI's.
    Avx512Amx,
}

impl Isa {
    /// Every path, portable first.
    pub const ALL: [Isa; 4] = [Isa::Portable, Isa::Avx2, Isa::Avx512Vnni, Isa::Avx512Amx];

    /// The name `QDQC_KERNELS_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512vnni",
            Isa::Avx512Amx => "avx512amx",
        }
    }

    /// Parses a name of [`Isa::name`].
    pub fn parse(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|isa| isa.name() == name)
    }

    /// Whether this host can run the path (CPUID, cached by std).
    pub fn is_available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Amx => Isa::Avx512Vnni.is_available() && crate::micro::amx::permitted(),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The paths this host can run, portable first.
    pub fn available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|isa| isa.is_available()).collect()
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a path cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IsaError {
    /// `QDQC_KERNELS_ISA` holds no path name.
    Unknown(String),
    /// The host lacks the path's instructions.
    Unavailable(Isa),
}

impl fmt::Display for IsaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IsaError::Unknown(name) => write!(f, "{ISA_ENV}={name:?}: expected portable, avx2, avx512vnni or avx512amx"),
            IsaError::Unavailable(isa) => write!(f, "kernel path {isa} requested, but this CPU lacks its instructions"),
        }
    }
}

impl std::error::Error for IsaError {}

/// A kernel path checked to run on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernels {
    isa: Isa,
}

impl Kernels {
    /// The path `isa`, refused when the host lacks it.
    pub fn new(isa: Isa) -> Result<Kernels, IsaError> {
        if isa.is_available() { Ok(Kernels { isa }) } else { Err(IsaError::Unavailable(isa)) }
    }

    /// The fastest path this host has.
    pub fn detect() -> Kernels {
        let isa = [Isa::Avx512Amx, Isa::Avx512Vnni, Isa::Avx2].into_iter().find(|isa| isa.is_available()).unwrap_or(Isa::Portable);
        Kernels { isa }
    }

    /// The path `QDQC_KERNELS_ISA` names, else the fastest one; a name the host cannot run is an error.
    pub fn from_env() -> Result<Kernels, IsaError> {
        Kernels::from_setting(std::env::var(ISA_ENV).ok().as_deref())
    }

    /// The path a `QDQC_KERNELS_ISA` value names (unset or empty: the fastest one).
    pub fn from_setting(value: Option<&str>) -> Result<Kernels, IsaError> {
        match value {
            Some(name) if !name.is_empty() => Kernels::new(Isa::parse(name).ok_or_else(|| IsaError::Unknown(name.to_string()))?),
            _ => Ok(Kernels::detect()),
        }
    }

    /// The instruction set of the vector kernels: the path itself, but `avx512vnni` for
    /// `avx512amx`, whose only kernel of its own is the GEMM's tiles (ask [`Kernels::path`]).
    /// Every kernel dispatches on this, so one written for AVX-512 serves both paths.
    pub fn isa(self) -> Isa {
        match self.isa {
            Isa::Avx512Amx => Isa::Avx512Vnni,
            isa => isa,
        }
    }

    /// The path as chosen (what `QDQC_KERNELS_ISA` names).
    pub fn path(self) -> Isa {
        self.isa
    }
}
