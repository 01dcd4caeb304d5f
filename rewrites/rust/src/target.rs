//! The Rust target as one value: its profiles (the kernel crate's paths) and its cost model.

use crate::cost::RustCost;
use qdqc_lang::cost::CostModel;
use serde::Serialize;
use std::fmt;

/// One path of the kernel crate (`qdqc_kernels::Isa`). Every path gives the same bits on every
/// input, so a proof holds on all of them at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum RustProfile {
    /// Plain Rust, any CPU.
    #[serde(rename = "portable")]
    Portable,
    /// AVX2: u8/i8 widened to i16, `vpmaddwd`; `vpmaddubsw` only on weights split pair-safe.
    #[serde(rename = "x86-avx2")]
    X86Avx2,
    /// AVX-512 VNNI: `vpdpbusd`.
    #[serde(rename = "x86-avx512vnni")]
    X86Avx512Vnni,
}

impl RustProfile {
    pub const ALL: [RustProfile; 3] = [RustProfile::Portable, RustProfile::X86Avx2, RustProfile::X86Avx512Vnni];

    pub fn name(self) -> &'static str {
        match self {
            RustProfile::Portable => "portable",
            RustProfile::X86Avx2 => "x86-avx2",
            RustProfile::X86Avx512Vnni => "x86-avx512vnni",
        }
    }
}

impl fmt::Display for RustProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The Rust code qdqc generates, on every path of the kernel crate.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RustTarget;

impl RustTarget {
    /// The name reports and errors use.
    pub const NAME: &'static str = "rust";

    /// Every path: the generated code picks one at run time, all give the same bits.
    pub fn generic() -> RustTarget {
        RustTarget
    }

    /// The profiles a verdict is reported on (one verdict, the same on each).
    pub fn profiles(&self) -> &'static [RustProfile] {
        &RustProfile::ALL
    }

    /// What extraction pays per e-node on this target.
    pub fn cost(&self) -> &'static dyn CostModel {
        &RustCost
    }

    /// No penalty: the kernels run int8 and uint8 activations alike (int8 codes are offset by 128
    /// into the u8 GEMM, exactly).
    pub fn int8_activation_penalty(&self) -> usize {
        0
    }

    /// Never: re-signing int8 activations gains nothing on the Rust kernels.
    pub fn resigns(&self) -> bool {
        false
    }
}
