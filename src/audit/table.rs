//! The human form of an audit: one row per group with a verdict column per profile, then the
//! counterexamples and reasons a user can act on, then the hazards.

use super::Audit;
use std::fmt::Write;

pub fn text(a: &Audit) -> String {
    let mut out = String::new();
    let contracts: Vec<String> = a.contracts.iter().map(|c| format!("{c:?}").to_lowercase()).collect();
    writeln!(out, "{}: {} group(s) ONNX Runtime would rewrite, contract {}", a.file, a.groups.len(), contracts.join(" and ")).unwrap();
    // With both contracts a cell reads `exact/real`.
    let both = a.contracts.len() > 1;
    let profiles: Vec<String> = a.profiles.iter().map(|p| p.name().to_string()).collect();
    let width = |h: &str, cells: &mut dyn Iterator<Item = usize>| cells.max().unwrap_or(0).max(h.len());
    let node_w = width("node", &mut a.groups.iter().map(|g| target(g).len()));
    let rule_w = width("rule", &mut a.groups.iter().map(|g| g.rule.len()));
    let out_w = width("output", &mut a.groups.iter().map(|g| g.outputs.join(",").len()));
    write!(out, "\n{:<rule_w$}  {:<node_w$}  {:<out_w$}", "rule", "node", "output").unwrap();
    let cell_w = if both { 20 } else { 14 };
    for p in &profiles {
        write!(out, "  {p:<cell_w$}").unwrap();
    }
    writeln!(out).unwrap();
    for g in &a.groups {
        write!(out, "{:<rule_w$}  {:<node_w$}  {:<out_w$}", g.rule, target(g), g.outputs.join(",")).unwrap();
        for p in &a.profiles {
            let primary = g.verdict.get(p).copied().unwrap_or("not fused");
            let cell = match g.real.as_ref().and_then(|r| r.verdict.get(p)) {
                Some(real) if both => format!("{primary}/{real}"),
                _ => primary.to_string(),
            };
            write!(out, "  {cell:<cell_w$}").unwrap();
        }
        writeln!(out).unwrap();
    }
    let details: Vec<String> = a
        .groups
        .iter()
        .flat_map(|g| {
            let tag = if both { " [exact]" } else { "" };
            let cx = g.counterexample.iter().map(move |(p, c)| format!("  {} on {p}{tag}: {c}", target(g)));
            let why = g.reason.iter().map(move |(p, r)| format!("  {} on {p}{tag}: {r}", target(g)));
            let real = g.real.iter().flat_map(move |r| {
                let cx = r.counterexample.iter().map(move |(p, c)| format!("  {} on {p} [real]: {c}", target(g)));
                cx.chain(r.reason.iter().map(move |(p, why)| format!("  {} on {p} [real]: {why}", target(g))))
            });
            let near = g.near_boundary.iter().map(move |n| format!("  {}: {n}", target(g)));
            cx.chain(why).chain(real).chain(near)
        })
        .collect();
    if !details.is_empty() {
        writeln!(out, "\nrefuted, unknown and near a rounding boundary:").unwrap();
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
