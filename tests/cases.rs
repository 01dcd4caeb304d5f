//! Snapshots of rewrite outcomes: for each case, every rule decision (fired or refused, with its
//! certificate or counterexample per ISA profile) and the canonical text of the compiled graph.

mod common;

use common::*;
use qdqc::{CompileOptions, CompileReport};
use qdqc_lang::onnx::{AttributeProto, ModelProto, attribute_proto::AttributeType};
use qdqc_lang::{Model, canon};
use std::fmt::Write;
use std::path::Path;

fn outcome(input: &Path) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let report = qdqc::compile(input, &out, &CompileOptions::default()).unwrap();
    format!("{}\n{}", decisions(&report), canon::model_text(&Model::load(&out).unwrap()))
}

/// Decisions without timings, so the text is the same on every run.
fn decisions(r: &CompileReport) -> String {
    let mut s = String::new();
    for d in &r.decisions {
        let word = match (d.fired, d.kept_unfused) {
            (true, false) => "FUSED",
            (true, true) => "PROVEN (kept unfused by the cost model)",
            (false, _) => "REFUSED",
        };
        writeln!(s, "{word} {} {} → {} [{}]", d.rule, d.output, d.fused_op, d.nodes.join(", ")).unwrap();
        for (isa, v) in &d.verdict {
            let detail = match (d.proof.get(isa), d.counterexample.get(isa), d.reason.get(isa)) {
                (_, Some(c), _) => format!("{c}"),
                (Some(p), None, _) => format!("{:?}, {} points", p.method, p.domain),
                (None, None, Some(r)) => r.clone(),
                _ => String::new(),
            };
            writeln!(s, "  {isa}: {v}: {detail}").unwrap();
        }
    }
    for g in &r.undecided {
        writeln!(s, "KEPT {} {} (no rule)", g.op, g.node).unwrap();
    }
    for t in &r.float_tables {
        writeln!(
            s,
            "TABLE {} = DQ({}) [{} elements] gathered by {}: materialised {} for {:?}",
            t.table, t.codes, t.elements, t.gather_output, t.materialised, t.readers
        )
        .unwrap();
    }
    s
}

fn case(name: &str, m: &ModelProto) {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "in.onnx", m);
    insta::assert_snapshot!(name, outcome(&input));
}

/// DQ(a) + DQ(b) → Q over u8 codes of shape [8], with the given (scale, zero point) triples.
fn add(params: [(f32, u8); 3], extra_outputs: &[&str]) -> ModelProto {
    let nodes = vec![
        node("DequantizeLinear", "DQ_a", &["a", "s_a", "z_a"], &["da"]),
        node("DequantizeLinear", "DQ_b", &["b", "s_b", "z_b"], &["db"]),
        node("Add", "Add", &["da", "db"], &["sum"]),
        node("QuantizeLinear", "Q_c", &["sum", "s_c", "z_c"], &["c"]),
    ];
    let mut inits = Vec::new();
    for (n, (s, z)) in ["a", "b", "c"].iter().zip(params) {
        inits.push(f32s(&format!("s_{n}"), &[], &[s]));
        inits.push(u8s(&format!("z_{n}"), &[], &[z]));
    }
    let mut outputs = vec![value("c", U8, &[8])];
    outputs.extend(extra_outputs.iter().map(|o| value(o, F32, &[8])));
    model(graph("add", nodes, vec![value("a", U8, &[8]), value("b", U8, &[8])], outputs, inits), 21)
}

#[test]
fn seed_synthetic_shared_q() {
    insta::assert_snapshot!("seed_synthetic_shared_q", outcome(Path::new("tests/cases/seed_synthetic_shared_q.onnx")));
}

#[test]
fn seed_if_outer_scope() {
    insta::assert_snapshot!("seed_if_outer_scope", outcome(Path::new("tests/cases/seed_if_outer_scope.onnx")));
}

/// Tied embeddings (tests/oracle/weight_models.py): the int8 lookup dequantizes the rows it
/// gathers, the lm_head keeps the table's DQ; the int4 lookup is refused under `exact` (its codes
/// would need an int8 copy while the lm_head keeps the float table anyway).
#[test]
fn tied_embedding_int8_rows() {
    insta::assert_snapshot!("tied_embedding_int8_rows", outcome(Path::new("tests/cases/tied_embedding_int8_rows.onnx")));
}

#[test]
fn tied_embedding_int4_block32() {
    insta::assert_snapshot!("tied_embedding_int4_block32", outcome(Path::new("tests/cases/tied_embedding_int4_block32.onnx")));
}

