//! MatMul on activations quantized at run time (per-token dynamic quantization), with constant
//! `[K, N]` weights: the activation's scale `sx` and zero point `zx` exist only while the model
//! runs, so no requantization of them can be proven per instance. The group:
//!
//! 1. **Quantize** each row (or the whole tensor) as ONNX Runtime's DynamicQuantizeLinear does
//!    (`dynamicquantizelinear.cc`, `GetQuantizationParameter` in `util/qmath.h`), bit for bit:
//!    `min = std::min(min(x), 0)`, `max = std::max(max(x), 0)`;
//!    `sx = (max == min) ? 1 : fl(fl(max − min) / 255)`;
//!    `zx = RoundHalfToEven(std::max(0, std::min(255, fl(0 − fl(min / sx)))))` (the `std::`
//!    comparisons literally: a NaN quotient takes 255); codes by ORT's QuantizeLinear
//!    ([`crate::codes::qdq::quantize`]: a true division, NaN to 0). Min and max of finite and
//!    infinite values do not depend on the order MLAS reduces them in (signed zeros give the same
//!    `sx` and `zx` either way); a NaN does, so an activation with a NaN is an error.
//! 2. **Accumulate** `C[m][n] = Σ_k (x[m][k] − zx[m])(w[k][n] − zw[n])` exactly in i32 (the GEMM
//!    with the zero activation zero point minus `zx[m]·D[n]`, `D` the weights' column sums, as
//!    [`crate::a8w8`]); [`DynamicMatMul::new`] refuses weights with `255·Σ_k |w − zw| > i32::MAX`.
//! 3. **Epilogue** ([`Epilogue`]), per element, with `s = sx[m]·sw[n]`:
//!    - `Graph`: `fl(f32(C) · fl(sx·sw))`, what the ONNX graph exporters write computes
//!      (`quantize_dynamic`: DynamicQuantizeLinear → MatMulInteger → Cast → Mul(C, Mul(sx, sw))):
//!      every step is one IEEE operation, so this is that graph's result bit for bit under any
//!      conforming evaluation (contract `exact`; the Cast rounds above 2^24 as ORT's does).
//!    - `Real`: the correctly rounded f32 of the exact `C·sx·sw` (contract `real`), by the
//!      certified f64 product with an exact fallback ([`certified_f32`], theorem P4-f below).
//!    - `Codes`: `sat(rne(C·sx·sw/sy) + zy)` of the exact value, by [`crate::requant`]'s certified
//!      f64 form ([`crate::requant::certified_step`]: [`crate::requant::Certified`]'s operations
//!      and error bound, `requant/certified.rs`) on the ratio of the run-time `sx`, with
//!      [`crate::requant::requant_exact`] as the fallback (theorem P4-q below).
//!
//! **P4-f (certified f32 of a product).** For an integer `C` with |C| < 2^31 and positive
//! finite f32 `sx`, `sw` (or `sx = 0`), let `x = C·sx·sw` (exact real) and
//! `p = fl64(f64(C) · fl64(sx·sw))`. If `p` is not an f32 rounding boundary (a midpoint between
//! two consecutive f32 values, ±(f32::MAX + ulp/2) included), then `rne_f32(x) = rne_f32(p)`.
//! *Proof.* `f64(C)` is exact (31 bits) and `fl64(sx·sw)` is exact (two 24-bit significands,
//! product in `[2^-298, 2^256)`, normal in f64), so `p = fl64(x)`: one round-to-nearest of x.
//! Every f32 boundary `m` has at most 25 significant bits and exponent ≥ −150, so `m` is an f64
//! and `fl64(m) = m`. Suppose a boundary `m` lies between x and p (inclusive), say
//! `x ≤ m ≤ p`; `fl64` is monotone, so `p = fl64(x) ≤ fl64(m) = m ≤ p`: `m = p`, excluded. So
//! no boundary separates x from p, and `rne_f32`, constant between consecutive boundaries, gives
//! both the same value (`p as f32` is `rne_f32(p)` in the default rounding mode). A boundary
//! in f32's normal range is an odd multiple of half an f32 ulp: the low 29 bits of p's
//! significand are exactly `1 << 28`. Below 2^-126 (f32 subnormals) [`certified_f32`] does not
//! test the bits and always falls back; at or above `f32::MAX` it falls back too. `p = ±0` only
//! for `x = 0` (no f64 underflow here), whose correctly rounded value is `+0` (`p + 0.0`).
//!
//! **P4-q (certified requantization with a run-time ratio).** `requant/certified.rs` proves, for
//! every triple of positive finite f32 scales and every `|t| < 2^33`, that its f64 value is
//! within its bound of the exact one, and falls back to `requant_exact` within that bound of a
//! rounding boundary; the argument uses no property of the scales beyond being positive finite
//! f32s, so it holds for scales made at run time. `sx = 0` (a row whose range underflows) has the
//! exact value 0: the code is `sat(zy)`, taken directly.
//!
//! Both are pinned by `tests/dynamic.rs` (sampled scale space over the whole f32 exponent range,
//! constructed ties, double-rounding cases, subnormal and overflow boundaries, saturation
//! edges) and the 10^6-row run `examples/dynamic_rows.rs`.

