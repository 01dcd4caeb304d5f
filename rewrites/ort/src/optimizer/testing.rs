//! Small models written with the protobuf types, for the unit tests of the optimizer replay and
//! of `hazards`, and the helpers that run the replay on them.

use qdqc_lang::Model;
use qdqc_lang::attr::{AttrValue, Attribute};
use qdqc_lang::onnx::{
    AttributeProto, DataType, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    attribute_proto::AttributeType, tensor_shape_proto::Dimension, tensor_shape_proto::dimension, type_proto,
};
use qdqc_lang::save::{SaveOptions, save};
use std::path::Path;

pub fn f32s(name: &str, dims: &[i64], vals: &[f32]) -> TensorProto {
    let raw: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    raw_tensor(name, DataType::Float, dims, raw)
}

pub fn scalar(name: &str, v: f32) -> TensorProto {
    f32s(name, &[], &[v])
}

/// An integer tensor of any width, packed as ONNX stores it (4-bit: low nibble first).
// Encoding: each value's low bytes (low nibble for 4-bit) in two's complement, as ONNX stores it.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn ints(name: &str, dt: DataType, dims: &[i64], vals: &[i64]) -> TensorProto {
    use DataType::*;
    let raw: Vec<u8> = match dt {
        Uint8 | Int8 => vals.iter().map(|&v| v as u8).collect(),
        Uint16 | Int16 => vals.iter().flat_map(|&v| (v as u16).to_le_bytes()).collect(),
        Int32 => vals.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect(),
        Int64 => vals.iter().flat_map(|&v| v.to_le_bytes()).collect(),
        Uint4 | Int4 => vals.chunks(2).map(|c| (c[0] as u8 & 0xf) | ((c.get(1).copied().unwrap_or(0) as u8 & 0xf) << 4)).collect(),
        other => panic!("no packing for {other:?}"),
    };
    raw_tensor(name, dt, dims, raw)
}

fn raw_tensor(name: &str, dt: DataType, dims: &[i64], raw: Vec<u8>) -> TensorProto {
    TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(dt as i32), raw_data: Some(raw.into()), ..Default::default() }
}

pub fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(outputs.first().copied().unwrap_or(op).into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// Adds a plain attribute through qdqc's own conversion (`attr::Attribute::to_proto`).
fn with_attr(mut n: NodeProto, name: &str, value: AttrValue) -> NodeProto {
    n.attribute.push(Attribute { name: name.into(), value }.to_proto());
    n
}

pub fn attr_i(n: NodeProto, name: &str, v: i64) -> NodeProto {
    with_attr(n, name, AttrValue::Int(v))
}

pub fn attr_f(n: NodeProto, name: &str, v: f32) -> NodeProto {
    with_attr(n, name, AttrValue::Float(v))
}

pub fn attr_s(n: NodeProto, name: &str, v: &str) -> NodeProto {
    with_attr(n, name, AttrValue::Str(v.into()))
}

pub fn attr_ints(n: NodeProto, name: &str, v: &[i64]) -> NodeProto {
    with_attr(n, name, AttrValue::Ints(v.to_vec()))
}

pub fn attr_graph(mut n: NodeProto, name: &str, g: GraphProto) -> NodeProto {
    n.attribute.push(AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Graph as i32), g: Some(g), ..Default::default() });
    n
}

pub fn value(name: &str, dt: DataType, dims: &[i64]) -> ValueInfoProto {
    let dim = dims.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), ..Default::default() }).collect();
    let tensor = type_proto::Tensor { elem_type: Some(dt as i32), shape: Some(TensorShapeProto { dim }) };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(tensor)), ..Default::default() }),
        ..Default::default()
    }
}

/// A graph under construction: nodes in order, initializers, float inputs/outputs of shape [4]
/// unless declared otherwise.
#[derive(Clone, Default)]
pub struct G {
    pub g: GraphProto,
    pub opset: i64,
}

impl G {
    pub fn new(opset: i64) -> G {
        G { g: GraphProto { name: Some("g".into()), ..Default::default() }, opset }
    }

    pub fn input(mut self, name: &str) -> G {
        self.g.input.push(value(name, DataType::Float, &[4]));
        self
    }

    pub fn typed_input(mut self, name: &str, dt: DataType, dims: &[i64]) -> G {
        self.g.input.push(value(name, dt, dims));
        self
    }

