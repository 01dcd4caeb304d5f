//! From one group ORT would fuse to the prover that decides it, with the group's concrete
//! parameters read from the model.

use super::params::{ChannelParams, Ctx};
use qdqc_exact::on_codes;
use qdqc_exact::{Contract, QParam, Verdict};
use qdqc_ort::binary::{self, BinaryOp, BinaryParams, Broadcast};
use qdqc_ort::matmul_dynamic::{self, DynamicMatMul};
use qdqc_ort::optimizer::{Fusion, Rewrite};
use qdqc_ort::requant::{self, Bias, GemmGroup, GemmKind, NearBoundary, column_channels, row_channels};
use qdqc_ort::weight_bias::{self, FloatPath};
use qdqc_ort::{Isa, lut, pool, softmax};
use serde::Serialize;

/// Parameters of one end of a group, as stored.
#[derive(Clone, Debug, Serialize)]
pub struct QdqParams {
    pub tensor: String,
    #[serde(rename = "type")]
    pub code: String,
    pub scale: Vec<f32>,
    pub scale_bits: Vec<String>,
    pub zero_point: Vec<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub axis: Option<i64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupParams {
    /// One per DQ input, in target input order.
    pub inputs: Vec<Option<QdqParams>>,
    pub outputs: Vec<Option<QdqParams>>,
}

fn param_json(ctx: &Ctx, pos: usize, tensor: &str) -> Option<QdqParams> {
    let p = ctx.channel_params(pos).ok()?;
    Some(QdqParams {
        tensor: tensor.to_string(),
        code: p.code.name().to_string(),
        scale_bits: p.scales.iter().map(|s| format!("0x{:08x}", s.to_bits())).collect(),
        scale: p.scales,
        zero_point: p.zero_points,
        axis: p.axis,
    })
}

pub fn params_json(ctx: &Ctx, f: &Fusion) -> Option<GroupParams> {
    let inputs = f.dq_inputs.iter().map(|&p| param_json(ctx, p, &ctx.node(p).input[0])).collect();
    let outputs = f.q_outputs.iter().map(|&p| param_json(ctx, p, ctx.node(p).output.first().map(String::as_str).unwrap_or(""))).collect();
    Some(GroupParams { inputs, outputs })
}

pub fn prove(ctx: &Ctx, f: &Fusion, isa: Isa, contract: Contract) -> Verdict {
    prove_group(ctx, f, isa, contract).unwrap_or_else(|reason| Verdict::Unknown { reason })
}

fn prove_group(ctx: &Ctx, f: &Fusion, isa: Isa, contract: Contract) -> Result<Verdict, String> {
    let op = ctx.node(f.target).op_type.as_deref().unwrap_or("");
    // Parameters of a DQ or Q ORT inserted by QDQPropagation are those of the node it copied.
    let source = |i: usize| f.input_params.iter().find(|&&(slot, _)| slot == i).map(|&(_, p)| p);
    let x = |i: usize| {
        source(i).ok_or_else(|| format!("input {i} of {} is not DequantizeLinear'd with authored parameters", ctx.name(f.target))).and_then(|p| ctx.qparam(p))
    };
    let y = || f.output_params.first().ok_or_else(|| "no QuantizeLinear output with authored parameters".to_string()).and_then(|&p| ctx.qparam(p));
    Ok(match (f.rule, op) {
        ("2DQ", "Add" | "Mul") => {
            let bop = if op == "Add" { BinaryOp::Add } else { BinaryOp::Mul };
            binary::prove_layouts(bop, &BinaryParams { a: x(0)?, b: x(1)?, c: y()? }, &layouts(ctx, f), isa, contract)
        }
        ("MatMul", _) if !f.q_outputs.is_empty() && !b_is_2d_constant(ctx, f) => match dynamic_matmul(ctx, f)? {
            (g, Some(_)) => matmul_dynamic::prove(&g, isa, contract),
            (g, None) => matmul_dynamic::prove_every_k(&g, isa, contract),
        },
        ("Conv" | "MatMul" | "Gemm", _) if !f.q_outputs.is_empty() => requant::prove(&gemm_group(ctx, f, op)?, isa, contract),
        ("MatMul" | "Gemm", _) => return Err(format!("{} sums in float after integer accumulation: never proven exact", f.fused_op)),
        ("1DQ", "Sigmoid") => lut::prove_sigmoid(x(0)?, y()?, isa),
        ("1DQ_CPU", "LeakyRelu") => lut::prove_leaky_relu(x(0)?, y()?, ctx.float_attr(f.target, "alpha").unwrap_or(0.01), contract),
        ("1DQ_CPU", "Softmax") => match softmax_row(ctx, f.target)? {
            Some(len) => softmax::prove(x(0)?, y()?, len, isa),
            None => softmax::prove_every_length(x(0)?, y()?, isa),
        },
        ("1DQ", "GlobalAveragePool") => {
            let shape = ctx.dims(&ctx.node(f.target).input[0]).ok_or("the input's rank is not known")?;
            let params = pool::PoolParams { x: x(0)?, y: y()? };
            match shape.iter().skip(2).copied().collect::<Option<Vec<i64>>>() {
                Some(spatial) => pool::prove_global_average_pool(&params, spatial.iter().product::<i64>() as u64, contract),
                None => pool::prove_global_average_pool_any_size(&params, contract),
            }
        }
        ("1DQ", "AveragePool") => {
            let params = pool::PoolParams { x: x(0)?, y: y()? };
            match pool_geometry(ctx, f)? {
                (geom, symbolic) if symbolic.is_empty() => pool::prove_average_pool(&params, &geom, isa, contract),
                (geom, symbolic) => pool::prove_average_pool_any_size(&params, &geom, &symbolic, isa, contract),
            }
        }
        ("*DQ", "Concat") => {
            let inputs = (0..f.dq_inputs.len()).map(x).collect::<Result<Vec<_>, _>>()?;
            lut::prove_concat(&inputs, y()?, contract)
        }
        ("Where", _) => lut::prove_where(x(1)?, x(2)?, y()?, contract),
        ("dropDQ", "ArgMax") => on_codes::argmax(x(0)?),
        (rule, _) if rule.starts_with("drop") => round_trip(x(0)?, y().unwrap_or(x(0)?), rule),
        (rule, op) => return Err(format!("no prover for ORT rule {rule} on {op}")),
    })
}

/// The near-boundary count of a Conv/MatMul/Gemm group with a Q output whose float path fails
/// P2 (ISA-independent: the float path's error bound holds for every summation order).
pub fn near_boundary(ctx: &Ctx, f: &Fusion) -> Option<NearBoundary> {
    let op = ctx.node(f.target).op_type.as_deref().unwrap_or("");
    match f.rule {
        "MatMul" if !f.q_outputs.is_empty() && !b_is_2d_constant(ctx, f) => match dynamic_matmul(ctx, f).ok()? {
            (g, Some(_)) => matmul_dynamic::near_boundary(&g),
            (_, None) => None,
        },
        "Conv" | "MatMul" | "Gemm" if !f.q_outputs.is_empty() => requant::near_boundary(&gemm_group(ctx, f, op).ok()?),
        _ => None,
    }
}

/// Length of the rows Softmax normalises: the axis dim (opset ≥ 13), or the product of the dims
/// from the axis on (older opsets flatten); `None` when a dim of it is symbolic (the kernel's
/// arithmetic depends on that length only, so the prover tries every length).
fn softmax_row(ctx: &Ctx, target: usize) -> Result<Option<usize>, String> {
    let shape = ctx.dims(&ctx.node(target).input[0]).ok_or("the Softmax input's rank is not known")?;
    let rank = shape.len() as i64;
    let opset = qdqc_lang::opset::default_domain_version(&ctx.model.proto).unwrap_or(13);
    let axis = ctx.int_attr(target, "axis").unwrap_or(if opset >= 13 { -1 } else { 1 });
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&axis) {
        return Err(format!("Softmax axis {axis} out of range for rank {rank}"));
    }
    let row = if opset >= 13 { &shape[axis as usize..=axis as usize] } else { &shape[axis as usize..] };
    let Some(len) = row.iter().copied().collect::<Option<Vec<i64>>>().map(|dims| dims.iter().product::<i64>()) else { return Ok(None) };
    usize::try_from(len).map(Some).map_err(|_| "negative dimension".to_string())
}

