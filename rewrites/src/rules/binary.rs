//! `DQ(a) + DQ(b) → Q` and `DQ(a) · DQ(b) → Q` into com.microsoft QLinearAdd / QLinearMul.
//!
//! Obligation (contract §5.7): P1 over every pair of 8-bit codes, per ISA model and per broadcast
//! layout ORT may run, against the unfused reference under the contract; on the Rust target,
//! [`qdqc_target_rust::binary::prove`]: P1 over every pair, the kernel that runs (`Binary::code`) against the same
//! reference (no layouts: the kernel is one table). Broken twin:
//! `tests/broken` "qlinear_add_avx2_formula_claimed_for_sse2".

use super::group::{Group, explicit_zero_point, per_target, qparam, shape, var};
use super::{Log, Rewrite, RuleOptions};
use egg::{Applier, Id, PatternAst, Subst, Symbol};
use qdqc_exact::Verdict;
use qdqc_exact::reference::CodeType;
use qdqc_lang::analysis::{QdqAnalysis, QdqEGraph};
use qdqc_lang::term::Term;
use qdqc_ort::binary::{BinaryOp, BinaryParams, layouts, prove_layouts};

pub fn rules(options: &RuleOptions, log: &Log) -> Vec<Rewrite> {
    [(BinaryOp::Add, "qlinear-add", "Add"), (BinaryOp::Mul, "qlinear-mul", "Mul")]
        .into_iter()
        .map(|(op, name, onnx)| {
            let pattern = format!("(q ?tq ({onnx} ?to (dq ?ta ?a ?sa ?za) (dq ?tb ?b ?sb ?zb)) ?sc ?zc)");
            Rewrite::new(name, pattern.parse::<egg::Pattern<Term>>().expect("valid pattern"), Fusion { op, name, options: options.clone(), log: log.clone() })
                .expect("valid rule")
        })
        .collect()
}

struct Fusion {
    op: BinaryOp,
    name: &'static str,
    options: RuleOptions,
    log: Log,
}

impl Fusion {
    fn params(&self, eg: &QdqEGraph, eclass: Id, s: &Subst) -> Result<BinaryParams, String> {
        let p = BinaryParams {
            a: qparam(eg, Some(var(s, "?a")), var(s, "?sa"), var(s, "?za"))?,
            b: qparam(eg, Some(var(s, "?b")), var(s, "?sb"), var(s, "?zb"))?,
            c: qparam(eg, Some(eclass), var(s, "?sc"), var(s, "?zc"))?,
        };
        // ORT's kernels take one 8-bit type for all three tensors.
        if !(p.a.code == p.b.code && p.b.code == p.c.code && matches!(p.a.code, CodeType::U8 | CodeType::I8)) {
            return Err(format!("{} needs one 8-bit code type, got {}, {} → {}", self.op.ort_name(), p.a.code.name(), p.b.code.name(), p.c.code.name()));
        }
        Ok(p)
    }
}

impl Applier<Term, QdqAnalysis> for Fusion {
    fn apply_one(&self, eg: &mut QdqEGraph, eclass: Id, s: &Subst, _: Option<&PatternAst<Term>>, _: Symbol) -> Vec<Id> {
        let Some(group) = Group::new(eg, &[var(s, "?ta"), var(s, "?tb"), var(s, "?to")], var(s, "?tq")) else { return vec![] };
        if self.log.decided(self.name, &group.output) {
            return vec![];
        }
        let fused_op = format!("com.microsoft.{}", self.op.ort_name());
        let params = match self.params(eg, eclass, s) {
            Ok(p) => p,
            Err(reason) => {
                let verdicts = self.options.target.profiles().iter().map(|&i| (i, Verdict::Unknown { reason: reason.clone() })).collect();
                group.log(&self.log, self.name, &fused_op, false, verdicts);
                return vec![];
            }
        };
        let layouts = layouts(shape(eg, var(s, "?a")), shape(eg, var(s, "?b")));
        let key = super::memo::binary_key(&self.options.memo, self.name, self.op, &params, &layouts);
        let contract = self.options.contract;
        let prove = per_target(|isa| prove_layouts(self.op, &params, &layouts, isa, contract), || qdqc_target_rust::binary::prove(self.op, &params, contract));
        let (fired, verdicts) = self.options.memo.decide(&self.options, key, prove);
        group.log(&self.log, self.name, &fused_op, fired, verdicts);
        if !fired {
            return vec![];
        }
        let zp = |eg: &mut QdqEGraph, v: &str, code: CodeType, what: &str| {
            explicit_zero_point(eg, var(s, v), code, &format!("{}/qdqc_{what}_zero_point", group.output))
        };
        let za = zp(eg, "?za", params.a.code, "a");
        let zb = zp(eg, "?zb", params.b.code, "b");
        let zc = zp(eg, "?zc", params.c.code, "c");
        let inputs = vec![var(s, "?a"), var(s, "?sa"), za, var(s, "?b"), var(s, "?sb"), zb, var(s, "?sc"), zc];
        let fused = group.add_kernel(eg, self.op.ort_name(), "com.microsoft", Vec::new(), inputs);
        eg.union(eclass, fused);
        vec![eclass, fused]
    }
}
