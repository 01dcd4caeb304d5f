//! The ONNX Runtime session profile under which a compiled model keeps its guarantee (contract §6.2):
//! ORT re-fuses any QDQ group left in a model unless told not to, and its float passes re-order
//! sums. Measured on the corpus, the decoder-like model of bench/decoder.py and one model per
//! float fusion: with this profile, ORT_ENABLE_ALL gives the bits of ORT_DISABLE_ALL
//! (tests/oracle/test_compile_exact.py, test_decoder.py, test_session_profile.py). A
//! comma-separated list disables nothing: docs/session-profile.md.

use serde::Serialize;

/// Optimizer names as ORT 1.31 registers them: LayerNormFusion and GeluFusion run at two levels
/// under two names (L1, L2); MatmulBNFusion's rule is named MatMul_BatchNormalization_Fusion.
const FLOAT_FUSIONS_OFF: &str = concat!(
    "ClipQuantRewrite;ReluQuantRewrite;QDQFinalCleanupTransformer;ConstantFolding;NchwcTransformer;NhwcTransformer;",
    "SkipLayerNormFusion;MatMulScaleFusion;MatmulTransposeFusion;",
    "LayerNormFusionL1;LayerNormFusionL2;SimplifiedLayerNormFusion;GeluFusionL1;GeluFusionL2;FastGeluFusion;",
    "DivMulFusion;ConvBNFusion;ConvMulFusion;ConvAddFusion;MatMul_BatchNormalization_Fusion",
);

/// `--allow ort-float-fusions`: only what touches quantized tensors or integer kernels stays off.
/// ClipQuantRewrite/ReluQuantRewrite drop a Clip/Relu in front of a Q (changes codes),
/// QDQFinalCleanupTransformer drops Q→DQ pairs (removes a rounding), NhwcTransformer moves
/// QLinearConv to channels-last kernels (another K order than the proofs modelled). ConstantFolding,
/// NchwcTransformer and the float fusions run: they re-order or fuse float arithmetic only.
const QDQ_REWRITES_OFF: &str = "ClipQuantRewrite;ReluQuantRewrite;QDQFinalCleanupTransformer;NhwcTransformer";

/// What the report says of the float deviation `--allow ort-float-fusions` brings.
const FLOAT_DEVIATION: &str = "contract lossy for float ops: ONNX Runtime's float fusions (LayerNorm, Gelu, SkipLayerNorm, MatMul+scale, Conv+BN/Mul/Add folding, NCHWc, constant folding of weight DequantizeLinear) re-order or fuse float arithmetic at session creation; not measured by qdqc (it does not run ORT): bench/latency.py and tests/oracle/test_float_fusions.py measure it. Quantized groups keep their guarantee: QDQ handling stays disabled";

/// The ONNX Runtime session settings a compiled model must run under to keep its guarantee
/// (contract §6.2): printed by `compile` and recorded in its report.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SessionProfile {
    /// The session's `GraphOptimizationLevel`.
    pub graph_optimization_level: &'static str,
    /// Session config entries that make any other level safe too.
    pub config: Vec<(&'static str, &'static str)>,
    /// Set under `--allow ort-float-fusions`: what is lossy and who measures it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lossy: Option<&'static str>,
}

impl SessionProfile {
    /// The default profile: nothing in ORT may change a bit of the compiled model.
    pub fn ort() -> Self {
        SessionProfile {
            graph_optimization_level: "ORT_DISABLE_ALL",
            config: vec![
                ("session.disable_quant_qdq", "1"),
                ("session.disable_double_qdq_remover", "1"),
                // ORT splits this list on ';' (inference_session.cc); a comma-separated list
                // disables nothing. ConstantFolding would fold weight DQs once QDQ handling is off,
                // and the NCHWc/NHWC layout passes re-order float and integer sums. The rest fuse
                // float ops into kernels that round differently, or fold parameters into weights;
                // each one changes bits on a model of tests/oracle/test_session_profile.py.
                ("optimization.disable_specified_optimizers", FLOAT_FUSIONS_OFF),
            ],
            lossy: None,
        }
    }

    /// `--allow ort-float-fusions`: ORT_ENABLE_ALL with QDQ handling off and only the rewrites of
    /// quantized tensors disabled; float ops are lossy (`lossy` says so), integer kernels exact.
    pub fn ort_float_fusions() -> Self {
        SessionProfile {
            graph_optimization_level: "ORT_ENABLE_ALL",
            config: vec![
                ("session.disable_quant_qdq", "1"),
                ("session.disable_double_qdq_remover", "1"),
                ("optimization.disable_specified_optimizers", QDQ_REWRITES_OFF),
            ],
            lossy: Some(FLOAT_DEVIATION),
        }
    }

    /// The profile a compile with these lossy permissions prints.
    pub fn for_float_fusions(allowed: bool) -> Self {
        if allowed { Self::ort_float_fusions() } else { Self::ort() }
    }

    /// The profile in one line, for the CLI's summary.
    pub fn describe(&self) -> String {
        let entries: Vec<String> = self.config.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}, or any level with {}", self.graph_optimization_level, entries.join(" "))
    }
}
