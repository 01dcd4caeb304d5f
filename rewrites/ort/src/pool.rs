//! QLinearGlobalAveragePool and QLinearAveragePool (contract §3.6).
//!
//! Sources (ORT): `contrib_ops/cpu/quantization/qlinear_global_average_pool.cc` and
//! `core/mlas/lib/qlgavgpool.cpp` (the integer path: `acc = Σx − zX·N` in int32, then
//! `MlasRequantizeOutput` with `scale = fl(sX / fl(sY·f32(N)))`, throwing when N ≥ 2^24 or the
//! scale is outside [2^-32, 256)); `core/mlas/lib/quantize.cpp` (`MlasRequantizeOutput`: float
//! multiply, clamp, round to nearest even, add the zero point); `contrib_ops/cpu/quantization/
//! qlinear_pool.cc` (QLinearAveragePool: the global path when the kernel covers the input and no
//! pad is set; otherwise a float loop: DQ values summed from 0 in h→w→d order, `/= count` with
//! `count` the kernel size when `count_include_pad` else the clipped window's size, then
//! `quantize_value = clamp(int32(nearbyintf(fl(y/sY) + zY)))`; dilations are ignored);
//! `core/providers/cpu/nn/pool_attributes.h` (output sizes, `ceil_mode`).
//!
//! The unfused reference sums the window's DQ values in an unspecified order (MLAS float pooling
//! kernels), divides by the count, then quantizes. Under `exact` it is deterministic only where
//! every partial sum is exact (P2, checked here); then the reference and the kernel are both
//! functions of the integer accumulator `acc = Σ(x − zX)`, and every reachable `acc` is compared.
//! Otherwise a counterexample is searched among inputs whose float sum is exact in any order (k
//! copies of one code, the rest at the zero point), and the answer is "unknown" if none differs.

use super::binary::{cvt_rne_x86, ratio_text, truncate_arm, truncate_x86};
use crate::Isa;
use crate::profile::Convert;
use qdqc_exact::num::{Dyadic, rne_quotient};
use qdqc_exact::p1::{self, Domain};
use qdqc_exact::reference::{CodeType, dequantize, quantize};
use qdqc_exact::{Certificate, Contract, Counterexample, Method, QParam, Verdict};
use std::cell::Cell;
use std::collections::BTreeSet;
use std::time::Instant;

/// Quantization of the pooled input `x` and the output `y`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolParams {
    pub x: QParam,
    pub y: QParam,
}

/// QLinearGlobalAveragePool's integer kernel for one image size.
#[derive(Clone, Debug)]
pub struct GlobalPoolKernel {
    n: u64,
    zx: i64,
    /// `fl(sX / fl(sY·f32(N)))`.
    scale: f32,
    y: QParam,
}

impl GlobalPoolKernel {
    /// The kernel, or ORT's reason to throw (`CheckQLinearGlobalAveragePoolScaleAndSize`).
    pub fn new(p: &PoolParams, image_size: u64) -> Result<GlobalPoolKernel, String> {
        check_types(p)?;
        if image_size == 0 || image_size >= 1 << 24 {
            return Err(format!("QLinearGlobalAveragePool throws: image size {image_size} (must be in 1..2^24)"));
        }
        let scale = p.x.scale / (p.y.scale * image_size as f32);
        // Written as ORT's test: a NaN scale passes it.
        if scale < 2f32.powi(-32) || scale >= 256.0 {
            return Err(format!("QLinearGlobalAveragePool throws: scale sX/(sY·N) = {scale} outside [2^-32, 256)"));
        }
        Ok(GlobalPoolKernel { n: image_size, zx: p.x.zero_point, scale, y: p.y })
    }

    /// `Σx − zX·N` in the kernel's wrapping int32 arithmetic.
    pub fn accumulate(&self, codes: &[i64]) -> i64 {
        debug_assert_eq!(codes.len() as u64, self.n);
        wrap_i32(codes.iter().sum::<i64>() - self.zx * i64::try_from(self.n).expect("image size is below 2^24 (checked by new)"))
    }

    /// `MlasRequantizeOutput` of one accumulator (wrapped to int32 first, as the kernel holds it).
    pub fn requantize(&self, acc: i64) -> i64 {
        let (lo, hi) = self.y.code.range();
        let f = wrap_i32(acc) as f32 * self.scale;
        // `max_ps(f, min)` then `min_ps(_, max)`, in float before rounding.
        let (min, max) = ((lo - self.y.zero_point) as f32, (hi - self.y.zero_point) as f32);
        let f = if f > min { f } else { min };
        let f = if f < max { f } else { max };
        cvt_rne_x86(f) as i64 + self.y.zero_point
    }

    pub fn eval(&self, codes: &[i64]) -> i64 {
        self.requantize(self.accumulate(codes))
    }
}

// The model: the kernel's int32 accumulator wraps, and `as i32` is that two's-complement wrap.
#[allow(clippy::cast_possible_truncation)]
fn wrap_i32(v: i64) -> i64 {
    v as i32 as i64
}

/// QLinearAveragePool's float loop for one output.
#[derive(Clone, Debug)]
pub struct FloatPoolKernel {
    x: QParam,
    y: QParam,
    /// The float→int32 cast of `quantize_value`: ARM saturates, x86 gives `i32::MIN`.
    arm: bool,
}

