//! P2: exact representability of a float reduction (contract §4.3).
//!
//! A float Conv / MatMul / Gemm over dequantized values is evaluated in an unspecified order and
//! blocking, with or without FMA. Its result is nevertheless unique when every intermediate is
//! exact: each DQ output `(q − z)·s`, each product of two DQ values, and every partial sum of any
//! subset of the terms. Then every order gives `Σ (x − zx)(w − zw)·sx·sw + b·sb` exactly.
//!
//! The argument, per output channel, over the actual constant weights:
//!
//! * write each nonzero term as an integer times `2^e` (scales as odd mantissa `m·2^e`);
//! * let `E` be the smallest such exponent: every term, hence every partial sum, is an integer
//!   multiple of `2^E`;
//! * bound the sum of the terms' largest magnitudes, in units of `2^E`, by `2^24`: every partial
//!   sum is then `k·2^E` with `|k| ≤ 2^24`, which an f32 holds exactly;
//! * keep `2^E` within the normal range, so no intermediate is subnormal (a runtime that flushes
//!   denormals would otherwise change it) and none overflows.
//!
//! An FMA computes some `a·b + c` with one rounding; that value is a partial sum, so it is exact too.

use super::num::{Dyadic, bit_count};
use super::{Certificate, Method};
use std::time::Instant;

/// Largest partial sum, in grid units, an f32 holds exactly.
const MAX_UNITS: u128 = 1 << 24;

/// One output channel of a float reduction over dequantized inputs, as the unfused graph
/// computes it: `alpha · Σ_k DQ(x_k)·DQ(w_k) + DQ(b)`.
#[derive(Clone, Copy, Debug)]
pub struct DotProduct<'a> {
    /// The activation's scale.
    pub x_scale: f32,
    /// The activation's zero point.
    pub x_zero_point: i64,
    /// Reachable activation codes. Padding (the zero point) is always reachable for a Conv.
    pub x_codes: (i64, i64),
    /// The weights' scale (this channel's, when per-channel).
    pub w_scale: f32,
    /// The weights' zero point (this channel's).
    pub w_zero_point: i64,
    /// This channel's weight codes, concrete: the proof is for these weights only.
    pub weights: &'a [i64],
    /// Gemm's alpha, applied to partial sums of products; 1 for Conv and MatMul.
    pub alpha: f32,
    /// The bias the unfused graph adds.
    pub bias: Option<BiasTerm>,
}

/// What a Conv/Gemm adds to its products: the DQ of an int32 code, or a float initializer (ORT's
/// WeightBiasQuantization makes codes from one; the unfused graph still adds the float).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BiasTerm {
    /// The int32 code and its DQ scale (zero point 0): `fl(f32(code)·scale)`.
    Dequantized(i64, f32),
    /// A float added as it is.
    Float(f32),
}

impl DotProduct<'_> {
    /// The largest `|x − zx|` over the reachable activation codes.
    pub fn max_activation(&self) -> u128 {
        let (lo, hi) = self.x_codes;
        (lo - self.x_zero_point).unsigned_abs().max((hi - self.x_zero_point).unsigned_abs()) as u128
    }
}

