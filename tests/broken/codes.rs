//! Broken rules that compute on integer codes instead of the values they stand for.

use crate::Broken;
use qdqc_exact::p1::exhaustive;
use qdqc_exact::reference::{CodeType, dequantize, quantize};
use qdqc_exact::{QParam, Verdict};

pub fn rules() -> Vec<Broken> {
    vec![
        Broken {
            name: "resign_int8_without_shifting_the_zero_point",
            claim: "int8 activations may be stored as uint8 (code + 128) with the zero point left as it was",
            broken: || {
                let p = QParam::new(0.05, -3, CodeType::I8);
                crate::as_f32(exhaustive(
                    &[p.domain("q")],
                    "DQ of every int8 code against its uint8 twin",
                    |q| dequantize(q[0], p.scale, p.zero_point).to_bits() as i64,
                    |q| dequantize(q[0] + 128, p.scale, p.zero_point).to_bits() as i64,
                    |_| None,
                ))
            },
            twin: Some(|| qdqc_exact::shift::int8_to_uint8(0.05, -3)),
        },
        Broken {
            name: "sub_uint8_codes_before_widening",
            claim: "q − zp may be computed on uint8 codes before the cast to float (NNCF's wrap-around)",
            broken: || dequantized(|q, z| (q as u8).wrapping_sub(z as u8) as f32),
            twin: Some(|| dequantized(|q, z| (q - z) as f32)),
        },
        Broken {
            name: "argmax_on_codes_negative_scale",
            claim: "ArgMax may run on the codes whatever the sign of the scale (ORT's dropDQ does not check it)",
            broken: || argmax(-0.5),
            twin: Some(|| argmax(0.5)),
        },
        Broken {
            name: "maxpool_on_codes_negative_scale",
            claim: "DQ → MaxPool → Q may run MaxPool on the codes whatever the sign of the scale",
            broken: || max_of_two(-0.25),
            twin: Some(|| max_of_two(0.25)),
        },
        Broken {
            name: "resize_linear_on_codes",
            claim: "DQ → Resize(linear) → Q may resize the codes (ORT's uint8 bilinear truncates)",
            broken: || interpolate(|a, b| (0.75 * a as f32 + 0.25 * b as f32) as i64),
            // Nearest mode selects one input: exact on codes.
            twin: Some(|| {
                let p = QParam::new(0.1, 3, CodeType::U8);
                exhaustive(
                    &[p.domain("a"), p.domain("b")],
                    "nearest: select a",
                    |x| quantize(dequantize(x[0], p.scale, p.zero_point), p.scale, p.zero_point, p.code),
                    |x| x[0],
                    |_| None,
                )
            }),
        },
    ]
}

/// DQ of every uint8 code with zero point 128, against `widen(q, zp) · s`.
fn dequantized(widen: fn(i64, i64) -> f32) -> Verdict {
    let p = QParam::new(0.02, 128, CodeType::U8);
    crate::as_f32(exhaustive(
        &[p.domain("q")],
        "DQ over every code",
        |q| dequantize(q[0], p.scale, p.zero_point).to_bits() as i64,
        |q| (widen(q[0], p.zero_point) * p.scale).to_bits() as i64,
        |_| None,
    ))
}

/// Index of the first maximum of two values, as ONNX ArgMax (select_last_index = 0).
fn first_max<T: PartialOrd>(a: T, b: T) -> i64 {
    if b > a { 1 } else { 0 }
}

fn argmax(scale: f32) -> Verdict {
    let p = QParam::new(scale, 128, CodeType::U8);
    let dq = move |q: i64| dequantize(q, p.scale, p.zero_point);
    exhaustive(&[p.domain("a"), p.domain("b")], "ArgMax of two", |x| first_max(dq(x[0]), dq(x[1])), |x| first_max(x[0], x[1]), |_| None)
}

fn max_of_two(scale: f32) -> Verdict {
    let p = QParam::new(scale, 100, CodeType::U8);
    let dq = move |q: i64| dequantize(q, p.scale, p.zero_point);
    exhaustive(
        &[p.domain("a"), p.domain("b")],
        "MaxPool of two",
        |x| quantize(dq(x[0]).max(dq(x[1])), p.scale, p.zero_point, p.code),
        |x| x[0].max(x[1]),
        |_| None,
    )
}

/// Linear interpolation at 1/4 between two neighbours, scale 1 so values are the codes.
fn interpolate(on_codes: fn(i64, i64) -> i64) -> Verdict {
    let p = QParam::new(1.0, 0, CodeType::U8);
    exhaustive(
        &[p.domain("a"), p.domain("b")],
        "bilinear weights 0.75/0.25",
        |x| quantize(0.75 * x[0] as f32 + 0.25 * x[1] as f32, p.scale, p.zero_point, p.code),
        |x| on_codes(x[0], x[1]),
        |x| Some(format!("{}", 0.75 * x[0] as f64 + 0.25 * x[1] as f64)),
    )
}
