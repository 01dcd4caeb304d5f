//! Activation re-signing, before lifting: an int8 activation quantized by one QuantizeLinear and
//! read only by DequantizeLinear nodes becomes uint8 with its zero point moved by 128; so does an
//! int8 constant read only by DequantizeLinear nodes that feed no Conv/MatMul/Gemm weight (a
//! bias added by QLinearAdd must share the activation's code type; weights stay int8, the u8×s8
//! form the kernels want).
//!
//! Why: ONNX Runtime's x86 integer kernels (QLinearConv, QLinearMatMul, QGemm) run u8
//! activations; with s8 ones they take slow generic paths (measured 2x slower on the corpus's s8s8
//! CNNs). ORT itself makes this move on x86 (`QDQS8ToU8Transformer`), so qdqc does it when every
//! selected profile is x86, and only where the zero-point shift lemma
//! ([`qdqc_exact::shift`]) is proven for the concrete scale and zero point: every DQ
//! output keeps its bits, so the model computes what it computed. The rules then see uint8 groups
//! and prove them (hazards included) as such.
//!
//! Left as authored: a Q whose output is a graph output or is read by anything but a DQ of this
//! graph (a subgraph's outer read included), non-scalar or non-initializer zero points and
//! scales, and Q/DQ pairs inside subgraphs.

use crate::lowered::{Computation, LoweredGraph};
use crate::region::{NodeKind, kind};
use crate::{Lowering, Options};
use qdqc_exact::{Verdict, shift};
use qdqc_lang::onnx::{DataType, GraphProto, NodeProto, TensorProto, attribute_proto::AttributeType};
use qdqc_lang::{Model, Result, tensor};
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

/// One re-signed activation.
#[derive(Clone, Debug)]
pub struct Resigned {
    pub tensor: String,
    pub quantize: String,
    pub dequantize: Vec<String>,
    pub zero_point: i64,
    /// The lemma's verdict for the concrete scale(s) and zero point.
    pub proof: Verdict,
}

/// The lowering kept: of the model as authored or of its re-signed form.
pub struct Choice<'m> {
    /// The model the lowering is of.
    pub model: Cow<'m, Model>,
    pub lowering: Lowering,
    /// What was re-signed (empty when the authored form was kept).
    pub resigned: Vec<Resigned>,
    /// Both forms' costs, when both were lowered.
    pub costs: Option<SignCosts>,
}

/// [`sign_cost`] of the authored (int8) and the re-signed (uint8) form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignCosts {
    pub int8: usize,
    pub uint8: usize,
}

/// Lowers `model` and, when `try_resign` and something can be re-signed, its re-signed form too,
/// keeping the cheaper by [`sign_cost`] (ties to uint8). Re-signing speeds up the integer kernels
/// but can cost elementwise fusions (QLinearAdd rounds raw codes against a precomputed offset, so
/// its proof depends on the code type): only lowering both forms tells.
/// Only when `allowed`, the catalog runs, and the target re-signs (`OrtTarget::resigns`).
pub fn lower_cheaper_sign<'m>(model: &'m Model, options: &Options, allowed: bool) -> Result<Choice<'m>> {
    let lowering = crate::lower(model, options)?;
    let authored = |lowering| Choice { model: Cow::Borrowed(model), lowering, resigned: Vec::new(), costs: None };
    let Some(target) = options.rules.as_ref().map(|r| &r.target).filter(|t| allowed && t.resigns()) else {
        return Ok(authored(lowering));
    };
    let penalty = target.int8_activation_penalty();
    let mut resigned_model = model.clone();
    let resigned = resign(&mut resigned_model)?;
    if resigned.is_empty() {
        return Ok(authored(lowering));
    }
    let resigned_lowering = crate::lower_as(&resigned_model, options, "proving the re-signed form")?;
    let costs = SignCosts { int8: sign_cost(model, &lowering.graph, penalty), uint8: sign_cost(&resigned_model, &resigned_lowering.graph, penalty) };
    Ok(if costs.uint8 <= costs.int8 {
        Choice { model: Cow::Owned(resigned_model), lowering: resigned_lowering, resigned, costs: Some(costs) }
    } else {
        Choice { costs: Some(costs), ..authored(lowering) }
    })
}

/// The cost model choosing between the int8 and the re-signed form: one per node left, plus the
/// target's `penalty` per integer GEMM/conv on int8 activations (`OrtTarget::int8_activation_penalty`).
pub fn sign_cost(model: &Model, g: &LoweredGraph, penalty: usize) -> usize {
    let int8 = |name: &str| {
        g.constants.iter().find(|c| c.name == name).map(|c| c.dtype).or_else(|| {
            let init = model.main_graph().initializer.iter().find(|t| t.name.as_deref() == Some(name))?;
            tensor::data_type(init).ok()
        }) == Some(DataType::Int8)
    };
    let extra: usize = g
        .nodes
        .iter()
        .filter(|n| matches!(&n.computation, Computation::Created { op_type, .. } if matches!(op_type.as_str(), "QLinearConv" | "QLinearMatMul" | "QGemm")))
        .filter(|n| n.inputs.get(2).is_some_and(|z| int8(z)))
        .count()
        * penalty;
    g.nodes.len() + extra + g.subgraphs.iter().map(|s| sign_cost(model, &s.graph, penalty)).sum::<usize>()
}

