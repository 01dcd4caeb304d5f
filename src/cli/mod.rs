//! The `qdqc` command line, as a library function: the binary (src/main.rs) and the Python
//! package's `python -m qdqc` run the same code. Exit codes: 0 success, 1 compilation failed or
//! an I/O error, 2 bad input or usage.

mod watch;

use crate::{Allow, CompileOptions, CompileReport, Contract, Error, ErrorKind, Isa, OrtTarget, RustTarget, Target};
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

/// Runs the command line `args` (the program name first, as `std::env::args_os` gives it) and
/// returns its exit code; errors are printed on stderr as one line, `--help` and `--version` on
/// stdout.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are "errors" that print on stdout and exit 0.
            let _ = e.print();
            return e.exit_code();
        }
    };
    match run(cli.command, watch::wanted(cli.quiet)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("qdqc: error: {e}");
            match e.kind {
                ErrorKind::BadInput => 2,
                ErrorKind::Compile | ErrorKind::Io => 1,
            }
        }
    }
}

#[derive(Parser)]
#[command(name = "qdqc", version, about = "Proof-gated fusion compiler for quantized (QDQ) ONNX models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// No progress bar and no summary on a terminal (neither is printed when stderr is not one).
    #[arg(long, short, global = true)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Compile a QDQ model: lift it into e-graphs, apply proven rewrites, write ONNX.
    Compile {
        input: PathBuf,
        /// The compiled model (`--target onnx`) or the generated crate's folder (`--target rust`).
        #[arg(short, long)]
        output: PathBuf,
        /// What to write: an ONNX model, or a Rust crate linking the qdqc-kernels crate.
        #[arg(long, value_enum, default_value = "onnx")]
        target: TargetArg,
        /// Lift and extract only: no rewrite runs.
        #[arg(long)]
        no_fuse: bool,
        /// Write a JSON report of every QDQ group and what became of it.
        #[arg(long, value_name = "REPORT.json")]
        report: Option<PathBuf>,
        /// Print every fusion decision with its proof or counterexample.
        #[arg(long)]
        explain: bool,
        /// exact: same bits as the original on the same runtime; real: same bits as exact real arithmetic.
        #[arg(long, value_enum, default_value = "exact")]
        contract: ContractArg,
        /// `--target onnx`: a fusion must be proven on every one of ONNX Runtime's ISA profiles
        /// given (default: all). The Rust target's kernels give the same bits on every ISA.
        #[arg(long, value_name = "PROFILE[,PROFILE]|all", value_parser = parse_target)]
        ort_isa: Option<OrtTarget>,
        /// Keep int8 activations int8. By default, when every profile is x86, an int8 activation
        /// read only by DequantizeLinear becomes uint8 with its zero point + 128 (bit-identical
        /// values; the form ORT's x86 integer kernels run fast).
        #[arg(long)]
        keep_int8_activations: bool,
        /// Dequantize constant weights into float initializers (exact by construction; the
        /// model grows to 4 bytes per weight).
        #[arg(long)]
        fold_weights: bool,
        /// Allow a lossy rewrite (contract `lossy`, reported per instance with its measured
        /// deviation); repeatable. `matmulnbits[=acc0|acc1|acc4]`: DQ(W)→MatMul/Gemm into
        /// MatMulNBits at that accuracy level, acc1 (f32, the least lossy) when none is given.
        /// `ort-float-fusions`: the printed session profile leaves ONNX Runtime's float fusions
        /// on (ORT_ENABLE_ALL; QDQ handling stays off, so fused and refused quantized groups are
        /// as proven); float ops are lossy and their deviation is not measured by qdqc.
        #[arg(long, value_name = "NAME[=VALUE]", value_parser = parse_allow)]
        allow: Vec<String>,
        /// Activations (numpy.savez, float32, keyed by tensor name) on which lossy instances
        /// also measure their deviation.
        #[arg(long, value_name = "FILE.npz")]
        inputs: Option<PathBuf>,
        /// Add wall-clock times to the report (without it, two runs give byte-identical reports).
        #[arg(long)]
        timings: bool,
        /// `--target rust`: embed the weights in the crate (`include_bytes!`), or write them
        /// beside it as `weights.bin`, mapped at load (`Model::from_weights_file` takes another
        /// path); auto embeds up to 64 MiB (rustc holds about 12 times what it embeds).
        #[arg(long, value_enum, default_value = "auto")]
        weights: WeightsArg,
    },
    /// For every group ONNX Runtime would fuse: is the fusion exact, per ISA profile? Plus hazards.
    Audit {
        input: PathBuf,
        #[arg(long)]
        json: bool,
        /// ISA profiles to check: x86-sse2, x86-avx2, x86-avx512vnni, arm64-neon, host, or all.
        #[arg(long, value_name = "PROFILE[,PROFILE]|all", default_value = "all", value_parser = parse_target)]
        ort_isa: OrtTarget,
        /// The contract fusions are checked against; without it, both (`exact` first, `real` in
        /// each group's `real`).
        #[arg(long, value_enum)]
        contract: Option<ContractArg>,
        /// Also write the graph as Graphviz, groups boxed and coloured by verdict (`dot -Tsvg`).
        #[arg(long, value_name = "FILE.dot")]
        dot: Option<PathBuf>,
    },
    /// Compare the quantization boundaries (DQ-fed consumer inputs) of two models.
    Placement {
        a: PathBuf,
        b: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Print op counts, Q/DQ counts and the QDQ groups with their quantization parameters.
    Inspect {
        input: PathBuf,
        #[arg(long)]
        json: bool,
        /// Also write the graph as Graphviz, QDQ groups boxed (`dot -Tsvg`).
        #[arg(long, value_name = "FILE.dot")]
        dot: Option<PathBuf>,
    },
    /// Print the ISA profile whose kernels ONNX Runtime runs on this machine (`--ort-isa host`).
    Host,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum TargetArg {
    Onnx,
    Rust,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum WeightsArg {
    Auto,
    Embed,
    File,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ContractArg {
    Exact,
    Real,
}

impl From<ContractArg> for Contract {
    fn from(c: ContractArg) -> Contract {
        match c {
            ContractArg::Exact => Contract::Exact,
            ContractArg::Real => Contract::Real,
        }
    }
}

fn parse_target(s: &str) -> Result<OrtTarget, String> {
    OrtTarget::parse(s)
}

/// Checks one `--allow NAME[=VALUE]` as it is parsed (the names are read again by [`crate::allow`]).
fn parse_allow(s: &str) -> Result<String, String> {
    crate::allow_one(&mut Allow::default(), s).map(|()| s.to_string())
}

fn run(command: Command, watched: bool) -> Result<(), Error> {
    match command {
        Command::Compile {
            input,
            output,
            target,
            no_fuse,
            report,
            explain,
            contract,
            ort_isa,
            keep_int8_activations,
            fold_weights,
            allow,
            inputs,
            timings,
            weights,
        } => {
            let mut lossy = crate::allow(&allow).map_err(|e| Error::bad_input(&input, e))?;
            if let Some(path) = inputs {
                lossy.inputs = crate::read_inputs(&path)?;
            }
            if matches!(target, TargetArg::Onnx) && !matches!(weights, WeightsArg::Auto) {
                return Err(Error::bad_input(&input, "--weights applies to --target rust; the ONNX target writes the model's own weights"));
            }
            let target: Target = match (target, ort_isa) {
                (TargetArg::Rust, Some(_)) => {
                    return Err(Error::bad_input(&input, "--ort-isa applies to --target onnx; the Rust target gives the same bits on every ISA"));
                }
                (TargetArg::Rust, None) => RustTarget::generic().into(),
                (TargetArg::Onnx, ort) => {
                    let ort = ort.unwrap_or_default();
                    warn_if_not_host(&ort);
                    ort.into()
                }
            };
            let bar = watched.then(|| std::sync::Arc::new(watch::Bar::new()));
            let options = CompileOptions {
                fuse: !no_fuse,
                contract: contract.into(),
                target,
                resign: !keep_int8_activations,
                fold_weights,
                allow: lossy,
                timings,
                progress: crate::Observer(bar.clone().map(|b| b as std::sync::Arc<dyn crate::Progress>)),
                rust_weights: match weights {
                    WeightsArg::Auto => crate::RustWeights::Auto,
                    WeightsArg::Embed => crate::RustWeights::Embedded,
                    WeightsArg::File => crate::RustWeights::File,
                },
                ..CompileOptions::default()
            };
            let started = std::time::Instant::now();
            // The bar is cleared before anything else is printed, the summary printed last.
            let done = |result: Result<CompileReport, Error>| {
                if let Some(b) = &bar {
                    b.finish();
                }
                result
            };
            let summary = |r: &CompileReport| {
                if watched {
                    eprint!("{}", watch::summary(r, started.elapsed().as_secs_f64()));
                }
            };
            if let Target::Rust(_) = options.target {
                let result = done(crate::compile_rust(&input, &output, report.as_deref(), &options))?;
                if explain {
                    print!("{}", result.explain());
                }
                println!(
                    "qdqc: wrote the Rust crate {} ({} group(s) fused, {} refused); contract {:?}; build it with `cargo build --release` there",
                    output.display(),
                    result.fused,
                    result.decisions.iter().filter(|d| !d.fired).count(),
                    result.contract
                );
                summary(&result);
                return Ok(());
            }
            let result = done(crate::compile_with_report(&input, &output, report.as_deref(), &options))?;
            for w in &result.warnings {
                eprintln!("qdqc: warning: {}: {w}", input.display());
            }
            if explain {
                print!("{}", result.explain());
            }
            let lossy = result.decisions.iter().filter(|d| d.lossy.is_some()).count();
            let lossy = if lossy > 0 { format!(" ({lossy} lossy, allowed by --allow: deviations in the report)") } else { String::new() };
            let kept = result.decisions.iter().filter(|d| d.kept_unfused).count();
            let kept = if kept > 0 { format!(", {kept} proven but kept unfused (slower in ORT)") } else { String::new() };
            println!(
                "qdqc: wrote {} ({} → {} nodes, {} group(s) fused{lossy}{kept}, {} refused, {} int8 activation(s) re-signed; {} → {} bytes); contract {:?}{}; guarantee holds in ONNX Runtime under {}",
                output.display(),
                result.nodes_before,
                result.nodes_after,
                result.fused,
                result.decisions.iter().filter(|d| !d.fired).count(),
                result.resigned.len(),
                result.model_size.before_bytes,
                result.model_size.after_bytes,
                result.contract,
                match (result.decisions.iter().any(|d| d.lossy.is_some()), result.session_profile.lossy.is_some()) {
                    (_, true) => " for quantized groups, float ops lossy (--allow ort-float-fusions)",
                    (true, false) => " except the lossy instances",
                    (false, false) => "",
                },
                result.session_profile.describe()
            );
            summary(&result);
        }
        Command::Audit { input, json, ort_isa, contract, dot } => {
            warn_if_not_host(&ort_isa);
            check_writable(&input, dot.as_deref())?;
            let contracts = match contract {
                Some(c) => vec![c.into()],
                None => vec![Contract::Exact, Contract::Real],
            };
            let audit = crate::audit(&input, &ort_isa, &contracts)?;
            for w in &audit.warnings {
                eprintln!("qdqc: warning: {}: {w}", input.display());
            }
            if let Some(path) = &dot {
                crate::write_atomically(path, crate::audit_dot(&input, &audit)?.as_bytes())?;
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&audit).expect("audit serializes"));
            } else {
                print!("{}", crate::audit_text(&audit));
            }
        }
        Command::Placement { a, b, json } => {
            let p = crate::placement(&a, &b)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&p).expect("placement serializes"));
            } else {
                print!("{}", p.text());
            }
        }
        Command::Inspect { input, json, dot } => {
            check_writable(&input, dot.as_deref())?;
            let inspection = crate::inspect(&input)?;
            if let Some(path) = &dot {
                crate::write_atomically(path, crate::inspect_dot(&input, &inspection)?.as_bytes())?;
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&inspection).expect("inspection serializes"));
            } else {
                print!("{}", inspection.text());
            }
        }
        Command::Host => println!("{}", Isa::host().map_err(|e| Error::compile(std::path::Path::new("<host>"), e))?),
    }
    Ok(())
}

/// One line on stderr when the selected profiles leave out the one ONNX Runtime runs here: the
/// compiled model keeps its guarantee on the machines it was compiled for, not on this one.
fn warn_if_not_host(target: &OrtTarget) {
    match Isa::host() {
        Ok(host) if !target.profiles().contains(&host) => {
            let names: Vec<&str> = target.profiles().iter().map(|i| i.name()).collect();
            eprintln!("qdqc: warning: proving for {} only; ONNX Runtime on this host runs {host} kernels, where the guarantee does not hold", names.join(","));
        }
        Ok(_) => {}
        Err(e) => eprintln!("qdqc: warning: {e}"),
    }
}

/// Before any work: `--dot` must not name the input model, and its folder must take a new file.
fn check_writable(input: &std::path::Path, dot: Option<&std::path::Path>) -> Result<(), Error> {
    let Some(dot) = dot else { return Ok(()) };
    qdqc_lang::outputs::check_distinct(&[("the input model", input.to_path_buf())], &[("--dot", dot.to_path_buf())])?;
    qdqc_lang::outputs::Outputs::check_writable(dot)
}
