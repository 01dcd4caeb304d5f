//! Broken weight-only rewrites: an embedding lookup that moves the codes but not their per-row
//! parameters, and a weight folding that distributes the scale over the zero point.

use crate::Broken;
use qdqc_exact::movement::{ParamLayout, Params, Rewritten, gather_before_dequantize};
use qdqc_exact::p1::exhaustive;
use qdqc_exact::reference::{CodeType, dequantize};
use qdqc_exact::{QParam, Verdict};

/// An int8 embedding table [8, 4] with per-row scales and zero points (DQ axis 0).
const ROWS: i64 = 8;
const COLS: i64 = 4;

fn per_row() -> Params {
    Params {
        dims: vec![ROWS],
        scales: (0..ROWS).map(|r| (0.01 * (r + 1) as f32).to_bits()).collect(),
        zero_points: (0..ROWS).map(|r| r - 4).collect(),
        layout: ParamLayout::PerAxis { axis: 0 },
    }
}

fn codes() -> Vec<i64> {
    (0..ROWS * COLS).map(|i| (i * 37) % 255 - 127).collect()
}

/// `Gather(DQ(W), idx)` against the rewritten form, at every element for every index.
fn lookup(rewritten: Rewritten) -> Verdict {
    gather_before_dequantize(&[ROWS, COLS], 0, Some(&codes()), &per_row(), &rewritten)
}

pub fn rules() -> Vec<Broken> {
    vec![
        Broken {
            name: "gather_rows_keep_first_row_scale",
            claim: "Gather(DQ(W), idx) = DQ(Gather(W, idx)) with the DQ's parameters left as they were (per-row scales read as the first row's)",
            broken: || {
                let p = per_row();
                lookup(Rewritten { codes: None, dims: vec![1], scales: p.scales, zero_points: p.zero_points, gathered: false, axis: 0, block: 0 })
            },
            // The rule's form: parameters reshaped to [rows, 1], gathered with idx, one block per row.
            twin: Some(|| {
                let p = per_row();
                lookup(Rewritten { codes: None, dims: vec![ROWS, 1], scales: p.scales, zero_points: p.zero_points, gathered: true, axis: -1, block: COLS })
            }),
        },
        Broken {
            name: "fold_weights_distributed_zero_point",
            claim: "a folded weight may be computed as q·s − zp·s (the scale distributed over the zero point)",
            broken: || folded(|q, p| q as f32 * p.scale - p.zero_point as f32 * p.scale),
            twin: Some(|| folded(|q, p| dequantize(q, p.scale, p.zero_point))),
        },
    ]
}

/// A folded int8 weight against ORT's DQ, over every code.
fn folded(fold: fn(i64, QParam) -> f32) -> Verdict {
    let p = QParam::new(0.0123, 7, CodeType::I8);
    crate::as_f32(exhaustive(
        &[p.domain("q")],
        "folded value against DQ(q) for every code",
        |q| dequantize(q[0], p.scale, p.zero_point).to_bits() as i64,
        |q| fold(q[0], p).to_bits() as i64,
        |_| None,
    ))
}
