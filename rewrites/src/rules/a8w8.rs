//! The A8W8 group with per-row activation parameters on the Rust target:
//! `Q(MatMul(DQ(x; sx[m], zx[m]), DQ(w; sw[n], zw[n])))` and `Q(Gemm(…, …[, DQ(b)]))` into the
//! kernel crate's `A8W8` (op `qdqc.A8W8MatMul`, read only by the Rust code generator): one
//! integer GEMM and a per-element exact epilogue. The per-tensor activation is
//! [`super::gemm`]'s group (QLinearMatMul/QGemm); this rule takes what that one refuses for its
//! scales: activation parameters per row (rank 2, axis 0), per token (rank 3, axis 1) or per
//! batch (rank 3, axis 0), and scales along K, which it refutes on a row.
//!
//! Obligation (contract §3.12, §5.8): [`qdqc_target_rust::a8w8::prove`] under the options'
//! contract (`real`: by construction; `exact`: P2 then P3 per distinct row parameter); a scale
//! along K: [`qdqc_target_rust::a8w8::refute_along_k`] (an input row whose accumulator equals
//! the zero-point row's but whose exact output differs). Registered for the Rust target only.
//!
//! | condition | why |
//! |---|---|
//! | [`activation_rows`]: per-axis along M (rank 2 axis 0; rank 3 axis 0 or 1), static scale length | the epilogue applies `sx[m]` per output row; a row reads parameter `(m / inner) % T` |
//! | [`along_k`]: no activation or weight scale varies along K (per-axis or blocked) | it weights the products inside the sum: refuted with a counterexample row |
//! | [`weight_columns`]: weights a constant `[K, N]` (`[N, K]` with transB), parameters per tensor or per column | the kernel packs them once and applies `sw[n]` per column |
//! | [`column_bias`] (Gemm): int32 codes, one per column (or one broadcast), zero point 0 | the kernel adds it per column at its own scale |
//! | Gemm: `alpha = 1`, no transA, `beta = 1` with C | the ratio is `sx·sw/sy` |
//! | output per tensor | one `sy`, `zy` |
//!
//! `a8w8-matmul-float`: `DQ(x)·DQ(w)` → MatMul with no Q (any activation layout above, the
//! per-tensor one included; no bias), into the same op with `float_output = 1`, proven by
//! [`qdqc_target_rust::a8w8::prove_float`] (`real`: the correctly rounded f32 of the exact value,
//! by construction; `exact`: P2 per row parameter and column). A scale along K is refuted the same
//! way, on the correctly rounded f32 outputs.
//!
//! Broken twins: `tests/broken` "rust_a8w8_per_k_scale_folded_per_row",
//! "rust_a8w8_row_zero_point_ignored", "rust_a8w8_float_output_rounded_per_product".

use super::group::{Group, channels, constant, constant_codes, explicit_zero_point, qparam, tag, var};
use super::{Log, Rewrite, RuleOptions};
use crate::target::Target;
use egg::{Applier, Id, PatternAst, Subst, Symbol};
use qdqc_exact::num::Dyadic;
use qdqc_exact::reference::CodeType;
use qdqc_exact::{QParam, Verdict};
use qdqc_lang::analysis::{Dim, QdqAnalysis, QdqEGraph};
use qdqc_lang::attr::{AttrValue, Attribute};
use qdqc_lang::onnx::DataType;
use qdqc_lang::term::{Op, Term};
use qdqc_ort::requant::Bias;
use qdqc_target_rust::a8w8::{AlongK, RowGroup, prove, prove_float, refute_along_k};

/// The fused op's type and domain.
pub const OP: (&str, &str) = ("A8W8MatMul", "qdqc");

/// (rule name, op matched, whether the pattern has a DQ'd bias).
/// The float-output rule: `DQ(x)·DQ(w)` → MatMul with no Q.
const FLOAT: &str = "a8w8-matmul-float";

const RULES: [(&str, &str, bool); 4] =
    [("a8w8-matmul", "MatMul", false), ("a8w8-gemm", "Gemm", false), ("a8w8-gemm-bias", "Gemm", true), (FLOAT, "MatMul", false)];

