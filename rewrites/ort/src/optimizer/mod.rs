//! ONNX Runtime 1.31's QDQ optimizer on the CPU execution provider, replayed as data: which node
//! groups its `QDQSelectorActionTransformer` fuses, and which other numerics-relevant transformers
//! fire, for one ISA profile.
//!
//! Sources: ORT `main` at 735e69a (v1.25.0; the tree the kernel models were first read from), paths below
//! relative to `onnxruntime/core/`, and the newer upstream `qdq_selectors.cc` for the DQ→MatMulNBits
//! rule. Where onnxruntime 1.31.1 behaves differently from that tree (checked against the wheel by
//! optimizing small models and reading back the graph), the comment says "1.31:".
//!
//! ORT transforms a graph in this order (optimizer/graph_transformer_utils.cc, session/inference_session.cc),
//! and `Work` replays the steps that decide or change QDQ groups on a light copy of each graph,
//! in the same order:
//!
//! 1. `EnsureUniqueDQForNodeUnit`, once before level 1;
//! 2. level 1, repeated until nothing changes: `DoubleQDQPairsRemover`, `ConstantSharing` and
//!    `CommonSubexpressionElimination`, `ConstantFolding` (of QuantizeLinear only: NNCF's float
//!    weights), `QDQPropagationTransformer`, `WeightBiasQuantization`,
//!    `EnsureUniqueDQForNodeUnit`, `WhereDummyDq`;
//! 3. level 2: the `ClipQuantRewrite` / `ReluQuantRewrite` rules, `QDQS8ToU8Transformer` (x86 only),
//!    `QDQSelectorActionTransformer`, and last `QDQFinalCleanupTransformer` (DQ→Q only, its default).
//!
//! Not replayed: the float-only fusions and constant folding of other values (they do not touch
//! Q/DQ), `TransposeOptimizer`, the Cast variant of DQ→MatMulNBits, and a second pass of level 2
//! (its fusions leave nothing a second pass would select). Default session options are assumed.
//! `tests/oracle/test_selectors.py` checks the replay, through `qdqc audit --json`, against the
//! pinned onnxruntime 1.31.1 wheel on ~160 small models (x86 defaults, and
//! `session.qdqisint8allowed=1` for the ARM selectors): fused groups, their code types, removed
//! nodes and refused sessions. The only differences it leaves out are outside this module
//! (ConvActivationFusion turning an unfused Conv+Clip into FusedConv) or not observable on x86
//! hardware (ARM's saturating float→int32 cast in IsClipMadeRedundantByQ).
//!
//! Subgraphs (If/Loop/Scan bodies) are replayed the same way; they see the constant initializers of
//! the graphs enclosing them, as `Graph::GetConstantInitializer(name, check_outer_scope)` does.
//!
//! The replay in five parts: the scope chain (`qdqc_lang::scope`, read as ORT's `Graph` API reads
//! it: the constants and declared types each graph sees), `work`
//! (the mutable light graph and the Q/DQ predicates of qdq_util.cc), `level1` (steps 1–2),
//! `level2` (the Relu/Clip rewrites, S8ToU8 and the final cleanup of step 3) and `select` (the
//! selector table, its checks and the fusion action).

mod level1;
mod level2;
mod select;
#[cfg(test)]
pub(crate) mod testing;
mod work;

use work::Work;

use super::Isa;
use qdqc_exact::{Counterexample, Verdict};
use qdqc_lang::onnx::{DataType, GraphProto};
use qdqc_lang::scope::Scope;
use qdqc_lang::{Model, ir};

/// One node group ORT replaces by a fused (or "dropped") form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fusion {
    /// ORT's action name, e.g. "2DQ", "Conv", "drop", "1DQ_CPU", "*DQ", "dropDQ", "dropSplitQDQ".
    pub rule: &'static str,
    /// What runs instead, e.g. "com.microsoft.QLinearAdd", "QLinearConv", "Reshape (on codes)".
    pub fused_op: String,
    /// Position of the target node in its graph.
    pub target: usize,
    /// Positions of the authored DequantizeLinear nodes absorbed, in target input order. DQs that
    /// ORT inserts itself (WeightBiasQuantization, QDQPropagation, WhereDummyDq) are not listed.
    pub dq_inputs: Vec<usize>,
    /// Positions of the QuantizeLinear nodes absorbed.
    pub q_outputs: Vec<usize>,
    /// A Relu or Clip between target and Q that the selector treats as redundant and drops.
    pub absorbed_clip: Option<usize>,
    /// Code types the fused kernel reads, one per DQ of the group in input order (ORT-inserted
    /// DQs included), as ORT sees them after QDQS8ToU8; `None` when the type is not known.
    pub input_codes: Vec<Option<DataType>>,
    /// Code types it writes, one per Q.
    pub output_codes: Vec<Option<DataType>>,
    /// The code type of each authored DQ's input and Q's output in the group, by node position, as
    /// the fused kernel sees it (after QDQS8ToU8); `None` when the type is not known.
    pub codes: Vec<(usize, Option<DataType>)>,
    /// Where the graph is: empty for the main graph, else the subgraph path.
    pub location: String,
    /// Where each DQ's parameters come from, as (input slot of the target, position of the
    /// authored Q or DQ whose scale and zero point it has): the DQ itself when authored, the node
    /// QDQPropagation copied when ORT inserted it. DQs with parameters of their own (weights ORT
    /// quantized) are not listed.
    pub input_params: Vec<(usize, usize)>,
    /// The same for each Q, in `q_outputs` order of the group's Qs (authored or copied).
    pub output_params: Vec<usize>,
}

