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

use super::Isa;
use qdqc_exact::Counterexample;
use qdqc_exact::reference::{CodeType, dequantize, quantize};
use qdqc_lang::onnx::tensor_shape_proto::dimension;
use qdqc_lang::onnx::{AttributeProto, DataType, GraphProto, NodeProto, TensorProto, TypeProto, type_proto};
use qdqc_lang::tensor::{self, Payload};
use qdqc_lang::{Model, ir};
use std::collections::{HashMap, HashSet};

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
    /// Whether the graph computes the same bits afterwards (for every input).
    pub exact: bool,
    /// One line: what changes, with the values involved.
    pub detail: String,
    /// When not exact, an input whose result changes, if one is known.
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
    parent: Option<&Scope<'_, 'm>>,
    f: &mut dyn FnMut(&ir::Graph, &'m GraphProto, &Scope<'_, 'm>),
) {
    let scope = Scope::new(model, proto, parent);
    f(graph, proto, &scope);
    for sub in &graph.subgraphs {
        if let Some(sub_proto) = sub.proto(proto) {
            walk_graphs(model, &sub.graph, sub_proto, Some(&scope), f);
        }
    }
}

/// The optimizer's pipeline on one graph (its subgraphs are replayed separately).
pub(crate) fn optimize_graph<'m>(model: &'m Model, graph: &ir::Graph, proto: &'m GraphProto, scope: &Scope<'_, 'm>, isa: Isa) -> Outcome {
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
fn int8_allowed(isa: Isa) -> bool {
    matches!(isa, Isa::Arm64Neon)
}

// ---------------------------------------------------------------------------------------------
// Constants and declared types, scope by scope.

/// The contents of a constant: an initializer, the tensor of a `Constant` node, or a value ORT
/// creates while optimizing.
#[derive(Clone, Debug)]
pub(crate) struct Const<'m> {
    pub dtype: DataType,
    pub dims: Vec<i64>,
    data: Data<'m>,
}

#[derive(Clone, Debug)]
enum Data<'m> {
    Tensor(&'m TensorProto),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    /// Known type and shape, contents not modelled (e.g. a weight ORT quantizes).
    Opaque,
}

impl<'m> Const<'m> {
    fn tensor(t: &'m TensorProto) -> Option<Const<'m>> {
        Some(Const { dtype: tensor::data_type(t).ok()?, dims: t.dims.clone(), data: Data::Tensor(t) })
    }

    fn ints(dtype: DataType, dims: Vec<i64>, values: Vec<i64>) -> Const<'m> {
        Const { dtype, dims, data: Data::Ints(values) }
    }

    fn floats(dims: Vec<i64>, values: Vec<f32>) -> Const<'m> {
        Const { dtype: DataType::Float, dims, data: Data::Floats(values) }
    }

    /// `optimizer_utils::IsScalar` on the value's shape: rank 0, or rank 1 of size 1.
    pub fn is_scalar(&self) -> bool {
        self.dims.is_empty() || self.dims == [1]
    }

    pub fn len(&self) -> u64 {
        tensor::element_count(&self.dims).unwrap_or(0)
    }

    /// Integer contents (zero points, biases, weights), as stored.
    pub fn int_values(&self, model: &Model) -> Option<Vec<i64>> {
        match &self.data {
            Data::Tensor(t) => tensor::ints(self.dtype, &model.payload(t).ok()?),
            Data::Ints(v) => Some(v.clone()),
            Data::Floats(_) | Data::Opaque => None,
        }
    }

    /// The stored payload of an initializer, for reading a weight in place (`tensor::IntView`).
    pub fn payload(&self, model: &Model) -> Option<tensor::Payload<'m>> {
        match &self.data {
            Data::Tensor(t) => model.payload(t).ok(),
            _ => None,
        }
    }

    /// Float contents, f16 and bf16 widened exactly to f32 (scales, Clip bounds).
    pub fn float_values(&self, model: &Model) -> Option<Vec<f32>> {
        match &self.data {
            Data::Tensor(t) => floats(self.dtype, &model.payload(t).ok()?),
            Data::Floats(v) => Some(v.clone()),
            Data::Ints(_) | Data::Opaque => None,
        }
    }

    /// The first element as a float, as `*Initializer::data<float>()` reads it.
    fn first_float(&self, model: &Model) -> Option<f32> {
        self.float_values(model)?.first().copied()
    }

    fn first_int(&self, model: &Model) -> Option<i64> {
        self.int_values(model)?.first().copied()
    }
}

fn floats(dt: DataType, payload: &Payload<'_>) -> Option<Vec<f32>> {
    if let Some(bits) = tensor::f32_bits(dt, payload) {
        return Some(bits.into_iter().map(f32::from_bits).collect());
    }
    let halves: Vec<u16> = match payload {
        Payload::Raw(b) => b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect(),
        // ONNX stores each float16's bits in the low 16 bits of an int32_data entry.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Payload::Typed(t) => t.int32_data.iter().map(|&x| x as u16).collect(),
    };
    match dt {
        DataType::Float16 => Some(halves.into_iter().map(f16_to_f32).collect()),
        DataType::Bfloat16 => Some(halves.into_iter().map(|h| f32::from_bits((h as u32) << 16)).collect()),
        _ => None,
    }
}

/// IEEE binary16 → binary32, exact.
fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f32;
    match exp {
        0 => sign * frac * 2f32.powi(-24),
        0x1f if frac == 0.0 => sign * f32::INFINITY,
        0x1f => f32::NAN,
        _ => sign * (1.0 + frac / 1024.0) * 2f32.powi(exp - 15),
    }
}

/// What one graph defines, for lookups from it and from the subgraphs it encloses.
pub(crate) struct Scope<'p, 'm> {
    parent: Option<&'p Scope<'p, 'm>>,
    /// Initializers and `Constant` node tensors (ORT turns the latter into initializers on load,
    /// graph/graph.cc, Graph::Graph).
    consts: HashMap<&'m str, Const<'m>>,
    /// Initializers a graph input of the same name can override (IR ≥ 4): not constant
    /// (Graph::GetConstantInitializer).
    overridable: HashSet<&'m str>,
    /// Every name this graph defines; a local name hides an outer one.
    locals: HashSet<&'m str>,
    declared: HashMap<&'m str, &'m TypeProto>,
    outputs: HashSet<&'m str>,
}

impl<'p, 'm> Scope<'p, 'm> {
    fn new(model: &'m Model, g: &'m GraphProto, parent: Option<&'p Scope<'p, 'm>>) -> Self {
        let mut consts = HashMap::new();
        for t in &g.initializer {
            if let Some(c) = Const::tensor(t) {
                consts.insert(tensor::name(t), c);
            }
        }
        for n in g.node.iter().filter(|n| n.op_type.as_deref() == Some("Constant")) {
            if let (Some(out), Some(c)) = (n.output.first(), constant_node_value(n)) {
                consts.insert(out.as_str(), c);
            }
        }
        let inputs: HashSet<&str> = g.input.iter().filter_map(|v| v.name.as_deref()).collect();
        let can_override = model.proto.ir_version.unwrap_or(0) >= 4;
        let overridable = consts.keys().copied().filter(|n| can_override && inputs.contains(n)).collect();
        let mut locals = inputs;
        locals.extend(consts.keys().copied());
        locals.extend(g.node.iter().flat_map(|n| n.output.iter().map(String::as_str)));
        let declared = g.input.iter().chain(&g.output).chain(&g.value_info).filter_map(|v| Some((v.name.as_deref()?, v.r#type.as_ref()?))).collect();
        let outputs = g.output.iter().filter_map(|v| v.name.as_deref()).collect();
        Scope { parent, consts, overridable, locals, declared, outputs }
    }

    /// `Graph::GetConstantInitializer(name, check_outer_scope)` (graph/graph.cc).
    pub fn constant(&self, name: &str, outer: bool) -> Option<&Const<'m>> {
        if let Some(c) = self.consts.get(name) {
            return (!self.overridable.contains(name)).then_some(c);
        }
        if !outer || self.locals.contains(name) {
            return None;
        }
        self.parent?.constant(name, true)
    }

    /// `Graph::GetInitializedTensor`: any initializer of this graph, constant or not.
    fn local_initializer(&self, name: &str) -> Option<&Const<'m>> {
        self.consts.get(name)
    }

    /// `graph_utils::IsInitializer(graph, name, check_outer_scope=true)`.
    fn any_initializer(&self, name: &str) -> Option<&Const<'m>> {
        match self.consts.get(name) {
            Some(c) => Some(c),
            None if self.locals.contains(name) => None,
            None => self.parent?.any_initializer(name),
        }
    }

    fn declared(&self, name: &str) -> Option<&'m TypeProto> {
        match self.declared.get(name) {
            Some(t) => Some(t),
            None if self.locals.contains(name) => None,
            None => self.parent?.declared(name),
        }
    }

    /// The element type the model declares or stores for `name`.
    pub fn dtype(&self, name: &str) -> Option<DataType> {
        if let Some(c) = self.any_initializer(name) {
            return Some(c.dtype);
        }
        match &self.declared(name)?.value {
            Some(type_proto::Value::TensorType(t)) => DataType::try_from(t.elem_type?).ok(),
            _ => None,
        }
    }

    /// The declared shape, when every dim is known.
    fn declared_dims(&self, name: &str) -> Option<Vec<i64>> {
        let Some(type_proto::Value::TensorType(t)) = &self.declared(name)?.value else { return None };
        t.shape
            .as_ref()?
            .dim
            .iter()
            .map(|d| match d.value {
                Some(dimension::Value::DimValue(v)) => Some(v),
                _ => None,
            })
            .collect()
    }
}

/// The tensor a `Constant` node holds (utils::ConstantNodeProtoToTensorProto); sparse and string
/// forms are not modelled.
fn constant_node_value(n: &NodeProto) -> Option<Const<'_>> {
    let attr = n.attribute.first()?;
    match attr.name.as_deref()? {
        "value" => Const::tensor(attr.t.as_ref()?),
        "value_float" => Some(Const::floats(vec![], vec![attr.f?])),
        "value_floats" => Some(Const::floats(vec![i64::try_from(attr.floats.len()).ok()?], attr.floats.clone())),
        "value_int" => Some(Const::ints(DataType::Int64, vec![], vec![attr.i?])),
        "value_ints" => Some(Const::ints(DataType::Int64, vec![i64::try_from(attr.ints.len()).ok()?], attr.ints.clone())),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// The working copy of one graph.

/// A node as the optimizer sees it at some step of its pipeline.
#[derive(Clone, Debug)]
struct Node<'m> {
    op: String,
    /// "" for the ONNX domain (ORT normalizes "ai.onnx").
    domain: String,
    /// The operator's SinceVersion for the model's opset import.
    since: i64,
    /// The authored node this one is, or was copied from, or serves.
    origin: usize,
    /// False for nodes ORT inserts (by WeightBiasQuantization, QDQPropagation, WhereDummyDq);
    /// EnsureUniqueDQ's copies of an authored DQ count as authored.
    authored: bool,
    attrs: &'m [AttributeProto],
    inputs: Vec<String>,
    outputs: Vec<String>,
    /// Outer values its subgraphs read: ORT gives them edges too ("implicit inputs").
    implicit: Vec<String>,
    alive: bool,
}

impl Node<'_> {
    fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.attrs.iter().find(|a| a.name.as_deref() == Some(name))
    }

    /// An int attribute, or ORT's schema default (Graph::Resolve fills defaults in).
    fn attr_i(&self, name: &str, default: i64) -> i64 {
        self.attr(name).and_then(|a| a.i).unwrap_or(default)
    }

    fn attr_f(&self, name: &str, default: f32) -> f32 {
        self.attr(name).and_then(|a| a.f).unwrap_or(default)
    }

    fn input(&self, slot: usize) -> Option<&str> {
        self.inputs.get(slot).map(String::as_str).filter(|s| !s.is_empty())
    }

    fn is(&self, op: &str) -> bool {
        self.alive && self.op == op
    }

    /// `NumActualValues`: inputs that exist (an empty name is an omitted optional input).
    fn existing_inputs(&self) -> usize {
        self.inputs.iter().filter(|s| !s.is_empty()).count()
    }

    fn existing_outputs(&self) -> usize {
        self.outputs.iter().filter(|s| !s.is_empty()).count()
    }
}

/// One consumer of a value: node and input slot (`None` for a read from inside its subgraph).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Use {
    node: usize,
    slot: Option<usize>,
}

struct Work<'m, 's, 'p> {
    model: &'m Model,
    scope: &'s Scope<'p, 'm>,
    isa: Isa,
    location: String,
    nodes: Vec<Node<'m>>,
    /// Consumers of each value among live nodes, kept in sync by every edit.
    uses: HashMap<String, Vec<Use>>,
    producer: HashMap<String, usize>,
    /// Constants ORT creates while optimizing (new zero points, quantized biases).
    created: HashMap<String, Const<'m>>,
    /// Per WeightBiasQuantization of a float bias alone: its rewrite's index, the node, and the
    /// Relu/Clip/Q path to its Q ([`Work::list_float_weight_bias_paths`]).
    float_bias_paths: Vec<(usize, usize, Vec<usize>)>,
    out: Outcome,
}

impl<'m, 's, 'p> Work<'m, 's, 'p> {
    fn new(model: &'m Model, graph: &ir::Graph, proto: &'m GraphProto, scope: &'s Scope<'p, 'm>, isa: Isa) -> Self {
        let mut w = Work {
            model,
            scope,
            isa,
            location: graph.location.clone(),
            nodes: Vec::new(),
            uses: HashMap::new(),
            producer: HashMap::new(),
            created: HashMap::new(),
            float_bias_paths: Vec::new(),
            out: Outcome::default(),
        };
        for (pos, n) in proto.node.iter().enumerate() {
            let op = n.op_type.clone().unwrap_or_default();
            let domain = match n.domain.as_deref().unwrap_or("") {
                "ai.onnx" => String::new(),
                d => d.to_string(),
            };
            let since = since_version(model, &op, &domain);
            let implicit = graph.subgraphs_of(pos).flat_map(|s| s.graph.outer_refs.iter().cloned()).collect();
            // Constant nodes become initializers when ORT loads the graph (Scope::new).
            let alive = op != "Constant";
            let node = Node {
                op,
                domain,
                since,
                origin: pos,
                authored: true,
                attrs: &n.attribute,
                inputs: n.input.clone(),
                outputs: n.output.clone(),
                implicit,
                alive,
            };
            w.push(node);
        }
        w
    }

    // ---- editing, keeping `uses` (of live nodes) and `producer` in sync ----------------------

    fn push(&mut self, node: Node<'m>) {
        if node.alive {
            self.link(self.nodes.len(), &node);
        }
        self.nodes.push(node);
    }

    fn link(&mut self, id: usize, node: &Node<'m>) {
        for (slot, name) in node.inputs.iter().enumerate().filter(|(_, s)| !s.is_empty()) {
            self.uses.entry(name.clone()).or_default().push(Use { node: id, slot: Some(slot) });
        }
        for name in &node.implicit {
            self.uses.entry(name.clone()).or_default().push(Use { node: id, slot: None });
        }
        for name in node.outputs.iter().filter(|s| !s.is_empty()) {
            self.producer.insert(name.clone(), id);
        }
    }

    fn remove(&mut self, id: usize) {
        if !std::mem::replace(&mut self.nodes[id].alive, false) {
            return;
        }
        // Its uses stay listed and `uses_of` skips dead nodes: retaining them out here cost a
        // pass over every use of a shared scale per removed node (quadratic in a long chain).
        let n = &self.nodes[id];
        for name in &n.outputs {
            if self.producer.get(name) == Some(&id) {
                self.producer.remove(name);
            }
        }
    }

    fn set_input(&mut self, id: usize, slot: usize, name: &str) {
        let old = std::mem::replace(&mut self.nodes[id].inputs[slot], name.to_string());
        if let Some(uses) = self.uses.get_mut(&old) {
            uses.retain(|u| *u != Use { node: id, slot: Some(slot) });
        }
        self.uses.entry(name.to_string()).or_default().push(Use { node: id, slot: Some(slot) });
    }

    /// Redirects every consumer of `from` to `to` (graph_utils::RemoveNode of a single-input node).
    fn bypass(&mut self, from: &str, to: &str) {
        for u in self.uses_of(from) {
            if let Some(slot) = u.slot {
                self.set_input(u.node, slot, to);
            }
        }
    }

    fn create_const(&mut self, purpose: &str, c: Const<'m>) -> String {
        let name = format!("qdqc:{purpose}#{}", self.created.len());
        self.created.insert(name.clone(), c);
        name
    }

    // ---- graph queries, as ORT's Node/Graph API answers them ---------------------------------

    /// Uses by live nodes (a removed node's uses are left in `uses`, see `remove`).
    fn uses_of(&self, name: &str) -> Vec<Use> {
        self.uses.get(name).map_or_else(Vec::new, |uses| uses.iter().filter(|u| self.nodes[u.node].alive).copied().collect())
    }

    /// Output edges of a node, with the output slot they leave from (Node::OutputEdges).
    fn out_edges(&self, id: usize) -> Vec<(usize, Use)> {
        let n = &self.nodes[id];
        n.outputs.iter().enumerate().filter(|(_, s)| !s.is_empty()).flat_map(|(slot, name)| self.uses_of(name).into_iter().map(move |u| (slot, u))).collect()
    }

    fn out_edge_count(&self, id: usize) -> usize {
        self.out_edges(id).len()
    }

    /// Edges into a node: inputs and implicit inputs that a node of this graph produces.
    fn in_edge_count(&self, id: usize) -> usize {
        let n = &self.nodes[id];
        n.inputs.iter().chain(&n.implicit).filter(|s| self.producer.contains_key(s.as_str())).count()
    }

    /// The single consumer node of a node with one output edge.
    fn only_consumer(&self, id: usize) -> Option<usize> {
        match self.out_edges(id)[..] {
            [(_, u)] => Some(u.node),
            _ => None,
        }
    }

    fn produces_graph_output(&self, id: usize) -> bool {
        self.nodes[id].outputs.iter().any(|o| self.scope.outputs.contains(o.as_str()))
    }

    /// `optimizer_utils::CheckOutputEdges` (optimizer/utils.cc): not a graph output, exactly
    /// `count` output edges, none of them into a subgraph.
    fn check_output_edges(&self, id: usize, count: usize) -> bool {
        let edges = self.out_edges(id);
        !self.produces_graph_output(id) && edges.len() == count && edges.iter().all(|(_, u)| u.slot.is_some())
    }

