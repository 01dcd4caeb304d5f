//! Broken requantization of integer accumulators (Conv/MatMul/Gemm epilogues), checked against
//! the exact rational value of the float computation, a float bias rounded as ORT's
//! WeightBiasQuantization rounds it, and a broken bound on the accumulators of a MatMul of two
//! activations, each checked by its own prover.

use crate::Broken;
use qdqc_exact::num::Dyadic;
use qdqc_exact::p1::{Domain, exhaustive};
use qdqc_exact::reference::{CodeType, quantize, quantize_real};
use qdqc_exact::{Contract, QParam, Verdict};
use qdqc_ort::Isa;
use qdqc_ort::matmul_dynamic::{DynamicMatMul, prove};
use qdqc_ort::requant::{GemmGroup, GemmKind, accumulate, requantize};
use qdqc_ort::weight_bias::{self, FloatPath};

pub fn rules() -> Vec<Broken> {
    vec![
        Broken {
            name: "requant_through_f32_above_2_pow_24",
            claim: "rne(fl(f32(acc)·M)) is exact requantization even when |acc| > 2^24 (f32(acc) rounds first)",
            broken: || requant(1 << 24, 1 << 20, (0.03, 0.0005, 1.0)),
            twin: Some(|| requant(-(1 << 19), 1 << 20, (0.5, 2f32.powi(-10), 8.0))),
        },
        Broken {
            name: "bias_scale_ignored",
            claim: "a bias DQ's scale can be dropped: the fused kernel adds int32 bias codes to the accumulator as if in x_scale·w_scale units",
            broken: || with_bias(0.5 * 0.25 * 2.0),
            twin: Some(|| with_bias(0.5 * 0.25)),
        },
        Broken {
            name: "per_k_scale_in_gemm_epilogue",
            claim: "a weight scale that varies along K can be applied once per output column in the epilogue",
            broken: || per_k([0.01, 0.03]),
            twin: Some(|| per_k([0.01, 0.01])),
        },
        Broken {
            name: "u8_weights_zero_point_unshifted",
            claim: "int8 weights can be handed to ORT's u8×u8 kernel as codes + 128 with the zero point kept (the accumulator gains 128·Σ(x − zx))",
            broken: || u8_weights(0),
            twin: Some(|| u8_weights(128)),
        },
        Broken {
            name: "float_bias_rounded_to_the_accumulator_grid",
            claim: "a float Conv bias can be replaced by rne(b/fl(sx·sw))·fl(sx·sw), as ORT's WeightBiasQuantization does, without changing the Q after the Conv",
            broken: || float_bias(0.1245),
            twin: Some(|| float_bias(37.0 * 2f32.powi(-7))),
        },
        Broken {
            name: "activation_matmul_bounded_by_one_product",
            claim: "a MatMul of two activations is proven over the accumulators of one product (K = 1), as if the other K − 1 terms of A·B stayed at zero; the K = 1 proof of this instance holds, the K = 16 one does not",
            broken: || attention(f32::from_bits(0x3df8_cc03)),
            twin: Some(|| attention(0.125)),
        },
    ]
}

/// Attention's `Q·Kᵀ` over two u8 activations (scales 2^-5, zero points 122), K = 16, output
/// scale `sy`: the proof over every accumulator `16·[pmin, pmax]`, after checking that the
/// one-product proof the broken rule relies on holds.
fn attention(sy: f32) -> Verdict {
    let s = 2f32.powi(-5);
    let g = |k| DynamicMatMul::new(QParam::new(s, 122, CodeType::U8), QParam::new(s, 122, CodeType::U8), k, QParam::new(sy, 136, CodeType::U8));
    assert!(prove(&g(1), Isa::X86Avx512Vnni, Contract::Exact).is_exact(), "the broken rule's own proof");
    prove(&g(16), Isa::X86Avx512Vnni, Contract::Exact)
}

/// A 1×1 Conv over one channel (u8 activations·2^-4, zero point 128; int8 weight 3·2^-3) that
/// stays float, with float bias `b`, Q at 1/4: WeightBiasQuantization's rounded bias against `b`,
/// on every input with one nonzero product (`weight_bias::prove`, `exact`).
fn float_bias(b: f32) -> Verdict {
    let x = QParam::new(0.0625, 128, CodeType::U8);
    let y = QParam::new(0.25, 128, CodeType::U8);
    let group = GemmGroup::new(GemmKind::Conv { kernel_size: 1, groups: 1 }, x, CodeType::I8, vec![vec![3]], vec![0.125], vec![0], y);
    weight_bias::prove(&FloatPath { group, bias: vec![b], clamps: vec![], outputs: vec![y] }, Contract::Exact)
}

