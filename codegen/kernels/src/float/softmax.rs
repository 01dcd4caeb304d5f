//! Softmax along one axis (opset 13 semantics: the axis alone, not the flattened tail).
//!
//! Evaluation order, per slice along the axis (elements in index order): `m = −∞`, `m = v`
//! whenever `v > m`; `e_i = exp64(f64(x_i) − f64(m))` ([`math::exp64`]); `s = Σ e_i` in f64 in
//! index order from +0; `y_i = f32(e_i / s)`. So each output is within about one f32 ulp of the
//! exact softmax, the same bits everywhere. ONNX Runtime (MLAS) instead sums f32 exponentials of
//! its own polynomial and multiplies by `1/s`: its outputs differ by a few ulps (measured by
//! `tests/float_ort.rs`). A slice holding +∞, or only −∞, gives NaN.

use super::{ShapeError, check_len, math};

/// `out = Softmax(x)` along `axis` (negative counts from the end).
pub fn softmax(x: &[f32], shape: &[usize], axis: i64, out: &mut [f32]) -> Result<(), ShapeError> {
    check_len("Softmax input", x.len(), shape)?;
    check_len("Softmax output", out.len(), shape)?;
    let a = super::axis(axis, shape.len())?;
    let (n, inner) = (shape[a], shape[a + 1..].iter().product::<usize>());
    let outer = shape[..a].iter().product::<usize>();
    let mut e = vec![0f64; n];
    for o in 0..outer {
        for j in 0..inner {
            let at = |i: usize| (o * n + i) * inner + j;
            let m = (0..n).fold(f32::NEG_INFINITY, |m, i| if x[at(i)] > m { x[at(i)] } else { m });
            let mut s = 0f64;
            for (i, ei) in e.iter_mut().enumerate() {
                *ei = math::exp64(f64::from(x[at(i)]) - f64::from(m));
                s += *ei;
            }
            for (i, &ei) in e.iter().enumerate() {
                out[at(i)] = (ei / s) as f32;
            }
        }
    }
    Ok(())
}
