//! A deterministic fuzzer over load → lift → extract → save (issue 10, "a fuzz target"): seeded
//! mutants of the shipped models (byte flips, and structural edits of the decoded protobuf) go
//! through `qdqc::inspect`, `qdqc::audit` and `qdqc::compile` in process. An `Err` is fine (a bad
//! model is refused); a panic or a case running past its time bound is a failure, reported with
//! its seed and written to `target/fuzz-failures/` for reproduction.
//!
//! Budget: `QDQC_FUZZ_CASES` mutants (default 1500, the CI run: under a minute in debug), or as many as fit in
//! `QDQC_FUZZ_SECONDS` when that is set (the long run); `QDQC_FUZZ_SEED` offsets the seeds.

mod common;

use common::*;
use prost::Message;
use qdqc_lang::onnx::{AttributeProto, ModelProto, StringStringEntryProto, TensorProto, attribute_proto::AttributeType, tensor_proto::DataLocation};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A case slower than this hangs (debug build, a few groups per model).
const CASE_BOUND: Duration = Duration::from_secs(60);

/// The shared xorshift64* (`common::Rng`): the same seed gives the same mutant everywhere.
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }

    /// A value a hostile model would pick: small, boundary or huge.
    fn nasty(&mut self) -> i64 {
        const EDGES: [i64; 12] = [0, 1, -1, 2, 3, 7, 255, 256, -129, i32::MAX as i64, i64::MAX, i64::MIN];
        if self.below(2) == 0 { EDGES[self.below(EDGES.len())] } else { (self.next() % 64) as i64 - 8 }
    }
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut models = Vec::new();
    for dir in ["tests/cases", "examples/models"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files.into_iter().filter(|f| f.extension().is_some_and(|e| e == "onnx")) {
            models.push((f.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&f).unwrap()));
        }
    }
    models.push(("qdq_conv (generated)".into(), qdq_conv().encode_to_vec()));
    assert!(models.len() >= 4, "the fuzz corpus lost its models: {models:?}", models = models.iter().map(|m| &m.0).collect::<Vec<_>>());
    models
}

/// Every graph of the model, nested ones included.
fn graphs(m: &mut ModelProto) -> Vec<&mut qdqc_lang::onnx::GraphProto> {
    fn walk(g: &mut qdqc_lang::onnx::GraphProto, out: &mut Vec<*mut qdqc_lang::onnx::GraphProto>) {
        out.push(g as *mut _);
        for n in &mut g.node {
            for a in &mut n.attribute {
                if let Some(sub) = a.g.as_mut() {
                    walk(sub, out);
                }
                for sub in &mut a.graphs {
                    walk(sub, out);
                }
            }
        }
    }
    let mut ptrs = Vec::new();
    if let Some(g) = m.graph.as_mut() {
        walk(g, &mut ptrs);
    }
    // SAFETY: the pointers are to distinct graphs (each nested in the one before it, never
    // aliased), and only one is used at a time by the caller.
    ptrs.into_iter().map(|p| unsafe { &mut *p }).collect()
}

