//! qdqc's backends. [`onnx`] writes the lowered form back as an ONNX model; [`rust`] generates a
//! Rust crate from the same lowered form.

pub mod onnx;
pub mod ort_checks;
pub mod rust;
