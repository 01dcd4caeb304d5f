//! MatMul of two activations (attention's `QKᵀ` and `AV`) on the kernel crate:
//! `qdqc_kernels::matmul_codes` sums `Σ_k (a − za)(b − zb)` in i32, exact for every K up to
//! [`max_k`] (whatever the codes), then requantizes with the certified form, whose value is
//! `requant_exact`'s: `sat(rne(acc·sa·sb/sy) + zy)`. No value of B is known, so the windows
//! quantify over both reachable code ranges (`DynamicMatMul::accumulators`).
//!
//! Obligation (contract §3.12):
//!
//! | condition | why |
//! |---|---|
//! | a, b, y 8-bit codes; scales positive finite ([`MatMulCodes::new`] accepts them) | what the kernel takes |
//! | K ≤ `max_k(za, zb)`; a symbolic K (a sequence length) is bounded by it at run time | the i32 sum is exact only there: the generated code checks K and fails rather than wrap |
//! | `real`: `requant_exact` is the definition (by construction) | the certified form returns its value (its fallback is it) |
//! | `exact`: P2 at K ([`p2::activation_dot_product`]), then P3 ([`p3::check`]): `requant_exact` against the Q of the exact f32 value on every accumulator of `K·[pmin, pmax]`; a symbolic K is checked at `max_k` | without P2 the float path is not one function of the inputs; the windows of smaller K nest inside the largest (the ranges hold the zero points) and P2 only gets harder with K |

use qdqc_exact::num::Dyadic;
use qdqc_exact::p2::{self, Operand};
use qdqc_exact::p3::{self, Codes, Direction, Outcome};
use qdqc_exact::reference::{CodeType, quantize};
use qdqc_exact::{Certificate, Contract, Counterexample, Method, QParam, Verdict, by_construction};
use qdqc_kernels::matmul_codes::{MatMulCodes, max_k};
use qdqc_kernels::requant::{Code, Output, Ratio, requant_exact};
use qdqc_ort::matmul_dynamic::DynamicMatMul;
use qdqc_ort::requant::rational_text;
use std::time::Instant;

/// Proves or refutes running `g` (inner dimension `k`, `None` when symbolic) on the kernel crate.
pub fn prove(g: &DynamicMatMul, k: Option<usize>, contract: Contract) -> Verdict {
    let start = Instant::now();
    let (a, b, y) = match (code(g.a), code(g.b), code(g.y)) {
        (Ok(a), Ok(b), Ok(y)) => (a, b, y),
        (a, b, y) => {
            let why = [a.err(), b.err(), y.err()].into_iter().flatten().collect::<Vec<_>>().join("; ");
            return Verdict::Unknown { reason: format!("refused: {why}") };
        }
    };
    let (za, zb, zy) = (zero_point(g.a), zero_point(g.b), zero_point(g.y));
    if let Err(e) = MatMulCodes::new(g.a.scale, za, a, g.b.scale, zb, b, g.y.scale, zy, y) {
        return Verdict::Unknown { reason: format!("refused: parameters: {e}") };
    }
    let bound = max_k(za, a, zb, b);
    let k = match k {
        Some(k) if k > bound => {
            return Verdict::Unknown { reason: format!("refused: K = {k} beyond {bound}, the largest whose sums the i32 accumulator holds exactly") };
        }
        Some(k) => k,
        None => bound,
    };
    let which =
        if k == bound { format!("every K ≤ {bound} (the i32 bound; the generated code checks K)") } else { format!("K = {k} ≤ {bound} (the i32 bound)") };
    match contract {
        Contract::Real => by_construction(
            "qdqc_kernels::requant::requant_exact",
            format!(
                "MatMul of two activations on the Rust kernels (real): i32 accumulation exact for {which}; the certified requantization returns requant_exact's sat(rne(acc·sa·sb/sy) + zy), the contract's rounding of the exact value"
            ),
            0,
            start,
        ),
        Contract::Exact => exact(&DynamicMatMul { k, ..g.clone() }, y, zy, &which, start),
    }
}

