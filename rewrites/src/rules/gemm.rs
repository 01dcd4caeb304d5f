//! `Q(Conv(DQ(x), DQ(w)[, DQ(b)]))`, `Q(MatMul(DQ(a), DQ(B)))` and `Q(Gemm(DQ(A), DQ(B)[, DQ(C)]))`
//! into ONNX QLinearConv, ONNX QLinearMatMul and com.microsoft QGemm. A MatMul whose B is not a
//! constant (two activations) has its own obligation and conditions: [`matmul_dynamic`]; what
//! follows is about constant weights.
//!
//! Obligation (contract §5.8): [`requant::prove`] on every
//! selected ISA, under the options' contract. Under `exact`: P2, the float reduction is exact
//! in every order and blocking (with the actual constant weights, per channel), then P3, ORT's
//! requantization `sat(rne(fl(f32(acc + b)·M)) + zy)` with `M = fl(fl(sx·sw)/sy)` equals the Q
//! of that value on every reachable accumulator. Under `real`: P3 against the exact rational.
//! On the Rust target: [`qdqc_target_rust::gemm::prove`] instead (the i32 accumulation bound from
//! the weights, then `requant_exact` with the bias at its own scale; P2 and P3 under `exact`),
//! once for all its profiles; the fused node then carries the bias's scale as a tenth input
//! (read by the Rust code generator only); no synthesis and no uint8-weight form (both are ORT's).
//! A MatMul of two activations has no Rust kernel yet: refused.
//! Hazards checked (contract §3.4, §7.2): x86-avx2 u8×s8 int16 pair saturation (from the weights), the bias
//! scale and zero point ORT ignores, `f32(acc)` rounding above
//! 2^24, int32 wrap of `acc + b`.
//!
//! Conditions, each a named function refusing with its name (`unknown`, never fired):
//!
//! | condition | why |
//! |---|---|
//! | [`per_tensor`] activation and output parameters | the kernels take one x and one y scale |
//! | [`constant_weights`], at most 2^22 codes | P2/P3 read every weight of every channel |
//! | [`weight_channels`]: per-tensor, or per output channel along its axis | the kernels apply `w_scale[c]` per output channel |
//! | [`int32_bias`], one code per output channel | the kernels add int32 bias codes per channel |
//! | [`gemm_attributes`]: no `transA`, `beta = 1` with C | QGemm drops beta; transA is not modelled |
//! | `requant::KERNEL_CONDITIONS`: code types, shapes, ranges, finite scales, bias zero point 0 | what ORT's kernels accept (the same on every modelled ISA) |
//! | `requant::BIAS_SCALE` (ORT target): bias scale = `fl(sx·sw)` bitwise | ORT never reads the bias scale (the Rust kernels do) |
//!
//! `real` synthesis: when the model's own scales are not proven on some ISA under `real`,
//! [`requant::synthesize`] looks per channel for an f32 multiplier `M'[c]` near the exact ratio
//! that ORT's kernel realises with `x_scale = y_scale = 1`, `w_scale[c] = M'[c]` (QGemm:
//! `alpha = 1`), proven by P3 against the exact value of the model's own parameters on every
//! selected ISA; zero points, weights and bias codes are kept (the proof replaces the bias-scale
//! condition). The fused node then reads created constants, and the certificate lists `M'`.
//!
//! uint8 weights: when the int8-weight form of a uint8-activation group is refused and `x86-avx2`
//! is selected, the same group with weights `w + 128`, zero points `zw + 128` is proven and fused
//! instead, logged under the `-u8-weights` rule name ([`u8_weights`], with its own obligation
//! table): ORT's u8×u8 kernels never saturate int16 pairs.
//!
//! Broken twins: `tests/broken` "bias_scale_ignored", "requant_through_f32_above_2_pow_24",
//! "per_k_scale_in_gemm_epilogue"; for a non-constant B, "activation_matmul_bounded_by_one_product".

use super::group::{
    Group, channels, constant, constant_ints, decide, explicit_zero_point, f32_constant, int_constant, per_target, qparam, tag, value_name, var,
};
use super::matmul_dynamic;
use super::u8_weights;
use super::{Log, Rewrite, RuleOptions};
use crate::target::Profile;
use egg::{Applier, Id, PatternAst, Subst, Symbol};
use qdqc_exact::reference::CodeType;
use qdqc_exact::{Contract, QParam, Verdict};
use qdqc_lang::analysis::{QdqAnalysis, QdqEGraph};
use qdqc_lang::attr::{AttrValue, Attribute};
use qdqc_lang::onnx::DataType;
use qdqc_lang::term::{Op, Term};
use qdqc_ort::matmul_dynamic as ort_dynamic;
use qdqc_ort::requant::{self, Bias, GemmGroup, GemmKind, Synthesis, column_channels, row_channels};

