//! qdqc: a compiler for quantized (QDQ) ONNX models whose fusions fire only when proven
//! rounding-exact. This crate is the facade the CLI and build scripts use; the pipeline lives in
//! the workspace crates (see ARCHITECTURE.md).

mod compile;
mod inspect;
mod profile;

pub use compile::{CompileOptions, CompileReport, compile};
pub use inspect::{Inspection, inspect};
pub use profile::SessionProfile;
pub use qdqc_lang::save::write_atomically;
pub use qdqc_lang::{Error, ErrorKind, Model, Result};
