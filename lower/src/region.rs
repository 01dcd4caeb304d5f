//! Windowing: the graph is cut into quantization regions, each lifted into its own small e-graph.
//!
//! A region grows from the Q/DQ structure (TVM FQ2I's unit): a QuantizeLinear joins the node that
//! produces its input, a DequantizeLinear joins every consumer of its output, and a float op of the
//! contract's op classes (docs/contract.md §2.1) joins its single float-op or Q consumer, so that
//! chains like DQ→Relu→Reshape→Q land in one region. A DynamicQuantizeLinear (an activation
//! quantized at run time) seeds a region as a DequantizeLinear does, joining every consumer of its
//! three outputs, and a MatMulInteger it feeds joins its consumer (the Cast of `quantize_dynamic`'s
//! graph), so that the whole group lands in one region. A QuantizeLinear whose scale and zero
//! point are computed at run time from its own input (per-token quantization written as
//! ReduceMin/ReduceMax and elementwise ops) joins the nodes of that chain and its consumers.
//! Regions stop at [`MAX_REGION`] nodes, which keeps each e-graph small however large the model:
//! a 10 000-node model is a few thousand independent little e-graphs.

use qdqc_lang::ir;
use qdqc_lang::onnx::{GraphProto, NodeProto};
use qdqc_lang::term::FloatOp;

pub const MAX_REGION: usize = 64;

/// Node positions of one region, ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    pub nodes: Vec<usize>,
}

/// What a node is, for windowing and lifting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Quantize,
    Dequantize,
    Float(FloatOp),
    Opaque,
}

pub fn kind(node: &NodeProto) -> NodeKind {
    let op = node.op_type.as_deref().unwrap_or("");
    let domain = node.domain.as_deref().unwrap_or("");
    let standard = matches!(domain, "" | "ai.onnx");
    match op {
        "QuantizeLinear" if standard || domain == "com.microsoft" => NodeKind::Quantize,
        "DequantizeLinear" if standard || domain == "com.microsoft" => NodeKind::Dequantize,
        _ if standard => FloatOp::from_name(op).map_or(NodeKind::Opaque, NodeKind::Float),
        _ => NodeKind::Opaque,
    }
}

/// Whether `node` is ONNX's DynamicQuantizeLinear.
fn dynamic_quantize(node: &NodeProto) -> bool {
    node.op_type.as_deref() == Some("DynamicQuantizeLinear") && matches!(node.domain.as_deref().unwrap_or(""), "" | "ai.onnx")
}

/// The ops a graph makes per-row quantization parameters with (`rules/row_dynamic.rs`).
const PARAMETER_OPS: [&str; 10] = ["ReduceMin", "ReduceMax", "Abs", "Max", "Min", "Sub", "Div", "Clip", "Round", "Cast"];

/// The nodes that compute a QuantizeLinear's scale and zero point at run time from its own
/// input (ReduceMin/ReduceMax of `x` and the elementwise ops after them), found by walking
/// producers back from the scale and zero point through [`PARAMETER_OPS`] only, never past the
/// Q's input `x`; empty when the parameters are constants. A region holding them and the Q lets
/// the `row-dynamic-matmul` rule see the whole chain.
fn parameter_chain(graph: &ir::Graph, proto: &GraphProto, q: &NodeProto) -> Vec<usize> {
    let x = q.input.first().map(String::as_str).unwrap_or("");
    let mut stack: Vec<&str> = q.input.iter().skip(1).map(String::as_str).collect();
    let mut found = Vec::new();
    while let Some(v) = stack.pop() {
        if v == x || v.is_empty() {
            continue;
        }
        let Some(p) = graph.producer(v) else { continue };
        let node = &proto.node[p];
        let standard = matches!(node.domain.as_deref().unwrap_or(""), "" | "ai.onnx");
        if found.contains(&p) || !standard || !PARAMETER_OPS.contains(&node.op_type.as_deref().unwrap_or("")) || found.len() >= MAX_REGION / 2 {
            continue;
        }
        found.push(p);
        stack.extend(node.input.iter().map(String::as_str));
    }
    found
}

pub fn regions(graph: &ir::Graph, proto: &GraphProto) -> Vec<Region> {
    let n = proto.node.len();
    let mut sets = UnionFind::new(n);
    for (pos, node) in proto.node.iter().enumerate() {
        // Only explicit inputs join regions: a subgraph's read of an outer value is not a term edge.
        let consumers = |i: usize| node.output.get(i).map(|o| graph.explicit_consumers(o)).unwrap_or_default();
        match kind(node) {
            NodeKind::Quantize => {
                if let Some(p) = node.input.first().and_then(|i| graph.producer(i)) {
                    sets.union(pos, p);
                }
                let chain = parameter_chain(graph, proto, node);
                // The DequantizeLinear reading the codes with the same run-time parameters too.
                let readers = if chain.is_empty() { Vec::new() } else { consumers(0) };
                for p in chain.into_iter().chain(readers) {
                    sets.union(pos, p);
                }
            }
            NodeKind::Dequantize => {
                for c in consumers(0) {
                    sets.union(pos, c);
                }
            }
            NodeKind::Float(_) => {
                if let [c] = consumers(0)[..]
                    && node.output.len() == 1
                    && matches!(kind(&proto.node[c]), NodeKind::Float(_) | NodeKind::Quantize)
                {
                    sets.union(pos, c);
                }
            }
            NodeKind::Opaque if dynamic_quantize(node) => {
                for c in (0..node.output.len()).flat_map(consumers) {
                    sets.union(pos, c);
                }
            }
            NodeKind::Opaque if node.op_type.as_deref() == Some("MatMulInteger") && matches!(node.domain.as_deref().unwrap_or(""), "" | "ai.onnx") => {
                let fed = node.input.first().and_then(|i| graph.producer(i)).is_some_and(|p| dynamic_quantize(&proto.node[p]));
                if let [c] = consumers(0)[..]
                    && fed
                {
                    sets.union(pos, c);
                }
            }
            NodeKind::Opaque => {}
        }
    }
    let mut by_root: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for pos in 0..n {
        by_root.entry(sets.find(pos)).or_default().push(pos);
    }
    let mut out: Vec<Region> = by_root.into_values().map(|nodes| Region { nodes }).collect();
    out.sort_by_key(|r| r.nodes[0]);
    out
}

/// Union-find with sizes; a union that would exceed [`MAX_REGION`] is skipped.
struct UnionFind {
    parent: Vec<usize>,
    size: Vec<usize>,
}

impl UnionFind {
    fn new(n: usize) -> Self {
        UnionFind { parent: (0..n).collect(), size: vec![1; n] }
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a == b || self.size[a] + self.size[b] > MAX_REGION {
            return;
        }
        // The smaller root index wins, so the result does not depend on union order.
        let (keep, gone) = if a < b { (a, b) } else { (b, a) };
        self.parent[gone] = keep;
        self.size[keep] += self.size[gone];
    }
}
