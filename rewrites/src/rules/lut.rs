//! `DQ → Sigmoid → Q`, `DQ → LeakyRelu → Q`, `Where(c, DQ(x), DQ(y)) → Q` and
//! `Concat(DQ(x₀), …) → Q` into com.microsoft QLinearSigmoid, QLinearLeakyRelu, QLinearWhere and
//! QLinearConcat: ORT's lookup-table kernels (`qdqc_ort::lut`).
//!
//! Obligations (contract §5.6):
//! * **qlinear-sigmoid**: target axiom [`lut::SIGMOID_AXIOM`] on x86 (the table is built by
//!   `MlasComputeLogistic`, the routine the float Sigmoid runs, on bit-identical DQ values);
//!   unknown on arm64-neon, whose generic kernel computes a chunk's tail elements with other
//!   arithmetic than the vector body that builds the table. Broken twin: `tests/broken`
//!   "qlinear_sigmoid_on_arm_without_axiom".
//! * **qlinear-leaky-relu**: P1 over the 256 input codes, the table against the contract's
//!   reference (under `exact` equal by construction; under `real` refuted where DQ's f32 rounding
//!   crosses a tie). Broken twin: "qlinear_leaky_relu_table_claimed_real".
//! * **qlinear-where**, **qlinear-concat-N** (N inputs, 2 to 4): P1 per input over its codes,
//!   with the copy or the identity table that ORT picks (`==` on the scales). Hazard: the copy
//!   differs from `Q(DQ(q))` when DQ overflows. Broken twin:
//!   "qlinear_concat_copy_with_overflowing_scale".
//!
//! On the Rust target: [`qdqc_target_rust::lut::prove`] — the kernel is a table of the contract's
//! reference, by construction for LeakyRelu, Where and Concat; Sigmoid (a library function) is
//! refused under both contracts.
//!
//! Before proving, each rule checks what ORT's kernels accept: one 8-bit code type for every
//! quantized tensor (the kernels index tables by the raw byte and enforce equal zero-point types),
//! per-tensor parameters that are scalars or one-element vectors (`IsScalarOr1ElementVector`).
//! Fused nodes get explicit zero points: QLinearWhere and QLinearConcat require them, and
//! QLinearWhere dereferences x's and y's zero points whenever z's are constant initializers.
//! (An initializer of an enclosing graph is not constant to ORT inside a subgraph; such mixes
//! are not detected here.)
//!
//! The applier shared by every single-kernel fusion ([`Fusion`], [`Rule`]) lives here too;
//! `pool.rs` uses it.

use super::group::{Group, decide, explicit_zero_point, per_target, qparam, shape, var};
use super::{Log, Rewrite, RuleOptions};
use crate::target::Profile;
use egg::{Applier, Id, PatternAst, Subst, Symbol};
use qdqc_exact::reference::CodeType;
use qdqc_exact::{Contract, QParam, Verdict};
use qdqc_lang::analysis::{QdqAnalysis, QdqEGraph};
use qdqc_lang::attr::{AttrValue, Attribute};
use qdqc_lang::term::{Op, Term};
use qdqc_ort::Isa;
use qdqc_ort::lut;
use qdqc_target_rust::lut as rust_lut;
use std::cell::OnceCell;

pub fn rules(options: &RuleOptions, log: &Log) -> Vec<Rewrite> {
    let kernels = [Lut::Sigmoid, Lut::LeakyRelu, Lut::Where, Lut::Concat(2), Lut::Concat(3), Lut::Concat(4)];
    kernels.into_iter().map(|k| rule(k.name(), &k.pattern(), k, options, log)).collect()
}

pub(super) fn rule<F: Fusion>(name: &'static str, pattern: &str, fusion: F, options: &RuleOptions, log: &Log) -> Rewrite {
    let applier = Rule { fusion, name, options: options.clone(), log: log.clone() };
    Rewrite::new(name, pattern.parse::<egg::Pattern<Term>>().expect("valid pattern"), applier).expect("valid rule")
}

/// One fusion of a QDQ group into one com.microsoft kernel.
pub(super) trait Fusion: Send + Sync + 'static {
    type Params;
    /// The kernel's op type in com.microsoft.
    fn op_type(&self) -> &'static str;
    /// Pattern variables of the group's authored nodes before its Q (DQs, then the op).
    fn tags(&self) -> Vec<String>;
    /// The group's parameters, or why the kernel cannot take it (checked before proving).
    /// `q` is the Q's e-class, whose facts give the output code type.
    fn read(&self, eg: &QdqEGraph, s: &Subst, q: Id) -> Result<Self::Params, String>;
    /// Whether the kernel computes the same on every ISA profile (one proof serves all).
    fn same_on_every_isa(&self) -> bool;
    fn prove(&self, p: &Self::Params, isa: Isa, contract: Contract) -> Verdict;
    /// The Rust target's verdict (one for all its profiles).
    fn prove_rust(&self, p: &Self::Params, contract: Contract) -> Verdict;
    /// The fused node's attributes and inputs.
    fn emit(&self, eg: &mut QdqEGraph, s: &Subst, p: &Self::Params, group: &Group) -> (Vec<Attribute>, Vec<Id>);
}

