//! QLinearMatMul over two activations (attention's `QKᵀ` and `AV`): ONNX Runtime 1.31's kernel
//! with a non-constant B, and the proof that fusing `Q(MatMul(DQ(a), DQ(b)))` into it is exact
//! for every code both operands can take.
//!
//! From the sources (`quantize_linear_matmul.cc`, MLAS `qgemm.cpp`): with B not a constant
//! initializer nothing is prepacked; `MlasGemmBatch` runs one GEMM per broadcast batch
//! (`MatMulComputeHelper`'s offsets, the float MatMul's broadcasting) on B packed on the fly by
//! the dispatch a constant B gets (`MlasGemmQuantGetDispatch` by the signs of A and B, then its
//! `CopyPackB`; the GEMV shortcut needs no output processor, and QLinearMatMul always has its
//! requantizing one). So the arithmetic is [`super::requant`]'s: raw-code products corrected by the zero
//! points in exact int32
//! (exact for u8×u8 and s8×s8 on every modelled ISA), the x86-avx2 u8×s8 kernel adding adjacent
//! K pairs with int16 saturation, then `MlasRequantizeOutput` with `M = fl(fl(sa·sb)/sy)`.
//!
//! No value of B is known, so every bound quantifies over both reachable code ranges:
//!
//! * P2 (`exact`): [`p2::activation_dot_product`], the largest product at every k;
//! * accumulators: `K·[pmin, pmax]`, the extreme products of the two offset ranges;
//! * x86-avx2 u8×s8: unknown (never fused) when two raw-code products of the ranges can leave
//!   int16 — any B can put them side by side;
//! * P3: ORT's requantization against the Q of the exact value on every accumulator of that
//!   range; a difference is reported with concrete A and B rows that reach it.

use super::Isa;
use super::profile::Gemm;
use super::requant::{GemmKind, Line, NearBoundary, gamma, output_multiplier, rational_text, reach, reach_order, requantize};
use qdqc_exact::num::Dyadic;
use qdqc_exact::p2::{self, Operand};
use qdqc_exact::p3::{self, Codes, Direction, Outcome};
use qdqc_exact::reference::{CodeType, dequantize, quantize, quantize_real};
use qdqc_exact::{Certificate, Contract, Counterexample, Method, QParam, Verdict};
use serde::Serialize;
use std::time::Instant;

/// A `Q(MatMul(DQ(a), DQ(b)))` group whose B is an activation, per-tensor everywhere.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DynamicMatMul {
    pub a: QParam,
    /// The codes that can reach the op (by default the type's range).
    pub a_codes: (i64, i64),
    pub b: QParam,
    pub b_codes: (i64, i64),
    /// The inner dimension.
    pub k: usize,
    pub y: QParam,
}

impl DynamicMatMul {
    pub fn new(a: QParam, b: QParam, k: usize, y: QParam) -> DynamicMatMul {
        DynamicMatMul { a, a_codes: a.code.range(), b, b_codes: b.code.range(), k, y }
    }

    pub fn with_codes(self, a_codes: (i64, i64), b_codes: (i64, i64)) -> DynamicMatMul {
        DynamicMatMul { a_codes, b_codes, ..self }
    }

    /// ORT's output multiplier.
    pub fn multiplier(&self) -> f32 {
        output_multiplier(GemmKind::MatMul, self.a.scale, self.b.scale, self.y.scale)
    }

    /// Reachable `a − za` and `b − zb`.
    fn offsets(&self) -> ((i64, i64), (i64, i64)) {
        let (a, b) = (self.a_codes, self.b_codes);
        ((a.0 - self.a.zero_point, a.1 - self.a.zero_point), (b.0 - self.b.zero_point, b.1 - self.b.zero_point))
    }

    /// The reachable accumulators: K times the extreme products of the offset ranges.
    pub fn accumulators(&self) -> (i64, i64) {
        let (ua, ub) = self.offsets();
        let (lo, hi) = extreme_products(ua, ub);
        let k = i64::try_from(self.k).expect("K is a tensor dimension, below i64::MAX");
        (lo * k, hi * k)
    }

