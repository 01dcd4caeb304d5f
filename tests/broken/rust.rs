//! Broken claims about the Rust target's kernels (`qdqc_target_rust`), each checked by the Rust
//! target's own proofs against the engine's references.

use crate::Broken;
use qdqc_exact::p1::exhaustive;
use qdqc_exact::p3::{self, Codes, Direction, Outcome};
use qdqc_exact::reference::CodeType;
use qdqc_exact::{Certificate, Contract, Counterexample, Method, QParam, Verdict};
use qdqc_kernels::Kernels;
use qdqc_kernels::codes::qdq::{dequantize, dequantize_linear, quantize, quantize_linear};
use qdqc_kernels::codes::softmax::SoftmaxCodes;
use qdqc_kernels::dynamic::certified_f32;
use qdqc_kernels::dynamic::{DynamicError, Recipe, recipe_parameters, recipe_quantize};
use qdqc_kernels::float::math::exp64;
use qdqc_kernels::float::softmax::softmax;
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
        Broken {
            name: "rust_softmax_maximum_on_codes_negative_scale",
            claim: "DQ → Softmax → Q on codes may take each slice's maximum on the codes (an integer max) whatever the sign of the scale: with a negative scale the largest code holds the smallest value, and the exponentials taken from its row overflow",
            broken: || softmax_codes(maximum_on_codes),
            // The kernel: the maximum of the dequantized values, its code's row of the table.
            twin: Some(|| {
                softmax_codes(|x, y| SoftmaxCodes::<u8>::new(SOFTMAX.0, SOFTMAX.1, SOFTMAX.2, 0).unwrap().run(Kernels::detect(), x, &[1, 2], y).unwrap())
            }),
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

/// A softmax on codes with a negative input scale: input scale and zero point, output scale (zero point 0).
const SOFTMAX: (f32, i32, f32) = (-4.0, 128, 1.0 / 255.0);

/// `Q(Softmax(DQ(x)))` of every slice `[a, b]` of u8 codes by the three unfused kernels against
/// `fused`: the slice's two output codes as one integer.
fn softmax_codes(fused: fn(&[u8], &mut [u8])) -> Verdict {
    let k = Kernels::detect();
    let (s, z, so) = SOFTMAX;
    let unfused = |x: &[u8], y: &mut [u8]| {
        let (mut v, mut e) = ([0f32; 2], [0f32; 2]);
        dequantize_linear(x, &[1, 2], 0, &[s], &[z], &mut v).unwrap();
        softmax(k, &v, &[1, 2], -1, &mut e).unwrap();
        quantize_linear(&e, &[1, 2], 0, &[so], &[0], y).unwrap();
    };
    let slice = |f: &dyn Fn(&[u8], &mut [u8]), c: &[i64]| {
        let mut y = [0u8; 2];
        f(&[c[0] as u8, c[1] as u8], &mut y);
        i64::from(y[0]) | i64::from(y[1]) << 8
    };
    let p = u8p(s, i64::from(z));
    exhaustive(&[p.domain("a"), p.domain("b")], "softmax of [a, b]: the two output codes", |c| slice(&unfused, c), |c| slice(&fused, c), |_| None)
}

/// The broken maximum: the largest code's value subtracted, the rest as the kernel.
fn maximum_on_codes(x: &[u8], y: &mut [u8]) {
    let (s, z, so) = SOFTMAX;
    let dq = |c: u8| f64::from(dequantize(c, s, z));
    let m = dq(*x.iter().max().unwrap());
    let e: Vec<f64> = x.iter().map(|&c| exp64(dq(c) - m)).collect();
    let sum = e.iter().fold(0f64, |a, &b| a + b);
    for (y, e) in y.iter_mut().zip(&e) {
        *y = quantize((e / sum) as f32, so, 0);
    }
}