fn dy(x: f32) -> Dyadic {
    Dyadic::from_f32(x).expect("finite")
}

fn real_q(v: Dyadic, y: QParam) -> i64 {
    quantize_real(v, y.scale, y.zero_point, y.code).expect("valid scale")
}

/// ORT's requantization of `acc` with multiplier `fl(fl(sx·sw)/sy)`, against the exact rational
/// `rne(acc·sx·sw/sy)`, for `acc` in `[start, start + len)`. Output zero point 0 on int32 codes so
/// nothing saturates.
fn requant(start: i64, len: i64, (sx, sw, sy): (f32, f32, f32)) -> Verdict {
    let y = QParam::new(sy, 0, CodeType::I32);
    let m = sx * sw / sy;
    let exact = dy(sx).checked_mul(dy(sw)).unwrap();
    exhaustive(
        &[Domain { name: "acc".into(), lo: start, hi: start + len - 1, zero: start }],
        "acc window, exact rational reference",
        |a| real_q(Dyadic::int(a[0]).checked_mul(exact).unwrap(), y),
        |a| quantize(a[0] as f32 * m, 1.0, 0, CodeType::I32),
        |_| None,
    )
}

/// Accumulator `acc` plus one int32 bias code `b = 1000` whose DQ scale is `sb`: the exact value
/// `acc·sx·sw + b·sb` against ORT's `rne(fl(f32(acc + b)·M))`.
fn with_bias(sb: f32) -> Verdict {
    let (sx, sw, sy, b) = (0.5f32, 0.25f32, 1.0f32, 1000i64);
    let y = QParam::new(sy, 128, CodeType::U8);
    let m = sx * sw / sy;
    exhaustive(
        &[Domain { name: "acc".into(), lo: -3000, hi: 3000, zero: 0 }],
        "acc window with bias 1000",
        |a| {
            let v = Dyadic::int(a[0]).checked_mul(dy(sx).checked_mul(dy(sw)).unwrap()).unwrap();
            real_q(v.checked_add(Dyadic::int(b).checked_mul(dy(sb)).unwrap()).unwrap(), y)
        },
        |a| quantize((a[0] + b) as f32 * m, 1.0, y.zero_point, y.code),
        |_| None,
    )
}

/// A K = 2 dot product with per-K weight scales `s`, against an epilogue that applies `s[0]`.
fn per_k(s: [f32; 2]) -> Verdict {
    let (x, y, w) = (QParam::new(0.05, 128, CodeType::U8), QParam::new(0.02, 128, CodeType::U8), [3i64, 5]);
    let term = |a: i64, k: usize| Dyadic::int((a - x.zero_point) * w[k]).checked_mul(dy(x.scale).checked_mul(dy(s[k])).unwrap()).unwrap();
    exhaustive(
        &[x.domain("a0"), x.domain("a1")],
        "K = 2 dot product",
        |a| real_q(term(a[0], 0).checked_add(term(a[1], 1)).unwrap(), y),
        |a| {
            let acc = (a[0] - x.zero_point) * w[0] + (a[1] - x.zero_point) * w[1];
            real_q(Dyadic::int(acc).checked_mul(dy(x.scale).checked_mul(dy(s[0])).unwrap()).unwrap(), y)
        },
        |_| None,
    )
}

/// A K = 2 MatMul, u8 activations (zero point 128) × int8 weights [127, 120] (zero point 0), whose
/// vpmaddubsw pair saturates on x86-avx2: the int8-weight group's exact accumulation (VNNI),
/// requantized, against the u8×u8 kernel of x86-avx2 reading the weights + 128 with zero point
/// `zw`, for every pair of activation codes.
fn u8_weights(zw: i64) -> Verdict {
    let (x, y) = (QParam::new(2f32.powi(-7), 128, CodeType::U8), QParam::new(2f32.powi(-3), 128, CodeType::U8));
    let s8 = GemmGroup::new(GemmKind::MatMul, x, CodeType::I8, vec![vec![127, 120]], vec![2f32.powi(-6)], vec![0], y);
    let u8 = GemmGroup { w_code: CodeType::U8, weights: vec![vec![255, 248]], w_zero_points: vec![zw], ..s8.clone() };
    let out = |g: &GemmGroup, a: &[i64], isa| requantize(accumulate(g, 0, a, isa), g.multiplier(0), y.zero_point, y.code, isa);
    exhaustive(&[x.domain("a0"), x.domain("a1")], "K = 2, every activation pair", |a| out(&s8, a, Isa::X86Avx512Vnni), |a| out(&u8, a, Isa::X86Avx2), |_| None)
}
