//! The float kernels against ONNX Runtime 1.31.1 (ORT_DISABLE_ALL, one thread, one-node models run
//! by `tests/ort/float_ort.py` in the oracle venv): bit for bit where the op is one IEEE operation
//! per element, or a P2-exact Conv/MatMul/Gemm/pool/reduction (power-of-two data whose sums are
//! exact in any order), or where our order is ORT's (BatchNormalization,
//! bilinear and nearest Resize); for library functions (Sigmoid, Tanh, Exp, Log, Erf, Gelu,
//! Softplus, Softmax, Pow), LayerNormalization and a Conv on general data the maximum deviation on
//! a sweep is printed (`--nocapture`) and bounded.
//!
//! Needs the venv (`bash tests/oracle/setup.sh`, or `QDQC_PYTHON`): without it the tests fail
//! with that message, never skip. Two NaNs count as equal whatever their payloads.

mod common;

use common::{Rng, conv_attrs as conv_params};
use qdqc_kernels::Kernels;
use qdqc_kernels::float::conv::conv;
use qdqc_kernels::float::conv_transpose::{ConvTransposeParams, conv_transpose};
use qdqc_kernels::float::elementwise::{Binary, Map, binary, map};
use qdqc_kernels::float::gemm::{GemmParams, gemm, matmul, matmul_shape};
use qdqc_kernels::float::norm::{batch_norm, layer_norm};
use qdqc_kernels::float::pool::{PoolKind, PoolParams, global_pool, pool};
use qdqc_kernels::float::reduce::{Reduce, reduce, reduce_shape};
use qdqc_kernels::float::resize::{Coordinates, Nearest, resize_linear, resize_nearest};
use qdqc_kernels::float::softmax::softmax;
use qdqc_kernels::float::unary::{self, Function};
use qdqc_kernels::float::{broadcast_shape, numel};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