impl FloatPoolKernel {
    /// One output from its window's codes in ORT's order and its divisor.
    pub fn eval(&self, window: &[i64], count: u64) -> i64 {
        let sum = window.iter().fold(0f32, |s, &q| s + dequantize(q, self.x.scale, self.x.zero_point));
        self.quantize_value(sum / count as f32)
    }

    /// `clamp(int32(nearbyintf(y / sY + zY)))`: the zero point joins in float before rounding.
    fn quantize_value(&self, y: f32) -> i64 {
        let (lo, hi) = self.y.code.range();
        let v = (y / self.y.scale + self.y.zero_point as f32).round_ties_even();
        let i = if self.arm { truncate_arm(v) } else { truncate_x86(v) };
        (i as i64).clamp(lo, hi)
    }
}

/// A pooling geometry over the spatial dimensions (1 to 3 of them), explicit pads after
/// `auto_pad` resolution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolGeometry {
    pub input: Vec<u64>,
    pub kernel: Vec<u64>,
    pub strides: Vec<u64>,
    /// Begin pads, then end pads, as ONNX lists them.
    pub pads: Vec<u64>,
    pub dilations: Vec<u64>,
    pub ceil_mode: bool,
    pub count_include_pad: bool,
}

impl PoolGeometry {
    /// Whether QLinearAveragePool takes the global integer path: the kernel covers the input
    /// and every pad is 0.
    pub fn is_global(&self) -> bool {
        self.input == self.kernel && self.pads.iter().all(|&p| p == 0)
    }

    fn check(&self) -> Result<(), String> {
        let r = self.input.len();
        if !(1..=3).contains(&r) || self.kernel.len() != r || self.strides.len() != r || self.pads.len() != 2 * r || self.dilations.len() != r {
            return Err("QLinearAveragePool takes 1 to 3 spatial dimensions with matching attributes".to_string());
        }
        if self.kernel.contains(&0) || self.strides.contains(&0) {
            return Err("zero kernel or stride".to_string());
        }
        if self.dilations.iter().any(|&d| d != 1) {
            return Err("QLinearAveragePool ignores dilations, the float AveragePool does not".to_string());
        }
        // Sizes, kernels, strides and pads within 2^31 keep every output-size sum in i64, and a
        // kernel of at most 2^32 elements keeps window sizes in u64 (hostile attributes).
        let big = |v: &u64| *v > 1 << 31;
        if self.input.iter().chain(&self.kernel).chain(&self.strides).chain(&self.pads).any(big)
            || self.kernel.iter().try_fold(1u64, |a, &k| a.checked_mul(k)).is_none_or(|p| p > 1 << 32)
        {
            return Err("pooling dims, kernel, strides or pads over 2^31 (or a kernel over 2^32 elements)".to_string());
        }
        Ok(())
    }

    /// Output size of one dimension (`PoolAttributes::ComputeOutputSize`, dilation 1).
    // Called after `check()`, which bounds dims, kernel, strides and pads below 2^31: they fit
    // i64, and so does ORT's float `ceil` of a quotient below 2^32 (`static_cast<int64_t>`).
    #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
    fn output_size(&self, d: usize) -> i64 {
        let (n, k, s) = (self.input[d] as i64, self.kernel[d] as i64, self.strides[d] as i64);
        let (head, tail) = (self.pads[d] as i64, self.pads[d + self.input.len()] as i64);
        let numerator = n + head + tail - (k - 1) - 1;
        if !self.ceil_mode {
            return numerator / s + 1;
        }
        let out = (numerator as f32 / s as f32).ceil() as i64 + 1;
        // The last window must start inside the image (ONNX PR 5741).
        if (out - 1) * s >= n + head { out - 1 } else { out }
    }

    /// The clipped `[start, end)` input range of output `o` along dimension `d`.
    // Called after `check()`, which bounds dims, kernel, strides and pads below 2^31.
    #[allow(clippy::cast_possible_wrap)]
    fn span(&self, d: usize, o: i64) -> (i64, i64) {
        let start = o * self.strides[d] as i64 - self.pads[d] as i64;
        let end = (start + self.kernel[d] as i64).min(self.input[d] as i64);
        (start.max(0), end)
    }

    /// Every output's window in ORT's order (outputs row-major, inputs h→w→d).
    pub fn windows(&self) -> Result<Vec<Window>, String> {
        self.check()?;
        let r = self.input.len();
        let sizes: Vec<i64> = (0..r).map(|d| self.output_size(d)).collect();
        if sizes.iter().any(|&s| s < 1) {
            return Err("the pooled output is empty".to_string());
        }
        let kernel_size: u64 = self.kernel.iter().product();
        let mut out = Vec::new();
        let mut o = vec![0i64; r];
        loop {
            let spans: Vec<(i64, i64)> = (0..r).map(|d| self.span(d, o[d])).collect();
            if spans.iter().any(|&(s, e)| e <= s) {
                return Err("a pooling window holds no input element".to_string());
            }
            let inputs = flat_indices(&spans, &self.input);
            let divisor = if self.count_include_pad { kernel_size } else { inputs.len() as u64 };
            out.push(Window { inputs, divisor });
            if !advance(&mut o, &sizes) {
                return Ok(out);
            }
        }
    }
}

/// One pooled output: the flat spatial indices it sums, in ORT's order, and its divisor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub inputs: Vec<usize>,
    pub divisor: u64,
}

