//! Lifting and extracting changes nothing: same bytes, every time, whatever the model's size.
//! (The ONNX Runtime differential run of the same property lives in tests/oracle.)

mod common;

use common::*;
use prost::Message;
use qdqc::CompileOptions;
use qdqc_lang::save::SaveOptions;
use qdqc_lang::{Model, canon};
use std::path::{Path, PathBuf};

fn compile(input: &Path, output: &Path) -> qdqc::CompileReport {
    qdqc::compile(input, output, &CompileOptions { fuse: false, ..CompileOptions::default() }).unwrap()
}

fn shipped() -> Vec<PathBuf> {
    ["tests/cases/seed_synthetic_shared_q.onnx", "tests/cases/seed_if_outer_scope.onnx", "examples/models/cnn_residual_qdq.onnx"]
        .iter()
        .map(PathBuf::from)
        .collect()
}

#[test]
fn shipped_models_round_trip_byte_for_byte_and_idempotently() {
    let dir = tempfile::tempdir().unwrap();
    for input in shipped() {
        let (a, b, c) = (dir.path().join("a.onnx"), dir.path().join("b.onnx"), dir.path().join("c.onnx"));
        compile(&input, &a);
        compile(&input, &b);
        compile(&a, &c);
        let bytes = |p: &Path| std::fs::read(p).unwrap();
        assert_eq!(bytes(&a), bytes(&b), "{}: two compiles differ", input.display());
        assert_eq!(bytes(&a), bytes(&c), "{}: compiling the output changed it", input.display());
        // These inputs were written by onnx's C++ protobuf; prost re-encodes them identically.
        assert_eq!(bytes(&a), bytes(&input), "{}: output differs from input", input.display());
    }
}

/// DQ(w: u8[64,64]) → MatMul: a 4 KiB weight, large enough to spill to external data.
fn weight_only_matmul() -> qdqc_lang::onnx::ModelProto {
    let w: Vec<u8> = (0..64 * 64).map(|i| (i * 31 % 251) as u8).collect();
    let nodes = vec![node("DequantizeLinear", "DQ_w", &["w", "s_w", "z_w"], &["dq_w"]), node("MatMul", "MatMul", &["x", "dq_w"], &["y"])];
    let inits = vec![u8s("w", &[64, 64], &w), f32s("s_w", &[], &[0.01]), u8s("z_w", &[], &[7])];
    model(graph("mm", nodes, vec![value("x", F32, &[1, 64])], vec![value("y", F32, &[1, 64])], inits), 21)
}

#[test]
fn models_too_large_for_protobuf_spill_to_external_data_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "m.onnx", &weight_only_matmul());
    let source = Model::load(&input).unwrap();
    // A 1000-byte limit stands in for protobuf's 2 GiB: the same code path, without writing 2 GiB.
    let spilled = dir.path().join("spilled.onnx");
    let mut outputs = qdqc_lang::outputs::Outputs::default();
    let saved = qdqc_lang::save::save(source.proto.clone(), &source, &spilled, &SaveOptions { proto_limit: 1000 }, &mut outputs).unwrap();
    outputs.commit().unwrap();
    assert_eq!(saved.external, Some(("spilled.onnx.data".to_string(), 4096)), "only the 4 KiB weight spills");
    assert!(saved.model_bytes < 1000, "{saved:?}");
    let reloaded = Model::load(&spilled).unwrap();
    assert!(reloaded.has_external_data());
    assert_eq!(canon::model_text(&reloaded), canon::model_text(&source), "same tensors, bit for bit");
}

