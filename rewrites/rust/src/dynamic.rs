//! MatMul on activations quantized at run time, on the Rust target (`qdqc_kernels::dynamic`):
//! the activation's scale and zero point come from DynamicQuantizeLinear (or a per-row
//! ReduceMin/ReduceMax form of it) while the model runs, so nothing about them can be proven per
//! instance. What is proven per instance is the constant part (weights, their parameters, the
//! i32 bound); the epilogue's rounding rests on the kernel crate's lemmas P4-f and P4-q
//! (`codegen/kernels/src/dynamic.rs`, proven once for every scale, pinned by
//! `codegen/kernels/tests/dynamic.rs`, `examples/dynamic_rows.rs` and [`check_float_epilogue`]).
//!
//! | output form | `real` | `exact` |
//! |---|---|---|
//! | [`DynamicOutput::GraphFloat`]: `DynamicQuantizeLinear → MatMulInteger → Cast → Mul(·, Mul(sx, sw))` (ORT's `quantize_dynamic`) | P4-f: the correctly rounded f32 of `C·sx·sw` (`Epilogue::Real`) | by construction: `fl(f32(C)·fl(sx·sw))` is the graph's own IEEE steps (`Epilogue::Graph`); `C` is MatMulInteger's exact integer result |
//! | [`DynamicOutput::DequantizedFloat`]: `DQ(x_q; sx, zx) → MatMul(·, DQ(W))` | P4-f | refused: the float MatMul is deterministic only where P2 holds, and P2 depends on `sx`, which is made at run time |
//! | [`DynamicOutput::Codes`]: the same with `→ Q(sy, zy)` | P4-q: `requant_certified` on `sx·sw[n]/sy` made per row | refused, as above |
//!
//! | condition (every form) | why |
//! |---|---|
//! | weights 8-bit constant codes, parameters per tensor or per column, zero points in range | the kernel packs them once (`PackedB`) |
//! | `255·Σ_k |w − zw| ≤ i32::MAX` per column | the accumulator is exact in i32 for every u8 row and run-time zero point |
//! | weight (and output) scales positive finite f32 | `Ratio::new` / the f64 ratio |
//!
//! ONNX Runtime on x86 without VNNI computes MatMulInteger's u8×s8 products in saturating int16
//! pairs (contract §3); that is ORT's deviation from the op's integer definition, which the Rust
//! kernels follow: the Rust target's `exact` is against a conforming evaluation of the graph.

use qdqc_exact::reference::CodeType;
use qdqc_exact::{Certificate, Contract, Counterexample, Method, QParam, Verdict, by_construction};
use qdqc_kernels::dynamic::exact_f32;
use std::time::Instant;

/// What follows the integer product.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DynamicOutput {
    /// `Cast → Mul(·, Mul(sx, sw))`, as `quantize_dynamic` writes it.
    GraphFloat,
    /// `DQ(x_q; sx, zx)` into a float MatMul with `DQ(W)`, no Q.
    DequantizedFloat,
    /// The same, then `Q(sy, zy)`.
    Codes(QParam),
}

/// The constant part of a dynamic group.
#[derive(Clone, Debug)]
pub struct DynamicGroup {
    pub w_code: CodeType,
    /// Weight codes per output column (each of length K).
    pub weights: Vec<Vec<i64>>,
    pub w_scales: Vec<f32>,
    pub w_zero_points: Vec<i64>,
    pub output: DynamicOutput,
}

/// The lemma the `real` forms rest on, named in their certificates.
pub const P4_FLOAT: &str = "P4-f: fl64(C·fl64(sx·sw)) rounds to the f32 of C·sx·sw unless it is an f32 midpoint (exact fallback)";
pub const P4_CODES: &str = "P4-q: the certified f64 requantization equals requant_exact for every positive finite f32 ratio (exact fallback within its bound)";

/// Proves or refuses the group under `contract`.
pub fn prove(g: &DynamicGroup, contract: Contract) -> Verdict {
    let start = Instant::now();
    let bound = match validate(g) {
        Ok(b) => b,
        Err(reason) => return Verdict::Unknown { reason: format!("refused: {reason}") },
    };
    let header = format!(
        "dynamic activation quantization on the Rust kernels: {} column(s); i32 accumulation: every |Σ(x − zx)(w − zw)| ≤ {bound} for u8 codes and any run-time zero point",
        g.weights.len()
    );
    let lemma = |name: &str| Verdict::Exact {
        proof: Certificate {
            method: Method::P4Lemma(name.to_string()),
            domain: 0,
            micros: u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
            detail: format!("{header}; the scale sx is made at run time, the rounding is certified per element: {name}"),
        },
    };
    match (g.output, contract) {
        (DynamicOutput::GraphFloat, Contract::Exact) => by_construction(
            "qdqc_kernels::dynamic::Epilogue::Graph",
            format!("{header}; fl(f32(C)·fl(sx·sw)) is the graph's own Cast and two Muls, one IEEE operation each; DynamicQuantizeLinear is ORT's arithmetic (qdqc_kernels::dynamic::dynamic_quantize)"),
            0,
            start,
        ),
        (DynamicOutput::GraphFloat | DynamicOutput::DequantizedFloat, Contract::Real) => lemma(P4_FLOAT),
        (DynamicOutput::Codes(_), Contract::Real) => lemma(P4_CODES),
        (_, Contract::Exact) => Verdict::Unknown {
            reason: "refused: exact: the float MatMul of DQ(x_q; sx, zx) is deterministic only where P2 holds, and P2 depends on the activation scale, which is made at run time".into(),
        },
    }
}

