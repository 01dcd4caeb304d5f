//! Per-token (per-row) dynamic quantization written out in ONNX ops, on the Rust target: the
//! activation's scale and zero point made per row by ReduceMin/ReduceMax and elementwise ops,
//! `QuantizeLinear(x, s, z)` → `DequantizeLinear(·, s, z)` → `MatMul(·, DQ(W))`, into the kernel
//! crate's `DynamicMatMul` with `Granularity::RowBy` (op `qdqc.RowDynamicMatMul`, read only by
//! the Rust code generator): each row's `(s, z)` by the graph's own ops in the graph's order,
//! the codes by QuantizeLinear, one exact i32 GEMM, the correctly rounded f32 of `C·s[m]·sw[n]`.
//!
//! Accepted forms (`docs/row-dynamic-quantization.md` has the evidence). The reductions read the
//! Q's own input `x` over its last axis only (`axes = [-1]` or `[r − 1]`, as an attribute or a
//! constant input), with `keepdims = 1` and a Q/DQ blocked along that axis by a block of at
//! least K (opset 21: scale `[…, 1]`, any rank ≥ 2), or `keepdims = 0` and a rank-2 Q/DQ per
//! axis 0 (scale `[M]`); Q and DQ read the same scale and zero point with the same attributes:
//!
//! - **asymmetric** (u8 or i8), ONNX's DynamicQuantizeLinear function body per row (onnx
//!   `defs/quantization/defs.cc`; `−128` and `[−128, 127]` for i8):
//!   `s = Div(Sub(Max(ReduceMax(x), 0), Min(ReduceMin(x), 0)), c)`,
//!   `z = Cast(Round(Clip(Sub(q0, Div(Min(ReduceMin(x), 0), s)), lo, hi)))` (or Clip after Round);
//! - **symmetric** (the absmax form of SmoothQuant-style per-token quantization, and ONNX
//!   Runtime's own int8 `quantize_dynamic` recipe, `_get_dynamic_input_quantization_params_int8`,
//!   with its reductions per row): `s = Div(ReduceMax(Abs(x)), c)` or
//!   `s = Div(Max(Abs(ReduceMin(x)), Abs(ReduceMax(x))), c)`, either perhaps floored first,
//!   `Div(Max(·, ε), c)` with a positive constant `ε` (SmoothQuant's `clamp(min=1e-5)`, which
//!   keeps an all-zero row defined); the zero point omitted or a constant zero.
//!
//! Not accepted: the reduction over any other axis (a scale that is not one per row of K: the
//! GEMM would weight products inside a sum, as [`super::a8w8`] refutes), the float form of the
//! quantization (`Div → Round → Clip → Cast` instead of QuantizeLinear), a MatMulInteger
//! consumer (ONNX Runtime 1.31 rejects a per-row `a_zero_point`), a Q after the MatMul.
//!
//! Obligation (contract §3.12): [`qdqc_target_rust::row_dynamic::prove`] (the recipe's constants,
//! then [`qdqc_target_rust::dynamic::prove`] with the DQ → MatMul float output: `real` by lemma
//! P4-f, `exact` refused: P2 would depend on a scale made at run time). Registered for the Rust
//! target only.
//!
//! | condition | why |
//! |---|---|
//! | [`layout`]: Q and DQ blocked along the last axis (block ≥ K, scale `[…, 1]`) or rank-2 per axis 0, the same attributes; the reductions over the last axis with the matching `keepdims` | one `(s, z)` per row of K, which the epilogue applies per output row |
//! | [`recipe`]: the scale and zero point are one of the accepted op chains on the Q's own `x`, constants scalars | the kernel computes exactly these ops in this order (`recipe_parameters`) |
//! | [`weights`]: `W` constant 8-bit `[K, N]`, `sw`/`zw` per tensor or per column | the kernel packs the weights once and applies `sw[n]` per column |
//! | `prove`: divisor positive finite, clip bounds within the code type, the i32 bound | `Recipe` is well defined; the accumulator is exact in i32 |
//!
//! Broken twin: `tests/broken` "rust_row_dynamic_codes_by_reciprocal".

use super::group::{Group, absent, channels, constant, constant_codes, constant_f32, constant_ints, explicit_zero_point, tag, var};
use super::{Log, Rewrite, RuleOptions};
use crate::target::Target;
use egg::{Applier, Id, PatternAst, Subst, Symbol};
use qdqc_exact::Verdict;
use qdqc_exact::reference::CodeType;
use qdqc_lang::analysis::{Dim, QdqAnalysis, QdqEGraph};
use qdqc_lang::attr::{AttrValue, Attribute};
use qdqc_lang::term::{FloatOp, Op, Term};
use qdqc_target_rust::dynamic::{DynamicGroup, DynamicOutput};
use qdqc_target_rust::row_dynamic::{Recipe, prove};

