//! Ops run on the codes instead of the values (contract §5.2): data movement and selection by
//! order commute with elementwise Q/DQ of equal parameters. The obligation of qdqc's on-codes
//! rules and of the runtime's own drop-Q/DQ fusions that `qdqc audit` checks.

use crate::p1::exhaustive;
use crate::reference::{dequantize, quantize};
use crate::{Certificate, Method, QParam, Verdict};

/// The obligation for one parameter pair: bitwise-equal DQ and Q parameters, `Q(DQ(q)) = q` for
/// every code (P4, checked by P1), a positive scale for monotone ops, and a selecting (not
/// interpolating) op.
pub fn prove(x: QParam, y: QParam, monotone: bool, selects: bool) -> Verdict {
    if x.scale.to_bits() != y.scale.to_bits() || x.zero_point != y.zero_point || x.code != y.code {
        return Verdict::Unknown { reason: "DQ and Q parameters differ (bitwise)".into() };
    }
    if monotone && x.scale.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return Verdict::Unknown { reason: format!("scale {} is not positive: the order of codes is not the order of values", x.scale) };
    }
    if !selects {
        return Verdict::Unknown { reason: "Resize in a mode other than nearest interpolates".into() };
    }
    let roundtrip = |q: &[i64]| quantize(dequantize(q[0], x.scale, x.zero_point), x.scale, x.zero_point, x.code);
    match exhaustive(&[x.domain("q")], "Q(DQ(q)) = q", roundtrip, |q| q[0], |_| None) {
        Verdict::Exact { proof } => Verdict::Exact {
            proof: Certificate {
                method: Method::P4Lemma("elementwise Q/DQ commute with data movement and, for a positive scale, with order".into()),
                domain: proof.domain,
                micros: proof.micros,
                detail: "Q(DQ(q)) = q checked for every code (P1)".into(),
            },
        },
        other => other,
    }
}

/// ArgMax on the codes of a DQ with parameters `x` instead of on its values: checked on every
/// pair of codes (the first maximum wins on both sides).
pub fn argmax(x: QParam) -> Verdict {
    let dq = |q: i64| dequantize(q, x.scale, x.zero_point);
    let first_max = |a: f32, b: f32| i64::from(b > a);
    exhaustive(
        &[x.domain("a"), x.domain("b")],
        "ArgMax of two elements, on values and on codes",
        |p| first_max(dq(p[0]), dq(p[1])),
        |p| i64::from(p[1] > p[0]),
        |_| None,
    )
}
