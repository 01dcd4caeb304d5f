//! The `qdqc` binary: the command line of `qdqc::cli`, with an allocator that turns out-of-memory
//! into an error and a signal handler that removes staged outputs.

use std::process::ExitCode;

mod oom;

#[global_allocator]
static ALLOCATOR: oom::ExitOnOom = oom::ExitOnOom;

fn main() -> ExitCode {
    // SIGINT/SIGTERM: the outputs staged so far are removed; nothing was renamed into place.
    if let Err(e) = ctrlc::set_handler(|| qdqc::remove_pending_then_exit(130)) {
        eprintln!("qdqc: warning: no signal handler ({e}): an interrupted compile may leave .qdqc-*.tmp files, which the next run removes");
    }
    ExitCode::from(qdqc::cli::main(std::env::args_os()).clamp(0, 255) as u8)
}
