//! Node order of a lowered graph: topological, and otherwise as authored.

use crate::lowered::{Computation, LoweredNode};
use qdqc_lang::ir;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Kahn's algorithm, always taking the ready node that came first in the authored graph, so an
/// unchanged graph keeps its exact order. Subgraph reads of outer values count as inputs.
pub fn stable_topological(nodes: Vec<LoweredNode>, graph: &ir::Graph) -> Result<Vec<LoweredNode>, String> {
    let key = |n: &LoweredNode| n.computation.anchor();
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            producer.insert(o.as_str(), i);
        }
    }
    let mut waiting = vec![0usize; nodes.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        let owner = match n.computation {
            Computation::Authored { node } => Some(node),
            Computation::Created { .. } => None,
        };
        let implicit = owner.into_iter().flat_map(|p| graph.subgraphs_of(p)).flat_map(|s| s.graph.outer_refs.iter());
        let mut deps: Vec<usize> = n.inputs.iter().chain(implicit).filter_map(|name| producer.get(name.as_str()).copied()).filter(|&p| p != i).collect();
        deps.sort_unstable();
        deps.dedup();
        waiting[i] = deps.len();
        for p in deps {
            dependents[p].push(i);
        }
    }
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> = (0..nodes.len()).filter(|&i| waiting[i] == 0).map(|i| Reverse((key(&nodes[i]), i))).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(Reverse((_, i))) = ready.pop() {
        order.push(i);
        for &d in &dependents[i] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                ready.push(Reverse((key(&nodes[d]), d)));
            }
        }
    }
    if order.len() != nodes.len() {
        return Err("the lowered graph has a cycle".into());
    }
    let mut slots: Vec<Option<LoweredNode>> = nodes.into_iter().map(Some).collect();
    Ok(order.into_iter().map(|i| slots[i].take().expect("each node once")).collect())
}
