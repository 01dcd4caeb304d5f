//! QLinearConv / QLinearMatMul / QGemm: integer accumulation and requantization, as ONNX Runtime
//! 1.31's CPU kernels compute them (contract §3.4), and the proof that fusing a
//! `DQ → Conv/MatMul/Gemm → Q` group into one of them is exact.
//!
//! Verified against the ORT sources (`core/providers/cpu/quantization/qlinearconv.cc`,
//! `quantize_linear_matmul.cc`, `contrib_ops/cpu/quantization/quant_gemm.cc`, MLAS
//! `quantize.cpp` `MlasRequantizeOutput`, `convsym.cpp`, `qgemm.h`, `platform.cpp`, the x86
//! `QgemmU8S8KernelAvx2.S` / `QgemvU8S8KernelAvx2.S` / `ConvSymKernelAvx2.S` /
//! `ConvSymKernelAvx512Core.S` kernels, `intrinsics/avx2/qdwconv_avx2.cpp` and the aarch64
//! `ConvSym*KernelNeon.S`):
//!
//! * multiplier per output channel: `M = fl(fl(sx·sw[c]) / sy)`; QGemm: `fl(fl(fl(alpha·sx)·sw[c]) / sy)`;
//! * accumulator `acc = Σ (x − zx)(w − zw)` exact modulo 2^32, then `v = acc + bias` (int32; the
//!   bias's DQ scale and zero point are never read);
//! * requantization `f = fl(f32(v)·M)`; x86: `max(f, qmin − zy)` (NaN → qmin), `min(·, qmax − zy)`,
//!   `cvtps2dq` (ties to even), `+ zy`; NEON: `fcvtns` (ties to even, NaN → 0), `sqxtn`, `sqadd zy`,
//!   saturating narrow. Both are `sat(rne(f) + zy)` for finite `f`; NaN gives qmin on x86, zy on NEON;
//! * x86 without VNNI (AVX2, and AVX-512 without VNNI: same packing), u8 activations × s8
//!   weights: `vpmaddubsw` adds the raw-code products of K positions `2i` and `2i + 1` in MLAS's
//!   packed K order with int16 saturation. MLAS's K order is kernel-position-major,
//!   input-channel-minor for Conv (im2col NHWC and the ConvSym filter packing, which needs
//!   `Cin % 4 == 0` and then pairs the same channels) and natural for MatMul/Gemm (packed B and
//!   the GEMV kernel). Depthwise convolutions take kernels that widen each product (exact).
//!   s8 activations run the portable C kernel (exact) on every x86 profile modelled here;
//!   u8×u8 runs a 16-bit-widening kernel (exact). On Windows/MSVC builds SSE4.1 machines take a
//!   `pmaddubsw` u8×s8 kernel too; the `x86-sse2` profile models the GCC/Clang builds.

use crate::Isa;
use crate::profile::{Convert, Gemm};
use qdqc_exact::num::Dyadic;
use qdqc_exact::p2::{self, BiasTerm, DotProduct};
use qdqc_exact::p3::{self, Affine, Codes, Direction, Outcome, Report};
use qdqc_exact::reference::{CodeType, dequantize, quantize, quantize_real};
use qdqc_exact::{Certificate, Contract, Counterexample, Method, QParam, Verdict};
use serde::Serialize;
use std::time::Instant;

/// Which fused operator computes the group.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GemmKind {
    /// QLinearConv. `kernel_size`: the product of the spatial kernel dims; `groups`: the `group`
    /// attribute. Weight codes of a channel are in ONNX order (input channel major).
    Conv { kernel_size: usize, groups: usize },
    /// QLinearMatMul over a 2-D constant B; channel = column of B.
    MatMul,
    /// com.microsoft QGemm with a quantized output; channel = column of op(B).
    Gemm { alpha: f32 },
}

/// The int32 bias of a Conv or Gemm and its DequantizeLinear's parameters (which ORT ignores).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bias {
    pub codes: Vec<i64>,
    /// One per channel, or one for all.
    pub scales: Vec<f32>,
    pub zero_points: Vec<i64>,
    /// The float bias the unfused graph adds instead of `DQ(code)`, one per channel, when ORT
    /// made the codes from it (`weight_bias::quantized_bias`); `None` for an authored int32 DQ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub float: Option<Vec<f32>>,
}

/// A quantized Conv / MatMul / Gemm group with its constant weights.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GemmGroup {
    pub kind: GemmKind,
    pub x: QParam,
    /// The activation codes that can actually reach the op (by default the type's range).
    pub x_codes: (i64, i64),
    pub w_code: CodeType,
    /// Weight codes per output channel (each of length K).
    pub weights: Vec<Vec<i64>>,
    /// One per channel, or one for all.
    pub w_scales: Vec<f32>,
    pub w_zero_points: Vec<i64>,
    pub bias: Option<Bias>,
    pub y: QParam,
}

impl GemmGroup {
    pub fn new(kind: GemmKind, x: QParam, w_code: CodeType, weights: Vec<Vec<i64>>, w_scales: Vec<f32>, w_zero_points: Vec<i64>, y: QParam) -> GemmGroup {
        GemmGroup { kind, x, x_codes: x.code.range(), w_code, weights, w_scales, w_zero_points, bias: None, y }
    }

    pub fn with_bias(self, bias: Bias) -> GemmGroup {
        GemmGroup { bias: Some(bias), ..self }
    }

    pub fn with_x_codes(self, lo: i64, hi: i64) -> GemmGroup {
        GemmGroup { x_codes: (lo, hi), ..self }
    }

    pub fn channels(&self) -> usize {
        self.weights.len()
    }

    pub fn w_scale(&self, c: usize) -> f32 {
        per_channel(&self.w_scales, c)
    }

    pub fn w_zero_point(&self, c: usize) -> i64 {
        per_channel(&self.w_zero_points, c)
    }

    /// ORT's output multiplier for channel `c`.
    pub fn multiplier(&self, c: usize) -> f32 {
        output_multiplier(self.kind, self.x.scale, self.w_scale(c), self.y.scale)
    }

    fn bias_code(&self, c: usize) -> i64 {
        self.bias.as_ref().map_or(0, |b| b.codes[c])
    }

    /// What the unfused graph adds to channel `c`.
    fn bias_term(&self, c: usize) -> Option<BiasTerm> {
        self.bias.as_ref().map(|b| match &b.float {
            Some(values) => BiasTerm::Float(values[c]),
            None => BiasTerm::Dequantized(b.codes[c], per_channel(&b.scales, c)),
        })
    }

    fn alpha(&self) -> f32 {
        match self.kind {
            GemmKind::Gemm { alpha } => alpha,
            _ => 1.0,
        }
    }

    /// Whether ORT runs this group on a kernel that widens every product: a depthwise Conv with
    /// one weight zero point. Unequal per-channel ones take 1.31.1's generic path, im2col and the
    /// u8×s8 GEMM, whose int16 pairs saturate on x86-avx2 like any other Conv's (measured on a
    /// Zen 3: `dwsep_net_u8s8_pc_asym_pow2`'s dw1 matched this model on 20480 of 20480 outputs).
    fn depthwise(&self) -> bool {
        let one_zero_point = self.w_zero_points.iter().all(|&z| z == self.w_zero_points[0]);
        match self.kind {
            GemmKind::Conv { kernel_size, groups } => self.weights[0].len() == kernel_size && self.channels() == groups && one_zero_point,
            _ => false,
        }
    }

    /// The interval `Σ (x − zx)·d[k]` can reach over the input codes, for one channel's centred
    /// weights `d` (a Conv's padding feeds the zero point, whose term is 0).
    pub fn accumulator_range(&self, d: &[i64]) -> (i64, i64) {
        let u = (self.x_codes.0 - self.x.zero_point, self.x_codes.1 - self.x.zero_point);
        let padded = matches!(self.kind, GemmKind::Conv { .. });
        d.iter().fold((0i64, 0i64), |(lo, hi), &dk| {
            let (a, b) = (u.0 * dk, u.1 * dk);
            let (min, max) = if padded { (a.min(b).min(0), a.max(b).max(0)) } else { (a.min(b), a.max(b)) };
            (lo + min, hi + max)
        })
    }

    /// Whether the x86-avx2 u8×s8 kernel (int16 pair saturation) computes this group.
    pub fn pairs_saturate(&self, isa: Isa) -> bool {
        isa.arith().gemm == Gemm::PairSaturating && self.x.code == CodeType::U8 && self.w_code == CodeType::I8 && !self.depthwise()
    }
}

/// Row-major `[m, k]` codes as `m` channels of `k`: Conv weights, Gemm's B with `transB`.
pub fn row_channels(codes: &[i64], m: usize) -> Vec<Vec<i64>> {
    if m == 0 {
        return Vec::new();
    }
    codes.chunks(codes.len() / m).map(<[i64]>::to_vec).collect()
}

/// Row-major `[k, n]` codes as `n` channels (columns) of `k`: MatMul's B, Gemm's B.
pub fn column_channels(codes: &[i64], k: usize, n: usize) -> Vec<Vec<i64>> {
    (0..n).map(|c| (0..k).map(|r| codes[r * n + c]).collect()).collect()
}

fn per_channel<T: Copy>(v: &[T], c: usize) -> T {
    if v.len() == 1 { v[0] } else { v[c] }
}

/// `fl(sx·sw)`, or QGemm's `fl(fl(alpha·sx)·sw)`: the scale ORT's integer bias is silently on.
pub fn accumulator_scale(kind: GemmKind, sx: f32, sw: f32) -> f32 {
    match kind {
        GemmKind::Gemm { alpha } => alpha * sx * sw,
        _ => sx * sw,
    }
}

/// ORT's per-channel output multiplier: the accumulator scale divided by `sy`, in f32.
pub fn output_multiplier(kind: GemmKind, sx: f32, sw: f32, sy: f32) -> f32 {
    accumulator_scale(kind, sx, sw) / sy
}

/// `MlasRequantizeOutput` (and the ConvSym kernels' epilogue) on one int32 `v = acc + bias`.
pub fn requantize(v: i32, multiplier: f32, zy: i64, code: CodeType, isa: Isa) -> i64 {
    let f = v as f32 * multiplier;
    let (lo, hi) = code.range();
    match isa.arith().convert {
        Convert::Arm => requantize_neon(f, zy, lo, hi),
        Convert::X86 => requantize_x86(f, zy, lo, hi),
    }
}

/// `maxps(f, qmin − zy)` returns its second operand for NaN; then `minps`, `cvtps2dq`, `+ zy`.
// `clamped` is rounded inside the code range first: `as i64` is exact.
#[allow(clippy::cast_possible_truncation)]
fn requantize_x86(f: f32, zy: i64, lo: i64, hi: i64) -> i64 {
    let (min, max) = ((lo - zy) as f32, (hi - zy) as f32);
    let clamped = if f.is_nan() { min } else { f.max(min).min(max) };
    // `rne`: `round_ties_even` without the libm call (6 % of a compile's time went to `rintf`).
    qdqc_exact::reference::rne(clamped) as i64 + zy
}

/// `fcvtns` (ties to even, saturating, NaN → 0), `sqxtn` to int16, `sqadd zy`, saturating narrow.
// The model: `as i64` saturates, then the clamp to int32 is `fcvtns`'s saturation.
#[allow(clippy::cast_possible_truncation)]
fn requantize_neon(f: f32, zy: i64, lo: i64, hi: i64) -> i64 {
    let i32s = if f.is_nan() { 0 } else { (qdqc_exact::reference::rne(f) as i64).clamp(i32::MIN as i64, i32::MAX as i64) };
    let i16s = |x: i64| x.clamp(i16::MIN as i64, i16::MAX as i64);
    i16s(i16s(i32s) + zy).clamp(lo, hi)
}