#[test]
fn add_with_power_of_two_scales_fuses() {
    case("add_power_of_two", &add([(0.25, 128), (0.5, 128), (1.0, 128)], &[]));
}

#[test]
fn add_with_negative_output_scale() {
    case("add_negative_scale", &add([(0.25, 128), (0.5, 128), (-1.0, 128)], &[]));
}

#[test]
fn add_whose_dq_and_sum_feed_graph_outputs() {
    // The DQ output and the float sum stay (graph outputs); the Q still fuses. (With a positive
    // output scale NEON's ties-away-from-zero refutes this add: see `add_power_of_two`.)
    case("add_feeding_graph_outputs", &add([(0.25, 128), (0.5, 128), (-1.0, 128)], &["da", "sum"]));
}

#[test]
fn shared_dq_with_two_consumers() {
    let mut m = add([(0.25, 128), (0.5, 128), (-1.0, 128)], &[]);
    let g = m.graph.as_mut().unwrap();
    g.node.push(node("Mul", "Mul", &["da", "db"], &["prod"]));
    g.node.push(node("QuantizeLinear", "Q_p", &["prod", "s_c", "z_c"], &["p"]));
    g.output.push(value("p", U8, &[8]));
    case("shared_dq", &m);
}

#[test]
fn movement_and_monotone_ops_on_codes() {
    let nodes = vec![
        node("DequantizeLinear", "DQ_x", &["x", "s", "z"], &["dx"]),
        with_ints(node("Transpose", "Transpose", &["dx"], &["t"]), "perm", &[1, 0]),
        node("QuantizeLinear", "Q_t", &["t", "s", "z"], &["qt"]),
        node("DequantizeLinear", "DQ_n", &["x", "s_neg", "z"], &["dn"]),
        with_ints(node("ReduceMax", "ReduceMax", &["dn"], &["m"]), "keepdims", &[1]),
        node("QuantizeLinear", "Q_m", &["m", "s_neg", "z"], &["qm"]),
    ];
    let inits = vec![f32s("s", &[], &[0.37]), f32s("s_neg", &[], &[-0.37]), u8s("z", &[], &[17])];
    let g = graph("moves", nodes, vec![value("x", U8, &[2, 3])], vec![value("qt", U8, &[3, 2]), value("qm", U8, &[1, 1])], inits);
    case("on_codes", &model(g, 17));
}

#[test]
fn per_channel_asymmetric_zero_points_stay_unfused_on_codes() {
    let nodes = vec![
        with_ints(node("DequantizeLinear", "DQ_w", &["w", "s", "z"], &["dw"]), "axis", &[]),
        node("Reshape", "Reshape", &["dw", "shape"], &["r"]),
        node("QuantizeLinear", "Q_r", &["r", "s1", "z1"], &["qr"]),
    ];
    let mut dq = nodes;
    dq[0].attribute.clear();
    let inits = vec![
        u8s("w", &[2, 3], &[0, 7, 255, 128, 3, 200]),
        f32s("s", &[2], &[0.1, 0.2]),
        u8s("z", &[2], &[3, 250]),
        f32s("s1", &[], &[0.1]),
        u8s("z1", &[], &[3]),
        qdqc_lang::onnx::TensorProto { name: Some("shape".into()), dims: vec![1], data_type: Some(7), int64_data: vec![6], ..Default::default() },
    ];
    let g = graph("per_channel", dq, vec![], vec![value("qr", U8, &[6])], inits);
    case("per_channel_asymmetric", &model(g, 21));
}

