//! Canonical text of lifted e-graphs, for snapshots: e-classes numbered in the order a
//! depth-first walk from the roots first meets them, leaves printed inline by name, the nodes of
//! a class sorted by their text, and the facts each class carries. No raw e-class ids.

use crate::lift::{Root, lift};
use crate::region::regions;
use egg::Id;
use qdqc_lang::analysis::{Facts, QdqEGraph};
use qdqc_lang::canon::dtype_name;
use qdqc_lang::scope::Scope;
use qdqc_lang::term::{Op, Term};
use qdqc_lang::{Model, ir};
use std::collections::HashMap;
use std::fmt::Write;

/// Every region of every graph of `model`, lifted and printed.
pub fn lifted_text(model: &Model) -> String {
    let mut out = String::new();
    graph_text(model, &model.graph, &Scope::main(model), &mut out);
    out
}

fn graph_text<'m>(model: &'m Model, graph: &ir::Graph, scopes: &Scope<'m>, out: &mut String) {
    let proto = scopes.current();
    let where_ = if graph.location.is_empty() { "main graph".to_string() } else { graph.location.trim().to_string() };
    for region in regions(graph, proto) {
        let lifted = lift(model, graph, scopes, &region);
        let names: Vec<String> = region.nodes.iter().map(|&p| proto.node[p].label(p)).collect();
        writeln!(out, "region [{}] ({where_})", names.join(", ")).unwrap();
        out.push_str(&egraph_text(&lifted.egraph, &lifted.roots));
    }
    for sub in &graph.subgraphs {
        if let Some(g) = sub.proto(proto) {
            graph_text(model, &sub.graph, &scopes.enter(g), out);
        }
    }
}

/// One e-graph with the given roots.
pub fn egraph_text(egraph: &QdqEGraph, roots: &[Root]) -> String {
    let mut printer = Printer { egraph, numbers: HashMap::new(), lines: Vec::new() };
    for root in roots {
        printer.class(root.class());
    }
    let mut out = printer.lines.join("");
    for root in roots {
        let c = printer.numbers[&egraph.find(root.class())];
        match root {
            Root::Value { name, .. } => writeln!(out, "  root {name} = c{c}").unwrap(),
            Root::Node { .. } => writeln!(out, "  root (node) c{c}").unwrap(),
        }
    }
    out
}

struct Printer<'a> {
    egraph: &'a QdqEGraph,
    numbers: HashMap<Id, usize>,
    lines: Vec<String>,
}

impl Printer<'_> {
    /// Inline text of a leaf class, `None` for op classes.
    fn leaf(&self, id: Id) -> Option<String> {
        let env = &self.egraph.analysis.env;
        Some(match self.egraph[id].data.leaf? {
            Op::Value(v) => format!("%{}", env.value(v).name),
            Op::Tag(t) => format!("'{}'", env.tag(t).name),
            Op::Index(i) => format!("#{i}"),
            Op::Absent => "_".into(),
            _ => return None,
        })
    }

    fn arg(&mut self, id: Id) -> String {
        let id = self.egraph.find(id);
        self.leaf(id).unwrap_or_else(|| format!("c{}", self.class(id)))
    }

    fn class(&mut self, id: Id) -> usize {
        let id = self.egraph.find(id);
        if let Some(&n) = self.numbers.get(&id) {
            return n;
        }
        let n = self.numbers.len();
        self.numbers.insert(id, n);
        let slot = self.lines.len();
        self.lines.push(String::new());
        let mut nodes: Vec<String> = self.egraph[id].nodes.clone().iter().map(|t| self.term(t)).collect();
        nodes.sort();
        self.lines[slot] = format!("  c{n} = {}{}\n", nodes.join(" | "), facts_text(&self.egraph[id].data));
        n
    }

    fn term(&mut self, term: &Term) -> String {
        let args: Vec<String> = term.args.iter().map(|&a| self.arg(a)).collect();
        format!("({} {})", term.op, args.join(" "))
    }
}

fn facts_text(f: &Facts) -> String {
    let mut out = String::new();
    if let Some(dt) = f.dtype {
        write!(out, " : {}", dtype_name(dt)).unwrap();
        if let Some(shape) = &f.shape {
            let dims: Vec<String> = shape
                .iter()
                .map(|d| match d {
                    qdqc_lang::analysis::Dim::Known(k) => k.to_string(),
                    qdqc_lang::analysis::Dim::Symbolic(s) => s.clone(),
                })
                .collect();
            write!(out, "[{}]", dims.join(",")).unwrap();
        }
    }
    if let Some(c) = f.codes {
        write!(out, " codes {}..={}", c.lo, c.hi).unwrap();
    }
    if let Some(q) = &f.quant {
        let scales: Vec<String> = q.scale.iter().take(4).map(|b| format!("0x{b:08x}")).collect();
        let more = if q.scale.len() > 4 { format!(",…{}", q.scale.len()) } else { String::new() };
        write!(out, " quant {} s[{}{more}] z{:?}", dtype_name(q.code_type), scales.join(","), &q.zero_point[..q.zero_point.len().min(4)]).unwrap();
        if q.scale.len() > 1 {
            write!(out, " axis {}", q.axis).unwrap();
        }
    }
    out
}
