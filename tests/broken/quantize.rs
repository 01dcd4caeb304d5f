//! Broken QuantizeLinear implementations, checked on a DQ → Q chain over every input code.

use crate::Broken;
use qdqc_exact::QParam;
use qdqc_exact::Verdict;
use qdqc_exact::p1::exhaustive;
use qdqc_exact::reference::{CodeType, dequantize, quantize};

pub fn rules() -> Vec<Broken> {
    vec![
        Broken {
            name: "q_by_reciprocal",
            claim: "Q may multiply by fl(1/s) instead of dividing by s (tract, MLIR do)",
            broken: || chain(P_RECIP, |x, p| rounded(x * (1.0 / p.scale), p)),
            twin: Some(|| chain(P_RECIP, |x, p| rounded(x / p.scale, p))),
        },
        Broken {
            name: "q_half_away_from_zero",
            claim: "Q may round half away from zero (Rust's f32::round, TOSA) instead of half to even",
            broken: || chain(P_TIES, |x, p| saturate(((x / p.scale).round() as i64) + p.zero_point, p)),
            twin: Some(|| chain(P_TIES, |x, p| saturate(((x / p.scale).round_ties_even() as i64) + p.zero_point, p))),
        },
        Broken {
            name: "q_zero_point_before_rounding",
            claim: "Q may add the zero point in float before rounding (MLIR LowerQuantOps)",
            broken: || chain(P_TIES, |x, p| saturate((x / p.scale + p.zero_point as f32).round_ties_even() as i64, p)),
            twin: Some(|| chain(P_TIES, |x, p| saturate((x / p.scale).round_ties_even() as i64 + p.zero_point, p))),
        },
    ]
}

/// (input DQ, output Q) parameters where reciprocal multiplication rounds differently.
const P_RECIP: (QParam, QParam) = (QParam { scale: 0.3, zero_point: 128, code: CodeType::U8 }, QParam { scale: 0.208, zero_point: 128, code: CodeType::U8 });
/// Parameters putting x/s on exact half-integers: DQ gives q/2, Q divides by 1, odd zero point.
const P_TIES: (QParam, QParam) = (QParam { scale: 0.5, zero_point: 0, code: CodeType::U8 }, QParam { scale: 1.0, zero_point: 1, code: CodeType::U8 });

fn saturate(k: i64, p: &QParam) -> i64 {
    let (lo, hi) = p.code.range();
    k.clamp(lo, hi)
}

fn rounded(t: f32, p: &QParam) -> i64 {
    saturate((t.round_ties_even() as i64).saturating_add(p.zero_point), p)
}

/// P1 over every code of `DQ(q; input) → Q(output)`: reference Q against `candidate`.
fn chain((input, output): (QParam, QParam), candidate: fn(f32, &QParam) -> i64) -> Verdict {
    exhaustive(
        &[input.domain("q")],
        "DQ → Q over every input code",
        |q| quantize(dequantize(q[0], input.scale, input.zero_point), output.scale, output.zero_point, output.code),
        |q| candidate(dequantize(q[0], input.scale, input.zero_point), &output),
        |_| None,
    )
}
