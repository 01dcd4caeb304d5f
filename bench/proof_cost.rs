//! Proof cost: `cargo bench --bench proof_cost`. Prints the time of the 65 536-pair P1 check
//! (QLinearAdd, per ISA profile and contract), of the P3 requantization proof per output
//! channel (K = 64 random int8 weights), medians over seeded random parameter sets, and of P3 per
//! channel as the unsaturated window widens.

use qdqc_exact::reference::CodeType;
use qdqc_exact::{Contract, QParam, Verdict};
use qdqc_ort::Isa;
use qdqc_ort::binary::{self, BinaryOp, BinaryParams, Broadcast};
use qdqc_ort::requant::{self, GemmGroup, GemmKind};
use std::time::Instant;

const SETS: usize = 21;

/// xorshift64*, seeded: the same parameter sets every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Log-uniform in [lo, hi).
    fn scale(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        (lo as f64 * (hi as f64 / lo as f64).powf(u)) as f32
    }

    fn code(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Milliseconds taken by one proof, and its verdict.
fn time(f: impl FnOnce() -> Verdict) -> (f64, &'static str) {
    let t = Instant::now();
    let v = std::hint::black_box(f());
    (t.elapsed().as_secs_f64() * 1e3, v.word())
}

/// `median ms (e exact / r refuted / u unknown)` over the runs.
fn summary(runs: Vec<(f64, &'static str)>) -> String {
    let count = |w: &str| runs.iter().filter(|(_, v)| *v == w).count();
    let (e, r, u) = (count("exact"), count("refuted"), count("unknown"));
    format!("{:>8.2} ({e:>2}/{r:>2}/{u:>2})", median(runs.into_iter().map(|(t, _)| t).collect()))
}

fn main() {
    let mut rng = Rng(0x005e_ed0f_9a0f_c0de);
    println!("P1: QLinearAdd over all 65 536 code pairs (median of {SETS} parameter sets, ms)");
    println!("{:<16} {:>22} {:>22}", "profile", "exact (e/r/u)", "real (e/r/u)");
    let sets: Vec<BinaryParams> = (0..SETS)
        .map(|_| {
            let q = |r: &mut Rng| QParam::new(r.scale(1e-3, 1.0), r.code(0, 255), CodeType::U8);
            BinaryParams { a: q(&mut rng), b: q(&mut rng), c: q(&mut rng) }
        })
        .collect();
    for isa in Isa::ALL {
        let ms = |contract| summary(sets.iter().map(|p| time(|| binary::prove(BinaryOp::Add, p, Broadcast::None, isa, contract))).collect());
        println!("{:<16} {:>22} {:>22}", isa.name(), ms(Contract::Exact), ms(Contract::Real));
    }

    println!("\nP3: QLinearMatMul requantization, one output channel of K = 64 int8 weights (median of {SETS}, ms)");
    println!("{:<16} {:>22} {:>22}", "profile", "exact (e/r/u)", "real (e/r/u)");
    let groups: Vec<GemmGroup> = (0..SETS)
        .map(|_| {
            let weights = vec![(0..64).map(|_| rng.code(-127, 127)).collect()];
            let x = QParam::new(rng.scale(1e-3, 0.1), rng.code(0, 255), CodeType::U8);
            let y = QParam::new(rng.scale(1e-2, 1.0), rng.code(0, 255), CodeType::U8);
            GemmGroup::new(GemmKind::MatMul, x, CodeType::I8, weights, vec![rng.scale(1e-3, 0.1)], vec![0], y)
        })
        .collect();
    for isa in Isa::ALL {
        let ms = |contract| summary(groups.iter().map(|g| time(|| requant::prove(g, isa, contract))).collect());
        println!("{:<16} {:>22} {:>22}", isa.name(), ms(Contract::Exact), ms(Contract::Real));
    }

    println!("\nP3 window widths: one QLinearMatMul channel, K = 64 (one weight 1, the rest 127: accumulators up to ±1.04M, gcd 1), x86-avx512vnni");
    println!("{:<8} {:>8} {:>14} {:>14} {:>14} {:>8}", "contract", "S", "accumulators", "µs/channel", "worst µs", "verdict");
    let w: Vec<i64> = [1].into_iter().chain([127; 63]).collect();
    for contract in [Contract::Exact, Contract::Real] {
        for s in [-8, -12, -16] {
            window_timing(contract, s, &w);
        }
    }

    println!("\nData-movement lemma: gather-before-dequantize on a [rows, 576] int8 embedding, every element for every index in [-rows, rows)");
    println!("{:<22} {:>8} {:>14} {:>10} {:>8}", "layout", "rows", "points", "ms", "verdict");
    for rows in [4096, 49152] {
        gather_timing(rows, 576);
    }
}

/// The proof of `gather-before-dequantize` for per-row and block-32 parameters of a tied
/// embedding the size of SmolLM2-135M's (49 152 × 576).
fn gather_timing(rows: i64, cols: i64) {
    use qdqc_exact::movement::{ParamLayout, Params, Rewritten, gather_before_dequantize};
    for (name, pdims, layout, rdims, gathered, axis, block) in [
        ("per-row → block/row", vec![rows], ParamLayout::PerAxis { axis: 0 }, vec![rows, 1], true, -1, cols),
        ("block 32 on axis 1", vec![rows, cols / 32], ParamLayout::Blocked { axis: 1, block: 32 }, vec![rows, cols / 32], true, -1, 32),
    ] {
        let n: i64 = pdims.iter().product();
        let scales: Vec<u32> = (0..n).map(|i| (0.001 * (i % 977 + 1) as f32).to_bits()).collect();
        let zero_points: Vec<i64> = (0..n).map(|i| i % 7).collect();
        let original = Params { dims: pdims, scales: scales.clone(), zero_points: zero_points.clone(), layout };
        let rewritten = Rewritten { codes: None, dims: rdims, scales, zero_points, gathered, axis, block };
        let t = Instant::now();
        let v = std::hint::black_box(gather_before_dequantize(&[rows, cols], 0, None, &original, &rewritten));
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let points = if let Verdict::Exact { proof } = &v { proof.domain } else { 0 };
        println!("{name:<22} {rows:>8} {points:>14} {ms:>10.0} {:>8}", v.word());
    }
}

/// P3 on 8 single-channel groups whose effective scale is about `2^s`: power-of-two scales under
/// `exact` (P2 holds), generic ones under `real`.
fn window_timing(contract: Contract, s: i32, w: &[i64]) {
    let (sx, sw, sy) = if contract == Contract::Exact { (1.0, 1.0, 2f32.powi(-s)) } else { (0.731, 0.0123, 0.731 * 0.0123 * 0.5f32.powi(s) * 1.01) };
    let q = |scale: f32| QParam::new(scale, 128, CodeType::U8);
    let (mut total, mut worst, mut points, mut verdict) = (0.0f64, 0.0f64, 0, "");
    const CHANNELS: usize = 8;
    for _ in 0..CHANNELS {
        let g = GemmGroup::new(GemmKind::MatMul, q(sx), CodeType::I8, vec![w.to_vec()], vec![sw], vec![0], q(sy));
        let t = Instant::now();
        let v = std::hint::black_box(requant::prove(&g, Isa::X86Avx512Vnni, contract));
        let us = t.elapsed().as_secs_f64() * 1e6;
        (total, worst) = (total + us, worst.max(us));
        points = match &v {
            Verdict::Exact { proof } | Verdict::Refuted { proof, .. } => proof.domain,
            Verdict::Unknown { .. } => 0,
        };
        verdict = v.word();
    }
    let contract = format!("{contract:?}").to_lowercase();
    println!("{contract:<8} {:>8} {points:>14} {:>14.0} {worst:>14.0} {verdict:>8}", format!("2^{s}"), total / CHANNELS as f64);
}
