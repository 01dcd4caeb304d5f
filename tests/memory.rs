//! Memory proportional to the model (issue 10): `inspect`, `audit` and `compile` on a model with
//! a 64 MiB int8 weight in external data each peak at most the model's size plus
//! [`OVERHEAD`] of resident memory (the child's `ru_maxrss` from `wait4`). Before, the weight
//! was widened to i64 (8 bytes a code) and copied again to be written: 4.46 GB for 268 MB.
//! `bench/memory.py` measures the same on 2.5 GB.

mod common;

use common::*;
use prost::Message;
use qdqc_lang::onnx::{StringStringEntryProto, TensorProto, tensor_proto::DataLocation};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const MIB: u64 = 1 << 20;
/// Resident memory a command may use beyond the model's bytes (the documented bound is 512 MiB;
/// this model needs far less, so a regression shows long before the bound is reached).
const OVERHEAD: u64 = 160 * MIB;
const K: usize = 8192;

/// x[1, K] → Q → DQ → MatMul(DQ(W int8 [K, K], per-column scales)) → Q → DQ → y, W in
/// `big.onnx.data`.
fn big_model(dir: &Path) -> (std::path::PathBuf, u64) {
    let data = dir.join("big.onnx.data");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&data).unwrap());
    let row: Vec<u8> = (0..K).map(|j| ((j * 37 % 255) as i64 - 127) as i8 as u8).collect();
    for i in 0..K {
        let mut r = row.clone();
        r.rotate_left(i % K);
        f.write_all(&r).unwrap();
    }
    f.flush().unwrap();
    let entry = |k: &str, v: &str| StringStringEntryProto { key: Some(k.into()), value: Some(v.into()) };
    let w = TensorProto {
        name: Some("w".into()),
        dims: vec![K as i64, K as i64],
        data_type: Some(I8),
        data_location: Some(DataLocation::External as i32),
        external_data: vec![entry("location", "big.onnx.data"), entry("offset", "0"), entry("length", &(K * K).to_string())],
        ..Default::default()
    };
    // axis = 1: one scale per output column.
    let mut dq_columns = node("DequantizeLinear", "DQ_w", &["w", "s_w", "z_w"], &["dq_w"]);
    dq_columns.attribute.push(qdqc_lang::attr::Attribute::int("axis", 1).to_proto());
    let nodes = vec![
        node("QuantizeLinear", "Q_x", &["x", "s_x", "z_x"], &["q_x"]),
        node("DequantizeLinear", "DQ_x", &["q_x", "s_x", "z_x"], &["dq_x"]),
        dq_columns,
        node("MatMul", "MatMul", &["dq_x", "dq_w"], &["m"]),
        node("QuantizeLinear", "Q_y", &["m", "s_y", "z_y"], &["q_y"]),
        node("DequantizeLinear", "DQ_y", &["q_y", "s_y", "z_y"], &["y"]),
    ];
    let scales: Vec<f32> = (0..K).map(|j| 1e-3 + j as f32 * 1e-7).collect();
    let inits = vec![
        f32s("s_x", &[], &[0.02]),
        u8s("z_x", &[], &[128]),
        w,
        f32s("s_w", &[K as i64], &scales),
        i8s("z_w", &[K as i64], &vec![0; K]),
        f32s("s_y", &[], &[0.05]),
        u8s("z_y", &[], &[128]),
    ];
    let m = model(graph("big", nodes, vec![value("x", F32, &[1, K as i64])], vec![value("y", F32, &[1, K as i64])], inits), 21);
    let path = dir.join("big.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    let bytes = std::fs::metadata(&path).unwrap().len() + std::fs::metadata(&data).unwrap().len();
    (path, bytes)
}

/// Exit code, stderr and peak resident bytes of `qdqc args`.
#[allow(clippy::zombie_processes)] // reaped by wait4, which also gives the rusage
fn peak_rss(args: &[&str]) -> (i32, String, u64) {
    let child = Command::new(env!("CARGO_BIN_EXE_qdqc")).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.unwrap(), &mut stderr).unwrap();
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    // SAFETY: `pid` is our child, not yet reaped (the Child handle was consumed without wait).
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4 on qdqc failed");
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) };
    (code, stderr, usage.ru_maxrss as u64 * 1024)
}

