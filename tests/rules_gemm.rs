//! Both outcomes of the QLinearConv / QLinearMatMul / QGemm rules (`rewrites/src/rules/gemm.rs`)
//! on tiny QDQ models built in code: power-of-two scales are proven and fused; generic scales
//! are refused with a counterexample under `exact`, and fused with synthesized scales under
//! `real` (checked exhaustively against the exact rational where the input domain allows);
//! every named condition refuses.

mod common;

use common::*;
use qdqc::Profile;
use qdqc::{CompileOptions, CompileReport, GroupDecision};
use qdqc_exact::Contract;
use qdqc_exact::num::Dyadic;
use qdqc_exact::reference::{CodeType, quantize_real};
use qdqc_lang::Model;
use qdqc_lang::onnx::{AttributeProto, ModelProto, NodeProto, TensorProto, attribute_proto::AttributeType};
use qdqc_ort::Isa;
use qdqc_ort::requant::requantize;

fn with_attr(mut n: NodeProto, attr: &str, value: AttributeProto) -> NodeProto {
    n.attribute.push(AttributeProto { name: Some(attr.into()), ..value });
    n
}

fn int_attr(v: i64) -> AttributeProto {
    AttributeProto { r#type: Some(AttributeType::Int as i32), i: Some(v), ..Default::default() }
}

fn float_attr(v: f32) -> AttributeProto {
    AttributeProto { r#type: Some(AttributeType::Float as i32), f: Some(v), ..Default::default() }
}

/// Scales of one group: activation, weight (one or per output channel), output.
#[derive(Clone)]
struct Scales {
    x: f32,
    w: Vec<f32>,
    y: f32,
}

/// Power-of-two scales: every float intermediate is exact (P2) and `M` is exact.
fn power_of_two(channels: usize) -> Scales {
    Scales { x: 2f32.powi(-7), w: (0..channels).map(|c| 2f32.powi(-6 - c as i32)).collect(), y: 2f32.powi(-3) }
}

fn from_bits(x: u32, w: [u32; 2], y: u32, channels: usize) -> Scales {
    Scales { x: f32::from_bits(x), w: w[..channels].iter().map(|&b| f32::from_bits(b)).collect(), y: f32::from_bits(y) }
}

/// Scales as a quantization tool writes them, found by search: every group built here with them
/// is refuted under `exact` by an input with a single nonzero product.
fn generic(channels: usize) -> Scales {
    from_bits(0x3c9c_1e80, [0x3c78_53ea, 0x3caa_1ac3], 0x3c41_f490, channels)
}

/// Generic scales, found by search, that ORT's multiplier gets wrong against the exact rational
/// on the groups built here, and that synthesized scales get right.
fn generic_real(channels: usize) -> Scales {
    from_bits(0x3d00_6a38, [0x3bd1_34c4, 0x3c0f_4e62], 0x3d96_bcb9, channels)
}

/// A bias DQ: int32 codes with one scale per channel and zero point 0.
struct BiasSpec {
    codes: Vec<i32>,
    scales: Vec<f32>,
}

/// The bias on the accumulator's scale `fl(sx·sw[c])`, as ORT reads it.
fn bias_on_accumulator(s: &Scales, codes: &[i32]) -> BiasSpec {
    BiasSpec { codes: codes.to_vec(), scales: s.w.iter().map(|w| s.x * w).collect() }
}

/// Weight codes `|w| ≤ 40`: no adjacent pair of u8·s8 products leaves int16.
fn weights(n: usize) -> Vec<i8> {
    (0..n).map(|i| ((i * 37 + 11) % 81) as i8 - 40).collect()
}

/// DQ(x) → `op` → Q with DQ'd constant weights (and bias): the shared body of the three models.
fn group(op: NodeProto, s: &Scales, w: TensorProto, w_axis: i64, bias: Option<&BiasSpec>, x: (&str, i32, &[i64]), y: &[i64]) -> ModelProto {
    let c = s.w.len() as i64;
    let w_dims = if c > 1 { vec![c] } else { vec![] };
    let mut dq_w = node("DequantizeLinear", "DQ_w", &["w", "s_w", "z_w"], &["dw"]);
    if c > 1 {
        dq_w = with_attr(dq_w, "axis", int_attr(w_axis));
    }
    let mut nodes = vec![node("DequantizeLinear", "DQ_x", &["x", "s_x", "z_x"], &["dx"]), dq_w];
    let mut inits = vec![
        f32s("s_x", &[], &[s.x]),
        u8s("z_x", &[], &[128]),
        w,
        f32s("s_w", &w_dims, &s.w),
        i8s("z_w", &w_dims, &vec![0; s.w.len()]),
        f32s("s_y", &[], &[s.y]),
        u8s("z_y", &[], &[128]),
    ];
    if let Some(b) = bias {
        let b_dims = if b.scales.len() > 1 { vec![c] } else { vec![] };
        let mut dq_b = node("DequantizeLinear", "DQ_b", &["b", "s_b", "z_b"], &["db"]);
        if b.scales.len() > 1 {
            dq_b = with_attr(dq_b, "axis", int_attr(0));
        }
        nodes.push(dq_b);
        inits.push(i32s("b", &[c], &b.codes));
        inits.push(f32s("s_b", &b_dims, &b.scales));
        inits.push(i32s("z_b", &b_dims, &vec![0; b.scales.len()]));
    }
    nodes.push(op);
    nodes.push(node("QuantizeLinear", "Q_y", &["out", "s_y", "z_y"], &["y"]));
    let g = graph("gemm_group", nodes, vec![value(x.0, x.1, x.2)], vec![value("y", U8, y)], inits);
    model(g, 21)
}

/// u8 x[1,2,4,4] ⊛ i8 w[C,2,3,3] (pads 1) → u8 y[1,C,4,4].
fn conv(s: &Scales, bias: Option<&BiasSpec>) -> ModelProto {
    let c = s.w.len() as i64;
    let inputs: &[&str] = if bias.is_some() { &["dx", "dw", "db"] } else { &["dx", "dw"] };
    let op = with_ints(with_ints(node("Conv", "Conv", inputs, &["out"]), "pads", &[1, 1, 1, 1]), "kernel_shape", &[3, 3]);
    let w = i8s("w", &[c, 2, 3, 3], &weights(c as usize * 18));
    group(op, s, w, 0, bias, ("x", U8, &[1, 2, 4, 4]), &[1, c, 4, 4])
}

/// u8 a[3,K] × i8 B[K,C] → u8 y[3,C].
fn matmul(s: &Scales, k: usize) -> ModelProto {
    let c = s.w.len();
    let w = i8s("w", &[k as i64, c as i64], &weights(k * c));
    group(node("MatMul", "MatMul", &["dx", "dw"], &["out"]), s, w, 1, None, ("x", U8, &[3, k as i64]), &[3, c as i64])
}

/// alpha · u8 A[3,K] × i8 B[C,K]ᵀ (+ C) → u8 y[3,C].
fn gemm(s: &Scales, k: usize, alpha: f32, bias: Option<&BiasSpec>) -> ModelProto {
    let c = s.w.len() as i64;
    let inputs: &[&str] = if bias.is_some() { &["dx", "dw", "db"] } else { &["dx", "dw"] };
    let op = with_attr(with_attr(node("Gemm", "Gemm", inputs, &["out"]), "transB", int_attr(1)), "alpha", float_attr(alpha));
    let w = i8s("w", &[c, k as i64], &weights(c as usize * k));
    group(op, s, w, 0, bias, ("x", U8, &[3, k as i64]), &[3, c])
}

/// Compiles `m` under `contract` on every ISA profile: the report, and the output model.
fn compile(m: &ModelProto, contract: Contract) -> (CompileReport, Model) {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "in.onnx", m);
    let out = dir.path().join("out.onnx");
    let report = qdqc::compile(&input, &out, &CompileOptions { contract, ..CompileOptions::default() }).unwrap();
    (report, Model::load(&out).unwrap())
}

/// The one decision of a single-group model.
fn decision(r: &CompileReport) -> &GroupDecision {
    let [d] = &r.decisions[..] else { panic!("expected one decision, got {:#?}", r.decisions) };
    d
}

fn op_types(m: &Model) -> Vec<String> {
    m.proto.graph.as_ref().unwrap().node.iter().map(|n| n.op_type.clone().unwrap_or_default()).collect()
}

fn fused_node(m: &Model) -> &NodeProto {
    let g = m.proto.graph.as_ref().unwrap();
    let [n] = &g.node[..] else { panic!("expected one node, got {:?}", op_types(m)) };
    n
}

fn initializer_f32s(m: &Model, name: &str) -> Vec<f32> {
    let t = m.proto.graph.as_ref().unwrap().initializer.iter().find(|t| t.name.as_deref() == Some(name)).unwrap_or_else(|| panic!("no initializer {name}"));
    t.raw_data.as_ref().unwrap().chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
}

fn assert_fused(r: &CompileReport, m: &Model, rule: &str, op: &str) {
    let d = decision(r);
    assert_eq!(d.rule, rule);
    assert!(d.fired && d.verdict.len() == Isa::ALL.len() && d.verdict.values().all(|v| *v == "exact"), "{d:#?}");
    assert_eq!(op_types(m), vec![op.to_string()], "{}", r.explain());
}

/// Refused on every ISA with a counterexample; the model is compiled unchanged.
fn assert_refuted(r: &CompileReport, m: &Model, rule: &str, ops: &[&str]) {
    let d = decision(r);
    assert_eq!(d.rule, rule);
    assert!(!d.fired && d.verdict.values().all(|v| *v == "refuted") && d.counterexample.len() == Isa::ALL.len(), "{d:#?}");
    assert_eq!(op_types(m), ops, "{}", r.explain());
}

fn assert_refused_because(r: &CompileReport, m: &Model, why: &str) {
    let d = decision(r);
    assert!(!d.fired && d.reason.len() == Isa::ALL.len() && d.reason.values().all(|r| r.contains(why)), "expected '{why}': {d:#?}");
    assert!(!op_types(m).iter().any(|o| o.starts_with("QLinear") || o == "QGemm"), "{:?}", op_types(m));
}

/// The synthesized certificate on every ISA, and the created scales the fused node reads:
/// `x_scale = y_scale = 1`, `w_scale = M'` as listed in the certificate.
fn assert_synthesized(r: &CompileReport, m: &Model, rule: &str, op: &str) -> Vec<f32> {
    assert_fused(r, m, rule, op);
    let d = decision(r);
    let n = fused_node(m);
    let (sx, sw, sy) = match op {
        "QGemm" => (&n.input[1], &n.input[4], &n.input[7]),
        _ => (&n.input[1], &n.input[4], &n.input[6]),
    };
    assert_eq!((initializer_f32s(m, sx), initializer_f32s(m, sy)), (vec![1.0], vec![1.0]));
    let multipliers = initializer_f32s(m, sw);
    let bits: Vec<String> = multipliers.iter().map(|m| format!("0x{:08x}", m.to_bits())).collect();
    for proof in d.proof.values() {
        assert!(proof.detail.contains(&format!("w_scale = [{}]", bits.join(", "))), "{}", proof.detail);
        assert!(proof.detail.contains("the model's own scales: refuted"), "{}", proof.detail);
    }
    multipliers
}

const GEMM_OPS: [&str; 4] = ["DequantizeLinear", "DequantizeLinear", "Gemm", "QuantizeLinear"];

#[test]
fn conv_with_power_of_two_scales_is_fused_with_its_attributes() {
    let s = power_of_two(2);
    let (r, m) = compile(&conv(&s, Some(&bias_on_accumulator(&s, &[-2000, 900]))), Contract::Exact);
    assert_fused(&r, &m, "qlinear-conv-bias", "QLinearConv");
    let n = fused_node(&m);
    assert_eq!(n.input, ["x", "s_x", "z_x", "w", "s_w", "z_w", "s_y", "z_y", "b"]);
    let attrs: Vec<(&str, &[i64])> = n.attribute.iter().map(|a| (a.name.as_deref().unwrap(), &a.ints[..])).collect();
    assert_eq!(attrs, [("pads", &[1, 1, 1, 1][..]), ("kernel_shape", &[3, 3][..])]);
}

#[test]
fn conv_with_unequal_per_channel_weight_zero_points_is_fused() {
    // ONNX Runtime 1.31.1 honours each channel's weight zero point (tests/ort_requant.rs).
    let s = power_of_two(2);
    let mut m = conv(&s, Some(&bias_on_accumulator(&s, &[-2000, 900])));
    let z_w = m.graph.as_mut().unwrap().initializer.iter_mut().find(|t| t.name.as_deref() == Some("z_w")).unwrap();
    *z_w = i8s("z_w", &[2], &[3, -5]);
    let (r, m) = compile(&m, Contract::Exact);
    assert_fused(&r, &m, "qlinear-conv-bias", "QLinearConv");
}

/// The same proof on a depthwise Conv (group = channels): proven, but ORT 1.31.1 runs a grouped
/// QLinearConv with unequal weight zero points 5–7x slower than the unfused group, so the cost
/// model keeps the group (`rewrites/ort/src/cost.rs`) and the report says so.
#[test]
fn depthwise_conv_with_unequal_weight_zero_points_is_proven_but_kept_unfused() {
    let s = power_of_two(2);
    let op =
        with_attr(with_ints(with_ints(node("Conv", "Conv", &["dx", "dw"], &["out"]), "pads", &[1, 1, 1, 1]), "kernel_shape", &[3, 3]), "group", int_attr(2));
    let w = i8s("w", &[2, 1, 3, 3], &weights(18));
    let mut m = group(op, &s, w, 0, None, ("x", U8, &[1, 2, 4, 4]), &[1, 2, 4, 4]);
    let z_w = m.graph.as_mut().unwrap().initializer.iter_mut().find(|t| t.name.as_deref() == Some("z_w")).unwrap();
    *z_w = i8s("z_w", &[2], &[3, -5]);
    let (r, out) = compile(&m, Contract::Exact);
    let d = decision(&r);
    assert!(d.fired && d.kept_unfused, "{d:#?}");
    assert_eq!(r.fused, 0);
    assert_eq!(op_types(&out), ["DequantizeLinear", "DequantizeLinear", "Conv", "QuantizeLinear"]);
    // Equal zero points keep the fast path: fused.
    let z_w = m.graph.as_mut().unwrap().initializer.iter_mut().find(|t| t.name.as_deref() == Some("z_w")).unwrap();
    *z_w = i8s("z_w", &[2], &[3, 3]);
    let (r, out) = compile(&m, Contract::Exact);
    assert!(decision(&r).fired && !decision(&r).kept_unfused);
    assert_eq!(op_types(&out), ["QLinearConv"]);
}

#[test]
fn conv_with_generic_scales_is_refuted_under_exact() {
    let (r, m) = compile(&conv(&generic(2), None), Contract::Exact);
    assert_refuted(&r, &m, "qlinear-conv", &["DequantizeLinear", "DequantizeLinear", "Conv", "QuantizeLinear"]);
}

#[test]
fn conv_bias_with_another_scale_is_refused() {
    let s = power_of_two(2);
    let mut b = bias_on_accumulator(&s, &[-2000, 900]);
    b.scales[1] *= 2.0;
    let (r, m) = compile(&conv(&s, Some(&b)), Contract::Exact);
    assert_refused_because(&r, &m, "bias scale: channel 1");
}

#[test]
fn conv_under_real_is_fused_with_synthesized_scales() {
    let s = generic_real(2);
    let b = bias_on_accumulator(&s, &[-300, 450]);
    let (r, m) = compile(&conv(&s, Some(&b)), Contract::Real);
    let multipliers = assert_synthesized(&r, &m, "qlinear-conv-bias", "QLinearConv");
    assert_eq!(multipliers.len(), 2);
    assert_eq!(fused_node(&m).input[8], "b", "the bias codes are kept");
}

#[test]
fn matmul_with_power_of_two_scales_is_fused() {
    let (r, m) = compile(&matmul(&power_of_two(2), 4), Contract::Exact);
    assert_fused(&r, &m, "qlinear-matmul", "QLinearMatMul");
    assert_eq!(fused_node(&m).input, ["x", "s_x", "z_x", "w", "s_w", "z_w", "s_y", "z_y"]);
}

#[test]
fn matmul_with_generic_scales_is_refuted_under_exact() {
    let (r, m) = compile(&matmul(&generic(2), 16), Contract::Exact);
    assert_refuted(&r, &m, "qlinear-matmul", &["DequantizeLinear", "DequantizeLinear", "MatMul", "QuantizeLinear"]);
}

#[test]
fn matmul_under_real_is_fused_and_equals_the_exact_rational_on_every_input() {
    // K = 2: every pair of activation codes is checked against the exact real value.
    let s = generic_real(2);
    let (r, m) = compile(&matmul(&s, 2), Contract::Real);
    let multipliers = assert_synthesized(&r, &m, "qlinear-matmul", "QLinearMatMul");
    let w = weights(4);
    let (y_zp, u8) = (128, CodeType::U8);
    let mut differing = 0;
    for c in 0..2 {
        let unit = Dyadic::from_f32(s.x).unwrap().checked_mul(Dyadic::from_f32(s.w[c]).unwrap()).unwrap();
        for x0 in 0..=255i64 {
            for x1 in 0..=255i64 {
                let acc = (x0 - 128) * w[c] as i64 + (x1 - 128) * w[2 + c] as i64;
                let exact = quantize_real(Dyadic::int(acc).checked_mul(unit).unwrap(), s.y, y_zp, u8).unwrap();
                for isa in Isa::ALL {
                    differing += usize::from(requantize(acc as i32, multipliers[c], y_zp, u8, isa) != exact);
                }
            }
        }
    }
    assert_eq!(differing, 0);
}

#[test]
fn matmul_weights_quantized_along_k_are_refused() {
    // Per-axis along axis 0 of B[K, N] with K = N: per row, which QLinearMatMul would read per column.
    let mut s = power_of_two(2);
    s.w = vec![s.w[0], s.w[0] * 2.0];
    let mut m = matmul(&s, 2);
    let dq_w = &mut m.graph.as_mut().unwrap().node[1];
    dq_w.attribute[0].i = Some(0);
    let (r, out) = compile(&m, Contract::Exact);
    assert_refused_because(&r, &out, "per-axis along axis 0, but output channels are axis 1");
}

#[test]
fn gemm_with_power_of_two_scales_and_alpha_is_fused() {
    let s = power_of_two(2);
    let mut b = bias_on_accumulator(&s, &[700, -50]);
    b.scales = b.scales.iter().map(|x| x * 0.5).collect(); // QGemm's accumulator scale is fl(alpha·sx)·sw
    let (r, m) = compile(&gemm(&s, 4, 0.5, Some(&b)), Contract::Exact);
    assert_fused(&r, &m, "qgemm-bias", "QGemm");
    let n = fused_node(&m);
    assert_eq!(n.domain.as_deref(), Some("com.microsoft"));
    assert_eq!(n.input, ["x", "s_x", "z_x", "w", "s_w", "z_w", "b", "s_y", "z_y"]);
    let attrs: Vec<(&str, Option<f32>, Option<i64>)> = n.attribute.iter().map(|a| (a.name.as_deref().unwrap(), a.f, a.i)).collect();
    assert_eq!(attrs, [("alpha", Some(0.5), None), ("transB", None, Some(1))]);
    assert!(m.proto.opset_import.iter().any(|o| o.domain.as_deref() == Some("com.microsoft")));
}

#[test]
fn gemm_with_generic_scales_is_refuted_under_exact() {
    let (r, m) = compile(&gemm(&generic(2), 16, 1.0, None), Contract::Exact);
    assert_refuted(&r, &m, "qgemm", &GEMM_OPS);
}

#[test]
fn gemm_under_real_folds_alpha_into_synthesized_scales() {
    let (r, m) = compile(&gemm(&generic_real(2), 16, 0.75, None), Contract::Real);
    assert_synthesized(&r, &m, "qgemm", "QGemm");
    let n = fused_node(&m);
    assert_eq!(n.input[6], "", "no C");
    assert_eq!(n.attribute.iter().find(|a| a.name.as_deref() == Some("alpha")).and_then(|a| a.f), Some(1.0));
}

#[test]
fn gemm_conditions_refuse() {
    let s = power_of_two(2);
    let mut m = gemm(&s, 4, 1.0, None);
    let node = &mut m.graph.as_mut().unwrap().node[2];
    *node = with_attr(node.clone(), "transA", int_attr(1));
    let (r, out) = compile(&m, Contract::Exact);
    assert_refused_because(&r, &out, "transA is not modelled");
    let b = bias_on_accumulator(&s, &[1, 2]);
    let mut m = gemm(&s, 4, 1.0, Some(&b));
    let node = &mut m.graph.as_mut().unwrap().node[3];
    *node = with_attr(node.clone(), "beta", float_attr(2.0));
    let (r, out) = compile(&m, Contract::Exact);
    assert_refused_because(&r, &out, "beta 2 ≠ 1");
}

/// `conv` whose weights at input channels 0 and 1 of kernel position 0 are 127 and 120: one
/// vpmaddubsw pair, 255·(127 + 120) > 32767 on x86-avx2.
fn saturating_conv(s: &Scales) -> ModelProto {
    let mut m = conv(s, None);
    let w = m.graph.as_mut().unwrap().initializer.iter_mut().find(|t| t.name.as_deref() == Some("w")).unwrap();
    let mut codes = w.raw_data.as_ref().unwrap().to_vec();
    (codes[0], codes[9]) = (127, 120);
    w.raw_data = Some(codes.into());
    m
}

fn initializer<'a>(m: &'a Model, name: &str) -> &'a TensorProto {
    m.proto.graph.as_ref().unwrap().initializer.iter().find(|t| t.name.as_deref() == Some(name)).unwrap_or_else(|| panic!("no initializer {name}"))
}