pub fn rules(options: &RuleOptions, log: &Log) -> Vec<Rewrite> {
    RULES
        .into_iter()
        .map(|(name, op, bias)| {
            let b = if bias { " (dq ?tb ?b ?sb ?zb)" } else { "" };
            let float = name == FLOAT;
            let inner = format!("({op} ?to (dq ?tx ?x ?sx ?zx) (dq ?tw ?w ?sw ?zw){b})");
            let pattern = if float { inner } else { format!("(q ?tq {inner} ?sy ?zy)") };
            let applier = Fusion { gemm: op == "Gemm", bias, float, name, options: options.clone(), log: log.clone() };
            Rewrite::new(name, pattern.parse::<egg::Pattern<Term>>().expect("valid pattern"), applier).expect("valid rule")
        })
        .collect()
}

struct Fusion {
    gemm: bool,
    bias: bool,
    /// No Q after the op: the output is the correctly rounded f32 of the exact value.
    float: bool,
    name: &'static str,
    options: RuleOptions,
    log: Log,
}

/// Per-axis or blocked quantization parameters of one DQ input, as its tag says.
struct Layout {
    scales: Vec<f32>,
    zero_points: Vec<i64>,
    /// `None`: per tensor.
    axis: Option<usize>,
    block: usize,
}

fn layout(eg: &QdqEGraph, s: &Subst, t: &str, scale: &str, zp: &str, rank: usize, what: &str) -> Result<Layout, String> {
    let (scales, zero_points, _) = channels(eg, var(s, scale), var(s, zp)).map_err(|e| format!("{what} parameters: {e}"))?;
    let facts = tag(eg, var(s, t)).map(|t| eg.analysis.env.tag(t).clone());
    let block = facts.as_ref().and_then(|f| f.block_size).unwrap_or(0).max(0) as usize;
    let per_tensor = scales.len() == 1 && block == 0 && constant(eg, var(s, scale)).is_some_and(|(_, c)| c.dims.iter().all(|&d| d == 1));
    let axis = facts.and_then(|f| f.axis).unwrap_or(1);
    let axis = if axis < 0 { axis + rank as i64 } else { axis };
    if !per_tensor && !(0..rank as i64).contains(&axis) {
        return Err(format!("{what} parameters: axis {axis} of a rank-{rank} tensor"));
    }
    Ok(Layout { scales, zero_points, axis: (!per_tensor).then_some(axis as usize), block })
}

/// Condition: the activation's parameters are per tensor or per row; returns the row
/// parameters' `inner` (rows per parameter step: a parameter covers `inner` consecutive rows).
/// A layout along K is left to [`along_k`].
fn activation_rows(eg: &QdqEGraph, x: Id, l: &Layout) -> Result<usize, String> {
    let shape = eg[x].data.shape.clone().ok_or("activation: unknown rank")?;
    let dim = |i: usize| match shape.get(i) {
        Some(Dim::Known(d)) => Some(*d as usize),
        _ => None,
    };
    match (l.axis, l.block, shape.len()) {
        (None, _, _) => Ok(1),
        (Some(_), b, _) if b > 0 => Err(format!("activation parameters: blocked (block size {b}) along an axis other than K")),
        (Some(0), _, 2) | (Some(1), _, 3) => Ok(1),
        (Some(0), _, 3) => dim(1).ok_or_else(|| "activation parameters: per batch of a rank-3 activation whose token count is not static".to_string()),
        (Some(a), _, r) => Err(format!("activation parameters: per-axis along axis {a} of a rank-{r} activation (only M is modelled)")),
    }
}

/// Condition: no scale varies along K. `x_k`: whether the activation's does (its last axis),
/// `w_k`: whether the weight's does (axis `k_axis`).
fn along_k(x: &Layout, x_rank: usize, w: &Layout, k_axis: usize) -> (bool, bool) {
    (x.axis == Some(x_rank - 1), w.axis == Some(k_axis))
}

