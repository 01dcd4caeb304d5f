//! Rule-level tests: every family of the catalog (`FAMILIES`) and every form a family's file
//! documents (the u8-weight and two-activation QLinearMatMul, QGemm with bias, the lookup-table
//! kernels, MatMulNBits' Gemm and Cast forms) has an accepted and a refused instance, and
//! `every_family_is_tested_both_ways` keeps it so. A one-group model is lifted and the named rule
//! alone is run on it (contract `exact` on every ISA profile unless a test says otherwise), and
//! its decision is asserted: fired with every verdict exact, refused with the verdict word given,
//! or absent from the catalog of the options. Then what the decision claims is recomputed with
//! the engine's reference (`qdqc_exact::reference`) and the kernel models (`qdqc_ort`), never with
//! the rule's own code: for a fired rule, the fused form against the unfused group on every code
//! (or every accumulator, where the codes are too many) or the emitted constants element by
//! element; for a refusal, the counterexample's inputs through both sides, or the unknown
//! verdict's reason. No ONNX Runtime, no Python: `cargo test -p qdqc-rewrites --test families`
//! is the rules' inner loop. (The end-to-end tests against ONNX Runtime are `tests/rules*.rs` of
//! the facade.)

// The 5×5 pool geometry of [`average_pool`], shared with the facade's tests.
#[path = "../../tests/common/geometry.rs"]
mod geometry;

use geometry::pool_geometry_5x5;
use prost::Message;
use qdqc_exact::num::Dyadic;
use qdqc_exact::reference::{CodeType, dequantize, dequantize_real, quantize, quantize_real};
use qdqc_exact::{Contract, Counterexample, Method, QParam, Verdict};
use qdqc_lang::Model;
use qdqc_lang::onnx::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    attribute_proto::AttributeType, tensor_shape_proto::Dimension, tensor_shape_proto::dimension, type_proto,
};
use qdqc_lang::scope::Scope;
use qdqc_lower::{Limits, lift, region};
use qdqc_ort::binary::{BinaryKernel, BinaryOp, BinaryParams, Broadcast, builds};
use qdqc_ort::lut::{self, Requant};
use qdqc_ort::nbits::{AccuracyLevel, Packed, f16_to_f32};
use qdqc_ort::pool::{self, AveragePoolKernel, GlobalPoolKernel, PoolParams};
use qdqc_ort::requant::{GemmGroup, GemmKind, accumulate, column_channels, output_multiplier, requantize};
use qdqc_ort::{Isa, OrtTarget};
use qdqc_rewrites::rules::{Allow, Decision, FAMILIES, RuleOptions};
use qdqc_rewrites::{Log, catalog};
use qdqc_rewrites::{Profile, Target};

const F32: i32 = 1;
const U8: i32 = 2;
const I8: i32 = 3;
const I32: i32 = 6;
const I64: i32 = 7;
const BOOL: i32 = 9;
const I4: i32 = 22;

/// `rule_test!(name: model[, options] => "rule" fired[, check])`,
/// `rule_test!(name: model[, options] => "rule" refused "verdict"[, check])` or
/// `rule_test!(name: model[, options] => "rule" absent)`. The options default to [`exact`];
/// `check` recomputes what the decision claims (the emitted constants, the counterexample).
macro_rules! rule_test {
    ($name:ident: $model:expr $(, $options:expr)? => $rule:literal fired $(, $check:expr)?) => {
        #[test]
        fn $name() {
            let _run = run($model, $rule, or_exact!($($options)?), Expect::Fired);
            $(($check)(&_run);)?
        }
    };
    ($name:ident: $model:expr $(, $options:expr)? => $rule:literal refused $verdict:literal $(, $check:expr)?) => {
        #[test]
        fn $name() {
            let _run = run($model, $rule, or_exact!($($options)?), Expect::Refused($verdict));
            $(($check)(&_run);)?
        }
    };
    ($name:ident: $model:expr $(, $options:expr)? => $rule:literal absent) => {
        #[test]
        fn $name() {
            run($model, $rule, or_exact!($($options)?), Expect::Absent);
        }
    };
}

/// The options a test names, else [`exact`].
macro_rules! or_exact {
    () => {
        exact()
    };
    ($options:expr) => {
        $options
    };
}

/// What a test expects of the named rule.
enum Expect {
    /// Fired with every verdict exact (a lossy rule: with its lossy record).
    Fired,
    /// Not fired, with at least one verdict of this word.
    Refused(&'static str),
    /// Not in the catalog these options build, so no decision.
    Absent,
}

fn options(contract: Contract) -> RuleOptions {
    RuleOptions { contract, target: OrtTarget::generic().into(), fold_weights: false, allow: Allow::default(), memo: Default::default() }
}

/// Contract `exact` on every ISA profile, nothing opted in.
fn exact() -> RuleOptions {
    options(Contract::Exact)
}

fn real() -> RuleOptions {
    options(Contract::Real)
}

/// The x86 profiles only.
fn x86() -> RuleOptions {
    RuleOptions { target: OrtTarget::on(&[Isa::X86Sse2, Isa::X86Avx2, Isa::X86Avx512Vnni]).unwrap().into(), ..exact() }
}

/// The Rust target (contract §3.12): its kernels' proofs instead of ORT's.
fn rust(contract: Contract) -> RuleOptions {
    RuleOptions { target: Target::Rust(qdqc_target_rust::RustTarget::generic()), ..options(contract) }
}

/// The ISA of an ORT verdict: the checks below recompute ORT's kernel models.
fn ort_isa(p: Profile) -> Isa {
    match p {
        Profile::Ort(isa) => isa,
        Profile::Rust(r) => panic!("a Rust-target verdict ({}) where an ORT one was expected", r.name()),
    }
}

/// `--fold-weights`.
fn folding() -> RuleOptions {
    RuleOptions { fold_weights: true, ..exact() }
}

/// `--allow matmulnbits=acc1`.
fn matmulnbits() -> RuleOptions {
    RuleOptions { allow: Allow { matmulnbits: Some(AccuracyLevel::Acc1), ..Allow::default() }, ..exact() }
}

/// The decision of the rule under test and the constants the run created (name → dims, bytes).
struct Run {
    decision: Option<Decision>,
    created: Vec<(String, Vec<i64>, Vec<u8>)>,
}

impl Run {
    fn decision(&self) -> &Decision {
        self.decision.as_ref().expect("a decision (checked by run)")
    }

    /// The bytes of the created constant `name`, with its dims.
    fn constant(&self, name: &str) -> (&[i64], &[u8]) {
        let found = self.created.iter().find(|(n, ..)| n == name);
        let (_, dims, bytes) =
            found.unwrap_or_else(|| panic!("no created constant '{name}'; created: {:?}", self.created.iter().map(|c| &c.0).collect::<Vec<_>>()));
        (dims, bytes)
    }

    /// The refuted verdicts' counterexamples, with their profiles (at least one).
    fn counterexamples(&self) -> Vec<(Isa, &Counterexample)> {
        let found: Vec<_> = self
            .decision()
            .verdicts
            .iter()
            .filter_map(|(p, v)| if let Verdict::Refuted { counterexample, .. } = v { Some((ort_isa(*p), counterexample)) } else { None })
            .collect();
        assert!(!found.is_empty(), "no counterexample in {:?}", self.decision().verdicts);
        found
    }

    /// The reasons of the unknown verdicts (at least one).
    fn reasons(&self) -> Vec<&str> {
        let found: Vec<_> =
            self.decision().verdicts.iter().filter_map(|(_, v)| if let Verdict::Unknown { reason } = v { Some(reason.as_str()) } else { None }).collect();
        assert!(!found.is_empty(), "no unknown verdict in {:?}", self.decision().verdicts);
        found
    }
}

/// Lifts `m` region by region, runs the rule named `rule` alone (the catalog's rewrite whose
/// name it starts with: `qlinear-matmul` decides `qlinear-matmul-u8-weights`) under the lowering's
/// default limits, and asserts the expectation on its decision.
fn run(m: ModelProto, rule: &str, options: RuleOptions, expect: Expect) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("case.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    let model = Model::load(&path).unwrap();
    let log = Log::default();
    let mut rules = catalog(&options, &log);
    rules.retain(|r| rule.starts_with(r.name.as_str()));
    if let Expect::Absent = expect {
        let names = qdqc_lower::rule_names(&options);
        assert!(rules.is_empty() && !names.iter().any(|n| rule.starts_with(n.as_str())), "{rule}: in the catalog of these options: {names:?}");
    }
    let limits = Limits::default();
    let scopes = Scope::main(&model);
    let mut created = Vec::new();
    for region in region::regions(&model.graph, scopes.current()) {
        let lifted = lift::lift(&model, &model.graph, &scopes, &region);
        let runner = egg::Runner::default()
            .with_iter_limit(limits.iterations)
            .with_node_limit(limits.nodes)
            .with_time_limit(limits.time)
            .with_scheduler(egg::SimpleScheduler)
            .with_egraph(lifted.egraph)
            .run(&rules);
        for v in &runner.egraph.analysis.env.values {
            if let (Some(bytes), Some(c)) = (&v.created, &v.constant) {
                created.push((v.name.clone(), c.dims.clone(), bytes.clone()));
            }
        }
    }
    let decisions: Vec<Decision> = log.take().into_iter().filter(|d| d.rule == rule).collect();
    let decision = match (decisions.len(), expect) {
        (0, Expect::Absent) => None,
        (_, Expect::Absent) => panic!("{rule}: decided though not in the catalog: {decisions:?}"),
        (1, expect) => {
            let d = decisions.into_iter().next().expect("one");
            let words: Vec<&str> = d.verdicts.iter().map(|(_, v)| v.word()).collect();
            match expect {
                Expect::Fired => assert!(
                    d.fired && words.iter().all(|w| *w == "exact") && (!words.is_empty() || d.lossy.is_some()),
                    "{rule}: expected fired and exact, got fired={} {:?}",
                    d.fired,
                    d.verdicts
                ),
                Expect::Refused(word) => {
                    assert!(!d.fired && words.contains(&word), "{rule}: expected refused ({word}), got fired={} {:?}", d.fired, d.verdicts)
                }
                Expect::Absent => unreachable!("matched above"),
            }
            Some(d)
        }
        (n, _) => panic!("{rule}: {n} decisions: {decisions:?}"),
    };
    Run { decision, created }
}

// ------------------------------------------------------------------------------------------------
// One-group models: DQ of each input, the op, Q of its output.

/// Scale and zero point of one end, with its code type.
#[derive(Clone, Copy)]
struct P(f32, i64, i32);

const fn u8p(s: f32, z: i64) -> P {
    P(s, z, U8)
}

fn scalar(name: &str, p: P) -> [TensorProto; 2] {
    let s = TensorProto { name: Some(format!("s_{name}")), data_type: Some(F32), raw_data: Some(p.0.to_le_bytes().to_vec().into()), ..Default::default() };
    let z = if p.2 == I32 { (p.1 as i32).to_le_bytes().to_vec() } else { vec![p.1 as u8] };
    let z = TensorProto { name: Some(format!("z_{name}")), data_type: Some(p.2), raw_data: Some(z.into()), ..Default::default() };
    [s, z]
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(outputs[0].to_string()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn value(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    let dim = dims.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), ..Default::default() }).collect();
    let tensor = type_proto::Tensor { elem_type: Some(elem), shape: Some(TensorShapeProto { dim }) };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(tensor)), ..Default::default() }),
        ..Default::default()
    }
}

