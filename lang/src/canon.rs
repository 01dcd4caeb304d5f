//! The canonical text form of a model graph, for snapshots and `--explain`: node order as stored,
//! attributes sorted by name, small constants printed exactly (f32 as value and bit pattern),
//! large ones summarised by size, range and an FNV-1a checksum. No ids that depend on run order.

use crate::load::Model;
use crate::onnx::{AttributeProto, DataType, GraphProto, TensorProto, TypeProto, ValueInfoProto, attribute_proto::AttributeType, type_proto};
use crate::tensor::{self, Payload};
use std::fmt::Write;

/// Constants with at most this many elements are printed in full.
const INLINE: usize = 8;

pub fn model_text(model: &Model) -> String {
    let mut out = String::new();
    let proto = &model.proto;
    let opsets: Vec<String> = proto
        .opset_import
        .iter()
        .map(|o| format!("{}:{}", o.domain.as_deref().filter(|d| !d.is_empty()).unwrap_or("ai.onnx"), o.version.unwrap_or(0)))
        .collect();
    writeln!(out, "ir {} opsets [{}]", proto.ir_version.unwrap_or(0), opsets.join(", ")).unwrap();
    if let Some(g) = &proto.graph {
        graph_text(model, g, 0, &mut out);
    }
    out
}

fn graph_text(model: &Model, g: &GraphProto, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    writeln!(out, "{pad}graph {}", g.name.as_deref().unwrap_or("")).unwrap();
    for i in &g.input {
        writeln!(out, "{pad}  input {}", value_info(i)).unwrap();
    }
    for t in &g.initializer {
        writeln!(out, "{pad}  init {}", tensor_text(model, t)).unwrap();
    }
    for (pos, n) in g.node.iter().enumerate() {
        let name = n.label(pos);
        let domain = n.domain.as_deref().filter(|d| !d.is_empty()).map(|d| format!("{d}.")).unwrap_or_default();
        let mut attrs: Vec<&AttributeProto> = n.attribute.iter().collect();
        attrs.sort_by_key(|a| a.name.clone());
        let simple: Vec<String> = attrs.iter().filter_map(|a| attr_text(model, a)).collect();
        let attrs_text = if simple.is_empty() { String::new() } else { format!("[{}]", simple.join(", ")) };
        let inputs: Vec<&str> = n.input.iter().map(|s| if s.is_empty() { "_" } else { s.as_str() }).collect();
        writeln!(out, "{pad}  {} = {name}: {domain}{}{attrs_text}({})", n.output.join(", "), n.op_type.as_deref().unwrap_or("?"), inputs.join(", ")).unwrap();
        for a in attrs {
            for sub in crate::ir::attribute_graphs(a) {
                writeln!(out, "{pad}    {}:", a.name.as_deref().unwrap_or("")).unwrap();
                graph_text(model, sub, depth + 3, out);
            }
        }
    }
    for o in &g.output {
        writeln!(out, "{pad}  output {}", value_info(o)).unwrap();
    }
}

fn attr_text(model: &Model, a: &AttributeProto) -> Option<String> {
    let name = a.name.as_deref().unwrap_or("");
    let value = match a.r#type.and_then(|t| AttributeType::try_from(t).ok())? {
        AttributeType::Float => format!("{:?}", a.f.unwrap_or(0.0)),
        AttributeType::Int => a.i.unwrap_or(0).to_string(),
        AttributeType::String => format!("{:?}", String::from_utf8_lossy(a.s.as_deref().unwrap_or(&[]))),
        AttributeType::Floats => format!("{:?}", a.floats),
        AttributeType::Ints => format!("{:?}", a.ints),
        AttributeType::Strings => format!("{:?}", a.strings.iter().map(|s| String::from_utf8_lossy(s)).collect::<Vec<_>>()),
        AttributeType::Tensor => tensor_text(model, a.t.as_ref()?),
        AttributeType::Graph | AttributeType::Graphs => return None,
        other => format!("<{}>", other.as_str_name()),
    };
    Some(format!("{name}={value}"))
}

fn value_info(v: &ValueInfoProto) -> String {
    format!("{}: {}", v.name.as_deref().unwrap_or(""), v.r#type.as_ref().map(type_text).unwrap_or("?".into()))
}

fn type_text(t: &TypeProto) -> String {
    match &t.value {
        Some(type_proto::Value::TensorType(tt)) => {
            let dt = DataType::try_from(tt.elem_type.unwrap_or(0)).map(dtype_name).unwrap_or("?");
            match &tt.shape {
                None => format!("{dt}[?]"),
                Some(s) => {
                    let dims: Vec<String> = s
                        .dim
                        .iter()
                        .map(|d| match &d.value {
                            Some(crate::onnx::tensor_shape_proto::dimension::Value::DimValue(v)) => v.to_string(),
                            Some(crate::onnx::tensor_shape_proto::dimension::Value::DimParam(p)) => p.clone(),
                            None => "?".into(),
                        })
                        .collect();
                    format!("{dt}[{}]", dims.join(","))
                }
            }
        }
        Some(other) => format!("{other:?}").split('(').next().unwrap_or("?").to_string(),
        None => "?".into(),
    }
}

pub fn dtype_name(dt: DataType) -> &'static str {
    use DataType::*;
    match dt {
        Float => "f32",
        Uint8 => "u8",
        Int8 => "i8",
        Uint16 => "u16",
        Int16 => "i16",
        Int32 => "i32",
        Int64 => "i64",
        Bool => "bool",
        Float16 => "f16",
        Double => "f64",
        Uint32 => "u32",
        Uint64 => "u64",
        Bfloat16 => "bf16",
        Uint4 => "u4",
        Int4 => "i4",
        Uint2 => "u2",
        Int2 => "i2",
        other => other.as_str_name(),
    }
}

fn tensor_text(model: &Model, t: &TensorProto) -> String {
    let dt = tensor::data_type(t).ok();
    let head = format!("{}: {}{:?}", tensor::name(t), dt.map(dtype_name).unwrap_or("?"), t.dims);
    let (Some(dt), Ok(payload)) = (dt, model.payload(t)) else { return head };
    let few = tensor::element_count(&t.dims).is_ok_and(|n| n <= INLINE as u64);
    if dt == DataType::Float {
        if let Some(bits) = tensor::f32_bits(dt, &payload).filter(|_| few) {
            let vals: Vec<String> = bits.iter().map(|b| format!("{:?} (0x{b:08x})", f32::from_bits(*b))).collect();
            return format!("{head} = [{}]", vals.join(", "));
        }
    } else if let Some(view) = tensor::IntView::new(dt, &payload) {
        if view.len() <= INLINE {
            return format!("{head} = {:?}", view.iter().collect::<Vec<_>>());
        }
        let (lo, hi) = view.range().unwrap_or((0, 0));
        return format!("{head} range {lo}..={hi} fnv {:016x}", fnv(&payload));
    }
    format!("{head} fnv {:016x}", fnv(&payload))
}

fn fnv(payload: &Payload<'_>) -> u64 {
    // Raw bytes are hashed where they lie (a mapped weight is never copied).
    let encoded;
    let bytes: &[u8] = match payload {
        Payload::Raw(b) => b,
        Payload::Typed(t) => {
            encoded = prost::Message::encode_to_vec(*t);
            &encoded
        }
    };
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}
