//! QLinearAdd / QLinearMul: bit-exact models of ONNX Runtime's kernels per ISA, the unfused
//! reference `Q(DQ(a) op DQ(b))`, and the P1 proof over every code pair (contract §3.5,
//! §5.7).
//!
//! Sources (ORT `onnxruntime/core/mlas/lib/`): `qladd.cpp` (x86 SSE2 kernel, NEON fixed point and
//! its raw float fallback), `intrinsics/avx2/qladd_avx2.cpp` (the two-FMA kernel every x86 CPU
//! with AVX2 uses, AVX-512 included: `platform.cpp` only sets `QLinearAdd*Kernel` in its AVX2
//! block), `qlmul.cpp` (SSE2 and NEON64 only, no x86 dispatch), and
//! `contrib_ops/cpu/quantization/qlinear_binary_op.cc` (broadcasting: a scalar A is passed to
//! MLAS as the scalar "B", so the two inputs swap roles).
//!
//! Where the C++ source leaves a multiply and an add that a compiler may contract into one FMA
//! (GCC does by default, MSVC and clang do not across intrinsics), every plausible build is a
//! separate [`Contractions`]; [`prove`] must hold for all builds of an ISA.

use crate::Isa;
use crate::profile::{AddKernel, Convert};
use qdqc_exact::num::Dyadic;
use qdqc_exact::p1;
use qdqc_exact::reference::{CodeType, dequantize, dequantize_real, quantize, quantize_real};
use qdqc_exact::{Certificate, Contract, Method, QParam, Verdict};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum BinaryOp {
    Add,
    Mul,
}

impl BinaryOp {
    pub fn ort_name(self) -> &'static str {
        match self {
            BinaryOp::Add => "QLinearAdd",
            BinaryOp::Mul => "QLinearMul",
        }
    }
}

/// Quantization of the inputs `a`, `b` and the output `c`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BinaryParams {
    pub a: QParam,
    pub b: QParam,
    pub c: QParam,
}

/// Which input, if any, ORT's broadcaster hands to the kernel as a single repeated value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Broadcast {
    /// Both inputs are spans of equal length.
    None,
    /// A is one value per span: ORT calls MLAS with B as "A" and A as the scalar "B".
    AScalar,
    /// B is one value per span: MLAS precomputes `Fixed' = Fixed + b·rB` once.
    BScalar,
}

impl Broadcast {
    pub fn name(self) -> &'static str {
        match self {
            Broadcast::None => "vector-vector",
            Broadcast::AScalar => "scalar A",
            Broadcast::BScalar => "scalar B",
        }
    }
}

/// Which operand's product a contracted `x·y + u·v` fuses into the add.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Fused {
    /// The first product (the A side in MLAS's argument order).
    A,
    /// The second product (the B side).
    B,
}

/// The multiply–add pairs of the kernel's C++ source that a compiler contracted into FMAs.
/// `Contractions::default()` is the source read literally: every operation rounds once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Contractions {
    /// x86 AVX2 translation unit: `rA·zA + rB·zB` inside `Fixed`.
    pub fixed: Option<Fused>,
    /// x86 AVX2 translation unit: `Fixed + b·rB` for a scalar B (`_mm256_add_ps(_, _mm256_mul_ps)`).
    pub scalar_fixed: bool,
    /// NEON raw fallback: `sA·(a−zA) + sB·(b−zB)`.
    pub raw: Option<Fused>,
    /// NEON QLinearMul: `zC + R·p` (`vaddq_f32(_, vmulq_f32)`).
    pub mul: bool,
}

impl Contractions {
    /// GCC (the Linux wheels) contracts across statements and through the intrinsics, which it
    /// defines as plain vector arithmetic. Measured on the host (ORT 1.31.1, GCC 14; pinned by
    /// `tests/ort_elementwise.rs`): `Fixed = zC − fma(rA, zA, fl(rB·zB))` and, for a scalar B,
    /// `Fixed' = fma(b, rB, Fixed)`.
    pub const GCC_X86_AVX2: Contractions = Contractions { fixed: Some(Fused::A), scalar_fixed: true, raw: None, mul: false };
    /// clang (macOS) contracts only within one expression: `Fixed`'s `rA·zA + rB·zB`, not the
    /// intrinsics' separate multiply and add.
    pub const CLANG_X86_AVX2: Contractions = Contractions { fixed: Some(Fused::A), scalar_fixed: false, raw: None, mul: false };

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(f) = self.fixed {
            parts.push(format!("Fixed: fma on {f:?}"));
        }
        if self.scalar_fixed {
            parts.push("Fixed': fma".to_string());
        }
        if let Some(f) = self.raw {
            parts.push(format!("raw fallback: fma on {f:?}"));
        }
        if self.mul {
            parts.push("requant: fma".to_string());
        }
        if parts.is_empty() { "no FMA contraction".to_string() } else { parts.join(", ") }
    }
}

/// The compiled forms of ORT's kernel that a proof for `isa` must cover. On x86 the first is the
/// build of the Linux wheel, the one the differential tests run.
pub fn builds(op: BinaryOp, isa: Isa) -> Vec<Contractions> {
    match op {
        BinaryOp::Add => isa.arith().add_builds.to_vec(),
        BinaryOp::Mul => isa.arith().mul_builds.to_vec(),
    }
}

