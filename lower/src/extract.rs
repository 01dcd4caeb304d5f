//! DAG-aware extraction: picks one e-node per needed e-class so that the *shared* cost is least.
//!
//! egg's `Extractor` sums tree costs, charging a node once per use, which biases extraction
//! against shared nodes. Here each candidate's cost is the set of e-classes it
//! needs, counted once (extraction-gym's greedy-DAG idea), iterated to a fixpoint. A candidate
//! whose needs include its own class would close a cycle and is never chosen. Ties go to the
//! smaller term in `Term`'s order, whose handles are assigned in model order: the choice never
//! depends on hashing or interning order.

use egg::Id;
use qdqc_lang::analysis::QdqEGraph;
use qdqc_lang::term::{FloatOp, Op, Term};
use std::collections::{BTreeMap, BTreeSet};

/// Cost of executing one e-node on a target. Leaves (values, tags, indices) cost nothing.
pub trait CostModel {
    fn cost(&self, term: &Term, egraph: &QdqEGraph) -> u64;
}

/// Authored nodes cost one each, and so do created kernels, except where ONNX Runtime 1.31's
/// CPU kernel is measured slower than the unfused group it replaces (ARCHITECTURE.md, "cost
/// model"): then the proven fusion stays in the e-graph but extraction keeps the group. A Gather
/// that reads a dequantized constant also pays one per element of that float table: it is what
/// keeps the table materialised for a few rows, and gathering the codes first (rule
/// `gather-before-dequantize`) does not. Its other readers (a tied lm_head) may still need it.
pub struct NodeCount;

/// A lookup table (`Gather(table, Cast(x))`): ORT's Gather copies element by element, measured
/// 15–16x an elementwise op on the same tensor (98.5 µs against 6–7 µs for Relu or
/// QuantizeLinear on `dwsep_net_s8s8_pc_pow2`), so a table pays off only for long chains.
const LOOKUP_GATHER: u64 = 16;

/// A grouped QLinearConv with unequal per-channel weight zero points: ORT 1.31.1 runs it on a
/// generic path measured 5–7x slower than the whole unfused DQ → Conv → Q group
/// (`dwsep_net_u8s8_pc_asym_pow2`: 1096 µs against about 200 µs for the original model).
const GROUPED_CONV_UNEQUAL_ZERO_POINTS: u64 = 64;

impl CostModel for NodeCount {
    fn cost(&self, term: &Term, egraph: &QdqEGraph) -> u64 {
        match term.op {
            Op::Value(_) | Op::Tag(_) | Op::Index(_) | Op::Absent | Op::Proj => 0,
            Op::Float(FloatOp::Gather) => 1 + term.args.get(1).map_or(0, |&data| dequantized_table(egraph, data)),
            Op::Kernel => kernel_cost(term, egraph),
            Op::Dequantize | Op::Quantize | Op::Float(_) | Op::Opaque => 1,
        }
    }
}

fn kernel_cost(term: &Term, egraph: &QdqEGraph) -> u64 {
    let env = &egraph.analysis.env;
    let Some(Op::Tag(t)) = term.args.first().and_then(|&tag| egraph[tag].data.leaf) else { return 1 };
    let facts = env.tag(t);
    let constant = |i: usize| match term.args.get(i).and_then(|&a| egraph[a].data.leaf) {
        Some(Op::Value(v)) => env.value(v).constant.as_ref(),
        _ => None,
    };
    match facts.op_type.as_str() {
        // A lookup table is a rank-1 constant (256 or 65 536 entries); a gathered weight is not.
        "Gather" if constant(1).is_some_and(|c| c.dims.len() == 1) => LOOKUP_GATHER,
        "QLinearConv" => {
            let group = facts.attributes.iter().find(|a| a.name == "group").and_then(|a| match a.value {
                qdqc_lang::attr::AttrValue::Int(g) => Some(g),
                _ => None,
            });
            // Inputs after the tag: x, x_scale, x_zp, w, w_scale, w_zp (argument 6).
            let unequal = constant(6).and_then(|c| c.ints.as_ref()).is_some_and(|z| z.windows(2).any(|p| p[0] != p[1]));
            if group.is_some_and(|g| g > 1) && unequal { GROUPED_CONV_UNEQUAL_ZERO_POINTS } else { 1 }
        }
        _ => 1,
    }
}

