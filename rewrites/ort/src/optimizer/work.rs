//! The optimizer's working copy of one graph (`Work`, `Node`): ORT's Node/Graph API on a light,
//! mutable graph, and the Q/DQ predicates of optimizer/qdq_transformer/qdq_util.cc on it.

use super::{Outcome, Rewrite};
use crate::Isa;
use crate::profile::Convert;
use qdqc_exact::Verdict;
use qdqc_lang::onnx::{AttributeProto, DataType, GraphProto};
use qdqc_lang::scope::{Const, Scope};
use qdqc_lang::tensor;
use qdqc_lang::{Model, ir};
use std::collections::HashMap;

/// A node as the optimizer sees it at some step of its pipeline.
#[derive(Clone, Debug)]
pub(super) struct Node<'m> {
    pub(super) op: String,
    /// "" for the ONNX domain (ORT normalizes "ai.onnx").
    pub(super) domain: String,
    /// The operator's SinceVersion for the model's opset import.
    pub(super) since: i64,
    /// The authored node this one is, or was copied from, or serves.
    pub(super) origin: usize,
    /// False for nodes ORT inserts (by WeightBiasQuantization, QDQPropagation, WhereDummyDq);
    /// EnsureUniqueDQ's copies of an authored DQ count as authored.
    pub(super) authored: bool,
    pub(super) attrs: &'m [AttributeProto],
    pub(super) inputs: Vec<String>,
    pub(super) outputs: Vec<String>,
    /// Outer values its subgraphs read: ORT gives them edges too ("implicit inputs").
    pub(super) implicit: Vec<String>,
    pub(super) alive: bool,
}

impl Node<'_> {
    pub(super) fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.attrs.iter().find(|a| a.name.as_deref() == Some(name))
    }

    /// An int attribute, or ORT's schema default (Graph::Resolve fills defaults in).
    pub(super) fn attr_i(&self, name: &str, default: i64) -> i64 {
        self.attr(name).and_then(|a| a.i).unwrap_or(default)
    }

    pub(super) fn attr_f(&self, name: &str, default: f32) -> f32 {
        self.attr(name).and_then(|a| a.f).unwrap_or(default)
    }

    pub(super) fn input(&self, slot: usize) -> Option<&str> {
        self.inputs.get(slot).map(String::as_str).filter(|s| !s.is_empty())
    }

    pub(super) fn is(&self, op: &str) -> bool {
        self.alive && self.op == op
    }

    /// `NumActualValues`: inputs that exist (an empty name is an omitted optional input).
    pub(super) fn existing_inputs(&self) -> usize {
        self.inputs.iter().filter(|s| !s.is_empty()).count()
    }

    pub(super) fn existing_outputs(&self) -> usize {
        self.outputs.iter().filter(|s| !s.is_empty()).count()
    }
}

/// One consumer of a value: node and input slot (`None` for a read from inside its subgraph).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Use {
    pub(super) node: usize,
    pub(super) slot: Option<usize>,
}

pub(super) struct Work<'m, 's> {
    pub(super) model: &'m Model,
    pub(super) scope: &'s Scope<'m>,
    pub(super) isa: Isa,
    pub(super) location: String,
    pub(super) nodes: Vec<Node<'m>>,
    /// Consumers of each value among live nodes, kept in sync by every edit.
    pub(super) uses: HashMap<String, Vec<Use>>,
    pub(super) producer: HashMap<String, usize>,
    /// Constants ORT creates while optimizing (new zero points, quantized biases).
    pub(super) created: HashMap<String, Const<'m>>,
    /// Per WeightBiasQuantization of a float bias alone: its rewrite's index, the node, and the
    /// Relu/Clip/Q path to its Q ([`Work::list_float_weight_bias_paths`]).
    pub(super) float_bias_paths: Vec<(usize, usize, Vec<usize>)>,
    pub(super) out: Outcome,
}