/// One compiled ORT kernel for fixed parameters, ISA and broadcast layout, with its constants
/// precomputed as ORT precomputes them.
#[derive(Clone, Debug)]
pub struct BinaryKernel {
    out: CodeType,
    /// ORT passes a scalar A to MLAS as its "B": `eval(a, b)` then feeds MLAS `(b, a)`.
    swap: bool,
    scalar_b: bool,
    arith: Arith,
}

#[derive(Clone, Debug)]
enum Arith {
    /// x86 QLinearAdd on raw codes with the zero points folded into `fixed`
    /// (`Fixed = zC − (rA·zA + rB·zB)`).
    AddX86 { avx2: bool, ra: f32, rb: f32, fixed: f32, scalar_fma: bool },
    /// NEON fixed point: `(a−zA)·MA + (b−zB)·MB`, rounded half away from zero by `shift`.
    AddNeonFixed { za: i64, zb: i64, ma: i64, mb: i64, shift: u32, zc: i64 },
    /// NEON when the scale ratios are out of the fixed-point range (`MlasQLinearAddKernelRawHelper`).
    AddNeonRaw { a: QParam, b: QParam, sc: f32, zc: i64, fma: Option<Fused> },
    /// QLinearMul: `cvt_rne(fl(f32(p)·R) + f32(zC))` with `p = (a−zA)(b−zB)` exact and
    /// `R = fl(fl(sA·sB)/sC)`.
    Mul { za: i64, zb: i64, ratio: f32, zc: f32, fma: bool, arm: bool },
}

impl BinaryKernel {
    /// The kernel ORT runs for these parameters, or why ORT's kernel cannot take them.
    pub fn new(op: BinaryOp, p: &BinaryParams, bcast: Broadcast, isa: Isa, build: Contractions) -> Result<BinaryKernel, String> {
        check_params(op, p)?;
        let swap = bcast == Broadcast::AScalar;
        // MLAS's (A, B) in call order.
        let (ka, kb) = if swap { (p.b, p.a) } else { (p.a, p.b) };
        let arith = match (op, isa.arith().add) {
            (BinaryOp::Add, AddKernel::Sse2) => add_x86(ka, kb, p.c, false, build),
            (BinaryOp::Add, AddKernel::Avx2) => add_x86(ka, kb, p.c, true, build),
            (BinaryOp::Add, AddKernel::NeonFixed) => add_neon(ka, kb, p.c, build),
            (BinaryOp::Mul, _) => Arith::Mul {
                za: ka.zero_point,
                zb: kb.zero_point,
                ratio: ka.scale * kb.scale / p.c.scale,
                zc: p.c.zero_point as f32,
                fma: build.mul,
                arm: isa.arith().convert == Convert::Arm,
            },
        };
        Ok(BinaryKernel { out: p.c.code, swap, scalar_b: bcast != Broadcast::None, arith })
    }

    /// Whether NEON left fixed point for the raw float fallback (always false elsewhere).
    pub fn is_neon_fallback(&self) -> bool {
        matches!(self.arith, Arith::AddNeonRaw { .. })
    }

    /// The output code for input codes `a` and `b`.
    pub fn eval(&self, a: i64, b: i64) -> i64 {
        let (x, y) = if self.swap { (b, a) } else { (a, b) };
        let (lo, hi) = self.out.range();
        match self.arith {
            Arith::AddX86 { avx2, ra, rb, fixed, scalar_fma } => {
                let v = add_x86_value(x as f32, y as f32, ra, rb, fixed, avx2, self.scalar_b, scalar_fma);
                // `packs_epi32` then `packus_epi16`/`packs_epi16`: saturation to the code range.
                (cvt_rne_x86(v) as i64).clamp(lo, hi)
            }
            Arith::AddNeonFixed { za, zb, ma, mb, shift, zc } => {
                let acc = (x - za) * ma + (y - zb) * mb;
                neon_narrow(round_half_away_shift(acc, shift), zc, lo, hi)
            }
            Arith::AddNeonRaw { a, b, sc, zc, fma } => neon_raw_add(x, y, a, b, sc, zc, fma, lo, hi),
            Arith::Mul { za, zb, ratio, zc, fma, arm } => {
                // |p| ≤ 255² < 2^24: the conversion is exact.
                let p = ((x - za) * (y - zb)) as f32;
                let v = if fma { p.mul_add(ratio, zc) } else { p * ratio + zc };
                let r = if arm { cvt_rne_arm(v) } else { cvt_rne_x86(v) };
                (r as i64).clamp(lo, hi)
            }
        }
    }
}

fn check_params(op: BinaryOp, p: &BinaryParams) -> Result<(), String> {
    let t = p.c.code;
    if !matches!(t, CodeType::U8 | CodeType::I8) || p.a.code != t || p.b.code != t {
        return Err(format!("{} takes one 8-bit type for A, B and C", op.ort_name()));
    }
    let (lo, hi) = t.range();
    for (name, q) in [("A", p.a), ("B", p.b), ("C", p.c)] {
        if !(lo..=hi).contains(&q.zero_point) {
            return Err(format!("{name} zero point {} is not a {} value", q.zero_point, t.name()));
        }
    }
    Ok(())
}