/// The authored DQ feeding input `i` of the target, if the fusion absorbed one.
fn dq_for_input(ctx: &Ctx, f: &Fusion, i: usize) -> Option<usize> {
    let name = ctx.node(f.target).input.get(i)?;
    f.dq_inputs.iter().copied().find(|&p| ctx.node(p).output.first() == Some(name))
}

/// Which broadcast layouts ORT may run for the target's inputs ([`binary::layouts`], as the rule asks).
fn layouts(ctx: &Ctx, f: &Fusion) -> Vec<Broadcast> {
    let target = ctx.node(f.target);
    let shape = |i: usize| {
        let dq = dq_for_input(ctx, f, i)?;
        ctx.shape(&ctx.node(dq).input[0]).or_else(|| ctx.shape(&target.input[i]))
    };
    binary::layouts(shape(0), shape(1))
}

/// Whether B is DequantizeLinear'd from a 2-D constant (weights); otherwise (an activation, a
/// batched constant) the MatMul is proven for every B.
fn b_is_2d_constant(ctx: &Ctx, f: &Fusion) -> bool {
    dq_for_input(ctx, f, 1).is_none_or(|p| ctx.constant_dims(p).is_some_and(|dims| dims.len() == 2))
}

/// A MatMul proven for every B (two activations, or a batched constant): per-tensor parameters,
/// both ranks ≥ 2, and K: static (`Some`), or symbolic on both sides (`None`: proven for every
/// K); every code of both types is reachable (the audit tracks no ranges).
fn dynamic_matmul(ctx: &Ctx, f: &Fusion) -> Result<(DynamicMatMul, Option<usize>), String> {
    let target = ctx.node(f.target);
    let dq = |i: usize| dq_for_input(ctx, f, i).ok_or_else(|| format!("input {i} of {} is not an authored DequantizeLinear", ctx.name(f.target)));
    let (a, b, y) = (ctx.qparam(dq(0)?)?, ctx.qparam(dq(1)?)?, ctx.qparam(f.q_outputs[0])?);
    let shape = |i: usize| ctx.dims(&target.input[i]).filter(|s| s.len() >= 2).ok_or(format!("input {i} has no known rank ≥ 2"));
    let (sa, sb) = (shape(0)?, shape(1)?);
    let k = match (sa[sa.len() - 1], sb[sb.len() - 2]) {
        (Some(ka), Some(kb)) if ka != kb => return Err(format!("K of A ({ka}) and of B ({kb}) differ")),
        (Some(k), _) | (_, Some(k)) if k <= 0 => return Err(format!("K = {k}")),
        (Some(k), _) | (_, Some(k)) => Some(k as usize),
        (None, None) => None,
    };
    Ok((DynamicMatMul::new(a, b, k.unwrap_or(1), y), k))
}

