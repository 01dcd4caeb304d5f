//! `qdqc compile`: load, lower (with the proof-gated rules), emit ONNX, report.

use crate::inspect::{GroupJson, group_json};
use crate::profile::SessionProfile;
use qdqc_lang::save::SaveOptions;
use qdqc_lang::{Model, Result};
use qdqc_lower::{Limits, Options};
use crate::verdicts::Maps;
use qdqc_rewrites::exact::{Certificate, Contract, Counterexample};
use qdqc_rewrites::ort::Isa;
use qdqc_rewrites::rules::{Allow, Lossy};
use qdqc_rewrites::{Decision, RuleOptions};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Run the rewrite catalog (`false` is `--no-fuse`).
    pub fuse: bool,
    pub contract: Contract,
    /// A fusion fires only if proven on every one of these profiles.
    pub isas: Vec<Isa>,
    pub limits: Limits,
    /// Lossy rewrites allowed by `--allow` (none by default), with `--inputs` activations.
    pub allow: Allow,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions { fuse: true, contract: Contract::Exact, isas: Isa::ALL.to_vec(), limits: Limits::default(), allow: Allow::default() }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CompileReport {
    pub input: String,
    pub output: String,
    pub contract: Contract,
    pub fuse: bool,
    pub profiles: Vec<Isa>,
    /// Names of the rules the catalog ran.
    pub rules: Vec<String>,
    /// The ONNX Runtime session settings under which the compiled model keeps its guarantee.
    pub session_profile: SessionProfile,
    pub nodes_before: usize,
    pub nodes_after: usize,
    pub fused: usize,
    pub stats: StatsJson,
    pub model_bytes: u64,
    pub external_data: Option<ExternalJson>,
    /// Every rule decision: the groups fused and the groups refused, with proofs.
    pub decisions: Vec<DecisionJson>,
    /// Every QDQ group of the input that no rule decided.
    pub undecided: Vec<GroupJson>,
    /// What a runtime would silently reinterpret or break (spec §7), reported even when qdqc
    /// changes nothing.
    pub hazards: Vec<crate::audit::HazardJson>,
}

