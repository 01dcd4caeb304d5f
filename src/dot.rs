//! Graphviz pictures (`inspect --dot`, `audit --dot`): the main graph with every group boxed —
//! the picture a user would otherwise assemble in Netron from the report's node names.
//!
//! | choice | why |
//! |---|---|
//! | one box (`cluster`) per group, coloured by verdict | the audit's question is "which fusions change my numbers"; colour answers it at a glance |
//! | a refused group's box carries its reason or counterexample (first line, cut at 160 characters) | the picture says why, not only where |
//! | a node two groups share is drawn in the first group's box | Graphviz puts a node in one cluster; the later box says how many of its nodes are drawn elsewhere |
//! | nodes are `n<position>`, labels the authored names | names may repeat or be empty; positions are unique and stable, so the same model gives the same file |
//! | groups inside subgraphs are counted in the title, not drawn | a body is a separate graph; drawing it beside the main graph would mislead about data flow |
//!
//! Initializers are not drawn (a weight's DQ node stands for it).

use crate::audit::Audit;
use crate::inspect::Inspection;
use qdqc_lang::onnx::{GraphProto, NodeProto};
use qdqc_lang::{Model, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::Path;

/// How a box is coloured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shade {
    /// A group `inspect` found (no verdict asked).
    Group,
    /// Proven exact on every profile judged.
    Exact,
    /// Refuted on at least one profile.
    Refuted,
    /// Neither proven nor refuted on some profile.
    Unknown,
}

impl Shade {
    /// (fill, border) colours.
    fn colours(self) -> (&'static str, &'static str) {
        match self {
            Shade::Group => ("#e3ecfa", "#3b6db3"),
            Shade::Exact => ("#dcf2dc", "#2e7d32"),
            Shade::Refuted => ("#fadcdc", "#c62828"),
            Shade::Unknown => ("#fdf0d0", "#b26a00"),
        }
    }
}

/// One group to box: the authored node names (`#<pos>` for a nameless node) and its label lines.
struct Boxed {
    nodes: Vec<String>,
    lines: Vec<String>,
    shade: Shade,
}

/// The picture of `inspect`'s groups in the model at `path`.
pub fn inspection(path: &Path, inspection: &Inspection) -> Result<String> {
    let model = Model::load(path)?;
    let main = main_graph(&model);
    let mut hidden = 0;
    let mut boxes = Vec::new();
    for g in &inspection.groups {
        if !g.location.is_empty() {
            hidden += 1;
            continue;
        }
        // A group end names its Q/DQ node, which may be nameless: find it by its code tensor.
        let mut nodes = Vec::new();
        for e in &g.inputs {
            nodes.extend(find(main, |n| is(n, "DequantizeLinear") && n.input.first() == Some(&e.tensor) && feeds(main, n, &g.node)));
        }
        nodes.push(g.node.clone());
        for e in &g.outputs {
            nodes.extend(find(main, |n| is(n, "QuantizeLinear") && n.output.first() == Some(&e.tensor)));
        }
        let codes = |ends: &[crate::inspect::GroupEnd]| ends.iter().map(|e| e.code_type.clone().unwrap_or("?".into())).collect::<Vec<_>>().join(",");
        let lines = vec![format!("QDQ group {} ({})", g.node, g.op), format!("in {} → out {}", codes(&g.inputs), codes(&g.outputs))];
        boxes.push(Boxed { nodes, lines, shade: Shade::Group });
    }
    Ok(render(main, &format!("{} — {} QDQ group(s)", inspection.file, inspection.groups.len()), &boxes, hidden))
}

/// The picture of an audit of the model at `path`: every group ORT would rewrite, coloured by
/// its verdict under the audit's first contract, the `real` verdicts on a line of their own.
pub fn audit(path: &Path, audit: &Audit) -> Result<String> {
    let model = Model::load(path)?;
    let main = main_graph(&model);
    let mut hidden = 0;
    let mut boxes = Vec::new();
    let primary = format!("{:?}", audit.contract).to_lowercase();
    for g in &audit.groups {
        if !g.location.is_empty() {
            hidden += 1;
            continue;
        }
        let verdicts: BTreeSet<&str> = g.verdict.values().copied().collect();
        let shade = if verdicts.contains("refuted") {
            Shade::Refuted
        } else if verdicts.contains("unknown") || verdicts.is_empty() {
            Shade::Unknown
        } else {
            Shade::Exact
        };
        let mut lines = vec![format!("{} {} ({}) → {}", g.rule, g.target, g.op, g.fused_op), format!("{primary}: {}", per_profile(&g.verdict))];
        if let Some(r) = &g.real {
            lines.push(format!("real: {}", per_profile(&r.verdict)));
        }
        // The first reason a user can act on: a counterexample, else the reason it is unknown.
        let why = g.counterexample.values().map(ToString::to_string).chain(g.reason.values().cloned()).next();
        lines.extend(why.map(|w| cut(&w)));
        boxes.push(Boxed { nodes: g.nodes.clone(), lines, shade });
    }
    let title = format!("{} — {} group(s) ONNX Runtime would rewrite; colour: {primary} verdict", audit.file, audit.groups.len());
    Ok(render(main, &title, &boxes, hidden))
}

