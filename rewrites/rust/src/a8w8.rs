//! The A8W8 group with per-row activation parameters, `DQ(x; sx[m], zx[m])·DQ(w; sw[n], zw[n])`
//! (+ `DQ(b; sb)`) → MatMul/Gemm → Q, on the kernel crate's [`qdqc_kernels::a8w8::A8W8`]: one
//! i32 GEMM `C[m][n] = Σ_k (x − zx[m])(w − zw[n])` (the `zx[m]` correction from weight sums
//! computed once), then per element `requant_exact` on the ratio `sx[m]·sw[n]/sy` with the bias
//! at its own scale: `sat(rne((C·sx[m]·sw[n] + b·sb)/sy) + zy)`.
//!
//! Obligation (contract §3.12), for every row parameter and every column:
//!
//! | condition | why |
//! |---|---|
//! | x, w, y 8-bit codes; zero points codes of their type; bias zero point 0 | what the kernel takes |
//! | every `Ratio::new(sx[t], sw[n], sy)` (with `with_bias(b[n], sb[n])`) is made | the kernel makes them per element at run time; made here, they cannot fail there |
//! | `max_t max(abs(lo − zx[t]), abs(hi − zx[t]))·Σ_k abs(w[k][n] − zw[n])` within i32 for every column, from the actual weights and the reachable x codes | the GEMM and the correction wrap modulo 2^32 alike: C is exact wherever its true value fits i32 |
//! | `real`: `requant_exact` is the definition (by construction) | it is `sat(rne((C·sx[m]·sw[n] + b·sb)/sy) + zy)` exactly, the contract's rounding of the exact value |
//! | `exact`: each distinct row parameter `(sx[t], zx[t])` as a per-tensor group through [`crate::gemm::prove`] (P2 then P3), within a budget of rows × weights | the float path of the row is the per-tensor group's; without P2 it is not one function of the inputs |
//!
//! The float-output group (`DQ(x)·DQ(w)` → MatMul, no Q; [`prove_float`]) runs the same GEMM and
//! writes `rne_f32(C·sx[m]·sw[n])`, the correctly rounded f32 of the exact value (one rounding
//! instead of K):
//!
//! | condition | why |
//! |---|---|
//! | the conditions above on codes, scales and the i32 bound (no bias, no output) | the same GEMM |
//! | `real`: `rne_f32` is the definition (by construction) | the contract's float output is the correctly rounded exact value |
//! | `exact`: P2 ([`p2::dot_product`]) for every distinct row parameter and every column | the float path is then exact, so it equals the correctly rounded value; without P2 it is not one function of the inputs |
//!
//! A scale that varies along K (an activation scale per K, a weight scale per K row, blocked
//! scales along K) weights the products inside the sum: no epilogue of `C` applies it.
//! [`refute_along_k`] shows it on the instance: one activation row whose `C[n]` is 0, as is the
//! row of zero points', whose exact outputs differ.

use crate::gemm;
use qdqc_exact::num::Dyadic;
use qdqc_exact::p2::{self, DotProduct};
use qdqc_exact::reference::{CodeType, quantize_real};
use qdqc_exact::{Certificate, Contract, Counterexample, Method, QParam, Verdict, by_construction};
use qdqc_kernels::a8w8::rne_f32;
use qdqc_kernels::requant::Ratio;
use qdqc_ort::requant::{Bias, GemmGroup, GemmKind};
use std::time::Instant;

/// Rows × weights the `exact` proof checks at most (each distinct row is a per-tensor group).
pub const EXACT_BUDGET: u64 = 1 << 26;

