//! Static shape inference for the main graph.
//!
//! Shapes start from what the model states (graph inputs, initializers, Constant nodes,
//! value_info and graph outputs) and flow through the nodes in dependency order, one rule per
//! operator family, following the ONNX operator specs (opsets 13 to 21, older attribute forms
//! where an operand moved to an input). A rule that cannot be sure of a shape gives none: an
//! absent shape means "unknown", never "scalar". Symbolic dims (`Dim::Symbolic`) keep their name
//! while they pass through unchanged; a dim whose size depends on an unknown one becomes
//! anonymous, `Dim::Symbolic("")`, which equals nothing, not even another anonymous dim.
//!
//! Shape-giving operands (Reshape's shape, Slice's starts, Resize's scales, ...) are read only
//! from initializers and Constant nodes: a value computed at run time is not a static fact.

use crate::analysis::{Dim, SMALL_CONSTANT};
use crate::ir::Vertex;
use crate::load::Model;
use crate::onnx::{AttributeProto, GraphProto, NodeProto, TensorProto, TypeProto, tensor_shape_proto::dimension, type_proto};
use crate::{opset, tensor};
use std::collections::{HashMap, HashSet};

type Shape = Vec<Dim>;

/// Shapes of the main graph's values by name: inputs, initializers and every node output whose
/// shape is declared or can be inferred. Never fails: what cannot be inferred is left out.
pub fn infer(model: &Model) -> HashMap<String, Vec<Dim>> {
    let Some(graph) = model.proto.graph.as_ref() else { return HashMap::new() };
    let mut inference = Inference::new(model, graph);
    for pos in dependency_order(model) {
        if let Some(node) = graph.node.get(pos) {
            inference.visit(node);
        }
    }
    inference.shapes
}

/// Node positions with every producer before its consumers, whatever the protobuf order.
fn dependency_order(model: &Model) -> Vec<usize> {
    // The IR was checked acyclic at load; a cycle here would only leave node outputs unknown.
    let order = petgraph::algo::toposort(&model.graph.flow, None).unwrap_or_default();
    order
        .into_iter()
        .filter_map(|v| match model.graph.flow[v] {
            Vertex::Op(pos) => Some(pos),
            Vertex::Value(..) => None,
        })
        .collect()
}

struct Inference<'m> {
    model: &'m Model,
    /// Default-domain opset: decides whether operands such as `axes` are inputs or attributes.
    opset: i64,
    /// Initializers whose contents are fixed: those not overridable as graph inputs.
    constants: HashMap<&'m str, &'m TensorProto>,
    /// Shapes stated by graph outputs and value_info, the most complete statement per name.
    declared: HashMap<&'m str, Shape>,
    shapes: HashMap<String, Shape>,
}

impl<'m> Inference<'m> {
    fn new(model: &'m Model, graph: &'m GraphProto) -> Self {
        let inputs: HashSet<&str> = graph.input.iter().filter_map(|v| v.name.as_deref()).collect();
        let mut shapes = HashMap::new();
        let mut constants = HashMap::new();
        for t in &graph.initializer {
            let name = tensor::name(t);
            if let Some(shape) = tensor_shape(&t.dims) {
                shapes.insert(name.to_string(), shape);
            }
            // An initializer named like a graph input is only that input's default value.
            if !inputs.contains(name) {
                constants.insert(name, t);
            }
        }
        for s in &graph.sparse_initializer {
            let name = s.values.as_ref().map(tensor::name).unwrap_or("");
            if let Some(shape) = tensor_shape(&s.dims) {
                shapes.insert(name.to_string(), shape);
            }
        }
        // A graph input's own declaration wins over its default's dims.
        for v in &graph.input {
            if let (Some(name), Some(shape)) = (v.name.as_deref(), v.r#type.as_ref().and_then(declared_shape)) {
                shapes.insert(name.to_string(), shape);
            }
        }
        let mut declared: HashMap<&str, Shape> = HashMap::new();
        for v in graph.output.iter().chain(&graph.value_info) {
            let (Some(name), Some(shape)) = (v.name.as_deref(), v.r#type.as_ref().and_then(declared_shape)) else {
                continue;
            };
            if declared.get(name).is_none_or(|old| !fully_known(old) && fully_known(&shape)) {
                declared.insert(name, shape);
            }
        }
        let opset = opset::default_domain_version(&model.proto).unwrap_or(0);
        Inference { model, opset, constants, declared, shapes }
    }

    /// Records the shapes of `node`'s outputs, reconciled with what the model declares.
    fn visit(&mut self, node: &NodeProto) {
        let inferred = self.rule(node);
        for (slot, name) in node.output.iter().enumerate().filter(|(_, o)| !o.is_empty()) {
            let shape = inferred.get(slot).cloned().flatten();
            if let Some(shape) = reconcile(self.declared.get(name.as_str()), shape) {
                self.shapes.insert(name.clone(), shape);
            }
        }
    }

    /// Output shapes by slot; empty when the operator is not modelled.
    fn rule(&self, node: &NodeProto) -> Vec<Option<Shape>> {
        let op = node.op_type.as_deref().unwrap_or("");
        match node.domain.as_deref().unwrap_or("") {
            "" | "ai.onnx" => self.standard_rule(node, op),
            "com.microsoft" => self.microsoft_rule(node, op),
            _ => Vec::new(),
        }
    }

    fn standard_rule(&self, node: &NodeProto, op: &str) -> Vec<Option<Shape>> {
        let x = || self.input(node, 0);
        match op {
            "Constant" => vec![constant_shape(node)],
            _ if SAME_SHAPE.contains(&op) => vec![x().map(<[Dim]>::to_vec)],
            // Dropout's mask and MaxPool's indices have the shape of the main output.
            "Dropout" => twice(x().map(<[Dim]>::to_vec)),
            "MaxPool" => twice(x().and_then(|x| pool(node, x))),
            "LayerNormalization" => x().map(|x| layer_normalization(node, x)).unwrap_or_default(),
            _ if BROADCAST.contains(&op) => vec![self.broadcast_inputs(node, 0..node.input.len())],
            "MatMul" | "MatMulInteger" => vec![self.pair(node, 0, 1, matmul)],
            "QLinearMatMul" => vec![self.pair(node, 0, 3, matmul)],
            "Gemm" => vec![self.pair(node, 0, 1, |a, b| gemm(node, a, b))],
            "Conv" | "ConvInteger" => vec![self.pair(node, 0, 1, |x, w| conv(node, x, w))],
            "QLinearConv" => vec![self.pair(node, 0, 3, |x, w| conv(node, x, w))],
            "ConvTranspose" => vec![self.pair(node, 0, 1, |x, w| conv_transpose(node, x, w))],
            "AveragePool" | "LpPool" => vec![x().and_then(|x| pool(node, x))],
            "GlobalAveragePool" | "GlobalMaxPool" | "GlobalLpPool" => vec![x().and_then(global_pool)],
            "Flatten" => vec![x().and_then(|x| flatten(node, x))],
            "Reshape" => vec![self.reshape(node)],
            "Transpose" => vec![x().and_then(|x| transpose(node, x))],
            "Squeeze" => vec![self.squeeze(node)],
            "Unsqueeze" => vec![self.unsqueeze(node)],
            "Concat" => vec![self.concat(node, 0..node.input.len())],
            "Split" => self.split(node),
            "Slice" => vec![self.slice(node)],
            "Gather" => vec![self.pair(node, 0, 1, |data, indices| gather(node, data, indices))],
            "Expand" => vec![self.expand(node)],
            "Tile" => vec![self.tile(node)],
            "Resize" => vec![self.resize(node)],
            "DepthToSpace" => vec![x().and_then(|x| depth_to_space(node, x))],
            "SpaceToDepth" => vec![x().and_then(|x| space_to_depth(node, x))],
            _ if REDUCE.contains(&op) => vec![self.reduce(node, op)],
            "Shape" => vec![x().and_then(|x| shape_of_shape(node, x))],
            _ => Vec::new(),
        }
    }

    /// ONNX Runtime's contrib operators. The ones with a `channels_last` attribute describe NHWC
    /// tensors when it is set; those are left unknown rather than guessed.
    fn microsoft_rule(&self, node: &NodeProto, op: &str) -> Vec<Option<Shape>> {
        if attr_i(node, "channels_last").unwrap_or(0) != 0 {
            return Vec::new();
        }
        let x = || self.input(node, 0);
        match op {
            "QuantizeLinear" | "DequantizeLinear" | "QLinearSigmoid" | "QLinearLeakyRelu" | "QLinearSoftmax" => {
                vec![x().map(<[Dim]>::to_vec)]
            }
            // Quantized binary ops take (A, A_scale, A_zero_point, B, ...).
            "QLinearAdd" | "QLinearMul" => vec![self.broadcast_inputs(node, [0, 3])],
            "QLinearConv" => vec![self.pair(node, 0, 3, |x, w| conv(node, x, w))],
            "QLinearMatMul" => vec![self.pair(node, 0, 3, matmul)],
            "QGemm" => vec![self.pair(node, 0, 3, |a, b| gemm(node, a, b))],
            "QLinearAveragePool" => vec![x().and_then(|x| pool(node, x))],
            "QLinearGlobalAveragePool" => vec![x().and_then(global_pool)],
            // (Y_scale, Y_zero_point, then X, X_scale, X_zero_point per input).
            "QLinearConcat" => vec![self.concat(node, (2..node.input.len()).step_by(3))],
            _ => Vec::new(),
        }
    }

    /// The shape of input `slot`, when given and known.
    fn input(&self, node: &NodeProto, slot: usize) -> Option<&[Dim]> {
        let name = node.input.get(slot).filter(|n| !n.is_empty())?;
        self.shapes.get(name).map(Vec::as_slice)
    }

    /// Applies a two-operand rule to inputs `a` and `b`.
    fn pair(&self, node: &NodeProto, a: usize, b: usize, f: impl Fn(&[Dim], &[Dim]) -> Option<Shape>) -> Option<Shape> {
        f(self.input(node, a)?, self.input(node, b)?)
    }

    /// Numpy broadcasting of the given inputs (omitted optional inputs skipped).
    fn broadcast_inputs(&self, node: &NodeProto, slots: impl IntoIterator<Item = usize>) -> Option<Shape> {
        let given = slots.into_iter().filter(|&s| node.input.get(s).is_some_and(|n| !n.is_empty()));
        let shapes: Vec<&[Dim]> = given.map(|s| self.input(node, s)).collect::<Option<_>>()?;
        broadcast(&shapes)
    }

