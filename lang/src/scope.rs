//! One scope chain: what a graph and the graphs enclosing it define (initializers, `Constant`
//! nodes, graph inputs and outputs, declared types), for lookups of a name from the innermost
//! graph outwards, so a subgraph sees the values of the graphs enclosing it.
//!
//! Two readings of the same chain, kept apart on purpose because they answer different questions:
//!
//! * **qdqc's own facts** ([`Scope::facts`], [`Scope::int_tensor`], [`Scope::f32_tensor`],
//!   [`Scope::initializer_dims`]) read what the model states: the first initializer of each name
//!   (one that is also a graph input of its graph is a default the caller may override, so not a
//!   constant there), and the first input/output/value_info entry with a type. They feed the
//!   e-graph analysis, the group finder and the audit's parameters, where the model as authored
//!   is the source of truth.
//! * **ONNX Runtime's view** ([`Scope::constant`], [`Scope::local_initializer`],
//!   [`Scope::any_initializer`], [`Scope::dtype`], [`Scope::declared_dims`], [`Scope::is_output`])
//!   replays ORT's `Graph` API (graph/graph.cc), for the audit's replay of ORT's optimizer, which
//!   must decide as ORT decides: `Constant` node outputs are initializers (ORT converts them on
//!   load), a later initializer of a name replaces an earlier one, an initializer a graph input
//!   of the same name overrides (IR ≥ 4) is not constant, and any name a graph defines hides an
//!   outer one. It is built on first use, so qdqc's own lowering never pays for it.

use crate::Model;
use crate::analysis::{Constant, Dim, Interval, SMALL_CONSTANT, ValueFacts};
use crate::onnx::tensor_shape_proto::dimension;
use crate::onnx::{DataType, GraphProto, NodeProto, TensorProto, TypeProto, ValueInfoProto, type_proto};
use crate::tensor::{self, Payload};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

/// The graphs enclosing the current one, outermost first, each with its names indexed (a lookup
/// per value scanned every initializer: quadratic on a graph of thousands of weights). Cloning
/// and entering a subgraph share the outer levels.
#[derive(Clone)]
pub struct Scope<'m> {
    chain: Vec<Arc<Level<'m>>>,
    /// IR ≥ 4: a graph input may override an initializer of the same name.
    inputs_override: bool,
}

struct Level<'m> {
    graph: &'m GraphProto,
    /// The first initializer of each name.
    initializers: HashMap<&'m str, &'m TensorProto>,
    inputs: HashSet<&'m str>,
    /// The first input, output or value_info entry of each name, in that order.
    declared: HashMap<&'m str, &'m ValueInfoProto>,
    runtime: OnceLock<Runtime<'m>>,
}

/// One graph as ORT's `Graph` sees it.
struct Runtime<'m> {
    /// Initializers (the last of each name) and `Constant` node tensors (ORT turns the latter
    /// into initializers on load, graph/graph.cc, Graph::Graph).
    consts: HashMap<&'m str, Const<'m>>,
    /// Initializers a graph input of the same name can override (IR ≥ 4): not constant
    /// (Graph::GetConstantInitializer).
    overridable: HashSet<&'m str>,
    /// Every name this graph defines; a local name hides an outer one.
    locals: HashSet<&'m str>,
    /// The type of each name declared with one (the last input, output or value_info entry).
    declared: HashMap<&'m str, &'m TypeProto>,
    outputs: HashSet<&'m str>,
}

impl<'m> Level<'m> {
    fn new(graph: &'m GraphProto) -> Level<'m> {
        let mut initializers = HashMap::new();
        for t in &graph.initializer {
            initializers.entry(tensor::name(t)).or_insert(t);
        }
        let mut declared = HashMap::new();
        for v in graph.input.iter().chain(&graph.output).chain(&graph.value_info) {
            if let Some(name) = v.name.as_deref() {
                declared.entry(name).or_insert(v);
            }
        }
        let inputs = graph.input.iter().filter_map(|i| i.name.as_deref()).collect();
        Level { graph, initializers, inputs, declared, runtime: OnceLock::new() }
    }

    fn runtime(&self, inputs_override: bool) -> &Runtime<'m> {
        self.runtime.get_or_init(|| Runtime::new(self.graph, inputs_override))
    }
}