/// Re-signs every eligible int8 activation of the main graph, rebuilding the model's IR.
pub fn resign(model: &mut Model) -> Result<Vec<Resigned>> {
    let plan = plan(model);
    if plan.is_empty() {
        return Ok(plan.into_iter().map(|p| p.resigned).collect());
    }
    let graph = model.main_graph_mut();
    let original = graph.clone();
    let mut taken: BTreeSet<String> = names(graph);
    let mut created: HashMap<String, String> = HashMap::new();
    for p in &plan {
        let u8_name = created
            .entry(p.zero_point_name.clone())
            .or_insert_with(|| {
                let name = fresh(&mut taken, &format!("{}_u8", p.zero_point_name));
                graph.initializer.push(uint8_tensor(&name, &[], vec![(p.resigned.zero_point + 128) as u8]));
                name
            })
            .clone();
        match &p.source {
            Source::Quantize(q) => set_zero_point(&mut graph.node[*q], &u8_name),
            Source::Constant(codes) => {
                let name = fresh(&mut taken, &format!("{}_u8", p.resigned.tensor));
                graph.initializer.push(uint8_tensor(&name, &dims_of(graph, &p.resigned.tensor), codes.clone()));
                for &d in &p.dequantize {
                    graph.node[d].input[0] = name.clone();
                }
            }
        }
        for &d in &p.dequantize {
            set_zero_point(&mut graph.node[d], &u8_name);
        }
        for vi in graph.value_info.iter_mut().filter(|v| v.name.as_deref() == Some(p.resigned.tensor.as_str())) {
            if let Some(qdqc_lang::onnx::type_proto::Value::TensorType(t)) = vi.r#type.as_mut().and_then(|t| t.value.as_mut()) {
                t.elem_type = Some(DataType::Uint8 as i32);
            }
        }
    }
    // The int8 zero points and codes nothing reads any more.
    qdqc_lang::prune::unread_initializers(&original, graph);
    model.rebuild()?;
    Ok(plan.into_iter().map(|p| p.resigned).collect())
}

/// Ops whose DQ-fed inputs are weights the integer kernels want as int8.
const WEIGHT_OPS: [&str; 5] = ["Conv", "ConvTranspose", "MatMul", "Gemm", "MatMulInteger"];

struct Planned {
    /// The QuantizeLinear producing the activation, or the constant's codes.
    source: Source,
    dequantize: Vec<usize>,
    zero_point_name: String,
    resigned: Resigned,
}

/// A tensor that may be re-signed: its source, its name, and the Q's scale bits and zero-point
/// name (constants have none).
type Candidate = (Source, String, Option<(i64, String)>);

enum Source {
    Quantize(usize),
    /// The uint8 twin of the constant's int8 codes.
    Constant(Vec<u8>),
}

