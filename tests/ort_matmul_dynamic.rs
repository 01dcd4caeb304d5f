//! Differential tests of qdqc's model of QLinearMatMul over two activations
//! (`qdqc_ort::matmul_dynamic`) against the real ONNX Runtime 1.31.1 on this machine,
//! with the host's profile (`common::host_isa`): B is a graph input, so nothing is prepacked.
//! Random types, zero points, scales and batch-broadcast shapes: every output byte must equal the
//! model's (on x86-avx2 the u8×s8 kernel's int16 pair saturation included, and it must show;
//! elsewhere the model has none). Groups `prove`
//! accepts under `exact` give the unfused DQ → MatMul → Q twin's bytes; a refuted group's
//! counterexample rows give the reported codes in both.
//!
//! The cases run in one Python process (`tests/oracle/requant.py`, `"w_input": true`).

mod common;

use common::Rng;
use qdqc_exact::reference::CodeType::{self, I8, U8};
use qdqc_exact::{Contract, QParam, Verdict};
use qdqc_ort::Isa;
use qdqc_ort::matmul_dynamic::{DynamicMatMul, prove};
use qdqc_ort::requant::{GemmGroup, GemmKind, accumulate, requantize};
use serde_json::{Value, json};

const TYPES: [(CodeType, CodeType); 3] = [(U8, U8), (U8, I8), (I8, I8)];

impl Rng {
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    fn codes(&mut self, t: CodeType, n: usize) -> Vec<i64> {
        let (lo, hi) = t.range();
        (0..n).map(|_| self.int(lo, hi)).collect()
    }

    /// A positive f32 with a random 24-bit mantissa in `[2^lo, 2^hi)`.
    fn scale(&mut self, lo: i32, hi: i32) -> f32 {
        let biased = (self.int(lo as i64, hi as i64 - 1) + 127) as u32;
        f32::from_bits((biased << 23) | (self.next() as u32 & 0x7f_ffff))
    }
}

/// One QLinearMatMul `A[…, M, K] × B[…, K, N]` with B a graph input.
#[derive(Clone, Debug)]
struct Case {
    name: String,
    g: DynamicMatMul,
    a_shape: Vec<usize>,
    a: Vec<i64>,
    b_shape: Vec<usize>,
    b: Vec<i64>,
    unfused: bool,
}

fn type_name(t: CodeType) -> &'static str {
    if t == U8 { "u8" } else { "i8" }
}

impl Case {
    fn json(&self) -> Value {
        let g = &self.g;
        json!({
            "op": "matmul", "x_type": type_name(g.a.code), "w_type": type_name(g.b.code),
            "x_shape": self.a_shape, "x": self.a, "w_shape": self.b_shape, "w": self.b, "w_input": true,
            "x_scale": g.a.scale.to_bits(), "x_zp": g.a.zero_point, "w_scale": [g.b.scale.to_bits()], "w_zp": [g.b.zero_point],
            "y_scale": g.y.scale.to_bits(), "y_zp": g.y.zero_point, "bias": null, "b_scale": [],
            "attrs": {}, "level": "ORT_DISABLE_ALL", "unfused": self.unfused, "w_axis": 1,
        })
    }