/// The largest reachable `|C|`, or the first condition that fails.
fn validate(g: &DynamicGroup) -> Result<i64, String> {
    if !matches!(g.w_code, CodeType::U8 | CodeType::I8) {
        return Err(format!("the Rust kernels take 8-bit weights, not {}", g.w_code.name()));
    }
    let columns = g.weights.len();
    let k = g.weights.first().map_or(0, Vec::len);
    if columns == 0 || k == 0 || g.weights.iter().any(|w| w.len() != k) {
        return Err(format!("{columns} columns of K = {k}"));
    }
    if ![1, columns].contains(&g.w_scales.len()) || ![1, columns].contains(&g.w_zero_points.len()) {
        return Err(format!("{} weight scales and {} zero points for {columns} columns", g.w_scales.len(), g.w_zero_points.len()));
    }
    if let Some(s) = g.w_scales.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
        return Err(format!("weight scale {s:e} is not a positive finite f32"));
    }
    let (lo, hi) = g.w_code.range();
    if let Some(z) = g.w_zero_points.iter().find(|z| !(lo..=hi).contains(*z)) {
        return Err(format!("weight zero point {z} outside {}", g.w_code.name()));
    }
    if let Some(w) = g.weights.iter().flatten().find(|w| !(lo..=hi).contains(*w)) {
        return Err(format!("weight code {w} outside {}", g.w_code.name()));
    }
    if let DynamicOutput::Codes(y) = g.output {
        if !(matches!(y.code, CodeType::U8 | CodeType::I8) && y.scale.is_finite() && y.scale > 0.0) {
            return Err(format!("output {} with scale {:e}: the kernels write 8-bit codes at a positive finite scale", y.code.name(), y.scale));
        }
        let (ylo, yhi) = y.code.range();
        if !(ylo..=yhi).contains(&y.zero_point) {
            return Err(format!("output zero point {} outside {}", y.zero_point, y.code.name()));
        }
    }
    let mut bound = 0i64;
    for (c, w) in g.weights.iter().enumerate() {
        let zw = g.w_zero_points[if g.w_zero_points.len() == 1 { 0 } else { c }];
        bound = bound.max(255 * w.iter().map(|&v| (v - zw).abs()).sum::<i64>());
    }
    if bound > i64::from(i32::MAX) {
        return Err(format!("Σ(x − zx)(w − zw) can reach ±{bound}, beyond i32"));
    }
    Ok(bound)
}

/// `a⁻¹ mod 2^bits` for odd `a`.
fn inverse_mod(a: u64, bits: u32) -> u64 {
    let mut x: u64 = 1;
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
    }
    x & ((1u64 << bits) - 1)
}

/// Cases [`check_float_epilogue`] tries.
pub const FLOAT_CASES: u64 = 1 << 14;