// Spans are clipped to `[0, dim)` and dims are below 2^31 (`check()`): every index fits usize.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn flat_indices(spans: &[(i64, i64)], dims: &[u64]) -> Vec<usize> {
    let mut out = vec![0usize];
    for (&(s, e), &n) in spans.iter().zip(dims) {
        out = out.iter().flat_map(|&base| (s..e).map(move |i| base * n as usize + i as usize)).collect();
    }
    out
}

fn advance(o: &mut [i64], sizes: &[i64]) -> bool {
    for d in (0..o.len()).rev() {
        o[d] += 1;
        if o[d] < sizes[d] {
            return true;
        }
        o[d] = 0;
    }
    false
}

/// What QLinearAveragePool runs for a geometry.
#[derive(Clone, Debug)]
pub enum AveragePoolKernel {
    Global(GlobalPoolKernel),
    Float(FloatPoolKernel),
}

impl AveragePoolKernel {
    /// The kernel, or why ORT throws or the model does not apply.
    pub fn new(p: &PoolParams, geom: &PoolGeometry, isa: Isa) -> Result<AveragePoolKernel, String> {
        check_types(p)?;
        geom.check()?;
        if geom.is_global() {
            return GlobalPoolKernel::new(p, geom.kernel.iter().product()).map(AveragePoolKernel::Global);
        }
        Ok(AveragePoolKernel::Float(FloatPoolKernel { x: p.x, y: p.y, arm: isa.arith().convert == Convert::Arm }))
    }

    /// One output from its window's codes (in ORT's order) and divisor.
    pub fn eval(&self, window: &[i64], divisor: u64) -> i64 {
        match self {
            AveragePoolKernel::Global(k) => k.eval(window),
            AveragePoolKernel::Float(k) => k.eval(window, divisor),
        }
    }
}

fn check_types(p: &PoolParams) -> Result<(), String> {
    let t = p.y.code;
    if !matches!(t, CodeType::U8 | CodeType::I8) || p.x.code != t {
        return Err("quantized pooling takes one 8-bit type for input and output".to_string());
    }
    let (lo, hi) = t.range();
    match [p.x.zero_point, p.y.zero_point].into_iter().find(|z| !(lo..=hi).contains(z)) {
        Some(z) => Err(format!("zero point {z} is not a {} value", t.name())),
        None => Ok(()),
    }
}

/// Proves or refutes QLinearGlobalAveragePool against DQ → GlobalAveragePool → Q for an image
/// of `image_size` elements. The kernel is the same on every ISA.
pub fn prove_global_average_pool(p: &PoolParams, image_size: u64, contract: Contract) -> Verdict {
    if let Some(reason) = unsupported_scales(p) {
        return Verdict::Unknown { reason };
    }
    let kernel = match GlobalPoolKernel::new(p, image_size) {
        Ok(k) => k,
        Err(reason) => return Verdict::Unknown { reason: format!("not fused: {reason}") },
    };
    let class = Class { n: image_size, divisor: image_size };
    prove_class(p, class, contract, &Fused::Global(&kernel), "QLinearGlobalAveragePool")
}

/// The largest image size [`prove_global_average_pool_any_size`] tries: a documented cap (the
/// int32 sum of 8-bit codes holds far more, but each size is its own enumeration).
pub const IMAGE_SIZE_CAP: u64 = 4096;

/// [`prove_global_average_pool`] for a symbolic spatial size (a detector's image): sizes 1 to 64,
/// then powers of two up to [`IMAGE_SIZE_CAP`]; the first refuted size refutes the group (its
/// detail names the size). Exact at every size tried is not exact at every size, so that is
/// reported as unknown with what was checked.
pub fn prove_global_average_pool_any_size(p: &PoolParams, contract: Contract) -> Verdict {
    let sizes = (1..=64).chain(std::iter::successors(Some(128u64), |&n| Some(2 * n)).take_while(|&n| n <= IMAGE_SIZE_CAP));
    for n in sizes {
        match prove_global_average_pool(p, n, contract) {
            Verdict::Exact { .. } => {}
            Verdict::Refuted { counterexample, mut proof } => {
                proof.detail = format!("the image size is symbolic; refuted at {n} elements: {}", proof.detail);
                return Verdict::Refuted { counterexample, proof };
            }
            Verdict::Unknown { reason } => return Verdict::Unknown { reason: format!("the image size is symbolic; at {n} elements: {reason}") },
        }
    }
    Verdict::Unknown {
        reason: format!("the image size is symbolic: exact at every size 1..=64 and every power of two up to {IMAGE_SIZE_CAP}, other sizes not checked"),
    }
}