    /// `graph_utils::FindParentsByType`: producers of type `op`, by input slot.
    fn parents_of_type(&self, id: usize, op: &str) -> Vec<usize> {
        let n = &self.nodes[id];
        n.inputs.iter().filter_map(|i| self.producer.get(i).copied()).filter(|&p| self.nodes[p].is(op)).collect()
    }

    /// `graph_utils::FindChildrenByType`: consumers of type `op`, by output slot.
    fn children_of_type(&self, id: usize, op: &str) -> Vec<usize> {
        self.out_edges(id).into_iter().map(|(_, u)| u.node).filter(|&c| self.nodes[c].is(op)).collect()
    }

    fn constant(&self, name: &str, outer: bool) -> Option<&Const<'m>> {
        self.created.get(name).or_else(|| self.scope.constant(name, outer))
    }

    /// `NodeArgIsConstant(name) && GetInitializedTensor(name)`: a constant of this very graph.
    fn local_constant(&self, name: &str) -> Option<&Const<'m>> {
        self.created.get(name).or_else(|| self.scope.local_initializer(name).filter(|_| self.scope.constant(name, true).is_some()))
    }

    /// `optimizer_utils::IsScalar` on a value: from a constant's dims, else the declared shape.
    fn is_scalar(&self, name: &str) -> bool {
        match self.constant(name, true).or_else(|| self.scope.any_initializer(name)) {
            Some(c) => c.is_scalar(),
            None => self.scope.declared_dims(name).is_some_and(|d| d.is_empty() || d == [1]),
        }
    }

    /// The element type of a value as ORT's type inference knows it.
    fn dtype(&self, name: &str) -> Option<DataType> {
        if let Some(c) = self.created.get(name) {
            return Some(c.dtype);
        }
        let Some(&p) = self.producer.get(name) else { return self.scope.dtype(name) };
        let n = &self.nodes[p];
        match n.op.as_str() {
            "QuantizeLinear" => self.q_type(p),
            "DequantizeLinear" => n.input(1).and_then(|s| self.dtype(s)),
            "Cast" => i32::try_from(n.attr_i("to", 0)).ok().and_then(|t| DataType::try_from(t).ok()),
            _ => self.scope.dtype(name),
        }
    }

    /// The code type of a Q's output: its zero point's type, else `output_dtype`, else uint8.
    fn q_type(&self, q: usize) -> Option<DataType> {
        let n = &self.nodes[q];
        match n.input(2) {
            Some(zp) => self.dtype(zp),
            None => match n.attr_i("output_dtype", 0) {
                0 => Some(DataType::Uint8),
                dt => i32::try_from(dt).ok().and_then(|dt| DataType::try_from(dt).ok()),
            },
        }
    }

    /// The code type of a DQ's input; an untyped input has its zero point's type (ONNX's `T1`).
    fn dq_type(&self, dq: usize) -> Option<DataType> {
        let n = &self.nodes[dq];
        n.input(0).and_then(|x| self.dtype(x)).or_else(|| n.input(2).and_then(|z| self.dtype(z)))
    }

    fn describe(&self, id: usize) -> String {
        let n = &self.nodes[id];
        format!("{} #{}", n.op, n.origin)
    }
}

/// The SinceVersion ORT resolves for `op` under the model's opset imports, for the operators whose
/// version a rule checks (schemas of onnx 1.23); other operators report the imported version.
fn since_version(model: &Model, op: &str, domain: &str) -> i64 {
    let imported = model.proto.opset_import.iter().find(|o| {
        let d = o.domain.as_deref().unwrap_or("");
        d == domain || (domain.is_empty() && d == "ai.onnx")
    });
    let opset = imported.and_then(|o| o.version).unwrap_or(0);
    if !domain.is_empty() {
        return opset;
    }
    let versions: &[i64] = match op {
        "QuantizeLinear" | "DequantizeLinear" => &[10, 13, 19, 21, 23, 24, 25, 28],
        "MaxPool" => &[1, 8, 10, 11, 12, 22],
        "Relu" => &[1, 6, 13, 14],
        "Clip" => &[1, 6, 11, 12, 13],
        _ => return opset,
    };
    versions.iter().rev().find(|&&v| v <= opset).copied().unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Q/DQ predicates of optimizer/qdq_transformer/qdq_util.cc.

impl Work<'_, '_, '_> {
    /// `QDQ::MatchQNode`: ONNX QuantizeLinear of a listed version, or com.microsoft v1.
    fn match_q(&self, id: usize) -> bool {
        self.match_qdq(id, "QuantizeLinear")
    }

    fn match_dq(&self, id: usize) -> bool {
        self.match_qdq(id, "DequantizeLinear")
    }

    fn match_qdq(&self, id: usize, op: &str) -> bool {
        let n = &self.nodes[id];
        n.is(op)
            && match n.domain.as_str() {
                "" => [10, 13, 19, 21, 23, 24, 25].contains(&n.since),
                "com.microsoft" => n.since == 1,
                _ => false,
            }
    }

    /// `QDQ::IsQDQPairSupported`: both have explicit zero points, all four parameters are constant
    /// scalars, zero points have the same type and bytes, and the scales compare equal with `==`
    /// (so ±0 are equal and a NaN scale never is).
    fn qdq_pair_supported(&self, q: usize, dq: usize, check_op_type: bool) -> bool {
        if check_op_type && !(self.match_q(q) && self.match_dq(dq)) {
            return false;
        }
        let (qn, dqn) = (&self.nodes[q], &self.nodes[dq]);
        if qn.inputs.len() != 3 || dqn.inputs.len() != 3 {
            return false;
        }
        let params = [&qn.inputs[1], &qn.inputs[2], &dqn.inputs[1], &dqn.inputs[2]];
        if params.iter().any(|p| p.is_empty() || !self.is_scalar(p)) {
            return false;
        }
        let [Some(qs), Some(qz), Some(ds), Some(dz)] = params.map(|p| self.constant(p, true)) else { return false };
        let same_zp = matches!((qz.int_values(self.model), dz.int_values(self.model)), (Some(a), Some(b)) if a == b);
        if qz.dtype != dz.dtype || qs.dtype != ds.dtype || !same_zp {
            return false;
        }
        matches!(qs.dtype, DataType::Float | DataType::Float16 | DataType::Bfloat16)
            && matches!((qs.first_float(self.model), ds.first_float(self.model)), (Some(a), Some(b)) if a == b)
    }

    /// `QDQ::QOrDQNodeHasConstantScalarScaleAndZeroPoint`, returning whether a zero point exists.
    fn constant_scalar_params(&self, id: usize) -> Option<bool> {
        let n = &self.nodes[id];
        let constant_scalar = |name: &str| self.is_scalar(name) && self.constant(name, true).is_some();
        if !n.input(1).is_some_and(constant_scalar) {
            return None;
        }
        let zp = n.inputs.len() > 2 && !n.inputs[2].is_empty();
        (!zp || constant_scalar(&n.inputs[2])).then_some(zp)
    }

    /// `QDQ::IsQOrDQScalePositiveConstantScalar`.
    fn scale_positive(&self, id: usize) -> bool {
        let Some(s) = self.nodes[id].input(1) else { return false };
        self.is_scalar(s) && self.constant(s, true).and_then(|c| c.first_float(self.model)).is_some_and(|v| v > 0.0)
    }

    /// `GetQScalarScaleZp` (qdq_util.cc): a rank-0 float scale, and a rank-0 8/16-bit zero point or
    /// none (then `output_dtype`, default uint8, with zero point 0).
    fn q_scalar_scale_zp(&self, q: usize) -> Option<(f32, i64, DataType)> {
        let n = &self.nodes[q];
        let scale = self.constant(n.input(1)?, true).filter(|c| c.dims.is_empty() && c.dtype == DataType::Float)?;
        let scale = scale.first_float(self.model)?;
        let Some(zp) = n.input(2) else {
            let dt = match n.attr_i("output_dtype", 0) {
                0 => DataType::Uint8,
                dt => DataType::try_from(i32::try_from(dt).ok()?).ok()?,
            };
            return Some((scale, 0, dt));
        };
        let zp = self.constant(zp, true).filter(|c| c.dims.is_empty() && range_8_16(c.dtype).is_some())?;
        Some((scale, zp.first_int(self.model)?, zp.dtype))
    }

    /// `optimizer_utils::GetClipConstantMinMax`: attributes before opset 11, else constant inputs
    /// (float or float16); absent bounds are ∓FLT_MAX. `None` when a bound is not constant.
    fn clip_bounds(&self, clip: usize) -> Option<(f32, f32)> {
        let n = &self.nodes[clip];
        if n.since < 11 {
            return Some((n.attr_f("min", f32::MIN), n.attr_f("max", f32::MAX)));
        }
        let bound = |slot: usize, default: f32| match n.input(slot) {
            None => Some(default),
            Some(name) => {
                let c = self.constant(name, true).filter(|c| matches!(c.dtype, DataType::Float | DataType::Float16))?;
                c.first_float(self.model)
            }
        };
        Some((bound(1, f32::MIN)?, bound(2, f32::MAX)?))
    }

    /// `QDQ::IsClipMadeRedundantByQ`: the Relu/Clip range covers the Q's whole code range.
    fn clip_redundant_by_q(&self, clip: usize, q: usize) -> bool {
        let Some((scale, zp, dt)) = self.q_scalar_scale_zp(q) else { return false };
        let Some((lo, hi)) = range_8_16(dt) else { return false };
        if self.nodes[clip].op == "Relu" {
            return zp == lo;
        }
        let Some((min, max)) = self.clip_bounds(clip) else { return false };
        // `static_cast<int32_t>(::rint(bound / scale)) + zp`: the cast of an out-of-range value is
        // undefined; x86 (cvttsd2si) yields INT_MIN, ARM64 (fcvtzs) saturates. So a Clip with no
        // max (FLT_MAX) is never redundant on x86 (checked on onnxruntime 1.31.1).
        // `zp` is a code of the Q's 8/16-bit type, whole in int32; the wrapping add is ORT's.
        #[allow(clippy::cast_possible_truncation)]
        let code = |bound: f32| rint_to_i32(bound / scale, self.isa).wrapping_add(zp as i32) as i64;
        code(min) <= lo && code(max) >= hi
    }
}

/// An input the Clip/Relu removal changes: the value of the end code the bound misses
/// (`want_min` says whether the lower bound quantizes as it should), which lies outside
/// `[min, max]`; `None` if that value happens to quantize the same both ways.
fn clip_witness((s, z, code): (f32, i64, CodeType), (min, max): (f32, f32), min_ok: bool, channel: usize, channels: usize) -> Option<Counterexample> {
    let (lo, hi) = code.range();
    let want = if s > 0.0 { (lo, hi) } else { (hi, lo) };
    let x = dequantize(if min_ok { want.1 } else { want.0 }, s, z);
    let clipped = x.max(min).min(max);
    let (unfused, fused) = (quantize(clipped, s, z, code), quantize(x, s, z, code));
    (unfused != fused).then(|| {
        let mut inputs = vec![("x (f32 bits)".to_string(), x.to_bits() as i64)];
        if channels > 1 {
            inputs.insert(0, ("channel".to_string(), i64::try_from(channel).expect("a channel index is a slice index, below i64::MAX")));
        }
        // `differing` counts this one input: the float inputs that change are not enumerated.
        Counterexample { inputs, unfused, fused, exact: Some(format!("x = {x:e}, clipped to {clipped:e}")), differing: 1 }
    })
}

/// An input whose result the merge of `Q1 → DQ1 → Q2 → DQ2` into one pair with new parameters
/// changes: on the grid of the first pair (`x = DQ1(c)` for every code `c`, so `Q1(x) = c`),
/// `DQ2(Q2(x))` against `DQnew(Qnew(x))`, the first code whose values differ. Codes are reported
/// as the second pair's and the new pair's; the values in the text.
fn double_qdq_witness(code: CodeType, [(s1, z1), (s2, z2)]: [(f32, i64); 2], (s, z): (f32, i64)) -> Option<Counterexample> {
    let (lo, hi) = code.range();
    let differ = |c: i64| {
        let x = dequantize(c, s1, z1);
        let (before, after) = (quantize(x, s2, z2, code), quantize(x, s, z, code));
        let (vb, va) = (dequantize(before, s2, z2), dequantize(after, s, z));
        (vb.to_bits() != va.to_bits()).then_some((x, before, after, vb, va))
    };
    let differing = (lo..=hi).filter(|&c| differ(c).is_some()).count() as u64;
    let (x, before, after, vb, va) = (lo..=hi).find_map(differ)?;
    let exact = format!("x = {x:e}: the two pairs give {vb:e}, the merged pair {va:e}");
    Some(Counterexample { inputs: vec![("x (f32 bits)".to_string(), x.to_bits() as i64)], unfused: before, fused: after, exact: Some(exact), differing })
}

/// Code range of the 8- and 16-bit types ORT's Q/DQ helpers handle.
fn range_8_16(dt: DataType) -> Option<(i64, i64)> {
    matches!(dt, DataType::Int8 | DataType::Uint8 | DataType::Int16 | DataType::Uint16).then(|| tensor::int_range(dt)).flatten()
}

/// `static_cast<int32_t>(rint(x))` as the CPU executes it.
// The model: in range the cast is exact; out of range `as` saturates as ARM's fcvtzs does.
#[allow(clippy::cast_possible_truncation)]
fn rint_to_i32(x: f32, isa: Isa) -> i32 {
    let r = (x as f64).round_ties_even();
    let in_range = r >= i32::MIN as f64 && r <= i32::MAX as f64;
    match (in_range, isa) {
        (true, _) => r as i32,
        (false, Isa::Arm64Neon) => r as i32, // saturating, NaN → 0, as fcvtzs
        (false, _) => i32::MIN,
    }
}

fn is_16bit(dt: Option<DataType>) -> bool {
    matches!(dt, Some(DataType::Int16 | DataType::Uint16))
}

fn is_4bit(dt: Option<DataType>) -> bool {
    matches!(dt, Some(DataType::Int4 | DataType::Uint4))
}

// ---------------------------------------------------------------------------------------------
// Level 1 and the transformers that run before selection.

impl<'m> Work<'m, '_, '_> {
    /// `EnsureUniqueDQForNodeUnit` (qdq_transformer/ensure_unique_dq_for_node_unit.cc): every
    /// explicit input edge from a DQ gets its own DQ. A DQ that also feeds a graph output or a
    /// subgraph keeps those and every same-graph consumer gets a copy; otherwise the first consumer
    /// keeps the original.
    fn ensure_unique_dq(&mut self) -> bool {
        let mut changed = false;
        for id in 0..self.nodes.len() {
            if !self.match_dq(id) {
                continue;
            }
            let Some(out) = self.nodes[id].outputs.first().cloned() else { continue };
            let mut edges = self.uses_of(&out);
            edges.sort_by_key(|u| (u.node, u.slot));
            let graph_output = self.produces_graph_output(id);
            if edges.is_empty() || (edges.len() == 1 && !graph_output) {
                continue;
            }
            let subgraph_consumer = edges.iter().any(|u| u.slot.is_none());
            let explicit: Vec<Use> = edges.into_iter().filter(|u| u.slot.is_some()).collect();
            let keep_first = !(graph_output || subgraph_consumer);
            for u in explicit.into_iter().skip(keep_first as usize) {
                let mut copy = self.nodes[id].clone();
                copy.outputs = vec![format!("{out}/duplicated#{}", self.nodes.len())];
                copy.implicit.clear();
                let name = copy.outputs[0].clone();
                self.push(copy);
                self.set_input(u.node, u.slot.expect("explicit"), &name);
                changed = true;
            }
        }
        changed
    }

    /// One pass of `DoubleQDQPairsRemover` (optimizer/double_qdq_pairs_remover.cc) over
    /// `Q1 → DQ1 → Q2 → DQ2…`: DQ1 and Q2 go, Q1 feeds the DQ2s. When the two pairs' parameters
    /// differ, Q1 and every DQ2 get new ones covering the intersection of the two ranges.
    fn remove_double_qdq_pairs(&mut self) -> bool {
        let mut changed = false;
        for q1 in 0..self.nodes.len() {
            if let Some(chain) = self.double_qdq_chain(q1) {
                self.reduce_double_qdq(chain);
                changed = true;
            }
        }
        changed
    }

    fn double_qdq_chain(&self, q1: usize) -> Option<DoubleQdq> {
        let ok = |c: bool| c.then_some(());
        ok(self.nodes[q1].is("QuantizeLinear") && self.out_edge_count(q1) == 1 && !self.produces_graph_output(q1))?;
        let dq1 = self.only_consumer(q1)?;
        ok(self.nodes[dq1].is("DequantizeLinear") && self.in_edge_count(dq1) == 1)?;
        ok(self.out_edge_count(dq1) == 1 && !self.produces_graph_output(dq1))?;
        ok(self.qdq_pair_supported(q1, dq1, true))?;
        let quant_type = self.q_zp_type(q1)?;
        let q2 = self.only_consumer(dq1)?;
        ok(self.nodes[q2].is("QuantizeLinear") && !self.produces_graph_output(q2))?;
        ok(self.q_zp_type(q2)? == quant_type)?;
        let dq2s: Vec<usize> = self.out_edges(q2).into_iter().map(|(_, u)| u.node).collect();
        ok(!dq2s.is_empty())?;
        ok(dq2s.iter().all(|&d| self.nodes[d].is("DequantizeLinear") && self.qdq_pair_supported(q2, d, true)))?;
        let params = self.merged_params(dq1, q2, range_8_16(quant_type)?)?;
        Some(DoubleQdq { q1, dq1, q2, dq2s, params })
    }

    /// `GetQNodeZeroPointType`: the constant zero point's type, else `output_dtype`, else uint8.
    fn q_zp_type(&self, q: usize) -> Option<DataType> {
        match self.nodes[q].input(2) {
            Some(zp) => self.constant(zp, true).map(|c| c.dtype),
            None => self.q_type(q),
        }
    }

