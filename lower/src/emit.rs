//! From an extraction to lowered nodes: each chosen op e-class becomes one lowered node, its
//! inputs named after the chosen children.

use crate::extract::Extraction;
use crate::lowered::{Computation, LoweredConstant, LoweredNode};
use egg::Id;
use qdqc_lang::analysis::QdqEGraph;
use qdqc_lang::onnx::DataType;
use qdqc_lang::term::{NodeTag, Op};
use std::collections::BTreeSet;

pub fn emit(egraph: &QdqEGraph, extraction: &Extraction) -> Result<Vec<LoweredNode>, String> {
    let env = &egraph.analysis.env;
    let leaf = |id: Id| egraph[egraph.find(id)].data.leaf;
    // Name of the value an e-class denotes.
    let name_of = |id: Id| -> Result<String, String> {
        let id = egraph.find(id);
        let term = &extraction.chosen[&id];
        Ok(match term.op {
            Op::Value(v) => env.value(v).name.clone(),
            Op::Absent => String::new(),
            Op::Proj => {
                let (Some(Op::Index(k)), Some(tag)) = (leaf(term.args[0]), tag_of(egraph, extraction, term.args[1])) else {
                    return Err(format!("malformed projection in e-class {id}"));
                };
                output_name(egraph, tag, k as usize)?
            }
            Op::Dequantize | Op::Quantize | Op::Float(_) | Op::Opaque | Op::Kernel => {
                let tag = tag_of(egraph, extraction, id).ok_or("op without tag")?;
                output_name(egraph, tag, 0)?
            }
            Op::Tag(_) | Op::Index(_) => return Err(format!("e-class {id} is not a value")),
        })
    };
    let mut seen = BTreeSet::new();
    let mut nodes = Vec::new();
    for (&id, term) in &extraction.chosen {
        if !term.op.is_node() {
            continue;
        }
        let tag = tag_of(egraph, extraction, id).ok_or("op without tag")?;
        if !seen.insert(tag) {
            return Err(format!("node '{}' would be emitted twice", env.tag(tag).name));
        }
        let facts = env.tag(tag);
        let mut inputs: Vec<String> = term.args[1..].iter().map(|&c| name_of(c)).collect::<Result<_, _>>()?;
        if !facts.created {
            inputs.truncate(facts.arity);
        }
        let outputs = facts.outputs.iter().map(|o| o.map(|v| env.value(v).name.clone()).unwrap_or_default()).collect();
        let computation = if facts.created {
            Computation::Created {
                op_type: facts.op_type.clone(),
                domain: facts.domain.clone(),
                name: facts.name.clone(),
                attributes: facts.attributes.clone(),
                anchor: facts.node,
            }
        } else {
            Computation::Authored { node: facts.node }
        };
        nodes.push(LoweredNode { computation, inputs, outputs });
    }
    Ok(nodes)
}

/// The created constants the extraction reads.
pub fn constants(egraph: &QdqEGraph, extraction: &Extraction) -> Vec<LoweredConstant> {
    let env = &egraph.analysis.env;
    let mut out: Vec<LoweredConstant> = extraction
        .chosen
        .values()
        .filter_map(|t| match t.op {
            Op::Value(v) => {
                let facts = env.value(v);
                let bytes = facts.created.clone()?;
                Some(LoweredConstant {
                    name: facts.name.clone(),
                    dtype: facts.dtype.unwrap_or(DataType::Undefined),
                    dims: facts.constant.as_ref().map(|c| c.dims.clone()).unwrap_or_default(),
                    bytes,
                })
            }
            _ => None,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn tag_of(egraph: &QdqEGraph, extraction: &Extraction, id: Id) -> Option<NodeTag> {
    let term = extraction.chosen.get(&egraph.find(id))?;
    match egraph[egraph.find(*term.args.first()?)].data.leaf {
        Some(Op::Tag(t)) => Some(t),
        _ => None,
    }
}

fn output_name(egraph: &QdqEGraph, tag: NodeTag, k: usize) -> Result<String, String> {
    let env = &egraph.analysis.env;
    let facts = env.tag(tag);
    let v = facts.outputs.get(k).copied().flatten().ok_or_else(|| format!("node '{}' has no output {k}", facts.name))?;
    Ok(env.value(v).name.clone())
}