/// [`prove_average_pool`] for a geometry whose spatial dims `symbolic` (axis indices into
/// `geom.input`) are not static (an OCR recognizer's width): those dims take the sizes
/// [`prove_global_average_pool_any_size`] tries, together; the first refuted size refutes the
/// group (its detail names it). Exact at every size tried is not exact at every size (a window
/// class of one axis at one size may meet another axis's class at another), so that is unknown.
pub fn prove_average_pool_any_size(p: &PoolParams, geom: &PoolGeometry, symbolic: &[usize], isa: Isa, contract: Contract) -> Verdict {
    let sizes = (1..=64).chain(std::iter::successors(Some(128u64), |&n| Some(2 * n)).take_while(|&n| n <= IMAGE_SIZE_CAP));
    for n in sizes {
        let mut at = geom.clone();
        symbolic.iter().for_each(|&a| at.input[a] = n);
        match prove_average_pool(p, &at, isa, contract) {
            Verdict::Exact { .. } => {}
            Verdict::Refuted { counterexample, mut proof } => {
                proof.detail = format!("spatial dims {symbolic:?} are symbolic; refuted at size {n}: {}", proof.detail);
                return Verdict::Refuted { counterexample, proof };
            }
            // A kernel larger than a small input is not a geometry ORT runs: try the next size.
            Verdict::Unknown { .. } if n < 64 => {}
            Verdict::Unknown { reason } => return Verdict::Unknown { reason: format!("spatial dims {symbolic:?} are symbolic; at size {n}: {reason}") },
        }
    }
    Verdict::Unknown {
        reason: format!(
            "spatial dims {symbolic:?} are symbolic: exact at every size 1..=64 and every power of two up to {IMAGE_SIZE_CAP}, other sizes not checked"
        ),
    }
}

/// Proves or refutes QLinearAveragePool against DQ → AveragePool → Q for a geometry, on `isa`:
/// every distinct (window size, divisor) of the geometry is checked.
pub fn prove_average_pool(p: &PoolParams, geom: &PoolGeometry, isa: Isa, contract: Contract) -> Verdict {
    if let Some(reason) = unsupported_scales(p) {
        return Verdict::Unknown { reason };
    }
    let kernel = match AveragePoolKernel::new(p, geom, isa) {
        Ok(k) => k,
        Err(reason) => return Verdict::Unknown { reason: format!("not fused: {reason}") },
    };
    let windows = match geom.windows() {
        Ok(w) => w,
        Err(reason) => return Verdict::Unknown { reason },
    };
    let classes: BTreeSet<Class> = windows.iter().map(|w| Class { n: w.inputs.len() as u64, divisor: w.divisor }).collect();
    let (fused, name) = match &kernel {
        AveragePoolKernel::Global(k) => (Fused::Global(k), "QLinearAveragePool (global path)"),
        AveragePoolKernel::Float(k) => (Fused::Float(k), "QLinearAveragePool"),
    };
    let (mut domain, mut micros, mut all_p2, mut details) = (0, 0, true, Vec::new());
    for class in classes {
        match prove_class(p, class, contract, &fused, name) {
            Verdict::Exact { proof } => {
                domain += proof.domain;
                micros += proof.micros;
                all_p2 &= proof.method == Method::P2Representable;
                details.push(proof.detail);
            }
            refuted_or_unknown => return refuted_or_unknown,
        }
    }
    let method = if all_p2 { Method::P2Representable } else { Method::P1Exhaustive };
    Verdict::Exact { proof: Certificate { method, domain, micros, detail: details.join("; ") } }
}

fn unsupported_scales(p: &PoolParams) -> Option<String> {
    [("x", p.x), ("y", p.y)]
        .into_iter()
        .find(|(_, q)| !q.scale.is_finite() || q.scale == 0.0)
        .map(|(n, q)| format!("{n} scale {} is not a finite non-zero f32", q.scale))
}

/// Windows of `n` inputs divided by `divisor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Class {
    n: u64,
    divisor: u64,
}

/// The fused computation of one output.
enum Fused<'a> {
    Global(&'a GlobalPoolKernel),
    Float(&'a FloatPoolKernel),
}

impl Fused<'_> {
    /// The output for an input whose float sum is `sum` (exact) and integer accumulator `acc`.
    fn output_for_sum(&self, acc: i64, sum: f32, divisor: u64) -> i64 {
        match self {
            Fused::Global(k) => k.requantize(acc),
            Fused::Float(k) => k.quantize_value(sum / divisor as f32),
        }
    }

    /// The output for `k` copies of `code` and the rest at the zero point, in the kernel's
    /// own (sequential) summation order.
    fn family(&self, code: i64, k: u64, p: &PoolParams, divisor: u64) -> i64 {
        let acc = (code - p.x.zero_point) * i64::try_from(k).expect("a window holds at most 2^32 inputs (PoolParams::check)");
        match self {
            Fused::Global(g) => g.requantize(acc),
            Fused::Float(f) => {
                let d = dequantize(code, p.x.scale, p.x.zero_point);
                // Adding the zero point's DQ value (±0) leaves any partial sum unchanged.
                let sum = (0..k).fold(0f32, |s, _| s + d);
                f.quantize_value(sum / divisor as f32)
            }
        }
    }
}

/// Whether every partial sum of `n` DQ values is exact in f32 (P2): the values are integer
/// multiples `(q − zX)·m` of the scale's grid `2^e` (`sX = m·2^e`, m odd), and so is every
/// partial sum, whose magnitude stays within `n·max|q − zX|·m ≤ 2^24` grid units.
pub fn float_sum_is_exact(x: QParam, n: u64) -> bool {
    let Some(s) = Dyadic::from_f32(x.scale).filter(|s| !s.is_zero()) else { return false };
    let (lo, hi) = x.code.range();
    let span = u128::from((lo - x.zero_point).abs().max(hi - x.zero_point).unsigned_abs());
    let units = span * n as u128 * s.mant.unsigned_abs();
    units <= 1 << 24 && Dyadic::new(i128::try_from(units).expect("units are at most 2^24 here"), s.exp).is_f32()
}

