//! `qdqc placement`: a model against itself is all SAME; a removed DQ boundary shows as A ONLY,
//! grouped by its producer → consumer pattern.

mod common;

use common::*;
use std::collections::BTreeMap;

fn counts(p: &qdqc::Placement) -> BTreeMap<&str, [usize; 3]> {
    p.patterns.iter().map(|(k, v)| (k.as_str(), *v)).collect()
}

#[test]
fn a_model_against_itself_is_all_same() {
    let dir = tempfile::tempdir().unwrap();
    let m = write_model(dir.path(), "m.onnx", &qdq_conv());
    let p = qdqc::placement(&m, &m).unwrap();
    assert_eq!((p.same.len(), p.a_only.len(), p.b_only.len()), (2, 0, 0), "{}", p.text());
    assert_eq!(counts(&p), BTreeMap::from([("constant → Conv", [1, 0, 0]), ("input → Conv", [1, 0, 0])]));
}

#[test]
fn a_dropped_boundary_is_reported_on_its_side() {
    let dir = tempfile::tempdir().unwrap();
    let a = write_model(dir.path(), "a.onnx", &qdq_conv());
    let mut unquantized = qdq_conv();
    let g = unquantized.graph.as_mut().unwrap();
    g.node.retain(|n| !matches!(n.name.as_deref(), Some("Q_x" | "DQ_x")));
    g.node.iter_mut().find(|n| n.name.as_deref() == Some("Conv")).unwrap().input[0] = "x".into();
    let b = write_model(dir.path(), "b.onnx", &unquantized);

    let p = qdqc::placement(&a, &b).unwrap();
    assert_eq!((p.same.len(), p.a_only.len(), p.b_only.len()), (1, 1, 0), "{}", p.text());
    assert_eq!((p.a_only[0].consumer.as_str(), p.a_only[0].input), ("Conv", 0));
    assert_eq!(counts(&p)["input → Conv"], [0, 1, 0]);
    let swapped = qdqc::placement(&b, &a).unwrap();
    assert_eq!((swapped.a_only.len(), swapped.b_only.len()), (0, 1));

    let run = qdqc(&["placement", a.to_str().unwrap(), b.to_str().unwrap(), "--json"]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let json: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(json["a_only"][0]["consumer"], "Conv");
}
