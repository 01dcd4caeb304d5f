//! The fused model qdqc compiled at build time, embedded in the binary (a `static` byte slice:
//! no heap copy). `embed-onnx [OUT.onnx]` prints its size and the session settings ONNX Runtime
//! needs, and writes the model to OUT.onnx for a runtime to load.

/// The compiled model, as `qdqc compile` writes it.
static MODEL: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cnn_residual_qdq.qdqc.onnx"));

include!(concat!(env!("OUT_DIR"), "/session_config.rs"));

fn main() -> std::io::Result<()> {
    println!("embedded fused model: {} bytes", MODEL.len());
    println!("ONNX Runtime session config entries (any optimization level):");
    for (key, value) in SESSION_CONFIG {
        println!("  {key} = {value}");
    }
    if let Some(path) = std::env::args_os().nth(1) {
        std::fs::write(&path, MODEL)?;
        println!("wrote {}", std::path::Path::new(&path).display());
    }
    Ok(())
}
