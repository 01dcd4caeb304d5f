//! The dynamic group's `Graph` epilogue against ONNX Runtime 1.31.1 running the graph
//! `quantize_dynamic` writes (DynamicQuantizeLinear → MatMulInteger → Cast → Mul by
//! `Mul(x_scale, W_scale)`; `tests/ort/dynamic_ort.py`, ORT_DISABLE_ALL, one thread): bit for bit,
//! which is the `exact` contract's claim for that form. Weights stay in [−64, 63] so that no pair
//! of u8×s8 products leaves int16 (ORT's non-VNNI x86 kernel saturates there; this test must hold
//! on any host). Cases: per-tensor and per-column weight parameters, rows of mixed signs,
//! all-negative, all-positive and all-zero activations, and a K large enough for |C| > 2^24 (the
//! Cast rounds). Also printed: how many outputs the `real` epilogue (the correctly rounded
//! `C·sx·sw`) changes on the same inputs.
//!
//! Needs the venv (`bash tests/oracle/setup.sh`, or `QDQC_PYTHON`): without it the test fails
//! with that message, never skips.

mod common;

use common::Rng;
use qdqc_kernels::dynamic::{DynamicMatMul, Epilogue, Granularity};
use qdqc_kernels::{Kernels, Layout, PackedB};
use std::path::{Path, PathBuf};
use std::process::Command;

struct Case {
    m: usize,
    k: usize,
    n: usize,
    x: Vec<f32>,
    w: Vec<i8>,
    zw: Vec<i8>,
    sw: Vec<f32>,
}

fn python() -> PathBuf {
    let path = std::env::var_os("QDQC_PYTHON").map(PathBuf::from).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/venv/bin/python"));
    assert!(path.is_file(), "no oracle python at {}: run `bash tests/oracle/setup.sh` at the repository root (or set QDQC_PYTHON)", path.display());
    path
}

fn run_ort(cases: &[Case]) -> Vec<Vec<f32>> {
    let dir = std::env::temp_dir().join(format!("qdqc-dynamic-ort-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: String, bytes: Vec<u8>| {
        let file = dir.join(name);
        std::fs::write(&file, bytes).unwrap();
        file.display().to_string()
    };
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let i8s = |v: &[i8]| v.iter().map(|&x| x as u8).collect::<Vec<u8>>();
    let specs: Vec<String> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            format!(
                r#"{{"m":{},"k":{},"n":{},"x":"{}","w":"{}","zw":"{}","sw":"{}"}}"#,
                c.m,
                c.k,
                c.n,
                write(format!("{i}_x.bin"), f32s(&c.x)),
                write(format!("{i}_w.bin"), i8s(&c.w)),
                write(format!("{i}_zw.bin"), i8s(&c.zw)),
                write(format!("{i}_sw.bin"), f32s(&c.sw))
            )
        })
        .collect();
    let spec = dir.join("cases.json");
    std::fs::write(&spec, format!("[{}]", specs.join(","))).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ort/dynamic_ort.py");
    let status = Command::new(python()).arg(script).arg(&spec).arg(&dir).status().expect("running the oracle python");
    assert!(status.success(), "dynamic_ort.py failed: {status} (is the venv complete? `bash tests/oracle/setup.sh`)");
    let outs = (0..cases.len())
        .map(|i| std::fs::read(dir.join(format!("{i}.bin"))).unwrap().chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect())
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    outs
}

fn case(rng: &mut Rng, m: usize, k: usize, n: usize, per_column: bool, rows: impl Fn(&mut Rng, usize) -> Vec<f32>) -> Case {
    let x = (0..m).flat_map(|r| rows(rng, r)).collect();
    let w = (0..k * n).map(|_| rng.below(128) as i8 - 64).collect();
    let cols = if per_column { n } else { 1 };
    let zw = (0..cols).map(|_| rng.below(17) as i8 - 8).collect();
    let sw = (0..cols).map(|_| rng.f32_in(0.001, 0.05)).collect();
    Case { m, k, n, x, w, zw, sw }
}

#[test]
fn graph_epilogue_is_bit_identical_to_onnx_runtime() {
    let mut rng = Rng::new(2026);
    // |C| up to 255·71·1024 > 2^24 (weights 63 at zero point −8, every other code 255): the Cast rounds.
    let mut wide = case(&mut rng, 6, 2048, 8, true, |rng, r| (0..2048).map(|i| if (i + r) % 2 == 0 { 4.0 } else { rng.f32_in(-0.01, 0.01) }).collect());
    (wide.w, wide.zw) = (vec![63; 2048 * 8], vec![-8; 8]);
    let cases = vec![
        case(&mut rng, 33, 96, 40, false, |rng, _| rng.f32s(96, -2.0, 3.0)),
        case(&mut rng, 33, 96, 40, true, |rng, _| rng.f32s(96, -0.5, 7.0)),
        case(&mut rng, 8, 64, 24, true, |rng, _| rng.f32s(64, -5.0, -0.25)),
        case(&mut rng, 8, 64, 24, false, |rng, _| rng.f32s(64, 0.125, 9.0)),
        case(&mut rng, 4, 32, 16, true, |_, _| vec![0.0; 32]),
        wide,
    ];
    let ort = run_ort(&cases);
    let kern = Kernels::detect();
    let mut real_differs = 0;
    for (i, (c, want)) in cases.iter().zip(&ort).enumerate() {
        let packed = PackedB::from_i8(&c.w, c.k, c.n, Layout::KN, &c.zw).unwrap();
        let (mut codes, mut acc) = (vec![0u8; c.m * c.k], vec![0i32; c.m * c.n]);
        let mut outputs = Vec::new();
        for epilogue in [Epilogue::Graph, Epilogue::Real] {
            let group = DynamicMatMul::new(&packed, &c.sw, Granularity::Tensor, epilogue).unwrap();
            let mut y = vec![0f32; c.m * c.n];
            group.run_f32(kern, &c.x, c.m, &packed, &mut codes, &mut acc, &mut y).unwrap();
            outputs.push(y);
        }
        if i == 5 {
            assert!(acc.iter().any(|a| a.unsigned_abs() > 1 << 24), "case 5 must reach |C| > 2^24");
        }
        for (j, (g, o)) in outputs[0].iter().zip(want).enumerate() {
            assert_eq!(g.to_bits(), o.to_bits(), "case {i}, element {j}: ours {g:e}, ONNX Runtime {o:e}");
        }
        real_differs += outputs[0].iter().zip(&outputs[1]).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    }
    let total: usize = cases.iter().map(|c| c.m * c.n).sum();
    eprintln!("quantize_dynamic graph: {total} outputs bit-identical to ONNX Runtime; the real epilogue changes {real_differs} of them");
}
