//! Initializers an edit left unread (every consumer of a packed weight was fused, a zero point
//! was re-signed) are dropped, in every graph. Used by the ONNX backend and by re-signing. Kept: any initializer still read anywhere in the model (names are compared
//! model-wide, so a body's outer-scope read keeps it), one that is a graph input or output, and
//! one the original model did not read either (qdqc removes nothing the author left unused).

use crate::onnx::GraphProto;
use std::collections::BTreeSet;

/// Removes from `rebuilt` the initializers `original` read and `rebuilt` no longer does.
pub fn unread_initializers(original: &GraphProto, rebuilt: &mut GraphProto) {
    let (mut before, mut now) = (BTreeSet::new(), BTreeSet::new());
    reads(original, &mut before);
    reads(rebuilt, &mut now);
    prune(rebuilt, &before, &now);
}

/// Every name a node input or a graph output of `g` or its bodies mentions.
fn reads(g: &GraphProto, out: &mut BTreeSet<String>) {
    out.extend(g.output.iter().filter_map(|o| o.name.clone()));
    for n in &g.node {
        out.extend(n.input.iter().filter(|i| !i.is_empty()).cloned());
        for body in crate::ir::node_graphs(n) {
            reads(body, out);
        }
    }
}

fn prune(g: &mut GraphProto, before: &BTreeSet<String>, now: &BTreeSet<String>) {
    let inputs: BTreeSet<String> = g.input.iter().filter_map(|i| i.name.clone()).collect();
    g.initializer.retain(|t| {
        let name = t.name.clone().unwrap_or_default();
        now.contains(&name) || !before.contains(&name) || inputs.contains(&name)
    });
    for n in &mut g.node {
        for body in n.attribute.iter_mut().flat_map(crate::ir::attribute_graphs_mut) {
            prune(body, before, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::{AttributeProto, NodeProto, TensorProto, ValueInfoProto, attribute_proto::AttributeType};

    fn node(inputs: &[&str], body: Option<GraphProto>) -> NodeProto {
        NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            attribute: body
                .into_iter()
                .map(|g| AttributeProto { name: Some("body".into()), r#type: Some(AttributeType::Graph as i32), g: Some(g), ..Default::default() })
                .collect(),
            ..Default::default()
        }
    }

    fn init(name: &str) -> TensorProto {
        TensorProto { name: Some(name.into()), ..Default::default() }
    }

    fn named(name: &str) -> ValueInfoProto {
        ValueInfoProto { name: Some(name.into()), ..Default::default() }
    }

    fn names(g: &GraphProto) -> Vec<&str> {
        g.initializer.iter().map(|t| t.name.as_deref().unwrap()).collect()
    }

    #[test]
    fn only_initializers_the_rewrite_left_unread_go() {
        let initializers = ["w", "s", "in", "out", "unused", "outer", "kept"].map(init).to_vec();
        let original_body = GraphProto { node: vec![node(&["outer"], None)], ..Default::default() };
        let original = GraphProto {
            node: vec![node(&["w", "s", "in", "out", "kept"], None), node(&[], Some(original_body))],
            input: vec![named("in")],
            output: vec![named("out")],
            initializer: initializers.clone(),
            ..Default::default()
        };
        // The rewrite replaced every read of w, s, in, out and outer; the body's node reads a
        // packed constant of its own now.
        let body = GraphProto { node: vec![node(&["packed"], None)], initializer: vec![init("packed")], ..Default::default() };
        let mut rebuilt = GraphProto {
            node: vec![node(&["kept"], None), node(&[], Some(body))],
            input: vec![named("in")],
            output: vec![named("out")],
            initializer: initializers,
            ..Default::default()
        };
        unread_initializers(&original, &mut rebuilt);
        assert_eq!(names(&rebuilt), ["in", "out", "unused", "kept"], "graph input, graph output, already unused, still read");
        assert_eq!(names(rebuilt.node[1].attribute[0].g.as_ref().unwrap()), ["packed"]);
    }
}