/// Activations `inputs` (quantized graph inputs), constant quantized `weights`, the ops reading
/// `dq_<name>` of each, and their output `r` quantized to `out`.
fn group(inputs: &[(&str, P, Vec<i64>)], weights: &[(&str, P, Vec<i64>, Vec<u8>)], ops: Vec<NodeProto>, out: P, out_dims: &[i64]) -> ModelProto {
    let dq = |n: &str| node("DequantizeLinear", &[n, &format!("s_{n}"), &format!("z_{n}")], &[&format!("dq_{n}")]);
    let mut nodes: Vec<NodeProto> = inputs.iter().map(|(n, ..)| dq(n)).chain(weights.iter().map(|(n, ..)| dq(n))).collect();
    nodes.extend(ops);
    nodes.push(node("QuantizeLinear", &["r", "s_out", "z_out"], &["out"]));
    let mut inits: Vec<TensorProto> = inputs.iter().flat_map(|(n, p, _)| scalar(n, *p)).collect();
    for (n, p, dims, codes) in weights {
        inits.extend(scalar(n, *p));
        inits.push(TensorProto {
            name: Some(n.to_string()),
            dims: dims.clone(),
            data_type: Some(p.2),
            raw_data: Some(codes.clone().into()),
            ..Default::default()
        });
    }
    inits.extend(scalar("out", out));
    let inputs = inputs.iter().map(|(n, p, d)| value(n, p.2, d)).collect();
    model(nodes, inputs, vec![value("out", out.2, out_dims)], inits)
}

/// An opset-21 model of one graph.
fn model(nodes: Vec<NodeProto>, inputs: Vec<ValueInfoProto>, outputs: Vec<ValueInfoProto>, inits: Vec<TensorProto>) -> ModelProto {
    let graph = GraphProto { name: Some("family_case".into()), node: nodes, input: inputs, output: outputs, initializer: inits, ..Default::default() };
    let opset = OperatorSetIdProto { domain: Some(String::new()), version: Some(21) };
    ModelProto { ir_version: Some(10), opset_import: vec![opset], graph: Some(graph), ..Default::default() }
}

fn binary(op: &str, p: [P; 3]) -> ModelProto {
    group(&[("a", p[0], vec![16]), ("b", p[1], vec![16])], &[], vec![node(op, &["dq_a", "dq_b"], &["r"])], p[2], &[16])
}

/// u8 x[3, 4] × i8 W[4, 2] (small weights, per tensor) → u8 y[3, 2].
fn matmul(scales: [f32; 3]) -> ModelProto {
    matmul_of(SMALL, scales)
}

/// [`matmul`] with these weights (row-major `[4, 2]`, zero point 0).
fn matmul_of(w: [i8; 8], [sx, sw, sy]: [f32; 3]) -> ModelProto {
    let w: Vec<u8> = w.iter().map(|&v| v as u8).collect();
    let op = node("MatMul", &["dq_x", "dq_w"], &["r"]);
    group(&[("x", u8p(sx, 128), vec![3, 4])], &[("w", P(sw, 0, I8), vec![4, 2], w)], vec![op], u8p(sy, 128), &[3, 2])
}

/// The weights of [`matmul`], row-major `[4, 2]`, and their columns (the output channels).
const SMALL: [i8; 8] = [3, -7, 12, 1, -5, 9, 2, -11];
const SMALL_COLUMNS: [[i64; 4]; 2] = [[3, 12, -5, 2], [-7, 1, 9, -11]];
const BIAS: [i32; 2] = [-300, 1000];

/// `Q(Gemm(DQ(x u8[3, 4]), DQ(W), DQ(b int32[2], scale sb)))` with W of [`matmul`].
fn gemm_with_bias([sx, sw, sy]: [f32; 3], sb: f32) -> ModelProto {
    let w: Vec<u8> = SMALL.iter().map(|&v| v as u8).collect();
    let b: Vec<u8> = BIAS.iter().flat_map(|v| v.to_le_bytes()).collect();
    let op = node("Gemm", &["dq_x", "dq_w", "dq_b"], &["r"]);
    let weights = [("w", P(sw, 0, I8), vec![4, 2], w), ("b", P(sb, 0, I32), vec![2], b)];
    group(&[("x", u8p(sx, 128), vec![3, 4])], &weights, vec![op], u8p(sy, 128), &[3, 2])
}

/// `Q(Conv(DQ(x u8[1, 1, 3, 3]), DQ(W i8[2, 1, 2, 2])))`: two output channels of 2×2 kernels,
/// the weights of [`matmul`] read as the rows of W.
fn conv([sx, sw, sy]: [f32; 3]) -> ModelProto {
    let w: Vec<u8> = SMALL.iter().map(|&v| v as u8).collect();
    let op = node("Conv", &["dq_x", "dq_w"], &["r"]);
    group(&[("x", u8p(sx, 128), vec![1, 1, 3, 3])], &[("w", P(sw, 0, I8), vec![2, 1, 2, 2], w)], vec![op], u8p(sy, 128), &[1, 2, 2, 2])
}

/// Column 0 holds 127 and 120 in rows 0 and 1, one pair of x86-avx2's u8×s8 kernel:
/// 255·127 + 255·120 leaves int16 there.
const SATURATING: [i8; 8] = [127, -7, 120, 1, -5, 9, 2, -11];

/// The activation scale (and zero point) of both operands of [`two_activations`].
const ATTENTION: P = u8p(0.03125, 122);
const K: i64 = 16;

/// Attention's `Q·Kᵀ`: `Q(MatMul(DQ(a u8[1, 2, 4, K]), DQ(b u8[1, 2, K, 4])))`, both operands
/// activations, output zero point 136.
fn two_activations(sy: f32) -> ModelProto {
    let inputs = [("a", ATTENTION, vec![1, 2, 4, K]), ("b", ATTENTION, vec![1, 2, K, 4])];
    group(&inputs, &[], vec![node("MatMul", &["dq_a", "dq_b"], &["r"])], u8p(sy, 136), &[1, 2, 4, 4])
}

fn transpose(x: P, y: P) -> ModelProto {
    group(&[("x", x, vec![2, 3])], &[], vec![node("Transpose", &["dq_x"], &["r"])], y, &[3, 2])
}

/// LeakyRelu with alpha 0.25.
fn leaky_relu([x, y]: [P; 2]) -> ModelProto {
    let mut op = node("LeakyRelu", &["dq_x"], &["r"]);
    op.attribute.push(AttributeProto { name: Some("alpha".into()), r#type: Some(AttributeType::Float as i32), f: Some(0.25), ..Default::default() });
    group(&[("x", x, vec![256])], &[], vec![op], y, &[256])
}

fn global_pool([x, y]: [P; 2]) -> ModelProto {
    group(&[("x", x, vec![1, 8, 2, 2])], &[], vec![node("GlobalAveragePool", &["dq_x"], &["r"])], y, &[1, 8, 1, 1])
}

/// `Q(MaxPool(DQ(x[1, 1, 4, 4])))`, 2×2 windows, stride 2.
fn max_pool(x: P) -> ModelProto {
    let ints =
        |name: &str, v: &[i64]| AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Ints as i32), ints: v.to_vec(), ..Default::default() };
    let op = NodeProto { attribute: vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])], ..node("MaxPool", &["dq_x"], &["r"]) };
    group(&[("x", x, vec![1, 1, 4, 4])], &[], vec![op], x, &[1, 1, 2, 2])
}

fn sigmoid([x, y]: [P; 2]) -> ModelProto {
    group(&[("x", x, vec![256])], &[], vec![node("Sigmoid", &["dq_x"], &["r"])], y, &[256])
}

/// `Q(Concat(DQ(x0), DQ(x1)), axis 0)`, 16 codes each.
fn concat(x: [P; 2], y: P) -> ModelProto {
    let op = NodeProto { attribute: vec![int_attr("axis", 0)], ..node("Concat", &["dq_x0", "dq_x1"], &["r"]) };
    group(&[("x0", x[0], vec![16]), ("x1", x[1], vec![16])], &[], vec![op], y, &[32])
}

/// `Q(Where(c, DQ(x0), DQ(x1)))` with a boolean graph input `c`.
fn where_(x: [P; 2], y: P) -> ModelProto {
    let mut m = group(&[("x0", x[0], vec![16]), ("x1", x[1], vec![16])], &[], vec![node("Where", &["c", "dq_x0", "dq_x1"], &["r"])], y, &[16]);
    m.graph.as_mut().expect("a graph").input.push(value("c", BOOL, &[16]));
    m
}

/// `Q(AveragePool(DQ(x[1, 1, 5, 5])))`, 3×3 windows, stride 1, pad 1, padding excluded: windows
/// of 4, 6 and 9 codes.
fn average_pool([x, y]: [P; 2]) -> ModelProto {
    let ints =
        |name: &str, v: &[i64]| AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Ints as i32), ints: v.to_vec(), ..Default::default() };
    let op =
        NodeProto { attribute: vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1; 4]), ints("strides", &[1, 1])], ..node("AveragePool", &["dq_x"], &["r"]) };
    group(&[("x", x, vec![1, 1, 5, 5])], &[], vec![op], y, &[1, 1, 5, 5])
}

/// `Q(Mul(Relu(DQ(x)), 0.5))`: a chain of two IEEE-determined steps, one with a scalar constant.
fn relu_then_half([x, y]: [P; 2]) -> ModelProto {
    let ops = vec![node("Relu", &["dq_x"], &["t"]), node("Mul", &["t", "half"], &["r"])];
    let mut m = group(&[("x", x, vec![256])], &[], ops, y, &[256]);
    m.graph.as_mut().expect("a graph").initializer.push(tensor("half", F32, &[], 0.5f32.to_le_bytes().to_vec()));
    m
}

fn sqrt(x: P, y: P) -> ModelProto {
    group(&[("x", x, vec![256])], &[], vec![node("Sqrt", &["dq_x"], &["r"])], y, &[256])
}

// Models whose group ends in a float output: the constant weight `w` (scale `s_w`, zero point
// `z_w`) dequantized to `dq_w` and read by one op.

fn tensor(name: &str, dtype: i32, dims: &[i64], raw: Vec<u8>) -> TensorProto {
    TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(dtype), raw_data: Some(raw.into()), ..Default::default() }
}

fn f32s(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    tensor(name, F32, dims, values.iter().flat_map(|v| v.to_le_bytes()).collect())
}

