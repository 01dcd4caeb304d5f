//! MatMul on activations quantized per row (per token) at run time by the graph's own float ops
//! (`ReduceMin`/`ReduceMax` → scale and zero point → QuantizeLinear → DequantizeLinear → MatMul
//! with a constant quantized weight; the accepted forms are listed in
//! `rewrites/src/rules/row_dynamic.rs`), on the Rust kernels
//! (`qdqc_kernels::dynamic::Granularity::RowBy`).
//!
//! Two things are claimed. (1) The kernel's per-row `(s, z)` and codes are the graph's: each of
//! the graph's ops is one IEEE operation (ReduceMin/ReduceMax of NaN-free values are exact and
//! order-free; Min, Max, Abs, Sub, Div, Clip, Round, Cast one rounding or none), and the kernel
//! performs the same operations in the same order (`recipe_parameters`), then ONNX Runtime's
//! QuantizeLinear (`codes::qdq::quantize`, a true division, ties to even): by construction,
//! pinned by [`check_row_codes`] against the engine's reference QuantizeLinear on constructed
//! ties and random rows. (2) The float output: the constant part as [`dynamic::prove`] with
//! [`DynamicOutput::DequantizedFloat`] (`real`: lemma P4-f, the correctly rounded f32 of
//! `C·s[m]·sw[n]`; `exact`: refused, the float MatMul is deterministic only where P2 holds and P2
//! depends on a scale made at run time).
//!
//! | condition | why |
//! |---|---|
//! | divisor a positive finite f32 constant, a symmetric floor finite and non-negative | `s = range / divisor` (or `amax / divisor`) is the graph's Div |
//! | asymmetric: offset a finite f32, clip bounds integers within the code type | `z = Round(Clip(offset − mn/s))` is a code the Cast keeps exactly |
//! | every condition of [`dynamic::prove`] (8-bit weights, i32 bound, scales) | the GEMM and the epilogue are `DynamicMatMul`'s |

use crate::dynamic::{self, DynamicGroup, DynamicOutput};
use qdqc_exact::reference::{CodeType, quantize};
use qdqc_exact::{Certificate, Contract, Counterexample, Method, Verdict};
use qdqc_kernels::dynamic::DynamicError;
pub use qdqc_kernels::dynamic::Recipe;
use std::time::Instant;

/// Proves or refuses the group (its output must be [`DynamicOutput::DequantizedFloat`]).
pub fn prove(g: &DynamicGroup, recipe: Recipe, contract: Contract) -> Verdict {
    if let Err(reason) = validate(recipe) {
        return Verdict::Unknown { reason: format!("refused: {reason}") };
    }
    if g.output != DynamicOutput::DequantizedFloat {
        return Verdict::Unknown { reason: "refused: the per-row recipe is modelled with a float output (DQ → MatMul, no Q)".into() };
    }
    dynamic::prove(g, contract)
}

fn validate(recipe: Recipe) -> Result<(), String> {
    let divisor = match recipe {
        Recipe::Asymmetric { divisor, .. } | Recipe::Symmetric { divisor, .. } => f32::from_bits(divisor),
    };
    if !(divisor.is_finite() && divisor > 0.0) {
        return Err(format!("the scale's divisor {divisor:e} is not a positive finite f32"));
    }
    if let Recipe::Symmetric { floor, .. } = recipe
        && !(f32::from_bits(floor).is_finite() && f32::from_bits(floor) >= 0.0)
    {
        return Err(format!("the scale's floor {:e} is not a finite non-negative f32", f32::from_bits(floor)));
    }
    if let Recipe::Asymmetric { signed, offset, lo, hi, .. } = recipe {
        let (tlo, thi) = code(signed).range();
        if !f32::from_bits(offset).is_finite() {
            return Err("the zero point's offset is not finite".into());
        }
        if !(i64::from(lo) >= tlo && lo <= hi && i64::from(hi) <= thi) {
            return Err(format!("the zero point's clip [{lo}, {hi}] is not within {}", code(signed).name()));
        }
    }
    Ok(())
}

fn code(signed: bool) -> CodeType {
    if signed { CodeType::I8 } else { CodeType::U8 }
}

