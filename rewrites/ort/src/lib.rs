//! Models of ONNX Runtime 1.31's fused CPU kernels, bit for bit, as functions of a group's
//! parameters. Each model is validated against the real runtime by differential tests over full
//! code domains on the profile of the machine they run on ([`Isa::host`]: `x86-avx512vnni` here,
//! `x86-avx2` under `tests/emulate-avx2.sh`); models of ISAs the host lacks are pinned by unit
//! tests written from the source arithmetic (contract §3.3–§3.9).
//!
//! Beside the kernel models: [`optimizer`], a replay of ORT's graph optimizer on QDQ groups, and
//! [`hazards`], what ORT's own rewrites would change in a model.

// A compiler that sells bit-exactness: every narrowing cast is a checked `try_from` or an `allow`
// saying why no bits are lost (or which kernel truncation it models).
#![warn(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)]

pub mod binary;
pub mod cost;
pub mod hazards;
pub mod lut;
pub mod matmul_dynamic;
pub mod nbits;
pub mod optimizer;
pub mod pool;
pub mod profile;
pub mod requant;
pub mod softmax;
mod target;
pub mod weight_bias;

pub use target::OrtTarget;

use serde::Serialize;
use std::fmt;
use std::str::FromStr;
use std::time::Instant;

/// A proof's running time in microseconds for its certificate (saturating, after 584,000 years).
fn elapsed_micros(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

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

    /// The profile whose kernels ONNX Runtime 1.31 runs on this machine, chosen from CPUID as
    /// MLAS chooses (`mlas/lib/platform.cpp`): on x86-64, AVX-512 VNNI (with AVX-512 BW) or
    /// AVX-VNNI gives `vpdpbusd`, exact int8 accumulation, with the AVX2 elementwise kernels;
    /// AVX2 without VNNI (AVX-512 without VNNI included: `Avx512Core` also pairs products in
    /// `vpmaddubsw`) saturates u8×s8 pairs; without AVX2 MLAS still picks SSE4.1's pairing
    /// U8S8 kernel when it can, which no profile models, so such a host has none. aarch64 is
    /// NEON. Every differential test against ORT compares with this profile's models.
    pub fn host() -> Result<Isa, String> {
        host_profile()
    }

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

    /// `PROFILE[,PROFILE]` or `all`; `host` stands for [`Isa::host`].
    pub fn parse_list(s: &str) -> Result<Vec<Isa>, String> {
        if s == "all" {
            return Ok(Isa::ALL.to_vec());
        }
        let one = |p: &str| if p == "host" { Isa::host() } else { p.parse() };
        let mut out: Vec<Isa> = s.split(',').map(|p| one(p.trim())).collect::<Result<_, _>>()?;
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
            format!("unknown ISA profile '{s}' (known: {}, host, all)", names.join(", "))
        })
    }
}

#[cfg(target_arch = "x86_64")]
fn host_profile() -> Result<Isa, String> {
    let vnni512 = std::arch::is_x86_feature_detected!("avx512vnni") && std::arch::is_x86_feature_detected!("avx512bw");
    if vnni512 || std::arch::is_x86_feature_detected!("avxvnni") {
        Ok(Isa::X86Avx512Vnni)
    } else if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        Ok(Isa::X86Avx2)
    } else if std::arch::is_x86_feature_detected!("sse4.1") {
        Err("this x86 host has SSE4.1 but no AVX2: ONNX Runtime's SSE4.1 u8×s8 GEMM pairs products with int16 saturation, which no ISA profile models".into())
    } else {
        Ok(Isa::X86Sse2)
    }
}

#[cfg(target_arch = "aarch64")]
fn host_profile() -> Result<Isa, String> {
    Ok(Isa::Arm64Neon)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn host_profile() -> Result<Isa, String> {
    Err(format!("no ISA profile models ONNX Runtime's kernels on {}", std::env::consts::ARCH))
}

/// Parameter shorthands for the kernel models' unit tests.
#[cfg(test)]
pub(crate) mod test_params {
    use qdqc_exact::QParam;
    use qdqc_exact::reference::CodeType;

    pub fn u8p(scale: f32, zero_point: i64) -> QParam {
        QParam::new(scale, zero_point, CodeType::U8)
    }

    pub fn i8p(scale: f32, zero_point: i64) -> QParam {
        QParam::new(scale, zero_point, CodeType::I8)
    }
}
