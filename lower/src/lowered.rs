//! The lowered form: what extraction produces and every backend consumes. It names values and
//! says which computation produces each; it holds no protobuf and no e-graph, so the ONNX backend
//! and the future Rust-kernel backend read the same thing.

use qdqc_lang::attr::Attribute;
use qdqc_lang::onnx::DataType;

/// What computes a lowered node.
#[derive(Clone, Debug, PartialEq)]
pub enum Computation {
    /// The authored node at this position of its graph, kept with its attributes and name; only
    /// its inputs may have been renamed by rewrites.
    Authored { node: usize },
    /// A node qdqc creates (a proven fusion). `anchor` is the position of the authored node whose
    /// place it takes in the graph's order.
    Created { op_type: String, domain: String, name: String, attributes: Vec<Attribute>, anchor: usize },
}

impl Computation {
    /// Position in the authored order this node keeps.
    pub fn anchor(&self) -> usize {
        match self {
            Computation::Authored { node } => *node,
            Computation::Created { anchor, .. } => *anchor,
        }
    }
}

/// A constant a created node needs (an explicit zero point, a table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoweredConstant {
    pub name: String,
    pub dtype: DataType,
    pub dims: Vec<i64>,
    /// Little-endian element bytes.
    pub bytes: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LoweredNode {
    pub computation: Computation,
    /// Value names; empty for an omitted optional input.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

/// One graph, lowered, with the lowered bodies of its nodes' graph attributes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoweredGraph {
    /// In a topological order that keeps the authored order wherever it is valid.
    pub nodes: Vec<LoweredNode>,
    /// Constants the created nodes need, sorted by name.
    pub constants: Vec<LoweredConstant>,
    pub subgraphs: Vec<LoweredSubgraph>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LoweredSubgraph {
    /// Position of the owning node in the *authored* graph.
    pub node: usize,
    pub attr: String,
    /// Position of the attribute in the owning node's list.
    pub attr_pos: usize,
    pub index: usize,
    pub graph: LoweredGraph,
}