/// MLAS's packed K order for one output channel: the ONNX weight index at each packed position
/// (`k` a multiple of a Conv's kernel size, which [`consistent_shapes`] checks).
pub fn mlas_k_order(kind: GemmKind, k: usize) -> impl Iterator<Item = usize> {
    let kernel_size = match kind {
        GemmKind::Conv { kernel_size, .. } => kernel_size.max(1),
        _ => 1,
    };
    // Conv: packed position `kpos·cin + ic` holds ONNX index `ic·kernel_size + kpos`.
    let cin = (k / kernel_size).max(1);
    (0..k).map(move |p| (p % cin) * kernel_size + p / cin)
}

/// The packed pairs `vpmaddubsw` adds, as ONNX weight indices (an odd K's last is alone).
fn mlas_pairs(kind: GemmKind, k: usize) -> impl Iterator<Item = (usize, Option<usize>)> {
    let mut order = mlas_k_order(kind, k);
    std::iter::from_fn(move || order.next().map(|i| (i, order.next())))
}

/// What int16 saturation loses from one raw pair sum.
fn int16_excess(raw: i64) -> i64 {
    raw - raw.clamp(i16::MIN as i64, i16::MAX as i64)
}

/// The accumulator (int32, wrapping) one output of channel `c` gets from the input codes `x`
/// (ONNX weight order), as the ISA's kernel computes it.
// The model: `as i32` is the kernel's wrapping int32 accumulator.
#[allow(clippy::cast_possible_truncation)]
pub fn accumulate(g: &GemmGroup, c: usize, x: &[i64], isa: Isa) -> i32 {
    let (w, zx, zw) = (&g.weights[c], g.x.zero_point, g.w_zero_point(c));
    let exact: i64 = x.iter().zip(w).map(|(&a, &b)| (a - zx) * (b - zw)).sum();
    if !g.pairs_saturate(isa) {
        return exact as i32;
    }
    // The kernel sums raw-code pairs with int16 saturation and corrects for the zero points in
    // exact int32: only the saturation's excess is lost.
    let raw = |i: usize| x[i] * w[i];
    let excess: i64 = mlas_pairs(g.kind, w.len()).map(|(i, j)| int16_excess(raw(i) + j.map_or(0, raw))).sum();
    (exact - excess) as i32
}

/// [`accumulate`] on x86-avx2 u8×s8 for inputs equal to the zero point everywhere but at one
/// position, in O(1) per input: the witness search evaluates tens of thousands of them per channel.
/// The int16 excess of every pair at the all-zero-point input is precomputed; only the pair
/// holding the nonzero position changes.
struct OneHotPairs<'a> {
    w: &'a [i64],
    zx: i64,
    zw: i64,
    /// Each weight index's partner in its packed pair.
    partner: Vec<Option<usize>>,
    /// The total excess when every activation is the zero point.
    base: i64,
}

impl<'a> OneHotPairs<'a> {
    fn new(g: &'a GemmGroup, c: usize) -> OneHotPairs<'a> {
        let (w, zx) = (&g.weights[c][..], g.x.zero_point);
        let mut partner = vec![None; w.len()];
        let mut base = 0;
        for (i, j) in mlas_pairs(g.kind, w.len()) {
            base += int16_excess(zx * (w[i] + j.map_or(0, |j| w[j])));
            if let Some(j) = j {
                (partner[i], partner[j]) = (Some(j), Some(i));
            }
        }
        OneHotPairs { w, zx, zw: g.w_zero_point(c), partner, base }
    }

    /// The kernel's accumulator for `x[k] = xk` and the zero point elsewhere.
    // The model: `as i32` is the kernel's wrapping int32 accumulator.
    #[allow(clippy::cast_possible_truncation)]
    fn accumulate(&self, k: usize, xk: i64) -> i32 {
        let pair = |a: i64| a * self.w[k] + self.partner[k].map_or(0, |j| self.zx * self.w[j]);
        let excess = self.base - int16_excess(pair(self.zx)) + int16_excess(pair(xk));
        ((xk - self.zx) * (self.w[k] - self.zw) - excess) as i32
    }
}

/// An adjacent pair of products that can leave int16 in the x86-avx2 u8×s8 kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PairOverflow {
    /// ONNX weight indices of the pair.
    pub k: (usize, usize),
    /// Activation codes that push the raw pair sum out of int16.
    pub x: (i64, i64),
    pub sum: i64,
}

/// Decides from the actual weights of channel `c` whether any packed pair `x₁w₁ + x₂w₂` (raw
/// codes) can leave int16 for activation codes in `x_codes` (plus the zero point, which Conv
/// padding feeds). The sum is separable, so its extremes are at the ends of the code range.
pub fn avx2_pair_overflow(g: &GemmGroup, c: usize) -> Option<PairOverflow> {
    let w = &g.weights[c];
    let mut acts = vec![g.x_codes.0, g.x_codes.1];
    if matches!(g.kind, GemmKind::Conv { .. }) {
        acts.push(g.x.zero_point);
    }
    let extreme = |wi: i64, up: bool| {
        let it = acts.iter().map(|&a| (a * wi, a));
        if up { it.max().unwrap() } else { it.min().unwrap() }
    };
    mlas_pairs(g.kind, w.len()).find_map(|(i, j)| {
        let j = j?;
        [true, false].into_iter().find_map(|up| {
            let ((pi, ai), (pj, aj)) = (extreme(w[i], up), extreme(w[j], up));
            let sum = pi + pj;
            (sum > i16::MAX as i64 || sum < i16::MIN as i64).then_some(PairOverflow { k: (i, j), x: (ai, aj), sum })
        })
    })
}

/// What a proof over `g` reads of an ISA: the float→int conversion and whether `g`'s int16 pairs
/// saturate (its accumulation); [`prove`] uses `isa` through these two only, and in its texts.
fn arithmetic(g: &GemmGroup, isa: Isa) -> (Convert, bool) {
    (isa.arith().convert, g.pairs_saturate(isa))
}

/// [`prove`] over one group on several ISAs, run once per distinct arithmetic (`arithmetic`): every fused
/// output is the same function of the codes on two ISAs with equal arithmetic, so the later one
/// takes the earlier's verdict with its own name in the texts. (`--ort-isa all` proved x86-sse2
/// and x86-avx512vnni twice: a quarter of such a compile's time.)
pub struct Prover<'a> {
    g: &'a GemmGroup,
    contract: Contract,
    proven: std::cell::RefCell<Vec<(Isa, Verdict)>>,
}

impl<'a> Prover<'a> {
    pub fn new(g: &'a GemmGroup, contract: Contract) -> Prover<'a> {
        Prover { g, contract, proven: Default::default() }
    }

    pub fn prove(&self, isa: Isa) -> Verdict {
        let shared = self.proven.borrow().iter().find(|(other, _)| arithmetic(self.g, *other) == arithmetic(self.g, isa)).cloned();
        if let Some((other, v)) = shared {
            return renamed(v, &other.to_string(), &isa.to_string());
        }
        let v = prove(self.g, isa, self.contract);
        self.proven.borrow_mut().push((isa, v.clone()));
        v
    }
}

/// `v` with every mention of the ISA `from` in its texts naming `to` instead (no profile name
/// contains another).
fn renamed(v: Verdict, from: &str, to: &str) -> Verdict {
    let r = |t: String| t.replace(from, to);
    match v {
        Verdict::Exact { mut proof } => {
            proof.detail = r(proof.detail);
            Verdict::Exact { proof }
        }
        Verdict::Refuted { mut counterexample, mut proof } => {
            proof.detail = r(proof.detail);
            counterexample.inputs = counterexample.inputs.into_iter().map(|(n, x)| (r(n), x)).collect();
            counterexample.exact = counterexample.exact.map(r);
            Verdict::Refuted { counterexample, proof }
        }
        Verdict::Unknown { reason } => Verdict::Unknown { reason: r(reason) },
    }
}

/// Proves or refutes fusing `g` into ORT's kernel on `isa` under `contract`, channel by channel.
pub fn prove(g: &GemmGroup, isa: Isa, contract: Contract) -> Verdict {
    let start = Instant::now();
    if let Err(reason) = validate(g) {
        return Verdict::Unknown { reason: format!("refused: {reason}") };
    }
    let mut unknown = None;
    let mut points = 0u64;
    for c in 0..g.channels() {
        match Channel::new(g, c, isa, contract).and_then(|ch| ch.prove()) {
            Ok(n) => points += n,
            Err(Failure::Refuted(r)) => return Verdict::Refuted { counterexample: r.0, proof: r.1 },
            Err(Failure::Unknown(reason)) => {
                unknown.get_or_insert(format!("channel {c}: {reason}"));
            }
        }
    }
    if let Some(reason) = unknown {
        return Verdict::Unknown { reason };
    }
    let p2 = if contract == Contract::Exact { "P2: the float reduction is exact in every order; " } else { "" };
    let detail = format!(
        "{} on {isa}, {:?} contract: {p2}P3 over {} channel(s), {points} accumulators in unsaturated windows",
        kind_name(g.kind),
        contract,
        g.channels()
    );
    Verdict::Exact { proof: Certificate { method: Method::P3RequantWindow, domain: points, micros: crate::elapsed_micros(start), detail } }
}

/// How often the fused kernel and a non-deterministic float path can disagree: the reachable
/// accumulators whose exact output `q = value(acc)/sy` (before rounding) lies within the float
/// path's error bound of a rounding boundary between two unsaturated codes. Only groups whose
/// float path fails P2 have one (elsewhere the float path is exact and the verdict says all).
///
/// Precisely, per output channel: the accumulators are the multiples of the channel's step in
/// the reachable range the requantization proof walks; the float path's error on `q` is bounded
/// by `δ = γ_n·S/|sy|` with `γ_n = n·u/(1 − n·u)`, `u = 2^-24`, `n = K + 5` (K products in any
/// order with or without FMA, the two DQ roundings, the bias DQ and its addition, alpha, the Q's
/// division) and `S = Σ_k max|x − zx|·|w_k − zw|·|sx·sw·alpha| + |b·sb|`, the largest sum of
/// magnitudes; the boundaries are `j + ½` for `j + zy` and `j + 1 + zy` both codes. An
/// accumulator counts when `|q − (j + ½)| ≤ δ` for one of them. `q` is affine in `acc`, so each
/// boundary's accumulators are one interval: the count costs one step per code, not per
/// accumulator (`q`'s coefficients are taken in f64, whose error is far below `δ`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NearBoundary {
    /// Reachable accumulators within `δ` of a rounding boundary, summed over channels.
    pub accumulators: u64,
    /// Reachable accumulators, summed over channels.
    pub reachable: u64,
    /// Channels with at least one such accumulator, of `channels`.
    pub affected_channels: usize,
    pub channels: usize,
    /// The largest `δ` over the channels, in output steps (LSB).
    pub max_error_lsb: f64,
}

impl std::fmt::Display for NearBoundary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} reachable accumulators (in {} of {} channels) lie within the float path's error (≤ {:.3e} LSB) of a rounding boundary: there the float path and the fused kernel may differ by 1 LSB",
            self.accumulators, self.reachable, self.affected_channels, self.channels, self.max_error_lsb
        )
    }
}

