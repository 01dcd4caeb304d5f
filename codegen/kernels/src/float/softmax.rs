//! Softmax along one axis (opset 13 semantics: the axis alone, not the flattened tail).
//!
//! Evaluation order, per slice along the axis (elements in index order): `m = −∞`, `m = v`
//! whenever `v > m`; `e_i = exp64(f64(x_i) − f64(m))` ([`math::exp64`]); `s = Σ e_i` in f64 in
//! index order from +0; `y_i = f32(e_i / s)`. So each output is within about one f32 ulp of the
//! exact softmax, the same bits everywhere. ONNX Runtime (MLAS) instead sums f32 exponentials of
//! its own polynomial and multiplies by `1/s`: its outputs differ by a few ulps (measured by
//! `tests/float_ort.rs`). A slice holding +∞, or only −∞, gives NaN.
//!
//! The kernel paths differ in register width only: the exponentials and the divisions are
//! independent per element (one loop each, which the compiler vectorizes: 8 f64 lanes under
//! AVX-512F, 4 under AVX2, 2 on the portable path), the maximum and the sum stay sequential loops
//! in index order, and no path contracts a multiply and an add, so every path gives the same bits.

use super::{ShapeError, check_len, math};
use crate::isa::{Isa, Kernels};

/// `out = Softmax(x)` along `axis` (negative counts from the end), on the kernel path `kernels`.
pub fn softmax(kernels: Kernels, x: &[f32], shape: &[usize], axis: i64, out: &mut [f32]) -> Result<(), ShapeError> {
    check_len("Softmax input", x.len(), shape)?;
    check_len("Softmax output", out.len(), shape)?;
    let a = super::axis(axis, shape.len())?;
    let (n, inner) = (shape[a], shape[a + 1..].iter().product::<usize>());
    let outer = shape[..a].iter().product::<usize>();
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI;
        // the function only lets the compiler use AVX-512F instructions for safe code.
        Isa::Avx512Vnni => unsafe { slices_avx512(x, n, inner, outer, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked.
        Isa::Avx2 => unsafe { slices_avx2(x, n, inner, outer, out) },
        _ => slices(x, n, inner, outer, out),
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn slices_avx512(x: &[f32], n: usize, inner: usize, outer: usize, out: &mut [f32]) {
    slices(x, n, inner, outer, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn slices_avx2(x: &[f32], n: usize, inner: usize, outer: usize, out: &mut [f32]) {
    slices(x, n, inner, outer, out)
}

/// Every slice of `outer × [n] × inner` in the order of the module header.
#[inline(always)]
fn slices(x: &[f32], n: usize, inner: usize, outer: usize, out: &mut [f32]) {
    let mut e = vec![0f64; n * inner];
    if inner == 1 {
        // The last axis: each slice is contiguous, so the exponentials of one slice form one
        // independent loop; the sum runs after it, in index order.
        for (xo, yo) in x.chunks_exact(n.max(1)).zip(out.chunks_exact_mut(n.max(1))).take(outer) {
            let mut m = f32::NEG_INFINITY;
            for &v in xo {
                m = if v > m { v } else { m };
            }
            let m = f64::from(m);
            // `for` loops, not `for_each` (an out-of-line `fold` would lose the caller's target
            // features: float/unary.rs).
            for (e, &v) in e.iter_mut().zip(xo) {
                *e = math::exp64(f64::from(v) - m);
            }
            let mut s = 0f64;
            for &e in &e {
                s += e;
            }
            for (y, &e) in yo.iter_mut().zip(&e) {
                *y = (e / s) as f32;
            }
        }
        return;
    }
    // All `inner` slices of one outer index at once, each in its own lane, so the loops run
    // along contiguous memory (and vectorize) while every slice keeps the order above.
    let (mut m, mut s) = (vec![f32::NEG_INFINITY; inner], vec![0f64; inner]);
    for (xo, yo) in x.chunks_exact((n * inner).max(1)).zip(out.chunks_exact_mut((n * inner).max(1))).take(outer) {
        m.fill(f32::NEG_INFINITY);
        s.fill(0.0);
        for xi in xo.chunks_exact(inner) {
            for (m, &v) in m.iter_mut().zip(xi) {
                *m = if v > *m { v } else { *m };
            }
        }
        for (ei, xi) in e.chunks_exact_mut(inner).zip(xo.chunks_exact(inner)) {
            for (((e, s), &v), &m) in ei.iter_mut().zip(s.iter_mut()).zip(xi).zip(&m) {
                *e = math::exp64(f64::from(v) - f64::from(m));
                *s += *e;
            }
        }
        for (yi, ei) in yo.chunks_exact_mut(inner).zip(e.chunks_exact(inner)) {
            for ((y, &e), &s) in yi.iter_mut().zip(ei).zip(&s) {
                *y = (e / s) as f32;
            }
        }
    }
}
