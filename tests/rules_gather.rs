//! Both outcomes of `gather-before-dequantize` and `fold-weights`, end to end through
//! `qdqc::compile`, on embedding tables built here: the accepted layouts are rewritten into the
//! expected DQ(Gather) form with a proof over every index in [-n, n) (negative indices included);
//! the refused ones are kept with the reason. ONNX Runtime byte equality of every accepted layout
//! (and of these refusals) is `tests/oracle/test_compile_weights.py`.

mod common;

use common::*;
use qdqc::{CompileOptions, CompileReport, GroupDecision};
use qdqc_lang::onnx::{ModelProto, NodeProto, TensorProto};
use qdqc_lang::{Model, onnx::GraphProto};

const F16: i32 = 10;

/// `emb = Gather(DQ(W[rows, cols]; s, z, attrs), ids, axis=gather_axis)`, W int8, `ids` int64 of
/// `ids_dims` (`None`: no declared shape).
fn embedding(dims: &[i64], params: &[i64], dq_attrs: &[(&str, i64)], gather_axis: i64, ids_dims: Option<&[i64]>, opset: i64) -> ModelProto {
    let n: i64 = dims.iter().product();
    let m: i64 = params.iter().product::<i64>().max(1);
    let codes: Vec<i8> = (0..n).map(|i| ((i * 37) % 255 - 127) as i8).collect();
    let scales: Vec<f32> = (0..m).map(|i| 0.01 * (i + 1) as f32).collect();
    let zps: Vec<i8> = (0..m).map(|i| (i % 5 - 2) as i8).collect();
    let mut dq = node("DequantizeLinear", "DQ_W", &["W", "s", "z"], &["W_f"]);
    for (name, v) in dq_attrs {
        dq.attribute.push(qdqc_lang::attr::Attribute::int(name, *v).to_proto());
    }
    let mut gather = node("Gather", "embed", &["W_f", "ids"], &["emb"]);
    gather.attribute.push(qdqc_lang::attr::Attribute::int("axis", gather_axis).to_proto());
    let ids = match ids_dims {
        Some(d) => value("ids", 7, d),
        None => strip_shape(value("ids", 7, &[])),
    };
    let inits = vec![i8s("W", dims, &codes), f32s("s", params, &scales), i8s("z", params, &zps)];
    model(graph("embedding", vec![dq, gather], vec![ids], vec![value("emb", F32, &[])], inits), opset)
}

fn strip_shape(mut v: qdqc_lang::onnx::ValueInfoProto) -> qdqc_lang::onnx::ValueInfoProto {
    if let Some(qdqc_lang::onnx::type_proto::Value::TensorType(t)) = v.r#type.as_mut().and_then(|t| t.value.as_mut()) {
        t.shape = None;
    }
    v
}

fn compile(m: &ModelProto, options: &CompileOptions) -> (CompileReport, GraphProto) {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "in.onnx", m);
    let out = dir.path().join("out.onnx");
    let report = qdqc::compile(&input, &out, options).unwrap();
    let graph = Model::load(&out).unwrap().proto.graph.unwrap();
    (report, graph)
}

fn gather_decision(r: &CompileReport) -> &GroupDecision {
    let mut ds = r.decisions.iter().filter(|d| d.rule == "gather-before-dequantize");
    let d = ds.next().expect("a gather-before-dequantize decision");
    assert!(ds.next().is_none(), "one decision per lookup");
    d
}

fn int_attrs(n: &NodeProto) -> Vec<(String, i64)> {
    n.attribute.iter().map(|a| (a.name.clone().unwrap(), a.i.unwrap_or_default())).collect()
}

/// The compiled lookup: the final DQ's int attributes and the Gathers' data inputs.
fn lookup(g: &GraphProto) -> (Vec<(String, i64)>, Vec<String>) {
    let dq = g.node.iter().find(|n| n.output == ["emb"]).expect("emb is produced");
    assert_eq!(dq.op_type.as_deref(), Some("DequantizeLinear"));
    let gathers = g.node.iter().filter(|n| n.op_type.as_deref() == Some("Gather")).map(|n| n.input[0].clone()).collect();
    (int_attrs(dq), gathers)
}

