//! `QDQSelectorActionTransformer` (selectors_actions/qdq_selector_action_transformer.cc,
//! qdq_selectors.cc, qdq_actions.cc, framework/node_unit.cc): the selector table, each rule's
//! checks, and the fusion that replaces a selected group.

use super::work::{Node, Work, is_4bit, is_16bit};
use super::{Fusion, int8_allowed};
use qdqc_lang::onnx::DataType;

/// A candidate node group, as `NodeGroupSelector::GetQDQSelection` finds it.
pub(super) struct Selection {
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
pub(super) enum Rule {
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
pub(super) fn rules_for(op: &str, since: i64) -> Vec<Rule> {
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

impl<'m> Work<'m, '_> {
    /// Tries every registered rule on every node in order; a selected group is replaced by one
    /// node standing for the fused kernel.
    pub(super) fn select_and_fuse(&mut self) {
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
    pub(super) fn selection(&self, target: usize) -> Option<Selection> {
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
    pub(super) fn check(&self, rule: Rule, sel: &Selection) -> Option<(&'static str, String)> {
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
    pub(super) fn can_create_node_group(&self, sel: &Selection, clip: Option<usize>) -> bool {
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
            consumers.iter().all(|&q| q == all_q) && !(all_q && self.scope.is_output(o.as_str()))
        })
    }

    /// `NodeGroupSelector::CheckQDQNodes`: one DQ per existing input (or `num_dq_inputs`), a valid
    /// node group, and — unless no Q is allowed — one Q per output, all its output edges to Qs, no
    /// graph output.
    pub(super) fn check_qdq_nodes(&self, sel: &Selection, clip: Option<usize>, num_dq_inputs: Option<usize>, empty_q_allowed: bool) -> bool {
        let target = &self.nodes[sel.target];
        if num_dq_inputs.unwrap_or_else(|| target.existing_inputs()) != sel.dqs.len() || !self.can_create_node_group(sel, clip) {
            return false;
        }
        if sel.qs.is_empty() {
            return empty_q_allowed;
        }
        target.existing_outputs() == sel.qs.len() && sel.qs.len() == self.out_edge_count(sel.target) && !self.produces_graph_output(sel.target)
    }

    pub(super) fn in_type(&self, sel: &Selection, i: usize) -> Option<DataType> {
        self.dq_type(sel.dqs[i])
    }

    pub(super) fn out_type(&self, sel: &Selection) -> Option<DataType> {
        self.q_type(sel.qs[0])
    }

    /// DropQDQNodeGroupSelector: one DQ, one Q, same type, constant scalar parameters equal between
    /// them (and a positive scale when required).
    pub(super) fn check_drop(&self, sel: &Selection, allow_16bit: bool, allow_4bit: bool, positive_scale: bool) -> bool {
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
    pub(super) fn resize_is_nearest(&self, id: usize) -> bool {
        let n = &self.nodes[id];
        n.op != "Resize" || n.attr("mode").and_then(|a| a.s.as_deref()).is_none_or(|m| m == b"nearest")
    }

    /// DropDQNodeGroupSelector (ArgMax): one DQ with a constant scalar scale and an explicit
    /// constant scalar zero point; 8-bit only. The sign of the scale is not checked.
    pub(super) fn check_drop_dq(&self, sel: &Selection) -> bool {
        if sel.clip.is_some() || sel.dqs.len() != 1 || !self.can_create_node_group(sel, None) {
            return false;
        }
        let dt = self.in_type(sel, 0);
        !is_16bit(dt) && !is_4bit(dt) && self.constant_scalar_params(sel.dqs[0]) == Some(true)
    }

    pub(super) fn check_unary(&self, sel: &Selection) -> bool {
        let dt = || self.in_type(sel, 0);
        self.check_qdq_nodes(sel, sel.clip, Some(1), false) && same(dt(), self.out_type(sel)) && eight_bit_ok(dt())
    }

    pub(super) fn check_binary(&self, sel: &Selection) -> bool {
        if !self.check_qdq_nodes(sel, sel.clip, None, false) || sel.dqs.len() < 2 {
            return false;
        }
        let dt = self.in_type(sel, 0);
        same(dt, self.in_type(sel, 1)) && same(dt, self.out_type(sel)) && eight_bit_ok(dt)
    }

    pub(super) fn check_variadic(&self, sel: &Selection) -> bool {
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
    pub(super) fn check_split(&self, sel: &Selection) -> bool {
        if sel.clip.is_some() || !self.check_qdq_nodes(sel, None, Some(1), false) {
            return false;
        }
        let dt = self.in_type(sel, 0);
        !is_4bit(dt) && sel.qs.iter().all(|&q| same(self.q_type(q), dt) && self.qdq_pair_supported(q, sel.dqs[0], true))
    }

    /// ConvNodeGroupSelector(int8_allowed, allow_16bit=false, allow_4bit_weight=false): x and y of
    /// one type; int8 x needs int8 allowed and an int8 weight; a bias DQ reads INT32.
    pub(super) fn check_conv(&self, sel: &Selection) -> bool {
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
    pub(super) fn conv_bias_matches(&self, sel: &Selection) -> bool {
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
    pub(super) fn check_matmul(&self, sel: &Selection) -> Option<&'static str> {
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
    pub(super) fn check_gemm(&self, sel: &Selection) -> bool {
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
    pub(super) fn gemm_params_fit_qgemm(&self, sel: &Selection) -> bool {
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

    pub(super) fn check_where(&self, sel: &Selection) -> bool {
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
    pub(super) fn check_dq_matmul_nbits(&self, sel: &Selection) -> bool {
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
    pub(super) fn gemm_is_plain_matmul(&self, gemm: usize, weight_dq: usize) -> bool {
        let n = &self.nodes[gemm];
        let near_one = |v: f32| (v - 1.0).abs() <= 1e-6;
        if !near_one(n.attr_f("alpha", 1.0)) || n.attr_i("transA", 0) != 0 || n.attr_i("transB", 0) != 0 {
            return false;
        }
        let Some(bias) = n.input(2) else { return true };
        let weight_n = self.nodes[weight_dq].input(0).and_then(|w| self.value_dims(w)).filter(|d| d.len() == 2).map(|d| d[1]);
        near_one(n.attr_f("beta", 1.0)) && weight_n.is_some() && self.value_dims(bias).is_some_and(|d| d.len() == 1 && Some(d[0]) == weight_n)
    }

    pub(super) fn value_dims(&self, name: &str) -> Option<Vec<i64>> {
        self.constant(name, true).map(|c| c.dims.clone()).or_else(|| self.scope.declared_dims(name))
    }

    /// `ValidateDQForMatMulNBits`: 2/4/8-bit constant weight [K, N], float or float16 scales;
    /// blockwise on axis 0 with a power-of-two block ≥ 16, per-tensor, or per-channel on axis 1.
    pub(super) fn dq_fits_matmul_nbits(&self, dq: usize) -> bool {
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
    pub(super) fn weight_not_shared(&self, dq: usize) -> bool {
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
    pub(super) fn param_source(&self, id: usize) -> Option<usize> {
        let n = &self.nodes[id];
        if n.authored {
            return Some(n.origin);
        }
        let is_qdq = |m: &Node| m.op == "QuantizeLinear" || m.op == "DequantizeLinear";
        self.nodes.iter().find(|m| m.authored && m.origin == n.origin && is_qdq(m) && m.inputs.get(1..) == n.inputs.get(1..)).map(|m| m.origin)
    }

    pub(super) fn fuse(&mut self, rule: &'static str, fused_op: String, sel: Selection) {
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
pub(super) fn same(a: Option<DataType>, b: Option<DataType>) -> bool {
    a.is_some() && a == b
}

/// The default `allow_16bit=false, allow_4bit=false` of the 8-bit-only selectors.
pub(super) fn eight_bit_ok(dt: Option<DataType>) -> bool {
    !is_16bit(dt) && !is_4bit(dt)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::Isa;
    use DataType::{Int4, Int8, Int32, Uint8};
    use qdqc_lang::onnx::{DataType, NodeProto};

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
}