fn main_graph(model: &Model) -> &GraphProto {
    static EMPTY: std::sync::OnceLock<GraphProto> = std::sync::OnceLock::new();
    model.proto.graph.as_ref().unwrap_or_else(|| EMPTY.get_or_init(GraphProto::default))
}

/// "exact" when every profile agrees, else "exact on A; refuted on B".
fn per_profile<K: std::fmt::Display>(verdicts: &BTreeMap<K, &'static str>) -> String {
    let distinct: BTreeSet<&str> = verdicts.values().copied().collect();
    if distinct.len() <= 1 {
        return distinct.into_iter().next().unwrap_or("not fused").to_string();
    }
    verdicts.iter().map(|(p, v)| format!("{v} on {p}")).collect::<Vec<_>>().join("; ")
}

fn cut(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    match line.char_indices().nth(160) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

fn is(n: &NodeProto, op: &str) -> bool {
    n.op_type.as_deref() == Some(op) && matches!(n.domain.as_deref(), None | Some("" | "ai.onnx" | "com.microsoft"))
}

/// Whether `n`'s output is an input of the node named `target`.
fn feeds(g: &GraphProto, n: &NodeProto, target: &str) -> bool {
    let Some(out) = n.output.first() else { return false };
    g.node.iter().enumerate().any(|(pos, c)| c.label(pos) == target && c.input.contains(out))
}

/// Names of the nodes matching `pred`.
fn find(g: &GraphProto, pred: impl Fn(&NodeProto) -> bool) -> Vec<String> {
    g.node.iter().enumerate().filter(|(_, n)| pred(n)).map(|(pos, n)| n.label(pos)).collect()
}

/// A DOT string literal.
fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

fn render(g: &GraphProto, title: &str, boxes: &[Boxed], hidden: usize) -> String {
    let mut out = String::new();
    let title = if hidden > 0 { format!("{title}; {hidden} inside subgraphs, not drawn") } else { title.to_string() };
    writeln!(out, "digraph qdqc {{").unwrap();
    writeln!(out, "  graph [label={}, labelloc=t, fontname=\"Helvetica\", rankdir=TB];", quote(&title)).unwrap();
    writeln!(out, "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\", fontsize=10];").unwrap();
    writeln!(out, "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];").unwrap();
    // Node positions by report name; the first position wins for a repeated name.
    let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
    for (pos, n) in g.node.iter().enumerate() {
        by_name.entry(n.label(pos)).or_insert(pos);
    }
    let mut boxed_in: BTreeMap<usize, usize> = BTreeMap::new();
    for (i, b) in boxes.iter().enumerate() {
        let mine: Vec<usize> = b.nodes.iter().filter_map(|n| by_name.get(n).copied()).filter(|p| !boxed_in.contains_key(p)).collect();
        let elsewhere = b.nodes.len() - mine.len();
        let (fill, border) = b.shade.colours();
        let mut lines = b.lines.clone();
        if elsewhere > 0 {
            lines.push(format!("({elsewhere} of its nodes drawn in another box)"));
        }
        writeln!(out, "  subgraph cluster_{i} {{").unwrap();
        writeln!(
            out,
            "    label={}; labeljust=l; fontsize=9; style=\"rounded,filled\"; fillcolor={}; color={}; penwidth=2;",
            quote(&lines.join("\n")),
            quote(fill),
            quote(border)
        )
        .unwrap();
        for &p in &mine {
            boxed_in.insert(p, i);
            writeln!(out, "    n{p};").unwrap();
        }
        writeln!(out, "  }}").unwrap();
    }
    let initializers: BTreeSet<&str> = g.initializer.iter().filter_map(|t| t.name.as_deref()).collect();
    let mut producer: BTreeMap<&str, String> = BTreeMap::new();
    for (i, v) in g.input.iter().enumerate() {
        let Some(n) = v.name.as_deref().filter(|n| !initializers.contains(n)) else { continue };
        writeln!(out, "  in{i} [label={}, shape=invhouse, fillcolor=\"#eeeeee\"];", quote(n)).unwrap();
        producer.insert(n, format!("in{i}"));
    }
    for (pos, n) in g.node.iter().enumerate() {
        let op = n.op_type.as_deref().unwrap_or("?");
        let qdq = is(n, "QuantizeLinear") || is(n, "DequantizeLinear");
        let shape = if qdq { ", shape=ellipse, fontsize=8" } else { "" };
        writeln!(out, "  n{pos} [label={}{shape}];", quote(&format!("{op}\n{}", n.label(pos)))).unwrap();
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            producer.insert(o, format!("n{pos}"));
        }
    }
    for (pos, n) in g.node.iter().enumerate() {
        let mut seen = BTreeSet::new();
        for i in n.input.iter().filter(|i| !i.is_empty()) {
            if let Some(p) = producer.get(i.as_str()).filter(|_| seen.insert(i)) {
                writeln!(out, "  {p} -> n{pos} [tooltip={}];", quote(i)).unwrap();
            }
        }
    }
    for (i, v) in g.output.iter().enumerate() {
        let Some(n) = v.name.as_deref() else { continue };
        writeln!(out, "  out{i} [label={}, shape=house, fillcolor=\"#eeeeee\"];", quote(n)).unwrap();
        if let Some(p) = producer.get(n) {
            writeln!(out, "  {p} -> out{i};").unwrap();
        }
    }
    writeln!(out, "}}").unwrap();
    out
}
