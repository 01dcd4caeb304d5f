//! The ONNX Runtime session profile under which a compiled model keeps its guarantee (spec §6):
//! ORT re-fuses any QDQ group left in a model unless told not to.

use serde::Serialize;

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SessionProfile {
    pub graph_optimization_level: &'static str,
    /// Session config entries that make any other level safe too.
    pub config: Vec<(&'static str, &'static str)>,
}

impl SessionProfile {
    pub fn ort() -> Self {
        SessionProfile {
            graph_optimization_level: "ORT_DISABLE_ALL",
            config: vec![
                ("session.disable_quant_qdq", "1"),
                ("session.disable_double_qdq_remover", "1"),
                ("optimization.disable_specified_optimizers", "ClipQuantRewrite,ReluQuantRewrite,QDQFinalCleanupTransformer"),
            ],
        }
    }

    pub fn describe(&self) -> String {
        let entries: Vec<String> = self.config.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}, or any level with {}", self.graph_optimization_level, entries.join(" "))
    }
}