    /// The contents of a fixed tensor named `name`: an initializer or a Constant node's `value`.
    fn constant_tensor(&self, name: &str) -> Option<&'m TensorProto> {
        if let Some(t) = self.constants.get(name) {
            return Some(t);
        }
        let node = self.constant_node(name)?;
        attr(node, "value")?.t.as_ref()
    }

    /// The Constant node producing `name`, if one does.
    fn constant_node(&self, name: &str) -> Option<&'m NodeProto> {
        let pos = self.model.graph.producer(name)?;
        let node = self.model.proto.graph.as_ref()?.node.get(pos)?;
        let standard = matches!(node.domain.as_deref().unwrap_or(""), "" | "ai.onnx");
        (standard && node.op_type.as_deref() == Some("Constant")).then_some(node)
    }

    /// Integer contents of the fixed value `name`.
    fn constant_ints(&self, name: &str) -> Option<Vec<i64>> {
        if let Some(t) = self.constant_tensor(name) {
            let dt = small_tensor_type(t)?;
            return tensor::ints(dt, &self.model.payload(t).ok()?);
        }
        let node = self.constant_node(name)?;
        attr(node, "value_ints").map(|a| a.ints.clone()).or_else(|| Some(vec![attr(node, "value_int")?.i?]))
    }

    /// Float contents of the fixed value `name` (f32 tensors only, as Resize's scales are).
    fn constant_floats(&self, name: &str) -> Option<Vec<f32>> {
        if let Some(t) = self.constant_tensor(name) {
            let dt = small_tensor_type(t)?;
            let bits = tensor::f32_bits(dt, &self.model.payload(t).ok()?)?;
            return Some(bits.into_iter().map(f32::from_bits).collect());
        }
        let node = self.constant_node(name)?;
        attr(node, "value_floats").map(|a| a.floats.clone()).or_else(|| Some(vec![attr(node, "value_float")?.f?]))
    }

    /// Integer contents of input `slot`: `Some(None)` when the input is omitted, `None` when it
    /// is given but not fixed (then whatever depends on it is unknown).
    fn operand_ints(&self, node: &NodeProto, slot: usize) -> Option<Option<Vec<i64>>> {
        match node.input.get(slot).filter(|n| !n.is_empty()) {
            None => Some(None),
            Some(name) => self.constant_ints(name).map(Some),
        }
    }

    /// Like [`Self::operand_ints`], for float operands.
    fn operand_floats(&self, node: &NodeProto, slot: usize) -> Option<Option<Vec<f32>>> {
        match node.input.get(slot).filter(|n| !n.is_empty()) {
            None => Some(None),
            Some(name) => self.constant_floats(name).map(Some),
        }
    }

    /// An integer list that moved from attribute `name` to input `slot` at opset `since`.
    fn list_operand(&self, node: &NodeProto, name: &str, slot: usize, since: i64) -> Option<Option<Vec<i64>>> {
        if self.opset >= since { self.operand_ints(node, slot) } else { Some(attr(node, name).map(|a| a.ints.clone())) }
    }

    fn reshape(&self, node: &NodeProto) -> Option<Shape> {
        let target = self.operand_ints(node, 1)??;
        // `allowzero` exists from opset 14; before, a 0 always copies.
        let allow_zero = self.opset >= 14 && attr_i(node, "allowzero").unwrap_or(0) != 0;
        reshape(self.input(node, 0), &target, allow_zero)
    }

    fn squeeze(&self, node: &NodeProto) -> Option<Shape> {
        let axes = self.list_operand(node, "axes", 1, 13)?;
        squeeze(self.input(node, 0)?, axes.filter(|a| !a.is_empty()).as_deref())
    }

    fn unsqueeze(&self, node: &NodeProto) -> Option<Shape> {
        let axes = self.list_operand(node, "axes", 1, 13)??;
        unsqueeze(self.input(node, 0)?, &axes)
    }

    fn concat(&self, node: &NodeProto, slots: impl IntoIterator<Item = usize>) -> Option<Shape> {
        let shapes: Vec<&[Dim]> = slots.into_iter().map(|s| self.input(node, s)).collect::<Option<_>>()?;
        concat(attr_i(node, "axis")?, &shapes)
    }

    fn split(&self, node: &NodeProto) -> Vec<Option<Shape>> {
        let parts = node.output.len();
        let shapes = || -> Option<Vec<Shape>> {
            let x = self.input(node, 0)?;
            let sizes = self.list_operand(node, "split", 1, 13)?;
            if sizes.as_ref().is_some_and(|s| s.len() != parts) {
                return None;
            }
            // From opset 18 the split is given by sizes or by `num_outputs`, which may ask for
            // uneven chunks; before, no sizes means one equal part per output.
            let count = match attr_i(node, "num_outputs") {
                _ if self.opset < 18 => Chunks::Even(parts as i64),
                Some(n) if n == parts as i64 => Chunks::Ceil(n),
                _ if sizes.is_some() => Chunks::Even(parts as i64),
                _ => return None,
            };
            split(x, attr_i(node, "axis").unwrap_or(0), sizes.as_deref(), count)
        };
        shapes().map(|o| o.into_iter().map(Some).collect()).unwrap_or_default()
    }

    fn slice(&self, node: &NodeProto) -> Option<Shape> {
        let x = self.input(node, 0)?;
        // Opset 10 turned the attributes into inputs and added steps.
        let (starts, ends, axes, steps) = if self.opset >= 10 {
            (self.operand_ints(node, 1)??, self.operand_ints(node, 2)??, self.operand_ints(node, 3)?, self.operand_ints(node, 4)?)
        } else {
            let list = |name: &str| attr(node, name).map(|a| a.ints.clone());
            (list("starts")?, list("ends")?, list("axes"), None)
        };
        let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
        let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
        slice(x, &starts, &ends, &axes, &steps)
    }

    fn expand(&self, node: &NodeProto) -> Option<Shape> {
        let target = self.operand_ints(node, 1)??;
        let target: Shape = target.into_iter().map(|d| (d >= 0).then_some(Dim::Known(d))).collect::<Option<_>>()?;
        broadcast(&[self.input(node, 0)?, &target])
    }

    fn tile(&self, node: &NodeProto) -> Option<Shape> {
        let x = self.input(node, 0)?;
        let repeats = self.operand_ints(node, 1)??;
        if repeats.len() != x.len() || repeats.iter().any(|&r| r < 0) {
            return None;
        }
        Some(x.iter().zip(repeats).map(|(d, r)| times(d, r)).collect())
    }

    fn resize(&self, node: &NodeProto) -> Option<Shape> {
        let x = self.input(node, 0)?;
        // Opset 10 takes (X, scales); opset 11 on (X, roi, scales, sizes).
        let (scales_slot, sizes_slot) = if self.opset >= 11 { (2, Some(3)) } else { (1, None) };
        // An empty scales or sizes tensor stands for "not given".
        let scales = self.operand_floats(node, scales_slot)?.filter(|s| !s.is_empty());
        let sizes = match sizes_slot {
            Some(slot) => self.operand_ints(node, slot)?.filter(|s| !s.is_empty()),
            None => None,
        };
        let axes = match attr(node, "axes") {
            Some(a) if self.opset >= 18 => normalize_axes(&a.ints, x.len())?,
            _ => (0..x.len()).collect(),
        };
        match (scales, sizes) {
            (Some(scales), None) => {
                // tf_crop_and_resize scales the region of interest, not the whole input.
                let mode = attr_s(node, "coordinate_transformation_mode");
                if mode == Some(b"tf_crop_and_resize".as_slice()) {
                    return None;
                }
                resize_by_scales(x, &axes, &scales)
            }
            (None, Some(sizes)) => {
                let policy = if self.opset >= 18 { attr_s(node, "keep_aspect_ratio_policy") } else { None };
                resize_to_sizes(x, &axes, &sizes, policy.unwrap_or(b"stretch".as_slice()))
            }
            _ => None,
        }
    }

    fn reduce(&self, node: &NodeProto, op: &str) -> Option<Shape> {
        let x = self.input(node, 0)?;
        // ReduceSum's axes became an input at opset 13, the other reductions' at 18.
        let since = if op == "ReduceSum" { 13 } else { 18 };
        let axes = self.list_operand(node, "axes", 1, since)?.filter(|a| !a.is_empty());
        let keep_dims = attr_i(node, "keepdims").unwrap_or(1) != 0;
        let noop_when_empty = attr_i(node, "noop_with_empty_axes").unwrap_or(0) != 0;
        match axes {
            None if noop_when_empty => Some(x.to_vec()),
            None => Some(reduce(x, &(0..x.len()).collect::<Vec<_>>(), keep_dims)),
            Some(axes) => Some(reduce(x, &normalize_axes(&axes, x.len())?, keep_dims)),
        }
    }
}

/// Operators whose only (or first) output has their first input's shape.
#[rustfmt::skip]
const SAME_SHAPE: &[&str] = &[
    "QuantizeLinear", "DequantizeLinear", "Identity", "Cast", "CastLike",
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "Sigmoid", "HardSigmoid", "HardSwish",
    "Tanh", "Gelu", "Mish", "Softplus", "Softsign", "Shrink", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs",
    "Sign", "Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
    "Atanh", "Not", "BitwiseNot", "IsNaN", "IsInf", "Clip", "Softmax", "LogSoftmax", "Hardmax",
    "BatchNormalization", "InstanceNormalization", "LpNormalization", "MeanVarianceNormalization", "Trilu",
];

/// Operators whose output is the numpy broadcast of all their inputs.
#[rustfmt::skip]
const BROADCAST: &[&str] = &[
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Mean", "Sum", "Equal", "Less", "Greater", "LessOrEqual",
    "GreaterOrEqual", "And", "Or", "Xor", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Where",
];

const REDUCE: &[&str] = &["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"];

/// The same shape for a main output and its companion output.
fn twice(shape: Option<Shape>) -> Vec<Option<Shape>> {
    vec![shape.clone(), shape]
}

