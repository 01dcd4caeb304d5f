//! MatMul on activations quantized at run time, as ONNX Runtime's `quantize_dynamic` writes it,
//! on the Rust target: `DynamicQuantizeLinear(x) → (x_q, sx, zx)`, `Mul(sx, sw)`,
//! `MatMulInteger(x_q, W, zx[, zw]) → Cast(to float) → Mul(·, Mul(sx, sw))` into the kernel
//! crate's `dynamic::DynamicMatMul` (op `qdqc.DynamicMatMul`, read only by the Rust code
//! generator): the activation quantized as ORT does, one exact i32 GEMM, a per-element float
//! epilogue. A bias `Add` after the group stays a float op of its own.
//!
//! Obligation (contract §3.12): [`qdqc_target_rust::dynamic::prove`] of the constant part under the
//! options' contract with [`DynamicOutput::GraphFloat`]: `exact`: the graph's own IEEE steps
//! `fl(f32(C)·fl(sx·sw))` by construction (`Epilogue::Graph`); `real`: lemma P4-f, the correctly
//! rounded f32 of `C·sx·sw` (`Epilogue::Real`). The per-instance part is the i32 bound over every
//! u8 row and run-time zero point. Registered for the Rust target only: ONNX Runtime runs the
//! authored graph, which is already its kernels.
//!
//! | condition | why |
//! |---|---|
//! | [`operators`]: the DynamicQuantizeLinear and MatMulInteger of the default domain, a Cast to float | the pattern's `opaque` nodes carry their op type in their tag; the epilogue is f32 |
//! | [`weights`]: `W` constant 8-bit codes `[K, N]`, `sw` and `zw` constants per tensor or per column (`[N]`) | the kernel packs the weights once and applies `sw[n]` per column |
//! | [`activation`]: `x` of known rank ≥ 2 whose last dim is K | the kernel quantizes the whole tensor (one `sx`, `zx`) and multiplies `numel / K` rows |
//! | `prove`: the i32 bound `255·Σ_k |w − zw| ≤ i32::MAX` per column, positive finite weight scales, zero points in range | the accumulator is exact in i32 for every u8 row and run-time zero point |
//!
//! Broken twin: `tests/broken` "rust_dynamic_f64_product_rounded_to_f32".

use super::group::{Group, constant, constant_codes, explicit_zero_point, tag, var};
use super::{Log, Rewrite, RuleOptions};
use crate::target::Target;
use egg::{Applier, Id, PatternAst, Subst, Symbol};
use qdqc_exact::Verdict;
use qdqc_exact::reference::CodeType;
use qdqc_lang::analysis::{Dim, QdqAnalysis, QdqEGraph};
use qdqc_lang::attr::{AttrValue, Attribute};
use qdqc_lang::term::{Op, Term};
use qdqc_target_rust::dynamic::{DynamicGroup, DynamicOutput, prove};

/// The fused op's type and domain.
pub const OP: (&str, &str) = ("DynamicMatMul", "qdqc");

/// (rule name, whether MatMulInteger has its weight zero point).
const RULES: [(&str, bool); 2] = [("dynamic-matmul", true), ("dynamic-matmul-no-wzp", false)];

pub fn rules(options: &RuleOptions, log: &Log) -> Vec<Rewrite> {
    RULES
        .into_iter()
        .map(|(name, zw)| {
            let dq = |i: u32| format!("(proj #{i} (opaque ?td ?x))");
            let zw = if zw { " ?zw" } else { "" };
            let pattern = format!("(Mul ?tm (Cast ?tc (opaque ?ti {} ?w {}{zw})) (Mul ?ts {} ?sw))", dq(0), dq(2), dq(1));
            let applier = Fusion { name, zw: !zw.is_empty(), options: options.clone(), log: log.clone() };
            Rewrite::new(name, pattern.parse::<egg::Pattern<Term>>().expect("valid pattern"), applier).expect("valid rule")
        })
        .collect()
}

struct Fusion {
    name: &'static str,
    /// The pattern binds `?zw` (MatMulInteger's fourth input).
    zw: bool,
    options: RuleOptions,
    log: Log,
}

/// Condition: `?td` is DynamicQuantizeLinear, `?ti` MatMulInteger (default domain), `?tc` a Cast
/// to float (`to = 1`). `None`: not this group (another opaque pair), nothing to decide.
fn operators(eg: &QdqEGraph, s: &Subst) -> Option<Result<(), String>> {
    let env = &eg.analysis.env;
    let facts = |v: &str| tag(eg, var(s, v)).map(|t| env.tag(t));
    let standard = |d: &str| matches!(d, "" | "ai.onnx");
    let (d, i, c) = (facts("?td")?, facts("?ti")?, facts("?tc")?);
    if !(d.op_type == "DynamicQuantizeLinear" && standard(&d.domain) && i.op_type == "MatMulInteger" && standard(&i.domain)) {
        return None;
    }
    let to = c.attributes.iter().find(|a| a.name == "to").map(|a| a.value.clone());
    Some(if matches!(to, Some(AttrValue::Int(1))) { Ok(()) } else { Err(format!("operators: the Cast is to {to:?}, not float")) })
}

