//! Compiles the shipped model to Rust at build time: `OUT_DIR/cnn_residual_qdq.rs` (one module)
//! and its weights beside it; `src/main.rs` includes the module.

fn main() {
    let compiled = qdqc_build::Model::new("../models/cnn_residual_qdq.onnx").contract(qdqc_build::Contract::Real).target(qdqc_build::Target::Rust).compile();
    if let Err(e) = compiled {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
