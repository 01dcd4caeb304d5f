//! Broken claims about the Rust target's kernels (`qdqc_target_rust`), each checked by the Rust
//! target's own proofs against the engine's references.

use crate::Broken;
use qdqc_exact::p3::{self, Codes, Direction, Outcome};
use qdqc_exact::reference::CodeType;
use qdqc_exact::{Certificate, Contract, Counterexample, Method, QParam, Verdict};
use qdqc_kernels::dynamic::certified_f32;
use qdqc_kernels::dynamic::{DynamicError, Recipe, recipe_parameters, recipe_quantize};
use qdqc_kernels::requant::{Code, Output, Ratio, requant_exact};
use qdqc_ort::binary::{BinaryOp, BinaryParams};
use qdqc_ort::matmul_dynamic::DynamicMatMul;
use qdqc_ort::pool::PoolParams;
use qdqc_ort::requant::{Bias, GemmGroup, GemmKind};
use qdqc_target_rust::{binary, dynamic, gemm, matmul_dynamic, pool, row_dynamic};

pub fn rules() -> Vec<Broken> {
    vec![
        Broken {
            name: "rust_dynamic_f64_product_rounded_to_f32",
            claim: "with a run-time activation scale, the f64 product C·(sx·sw) rounded to f32 is the correctly rounded f32 of C·sx·sw: it rounds twice, and a 54/55-bit product can round in f64 onto an f32 midpoint it is not on",
            broken: || super::as_f32(dynamic::check_float_epilogue(|c, sx, sw| (f64::from(c) * (f64::from(sx) * f64::from(sw))) as f32)),
            // The certificate: the same product, the exact value wherever it lands on a midpoint (P4-f).
            twin: Some(|| dynamic::check_float_epilogue(|c, sx, sw| certified_f32(c, f64::from(sx) * f64::from(sw), sx, sw).0)),
        },
        Broken {
            name: "rust_row_dynamic_codes_by_reciprocal",
            claim: "a row quantized with a run-time scale can multiply by 1/s (one division per row, as torchao's quantize_per_token does) and match the graph's QuantizeLinear: fl(x·fl(1/s)) lands beside an exact tie x/s = k + ½ whenever 1/s is inexact",
            broken: || row_dynamic::check_row_codes(codes_by_reciprocal),
            // The kernel: QuantizeLinear's true division x/s, ties to even.
            twin: Some(|| row_dynamic::check_row_codes(recipe_quantize)),
        },
        Broken {
            name: "rust_bias_code_on_accumulator_scale_claimed_real",
            claim: "requant_exact(acc, b) meets `real` whatever the bias DequantizeLinear's scale: the kernel adds the bias code at sx·sw, the unfused graph adds b·sb",
            broken: || bias_code_on_the_accumulator(0.3),
            // The sound rule on the same group: the bias as the exact offset b·sb/sy (Ratio::with_bias).
            twin: Some(|| gemm::prove(&conv_with_bias_scale(0.3), Contract::Real)),
        },
        Broken {
            name: "rust_exact_add_claimed_for_the_float_path",
            claim: "the correctly rounded QLinearAdd (binary_exact) meets `exact`: the float path rounds the sum to f32 first, which can land it on a tie",
            broken: || binary::prove(BinaryOp::Add, &add(1.0, 2f32.powi(-30), 2.0), Contract::Exact),
            // Power-of-two scales with short codes: the float path is exact.
            twin: Some(|| binary::prove(BinaryOp::Add, &add(0.5, 0.25, 0.125), Contract::Exact)),
        },
        Broken {
            name: "rust_matmul_codes_exact_claimed_for_the_float_path",
            claim: "the correctly rounded MatMul of two activations (matmul_codes, requant_exact) meets `exact` wherever the float sum is exact (P2): the unfused Q still rounds acc·sa·sb/sy to f32 before rne, which can land it on a tie",
            broken: || matmul_dynamic::prove(&activations(f32::from_bits(0x3e79_86c5)), Some(2), Contract::Exact),
            // sy a power of two: the Q's quotient is exact, so it rounds once, as requant_exact does.
            twin: Some(|| matmul_dynamic::prove(&activations(0.25), Some(2), Contract::Exact)),
        },
        Broken {
            name: "rust_exact_mean_claimed_for_the_float_path",
            claim: "the correctly rounded mean (mean_exact) meets `exact` wherever the float sum is exact (P2): the float path still rounds sum/count and then /sy",
            broken: || pool::prove(&PoolParams { x: u8p(1.0, 0), y: u8p(2.0 / 3.0, 0) }, pool::Windows::Image(3), Contract::Exact),
            // sy = 1/2: both quotients are exact, so the float path rounds once, as mean_exact does.
            twin: Some(|| pool::prove(&PoolParams { x: u8p(1.0, 0), y: u8p(0.5, 0) }, pool::Windows::Image(4), Contract::Exact)),
        },
    ]
}