/// The float op a rule matches.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    Conv,
    MatMul,
    Gemm,
}

impl Target {
    fn onnx(self) -> &'static str {
        match self {
            Target::Conv => "Conv",
            Target::MatMul => "MatMul",
            Target::Gemm => "Gemm",
        }
    }

    /// The fused op: type and domain.
    fn fused(self) -> (&'static str, &'static str) {
        match self {
            Target::Conv => ("QLinearConv", ""),
            Target::MatMul => ("QLinearMatMul", ""),
            Target::Gemm => ("QGemm", "com.microsoft"),
        }
    }

    fn fused_name(self) -> String {
        match self.fused() {
            (op, "") => op.to_string(),
            (op, domain) => format!("{domain}.{op}"),
        }
    }
}

/// (rule name, target, whether the pattern has a DQ'd bias).
const RULES: [(&str, Target, bool); 5] = [
    ("qlinear-conv", Target::Conv, false),
    ("qlinear-conv-bias", Target::Conv, true),
    ("qlinear-matmul", Target::MatMul, false),
    ("qgemm", Target::Gemm, false),
    ("qgemm-bias", Target::Gemm, true),
];

pub fn rules(options: &RuleOptions, log: &Log) -> Vec<Rewrite> {
    RULES
        .into_iter()
        .map(|(name, target, bias)| {
            let b = if bias { " (dq ?tb ?b ?sb ?zb)" } else { "" };
            let pattern = format!("(q ?tq ({} ?to (dq ?tx ?x ?sx ?zx) (dq ?tw ?w ?sw ?zw){b}) ?sy ?zy)", target.onnx());
            let applier = Fusion { target, bias, name, options: options.clone(), log: log.clone() };
            Rewrite::new(name, pattern.parse::<egg::Pattern<Term>>().expect("valid pattern"), applier).expect("valid rule")
        })
        .collect()
}

struct Fusion {
    target: Target,
    bias: bool,
    name: &'static str,
    options: RuleOptions,
    log: Log,
}

/// A matched group: its parameters for the proofs and the fused node's attributes.
struct Matched {
    group: GemmGroup,
    attributes: Vec<Attribute>,
}

/// What the fused node reads instead of the model's scales.
enum Scales {
    /// The model's own: proven as they are.
    Model,
    /// `real` synthesis: `x_scale = y_scale = 1`, `w_scale = M'`.
    Synthesized(Vec<f32>),
}

/// Condition: per-tensor parameters (ORT's kernels take one activation and one output scale).
fn per_tensor(eg: &QdqEGraph, what: &str, codes: Id, scale: Id, zp: Id) -> Result<QParam, String> {
    qparam(eg, Some(codes), scale, zp).map_err(|e| format!("{what} parameters: {e}"))
}

/// Condition: the weights are a constant integer tensor whose codes are kept (the proofs read
/// every weight of every channel). Returns its dims and codes.
fn constant_weights(eg: &QdqEGraph, w: Id) -> Result<(Vec<i64>, Vec<i64>), String> {
    let (dims, codes) = constant_ints(eg, w).ok_or("weights: not a constant integer tensor of at most 2^22 codes")?;
    Ok((dims.to_vec(), codes.to_vec()))
}

/// Condition: weight scales and zero points are per tensor, or per output channel along the
/// axis that holds the channels (`axis` of a rank-`rank` weight); never blocked.
fn weight_channels(eg: &QdqEGraph, s: &Subst, axis: usize, rank: usize) -> Result<(Vec<f32>, Vec<i64>), String> {
    let (scales, zero_points, _) = channels(eg, var(s, "?sw"), var(s, "?zw")).map_err(|e| format!("weight parameters: {e}"))?;
    let dq = tag(eg, var(s, "?tw")).map(|t| eg.analysis.env.tag(t));
    if dq.is_some_and(|t| t.block_size.unwrap_or(0) > 0) {
        return Err("weight parameters: blocked quantization".into());
    }
    let dq_axis = dq.and_then(|t| t.axis).unwrap_or(1);
    let dq_axis = if dq_axis < 0 { dq_axis + rank as i64 } else { dq_axis };
    if scales.len() > 1 && dq_axis != axis as i64 {
        return Err(format!("weight parameters: per-axis along axis {dq_axis}, but output channels are axis {axis}"));
    }
    Ok((scales, zero_points))
}

