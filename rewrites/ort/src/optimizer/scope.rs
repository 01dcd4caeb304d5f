//! Constants and declared types, scope by scope: what ORT's `Graph::GetConstantInitializer` and
//! its type inference see from one graph and the graphs enclosing it.

use qdqc_lang::Model;
use qdqc_lang::onnx::tensor_shape_proto::dimension;
use qdqc_lang::onnx::{DataType, GraphProto, NodeProto, TensorProto, TypeProto, type_proto};
use qdqc_lang::tensor::{self, Payload};
use std::collections::{HashMap, HashSet};

/// The contents of a constant: an initializer, the tensor of a `Constant` node, or a value ORT
/// creates while optimizing.
#[derive(Clone, Debug)]
pub(crate) struct Const<'m> {
    pub dtype: DataType,
    pub dims: Vec<i64>,
    pub(super) data: Data<'m>,
}

#[derive(Clone, Debug)]
pub(super) enum Data<'m> {
    Tensor(&'m TensorProto),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    /// Known type and shape, contents not modelled (e.g. a weight ORT quantizes).
    Opaque,
}

impl<'m> Const<'m> {
    pub(super) fn tensor(t: &'m TensorProto) -> Option<Const<'m>> {
        Some(Const { dtype: tensor::data_type(t).ok()?, dims: t.dims.clone(), data: Data::Tensor(t) })
    }

    pub(super) fn ints(dtype: DataType, dims: Vec<i64>, values: Vec<i64>) -> Const<'m> {
        Const { dtype, dims, data: Data::Ints(values) }
    }

    pub(super) fn floats(dims: Vec<i64>, values: Vec<f32>) -> Const<'m> {
        Const { dtype: DataType::Float, dims, data: Data::Floats(values) }
    }

    /// `optimizer_utils::IsScalar` on the value's shape: rank 0, or rank 1 of size 1.
    pub fn is_scalar(&self) -> bool {
        self.dims.is_empty() || self.dims == [1]
    }

    pub fn len(&self) -> u64 {
        tensor::element_count(&self.dims).unwrap_or(0)
    }

    /// Integer contents (zero points, biases, weights), as stored.
    pub fn int_values(&self, model: &Model) -> Option<Vec<i64>> {
        match &self.data {
            Data::Tensor(t) => tensor::ints(self.dtype, &model.payload(t).ok()?),
            Data::Ints(v) => Some(v.clone()),
            Data::Floats(_) | Data::Opaque => None,
        }
    }

    /// The stored payload of an initializer, for reading a weight in place (`tensor::IntView`).
    pub fn payload(&self, model: &Model) -> Option<tensor::Payload<'m>> {
        match &self.data {
            Data::Tensor(t) => model.payload(t).ok(),
            _ => None,
        }
    }

    /// Float contents, f16 and bf16 widened exactly to f32 (scales, Clip bounds).
    pub fn float_values(&self, model: &Model) -> Option<Vec<f32>> {
        match &self.data {
            Data::Tensor(t) => floats(self.dtype, &model.payload(t).ok()?),
            Data::Floats(v) => Some(v.clone()),
            Data::Ints(_) | Data::Opaque => None,
        }
    }

    /// The first element as a float, as `*Initializer::data<float>()` reads it.
    pub(super) fn first_float(&self, model: &Model) -> Option<f32> {
        self.float_values(model)?.first().copied()
    }

    pub(super) fn first_int(&self, model: &Model) -> Option<i64> {
        self.int_values(model)?.first().copied()
    }
}

pub(super) fn floats(dt: DataType, payload: &Payload<'_>) -> Option<Vec<f32>> {
    if let Some(bits) = tensor::f32_bits(dt, payload) {
        return Some(bits.into_iter().map(f32::from_bits).collect());
    }
    let halves: Vec<u16> = match payload {
        Payload::Raw(b) => b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect(),
        // ONNX stores each float16's bits in the low 16 bits of an int32_data entry.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Payload::Typed(t) => t.int32_data.iter().map(|&x| x as u16).collect(),
    };
    match dt {
        DataType::Float16 => Some(halves.into_iter().map(f16_to_f32).collect()),
        DataType::Bfloat16 => Some(halves.into_iter().map(|h| f32::from_bits((h as u32) << 16)).collect()),
        _ => None,
    }
}

/// IEEE binary16 → binary32, exact.
pub(super) fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f32;
    match exp {
        0 => sign * frac * 2f32.powi(-24),
        0x1f if frac == 0.0 => sign * f32::INFINITY,
        0x1f => f32::NAN,
        _ => sign * (1.0 + frac / 1024.0) * 2f32.powi(exp - 15),
    }
}

