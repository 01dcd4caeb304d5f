//! Broken claims about the A8W8 group with per-row activation parameters (the kernel crate's
//! `a8w8::A8W8`, `rewrites/src/rules/a8w8.rs`), each checked by P1 over every activation pair of
//! a K = 2 row against the exact rational value of the unfused group.

use crate::Broken;
use qdqc_exact::num::Dyadic;
use qdqc_exact::p1::{Domain, exhaustive};
use qdqc_exact::reference::{CodeType, dequantize, dequantize_real, quantize_real};
use qdqc_exact::{QParam, Verdict};
use qdqc_kernels::a8w8::A8W8;
use qdqc_kernels::requant::{Code, Output};
use qdqc_kernels::{Isa, Kernels, Layout, PackedB};

pub fn rules() -> Vec<Broken> {
    vec![
        Broken {
            name: "rust_a8w8_per_k_scale_folded_per_row",
            claim: "an activation scale that varies along K can be folded into the A8W8 epilogue as the row's scale (its first element): the scales weight the products inside the sum",
            broken: || fold_per_k([0.011, 0.037]),
            // Equal along K: the scale is the row's, and the fold is the group.
            twin: Some(|| fold_per_k([0.011, 0.011])),
        },
        Broken {
            name: "rust_a8w8_row_zero_point_ignored",
            claim: "the A8W8 GEMM can run with activation zero point 0 and leave the per-row zero point out (no −zx[m]·Σ_k(w − zw) correction)",
            broken: || row_zero_point(false),
            twin: Some(|| row_zero_point(true)),
        },
        Broken {
            name: "rust_a8w8_float_output_rounded_per_product",
            claim: "the float-output A8W8 group (one rounding of the exact value, `rne_f32`) meets `exact` for any scales: the float path rounds every product and partial sum to f32",
            broken: || float_output(0.0123, 0.0043),
            // Power-of-two scales and short codes: every product and sum is exact (P2).
            twin: Some(|| float_output(1.0 / 64.0, 1.0 / 256.0)),
        },
    ]
}

const W: [i64; 2] = [93, -58];
const ZW: i64 = 7;
const SW: f32 = 0.0043;
const Y: QParam = QParam { scale: 0.021, zero_point: 131, code: CodeType::U8 };

/// The unfused K = 2 row: `Σ_k DQ(x[k]; sx[k], zx)·DQ(w[k]; sw, zw)`, quantized exactly.
fn unfused(a: &[i64], sx: [f32; 2], zx: i64) -> i64 {
    let term = |k: usize| dequantize_real(a[k], sx[k], zx).unwrap().checked_mul(dequantize_real(W[k], SW, ZW).unwrap()).unwrap();
    quantize_real(term(0).checked_add(term(1)).unwrap_or(Dyadic::ZERO), Y.scale, Y.zero_point, Y.code).unwrap()
}

/// The kernel on one row `a` (u8 codes) with row parameter `(sx, zx)`.
fn kernel(a: &[i64], sx: f32, zx: i32) -> i64 {
    let w: Vec<i8> = W.iter().map(|&v| v as i8).collect();
    let b = PackedB::from_i8(&w, 2, 1, Layout::KN, &[ZW as i8]).unwrap();
    let plan = A8W8::new(&b, &[sx], &[zx], &[SW], &[], &[], Y.scale, Output::new(Y.zero_point as i32, Code::U8).unwrap()).unwrap();
    let x: Vec<u8> = a.iter().map(|&v| v as u8).collect();
    let (mut acc, mut y) = ([0i32], [0u8]);
    plan.run(Kernels::new(Isa::Portable).unwrap(), &x, 1, &b, &mut acc, &mut y).unwrap();
    i64::from(y[0])
}

/// Activation scales `sx` along K (zero point 97), against the kernel with `sx[0]` per row.
fn fold_per_k(sx: [f32; 2]) -> Verdict {
    let domains = [Domain::new("x0", (0, 255), 97), Domain::new("x1", (0, 255), 97)];
    exhaustive(&domains, "K = 2 row, every activation pair", |a| unfused(a, sx, 97), |a| kernel(a, sx[0], 97), |_| None)
}

/// A row with zero point 97: the kernel (`corrected`), or the kernel told the zero point is 0.
fn row_zero_point(corrected: bool) -> Verdict {
    let domains = [Domain::new("x0", (0, 255), 97), Domain::new("x1", (0, 255), 97)];
    let zx = if corrected { 97 } else { 0 };
    // Without the correction the accumulator is Σ x·(w − zw); the ratio is the row's.
    exhaustive(&domains, "K = 2 row, every activation pair", |a| unfused(a, [0.013; 2], 97), |a| kernel(a, 0.013, zx), |_| None)
}

/// The float-output row `DQ(x)·DQ(w)` (K = 2, zero points 97 and 7): the float path of ONNX's
/// MatMul (`fl(fl(x0·w0) + fl(x1·w1))` of the f32 DQs) against the kernel's `run_f32`, as f32 bits.
fn float_output(sx: f32, sw: f32) -> Verdict {
    let w: Vec<i8> = W.iter().map(|&v| v as i8).collect();
    let b = PackedB::from_i8(&w, 2, 1, Layout::KN, &[ZW as i8]).unwrap();
    let plan = A8W8::float(&b, &[sx], &[97], &[sw]).unwrap();
    let kernel = |a: &[i64]| {
        let x: Vec<u8> = a.iter().map(|&v| v as u8).collect();
        let (mut acc, mut y) = ([0i32], [0f32]);
        plan.run_f32(Kernels::new(Isa::Portable).unwrap(), &x, 1, &b, &mut acc, &mut y).unwrap();
        i64::from(y[0].to_bits())
    };
    let float_path = |a: &[i64]| {
        let p = |k: usize| dequantize(a[k], sx, 97) * dequantize(W[k], sw, ZW);
        i64::from((p(0) + p(1)).to_bits())
    };
    let domains = [Domain::new("x0", (0, 255), 97), Domain::new("x1", (0, 255), 97)];
    crate::as_f32(exhaustive(&domains, "K = 2 row, every activation pair, f32 bits", float_path, kernel, |_| None))
}
