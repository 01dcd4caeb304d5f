//! Reference semantics of QuantizeLinear and DequantizeLinear, bit for bit (contract §1.2, §1.3;
//! ORT's CPU kernels agree for finite values, §3.3).

use super::num::{Dyadic, rne_quotient};
use qdqc_lang::onnx::DataType;
use serde::Serialize;

/// Integer code types of quantized tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CodeType {
    /// Unsigned 2-bit, `[0, 3]`.
    U2,
    /// Signed 2-bit, `[-2, 1]`.
    I2,
    /// Unsigned 4-bit, `[0, 15]`.
    U4,
    /// Signed 4-bit, `[-8, 7]`.
    I4,
    /// Unsigned 8-bit, `[0, 255]`.
    U8,
    /// Signed 8-bit, `[-128, 127]`.
    I8,
    /// Unsigned 16-bit.
    U16,
    /// Signed 16-bit.
    I16,
    /// Signed 32-bit (biases).
    I32,
}

impl CodeType {
    /// The code type of an ONNX integer type; `None` for a type Q/DQ cannot use here.
    pub fn from_dtype(dt: DataType) -> Option<CodeType> {
        use DataType::*;
        Some(match dt {
            Uint2 => CodeType::U2,
            Int2 => CodeType::I2,
            Uint4 => CodeType::U4,
            Int4 => CodeType::I4,
            Uint8 => CodeType::U8,
            Int8 => CodeType::I8,
            Uint16 => CodeType::U16,
            Int16 => CodeType::I16,
            Int32 => CodeType::I32,
            _ => return None,
        })
    }

    /// The ONNX type of these codes.
    pub fn dtype(self) -> DataType {
        match self {
            CodeType::U2 => DataType::Uint2,
            CodeType::I2 => DataType::Int2,
            CodeType::U4 => DataType::Uint4,
            CodeType::I4 => DataType::Int4,
            CodeType::U8 => DataType::Uint8,
            CodeType::I8 => DataType::Int8,
            CodeType::U16 => DataType::Uint16,
            CodeType::I16 => DataType::Int16,
            CodeType::I32 => DataType::Int32,
        }
    }

    /// Inclusive range of codes (`qdqc_lang::tensor::int_range` of [`Self::dtype`], pinned by a
    /// test; spelled out here because proofs ask it once per enumerated point, and the call
    /// across crates was 15 % of a compile's time).
    #[inline]
    pub fn range(self) -> (i64, i64) {
        match self {
            CodeType::U2 => (0, 3),
            CodeType::I2 => (-2, 1),
            CodeType::U4 => (0, 15),
            CodeType::I4 => (-8, 7),
            CodeType::U8 => (0, 255),
            CodeType::I8 => (-128, 127),
            CodeType::U16 => (0, 65535),
            CodeType::I16 => (-32768, 32767),
            CodeType::I32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
        }
    }

    /// Width of one code, in bits.
    pub fn bits(self) -> u32 {
        match self {
            CodeType::U2 | CodeType::I2 => 2,
            CodeType::U4 | CodeType::I4 => 4,
            CodeType::U8 | CodeType::I8 => 8,
            CodeType::U16 | CodeType::I16 => 16,
            CodeType::I32 => 32,
        }
    }

    /// The ONNX name of the type, for messages.
    pub fn name(self) -> &'static str {
        qdqc_lang::canon::dtype_name(self.dtype())
    }
}

/// `DQ(q; s, z) = fl(f32(q − z) · s)`: exact integer subtraction, one conversion (which rounds
/// above 2^24, as int32 bias codes can), one multiply, never an FMA.
pub fn dequantize(q: i64, s: f32, z: i64) -> f32 {
    ((q - z) as f32) * s
}

/// QuantizeLinear of a whole tensor of `dims`, per tensor (`axis` `None`, one scale) or along
/// `axis` (one scale and zero point per index of that axis), element by element as [`quantize`].
/// `None` when the parameters do not fit the shape.
pub fn quantize_tensor(values: &[f32], dims: &[i64], axis: Option<usize>, scales: &[f32], zero_points: &[i64], t: CodeType) -> Option<Vec<i64>> {
    let (channels, inner) = match axis {
        None => (1, 1),
        Some(a) => (usize::try_from(*dims.get(a)?).ok()?, usize::try_from(dims.get(a + 1..)?.iter().product::<i64>().max(0)).ok()?),
    };
    if channels == 0 || scales.len() != channels || zero_points.len() != channels || inner == 0 && !values.is_empty() {
        return None;
    }
    Some(
        values
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let c = (i / inner) % channels;
                quantize(x, scales[c], zero_points[c], t)
            })
            .collect(),
    )
}