/// Condition: constant 8-bit `[K, N]` weights, scales and zero points per tensor or per column.
fn weights(eg: &QdqEGraph, s: &Subst, zw: Option<Id>) -> Result<DynamicGroup, String> {
    let w = var(s, "?w");
    let (dims, codes) = constant_codes(eg, w).ok_or("weights: not a constant integer tensor")?;
    let w_code = eg[w].data.dtype.and_then(CodeType::from_dtype).ok_or("weights: not integer codes")?;
    let &[k, n] = dims else { return Err(format!("weights: shape {dims:?} is not [K, N]")) };
    let (k, n) = (k as usize, n as usize);
    let sw = var(s, "?sw");
    let scale_dims = constant(eg, sw).map(|(_, c)| c.dims.clone()).ok_or("weight scale: not a constant")?;
    let per_column = |d: &[i64]| d.iter().product::<i64>() == 1 || d == [n as i64];
    if !per_column(&scale_dims) {
        return Err(format!("weight scale: shape {scale_dims:?} is neither one scale nor one per column ({n})"));
    }
    let w_scales = scale_values(eg, sw)?;
    let zps = match zw {
        Some(z) => {
            let (zdims, zps) = constant_codes(eg, z).ok_or("weight zero point: not a constant integer tensor")?;
            if !per_column(zdims) {
                return Err(format!("weight zero point: shape {zdims:?} is neither one nor one per column ({n})"));
            }
            zps
        }
        None => vec![0],
    };
    Ok(DynamicGroup {
        w_code,
        weights: (0..n).map(|c| (0..k).map(|r| codes[r * n + c]).collect()).collect(),
        w_scales,
        w_zero_points: zps,
        output: DynamicOutput::GraphFloat,
    })
}

/// The f32 values of a constant scale.
fn scale_values(eg: &QdqEGraph, sw: Id) -> Result<Vec<f32>, String> {
    let (_, c) = constant(eg, sw).ok_or("weight scale: not a constant")?;
    let bits = c.f32_bits.as_ref().ok_or("weight scale: not a constant f32 tensor")?;
    Ok(bits.iter().map(|&b| f32::from_bits(b)).collect())
}

/// Condition: the activation's rank is known, at least 2, and its last dim is K.
fn activation(eg: &QdqEGraph, x: Id, k: usize) -> Result<(), String> {
    let shape = eg[x].data.shape.clone().ok_or("activation: unknown rank")?;
    match shape.last() {
        _ if shape.len() < 2 => Err(format!("activation: rank {} (MatMul of rank ≥ 2 is modelled)", shape.len())),
        Some(Dim::Known(d)) if *d as usize == k => Ok(()),
        Some(Dim::Known(d)) => Err(format!("activation: last dim {d}, K = {k}")),
        _ => Err("activation: its last dim (K) is not static".into()),
    }
}

impl Applier<Term, QdqAnalysis> for Fusion {
    fn apply_one(&self, eg: &mut QdqEGraph, eclass: Id, s: &Subst, _: Option<&PatternAst<Term>>, _: Symbol) -> Vec<Id> {
        let Some(ops) = operators(eg, s) else { return vec![] };
        let tags: Vec<Id> = ["?td", "?ts", "?ti", "?tc"].iter().map(|v| var(s, v)).collect();
        let Some(group) = Group::new(eg, &tags, var(s, "?tm")) else { return vec![] };
        if self.log.decided(self.name, &group.output) {
            return vec![];
        }
        let fused_op = format!("{}.{}", OP.1, OP.0);
        let profiles = self.options.target.profiles();
        let zw = self.zw.then(|| var(s, "?zw"));
        let read = ops.and_then(|()| weights(eg, s, zw)).and_then(|g| {
            activation(eg, var(s, "?x"), g.weights.first().map_or(0, Vec::len))?;
            Ok(g)
        });
        let verdict = match &read {
            Ok(g) => prove(g, self.options.contract),
            Err(reason) => Verdict::Unknown { reason: reason.clone() },
        };
        let fired = verdict.is_exact();
        group.log(&self.log, self.name, &fused_op, fired, profiles.iter().map(|&p| (p, verdict.clone())).collect());
        let (true, Ok(g)) = (fired, read) else { return vec![] };
        let zw = match zw {
            Some(z) => z,
            None => {
                let absent = eg.add(Term::leaf(Op::Absent));
                explicit_zero_point(eg, absent, g.w_code, &format!("{}/qdqc_w_zero_point", group.output))
            }
        };
        let real = matches!(self.options.contract, qdqc_exact::Contract::Real);
        let attributes = vec![Attribute::int("correctly_rounded", i64::from(real))];
        let fused = group.add_kernel(eg, OP.0, OP.1, attributes, vec![var(s, "?x"), var(s, "?w"), var(s, "?sw"), zw]);
        eg.union(eclass, fused);
        vec![eclass, fused]
    }
}

/// Whether the options register this family: the Rust target only.
pub fn enabled(options: &RuleOptions) -> bool {
    matches!(options.target, Target::Rust(_))
}
