//! The ONNX schema, generated at build time from `proto/onnx.proto` (onnx 1.23.2, IR version 14).

#![allow(clippy::all, missing_docs, reason = "generated code")]
include!(concat!(env!("OUT_DIR"), "/onnx.rs"));

pub use tensor_proto::DataType;

/// The newest IR version the vendored schema describes. prost drops fields it does not know, so
/// a newer model would silently lose data: such models are refused at load time.
pub const MAX_IR_VERSION: i64 = Version::IrVersion as i64;

impl NodeProto {
    /// The name reports and errors use: the authored one, or `#<position in its graph>` for a
    /// nameless node.
    pub fn label(&self, pos: usize) -> String {
        self.name.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| format!("#{pos}"))
    }
}
