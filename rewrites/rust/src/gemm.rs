//! Conv / MatMul / Gemm with constant weights on the kernel crate: `gemm_u8` / `PackedConv`
//! accumulate `Σ(x − zx)(w − zw)` in i32 (exact wherever the true sum fits i32: every path wraps
//! modulo 2^32 alike), then `requant::requant_exact` gives `sat(rne((acc·sx·sw + b·sb)/sy) + zy)`:
//! the bias code added to the accumulator where `b·sb = b·sx·sw`, its exact value as an offset
//! otherwise (`Ratio::with_bias`, the function the generated code calls too).
//!
//! Obligation (contract §3.12), per output channel:
//!
//! | condition | why |
//! |---|---|
//! | x, w, y 8-bit codes; scales positive finite; `alpha = 1` | what the kernels and `Ratio` take (alpha is not folded into the ratio) |
//! | reachable `Σ(x − zx)(w − zw)` within i32, from the actual weights and the reachable x codes (padding adds 0) | the kernels accumulate in i32; an i64 path does not exist yet, so a wider bound refuses |
//! | bias: one i32 code per channel, zero point 0, a scale `Ratio::with_bias` takes (positive, within 2^44 of the accumulator's grid) | the kernel adds the code to the accumulator, or its exact value `b·sb/sy` |
//! | `real`: `requant_exact` is the definition (by construction) | it is `sat(rne((acc·sx·sw + b·sb)/sy) + zy)` exactly, the contract's rounding of the exact value |
//! | `exact`: P2 (the float reduction is exact in every order, [`p2::dot_product`]), then P3 ([`p3::check`]): `requant_exact` against the Q of the exact f32 value on every accumulator of the unsaturated window | without P2 the float path is not one function of the inputs: the group stays float |
//!
//! Per-axis weight scales are per output channel (N) by the shape of [`GemmGroup`]; the rule
//! refuses any other axis before a group is built (`weight_channels`).

use qdqc_exact::num::Dyadic;
use qdqc_exact::p2::{self, BiasTerm, DotProduct};
use qdqc_exact::p3::{self, Codes, Direction, Outcome};
use qdqc_exact::reference::{CodeType, quantize};
use qdqc_exact::{Certificate, Contract, Counterexample, Method, Verdict, by_construction};
use qdqc_kernels::requant::{Code, Output, Ratio, requant_exact};
use qdqc_ort::requant::{self as ort, GemmGroup, GemmKind};
use std::time::Instant;

/// Proves or refutes running `g` on the kernel crate under `contract`.
pub fn prove(g: &GemmGroup, contract: Contract) -> Verdict {
    let start = Instant::now();
    let channels = match validate(g) {
        Ok(c) => c,
        Err(reason) => return Verdict::Unknown { reason: format!("refused: {reason}") },
    };
    let (lo, hi) = channels.iter().fold((0i64, 0i64), |(l, h), c| (l.min(c.acc.0), h.max(c.acc.1)));
    let bound = format!("i32 accumulation: every reachable Σ(x − zx)(w − zw) in [{lo}, {hi}]");
    let name = kind_name(g.kind);
    match contract {
        Contract::Real => by_construction(
            "qdqc_kernels::requant::requant_exact",
            format!(
                "{name} on the Rust kernels (real): {bound} over {} channel(s); requant_exact is sat(rne((acc·sx·sw + b·sb)/sy) + zy), the contract's rounding of the exact value ({} bias(es) off sx·sw added as exact offsets)",
                g.channels(),
                channels.iter().filter(|c| c.offset).count()
            ),
            0,
            start,
        ),
        Contract::Exact => per_channel(
            g,
            &channels,
            start,
            &format!("{name} on the Rust kernels (exact): {bound}; P2: the float reduction is exact in every order; P3"),
            Channel::exact,
        ),
    }
}

/// One output channel: what the proofs need.
struct Channel {
    c: usize,
    /// Reachable accumulator range.
    acc: (i64, i64),
    /// gcd of the nonzero `w − zw`: every accumulator is a multiple of it.
    step: i64,
    /// The bias code the kernel adds to the accumulator (0 where it is an offset of `ratio`).
    bias: i32,
    /// Whether the bias is an offset (its scale is not `sx·sw`).
    offset: bool,
    /// `sx·sw` and the bias value the unfused graph adds, exactly.
    unit: Dyadic,
    bias_value: Dyadic,
    ratio: Ratio,
    out: Output,
}