impl<'m, 's> Work<'m, 's> {
    pub(super) fn new(model: &'m Model, graph: &ir::Graph, proto: &'m GraphProto, scope: &'s Scope<'m>, isa: Isa) -> Self {
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

    pub(super) fn push(&mut self, node: Node<'m>) {
        if node.alive {
            self.link(self.nodes.len(), &node);
        }
        self.nodes.push(node);
    }

    pub(super) fn link(&mut self, id: usize, node: &Node<'m>) {
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

    pub(super) fn remove(&mut self, id: usize) {
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

    pub(super) fn set_input(&mut self, id: usize, slot: usize, name: &str) {
        let old = std::mem::replace(&mut self.nodes[id].inputs[slot], name.to_string());
        if let Some(uses) = self.uses.get_mut(&old) {
            uses.retain(|u| *u != Use { node: id, slot: Some(slot) });
        }
        self.uses.entry(name.to_string()).or_default().push(Use { node: id, slot: Some(slot) });
    }

    /// Redirects every consumer of `from` to `to` (graph_utils::RemoveNode of a single-input node).
    pub(super) fn bypass(&mut self, from: &str, to: &str) {
        for u in self.uses_of(from) {
            if let Some(slot) = u.slot {
                self.set_input(u.node, slot, to);
            }
        }
    }

    pub(super) fn create_const(&mut self, purpose: &str, c: Const<'m>) -> String {
        let name = format!("qdqc:{purpose}#{}", self.created.len());
        self.created.insert(name.clone(), c);
        name
    }

    // ---- graph queries, as ORT's Node/Graph API answers them ---------------------------------

    /// Uses by live nodes (a removed node's uses are left in `uses`, see `remove`).
    pub(super) fn uses_of(&self, name: &str) -> Vec<Use> {
        self.uses.get(name).map_or_else(Vec::new, |uses| uses.iter().filter(|u| self.nodes[u.node].alive).copied().collect())
    }

    /// Output edges of a node, with the output slot they leave from (Node::OutputEdges).
    pub(super) fn out_edges(&self, id: usize) -> Vec<(usize, Use)> {
        let n = &self.nodes[id];
        n.outputs.iter().enumerate().filter(|(_, s)| !s.is_empty()).flat_map(|(slot, name)| self.uses_of(name).into_iter().map(move |u| (slot, u))).collect()
    }

    pub(super) fn out_edge_count(&self, id: usize) -> usize {
        self.out_edges(id).len()
    }

    /// Edges into a node: inputs and implicit inputs that a node of this graph produces.
    pub(super) fn in_edge_count(&self, id: usize) -> usize {
        let n = &self.nodes[id];
        n.inputs.iter().chain(&n.implicit).filter(|s| self.producer.contains_key(s.as_str())).count()
    }

    /// The single consumer node of a node with one output edge.
    pub(super) fn only_consumer(&self, id: usize) -> Option<usize> {
        match self.out_edges(id)[..] {
            [(_, u)] => Some(u.node),
            _ => None,
        }
    }

    pub(super) fn produces_graph_output(&self, id: usize) -> bool {
        self.nodes[id].outputs.iter().any(|o| self.scope.is_output(o.as_str()))
    }

    /// `optimizer_utils::CheckOutputEdges` (optimizer/utils.cc): not a graph output, exactly
    /// `count` output edges, none of them into a subgraph.
    pub(super) fn check_output_edges(&self, id: usize, count: usize) -> bool {
        let edges = self.out_edges(id);
        !self.produces_graph_output(id) && edges.len() == count && edges.iter().all(|(_, u)| u.slot.is_some())
    }

    /// `graph_utils::FindParentsByType`: producers of type `op`, by input slot.
    pub(super) fn parents_of_type(&self, id: usize, op: &str) -> Vec<usize> {
        let n = &self.nodes[id];
        n.inputs.iter().filter_map(|i| self.producer.get(i).copied()).filter(|&p| self.nodes[p].is(op)).collect()
    }

    /// `graph_utils::FindChildrenByType`: consumers of type `op`, by output slot.
    pub(super) fn children_of_type(&self, id: usize, op: &str) -> Vec<usize> {
        self.out_edges(id).into_iter().map(|(_, u)| u.node).filter(|&c| self.nodes[c].is(op)).collect()
    }

    pub(super) fn constant(&self, name: &str, outer: bool) -> Option<&Const<'m>> {
        self.created.get(name).or_else(|| self.scope.constant(name, outer))
    }

    /// `NodeArgIsConstant(name) && GetInitializedTensor(name)`: a constant of this very graph.
    pub(super) fn local_constant(&self, name: &str) -> Option<&Const<'m>> {
        self.created.get(name).or_else(|| self.scope.local_initializer(name).filter(|_| self.scope.constant(name, true).is_some()))
    }

    /// `optimizer_utils::IsScalar` on a value: from a constant's dims, else the declared shape.
    pub(super) fn is_scalar(&self, name: &str) -> bool {
        match self.constant(name, true).or_else(|| self.scope.any_initializer(name)) {
            Some(c) => c.is_scalar(),
            None => self.scope.declared_dims(name).is_some_and(|d| d.is_empty() || d == [1]),
        }
    }

    /// The element type of a value as ORT's type inference knows it.
    pub(super) fn dtype(&self, name: &str) -> Option<DataType> {
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
    pub(super) fn q_type(&self, q: usize) -> Option<DataType> {
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
    pub(super) fn dq_type(&self, dq: usize) -> Option<DataType> {
        let n = &self.nodes[dq];
        n.input(0).and_then(|x| self.dtype(x)).or_else(|| n.input(2).and_then(|z| self.dtype(z)))
    }

    pub(super) fn describe(&self, id: usize) -> String {
        let n = &self.nodes[id];
        format!("{} #{}", n.op, n.origin)
    }

    /// Records one rewrite of `nodes` with the verdict the engine gave on it. A verdict that
    /// neither holds nor has an input that changes is recorded as what it is for the audit: a
    /// change of numerics, with the rewrite's `detail`.
    pub(super) fn record(&mut self, transformer: &'static str, nodes: Vec<usize>, verdict: Verdict, detail: String) {
        let verdict = match verdict.reason() {
            Some(_) => unproven(&detail),
            None => verdict,
        };
        let mut authored: Vec<usize> = nodes.into_iter().filter(|&n| self.nodes[n].authored).map(|n| self.nodes[n].origin).collect();
        authored.dedup();
        let (exact, witness) = (verdict.is_exact(), verdict.counterexample().cloned());
        self.out.rewrites.push(Rewrite { transformer, nodes: authored, exact, detail, witness, verdict, location: self.location.clone() });
    }
}

/// The SinceVersion ORT resolves for `op` under the model's opset imports, for the operators whose
/// version a rule checks (schemas of onnx 1.23); other operators report the imported version.
pub(super) fn since_version(model: &Model, op: &str, domain: &str) -> i64 {
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

impl Work<'_, '_> {
    /// `QDQ::MatchQNode`: ONNX QuantizeLinear of a listed version, or com.microsoft v1.
    pub(super) fn match_q(&self, id: usize) -> bool {
        self.match_qdq(id, "QuantizeLinear")
    }

    pub(super) fn match_dq(&self, id: usize) -> bool {
        self.match_qdq(id, "DequantizeLinear")
    }

    pub(super) fn match_qdq(&self, id: usize, op: &str) -> bool {
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
    pub(super) fn qdq_pair_supported(&self, q: usize, dq: usize, check_op_type: bool) -> bool {
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
    pub(super) fn constant_scalar_params(&self, id: usize) -> Option<bool> {
        let n = &self.nodes[id];
        let constant_scalar = |name: &str| self.is_scalar(name) && self.constant(name, true).is_some();
        if !n.input(1).is_some_and(constant_scalar) {
            return None;
        }
        let zp = n.inputs.len() > 2 && !n.inputs[2].is_empty();
        (!zp || constant_scalar(&n.inputs[2])).then_some(zp)
    }

    /// `QDQ::IsQOrDQScalePositiveConstantScalar`.
    pub(super) fn scale_positive(&self, id: usize) -> bool {
        let Some(s) = self.nodes[id].input(1) else { return false };
        self.is_scalar(s) && self.constant(s, true).and_then(|c| c.first_float(self.model)).is_some_and(|v| v > 0.0)
    }

    /// `GetQScalarScaleZp` (qdq_util.cc): a rank-0 float scale, and a rank-0 8/16-bit zero point or
    /// none (then `output_dtype`, default uint8, with zero point 0).
    pub(super) fn q_scalar_scale_zp(&self, q: usize) -> Option<(f32, i64, DataType)> {
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
    pub(super) fn clip_bounds(&self, clip: usize) -> Option<(f32, f32)> {
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
    pub(super) fn clip_redundant_by_q(&self, clip: usize, q: usize) -> bool {
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

/// The verdict on a rewrite that changes numerics without a proof either way (ORT quantizing a
/// float weight, a session ORT refuses): not a decision, the absence of one.
pub(super) fn unproven(detail: &str) -> Verdict {
    Verdict::Unknown { reason: format!("changes numerics: {detail}") }
}

/// Code range of the 8- and 16-bit types ORT's Q/DQ helpers handle.
pub(super) fn range_8_16(dt: DataType) -> Option<(i64, i64)> {
    matches!(dt, DataType::Int8 | DataType::Uint8 | DataType::Int16 | DataType::Uint16).then(|| tensor::int_range(dt)).flatten()
}

/// `static_cast<int32_t>(rint(x))` as the CPU executes it.
// The model: in range the cast is exact; out of range `as` saturates as ARM's fcvtzs does.
#[allow(clippy::cast_possible_truncation)]
pub(super) fn rint_to_i32(x: f32, isa: Isa) -> i32 {
    let r = (x as f64).round_ties_even();
    let in_range = r >= i32::MIN as f64 && r <= i32::MAX as f64;
    match (in_range, isa.arith().convert) {
        (true, _) => r as i32,
        (false, Convert::Arm) => r as i32, // saturating, NaN → 0, as fcvtzs
        (false, Convert::X86) => i32::MIN,
    }
}

pub(super) fn is_16bit(dt: Option<DataType>) -> bool {
    matches!(dt, Some(DataType::Int16 | DataType::Uint16))
}

pub(super) fn is_4bit(dt: Option<DataType>) -> bool {
    matches!(dt, Some(DataType::Int4 | DataType::Uint4))
}