/// A group with per-row activation parameters (one entry: per tensor) and per-column weight
/// parameters (one entry: per tensor).
#[derive(Clone, Debug)]
pub struct RowGroup {
    pub x_code: CodeType,
    /// The activation codes that can reach the op.
    pub x_codes: (i64, i64),
    /// `sx` and `zx` per row parameter `t` (the row period, [`qdqc_kernels::a8w8::A8W8`]).
    pub x_scales: Vec<f32>,
    pub x_zero_points: Vec<i64>,
    pub w_code: CodeType,
    /// Weight codes per output column (each of length K).
    pub weights: Vec<Vec<i64>>,
    pub w_scales: Vec<f32>,
    pub w_zero_points: Vec<i64>,
    pub bias: Option<Bias>,
    pub y: QParam,
}

fn pick<T: Copy>(v: &[T], i: usize) -> T {
    v[if v.len() == 1 { 0 } else { i }]
}

/// Proves or refutes running `g` on the kernel crate under `contract`.
pub fn prove(g: &RowGroup, contract: Contract) -> Verdict {
    let start = Instant::now();
    let bound = match validate(g) {
        Ok(b) => b,
        Err(reason) => return Verdict::Unknown { reason: format!("refused: {reason}") },
    };
    let (rows, columns) = (g.x_scales.len(), g.weights.len());
    let header = format!(
        "A8W8 on the Rust kernels: {rows} row parameter(s) × {columns} column(s); i32 accumulation: every reachable |Σ(x − zx[m])(w − zw[n])| ≤ {bound}; {} ratios sx[m]·sw[n]/sy made",
        rows * columns
    );
    match contract {
        Contract::Real => by_construction(
            "qdqc_kernels::requant::requant_exact",
            format!("{header}; requant_exact per element is sat(rne((C·sx[m]·sw[n] + b·sb)/sy) + zy), the contract's rounding of the exact value"),
            0,
            start,
        ),
        Contract::Exact => exact(g, &header, start),
    }
}

/// The largest reachable `|C|`, or the first condition that fails.
fn validate(g: &RowGroup) -> Result<i64, String> {
    let eight = |t: CodeType| matches!(t, CodeType::U8 | CodeType::I8);
    if !(eight(g.x_code) && eight(g.w_code) && eight(g.y.code)) {
        return Err(format!("the Rust kernels take 8-bit codes, not x {}, w {}, y {}", g.x_code.name(), g.w_code.name(), g.y.code.name()));
    }
    let (rows, columns) = (g.x_scales.len(), g.weights.len());
    let k = g.weights.first().map_or(0, Vec::len);
    if rows == 0 || g.x_zero_points.len() != rows || columns == 0 || k == 0 || g.weights.iter().any(|w| w.len() != k) {
        return Err(format!("{rows} row scales, {} row zero points, {columns} columns of K = {k}", g.x_zero_points.len()));
    }
    if ![1, columns].contains(&g.w_scales.len()) || ![1, columns].contains(&g.w_zero_points.len()) {
        return Err(format!("{} weight scales and {} zero points for {columns} columns", g.w_scales.len(), g.w_zero_points.len()));
    }
    let in_range = |t: CodeType, v: i64| (t.range().0..=t.range().1).contains(&v);
    if !g.x_zero_points.iter().all(|&z| in_range(g.x_code, z)) || !g.w_zero_points.iter().all(|&z| in_range(g.w_code, z)) || !in_range(g.y.code, g.y.zero_point)
    {
        return Err("a zero point outside its code range".into());
    }
    if let Some(w) = g.weights.iter().flatten().find(|&&w| !in_range(g.w_code, w)) {
        return Err(format!("weight code {w} outside {}", g.w_code.name()));
    }
    let (lo, hi) = g.x_codes;
    let amplitude = g.x_zero_points.iter().map(|&z| (lo - z).abs().max((hi - z).abs())).max().unwrap_or(0);
    let mut bound = 0i64;
    for (c, w) in g.weights.iter().enumerate() {
        let zw = pick(&g.w_zero_points, c);
        let sum: i64 = w.iter().map(|&v| (v - zw).abs()).sum();
        bound = bound.max(amplitude * sum);
    }
    if bound > i64::from(i32::MAX) {
        return Err(format!("Σ(x − zx)(w − zw) can reach ±{bound}, beyond i32 (the kernels have no i64 accumulation yet)"));
    }
    let bias = match &g.bias {
        None => None,
        Some(b) if b.float.is_some() => return Err("a float bias (the kernels take int32 codes)".into()),
        Some(b) => {
            if b.codes.len() != columns || ![1, columns].contains(&b.scales.len()) {
                return Err("bias shapes do not match the columns".into());
            }
            if let Some(z) = b.zero_points.iter().find(|&&z| z != 0) {
                return Err(format!("bias zero point {z} ≠ 0"));
            }
            Some(b)
        }
    };
    for t in 0..rows {
        for c in 0..columns {
            let ratio = Ratio::new(g.x_scales[t], pick(&g.w_scales, c), g.y.scale).map_err(|e| format!("row {t}, column {c}: scales: {e}"))?;
            if let Some(b) = bias {
                let code = i32::try_from(b.codes[c]).map_err(|_| format!("column {c}: bias code {} is not an i32", b.codes[c]))?;
                ratio.with_bias(code, pick(&b.scales, c)).map_err(|e| format!("row {t}, column {c}: bias: {e}"))?;
            }
        }
    }
    Ok(bound)
}