/// The fused op's type and domain.
pub const OP: (&str, &str) = ("RowDynamicMatMul", "qdqc");

const NAME: &str = "row-dynamic-matmul";

pub fn rules(options: &RuleOptions, log: &Log) -> Vec<Rewrite> {
    let pattern = "(MatMul ?tm (dq ?td (q ?tq ?x ?s ?z) ?s ?z) (dq ?tw ?w ?sw ?zw))";
    let applier = Fusion { options: options.clone(), log: log.clone() };
    vec![Rewrite::new(NAME, pattern.parse::<egg::Pattern<Term>>().expect("valid pattern"), applier).expect("valid rule")]
}

struct Fusion {
    options: RuleOptions,
    log: Log,
}

/// The e-nodes of class `id` with operator `op` (a class may hold several forms).
fn nodes(eg: &QdqEGraph, id: Id, op: Op) -> impl Iterator<Item = &Term> {
    eg[id].nodes.iter().filter(move |t| t.op == op)
}

fn attr<'a>(eg: &'a QdqEGraph, t: &Term, name: &str) -> Option<&'a AttrValue> {
    let facts = eg.analysis.env.tag(tag(eg, t.args[0])?);
    facts.attributes.iter().find(|a| a.name == name).map(|a| &a.value)
}

/// The one f32 value of a constant scalar (or one-element tensor).
fn scalar(eg: &QdqEGraph, id: Id) -> Option<f32> {
    match constant_f32(eg, id)?.1[..] {
        [v] => Some(v),
        _ => None,
    }
}

/// How the row's reductions are written: `keepdims` (the axes are checked to be the last one).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Reduction {
    keepdims: bool,
}

/// `ReduceMin`/`ReduceMax` (`op`) of `x` over its last axis (rank `rank`), as an attribute
/// (opset < 18) or a constant input.
fn reduce(eg: &QdqEGraph, id: Id, op: FloatOp, x: Id, rank: usize) -> Option<Reduction> {
    nodes(eg, id, Op::Float(op)).find_map(|t| {
        if eg.find(t.args[1]) != eg.find(x) {
            return None;
        }
        let axes: Vec<i64> = match (t.args.get(2), attr(eg, t, "axes")) {
            (Some(&a), _) if !absent(eg, a) => constant_ints(eg, a)?.1.to_vec(),
            (_, Some(AttrValue::Ints(a))) => a.clone(),
            _ => return None, // every axis: a per-tensor reduction, not a row's
        };
        let last = [Some(-1), i64::try_from(rank).ok().map(|r| r - 1)];
        if !(axes.len() == 1 && last.contains(&Some(axes[0]))) {
            return None;
        }
        let keepdims = !matches!(attr(eg, t, "keepdims"), Some(AttrValue::Int(0)));
        Some(Reduction { keepdims })
    })
}

/// `Op(a, b)` of class `id` in either order, `f` deciding each operand pair.
fn binary<T>(eg: &QdqEGraph, id: Id, op: FloatOp, mut f: impl FnMut(Id, Id) -> Option<T>) -> Option<T> {
    nodes(eg, id, Op::Float(op)).find_map(|t| match t.args[..] {
        [_, a, b] => f(a, b).or_else(|| f(b, a)),
        _ => None,
    })
}

fn unary(eg: &QdqEGraph, id: Id, op: Op) -> Option<Id> {
    nodes(eg, id, op).find_map(|t| match t.args[..] {
        [_, a] => Some(a),
        _ => None,
    })
}

/// `Round(v)`: an opaque node of the default domain.
fn round(eg: &QdqEGraph, id: Id) -> Option<Id> {
    nodes(eg, id, Op::Opaque).find_map(|t| {
        let facts = eg.analysis.env.tag(tag(eg, t.args[0])?);
        match (facts.op_type.as_str(), facts.domain.as_str(), &t.args[..]) {
            ("Round", "" | "ai.onnx", [_, a]) => Some(*a),
            _ => None,
        }
    })
}

/// `Clip(v, lo, hi)` with constant integral bounds.
fn clip(eg: &QdqEGraph, id: Id) -> Option<(Id, i32, i32)> {
    nodes(eg, id, Op::Float(FloatOp::Clip)).find_map(|t| match t.args[..] {
        [_, v, lo, hi] => {
            let (lo, hi) = (scalar(eg, lo)?, scalar(eg, hi)?);
            let int = |b: f32| (b.fract() == 0.0 && b.abs() <= 256.0).then_some(b as i32);
            Some((v, int(lo)?, int(hi)?))
        }
        _ => None,
    })
}

