//! Broken removals of Q/DQ pairs. Outputs are f32 values, compared as bit patterns.

use crate::Broken;
use qdqc_exact::p1::exhaustive;
use qdqc_exact::reference::{CodeType, dequantize, quantize};
use qdqc_exact::{QParam, Verdict};

pub fn rules() -> Vec<Broken> {
    vec![
        Broken {
            name: "remove_q_dq_pair",
            claim: "a Q → DQ pair is an identity and can be removed (it drops a rounding and a clamp)",
            broken: || {
                let (input, pair) = (p(0.1, 128), p(0.3, 128));
                over_codes(input, "x = DQ(q); Q → DQ(x) against x", move |x| requantized(x, pair), |x| x)
            },
            twin: Some(|| {
                // The sound rule removes DQ → Q with bitwise-equal parameters (contract §4.5).
                let pair = p(0.3, 128);
                exhaustive(
                    &[pair.domain("q")],
                    "Q(DQ(q)) against q",
                    |q| quantize(dequantize(q[0], pair.scale, pair.zero_point), pair.scale, pair.zero_point, pair.code),
                    |q| q[0],
                    |_| None,
                )
            }),
        },
        Broken {
            name: "merge_double_qdq_pairs",
            claim: "Q1→DQ1→Q2→DQ2 with different parameters may become one pair over the intersected range (ORT's DoubleQDQPairsRemover)",
            broken: || {
                let (input, first, second) = (p(0.05, 128), p(0.1, 120), p(0.12, 130));
                let merged = intersected(first, second);
                over_codes(input, "two pairs against the merged pair", move |x| requantized(requantized(x, first), second), move |x| requantized(x, merged))
            },
            twin: Some(|| {
                let (input, pair) = (p(0.05, 128), p(0.1, 120));
                over_codes(input, "two identical pairs against one", move |x| requantized(requantized(x, pair), pair), move |x| requantized(x, pair))
            }),
        },
    ]
}

fn p(scale: f32, zero_point: i64) -> QParam {
    QParam::new(scale, zero_point, CodeType::U8)
}

/// `DQ(Q(x))` with one parameter set.
fn requantized(x: f32, p: QParam) -> f32 {
    dequantize(quantize(x, p.scale, p.zero_point, p.code), p.scale, p.zero_point)
}

/// ORT's DoubleQDQPairsRemover: the intersection of both real ranges, re-derived scale and zp.
fn intersected(a: QParam, b: QParam) -> QParam {
    let (qmin, qmax) = (0.0f32, 255.0f32);
    let real_min = (a.scale * (qmin - a.zero_point as f32)).max(b.scale * (qmin - b.zero_point as f32));
    let real_max = (a.scale * (qmax - a.zero_point as f32)).min(b.scale * (qmax - b.zero_point as f32));
    let scale = (real_max - real_min) / (qmax - qmin);
    QParam::new(scale, (qmin - real_min / scale).round() as i64, CodeType::U8)
}

/// P1 over the codes of an input DQ; both sides see its f32 value.
/// Outputs are compared as f32 bit patterns.
fn over_codes(input: QParam, detail: &str, reference: impl Fn(f32) -> f32, target: impl Fn(f32) -> f32) -> Verdict {
    let x = move |q: &[i64]| dequantize(q[0], input.scale, input.zero_point);
    let bits = |v: f32| v.to_bits() as i64;
    crate::as_f32(exhaustive(&[input.domain("q")], detail, |q| bits(reference(x(q))), |q| bits(target(x(q))), |_| None))
}