/// Two signed 4-bit codes a byte, the first in the low nibble (ONNX's int4 packing).
fn int4s(name: &str, dims: &[i64], codes: &[i64]) -> TensorProto {
    tensor(name, I4, dims, codes.chunks(2).map(|c| (c[0] as u8 & 0xf) | ((c.get(1).copied().unwrap_or(0) as u8 & 0xf) << 4)).collect())
}

fn i8s(name: &str, dims: &[i64], codes: &[i64]) -> TensorProto {
    tensor(name, I8, dims, codes.iter().map(|&c| c as i8 as u8).collect())
}

fn u8s(name: &str, dims: &[i64], codes: &[i64]) -> TensorProto {
    tensor(name, U8, dims, codes.iter().map(|&c| c as u8).collect())
}

fn int_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Int as i32), i: Some(i), ..Default::default() }
}

/// `DequantizeLinear(w, s_w, z_w)` with these attributes.
fn dq_w(attributes: Vec<AttributeProto>) -> NodeProto {
    NodeProto { attribute: attributes, ..node("DequantizeLinear", &["w", "s_w", "z_w"], &["dq_w"]) }
}

/// A weight group: `[w, s_w, z_w]`, the DQ's attributes, the op reading `dq_w` (named
/// `reader`, writing `out`), its graph inputs and output dims.
fn weight_group(weight: [TensorProto; 3], dq: Vec<AttributeProto>, reader: NodeProto, inputs: Vec<ValueInfoProto>, out_dims: &[i64]) -> ModelProto {
    model(vec![dq_w(dq), reader], inputs, vec![value("out", F32, out_dims)], weight.into())
}

/// The int4 table of [`gather_rows`]: 4 rows of 3, signed codes.
const TABLE: [i64; 12] = [-8, -3, 0, 7, 5, -1, 2, -6, 3, 4, -7, 1];
const ROW_SCALES: [f32; 4] = [0.013, 0.5, 0.0071, 3.25];
const ROW_ZERO_POINTS: [i64; 4] = [-1, 0, 3, -8];

/// `Gather(DQ(W[4, 3] int4, one scale and zero point per row), idx[2])`: an embedding table
/// quantized per row.
fn gather_rows() -> ModelProto {
    let weight = [int4s("w", &[4, 3], &TABLE), f32s("s_w", &[4], &ROW_SCALES), int4s("z_w", &[4], &ROW_ZERO_POINTS)];
    weight_group(weight, vec![int_attr("axis", 0)], node("Gather", &["dq_w", "idx"], &["out"]), vec![value("idx", I64, &[2])], &[2, 3])
}

/// `Gather(DQ(W[4, 2] int8, blocks of 2 rows), idx[2])`: blocked along the gather axis.
fn gather_blocked_rows() -> ModelProto {
    let weight = [i8s("w", &[4, 2], &[1, -2, 3, -4, 5, -6, 7, -8]), f32s("s_w", &[2, 2], &[0.1, 0.2, 0.3, 0.4]), i8s("z_w", &[2, 2], &[0, 1, 2, 3])];
    let dq = vec![int_attr("axis", 0), int_attr("block_size", 2)];
    weight_group(weight, dq, node("Gather", &["dq_w", "idx"], &["out"]), vec![value("idx", I64, &[2])], &[2, 2])
}

/// The uint8 weight of [`weight_read_by`]: `[2, 3]`, one scale and zero point per column.
const WEIGHT: [i64; 6] = [0, 17, 255, 128, 3, 200];
const COLUMN_SCALES: [f32; 3] = [0.013, 0.25, 1.7e-5];
const COLUMN_ZERO_POINTS: [i64; 3] = [128, 0, 77];

/// `op(x, DQ(W[2, 3] u8, per column))`: `Add` reads it elementwise (x `[2, 3]`), `MatMul`
/// multiplies by it (x `[1, 2]`).
fn weight_read_by(op: &str) -> ModelProto {
    let weight = [u8s("w", &[2, 3], &WEIGHT), f32s("s_w", &[3], &COLUMN_SCALES), u8s("z_w", &[3], &COLUMN_ZERO_POINTS)];
    let (x, out): (&[i64], &[i64]) = if op == "MatMul" { (&[1, 2], &[1, 3]) } else { (&[2, 3], &[2, 3]) };
    weight_group(weight, vec![int_attr("axis", 1)], node(op, &["x", "dq_w"], &["out"]), vec![value("x", F32, x)], out)
}

/// `W[32, 2]` int4 codes of the MatMulNBits groups, row-major.
fn nbits_codes() -> Vec<i64> {
    (0..64).map(|i| (i * 7 + i / 2) % 16 - 8).collect()
}

/// Scale `i` of a MatMulNBits group's DQ: f32, or an f16 (given by its bits, read exactly).
fn nbits_scale(i: i64, f16: bool) -> f32 {
    if f16 { f16_to_f32(nbits_f16_scale(i)) } else { 0.013 + 0.0021 * i as f32 }
}

fn nbits_f16_scale(i: i64) -> u16 {
    0x2200 + 0x37 * i as u16
}

fn nbits_zero_point(i: i64) -> i64 {
    i % 5 - 2
}

/// `reader(A[1, 32], DQ(W[32, 2] int4, blocks of `block` rows, f32 or f16 scales))` writing
/// `out[1, 2]`: weight-only quantization. `extra`: the reader's other graph inputs.
fn weight_only(block: i64, f16: bool, readers: Vec<NodeProto>, extra: Vec<ValueInfoProto>) -> ModelProto {
    let blocks = 32 / block;
    let scales = if f16 {
        tensor("s_w", 10, &[blocks, 2], (0..2 * blocks).flat_map(|i| nbits_f16_scale(i).to_le_bytes()).collect())
    } else {
        f32s("s_w", &[blocks, 2], &(0..2 * blocks).map(|i| nbits_scale(i, false)).collect::<Vec<_>>())
    };
    let zero_points: Vec<i64> = (0..2 * blocks).map(nbits_zero_point).collect();
    let weight = vec![int4s("w", &[32, 2], &nbits_codes()), scales, int4s("z_w", &[blocks, 2], &zero_points)];
    let nodes = [vec![dq_w(vec![int_attr("axis", 0), int_attr("block_size", block)])], readers].concat();
    let inputs = [vec![value("a", F32, &[1, 32])], extra].concat();
    model(nodes, inputs, vec![value("out", F32, &[1, 2])], weight)
}

/// `MatMul(A, DQ(W))` of [`weight_only`].
fn matmul_of_int4_blocks(block: i64) -> ModelProto {
    weight_only(block, false, vec![node("MatMul", &["a", "dq_w"], &["out"])], vec![])
}

