//! Differential tests: qdqc's models of ONNX Runtime's quantized element-wise, lookup-table and
//! pooling kernels (`qdqc_ort`) against ONNX Runtime 1.31.1 on this machine, with the
//! host's profile (`common::host_isa`), byte for byte, over full code domains.
//!
//! Every case is generated here from a seeded PRNG, written as raw input files plus one JSON list,
//! and run by one `tests/oracle/kernels.py` process (the venv python: `$QDQC_PYTHON`, default
//! `<repo>/target/venv/bin/python`, made by `bash tests/oracle/setup.sh`). Each test checks its
//! family's outputs from that shared run.

mod common;

use common::{Rng, codes, dtype, oracle_python};

use qdqc_exact::reference::{CodeType, dequantize, quantize};
use qdqc_exact::{Contract, Counterexample, QParam, Verdict};
use qdqc_ort::Isa;
use qdqc_ort::binary::{self, BinaryKernel, BinaryOp, BinaryParams, Broadcast, Contractions, Fused};
use qdqc_ort::lut::{self, Lut, Requant};
use qdqc_ort::pool::{self, AveragePoolKernel, GlobalPoolKernel, PoolGeometry, PoolParams};
use qdqc_ort::softmax::{self, SoftmaxKernel};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

/// Parameter sets per op and code type.
const SETS: usize = 28;

// ------------------------------------------------------------------------------------------------
// Seeded generation

impl Rng {
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A scale near `base`: log-uniform within `spread` octaves, sometimes an exact power of two,
    /// sometimes a value from real models whose ratios round awkwardly.
    fn scale(&mut self, base: f64, spread: f64) -> f32 {
        const AWKWARD: [f32; 8] = [0.15, 0.37, 0.38, 0.1, 1.0 / 3.0, 1.0 / 255.0, 0.0123, 0.7];
        if self.chance(0.1) {
            return AWKWARD[self.int(0, 7) as usize];
        }
        let e = base.log2() + self.range(-spread, spread);
        let e = if self.chance(0.15) { e.round() } else { e };
        2f64.powf(e) as f32
    }

    /// A zero point anywhere in the code range, extremes and the middle often.
    fn zero_point(&mut self, t: CodeType) -> i64 {
        let (lo, hi) = t.range();
        if self.chance(0.3) { [lo, hi, (lo + hi + 1) / 2][self.int(0, 2) as usize] } else { self.int(lo, hi) }
    }
}

fn to_bytes(codes: impl IntoIterator<Item = i64>) -> Vec<u8> {
    codes.into_iter().map(|c| c as u8).collect()
}

fn to_codes(bytes: &[u8], t: CodeType) -> Vec<i64> {
    bytes.iter().map(|&b| if t == CodeType::I8 { b as i8 as i64 } else { b as i64 }).collect()
}

fn qjson(q: &QParam) -> Value {
    json!([q.scale, q.zero_point])
}

// ------------------------------------------------------------------------------------------------
// The oracle run

/// Cases and their input files, written to a temporary directory and run by one Python process.
struct Oracle {
    dir: tempfile::TempDir,
    cases: Vec<Value>,
    inputs: HashMap<String, Value>,
}

impl Oracle {
    fn new() -> Oracle {
        Oracle { dir: tempfile::tempdir().unwrap(), cases: Vec::new(), inputs: HashMap::new() }
    }

    /// A data input, written once per name.
    fn input(&mut self, name: &str, dtype: &str, shape: &[usize], bytes: impl FnOnce() -> Vec<u8>) -> Value {
        if let Some(v) = self.inputs.get(name) {
            return v.clone();
        }
        let data = bytes();
        assert_eq!(data.len(), shape.iter().product::<usize>(), "{name}");
        std::fs::write(self.dir.path().join(format!("{name}.bin")), data).unwrap();
        let v = json!({"file": format!("{name}.bin"), "dtype": dtype, "shape": shape});
        self.inputs.insert(name.to_string(), v.clone());
        v
    }

    fn case(&mut self, case: Value) {
        self.cases.push(case);
    }

    /// Runs every case; returns each case's outputs by file name.
    fn run(self) -> HashMap<String, Vec<u8>> {
        let list = self.dir.path().join("cases.json");
        std::fs::write(&list, serde_json::to_vec(&json!({"cases": self.cases})).unwrap()).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/kernels.py");
        let out = Command::new(oracle_python()).arg(&script).arg(&list).arg(self.dir.path()).output().expect("running the oracle");
        assert!(out.status.success(), "kernels.py failed:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let mut outputs = HashMap::new();
        for case in &self.cases {
            let id = case["id"].as_str().unwrap();
            for kind in ["fused", "unfused", "error"] {
                let name = format!("{id}.{kind}");
                if let Ok(bytes) = std::fs::read(self.dir.path().join(format!("{name}.bin"))) {
                    outputs.insert(name, bytes);
                }
            }
        }
        outputs
    }
}

/// Everything the tests compare, generated and run once for all of them.
struct Run {
    binary: Vec<BinaryCase>,
    unary: Vec<UnaryCase>,
    requant: Vec<RequantCase>,
    pools: Vec<PoolCase>,
    softmax: Vec<SoftmaxCase>,
    outputs: HashMap<String, Vec<u8>>,
}

impl Run {
    fn output(&self, id: &str, kind: &str) -> &[u8] {
        self.outputs.get(&format!("{id}.{kind}")).unwrap_or_else(|| panic!("no {kind} output for {id}"))
    }