    /// `FindNewZeroPointAndScale`: the parameters are kept when both pairs use the same
    /// initializers, or equal zero points and `|s1 − s2| < 1e-20`; otherwise the intersection of the
    /// two ranges gets a new scale and zero point, computed in f32 as the C++ does. `None` when
    /// the parameters are not float scales with zero points of one type (nothing is removed).
    fn merged_params(&self, dq1: usize, q2: usize, (qmin, qmax): (i64, i64)) -> Option<Merged> {
        let (a, b) = (&self.nodes[dq1], &self.nodes[q2]);
        if a.inputs[1] == b.inputs[1] && a.inputs[2] == b.inputs[2] {
            return Some(Merged::Kept { identical: true });
        }
        let [s1, z1, s2, z2] = [&a.inputs[1], &a.inputs[2], &b.inputs[1], &b.inputs[2]].map(|n| self.constant(n, true));
        let (s1, z1, s2, z2) = (s1?, z1?, s2?, z2?);
        if z1.dtype != z2.dtype || s1.dtype != DataType::Float || s2.dtype != DataType::Float {
            return None;
        }
        let (z1, z2) = (z1.first_int(self.model)?, z2.first_int(self.model)?);
        let (s1, s2) = (s1.first_float(self.model)?, s2.first_float(self.model)?);
        if z1 == z2 && (s1 - s2).abs() < 1e-20 {
            return Some(Merged::Kept { identical: s1.to_bits() == s2.to_bits() });
        }
        let real = |q: i64, z: i64, s: f32| (q - z) as f32 * s;
        // std::max(a, b) is `a < b ? b : a`, std::min(a, b) is `b < a ? b : a`.
        let (lo1, lo2) = (real(qmin, z1, s1), real(qmin, z2, s2));
        let (hi1, hi2) = (real(qmax, z1, s1), real(qmax, z2, s2));
        let real_min = if lo1 < lo2 { lo2 } else { lo1 };
        let real_max = if hi2 < hi1 { hi2 } else { hi1 };
        let scale = (real_max - real_min) / (qmax - qmin) as f32;
        // std::round (ties away from zero), then a narrowing cast, undefined out of range: clamped
        // here, so the report shows a code of the type.
        // Saturating (NaN → 0) and then clamped to the code range: what ORT leaves undefined.
        #[allow(clippy::cast_possible_truncation)]
        let zp = ((qmin as f32) - real_min / scale).round() as i64;
        Some(Merged::New { scale, zp: zp.clamp(qmin, qmax), old: [(s1, z1), (s2, z2)] })
    }

    fn reduce_double_qdq(&mut self, c: DoubleQdq) {
        let witness = match c.params {
            Merged::New { scale, zp, old } => self.q_zp_type(c.q1).and_then(CodeType::from_dtype).and_then(|t| double_qdq_witness(t, old, (scale, zp))),
            Merged::Kept { .. } => None,
        };
        let (exact, detail) = match c.params {
            Merged::Kept { identical } => {
                let exact = identical && self.round_trip_exact(c.q1);
                (exact, format!("removes {} → {}: the pairs share parameters, Q(DQ(q)) = q", self.describe(c.dq1), self.describe(c.q2)))
            }
            Merged::New { scale, zp, old } => {
                let dt = self.q_zp_type(c.q1).expect("checked");
                let s_name = self.create_const("double_qdq_scale", Const::floats(vec![1], vec![scale]));
                let z_name = self.create_const("double_qdq_zp", Const::ints(dt, vec![1], vec![zp]));
                for id in std::iter::once(c.q1).chain(c.dq2s.iter().copied()) {
                    self.set_input(id, 1, &s_name);
                    self.set_input(id, 2, &z_name);
                }
                let detail = format!(
                    "removes {} → {} and re-quantizes {} and its DQs with scale {} ({scale:e}) zero point {zp} instead of (0x{:08x}, {}) then (0x{:08x}, {}): one rounding on the intersected range",
                    self.describe(c.dq1),
                    self.describe(c.q2),
                    self.describe(c.q1),
                    hex(scale),
                    old[0].0.to_bits(),
                    old[0].1,
                    old[1].0.to_bits(),
                    old[1].1
                );
                (false, detail)
            }
        };
        let q1_out = self.nodes[c.q1].outputs[0].clone();
        for &d in &c.dq2s {
            self.set_input(d, 0, &q1_out);
        }
        self.remove(c.q2);
        self.remove(c.dq1);
        let nodes = [c.q1, c.dq1, c.q2].into_iter().chain(c.dq2s).collect();
        self.report_with("DoubleQDQPairsRemover", nodes, exact, detail, witness);
    }

    /// Whether `Q(DQ(q)) = q` for every code with this node's constant scale: the scale is a finite
    /// normal f32 and no code's product overflows (contract §3.3).
    fn round_trip_exact(&self, id: usize) -> bool {
        let Some(s) = self.nodes[id].input(1).and_then(|s| self.constant(s, true)).and_then(|c| c.first_float(self.model)) else {
            return false;
        };
        let span = self.q_zp_type(id).and_then(tensor::int_range).map_or(0, |(lo, hi)| hi - lo);
        s.is_normal() && (span as f32 * s.abs()).is_finite()
    }

    fn report(&mut self, transformer: &'static str, nodes: Vec<usize>, exact: bool, detail: String) {
        self.report_with(transformer, nodes, exact, detail, None);
    }

    fn report_with(&mut self, transformer: &'static str, nodes: Vec<usize>, exact: bool, detail: String, witness: Option<Counterexample>) {
        let mut authored: Vec<usize> = nodes.into_iter().filter(|&n| self.nodes[n].authored).map(|n| self.nodes[n].origin).collect();
        authored.dedup();
        self.out.rewrites.push(Rewrite { transformer, nodes: authored, exact, detail, witness, location: self.location.clone() });
    }

    /// `WeightBiasQuantization` (qdq_transformer/weight_bias_quantization.cc): a Conv,
    /// ConvTranspose or Gemm whose input comes from a per-tensor DQ and whose output reaches a Q
    /// (through Relu/Clip only) gets its float weight initializer quantized to int8 and its float
    /// bias initializer rounded to int32 at scale `x_scale·w_scale`, each behind a new DQ. The
    /// inserted Q and the bias arithmetic are constant-folded on the next level-1 pass.
    fn quantize_weights_and_biases(&mut self) -> bool {
        let mut changed = false;
        for id in 0..self.nodes.len() {
            if let Some(plan) = self.weight_bias_plan(id) {
                self.apply_weight_bias_plan(id, plan);
                changed = true;
            }
        }
        changed
    }

    fn weight_bias_plan(&self, id: usize) -> Option<WeightBias> {
        let n = &self.nodes[id];
        if !n.alive || !matches!(n.op.as_str(), "Conv" | "ConvTranspose" | "Gemm") {
            return None;
        }
        // The activation must come from a per-tensor DQ.
        let dq0 = *self.producer.get(n.input(0)?)?;
        if !self.nodes[dq0].is("DequantizeLinear") || !self.nodes[dq0].input(1).is_some_and(|s| self.is_scalar(s)) {
            return None;
        }
        if !self.no_branch_path_to_q(id) {
            return None;
        }
        let weight = n.input(1)?;
        let dq1 = self.producer.get(weight).copied().filter(|&p| self.nodes[p].is("DequantizeLinear"));
        // Without a DQ the weight must be a float32 initializer of this graph.
        if dq1.is_none() && self.scope.local_initializer(weight).is_none_or(|c| c.dtype != DataType::Float) {
            return None;
        }
        let bias = match n.input(2) {
            None => None,
            Some(b) => {
                let c = self.scope.any_initializer(b)?;
                (c.dims.len() == 1).then_some(())?;
                Some((b.to_string(), c.dims[0]))
            }
        };
        if dq1.is_some() && bias.is_none() {
            return None;
        }
        if let Some(dq1) = dq1 {
            self.per_channel_weight_matches(id, dq1, bias.as_ref().map_or(-1, |b| b.1))?;
        }
        Some(WeightBias { dq0, dq1, weight: weight.to_string(), bias: bias.map(|b| b.0) })
    }

    /// A per-channel weight DQ must be 1-D of the bias's size, unblocked, on the output-channel axis.
    fn per_channel_weight_matches(&self, id: usize, dq1: usize, bias_size: i64) -> Option<()> {
        let d = &self.nodes[dq1];
        let scale = d.input(1)?;
        if self.is_scalar(scale) {
            return Some(());
        }
        let dims = self.constant(scale, true).map(|c| c.dims.clone()).or_else(|| self.scope.declared_dims(scale))?;
        (dims == [bias_size] && d.attr_i("block_size", 0) == 0).then_some(())?;
        let mut axis = d.attr_i("axis", 1);
        if axis < 0 {
            let rank = d.input(0).and_then(|w| self.constant(w, true).map(|c| c.dims.len()).or_else(|| self.scope.declared_dims(w).map(|v| v.len())))?;
            axis += i64::try_from(rank).ok()?;
        }
        let n = &self.nodes[id];
        let expected = match n.op.as_str() {
            "Gemm" => (n.attr_i("transB", 0) == 0) as i64,
            "ConvTranspose" => 1,
            _ => 0,
        };
        (axis == expected).then_some(())
    }

    /// `IsNoBranchPathToQuantizeLinear`: single consumers all the way, through Relu/Clip only.
    fn no_branch_path_to_q(&self, id: usize) -> bool {
        self.path_to_q(id).is_some()
    }

    /// The Relu/Clip nodes and the Q of [`Self::no_branch_path_to_q`], in order.
    fn path_to_q(&self, id: usize) -> Option<Vec<usize>> {
        let (mut cur, mut path) = (id, Vec::new());
        loop {
            let n = &self.nodes[cur];
            if n.outputs.len() != 1 {
                return None;
            }
            let mut consumers: Vec<usize> = self.uses_of(&n.outputs[0]).iter().map(|u| u.node).collect();
            consumers.dedup();
            let [next] = consumers[..] else { return None };
            path.push(next);
            match self.nodes[next].op.as_str() {
                "QuantizeLinear" => return Some(path),
                "Relu" | "Clip" => cur = next,
                _ => return None,
            }
        }
    }

    /// A float bias rounded by WeightBiasQuantization changes the Q after the node when no
    /// selector fuses the node (the float path adds the rounded bias; a fused group's own verdict
    /// covers its bias codes): such a rewrite lists its Relu/Clip/Q path, when every node of it
    /// is authored and still there, so the audit names the Q output it changes and decides it.
    fn list_float_weight_bias_paths(&mut self) {
        for (index, id, path) in std::mem::take(&mut self.float_bias_paths) {
            let origin = self.nodes[id].origin;
            let fused = self.out.fusions.iter().any(|f| f.target == origin);
            if fused || !self.nodes[id].alive || path.iter().any(|&p| !self.nodes[p].alive || !self.nodes[p].authored) {
                continue;
            }
            let nodes = path.iter().map(|&p| self.nodes[p].origin);
            self.out.rewrites[index].nodes.extend(nodes);
        }
    }

    fn apply_weight_bias_plan(&mut self, id: usize, plan: WeightBias) {
        let op = self.nodes[id].op.clone();
        let mut changed = Vec::new();
        let weight_scale = match plan.dq1 {
            Some(dq1) => self.nodes[dq1].input(1).and_then(|s| self.constant(s, true)).and_then(|c| c.float_values(self.model)),
            None => {
                let w = self.scope.local_initializer(&plan.weight).expect("checked by the plan");
                let (dims, params) = (w.dims.clone(), w.float_values(self.model).map(|v| int8_weight_params(&v)));
                let codes = self.create_const("weight_int8", Const { dtype: DataType::Int8, dims, data: Data::Opaque });
                let (scale, zp) = match params {
                    Some((s, z)) => (Const::floats(vec![], vec![s]), Const::ints(DataType::Int8, vec![], vec![z])),
                    None => {
                        (Const { dtype: DataType::Float, dims: vec![], data: Data::Opaque }, Const { dtype: DataType::Int8, dims: vec![], data: Data::Opaque })
                    }
                };
                let [scale, zp] = [self.create_const("weight_scale", scale), self.create_const("weight_zp", zp)];
                self.insert_dq(id, 1, [codes, scale, zp]);
                changed.push(match params {
                    Some((s, z)) => format!("float weight '{}' quantized to int8 with scale {} ({s:e}) zero point {z}", plan.weight, hex(s)),
                    None => format!("float weight '{}' quantized to int8 per tensor", plan.weight),
                });
                params.map(|(s, _)| vec![s])
            }
        };
        if let Some(bias) = &plan.bias {
            let dims = self.scope.any_initializer(bias).map(|c| c.dims.clone()).unwrap_or_default();
            let codes = self.create_const("bias_int32", Const { dtype: DataType::Int32, dims, data: Data::Opaque });
            // Mul(x_scale, w_scale), constant-folded: one f32 product per weight channel.
            let x_scale = self.nodes[plan.dq0].input(1).and_then(|s| self.constant(s, true)).and_then(|c| c.first_float(self.model));
            let scale = match (x_scale, weight_scale) {
                (Some(x), Some(w)) => Const::floats(vec![i64::try_from(w.len()).expect("a tensor's length fits i64")], w.iter().map(|&w| x * w).collect()),
                _ => Const { dtype: DataType::Float, dims: vec![], data: Data::Opaque },
            };
            let scale = self.create_const("bias_scale", scale);
            self.insert_dq(id, 2, [codes, scale, String::new()]);
            changed.push(format!("float bias '{bias}' rounded to int32 at scale fl(x_scale·w_scale)"));
        }
        let detail = format!("{op} #{}: {}; the fused kernel computes with these instead of the float values", self.nodes[id].origin, changed.join(", "));
        if plan.dq1.is_some()
            && plan.bias.is_some()
            && let Some(path) = self.path_to_q(id)
        {
            self.float_bias_paths.push((self.out.rewrites.len(), id, path));
        }
        self.report("WeightBiasQuantization", vec![id], false, detail);
    }

    /// Puts a new DQ of `params` (codes, scale, zero point) in front of input `slot` of `id`.
    fn insert_dq(&mut self, id: usize, slot: usize, params: [String; 3]) {
        let origin = self.nodes[id].origin;
        let out = format!("qdqc:dq#{}", self.nodes.len());
        let inputs = params.into_iter().filter(|p| !p.is_empty()).collect();
        let since = since_version(self.model, "DequantizeLinear", "");
        let dq = Node {
            op: "DequantizeLinear".into(),
            domain: String::new(),
            since,
            origin,
            authored: false,
            attrs: &[],
            inputs,
            outputs: vec![out.clone()],
            implicit: vec![],
            alive: true,
        };
        self.push(dq);
        self.set_input(id, slot, &out);
    }
}

impl<'m> Work<'m, '_, '_> {
    /// `ConstantSharing` (optimizer/constant_sharing.cc): constant initializers of up to 8 elements
    /// of type f16/f32/f64/i32/i64 with equal type, rank and values are replaced by one of them,
    /// so that CSE sees equal inputs. Zero points (8/16-bit) are never shared.
    fn share_constants(&mut self) -> bool {
        let mut names: Vec<String> = self.uses.keys().filter(|n| self.shareable(n)).cloned().collect();
        names.sort();
        let mut canonical: HashMap<String, String> = HashMap::new();
        let mut changed = false;
        for name in names {
            let c = self.constant(&name, false).expect("shareable");
            let values = match c.dtype {
                DataType::Int32 | DataType::Int64 => c.int_values(self.model).map(|v| format!("{v:?}")),
                _ => c.float_values(self.model).map(|v| format!("{:?}", v.iter().map(|f| f.to_bits()).collect::<Vec<_>>())),
            };
            let Some(values) = values else { continue };
            let key = format!("{:?}/{}/{}/{values}", c.dtype, c.dims.len(), c.len());
            match canonical.get(&key) {
                Some(shared) => {
                    let shared = shared.clone();
                    self.bypass(&name, &shared);
                    changed = true;
                }
                None => {
                    canonical.insert(key, name);
                }
            }
        }
        changed
    }

    fn shareable(&self, name: &str) -> bool {
        let local = self.created.get(name).or_else(|| self.scope.constant(name, false));
        let Some(c) = local else { return false };
        let uses = self.uses_of(name);
        matches!(c.dtype, DataType::Float16 | DataType::Float | DataType::Double | DataType::Int32 | DataType::Int64)
            && (1..=8).contains(&c.len())
            && !self.scope.outputs.contains(name)
            && !uses.is_empty()
            && uses.iter().all(|u| u.slot.is_some())
    }

    /// `CommonSubexpressionElimination` (optimizer/common_subexpression_elimination.cc): nodes with
    /// the same op, attributes and equivalent inputs are merged into the first one in
    /// [`Self::topological_order`]. DQs, nodes with subgraphs and non-deterministic ops never
    /// merge; a graph output is never replaced. The case that matters here: two identical Qs of one
    /// value become one Q with two DQ consumers (the one ORT keeps is the one its group names).
    fn eliminate_common_subexpressions(&mut self) -> bool {
        // Classes are interned: a key names its inputs' classes by number, so keys stay short
        // however deep the graph (spelling them out nests every producer's key).
        let mut classes: HashMap<String, usize> = HashMap::new();
        let mut class_of: HashMap<String, usize> = HashMap::new();
        let mut representative: HashMap<usize, String> = HashMap::new();
        let mut replace: Vec<(usize, String, String)> = Vec::new();
        for id in self.topological_order() {
            let n = &self.nodes[id];
            if n.op == "EPContext" {
                continue;
            }
            let inputs: Vec<String> = n.inputs.iter().map(|i| class_of.get(i).map_or_else(|| format!("value:{i}"), |c| format!("class:{c}"))).collect();
            let key = if self.cse_supported(id) { format!("{}|{}|{}|{inputs:?}", n.op, n.domain, attrs_key(n.attrs)) } else { format!("node:{id}") };
            for (slot, out) in n.outputs.iter().enumerate().filter(|(_, o)| !o.is_empty()) {
                let fresh = classes.len();
                let class = *classes.entry(format!("{key}#{slot}")).or_insert(fresh);
                match representative.get(&class) {
                    Some(rep) if !self.scope.outputs.contains(out.as_str()) => replace.push((id, out.clone(), rep.clone())),
                    Some(_) => {}
                    None => {
                        representative.insert(class, out.clone());
                    }
                }
                class_of.insert(out.clone(), class);
            }
        }
        let changed = !replace.is_empty();
        for (id, out, rep) in replace {
            self.bypass(&out, &rep);
            if self.check_output_edges(id, 0) {
                self.remove(id);
            }
        }
        changed
    }

