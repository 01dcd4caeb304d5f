//! Output shapes the generator computes itself, for values the model's inferred shapes leave
//! unknown (a Reshape whose target is a Shape subgraph the generator folded, and everything after
//! it). Only fixed dims: a symbolic input gives no shape here, and the model's shapes decide.

use super::values::{Extent, Values};
use qdqc_lang::analysis::Dim;
use qdqc_lang::attr::{AttrValue, Attribute};

fn fixed(values: &Values, name: &str) -> Option<Vec<usize>> {
    values.shape(name).ok()?.iter().map(|e| if let Extent::Fixed(d) = e { Some(*d) } else { None }).collect()
}

fn norm(a: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    (-r..r).contains(&a).then(|| a.rem_euclid(r.max(1)) as usize)
}

/// The output shape of `op_type` over its inputs' fixed shapes, when this file knows the op.
pub fn infer(op_type: &str, inputs: &[String], attrs: &[Attribute], values: &Values) -> Option<Vec<usize>> {
    let attr = |name: &str| attrs.iter().find(|a| a.name == name).map(|a| &a.value);
    let int = |name: &str, default: i64| match attr(name) {
        Some(AttrValue::Int(v)) => *v,
        _ => default,
    };
    let ints = |name: &str, i: usize| -> Option<Vec<i64>> {
        match attr(name) {
            Some(AttrValue::Ints(v)) => Some(v.clone()),
            _ => inputs.get(i).filter(|s| !s.is_empty()).and_then(|s| values.constant(s).ok()).map(|c| c.ints),
        }
    };
    let x = fixed(values, inputs.first()?)?;
    let numel: usize = x.iter().product();
    match op_type {
        "QuantizeLinear" | "DequantizeLinear" | "Relu" | "Sigmoid" | "Tanh" | "Exp" | "HardSigmoid" | "HardSwish" | "LeakyRelu" | "Clip" | "Softmax"
        | "Sqrt" | "Reciprocal" | "Neg" | "Abs" | "BatchNormalization" | "LayerNormalization" | "Identity" | "Cast" | "Gelu" | "Erf" => Some(x),
        // x's dims with the axis replaced by the indices' (created Gathers: gather-before-dequantize).
        "Gather" => {
            let a = norm(int("axis", 0), x.len())?;
            let idx = fixed(values, inputs.get(1)?)?;
            Some([&x[..a], &idx[..], &x[a + 1..]].concat())
        }
        "Reshape" => {
            let target = values.constant(inputs.get(1)?).ok()?.ints;
            let mut dims: Vec<i64> =
                target.iter().enumerate().map(|(i, &d)| if d == 0 && int("allowzero", 0) == 0 { x.get(i).map_or(0, |&v| v as i64) } else { d }).collect();
            if let Some(p) = dims.iter().position(|&d| d == -1) {
                let known: i64 = dims.iter().filter(|&&d| d != -1).product();
                dims[p] = if known == 0 { 0 } else { numel as i64 / known };
            }
            let dims: Vec<usize> = dims.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<_>>()?;
            (dims.iter().product::<usize>() == numel).then_some(dims)
        }
        "Flatten" => {
            let a = norm(int("axis", 1), x.len() + 1)?;
            Some(vec![x[..a].iter().product(), x[a..].iter().product()])
        }
        "Squeeze" => {
            let axes: Vec<usize> = ints("axes", 1).unwrap_or_default().iter().map(|&a| norm(a, x.len())).collect::<Option<_>>()?;
            Some(x.iter().enumerate().filter(|(i, d)| if axes.is_empty() { **d != 1 } else { !axes.contains(i) }).map(|(_, d)| *d).collect())
        }
        "Unsqueeze" => {
            let given = ints("axes", 1)?;
            let r = x.len() + given.len();
            let mut axes: Vec<usize> = given.iter().map(|&a| norm(a, r)).collect::<Option<_>>()?;
            axes.sort();
            let mut dims = x;
            for a in axes {
                (a <= dims.len()).then_some(())?;
                dims.insert(a, 1);
            }
            Some(dims)
        }
        "Transpose" => {
            let perm: Vec<usize> = match ints("perm", usize::MAX) {
                Some(p) => p.iter().map(|&a| norm(a, x.len())).collect::<Option<_>>()?,
                None => (0..x.len()).rev().collect(),
            };
            perm.iter().map(|&p| x.get(p).copied()).collect()
        }
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Max" | "Min" | "Expand" | "QLinearAdd" | "QLinearMul" => {
            let y = match op_type {
                "Expand" => values.constant(inputs.get(1)?).ok()?.ints.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<Vec<_>>>()?,
                "QLinearAdd" | "QLinearMul" => fixed(values, inputs.get(3)?)?,
                _ => fixed(values, inputs.get(1)?)?,
            };
            let rank = x.len().max(y.len());
            let at = |s: &[usize], i: usize| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
            (0..rank)
                .map(|i| match (at(&x, i), at(&y, i)) {
                    (a, b) if a == b || b == 1 => Some(a),
                    (1, b) => Some(b),
                    _ => None,
                })
                .collect()
        }
        "Slice" => {
            let c = |i: usize| values.constant(inputs.get(i)?).ok().map(|c| c.ints);
            let (starts, ends) = (c(1)?, c(2)?);
            let axes = inputs.get(3).filter(|s| !s.is_empty()).map_or_else(|| Some((0..starts.len() as i64).collect()), |_| c(3))?;
            let steps = inputs.get(4).filter(|s| !s.is_empty()).map_or_else(|| Some(vec![1; starts.len()]), |_| c(4))?;
            let mut dims = x.clone();
            for (k, &start) in starts.iter().enumerate() {
                let a = norm(*axes.get(k)?, x.len())?;
                let (n, step) = (x[a] as i64, *steps.get(k)?);
                // ONNX Slice: negative from the end, then clamped ([0, n] forward, [−1, n − 1] backward).
                let fix = |v: i64, lo: i64, hi: i64| (if v < 0 { v.saturating_add(n) } else { v }).clamp(lo, hi);
                let (s, e) = if step > 0 { (fix(start, 0, n), fix(*ends.get(k)?, 0, n)) } else { (fix(start, 0, n - 1), fix(*ends.get(k)?, -1, n - 1)) };
                dims[a] = match step {
                    0 => return None,
                    st if st > 0 => ((e - s).max(0) + st - 1) / st,
                    st => ((s - e).max(0) + (-st) - 1) / (-st),
                } as usize;
            }
            Some(dims)
        }
        "Concat" | "QLinearConcat" => {
            let parts: Vec<&String> = if op_type == "Concat" { inputs.iter().collect() } else { inputs.iter().skip(2).step_by(3).collect() };
            let shapes: Vec<Vec<usize>> = parts.iter().map(|p| fixed(values, p)).collect::<Option<_>>()?;
            let mut dims = shapes.first()?.clone();
            let a = norm(int("axis", 0), dims.len())?;
            dims[a] = shapes.iter().map(|s| s.get(a).copied()).sum::<Option<usize>>()?;
            Some(dims)
        }
        "Conv" | "QLinearConv" | "MaxPool" | "AveragePool" | "QLinearAveragePool" => {
            // Input x at 0 (Conv, pools) or 0 (QLinearConv); weights at 1 or 3 give M and the kernel.
            let w = match op_type {
                "Conv" => Some(fixed(values, inputs.get(1)?)?),
                "QLinearConv" => Some(fixed(values, inputs.get(3)?)?),
                _ => None,
            };
            let spatial = x.len().checked_sub(2)?;
            let kernel: Vec<i64> = match &w {
                Some(w) => w.get(2..)?.iter().map(|&k| k as i64).collect(),
                None => ints("kernel_shape", usize::MAX)?,
            };
            let explicit = match attr("auto_pad") {
                None => true,
                Some(AttrValue::Str(s)) => s == "NOTSET",
                Some(_) => false,
            };
            if !explicit || kernel.len() != spatial {
                return None;
            }
            let get = |name: &str, n: usize, d: i64| ints(name, usize::MAX).unwrap_or_else(|| vec![d; n]);
            let (strides, dilations, pads) = (get("strides", spatial, 1), get("dilations", spatial, 1), get("pads", 2 * spatial, 0));
            let ceil = int("ceil_mode", 0) != 0;
            let mut dims = vec![x[0], w.as_ref().map_or(x[1], |w| w[0])];
            for i in 0..spatial {
                let span = x[2 + i] as i64 + pads.get(i)? + pads.get(i + spatial)? - ((kernel[i] - 1) * dilations.get(i)? + 1);
                let s = *strides.get(i)?;
                let n = if ceil { (span + s - 1).div_euclid(s) } else { span.div_euclid(s) } + 1;
                dims.push(usize::try_from(n).ok()?);
            }
            Some(dims)
        }
        "GlobalAveragePool" | "QLinearGlobalAveragePool" | "GlobalMaxPool" => Some(x.iter().enumerate().map(|(i, &d)| if i < 2 { d } else { 1 }).collect()),
        "MatMul" | "QLinearMatMul" => {
            let y = fixed(values, inputs.get(if op_type == "MatMul" { 1 } else { 3 })?)?;
            if x.len() < 2 || y.len() < 2 {
                return None;
            }
            let (lead_x, lead_y) = (&x[..x.len() - 2], &y[..y.len() - 2]);
            let lead = if lead_x.len() >= lead_y.len() { lead_x } else { lead_y };
            let mut out = lead.to_vec();
            out.extend([x[x.len() - 2], y[y.len() - 1]]);
            Some(out)
        }
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" => {
            let axes: Vec<usize> = match ints("axes", 1) {
                Some(a) if !a.is_empty() => a.iter().map(|&v| norm(v, x.len())).collect::<Option<_>>()?,
                _ => (0..x.len()).collect(),
            };
            let keep = int("keepdims", 1) != 0;
            Some(x.iter().enumerate().filter_map(|(i, &d)| if axes.contains(&i) { keep.then_some(1) } else { Some(d) }).collect())
        }
        _ => None,
    }
}