fn prove_class(p: &PoolParams, class: Class, contract: Contract, fused: &Fused, name: &str) -> Verdict {
    let deterministic_fused = matches!(fused, Fused::Global(_)) || float_sum_is_exact(p.x, class.n);
    let reference_known = contract == Contract::Real || float_sum_is_exact(p.x, class.n);
    if deterministic_fused && reference_known {
        return prove_over_accumulators(p, class, contract, fused, name);
    }
    search_counterexample(p, class, contract, fused, name)
}

/// Reference and kernel as functions of `acc`, compared at every reachable accumulator.
fn prove_over_accumulators(p: &PoolParams, class: Class, contract: Contract, fused: &Fused, name: &str) -> Verdict {
    let (lo, hi) = p.x.code.range();
    let n = i64::try_from(class.n).expect("a window holds at most 2^32 inputs (PoolParams::check)");
    let domain = [Domain::new("acc", (n * (lo - p.x.zero_point), n * (hi - p.x.zero_point)), 0)];
    // Under P2 (or for the integer kernel under `real`), `acc·sX` is the exact sum; it is an
    // f32 whenever the float path is exact.
    let sum = |acc: i64| acc as f32 * p.x.scale;
    // Set when the exact value leaves i128: the verdict is then unknown, never a refutation.
    let overflow = Cell::new(false);
    let reference = |acc: i64| match contract {
        Contract::Exact => quantize(sum(acc) / class.divisor as f32, p.y.scale, p.y.zero_point, p.y.code),
        Contract::Real => real_output(p, acc, class.divisor).unwrap_or_else(|| {
            overflow.set(true);
            i64::MIN
        }),
    };
    let detail = format!("{name} {} window of {} / {} ({contract:?}): every reachable accumulator", p.x.code.name(), class.n, class.divisor);
    let verdict =
        p1::exhaustive(&domain, &detail, |a| reference(a[0]), |a| fused.output_for_sum(a[0], sum(a[0]), class.divisor), |a| exact_text(p, a[0], class.divisor));
    if overflow.get() {
        return Verdict::Unknown { reason: format!("{detail}: an exact value exceeds the exact arithmetic's range") };
    }
    let p2 = float_sum_is_exact(p.x, class.n);
    match verdict {
        Verdict::Exact { mut proof } => {
            if p2 {
                proof.method = Method::P2Representable;
                proof.detail = format!("P2: every partial sum is exact; {}", proof.detail);
            }
            Verdict::Exact { proof }
        }
        Verdict::Refuted { mut counterexample, proof } => {
            let acc = counterexample.inputs[0].1;
            counterexample.inputs.extend(witness(p.x, class.n, acc));
            Verdict::Refuted { counterexample, proof }
        }
        unknown => unknown,
    }
}

/// `sat(rne(acc·sX / (divisor·sY)) + zY)` exactly; `None` beyond i128.
fn real_output(p: &PoolParams, acc: i64, divisor: u64) -> Option<i64> {
    let num = Dyadic::int(acc).checked_mul(Dyadic::from_f32(p.x.scale)?)?;
    let den = Dyadic::int(i64::try_from(divisor).ok()?).checked_mul(Dyadic::from_f32(p.y.scale)?)?;
    let (lo, hi) = p.y.code.range();
    Some(rne_quotient(num, den)?.saturate(p.y.zero_point, lo, hi))
}

fn exact_text(p: &PoolParams, acc: i64, divisor: u64) -> Option<String> {
    let num = Dyadic::int(acc).checked_mul(Dyadic::from_f32(p.x.scale)?)?;
    let den = Dyadic::int(i64::try_from(divisor).ok()?).checked_mul(Dyadic::from_f32(p.y.scale)?)?;
    Some(format!("acc·sX/(count·sY) = {}", ratio_text(num, den)?))
}

/// A concrete window reaching `acc`: codes at the far end, one partial code, the rest at the
/// zero point (as named ranges of the window's inputs).
fn witness(x: QParam, n: u64, acc: i64) -> Vec<(String, i64)> {
    let (lo, hi) = x.code.range();
    let step = if acc >= 0 { hi - x.zero_point } else { lo - x.zero_point };
    let (full, rest) = if step == 0 { (0, 0) } else { (u64::try_from(acc / step).expect("step has the sign of acc"), acc % step) };
    let mut out = Vec::new();
    if full > 0 {
        out.push((inputs_name(0, full), x.zero_point + step));
    }
    let mut next = full;
    if rest != 0 {
        out.push((inputs_name(next, next + 1), x.zero_point + rest));
        next += 1;
    }
    if next < n {
        out.push((inputs_name(next, n), x.zero_point));
    }
    out
}

/// `x[i]` for one window input, `x[i..j]` for several.
fn inputs_name(i: u64, j: u64) -> String {
    if j == i + 1 { format!("x[{i}]") } else { format!("x[{i}..{j}]") }
}

/// The window of codes a pooling counterexample names, in order: the inverse of the `x[i]` /
/// `x[i..j]` inputs this module writes (other inputs, such as the accumulator, are skipped).
pub fn counterexample_window(c: &Counterexample) -> Vec<i64> {
    let mut window = Vec::new();
    for (name, code) in c.inputs.iter().filter(|(n, _)| n.starts_with("x[")) {
        let range = name.trim_start_matches("x[").trim_end_matches(']');
        let count = match range.split_once("..") {
            Some((a, b)) => b.parse::<usize>().ok().zip(a.parse::<usize>().ok()).map_or(1, |(b, a)| b - a),
            None => 1,
        };
        window.extend(std::iter::repeat_n(*code, count));
    }
    window
}