#[derive(Clone, Debug, Serialize)]
pub struct StatsJson {
    pub graphs: usize,
    pub regions: usize,
    pub largest_region: usize,
    pub enodes: usize,
    pub eclasses: usize,
    pub stop_reasons: BTreeMap<String, usize>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ExternalJson {
    pub location: String,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct DecisionJson {
    pub rule: String,
    pub fused_op: String,
    pub nodes: Vec<String>,
    pub output: String,
    pub fired: bool,
    pub verdict: BTreeMap<Isa, &'static str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub proof: BTreeMap<Isa, Certificate>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub counterexample: BTreeMap<Isa, Counterexample>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub reason: BTreeMap<Isa, String>,
    /// An applied lossy rewrite: its contract, accuracy level and measured deviations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lossy: Option<Lossy>,
}

fn decision_json(d: &Decision) -> DecisionJson {
    let mut out = DecisionJson {
        rule: d.rule.to_string(),
        fused_op: d.fused_op.clone(),
        nodes: d.nodes.clone(),
        output: d.output.clone(),
        fired: d.fired,
        verdict: BTreeMap::new(),
        proof: BTreeMap::new(),
        counterexample: BTreeMap::new(),
        reason: BTreeMap::new(),
        lossy: d.lossy.clone(),
    };
    let mut maps = Maps { verdict: &mut out.verdict, proof: &mut out.proof, counterexample: &mut out.counterexample, reason: &mut out.reason };
    for (isa, v) in &d.verdicts {
        maps.insert(*isa, v.clone());
    }
    out
}

pub fn compile(input: &Path, output: &Path, options: &CompileOptions) -> Result<CompileReport> {
    let model = Model::load(input)?;
    let rules = options.fuse.then(|| RuleOptions { contract: options.contract, isas: options.isas.clone(), allow: options.allow.clone() });
    let lowering = qdqc_lower::lower(&model, &Options { rules: rules.clone(), limits: options.limits.clone() })?;
    let saved = qdqc_codegen::onnx::write(&model, &lowering.graph, output, &SaveOptions::default())?;
    let decisions: Vec<DecisionJson> = lowering.decisions.iter().map(decision_json).collect();
    let undecided = qdqc_lower::groups::find(&model)
        .iter()
        .map(group_json)
        .filter(|g| !decisions.iter().any(|d| d.nodes.contains(&g.node) || g.outputs.iter().any(|o| d.output == o.tensor)))
        .collect();
    let s = lowering.stats;
    Ok(CompileReport {
        input: input.display().to_string(),
        output: output.display().to_string(),
        contract: options.contract,
        fuse: options.fuse,
        profiles: options.isas.clone(),
        rules: rules.map(|r| qdqc_lower::rule_names(&r)).unwrap_or_default(),
        session_profile: SessionProfile::ort(),
        nodes_before: model.proto.graph.as_ref().map_or(0, count_nodes),
        nodes_after: count_lowered(&lowering.graph),
        fused: decisions.iter().filter(|d| d.fired).count(),
        stats: StatsJson {
            graphs: s.graphs,
            regions: s.regions,
            largest_region: s.largest_region,
            enodes: s.enodes,
            eclasses: s.eclasses,
            stop_reasons: s.stop_reasons,
        },
        model_bytes: saved.model_bytes,
        external_data: saved.external.map(|(location, bytes)| ExternalJson { location, bytes }),
        decisions,
        undecided,
        hazards: crate::audit::hazards_json(&model),
    })
}

fn count_nodes(g: &qdqc_lang::onnx::GraphProto) -> usize {
    let nested = g.node.iter().flat_map(|n| &n.attribute).flat_map(|a| a.g.iter().chain(&a.graphs));
    g.node.len() + nested.map(count_nodes).sum::<usize>()
}

fn count_lowered(g: &qdqc_lower::lowered::LoweredGraph) -> usize {
    g.nodes.len() + g.subgraphs.iter().map(|s| count_lowered(&s.graph)).sum::<usize>()
}

impl CompileReport {
    /// `--explain`: every decision, one paragraph each.
    pub fn explain(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for d in &self.decisions {
            if let Some(l) = &d.lossy {
                writeln!(out, "LOSSY   {} → {} [{}] (allowed by --allow; weights exact: {})", d.output, d.fused_op, d.nodes.join(", "), l.weights.detail).unwrap();
                writeln!(out, "    contract lossy: accuracy_level {}, {}-bit weights, block {}", l.accuracy_level.name(), l.bits, l.block_size).unwrap();
                for dev in &l.deviation {
                    writeln!(out, "    deviation on {} ({} rows): max abs {:.3e}, max rel {:.3e}", dev.inputs, dev.rows, dev.max_abs, dev.max_rel).unwrap();
                }
                continue;
            }
            let verdicts: Vec<String> = d.verdict.iter().map(|(i, v)| format!("{i}: {v}")).collect();
            writeln!(out, "{} {} → {} [{}] ({})", if d.fired { "FUSED  " } else { "REFUSED" }, d.output, d.fused_op, d.nodes.join(", "), verdicts.join(", ")).unwrap();
            for (isa, c) in &d.counterexample {
                writeln!(out, "    {isa}: {c}").unwrap();
            }
            for (isa, r) in &d.reason {
                writeln!(out, "    {isa}: {r}").unwrap();
            }
        }
        for g in &self.undecided {
            writeln!(out, "KEPT    {} {} (no rule in the catalog)", g.op, g.node).unwrap();
        }
        for h in &self.hazards {
            writeln!(out, "HAZARD  [{}] {}: {}", h.kind, h.node, h.message).unwrap();
        }
        out
    }
}
