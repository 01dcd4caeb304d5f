//! Lookup-table kernels: QLinearSigmoid, QLinearLeakyRelu, QLinearWhere, QLinearConcat
//! (contract §3.7).
//!
//! Sources (ORT `onnxruntime/contrib_ops/cpu/quantization/`): `qlinear_lookup_table.cc`
//! (`QlinearBuildLookupTable`: `table[byte] = MlasQuantizeLinear(f(fl(sX·f32(code − zX))))` for
//! the code whose byte it is, looked up by the raw byte), `qlinear_activations.cc` (LeakyRelu's
//! `v >= 0 ? v : alpha·v`, Sigmoid's `MlasComputeLogistic`), `qlinear_where.cc` and
//! `qlinear_concat.cc` (per input: a plain copy when its scale compares `==` to the output's and
//! the zero points are equal, else the identity table `Q_out(DQ_in(code))`), `qlinear_util.h`.
//!
//! The tables use the same DequantizeLinear and QuantizeLinear arithmetic as the unfused graph,
//! so under `exact` they equal it by construction; P1 checks it for every code all the same, and
//! finds where the copy shortcut or the `real` contract differ.

use super::binary::all_of;
use crate::Isa;
use qdqc_exact::num::Dyadic;
use qdqc_exact::p1;
use qdqc_exact::reference::{CodeType, dequantize, dequantize_real, quantize, quantize_real};
use qdqc_exact::{Certificate, Contract, Method, QParam, Verdict};

/// The axiom QLinearSigmoid rests on (contract §2.2 case 2, §4.6).
pub const SIGMOID_AXIOM: &str = "MlasComputeLogistic: QLinearSigmoid's table and the float Sigmoid use the same routine";

/// A table of output codes for every input code, as ORT builds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lut {
    lo: i64,
    out: Vec<i64>,
}

impl Lut {
    /// `QlinearBuildLookupTable`: dequantize each code, apply `f`, quantize.
    pub fn build(x: QParam, y: QParam, f: impl Fn(f32) -> f32) -> Lut {
        let (lo, hi) = x.code.range();
        let out = (lo..=hi).map(|q| quantize(f(dequantize(q, x.scale, x.zero_point)), y.scale, y.zero_point, y.code)).collect();
        Lut { lo, out }
    }

    pub fn get(&self, code: i64) -> i64 {
        self.out[usize::try_from(code - self.lo).expect("a code of the table's type is at least its lowest code")]
    }
}

/// LeakyRelu on one f32, as ORT's table lambda and its float kernel (Eigen `select`) compute it.
pub fn leaky_relu(v: f32, alpha: f32) -> f32 {
    if v >= 0.0 { v } else { alpha * v }
}

/// QLinearLeakyRelu's table.
pub fn leaky_relu_table(x: QParam, y: QParam, alpha: f32) -> Lut {
    Lut::build(x, y, |v| leaky_relu(v, alpha))
}

/// How QLinearWhere and QLinearConcat bring one input to the output's quantization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requant {
    /// Scales compare equal as floats and zero points are equal: the bytes are copied.
    Copy,
    /// Otherwise the identity table `Q_out(DQ_in(code))`.
    Table(Lut),
}

impl Requant {
    pub fn new(input: QParam, out: QParam) -> Requant {
        // `has_same_scale` compares with `==` (so 0.0 equals −0.0 and NaN equals nothing).
        if input.scale == out.scale && input.zero_point == out.zero_point { Requant::Copy } else { Requant::Table(Lut::build(input, out, |v| v)) }
    }

    pub fn eval(&self, code: i64) -> i64 {
        match self {
            Requant::Copy => code,
            Requant::Table(t) => t.get(code),
        }
    }
}

/// QLinearSigmoid equals DQ → Sigmoid → Q on x86 by the target axiom [`SIGMOID_AXIOM`]: the
/// table is `Q(MlasComputeLogistic(DQ(code)))`, and the float Sigmoid runs the same routine on
/// the same DQ values. On x86 that routine has no separate tail arithmetic (FMA3 assembly masks
/// its tails; the SSE2 generic kernel's vector body and scalar tail both multiply then add in a
/// baseline translation unit without FMA). On ARM64 the generic kernel's vector body uses
/// `vfmaq_f32` while its C++ scalar tail is contracted only by some compilers, so elements at a
/// chunk's tail may differ from the table: unknown. Sigmoid is a library function, so the `real`
/// contract keeps it under `exact` (contract §2.3) and the contract does not enter.
pub fn prove_sigmoid(x: QParam, y: QParam, isa: Isa) -> Verdict {
    if let Err(reason) = check_unary(x, y) {
        return Verdict::Unknown { reason };
    }
    if !isa.arith().logistic_uniform {
        return Verdict::Unknown {
            reason: "arm64-neon: MlasLogisticKernel's vector body (FMA) and scalar tail (compiler-dependent contraction) may differ".to_string(),
        };
    }
    Verdict::Exact {
        proof: Certificate {
            method: Method::TargetAxiom(SIGMOID_AXIOM.to_string()),
            domain: 0,
            micros: 0,
            detail: format!("QLinearSigmoid {} {isa}: table built by the float Sigmoid's routine", x.code.name()),
        },
    }
}