/// Searches inputs whose float sum is exact in every order — `k` copies of one code, the rest at
/// the zero point — for one where the kernel and the reference differ.
fn search_counterexample(p: &PoolParams, class: Class, contract: Contract, fused: &Fused, name: &str) -> Verdict {
    let start = Instant::now();
    let (lo, hi) = p.x.code.range();
    let zx = p.x.zero_point;
    let mut by_distance: Vec<i64> = (lo..=hi).collect();
    by_distance.sort_by_key(|&c| ((c - zx).abs(), c));
    let ks: BTreeSet<u64> = (1..=class.n.min(256)).chain([class.n]).collect();
    let (mut tried, mut differing, mut first) = (0u64, 0u64, None);
    for &k in &ks {
        for &code in &by_distance {
            let Some(reference) = family_reference(p, code, k, class.divisor, contract) else { continue };
            tried += 1;
            let got = fused.family(code, k, p, class.divisor);
            if got != reference {
                differing += 1;
                first.get_or_insert((code, k, reference, got));
            }
        }
    }
    let detail = format!(
        "{name} {} window of {} / {} ({contract:?}): inputs of k copies of one code, the rest at the zero point",
        p.x.code.name(),
        class.n,
        class.divisor
    );
    let Some((code, k, unfused, fused)) = first else {
        let why =
            if contract == Contract::Real { "the kernel's float sum is not provably exact" } else { "the unfused float sum is not provably exact (P2 fails)" };
        return Verdict::Unknown { reason: format!("{detail}: {why} and none of {tried} order-independent inputs differs") };
    };
    let acc = (code - zx) * i64::try_from(k).expect("a window holds at most 2^32 inputs (PoolParams::check)");
    let mut inputs = vec![("acc".to_string(), acc), (inputs_name(0, k), code)];
    if k < class.n {
        inputs.push((inputs_name(k, class.n), zx));
    }
    Verdict::Refuted {
        counterexample: Counterexample { inputs, unfused, fused, exact: exact_text(p, acc, class.divisor), differing },
        proof: Certificate { method: Method::P1Exhaustive, domain: tried, micros: crate::elapsed_micros(start), detail },
    }
}