/// Condition: weights per tensor or per output column (not blocked).
fn weight_columns(w: &Layout, n_axis: usize) -> Result<(), String> {
    match (w.axis, w.block) {
        (None, _) => Ok(()),
        (Some(a), 0) if a == n_axis => Ok(()),
        (Some(a), b) => Err(format!("weight parameters: along axis {a}{}", if b > 0 { format!(", blocked by {b}") } else { String::new() })),
    }
}

/// Condition (Gemm): the bias is int32 codes, one per column or one broadcast, its parameters
/// per tensor or per column.
fn column_bias(eg: &QdqEGraph, s: &Subst, n: usize) -> Result<Bias, String> {
    let b = var(s, "?b");
    if eg[b].data.dtype != Some(DataType::Int32) {
        return Err("bias: not int32".into());
    }
    let (dims, codes) = constant_codes(eg, b).ok_or("bias: not a constant")?;
    let per_column = dims.last() == Some(&(n as i64)) && dims.iter().rev().skip(1).all(|&d| d == 1);
    let codes = match codes.as_slice() {
        _ if per_column => codes.clone(),
        [one] => vec![*one; n],
        _ => return Err(format!("bias: shape {dims:?} is not one code per column ({n})")),
    };
    let (scales, zero_points, _) = channels(eg, var(s, "?sb"), var(s, "?zb")).map_err(|e| format!("bias parameters: {e}"))?;
    if ![1, n].contains(&scales.len()) {
        return Err(format!("bias parameters: {} scales for {n} columns", scales.len()));
    }
    Ok(Bias { codes, scales, zero_points, float: None })
}

/// Condition (Gemm): `alpha = 1`, no transA, `beta = 1` with a bias. Returns transB.
fn gemm_attributes(attributes: &[Attribute], bias: bool) -> Result<bool, String> {
    let float = |name: &str| attributes.iter().find(|a| a.name == name).and_then(|a| if let AttrValue::Float(f) = a.value { Some(f) } else { None });
    let int = |name: &str| attributes.iter().find(|a| a.name == name).and_then(|a| if let AttrValue::Int(i) = a.value { Some(i) } else { None });
    if int("transA").unwrap_or(0) != 0 || float("alpha").unwrap_or(1.0) != 1.0 || (bias && float("beta").unwrap_or(1.0) != 1.0) {
        return Err("Gemm attributes: transA, alpha ≠ 1 or beta ≠ 1 are not modelled".into());
    }
    Ok(int("transB").unwrap_or(0) != 0)
}

/// What a matched group is.
enum Matched {
    /// Another rule's group, not decided here: a per-tensor activation with weights per tensor or
    /// per column ([`super::gemm`]'s; the float rule takes it when the rank is known), or weights
    /// that are not a constant (a MatMul of two activations, `matmul_dynamic`).
    Other,
    Rows {
        group: Box<RowGroup>,
        inner: usize,
        trans_b: bool,
    },
    AlongK(Box<AlongK>),
}

fn pick<T: Copy>(v: &[T], i: usize) -> T {
    v[if v.len() == 1 { 0 } else { i }]
}

