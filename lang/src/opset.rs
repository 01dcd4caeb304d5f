//! The operator-set versions qdqc knows: those of the vendored schema (onnx 1.23.2).

use crate::onnx::ModelProto;

/// Highest opset version per standard domain. Custom domains are opaque to qdqc and accepted at any
/// positive version.
const KNOWN: &[(&str, i64)] = &[("", 28), ("ai.onnx", 28), ("ai.onnx.ml", 5), ("ai.onnx.preview", 1), ("ai.onnx.preview.training", 1), ("com.microsoft", 1)];

/// Version of the default ONNX domain the model imports.
pub fn default_domain_version(model: &ModelProto) -> Option<i64> {
    model.opset_import.iter().find(|o| matches!(o.domain.as_deref().unwrap_or(""), "" | "ai.onnx")).and_then(|o| o.version)
}

/// Refuses opset imports qdqc cannot interpret: unknown versions of standard domains, and versions
/// below 1. A newer default-domain opset could redefine Q/DQ semantics, so it is never guessed at.
pub fn check_imports(model: &ModelProto) -> Result<(), String> {
    if model.opset_import.is_empty() {
        return Err("model imports no operator set".into());
    }
    for import in &model.opset_import {
        let domain = import.domain.as_deref().unwrap_or("");
        let version = import.version.unwrap_or(0);
        let shown = if domain.is_empty() { "ai.onnx (default domain)" } else { domain };
        if version < 1 {
            return Err(format!("opset import {shown} has invalid version {version}"));
        }
        if let Some(&(_, max)) = KNOWN.iter().find(|(d, _)| *d == domain)
            && version > max
        {
            return Err(format!("unknown opset version {version} for domain {shown} (qdqc knows versions 1 to {max})"));
        }
    }
    Ok(())
}

/// Domains ONNX Runtime 1.31 registers on CPU and imports at their latest version when a model
/// uses them without an `opset_import` (`Model::Model` in onnxruntime/core/graph/model.cc fills
/// every registered domain the model leaves out): NNCF writes such models.
const ORT_IMPLICIT: &[&str] =
    &["ai.onnx.ml", "ai.onnx.preview.training", "com.microsoft", "com.microsoft.experimental", "com.microsoft.nchwc", "com.ms.internal.nhwc"];

/// Whether ONNX Runtime accepts nodes of `domain` although the model does not import it.
pub fn implicitly_imported(domain: &str) -> bool {
    ORT_IMPLICIT.contains(&domain)
}

/// Every domain that nodes of the model (subgraphs included) use without importing it, and that
/// ONNX Runtime imports implicitly, with the first node using it: kept as authored, reported.
pub fn implicit_imports(model: &ModelProto) -> Vec<(String, String)> {
    fn walk(model: &ModelProto, g: &crate::onnx::GraphProto, out: &mut Vec<(String, String)>) {
        for (pos, n) in g.node.iter().enumerate() {
            let domain = n.domain.as_deref().unwrap_or("");
            if !domain_imported(model, domain) && implicitly_imported(domain) && !out.iter().any(|(d, _)| d == domain) {
                let name = n.label(pos);
                out.push((domain.to_string(), format!("node '{name}' ({})", n.op_type.as_deref().unwrap_or(""))));
            }
            for sub in crate::ir::node_graphs(n) {
                walk(model, sub, out);
            }
        }
    }
    let mut out = Vec::new();
    if let Some(g) = &model.graph {
        walk(model, g, &mut out);
    }
    out
}

/// Whether nodes of `domain` may appear: imported by the model, or a model-local function's domain.
pub fn domain_imported(model: &ModelProto, domain: &str) -> bool {
    let norm = |d: &str| if d == "ai.onnx" { String::new() } else { d.to_string() };
    let wanted = norm(domain);
    model.opset_import.iter().any(|o| norm(o.domain.as_deref().unwrap_or("")) == wanted)
        || model.functions.iter().any(|f| norm(f.domain.as_deref().unwrap_or("")) == wanted)
}