/// One structural edit; returns what it did.
fn edit(m: &mut ModelProto, rng: &mut Rng) -> String {
    let kind = rng.below(12);
    let mut gs = graphs(m);
    if gs.is_empty() {
        return "no graph".into();
    }
    let gi = rng.below(gs.len());
    let g = &mut *gs[gi];
    let nodes = g.node.len();
    match kind {
        0 if nodes > 0 => {
            let n = &mut g.node[rng.below(nodes)];
            if !n.input.is_empty() {
                let i = rng.below(n.input.len());
                n.input.remove(i);
            }
            format!("graph {gi}: deleted a node input")
        }
        1 if nodes > 1 => {
            let (a, b) = (rng.below(nodes), rng.below(nodes));
            if let Some(o) = g.node[a].output.first().cloned() {
                g.node[b].output.push(o);
            }
            format!("graph {gi}: duplicated output of node {a} on node {b}")
        }
        2 if !g.initializer.is_empty() => {
            let t = rng.below(g.initializer.len());
            let v = rng.nasty();
            let dims = &mut g.initializer[t].dims;
            if dims.is_empty() || rng.below(4) == 0 {
                dims.push(v);
            } else {
                let d = rng.below(dims.len());
                dims[d] = v;
            }
            format!("graph {gi}: initializer {t} dims now {dims:?}")
        }
        3 if !g.initializer.is_empty() => {
            let t = rng.below(g.initializer.len());
            let dt = rng.below(26) as i32;
            g.initializer[t].data_type = Some(dt);
            format!("graph {gi}: initializer {t} data type {dt}")
        }
        4 if nodes > 0 => {
            let n = &mut g.node[rng.below(nodes)];
            let v = rng.nasty();
            if let Some(a) = n.attribute.first_mut() {
                a.i = Some(v);
                a.ints = vec![v, rng.nasty()];
                a.f = Some(f32::from_bits(rng.next() as u32));
            } else {
                for name in ["axis", "block_size", "group", "output_dtype", "saturate"] {
                    n.attribute.push(AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Int as i32), i: Some(v), ..Default::default() });
                }
            }
            format!("graph {gi}: attributes of a node set to {v}")
        }
        5 if nodes > 0 => {
            // Nest: the node gains a graph attribute holding a copy of this graph.
            let copy = g.clone();
            let n = rng.below(nodes);
            g.node[n].attribute.push(AttributeProto {
                name: Some("body".into()),
                r#type: Some(AttributeType::Graph as i32),
                g: Some(copy),
                ..Default::default()
            });
            format!("graph {gi}: node {n} gained a nested copy of its graph")
        }
        6 if !g.initializer.is_empty() => {
            let t = rng.below(g.initializer.len());
            let location = ["missing.bin", "../escape.bin", "/etc/passwd", "", "."][rng.below(5)];
            let entry = |k: &str, v: String| StringStringEntryProto { key: Some(k.into()), value: Some(v) };
            let tensor: &mut TensorProto = &mut g.initializer[t];
            tensor.data_location = Some(DataLocation::External as i32);
            tensor.external_data = vec![entry("location", location.into()), entry("offset", rng.nasty().to_string()), entry("length", rng.nasty().to_string())];
            format!("graph {gi}: initializer {t} external at {location:?}")
        }
        7 if nodes > 0 => {
            let n = rng.below(nodes);
            let ops = ["QuantizeLinear", "DequantizeLinear", "Conv", "MatMul", "Gemm", "Add", "If", "Loop", "Gather", "Reshape", "Concat", "Softmax"];
            let op = ops[rng.below(ops.len())];
            g.node[n].op_type = Some(op.into());
            format!("graph {gi}: node {n} is now {op}")
        }
        8 if nodes > 0 => {
            let n = rng.below(nodes);
            let removed = g.node.remove(n);
            format!("graph {gi}: removed node {n} ({:?})", removed.op_type)
        }
        9 if nodes > 1 => {
            let (a, b) = (rng.below(nodes), rng.below(nodes));
            g.node.swap(a, b);
            format!("graph {gi}: swapped nodes {a} and {b}")
        }
        10 if !g.initializer.is_empty() => {
            let t = rng.below(g.initializer.len());
            let tensor = &mut g.initializer[t];
            match tensor.raw_data.as_ref().map(|r| r.to_vec()) {
                Some(mut raw) if !raw.is_empty() => {
                    let keep = rng.below(raw.len() + 2);
                    raw.resize(keep, 0x80);
                    tensor.raw_data = Some(raw.into());
                }
                _ => tensor.int32_data.push(rng.nasty() as i32),
            }
            format!("graph {gi}: initializer {t} payload resized")
        }
        _ => {
            let opset = rng.nasty();
            if let Some(o) = m.opset_import.first_mut() {
                o.version = Some(opset);
            }
            format!("opset {opset}")
        }
    }
}

