//! Lifting: one region of the graph becomes one e-graph of [`Term`]s.

use crate::region::{NodeKind, Region, kind};
use egg::Id;
use qdqc_lang::analysis::{Env, QdqAnalysis, QdqEGraph, TagFacts};
use qdqc_lang::attr::Attribute;
use qdqc_lang::onnx::NodeProto;
use qdqc_lang::scope::Scope;
use qdqc_lang::term::{NodeTag, Op, Term, ValueRef};
use qdqc_lang::{Model, ir};
use std::collections::{BTreeSet, HashMap};

/// A value the rest of the graph needs from the region, or a node kept for its own sake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Root {
    /// A value read outside the region or by a subgraph, a graph output, or a value nobody
    /// reads (kept, since lifting alone never removes an authored node).
    Value { name: String, class: Id },
    /// A node without named outputs.
    Node { class: Id },
}

impl Root {
    pub fn class(&self) -> Id {
        match self {
            Root::Value { class, .. } | Root::Node { class } => *class,
        }
    }
}

pub struct Lifted {
    pub egraph: QdqEGraph,
    pub roots: Vec<Root>,
}

pub fn lift(model: &Model, graph: &ir::Graph, scopes: &Scope, region: &Region) -> Lifted {
    let proto = scopes.current();
    let mut lifter = Lifter {
        model,
        scopes,
        egraph: QdqEGraph::new(QdqAnalysis { env: Env { opset: qdqc_lang::opset::default_domain_version(&model.proto).unwrap_or(0), ..Env::default() } }),
        value_refs: HashMap::new(),
        class_of: HashMap::new(),
    };
    let order = local_order(graph, proto.node.as_slice(), region);
    for &pos in &order {
        lifter.node(&proto.node[pos], pos);
    }
    let members: BTreeSet<usize> = region.nodes.iter().copied().collect();
    let outputs: BTreeSet<&str> = proto.output.iter().filter_map(|o| o.name.as_deref()).collect();
    let mut roots = Vec::new();
    for &pos in &order {
        let node = &proto.node[pos];
        let named: Vec<&String> = node.output.iter().filter(|o| !o.is_empty()).collect();
        if named.is_empty() {
            roots.push(Root::Node { class: lifter.node_class(pos) });
        }
        for out in named {
            // Subgraph reads are not term edges, so a value read by one is always a root.
            let consumers = graph.consumers(out);
            let needed = outputs.contains(out.as_str())
                || consumers.is_empty()
                || consumers.iter().any(|c| !members.contains(c))
                || !graph.implicit_consumers(out).is_empty();
            if needed {
                roots.push(Root::Value { name: out.clone(), class: lifter.class_of[out.as_str()] });
                let v = lifter.value_refs[out.as_str()];
                lifter.egraph.analysis.env.escaping.push(v);
            }
        }
    }
    let mut egraph = lifter.egraph;
    egraph.rebuild();
    Lifted { egraph, roots }
}

/// Region nodes in dependency order, ties broken by position (the authored order when it is
/// already topological, as ONNX requires).
fn local_order(graph: &ir::Graph, nodes: &[NodeProto], region: &Region) -> Vec<usize> {
    let members: BTreeSet<usize> = region.nodes.iter().copied().collect();
    let deps = |pos: usize| -> Vec<usize> { nodes[pos].input.iter().filter_map(|i| graph.producer(i)).filter(|p| members.contains(p) && *p != pos).collect() };
    let mut done = BTreeSet::new();
    let mut order = Vec::with_capacity(members.len());
    while order.len() < members.len() {
        // The graph is acyclic (checked at load), so some pending node is always ready.
        let next = members.iter().copied().find(|&p| !done.contains(&p) && deps(p).iter().all(|d| done.contains(d)));
        let next = next.expect("acyclic graph");
        done.insert(next);
        order.push(next);
    }
    order
}

struct Lifter<'a, 'm> {
    model: &'a Model,
    scopes: &'a Scope<'m>,
    egraph: QdqEGraph,
    value_refs: HashMap<String, ValueRef>,
    /// E-class of each value produced inside the region.
    class_of: HashMap<String, Id>,
}

impl Lifter<'_, '_> {
    fn value_ref(&mut self, name: &str) -> ValueRef {
        if let Some(&v) = self.value_refs.get(name) {
            return v;
        }
        let env = &mut self.egraph.analysis.env;
        let v = ValueRef(env.values.len() as u32);
        env.values.push(self.scopes.facts(self.model, name));
        self.value_refs.insert(name.to_string(), v);
        v
    }

    fn node(&mut self, node: &NodeProto, pos: usize) {
        let outputs = node.output.iter().map(|o| (!o.is_empty()).then(|| self.value_ref(o))).collect();
        let attr = |name: &str| node.attribute.iter().find(|a| a.name.as_deref() == Some(name)).and_then(|a| a.i);
        let env = &mut self.egraph.analysis.env;
        let tag = NodeTag(env.tags.len() as u32);
        env.tags.push(TagFacts {
            node: pos,
            arity: node.input.len(),
            created: false,
            attributes: node.attribute.iter().filter_map(Attribute::from_proto).collect(),
            op_type: node.op_type.clone().unwrap_or_default(),
            domain: node.domain.clone().unwrap_or_default(),
            name: node.name.clone().unwrap_or_default(),
            outputs,
            axis: attr("axis"),
            block_size: attr("block_size"),
            output_dtype: attr("output_dtype").unwrap_or(0),
        });
        let mut args = vec![self.egraph.add(Term::leaf(Op::Tag(tag)))];
        for input in &node.input {
            let child = if input.is_empty() {
                self.egraph.add(Term::leaf(Op::Absent))
            } else if let Some(&c) = self.class_of.get(input) {
                c
            } else {
                let v = self.value_ref(input);
                self.egraph.add(Term::leaf(Op::Value(v)))
            };
            args.push(child);
        }
        if matches!(kind(node), NodeKind::Quantize | NodeKind::Dequantize) && node.input.len() == 2 {
            args.push(self.egraph.add(Term::leaf(Op::Absent)));
        }
        let op = match kind(node) {
            NodeKind::Quantize => Op::Quantize,
            NodeKind::Dequantize => Op::Dequantize,
            NodeKind::Float(f) => Op::Float(f),
            NodeKind::Opaque => Op::Opaque,
        };
        let id = self.egraph.add(Term::new(op, args));
        if node.output.len() == 1 {
            self.class_of.insert(node.output[0].clone(), id);
        } else {
            for (k, out) in node.output.iter().enumerate().filter(|(_, o)| !o.is_empty()) {
                let index = self.egraph.add(Term::leaf(Op::Index(k as u32)));
                let proj = self.egraph.add(Term::new(Op::Proj, vec![index, id]));
                self.class_of.insert(out.clone(), proj);
            }
        }
        self.class_of.insert(node_key(pos), id);
    }

    fn node_class(&self, pos: usize) -> Id {
        self.class_of[&node_key(pos)]
    }
}

/// Key under which a node's own e-class is recorded (not a valid ONNX value name).
fn node_key(pos: usize) -> String {
    format!("\0node{pos}")
}