/// The broken row quantization: the graph's `(s, z)`, then `sat(rne(x·fl(1/s)) + z)`.
fn codes_by_reciprocal(recipe: Recipe, x: &[f32], codes: &mut [u8]) -> Result<(f32, u8), DynamicError> {
    let (s, z) = recipe_parameters(recipe, x)?;
    let (lo, hi, shift) = if recipe.signed() { (-128, 127, 128) } else { (0, 255, 0) };
    let r = 1.0 / s;
    for (q, &v) in codes.iter_mut().zip(x) {
        *q = ((v * r).round_ties_even() as i32 + z).clamp(lo, hi).wrapping_add(shift) as u8;
    }
    Ok((s, (z + shift) as u8))
}

/// P3 over every accumulator of the 1×1 Conv below (sx·sw = 0.25, sy = 0.25, bias code 3 at
/// scale `sb`): the kernel that adds the code to the accumulator against the exact value
/// `rne((acc·sx·sw + 3·sb)/sy)` (`requant_exact` with the bias as its offset, itself checked
/// against an independent rational evaluation in codegen/kernels/tests/requant_bias.rs).
fn bias_code_on_the_accumulator(sb: f32) -> Verdict {
    let out = Output::new(0, Code::U8).unwrap();
    let ratio = Ratio::new(0.5, 0.5, 0.25).unwrap();
    let (code, exact) = ratio.with_bias(3, sb).unwrap();
    let kernel = |acc: i64| i64::from(requant_exact(acc as i32, 3, &ratio, out));
    let reference = |acc: i64| i64::from(requant_exact(acc as i32, code, &exact, out));
    let codes = Codes { qmin: 0, qmax: 255, direction: Direction::NonDecreasing };
    let report = p3::check((-128 * 127, 255 * 127), codes, kernel, reference, |_| true);
    let proof = |domain| Certificate { method: Method::P3RequantWindow, domain, micros: report.micros, detail: "bias code added at sx·sw vs b·sb".into() };
    match report.outcome {
        Outcome::Exact => Verdict::Exact { proof: proof(report.points) },
        Outcome::Refuted { first, differing } => Verdict::Refuted {
            counterexample: Counterexample {
                inputs: vec![("acc".into(), first.at)],
                unfused: first.reference,
                fused: kernel(first.at),
                exact: None,
                differing,
            },
            proof: proof(report.points),
        },
        Outcome::Unknown { reason } => Verdict::Unknown { reason },
    }
}

/// `Q(MatMul(DQ(a), DQ(b)))` of two u8 activations with unit scales and zero points 0, K = 2.
fn activations(sy: f32) -> DynamicMatMul {
    DynamicMatMul::new(u8p(1.0, 0), u8p(1.0, 0), 2, u8p(sy, 0))
}

fn u8p(scale: f32, zero_point: i64) -> QParam {
    QParam::new(scale, zero_point, CodeType::U8)
}

fn add(sa: f32, sb: f32, sc: f32) -> BinaryParams {
    BinaryParams { a: u8p(sa, 128), b: u8p(sb, 120), c: u8p(sc, 125) }
}

/// A 1×1 Conv over one channel (sx·sw = 0.25, sy = 0.25) with bias code 3 at scale `sb`.
fn conv_with_bias_scale(sb: f32) -> GemmGroup {
    GemmGroup::new(GemmKind::Conv { kernel_size: 1, groups: 1 }, u8p(0.5, 0), CodeType::I8, vec![vec![1]], vec![0.5], vec![0], u8p(0.25, 0)).with_bias(Bias {
        codes: vec![3],
        scales: vec![sb],
        zero_points: vec![0],
        float: None,
    })
}