/// `Fixed`, computed as scalar C++ in the kernel's translation unit.
fn add_x86(a: QParam, b: QParam, c: QParam, avx2: bool, build: Contractions) -> Arith {
    let ra = a.scale / c.scale;
    let rb = b.scale / c.scale;
    let (za, zb) = (a.zero_point as f32, b.zero_point as f32);
    let folded = match build.fixed.filter(|_| avx2) {
        None => ra * za + rb * zb,
        Some(Fused::A) => ra.mul_add(za, rb * zb),
        Some(Fused::B) => rb.mul_add(zb, ra * za),
    };
    Arith::AddX86 { avx2, ra, rb, fixed: c.zero_point as f32 - folded, scalar_fma: avx2 && build.scalar_fixed }
}

/// The value fed to `cvtps2dq`; `x`, `y` are the raw codes of MLAS's A and B.
#[allow(clippy::too_many_arguments)]
fn add_x86_value(x: f32, y: f32, ra: f32, rb: f32, fixed: f32, avx2: bool, scalar_b: bool, scalar_fma: bool) -> f32 {
    match (avx2, scalar_b) {
        // SSE2: `(Fixed + a·rA) + b·rB`, every operation rounded.
        (false, false) => (fixed + x * ra) + y * rb,
        // SSE2 scalar B: `Fixed' = Fixed + b·rB` once, then `Fixed' + a·rA`.
        (false, true) => (fixed + y * rb) + x * ra,
        // AVX2: `fma(a, rA, fma(b, rB, Fixed))`.
        (true, false) => x.mul_add(ra, y.mul_add(rb, fixed)),
        // AVX2 scalar B: `Fixed'` as C++ intrinsics (contractible), then one FMA.
        (true, true) => {
            let fixed2 = if scalar_fma { y.mul_add(rb, fixed) } else { fixed + y * rb };
            x.mul_add(ra, fixed2)
        }
    }
}

/// `MlasCalcQLinearAddParameters`: the fixed-point form when both ratios are in [2^-14, 256)
/// and the shift fits, else the raw float fallback.
fn add_neon(a: QParam, b: QParam, c: QParam, build: Contractions) -> Arith {
    let ra = a.scale / c.scale;
    let rb = b.scale / c.scale;
    match neon_fixed_point(ra, rb) {
        Some((ma, mb, shift)) => Arith::AddNeonFixed { za: a.zero_point, zb: b.zero_point, ma, mb, shift, zc: c.zero_point },
        None => Arith::AddNeonRaw { a, b, sc: c.scale, zc: c.zero_point, fma: build.raw },
    }
}

/// `(MultiplierA, MultiplierB, Shift)` as `MlasCalcQLinearAddParameters` computes them.
// `to_bits() >> 23` has 9 bits and `shift` is checked to 13..=31: those casts are lossless. The
// `lrintf` casts model the kernel (NaN gives 0, as ARM's conversion does); in range the products
// are below 2^22 (checked after).
#[allow(clippy::cast_possible_wrap, clippy::cast_sign_loss, clippy::cast_possible_truncation)]
fn neon_fixed_point(ra: f32, rb: f32) -> Option<(i64, i64, u32)> {
    const MIN_RATIO: f32 = 1.0 / 16384.0;
    const MAX_RATIO: f32 = 256.0;
    // ORT rejects `r < 2^-14 || r >= 256`, which a NaN ratio passes.
    let in_range = |r: f32| r.is_nan() || (MIN_RATIO..MAX_RATIO).contains(&r);
    if !in_range(ra) || !in_range(rb) {
        return None;
    }
    // `std::max(a, b)` is `a < b ? b : a`.
    let greater = if ra < rb { rb } else { ra };
    let exponent = (greater.to_bits() >> 23) as i32 - 127;
    let shift = 21 - exponent;
    if !(13..=31).contains(&shift) {
        return None;
    }
    let scale = f32::from_bits(((shift + 127) as u32) << 23);
    // `lrintf` rounds to nearest even in the default rounding mode; the product is exact.
    let ma = (ra * scale).round_ties_even() as i64;
    let mb = (rb * scale).round_ties_even() as i64;
    let ok = ma < 1 << 22 && mb < 1 << 22 && (ma >= 1 << 21 || mb >= 1 << 21);
    ok.then_some((ma, mb, shift as u32))
}

/// `vsraq_n_s32(acc, acc, 31)` (subtract 1 from negatives) then `vrshlq_s32(acc, -shift)`
/// (add 2^(shift−1), shift right): rounding half away from zero, never to even.
fn round_half_away_shift(acc: i64, shift: u32) -> i64 {
    let acc = acc + (acc >> 63);
    (acc + (1 << (shift - 1))) >> shift
}

/// `vqmovn_s32` to int16, saturating `vqaddq_s16` of zC, saturating narrow to 8 bits.
fn neon_narrow(r: i64, zc: i64, lo: i64, hi: i64) -> i64 {
    let r16 = r.clamp(i16::MIN as i64, i16::MAX as i64);
    (r16 + zc).clamp(i16::MIN as i64, i16::MAX as i64).clamp(lo, hi)
}

