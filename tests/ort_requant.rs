//! Differential tests of qdqc's QLinearConv / QLinearMatMul / QGemm model (`qdqc_ort::requant`)
//! against the real ONNX Runtime 1.31.1 on this machine, with the host's profile
//! (`common::host_isa`; on x86-avx2 the u8×s8 kernel's int16 pair saturation): every output byte
//! of one-node models must equal the model's. Sweeps drive `acc + bias` through whole
//! requantization windows (per-tensor and per-channel, the GEMM and the ConvSym paths, u8 and s8);
//! random realistic shapes cover accumulation and packing; a few unfused QDQ twins check that
//! `prove`'s verdicts hold in ORT itself.
//!
//! One Python process (`tests/oracle/requant.py`, the venv's python from `QDQC_PYTHON`, default
//! `<repo>/target/venv/bin/python`) runs every case; data goes through files in a temp dir.

mod common;

use common::Rng;

use qdqc_exact::reference::CodeType::{self, I8, U8};
use qdqc_exact::{Contract, Counterexample, QParam, Verdict};
use qdqc_ort::Isa;
use qdqc_ort::requant::{Bias, GemmGroup, GemmKind, accumulate, prove, requantize};
use serde_json::{Value, json};
use std::time::Instant;

impl Rng {
    /// Uniform in `[lo, hi]`.
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.int(0, xs.len() as i64 - 1) as usize]
    }

    /// A positive f32 with a random 24-bit mantissa in `[2^lo, 2^hi)`.
    fn scale(&mut self, lo: i32, hi: i32) -> f32 {
        let biased = (self.int(lo as i64, hi as i64 - 1) + 127) as u32;
        f32::from_bits((biased << 23) | (self.next() as u32 & 0x7f_ffff))
    }

    fn codes(&mut self, t: CodeType, n: usize) -> Vec<i64> {
        let (lo, hi) = t.range();
        (0..n).map(|_| self.int(lo, hi)).collect()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Conv { pads: [usize; 4], strides: [usize; 2], dilations: [usize; 2], group: usize },
    MatMul,
    Gemm { alpha: f32, trans_a: bool, trans_b: bool },
}

/// One model for ORT and its expected output from qdqc's model.
#[derive(Clone, Debug)]
struct Case {
    name: String,
    op: Op,
    x_type: CodeType,
    w_type: CodeType,
    x_shape: Vec<usize>,
    x: Vec<i64>,
    w_shape: Vec<usize>,
    w: Vec<i64>,
    x_scale: f32,
    x_zp: i64,
    w_scale: Vec<f32>,
    w_zp: Vec<i64>,
    y_scale: f32,
    y_zp: i64,
    bias: Option<Vec<i64>>,
    level: &'static str,
    /// Run the DQ → Conv/MatMul → Q twin instead of the fused op.
    unfused: bool,
}

fn type_name(t: CodeType) -> &'static str {
    if t == U8 { "u8" } else { "i8" }
}

impl Case {
    fn json(&self) -> Value {
        let bits = |v: &[f32]| v.iter().map(|s| s.to_bits()).collect::<Vec<u32>>();
        let attrs = match &self.op {
            Op::Conv { pads, strides, dilations, group } => json!({"pads": pads, "strides": strides, "dilations": dilations, "group": group}),
            Op::MatMul => json!({}),
            Op::Gemm { alpha, trans_a, trans_b } => json!({"alpha": alpha.to_bits(), "transA": *trans_a as i64, "transB": *trans_b as i64}),
        };
        let group = self.group();
        let b_scale: Vec<f32> = (0..group.channels()).map(|c| self.x_scale * group.w_scale(c)).collect();
        json!({
            "op": match self.op { Op::Conv { .. } => "conv", Op::MatMul => "matmul", Op::Gemm { .. } => "gemm" },
            "x_type": type_name(self.x_type), "w_type": type_name(self.w_type),
            "x_shape": self.x_shape, "x": self.x, "w_shape": self.w_shape, "w": self.w,
            "x_scale": self.x_scale.to_bits(), "x_zp": self.x_zp, "w_scale": bits(&self.w_scale), "w_zp": self.w_zp,
            "y_scale": self.y_scale.to_bits(), "y_zp": self.y_zp, "bias": self.bias, "b_scale": bits(&b_scale),
            "attrs": attrs, "level": self.level, "unfused": self.unfused,
            "w_axis": if matches!(self.op, Op::Conv { .. }) { 0 } else { 1 },
        })
    }

    fn channels(&self) -> usize {
        match &self.op {
            Op::Conv { .. } => self.w_shape[0],
            Op::Gemm { trans_b: true, .. } => self.w_shape[0],
            _ => self.w_shape[1],
        }
    }

