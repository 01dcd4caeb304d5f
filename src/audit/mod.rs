//! `qdqc audit`: for every group ONNX Runtime's optimizer would fuse (per ISA profile), the
//! engine's verdict — exact, refuted with a counterexample, or unknown — and every hazard of the
//! contract (docs/contract.md §7.1).

mod dispatch;
mod params;
mod table;

use crate::verdicts::Maps;
use params::Ctx;
use qdqc_exact::{Certificate, Contract, Counterexample, Verdict};
use qdqc_lang::canon::dtype_name;
use qdqc_lang::scope::Scope;
use qdqc_lang::{Model, Result, ir};
use qdqc_ort::hazards::hazards;
use qdqc_ort::optimizer::{self, Fusion};
use qdqc_ort::requant::NearBoundary;
use qdqc_ort::{Isa, OrtTarget};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// `qdqc audit`: every group ONNX Runtime's own optimizer would fuse in a model, with the
/// engine's verdict per profile (contract §3.10), and every hazard; the model is not changed.
#[derive(Clone, Debug, Serialize)]
pub struct Audit {
    /// The audited model's path, as given.
    pub file: String,
    /// The contract of each group's `verdict`, `proof`, `counterexample` and `reason`.
    pub contract: Contract,
    /// Every contract judged: without `--contract`, `exact` then `real` (in each group's `real`).
    pub contracts: Vec<Contract>,
    /// The target whose fusions were judged (`OrtTarget::NAME`).
    pub target: &'static str,
    /// The ISA profiles judged: ORT picks kernels by CPUID, so a verdict holds per profile.
    pub profiles: Vec<Isa>,
    /// Every group ORT would change, with its verdicts.
    pub groups: Vec<Group>,
    /// What a runtime would silently reinterpret or break (contract §7.1).
    pub hazards: Vec<ReportedHazard>,
    /// What was accepted as ONNX Runtime accepts it (`compile`'s report has the same list).
    pub warnings: Vec<String>,
}

/// One group ORT changes, with the verdict per profile on which it changes it.
#[derive(Clone, Debug, Serialize)]
pub struct Group {
    /// ORT's action or transformer name ("2DQ", "Conv", "drop", "ReluQuantRewrite", ...).
    pub rule: String,
    /// The target node (the float op the group is built around).
    pub target: String,
    /// Its op type.
    pub op: String,
    /// What ORT runs instead.
    pub fused_op: String,
    /// Every authored node of the group: DQ inputs, target, Q outputs.
    pub nodes: Vec<String>,
    /// Names of the quantized tensors the group's QuantizeLinear nodes produce.
    pub outputs: Vec<String>,
    /// Subgraph path, empty for the main graph.
    pub location: String,
    pub verdict: BTreeMap<Isa, &'static str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub proof: BTreeMap<Isa, Certificate>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub counterexample: BTreeMap<Isa, Counterexample>,
    /// Why a verdict is unknown (or refuted without a concrete input).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub reason: BTreeMap<Isa, String>,
    /// Per profile, the code type of each absorbed DQ's input and Q's output by node name, as the
    /// fused kernel sees it (x86 runs QDQS8ToU8 first, turning int8 Q/DQ pairs to uint8).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub codes: BTreeMap<Isa, BTreeMap<String, String>>,
    /// The verdicts under the `real` contract, when the audit judges both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real: Option<ContractVerdicts>,
    /// For a Conv/MatMul/Gemm group whose float path fails P2: how many reachable accumulators
    /// lie within its error of a rounding boundary ("off by 1 LSB sometimes").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub near_boundary: Option<NearBoundary>,
    /// The quantization parameters the proof used, when the group has per-tensor ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<dispatch::GroupParams>,
}

/// One contract's verdicts per profile, spread as in [`Group`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct ContractVerdicts {
    pub verdict: BTreeMap<Isa, &'static str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub proof: BTreeMap<Isa, Certificate>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub counterexample: BTreeMap<Isa, Counterexample>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub reason: BTreeMap<Isa, String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReportedHazard {
    pub kind: String,
    pub node: String,
    pub message: String,
}

