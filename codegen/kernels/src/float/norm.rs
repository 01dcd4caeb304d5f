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

use super::dq::Operand;
use super::elementwise::RUN;
use super::{ShapeError, bail, check_len};
use crate::isa::{Isa, Kernels};

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
    let params = [scale, bias, mean, var].map(Operand::F32);
    check_batch_norm(x.len(), batch, channels, spatial, &params, out.len())?;
    batch_norm_generic(x, channels, spatial, &params, epsilon, out);
    Ok(())
}

/// [`batch_norm`] on the kernel path `kernels`, with parameters (scale, B, mean, var) that may
/// be codes ([`Operand::Codes`], a dequantized constant): each channel's four parameters are
/// decoded where the channel's `a` and `b` are computed, a few scalars per channel and no buffer.
/// The same decoded values in the same operations: [`batch_norm`]'s bits on the float copy, on
/// every path.
#[allow(clippy::too_many_arguments)] // ONNX's five inputs plus the layout and the path
pub fn batch_norm_operands(
    kernels: Kernels,
    x: &[f32],
    batch: usize,
    channels: usize,
    spatial: usize,
    params: [Operand<'_>; 4],
    epsilon: f32,
    out: &mut [f32],
) -> Result<(), ShapeError> {
    check_batch_norm(x.len(), batch, channels, spatial, &params, out.len())?;
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI;
        // the function only lets the compiler use AVX-512F instructions for safe code.
        Isa::Avx512Vnni => unsafe { batch_norm_avx512(x, channels, spatial, &params, epsilon, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked.
        Isa::Avx2 => unsafe { batch_norm_avx2(x, channels, spatial, &params, epsilon, out) },
        _ => batch_norm_generic(x, channels, spatial, &params, epsilon, out),
    }
    Ok(())
}

fn check_batch_norm(x: usize, batch: usize, channels: usize, spatial: usize, params: &[Operand<'_>; 4], out: usize) -> Result<(), ShapeError> {
    check_len("BatchNormalization input", x, &[batch, channels, spatial])?;
    check_len("BatchNormalization output", out, &[batch, channels, spatial])?;
    for (what, v) in ["BatchNormalization scale", "BatchNormalization B", "BatchNormalization mean", "BatchNormalization var"].into_iter().zip(params) {
        check_len(what, v.len(), &[channels])?;
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn batch_norm_avx512(x: &[f32], channels: usize, spatial: usize, params: &[Operand<'_>; 4], epsilon: f32, out: &mut [f32]) {
    batch_norm_generic(x, channels, spatial, params, epsilon, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn batch_norm_avx2(x: &[f32], channels: usize, spatial: usize, params: &[Operand<'_>; 4], epsilon: f32, out: &mut [f32]) {
    batch_norm_generic(x, channels, spatial, params, epsilon, out)
}

/// Per plane (image, channel c): `a` and `b` of channel c from its four parameters, then
/// `y = x·a + b` over the plane (sizes checked by the caller).
#[inline(always)]
fn batch_norm_generic(x: &[f32], channels: usize, spatial: usize, [scale, bias, mean, var]: &[Operand<'_>; 4], epsilon: f32, out: &mut [f32]) {
    for (i, (ys, xs)) in out.chunks_mut(spatial.max(1)).zip(x.chunks(spatial.max(1))).enumerate() {
        let c = i % channels;
        let inv = 1.0 / (var.get(c) + epsilon).sqrt();
        let a = inv * scale.get(c);
        let b = bias.get(c) - mean.get(c) * a;
        for (y, &v) in ys.iter_mut().zip(xs) {
            *y = v * a + b;
        }
    }
}

/// LayerNormalization over the last `size` elements: `x` is `[rows][size]`, `scale` and the
/// optional `bias` have `size` entries; `out` as `x`.
pub fn layer_norm(x: &[f32], rows: usize, size: usize, scale: &[f32], bias: Option<&[f32]>, epsilon: f32, out: &mut [f32]) -> Result<(), ShapeError> {
    let (scale, bias) = (Operand::F32(scale), bias.map(Operand::F32));
    check_layer_norm(x.len(), rows, size, scale, bias, out.len())?;
    layer_norm_generic(x, size, scale, bias, epsilon, out);
    Ok(())
}

/// [`layer_norm`] on the kernel path `kernels`, with a scale and bias that may be codes
/// ([`Operand::Codes`], a dequantized constant): decoded per row, [`RUN`] elements at a time
/// into stack buffers, where the row's outputs read them. The same decoded values in the same
/// operations: [`layer_norm`]'s bits on the float copy, on every path.
#[allow(clippy::too_many_arguments)] // ONNX's three inputs plus the layout and the path
pub fn layer_norm_operands(
    kernels: Kernels,
    x: &[f32],
    rows: usize,
    size: usize,
    scale: Operand<'_>,
    bias: Option<Operand<'_>>,
    epsilon: f32,
    out: &mut [f32],
) -> Result<(), ShapeError> {
    check_layer_norm(x.len(), rows, size, scale, bias, out.len())?;
    match kernels.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `kernels` was made by `Kernels::new`/`detect`, which checked AVX-512 F/BW/VNNI;
        // the function only lets the compiler use AVX-512F instructions for safe code.
        Isa::Avx512Vnni => unsafe { layer_norm_avx512(x, size, scale, bias, epsilon, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, AVX2 was checked.
        Isa::Avx2 => unsafe { layer_norm_avx2(x, size, scale, bias, epsilon, out) },
        _ => layer_norm_generic(x, size, scale, bias, epsilon, out),
    }
    Ok(())
}

fn check_layer_norm(x: usize, rows: usize, size: usize, scale: Operand<'_>, bias: Option<Operand<'_>>, out: usize) -> Result<(), ShapeError> {
    check_len("LayerNormalization input", x, &[rows, size])?;
    check_len("LayerNormalization output", out, &[rows, size])?;
    check_len("LayerNormalization scale", scale.len(), &[size])?;
    if let Some(b) = bias {
        check_len("LayerNormalization bias", b.len(), &[size])?;
    }
    if size == 0 {
        bail!("LayerNormalization: empty normalized axis");
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn layer_norm_avx512(x: &[f32], size: usize, scale: Operand<'_>, bias: Option<Operand<'_>>, epsilon: f32, out: &mut [f32]) {
    layer_norm_generic(x, size, scale, bias, epsilon, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn layer_norm_avx2(x: &[f32], size: usize, scale: Operand<'_>, bias: Option<Operand<'_>>, epsilon: f32, out: &mut [f32]) {
    layer_norm_generic(x, size, scale, bias, epsilon, out)
}

/// Per row: the mean, the deviations `d` (a buffer of one row), the variance and `inv`, then
/// `y = d·inv·scale + bias` [`RUN`] outputs at a time, the scale and bias of those outputs read
/// from f32 or decoded from codes (sizes checked by the caller).
#[inline(always)]
fn layer_norm_generic(x: &[f32], size: usize, scale: Operand<'_>, bias: Option<Operand<'_>>, epsilon: f32, out: &mut [f32]) {
    let n = size as f32;
    let mut d = vec![0f32; size];
    let (mut gs, mut bs) = ([0f32; RUN], [0f32; RUN]);
    for (ys, xs) in out.chunks_mut(size).zip(x.chunks(size)) {
        let mean = xs.iter().fold(0f32, |s, &v| s + v) / n;
        for (d, &v) in d.iter_mut().zip(xs) {
            *d = v - mean;
        }
        let var = d.iter().fold(0f32, |s, &v| s + v * v) / n;
        let inv = 1.0 / (var + epsilon).sqrt();
        for (c, (ys, d)) in ys.chunks_mut(RUN).zip(d.chunks(RUN)).enumerate() {
            let g = read(scale, c * RUN, &mut gs[..ys.len()]);
            match bias {
                Some(b) => {
                    let b = read(b, c * RUN, &mut bs[..ys.len()]);
                    for ((y, &v), (&g, &bb)) in ys.iter_mut().zip(d).zip(g.iter().zip(b)) {
                        *y = v * inv * g + bb;
                    }
                }
                None => {
                    for ((y, &v), &g) in ys.iter_mut().zip(d).zip(g) {
                        *y = v * inv * g;
                    }
                }
            }
        }
    }
}

/// Elements `at .. at + buf.len()` of `x`: f32 in place, codes decoded into `buf`.
#[inline(always)]
fn read<'b>(x: Operand<'b>, at: usize, buf: &'b mut [f32]) -> &'b [f32] {
    match x {
        Operand::F32(v) => &v[at..][..buf.len()],
        Operand::Codes(d) => {
            d.decode(at, buf);
            buf
        }
    }
}