/// Proves that every float intermediate of `d` is exact, or says which one may round.
pub fn dot_product(d: &DotProduct) -> Result<Certificate, String> {
    let start = Instant::now();
    let sx = finite(d.x_scale, "activation scale")?;
    let sw = finite(d.w_scale, "weight scale")?;
    let alpha = finite(d.alpha, "alpha")?;
    if alpha.mant.abs() != 1 {
        return Err(format!("alpha {} is not a power of two: alpha·(partial sum) may round", d.alpha));
    }
    let ux = d.max_activation();
    multiples_exact(ux, sx).map_err(|e| format!("DQ of activations: {e}"))?;
    for &w in d.weights {
        let v = Dyadic::int(w - d.w_zero_point).checked_mul(sw).ok_or("weight DQ overflows")?;
        if !normal_f32(v) {
            return Err(format!("DQ of weight code {w}: ({w} − {})·{:e} is not an exact normal f32", d.w_zero_point, d.w_scale));
        }
    }
    let bias = match d.bias {
        Some(BiasTerm::Dequantized(b, sb)) => bias_term(b, finite(sb, "bias scale")?)?,
        Some(BiasTerm::Float(b)) => finite(b, "float bias").and_then(|v| if normal_f32(v) { Ok(v) } else { Err(format!("float bias {b:e} is subnormal")) })?,
        None => Dyadic::ZERO,
    };
    // Products (x − zx)(w − zw)·(alpha·sx·sw): integers times 2^ep, largest |integer| each.
    let unit = sx.checked_mul(sw).and_then(|u| u.checked_mul(alpha)).ok_or("scale product overflows")?;
    let products: Vec<u128> = d
        .weights
        .iter()
        .map(|&w| (w - d.w_zero_point).unsigned_abs() as u128)
        .filter(|&dw| dw != 0 && ux != 0 && !unit.is_zero())
        .map(|dw| dw * ux * unit.mant.unsigned_abs())
        .collect();
    let mut exps: Vec<i32> = Vec::new();
    if !products.is_empty() {
        // Partial sums of products exist both before and after the alpha scaling.
        exps.extend([unit.exp, unit.exp - alpha.exp]);
    }
    if !bias.is_zero() {
        exps.push(bias.exp);
    }
    let Some(&grid) = exps.iter().min() else {
        return Ok(certificate(d, start, 0, 0));
    };
    let shift = |units: u128, exp: i32| units.checked_mul(1u128.checked_shl(u32::try_from(exp - grid).ok()?)?);
    let mut total: u128 = 0;
    for &p in &products {
        total = shift(p, unit.exp).and_then(|p| total.checked_add(p)).ok_or("partial sums overflow the analysis")?;
    }
    if !bias.is_zero() {
        total = shift(bias.mant.unsigned_abs(), bias.exp).and_then(|b| total.checked_add(b)).ok_or("partial sums overflow the analysis")?;
    }
    if total > MAX_UNITS {
        return Err(format!("partial sums can reach {total} units of 2^{grid} > 2^24: the sum may round, so its order matters"));
    }
    let top = exps.iter().max().copied().unwrap_or(grid);
    if grid < -126 || top + 24 > 127 {
        return Err(format!("the sum's grid 2^{grid}..2^{} leaves the normal f32 range", top + 24));
    }
    Ok(certificate(d, start, grid, total))
}

/// One operand of a product of two activations: its scale and the largest `|q − z|` over its
/// reachable codes.
#[derive(Clone, Copy, Debug)]
pub struct Operand {
    /// The operand's scale.
    pub scale: f32,
    /// The largest `|q − z|` over its reachable codes.
    pub max_offset: u128,
}

/// P2 for `Σ_k DQ(a_k)·DQ(b_k)` over `k` terms when both operands are activations: every code
/// of both reachable ranges is possible, so the bound takes the largest product at every `k`.
/// Each DQ is exact (`|q − z|·|m|` fits 24 bits), and every partial sum is a multiple of
/// `2^E` (`E` the exponent of `sa·sb`) of at most `k·max|ua|·max|ub|·|ma·mb| ≤ 2^24` units.
pub fn activation_dot_product(a: Operand, b: Operand, k: usize) -> Result<Certificate, String> {
    let start = Instant::now();
    let sa = finite(a.scale, "A scale")?;
    let sb = finite(b.scale, "B scale")?;
    multiples_exact(a.max_offset, sa).map_err(|e| format!("DQ of A: {e}"))?;
    multiples_exact(b.max_offset, sb).map_err(|e| format!("DQ of B: {e}"))?;
    let unit = sa.checked_mul(sb).ok_or("scale product overflows")?;
    let domain = k as u64;
    let total = (k as u128).checked_mul(a.max_offset * b.max_offset * unit.mant.unsigned_abs()).ok_or("partial sums overflow the analysis")?;
    if total == 0 {
        let detail = format!("{k} products, all zero");
        return Ok(Certificate { method: Method::P2Representable, domain, micros: super::micros(start), detail });
    }
    if total > MAX_UNITS {
        return Err(format!(
            "{k} products of up to {}·{} codes reach {total} units of 2^{} > 2^24: the sum may round, so its order matters",
            a.max_offset, b.max_offset, unit.exp
        ));
    }
    if unit.exp < -126 || unit.exp + 24 > 127 {
        return Err(format!("the sum's grid 2^{}..2^{} leaves the normal f32 range", unit.exp, unit.exp + 24));
    }
    let detail = format!("{k} products of two activations on the grid 2^{}; every partial sum ≤ {total} units ≤ 2^24", unit.exp);
    Ok(Certificate { method: Method::P2Representable, domain, micros: super::micros(start), detail })
}

