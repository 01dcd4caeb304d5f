//! ONNX Runtime 1.31's `WeightBiasQuantization` (optimizer/qdq_transformer/weight_bias_quantization.cc)
//! on a float bias, and what it changes.
//!
//! A Conv, ConvTranspose or Gemm whose activation comes from a per-tensor DQ, whose output reaches
//! a Q through Relu/Clip only, and whose bias is a 1-D float initializer gets that bias replaced,
//! at level 1, by `DQ(Cast(Round(Div(b, Mul(x_scale, w_scale))), int32), Mul(x_scale, w_scale))`,
//! which the next level-1 pass constant-folds with ORT's CPU kernels:
//!
//! * `s[c] = fl(sx·sw[c])` (Mul; one scale when the weight is per tensor);
//! * `code[c] = rne(fl(b[c] / s[c]))` (Div, then Round: Eigen's `rint`, ties to even; then Cast
//!   to int32, a plain `static_cast`, undefined outside int32: refused here);
//! * `b'[c] = fl(f32(code[c])·s[c])` (DequantizeLinear; `code` came from an f32, so `f32(code)`
//!   is exact).
//!
//! Where a QDQ selector then fuses the group (QLinearConv, QGemm), the kernel adds `code[c]` to
//! its accumulator: [`quantized_bias`] gives those codes, and `requant::prove` decides the fused
//! group against the model's float `b` (`Bias::float`). Where the node stays float (e.g. a Q with
//! per-channel parameters, which QLinearConv does not take), the float path adds `b'` instead of
//! `b`: [`prove`] decides that change.
//!
//! Obligation of [`prove`] (the rewrite `R → R′`, R adding `b`, R′ adding `b'`):
//!
//! | condition | why |
//! |---|---|
//! | `b'[c] = b[c]` for every channel ⇒ exact, under both contracts | R′ reads the same values as R: the same float computation |
//! | otherwise refuted only at an input with one nonzero product, `fl(a·w + b)` and `fl(fl(a·w) + b)` (FMA or not) giving the same code on each side | there every conforming evaluation of R (and of R′) gives one code: sums with the other, zero, products are exact |
//! | `exact`: R's code ≠ R′'s code | the bits change on the same runtime |
//! | `real`: R's code is the exact rounding of the exact value (DQs and bias exact) and R′'s is not | the exact rounding is lost, and by the bias alone |
//! | alpha = beta = 1, bias codes inside int32, finite values | otherwise the float path has other roundings, or ORT's Cast is undefined: unknown |

use super::requant::{Bias, GemmGroup, GemmKind, rational_text};
use qdqc_exact::num::Dyadic;
use qdqc_exact::reference::{dequantize, quantize, quantize_real};
use qdqc_exact::{Certificate, Contract, Counterexample, Method, QParam, Verdict};
use std::time::Instant;

/// `Mul(x_scale, w_scale)`: the scale ORT puts the bias on.
pub fn bias_scale(sx: f32, sw: f32) -> f32 {
    sx * sw
}

/// `Cast(Round(Div(b, s)), int32)`, or why ORT's Cast has no defined result.
// `q` is integral (rounded) and checked finite and inside int32 first: `as i64` is exact.
#[allow(clippy::cast_possible_truncation)]
pub fn bias_code(b: f32, s: f32) -> Result<i64, String> {
    let q = (b / s).round_ties_even();
    if !q.is_finite() || q < i32::MIN as f32 || q >= -(i32::MIN as f32) {
        return Err(format!("float bias {b:e} / scale {s:e} rounds to {q:e}, outside int32 (ORT's Cast is undefined there)"));
    }
    Ok(q as i64)
}

/// The float the rewritten graph adds: `DQ(code; s, 0)`.
pub fn dequantized_bias(code: i64, s: f32) -> f32 {
    dequantize(code, s, 0)
}

/// The int32 bias ORT makes from the float bias `b` (one per channel) for an activation scale
/// `sx` and weight scales `w_scales` (one, or one per channel), keeping `b` as the value the
/// unfused graph adds.
pub fn quantized_bias(b: &[f32], sx: f32, w_scales: &[f32]) -> Result<Bias, String> {
    let scale = |c: usize| bias_scale(sx, w_scales[if w_scales.len() == 1 { 0 } else { c }]);
    if w_scales.len() != 1 && w_scales.len() != b.len() {
        return Err(format!("{} weight scales for a bias of {}", w_scales.len(), b.len()));
    }
    let codes = b.iter().enumerate().map(|(c, &v)| bias_code(v, scale(c))).collect::<Result<Vec<_>, _>>()?;
    let scales = if w_scales.len() == 1 { vec![scale(0)] } else { (0..b.len()).map(scale).collect() };
    Ok(Bias { codes, scales, zero_points: vec![0], float: Some(b.to_vec()) })
}

