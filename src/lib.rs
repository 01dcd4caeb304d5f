//! qdqc: a compiler for quantized (QDQ) ONNX models whose fusions fire only when proven
//! rounding-exact. This crate is the facade the CLI and build scripts use; the pipeline lives in
//! the workspace crates (see ARCHITECTURE.md).
//!
//! Features: `cli` (default) builds the `qdqc` binary; `npz` (part of `cli`) adds [`read_inputs`].
//! A library user takes `default-features = false` and pulls neither clap nor zip.

#![warn(missing_docs)]

mod allow;
mod audit;
#[cfg(feature = "cli")]
pub mod cli;
mod compile;
mod dot;
mod inspect;
#[cfg(feature = "npz")]
mod npz;
mod placement;
mod profile;
mod rust_target;
mod verdicts;
mod weights;

pub use allow::{allow, allow_one};
pub use audit::{Audit, audit};
pub use compile::{CompileOptions, CompileReport, Compiled, GroupDecision, Timings, compile, compile_model, compile_with_report};
pub use inspect::{Inspection, inspect};
pub use placement::{Placement, placement};
pub use profile::SessionProfile;
pub use qdqc_codegen::rust::Weights as RustWeights;
pub use qdqc_exact::Contract;
pub use qdqc_lang::outputs::{remove_pending_then_exit, remove_pending_unless_busy};
pub use qdqc_lang::save::write_atomically;
pub use qdqc_lang::{Error, ErrorKind, Model, Result};
pub use qdqc_lower::{Observer, Progress};
pub use qdqc_ort::nbits::AccuracyLevel;
pub use qdqc_ort::{Isa, OrtTarget};
pub use qdqc_rewrites::rules::{Activations, Allow};
pub use qdqc_rewrites::{Profile, Target};
pub use qdqc_target_rust::RustTarget;
pub use rust_target::{KERNELS_PATH_ENV, compile_rust, compile_rust_module};
pub use weights::{FloatTable, ModelSize};

/// Reads `--inputs FILE.npz`: f32 activations keyed by tensor name.
#[cfg(feature = "npz")]
pub fn read_inputs(path: &std::path::Path) -> Result<Activations> {
    Ok(Activations { source: path.display().to_string(), arrays: std::sync::Arc::new(npz::read(path)?), outcome: Default::default() })
}

/// Graphviz of the model at `path` with `inspect`'s groups boxed (`qdqc inspect --dot`).
pub fn inspect_dot(path: &std::path::Path, inspection: &Inspection) -> Result<String> {
    dot::inspection(path, inspection)
}

/// Graphviz of the model at `path` with the audit's groups boxed and coloured by verdict,
/// refused ones labelled with their counterexample or reason (`qdqc audit --dot`).
pub fn audit_dot(path: &std::path::Path, audit: &Audit) -> Result<String> {
    dot::audit(path, audit)
}

/// The human-readable audit table.
pub fn audit_text(a: &Audit) -> String {
    audit::text(a)
}