    /// The model: batch dims broadcast as numpy does, the host kernel's accumulation (B packed
    /// on the fly as a constant B is: `requant::accumulate` of a one-column group, so x86-avx2's
    /// u8×s8 pairs saturate to int16), ORT's requantization; and how many outputs that pair
    /// saturation changed.
    fn expected(&self) -> (Vec<i64>, usize) {
        let (ra, rb) = (self.a_shape.len(), self.b_shape.len());
        let (m, k, n) = (self.a_shape[ra - 2], self.a_shape[ra - 1], self.b_shape[rb - 1]);
        let (ba, bb) = (&self.a_shape[..ra - 2], &self.b_shape[..rb - 2]);
        let rank = ba.len().max(bb.len());
        let dim = |s: &[usize], i: usize| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
        let batch: Vec<usize> = (0..rank).map(|i| dim(ba, i).max(dim(bb, i))).collect();
        // Flat batch index of an operand for an output batch index (size-1 dims broadcast).
        let offset = |s: &[usize], idx: &[usize]| (0..rank).fold(0, |acc, i| acc * dim(s, i) + if dim(s, i) == 1 { 0 } else { idx[i] });
        let (g, multiplier) = (&self.g, self.g.multiplier());
        let (mut out, mut saturated) = (Vec::new(), 0);
        for flat in 0..batch.iter().product::<usize>() {
            let mut idx = vec![0; rank];
            let mut r = flat;
            for i in (0..rank).rev() {
                (idx[i], r) = (r % batch[i], r / batch[i]);
            }
            let (oa, ob) = (offset(ba, &idx) * m * k, offset(bb, &idx) * k * n);
            for i in 0..m {
                for j in 0..n {
                    let row = &self.a[oa + i * k..oa + (i + 1) * k];
                    let column = (0..k).map(|t| self.b[ob + t * n + j]).collect();
                    let one = GemmGroup::new(GemmKind::MatMul, g.a, g.b.code, vec![column], vec![g.b.scale], vec![g.b.zero_point], g.y);
                    let exact: i64 = row.iter().zip(&one.weights[0]).map(|(&x, &w)| (x - g.a.zero_point) * (w - g.b.zero_point)).sum();
                    let acc = accumulate(&one, 0, row, common::host_isa());
                    let y = requantize(acc, multiplier, g.y.zero_point, g.y.code, common::host_isa());
                    saturated += usize::from(y != requantize(exact as i32, multiplier, g.y.zero_point, g.y.code, common::host_isa()));
                    out.push(y);
                }
            }
        }
        (out, saturated)
    }
}

fn run_ort(cases: &[Case]) -> Vec<Result<Vec<i64>, String>> {
    common::run_requant_oracle(cases.iter().map(Case::json).collect())
}

/// Shapes of A and B: plain, batched on one side, batched on both with broadcasting.
fn shapes(rng: &mut Rng, i: usize) -> (Vec<usize>, Vec<usize>) {
    let (m, k, n) = (rng.int(1, 9) as usize, rng.int(1, 40) as usize, rng.int(1, 12) as usize);
    match i % 5 {
        0 => (vec![m, k], vec![k, n]),
        1 => (vec![rng.int(2, 3) as usize, m, k], vec![k, n]),
        2 => (vec![m, k], vec![rng.int(2, 3) as usize, k, n]),
        3 => (vec![2, 1, m, k], vec![3, k, n]),
        _ => (vec![1, 4, m, k], vec![1, 4, k, n]),
    }
}

fn random_case(rng: &mut Rng, i: usize, pow2: bool) -> Case {
    let (at, bt) = TYPES[i % 3];
    let (a_shape, b_shape) = shapes(rng, i);
    let k = a_shape[a_shape.len() - 1];
    let (sa, sb, sy) = if pow2 {
        (2f32.powi(-rng.int(3, 7) as i32), 2f32.powi(-rng.int(3, 7) as i32), 2f32.powi(-rng.int(0, 4) as i32))
    } else {
        (rng.scale(-9, -3), rng.scale(-9, -3), rng.scale(-6, 0))
    };
    let q = |s: f32, t: CodeType, rng: &mut Rng| QParam::new(s, rng.codes(t, 1)[0], t);
    let g = DynamicMatMul::new(q(sa, at, rng), q(sb, bt, rng), k, q(sy, at, rng));
    let (na, nb) = (a_shape.iter().product(), b_shape.iter().product());
    Case {
        name: format!("{} {i} {}×{} {a_shape:?}×{b_shape:?}", if pow2 { "pow2" } else { "random" }, type_name(at), type_name(bt)),
        g,
        a: rng.codes(at, na),
        b: rng.codes(bt, nb),
        a_shape,
        b_shape,
        unfused: false,
    }
}

