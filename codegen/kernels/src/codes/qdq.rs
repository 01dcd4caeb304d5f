//! QuantizeLinear (f32 → code) and DequantizeLinear (code → f32), per tensor and per axis, with
//! ONNX Runtime's arithmetic bit for bit (MLAS `MlasQuantizeLinearVector`, the same on its SSE2
//! and AVX-512F paths; the per-axis loops call it once per scale):
//!
//! - quantize: `f = fl32(x / s)`; `f = max(f, lo − zp)` and `min(f, hi − zp)` as `MAXPS`/`MINPS`
//!   (a NaN quotient takes the bound: NaN quantizes to `lo`); round half to even (`CVTPS2DQ`);
//!   `+ zp`. Clamping before the rounding equals clamping after it (the bounds are integers).
//!   This is ONNX's `saturate(rne(x / s) + zp)` with the quotient rounded to f32 first, so a
//!   quotient within half an f32 ulp of a half-integer can round differently from the exact
//!   `x/s`: the op is ORT's, not the exact real (the exact requantizations are in [`super::binary`],
//!   [`super::pool`] and [`crate::requant`]).
//! - dequantize: `fl32((q − zp) as f32 · s)`; `q − zp` is exact in f32 (|·| ≤ 510).
//!
//! Scales are taken as given (ORT does not check them); zero points must be codes of the type.

use super::shape::check_len;
use super::{CodesError, QCode, shape_err};

/// One value, ORT's QuantizeLinear.
#[inline]
pub fn quantize<Y: QCode>(x: f32, scale: f32, zero_point: i32) -> Y {
    let (lo, hi) = ((Y::MIN - zero_point) as f32, (Y::MAX - zero_point) as f32);
    let f = x / scale;
    // MAXPS / MINPS: the second operand whenever the comparison is false (NaN included).
    let f = if f > lo { f } else { lo };
    let f = if f < hi { f } else { hi };
    // Round half to even by adding 1.5·2^23 (default rounding mode): for |f| < 2^22 the sum lies
    // in [2^23, 2^24), where the f32 spacing is 1, so it is rne(f) + 1.5·2^23 exactly and its bits
    // minus those of 1.5·2^23 are rne(f); f lies within the clamped code range (|f| ≤ 383). Integer
    // lane operations only (no libm call, no saturating float-to-int conversion): the loop vectorizes.
    const MAGIC: f32 = 12_582_912.0;
    // f lies in [MIN − zp, MAX − zp] (integer bounds), so does its rounding: the code is in
    // range without a clamp, and its low byte is the code's bit pattern (a truncating cast).
    let code = ((f + MAGIC).to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32) + zero_point;
    debug_assert!((Y::MIN..=Y::MAX).contains(&code));
    Y::from_index(usize::from(code as u8))
}

/// One value, ORT's DequantizeLinear.
#[inline]
pub fn dequantize<X: QCode>(q: X, scale: f32, zero_point: i32) -> f32 {
    (q.value() - zero_point) as f32 * scale
}

/// The per-axis layout `[outer, len, inner]` of `shape` around `axis`, checked against the
/// parameters (one per tensor, or one per index of `axis`).
fn layout<T: QCode>(shape: &[usize], axis: usize, scales: &[f32], zero_points: &[i32]) -> Result<(usize, usize, usize), CodesError> {
    if let Some(&z) = zero_points.iter().find(|&&z| !(T::MIN..=T::MAX).contains(&z)) {
        return Err(CodesError::ZeroPoint(format!("zero point {z} outside {}..={}", T::MIN, T::MAX)));
    }
    if !zero_points.is_empty() && zero_points.len() != scales.len() {
        return shape_err(format!("{} zero points for {} scales", zero_points.len(), scales.len()));
    }
    if scales.len() == 1 {
        return Ok((1, 1, super::numel(shape)));
    }
    if axis >= shape.len() || shape[axis] != scales.len() {
        return shape_err(format!("{} scales along axis {axis} of shape {shape:?}", scales.len()));
    }
    Ok((shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product()))
}

/// QuantizeLinear over a tensor: one scale (per tensor) or `shape[axis]` scales (per axis);
/// `zero_points` empty (all 0) or one per scale.
pub fn quantize_linear<Y: QCode>(x: &[f32], shape: &[usize], axis: usize, scales: &[f32], zero_points: &[i32], out: &mut [Y]) -> Result<(), CodesError> {
    check_len("QuantizeLinear input", x.len(), shape)?;
    check_len("QuantizeLinear output", out.len(), shape)?;
    let (_, len, inner) = layout::<Y>(shape, axis, scales, zero_points)?;
    if inner == 0 {
        return Ok(());
    }
    for (c, (xs, ys)) in x.chunks_exact(inner).zip(out.chunks_exact_mut(inner)).enumerate() {
        let (s, z) = (scales[c % len], zero_points.get(c % len).copied().unwrap_or(0));
        for (y, &v) in ys.iter_mut().zip(xs) {
            *y = quantize(v, s, z);
        }
    }
    Ok(())
}

/// DequantizeLinear over a tensor, parameters as in [`quantize_linear`].
pub fn dequantize_linear<X: QCode>(q: &[X], shape: &[usize], axis: usize, scales: &[f32], zero_points: &[i32], out: &mut [f32]) -> Result<(), CodesError> {
    check_len("DequantizeLinear input", q.len(), shape)?;
    check_len("DequantizeLinear output", out.len(), shape)?;
    let (_, len, inner) = layout::<X>(shape, axis, scales, zero_points)?;
    if inner == 0 {
        return Ok(());
    }
    for (c, (qs, ys)) in q.chunks_exact(inner).zip(out.chunks_exact_mut(inner)).enumerate() {
        let (s, z) = (scales[c % len], zero_points.get(c % len).copied().unwrap_or(0));
        for (y, &v) in ys.iter_mut().zip(qs) {
            *y = dequantize(v, s, z);
        }
    }
    Ok(())
}