    /// `GraphViewer::GetNodesInTopologicalOrder` (graph_viewer.cc): `Graph::ReverseDFSFrom` the
    /// leaf nodes (no output edge) in index order, a node's producers pushed in ascending index
    /// order (`NodeCompare`), each node emitted when left. The stack pops the last leaf first, so
    /// of two independent branches the one ending in the later leaf comes first.
    fn topological_order(&self) -> Vec<usize> {
        let live = |id: usize| self.nodes[id].alive;
        let leaves: Vec<usize> = (0..self.nodes.len()).filter(|&id| live(id) && self.out_edge_count(id) == 0).collect();
        let mut stack: Vec<(usize, bool)> = leaves.into_iter().map(|id| (id, false)).collect();
        let mut visited = vec![false; self.nodes.len()];
        let mut order = Vec::new();
        while let Some((id, leave)) = stack.pop() {
            if leave {
                order.push(id);
                continue;
            }
            if std::mem::replace(&mut visited[id], true) {
                continue;
            }
            stack.push((id, true));
            let n = &self.nodes[id];
            let mut producers: Vec<usize> = n.inputs.iter().chain(&n.implicit).filter_map(|i| self.producer.get(i.as_str()).copied()).collect();
            producers.sort_unstable();
            stack.extend(producers.into_iter().filter(|&p| !visited[p]).map(|p| (p, false)));
        }
        order
    }

    /// `IsNodeSupported` of the CSE: no subgraph, deterministic (`optimizer_utils::IsOperationDeterministic`),
    /// not a DQ.
    fn cse_supported(&self, id: usize) -> bool {
        let n = &self.nodes[id];
        let has_subgraph = n.attrs.iter().any(|a| a.g.is_some() || !a.graphs.is_empty());
        let deterministic = match n.domain.as_str() {
            "" => !["RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial", "Dropout"].contains(&n.op.as_str()),
            "com.microsoft" => n.op == "QuantizeLinear" || n.op == "DequantizeLinear",
            _ => false,
        };
        !has_subgraph && deterministic && n.op != "DequantizeLinear"
    }

    /// `ConstantFolding` (optimizer/constant_folding.cc) of a QuantizeLinear whose inputs are all
    /// constant initializers (NNCF exports float weights as `W → Q → DQ`): ORT runs the CPU kernel
    /// once and the DQ reads the codes as a constant, so QDQS8ToU8 later finds no Q→DQ pair there.
    /// Exact: the unfused graph runs the same kernel on the same values. (DequantizeLinear is not
    /// folded with QDQ handling on; other nodes do not touch Q/DQ.)
    fn fold_constant_quantize(&mut self) -> bool {
        let mut changed = false;
        for q in 0..self.nodes.len() {
            let n = &self.nodes[q];
            if !n.alive || !self.match_q(q) || self.produces_graph_output(q) || !n.implicit.is_empty() {
                continue;
            }
            if !n.inputs.iter().filter(|i| !i.is_empty()).all(|i| self.constant(i, true).is_some()) {
                continue;
            }
            let (Some(dtype), Some(dims)) = (self.q_type(q), self.constant(&n.inputs[0], true).map(|c| c.dims.clone())) else { continue };
            let folded = self.create_const("folded_q", Const { dtype, dims, data: Data::Opaque });
            let out = self.nodes[q].outputs[0].clone();
            let detail = format!(
                "folds {} of the constant '{}' into its codes: the kernel the unfused graph runs, on the same values",
                self.describe(q),
                self.nodes[q].inputs[0]
            );
            self.bypass(&out, &folded);
            self.remove(q);
            self.report("ConstantFolding", vec![q], true, detail);
            changed = true;
        }
        changed
    }

    /// `QDQPropagationTransformer` (qdq_transformer/qdq_propagation.cc): a Q with constant scalar
    /// parameters is copied backwards, and a DQ forwards, across MaxPool-12/22, Reshape, Transpose,
    /// Squeeze, Unsqueeze and Slice chains, as new Q→DQ pairs, so those ops get dropped and their
    /// neighbours see DQ inputs / Q outputs.
    fn propagate_qdq(&mut self) -> bool {
        let mut changed = false;
        for q in 0..self.nodes.len() {
            changed |= self.propagate_q_backward(q);
        }
        for dq in 0..self.nodes.len() {
            changed |= self.propagate_dq_forward(dq);
        }
        changed
    }

    /// `CanNodePropagate`.
    fn can_propagate(&self, id: usize) -> bool {
        let n = &self.nodes[id];
        let versions: &[i64] = match n.op.as_str() {
            "MaxPool" => &[12, 22],
            "Reshape" => &[5, 13, 14, 19, 21, 23, 24, 25],
            "Transpose" => &[1, 13, 21, 23, 24, 25],
            "Squeeze" | "Unsqueeze" => &[1, 11, 13, 21, 23, 24, 25],
            "Slice" => &[1, 10, 11, 13],
            _ => return false,
        };
        n.alive && n.domain.is_empty() && versions.contains(&since_version(self.model, &n.op, ""))
    }

    /// `GetPreviousEdge`: the producer of input 0, when its output feeds only this node and no
    /// graph output (`None` for a graph input or initializer, which ends the walk).
    fn previous_node(&self, id: usize) -> Option<usize> {
        let input = self.nodes[id].input(0)?;
        let src = *self.producer.get(input)?;
        (!self.scope.outputs.contains(input) && self.uses_of(input).len() == 1).then_some(src)
    }

    fn propagate_q_backward(&mut self, q: usize) -> bool {
        if !self.match_q(q) || self.constant_scalar_params(q).is_none() {
            return false;
        }
        let mut changed = false;
        let mut cur = self.previous_node(q);
        while let Some(node) = cur.filter(|&n| self.can_propagate(n)) {
            let Some(input) = self.nodes[node].input(0).map(str::to_string) else { break };
            let src = self.producer.get(&input).copied();
            if src.is_some_and(|s| self.match_dq(s)) {
                break;
            }
            let next = self.previous_node(node);
            self.insert_qdq_pair(&input, q);
            changed = true;
            cur = next;
        }
        changed
    }

    fn propagate_dq_forward(&mut self, dq: usize) -> bool {
        if !self.match_dq(dq) || !self.check_output_edges(dq, 1) || self.constant_scalar_params(dq).is_none() {
            return false;
        }
        // 1.31 (checked on the wheel): a DQ of a constant initializer (a weight) is not propagated.
        if self.nodes[dq].input(0).is_some_and(|w| self.constant(w, true).is_some()) {
            return false;
        }
        let mut changed = false;
        let mut queue = std::collections::VecDeque::from([self.nodes[dq].outputs[0].clone()]);
        while let Some(value) = queue.pop_front() {
            // The next group: the output 0 of the node this value feeds, if that node propagates.
            let Some(dst) = self.uses_of(&value).first().map(|u| u.node).filter(|&d| self.can_propagate(d)) else {
                continue;
            };
            if self.scope.outputs.contains(value.as_str()) {
                continue;
            }
            let out = self.nodes[dst].outputs[0].clone();
            let consumers = self.uses_of(&out);
            let any_q = consumers.iter().any(|u| self.match_q(u.node));
            if (consumers.is_empty() && !self.scope.outputs.contains(out.as_str())) || any_q {
                continue;
            }
            let dqs = self.insert_qdq_pair(&out, dq);
            queue.extend(dqs);
            changed = true;
        }
        changed
    }

    /// `InsertQDQPairs`: `value` gets a Q with `like`'s scale and zero point, and each of its
    /// consumers (and a graph output) its own DQ. Returns the new DQs' outputs.
    fn insert_qdq_pair(&mut self, value: &str, like: usize) -> Vec<String> {
        let src = self.producer.get(value).copied();
        let template = self.nodes[like].clone();
        let params: Vec<String> = template.inputs[1..].iter().filter(|p| !p.is_empty()).cloned().collect();
        let fresh = |w: &Self, what: &str| format!("{value}_{what}#{}", w.nodes.len());
        let pre_q = match src {
            Some(s) => {
                let pre = fresh(self, "pre_q");
                let slot = self.nodes[s].outputs.iter().position(|o| o == value).expect("produces it");
                self.nodes[s].outputs[slot] = pre.clone();
                self.producer.remove(value);
                self.producer.insert(pre.clone(), s);
                pre
            }
            None => value.to_string(),
        };
        let q_out = fresh(self, "q_to_dq");
        let make = |op: &str, input: String, output: String| Node {
            op: op.into(),
            inputs: std::iter::once(input).chain(params.iter().cloned()).collect(),
            outputs: vec![output],
            implicit: vec![],
            authored: false,
            alive: true,
            ..template.clone()
        };
        self.push(make("QuantizeLinear", pre_q, q_out.clone()));
        let mut outs = Vec::new();
        for u in self.uses_of(value).into_iter().filter(|u| u.slot.is_some()) {
            let out = fresh(self, "post_dq");
            self.push(make("DequantizeLinear", q_out.clone(), out.clone()));
            self.set_input(u.node, u.slot.expect("explicit"), &out);
            outs.push(out);
        }
        if self.scope.outputs.contains(value) {
            self.push(make("DequantizeLinear", q_out, value.to_string()));
        }
        outs
    }

    /// `WhereDummyDq` (qdq_transformer/where_dummy_dq.cc): a Where with one DQ'd branch and one
    /// rank-0 float initializer gets `DQ(1; scale = that value, zero point 0)` on the latter, so
    /// that QLinearWhere can take it. Exact: fl(1·c) = c.
    fn add_where_dummy_dq(&mut self) -> bool {
        let mut changed = false;
        for id in 0..self.nodes.len() {
            if let Some((slot, dq, value)) = self.where_dummy_plan(id) {
                let (scale_dt, zp_dt) = (self.dtype(&self.nodes[dq].inputs[1]), self.dtype(&self.nodes[dq].inputs[2]));
                let (Some(zp_dt), Some(DataType::Float)) = (zp_dt, scale_dt) else { continue };
                let data = self.create_const("where_dummy_data", Const::ints(zp_dt, vec![], vec![1]));
                let scale = self.create_const("where_dummy_scale", Const::floats(vec![], vec![value]));
                let zp = self.create_const("where_dummy_zp", Const::ints(zp_dt, vec![], vec![0]));
                self.insert_dq(id, slot, [data, scale, zp]);
                changed = true;
            }
        }
        changed
    }

    /// The input slot to give a dummy DQ, the DQ on the other branch, and the scalar's value.
    fn where_dummy_plan(&self, id: usize) -> Option<(usize, usize, f32)> {
        let n = &self.nodes[id];
        if !n.is("Where") {
            return None;
        }
        let parent = |slot: usize| n.input(slot).and_then(|i| self.producer.get(i).copied());
        let is_dq = |p: Option<usize>| p.is_some_and(|p| self.nodes[p].op == "DequantizeLinear");
        let (slot, dq) = match (parent(1), parent(2)) {
            (p1, None) if is_dq(p1) => (2, p1?),
            (None, p2) if is_dq(p2) => (1, p2?),
            _ => return None,
        };
        let value = self.scope.local_initializer(n.input(slot)?).filter(|c| c.dims.is_empty() && c.dtype == DataType::Float)?;
        let d = &self.nodes[dq];
        // The DQ's scale and zero point must be initializers of this graph, the zero point 8/16-bit.
        self.scope.local_initializer(d.input(1)?)?;
        range_8_16(self.scope.local_initializer(d.input(2)?)?.dtype)?;
        Some((slot, dq, value.first_float(self.model)?))
    }
}

/// Attributes as a set, for equality: each by the length and a 128-bit hash of its protobuf
/// encoding (linear in its size; a Debug text of a 64 MiB string attribute took seconds).
fn attrs_key(attrs: &[AttributeProto]) -> String {
    use std::hash::{Hash, Hasher};
    let mut v: Vec<String> = attrs
        .iter()
        .map(|a| {
            let bytes = prost::Message::encode_to_vec(a);
            let hash = |seed: u8| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                seed.hash(&mut h);
                bytes.hash(&mut h);
                h.finish()
            };
            format!("{}:{:016x}{:016x}", bytes.len(), hash(0), hash(1))
        })
        .collect();
    v.sort();
    v.join(";")
}

#[derive(Clone, Copy, Debug)]
enum Merged {
    /// Parameters kept; `identical` unless they differed by less than 1e-20.
    Kept {
        identical: bool,
    },
    New {
        scale: f32,
        zp: i64,
        old: [(f32, i64); 2],
    },
}

struct DoubleQdq {
    q1: usize,
    dq1: usize,
    q2: usize,
    dq2s: Vec<usize>,
    params: Merged,
}

struct WeightBias {
    /// The activation's DQ, whose scale the bias scale multiplies.
    dq0: usize,
    dq1: Option<usize>,
    weight: String,
    bias: Option<String>,
}

/// `GetQuantizationParameter<int8_t>` (util/qmath.h) as WeightBiasQuantization calls it:
/// asymmetric over [min(w, 0), max(w, 0)], scale `(max − min)/255` (1 when the range is empty),
/// zero point `RoundHalfToEven(clamp(−128 − min/scale))`.
fn int8_weight_params(w: &[f32]) -> (f32, i64) {
    let lo = w.iter().fold(0f32, |m, &v| if v < m { v } else { m });
    let hi = w.iter().fold(0f32, |m, &v| if m < v { v } else { m });
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zp = (-128.0 - lo / scale).clamp(-128.0, 127.0).round_ties_even();
    // `zp` is integral and clamped to int8 first: the cast is exact.
    #[allow(clippy::cast_possible_truncation)]
    let zp = zp as i64;
    (scale, zp)
}

fn hex(v: f32) -> String {
    format!("0x{:08x}", v.to_bits())
}

// ---------------------------------------------------------------------------------------------
// Level 2: Relu/Clip removal, S8→U8, selection, final cleanup.

impl<'m> Work<'m, '_, '_> {
    /// The level-2 rewrite rules `ClipQuantRewrite` (qdq_transformer/clip_quantizelinear.cc) and
    /// `ReluQuantRewrite` (qdq_transformer/relu_quantizelinear.cc): a Relu or Clip whose only
    /// consumer is a Q is removed when the Q's range lies inside it. They run even with
    /// `session.disable_quant_qdq=1`.
    fn remove_relu_clip_before_q(&mut self) {
        for id in 0..self.nodes.len() {
            let n = &self.nodes[id];
            if !n.alive || !n.domain.is_empty() {
                continue;
            }
            let (transformer, verdict) = match n.op.as_str() {
                "Relu" => ("ReluQuantRewrite", self.relu_quant(id)),
                "Clip" => ("ClipQuantRewrite", self.clip_quant(id)),
                _ => continue,
            };
            match verdict {
                Some(ClipVerdict::Removed { q, bounds }) => {
                    let (exact, why, witness) = self.clip_removal_exact(q, bounds);
                    let detail = format!("removes {} before {}: {why}", self.describe(id), self.describe(q));
                    let source = self.clip_source(id);
                    let out = self.nodes[id].outputs[0].clone();
                    self.bypass(&out, &source);
                    self.remove(id);
                    self.report_with(transformer, vec![id, q], exact, detail, witness);
                }
                Some(ClipVerdict::Throws { q }) => {
                    let detail = format!(
                        "{} before {} whose zero point is not 8- or 16-bit: ORT_THROW in GetQConstantLowerUpper aborts session creation",
                        self.describe(id),
                        self.describe(q)
                    );
                    self.report(transformer, vec![id, q], false, detail);
                }
                None => {}
            }
        }
    }

    /// `ReluQuantFusion`: Relu-6/13/14 with one output edge into a Q with a constant zero point of one
    /// element that equals the type's minimum. Other zero point types (int4, …) pass unchecked.
    fn relu_quant(&self, id: usize) -> Option<ClipVerdict> {
        let q = self.single_q_consumer(id, &[6, 13, 14])?;
        let qn = &self.nodes[q];
        let zp = (qn.inputs.len() == 3).then(|| qn.input(2)).flatten()?;
        let zp = self.local_constant(zp).filter(|c| c.len() == 1)?;
        if let Some((lo, _)) = range_8_16(zp.dtype) {
            (zp.first_int(self.model)? == lo).then_some(())?;
        }
        Some(ClipVerdict::Removed { q, bounds: (0.0, f32::INFINITY) })
    }

    /// `ClipQuantFusion`: a constant Clip range covering `[s·(qmin − z), s·(qmax − z)]` up to an
    /// absolute FLT_EPSILON, with a rank-0 float scale and a rank-0 zero point.
    fn clip_quant(&self, id: usize) -> Option<ClipVerdict> {
        let q = self.single_q_consumer(id, &[1, 6, 11, 12, 13])?;
        self.can_remove_clip(id).then_some(())?;
        let (min, max) = self.clip_bounds(id)?;
        let qn = &self.nodes[q];
        (qn.inputs.len() == 3).then_some(())?;
        let scale = self.constant(qn.input(1)?, true).filter(|c| c.dims.is_empty() && c.dtype == DataType::Float)?;
        let scale = scale.first_float(self.model)?;
        let zp = self.constant(qn.input(2)?, true).filter(|c| c.dims.is_empty())?;
        let Some((qmin, qmax)) = range_8_16(zp.dtype) else { return Some(ClipVerdict::Throws { q }) };
        let z = zp.first_int(self.model)?;
        let (lower, upper) = (scale * (qmin - z) as f32, scale * (qmax - z) as f32);
        let eps = f32::EPSILON;
        (!(eps < min - lower || eps < upper - max)).then_some(ClipVerdict::Removed { q, bounds: (min, max) })
    }

    /// Relu/Clip of an accepted version, with one output edge that goes to a Q.
    fn single_q_consumer(&self, id: usize, versions: &[i64]) -> Option<usize> {
        (versions.contains(&self.nodes[id].since) && self.check_output_edges(id, 1)).then_some(())?;
        let q = self.only_consumer(id)?;
        self.match_q(q).then_some(q)
    }

    /// `graph_utils::CanRemoveNode`: one input edge, or a single input.
    fn can_remove_clip(&self, id: usize) -> bool {
        !self.produces_graph_output(id) && (self.in_edge_count(id) == 1 || self.nodes[id].inputs.len() == 1)
    }

    /// The value that replaces a removed node's output: the input its single edge carries.
    fn clip_source(&self, id: usize) -> String {
        let n = &self.nodes[id];
        n.inputs.iter().find(|i| self.producer.contains_key(i.as_str())).unwrap_or(&n.inputs[0]).clone()
    }

    /// Whether `Q(clip(x)) = Q(x)` for every x: with s > 0 the bounds must quantize to the ends of
    /// the code range (min to qmin, max to qmax), with s < 0 the other way round, per channel.
    /// NaN passes through ORT's Relu and Clip, so it reaches Q either way.
    fn clip_removal_exact(&self, q: usize, (min, max): (f32, f32)) -> (bool, String, Option<Counterexample>) {
        let Some(params) = self.q_params(q) else {
            return (false, "the Q's scale or zero point is not constant".into(), None);
        };
        for (c, (s, z)) in params.scales.iter().zip(params.zps.iter().cycle()).enumerate() {
            if !s.is_finite() || *s == 0.0 {
                return (false, format!("scale {} is zero or not finite", hex(*s)), None);
            }
            let (lo, hi) = params.code.range();
            let (at_min, at_max) = (quantize(min, *s, *z, params.code), quantize(max, *s, *z, params.code));
            let want = if *s > 0.0 { (lo, hi) } else { (hi, lo) };
            if (at_min, at_max) != want {
                let why = format!(
                    "with scale {} zero point {z} the bounds [{min:e}, {max:e}] quantize to [{at_min}, {at_max}], not [{}, {}]: values outside them change",
                    hex(*s),
                    want.0,
                    want.1
                );
                return (false, why, clip_witness((*s, *z, params.code), (min, max), (at_min, at_max) == (want.0, at_max), c, params.scales.len()));
            }
        }
        (true, "the Q's range lies inside the bounds".into(), None)
    }

