//! Rewrites and the exactness engine that gates them.
//!
//! * [`exact`]: reference semantics and the proof methods P1–P4 (docs/contract.md §4).
//! * [`ort`]: bit-exact models of ONNX Runtime's fused CPU kernels, per ISA profile.
//! * [`rules`]: the egg rules; each fires only on a proof (policy in `rewrites/README.md`).

pub mod exact;
pub mod hazards;
pub mod ort;
pub mod rules;

pub use rules::{Decision, GATHER_BEFORE_DEQUANTIZE, Log, Rewrite, RuleOptions, catalog};
