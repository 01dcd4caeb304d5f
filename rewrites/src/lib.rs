//! Rewrites and the exactness engine that gates them.
//!
//! * [`exact`]: reference semantics and the proof methods P1–P4 of the spec (§4).
//! * [`ort`]: bit-exact models of ONNX Runtime's fused CPU kernels, per ISA profile.
//! * [`catalog`]: the egg rules; each may fire only on a proof (policy in `rewrites/README.md`).

pub mod exact;
pub mod hazards;
pub mod ort;

use qdqc_lang::analysis::QdqAnalysis;
use qdqc_lang::term::Term;

pub type Rewrite = egg::Rewrite<Term, QdqAnalysis>;

/// The rules `qdqc compile` runs on every region, in a fixed order. Empty until the fusion rules
/// land with their proofs and broken twins.
pub fn catalog() -> Vec<Rewrite> {
    Vec::new()
}