use crate::Kernels;
use crate::a8w8::rne_f32;
use crate::codes::qdq::quantize;
use crate::gemm::{GemmError, accumulator_bound, gemm_u8};
use crate::pack::PackedB;
use crate::requant::{CodeOut, Output, Ratio, certified_step, count_fallbacks, requant_exact};

/// ORT's DynamicQuantizeLinear parameters of `x`: `(sx, zx)`; `None` when `x` holds a NaN.
pub fn dynamic_parameters(x: &[f32]) -> Option<(f32, u8)> {
    let (mut lo, mut hi) = (f32::MAX, f32::MIN);
    for &v in x {
        if v.is_nan() {
            return None;
        }
        lo = lo.min(v);
        hi = hi.max(v);
    }
    // std::min(lo, 0.0f) = (0 < lo) ? 0 : lo; std::max(hi, 0.0f) = (hi < 0) ? 0 : hi.
    let lo = if 0.0 < lo { 0.0 } else { lo };
    let hi = if hi < 0.0 { 0.0 } else { hi };
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let initial = 0.0 - lo / scale;
    // std::min(255.0f, initial) = (initial < 255) ? initial : 255; std::max(0.0f, v) = (0 < v) ? v : 0.
    let v = if initial < 255.0 { initial } else { 255.0 };
    let v = if 0.0 < v { v } else { 0.0 };
    Some((scale, v.round_ties_even() as u8))
}

/// DynamicQuantizeLinear of `x` into `codes` (same length): `(sx, zx)`, `None` for a NaN.
pub fn dynamic_quantize(x: &[f32], codes: &mut [u8]) -> Option<(f32, u8)> {
    let (scale, zp) = dynamic_parameters(x)?;
    for (q, &v) in codes.iter_mut().zip(x) {
        *q = quantize::<u8>(v, scale, i32::from(zp));
    }
    Some((scale, zp))
}

/// `C·s` correctly rounded to f32, `s = sx·sw` given as its f64 (exact) value and as the two
/// f32 scales for the fallback; returns the value and whether the exact fallback decided it
/// (P4-f in the module header).
#[inline(always)]
pub fn certified_f32(c: i32, s: f64, sx: f32, sw: f32) -> (f32, bool) {
    let p = f64::from(c) * s + 0.0;
    let bits = p.to_bits();
    let a = p.abs();
    let midpoint = bits & ((1 << 29) - 1) == 1 << 28;
    let outside = (a < f64::from(f32::MIN_POSITIVE) && a != 0.0) || a >= f64::from(f32::MAX);
    if midpoint || outside { (exact_f32(c, sx, sw), true) } else { (p as f32, false) }
}

/// `rne_f32(C·sx·sw)` in exact integer arithmetic (`sx = 0` included).
pub fn exact_f32(c: i32, sx: f32, sw: f32) -> f32 {
    let ((mx, ex), (mw, ew)) = (dyadic(sx), dyadic(sw));
    rne_f32(i128::from(c) * i128::from(mx * mw), ex + ew)
}

/// `s = m·2^e` for a finite non-negative f32 (0 gives m = 0).
fn dyadic(s: f32) -> (u64, i32) {
    let bits = s.to_bits() & 0x7fff_ffff;
    let (frac, biased) = (u64::from(bits & 0x7f_ffff), ((bits >> 23) & 0xff) as i32);
    if biased == 0 { (frac, -149) } else { (frac | 1 << 23, biased - 150) }
}