/// The graph's `(s, z)` of one row, restated from the ops' definitions (the reference
/// [`check_row_codes`] compares with); `None` where the graph's codes are undefined.
fn graph_parameters(recipe: Recipe, x: &[f32]) -> Option<(f32, i64)> {
    if x.iter().any(|v| v.is_nan()) {
        return None;
    }
    let reduce_min = x.iter().copied().fold(f32::INFINITY, f32::min);
    let reduce_max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (s, z) = match recipe {
        Recipe::Symmetric { divisor, floor, .. } => (reduce_min.abs().max(reduce_max.abs()).max(f32::from_bits(floor)) / f32::from_bits(divisor), 0),
        Recipe::Asymmetric { divisor, offset, lo, hi, .. } => {
            let (mn, mx) = (reduce_min.min(0.0), reduce_max.max(0.0));
            let s = (mx - mn) / f32::from_bits(divisor);
            let clipped = (f32::from_bits(offset) - mn / s).max(lo as f32).min(hi as f32);
            #[allow(clippy::cast_possible_truncation)] // an integer within [lo, hi]
            (s, clipped.round_ties_even() as i64)
        }
    };
    (s.is_finite() && s > 0.0).then_some((s, z))
}

/// Rows [`check_row_codes`] tries per recipe (constructed ties, then random).
pub const ROWS: u64 = 4096;

/// A row's quantization: `(s, z, codes)` as the kernel writes them (u8, i8 shifted by +128).
pub type RowQuantize = fn(Recipe, &[f32], &mut [u8]) -> Result<(f32, u8), DynamicError>;

