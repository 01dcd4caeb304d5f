//! The target the rules are proven against, as one value they ask: ONNX Runtime's CPU kernels
//! ([`OrtTarget`], per ISA profile) or the Rust code qdqc generates ([`RustTarget`], whose
//! profiles all run the same integers). Each rule family asks the target for its verdicts
//! ([`super::rules`]: ORT's kernel models per ISA, the Rust kernels' proofs once); extraction
//! asks it for its cost model, the re-sign pass for its int8 policy.

use qdqc_lang::cost::CostModel;
use qdqc_ort::{Isa, OrtTarget};
use qdqc_target_rust::{RustProfile, RustTarget};
use serde::{Serialize, Serializer};
use std::fmt;

/// What a compile is proven for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Ort(OrtTarget),
    Rust(RustTarget),
}

/// One profile a verdict is given on: the key of every verdict list and report map. Serialized
/// as its name (ORT's exactly as [`Isa`] is: `"x86-avx2"`, …), ordered ORT's ISAs first in
/// [`Isa`]'s order, so ORT reports are unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Profile {
    Ort(Isa),
    Rust(RustProfile),
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Ort(isa) => isa.name(),
            Profile::Rust(p) => p.name(),
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Profile {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl Target {
    /// The name reports and errors use.
    pub fn name(&self) -> &'static str {
        match self {
            Target::Ort(_) => OrtTarget::NAME,
            Target::Rust(_) => RustTarget::NAME,
        }
    }

    /// The profiles every verdict is given on, sorted.
    pub fn profiles(&self) -> Vec<Profile> {
        match self {
            Target::Ort(t) => t.profiles().iter().map(|&i| Profile::Ort(i)).collect(),
            Target::Rust(t) => t.profiles().iter().map(|&p| Profile::Rust(p)).collect(),
        }
    }

    /// ORT's ISA profiles; none for another target (so ORT-only choices, such as the uint8-weight
    /// form or synthesized scales, never apply to it).
    pub fn ort_isas(&self) -> &[Isa] {
        match self {
            Target::Ort(t) => t.profiles(),
            Target::Rust(_) => &[],
        }
    }

    /// What extraction pays per e-node on this target.
    pub fn cost(&self) -> &'static dyn CostModel {
        match self {
            Target::Ort(t) => t.cost(),
            Target::Rust(t) => t.cost(),
        }
    }

    /// Whether int8 activations are worth re-signing to uint8 before fusion.
    pub fn resigns(&self) -> bool {
        match self {
            Target::Ort(t) => t.resigns(),
            Target::Rust(t) => t.resigns(),
        }
    }

    /// Extra cost, in nodes, of an integer GEMM/conv kernel on int8 activations.
    pub fn int8_activation_penalty(&self) -> usize {
        match self {
            Target::Ort(t) => t.int8_activation_penalty(),
            Target::Rust(t) => t.int8_activation_penalty(),
        }
    }
}

impl Default for Target {
    fn default() -> Self {
        Target::Ort(OrtTarget::generic())
    }
}

impl From<OrtTarget> for Target {
    fn from(t: OrtTarget) -> Target {
        Target::Ort(t)
    }
}

impl From<RustTarget> for Target {
    fn from(t: RustTarget) -> Target {
        Target::Rust(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ort_profiles_serialize_and_order_as_isas_do() {
        let t = Target::Ort(OrtTarget::generic());
        let names: Vec<String> = t.profiles().iter().map(|p| serde_json::to_string(p).unwrap()).collect();
        let isas: Vec<String> = Isa::ALL.iter().map(|i| serde_json::to_string(i).unwrap()).collect();
        assert_eq!(names, isas);
        let mut sorted = t.profiles();
        sorted.sort();
        assert_eq!(sorted, t.profiles());
        assert_eq!(Target::Rust(RustTarget::generic()).profiles().iter().map(|p| p.name()).collect::<Vec<_>>(), ["portable", "x86-avx2", "x86-avx512vnni"]);
        assert!(Target::Rust(RustTarget::generic()).ort_isas().is_empty());
    }
}