    /// A Q or DQ node's constant scales and zero points (one zero point 0 when absent).
    fn q_params(&self, id: usize) -> Option<QParams> {
        let n = &self.nodes[id];
        let scales = self.constant(n.input(1)?, true)?.float_values(self.model)?;
        let zps = match n.input(2) {
            Some(z) => self.constant(z, true)?.int_values(self.model)?,
            None => vec![0],
        };
        let code = CodeType::from_dtype(if n.op == "QuantizeLinear" { self.q_type(id)? } else { self.dq_type(id)? })?;
        (!scales.is_empty() && !zps.is_empty()).then_some(QParams { scales, zps, code })
    }

    /// `QDQS8ToU8Transformer` (qdq_transformer/qdq_s8_to_u8.cc), run when int8 is not allowed: a Q
    /// with one output edge into a DQ, both with equal one-element int8 constant zero points of
    /// this graph, becomes uint8 with zero point + 128. Numerically neutral; it decides the types
    /// the selectors see.
    fn convert_s8_pairs_to_u8(&mut self) {
        for q in 0..self.nodes.len() {
            if !self.match_q(q) || !self.check_output_edges(q, 1) {
                continue;
            }
            let Some(dq) = self.only_consumer(q).filter(|&d| self.match_dq(d)) else { continue };
            if let Some(zp) = self.s8_pair_zero_point(q, dq) {
                let name = self.create_const("s8_to_u8_zp", Const::ints(DataType::Uint8, vec![], vec![zp + 128]));
                self.set_input(q, 2, &name);
                self.set_input(dq, 2, &name);
            }
        }
    }

    fn s8_pair_zero_point(&self, q: usize, dq: usize) -> Option<i64> {
        let zp = |id: usize| {
            let n = &self.nodes[id];
            let c = (n.inputs.len() == 3).then(|| n.input(2)).flatten().and_then(|z| self.local_constant(z))?;
            (c.len() == 1 && c.dtype == DataType::Int8).then(|| c.first_int(self.model)).flatten()
        };
        let (a, b) = (zp(q)?, zp(dq)?);
        (a == b).then_some(a)
    }

    /// `QDQFinalCleanupTransformer` (qdq_transformer/qdq_final_cleanup.cc), DQ→Q only (Q→DQ needs
    /// `session.enable_quant_qdq_cleanup=1`): a DQ whose every consumer is a Q with the same constant
    /// scalar parameters, each Q feeding one node or only a graph output, is removed with them.
    fn final_cleanup(&mut self) {
        for dq in 0..self.nodes.len() {
            if !self.match_dq(dq) || self.out_edge_count(dq) == 0 {
                continue;
            }
            let qs: Vec<usize> = self.out_edges(dq).into_iter().map(|(_, u)| u.node).collect();
            let removable = qs.iter().all(|&q| {
                let edges = self.out_edge_count(q);
                let ends_ok = if self.produces_graph_output(q) { edges == 0 } else { edges == 1 };
                self.match_q(q) && self.qdq_pair_supported(dq, q, false) && ends_ok
            });
            if removable {
                let exact = self.round_trip_exact(dq);
                let targets: Vec<String> = qs.iter().map(|&q| self.describe(q)).collect();
                let holds = if exact { "holds" } else { "fails for this scale" };
                let detail = format!("removes {} → {}: Q(DQ(q)) = q {holds}", self.describe(dq), targets.join(", "));
                self.report("QDQFinalCleanupTransformer", std::iter::once(dq).chain(qs.iter().copied()).collect(), exact, detail);
                let codes = self.nodes[dq].inputs[0].clone();
                for q in qs {
                    let out = self.nodes[q].outputs[0].clone();
                    self.bypass(&out, &codes);
                    self.remove(q);
                }
                self.remove(dq);
            }
        }
    }
}

enum ClipVerdict {
    Removed { q: usize, bounds: (f32, f32) },
    Throws { q: usize },
}

struct QParams {
    scales: Vec<f32>,
    zps: Vec<i64>,
    code: CodeType,
}

// ---------------------------------------------------------------------------------------------
// QDQSelectorActionTransformer (selectors_actions/qdq_selector_action_transformer.cc,
// qdq_selectors.cc, qdq_actions.cc, framework/node_unit.cc).

/// A candidate node group, as `NodeGroupSelector::GetQDQSelection` finds it.
struct Selection {
    target: usize,
    /// DQ parents, by input slot.
    dqs: Vec<usize>,
    /// Q children (of the clip when there is one), by output slot.
    qs: Vec<usize>,
    clip: Option<usize>,
}

/// The rules registered for the CPU EP. Registration order decides which rule tries a node first;
/// the two rules sharing an op (MatMul, Gemm) exclude each other by DQ count.
#[derive(Clone, Copy, Debug)]
enum Rule {
    /// `dropSplitQDQ`: SplitSelector(req_equal_quant_params=true, allow_4bit=false).
    Split,
    /// DropQDQNodesSelector(allow_16bit, allow_4bit, allow_nonpositive_scale).
    Drop {
        name: &'static str,
        allow_16bit: bool,
        allow_4bit: bool,
        positive_scale: bool,
    },
    /// `dropDQ`: DropDQNodesSelector(allow_16bit=false, allow_4bit=false).
    DropDq,
    /// UnarySelector (8-bit only).
    Unary(&'static str),
    /// `2DQ`: BinarySelector (8-bit only).
    Binary,
    /// `*DQ`: InputVariadicSelector (8-bit only).
    Variadic,
    Conv,
    MatMul,
    Gemm,
    Where,
    DqMatMulNBits,
}

/// The rules for a node's op type and SinceVersion, in registration order.
fn rules_for(op: &str, since: i64) -> Vec<Rule> {
    let drop = |name, allow_16bit, allow_4bit, positive_scale| Rule::Drop { name, allow_16bit, allow_4bit, positive_scale };
    match op {
        "Split" => vec![Rule::Split],
        // 1.31: DepthToSpace is still dropped (the 1.25 tree registers it with Resize).
        "Resize" | "DepthToSpace" => vec![drop("drop_no_int16_support", false, false, false)],
        // The 1.25 tree registers MaxPool {12} only; 1.31 also drops MaxPool-22. The selector's
        // arguments (false, true, false) let 4-bit through.
        "MaxPool" if matches!(since, 12 | 22) => {
            vec![drop("drop_no_int16_support_and_positive_scale", false, true, true)]
        }
        "ReduceMax" | "ReduceMin" => vec![drop("drop_no_int16_support_and_positive_scale", false, true, true)],
        "Expand" | "Flatten" | "Gather" | "GatherElements" | "Reshape" | "Slice" | "Squeeze" | "Tile" | "Transpose" | "Unsqueeze" => {
            vec![drop("drop", true, false, false)]
        }
        "ArgMax" => vec![Rule::DropDq],
        "AveragePool" | "GlobalAveragePool" | "Sigmoid" => vec![Rule::Unary("1DQ")],
        "LeakyRelu" | "Softmax" => vec![Rule::Unary("1DQ_CPU")],
        "Add" | "Mul" => vec![Rule::Binary],
        "Concat" => vec![Rule::Variadic],
        "Conv" => vec![Rule::Conv],
        "MatMul" => vec![Rule::MatMul, Rule::DqMatMulNBits],
        // 1.31 (upstream PR #27769): Gemm is also a DQ→MatMulNBits target.
        "Gemm" => vec![Rule::Gemm, Rule::DqMatMulNBits],
        "Where" => vec![Rule::Where],
        _ => vec![],
    }
}

impl<'m> Work<'m, '_, '_> {
    /// Tries every registered rule on every node in order; a selected group is replaced by one
    /// node standing for the fused kernel.
    fn select_and_fuse(&mut self) {
        for id in 0..self.nodes.len() {
            let n = &self.nodes[id];
            if !n.alive || !n.domain.is_empty() {
                continue;
            }
            let rules = rules_for(&n.op, n.since);
            if rules.is_empty() {
                continue;
            }
            let Some(sel) = self.selection(id) else { continue };
            if let Some((name, fused_op)) = rules.into_iter().find_map(|rule| self.check(rule, &sel)) {
                self.fuse(name, fused_op, sel);
            }
        }
    }

    /// `NodeGroupSelector::GetQDQSelection`: DQ parents, and Q children of the target or of a
    /// single Relu/Clip after it. A Relu/Clip followed by anything but one Q that makes it
    /// redundant blocks the group.
    fn selection(&self, target: usize) -> Option<Selection> {
        let dqs = self.parents_of_type(target, "DequantizeLinear");
        let clip = self.only_consumer(target).filter(|&c| {
            let n = &self.nodes[c];
            (n.op == "Relu" || n.op == "Clip") && self.out_edge_count(c) == 1 && !self.produces_graph_output(c)
        });
        let qs = self.children_of_type(clip.unwrap_or(target), "QuantizeLinear");
        if let Some(c) = clip
            && (qs.len() != 1 || !self.clip_redundant_by_q(c, qs[0]))
        {
            return None;
        }
        Some(Selection { target, dqs, qs, clip })
    }

    /// Runs one rule's `Check`; `Some((action name, fused op))` when it selects the group.
    fn check(&self, rule: Rule, sel: &Selection) -> Option<(&'static str, String)> {
        let op = &self.nodes[sel.target].op;
        let on_codes = || format!("{op} (on codes)");
        let qlinear = || format!("com.microsoft.QLinear{op}");
        match rule {
            Rule::Split => self.check_split(sel).then(|| ("dropSplitQDQ", on_codes())),
            Rule::Drop { name, allow_16bit, allow_4bit, positive_scale } => {
                let ok = self.check_drop(sel, allow_16bit, allow_4bit, positive_scale) && self.resize_is_nearest(sel.target);
                ok.then(|| (name, on_codes()))
            }
            Rule::DropDq => self.check_drop_dq(sel).then(|| ("dropDQ", on_codes())),
            Rule::Unary(name) => self.check_unary(sel).then(|| (name, qlinear())),
            Rule::Binary => self.check_binary(sel).then(|| ("2DQ", qlinear())),
            Rule::Variadic => self.check_variadic(sel).then(|| ("*DQ", qlinear())),
            Rule::Conv => self.check_conv(sel).then(|| ("Conv", "QLinearConv".to_string())),
            Rule::MatMul => self.check_matmul(sel).map(|op| ("MatMul", op.to_string())),
            Rule::Gemm => self.check_gemm(sel).then(|| ("Gemm", "com.microsoft.QGemm".to_string())),
            Rule::Where => self.check_where(sel).then(|| ("Where", "com.microsoft.QLinearWhere".to_string())),
            Rule::DqMatMulNBits => self.check_dq_matmul_nbits(sel).then(|| ("DQMatMulToMatMulNBits", "com.microsoft.MatMulNBits".to_string())),
        }
    }

    /// `QDQ::NodeGroup::CanCreateNodeGroup` (framework/node_unit.cc).
    fn can_create_node_group(&self, sel: &Selection, clip: Option<usize>) -> bool {
        let single_edge_to = |from: usize, to: usize| matches!(self.out_edges(from)[..], [(_, u)] if u.node == to);
        // Each DQ feeds only the target, and no graph output.
        if !sel.dqs.iter().all(|&dq| !self.produces_graph_output(dq) && single_edge_to(dq, sel.target)) {
            return false;
        }
        if let Some(c) = clip {
            return !self.produces_graph_output(sel.target)
                && single_edge_to(sel.target, c)
                && !self.produces_graph_output(c)
                && sel.qs.len() == 1
                && single_edge_to(c, sel.qs[0]);
        }
        if sel.qs.is_empty() {
            return true;
        }
        // Per output: consumers are all Q or all non-Q, and an output feeding Qs is no graph output.
        let target = &self.nodes[sel.target];
        target.outputs.iter().filter(|o| !o.is_empty()).all(|o| {
            let consumers: Vec<bool> = self.uses_of(o).iter().map(|u| self.nodes[u.node].op == "QuantizeLinear").collect();
            let all_q = consumers.first().is_some_and(|&q| q);
            consumers.iter().all(|&q| q == all_q) && !(all_q && self.scope.outputs.contains(o.as_str()))
        })
    }

    /// `NodeGroupSelector::CheckQDQNodes`: one DQ per existing input (or `num_dq_inputs`), a valid
    /// node group, and — unless no Q is allowed — one Q per output, all its output edges to Qs, no
    /// graph output.
    fn check_qdq_nodes(&self, sel: &Selection, clip: Option<usize>, num_dq_inputs: Option<usize>, empty_q_allowed: bool) -> bool {
        let target = &self.nodes[sel.target];
        if num_dq_inputs.unwrap_or_else(|| target.existing_inputs()) != sel.dqs.len() || !self.can_create_node_group(sel, clip) {
            return false;
        }
        if sel.qs.is_empty() {
            return empty_q_allowed;
        }
        target.existing_outputs() == sel.qs.len() && sel.qs.len() == self.out_edge_count(sel.target) && !self.produces_graph_output(sel.target)
    }

    fn in_type(&self, sel: &Selection, i: usize) -> Option<DataType> {
        self.dq_type(sel.dqs[i])
    }

    fn out_type(&self, sel: &Selection) -> Option<DataType> {
        self.q_type(sel.qs[0])
    }

    /// DropQDQNodeGroupSelector: one DQ, one Q, same type, constant scalar parameters equal between
    /// them (and a positive scale when required).
    fn check_drop(&self, sel: &Selection, allow_16bit: bool, allow_4bit: bool, positive_scale: bool) -> bool {
        if sel.clip.is_some() || !self.check_qdq_nodes(sel, None, Some(1), false) {
            return false;
        }
        let dt = self.in_type(sel, 0);
        let (dq, q) = (sel.dqs[0], sel.qs[0]);
        same(dt, self.out_type(sel))
            && (allow_16bit || !is_16bit(dt))
            && (allow_4bit || !is_4bit(dt))
            && (!positive_scale || self.scale_positive(q))
            && self.qdq_pair_supported(q, dq, true)
    }

    /// 1.31: a Resize is dropped only in `nearest` mode (checked on the wheel: linear and cubic keep
    /// their Q/DQ, whatever the coordinate transformation); the 1.25 tree dropped every mode.
    fn resize_is_nearest(&self, id: usize) -> bool {
        let n = &self.nodes[id];
        n.op != "Resize" || n.attr("mode").and_then(|a| a.s.as_deref()).is_none_or(|m| m == b"nearest")
    }

    /// DropDQNodeGroupSelector (ArgMax): one DQ with a constant scalar scale and an explicit
    /// constant scalar zero point; 8-bit only. The sign of the scale is not checked.
    fn check_drop_dq(&self, sel: &Selection) -> bool {
        if sel.clip.is_some() || sel.dqs.len() != 1 || !self.can_create_node_group(sel, None) {
            return false;
        }
        let dt = self.in_type(sel, 0);
        !is_16bit(dt) && !is_4bit(dt) && self.constant_scalar_params(sel.dqs[0]) == Some(true)
    }

    fn check_unary(&self, sel: &Selection) -> bool {
        let dt = || self.in_type(sel, 0);
        self.check_qdq_nodes(sel, sel.clip, Some(1), false) && same(dt(), self.out_type(sel)) && eight_bit_ok(dt())
    }

    fn check_binary(&self, sel: &Selection) -> bool {
        if !self.check_qdq_nodes(sel, sel.clip, None, false) || sel.dqs.len() < 2 {
            return false;
        }
        let dt = self.in_type(sel, 0);
        same(dt, self.in_type(sel, 1)) && same(dt, self.out_type(sel)) && eight_bit_ok(dt)
    }

    fn check_variadic(&self, sel: &Selection) -> bool {
        if !self.check_qdq_nodes(sel, sel.clip, None, false) || sel.dqs.is_empty() {
            return false;
        }
        let dt = self.in_type(sel, 0);
        (0..sel.dqs.len()).all(|i| same(self.in_type(sel, i), dt))
            && sel.qs.iter().all(|&q| same(self.q_type(q), self.out_type(sel)))
            && same(dt, self.out_type(sel))
            && eight_bit_ok(dt)
    }

    /// SplitNodeGroupSelector: every Q has the DQ's type and the same constant scalar parameters.
    /// 16-bit is accepted, 4-bit is not.
    fn check_split(&self, sel: &Selection) -> bool {
        if sel.clip.is_some() || !self.check_qdq_nodes(sel, None, Some(1), false) {
            return false;
        }
        let dt = self.in_type(sel, 0);
        !is_4bit(dt) && sel.qs.iter().all(|&q| same(self.q_type(q), dt) && self.qdq_pair_supported(q, sel.dqs[0], true))
    }

    /// ConvNodeGroupSelector(int8_allowed, allow_16bit=false, allow_4bit_weight=false): x and y of
    /// one type; int8 x needs int8 allowed and an int8 weight; a bias DQ reads INT32.
    fn check_conv(&self, sel: &Selection) -> bool {
        if !self.check_qdq_nodes(sel, sel.clip, None, false) || sel.dqs.len() < 2 {
            return false;
        }
        let (x, w) = (self.in_type(sel, 0), self.in_type(sel, 1));
        same(x, self.out_type(sel))
            && !is_4bit(w)
            && (x != Some(DataType::Int8) || (int8_allowed(self.isa) && w == x))
            && (sel.dqs.len() != 3 || self.in_type(sel, 2) == Some(DataType::Int32))
            && !is_16bit(x)
            && !is_16bit(w)
            && (sel.dqs.len() != 3 || self.conv_bias_matches(sel))
    }

