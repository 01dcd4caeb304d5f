//! qdqc's backends. [`onnx`] writes the lowered form back as an ONNX model; a Rust-kernel backend
//! will read the same lowered form. [`prune`] drops the initializers fused nodes left unread.

pub mod onnx;
pub mod prune;
