//! `groups.json` beside the generated sources: every op of the program that writes codes, with
//! what an independent evaluator needs to recompute its output from its input codes (the harness's
//! `--intermediates` archive holds both): the kind, tensor names, scales as f32 bit patterns, zero
//! points, window attributes, and the constants it reads. `tests/oracle/test_rust_exact_groups.py`
//! recomputes every group exactly from it (contract §2.3, `real`).
//!
//! | field | why |
//! |---|---|
//! | `kind` | one evaluator per kernel family (`conv`, `gemm`, `add`, `mul`, `average_pool`, …); `quantize` (f32 → codes) is listed so that every code tensor has a producer here, but is no integer group |
//! | scales as `u32` bits | an f32 scale is an exact dyadic rational only if no decimal text touches it |
//! | constants by name, `source` | authored initializers are referenced (the evaluator reads them from the model itself, not from qdqc); constants qdqc made (created, folded) carry their elements |
//!
//! Keys are sorted (`serde_json`'s map) and ops keep the program's order: same input, same bytes.

use super::ops::{Integer, Kind, Op, Q, Window};
use super::values::{Elem, Values};
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn elem(e: Elem) -> &'static str {
    match e {
        Elem::F32 => "f32",
        Elem::U8 => "u8",
        Elem::I8 => "i8",
        Elem::I32 => "i32",
        Elem::I64 => "i64",
    }
}

fn q(q: Q) -> Value {
    json!({ "scale": q.scale, "zero_point": q.zero_point })
}

fn window(w: &Window) -> Value {
    json!({ "kernel": w.kernel, "strides": w.strides, "dilations": w.dilations, "pads": w.pads, "ceil_mode": w.ceil_mode })
}

fn integer(int: &Integer) -> Value {
    json!({
        "weights": int.weights,
        "weight_elem": elem(int.weight_elem),
        "weight_zero_points": int.weight_zps,
        "weight_scales": int.weight_scales,
        "x": q(int.x),
        "y": q(int.y),
        "bias": int.bias,
        "bias_scales": int.bias_scales,
        "channels": int.channels,
    })
}

/// The parameters of one op's kind, or `None` for a kind this file does not describe yet.
fn params(kind: &Kind) -> Option<(&'static str, Value)> {
    Some(match kind {
        Kind::Quantize { axis, scales, zps } => ("quantize", json!({ "axis": axis, "scales": scales, "zero_points": zps })),
        // f32 in, scales made at run time by the graph's own ops: no fused group to evaluate.
        Kind::QuantizeBy { axis, block } => ("quantize_by", json!({ "axis": axis, "block": block })),
        Kind::CastToCode => ("cast_to_code", json!({})),
        Kind::Conv { int, groups, window: w } => ("conv", json!({ "int": integer(int), "groups": groups, "window": window(w) })),
        Kind::Gemm { int, k, n, trans_b } => ("gemm", json!({ "int": integer(int), "k": k, "n": n, "trans_b": trans_b })),
        Kind::Binary { mul, a, b, y } => (if *mul { "mul" } else { "add" }, json!({ "a": q(*a), "b": q(*b), "y": q(*y) })),
        Kind::MatMulCodes { a, b, y } => ("matmul", json!({ "a": q(*a), "b": q(*b), "y": q(*y) })),
        Kind::SoftmaxCodes { x, y } => ("softmax_codes", json!({ "x": q(*x), "y": q(*y) })),
        Kind::AveragePool { window: w, count_include_pad, x, y } => {
            ("average_pool", json!({ "window": window(w), "count_include_pad": count_include_pad, "x": q(*x), "y": q(*y) }))
        }
        Kind::GlobalAveragePool { x, y } => ("global_average_pool", json!({ "x": q(*x), "y": q(*y) })),
        Kind::MaxPool { window: w } => ("max_pool", json!({ "window": window(w) })),
        Kind::Concat { axis, requant } => {
            let rq: Vec<Value> = requant.iter().map(|r| r.map_or(Value::Null, |(x, y)| json!({ "x": q(x), "y": q(y) }))).collect();
            ("concat", json!({ "axis": axis, "requant": rq }))
        }
        Kind::Reshape => ("reshape", json!({})),
        Kind::Lut { table } => ("lut", json!({ "table": table })),
        Kind::UnaryTable { x, steps, y, pair } => {
            let steps: Vec<String> = steps.iter().map(super::emit::step_name).collect();
            let pair = pair.map(|p| json!({ "mul": p.mul, "a": q(p.a), "b": q(p.b), "y": q(p.y), "source_first": p.source_first }));
            ("unary_table", json!({ "x": q(*x), "steps": steps, "y": q(*y), "pair": pair }))
        }
        Kind::CodeTable { steps } => {
            let steps: Vec<Value> = steps
                .iter()
                .map(|s| {
                    let (kind, p) = params(&s.kind).unwrap_or(("unlisted", json!({})));
                    json!({ "node": s.node, "kind": kind, "params": p, "args": s.args.iter().map(arg).collect::<Vec<_>>() })
                })
                .collect();
            ("code_table", json!({ "steps": steps }))
        }
        Kind::Resize { linear: false, transform, nearest, scales, sizes } => {
            ("resize_nearest", json!({ "transform": transform, "nearest": nearest, "scales": scales, "sizes": sizes }))
        }
        Kind::Transpose { perm } => ("transpose", json!({ "perm": perm })),
        Kind::Slice { starts, ends, axes, steps } => ("slice", json!({ "starts": starts, "ends": ends, "axes": axes, "steps": steps })),
        Kind::Expand => ("expand", json!({})),
        Kind::Gather { axis, indices, indices_shape } => ("gather", json!({ "axis": axis, "indices": indices, "indices_shape": indices_shape })),
        Kind::GatherBy { axis } => ("gather", json!({ "axis": axis })),
        _ => return None,
    })
}