    /// 1.31 (upstream PR #28229, "validate bias scale in QDQ Conv → QLinearConv fusion"), measured on
    /// the wheel: QLinearConv discards the bias DQ's scale and zero point, so the selector wants
    /// constant scales with `|b_scale[c] − x_scale·w_scale[c]| ≤ 1e-6 + 1e-2·|x_scale·w_scale[c]|`
    /// for every channel (either side may be per-tensor) and a bias zero point that is absent or
    /// constant zero. The tolerance lets through a scale a few ulps off, which changes results: the
    /// `bias-scale` hazard reports it.
    fn conv_bias_matches(&self, sel: &Selection) -> bool {
        let scales = |dq: usize| self.nodes[dq].input(1).and_then(|s| self.constant(s, true)).and_then(|c| c.float_values(self.model));
        let (Some(xs), Some(ws), Some(bs)) = (scales(sel.dqs[0]), scales(sel.dqs[1]), scales(sel.dqs[2])) else {
            return false;
        };
        let bias = &self.nodes[sel.dqs[2]];
        let zp_zero = match bias.input(2) {
            None => true,
            Some(z) => self.constant(z, true).and_then(|c| c.int_values(self.model)).is_some_and(|v| v.iter().all(|&x| x == 0)),
        };
        let channels = ws.len().max(bs.len());
        let broadcast = |v: &[f32]| v.len() == 1 || v.len() == channels;
        if !zp_zero || xs.is_empty() || !broadcast(&ws) || !broadcast(&bs) {
            return false;
        }
        (0..channels).all(|c| {
            let expected = xs[0] as f64 * ws[c % ws.len()] as f64;
            (bs[c % bs.len()] as f64 - expected).abs() <= 1e-6 + 1e-2 * expected.abs()
        })
    }

    /// MatMulNodeGroupSelector(int8_allowed, matmulintegertofloat_allowed=true, 8-bit only): two DQs;
    /// with Qs the group must pass CheckQDQNodes; without, nothing else is checked.
    fn check_matmul(&self, sel: &Selection) -> Option<&'static str> {
        if sel.dqs.len() != 2 {
            return None;
        }
        let (a, b) = (self.in_type(sel, 0), self.in_type(sel, 1));
        let types_ok = (a != Some(DataType::Int8) || (int8_allowed(self.isa) && b == a)) && eight_bit_ok(a) && eight_bit_ok(b);
        if !types_ok {
            return None;
        }
        if sel.qs.is_empty() {
            return Some("com.microsoft.MatMulIntegerToFloat");
        }
        (self.check_qdq_nodes(sel, sel.clip, None, false) && same(a, self.out_type(sel))).then_some("QLinearMatMul")
    }

    /// GemmNodeGroupSelector: every existing input DQ'd, Q optional; int8 A needs int8 B; with a
    /// bias, `beta == 1` and an INT32 bias DQ.
    fn check_gemm(&self, sel: &Selection) -> bool {
        if !self.check_qdq_nodes(sel, sel.clip, None, true) || sel.dqs.len() < 2 {
            return false;
        }
        let (a, b) = (self.in_type(sel, 0), self.in_type(sel, 1));
        let types_ok = (a != Some(DataType::Int8) || b == a) && (sel.qs.is_empty() || same(a, self.out_type(sel))) && eight_bit_ok(a) && eight_bit_ok(b);
        // 1.31 (checked on the wheel): with a bias, alpha must also be exactly 1, as QGemm adds the
        // int32 bias before scaling by alpha; the bias scale itself is not checked.
        let gemm = &self.nodes[sel.target];
        let bias_ok = || gemm.attr_f("beta", 1.0) == 1.0 && gemm.attr_f("alpha", 1.0) == 1.0 && self.in_type(sel, 2) == Some(DataType::Int32);
        types_ok && (sel.dqs.len() < 3 || bias_ok()) && self.gemm_params_fit_qgemm(sel)
    }

    /// 1.31 (onnxruntime PR #28714, checked on the wheel): the scale and zero point of A's DQ and
    /// of Y's Q must be scalars or one-element 1-D tensors, and those of B's and the bias's DQ may
    /// also be 1-D with one element per output column N; a shape that is not known fails.
    fn gemm_params_fit_qgemm(&self, sel: &Selection) -> bool {
        let gemm = &self.nodes[sel.target];
        let columns = self.nodes[sel.dqs[1]]
            .input(0)
            .and_then(|b| self.value_dims(b))
            .filter(|d| d.len() == 2)
            .map(|d| if gemm.attr_i("transB", 0) != 0 { d[0] } else { d[1] });
        let fits = |node: usize, per_column: bool| {
            let n = &self.nodes[node];
            [n.input(1), n.input(2)].into_iter().flatten().all(|v| match self.value_dims(v).as_deref() {
                Some([]) | Some([1]) => true,
                Some(&[len]) => per_column && Some(len) == columns,
                _ => false,
            })
        };
        fits(sel.dqs[0], false) && fits(sel.dqs[1], true) && sel.dqs.get(2).is_none_or(|&b| fits(b, true)) && sel.qs.first().is_none_or(|&q| fits(q, false))
    }

    fn check_where(&self, sel: &Selection) -> bool {
        if !self.check_qdq_nodes(sel, sel.clip, Some(2), false) {
            return false;
        }
        let dt = self.in_type(sel, 0);
        same(dt, self.in_type(sel, 1)) && same(dt, self.out_type(sel)) && eight_bit_ok(dt)
    }

    /// DQMatMulNodeGroupSelector (upstream qdq_selectors.cc, in 1.31): no Q; MatMul with one DQ on B,
    /// or Gemm with a DQ on B and optionally one on the bias; the weight DQ has one output edge; the
    /// weight and scale initializers have no other consumer (PR #28326); Gemm must be a plain MatMul
    /// (alpha 1, no transposes, beta 1 with a bias of shape [N]).
    fn check_dq_matmul_nbits(&self, sel: &Selection) -> bool {
        let target = &self.nodes[sel.target];
        let is_gemm = target.op == "Gemm";
        let count_ok = if is_gemm { (1..=2).contains(&sel.dqs.len()) } else { sel.dqs.len() == 1 };
        if sel.clip.is_some() || !sel.qs.is_empty() || !count_ok {
            return false;
        }
        let Some(&weight_dq) = sel.dqs.iter().find(|&&dq| target.input(1) == self.nodes[dq].outputs.first().map(String::as_str)) else {
            return false;
        };
        if !self.check_output_edges(weight_dq, 1) {
            return false;
        }
        if is_gemm {
            if let Some(&bias_dq) = sel.dqs.iter().find(|&&dq| dq != weight_dq)
                && target.input(2) != self.nodes[bias_dq].outputs.first().map(String::as_str)
            {
                return false;
            }
            if !self.gemm_is_plain_matmul(sel.target, weight_dq) {
                return false;
            }
        }
        self.dq_fits_matmul_nbits(weight_dq) && self.weight_not_shared(weight_dq)
    }

    /// `ValidateGemmForDQMatMulNBits`.
    fn gemm_is_plain_matmul(&self, gemm: usize, weight_dq: usize) -> bool {
        let n = &self.nodes[gemm];
        let near_one = |v: f32| (v - 1.0).abs() <= 1e-6;
        if !near_one(n.attr_f("alpha", 1.0)) || n.attr_i("transA", 0) != 0 || n.attr_i("transB", 0) != 0 {
            return false;
        }
        let Some(bias) = n.input(2) else { return true };
        let weight_n = self.nodes[weight_dq].input(0).and_then(|w| self.value_dims(w)).filter(|d| d.len() == 2).map(|d| d[1]);
        near_one(n.attr_f("beta", 1.0)) && weight_n.is_some() && self.value_dims(bias).is_some_and(|d| d.len() == 1 && Some(d[0]) == weight_n)
    }

    fn value_dims(&self, name: &str) -> Option<Vec<i64>> {
        self.constant(name, true).map(|c| c.dims.clone()).or_else(|| self.scope.declared_dims(name))
    }

    /// `ValidateDQForMatMulNBits`: 2/4/8-bit constant weight [K, N], float or float16 scales;
    /// blockwise on axis 0 with a power-of-two block ≥ 16, per-tensor, or per-channel on axis 1.
    fn dq_fits_matmul_nbits(&self, dq: usize) -> bool {
        let n = &self.nodes[dq];
        let nbits = |dt: Option<DataType>| {
            use DataType::*;
            matches!(dt, Some(Int2 | Uint2 | Int4 | Uint4 | Int8 | Uint8))
        };
        if !matches!(n.input(1).and_then(|s| self.dtype(s)), Some(DataType::Float | DataType::Float16)) || !nbits(self.dq_type(dq)) {
            return false;
        }
        let (Some(w), Some(s)) = (n.input(0).and_then(|w| self.constant(w, true)), n.input(1).and_then(|s| self.constant(s, true))) else {
            return false;
        };
        let zp = match n.inputs.get(2) {
            Some(z) => match self.constant(z, true) {
                Some(c) => Some(c),
                None => return false,
            },
            None => None,
        };
        if w.dims.len() != 2 {
            return false;
        }
        let (k, cols) = (w.dims[0], w.dims[1]);
        let block = n.attr_i("block_size", 0);
        if block > 0 {
            let axis_zero = n.attr("axis").and_then(|a| a.i) == Some(0);
            // Ceiling division without `k + block - 1`, which overflows for a hostile block size.
            let blocks = k / block + i64::from(k % block != 0);
            return axis_zero && block >= 16 && block & (block - 1) == 0 && s.dims == [blocks, cols] && zp.is_none_or(|z| z.dims == s.dims);
        }
        match s.dims[..] {
            [] => zp.is_none_or(|z| z.dims.is_empty()),
            [c] if c == cols => n.attr_i("axis", 1) == 1 && zp.is_none_or(|z| z.dims == [cols]),
            _ => false,
        }
    }

    /// The weight and scale initializers feed only this DQ (graph-level consumers, as
    /// `Graph::GetConsumerNodes` counts them).
    fn weight_not_shared(&self, dq: usize) -> bool {
        let n = &self.nodes[dq];
        [n.input(0), n.input(1)].into_iter().flatten().all(|name| {
            let mut consumers: Vec<usize> = self.uses_of(name).iter().filter(|u| u.slot.is_some()).map(|u| u.node).collect();
            consumers.dedup();
            consumers.len() <= 1
        })
    }

    /// Records the fusion and replaces the group by one node that reads the DQs' inputs and writes
    /// the Qs' outputs (or the target's, without Q), as the action's value moves do.
    /// The authored Q or DQ whose parameters node `id` has: itself, or for a node ORT copied
    /// (QDQPropagation's pairs keep the origin of the node they copy), that node while the copy
    /// still reads the same scale and zero point.
    fn param_source(&self, id: usize) -> Option<usize> {
        let n = &self.nodes[id];
        if n.authored {
            return Some(n.origin);
        }
        let is_qdq = |m: &Node| m.op == "QuantizeLinear" || m.op == "DequantizeLinear";
        self.nodes.iter().find(|m| m.authored && m.origin == n.origin && is_qdq(m) && m.inputs.get(1..) == n.inputs.get(1..)).map(|m| m.origin)
    }

    fn fuse(&mut self, rule: &'static str, fused_op: String, sel: Selection) {
        let authored = |w: &Self, ids: &[usize]| ids.iter().filter(|&&i| w.nodes[i].authored).map(|&i| w.nodes[i].origin).collect();
        self.out.fusions.push(Fusion {
            rule,
            fused_op: fused_op.clone(),
            target: self.nodes[sel.target].origin,
            dq_inputs: authored(self, &sel.dqs),
            q_outputs: authored(self, &sel.qs),
            absorbed_clip: sel.clip.map(|c| self.nodes[c].origin),
            input_codes: sel.dqs.iter().map(|&dq| self.dq_type(dq)).collect(),
            output_codes: sel.qs.iter().map(|&q| self.q_type(q)).collect(),
            codes: sel
                .dqs
                .iter()
                .map(|&dq| (dq, self.dq_type(dq)))
                .chain(sel.qs.iter().map(|&q| (q, self.q_type(q))))
                .filter(|&(id, _)| self.nodes[id].authored)
                .map(|(id, t)| (self.nodes[id].origin, t))
                .collect(),
            location: self.location.clone(),
            input_params: sel
                .dqs
                .iter()
                .filter_map(|&dq| {
                    let slot = self.nodes[sel.target].inputs.iter().position(|i| Some(i) == self.nodes[dq].outputs.first())?;
                    Some((slot, self.param_source(dq)?))
                })
                .collect(),
            output_params: sel.qs.iter().filter_map(|&q| self.param_source(q)).collect(),
        });
        let target = self.nodes[sel.target].clone();
        let mut inputs: Vec<String> = Vec::new();
        for i in target.inputs.iter() {
            match self.producer.get(i).filter(|p| sel.dqs.contains(p)) {
                Some(&dq) => inputs.extend(self.nodes[dq].inputs.iter().cloned()),
                None => inputs.push(i.clone()),
            }
        }
        let outputs = if sel.qs.is_empty() { target.outputs.clone() } else { sel.qs.iter().map(|&q| self.nodes[q].outputs[0].clone()).collect() };
        for id in sel.dqs.iter().chain(&sel.qs).chain(sel.clip.iter()).copied().chain([sel.target]) {
            self.remove(id);
        }
        self.push(Node { op: fused_op, domain: "com.microsoft".into(), since: 1, inputs, outputs, attrs: &[], ..target });
    }
}

/// Equal and known: an unknown type never matches.
fn same(a: Option<DataType>, b: Option<DataType>) -> bool {
    a.is_some() && a == b
}

/// The default `allow_16bit=false, allow_4bit=false` of the 8-bit-only selectors.
fn eight_bit_ok(dt: Option<DataType>) -> bool {
    !is_16bit(dt) && !is_4bit(dt)
}

/// Small models written with the protobuf types, for the unit tests of this module and of
/// `hazards`.
#[cfg(test)]
pub(crate) mod testing {
    use qdqc_lang::Model;
    use qdqc_lang::attr::{AttrValue, Attribute};
    use qdqc_lang::onnx::{
        AttributeProto, DataType, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
        attribute_proto::AttributeType, tensor_shape_proto::Dimension, tensor_shape_proto::dimension, type_proto,
    };
    use qdqc_lang::save::{SaveOptions, save};
    use std::path::Path;

    pub fn f32s(name: &str, dims: &[i64], vals: &[f32]) -> TensorProto {
        let raw: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        raw_tensor(name, DataType::Float, dims, raw)
    }

    pub fn scalar(name: &str, v: f32) -> TensorProto {
        f32s(name, &[], &[v])
    }