impl<'m> Runtime<'m> {
    fn new(g: &'m GraphProto, inputs_override: bool) -> Self {
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
        let overridable = consts.keys().copied().filter(|n| inputs_override && inputs.contains(n)).collect();
        let mut locals = inputs;
        locals.extend(consts.keys().copied());
        locals.extend(g.node.iter().flat_map(|n| n.output.iter().map(String::as_str)));
        let declared = g.input.iter().chain(&g.output).chain(&g.value_info).filter_map(|v| Some((v.name.as_deref()?, v.r#type.as_ref()?))).collect();
        let outputs = g.output.iter().filter_map(|v| v.name.as_deref()).collect();
        Runtime { consts, overridable, locals, declared, outputs }
    }
}

impl<'m> Scope<'m> {
    /// The scope of the model's main graph.
    pub fn main(model: &'m Model) -> Self {
        Scope::root(model, model.main_graph())
    }

    /// The scope of `graph`, read as the outermost graph of `model`.
    pub fn root(model: &'m Model, graph: &'m GraphProto) -> Self {
        Scope { chain: vec![Arc::new(Level::new(graph))], inputs_override: model.proto.ir_version.unwrap_or(0) >= 4 }
    }

    /// The scope of a subgraph `g` of the current graph.
    pub fn enter(&self, g: &'m GraphProto) -> Self {
        let mut chain = self.chain.clone();
        chain.push(Arc::new(Level::new(g)));
        Scope { chain, inputs_override: self.inputs_override }
    }

    /// The innermost graph.
    pub fn current(&self) -> &'m GraphProto {
        self.chain.last().expect("never empty").graph
    }

    // ---- qdqc's own facts: what the model states ------------------------------------------

    /// The initializer holding `name`'s value. An initializer that is also a graph input is only
    /// a default the caller may override: not a constant.
    fn initializer(&self, name: &str) -> Option<&'m TensorProto> {
        self.chain.iter().rev().find_map(|l| l.initializers.get(name).copied().filter(|_| !l.inputs.contains(name)))
    }

    fn declared_type(&self, name: &str) -> Option<&'m TypeProto> {
        self.chain.iter().rev().find_map(|l| l.declared.get(name)?.r#type.as_ref())
    }

    /// Dims and every value of an integer initializer (weights, biases) of at most `max`
    /// elements; `Err` names why not (the values are widened to i64, 8 bytes a code, so a larger
    /// weight is never read this way).
    pub fn int_tensor(&self, model: &Model, name: &str, max: u64) -> Result<(Vec<i64>, Vec<i64>), String> {
        let not_int = || format!("input '{name}' is not a constant integer tensor");
        let t = self.initializer(name).ok_or_else(not_int)?;
        let count = tensor::element_count(&t.dims)?;
        if count > max {
            return Err(format!("input '{name}' holds {count} codes, over the {max} a proof reads"));
        }
        let dt = tensor::data_type(t).map_err(|_| not_int())?;
        let ints = tensor::ints(dt, &model.payload(t)?).ok_or_else(not_int)?;
        Ok((t.dims.clone(), ints))
    }

    /// Dims of the initializer holding `name`.
    pub fn initializer_dims(&self, name: &str) -> Option<Vec<i64>> {
        Some(self.initializer(name)?.dims.clone())
    }

    /// Dims and every value of a float32 initializer, whatever its size.
    pub fn f32_tensor(&self, model: &Model, name: &str) -> Option<(Vec<i64>, Vec<f32>)> {
        let t = self.initializer(name)?;
        let dt = tensor::data_type(t).ok()?;
        let bits = tensor::f32_bits(dt, &model.payload(t).ok()?)?;
        Some((t.dims.clone(), bits.into_iter().map(f32::from_bits).collect()))
    }

    /// Everything the model states about `name`.
    pub fn facts(&self, model: &Model, name: &str) -> ValueFacts {
        let mut facts = ValueFacts { name: name.to_string(), ..ValueFacts::default() };
        if let Some(t) = self.initializer(name) {
            facts.dtype = tensor::data_type(t).ok();
            facts.shape = Some(t.dims.iter().map(|&d| Dim::Known(d)).collect());
            facts.constant = facts.dtype.map(|dt| constant(model, t, dt));
        } else if let Some(Some(type_proto::Value::TensorType(tt))) = self.declared_type(name).map(|t| &t.value) {
            facts.dtype = tt.elem_type.and_then(|e| DataType::try_from(e).ok());
            facts.shape = tt.shape.as_ref().map(|s| {
                s.dim
                    .iter()
                    .map(|d| match &d.value {
                        Some(dimension::Value::DimValue(v)) => Dim::Known(*v),
                        Some(dimension::Value::DimParam(p)) => Dim::Symbolic(p.clone()),
                        None => Dim::Symbolic(String::new()),
                    })
                    .collect()
            });
        }
        // Values produced by nodes rarely have a declared shape; the main graph's inferred ones
        // fill the gap (subgraph values are not inferred, and names there may shadow outer ones).
        let known = |s: &Vec<Dim>| s.iter().all(|d| matches!(d, Dim::Known(_)));
        if self.chain.len() == 1
            && !facts.shape.as_ref().is_some_and(known)
            && let Some(inferred) = model.shapes.get(name)
        {
            facts.shape = Some(inferred.clone());
        }
        facts
    }

    // ---- ONNX Runtime's view: its `Graph` API ------------------------------------------------

    fn runtime(&self, level: usize) -> &Runtime<'m> {
        self.chain[level].runtime(self.inputs_override)
    }

