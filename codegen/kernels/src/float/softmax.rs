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
    // All `inner` slices of one outer index at once, each in its own lane, so the loops run
    // along contiguous memory (and vectorize) while every slice keeps the order above.
    let mut e = vec![0f64; n * inner];
    let (mut m, mut s) = (vec![f32::NEG_INFINITY; inner], vec![0f64; inner]);
    for (xo, yo) in x.chunks_exact((n * inner).max(1)).zip(out.chunks_exact_mut((n * inner).max(1))).take(outer) {
        m.fill(f32::NEG_INFINITY);
        s.fill(0.0);
        for xi in xo.chunks_exact(inner) {
            m.iter_mut().zip(xi).for_each(|(m, &v)| *m = if v > *m { v } else { *m });
        }
        for (ei, xi) in e.chunks_exact_mut(inner).zip(xo.chunks_exact(inner)) {
            for (((e, s), &v), &m) in ei.iter_mut().zip(s.iter_mut()).zip(xi).zip(&m) {
                *e = math::exp64(f64::from(v) - f64::from(m));
                *s += *e;
            }
        }
        for (yi, ei) in yo.chunks_exact_mut(inner).zip(e.chunks_exact(inner)) {
            yi.iter_mut().zip(ei).zip(&s).for_each(|((y, &e), &s)| *y = (e / s) as f32);
        }
    }
    Ok(())
}