/// Mutant `seed` of one corpus model: byte flips on the encoding, or 1–3 structural edits.
fn mutant(models: &[(String, Vec<u8>)], seed: u64) -> (String, Vec<u8>) {
    let mut rng = Rng::new(seed);
    let (name, bytes) = &models[rng.below(models.len())];
    if rng.below(3) == 0 {
        let mut b = bytes.clone();
        let flips = 1 + rng.below(8);
        for _ in 0..flips {
            let i = rng.below(b.len());
            b[i] ^= 1 << rng.below(8);
        }
        return (format!("{name}: {flips} byte flip(s)"), b);
    }
    let mut m = ModelProto::decode(&bytes[..]).expect("corpus models decode");
    let what: Vec<String> = (0..1 + rng.below(3)).map(|_| edit(&mut m, &mut rng)).collect();
    (format!("{name}: {}", what.join("; ")), m.encode_to_vec())
}

/// Runs every command on the mutant at `path`; `Err` with the panic message if one panics.
fn run_case(dir: &Path, path: &Path) -> Result<(), String> {
    let out = dir.join("out.onnx");
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        let _ = qdqc::inspect(path);
        let _ = qdqc::audit(path, &qdqc::OrtTarget::on(&[qdqc::Isa::X86Avx2]).unwrap(), &[qdqc::Contract::Exact]);
        let options = qdqc::CompileOptions {
            target: qdqc::OrtTarget::on(&[qdqc::Isa::X86Avx2, qdqc::Isa::Arm64Neon]).unwrap().into(),
            ..qdqc::CompileOptions::default()
        };
        let _ = qdqc::compile_with_report(path, &out, Some(&dir.join("report.json")), &options);
    }))
    .map_err(|p| p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default())
}

#[test]
fn mutants_never_panic_or_hang() {
    let models = corpus();
    let cases: u64 = std::env::var("QDQC_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1500);
    let seconds: Option<u64> = std::env::var("QDQC_FUZZ_SECONDS").ok().and_then(|v| v.parse().ok());
    let first: u64 = std::env::var("QDQC_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let start = Instant::now();
    let failures_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
    // A case's panic is caught and reported below (the default hook would print each one's
    // backtrace); a panic of the harness itself, on this test's thread, is still printed.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        if std::thread::current().name().is_some_and(|n| n.contains("mutants_never_panic_or_hang")) {
            eprintln!("fuzz harness: {info}");
        }
    }));
    let (mut run, mut refused, mut failures) = (0u64, 0u64, Vec::new());
    for seed in first.. {
        let done = match seconds {
            Some(s) => start.elapsed() >= Duration::from_secs(s),
            None => seed - first >= cases,
        };
        if done {
            break;
        }
        let (what, bytes) = mutant(&models, seed);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mutant.onnx");
        std::fs::write(&path, &bytes).unwrap();
        refused += u64::from(qdqc::Model::load(&path).is_err());
        let (tx, rx) = mpsc::channel();
        let case_dir = dir.path().to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(run_case(&case_dir, &case_dir.join("mutant.onnx")));
        });
        let failure = match rx.recv_timeout(CASE_BOUND) {
            Ok(Ok(())) => None,
            Ok(Err(panic)) => Some(format!("panic: {panic}")),
            Err(_) => Some(format!("no answer within {CASE_BOUND:?} (hang)")),
        };
        run += 1;
        if let Some(f) = failure {
            std::fs::create_dir_all(&failures_dir).unwrap();
            std::fs::write(failures_dir.join(format!("seed-{seed}.onnx")), &bytes).unwrap();
            failures.push(format!("seed {seed} ({what}): {f}"));
            if failures.len() >= 20 {
                break;
            }
        }
    }
    std::panic::set_hook(hook);
    eprintln!("fuzz: {run} mutants in {:.1} s, {refused} refused at load, {} failure(s)", start.elapsed().as_secs_f64(), failures.len());
    assert!(run > 0 && refused < run, "the fuzzer ran {run} mutants, {refused} refused at load: it exercises nothing past loading");
    assert!(failures.is_empty(), "{} mutant(s) panicked or hung (written to target/fuzz-failures/):\n{}", failures.len(), failures.join("\n"));
}
