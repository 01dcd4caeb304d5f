//! qdqc's languages, bottom layer of the workspace (data → rewrites → lower → codegen).
//!
//! * [`onnx`]: the ONNX protobuf schema (vendored `proto/onnx.proto`, compiled by protox + prost).
//! * [`load`] / [`save`]: reading models through mmap, external data, atomic writes.
//! * [`tensor`]: typed views of initializer data (never allocated from claimed dims).
//! * [`ir`]: the validated model graph (petgraph), with subgraphs and outer-scope references.
//! * [`term`] / [`analysis`]: the Q/DQ term language of the e-graph and its facts.
//! * [`shapes`]: static shape inference for the main graph, kept on [`Model::shapes`].
//! * [`canon`]: the canonical text form used by snapshots.
//! * [`prune`]: dropping initializers an edit left unread.
//! * [`scope`]: the scope chain of a graph and the graphs enclosing it, read as qdqc and as ONNX Runtime read it.

pub mod analysis;
pub mod attr;
pub mod canon;
pub mod cost;
pub mod error;
pub mod ir;
pub mod load;
pub mod onnx;
pub mod opset;
pub mod outputs;
pub mod prune;
pub mod save;
pub mod scope;
pub mod shapes;
pub mod tensor;
pub mod term;

pub use error::{Error, ErrorKind, Result};
pub use load::Model;