    /// The largest K whose accumulators stay in int32, at most [`K_CAP`].
    pub fn int32_bound(&self) -> usize {
        let (ua, ub) = self.offsets();
        let (lo, hi) = extreme_products(ua, ub);
        let cap = i64::try_from(K_CAP).expect("K_CAP is a small constant");
        let by_hi = if hi > 0 { i64::from(i32::MAX) / hi } else { cap };
        let by_lo = if lo < 0 { i64::from(i32::MIN) / lo } else { cap };
        usize::try_from(by_hi.min(by_lo).clamp(1, cap)).expect("clamped to 1..=K_CAP")
    }

    /// The raw pair sum outside int16 that x86-avx2's u8×s8 kernel can meet, if any.
    pub fn pair_overflow(&self, isa: Isa) -> Option<i64> {
        if isa.arith().gemm != Gemm::PairSaturating || (self.a.code, self.b.code) != (CodeType::U8, CodeType::I8) || self.k < 2 {
            return None;
        }
        let (lo, hi) = extreme_products(self.a_codes, self.b_codes);
        [2 * hi, 2 * lo].into_iter().find(|&s| s > i16::MAX as i64 || s < i16::MIN as i64)
    }

    /// Concrete A and B codes (one row, one column) whose exact accumulator is `target`, or
    /// `None` when the search finds none (accumulators next to the extremes may be unreachable):
    /// B fixed at one offset `v` (its farthest from zero first), with or without one position at
    /// the offset nearest zero, and A solved greedily ([`reach`]); then the roles swapped.
    fn reach(&self, target: i64) -> Option<(Vec<i64>, Vec<i64>)> {
        let (ua, ub) = self.offsets();
        let solve = |fixed: (i64, i64), free: (i64, i64)| {
            candidates(fixed).into_iter().find_map(|(v, fine)| {
                let mut d = vec![v; self.k];
                if let Some(f) = fine {
                    d[self.k - 1] = f;
                }
                Some((reach(&d, free, target, &[], &reach_order(&d, &[]))?, d))
            })
        };
        let shift = |v: Vec<i64>, z: i64| v.into_iter().map(|u| u + z).collect::<Vec<_>>();
        let (a, b) = solve(ub, ua).or_else(|| solve(ua, ub).map(|(b, a)| (a, b)))?;
        Some((shift(a, self.a.zero_point), shift(b, self.b.zero_point)))
    }
}

/// Fixed offsets tried by [`DynamicMatMul::reach`]: the nonzero offsets of `[lo, hi]`, farthest
/// from zero first (at most [`CANDIDATES`]), each with the nearest nonzero offset at the last
/// position and without.
fn candidates((lo, hi): (i64, i64)) -> Vec<(i64, Option<i64>)> {
    let mut values: Vec<i64> = (lo..=hi).filter(|&v| v != 0).collect();
    values.sort_by_key(|v| (std::cmp::Reverse(v.abs()), *v));
    values.truncate(CANDIDATES);
    let fine = [1, -1, lo, hi].into_iter().find(|&v| v != 0 && lo <= v && v <= hi);
    values.into_iter().flat_map(|v| [(v, fine), (v, None)]).collect()
}

/// Fixed offsets tried per side: enough to reach all but a few accumulators next to the extremes.
const CANDIDATES: usize = 8;

fn extreme_products((a0, a1): (i64, i64), (b0, b1): (i64, i64)) -> (i64, i64) {
    let corners = [a0 * b0, a0 * b1, a1 * b0, a1 * b1];
    (corners.into_iter().min().unwrap(), corners.into_iter().max().unwrap())
}