impl Fusion {
    fn read(&self, eg: &QdqEGraph, s: &Subst, output: Id) -> Result<Matched, String> {
        let (x, w) = (var(s, "?x"), var(s, "?w"));
        let Some((dims, codes)) = constant_codes(eg, w) else { return Ok(Matched::Other) };
        let Some(x_rank) = eg[x].data.shape.as_ref().map(Vec::len) else {
            // Without a rank only a per-tensor activation can be read: another rule's group.
            let one = constant(eg, var(s, "?sx")).and_then(|(_, c)| c.f32_bits.as_ref()).is_some_and(|b| b.len() == 1);
            return if one { Ok(Matched::Other) } else { Err("activation: unknown rank".into()) };
        };
        if !(2..=3).contains(&x_rank) {
            return Err(format!("activation of rank {x_rank} (2 or 3 are modelled)"));
        }
        let x_code = eg[x].data.dtype.and_then(CodeType::from_dtype).ok_or("activation: not integer codes")?;
        let w_code = eg[w].data.dtype.and_then(CodeType::from_dtype).ok_or("weights: not integer codes")?;
        let &[a, b] = dims else { return Err(format!("weights: shape {dims:?} is not [K, N]")) };
        let (a, b) = (a as usize, b as usize);
        let attributes = tag(eg, var(s, "?to")).map(|t| eg.analysis.env.tag(t).attributes.clone()).unwrap_or_default();
        let trans_b = self.gemm && gemm_attributes(&attributes, self.bias)?;
        let (k, n, k_axis) = if trans_b { (b, a, 1) } else { (a, b, 0) };
        let at = |kk: usize, nn: usize| if trans_b { nn * k + kk } else { kk * n + nn };
        let xl = layout(eg, s, "?tx", "?sx", "?zx", x_rank, "activation")?;
        let wl = layout(eg, s, "?tw", "?sw", "?zw", 2, "weight")?;
        let y = if self.float {
            QParam::new(1.0, 0, CodeType::U8)
        } else {
            qparam(eg, Some(output), var(s, "?sy"), var(s, "?zy")).map_err(|e| format!("output parameters: {e}"))?
        };
        let bias = if self.bias { Some(column_bias(eg, s, n)?) } else { None };
        let x_codes = eg[x].data.codes.map_or(x_code.range(), |r| (r.lo, r.hi));
        let (x_k, w_k) = along_k(&xl, x_rank, &wl, k_axis);
        if x_k || w_k {
            // The first row, every parameter expanded per k (blocked: the block of k).
            let x_param = |kk: usize| {
                if xl.axis.is_none() { 0 } else { kk.checked_div(xl.block).unwrap_or(kk) }
            };
            let blocks = if wl.block > 0 { k.div_ceil(wl.block) } else { k };
            let w_param = |kk: usize, nn: usize| match (wl.axis, wl.block) {
                (None, _) => 0,
                (Some(ax), 0) if ax == k_axis => kk,
                (Some(_), 0) => nn,
                (Some(_), bs) if trans_b => nn * blocks + kk / bs,
                (Some(_), bs) => (kk / bs) * n + nn,
            };
            let what = match (x_k, w_k) {
                (true, true) => "activation and weight scales along K".to_string(),
                (true, false) => {
                    format!("activation scale along K (axis {}{})", x_rank - 1, if xl.block > 0 { format!(", blocks of {}", xl.block) } else { String::new() })
                }
                _ => format!("weight scale along K (axis {k_axis}{})", if wl.block > 0 { format!(", blocks of {}", wl.block) } else { String::new() }),
            };
            let bias_values = match &bias {
                Some(b) => Some(
                    (0..n)
                        .map(|c| Dyadic::int(b.codes[c]).checked_mul(Dyadic::from_f32(pick(&b.scales, c))?))
                        .collect::<Option<Vec<_>>>()
                        .ok_or("bias: a scale that is not finite")?,
                ),
                None => None,
            };
            let g = AlongK {
                what,
                x_code,
                x_codes,
                x_scales: (0..k).map(|kk| xl.scales[x_param(kk)]).collect(),
                x_zero_points: (0..k).map(|kk| xl.zero_points[x_param(kk)]).collect(),
                weights: (0..n).map(|nn| (0..k).map(|kk| codes[at(kk, nn)]).collect()).collect(),
                w_scales: (0..n).map(|nn| (0..k).map(|kk| wl.scales[w_param(kk, nn)]).collect()).collect(),
                w_zero_points: (0..n).map(|nn| (0..k).map(|kk| wl.zero_points[w_param(kk, nn)]).collect()).collect(),
                bias: bias_values,
                y: (!self.float).then_some(y),
            };
            return Ok(Matched::AlongK(Box::new(g)));
        }
        let inner = activation_rows(eg, x, &xl)?;
        weight_columns(&wl, 1 - k_axis)?;
        if xl.axis.is_none() && !self.float {
            return Ok(Matched::Other);
        }
        let group = RowGroup {
            x_code,
            x_codes,
            x_scales: xl.scales,
            x_zero_points: xl.zero_points,
            w_code,
            weights: (0..n).map(|nn| (0..k).map(|kk| codes[at(kk, nn)]).collect()).collect(),
            w_scales: wl.scales,
            w_zero_points: wl.zero_points,
            bias,
            y,
        };
        Ok(Matched::Rows { group: Box::new(group), inner, trans_b })
    }
}