/// `Min(ReduceMin(x), 0)` (`max`: `Max(ReduceMax(x), 0)`).
fn clamped(eg: &QdqEGraph, id: Id, max: bool, x: Id, rank: usize) -> Option<Reduction> {
    let (op, red) = if max { (FloatOp::Max, FloatOp::ReduceMax) } else { (FloatOp::Min, FloatOp::ReduceMin) };
    binary(eg, id, op, |r, zero| (scalar(eg, zero)?.to_bits() == 0).then(|| reduce(eg, r, red, x, rank)).flatten())
}

/// The accepted chains of the module header: the recipe and the reductions' layout.
fn recipe(eg: &QdqEGraph, s: &Subst, code: Option<CodeType>, rank: usize) -> Result<(Recipe, Reduction), String> {
    let (x, scale, zp) = (var(s, "?x"), var(s, "?s"), var(s, "?z"));
    let signed = |code: Option<CodeType>| match code {
        Some(CodeType::U8) => Ok(false),
        Some(CodeType::I8) => Ok(true),
        Some(other) => Err(format!("recipe: {} codes (the kernels take 8-bit activations)", other.name())),
        None => Err("recipe: the codes' type is unknown".to_string()),
    };
    let (num, divisor) = nodes(eg, scale, Op::Float(FloatOp::Div))
        .find_map(|t| match t.args[..] {
            [_, n, d] => Some((n, scalar(eg, d)?)),
            _ => None,
        })
        .ok_or("recipe: the scale is not Div(·, a constant scalar)")?;
    // Symmetric: ReduceMax(Abs(x)), or Max(Abs(ReduceMin(x)), Abs(ReduceMax(x))), either perhaps
    // under Max(·, floor) with a positive constant floor.
    let floored = binary(eg, num, FloatOp::Max, |a, e| scalar(eg, e).filter(|f| *f > 0.0).map(|f| (a, f)));
    let (num, floor) = floored.map_or((num, 0f32), |(a, f)| (a, f));
    let abs_max = nodes(eg, num, Op::Float(FloatOp::ReduceMax)).next().and_then(|t| {
        let a = unary(eg, t.args[1], Op::Float(FloatOp::Abs))?;
        (eg.find(a) == eg.find(x)).then_some(())?;
        // The reduction's own input is Abs(x): check its axes on that class.
        reduce(eg, num, FloatOp::ReduceMax, t.args[1], rank)
    });
    let two_abs = || {
        binary(eg, num, FloatOp::Max, |a, b| {
            let lo = reduce(eg, unary(eg, a, Op::Float(FloatOp::Abs))?, FloatOp::ReduceMin, x, rank)?;
            let hi = reduce(eg, unary(eg, b, Op::Float(FloatOp::Abs))?, FloatOp::ReduceMax, x, rank)?;
            (lo == hi).then_some(lo)
        })
    };
    if let Some(red) = abs_max.or_else(two_abs) {
        let zero = absent(eg, zp) || constant_codes(eg, zp).is_some_and(|(_, z)| z.iter().all(|&v| v == 0));
        if !zero {
            return Err("recipe: a symmetric scale with a zero point that is not a constant zero".into());
        }
        return Ok((Recipe::Symmetric { signed: signed(code)?, divisor: divisor.to_bits(), floor: floor.to_bits() }, red));
    }
    // Asymmetric: Sub(Max(ReduceMax(x), 0), mn) with mn = Min(ReduceMin(x), 0).
    let (mn, red) = nodes(eg, num, Op::Float(FloatOp::Sub))
        .find_map(|t| match t.args[..] {
            [_, hi, lo] => {
                let (a, b) = (clamped(eg, hi, true, x, rank)?, clamped(eg, lo, false, x, rank)?);
                (a == b).then_some((lo, a))
            }
            _ => None,
        })
        .ok_or("recipe: the scale's numerator is neither max|x| nor Max(ReduceMax(x), 0) − Min(ReduceMin(x), 0) over the last axis")?;
    let to = nodes(eg, zp, Op::Float(FloatOp::Cast)).find_map(|t| Some((t.args.get(1).copied()?, attr(eg, t, "to")?.clone())));
    let Some((rounded, AttrValue::Int(to))) = to else { return Err("recipe: the zero point is not a Cast of the scale's chain".into()) };
    // The Cast makes the zero point, whose type the codes take.
    let cast = i32::try_from(to).ok().and_then(|t| qdqc_lang::onnx::DataType::try_from(t).ok()).and_then(CodeType::from_dtype);
    if code.is_some() && cast != code {
        return Err(format!("recipe: the zero point is cast to type {to}, the codes are {:?}", code.map(CodeType::name)));
    }
    let signed = signed(cast)?;
    // Round(Clip(v)) or Clip(Round(v)).
    let (v, lo, hi) = round(eg, rounded)
        .and_then(|c| clip(eg, c))
        .or_else(|| clip(eg, rounded).and_then(|(r, lo, hi)| Some((round(eg, r)?, lo, hi))))
        .ok_or("recipe: the zero point is not Round and Clip of the offset")?;
    let offset = nodes(eg, v, Op::Float(FloatOp::Sub))
        .find_map(|t| match t.args[..] {
            [_, q0, d] => {
                let div =
                    nodes(eg, d, Op::Float(FloatOp::Div)).any(|t| matches!(t.args[..], [_, a, b] if eg.find(a) == eg.find(mn) && eg.find(b) == eg.find(scale)));
                div.then(|| scalar(eg, q0)).flatten()
            }
            _ => None,
        })
        .ok_or("recipe: the zero point's offset is not Sub(constant, Div(Min(ReduceMin(x), 0), s))")?;
    Ok((Recipe::Asymmetric { signed, divisor: divisor.to_bits(), offset: offset.to_bits(), lo, hi }, red))
}

