//! BatchNormalization (inference) and LayerNormalization in f32.
//!
//! Evaluation orders (every operation f32, rounded on its own, no FMA):
//! - BatchNormalization, per channel c, ONNX Runtime's CPU order (`batch_norm.h`), so the bits are
//!   ORT's where it runs the op unfused (`tests/float_ort.rs`): `inv = 1/√(var + ε)`,
//!   `a = inv·scale`, `b = bias − mean·a`; per element `y = x·a + b`.
//! - LayerNormalization over the trailing `size` elements of each row, ONNX's function body with
//!   `stash_type = 1` (f32): `mean = (Σ x)/size`; `d = x − mean`; `var = (Σ d·d)/size`;
//!   `inv = 1/√(var + ε)`; `y = d·inv·scale + bias` (left to right), the sums from +0 in index
//!   order. ONNX Runtime 1.31.1 computes it otherwise (its order is not the one of its 1.25
//!   sources, `E[x²] − E[x]²`, nor a two-pass one: probed); the deviation from it is measured in
//!   `tests/float_ort.rs`.

use super::{ShapeError, bail, check_len};

/// BatchNormalization, inference mode: `x` is `[batch][channels][spatial]`, the four parameter
/// vectors have `channels` entries; `out` as `x`.
#[allow(clippy::too_many_arguments)] // ONNX's five inputs plus the layout
pub fn batch_norm(
    x: &[f32],
    batch: usize,
    channels: usize,
    spatial: usize,
    scale: &[f32],
    bias: &[f32],
    mean: &[f32],
    var: &[f32],
    epsilon: f32,
    out: &mut [f32],
) -> Result<(), ShapeError> {
    check_len("BatchNormalization input", x.len(), &[batch, channels, spatial])?;
    check_len("BatchNormalization output", out.len(), &[batch, channels, spatial])?;
    for (what, v) in [("BatchNormalization scale", scale), ("BatchNormalization B", bias), ("BatchNormalization mean", mean), ("BatchNormalization var", var)] {
        check_len(what, v.len(), &[channels])?;
    }
    let (a, b): (Vec<f32>, Vec<f32>) = (0..channels)
        .map(|c| {
            let inv = 1.0 / (var[c] + epsilon).sqrt();
            let a = inv * scale[c];
            (a, bias[c] - mean[c] * a)
        })
        .unzip();
    for (i, (ys, xs)) in out.chunks_mut(spatial.max(1)).zip(x.chunks(spatial.max(1))).take(batch * channels).enumerate() {
        let (a, b) = (a[i % channels], b[i % channels]);
        ys.iter_mut().zip(xs).for_each(|(y, &v)| *y = v * a + b);
    }
    Ok(())
}

/// LayerNormalization over the last `size` elements: `x` is `[rows][size]`, `scale` and the
/// optional `bias` have `size` entries; `out` as `x`.
pub fn layer_norm(x: &[f32], rows: usize, size: usize, scale: &[f32], bias: Option<&[f32]>, epsilon: f32, out: &mut [f32]) -> Result<(), ShapeError> {
    check_len("LayerNormalization input", x.len(), &[rows, size])?;
    check_len("LayerNormalization output", out.len(), &[rows, size])?;
    check_len("LayerNormalization scale", scale.len(), &[size])?;
    if let Some(b) = bias {
        check_len("LayerNormalization bias", b.len(), &[size])?;
    }
    if size == 0 {
        bail!("LayerNormalization: empty normalized axis");
    }
    let n = size as f32;
    let mut d = vec![0f32; size];
    for (ys, xs) in out.chunks_mut(size).zip(x.chunks(size)) {
        let mean = xs.iter().fold(0f32, |s, &v| s + v) / n;
        d.iter_mut().zip(xs).for_each(|(d, &v)| *d = v - mean);
        let var = d.iter().fold(0f32, |s, &v| s + v * v) / n;
        let inv = 1.0 / (var + epsilon).sqrt();
        match bias {
            Some(b) => ys.iter_mut().zip(&d).zip(scale.iter().zip(b)).for_each(|((y, &v), (&g, &bb))| *y = v * inv * g + bb),
            None => ys.iter_mut().zip(&d).zip(scale).for_each(|((y, &v), &g)| *y = v * inv * g),
        }
    }
    Ok(())
}