/// `MlasQLinearAddKernelRawHelper`: `VC = clamp(fl(fl(VA + VB)/sC))`, `nearbyintf(VC + zC)`.
#[allow(clippy::too_many_arguments)]
fn neon_raw_add(x: i64, y: i64, a: QParam, b: QParam, sc: f32, zc: i64, fma: Option<Fused>, lo: i64, hi: i64) -> i64 {
    let (xa, xb) = ((x - a.zero_point) as f32, (y - b.zero_point) as f32);
    let sum = match fma {
        None => a.scale * xa + b.scale * xb,
        Some(Fused::A) => a.scale.mul_add(xa, b.scale * xb),
        Some(Fused::B) => b.scale.mul_add(xb, a.scale * xa),
    };
    let (min, max) = ((lo - zc) as f32, (hi - zc) as f32);
    // `std::min(std::max(v, Min), Max)` passes NaN through.
    let v = sum / sc;
    let v = if v < min { min } else { v };
    let v = if max < v { max } else { v };
    (truncate_arm((v + zc as f32).round_ties_even()) as i64).clamp(lo, hi)
}

/// x86 `cvtps2dq` (round to nearest even): NaN and values outside int32 give `i32::MIN`.
#[allow(clippy::cast_possible_truncation)] // `r` is integral and checked inside int32 first.
pub(crate) fn cvt_rne_x86(v: f32) -> i32 {
    let r = v.round_ties_even();
    if (-2147483648.0..2147483648.0).contains(&r) { r as i32 } else { i32::MIN }
}

/// ARM `fcvtns` (`vcvtnq_s32_f32`): round to nearest even, saturating, NaN gives 0.
#[allow(clippy::cast_possible_truncation)] // The model: `as` saturates like `fcvtns`.
pub(crate) fn cvt_rne_arm(v: f32) -> i32 {
    // Rust's `as` saturates and maps NaN to 0, as the instruction does.
    v.round_ties_even() as i32
}

/// ARM `fcvtzs` (a C++ float→int32 cast): truncating, saturating, NaN gives 0.
#[allow(clippy::cast_possible_truncation)] // The model: `as` truncates and saturates like `fcvtzs`.
pub(crate) fn truncate_arm(v: f32) -> i32 {
    v as i32
}

/// x86 `cvttss2si` (a C++ float→int32 cast): truncating; NaN and out-of-range give `i32::MIN`.
#[allow(clippy::cast_possible_truncation)] // `t` is integral and checked inside int32 first.
pub(crate) fn truncate_x86(v: f32) -> i32 {
    let t = v.trunc();
    if (-2147483648.0..2147483648.0).contains(&t) { t as i32 } else { i32::MIN }
}

/// The unfused reference `Q_c(DQ_a(a) op DQ_b(b))` under `contract`: f32 operations for
/// `exact`, exact rationals for `real`. `None` when the real contract has no value (a scale
/// that is not a finite non-zero f32, or magnitudes beyond i128).
pub fn reference(op: BinaryOp, p: &BinaryParams, contract: Contract) -> Option<impl Fn(i64, i64) -> i64 + use<>> {
    let (ta, tb) = (code_table(p.a, |q| dequantize(q, p.a.scale, p.a.zero_point)), code_table(p.b, |q| dequantize(q, p.b.scale, p.b.zero_point)));
    let (la, lb) = (p.a.code.range().0, p.b.code.range().0);
    let real: Option<Vec<i64>> = match contract {
        Contract::Exact => None,
        Contract::Real => Some(real_table(op, p)?),
    };
    let c = p.c;
    let width = usize::try_from(p.b.code.range().1 - lb + 1).expect("a code range is non-empty");
    Some(move |a: i64, b: i64| {
        let code_index = |q: i64, lo: i64| usize::try_from(q - lo).expect("inputs are codes of their type, at least its lowest code");
        let (ia, ib) = (code_index(a, la), code_index(b, lb));
        match &real {
            Some(t) => t[ia * width + ib],
            None => {
                let (x, y) = (ta[ia], tb[ib]);
                let v = match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Mul => x * y,
                };
                quantize(v, c.scale, c.zero_point, c.code)
            }
        }
    })
}

fn code_table<T>(q: QParam, f: impl Fn(i64) -> T) -> Vec<T> {
    let (lo, hi) = q.code.range();
    (lo..=hi).map(f).collect()
}

/// The real-contract output of every pair, row-major in (a, b).
fn real_table(op: BinaryOp, p: &BinaryParams) -> Option<Vec<i64>> {
    let (alo, ahi) = p.a.code.range();
    let (blo, bhi) = p.b.code.range();
    let mut out = Vec::with_capacity(usize::try_from((ahi - alo + 1) * (bhi - blo + 1)).expect("code ranges are non-empty"));
    for a in alo..=ahi {
        for b in blo..=bhi {
            out.push(quantize_real(exact_value(op, p, a, b)?, p.c.scale, p.c.zero_point, p.c.code)?);
        }
    }
    Some(out)
}

