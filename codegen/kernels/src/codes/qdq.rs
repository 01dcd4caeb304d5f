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
//!
//! [`quantize_by`] is QuantizeLinear with parameters known only at run time (a row's scale and
//! zero point made by the graph's own ops under `--contract exact`); [`cast_to_codes`] is the
//! f32 → 8-bit integer Cast of such a zero point.
//!
//! | condition | why |
//! |---|---|
//! | `quantize_by`: per tensor, per axis, or blocked with nothing after the axis (`inner` 1) | ORT runs exactly these through `MlasQuantizeLinear` ([`quantize`]): `ComputeLoop` per axis, `BlockedQuantizeLinear::opLastAxis` per block; a block along an axis with elements after it takes `opNotLastAxis`, `clamp(static_cast<int32_t>(nearbyint(x / s)) + zp)`, another arithmetic out of range (an error here) |
//! | `cast_to_codes`: `trunc(x)` in the type's range | ORT's Cast is C++'s `static_cast` (truncation toward zero); NaN, ±∞ or a value out of range is undefined behaviour there (its bits depend on the compiler's vectorization), so it is a run-time error, never a guess |

use super::shape::check_len;
use super::{CodesError, QCode, shape_err};
use crate::float::dq::ParamIndex;

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
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was checked just above.
            unsafe { quantize_run_avx2(xs, s, z, ys) };
            continue;
        }
        quantize_run(xs, s, z, ys);
    }
    Ok(())
}

