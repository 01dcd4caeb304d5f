//! `qdqc compile` never loses or mixes a user's files: output paths that would overwrite an input
//! or each other are refused before any work (exit 2); a failure (full disk, unwritable report
//! folder, SIGINT, SIGKILL) leaves the previous outputs as they were and no temporary behind (or
//! one the next run removes); two runs writing the same paths never pair one's model with the
//! other's report.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// DQ(w) → y with an int8 weight of `n` codes kept in the external data file `data`.
fn external_model(dir: &Path, name: &str, data: &str, n: usize) -> PathBuf {
    let codes: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(dir.join(data), &codes).unwrap();
    let mut w = i8s("w", &[n as i64], &[]);
    w.raw_data = None;
    w.data_location = Some(1);
    let entry = |k: &str, v: String| qdqc_lang::onnx::StringStringEntryProto { key: Some(k.into()), value: Some(v) };
    w.external_data = vec![entry("location", data.into()), entry("offset", "0".into()), entry("length", n.to_string())];
    let g = graph(
        "ext",
        vec![node("DequantizeLinear", "dq", &["w", "s", "z"], &["y"])],
        vec![],
        vec![value("y", F32, &[n as i64])],
        vec![w, f32s("s", &[], &[0.5]), i8s("z", &[], &[3])],
    );
    write_model(dir, name, &model(g, 21))
}

fn compile(args: &[&Path], extra: &[&str]) -> std::process::Output {
    let mut all: Vec<&str> = vec!["compile"];
    let paths: Vec<String> = args.iter().map(|p| p.to_str().unwrap().to_string()).collect();
    all.push(&paths[0]);
    all.extend(["-o", &paths[1]]);
    if let Some(r) = paths.get(2) {
        all.extend(["--report", r]);
    }
    all.extend(extra);
    qdqc(&all)
}

fn temporaries(dir: &Path) -> Vec<String> {
    listing(dir).into_iter().filter(|n| n.starts_with(".qdqc-")).collect()
}

#[test]
fn output_paths_onto_inputs_or_each_other_exit_2_and_touch_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = external_model(d, "m.onnx", "w.bin", 64);
    // A model whose external data file is what `-o out.onnx` would write as `out.onnx.data`.
    let tricky = external_model(d, "t.onnx", "out.onnx.data", 64);
    let before: Vec<(String, Vec<u8>)> = listing(d).into_iter().map(|n| (n.clone(), std::fs::read(d.join(&n)).unwrap())).collect();
    let cases: [(&Path, PathBuf, Option<PathBuf>, &str); 6] = [
        (&input, input.clone(), None, "-o is the input model"),
        (&input, d.join("w.bin"), None, "-o is an external data file of the input"),
        (&input, d.join("o.onnx"), Some(d.join("o.onnx")), "-o and --report name the same file"),
        (&input, d.join("o.onnx"), Some(input.clone()), "--report is the input model"),
        (&input, d.join("o.onnx"), Some(d.join("w.bin")), "--report is an external data file of the input"),
        (&tricky, d.join("out.onnx"), None, "the output's external data file is an external data file of the input"),
    ];
    for (src, out, report, message) in cases {
        let mut args = vec![src, out.as_path()];
        args.extend(report.as_deref());
        let run = compile(&args, &[]);
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{message}: {err}");
        assert!(err.contains(message) && err.lines().count() == 1, "{message}: {err}");
    }
    let after: Vec<(String, Vec<u8>)> = listing(d).into_iter().map(|n| (n.clone(), std::fs::read(d.join(&n)).unwrap())).collect();
    assert_eq!(before, after, "a refused command changed the folder");
}

#[test]
fn report_into_a_missing_folder_writes_no_model() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "m.onnx", &qdq_conv());
    let out = dir.path().join("out.onnx");
    let run = compile(&[&input, &out, &dir.path().join("missing/r.json")], &[]);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot create a file in folder") && !err.contains(".qdqc-"), "no temporary name in the message: {err}");
    assert_eq!(listing(dir.path()), vec!["m.onnx"]);
}

