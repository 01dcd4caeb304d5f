//! `qdqc audit --dot` and `inspect --dot`: the Graphviz picture of the shipped model boxes every
//! group, coloured by the verdict the same run's `--json` gives (so the test holds on every host
//! profile), labels refused groups with their counterexample or reason, renders with Graphviz's
//! `dot` (Debian's graphviz; tests/run-all.sh installs it), and is byte-identical across runs.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn shipped() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/cnn_residual_qdq.onnx")
}

/// The clusters of a DOT file: (label, fill colour, node ids).
fn clusters(dot: &str) -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    let mut lines = dot.lines();
    while let Some(l) = lines.next() {
        if !l.trim_start().starts_with("subgraph cluster_") {
            continue;
        }
        let head = lines.next().unwrap();
        let label = head.split("label=\"").nth(1).unwrap().split("\"; labeljust").next().unwrap().to_string();
        let fill = head.split("fillcolor=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
        let mut nodes = Vec::new();
        for l in lines.by_ref() {
            if l.trim() == "}" {
                break;
            }
            nodes.push(l.trim().trim_end_matches(';').to_string());
        }
        out.push((label, fill, nodes));
    }
    out
}

fn render_svg(dot: &Path) -> String {
    let out = Command::new("dot")
        .arg("-Tsvg")
        .arg(dot)
        .output()
        .unwrap_or_else(|e| panic!("Graphviz `dot` is needed to render the picture (apt-get install graphviz; tests/run-all.sh does): {e}"));
    assert!(out.status.success(), "dot -Tsvg failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn audit_boxes_every_group_coloured_by_its_verdict_and_renders() {
    let dir = tempfile::tempdir().unwrap();
    let model = shipped();
    let dot_path = dir.path().join("audit.dot");
    let run = |extra: &[&str]| {
        let mut args = vec!["audit", model.to_str().unwrap(), "--ort-isa", "host", "--contract", "exact"];
        args.extend_from_slice(extra);
        let out = qdqc(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    let json: serde_json::Value = serde_json::from_slice(&run(&["--json", "--dot", dot_path.to_str().unwrap()]).stdout).unwrap();
    let dot = std::fs::read_to_string(&dot_path).unwrap();
    let boxes = clusters(&dot);
    let groups = json["groups"].as_array().unwrap();
    assert_eq!(boxes.len(), groups.len(), "one box per group");
    let mut shades = std::collections::BTreeSet::new();
    for g in groups {
        let verdicts: Vec<&str> = g["verdict"].as_object().unwrap().values().map(|v| v.as_str().unwrap()).collect();
        let want = if verdicts.contains(&"refuted") {
            "#fadcdc"
        } else if verdicts.contains(&"unknown") {
            "#fdf0d0"
        } else {
            "#dcf2dc"
        };
        shades.insert(want);
        let head = format!("{} {} ({})", g["rule"].as_str().unwrap(), g["target"].as_str().unwrap(), g["op"].as_str().unwrap());
        let (label, fill, _) = boxes.iter().find(|(l, _, _)| l.starts_with(&head)).unwrap_or_else(|| panic!("no box for {head}"));
        assert_eq!(fill, want, "box of {head}: {label}");
        if want == "#fadcdc" {
            // Its counterexample, as the report gives it, is on the label.
            let cx = g["counterexample"].as_object().unwrap().values().next().unwrap();
            let fused = format!("fused {}", cx["fused"]);
            assert!(label.contains(&fused), "the refused box {head} names its counterexample ({fused}): {label}");
        }
    }
    assert!(shades.len() >= 2, "the shipped model has groups of more than one verdict: {shades:?}");
    // Every group's target node is inside its own box.
    for (label, _, nodes) in &boxes {
        assert!(!nodes.is_empty() || label.contains("drawn in another box"), "empty box: {label}");
    }
    let svg = render_svg(&dot_path);
    assert!(svg.contains("<svg"), "not an SVG");
    assert_eq!(svg.matches("class=\"cluster\"").count(), boxes.iter().filter(|b| !b.2.is_empty()).count(), "every non-empty box is drawn");
    assert!(svg.contains("residual_add"), "the Add group is labelled in the picture");
    // The same input gives the same picture.
    let again = dir.path().join("again.dot");
    run(&["--dot", again.to_str().unwrap()]);
    assert_eq!(std::fs::read(&again).unwrap(), dot.as_bytes(), "the picture is deterministic");
}

#[test]
fn inspect_boxes_every_qdq_group() {
    let dir = tempfile::tempdir().unwrap();
    let model = shipped();
    let dot_path = dir.path().join("inspect.dot");
    let out = qdqc(&["inspect", model.to_str().unwrap(), "--json", "--dot", dot_path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let dot = std::fs::read_to_string(&dot_path).unwrap();
    let boxes = clusters(&dot);
    let groups = json["groups"].as_array().unwrap();
    assert_eq!(boxes.len(), groups.len());
    for g in groups {
        let head = format!("QDQ group {} ({})", g["node"].as_str().unwrap(), g["op"].as_str().unwrap());
        let (_, _, nodes) = boxes.iter().find(|(l, _, _)| l.starts_with(&head)).unwrap_or_else(|| panic!("no box for {head}"));
        // The op, its DQ inputs and its Q outputs (less any drawn in an earlier box).
        assert!(!nodes.is_empty() && nodes.len() <= 1 + g["inputs"].as_array().unwrap().len() + g["outputs"].as_array().unwrap().len());
    }
    assert!(render_svg(&dot_path).contains("<svg"));
}

#[test]
fn a_dot_path_that_cannot_be_written_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let model = shipped();
    let missing = dir.path().join("no/such/folder/a.dot");
    let out = qdqc(&["audit", model.to_str().unwrap(), "--dot", missing.to_str().unwrap()]);
    // An I/O error (exit 1), as for `-o` and `--report`.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stderr(&out).trim().lines().count(), 1, "one line: {}", stderr(&out));
    assert!(out.stdout.is_empty(), "no audit printed before the refusal");
    // Naming the input model as the picture is refused and leaves the model as it was.
    let copy = dir.path().join("m.onnx");
    std::fs::copy(&model, &copy).unwrap();
    let before = std::fs::read(&copy).unwrap();
    let out = qdqc(&["inspect", copy.to_str().unwrap(), "--dot", copy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--dot"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&copy).unwrap(), before);
}