/// Elements of the constant whose DequantizeLinear the e-class `id` holds, or 0.
fn dequantized_table(egraph: &QdqEGraph, id: Id) -> u64 {
    let env = &egraph.analysis.env;
    let constant_elements = |data: Id| match egraph[data].data.leaf {
        Some(Op::Value(v)) => env.value(v).constant.as_ref().map(|c| c.dims.iter().product::<i64>().max(0) as u64),
        _ => None,
    };
    egraph[id].nodes.iter().filter(|n| n.op == Op::Dequantize).find_map(|n| constant_elements(*n.args.get(1)?)).unwrap_or(0)
}

#[derive(Clone)]
struct Choice {
    term: Term,
    needs: BTreeMap<Id, u64>,
    total: u64,
}

/// The chosen e-node of every e-class reachable from the roots.
pub struct Extraction {
    pub chosen: BTreeMap<Id, Term>,
}

pub fn extract(egraph: &QdqEGraph, roots: &[Id], costs: &dyn CostModel) -> Result<Extraction, String> {
    let mut ids: Vec<Id> = egraph.classes().map(|c| c.id).collect();
    ids.sort();
    let mut best: BTreeMap<Id, Choice> = BTreeMap::new();
    loop {
        let mut changed = false;
        for &id in &ids {
            let mut nodes: Vec<&Term> = egraph[id].nodes.iter().collect();
            nodes.sort();
            for term in nodes {
                let Some(candidate) = candidate(egraph, id, term, &best, costs) else { continue };
                let better = match best.get(&id) {
                    None => true,
                    Some(cur) => (candidate.total, &candidate.term) < (cur.total, &cur.term),
                };
                if better {
                    best.insert(id, candidate);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut chosen = BTreeMap::new();
    let mut stack: Vec<Id> = roots.iter().map(|&r| egraph.find(r)).collect();
    while let Some(id) = stack.pop() {
        if chosen.contains_key(&id) {
            continue;
        }
        let choice = best.get(&id).ok_or_else(|| format!("no acyclic term for e-class {id}"))?;
        stack.extend(choice.term.args.iter().map(|&c| egraph.find(c)));
        chosen.insert(id, choice.term.clone());
    }
    Ok(Extraction { chosen })
}

fn candidate(egraph: &QdqEGraph, id: Id, term: &Term, best: &BTreeMap<Id, Choice>, costs: &dyn CostModel) -> Option<Choice> {
    let mut needs = BTreeMap::new();
    for &child in term.args.iter() {
        let child = egraph.find(child);
        let c = best.get(&child)?;
        if child == id || c.needs.contains_key(&id) {
            return None;
        }
        needs.extend(c.needs.iter().map(|(k, v)| (*k, *v)));
    }
    needs.insert(id, costs.cost(term, egraph));
    let total = needs.values().sum();
    Some(Choice { term: term.clone(), needs, total })
}

/// Checks that the chosen terms form a DAG (no class reachable from itself).
pub fn check_acyclic(extraction: &Extraction, egraph: &QdqEGraph) -> Result<(), String> {
    let mut done = BTreeSet::new();
    let mut on_path = BTreeSet::new();
    fn visit(id: Id, ex: &Extraction, eg: &QdqEGraph, done: &mut BTreeSet<Id>, on_path: &mut BTreeSet<Id>) -> Result<(), String> {
        if done.contains(&id) {
            return Ok(());
        }
        if !on_path.insert(id) {
            return Err(format!("extraction chose a cycle through e-class {id}"));
        }
        for &c in ex.chosen[&id].args.iter() {
            visit(eg.find(c), ex, eg, done, on_path)?;
        }
        on_path.remove(&id);
        done.insert(id);
        Ok(())
    }
    for &id in extraction.chosen.keys() {
        visit(id, extraction, egraph, &mut done, &mut on_path)?;
    }
    Ok(())
}
