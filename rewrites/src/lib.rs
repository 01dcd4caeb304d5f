//! The egg rules over the Q/DQ term language: each fires only on a proof (policy in
//! `rewrites/README.md`). The proofs come from the exactness engine ([`qdqc_exact`],
//! `rewrites/exact`, docs/contract.md §4) over a target's kernel models ([`qdqc_ort`], `rewrites/ort`, or the Rust kernels' proofs,
//! [`qdqc_target_rust`], `rewrites/rust`), chosen by the [`Target`] value the rules ask.

pub mod rules;
mod target;

pub use rules::{Decision, GATHER_BEFORE_DEQUANTIZE, Log, Rewrite, RuleOptions, catalog};
pub use target::{Profile, Target};