/// `exact`: P2 at K, then every accumulator of the window against the Q of the f32 value.
fn exact(g: &DynamicMatMul, y: Code, zy: i32, which: &str, start: Instant) -> Verdict {
    let (ua, ub) = ((g.a_codes.0 - g.a.zero_point, g.a_codes.1 - g.a.zero_point), (g.b_codes.0 - g.b.zero_point, g.b_codes.1 - g.b.zero_point));
    let far = |(lo, hi): (i64, i64)| u128::from(lo.unsigned_abs().max(hi.unsigned_abs()));
    let p2 = match p2::activation_dot_product(Operand { scale: g.a.scale, max_offset: far(ua) }, Operand { scale: g.b.scale, max_offset: far(ub) }, g.k) {
        Ok(c) => c.detail,
        Err(why) => return Verdict::Unknown { reason: format!("P2 at K = {}: {why}", g.k) },
    };
    let (Ok(ratio), Ok(out)) = (Ratio::new(g.a.scale, g.b.scale, g.y.scale), Output::new(zy, y)) else {
        return Verdict::Unknown { reason: "refused: scales or output the kernel does not take".into() };
    };
    let (lo, hi) = g.accumulators();
    // Within i32: K ≤ max_k bounds every product sum (checked by the caller).
    let kernel = |acc: i64| i64::from(requant_exact(i32::try_from(acc).expect("K ≤ max_k keeps sums in i32"), 0, &ratio, out));
    // Under P2 `acc·sa·sb` is an f32, and f64 holds it exactly.
    let unit = f64::from(g.a.scale) * f64::from(g.b.scale);
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)] // exact under P2 (above)
    let reference = |acc: i64| quantize((acc as f64 * unit) as f32, g.y.scale, g.y.zero_point, g.y.code);
    let codes = Codes { qmin: i64::from(y.min()), qmax: i64::from(y.max()), direction: Direction::NonDecreasing };
    let report = p3::check((lo, hi), codes, kernel, reference, |_| true);
    let detail = format!(
        "MatMul of two activations on the Rust kernels (exact), {which}: P2: {p2}; P3 over the accumulators [{lo}, {hi}], {} in the unsaturated window",
        report.points
    );
    let proof =
        Certificate { method: Method::P3RequantWindow, domain: report.points, micros: u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX), detail };
    match report.outcome {
        Outcome::Exact => Verdict::Exact { proof },
        Outcome::Unknown { reason } => Verdict::Unknown { reason: format!("P3: {reason}") },
        Outcome::Refuted { first, differing } => {
            let unit = Dyadic::from_f32(g.a.scale).zip(Dyadic::from_f32(g.b.scale)).and_then(|(a, b)| a.checked_mul(b));
            let exact = unit.and_then(|u| Dyadic::int(first.at).checked_mul(u)).zip(Dyadic::from_f32(g.y.scale)).map(|(v, s)| rational_text(v, s));
            let counterexample = Counterexample { inputs: vec![("acc".into(), first.at)], unfused: first.reference, fused: first.kernel, exact, differing };
            Verdict::Refuted { counterexample, proof }
        }
    }
}

fn code(p: QParam) -> Result<Code, String> {
    match p.code {
        CodeType::U8 => Ok(Code::U8),
        CodeType::I8 => Ok(Code::I8),
        other => Err(format!("the kernel takes 8-bit codes, not {}", other.name())),
    }
}

/// An 8-bit code type's zero point (checked in range by `MatMulCodes::new`).
fn zero_point(p: QParam) -> i32 {
    i32::try_from(p.zero_point).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(scale: f32, zero_point: i64, code: CodeType) -> QParam {
        QParam { scale, zero_point, code }
    }

    #[test]
    fn power_of_two_scales_are_exact_under_both_contracts() {
        let g = DynamicMatMul::new(q(0.125, 128, CodeType::U8), q(0.0625, 0, CodeType::I8), 32, q(0.5, 128, CodeType::U8));
        for contract in [Contract::Real, Contract::Exact] {
            let v = prove(&g, Some(32), contract);
            assert!(v.is_exact(), "{contract:?}: {v:?}");
        }
    }

    #[test]
    fn a_k_beyond_the_i32_bound_is_refused() {
        let g = DynamicMatMul::new(q(0.125, 0, CodeType::U8), q(0.0625, 128, CodeType::U8), 1, q(0.5, 128, CodeType::U8));
        let bound = max_k(0, Code::U8, 128, Code::U8);
        assert!(prove(&g, Some(bound), Contract::Real).is_exact());
        let v = prove(&g, Some(bound + 1), Contract::Real);
        assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("beyond")), "{v:?}");
    }

    #[test]
    fn a_quotient_the_f32_division_rounds_across_a_tie_is_refuted_under_exact() {
        // sa·sb = 1 and an sy whose f32 quotient 53/sy rounds up to 217.5 (the exact value is
        // just below it), which the unfused Q's rne takes to 218; the exact rounding is 217.
        let g = DynamicMatMul::new(q(1.0, 0, CodeType::U8), q(1.0, 0, CodeType::U8), 2, q(f32::from_bits(0x3e79_86c5), 0, CodeType::U8));
        let v = prove(&g, Some(2), Contract::Exact);
        let Verdict::Refuted { counterexample: c, .. } = &v else { panic!("{v:?}") };
        let acc = c.inputs[0].1;
        let ratio = Ratio::new(1.0, 1.0, g.y.scale).unwrap();
        let out = Output::new(0, Code::U8).unwrap();
        assert_eq!(c.fused, i64::from(requant_exact(i32::try_from(acc).unwrap(), 0, &ratio, out)));
        #[allow(clippy::cast_precision_loss)] // small accumulators
        let unfused = quantize(acc as f32, g.y.scale, 0, CodeType::U8);
        assert_eq!(c.unfused, unfused);
        assert_ne!(c.fused, c.unfused);
        assert!(c.differing >= 1 && acc <= 53, "the first mismatch is at or before 53: {c}");
        assert!(prove(&g, Some(2), Contract::Real).is_exact(), "real rounds the exact value: the kernel is the definition");
    }
}
