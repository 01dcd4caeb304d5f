//! Static buffer planning: every intermediate gets a workspace slot of its element type, reused
//! once the value is dead (liveness over the program order). A node's output never shares a slot
//! with its inputs: the output's slot is taken before the inputs' slots are freed.

use super::ops::Op;
use super::values::Elem;
use std::collections::{BTreeMap, BTreeSet};

/// Slot of each intermediate, and how many slots each element type needs.
#[derive(Debug, Default)]
pub struct Plan {
    pub slot: BTreeMap<String, (Elem, usize)>,
    pub counts: BTreeMap<Elem, usize>,
}

/// `keep`: values alive until the end (graph outputs).
pub fn plan(ops: &[Op], keep: &BTreeSet<String>) -> Plan {
    let mut last: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        for x in &op.inputs {
            last.insert(x, i);
        }
    }
    let mut plan = Plan::default();
    // Free slots per element type, lowest first (deterministic).
    let mut free: BTreeMap<Elem, BTreeSet<usize>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        let pool = free.entry(op.elem).or_default();
        let slot = match pool.pop_first() {
            Some(s) => s,
            None => {
                let n = plan.counts.entry(op.elem).or_default();
                *n += 1;
                *n - 1
            }
        };
        plan.slot.insert(op.output.clone(), (op.elem, slot));
        let dead = |v: &str| !keep.contains(v) && last.get(v).is_none_or(|&l| l <= i);
        let mut freed: Vec<&str> = op.inputs.iter().map(String::as_str).filter(|v| dead(v)).collect();
        if dead(&op.output) {
            freed.push(&op.output);
        }
        for v in freed {
            if let Some(&(e, s)) = plan.slot.get(v) {
                free.entry(e).or_default().insert(s);
            }
        }
    }
    plan
}