pub(super) struct Rule<F> {
    fusion: F,
    name: &'static str,
    options: RuleOptions,
    log: Log,
}

impl<F: Fusion> Rule<F> {
    fn verdicts(&self, p: &F::Params) -> (bool, Vec<(Profile, Verdict)>) {
        let contract = self.options.contract;
        let prove = |isa| self.fusion.prove(p, isa, contract);
        let rust = || self.fusion.prove_rust(p, contract);
        if !self.fusion.same_on_every_isa() {
            return decide(&self.options, per_target(prove, rust));
        }
        // One kernel for every profile: one proof speaks for all.
        let once = OnceCell::new();
        decide(&self.options, per_target(|isa| once.get_or_init(|| prove(isa)).clone(), rust))
    }
}

impl<F: Fusion> Applier<Term, QdqAnalysis> for Rule<F> {
    fn apply_one(&self, eg: &mut QdqEGraph, eclass: Id, s: &Subst, _: Option<&PatternAst<Term>>, _: Symbol) -> Vec<Id> {
        let tags: Vec<Id> = self.fusion.tags().iter().map(|t| var(s, t)).collect();
        let Some(group) = Group::new(eg, &tags, var(s, "?tq")) else { return vec![] };
        if self.log.decided(self.name, &group.output) {
            return vec![];
        }
        let fused_op = format!("com.microsoft.{}", self.fusion.op_type());
        let params = match self.fusion.read(eg, s, eclass) {
            Ok(p) => p,
            Err(reason) => {
                let verdicts = self.options.target.profiles().iter().map(|&i| (i, Verdict::Unknown { reason: reason.clone() })).collect();
                group.log(&self.log, self.name, &fused_op, false, verdicts);
                return vec![];
            }
        };
        let (fired, verdicts) = self.verdicts(&params);
        group.log(&self.log, self.name, &fused_op, fired, verdicts);
        if !fired {
            return vec![];
        }
        let (attributes, inputs) = self.fusion.emit(eg, s, &params, &group);
        let fused = group.add_kernel(eg, self.fusion.op_type(), "com.microsoft", attributes, inputs);
        eg.union(eclass, fused);
        vec![eclass, fused]
    }
}

/// Per-tensor parameters of a (codes, scale, zero point) triple of pattern variables, checked
/// for what ORT's quantized kernels accept. `codes` is a variable, or the Q's e-class.
pub(super) fn kernel_qparam(eg: &QdqEGraph, codes: Id, scale: Id, zp: Id) -> Result<QParam, String> {
    known_code_type(eg, codes, zp)?;
    scalar_or_one_element(eg, scale)?;
    if eg[zp].data.leaf != Some(Op::Absent) {
        scalar_or_one_element(eg, zp)?;
    }
    qparam(eg, Some(codes), scale, zp)
}

/// The codes' type is known from the codes or from their zero point (ONNX gives both one
/// type); with neither, `qparam` would assume uint8.
fn known_code_type(eg: &QdqEGraph, codes: Id, zp: Id) -> Result<(), String> {
    let zp_type = eg[zp].data.leaf != Some(Op::Absent) && eg[zp].data.dtype.is_some();
    if eg[codes].data.dtype.is_some() || zp_type { Ok(()) } else { Err("the codes' type is unknown and no zero point gives it".to_string()) }
}

/// ORT's kernels read a scale or zero point through `IsScalarOr1ElementVector`.
fn scalar_or_one_element(eg: &QdqEGraph, id: Id) -> Result<(), String> {
    match shape(eg, id) {
        Some(s) if s.is_empty() || s == [1] => Ok(()),
        Some(s) => Err(format!("a quantization parameter of shape {s:?} is not a scalar or one-element vector")),
        None => Err("a quantization parameter has no static shape".to_string()),
    }
}

/// ORT's 8-bit kernels take one code type, uint8 or int8, for every quantized tensor.
pub(super) fn one_eight_bit_type(op: &str, params: &[QParam]) -> Result<(), String> {
    let first = params[0].code;
    if matches!(first, CodeType::U8 | CodeType::I8) && params.iter().all(|p| p.code == first) {
        return Ok(());
    }
    let names: Vec<&str> = params.iter().map(|p| p.code.name()).collect();
    Err(format!("{op} needs one 8-bit code type, got {}", names.join(", ")))
}