#[test]
fn external_data_round_trips_deterministically() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "m.onnx", &weight_only_matmul());
    let source = Model::load(&input).unwrap();
    let external = dir.path().join("ext.onnx");
    let mut outputs = qdqc_lang::outputs::Outputs::default();
    qdqc_lang::save::save(source.proto.clone(), &source, &external, &SaveOptions { proto_limit: 1000 }, &mut outputs).unwrap();
    outputs.commit().unwrap();

    // Compile into two folders under the same file name, then compile the output again.
    let (d1, d2, d3) = (dir.path().join("1"), dir.path().join("2"), dir.path().join("3"));
    for d in [&d1, &d2, &d3] {
        std::fs::create_dir(d).unwrap();
    }
    let report = compile(&external, &d1.join("out.onnx"));
    compile(&external, &d2.join("out.onnx"));
    compile(&d1.join("out.onnx"), &d3.join("out.onnx"));
    assert_eq!(report.external_data.as_ref().map(|e| (e.location.as_str(), e.bytes)), Some(("out.onnx.data", 4096)));
    for file in ["out.onnx", "out.onnx.data"] {
        let read = |d: &Path| std::fs::read(d.join(file)).unwrap();
        assert_eq!(read(&d1), read(&d2), "{file}: two compiles differ");
        assert_eq!(read(&d1), read(&d3), "{file}: compiling the output changed it");
    }
    let compiled = Model::load(&d1.join("out.onnx")).unwrap();
    assert_eq!(canon::model_text(&compiled), canon::model_text(&source));
}

/// Chains of Q → DQ → Add(DQ(const)) blocks: 4 nodes each.
fn chain(blocks: usize) -> qdqc_lang::onnx::ModelProto {
    let mut nodes = Vec::new();
    let inits = vec![f32s("s", &[], &[0.25]), u8s("z", &[], &[128]), u8s("c", &[8], &[1, 2, 3, 4, 5, 6, 7, 8])];
    for i in 0..blocks {
        let (x, next) = (format!("x{i}"), format!("x{}", i + 1));
        nodes.push(node("QuantizeLinear", &format!("Q{i}"), &[&x, "s", "z"], &[&format!("q{i}")]));
        nodes.push(node("DequantizeLinear", &format!("DQ{i}"), &[&format!("q{i}"), "s", "z"], &[&format!("d{i}")]));
        nodes.push(node("DequantizeLinear", &format!("DQc{i}"), &["c", "s", "z"], &[&format!("k{i}")]));
        nodes.push(node("Add", &format!("Add{i}"), &[&format!("d{i}"), &format!("k{i}")], &[&next]));
    }
    let out = format!("x{blocks}");
    model(graph("chain", nodes, vec![value("x0", F32, &[8])], vec![value(&out, F32, &[8])], inits), 21)
}

#[test]
fn ten_thousand_nodes_are_windowed_into_small_regions() {
    let dir = tempfile::tempdir().unwrap();
    let m = chain(2500);
    let input = write_model(dir.path(), "big.onnx", &m);
    let out = dir.path().join("out.onnx");
    let report = compile(&input, &out);
    assert_eq!(report.nodes_before, 10_000);
    assert_eq!(report.nodes_after, 10_000);
    assert!(report.stats.largest_region <= qdqc_lower::region::MAX_REGION, "{:?}", report.stats);
    assert!(report.stats.regions >= 10_000 / qdqc_lower::region::MAX_REGION, "{:?}", report.stats);
    assert_eq!(std::fs::read(&out).unwrap(), m.encode_to_vec());
}

/// A DQ in the main graph whose output only an If branch reads: the read is not a term edge,
/// so the DQ must stay a root of its region, not vanish as unreachable.
#[test]
fn values_read_only_by_subgraphs_are_kept() {
    let branch = |name: &str| {
        graph(
            name,
            vec![node("MatMul", &format!("MatMul_{name}"), &["x", "dq_w"], &[&format!("y_{name}")])],
            vec![],
            vec![value(&format!("y_{name}"), F32, &[1, 2])],
            vec![],
        )
    };
    let nodes = vec![
        node("DequantizeLinear", "DQ_w", &["w", "s", "z"], &["dq_w"]),
        with_graph(with_graph(node("If", "If", &["cond"], &["y"]), "then_branch", branch("then")), "else_branch", branch("else")),
    ];
    let inits = vec![u8s("w", &[3, 2], &[1, 2, 3, 4, 5, 6]), f32s("s", &[], &[0.5]), u8s("z", &[], &[1])];
    let m = model(graph("g", nodes, vec![value("cond", BOOL, &[]), value("x", F32, &[1, 3])], vec![value("y", F32, &[1, 2])], inits), 21);
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "m.onnx", &m);
    let out = dir.path().join("out.onnx");
    let report = compile(&input, &out);
    assert_eq!((report.nodes_before, report.nodes_after), (4, 4));
    assert_eq!(std::fs::read(&out).unwrap(), m.encode_to_vec());
}
