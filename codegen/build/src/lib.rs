//! qdqc as a build step. In `build.rs`:
//!
//! ```no_run
//! let compiled = qdqc_build::Model::new("models/net.onnx").contract(qdqc_build::Contract::Exact).compile();
//! if let Err(e) = compiled {
//!     eprintln!("{e}"); // one line naming the file, node and problem
//!     std::process::exit(1);
//! }
//! ```
//!
//! and in the crate, `include_bytes!(concat!(env!("OUT_DIR"), "/net.qdqc.onnx"))` is the fused
//! model for ONNX Runtime ([`Target::Onnx`]); its report is `net.qdqc.json` beside it, its session
//! profile (the settings under which its guarantee holds) in [`Compiled::session_config`]. With
//! [`Target::Rust`] the model becomes Rust kernel code: `include!(concat!(env!("OUT_DIR"),
//! "/net.rs"))` defines `mod net` (`net::Model::new()?.run(&inputs)`), which calls the
//! `qdqc-kernels` crate (a normal dependency of the crate) and embeds `net.weights.bin` with
//! `include_bytes!` (read in place: no heap copy of the blob).
//!
//! What the build script gets, and why:
//!
//! | behaviour | why |
//! |---|---|
//! | `cargo:rerun-if-changed` for the model and each of its external data files | cargo re-runs the build script when, and only when, the model changes (burn#952: generators that print none rebuild forever or never) |
//! | one `cargo:warning=` per refused group, with its counterexample or reason | a refusal is not an error, but the user must see which groups stay unfused and why |
//! | a [`Result`] with qdqc's one-line error | a bad model fails the build with a message, not a panic's backtrace |
//! | paths resolved against `CARGO_MANIFEST_DIR`, outputs in `OUT_DIR`, named after the model | no absolute path is written into generated files (burn#657: binaries that cannot move) |
//! | outputs written as one transaction (qdqc's) | an interrupted build leaves the previous outputs, never half a model |
//!
//! **Profile.** Proofs enumerate code domains: at opt-level 0 they are 10–50× slower. A consumer
//! adds to its (workspace root) `Cargo.toml`:
//!
//! ```toml
//! [profile.dev.build-override]
//! opt-level = 3
//! ```
//!
//! (qdqc's own workspace sets `opt-level = 3` per proof crate instead, `[profile.dev.package.*]`,
//! which wins over `build-override` for those crates.)

use std::path::{Path, PathBuf};

pub use qdqc::{CompileReport, Contract, Error, ErrorKind, OrtTarget};

/// What the build step writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The fused ONNX model for ONNX Runtime (`NAME.qdqc.onnx`, external data beside it when
    /// the model has any) and its report (`NAME.qdqc.json`).
    Onnx,
    /// Rust kernel code (`--target rust`) as one module, `NAME.rs`, with `NAME.weights.bin` and
    /// the report `NAME.qdqc.json`; `NAME` must then be a Rust identifier.
    Rust,
}

/// A model to compile in a build script; [`Model::compile`] runs it.
#[derive(Clone, Debug)]
pub struct Model {
    path: PathBuf,
    contract: Contract,
    target: Target,
    ort_isa: String,
    allow: Vec<String>,
    name: Option<String>,
    out_dir: Option<PathBuf>,
    weights: qdqc::RustWeights,
}

/// What one build step wrote.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The written model (`OUT_DIR/NAME.qdqc.onnx`), or the Rust module (`OUT_DIR/NAME.rs`).
    pub model: PathBuf,
    /// The written report (`OUT_DIR/NAME.qdqc.json`).
    pub report_path: PathBuf,
    /// The report itself.
    pub report: CompileReport,
}

impl Compiled {
    /// The ONNX Runtime session config entries under which the compiled model keeps its
    /// guarantee (at any optimization level), as `(key, value)` pairs for
    /// `SessionOptions::add_session_config_entry`.
    pub fn session_config(&self) -> Vec<(&'static str, &'static str)> {
        self.report.session_profile.config.clone()
    }
}

impl Model {
    /// The model at `path`, relative to the crate's `CARGO_MANIFEST_DIR` unless absolute.
    /// Defaults: contract `exact`, ONNX target, every ORT ISA profile.
    pub fn new(path: impl AsRef<Path>) -> Model {
        Model {
            path: path.as_ref().to_path_buf(),
            contract: Contract::Exact,
            target: Target::Onnx,
            ort_isa: "all".into(),
            allow: Vec::new(),
            name: None,
            out_dir: None,
            weights: qdqc::RustWeights::Auto,
        }
    }

    /// The contract every fusion is proven against.
    pub fn contract(mut self, contract: Contract) -> Model {
        self.contract = contract;
        self
    }

