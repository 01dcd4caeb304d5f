//! Level 2 of ORT's optimizer before selection and after it: the `ClipQuantRewrite` /
//! `ReluQuantRewrite` rules, `QDQS8ToU8Transformer` and `QDQFinalCleanupTransformer`.

use super::work::{Work, range_8_16, unproven};
use qdqc_exact::reference::CodeType;
use qdqc_exact::{Verdict, lemma};
use qdqc_lang::onnx::DataType;
use qdqc_lang::scope::Const;

impl<'m> Work<'m, '_> {
    /// The level-2 rewrite rules `ClipQuantRewrite` (qdq_transformer/clip_quantizelinear.cc) and
    /// `ReluQuantRewrite` (qdq_transformer/relu_quantizelinear.cc): a Relu or Clip whose only
    /// consumer is a Q is removed when the Q's range lies inside it. They run even with
    /// `session.disable_quant_qdq=1`.
    pub(super) fn remove_relu_clip_before_q(&mut self) {
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
                Some(ClipRemoval::Removed { q, bounds }) => {
                    let verdict = self.clip_removal(q, bounds);
                    let detail = format!("removes {} before {}: {}", self.describe(id), self.describe(q), verdict.explanation());
                    let source = self.clip_source(id);
                    let out = self.nodes[id].outputs[0].clone();
                    self.bypass(&out, &source);
                    self.remove(id);
                    self.record(transformer, vec![id, q], verdict, detail);
                }
                Some(ClipRemoval::Throws { q }) => {
                    let detail = format!(
                        "{} before {} whose zero point is not 8- or 16-bit: ORT_THROW in GetQConstantLowerUpper aborts session creation",
                        self.describe(id),
                        self.describe(q)
                    );
                    self.record(transformer, vec![id, q], unproven(&detail), detail);
                }
                None => {}
            }
        }
    }

    /// `ReluQuantFusion`: Relu-6/13/14 with one output edge into a Q with a constant zero point of one
    /// element that equals the type's minimum. Other zero point types (int4, …) pass unchecked.
    pub(super) fn relu_quant(&self, id: usize) -> Option<ClipRemoval> {
        let q = self.single_q_consumer(id, &[6, 13, 14])?;
        let qn = &self.nodes[q];
        let zp = (qn.inputs.len() == 3).then(|| qn.input(2)).flatten()?;
        let zp = self.local_constant(zp).filter(|c| c.element_count() == 1)?;
        if let Some((lo, _)) = range_8_16(zp.dtype) {
            (zp.first_int(self.model)? == lo).then_some(())?;
        }
        Some(ClipRemoval::Removed { q, bounds: (0.0, f32::INFINITY) })
    }

    /// `ClipQuantFusion`: a constant Clip range covering `[s·(qmin − z), s·(qmax − z)]` up to an
    /// absolute FLT_EPSILON, with a rank-0 float scale and a rank-0 zero point.
    pub(super) fn clip_quant(&self, id: usize) -> Option<ClipRemoval> {
        let q = self.single_q_consumer(id, &[1, 6, 11, 12, 13])?;
        self.can_remove_clip(id).then_some(())?;
        let (min, max) = self.clip_bounds(id)?;
        let qn = &self.nodes[q];
        (qn.inputs.len() == 3).then_some(())?;
        let scale = self.constant(qn.input(1)?, true).filter(|c| c.dims.is_empty() && c.dtype == DataType::Float)?;
        let scale = scale.first_float(self.model)?;
        let zp = self.constant(qn.input(2)?, true).filter(|c| c.dims.is_empty())?;
        let Some((qmin, qmax)) = range_8_16(zp.dtype) else { return Some(ClipRemoval::Throws { q }) };
        let z = zp.first_int(self.model)?;
        let (lower, upper) = (scale * (qmin - z) as f32, scale * (qmax - z) as f32);
        let eps = f32::EPSILON;
        (!(eps < min - lower || eps < upper - max)).then_some(ClipRemoval::Removed { q, bounds: (min, max) })
    }

    /// Relu/Clip of an accepted version, with one output edge that goes to a Q.
    pub(super) fn single_q_consumer(&self, id: usize, versions: &[i64]) -> Option<usize> {
        (versions.contains(&self.nodes[id].since) && self.check_output_edges(id, 1)).then_some(())?;
        let q = self.only_consumer(id)?;
        self.match_q(q).then_some(q)
    }

    /// `graph_utils::CanRemoveNode`: one input edge, or a single input.
    pub(super) fn can_remove_clip(&self, id: usize) -> bool {
        !self.produces_graph_output(id) && (self.in_edge_count(id) == 1 || self.nodes[id].inputs.len() == 1)
    }

    /// The value that replaces a removed node's output: the input its single edge carries.
    pub(super) fn clip_source(&self, id: usize) -> String {
        let n = &self.nodes[id];
        n.inputs.iter().find(|i| self.producer.contains_key(i.as_str())).unwrap_or(&n.inputs[0]).clone()
    }

    /// The engine's verdict on `Q(clip(x)) = Q(x)` for every x, with this Q's constant scales and
    /// zero points ([`lemma::clip_removal`]).
    pub(super) fn clip_removal(&self, q: usize, bounds: (f32, f32)) -> Verdict {
        match self.q_params(q) {
            Some(p) => lemma::clip_removal(&p.scales, &p.zps, p.code, bounds),
            None => Verdict::Unknown { reason: "the Q's scale or zero point is not constant".into() },
        }
    }

    /// A Q or DQ node's constant scales and zero points (one zero point 0 when absent).
    pub(super) fn q_params(&self, id: usize) -> Option<QParams> {
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
    pub(super) fn convert_s8_pairs_to_u8(&mut self) {
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

    pub(super) fn s8_pair_zero_point(&self, q: usize, dq: usize) -> Option<i64> {
        let zp = |id: usize| {
            let n = &self.nodes[id];
            let c = (n.inputs.len() == 3).then(|| n.input(2)).flatten().and_then(|z| self.local_constant(z))?;
            (c.element_count() == 1 && c.dtype == DataType::Int8).then(|| c.first_int(self.model)).flatten()
        };
        let (a, b) = (zp(q)?, zp(dq)?);
        (a == b).then_some(a)
    }

    /// `QDQFinalCleanupTransformer` (qdq_transformer/qdq_final_cleanup.cc), DQ→Q only (Q→DQ needs
    /// `session.enable_quant_qdq_cleanup=1`): a DQ whose every consumer is a Q with the same constant
    /// scalar parameters, each Q feeding one node or only a graph output, is removed with them.
    pub(super) fn final_cleanup(&mut self) {
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
                let verdict = self.round_trip(dq);
                let targets: Vec<String> = qs.iter().map(|&q| self.describe(q)).collect();
                let holds = if verdict.is_exact() { "holds" } else { "fails for this scale" };
                let detail = format!("removes {} → {}: Q(DQ(q)) = q {holds}", self.describe(dq), targets.join(", "));
                self.record("QDQFinalCleanupTransformer", std::iter::once(dq).chain(qs.iter().copied()).collect(), verdict, detail);
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

pub(super) enum ClipRemoval {
    Removed { q: usize, bounds: (f32, f32) },
    Throws { q: usize },
}

pub(super) struct QParams {
    scales: Vec<f32>,
    zps: Vec<i64>,
    code: CodeType,
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::Isa;
    use DataType::{Int4, Uint8};
    use qdqc_lang::onnx::{DataType, NodeProto, TensorProto};

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
}