fn initializer<'g>(g: &'g GraphProto, name: &str) -> &'g TensorProto {
    g.initializer.iter().find(|t| t.name.as_deref() == Some(name)).unwrap_or_else(|| panic!("no initializer {name}"))
}

fn assert_fired(r: &CompileReport, points: u64, indices: &str) {
    let d = gather_decision(r);
    assert!(d.fired, "{d:?}");
    for p in d.proof.values() {
        assert_eq!(p.domain, points);
        assert!(p.detail.ends_with(&format!("for every index in {indices}")), "{}", p.detail);
    }
    assert_eq!(r.float_tables.len(), 1);
    assert!(!r.float_tables[0].materialised && r.float_tables[0].readers.is_empty(), "{:?}", r.float_tables);
}

fn assert_refused(r: &CompileReport, reason: &str) {
    let d = gather_decision(r);
    assert!(!d.fired);
    assert!(d.reason.values().all(|r| r.contains(reason)), "{:?}", d.reason);
    assert!(r.float_tables.is_empty());
}

#[test]
fn per_tensor_parameters_are_kept() {
    let (r, g) = compile(&embedding(&[4, 6], &[], &[], 0, Some(&[2, 3]), 21), &CompileOptions::default());
    assert_fired(&r, 2 * 4 * 6, "[-4, 4)");
    assert_eq!(lookup(&g), (vec![], vec!["W".to_string()]));
    assert!(!g.node.iter().any(|n| n.output == ["W_f"]), "the float table is gone");
}

#[test]
fn per_row_parameters_become_one_block_per_gathered_row() {
    let (r, g) = compile(&embedding(&[4, 6], &[4], &[("axis", 0)], 0, Some(&[2, 3]), 21), &CompileOptions::default());
    assert_fired(&r, 48, "[-4, 4)");
    let (attrs, gathers) = lookup(&g);
    assert_eq!(attrs, vec![("axis".to_string(), -1), ("block_size".to_string(), 6)]);
    assert_eq!(gathers, ["W", "s/qdqc_rows", "z/qdqc_rows"]);
    assert_eq!(initializer(&g, "s/qdqc_rows").dims, [4, 1]);
    assert_eq!(initializer(&g, "z/qdqc_rows").dims, [4, 1]);
}

#[test]
fn per_column_parameters_of_a_table_gathered_on_axis_1_become_blocks_over_axis_0() {
    let (r, g) = compile(&embedding(&[6, 4], &[4], &[("axis", 1)], 1, Some(&[3]), 21), &CompileOptions::default());
    assert_fired(&r, 48, "[-4, 4)");
    assert_eq!(lookup(&g).0, vec![("axis".to_string(), 0), ("block_size".to_string(), 6)]);
    assert_eq!(initializer(&g, "s/qdqc_rows").dims, [1, 4]);
}

#[test]
fn per_axis_parameters_on_the_other_axis_keep_their_tensors_with_the_axis_from_the_end() {
    let (r, g) = compile(&embedding(&[4, 6], &[6], &[("axis", 1)], 0, Some(&[2, 3]), 21), &CompileOptions::default());
    assert_fired(&r, 48, "[-4, 4)");
    assert_eq!(lookup(&g), (vec![("axis".to_string(), -1)], vec!["W".to_string()]));
}

#[test]
fn blocked_parameters_on_the_other_axis_are_gathered_alongside() {
    let (r, g) = compile(&embedding(&[4, 6], &[4, 2], &[("axis", 1), ("block_size", 3)], 0, Some(&[2, 3]), 21), &CompileOptions::default());
    assert_fired(&r, 48, "[-4, 4)");
    let (attrs, gathers) = lookup(&g);
    assert_eq!(attrs, vec![("axis".to_string(), -1), ("block_size".to_string(), 3)]);
    assert_eq!(gathers, ["W", "s", "z"]);
}