/// Condition: the bias is a constant int32 tensor with one code per output channel (QGemm also
/// broadcasts a C of one element), its parameters per tensor or per channel along its last axis.
fn int32_bias(eg: &QdqEGraph, s: &Subst, outputs: usize, broadcast: bool) -> Result<Bias, String> {
    let b = var(s, "?b");
    if eg[b].data.dtype != Some(DataType::Int32) {
        return Err("bias: not int32".into());
    }
    let (dims, codes) = constant_ints(eg, b).ok_or("bias: not a constant")?;
    let per_channel = dims.last() == Some(&(outputs as i64)) && dims.iter().rev().skip(1).all(|&d| d == 1);
    let codes = match codes {
        _ if per_channel && (broadcast || dims.len() == 1) => codes.to_vec(),
        [one] if broadcast => vec![*one; outputs],
        _ => return Err(format!("bias: shape {dims:?} is not one code per output channel ({outputs})")),
    };
    let (scales, zero_points, _) = channels(eg, var(s, "?sb"), var(s, "?zb")).map_err(|e| format!("bias parameters: {e}"))?;
    let rank = dims.len() as i64;
    let axis = tag(eg, var(s, "?tb")).and_then(|t| eg.analysis.env.tag(t).axis).unwrap_or(1);
    if scales.len() > 1 && (if axis < 0 { axis + rank } else { axis }) != rank - 1 {
        return Err(format!("bias parameters: per-axis along axis {axis}, not the channels"));
    }
    Ok(Bias { codes, scales, zero_points, float: None })
}

/// Condition (Gemm): QGemm keeps `alpha`, `transA` and `transB` and drops `beta`, so a bias needs
/// `beta = 1`; `transA` is not modelled. Returns `alpha` and `transB`.
fn gemm_attributes(attributes: &[Attribute], bias: bool) -> Result<(f32, bool), String> {
    let float = |name: &str| attributes.iter().find(|a| a.name == name).and_then(|a| if let AttrValue::Float(f) = a.value { Some(f) } else { None });
    let int = |name: &str| attributes.iter().find(|a| a.name == name).and_then(|a| if let AttrValue::Int(i) = a.value { Some(i) } else { None });
    if int("transA").unwrap_or(0) != 0 {
        return Err("Gemm attributes: transA is not modelled".into());
    }
    let beta = float("beta").unwrap_or(1.0);
    if bias && beta != 1.0 {
        return Err(format!("Gemm attributes: beta {beta} ≠ 1 (QGemm drops beta)"));
    }
    Ok((float("alpha").unwrap_or(1.0), int("transB").unwrap_or(0) != 0))
}

impl Fusion {
    /// The group's parameters, or the first condition it fails.
    fn read(&self, eg: &QdqEGraph, s: &Subst, output: Id) -> Result<Matched, String> {
        let x = per_tensor(eg, "activation", var(s, "?x"), var(s, "?sx"), var(s, "?zx"))?;
        let y = per_tensor(eg, "output", output, var(s, "?sy"), var(s, "?zy"))?;
        let (dims, codes) = constant_weights(eg, var(s, "?w"))?;
        let w_code = eg[var(s, "?w")].data.dtype.and_then(CodeType::from_dtype).ok_or("weights: not integer codes")?;
        let target_attributes = tag(eg, var(s, "?to")).map(|t| eg.analysis.env.tag(t).attributes.clone()).unwrap_or_default();
        let (kind, weights, axis, attributes) = match (self.target, &dims[..]) {
            (Target::Conv, [m, _, spatial @ ..]) if !spatial.is_empty() => {
                let groups = target_attributes
                    .iter()
                    .find(|a| a.name == "group")
                    .and_then(|a| if let AttrValue::Int(g) = a.value { Some(g) } else { None })
                    .unwrap_or(1);
                let kind = GemmKind::Conv { kernel_size: spatial.iter().product::<i64>() as usize, groups: groups.max(0) as usize };
                (kind, row_channels(&codes, *m as usize), 0, target_attributes)
            }
            (Target::MatMul, &[k, n]) => (GemmKind::MatMul, column_channels(&codes, k as usize, n as usize), 1, Vec::new()),
            (Target::Gemm, &[a, b]) => {
                let (alpha, trans_b) = gemm_attributes(&target_attributes, self.bias)?;
                let weights = if trans_b { row_channels(&codes, a as usize) } else { column_channels(&codes, a as usize, b as usize) };
                let attributes = vec![Attribute { name: "alpha".into(), value: AttrValue::Float(alpha) }, Attribute::int("transB", i64::from(trans_b))];
                (GemmKind::Gemm { alpha }, weights, usize::from(!trans_b), attributes)
            }
            (target, _) => return Err(format!("weights: shape {dims:?} is not the {} weight shape this rule models", target.onnx())),
        };
        let (w_scales, w_zero_points) = weight_channels(eg, s, axis, dims.len())?;
        let mut group = GemmGroup::new(kind, x, w_code, weights, w_scales, w_zero_points, y);
        if let Some(r) = eg[var(s, "?x")].data.codes {
            group = group.with_x_codes(r.lo, r.hi);
        }
        if self.bias {
            let bias = int32_bias(eg, s, group.channels(), self.target == Target::Gemm)?;
            group = group.with_bias(bias);
        }
        Ok(Matched { group, attributes })
    }