/// The fused node reads the authored int8 weights shifted to uint8, zero points 0 + 128, and each
/// ISA's certificate says what the int8 weights gave.
fn assert_u8_weights(r: &CompileReport, m: &Model, authored: &ModelProto) {
    let n = fused_node(m);
    let (w, zw) = (initializer(m, &n.input[3]), initializer(m, &n.input[5]));
    assert_eq!((w.data_type, zw.data_type), (Some(U8), Some(U8)));
    let original = authored.graph.as_ref().unwrap().initializer.iter().find(|t| t.name.as_deref() == Some("w")).unwrap();
    let shifted: Vec<u8> = original.raw_data.as_ref().unwrap().iter().map(|&b| (b as i8 as i16 + 128) as u8).collect();
    assert_eq!(w.raw_data.as_deref(), Some(&shifted[..]));
    assert_eq!(zw.raw_data.as_deref(), Some(&[128u8][..]));
    let d = decision(r);
    assert!(d.proof[&Profile::Ort(Isa::X86Avx2)].detail.contains("the int8 weights: refuted"), "{d:#?}");
}

#[test]
fn saturating_int8_weights_are_fused_as_uint8_weights() {
    let p = saturating_conv(&power_of_two(1));
    let (r, m) = compile(&p, Contract::Exact);
    assert_fused(&r, &m, "qlinear-conv-u8-weights", "QLinearConv");
    assert_u8_weights(&r, &m, &p);
    // `real` synthesis works on the uint8 form too (the int8 form saturates whatever the scales).
    let p = saturating_conv(&generic_real(1));
    let (r, m) = compile(&p, Contract::Real);
    assert_synthesized(&r, &m, "qlinear-conv-u8-weights", "QLinearConv");
    assert_u8_weights(&r, &m, &p);
}

