//! `qdqc compile`: load, lower (with the proof-gated rules), emit ONNX, report.

use crate::inspect::{QdqGroup, group_json};
use crate::profile::SessionProfile;
use crate::verdicts::Maps;
use crate::weights::{FloatTable, ModelSize};
use qdqc_exact::{Certificate, Contract, Counterexample};
use qdqc_lang::outputs::Outputs;
use qdqc_lang::save::SaveOptions;
use qdqc_lang::{Model, Result};
use qdqc_lower::{Limits, Observer, Options};
use qdqc_rewrites::rules::{Allow, Lossy};
use qdqc_rewrites::{Decision, Profile, RuleOptions, Target};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// What `qdqc compile` is asked to do; `Default` is the CLI's defaults (fuse under `exact` on
/// every profile, nothing lossy).
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Run the rewrite catalog (`false` is `--no-fuse`).
    pub fuse: bool,
    /// The contract every fusion is proven against (contract §2).
    pub contract: Contract,
    /// The target: a fusion fires only if proven on every one of its profiles. ONNX Runtime by
    /// default; [`Target::Rust`] proves for the Rust kernels, whose lowered form
    /// ([`Compiled::lowered`]) `compile_rust` turns into a crate.
    pub target: Target,
    /// Per-region e-graph runner limits (iterations, nodes, time), deterministic by default.
    pub limits: Limits,
    /// Re-sign int8 activations to uint8 when every profile is x86 (`lower::resign`).
    pub resign: bool,
    /// `--fold-weights`: constant weight DQs become float initializers.
    pub fold_weights: bool,
    /// Lossy rewrites allowed by `--allow` (none by default), with `--inputs` activations.
    pub allow: Allow,
    /// `--timings`: the report gets wall-clock times (and is then no longer byte-identical
    /// across runs).
    pub timings: bool,
    /// Told of each stage and region as the compile goes (the CLI's bar on a terminal).
    pub progress: Observer,
    /// `--target rust`: where the generated crate keeps its weights (`--weights`).
    pub rust_weights: qdqc_codegen::rust::Weights,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            fuse: true,
            contract: Contract::Exact,
            target: Target::default(),
            limits: Limits::default(),
            resign: true,
            fold_weights: false,
            allow: Allow::default(),
            timings: false,
            progress: Observer::default(),
            rust_weights: qdqc_codegen::rust::Weights::default(),
        }
    }
}

