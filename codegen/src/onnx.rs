//! The ONNX backend: the authored model with its node lists replaced by the lowered nodes.
//! Everything qdqc does not rewrite — opset imports, functions, metadata, doc strings,
//! value_info, inputs, outputs, initializers and their order — is carried over untouched, except
//! initializers that fused nodes left unread ([`qdqc_lang::prune`]).

use qdqc_lang::onnx::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto};
use qdqc_lang::{Error, Model, Result};
use qdqc_lower::lowered::{Computation, LoweredGraph};

/// The model the lowered graph describes.
pub fn to_model(model: &Model, lowered: &LoweredGraph) -> Result<ModelProto> {
    let mut proto = model.proto.clone();
    let graph = proto.graph.get_or_insert_with(|| model.main_graph().clone());
    rebuild(graph, lowered).map_err(|p| Error::compile(&model.path, p))?;
    qdqc_lang::prune::unread_initializers(model.main_graph(), graph);
    import_created_domains(&mut proto, lowered);
    crate::ort_checks::check(&proto).map_err(|p| Error::compile(&model.path, format!("qdqc created a kernel ONNX Runtime would refuse at run time: {p}")))?;
    Ok(proto)
}

fn rebuild(graph: &mut GraphProto, lowered: &LoweredGraph) -> Result<(), String> {
    let mut authored = std::mem::take(&mut graph.node);
    for sub in &lowered.subgraphs {
        let body = qdqc_lang::ir::subgraph_proto_mut(&mut authored, sub.node, sub.attr_pos, sub.index)
            .ok_or_else(|| format!("subgraph {}[{}] of node #{} vanished", sub.attr, sub.index, sub.node))?;
        rebuild(body, &sub.graph)?;
    }
    graph.node = lowered
        .nodes
        .iter()
        .map(|n| {
            let mut proto = match &n.computation {
                Computation::Authored { node } => authored[*node].clone(),
                Computation::Created { op_type, domain, name, attributes, .. } => NodeProto {
                    op_type: Some(op_type.clone()),
                    domain: Some(domain.clone()).filter(|d| !d.is_empty()),
                    name: Some(name.clone()),
                    attribute: attributes.iter().map(|a| a.to_proto()).collect(),
                    ..NodeProto::default()
                },
            };
            proto.input.clone_from(&n.inputs);
            proto.output.clone_from(&n.outputs);
            proto
        })
        .collect();
    graph.initializer.extend(lowered.constants.iter().map(|c| TensorProto {
        name: Some(c.name.clone()),
        dims: c.dims.clone(),
        data_type: Some(c.dtype as i32),
        raw_data: Some(c.bytes.clone().into()),
        ..TensorProto::default()
    }));
    Ok(())
}

/// Domains of created nodes that the model does not import yet, each at version 1.
fn import_created_domains(proto: &mut ModelProto, lowered: &LoweredGraph) {
    let mut domains = std::collections::BTreeSet::new();
    collect_domains(lowered, &mut domains);
    for d in domains {
        if !proto.opset_import.iter().any(|o| o.domain.as_deref().unwrap_or("") == d) {
            proto.opset_import.push(OperatorSetIdProto { domain: Some(d), version: Some(1) });
        }
    }
}

fn collect_domains(g: &LoweredGraph, out: &mut std::collections::BTreeSet<String>) {
    for n in &g.nodes {
        if let Computation::Created { domain, .. } = &n.computation
            && !domain.is_empty()
        {
            out.insert(domain.clone());
        }
    }
    for s in &g.subgraphs {
        collect_domains(&s.graph, out);
    }
}