/// P1 over every input code: QLinearLeakyRelu's table against `Q_y(LeakyRelu(DQ_x(x)))`.
pub fn prove_leaky_relu(x: QParam, y: QParam, alpha: f32, contract: Contract) -> Verdict {
    if let Err(reason) = check_unary(x, y) {
        return Verdict::Unknown { reason };
    }
    let table = leaky_relu_table(x, y, alpha);
    let exact_value = |q: i64| {
        let v = dequantize_real(q, x.scale, x.zero_point)?;
        if v.mant >= 0 { Some(v) } else { v.checked_mul(Dyadic::from_f32(alpha)?) }
    };
    let reference = match contract {
        Contract::Exact => Some(Lut::build(x, y, |v| leaky_relu(v, alpha))),
        Contract::Real => real_lut(x, y, exact_value),
    };
    let Some(reference) = reference else {
        return Verdict::Unknown { reason: format!("no exact value for LeakyRelu (alpha {alpha}) with these scales") };
    };
    let detail = format!("QLinearLeakyRelu {} alpha {alpha}: every input code", x.code.name());
    p1::exhaustive(&[x.domain("x")], &detail, |p| reference.get(p[0]), |p| table.get(p[0]), |p| exact_text(exact_value(p[0]), y))
}

/// P1 over both value inputs' codes: QLinearWhere against `Q_z(Where(c, DQ_x(x), DQ_y(y)))`.
/// The condition only selects, so each input is checked on its own.
pub fn prove_where(x: QParam, y: QParam, z: QParam, contract: Contract) -> Verdict {
    prove_requants("QLinearWhere", &[("x", x), ("y", y)], z, contract)
}

/// P1 over every input's codes: QLinearConcat against `Q_y(Concat(DQ_i(x_i)...))`.
pub fn prove_concat(inputs: &[QParam], y: QParam, contract: Contract) -> Verdict {
    let named: Vec<(String, QParam)> = inputs.iter().enumerate().map(|(i, &q)| (format!("x{i}"), q)).collect();
    let named: Vec<(&str, QParam)> = named.iter().map(|(n, q)| (n.as_str(), *q)).collect();
    prove_requants("QLinearConcat", &named, y, contract)
}

fn prove_requants(op: &str, inputs: &[(&str, QParam)], out: QParam, contract: Contract) -> Verdict {
    for &(_, q) in inputs {
        if let Err(reason) = check_unary(q, out) {
            return Verdict::Unknown { reason };
        }
    }
    let mut checks = Vec::new();
    for &(name, q) in inputs {
        let exact_value = |c: i64| dequantize_real(c, q.scale, q.zero_point);
        let reference = match contract {
            Contract::Exact => Some(Lut::build(q, out, |v| v)),
            Contract::Real => real_lut(q, out, exact_value),
        };
        let Some(reference) = reference else {
            return Verdict::Unknown { reason: format!("{op}: no exact value for input {name} with these scales") };
        };
        checks.push((name, q, reference, Requant::new(q, out)));
    }
    let verdicts = checks.iter().map(|(name, q, reference, kernel)| {
        let detail = format!("{op} {} input {name} ({}): every code", q.code.name(), if *kernel == Requant::Copy { "copy" } else { "table" });
        let exact = |c: i64| exact_text(dequantize_real(c, q.scale, q.zero_point), out);
        p1::exhaustive(&[q.domain(name)], &detail, |p| reference.get(p[0]), |p| kernel.eval(p[0]), |p| exact(p[0]))
    });
    all_of(verdicts, format!("{op} {}: every code of every input", out.code.name()))
}

/// The `real` contract's table: `sat(rne(v/s_y) + z_y)` of each code's exact value.
fn real_lut(x: QParam, y: QParam, exact: impl Fn(i64) -> Option<Dyadic>) -> Option<Lut> {
    let (lo, hi) = x.code.range();
    let out = (lo..=hi).map(|q| quantize_real(exact(q)?, y.scale, y.zero_point, y.code)).collect::<Option<Vec<i64>>>()?;
    Some(Lut { lo, out })
}

fn exact_text(v: Option<Dyadic>, y: QParam) -> Option<String> {
    Some(format!("v/sY = {}", super::binary::ratio_text(v?, Dyadic::from_f32(y.scale)?)?))
}