/// The report of one compile (`--report`): every decision with its proof, so a fused model can be
/// audited without re-running the compiler.
#[derive(Clone, Debug, Serialize)]
pub struct CompileReport {
    /// The input model's path, as given.
    pub input: String,
    /// The compiled model's path, as given (empty for a compile in memory).
    pub output: String,
    /// The contract the proofs were checked against.
    pub contract: Contract,
    /// Whether the rewrite catalog ran (`false` under `--no-fuse`).
    pub fuse: bool,
    /// The target the model was compiled for (`OrtTarget::NAME`, `RustTarget::NAME`).
    pub target: &'static str,
    /// The target's profiles every fusion was proven on.
    pub profiles: Vec<Profile>,
    /// Names of the rules the catalog ran.
    pub rules: Vec<String>,
    /// The ONNX Runtime session settings under which the compiled model keeps its guarantee.
    pub session_profile: SessionProfile,
    /// Nodes of the input, over all graphs.
    pub nodes_before: usize,
    /// Nodes of the compiled model, over all graphs.
    pub nodes_after: usize,
    /// Fusions in the compiled model: fired and picked by extraction.
    pub fused: usize,
    /// Sizes of the e-graphs the lowering built.
    pub stats: LoweringStats,
    /// Bytes of the compiled model's protobuf.
    pub model_bytes: u64,
    /// The external-data file written beside the model and its size, when weights are stored
    /// outside the protobuf.
    pub external_data: Option<ExternalData>,
    /// int8 activations stored as uint8 (zero point + 128) before fusion, with their proofs.
    pub resigned: Vec<ResignedTensor>,
    /// When re-signing was possible: the cost of both forms and the one kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resign_costs: Option<ResignCosts>,
    /// Stored size of the model before and after, external data included.
    pub model_size: ModelSize,
    /// Per embedding lookup rewritten by `gather-before-dequantize`: its float table, gone or
    /// still materialised for other readers.
    pub float_tables: Vec<FloatTable>,
    /// Every rule decision: the groups fused and the groups refused, with proofs.
    pub decisions: Vec<GroupDecision>,
    /// Every QDQ group of the input that no rule decided.
    pub undecided: Vec<QdqGroup>,
    /// What a runtime would silently reinterpret or break (contract §7.1), reported even when qdqc
    /// changes nothing.
    pub hazards: Vec<crate::audit::ReportedHazard>,
    /// What qdqc accepted although the model is not strictly valid ONNX, as ONNX Runtime does
    /// (a domain used without an opset import), each kept as authored; and every `--inputs`
    /// array no deviation was measured on, with the reason.
    pub warnings: Vec<String>,
    /// Wall-clock times, only with `--timings`: everything else in the report is a function of
    /// the input and the options.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

/// Wall-clock times of a compile (`--timings`), kept apart so the rest of the report stays
/// byte-identical across runs.
#[derive(Clone, Debug, Serialize)]
pub struct Timings {
    /// The compile in memory: lowering to the compiled model (loading and writing excluded).
    pub total_micros: u64,
    /// The proofs behind every decision's verdicts, summed.
    pub proofs_micros: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LoweringStats {
    pub graphs: usize,
    pub regions: usize,
    pub largest_region: usize,
    pub enodes: usize,
    pub eclasses: usize,
    pub stop_reasons: BTreeMap<String, usize>,
    /// Proofs reused for a group with the same exact parameters (`hits`) and proofs run (`misses`).
    pub proof_memo: qdqc_rewrites::rules::MemoCounts,
}

#[derive(Clone, Debug, Serialize)]
pub struct ResignCosts {
    pub int8: usize,
    pub uint8: usize,
    pub chosen: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct ResignedTensor {
    pub tensor: String,
    pub quantize: String,
    pub dequantize: Vec<String>,
    pub zero_point_int8: i64,
    pub zero_point_uint8: i64,
    pub verdict: &'static str,
    pub proof: Option<Certificate>,
}

fn resigned_json(r: &qdqc_lower::resign::Resigned) -> ResignedTensor {
    ResignedTensor {
        tensor: r.tensor.clone(),
        quantize: r.quantize.clone(),
        dequantize: r.dequantize.clone(),
        zero_point_int8: r.zero_point,
        zero_point_uint8: r.zero_point + 128,
        verdict: r.proof.word(),
        proof: r.proof.certificate().cloned(),
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ExternalData {
    pub location: String,
    pub bytes: u64,
}

/// One rule's decision on one QDQ group: fired or refused, with the verdict, proof or
/// counterexample per profile (contract §2.5, §4.1).
#[derive(Clone, Debug, Serialize)]
pub struct GroupDecision {
    /// The rule that decided (its name in the catalog).
    pub rule: String,
    /// The op the group becomes when fused.
    pub fused_op: String,
    /// The authored nodes of the group.
    pub nodes: Vec<String>,
    /// The group's output tensor, which names the group in reports.
    pub output: String,
    /// Proven (or allowed) and added to the e-graph.
    pub fired: bool,
    /// A fired fusion the cost model did not pick: extraction kept the authored group because
    /// ONNX Runtime's fused kernel is measured slower (`rewrites/ort/src/cost.rs`). Absent when picked.
    #[serde(skip_serializing_if = "is_false")]
    pub kept_unfused: bool,
    /// `exact`, `refuted` or `unknown` per profile: the fusion fires only if exact on all.
    pub verdict: BTreeMap<Profile, &'static str>,
    /// The evidence behind each verdict that has one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub proof: BTreeMap<Profile, Certificate>,
    /// The minimised differing point of each refutation.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub counterexample: BTreeMap<Profile, Counterexample>,
    /// Why each `unknown` is unknown.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub reason: BTreeMap<Profile, String>,
    /// An applied lossy rewrite: its contract, accuracy level and measured deviations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lossy: Option<Lossy>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Values written by authored nodes of the lowered graph and its subgraphs: a fired decision
/// whose output is among them was not extracted.
fn authored_outputs(g: &qdqc_lower::lowered::LoweredGraph, out: &mut std::collections::BTreeSet<String>) {
    for n in &g.nodes {
        if matches!(n.computation, qdqc_lower::lowered::Computation::Authored { .. }) {
            out.extend(n.outputs.iter().filter(|o| !o.is_empty()).cloned());
        }
    }
    for sub in &g.subgraphs {
        authored_outputs(&sub.graph, out);
    }
}

fn decision_json(d: &Decision) -> GroupDecision {
    let mut out = GroupDecision {
        rule: d.rule.to_string(),
        fused_op: d.fused_op.clone(),
        nodes: d.nodes.clone(),
        output: d.output.clone(),
        fired: d.fired,
        kept_unfused: false,
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

/// Compiles `input` into `output` (and its external data), writing nothing unless everything
/// succeeded.
pub fn compile(input: &Path, output: &Path, options: &CompileOptions) -> Result<CompileReport> {
    compile_with_report(input, output, None, options)
}

/// [`compile`], with the JSON report written to `report` in the same transaction: the model, its
/// external data and the report are renamed into place together, or none is
/// (`qdqc_lang::outputs`). Output paths are checked before any work: none may be an input file or
/// another output (bad input), and every folder must take a new file (I/O error).
pub fn compile_with_report(input: &Path, output: &Path, report_path: Option<&Path>, options: &CompileOptions) -> Result<CompileReport> {
    // The Rust target's fused nodes mean Rust kernels, not ONNX Runtime's: it writes a crate.
    if matches!(options.target, Target::Rust(_)) {
        return Err(qdqc_lang::Error::bad_input(input, "the Rust target writes a crate (`qdqc::compile_rust`, `--target rust`), not an ONNX model"));
    }
    let model = Model::load(input)?;
    let inputs: Vec<(&str, std::path::PathBuf)> = std::iter::once(("the input model", input.to_path_buf()))
        .chain(model.external_files().into_iter().map(|f| ("an external data file of the input", f)))
        .collect();
    let mut writes = vec![("-o", output.to_path_buf()), ("the output's external data file", qdqc_lang::save::data_path(output)?)];
    writes.extend(report_path.map(|r| ("--report", r.to_path_buf())));
    qdqc_lang::outputs::check_distinct(&inputs, &writes)?;
    for (_, path) in &writes {
        Outputs::check_writable(path)?;
    }
    let mut outputs = Outputs::default();
    let Compiled { model: compiled, source, mut report, .. } = compile_model(&model, options)?;
    options.progress.start("writing", 0);
    let saved = qdqc_lang::save::save(compiled, &source, output, &SaveOptions::default(), &mut outputs)?;
    report.output = output.display().to_string();
    report.model_bytes = saved.model_bytes;
    report.model_size.after_bytes = saved.model_bytes + saved.external.as_ref().map_or(0, |(_, bytes)| *bytes);
    report.external_data = saved.external.map(|(location, bytes)| ExternalData { location, bytes });
    if let Some(path) = report_path {
        let json = serde_json::to_string_pretty(&report).expect("report serializes");
        outputs.stage(path, json.as_bytes())?;
    }
    outputs.commit()?;
    Ok(report)
}

/// A compile in memory ([`compile_model`]): the compiled model and its report.
pub struct Compiled<'m> {
    /// The compiled model. Tensors that stay external still refer to `source`'s external files.
    pub model: qdqc_lang::onnx::ModelProto,
    /// The model the compiled form was lowered from (the input, or its re-signed form), which a
    /// save reads external tensors from.
    pub source: std::borrow::Cow<'m, Model>,
    /// The backend-neutral lowered form the ONNX model was written from (the Rust backend reads
    /// it with `source`).
    pub lowered: qdqc_lower::lowered::LoweredGraph,
    /// The report. Until the model is written (`compile_with_report`), `output` is empty and
    /// `model_bytes`, `model_size.after_bytes` are the in-memory protobuf's size, with no
    /// `external_data`.
    pub report: CompileReport,
}

/// Compiles a loaded model in memory: the library's entry point; [`compile`] and
/// [`compile_with_report`] wrap it with loading and writing.
///
/// ```
/// let model = qdqc::Model::load("examples/models/cnn_residual_qdq.onnx".as_ref())?;
/// let compiled = qdqc::compile_model(&model, &qdqc::CompileOptions::default())?;
/// // `exact` by default: every fused group is proven on every ISA profile selected.
/// for d in compiled.report.decisions.iter().filter(|d| d.fired) {
///     println!("{} → {}", d.output, d.fused_op);
/// }
/// assert_eq!(compiled.report.contract, qdqc::Contract::Exact);
/// # Ok::<(), qdqc::Error>(())
/// ```
pub fn compile_model<'m>(model: &'m Model, options: &CompileOptions) -> Result<Compiled<'m>> {
    let start = std::time::Instant::now();
    let rules = options.fuse.then(|| RuleOptions {
        contract: options.contract,
        target: options.target.clone(),
        fold_weights: options.fold_weights,
        allow: options.allow.clone(),
        memo: Default::default(),
    });
    let lower_options = Options { rules: rules.clone(), limits: options.limits.clone(), progress: options.progress.clone() };
    // Re-signing int8 activations is the target's call (ORT: x86 integer kernels, docs/int8-activations.md).
    let qdqc_lower::resign::Choice { model, lowering, resigned, costs } = qdqc_lower::resign::lower_cheaper_sign(model, &lower_options, options.resign)?;
    let resign_costs = costs.map(|c| ResignCosts { int8: c.int8, uint8: c.uint8, chosen: if c.uint8 <= c.int8 { "uint8" } else { "int8" } });
    let mut decisions: Vec<GroupDecision> = lowering.decisions.iter().map(decision_json).collect();
    let mut kept = std::collections::BTreeSet::new();
    authored_outputs(&lowering.graph, &mut kept);
    for d in decisions.iter_mut().filter(|d| d.fired) {
        d.kept_unfused = kept.contains(&d.output);
    }
    let mut compiled = qdqc_codegen::onnx::to_model(&model, &lowering.graph)?;
    // The metadata states an ONNX Runtime guarantee: only an ORT compile has one.
    if options.fuse && matches!(options.target, Target::Ort(_)) {
        record_guarantee(&mut compiled, options);
    }
    let gathers = decisions.iter().filter(|d| d.fired && d.rule == qdqc_rewrites::GATHER_BEFORE_DEQUANTIZE).map(|d| d.output.as_str());
    let float_tables = crate::weights::float_tables(&model, &compiled, gathers);
    let input = &model.path;
    let input_bytes = std::fs::metadata(input).map_err(|e| qdqc_lang::Error::bad_input(input, format!("cannot read: {e}")))?.len();
    let compiled_bytes = prost::Message::encoded_len(&compiled) as u64;
    let model_size = ModelSize { before_bytes: input_bytes + model.external_bytes(), after_bytes: compiled_bytes };
    let undecided = qdqc_lower::groups::find(&model)
        .iter()
        .map(group_json)
        .filter(|g| !decisions.iter().any(|d| d.nodes.contains(&g.node) || g.outputs.iter().any(|o| d.output == o.tensor)))
        .collect();
    let s = lowering.stats;
    let report = CompileReport {
        input: input.display().to_string(),
        output: String::new(),
        contract: options.contract,
        fuse: options.fuse,
        target: options.target.name(),
        profiles: options.target.profiles(),
        rules: rules.as_ref().map(qdqc_lower::rule_names).unwrap_or_default(),
        session_profile: SessionProfile::for_float_fusions(options.allow.ort_float_fusions),
        nodes_before: model.proto.graph.as_ref().map_or(0, count_nodes),
        nodes_after: count_lowered(&lowering.graph),
        fused: decisions.iter().filter(|d| d.fired && !d.kept_unfused).count(),
        stats: LoweringStats {
            graphs: s.graphs,
            regions: s.regions,
            largest_region: s.largest_region,
            enodes: s.enodes,
            eclasses: s.eclasses,
            stop_reasons: s.stop_reasons,
            proof_memo: rules.as_ref().map(|r| r.memo.counts()).unwrap_or_default(),
        },
        model_bytes: compiled_bytes,
        external_data: None,
        resigned: resigned.iter().map(resigned_json).collect(),
        resign_costs,
        model_size,
        float_tables,
        decisions,
        undecided,
        hazards: crate::audit::hazards_json(&model),
        warnings: warnings(&model).into_iter().chain(unused_inputs(&model, &options.allow.inputs)).collect(),
        timings: options.timings.then(|| Timings { total_micros: start.elapsed().as_micros() as u64, proofs_micros: proof_micros(&lowering.decisions) }),
    };
    Ok(Compiled { model: compiled, source: model, report, lowered: lowering.graph })
}

/// Keys of the output model's `metadata_props` that say what its guarantee is: the contract, the
/// ISA profiles it was proven for, and the ONNX Runtime session profile it needs.
pub const METADATA_CONTRACT: &str = "qdqc.contract";
pub const METADATA_PROFILES: &str = "qdqc.ort_profiles";
pub const METADATA_SESSION: &str = "qdqc.session_profile";

/// Writes the guarantee into `metadata_props`, replacing qdqc's own earlier entries (so compiling
/// a compiled model again gives the same file) and keeping the author's.
fn record_guarantee(model: &mut qdqc_lang::onnx::ModelProto, options: &CompileOptions) {
    let profiles: Vec<&str> = options.target.profiles().iter().map(|i| i.name()).collect();
    let mut contract = match options.contract {
        Contract::Exact => "exact",
        Contract::Real => "real",
    }
    .to_string();
    if options.allow.ort_float_fusions {
        contract.push_str("; float ops lossy (--allow ort-float-fusions)");
    }
    let session = SessionProfile::for_float_fusions(options.allow.ort_float_fusions).describe();
    let entries = [(METADATA_CONTRACT, contract), (METADATA_PROFILES, profiles.join(",")), (METADATA_SESSION, session)];
    model.metadata_props.retain(|e| !entries.iter().any(|(k, _)| e.key.as_deref() == Some(*k)));
    for (key, value) in entries {
        model.metadata_props.push(qdqc_lang::onnx::StringStringEntryProto { key: Some(key.to_string()), value: Some(value) });
    }
}

/// The report's warnings: domains used without an import that ONNX Runtime imports implicitly.
pub(crate) fn warnings(model: &Model) -> Vec<String> {
    qdqc_lang::opset::implicit_imports(&model.proto)
        .into_iter()
        .map(|(domain, node)| format!("{node} uses domain '{domain}', which the model does not import; ONNX Runtime imports its latest version implicitly, and qdqc keeps the imports as authored"))
        .collect()
}

fn proof_micros(decisions: &[Decision]) -> u64 {
    use qdqc_exact::Verdict;
    let micros = |v: &Verdict| v.proof().map_or(0, |p| p.micros);
    decisions.iter().flat_map(|d| &d.verdicts).map(|(_, v)| micros(v)).sum()
}

/// One warning per `--inputs` array that no lossy instance measured a deviation on.
fn unused_inputs(model: &Model, inputs: &qdqc_rewrites::rules::Activations) -> Vec<String> {
    let outcome = inputs.outcome.lock().unwrap_or_else(|e| e.into_inner());
    let mut names = std::collections::BTreeSet::new();
    tensor_names(model.proto.graph.as_ref(), &mut names);
    inputs
        .arrays
        .keys()
        .filter_map(|key| {
            let why = match outcome.get(key) {
                Some(None) => return None,
                Some(Some(why)) => why.clone(),
                None if !names.contains(key.as_str()) => "no tensor of the model has this name".to_string(),
                None => "no lossy instance reads it (deviations are measured on the activation input of an --allow'ed MatMulNBits instance)".to_string(),
            };
            Some(format!("--inputs {}: array '{key}' not used: {why}", inputs.source))
        })
        .collect()
}

/// Every value name of a graph and its subgraphs: inputs, initializers, node outputs.
fn tensor_names<'g>(g: Option<&'g qdqc_lang::onnx::GraphProto>, out: &mut std::collections::BTreeSet<&'g str>) {
    let Some(g) = g else { return };
    out.extend(g.input.iter().filter_map(|v| v.name.as_deref()));
    out.extend(g.initializer.iter().filter_map(|t| t.name.as_deref()));
    for n in &g.node {
        out.extend(n.output.iter().map(String::as_str));
        qdqc_lang::ir::node_graphs(n).for_each(|sub| tensor_names(Some(sub), out));
    }
}

fn count_nodes(g: &qdqc_lang::onnx::GraphProto) -> usize {
    let nested = g.node.iter().flat_map(qdqc_lang::ir::node_graphs);
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
        if let Some(lossy) = self.session_profile.lossy {
            writeln!(out, "LOSSY   session profile (allowed by --allow ort-float-fusions): {lossy}").unwrap();
        }
        for r in &self.resigned {
            let proof = r.proof.as_ref().map_or(String::new(), |p| format!(" ({})", p.detail));
            writeln!(
                out,
                "RESIGNED {} int8 zero point {} → uint8 {} [{} → {}]{proof}",
                r.tensor,
                r.zero_point_int8,
                r.zero_point_uint8,
                r.quantize,
                r.dequantize.join(", ")
            )
            .unwrap();
        }
        for d in &self.decisions {
            if let Some(l) = &d.lossy {
                writeln!(out, "LOSSY   {} → {} [{}] (allowed by --allow; weights exact: {})", d.output, d.fused_op, d.nodes.join(", "), l.weights.detail)
                    .unwrap();
                writeln!(out, "    contract lossy: accuracy_level {}, {}-bit weights, block {}", l.accuracy_level.name(), l.bits, l.block_size).unwrap();
                for dev in &l.deviation {
                    writeln!(out, "    deviation on {} ({} rows): max abs {:.3e}, max rel {:.3e}", dev.inputs, dev.rows, dev.max_abs, dev.max_rel).unwrap();
                }
                continue;
            }
            let verdicts: Vec<String> = d.verdict.iter().map(|(i, v)| format!("{i}: {v}")).collect();
            let word = match (d.fired, d.kept_unfused) {
                (true, false) => "FUSED  ",
                (true, true) => "PROVEN ",
                (false, _) => "REFUSED",
            };
            writeln!(out, "{word} {} → {} [{}] ({})", d.output, d.fused_op, d.nodes.join(", "), verdicts.join(", ")).unwrap();
            if d.kept_unfused {
                writeln!(out, "    kept unfused: ONNX Runtime's fused kernel is measured slower than the group (cost model, rewrites/ort/src/cost.rs)")
                    .unwrap();
            }
            for (isa, c) in &d.counterexample {
                writeln!(out, "    {isa}: {c}").unwrap();
            }
            for (isa, r) in &d.reason {
                writeln!(out, "    {isa}: {r}").unwrap();
            }
        }
        for t in &self.float_tables {
            let fate = if t.materialised { format!("still materialised for {}", t.readers.join(", ")) } else { "gone".to_string() };
            writeln!(
                out,
                "TABLE   {} = DQ({}): {} elements, {} bytes of f32, read row by row by {}; {fate}",
                t.table, t.codes, t.elements, t.float_bytes, t.gather_output
            )
            .unwrap();
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