/// Audits the model at `path` on every profile of `target` under `contracts` (the first fills each
/// group's own verdict maps; a second, `real`, its `real` field).
pub fn audit(path: &Path, target: &OrtTarget, contracts: &[Contract]) -> Result<Audit> {
    let model = Model::load(path)?;
    let mut groups: Vec<Group> = Vec::new();
    // Graph contexts by location, so a fusion's node positions resolve in their own graph.
    let mut contexts = Vec::new();
    collect(&model, &model.graph, Scope::main(&model), &mut contexts);
    let (primary, second) = (contracts[0], contracts.get(1).copied());
    for &isa in target.profiles() {
        let outcome = optimizer::optimize(&model, &model.graph, model.main_graph(), isa);
        for fusion in &outcome.fusions {
            let ctx = contexts.iter().find(|c| c.graph.location == fusion.location).expect("every graph has a context");
            let verdict = dispatch::prove(ctx, fusion, isa, primary);
            let slot = record(&mut groups, describe(ctx, fusion), isa, verdict);
            let g = &mut groups[slot];
            if let Some(contract) = second {
                let v = dispatch::prove(ctx, fusion, isa, contract);
                let r = g.real.get_or_insert_with(ContractVerdicts::default);
                Maps { verdict: &mut r.verdict, proof: &mut r.proof, counterexample: &mut r.counterexample, reason: &mut r.reason }.insert(isa, v);
            }
            if g.near_boundary.is_none() {
                g.near_boundary = dispatch::near_boundary(ctx, fusion);
            }
            let codes = fusion.codes.iter().filter_map(|&(p, t)| Some((ctx.name(p), dtype_name(t?).to_string())));
            g.codes.insert(isa, codes.collect());
        }
        for rewrite in &outcome.rewrites {
            let ctx = contexts.iter().find(|c| c.graph.location == rewrite.location).expect("every graph has a context");
            // A float bias rounded in a node that stays float is decided per contract; the other
            // rewrites remove or merge Q/DQ (codes, not a reduction): one verdict for both.
            let verdict = |contract| dispatch::weight_bias_verdict(ctx, rewrite, contract).unwrap_or_else(|| rewrite.verdict.clone());
            let slot = record(&mut groups, dispatch::describe_rewrite(ctx, rewrite), isa, verdict(primary));
            if let Some(contract) = second {
                let r = groups[slot].real.get_or_insert_with(ContractVerdicts::default);
                Maps { verdict: &mut r.verdict, proof: &mut r.proof, counterexample: &mut r.counterexample, reason: &mut r.reason }
                    .insert(isa, verdict(contract));
            }
        }
    }
    let hazards = hazards_json(&model);
    Ok(Audit {
        file: path.display().to_string(),
        contract: primary,
        contracts: contracts.to_vec(),
        target: OrtTarget::NAME,
        profiles: target.profiles().to_vec(),
        groups,
        hazards,
        warnings: crate::compile::warnings(&model),
    })
}

pub(crate) fn hazards_json(model: &Model) -> Vec<ReportedHazard> {
    hazards(model).into_iter().map(|h| ReportedHazard { kind: h.kind.to_string(), node: h.node, message: h.message }).collect()
}

fn collect<'m>(model: &'m Model, graph: &'m ir::Graph, scopes: Scope<'m>, out: &mut Vec<Ctx<'m>>) {
    let proto = scopes.current();
    for sub in &graph.subgraphs {
        if let Some(g) = sub.proto(proto) {
            collect(model, &sub.graph, scopes.enter(g), out);
        }
    }
    out.push(Ctx { model, graph, scopes });
}

/// The group's identity and names, before any verdict.
fn describe(ctx: &Ctx, f: &Fusion) -> Group {
    let mut nodes: Vec<String> = f.dq_inputs.iter().map(|&p| ctx.name(p)).collect();
    nodes.push(ctx.name(f.target));
    nodes.extend(f.absorbed_clip.map(|p| ctx.name(p)));
    nodes.extend(f.q_outputs.iter().map(|&p| ctx.name(p)));
    Group {
        rule: f.rule.to_string(),
        target: ctx.name(f.target),
        op: ctx.node(f.target).op_type.clone().unwrap_or_default(),
        fused_op: f.fused_op.clone(),
        nodes,
        outputs: f.q_outputs.iter().filter_map(|&p| ctx.node(p).output.first().cloned()).collect(),
        location: f.location.trim().to_string(),
        verdict: BTreeMap::new(),
        proof: BTreeMap::new(),
        counterexample: BTreeMap::new(),
        reason: BTreeMap::new(),
        codes: BTreeMap::new(),
        real: None,
        near_boundary: None,
        params: dispatch::params_json(ctx, f),
    }
}

/// Adds `verdict` for `isa` to the group with the same rule and nodes, or a new group; its index.
fn record(groups: &mut Vec<Group>, group: Group, isa: Isa, verdict: Verdict) -> usize {
    let slot = match groups.iter().position(|g| g.rule == group.rule && g.nodes == group.nodes && g.location == group.location) {
        Some(i) => i,
        None => {
            groups.push(group);
            groups.len() - 1
        }
    };
    let g = &mut groups[slot];
    Maps { verdict: &mut g.verdict, proof: &mut g.proof, counterexample: &mut g.counterexample, reason: &mut g.reason }.insert(isa, verdict);
    slot
}

pub use table::text;