#[test]
fn qlinear_matmul_of_two_activations_matches_onnxruntime_byte_for_byte() {
    let mut rng = Rng(0x00da_7a11);
    let mut cases: Vec<Case> = (0..60).map(|i| random_case(&mut rng, i, i % 2 == 0)).collect();
    // Proven groups: their unfused twins must give the same bytes.
    let twins: Vec<usize> = (0..cases.len()).filter(|&i| prove(&cases[i].g, common::host_isa(), Contract::Exact).is_exact()).collect();
    assert!(twins.len() >= 10, "only {} proven cases", twins.len());
    cases.extend(twins.iter().map(|&i| Case { name: format!("{} unfused", cases[i].name), unfused: true, ..cases[i].clone() }).collect::<Vec<_>>());
    let results = run_ort(&cases);
    let n = cases.len() - twins.len();
    let (mut outputs, mut saturated) = (0, 0);
    for (case, result) in cases[..n].iter().zip(&results) {
        let got = result.as_ref().unwrap_or_else(|e| panic!("{}: ORT refused: {e}", case.name));
        let (want, changed) = case.expected();
        saturated += changed;
        assert_eq!(got.len(), want.len(), "{}: output size", case.name);
        let diffs = (0..got.len()).filter(|&i| got[i] != want[i]).count();
        assert_eq!(diffs, 0, "{}: {diffs} of {} outputs differ from the model; {:?}", case.name, got.len(), case.g);
        outputs += got.len();
    }
    // Random full-range u8×s8 codes meet int16 pair saturation: where ORT's kernel has it, the
    // sweep must have checked outputs it changed; elsewhere the model has none.
    if common::host_isa() == Isa::X86Avx2 {
        assert!(saturated > 0, "no output changed by int16 pair saturation: the x86-avx2 model went unchecked");
    } else {
        assert_eq!(saturated, 0, "pair saturation modelled on {}", common::host_isa());
    }
    for (j, &i) in twins.iter().enumerate() {
        let unfused = results[n + j].as_ref().unwrap_or_else(|e| panic!("{}: {e}", cases[n + j].name));
        assert_eq!(unfused, results[i].as_ref().unwrap(), "{}: proven, but fused and unfused differ in ORT", cases[i].name);
    }
    println!(
        "{n} cases, {outputs} output bytes equal the model ({saturated} changed by int16 pair saturation); {} proven cases equal their unfused twins",
        twins.len()
    );
}

/// A refuted group's counterexample, run as one row of A times one column of B, gives the
/// reported codes in ORT: unfused from DQ → MatMul → Q, fused from QLinearMatMul.
#[test]
fn refutations_reproduce_in_onnxruntime() {
    let k = 16;
    let q = |s: f32, z: i64| QParam::new(s, z, U8);
    let groups = [
        DynamicMatMul::new(q(2f32.powi(-5), 122), q(2f32.powi(-5), 122), k, q(0.3, 136)),
        DynamicMatMul::new(q(2f32.powi(-8), 0), q(2f32.powi(-5), 124), k, q(f32::from_bits(0x3c91_2345), 116)),
        // P2 fails: refuted by rows with a single nonzero product.
        DynamicMatMul::new(q(f32::from_bits(0x3cc7_3ee7), 122), q(f32::from_bits(0x3cc7_3ee7), 122), k, q(f32::from_bits(0x3dc2_e95a), 136)),
    ];
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let v = prove(g, common::host_isa(), Contract::Exact);
        let Verdict::Refuted { counterexample: c, .. } = &v else { panic!("group {i}: {v:?}") };
        let get = |name: &str, t: usize| {
            let find = |n: &str| c.inputs.iter().find(|(m, _)| m == n).map(|(_, v)| *v);
            find(&format!("{name}[{t}]")).or(find(&format!("{name}[*]"))).unwrap()
        };
        let (a, b): (Vec<i64>, Vec<i64>) = (0..k).map(|t| (get("a", t), get("b", t))).unzip();
        let case = Case { name: format!("refuted {i}"), g: g.clone(), a_shape: vec![1, k], a, b_shape: vec![k, 1], b, unfused: false };
        cases.push(Case { name: format!("refuted {i} unfused"), unfused: true, ..case.clone() });
        cases.push(case);
        expected.push((c.unfused, c.fused));
    }
    let results = run_ort(&cases);
    for (i, (unfused, fused)) in expected.into_iter().enumerate() {
        let out = |j: usize| results[j].as_ref().unwrap_or_else(|e| panic!("{}: {e}", cases[j].name))[0];
        assert_eq!((out(2 * i), out(2 * i + 1)), (unfused, fused), "{}", cases[2 * i].name);
    }
}