/// [`quantize`] over a run with one scale and zero point: the same IEEE operations element by
/// element on every instance (a division, two selects, an addition; no contraction), so the
/// AVX2 instance, 8 lanes wide, gives the same bits.
#[inline(always)]
fn quantize_run<Y: QCode>(x: &[f32], s: f32, z: i32, y: &mut [Y]) {
    for (y, &v) in y.iter_mut().zip(x) {
        *y = quantize(v, s, z);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_run_avx2<Y: QCode>(x: &[f32], s: f32, z: i32, y: &mut [Y]) {
    quantize_run(x, s, z, y)
}

/// [`dequantize`] over a run, as [`quantize_run`]: one conversion and one multiply per element.
#[inline(always)]
fn dequantize_run<X: QCode>(q: &[X], s: f32, z: i32, y: &mut [f32]) {
    for (y, &v) in y.iter_mut().zip(q) {
        *y = dequantize(v, s, z);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dequantize_run_avx2<X: QCode>(q: &[X], s: f32, z: i32, y: &mut [f32]) {
    dequantize_run(q, s, z, y)
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
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was checked just above.
            unsafe { dequantize_run_avx2(qs, s, z, ys) };
            continue;
        }
        dequantize_run(qs, s, z, ys);
    }
    Ok(())
}

/// QuantizeLinear with run-time parameters (ONNX opset 21 layouts, [`ParamIndex`]): `scale` of
/// shape `scale_shape`, `zero_point` as many codes (or none: 0); ORT's [`quantize`] per element.
#[allow(clippy::too_many_arguments)] // QuantizeLinear's operands and attributes
pub fn quantize_by<Y: QCode>(
    x: &[f32],
    shape: &[usize],
    scale: &[f32],
    scale_shape: &[usize],
    zero_point: Option<&[Y]>,
    axis: usize,
    block: usize,
    out: &mut [Y],
) -> Result<(), CodesError> {
    check_len("QuantizeLinear input", x.len(), shape)?;
    check_len("QuantizeLinear output", out.len(), shape)?;
    let p = ParamIndex::new(shape, scale.len(), scale_shape, zero_point.map(<[Y]>::len), axis, block).map_err(|e| CodesError::Shape(e.0))?;
    if block > 0 && p.inner > 1 {
        return shape_err(format!("QuantizeLinear blocked along axis {axis} of {shape:?}: ONNX Runtime's arithmetic there is not MLAS's (only the last axis)"));
    }
    for (i, (y, &v)) in out.iter_mut().zip(x).enumerate() {
        let c = p.at(i);
        *y = quantize(v, scale[c], zero_point.map_or(0, |z| z[c].value()));
    }
    Ok(())
}

/// Cast f32 → 8-bit integer: truncation toward zero; an element whose truncation is NaN or out
/// of the type's range is an error (undefined in ONNX Runtime).
pub fn cast_to_codes<Y: QCode>(x: &[f32], out: &mut [Y]) -> Result<(), CodesError> {
    if x.len() != out.len() {
        return shape_err(format!("Cast: input has {} elements, output {}", x.len(), out.len()));
    }
    for (y, &v) in out.iter_mut().zip(x) {
        let t = v.trunc();
        // NaN fails both comparisons.
        if !(t >= Y::MIN as f32 && t <= Y::MAX as f32) {
            return Err(CodesError::Undefined(format!("Cast of {v:e} to {}..={}: out of range, the value is undefined", Y::MIN, Y::MAX)));
        }
        *y = Y::from_index(usize::from(t as i32 as u8));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn activations(n: usize) -> Vec<f32> {
        // Quotients across the range, halves (ties), NaN and infinities.
        let mut x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1013) as f32 * 0.37 - 180.0).collect();
        x[..6].copy_from_slice(&[0.5, -2.5, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30]);
        x
    }

    /// Per axis with run-time parameters is [`quantize_linear`] per axis, bit for bit.
    #[test]
    fn quantize_by_per_axis_is_quantize_linear() {
        let shape = [3, 4, 5];
        let x = activations(60);
        let scales = [0.5f32, 1.25, 0.0, 3.0];
        let zps = [3u8, 250, 128, 0];
        let mut want = vec![0u8; 60];
        quantize_linear(&x, &shape, 1, &scales, &zps.map(i32::from), &mut want).unwrap();
        let mut got = vec![0u8; 60];
        quantize_by(&x, &shape, &scales, &[4], Some(&zps), 1, 0, &mut got).unwrap();
        assert_eq!(got, want);
    }

    /// Blocked along the last axis (a block per row, and two blocks per row): each element takes
    /// its block's parameters through [`quantize`].
    #[test]
    fn quantize_by_blocked_last_axis_reads_each_blocks_parameters() {
        let (rows, k) = (3, 8);
        let x = activations(rows * k);
        for block in [8, 4, 3] {
            let blocks = k.div_ceil(block);
            let scales: Vec<f32> = (0..rows * blocks).map(|b| 0.25 + b as f32 * 0.75).collect();
            let zps: Vec<i8> = (0..rows * blocks).map(|b| (b as i8) * 9 - 20).collect();
            let mut got = vec![0i8; rows * k];
            quantize_by(&x, &[rows, k], &scales, &[rows, blocks], Some(&zps), 1, block, &mut got).unwrap();
            for (i, &g) in got.iter().enumerate() {
                let b = (i / k) * blocks + (i % k) / block;
                assert_eq!(g, quantize::<i8>(x[i], scales[b], i32::from(zps[b])), "element {i}, block {block}");
            }
            let mut none = vec![0i8; rows * k];
            quantize_by(&x, &[rows, k], &scales, &[rows, blocks], None, 1, block, &mut none).unwrap();
            assert!(none.iter().enumerate().all(|(i, &g)| g == quantize::<i8>(x[i], scales[(i / k) * blocks + (i % k) / block], 0)));
        }
    }

    /// A block along an axis with elements after it is ORT's other arithmetic: refused.
    #[test]
    fn quantize_by_refuses_blocks_before_the_last_axis_and_bad_layouts() {
        let x = activations(24);
        let mut out = vec![0u8; 24];
        assert!(quantize_by(&x, &[6, 4], &[1.0; 4], &[1, 4], None, 0, 6, &mut out).is_err());
        assert!(quantize_by(&x, &[6, 4], &[1.0; 5], &[5], None, 0, 0, &mut out).is_err());
        assert!(quantize_by(&x, &[6, 4], &[1.0; 6], &[6], Some(&[0u8; 5]), 0, 0, &mut out).is_err());
    }

    #[test]
    fn cast_truncates_in_range_and_refuses_the_undefined() {
        let mut u = [0u8; 6];
        cast_to_codes(&[0.0, 254.9, 255.0, -0.7, 3.5, 128.0], &mut u).unwrap();
        assert_eq!(u, [0, 254, 255, 0, 3, 128]);
        let mut s = [0i8; 5];
        cast_to_codes(&[-128.0, 127.0, -3.9, 0.0, -0.0], &mut s).unwrap();
        assert_eq!(s, [-128, 127, -3, 0, 0]);
        for bad in [f32::NAN, 256.0, -1.0, f32::INFINITY] {
            assert!(matches!(cast_to_codes(&[bad], &mut [0u8]), Err(CodesError::Undefined(_))), "{bad}");
        }
        for bad in [128.0, -129.0, f32::NEG_INFINITY] {
            assert!(matches!(cast_to_codes(&[bad], &mut [0i8]), Err(CodesError::Undefined(_))), "{bad}");
        }
    }
}
