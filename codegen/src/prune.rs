//! Initializers a rewrite left unread (every consumer of a packed weight was fused) are dropped,
//! in every graph. Kept: any initializer still read anywhere in the model (names are compared
//! model-wide, so a body's outer-scope read keeps it), one that is a graph input or output, and
//! one the original model did not read either (qdqc removes nothing the author left unused).

use qdqc_lang::onnx::GraphProto;
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
        for a in &n.attribute {
            for body in a.g.iter().chain(&a.graphs) {
                reads(body, out);
            }
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
        for a in &mut n.attribute {
            for body in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                prune(body, before, now);
            }
        }
    }
}
