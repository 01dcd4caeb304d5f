//! Activation re-signing (`lower/src/resign.rs`): on x86-only profiles an int8 activation read
//! only by DequantizeLinear becomes uint8 with its zero point + 128, and int8 constants feeding
//! elementwise groups follow; weights, graph outputs and ARM targets keep int8. Bit-identity of
//! the outputs in ONNX Runtime is `tests/oracle/test_compile_x86.py`.

mod common;

use common::*;
use qdqc::{CompileOptions, CompileReport};
use qdqc_lang::Model;
use qdqc_lang::onnx::{DataType, ModelProto};
use qdqc_lang::tensor;
use qdqc_ort::Isa;

/// x → Q(int8, zp −3) → DQ → MatMul(DQ(w int8)) → Q(int8, zp −1) → DQ → Add(DQ(b int8)) → Q → DQ → y,
/// power-of-two scales so the MatMul fuses.
fn int8_chain(q_output_is_graph_output: bool) -> ModelProto {
    let nodes = vec![
        node("QuantizeLinear", "Q_x", &["x", "s_x", "z_x"], &["q_x"]),
        node("DequantizeLinear", "DQ_x", &["q_x", "s_x", "z_x"], &["dq_x"]),
        node("DequantizeLinear", "DQ_w", &["w", "s_w", "z_w"], &["dq_w"]),
        node("MatMul", "MatMul", &["dq_x", "dq_w"], &["m"]),
        node("QuantizeLinear", "Q_m", &["m", "s_m", "z_m"], &["q_m"]),
        node("DequantizeLinear", "DQ_m", &["q_m", "s_m", "z_m"], &["dq_m"]),
        node("DequantizeLinear", "DQ_b", &["b", "s_m", "z_m"], &["dq_b"]),
        node("Add", "Add", &["dq_m", "dq_b"], &["a"]),
        node("QuantizeLinear", "Q_a", &["a", "s_m", "z_m"], &["q_a"]),
        node("DequantizeLinear", "DQ_a", &["q_a", "s_m", "z_m"], &["y"]),
    ];
    let inits = vec![
        f32s("s_x", &[], &[0.0625]),
        i8s("z_x", &[], &[-3]),
        i8s("w", &[4, 2], &[1, -2, 3, -4, 5, -6, 7, -8]),
        f32s("s_w", &[], &[0.125]),
        i8s("z_w", &[], &[0]),
        f32s("s_m", &[], &[0.25]),
        i8s("z_m", &[], &[-1]),
        i8s("b", &[2], &[5, -7]),
    ];
    let mut outputs = vec![value("y", F32, &[1, 2])];
    if q_output_is_graph_output {
        outputs.push(value("q_m", I8, &[1, 2]));
    }
    model(graph("int8_chain", nodes, vec![value("x", F32, &[1, 4])], outputs, inits), 21)
}

fn compile(m: &ModelProto, isas: &[Isa], resign: bool) -> (CompileReport, Model) {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), "in.onnx", m);
    let out = dir.path().join("out.onnx");
    let options = CompileOptions { target: qdqc::OrtTarget::on(isas).unwrap().into(), resign, ..CompileOptions::default() };
    let report = qdqc::compile(&input, &out, &options).unwrap();
    (report, Model::load(&out).unwrap())
}

/// Element type and codes of the initializer `name` of the main graph.
fn initializer(m: &Model, name: &str) -> (DataType, Vec<i64>) {
    let t = m.proto.graph.as_ref().unwrap().initializer.iter().find(|t| tensor::name(t) == name).unwrap_or_else(|| panic!("no initializer {name}"));
    let dt = tensor::data_type(t).unwrap();
    (dt, tensor::ints(dt, &m.payload(t).unwrap()).unwrap())
}

/// The zero-point input of the node named `node`.
fn zero_point_of(m: &Model, node: &str) -> (DataType, Vec<i64>) {
    let g = m.proto.graph.as_ref().unwrap();
    let n = g.node.iter().find(|n| n.name.as_deref() == Some(node)).unwrap_or_else(|| panic!("no node {node}"));
    initializer(m, &n.input[2])
}

#[test]
fn int8_activations_and_elementwise_constants_become_uint8_on_x86() {
    let (report, out) = compile(&int8_chain(false), &[Isa::X86Avx512Vnni], true);
    let tensors: Vec<&str> = report.resigned.iter().map(|r| r.tensor.as_str()).collect();
    assert_eq!(tensors, ["q_x", "q_m", "q_a", "b"], "{:#?}", report.resigned);
    for r in &report.resigned {
        assert_eq!(r.verdict, "exact");
        assert_eq!(r.zero_point_uint8, r.zero_point_int8 + 128);
    }
    assert_eq!(zero_point_of(&out, "Q_x"), (DataType::Uint8, vec![125]));
    // The bias codes move with their zero point; the weight stays int8 (u8 × s8 kernels).
    let bias = report.resigned.iter().find(|r| r.tensor == "b").unwrap();
    assert_eq!(bias.zero_point_int8, -1);
    assert_eq!(initializer(&out, "b_u8"), (DataType::Uint8, vec![133, 121]));
    let g = out.proto.graph.as_ref().unwrap();
    assert!(g.node.iter().any(|n| n.input.iter().any(|i| i == "b_u8")), "the bias is read as uint8");
    assert_eq!(initializer(&out, "w").0, DataType::Int8);
    assert!(g.initializer.iter().all(|t| tensor::name(t) != "z_x"), "the unused int8 zero point is dropped");
    let fused: Vec<&str> = report.decisions.iter().filter(|d| d.fired).map(|d| d.fused_op.as_str()).collect();
    assert!(fused.contains(&"QLinearMatMul"), "{fused:?}");
}

#[test]
fn arm_profiles_and_the_opt_out_keep_int8() {
    for (isas, resign) in [(&Isa::ALL[..], true), (&[Isa::X86Avx512Vnni][..], false)] {
        let (report, out) = compile(&int8_chain(false), isas, resign);
        assert!(report.resigned.is_empty(), "{isas:?} resign={resign}: {:#?}", report.resigned);
        assert!(report.resign_costs.is_none());
        assert_eq!(zero_point_of(&out, "Q_x"), (DataType::Int8, vec![-3]));
    }
}

#[test]
fn a_quantized_graph_output_keeps_its_type() {
    let (report, out) = compile(&int8_chain(true), &[Isa::X86Avx512Vnni], true);
    assert!(report.resigned.iter().all(|r| r.tensor != "q_m"), "{:#?}", report.resigned);
    let g = out.proto.graph.as_ref().unwrap();
    let declared = g.output.iter().find(|o| o.name.as_deref() == Some("q_m")).unwrap();
    let ty = declared.r#type.as_ref().and_then(|t| t.value.as_ref());
    assert!(matches!(ty, Some(qdqc_lang::onnx::type_proto::Value::TensorType(t)) if t.elem_type == Some(I8)));
}

#[test]
fn the_shift_lemma_refuses_a_zero_point_outside_int8() {
    let v = qdqc_exact::shift::int8_to_uint8(0.5, 200);
    assert_eq!(v.word(), "unknown");
    assert!(qdqc_exact::shift::int8_to_uint8(0.1, -128).is_exact());
    assert!(qdqc_exact::shift::int8_to_uint8(3.0e-5, 127).is_exact());
}