/// Checks a float epilogue `f(C, sx, sw)` against the correctly rounded f32 of `C·sx·sw`
/// (`exact_f32`) on the cases where an f64 evaluation is hardest: 24-bit odd significands
/// `sx`, `sw = 2^e`, and `C ≡ (2^30 ± 1)·mx⁻¹ (mod 2^31)` (or `2^29 ± 1` mod 2^30), whose 54/55-bit
/// product rounds in f64 onto an f32 midpoint it is not on, plus exact midpoints (`C·mx` with 25
/// significant bits). Refuted at the first difference; otherwise the lemma is pinned on these
/// cases (P4-f's proof is in `codegen/kernels/src/dynamic.rs`).
pub fn check_float_epilogue(f: impl Fn(i32, f32, f32) -> f32) -> Verdict {
    let start = Instant::now();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    for i in 0..FLOAT_CASES {
        let r = next();
        let (c, mx) = if i % 4 == 3 {
            // An exact midpoint: a small odd mx, C·mx with 25 significant bits, odd.
            let mx = 1 + 2 * (r % 128);
            let c = ((1u64 << 24).div_ceil(mx) + (r >> 8) % (1 << 20)) | 1;
            (c, mx)
        } else {
            let mx = (1u64 << 23) | (r & ((1 << 23) - 1)) | 1;
            let (bits, half) = if r >> 63 == 0 { (31, 1u64 << 30) } else { (30, 1u64 << 29) };
            let target = if (r >> 62) & 1 == 0 { half + 1 } else { half - 1 };
            (target.wrapping_mul(inverse_mod(mx, bits)) & ((1u64 << bits) - 1), mx)
        };
        let Ok(c) = i32::try_from(c) else { continue };
        let c = if (r >> 61) & 1 == 0 { c } else { -c };
        // mx < 2^24: exact in f32, and so is its product by a power of two.
        let sx = mx as f32 * 2f32.powi(-40);
        let sw = 2f32.powi(-20 + i32::try_from((r >> 40) % 16).unwrap_or(0));
        let (got, want) = (f(c, sx, sw), exact_f32(c, sx, sw));
        if got.to_bits() != want.to_bits() {
            let counterexample = Counterexample {
                inputs: vec![("C".into(), i64::from(c)), ("sx bits".into(), i64::from(sx.to_bits())), ("sw bits".into(), i64::from(sw.to_bits()))],
                unfused: i64::from(want.to_bits()),
                fused: i64::from(got.to_bits()),
                exact: Some(format!("{c}·{sx:e}·{sw:e}")),
                differing: 1,
            };
            let proof = Certificate {
                method: Method::P4Lemma("the f32 of C·sx·sw".into()),
                domain: i + 1,
                micros: u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
                detail: format!("C = {c}, sx = {sx:e}, sw = {sw:e}: the epilogue gives {got:e}, the correctly rounded value is {want:e}"),
            };
            return Verdict::Refuted { counterexample, proof };
        }
    }
    Verdict::Exact {
        proof: Certificate {
            method: Method::P4Lemma(P4_FLOAT.into()),
            domain: FLOAT_CASES,
            micros: u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
            detail: format!("{FLOAT_CASES} constructed midpoint and double-rounding cases agree with exact_f32"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdqc_kernels::dynamic::certified_f32;

    fn group(output: DynamicOutput) -> DynamicGroup {
        DynamicGroup {
            w_code: CodeType::I8,
            weights: vec![vec![3, -7, 127, -128], vec![0, 1, 2, 3]],
            w_scales: vec![0.01, 0.02],
            w_zero_points: vec![0],
            output,
        }
    }

    #[test]
    fn accepted_instances() {
        let y = QParam::new(0.05, 3, CodeType::U8);
        for (output, contract) in [
            (DynamicOutput::GraphFloat, Contract::Exact),
            (DynamicOutput::GraphFloat, Contract::Real),
            (DynamicOutput::DequantizedFloat, Contract::Real),
            (DynamicOutput::Codes(y), Contract::Real),
        ] {
            let v = prove(&group(output), contract);
            assert!(v.is_exact(), "{output:?} under {contract:?}: {v:?}");
        }
    }

    #[test]
    fn refused_instances() {
        let y = QParam::new(0.05, 3, CodeType::U8);
        for output in [DynamicOutput::DequantizedFloat, DynamicOutput::Codes(y)] {
            let v = prove(&group(output), Contract::Exact);
            assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("made at run time")), "{v:?}");
        }
        // 2^31 / 255 / 255 ≈ 33,000 weights at ±255 from the zero point overflow i32.
        let wide = DynamicGroup {
            w_code: CodeType::U8,
            weights: vec![vec![255; 34_000]],
            w_scales: vec![0.01],
            w_zero_points: vec![0],
            output: DynamicOutput::GraphFloat,
        };
        assert!(matches!(prove(&wide, Contract::Real), Verdict::Unknown { reason } if reason.contains("beyond i32")));
        let sixteen = DynamicGroup { w_code: CodeType::I16, ..group(DynamicOutput::GraphFloat) };
        assert!(matches!(prove(&sixteen, Contract::Real), Verdict::Unknown { reason } if reason.contains("8-bit")));
        let zero_scale = DynamicGroup { w_scales: vec![0.0], ..group(DynamicOutput::GraphFloat) };
        assert!(!prove(&zero_scale, Contract::Exact).is_exact());
    }

    #[test]
    fn the_certificate_and_a_plain_f64_product() {
        assert!(check_float_epilogue(|c, sx, sw| certified_f32(c, f64::from(sx) * f64::from(sw), sx, sw).0).is_exact());
        #[allow(clippy::cast_possible_truncation)] // the broken claim: the f64 product rounded to f32
        let plain = check_float_epilogue(|c, sx, sw| (f64::from(c) * (f64::from(sx) * f64::from(sw))) as f32);
        let Verdict::Refuted { counterexample, .. } = plain else { panic!("the plain f64 product must be refuted: {plain:?}") };
        // The counterexample reproduces: recompute both sides from its inputs.
        let [(_, c), (_, sx), (_, sw)] = &counterexample.inputs[..] else { panic!("{counterexample:?}") };
        let (c, sx, sw) = (i32::try_from(*c).unwrap(), f32::from_bits(u32::try_from(*sx).unwrap()), f32::from_bits(u32::try_from(*sw).unwrap()));
        assert_eq!(i64::from(exact_f32(c, sx, sw).to_bits()), counterexample.unfused);
        #[allow(clippy::cast_possible_truncation)]
        let plain = (f64::from(c) * (f64::from(sx) * f64::from(sw))) as f32;
        assert_ne!(plain.to_bits(), exact_f32(c, sx, sw).to_bits());
    }
}
