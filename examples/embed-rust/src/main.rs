//! The shipped CNN, compiled to Rust by qdqc in `build.rs` and embedded (weights included with
//! `include_bytes!`, read in place). `cargo run -p embed-rust` runs it on a fixed input and prints
//! the top class, the logits (and their f32 bits, for comparison with any other runner) and the
//! median latency of 200 runs.

include!(concat!(env!("OUT_DIR"), "/cnn_residual_qdq.rs"));

use cnn_residual_qdq::{Model, Tensor, Value, Workspace};
use std::time::Instant;

fn main() -> Result<(), cnn_residual_qdq::Error> {
    let model = Model::new()?;
    // A fixed input, 1×3×16×16 in [-1, 1): one IEEE division per element, so any runner can
    // rebuild it bit for bit (tests/oracle/test_embed.py does).
    let data: Vec<f32> = (0..3 * 16 * 16).map(|i| ((i * 37) % 200) as f32 / 100.0 - 1.0).collect();
    let inputs = [Value::F32(Tensor { shape: vec![1, 3, 16, 16], data })];
    let mut ws = Workspace::default();
    let outputs = model.run_with(&mut ws, &inputs, None)?;
    let Some(Value::F32(logits)) = outputs.first() else {
        panic!("the model's output is f32 logits");
    };
    let top = logits.data.iter().enumerate().fold(0, |best, (i, v)| if *v > logits.data[best] { i } else { best });
    let mut times = Vec::with_capacity(200);
    for _ in 0..200 {
        let start = Instant::now();
        model.run_with(&mut ws, &inputs, None)?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    println!("top class {top}");
    println!("logits {:?}", logits.data);
    println!("logits f32 bits {}", logits.data.iter().map(|v| format!("{:08x}", v.to_bits())).collect::<Vec<_>>().join(" "));
    println!("median latency {:.1} µs over {} runs", times[times.len() / 2] * 1e6, times.len());
    Ok(())
}