fn certificate(d: &DotProduct, start: Instant, grid: i32, total: u128) -> Certificate {
    Certificate {
        method: Method::P2Representable,
        domain: d.weights.len() as u64 + u64::from(d.bias.is_some()),
        micros: super::micros(start),
        detail: format!("{} products and the bias on the grid 2^{grid}; every partial sum ≤ {total} units ≤ 2^24", d.weights.len()),
    }
}

fn finite(s: f32, what: &str) -> Result<Dyadic, String> {
    Dyadic::from_f32(s).ok_or_else(|| format!("{what} {s} is not finite"))
}

/// Whether `v` is zero or an f32 in the normal range, exactly.
pub fn normal_f32(v: Dyadic) -> bool {
    v.is_zero() || (v.is_f32() && v.exp + bit_count(v.sig_bits()) > -126)
}

/// `k·s` is an exact normal f32 for every integer `|k| ≤ max`: `max·|m| ≤ 2^24` with `s = m·2^e`
/// and `2^e` normal.
fn multiples_exact(max: u128, s: Dyadic) -> Result<(), String> {
    if max == 0 || s.is_zero() {
        return Ok(());
    }
    let units = max * s.mant.unsigned_abs();
    if units > MAX_UNITS || s.exp < -126 || s.exp + 24 > 127 {
        return Err(format!("up to {max} × {}·2^{} needs more than 24 significant bits or leaves the normal range", s.mant, s.exp));
    }
    Ok(())
}

