//! The zero-point shift lemma: an int8 activation may be stored as uint8 with its zero point
//! moved by 128, the form ONNX Runtime's x86 integer kernels run fastest (ORT's own
//! `QDQS8ToU8Transformer` makes the same move).
//!
//! Lemma (P4). For every integer r: `sat_i8(r + z) + 128 = sat_u8(r + z + 128)`, and for every
//! code q: `(q + 128) − (z + 128) = q − z`. QuantizeLinear computes `r = rne(fl(x / s))` from
//! the scale alone and DequantizeLinear `fl(f32(q − z) · s)` from the difference alone, so a
//! Q → DQ pair re-signed together gives every DQ output bit for bit, and the uint8 codes are the
//! int8 codes plus 128. The concrete instance is pinned by P1: DQ over all 256 codes (bits
//! compared) and Q over quarter-steps of the scale across the whole code range and beyond.

use super::p1::{Domain, exhaustive};
use super::reference::{CodeType, dequantize, quantize};
use super::{Certificate, Method, Verdict};

/// Q points checked: quarter-steps of the scale over ±`REACH` steps, past both saturation ends.
const REACH: i64 = 1024;

/// Proves that `Q(·; s, z, int8) → DQ(·; s, z)` may become `Q(·; s, z + 128, uint8) → DQ(·; s, z + 128)`.
pub fn int8_to_uint8(scale: f32, zero_point: i64) -> Verdict {
    if !(-128..=127).contains(&zero_point) {
        return Verdict::Unknown { reason: format!("zero point {zero_point} is not an int8 code") };
    }
    let shifted = zero_point + 128;
    let dq = exhaustive(
        &[Domain::new("q", CodeType::I8.range(), zero_point)],
        "DQ bits of every int8 code against its uint8 twin",
        |q| dequantize(q[0], scale, zero_point).to_bits() as i64,
        |q| dequantize(q[0] + 128, scale, shifted).to_bits() as i64,
        |_| None,
    );
    if !dq.is_exact() {
        return dq;
    }
    // x = k·s/4: every rounding boundary (half-steps) and the points beside them.
    let q = exhaustive(
        &[Domain::new("k", (-4 * REACH, 4 * REACH), 0)],
        "Q of x = k·s/4: int8 code + 128 against the uint8 code",
        |k| quantize(k[0] as f32 * scale / 4.0, scale, zero_point, CodeType::I8) + 128,
        |k| quantize(k[0] as f32 * scale / 4.0, scale, shifted, CodeType::U8),
        |_| None,
    );
    if !q.is_exact() {
        return q;
    }
    Verdict::Exact {
        proof: Certificate {
            method: Method::P4Lemma("zero-point shift".into()),
            domain: 256 + (8 * REACH + 1) as u64,
            micros: 0,
            detail: format!("sat_i8(r{zero_point:+}) + 128 = sat_u8(r{shifted:+}); DQ checked on all 256 codes, Q on {} points", 8 * REACH + 1),
        },
    }
}