/// Whether a tensor is small enough to be a shape operand, and its type. Larger tensors are never
/// decoded here: no sane shape operand is that long.
fn small_tensor_type(t: &TensorProto) -> Option<crate::onnx::DataType> {
    let count = tensor::element_count(&t.dims).ok()?;
    (count <= SMALL_CONSTANT as u64).then(|| tensor::data_type(t).ok()).flatten()
}

// --- Reading the model -------------------------------------------------------------------------

fn attr<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute.iter().find(|a| a.name.as_deref() == Some(name))
}

fn attr_i(node: &NodeProto, name: &str) -> Option<i64> {
    attr(node, name)?.i
}

fn attr_s<'a>(node: &'a NodeProto, name: &str) -> Option<&'a [u8]> {
    attr(node, name)?.s.as_deref()
}

/// The `name` list attribute of `count` positive entries, `default` each when absent.
fn positive_list(node: &NodeProto, name: &str, count: usize, default: i64) -> Option<Vec<i64>> {
    match attr(node, name) {
        None => Some(vec![default; count]),
        Some(a) => (a.ints.len() == count && a.ints.iter().all(|&v| v > 0)).then(|| a.ints.clone()),
    }
}

/// The shape of a stored tensor. Load checks dense tensors' dims against their data, but not a
/// sparse tensor's own dims: a negative dim makes the shape unknown, so every known dim the rules
/// compute with is non-negative.
fn tensor_shape(dims: &[i64]) -> Option<Shape> {
    dims.iter().map(|&d| (d >= 0).then_some(Dim::Known(d))).collect()
}

/// A declared tensor shape. Dims without a value, or with a negative one, are anonymous.
fn declared_shape(t: &TypeProto) -> Option<Shape> {
    let Some(type_proto::Value::TensorType(tt)) = &t.value else { return None };
    let dims = tt.shape.as_ref()?.dim.iter().map(|d| match &d.value {
        Some(dimension::Value::DimValue(v)) if *v >= 0 => Dim::Known(*v),
        Some(dimension::Value::DimParam(p)) => Dim::Symbolic(p.clone()),
        _ => anonymous(),
    });
    Some(dims.collect())
}

/// A Constant node's output shape, from whichever `value*` attribute it carries.
fn constant_shape(node: &NodeProto) -> Option<Shape> {
    let a = node.attribute.first()?;
    let list = |len: usize| Some(vec![Dim::Known(len as i64)]);
    match a.name.as_deref()? {
        "value" => tensor_shape(&a.t.as_ref()?.dims),
        "sparse_value" => tensor_shape(&a.sparse_tensor.as_ref()?.dims),
        "value_float" | "value_int" | "value_string" => Some(Vec::new()),
        "value_floats" => list(a.floats.len()),
        "value_ints" => list(a.ints.len()),
        "value_strings" => list(a.strings.len()),
        _ => None,
    }
}

/// What the model declares and what the rules inferred, as one shape. A fully known declaration
/// wins outright; a partial one is completed dim by dim; on any disagreement the declaration is
/// kept, since the model's own statement is what its producer and consumers were built against.
fn reconcile(declared: Option<&Shape>, inferred: Option<Shape>) -> Option<Shape> {
    let Some(declared) = declared else { return inferred };
    let Some(inferred) = inferred else { return Some(declared.clone()) };
    if fully_known(declared) || declared.len() != inferred.len() {
        return Some(declared.clone());
    }
    let merged: Option<Shape> = declared.iter().zip(inferred).map(|(d, i)| merge_dim(d, i)).collect();
    Some(merged.unwrap_or_else(|| declared.clone()))
}

/// The better known of two statements of one dim, `None` when they contradict each other.
fn merge_dim(declared: &Dim, inferred: Dim) -> Option<Dim> {
    match (declared, inferred) {
        (Dim::Known(a), Dim::Known(b)) => (*a == b).then_some(Dim::Known(b)),
        (Dim::Known(a), _) => Some(Dim::Known(*a)),
        (Dim::Symbolic(_), Dim::Known(b)) => Some(Dim::Known(b)),
        (Dim::Symbolic(name), inferred) if name.is_empty() => Some(inferred),
        (declared, _) => Some(declared.clone()),
    }
}

// --- Dims --------------------------------------------------------------------------------------

/// A dim whose size is unknown and unnamed.
fn anonymous() -> Dim {
    Dim::Symbolic(String::new())
}

fn value(d: &Dim) -> Option<i64> {
    match d {
        Dim::Known(v) => Some(*v),
        Dim::Symbolic(_) => None,
    }
}

fn fully_known(shape: &[Dim]) -> bool {
    shape.iter().all(|d| matches!(d, Dim::Known(_)))
}

/// Whether two dims are certainly equal: equal sizes, or the same symbolic name.
fn same(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => x == y,
        (Dim::Symbolic(x), Dim::Symbolic(y)) => !x.is_empty() && x == y,
        _ => false,
    }
}

/// Whether two dims that must be equal can be: known sizes that differ cannot.
fn compatible(a: &Dim, b: &Dim) -> bool {
    !matches!((a, b), (Dim::Known(x), Dim::Known(y)) if x != y)
}

/// The product of dims: known when all are (1 is neutral, so `N * 1` stays `N`).
fn product(dims: &[Dim]) -> Dim {
    let mut symbolic = None;
    let mut known: i64 = 1;
    for d in dims {
        match d {
            Dim::Known(v) => match known.checked_mul(*v) {
                Some(k) => known = k,
                None => return anonymous(),
            },
            Dim::Symbolic(_) if symbolic.is_none() => symbolic = Some(d),
            Dim::Symbolic(_) => return anonymous(),
        }
    }
    match symbolic {
        None => Dim::Known(known),
        Some(d) if known == 1 => d.clone(),
        Some(_) if known == 0 => Dim::Known(0),
        Some(_) => anonymous(),
    }
}

/// `d * k` for a non-negative `k`.
fn times(d: &Dim, k: i64) -> Dim {
    product(&[d.clone(), Dim::Known(k)])
}

/// `axis` in `[-rank, rank)` as a position.
fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis.checked_add(r)? } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

/// Axes as positions, refusing out-of-range and repeated ones.
fn normalize_axes(axes: &[i64], rank: usize) -> Option<Vec<usize>> {
    let mut seen = HashSet::new();
    axes.iter().map(|&a| normalize_axis(a, rank).filter(|&p| seen.insert(p))).collect()
}

// --- Rules -------------------------------------------------------------------------------------

/// Multidirectional (numpy) broadcasting.
fn broadcast(shapes: &[&[Dim]]) -> Option<Shape> {
    let rank = shapes.iter().map(|s| s.len()).max()?;
    let one = Dim::Known(1);
    (0..rank)
        .map(|i| {
            let mut aligned = shapes.iter().map(|s| (i + s.len()).checked_sub(rank).map_or(&one, |j| &s[j]));
            aligned.try_fold(one.clone(), |acc, d| broadcast_dim(&acc, d))
        })
        .collect()
}

fn broadcast_dim(a: &Dim, b: &Dim) -> Option<Dim> {
    Some(match (a, b) {
        _ if same(a, b) => a.clone(),
        (Dim::Known(1), _) => b.clone(),
        (_, Dim::Known(1)) => a.clone(),
        (Dim::Known(_), Dim::Known(_)) => return None,
        // A valid model's symbolic dim facing a known size n is n or 1: either way the result is n.
        (Dim::Known(n), Dim::Symbolic(_)) | (Dim::Symbolic(_), Dim::Known(n)) => Dim::Known(*n),
        // Two different symbolic dims: either could be the 1 that broadcasts.
        (Dim::Symbolic(_), Dim::Symbolic(_)) => anonymous(),
    })
}

/// numpy.matmul: a 1-D A is a row `[1, k]` and a 1-D B a column `[k, 1]`, the added dim dropped
/// from the result; batch dims broadcast.
fn matmul(a: &[Dim], b: &[Dim]) -> Option<Shape> {
    let (a_batch, m, k_a) = match a {
        [] => return None,
        [k] => (&a[..0], None, k),
        [batch @ .., m, k] => (batch, Some(m), k),
    };
    let (b_batch, k_b, n) = match b {
        [] => return None,
        [k] => (&b[..0], k, None),
        [batch @ .., k, n] => (batch, k, Some(n)),
    };
    if !compatible(k_a, k_b) {
        return None;
    }
    let mut out = broadcast(&[a_batch, b_batch])?;
    out.extend(m.cloned());
    out.extend(n.cloned());
    Some(out)
}

/// Gemm: `A' * B'` with A' and B' the optionally transposed 2-D operands.
fn gemm(node: &NodeProto, a: &[Dim], b: &[Dim]) -> Option<Shape> {
    let ([a0, a1], [b0, b1]) = (a, b) else { return None };
    let (m, k_a) = if attr_i(node, "transA").unwrap_or(0) != 0 { (a1, a0) } else { (a0, a1) };
    let (k_b, n) = if attr_i(node, "transB").unwrap_or(0) != 0 { (b1, b0) } else { (b0, b1) };
    compatible(k_a, k_b).then(|| vec![m.clone(), n.clone()])
}

/// Conv: `[N, M, spatial...]` with M the weight's first dim; the kernel from `kernel_shape` or
/// the weight's spatial dims.
fn conv(node: &NodeProto, x: &[Dim], w: &[Dim]) -> Option<Shape> {
    if x.len() < 3 || w.len() != x.len() {
        return None;
    }
    let group = attr_i(node, "group").unwrap_or(1);
    if group <= 0 || !compatible(&x[1], &times(&w[1], group)) {
        return None;
    }
    let kernel = match attr(node, "kernel_shape") {
        Some(a) => a.ints.clone(),
        None => w[2..].iter().map(value).collect::<Option<_>>()?,
    };
    let mut out = vec![x[0].clone(), w[0].clone()];
    out.extend(sliding_window(node, &x[2..], &kernel, false)?);
    Some(out)
}

/// MaxPool, AveragePool, LpPool: `[N, C, spatial...]` with the kernel from `kernel_shape`.
fn pool(node: &NodeProto, x: &[Dim]) -> Option<Shape> {
    if x.len() < 3 {
        return None;
    }
    let kernel = &attr(node, "kernel_shape")?.ints;
    let ceil_mode = attr_i(node, "ceil_mode").unwrap_or(0) != 0;
    let mut out = x[..2].to_vec();
    out.extend(sliding_window(node, &x[2..], kernel, ceil_mode)?);
    Some(out)
}