/// The distinct row parameters `(sx bits, zx)`, sorted; refused when proving each of them over
/// every weight is beyond [`EXACT_BUDGET`] (`exact` proves the float path one row parameter at
/// a time, for the Q-output and the float-output group alike).
fn distinct_rows(g: &RowGroup) -> Result<Vec<(u32, i64)>, String> {
    let mut distinct: Vec<(u32, i64)> = g.x_scales.iter().zip(&g.x_zero_points).map(|(s, &z)| (s.to_bits(), z)).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let weights = g.weights.len() as u64 * g.weights[0].len() as u64;
    if distinct.len() as u64 * weights > EXACT_BUDGET {
        return Err(format!(
            "refused: exact: {} distinct row parameters × {weights} weights is beyond the budget of {EXACT_BUDGET} (the per-row float path is proven one row parameter at a time)",
            distinct.len()
        ));
    }
    Ok(distinct)
}

/// `exact`: every distinct row parameter as a per-tensor group (P2, then P3).
fn exact(g: &RowGroup, header: &str, start: Instant) -> Verdict {
    let distinct = match distinct_rows(g) {
        Ok(d) => d,
        Err(reason) => return Verdict::Unknown { reason },
    };
    let mut domain = 0;
    for &(bits, z) in &distinct {
        let x = QParam::new(f32::from_bits(bits), z, g.x_code);
        let mut row = GemmGroup::new(GemmKind::MatMul, x, g.w_code, g.weights.clone(), g.w_scales.clone(), g.w_zero_points.clone(), g.y)
            .with_x_codes(g.x_codes.0, g.x_codes.1);
        if let Some(b) = &g.bias {
            row = row.with_bias(b.clone());
        }
        match gemm::prove(&row, Contract::Exact) {
            Verdict::Exact { proof } => domain += proof.domain,
            other => return other.annotated(&format!("row parameter sx = {:e}, zx = {z}", f32::from_bits(bits))),
        }
    }
    let detail = format!("{header}; exact: {} distinct row parameter(s), each P2 then P3 as a per-tensor group", distinct.len());
    Verdict::Exact { proof: Certificate { method: Method::P3RequantWindow, domain, micros: micros(start), detail } }
}