/// Condition: one `(s, z)` per row of K: the Q and DQ layouts agree with each other and with the
/// reductions' `keepdims`.
fn layout(eg: &QdqEGraph, s: &Subst, red: Reduction, rank: usize, k: usize) -> Result<(), String> {
    let facts = |v: &str| tag(eg, var(s, v)).map(|t| eg.analysis.env.tag(t).clone()).ok_or("layout: no tag");
    let (q, dq) = (facts("?tq")?, facts("?td")?);
    let norm = |a: Option<i64>| {
        let a = a.unwrap_or(1);
        if a < 0 { a + rank as i64 } else { a }
    };
    let (qa, qb, da, db) = (norm(q.axis), q.block_size.unwrap_or(0), norm(dq.axis), dq.block_size.unwrap_or(0));
    if (qa, qb) != (da, db) {
        return Err(format!("layout: the QuantizeLinear (axis {qa}, block {qb}) and DequantizeLinear (axis {da}, block {db}) differ"));
    }
    match (red.keepdims, qa, qb) {
        (true, a, b) if a == rank as i64 - 1 && b >= k as i64 => Ok(()),
        (false, 0, 0) if rank == 2 => Ok(()),
        _ => Err(format!(
            "layout: reductions with keepdims = {} and a Q/DQ along axis {qa} with block {qb} of a rank-{rank} activation (K = {k}) are not one parameter per row",
            i64::from(red.keepdims)
        )),
    }
}

/// Condition: constant 8-bit `[K, N]` weights, parameters per tensor or per column.
fn weights(eg: &QdqEGraph, s: &Subst) -> Result<DynamicGroup, String> {
    let w = var(s, "?w");
    let (dims, codes) = constant_codes(eg, w).ok_or("weights: not a constant integer tensor")?;
    let w_code = eg[w].data.dtype.and_then(CodeType::from_dtype).ok_or("weights: not integer codes")?;
    let &[k, n] = dims else { return Err(format!("weights: shape {dims:?} is not [K, N]")) };
    let (k, n) = (k as usize, n as usize);
    let (w_scales, w_zero_points, _) = channels(eg, var(s, "?sw"), var(s, "?zw")).map_err(|e| format!("weights: {e}"))?;
    let facts = tag(eg, var(s, "?tw")).map(|t| eg.analysis.env.tag(t).clone()).ok_or("weights: no tag")?;
    let per_column = w_scales.len() == n && facts.axis.unwrap_or(1).rem_euclid(2) == 1 && facts.block_size.unwrap_or(0) == 0;
    if !(w_scales.len() == 1 && constant(eg, var(s, "?sw")).is_some_and(|(_, c)| c.dims.iter().all(|&d| d == 1)) || per_column) {
        return Err(format!(
            "weights: {} scales along axis {:?} (block {:?}) are neither one nor one per column ({n})",
            w_scales.len(),
            facts.axis,
            facts.block_size
        ));
    }
    Ok(DynamicGroup {
        w_code,
        weights: (0..n).map(|c| (0..k).map(|r| codes[r * n + c]).collect()).collect(),
        w_scales,
        w_zero_points,
        output: DynamicOutput::DequantizedFloat,
    })
}