/// Spatial output dims of a convolution or pooling window sliding over `dims`.
fn sliding_window(node: &NodeProto, dims: &[Dim], kernel: &[i64], ceil_mode: bool) -> Option<Shape> {
    let n = dims.len();
    if kernel.len() != n || kernel.iter().any(|&k| k <= 0) {
        return None;
    }
    let strides = positive_list(node, "strides", n, 1)?;
    let dilations = positive_list(node, "dilations", n, 1)?;
    let pads = attr(node, "pads").map(|a| &a.ints);
    if pads.is_some_and(|p| p.len() != 2 * n || p.iter().any(|&v| v < 0)) {
        return None;
    }
    let auto_pad = attr_s(node, "auto_pad").unwrap_or(b"NOTSET".as_slice());
    (0..n)
        .map(|i| {
            let Some(size) = value(&dims[i]) else { return Some(anonymous()) };
            let extent = (kernel[i] - 1).checked_mul(dilations[i])?.checked_add(1)?;
            // Explicit pads win; otherwise auto_pad decides them from the input size.
            let (begin, end) = match pads {
                Some(p) => (p[i], p[i + n]),
                None => auto_pads(auto_pad, size, strides[i], extent)?,
            };
            window_count(size, begin, end, extent, strides[i], ceil_mode).map(Dim::Known)
        })
        .collect()
}

/// Begin and end pads that `auto_pad` asks for: SAME_* pads so that the output has
/// `ceil(size / stride)` positions, the odd unit at the end (UPPER) or the beginning (LOWER).
fn auto_pads(auto_pad: &[u8], size: i64, stride: i64, extent: i64) -> Option<(i64, i64)> {
    let total = || {
        let out = size.checked_add(stride - 1)? / stride;
        Some(((out - 1).checked_mul(stride)?.checked_add(extent)? - size).max(0))
    };
    match auto_pad {
        b"NOTSET" | b"VALID" => Some((0, 0)),
        b"SAME_UPPER" => total().map(|t| (t / 2, t - t / 2)),
        b"SAME_LOWER" => total().map(|t| (t - t / 2, t / 2)),
        _ => None,
    }
}

/// Positions of a window of `extent` sliding by `stride` over a padded axis. In ceil mode a last
/// window starting inside the end padding is dropped (the ONNX and PyTorch rule).
fn window_count(size: i64, begin: i64, end: i64, extent: i64, stride: i64, ceil_mode: bool) -> Option<i64> {
    let padded = size.checked_add(begin)?.checked_add(end)?;
    let mut span = padded.checked_sub(extent)?;
    if ceil_mode {
        span = span.checked_add(stride - 1)?;
    }
    if span < 0 {
        return None;
    }
    let count = span / stride + 1;
    let starts_in_end_padding = ceil_mode && (count - 1).checked_mul(stride)? >= size + begin;
    Some(if starts_in_end_padding { count - 1 } else { count })
}

/// ConvTranspose: `[N, W[1] * group, spatial...]`, the spatial dims from `output_shape` when
/// given, else `stride * (in - 1) + output_padding + extent - pads` (SAME_*: `in * stride`).
fn conv_transpose(node: &NodeProto, x: &[Dim], w: &[Dim]) -> Option<Shape> {
    let n = x.len().checked_sub(2).filter(|&n| n > 0)?;
    let group = attr_i(node, "group").unwrap_or(1);
    if w.len() != x.len() || group <= 0 || !compatible(&x[1], &w[0]) {
        return None;
    }
    let mut out = vec![x[0].clone(), times(&w[1], group)];
    if let Some(shape) = attr(node, "output_shape") {
        if shape.ints.len() != n || shape.ints.iter().any(|&d| d < 0) {
            return None;
        }
        out.extend(shape.ints.iter().map(|&d| Dim::Known(d)));
        return Some(out);
    }
    let kernel = match attr(node, "kernel_shape") {
        Some(a) => a.ints.clone(),
        None => w[2..].iter().map(value).collect::<Option<_>>()?,
    };
    if kernel.len() != n || kernel.iter().any(|&k| k <= 0) {
        return None;
    }
    let strides = positive_list(node, "strides", n, 1)?;
    let dilations = positive_list(node, "dilations", n, 1)?;
    let output_padding = attr(node, "output_padding").map_or_else(|| vec![0; n], |a| a.ints.clone());
    let pads = attr(node, "pads").map_or_else(|| vec![0; 2 * n], |a| a.ints.clone());
    if output_padding.len() != n || pads.len() != 2 * n || pads.iter().chain(&output_padding).any(|&p| p < 0) {
        return None;
    }
    let same = matches!(attr_s(node, "auto_pad"), Some(b"SAME_UPPER" | b"SAME_LOWER")) && attr(node, "pads").is_none();
    for i in 0..n {
        let Some(size) = value(&x[i + 2]) else {
            out.push(anonymous());
            continue;
        };
        let extent = (kernel[i] - 1).checked_mul(dilations[i])?.checked_add(1)?;
        let full = if same {
            size.checked_mul(strides[i])?
        } else {
            let base = strides[i].checked_mul(size.checked_sub(1)?)?.checked_add(output_padding[i])?;
            base.checked_add(extent)?.checked_sub(pads[i])?.checked_sub(pads[i + n])?
        };
        out.push(Dim::Known((full >= 0).then_some(full)?));
    }
    Some(out)
}

/// Global pooling keeps N and C and reduces every spatial dim to 1.
fn global_pool(x: &[Dim]) -> Option<Shape> {
    if x.len() < 3 {
        return None;
    }
    let mut out = x[..2].to_vec();
    out.resize(x.len(), Dim::Known(1));
    Some(out)
}

/// LayerNormalization: Y like X; Mean and InvStdDev keep the dims before `axis`, 1 after.
fn layer_normalization(node: &NodeProto, x: &[Dim]) -> Vec<Option<Shape>> {
    let stats = normalize_axis(attr_i(node, "axis").unwrap_or(-1), x.len()).map(|axis| {
        let mut s = x[..axis].to_vec();
        s.resize(x.len(), Dim::Known(1));
        s
    });
    vec![Some(x.to_vec()), stats.clone(), stats]
}

/// Flatten: `[prod(dims before axis), prod(dims from axis)]`, axis in `[-rank, rank]`.
fn flatten(node: &NodeProto, x: &[Dim]) -> Option<Shape> {
    let axis = attr_i(node, "axis").unwrap_or(1);
    let axis = if axis == x.len() as i64 { x.len() } else { normalize_axis(axis, x.len())? };
    Some(vec![product(&x[..axis]), product(&x[axis..])])
}

/// Reshape: 0 copies the input dim at the same position (unless `allow_zero`), -1 takes what is
/// left of the element count.
fn reshape(x: Option<&[Dim]>, target: &[i64], allow_zero: bool) -> Option<Shape> {
    let mut out = Vec::with_capacity(target.len());
    let mut inferred = None;
    for (i, &d) in target.iter().enumerate() {
        out.push(match d {
            -1 if inferred.is_none() => {
                inferred = Some(i);
                anonymous()
            }
            0 if !allow_zero => match x {
                Some(x) => x.get(i)?.clone(),
                None => anonymous(),
            },
            d if d >= 0 => Dim::Known(d),
            _ => return None,
        });
    }
    if let (Some(at), Some(x)) = (inferred, x) {
        out[at] = remaining_dim(x, &out, at)?;
    }
    Some(out)
}

/// The dim at `at` that makes `out` hold as many elements as `x`. Symbolic dims present on both
/// sides cancel; `None` when the known sizes cannot divide (an invalid reshape).
fn remaining_dim(x: &[Dim], out: &[Dim], at: usize) -> Option<Dim> {
    let mut symbols: Vec<&str> = Vec::new();
    let mut known_in: i64 = 1;
    for d in x {
        match d {
            Dim::Known(v) => known_in = known_in.checked_mul(*v)?,
            Dim::Symbolic(name) if !name.is_empty() => symbols.push(name),
            Dim::Symbolic(_) => return Some(anonymous()),
        }
    }
    let mut known_out: i64 = 1;
    for d in out.iter().enumerate().filter(|&(j, _)| j != at).map(|(_, d)| d) {
        match d {
            Dim::Known(v) => known_out = known_out.checked_mul(*v)?,
            // `symbols` holds no anonymous dim, so an anonymous one here never cancels.
            Dim::Symbolic(name) => match symbols.iter().position(|s| s == name) {
                Some(p) => {
                    symbols.swap_remove(p);
                }
                None => return Some(anonymous()),
            },
        }
    }
    if known_out == 0 {
        return Some(anonymous());
    }
    if known_in % known_out != 0 {
        return None;
    }
    let quotient = known_in / known_out;
    Some(match symbols.as_slice() {
        [] => Dim::Known(quotient),
        [name] if quotient == 1 => Dim::Symbolic(name.to_string()),
        _ => anonymous(),
    })
}

/// Transpose: `perm` (default: reversed dims) must be a permutation of the positions.
fn transpose(node: &NodeProto, x: &[Dim]) -> Option<Shape> {
    let perm: Vec<i64> = match attr(node, "perm") {
        Some(a) => a.ints.clone(),
        None => (0..x.len() as i64).rev().collect(),
    };
    let mut seen = HashSet::new();
    let valid = perm.len() == x.len() && perm.iter().all(|&p| (0..x.len() as i64).contains(&p) && seen.insert(p));
    valid.then(|| perm.iter().map(|&p| x[p as usize].clone()).collect())
}

/// Squeeze: drops the given axes (which must be 1), or without axes every dim known to be 1 (a
/// symbolic dim might be 1, so then the result is unknown).
fn squeeze(x: &[Dim], axes: Option<&[i64]>) -> Option<Shape> {
    let Some(axes) = axes else {
        return fully_known(x).then(|| x.iter().filter(|d| **d != Dim::Known(1)).cloned().collect());
    };
    let axes = normalize_axes(axes, x.len())?;
    if axes.iter().any(|&a| !compatible(&x[a], &Dim::Known(1))) {
        return None;
    }
    Some(x.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, d)| d.clone()).collect())
}

