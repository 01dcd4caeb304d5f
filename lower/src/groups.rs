//! QDQ groups as a runtime's selectors see them: a compute node whose inputs come from
//! DequantizeLinear nodes and whose output feeds QuantizeLinear nodes. `qdqc inspect` lists
//! them; the audit and the fusion rules of later stages start from the same discovery.

use crate::region::{NodeKind, kind};
use qdqc_lang::onnx::NodeProto;
use qdqc_lang::scope::Scope;
use qdqc_lang::{Model, ir};

/// Quantization parameters of one Q or DQ node, as stored (scales as exact bit patterns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// Type of the integer codes, when known.
    pub code_type: Option<String>,
    pub scale_bits: Option<Vec<u32>>,
    pub zero_point: Option<Vec<i64>>,
    /// Per-axis or blocked quantization axis (absent for per-tensor).
    pub axis: Option<i64>,
    pub block_size: Option<i64>,
}

/// One end of a group: the Q or DQ node and the tensor between it and the compute node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct End {
    pub node: String,
    /// For a DQ: its quantized input; for a Q: its quantized output.
    pub tensor: String,
    pub params: Params,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub op: String,
    pub node: String,
    /// Where the node lives: empty for the main graph, else the subgraph path.
    pub location: String,
    pub inputs: Vec<End>,
    pub outputs: Vec<End>,
}

pub fn find(model: &Model) -> Vec<Group> {
    let mut out = Vec::new();
    find_in(model, &model.graph, &Scope::main(model), &mut out);
    out
}

fn find_in<'m>(model: &'m Model, graph: &ir::Graph, scopes: &Scope<'m>, out: &mut Vec<Group>) {
    let proto = scopes.current();
    for (pos, node) in proto.node.iter().enumerate() {
        if matches!(kind(node), NodeKind::Quantize | NodeKind::Dequantize) {
            continue;
        }
        let inputs: Vec<End> = node
            .input
            .iter()
            .filter_map(|i| graph.producer(i).map(|p| &proto.node[p]))
            .filter(|p| kind(p) == NodeKind::Dequantize)
            .map(|dq| end(model, scopes, dq, &dq.input[0]))
            .collect();
        if inputs.is_empty() {
            continue;
        }
        let outputs = node
            .output
            .first()
            .map(|o| graph.consumers(o))
            .unwrap_or_default()
            .into_iter()
            .map(|c| &proto.node[c])
            .filter(|c| kind(c) == NodeKind::Quantize)
            .map(|q| end(model, scopes, q, q.output.first().map(String::as_str).unwrap_or("")))
            .collect();
        out.push(Group { op: node.op_type.clone().unwrap_or_default(), node: node.label(pos), location: graph.location.clone(), inputs, outputs });
    }
    for sub in &graph.subgraphs {
        if let Some(g) = sub.proto(proto) {
            find_in(model, &sub.graph, &scopes.enter(g), out);
        }
    }
}

fn end(model: &Model, scopes: &Scope, qdq: &NodeProto, tensor: &str) -> End {
    let input = |i: usize| qdq.input.get(i).filter(|s| !s.is_empty()).map(|s| scopes.facts(model, s));
    let scale = input(1);
    let zp = input(2);
    let attr = |name: &str| qdq.attribute.iter().find(|a| a.name.as_deref() == Some(name)).and_then(|a| a.i);
    let per_tensor = scale.as_ref().and_then(|s| s.constant.as_ref()).is_some_and(|c| c.dims.iter().product::<i64>() == 1);
    // A DQ's codes have its input's type; an unannotated input, like any Q output, has the zero
    // point's type.
    let declared = match kind(qdq) {
        NodeKind::Dequantize => scopes.facts(model, &qdq.input[0]).dtype,
        _ => None,
    };
    let code_type = declared.or_else(|| zp.as_ref().and_then(|z| z.dtype));
    End {
        node: qdq.name.clone().unwrap_or_default(),
        tensor: tensor.to_string(),
        params: Params {
            code_type: code_type.map(|d| qdqc_lang::canon::dtype_name(d).to_string()),
            scale_bits: scale.and_then(|s| s.constant).and_then(|c| c.f32_bits),
            zero_point: zp.and_then(|z| z.constant).and_then(|c| c.ints),
            axis: if per_tensor { None } else { Some(attr("axis").unwrap_or(1)) },
            block_size: attr("block_size").filter(|&b| b > 0),
        },
    }
}