/// The float-output group (`g.y` and `g.bias` unused; a bias is refused): real by construction,
/// exact where P2 holds for every distinct row parameter and column.
pub fn prove_float(g: &RowGroup, contract: Contract) -> Verdict {
    let start = Instant::now();
    if g.bias.is_some() {
        return Verdict::Unknown { reason: "refused: a float-output group with a bias is not modelled".into() };
    }
    let unit = RowGroup { y: QParam::new(1.0, 0, CodeType::U8), ..g.clone() };
    let bound = match validate(&unit) {
        Ok(b) => b,
        Err(reason) => return Verdict::Unknown { reason: format!("refused: {reason}") },
    };
    let header = format!(
        "A8W8 float output on the Rust kernels: {} row parameter(s) × {} column(s); i32 accumulation: every reachable |Σ(x − zx[m])(w − zw[n])| ≤ {bound}",
        g.x_scales.len(),
        g.weights.len()
    );
    if contract == Contract::Real {
        return by_construction(
            "qdqc_kernels::a8w8::rne_f32",
            format!("{header}; rne_f32(C·sx[m]·sw[n]) is the correctly rounded f32 of the exact value"),
            0,
            start,
        );
    }
    let distinct = match distinct_rows(g) {
        Ok(d) => d,
        Err(reason) => return Verdict::Unknown { reason },
    };
    for &(bits, z) in &distinct {
        for (c, w) in g.weights.iter().enumerate() {
            let dot = DotProduct {
                x_scale: f32::from_bits(bits),
                x_zero_point: z,
                x_codes: g.x_codes,
                w_scale: pick(&g.w_scales, c),
                w_zero_point: pick(&g.w_zero_points, c),
                weights: w,
                alpha: 1.0,
                bias: None,
            };
            if let Err(why) = p2::dot_product(&dot) {
                return Verdict::Unknown { reason: format!("refused: exact: P2 fails for row parameter sx = {:e}, column {c}: {why}", f32::from_bits(bits)) };
            }
        }
    }
    let detail = format!("{header}; exact: P2 for {} distinct row parameter(s) × {} column(s): the float path is exact", distinct.len(), g.weights.len());
    Verdict::Exact {
        proof: Certificate {
            method: Method::P2Representable,
            domain: distinct.len() as u64 * g.weights.len() as u64 * g.weights[0].len() as u64,
            micros: micros(start),
            detail,
        },
    }
}

/// One activation row of a group whose scales vary along K, with everything expanded per `k`:
/// what [`refute_along_k`] reads.
#[derive(Clone, Debug)]
pub struct AlongK {
    /// Where the scale varies, for the reason (e.g. "activation scale per K (axis 1)").
    pub what: String,
    pub x_code: CodeType,
    pub x_codes: (i64, i64),
    /// The row's activation scale and zero point at each k.
    pub x_scales: Vec<f32>,
    pub x_zero_points: Vec<i64>,
    /// Per output column, at each k: weight code, scale, zero point.
    pub weights: Vec<Vec<i64>>,
    pub w_scales: Vec<Vec<f32>>,
    pub w_zero_points: Vec<Vec<i64>>,
    /// The exact bias value of each column (`b·sb`), if any.
    pub bias: Option<Vec<Dyadic>>,
    /// The output's parameters; `None`: the float output (compared as correctly rounded f32 bits).
    pub y: Option<QParam>,
}

/// Pairs of k [`refute_along_k`] tries at most.
pub const PAIRS_TRIED: u64 = 1 << 16;