/// What the group writes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Epilogue {
    /// `fl(f32(C)·fl(sx·sw))`: the exported graph's own float steps (contract `exact`).
    Graph,
    /// The correctly rounded f32 of `C·sx·sw` (contract `real`).
    Real,
    /// `sat(rne(C·sx·sw/sy) + zy)` of the exact value.
    Codes { sy: f32, output: Output },
}

/// Where the activation's parameters come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granularity {
    /// One `(sx, zx)` for the whole tensor (DynamicQuantizeLinear).
    Tensor,
    /// One per row of K (per token), each by DynamicQuantizeLinear's formula on its row.
    Row,
    /// One per row of K, made by the graph's own float ops ([`Recipe`]), the codes by
    /// QuantizeLinear with them (the per-row ReduceMin/ReduceMax forms of
    /// `rewrites/src/rules/row_dynamic.rs`).
    RowBy(Recipe),
}

/// The float ops a graph makes a row's `(s, z)` with, each one IEEE operation (so any conforming
/// evaluation, ONNX Runtime's included, gives these bits), constants as f32 bit patterns:
///
/// - `Asymmetric`: ONNX's DynamicQuantizeLinear function body on the row, with the code type's
///   range: `mn = Min(ReduceMin(x), 0)`, `mx = Max(ReduceMax(x), 0)`,
///   `s = Div(Sub(mx, mn), divisor)`, `z = Cast(Round(Clip(Sub(offset, Div(mn, s)), lo, hi)))`
///   (Round before Clip gives the same integer: the bounds are integers);
/// - `Symmetric`: `s = Div(Max(amax, floor), divisor)` with `amax = ReduceMax(Abs(x))` (or
///   `Max(Abs(ReduceMin(x)), Abs(ReduceMax(x)))`, the same value), `z = 0`; `floor` is the
///   graph's `Max` by a small constant (SmoothQuant's `clamp(min=1e-5)`), `+0.0` when it has none
///   (`Max(amax, +0) = amax`: `amax ≥ +0`).
///
/// ReduceMin/ReduceMax of values without NaN do not depend on the order they are reduced in
/// (signed zeros give the same `s` and `z`: `mn` enters only through `Sub` and `Div`, whose
/// results at ±0 are equal values); a NaN does, so a row with a NaN is an error. A row whose `s`
/// is not a positive finite f32 (all zeros: `0/0`) has codes the graph leaves undefined (ORT's
/// Cast of a NaN): an error too, never a guess.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipe {
    Asymmetric { signed: bool, divisor: u32, offset: u32, lo: i32, hi: i32 },
    Symmetric { signed: bool, divisor: u32, floor: u32 },
}

impl Recipe {
    /// Whether the codes are i8 (else u8).
    pub fn signed(self) -> bool {
        match self {
            Recipe::Asymmetric { signed, .. } | Recipe::Symmetric { signed, .. } => signed,
        }
    }
}

/// The row's `(s, z)` by `recipe`, as the graph computes them.
pub fn recipe_parameters(recipe: Recipe, x: &[f32]) -> Result<(f32, i32), DynamicError> {
    let (mut lo, mut hi, mut amax) = (f32::INFINITY, f32::NEG_INFINITY, 0f32);
    for &v in x {
        if v.is_nan() {
            return Err(DynamicError::Nan);
        }
        lo = lo.min(v);
        hi = hi.max(v);
        amax = amax.max(v.abs());
    }
    let (s, z) = match recipe {
        Recipe::Symmetric { divisor, floor, .. } => (amax.max(f32::from_bits(floor)) / f32::from_bits(divisor), 0),
        Recipe::Asymmetric { divisor, offset, lo: zlo, hi: zhi, .. } => {
            let (mn, mx) = (lo.min(0.0), hi.max(0.0));
            let s = (mx - mn) / f32::from_bits(divisor);
            let t = f32::from_bits(offset) - mn / s;
            // Finite whenever s is positive finite (|mn| ≤ mx − mn); checked below before use.
            let z = if t.is_finite() { t.clamp(zlo as f32, zhi as f32).round_ties_even() as i32 } else { 0 };
            (s, z)
        }
    };
    if !(s.is_finite() && s > 0.0) {
        return Err(DynamicError::Undefined(s));
    }
    Ok((s, z))
}