    /// What to write.
    pub fn target(mut self, target: Target) -> Model {
        self.target = target;
        self
    }

    /// The Rust target: embed the weights in the module or map `OUT_DIR/NAME.weights.bin` at
    /// load (`RustWeights::Auto`, the default, embeds up to 64 MiB).
    pub fn weights(mut self, weights: qdqc::RustWeights) -> Model {
        self.weights = weights;
        self
    }

    /// ONNX Runtime ISA profiles to prove for: `all` (default), `host`, or `x86-avx2,…`.
    pub fn ort_isa(mut self, profiles: &str) -> Model {
        self.ort_isa = profiles.into();
        self
    }

    /// Permits a lossy rewrite by its CLI name (`matmulnbits=acc4`, `ort-float-fusions`).
    pub fn allow(mut self, name: &str) -> Model {
        self.allow.push(name.into());
        self
    }

    /// The output files' stem (default: the model's file stem).
    pub fn name(mut self, name: &str) -> Model {
        self.name = Some(name.into());
        self
    }

    /// Where to write (default: `OUT_DIR`).
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Model {
        self.out_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Compiles the model into the output folder, prints the `cargo:` lines, and returns what
    /// it wrote; nothing is written when it fails.
    pub fn compile(self) -> Result<Compiled, Error> {
        let path = match std::env::var_os("CARGO_MANIFEST_DIR") {
            Some(dir) if self.path.is_relative() => Path::new(&dir).join(&self.path),
            _ => self.path.clone(),
        };
        // Before anything can fail: a fixed model must re-run the build.
        println!("cargo:rerun-if-changed={}", path.display());
        let bad = |problem: String| Error::bad_input(&path, problem);
        let out_dir = match self.out_dir.clone().or_else(|| std::env::var_os("OUT_DIR").map(PathBuf::from)) {
            Some(d) => d,
            None => return Err(bad("OUT_DIR is not set: call compile() from a build script, or give .out_dir()".into())),
        };
        let ort = OrtTarget::parse(&self.ort_isa).map_err(bad)?;
        let allow = qdqc::allow(&self.allow).map_err(bad)?;
        let loaded = qdqc::Model::load(&path)?;
        for file in loaded.external_files() {
            println!("cargo:rerun-if-changed={}", file.display());
        }
        drop(loaded);
        let name = match &self.name {
            Some(n) => n.clone(),
            None => path.file_stem().map(|s| s.to_string_lossy().into_owned()).ok_or_else(|| bad("the model path has no file name".into()))?,
        };
        let target = match self.target {
            Target::Onnx => ort.into(),
            Target::Rust => qdqc::RustTarget::generic().into(),
        };
        let options = qdqc::CompileOptions { contract: self.contract, target, allow, rust_weights: self.weights, ..Default::default() };
        let report_path = out_dir.join(format!("{name}.qdqc.json"));
        let (model, report) = match self.target {
            Target::Onnx => {
                let model = out_dir.join(format!("{name}.qdqc.onnx"));
                let report = qdqc::compile_with_report(&path, &model, Some(&report_path), &options)?;
                (model, report)
            }
            Target::Rust => {
                let (text, weights, report) = qdqc::compile_rust_module(&path, &name, &options)?;
                let model = out_dir.join(format!("{name}.rs"));
                // The module last: it names the other two.
                qdqc::write_atomically(&out_dir.join(format!("{name}.weights.bin")), &weights)?;
                qdqc::write_atomically(&report_path, serde_json::to_string_pretty(&report).expect("reports serialize").as_bytes())?;
                qdqc::write_atomically(&model, text.as_bytes())?;
                (model, report)
            }
        };
        for line in warnings(&path, &report) {
            println!("cargo:warning={line}");
        }
        Ok(Compiled { model, report_path, report })
    }
}

/// One line per refused group (its first profile's counterexample, else its reason), then the
/// model's own warnings; each on one line, as `cargo:warning=` takes it.
fn warnings(path: &Path, report: &CompileReport) -> Vec<String> {
    let model = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let mut lines = Vec::new();
    for d in report.decisions.iter().filter(|d| !d.fired) {
        let why = d
            .counterexample
            .iter()
            .map(|(p, c)| format!("refuted on {p}: {c}"))
            .chain(d.reason.iter().map(|(p, r)| format!("unknown on {p}: {r}")))
            .next()
            .unwrap_or_else(|| "not proven".into());
        lines.push(format!("qdqc: {model}: {} → {} stays unfused ({}), {why}", d.output, d.fused_op, d.rule));
    }
    lines.extend(report.warnings.iter().map(|w| format!("qdqc: {model}: {w}")));
    lines.into_iter().map(|l| l.replace(['\n', '\r'], " ")).collect()
}