fn validate(g: &GemmGroup) -> Result<Vec<Channel>, String> {
    let eight = |t: CodeType| matches!(t, CodeType::U8 | CodeType::I8);
    if !(eight(g.x.code) && eight(g.w_code) && eight(g.y.code)) {
        return Err(format!("the Rust kernels take 8-bit codes, not x {}, w {}, y {}", g.x.code.name(), g.w_code.name(), g.y.code.name()));
    }
    ort::consistent_shapes(g)?;
    ort::codes_in_range(g)?;
    if let GemmKind::Gemm { alpha } = g.kind
        && alpha != 1.0
    {
        return Err(format!("Gemm alpha {alpha} ≠ 1: the kernels' requantization ratio is sx·sw/sy"));
    }
    if let Some(b) = &g.bias {
        let c = g.channels();
        if b.codes.len() != c || ![1, c].contains(&b.scales.len()) || ![1, c].contains(&b.zero_points.len()) {
            return Err("bias shapes do not match the channels".into());
        }
        if let Some(z) = b.zero_points.iter().find(|&&z| z != 0) {
            return Err(format!("bias zero point {z} ≠ 0"));
        }
    }
    let y_code = if g.y.code == CodeType::U8 { Code::U8 } else { Code::I8 };
    let zy = i32::try_from(g.y.zero_point).map_err(|_| format!("output zero point {}", g.y.zero_point))?;
    let out = Output::new(zy, y_code).map_err(|e| format!("output: {e:?}"))?;
    (0..g.channels()).map(|c| Channel::new(g, c, out)).collect()
}

impl Channel {
    fn new(g: &GemmGroup, c: usize, out: Output) -> Result<Channel, String> {
        let zw = g.w_zero_point(c);
        let d: Vec<i64> = g.weights[c].iter().map(|&w| w - zw).collect();
        let acc = g.accumulator_range(&d);
        if acc.0 < i64::from(i32::MIN) || acc.1 > i64::from(i32::MAX) {
            return Err(format!("channel {c}: Σ(x − zx)(w − zw) can reach [{}, {}], beyond i32 (the kernels have no i64 accumulation yet)", acc.0, acc.1));
        }
        let step = d.iter().fold(0i64, |a, &b| gcd(a, b.abs())).max(1);
        let ratio = Ratio::new(g.x.scale, g.w_scale(c), g.y.scale).map_err(|e| format!("channel {c}: scales: {e:?}"))?;
        let exact = |s: f32| Dyadic::from_f32(s).ok_or(format!("non-finite scale {s}"));
        let unit = exact(g.x.scale)?.checked_mul(exact(g.w_scale(c))?).ok_or("scale product overflows")?;
        let (bias, bias_value, ratio) = match g.bias.as_ref() {
            None => (0, Dyadic::ZERO, ratio),
            Some(b) if b.float.is_some() => return Err(format!("channel {c}: a float bias (the kernels take int32 codes)")),
            Some(b) => {
                let code = i32::try_from(b.codes[c]).map_err(|_| format!("channel {c}: bias code {} is not an i32", b.codes[c]))?;
                let sb = b.scales[if b.scales.len() == 1 { 0 } else { c }];
                let value = Dyadic::int(i64::from(code)).checked_mul(exact(sb)?).ok_or("bias value overflows")?;
                let (kernel_code, ratio) = ratio.with_bias(code, sb).map_err(|e| format!("channel {c}: bias: {e}"))?;
                (kernel_code, value, ratio)
            }
        };
        let offset = bias_value != Dyadic::int(i64::from(bias)).checked_mul(unit).unwrap_or(Dyadic::ZERO);
        Ok(Channel { c, acc, step, bias, offset, unit, bias_value, ratio, out })
    }

    /// The accumulators checked: `n·step` for `n` in this range.
    fn steps(&self) -> (i64, i64) {
        (div_ceil(self.acc.0, self.step), self.acc.1.div_euclid(self.step))
    }

    /// The fused kernel at accumulator `acc` (within i32 by the bound).
    fn kernel(&self, acc: i64) -> i64 {
        let acc = i32::try_from(acc).expect("accumulators are bounded within i32 (Channel::new)");
        i64::from(requant_exact(acc, self.bias, &self.ratio, self.out))
    }