/// [`NearBoundary`] of a group, `None` when every channel's float path passes P2 (or the group
/// is not one ORT's kernel takes).
pub fn near_boundary(g: &GemmGroup) -> Option<NearBoundary> {
    validate(g).ok()?;
    // The float path does not depend on the profile; any one builds the channels.
    let channels: Vec<Channel> = (0..g.channels()).map(|c| Channel::new(g, c, Isa::X86Avx512Vnni, Contract::Real).ok()).collect::<Option<_>>()?;
    if channels.iter().all(|ch| p2::dot_product(&ch.dot_product()).is_ok()) {
        return None;
    }
    let mut out = NearBoundary { accumulators: 0, reachable: 0, affected_channels: 0, channels: channels.len(), max_error_lsb: 0.0 };
    for ch in &channels {
        let sy = ch.sy.to_f64_lossy();
        let umax = ch.u.0.unsigned_abs().max(ch.u.1.unsigned_abs()) as f64;
        let unit = ch.unit.to_f64_lossy();
        let products = ch.d.iter().map(|&d| umax * d.unsigned_abs() as f64).sum::<f64>() * unit.abs();
        let delta = ch.float_path_error(products);
        let line = Line { slope: unit / sy, offset: ch.bias_value.to_f64_lossy() / sy, zy: g.y.zero_point, codes: g.y.code.range() };
        let (near, reachable) = line.count_near(ch.acc, ch.step, delta);
        out.accumulators += near;
        out.reachable += reachable;
        out.affected_channels += usize::from(near > 0);
        out.max_error_lsb = out.max_error_lsb.max(delta);
    }
    Some(out)
}

/// `γ_n = n·u/(1 − n·u)` with `u = 2^-24`: the relative error bound of n roundings in f32.
pub(crate) fn gamma(n: usize) -> f64 {
    let nu = n as f64 * 2f64.powi(-24);
    nu / (1.0 - nu)
}

/// The reference's output before rounding as a function of the accumulator, `q = slope·acc + offset`,
/// and the codes it rounds into.
pub(crate) struct Line {
    pub slope: f64,
    pub offset: f64,
    pub zy: i64,
    pub codes: (i64, i64),
}

impl Line {
    /// `(near, reachable)`: multiples of `step` in `[lo, hi]`, and those within `delta` of a
    /// boundary between two unsaturated codes.
    pub(crate) fn count_near(&self, (lo, hi): (i64, i64), step: i64, delta: f64) -> (u64, u64) {
        // `first` and `last` are integral and `last ≥ first`: the count is exact.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let multiples = |a: f64, b: f64| -> u64 {
            let (a, b) = (a.max(lo as f64), b.min(hi as f64));
            let (first, last) = ((a / step as f64).ceil(), (b / step as f64).floor());
            if last >= first { (last - first) as u64 + 1 } else { 0 }
        };
        let reachable = multiples(lo as f64, hi as f64);
        if self.slope == 0.0 {
            return (0, reachable);
        }
        let (qmin, qmax) = self.codes;
        let mut intervals: Vec<(f64, f64)> = ((qmin - self.zy)..(qmax - self.zy))
            .map(|j| {
                let h = j as f64 + 0.5;
                let ends = [(h - delta - self.offset) / self.slope, (h + delta - self.offset) / self.slope];
                (ends[0].min(ends[1]), ends[0].max(ends[1]))
            })
            .collect();
        intervals.sort_by(|x, y| x.0.total_cmp(&y.0));
        // Intervals of neighbouring boundaries overlap when δ ≥ ½: merged, each accumulator counts once.
        let mut merged: Vec<(f64, f64)> = Vec::new();
        for (a, b) in intervals {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let near: u64 = merged.into_iter().map(|(a, b)| multiples(a, b)).sum();
        (near.min(reachable), reachable)
    }
}

fn kind_name(kind: GemmKind) -> &'static str {
    match kind {
        GemmKind::Conv { .. } => "QLinearConv",
        GemmKind::MatMul => "QLinearMatMul",
        GemmKind::Gemm { .. } => "QGemm",
    }
}

/// A precondition of ORT's kernels, named for reports.
pub type Condition = (&'static str, fn(&GemmGroup) -> Result<(), String>);

/// What ORT's kernels need of a group whatever its scales' values (contract §3.4, §3.10).
/// They are the same on every modelled ISA: the kernels are registered for the same types
/// everywhere, and only their arithmetic differs. Unequal per-channel Conv weight zero points
/// are not among them: QLinearConv of 1.31.1 honours each channel's zero point (1.25
/// ORT_ENFORCEd equal ones; contract §3.4, docs/ort-1.31-notes.md, measured by
/// tests/ort_requant.rs).
pub const KERNEL_CONDITIONS: [Condition; 5] = [
    ("code types", kernel_types),
    ("shapes", consistent_shapes),
    ("codes in range", codes_in_range),
    ("finite scales", finite_scales),
    ("int32 bias", bias_codes),
];

/// ORT reinterprets the bias with the accumulator's scale. The `real`-contract synthesis
/// replaces this condition by its own proof against the bias's actual value.
pub const BIAS_SCALE: Condition = ("bias scale", bias_on_accumulator_scale);

/// Why ORT cannot take the group as it is, or would silently reinterpret it.
fn validate(g: &GemmGroup) -> Result<(), String> {
    check(g, KERNEL_CONDITIONS.iter().chain([&BIAS_SCALE]))
}

/// The first condition `g` fails, with its name.
pub fn check<'a>(g: &GemmGroup, conditions: impl IntoIterator<Item = &'a Condition>) -> Result<(), String> {
    conditions.into_iter().try_for_each(|(name, holds)| holds(g).map_err(|why| format!("{name}: {why}")))
}

/// The CPU kernels exist for u8×u8, u8×s8 and s8×s8, with the activation's type out.
pub fn kernel_types(g: &GemmGroup) -> Result<(), String> {
    use CodeType::{I8, U8};
    let (x, w, y) = (g.x.code, g.w_code, g.y.code);
    if !matches!((x, w), (U8, U8) | (U8, I8) | (I8, I8)) || y != x {
        return Err(format!("{} has no CPU kernel for x {}, w {}, y {}", kind_name(g.kind), x.name(), w.name(), y.name()));
    }
    Ok(())
}

/// Every channel has K weights, parameters are per tensor or per channel, and a Conv's K is its
/// input channels per group times its kernel size.
pub fn consistent_shapes(g: &GemmGroup) -> Result<(), String> {
    let k = g.weights.first().map_or(0, Vec::len);
    if k == 0 || g.weights.iter().any(|row| row.len() != k) {
        return Err("every channel needs the same, nonzero number of weights".into());
    }
    let c = g.channels();
    for (name, len) in [("weight scales", g.w_scales.len()), ("weight zero points", g.w_zero_points.len())] {
        if len != 1 && len != c {
            return Err(format!("{len} {name} for {c} channels"));
        }
    }
    if let GemmKind::Conv { kernel_size, groups } = g.kind
        && (kernel_size == 0 || !k.is_multiple_of(kernel_size) || groups == 0 || !c.is_multiple_of(groups))
    {
        return Err(format!("inconsistent Conv shape: K {k}, kernel size {kernel_size}, {groups} group(s), {c} channels"));
    }
    Ok(())
}

/// Zero points, weights and the reachable activation codes are codes of their types.
pub fn codes_in_range(g: &GemmGroup) -> Result<(), String> {
    let (x, w, y) = (g.x.code, g.w_code, g.y.code);
    in_range("activation zero point", &[g.x.zero_point], x)?;
    in_range("output zero point", &[g.y.zero_point], y)?;
    in_range("weight zero point", &g.w_zero_points, w)?;
    in_range("reachable activation code", &[g.x_codes.0, g.x_codes.1], x)?;
    if g.x_codes.0 > g.x_codes.1 {
        return Err("empty reachable activation range".into());
    }
    g.weights.iter().try_for_each(|row| in_range("weight code", row, w))
}

pub fn finite_scales(g: &GemmGroup) -> Result<(), String> {
    if let Some(s) = g.w_scales.iter().chain([&g.x.scale, &g.y.scale, &g.alpha()]).find(|s| !s.is_finite()) {
        return Err(format!("non-finite scale or alpha {s}"));
    }
    if g.y.scale == 0.0 {
        return Err("output scale 0".into());
    }
    Ok(())
}

fn in_range(what: &str, codes: &[i64], t: CodeType) -> Result<(), String> {
    let (lo, hi) = t.range();
    match codes.iter().find(|&&q| q < lo || q > hi) {
        Some(q) => Err(format!("{what} {q} outside {}", t.name())),
        None => Ok(()),
    }
}

/// ORT adds the int32 bias codes to the accumulator as they are: one per channel, and a zero
/// point it never reads, so it must be 0.
pub fn bias_codes(g: &GemmGroup) -> Result<(), String> {
    let Some(b) = &g.bias else { return Ok(()) };
    if g.kind == GemmKind::MatMul {
        return Err("QLinearMatMul has no bias input".into());
    }
    let c = g.channels();
    if b.codes.len() != c || ![1, c].contains(&b.scales.len()) || ![1, c].contains(&b.zero_points.len()) {
        return Err("bias shapes do not match the channels".into());
    }
    in_range("bias code", &b.codes, CodeType::I32)?;
    match b.zero_points.iter().find(|&&z| z != 0) {
        Some(z) => Err(format!("bias zero point {z} ≠ 0 (ORT ignores it)")),
        None => Ok(()),
    }
}

/// The bias DQ must have exactly the accumulator's scale, bit for bit: ORT never reads it.
pub fn bias_on_accumulator_scale(g: &GemmGroup) -> Result<(), String> {
    let Some(b) = &g.bias else { return Ok(()) };
    for ch in 0..g.channels() {
        let (sb, acc) = (per_channel(&b.scales, ch), accumulator_scale(g.kind, g.x.scale, g.w_scale(ch)));
        if sb.to_bits() != acc.to_bits() {
            return Err(format!("channel {ch}: bias scale {sb:e} ≠ fl(sx·sw) = {acc:e} (ORT ignores the bias scale)"));
        }
    }
    Ok(())
}

enum Failure {
    Refuted(Box<(Counterexample, Certificate)>),
    Unknown(String),
}

impl Failure {
    fn reason(&self) -> String {
        match self {
            Failure::Refuted(r) => format!("refuted: {}", r.0),
            Failure::Unknown(reason) => reason.clone(),
        }
    }

    /// The refutation, if this is one, with `note` added to its certificate's detail.
    fn refuted(self, note: &str) -> Option<Failure> {
        match self {
            Failure::Refuted(mut r) => {
                r.1.detail.push_str(note);
                Some(Failure::Refuted(r))
            }
            Failure::Unknown(_) => None,
        }
    }
}

fn unknown<T>(reason: impl Into<String>) -> Result<T, Failure> {
    Err(Failure::Unknown(reason.into()))
}

/// One output channel: its accumulator range and the functions P3 compares.
struct Channel<'a> {
    g: &'a GemmGroup,
    c: usize,
    isa: Isa,
    contract: Contract,
    /// `w − zw`, ONNX order.
    d: Vec<i64>,
    /// Reachable `x − zx` (padding's 0 is added for Conv where it matters).
    u: (i64, i64),
    acc: (i64, i64),
    /// gcd of the nonzero `d`: every accumulator is a multiple of it.
    step: i64,
    bias: i64,
    m: f32,
    /// `alpha·sx·sw` and `b·sb`, exactly.
    unit: Dyadic,
    bias_value: Dyadic,
    sy: Dyadic,
    /// The same value as integers on one grid, for fast evaluation.
    numerator: Numerator,
    /// `real`: the exact quotient by `sy` as an affine rounding of `acc`, when it fits i128.
    real_form: Option<Affine>,
}

/// `acc·unit + b·sb = (a·acc + b)·2^exp`.
#[derive(Clone, Copy, Debug)]
struct Numerator {
    a: i128,
    b: i128,
    exp: i32,
}

impl Numerator {
    fn new(unit: Dyadic, bias: Dyadic) -> Option<Numerator> {
        let exp = match (unit.is_zero(), bias.is_zero()) {
            (false, false) => unit.exp.min(bias.exp),
            (true, false) => bias.exp,
            _ => unit.exp,
        };
        let on_grid = |d: Dyadic| if d.is_zero() { Some(0) } else { shl(d.mant, d.exp - exp) };
        Some(Numerator { a: on_grid(unit)?, b: on_grid(bias)?, exp })
    }

