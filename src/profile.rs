//! The ONNX Runtime session profile under which a compiled model keeps its guarantee (spec §6):
//! ORT re-fuses any QDQ group left in a model unless told not to, and its float passes re-order
//! sums. Measured on the corpus and the decoder-like model of bench/decoder.py: with this
//! profile, ORT_ENABLE_ALL gives the bits of ORT_DISABLE_ALL (tests/oracle/test_compile_exact.py,
//! tests/oracle/test_decoder.py). The spec's comma-separated list does
//! not work: docs/session-profile.md.

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
                // ORT splits this list on ';' (inference_session.cc); a comma-separated list
                // disables nothing. ConstantFolding would fold weight DQs once QDQ handling is off,
                // and the NCHWc/NHWC layout passes re-order float and integer sums. The last three
                // fuse float ops into kernels that round differently (Add+LayerNormalization into
                // SkipLayerNormalization, MatMul+Mul and Transpose+MatMul into FusedMatMul):
                // measured on bench/decoder.py's model.
                ("optimization.disable_specified_optimizers", "ClipQuantRewrite;ReluQuantRewrite;QDQFinalCleanupTransformer;ConstantFolding;NchwcTransformer;NhwcTransformer;SkipLayerNormFusion;MatMulScaleFusion;MatmulTransposeFusion"),
            ],
        }
    }

    pub fn describe(&self) -> String {
        let entries: Vec<String> = self.config.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}, or any level with {}", self.graph_optimization_level, entries.join(" "))
    }
}
