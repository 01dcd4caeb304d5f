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
    layer_norm_generic::<false>(x, size, scale, bias, epsilon, out);
    Ok(())
}

/// [`layer_norm`] on the kernel path `kernels`, with a scale and bias that may be codes
/// ([`Operand::Codes`], a dequantized constant): decoded per group of rows, [`RUN`] elements at
/// a time into stack buffers, where the group's outputs read them. The same decoded values in the
/// same operations: [`layer_norm`]'s bits on the float copy, on every path.
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
        _ => layer_norm_generic::<false>(x, size, scale, bias, epsilon, out),
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
    layer_norm_generic::<false>(x, size, scale, bias, epsilon, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn layer_norm_avx2(x: &[f32], size: usize, scale: Operand<'_>, bias: Option<Operand<'_>>, epsilon: f32, out: &mut [f32]) {
    layer_norm_generic::<true>(x, size, scale, bias, epsilon, out)
}

/// Rows whose sums run side by side: each row's sum is one sequential chain of dependent adds
/// (the order is the semantics), so one row at a time waits on the add's latency at every
/// element; [`GROUP`] independent chains keep the adder busy.
const GROUP: usize = 8;

/// Per group of up to [`GROUP`] rows: the means, the deviations `d` (a buffer of the group), the
/// variances and `inv`, then `y = d·inv·scale + bias` [`RUN`] outputs at a time, the scale and
/// bias of those outputs read from f32 or decoded from codes once for the group's rows (sizes
/// checked by the caller). Every row's operations are the module header's, in its order. `AVX2`:
/// the caller runs with AVX2 (whole groups' sums then by [`sums_avx2`]).
#[inline(always)]
fn layer_norm_generic<const AVX2: bool>(x: &[f32], size: usize, scale: Operand<'_>, bias: Option<Operand<'_>>, epsilon: f32, out: &mut [f32]) {
    let n = size as f32;
    let mut d = vec![0f32; GROUP * size];
    let (mut gs, mut bs) = ([0f32; RUN], [0f32; RUN]);
    for (ys, xs) in out.chunks_mut(GROUP * size).zip(x.chunks(GROUP * size)) {
        let rows = xs.len() / size;
        let d = &mut d[..rows * size];
        let mut inv = [0f32; GROUP];
        let sums = sums_of::<AVX2, false>(xs, size);
        for (r, (ds, xs)) in d.chunks_exact_mut(size).zip(xs.chunks_exact(size)).enumerate() {
            let mean = sums[r] / n;
            for (d, &v) in ds.iter_mut().zip(xs) {
                *d = v - mean;
            }
        }
        let squares = sums_of::<AVX2, true>(d, size);
        for (inv, &sq) in inv.iter_mut().zip(&squares[..rows]) {
            let var = sq / n;
            *inv = 1.0 / (var + epsilon).sqrt();
        }
        for c in (0..size).step_by(RUN) {
            let len = RUN.min(size - c);
            let g = read(scale, c, &mut gs[..len]);
            let b = bias.map(|b| read(b, c, &mut bs[..len]));
            for ((ys, ds), &inv) in ys.chunks_exact_mut(size).zip(d.chunks_exact(size)).zip(&inv) {
                let (ys, ds) = (&mut ys[c..][..len], &ds[c..][..len]);
                match b {
                    Some(b) => {
                        for ((y, &v), (&g, &bb)) in ys.iter_mut().zip(ds).zip(g.iter().zip(b)) {
                            *y = v * inv * g + bb;
                        }
                    }
                    None => {
                        for ((y, &v), &g) in ys.iter_mut().zip(ds).zip(g) {
                            *y = v * inv * g;
                        }
                    }
                }
            }
        }
    }
}

/// `Σ v` (`Σ v·v` with `SQUARE`) of each of the (up to [`GROUP`]) rows of `size` elements in
/// `xs`, from +0 in index order, the rows' chains interleaved; a whole group on AVX2 by
/// [`sums_avx2`] (`AVX2`: the caller runs with AVX2).
#[inline(always)]
fn sums_of<const AVX2: bool, const SQUARE: bool>(xs: &[f32], size: usize) -> [f32; GROUP] {
    let f = |v: f32| if SQUARE { v * v } else { v };
    let mut s = [0f32; GROUP];
    if xs.len() == GROUP * size {
        let mut from = 0;
        #[cfg(target_arch = "x86_64")]
        if AVX2 {
            // SAFETY: the caller runs with AVX2 (`AVX2`); `xs` holds GROUP rows of `size`.
            (s, from) = unsafe { sums_avx2::<SQUARE>(xs, size) };
        }
        for i in from..size {
            for (r, s) in s.iter_mut().enumerate() {
                *s += f(xs[r * size + i]);
            }
        }
    } else {
        for (s, row) in s.iter_mut().zip(xs.chunks_exact(size)) {
            for &v in row {
                *s += f(v);
            }
        }
    }
    s
}

/// The sums of [`sums_of`] over the first `size / 8 · 8` elements of each of the [`GROUP`] (8)
/// rows, and where they stop: 8 × 8 blocks transposed in registers, so that vector j holds
/// element `i0 + j` of every row (lane r: row r) and the adds, j = 0..8 in turn, are each row's
/// next adds in index order, one lane per row (the squares, `vmulps`, as the scalar `v·v`; no
/// FMA). The scalar form read the rows strided, an element and a bounds check per add: 2.5 % of
/// the MiniLM encoder's time for the two sums of its LayerNormalizations on a Zen 3 host.
///
/// # Safety
/// AVX2 present; `xs` holds [`GROUP`] rows of `size` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sums_avx2<const SQUARE: bool>(xs: &[f32], size: usize) -> ([f32; GROUP], usize) {
    use std::arch::x86_64::*;
    const { assert!(GROUP == 8) };
    assert!(xs.len() == GROUP * size);
    let whole = size / 8 * 8;
    let mut acc = _mm256_setzero_ps();
    for i0 in (0..whole).step_by(8) {
        // SAFETY: row r's elements i0..i0 + 8 lie within its `size` (i0 + 8 ≤ whole ≤ size).
        let v: [__m256; 8] = std::array::from_fn(|r| unsafe { _mm256_loadu_ps(xs.as_ptr().add(r * size + i0)) });
        let v = if SQUARE { v.map(|v| _mm256_mul_ps(v, v)) } else { v };
        // Rows × elements to elements × rows.
        let t = [0, 1, 2, 3].map(|i| [_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1])]);
        let u = [0, 1].map(|h| {
            [
                _mm256_shuffle_ps::<0x44>(t[2 * h][0], t[2 * h + 1][0]),
                _mm256_shuffle_ps::<0xee>(t[2 * h][0], t[2 * h + 1][0]),
                _mm256_shuffle_ps::<0x44>(t[2 * h][1], t[2 * h + 1][1]),
                _mm256_shuffle_ps::<0xee>(t[2 * h][1], t[2 * h + 1][1]),
            ]
        });
        // Element j of rows 0–3 (low lane of u[0]) and 4–7 (low lane of u[1]); j + 4 in the high lanes.
        for (lo, hi) in u[0].iter().zip(&u[1]) {
            acc = _mm256_add_ps(acc, _mm256_permute2f128_ps::<0x20>(*lo, *hi));
        }
        for (lo, hi) in u[0].iter().zip(&u[1]) {
            acc = _mm256_add_ps(acc, _mm256_permute2f128_ps::<0x31>(*lo, *hi));
        }
    }
    let mut s = [0f32; GROUP];
    // SAFETY: `s` holds 8 f32.
    unsafe { _mm256_storeu_ps(s.as_mut_ptr(), acc) };
    (s, whole)
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
