//! A chain of elementwise IEEE ops between a DequantizeLinear and a QuantizeLinear over 8-bit
//! codes becomes a lookup table: `Gather(table, Cast(codes → int32))` (contract §5.5).
//!
//! Obligation ([`qdqc_exact::lookup`], which builds the table and checks it): by construction —
//! the table holds the reference evaluation of every code (under
//! `exact` the same correctly rounded f32 operations every conforming runtime performs; under
//! `real` exact rational arithmetic, which Div and Sqrt do not have) — and checked by P1 against
//! the chain. Only ops whose f32 result is one correct rounding qualify (Relu, Neg, Abs,
//! Sqrt, Floor, Ceil, Reciprocal, and Add/Sub/Mul/Div/Max/Min with a scalar constant); library
//! functions (Exp, Sigmoid, …) are not IEEE-determined and stay out. A chain that produces NaN
//! or ±Inf for some code is refused: runtimes quantize those differently.
//! Broken twins: `tests/broken` "q_by_reciprocal" and "q_half_away_from_zero" (a table built
//! with the wrong Q is refuted the same way).

use super::group::{Group, decide, qparam, tag, var};
use super::{Log, Rewrite, RuleOptions};
use egg::{Applier, Id, PatternAst, Subst, Symbol};
use qdqc_exact::lookup::{Step, prove, table};
use qdqc_exact::reference::CodeType;
use qdqc_exact::{QParam, Verdict};
use qdqc_lang::analysis::{Constant, QdqEGraph, TagFacts, ValueFacts};
use qdqc_lang::attr::Attribute;
use qdqc_lang::onnx::DataType;
use qdqc_lang::term::{FloatOp, NodeTag, Op, Term, ValueRef};

const RULE: &str = "lookup-table";

pub fn rules(options: &RuleOptions, log: &Log) -> Vec<Rewrite> {
    let pattern: egg::Pattern<Term> = "(q ?tq ?e ?s ?z)".parse().expect("valid pattern");
    vec![Rewrite::new(RULE, pattern, Table { options: options.clone(), log: log.clone() }).expect("valid rule")]
}

/// The f32 scalar an e-class holds, if it is a one-element f32 constant.
fn scalar(eg: &QdqEGraph, id: Id) -> Option<f32> {
    let Some(Op::Value(v)) = eg[id].data.leaf else { return None };
    match eg.analysis.env.value(v).constant.as_ref()?.f32_bits.as_deref()? {
        [b] => Some(f32::from_bits(*b)),
        _ => None,
    }
}

/// Walks from the Q's input back to a DequantizeLinear through chain steps. Returns the steps in
/// evaluation order and the DQ's (tag, codes, scale, zero point) classes.
fn chain(eg: &QdqEGraph, mut class: Id) -> Option<(Vec<Step>, [Id; 4], Vec<Id>)> {
    let mut steps = Vec::new();
    let mut tags = Vec::new();
    loop {
        let node = eg[class].nodes.iter().find(|t| matches!(t.op, Op::Dequantize | Op::Float(_)))?;
        let args = &node.args;
        tags.push(args[0]);
        let (step, next) = match node.op {
            Op::Dequantize if args.len() == 4 => {
                steps.reverse();
                tags.reverse();
                return (!steps.is_empty()).then_some((steps, [args[0], args[1], args[2], args[3]], tags));
            }
            Op::Float(op @ (FloatOp::Relu | FloatOp::Neg | FloatOp::Abs | FloatOp::Sqrt)) if args.len() == 2 => (Step::Unary(op), args[1]),
            Op::Float(op @ (FloatOp::Add | FloatOp::Sub | FloatOp::Mul | FloatOp::Div | FloatOp::Max | FloatOp::Min)) if args.len() == 3 => {
                match (scalar(eg, args[1]), scalar(eg, args[2])) {
                    (None, Some(c)) => (Step::Scalar { op, c, left: false }, args[1]),
                    (Some(c), None) => (Step::Scalar { op, c, left: true }, args[2]),
                    _ => return None,
                }
            }
            Op::Float(FloatOp::Clip) if args.len() == 4 => (Step::Clip { lo: scalar(eg, args[2])?, hi: scalar(eg, args[3])? }, args[1]),
            _ => return None,
        };
        steps.push(step);
        class = next;
    }
}

