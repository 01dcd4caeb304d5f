//! Node attributes in a backend-neutral form, for the nodes qdqc creates.

use crate::onnx::{AttributeProto, attribute_proto::AttributeType};

#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int(i64),
    Ints(Vec<i64>),
    Float(f32),
    Floats(Vec<f32>),
    Str(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    pub name: String,
    pub value: AttrValue,
}

impl Attribute {
    pub fn int(name: &str, v: i64) -> Attribute {
        Attribute { name: name.to_string(), value: AttrValue::Int(v) }
    }

    /// The attribute in qdqc's form; `None` for tensor, graph and type attributes, which created
    /// nodes never copy.
    pub fn from_proto(a: &AttributeProto) -> Option<Attribute> {
        let value = match AttributeType::try_from(a.r#type?).ok()? {
            AttributeType::Int => AttrValue::Int(a.i?),
            AttributeType::Ints => AttrValue::Ints(a.ints.clone()),
            AttributeType::Float => AttrValue::Float(a.f?),
            AttributeType::Floats => AttrValue::Floats(a.floats.clone()),
            AttributeType::String => AttrValue::Str(String::from_utf8(a.s.as_deref()?.to_vec()).ok()?),
            _ => return None,
        };
        Some(Attribute { name: a.name.clone()?, value })
    }

    pub fn to_proto(&self) -> AttributeProto {
        let mut a = AttributeProto { name: Some(self.name.clone()), ..Default::default() };
        let ty = match &self.value {
            AttrValue::Int(v) => {
                a.i = Some(*v);
                AttributeType::Int
            }
            AttrValue::Ints(v) => {
                a.ints = v.clone();
                AttributeType::Ints
            }
            AttrValue::Float(v) => {
                a.f = Some(*v);
                AttributeType::Float
            }
            AttrValue::Floats(v) => {
                a.floats = v.clone();
                AttributeType::Floats
            }
            AttrValue::Str(v) => {
                a.s = Some(v.clone().into_bytes().into());
                AttributeType::String
            }
        };
        a.r#type = Some(ty as i32);
        a
    }
}