/// QuantizeLinear of one row with the recipe's `(s, z)` (ONNX Runtime's arithmetic), written as
/// u8 codes for the GEMM (i8 codes and zero point shifted by +128: the same differences); returns
/// `(s, shifted z)`.
pub fn recipe_quantize(recipe: Recipe, x: &[f32], codes: &mut [u8]) -> Result<(f32, u8), DynamicError> {
    let (s, z) = recipe_parameters(recipe, x)?;
    if recipe.signed() {
        for (q, &v) in codes.iter_mut().zip(x) {
            *q = (i32::from(quantize::<i8>(v, s, z)) + 128) as u8;
        }
        Ok((s, (z + 128) as u8))
    } else {
        for (q, &v) in codes.iter_mut().zip(x) {
            *q = quantize::<u8>(v, s, z);
        }
        Ok((s, z as u8))
    }
}

/// A run-time failure: the activation cannot be quantized, or a shape disagrees.
#[derive(Clone, Debug, PartialEq)]
pub enum DynamicError {
    /// A NaN in the activation (ORT's min/max then depend on its reduction order).
    Nan,
    /// A non-finite scale under an epilogue that needs the exact value (`Real`, `Codes`).
    Scale(f32),
    /// A row whose graph-made scale is not a positive finite f32: its codes are undefined.
    Undefined(f32),
    Gemm(GemmError),
    Shape(String),
}

impl std::fmt::Display for DynamicError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DynamicError::Nan => f.write_str("dynamic quantization: the activation holds a NaN"),
            DynamicError::Scale(s) => write!(f, "dynamic quantization: activation scale {s:e} is not finite, the exact value is undefined"),
            DynamicError::Undefined(s) => {
                write!(f, "dynamic quantization: a row's activation scale is {s:e}: the graph's codes are undefined there (0/0 or an infinite ratio)")
            }
            DynamicError::Gemm(e) => write!(f, "{e}"),
            DynamicError::Shape(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for DynamicError {}

/// The group's constant part: weight scales per tensor or column, the weights' column sums.
#[derive(Clone, Debug)]
pub struct DynamicMatMul {
    col_scales: Vec<f32>,
    /// `D[n] = Σ_k (w[k][n] − zw[n])`.
    col_sums: Vec<i32>,
    granularity: Granularity,
    epilogue: Epilogue,
}

/// What one run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Elements the exact fallback decided.
    pub fallbacks: u64,
}