/// The Q's output type: its `output_dtype`, else its zero point's type, else its inferred output
/// type, else u8 (QuantizeLinear's default).
fn codes_type(eg: &QdqEGraph, s: &Subst) -> Option<CodeType> {
    let env = &eg.analysis.env;
    let q = env.tag(tag(eg, var(s, "?tq"))?);
    let dtype = i32::try_from(q.output_dtype)
        .ok()
        .filter(|&d| d != 0)
        .and_then(|d| qdqc_lang::onnx::DataType::try_from(d).ok())
        .or(eg[var(s, "?z")].data.dtype)
        .or_else(|| q.outputs.first().copied().flatten().and_then(|v| env.value(v).dtype))
        .or_else(|| absent(eg, var(s, "?z")).then_some(qdqc_lang::onnx::DataType::Uint8))?;
    CodeType::from_dtype(dtype)
}

/// The activation's rank and static K.
fn activation(eg: &QdqEGraph, x: Id) -> Result<(usize, usize), String> {
    let shape = eg[x].data.shape.clone().ok_or("activation: unknown rank")?;
    match shape.last() {
        _ if shape.len() < 2 => Err(format!("activation: rank {} (MatMul of rank ≥ 2 is modelled)", shape.len())),
        Some(Dim::Known(d)) => Ok((shape.len(), *d as usize)),
        _ => Err("activation: its last dim (K) is not static".into()),
    }
}

impl Applier<Term, QdqAnalysis> for Fusion {
    fn apply_one(&self, eg: &mut QdqEGraph, eclass: Id, s: &Subst, _: Option<&PatternAst<Term>>, _: Symbol) -> Vec<Id> {
        let scale = var(s, "?s");
        // A constant scale is a static group (`a8w8`, `gemm`): nothing to decide here.
        if constant(eg, scale).is_some() {
            return vec![];
        }
        let tags: Vec<Id> = ["?tq", "?td", "?tw"].iter().map(|v| var(s, v)).collect();
        let Some(group) = Group::new(eg, &tags, var(s, "?tm")) else { return vec![] };
        if self.log.decided(NAME, &group.output) {
            return vec![];
        }
        let fused_op = format!("{}.{}", OP.1, OP.0);
        let code = codes_type(eg, s);
        let read = (|| {
            let (rank, k) = activation(eg, var(s, "?x"))?;
            let g = weights(eg, s)?;
            if g.weights.first().map_or(0, Vec::len) != k {
                return Err(format!("weights: K = {} against the activation's {k}", g.weights.first().map_or(0, Vec::len)));
            }
            let (r, red) = recipe(eg, s, code, rank)?;
            layout(eg, s, red, rank, k)?;
            Ok((g, r))
        })();
        let verdict = match &read {
            Ok((g, r)) => prove(g, *r, self.options.contract),
            Err(reason) => Verdict::Unknown { reason: reason.clone() },
        };
        let fired = verdict.is_exact();
        let profiles = self.options.target.profiles();
        group.log(&self.log, NAME, &fused_op, fired, profiles.iter().map(|&p| (p, verdict.clone())).collect());
        let (true, Ok((g, r))) = (fired, read) else { return vec![] };
        let zw = explicit_zero_point(eg, var(s, "?zw"), g.w_code, &format!("{}/qdqc_w_zero_point", group.output));
        let attributes = match r {
            Recipe::Symmetric { signed, divisor, floor } => vec![
                Attribute::int("symmetric", 1),
                Attribute::int("signed", i64::from(signed)),
                Attribute::int("divisor_bits", i64::from(divisor)),
                Attribute::int("floor_bits", i64::from(floor)),
            ],
            Recipe::Asymmetric { signed, divisor, offset, lo, hi } => vec![
                Attribute::int("symmetric", 0),
                Attribute::int("signed", i64::from(signed)),
                Attribute::int("divisor_bits", i64::from(divisor)),
                Attribute::int("offset_bits", i64::from(offset)),
                Attribute::int("clip_lo", i64::from(lo)),
                Attribute::int("clip_hi", i64::from(hi)),
            ],
        };
        let fused = group.add_kernel(eg, OP.0, OP.1, attributes, vec![var(s, "?x"), var(s, "?w"), var(s, "?sw"), zw]);
        eg.union(eclass, fused);
        vec![eclass, fused]
    }
}

/// Whether the options register this family: the Rust target only.
pub fn enabled(options: &RuleOptions) -> bool {
    matches!(options.target, Target::Rust(_))
}