    /// The value at `acc` as an f32, exact when P2 holds (then `|a·acc + b| ≤ 2^24` and `2^exp`
    /// is normal, so the f64 product and the conversion are exact).
    #[allow(clippy::cast_possible_truncation)] // Exact under P2 (above); otherwise f32 rounding is the value meant.
    fn f32_at(&self, acc: i64) -> f32 {
        ((self.a * acc as i128 + self.b) as f64 * 2f64.powi(self.exp)) as f32
    }

    /// `value / den` as an affine rounding of `acc`.
    fn over(&self, den: Dyadic) -> Option<Affine> {
        let (a, b, den) = if den.mant < 0 { (-self.a, -self.b, -den) } else { (self.a, self.b, den) };
        affine(a, b, Dyadic::new(1, self.exp), den)
    }
}

impl<'a> Channel<'a> {
    fn new(g: &'a GemmGroup, c: usize, isa: Isa, contract: Contract) -> Result<Channel<'a>, Failure> {
        let zw = g.w_zero_point(c);
        let d: Vec<i64> = g.weights[c].iter().map(|&w| w - zw).collect();
        let u = (g.x_codes.0 - g.x.zero_point, g.x_codes.1 - g.x.zero_point);
        let acc = g.accumulator_range(&d);
        let step = d.iter().fold(0i64, |a, &b| gcd(a, b.abs())).max(1);
        let bias = g.bias_code(c);
        if acc.0 + bias < i32::MIN as i64 || acc.1 + bias > i32::MAX as i64 {
            return unknown(format!("acc + bias can reach [{}, {}] and wrap in int32", acc.0 + bias, acc.1 + bias));
        }
        let exact = |s: f32| Dyadic::from_f32(s).ok_or(Failure::Unknown(format!("non-finite scale {s}")));
        let unit = exact(g.x.scale)?.checked_mul(exact(g.w_scale(c))?).and_then(|u| u.checked_mul(Dyadic::from_f32(g.alpha())?));
        let bias_value = match g.bias_term(c) {
            Some(BiasTerm::Dequantized(code, sb)) => Dyadic::int(code).checked_mul(exact(sb)?),
            Some(BiasTerm::Float(b)) => Some(exact(b)?),
            None => Some(Dyadic::ZERO),
        };
        let (Some(unit), Some(bias_value)) = (unit, bias_value) else { return unknown("exact scale products overflow") };
        let Some(numerator) = Numerator::new(unit, bias_value) else { return unknown("exact scale products overflow") };
        let sy = exact(g.y.scale)?;
        let real_form = numerator.over(sy);
        Ok(Channel { g, c, isa, contract, d, u, acc, step, bias, m: g.multiplier(c), unit, bias_value, sy, numerator, real_form })
    }

    /// Number of accumulators checked, or why not exact.
    fn prove(&self) -> Result<u64, Failure> {
        let overflow = self.g.pairs_saturate(self.isa).then(|| avx2_pair_overflow(self.g, self.c)).flatten();
        if self.contract == Contract::Exact
            && let Err(reason) = p2::dot_product(&self.dot_product())
        {
            // Without P2 the unfused output is unique only where the float path's error
            // cannot cross a rounding boundary: a saturating pair is refuted on such inputs.
            let saturated = || {
                let note = "; P2 fails, but the float path's error bound leaves one unfused output for this input in every order";
                overflow.and_then(|ov| self.pair_overflow_witness(ov, |x, acc| self.bounded_reference(x, acc)).refuted(note))
            };
            return Err(self.single_term_witness().or_else(saturated).unwrap_or(Failure::Unknown(format!("P2: {reason}"))));
        }
        if let Some(ov) = overflow {
            return Err(self.pair_overflow_witness(ov, |_, acc| Some(self.reference(acc))));
        }
        self.p3()
    }

    fn dot_product(&self) -> DotProduct<'_> {
        DotProduct {
            x_scale: self.g.x.scale,
            x_zero_point: self.g.x.zero_point,
            x_codes: self.g.x_codes,
            w_scale: self.g.w_scale(self.c),
            w_zero_point: self.g.w_zero_point(self.c),
            weights: &self.g.weights[self.c],
            alpha: self.g.alpha(),
            bias: self.g.bias_term(self.c),
        }
    }

    fn y(&self) -> QParam {
        self.g.y
    }

    /// The fused kernel on an accumulator that it computed exactly.
    // The model: the kernel adds the bias in int32 (`new` refuses channels where that wraps).
    #[allow(clippy::cast_possible_truncation)]
    fn kernel(&self, acc: i64) -> i64 {
        requantize((acc + self.bias) as i32, self.m, self.y().zero_point, self.y().code, self.isa)
    }

    /// The exact value `acc·alpha·sx·sw + b·sb` the unfused reduction computes (under P2 it is an f32).
    fn value(&self, acc: i64) -> Option<Dyadic> {
        Dyadic::int(acc).checked_mul(self.unit)?.checked_add(self.bias_value)
    }

    /// The unfused graph's output code for an accumulator: `real` rounds the exact quotient;
    /// `exact` divides the (P2-exact) f32 value by `sy` in f32, as the Q node does.
    fn reference(&self, acc: i64) -> i64 {
        let y = self.y();
        match self.contract {
            Contract::Real => self.real_reference(acc),
            Contract::Exact => quantize(self.numerator.f32_at(acc), y.scale, y.zero_point, y.code),
        }
    }

    fn real_reference(&self, acc: i64) -> i64 {
        let (y, (lo, hi)) = (self.y(), self.y().code.range());
        if let Some(v) = self.real_form.and_then(|f| f.round(acc)) {
            return i64::try_from((v + i128::from(y.zero_point)).clamp(i128::from(lo), i128::from(hi))).expect("clamped to the code range");
        }
        // Beyond i128 the quotient saturates: only its sign matters.
        let negative = (acc < 0) ^ (self.unit.mant < 0) ^ (y.scale < 0.0);
        let saturated = if negative { lo } else { hi };
        self.value(acc).and_then(|v| quantize_real(v, y.scale, y.zero_point, y.code)).unwrap_or(saturated)
    }

    fn p3(&self) -> Result<u64, Failure> {
        let (lo, hi) = (div_ceil(self.acc.0, self.step), self.acc.1.div_euclid(self.step));
        let (qmin, qmax) = self.y().code.range();
        let codes = Codes { qmin, qmax, direction: Direction::of_sign(self.m.is_sign_negative()) };
        let mut witness = None;
        let order = reach_order(&self.d, &[]);
        let mut accept = |n: i64| {
            witness = self.reach(n * self.step, &order);
            witness.is_some()
        };
        let mut report = p3::check((lo, hi), codes, |n| self.kernel(n * self.step), |n| self.reference(n * self.step), &mut accept);
        if matches!(report.outcome, Outcome::Unknown { .. })
            && report.points == 0
            && report.window.is_some()
            && let Some((k, r)) = self.affine_forms()
        {
            report = p3::check_affine((lo, hi), (qmin, qmax, self.y().zero_point), k, r, &mut accept);
        }
        match report.outcome {
            Outcome::Exact => Ok(report.points),
            Outcome::Unknown { reason } => unknown(format!("P3: {reason}")),
            Outcome::Refuted { first, differing } => {
                let acc = first.at * self.step;
                let x = witness.expect("accepted mismatches have a witness");
                debug_assert_eq!(self.kernel_on(&x), first.kernel);
                Err(self.refuted(acc, &x, (first.reference, first.kernel), differing, &report))
            }
        }
    }

    /// The kernel's output for one concrete input vector, modelling the ISA's accumulation.
    // The model: ORT's bias is an int32 tensor, added to the int32 accumulator with wrap.
    #[allow(clippy::cast_possible_truncation)]
    fn kernel_on(&self, x: &[i64]) -> i64 {
        let acc = accumulate(self.g, self.c, x, self.isa);
        requantize(acc.wrapping_add(self.bias as i32), self.m, self.y().zero_point, self.y().code, self.isa)
    }

    /// Activation codes (ONNX order) whose accumulator is `target`, found greedily (largest
    /// weights first, steps toward zero, then to nearest); `None` if neither reaches it.
    fn reach(&self, target: i64, order: &[usize]) -> Option<Vec<i64>> {
        reach(&self.d, self.u, target, &[], order).map(|u| u.iter().map(|&v| v + self.g.x.zero_point).collect())
    }

    fn refuted(&self, acc: i64, x: &[i64], (unfused, fused): (i64, i64), differing: u64, report: &Report) -> Failure {
        let detail = format!("{} channel {}: accumulators {:?} (window {:?})", kind_name(self.g.kind), self.c, self.acc, report.window);
        let proof = Certificate { method: Method::P3RequantWindow, domain: report.points, micros: report.micros, detail };
        Failure::Refuted(Box::new((self.counterexample(acc, x, (unfused, fused), differing), proof)))
    }

    fn counterexample(&self, acc: i64, x: &[i64], (unfused, fused): (i64, i64), differing: u64) -> Counterexample {
        let default = self.u.0.max(0).min(self.u.1) + self.g.x.zero_point;
        let mut inputs = vec![
            ("channel".to_string(), i64::try_from(self.c).expect("a channel index is a slice index, below i64::MAX")),
            ("acc".to_string(), acc),
            ("x[*]".to_string(), default),
        ];
        inputs.extend(x.iter().enumerate().filter(|&(_, &v)| v != default).map(|(k, &v)| (format!("x[{k}]"), v)));
        let exact = self.value(acc).zip(Dyadic::from_f32(self.y().scale)).map(|(v, s)| rational_text(v, s));
        Counterexample { inputs, unfused, fused, exact, differing }
    }

    /// When P2 fails the unfused reduction has no unique value in general, but an input with a
    /// single nonzero product has a unique code where its two evaluations, `fl(DQ(x)·DQ(w) + b)`
    /// (an FMA) and `fl(fl(DQ(x)·DQ(w)) + b)`, quantize alike (the zero terms add exactly).
    /// Searches those inputs for a difference.
    /// Every candidate is a few float operations: the dequantized activations are tabulated once,
    /// and the kernel's accumulator of a one-hot input needs no input vector.
    // The model: ORT's bias is an int32 tensor, added to the int32 accumulator with wrap.
    #[allow(clippy::cast_possible_truncation)]
    fn single_term_witness(&self) -> Option<Failure> {
        let (g, y) = (self.g, self.y());
        if self.u.0 > 0 || self.u.1 < 0 || g.alpha() != 1.0 {
            return None; // the other terms cannot be made zero, or alpha adds a rounding
        }
        let (sw, zx, zw) = (g.w_scale(self.c), g.x.zero_point, g.w_zero_point(self.c));
        let bias_f = match g.bias_term(self.c) {
            Some(BiasTerm::Dequantized(code, sb)) => dequantize(code, sb, 0),
            Some(BiasTerm::Float(b)) => b,
            None => 0.0,
        };
        let activations: Vec<(i64, f32)> = (g.x_codes.0..=g.x_codes.1).map(|x| (x, dequantize(x, g.x.scale, zx))).collect();
        let one_hot = g.pairs_saturate(self.isa).then(|| OneHotPairs::new(g, self.c));
        let fused = |k: usize, xk: i64| match &one_hot {
            Some(pairs) => requantize(pairs.accumulate(k, xk).wrapping_add(self.bias as i32), self.m, y.zero_point, y.code, self.isa),
            None => self.kernel((xk - zx) * self.d[k]),
        };
        let mut seen = std::collections::HashSet::new();
        let mut best: Option<(u64, i64, usize, i64, i64)> = None;
        let mut differing = 0u64;
        for (k, &dk) in self.d.iter().enumerate().filter(|&(_, &dk)| dk != 0 && seen.insert(dk)) {
            let b = dequantize(g.weights[self.c][k], sw, zw);
            for &(xk, a) in &activations {
                let unfused = quantize(a * b + bias_f, y.scale, y.zero_point, y.code);
                if quantize(a.mul_add(b, bias_f), y.scale, y.zero_point, y.code) != unfused {
                    continue; // an FMA gives another code: no unique unfused result
                }
                let fused = fused(k, xk);
                if unfused != fused {
                    differing += 1;
                    let acc = (xk - zx) * dk;
                    if best.is_none_or(|b| (acc.unsigned_abs(), acc < 0) < (b.0, b.1 < 0)) {
                        best = Some((acc.unsigned_abs(), acc, k, unfused, fused));
                    }
                }
            }
        }
        let (_, acc, k, unfused, fused) = best?;
        let mut x = vec![zx; self.d.len()];
        x[k] = zx + acc / self.d[k];
        let detail = format!("P2 fails; an input with one nonzero product has a unique code: channel {}", self.c);
        let proof = Certificate { method: Method::P2Representable, domain: differing, micros: 0, detail };
        Some(Failure::Refuted(Box::new((self.counterexample(acc, &x, (unfused, fused), differing), proof))))
    }