fn plan(model: &Model) -> Vec<Planned> {
    let Some(graph) = model.proto.graph.as_ref() else { return Vec::new() };
    let inits: HashMap<&str, &TensorProto> = graph.initializer.iter().map(|t| (tensor::name(t), t)).collect();
    let outputs: BTreeSet<&str> = graph.output.iter().filter_map(|o| o.name.as_deref()).collect();
    let scalar = |name: &str, want: DataType| -> Option<i64> {
        let t = inits.get(name)?;
        let dt = tensor::data_type(t).ok().filter(|&d| d == want)?;
        let payload = model.payload(t).ok()?;
        match want {
            DataType::Float => match tensor::f32_bits(dt, &payload)?[..] {
                [b] => Some(b as i64),
                _ => None,
            },
            _ => match tensor::ints(dt, &payload)?[..] {
                [v] => Some(v),
                _ => None,
            },
        }
    };
    let inputs: BTreeSet<&str> = graph.input.iter().filter_map(|o| o.name.as_deref()).collect();
    // Candidates: (source, tensor, the source's own scale bits and zero-point name, if any).
    let mut candidates: Vec<Candidate> = Vec::new();
    for (pos, node) in graph.node.iter().enumerate() {
        if kind(node) != NodeKind::Quantize || node.input.len() != 3 || node.output.len() != 1 || !dtype_attr_allows(node) {
            continue;
        }
        let Some(scale) = scalar(&node.input[1], DataType::Float) else { continue };
        candidates.push((Source::Quantize(pos), node.output[0].clone(), Some((scale, node.input[2].clone()))));
    }
    let feeds_weight = |dq: usize| {
        graph.node[dq]
            .output
            .first()
            .is_some_and(|v| model.graph.consumers(v).iter().any(|&c| WEIGHT_OPS.contains(&graph.node[c].op_type.as_deref().unwrap_or(""))))
    };
    for t in &graph.initializer {
        let name = tensor::name(t);
        if tensor::data_type(t) != Ok(DataType::Int8) || inputs.contains(name) {
            continue;
        }
        // Weights stay int8 (the integer kernels want them so): skipped before a code is read.
        if model.graph.consumers(name).iter().any(|&c| feeds_weight(c)) {
            continue;
        }
        let Ok(payload) = model.payload(t) else { continue };
        let Some(view) = tensor::IntView::new(DataType::Int8, &payload) else { continue };
        candidates.push((Source::Constant(view.iter().map(|c| (c + 128) as u8).collect()), name.to_string(), None));
    }
    let mut out = Vec::new();
    for (source, y, own) in candidates {
        let y = &y;
        if outputs.contains(y.as_str()) {
            continue;
        }
        let consumers = model.graph.consumers(y);
        let Some(first) = consumers.first() else { continue };
        let zp_name = match &own {
            Some((_, zp_name)) => zp_name.clone(),
            None => match graph.node[*first].input.get(2) {
                Some(z) => z.clone(),
                None => continue,
            },
        };
        let Some(zp) = scalar(&zp_name, DataType::Int8) else { continue };
        let readers_ok = !consumers.is_empty()
            && consumers.iter().all(|&c| {
                let d = &graph.node[c];
                kind(d) == NodeKind::Dequantize
                    && d.input.len() == 3
                    && d.input[0] == *y
                    && !d.input[1..].contains(y)
                    && scalar(&d.input[2], DataType::Int8) == Some(zp)
                    && scalar(&d.input[1], DataType::Float).is_some()
                    && model.graph.implicit_consumers(y).is_empty()
            });
        if !readers_ok {
            continue;
        }
        // The lemma for every scale the pair uses: Q's and each DQ's.
        let mut scales: BTreeSet<i64> = consumers.iter().filter_map(|&c| scalar(&graph.node[c].input[1], DataType::Float)).collect();
        scales.extend(own.as_ref().map(|(s, _)| *s));
        let verdicts: Vec<Verdict> = scales.iter().map(|&b| shift::int8_to_uint8(f32::from_bits(b as u32), zp)).collect();
        let Some(proof) = verdicts.iter().find(|v| !v.is_exact()).or(verdicts.first()).cloned() else { continue };
        if !proof.is_exact() {
            continue;
        }
        let from = match &source {
            Source::Quantize(pos) => graph.node[*pos].label(*pos),
            Source::Constant(_) => format!("initializer {y}"),
        };
        out.push(Planned {
            source,
            dequantize: consumers.clone(),
            zero_point_name: zp_name.clone(),
            resigned: Resigned {
                tensor: y.clone(),
                quantize: from,
                dequantize: consumers.iter().map(|&c| graph.node[c].label(c)).collect(),
                zero_point: zp,
                proof,
            },
        });
    }
    out
}

/// QuantizeLinear's `output_dtype` (opset 21) must be absent or int8; it becomes uint8.
fn dtype_attr_allows(node: &NodeProto) -> bool {
    node.attribute.iter().all(|a| a.name.as_deref() != Some("output_dtype") || a.i == Some(DataType::Int8 as i64))
}

fn set_zero_point(node: &mut NodeProto, name: &str) {
    node.input[2] = name.to_string();
    for a in node.attribute.iter_mut().filter(|a| a.name.as_deref() == Some("output_dtype")) {
        a.i = Some(DataType::Uint8 as i64);
        a.r#type = Some(AttributeType::Int as i32);
    }
}

/// A uint8 initializer of `codes` (int8 codes + 128).
fn uint8_tensor(name: &str, dims: &[i64], codes: Vec<u8>) -> TensorProto {
    TensorProto {
        name: Some(name.to_string()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Uint8 as i32),
        raw_data: Some(codes.into()),
        ..Default::default()
    }
}

fn dims_of(graph: &GraphProto, name: &str) -> Vec<i64> {
    graph.initializer.iter().find(|t| tensor::name(t) == name).map(|t| t.dims.clone()).unwrap_or_default()
}

/// Every name the graph (and its subgraphs) defines or reads, so a created name collides with none.
fn names(graph: &GraphProto) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    collect_names(graph, &mut out);
    out
}

fn collect_names(g: &GraphProto, out: &mut BTreeSet<String>) {
    out.extend(g.initializer.iter().filter_map(|t| t.name.clone()));
    out.extend(g.input.iter().chain(&g.output).chain(&g.value_info).filter_map(|v| v.name.clone()));
    for n in &g.node {
        out.extend(n.input.iter().chain(&n.output).cloned());
        for sub in qdqc_lang::ir::node_graphs(n) {
            collect_names(sub, out);
        }
    }
}

fn fresh(taken: &mut BTreeSet<String>, base: &str) -> String {
    let mut name = base.to_string();
    let mut k = 1;
    while taken.contains(&name) {
        name = format!("{base}_{k}");
        k += 1;
    }
    taken.insert(name.clone());
    name
}