struct Table {
    options: RuleOptions,
    log: Log,
}

/// A created value (an intermediate, or a constant when `bytes` is set).
fn value(eg: &mut QdqEGraph, name: String, dtype: DataType, dims: Option<Vec<i64>>, bytes: Option<Vec<u8>>) -> ValueRef {
    let env = &mut eg.analysis.env;
    let v = ValueRef(env.values.len() as u32);
    let constant = bytes.as_ref().map(|_| Constant { dims: dims.clone().unwrap_or_default(), ..Constant::default() });
    env.values.push(ValueFacts { name, dtype: Some(dtype), shape: None, constant, created: bytes });
    v
}

/// A created node producing `output`, in the Q's place in the graph order.
fn node(eg: &mut QdqEGraph, q: NodeTag, name: String, op_type: &str, attributes: Vec<Attribute>, inputs: Vec<Id>, output: ValueRef) -> Id {
    let env = &mut eg.analysis.env;
    let anchor = env.tag(q).node;
    let t = NodeTag(env.tags.len() as u32);
    env.tags.push(TagFacts { node: anchor, created: true, attributes, op_type: op_type.into(), name, outputs: vec![Some(output)], ..TagFacts::default() });
    let tag = eg.add(Term::leaf(Op::Tag(t)));
    eg.add(Term::new(Op::Kernel, [vec![tag], inputs].concat()))
}

impl Applier<Term, qdqc_lang::analysis::QdqAnalysis> for Table {
    fn apply_one(&self, eg: &mut QdqEGraph, eclass: Id, s: &Subst, _: Option<&PatternAst<Term>>, _: Symbol) -> Vec<Id> {
        let Some((steps, [td, codes, sx, zx], tags)) = chain(eg, var(s, "?e")) else { return vec![] };
        let Some(group) = Group::new(eg, &[[td].as_slice(), &tags[1..]].concat(), var(s, "?tq")) else { return vec![] };
        if self.log.decided(RULE, &group.output) || tag(eg, var(s, "?tq")).is_none() {
            return vec![];
        }
        let params = qparam(eg, Some(codes), sx, zx).and_then(|x| Ok((x, qparam(eg, Some(eclass), var(s, "?s"), var(s, "?z"))?)));
        let eight_bit = |p: &QParam| matches!(p.code, CodeType::U8 | CodeType::I8);
        let (fired, verdicts) = match &params {
            Ok((x, y)) if eight_bit(x) && eight_bit(y) => decide(&self.options, |_| prove(*x, *y, &steps, self.options.contract)),
            Ok(_) => {
                (false, self.options.target.profiles().iter().map(|&i| (i, Verdict::Unknown { reason: "lookup tables are for 8-bit codes".into() })).collect())
            }
            Err(reason) => (false, self.options.target.profiles().iter().map(|&i| (i, Verdict::Unknown { reason: reason.clone() })).collect()),
        };
        group.log(&self.log, RULE, "Gather (lookup table)", fired, verdicts);
        let Ok((x, y)) = params else { return vec![] };
        if !fired {
            return vec![];
        }
        let Ok(entries) = table(x, y, &steps, self.options.contract) else { return vec![] };
        let bytes: Vec<u8> = entries.iter().map(|&e| e as u8).collect();
        let table = value(eg, format!("{}/qdqc_table", group.output), y.code.dtype(), Some(vec![256]), Some(bytes));
        let table = eg.add(Term::leaf(Op::Value(table)));
        let indices = value(eg, format!("{}/qdqc_indices", group.output), DataType::Int32, None, None);
        let cast = node(eg, group.q, format!("{}/qdqc_Cast", group.output), "Cast", vec![Attribute::int("to", DataType::Int32 as i64)], vec![codes], indices);
        let out = eg.analysis.env.tag(group.q).outputs[0].expect("a Q has its output");
        let gather = node(eg, group.q, format!("{}/qdqc_Gather", group.output), "Gather", vec![Attribute::int("axis", 0)], vec![table, cast], out);
        eg.union(eclass, gather);
        vec![eclass, gather]
    }
}