    /// Proves the model's own scales on every ISA; under `real`, falls back to synthesized ones.
    fn verdicts(&self, g: &GemmGroup) -> (Scales, bool, Vec<(Profile, Verdict)>) {
        let key = super::memo::gemm_key(&self.options.memo, self.name, g);
        let contract = self.options.contract;
        let prover = requant::Prover::new(g, contract);
        let prove = per_target(|isa| prover.prove(isa), || qdqc_target_rust::gemm::prove(g, contract));
        let (fired, verdicts) = self.options.memo.decide(&self.options, key, prove);
        // Synthesized scales are ORT's (its requantization multiplier); the Rust kernels
        // requantize the model's own scales exactly.
        let isas = self.options.target.ort_isas();
        if fired || contract != Contract::Real || isas.is_empty() {
            return (Scales::Model, fired, verdicts);
        }
        match requant::synthesize(g, isas) {
            Ok(synthesis) => (Scales::Synthesized(synthesis.w_scales.clone()), true, synthesized(synthesis, &verdicts)),
            Err(why) => (Scales::Model, false, verdicts.into_iter().map(|(isa, v)| (isa, with_synthesis_refusal(v, &why))).collect()),
        }
    }

    /// The fused node's inputs, in the kernel's order; `codes`: the x, w and y code types;
    /// `shifted`: the group's weights and zero points as uint8 codes ([`u8_weights`]).
    fn inputs(&self, eg: &mut QdqEGraph, s: &Subst, codes: [CodeType; 3], scales: &Scales, output: &str, shifted: Option<&GemmGroup>) -> Vec<Id> {
        let zp =
            |eg: &mut QdqEGraph, v: &str, code: CodeType, what: &str| explicit_zero_point(eg, var(s, v), code, &format!("{output}/qdqc_{what}_zero_point"));
        let (zx, zy) = (zp(eg, "?zx", codes[0], "x"), zp(eg, "?zy", codes[2], "y"));
        let (w, mut zw) = match shifted {
            Some(g) => shifted_weights(eg, s, g, output),
            None => (var(s, "?w"), zp(eg, "?zw", codes[1], "w")),
        };
        let (sx, sw, sy) = match scales {
            Scales::Model => (var(s, "?sx"), var(s, "?sw"), var(s, "?sy")),
            Scales::Synthesized(w_scales) => {
                let one = f32_constant(eg, &[1.0], Vec::new(), &format!("{output}/qdqc_unit_scale"));
                let n = w_scales.len();
                let sw = f32_constant(eg, w_scales, vec![n as i64], &format!("{output}/qdqc_w_scale"));
                if self.target == Target::Gemm {
                    // QGemm enforces a b_zero_point of b_scale's shape (contrib_ops/cpu/
                    // quantization/quant_gemm.cc), which the model's DQ guarantees for its own
                    // scales but not for a synthesized [n] next to a per-tensor zero point.
                    let zps = match shifted {
                        Some(g) => g.w_zero_points.clone(),
                        None => channels(eg, var(s, "?sw"), var(s, "?zw")).expect("read when the group matched").1,
                    };
                    let zps: Vec<i64> = (0..n).map(|c| zps[if zps.len() == 1 { 0 } else { c }]).collect();
                    let suffix = if shifted.is_some() { "_u8" } else { "" };
                    zw = int_constant(eg, &zps, codes[1], vec![n as i64], &format!("{output}/qdqc_w_zero_point_{n}{suffix}"));
                }
                (one, sw, one)
            }
        };
        let x = var(s, "?x");
        let mut inputs = match self.target {
            Target::Conv | Target::MatMul => {
                let mut inputs = vec![x, sx, zx, w, sw, zw, sy, zy];
                inputs.extend(self.bias.then(|| var(s, "?b")));
                inputs
            }
            Target::Gemm => {
                let c = if self.bias { var(s, "?b") } else { eg.add(Term::leaf(Op::Absent)) };
                vec![x, sx, zx, w, sw, zw, c, sy, zy]
            }
        };
        // The Rust kernels add the bias at its own scale (`Ratio::with_bias`): its scale travels
        // as a tenth input, which only the Rust code generator reads (ONNX Runtime never sees it).
        if self.bias && matches!(self.options.target, crate::target::Target::Rust(_)) {
            inputs.push(var(s, "?sb"));
        }
        inputs
    }