    /// A pair that leaves int16 is refuted with a concrete input whose output changes: the pair
    /// at its overflowing codes, the other activations steering the true accumulator through the
    /// reference's unsaturated window. Unknown if no such input is found.
    ///
    /// `reference(x, acc)` is the unfused output for input `x` with accumulator `acc`, `None`
    /// where it is not unique (then the input is not a witness).
    fn pair_overflow_witness(&self, ov: PairOverflow, reference: impl Fn(&[i64], i64) -> Option<i64>) -> Failure {
        let why = format!(
            "x86-avx2 u8×s8: w[{}]={} and w[{}]={} with x=({}, {}) sum to {} outside int16",
            ov.k.0, self.g.weights[self.c][ov.k.0], ov.k.1, self.g.weights[self.c][ov.k.1], ov.x.0, ov.x.1, ov.sum
        );
        let zx = self.g.x.zero_point;
        let reachable = |a: i64| (self.g.x_codes.0..=self.g.x_codes.1).contains(&a);
        if !reachable(ov.x.0) || !reachable(ov.x.1) {
            return Failure::Unknown(format!("{why} (through padding)"));
        }
        let fixed = [(ov.k.0, ov.x.0 - zx), (ov.k.1, ov.x.1 - zx)];
        let order = reach_order(&self.d, &fixed);
        for target in self.reference_window_samples() {
            let Some(u) = reach(&self.d, self.u, target, &fixed, &order) else { continue };
            let x: Vec<i64> = u.iter().map(|&v| v + zx).collect();
            let acc: i64 = u.iter().zip(&self.d).map(|(a, b)| a * b).sum();
            let Some(unfused) = reference(&x, acc) else { continue };
            let fused = self.kernel_on(&x);
            if unfused != fused {
                let proof = Certificate { method: Method::P3RequantWindow, domain: 1, micros: 0, detail: why };
                return Failure::Refuted(Box::new((self.counterexample(acc, &x, (unfused, fused), 1), proof)));
            }
        }
        Failure::Unknown(format!("{why}; no input found where the output changes"))
    }

    /// The float path's error bound on `q = value/sy`, in output steps, for products whose
    /// magnitudes sum to `products`: `γ_{K+5}·(products + |b·sb|)/|sy|` ([`near_boundary`]).
    fn float_path_error(&self, products: f64) -> f64 {
        gamma(self.d.len() + 5) * (products + self.bias_value.to_f64_lossy().abs()) / self.sy.to_f64_lossy().abs()
    }

    /// The unfused output code for input `x` (accumulator `acc`) when P2 fails, if every
    /// evaluation order gives it: the float path computes `q = value/sy` with K + 5 roundings
    /// (as in [`near_boundary`]), so it lies within `δ = γ_{K+5}·S_x/|sy|` of the exact `q`, where
    /// `S_x = Σ_k |x_k − zx|·|w_k − zw|·|sx·sw·alpha| + |b·sb|` is this input's sum of magnitudes.
    /// When `[q − δ, q + δ]` (widened for the f64 evaluation of `q`) rounds to one code, that code
    /// is the output of every order; otherwise `None`. Subnormal scale products are left out (the
    /// relative bound does not cover underflow).
    // The rounded value saturates into i64 and is then clamped to the code range: nothing the
    // clamp keeps is lost.
    #[allow(clippy::cast_possible_truncation)]
    fn bounded_reference(&self, x: &[i64], acc: i64) -> Option<i64> {
        let unit = self.unit.to_f64_lossy().abs();
        if unit < f64::from(f32::MIN_POSITIVE) * 2f64.powi(24) {
            return None;
        }
        let zx = self.g.x.zero_point;
        let magnitude: f64 = x.iter().zip(&self.d).map(|(&xk, &dk)| ((xk - zx) * dk).unsigned_abs() as f64).sum::<f64>() * unit;
        let sy = self.sy.to_f64_lossy();
        let q = self.value(acc)?.to_f64_lossy() / sy;
        let delta = self.float_path_error(magnitude);
        let slack = delta + (q.abs() + 1.0) * 2f64.powi(-40);
        let y = self.y();
        let (lo, hi) = y.code.range();
        let code = |v: f64| (v.round_ties_even() as i64).saturating_add(y.zero_point).clamp(lo, hi);
        let (a, b) = (code(q - slack), code(q + slack));
        (q.is_finite() && a == b).then_some(a)
    }

    /// Accumulators spread over the reachable part of the reference's unsaturated window.
    fn reference_window_samples(&self) -> Vec<i64> {
        let (qmin, qmax) = self.y().code.range();
        let sign = if self.m.is_sign_negative() { -1 } else { 1 };
        let r = |a: i64| self.reference(sign * a);
        let (lo, hi) = if sign > 0 { self.acc } else { (-self.acc.1, -self.acc.0) };
        let a = p3::first_true(lo, hi, |n| r(n) > qmin).unwrap_or(lo);
        let b = p3::first_true(lo, hi, |n| r(n) >= qmax).unwrap_or(hi);
        let n = 64i64;
        (0..=n).map(|i| sign * (a + (b - a) * i / n)).collect()
    }

    /// Both sides as affine roundings `rne((a·n + b)/d)`, when the kernel's float product cannot
    /// round over the window and the reference's division is exact (`real`, or `sy` a power of
    /// two under `exact`): lets P3 count wide windows with floor sums.
    fn affine_forms(&self) -> Option<(Affine, Affine)> {
        if self.m.is_sign_negative() || self.sy.mant < 0 || (self.unit.mant < 0) {
            return None;
        }
        let m = Dyadic::from_f32(self.m)?;
        let vmax = (self.acc.0 + self.bias).unsigned_abs().max((self.acc.1 + self.bias).unsigned_abs()) as u128;
        if vmax > 1 << 24 || vmax * m.mant.unsigned_abs() > 1 << 24 || m.exp < -126 {
            return None; // f32(v)·M may round
        }
        let kernel = affine(self.step as i128, self.bias as i128, m, Dyadic::int(1))?;
        if self.contract == Contract::Exact && (self.sy.mant != 1 || self.numerator.exp - self.sy.exp < -126) {
            return None; // fl(v/sy) may round
        }
        let per_acc = self.real_form?;
        let reference = Affine { a: per_acc.a.checked_mul(self.step as i128)?, ..per_acc };
        Some((kernel, reference))
    }

    /// The f32 values nearest the exact ratio `unit/sy`, nearest first: the f64 quotient (off by
    /// one rounding) and its neighbours, normal and of the ratio's sign.
    // The f32 nearest the exact ratio: rounding is what this cast is for.
    #[allow(clippy::cast_possible_truncation)]
    fn multiplier_candidates(&self) -> impl Iterator<Item = f32> {
        let nearest = (self.unit.to_f64_lossy() / self.sy.to_f64_lossy()) as f32;
        let steps = std::iter::once(0).chain((1..=NEIGHBOURS).flat_map(|i| [i, -i]));
        steps
            .map(move |i| f32::from_bits(nearest.to_bits().wrapping_add_signed(i)))
            .filter(move |m| m.is_normal() && m.is_sign_negative() == nearest.is_sign_negative())
    }

    /// P3 for ORT's kernel with multiplier `m` (the channel's accumulation, bias codes and
    /// output parameters) against the `real` reference, stopping at the first difference. Both
    /// are monotone in the direction of `m`'s sign, which is the ratio's.
    // The model: the kernel adds the bias in int32 (`new` refuses channels where that wraps).
    #[allow(clippy::cast_possible_truncation)]
    fn agrees_with(&self, m: f32) -> Result<u64, String> {
        let (lo, hi) = (div_ceil(self.acc.0, self.step), self.acc.1.div_euclid(self.step));
        let y = self.y();
        let (qmin, qmax) = y.code.range();
        let codes = Codes { qmin, qmax, direction: Direction::of_sign(m.is_sign_negative()) };
        let kernel = |n: i64| requantize((n * self.step + self.bias) as i32, m, y.zero_point, y.code, self.isa);
        p3::agree((lo, hi), codes, kernel, |n| self.real_reference(n * self.step)).map_err(|why| format!("{}: {why}", self.isa))
    }
}

/// `(a·n + b)·num/den` as `rne((A·n + B)/D)`, with `num`, `den` dyadics and `den > 0`.
fn affine(a: i128, b: i128, num: Dyadic, den: Dyadic) -> Option<Affine> {
    let k = num.exp - den.exp;
    let (a, b) = (a.checked_mul(num.mant)?, b.checked_mul(num.mant)?);
    if k >= 0 { Some(Affine { a: shl(a, k)?, b: shl(b, k)?, d: den.mant }) } else { Some(Affine { a, b, d: shl(den.mant, -k)? }) }
}

/// `x·2^k` for `0 ≤ k`, `None` on overflow.
fn shl(x: i128, k: i32) -> Option<i128> {
    if !(0..126).contains(&k) {
        return None;
    }
    x.checked_mul(1i128 << k)
}

/// The free positions of a greedy [`reach`]: nonzero weights not `fixed`, largest first.
pub(crate) fn reach_order(d: &[i64], fixed: &[(usize, i64)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..d.len()).filter(|k| d[*k] != 0 && fixed.iter().all(|f| f.0 != *k)).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(d[k].abs()));
    order
}

/// Greedy: returns `u` (activation minus zero point) with `Σ u·d = target`, `u ∈ [lo, hi]`, the
/// `fixed` positions pinned, the positions of `order` (from [`reach_order`]) set in turn, the
/// rest at the value nearest 0.
pub(crate) fn reach(d: &[i64], (lo, hi): (i64, i64), target: i64, fixed: &[(usize, i64)], order: &[usize]) -> Option<Vec<i64>> {
    let start = 0i64.clamp(lo, hi);
    [false, true].into_iter().find_map(|nearest| {
        let mut u = vec![start; d.len()];
        for &(k, v) in fixed {
            u[k] = v;
        }
        let mut sum: i64 = u.iter().zip(d).map(|(a, b)| a * b).sum();
        for &k in order {
            let rem = target - sum;
            let q = if nearest { nearest_quotient(rem, d[k]) } else { rem / d[k] };
            let v = (start + q).clamp(lo, hi);
            sum += (v - start) * d[k];
            u[k] = v;
        }
        (sum == target).then_some(u)
    })
}

