//! `qdqc inspect --json` (and the compile report's `undecided` groups, which share its group
//! form) lists at most `LISTED` scales and zero points per group end and gives the full count:
//! an LLM's blocked embedding has millions, and the report must not carry them all.

mod common;

use common::*;

/// `src/inspect.rs`'s LISTED.
const LISTED: usize = 64;

#[test]
fn long_parameter_lists_are_cut_and_counted() {
    let n = 100usize;
    let w: Vec<u8> = (0..n * 4).map(|i| (i % 251) as u8).collect();
    let scales: Vec<f32> = (0..n).map(|i| 0.01 + i as f32 * 1e-4).collect();
    let zps: Vec<u8> = (0..n).map(|i| (i % 7) as u8).collect();
    let mut dq = node("DequantizeLinear", "DQ_w", &["w", "s_w", "z_w"], &["dq_w"]);
    dq.attribute.push(qdqc_lang::attr::Attribute { name: "axis".into(), value: qdqc_lang::attr::AttrValue::Int(0) }.to_proto());
    let dq = vec![dq, node("MatMul", "MatMul", &["x", "dq_w"], &["y"])];
    let inits = vec![u8s("w", &[n as i64, 4], &w), f32s("s_w", &[n as i64], &scales), u8s("z_w", &[n as i64], &zps)];
    let m = model(graph("g", dq, vec![value("x", F32, &[1, n as i64])], vec![value("y", F32, &[1, 4])], inits), 21);
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(dir.path(), "m.onnx", &m);
    let out = qdqc(&["inspect", path.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let end = &json["groups"][0]["inputs"].as_array().unwrap().iter().find(|e| e["tensor"] == "w").cloned().unwrap();
    assert_eq!(end["scale"].as_array().unwrap().len(), LISTED);
    assert_eq!(end["scale_bits"].as_array().unwrap().len(), LISTED);
    assert_eq!(end["zero_point"].as_array().unwrap().len(), LISTED);
    assert_eq!(end["parameters"], n);
    assert_eq!(end["scale"][1].as_f64().unwrap() as f32, scales[1]);
}