    /// The case as the group qdqc proves: weights per output channel in ONNX order.
    fn group(&self) -> GemmGroup {
        let c = self.channels();
        let k = self.w.len() / c;
        let weights: Vec<Vec<i64>> = match &self.op {
            Op::Conv { .. } | Op::Gemm { trans_b: true, .. } => self.w.chunks(k).map(<[i64]>::to_vec).collect(),
            _ => (0..c).map(|n| (0..k).map(|i| self.w[i * c + n]).collect()).collect(),
        };
        let kind = match &self.op {
            Op::Conv { group, .. } => GemmKind::Conv { kernel_size: self.w_shape[2] * self.w_shape[3], groups: *group },
            Op::MatMul => GemmKind::MatMul,
            Op::Gemm { alpha, .. } => GemmKind::Gemm { alpha: *alpha },
        };
        let x = QParam::new(self.x_scale, self.x_zp, self.x_type);
        let y = QParam::new(self.y_scale, self.y_zp, self.x_type);
        let g = GemmGroup::new(kind, x, self.w_type, weights, self.w_scale.clone(), self.w_zp.clone(), y);
        match &self.bias {
            Some(b) => {
                let scales = (0..c).map(|ch| qdqc_ort::requant::accumulator_scale(kind, self.x_scale, g.w_scale(ch))).collect();
                g.with_bias(Bias { codes: b.clone(), scales, zero_points: vec![0], float: None })
            }
            None => g,
        }
    }

    /// qdqc's model of the fused op on the host: its kernel's accumulation (x86-avx2's u8×s8
    /// pairs saturate to int16), then requantization.
    fn expected(&self) -> Vec<i64> {
        self.outputs(true)
    }

    /// The model's outputs, with the host kernel's accumulation or with the exact sum.
    fn outputs(&self, kernel_accumulation: bool) -> Vec<i64> {
        let g = self.group();
        let out = |c: usize, xs: &[i64]| {
            let exact = || xs.iter().zip(&g.weights[c]).map(|(&x, &w)| (x - g.x.zero_point) * (w - g.w_zero_point(c))).sum::<i64>() as i32;
            let acc = if kernel_accumulation { accumulate(&g, c, xs, common::host_isa()) } else { exact() };
            let v = acc.wrapping_add(self.bias.as_ref().map_or(0, |b| b[c]) as i32);
            requantize(v, g.multiplier(c), self.y_zp, self.x_type, common::host_isa())
        };
        match &self.op {
            Op::Conv { pads, strides, dilations, group } => self.conv(&out, *pads, *strides, *dilations, *group),
            Op::MatMul => self.gemm(&out, false),
            Op::Gemm { trans_a, .. } => self.gemm(&out, *trans_a),
        }
    }

    fn conv(&self, out: &dyn Fn(usize, &[i64]) -> i64, pads: [usize; 4], strides: [usize; 2], dil: [usize; 2], group: usize) -> Vec<i64> {
        let [n, cin, h, w] = self.x_shape[..] else { panic!() };
        let [m, cin_g, kh, kw] = self.w_shape[..] else { panic!() };
        let ext = |i: usize, k: usize, d: usize, s: usize, p: usize| (i + p - d * (k - 1) - 1) / s + 1;
        let (oh, ow) = (ext(h + pads[2], kh, dil[0], strides[0], pads[0]), ext(w + pads[3], kw, dil[1], strides[1], pads[1]));
        let mut y = Vec::with_capacity(n * m * oh * ow);
        let mut xs = vec![0; cin_g * kh * kw];
        for b in 0..n {
            for c in 0..m {
                let g0 = c / (m / group) * cin_g;
                for i in 0..oh {
                    for j in 0..ow {
                        for ic in 0..cin_g {
                            for ki in 0..kh {
                                for kj in 0..kw {
                                    let ih = (i * strides[0] + ki * dil[0]) as i64 - pads[0] as i64;
                                    let iw = (j * strides[1] + kj * dil[1]) as i64 - pads[1] as i64;
                                    let inside = (0..h as i64).contains(&ih) && (0..w as i64).contains(&iw);
                                    let at = ((b * cin + g0 + ic) * h + ih.max(0) as usize) * w + iw.max(0) as usize;
                                    xs[(ic * kh + ki) * kw + kj] = if inside { self.x[at] } else { self.x_zp };
                                }
                            }
                        }
                        y.push(out(c, &xs));
                    }
                }
            }
        }
        y
    }

    fn gemm(&self, out: &dyn Fn(usize, &[i64]) -> i64, trans_a: bool) -> Vec<i64> {
        let (rows, k) = if trans_a { (self.x_shape[1], self.x_shape[0]) } else { (self.x_shape[0], self.x_shape[1]) };
        let a = |i: usize, kk: usize| if trans_a { self.x[kk * rows + i] } else { self.x[i * k + kk] };
        let n = self.channels();
        (0..rows).flat_map(|i| (0..n).map(move |c| (i, c))).map(|(i, c)| out(c, &(0..k).map(|kk| a(i, kk)).collect::<Vec<_>>())).collect()
    }
}