    /// `qlinear-matmul` with a B that is not a 2-D constant (an activation, a batched constant, or
    /// one too large for its codes to be kept): proven over every code of both reachable ranges
    /// ([`matmul_dynamic`]), which holds for any B.
    fn apply_dynamic(&self, eg: &mut QdqEGraph, eclass: Id, s: &Subst, group: &Group) -> Vec<Id> {
        let fused_op = self.target.fused_name();
        let (g, k) = match matmul_dynamic::read(eg, s, eclass) {
            Ok(read) => read,
            Err(reason) => {
                let verdicts = self.options.target.profiles().iter().map(|&i| (i, Verdict::Unknown { reason: reason.clone() })).collect();
                group.log(&self.log, self.name, &fused_op, false, verdicts);
                return vec![];
            }
        };
        let ort = |isa| match k {
            Some(_) => ort_dynamic::prove(&g, isa, self.options.contract),
            None => ort_dynamic::prove_every_k(&g, isa, self.options.contract),
        };
        let rust = || qdqc_target_rust::matmul_dynamic::prove(&g, k, self.options.contract);
        let (fired, verdicts) = decide(&self.options, per_target(ort, rust));
        group.log(&self.log, self.name, &fused_op, fired, verdicts);
        if !fired {
            return vec![];
        }
        let inputs = self.inputs(eg, s, [g.a.code, g.b.code, g.y.code], &Scales::Model, &group.output, None);
        let (op, domain) = self.target.fused();
        let fused = group.add_kernel(eg, op, domain, Vec::new(), inputs);
        eg.union(eclass, fused);
        vec![eclass, fused]
    }
}

/// Synthesized scales fold QGemm's alpha into the multiplier.
fn fused_attributes(attributes: Vec<Attribute>, scales: &Scales) -> Vec<Attribute> {
    match scales {
        Scales::Model => attributes,
        Scales::Synthesized(_) => attributes.into_iter().map(|a| if a.name == "alpha" { Attribute { value: AttrValue::Float(1.0), ..a } } else { a }).collect(),
    }
}

/// The synthesis's certificates as the decision's verdicts, each saying what the model's own
/// scales gave on that ISA.
fn synthesized(synthesis: Synthesis, model: &[(Profile, Verdict)]) -> Vec<(Profile, Verdict)> {
    synthesis
        .proofs
        .into_iter()
        .map(|(isa, mut proof)| {
            let own = model.iter().find(|(i, _)| *i == Profile::Ort(isa)).map_or(String::new(), |(_, v)| summary(v));
            proof.detail = format!("{}; the model's own scales: {own}", proof.detail);
            (Profile::Ort(isa), Verdict::from(proof))
        })
        .collect()
}

fn summary(v: &Verdict) -> String {
    match (v.counterexample(), v.reason()) {
        (Some(counterexample), _) => format!("refuted ({counterexample})"),
        (_, Some(reason)) => format!("unknown ({reason})"),
        _ => v.word().into(),
    }
}

/// A verdict of the uint8-weight form, with what the int8-weight form gave on that ISA.
fn with_int8_form(v: Verdict, s8: &Verdict) -> Verdict {
    v.annotated(&format!("uint8 weights (codes + 128, zero points + 128); the int8 weights: {}", summary(s8)))
}