#[test]
fn the_uint8_weight_form_is_refuted_by_its_own_requantization() {
    // Generic scales under `exact`: the uint8 form is tried (the int8 form saturates on x86-avx2)
    // and refuted on every ISA, like the int8 form elsewhere; the model stays as authored.
    let (r, m) = compile(&saturating_conv(&generic(1)), Contract::Exact);
    assert_refuted(&r, &m, "qlinear-conv-u8-weights", &["DequantizeLinear", "DequantizeLinear", "Conv", "QuantizeLinear"]);
    // Without x86-avx2 among the profiles the int8 form is all there is.
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "in.onnx", &saturating_conv(&power_of_two(1)));
    let out = dir.path().join("out.onnx");
    let target = qdqc::OrtTarget::on(&[Isa::X86Avx512Vnni, Isa::Arm64Neon]).unwrap().into();
    let r = qdqc::compile(&input, &out, &CompileOptions { contract: Contract::Exact, target, ..CompileOptions::default() }).unwrap();
    assert_eq!((decision(&r).rule.as_str(), decision(&r).fired), ("qlinear-conv", true));
}

/// Attention's `Q·Kᵀ`: DQ(q u8[1,2,4,K]) × DQ(k T[1,2,K,4]) → Q(sy, 136) u8[1,2,4,4]; both
/// operands activations (graph inputs), scales 2^-5 and zero points 122 (k's type `k_type`).
fn attention(k: i64, k_type: i32, sy: f32) -> ModelProto {
    let z_k = if k_type == U8 { u8s("z_k", &[], &[122]) } else { i8s("z_k", &[], &[-6]) };
    let nodes = vec![
        node("DequantizeLinear", "DQ_q", &["q", "s_q", "z_q"], &["dq"]),
        node("DequantizeLinear", "DQ_k", &["k", "s_k", "z_k"], &["dk"]),
        node("MatMul", "MatMul", &["dq", "dk"], &["out"]),
        node("QuantizeLinear", "Q_y", &["out", "s_y", "z_y"], &["y"]),
    ];
    let s = 2f32.powi(-5);
    let inits = vec![f32s("s_q", &[], &[s]), u8s("z_q", &[], &[122]), f32s("s_k", &[], &[s]), z_k, f32s("s_y", &[], &[sy]), u8s("z_y", &[], &[136])];
    let inputs = vec![value("q", U8, &[1, 2, 4, k]), value("k", k_type, &[1, 2, k, 4])];
    model(graph("attention", nodes, inputs, vec![value("y", U8, &[1, 2, 4, 4])], inits), 21)
}

