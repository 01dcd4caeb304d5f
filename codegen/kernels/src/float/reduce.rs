//! f32 reductions over a set of axes: ReduceSum, ReduceMean, ReduceMax, ReduceMin.
//!
//! Evaluation order, per output element: the reduced elements visited in row-major order of the
//! reduced axes (last axis fastest); Sum: `s = +0`, `s = s + v`; Mean: that sum, then `s / count`
//! (one IEEE division); Max: `m = −∞`, `m = v` whenever `v > m`, a NaN skipped (ORT 1.31.1 keeps or
//! drops one depending on its place: probed, not reproduced); Min: `m = +∞`, `m = v` whenever
//! `v < m`, the same way (a max and a min are exact: ORT's value whatever its order, NaN aside). Axes are given
//! explicitly (the caller resolves ONNX's empty-axes default: all axes, or none with
//! `noop_with_empty_axes`); an empty reduction gives +0 (Sum), NaN (Mean), −∞ (Max) or +∞ (Min).

use super::{ShapeError, bail, check_len, numel};

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Mean,
    Max,
    Min,
}

/// The output shape: reduced axes become 1 (`keepdims`) or disappear.
pub fn reduce_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Result<Vec<usize>, ShapeError> {
    if let Some(&a) = axes.iter().find(|&&a| a >= shape.len()) {
        bail!("reduce: axis {a} out of range for shape {shape:?}");
    }
    Ok(shape.iter().enumerate().filter_map(|(i, &d)| if axes.contains(&i) { keepdims.then_some(1) } else { Some(d) }).collect())
}

/// `out = Reduce(x)` over `axes` (out's length is the product of the kept extents).
pub fn reduce(kind: Reduce, x: &[f32], shape: &[usize], axes: &[usize], out: &mut [f32]) -> Result<(), ShapeError> {
    check_len("reduce input", x.len(), shape)?;
    let kept_shape = reduce_shape(shape, axes, false)?;
    check_len("reduce output", out.len(), &kept_shape)?;
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let split = |pick: bool| -> (Vec<usize>, Vec<usize>) { (0..shape.len()).filter(|i| axes.contains(i) == pick).map(|i| (shape[i], strides[i])).unzip() };
    let (kept, kept_strides) = split(false);
    let (red, red_strides) = split(true);
    let count = numel(&red);
    let offsets = |extents: &[usize], strides: &[usize]| -> Vec<usize> {
        let mut v = vec![0usize];
        for (&e, &s) in extents.iter().zip(strides) {
            v = v.iter().flat_map(|&o| (0..e).map(move |i| o + i * s)).collect();
        }
        v
    };
    let inner = offsets(&red, &red_strides);
    for (y, base) in out.iter_mut().zip(offsets(&kept, &kept_strides)) {
        *y = match kind {
            Reduce::Max => inner.iter().fold(f32::NEG_INFINITY, |m, &o| if x[base + o] > m { x[base + o] } else { m }),
            Reduce::Min => inner.iter().fold(f32::INFINITY, |m, &o| if x[base + o] < m { x[base + o] } else { m }),
            Reduce::Sum | Reduce::Mean => {
                let s = inner.iter().fold(0.0f32, |s, &o| s + x[base + o]);
                if kind == Reduce::Mean { s / count as f32 } else { s }
            }
        };
    }
    Ok(())
}