/// Checks a row quantization against the graph's ops and the engine's reference QuantizeLinear
/// for the recipes exporters write (asymmetric u8 and i8 with ONNX's DynamicQuantizeLinear
/// constants, symmetric i8 by 127 with and without a floor of 1e-5): rows whose scale has a short odd significand with ties
/// `(k + ½)·s` on it (exact in f32, so `x/s` is exactly a tie, and `1/s` is not exact), and
/// random rows over a wide exponent range. Refuted at the first row where the scale, zero point
/// or a code differs.
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)] // small values drawn from the generator
pub fn check_row_codes(f: RowQuantize) -> Verdict {
    let start = Instant::now();
    let recipes = [
        Recipe::Asymmetric { signed: false, divisor: 255f32.to_bits(), offset: 0f32.to_bits(), lo: 0, hi: 255 },
        Recipe::Asymmetric { signed: true, divisor: 255f32.to_bits(), offset: (-128f32).to_bits(), lo: -128, hi: 127 },
        Recipe::Symmetric { signed: true, divisor: 127f32.to_bits(), floor: 0 },
        Recipe::Symmetric { signed: true, divisor: 127f32.to_bits(), floor: 1e-5f32.to_bits() },
    ];
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    };
    let mut checked = 0u64;
    for recipe in recipes {
        let t = code(recipe.signed());
        for i in 0..ROWS {
            let r = next();
            // s = m·2^e, m odd below 2^15: 255·s and (2k + 1)·s/2 are exact f32s.
            let m = (1 + 2 * (r % (1 << 14))) as f32;
            let s = m * 2f32.powi(-30 + ((r >> 20) % 40) as i32);
            let row: Vec<f32> = if i % 2 == 0 {
                let j = ((r >> 32) % 200) as i32 + 20; // the zero point the range puts at the row's min
                let (low, high) = match recipe {
                    Recipe::Symmetric { .. } => (-127, 127),
                    _ => (-j, 255 - j),
                };
                let mut row = vec![low as f32 * s, high as f32 * s];
                row.extend((0..14).map(|n| ((low + ((r >> (n * 4)) % 200) as i32).min(high - 1) as f32 + 0.5) * s));
                row
            } else {
                (0..16).map(|n| ((next() % 2001) as f32 - 1000.0) * s * if n % 5 == 0 { 0.001 } else { 1.0 }).collect()
            };
            let Some((ws, wz)) = graph_parameters(recipe, &row) else { continue };
            let want: Vec<i64> = row.iter().map(|&x| quantize(x, ws, wz, t)).collect();
            let mut codes = vec![0u8; row.len()];
            let shift = if recipe.signed() { 128 } else { 0 };
            let got = f(recipe, &row, &mut codes).map(|(s, z)| (s, i64::from(z) - shift));
            let got_codes: Vec<i64> = codes.iter().map(|&c| i64::from(c) - shift).collect();
            checked += 1;
            let wrong = match got {
                Ok((s, z)) if s.to_bits() == ws.to_bits() && z == wz => want.iter().zip(&got_codes).position(|(a, b)| a != b),
                _ => Some(usize::MAX),
            };
            if let Some(at) = wrong {
                let (x, fused, unfused) = if at == usize::MAX { (f32::NAN, 0, wz) } else { (row[at], got_codes[at], want[at]) };
                let counterexample = Counterexample {
                    inputs: vec![("row".into(), i as i64), ("x bits".into(), i64::from(x.to_bits())), ("s bits".into(), i64::from(ws.to_bits()))],
                    unfused,
                    fused,
                    exact: Some(format!("{recipe:?}: row {row:?}: the graph's (s, z) = ({ws:e}, {wz}); the candidate gives {got:?}")),
                    differing: 1,
                };
                let proof = Certificate {
                    method: Method::ByConstruction("the graph's per-row quantization".into()),
                    domain: checked,
                    micros: u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
                    detail: format!("x = {x:e}, s = {ws:e}: code {fused} where the graph's QuantizeLinear gives {unfused}"),
                };
                return Verdict::Refuted { counterexample, proof };
            }
        }
    }
    Verdict::Exact {
        proof: Certificate {
            method: Method::ByConstruction("qdqc_kernels::dynamic::recipe_quantize".into()),
            domain: checked,
            micros: u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
            detail: format!("{checked} rows (constructed ties at scales with short odd significands, random rows): the graph's (s, z) and codes"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdqc_kernels::dynamic::recipe_quantize;

    fn group() -> DynamicGroup {
        DynamicGroup {
            w_code: CodeType::I8,
            weights: vec![vec![3, -7, 127, -128], vec![0, 1, 2, 3]],
            w_scales: vec![0.01, 0.02],
            w_zero_points: vec![0],
            output: DynamicOutput::DequantizedFloat,
        }
    }

    const ASYM_U8: Recipe = Recipe::Asymmetric { signed: false, divisor: 0x437f_0000, offset: 0, lo: 0, hi: 255 };

    #[test]
    fn accepted_and_refused_instances() {
        assert!(prove(&group(), ASYM_U8, Contract::Real).is_exact());
        assert!(prove(&group(), Recipe::Symmetric { signed: true, divisor: 127f32.to_bits(), floor: 0 }, Contract::Real).is_exact());
        let exact = prove(&group(), ASYM_U8, Contract::Exact);
        assert!(matches!(&exact, Verdict::Unknown { reason } if reason.contains("made at run time")), "{exact:?}");
        let wide = Recipe::Asymmetric { signed: true, divisor: 0x437f_0000, offset: 0, lo: -128, hi: 200 };
        assert!(matches!(prove(&group(), wide, Contract::Real), Verdict::Unknown { reason } if reason.contains("clip")));
        let zero = Recipe::Symmetric { signed: true, divisor: 0, floor: 0 };
        let negative = Recipe::Symmetric { signed: true, divisor: 127f32.to_bits(), floor: (-1f32).to_bits() };
        assert!(matches!(prove(&group(), negative, Contract::Real), Verdict::Unknown { reason } if reason.contains("floor")));
        assert!(matches!(prove(&group(), zero, Contract::Real), Verdict::Unknown { reason } if reason.contains("divisor")));
    }

    #[test]
    fn the_kernel_quantizes_rows_as_the_graph_does() {
        let v = check_row_codes(recipe_quantize);
        assert!(v.is_exact(), "{v:?}");
    }

    #[test]
    fn an_all_zero_row_is_an_error() {
        let mut codes = [0u8; 4];
        assert!(matches!(recipe_quantize(ASYM_U8, &[0.0; 4], &mut codes), Err(DynamicError::Undefined(_))));
        assert!(matches!(recipe_quantize(ASYM_U8, &[1.0, f32::NAN, 0.0, 0.0], &mut codes), Err(DynamicError::Nan)));
    }
}