fn gemm_group(ctx: &Ctx, f: &Fusion, op: &str) -> Result<GemmGroup, String> {
    let target = f.target;
    let x_pos = dq_for_input(ctx, f, 0).ok_or("the activation is not DequantizeLinear'd by the model")?;
    let w_pos = dq_for_input(ctx, f, 1).ok_or("the weight was quantized by ORT itself (WeightBiasQuantization)")?;
    let y = ctx.qparam(f.q_outputs[0])?;
    let group = weights_group(ctx, target, op, x_pos, w_pos, y)?;
    if let Some(b_pos) = dq_for_input(ctx, f, 2) {
        let ChannelParams { scales, zero_points, .. } = ctx.channel_params(b_pos)?;
        return Ok(group.with_bias(Bias { codes: ctx.constant_codes(b_pos)?.1, scales, zero_points, float: None }));
    }
    match float_bias(ctx, target)? {
        // The selector fused a bias DQ it did not find in the model: WeightBiasQuantization's.
        Some(b) => {
            let bias = weight_bias::quantized_bias(&b, group.x.scale, &group.w_scales)?;
            Ok(group.with_bias(bias))
        }
        None => Ok(group),
    }
}

/// The float bias initializer of a Conv/Gemm, `None` without a bias input; an error when the
/// bias is neither an authored int32 DQ nor a 1-D float32 constant.
fn float_bias(ctx: &Ctx, target: usize) -> Result<Option<Vec<f32>>, String> {
    let Some(name) = ctx.node(target).input.get(2).filter(|b| !b.is_empty()) else { return Ok(None) };
    match ctx.scopes.f32_tensor(ctx.model, name) {
        Some((dims, values)) if dims.len() == 1 => Ok(Some(values)),
        _ => Err(format!("the bias '{name}' is neither an authored int32 DequantizeLinear nor a 1-D float32 constant")),
    }
}

