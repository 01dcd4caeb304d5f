//! `qdqc placement A B`: which quantization boundaries two models share. A boundary is a
//! consumer-input edge fed by a DequantizeLinear, keyed by (consumer, input index). Consumers are
//! joined by node name; an unnamed node is keyed by its first output tensor instead (`out:NAME`),
//! which survives most tools' renumbering. Edges are grouped by the pattern
//! `producer op → consumer op`, where the producer is the op that made the quantized tensor
//! (looking through the Q/DQ pair), `input` for graph inputs and `constant` for initializers.

use qdqc_lang::onnx::{GraphProto, NodeProto};
use qdqc_lang::{Model, Result};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Edge {
    /// Subgraph path, empty for the main graph.
    pub location: String,
    pub consumer: String,
    pub input: usize,
    /// `producer op → consumer op`.
    pub pattern: String,
}

/// `qdqc placement A B`: the quantization boundaries two models share and those only one has.
#[derive(Clone, Debug, Serialize)]
pub struct Placement {
    /// Path of model A, as given.
    pub a: String,
    /// Path of model B, as given.
    pub b: String,
    /// Boundaries both models have.
    pub same: Vec<Edge>,
    /// Boundaries only A has.
    pub a_only: Vec<Edge>,
    /// Boundaries only B has.
    pub b_only: Vec<Edge>,
    /// Counts per pattern: [same, a only, b only].
    pub patterns: BTreeMap<String, [usize; 3]>,
}

/// Compares the DequantizeLinear-fed edges of the models at `a` and `b`.
pub fn placement(a: &Path, b: &Path) -> Result<Placement> {
    let (ea, eb) = (edges(&Model::load(a)?), edges(&Model::load(b)?));
    let key = |e: &Edge| (e.location.clone(), e.consumer.clone(), e.input);
    let kb: BTreeMap<_, &Edge> = eb.iter().map(|e| (key(e), e)).collect();
    let ka: BTreeMap<_, &Edge> = ea.iter().map(|e| (key(e), e)).collect();
    let mut p = Placement { a: a.display().to_string(), b: b.display().to_string(), same: vec![], a_only: vec![], b_only: vec![], patterns: BTreeMap::new() };
    for e in &ea {
        let slot = if kb.contains_key(&key(e)) { 0 } else { 1 };
        p.patterns.entry(e.pattern.clone()).or_default()[slot] += 1;
        if slot == 0 { p.same.push(e.clone()) } else { p.a_only.push(e.clone()) }
    }
    for e in eb.iter().filter(|e| !ka.contains_key(&key(e))) {
        p.patterns.entry(e.pattern.clone()).or_default()[2] += 1;
        p.b_only.push(e.clone());
    }
    Ok(p)
}

fn edges(model: &Model) -> Vec<Edge> {
    let mut out = Vec::new();
    if let Some(g) = &model.proto.graph {
        graph_edges(g, "", &mut out);
    }
    out.sort();
    out
}

fn graph_edges(g: &GraphProto, location: &str, out: &mut Vec<Edge>) {
    let producer: HashMap<&str, &NodeProto> = g.node.iter().flat_map(|n| n.output.iter().map(move |o| (o.as_str(), n))).collect();
    let is = |n: &NodeProto, op: &str| n.op_type.as_deref() == Some(op);
    for node in &g.node {
        for (i, input) in node.input.iter().enumerate() {
            let Some(dq) = producer.get(input.as_str()).filter(|p| is(p, "DequantizeLinear")) else { continue };
            out.push(Edge {
                location: location.to_string(),
                consumer: key(node),
                input: i,
                pattern: format!("{} → {}", origin(&producer, dq, g), node.op_type.as_deref().unwrap_or("?")),
            });
        }
        for attr in &node.attribute {
            for sub in qdqc_lang::ir::attribute_graphs(attr) {
                graph_edges(sub, &format!("{location}{}.{}/", key(node), attr.name.as_deref().unwrap_or("")), out);
            }
        }
    }
}

fn key(node: &NodeProto) -> String {
    match node.name.as_deref() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => format!("out:{}", node.output.first().map(String::as_str).unwrap_or("")),
    }
}

/// The op that produced the tensor a DQ dequantizes, looking through Q/DQ nodes.
fn origin(producer: &HashMap<&str, &NodeProto>, dq: &NodeProto, g: &GraphProto) -> String {
    let mut value = dq.input.first().map(String::as_str).unwrap_or("");
    loop {
        match producer.get(value) {
            Some(n) if matches!(n.op_type.as_deref(), Some("QuantizeLinear" | "DequantizeLinear")) => value = n.input.first().map(String::as_str).unwrap_or(""),
            Some(n) => return n.op_type.clone().unwrap_or_default(),
            None if g.initializer.iter().any(|t| t.name.as_deref() == Some(value)) => return "constant".into(),
            None => return "input".into(),
        }
    }
}

impl Placement {
    /// The human-readable comparison `qdqc placement` prints.
    pub fn text(&self) -> String {
        let mut out = String::new();
        writeln!(out, "A = {}\nB = {}", self.a, self.b).unwrap();
        writeln!(out, "\nconsumer-input edges fed by DequantizeLinear:").unwrap();
        writeln!(out, "  SAME   = {}\n  A ONLY = {}\n  B ONLY = {}", self.same.len(), self.a_only.len(), self.b_only.len()).unwrap();
        if self.patterns.values().any(|c| c[1] + c[2] > 0) {
            writeln!(out, "\nby pattern (same / A only / B only):").unwrap();
            for (pattern, [s, a, b]) in self.patterns.iter().filter(|(_, c)| c[1] + c[2] > 0) {
                writeln!(out, "  {s:>5} {a:>5} {b:>5}  {pattern}").unwrap();
            }
        }
        for (label, list) in [("A ONLY", &self.a_only), ("B ONLY", &self.b_only)] {
            for e in list {
                writeln!(out, "  {label}: {}{}.input[{}]  ({})", e.location, e.consumer, e.input, e.pattern).unwrap();
            }
        }
        out
    }
}