/// Unsqueeze: inserts 1s at `axes`, counted in the output's rank.
fn unsqueeze(x: &[Dim], axes: &[i64]) -> Option<Shape> {
    let rank = x.len() + axes.len();
    let axes = normalize_axes(axes, rank)?;
    let mut rest = x.iter();
    (0..rank).map(|i| if axes.contains(&i) { Some(Dim::Known(1)) } else { rest.next().cloned() }).collect()
}

/// Concat: equal ranks, the axis dims add up, the others must agree.
fn concat(axis: i64, shapes: &[&[Dim]]) -> Option<Shape> {
    let (first, rest) = shapes.split_first()?;
    let axis = normalize_axis(axis, first.len())?;
    if rest.iter().any(|s| s.len() != first.len()) {
        return None;
    }
    let mut out = first.to_vec();
    for s in rest {
        for (i, d) in s.iter().enumerate().filter(|&(i, _)| i != axis) {
            out[i] = match (&out[i], d) {
                (a, b) if !compatible(a, b) => return None,
                (Dim::Symbolic(_), Dim::Known(v)) => Dim::Known(*v),
                (a, _) => a.clone(),
            };
        }
    }
    let along: Option<Vec<i64>> = shapes.iter().map(|s| value(&s[axis])).collect();
    out[axis] = match along {
        Some(sizes) => Dim::Known(sizes.iter().try_fold(0i64, |acc, &v| acc.checked_add(v))?),
        None if shapes.len() == 1 => first[axis].clone(),
        None => anonymous(),
    };
    Some(out)
}

/// How Split cuts an axis when no sizes are given.
enum Chunks {
    /// Into this many equal parts (the axis must divide).
    Even(i64),
    /// Into this many parts of `ceil(dim / n)`, the last one smaller (opset 18 `num_outputs`).
    Ceil(i64),
}

/// Split: each output is `x` with the axis dim replaced by its chunk.
fn split(x: &[Dim], axis: i64, sizes: Option<&[i64]>, chunks: Chunks) -> Option<Vec<Shape>> {
    let axis = normalize_axis(axis, x.len())?;
    let dim = &x[axis];
    let parts: Vec<Dim> = match (sizes, chunks) {
        (Some(sizes), _) => {
            let total = sizes.iter().try_fold(0i64, |acc, &s| if s < 0 { None } else { acc.checked_add(s) })?;
            if !compatible(dim, &Dim::Known(total)) {
                return None;
            }
            sizes.iter().map(|&s| Dim::Known(s)).collect()
        }
        (None, Chunks::Even(n) | Chunks::Ceil(n)) if n <= 0 => return None,
        (None, Chunks::Even(n) | Chunks::Ceil(n)) if value(dim).is_none() => vec![anonymous(); n as usize],
        (None, Chunks::Even(n)) => {
            let d = value(dim)?;
            (d % n == 0).then(|| vec![Dim::Known(d / n); n as usize])?
        }
        (None, Chunks::Ceil(n)) => {
            let d = value(dim)?;
            let chunk = d.checked_add(n - 1)? / n;
            let last = d - chunk * (n - 1);
            if last < 0 {
                return None;
            }
            let mut parts = vec![Dim::Known(chunk); n as usize - 1];
            parts.push(Dim::Known(last));
            parts
        }
    };
    Some(
        parts
            .into_iter()
            .map(|p| {
                let mut s = x.to_vec();
                s[axis] = p;
                s
            })
            .collect(),
    )
}

/// Slice: per axis, the number of indices `start, start + step, ...` before `end`, with numpy's
/// clamping of out-of-range and negative bounds.
fn slice(x: &[Dim], starts: &[i64], ends: &[i64], axes: &[i64], steps: &[i64]) -> Option<Shape> {
    let n = starts.len();
    if ends.len() != n || axes.len() != n || steps.len() != n {
        return None;
    }
    let axes = normalize_axes(axes, x.len())?;
    let mut out = x.to_vec();
    for (k, &axis) in axes.iter().enumerate() {
        let (start, end, step) = (starts[k], ends[k], steps[k]);
        if step == 0 {
            return None;
        }
        out[axis] = match value(&x[axis]) {
            Some(d) => Dim::Known(slice_len(d, start, end, step)),
            // Only the whole-axis slice is certain on a dim of unknown size.
            None if start == 0 && end == i64::MAX && step == 1 => x[axis].clone(),
            None => anonymous(),
        };
    }
    Some(out)
}

/// Elements of `range(start, end, step)` over an axis of `dim`, after clamping. Computed in
/// i128 so that bounds such as `i64::MIN` cannot overflow.
fn slice_len(dim: i64, start: i64, end: i64, step: i64) -> i64 {
    let (d, step) = (dim as i128, step as i128);
    let wrap = |v: i64| if v < 0 { v as i128 + d } else { v as i128 };
    let count = if step > 0 {
        let (s, e) = (wrap(start).max(0).min(d), wrap(end).max(0).min(d));
        if e > s { (e - s + step - 1) / step } else { 0 }
    } else {
        let (s, e) = (wrap(start).max(0).min(d - 1), wrap(end).max(-1).min(d - 1));
        if s > e { (s - e - step - 1) / -step } else { 0 }
    };
    count as i64
}

/// Gather: the indices' shape replaces the data's `axis`.
fn gather(node: &NodeProto, data: &[Dim], indices: &[Dim]) -> Option<Shape> {
    let axis = normalize_axis(attr_i(node, "axis").unwrap_or(0), data.len())?;
    Some(data[..axis].iter().chain(indices).chain(&data[axis + 1..]).cloned().collect())
}

/// Resize by scales: `floor(dim * scale)` on the resized axes (computed in f64, as onnx does).
fn resize_by_scales(x: &[Dim], axes: &[usize], scales: &[f32]) -> Option<Shape> {
    if scales.len() != axes.len() {
        return None;
    }
    let mut out = x.to_vec();
    for (&axis, &scale) in axes.iter().zip(scales) {
        out[axis] = match value(&x[axis]) {
            Some(d) => Dim::Known(scaled(d as f64 * scale as f64, f64::floor)?),
            None if scale == 1.0 => x[axis].clone(),
            None => anonymous(),
        };
    }
    Some(out)
}

/// Resize to sizes. With `not_larger` / `not_smaller` the sizes bound one common scale, the
/// smallest or largest ratio, and each axis gets `round(scale * dim)`.
fn resize_to_sizes(x: &[Dim], axes: &[usize], sizes: &[i64], policy: &[u8]) -> Option<Shape> {
    if sizes.len() != axes.len() || sizes.iter().any(|&s| s < 0) {
        return None;
    }
    let mut out = x.to_vec();
    let ratios = || -> Option<Vec<f64>> { axes.iter().zip(sizes).map(|(&a, &s)| value(&x[a]).filter(|&d| d > 0).map(|d| s as f64 / d as f64)).collect() };
    let common = match policy {
        b"stretch" => None,
        b"not_larger" => ratios().map(|r| r.into_iter().fold(f64::MAX, f64::min)),
        b"not_smaller" => ratios().map(|r| r.into_iter().fold(f64::MIN, f64::max)),
        _ => return None,
    };
    for (&axis, &size) in axes.iter().zip(sizes) {
        out[axis] = match (policy, common, value(&x[axis])) {
            (b"stretch", _, _) => Dim::Known(size),
            (_, Some(scale), Some(d)) => Dim::Known(scaled(scale * d as f64, f64::round)?),
            _ => anonymous(),
        };
    }
    Some(out)
}

/// A computed size rounded by `round`, refused when it is not a valid dim.
fn scaled(size: f64, round: fn(f64) -> f64) -> Option<i64> {
    let r = round(size);
    (r.is_finite() && r >= 0.0 && r < i64::MAX as f64).then_some(r as i64)
}

fn blocksize(node: &NodeProto) -> Option<i64> {
    attr_i(node, "blocksize").filter(|&b| b > 0)
}

/// DepthToSpace: `[N, C / b², H * b, W * b]`.
fn depth_to_space(node: &NodeProto, x: &[Dim]) -> Option<Shape> {
    let ([n, c, h, w], b) = (x, blocksize(node)?) else { return None };
    let area = b.checked_mul(b)?;
    let channels = match value(c) {
        Some(c) if c % area == 0 => Dim::Known(c / area),
        Some(_) => return None,
        None => anonymous(),
    };
    Some(vec![n.clone(), channels, times(h, b), times(w, b)])
}

/// SpaceToDepth: `[N, C * b², H / b, W / b]`.
fn space_to_depth(node: &NodeProto, x: &[Dim]) -> Option<Shape> {
    let ([n, c, h, w], b) = (x, blocksize(node)?) else { return None };
    let shrink = |d: &Dim| match value(d) {
        Some(v) if v % b == 0 => Some(Dim::Known(v / b)),
        Some(_) => None,
        None => Some(anonymous()),
    };
    Some(vec![n.clone(), times(c, b.checked_mul(b)?), shrink(h)?, shrink(w)?])
}

/// A reduction over `axes`: reduced dims become 1 or disappear.
fn reduce(x: &[Dim], axes: &[usize], keep_dims: bool) -> Shape {
    x.iter()
        .enumerate()
        .filter_map(|(i, d)| match (axes.contains(&i), keep_dims) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::Known(1)),
            (true, false) => None,
        })
        .collect()
}

