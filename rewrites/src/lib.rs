//! The egg rules over the Q/DQ term language: each fires only on a proof (policy in
//! `rewrites/README.md`). The proofs come from the exactness engine ([`qdqc_exact`],
//! `rewrites/exact`, docs/contract.md §4) over a target's kernel models ([`qdqc_ort`], `rewrites/ort`).

pub mod rules;

pub use rules::{Decision, GATHER_BEFORE_DEQUANTIZE, Log, Rewrite, RuleOptions, catalog};