/// Where the model's shape inference named an output dim it lost track of (`unk__3`: after a
/// Resize, or where two inputs' names differ), the bound name it equals, recorded as an alias —
/// only where the op's definition makes the dim equal to an input's named dim: an elementwise op
/// (a broadcast axis is the named dim when every data input there is that name or 1; Q/DQ,
/// QLinearAdd/Mul by their data inputs), axis 0 (the batch) of a convolution, pool or Resize, and a
/// Resize axis scaled by exactly 1. A wrong alias could only make shapes disagree at run time,
/// which every kernel checks; these cannot.
pub fn alias(op_type: &str, inputs: &[String], output: &str, values: &mut Values) {
    let Some(declared) = values.declared(output).map(<[Dim]>::to_vec) else { return };
    let rank = declared.len();
    let extent = |name: &str, axis: usize| -> Option<Extent> {
        let s = values.shape(name).ok()?;
        // Right-aligned: a shorter input broadcasts along the leading axes (extent 1).
        (axis + s.len()).checked_sub(rank).map_or(Some(Extent::Fixed(1)), |i| s.get(i).cloned())
    };
    let data: Vec<&str> = match op_type {
        "QuantizeLinear" | "DequantizeLinear" | "Relu" | "Sigmoid" | "Tanh" | "Exp" | "Log" | "HardSigmoid" | "HardSwish" | "LeakyRelu" | "Clip" | "Sqrt"
        | "Reciprocal" | "Neg" | "Abs" | "BatchNormalization" | "LayerNormalization" | "Identity" | "Softmax" => {
            inputs.iter().take(1).map(String::as_str).collect()
        }
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Max" | "Min" | "Where" => inputs.iter().map(String::as_str).filter(|s| !s.is_empty()).collect(),
        "QLinearAdd" | "QLinearMul" => [0, 3].iter().filter_map(|&i| inputs.get(i)).map(String::as_str).collect(),
        _ => Vec::new(),
    };
    let batch_kept = matches!(
        op_type,
        "Conv"
            | "QLinearConv"
            | "ConvTranspose"
            | "MaxPool"
            | "AveragePool"
            | "QLinearAveragePool"
            | "GlobalAveragePool"
            | "QLinearGlobalAveragePool"
            | "GlobalMaxPool"
            | "Resize"
    );
    let unit_scales: Vec<bool> = match op_type {
        "Resize" => inputs.get(2).and_then(|s| values.constant(s).ok()).map_or(Vec::new(), |c| c.f32_bits.iter().map(|&b| b == 1f32.to_bits()).collect()),
        _ => Vec::new(),
    };
    let mut found = Vec::new();
    for (axis, d) in declared.iter().enumerate() {
        let Dim::Symbolic(name) = d else { continue };
        if values.resolve(name).is_some() {
            continue;
        }
        let same_as_input = (axis == 0 && batch_kept) || unit_scales.get(axis) == Some(&true);
        let named = if same_as_input {
            match inputs.first().and_then(|x| extent(x, axis)) {
                Some(Extent::Named(t)) if rank == values.shape(&inputs[0]).map_or(0, |s| s.len()) => Some(t),
                _ => None,
            }
        } else if !data.is_empty() {
            let at: Option<Vec<Extent>> = data.iter().map(|x| extent(x, axis)).collect();
            let at = at.unwrap_or_default();
            let names: std::collections::BTreeSet<&String> = at.iter().filter_map(|e| if let Extent::Named(t) = e { Some(t) } else { None }).collect();
            let others_one = at.iter().all(|e| matches!(e, Extent::Named(_) | Extent::Fixed(1)));
            match (names.len(), others_one) {
                (1, true) if !at.is_empty() => names.into_iter().next().cloned(),
                _ => None,
            }
        } else {
            None
        };
        if let Some(t) = named {
            found.push((name.clone(), t));
        }
    }
    for (name, t) in found {
        values.alias(&name, &t);
    }
}