/// A Relu (`(0, +inf)`) or a Clip with constant bounds between the node and its Q.
pub type Clamp = (f32, f32);

/// A Conv/Gemm that stays float after WeightBiasQuantization rounded its bias: the group's
/// activation, weights and kind (`group.y` and `group.bias` are not read), the model's float
/// bias, the Relu/Clip steps, and the Q's parameters (one, or one per output channel).
#[derive(Clone, Debug)]
pub struct FloatPath {
    pub group: GemmGroup,
    pub bias: Vec<f32>,
    pub clamps: Vec<Clamp>,
    pub outputs: Vec<QParam>,
}

impl FloatPath {
    fn output(&self, c: usize) -> QParam {
        self.outputs[if self.outputs.len() == 1 { 0 } else { c }]
    }
}

/// Decides the rewrite `b → b'` of a group that stays float, under `contract` (see the table).
pub fn prove(p: &FloatPath, contract: Contract) -> Verdict {
    let start = Instant::now();
    let g = &p.group;
    let channels = g.channels();
    if p.bias.len() != channels || (p.outputs.len() != 1 && p.outputs.len() != channels) {
        return Verdict::Unknown { reason: format!("{} bias values and {} output parameters for {channels} channels", p.bias.len(), p.outputs.len()) };
    }
    let alpha = match g.kind {
        GemmKind::Gemm { alpha } => alpha,
        _ => 1.0,
    };
    if alpha != 1.0 {
        return Verdict::Unknown { reason: format!("alpha {alpha}: the float path scales the products before the bias") };
    }
    let quantized = match quantized_bias(&p.bias, g.x.scale, &g.w_scales) {
        Ok(b) => b,
        Err(why) => return Verdict::Unknown { reason: why },
    };
    let rounded: Vec<f32> =
        (0..channels).map(|c| dequantized_bias(quantized.codes[c], quantized.scales[if quantized.scales.len() == 1 { 0 } else { c }])).collect();
    let changed: Vec<usize> = (0..channels).filter(|&c| rounded[c] != p.bias[c]).collect();
    if changed.is_empty() {
        let detail =
            format!("WeightBiasQuantization: every one of {channels} bias values is round(b/fl(sx·sw))·fl(sx·sw) itself; the float path reads the same values");
        return Verdict::Exact { proof: Certificate { method: Method::P1Exhaustive, domain: channels as u64, micros: crate::elapsed_micros(start), detail } };
    }
    let mut points = 0u64;
    for &c in &changed {
        let (witness, n) = one_hot_witness(p, c, rounded[c], contract);
        points += n;
        if let Some((cx, differing)) = witness {
            let detail = format!(
                "WeightBiasQuantization: channel {c}'s bias {:e} becomes {:e} (code {} at scale fl(sx·sw)); inputs with one nonzero product searched, where every summation order gives one code",
                p.bias[c], rounded[c], quantized.codes[c]
            );
            let proof = Certificate { method: Method::P1Exhaustive, domain: points, micros: crate::elapsed_micros(start), detail };
            return Verdict::Refuted { counterexample: Counterexample { differing, ..cx }, proof };
        }
    }
    let c = changed[0];
    Verdict::Unknown {
        reason: format!(
            "WeightBiasQuantization changes {} bias value(s) (channel {c}: {:e} → {:e}); no input with one nonzero product, among {points}, changes a code under {contract:?}",
            changed.len(),
            p.bias[c],
            rounded[c]
        ),
    }
}

/// The code a float path gives for one nonzero product `a·w` plus `bias`, when every conforming
/// evaluation (an FMA or a product and an add; the zero terms add exactly) gives the same one.
fn unique_code(a: f32, w: f32, bias: f32, clamps: &[Clamp], y: QParam) -> Option<i64> {
    let code = |v: f32| quantize(clamp_f32(v, clamps), y.scale, y.zero_point, y.code);
    let (fused, separate) = (code(a.mul_add(w, bias)), code(a * w + bias));
    (fused == separate).then_some(fused)
}