/// A precondition of ORT's kernel, named for reports.
type Condition = (&'static str, fn(&DynamicMatMul) -> Result<(), String>);

/// What ORT's QLinearMatMul needs of a group whatever its scales' values (the same on every
/// modelled ISA).
const CONDITIONS: [Condition; 3] = [("code types", kernel_types), ("codes in range", codes_in_range), ("finite scales", finite_scales)];

/// CPU kernels exist for u8×u8, u8×s8 and s8×s8, with A's type out.
fn kernel_types(g: &DynamicMatMul) -> Result<(), String> {
    use CodeType::{I8, U8};
    let (a, b, y) = (g.a.code, g.b.code, g.y.code);
    if !matches!((a, b), (U8, U8) | (U8, I8) | (I8, I8)) || y != a {
        return Err(format!("QLinearMatMul has no CPU kernel for A {}, B {}, y {}", a.name(), b.name(), y.name()));
    }
    Ok(())
}

fn codes_in_range(g: &DynamicMatMul) -> Result<(), String> {
    let within = |what: &str, codes: &[i64], t: CodeType| {
        let (lo, hi) = t.range();
        codes.iter().find(|&&q| q < lo || q > hi).map_or(Ok(()), |q| Err(format!("{what} {q} outside {}", t.name())))
    };
    within("A zero point", &[g.a.zero_point], g.a.code)?;
    within("B zero point", &[g.b.zero_point], g.b.code)?;
    within("output zero point", &[g.y.zero_point], g.y.code)?;
    within("reachable A code", &[g.a_codes.0, g.a_codes.1], g.a.code)?;
    within("reachable B code", &[g.b_codes.0, g.b_codes.1], g.b.code)?;
    if g.a_codes.0 > g.a_codes.1 || g.b_codes.0 > g.b_codes.1 || g.k == 0 {
        return Err("empty reachable codes or K = 0".into());
    }
    Ok(())
}

fn finite_scales(g: &DynamicMatMul) -> Result<(), String> {
    if let Some(s) = [g.a.scale, g.b.scale, g.y.scale].into_iter().find(|s| !s.is_finite()) {
        return Err(format!("non-finite scale {s}"));
    }
    if g.y.scale == 0.0 {
        return Err("output scale 0".into());
    }
    Ok(())
}

/// Proves or refutes fusing `g` into ORT's QLinearMatMul on `isa` under `contract`.
pub fn prove(g: &DynamicMatMul, isa: Isa, contract: Contract) -> Verdict {
    let start = Instant::now();
    if let Err(reason) = CONDITIONS.iter().try_for_each(|(name, holds)| holds(g).map_err(|why| format!("{name}: {why}"))) {
        return Verdict::Unknown { reason: format!("refused: {reason}") };
    }
    let (ua, ub) = g.offsets();
    let max = |(lo, hi): (i64, i64)| lo.unsigned_abs().max(hi.unsigned_abs()) as u128;
    let p2 = match contract {
        Contract::Exact => {
            let operand = |p: QParam, u| Operand { scale: p.scale, max_offset: max(u) };
            match p2::activation_dot_product(operand(g.a, ua), operand(g.b, ub), g.k) {
                Ok(c) => format!("P2: {}; ", c.detail),
                Err(why) => return single_product_witness(g, isa).unwrap_or(Verdict::Unknown { reason: format!("P2: {why}") }),
            }
        }
        Contract::Real => String::new(),
    };
    if let Some(sum) = g.pair_overflow(isa) {
        let reason = format!("x86-avx2 u8×s8: two raw-code products of the reachable ranges sum to {sum}, outside the int16 that vpmaddubsw saturates to");
        return Verdict::Unknown { reason };
    }
    let (lo, hi) = g.accumulators();
    if lo < i32::MIN as i64 || hi > i32::MAX as i64 {
        return Verdict::Unknown { reason: format!("accumulators [{lo}, {hi}] can wrap in int32") };
    }
    let unit = Dyadic::from_f32(g.a.scale).zip(Dyadic::from_f32(g.b.scale)).and_then(|(a, b)| a.checked_mul(b));
    let Some(unit) = unit else { return Verdict::Unknown { reason: "exact scale product overflows".into() } };
    let (m, y) = (g.multiplier(), g.y);
    let (qmin, qmax) = y.code.range();
    let kernel = |acc: i64| requantize(i32::try_from(acc).expect("accumulators are checked inside int32 above"), m, y.zero_point, y.code, isa);
    // Under P2 `acc·sa·sb` is an f32, and f64 holds it exactly.
    let unit_f64 = g.a.scale as f64 * g.b.scale as f64;
    // Under P2 the f64 product is an f32: `as f32` is exact.
    #[allow(clippy::cast_possible_truncation)]
    let reference = |acc: i64| match contract {
        Contract::Exact => quantize((acc as f64 * unit_f64) as f32, y.scale, y.zero_point, y.code),
        Contract::Real => Dyadic::int(acc).checked_mul(unit).and_then(|v| quantize_real(v, y.scale, y.zero_point, y.code)).unwrap_or({
            // Beyond the exact arithmetic the quotient saturates: only its sign matters.
            if (acc < 0) ^ (unit.mant < 0) ^ (y.scale < 0.0) { qmin } else { qmax }
        }),
    };
    let codes = Codes { qmin, qmax, direction: Direction::of_sign(m.is_sign_negative()) };
    let mut witness = None;
    let report = p3::check((lo, hi), codes, kernel, reference, |n| {
        witness = g.reach(n);
        witness.is_some()
    });
    let detail = format!(
        "QLinearMatMul over two activations on {isa}, {contract:?} contract: {p2}P3 over the accumulators [{lo}, {hi}] (K = {}), {} in the unsaturated window",
        g.k, report.points
    );
    let proof = Certificate { method: Method::P3RequantWindow, domain: report.points, micros: crate::elapsed_micros(start), detail };
    match report.outcome {
        Outcome::Exact => Verdict::Exact { proof },
        Outcome::Unknown { reason } => Verdict::Unknown { reason: format!("P3: {reason}") },
        Outcome::Refuted { first, differing } => {
            let (a, b) = witness.expect("accepted mismatches have a witness");
            let mut inputs = vec![("acc".to_string(), first.at)];
            inputs.extend(listed("a", &a));
            inputs.extend(listed("b", &b));
            let exact = Dyadic::int(first.at).checked_mul(unit).zip(Dyadic::from_f32(y.scale)).map(|(v, s)| rational_text(v, s));
            let counterexample = Counterexample { inputs, unfused: first.reference, fused: first.kernel, exact, differing };
            Verdict::Refuted { counterexample, proof }
        }
    }
}

/// [`NearBoundary`] of a group with a static K, as for [`super::requant::near_boundary`] with one
/// channel: `δ = γ_{K+3}·K·max|a − za|·max|b − zb|·|sa·sb|/|sy|` (K products in any order, the
/// two DQ roundings, the Q's division) over the accumulators `K·[pmin, pmax]`. `None` when P2
/// holds (the float path is exact) or the group is not one ORT's kernel takes.
pub fn near_boundary(g: &DynamicMatMul) -> Option<NearBoundary> {
    CONDITIONS.iter().try_for_each(|(_, holds)| holds(g)).ok()?;
    let (ua, ub) = g.offsets();
    let max = |(lo, hi): (i64, i64)| lo.unsigned_abs().max(hi.unsigned_abs()) as u128;
    let operand = |p: QParam, u| Operand { scale: p.scale, max_offset: max(u) };
    if p2::activation_dot_product(operand(g.a, ua), operand(g.b, ub), g.k).is_ok() {
        return None;
    }
    let (unit, sy) = (g.a.scale as f64 * g.b.scale as f64, g.y.scale as f64);
    let delta = gamma(g.k + 3) * g.k as f64 * max(ua) as f64 * max(ub) as f64 * unit.abs() / sy.abs();
    let line = Line { slope: unit / sy, offset: 0.0, zy: g.y.zero_point, codes: g.y.code.range() };
    let (near, reachable) = line.count_near(g.accumulators(), 1, delta);
    Some(NearBoundary { accumulators: near, reachable, affected_channels: usize::from(near > 0), channels: 1, max_error_lsb: delta })
}

/// The largest K [`prove_every_k`] decides when nothing bounds it: reached only when products
/// are so small that int32 cannot wrap first.
pub const K_CAP: usize = 1 << 20;

/// Proves or refutes the group for every inner dimension K from 1 up to the largest whose
/// accumulators `K·[pmin, pmax]` stay in int32 (capped at [`K_CAP`]): for a symbolic K
/// (attention's sequence length). `g.k` is ignored.
///
/// Why one check suffices when it passes: the reachable ranges are widened to hold the zero point
/// (a sound over-approximation), so `pmin ≤ 0 ≤ pmax` and the accumulator windows of smaller K
/// nest inside the largest one; P2 only gets harder as K grows. When the largest K is not exact,
/// K = 1, 2, 4, … is searched for the first refuted one (the counterexample's rows have that
/// length); an unknown names the largest K proven exact.
pub fn prove_every_k(g: &DynamicMatMul, isa: Isa, contract: Contract) -> Verdict {
    let hull = |(lo, hi): (i64, i64), z: i64| (lo.min(z), hi.max(z));
    let g = DynamicMatMul { a_codes: hull(g.a_codes, g.a.zero_point), b_codes: hull(g.b_codes, g.b.zero_point), k: 1, ..g.clone() };
    if let Err(reason) = CONDITIONS.iter().try_for_each(|(name, holds)| holds(&g).map_err(|why| format!("{name}: {why}"))) {
        return Verdict::Unknown { reason: format!("refused: {reason}") };
    }
    let bound = g.int32_bound();
    let beyond = if bound == K_CAP { format!("the documented cap {K_CAP}") } else { "the largest K whose accumulators stay in int32".to_string() };
    let at = |k: usize| prove(&DynamicMatMul { k, ..g.clone() }, isa, contract);
    let top = match at(bound) {
        Verdict::Exact { mut proof } => {
            proof.detail = format!("every K ≤ {bound} ({beyond}) by K = {bound}: {}", proof.detail);
            return Verdict::Exact { proof };
        }
        other => other,
    };
    let mut exact_up_to = 0;
    let smaller = std::iter::successors(Some(1usize), |&k| Some(2 * k)).take_while(|&k| k < bound);
    for (k, verdict) in smaller.map(|k| (k, at(k))).chain(std::iter::once((bound, top))) {
        match verdict {
            Verdict::Exact { .. } => exact_up_to = k,
            Verdict::Refuted { counterexample, mut proof } => {
                proof.detail = format!("K = {k} (K is symbolic; every K ≤ {exact_up_to} is exact): {}", proof.detail);
                return Verdict::Refuted { counterexample, proof };
            }
            Verdict::Unknown { reason } => {
                return Verdict::Unknown { reason: format!("K is symbolic: every K ≤ {exact_up_to} is exact; at K = {k}: {reason}") };
            }
        }
    }
    Verdict::Unknown { reason: format!("K is symbolic: every K ≤ {exact_up_to} is exact, K = {bound} is not") }
}

/// When P2 fails the unfused sum has no unique value in general, but a row pair with a single
/// nonzero product has one, `fl(DQ(a)·DQ(b))` (every other product is a zero): searches every
/// code pair for a difference. Needs a zero offset in one reachable range, and no int16 pair
/// saturation (raw codes stay nonzero there).
fn single_product_witness(g: &DynamicMatMul, isa: Isa) -> Option<Verdict> {
    let (ua, ub) = g.offsets();
    let (a_zero, b_zero) = (ua.0 <= 0 && 0 <= ua.1, ub.0 <= 0 && 0 <= ub.1);
    if !(a_zero || b_zero) || g.pair_overflow(isa).is_some() {
        return None;
    }
    let (m, y) = (g.multiplier(), g.y);
    let b_values: Vec<(i64, f32)> = (g.b_codes.0..=g.b_codes.1).map(|b| (b, dequantize(b, g.b.scale, g.b.zero_point))).collect();
    let mut best: Option<(i64, i64, i64, i64, i64)> = None;
    let mut differing = 0u64;
    for a in g.a_codes.0..=g.a_codes.1 {
        let da = dequantize(a, g.a.scale, g.a.zero_point);
        for &(b, db) in &b_values {
            let acc = (a - g.a.zero_point) * (b - g.b.zero_point);
            let (unfused, fused) = (
                quantize(da * db, y.scale, y.zero_point, y.code),
                requantize(i32::try_from(acc).expect("one product of 8-bit offsets fits int32"), m, y.zero_point, y.code, isa),
            );
            if unfused != fused {
                differing += 1;
                if best.is_none_or(|(best_acc, ..)| (acc.unsigned_abs(), acc < 0) < (best_acc.unsigned_abs(), best_acc < 0)) {
                    best = Some((acc, a, b, unfused, fused));
                }
            }
        }
    }
    let (acc, a, b, unfused, fused) = best?;
    let row = |k: usize, v: i64, rest: i64| (0..g.k).map(|j| if j == k { v } else { rest }).collect::<Vec<_>>();
    let (rows_a, rows_b) = if a_zero { (row(0, a, g.a.zero_point), vec![b; g.k]) } else { (vec![a; g.k], row(0, b, g.b.zero_point)) };
    let mut inputs = vec![("acc".to_string(), acc)];
    inputs.extend(listed("a", &rows_a));
    inputs.extend(listed("b", &rows_b));
    let detail = format!("P2 fails; rows with a single nonzero product have a unique float value (QLinearMatMul over two activations on {isa})");
    let proof = Certificate { method: Method::P2Representable, domain: differing, micros: 0, detail };
    Some(Verdict::Refuted { counterexample: Counterexample { inputs, unfused, fused, exact: None, differing }, proof })
}

/// A row of codes as `name[*]` (its most frequent code) and the positions that differ from it.
fn listed(name: &str, codes: &[i64]) -> Vec<(String, i64)> {
    let count = |v: i64| codes.iter().filter(|&&c| c == v).count();
    let common = codes.iter().copied().max_by_key(|&v| (count(v), std::cmp::Reverse(v))).unwrap_or(0);
    let mut out = vec![(format!("{name}[*]"), common)];
    out.extend(codes.iter().enumerate().filter(|&(_, &c)| c != common).map(|(k, &c)| (format!("{name}[{k}]"), c)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use CodeType::{I8, U8};

    fn attention(k: usize, sy: f32) -> DynamicMatMul {
        let s = 2f32.powi(-5);
        DynamicMatMul::new(QParam::new(s, 122, U8), QParam::new(s, 122, U8), k, QParam::new(sy, 136, U8))
    }

    /// The exact accumulator of concrete rows.
    fn dot(g: &DynamicMatMul, a: &[i64], b: &[i64]) -> i64 {
        a.iter().zip(b).map(|(x, w)| (x - g.a.zero_point) * (w - g.b.zero_point)).sum()
    }

    fn row(c: &Counterexample, name: &str, k: usize) -> Vec<i64> {
        let get = |n: &str| c.inputs.iter().find(|(m, _)| m == n).map(|(_, v)| *v);
        (0..k).map(|i| get(&format!("{name}[{i}]")).or(get(&format!("{name}[*]"))).unwrap()).collect()
    }

    #[test]
    fn power_of_two_scales_are_proven_on_every_isa() {
        let g = attention(16, 2f32.powi(-3));
        assert_eq!(g.accumulators(), (-16 * 133 * 122, 16 * 133 * 133));
        for isa in Isa::ALL {
            for contract in [Contract::Exact, Contract::Real] {
                let v = prove(&g, isa, contract);
                assert!(v.is_exact(), "{isa} {contract:?}: {v:?}");
            }
        }
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Accumulators of these small cases fit int32; `as f32` rounds as the reference does.
    fn a_generic_output_scale_is_refuted_with_rows_that_reach_the_accumulator() {
        let g = attention(16, 0.3);
        let v = prove(&g, Isa::X86Avx512Vnni, Contract::Exact);
        let c = v.counterexample().unwrap_or_else(|| panic!("{v:?}"));
        let (a, b) = (row(c, "a", 16), row(c, "b", 16));
        let acc = dot(&g, &a, &b);
        assert_eq!(acc, c.inputs[0].1, "{c}");
        assert_eq!(requantize(acc as i32, g.multiplier(), 136, U8, Isa::X86Avx512Vnni), c.fused);
        let value = (acc as f64 * g.a.scale as f64 * g.b.scale as f64) as f32;
        assert_eq!(quantize(value, 0.3, 136, U8), c.unfused);
        assert_ne!(c.fused, c.unfused);
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Accumulators of these small cases fit int32; `as f32` rounds as the reference does.
    fn generic_scales_fail_p2_and_are_refuted_by_a_single_product() {
        // Scales found by search: (14 − 122)² products round across a boundary.
        let (s, sy) = (f32::from_bits(0x3cc7_3ee7), f32::from_bits(0x3dc2_e95a));
        let g = DynamicMatMul::new(QParam::new(s, 122, U8), QParam::new(s, 122, U8), 16, QParam::new(sy, 136, U8));
        let v = prove(&g, Isa::X86Avx512Vnni, Contract::Exact);
        let Verdict::Refuted { counterexample: c, proof } = &v else { panic!("{v:?}") };
        assert_eq!(proof.method, Method::P2Representable);
        let (a, b) = (row(c, "a", 16), row(c, "b", 16));
        assert_eq!(a.iter().filter(|&&x| x != 122).count(), 1, "{c}");
        let p = dequantize(a[0], s, 122) * dequantize(b[0], s, 122);
        assert_eq!(quantize(p, sy, 136, U8), c.unfused);
        assert_eq!((c.inputs[0].1, c.unfused, c.fused), (11664, 208, 209), "{c}");
        assert_eq!(requantize(dot(&g, &a, &b) as i32, g.multiplier(), 136, U8, Isa::X86Avx512Vnni), c.fused);
    }

    #[test]
    fn long_reductions_fail_p2_and_are_never_fused() {
        let g = attention(4096, 2f32.powi(-3));
        let v = prove(&g, Isa::X86Avx512Vnni, Contract::Exact);
        assert!(matches!(&v, Verdict::Unknown { reason } if reason.starts_with("P2:")), "{v:?}");
    }

    #[test]
    fn u8_times_s8_pairs_are_refused_on_avx2_unless_the_ranges_keep_them_in_int16() {
        let s = 2f32.powi(-5);
        let g = DynamicMatMul::new(QParam::new(s, 128, U8), QParam::new(s, 0, I8), 16, QParam::new(1.0, 128, U8));
        assert_eq!(g.pair_overflow(Isa::X86Avx2), Some(2 * 255 * 127));
        let v = prove(&g, Isa::X86Avx2, Contract::Exact);
        assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("int16")), "{v:?}");
        assert!(prove(&g, Isa::X86Avx512Vnni, Contract::Exact).is_exact());
        // Reachable codes 0..=100 × -64..=63: 2·100·64 fits int16.
        let narrow = g.with_codes((0, 100), (-64, 63));
        assert_eq!(narrow.pair_overflow(Isa::X86Avx2), None);
        assert!(prove(&narrow, Isa::X86Avx2, Contract::Exact).is_exact());
    }

    #[test]
    fn kernel_conditions_refuse() {
        let mut g = attention(4, 1.0);
        g.b.code = I8;
        g.b.zero_point = 0;
        g.a.code = I8;
        g.a.zero_point = 0;
        let v = prove(&g, Isa::X86Avx512Vnni, Contract::Exact);
        assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("no CPU kernel for A i8, B i8, y u8")), "{v:?}");
        let mut g = attention(4, 1.0);
        g.y.scale = 0.0;
        assert!(matches!(prove(&g, Isa::X86Avx512Vnni, Contract::Real), Verdict::Unknown { reason } if reason.contains("output scale 0")));
    }

    #[test]
    fn witnesses_are_valid_and_found_for_almost_every_reachable_accumulator() {
        let g = attention(2, 1.0).with_codes((120, 125), (118, 130));
        let pairs: Vec<(i64, i64)> = (120..=125).flat_map(|a| (118..=130).map(move |b| (a, b))).collect();
        let g = &g;
        let reachable: std::collections::BTreeSet<i64> = pairs.iter().flat_map(|p| pairs.iter().map(move |q| dot(g, &[p.0, q.0], &[p.1, q.1]))).collect();
        let (lo, hi) = g.accumulators();
        assert_eq!((lo, hi), (*reachable.first().unwrap(), *reachable.last().unwrap()));
        let mut found = 0;
        for t in lo..=hi {
            if let Some((a, b)) = g.reach(t) {
                assert!(a.iter().all(|c| (120..=125).contains(c)) && b.iter().all(|c| (118..=130).contains(c)), "{t}: {a:?} {b:?}");
                assert_eq!(dot(g, &a, &b), t);
                found += 1;
            }
        }
        assert!(found * 10 >= reachable.len() * 9, "{found} of {} reachable accumulators", reachable.len());
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Accumulators of these small cases fit int32; `as f32` rounds as the reference does.
    fn a_symbolic_k_is_decided_up_to_the_int32_bound() {
        // Power-of-two scales: u8 offsets up to 133·133, so 2^31/17689 = 121402 rows keep int32;
        // under `real` every K up to there is exact, under `exact` P2 stops at 2^24/(133·133).
        let g = attention(0, 2f32.powi(-3));
        assert_eq!(g.int32_bound(), (i32::MAX as i64 / (133 * 133)) as usize);
        let v = prove_every_k(&g, Isa::X86Avx512Vnni, Contract::Real);
        let Verdict::Exact { proof } = &v else { panic!("{v:?}") };
        assert!(proof.detail.starts_with(&format!("every K ≤ {}", g.int32_bound())), "{}", proof.detail);
        let v = prove_every_k(&g, Isa::X86Avx512Vnni, Contract::Exact);
        let Verdict::Unknown { reason } = &v else { panic!("{v:?}") };
        // 2^24 / (133·133) = 948: K = 512 is the largest power of two P2 proves.
        assert!(reason.starts_with("K is symbolic: every K ≤ 512 is exact; at K = 1024: P2:"), "{reason}");
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Accumulators of these small cases fit int32; `as f32` rounds as the reference does.
    fn a_symbolic_k_is_refuted_at_a_concrete_length() {
        let v = prove_every_k(&attention(0, 0.3), Isa::X86Avx512Vnni, Contract::Exact);
        let Verdict::Refuted { counterexample: c, proof } = &v else { panic!("{v:?}") };
        let k: usize = proof.detail.strip_prefix("K = ").and_then(|d| d.split(' ').next()).and_then(|k| k.parse().ok()).unwrap();
        let g = attention(k, 0.3);
        let (a, b) = (row(c, "a", k), row(c, "b", k));
        assert_eq!(dot(&g, &a, &b), c.inputs[0].1, "{c}");
        assert_eq!(requantize(c.inputs[0].1 as i32, g.multiplier(), 136, U8, Isa::X86Avx512Vnni), c.fused);
        // The same verdict as the static proof at that K.
        assert_eq!(prove(&g, Isa::X86Avx512Vnni, Contract::Exact).counterexample(), Some(c));
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Accumulators of these small cases fit int32; `as f32` rounds as the reference does.
    fn accumulators_near_a_boundary_are_counted_where_p2_fails() {
        // Power-of-two scales pass P2: the float path is exact, nothing to count.
        assert_eq!(near_boundary(&attention(16, 0.3)), None);
        let (s, sy) = (f32::from_bits(0x3cc7_3ee7), f32::from_bits(0x3dc2_e95a));
        let g = DynamicMatMul::new(QParam::new(s, 122, U8), QParam::new(s, 122, U8), 16, QParam::new(sy, 136, U8));
        let n = near_boundary(&g).unwrap();
        let (lo, hi) = g.accumulators();
        assert_eq!(n.reachable, (hi - lo + 1) as u64);
        // By enumeration: accumulators whose exact q lies within δ of j + ½ with both codes in range.
        let q = |acc: i64| acc as f64 * s as f64 * s as f64 / sy as f64;
        let counted = (lo..=hi)
            .filter(|&acc| {
                let v = q(acc);
                let j = (v - 0.5).round();
                (v - (j + 0.5)).abs() <= n.max_error_lsb && (0..255).contains(&(j as i64 + 136))
            })
            .count() as u64;
        assert_eq!(n.accumulators, counted);
        assert!(n.accumulators > 0 && n.accumulators < n.reachable / 100, "{n}");
    }
}
