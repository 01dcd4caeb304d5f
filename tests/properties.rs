//! Property tests (fixed seeds) with per-channel parameters and asymmetric uint8/int8 zero points,
//! codes on both sides of the zero point and at the extremes (0/255, −128/127).

mod common;

use common::Rng;

use qdqc_exact::num::Dyadic;
use qdqc_exact::reference::{CodeType, dequantize, dequantize_real, quantize, quantize_real};
use qdqc_exact::{Contract, QParam, Verdict};
use qdqc_ort::Isa;
use qdqc_ort::requant::{self, GemmGroup, GemmKind};

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A zero point anywhere in the type's range, the extremes twice as likely.
    fn zero_point(&mut self, code: CodeType) -> i64 {
        let (lo, hi) = code.range();
        match self.below(6) {
            0 => lo,
            1 => hi,
            _ => lo + self.below((hi - lo + 1) as u64) as i64,
        }
    }

    /// Log-uniform scale in [2^lo, 2^hi).
    fn scale(&mut self, lo: i32, hi: i32) -> f32 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        2f64.powf(lo as f64 + u * (hi - lo) as f64) as f32
    }
}

/// Codes on both sides of the zero point and at the extremes.
fn probe_codes(code: CodeType, zp: i64) -> Vec<i64> {
    let (lo, hi) = code.range();
    let mut v: Vec<i64> = [lo, lo + 1, zp - 1, zp, zp + 1, hi - 1, hi].into_iter().filter(|c| (lo..=hi).contains(c)).collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn per_channel_dequantize_quantize_round_trips_at_the_extremes() {
    let mut rng = Rng(0x0ddc_0ffe_e15b_ad00);
    for code in [CodeType::U8, CodeType::I8] {
        for _ in 0..300 {
            let channels: Vec<(f32, i64)> = (0..4).map(|_| (rng.scale(-14, 4), rng.zero_point(code))).collect();
            for &(s, z) in &channels {
                for q in probe_codes(code, z) {
                    let x = dequantize(q, s, z);
                    assert_eq!(quantize(x, s, z, code), q, "Q(DQ({q})) with scale {s:e}, zp {z}, {code:?}");
                    // DQ's single rounding is exact whenever the exact product fits an f32.
                    let exact = dequantize_real(q, s, z).unwrap();
                    if exact.is_f32() {
                        assert_eq!(Dyadic::from_f32(x), Some(exact), "DQ({q}) with scale {s:e}, zp {z}");
                    }
                    assert_eq!(quantize_real(exact, s, z, code), Some(q), "real Q(DQ({q}))");
                }
            }
        }
    }
}

/// The exact real value of one output of channel `c`, quantized (`real` contract).
fn real_output(g: &GemmGroup, c: usize, x: &[i64]) -> i64 {
    let acc: i64 = x.iter().zip(&g.weights[c]).map(|(&a, &w)| (a - g.x.zero_point) * (w - g.w_zero_point(c))).sum();
    let sxw = Dyadic::from_f32(g.x.scale).unwrap().checked_mul(Dyadic::from_f32(g.w_scale(c)).unwrap()).unwrap();
    quantize_real(Dyadic::int(acc).checked_mul(sxw).unwrap(), g.y.scale, g.y.zero_point, g.y.code).unwrap()
}

/// Activation vectors: all at one probe code, alternating two, and one away from the rest.
fn activations(code: CodeType, zp: i64, k: usize) -> Vec<Vec<i64>> {
    let probes = probe_codes(code, zp);
    let mut out = Vec::new();
    for &a in &probes {
        out.push(vec![a; k]);
        for &b in &probes {
            out.push((0..k).map(|i| if i % 2 == 0 { a } else { b }).collect());
            let mut one = vec![a; k];
            one[k / 2] = b;
            out.push(one);
        }
    }
    out
}

#[test]
fn proven_requantization_agrees_with_direct_evaluation_at_the_extremes() {
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    let (mut proven, mut checked) = (0, 0);
    for case in 0..120 {
        let code = if case % 2 == 0 { CodeType::U8 } else { CodeType::I8 };
        let k = 2 + rng.below(7) as usize;
        let channels = 3;
        // Power-of-two scales make some groups provable; the others must not be claimed exact.
        let pow2 = case % 3 == 0;
        let scale = |rng: &mut Rng, lo, hi| if pow2 { 2f32.powi(rng.scale(lo, hi).log2().round() as i32) } else { rng.scale(lo, hi) };
        let x = QParam::new(scale(&mut rng, -8, -2), rng.zero_point(code), code);
        let y = QParam::new(scale(&mut rng, -4, 2), rng.zero_point(CodeType::U8), CodeType::U8);
        let weights: Vec<Vec<i64>> = (0..channels).map(|_| (0..k).map(|_| rng.below(255) as i64 - 127).collect()).collect();
        let w_scales: Vec<f32> = (0..channels).map(|_| scale(&mut rng, -9, -3)).collect();
        let g = GemmGroup::new(GemmKind::MatMul, x, CodeType::I8, weights, w_scales, vec![0; channels], y);
        for contract in [Contract::Real, Contract::Exact] {
            if !matches!(requant::prove(&g, Isa::X86Avx512Vnni, contract), Verdict::Exact { .. }) {
                continue;
            }
            proven += 1;
            for c in 0..channels {
                for xs in activations(code, x.zero_point, k) {
                    let v = requant::accumulate(&g, c, &xs, Isa::X86Avx512Vnni);
                    let fused = requant::requantize(v, g.multiplier(c), y.zero_point, y.code, Isa::X86Avx512Vnni);
                    // Under `exact` the proof includes P2, so the f32 graph is the real value.
                    assert_eq!(fused, real_output(&g, c, &xs), "case {case} {contract:?} channel {c} x {xs:?}");
                    checked += 1;
                }
            }
        }
    }
    assert!(proven >= 20 && checked > 1000, "too few proven groups to mean anything: {proven} proven, {checked} checked");
}
