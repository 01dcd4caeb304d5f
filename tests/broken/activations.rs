//! Broken removals of activations in front of a QuantizeLinear (ORT's ReluQuantRewrite and
//! ClipQuantRewrite conditions).

use crate::Broken;
use qdqc_exact::p1::exhaustive;
use qdqc_exact::reference::{CodeType, dequantize, quantize};
use qdqc_exact::{QParam, Verdict};

pub fn rules() -> Vec<Broken> {
    vec![
        Broken {
            name: "relu_absorbed_under_negative_scale",
            claim: "Relu before a Q whose zero point is qmin is redundant, whatever the sign of the scale",
            broken: || absorbed(QParam::new(0.1, 128, CodeType::U8), QParam::new(-0.1, 0, CodeType::U8), |x| x.max(0.0)),
            twin: Some(|| absorbed(QParam::new(0.1, 128, CodeType::U8), QParam::new(0.1, 0, CodeType::U8), |x| x.max(0.0))),
        },
        Broken {
            name: "clip_absorbed_under_tiny_scale",
            claim: "Clip(0, 6) before Q is redundant when its bounds are within FLT_EPSILON of Q's range (absolute epsilon)",
            broken: || absorbed(QParam::new(1e-10, 128, CodeType::U8), QParam::new(1e-10, 128, CodeType::U8), |x| x.clamp(0.0, 6.0)),
            twin: Some(|| absorbed(QParam::new(0.2, 128, CodeType::U8), QParam::new(0.1, 0, CodeType::U8), |x| x.clamp(0.0, 25.5))),
        },
    ]
}

/// `Q(f(DQ(q)))` against `Q(DQ(q))` over every input code.
fn absorbed(input: QParam, output: QParam, f: fn(f32) -> f32) -> Verdict {
    let dq = move |q: i64| dequantize(q, input.scale, input.zero_point);
    let q = move |x: f32| quantize(x, output.scale, output.zero_point, output.code);
    exhaustive(&[input.domain("q")], "Q(f(DQ(q))) against Q(DQ(q))", |x| q(f(dq(x[0]))), |x| q(dq(x[0])), |_| None)
}