impl DynamicMatMul {
    /// Refused: weights whose accumulator can leave i32 for some u8 row and zero point, weight
    /// scales that are not one or one per column of positive finite f32, an output scale that is
    /// not a positive finite f32.
    pub fn new(b: &PackedB, col_scales: &[f32], granularity: Granularity, epilogue: Epilogue) -> Result<DynamicMatMul, DynamicError> {
        let n = b.n();
        if ![1, n].contains(&col_scales.len()) {
            return Err(DynamicError::Shape(format!("{} weight scales for {n} columns", col_scales.len())));
        }
        if let Some(&s) = col_scales.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(DynamicError::Scale(s));
        }
        if let Epilogue::Codes { sy, .. } = epilogue
            && !(sy.is_finite() && sy > 0.0)
        {
            return Err(DynamicError::Scale(sy));
        }
        // |x − zx| ≤ 255 for u8 codes and zero points: the bound with za = 0 covers every zx.
        let bound = accumulator_bound(b, 0);
        if bound > i64::from(i32::MAX) {
            return Err(DynamicError::Shape(format!("Σ(x − zx)(w − zw) can reach ±{bound}, beyond i32")));
        }
        let k = b.k() as i32; // ≤ 2^24 (PackedB)
        let col_sums = b.col_sums().iter().zip(b.zero_points()).map(|(&s, &z)| s - k * z).collect();
        let col_scales = (0..n).map(|c| col_scales[if col_scales.len() == 1 { 0 } else { c }]).collect();
        Ok(DynamicMatMul { col_scales, col_sums, granularity, epilogue })
    }

    pub fn n(&self) -> usize {
        self.col_scales.len()
    }

    pub fn epilogue(&self) -> Epilogue {
        self.epilogue
    }

    /// Quantizes the row-major `m × K` activation `x` into `codes` and returns `(sx, zx)` per row
    /// (one entry for [`Granularity::Tensor`]).
    pub fn quantize(&self, x: &[f32], k: usize, codes: &mut [u8]) -> Result<Vec<(f32, u8)>, DynamicError> {
        if k == 0 || !x.len().is_multiple_of(k) || codes.len() != x.len() {
            return Err(DynamicError::Shape(format!("{} activations, {} codes, K = {k}", x.len(), codes.len())));
        }
        let params = match self.granularity {
            Granularity::Tensor => vec![dynamic_quantize(x, codes).ok_or(DynamicError::Nan)?],
            Granularity::Row => {
                x.chunks_exact(k).zip(codes.chunks_exact_mut(k)).map(|(x, q)| dynamic_quantize(x, q).ok_or(DynamicError::Nan)).collect::<Result<_, _>>()?
            }
            Granularity::RowBy(recipe) => {
                x.chunks_exact(k).zip(codes.chunks_exact_mut(k)).map(|(x, q)| recipe_quantize(recipe, x, q)).collect::<Result<_, _>>()?
            }
        };
        if !matches!(self.epilogue, Epilogue::Graph)
            && let Some(&(s, _)) = params.iter().find(|(s, _)| !s.is_finite())
        {
            return Err(DynamicError::Scale(s));
        }
        Ok(params)
    }

    /// The integer part: `c[m][n] = C[m][n]` for the codes of [`DynamicMatMul::quantize`].
    pub fn accumulate(&self, kernels: Kernels, codes: &[u8], m: usize, params: &[(f32, u8)], b: &PackedB, c: &mut [i32]) -> Result<(), DynamicError> {
        let n = self.n();
        if b.n() != n || c.len() != m * n || ![1, m].contains(&params.len()) {
            return Err(DynamicError::Shape(format!("{n}-column group on {} columns, {} accumulators, {} parameters, m = {m}", b.n(), c.len(), params.len())));
        }
        if let [(_, zx)] = params {
            return gemm_u8(kernels, codes, m, *zx, b, c).map_err(DynamicError::Gemm);
        }
        gemm_u8(kernels, codes, m, 0, b, c).map_err(DynamicError::Gemm)?;
        for (row, &(_, zx)) in c.chunks_exact_mut(n).zip(params) {
            let zx = i32::from(zx);
            // Exact modulo 2^32, hence exact: the true sum fits i32 (checked by `new`).
            for (acc, &d) in row.iter_mut().zip(&self.col_sums) {
                *acc = acc.wrapping_sub(zx.wrapping_mul(d));
            }
        }
        Ok(())
    }

    /// The float epilogue of one row: `out[n]` from `C[n]` with the row's `sx`; returns the
    /// fallback count (counted also in [`crate::requant::fallback_hits`] by the callers' runs).
    pub fn float_row(&self, sx: f32, acc: &[i32], out: &mut [f32]) -> u64 {
        float_row(self.epilogue, sx, &self.col_scales, acc, out)
    }

    /// The codes epilogue of one row.
    pub fn codes_row<C: CodeOut>(&self, kernels: Kernels, sx: f32, acc: &[i32], out: &mut [C]) -> Result<u64, DynamicError> {
        let Epilogue::Codes { sy, output } = self.epilogue else { return Err(DynamicError::Shape("a float-output group run for codes".into())) };
        codes_row(kernels, sx, &self.col_scales, sy, output, acc, out)
    }

    /// The float-output group on the row-major `m × K` activation `x`; `codes` and `c` are the
    /// caller's scratch (`m × K`, `m × N`).
    #[allow(clippy::too_many_arguments)] // the group's operands and scratch
    pub fn run_f32(&self, kernels: Kernels, x: &[f32], m: usize, b: &PackedB, codes: &mut [u8], c: &mut [i32], out: &mut [f32]) -> Result<Stats, DynamicError> {
        let n = self.n();
        if matches!(self.epilogue, Epilogue::Codes { .. }) || out.len() != m * n {
            return Err(DynamicError::Shape(format!("float output of {} for m = {m}, n = {n} ({:?})", out.len(), self.epilogue)));
        }
        let params = self.quantize(x, b.k(), codes)?;
        self.accumulate(kernels, codes, m, &params, b, c)?;
        let mut stats = Stats::default();
        for (row, (acc, y)) in c.chunks_exact(n).zip(out.chunks_exact_mut(n)).enumerate() {
            stats.fallbacks += self.float_row(params[if params.len() == 1 { 0 } else { row }].0, acc, y);
        }
        count_fallbacks(stats.fallbacks);
        Ok(stats)
    }

    /// The codes-output group (as [`DynamicMatMul::run_f32`]).
    #[allow(clippy::too_many_arguments)] // the group's operands and scratch
    pub fn run<C: CodeOut>(
        &self,
        kernels: Kernels,
        x: &[f32],
        m: usize,
        b: &PackedB,
        codes: &mut [u8],
        c: &mut [i32],
        out: &mut [C],
    ) -> Result<Stats, DynamicError> {
        let n = self.n();
        if out.len() != m * n {
            return Err(DynamicError::Shape(format!("{} outputs for m = {m}, n = {n}", out.len())));
        }
        let params = self.quantize(x, b.k(), codes)?;
        self.accumulate(kernels, codes, m, &params, b, c)?;
        let mut stats = Stats::default();
        for (row, (acc, y)) in c.chunks_exact(n).zip(out.chunks_exact_mut(n)).enumerate() {
            stats.fallbacks += self.codes_row(kernels, params[if params.len() == 1 { 0 } else { row }].0, acc, y)?;
        }
        Ok(stats)
    }
}

