//! DAG-aware extraction: picks one e-node per needed e-class so that the *shared* cost is least.
//!
//! egg's `Extractor` sums tree costs, charging a node once per use, which biases extraction
//! against shared nodes. Here each candidate's cost is the set of e-classes it
//! needs, counted once (extraction-gym's greedy-DAG idea), iterated to a fixpoint. A candidate
//! whose needs include its own class would close a cycle and is never chosen. Ties go to the
//! smaller term in `Term`'s order, whose handles are assigned in model order: the choice never
//! depends on hashing or interning order. The costs come from the target
//! ([`CostModel`], e.g. `qdqc_ort::cost::OrtCost`).

use egg::Id;
use qdqc_lang::analysis::QdqEGraph;
use qdqc_lang::cost::CostModel;
use qdqc_lang::term::Term;
use std::collections::{BTreeMap, BTreeSet};

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