/// `Q(x; s, z, T) = sat_T(rne(fl(x / s)) + z)`: a true division, ties to even, then the zero
/// point, then saturation. NaN maps to the lowest code, as ORT's x86 kernels do.
pub fn quantize(x: f32, s: f32, z: i64, t: CodeType) -> i64 {
    let (lo, hi) = t.range();
    let v = x / s;
    if v.is_nan() {
        return lo;
    }
    // `as i64` saturates ±inf and huge values; the clamp then saturates to the type. The value is
    // already rounded to an integer, so the cast drops no fraction: saturation is the intent.
    #[allow(clippy::cast_possible_truncation)]
    let n = rne(v) as i64;
    n.saturating_add(z).clamp(lo, hi)
}

/// `v.round_ties_even()` without the libm call (`rintf`, not inlined without SSE4.1; 14 % of a
/// compile's time went there). For |v| < 2^22, v + 1.5·2^23 lies in [2^23, 2^24), where f32's
/// spacing is 1: the addition rounds to the nearest integer, ties to even (IEEE's default
/// mode), and the subtraction is exact. Larger magnitudes (and infinities) take the library call.
/// Pinned against `round_ties_even` on every half-integer and its neighbours up to 2^22
/// (tests below).
#[inline]
pub fn rne(v: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0; // 1.5·2^23
    if v.abs() < 4_194_304.0 { (v + SHIFT) - SHIFT } else { v.round_ties_even() }
}

/// Q of an exact real value (the `real` contract): `sat_T(rne(v / s) + z)` with no f32 rounding
/// of the quotient. `None` when the scale is not a finite non-zero f32.
pub fn quantize_real(v: Dyadic, s: f32, z: i64, t: CodeType) -> Option<i64> {
    let s = Dyadic::from_f32(s).filter(|s| !s.is_zero())?;
    let (lo, hi) = t.range();
    Some(rne_quotient(v, s)?.saturate(z, lo, hi))
}

/// The exact real value of `DQ(q; s, z)` before rounding: `(q − z)·s`.
pub fn dequantize_real(q: i64, s: f32, z: i64) -> Option<Dyadic> {
    Dyadic::int(q - z).checked_mul(Dyadic::from_f32(s)?)
}

