//! The Rust target (`--target rust`, docs/contract.md §3.12): the code qdqc generates and the
//! kernel crate it links (`qdqc-kernels`, `codegen/kernels`). Its arithmetic is what qdqc writes
//! down, so its proofs compare the kernel crate's own functions (the code that runs) with the
//! engine's references (`qdqc_exact`) for the concrete parameters of a group:
//!
//! | family | function | under `real` | under `exact` |
//! |---|---|---|---|
//! | Conv / MatMul / Gemm, constant weights | [`gemm::prove`] | the i32 accumulation bound from the weights, then `requant_exact` is the definition (by construction; P3 against the exact value when the bias scale is not `sx·sw`) | P2 per channel, then P3: `requant_exact` against the Q of the exact f32 value on every reachable accumulator |
//! | MatMul / Gemm with per-row activation parameters (A8W8) | [`a8w8::prove`] | the i32 bound over every row parameter, every ratio `sx[m]·sw[n]/sy` made, then `requant_exact` per element is the definition; a scale along K refuted on a row ([`a8w8::refute_along_k`]) | each distinct row parameter as a per-tensor group: P2 then P3 |
//! | MatMul of two activations (attention) | [`matmul_dynamic::prove`] | K within the i32 bound (`matmul_codes::max_k`, checked at run time for a symbolic K), then `requant_exact` is the definition | P2 at K, then P3 over `K·[pmin, pmax]` |
//! | MatMul on activations quantized at run time (DynamicQuantizeLinear) | [`dynamic::prove`] | the i32 bound from the weights, then the kernel crate's lemmas: P4-f (the f32 of `C·sx·sw` by a certified f64 product) or P4-q (the certified requantization) | the `quantize_dynamic` float form by construction (the graph's own IEEE steps); the DQ → MatMul forms refused (P2 would depend on the run-time scale) |
//! | MatMul on activations quantized per row by the graph's own ReduceMin/ReduceMax ops | [`row_dynamic::prove`] | the recipe's constants, then P4-f as above; the row quantization by construction (the graph's ops in order, pinned by [`row_dynamic::check_row_codes`]) | refused (DQ → MatMul: P2 would depend on the run-time scale) |
//! | two-input Add / Mul | [`binary::prove`] | P1: the kernel (`Binary::apply` on every host path) against the exact rational, 65,536 pairs | P1: the kernel against the float path (DQ, f32 op, Q) |
//! | Average / GlobalAveragePool | [`pool::prove`] | P1: `mean_exact` against the exact rational on every reachable window sum | P2 (every partial sum exact), then P1 against the float path |
//! | lookup tables | [`lut::prove`] | elementwise IEEE ops by construction (the table is the reference tabulated); library functions refused | the same: library functions refused |
//!
//! Every profile ([`RustProfile`]) runs the same integers (the kernel crate's paths are
//! bit-identical, tested byte for byte), so one verdict holds for all of them.

#![warn(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)]

pub mod a8w8;
pub mod binary;
pub mod cost;
pub mod dynamic;
pub mod gemm;
pub mod lut;
pub mod matmul_dynamic;
pub mod pool;
pub mod row_dynamic;
mod target;

pub use target::{RustProfile, RustTarget};
