//! Models of ONNX Runtime 1.31's fused CPU kernels, bit for bit, as functions of a group's
//! parameters. Each model is validated against the real runtime on this machine
//! (`x86-avx512vnni`) by differential tests over full code domains; models of ISAs that cannot
//! run here are pinned by unit tests written from the source arithmetic (ort-kernels.md §5).

pub mod binary;
pub mod lut;
pub mod matmul_dynamic;
pub mod nbits;
pub mod pool;
pub mod requant;
pub mod selectors;
pub mod softmax;

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// The CPU instruction-set profiles whose kernels differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Isa {
    /// x86-64 baseline: SSE2 elementwise kernels; 8-bit GEMM widens to 16 bits (exact).
    #[serde(rename = "x86-sse2")]
    X86Sse2,
    /// AVX2 + FMA without VNNI: two-FMA QLinearAdd, u8×s8 pairs saturate to int16.
    #[serde(rename = "x86-avx2")]
    X86Avx2,
    /// AVX-512 VNNI: AVX2 elementwise kernels, exact int8 accumulation.
    #[serde(rename = "x86-avx512vnni")]
    X86Avx512Vnni,
    /// ARM64 NEON: fixed-point QLinearAdd (ties away from zero) with a float fallback.
    #[serde(rename = "arm64-neon")]
    Arm64Neon,
}

impl Isa {
    pub const ALL: [Isa; 4] = [Isa::X86Sse2, Isa::X86Avx2, Isa::X86Avx512Vnni, Isa::Arm64Neon];

    /// The profile of the machine qdqc's differential tests run on.
    pub const HOST_TESTED: Isa = Isa::X86Avx512Vnni;

    pub fn is_x86(self) -> bool {
        !matches!(self, Isa::Arm64Neon)
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::X86Sse2 => "x86-sse2",
            Isa::X86Avx2 => "x86-avx2",
            Isa::X86Avx512Vnni => "x86-avx512vnni",
            Isa::Arm64Neon => "arm64-neon",
        }
    }

    /// `PROFILE[,PROFILE]` or `all`.
    pub fn parse_list(s: &str) -> Result<Vec<Isa>, String> {
        if s == "all" {
            return Ok(Isa::ALL.to_vec());
        }
        let mut out: Vec<Isa> = s.split(',').map(|p| p.trim().parse()).collect::<Result<_, _>>()?;
        out.sort();
        out.dedup();
        Ok(out)
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Isa {
    type Err = String;

    fn from_str(s: &str) -> Result<Isa, String> {
        Isa::ALL.into_iter().find(|i| i.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Isa::ALL.iter().map(|i| i.name()).collect();
            format!("unknown ISA profile '{s}' (known: {}, all)", names.join(", "))
        })
    }
}
