//! qdqc's backends. [`onnx`] writes the lowered form back as an ONNX model; a Rust-kernel backend
//! will read the same lowered form.

pub mod onnx;
pub mod ort_checks;