    /// `Graph::GetConstantInitializer(name, check_outer_scope)` (graph/graph.cc), from the
    /// innermost graph.
    pub fn constant(&self, name: &str, outer: bool) -> Option<&Const<'m>> {
        self.constant_at(self.chain.len() - 1, name, outer)
    }

    fn constant_at(&self, level: usize, name: &str, outer: bool) -> Option<&Const<'m>> {
        let g = self.runtime(level);
        if let Some(c) = g.consts.get(name) {
            return (!g.overridable.contains(name)).then_some(c);
        }
        if !outer || g.locals.contains(name) {
            return None;
        }
        self.constant_at(level.checked_sub(1)?, name, true)
    }

    /// `Graph::GetInitializedTensor`: any initializer of the innermost graph, constant or not.
    pub fn local_initializer(&self, name: &str) -> Option<&Const<'m>> {
        self.runtime(self.chain.len() - 1).consts.get(name)
    }

    /// `graph_utils::IsInitializer(graph, name, check_outer_scope=true)`.
    pub fn any_initializer(&self, name: &str) -> Option<&Const<'m>> {
        (0..self.chain.len()).rev().find_map(|level| {
            let g = self.runtime(level);
            match g.consts.get(name) {
                Some(c) => Some(Some(c)),
                None if g.locals.contains(name) => Some(None),
                None => None,
            }
        })?
    }

    /// The type ORT's graph declares for `name`, a local name hiding an outer one.
    fn declared(&self, name: &str) -> Option<&'m TypeProto> {
        (0..self.chain.len()).rev().find_map(|level| {
            let g = self.runtime(level);
            match g.declared.get(name) {
                Some(&t) => Some(Some(t)),
                None if g.locals.contains(name) => Some(None),
                None => None,
            }
        })?
    }

    /// The element type the model declares or stores for `name`, as ORT reads it.
    pub fn dtype(&self, name: &str) -> Option<DataType> {
        if let Some(c) = self.any_initializer(name) {
            return Some(c.dtype);
        }
        match &self.declared(name)?.value {
            Some(type_proto::Value::TensorType(t)) => DataType::try_from(t.elem_type?).ok(),
            _ => None,
        }
    }

    /// The declared shape, when every dim is known, as ORT reads it.
    pub fn declared_dims(&self, name: &str) -> Option<Vec<i64>> {
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

    /// Whether `name` is an output of the innermost graph.
    pub fn is_output(&self, name: &str) -> bool {
        self.runtime(self.chain.len() - 1).outputs.contains(name)
    }
}