/// The counterexample to folding a scale that varies along K into a GEMM epilogue: an activation
/// row that is at its zero points but at `k1` and `k2`, where `(x − zx)` is `t·w'2/g` and
/// `−t·w'1/g` (`w'` = weight − zero point, g their gcd), so that `C[n] = 0`, as for the row of
/// zero points; an epilogue is a function of `C[n]`, so it gives both rows one code, but their
/// exact outputs differ. The largest `t` the codes allow is tried, over the columns and pairs of
/// k in order. Refuted with that row, or unknown (still refused) when no pair shows it. A float
/// output compares the correctly rounded f32 (its bits) instead of the output codes.
pub fn refute_along_k(g: &AlongK) -> Verdict {
    let start = Instant::now();
    let reason = format!("{}: the scale weights the products inside Σ_k, so no epilogue of the integer accumulator applies it", g.what);
    let (lo, hi) = g.x_codes;
    let exact = |n: usize, terms: &[(usize, i64)]| -> Option<(Dyadic, i64)> {
        let mut v = g.bias.as_ref().map_or(Dyadic::ZERO, |b| b[n]);
        for &(k, d) in terms {
            let s = Dyadic::from_f32(g.x_scales[k])?.checked_mul(Dyadic::from_f32(g.w_scales[n][k])?)?;
            v = v.checked_add(Dyadic::int(d * (g.weights[n][k] - g.w_zero_points[n][k])).checked_mul(s)?)?;
        }
        let out = match g.y {
            Some(y) => quantize_real(v, y.scale, y.zero_point, y.code)?,
            None => i64::from(rne_f32(v.mant, v.exp).to_bits()),
        };
        Some((v, out))
    };
    let mut tried = 0u64;
    for n in 0..g.weights.len() {
        let Some((_, at_zero)) = exact(n, &[]) else { continue };
        let k = g.weights[n].len();
        let scale = |i: usize| Dyadic::from_f32(g.x_scales[i]).zip(Dyadic::from_f32(g.w_scales[n][i])).and_then(|(a, b)| a.checked_mul(b));
        for k1 in 0..k {
            let w1 = g.weights[n][k1] - g.w_zero_points[n][k1];
            if w1 == 0 {
                continue;
            }
            for k2 in k1 + 1..k {
                let w2 = g.weights[n][k2] - g.w_zero_points[n][k2];
                if w2 == 0 || scale(k1) == scale(k2) {
                    continue;
                }
                tried += 1;
                if tried > PAIRS_TRIED {
                    return Verdict::Unknown { reason: format!("refused: {reason} (no pair of the first {PAIRS_TRIED} tried shows it on this instance)") };
                }
                let gcd = gcd(w1.abs(), w2.abs());
                let (d1, d2) = (w2 / gcd, -w1 / gcd);
                let (z1, z2) = (g.x_zero_points[k1], g.x_zero_points[k2]);
                // The largest |t| with z1 + t·d1 and z2 + t·d2 in [lo, hi], both signs.
                let fits = |t: i64| (lo..=hi).contains(&(z1 + t * d1)) && (lo..=hi).contains(&(z2 + t * d2));
                let t_max = (lo - hi).abs().max(1);
                for t in (1..=t_max).rev().flat_map(|t| [t, -t]) {
                    if !fits(t) {
                        continue;
                    }
                    let Some((value, code)) = exact(n, &[(k1, t * d1), (k2, t * d2)]) else { break };
                    if code == at_zero {
                        continue;
                    }
                    let counterexample = Counterexample {
                        inputs: vec![
                            ("column".into(), index(n)),
                            ("k1".into(), index(k1)),
                            ("x[k1]".into(), z1 + t * d1),
                            ("k2".into(), index(k2)),
                            ("x[k2]".into(), z2 + t * d2),
                        ],
                        unfused: code,
                        fused: at_zero,
                        exact: Some(format!("{:e}", value.to_f64_lossy())),
                        differing: 1,
                    };
                    let detail = format!(
                        "{reason}: the row at its zero points but x[{k1}] = {}, x[{k2}] = {} has C[{n}] = 0 like the row of zero points (output {at_zero}), yet its exact output is {code}",
                        z1 + t * d1,
                        z2 + t * d2
                    );
                    let proof = Certificate {
                        method: Method::P4Lemma("an epilogue is a function of the accumulator".into()),
                        domain: tried,
                        micros: micros(start),
                        detail,
                    };
                    return Verdict::Refuted { counterexample, proof };
                }
            }
        }
    }
    Verdict::Unknown { reason: format!("refused: {reason} (no pair of the {tried} tried shows it on this instance)") }
}

/// A position as a counterexample input (positions are far below 2^63).
fn index(i: usize) -> i64 {
    i64::try_from(i).unwrap_or(i64::MAX)
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn micros(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}
