//! `DQ → op → Q` around data movement and monotone ops becomes the op on the codes (contract
//! §5.2).
//!
//! Obligation ([`qdqc_exact::on_codes::prove`], which also decides ORT's own drop-Q/DQ fusions
//! for `qdqc audit`): the DQ and the Q have bitwise-equal per-tensor scale and zero point, and
//! `Q(DQ(q)) = q` for every code (P4, checked by P1 for the concrete parameters); monotone ops
//! (MaxPool, ReduceMax/Min) also need a positive scale; Resize only selects in `nearest` mode.
//! Broken twins: `tests/broken` "maxpool_on_codes_negative_scale", "resize_linear_on_codes",
//! "remove_q_dq_pair".

use super::group::{Group, decide, qparam, tag, var};
use super::{Log, Rewrite, RuleOptions};
use egg::{Applier, Id, PatternAst, Subst, Symbol};
use qdqc_exact::Verdict;
use qdqc_exact::on_codes;
use qdqc_lang::analysis::{QdqAnalysis, QdqEGraph};
use qdqc_lang::attr::AttrValue;
use qdqc_lang::term::Term;

/// Ops that move or select elements, with the number of extra (non-data) inputs they may take.
const MOVEMENT: &[(&str, usize, usize)] = &[
    ("Reshape", 1, 1),
    ("Transpose", 0, 0),
    ("Squeeze", 0, 1),
    ("Unsqueeze", 0, 1),
    ("Flatten", 0, 0),
    ("Expand", 1, 1),
    ("Tile", 1, 1),
    ("Slice", 2, 4),
    ("Gather", 1, 1),
    ("GatherElements", 1, 1),
    ("DepthToSpace", 0, 0),
    ("SpaceToDepth", 0, 0),
    ("Identity", 0, 0),
    ("Resize", 0, 3),
];

/// Ops that select by order: they commute with Q/DQ only for a positive scale.
const MONOTONE: &[(&str, usize, usize)] = &[("MaxPool", 0, 0), ("ReduceMax", 0, 1), ("ReduceMin", 0, 1)];

pub fn rules(options: &RuleOptions, log: &Log) -> Vec<Rewrite> {
    let mut rules = Vec::new();
    for (ops, monotone) in [(MOVEMENT, false), (MONOTONE, true)] {
        for &(op, min_extra, max_extra) in ops {
            for extra in min_extra..=max_extra {
                let args: String = (0..extra).map(|i| format!(" ?i{i}")).collect();
                let pattern = format!("(q ?tq ({op} ?to (dq ?td ?x ?s ?z){args}) ?s2 ?z2)");
                let name = format!("on-codes-{}-{extra}", op.to_lowercase());
                let applier = OnCodes { op, extra, monotone, name: interned(&name), options: options.clone(), log: log.clone() };
                rules.push(Rewrite::new(name, pattern.parse::<egg::Pattern<Term>>().expect("valid pattern"), applier).expect("valid rule"));
            }
        }
    }
    rules
}

/// Rule names live as long as the process: egg's global symbol table holds each distinct name
/// once (a few dozen), however many catalogs a process builds.
fn interned(name: &str) -> &'static str {
    Symbol::from(name).as_str()
}

struct OnCodes {
    op: &'static str,
    extra: usize,
    monotone: bool,
    name: &'static str,
    options: RuleOptions,
    log: Log,
}

impl Applier<Term, QdqAnalysis> for OnCodes {
    fn apply_one(&self, eg: &mut QdqEGraph, eclass: Id, s: &Subst, _: Option<&PatternAst<Term>>, _: Symbol) -> Vec<Id> {
        let Some(group) = Group::new(eg, &[var(s, "?td"), var(s, "?to")], var(s, "?tq")) else { return vec![] };
        if self.log.decided(self.name, &group.output) {
            return vec![];
        }
        let Some(op_tag) = tag(eg, var(s, "?to")) else { return vec![] };
        let attributes = eg.analysis.env.tag(op_tag).attributes.clone();
        let selects = self.op != "Resize" || attributes.iter().all(|a| a.name != "mode" || a.value == AttrValue::Str("nearest".into()));
        let params = qparam(eg, Some(var(s, "?x")), var(s, "?s"), var(s, "?z")).and_then(|x| Ok((x, qparam(eg, Some(eclass), var(s, "?s2"), var(s, "?z2"))?)));
        let (fired, verdicts) = match params {
            Ok((x, y)) => decide(&self.options, |_| on_codes::prove(x, y, self.monotone, selects)),
            Err(reason) => (false, self.options.target.profiles().iter().map(|&i| (i, Verdict::Unknown { reason: reason.clone() })).collect()),
        };
        group.log(&self.log, self.name, &format!("{} (on codes)", self.op), fired, verdicts);
        if !fired {
            return vec![];
        }
        let mut inputs = vec![var(s, "?x")];
        inputs.extend((0..self.extra).map(|i| var(s, &format!("?i{i}"))));
        let fused = group.add_kernel(eg, self.op, "", attributes, inputs);
        eg.union(eclass, fused);
        vec![eclass, fused]
    }
}