    /// An integer tensor of any width, packed as ONNX stores it (4-bit: low nibble first).
    // Encoding: each value's low bytes (low nibble for 4-bit) in two's complement, as ONNX stores it.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn ints(name: &str, dt: DataType, dims: &[i64], vals: &[i64]) -> TensorProto {
        use DataType::*;
        let raw: Vec<u8> = match dt {
            Uint8 | Int8 => vals.iter().map(|&v| v as u8).collect(),
            Uint16 | Int16 => vals.iter().flat_map(|&v| (v as u16).to_le_bytes()).collect(),
            Int32 => vals.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect(),
            Int64 => vals.iter().flat_map(|&v| v.to_le_bytes()).collect(),
            Uint4 | Int4 => vals.chunks(2).map(|c| (c[0] as u8 & 0xf) | ((c.get(1).copied().unwrap_or(0) as u8 & 0xf) << 4)).collect(),
            other => panic!("no packing for {other:?}"),
        };
        raw_tensor(name, dt, dims, raw)
    }

    fn raw_tensor(name: &str, dt: DataType, dims: &[i64], raw: Vec<u8>) -> TensorProto {
        TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(dt as i32), raw_data: Some(raw.into()), ..Default::default() }
    }

    pub fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
        NodeProto {
            op_type: Some(op.into()),
            name: Some(outputs.first().copied().unwrap_or(op).into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    /// Adds a plain attribute through qdqc's own conversion (`attr::Attribute::to_proto`).
    fn with_attr(mut n: NodeProto, name: &str, value: AttrValue) -> NodeProto {
        n.attribute.push(Attribute { name: name.into(), value }.to_proto());
        n
    }

    pub fn attr_i(n: NodeProto, name: &str, v: i64) -> NodeProto {
        with_attr(n, name, AttrValue::Int(v))
    }

    pub fn attr_f(n: NodeProto, name: &str, v: f32) -> NodeProto {
        with_attr(n, name, AttrValue::Float(v))
    }

    pub fn attr_s(n: NodeProto, name: &str, v: &str) -> NodeProto {
        with_attr(n, name, AttrValue::Str(v.into()))
    }

    pub fn attr_ints(n: NodeProto, name: &str, v: &[i64]) -> NodeProto {
        with_attr(n, name, AttrValue::Ints(v.to_vec()))
    }

    pub fn attr_graph(mut n: NodeProto, name: &str, g: GraphProto) -> NodeProto {
        n.attribute.push(AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Graph as i32), g: Some(g), ..Default::default() });
        n
    }

    pub fn value(name: &str, dt: DataType, dims: &[i64]) -> ValueInfoProto {
        let dim = dims.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), ..Default::default() }).collect();
        let tensor = type_proto::Tensor { elem_type: Some(dt as i32), shape: Some(TensorShapeProto { dim }) };
        ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(tensor)), ..Default::default() }),
            ..Default::default()
        }
    }

    /// A graph under construction: nodes in order, initializers, float inputs/outputs of shape [4]
    /// unless declared otherwise.
    #[derive(Clone, Default)]
    pub struct G {
        pub g: GraphProto,
        pub opset: i64,
    }

    impl G {
        pub fn new(opset: i64) -> G {
            G { g: GraphProto { name: Some("g".into()), ..Default::default() }, opset }
        }

        pub fn input(mut self, name: &str) -> G {
            self.g.input.push(value(name, DataType::Float, &[4]));
            self
        }

        pub fn typed_input(mut self, name: &str, dt: DataType, dims: &[i64]) -> G {
            self.g.input.push(value(name, dt, dims));
            self
        }

        pub fn output(mut self, name: &str) -> G {
            self.g.output.push(value(name, DataType::Float, &[4]));
            self
        }

        pub fn typed_output(mut self, name: &str, dt: DataType) -> G {
            self.g.output.push(value(name, dt, &[4]));
            self
        }

        pub fn init(mut self, t: TensorProto) -> G {
            self.g.initializer.push(t);
            self
        }

        pub fn node(mut self, n: NodeProto) -> G {
            self.g.node.push(n);
            self
        }

        pub fn op(self, op: &str, inputs: &[&str], outputs: &[&str]) -> G {
            self.node(node(op, inputs, outputs))
        }

        /// `x → Q(s, z) → q_<out> → DQ(s, z) → out`.
        pub fn qdq(self, x: &str, s: &str, z: &str, out: &str) -> G {
            let q = format!("q_{out}");
            self.op("QuantizeLinear", &[x, s, z], &[&q]).op("DequantizeLinear", &[&q, s, z], &[out])
        }

        /// The usual parameters: scale `s` = 0.1, zero points `z` (u8 0), `z8` (i8 0), `z16` (u16 0).
        pub fn params(self) -> G {
            self.init(scalar("s", 0.1)).init(ints("z", DataType::Uint8, &[], &[0])).init(ints("z8", DataType::Int8, &[], &[0])).init(ints(
                "z16",
                DataType::Uint16,
                &[],
                &[0],
            ))
        }

        pub fn proto(self) -> ModelProto {
            ModelProto {
                ir_version: Some(10),
                producer_name: Some("qdqc-rewrites-tests".into()),
                opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(self.opset) }],
                graph: Some(self.g),
                ..Default::default()
            }
        }

        pub fn load(self) -> Loaded {
            load(self.proto())
        }
    }

    /// A model on disk and loaded; the folder lives as long as the model.
    pub struct Loaded {
        pub model: Model,
        _dir: tempfile::TempDir,
    }

    /// Writes `proto` and loads it. The rewrites crate does not depend on prost, so the bytes are
    /// written by `qdqc_lang::save`, whose `source` model (only consulted for external data) is the
    /// smallest valid model, hand-encoded: ir_version 10, an empty graph, opset 21.
    pub fn load(proto: ModelProto) -> Loaded {
        const EMPTY_MODEL: &[u8] = &[0x08, 0x0a, 0x3a, 0x00, 0x42, 0x02, 0x10, 0x15];
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.onnx");
        std::fs::write(&empty, EMPTY_MODEL).unwrap();
        let source = Model::load(&empty).unwrap();
        let path = dir.path().join("model.onnx");
        let mut outputs = qdqc_lang::outputs::Outputs::default();
        save(proto, &source, &path, &SaveOptions::default(), &mut outputs).unwrap();
        outputs.commit().unwrap();
        Loaded { model: load_path(&path), _dir: dir }
    }

    fn load_path(path: &Path) -> Model {
        Model::load(path).unwrap_or_else(|e| panic!("test model does not load: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use DataType::{Int4, Int8, Int32, Uint8};

    fn run(l: &Loaded, isa: Isa) -> Outcome {
        let m = &l.model;
        optimize(m, &m.graph, m.proto.graph.as_ref().unwrap(), isa)
    }

    /// (rule, fused op, target) of every fusion.
    fn fused(l: &Loaded, isa: Isa) -> Vec<(&'static str, String, usize)> {
        run(l, isa).fusions.into_iter().map(|f| (f.rule, f.fused_op, f.target)).collect()
    }

    fn on_all(l: &Loaded) -> Vec<(&'static str, String, usize)> {
        let x86 = fused(l, Isa::X86Avx2);
        assert_eq!(x86, fused(l, Isa::Arm64Neon), "expected the same fusions on every ISA");
        x86
    }

    fn one(rule: &'static str, op: &str, target: usize) -> Vec<(&'static str, String, usize)> {
        vec![(rule, op.to_string(), target)]
    }

    /// x → Q/DQ(s, zx) → op → Q/DQ(so, zo) → y; the op is node 2.
    fn unary(opset: i64, op: NodeProto, zx: &str, so: &str, zo: &str) -> G {
        unary_scaled(opset, op, "s", zx, so, zo)
    }

    fn unary_scaled(opset: i64, op: NodeProto, sx: &str, zx: &str, so: &str, zo: &str) -> G {
        let g = G::new(opset).params().init(scalar("s2", 0.2)).init(scalar("sneg", -0.1)).input("x").output("y");
        g.qdq("x", sx, zx, "dx").node(op).qdq("c", so, zo, "y")
    }

    fn unary_op(op: &str) -> NodeProto {
        node(op, &["dx"], &["c"])
    }

    #[test]
    fn drop_rule_moves_data_on_codes_when_parameters_match() {
        let l = unary(21, unary_op("Transpose"), "z", "s", "z").load();
        assert_eq!(on_all(&l), one("drop", "Transpose (on codes)", 2));
        let f = &run(&l, Isa::X86Avx2).fusions[0];
        assert_eq!((f.dq_inputs.clone(), f.q_outputs.clone()), (vec![1], vec![3]));
        // 16-bit is allowed by `drop`, and the sign of the scale is not checked.
        assert_eq!(on_all(&unary(21, unary_op("Transpose"), "z16", "s", "z16").load()).len(), 1);
        // `drop` wants exactly one DQ whatever the other inputs are.
        let reshape = node("Reshape", &["dx", "shape"], &["c"]);
        let g = unary(21, reshape, "z", "s", "z").init(ints("shape", DataType::Int64, &[1], &[4]));
        assert_eq!(on_all(&g.load()), one("drop", "Reshape (on codes)", 2));
    }

    #[test]
    fn drop_rule_needs_identical_constant_scalar_parameters() {
        assert!(on_all(&unary(21, unary_op("Transpose"), "z", "s2", "z").load()).is_empty(), "different scale");
        let other_zp = unary(21, unary_op("Transpose"), "z", "s", "zb").init(ints("zb", Uint8, &[], &[1]));
        assert!(on_all(&other_zp.load()).is_empty(), "different zero point");
        // Equal values in different initializers are fine: they are compared by value.
        let copy = unary(21, unary_op("Transpose"), "z", "s_copy", "z").init(scalar("s_copy", 0.1));
        assert_eq!(on_all(&copy.load()).len(), 1);
        // A zero point given as a graph input is not constant.
        let dynamic = unary(21, unary_op("Transpose"), "z", "s", "zin").typed_input("zin", Uint8, &[]);
        assert!(on_all(&dynamic.load()).is_empty());
        // A Q without zero point has no IsQDQPairSupported.
        let g = G::new(21).params().input("x").output("y").qdq("x", "s", "z", "dx").node(unary_op("Transpose"));
        let g = g.op("QuantizeLinear", &["c", "s"], &["qc"]).op("DequantizeLinear", &["qc", "s"], &["y"]);
        assert!(on_all(&g.load()).is_empty());
    }

    #[test]
    fn drop_rule_rejects_4_bit_and_graph_outputs() {
        let int4 = unary(21, unary_op("Transpose"), "z4", "s", "z4").init(ints("z4", Int4, &[], &[0]));
        assert!(on_all(&int4.load()).is_empty());
        let exposed = unary(21, unary_op("Transpose"), "z", "s", "z").output("c");
        assert!(on_all(&exposed.load()).is_empty(), "the target output is a graph output");
        // A DQ that is also a graph output is copied for the target by EnsureUniqueDQ, so the
        // group still forms, with the copy.
        let exposed_dq = unary(21, unary_op("Transpose"), "z", "s", "z").output("dx").load();
        assert_eq!(on_all(&exposed_dq).len(), 1);
        assert_eq!(run(&exposed_dq, Isa::X86Sse2).fusions[0].dq_inputs, vec![1]);
    }

    #[test]
    fn resize_and_depth_to_space_are_dropped_in_8_bit_only() {
        let resize = |z: &str| {
            let n = node("Resize", &["dx", "", "scales"], &["c"]);
            unary(19, n, z, "s", z).init(f32s("scales", &[1], &[2.0]))
        };
        assert_eq!(on_all(&resize("z").load()), one("drop_no_int16_support", "Resize (on codes)", 2));
        assert!(on_all(&resize("z16").load()).is_empty());
        // 1.31 drops a Resize only in nearest mode.
        let linear = attr_s(node("Resize", &["dx", "", "scales"], &["c"]), "mode", "linear");
        assert!(on_all(&unary(19, linear, "z", "s", "z").init(f32s("scales", &[1], &[2.0])).load()).is_empty());
        let d2s = attr_i(unary_op("DepthToSpace"), "blocksize", 2);
        assert_eq!(on_all(&unary(13, d2s, "z", "s", "z").load()).len(), 1);
    }

    #[test]
    fn maxpool_is_dropped_for_opsets_12_and_22_with_positive_scale() {
        let mp = || attr_ints(unary_op("MaxPool"), "kernel_shape", &[2]);
        for opset in [12, 21, 22] {
            assert_eq!(
                on_all(&unary(opset, mp(), "z", "s", "z").load()),
                one("drop_no_int16_support_and_positive_scale", "MaxPool (on codes)", 2),
                "opset {opset}"
            );
        }
        assert!(on_all(&unary(11, mp(), "z", "s", "z").load()).is_empty(), "MaxPool-11");
        assert!(on_all(&unary_scaled(21, mp(), "sneg", "z", "sneg", "z").load()).is_empty(), "negative scale");
        assert!(on_all(&unary(21, mp(), "z16", "s", "z16").load()).is_empty(), "16-bit");
        let rmax = attr_i(unary_op("ReduceMax"), "keepdims", 1);
        assert_eq!(on_all(&unary(18, rmax, "z", "s", "z").load()).len(), 1);
    }

    #[test]
    fn argmax_drops_its_dq_only_with_an_explicit_zero_point() {
        let argmax = |sx: &str, with_zp: bool| {
            let dq_in: &[&str] = if with_zp { &["q_x", sx, "z"] } else { &["q_x", sx] };
            let g = G::new(13).params().init(scalar("sneg", -0.1)).input("x").typed_output("y", DataType::Int64);
            g.op("QuantizeLinear", &["x", sx, "z"], &["q_x"]).op("DequantizeLinear", dq_in, &["dx"]).node(attr_i(node("ArgMax", &["dx"], &["y"]), "axis", 0))
        };
        assert_eq!(on_all(&argmax("s", true).load()), one("dropDQ", "ArgMax (on codes)", 2));
        assert!(on_all(&argmax("s", false).load()).is_empty());
        // The sign of the scale is not checked, although a negative scale reverses the order.
        assert_eq!(on_all(&argmax("sneg", true).load()).len(), 1);
    }

    #[test]
    fn unary_ops_become_qlinear_kernels_in_8_bit_only() {
        for (op, rule) in [("Sigmoid", "1DQ"), ("AveragePool", "1DQ"), ("GlobalAveragePool", "1DQ"), ("LeakyRelu", "1DQ_CPU"), ("Softmax", "1DQ_CPU")] {
            let n = if op == "AveragePool" { attr_ints(unary_op(op), "kernel_shape", &[2]) } else { unary_op(op) };
            assert_eq!(on_all(&unary(13, n, "z", "s", "z").load()), one(rule, &format!("com.microsoft.QLinear{op}"), 2), "{op}");
        }
        assert!(on_all(&unary(21, unary_op("Sigmoid"), "z16", "s", "z16").load()).is_empty(), "16-bit");
        // Input and output codes must have the same type; scales may differ.
        assert_eq!(on_all(&unary(21, unary_op("Sigmoid"), "z", "s2", "z").load()).len(), 1);
        assert!(on_all(&unary(21, unary_op("Sigmoid"), "z", "s", "z16").load()).is_empty());
        // No CPU rule for Pad, Sub, Relu, … : they keep running in float.
        let pad = node("Pad", &["dx", "pads"], &["c"]);
        assert!(on_all(&unary(21, pad, "z", "s", "z").init(ints("pads", DataType::Int64, &[2], &[1, 1])).load()).is_empty());
    }

    /// a, b → Q/DQ → op(da, db) → Q/DQ → y; the op is node 4.
    fn binary(op: &str, za: &str, zb: &str, zo: &str) -> G {
        let g = G::new(21).params().input("a").input("b").output("y").qdq("a", "s", za, "da").qdq("b", "s", zb, "db");
        g.op(op, &["da", "db"], &["c"]).qdq("c", "s", zo, "y")
    }

    #[test]
    fn add_and_mul_need_two_dq_inputs_of_the_output_type() {
        let l = binary("Add", "z", "z", "z").load();
        assert_eq!(on_all(&l), one("2DQ", "com.microsoft.QLinearAdd", 4));
        let f = &run(&l, Isa::Arm64Neon).fusions[0];
        assert_eq!((f.dq_inputs.clone(), f.q_outputs.clone()), (vec![1, 3], vec![5]));
        assert_eq!(on_all(&binary("Mul", "z", "z", "z").load()), one("2DQ", "com.microsoft.QLinearMul", 4));
        assert!(on_all(&binary("Sub", "z", "z", "z").load()).is_empty(), "no CPU rule for Sub");
        assert!(on_all(&binary("Add", "z16", "z16", "z16").load()).is_empty(), "16-bit");
        assert!(on_all(&binary("Add", "z", "z16", "z").load()).is_empty(), "mixed types");
        // The same DQ on both inputs: EnsureUniqueDQ gives each input its own copy.
        let same = G::new(21).params().input("a").output("y").qdq("a", "s", "z", "da").op("Add", &["da", "da"], &["c"]).qdq("c", "s", "z", "y");
        assert_eq!(on_all(&same.load()).len(), 1);
    }

    #[test]
    fn a_float_input_or_an_exposed_output_blocks_a_group() {
        let float_b = G::new(21).params().init(f32s("bf", &[4], &[1.0; 4])).input("a").output("y").qdq("a", "s", "z", "da");
        assert!(on_all(&float_b.op("Add", &["da", "bf"], &["c"]).qdq("c", "s", "z", "y").load()).is_empty());
        assert!(on_all(&binary("Add", "z", "z", "z").output("c").load()).is_empty(), "target output is a graph output");
        let mixed = binary("Add", "z", "z", "z").output("r").op("Relu", &["c"], &["r"]);
        assert!(on_all(&mixed.load()).is_empty(), "target output feeds a Q and a non-Q");
    }

    #[test]
    fn concat_where_and_split_have_their_own_rules() {
        let concat = G::new(21).params().input("a").input("b").output("y").qdq("a", "s", "z", "da").qdq("b", "s2", "z", "db");
        let concat = concat.init(scalar("s2", 0.2)).node(attr_i(node("Concat", &["da", "db"], &["c"]), "axis", 0)).qdq("c", "s", "z", "y");
        assert_eq!(on_all(&concat.load()), one("*DQ", "com.microsoft.QLinearConcat", 4));
        let g = G::new(21).params().typed_input("cond", DataType::Bool, &[4]).input("a").input("b").output("y");
        let wh = g.clone().qdq("a", "s", "z", "da").qdq("b", "s", "z", "db").op("Where", &["cond", "da", "db"], &["c"]).qdq("c", "s", "z", "y");
        assert_eq!(on_all(&wh.load()), one("Where", "com.microsoft.QLinearWhere", 4));
        // WhereDummyDq gives a scalar float branch a DQ, so the Where still fuses.
        let scalar_branch = g.init(scalar("k", 0.5)).qdq("a", "s", "z", "da").op("Where", &["cond", "da", "k"], &["c"]).qdq("c", "s", "z", "y");
        assert_eq!(on_all(&scalar_branch.load()), one("Where", "com.microsoft.QLinearWhere", 2));
        let split = |s2: &str| {
            let g = G::new(18).params().init(scalar("s2", 0.2)).input("x").output("y1").output("y2").qdq("x", "s", "z", "dx");
            let n = attr_i(attr_i(node("Split", &["dx"], &["c1", "c2"]), "axis", 0), "num_outputs", 2);
            g.node(n).qdq("c1", "s", "z", "y1").qdq("c2", s2, "z", "y2")
        };
        assert_eq!(on_all(&split("s").load()), one("dropSplitQDQ", "Split (on codes)", 2));
        assert!(on_all(&split("s2").load()).is_empty(), "every output must keep the input's parameters");
    }

    /// x → Q/DQ(zx) → Conv(DQ(w int8), DQ(b int32, sb, zb)) → Q/DQ(zx) → y; Conv is node 4.
    fn conv(zx: &str, sb: f32, zb: i64) -> G {
        let w: Vec<i64> = (0..2 * 2 * 3).map(|i| (i * 37 % 200) - 100).collect();
        G::new(21)
            .params()
            .init(ints("w", Int8, &[2, 2, 3], &w))
            .init(scalar("sw", 0.01))
            .init(ints("b", Int32, &[2], &[30, -20]))
            .init(scalar("sb", sb))
            .init(ints("zb", Int32, &[], &[zb]))
            .typed_input("x", DataType::Float, &[1, 2, 5])
            .output("y")
            .qdq("x", "s", zx, "dx")
            .op("DequantizeLinear", &["w", "sw", "z8"], &["dw"])
            .op("DequantizeLinear", &["b", "sb", "zb"], &["db"])
            .op("Conv", &["dx", "dw", "db"], &["c"])
            .qdq("c", "s", zx, "y")
    }

    #[test]
    fn conv_fuses_with_an_int32_bias_at_the_product_scale() {
        let l = conv("z", 0.1 * 0.01, 0).load();
        assert_eq!(on_all(&l), one("Conv", "QLinearConv", 4));
        assert_eq!(run(&l, Isa::X86Avx2).fusions[0].dq_inputs, vec![1, 2, 3]);
        // 1.31 compares the bias scale with x_scale·w_scale (1% tolerance) and wants bias zp 0.
        assert!(on_all(&conv("z", 2.0 * 0.1 * 0.01, 0).load()).is_empty(), "bias scale off by 2×");
        assert!(on_all(&conv("z", 0.1 * 0.01, 1).load()).is_empty(), "bias zero point 1");
        assert_eq!(on_all(&conv("z", 0.1 * 0.01 * 1.005, 0).load()).len(), 1, "within the tolerance");
        // A bias DQ that does not read INT32 is refused, and so is a 4-bit weight.
        let mut int8_bias = conv("z", 0.001, 0).init(ints("b8", Int8, &[2], &[3, -2])).proto();
        int8_bias.graph.as_mut().unwrap().node[3].input = vec!["b8".into(), "sb".into(), "z8".into()];
        assert!(on_all(&load(int8_bias)).is_empty());
        let mut int4_weight = conv("z", 0.001, 0).init(ints("w4", Int4, &[2, 2, 3], &[1; 12])).init(ints("z4", Int4, &[], &[0])).proto();
        int4_weight.graph.as_mut().unwrap().node[2].input = vec!["w4".into(), "sw".into(), "z4".into()];
        assert!(on_all(&load(int4_weight)).is_empty());
    }

    #[test]
    fn int8_activations_fuse_on_x86_only_after_their_pairs_become_uint8() {
        let l = conv("z8", 0.001, 0).load();
        assert_eq!(on_all(&l).len(), 1, "QDQS8ToU8 turns both int8 pairs to uint8 on x86");
        let codes = |isa| run(&l, isa).fusions.into_iter().map(|f| (f.input_codes, f.output_codes)).next().unwrap();
        assert_eq!(codes(Isa::X86Avx2), (vec![Some(Uint8), Some(Int8), Some(Int32)], vec![Some(Uint8)]));
        assert_eq!(codes(Isa::Arm64Neon), (vec![Some(Int8), Some(Int8), Some(Int32)], vec![Some(Int8)]));
        // A second consumer of the activation DQ: EnsureUniqueDQ copies the DQ, the Q then has two
        // DQ consumers, so QDQS8ToU8 leaves it int8 and the x86 Conv selector refuses int8 x.
        let shared = conv("z8", 0.001, 0).output("r").op("Relu", &["dx"], &["r"]).load();
        assert!(fused(&shared, Isa::X86Avx2).is_empty());
        assert!(fused(&shared, Isa::X86Avx512Vnni).is_empty());
        assert_eq!(fused(&shared, Isa::Arm64Neon), one("Conv", "QLinearConv", 4));
    }

    /// a → Q/DQ → MatMul(DQ(w)) → [Q/DQ] → y; MatMul is node 3.
    fn matmul(za: &str, with_q: bool) -> G {
        let g = G::new(21).params().init(ints("w", Int8, &[4, 4], &[1; 16])).init(scalar("sw", 0.01)).input("a").output("y");
        let g = g.qdq("a", "s", za, "da").op("DequantizeLinear", &["w", "sw", "z8"], &["dw"]).op("MatMul", &["da", "dw"], &["c"]);
        if with_q { g.qdq("c", "s", za, "y") } else { g.op("Sigmoid", &["c"], &["y"]) }
    }

    #[test]
    fn matmul_fuses_to_qlinear_with_q_and_to_integer_to_float_without() {
        assert_eq!(on_all(&matmul("z", true).load()), one("MatMul", "QLinearMatMul", 3));
        assert_eq!(on_all(&matmul("z", false).load()), one("MatMul", "com.microsoft.MatMulIntegerToFloat", 3));
        // A Relu after the MatMul that is not followed by one redundant Q blocks the selection.
        let relu = matmul("z", false).proto();
        let mut relu = relu;
        let g = relu.graph.as_mut().unwrap();
        g.node[4] = node("Relu", &["c"], &["r"]);
        g.node.push(node("Sigmoid", &["r"], &["y"]));
        assert!(on_all(&load(relu)).is_empty());
        // int8 A fuses on x86 only once QDQS8ToU8 made it uint8, which a second consumer of the
        // activation prevents.
        assert_eq!(on_all(&matmul("z8", false).load()).len(), 1);
        let shared = matmul("z8", false).output("r").op("Relu", &["da"], &["r"]).load();
        assert!(fused(&shared, Isa::X86Avx2).is_empty());
        assert_eq!(fused(&shared, Isa::Arm64Neon).len(), 1);
    }

    /// a → Q/DQ → Gemm(DQ(w), [DQ(b)]) → [Q/DQ] → y; Gemm is node 3 or 4.
    fn gemm(bias: bool, with_q: bool, alpha: f32, beta: f32) -> G {
        let g = G::new(21).params().init(ints("w", Int8, &[4, 4], &[1; 16])).init(scalar("sw", 0.01)).input("a").output("y");
        let g = g.init(ints("b", Int32, &[4], &[1, 2, 3, 4])).init(scalar("sb", 0.001)).init(ints("zb", Int32, &[], &[0]));
        let mut g = g.qdq("a", "s", "z", "da").op("DequantizeLinear", &["w", "sw", "z8"], &["dw"]);
        let mut inputs = vec!["da", "dw"];
        if bias {
            g = g.op("DequantizeLinear", &["b", "sb", "zb"], &["db"]);
            inputs.push("db");
        }
        let g = g.node(attr_f(attr_f(node("Gemm", &inputs, &["c"]), "alpha", alpha), "beta", beta));
        if with_q { g.qdq("c", "s", "z", "y") } else { g.op("Sigmoid", &["c"], &["y"]) }
    }

    #[test]
    fn gemm_fuses_to_qgemm_when_its_bias_needs_no_scaling() {
        assert_eq!(on_all(&gemm(true, true, 1.0, 1.0).load()), one("Gemm", "com.microsoft.QGemm", 4));
        assert_eq!(on_all(&gemm(true, false, 1.0, 1.0).load()), one("Gemm", "com.microsoft.QGemm", 4), "float output");
        assert!(on_all(&gemm(true, true, 1.0, 0.5).load()).is_empty(), "beta 0.5");
        assert!(on_all(&gemm(true, true, 2.0, 1.0).load()).is_empty(), "alpha 2 with a bias (1.31)");
        assert_eq!(on_all(&gemm(false, true, 2.0, 1.0).load()).len(), 1, "alpha 2 without bias");
    }

    #[test]
    fn gemm_fuses_only_with_per_tensor_activations_and_per_column_weights() {
        // a(f32[2, 4]) → Q/DQ(a params) → Gemm(DQ(w [4, 3], w params, axis)) → Q/DQ(y params) → y.
        let gemm = |(sa, za): (&str, &str), (sw, zw, axis): (&str, &str, i64), (sy, zy): (&str, &str)| {
            G::new(21)
                .params()
                .init(ints("w", Int8, &[4, 3], &[1; 12]))
                .init(f32s("s1", &[1], &[0.1]))
                .init(ints("u1", Uint8, &[1], &[0]))
                .init(f32s("s3", &[3], &[0.1, 0.2, 0.3]))
                .init(ints("i3", Int8, &[3], &[0; 3]))
                .init(ints("u3", Uint8, &[3], &[0; 3]))
                .init(f32s("s4", &[4], &[0.1; 4]))
                .init(ints("i4", Int8, &[4], &[0; 4]))
                .init(ints("u4", Uint8, &[4], &[0; 4]))
                .typed_input("a", DataType::Float, &[2, 4])
                .output("y")
                .qdq("a", sa, za, "da")
                .node(attr_i(node("DequantizeLinear", &["w", sw, zw], &["dw"]), "axis", axis))
                .op("Gemm", &["da", "dw"], &["c"])
                .qdq("c", sy, zy, "y")
                .load()
        };
        assert_eq!(on_all(&gemm(("s", "z"), ("s", "z8", 1), ("s", "z"))).len(), 1);
        assert_eq!(on_all(&gemm(("s1", "u1"), ("s3", "i3", 1), ("s1", "u1"))).len(), 1, "one element, or N for B");
        assert!(on_all(&gemm(("s4", "u4"), ("s", "z8", 1), ("s", "z"))).is_empty(), "per-channel A");
        assert!(on_all(&gemm(("s", "z"), ("s", "z8", 1), ("s3", "u3"))).is_empty(), "per-channel Y");
        assert!(on_all(&gemm(("s", "z"), ("s4", "i4", 0), ("s", "z"))).is_empty(), "B per row (K), not per column");
    }

    /// x(f32[2, 32]) → MatMul(DQ(w int4 [32, 8] blocked by `block` on axis 0)) → y.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Small test sizes.
    fn nbits(block: i64, shared: bool) -> G {
        let blocks = 32 / block;
        let g = G::new(21).typed_input("x", DataType::Float, &[2, 32]).output("y");
        let g = g.init(ints("w", Int4, &[32, 8], &[1; 256])).init(f32s("sw", &[blocks, 8], &vec![0.01; (blocks * 8) as usize]));
        let dq = attr_i(attr_i(node("DequantizeLinear", &["w", "sw"], &["dw"]), "axis", 0), "block_size", block);
        let g = g.node(dq).op("MatMul", &["x", "dw"], &["y"]);
        if shared { g.output("y2").op("MatMul", &["x", "dw"], &["y2"]) } else { g }
    }

    #[test]
    fn dq_matmul_becomes_matmul_nbits_unless_the_weight_is_shared() {
        assert_eq!(on_all(&nbits(16, false).load()), one("DQMatMulToMatMulNBits", "com.microsoft.MatMulNBits", 1));
        assert!(on_all(&nbits(8, false).load()).is_empty(), "block size below 16");
        // Two MatMuls: EnsureUniqueDQ copies the DQ and the weight initializer then has two
        // consumers, which 1.31 refuses (upstream PR #28326).
        assert!(on_all(&nbits(16, true).load()).is_empty());
    }

    #[test]
    fn a_redundant_relu_or_clip_before_q_is_absorbed() {
        // Relu → Q without zero point: ReluQuantRewrite needs an explicit zero point, but the
        // selector's IsClipMadeRedundantByQ takes the implicit uint8 0.
        let g = G::new(21).params().input("x").output("y").qdq("x", "s", "z", "dx").op("Sigmoid", &["dx"], &["c"]).op("Relu", &["c"], &["r"]);
        let l = g.op("QuantizeLinear", &["r", "s"], &["qr"]).op("DequantizeLinear", &["qr", "s"], &["y"]).load();
        let f = &run(&l, Isa::X86Sse2).fusions;
        assert_eq!((f.len(), f[0].absorbed_clip), (1, Some(3)));
        // A Clip with no max: rint(FLT_MAX / s) does not fit an int32; x86 converts it to INT_MIN,
        // so the Clip is not redundant there, while ARM saturates.
        let g = G::new(21).params().init(scalar("lo", 0.04)).input("x").output("y").qdq("x", "s", "z", "dx").op("Sigmoid", &["dx"], &["c"]);
        let l = g.op("Clip", &["c", "lo"], &["r"]).qdq("r", "s", "z", "y").load();
        assert!(fused(&l, Isa::X86Avx512Vnni).is_empty());
        assert_eq!(fused(&l, Isa::Arm64Neon).len(), 1);
    }

    #[test]
    fn ort_quantizes_a_float_weight_and_bias_itself_then_fuses() {
        let w: Vec<f32> = (0..12).map(|i| i as f32 * 0.1 - 0.6).collect();
        let g = G::new(21).params().init(f32s("wf", &[2, 2, 3], &w)).init(f32s("bf", &[2], &[0.3, -0.2])).typed_input("x", DataType::Float, &[1, 2, 5]);
        let l = g.output("y").qdq("x", "s", "z", "dx").op("Conv", &["dx", "wf", "bf"], &["c"]).qdq("c", "s", "z", "y").load();
        let out = run(&l, Isa::X86Avx2);
        assert_eq!(out.fusions.iter().map(|f| (f.rule, f.target, f.dq_inputs.clone())).collect::<Vec<_>>(), vec![("Conv", 2, vec![1])]);
        let wbq: Vec<&Rewrite> = out.rewrites.iter().filter(|r| r.transformer == "WeightBiasQuantization").collect();
        assert_eq!(wbq.len(), 1);
        assert!(!wbq[0].exact && wbq[0].detail.contains("'wf' quantized to int8") && wbq[0].detail.contains("'bf' rounded"), "{}", wbq[0].detail);
    }

    #[test]
    fn propagated_and_merged_qdq_let_neighbours_fuse() {
        // QDQPropagation copies the DQ across the Transpose, so the Sigmoid gets a DQ input.
        let g = G::new(21).params().input("x").output("y").qdq("x", "s", "z", "dx");
        let l = g.node(attr_ints(node("Transpose", &["dx"], &["t"]), "perm", &[0])).op("Sigmoid", &["t"], &["c"]).qdq("c", "s", "z", "y").load();
        assert_eq!(on_all(&l), vec![("drop", "Transpose (on codes)".into(), 2), ("1DQ", "com.microsoft.QLinearSigmoid".into(), 3)]);
        // Two identical Qs of one value are merged by CSE into one Q with two DQs.
        let g = G::new(21).params().input("x").output("y1").output("y2").qdq("x", "s", "z", "dx").op("Sigmoid", &["dx"], &["c"]);
        let g = g.op("QuantizeLinear", &["c", "s", "z"], &["q1"]).op("QuantizeLinear", &["c", "s", "z"], &["q2"]);
        let l = g.op("DequantizeLinear", &["q1", "s", "z"], &["y1"]).op("DequantizeLinear", &["q2", "s", "z"], &["y2"]).load();
        assert_eq!(on_all(&l), one("1DQ", "com.microsoft.QLinearSigmoid", 2));
        // ORT's topological order visits the branch of the last leaf (y2) first, so q2 (node 4)
        // represents the pair and is the Q the group absorbs.
        assert_eq!(run(&l, Isa::X86Avx2).fusions[0].q_outputs, vec![4]);
    }

    /// (transformer, exact) of every rewrite.
    fn rewritten(l: &Loaded) -> Vec<(&'static str, bool)> {
        run(l, Isa::X86Avx2).rewrites.into_iter().map(|r| (r.transformer, r.exact)).collect()
    }

    /// x → Q/DQ → Sigmoid → act → Q/DQ(sq, zq) → y; the activation is node 3.
    fn activation_before_q(act: NodeProto, sq: &str, zq: &str) -> G {
        let g = G::new(21).params().init(scalar("sneg", -0.1)).init(ints("zb", Uint8, &[], &[3])).init(ints("z4", Int4, &[], &[3]));
        g.input("x").output("y").qdq("x", "s", "z", "dx").op("Sigmoid", &["dx"], &["c"]).node(act).qdq("r", sq, zq, "y")
    }

    #[test]
    fn relu_before_q_goes_when_the_zero_point_is_the_lowest_code() {
        let relu = || node("Relu", &["c"], &["r"]);
        assert_eq!(rewritten(&activation_before_q(relu(), "s", "z").load()), vec![("ReluQuantRewrite", true)]);
        assert!(rewritten(&activation_before_q(relu(), "s", "zb").load()).is_empty(), "zero point 3 keeps the Relu");
        // The scale's sign is not checked: with s < 0 the Relu changed the result.
        assert_eq!(rewritten(&activation_before_q(relu(), "sneg", "z").load()), vec![("ReluQuantRewrite", false)]);
        // Zero point types other than 8/16-bit are not checked at all.
        let l = activation_before_q(relu(), "s", "z4").load();
        let r = &run(&l, Isa::X86Avx2).rewrites;
        assert_eq!((r.len(), r[0].exact, r[0].nodes.clone()), (1, false, vec![3, 4]));
        assert!(r[0].detail.contains("quantize to [3, 7], not [-8, 7]"), "{}", r[0].detail);
    }

    #[test]
    fn clip_before_q_goes_when_it_covers_the_q_range_within_flt_epsilon() {
        let clip = |lo: f32, hi: f32| (node("Clip", &["c", "lo", "hi"], &["r"]), scalar("lo", lo), scalar("hi", hi));
        let with = |(n, lo, hi): (NodeProto, TensorProto, TensorProto), z: &str| activation_before_q(n, "s", z).init(lo).init(hi).load();
        // Q covers [0, 25.5]: Clip(0, 25.5) is redundant.
        assert_eq!(rewritten(&with(clip(0.0, 25.5), "z")), vec![("ClipQuantRewrite", true)]);
        assert!(rewritten(&with(clip(0.0, 6.0), "z")).is_empty(), "Clip(0, 6) clips inside the Q range");
        // An int4 zero point makes ORT throw while optimizing.
        let r = run(&with(clip(0.0, 1.0), "z4"), Isa::X86Avx2).rewrites;
        assert!(r.len() == 1 && !r[0].exact && r[0].detail.contains("aborts session creation"), "{r:?}");
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // The witness holds an f32's bits.
    fn inexact_relu_and_clip_removals_carry_an_input_that_changes() {
        // s < 0: Relu(x) then Q gives the zero point for x < 0; Q alone gives the top code.
        let l = activation_before_q(node("Relu", &["c"], &["r"]), "sneg", "z").load();
        let r = &run(&l, Isa::X86Avx2).rewrites[0];
        let w = r.witness.as_ref().unwrap_or_else(|| panic!("{r:?}"));
        assert_eq!((f32::from_bits(w.inputs[0].1 as u32), w.unfused, w.fused), (-25.5, 0, 255), "{w}");
        // int8 activations, zero point −128, scale 1e-9: the Q covers [0, 2.55e-7]; Clip(0, 2e-7)
        // is within FLT_EPSILON of it, so ORT removes it, and 2.55e-7 no longer clips.
        let clip = node("Clip", &["c", "lo", "hi"], &["r"]);
        let l = activation_before_q(clip, "st", "zm").init(scalar("st", 1e-9)).init(ints("zm", DataType::Int8, &[], &[-128]));
        let l = l.init(scalar("lo", 0.0)).init(scalar("hi", 2e-7)).load();
        let r = &run(&l, Isa::X86Avx512Vnni).rewrites[0];
        assert_eq!((r.transformer, r.exact), ("ClipQuantRewrite", false), "{r:?}");
        let w = r.witness.as_ref().unwrap_or_else(|| panic!("{r:?}"));
        assert_eq!((w.unfused, w.fused), (72, 127), "{w}");
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // The witness holds an f32's bits.
    fn double_qdq_pairs_keep_or_recompute_parameters() {
        let chain = |s2: &str| G::new(21).params().init(scalar("s2", 0.2)).input("x").output("y").qdq("x", "s", "z", "d1").qdq("d1", s2, "z", "y");
        assert_eq!(rewritten(&chain("s").load()), vec![("DoubleQDQPairsRemover", true)]);
        // (0.1, 0) then (0.2, 0) on uint8: the intersection [0, 25.5] gets scale 0.1, zero point 0.
        let r = run(&chain("s2").load(), Isa::X86Avx2).rewrites;
        assert_eq!((r.len(), r[0].exact, r[0].nodes.clone()), (1, false, vec![0, 1, 2, 3]));
        // (0.1, 0) then (0.2, 0): x = 0.1 keeps 0.2·rne(0.5) = 0 through both pairs, 0.1 merged.
        let w = r[0].witness.as_ref().unwrap_or_else(|| panic!("{:?}", r[0]));
        assert_eq!((f32::from_bits(w.inputs[0].1 as u32), w.unfused, w.fused), (0.1, 0, 1), "{w}");
        assert!(r[0].detail.contains(&format!("scale {}", hex(25.5 / 255.0))) && r[0].detail.contains("zero point 0 "), "{}", r[0].detail);
    }

    #[test]
    fn dq_q_pairs_with_equal_parameters_are_removed_last() {
        let g = G::new(21).params().init(scalar("s2", 0.2)).typed_input("xq", Uint8, &[4]).output("y");
        let pair = |s_q: &str| {
            g.clone().op("DequantizeLinear", &["xq", "s", "z"], &["d"]).op("QuantizeLinear", &["d", s_q, "z"], &["q"]).op(
                "DequantizeLinear",
                &["q", "s2", "z"],
                &["y"],
            )
        };
        assert_eq!(rewritten(&pair("s").load()), vec![("QDQFinalCleanupTransformer", true)]);
        assert!(rewritten(&pair("s2").load()).is_empty());
    }

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
