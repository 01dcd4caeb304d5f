//! `--fold-weights`: `DQ(W, s, zp)` of constant initializers becomes a float initializer holding
//! its value, computed with ORT's DequantizeLinear arithmetic. Off by default: it trades model
//! size (4 bytes per element instead of the code's width) for a DQ per run.
//!
//! Obligation (contract §5.4; exact by construction, decided by [`qdqc_exact::fold`]): every element is the reference
//! `fl(f32(q − zp) · s)` of [`qdqc_exact::reference::dequantize`], the formula of ORT's CPU
//! kernel for every layout (per-tensor, per-axis, blocked; one conversion of an exact integer
//! difference, one multiply, no FMA). That holds for 4-, 8- and 16-bit codes with f32 scales and
//! an f32 output: `q − zp` is exact in f32 below 2^24. Other code types (2-bit, int32, float8),
//! other scale types and another `output_dtype` are refused.
//!
//! The values are not the whole story: ORT treats a constant input differently from a computed
//! one. MatMul, Gemm, ConvTranspose, LSTM, GRU, LayerNormalization and Attention pre-pack a
//! constant weight and then sum in another order (measured: a folded DQ → MatMul in an If branch
//! differs from the original in 27 of 32 outputs), and ORT's graph passes fold and fuse around
//! constant initializers. So a table is folded only when every reader is visible in the region
//! and is an elementwise op or a Gather (no pre-packing, no constant-dependent fusion). Broken
//! twin: `tests/broken` "fold_weights_distributed_zero_point".

use super::group::{Group, absent, constant, decide, f32_constant, tag, var};
use super::{Log, Rewrite, RuleOptions};
use egg::{Applier, Id, PatternAst, Subst, Symbol};
use qdqc_exact::Verdict;
use qdqc_exact::fold;
use qdqc_exact::movement::ParamLayout;
use qdqc_exact::reference::CodeType;
use qdqc_lang::analysis::{QdqAnalysis, QdqEGraph};
use qdqc_lang::onnx::DataType;
use qdqc_lang::term::{FloatOp, Op, OpClass, Term};

pub const NAME: &str = "fold-weights";

pub fn rules(options: &RuleOptions, log: &Log) -> Vec<Rewrite> {
    let pattern: egg::Pattern<Term> = "(dq ?t ?w ?s ?z)".parse().expect("valid pattern");
    vec![Rewrite::new(NAME, pattern, FoldWeights { options: options.clone(), log: log.clone() }).expect("valid rule")]
}

struct FoldWeights {
    options: RuleOptions,
    log: Log,
}

/// Why ORT might compute differently once the DQ in `eclass` is a constant, if it might.
fn constant_sensitive_reader(eg: &QdqEGraph, eclass: Id, t: Id) -> Option<String> {
    let env = &eg.analysis.env;
    let out = tag(eg, t).and_then(|t| env.tag(t).outputs.first().copied().flatten());
    if out.is_some_and(|v| env.escaping.contains(&v)) {
        return Some("the table is read outside its region (another region, a subgraph or a graph output)".into());
    }
    eg[eclass].parents().map(|p| eg.id_to_node(p)).find_map(|n| match n.op {
        Op::Float(f) if f.class() == OpClass::Elementwise || f == FloatOp::Gather => None,
        Op::Float(f) => Some(format!("read by {}, whose ORT kernel or graph passes treat a constant input differently (pre-packing, folding)", f.name())),
        _ => Some("read by an op whose handling of a constant input is not known".into()),
    })
}

/// The dims and f32 values of the folded table with the engine's verdict on them, or why it is
/// not folded.
fn folded_table(eg: &QdqEGraph, eclass: Id, s: &Subst) -> Result<(Vec<i64>, Vec<f32>, Verdict), String> {
    let (w, sc, zp) = (var(s, "?w"), var(s, "?s"), var(s, "?z"));
    let (wf, wc) = constant(eg, w).ok_or("the codes are not a constant initializer")?;
    let dtype = wf.dtype.ok_or("the codes have no type")?;
    let code = CodeType::from_dtype(dtype)
        .filter(|&c| fold::covers(c))
        .ok_or_else(|| format!("codes of type {}: folding is shown exact for 4-, 8- and 16-bit integers only", dtype.as_str_name()))?;
    let codes = wc.ints.as_ref().ok_or("the table is too large for its codes to be kept")?;
    let (sf, scc) = constant(eg, sc).ok_or("the scale is not a constant")?;
    if sf.dtype != Some(DataType::Float) {
        return Err(format!("scale of type {}: only f32 scales are folded", sf.dtype.map_or("unknown", |d| d.as_str_name())));
    }
    let scales = scc.f32_bits.as_ref().ok_or("the scale's values are not known")?;
    let zero_points = if absent(eg, zp) {
        vec![0; scales.len()]
    } else {
        constant(eg, zp).and_then(|(_, c)| c.ints.clone()).ok_or("the zero point is not a known constant")?
    };
    let dq = eg.analysis.env.tag(tag(eg, var(s, "?t")).ok_or("DQ without tag")?);
    if !matches!(dq.output_dtype, 0 | 1) {
        return Err(format!("output_dtype {} is not float", dq.output_dtype));
    }
    let layout = ParamLayout::of(&wc.dims, &scc.dims, dq.axis.unwrap_or(1), dq.block_size.unwrap_or(0))?;
    if let Some(reason) = constant_sensitive_reader(eg, eclass, var(s, "?t")) {
        return Err(reason);
    }
    let (values, verdict) = fold::dequantize_table(code, codes, |i| {
        let p = layout.param_index(&wc.dims, &scc.dims, i);
        (f32::from_bits(scales[p]), zero_points[p])
    });
    Ok((wc.dims.clone(), values, verdict))
}

impl Applier<Term, QdqAnalysis> for FoldWeights {
    fn apply_one(&self, eg: &mut QdqEGraph, eclass: Id, s: &Subst, _: Option<&PatternAst<Term>>, _: Symbol) -> Vec<Id> {
        let Some(group) = Group::new(eg, &[], var(s, "?t")) else { return vec![] };
        if self.log.decided(NAME, &group.output) {
            return vec![];
        }
        let folded = folded_table(eg, eclass, s);
        let verdict = match &folded {
            Ok((_, _, verdict)) => verdict.clone(),
            Err(reason) => Verdict::Unknown { reason: reason.clone() },
        };
        let (fired, verdicts) = decide(&self.options, |_| verdict.clone());
        group.log(&self.log, NAME, "initializer (f32)", fired, verdicts);
        let (true, Ok((dims, values, _))) = (fired, folded) else { return vec![] };
        // The initializer takes the DQ output's name, so every reader (subgraphs included) sees it.
        let table = f32_constant(eg, &values, dims, &group.output);
        eg.union(eclass, table);
        vec![eclass, table]
    }
}