    fn codes(&self, id: &str, kind: &str, t: CodeType) -> Vec<i64> {
        to_codes(self.output(id, kind), t)
    }

    /// ORT's message when the fused kernel threw.
    fn error(&self, id: &str) -> Option<String> {
        self.outputs.get(&format!("{id}.error")).map(|b| String::from_utf8_lossy(b).into_owned())
    }
}

fn run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let start = std::time::Instant::now();
        let mut oracle = Oracle::new();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let binary = binary_cases(&mut oracle, &mut rng);
        let unary = unary_cases(&mut oracle, &mut rng);
        let requant = requant_cases(&mut oracle, &mut rng);
        let pools = pool_cases(&mut oracle, &mut rng);
        let softmax = softmax_cases(&mut oracle, &mut rng);
        let cases = oracle.cases.len();
        let outputs = oracle.run();
        eprintln!("oracle: {cases} cases in {:.1} s", start.elapsed().as_secs_f64());
        Run { binary, unary, requant, pools, softmax, outputs }
    })
}

/// Collects mismatches and fails with the first few of each case.
#[derive(Default)]
struct Mismatches(Vec<String>);

impl Mismatches {
    fn check(&mut self, what: &str, got: &[i64], want: &[i64], at: impl Fn(usize) -> String) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        let bad: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
        if let Some(&i) = bad.first() {
            self.0.push(format!("{what}: {} of {} differ, first at {}: ORT {} vs model {}", bad.len(), got.len(), at(i), got[i], want[i]));
        }
    }

    fn assert_none(self) {
        assert!(self.0.is_empty(), "{} mismatching case(s):\n{}", self.0.len(), self.0.join("\n"));
    }
}

// ------------------------------------------------------------------------------------------------
// QLinearAdd, QLinearMul

struct BinaryCase {
    id: String,
    op: BinaryOp,
    params: BinaryParams,
    bcast: Broadcast,
    /// ORT's output index of the pair (a, b), as offsets from the lowest code.
    layout: Layout,
}

type Layout = fn(usize, usize) -> usize;

/// Scales for one binary op: related as in real models (output range covering the inputs'), and
/// now and then unrelated.
fn binary_params(rng: &mut Rng, op: BinaryOp, t: CodeType) -> BinaryParams {
    let base = 2f64.powf(rng.range(-9.0, 1.0));
    let (sa, sb) = (rng.scale(base, 1.5), rng.scale(base, 1.5));
    let sc = if rng.chance(0.2) {
        rng.scale(base, 6.0)
    } else {
        match op {
            BinaryOp::Add => rng.scale(sa.max(sb) as f64 * 1.4, 1.0),
            BinaryOp::Mul => rng.scale(sa as f64 * sb as f64 * 128.0, 2.0),
        }
    };
    let q = |s: f32, rng: &mut Rng| QParam::new(s, rng.zero_point(t), t);
    BinaryParams { a: q(sa, rng), b: q(sb, rng), c: q(sc, rng) }
}

