//! Compiles the vendored `onnx.proto` with protox (a pure-Rust protoc), so building qdqc needs no
//! system protoc. See docs/onnx-protobuf.md for why prost + protox rather than `onnx-protobuf`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let fds = protox::compile(["onnx.proto"], ["proto"])?;
    prost_build::Config::new()
        // Tensor payloads stay `Bytes`: decoding from an mmap-backed `Bytes` then borrows, not copies.
        .bytes(["."])
        .compile_fds(fds)?;
    Ok(())
}
