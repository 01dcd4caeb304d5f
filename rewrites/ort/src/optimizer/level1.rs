//! Level 1 of ORT's optimizer and the transformer before it: `EnsureUniqueDQForNodeUnit`,
//! `DoubleQDQPairsRemover`, `ConstantSharing`, `CommonSubexpressionElimination`, `ConstantFolding`
//! of QuantizeLinear, `QDQPropagationTransformer`, `WeightBiasQuantization` and `WhereDummyDq`.

use super::work::{Node, Use, Work, range_8_16, since_version, unproven};
use qdqc_exact::reference::CodeType;
use qdqc_exact::{Verdict, lemma};
use qdqc_lang::onnx::{AttributeProto, DataType};
use qdqc_lang::scope::Const;
use std::collections::HashMap;

impl<'m> Work<'m, '_> {
    /// `EnsureUniqueDQForNodeUnit` (qdq_transformer/ensure_unique_dq_for_node_unit.cc): every
    /// explicit input edge from a DQ gets its own DQ. A DQ that also feeds a graph output or a
    /// subgraph keeps those and every same-graph consumer gets a copy; otherwise the first consumer
    /// keeps the original.
    pub(super) fn ensure_unique_dq(&mut self) -> bool {
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
    pub(super) fn remove_double_qdq_pairs(&mut self) -> bool {
        let mut changed = false;
        for q1 in 0..self.nodes.len() {
            if let Some(chain) = self.double_qdq_chain(q1) {
                self.reduce_double_qdq(chain);
                changed = true;
            }
        }
        changed
    }

    pub(super) fn double_qdq_chain(&self, q1: usize) -> Option<DoubleQdq> {
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
    pub(super) fn q_zp_type(&self, q: usize) -> Option<DataType> {
        match self.nodes[q].input(2) {
            Some(zp) => self.constant(zp, true).map(|c| c.dtype),
            None => self.q_type(q),
        }
    }

    /// `FindNewZeroPointAndScale`: the parameters are kept when both pairs use the same
    /// initializers, or equal zero points and `|s1 − s2| < 1e-20`; otherwise the intersection of the
    /// two ranges gets a new scale and zero point, computed in f32 as the C++ does. `None` when
    /// the parameters are not float scales with zero points of one type (nothing is removed).
    pub(super) fn merged_params(&self, dq1: usize, q2: usize, (qmin, qmax): (i64, i64)) -> Option<Merged> {
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

    pub(super) fn reduce_double_qdq(&mut self, c: DoubleQdq) {
        let code = self.q_zp_type(c.q1).and_then(CodeType::from_dtype);
        let (verdict, detail) = match c.params {
            Merged::Kept { identical } => {
                let detail = format!("removes {} → {}: the pairs share parameters, Q(DQ(q)) = q", self.describe(c.dq1), self.describe(c.q2));
                let verdict = if identical { self.round_trip(c.q1) } else { unproven(&detail) };
                (verdict, detail)
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
                let verdict = code.map_or_else(|| unproven(&detail), |t| lemma::merged_pairs(t, old, (scale, zp)));
                (verdict, detail)
            }
        };
        let q1_out = self.nodes[c.q1].outputs[0].clone();
        for &d in &c.dq2s {
            self.set_input(d, 0, &q1_out);
        }
        self.remove(c.q2);
        self.remove(c.dq1);
        let nodes = [c.q1, c.dq1, c.q2].into_iter().chain(c.dq2s).collect();
        self.record("DoubleQDQPairsRemover", nodes, verdict, detail);
    }

    /// The engine's verdict on `Q(DQ(q)) = q` for every code with this node's constant scale
    /// (contract §3.3); unproven when the scale or the code type is not known.
    pub(super) fn round_trip(&self, id: usize) -> Verdict {
        let scale = self.nodes[id].input(1).and_then(|s| self.constant(s, true)).and_then(|c| c.first_float(self.model));
        match (scale, self.q_zp_type(id).and_then(CodeType::from_dtype)) {
            (Some(s), Some(code)) => lemma::round_trip(s, code),
            _ => Verdict::Unknown { reason: "the scale or the code type is not a known constant".into() },
        }
    }

    /// `WeightBiasQuantization` (qdq_transformer/weight_bias_quantization.cc): a Conv,
    /// ConvTranspose or Gemm whose input comes from a per-tensor DQ and whose output reaches a Q
    /// (through Relu/Clip only) gets its float weight initializer quantized to int8 and its float
    /// bias initializer rounded to int32 at scale `x_scale·w_scale`, each behind a new DQ. The
    /// inserted Q and the bias arithmetic are constant-folded on the next level-1 pass.
    pub(super) fn quantize_weights_and_biases(&mut self) -> bool {
        let mut changed = false;
        for id in 0..self.nodes.len() {
            if let Some(plan) = self.weight_bias_plan(id) {
                self.apply_weight_bias_plan(id, plan);
                changed = true;
            }
        }
        changed
    }

    pub(super) fn weight_bias_plan(&self, id: usize) -> Option<WeightBias> {
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
    pub(super) fn per_channel_weight_matches(&self, id: usize, dq1: usize, bias_size: i64) -> Option<()> {
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
    pub(super) fn no_branch_path_to_q(&self, id: usize) -> bool {
        self.path_to_q(id).is_some()
    }

    /// The Relu/Clip nodes and the Q of [`Self::no_branch_path_to_q`], in order.
    pub(super) fn path_to_q(&self, id: usize) -> Option<Vec<usize>> {
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
    pub(super) fn list_float_weight_bias_paths(&mut self) {
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

    pub(super) fn apply_weight_bias_plan(&mut self, id: usize, plan: WeightBias) {
        let op = self.nodes[id].op.clone();
        let mut changed = Vec::new();
        let weight_scale = match plan.dq1 {
            Some(dq1) => self.nodes[dq1].input(1).and_then(|s| self.constant(s, true)).and_then(|c| c.float_values(self.model)),
            None => {
                let w = self.scope.local_initializer(&plan.weight).expect("checked by the plan");
                let (dims, params) = (w.dims.clone(), w.float_values(self.model).map(|v| int8_weight_params(&v)));
                let codes = self.create_const("weight_int8", Const::opaque(DataType::Int8, dims));
                let (scale, zp) = match params {
                    Some((s, z)) => (Const::floats(vec![], vec![s]), Const::ints(DataType::Int8, vec![], vec![z])),
                    None => (Const::opaque(DataType::Float, vec![]), Const::opaque(DataType::Int8, vec![])),
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
            let codes = self.create_const("bias_int32", Const::opaque(DataType::Int32, dims));
            // Mul(x_scale, w_scale), constant-folded: one f32 product per weight channel.
            let x_scale = self.nodes[plan.dq0].input(1).and_then(|s| self.constant(s, true)).and_then(|c| c.first_float(self.model));
            let scale = match (x_scale, weight_scale) {
                (Some(x), Some(w)) => Const::floats(vec![i64::try_from(w.len()).expect("a tensor's length fits i64")], w.iter().map(|&w| x * w).collect()),
                _ => Const::opaque(DataType::Float, vec![]),
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
        self.record("WeightBiasQuantization", vec![id], unproven(&detail), detail);
    }

    /// Puts a new DQ of `params` (codes, scale, zero point) in front of input `slot` of `id`.
    pub(super) fn insert_dq(&mut self, id: usize, slot: usize, params: [String; 3]) {
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

impl<'m> Work<'m, '_> {
    /// `ConstantSharing` (optimizer/constant_sharing.cc): constant initializers of up to 8 elements
    /// of type f16/f32/f64/i32/i64 with equal type, rank and values are replaced by one of them,
    /// so that CSE sees equal inputs. Zero points (8/16-bit) are never shared.
    pub(super) fn share_constants(&mut self) -> bool {
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
            let key = format!("{:?}/{}/{}/{values}", c.dtype, c.dims.len(), c.element_count());
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

    pub(super) fn shareable(&self, name: &str) -> bool {
        let local = self.created.get(name).or_else(|| self.scope.constant(name, false));
        let Some(c) = local else { return false };
        let uses = self.uses_of(name);
        matches!(c.dtype, DataType::Float16 | DataType::Float | DataType::Double | DataType::Int32 | DataType::Int64)
            && (1..=8).contains(&c.element_count())
            && !self.scope.is_output(name)
            && !uses.is_empty()
            && uses.iter().all(|u| u.slot.is_some())
    }

    /// `CommonSubexpressionElimination` (optimizer/common_subexpression_elimination.cc): nodes with
    /// the same op, attributes and equivalent inputs are merged into the first one in
    /// [`Self::topological_order`]. DQs, nodes with subgraphs and non-deterministic ops never
    /// merge; a graph output is never replaced. The case that matters here: two identical Qs of one
    /// value become one Q with two DQ consumers (the one ORT keeps is the one its group names).
    pub(super) fn eliminate_common_subexpressions(&mut self) -> bool {
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
                    Some(rep) if !self.scope.is_output(out.as_str()) => replace.push((id, out.clone(), rep.clone())),
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
    pub(super) fn topological_order(&self) -> Vec<usize> {
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
    pub(super) fn cse_supported(&self, id: usize) -> bool {
        let n = &self.nodes[id];
        let has_subgraph = n.attrs.iter().any(|a| !qdqc_lang::ir::attribute_graphs(a).is_empty());
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
    pub(super) fn fold_constant_quantize(&mut self) -> bool {
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
            let folded = self.create_const("folded_q", Const::opaque(dtype, dims));
            let out = self.nodes[q].outputs[0].clone();
            let detail = format!(
                "folds {} of the constant '{}' into its codes: the kernel the unfused graph runs, on the same values",
                self.describe(q),
                self.nodes[q].inputs[0]
            );
            self.bypass(&out, &folded);
            self.remove(q);
            self.record("ConstantFolding", vec![q], lemma::same_computation(&detail), detail);
            changed = true;
        }
        changed
    }

    /// `QDQPropagationTransformer` (qdq_transformer/qdq_propagation.cc): a Q with constant scalar
    /// parameters is copied backwards, and a DQ forwards, across MaxPool-12/22, Reshape, Transpose,
    /// Squeeze, Unsqueeze and Slice chains, as new Q→DQ pairs, so those ops get dropped and their
    /// neighbours see DQ inputs / Q outputs.
    pub(super) fn propagate_qdq(&mut self) -> bool {
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
    pub(super) fn can_propagate(&self, id: usize) -> bool {
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
    pub(super) fn previous_node(&self, id: usize) -> Option<usize> {
        let input = self.nodes[id].input(0)?;
        let src = *self.producer.get(input)?;
        (!self.scope.is_output(input) && self.uses_of(input).len() == 1).then_some(src)
    }

    pub(super) fn propagate_q_backward(&mut self, q: usize) -> bool {
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

    pub(super) fn propagate_dq_forward(&mut self, dq: usize) -> bool {
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
            if self.scope.is_output(value.as_str()) {
                continue;
            }
            let out = self.nodes[dst].outputs[0].clone();
            let consumers = self.uses_of(&out);
            let any_q = consumers.iter().any(|u| self.match_q(u.node));
            if (consumers.is_empty() && !self.scope.is_output(out.as_str())) || any_q {
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
    pub(super) fn insert_qdq_pair(&mut self, value: &str, like: usize) -> Vec<String> {
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
        if self.scope.is_output(value) {
            self.push(make("DequantizeLinear", q_out, value.to_string()));
        }
        outs
    }

    /// `WhereDummyDq` (qdq_transformer/where_dummy_dq.cc): a Where with one DQ'd branch and one
    /// rank-0 float initializer gets `DQ(1; scale = that value, zero point 0)` on the latter, so
    /// that QLinearWhere can take it. Exact: fl(1·c) = c.
    pub(super) fn add_where_dummy_dq(&mut self) -> bool {
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
    pub(super) fn where_dummy_plan(&self, id: usize) -> Option<(usize, usize, f32)> {
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
pub(super) fn attrs_key(attrs: &[AttributeProto]) -> String {
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
pub(super) enum Merged {
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

pub(super) struct DoubleQdq {
    q1: usize,
    dq1: usize,
    q2: usize,
    dq2s: Vec<usize>,
    params: Merged,
}

pub(super) struct WeightBias {
    /// The activation's DQ, whose scale the bias scale multiplies.
    dq0: usize,
    dq1: Option<usize>,
    weight: String,
    bias: Option<String>,
}

/// `GetQuantizationParameter<int8_t>` (util/qmath.h) as WeightBiasQuantization calls it:
/// asymmetric over [min(w, 0), max(w, 0)], scale `(max − min)/255` (1 when the range is empty),
/// zero point `RoundHalfToEven(clamp(−128 − min/scale))`.
pub(super) fn int8_weight_params(w: &[f32]) -> (f32, i64) {
    let lo = w.iter().fold(0f32, |m, &v| if v < m { v } else { m });
    let hi = w.iter().fold(0f32, |m, &v| if m < v { v } else { m });
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zp = (-128.0 - lo / scale).clamp(-128.0, 127.0).round_ties_even();
    // `zp` is integral and clamped to int8 first: the cast is exact.
    #[allow(clippy::cast_possible_truncation)]
    let zp = zp as i64;
    (scale, zp)
}

pub(super) fn hex(v: f32) -> String {
    format!("0x{:08x}", v.to_bits())
}

#[cfg(test)]
mod tests {
    use super::super::Rewrite;
    use super::super::testing::*;
    use super::hex;
    use crate::Isa;
    use qdqc_lang::onnx::DataType;

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
}