/// `DQ(a) op DQ(b)` in exact arithmetic.
fn exact_value(op: BinaryOp, p: &BinaryParams, a: i64, b: i64) -> Option<Dyadic> {
    let x = dequantize_real(a, p.a.scale, p.a.zero_point)?;
    let y = dequantize_real(b, p.b.scale, p.b.zero_point)?;
    match op {
        BinaryOp::Add => x.checked_add(y),
        BinaryOp::Mul => x.checked_mul(y),
    }
}

/// Proves or refutes that ORT's fused kernel equals the unfused graph for every pair of codes,
/// for every build of `isa` ([`builds`]). P1 over 65 536 pairs per build.
pub fn prove(op: BinaryOp, p: &BinaryParams, bcast: Broadcast, isa: Isa, contract: Contract) -> Verdict {
    if let Some(reason) = unsupported_scales(p) {
        return Verdict::Unknown { reason };
    }
    let Some(reference) = reference(op, p, contract) else {
        return Verdict::Unknown { reason: "the exact value of a pair exceeds the exact arithmetic's range".to_string() };
    };
    let domains = [p.a.domain("a"), p.b.domain("b")];
    let mut kernels = Vec::new();
    for build in builds(op, isa) {
        match BinaryKernel::new(op, p, bcast, isa, build) {
            Ok(k) => kernels.push((build, k)),
            Err(reason) => return Verdict::Unknown { reason },
        }
    }
    let header = format!("{} {} {isa} {}", op.ort_name(), p.c.code.name(), bcast.name());
    let names: Vec<String> = kernels.iter().map(|(b, _)| b.describe()).collect();
    let per_build = kernels.iter().map(|(build, kernel)| {
        let detail = format!("{header} ({}): every code pair", build.describe());
        p1::exhaustive(&domains, &detail, |x| reference(x[0], x[1]), |x| kernel.eval(x[0], x[1]), |x| exact_text(op, p, x[0], x[1]))
    });
    all_of(per_build, format!("{header}: every code pair, builds [{}]", names.join("; ")))
}

/// The conjunction of P1 verdicts, evaluated in order: the first refutation or unknown, else one
/// certificate over the union of their domains.
pub(crate) fn all_of(parts: impl IntoIterator<Item = Verdict>, detail: String) -> Verdict {
    let (mut domain, mut micros) = (0, 0);
    for part in parts {
        match part {
            Verdict::Exact { proof } => {
                domain += proof.domain;
                micros += proof.micros;
            }
            refuted_or_unknown => return refuted_or_unknown,
        }
    }
    Verdict::Exact { proof: Certificate { method: Method::P1Exhaustive, domain, micros, detail } }
}

/// Scales outside the modelled range: zero, infinite, NaN. (Negative and subnormal scales are
/// modelled: IEEE arithmetic covers them.)
fn unsupported_scales(p: &BinaryParams) -> Option<String> {
    [("A", p.a), ("B", p.b), ("C", p.c)]
        .into_iter()
        .find(|(_, q)| !q.scale.is_finite() || q.scale == 0.0)
        .map(|(n, q)| format!("{n} scale {} is not a finite non-zero f32", q.scale))
}

/// `v/sC = p/q ≈ x`, the exact pre-rounding value of the reference at `(a, b)`.
fn exact_text(op: BinaryOp, p: &BinaryParams, a: i64, b: i64) -> Option<String> {
    let v = exact_value(op, p, a, b)?;
    Some(format!("v/sC = {}", ratio_text(v, Dyadic::from_f32(p.c.scale)?)?))
}

