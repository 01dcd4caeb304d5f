//! Folding `DQ(W, s, zp)` of constant codes into an f32 table (contract §5.4): every element is
//! the reference `fl(f32(q − zp) · s)` of [`dequantize`], the formula of ORT's CPU kernel for
//! every layout (per-tensor, per-axis, blocked; one conversion of an exact integer difference, one
//! multiply, no FMA). That holds for 4-, 8- and 16-bit codes with f32 scales and an f32 output:
//! `q − zp` is exact in f32 below 2^24.

use crate::reference::{CodeType, dequantize};
use crate::{Certificate, Method, Verdict};

/// Whether folding codes of this type is shown exact: 4-, 8- and 16-bit integers.
pub fn covers(code: CodeType) -> bool {
    matches!(code.bits(), 4 | 8 | 16)
}

/// The folded values of `codes` (element `i` with the f32 scale and zero point `params(i)`) and
/// the verdict on them; no values and `Unknown` for a code type [`covers`] rejects.
pub fn dequantize_table(code: CodeType, codes: &[i64], params: impl Fn(usize) -> (f32, i64)) -> (Vec<f32>, Verdict) {
    if !covers(code) {
        return (Vec::new(), Verdict::Unknown { reason: format!("codes of type {}: folding is shown exact for 4-, 8- and 16-bit integers only", code.name()) });
    }
    let values: Vec<f32> = codes
        .iter()
        .enumerate()
        .map(|(i, &q)| {
            let (s, z) = params(i);
            dequantize(q, s, z)
        })
        .collect();
    let proof = Certificate {
        method: Method::P4Lemma("constant folding with the reference DequantizeLinear".into()),
        domain: values.len() as u64,
        micros: 0,
        detail: format!("{} elements computed as fl(f32(q − zp) · s), ORT's DequantizeLinear arithmetic; {} bytes of f32", values.len(), 4 * values.len()),
    };
    (values, Verdict::Exact { proof })
}