/// What one graph defines, for lookups from it and from the subgraphs it encloses.
pub(crate) struct Scope<'p, 'm> {
    pub(super) parent: Option<&'p Scope<'p, 'm>>,
    /// Initializers and `Constant` node tensors (ORT turns the latter into initializers on load,
    /// graph/graph.cc, Graph::Graph).
    pub(super) consts: HashMap<&'m str, Const<'m>>,
    /// Initializers a graph input of the same name can override (IR ≥ 4): not constant
    /// (Graph::GetConstantInitializer).
    pub(super) overridable: HashSet<&'m str>,
    /// Every name this graph defines; a local name hides an outer one.
    pub(super) locals: HashSet<&'m str>,
    pub(super) declared: HashMap<&'m str, &'m TypeProto>,
    pub(super) outputs: HashSet<&'m str>,
}

impl<'p, 'm> Scope<'p, 'm> {
    pub(super) fn new(model: &'m Model, g: &'m GraphProto, parent: Option<&'p Scope<'p, 'm>>) -> Self {
        let mut consts = HashMap::new();
        for t in &g.initializer {
            if let Some(c) = Const::tensor(t) {
                consts.insert(tensor::name(t), c);
            }
        }
        for n in g.node.iter().filter(|n| n.op_type.as_deref() == Some("Constant")) {
            if let (Some(out), Some(c)) = (n.output.first(), constant_node_value(n)) {
                consts.insert(out.as_str(), c);
            }
        }
        let inputs: HashSet<&str> = g.input.iter().filter_map(|v| v.name.as_deref()).collect();
        let can_override = model.proto.ir_version.unwrap_or(0) >= 4;
        let overridable = consts.keys().copied().filter(|n| can_override && inputs.contains(n)).collect();
        let mut locals = inputs;
        locals.extend(consts.keys().copied());
        locals.extend(g.node.iter().flat_map(|n| n.output.iter().map(String::as_str)));
        let declared = g.input.iter().chain(&g.output).chain(&g.value_info).filter_map(|v| Some((v.name.as_deref()?, v.r#type.as_ref()?))).collect();
        let outputs = g.output.iter().filter_map(|v| v.name.as_deref()).collect();
        Scope { parent, consts, overridable, locals, declared, outputs }
    }

    /// `Graph::GetConstantInitializer(name, check_outer_scope)` (graph/graph.cc).
    pub fn constant(&self, name: &str, outer: bool) -> Option<&Const<'m>> {
        if let Some(c) = self.consts.get(name) {
            return (!self.overridable.contains(name)).then_some(c);
        }
        if !outer || self.locals.contains(name) {
            return None;
        }
        self.parent?.constant(name, true)
    }

    /// `Graph::GetInitializedTensor`: any initializer of this graph, constant or not.
    pub(super) fn local_initializer(&self, name: &str) -> Option<&Const<'m>> {
        self.consts.get(name)
    }

    /// `graph_utils::IsInitializer(graph, name, check_outer_scope=true)`.
    pub(super) fn any_initializer(&self, name: &str) -> Option<&Const<'m>> {
        match self.consts.get(name) {
            Some(c) => Some(c),
            None if self.locals.contains(name) => None,
            None => self.parent?.any_initializer(name),
        }
    }

    pub(super) fn declared(&self, name: &str) -> Option<&'m TypeProto> {
        match self.declared.get(name) {
            Some(t) => Some(t),
            None if self.locals.contains(name) => None,
            None => self.parent?.declared(name),
        }
    }

    /// The element type the model declares or stores for `name`.
    pub fn dtype(&self, name: &str) -> Option<DataType> {
        if let Some(c) = self.any_initializer(name) {
            return Some(c.dtype);
        }
        match &self.declared(name)?.value {
            Some(type_proto::Value::TensorType(t)) => DataType::try_from(t.elem_type?).ok(),
            _ => None,
        }
    }

    /// The declared shape, when every dim is known.
    pub(super) fn declared_dims(&self, name: &str) -> Option<Vec<i64>> {
        let Some(type_proto::Value::TensorType(t)) = &self.declared(name)?.value else { return None };
        t.shape
            .as_ref()?
            .dim
            .iter()
            .map(|d| match d.value {
                Some(dimension::Value::DimValue(v)) => Some(v),
                _ => None,
            })
            .collect()
    }
}

/// The tensor a `Constant` node holds (utils::ConstantNodeProtoToTensorProto); sparse and string
/// forms are not modelled.
pub(super) fn constant_node_value(n: &NodeProto) -> Option<Const<'_>> {
    let attr = n.attribute.first()?;
    match attr.name.as_deref()? {
        "value" => Const::tensor(attr.t.as_ref()?),
        "value_float" => Some(Const::floats(vec![], vec![attr.f?])),
        "value_floats" => Some(Const::floats(vec![i64::try_from(attr.floats.len()).ok()?], attr.floats.clone())),
        "value_int" => Some(Const::ints(DataType::Int64, vec![], vec![attr.i?])),
        "value_ints" => Some(Const::ints(DataType::Int64, vec![i64::try_from(attr.ints.len()).ok()?], attr.ints.clone())),
        _ => None,
    }
}