/// `rem / d` rounded to the nearest integer (halves up), `d ≠ 0`.
fn nearest_quotient(rem: i64, d: i64) -> i64 {
    let (r, d) = if d < 0 { (-rem, -d) } else { (rem, d) };
    (2 * r + d).div_euclid(2 * d)
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn div_ceil(a: i64, b: i64) -> i64 {
    -((-a).div_euclid(b))
}

fn gcd128(a: i128, b: i128) -> i128 {
    if b == 0 { a.max(1) } else { gcd128(b, a % b) }
}

/// `num/den` as a reduced fraction with its decimal value.
pub fn rational_text(num: Dyadic, den: Dyadic) -> String {
    let approx = num.to_f64_lossy() / den.to_f64_lossy();
    let k = num.exp - den.exp;
    let (mut p, mut q) = (num.mant, den.mant);
    if q < 0 {
        p = -p;
        q = -q;
    }
    let fits = if k >= 0 { shl(p, k).map(|p| (p, q)) } else { shl(q, -k).map(|q| (p, q)) };
    match fits {
        Some((p, q)) => {
            let g = gcd128(p.abs(), q);
            format!("{}/{} ≈ {approx:.9e}", p / g, q / g)
        }
        None => format!("{p}·2^{k}/{q} ≈ {approx:.9e}"),
    }
}

/// A `real`-contract parameterisation of a group for ORT's kernel, for when the model's own
/// scales are refuted. With `x_scale = y_scale = 1` (and QGemm's `alpha = 1`) and
/// `w_scale[c] = M'[c]`, ORT's multiplier `fl(fl(fl(1·1)·M')/1)` is `M'` itself: every normal
/// f32 is a realisable multiplier, per channel. Zero points, weights and bias codes stay: the
/// kernel adds the bias codes raw whatever the scales, so the proof compares it with the bias's
/// actual value.
#[derive(Clone, Debug, PartialEq)]
pub struct Synthesis {
    /// `M'[c]`, one per output channel.
    pub w_scales: Vec<f32>,
    /// Per ISA: P3 over every channel against the exact value of the model's own parameters.
    pub proofs: Vec<(Isa, Certificate)>,
}

/// f32 neighbours of the f64 ratio tried on each side: its rounding is off by at most one, and
/// a multiplier a few ulps away can still dodge the boundaries the nearest one crosses.
const NEIGHBOURS: i32 = 4;

/// Finds, channel by channel, the f32 multiplier nearest the exact ratio `alpha·sx·sw[c]/sy` that
/// makes ORT's kernel equal `sat(rne(v/sy) + zy)` for the exact value
/// `v = alpha·acc·sx·sw[c] + b·sb` on every reachable accumulator and every ISA of `isas` (P3,
/// each window enumerated in exact arithmetic). `Err` says why no parameterisation was proven.
pub fn synthesize(g: &GemmGroup, isas: &[Isa]) -> Result<Synthesis, String> {
    let start = Instant::now();
    check(g, &KERNEL_CONDITIONS)?;
    let mut w_scales = Vec::with_capacity(g.channels());
    let mut points = vec![0u64; isas.len()];
    for c in 0..g.channels() {
        let channels = isas.iter().map(|&isa| Channel::new(g, c, isa, Contract::Real)).collect::<Result<Vec<_>, _>>();
        let (m, counts) = channels.map_err(|f| f.reason()).and_then(|chs| synthesize_channel(&chs)).map_err(|why| format!("channel {c}: {why}"))?;
        w_scales.push(m);
        points.iter_mut().zip(counts).for_each(|(total, n)| *total += n);
    }
    let micros = crate::elapsed_micros(start);
    let alpha = if matches!(g.kind, GemmKind::Gemm { .. }) { ", alpha = 1" } else { "" };
    let bits: Vec<String> = w_scales.iter().map(|m| format!("0x{:08x}", m.to_bits())).collect();
    let proofs = isas
        .iter()
        .zip(points)
        .map(|(&isa, n)| {
            let detail = format!(
                "{} on {isa}, real contract, synthesized x_scale = y_scale = 1{alpha}, w_scale = [{}]: ORT's multiplier is w_scale itself; P3 against the exact value over {} channel(s), {n} accumulators",
                kind_name(g.kind), bits.join(", "), g.channels()
            );
            (isa, Certificate { method: Method::P3RequantWindow, domain: n, micros, detail })
        })
        .collect();
    Ok(Synthesis { w_scales, proofs })
}

/// The first candidate multiplier every ISA's kernel agrees with, and each ISA's point count.
fn synthesize_channel(channels: &[Channel]) -> Result<(f32, Vec<u64>), String> {
    let Some(first) = channels.first() else { return Err("no ISA selected".into()) };
    if let Some(ch) = channels.iter().find(|ch| ch.g.pairs_saturate(ch.isa) && avx2_pair_overflow(ch.g, ch.c).is_some()) {
        return Err(format!("{}: int16 pairs saturate whatever the scales", ch.isa));
    }
    let mut last = String::from("the exact ratio has no normal f32 neighbour");
    for m in first.multiplier_candidates() {
        match channels.iter().map(|ch| ch.agrees_with(m)).collect::<Result<Vec<u64>, String>>() {
            Ok(counts) => return Ok((m, counts)),
            Err(why) => last = format!("multiplier 0x{:08x}: {why}", m.to_bits()),
        }
    }
    Err(format!("no f32 multiplier within {NEIGHBOURS} ulps of the exact ratio is exact (last: {last})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use CodeType::{I8, U8};

    use crate::test_params::u8p as u8q;

    fn matmul(sx: f32, weights: Vec<Vec<i64>>, sw: Vec<f32>, sy: f32) -> GemmGroup {
        GemmGroup::new(GemmKind::MatMul, u8q(sx, 128), I8, weights, sw, vec![0], u8q(sy, 128))
    }

    fn refuted(v: &Verdict) -> &Counterexample {
        v.counterexample().unwrap_or_else(|| panic!("expected refuted, got {v:?}"))
    }

    fn input(c: &Counterexample, k: usize) -> Vec<i64> {
        let get = |name: &str| c.inputs.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        (0..k).map(|i| get(&format!("x[{i}]")).or(get("x[*]")).unwrap()).collect()
    }

    #[test]
    fn requantization_rounds_half_to_even_after_the_float_product() {
        for isa in Isa::ALL {
            assert_eq!(requantize(5, 0.5, 0, U8, isa), 2, "2.5 → 2");
            assert_eq!(requantize(7, 0.5, 0, U8, isa), 4, "3.5 → 4");
            assert_eq!(requantize(-7, 0.5, 10, U8, isa), 6);
            assert_eq!(requantize(1000, 1.0, 10, I8, isa), 127);
            assert_eq!(requantize(-1000, 1.0, 200, U8, isa), 0);
            // f32(2^24 + 1) rounds to 2^24 before the multiply: double rounding.
            assert_eq!(requantize((1 << 24) + 1, 2f32.powi(-17), 0, U8, isa), 128);
            assert_eq!(requantize((1 << 24) + 3, 2f32.powi(-17), 0, U8, isa), 128);
        }
    }

    #[test]
    fn x86_and_neon_agree_on_finite_products_and_differ_on_nan() {
        for v in [-70000, -300, -129, -1, 0, 1, 77, 128, 255, 40000, i32::MAX, i32::MIN] {
            for (zy, code) in [(0, U8), (255, U8), (128, U8), (-128, I8), (0, I8), (127, I8)] {
                for m in [0.37f32, 1.0, 1e-3, 3e5, -0.5, f32::INFINITY, f32::NEG_INFINITY] {
                    let (x86, neon) = (requantize(v, m, zy, code, Isa::X86Avx2), requantize(v, m, zy, code, Isa::Arm64Neon));
                    if !(v as f32 * m).is_nan() {
                        assert_eq!(x86, neon, "v {v} m {m} zy {zy}");
                    }
                }
            }
        }
        // NaN: x86's maxps picks the lower bound (qmin), NEON's fcvtns gives 0 (the zero point).
        assert_eq!(requantize(5, f32::NAN, 100, U8, Isa::X86Sse2), 0);
        assert_eq!(requantize(5, f32::NAN, 100, U8, Isa::Arm64Neon), 100);
        assert_eq!(requantize(0, f32::INFINITY, -3, I8, Isa::X86Avx512Vnni), -128, "0·∞ = NaN");
        assert_eq!(requantize(0, f32::INFINITY, -3, I8, Isa::Arm64Neon), -3);
    }

    #[test]
    fn an_overflowing_multiplier_is_exact_on_neon_only() {
        // sy = the smallest subnormal: M = fl(1/2^-149) = ∞, and f32(0)·∞ = NaN at acc = 0.
        let g = matmul(1.0, vec![vec![1]], vec![1.0], f32::from_bits(1));
        for contract in [Contract::Exact, Contract::Real] {
            assert!(prove(&g, Isa::Arm64Neon, contract).is_exact(), "{contract:?}");
            let v = prove(&g, Isa::X86Avx512Vnni, contract);
            let c = refuted(&v);
            assert_eq!((c.inputs[1].1, c.unfused, c.fused), (0, 128, 0), "{c}");
        }
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)] // Small test values.
    fn the_multiplier_multiplies_then_divides_in_f32() {
        let (sx, sw, sy) = (0.1f32, 0.3f32, 0.7f32);
        let m = output_multiplier(GemmKind::MatMul, sx, sw, sy);
        assert_eq!(m.to_bits(), ((sx * sw) / sy).to_bits());
        assert_ne!(m.to_bits(), (sx * (sw / sy)).to_bits(), "the order is observable");
        assert_ne!(m.to_bits(), ((sx as f64 * sw as f64 / sy as f64) as f32).to_bits(), "and so is f64");
        // QGemm folds alpha in first.
        let g = output_multiplier(GemmKind::Gemm { alpha: 3.0 }, sx, sw, sy);
        assert_eq!(g.to_bits(), (3.0 * sx * sw / sy).to_bits());
    }

    #[test]
    fn avx2_u8s8_pairs_saturate_to_int16() {
        // Raw codes 255·127 + 255·127 = 64770 > 32767: the pair loses 32003.
        let g = GemmGroup::new(GemmKind::MatMul, u8q(1.0, 0), I8, vec![vec![127, 127, 1]], vec![1.0], vec![0], u8q(1.0, 0));
        assert_eq!(accumulate(&g, 0, &[255, 255, 3], Isa::X86Avx512Vnni), 64773);
        assert_eq!(accumulate(&g, 0, &[255, 255, 3], Isa::X86Avx2), 32767 + 3);
        assert_eq!(accumulate(&g, 0, &[255, 255, 3], Isa::X86Sse2), 64773);
        let ov = avx2_pair_overflow(&g, 0).unwrap();
        assert_eq!(ov, PairOverflow { k: (0, 1), x: (255, 255), sum: 64770 });
        // Zero points do not matter: the kernel pairs raw codes and corrects in exact int32.
        let zp = GemmGroup { x: u8q(1.0, 200), ..g.clone() };
        assert_eq!(accumulate(&zp, 0, &[255, 255, 200], Isa::X86Avx2), 32767 - 200 * 254);
        // ORT's own tests halve the weights to stay clear of it.
        let halved = GemmGroup { weights: vec![vec![64, 64, -64]], ..g.clone() };
        assert_eq!(avx2_pair_overflow(&halved, 0), None);
        let negative = GemmGroup { weights: vec![vec![-128, -1, 0]], ..g };
        assert_eq!(avx2_pair_overflow(&negative, 0).map(|o| o.sum), Some(-255 * 129));
    }

    #[test]
    fn one_hot_accumulators_match_the_full_model() {
        // Zero point 200: 200·(127 + 120) leaves int16 even at the all-zero-point input.
        for (kind, k) in [(GemmKind::MatMul, 7), (GemmKind::Conv { kernel_size: 3, groups: 1 }, 12)] {
            let mut w = weights(1, k, 127);
            (w[0][0], w[0][1]) = (127, 120);
            let g = GemmGroup::new(kind, u8q(1.0, 200), I8, w, vec![1.0], vec![0], u8q(1.0, 0));
            let pairs = OneHotPairs::new(&g, 0);
            for pos in 0..k {
                for xk in [0, 1, 77, 200, 254, 255] {
                    let mut x = vec![200; k];
                    x[pos] = xk;
                    assert_eq!(pairs.accumulate(pos, xk), accumulate(&g, 0, &x, Isa::X86Avx2), "{kind:?} k {pos} x {xk}");
                }
            }
        }
    }

    #[test]
    fn conv_pairs_follow_the_kernel_position_major_packing() {
        // 2 input channels × kernel 2: ONNX order [c0k0, c0k1, c1k0, c1k1]; MLAS pairs (c0k0, c1k0), (c0k1, c1k1).
        let kind = GemmKind::Conv { kernel_size: 2, groups: 1 };
        assert_eq!(mlas_k_order(kind, 4).collect::<Vec<_>>(), vec![0, 2, 1, 3]);
        let g = GemmGroup::new(kind, u8q(1.0, 0), I8, vec![vec![127, 0, 127, 0]], vec![1.0], vec![0], u8q(1.0, 0));
        assert_eq!(avx2_pair_overflow(&g, 0).map(|o| o.k), Some((0, 2)));
        let apart = GemmGroup { weights: vec![vec![127, 127, 0, 0]], ..g.clone() };
        assert_eq!(avx2_pair_overflow(&apart, 0), None, "c0k0 and c0k1 are not paired");
        // Depthwise convolutions widen every product.
        let dw = GemmGroup { kind: GemmKind::Conv { kernel_size: 4, groups: 2 }, weights: vec![vec![127; 4]; 2], ..g };
        assert!(!dw.pairs_saturate(Isa::X86Avx2));
        // ... unless their weight zero points differ: 1.31.1 runs those on the u8×s8 GEMM.
        let unequal = GemmGroup { w_zero_points: vec![0, 1], ..dw };
        assert!(unequal.pairs_saturate(Isa::X86Avx2));
        assert_eq!(avx2_pair_overflow(&unequal, 0).map(|o| o.k), Some((0, 1)));
    }

    /// Power-of-two scales: P2 holds, and M = sx·sw/sy exactly.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)] // Small test values.
    fn exact_conv(weights: Vec<Vec<i64>>) -> GemmGroup {
        let c = weights.len();
        let sx = 2f32.powi(-7);
        let sw: Vec<f32> = (0..c).map(|i| 2f32.powi(-6 - i as i32)).collect();
        let bias =
            Bias { codes: (0..c as i64).map(|i| 1000 * i - 2000).collect(), scales: sw.iter().map(|s| sx * s).collect(), zero_points: vec![0], float: None };
        GemmGroup::new(GemmKind::Conv { kernel_size: 9, groups: 1 }, u8q(sx, 128), I8, weights, sw, vec![0], u8q(2f32.powi(-3), 128)).with_bias(bias)
    }

    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)] // Small test values.
    fn weights(c: usize, k: usize, max: i64) -> Vec<Vec<i64>> {
        (0..c).map(|i| (0..k).map(|j| ((i * 131 + j * 71) as i64 % (2 * max + 1)) - max).collect()).collect()
    }

    /// A verdict without its proof's running time, which no two runs share.
    fn untimed(v: Verdict) -> Verdict {
        match v {
            Verdict::Exact { mut proof } => {
                proof.micros = 0;
                Verdict::Exact { proof }
            }
            Verdict::Refuted { counterexample, mut proof } => {
                proof.micros = 0;
                Verdict::Refuted { counterexample, proof }
            }
            unknown => unknown,
        }
    }

    #[test]
    fn a_shared_verdict_is_the_one_its_own_proof_gives() {
        // Exact everywhere; refuted on AVX2 only (a pair overflows); refuted off the grid with
        // 24-bit scales: on each ISA the prover's verdict, shared or not, is `prove`'s.
        let mut overflow = weights(2, 18, 60);
        (overflow[1][0], overflow[1][9]) = (127, 120);
        let (sx, sy) = (f32::from_bits(0x3b42_4765), f32::from_bits(0x3d78_611e));
        let sw = vec![f32::from_bits(0x3c08_baab), f32::from_bits(0x3b8a_3c11)];
        let off_grid = GemmGroup::new(GemmKind::Conv { kernel_size: 9, groups: 1 }, u8q(sx, 128), I8, weights(2, 18, 60), sw, vec![0], u8q(sy, 128));
        for g in [exact_conv(weights(4, 18, 60)), exact_conv(overflow), off_grid] {
            for contract in [Contract::Exact, Contract::Real] {
                let prover = Prover::new(&g, contract);
                for isa in Isa::ALL {
                    assert_eq!(untimed(prover.prove(isa)), untimed(prove(&g, isa, contract)), "{isa} {contract:?}");
                }
                assert_eq!(prover.proven.borrow().len(), 3 - usize::from(!g.pairs_saturate(Isa::X86Avx2)), "proofs run");
            }
        }
    }

    #[test]
    fn power_of_two_scales_are_proven_on_every_isa_without_pair_overflow() {
        let g = exact_conv(weights(4, 18, 60));
        for isa in Isa::ALL {
            for contract in [Contract::Exact, Contract::Real] {
                let v = prove(&g, isa, contract);
                assert!(v.is_exact(), "{isa} {contract:?}: {v:?}");
            }
        }
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)] // Small test values.
    fn a_pair_overflow_is_refuted_on_avx2_with_a_concrete_input() {
        // Channel 1 pairs w[0] (input channel 0) with w[9] (input channel 1): 255·(127 + 120) > 32767.
        let mut w = weights(2, 18, 60);
        (w[1][0], w[1][9]) = (127, 120);
        let g = exact_conv(w);
        assert_eq!(avx2_pair_overflow(&g, 1).map(|o| o.k), Some((0, 9)));
        assert!(prove(&g, Isa::X86Avx512Vnni, Contract::Exact).is_exact());
        let v = prove(&g, Isa::X86Avx2, Contract::Exact);
        let c = refuted(&v);
        let ch = c.inputs[0].1 as usize;
        let x = input(c, 18);
        let acc: i64 = x.iter().zip(&g.weights[ch]).map(|(a, w)| (a - 128) * w).sum();
        assert_eq!(acc, c.inputs[1].1, "the input reaches the accumulator: {c}");
        assert_ne!(accumulate(&g, ch, &x, Isa::X86Avx2) as i64, acc, "the pair saturates");
        // The same input on the exact kernel gives the unfused result.
        let exact = Channel::new(&g, ch, Isa::X86Avx512Vnni, Contract::Exact).ok().unwrap();
        assert_eq!(exact.kernel_on(&x), c.unfused);
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)] // Small test values.
    fn a_pair_overflow_is_refuted_on_avx2_without_p2_where_every_float_order_agrees() {
        // 24-bit scales: P2 fails, so the unfused output is pinned only by the float path's
        // error bound; the witness must be an input where every order gives one code. Codes
        // above the zero point only (a ReLU before the Q), so no one-hot input exists.
        let mut w = weights(2, 18, 60);
        (w[1][0], w[1][9]) = (127, 120);
        let (sx, sy) = (f32::from_bits(0x3b42_4765), f32::from_bits(0x3d78_611e));
        let sw = vec![f32::from_bits(0x3c08_baab), f32::from_bits(0x3b8a_3c11)];
        let g = GemmGroup::new(GemmKind::Conv { kernel_size: 9, groups: 1 }, u8q(sx, 128), I8, w, sw.clone(), vec![0], u8q(sy, 128)).with_x_codes(129, 255);
        let v = prove(&g, Isa::X86Avx2, Contract::Exact);
        let c = refuted(&v);
        assert!(matches!(&v, Verdict::Refuted { proof, .. } if proof.detail.contains("error bound")), "{v:?}");
        let ch = c.inputs[0].1 as usize;
        let x = input(c, 18);
        // The float path in several orders (forward, backward, pairwise halves) gives `unfused`.
        let terms: Vec<f32> = x.iter().zip(&g.weights[ch]).map(|(&a, &b)| ((a - 128) as f32 * sx) * (b as f32 * sw[ch])).collect();
        let forward = terms.iter().fold(0f32, |s, &t| s + t);
        let backward = terms.iter().rev().fold(0f32, |s, &t| s + t);
        let halves = terms[..9].iter().sum::<f32>() + terms[9..].iter().sum::<f32>();
        for sum in [forward, backward, halves] {
            assert_eq!(quantize(sum, sy, 128, U8), c.unfused, "{c}");
        }
        assert_eq!(Channel::new(&g, ch, Isa::X86Avx2, Contract::Exact).ok().unwrap().kernel_on(&x), c.fused);
        assert_ne!(c.unfused, c.fused);
    }

    #[test]
    fn f32_requantization_differs_from_the_exact_ratio() {
        // Found by a random search over (sx, sw, sy), pinned. (acc·sx·sw)/sy = 3.4999998…, but
        // fl(f32(acc)·fl(fl(sx·sw)/sy)) rounds up to 3.5 and then to even, 4.
        let (sx, sw, sy) = (f32::from_bits(0x3b42_4765), f32::from_bits(0x3c08_baab), f32::from_bits(0x3d78_611e));
        let g = matmul(sx, vec![vec![1, 127]], vec![sw], sy);
        let v = prove(&g, Isa::X86Avx512Vnni, Contract::Real);
        let c = refuted(&v);
        assert_eq!((c.inputs[1].1, c.unfused, c.fused, c.differing), (8579, 131, 132, 2), "{c}");
        assert_eq!(input(c, 2), vec![198, 195]);
        assert!(c.exact.as_deref().unwrap().ends_with("≈ 3.499999806e0"), "{c}");
        let m = g.multiplier(0);
        assert_eq!(requantize(8579, m, 128, U8, Isa::X86Avx512Vnni), 132);
        let exact = Dyadic::int(8579).checked_mul(Dyadic::from_f32(sx).unwrap()).unwrap().checked_mul(Dyadic::from_f32(sw).unwrap()).unwrap();
        assert_eq!(quantize_real(exact, sy, 128, U8), Some(131));
        // A realisable multiplier for the exact ratio exists on this window, on every ISA.
        let synthesis = synthesize(&g, &Isa::ALL).unwrap();
        let [m2] = synthesis.w_scales[..] else { panic!("{synthesis:?}") };
        assert_ne!(m2, m);
        assert_eq!(requantize(8579, m2, 128, U8, Isa::X86Avx512Vnni), 131);
        assert_eq!(synthesis.proofs.len(), 4);
        assert!(synthesis.proofs.iter().all(|(_, p)| p.domain > 0 && p.detail.contains(&format!("w_scale = [0x{:08x}]", m2.to_bits()))), "{synthesis:?}");
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)] // Small test values.
    fn a_float_bias_ort_made_into_codes_is_judged_against_the_float() {
        use crate::weight_bias::quantized_bias;
        // QGemm, K = 2, one column: x·2^-4 (zero point 128), w·2^-3, y·2^-2; ORT's bias scale is 2^-7.
        let g = GemmGroup::new(GemmKind::Gemm { alpha: 1.0 }, u8q(0.0625, 128), I8, vec![vec![3, -5]], vec![0.125], vec![0], u8q(0.25, 128));
        let on_grid = g.clone().with_bias(quantized_bias(&[37.0 * 2f32.powi(-7)], 0.0625, &[0.125]).unwrap());
        assert_eq!(on_grid.bias.as_ref().unwrap().codes, vec![37]);
        // 0.1245 becomes code 16 (0.125): at x[0] = 160 the float path gives 0.8745/0.25 → 3, the
        // kernel (96 + 16)·2^-5 = 3.5 → 4.
        let off_grid = g.with_bias(quantized_bias(&[0.1245], 0.0625, &[0.125]).unwrap());
        assert_eq!(off_grid.bias.as_ref().unwrap().codes, vec![16]);
        for isa in Isa::ALL {
            for contract in [Contract::Exact, Contract::Real] {
                let v = prove(&on_grid, isa, contract);
                assert!(v.is_exact(), "{isa} {contract:?}: {v:?}");
                let v = prove(&off_grid, isa, contract);
                let c = refuted(&v);
                let x = input(c, 2);
                let acc = (x[0] - 128) * 3 + (x[1] - 128) * -5;
                assert_eq!(c.fused, requantize(acc as i32 + 16, 2f32.powi(-5), 128, U8, isa), "{isa} {contract:?}: {c}");
                let exact = (acc as f64 * 2f64.powi(-7) + f64::from(0.1245f32)) / 0.25;
                assert_eq!(c.unfused, 128 + exact.round_ties_even() as i64, "{isa} {contract:?}: {c}");
                assert_ne!(c.unfused, c.fused);
            }
        }
    }

    #[test]
    fn synthesis_keeps_the_bias_codes_and_proves_them_against_their_own_scale() {
        let (sx, sw, sy) = (f32::from_bits(0x3b42_4765), f32::from_bits(0x3c08_baab), f32::from_bits(0x3d78_611e));
        let g = GemmGroup { kind: GemmKind::Conv { kernel_size: 1, groups: 1 }, ..matmul(sx, vec![vec![1, 127]], vec![sw], sy) };
        let bias = |scale: f32| Bias { codes: vec![-3000], scales: vec![scale], zero_points: vec![0], float: None };
        // fl(sx·sw) is not sx·sw: the bias value b·fl(sx·sw) is not on the kernel's grid, but
        // the difference is far below a rounding boundary here.
        let on_grid = g.clone().with_bias(bias(sx * sw));
        assert!(synthesize(&on_grid, &Isa::ALL).is_ok());
        // A bias scale twice the accumulator's: the raw codes mean half the value.
        let doubled = g.clone().with_bias(bias(2.0 * sx * sw));
        let why = synthesize(&doubled, &Isa::ALL).unwrap_err();
        assert!(why.contains("no f32 multiplier"), "{why}");
        // A nonzero bias zero point stays refused: ORT never reads it.
        let zp = g.with_bias(Bias { zero_points: vec![1], ..bias(sx * sw) });
        assert!(synthesize(&zp, &Isa::ALL).unwrap_err().contains("bias zero point"));
    }

    #[test]
    fn synthesis_cannot_undo_int16_pair_saturation() {
        let mut w = weights(2, 18, 60);
        (w[1][0], w[1][9]) = (127, 120);
        let g = exact_conv(w);
        let why = synthesize(&g, &Isa::ALL).unwrap_err();
        assert!(why.contains("channel 1: x86-avx2: int16 pairs saturate"), "{why}");
        assert!(synthesize(&g, &[Isa::X86Avx512Vnni, Isa::Arm64Neon]).is_ok());
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)] // Small test values.
    fn exact_contract_without_p2_is_refuted_by_a_single_product_or_unknown() {
        // Generic scales: P2 fails. One input with a single nonzero product has a unique float
        // value, Q(fl(DQ(11)·DQ(−33))) = 208, where the kernel gives 209 (found by search).
        let (sx, sw, sy) = (f32::from_bits(0x3b04_b3a2), f32::from_bits(0x3c23_1245), f32::from_bits(0x3a7d_6521));
        let g = matmul(sx, vec![vec![1, 127, -33]], vec![sw], sy);
        let v = prove(&g, Isa::X86Avx512Vnni, Contract::Exact);
        let Verdict::Refuted { counterexample: c, proof } = &v else { panic!("{v:?}") };
        assert_eq!(proof.method, Method::P2Representable);
        let x = input(c, 3);
        assert_eq!(x.iter().filter(|&&v| v != 128).count(), 1, "one nonzero product: {c}");
        let k = x.iter().position(|&v| v != 128).unwrap();
        let p = dequantize(x[k], sx, 128) * dequantize(g.weights[0][k], sw, 0);
        assert_eq!(quantize(p, sy, 128, U8), c.unfused);
        assert_eq!(requantize(c.inputs[1].1 as i32, g.multiplier(0), 128, U8, Isa::X86Avx512Vnni), c.fused);
        assert_eq!((c.inputs[1].1, c.unfused, c.fused), (3861, 208, 209), "{c}");
        // Without such an input the answer is unknown, never exact.
        let g = matmul(sx, vec![vec![1, 127]], vec![sw], sy);
        let v = prove(&g, Isa::X86Avx512Vnni, Contract::Exact);
        assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("P2")), "{v:?}");
    }

    #[test]
    fn ort_reinterpretations_are_refused() {
        let g = exact_conv(weights(2, 9, 10));
        let mut b = g.bias.clone().unwrap();
        b.scales = vec![b.scales[0] * 1.0000001, b.scales[1]];
        let v = prove(&g.clone().with_bias(b.clone()), Isa::X86Avx512Vnni, Contract::Real);
        assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("bias scale")), "{v:?}");
        b = g.bias.clone().unwrap();
        b.zero_points = vec![1];
        let v = prove(&g.clone().with_bias(b), Isa::X86Avx512Vnni, Contract::Real);
        assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("bias zero point")), "{v:?}");
        let unsigned: Vec<Vec<i64>> = g.weights.iter().map(|r| r.iter().map(|w| w + 128).collect()).collect();
        // Unequal per-channel Conv weight zero points: 1.31.1 honours them (1.25 ENFORCEd equal ones).
        let zps = GemmGroup { w_code: U8, weights: unsigned.clone(), w_zero_points: vec![3, 4], ..g.clone() };
        for isa in Isa::ALL {
            assert!(prove(&zps, isa, Contract::Exact).is_exact(), "{isa}");
        }
        let types = GemmGroup { x: QParam::new(g.x.scale, 0, I8), w_code: U8, weights: unsigned.clone(), ..g.clone() };
        let v = prove(&types, Isa::X86Avx512Vnni, Contract::Real);
        assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("no CPU kernel")), "{v:?}");
        // QLinearMatMul takes per-column zero points (and has no bias).
        let mm = GemmGroup { kind: GemmKind::MatMul, w_code: U8, weights: unsigned, w_zero_points: vec![3, 4], bias: None, ..g };
        assert!(prove(&mm, Isa::X86Avx512Vnni, Contract::Real).is_exact());
    }

    #[test]
    fn negative_scales_are_proven_by_symmetry() {
        let mut g = exact_conv(weights(3, 18, 50));
        g.y.scale = -g.y.scale;
        for contract in [Contract::Exact, Contract::Real] {
            assert!(prove(&g, Isa::X86Avx512Vnni, contract).is_exact(), "{contract:?}");
        }
        // A negative weight scale needs the bias scale to follow it.
        let mut g = exact_conv(weights(1, 9, 50));
        g.w_scales = vec![-g.w_scales[0]];
        g.bias.as_mut().unwrap().scales = vec![g.x.scale * g.w_scales[0]];
        assert!(prove(&g, Isa::Arm64Neon, Contract::Exact).is_exact());
    }

    #[test]
    fn windows_wider_than_2_pow_24_are_counted_with_floor_sums() {
        // K = 1024, S = 2^-17: 2^25 unsaturated accumulators, all within ±2^24 (f32(v) is exact).
        let mut w = vec![127; 1024];
        w[0] = 126; // gcd 1: every accumulator is a point of the window
        let g = GemmGroup::new(GemmKind::MatMul, u8q(2f32.powi(-10), 128), I8, vec![w], vec![2f32.powi(-7)], vec![0], u8q(1.0, 128));
        for contract in [Contract::Exact, Contract::Real] {
            match prove(&g, Isa::X86Avx512Vnni, contract) {
                Verdict::Exact { proof } => assert!(proof.domain > 1 << 24, "{proof:?}"),
                other => panic!("{contract:?}: {other:?}"),
            }
        }
        // sy = 3: the kernel's product can round, so neither enumeration nor floor sums apply.
        let g = GemmGroup { y: u8q(3.0, 128), ..g };
        let v = prove(&g, Isa::X86Avx512Vnni, Contract::Real);
        assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("too wide")), "{v:?}");
    }

    #[test]
    fn reachable_activation_ranges_narrow_the_window() {
        let (sx, sw, sy) = (f32::from_bits(0x3b42_4765), f32::from_bits(0x3c08_baab), f32::from_bits(0x3d78_611e));
        let g = matmul(sx, vec![vec![1, 127]], vec![sw], sy).with_x_codes(128, 180);
        assert!(prove(&g, Isa::X86Avx512Vnni, Contract::Real).is_exact(), "acc 8579 needs x[1] = 195");
    }

    #[test]
    fn near_boundary_counts_match_enumeration() {
        // q = acc/3 + 0.1, codes u8 with zy = 10: boundaries j + ½ for j in [-10, 244].
        let line = Line { slope: 1.0 / 3.0, offset: 0.1, zy: 10, codes: (0, 255) };
        for (range, step, delta) in [((-100, 900), 1, 0.05), ((-99, 903), 3, 0.2), ((0, 50), 1, 0.7), ((-60, 60), 2, 0.0)] {
            let (near, reachable) = line.count_near(range, step, delta);
            let accs: Vec<i64> = (range.0..=range.1).filter(|a| a % step == 0).collect();
            let by_hand = accs.iter().filter(|&&a| {
                let q = a as f64 / 3.0 + 0.1;
                (-10..245).any(|j| (q - (j as f64 + 0.5)).abs() <= delta)
            });
            assert_eq!((near, reachable), (by_hand.count() as u64, accs.len() as u64), "{range:?} {step} {delta}");
        }
        let down = Line { slope: -0.25, offset: 3.0, zy: 0, codes: (-128, 127) };
        let (near, _) = down.count_near((-40, 40), 1, 0.1);
        assert_eq!(
            near,
            (-40..=40i64)
                .filter(|&a| {
                    let q = -0.25 * a as f64 + 3.0;
                    (q - q.floor() - 0.5).abs() <= 0.1
                })
                .count() as u64
        );
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)] // Small test values.
    fn near_boundary_is_counted_only_where_p2_fails() {
        // Power-of-two scales: the float path is exact, nothing to count.
        assert_eq!(near_boundary(&matmul(2f32.powi(-5), vec![vec![3, -7, 5]], vec![2f32.powi(-6)], 2f32.powi(-2))), None);
        // Generic scales: the count is the enumeration of accumulators within δ of a boundary.
        let (sx, sw, sy) = (0.0371f32, 0.0123f32, 0.0917f32);
        let row = |seed: i64| (0..64).map(|k| (k * seed + 11) % 255 - 127).collect::<Vec<i64>>();
        let g = matmul(sx, vec![row(37), row(91)], vec![sw], sy);
        let n = near_boundary(&g).unwrap();
        assert_eq!(n.channels, 2);
        let mut by_hand = (0u64, 0u64);
        for d in &g.weights {
            let umax = 128.0f64;
            let sum: f64 = d.iter().map(|&w| umax * w.unsigned_abs() as f64).sum::<f64>() * sx as f64 * sw as f64;
            let delta = gamma(d.len() + 5) * sum / sy as f64;
            let (lo, hi) = d.iter().fold((0i64, 0i64), |(lo, hi), &w| (lo + (-128 * w).min(127 * w), hi + (-128 * w).max(127 * w)));
            let step = d.iter().fold(0i64, |a, &b| gcd(a, b.abs()));
            for acc in (lo..=hi).filter(|a| a % step == 0) {
                let q = acc as f64 * sx as f64 * sw as f64 / sy as f64;
                by_hand.1 += 1;
                let j = (q - 0.5).round();
                by_hand.0 += u64::from((q - (j + 0.5)).abs() <= delta && (0..255).contains(&(j as i64 + 128)));
            }
        }
        assert_eq!((n.accumulators, n.reachable), by_hand, "{n}");
        assert!(n.accumulators > 0, "{n}");
    }
}
