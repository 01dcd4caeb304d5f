//! Builders for small models written with qdqc's own protobuf types, and a runner for the binary.

#![allow(dead_code, reason = "each test file uses a different subset")]

use prost::Message;
use qdqc_lang::onnx::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    attribute_proto::AttributeType, tensor_shape_proto::Dimension, tensor_shape_proto::dimension, type_proto,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub mod geometry;

pub const F32: i32 = 1;
pub const U8: i32 = 2;
pub const I8: i32 = 3;
pub const I32: i32 = 6;
pub const BOOL: i32 = 9;

pub fn f32s(name: &str, dims: &[i64], vals: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(F32),
        raw_data: Some(vals.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into()),
        ..Default::default()
    }
}

pub fn u8s(name: &str, dims: &[i64], vals: &[u8]) -> TensorProto {
    TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(U8), raw_data: Some(vals.to_vec().into()), ..Default::default() }
}

pub fn i8s(name: &str, dims: &[i64], vals: &[i8]) -> TensorProto {
    let raw: Vec<u8> = vals.iter().map(|&v| v as u8).collect();
    TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(I8), raw_data: Some(raw.into()), ..Default::default() }
}

pub fn i32s(name: &str, dims: &[i64], vals: &[i32]) -> TensorProto {
    TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(I32), int32_data: vals.to_vec(), ..Default::default() }
}

pub fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

pub fn with_ints(mut n: NodeProto, attr: &str, vals: &[i64]) -> NodeProto {
    n.attribute.push(qdqc_lang::attr::Attribute { name: attr.into(), value: qdqc_lang::attr::AttrValue::Ints(vals.to_vec()) }.to_proto());
    n
}

pub fn with_graph(mut n: NodeProto, attr: &str, g: GraphProto) -> NodeProto {
    n.attribute.push(AttributeProto { name: Some(attr.into()), r#type: Some(AttributeType::Graph as i32), g: Some(g), ..Default::default() });
    n
}

pub fn value(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    let dim = dims.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), ..Default::default() }).collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor { elem_type: Some(elem), shape: Some(TensorShapeProto { dim }) })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn graph(name: &str, nodes: Vec<NodeProto>, inputs: Vec<ValueInfoProto>, outputs: Vec<ValueInfoProto>, inits: Vec<TensorProto>) -> GraphProto {
    GraphProto { name: Some(name.into()), node: nodes, input: inputs, output: outputs, initializer: inits, ..Default::default() }
}

pub fn model(g: GraphProto, opset: i64) -> ModelProto {
    ModelProto {
        ir_version: Some(10),
        producer_name: Some("qdqc-tests".into()),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }],
        graph: Some(g),
        ..Default::default()
    }
}

/// x(f32[1,2,4,4]) → Q → DQ → Conv(DQ(w)) → Q → DQ → y: one QDQ Conv group.
pub fn qdq_conv() -> ModelProto {
    let w: Vec<u8> = (0..2 * 2 * 3 * 3).map(|i| (i * 7 % 255) as u8).collect();
    let nodes = vec![
        node("QuantizeLinear", "Q_x", &["x", "s_x", "z_x"], &["q_x"]),
        node("DequantizeLinear", "DQ_x", &["q_x", "s_x", "z_x"], &["dq_x"]),
        node("DequantizeLinear", "DQ_w", &["w", "s_w", "z_w"], &["dq_w"]),
        with_ints(node("Conv", "Conv", &["dq_x", "dq_w"], &["c"]), "pads", &[1, 1, 1, 1]),
        node("QuantizeLinear", "Q_c", &["c", "s_c", "z_c"], &["q_c"]),
        node("DequantizeLinear", "DQ_c", &["q_c", "s_c", "z_c"], &["y"]),
    ];
    let inits = vec![
        f32s("s_x", &[], &[0.05]),
        u8s("z_x", &[], &[128]),
        u8s("w", &[2, 2, 3, 3], &w),
        f32s("s_w", &[], &[0.003]),
        u8s("z_w", &[], &[120]),
        f32s("s_c", &[], &[0.1]),
        u8s("z_c", &[], &[128]),
    ];
    model(graph("qdq_conv", nodes, vec![value("x", F32, &[1, 2, 4, 4])], vec![value("y", F32, &[1, 2, 4, 4])], inits), 21)
}

pub fn write_model(dir: &Path, name: &str, m: &ModelProto) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    path
}

pub fn qdqc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qdqc")).args(args).output().expect("run qdqc")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Files in `dir`, sorted, for "nothing was left behind" checks.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// xorshift64*: a tiny deterministic generator, so failures replay. Test files add the
/// distributions they need in their own `impl Rng` blocks.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// The venv python with the pinned onnxruntime (`$QDQC_PYTHON`, default
/// `<repo>/target/venv/bin/python`), or a failure that says how to make it.
pub fn oracle_python() -> PathBuf {
    let path = std::env::var_os("QDQC_PYTHON").map(PathBuf::from).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/venv/bin/python"));
    assert!(path.is_file(), "no oracle python at {}: run `bash tests/oracle/setup.sh` (or set QDQC_PYTHON)", path.display());
    path
}

/// numpy's name of an 8-bit code type.
pub fn dtype(t: qdqc_exact::reference::CodeType) -> &'static str {
    use qdqc_exact::reference::CodeType;
    match t {
        CodeType::U8 => "uint8",
        CodeType::I8 => "int8",
        _ => unreachable!("8-bit only"),
    }
}

/// Every code of a type, in order.
pub fn codes(t: qdqc_exact::reference::CodeType) -> Vec<i64> {
    let (lo, hi) = t.range();
    (lo..=hi).collect()
}

/// Runs the cases (JSON, `tests/oracle/requant.py`'s format) through ONNX Runtime in one Python
/// process; each result is the output codes or ORT's error message.
pub fn run_requant_oracle(cases: Vec<serde_json::Value>) -> Vec<Result<Vec<i64>, String>> {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("cases.json"), dir.path().join("outputs.json"));
    std::fs::write(&input, serde_json::to_vec(&cases).unwrap()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/requant.py");
    let status = Command::new(oracle_python()).arg(script).arg(&input).arg(&output).status().unwrap();
    assert!(status.success(), "requant.py failed: {status} (is the venv complete? `bash tests/oracle/setup.sh`)");
    let results: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    results
        .into_iter()
        .map(|r| match r {
            serde_json::Value::Array(v) => Ok(v.iter().map(|c| c.as_i64().unwrap()).collect()),
            other => Err(other["error"].as_str().unwrap_or("?").to_string()),
        })
        .collect()
}

/// The ISA profile whose kernels ONNX Runtime runs on this machine (`Isa::host`): every test
/// that compares ORT with a kernel model compares with this one. Printed once per test binary.
pub fn host_isa() -> qdqc_ort::Isa {
    static HOST: std::sync::OnceLock<qdqc_ort::Isa> = std::sync::OnceLock::new();
    *HOST.get_or_init(|| {
        let isa = qdqc_ort::Isa::host().unwrap_or_else(|e| panic!("no ISA profile for this host: {e}"));
        eprintln!("ONNX Runtime host profile: {isa}");
        isa
    })
}