/// The exact value of the bias DQ `fl(f32(b)·sb)`, if both of its roundings are exact.
fn bias_term(b: i64, sb: Dyadic) -> Result<Dyadic, String> {
    let code = Dyadic::int(b);
    if !code.is_f32() {
        return Err(format!("bias code {b} is not exactly an f32 (DQ converts it with rounding)"));
    }
    let v = code.checked_mul(sb).ok_or("bias DQ overflows")?;
    if !normal_f32(v) {
        return Err(format!("DQ of bias code {b} is not an exact normal f32"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dot<'a>(sx: f32, sw: f32, weights: &'a [i64], bias: Option<(i64, f32)>) -> DotProduct<'a> {
        let bias = bias.map(|(b, sb)| BiasTerm::Dequantized(b, sb));
        DotProduct { x_scale: sx, x_zero_point: 128, x_codes: (0, 255), w_scale: sw, w_zero_point: 0, weights, alpha: 1.0, bias }
    }

    #[test]
    fn power_of_two_scales_with_small_sums_are_exact() {
        let w: Vec<i64> = (0..64).map(|i| (i * 37 % 255) - 127).collect();
        let cert = dot_product(&dot(0.0078125, 0.001953125, &w, Some((-5000, 0.0078125 * 0.001953125)))).unwrap();
        assert_eq!(cert.method, Method::P2Representable);
        assert_eq!(cert.domain, 65);
    }

    #[test]
    fn large_reductions_overflow_the_grid() {
        // 2048 × 128 × 127 units > 2^24: some order rounds.
        let w = vec![127i64; 2048];
        let err = dot_product(&dot(1.0, 1.0, &w, None)).unwrap_err();
        assert!(err.contains("> 2^24"), "{err}");
    }

    #[test]
    fn generic_scales_are_rejected_at_the_dq() {
        // 0.1 has a 24-bit mantissa: 200 × 0.1 needs more than 24 bits.
        let err = dot_product(&dot(0.1, 0.5, &[1, 2], None)).unwrap_err();
        assert!(err.contains("activations"), "{err}");
        // Weight DQ: exact per code, so a short scale with the actual (small) codes passes...
        let ok = DotProduct { x_codes: (127, 129), ..dot(0.5, 0.1, &[1, -1, 2], None) };
        assert!(dot_product(&ok).is_err(), "products 0.1 × 0.5 × k share no grid below 2^24 units");
        // ...and three-significant-bit scales with narrow sums do.
        let short = dot(0.375, 0.625, &[3, -2, 1], None);
        dot_product(&short).unwrap();
    }

    #[test]
    fn bias_codes_above_2_pow_24_and_misaligned_bias_scales_are_rejected() {
        let err = dot_product(&dot(0.5, 0.5, &[1], Some(((1 << 24) + 1, 0.25)))).unwrap_err();
        assert!(err.contains("bias code"), "{err}");
        // A bias on a much finer grid than the products makes the partial sums too long.
        let err = dot_product(&dot(1.0, 1.0, &[100, 100], Some((1, 2f32.powi(-20))))).unwrap_err();
        assert!(err.contains("> 2^24"), "{err}");
    }

    #[test]
    fn a_float_bias_counts_on_its_own_grid() {
        // 0.75 = 3·2^-2 on the products' grid 2^-3: exact; 0.1 needs 24 bits far below it.
        let w = [1i64, -2, 3];
        let on_grid = DotProduct { bias: Some(BiasTerm::Float(0.75)), ..dot(0.5, 0.25, &w, None) };
        dot_product(&on_grid).unwrap();
        let off_grid = DotProduct { bias: Some(BiasTerm::Float(0.1)), ..dot(0.5, 0.25, &w, None) };
        assert!(dot_product(&off_grid).unwrap_err().contains("> 2^24"));
    }

    #[test]
    fn subnormal_and_non_power_of_two_alpha_are_rejected() {
        let err = dot_product(&dot(2f32.powi(-120), 2f32.powi(-20), &[1], None)).unwrap_err();
        assert!(err.contains("normal"), "{err}");
        let err = dot_product(&DotProduct { alpha: 0.3, ..dot(0.5, 0.5, &[1], None) }).unwrap_err();
        assert!(err.contains("alpha"), "{err}");
        dot_product(&DotProduct { alpha: 0.25, ..dot(0.5, 0.5, &[1], None) }).unwrap();
    }

    #[test]
    fn products_of_two_activations_take_the_largest_product_at_every_k() {
        let op = |scale: f32, max_offset: u128| Operand { scale, max_offset };
        // 2^-5 · 2^-5, offsets up to 133: 16 · 133² = 283 024 units.
        let cert = activation_dot_product(op(2f32.powi(-5), 133), op(2f32.powi(-5), 133), 16).unwrap();
        assert!(cert.detail.contains("283024 units"), "{}", cert.detail);
        // 1024 · 255 · 128 > 2^24.
        let err = activation_dot_product(op(1.0, 255), op(1.0, 128), 1024).unwrap_err();
        assert!(err.contains("> 2^24"), "{err}");
        // A generic scale: 200 · 0.1 is not exact.
        let err = activation_dot_product(op(0.5, 128), op(0.1, 200), 2).unwrap_err();
        assert!(err.contains("DQ of B"), "{err}");
        let err = activation_dot_product(op(2f32.powi(-70), 1), op(2f32.powi(-70), 1), 1).unwrap_err();
        assert!(err.contains("normal"), "{err}");
    }

    #[test]
    fn zero_weights_and_zero_scales_contribute_nothing() {
        dot_product(&dot(1.0, 0.0, &[127; 4096], None)).unwrap();
        dot_product(&dot(1.0, 1.0, &[0; 4096], None)).unwrap();
    }
}