/// A code table step's operand: "source", the index of an earlier step, or a constant code.
fn arg(a: &super::code_sets::Arg) -> Value {
    use super::code_sets::Arg;
    match a {
        Arg::Source => json!("source"),
        Arg::Step(j) => json!(j),
        Arg::Code(c, e) => json!({ "code": c, "elem": e.rust() }),
    }
}

/// The constants an op reads: its constant inputs, weights and bias.
fn constants<'a>(op: &'a Op, values: &Values) -> Vec<&'a str> {
    let mut names: Vec<&str> = op.inputs.iter().map(String::as_str).filter(|n| values.is_constant(n)).collect();
    if let Kind::Conv { int, .. } | Kind::Gemm { int, .. } = &op.kind {
        names.push(&int.weights);
        names.extend(int.bias.as_deref());
    }
    names
}

/// `groups.json`: the program's code-writing ops and the constants they read.
pub fn groups_json(ops: &[Op], values: &Values, inputs: &[(String, Elem)], source: &str) -> Result<Vec<u8>, String> {
    let mut groups = Vec::new();
    let mut consts = BTreeMap::new();
    // Codes are u8/i8; f32 and integer index tensors (i32/i64) are no group's output.
    for op in ops.iter().filter(|op| matches!(op.elem, Elem::U8 | Elem::I8)) {
        // A kind with no entry yet is listed as `unlisted`: the evaluator fails on it, the compile does not.
        let (kind, p) = params(&op.kind).unwrap_or(("unlisted", json!({})));
        for name in constants(op, values) {
            let c = values.constant(name)?;
            let mut entry = json!({ "dtype": c.dtype.as_str_name(), "dims": c.dims, "source": values.origin(name) });
            if values.origin(name) != "initializer" {
                entry["values"] = if c.f32_bits.is_empty() { json!(c.ints) } else { json!(c.f32_bits) };
            }
            consts.insert(name.to_string(), entry);
        }
        groups.push(json!({ "node": op.node, "kind": kind, "inputs": op.inputs, "output": op.output, "elem": elem(op.elem), "params": p }));
    }
    let inputs: Vec<Value> = inputs.iter().map(|(n, e)| json!({ "name": n, "elem": elem(*e) })).collect();
    // Float copies of quantized constants the program holds (DequantizeLinear folded at
    // generation time, read by a float op whose kernel does not decode codes, `Kind::decodes`):
    // the contract's "no float copy of a quantized weight" is this list being empty.
    let mut float_copies = BTreeMap::new();
    for op in ops {
        for (_, name) in op.inputs.iter().enumerate().filter(|(i, n)| values.is_dequantized(n) && !op.kind.decodes(*i)) {
            let c = values.constant(name)?;
            float_copies.insert(name.clone(), json!({ "elements": c.f32_bits.len(), "read_by": op.node }));
        }
    }
    let doc = json!({ "format": 1, "source": source, "inputs": inputs, "groups": groups, "constants": consts, "float_copies": float_copies });
    let mut text = serde_json::to_string(&doc).map_err(|e| e.to_string())?;
    text.push('\n');
    Ok(text.into_bytes())
}