fn run_ort(cases: &[Case]) -> Vec<Result<Vec<i64>, String>> {
    common::run_requant_oracle(cases.iter().map(Case::json).collect())
}

fn xrange(t: CodeType) -> Vec<i64> {
    let (lo, hi) = t.range();
    (lo..=hi).collect()
}

/// The first `v` where the requantized output leaves qmin (outputs are non-decreasing in `v`).
fn window_start(m: f32, zy: i64, t: CodeType) -> i64 {
    let qmin = t.range().0;
    qdqc_exact::p3::first_true(i32::MIN as i64, i32::MAX as i64, |v| requantize(v as i32, m, zy, t, common::host_isa()) > qmin).unwrap()
}

/// Output channels of a sweep: 64 × 256 consecutive values of `v`.
const SWEEP_CHANNELS: usize = 64;

/// Conv 1×1 over `cin` channels with 64 output channels where only input channel 0 has
/// weight 1 (the ConvSym path when `cin % 4 == 0` and w is s8): output channel c sees
/// `v = (x − zx) + bias[c]`, and the biases tile 256·cout consecutive values of v from `start`.
fn sweep(rng: &mut Rng, name: &str, (xt, wt): (CodeType, CodeType), cin: usize, scales: (f32, f32, f32), zps: (i64, i64), start: Option<i64>) -> Case {
    let cout = SWEEP_CHANNELS;
    let (sx, sw, sy) = scales;
    let (zx, zy) = zps;
    let m = ort_multiplier(sx, sw, sy);
    let start = start.unwrap_or_else(|| window_start(m, zy, xt) - 64);
    let xmin = xt.range().0;
    let mut x = xrange(xt);
    for _ in 1..cin {
        x.extend(rng.codes(xt, 256));
    }
    let w: Vec<i64> = (0..cout).flat_map(|_| (0..cin).map(|i| i64::from(i == 0))).collect();
    let bias = (0..cout as i64).map(|c| start - (xmin - zx) + 256 * c).collect();
    Case {
        name: name.into(),
        op: Op::Conv { pads: [0; 4], strides: [1, 1], dilations: [1, 1], group: 1 },
        x_type: xt,
        w_type: wt,
        x_shape: vec![1, cin, 16, 16],
        x,
        w_shape: vec![cout, cin, 1, 1],
        w,
        x_scale: sx,
        x_zp: zx,
        w_scale: vec![sw],
        w_zp: vec![0],
        y_scale: sy,
        y_zp: zy,
        bias: Some(bias),
        level: "ORT_ENABLE_ALL",
        unfused: false,
    }
}

/// Per-channel sweep: weights (1, 127) on input channels 0 and 1 of a 256×256 image holding
/// every pair of codes, so each channel's accumulator covers 32 641 consecutive values; the
/// bias puts its requantization window inside them.
fn channel_sweep(rng: &mut Rng, name: &str, (xt, wt): (CodeType, CodeType), cin: usize, cout: usize) -> Case {
    let (lo, hi) = xt.range();
    let zx = rng.int(lo, hi);
    let zy = rng.int(lo, hi);
    let sx = rng.scale(-9, -6);
    let sy = rng.scale(-6, -3);
    // M = sx·sw/sy in [2^-7, 2^-6): windows of at most 32 768 accumulators.
    let w_scale: Vec<f32> = (0..cout).map(|_| rng.scale(-7, -6) * sy / sx).collect();
    let mut x = Vec::new();
    for ic in 0..cin {
        match ic {
            0 => x.extend((0..65536).map(|p| lo + p % 256)),
            1 => x.extend((0..65536).map(|p| lo + p / 256)),
            _ => x.extend(rng.codes(xt, 65536)),
        }
    }
    let w: Vec<i64> = (0..cout).flat_map(|_| (0..cin).map(|i| [1, 127].get(i).copied().unwrap_or(0))).collect();
    let acc_lo = (lo - zx) * 128;
    let bias = (0..cout).map(|c| window_start(ort_multiplier(sx, w_scale[c], sy), zy, xt) - 16 - acc_lo).collect();
    let w_zp = vec![0];
    Case {
        name: name.into(),
        op: Op::Conv { pads: [0; 4], strides: [1, 1], dilations: [1, 1], group: 1 },
        x_type: xt,
        w_type: wt,
        x_shape: vec![1, cin, 256, 256],
        x,
        w_shape: vec![cout, cin, 1, 1],
        w,
        x_scale: sx,
        x_zp: zx,
        w_scale,
        w_zp,
        y_scale: sy,
        y_zp: zy,
        bias: Some(bias),
        level: "ORT_DISABLE_ALL",
        unfused: false,
    }
}

