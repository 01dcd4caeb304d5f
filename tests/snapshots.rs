//! Snapshots of the canonical text of lifted e-graphs and extracted graphs (no raw e-class ids).

mod common;

use common::*;
use qdqc::CompileOptions;
use qdqc_lang::{Model, canon};
use qdqc_lower::dump::lifted_text;
use std::path::Path;

/// Lifted e-graphs of the input, and the canonical text of the compiled model.
fn lifted_and_extracted(input: &Path) -> (String, String) {
    let lifted = lifted_text(&Model::load(input).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    qdqc::compile(input, &out, &CompileOptions::default()).unwrap();
    (lifted, canon::model_text(&Model::load(&out).unwrap()))
}

fn case(name: &str, m: &qdqc_lang::onnx::ModelProto) {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "in.onnx", m);
    let (lifted, extracted) = lifted_and_extracted(&input);
    insta::assert_snapshot!(format!("{name}_lifted"), lifted);
    insta::assert_snapshot!(format!("{name}_extracted"), extracted);
}

#[test]
fn qdq_conv() {
    case("qdq_conv", &common::qdq_conv());
}

/// Split has two outputs (through `proj`); its second output is read by nobody and must survive.
#[test]
fn multi_output_with_dead_output() {
    let nodes = vec![
        node("DequantizeLinear", "DQ", &["q", "s", "z"], &["x"]),
        with_ints(node("Split", "Split", &["x", "split"], &["a", "b"]), "axis_unused", &[]),
        node("Relu", "Relu", &["a"], &["r"]),
        node("QuantizeLinear", "Q", &["r", "s", "z"], &["y"]),
    ];
    let mut split = nodes;
    split[1].attribute.clear();
    let inits = vec![
        f32s("s", &[], &[0.5]),
        u8s("z", &[], &[3]),
        qdqc_lang::onnx::TensorProto { name: Some("split".into()), dims: vec![2], data_type: Some(7), int64_data: vec![2, 2], ..Default::default() },
    ];
    let m = model(graph("split", split, vec![value("q", U8, &[4])], vec![value("y", U8, &[2])], inits), 21);
    case("split_dead_output", &m);
}

/// An If whose branches dequantize weights of the outer graph (the seed's shape).
#[test]
fn if_reading_outer_scope() {
    let branch = |name: &str| {
        graph(
            name,
            vec![
                node("DequantizeLinear", &format!("DQ_{name}"), &["w_q", "w_s", "w_z"], &[&format!("w_{name}")]),
                node("MatMul", &format!("MatMul_{name}"), &["x", &format!("w_{name}")], &[&format!("y_{name}")]),
            ],
            vec![],
            vec![value(&format!("y_{name}"), F32, &[1, 2])],
            vec![],
        )
    };
    let iff = with_graph(with_graph(node("If", "If", &["cond"], &["y"]), "then_branch", branch("then")), "else_branch", branch("else"));
    let inits = vec![u8s("w_q", &[3, 2], &[1, 2, 3, 4, 5, 6]), f32s("w_s", &[], &[0.02]), u8s("w_z", &[], &[3])];
    let g = graph("g", vec![iff], vec![value("cond", BOOL, &[]), value("x", F32, &[1, 3])], vec![value("y", F32, &[1, 2])], inits);
    case("if_outer_scope", &model(g, 21));
}

#[test]
fn seed_synthetic_shared_q() {
    let (lifted, extracted) = lifted_and_extracted(Path::new("tests/cases/seed_synthetic_shared_q.onnx"));
    insta::assert_snapshot!("seed_synthetic_lifted", lifted);
    insta::assert_snapshot!("seed_synthetic_extracted", extracted);
}