#[test]
fn refusals_name_their_reason() {
    let cases: Vec<(ModelProto, &str)> = vec![
        (embedding(&[4, 6], &[1, 6], &[("axis", 0), ("block_size", 4)], 0, Some(&[2]), 21), "blocked parameters along the gather axis"),
        (embedding(&[4, 6], &[4], &[("axis", 0)], 0, Some(&[2]), 19), "needs opset 21"),
        (embedding(&[4, 6], &[4], &[("axis", 0)], 0, Some(&[]), 21), "output of known rank ≥ 2"),
        (embedding(&[4, 6], &[4], &[("axis", 0)], 0, None, 21), "output of known rank ≥ 2"),
        (embedding(&[4, 3, 2], &[4], &[("axis", 0)], 0, Some(&[2]), 21), "rank 2 only"),
    ];
    for (m, reason) in cases {
        let (r, g) = compile(&m, &CompileOptions::default());
        assert_refused(&r, reason);
        assert!(g.node.iter().any(|n| n.output == ["W_f"]), "kept as authored");
    }
}

#[test]
fn float16_scales_are_refused() {
    let mut m = embedding(&[4, 6], &[], &[], 0, Some(&[2]), 21);
    let g = m.graph.as_mut().unwrap();
    let s = g.initializer.iter_mut().find(|t| t.name.as_deref() == Some("s")).unwrap();
    s.data_type = Some(F16);
    s.raw_data = Some(vec![0x00, 0x3c].into());
    let (r, _) = compile(&m, &CompileOptions::default());
    assert_refused(&r, "only f32 scales");
}

#[test]
fn fold_weights_is_off_by_default_and_a_folded_lookup_table_loses_to_the_gathered_codes() {
    let m = embedding(&[4, 6], &[4], &[("axis", 0)], 0, Some(&[2]), 21);
    let (r, _) = compile(&m, &CompileOptions::default());
    assert!(!r.decisions.iter().any(|d| d.rule == "fold-weights"));
    let (r, g) = compile(&m, &CompileOptions { fold_weights: true, ..CompileOptions::default() });
    let fold = r.decisions.iter().find(|d| d.rule == "fold-weights").expect("a fold decision");
    // Gather is a reader that sees a constant the same way; the lookup is still cheaper.
    assert!(fold.fired);
    assert!(gather_decision(&r).fired);
    assert!(!g.initializer.iter().any(|t| t.name.as_deref() == Some("W_f")), "the folded table is not extracted");
}

#[test]
fn explain_says_what_became_of_the_float_table() {
    let (r, _) = compile(&embedding(&[4, 6], &[4], &[("axis", 0)], 0, Some(&[2]), 21), &CompileOptions::default());
    let text = r.explain();
    assert!(text.contains("FUSED   emb → DequantizeLinear(Gather(codes)) [DQ_W, embed]"), "{text}");
    assert!(text.contains("TABLE   W_f = DQ(W): 24 elements, 96 bytes of f32, read row by row by emb; gone"), "{text}");
    assert!(r.model_size.before_bytes > 0 && r.model_size.after_bytes > 0);
}

/// A 4-bit table above the analysis's 2^22-code bound keeps no codes in its facts: the rule
/// reads them from the payload to widen them (the bench decoder's tied int4 table).
#[test]
fn int4_table_above_the_facts_bound_is_widened_from_its_payload() {
    const INT4: i32 = 22;
    let (rows, cols) = (5i64, 1i64 << 20);
    let n = (rows * cols) as usize;
    let code = |i: usize| ((i * 7) % 16) as i64 - 8; // int4 codes in [-8, 7]
    let packed: Vec<u8> = (0..n / 2).map(|b| ((code(2 * b) & 0xf) | ((code(2 * b + 1) & 0xf) << 4)) as u8).collect();
    let table = TensorProto { name: Some("W".into()), dims: vec![rows, cols], data_type: Some(INT4), raw_data: Some(packed.into()), ..Default::default() };
    let mut m = embedding(&[1, 1], &[], &[], 0, Some(&[3]), 21);
    let g = m.graph.as_mut().unwrap();
    g.initializer[0] = table;
    g.initializer[2] = TensorProto { name: Some("z".into()), data_type: Some(INT4), raw_data: Some(vec![0x03].into()), ..Default::default() };
    let (report, graph) = compile(&m, &CompileOptions::default());
    let d = gather_decision(&report);
    assert!(d.fired, "{d:?}");
    let (_, gathers) = lookup(&graph);
    let widened = initializer(&graph, &gathers[0]);
    assert_eq!(widened.data_type, Some(I8));
    let raw = widened.raw_data.as_ref().unwrap();
    assert_eq!(raw.len(), n);
    for i in [0, 1, 2, 15, n / 2 + 3, n - 1] {
        assert_eq!(raw[i] as i8 as i64, code(i), "code {i}");
    }
}

