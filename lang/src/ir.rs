//! The validated graph structure of a model: a bipartite petgraph of op vertices and value
//! vertices, one per ONNX graph, with subgraphs (If/Loop/Scan bodies) nested under the node that
//! owns them and their outer-scope reads resolved.
//!
//! The protobuf stays the source of truth for node contents; the IR records structure (who
//! produces and consumes which value) and is what region windowing and lifting walk.

use crate::error::{Error, Result};
use crate::load::Model;
use crate::onnx::{AttributeProto, GraphProto, NodeProto, attribute_proto::AttributeType};
use crate::{opset, tensor};
use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use std::collections::{BTreeMap, BTreeSet, HashMap};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Vertex {
    /// The node at this position of the graph's `node` list.
    Op(usize),
    Value(String, Def),
}

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Def {
    /// The graph input at this position (possibly with an initializer as its default).
    Input(usize),
    Initializer(usize),
    SparseInitializer(usize),
    /// Output `slot` of the node at position `node`.
    Node {
        node: usize,
        slot: usize,
    },
    /// A value of an enclosing graph, read by this subgraph.
    Outer,
}

/// An edge value→op is the op's input `slot`; op→value its output `slot`. Implicit edges carry the
/// outer-scope reads of a node's subgraphs, so that ordering and windowing see them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    pub slot: usize,
    pub implicit: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub flow: DiGraph<Vertex, Edge>,
    /// Op vertex of each node, by position in the protobuf.
    pub ops: Vec<NodeIndex>,
    /// Value vertex by name (local values and the outer values this graph reads).
    pub values: HashMap<String, NodeIndex>,
    pub subgraphs: Vec<Subgraph>,
    /// Names this graph, or a subgraph nested in it, reads from enclosing graphs.
    pub outer_refs: BTreeSet<String>,
    /// Human-readable location, e.g. ` in If 'cond'.then_branch`; empty for the main graph.
    pub location: String,
}

/// A graph-valued attribute of a node.
#[derive(Clone, Debug)]
pub struct Subgraph {
    pub node: usize,
    pub attr: String,
    /// Position of the attribute in the node's attribute list (names may repeat in a bad model).
    pub attr_pos: usize,
    /// Index within a `graphs` list attribute; 0 for a single `g`.
    pub index: usize,
    pub graph: Graph,
}

impl Subgraph {
    /// This subgraph's protobuf inside `parent`, the protobuf of the graph holding its node.
    pub fn proto<'p>(&self, parent: &'p GraphProto) -> Option<&'p GraphProto> {
        subgraph_proto(parent, self.node, self.attr_pos, self.index)
    }
}

/// The graphs an attribute holds, as its declared type says: `g` for GRAPH, `graphs` for GRAPHS
/// (a mismatched field is not read, by the IR nor by anything that finds a body again).
pub fn attribute_graphs(a: &AttributeProto) -> &[GraphProto] {
    match a.r#type.and_then(|t| AttributeType::try_from(t).ok()) {
        Some(AttributeType::Graph) => a.g.as_slice(),
        Some(AttributeType::Graphs) => &a.graphs,
        _ => &[],
    }
}

/// [`attribute_graphs`], for editing the bodies in place.
pub fn attribute_graphs_mut(a: &mut AttributeProto) -> &mut [GraphProto] {
    match a.r#type.and_then(|t| AttributeType::try_from(t).ok()) {
        Some(AttributeType::Graph) => a.g.as_mut_slice(),
        Some(AttributeType::Graphs) => &mut a.graphs,
        _ => &mut [],
    }
}

/// The bodies of every graph-valued attribute of `node`, in attribute order, as
/// [`attribute_graphs`] reads them: what a walk over nested graphs descends into.
pub fn node_graphs(node: &crate::onnx::NodeProto) -> impl Iterator<Item = &GraphProto> {
    node.attribute.iter().flat_map(attribute_graphs)
}

/// The graph `index` of attribute `attr_pos` of node `node` in `parent`: the one lookup of a body
/// by position, the same reading [`Graph`] was built with.
pub fn subgraph_proto(parent: &GraphProto, node: usize, attr_pos: usize, index: usize) -> Option<&GraphProto> {
    attribute_graphs(parent.node.get(node)?.attribute.get(attr_pos)?).get(index)
}

/// [`subgraph_proto`], for editing the body in place.
pub fn subgraph_proto_mut(nodes: &mut [crate::onnx::NodeProto], node: usize, attr_pos: usize, index: usize) -> Option<&mut GraphProto> {
    attribute_graphs_mut(nodes.get_mut(node)?.attribute.get_mut(attr_pos)?).get_mut(index)
}

/// Names visible from enclosing graphs, with the dims of their initializers.
#[derive(Clone, Default)]
struct Scope {
    visible: BTreeSet<String>,
    init_dims: BTreeMap<String, Vec<i64>>,
}