enum Attr {
    F(f32),
    I(i64),
    Ints(Vec<i64>),
    S(&'static str),
}

/// One one-node model: ONNX op, opset, attributes, inputs (`None`: an optional input left out),
/// and our kernel's output for the same inputs.
/// A node's attributes.
type Attrs = Vec<(&'static str, Attr)>;

struct Case {
    name: String,
    op: &'static str,
    opset: u32,
    attrs: Attrs,
    inputs: Vec<Option<(Vec<usize>, Vec<f32>)>>,
    ours: Vec<f32>,
}

fn case(name: impl Into<String>, op: &'static str, opset: u32, attrs: Attrs, inputs: Vec<(Vec<usize>, Vec<f32>)>, ours: Vec<f32>) -> Case {
    Case { name: name.into(), op, opset, attrs, inputs: inputs.into_iter().map(Some).collect(), ours }
}

/// The oracle venv's python, or a failure saying how to make it.
fn python() -> PathBuf {
    let path = std::env::var_os("QDQC_PYTHON").map(PathBuf::from).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/venv/bin/python"));
    assert!(path.is_file(), "no oracle python at {}: run `bash tests/oracle/setup.sh` at the repository root (or set QDQC_PYTHON)", path.display());
    path
}

/// ONNX Runtime's output for every case.
fn run_ort(cases: &[Case]) -> Vec<Vec<f32>> {
    static RUN: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!("qdqc-float-ort-{}-{}", std::process::id(), RUN.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).unwrap();
    let mut json = String::from("[");
    for (i, c) in cases.iter().enumerate() {
        let attrs: Vec<String> = c
            .attrs
            .iter()
            .map(|(k, a)| match a {
                Attr::F(v) => format!(r#""{k}":["f",{}]"#, v.to_bits()),
                Attr::I(v) => format!(r#""{k}":["i",{v}]"#),
                Attr::Ints(v) => format!(r#""{k}":["ints",{v:?}]"#),
                Attr::S(v) => format!(r#""{k}":["s","{v}"]"#),
            })
            .collect();
        let mut inputs = Vec::new();
        for (j, input) in c.inputs.iter().enumerate() {
            match input {
                None => inputs.push(r#"{"absent":true}"#.to_string()),
                Some((shape, data)) => {
                    let file = dir.join(format!("{i}_{j}.bin"));
                    std::fs::write(&file, data.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
                    inputs.push(format!(r#"{{"shape":{shape:?},"file":"{}"}}"#, file.display()));
                }
            }
        }
        let sep = if i == 0 { "" } else { "," };
        write!(json, r#"{sep}{{"op":"{}","opset":{},"attrs":{{{}}},"inputs":[{}]}}"#, c.op, c.opset, attrs.join(","), inputs.join(",")).unwrap();
    }
    json.push(']');
    let spec = dir.join("cases.json");
    std::fs::write(&spec, json).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ort/float_ort.py");
    let status = Command::new(python()).arg(script).arg(&spec).arg(&dir).status().expect("running the oracle python");
    assert!(status.success(), "float_ort.py failed: {status} (is the venv complete? `bash tests/oracle/setup.sh`)");
    let outs = (0..cases.len())
        .map(|i| std::fs::read(dir.join(format!("{i}.bin"))).unwrap().chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect())
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    outs
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Every case bit for bit; all mismatches listed before failing.
fn assert_bits(cases: &[Case]) {
    let theirs = run_ort(cases);
    let mut bad = Vec::new();
    for (c, t) in cases.iter().zip(&theirs) {
        assert_eq!(c.ours.len(), t.len(), "{}: output lengths", c.name);
        let diffs: Vec<usize> = (0..t.len()).filter(|&i| !same(c.ours[i], t[i])).collect();
        if let Some(&i) = diffs.first() {
            bad.push(format!(
                "{}: {} of {} elements differ, first at {i}: ours {:e} ({:#010x}), ORT {:e} ({:#010x})",
                c.name,
                diffs.len(),
                t.len(),
                c.ours[i],
                c.ours[i].to_bits(),
                t[i],
                t[i].to_bits()
            ));
        }
    }
    eprintln!("{} cases, {} elements compared bit for bit", cases.len(), theirs.iter().map(Vec::len).sum::<usize>());
    assert!(bad.is_empty(), "outputs differ from ONNX Runtime:\n{}", bad.join("\n"));
}

/// Random values in [-4, 4) with special values mixed in (NaN, ±∞, ±0, subnormals, huge).
fn with_specials(rng: &mut Rng, n: usize) -> Vec<f32> {
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e-40, -3e-39, 3.0e38, -2.5, 0.5, 1.5];
    (0..n).map(|i| if i % 7 == 3 { specials[(i / 7) % specials.len()] } else { rng.f32_in(-4.0, 4.0) }).collect()
}

#[test]
fn elementwise_ops_are_bit_identical_to_onnx_runtime() {
    let mut rng = Rng::new(11);
    let mut cases = Vec::new();
    let binaries: [(&str, Binary, &[usize], &[usize]); 9] = [
        ("Add", Binary::Add, &[2, 3, 4], &[4]),
        ("Sub", Binary::Sub, &[3, 5], &[]),
        ("Mul", Binary::Mul, &[2, 1, 4], &[3, 1]),
        ("Div", Binary::Div, &[5, 7], &[5, 7]),
        ("Div", Binary::Div, &[], &[6, 2]),
        ("Max", Binary::Max, &[4, 6], &[6]),
        ("Min", Binary::Min, &[4, 6], &[4, 1]),
        ("PRelu", Binary::PRelu, &[2, 3, 4, 4], &[3, 1, 1]),
        ("Add", Binary::Add, &[1, 3, 1, 5], &[2, 1, 4, 1]),
    ];
    for (op, b, sa, sb) in binaries {
        let (a, bv) = (with_specials(&mut rng, numel(sa)), rng.f32s(numel(sb), -2.0, 2.0));
        let bv = if op == "PRelu" { bv } else { with_specials(&mut rng, numel(sb)) };
        let mut out = vec![0f32; numel(&broadcast_shape(sa, sb).unwrap())];
        binary(b, &a, sa, &bv, sb, &mut out).unwrap();
        cases.push(case(format!("{op} {sa:?} {sb:?}"), op, 17, vec![], vec![(sa.to_vec(), a), (sb.to_vec(), bv)], out));
    }
    // Signed zeros against each other (and NaN against a number, both ways).
    for (op, b) in [("Max", Binary::Max), ("Min", Binary::Min), ("Add", Binary::Add), ("Sub", Binary::Sub)] {
        let x = vec![0.0f32, -0.0, 0.0, -0.0, f32::NAN, 1.0];
        let y = vec![-0.0f32, 0.0, 0.0, -0.0, 1.0, f32::NAN];
        let mut out = vec![0f32; 6];
        binary(b, &x, &[6], &y, &[6], &mut out).unwrap();
        cases.push(case(format!("{op} ±0"), op, 17, vec![], vec![(vec![6], x), (vec![6], y)], out));
    }
    for e in [2.0f32, 3.0] {
        let x = with_specials(&mut rng, 60);
        let mut out = vec![0f32; 60];
        binary(Binary::Pow, &x, &[60], &[e], &[], &mut out).unwrap();
        cases.push(case(format!("Pow x^{e}"), "Pow", 15, vec![], vec![(vec![60], x), (vec![], vec![e])], out));
    }
    let maps: Vec<(&str, Map, Attrs)> = vec![
        ("Relu", Map::Relu, vec![]),
        ("LeakyRelu", Map::LeakyRelu { alpha: 0.1 }, vec![("alpha", Attr::F(0.1))]),
        ("HardSigmoid", Map::HardSigmoid { alpha: 0.2, beta: 0.5 }, vec![]),
        ("HardSigmoid", Map::HardSigmoid { alpha: 0.3, beta: 0.4 }, vec![("alpha", Attr::F(0.3)), ("beta", Attr::F(0.4))]),
        ("HardSwish", Map::HardSwish, vec![]),
        ("Sqrt", Map::Sqrt, vec![]),
        ("Neg", Map::Neg, vec![]),
        ("Abs", Map::Abs, vec![]),
        ("Floor", Map::Floor, vec![]),
        ("Ceil", Map::Ceil, vec![]),
        ("Round", Map::Round, vec![]),
        ("Reciprocal", Map::Reciprocal, vec![]),
    ];
    for (op, m, attrs) in maps {
        let mut x = with_specials(&mut rng, 200);
        x.extend([0.5f32, -0.5, 1.5, 2.5, -2.5, 3.0, -3.0, 2.9999998]);
        let mut out = vec![0f32; x.len()];
        map(m, &x, &mut out).unwrap();
        cases.push(case(op, op, 17, attrs, vec![(vec![x.len()], x)], out));
    }
    let x = with_specials(&mut rng, 100);
    let mut out = vec![0f32; 100];
    map(Map::Clip { min: -1.5, max: 2.25 }, &x, &mut out).unwrap();
    cases.push(case("Clip", "Clip", 13, vec![], vec![(vec![100], x), (vec![], vec![-1.5]), (vec![], vec![2.25])], out));
    assert_bits(&cases);
}

fn ints(v: &[usize]) -> Attr {
    Attr::Ints(v.iter().map(|&x| x as i64).collect())
}

#[test]
fn p2_exact_linear_ops_pools_and_reductions_are_bit_identical_to_onnx_runtime() {
    let mut rng = Rng::new(12);
    let mut cases = Vec::new();
    let convs = [
        (conv_params(3, 8, 1, &[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]), vec![9, 10], 2),
        (conv_params(8, 8, 8, &[3, 3], &[2, 2], &[1, 1], &[1, 1], &[0, 1]), vec![11, 9], 1),
        (conv_params(4, 12, 2, &[3, 3], &[1, 1], &[2, 2], &[2, 2], &[2, 2]), vec![8, 8], 1),
        (conv_params(16, 24, 1, &[1, 1], &[1, 1], &[1, 1], &[0, 0], &[0, 0]), vec![7, 7], 1),
        (conv_params(16, 32, 1, &[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]), vec![14, 14], 1),
        (conv_params(4, 6, 1, &[5], &[2], &[1], &[2], &[1]), vec![17], 2),
        (conv_params(2, 4, 2, &[2, 3, 2], &[1, 2, 1], &[1, 1, 2], &[1, 0, 1], &[0, 1, 1]), vec![4, 5, 6], 1),
    ];
    for (i, (p, input, batch)) in convs.into_iter().enumerate() {
        // Codes ≤ 8 at 2^-3 times codes ≤ 8 at 2^-4, ≤ 144 terms: every partial sum is exact.
        let x = rng.pow2s(batch * p.in_channels * numel(&input), 8, -3);
        let w = rng.pow2s(p.out_channels * p.in_channels / p.groups * numel(&p.kernel), 8, -4);
        let b = rng.pow2s(p.out_channels, 64, -7);
        let output = p.output(&input).unwrap();
        let mut y = vec![0f32; batch * p.out_channels * numel(&output)];
        conv(Kernels::detect(), &p, &x, batch, &input, &w, Some(&b), &mut y).unwrap();
        let attrs = vec![
            ("kernel_shape", ints(&p.kernel)),
            ("strides", ints(&p.strides)),
            ("dilations", ints(&p.dilations)),
            ("pads", ints(&[p.pads_begin.clone(), p.pads_end.clone()].concat())),
            ("group", Attr::I(p.groups as i64)),
        ];
        let mut xs = vec![batch, p.in_channels];
        xs.extend(&input);
        let mut ws = vec![p.out_channels, p.in_channels / p.groups];
        ws.extend(&p.kernel);
        cases.push(case(format!("Conv {i}"), "Conv", 11, attrs, vec![(xs, x), (ws, w), (vec![p.out_channels], b)], y));
    }
    let matmuls: [(&[usize], &[usize]); 4] = [(&[2, 3, 5, 16], &[16, 7]), (&[3, 1, 4, 8], &[2, 8, 5]), (&[8], &[8, 6]), (&[1, 70], &[70, 130])];
    for (sa, sb) in matmuls {
        let (a, b) = (rng.pow2s(numel(sa), 16, -4), rng.pow2s(numel(sb), 16, -5));
        let mut y = vec![0f32; numel(&matmul_shape(sa, sb).unwrap())];
        matmul(Kernels::detect(), &a, sa, &b, sb, &mut y).unwrap();
        cases.push(case(format!("MatMul {sa:?} {sb:?}"), "MatMul", 13, vec![], vec![(sa.to_vec(), a), (sb.to_vec(), b)], y));
    }
    for (ta, tb, c_shape) in [(false, true, vec![24]), (true, false, vec![5, 1]), (false, false, vec![5, 24])] {
        let p = GemmParams { alpha: 0.5, beta: 2.0, trans_a: ta, trans_b: tb };
        let (m, k, n) = (5, 12, 24);
        let (a, b, c) = (rng.pow2s(m * k, 16, -3), rng.pow2s(k * n, 16, -3), rng.pow2s(numel(&c_shape), 64, -6));
        let sa = if ta { [k, m] } else { [m, k] };
        let sb = if tb { [n, k] } else { [k, n] };
        let mut y = vec![0f32; m * n];
        gemm(Kernels::detect(), &p, &a, sa, &b, sb, Some((&c, &c_shape)), &mut y).unwrap();
        let attrs = vec![("alpha", Attr::F(0.5)), ("beta", Attr::F(2.0)), ("transA", Attr::I(ta.into())), ("transB", Attr::I(tb.into()))];
        cases.push(case(format!("Gemm ta={ta} tb={tb}"), "Gemm", 13, attrs, vec![(sa.to_vec(), a), (sb.to_vec(), b), (c_shape, c)], y));
    }
    // Pools: sums of ≤ 25 codes at 2^-4 are exact; the average is then one division, as in ORT.
    let (n, c, h, w) = (1, 3, 9, 10);
    let x = rng.pow2s(n * c * h * w, 100, -4);
    let pools = [
        ("MaxPool", PoolKind::Max, vec![3, 3], vec![2, 2], vec![1, 1, 1, 1], false, false),
        ("MaxPool", PoolKind::Max, vec![2, 2], vec![2, 2], vec![0, 0, 0, 0], true, false),
        ("AveragePool", PoolKind::Average, vec![3, 3], vec![2, 2], vec![1, 1, 1, 1], false, false),
        ("AveragePool", PoolKind::Average, vec![3, 3], vec![2, 2], vec![1, 1, 1, 1], false, true),
        ("AveragePool", PoolKind::Average, vec![3, 2], vec![2, 3], vec![1, 0, 0, 1], true, true),
        ("AveragePool", PoolKind::Average, vec![3, 2], vec![2, 3], vec![1, 0, 0, 1], true, false),
        ("AveragePool", PoolKind::Average, vec![5, 5], vec![3, 3], vec![2, 2, 2, 2], true, true),
        ("MaxPool", PoolKind::Max, vec![2, 3], vec![1, 2], vec![1, 0, 1, 2], true, false),
        ("AveragePool", PoolKind::Average, vec![2, 3], vec![1, 2], vec![1, 0, 1, 2], true, true),
        ("AveragePool", PoolKind::Average, vec![2, 3], vec![1, 2], vec![1, 0, 1, 2], false, false),
    ];
    for (i, (op, kind, k, s, pads, ceil, include)) in pools.into_iter().enumerate() {
        // The last three cases dilate (ORT's non-MLAS pool functors).
        let dilations = if i >= 7 { vec![2, 2] } else { vec![1, 1] };
        let p = PoolParams {
            kernel: k.clone(),
            strides: s.clone(),
            dilations: dilations.clone(),
            pads_begin: pads[..2].to_vec(),
            pads_end: pads[2..].to_vec(),
            ceil_mode: ceil,
            count_include_pad: include,
        };
        let out = p.output(&[h, w]).unwrap();
        let mut y = vec![0f32; n * c * numel(&out)];
        pool(kind, &p, &x, n * c, &[h, w], &mut y).unwrap();
        let mut attrs = vec![
            ("kernel_shape", ints(&k)),
            ("strides", ints(&s)),
            ("pads", ints(&pads)),
            ("ceil_mode", Attr::I(ceil.into())),
            ("dilations", ints(&dilations)),
        ];
        if kind == PoolKind::Average {
            attrs.push(("count_include_pad", Attr::I(include.into())));
        }
        cases.push(case(format!("{op} {i}"), op, 19, attrs, vec![(vec![n, c, h, w], x.clone())], y));
    }
    let mut y = vec![0f32; n * c];
    global_pool(PoolKind::Average, &x, n * c, h * w, &mut y).unwrap();
    cases.push(case("GlobalAveragePool", "GlobalAveragePool", 13, vec![], vec![(vec![n, c, h, w], x.clone())], y));
    let mut y = vec![0f32; n * c];
    global_pool(PoolKind::Max, &x, n * c, h * w, &mut y).unwrap();
    cases.push(case("GlobalMaxPool", "GlobalMaxPool", 13, vec![], vec![(vec![n, c, h, w], x.clone())], y));
    let shape = [2, 3, 4, 5];
    let x = rng.pow2s(numel(&shape), 100, -4);
    for (op, kind, axes, keep) in [
        ("ReduceMean", Reduce::Mean, vec![2, 3], 1),
        ("ReduceSum", Reduce::Sum, vec![1], 0),
        ("ReduceMax", Reduce::Max, vec![0, 3], 1),
        ("ReduceMean", Reduce::Mean, vec![1], 0),
        ("ReduceMin", Reduce::Min, vec![1, 2], 0),
        ("ReduceMin", Reduce::Min, vec![3], 1),
    ] {
        let mut y = vec![0f32; numel(&reduce_shape(&shape, &axes, false).unwrap())];
        reduce(kind, &x, &shape, &axes, &mut y).unwrap();
        let attrs = vec![("axes", ints(&axes)), ("keepdims", Attr::I(keep))];
        cases.push(case(format!("{op} {axes:?}"), op, 11, attrs, vec![(shape.to_vec(), x.clone())], y));
    }
    assert_bits(&cases);
}

#[test]
fn batch_norm_and_resize_are_bit_identical_to_onnx_runtime() {
    let mut rng = Rng::new(13);
    let mut cases = Vec::new();
    let (n, c, s) = (2, 5, 12);
    let x = rng.f32s(n * c * s, -3.0, 3.0);
    let (scale, bias, mean, var) = (rng.f32s(c, 0.5, 2.0), rng.f32s(c, -1.0, 1.0), rng.f32s(c, -1.0, 1.0), rng.f32s(c, 0.05, 3.0));
    let mut y = vec![0f32; x.len()];
    batch_norm(&x, n, c, s, &scale, &bias, &mean, &var, 1e-3, &mut y).unwrap();
    let inputs = vec![(vec![n, c, 3, 4], x), (vec![c], scale), (vec![c], bias), (vec![c], mean), (vec![c], var)];
    cases.push(case("BatchNormalization", "BatchNormalization", 15, vec![("epsilon", Attr::F(1e-3))], inputs, y));
    let (h, w) = (5, 6);
    let x = rng.f32s(2 * h * w, -2.0, 2.0);
    for (mode, name) in [
        (Coordinates::HalfPixel, "half_pixel"),
        (Coordinates::Asymmetric, "asymmetric"),
        (Coordinates::AlignCorners, "align_corners"),
        (Coordinates::PytorchHalfPixel, "pytorch_half_pixel"),
    ] {
        for (oh, ow) in [(10, 12), (7, 4)] {
            let scales = [1.0, 1.0, oh as f32 / h as f32, ow as f32 / w as f32];
            let mut y = vec![0f32; 2 * oh * ow];
            resize_linear(&x, &[1, 2, h, w], &[1, 2, oh, ow], &scales, mode, &mut y).unwrap();
            let attrs = vec![("mode", Attr::S("linear")), ("coordinate_transformation_mode", Attr::S(name))];
            let mut c = case(format!("Resize linear {name} {oh}x{ow}"), "Resize", 13, attrs, vec![(vec![1, 2, h, w], x.clone())], y);
            c.inputs.push(None);
            c.inputs.push(Some((vec![4], scales.to_vec())));
            cases.push(c);
        }
    }
    for (mode, nm) in
        [(Nearest::RoundPreferFloor, "round_prefer_floor"), (Nearest::Floor, "floor"), (Nearest::Ceil, "ceil"), (Nearest::RoundPreferCeil, "round_prefer_ceil")]
    {
        for (coords, cn) in
            [(Coordinates::Asymmetric, "asymmetric"), (Coordinates::HalfPixel, "half_pixel"), (Coordinates::TfHalfPixelForNn, "tf_half_pixel_for_nn")]
        {
            let (oh, ow) = (10, 9);
            let scales = [1.0, 1.0, 2.0, 1.5];
            let mut y = vec![0f32; 2 * oh * ow];
            resize_nearest(&x, &[1, 2, h, w], &[1, 2, oh, ow], &scales, coords, mode, &mut y).unwrap();
            let attrs = vec![("mode", Attr::S("nearest")), ("coordinate_transformation_mode", Attr::S(cn)), ("nearest_mode", Attr::S(nm))];
            let mut c = case(format!("Resize nearest {cn} {nm}"), "Resize", 13, attrs, vec![(vec![1, 2, h, w], x.clone())], y);
            c.inputs.push(None);
            c.inputs.push(Some((vec![4], scales.to_vec())));
            cases.push(c);
        }
    }
    assert_bits(&cases);
}

/// Distance in units in the last place (adjacent f32s are 1 apart, across zero too).
fn ulps(a: f32, b: f32) -> u64 {
    let key = |v: f32| {
        let b = v.to_bits() as i64;
        if b < 0x8000_0000 { b } else { 0x8000_0000 - b }
    };
    (key(a) - key(b)).unsigned_abs()
}

/// Library functions: our deviation from ONNX Runtime on a sweep, printed and bounded.
#[test]
fn library_functions_deviate_from_onnx_runtime_by_little() {
    let sweep = |lo: f32, hi: f32, n: usize| -> Vec<f32> { (0..n).map(|i| lo + (hi - lo) * (i as f32 / (n - 1) as f32)).collect() };
    let functions: [(&str, u32, Function, f32, f32, Attrs); 8] = [
        ("Sigmoid", 13, Function::Sigmoid, -30.0, 30.0, vec![]),
        ("Tanh", 13, Function::Tanh, -12.0, 12.0, vec![]),
        ("Exp", 13, Function::Exp, -87.0, 88.0, vec![]),
        ("Log", 13, Function::Log, 1e-6, 1e4, vec![]),
        ("Erf", 13, Function::Erf, -5.0, 5.0, vec![]),
        ("Gelu", 20, Function::Gelu, -8.0, 8.0, vec![]),
        ("Gelu", 20, Function::GeluTanh, -8.0, 8.0, vec![("approximate", Attr::S("tanh"))]),
        ("Softplus", 13, Function::Softplus, -20.0, 20.0, vec![]),
    ];
    let mut cases = Vec::new();
    for (op, opset, f, lo, hi, attrs) in functions {
        let x = sweep(lo, hi, 100_001);
        let mut y = vec![0f32; x.len()];
        unary::map(Kernels::detect(), f, &x, &mut y).unwrap();
        cases.push(case(format!("{f:?}"), op, opset, attrs, vec![(vec![x.len()], x)], y));
    }
    let mut rng = Rng::new(14);
    let shape = [200, 1000];
    let x = rng.f32s(numel(&shape), -10.0, 10.0);
    let mut y = vec![0f32; x.len()];
    softmax(Kernels::detect(), &x, &shape, -1, &mut y).unwrap();
    cases.push(case("Softmax", "Softmax", 13, vec![("axis", Attr::I(-1))], vec![(shape.to_vec(), x)], y));
    let (rows, size) = (64, 768);
    let x = rng.f32s(rows * size, -3.0, 5.0);
    let (g, b) = (rng.f32s(size, 0.5, 2.0), rng.f32s(size, -1.0, 1.0));
    let mut y = vec![0f32; x.len()];
    layer_norm(&x, rows, size, &g, Some(&b), 1e-5, &mut y).unwrap();
    let attrs = vec![("axis", Attr::I(-1)), ("epsilon", Attr::F(1e-5))];
    cases.push(case("LayerNorm", "LayerNormalization", 17, attrs, vec![(vec![rows, size], x), (vec![size], g), (vec![size], b)], y));
    let (x, e) = (rng.f32s(20_000, 0.0, 10.0), rng.f32s(20_000, -3.0, 3.0));
    let mut y = vec![0f32; x.len()];
    binary(Binary::Pow, &x, &[20_000], &e, &[20_000], &mut y).unwrap();
    cases.push(case("Pow", "Pow", 15, vec![], vec![(vec![20_000], x), (vec![20_000], e)], y));
    // General (not P2-exact) data: a Conv whose sums round, in our order and in MLAS's.
    let p = conv_params(32, 16, 1, &[3, 3], &[1, 1], &[1, 1], &[1, 1], &[1, 1]);
    let (x, w, b) = (rng.f32s(32 * 12 * 12, -1.0, 1.0), rng.f32s(16 * 32 * 9, -0.2, 0.2), rng.f32s(16, -1.0, 1.0));
    let mut y = vec![0f32; 16 * 12 * 12];
    conv(Kernels::detect(), &p, &x, 1, &[12, 12], &w, Some(&b), &mut y).unwrap();
    let attrs = vec![("kernel_shape", ints(&[3, 3])), ("pads", ints(&[1, 1, 1, 1]))];
    cases.push(case("Conv", "Conv", 11, attrs, vec![(vec![1, 32, 12, 12], x), (vec![16, 32, 3, 3], w), (vec![16], b)], y));
    let theirs = run_ort(&cases);
    let mut bad = Vec::new();
    for (c, t) in cases.iter().zip(&theirs) {
        // Max ulps where ORT's output is ≥ 2^-10 in magnitude (below it ORT's approximations
        // flush or clamp tails, where ulps mean little), max |Δ| relative to max(1, |y|) everywhere.
        let (mut max_ulp, mut max_rel, mut differ) = (0u64, 0f64, 0usize);
        for (&a, &b) in c.ours.iter().zip(t) {
            if !same(a, b) {
                differ += 1;
                if b.abs() >= 2f32.powi(-10) {
                    max_ulp = max_ulp.max(ulps(a, b));
                }
                max_rel = max_rel.max(f64::from((a - b).abs()) / f64::from(b.abs()).max(1.0));
            }
        }
        eprintln!("{:<10} vs ORT: {differ:>6} of {:>6} differ, max {max_ulp:>2} ulp (|y| ≥ 2^-10), max |Δ|/max(1,|y|) {max_rel:.2e}", c.name, t.len());
        // A bound above what ORT's approximations show (the printed figures: up to 1.6e-6, for
        // LayerNorm), low enough to catch a wrong formula, constant or order.
        if max_rel > 2f64.powi(-18) {
            bad.push(c.name.clone());
        }
    }
    assert!(bad.is_empty(), "deviation from ONNX Runtime out of bounds: {bad:?}");
}

/// One ConvTranspose case: channels in/out, groups, kernel, strides, dilations, pads (begins, ends),
/// output_padding; the input's spatial extents and batch.
type ConvTransposeCase<'a> = (usize, usize, usize, &'a [usize], &'a [usize], &'a [usize], &'a [usize], &'a [usize], &'a [usize], &'a [usize], usize);

#[test]
fn p2_exact_conv_transpose_is_bit_identical_to_onnx_runtime() {
    let mut rng = Rng::new(14);
    let shapes: [ConvTransposeCase; 8] = [
        // ocr_det's: 2×2 kernel, stride 2, no pads.
        (8, 4, 1, &[2, 2], &[2, 2], &[1, 1], &[0, 0], &[0, 0], &[0, 0], &[5, 6], 2),
        (3, 6, 1, &[3, 3], &[2, 2], &[1, 1], &[1, 1], &[1, 1], &[1, 1], &[4, 5], 1),
        (4, 6, 2, &[3, 2], &[1, 2], &[2, 1], &[1, 0], &[2, 1], &[0, 1], &[5, 4], 1),
        (6, 6, 6, &[3, 3], &[2, 2], &[1, 1], &[1, 1], &[1, 1], &[0, 0], &[4, 4], 1),
        (4, 2, 1, &[4], &[3], &[2], &[2], &[1], &[2], &[7], 2),
        (2, 4, 2, &[2, 3, 2], &[2, 1, 2], &[1, 2, 1], &[0, 1, 1], &[1, 0, 0], &[1, 0, 1], &[3, 4, 3], 1),
        (5, 3, 1, &[1, 1], &[1, 1], &[1, 1], &[0, 0], &[0, 0], &[0, 0], &[3, 3], 1),
        // Pads larger than the kernel's reach on one side: taps that land nowhere.
        (2, 2, 1, &[3, 3], &[3, 3], &[1, 1], &[3, 2], &[2, 3], &[2, 0], &[3, 3], 1),
    ];
    let mut cases = Vec::new();
    for (i, &(cin, cout, groups, kernel, strides, dilations, pb, pe, op, input, batch)) in shapes.iter().enumerate() {
        let p = ConvTransposeParams {
            in_channels: cin,
            out_channels: cout,
            groups,
            kernel: kernel.to_vec(),
            strides: strides.to_vec(),
            dilations: dilations.to_vec(),
            pads_begin: pb.to_vec(),
            pads_end: pe.to_vec(),
            output_padding: op.to_vec(),
        };
        // Codes ≤ 8 at 2^-3 times codes ≤ 8 at 2^-4, ≤ 60 terms: every partial sum is exact.
        let x = rng.pow2s(batch * cin * numel(input), 8, -3);
        let w = rng.pow2s(cin * cout / groups * numel(kernel), 8, -4);
        let b = rng.pow2s(cout, 64, -7);
        let output = p.output(input).unwrap();
        let mut xs = vec![batch, cin];
        xs.extend(input);
        let mut ws = vec![cin, cout / groups];
        ws.extend(kernel);
        let attrs = || {
            vec![
                ("kernel_shape", ints(kernel)),
                ("strides", ints(strides)),
                ("dilations", ints(dilations)),
                ("pads", ints(&[pb, pe].concat())),
                ("output_padding", ints(op)),
                ("group", Attr::I(groups as i64)),
            ]
        };
        let mut y = vec![f32::NAN; batch * cout * numel(&output)];
        conv_transpose(&p, &x, batch, input, &w, Some(&b), &mut y).unwrap();
        cases.push(case(
            format!("ConvTranspose {i}"),
            "ConvTranspose",
            11,
            attrs(),
            vec![(xs.clone(), x.clone()), (ws.clone(), w.clone()), (vec![cout], b)],
            y,
        ));
        let mut y = vec![f32::NAN; batch * cout * numel(&output)];
        conv_transpose(&p, &x, batch, input, &w, None, &mut y).unwrap();
        cases.push(case(format!("ConvTranspose {i} without bias"), "ConvTranspose", 11, attrs(), vec![(xs, x), (ws, w)], y));
    }
    assert_bits(&cases);
}