    fn codes(&self) -> Codes {
        let code = self.out.code();
        Codes { qmin: i64::from(code.min()), qmax: i64::from(code.max()), direction: Direction::NonDecreasing }
    }

    /// `exact`: P2, then every accumulator of the window against the Q of the f32 value.
    fn exact(&self, g: &GemmGroup) -> Result<u64, Failure> {
        let dot = DotProduct {
            x_scale: g.x.scale,
            x_zero_point: g.x.zero_point,
            x_codes: g.x_codes,
            w_scale: g.w_scale(self.c),
            w_zero_point: g.w_zero_point(self.c),
            weights: &g.weights[self.c],
            alpha: 1.0,
            bias: g.bias.as_ref().map(|b| match &b.float {
                Some(values) => BiasTerm::Float(values[self.c]),
                None => BiasTerm::Dequantized(b.codes[self.c], b.scales[if b.scales.len() == 1 { 0 } else { self.c }]),
            }),
        };
        p2::dot_product(&dot).map_err(|why| Failure::Unknown(format!("channel {}: P2: {why}", self.c)))?;
        let reference = |n: i64| quantize(self.f32_value(n * self.step), g.y.scale, g.y.zero_point, g.y.code);
        self.outcome(p3::check(self.steps(), self.codes(), |n| self.kernel(n * self.step), reference, |_| true))
    }

    /// `acc·sx·sw + b·sb` as the f32 the float reduction computes: exact under P2, where the
    /// value is at most 2^24 units of its grid (so the f64 steps below are exact too).
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)] // Exact under P2 (above).
    fn f32_value(&self, acc: i64) -> f32 {
        let v = Dyadic::int(acc).checked_mul(self.unit).and_then(|p| p.checked_add(self.bias_value)).unwrap_or(Dyadic::ZERO);
        (v.mant as f64 * 2f64.powi(v.exp)) as f32
    }

    /// The accumulator of a mismatch is named in the accumulator's units (`n·step`).
    fn outcome(&self, report: p3::Report) -> Result<u64, Failure> {
        match report.outcome {
            Outcome::Exact => Ok(report.points),
            Outcome::Refuted { first, differing } => {
                let acc = first.at * self.step;
                let counterexample = Counterexample {
                    inputs: vec![("channel".into(), i64::try_from(self.c).unwrap_or(i64::MAX)), ("acc".into(), acc)],
                    unfused: first.reference,
                    fused: self.kernel(acc),
                    exact: None,
                    differing,
                };
                Err(Failure::Refuted(Box::new((counterexample, report.points))))
            }
            Outcome::Unknown { reason } => Err(Failure::Unknown(format!("channel {}: {reason}", self.c))),
        }
    }
}

enum Failure {
    Refuted(Box<(Counterexample, u64)>),
    Unknown(String),
}

/// Every channel through `check`: the first refutation refutes, the first unknown leaves the
/// group unknown, else one P3 certificate over all accumulators.
fn per_channel(g: &GemmGroup, channels: &[Channel], start: Instant, header: &str, check: fn(&Channel, &GemmGroup) -> Result<u64, Failure>) -> Verdict {
    let mut points = 0u64;
    for ch in channels {
        match check(ch, g) {
            Ok(n) => points += n,
            Err(Failure::Refuted(r)) => {
                let (counterexample, domain) = *r;
                let detail = format!("{header}: channel {} differs on {} accumulator(s)", ch.c, counterexample.differing);
                return Verdict::Refuted { counterexample, proof: Certificate { method: Method::P3RequantWindow, domain, micros: micros(start), detail } };
            }
            Err(Failure::Unknown(reason)) => return Verdict::Unknown { reason },
        }
    }
    let detail = format!("{header} over {} channel(s), {points} accumulators in unsaturated windows", g.channels());
    Verdict::Exact { proof: Certificate { method: Method::P3RequantWindow, domain: points, micros: micros(start), detail } }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn div_ceil(a: i64, b: i64) -> i64 {
    -((-a).div_euclid(b))
}

fn micros(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

fn kind_name(kind: GemmKind) -> &'static str {
    match kind {
        GemmKind::Conv { .. } => "Conv",
        GemmKind::MatMul => "MatMul",
        GemmKind::Gemm { .. } => "Gemm",
    }
}
