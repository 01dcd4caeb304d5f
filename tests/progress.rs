//! A long compile shows its progress and a summary on a terminal (stderr a pseudo-terminal here),
//! prints nothing extra when stderr is piped, and nothing extra under `--quiet`.

mod common;

use common::*;
use std::io::Read;
use std::os::fd::FromRawFd;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// A chain of QDQ Add groups, `blocks` of them: DQ(q_i) + DQ(c) → Add → Q → q_{i+1}; every
/// group is a proof, and the chain is cut into many regions.
fn chain(blocks: usize) -> qdqc_lang::onnx::ModelProto {
    let mut nodes = vec![node("QuantizeLinear", "Q_in", &["x", "s", "z"], &["q0"])];
    let inits = vec![f32s("s", &[], &[0.25]), u8s("z", &[], &[128]), u8s("c", &[8], &[1, 2, 3, 4, 5, 6, 7, 8])];
    for i in 0..blocks {
        let q = |j: usize| format!("q{j}");
        nodes.push(node("DequantizeLinear", &format!("DQ{i}"), &[&q(i), "s", "z"], &[&format!("d{i}")]));
        nodes.push(node("DequantizeLinear", &format!("DQc{i}"), &["c", "s", "z"], &[&format!("k{i}")]));
        nodes.push(node("Add", &format!("Add{i}"), &[&format!("d{i}"), &format!("k{i}")], &[&format!("a{i}")]));
        nodes.push(node("QuantizeLinear", &format!("Q{i}"), &[&format!("a{i}"), "s", "z"], &[&q(i + 1)]));
    }
    nodes.push(node("DequantizeLinear", "DQ_out", &[&format!("q{blocks}"), "s", "z"], &["y"]));
    model(graph("chain", nodes, vec![value("x", F32, &[8])], vec![value("y", F32, &[8])], inits), 21)
}

/// Runs qdqc with stderr on a pseudo-terminal (80 columns) and returns (status, stdout, the
/// bytes written to the terminal).
fn on_terminal(args: &[String]) -> (std::process::ExitStatus, Vec<u8>, String) {
    let (mut master, mut slave) = (0, 0);
    let size = libc::winsize { ws_row: 40, ws_col: 80, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: openpty writes two descriptors into the given integers; the other pointers may be null.
    let rc = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
    assert_eq!(rc, 0, "openpty failed");
    // SAFETY: both descriptors were just opened by openpty and are owned here alone.
    let (master, slave) = unsafe { (std::fs::File::from_raw_fd(master), std::fs::File::from_raw_fd(slave)) };
    let mut child = Command::new(env!("CARGO_BIN_EXE_qdqc")).args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(slave)).spawn().unwrap();
    // The terminal is read while the child runs (a full pty buffer would block it).
    let reader = std::thread::spawn(move || {
        let mut master = master;
        let mut bytes = Vec::new();
        let mut buf = [0u8; 4096];
        // EIO once the child closed the slave: the end of the terminal's output.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    });
    let mut stdout = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
    let status = child.wait().unwrap();
    (status, stdout, reader.join().unwrap())
}

fn piped(args: &[String]) -> Output {
    qdqc(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn a_long_compile_shows_progress_on_a_terminal_and_nothing_extra_when_piped() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "chain.onnx", &chain(1500));
    let out = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let args = |o: &str| vec!["compile".to_string(), input.to_str().unwrap().to_string(), "-o".into(), o.to_string()];

    let a = args(&out("tty.onnx"));
    let started = std::time::Instant::now();
    let (status, stdout, terminal) = on_terminal(&a);
    let took = started.elapsed();
    assert!(status.success(), "{terminal}");
    // The bar: its stage, a node count of the whole model and the proofs so far.
    assert!(terminal.contains("qdqc: proving"), "no progress bar on the terminal: {terminal:?}");
    assert!(terminal.contains("/6002 nodes"), "the bar counts the model's nodes: {terminal:?}");
    assert!(terminal.contains("proof(s))"), "{terminal:?}");
    // The summary, after the bar is cleared.
    assert!(terminal.contains("fused op") && terminal.contains("QLinearAdd") && terminal.contains("verdicts (per profile)"), "{terminal:?}");
    assert!(terminal.contains("6002 → "), "{terminal:?}");

    let piped_run = piped(&args(&out("pipe.onnx")));
    assert!(piped_run.status.success(), "{}", stderr(&piped_run));
    assert!(piped_run.stderr.is_empty(), "piped: nothing on stderr: {}", stderr(&piped_run));
    // stdout is the same one line either way.
    let line = |b: &[u8]| String::from_utf8_lossy(b).replace(&out("tty.onnx"), "OUT").replace(&out("pipe.onnx"), "OUT");
    assert_eq!(line(&stdout), line(&piped_run.stdout));
    assert_eq!(std::fs::read(out("tty.onnx")).unwrap(), std::fs::read(out("pipe.onnx")).unwrap(), "the terminal changes no output");

    let mut q = args(&out("quiet.onnx"));
    q.push("--quiet".into());
    let (status, _, terminal) = on_terminal(&q);
    assert!(status.success());
    assert!(terminal.is_empty(), "--quiet: nothing on the terminal: {terminal:?}");
    eprintln!("compile of {} nodes on a terminal: {:.1} s", 6002, took.as_secs_f64());
}

#[test]
fn the_rust_target_shows_its_stages() {
    let dir = tempfile::tempdir().unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/cnn_residual_qdq.onnx");
    let crate_dir = dir.path().join("crate");
    let (status, _, terminal) = on_terminal(&["compile", model.to_str().unwrap(), "--target", "rust", "-o", crate_dir.to_str().unwrap()].map(String::from));
    assert!(status.success(), "{terminal}");
    assert!(terminal.contains("fused op") && terminal.contains("verdicts (per profile)"), "{terminal:?}");
}