/// `node 'name' (OpType)` or `node #pos (OpType)` for unnamed nodes, plus the subgraph location.
pub fn describe(node: &NodeProto, pos: usize, location: &str) -> String {
    let op = node.op_type.as_deref().unwrap_or("?");
    match node.name.as_deref() {
        Some(name) if !name.is_empty() => format!("node '{name}' ({op}){location}"),
        _ => format!("node #{pos} ({op}){location}"),
    }
}

impl Graph {
    pub(crate) fn build_main(model: &Model) -> Result<Graph> {
        let proto = model.main_graph();
        Builder { model }.build(proto, &Scope::default(), String::new())
    }

    /// The node positions consuming `value`, in position order (implicit reads included).
    pub fn consumers(&self, value: &str) -> Vec<usize> {
        self.consumers_where(value, |_| true)
    }

    /// The node positions reading `value` only from inside one of their subgraphs.
    pub fn implicit_consumers(&self, value: &str) -> Vec<usize> {
        self.consumers_where(value, |e| e.implicit)
    }

    /// The node positions taking `value` as one of their inputs.
    pub fn explicit_consumers(&self, value: &str) -> Vec<usize> {
        self.consumers_where(value, |e| !e.implicit)
    }

    fn consumers_where(&self, value: &str, keep: impl Fn(&Edge) -> bool) -> Vec<usize> {
        let Some(&v) = self.values.get(value) else { return Vec::new() };
        let mut out: Vec<usize> = self
            .flow
            .edges_directed(v, Direction::Outgoing)
            .filter(|e| keep(e.weight()))
            .filter_map(|e| match self.flow[e.target()] {
                Vertex::Op(pos) => Some(pos),
                Vertex::Value(..) => None,
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Where `value` is defined, if this graph knows it.
    pub fn def(&self, value: &str) -> Option<Def> {
        match self.flow[*self.values.get(value)?] {
            Vertex::Value(_, def) => Some(def),
            Vertex::Op(_) => None,
        }
    }

    /// The node that produces `value`, if a node of this graph does.
    pub fn producer(&self, value: &str) -> Option<usize> {
        match self.def(value)? {
            Def::Node { node, .. } => Some(node),
            _ => None,
        }
    }

    /// Subgraphs owned by the node at `pos`.
    pub fn subgraphs_of(&self, pos: usize) -> impl Iterator<Item = &Subgraph> {
        self.subgraphs.iter().filter(move |s| s.node == pos)
    }
}

struct Builder<'m> {
    model: &'m Model,
}

impl Builder<'_> {
    fn err(&self, problem: impl Into<String>) -> Error {
        Error::bad_input(&self.model.path, problem)
    }

    fn build(&self, proto: &GraphProto, outer: &Scope, location: String) -> Result<Graph> {
        let mut g = Graph { location, ..Graph::default() };
        let mut init_dims = BTreeMap::new();
        let here = g.location.clone();
        let define = |g: &mut Graph, name: &str, def: Def| -> Result<()> {
            if g.values.contains_key(name) {
                return Err(self.err(format!("value '{name}' is defined twice{here}")));
            }
            let v = g.flow.add_node(Vertex::Value(name.to_string(), def));
            g.values.insert(name.to_string(), v);
            Ok(())
        };
        for (i, input) in proto.input.iter().enumerate() {
            define(&mut g, input.name.as_deref().unwrap_or(""), Def::Input(i))?;
        }
        for (i, t) in proto.initializer.iter().enumerate() {
            let name = tensor::name(t);
            init_dims.insert(name.to_string(), t.dims.clone());
            // An initializer named like a graph input is that input's default value.
            if !matches!(g.def(name), Some(Def::Input(_))) {
                define(&mut g, name, Def::Initializer(i))?;
            }
        }
        for (i, s) in proto.sparse_initializer.iter().enumerate() {
            let name = s.values.as_ref().map(tensor::name).unwrap_or("");
            init_dims.insert(name.to_string(), s.dims.clone());
            define(&mut g, name, Def::SparseInitializer(i))?;
        }
        for (pos, node) in proto.node.iter().enumerate() {
            let op = g.flow.add_node(Vertex::Op(pos));
            g.ops.push(op);
            for (slot, out) in node.output.iter().enumerate().filter(|(_, o)| !o.is_empty()) {
                define(&mut g, out, Def::Node { node: pos, slot }).map_err(|e| e.at(describe(node, pos, &here)))?;
                let v = g.values[out];
                g.flow.add_edge(op, v, Edge { slot, implicit: false });
            }
        }
        // Inner scope: everything visible here, for the subgraphs.
        let mut inner = outer.clone();
        inner.visible.extend(g.values.keys().cloned());
        inner.init_dims.extend(init_dims);
        for (pos, node) in proto.node.iter().enumerate() {
            let at = |e: Error| e.at(describe(node, pos, &here));
            let domain = node.domain.as_deref().unwrap_or("");
            if !opset::domain_imported(&self.model.proto, domain) && !opset::implicitly_imported(domain) {
                return Err(at(self.err(format!("domain '{}' is not imported by the model", node.domain.as_deref().unwrap_or("")))));
            }
            for (slot, input) in node.input.iter().enumerate().filter(|(_, i)| !i.is_empty()) {
                let v = self.resolve(&mut g, input, outer).map_err(at)?;
                g.flow.add_edge(v, g.ops[pos], Edge { slot, implicit: false });
            }
            self.build_subgraphs(&mut g, node, pos, &inner, outer).map_err(at)?;
            check_qdq_params(node, &inner.init_dims).map_err(|p| at(self.err(p)))?;
        }
        for out in &proto.output {
            let name = out.name.as_deref().unwrap_or("");
            self.resolve(&mut g, name, outer).map_err(|e| Error { problem: format!("graph output: {}", e.problem), ..e })?;
        }
        if let Err(cycle) = petgraph::algo::toposort(&g.flow, None) {
            let culprit = match g.flow[cycle.node_id()] {
                Vertex::Op(pos) => describe(&proto.node[pos], pos, &here),
                Vertex::Value(ref name, _) => format!("value '{name}'"),
            };
            return Err(self.err(format!("the graph has a cycle through {culprit}{here}")));
        }
        Ok(g)
    }

    /// The vertex of `name`, creating an outer-scope vertex on first use.
    fn resolve(&self, g: &mut Graph, name: &str, outer: &Scope) -> Result<NodeIndex> {
        if let Some(&v) = g.values.get(name) {
            return Ok(v);
        }
        if outer.visible.contains(name) {
            g.outer_refs.insert(name.to_string());
            let v = g.flow.add_node(Vertex::Value(name.to_string(), Def::Outer));
            g.values.insert(name.to_string(), v);
            return Ok(v);
        }
        Err(self.err(format!("input '{name}' is not produced by any node, graph input or initializer{}", g.location)))
    }

    fn build_subgraphs(&self, g: &mut Graph, node: &NodeProto, pos: usize, inner: &Scope, outer: &Scope) -> Result<()> {
        let owner = format!("{} '{}'", node.op_type.as_deref().unwrap_or("?"), node.name.as_deref().unwrap_or(""));
        for (attr_pos, attr) in node.attribute.iter().enumerate() {
            let attr_name = attr.name.as_deref().unwrap_or("");
            // A location names one body: a repeated attribute name gets its position, a GRAPHS
            // list entry its index.
            let repeated = node.attribute[..attr_pos].iter().any(|a| a.name == attr.name);
            let graphs = attribute_graphs(attr);
            for (index, sub) in graphs.iter().enumerate() {
                let at = if repeated { format!(" (attribute #{attr_pos})") } else { String::new() };
                let entry = if attr.r#type == Some(AttributeType::Graphs as i32) { format!("[{index}]") } else { String::new() };
                let location = format!(" in {owner}.{attr_name}{entry}{at}{}", g.location);
                let built = self.build(sub, inner, location)?;
                for name in &built.outer_refs {
                    let v = self.resolve(g, name, outer)?;
                    g.flow.add_edge(v, g.ops[pos], Edge { slot: usize::MAX, implicit: true });
                }
                g.subgraphs.push(Subgraph { node: pos, attr: attr_name.to_string(), attr_pos, index, graph: built });
            }
        }
        Ok(())
    }
}

/// Scale and zero point of a QuantizeLinear/DequantizeLinear must have the same shape when both
/// are initializers: a runtime would otherwise broadcast one of them silently or fail late.
fn check_qdq_params(node: &NodeProto, init_dims: &BTreeMap<String, Vec<i64>>) -> Result<(), String> {
    let op = node.op_type.as_deref().unwrap_or("");
    let domain = node.domain.as_deref().unwrap_or("");
    if !matches!(op, "QuantizeLinear" | "DequantizeLinear") || !matches!(domain, "" | "ai.onnx" | "com.microsoft") {
        return Ok(());
    }
    if !(2..=3).contains(&node.input.len()) || node.input[..2].iter().any(String::is_empty) {
        return Err(format!("{op} takes x, scale and an optional zero point; it has inputs {:?}", node.input));
    }
    if node.output.len() != 1 || node.output[0].is_empty() {
        return Err(format!("{op} has one output; it has {:?}", node.output));
    }
    let input = |i: usize| node.input.get(i).filter(|s| !s.is_empty());
    let (Some(scale), Some(zp)) = (input(1), input(2)) else { return Ok(()) };
    // A scalar and a one-element 1-D tensor are both per-tensor parameters.
    let per_tensor = |d: &Vec<i64>| d.iter().product::<i64>() == 1 && d.len() <= 1;
    match (init_dims.get(scale), init_dims.get(zp)) {
        (Some(s), Some(z)) if s != z && !(per_tensor(s) && per_tensor(z)) => {
            Err(format!("scale '{scale}' has shape {s:?} but zero point '{zp}' has shape {z:?}; they must agree"))
        }
        _ => Ok(()),
    }
}