/// Contents of a constant: exact values when small, the integer range whatever the size.
fn constant(model: &Model, t: &TensorProto, dt: DataType) -> Constant {
    let mut c = Constant { dims: t.dims.clone(), ..Constant::default() };
    // Payloads were checked at load; a failure here only means "no contents known".
    let Ok(payload) = model.payload(t) else { return c };
    let small = tensor::element_count(&t.dims).is_ok_and(|n| n <= SMALL_CONSTANT as u64);
    if let Some(view) = tensor::IntView::new(dt, &payload) {
        // Read in place: a weight of any size is scanned, never widened.
        if let Some((lo, hi)) = view.range() {
            c.int_range = Some(Interval { lo, hi });
        }
        if view.len() <= SMALL_CONSTANT {
            c.ints = tensor::ints(dt, &payload);
        } else if let Payload::Raw(bytes) = &payload
            && tensor::bits_per_element(dt).is_some_and(|b| b <= 8)
        {
            c.raw_codes = Some(bytes.clone());
        }
    } else if small {
        c.f32_bits = tensor::f32_bits(dt, &payload);
        c.f16_bits = tensor::f16_bits(dt, &payload);
    }
    c
}

/// The contents of a constant: an initializer, the tensor of a `Constant` node, or a value a
/// runtime's optimizer creates (see [`Const::ints`], [`Const::floats`], [`Const::opaque`]).
#[derive(Clone, Debug)]
pub struct Const<'m> {
    pub dtype: DataType,
    pub dims: Vec<i64>,
    data: Data<'m>,
}

#[derive(Clone, Debug)]
enum Data<'m> {
    Tensor(&'m TensorProto),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    /// Known type and shape, contents not modelled (e.g. a weight ORT quantizes).
    Opaque,
}

impl<'m> Const<'m> {
    pub fn tensor(t: &'m TensorProto) -> Option<Const<'m>> {
        Some(Const { dtype: tensor::data_type(t).ok()?, dims: t.dims.clone(), data: Data::Tensor(t) })
    }

    pub fn ints(dtype: DataType, dims: Vec<i64>, values: Vec<i64>) -> Const<'m> {
        Const { dtype, dims, data: Data::Ints(values) }
    }

    pub fn floats(dims: Vec<i64>, values: Vec<f32>) -> Const<'m> {
        Const { dtype: DataType::Float, dims, data: Data::Floats(values) }
    }

    /// Known type and shape, contents not modelled (e.g. a weight a runtime quantizes itself).
    pub fn opaque(dtype: DataType, dims: Vec<i64>) -> Const<'m> {
        Const { dtype, dims, data: Data::Opaque }
    }

    /// `optimizer_utils::IsScalar` on the value's shape: rank 0, or rank 1 of size 1.
    pub fn is_scalar(&self) -> bool {
        self.dims.is_empty() || self.dims == [1]
    }

    /// The number of elements (0 when the dims do not give one).
    pub fn element_count(&self) -> u64 {
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
    pub fn first_float(&self, model: &Model) -> Option<f32> {
        self.float_values(model)?.first().copied()
    }

    /// The first element as an integer.
    pub fn first_int(&self, model: &Model) -> Option<i64> {
        self.int_values(model)?.first().copied()
    }
}

fn floats(dt: DataType, payload: &Payload<'_>) -> Option<Vec<f32>> {
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
fn f16_to_f32(h: u16) -> f32 {
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

/// The tensor a `Constant` node holds (utils::ConstantNodeProtoToTensorProto); sparse and string
/// forms are not modelled.
fn constant_node_value(n: &NodeProto) -> Option<Const<'_>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn undeclared_main_graph_values_get_their_inferred_shape() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/models/cnn_residual_qdq.onnx");
        let model = Model::load(&path).unwrap();
        let scopes = Scope::main(&model);
        let dims = |d: &[i64]| Some(d.iter().map(|&v| Dim::Known(v)).collect::<Vec<_>>());
        // Neither is in value_info: a Q after the first conv, and the Gemm output.
        assert_eq!(scopes.facts(&model, "r1_QuantizeLinear_Output").shape, dims(&[1, 8, 16, 16]));
        assert_eq!(scopes.facts(&model, "logits_QuantizeLinear_Input").shape, dims(&[1, 10]));
        // Declared and initializer shapes are still read from the model.
        assert_eq!(scopes.facts(&model, "r1").shape, dims(&[1, 8, 16, 16]));
        assert_eq!(scopes.facts(&model, "c1_w_quantized").shape, dims(&[8, 3, 3, 3]));
    }
}