/// The float epilogue of one row (`col_scales` one per column); the fallback count.
pub fn float_row(epilogue: Epilogue, sx: f32, col_scales: &[f32], acc: &[i32], out: &mut [f32]) -> u64 {
    let mut fallbacks = 0;
    match epilogue {
        Epilogue::Graph => {
            for ((&c, y), &sw) in acc.iter().zip(out.iter_mut()).zip(col_scales) {
                *y = c as f32 * (sx * sw);
            }
        }
        _ => {
            let sx64 = f64::from(sx);
            for ((&c, y), &sw) in acc.iter().zip(out.iter_mut()).zip(col_scales) {
                let (v, fell) = certified_f32(c, sx64 * f64::from(sw), sx, sw);
                *y = v;
                fallbacks += u64::from(fell);
            }
        }
    }
    fallbacks
}

/// The codes epilogue of one row: per column the certified requantization
/// ([`crate::requant::requant_certified`]) of `C·sx·sw[n]/sy`;
/// `sx = 0` writes `sat(zy)`. Its fallbacks are counted in [`crate::requant::fallback_hits`];
/// returns them.
pub fn codes_row<C: CodeOut>(_kernels: Kernels, sx: f32, col_scales: &[f32], sy: f32, output: Output, acc: &[i32], out: &mut [C]) -> Result<u64, DynamicError> {
    let n = acc.len();
    if col_scales.len() != n || out.len() != n || C::CODE != output.code() {
        return Err(DynamicError::Shape(format!("{} scales, {} accumulators, {} outputs", col_scales.len(), n, out.len())));
    }
    if sx == 0.0 {
        out.iter_mut().for_each(|y| *y = C::from_code(output.saturate(0)));
        return Ok(0);
    }
    let positive = |s: f32| s.is_finite() && s > 0.0;
    if let Some(&s) = [sx, sy].iter().chain(col_scales).find(|s| !positive(**s)) {
        return Err(DynamicError::Scale(s));
    }
    let mut fallbacks = 0;
    for ((&c, y), &sw) in acc.iter().zip(out.iter_mut()).zip(col_scales) {
        // The f64 step on the run-time ratio; a Ratio is made only where the exact form decides.
        let v = match certified_step(c, sx, sw, sy, output) {
            Some(v) => v,
            None => {
                fallbacks += 1;
                let ratio = Ratio::new(sx, sw, sy).map_err(|e| DynamicError::Shape(format!("dynamic requantization: {e}")))?;
                requant_exact(c, 0, &ratio, output)
            }
        };
        *y = C::from_code(v);
    }
    count_fallbacks(fallbacks);
    Ok(fallbacks)
}