/// ORT's lookup-table kernels take one 8-bit type for input and output, zero points of it.
fn check_unary(x: QParam, y: QParam) -> Result<(), String> {
    if !matches!(y.code, CodeType::U8 | CodeType::I8) || x.code != y.code {
        return Err("lookup-table kernels take one 8-bit type for input and output".to_string());
    }
    let (lo, hi) = y.code.range();
    match [x.zero_point, y.zero_point].into_iter().find(|z| !(lo..=hi).contains(z)) {
        Some(z) => Err(format!("zero point {z} is not a {} value", y.code.name())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_params::{i8p, u8p};

    #[test]
    fn leaky_relu_table_is_the_reference_by_construction() {
        let (x, y) = (u8p(0.0374, 131), u8p(0.0213, 17));
        let v = prove_leaky_relu(x, y, 0.1, Contract::Exact);
        assert!(v.is_exact(), "{v:?}");
        // Hand-computed: code 121 → DQ = fl(−10·0.0374) = −0.374, ·0.1 → −0.0374, /0.0213 → −1.76 → −2, + 17 = 15.
        assert_eq!(leaky_relu_table(x, y, 0.1).get(121), 15);
        // Code 141 → 0.374 / 0.0213 = 17.56 → 18 + 17 = 35.
        assert_eq!(leaky_relu_table(x, y, 0.1).get(141), 35);
    }

    #[test]
    fn leaky_relu_under_real_is_refuted_where_dq_rounding_crosses_a_tie() {
        // x scale 0.1 (not dyadic): DQ rounds, so some quotient lands on the other side of a tie
        // than the exact real value; a 2^-k output scale makes the ties reachable.
        let found = (1..200).map(|k| 0.01 * k as f32).find(|&sx| prove_leaky_relu(u8p(sx, 128), u8p(sx * 0.5, 128), 0.25, Contract::Real).word() == "refuted");
        assert!(found.is_some(), "some scale separates the f32 table from the exact real values");
    }

    #[test]
    fn int8_tables_follow_the_code_not_the_byte() {
        let (x, y) = (i8p(0.5, -3), i8p(0.25, 5));
        let t = leaky_relu_table(x, y, 0.5);
        // −128 → DQ = −62.5 → ·0.5 = −31.25 → /0.25 = −125 → −120; byte 0x80 is the code −128.
        assert_eq!(t.get(-128), -120);
        assert_eq!(t.get(127), 127);
        assert_eq!(t.get(-3), 5);
    }

    #[test]
    fn requant_copies_only_for_equal_parameters() {
        let y = u8p(0.05, 10);
        assert_eq!(Requant::new(u8p(0.05, 10), y), Requant::Copy);
        assert!(matches!(Requant::new(u8p(0.05, 11), y), Requant::Table(_)));
        assert!(matches!(Requant::new(u8p(0.1, 10), y), Requant::Table(_)));
        assert!(prove_concat(&[u8p(0.05, 10), u8p(0.07, 3), u8p(0.03, 250)], y, Contract::Exact).is_exact());
        assert!(prove_where(u8p(0.07, 3), u8p(0.05, 10), y, Contract::Exact).is_exact());
    }

    #[test]
    fn copy_differs_from_the_reference_when_the_round_trip_is_not_the_identity() {
        // Equal parameters with a huge scale: DQ overflows to ±inf for codes away from the zero
        // point and Q(±inf) saturates, while the copy keeps the code. (Q(DQ(q)) = q needs
        // finite DQ values, contract §4.5.)
        let huge = u8p(3.0e38, 128);
        let v = prove_concat(&[huge], huge, Contract::Exact);
        let c = v.counterexample().unwrap_or_else(|| panic!("{v:?}"));
        assert_eq!(c.inputs[0].0, "x0");
        assert_ne!(c.unfused, c.fused);
    }

    #[test]
    fn where_real_contract_is_refuted_for_inexact_rescaling() {
        // y's DQ values 0.05·k are rounded in f32; divided by 0.3 some land on the other side
        // of a tie than the exact (k·0.05)/0.3 does.
        let v = prove_where(u8p(0.1, 128), u8p(0.05, 128), u8p(0.3, 128), Contract::Real);
        let c = v.counterexample().unwrap_or_else(|| panic!("{v:?}"));
        assert_eq!(c.inputs[0].0, "y");
        assert!(prove_where(u8p(0.1, 128), u8p(0.05, 128), u8p(0.3, 128), Contract::Exact).is_exact());
    }

    #[test]
    fn sigmoid_rests_on_the_axiom_on_x86_only() {
        let (x, y) = (u8p(0.08, 128), u8p(1.0 / 256.0, 0));
        for isa in [Isa::X86Sse2, Isa::X86Avx2, Isa::X86Avx512Vnni] {
            match prove_sigmoid(x, y, isa) {
                Verdict::Exact { proof } => assert_eq!(proof.method, Method::TargetAxiom(SIGMOID_AXIOM.to_string())),
                other => panic!("{isa}: {other:?}"),
            }
        }
        assert_eq!(prove_sigmoid(x, y, Isa::Arm64Neon).word(), "unknown");
        assert_eq!(prove_sigmoid(x, i8p(1.0 / 256.0, 0), Isa::X86Avx2).word(), "unknown");
    }

    #[test]
    fn out_of_range_zero_points_are_unknown() {
        assert_eq!(prove_leaky_relu(u8p(0.1, 300), u8p(0.1, 0), 0.1, Contract::Exact).word(), "unknown");
    }
}
