//! `qdqc compile`: load, lower, emit ONNX, report.

use crate::inspect::{GroupJson, group_json};
use crate::profile::SessionProfile;
use qdqc_lang::save::SaveOptions;
use qdqc_lang::{Model, Result};
use qdqc_lower::{Limits, Options};
use serde::Serialize;
use std::path::Path;

#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Run the rewrite catalog (`false` is `--no-fuse`).
    pub fuse: bool,
    pub limits: Limits,
}

#[derive(Clone, Debug, Serialize)]
pub struct CompileReport {
    pub input: String,
    pub output: String,
    pub contract: &'static str,
    pub fuse: bool,
    /// Names of the rules the catalog ran.
    pub rules: Vec<String>,
    pub session_profile: SessionProfile,
    pub nodes_before: usize,
    pub nodes_after: usize,
    pub stats: StatsJson,
    pub model_bytes: u64,
    pub external_data: Option<ExternalJson>,
    /// Every QDQ group of the input and what became of it.
    pub groups: Vec<GroupOutcome>,
}

#[derive(Clone, Debug, Serialize)]
pub struct StatsJson {
    pub graphs: usize,
    pub regions: usize,
    pub largest_region: usize,
    pub enodes: usize,
    pub eclasses: usize,
    pub stop_reasons: std::collections::BTreeMap<String, usize>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ExternalJson {
    pub location: String,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupOutcome {
    #[serde(flatten)]
    pub group: GroupJson,
    pub outcome: String,
}

pub fn compile(input: &Path, output: &Path, options: &CompileOptions) -> Result<CompileReport> {
    let model = Model::load(input)?;
    let lowering = qdqc_lower::lower(&model, &Options { fuse: options.fuse, limits: options.limits.clone() })?;
    let saved = qdqc_codegen::onnx::write(&model, &lowering.graph, output, &SaveOptions::default())?;
    let rules = if options.fuse { qdqc_lower::rule_names() } else { Vec::new() };
    let why = if options.fuse { "kept: no rule in the catalog applies" } else { "kept: --no-fuse" };
    let s = lowering.stats;
    Ok(CompileReport {
        input: input.display().to_string(),
        output: output.display().to_string(),
        contract: "exact",
        fuse: options.fuse,
        rules,
        session_profile: SessionProfile::ort(),
        nodes_before: model.proto.graph.as_ref().map_or(0, count_nodes),
        nodes_after: count_lowered(&lowering.graph),
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
        groups: qdqc_lower::groups::find(&model)
            .iter()
            .map(|g| GroupOutcome { group: group_json(g), outcome: why.to_string() })
            .collect(),
    })
}

fn count_nodes(g: &qdqc_lang::onnx::GraphProto) -> usize {
    let nested = g.node.iter().flat_map(|n| &n.attribute).flat_map(|a| a.g.iter().chain(&a.graphs));
    g.node.len() + nested.map(count_nodes).sum::<usize>()
}

fn count_lowered(g: &qdqc_lower::lowered::LoweredGraph) -> usize {
    g.nodes.len() + g.subgraphs.iter().map(|s| count_lowered(&s.graph)).sum::<usize>()
}