/// The activation / weight / output types ORT's CPU kernels take.
const TYPES: [(CodeType, CodeType); 3] = [(U8, U8), (U8, I8), (I8, I8)];

fn zero_points(rng: &mut Rng, wt: CodeType, n: usize, per_channel: bool, equal: bool) -> Vec<i64> {
    let (lo, hi) = wt.range();
    if !per_channel {
        return vec![rng.int(lo, hi)];
    }
    if equal {
        return vec![rng.int(lo, hi); n];
    }
    (0..n).map(|_| rng.int(lo, hi)).collect()
}

fn random_scales(rng: &mut Rng, n: usize, per_channel: bool) -> (f32, Vec<f32>, f32) {
    let sx = rng.scale(-9, -3);
    let sw = (0..if per_channel { n } else { 1 }).map(|_| rng.scale(-10, -4)).collect();
    (sx, sw, rng.scale(-6, 0))
}

fn random_bias(rng: &mut Rng, n: usize) -> Option<Vec<i64>> {
    match rng.int(0, 3) {
        0 => None,
        1 => Some((0..n).map(|_| rng.int(-(1 << 24) - 100, (1 << 24) + 100)).collect()),
        _ => Some((0..n).map(|_| rng.int(-20000, 20000)).collect()),
    }
}

fn random_conv(rng: &mut Rng, i: usize) -> Case {
    let (xt, wt) = rng.pick(&TYPES);
    let kind = rng.int(0, 3); // 0: dense, 1: grouped, 2: depthwise, 3: ConvSym-friendly
    let (group, cin_g, cout_g) = match kind {
        0 => (1, rng.int(1, 9) as usize, rng.int(1, 12) as usize),
        1 => (2, rng.int(1, 5) as usize, rng.int(1, 6) as usize),
        2 => {
            let c = rng.int(1, 20) as usize;
            (c, 1, 1)
        }
        _ => (1, 4 * rng.int(1, 3) as usize, 16),
    };
    let (cin, cout) = (group * cin_g, group * cout_g);
    let (kh, kw) = (rng.int(1, 3) as usize, rng.int(1, 3) as usize);
    let pads = [0; 4].map(|_| rng.int(0, 1) as usize);
    let strides = [0; 2].map(|_| rng.int(1, 2) as usize);
    let dilations = [0; 2].map(|_| rng.int(1, 2) as usize);
    let (h, w) = (rng.int(((kh - 1) * 2 + 1) as i64, 9) as usize, rng.int(((kw - 1) * 2 + 1) as i64, 9) as usize);
    let n = rng.int(1, 2) as usize;
    let per_channel = rng.int(0, 1) == 1;
    let (sx, w_scale, sy) = random_scales(rng, cout, per_channel);
    // ConvSym needs s8 weights with zero points 0; 1.31.1 takes per-channel ones, equal or not.
    let w_zp = match (kind, rng.int(0, 2)) {
        (3, _) | (_, 0) => vec![0; if per_channel { cout } else { 1 }],
        (_, equal) => zero_points(rng, wt, cout, per_channel, equal == 1),
    };
    Case {
        name: format!("conv {i}"),
        op: Op::Conv { pads, strides, dilations, group },
        x_type: xt,
        w_type: wt,
        x_shape: vec![n, cin, h, w],
        x: rng.codes(xt, n * cin * h * w),
        w_shape: vec![cout, cin_g, kh, kw],
        w: rng.codes(wt, cout * cin_g * kh * kw),
        x_scale: sx,
        x_zp: rng.codes(xt, 1)[0],
        w_scale,
        w_zp,
        y_scale: sy,
        y_zp: rng.codes(xt, 1)[0],
        bias: random_bias(rng, cout),
        level: rng.pick(&["ORT_DISABLE_ALL", "ORT_ENABLE_ALL"]),
        unfused: false,
    }
}