/// A numerics-relevant rewrite by one of ORT's other QDQ transformers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewrite {
    /// The transformer's name, as `optimization.disable_specified_optimizers` spells it.
    pub transformer: &'static str,
    /// Positions of the authored nodes it removes or changes.
    pub nodes: Vec<usize>,
    /// The engine's verdict on the rewrite (qdqc-exact's lemmas, or a change of numerics without
    /// a proof either way); the replay only records it.
    pub verdict: Verdict,
    /// Whether the graph computes the same bits afterwards (for every input): `verdict.is_exact()`.
    pub exact: bool,
    /// One line: what changes, with the values involved.
    pub detail: String,
    /// When not exact, an input whose result changes, if one is known: the verdict's.
    pub witness: Option<Counterexample>,
    pub location: String,
}

/// Everything the optimizer does to one model for one ISA profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub fusions: Vec<Fusion>,
    pub rewrites: Vec<Rewrite>,
}

/// The groups ORT fuses in `graph` and every subgraph nested in it; `graph_proto` is its protobuf
/// and the outermost scope of constants.
pub fn fusions(model: &Model, graph: &ir::Graph, graph_proto: &GraphProto, isa: Isa) -> Vec<Fusion> {
    optimize(model, graph, graph_proto, isa).fusions
}

/// The other numerics-relevant rewrites ORT makes in `graph` and its subgraphs.
pub fn rewrites(model: &Model, graph: &ir::Graph, graph_proto: &GraphProto, isa: Isa) -> Vec<Rewrite> {
    optimize(model, graph, graph_proto, isa).rewrites
}

/// Fusions and rewrites together, replaying the pipeline once per graph.
pub fn optimize(model: &Model, graph: &ir::Graph, graph_proto: &GraphProto, isa: Isa) -> Outcome {
    let mut out = Outcome::default();
    walk_graphs(model, graph, graph_proto, None, &mut |g, proto, scope| {
        let level = optimize_graph(model, g, proto, scope, isa);
        out.fusions.extend(level.fusions);
        out.rewrites.extend(level.rewrites);
    });
    out
}

/// Calls `f` on `graph` and on every subgraph nested in it, each with its scope of constants.
pub(crate) fn walk_graphs<'m>(
    model: &'m Model,
    graph: &ir::Graph,
    proto: &'m GraphProto,
    parent: Option<&Scope<'m>>,
    f: &mut dyn FnMut(&ir::Graph, &'m GraphProto, &Scope<'m>),
) {
    let scope = match parent {
        Some(p) => p.enter(proto),
        None => Scope::root(model, proto),
    };
    f(graph, proto, &scope);
    for sub in &graph.subgraphs {
        if let Some(sub_proto) = sub.proto(proto) {
            walk_graphs(model, &sub.graph, sub_proto, Some(&scope), f);
        }
    }
}

/// The optimizer's pipeline on one graph (its subgraphs are replayed separately).
pub(crate) fn optimize_graph<'m>(model: &'m Model, graph: &ir::Graph, proto: &'m GraphProto, scope: &Scope<'m>, isa: Isa) -> Outcome {
    let mut w = Work::new(model, graph, proto, scope, isa);
    // Before level 1, unconditionally (session/inference_session.cc, TransformGraph).
    w.ensure_unique_dq();
    // Level 1 repeats its transformers until none changes the graph (at most 10 times,
    // `max_num_graph_transformation_steps`); these are its QDQ-relevant ones, in order.
    for _ in 0..10 {
        let mut changed = w.remove_double_qdq_pairs();
        changed |= w.share_constants();
        changed |= w.eliminate_common_subexpressions();
        changed |= w.fold_constant_quantize();
        changed |= w.propagate_qdq();
        changed |= w.quantize_weights_and_biases();
        changed |= w.ensure_unique_dq();
        changed |= w.add_where_dummy_dq();
        if !changed {
            break;
        }
    }
    w.remove_relu_clip_before_q();
    if !int8_allowed(isa) {
        w.convert_s8_pairs_to_u8();
    }
    w.select_and_fuse();
    w.final_cleanup();
    w.list_float_weight_bias_paths();
    w.out
}

/// `QDQIsInt8Allowed()` (selectors_actions/qdq_selector_action_transformer.h): compile-time false on
/// x86, true on ARM. It decides whether QDQS8ToU8Transformer runs and whether the Conv/MatMul
/// selectors accept int8 activations.
pub(super) fn int8_allowed(isa: Isa) -> bool {
    isa.arith().int8_activations
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use qdqc_lang::onnx::DataType;

    #[test]
    fn subgraphs_are_searched_with_the_constants_of_enclosing_graphs() {
        let body = G::new(21).output("ty").qdq("a", "s", "z", "da").qdq("b", "s", "z", "db").op("Add", &["da", "db"], &["c"]).qdq("c", "s", "z", "ty");
        let other = G::new(21).output("ey").op("Identity", &["a"], &["ey"]);
        let iff = attr_graph(attr_graph(node("If", &["cond"], &["y"]), "then_branch", body.g), "else_branch", other.g);
        let l = G::new(21).params().typed_input("cond", DataType::Bool, &[]).input("a").input("b").output("y").node(iff).load();
        let f = &run(&l, Isa::X86Avx2).fusions;
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].rule, f[0].target, f[0].location.as_str()), ("2DQ", 4, " in If 'y'.then_branch"));
    }
}