/// `Gemm(A, DQ(W)[, c[2]])` of [`weight_only`], blocks of 16, with these float attributes.
fn gemm_of_int4_blocks(bias: bool, attributes: &[(&str, f32)]) -> ModelProto {
    let float =
        |(name, f): &(&str, f32)| AttributeProto { name: Some(name.to_string()), r#type: Some(AttributeType::Float as i32), f: Some(*f), ..Default::default() };
    let inputs: &[&str] = if bias { &["a", "dq_w", "c"] } else { &["a", "dq_w"] };
    let gemm = NodeProto { attribute: attributes.iter().map(float).collect(), ..node("Gemm", inputs, &["out"]) };
    weight_only(16, false, vec![gemm], if bias { vec![value("c", F32, &[2])] } else { vec![] })
}

/// `MatMul(A, Cast(DQ(W), to float))` of [`weight_only`], blocks of 16, f16 or f32 scales.
fn matmul_of_cast_int4_blocks(f16: bool) -> ModelProto {
    let cast = NodeProto { attribute: vec![int_attr("to", 1)], ..node("Cast", &["dq_w"], &["w32"]) };
    weight_only(16, f16, vec![cast, node("MatMul", &["a", "w32"], &["out"])], vec![])
}

// ------------------------------------------------------------------------------------------------
// Checks: what a decision claims, recomputed with the engine's reference (`qdqc_exact::reference`)
// and the kernel models (`qdqc_ort`), never with the rule's own code.

fn qparam(p: P) -> QParam {
    let code = match p.2 {
        U8 => CodeType::U8,
        I8 => CodeType::I8,
        other => panic!("no 8-bit code type {other}"),
    };
    QParam { scale: p.0, zero_point: p.1, code }
}

/// The unfused `Q(DQ(a) op DQ(b))` in f32.
fn binary_reference(op: BinaryOp, p: [P; 3], a: i64, b: i64) -> i64 {
    let (x, y) = (dequantize(a, p[0].0, p[0].1), dequantize(b, p[1].0, p[1].1));
    let v = match op {
        BinaryOp::Add => x + y,
        BinaryOp::Mul => x * y,
    };
    quantize(v, p[2].0, p[2].1, CodeType::U8)
}

fn binary_kernels(op: BinaryOp, p: [P; 3], isa: Isa) -> Vec<BinaryKernel> {
    let params = BinaryParams { a: qparam(p[0]), b: qparam(p[1]), c: qparam(p[2]) };
    builds(op, isa).into_iter().map(|build| BinaryKernel::new(op, &params, Broadcast::None, isa, build).expect("a kernel for 8-bit codes")).collect()
}

/// Every build of ORT's kernel on every profile equals the unfused group on all 65 536 pairs.
fn every_pair_matches(op: BinaryOp, p: [P; 3]) -> impl Fn(&Run) {
    move |_| {
        for isa in Isa::ALL {
            for kernel in binary_kernels(op, p, isa) {
                for (a, b) in (0..=255).flat_map(|a| (0..=255).map(move |b| (a, b))) {
                    assert_eq!(kernel.eval(a, b), binary_reference(op, p, a, b), "{isa}: a = {a}, b = {b}");
                }
            }
        }
    }
}

/// Each counterexample's pair gives its unfused code in f32 and its fused code on some build of
/// its profile, and the two differ.
fn pair_reproduces(op: BinaryOp, p: [P; 3]) -> impl Fn(&Run) {
    move |run| {
        for (isa, c) in run.counterexamples() {
            let code = |name: &str| c.inputs.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no input {name} in {c}")).1;
            let (a, b) = (code("a"), code("b"));
            assert_eq!(binary_reference(op, p, a, b), c.unfused, "{isa}: {c}");
            assert!(c.fused != c.unfused && binary_kernels(op, p, isa).iter().any(|k| k.eval(a, b) == c.fused), "{isa}: {c}");
        }
    }
}

/// `Q(DQ(q)) = q` for every code: data movement on codes is data movement on values.
fn every_code_round_trips(p: P) -> impl Fn(&Run) {
    move |_| (0..=255).for_each(|q| assert_eq!(quantize(dequantize(q, p.0, p.1), p.0, p.1, CodeType::U8), q))
}

/// `Q(max(DQ(a), DQ(b)))` in f32, the unfused MaxPool of two codes.
fn max_of_values(p: P, a: i64, b: i64) -> i64 {
    quantize(dequantize(a, p.0, p.1).max(dequantize(b, p.0, p.1)), p.0, p.1, CodeType::U8)
}

/// The max of two codes is the unfused max of their values at every pair.
fn every_max_pair_matches(p: P) -> impl Fn(&Run) {
    move |_| {
        for (a, b) in (0..=255).flat_map(|a| (0..=255).map(move |b| (a, b))) {
            assert_eq!(a.max(b), max_of_values(p, a, b), "a = {a}, b = {b}");
        }
    }
}

/// The reason is the sign of the scale, and indeed some pair's max of codes is not the unfused max.
fn max_order_flips(p: P) -> impl Fn(&Run) {
    move |run| {
        reason("is not positive")(run);
        assert!((0..=255).any(|a| (0..=255).any(|b| a.max(b) != max_of_values(p, a, b))));
    }
}

/// The pools of [`global_pool`] average 4 codes.
const POOLED: u64 = 4;

/// The unfused mean of `total` units of `x.0` (exact in f32 at these scales), quantized.
fn pool_reference(x: P, y: P, total: i64) -> i64 {
    quantize(total as f32 * x.0 / POOLED as f32, y.0, y.1, CodeType::U8)
}

/// The kernel equals the unfused pool on every accumulator four codes reach (the reference
/// depends on the codes only through their exact sum).
fn every_total_matches([x, y]: [P; 2]) -> impl Fn(&Run) {
    move |_| {
        let kernel = GlobalPoolKernel::new(&PoolParams { x: qparam(x), y: qparam(y) }, POOLED).expect("a kernel");
        let n = POOLED as i64;
        for total in -x.1 * n..=(255 - x.1) * n {
            assert_eq!(kernel.requantize(total), pool_reference(x, y, total), "Σ(x − zx) = {total}");
        }
    }
}

/// Each counterexample's window gives its fused code in the kernel and its unfused code in f32.
fn window_reproduces([x, y]: [P; 2]) -> impl Fn(&Run) {
    move |run| {
        let kernel = GlobalPoolKernel::new(&PoolParams { x: qparam(x), y: qparam(y) }, POOLED).expect("a kernel");
        for (isa, c) in run.counterexamples() {
            let window = pool::counterexample_window(c);
            assert_eq!(window.len() as u64, POOLED, "{isa}: {c}");
            assert_eq!(kernel.eval(&window), c.fused, "{isa}: {c}");
            assert_eq!(pool_reference(x, y, window.iter().map(|q| q - x.1).sum()), c.unfused, "{isa}: {c}");
            assert_ne!(c.fused, c.unfused);
        }
    }
}

/// The u8-weight form reads `w + 128` and zero point 128 at every element, and on the saturating
/// pair's row every profile's kernel model accumulates the exact `Σ(x − zx)(w − zw)`.
fn shifted_weights_match(run: &Run) {
    let (dims, w) = run.constant("w/qdqc_u8");
    assert_eq!(dims, [4, 2]);
    assert!(w.iter().zip(SATURATING).all(|(&u, s)| i64::from(u) == i64::from(s) + 128), "{w:?}");
    assert_eq!(run.constant("z_w/qdqc_u8").1, [128]);
    let [sx, sw, sy] = POWERS_OF_TWO;
    let (x, y) = (qparam(u8p(sx, 128)), qparam(u8p(sy, 128)));
    let weights = column_channels(&w.iter().map(|&u| i64::from(u)).collect::<Vec<_>>(), 4, 2);
    let shifted = GemmGroup::new(GemmKind::MatMul, x, CodeType::U8, weights, vec![sw], vec![128], y);
    let row = [255, 255, 0, 17];
    let exact: i64 = row.iter().zip([127, 120, -5, 2]).map(|(&q, w)| (q - 128) * w).sum();
    for isa in Isa::ALL {
        assert_eq!(i64::from(accumulate(&shifted, 0, &row, isa)), exact, "{isa}");
    }
}

/// Every profile's requantization of every accumulator a channel reaches (uint8 x at zero point
/// 128, these weights, plus the bias code) equals the unfused group's `Q((acc + b)·sx·sw)`: at
/// power-of-two scales every product and sum of the float path is exact (P2), so that is its
/// value, whatever the activations behind the accumulator.
fn every_channel_accumulator_matches(kind: GemmKind, channels: [[i64; 4]; 2], bias: [i32; 2], [sx, sw, sy]: [f32; 3]) -> impl Fn(&Run) {
    move |_| {
        let m = output_multiplier(kind, sx, sw, sy);
        for (weights, b) in channels.iter().zip(bias) {
            let (lo, hi) = weights.iter().fold((0, 0), |(lo, hi), &w| (lo + (-128 * w).min(127 * w), hi + (-128 * w).max(127 * w)));
            for isa in Isa::ALL {
                for acc in lo..=hi {
                    let v = acc + i64::from(b);
                    assert_eq!(requantize(v as i32, m, 128, CodeType::U8, isa), quantize(v as f32 * sx * sw, sy, 128, CodeType::U8), "{isa}: acc + b = {v}");
                }
            }
        }
    }
}

/// The unfused `Q(Σ DQ(a)·DQ(b))` of two activation rows: every product and the sum are exact
/// in f32 at 2^-5 scales (P2), so the sum is the accumulator times 2^-10.
fn attention_reference(acc: i64, sy: f32) -> i64 {
    quantize(acc as f32 * ATTENTION.0 * ATTENTION.0, sy, 136, CodeType::U8)
}

/// Every profile's requantization equals the unfused group at every accumulator `K` products of
/// the two code ranges reach.
fn every_accumulator_matches(sy: f32) -> impl Fn(&Run) {
    move |_| {
        let (lo, hi) = (-ATTENTION.1, 255 - ATTENTION.1);
        let (pmin, pmax) = (lo * hi, (lo * lo).max(hi * hi));
        let m = output_multiplier(GemmKind::MatMul, ATTENTION.0, ATTENTION.0, sy);
        for isa in Isa::ALL {
            for acc in K * pmin..=K * pmax {
                assert_eq!(requantize(acc as i32, m, 136, CodeType::U8, isa), attention_reference(acc, sy), "{isa}: acc = {acc}");
            }
        }
    }
}

/// Each counterexample's rows give its accumulator, its unfused code in f32 (summed in order)
/// and its fused code in its profile's requantization.
fn rows_reproduce(sy: f32) -> impl Fn(&Run) {
    move |run| {
        let m = output_multiplier(GemmKind::MatMul, ATTENTION.0, ATTENTION.0, sy);
        for (isa, c) in run.counterexamples() {
            let get = |n: &str| c.inputs.iter().find(|(m, _)| m == n).map(|(_, v)| *v);
            let row = |name: &str| (0..K).map(|t| get(&format!("{name}[{t}]")).or(get(&format!("{name}[*]"))).expect("a code")).collect::<Vec<i64>>();
            let (a, b) = (row("a"), row("b"));
            let dq = |q: i64| dequantize(q, ATTENTION.0, ATTENTION.1);
            let value: f32 = a.iter().zip(&b).map(|(&x, &w)| dq(x) * dq(w)).sum();
            assert_eq!(quantize(value, sy, 136, CodeType::U8), c.unfused, "{isa}: {c}");
            let acc: i64 = a.iter().zip(&b).map(|(x, w)| (x - ATTENTION.1) * (w - ATTENTION.1)).sum();
            assert_eq!(Some(acc), get("acc"), "{isa}: {c}");
            assert!(requantize(acc as i32, m, 136, CodeType::U8, isa) == c.fused && c.fused != c.unfused, "{isa}: {c}");
        }
    }
}

/// Every verdict is the named target axiom (MLAS builds the table with the float Sigmoid's
/// routine: nothing to recompute without the routine itself).
fn sigmoid_axiom(run: &Run) {
    for (isa, v) in &run.decision().verdicts {
        assert!(matches!(v, Verdict::Exact { proof } if proof.method == Method::TargetAxiom(lut::SIGMOID_AXIOM.into())), "{isa}: {v:?}");
    }
}

/// Each input's copy or identity table (what QLinearConcat and QLinearWhere run) equals
/// `Q(DQ(q))` in f32 at every code.
fn every_input_code_matches(x: [P; 2], y: P) -> impl Fn(&Run) {
    move |_| {
        for p in x {
            let kernel = Requant::new(qparam(p), qparam(y));
            (0..=255).for_each(|q| assert_eq!(kernel.eval(q), quantize(dequantize(q, p.0, p.1), y.0, y.1, CodeType::U8), "x = {q}"));
        }
    }
}

/// Each counterexample's input code gives its fused code in the copy or table and its unfused
/// code in f32.
fn input_code_reproduces(x: [P; 2], y: P) -> impl Fn(&Run) {
    move |run| {
        for (isa, c) in run.counterexamples() {
            let (name, q) = &c.inputs[0];
            // QLinearConcat names its inputs x0, x1; QLinearWhere x, y.
            let p = x[usize::from(matches!(name.as_str(), "x1" | "y"))];
            assert_eq!(quantize(dequantize(*q, p.0, p.1), y.0, y.1, CodeType::U8), c.unfused, "{isa}: {c}");
            assert!(Requant::new(qparam(p), qparam(y)).eval(*q) == c.fused && c.fused != c.unfused, "{isa}: {c}");
        }
    }
}

/// `count` codes summing to `total` units above the zero point `z`.
fn window(count: i64, total: i64, z: i64) -> Vec<i64> {
    (0..count).map(|i| z + total.div_euclid(count) + i64::from(i < total.rem_euclid(count))).collect()
}

/// Every profile's kernel equals the unfused pool for every window size and every total (at
/// sX = 0.5 the f32 sum is exact in any order, so the reference depends on the total only).
fn every_window_total_matches([x, y]: [P; 2]) -> impl Fn(&Run) {
    move |_| {
        for isa in Isa::ALL {
            let kernel = AveragePoolKernel::new(&PoolParams { x: qparam(x), y: qparam(y) }, &pool_geometry_5x5(), isa).expect("a kernel");
            for count in [4, 6, 9] {
                for total in -x.1 * count..=(255 - x.1) * count {
                    let codes = window(count, total, x.1);
                    assert_eq!(codes.iter().map(|q| q - x.1).sum::<i64>(), total);
                    let unfused = quantize(total as f32 * x.0 / count as f32, y.0, y.1, CodeType::U8);
                    assert_eq!(kernel.eval(&codes, count as u64), unfused, "{isa}: {count} codes, Σ(x − zx) = {total}");
                }
            }
        }
    }
}

/// Each counterexample's window gives its fused code in its profile's kernel and its unfused code
/// in f32 (the window's size is its divisor: padding is excluded).
fn average_window_reproduces([x, y]: [P; 2]) -> impl Fn(&Run) {
    move |run| {
        for (isa, c) in run.counterexamples() {
            let codes = pool::counterexample_window(c);
            let kernel = AveragePoolKernel::new(&PoolParams { x: qparam(x), y: qparam(y) }, &pool_geometry_5x5(), isa).expect("a kernel");
            let sum: f32 = codes.iter().map(|&q| dequantize(q, x.0, x.1)).sum();
            assert_eq!(quantize(sum / codes.len() as f32, y.0, y.1, CodeType::U8), c.unfused, "{isa}: {c}");
            assert!(kernel.eval(&codes, codes.len() as u64) == c.fused && c.fused != c.unfused, "{isa}: {c}");
        }
    }
}

/// ONNX LeakyRelu in f32.
fn leaky(v: f32) -> f32 {
    if v < 0.0 { 0.25 * v } else { v }
}

/// QLinearLeakyRelu's table (the kernel model) equals `Q(LeakyRelu(DQ(x)))` in f32 at every code.
fn every_leaky_code_matches([x, y]: [P; 2]) -> impl Fn(&Run) {
    move |_| {
        let table = lut::leaky_relu_table(qparam(x), qparam(y), 0.25);
        (0..=255).for_each(|q| assert_eq!(table.get(q), quantize(leaky(dequantize(q, x.0, x.1)), y.0, y.1, CodeType::U8), "x = {q}"));
    }
}

/// Each counterexample's code gives its fused code in the table and its unfused one in exact
/// arithmetic (`real`).
fn leaky_code_reproduces([x, y]: [P; 2]) -> impl Fn(&Run) {
    move |run| {
        let table = lut::leaky_relu_table(qparam(x), qparam(y), 0.25);
        for (isa, c) in run.counterexamples() {
            let q = c.inputs[0].1;
            let v = dequantize_real(q, x.0, x.1).expect("finite scale");
            let v = if v.mant < 0 { v.checked_mul(Dyadic::from_f32(0.25).expect("dyadic")).expect("small") } else { v };
            assert_eq!(quantize_real(v, y.0, y.1, CodeType::U8), Some(c.unfused), "{isa}: {c}");
            assert!(table.get(q) == c.fused && c.fused != c.unfused, "{isa}: {c}");
        }
    }
}

/// The emitted table holds `Q(0.5·Relu(DQ(q)))` in f32 at every code.
fn table_is_the_chain([x, y]: [P; 2]) -> impl Fn(&Run) {
    move |run| {
        let (dims, table) = run.constant("out/qdqc_table");
        assert_eq!(dims, [256]);
        for q in 0..=255 {
            assert_eq!(i64::from(table[q as usize]), quantize(dequantize(q, x.0, x.1).max(0.0) * 0.5, y.0, y.1, CodeType::U8), "x = {q}");
        }
    }
}

/// The reason names a code, and that code's square root is indeed NaN.
fn nan_code_reproduces(x: P) -> impl Fn(&Run) {
    move |run| {
        for reason in run.reasons() {
            let code = reason.strip_prefix("code ").and_then(|r| r.split_once(" gives NaN")).and_then(|(c, _)| c.parse::<i64>().ok());
            let code = code.unwrap_or_else(|| panic!("no code in '{reason}'"));
            assert!(dequantize(code, x.0, x.1).sqrt().is_nan(), "{reason}");
        }
    }
}

/// Every unknown verdict gives this reason.
fn reason(words: &'static str) -> impl Fn(&Run) {
    move |run| run.reasons().iter().for_each(|r| assert!(r.contains(words), "'{r}' does not say '{words}'"))
}

fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect()
}

