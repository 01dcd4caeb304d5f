//! The kernels qdqc's generated Rust code links (`qdqc compile --target rust`), and the reference
//! functions its proofs call: the code that runs is the code that was proven.
//!
//! - [`gemm_u8`]: u8 × i8/u8 GEMM with exact i32 accumulation and zero-point corrections from
//!   precomputed weight column sums ([`PackedB`]); [`conv`]: convolution on codes through it.
//! - [`a8w8`]: the A8W8 group with per-row activation and per-column weight parameters (zero
//!   points on both sides), requantized per element by the exact rational.
//! - [`matmul_codes`]: MatMul of two code tensors (attention), i32 sums bounded by K, requantized
//!   by the certified form.
//! - [`dynamic`]: MatMul on activations quantized at run time (ORT's DynamicQuantizeLinear, per
//!   tensor or per row), the float output correctly rounded by a certified f64 product.
//! - [`requant`]: i32 accumulators to u8/i8 codes, correctly rounded (`requant_exact` is the
//!   definition; `requant_fixed` a per-instance proven fixed-point form; `requant_certified` a
//!   wider evaluation with an exact fallback).
//! - [`codes`]: ops on u8/i8 codes — Add/Mul, pooling, lookup tables, data movement,
//!   QuantizeLinear/DequantizeLinear — correctly rounded where they requantize.
//! - [`float`]: f32 kernels for the ops that stay float (Conv, MatMul/Gemm, elementwise, library
//!   functions, Softmax, pools, Resize, reductions, normalizations), each with a fixed, documented
//!   evaluation order and portable elementary functions: the same bits on every machine.
//! - [`entry`]: the generic kernels instantiated for each element type, the functions the
//!   generated code calls (compiled once here, not in every generated crate).
//! - [`Kernels`]: the path (portable, AVX2, AVX-512 VNNI), chosen at run time, every path
//!   bit-identical.
//! - [`weights`]: a generated crate's weights mapped from a file beside it (models too large to
//!   embed), checked against the compile that wrote them.
//!
//! `unsafe` appears only in the SIMD microkernels (`micro/`), at the calls of `#[target_feature]`
//! instances of safe code and in [`weights`]' file mapping, each block with its safety argument.

pub mod a8w8;
pub mod codes;
pub mod conv;
pub mod dynamic;
pub mod entry;
pub mod float;
pub mod gemm;
mod isa;
pub mod matmul_codes;
mod micro;
mod pack;
pub mod requant;
mod split;
pub mod weights;

pub use gemm::{GemmError, accumulator_bound, gemm_u8, gemm_u8_requant, gemm_u8_requant_prepared};
pub use isa::{ISA_ENV, Isa, IsaError, Kernels};
pub use micro::peak::{instruction_peak, loaded_peak, split_peak};
pub use pack::{KR, Layout, NR, PackError, PackedB};