/// Index of the scale / zero point that quantizes the element at `index` of a tensor of
/// `shape`: 0 for per-tensor, the axis coordinate for per-axis, the block for blocked.
pub fn param_index(index: &[usize], shape: &[usize], axis: Option<usize>, block_size: usize, params: &[usize]) -> usize {
    let Some(axis) = axis else { return 0 };
    if block_size == 0 {
        return index[axis];
    }
    // Blocked: the parameter tensor has the input's shape with the axis divided into blocks.
    let mut flat = 0;
    for (d, &i) in index.iter().enumerate() {
        let coord = if d == axis { i / block_size } else { i };
        flat = flat * params[d] + coord;
    }
    debug_assert_eq!(shape.len(), params.len());
    flat
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_ranges_are_the_onnx_types_ranges() {
        use CodeType::*;
        for t in [U2, I2, U4, I4, U8, I8, U16, I16, I32] {
            assert_eq!(Some(t.range()), qdqc_lang::tensor::int_range(t.dtype()), "{t:?}");
            assert_eq!(CodeType::from_dtype(t.dtype()), Some(t));
        }
    }

    #[test]
    fn quantize_rounds_half_to_even_before_the_zero_point() {
        // x/s = 2.5 → 2 (even), then + zp; half-away rounding would give 3.
        assert_eq!(quantize(2.5, 1.0, 0, CodeType::U8), 2);
        assert_eq!(quantize(3.5, 1.0, 0, CodeType::U8), 4);
        assert_eq!(quantize(-0.5, 1.0, 10, CodeType::U8), 10);
        assert_eq!(quantize(-1.5, 1.0, 10, CodeType::U8), 8);
        // Adding the zero point before rounding would turn 2.5 + 1 = 3.5 into 4 instead of 3.
        assert_eq!(quantize(2.5, 1.0, 1, CodeType::U8), 3);
    }

    #[test]
    fn quantize_saturates_and_maps_nan_to_qmin() {
        assert_eq!(quantize(1e30, 1.0, 0, CodeType::I8), 127);
        assert_eq!(quantize(f32::NEG_INFINITY, 1.0, 0, CodeType::I8), -128);
        assert_eq!(quantize(f32::NAN, 1.0, 0, CodeType::I8), -128);
        assert_eq!(quantize(0.0, 0.0, 3, CodeType::U8), 0, "0/0 is NaN");
        assert_eq!(quantize(300.0, 1.0, 0, CodeType::U16), 300);
        assert_eq!(quantize(9.0, 1.0, 0, CodeType::I4), 7);
    }

    // The quotient is rounded and far inside i64, so the cast keeps every bit.
    #[allow(clippy::cast_possible_truncation)]
    #[test]
    fn quantize_divides_rather_than_multiplying_by_the_reciprocal() {
        // A value where x * (1/s) and x / s round differently (found by search, pinned here).
        let (x, s) = (find_reciprocal_mismatch()).expect("a mismatch exists");
        assert_ne!((x * (1.0 / s)).round_ties_even(), (x / s).round_ties_even());
        assert_eq!(quantize(x, s, 0, CodeType::I32), (x / s).round_ties_even() as i64);
    }

    fn find_reciprocal_mismatch() -> Option<(f32, f32)> {
        for sb in 0..4000u32 {
            let s = 0.001 + sb as f32 * 0.00037;
            for q in -128i64..128 {
                let x = q as f32 * s + 0.5 * s;
                if (x * (1.0 / s)).round_ties_even() != (x / s).round_ties_even() {
                    return Some((x, s));
                }
            }
        }
        None
    }

    #[test]
    fn int32_bias_dequantize_rounds_above_2_pow_24() {
        let q = (1 << 24) + 1;
        assert_eq!(dequantize(q, 1.0, 0), (1 << 24) as f32);
        assert_eq!(dequantize_real(q, 1.0, 0).unwrap(), Dyadic::int(q));
    }

    #[test]
    fn real_quantize_uses_the_exact_quotient() {
        // f32(0.2) is exactly 2·f32(0.1), so 3·0.1 / 0.2 is exactly 1.5: a tie, rounded to even.
        let v = dequantize_real(3, 0.1, 0).unwrap();
        assert_eq!(quantize_real(v, 0.2, 0, CodeType::U8), Some(2));
        // f32 evaluation rounds 3·0.1 first and lands on the same tie here.
        assert_eq!(quantize(dequantize(3, 0.1, 0), 0.2, 0, CodeType::U8), 2);
    }

    #[test]
    fn blocked_and_per_axis_parameter_indices() {
        assert_eq!(param_index(&[1, 5], &[2, 8], None, 0, &[1, 1]), 0);
        assert_eq!(param_index(&[1, 5], &[2, 8], Some(1), 0, &[8]), 5);
        assert_eq!(param_index(&[1, 5], &[2, 8], Some(1), 4, &[2, 2]), 3);
        assert_eq!(param_index(&[1, 3], &[2, 8], Some(1), 4, &[2, 2]), 2);
    }

    /// The shortcut rounding equals `round_ties_even` on every half-integer up to 2^22 in
    /// magnitude, on the floats next to each (where a wrong tie rule or a double rounding would
    /// show), across the 2^22 switch, and on specials.
    #[test]
    fn shortcut_rounding_is_round_ties_even() {
        let check = |v: f32| {
            let (a, b) = (rne(v), v.round_ties_even());
            assert!(a.to_bits() == b.to_bits() || (a == 0.0 && b == 0.0), "rne({v:e}) = {a} vs {b}");
        };
        for k in -(1i32 << 23)..(1 << 23) {
            let v = k as f32 * 0.5;
            check(v);
            check(f32::from_bits(v.to_bits().wrapping_add(1)));
            check(f32::from_bits(v.to_bits().wrapping_sub(1)));
        }
        for v in
            [4_194_303.5f32, 4_194_304.0, 4_194_304.5, 8_388_607.5, 8_388_608.0, 1e10, -1e10, f32::INFINITY, f32::NEG_INFINITY, f32::MIN_POSITIVE, -0.0, 1e-45]
        {
            check(v);
        }
        assert!(rne(f32::NAN).is_nan());
    }
}