/// The unfused output for `k` copies of `code` and zero points, when it does not depend on the
/// summation order: under `exact`, when `k·DQ(code)` is exact at every partial sum; under
/// `real`, always (the exact value).
fn family_reference(p: &PoolParams, code: i64, k: u64, divisor: u64, contract: Contract) -> Option<i64> {
    match contract {
        Contract::Real => real_output(p, (code - p.x.zero_point) * i64::try_from(k).ok()?, divisor),
        Contract::Exact => {
            let d = dequantize(code, p.x.scale, p.x.zero_point);
            let dd = Dyadic::from_f32(d)?;
            let units = dd.mant.unsigned_abs().checked_mul(k as u128)?;
            if units > 1 << 24 || !Dyadic::new(i128::try_from(units).expect("units are at most 2^24 here"), dd.exp).is_f32() {
                return None;
            }
            Some(quantize(k as f32 * d / divisor as f32, p.y.scale, p.y.zero_point, p.y.code))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_params::{i8p, u8p};

    #[test]
    fn a_symbolic_width_is_refuted_at_a_concrete_size() {
        // The zero point is added before rounding on x86 (the broken twin's kernel): some window
        // class differs; the search finds a size whose windows reach it, and the same geometry at
        // that size refutes it directly.
        let p = PoolParams { x: u8p(0.5, 128), y: u8p(0.3, 128) };
        let g = geom(&[5, 1], &[3, 3], &[1, 1], &[1, 1, 1, 1], false);
        let v = prove_average_pool_any_size(&p, &g, &[1], Isa::X86Avx512Vnni, Contract::Exact);
        let Verdict::Refuted { counterexample, proof } = &v else { panic!("{v:?}") };
        let n: u64 = proof.detail.split("refuted at size ").nth(1).and_then(|d| d.split(':').next()).and_then(|n| n.parse().ok()).unwrap();
        let at = geom(&[5, n], &[3, 3], &[1, 1], &[1, 1, 1, 1], false);
        assert_eq!(prove_average_pool(&p, &at, Isa::X86Avx512Vnni, Contract::Exact).counterexample(), Some(counterexample));
    }

    fn geom(input: &[u64], kernel: &[u64], strides: &[u64], pads: &[u64], count_include_pad: bool) -> PoolGeometry {
        PoolGeometry {
            input: input.to_vec(),
            kernel: kernel.to_vec(),
            strides: strides.to_vec(),
            pads: pads.to_vec(),
            dilations: vec![1; input.len()],
            ceil_mode: false,
            count_include_pad,
        }
    }

    #[test]
    fn global_kernel_rounds_one_multiplier() {
        // sX = 0.5, sY = 0.25, N = 4: scale = 0.5 / 1.0 = 0.5; acc = Σx − 4·zX.
        let p = PoolParams { x: u8p(0.5, 10), y: u8p(0.25, 3) };
        let k = GlobalPoolKernel::new(&p, 4).unwrap();
        // Codes 11, 12, 13, 10: acc = 6 → 3.0 → 3 + 3 = 6.
        assert_eq!(k.eval(&[11, 12, 13, 10]), 6);
        // acc = 5 → 2.5 → 2 (even) + 3.
        assert_eq!(k.eval(&[11, 12, 12, 10]), 5);
        // acc = −40 → −20 → clamped to 0 − 3 before rounding → 0.
        assert_eq!(k.eval(&[0, 0, 0, 0]), 0);
    }

    #[test]
    fn global_kernel_throwing_conditions_are_not_fused() {
        let p = PoolParams { x: u8p(1.0, 0), y: u8p(1.0 / 512.0, 0) };
        assert!(GlobalPoolKernel::new(&p, 1).is_err(), "scale 512 ≥ 256");
        assert!(GlobalPoolKernel::new(&p, 4).is_ok(), "scale 128");
        assert!(GlobalPoolKernel::new(&p, 1 << 24).is_err(), "image too large");
        let tiny = PoolParams { x: u8p(1e-6, 0), y: u8p(1e4, 0) };
        assert!(GlobalPoolKernel::new(&tiny, 1).is_err(), "scale below 2^-32");
        let negative = PoolParams { x: u8p(-0.5, 0), y: u8p(0.5, 0) };
        assert!(GlobalPoolKernel::new(&negative, 4).is_err(), "a negative scale is below 2^-32");
        assert_eq!(prove_global_average_pool(&p, 1, Contract::Exact).word(), "unknown");
    }

    #[test]
    fn global_pool_with_dyadic_scales_is_proven_over_every_accumulator() {
        // sX = 2^-4, sY = 2^-6, N = 4: every DQ value and partial sum is exact; the kernel's
        // multiplier 2^-4/(2^-6·4) = 1 is exact: fused = unfused for all 1021 accumulators.
        let p = PoolParams { x: u8p(0.0625, 128), y: u8p(0.015625, 128) };
        match prove_global_average_pool(&p, 4, Contract::Exact) {
            Verdict::Exact { proof } => {
                assert_eq!(proof.method, Method::P2Representable);
                assert_eq!(proof.domain, 4 * 255 + 1);
            }
            other => panic!("{other:?}"),
        }
        assert!(prove_global_average_pool(&p, 4, Contract::Real).is_exact());
    }

    use super::counterexample_window as window_of;

    #[test]
    fn global_pool_refutation_names_a_concrete_window() {
        // sX = 2^-3 keeps the float sum exact (P2); the kernel's multiplier fl(sX/(sY·9)) and
        // the unfused `fl(S/9)/sY` round differently next to a tie.
        let p = PoolParams { x: u8p(0.125, 128), y: u8p(0.1, 128) };
        let v = prove_global_average_pool(&p, 9, Contract::Exact);
        let c = v.counterexample().unwrap_or_else(|| panic!("{v:?}"));
        println!("{c}");
        assert_eq!((c.inputs[0].1, c.unfused, c.fused), (-54, 120, 121));
        let window = window_of(c);
        let k = GlobalPoolKernel::new(&p, 9).unwrap();
        assert_eq!(k.accumulate(&window), -54);
        assert_eq!(k.eval(&window), c.fused);
        let unfused = window.iter().fold(0f32, |s, &q| s + dequantize(q, 0.125, 128)) / 9.0;
        assert_eq!(quantize(unfused, 0.1, 128, CodeType::U8), c.unfused);
    }

    #[test]
    fn non_dyadic_scales_are_refuted_by_order_independent_inputs_or_unknown() {
        // sX = 0.03: DQ values are not on a short grid (P2 fails); one code and six zero points
        // sum exactly in any order, and already differ.
        let p = PoolParams { x: u8p(0.03, 128), y: u8p(0.02, 128) };
        let v = prove_global_average_pool(&p, 7, Contract::Exact);
        let c = v.counterexample().unwrap_or_else(|| panic!("{v:?}"));
        println!("{c}");
        assert_eq!(c.inputs[1..], [("x[0]".to_string(), 121), ("x[1..7]".to_string(), 128)]);
        assert_eq!(GlobalPoolKernel::new(&p, 7).unwrap().eval(&window_of(c)), c.fused);
        // The seed's scales: no order-independent input differs, and the float path is not
        // exact, so nothing is claimed either way.
        let seed = PoolParams { x: u8p(0.15, 128), y: u8p(0.37, 128) };
        assert_eq!(prove_global_average_pool(&seed, 49, Contract::Exact).word(), "unknown");
        // Under `real` the integer kernel is deterministic: a full answer over every accumulator.
        assert_ne!(prove_global_average_pool(&seed, 49, Contract::Real).word(), "unknown");
    }

    #[test]
    fn float_path_differs_by_the_zero_point_double_rounding() {
        // 3×3 window, stride 1, pad 1, exclude pad: windows of 4, 6 and 9 inputs. With sX = 2^-1
        // every sum is exact; the fused path adds zY in float before rounding, which moves
        // `t ≈ −7.4999997` onto the tie −7.5 + 128 = 120.5, rounded to even 120.
        let p = PoolParams { x: u8p(0.5, 128), y: u8p(0.3, 128) };
        let g = geom(&[5, 5], &[3, 3], &[1, 1], &[1, 1, 1, 1], false);
        let classes: BTreeSet<(usize, u64)> = g.windows().unwrap().iter().map(|w| (w.inputs.len(), w.divisor)).collect();
        assert_eq!(classes, [(4, 4), (6, 6), (9, 9)].into_iter().collect());
        let v = prove_average_pool(&p, &g, Isa::X86Avx2, Contract::Exact);
        let c = v.counterexample().unwrap_or_else(|| panic!("{v:?}"));
        println!("{c}");
        assert_eq!((c.unfused, c.fused), (121, 120));
        // With zY = 0 the double rounding cannot happen: proven.
        let p0 = PoolParams { x: i8p(0.5, 0), y: i8p(0.3, 0) };
        assert!(prove_average_pool(&p0, &g, Isa::X86Avx2, Contract::Exact).is_exact());
    }

    #[test]
    fn count_include_pad_divides_by_the_kernel_size() {
        let g = geom(&[4, 4], &[3, 3], &[2, 2], &[1, 1, 1, 1], true);
        let w = g.windows().unwrap();
        assert_eq!(w.len(), 4);
        assert!(w.iter().all(|w| w.divisor == 9));
        assert_eq!(w[0].inputs, vec![0, 1, 4, 5]);
        let g = PoolGeometry { count_include_pad: false, ..g };
        assert_eq!(g.windows().unwrap()[0].divisor, 4);
    }

    #[test]
    fn ceil_mode_keeps_the_last_window_inside_the_image() {
        let mut g = geom(&[5], &[2], &[2], &[0, 0], false);
        assert_eq!(g.windows().unwrap().len(), 2);
        g.ceil_mode = true;
        let w = g.windows().unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!(w[2].inputs, vec![4]);
    }

    #[test]
    fn whole_input_kernels_without_pads_take_the_global_path() {
        let p = PoolParams { x: u8p(0.0625, 128), y: u8p(0.015625, 128) };
        let g = geom(&[2, 2], &[2, 2], &[1, 1], &[0, 0, 0, 0], false);
        assert!(matches!(AveragePoolKernel::new(&p, &g, Isa::X86Sse2), Ok(AveragePoolKernel::Global(_))));
        let padded = geom(&[2, 2], &[2, 2], &[1, 1], &[0, 0, 1, 1], false);
        assert!(matches!(AveragePoolKernel::new(&p, &padded, Isa::X86Sse2), Ok(AveragePoolKernel::Float(_))));
        // The global path's throwing conditions make the fusion unsupported.
        let big = PoolParams { x: u8p(1.0, 0), y: u8p(1.0 / 4096.0, 0) };
        assert!(prove_average_pool(&big, &g, Isa::X86Sse2, Contract::Exact).word() == "unknown");
    }

    #[test]
    fn dilations_are_not_modelled() {
        let mut g = geom(&[6, 6], &[2, 2], &[1, 1], &[0, 0, 0, 0], false);
        g.dilations = vec![2, 2];
        let p = PoolParams { x: u8p(0.0625, 128), y: u8p(0.0625, 128) };
        assert_eq!(prove_average_pool(&p, &g, Isa::X86Sse2, Contract::Exact).word(), "unknown");
    }

    #[test]
    fn quantize_value_overflow_differs_per_isa() {
        // y/sY = 3e9 leaves int32: x86's cast gives INT_MIN → qmin, ARM saturates → qmax.
        let y = u8p(1e-9, 0);
        let x86 = FloatPoolKernel { x: u8p(1.0, 0), y, arm: false };
        let arm = FloatPoolKernel { x: u8p(1.0, 0), y, arm: true };
        assert_eq!((x86.quantize_value(3.0), arm.quantize_value(3.0)), (0, 255));
    }

    #[test]
    fn p2_bound() {
        // m = 1 (a power of two): n·255 ≤ 2^24 ⇔ n ≤ 65793 for a zero point at an end.
        assert!(float_sum_is_exact(u8p(0.5, 0), 65793));
        assert!(!float_sum_is_exact(u8p(0.5, 0), 65794));
        // 0.15 has a 24-bit odd mantissa: even two values may not add exactly.
        assert!(!float_sum_is_exact(u8p(0.15, 128), 2));
        assert!(float_sum_is_exact(u8p(0.15, 128), 1) == (128 * Dyadic::from_f32(0.15).unwrap().mant <= 1 << 24));
    }

    #[test]
    fn a_symbolic_image_size_is_refuted_at_the_first_size_that_differs() {
        let v = prove_global_average_pool_any_size(&PoolParams { x: u8p(0.0625, 128), y: u8p(0.075, 128) }, Contract::Exact);
        let Verdict::Refuted { counterexample: c, proof } = &v else { panic!("{v:?}") };
        let n: u64 = proof.detail.split("refuted at ").nth(1).and_then(|d| d.split(' ').next()).and_then(|n| n.parse().ok()).unwrap();
        let at_n = prove_global_average_pool(&PoolParams { x: u8p(0.0625, 128), y: u8p(0.075, 128) }, n, Contract::Exact);
        assert_eq!(at_n.counterexample(), Some(c));
        assert!((1..n).all(|m| prove_global_average_pool(&PoolParams { x: u8p(0.0625, 128), y: u8p(0.075, 128) }, m, Contract::Exact).is_exact()));
        // Equal scales: exact up to 13 elements, the mean of 14 codes then rounds differently.
        let v = prove_global_average_pool_any_size(&PoolParams { x: u8p(0.0625, 128), y: u8p(0.0625, 128) }, Contract::Exact);
        let Verdict::Refuted { proof, .. } = &v else { panic!("{v:?}") };
        assert!(proof.detail.starts_with("the image size is symbolic; refuted at 14 elements"), "{}", proof.detail);
    }
}