/// The Conv/MatMul/Gemm at `target` with its activation and weight DQs at `x_pos`, `w_pos`,
/// output parameters `y`, no bias.
fn weights_group(ctx: &Ctx, target: usize, op: &str, x_pos: usize, w_pos: usize, y: QParam) -> Result<GemmGroup, String> {
    let x = ctx.qparam(x_pos)?;
    let w = ctx.channel_params(w_pos)?;
    let (dims, codes) = ctx.constant_codes(w_pos)?;
    // The axis of the weight that holds the output channels, which per-axis parameters must follow.
    let (kind, weights, channel_axis) = match op {
        "Conv" => {
            let kernel_size = dims.iter().skip(2).product::<i64>() as usize;
            let groups = ctx.int_attr(target, "group").unwrap_or(1) as usize;
            (GemmKind::Conv { kernel_size, groups }, row_channels(&codes, dims.first().copied().unwrap_or(0) as usize), 0)
        }
        "MatMul" => {
            let [k, n] = dims[..] else { return Err(format!("MatMul weight of rank {} (only 2-D B is modelled)", dims.len())) };
            (GemmKind::MatMul, column_channels(&codes, k as usize, n as usize), 1)
        }
        "Gemm" => {
            let [a, b] = dims[..] else { return Err("Gemm weight is not 2-D".into()) };
            if ctx.int_attr(target, "transA").unwrap_or(0) != 0 {
                return Err("Gemm with transA".into());
            }
            let alpha = ctx.float_attr(target, "alpha").unwrap_or(1.0);
            let trans_b = ctx.int_attr(target, "transB").unwrap_or(0) != 0;
            let weights = if trans_b { row_channels(&codes, a as usize) } else { column_channels(&codes, a as usize, b as usize) };
            (GemmKind::Gemm { alpha }, weights, i64::from(!trans_b))
        }
        other => return Err(format!("{other} is not modelled as an integer kernel")),
    };
    if let Some(axis) = w.axis.map(|a| if a < 0 { a + dims.len() as i64 } else { a })
        && axis != channel_axis
    {
        return Err(format!("weight parameters per-axis along axis {axis}, but the output channels are axis {channel_axis}"));
    }
    Ok(GemmGroup::new(kind, x, w.code, weights, w.scales, w.zero_points, y))
}

/// The verdict on a WeightBiasQuantization of a float bias whose node stays float: the rewrite
/// lists the node, then its Relu/Clip steps and its Q (`optimizer::level1`, `Work::list_float_weight_bias_paths`).
/// `None` for the other WeightBiasQuantization rewrites (the fused group decides those).
pub fn weight_bias_verdict(ctx: &Ctx, r: &Rewrite, contract: Contract) -> Option<Verdict> {
    let (&target, path) = r.nodes.split_first()?;
    let (&q, steps) = path.split_last()?;
    (r.transformer == "WeightBiasQuantization" && ctx.node(q).op_type.as_deref() == Some("QuantizeLinear")).then_some(())?;
    Some(float_path(ctx, target, steps, q).map_or_else(|reason| Verdict::Unknown { reason }, |p| weight_bias::prove(&p, contract)))
}

fn float_path(ctx: &Ctx, target: usize, steps: &[usize], q: usize) -> Result<FloatPath, String> {
    let node = ctx.node(target);
    let op = node.op_type.as_deref().unwrap_or("");
    let dq = |i: usize| {
        let pos = node.input.get(i).and_then(|v| ctx.graph.producer(v)).filter(|&p| ctx.node(p).op_type.as_deref() == Some("DequantizeLinear"));
        pos.ok_or_else(|| format!("input {i} of {} is not an authored DequantizeLinear", ctx.name(target)))
    };
    if op == "Gemm" && ctx.float_attr(target, "beta").unwrap_or(1.0) != 1.0 {
        return Err("Gemm with beta ≠ 1: the float path scales the bias".into());
    }
    let out = ctx.channel_params(q)?;
    let channel_axis = if op == "Gemm" { -1 } else { 1 };
    let rank = ctx.dims(&node.output[0]).map(|d| d.len() as i64);
    let axis = out.axis.map(|a| if a < 0 { rank.map(|r| a + r) } else { Some(a) });
    if let Some(axis) = axis
        && axis != Some(if channel_axis < 0 { rank.unwrap_or(0) - 1 } else { channel_axis })
    {
        return Err(format!("{}: per-axis output parameters not along the output channels", ctx.name(q)));
    }
    let outputs = out.scales.iter().zip(&out.zero_points).map(|(&s, &z)| QParam::new(s, z, out.code)).collect::<Vec<_>>();
    let group = weights_group(ctx, target, op, dq(0)?, dq(1)?, outputs[0])?;
    let bias = float_bias(ctx, target)?.ok_or("no bias")?;
    let clamps = steps.iter().map(|&s| clamp(ctx, s)).collect::<Result<Vec<_>, _>>()?;
    Ok(FloatPath { group, bias, clamps, outputs })
}

