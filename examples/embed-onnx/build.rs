//! Compiles the shipped model into OUT_DIR at build time (qdqc-build), and writes the session
//! settings its guarantee needs as a Rust constant for the program to print.

use std::fmt::Write;

fn main() {
    let compiled = match qdqc_build::Model::new("../models/cnn_residual_qdq.onnx").contract(qdqc_build::Contract::Exact).compile() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let mut code = String::from(
        "/// ONNX Runtime session config entries under which the embedded model keeps its guarantee.\npub const SESSION_CONFIG: &[(&str, &str)] = &[\n",
    );
    for (key, value) in compiled.session_config() {
        writeln!(code, "    ({key:?}, {value:?}),").unwrap();
    }
    code.push_str("];\n");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("session_config.rs"), code).expect("OUT_DIR is writable");
}