    pub fn output(mut self, name: &str) -> G {
        self.g.output.push(value(name, DataType::Float, &[4]));
        self
    }

    pub fn typed_output(mut self, name: &str, dt: DataType) -> G {
        self.g.output.push(value(name, dt, &[4]));
        self
    }

    pub fn init(mut self, t: TensorProto) -> G {
        self.g.initializer.push(t);
        self
    }

    pub fn node(mut self, n: NodeProto) -> G {
        self.g.node.push(n);
        self
    }

    pub fn op(self, op: &str, inputs: &[&str], outputs: &[&str]) -> G {
        self.node(node(op, inputs, outputs))
    }

    /// `x → Q(s, z) → q_<out> → DQ(s, z) → out`.
    pub fn qdq(self, x: &str, s: &str, z: &str, out: &str) -> G {
        let q = format!("q_{out}");
        self.op("QuantizeLinear", &[x, s, z], &[&q]).op("DequantizeLinear", &[&q, s, z], &[out])
    }

    /// The usual parameters: scale `s` = 0.1, zero points `z` (u8 0), `z8` (i8 0), `z16` (u16 0).
    pub fn params(self) -> G {
        self.init(scalar("s", 0.1)).init(ints("z", DataType::Uint8, &[], &[0])).init(ints("z8", DataType::Int8, &[], &[0])).init(ints(
            "z16",
            DataType::Uint16,
            &[],
            &[0],
        ))
    }

    pub fn proto(self) -> ModelProto {
        ModelProto {
            ir_version: Some(10),
            producer_name: Some("qdqc-rewrites-tests".into()),
            opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(self.opset) }],
            graph: Some(self.g),
            ..Default::default()
        }
    }

    pub fn load(self) -> Loaded {
        load(self.proto())
    }
}

/// A model on disk and loaded; the folder lives as long as the model.
pub struct Loaded {
    pub model: Model,
    _dir: tempfile::TempDir,
}

/// Writes `proto` and loads it. The rewrites crate does not depend on prost, so the bytes are
/// written by `qdqc_lang::save`, whose `source` model (only consulted for external data) is the
/// smallest valid model, hand-encoded: ir_version 10, an empty graph, opset 21.
pub fn load(proto: ModelProto) -> Loaded {
    const EMPTY_MODEL: &[u8] = &[0x08, 0x0a, 0x3a, 0x00, 0x42, 0x02, 0x10, 0x15];
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.onnx");
    std::fs::write(&empty, EMPTY_MODEL).unwrap();
    let source = Model::load(&empty).unwrap();
    let path = dir.path().join("model.onnx");
    let mut outputs = qdqc_lang::outputs::Outputs::default();
    save(proto, &source, &path, &SaveOptions::default(), &mut outputs).unwrap();
    outputs.commit().unwrap();
    Loaded { model: load_path(&path), _dir: dir }
}

fn load_path(path: &Path) -> Model {
    Model::load(path).unwrap_or_else(|e| panic!("test model does not load: {e}"))
}

use super::{Outcome, optimize};
use crate::Isa;

pub fn run(l: &Loaded, isa: Isa) -> Outcome {
    let m = &l.model;
    optimize(m, &m.graph, m.proto.graph.as_ref().unwrap(), isa)
}

/// (rule, fused op, target) of every fusion.
pub fn fused(l: &Loaded, isa: Isa) -> Vec<(&'static str, String, usize)> {
    run(l, isa).fusions.into_iter().map(|f| (f.rule, f.fused_op, f.target)).collect()
}

pub fn on_all(l: &Loaded) -> Vec<(&'static str, String, usize)> {
    let x86 = fused(l, Isa::X86Avx2);
    assert_eq!(x86, fused(l, Isa::Arm64Neon), "expected the same fusions on every ISA");
    x86
}

pub fn one(rule: &'static str, op: &str, target: usize) -> Vec<(&'static str, String, usize)> {
    vec![(rule, op.to_string(), target)]
}
/// (transformer, exact) of every rewrite.
pub fn rewritten(l: &Loaded) -> Vec<(&'static str, bool)> {
    run(l, Isa::X86Avx2).rewrites.into_iter().map(|r| (r.transformer, r.exact)).collect()
}
