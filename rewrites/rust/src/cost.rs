//! The Rust target's cost model: what extraction pays per e-node when the compiled model runs as
//! generated Rust code on the kernel crate. Integer kernels (one pass over codes, i32 arithmetic)
//! are the cheapest thing a group can become; a float op costs more than a Q or DQ (which are
//! one multiply and a rounding per element), so a group left float costs more than its fused
//! kernel. No ONNX Runtime penalty applies (those are ORT's measured slow paths, `qdqc_ort::cost`).

use qdqc_lang::analysis::QdqEGraph;
use qdqc_lang::cost::CostModel;
use qdqc_lang::term::{Op, Term};

/// Integer kernels 1, Q and DQ 2, float and opaque ops 4, leaves 0.
pub struct RustCost;

/// A created kernel: an integer kernel of the kernel crate.
const KERNEL: u64 = 1;
/// QuantizeLinear / DequantizeLinear: one float operation and a conversion per element.
const QDQ: u64 = 2;
/// A float op: the float GEMM/conv or the elementwise loop over f32, four bytes per element.
const FLOAT: u64 = 4;

impl CostModel for RustCost {
    fn cost(&self, term: &Term, _: &QdqEGraph) -> u64 {
        match term.op {
            Op::Value(_) | Op::Tag(_) | Op::Index(_) | Op::Absent | Op::Proj => 0,
            Op::Kernel => KERNEL,
            Op::Dequantize | Op::Quantize => QDQ,
            Op::Float(_) | Op::Opaque => FLOAT,
        }
    }
}