/// A full disk while writing keeps the previous model, its external data and its report intact.
/// The disk is a 1 MiB tmpfs (the suite runs as root, as CI does).
#[test]
fn a_full_disk_keeps_the_previous_outputs() {
    let src = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"]).arg(mnt.path()).status().expect("run mount");
    assert!(mounted.success(), "mounting a 1 MiB tmpfs failed: this test needs root (CI runs as root)");
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _guard = Unmount(mnt.path());
    let small = external_model(src.path(), "small.onnx", "small.bin", 100_000);
    let large = external_model(src.path(), "large.onnx", "large.bin", 2_000_000);
    let (out, report) = (mnt.path().join("y.onnx"), mnt.path().join("y.json"));
    let first = compile(&[&small, &out, &report], &["--no-fuse"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let previous: Vec<(String, Vec<u8>)> = listing(mnt.path()).into_iter().map(|n| (n.clone(), std::fs::read(mnt.path().join(&n)).unwrap())).collect();
    assert_eq!(previous.len(), 3, "model, data and report: {previous:?}");
    let second = compile(&[&large, &out, &report], &["--no-fuse"]);
    let err = stderr(&second);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device") && err.lines().count() == 1, "{err}");
    let after: Vec<(String, Vec<u8>)> = listing(mnt.path()).into_iter().map(|n| (n.clone(), std::fs::read(mnt.path().join(&n)).unwrap())).collect();
    assert!(previous == after, "the previous outputs changed: {:?}", listing(mnt.path()));
}

/// Starts a compile of `input` (`--no-fuse`) and waits until its first
/// temporary file exists (the write phase); `None` when it finished before one was seen.
/// The caller kills and reaps the child it gets.
#[allow(clippy::zombie_processes)]
fn caught_writing(dir: &Path, input: &Path, out: &Path) -> Option<Child> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_qdqc"))
        .args(["compile", input.to_str().unwrap(), "-o", out.to_str().unwrap(), "--no-fuse"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if !temporaries(dir).is_empty() {
            return Some(child);
        }
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    panic!("no temporary file seen in 60 s");
}

fn signal(child: &Child, sig: &str) {
    let sent = Command::new("kill").args([sig, &child.id().to_string()]).status().unwrap();
    assert!(sent.success(), "kill {sig}");
}

/// Runs `attempt` until a compile is caught in its write phase (the machine may write the data
/// faster than the poll sees it): at most 10 tries, each with a larger model.
fn in_write_phase(mut attempt: impl FnMut(usize) -> bool) {
    for i in 0..10 {
        if attempt((64 + 32 * i) << 20) {
            return;
        }
    }
    panic!("no compile was caught while writing in 10 tries");
}

#[test]
fn sigint_while_writing_leaves_no_temporary_and_no_output() {
    in_write_phase(|bytes| {
        let dir = tempfile::tempdir().unwrap();
        let input = external_model(dir.path(), "m.onnx", "w.bin", bytes);
        let out_dir = tempfile::tempdir().unwrap();
        let Some(mut child) = caught_writing(out_dir.path(), &input, &out_dir.path().join("y.onnx")) else { return false };
        signal(&child, "-INT");
        let status = child.wait().unwrap();
        if status.success() {
            return false; // finished before the signal arrived
        }
        assert_eq!(status.code(), Some(130), "exit code after SIGINT");
        assert_eq!(listing(out_dir.path()), Vec::<String>::new(), "SIGINT left files behind");
        true
    });
}

#[test]
fn sigkill_leaves_a_temporary_that_the_next_run_removes() {
    in_write_phase(|bytes| {
        let dir = tempfile::tempdir().unwrap();
        let input = external_model(dir.path(), "m.onnx", "w.bin", bytes);
        let out_dir = tempfile::tempdir().unwrap();
        let out = out_dir.path().join("y.onnx");
        let Some(mut child) = caught_writing(out_dir.path(), &input, &out) else { return false };
        signal(&child, "-KILL");
        child.wait().unwrap();
        if temporaries(out_dir.path()).is_empty() {
            return false;
        }
        assert!(!out.exists(), "a killed compile renamed its model into place");
        let small = external_model(dir.path(), "s.onnx", "s.bin", 64);
        let next = compile(&[&small, &out], &["--no-fuse"]);
        assert!(next.status.success(), "{}", stderr(&next));
        assert_eq!(temporaries(out_dir.path()), Vec::<String>::new(), "the next run left the stale temporary");
        true
    });
}

/// Two compiles of different models to the same model and report paths, 200 times: the report on
/// disk always describes the model on disk.
#[test]
fn concurrent_runs_never_pair_files_of_two_runs() {
    let dir = tempfile::tempdir().unwrap();
    let a = external_model(dir.path(), "a.onnx", "a.bin", 1000);
    let b = write_model(dir.path(), "b.onnx", &qdq_conv());
    let (out, report) = (dir.path().join("y.onnx"), dir.path().join("y.json"));
    let spawn = |input: &Path| {
        Command::new(env!("CARGO_BIN_EXE_qdqc"))
            .args(["compile", input.to_str().unwrap(), "-o", out.to_str().unwrap(), "--report", report.to_str().unwrap(), "--no-fuse"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    for trial in 0..200 {
        let (ca, cb) = (spawn(&a), spawn(&b));
        for c in [ca, cb] {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "trial {trial}: {}", String::from_utf8_lossy(&o.stderr));
        }
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let model_bytes = std::fs::metadata(&out).unwrap().len();
        assert_eq!(r["model_bytes"].as_u64(), Some(model_bytes), "trial {trial}: the report of {} next to another model", r["input"]);
        assert!(temporaries(dir.path()).is_empty(), "trial {trial}: temporaries left");
    }
}