fn binary_layouts() -> [(Broadcast, &'static str, Layout); 3] {
    [(Broadcast::None, "vv", |a, b| a * 256 + b), (Broadcast::AScalar, "as", |a, b| a * 256 + b), (Broadcast::BScalar, "bs", |a, b| b * 256 + a)]
}

/// Input tensors of one layout: every (a, b) pair once.
fn binary_inputs(oracle: &mut Oracle, t: CodeType, layout: &str) -> Vec<Value> {
    let (d, all) = (dtype(t), codes(t));
    let rows = |i: usize| all[i / 256];
    let cols = |i: usize| all[i % 256];
    match layout {
        // A[i] = code(i / 256), B[i] = code(i % 256).
        "vv" => vec![
            oracle.input(&format!("vv_a_{d}"), d, &[65536], || to_bytes((0..65536).map(rows))),
            oracle.input(&format!("vv_b_{d}"), d, &[65536], || to_bytes((0..65536).map(cols))),
        ],
        // A [256, 1] against B [1, 256]: each output row sees one scalar A.
        "as" => vec![
            oracle.input(&format!("col_{d}"), d, &[256, 1], || to_bytes(all.clone())),
            oracle.input(&format!("row_{d}"), d, &[1, 256], || to_bytes(all.clone())),
        ],
        // A [1, 256] against B [256, 1]: each output row sees one scalar B.
        _ => vec![
            oracle.input(&format!("row_{d}"), d, &[1, 256], || to_bytes(all.clone())),
            oracle.input(&format!("col_{d}"), d, &[256, 1], || to_bytes(all.clone())),
        ],
    }
}

/// The seed model's `Add2`: DQ(q_c2; 0.15, 128) + DQ(q_add1; 0.37, 128) → Q(0.38, 128), uint8.
fn seed_add2() -> BinaryParams {
    let u8p = |s: f32| QParam::new(s, 128, CodeType::U8);
    BinaryParams { a: u8p(0.15), b: u8p(0.37), c: u8p(0.38) }
}

fn binary_cases(oracle: &mut Oracle, rng: &mut Rng) -> Vec<BinaryCase> {
    let mut cases = Vec::new();
    binary_set(oracle, &mut cases, BinaryOp::Add, "seed", seed_add2());
    for op in [BinaryOp::Add, BinaryOp::Mul] {
        for t in [CodeType::U8, CodeType::I8] {
            for set in 0..SETS {
                let params = binary_params(rng, op, t);
                binary_set(oracle, &mut cases, op, &set.to_string(), params);
            }
        }
    }
    cases
}

/// One parameter set in every layout, the unfused graph with the vector–vector one.
fn binary_set(oracle: &mut Oracle, cases: &mut Vec<BinaryCase>, op: BinaryOp, set: &str, params: BinaryParams) {
    let t = params.c.code;
    for (bcast, name, layout) in binary_layouts() {
        let id = format!("{}-{}-{set}-{name}", op.ort_name(), dtype(t));
        let inputs = binary_inputs(oracle, t, name);
        let unfused = bcast == Broadcast::None;
        let q = json!({"a": qjson(&params.a), "b": qjson(&params.b), "c": qjson(&params.c)});
        oracle.case(json!({"id": id, "op": op.ort_name(), "dtype": dtype(t), "q": q, "inputs": inputs, "unfused": unfused}));
        cases.push(BinaryCase { id, op, params, bcast, layout });
    }
}

#[test]
fn seed_add2_refutation_reproduces_in_ort() {
    // ORT fuses the seed's Add2 and the report shows 1-LSB differences: the proof's
    // counterexample is one of them, in ORT's own fused and unfused runs.
    let run = run();
    let verdict = binary::prove(BinaryOp::Add, &seed_add2(), Broadcast::None, common::host_isa(), Contract::Exact);
    let c = verdict.counterexample().unwrap_or_else(|| panic!("{verdict:?}"));
    let id = "QLinearAdd-uint8-seed-vv";
    let (fused, unfused) = (run.codes(id, "fused", CodeType::U8), run.codes(id, "unfused", CodeType::U8));
    let at = (c.inputs[0].1 * 256 + c.inputs[1].1) as usize;
    assert_eq!((unfused[at], fused[at]), (c.unfused, c.fused), "{c}");
    let differing = fused.iter().zip(&unfused).filter(|(f, u)| f != u).count() as u64;
    assert_eq!(differing, c.differing, "{c}");
}

/// The model's output in ORT's layout for `case`, compiled as `build`.
fn binary_model(case: &BinaryCase, build: Contractions) -> Vec<i64> {
    let all = codes(case.params.c.code);
    let kernel = BinaryKernel::new(case.op, &case.params, case.bcast, common::host_isa(), build).unwrap();
    let mut out = vec![0; 65536];
    for (ia, &a) in all.iter().enumerate() {
        for (ib, &b) in all.iter().enumerate() {
            out[(case.layout)(ia, ib)] = kernel.eval(a, b);
        }
    }
    out
}

fn binary_fused(run: &Run, case: &BinaryCase) -> Vec<i64> {
    to_codes(run.output(&case.id, "fused"), case.params.c.code)
}

#[test]
fn qlinear_add_and_mul_match_the_host_model_on_every_pair() {
    let run = run();
    let mut bad = Mismatches::default();
    for case in &run.binary {
        let all = codes(case.params.c.code);
        let want = binary_model(case, binary::builds(case.op, common::host_isa())[0]);
        let pair = |i: usize| format!("a={} b={}", all[i / 256], all[i % 256]);
        bad.check(&format!("{} {:?}", case.id, case.params), &binary_fused(run, case), &want, pair);
    }
    bad.assert_none();
}

#[test]
fn every_other_compilation_of_the_host_add_kernel_is_contradicted() {
    // Which multiply–adds the compiler contracted is measured, not assumed: each alternative
    // build of the host's kernel disagrees with ORT on some case. x86's AVX2 kernel (x86-avx2 and
    // x86-avx512vnni) is tried in every `Fixed` / `Fixed'` contraction; other hosts in the builds
    // `binary::builds` lists for them.
    let run = run();
    let host = common::host_isa();
    let adds: Vec<&BinaryCase> = run.binary.iter().filter(|c| c.op == BinaryOp::Add).collect();
    let candidates: Vec<Contractions> = if matches!(host, Isa::X86Avx2 | Isa::X86Avx512Vnni) {
        [None, Some(Fused::A), Some(Fused::B)]
            .into_iter()
            .flat_map(|fixed| [false, true].map(|scalar_fixed| Contractions { fixed, scalar_fixed, ..Contractions::default() }))
            .collect()
    } else {
        binary::builds(BinaryOp::Add, host)
    };
    let chosen = binary::builds(BinaryOp::Add, host)[0];
    for build in candidates.into_iter().filter(|&b| b != chosen) {
        let contradicted = adds.iter().any(|case| binary_model(case, build) != binary_fused(run, case));
        assert!(contradicted, "no case tells {build:?} from the {chosen:?} build on {host}");
    }
}

#[test]
fn unfused_dq_add_mul_q_matches_the_exact_reference() {
    let run = run();
    let mut bad = Mismatches::default();
    for case in run.binary.iter().filter(|c| c.bcast == Broadcast::None) {
        let t = case.params.c.code;
        let all = codes(t);
        let got = to_codes(run.output(&case.id, "unfused"), t);
        let reference = binary::reference(case.op, &case.params, Contract::Exact).unwrap();
        let want: Vec<i64> = (0..65536).map(|i| reference(all[i / 256], all[i % 256])).collect();
        bad.check(&format!("{} unfused {:?}", case.id, case.params), &got, &want, |i| format!("a={} b={}", all[i / 256], all[i % 256]));
    }
    bad.assert_none();
}

// ------------------------------------------------------------------------------------------------
// QLinearSigmoid, QLinearLeakyRelu

struct UnaryCase {
    id: String,
    op: &'static str,
    x: QParam,
    y: QParam,
    alpha: f32,
}

/// Length of the long Sigmoid input: every code at several vector lanes and in the tail.
const LONG: usize = 256 * 9 + 5;

/// The code index at position `j` of the long input (37 is odd, so every code appears).
fn long_index(j: usize) -> usize {
    (j * 37 + 11) % 256
}

fn unary_cases(oracle: &mut Oracle, rng: &mut Rng) -> Vec<UnaryCase> {
    let mut cases = Vec::new();
    for op in ["QLinearSigmoid", "QLinearLeakyRelu"] {
        for t in [CodeType::U8, CodeType::I8] {
            let d = dtype(t);
            let all = oracle.input(&format!("all_{d}"), d, &[256], || to_bytes(codes(t)));
            let long = oracle.input(&format!("long_{d}"), d, &[LONG], || to_bytes((0..LONG).map(|j| codes(t)[long_index(j)])));
            for set in 0..SETS {
                let sx = rng.scale(0.05, 3.0);
                let sy = if op == "QLinearSigmoid" { rng.scale(1.0 / 256.0, 1.0) } else { rng.scale(sx as f64, 1.5) };
                let (x, y) = (QParam::new(sx, rng.zero_point(t), t), QParam::new(sy, rng.zero_point(t), t));
                const ALPHAS: [f32; 4] = [0.01, 0.1, 0.2, 1.0 / 3.0];
                let alpha = if rng.chance(0.4) { ALPHAS[rng.int(0, 3) as usize] } else { rng.range(0.001, 0.9) as f32 };
                let id = format!("{op}-{d}-{set}");
                let q = json!({"x": qjson(&x), "y": qjson(&y)});
                let attrs = if op == "QLinearLeakyRelu" { json!({"alpha": alpha}) } else { json!({}) };
                oracle.case(json!({"id": id, "op": op, "dtype": d, "q": q, "attrs": attrs, "inputs": [all], "unfused": true}));
                if op == "QLinearSigmoid" {
                    // Two threads split the long tensor into chunks with their own tails.
                    oracle.case(json!({"id": format!("{id}-long"), "op": op, "dtype": d, "q": q, "inputs": [long], "unfused": true, "threads": 2}));
                }
                cases.push(UnaryCase { id, op, x, y, alpha });
            }
        }
    }
    cases
}

#[test]
fn qlinear_sigmoid_equals_ort_own_unfused_sigmoid_the_axiom() {
    let run = run();
    let mut bad = Mismatches::default();
    for case in run.unary.iter().filter(|c| c.op == "QLinearSigmoid") {
        let t = case.y.code;
        let all = codes(t);
        let fused = run.codes(&case.id, "fused", t);
        bad.check(&format!("{} unfused {:?} {:?}", case.id, case.x, case.y), &run.codes(&case.id, "unfused", t), &fused, |i| format!("x={}", all[i]));
        let long_id = format!("{}-long", case.id);
        let expect: Vec<i64> = (0..LONG).map(|j| fused[long_index(j)]).collect();
        bad.check(&format!("{long_id} unfused"), &run.codes(&long_id, "unfused", t), &expect, |j| format!("position {j}, x={}", all[long_index(j)]));
        bad.check(&format!("{long_id} fused"), &run.codes(&long_id, "fused", t), &expect, |j| format!("position {j}, x={}", all[long_index(j)]));
        // The axiom is x86's (one kernel for body and tail); NEON's tail is not modelled.
        let verdict = lut::prove_sigmoid(case.x, case.y, common::host_isa());
        assert_eq!(verdict.is_exact(), common::host_isa().is_x86(), "{verdict:?}");
    }
    bad.assert_none();
}

#[test]
fn qlinear_leaky_relu_matches_the_table_model_and_the_reference() {
    let run = run();
    let mut bad = Mismatches::default();
    for case in run.unary.iter().filter(|c| c.op == "QLinearLeakyRelu") {
        let t = case.y.code;
        let all = codes(t);
        let table = lut::leaky_relu_table(case.x, case.y, case.alpha);
        let model: Vec<i64> = all.iter().map(|&q| table.get(q)).collect();
        let what = format!("{} alpha {} {:?} {:?}", case.id, case.alpha, case.x, case.y);
        bad.check(&what, &run.codes(&case.id, "fused", t), &model, |i| format!("x={}", all[i]));
        let reference = Lut::build(case.x, case.y, |v| lut::leaky_relu(v, case.alpha));
        let want: Vec<i64> = all.iter().map(|&q| reference.get(q)).collect();
        bad.check(&format!("{what} unfused"), &run.codes(&case.id, "unfused", t), &want, |i| format!("x={}", all[i]));
        assert!(lut::prove_leaky_relu(case.x, case.y, case.alpha, Contract::Exact).is_exact(), "{what}");
    }
    bad.assert_none();
}

// ------------------------------------------------------------------------------------------------
// QLinearWhere, QLinearConcat

struct RequantCase {
    id: String,
    op: &'static str,
    inputs: Vec<QParam>,
    out: QParam,
}

fn requant_cases(oracle: &mut Oracle, rng: &mut Rng) -> Vec<RequantCase> {
    let mut cases = Vec::new();
    for t in [CodeType::U8, CodeType::I8] {
        let d = dtype(t);
        let twice = oracle.input(&format!("twice_{d}"), d, &[512], || to_bytes(codes(t).into_iter().chain(codes(t))));
        let cond = oracle.input("cond_half", "bool", &[512], || (0..512).map(|i| (i < 256) as u8).collect());
        let row = oracle.input(&format!("row_{d}"), d, &[1, 256], || to_bytes(codes(t)));
        for set in 0..SETS {
            let out = QParam::new(rng.scale(0.03, 3.0), rng.zero_point(t), t);
            // Now and then an input shares the output's parameters: ORT then copies its bytes.
            let input = |rng: &mut Rng| if rng.chance(0.25) { out } else { QParam::new(rng.scale(out.scale as f64, 1.5), rng.zero_point(t), t) };
            let (x, y) = (input(rng), input(rng));
            let id = format!("QLinearWhere-{d}-{set}");
            let q = json!({"x": qjson(&x), "y": qjson(&y), "z": qjson(&out)});
            oracle.case(json!({"id": id, "op": "QLinearWhere", "dtype": d, "q": q, "inputs": [cond, twice, twice], "unfused": true}));
            cases.push(RequantCase { id, op: "QLinearWhere", inputs: vec![x, y], out });

            let n = rng.int(2, 3) as usize;
            let inputs: Vec<QParam> = (0..n).map(|_| input(rng)).collect();
            let id = format!("QLinearConcat-{d}-{set}");
            let mut q = json!({"y": qjson(&out)});
            for (i, p) in inputs.iter().enumerate() {
                q[format!("x{i}")] = qjson(p);
            }
            let data: Vec<Value> = (0..n).map(|_| row.clone()).collect();
            oracle.case(json!({"id": id, "op": "QLinearConcat", "dtype": d, "q": q, "attrs": {"axis": 0}, "inputs": data, "unfused": true}));
            cases.push(RequantCase { id, op: "QLinearConcat", inputs, out });
        }
    }
    cases
}

#[test]
fn qlinear_where_and_concat_match_copy_or_table_per_input() {
    let run = run();
    let mut bad = Mismatches::default();
    for case in &run.requant {
        let t = case.out.code;
        let all = codes(t);
        // Where: the first half takes x (condition true), the second y; Concat: one row per input.
        let model: Vec<i64> = case
            .inputs
            .iter()
            .flat_map(|&p| {
                let r = Requant::new(p, case.out);
                all.iter().map(move |&q| r.eval(q)).collect::<Vec<_>>()
            })
            .collect();
        let reference: Vec<i64> = case
            .inputs
            .iter()
            .flat_map(|&p| {
                let r = Lut::build(p, case.out, |v| v);
                all.iter().map(move |&q| r.get(q)).collect::<Vec<_>>()
            })
            .collect();
        let at = |i: usize| format!("input {} code {}", i / 256, all[i % 256]);
        let what = format!("{} {:?} → {:?}", case.id, case.inputs, case.out);
        bad.check(&what, &run.codes(&case.id, "fused", t), &model, at);
        bad.check(&format!("{what} unfused"), &run.codes(&case.id, "unfused", t), &reference, at);
        let verdict = match case.op {
            "QLinearWhere" => lut::prove_where(case.inputs[0], case.inputs[1], case.out, Contract::Exact),
            _ => lut::prove_concat(&case.inputs, case.out, Contract::Exact),
        };
        assert_eq!(verdict.is_exact(), model == reference, "{what}: {verdict:?}");
    }
    bad.assert_none();
}

// ------------------------------------------------------------------------------------------------
// QLinearGlobalAveragePool, QLinearAveragePool

struct PoolCase {
    id: String,
    params: PoolParams,
    /// `None` for QLinearGlobalAveragePool.
    geom: Option<PoolGeometry>,
    spatial: Vec<u64>,
    /// Channel-major input codes.
    input: Vec<Vec<i64>>,
    /// A proof's counterexample, run in the last channel: its output's index and the claim.
    refutation: Option<(usize, Counterexample)>,
}

/// A window of `n` codes whose accumulator `Σ(x − zX)` is `acc`: the far end, one partial code,
/// the rest at the zero point.
fn window_for(x: QParam, n: u64, acc: i64) -> Vec<i64> {
    let (lo, hi) = x.code.range();
    let mut left = acc;
    (0..n)
        .map(|_| {
            let q = (x.zero_point + left).clamp(lo, hi);
            left -= q - x.zero_point;
            q
        })
        .collect()
}

fn pool_params(rng: &mut Rng, t: CodeType, n: u64) -> PoolParams {
    // Half the input scales are powers of two, where small windows sum exactly (P2).
    let sx = if rng.chance(0.5) { 2f32.powi(rng.int(-9, -1) as i32) } else { rng.scale(0.02, 3.0) };
    let sy = match rng.int(0, 9) {
        // ORT throws: sX/(sY·N) ≥ 256, or below 2^-32.
        0 => sx / (n as f32 * 1024.0),
        1 => sx * 1.0e10,
        _ => rng.scale(sx as f64, 1.5),
    };
    PoolParams { x: QParam::new(sx, rng.zero_point(t), t), y: QParam::new(sy, rng.zero_point(t), t) }
}

fn random_geometry(rng: &mut Rng) -> PoolGeometry {
    let rank = [1, 2, 2, 2, 3][rng.int(0, 4) as usize];
    let global = rng.chance(0.15);
    let mut g = PoolGeometry {
        input: vec![],
        kernel: vec![],
        strides: vec![],
        pads: vec![0; 2 * rank],
        dilations: vec![1; rank],
        ceil_mode: rng.chance(0.3),
        count_include_pad: rng.chance(0.5),
    };
    for d in 0..rank {
        let n = rng.int(if rank == 3 { 2 } else { 3 }, if rank == 3 { 5 } else { 9 }) as u64;
        let k = if global { n } else { rng.int(1, 4.min(n as i64 + 1)) as u64 };
        g.input.push(n);
        g.kernel.push(k);
        g.strides.push(rng.int(1, 3) as u64);
        if !global {
            // ORT requires pads smaller than the kernel.
            g.pads[d] = rng.int(0, k as i64 - 1) as u64;
            g.pads[d + rank] = rng.int(0, k as i64 - 1) as u64;
        }
    }
    g
}

/// Parameter sets whose proofs refute the fusion, each counterexample run as one more channel:
/// global pools (P2 holds, and P2 fails with an order-independent window) and the float
/// path's zero-point double rounding.
fn pinned_pool_cases(oracle: &mut Oracle) -> Vec<PoolCase> {
    let u8p = |s: f32, z: i64| QParam::new(s, z, CodeType::U8);
    let i8p = |s: f32, z: i64| QParam::new(s, z, CodeType::I8);
    let global = [
        (u8p(0.125, 128), u8p(0.1, 128), (3, 3)),
        (u8p(0.0625, 128), u8p(0.01, 128), (1, 3)),
        (u8p(0.03, 128), u8p(0.02, 128), (1, 7)),
        (i8p(0.03, 0), i8p(0.02, 3), (1, 7)),
    ];
    let mut cases = Vec::new();
    for (i, (x, y, (h, w))) in global.into_iter().enumerate() {
        let params = PoolParams { x, y };
        let n = h * w;
        let c = pool::prove_global_average_pool(&params, n, Contract::Exact).counterexample().cloned().expect("a refutation");
        let (lo, hi) = x.code.range();
        let mut input: Vec<Vec<i64>> = (n as i64 * (lo - x.zero_point)..=n as i64 * (hi - x.zero_point)).map(|acc| window_for(x, n, acc)).collect();
        input.push(qdqc_ort::pool::counterexample_window(&c));
        let last = input.len() - 1;
        let mut case = pool_case(oracle, format!("QLinearGlobalAveragePool-pinned-{i}"), params, None, vec![h, w], input);
        case.refutation = Some((last, c));
        cases.push(case);
    }
    let geom = common::geometry::pool_geometry_5x5();
    let params = PoolParams { x: u8p(0.5, 128), y: u8p(0.3, 128) };
    let c = pool::prove_average_pool(&params, &geom, common::host_isa(), Contract::Exact).counterexample().cloned().expect("a refutation");
    let codes = qdqc_ort::pool::counterexample_window(&c);
    let windows = geom.windows().unwrap();
    let (at, window) = windows.iter().enumerate().find(|(_, w)| w.inputs.len() == codes.len()).expect("a window of that size");
    let mut channel = vec![params.x.zero_point; 25];
    for (&i, &q) in window.inputs.iter().zip(&codes) {
        channel[i] = q;
    }
    let mut case = pool_case(oracle, "QLinearAveragePool-pinned".to_string(), params, Some(geom), vec![5, 5], vec![channel]);
    case.refutation = Some((at, c));
    cases.push(case);
    cases
}

fn pool_cases(oracle: &mut Oracle, rng: &mut Rng) -> Vec<PoolCase> {
    const IMAGES: [(u64, u64); 9] = [(1, 1), (1, 2), (1, 3), (2, 2), (1, 7), (3, 3), (4, 4), (5, 5), (7, 7)];
    let mut cases = pinned_pool_cases(oracle);
    for t in [CodeType::U8, CodeType::I8] {
        let (lo, hi) = t.range();
        let d = dtype(t);
        for set in 0..SETS {
            // Global: one channel per reachable accumulator.
            let (h, w) = IMAGES[set % IMAGES.len()];
            let n = h * w;
            let params = pool_params(rng, t, n);
            let zx = params.x.zero_point;
            let input: Vec<Vec<i64>> = (n as i64 * (lo - zx)..=n as i64 * (hi - zx)).map(|acc| window_for(params.x, n, acc)).collect();
            let id = format!("QLinearGlobalAveragePool-{d}-{set}");
            cases.push(pool_case(oracle, id, params, None, vec![h, w], input));

            // AveragePool: random geometry, random and constant channels.
            let geom = random_geometry(rng);
            let size: u64 = geom.input.iter().product();
            let params = pool_params(rng, t, geom.kernel.iter().product());
            let mut input: Vec<Vec<i64>> = (0..24).map(|_| (0..size).map(|_| rng.int(lo, hi)).collect()).collect();
            input.extend([lo, hi, params.x.zero_point].map(|c| vec![c; size as usize]));
            let id = format!("QLinearAveragePool-{d}-{set}");
            let spatial = geom.input.clone();
            cases.push(pool_case(oracle, id, params, Some(geom), spatial, input));
        }
    }
    cases
}

fn pool_case(oracle: &mut Oracle, id: String, params: PoolParams, geom: Option<PoolGeometry>, spatial: Vec<u64>, input: Vec<Vec<i64>>) -> PoolCase {
    let t = params.x.code;
    let mut shape = vec![1, input.len()];
    shape.extend(spatial.iter().map(|&s| s as usize));
    let data = oracle.input(&id, dtype(t), &shape, || to_bytes(input.iter().flatten().copied()));
    let q = json!({"x": qjson(&params.x), "y": qjson(&params.y)});
    let (op, attrs) = match &geom {
        None => ("QLinearGlobalAveragePool", json!({"channels_last": 0})),
        Some(g) => (
            "QLinearAveragePool",
            json!({"kernel_shape": g.kernel, "strides": g.strides, "pads": g.pads, "count_include_pad": g.count_include_pad as i64, "ceil_mode": g.ceil_mode as i64}),
        ),
    };
    oracle.case(json!({"id": id, "op": op, "dtype": dtype(t), "q": q, "attrs": attrs, "inputs": [data], "unfused": true, "may_fail": true}));
    PoolCase { id, params, geom, spatial, input, refutation: None }
}

/// Every output of a pooling case: its window's codes and divisor, per channel.
fn pool_windows(case: &PoolCase) -> Vec<(Vec<i64>, u64)> {
    let windows = match &case.geom {
        Some(g) => g.windows().unwrap(),
        None => {
            let n: u64 = case.spatial.iter().product();
            vec![pool::Window { inputs: (0..n as usize).collect(), divisor: n }]
        }
    };
    case.input.iter().flat_map(|channel| windows.iter().map(|w| (w.inputs.iter().map(|&i| channel[i]).collect(), w.divisor))).collect()
}

/// The unfused reference of one window when its float sum is exact in any order.
fn pool_reference(p: &PoolParams, window: &[i64], divisor: u64) -> i64 {
    let sum = window.iter().fold(0f32, |s, &q| s + dequantize(q, p.x.scale, p.x.zero_point));
    quantize(sum / divisor as f32, p.y.scale, p.y.zero_point, p.y.code)
}

#[test]
fn quantized_pools_match_the_models_and_throw_where_ort_throws() {
    let run = run();
    let mut bad = Mismatches::default();
    let (mut ran, mut threw, mut exact_unfused) = (0, 0, 0);
    for case in &run.pools {
        let t = case.params.y.code;
        let n: u64 = case.spatial.iter().product();
        let kernel = match &case.geom {
            None => GlobalPoolKernel::new(&case.params, n).map(AveragePoolKernel::Global),
            Some(g) => AveragePoolKernel::new(&case.params, g, common::host_isa()),
        };
        let what = format!("{} {:?} {:?}", case.id, case.params, case.geom);
        match (kernel, run.error(&case.id)) {
            (Err(_), Some(_)) => {
                threw += 1;
                continue;
            }
            (Ok(kernel), None) => {
                ran += 1;
                let windows = pool_windows(case);
                let model: Vec<i64> = windows.iter().map(|(w, div)| kernel.eval(w, *div)).collect();
                let at = |i: usize| format!("output {i}: window {:?} / {}", windows[i].0, windows[i].1);
                bad.check(&what, &run.codes(&case.id, "fused", t), &model, at);
                // Where the float sum is exact in any order, the unfused graph is the reference.
                if windows.iter().all(|(w, _)| pool::float_sum_is_exact(case.params.x, w.len() as u64)) {
                    exact_unfused += 1;
                    let reference: Vec<i64> = windows.iter().map(|(w, div)| pool_reference(&case.params, w, *div)).collect();
                    bad.check(&format!("{what} unfused"), &run.codes(&case.id, "unfused", t), &reference, at);
                }
            }
            (model, ort) => panic!("{what}: model {:?} but ORT {:?}", model.err(), ort),
        }
    }
    let float_paths = run.pools.iter().filter(|c| c.geom.as_ref().is_some_and(|g| !g.is_global())).count();
    eprintln!("pools: {ran} ran ({float_paths} on the float path), {threw} threw as modelled, {exact_unfused} with an exact unfused path");
    assert!(threw > 0 && exact_unfused > 0 && float_paths > 0 && float_paths < run.pools.len() / 2);
    bad.assert_none();
}

#[test]
fn pool_refutations_reproduce_in_ort() {
    // Each counterexample window: ORT's fused kernel gives the claimed fused code and ORT's own
    // unfused graph (whose float sum is exact in any order for these windows) the unfused one.
    let run = run();
    let mut reproduced = 0;
    for case in &run.pools {
        let Some((at, c)) = &case.refutation else { continue };
        let t = case.params.y.code;
        let (fused, unfused) = (run.codes(&case.id, "fused", t), run.codes(&case.id, "unfused", t));
        assert_eq!((unfused[*at], fused[*at]), (c.unfused, c.fused), "{}: {c}", case.id);
        reproduced += 1;
    }
    assert_eq!(reproduced, 5);
}

#[test]
fn global_pool_verdicts_agree_with_ort_fused_against_unfused() {
    // Where P2 holds, ORT's own fused and unfused outputs differ exactly at the accumulators the
    // proof says differ (each channel is one accumulator).
    let run = run();
    let (mut proven, mut refuted) = (0, 0);
    for case in run.pools.iter().filter(|c| c.geom.is_none() && run.error(&c.id).is_none()) {
        let n: u64 = case.spatial.iter().product();
        if !pool::float_sum_is_exact(case.params.x, n) {
            continue;
        }
        let t = case.params.y.code;
        let (fused, unfused) = (run.codes(&case.id, "fused", t), run.codes(&case.id, "unfused", t));
        let verdict = pool::prove_global_average_pool(&case.params, n, Contract::Exact);
        // One channel per accumulator (a pinned counterexample channel follows them).
        let (lo, hi) = t.range();
        let accs = (n as i64 * (hi - lo) + 1) as usize;
        let differing = fused[..accs].iter().zip(&unfused[..accs]).filter(|(a, b)| a != b).count() as u64;
        match &verdict {
            Verdict::Exact { .. } => {
                assert_eq!(differing, 0, "{}: proven, yet ORT differs", case.id);
                proven += 1;
            }
            Verdict::Refuted { counterexample, .. } => {
                refuted += 1;
                assert_eq!(differing, counterexample.differing, "{}: {counterexample}", case.id);
                let acc = counterexample.inputs[0].1;
                let channel = (acc - n as i64 * (t.range().0 - case.params.x.zero_point)) as usize;
                assert_eq!((unfused[channel], fused[channel]), (counterexample.unfused, counterexample.fused), "{}", case.id);
            }
            Verdict::Unknown { reason } => panic!("{}: P2 holds, yet unknown: {reason}", case.id),
        }
    }
    eprintln!("global pools with P2: {proven} proven, {refuted} refuted, as ORT shows");
    assert!(proven > 0 && refuted > 0);
}

// ------------------------------------------------------------------------------------------------
// QLinearSoftmax

struct SoftmaxCase {
    id: String,
    x: QParam,
    y: QParam,
    rows: Vec<Vec<i64>>,
    /// The proof's counterexample, run as row 0.
    refuted: Option<Counterexample>,
}

fn softmax_cases(oracle: &mut Oracle, rng: &mut Rng) -> Vec<SoftmaxCase> {
    const LENGTHS: [usize; 7] = [1, 2, 3, 5, 8, 33, 100];
    let mut cases = Vec::new();
    for t in [CodeType::U8, CodeType::I8] {
        let (lo, hi) = t.range();
        let d = dtype(t);
        for set in 0..SETS / 2 {
            let len = LENGTHS[set % LENGTHS.len()];
            let x = QParam::new(rng.scale(0.1, 2.0), rng.zero_point(t), t);
            let y = if rng.chance(0.5) { QParam::new(1.0 / 256.0, lo, t) } else { QParam::new(rng.scale(1.0 / 256.0, 1.5), rng.zero_point(t), t) };
            let verdict = softmax::prove(x, y, len, common::host_isa());
            assert!(!verdict.is_exact());
            let refuted = verdict.counterexample().cloned();
            let mut rows = Vec::new();
            if let Some(c) = &refuted {
                rows.push((0..len).map(|i| if i == 0 { c.inputs[0].1 } else { c.inputs[1].1 }).collect());
            }
            for _ in 0..40 {
                let spread = rng.int(0, hi - lo);
                let base = rng.int(lo, hi - spread);
                rows.push((0..len).map(|_| rng.int(base, base + spread)).collect());
            }
            let id = format!("QLinearSoftmax-{d}-{set}");
            let data = oracle.input(&id, d, &[rows.len(), len], || to_bytes(rows.iter().flatten().copied()));
            let q = json!({"x": qjson(&x), "y": qjson(&y)});
            oracle.case(json!({"id": id, "op": "QLinearSoftmax", "dtype": d, "q": q, "attrs": {"axis": -1, "opset": 13}, "inputs": [data], "unfused": true}));
            cases.push(SoftmaxCase { id, x, y, rows, refuted });
        }
    }
    cases
}

#[test]
fn qlinear_softmax_matches_the_model_and_its_refutations_reproduce() {
    let run = run();
    let mut bad = Mismatches::default();
    let mut reproduced = 0;
    for case in &run.softmax {
        let t = case.y.code;
        let len = case.rows[0].len();
        let kernel = SoftmaxKernel::new(case.x, case.y, len, common::host_isa()).unwrap();
        let model: Vec<i64> = case.rows.iter().flat_map(|r| kernel.row(r).expect("a written row").into_iter().map(|o| o.code)).collect();
        let fused = run.codes(&case.id, "fused", t);
        bad.check(&format!("{} {:?} {:?}", case.id, case.x, case.y), &fused, &model, |i| format!("row {:?}, element {}", case.rows[i / len], i % len));
        if let Some(c) = &case.refuted {
            // The counterexample row: ORT's fused kernel gives the model's code, ORT's own float
            // Softmax the real result's.
            let unfused = run.codes(&case.id, "unfused", t);
            let i = if c.exact.as_deref().is_some_and(|e| e.starts_with("y[0]")) { 0 } else { len - 1 };
            assert_eq!((unfused[i], fused[i]), (c.unfused, c.fused), "{}: {c}", case.id);
            reproduced += 1;
        }
    }
    eprintln!("softmax: {reproduced} refutations reproduced in ORT");
    assert!(reproduced > 0);
    bad.assert_none();
}