fn random_gemm(rng: &mut Rng, i: usize, gemm: bool) -> Case {
    let (xt, wt) = rng.pick(&TYPES);
    let (m, k, n) = (rng.int(1, 9) as usize, rng.int(1, 70) as usize, rng.int(1, 24) as usize);
    let per_channel = rng.int(0, 1) == 1;
    let (sx, w_scale, sy) = random_scales(rng, n, per_channel);
    let w_zp = zero_points(rng, wt, n, per_channel, false);
    let (op, x_shape, w_shape, bias) = if gemm {
        let alpha = if rng.int(0, 1) == 0 { 1.0 } else { rng.scale(-2, 2) };
        let (trans_a, trans_b) = (rng.int(0, 1) == 1, rng.int(0, 1) == 1);
        let xs = if trans_a { vec![k, m] } else { vec![m, k] };
        let ws = if trans_b { vec![n, k] } else { vec![k, n] };
        (Op::Gemm { alpha, trans_a, trans_b }, xs, ws, random_bias(rng, n))
    } else {
        (Op::MatMul, vec![m, k], vec![k, n], None)
    };
    Case {
        name: format!("{} {i}", if gemm { "gemm" } else { "matmul" }),
        op,
        x_type: xt,
        w_type: wt,
        x_shape,
        x: rng.codes(xt, m * k),
        w_shape,
        w: rng.codes(wt, k * n),
        x_scale: sx,
        x_zp: rng.codes(xt, 1)[0],
        w_scale,
        w_zp,
        y_scale: sy,
        y_zp: rng.codes(xt, 1)[0],
        bias,
        level: rng.pick(&["ORT_DISABLE_ALL", "ORT_ENABLE_ALL"]),
        unfused: false,
    }
}

/// `X_scale_value * W_scale_data[i] / Y_scale_value` (qlinearconv.cc, quantize_linear_matmul.cc),
/// written here independently of the model under test.
fn ort_multiplier(sx: f32, sw: f32, sy: f32) -> f32 {
    sx * sw / sy
}

/// Scales where ORT's `fl(fl(sx·sw)/sy)` differs from `fl(sx·fl(sw/sy))` and from the f64
/// computation, with a `v` in the window where the output shows it: a sweep over them fails
/// any other formula.
fn discriminating_scales(rng: &mut Rng, t: CodeType) -> (f32, f32, f32) {
    loop {
        let (sx, sw, sy) = (rng.scale(-8, -6), rng.scale(-8, -6), rng.scale(-9, -7));
        let m = ort_multiplier(sx, sw, sy);
        let others = [sx * (sw / sy), (sx as f64 * sw as f64 / sy as f64) as f32];
        if others.iter().any(|o| o.to_bits() == m.to_bits()) {
            continue;
        }
        let start = window_start(m, 0, t) - 64;
        let shows =
            |o: f32| (start..start + 256 * 64).any(|v| requantize(v as i32, m, 0, t, common::host_isa()) != requantize(v as i32, o, 0, t, common::host_isa()));
        if others.iter().all(|&o| shows(o)) {
            return (sx, sw, sy);
        }
    }
}

/// QGemm sweep: A = every code in a column, B = 1 in every column, C tiles `v` like `sweep`.
fn gemm_sweep(rng: &mut Rng, t: CodeType) -> Case {
    let (sx, sw, sy, alpha) = loop {
        let (sx, sw, sy, alpha) = (rng.scale(-8, -6), rng.scale(-8, -6), rng.scale(-9, -7), rng.scale(-1, 1));
        // `alpha_ * a_scale_value * b_scale_data[i]`, then `/= y_scale` (quant_gemm.cc): alpha
        // first, which differs here from folding it in last.
        let (m, folded_last) = (alpha * sx * sw / sy, alpha * (sx * sw) / sy);
        let start = window_start(m, 0, t) - 64;
        if (start..start + 256 * 64).any(|v| requantize(v as i32, m, 0, t, common::host_isa()) != requantize(v as i32, folded_last, 0, t, common::host_isa())) {
            break (sx, sw, sy, alpha);
        }
    };
    let mut c = sweep(rng, "", (t, I8), 1, (1.0, 1.0, 1.0), (0, 0), None);
    let m = alpha * sx * sw / sy;
    let start = window_start(m, 0, t) - 64;
    let xmin = t.range().0;
    c.name = format!("qgemm sweep {}", type_name(t));
    c.op = Op::Gemm { alpha, trans_a: false, trans_b: false };
    c.x_shape = vec![256, 1];
    c.x = xrange(t);
    c.w_shape = vec![1, 64];
    c.w = vec![1; 64];
    (c.x_scale, c.w_scale, c.y_scale) = (sx, vec![sw], sy);
    c.bias = Some((0..64).map(|ch| start - xmin + 256 * ch).collect());
    c
}

fn check(cases: &[Case], results: &[Result<Vec<i64>, String>]) -> (usize, usize) {
    let mut outputs = 0;
    for (case, result) in cases.iter().zip(results) {
        let got = result.as_ref().unwrap_or_else(|e| panic!("{}: ORT refused: {e}", case.name));
        let want = case.expected();
        assert_eq!(got.len(), want.len(), "{}: output size", case.name);
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            let diffs = (0..got.len()).filter(|&i| got[i] != want[i]).count();
            let params = (case.x_scale.to_bits(), &case.w_scale, case.y_scale.to_bits(), case.x_zp, &case.w_zp, case.y_zp);
            panic!(
                "{}: output {i}: ORT {} vs model {} ({diffs} of {} differ); {:?} {:?}×{:?} scales/zps {params:?}",
                case.name,
                got[i],
                want[i],
                got.len(),
                case.op,
                case.x_type,
                case.w_type
            );
        }
        outputs += got.len();
    }
    (cases.len(), outputs)
}