fn clamp_f32(mut v: f32, clamps: &[Clamp]) -> f32 {
    for &(lo, hi) in clamps {
        v = v.max(lo).min(hi);
    }
    v
}

/// The exact value through the Relu/Clip steps; `None` where an infinite bound binds (a Clip
/// to ±inf, whose f32 result has no exact value).
fn clamp_exact(mut v: Dyadic, clamps: &[Clamp]) -> Option<Dyadic> {
    let less = |a: Dyadic, b: Dyadic| Some(a.checked_add(-b)?.mant < 0);
    for &(lo, hi) in clamps {
        match lo {
            lo if lo.is_finite() => {
                let l = Dyadic::from_f32(lo)?;
                if less(v, l)? {
                    v = l;
                }
            }
            lo if lo > 0.0 => return None,
            _ => {}
        }
        match hi {
            hi if hi.is_finite() => {
                let h = Dyadic::from_f32(hi)?;
                if less(h, v)? {
                    v = h;
                }
            }
            hi if hi < 0.0 => return None,
            _ => {}
        }
    }
    Some(v)
}

/// Searches channel `c`'s inputs with one nonzero product (every reachable code at each distinct
/// weight, and the all-zero-point input) for one where R′ (bias `rounded`) gives another code than
/// the contract's reference. Returns the one with the smallest accumulator, with the number of
/// differing inputs, and the number of inputs tried.
fn one_hot_witness(p: &FloatPath, c: usize, rounded: f32, contract: Contract) -> (Option<(Counterexample, u64)>, u64) {
    let g = &p.group;
    let (y, b) = (p.output(c), p.bias[c]);
    let (zx, sw, zw) = (g.x.zero_point, g.w_scale(c), g.w_zero_point(c));
    let mut seen = std::collections::HashSet::new();
    let mut terms: Vec<(usize, i64)> = vec![];
    for (k, &w) in g.weights[c].iter().enumerate() {
        if w != zw && seen.insert(w) {
            terms.push((k, w));
        }
    }
    let mut best: Option<(Counterexample, i64)> = None;
    let (mut differing, mut tried) = (0u64, 0u64);
    let zero_term = (0usize, zw); // a zero product: the all-zero-point input
    for (k, w) in std::iter::once(zero_term).chain(terms) {
        let wf = dequantize(w, sw, zw);
        for xk in g.x_codes.0..=g.x_codes.1 {
            if w == zw && xk != zx {
                continue;
            }
            tried += 1;
            let a = dequantize(xk, g.x.scale, zx);
            let (Some(before), Some(after)) = (unique_code(a, wf, b, &p.clamps, y), unique_code(a, wf, rounded, &p.clamps, y)) else { continue };
            let acc = (xk - zx) * (w - zw);
            let value = Dyadic::from_f32(g.x.scale)
                .and_then(|sx| Dyadic::int(acc).checked_mul(sx)?.checked_mul(Dyadic::from_f32(sw)?)?.checked_add(Dyadic::from_f32(b)?));
            let reference = match contract {
                Contract::Exact => before,
                Contract::Real => {
                    let Some(r) = value.and_then(|v| clamp_exact(v, &p.clamps)).and_then(|v| quantize_real(v, y.scale, y.zero_point, y.code)) else { continue };
                    if r != before {
                        continue; // R itself misses the exact rounding here: not the bias's doing
                    }
                    r
                }
            };
            if after == reference {
                continue;
            }
            differing += 1;
            if best.as_ref().is_none_or(|(_, a)| (acc.unsigned_abs(), acc < 0) < (a.unsigned_abs(), *a < 0)) {
                let mut inputs = vec![
                    ("channel".to_string(), i64::try_from(c).expect("a channel index is a slice index, below i64::MAX")),
                    ("acc".to_string(), acc),
                    ("x[*]".to_string(), zx),
                ];
                if xk != zx {
                    inputs.push((format!("x[{k}]"), xk));
                }
                let exact = value.zip(Dyadic::from_f32(y.scale)).map(|(v, s)| rational_text(v, s));
                best = Some((Counterexample { inputs, unfused: reference, fused: after, exact, differing: 0 }, acc));
            }
        }
    }
    (best.map(|(cx, _)| (cx, differing)), tried)
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdqc_exact::reference::CodeType::{I8, U8};

    /// A 1×1 Conv over one input channel, weights `w`, activation scale 2^-4 (u8, zero point 128).
    fn conv(w: &[i64], sw: f32) -> GemmGroup {
        let x = QParam::new(0.0625, 128, U8);
        GemmGroup::new(GemmKind::Conv { kernel_size: 1, groups: 1 }, x, I8, w.iter().map(|&v| vec![v]).collect(), vec![sw], vec![0], QParam::new(1.0, 128, U8))
    }

    fn path(bias: f32, sy: f32) -> FloatPath {
        FloatPath { group: conv(&[3, -5], 0.125), bias: vec![bias, 0.0], clamps: vec![], outputs: vec![QParam::new(sy, 128, U8)] }
    }

    #[test]
    fn ort_bias_codes_round_half_to_even_at_the_product_scale() {
        let s = bias_scale(0.0625, 0.125);
        assert_eq!(s, 2f32.powi(-7));
        assert_eq!(bias_code(2.5 * s, s).unwrap(), 2);
        assert_eq!(bias_code(3.5 * s, s).unwrap(), 4);
        assert_eq!(bias_code(-2.5 * s, s).unwrap(), -2);
        assert!(bias_code(1e30, s).unwrap_err().contains("int32"));
        let b = quantized_bias(&[0.3, -0.3], 0.0625, &[0.125, 0.25]).unwrap();
        assert_eq!(b.codes, vec![38, -19]); // 0.3·128 = 38.4, 0.3·64 = 19.2
        assert_eq!(b.scales, vec![2f32.powi(-7), 2f32.powi(-6)]);
    }

    #[test]
    fn a_bias_on_the_product_grid_is_unchanged_under_both_contracts() {
        for contract in [Contract::Exact, Contract::Real] {
            let v = prove(&path(37.0 * 2f32.powi(-7), 0.25), contract);
            assert!(v.is_exact(), "{v:?}");
        }
    }

    #[test]
    fn a_bias_off_the_grid_is_refuted_where_a_boundary_lies_between_b_and_its_rounding() {
        // b = 0.1245 becomes 16·2^-7 = 0.125. Channel 0 adds 3u·2^-7 (u = x − 128); with sy = 1/4
        // the value 0.75 + 0.125 (u = 32) is the tie 3.5, which rounds to 4, while 0.75 + 0.1245
        // rounds to 3: the smallest accumulator where a boundary lies between b and b'.
        let b = 0.1245f32;
        for contract in [Contract::Exact, Contract::Real] {
            let v = prove(&path(b, 0.25), contract);
            let cx = v.counterexample().unwrap_or_else(|| panic!("{contract:?}: {v:?}"));
            // Replay the counterexample: R and R′ on its input, one nonzero product.
            let get = |n: &str| cx.inputs.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
            assert_eq!((get("channel"), get("acc"), get("x[0]")), (Some(0), Some(96), Some(160)), "{cx}");
            let x = get("x[0]").unwrap_or(128);
            let a = dequantize(x, 0.0625, 128);
            let wf = dequantize(3, 0.125, 0);
            let y = QParam::new(0.25, 128, U8);
            let before = unique_code(a, wf, b, &[], y).unwrap();
            let after = unique_code(a, wf, 0.125, &[], y).unwrap();
            assert_ne!(before, after, "{cx}");
            assert_eq!((cx.unfused, cx.fused), (before, after));
        }
    }

    #[test]
    fn relu_and_clip_apply_before_the_q_on_both_sides() {
        let clamps = [(0.0, f32::INFINITY), (-1.0, 0.5)];
        assert_eq!(clamp_f32(-3.0, &clamps), 0.0);
        assert_eq!(clamp_f32(0.75, &clamps), 0.5);
        let d = |x: f32| Dyadic::from_f32(x).unwrap();
        assert_eq!(clamp_exact(d(-3.0), &clamps), Some(d(0.0)));
        assert_eq!(clamp_exact(d(0.75), &clamps), Some(d(0.5)));
        assert_eq!(clamp_exact(d(0.25), &clamps), Some(d(0.25)));
        // Relu clamps R and R′ alike below zero: a bias change that stays negative changes nothing.
        let p = FloatPath { clamps: vec![(0.0, f32::INFINITY)], ..path(-100.0001, 0.25) };
        let v = prove(&FloatPath { group: conv(&[1, 1], 0.125), ..p }, Contract::Exact);
        assert!(matches!(v, Verdict::Unknown { .. }), "{v:?}");
    }
}