/// The rewritten DQ reads, at every index in `[-4, 4)` and column, the bits the original DQ
/// reads: widened codes, and the row's scale and zero point gathered as `[4, 1]` blocks.
fn gathered_rows_match(run: &Run) {
    let (dims, codes) = run.constant("w/qdqc_i8");
    assert_eq!(dims, [4, 3]);
    let (dims, scales) = run.constant("s_w/qdqc_rows");
    assert_eq!(dims, [4, 1]);
    let (dims, zero_points) = run.constant("z_w/qdqc_rows");
    assert_eq!(dims, [4, 1]);
    let scales = f32_values(scales);
    for index in -4i64..4 {
        let row = index.rem_euclid(4) as usize;
        for col in 0..3 {
            let fused = dequantize(i64::from(codes[row * 3 + col] as i8), scales[row], i64::from(zero_points[row] as i8));
            let unfused = dequantize(TABLE[row * 3 + col], ROW_SCALES[row], ROW_ZERO_POINTS[row]);
            assert_eq!(fused.to_bits(), unfused.to_bits(), "idx = {index}, column {col}");
        }
    }
}

/// The folded initializer holds the reference DequantizeLinear of every element, bit for bit.
fn folded_values_match(run: &Run) {
    let (dims, bytes) = run.constant("dq_w");
    assert_eq!(dims, [2, 3]);
    for (i, v) in f32_values(bytes).into_iter().enumerate() {
        assert_eq!(v.to_bits(), dequantize(WEIGHT[i], COLUMN_SCALES[i % 3], COLUMN_ZERO_POINTS[i % 3]).to_bits(), "element {i}");
    }
}

