//! `qdqc inspect`: op counts, Q/DQ counts and the QDQ groups of a model.

use qdqc_lang::{Model, Result};
use qdqc_lower::groups::{End, Group, find};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// `qdqc inspect`: what a model holds, before any rewrite.
#[derive(Clone, Debug, Serialize)]
pub struct Inspection {
    /// The model's path, as given.
    pub file: String,
    /// The model's ONNX IR version.
    pub ir_version: i64,
    /// Opset version per imported domain (the default domain as `ai.onnx`).
    pub opsets: BTreeMap<String, i64>,
    /// Graph, node, initializer, Q/DQ and group counts.
    pub counts: Counts,
    /// Nodes per op type (`domain.Op` outside the default domain), over all graphs.
    pub ops: BTreeMap<String, usize>,
    /// Every QDQ group the lowering recognises, the candidates the rules decide on.
    pub groups: Vec<QdqGroup>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Counts {
    /// Graphs: the main graph plus every subgraph.
    pub graphs: usize,
    pub nodes: usize,
    pub initializers: usize,
    pub quantize_linear: usize,
    pub dequantize_linear: usize,
    pub groups: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct QdqGroup {
    pub op: String,
    pub node: String,
    pub location: String,
    pub inputs: Vec<GroupEnd>,
    pub outputs: Vec<GroupEnd>,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupEnd {
    pub node: String,
    pub tensor: String,
    pub code_type: Option<String>,
    /// Scales as numbers, for reading.
    pub scale: Option<Vec<f32>>,
    /// Scales as exact f32 bit patterns, for comparing.
    pub scale_bits: Option<Vec<String>>,
    pub zero_point: Option<Vec<i64>>,
    /// How many scales the tensor has when the lists above show only the first [`LISTED`]
    /// (a blocked weight has one per block: millions, for an LLM's embedding).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters: Option<usize>,
    pub axis: Option<i64>,
    pub block_size: Option<i64>,
}

/// Scales and zero points listed per group end; longer lists are cut and their length given.
pub const LISTED: usize = 64;

fn first<T: Clone>(v: &[T]) -> Vec<T> {
    v[..v.len().min(LISTED)].to_vec()
}

pub(crate) fn group_json(g: &Group) -> QdqGroup {
    let end = |e: &End| GroupEnd {
        node: e.node.clone(),
        tensor: e.tensor.clone(),
        code_type: e.params.code_type.clone(),
        scale: e.params.scale_bits.as_ref().map(|b| first(b).iter().map(|&x| f32::from_bits(x)).collect()),
        scale_bits: e.params.scale_bits.as_ref().map(|b| first(b).iter().map(|x| format!("0x{x:08x}")).collect()),
        zero_point: e.params.zero_point.as_deref().map(first),
        parameters: e.params.scale_bits.as_ref().map(Vec::len).filter(|&n| n > LISTED),
        axis: e.params.axis,
        block_size: e.params.block_size,
    };
    QdqGroup {
        op: g.op.clone(),
        node: g.node.clone(),
        location: g.location.trim().to_string(),
        inputs: g.inputs.iter().map(end).collect(),
        outputs: g.outputs.iter().map(end).collect(),
    }
}

/// Loads the model at `path` and counts what it holds; the model is not changed.
pub fn inspect(path: &Path) -> Result<Inspection> {
    let model = Model::load(path)?;
    let mut counts = Counts::default();
    let mut ops = BTreeMap::new();
    if let Some(g) = &model.proto.graph {
        count(g, &mut counts, &mut ops);
    }
    let groups: Vec<QdqGroup> = find(&model).iter().map(group_json).collect();
    counts.groups = groups.len();
    let opsets =
        model.proto.opset_import.iter().map(|o| (o.domain.clone().filter(|d| !d.is_empty()).unwrap_or("ai.onnx".into()), o.version.unwrap_or(0))).collect();
    Ok(Inspection { file: path.display().to_string(), ir_version: model.proto.ir_version.unwrap_or(0), opsets, counts, ops, groups })
}

fn count(g: &qdqc_lang::onnx::GraphProto, counts: &mut Counts, ops: &mut BTreeMap<String, usize>) {
    counts.graphs += 1;
    counts.initializers += g.initializer.len() + g.sparse_initializer.len();
    for node in &g.node {
        counts.nodes += 1;
        let op = node.op_type.as_deref().unwrap_or("");
        let op_key = match node.domain.as_deref().unwrap_or("") {
            "" | "ai.onnx" => op.to_string(),
            d => format!("{d}.{op}"),
        };
        match qdqc_lower::region::kind(node) {
            qdqc_lower::region::NodeKind::Quantize => counts.quantize_linear += 1,
            qdqc_lower::region::NodeKind::Dequantize => counts.dequantize_linear += 1,
            _ => {}
        }
        *ops.entry(op_key).or_default() += 1;
        for sub in qdqc_lang::ir::node_graphs(node) {
            count(sub, counts, ops);
        }
    }
}

impl Inspection {
    /// The human-readable form.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let c = &self.counts;
        let opsets: Vec<String> = self.opsets.iter().map(|(d, v)| format!("{d} {v}")).collect();
        writeln!(out, "{}: IR {}, opsets {}", self.file, self.ir_version, opsets.join(", ")).unwrap();
        writeln!(
            out,
            "{} nodes in {} graph(s), {} initializers; {} QuantizeLinear, {} DequantizeLinear; {} QDQ groups",
            c.nodes, c.graphs, c.initializers, c.quantize_linear, c.dequantize_linear, c.groups
        )
        .unwrap();
        writeln!(out, "\nops:").unwrap();
        for (op, n) in &self.ops {
            writeln!(out, "  {n:>6}  {op}").unwrap();
        }
        if !self.groups.is_empty() {
            writeln!(out, "\nQDQ groups (DQ inputs → op → Q outputs):").unwrap();
        }
        for g in &self.groups {
            let loc = if g.location.is_empty() { String::new() } else { format!(" {}", g.location) };
            writeln!(out, "  {} {}{loc}", g.op, g.node).unwrap();
            for (dir, ends) in [("in ", &g.inputs), ("out", &g.outputs)] {
                for e in ends {
                    writeln!(out, "    {dir} {:<24} {}", e.tensor, params_text(e)).unwrap();
                }
            }
        }
        out
    }
}

fn params_text(e: &GroupEnd) -> String {
    let list = |v: &[String]| if v.len() <= 3 { v.join(",") } else { format!("{},… ({} values)", v[..3].join(","), v.len()) };
    let scale = e.scale.as_ref().map(|s| list(&s.iter().map(|x| format!("{x:e}")).collect::<Vec<_>>())).unwrap_or("?".into());
    let zp = e.zero_point.as_ref().map(|z| list(&z.iter().map(i64::to_string).collect::<Vec<_>>())).unwrap_or("?".into());
    let axis = e.axis.map(|a| format!(" axis {a}")).unwrap_or_default();
    let block = e.block_size.map(|b| format!(" block {b}")).unwrap_or_default();
    format!("{} scale {scale} zp {zp}{axis}{block}", e.code_type.as_deref().unwrap_or("?"))
}
