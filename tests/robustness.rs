//! Never panic on user input: thousands of corrupted models (random byte flips and random
//! structural edits, fixed seeds) either compile to a model that loads again, or are refused
//! with a bad-input error and no output file.

mod common;

use common::*;
use prost::Message;
use qdqc::{CompileOptions, ErrorKind};
use qdqc_lang::onnx::ModelProto;
use std::path::Path;

/// Mutations per seed model, sized to keep this test a few seconds in a debug build.
const FLIPS: usize = 600;
const EDITS: usize = 400;

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn check(bytes: &[u8], dir: &Path, case: &str) {
    let input = dir.join("in.onnx");
    let output = dir.join("out.onnx");
    std::fs::write(&input, bytes).unwrap();
    let _ = std::fs::remove_file(&output);
    match qdqc::compile(&input, &output, &CompileOptions::default()) {
        Ok(_) => {
            qdqc_lang::Model::load(&output).unwrap_or_else(|e| panic!("{case}: output does not load: {e}"));
        }
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::BadInput, "{case}: {e}");
            assert!(!output.exists(), "{case}: partial output left");
        }
    }
}

fn seeds() -> Vec<Vec<u8>> {
    let shipped = ["tests/cases/seed_synthetic_shared_q.onnx", "tests/cases/seed_if_outer_scope.onnx"];
    let mut out: Vec<Vec<u8>> = shipped.iter().map(|p| std::fs::read(p).unwrap()).collect();
    out.push(qdq_conv().encode_to_vec());
    out
}

#[test]
fn byte_flips_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for (s, seed) in seeds().iter().enumerate() {
        for i in 0..FLIPS {
            let mut bytes = seed.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(bytes.len());
                bytes[at] = rng.next() as u8;
            }
            if rng.below(8) == 0 {
                bytes.truncate(rng.below(bytes.len()));
            }
            check(&bytes, dir.path(), &format!("seed {s} flip {i}"));
        }
    }
}

/// One random structural edit of the kinds real tools get wrong.
fn mutate(m: &mut ModelProto, rng: &mut Rng) {
    let g = m.graph.as_mut().unwrap();
    let names: Vec<String> = g.node.iter().flat_map(|n| n.output.clone()).chain(g.initializer.iter().filter_map(|t| t.name.clone())).collect();
    let n_nodes = g.node.len();
    match rng.below(10) {
        0 if n_nodes > 0 => {
            let n = &mut g.node[rng.below(n_nodes)];
            let k = rng.below(n.input.len());
            if k < n.input.len() {
                n.input[k] = names[rng.below(names.len())].clone();
            }
        }
        1 if n_nodes > 0 => {
            g.node.remove(rng.below(n_nodes));
        }
        2 if n_nodes > 0 => {
            let ops = ["QuantizeLinear", "DequantizeLinear", "Conv", "Add", "If", "Split", "com.x"];
            g.node[rng.below(n_nodes)].op_type = Some(ops[rng.below(ops.len())].into());
        }
        3 if !g.initializer.is_empty() => {
            let k = rng.below(g.initializer.len());
            g.initializer[k].dims = (0..rng.below(4)).map(|_| rng.below(40) as i64 - 2).collect();
        }
        4 if !g.initializer.is_empty() => {
            let k = rng.below(g.initializer.len());
            g.initializer[k].data_type = Some(rng.below(30) as i32);
        }
        5 if !g.initializer.is_empty() => {
            g.initializer.remove(rng.below(g.initializer.len()));
        }
        6 if n_nodes > 0 => {
            let n = &mut g.node[rng.below(n_nodes)];
            n.output.push(names[rng.below(names.len())].clone());
        }
        7 => m.ir_version = Some(rng.below(20) as i64 - 2),
        8 if n_nodes > 1 => {
            let (a, b) = (rng.below(n_nodes), rng.below(n_nodes));
            g.node.swap(a, b);
        }
        _ => {
            if let Some(t) = g.initializer.first_mut() {
                t.data_location = Some(1);
                t.external_data.clear();
            }
        }
    }
}

#[test]
fn structural_edits_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for (s, seed) in seeds().iter().enumerate() {
        let base = ModelProto::decode(seed.as_slice()).unwrap();
        for i in 0..EDITS {
            let mut m = base.clone();
            for _ in 0..1 + rng.below(3) {
                mutate(&mut m, &mut rng);
            }
            check(&m.encode_to_vec(), dir.path(), &format!("seed {s} edit {i}"));
        }
    }
}

/// Fuzz seed 520162 (the one-hour run): a node with two graph attributes of the same name. Bodies
/// are found again by the attribute's position, as the IR was built, not by its name.
#[test]
fn two_graph_attributes_with_one_name_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = qdq_conv();
    let main = m.graph.clone().unwrap();
    let small = graph("small", vec![node("Identity", "I", &["dq_x"], &["o"])], vec![], vec![value("o", F32, &[1, 2, 4, 4])], vec![]);
    let conv = &mut m.graph.as_mut().unwrap().node[3];
    *conv = with_graph(with_graph(conv.clone(), "body", small), "body", main);
    let bytes = m.encode_to_vec();
    let path = dir.path().join("in.onnx");
    std::fs::write(&path, &bytes).unwrap();
    let _ = qdqc::inspect(&path);
    let _ = qdqc::audit(&path, &qdqc::OrtTarget::on(&[qdqc::Isa::X86Avx2]).unwrap(), &[qdqc::Contract::Exact]);
    check(&bytes, dir.path(), "two graph attributes named body");
}