/// `n/d` as a reduced fraction with its decimal value: `p/q ≈ x`.
pub(crate) fn ratio_text(n: Dyadic, d: Dyadic) -> Option<String> {
    if d.is_zero() {
        return None;
    }
    let k = n.exp.checked_sub(d.exp)?;
    let pow2 = |e: i32| if (0..126).contains(&e) { Some(1i128 << e) } else { None };
    let (mut p, mut q) = if k >= 0 { (n.mant.checked_mul(pow2(k)?)?, d.mant) } else { (n.mant, d.mant.checked_mul(pow2(-k)?)?) };
    if q < 0 {
        (p, q) = (-p, -q);
    }
    let g = i128::try_from(gcd(p.unsigned_abs(), q.unsigned_abs())).expect("the gcd divides q, a positive i128");
    (p, q) = (p / g, q / g);
    Some(format!("{p}/{q} ≈ {:.9}", p as f64 / q as f64))
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// The broadcast layouts ORT may run for inputs of these shapes: one when both are known, all
/// three otherwise (a proof must then cover each).
pub fn layouts(a: Option<Vec<i64>>, b: Option<Vec<i64>>) -> Vec<Broadcast> {
    let one = |s: &Option<Vec<i64>>| s.as_ref().is_some_and(|s| s.iter().product::<i64>() == 1);
    match (&a, &b) {
        _ if one(&a) => vec![Broadcast::AScalar],
        _ if one(&b) => vec![Broadcast::BScalar],
        (Some(x), Some(y)) if x == y => vec![Broadcast::None],
        _ => vec![Broadcast::None, Broadcast::AScalar, Broadcast::BScalar],
    }
}

/// Exact only if exact in every layout; the first layout that is not speaks for all.
pub fn prove_layouts(op: BinaryOp, p: &BinaryParams, layouts: &[Broadcast], isa: Isa, contract: Contract) -> Verdict {
    let mut last = None;
    for &layout in layouts {
        match prove(op, p, layout, isa, contract) {
            Verdict::Exact { proof } => last = Some(proof),
            other => return other,
        }
    }
    let Some(mut proof) = last else { return Verdict::Unknown { reason: "no broadcast layout".into() } };
    let names: Vec<&str> = layouts.iter().map(|l| l.name()).collect();
    proof.detail = format!("{} (layouts: {})", proof.detail, names.join(", "));
    Verdict::Exact { proof }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_params::{i8p, u8p};

    /// The seed model's residual `Add2`: DQ(q_c2; 0.15, 128) + DQ(q_add1; 0.37, 128) → Q(0.38, 128).
    fn seed_add2() -> BinaryParams {
        BinaryParams { a: u8p(0.15, 128), b: u8p(0.37, 128), c: u8p(0.38, 128) }
    }

    /// The first build of `isa`: for x86, the Linux wheel's.
    fn kernel(op: BinaryOp, p: &BinaryParams, bcast: Broadcast, isa: Isa) -> BinaryKernel {
        BinaryKernel::new(op, p, bcast, isa, builds(op, isa)[0]).unwrap()
    }

    #[test]
    fn seed_add2_is_refuted_on_x86_avx512vnni() {
        let v = prove(BinaryOp::Add, &seed_add2(), Broadcast::None, Isa::X86Avx512Vnni, Contract::Exact);
        let c = v.counterexample().unwrap_or_else(|| panic!("expected a refutation, got {v:?}"));
        println!("seed Add2 on x86-avx512vnni: {c}");
        assert_eq!((c.unfused - c.fused).abs(), 1, "a one-step difference");
        assert!(c.exact.as_deref().is_some_and(|e| e.starts_with("v/sC = ")), "{c}");
    }

    #[test]
    fn sse2_and_avx2_formulas_disagree_on_the_seed_parameters() {
        // Computed independently from the source arithmetic (numpy f32 operations, FMAs in exact
        // rationals): rA = 0.39473686, rB = 0.97368425, Fixed = −47.157898 (both ways). At
        // (a, b) = (2, 157) SSE2 gets fl(fl(Fixed + fl(2·rA)) + fl(157·rB)) = 106.5, a tie
        // rounded to 106; AVX2 gets fma(2, rA, fma(157, rB, Fixed)) = 106.50001 → 107. The exact
        // value is 128 − 21.5000019, so the reference is 106.
        let p = seed_add2();
        let (sse2, avx2) = (kernel(BinaryOp::Add, &p, Broadcast::None, Isa::X86Sse2), kernel(BinaryOp::Add, &p, Broadcast::None, Isa::X86Avx2));
        assert_eq!((sse2.eval(2, 157), avx2.eval(2, 157)), (106, 107));
        assert_eq!(reference(BinaryOp::Add, &p, Contract::Exact).unwrap()(2, 157), 106);
        let Arith::AddX86 { ra, rb, fixed, .. } = sse2.arith else { panic!() };
        assert_eq!((ra, rb, fixed), (0.39473686, 0.97368425, -47.157898));
    }

    #[test]
    fn avx2_formula_claimed_for_sse2_is_refuted_by_the_sse2_model() {
        // What an audit checks: the AVX2 model proven against the SSE2 one must fail somewhere.
        let p = seed_add2();
        let (sse2, avx2) = (kernel(BinaryOp::Add, &p, Broadcast::None, Isa::X86Sse2), kernel(BinaryOp::Add, &p, Broadcast::None, Isa::X86Avx2));
        let d = [p.a.domain("a"), p.b.domain("b")];
        let v = p1::exhaustive(&d, "AVX2 as SSE2", |x| sse2.eval(x[0], x[1]), |x| avx2.eval(x[0], x[1]), |_| None);
        assert_eq!(v.word(), "refuted");
    }

    #[test]
    fn x86_add_pinned_cases() {
        // sA = sB = sC = 1, zero points 0: rA = rB = 1, Fixed = 0; a + b saturates at 255.
        let p = BinaryParams { a: u8p(1.0, 0), b: u8p(1.0, 0), c: u8p(1.0, 0) };
        for isa in [Isa::X86Sse2, Isa::X86Avx2] {
            let k = kernel(BinaryOp::Add, &p, Broadcast::None, isa);
            assert_eq!(k.eval(3, 4), 7);
            assert_eq!(k.eval(200, 100), 255);
        }
        // rA = 0.5: a = 1, b = 0 gives 0.5, which cvtps2dq rounds to even (0); a = 3 gives 1.5 → 2.
        let p = BinaryParams { a: u8p(0.5, 0), b: u8p(1.0, 0), c: u8p(1.0, 0) };
        let k = kernel(BinaryOp::Add, &p, Broadcast::None, Isa::X86Sse2);
        assert_eq!((k.eval(1, 0), k.eval(3, 0), k.eval(5, 0)), (0, 2, 2));
    }

    #[test]
    fn x86_add_overflow_maps_to_qmin() {
        // rA = 2^40: a·rA leaves int32, cvtps2dq returns 0x80000000, the packs saturate to qmin,
        // although the true sum is hugely positive.
        let p = BinaryParams { a: u8p(1.0995116e12, 0), b: u8p(1.0, 0), c: u8p(1.0, 0) };
        let k = kernel(BinaryOp::Add, &p, Broadcast::None, Isa::X86Sse2);
        assert_eq!(k.eval(1, 0), 0);
        assert_eq!(k.eval(0, 0), 0);
        let r = reference(BinaryOp::Add, &p, Contract::Exact).unwrap();
        assert_eq!(r(1, 0), 255);
    }

    #[test]
    fn neon_fixed_point_rounds_half_away_from_zero() {
        // rA = 0.5, rB = 0.25: greater exponent −1, Shift = 22, MA = 2^21, MB = 2^20.
        assert_eq!(neon_fixed_point(0.5, 0.25), Some((1 << 21, 1 << 20, 22)));
        let p = BinaryParams { a: u8p(0.5, 128), b: u8p(0.25, 128), c: u8p(1.0, 128) };
        let k = kernel(BinaryOp::Add, &p, Broadcast::None, Isa::Arm64Neon);
        assert!(!k.is_neon_fallback());
        // (a−zA) = ±1: acc = ±2^21, exactly ±0.5 → ±1 (away from zero); RNE would give 0.
        assert_eq!(k.eval(129, 128), 129);
        assert_eq!(k.eval(127, 128), 127);
        // (a−zA) = 1, (b−zB) = 2: 0.5 + 0.5 = 1 exactly.
        assert_eq!(k.eval(129, 130), 129);
        // (a−zA) = 3: 1.5 → 2; (b−zB) = −6: −1.5 → −2.
        assert_eq!(k.eval(131, 128), 130);
        assert_eq!(k.eval(128, 122), 126);
        // Saturation: 127·0.5 + 127·0.25 = 95.25 → 95 + 128 = 223; −128·0.75 = −96 → 32.
        assert_eq!(k.eval(255, 255), 223);
        assert_eq!(k.eval(0, 0), 32);
        let v = prove(BinaryOp::Add, &p, Broadcast::None, Isa::Arm64Neon, Contract::Exact);
        let c = v.counterexample().expect("half away from zero differs from ties to even");
        assert_eq!(c.inputs, vec![("a".to_string(), 127), ("b".to_string(), 128)]);
        assert_eq!((c.unfused, c.fused), (128, 127));
        // The x86 kernels round the same ties to even and agree with the reference here.
        assert!(prove(BinaryOp::Add, &p, Broadcast::None, Isa::X86Sse2, Contract::Exact).is_exact());
    }

    #[test]
    #[allow(clippy::cast_possible_truncation)] // 0.1·2^22 rounds to 419430, well inside i64.
    fn neon_multipliers_follow_the_greater_ratio() {
        // rA = 0.75 (exponent −1): Shift 22, MA = 0.75·2^22, MB = lrintf(0.1·2^22) rounded to even.
        let (ma, mb, shift) = neon_fixed_point(0.75, 0.1).unwrap();
        assert_eq!((ma, shift), (3 << 20, 22));
        assert_eq!(mb, (0.1f32 * 4194304.0).round_ties_even() as i64);
        assert_eq!(mb, 419430);
        // Ratios out of [2^-14, 256), or both below 2^-10 (Shift > 31), take the float fallback.
        assert_eq!(neon_fixed_point(256.0, 1.0), None);
        assert_eq!(neon_fixed_point(1.0, 5.0e-5), None);
        assert_eq!(neon_fixed_point(0.0009, 0.0009), None);
        assert!(neon_fixed_point(0.0010, 0.0009).is_some());
        // A greater ratio that lrintf rounds up to 2^22 fails the multiplier check.
        assert_eq!(neon_fixed_point(f32::from_bits(0x3fff_ffff), 1.0), None);
    }

    #[test]
    fn neon_raw_fallback_adds_the_zero_point_before_rounding() {
        // sA/sC = 300 ≥ 256: the raw helper. VA + VB = 300·(a−zA)·sC + ..., then fl(VC + zC).
        let p = BinaryParams { a: u8p(300.0, 0), b: u8p(1.0, 0), c: u8p(1.0, 0) };
        let k = kernel(BinaryOp::Add, &p, Broadcast::None, Isa::Arm64Neon);
        assert!(k.is_neon_fallback());
        assert_eq!((k.eval(0, 7), k.eval(1, 0)), (7, 255));
        // Ties: sB/sC = 0.5 with sA/sC = 300 (fallback): b = 1 → 0.5 → nearbyintf → 0; b = 3 → 2.
        let p = BinaryParams { a: u8p(300.0, 0), b: u8p(0.5, 0), c: u8p(1.0, 0) };
        let k = kernel(BinaryOp::Add, &p, Broadcast::None, Isa::Arm64Neon);
        assert_eq!((k.eval(0, 1), k.eval(0, 3)), (0, 2));
    }

    #[test]
    fn neon_raw_fallback_builds_disagree_so_the_proof_refutes() {
        // sA/sC ≈ 300 (fallback). At (146, 6) the literal source gives 207 and GCC's contraction
        // `fma(sA, a−zA, VB)` 208 (found by search, pinned); the reference equals at most one of
        // them, so a proof covering both builds cannot be exact.
        let f = f32::from_bits;
        let p = BinaryParams { a: u8p(f(0x3d05_8f3b), 128), b: u8p(f(0x3ba5_93a3), 120), c: u8p(f(0x38d4_6f12), 100) };
        let plain = BinaryKernel::new(BinaryOp::Add, &p, Broadcast::None, Isa::Arm64Neon, Contractions::default()).unwrap();
        let fused =
            BinaryKernel::new(BinaryOp::Add, &p, Broadcast::None, Isa::Arm64Neon, Contractions { raw: Some(Fused::A), ..Contractions::default() }).unwrap();
        assert!(plain.is_neon_fallback());
        assert_eq!((plain.eval(146, 6), fused.eval(146, 6)), (207, 208));
        assert_eq!(prove(BinaryOp::Add, &p, Broadcast::None, Isa::Arm64Neon, Contract::Exact).word(), "refuted");
    }

    #[test]
    fn mul_pinned_cases() {
        // R = fl(fl(0.5·0.5)/0.25) = 1: p = (a−zA)(b−zB), + zC, no rounding anywhere.
        let p = BinaryParams { a: i8p(0.5, 1), b: i8p(0.5, -2), c: i8p(0.25, 3) };
        for isa in Isa::ALL {
            let k = kernel(BinaryOp::Mul, &p, Broadcast::None, isa);
            assert_eq!(k.eval(4, 3), 3 * 5 + 3, "{isa}");
            assert_eq!(k.eval(127, 127), 127, "{isa}");
            assert_eq!(k.eval(-128, 127), -128, "{isa}");
            // Mul is symmetric in its inputs, so broadcasting does not change it.
            let s = kernel(BinaryOp::Mul, &p, Broadcast::AScalar, isa);
            assert_eq!(s.eval(4, 3), k.eval(4, 3));
        }
        // R = 0.5: p = 1 → 0.5 + 0 → RNE 0; p = 3 → 1.5 → 2 (cvtps2dq and fcvtns agree).
        let p = BinaryParams { a: u8p(1.0, 0), b: u8p(1.0, 0), c: u8p(2.0, 0) };
        for isa in [Isa::X86Sse2, Isa::Arm64Neon] {
            let k = kernel(BinaryOp::Mul, &p, Broadcast::None, isa);
            assert_eq!((k.eval(1, 1), k.eval(1, 3), k.eval(1, 5)), (0, 2, 2));
        }
    }

    #[test]
    fn mul_refuted_next_to_a_tie() {
        // p·R lands within f32 rounding of 5.5 below it (exact 5.4999964); ORT's fl(p·R) + 128
        // rounds onto the tie 133.5 and then to even 134, the reference rounds 5.4999… to 5.
        let p = BinaryParams { a: u8p(f32::from_bits(0x3c24_11c2), 128), b: u8p(0.02, 128), c: u8p(0.013, 128) };
        for isa in [Isa::X86Sse2, Isa::X86Avx512Vnni] {
            let v = prove(BinaryOp::Mul, &p, Broadcast::None, isa, Contract::Exact);
            let c = v.counterexample().unwrap_or_else(|| panic!("{v:?}"));
            assert_eq!(c.inputs, vec![("a".to_string(), 107), ("b".to_string(), 111)]);
            assert_eq!((c.unfused, c.fused), (133, 134));
        }
    }

    #[test]
    fn real_contract_uses_exact_values() {
        // Power-of-two scales: DQ, the sum and the quotient are exact, so every ISA agrees with
        // both contracts except NEON's ties.
        let p = BinaryParams { a: u8p(0.25, 128), b: u8p(0.5, 128), c: u8p(1.0, 128) };
        for contract in [Contract::Exact, Contract::Real] {
            assert!(prove(BinaryOp::Add, &p, Broadcast::None, Isa::X86Sse2, contract).is_exact(), "{contract:?}");
            assert!(prove(BinaryOp::Add, &p, Broadcast::BScalar, Isa::X86Avx2, contract).is_exact(), "{contract:?}");
            assert_eq!(prove(BinaryOp::Add, &p, Broadcast::None, Isa::Arm64Neon, contract).word(), "refuted");
        }
    }

    #[test]
    fn unsupported_parameters_are_unknown() {
        let mut p = seed_add2();
        p.c.scale = 0.0;
        assert_eq!(prove(BinaryOp::Add, &p, Broadcast::None, Isa::X86Sse2, Contract::Exact).word(), "unknown");
        let mixed = BinaryParams { a: i8p(0.1, 0), ..seed_add2() };
        assert_eq!(prove(BinaryOp::Add, &mixed, Broadcast::None, Isa::X86Sse2, Contract::Exact).word(), "unknown");
    }

    #[test]
    fn ratio_text_reduces_fractions() {
        let t = ratio_text(Dyadic::int(3), Dyadic::int(6)).unwrap();
        assert!(t.starts_with("1/2 ≈ 0.5"), "{t}");
        let t = ratio_text(Dyadic::new(3, -2), Dyadic::new(-1, 0)).unwrap();
        assert!(t.starts_with("-3/4 ≈ -0.75"), "{t}");
    }
}