/// The lossy record holds the weights' proof and a deviation, and the packed B, scales and zero
/// points, read back by the kernel model, dequantize to `DQ(W)` (its scales widened exactly
/// from f16 in the Cast form) bit for bit at every (k, n).
fn packed_weights_match(f16: bool) -> impl Fn(&Run) {
    move |run| {
        let lossy = run.decision().lossy.as_ref().expect("a lossy record");
        assert!(lossy.weights.domain == 64 && lossy.bits == 4 && lossy.block_size == 16 && !lossy.deviation.is_empty(), "{lossy:?}");
        let (b_dims, b) = run.constant("w/qdqc_nbits_B_32x2_bs16");
        assert_eq!(b_dims, [2, 2, 8]);
        let (_, scales) = run.constant("s_w/qdqc_nbits_scales_32x2_bs16");
        let (_, zero_points) = run.constant("z_w/qdqc_nbits_zero_points_32x2_bs16");
        let packed =
            Packed { k: 32, n: 2, bits: 4, block_size: 16, blocks: 2, b: b.to_vec(), scales: f32_values(scales), zero_points: Some(zero_points.to_vec()) };
        let codes = nbits_codes();
        for (k, n) in (0..32).flat_map(|k| (0..2).map(move |n| (k, n))) {
            let p = ((k / 16) * 2 + n) as i64;
            let unfused = dequantize(codes[k * 2 + n], nbits_scale(p, f16), nbits_zero_point(p));
            assert_eq!(packed.dequantized(k, n).to_bits(), unfused.to_bits(), "k = {k}, n = {n}");
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The families (`FAMILIES`, rewrites/README.md's catalog), each both ways.

/// sx, sw, sy of Conv/MatMul/Gemm groups: powers of two (P2 and P3 hold), 24-bit (P2 fails).
const POWERS_OF_TWO: [f32; 3] = [0.0078125, 0.015625, 0.125];
const GENERIC: [f32; 3] = [0.0123, 0.0071, 0.0456];
const ADD_EQUAL: [P; 3] = [u8p(0.1, 128), u8p(0.1, 100), u8p(0.1, 120)];
const ADD2: [P; 3] = [u8p(0.15, 128), u8p(0.37, 128), u8p(0.38, 128)];
const MUL_AWAY: [P; 3] = [u8p(f32::from_bits(0x3c24_11c2), 128), u8p(0.02, 128), u8p(0.02, 128)];
const MUL_TIE: [P; 3] = [u8p(f32::from_bits(0x3c24_11c2), 128), u8p(0.02, 128), u8p(0.013, 128)];
const TENTH: P = u8p(0.1, 128);
const POOL_UNIT: [P; 2] = [u8p(0.0625, 128), u8p(0.015625, 128)];
const POOL_TIE: [P; 2] = [u8p(0.0625, 128), u8p(0.075, 128)];
const AVERAGE_ZERO: [P; 2] = [u8p(0.5, 128), u8p(0.3, 0)];
const AVERAGE_TIE: [P; 2] = [u8p(0.5, 128), u8p(0.3, 128)];
const LEAKY: [P; 2] = [u8p(0.01, 128), u8p(0.005, 128)];
const SIGMOID: [P; 2] = [u8p(0.05, 128), u8p(1.0 / 256.0, 0)];
/// Concat/Where inputs: one quantized like the output (copied), one not (a table).
const CONCAT: [P; 2] = [TENTH, u8p(0.05, 120)];
const HUGE: P = u8p(3.0e38, 128);
const CHAIN: [P; 2] = [u8p(0.05, 128), u8p(0.025, 100)];
const GEMM: GemmKind = GemmKind::Gemm { alpha: 1.0 };
const CONV: GemmKind = GemmKind::Conv { kernel_size: 4, groups: 1 };

// binary.rs: equal scales add integers on every ISA; the seed's Add2 differs on every profile.
rule_test!(qlinear_add_of_equal_scales: binary("Add", ADD_EQUAL) => "qlinear-add" fired, every_pair_matches(BinaryOp::Add, ADD_EQUAL));
rule_test!(qlinear_add_of_the_seed_add2: binary("Add", ADD2) => "qlinear-add" refused "refuted", pair_reproduces(BinaryOp::Add, ADD2));
// binary.rs: sC = 0.013 puts a product within f32 rounding of a tie.
rule_test!(qlinear_mul_away_from_ties: binary("Mul", MUL_AWAY) => "qlinear-mul" fired, every_pair_matches(BinaryOp::Mul, MUL_AWAY));
rule_test!(qlinear_mul_next_to_a_tie: binary("Mul", MUL_TIE) => "qlinear-mul" refused "refuted", pair_reproduces(BinaryOp::Mul, MUL_TIE));
// gemm.rs: power-of-two scales keep the float path exact (P2) and the requantization P3-exact;
// 24-bit scales fail P2: under `exact` the float path then has no unique value to match, and no
// one-product input differs here, so the verdict is unknown (it never fires).
rule_test!(qlinear_matmul_of_power_of_two_scales: matmul(POWERS_OF_TWO) => "qlinear-matmul" fired,
    every_channel_accumulator_matches(GemmKind::MatMul, SMALL_COLUMNS, [0; 2], POWERS_OF_TWO));
rule_test!(qlinear_matmul_of_24_bit_scales: matmul(GENERIC) => "qlinear-matmul" refused "unknown", reason("P2: DQ of activations"));
// gemm.rs: QGemm adds the int32 bias codes and never reads the bias scale, so the bias must be
// on the accumulator's scale sx·sw bit for bit.
rule_test!(qgemm_bias_on_the_accumulator_scale: gemm_with_bias(POWERS_OF_TWO, 2f32.powi(-13)) => "qgemm-bias" fired,
    every_channel_accumulator_matches(GEMM, SMALL_COLUMNS, BIAS, POWERS_OF_TWO));
rule_test!(qgemm_bias_on_another_scale: gemm_with_bias(POWERS_OF_TWO, 2f32.powi(-12)) => "qgemm-bias" refused "unknown", reason("bias scale"));
// gemm.rs: QLinearConv, channels along W's rows.
rule_test!(qlinear_conv_of_power_of_two_scales: conv(POWERS_OF_TWO) => "qlinear-conv" fired,
    every_channel_accumulator_matches(CONV, [[3, -7, 12, 1], [-5, 9, 2, -11]], [0; 2], POWERS_OF_TWO));
rule_test!(qlinear_conv_of_24_bit_scales: conv(GENERIC) => "qlinear-conv" refused "unknown", reason("P2: DQ of activations"));
// u8_weights.rs (tried from gemm.rs): weights that saturate x86-avx2's u8×s8 pairs run as
// uint8 weights on every profile; at 24-bit scales the shifted form is no more provable.
rule_test!(qlinear_matmul_u8_weights_of_a_saturating_pair: matmul_of(SATURATING, POWERS_OF_TWO) => "qlinear-matmul-u8-weights" fired, shifted_weights_match);
rule_test!(qlinear_matmul_u8_weights_of_24_bit_scales: matmul_of(SATURATING, GENERIC) => "qlinear-matmul-u8-weights" refused "unknown",
    reason("P2: DQ of activations: up to 128 × 825439·2^-26 needs more than 24 significant bits or leaves the normal range; uint8 weights"));
// matmul_dynamic.rs (the `qlinear-matmul` rule with two activations): at 2^-5 scales and K = 16
// the float sum is exact and sY = 2^-3 divides it exactly; sY = 0.3 puts some reachable
// accumulator next to a tie.
rule_test!(qlinear_matmul_of_two_activations: two_activations(0.125) => "qlinear-matmul" fired, every_accumulator_matches(0.125));
rule_test!(qlinear_matmul_of_two_activations_with_a_generic_output_scale: two_activations(0.3) => "qlinear-matmul" refused "refuted", rows_reproduce(0.3));
// drop.rs: data movement on codes needs bitwise-equal parameters on both sides.
rule_test!(transpose_on_codes_with_equal_parameters: transpose(TENTH, TENTH) => "on-codes-transpose-0" fired, every_code_round_trips(TENTH));
rule_test!(transpose_on_codes_with_a_new_scale: transpose(TENTH, u8p(0.2, 128)) => "on-codes-transpose-0" refused "unknown",
    reason("parameters differ (bitwise)"));
// drop.rs: MaxPool selects by order, which codes keep for a positive scale and reverse for a
// negative one.
rule_test!(max_pool_on_codes_with_a_positive_scale: max_pool(TENTH) => "on-codes-maxpool-0" fired, every_max_pair_matches(TENTH));
rule_test!(max_pool_on_codes_with_a_negative_scale: max_pool(u8p(-0.1, 128)) => "on-codes-maxpool-0" refused "unknown", max_order_flips(u8p(-0.1, 128)));
// pool.rs: sX = 2^-4 sums exactly; sY = 2^-6 makes the multiplier 1, sY = 0.075 rounds it near a tie.
rule_test!(qlinear_global_average_pool_with_a_unit_multiplier: global_pool(POOL_UNIT) => "qlinear-global-average-pool" fired, every_total_matches(POOL_UNIT));
rule_test!(qlinear_global_average_pool_near_a_tie: global_pool(POOL_TIE) => "qlinear-global-average-pool" refused "refuted", window_reproduces(POOL_TIE));
// pool.rs: sX = 0.5 sums exactly; with zY = 0 rounding the quotient ignores the zero point, with
// zY = 128 ORT's fl(y/sY + zY) moves a value next to a tie onto it.
rule_test!(qlinear_average_pool_with_zero_output_zero_point: average_pool(AVERAGE_ZERO) => "qlinear-average-pool" fired,
    every_window_total_matches(AVERAGE_ZERO));
rule_test!(qlinear_average_pool_zero_point_before_rounding: average_pool(AVERAGE_TIE) => "qlinear-average-pool" refused "refuted",
    average_window_reproduces(AVERAGE_TIE));
// lut.rs: the table is Q(LeakyRelu(DQ(x))) in f32, as the unfused graph computes it: exact by
// construction. Under `real`, x = 113 gives 0.25·(−15·0.01)/0.005 = −7.5 exactly, but the f32
// DQ value −0.15 is not −15·0.01: the float path lands beside the tie.
rule_test!(qlinear_leaky_relu_table: leaky_relu(LEAKY) => "qlinear-leaky-relu" fired, every_leaky_code_matches(LEAKY));
rule_test!(qlinear_leaky_relu_table_under_real: leaky_relu(LEAKY), real() => "qlinear-leaky-relu" refused "refuted", leaky_code_reproduces(LEAKY));
// lut.rs: Sigmoid's table is MLAS's own routine on x86 (a target axiom), unknown on arm64-neon.
rule_test!(qlinear_sigmoid_on_x86: sigmoid(SIGMOID), x86() => "qlinear-sigmoid" fired, sigmoid_axiom);
rule_test!(qlinear_sigmoid_with_arm64: sigmoid(SIGMOID) => "qlinear-sigmoid" refused "unknown", reason("arm64-neon: MlasLogisticKernel"));
// lut.rs: QLinearConcat and QLinearWhere copy an input quantized like the output and map the
// others through a table; at sY = 3·10^38 DQ overflows to ±Inf, and the copy is not Q(DQ(q)).
rule_test!(qlinear_concat_copy_and_table: concat(CONCAT, TENTH) => "qlinear-concat-2" fired, every_input_code_matches(CONCAT, TENTH));
rule_test!(qlinear_concat_copy_with_overflowing_scale: concat([HUGE; 2], HUGE) => "qlinear-concat-2" refused "refuted", input_code_reproduces([HUGE; 2], HUGE));
rule_test!(qlinear_where_copy_and_table: where_(CONCAT, TENTH) => "qlinear-where" fired, every_input_code_matches(CONCAT, TENTH));
rule_test!(qlinear_where_copy_with_overflowing_scale: where_([HUGE; 2], HUGE) => "qlinear-where" refused "refuted", input_code_reproduces([HUGE; 2], HUGE));
// lookup.rs: a chain of correctly rounded steps is its own table; Sqrt of a negative code is NaN,
// which runtimes quantize differently.
rule_test!(lookup_table_of_relu_then_half: relu_then_half(CHAIN) => "lookup-table" fired, table_is_the_chain(CHAIN));
rule_test!(lookup_table_of_sqrt_below_zero: sqrt(u8p(0.01, 128), u8p(0.1, 0)) => "lookup-table" refused "unknown", nan_code_reproduces(u8p(0.01, 128)));
// gather.rs: an int4 table quantized per row gathers its widened codes and its rows' parameters;
// blocks along the gather axis would need index arithmetic.
rule_test!(gather_before_dequantize_of_int4_rows: gather_rows() => "gather-before-dequantize" fired, gathered_rows_match);
rule_test!(gather_before_dequantize_of_blocks_along_the_gather_axis: gather_blocked_rows() => "gather-before-dequantize" refused "unknown",
    reason("blocked parameters along the gather axis"));
// fold.rs (`--fold-weights` only): an elementwise reader sees the reference values; a MatMul
// pre-packs a constant weight and sums in another order.
rule_test!(fold_weights_read_by_add: weight_read_by("Add"), folding() => "fold-weights" fired, folded_values_match);
rule_test!(fold_weights_read_by_matmul: weight_read_by("MatMul"), folding() => "fold-weights" refused "unknown", reason("read by MatMul"));
rule_test!(fold_weights_not_asked_for: weight_read_by("Add") => "fold-weights" absent);
// nbits.rs (lossy, `--allow matmulnbits` only): int4 blocks of 16 pack bit for bit; blocks of 8
// are not a MatMulNBits layout; without the allowance the rule is not in the catalog.
rule_test!(matmulnbits_of_int4_blocks_of_16: matmul_of_int4_blocks(16), matmulnbits() => "matmulnbits-matmul" fired, packed_weights_match(false));
rule_test!(matmulnbits_of_int4_blocks_of_8: matmul_of_int4_blocks(8), matmulnbits() => "matmulnbits-matmul" refused "unknown",
    reason("block size 8 is not a power of two ≥ 16"));
rule_test!(matmulnbits_not_allowed: matmul_of_int4_blocks(16) => "matmulnbits-matmul" absent);
// nbits.rs: MatMulNBits has no alpha, no transposes and adds a bias of [N] once (beta 1).
rule_test!(matmulnbits_gemm: gemm_of_int4_blocks(false, &[]), matmulnbits() => "matmulnbits-gemm" fired, packed_weights_match(false));
rule_test!(matmulnbits_gemm_with_alpha: gemm_of_int4_blocks(false, &[("alpha", 0.5)]), matmulnbits() => "matmulnbits-gemm" refused "unknown",
    reason("alpha = 0.5"));
rule_test!(matmulnbits_gemm_with_bias: gemm_of_int4_blocks(true, &[]), matmulnbits() => "matmulnbits-gemm-bias" fired, packed_weights_match(false));
rule_test!(matmulnbits_gemm_with_bias_and_beta: gemm_of_int4_blocks(true, &[("beta", 0.5)]), matmulnbits() => "matmulnbits-gemm-bias" refused "unknown",
    reason("beta = 0.5"));
// nbits.rs: the Cast form widens an f16 DQ; an f32 DQ cast to f32 is not that form.
rule_test!(matmulnbits_matmul_of_a_cast_f16_weight: matmul_of_cast_int4_blocks(true), matmulnbits() => "matmulnbits-matmul-cast" fired,
    packed_weights_match(true));
rule_test!(matmulnbits_matmul_of_a_cast_f32_weight: matmul_of_cast_int4_blocks(false), matmulnbits() => "matmulnbits-matmul-cast" refused "unknown",
    reason("not float16"));

// The Rust target (contract §3.12): the same groups, the Rust kernels' proofs.
// The seed add2 is refuted on ORT's kernels; `binary_exact` is the exact sum, so `real` fires.
rule_test!(rust_qlinear_add_of_the_seed_add2_under_real: binary("Add", [u8p(0.15, 128), u8p(0.37, 128), u8p(0.38, 128)]), rust(Contract::Real)
    => "qlinear-add" fired);
rule_test!(rust_qlinear_add_of_equal_scales: binary("Add", [u8p(0.1, 128), u8p(0.1, 100), u8p(0.1, 120)]), rust(Contract::Exact) => "qlinear-add" fired);
// 24-bit scales: no P2 under `exact` (the float reduction may round), exact by construction under `real`.
rule_test!(rust_qlinear_matmul_of_24_bit_scales: matmul([0.0123, 0.0071, 0.0456]), rust(Contract::Exact) => "qlinear-matmul" refused "unknown");
rule_test!(rust_qlinear_matmul_of_24_bit_scales_under_real: matmul([0.0123, 0.0071, 0.0456]), rust(Contract::Real) => "qlinear-matmul" fired);
rule_test!(rust_qlinear_matmul_of_power_of_two_scales: matmul([2f32.powi(-7), 2f32.powi(-6), 2f32.powi(-3)]), rust(Contract::Exact) => "qlinear-matmul" fired);
// ORT's kernel misrounds near a tie; `mean_exact` is the exact mean.
rule_test!(rust_qlinear_global_average_pool_near_a_tie_under_real: global_pool([u8p(0.0625, 128), u8p(0.075, 128)]), rust(Contract::Real)
    => "qlinear-global-average-pool" fired);
rule_test!(rust_qlinear_leaky_relu_table_under_real: leaky_relu([u8p(0.01, 128), u8p(0.005, 128)]), rust(Contract::Real) => "qlinear-leaky-relu" fired);

/// [`matmul`] with per-axis weight scales along K (axis 0, four of them): the scales weight the
/// products inside the sum, so no epilogue applies them (contract §3.12: only along M or N).
fn matmul_per_k_scales() -> ModelProto {
    let mut m = matmul([2f32.powi(-7), 2f32.powi(-6), 2f32.powi(-3)]);
    let graph = m.graph.as_mut().unwrap();
    let scales: Vec<u8> = [2f32.powi(-6), 2f32.powi(-5), 2f32.powi(-6), 2f32.powi(-4)].iter().flat_map(|s| s.to_le_bytes()).collect();
    let s_w = graph.initializer.iter_mut().find(|t| t.name.as_deref() == Some("s_w")).unwrap();
    (s_w.dims, s_w.raw_data) = (vec![4], Some(scales.into()));
    let z_w = graph.initializer.iter_mut().find(|t| t.name.as_deref() == Some("z_w")).unwrap();
    (z_w.dims, z_w.raw_data) = (vec![4], Some(vec![0u8; 4].into()));
    let dq = graph.node.iter_mut().find(|n| n.output == ["dq_w"]).unwrap();
    dq.attribute.push(AttributeProto { name: Some("axis".into()), r#type: Some(AttributeType::Int as i32), i: Some(0), ..Default::default() });
    m
}

rule_test!(rust_qlinear_matmul_refuses_scales_along_k: matmul_per_k_scales(), rust(Contract::Real) => "qlinear-matmul" refused "unknown",
    reason("per-axis along axis 0"));

/// Every family of `FAMILIES` (the opt-in and lossy ones included) has a fired and a refused test
/// above.
#[test]
fn every_family_is_tested_both_ways() {
    let source = include_str!("families.rs");
    let tested = |outcome: &str| -> Vec<&str> {
        let decided = source.lines().filter_map(|l| l.split_once(" => \"")?.1.split_once('"'));
        decided.filter(|(_, rest)| rest.trim_start().starts_with(outcome)).map(|(rule, _)| rule).collect()
    };
    let options = RuleOptions { fold_weights: true, ..matmulnbits() };
    for family in &FAMILIES {
        let names = family.rule_names(&options);
        for outcome in ["fired", "refused"] {
            assert!(tested(outcome).iter().any(|t| names.iter().any(|n| t.starts_with(n.as_str()))), "{}: no {outcome} test of {names:?}", family.file);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// A8W8 with per-row activation parameters (`a8w8.rs`, the Rust target only).

/// Per-axis (or blocked) parameters for the DQ of `name` in a [`group`] model: scales, zero point
/// codes (of the DQ's code type, as bytes), the DQ's `axis` and `block_size`.
fn with_axis(mut m: ModelProto, name: &str, scales: &[f32], zps: &[u8], dims: Vec<i64>, axis: i64, block: Option<i64>) -> ModelProto {
    let graph = m.graph.as_mut().unwrap();
    let s = graph.initializer.iter_mut().find(|t| t.name.as_deref() == Some(&format!("s_{name}"))).unwrap();
    (s.dims, s.raw_data) = (dims.clone(), Some(scales.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into()));
    let z = graph.initializer.iter_mut().find(|t| t.name.as_deref() == Some(&format!("z_{name}"))).unwrap();
    (z.dims, z.raw_data) = (dims, Some(zps.to_vec().into()));
    let dq = graph.node.iter_mut().find(|n| n.output == [format!("dq_{name}")]).unwrap();
    let int = |n: &str, i: i64| AttributeProto { name: Some(n.into()), r#type: Some(AttributeType::Int as i32), i: Some(i), ..Default::default() };
    dq.attribute.push(int("axis", axis));
    dq.attribute.extend(block.map(|b| int("block_size", b)));
    m
}

/// [`matmul`] (u8 x[3, 4] × i8 W[4, 2]) with a scale and zero point per activation row.
const A8W8_ROW_SCALES: [f32; 3] = [0.0123, 0.0217, 0.0071];
const A8W8_ROW_ZPS: [u8; 3] = [128, 97, 161];

fn matmul_per_row(scales: [f32; 3]) -> ModelProto {
    with_axis(matmul(scales), "x", &A8W8_ROW_SCALES, &A8W8_ROW_ZPS, vec![3], 0, None)
}

/// The unfused group's exact output for activation row `x` of row parameter `t`:
/// `sat(rne(Σ_k DQ(x[k])·DQ(w[k][n]) / sy) + zy)` with the reference's exact values.
fn per_row_reference(x: &[i64], t: usize, n: usize, sy: f32) -> i64 {
    let mut v = Dyadic::ZERO;
    for (k, &xk) in x.iter().enumerate() {
        let p = dequantize_real(xk, A8W8_ROW_SCALES[t], i64::from(A8W8_ROW_ZPS[t]))
            .unwrap()
            .checked_mul(dequantize_real(SMALL_COLUMNS[n][k], 0.0456, 0).unwrap())
            .unwrap();
        v = v.checked_add(p).unwrap();
    }
    quantize_real(v, sy, 128, CodeType::U8).unwrap()
}

/// The fired group through the kernel crate's `A8W8` (every path is tested bit-identical in
/// codegen/kernels/tests/a8w8.rs; the portable one here) on 4096 seeded rows per row parameter,
/// against [`per_row_reference`].
fn a8w8_matches_the_exact_group(sy: f32) -> impl Fn(&Run) {
    move |_| {
        use qdqc_kernels::requant::{Code, Output};
        let w: Vec<i8> = SMALL.to_vec();
        let b = qdqc_kernels::PackedB::from_i8(&w, 4, 2, qdqc_kernels::Layout::KN, &[0]).unwrap();
        let zps: Vec<i32> = A8W8_ROW_ZPS.iter().map(|&z| i32::from(z)).collect();
        let plan = qdqc_kernels::a8w8::A8W8::new(&b, &A8W8_ROW_SCALES, &zps, &[0.0456], &[], &[], sy, Output::new(128, Code::U8).unwrap()).unwrap();
        let kernels = qdqc_kernels::Kernels::new(qdqc_kernels::Isa::Portable).unwrap();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let rows = 3 * 4096;
        let x: Vec<u8> = (0..rows * 4)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let (mut acc, mut y) = (vec![0i32; rows * 2], vec![0u8; rows * 2]);
        plan.run(kernels, &x, rows, &b, &mut acc, &mut y).unwrap();
        for m in 0..rows {
            let row: Vec<i64> = x[m * 4..m * 4 + 4].iter().map(|&v| i64::from(v)).collect();
            for n in 0..2 {
                assert_eq!(i64::from(y[m * 2 + n]), per_row_reference(&row, m % 3, n, sy), "row {m} ({row:?}), column {n}");
            }
        }
    }
}

// 24-bit scales: no P2 under `exact`; under `real` the per-element exact epilogue.
rule_test!(rust_a8w8_matmul_per_row_under_real: matmul_per_row([0.0123, 0.0456, 0.0517]), rust(Contract::Real) => "a8w8-matmul" fired,
    a8w8_matches_the_exact_group(0.0517));
rule_test!(rust_a8w8_matmul_per_row_without_p2_under_exact: matmul_per_row([0.0123, 0.0456, 0.0517]), rust(Contract::Exact) => "a8w8-matmul" refused "unknown",
    |r: &Run| assert!(r.reasons().iter().any(|m| m.contains("P2")), "{:?}", r.reasons()));
// ONNX Runtime has no kernel with a per-row activation scale: the family is not registered.
rule_test!(rust_a8w8_matmul_is_not_an_ort_rule: matmul_per_row([0.0123, 0.0456, 0.0517]), real() => "a8w8-matmul" absent);

/// The counterexample of a refutation along K, replayed on the unfused group with the
/// reference: the row it names has the same accumulator `C[n] = Σ(x − zx)(w − zw)` as the row
/// of zero points (0), and their exact outputs are its `unfused` and `fused` codes, which differ.
/// `x_param(k)` / `w_param(k, n)`: the (scale, zero point) each side dequantizes element k with.
fn along_k_counterexample(
    x_param: fn(usize) -> (f32, i64),
    w_param: fn(usize, usize) -> (f32, i64),
    w: fn(usize, usize) -> i64,
    k: usize,
    sy: f32,
    zy: i64,
) -> impl Fn(&Run) {
    move |r: &Run| {
        let found: Vec<&Counterexample> = r
            .decision()
            .verdicts
            .iter()
            .filter_map(|(_, v)| if let Verdict::Refuted { counterexample, .. } = v { Some(counterexample) } else { None })
            .collect();
        assert!(!found.is_empty(), "no counterexample in {:?}", r.decision().verdicts);
        for c in found {
            let get = |name: &str| c.inputs.iter().find(|(n, _)| n == name).map(|&(_, v)| v).unwrap_or_else(|| panic!("no {name} in {c}"));
            let (n, k1, k2) = (get("column") as usize, get("k1") as usize, get("k2") as usize);
            let row: Vec<i64> = (0..k)
                .map(|i| {
                    if i == k1 {
                        get("x[k1]")
                    } else if i == k2 {
                        get("x[k2]")
                    } else {
                        x_param(i).1
                    }
                })
                .collect();
            let (mut acc, mut v) = (0i64, Dyadic::ZERO);
            for (i, &xi) in row.iter().enumerate() {
                let ((sx, zx), (sw, zw)) = (x_param(i), w_param(i, n));
                acc += (xi - zx) * (w(i, n) - zw);
                v = v.checked_add(dequantize_real(xi, sx, zx).unwrap().checked_mul(dequantize_real(w(i, n), sw, zw).unwrap()).unwrap()).unwrap();
            }
            assert_eq!(acc, 0, "{c}: the row's accumulator");
            assert_eq!(quantize_real(v, sy, zy, CodeType::U8), Some(c.unfused), "{c}: the row's exact output");
            assert_eq!(quantize_real(Dyadic::ZERO, sy, zy, CodeType::U8), Some(c.fused), "{c}: the zero-point row's exact output");
            assert_ne!(c.unfused, c.fused, "{c}");
        }
    }
}

const PER_K_W: [f32; 4] = [1.0 / 64.0, 1.0 / 32.0, 1.0 / 64.0, 1.0 / 16.0];
rule_test!(rust_a8w8_matmul_refutes_a_weight_scale_along_k: matmul_per_k_scales(), rust(Contract::Real) => "a8w8-matmul" refused "refuted",
    along_k_counterexample(|_| (2f32.powi(-7), 128), |k, _| (PER_K_W[k], 0), |k, n| SMALL_COLUMNS[n][k], 4, 2f32.powi(-3), 128));

const PER_K_X: [f32; 4] = [0.011, 0.037, 0.019, 0.023];
rule_test!(rust_a8w8_matmul_refutes_an_activation_scale_along_k:
    with_axis(matmul([0.0123, 0.0456, 0.0517]), "x", &PER_K_X, &[128, 120, 130, 128], vec![4], 1, None), rust(Contract::Real)
    => "a8w8-matmul" refused "refuted",
    along_k_counterexample(|k| (PER_K_X[k], [128, 120, 130, 128][k]), |_, _| (0.0456, 0), |k, n| SMALL_COLUMNS[n][k], 4, 0.0517, 128));

/// Weight scales blocked along K (blocks of 2 rows of the [4, 2] weight: scales [2, 2]).
const BLOCKED_W: [f32; 4] = [0.01, 0.03, 0.045, 0.02];
rule_test!(rust_a8w8_matmul_refutes_weight_scales_blocked_along_k:
    with_axis(matmul([0.0123, 0.0456, 0.0517]), "w", &BLOCKED_W, &[0; 4], vec![2, 2], 0, Some(2)), rust(Contract::Real)
    => "a8w8-matmul" refused "refuted",
    along_k_counterexample(|_| (0.0123, 128), |k, n| (BLOCKED_W[(k / 2) * 2 + n], 0), |k, n| SMALL_COLUMNS[n][k], 4, 0.0517, 128));
// Power-of-two scales everywhere: P2 holds per row parameter, then P3 under `exact`.
rule_test!(rust_a8w8_matmul_per_row_of_power_of_two_scales_under_exact:
    with_axis(matmul([1.0 / 128.0, 1.0 / 64.0, 1.0 / 8.0]), "x", &[1.0 / 128.0, 1.0 / 64.0, 1.0 / 256.0], &[128, 97, 161], vec![3], 0, None), rust(Contract::Exact)
    => "a8w8-matmul" fired,
    |r: &Run| assert!(r.decision().verdicts.iter().all(|(_, v)| format!("{v:?}").contains("3 distinct row parameter(s)")), "{:?}", r.decision().verdicts));

/// `m` without its Q: the op's f32 output `r` is the graph output.
fn without_q(mut m: ModelProto) -> ModelProto {
    let graph = m.graph.as_mut().unwrap();
    graph.node.retain(|n| n.op_type.as_deref() != Some("QuantizeLinear"));
    graph.initializer.retain(|t| !matches!(t.name.as_deref(), Some("s_out" | "z_out")));
    graph.output = vec![value("r", F32, &[3, 2])];
    m
}

// The float-output group: the correctly rounded f32 of the exact value under `real`; under
// `exact` only with P2, which 24-bit scales do not give.
rule_test!(rust_a8w8_matmul_float_under_real: without_q(matmul_per_row([0.0123, 0.0456, 0.0517])), rust(Contract::Real) => "a8w8-matmul-float" fired,
    |r: &Run| assert!(r.decision().verdicts.iter().all(|(_, v)| format!("{v:?}").contains("rne_f32")), "{:?}", r.decision().verdicts));
rule_test!(rust_a8w8_matmul_float_without_p2_under_exact: without_q(matmul_per_row([0.0123, 0.0456, 0.0517])), rust(Contract::Exact)
    => "a8w8-matmul-float" refused "unknown",
    |r: &Run| assert!(r.reasons().iter().all(|m| m.contains("P2 fails")), "{:?}", r.reasons()));
/// The float output's refutation along K, replayed: the named row's accumulator is 0, its exact
/// value (weight scales of [`matmul_per_k_scales`]) is not, and `unfused`/`fused` are the f32 bits
/// of that value and of 0.
fn float_along_k(r: &Run) {
    for (_, v) in &r.decision().verdicts {
        let Verdict::Refuted { counterexample: c, .. } = v else { panic!("not refuted: {v:?}") };
        let get = |name: &str| c.inputs.iter().find(|(n, _)| n == name).map(|&(_, v)| v).unwrap();
        let (n, k1, k2) = (get("column") as usize, get("k1") as usize, get("k2") as usize);
        let row: Vec<i64> = (0..4)
            .map(|i| {
                if i == k1 {
                    get("x[k1]")
                } else if i == k2 {
                    get("x[k2]")
                } else {
                    128
                }
            })
            .collect();
        let acc: i64 = (0..4).map(|i| (row[i] - 128) * SMALL_COLUMNS[n][i]).sum();
        let exact: f64 = (0..4).map(|i| (row[i] - 128) as f64 / 128.0 * SMALL_COLUMNS[n][i] as f64 * f64::from(PER_K_W[i])).sum();
        assert_eq!(acc, 0, "{c}");
        // Powers of two and short codes: the f64 sum is exact, and it is an f32.
        assert_eq!(c.unfused, i64::from((exact as f32).to_bits()), "{c}");
        assert_eq!(c.fused, 0, "{c}");
        assert_ne!(exact, 0.0, "{c}");
    }
}

rule_test!(rust_a8w8_matmul_float_refutes_scales_along_k: without_q(matmul_per_k_scales()), rust(Contract::Real) => "a8w8-matmul-float" refused "refuted",
    float_along_k);

// ------------------------------------------------------------------------------------------------
// MatMul on activations quantized at run time, as ORT's `quantize_dynamic` writes it
// (`dynamic.rs`, the Rust target only).

/// f32 x[3, K] → DynamicQuantizeLinear → MatMulInteger with i8 W[K, 2] (scale 0.02, zero point 0)
/// → Cast(float) → Mul by Mul(sx, sw): `quantize_dynamic`'s graph.
fn dynamic_matmul(w: &[i64]) -> ModelProto {
    let k = w.len() as i64 / 2;
    let mut cast = node("Cast", &["c"], &["cf"]);
    cast.attribute.push(AttributeProto { name: Some("to".into()), r#type: Some(AttributeType::Int as i32), i: Some(F32 as i64), ..Default::default() });
    let nodes = vec![
        node("DynamicQuantizeLinear", &["x"], &["x_q", "x_s", "x_z"]),
        node("Mul", &["x_s", "s_w"], &["s"]),
        node("MatMulInteger", &["x_q", "w", "x_z", "z_w"], &["c"]),
        cast,
        node("Mul", &["cf", "s"], &["y"]),
    ];
    let inits = vec![i8s("w", &[k, 2], w), f32s("s_w", &[], &[0.02]), i8s("z_w", &[], &[0])];
    model(nodes, vec![value("x", F32, &[3, k])], vec![value("y", F32, &[3, 2])], inits)
}

rule_test!(rust_dynamic_matmul_exact: dynamic_matmul(&SMALL.map(i64::from)), rust(Contract::Exact) => "dynamic-matmul" fired);
rule_test!(rust_dynamic_matmul_real: dynamic_matmul(&SMALL.map(i64::from)), rust(Contract::Real) => "dynamic-matmul" fired);
// 66,400 rows at ±127: 255·127·66,400 > 2^31.
rule_test!(rust_dynamic_matmul_refuses_an_accumulator_beyond_i32: dynamic_matmul(&[127, -127].repeat(66_400)), rust(Contract::Real) => "dynamic-matmul" refused "unknown",
    reason("beyond i32"));
/// [`dynamic_matmul`] with MatMulInteger's weight zero point omitted (zero).
fn dynamic_matmul_no_wzp() -> ModelProto {
    let mut m = dynamic_matmul(&SMALL.map(i64::from));
    let graph = m.graph.as_mut().unwrap();
    graph.node[2].input.truncate(3);
    graph.initializer.retain(|t| t.name.as_deref() != Some("z_w"));
    m
}

rule_test!(rust_dynamic_matmul_no_wzp: dynamic_matmul_no_wzp(), rust(Contract::Real) => "dynamic-matmul-no-wzp" fired, |run: &Run| {
    assert!(run.created.iter().any(|(name, ..)| name.ends_with("qdqc_w_zero_point")), "the omitted zero point is made explicit: {:?}", run.created)
});
rule_test!(dynamic_matmul_is_not_an_ort_rule: dynamic_matmul(&SMALL.map(i64::from)) => "dynamic-matmul" absent);

// ------------------------------------------------------------------------------------------------
// Per-row dynamic quantization written as ReduceMax → scale → QuantizeLinear (`row_dynamic.rs`,
// the Rust target only).

/// f32 x[3, K] → s = ReduceMax(Abs(x), axes = [axis], keepdims = 1) / 127 → Q(x, s; int8, blocked
/// along the last axis by K) → DQ(same) → MatMul with DQ(i8 W[K, 2], 0.02): SmoothQuant's per-token
/// absmax form. `axis = 1` is per row; `axis = 0` makes one scale per column of K.
fn row_dynamic_matmul(axis: i64) -> ModelProto {
    let k = SMALL.len() as i64 / 2;
    let int = int_attr;
    let mut q = node("QuantizeLinear", &["x", "s"], &["x_q"]);
    let mut dq = node("DequantizeLinear", &["x_q", "s"], &["x_dq"]);
    let layout = if axis == 1 { [int("axis", 1), int("block_size", k)] } else { [int("axis", 0), int("block_size", 3)] };
    q.attribute.extend(layout.clone());
    q.attribute.push(int("output_dtype", I8 as i64));
    dq.attribute.extend(layout);
    let nodes = vec![
        node("Abs", &["x"], &["ax"]),
        node("ReduceMax", &["ax", "axes"], &["amax"]),
        node("Div", &["amax", "d"], &["s"]),
        q,
        dq,
        node("DequantizeLinear", &["w", "s_w", "z_w"], &["w_dq"]),
        node("MatMul", &["x_dq", "w_dq"], &["y"]),
    ];
    let axes = TensorProto { name: Some("axes".into()), dims: vec![1], data_type: Some(I64), int64_data: vec![axis], ..Default::default() };
    let inits = vec![i8s("w", &[k, 2], &SMALL.map(i64::from)), f32s("s_w", &[], &[0.02]), i8s("z_w", &[], &[0]), f32s("d", &[], &[127.0]), axes];
    model(nodes, vec![value("x", F32, &[3, k])], vec![value("y", F32, &[3, 2])], inits)
}

rule_test!(rust_row_dynamic_matmul_real: row_dynamic_matmul(1), rust(Contract::Real) => "row-dynamic-matmul" fired, |run: &Run| {
    let d = run.decision();
    assert_eq!(d.fused_op, "qdqc.RowDynamicMatMul");
    // Q, DQ of x, DQ of w, MatMul: the parameter chain stays the graph's (the kernel recomputes it).
    assert_eq!((d.nodes.len(), d.output.as_str()), (4, "y"), "the group: {:?}", d.nodes)
});
rule_test!(rust_row_dynamic_refuses_exact: row_dynamic_matmul(1), rust(Contract::Exact) => "row-dynamic-matmul" refused "unknown",
    reason("made at run time"));
rule_test!(rust_row_dynamic_refuses_a_reduction_along_m: row_dynamic_matmul(0), rust(Contract::Real) => "row-dynamic-matmul" refused "unknown",
    reason("over the last axis"));
rule_test!(row_dynamic_matmul_is_not_an_ort_rule: row_dynamic_matmul(1) => "row-dynamic-matmul" absent);