/// Created constants for the uint8-weight form: the weights `w + 128` in the authored weight's
/// shape, and the zero points `zw + 128` in the authored zero point's shape (a scalar when it
/// was omitted), each named after the value it is computed from.
fn shifted_weights(eg: &mut QdqEGraph, s: &Subst, g: &GemmGroup, output: &str) -> (Id, Id) {
    let (w, zw) = (var(s, "?w"), var(s, "?zw"));
    let w_dims = constant(eg, w).map(|(_, c)| c.dims.clone()).expect("read as constant weights");
    let w_name = value_name(eg, w).unwrap_or(output).to_string();
    let (zp_dims, zp_name) = match constant(eg, zw) {
        Some((facts, c)) => (c.dims.clone(), format!("{}/qdqc_u8", facts.name)),
        None => (Vec::new(), format!("{w_name}/qdqc_u8_zero_point")),
    };
    // Codes in the authored layout: the group holds them per channel.
    let codes = constant_ints(eg, w).map(|(_, c)| c.iter().map(|v| v + u8_weights::SHIFT).collect::<Vec<i64>>()).expect("read as constant weights");
    let zps: Vec<i64> = if zp_dims.iter().product::<i64>() == g.w_zero_points.len() as i64 { g.w_zero_points.clone() } else { vec![g.w_zero_points[0]] };
    let w_id = int_constant(eg, &codes, CodeType::U8, w_dims, &format!("{w_name}/qdqc_u8"));
    let zw_id = int_constant(eg, &zps, CodeType::U8, zp_dims, &zp_name);
    (w_id, zw_id)
}

/// A refused `real` group's verdict, with why synthesis found no parameters either.
fn with_synthesis_refusal(v: Verdict, why: &str) -> Verdict {
    if v.is_exact() { v } else { v.annotated(&format!("real-contract synthesis: {why}")) }
}

impl Applier<Term, QdqAnalysis> for Fusion {
    fn apply_one(&self, eg: &mut QdqEGraph, eclass: Id, s: &Subst, _: Option<&PatternAst<Term>>, _: Symbol) -> Vec<Id> {
        let mut tags = vec![var(s, "?tx"), var(s, "?tw")];
        tags.extend(self.bias.then(|| var(s, "?tb")));
        tags.push(var(s, "?to"));
        let Some(group) = Group::new(eg, &tags, var(s, "?tq")) else { return vec![] };
        if self.log.decided(self.name, &group.output) || self.log.decided(u8_weights::rule_name(self.name), &group.output) {
            return vec![];
        }
        let fused_op = self.target.fused_name();
        if self.target == Target::MatMul && constant_ints(eg, var(s, "?w")).is_none_or(|(dims, _)| dims.len() != 2) {
            return self.apply_dynamic(eg, eclass, s, &group);
        }
        let matched = match self.read(eg, s, eclass) {
            Ok(m) => m,
            Err(reason) => {
                let verdicts = self.options.target.profiles().iter().map(|&i| (i, Verdict::Unknown { reason: reason.clone() })).collect();
                group.log(&self.log, self.name, &fused_op, false, verdicts);
                return vec![];
            }
        };
        let (mut scales, mut fired, mut verdicts) = self.verdicts(&matched.group);
        let (mut rule, mut shifted) = (self.name, None);
        if !fired && u8_weights::applies(&matched.group, self.options.target.ort_isas()) {
            // The int8-weight form is refused: try the uint8-weight form, and log it, with what
            // the int8 one gave, since its reasons are the ones left to fix.
            let g = u8_weights::shift(&matched.group);
            let int8 = verdicts;
            (scales, fired, verdicts) = self.verdicts(&g);
            verdicts = verdicts.into_iter().zip(int8).map(|((isa, v), (_, s8))| (isa, with_int8_form(v, &s8))).collect();
            (rule, shifted) = (u8_weights::rule_name(self.name), Some(g));
        }
        group.log(&self.log, rule, &fused_op, fired, verdicts);
        if !fired {
            return vec![];
        }
        let g = shifted.as_ref().unwrap_or(&matched.group);
        let inputs = self.inputs(eg, s, [g.x.code, g.w_code, g.y.code], &scales, &group.output, shifted.as_ref());
        let (op, domain) = self.target.fused();
        let fused = group.add_kernel(eg, op, domain, fused_attributes(matched.attributes, &scales), inputs);
        eg.union(eclass, fused);
        vec![eclass, fused]
    }
}
