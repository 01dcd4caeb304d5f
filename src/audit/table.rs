//! The human form of an audit: one row per group with a verdict column per profile, then the
//! counterexamples and reasons a user can act on, then the hazards.

use super::Audit;
use std::fmt::Write;

pub fn text(a: &Audit) -> String {
    let mut out = String::new();
    writeln!(out, "{}: {} group(s) ONNX Runtime would rewrite, contract {:?}", a.file, a.groups.len(), a.contract).unwrap();
    let profiles: Vec<String> = a.profiles.iter().map(|p| p.name().to_string()).collect();
    let width = |h: &str, cells: &mut dyn Iterator<Item = usize>| cells.max().unwrap_or(0).max(h.len());
    let node_w = width("node", &mut a.groups.iter().map(|g| target(g).len()));
    let rule_w = width("rule", &mut a.groups.iter().map(|g| g.rule.len()));
    let out_w = width("output", &mut a.groups.iter().map(|g| g.outputs.join(",").len()));
    write!(out, "\n{:<rule_w$}  {:<node_w$}  {:<out_w$}", "rule", "node", "output").unwrap();
    for p in &profiles {
        write!(out, "  {p:<14}").unwrap();
    }
    writeln!(out).unwrap();
    for g in &a.groups {
        write!(out, "{:<rule_w$}  {:<node_w$}  {:<out_w$}", g.rule, target(g), g.outputs.join(",")).unwrap();
        for p in &a.profiles {
            write!(out, "  {:<14}", g.verdict.get(p).copied().unwrap_or("not fused")).unwrap();
        }
        writeln!(out).unwrap();
    }
    let details: Vec<String> = a
        .groups
        .iter()
        .flat_map(|g| {
            let cx = g.counterexample.iter().map(move |(p, c)| format!("  {} on {p}: {c}", target(g)));
            let why = g.reason.iter().map(move |(p, r)| format!("  {} on {p}: {r}", target(g)));
            cx.chain(why)
        })
        .collect();
    if !details.is_empty() {
        writeln!(out, "\nrefuted and unknown:").unwrap();
        for d in dedup(details) {
            writeln!(out, "{d}").unwrap();
        }
    }
    if !a.hazards.is_empty() {
        writeln!(out, "\nhazards:").unwrap();
        for h in &a.hazards {
            writeln!(out, "  [{}] {}: {}", h.kind, h.node, h.message).unwrap();
        }
    }
    out
}

fn target(g: &super::Group) -> String {
    format!("{} ({})", g.target, g.op)
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    v.into_iter().filter(|s| seen.insert(s.clone())).collect()
}
