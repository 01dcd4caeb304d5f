//! qdqc's middle end: windowing ([`region`]), lifting ([`lift`]), rewriting (the catalog of
//! `qdqc-rewrites`, run per region under explicit limits), DAG-aware extraction ([`extract`]) and
//! the backend-neutral lowered form ([`lowered`]).

pub mod dump;
pub mod emit;
pub mod extract;
pub mod groups;
pub mod lift;
pub mod lowered;
pub mod order;
pub mod region;
pub mod resign;

use lowered::{LoweredGraph, LoweredSubgraph};
use qdqc_lang::scope::Scope;
use qdqc_lang::{Error, Model, Result, ir};
use qdqc_rewrites::{Decision, Log, RuleOptions};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Per-region runner limits. Set before `run` (egg issue #154: limits set after `run` are ignored).
#[derive(Clone, Debug)]
pub struct Limits {
    pub iterations: usize,
    pub nodes: usize,
    pub time: Duration,
}

impl Default for Limits {
    /// Iteration and node limits bound every region deterministically. The time limit is only a
    /// safety net far above any region's cost: egg checks it between rule applications, so a
    /// tight one would make which fusions happen depend on machine speed.
    fn default() -> Self {
        Limits { iterations: 8, nodes: 4096, time: Duration::from_secs(600) }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// What the rewrite catalog proves its fusions against; `None` is `--no-fuse`: lift and
    /// extract only.
    pub rules: Option<RuleOptions>,
    pub limits: Limits,
    /// Told of each region as it is done (the CLI's progress bar); nothing by default.
    pub progress: Observer,
}

/// What a long compile reports as it goes, for a caller that shows it (the CLI draws a bar on a
/// terminal). Called in order from the thread that compiles; it must not fail or block.
pub trait Progress: Send + Sync {
    /// A stage starts: `total` units of work (authored nodes for a proving pass), 0 when not counted.
    fn start(&self, stage: &str, total: u64);
    /// `done` more units of the current stage are finished; `proofs`: rule decisions so far in it.
    fn advance(&self, done: u64, proofs: u64);
}

/// An optional [`Progress`], shared by the passes of one compile.
#[derive(Clone, Default)]
pub struct Observer(pub Option<Arc<dyn Progress>>);

impl Observer {
    /// Starts a stage, if anyone watches.
    pub fn start(&self, stage: &str, total: u64) {
        if let Some(p) = &self.0 {
            p.start(stage, total);
        }
    }

    fn advance(&self, done: u64, proofs: u64) {
        if let Some(p) = &self.0 {
            p.advance(done, proofs);
        }
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Observer(watched)" } else { "Observer(none)" })
    }
}

/// Counters over all regions of all graphs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub graphs: usize,
    pub regions: usize,
    pub largest_region: usize,
    pub enodes: usize,
    pub eclasses: usize,
    /// How runners stopped, by reason (`Saturated`, `IterationLimit`, ...).
    pub stop_reasons: BTreeMap<String, usize>,
}

pub struct Lowering {
    pub graph: LoweredGraph,
    pub stats: Stats,
    /// Every rule decision, fired or refused, in the order made.
    pub decisions: Vec<Decision>,
}

pub fn lower(model: &Model, options: &Options) -> Result<Lowering> {
    lower_as(model, options, "proving")
}

/// [`lower`], its progress reported as `stage`.
pub fn lower_as(model: &Model, options: &Options, stage: &str) -> Result<Lowering> {
    let log = Log::default();
    let rules = options.rules.as_ref().map(|o| qdqc_rewrites::catalog(o, &log)).unwrap_or_default();
    let mut stats = Stats::default();
    options.progress.start(stage, node_count(model.main_graph()));
    let pass = Pass { rules: &rules, observer: &options.progress, log: &log };
    let graph = lower_graph(model, &model.graph, &Scope::main(model), &[], options, &pass, &mut stats)?;
    Ok(Lowering { graph, stats, decisions: log.take() })
}

/// Names of the catalog's rules, in the order they run.
pub fn rule_names(options: &RuleOptions) -> Vec<String> {
    qdqc_rewrites::catalog(options, &Log::default()).iter().map(|r| r.name.to_string()).collect()
}

/// Authored nodes of a graph and its subgraphs: the units of a proving pass.
fn node_count(g: &qdqc_lang::onnx::GraphProto) -> u64 {
    g.node.iter().map(|n| 1 + ir::node_graphs(n).map(node_count).sum::<u64>()).sum()
}

/// One lowering pass: the catalog it runs, and what each region reports to.
struct Pass<'a> {
    rules: &'a [qdqc_rewrites::Rewrite],
    observer: &'a Observer,
    log: &'a Log,
}

