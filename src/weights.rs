//! What became of weights in a compile: the model's stored size before and after, and for each
//! embedding lookup rewritten by `gather-before-dequantize`, the float table its DequantizeLinear
//! produced and whether other readers (a tied lm_head) still materialise it.

use qdqc_lang::Model;
use qdqc_lang::onnx::{GraphProto, ModelProto, NodeProto};
use serde::Serialize;

/// Serialized model plus external data, in bytes.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ModelSize {
    /// The input model.
    pub before_bytes: u64,
    /// The compiled model.
    pub after_bytes: u64,
}

/// One embedding table whose DequantizeLinear `gather-before-dequantize` moved after the Gather
/// (contract §5.3): the float table a run no longer has to hold, unless another reader needs it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FloatTable {
    /// The Gather output the rewrite now dequantizes row by row.
    pub gather_output: String,
    /// The DequantizeLinear output that was the float table, and its quantized input.
    pub table: String,
    /// The quantized initializer the DequantizeLinear read.
    pub codes: String,
    /// Elements of the table.
    pub elements: u64,
    /// Bytes of the f32 table a run of the original model produced.
    pub float_bytes: u64,
    /// Whether the compiled model still holds the table (computed, or folded), for `readers`.
    pub materialised: bool,
    /// Nodes of the compiled model that still read the table (graph outputs as `output <name>`).
    pub readers: Vec<String>,
}

/// For each fired `gather-before-dequantize` decision (by the Gather output it names), the fate
/// of the float table in `compiled`.
pub fn float_tables<'a>(input: &Model, compiled: &ModelProto, fired_gathers: impl Iterator<Item = &'a str>) -> Vec<FloatTable> {
    let before = graphs(input.proto.graph.as_ref());
    let after = graphs(compiled.graph.as_ref());
    let mut tables = Vec::new();
    for gather_output in fired_gathers {
        let Some(gather) = producer(&before, gather_output) else { continue };
        let Some(table) = gather.input.first().cloned() else { continue };
        let Some(codes) = producer(&before, &table).and_then(|dq| dq.input.first().cloned()) else { continue };
        let dims = before.iter().flat_map(|g| &g.initializer).find(|t| t.name.as_deref() == Some(codes.as_str())).map(|t| t.dims.clone());
        let elements = dims.map_or(0, |d| d.iter().product::<i64>().max(0) as u64);
        let mut readers: Vec<String> = after.iter().flat_map(|g| &g.node).filter(|n| n.input.contains(&table)).map(describe).collect();
        readers.extend(
            after
                .iter()
                .flat_map(|g| &g.output)
                .filter(|o| o.name.as_deref() == Some(table.as_str()))
                .map(|o| format!("output {}", o.name.as_deref().unwrap_or(""))),
        );
        // Produced by a node, or folded into an initializer by `--fold-weights`.
        let materialised = after.iter().flat_map(|g| &g.node).any(|n| n.output.contains(&table))
            || after.iter().flat_map(|g| &g.initializer).any(|t| t.name.as_deref() == Some(table.as_str()));
        tables.push(FloatTable { gather_output: gather_output.to_string(), table, codes, elements, float_bytes: 4 * elements, materialised, readers });
    }
    tables
}

/// The node whose first output is `out`, in any of `gs`.
fn producer(gs: &[&GraphProto], out: &str) -> Option<NodeProto> {
    gs.iter().flat_map(|g| &g.node).find(|n| n.output.first().is_some_and(|o| o == out)).cloned()
}

fn describe(n: &NodeProto) -> String {
    match n.name.as_deref() {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => format!("{} → {}", n.op_type.as_deref().unwrap_or(""), n.output.first().map_or("", String::as_str)),
    }
}

/// `g` and every graph nested in its nodes' attributes.
fn graphs(g: Option<&GraphProto>) -> Vec<&GraphProto> {
    let mut out = Vec::new();
    let mut stack: Vec<&GraphProto> = g.into_iter().collect();
    while let Some(g) = stack.pop() {
        out.push(g);
        stack.extend(g.node.iter().flat_map(qdqc_lang::ir::node_graphs));
    }
    out
}
