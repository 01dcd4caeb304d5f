//! Broken fusions into ORT's quantized kernels (the rules of `qdqc_rewrites::rules::{binary,
//! lut, pool}` and the fusions ORT makes that qdqc never does), each checked against the models
//! of `qdqc_ort`.

use crate::Broken;
use crate::geometry::pool_geometry_5x5;
use qdqc_exact::p1::exhaustive;
use qdqc_exact::reference::{CodeType, dequantize, quantize};
use qdqc_exact::{Contract, QParam, Verdict};
use qdqc_ort::Isa;
use qdqc_ort::binary::{BinaryKernel, BinaryOp, BinaryParams, Broadcast, builds};
use qdqc_ort::lut::{self, Lut};
use qdqc_ort::pool::{self, PoolParams};
use qdqc_ort::softmax;

pub fn rules() -> Vec<Broken> {
    vec![
        Broken {
            name: "qlinear_add_avx2_formula_claimed_for_sse2",
            claim: "one x86 model serves every x86 profile: the AVX2 kernel's fma(a, rA, fma(b, rB, Fixed)) stands for SSE2's (Fixed + a·rA) + b·rB",
            // The seed model's Add2 (sA 0.15, sB 0.37, sC 0.38, zero points 128).
            broken: || avx2_as_sse2(BinaryParams { a: u8p(0.15, 128), b: u8p(0.37, 128), c: u8p(0.38, 128) }),
            // Power-of-two scales: every product and sum is exact, so both formulas agree.
            twin: Some(|| avx2_as_sse2(BinaryParams { a: u8p(0.25, 128), b: u8p(0.5, 128), c: u8p(1.0, 128) })),
        },
        Broken {
            name: "qlinear_softmax_claimed_exact",
            claim: "QLinearSoftmax equals DQ → Softmax → Q (ORT fuses it by default; its table, floor(1/sY) and sequential sum are unrelated to the float Softmax)",
            broken: || softmax::prove(u8p(0.5, 0), u8p(0.006, 0), 2, Isa::X86Avx512Vnni),
            twin: None,
        },
        Broken {
            name: "qlinear_sigmoid_on_arm_without_axiom",
            claim: "on arm64-neon QLinearSigmoid equals DQ → Sigmoid → Q at every position: its table comes from MlasLogisticKernel's vector body (FMA), but the float Sigmoid computes a chunk's last N mod 4 elements in the scalar tail, which clang does not contract",
            broken: || sigmoid_table_against(u8p(0.21391, 128), u8p(1.0 / 256.0, 0), false),
            // Where both sides run the same arithmetic (x86's FMA3 kernel masks its tails; on
            // NEON, positions in the vector body), the table is the float Sigmoid's.
            twin: Some(|| sigmoid_table_against(u8p(0.21391, 128), u8p(1.0 / 256.0, 0), true)),
        },
        Broken {
            name: "qlinear_leaky_relu_table_claimed_real",
            claim: "QLinearLeakyRelu meets the `real` contract: its table's f32 DQ values are taken for the exact (q − zX)·sX",
            broken: || lut::prove_leaky_relu(u8p(0.01, 128), u8p(0.005, 128), 0.25, Contract::Real),
            // Power-of-two scales: DQ and LeakyRelu are exact in f32.
            twin: Some(|| lut::prove_leaky_relu(u8p(0.125, 128), u8p(0.0625, 128), 0.25, Contract::Real)),
        },
        Broken {
            name: "qlinear_concat_copy_with_overflowing_scale",
            claim: "inputs quantized like the output may be copied by QLinearConcat (and QLinearWhere) whatever the scale: Q(DQ(q)) = q needs finite DQ values",
            broken: || lut::prove_concat(&[u8p(3.0e38, 128), u8p(3.0e38, 128)], u8p(3.0e38, 128), Contract::Exact),
            twin: Some(|| lut::prove_concat(&[u8p(0.05, 128), u8p(0.05, 128)], u8p(0.05, 128), Contract::Exact)),
        },
        Broken {
            name: "global_avgpool_float_sum_not_exact",
            claim: "QLinearGlobalAveragePool equals DQ → GlobalAveragePool → Q whatever the scales (ORT's selector fuses it unchecked); refuted by one code and six zero points, a float sum exact in any order",
            broken: || pool::prove_global_average_pool(&PoolParams { x: u8p(0.03, 128), y: u8p(0.02, 128) }, 7, Contract::Exact),
            // sX = 2^-4 over 4 inputs: every partial sum is exact (P2), and the kernel's
            // multiplier sX/(sY·4) = 1 is exact.
            twin: Some(|| pool::prove_global_average_pool(&PoolParams { x: u8p(0.0625, 128), y: u8p(0.015625, 128) }, 4, Contract::Exact)),
        },
        Broken {
            name: "qlinear_average_pool_zero_point_before_rounding",
            claim: "QLinearAveragePool's float path equals DQ → AveragePool → Q; it rounds fl(y/sY + zY), which moves values next to a tie onto it",
            broken: || pool::prove_average_pool(&PoolParams { x: u8p(0.5, 128), y: u8p(0.3, 128) }, &pool_geometry_5x5(), Isa::X86Avx512Vnni, Contract::Exact),
            // With zY = 0 the zero point cannot move the quotient.
            twin: Some(|| {
                pool::prove_average_pool(&PoolParams { x: u8p(0.5, 128), y: u8p(0.3, 0) }, &pool_geometry_5x5(), Isa::X86Avx512Vnni, Contract::Exact)
            }),
        },
    ]
}