/// A tied 4-bit table whose lm_head is a plain `MatMul(h, DQ(W))`: under `exact` the lookup is
/// refused (the lm_head keeps the float table, so an int8 copy of the codes saves nothing); with
/// `--allow matmulnbits` the lm_head becomes MatMulNBits, the lookup gathers codes, and the
/// float table is gone.
#[test]
fn tied_int4_table_is_gathered_only_when_the_lm_head_is_fused() {
    const INT4: i32 = 22;
    let (h, v) = (64i64, 32i64);
    let nibbles =
        |n: usize, f: &dyn Fn(usize) -> i64| -> Vec<u8> { (0..n.div_ceil(2)).map(|b| ((f(2 * b) & 0xf) | ((f(2 * b + 1) & 0xf) << 4)) as u8).collect() };
    let w = nibbles((h * v) as usize, &|i| (i as i64 * 5) % 16 - 8);
    let z = nibbles((2 * v) as usize, &|i| i as i64 % 3 - 1);
    let scales: Vec<f32> = (0..2 * v).map(|i| 0.01 + i as f32 * 1e-3).collect();
    let int4 = |name: &str, dims: &[i64], raw: Vec<u8>| TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(INT4),
        raw_data: Some(raw.into()),
        ..Default::default()
    };
    let mut dq = node("DequantizeLinear", "DQ_W", &["W", "s", "z"], &["W_f"]);
    dq.attribute.push(qdqc_lang::attr::Attribute::int("axis", 0).to_proto());
    dq.attribute.push(qdqc_lang::attr::Attribute::int("block_size", 32).to_proto());
    let mut gather = node("Gather", "embed", &["W_f", "ids"], &["emb"]);
    gather.attribute.push(qdqc_lang::attr::Attribute::int("axis", 1).to_proto());
    let lm_head = node("MatMul", "lm_head", &["hidden", "W_f"], &["logits"]);
    let inits = vec![int4("W", &[h, v], w), f32s("s", &[2, v], &scales), int4("z", &[2, v], z)];
    let g = graph(
        "tied",
        vec![dq, gather, lm_head],
        vec![value("ids", 7, &[3]), value("hidden", F32, &[1, h])],
        vec![value("emb", F32, &[h, 3]), value("logits", F32, &[1, v])],
        inits,
    );
    let m = model(g, 21);
    let (report, _) = compile(&m, &CompileOptions::default());
    let d = gather_decision(&report);
    assert!(!d.fired && d.reason.values().all(|r| r.contains("sub-byte codes need an 8-bit copy")), "{d:?}");
    let lossy = CompileOptions { allow: qdqc::Allow { matmulnbits: Some(qdqc::AccuracyLevel::Acc1), ..Default::default() }, ..CompileOptions::default() };
    let (report, graph) = compile(&m, &lossy);
    assert!(gather_decision(&report).fired);
    assert!(report.decisions.iter().any(|d| d.fired && d.lossy.is_some()), "the lm_head is fused");
    assert_eq!(report.float_tables.len(), 1);
    assert!(!report.float_tables[0].materialised, "{:?}", report.float_tables[0]);
    assert!(graph.node.iter().all(|n| n.op_type.as_deref() != Some("DequantizeLinear") || n.input[0] != "W"), "no DQ of the whole table");
}