#[test]
fn every_command_stays_within_the_model_size_plus_a_constant() {
    let dir = tempfile::tempdir().unwrap();
    let (path, model_bytes) = big_model(dir.path());
    // Widened to i64 the weight alone would take 512 MiB, far over the bound.
    assert!(model_bytes >= 64 * MIB && 8 * model_bytes > model_bytes + OVERHEAD, "the model must be large enough to show widening: {model_bytes} bytes");
    let p = path.to_str().unwrap();
    let out = dir.path().join("out.onnx");
    let runs: [(&str, Vec<&str>); 3] =
        [("inspect", vec!["inspect", p]), ("audit", vec!["audit", p]), ("compile", vec!["compile", p, "-o", out.to_str().unwrap()])];
    for (name, args) in runs {
        let start = std::time::Instant::now();
        let (code, stderr, rss) = peak_rss(&args);
        assert_eq!(code, 0, "{name}: {stderr}");
        assert!(rss <= model_bytes + OVERHEAD, "{name}: peak RSS {} MiB over the model's {} MiB + {} MiB", rss / MIB, model_bytes / MIB, OVERHEAD / MIB);
        eprintln!("{name}: peak RSS {} MiB for a {} MiB model, {:.1} s", rss / MIB, model_bytes / MIB, start.elapsed().as_secs_f64());
    }
    // The compiled model carries the weight over byte for byte.
    assert_eq!(std::fs::read(dir.path().join("out.onnx.data")).unwrap(), std::fs::read(dir.path().join("big.onnx.data")).unwrap());
}

/// A failed allocation is one line and exit 1, with nothing written — never an abort (Rust's
/// default: exit 134). A 2048 x 2048 weight a proof widens (32 MiB) under shrinking `ulimit -v`.
#[test]
fn out_of_memory_is_one_line_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let k = 2048usize;
    let w: Vec<i8> = (0..k * k).map(|i| ((i * 37 % 121) as i64 - 60) as i8).collect();
    let nodes = vec![
        node("QuantizeLinear", "Q_x", &["x", "s_x", "z_x"], &["q_x"]),
        node("DequantizeLinear", "DQ_x", &["q_x", "s_x", "z_x"], &["dq_x"]),
        node("DequantizeLinear", "DQ_w", &["w", "s_w", "z_w"], &["dq_w"]),
        node("MatMul", "MatMul", &["dq_x", "dq_w"], &["m"]),
        node("QuantizeLinear", "Q_y", &["m", "s_y", "z_y"], &["q_y"]),
        node("DequantizeLinear", "DQ_y", &["q_y", "s_y", "z_y"], &["y"]),
    ];
    let inits = vec![
        f32s("s_x", &[], &[0.02]),
        u8s("z_x", &[], &[128]),
        i8s("w", &[k as i64, k as i64], &w),
        f32s("s_w", &[], &[0.001]),
        i8s("z_w", &[], &[0]),
        f32s("s_y", &[], &[0.05]),
        u8s("z_y", &[], &[128]),
    ];
    let m = model(graph("mid", nodes, vec![value("x", F32, &[1, k as i64])], vec![value("y", F32, &[1, k as i64])], inits), 21);
    let input = write_model(dir.path(), "mid.onnx", &m);
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("out.onnx");
    let mut refused = 0;
    for mib in [48, 64, 96, 128] {
        let script = format!("ulimit -v {}; exec \"$0\" compile \"$1\" -o \"$2\"", mib * 1024);
        let run = Command::new("bash").args(["-c", &script, env!("CARGO_BIN_EXE_qdqc"), input.to_str().unwrap(), out.to_str().unwrap()]).output().unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        match run.status.code() {
            Some(0) => {}
            Some(1) => {
                assert!(stderr.lines().count() == 1 && stderr.starts_with("qdqc: error: out of memory: "), "{mib} MiB: {stderr}");
                assert!(listing(out_dir.path()).is_empty(), "{mib} MiB: a failed compile left {:?}", listing(out_dir.path()));
                refused += 1;
            }
            other => panic!("{mib} MiB: exit {other:?} (a signal is an abort): {stderr}"),
        }
    }
    assert!(refused > 0, "no limit made the compile run out of memory: the test no longer exercises the allocator");
}
