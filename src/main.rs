//! The `qdqc` command line. Exit codes: 0 success, 1 compilation failed, 2 bad input or usage.

use clap::{Parser, Subcommand};
use qdqc::{CompileOptions, Error, ErrorKind};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "qdqc", version, about = "Proof-gated fusion compiler for quantized (QDQ) ONNX models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile a QDQ model: lift it into e-graphs, apply proven rewrites, write ONNX.
    Compile {
        input: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        /// Lift and extract only: no rewrite runs.
        #[arg(long)]
        no_fuse: bool,
        /// Write a JSON report of every QDQ group and what became of it.
        #[arg(long, value_name = "REPORT.json")]
        report: Option<PathBuf>,
    },
    /// Print op counts, Q/DQ counts and the QDQ groups with their quantization parameters.
    Inspect {
        input: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qdqc: error: {e}");
            ExitCode::from(match e.kind {
                ErrorKind::BadInput => 2,
                ErrorKind::Compile | ErrorKind::Io => 1,
            })
        }
    }
}

fn run(command: Command) -> Result<(), Error> {
    match command {
        Command::Compile { input, output, no_fuse, report } => {
            let options = CompileOptions { fuse: !no_fuse, ..CompileOptions::default() };
            let result = qdqc::compile(&input, &output, &options)?;
            if let Some(path) = report {
                let json = serde_json::to_string_pretty(&result).expect("report serializes");
                qdqc::write_atomically(&path, json.as_bytes())?;
            }
            println!(
                "qdqc: wrote {} ({} → {} nodes, {} regions); contract exact; guarantee holds in ONNX Runtime under {}",
                output.display(),
                result.nodes_before,
                result.nodes_after,
                result.stats.regions,
                result.session_profile.describe()
            );
        }
        Command::Inspect { input, json } => {
            let inspection = qdqc::inspect(&input)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&inspection).expect("inspection serializes"));
            } else {
                print!("{}", inspection.text());
            }
        }
    }
    Ok(())
}