/// DQ(x u8[1,2,4,4]) ⊛ DQ(w i8[2,2,3,3]) + DQ(b i32[2]) → Q with power-of-two scales, the bias
/// DQ's scales (per channel, axis 0) given.
fn conv_with_bias(bias_scales: [f32; 2]) -> ModelProto {
    let mut dq_b = node("DequantizeLinear", "DQ_b", &["b", "s_b", "z_b"], &["db"]);
    dq_b.attribute.push(AttributeProto { name: Some("axis".into()), r#type: Some(AttributeType::Int as i32), i: Some(0), ..Default::default() });
    let nodes = vec![
        node("DequantizeLinear", "DQ_x", &["x", "s_x", "z_x"], &["dx"]),
        node("DequantizeLinear", "DQ_w", &["w", "s_w", "z_w"], &["dw"]),
        dq_b,
        with_ints(node("Conv", "Conv", &["dx", "dw", "db"], &["c"]), "pads", &[1, 1, 1, 1]),
        node("QuantizeLinear", "Q_c", &["c", "s_c", "z_c"], &["y"]),
    ];
    // |w| ≤ 40: no pair of u8·s8 products leaves int16 on x86-avx2.
    let w: Vec<i8> = (0..36).map(|i| ((i * 37 + 11) % 81) as i8 - 40).collect();
    let inits = vec![
        f32s("s_x", &[], &[2f32.powi(-7)]),
        u8s("z_x", &[], &[128]),
        i8s("w", &[2, 2, 3, 3], &w),
        f32s("s_w", &[], &[2f32.powi(-6)]),
        i8s("z_w", &[], &[0]),
        i32s("b", &[2], &[-2000, 900]),
        f32s("s_b", &[2], &bias_scales),
        i32s("z_b", &[2], &[0, 0]),
        f32s("s_c", &[], &[2f32.powi(-3)]),
        u8s("z_c", &[], &[128]),
    ];
    model(graph("conv", nodes, vec![value("x", U8, &[1, 2, 4, 4])], vec![value("y", U8, &[1, 2, 4, 4])], inits), 21)
}

#[test]
fn conv_with_power_of_two_scales_fuses() {
    // The bias on the accumulator's scale fl(sx·sw) = 2^-13, as ORT reads it.
    let acc = 2f32.powi(-13);
    case("conv_power_of_two", &conv_with_bias([acc, acc]));
}

#[test]
fn conv_whose_bias_scale_differs_is_refused() {
    let acc = 2f32.powi(-13);
    case("conv_bias_scale_differs", &conv_with_bias([acc, 2.0 * acc]));
}

/// DQ → Relu → Mul(0.5) → Q becomes a lookup table; DQ → Sqrt → Q over codes below the zero point
/// would quantize NaN and is refused.
#[test]
fn elementwise_chains_become_lookup_tables() {
    let nodes = vec![
        node("DequantizeLinear", "DQ_x", &["x", "s", "z"], &["dx"]),
        node("Relu", "Relu", &["dx"], &["r"]),
        node("Mul", "Half", &["r", "half"], &["h"]),
        node("QuantizeLinear", "Q_h", &["h", "s_out", "z"], &["qh"]),
        node("Sqrt", "Sqrt", &["dx"], &["sq"]),
        node("QuantizeLinear", "Q_sq", &["sq", "s_out", "z"], &["qsq"]),
    ];
    let inits = vec![f32s("s", &[], &[0.07]), f32s("s_out", &[], &[0.03]), f32s("half", &[], &[0.5]), u8s("z", &[], &[100])];
    let g = graph("chains", nodes, vec![value("x", U8, &[4])], vec![value("qh", U8, &[4]), value("qsq", U8, &[4])], inits);
    case("lookup_tables", &model(g, 21));
}

/// Q/DQ written without their optional zero point (two inputs): rules see them like the others,
/// the fused node gets explicit zero points, and authored nodes keep their two inputs.
#[test]
fn omitted_zero_points() {
    let mut m = add([(0.25, 0), (0.5, 0), (-1.0, 0)], &["db"]);
    let g = m.graph.as_mut().unwrap();
    for n in &mut g.node {
        n.input.truncate(2);
    }
    g.initializer.retain(|t| !t.name.as_deref().unwrap_or("").starts_with("z_"));
    case("omitted_zero_points", &m);
}

/// Two MatMuls of the same two activations (attention's `Q·Kᵀ` shape): one requantized by
/// 2^-3 (proven and fused), one by 0.3 (refuted with the rows that reach the counterexample).
#[test]
fn matmuls_of_two_activations() {
    let s = 2f32.powi(-5);
    let nodes = vec![
        node("DequantizeLinear", "DQ_q", &["q", "s", "z"], &["dq"]),
        node("DequantizeLinear", "DQ_k", &["k", "s", "z"], &["dk"]),
        node("MatMul", "MatMul_pow2", &["dq", "dk"], &["m1"]),
        node("QuantizeLinear", "Q_pow2", &["m1", "s_pow2", "z_y"], &["y_pow2"]),
        node("MatMul", "MatMul_generic", &["dq", "dk"], &["m2"]),
        node("QuantizeLinear", "Q_generic", &["m2", "s_generic", "z_y"], &["y_generic"]),
    ];
    let inits = vec![f32s("s", &[], &[s]), u8s("z", &[], &[122]), f32s("s_pow2", &[], &[0.125]), f32s("s_generic", &[], &[0.3]), u8s("z_y", &[], &[136])];
    let inputs = vec![value("q", U8, &[1, 2, 4, 8]), value("k", U8, &[1, 2, 8, 4])];
    let outputs = vec![value("y_pow2", U8, &[1, 2, 4, 4]), value("y_generic", U8, &[1, 2, 4, 4])];
    case("matmuls_of_two_activations", &model(graph("attention", nodes, inputs, outputs, inits), 21));
}