/// A Relu, or a Clip with constant (or absent) bounds, as `(lo, hi)`.
fn clamp(ctx: &Ctx, pos: usize) -> Result<weight_bias::Clamp, String> {
    let node = ctx.node(pos);
    match node.op_type.as_deref() {
        Some("Relu") => Ok((0.0, f32::INFINITY)),
        Some("Clip") => {
            let bound = |i: usize, attr: &str, default: f32| match node.input.get(i).filter(|v| !v.is_empty()) {
                Some(v) => ctx
                    .scopes
                    .f32_tensor(ctx.model, v)
                    .and_then(|(_, x)| x.first().copied())
                    .ok_or_else(|| format!("{}: bound '{v}' is not a constant", ctx.name(pos))),
                None => Ok(ctx.float_attr(pos, attr).unwrap_or(default)),
            };
            Ok((bound(1, "min", f32::NEG_INFINITY)?, bound(2, "max", f32::INFINITY)?))
        }
        other => Err(format!("{:?} between the node and its Q", other)),
    }
}

/// The pool's geometry, with the indices of its spatial dims that are symbolic (their size in
/// the geometry is a placeholder 1).
fn pool_geometry(ctx: &Ctx, f: &Fusion) -> Result<(pool::PoolGeometry, Vec<usize>), String> {
    let t = f.target;
    let shape = ctx.dims(&ctx.node(t).input[0]).ok_or("the input's rank is not known")?;
    let spatial: Vec<u64> = shape.iter().skip(2).map(|d| d.map_or(1, |d| d as u64)).collect();
    let symbolic: Vec<usize> = shape.iter().skip(2).enumerate().filter(|(_, d)| d.is_none()).map(|(i, _)| i).collect();
    let n = spatial.len();
    let ints = |name: &str, default: u64, len: usize| -> Vec<u64> {
        ctx.ints_attr(t, name).filter(|v| !v.is_empty()).map(|v| v.iter().map(|&x| x as u64).collect()).unwrap_or(vec![default; len])
    };
    if ctx.node(t).attribute.iter().any(|a| a.name.as_deref() == Some("auto_pad") && a.s.as_deref().is_some_and(|s| s != b"NOTSET")) {
        return Err("auto_pad is not modelled".into());
    }
    let geom = pool::PoolGeometry {
        input: spatial,
        kernel: ints("kernel_shape", 1, n),
        strides: ints("strides", 1, n),
        pads: ints("pads", 0, 2 * n),
        dilations: ints("dilations", 1, n),
        ceil_mode: ctx.int_attr(t, "ceil_mode").unwrap_or(0) != 0,
        count_include_pad: ctx.int_attr(t, "count_include_pad").unwrap_or(0) != 0,
    };
    Ok((geom, symbolic))
}

/// ORT's drop rules run the op on codes: the engine's on-codes obligation (the one qdqc's own
/// on-codes rules use), the scale positive for the monotone ones.
fn round_trip(x: QParam, y: QParam, rule: &str) -> Verdict {
    match on_codes::prove(x, y, rule.ends_with("positive_scale"), true) {
        Verdict::Unknown { reason } => Verdict::Unknown { reason: format!("{rule}: {reason}") },
        v => v,
    }
}

pub fn describe_rewrite(ctx: &Ctx, r: &Rewrite) -> super::Group {
    super::Group {
        rule: r.transformer.to_string(),
        target: r.nodes.first().map(|&p| ctx.name(p)).unwrap_or_default(),
        op: r.nodes.first().and_then(|&p| ctx.node(p).op_type.clone()).unwrap_or_default(),
        fused_op: String::new(),
        nodes: r.nodes.iter().map(|&p| ctx.name(p)).collect(),
        outputs: r
            .nodes
            .iter()
            .filter(|&&p| ctx.node(p).op_type.as_deref() == Some("QuantizeLinear"))
            .filter_map(|&p| ctx.node(p).output.first().cloned())
            .collect(),
        location: r.location.trim().to_string(),
        verdict: Default::default(),
        proof: Default::default(),
        counterexample: Default::default(),
        reason: Default::default(),
        codes: Default::default(),
        real: None,
        near_boundary: None,
        params: None,
    }
}