#[test]
fn qlinear_kernels_match_onnxruntime_byte_for_byte() {
    let start = Instant::now();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut cases = Vec::new();
    // Whole requantization windows, per tensor: GEMM path (Cin 1) and ConvSym path (Cin 4, s8 w).
    for (i, &(xt, wt)) in TYPES.iter().cycle().take(9).enumerate() {
        let (lo, hi) = xt.range();
        let scales = (rng.scale(-8, -4), rng.scale(-8, -4), 1.0);
        let sy = scales.0 * scales.1 / rng.scale(-6, -5); // M in (2^-6, 2^-5]: windows ≤ 16 384
        let (zx, zy) = (rng.int(lo, hi), rng.int(lo, hi));
        cases.push(sweep(&mut rng, &format!("sweep {i} {}x{}", type_name(xt), type_name(wt)), (xt, wt), 1, (scales.0, scales.1, sy), (zx, zy), None));
        if wt == I8 {
            // u8 × s8 with 4 input channels takes ORT's ConvSym kernels (requantization in asm).
            cases.push(sweep(&mut rng, &format!("cin-4 sweep {i} {}", type_name(xt)), (xt, wt), 4, (scales.0, scales.1, sy), (zx, zy), None));
        }
    }
    // The multiplier's formula: scales where other evaluation orders change outputs.
    for t in [U8, I8] {
        let s = discriminating_scales(&mut rng, t);
        cases.push(sweep(&mut rng, &format!("formula sweep {}", type_name(t)), (t, I8), 1, s, (0, 0), None));
        cases.push(gemm_sweep(&mut rng, t));
    }
    // acc + bias near ±2^24 and beyond, where f32(v) rounds before the multiply.
    for (i, start) in [(1i64 << 24) - 8000, -(1 << 24) - 8000, 1 << 26].into_iter().enumerate() {
        let m = 255.0 / (2.0 * start.abs() as f32);
        cases.push(sweep(&mut rng, &format!("large v {i}"), (U8, I8), 1, (m, 1.0, 1.0), (128, 128), Some(start)));
    }
    // Per-channel windows.
    for (i, &(xt, wt)) in TYPES.iter().enumerate() {
        cases.push(channel_sweep(&mut rng, &format!("channel sweep {i}"), (xt, wt), 2, 8));
    }
    cases.push(channel_sweep(&mut rng, "channel convsym sweep", (U8, I8), 4, 16));
    let sweeps = cases.len();
    for i in 0..60 {
        cases.push(random_conv(&mut rng, i));
        cases.push(random_gemm(&mut rng, i, false));
        cases.push(random_gemm(&mut rng, i, true));
    }
    let results = run_ort(&cases);
    let (n, outputs) = check(&cases, &results);
    let swept: usize = results[..sweeps].iter().map(|r| r.as_ref().map_or(0, Vec::len)).sum();
    // Random full-range u8×s8 convs and GEMMs meet int16 pair saturation: where ORT's kernel has
    // it, the outputs it changes must be among those checked; elsewhere the model has none.
    let saturated: usize = cases.iter().map(|c| c.expected().iter().zip(c.outputs(false)).filter(|(a, b)| **a != *b).count()).sum();
    if common::host_isa() == Isa::X86Avx2 {
        assert!(saturated > 0, "no output changed by int16 pair saturation: the x86-avx2 model went unchecked");
    } else {
        assert_eq!(saturated, 0, "pair saturation modelled on {}", common::host_isa());
    }
    println!(
        "{n} cases ({sweeps} sweeps: {swept} requantized values), {outputs} output bytes equal ({saturated} changed by int16 pair saturation); {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn onnxruntime_rejects_what_the_model_refuses() {
    let mut rng = Rng(7);
    let mut case = random_gemm(&mut rng, 0, false);
    (case.x_type, case.w_type) = (I8, U8);
    case.x = rng.codes(I8, case.x.len());
    case.w = rng.codes(U8, case.w.len());
    (case.x_zp, case.y_zp, case.w_zp) = (0, 0, vec![0]);
    case.w_scale.truncate(1);
    let results = run_ort(std::slice::from_ref(&case));
    assert!(results[0].is_err(), "ORT ran s8 × u8 QLinearMatMul: {:?}", results[0]);
    let v = prove(&case.group(), common::host_isa(), Contract::Real);
    assert!(matches!(&v, Verdict::Unknown { reason } if reason.contains("no CPU kernel")), "{v:?}");
}

/// A MatMul `[rows, K] × [K, N]` case, fused or unfused, from explicit codes.
fn matmul_case(name: &str, g: &GemmGroup, rows: Vec<Vec<i64>>, unfused: bool) -> Case {
    let (k, n) = (g.weights[0].len(), g.channels());
    Case {
        name: name.into(),
        op: Op::MatMul,
        x_type: g.x.code,
        w_type: g.w_code,
        x_shape: vec![rows.len(), k],
        x: rows.concat(),
        w_shape: vec![k, n],
        w: (0..k).flat_map(|i| (0..n).map(move |c| g.weights[c][i])).collect(),
        x_scale: g.x.scale,
        x_zp: g.x.zero_point,
        w_scale: g.w_scales.clone(),
        w_zp: g.w_zero_points.clone(),
        y_scale: g.y.scale,
        y_zp: g.y.zero_point,
        bias: None,
        level: "ORT_DISABLE_ALL",
        unfused,
    }
}

fn counterexample_row(c: &Counterexample, k: usize) -> Vec<i64> {
    let get = |name: &str| c.inputs.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    (0..k).map(|i| get(&format!("x[{i}]")).or(get("x[*]")).unwrap()).collect()
}

/// `prove`'s `exact`-contract verdicts hold in ORT: a proven group gives the unfused graph's bytes
/// on random inputs; a refuted group's counterexample input gives the reported codes in both.
/// Full-range u8 × s8 weights are proven where ORT accumulates exactly and refuted on x86-avx2,
/// whose int16 pair saturation ORT must then show on the counterexample's row.
#[test]
fn exact_contract_verdicts_hold_in_onnxruntime() {
    let mut rng = Rng(0xdead_beef);
    let full: Vec<Vec<i64>> = (0..12).map(|_| rng.codes(I8, 40)).collect();
    // |w| ≤ 64: 2·255·64 < 2^15, so no pair saturates on any profile.
    let small: Vec<Vec<i64>> = (0..12).map(|_| (0..40).map(|_| rng.int(-64, 64)).collect()).collect();
    let q = |s: f32, z: i64| QParam::new(s, z, U8);
    // Power-of-two scales: P2 holds and M is exact. sy = 0.3: P2 holds but fl(v/sy) ≠ fl(f32(v)·M).
    let proven =
        GemmGroup::new(GemmKind::MatMul, q(2f32.powi(-6), 131), I8, small, (0..12).map(|c| 2f32.powi(-5 - c % 3)).collect(), vec![0], q(2f32.powi(-2), 120));
    let pairs = GemmGroup { weights: full, ..proven.clone() };
    let refuted = GemmGroup { y: q(0.3, 120), ..proven.clone() };
    // Generic scales: P2 fails; a single-product input still has a unique float value.
    let generic = GemmGroup::new(
        GemmKind::MatMul,
        q(f32::from_bits(0x3b04_b3a2), 128),
        I8,
        vec![vec![1, 127, -33]],
        vec![f32::from_bits(0x3c23_1245)],
        vec![0],
        q(f32::from_bits(0x3a7d_6521), 128),
    );

    let saturates = common::host_isa() == Isa::X86Avx2;
    let mut groups = vec![("proven", &proven, true), ("full-range weights", &pairs, !saturates), ("sy 0.3", &refuted, false), ("generic", &generic, false)];
    groups.sort_by_key(|&(_, _, exact)| !exact);
    let mut cases = Vec::new();
    let mut refutations = Vec::new();
    for &(name, g, exact) in &groups {
        let v = prove(g, common::host_isa(), Contract::Exact);
        if exact {
            assert!(v.is_exact(), "{name} on {}: {v:?}", common::host_isa());
            let rows: Vec<Vec<i64>> = (0..4096).map(|_| rng.codes(U8, 40)).collect();
            cases.push(matmul_case(name, g, rows.clone(), false));
            cases.push(matmul_case(&format!("{name} unfused"), g, rows, true));
            continue;
        }
        let c = v.counterexample().unwrap_or_else(|| panic!("{name} on {}: {v:?}", common::host_isa())).clone();
        if std::ptr::eq(g, &pairs) {
            assert!(matches!(&v, Verdict::Refuted { proof, .. } if proof.detail.contains("int16")), "{name}: not refuted for pair saturation: {v:?}");
        }
        let row = counterexample_row(&c, g.weights[0].len());
        refutations.push((name, cases.len(), c));
        cases.push(matmul_case(name, g, vec![row.clone()], false));
        cases.push(matmul_case(&format!("{name} unfused"), g, vec![row], true));
    }
    let results = run_ort(&cases);
    let out = |i: usize| results[i].as_ref().unwrap_or_else(|e| panic!("{}: {e}", cases[i].name));
    let proven_cases = 2 * (groups.len() - refutations.len());
    for i in (0..proven_cases).step_by(2) {
        assert_eq!(out(i), out(i + 1), "{}: proven, but fused and unfused differ in ORT", cases[i].name);
        assert_eq!(out(i), &cases[i].expected(), "{}", cases[i].name);
    }
    for (name, i, c) in &refutations {
        let ch = c.inputs[0].1 as usize;
        let (fused, unfused) = (out(*i), out(i + 1));
        assert_eq!((unfused[ch], fused[ch]), (c.unfused, c.fused), "{name}: ORT disagrees with the counterexample {c}");
        assert_eq!(fused, &cases[*i].expected(), "{name}: fused output vs the model");
    }
    println!(
        "on {}: {} groups proven and equal to their unfused twins in ORT, {} refutations reproduced",
        common::host_isa(),
        proven_cases / 2,
        refutations.len()
    );
}

/// QLinearConv with unequal per-channel weight zero points. The 1.25 sources ORT_ENFORCE equal
/// ones (contract §3.4); 1.31.1 runs them and each channel's
/// zero point is honoured, byte for byte as the model computes, for u8 and s8 weights on the
/// dense, grouped and depthwise paths; with power-of-two scales `prove` fires on the host's
/// profile and the unfused DQ → Conv → Q twin gives the same bytes.
#[test]
fn qlinear_conv_honours_unequal_weight_zero_points() {
    let mut rng = Rng(0x5eed_28447);
    let mut cases = Vec::new();
    for (i, &(xt, wt)) in TYPES.iter().cycle().take(12).enumerate() {
        let mut c = random_conv(&mut rng, i);
        let group = [1, 2, c.x_shape[1]][i % 3];
        let (cin_g, cout_g) = if i % 3 == 2 { (1, 1) } else { (rng.int(1, 6) as usize, rng.int(2, 8) as usize) };
        let (cin, cout) = (group * cin_g, group * cout_g);
        let [n, _, h, w] = c.x_shape[..] else { unreachable!() };
        let [_, _, kh, kw] = c.w_shape[..] else { unreachable!() };
        let Op::Conv { pads, strides, dilations, .. } = c.op else { unreachable!() };
        c.op = Op::Conv { pads, strides, dilations, group };
        (c.x_type, c.w_type, c.level) = (xt, wt, "ORT_DISABLE_ALL");
        c.x_shape = vec![n, cin, h, w];
        c.x = rng.codes(xt, n * cin * h * w);
        c.w_shape = vec![cout, cin_g, kh, kw];
        c.w = rng.codes(wt, cout * cin_g * kh * kw);
        c.x_zp = rng.codes(xt, 1)[0];
        c.y_zp = rng.codes(xt, 1)[0];
        c.w_zp = loop {
            let z = zero_points(&mut rng, wt, cout, true, false);
            if z.iter().any(|&v| v != z[0]) {
                break z;
            }
        };
        // Power-of-two scales on the first half (P2 holds, M is exact), random on the rest.
        if i < 6 {
            // |w| ≤ 64 (2·255·64 < 2^15): proven on every profile, x86-avx2's pair saturation
            // included; full-range weights there are `exact_contract_verdicts_hold_in_onnxruntime`'s.
            if (xt, wt) == (U8, I8) {
                c.w = (0..c.w.len()).map(|_| rng.int(-64, 64)).collect();
            }
            c.x_scale = 2f32.powi(-6);
            c.w_scale = (0..cout).map(|k| 2f32.powi(-6 - (k % 3) as i32)).collect();
            c.y_scale = 2f32.powi(-1 - (cin_g * kh * kw).ilog2() as i32 / 2);
            c.bias = c.bias.map(|_| (0..cout).map(|_| rng.int(-5000, 5000)).collect());
        } else {
            (c.x_scale, c.w_scale, c.y_scale) = random_scales(&mut rng, cout, true);
            c.bias = random_bias(&mut rng, cout);
        }
        c.name = format!("unequal zero points {i} ({}×{}, group {group})", type_name(xt), type_name(wt));
        cases.push(c);
    }
    let proven: Vec<Case> = cases[..6]
        .iter()
        .map(|c| {
            let v = prove(&c.group(), common::host_isa(), Contract::Exact);
            assert!(v.is_exact(), "{}: {v:?}", c.name);
            Case { name: format!("{} unfused", c.name), unfused: true, ..c.clone() }
        })
        .collect();
    let results = run_ort(&cases);
    let (n, outputs) = check(&cases, &results);
    let twins = run_ort(&proven);
    for (j, c) in proven.iter().enumerate() {
        let twin = twins[j].as_ref().unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert_eq!(twin, results[j].as_ref().unwrap(), "{}: fused and unfused differ", c.name);
    }
    println!("{n} cases, {outputs} output bytes equal; {} proven cases equal their unfused twins", proven.len());
}
