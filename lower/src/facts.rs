//! Facts about named values, read from the model: types and shapes from value_info (in the main
//! graph completed by the shapes inferred at load), contents of constant initializers. Lookups
//! walk the scope chain from the innermost graph outwards, so a subgraph sees the initializers of
//! the graphs enclosing it.

use qdqc_lang::analysis::{Constant, Dim, Interval, SMALL_CONSTANT, ValueFacts};
use qdqc_lang::onnx::{DataType, GraphProto, TensorProto, TypeProto, ValueInfoProto, tensor_shape_proto::dimension, type_proto};
use qdqc_lang::tensor::Payload;
use qdqc_lang::{Model, tensor};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The graphs enclosing the current one, outermost first, each with its names indexed (a
/// lookup per value scanned every initializer: quadratic on a graph of thousands of weights).
#[derive(Clone)]
pub struct Scopes<'m> {
    chain: Vec<Arc<Level<'m>>>,
}

struct Level<'m> {
    graph: &'m GraphProto,
    /// The first initializer of each name.
    initializers: HashMap<&'m str, &'m TensorProto>,
    inputs: HashSet<&'m str>,
    /// The first input, output or value_info entry of each name, in that order.
    declared: HashMap<&'m str, &'m ValueInfoProto>,
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
        Level { graph, initializers, inputs, declared }
    }
}

impl<'m> Scopes<'m> {
    pub fn main(model: &'m Model) -> Self {
        Scopes { chain: vec![Arc::new(Level::new(model.main_graph()))] }
    }

    pub fn enter(&self, g: &'m GraphProto) -> Self {
        let mut chain = self.chain.clone();
        chain.push(Arc::new(Level::new(g)));
        Scopes { chain }
    }

    pub fn current(&self) -> &'m GraphProto {
        self.chain.last().expect("never empty").graph
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn undeclared_main_graph_values_get_their_inferred_shape() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/models/cnn_residual_qdq.onnx");
        let model = Model::load(&path).unwrap();
        let scopes = Scopes::main(&model);
        let dims = |d: &[i64]| Some(d.iter().map(|&v| Dim::Known(v)).collect::<Vec<_>>());
        // Neither is in value_info: a Q after the first conv, and the Gemm output.
        assert_eq!(scopes.facts(&model, "r1_QuantizeLinear_Output").shape, dims(&[1, 8, 16, 16]));
        assert_eq!(scopes.facts(&model, "logits_QuantizeLinear_Input").shape, dims(&[1, 10]));
        // Declared and initializer shapes are still read from the model.
        assert_eq!(scopes.facts(&model, "r1").shape, dims(&[1, 8, 16, 16]));
        assert_eq!(scopes.facts(&model, "c1_w_quantized").shape, dims(&[8, 3, 3, 3]));
    }
}