#[test]
fn matmul_of_two_activations_with_power_of_two_scales_is_fused() {
    let (r, m) = compile(&attention(16, U8, 2f32.powi(-3)), Contract::Exact);
    assert_fused(&r, &m, "qlinear-matmul", "QLinearMatMul");
    assert_eq!(fused_node(&m).input, ["q", "s_q", "z_q", "k", "s_k", "z_k", "s_y", "z_y"]);
    assert!(decision(&r).proof.values().all(|p| p.detail.contains("QLinearMatMul over two activations")), "{:#?}", decision(&r));
}

#[test]
fn matmul_of_two_activations_with_a_generic_output_scale_is_refuted_by_rows_that_reach_it() {
    let (sy, k) = (0.3f32, 16usize);
    let (r, m) = compile(&attention(k as i64, U8, sy), Contract::Exact);
    assert_refuted(&r, &m, "qlinear-matmul", &["DequantizeLinear", "DequantizeLinear", "MatMul", "QuantizeLinear"]);
    let s = 2f32.powi(-5);
    let m_ort = s * s / sy;
    for (profile, c) in &decision(&r).counterexample {
        let Profile::Ort(isa) = *profile else { panic!("an ORT compile gives ORT profiles: {profile}") };
        let get = |n: &str| c.inputs.iter().find(|(m, _)| m == n).map(|(_, v)| *v);
        let row = |name: &str| (0..k).map(|t| get(&format!("{name}[{t}]")).or(get(&format!("{name}[*]"))).unwrap()).collect::<Vec<i64>>();
        let (a, b) = (row("a"), row("b"));
        // The unfused graph in f32, summing in order (P2 holds, so every order gives this).
        let value: f32 = a.iter().zip(&b).map(|(&x, &w)| ((x - 122) as f32 * s) * ((w - 122) as f32 * s)).sum();
        assert_eq!(qdqc_exact::reference::quantize(value, sy, 136, CodeType::U8), c.unfused, "{isa}: {c}");
        let acc: i64 = a.iter().zip(&b).map(|(x, w)| (x - 122) * (w - 122)).sum();
        assert_eq!(acc, get("acc").unwrap());
        assert_eq!(requantize(acc as i32, m_ort, 136, CodeType::U8, isa), c.fused, "{isa}: {c}");
    }
}