/// An authored node kept as written.
fn authored(node: &qdqc_lang::onnx::NodeProto, pos: usize) -> lowered::LoweredNode {
    lowered::LoweredNode { computation: lowered::Computation::Authored { node: pos }, inputs: node.input.clone(), outputs: node.output.clone() }
}

/// `outer`: the constants created in enclosing graphs, which this graph sees.
fn lower_graph(
    model: &Model,
    graph: &ir::Graph,
    scopes: &Scope,
    outer: &[&lowered::LoweredConstant],
    options: &Options,
    pass: &Pass,
    stats: &mut Stats,
) -> Result<LoweredGraph> {
    let proto = scopes.current();
    let fail = |problem: String| Error::compile(&model.path, format!("{problem}{}", graph.location));
    stats.graphs += 1;
    let mut nodes = Vec::with_capacity(proto.node.len());
    let mut constants = Vec::new();
    for region in region::regions(graph, proto) {
        let Some(cost) = options.rules.as_ref().filter(|_| !pass.rules.is_empty()).map(|r| r.target.cost()) else {
            // `--no-fuse`: with no rule to run, extraction gives back every authored node as it
            // was lifted (tags keep them apart), so the e-graph is skipped.
            stats.regions += 1;
            stats.largest_region = stats.largest_region.max(region.nodes.len());
            nodes.extend(region.nodes.iter().map(|&pos| authored(&proto.node[pos], pos)));
            pass.observer.advance(region.nodes.len() as u64, 0);
            continue;
        };
        let lifted = lift::lift(model, graph, scopes, &region);
        let runner = egg::Runner::default()
            .with_iter_limit(options.limits.iterations)
            .with_node_limit(options.limits.nodes)
            .with_time_limit(options.limits.time)
            // Regions are small; no rule may be silently banned by the backoff scheduler.
            .with_scheduler(egg::SimpleScheduler)
            .with_egraph(lifted.egraph)
            .run(pass.rules);
        let reason = runner.stop_reason.as_ref().map(|r| format!("{r:?}")).unwrap_or_default();
        *stats.stop_reasons.entry(reason.split('(').next().unwrap_or("").to_string()).or_default() += 1;
        stats.regions += 1;
        stats.largest_region = stats.largest_region.max(region.nodes.len());
        stats.enodes += runner.egraph.total_number_of_nodes();
        stats.eclasses += runner.egraph.number_of_classes();
        let roots: Vec<_> = lifted.roots.iter().map(lift::Root::class).collect();
        let extraction = extract::extract(&runner.egraph, &roots, cost).map_err(&fail)?;
        extract::check_acyclic(&extraction, &runner.egraph).map_err(&fail)?;
        nodes.extend(emit::emit(&runner.egraph, &extraction).map_err(&fail)?);
        constants.extend(emit::constants(&runner.egraph, &extraction));
        pass.observer.advance(region.nodes.len() as u64, pass.log.len() as u64);
    }
    let nodes = order::stable_topological(nodes, graph).map_err(&fail)?;
    // Created constants are named after what they are computed from, so one name is one value:
    // a graph keeps one copy, and a body reads an enclosing graph's instead of shadowing it.
    constants.sort_by(|a: &lowered::LoweredConstant, b| a.name.cmp(&b.name));
    if let Some(w) = constants.windows(2).find(|w| w[0].name == w[1].name && w[0] != w[1]) {
        return Err(fail(format!("two different created constants are named '{}'", w[0].name)));
    }
    constants.dedup_by(|a, b| a.name == b.name);
    if let Some(c) = constants.iter().find(|c| outer.iter().any(|o| o.name == c.name && *o != *c)) {
        return Err(fail(format!(
            "created constant '{}' would shadow a different one of an enclosing graph (a body initializer shadows an outer name)",
            c.name
        )));
    }
    constants.retain(|c| !outer.iter().any(|o| o.name == c.name));
    let visible: Vec<&lowered::LoweredConstant> = outer.iter().copied().chain(&constants).collect();
    let mut subgraphs = Vec::new();
    for sub in &graph.subgraphs {
        let sub_proto = sub.proto(proto).ok_or_else(|| fail(format!("subgraph {} vanished", sub.attr)))?;
        let lowered = lower_graph(model, &sub.graph, &scopes.enter(sub_proto), &visible, options, pass, stats)?;
        subgraphs.push(LoweredSubgraph { node: sub.node, attr: sub.attr.clone(), attr_pos: sub.attr_pos, index: sub.index, graph: lowered });
    }
    Ok(LoweredGraph { nodes, constants, subgraphs })
}
