//! ONNX Runtime 1.31 CPU as one value: the ISA profiles a proof must hold on (each carrying its
//! kernel arithmetic, [`crate::profile`]), the cost model extraction prices nodes with
//! ([`crate::cost`]), and what the target does before fusion (re-signing int8 activations on
//! x86). Options, rules, extraction and reports take this value; nothing else chooses per ISA.
//!
//! Built in tract-linalg's manner: [`OrtTarget::generic`] is every modelled profile (a model
//! whose guarantee holds wherever it runs), [`OrtTarget::best`] the profile of this machine, and
//! [`OrtTarget::on`] a chosen set.

use crate::Isa;
use crate::cost::{INT8_ACTIVATION_GEMM_PENALTY, OrtCost};
use qdqc_lang::cost::CostModel;

/// ONNX Runtime 1.31's CPU execution provider on a set of ISA profiles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrtTarget {
    /// Sorted, without duplicates, never empty.
    profiles: Vec<Isa>,
}

impl OrtTarget {
    /// The name reports and errors use.
    pub const NAME: &'static str = "onnxruntime-1.31-cpu";

    /// Every modelled profile: a fusion fires only where it holds on all of them.
    pub fn generic() -> OrtTarget {
        OrtTarget { profiles: Isa::ALL.to_vec() }
    }

    /// The profile ONNX Runtime runs on this machine ([`Isa::host`]).
    pub fn best() -> Result<OrtTarget, String> {
        Ok(OrtTarget { profiles: vec![Isa::host()?] })
    }

    /// The given profiles (order and duplicates do not matter).
    pub fn on(profiles: &[Isa]) -> Result<OrtTarget, String> {
        let mut profiles = profiles.to_vec();
        profiles.sort();
        profiles.dedup();
        if profiles.is_empty() {
            return Err("no ISA profile given".into());
        }
        Ok(OrtTarget { profiles })
    }

    /// `PROFILE[,PROFILE]`, `host` or `all` ([`Isa::parse_list`]).
    pub fn parse(s: &str) -> Result<OrtTarget, String> {
        OrtTarget::on(&Isa::parse_list(s)?)
    }

    /// The profiles every proof must hold on, sorted.
    pub fn profiles(&self) -> &[Isa] {
        &self.profiles
    }

    /// What extraction pays per e-node on this target.
    pub fn cost(&self) -> &'static dyn CostModel {
        &OrtCost
    }

    /// Extra cost, in nodes, of an integer GEMM/conv kernel on int8 activations (the re-sign
    /// choice, `qdqc_lower::resign`).
    pub fn int8_activation_penalty(&self) -> usize {
        INT8_ACTIVATION_GEMM_PENALTY
    }

    /// Whether int8 activations are worth re-signing to uint8 before fusion: ORT's x86 integer
    /// kernels are faster on uint8 activations, and every profile must agree.
    pub fn resigns(&self) -> bool {
        self.profiles.iter().all(|i| i.is_x86())
    }
}

impl Default for OrtTarget {
    fn default() -> Self {
        OrtTarget::generic()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_names_its_profiles_once_in_order() {
        let t = OrtTarget::on(&[Isa::Arm64Neon, Isa::X86Avx2, Isa::X86Avx2]).unwrap();
        assert_eq!(t.profiles(), &[Isa::X86Avx2, Isa::Arm64Neon]);
        assert!(!t.resigns(), "arm64 keeps int8 activations");
        assert!(OrtTarget::on(&[]).is_err());
        assert_eq!(OrtTarget::parse("all").unwrap(), OrtTarget::generic());
    }
}