#[test]
fn matmul_of_two_activations_conditions_refuse() {
    // K = 4096: 4096·133·134 units exceed 2^24, the float sum may round.
    let (r, m) = compile(&attention(4096, U8, 2f32.powi(-3)), Contract::Exact);
    assert_refused_because(&r, &m, "P2:");
    // u8 × s8 full ranges: 2·255·127 leaves int16 in x86-avx2's vpmaddubsw; exact elsewhere.
    let (r, m) = compile(&attention(16, I8, 2f32.powi(-3)), Contract::Exact);
    let d = decision(&r);
    assert!(!d.fired && d.reason.len() == 1 && d.reason[&Profile::Ort(Isa::X86Avx2)].contains("int16"), "{d:#?}");
    assert!(d.verdict.iter().all(|(isa, v)| *isa == Profile::Ort(Isa::X86Avx2) || *v == "exact"), "{d:#?}");
    assert_eq!(op_types(&m), ["DequantizeLinear", "DequantizeLinear", "MatMul", "QuantizeLinear"]);
    // Per-channel parameters on B.
    let mut p = attention(16, U8, 2f32.powi(-3));
    let g = p.graph.as_mut().unwrap();
    g.initializer.retain(|t| !matches!(t.name.as_deref(), Some("s_k" | "z_k")));
    g.initializer.extend([f32s("s_k", &[4], &[2f32.powi(-5); 4]), u8s("z_k", &[4], &[122; 4])]);
    g.node[1] = with_attr(g.node[1].clone(), "axis", int_attr(-1));
    let (r, m) = compile(&p, Contract::Exact);
    assert_refused_because(&r, &m, "B parameters: per-channel");
}

#[test]
fn matmul_with_a_batched_constant_b_is_proven_for_every_b() {
    // B [2, K, 4] is a constant but not 2-D weights: the two-activation proof covers any B.
    let mut p = attention(8, U8, 2f32.powi(-3));
    let g = p.graph.as_mut().unwrap();
    g.input.retain(|v| v.name.as_deref() != Some("k"));
    g.initializer.push(u8s("k", &[2, 8, 4], &(0..64).map(|i| (i * 37 % 256) as u8).collect::<Vec<_>>()));
    let (r, m) = compile(&p, Contract::Exact);
    assert_fused(&r, &m, "qlinear-matmul", "QLinearMatMul");
    assert!(decision(&r).proof.values().all(|p| p.detail.contains("over two activations")), "{:#?}", decision(&r));
}
