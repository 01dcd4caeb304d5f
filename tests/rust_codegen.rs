//! `qdqc compile --target rust`: the generated crate builds (offline, no warnings: `-D warnings`),
//! its harness runs on seeded inputs, and its outputs and every quantized intermediate are compared
//! with ONNX Runtime 1.31.1 under ORT_DISABLE_ALL on the original model
//! (`tests/rust_codegen/ort_run.py`, run by the oracle venv: `$QDQC_PYTHON`, default
//! `<repo>/target/venv/bin/python`, made by `bash tests/oracle/setup.sh`). On the pow2 models every
//! tensor must be byte-identical; on the quantize_static example the deviations are printed.
//! Generated crates share one `CARGO_TARGET_DIR` (`target/rust-codegen-build`), so reruns are fast.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh folder for one test under `target/rust-codegen-tests`.
fn work(name: &str) -> PathBuf {
    let dir = repo().join("target/rust-codegen-tests").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn model(name: &str) -> PathBuf {
    let shipped = repo().join("examples/models").join(format!("{name}.onnx"));
    if shipped.exists() { shipped } else { repo().join("tests/rust_codegen/models").join(format!("{name}.onnx")) }
}

fn qdqc(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_qdqc")).args(args).output().unwrap()
}

/// `qdqc compile MODEL --target rust -o OUT`, which must succeed.
fn generate(model: &Path, out: &Path) {
    generate_with(model, out, &[]);
}

fn generate_with(model: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec!["compile".as_ref(), model.as_os_str(), "--target".as_ref(), "rust".as_ref(), "-o".as_ref(), out.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    let o = qdqc(&args);
    assert!(o.status.success(), "qdqc failed on {}: {}", model.display(), String::from_utf8_lossy(&o.stderr));
}

/// Builds the generated crate (warnings are errors); returns the harness and the build time.
fn build(dir: &Path) -> (PathBuf, Duration) {
    let target = repo().join("target/rust-codegen-build");
    let start = Instant::now();
    let o = Command::new(env!("CARGO"))
        .args(["build", "--offline", "--quiet"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", &target)
        .env("RUSTFLAGS", "-D warnings")
        .output()
        .unwrap();
    assert!(o.status.success(), "the generated crate in {} does not build:\n{}", dir.display(), String::from_utf8_lossy(&o.stderr));
    let toml = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let name = toml.lines().find_map(|l| l.strip_prefix("name = \"")).unwrap().trim_end_matches('"');
    (target.join("debug").join(name), start.elapsed())
}

fn python(args: &[&std::ffi::OsStr]) -> String {
    let o = Command::new(common::oracle_python()).arg(repo().join("tests/rust_codegen/ort_run.py")).args(args).output().unwrap();
    assert!(o.status.success(), "ort_run.py failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// One tensor compared: (name, elements, byte-identical elements, max |deviation|).
type Row = (String, u64, u64, f64);

/// Runs ORT and the harness on `seed`'s inputs; one row per tensor both wrote.
fn compare(model: &Path, harness: &Path, dir: &Path, seed: u64) -> Vec<Row> {
    let (inputs, ort, rust) = (dir.join(format!("in{seed}.npz")), dir.join(format!("ort{seed}.npz")), dir.join(format!("rust{seed}.npz")));
    python(&[model.as_os_str(), seed.to_string().as_ref(), inputs.as_os_str(), ort.as_os_str()]);
    let o = Command::new(harness).arg(&inputs).arg(&rust).arg("--intermediates").output().unwrap();
    assert!(o.status.success(), "harness failed: {}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<Row> = python(&["--compare".as_ref(), ort.as_os_str(), rust.as_os_str()])
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            assert!(v.get("error").is_none(), "{}: {}", model.display(), v);
            (v["tensor"].as_str().unwrap().to_string(), v["elements"].as_u64().unwrap(), v["identical"].as_u64().unwrap(), v["max_deviation"].as_f64().unwrap())
        })
        .collect();
    assert!(rows.len() > 1, "{}: ORT and the harness share no tensor", model.display());
    rows
}

#[test]
fn pow2_models_are_byte_identical_to_onnx_runtime() {
    // `_batch_n`: the batch dim is symbolic ('N'); ort_run.py feeds batch 2.
    for name in [
        "cnn_residual_u8u8_pt_pow2",
        "cnn_residual_u8s8_pc_asym_pow2",
        "cnn_residual_s8s8_pc_pow2",
        "cnn_residual_u8u8_pt_pow2_batch_n",
        "dwsep_net_u8u8_pt_pow2",
        "dwsep_net_u8s8_pc_asym_pow2",
        "dwsep_net_s8s8_pc_pow2",
        // Four identical residual blocks: `run_with` runs them as one loop (repeat.rs).
        "resblocks_u8s8_pt_pow2",
    ] {
        let dir = work(name);
        let out = dir.join("crate");
        generate(&model(name), &out);
        let (harness, took) = build(&out);
        let (mut tensors, mut elements) = (0, 0);
        for seed in 0..8 {
            for (tensor, n, same, dev) in compare(&model(name), &harness, &dir, seed) {
                assert_eq!(same, n, "{name} seed {seed}: {tensor}: {same} of {n} elements identical (max deviation {dev})");
                tensors += 1;
                elements += n;
            }
        }
        println!("{name}: {tensors} tensors, {elements} elements byte-identical over 8 seeds; crate built in {:.1} s", took.as_secs_f64());
        // Every kernel path the host has gives the same bytes as the default one.
        for isa in ["portable", "avx2", "avx512vnni", "avx512amx"] {
            let forced = dir.join(format!("rust0_{isa}.npz"));
            let o = Command::new(&harness).arg(dir.join("in0.npz")).arg(&forced).arg("--intermediates").env("QDQC_KERNELS_ISA", isa).output().unwrap();
            if !o.status.success() {
                let err = String::from_utf8_lossy(&o.stderr);
                assert!(err.contains(isa) && isa != "portable", "{name}: {isa}: {err}");
                println!("{name}: path {isa} not on this host");
                continue;
            }
            for l in python(&["--compare".as_ref(), dir.join("rust0.npz").as_os_str(), forced.as_os_str()]).lines() {
                let v: Value = serde_json::from_str(l).unwrap();
                assert_eq!(v["identical"], v["elements"], "{name}: path {isa} differs: {v}");
            }
        }
    }
}

/// The example as compiled (`exact`) and unfused (`--no-fuse`: every op float, on the kernel
/// crate's float kernels).
#[test]
fn quantize_static_example_against_onnx_runtime() {
    quantize_static_example("cnn_residual_qdq", &[]);
    quantize_static_example("cnn_residual_qdq_no_fuse", &["--no-fuse"]);
}

fn quantize_static_example(label: &str, extra: &[&str]) {
    let name = "cnn_residual_qdq";
    let dir = work(label);
    let out = dir.join("crate");
    generate_with(&model(name), &out, extra);
    let (harness, took) = build(&out);
    let mut worst: std::collections::BTreeMap<String, (u64, u64, f64)> = Default::default();
    for seed in 0..8 {
        for (tensor, n, same, dev) in compare(&model(name), &harness, &dir, seed) {
            let w = worst.entry(tensor).or_default();
            *w = (w.0 + n, w.1 + same, w.2.max(dev));
        }
    }
    for (tensor, (n, same, dev)) in &worst {
        println!("{label}: {tensor}: {same}/{n} identical, max deviation {dev}");
        // Float convolutions sum in another order than ONNX Runtime's: at most one code apart.
        assert!(*dev <= 1.0 || tensor == "logits", "{tensor}: deviation {dev}");
    }
    println!("{label}: crate built in {:.1} s", took.as_secs_f64());
}

#[test]
fn generation_is_deterministic_and_snapshotted() {
    let name = "cnn_residual_u8u8_pt_pow2";
    let dir = work("determinism");
    let (a, b) = (dir.join("a"), dir.join("b"));
    generate(&model(name), &a);
    generate(&model(name), &b);
    for file in ["Cargo.toml", "src/lib.rs", "src/runtime.rs", "src/main.rs", "src/weights.bin", "groups.json"] {
        assert_eq!(std::fs::read(a.join(file)).unwrap(), std::fs::read(b.join(file)).unwrap(), "{file} differs between two generations");
    }
    // A killed run's staging folder (a dead pid) is removed by the next run.
    let dead = Command::new("true").spawn().unwrap();
    let pid = dead.id();
    let _ = { dead }.wait();
    let stale = dir.join(format!(".qdqc-{pid}-a.tmp"));
    std::fs::create_dir_all(stale.join("src")).unwrap();
    // Generating again over a generated crate replaces it (the transaction's swap), with a report.
    let report = dir.join("report.json");
    let o = qdqc(&[
        "compile".as_ref(),
        model(name).as_os_str(),
        "--target".as_ref(),
        "rust".as_ref(),
        "-o".as_ref(),
        a.as_os_str(),
        "--report".as_ref(),
        report.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["output"], a.display().to_string());
    assert!(json["decisions"].as_array().is_some_and(|d| d.iter().any(|d| d["fired"] == true)));
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n.to_string_lossy().starts_with(".qdqc-")).collect();
    assert!(leftovers.is_empty(), "temporaries left: {leftovers:?}");
    let lib = std::fs::read_to_string(a.join("src/lib.rs")).unwrap();
    assert!(!lib.contains("unsafe {") && lib.contains("#![forbid(unsafe_code)]"));
    insta::assert_snapshot!("rust_codegen_cnn_residual_u8u8_pt_pow2_lib", lib);
}

/// A model of four identical residual blocks (`tests/rust_codegen/make_resblocks.py`): its
/// generated code runs them as one loop over per-layer tables (`codegen/src/rust/repeat.rs`), the
/// blocks' operands built by one loop too; byte identity with ONNX Runtime is checked with the
/// pow2 models above.
#[test]
fn repeated_blocks_are_one_loop_and_snapshotted() {
    let name = "resblocks_u8s8_pt_pow2";
    let dir = work("repeated_blocks");
    let (a, b) = (dir.join("a"), dir.join("b"));
    generate(&model(name), &a);
    generate(&model(name), &b);
    let lib = std::fs::read_to_string(a.join("src/lib.rs")).unwrap();
    assert_eq!(lib, std::fs::read_to_string(b.join("src/lib.rs")).unwrap(), "lib.rs differs between two generations");
    assert!(lib.contains("Ops 1 to 12 of `run_with`: 4 layers of 3 ops"), "the four blocks are not one loop:\n{lib}");
    assert!(lib.contains("for layer in 0..4 {") && lib.contains("b0: Vec<Layer0>,"));
    // Each layer's own operands, and its real node names in errors and `observe`.
    for k in 0..4 {
        assert!(lib.contains(&format!("\"block{k}_conv2_q/qdqc_QLinearConv\"")) && lib.contains(&format!("\"block{k}_out\"")));
    }
    insta::assert_snapshot!("rust_codegen_resblocks_u8s8_pt_pow2_lib", lib);
}

/// Ops on codes that compute one function of one code tensor run as one lookup
/// (`codegen/src/rust/code_sets.rs`, models by `tests/rust_codegen/make_code_sets.py`): a
/// GELU-like diamond and SiLU + 1 each become one table; a product with a second input does not.
/// Every output is byte-identical, on all 256 codes of `x`, to the same graph with every
/// intermediate also a graph output, where nothing is collapsed.
#[test]
fn code_sets_are_one_lookup_and_byte_identical_on_every_code() {
    let dir = work("code_sets");
    let (one, cut) = (dir.join("one"), dir.join("cut"));
    generate_with(&model("code_sets_u8"), &one, &["--contract", "real"]);
    generate_with(&model("code_sets_u8_cut"), &cut, &["--contract", "real"]);
    // (output, kind, steps) of each group of `groups.json`.
    let groups = |d: &Path| -> Vec<(String, String, usize)> {
        let json: Value = serde_json::from_str(&std::fs::read_to_string(d.join("groups.json")).unwrap()).unwrap();
        let steps = |g: &Value| g["params"]["steps"].as_array().map_or(0, Vec::len);
        json["groups"].as_array().unwrap().iter().map(|g| (g["output"].as_str().unwrap().into(), g["kind"].as_str().unwrap().into(), steps(g))).collect()
    };
    let row = |o: &str, k: &str, n: usize| (o.to_string(), k.to_string(), n);
    // GELU-like: x·½, Tanh, + 1, the product; SiLU's table with its product, then + 1.
    assert_eq!(groups(&one), [row("y_gelu", "code_table", 4), row("y_silu", "code_table", 2), row("y_mulz", "mul", 0)]);
    let lib = std::fs::read_to_string(one.join("src/lib.rs")).unwrap();
    assert_eq!(lib.matches("source_codes()").count(), 2, "{lib}");
    assert!(groups(&cut).iter().all(|(_, k, _)| k != "code_table"), "{:?}", groups(&cut));
    let inputs = dir.join("in.npz");
    let py = |script: &str, args: &[&Path]| {
        let o = Command::new(common::oracle_python()).arg("-c").arg(script).args(args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    py(
        "import sys, numpy as np; np.savez(sys.argv[1], x=np.arange(256, dtype=np.uint8).reshape(1, 256), z=np.random.default_rng(3).integers(0, 256, (1, 256)).astype(np.uint8))",
        &[&inputs],
    );
    let mut outs = Vec::new();
    for d in [&one, &cut] {
        let (harness, _) = build(d);
        let out = d.join("out.npz");
        let o = Command::new(harness).arg(&inputs).arg(&out).output().unwrap();
        assert!(o.status.success(), "harness failed: {}", String::from_utf8_lossy(&o.stderr));
        outs.push(out);
    }
    let differ = py(
        "import sys, numpy as np; a, b = np.load(sys.argv[1]), np.load(sys.argv[2]); print(sorted(k for k in a if a[k].dtype != b[k].dtype or (a[k] != b[k]).any()), len(a))",
        &[&outs[0], &outs[1]],
    );
    assert_eq!(differ.trim(), "[] 3", "outputs that differ, and how many outputs");
}

/// `DequantizeLinear → Softmax → QuantizeLinear` on codes along the last axis becomes one op
/// (`codegen/src/rust/softmax_codes.rs`, models by `tests/rust_codegen/make_softmax_codes.py`),
/// u8 and i8; along another axis it does not. Every code output is byte-identical to the same
/// graph with the f32 intermediates also graph outputs, where nothing is collapsed, on random
/// codes and on rows of one code and of a narrow band (ties for the maximum).
#[test]
fn softmax_on_codes_is_one_op_and_byte_identical_to_the_three() {
    let dir = work("softmax_codes");
    let (one, cut) = (dir.join("one"), dir.join("cut"));
    generate_with(&model("softmax_codes"), &one, &["--contract", "real"]);
    generate_with(&model("softmax_codes_cut"), &cut, &["--contract", "real"]);
    let kinds = |d: &Path| -> Vec<(String, String)> {
        let json: Value = serde_json::from_str(&std::fs::read_to_string(d.join("groups.json")).unwrap()).unwrap();
        json["groups"].as_array().unwrap().iter().map(|g| (g["output"].as_str().unwrap().into(), g["kind"].as_str().unwrap().into())).collect()
    };
    let row = |o: &str, k: &str| (o.to_string(), k.to_string());
    assert_eq!(kinds(&one), [row("y_last", "softmax_codes"), row("y_i8", "softmax_codes"), row("y_axis1", "quantize")]);
    assert!(kinds(&cut).iter().all(|(_, k)| k == "quantize"), "{:?}", kinds(&cut));
    let inputs = dir.join("in.npz");
    let py = |script: &str, args: &[&Path]| {
        let o = Command::new(common::oracle_python()).arg("-c").arg(script).args(args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    py(
        "import sys, numpy as np; r = np.random.default_rng(5); x = r.integers(0, 256, (2, 12, 64)).astype(np.uint8); x[0, 0] = 7; x[0, 1] = 120 + r.integers(0, 3, 64); x8 = r.integers(-128, 128, (2, 12, 64)).astype(np.int8); x8[1, 3] = -128; np.savez(sys.argv[1], x=x, x8=x8)",
        &[&inputs],
    );
    let mut outs = Vec::new();
    for d in [&one, &cut] {
        let (harness, _) = build(d);
        let out = d.join("out.npz");
        let o = Command::new(harness).arg(&inputs).arg(&out).output().unwrap();
        assert!(o.status.success(), "harness failed: {}", String::from_utf8_lossy(&o.stderr));
        outs.push(out);
    }
    let differ = py(
        "import sys, numpy as np; a, b = np.load(sys.argv[1]), np.load(sys.argv[2]); print(sorted(k for k in a if a[k].dtype != b[k].dtype or (a[k] != b[k]).any()), sorted(a), len(np.unique(a['y_last'])) > 8)",
        &[&outs[0], &outs[1]],
    );
    assert_eq!(differ.trim(), "[] ['y_axis1', 'y_i8', 'y_last'] True", "outputs that differ, the outputs, whether y_last holds more than a few codes");
}

#[test]
fn unsupported_ops_are_refused_before_anything_is_written() {
    let dir = work("unsupported");
    let out = dir.join("crate");
    let m = repo().join("tests/rust_codegen/models/lstm_net_u8s8_pc_asym_pow2.onnx");
    let o = qdqc(&["compile".as_ref(), m.as_os_str(), "--target".as_ref(), "rust".as_ref(), "-o".as_ref(), out.as_os_str()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("node 'lstm' (LSTM)") && err.contains("not supported by the Rust target"), "{err}");
    assert!(!out.exists() && std::fs::read_dir(&dir).unwrap().count() == 0, "something was written");
    // An existing folder that is not a generated crate is never replaced.
    let mine = dir.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    let o = qdqc(&["compile".as_ref(), model("cnn_residual_qdq").as_os_str(), "--target".as_ref(), "rust".as_ref(), "-o".as_ref(), mine.as_os_str()]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn the_harness_refuses_inputs_of_the_wrong_shape() {
    let name = "cnn_residual_u8u8_pt_pow2";
    let dir = work("bad_shape");
    let out = dir.join("crate");
    generate(&model(name), &out);
    let (harness, _) = build(&out);
    let inputs = dir.join("in.npz");
    {
        use npyz::WriterBuilder;
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&inputs).unwrap());
        zip.start_file("input.npy", zip::write::SimpleFileOptions::default()).unwrap();
        let mut w = npyz::WriteOptions::new().default_dtype().shape(&[1, 3, 8, 8]).writer(&mut zip).begin_nd().unwrap();
        w.extend(std::iter::repeat_n(0.5f32, 192)).unwrap();
        w.finish().unwrap();
        zip.finish().unwrap();
    }
    let o = Command::new(&harness).arg(&inputs).arg(dir.join("out.npz")).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("input 'input': axis 2 is 8, expected 16"), "{err}");
}

/// `--weights file`: the weights beside the crate, mapped by `Model::new()`, give the bytes the
/// embedded ones give, every quantized intermediate included; a missing weights file and one
/// from another compile are one-line errors naming the file.
#[test]
fn weights_beside_the_crate_give_the_embedded_bytes() {
    let name = "cnn_residual_u8u8_pt_pow2";
    let dir = work("weights_beside");
    let (embedded, beside) = (dir.join("embedded"), dir.join("beside"));
    generate(&model(name), &embedded);
    generate_with(&model(name), &beside, &["--weights", "file"]);
    assert!(beside.join("weights.bin").exists() && !beside.join("src/weights.bin").exists());
    assert!(!std::fs::read_to_string(beside.join("src/lib.rs")).unwrap().contains("include_bytes!"));
    // Both crates have one package name, so one harness path: run each right after its build.
    python(&[model(name).as_os_str(), "0".as_ref(), dir.join("in.npz").as_os_str(), dir.join("ort.npz").as_os_str()]);
    let run = |harness: &Path, out: &str| Command::new(harness).arg(dir.join("in.npz")).arg(dir.join(out)).arg("--intermediates").output().unwrap();
    let (harness, _) = build(&embedded);
    assert!(run(&harness, "embedded.npz").status.success());
    let (harness, _) = build(&beside);
    let o = run(&harness, "beside.npz");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = python(&["--compare".as_ref(), dir.join("embedded.npz").as_os_str(), dir.join("beside.npz").as_os_str()]);
    assert!(rows.lines().count() > 1);
    for l in rows.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["identical"], v["elements"], "{v}");
    }
    // Another model's weights file in its place, then none.
    let other = dir.join("other");
    generate_with(&model("dwsep_net_u8u8_pt_pow2"), &other, &["--weights", "file"]);
    std::fs::copy(other.join("weights.bin"), beside.join("weights.bin")).unwrap();
    let o = run(&harness, "foreign.npz");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("weights.bin") && err.contains("this code was generated with"), "{err}");
    std::fs::remove_file(beside.join("weights.bin")).unwrap();
    let o = run(&harness, "missing.npz");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("weights.bin") && err.trim().lines().count() == 1, "{err}");
}