fn u8p(scale: f32, zero_point: i64) -> QParam {
    QParam::new(scale, zero_point, CodeType::U8)
}

/// P1 over every code pair: the SSE2 kernel (what an SSE2 CPU runs) against the AVX2 kernel's
/// Linux build (what the broken rule claims it runs).
fn avx2_as_sse2(p: BinaryParams) -> Verdict {
    let kernel = |isa| BinaryKernel::new(BinaryOp::Add, &p, Broadcast::None, isa, builds(BinaryOp::Add, isa)[0]).expect("an 8-bit QLinearAdd");
    let (sse2, avx2) = (kernel(Isa::X86Sse2), kernel(Isa::X86Avx2));
    exhaustive(
        &[p.a.domain("a"), p.b.domain("b")],
        "QLinearAdd: SSE2 kernel against the AVX2 formula",
        |x| sse2.eval(x[0], x[1]),
        |x| avx2.eval(x[0], x[1]),
        |_| None,
    )
}

/// `MlasLogisticKernel` (`core/mlas/lib/logistic.cpp`): Eigen's rational approximation on the
/// input clamped to ±18, `p/q + 0.5` clamped to [0, 1]. The vector body on ARM64 multiplies and
/// adds with `vfmaq_f32` (`fma`); the scalar tail writes `a * b + c` (`fma` false as clang
/// compiles it). A test model written from the source: no ARM machine checks it here.
#[allow(clippy::excessive_precision, reason = "MLAS's constants, as its source writes them")]
fn mlas_logistic(v: f32, fma: bool) -> f32 {
    const ALPHA: [f32; 5] = [4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05, 8.51377133304701e-03, 2.48287947061529e-01];
    const BETA: [f32; 6] = [6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06, 1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01];
    let mul_add = |a: f32, b: f32, c: f32| if fma { a.mul_add(b, c) } else { a * b + c };
    let v = v.clamp(-18.0, 18.0);
    let v2 = v * v;
    let p = ALPHA[2..].iter().fold(mul_add(v2, ALPHA[0], ALPHA[1]), |p, &a| mul_add(p, v2, a)) * v;
    let q = BETA[2..].iter().fold(mul_add(v2, BETA[0], BETA[1]), |q, &b| mul_add(q, v2, b));
    (p / q + 0.5).clamp(0.0, 1.0)
}

/// P1 over every input code: QLinearSigmoid's table (256 elements, all in the vector body)
/// against the float Sigmoid computed by the vector body (`vector_body`) or by the scalar tail.
fn sigmoid_table_against(x: QParam, y: QParam, vector_body: bool) -> Verdict {
    let table = Lut::build(x, y, |v| mlas_logistic(v, true));
    let unfused = |q: i64| quantize(mlas_logistic(dequantize(q, x.scale, x.zero_point), vector_body), y.scale, y.zero_point, y.code);
    let detail = if vector_body { "QLinearSigmoid table against the vector body" } else { "QLinearSigmoid table against the scalar tail" };
    exhaustive(&[x.domain("x")], detail, |q| unfused(q[0]), |q| table.get(q[0]), |_| None)
}
