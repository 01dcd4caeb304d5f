//! The lowered form: what extraction produces and every backend consumes. It names values and
//! says which computation produces each; it holds no protobuf and no e-graph, so the ONNX backend
//! and the future Rust-kernel backend read the same thing.

/// What computes a lowered node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Computation {
    /// The authored node at this position of its graph, kept with its attributes and name; only
    /// its inputs may have been renamed by rewrites.
    Authored { node: usize },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoweredNode {
    pub computation: Computation,
    /// Value names; empty for an omitted optional input.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

/// One graph, lowered, with the lowered bodies of its nodes' graph attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoweredGraph {
    /// In a topological order that keeps the authored order wherever it is valid.
    pub nodes: Vec<LoweredNode>,
    pub subgraphs: Vec<LoweredSubgraph>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoweredSubgraph {
    /// Position of the owning node in the *authored* graph.
    pub node: usize,
    pub attr: String,
    pub index: usize,
    pub graph: LoweredGraph,
}