impl Applier<Term, QdqAnalysis> for Fusion {
    fn apply_one(&self, eg: &mut QdqEGraph, eclass: Id, s: &Subst, _: Option<&PatternAst<Term>>, _: Symbol) -> Vec<Id> {
        let mut tags = vec![var(s, "?tx"), var(s, "?tw")];
        tags.extend(self.bias.then(|| var(s, "?tb")));
        tags.push(var(s, "?to"));
        // A MatMul read by a Q is the Q group's (the rules above): the float form would only add
        // a costlier alternative there.
        if self.float && read_by_q(eg, eclass) {
            return vec![];
        }
        let anchor = if self.float { var(s, "?to") } else { var(s, "?tq") };
        let Some(group) = Group::new(eg, &tags, anchor) else { return vec![] };
        if self.log.decided(self.name, &group.output) {
            return vec![];
        }
        let fused_op = format!("{}.{}", OP.1, OP.0);
        let profiles = self.options.target.profiles();
        let refuse = |verdict: Verdict| profiles.iter().map(|&p| (p, verdict.clone())).collect();
        let (g, inner, trans_b) = match self.read(eg, s, eclass) {
            Ok(Matched::Other) => return vec![],
            Ok(Matched::AlongK(g)) => {
                group.log(&self.log, self.name, &fused_op, false, refuse(refute_along_k(&g)));
                return vec![];
            }
            Ok(Matched::Rows { group, inner, trans_b }) => (*group, inner, trans_b),
            Err(reason) => {
                group.log(&self.log, self.name, &fused_op, false, refuse(Verdict::Unknown { reason }));
                return vec![];
            }
        };
        let verdict = if self.float { prove_float(&g, self.options.contract) } else { prove(&g, self.options.contract) };
        let fired = verdict.is_exact();
        group.log(&self.log, self.name, &fused_op, fired, refuse(verdict));
        if !fired {
            return vec![];
        }
        let zp = |eg: &mut QdqEGraph, v: &str, code: CodeType, what: &str| {
            explicit_zero_point(eg, var(s, v), code, &format!("{}/qdqc_{what}_zero_point", group.output))
        };
        let (zx, zw) = (zp(eg, "?zx", g.x_code, "x"), zp(eg, "?zw", g.w_code, "w"));
        let mut inputs = vec![var(s, "?x"), var(s, "?sx"), zx, var(s, "?w"), var(s, "?sw"), zw];
        if !self.float {
            let zy = zp(eg, "?zy", g.y.code, "y");
            inputs.extend([var(s, "?sy"), zy]);
        }
        if self.bias {
            inputs.extend([var(s, "?b"), var(s, "?sb")]);
        }
        let mut attributes = vec![Attribute::int("transB", i64::from(trans_b)), Attribute::int("rows_inner", inner as i64)];
        attributes.extend(self.float.then(|| Attribute::int("float_output", 1)));
        let fused = group.add_kernel(eg, OP.0, OP.1, attributes, inputs);
        eg.union(eclass, fused);
        vec![eclass, fused]
    }
}

/// Whether some `q` in the e-graph quantizes the value of `eclass`.
fn read_by_q(eg: &QdqEGraph, eclass: Id) -> bool {
    let eclass = eg.find(eclass);
    eg[eclass].parents().any(|p| eg[p].nodes.iter().any(|n| n.op == Op::Quantize && n.args.get(1).is_some_and(|&a| eg.find(a) == eclass)))
}

/// Whether the options register this family: the Rust target only (ONNX Runtime has no kernel
/// with a per-row activation scale).
pub fn enabled(options: &RuleOptions) -> bool {
    matches!(options.target, Target::Rust(_))
}