/// Shape: a 1-D tensor of the rank, or of the `[start, end)` part of it (opset 15).
fn shape_of_shape(node: &NodeProto, x: &[Dim]) -> Option<Shape> {
    let rank = x.len() as i64;
    let clamp = |v: i64| if v < 0 { v.saturating_add(rank).max(0) } else { v.min(rank) };
    let start = clamp(attr_i(node, "start").unwrap_or(0));
    let end = clamp(attr_i(node, "end").unwrap_or(rank));
    Some(vec![Dim::Known((end - start).max(0))])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::{
        AttributeProto, GraphProto, ModelProto, OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto, attribute_proto::AttributeType,
        tensor_shape_proto::Dimension, type_proto,
    };
    use prost::Message;
    use std::path::Path;

    /// `"N,3,8"` as dims: numbers are known, names symbolic, `?` anonymous; `""` is a scalar.
    fn dims(spec: &str) -> Shape {
        spec.split(',')
            .filter(|d| !d.is_empty())
            .map(|d| match (d.parse(), d) {
                (Ok(v), _) => Dim::Known(v),
                (Err(_), "?") => anonymous(),
                (Err(_), name) => Dim::Symbolic(name.to_string()),
            })
            .collect()
    }

    fn tensor_type(spec: &str) -> TypeProto {
        let dim = dims(spec)
            .into_iter()
            .map(|d| Dimension {
                value: match d {
                    Dim::Known(v) => Some(dimension::Value::DimValue(v)),
                    Dim::Symbolic(p) if p.is_empty() => None,
                    Dim::Symbolic(p) => Some(dimension::Value::DimParam(p)),
                },
                ..Default::default()
            })
            .collect();
        TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor { elem_type: Some(1), shape: Some(TensorShapeProto { dim }) })),
            ..Default::default()
        }
    }

    fn info(name: &str, spec: &str) -> ValueInfoProto {
        ValueInfoProto { name: Some(name.into()), r#type: Some(tensor_type(spec)), ..Default::default() }
    }

    fn int64s(name: &str, vals: &[i64]) -> TensorProto {
        TensorProto { name: Some(name.into()), dims: vec![vals.len() as i64], data_type: Some(7), int64_data: vals.to_vec(), ..Default::default() }
    }

    fn floats(name: &str, vals: &[f32]) -> TensorProto {
        TensorProto { name: Some(name.into()), dims: vec![vals.len() as i64], data_type: Some(1), float_data: vals.to_vec(), ..Default::default() }
    }

    /// A float tensor of the given dims, zeros (weights whose values do not matter).
    fn zeros(name: &str, spec: &str) -> TensorProto {
        let d: Vec<i64> = dims(spec).iter().filter_map(value).collect();
        let count = d.iter().product::<i64>() as usize;
        TensorProto { name: Some(name.into()), dims: d, data_type: Some(1), float_data: vec![0.0; count], ..Default::default() }
    }

    fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
        NodeProto {
            op_type: Some(op.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn ms(mut n: NodeProto) -> NodeProto {
        n.domain = Some("com.microsoft".into());
        n
    }

    fn ints(mut n: NodeProto, name: &str, vals: &[i64]) -> NodeProto {
        let a = AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Ints as i32), ints: vals.to_vec(), ..Default::default() };
        n.attribute.push(a);
        n
    }

    fn int(mut n: NodeProto, name: &str, v: i64) -> NodeProto {
        let a = AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Int as i32), i: Some(v), ..Default::default() };
        n.attribute.push(a);
        n
    }

    fn string(mut n: NodeProto, name: &str, v: &str) -> NodeProto {
        let a =
            AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::String as i32), s: Some(v.as_bytes().to_vec().into()), ..Default::default() };
        n.attribute.push(a);
        n
    }

    fn constant(output: &str, t: TensorProto) -> NodeProto {
        let a = AttributeProto { name: Some("value".into()), r#type: Some(AttributeType::Tensor as i32), t: Some(t), ..Default::default() };
        NodeProto { attribute: vec![a], ..node("Constant", &[], &[output]) }
    }

    /// A Constant holding an empty sparse tensor that claims `dims`.
    fn sparse_constant(output: &str, dims: &[i64]) -> NodeProto {
        let sparse = crate::onnx::SparseTensorProto { values: Some(floats("", &[])), indices: Some(int64s("", &[])), dims: dims.to_vec() };
        let a = AttributeProto {
            name: Some("sparse_value".into()),
            r#type: Some(AttributeType::SparseTensor as i32),
            sparse_tensor: Some(sparse),
            ..Default::default()
        };
        NodeProto { attribute: vec![a], ..node("Constant", &[], &[output]) }
    }

    /// A model of these graph inputs, initializers and nodes.
    struct Case {
        opset: i64,
        inputs: Vec<ValueInfoProto>,
        inits: Vec<TensorProto>,
        nodes: Vec<NodeProto>,
        value_info: Vec<ValueInfoProto>,
    }

    fn case(opset: i64, inputs: &[(&str, &str)]) -> Case {
        Case { opset, inputs: inputs.iter().map(|(n, s)| info(n, s)).collect(), inits: Vec::new(), nodes: Vec::new(), value_info: Vec::new() }
    }

    impl Case {
        fn init(mut self, t: TensorProto) -> Self {
            self.inits.push(t);
            self
        }

        fn node(mut self, n: NodeProto) -> Self {
            self.nodes.push(n);
            self
        }

        fn declare(mut self, name: &str, spec: &str) -> Self {
            self.value_info.push(info(name, spec));
            self
        }

        /// Loads the model through [`Model::load`] and returns its shapes.
        fn shapes(self) -> Shapes {
            let proto = ModelProto {
                ir_version: Some(10),
                opset_import: vec![
                    OperatorSetIdProto { domain: Some(String::new()), version: Some(self.opset) },
                    OperatorSetIdProto { domain: Some("com.microsoft".into()), version: Some(1) },
                ],
                graph: Some(GraphProto {
                    name: Some("g".into()),
                    node: self.nodes,
                    input: self.inputs,
                    initializer: self.inits,
                    value_info: self.value_info,
                    ..Default::default()
                }),
                ..Default::default()
            };
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("m.onnx");
            std::fs::write(&path, proto.encode_to_vec()).unwrap();
            Shapes(Model::load(&path).unwrap().shapes)
        }
    }

    struct Shapes(HashMap<String, Shape>);

    impl Shapes {
        #[track_caller]
        fn is(&self, name: &str, spec: &str) {
            assert_eq!(self.0.get(name), Some(&dims(spec)), "shape of {name}");
        }

        #[track_caller]
        fn unknown(&self, name: &str) {
            assert_eq!(self.0.get(name), None, "shape of {name}");
        }
    }

    #[test]
    fn qdq_and_unary_ops_keep_the_shape() {
        let mut c = case(21, &[("x", "N,3,8,8")]).init(floats("s", &[0.5])).init(int64s("unused", &[1]));
        c.inits[0].dims.clear();
        c = c
            .node(node("QuantizeLinear", &["x", "s"], &["q"]))
            .node(node("DequantizeLinear", &["q", "s"], &["dq"]))
            .node(node("Relu", &["dq"], &["r"]))
            .node(node("HardSwish", &["r"], &["h"]))
            .node(int(node("Cast", &["h"], &["c"]), "to", 10))
            .node(node("Clip", &["c"], &["cl"]))
            .node(node("Softmax", &["cl"], &["sm"]))
            .node(node("Dropout", &["sm"], &["d", "mask"]))
            .node(node("LayerNormalization", &["d", "s"], &["ln", "mean", "inv"]));
        let s = c.shapes();
        for name in ["q", "dq", "r", "h", "c", "cl", "sm", "d", "mask", "ln"] {
            s.is(name, "N,3,8,8");
        }
        s.is("mean", "N,3,8,1");
        s.is("inv", "N,3,8,1");
    }

    #[test]
    fn broadcasting_keeps_symbolic_dims_by_name() {
        let s = case(17, &[("a", "N,1,8"), ("b", "3,1"), ("c", "N,4"), ("d", "M,4"), ("e", "3"), ("f", "4"), ("g", "N,8")])
            .node(node("Add", &["a", "b"], &["ab"]))
            .node(node("Mul", &["c", "c"], &["cc"]))
            .node(node("Sub", &["c", "d"], &["cd"]))
            .node(node("Where", &["a", "b", "g"], &["w"]))
            .node(node("Equal", &["e", "f"], &["bad"]))
            .node(node("Max", &["a", "b", "e"], &["m"]))
            .shapes();
        s.is("ab", "N,3,8");
        s.is("cc", "N,4");
        // N and M differ by name: either could be the broadcast 1, so the dim is anonymous.
        s.is("cd", "?,4");
        s.is("w", "N,3,8");
        s.unknown("bad");
        s.unknown("m");
    }

    #[test]
    fn matmul_broadcasts_batches_and_handles_vectors() {
        let s = case(17, &[("a", "2,1,3,4"), ("b", "5,4,6"), ("v", "4"), ("m", "3,4"), ("n", "4,6"), ("k", "5,7")])
            .node(node("MatMul", &["a", "b"], &["ab"]))
            .node(node("MatMul", &["v", "n"], &["vn"]))
            .node(node("MatMul", &["m", "v"], &["mv"]))
            .node(node("MatMul", &["v", "v"], &["vv"]))
            .node(node("MatMul", &["m", "k"], &["bad"]))
            .node(node("Gemm", &["m", "n"], &["g"]))
            .node(int(int(node("Gemm", &["n", "k"], &["gt"]), "transA", 1), "transB", 1))
            .shapes();
        s.is("ab", "2,5,3,6");
        s.is("vn", "6");
        s.is("mv", "3");
        s.is("vv", "");
        s.unknown("bad");
        s.is("g", "3,6");
        s.unknown("gt");
    }

    #[test]
    fn conv_with_pads_strides_dilations_and_groups() {
        let s = case(17, &[("x", "N,8,10,10"), ("y", "1,8,H,7")])
            .init(zeros("w", "16,4,3,3"))
            .init(zeros("w1", "8,8,3,3"))
            .node(int(ints(ints(node("Conv", &["x", "w"], &["grouped"]), "pads", &[1, 1, 1, 1]), "strides", &[2, 2]), "group", 2))
            .node(string(ints(node("Conv", &["x", "w1"], &["valid"]), "dilations", &[2, 2]), "auto_pad", "VALID"))
            .node(string(ints(node("Conv", &["y", "w1"], &["same"]), "strides", &[2, 2]), "auto_pad", "SAME_UPPER"))
            .node(ints(node("Conv", &["x", "w1"], &["asym"]), "pads", &[0, 2, 1, 0]))
            // 8 input channels cannot be 4 per group in 1 group.
            .node(node("Conv", &["x", "w"], &["bad"]))
            .shapes();
        s.is("grouped", "N,16,5,5");
        s.is("valid", "N,8,6,6");
        s.is("same", "1,8,?,4");
        s.is("asym", "N,8,9,10");
        s.unknown("bad");
    }

    #[test]
    fn conv_transpose_from_pads_output_padding_and_output_shape() {
        let s = case(17, &[("x", "1,4,5,5")])
            .init(zeros("w", "4,2,3,3"))
            .node(int(
                ints(ints(ints(node("ConvTranspose", &["x", "w"], &["y"]), "strides", &[2, 2]), "pads", &[1, 1, 1, 1]), "output_padding", &[1, 1]),
                "group",
                2,
            ))
            .node(string(ints(node("ConvTranspose", &["x", "w"], &["same"]), "strides", &[2, 3]), "auto_pad", "SAME_UPPER"))
            .node(ints(ints(node("ConvTranspose", &["x", "w"], &["fixed"]), "strides", &[2, 2]), "output_shape", &[11, 12]))
            .shapes();
        s.is("y", "1,4,10,10");
        s.is("same", "1,2,10,15");
        s.is("fixed", "1,2,11,12");
    }

    #[test]
    fn pooling_floor_and_ceil_modes() {
        let pool = |op: &str, out: &str| ints(ints(node(op, &["x"], &[out]), "kernel_shape", &[3, 3]), "strides", &[2, 2]);
        let s = case(19, &[("x", "N,4,8,9"), ("z", "1,2,5")])
            .node(pool("MaxPool", "floor"))
            .node(int(pool("AveragePool", "ceil"), "ceil_mode", 1))
            .node({
                let mut n = int(pool("MaxPool", "with_indices"), "ceil_mode", 1);
                n.output.push("indices".into());
                n
            })
            // Ceil mode would start a third window in the end padding: PyTorch and ONNX drop it.
            .node(int(ints(ints(ints(node("MaxPool", &["z"], &["dropped"]), "kernel_shape", &[2]), "strides", &[2]), "pads", &[1, 1]), "ceil_mode", 1))
            .node(string(pool("AveragePool", "same"), "auto_pad", "SAME_LOWER"))
            .node(node("GlobalAveragePool", &["x"], &["gap"]))
            .node(node("GlobalMaxPool", &["z"], &["gmp"]))
            .node(node("MaxPool", &["x"], &["no_kernel"]))
            .shapes();
        s.is("floor", "N,4,3,4");
        s.is("ceil", "N,4,4,4");
        s.is("with_indices", "N,4,4,4");
        s.is("indices", "N,4,4,4");
        s.is("dropped", "1,2,3");
        s.is("same", "N,4,4,5");
        s.is("gap", "N,4,1,1");
        s.is("gmp", "1,2,1");
        s.unknown("no_kernel");
    }

    #[test]
    fn reshape_copies_zeros_and_infers_minus_one() {
        let s = case(14, &[("x", "N,4,8"), ("y", "2,3,4"), ("z", "0,4"), ("t", "1")])
            .init(int64s("keep_n", &[0, -1]))
            .init(int64s("to_8_3", &[-1, 0]))
            .init(int64s("to_4", &[4, -1]))
            .init(int64s("bad", &[5, -1]))
            .init(int64s("zero", &[0, 4]))
            .init(int64s("two_minus", &[-1, -1]))
            .node(node("Reshape", &["x", "keep_n"], &["a"]))
            .node(node("Reshape", &["y", "to_8_3"], &["b"]))
            .node(node("Reshape", &["y", "to_4"], &["c"]))
            .node(node("Reshape", &["y", "bad"], &["d"]))
            .node(int(node("Reshape", &["z", "zero"], &["e"]), "allowzero", 1))
            .node(node("Reshape", &["y", "two_minus"], &["f"]))
            // A shape computed at run time is not a static fact.
            .node(node("Reshape", &["y", "t"], &["g"]))
            .node(node("Flatten", &["x"], &["fl"]))
            .node(int(node("Flatten", &["y"], &["fl0"]), "axis", 0))
            .node(int(node("Flatten", &["x"], &["fl_neg"]), "axis", -1))
            .shapes();
        s.is("a", "N,32");
        s.is("b", "8,3");
        s.is("c", "4,6");
        s.unknown("d");
        s.is("e", "0,4");
        s.unknown("f");
        s.unknown("g");
        s.is("fl", "N,32");
        s.is("fl0", "1,24");
        s.is("fl_neg", "?,8");
    }

    #[test]
    fn transpose_squeeze_unsqueeze_across_opsets() {
        let s = case(13, &[("x", "N,1,3,1")])
            .init(int64s("axes", &[1, -1]))
            .init(int64s("new", &[0, 3]))
            .node(node("Transpose", &["x"], &["rev"]))
            .node(ints(node("Transpose", &["x"], &["perm"]), "perm", &[0, 2, 1, 3]))
            .node(ints(node("Transpose", &["x"], &["bad_perm"]), "perm", &[0, 0, 1, 3]))
            .node(node("Squeeze", &["x", "axes"], &["sq"]))
            .node(node("Squeeze", &["x"], &["sq_all"]))
            .node(node("Unsqueeze", &["sq", "new"], &["unsq"]))
            .shapes();
        s.is("rev", "1,3,1,N");
        s.is("perm", "N,3,1,1");
        s.unknown("bad_perm");
        s.is("sq", "N,3");
        // N might be 1 too: without axes the result is unknown.
        s.unknown("sq_all");
        s.is("unsq", "1,N,3,1");
        let old = case(11, &[("x", "2,1,3")])
            .node(ints(node("Squeeze", &["x"], &["sq"]), "axes", &[1]))
            .node(ints(node("Unsqueeze", &["x"], &["unsq"]), "axes", &[-1]))
            .node(node("Squeeze", &["x"], &["sq_all"]))
            .shapes();
        old.is("sq", "2,3");
        old.is("unsq", "2,1,3,1");
        old.is("sq_all", "2,3");
    }

    #[test]
    fn concat_and_split() {
        let s = case(18, &[("a", "N,3,4"), ("b", "N,5,4"), ("x", "2,10,3")])
            .init(int64s("sizes", &[2, 8]))
            .node(int(node("Concat", &["a", "b"], &["c1"]), "axis", 1))
            .node(int(node("Concat", &["a", "a"], &["c0"]), "axis", 0))
            .node(int(node("Concat", &["a", "x"], &["bad"]), "axis", 1))
            .node(int(int(node("Split", &["x"], &["e0", "e1"]), "axis", 1), "num_outputs", 2))
            // Opset 18 wants sizes or num_outputs.
            .node(int(node("Split", &["x"], &["n0", "n1"]), "axis", 1))
            .node(int(node("Split", &["x", "sizes"], &["s0", "s1"]), "axis", 1))
            .node(int(int(node("Split", &["x"], &["u0", "u1", "u2"]), "axis", 1), "num_outputs", 3))
            .shapes();
        s.is("c1", "N,8,4");
        s.is("c0", "?,3,4");
        s.unknown("bad");
        s.is("e0", "2,5,3");
        s.is("e1", "2,5,3");
        s.unknown("n0");
        s.is("s0", "2,2,3");
        s.is("s1", "2,8,3");
        s.is("u0", "2,4,3");
        s.is("u2", "2,2,3");
        let old = case(11, &[("x", "6,N")])
            .node(ints(node("Split", &["x"], &["a", "b"]), "split", &[1, 5]))
            .node(node("Split", &["x"], &["h0", "h1", "h2"]))
            .shapes();
        old.is("a", "1,N");
        old.is("b", "5,N");
        old.is("h1", "2,N");
    }

    #[test]
    fn slice_with_negative_indices_and_steps() {
        let s = case(13, &[("x", "10,20,30,N")])
            .init(int64s("starts", &[-1, 20]))
            .init(int64s("ends", &[i64::MIN, 2]))
            .init(int64s("axes", &[0, -2]))
            .init(int64s("steps", &[-1, -3]))
            .init(int64s("s1", &[-5, 1, 0]))
            .init(int64s("e1", &[100, 10, i64::MAX]))
            .init(int64s("a1", &[1, 2, 3]))
            .init(int64s("st1", &[1, 2, 1]))
            .init(int64s("e2", &[-7]))
            .init(int64s("z", &[0]))
            .node(node("Slice", &["x", "starts", "ends", "axes", "steps"], &["neg"]))
            .node(node("Slice", &["x", "s1", "e1", "a1", "st1"], &["pos"]))
            // No axes: the first; no steps: 1. End before start gives an empty axis.
            .node(node("Slice", &["x", "e2", "z"], &["empty"]))
            .node(node("Slice", &["x", "z", "e2", "", "z"], &["step0"]))
            .shapes();
        // Axis 0 from 9 down to the beginning: 10; axis 2 from 20 down past 2 by 3: 20,17,...,5.
        s.is("neg", "10,20,6,N");
        s.is("pos", "10,5,5,N");
        s.is("empty", "0,20,30,N");
        s.unknown("step0");
        let old = case(9, &[("x", "10,20")]).node(ints(ints(ints(node("Slice", &["x"], &["y"]), "starts", &[2]), "ends", &[-2]), "axes", &[1])).shapes();
        old.is("y", "10,16");
    }

    #[test]
    fn gather_expand_tile() {
        let s = case(17, &[("data", "5,6,7"), ("idx", "2,3"), ("i", ""), ("x", "3,1")])
            .init(int64s("shape", &[2, 1, 4]))
            .init(int64s("repeats", &[2, 5]))
            .node(int(node("Gather", &["data", "idx"], &["g"]), "axis", 1))
            .node(int(node("Gather", &["data", "i"], &["scalar"]), "axis", -1))
            .node(node("Expand", &["x", "shape"], &["e"]))
            .node(node("Tile", &["x", "repeats"], &["t"]))
            .shapes();
        s.is("g", "5,2,3,7");
        s.is("scalar", "5,6");
        s.is("e", "2,3,4");
        s.is("t", "6,5");
    }

    #[test]
    fn resize_by_scales_and_sizes() {
        let s = case(19, &[("x", "N,3,5,8")])
            .init(floats("scales", &[1.0, 1.0, 1.5, 2.0]))
            .init(floats("empty", &[]))
            .init(int64s("sizes", &[1, 3, 7, 9]))
            .init(int64s("hw", &[10, 10]))
            .node(node("Resize", &["x", "", "scales"], &["by_scales"]))
            .node(node("Resize", &["x", "", "empty", "sizes"], &["by_sizes"]))
            .node(ints(node("Resize", &["x", "", "", "hw"], &["stretch"]), "axes", &[2, 3]))
            .node(string(ints(node("Resize", &["x", "", "", "hw"], &["not_larger"]), "axes", &[2, 3]), "keep_aspect_ratio_policy", "not_larger"))
            .node(string(ints(node("Resize", &["x", "", "", "hw"], &["not_smaller"]), "axes", &[2, 3]), "keep_aspect_ratio_policy", "not_smaller"))
            .shapes();
        s.is("by_scales", "N,3,7,16");
        s.is("by_sizes", "1,3,7,9");
        s.is("stretch", "N,3,10,10");
        // One scale for both axes: min(10/5, 10/8) = 1.25 → round(6.25), 10; max: 2 → 10, 16.
        s.is("not_larger", "N,3,6,10");
        s.is("not_smaller", "N,3,10,16");
        let old = case(10, &[("x", "1,2,3")]).init(floats("scales", &[1.0, 2.0, 2.0])).node(node("Resize", &["x", "scales"], &["y"])).shapes();
        old.is("y", "1,4,6");
    }

    #[test]
    fn depth_space_and_reductions() {
        let s = case(13, &[("x", "N,8,4,6"), ("odd", "1,3,3,3")])
            .init(int64s("axes", &[1, -1]))
            .node(int(node("DepthToSpace", &["x"], &["d2s"]), "blocksize", 2))
            .node(int(node("SpaceToDepth", &["x"], &["s2d"]), "blocksize", 2))
            .node(int(node("SpaceToDepth", &["odd"], &["bad"]), "blocksize", 2))
            .node(int(ints(node("ReduceMean", &["x"], &["mean"]), "axes", &[2, 3]), "keepdims", 0))
            .node(node("ReduceSum", &["x", "axes"], &["sum"]))
            .node(node("ReduceMax", &["x"], &["all"]))
            .node(int(node("ReduceSum", &["x"], &["noop"]), "noop_with_empty_axes", 1))
            .node(node("Shape", &["x"], &["shape"]))
            .shapes();
        s.is("d2s", "N,2,8,12");
        s.is("s2d", "N,32,2,3");
        s.unknown("bad");
        s.is("mean", "N,8");
        s.is("sum", "N,1,4,1");
        s.is("all", "1,1,1,1");
        s.is("noop", "N,8,4,6");
        s.is("shape", "4");
        let new = case(18, &[("x", "2,3,4")])
            .init(int64s("axes", &[0]))
            .node(int(node("ReduceMin", &["x", "axes"], &["min"]), "keepdims", 0))
            .node(int(int(node("Shape", &["x"], &["tail"]), "start", -2), "end", 10))
            .shapes();
        new.is("min", "3,4");
        new.is("tail", "2");
    }

    #[test]
    fn microsoft_quantized_ops() {
        let c = case(17, &[("a", "N,8,6,6"), ("b", "1,8,1,1"), ("c", "1,8,1,6"), ("m", "N,6,4")])
            .init(zeros("s", ""))
            .init(zeros("w", "16,8,3,3"))
            .init(zeros("k", "4,5"));
        let s = c
            .node(ms(node("QLinearAdd", &["a", "s", "s", "b", "s", "s", "s", "s"], &["add"])))
            .node(ms(node("QLinearMul", &["b", "s", "s", "a", "s", "s", "s", "s"], &["mul"])))
            .node(node("QLinearConv", &["a", "s", "s", "w", "s", "s", "s", "s"], &["conv"]))
            .node(node("QLinearMatMul", &["m", "s", "s", "k", "s", "s", "s", "s"], &["mm"]))
            .node(ms(ints(ints(node("QLinearAveragePool", &["a", "s", "s", "s", "s"], &["ap"]), "kernel_shape", &[2, 2]), "strides", &[2, 2])))
            .node(ms(node("QLinearGlobalAveragePool", &["a", "s", "s", "s", "s"], &["gap"])))
            .node(ms(int(node("QLinearGlobalAveragePool", &["a", "s", "s", "s", "s"], &["nhwc"]), "channels_last", 1)))
            .node(ms(node("QLinearSigmoid", &["a", "s", "s", "s", "s"], &["sig"])))
            .node(ms(node("QLinearLeakyRelu", &["a", "s", "s", "s", "s"], &["lrelu"])))
            .node(ms(node("QLinearSoftmax", &["m", "s", "s", "s", "s"], &["sm"])))
            .node(ms(int(node("QLinearConcat", &["s", "s", "a", "s", "s", "c", "s", "s"], &["cat"]), "axis", 2)))
            .shapes();
        s.is("add", "N,8,6,6");
        s.is("mul", "N,8,6,6");
        s.is("conv", "N,16,4,4");
        s.is("mm", "N,6,5");
        s.is("ap", "N,8,3,3");
        s.is("gap", "N,8,1,1");
        s.unknown("nhwc");
        s.is("sig", "N,8,6,6");
        s.is("lrelu", "N,8,6,6");
        s.is("sm", "N,6,4");
        // Concatenation does not broadcast: N must be c's 1.
        s.is("cat", "1,8,7,6");
    }

    #[test]
    fn constant_nodes_give_shapes_and_shape_operands() {
        let mut value_int = node("Constant", &[], &["one"]);
        value_int.attribute.push(AttributeProto { name: Some("value_ints".into()), ints: vec![3, 4, 5], ..Default::default() });
        let s = case(17, &[("x", "12,5")])
            .node(constant("target", int64s("", &[0, 3, -1])))
            .node(value_int)
            .node(node("Reshape", &["x", "target"], &["y"]))
            .shapes();
        s.is("target", "3");
        s.is("one", "3");
        s.unknown("y");
        let s = case(17, &[("x", "12,5")]).node(constant("target", int64s("", &[3, -1]))).node(node("Reshape", &["x", "target"], &["y"])).shapes();
        s.is("y", "3,20");
    }

    #[test]
    fn declarations_win_and_complete_inference() {
        let s = case(17, &[("x", "N,4")])
            .node(node("Relu", &["x"], &["conflict"]))
            .node(node("Relu", &["x"], &["partial"]))
            .node(node("Relu", &["x"], &["named"]))
            .node(node("Relu", &["conflict"], &["after"]))
            .node(node("If", &["x"], &["opaque"]))
            .declare("conflict", "2,4")
            .declare("partial", "?,?")
            .declare("named", "B,?")
            .declare("opaque", "7")
            .shapes();
        s.is("conflict", "2,4");
        s.is("after", "2,4");
        s.is("partial", "N,4");
        s.is("named", "B,4");
        s.is("opaque", "7");
        s.is("x", "N,4");
    }

    #[test]
    fn nodes_out_of_order_are_walked_by_dependency() {
        let s = case(17, &[("x", "2,3")]).node(node("Transpose", &["r"], &["t"])).node(node("Relu", &["x"], &["r"])).shapes();
        s.is("t", "3,2");
    }

    #[test]
    fn malformed_nodes_are_unknown_not_panics() {
        let s = case(18, &[("x", "2,3"), ("v", "")])
            .init(int64s("big_axes", &[i64::MAX, i64::MIN]))
            .node(node("Conv", &["x", "x"], &["conv"]))
            .node(ints(node("MaxPool", &["x"], &["pool"]), "kernel_shape", &[0]))
            .node(node("Unsqueeze", &["x", "big_axes"], &["unsq"]))
            .node(node("Squeeze", &["x", "big_axes"], &["sq"]))
            .node(int(node("Concat", &["x", "v"], &["cat"]), "axis", 9))
            .node(int(node("Split", &["x"], &["a", "b"]), "num_outputs", 1_000_000_000_000))
            .node(node("Gather", &["v", "x"], &["gather"]))
            .node(ints(node("Transpose", &["x"], &["tr"]), "perm", &[-1, 0]))
            .node(node("MatMul", &["v", "x"], &["mm"]))
            .node(int(node("DepthToSpace", &["x"], &["d2s"]), "blocksize", -4))
            .node(node("Frobnicate", &["x"], &["custom"]))
            .node(sparse_constant("sparse", &[-3]))
            .node(node("Flatten", &["sparse"], &["flat"]))
            .shapes();
        for name in ["conv", "pool", "unsq", "sq", "cat", "a", "b", "gather", "tr", "mm", "d2s", "custom", "sparse", "flat"] {
            s.unknown(name);
        }
    }

    fn shipped(path: &str) -> Model {
        Model::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)).unwrap()
    }

    #[test]
    fn shipped_synthetic_model_is_all_1x4x8x8() {
        let model = shipped("tests/cases/seed_synthetic_shared_q.onnx");
        let graph = model.proto.graph.as_ref().unwrap();
        assert!(!graph.node.is_empty());
        // Every activation is [1,4,8,8] (3x3 convs with pads 1, same-shape adds); the weight
        // dequantizations keep their weights' [4,4,3,3].
        for out in graph.node.iter().flat_map(|n| &n.output) {
            let expected = if out.starts_with('w') { "4,4,3,3" } else { "1,4,8,8" };
            assert_eq!(model.shapes.get(out), Some(&dims(expected)), "{out}");
        }
    }

    #[test]
    fn shipped_cnn_has_every_intermediate_shape() {
        let model = shipped("examples/models/cnn_residual_qdq.onnx");
        let graph = model.proto.graph.as_ref().unwrap();
        for out in graph.node.iter().flat_map(|n| &n.output) {
            assert!(model.shapes.get(out).is_some_and(|s| fully_known(s)), "{out}: {:?}", model.shapes.get(out));
        }
        let shape = |name: &str| model.shapes.get(name).cloned();
        // Input [1,3,16,16]; conv 3x3 pad 1 to 8 channels; the residual add and a concat with the
        // first conv keep 16x16; MaxPool 2x2 halves, AveragePool halves again; the flattened
        // branches (16*4*4 and 16) meet; Gemm with transB against [10,272].
        assert_eq!(shape("r1"), Some(dims("1,8,16,16")));
        assert_eq!(shape("res"), Some(dims("1,8,16,16")));
        assert_eq!(shape("cat"), Some(dims("1,16,16,16")));
        assert_eq!(shape("mp"), Some(dims("1,16,8,8")));
        assert_eq!(shape("ap"), Some(dims("1,16,4,4")));
        assert_eq!(shape("r3"), Some(dims("1,16,8,8")));
        assert_eq!(shape("ap_flat"), Some(dims("1,256")));
        assert_eq!(shape("gap"), Some(dims("1,16,1,1")));
        assert_eq!(shape("feat"), Some(dims("1,272")));
        assert_eq!(shape("logits_QuantizeLinear_Input"), Some(dims("1,10")));
        assert_eq!(shape("logits"), Some(dims("1,10")));
    }
}
