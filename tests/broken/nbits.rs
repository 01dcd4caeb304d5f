//! A broken MatMulNBits packing, checked by the rule's own weight check (P1 over every (k, n):
//! the packed weights dequantize to DQ(W) bit for bit).

use crate::{Broken, as_f32};
use qdqc_exact::Verdict;
use qdqc_ort::nbits::{Layout, Weight, check, pack, pack_shifted};

pub fn rules() -> Vec<Broken> {
    vec![Broken {
        name: "matmulnbits_signed_codes_unshifted",
        claim: "signed int4 codes can be stored as their two's-complement nibbles (MatMulNBits reads unsigned codes: they must be shifted by 8, zero points too)",
        broken: || as_f32(check(&signed_int4(), &pack_shifted(&signed_int4(), 0))),
        twin: Some(|| check(&signed_int4(), &pack(&signed_int4()))),
    }]
}

/// int4 W [4, 2] in one block of 16 with a zero point per column.
fn signed_int4() -> Weight {
    Weight {
        k: 4,
        n: 2,
        bits: 4,
        signed: true,
        layout: Layout::Blocked(16),
        codes: vec![0, 1, -1, 7, -8, 3, 2, -5],
        scales: vec![0.5, 0.25],
        zero_points: Some(vec![1, -2]),
    }
}

/// Without zero points, an unshifted nibble meets MatMulNBits' default zero point 8.
#[test]
fn unshifted_codes_without_zero_points_are_refuted_too() {
    let mut w = signed_int4();
    w.zero_points = None;
    assert!(matches!(check(&w, &pack_shifted(&w, 0)), Verdict::Refuted { .. }));
    assert!(check(&w, &pack(&w)).is_exact());
}