/// The authored op's plain attributes.
pub(super) fn attributes(eg: &QdqEGraph, s: &Subst) -> Vec<Attribute> {
    match super::group::tag(eg, var(s, "?to")) {
        Some(t) => eg.analysis.env.tag(t).attributes.clone(),
        None => Vec::new(),
    }
}

pub(super) fn attribute<'a>(attrs: &'a [Attribute], name: &str) -> Option<&'a AttrValue> {
    attrs.iter().find(|a| a.name == name).map(|a| &a.value)
}

/// `var`'s zero point, or a created zero of `code` named after the group and `what`.
pub(super) fn zero_point(eg: &mut QdqEGraph, s: &Subst, v: &str, code: CodeType, group: &Group, what: &str) -> Id {
    explicit_zero_point(eg, var(s, v), code, &format!("{}/qdqc_{what}_zero_point", group.output))
}

/// The lookup-table kernels.
#[derive(Clone, Copy)]
enum Lut {
    Sigmoid,
    LeakyRelu,
    Where,
    Concat(usize),
}

/// Quantized inputs (in the kernel's order) and output of a lookup-table group.
struct LutParams {
    inputs: Vec<QParam>,
    out: QParam,
    alpha: f32,
    axis: i64,
}

impl Lut {
    fn name(self) -> &'static str {
        match self {
            Lut::Sigmoid => "qlinear-sigmoid",
            Lut::LeakyRelu => "qlinear-leaky-relu",
            Lut::Where => "qlinear-where",
            Lut::Concat(2) => "qlinear-concat-2",
            Lut::Concat(3) => "qlinear-concat-3",
            Lut::Concat(_) => "qlinear-concat-4",
        }
    }

    fn pattern(self) -> String {
        let dq = |[x, s, z]: &[String; 3], t: &str| format!("(dq {t} {x} {s} {z})");
        let tags = self.tags();
        let inputs: Vec<String> = self.input_vars().iter().zip(&tags).map(|(v, t)| dq(v, t)).collect();
        let [sy, zy] = self.output_vars();
        // Where's condition is not quantized: it is passed through.
        let head = match self {
            Lut::Sigmoid => "Sigmoid ?to",
            Lut::LeakyRelu => "LeakyRelu ?to",
            Lut::Where => "Where ?to ?c",
            Lut::Concat(_) => "Concat ?to",
        };
        format!("(q ?tq ({head} {}) {sy} {zy})", inputs.join(" "))
    }

    /// The (codes, scale, zero point) variables of each quantized input.
    fn input_vars(self) -> Vec<[String; 3]> {
        let names: Vec<String> = match self {
            Lut::Sigmoid | Lut::LeakyRelu => vec!["x".into()],
            Lut::Where => vec!["x".into(), "y".into()],
            Lut::Concat(n) => (0..n).map(|i| i.to_string()).collect(),
        };
        let triple = |n: &String| match self {
            Lut::Concat(_) => [format!("?x{n}"), format!("?s{n}"), format!("?z{n}")],
            _ => [format!("?{n}"), format!("?s{n}"), format!("?z{n}")],
        };
        names.iter().map(triple).collect()
    }

    /// The output's (scale, zero point) variables.
    fn output_vars(self) -> [&'static str; 2] {
        match self {
            Lut::Where => ["?sz", "?zz"],
            _ => ["?sy", "?zy"],
        }
    }

    /// The output's name in created zero points (Where's inputs are x and y).
    fn output_name(self) -> &'static str {
        if matches!(self, Lut::Where) { "z" } else { "y" }
    }
}

/// LeakyRelu's `alpha`, 0.01 when omitted (as in ONNX and QLinearLeakyRelu).
fn alpha(attrs: &[Attribute]) -> Result<f32, String> {
    match attribute(attrs, "alpha") {
        None => Ok(0.01),
        Some(AttrValue::Float(a)) => Ok(*a),
        Some(other) => Err(format!("LeakyRelu alpha {other:?} is not a float")),
    }
}

/// Concat's `axis`, required by ONNX and QLinearConcat alike.
fn concat_axis(attrs: &[Attribute]) -> Result<i64, String> {
    match attribute(attrs, "axis") {
        Some(AttrValue::Int(a)) => Ok(*a),
        _ => Err("Concat has no integer axis".to_string()),
    }
}

impl Fusion for Lut {
    type Params = LutParams;

    fn op_type(&self) -> &'static str {
        match self {
            Lut::Sigmoid => "QLinearSigmoid",
            Lut::LeakyRelu => "QLinearLeakyRelu",
            Lut::Where => "QLinearWhere",
            Lut::Concat(_) => "QLinearConcat",
        }
    }

    fn tags(&self) -> Vec<String> {
        let dqs: Vec<String> = match self {
            Lut::Sigmoid | Lut::LeakyRelu => vec!["?tx".into()],
            Lut::Where => vec!["?tx".into(), "?ty".into()],
            Lut::Concat(n) => (0..*n).map(|i| format!("?t{i}")).collect(),
        };
        dqs.into_iter().chain(["?to".to_string()]).collect()
    }

    fn read(&self, eg: &QdqEGraph, s: &Subst, q: Id) -> Result<LutParams, String> {
        let inputs = self.input_vars().iter().map(|[x, sx, zx]| kernel_qparam(eg, var(s, x), var(s, sx), var(s, zx))).collect::<Result<Vec<_>, _>>()?;
        let [sy, zy] = self.output_vars();
        let out = kernel_qparam(eg, q, var(s, sy), var(s, zy))?;
        let all: Vec<QParam> = inputs.iter().copied().chain([out]).collect();
        one_eight_bit_type(self.op_type(), &all)?;
        let attrs = attributes(eg, s);
        let alpha = if matches!(self, Lut::LeakyRelu) { alpha(&attrs)? } else { 0.0 };
        let axis = if matches!(self, Lut::Concat(_)) { concat_axis(&attrs)? } else { 0 };
        Ok(LutParams { inputs, out, alpha, axis })
    }

    fn same_on_every_isa(&self) -> bool {
        !matches!(self, Lut::Sigmoid)
    }

    fn prove(&self, p: &LutParams, isa: Isa, contract: Contract) -> Verdict {
        match self {
            Lut::Sigmoid => lut::prove_sigmoid(p.inputs[0], p.out, isa),
            Lut::LeakyRelu => lut::prove_leaky_relu(p.inputs[0], p.out, p.alpha, contract),
            Lut::Where => lut::prove_where(p.inputs[0], p.inputs[1], p.out, contract),
            Lut::Concat(_) => lut::prove_concat(&p.inputs, p.out, contract),
        }
    }

    fn prove_rust(&self, p: &LutParams, _: Contract) -> Verdict {
        let table = match self {
            Lut::Sigmoid => rust_lut::Table::Sigmoid,
            Lut::LeakyRelu => rust_lut::Table::LeakyRelu { alpha: p.alpha },
            Lut::Where => rust_lut::Table::Where,
            Lut::Concat(_) => rust_lut::Table::Concat,
        };
        rust_lut::prove(table, &p.inputs, p.out)
    }

    fn emit(&self, eg: &mut QdqEGraph, s: &Subst, p: &LutParams, group: &Group) -> (Vec<Attribute>, Vec<Id>) {
        let [sy, zy] = self.output_vars();
        let out_zp = zero_point(eg, s, zy, p.out.code, group, self.output_name());
        let mut quantized = Vec::new();
        for (i, [x, sx, zx]) in self.input_vars().iter().enumerate() {
            let zp = zero_point(eg, s, zx, p.inputs[i].code, group, &x[1..]);
            quantized.extend([var(s, x), var(s, sx), zp]);
        }
        match self {
            Lut::Sigmoid => (Vec::new(), [quantized, vec![var(s, sy), out_zp]].concat()),
            Lut::LeakyRelu => (vec![Attribute { name: "alpha".into(), value: AttrValue::Float(p.alpha) }], [quantized, vec![var(s, sy), out_zp]].concat()),
            Lut::Where => (Vec::new(), [vec![var(s, "?c")], quantized, vec![var(s, sy), out_zp]].concat()),
            Lut::Concat(_) => (vec![Attribute::int("axis", p.axis)], [vec![var(s, sy), out_zp], quantized].concat()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_bind_every_variable_the_rules_read() {
        let options = RuleOptions {
            contract: Contract::Exact,
            target: qdqc_ort::OrtTarget::generic().into(),
            fold_weights: false,
            allow: Default::default(),
            memo: Default::default(),
        };
        let rules = rules(&options, &Log::default());
        for lut in [Lut::Sigmoid, Lut::LeakyRelu, Lut::Where, Lut::Concat(2), Lut::Concat(3), Lut::Concat(4)] {
            let rule = rules.iter().find(|r| r.name.as_str() == lut.name()).expect("a rule per kernel");
            let bound: Vec<String> = rule.searcher.vars().iter().map(|v| v.to_string()).collect();
            let read = lut.input_vars().into_iter().flatten().chain(lut.output_vars().map(String::from)).chain(lut.tags()).chain(["?tq".to_string()]);
            for v in read {
                assert!(bound.contains(&v), "{}: {v} is not bound by {}", lut.name(), lut.pattern());
            }
        }
        assert_eq!(Lut::Where.pattern(), "(q ?tq (Where ?to ?c (dq ?tx ?x ?sx ?zx) (dq ?ty ?y ?sy ?zy)) ?sz ?zz)");
        assert_eq!(Lut::Concat(2).pattern(), "(q ?tq (Concat ?to (dq ?t0 ?x0 ?s0 ?z0) (dq ?t1 ?x1 ?s1 ?z1)) ?sy ?zy)");
    }
}
