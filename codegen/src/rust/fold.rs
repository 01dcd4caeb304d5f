//! Shape subgraphs evaluated at generation time: `Shape` of a value whose shape is fixed, and the
//! integer ops exporters chain behind it (`Gather`, `Unsqueeze`, `Concat`, `Slice`, `Cast`,
//! arithmetic, `Range`, `Equal`, `Where`, `Expand`) when every input is a
//! constant. The result is a constant like an initializer; the generated code never sees the
//! subgraph. Only integer elements are computed here (index and shape arithmetic, exact in i64);
//! an op this file does not evaluate falls through to `ops.rs`, which refuses it naming the node.
//!
//! | op | evaluation |
//! |---|---|
//! | Shape (`start`, `end`) | the fixed dims of the input (a named dim: not folded) |
//! | Gather, Slice, Concat, Unsqueeze, Squeeze, Reshape, Identity, Expand | index arithmetic on the elements |
//! | Cast (to int32/int64/f32 from an integer) | the same values (f32: rounded to nearest) |
//! | Add, Sub, Mul, Div (truncating, as ONNX on integers), Equal, Where | element-wise with broadcasting |
//! | Range (integers; f32 as ONNX Runtime: `v += delta`) | as ONNX defines them |
//!
//! ConstantOfShape (a tensor attribute) is evaluated in `mod.rs`.

use super::values::{Constant, Values};
use qdqc_lang::attr::{AttrValue, Attribute};
use qdqc_lang::onnx::DataType;

/// The folded value of a node, `None` when it is not a foldable integer computation.
pub fn fold(op_type: &str, inputs: &[String], attrs: &[Attribute], values: &Values) -> Option<Constant> {
    let attr = |name: &str| attrs.iter().find(|a| a.name == name).map(|a| &a.value);
    let int = |name: &str, default: i64| match attr(name) {
        Some(AttrValue::Int(v)) => *v,
        _ => default,
    };
    if op_type == "Shape" {
        let shape = values.shape(inputs.first()?).ok()?;
        let dims: Option<Vec<i64>> = shape.iter().map(|e| if let super::values::Extent::Fixed(d) = e { Some(*d as i64) } else { None }).collect();
        let dims = dims?;
        let r = dims.len() as i64;
        let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let (s, e) = (clamp(int("start", 0)), clamp(int("end", r)));
        return Some(ints(DataType::Int64, vec![e.saturating_sub(s)], dims[s..e.max(s)].to_vec()));
    }
    let present: Vec<&String> = inputs.iter().filter(|s| !s.is_empty()).collect();
    if present.is_empty() || !present.iter().all(|i| values.is_constant(i)) {
        return None;
    }
    // An optional input left empty keeps its position as an empty tensor.
    let c: Vec<Constant> =
        inputs.iter().map(|i| if i.is_empty() { Some(ints(DataType::Int64, vec![0], vec![])) } else { values.constant(i).ok() }).collect::<Option<_>>()?;
    let integer = |k: &Constant| matches!(k.dtype, DataType::Int64 | DataType::Int32 | DataType::Bool);
    match op_type {
        "Cast" => {
            let to = DataType::try_from(int("to", 0) as i32).ok()?;
            match to {
                DataType::Int64 | DataType::Int32 if integer(&c[0]) => Some(ints(to, c[0].dims.clone(), c[0].ints.clone())),
                // Integer to f32: each value rounded to nearest, as ONNX Runtime's static_cast.
                DataType::Float if integer(&c[0]) => {
                    Some(Constant { dtype: to, dims: c[0].dims.clone(), ints: Vec::new(), f32_bits: c[0].ints.iter().map(|&v| (v as f32).to_bits()).collect() })
                }
                _ => None,
            }
        }
        // ONNX Runtime's float Range: `count = ⌈(limit − start)/delta⌉` (f64), then `v = start`,
        // `v += delta` per element in f32.
        "Range" if c.iter().all(|k| k.dtype == DataType::Float && k.f32_bits.len() == 1) => {
            let [s, l, d] = [0, 1, 2].map(|i| f32::from_bits(c[i].f32_bits[0]));
            if d == 0.0 {
                return None;
            }
            let count = (f64::from(l - s) / f64::from(d)).ceil().max(0.0) as usize;
            let mut v = s;
            let mut bits = Vec::with_capacity(count);
            for _ in 0..count {
                bits.push(v.to_bits());
                v += d;
            }
            Some(Constant { dtype: DataType::Float, dims: vec![count], ints: Vec::new(), f32_bits: bits })
        }
        _ if !c.iter().all(integer) => None,
        "Identity" => Some(c[0].clone()),
        "Reshape" => {
            let total = c[0].ints.len();
            let mut dims: Vec<i64> = c[1].ints.iter().enumerate().map(|(i, &d)| if d == 0 { c[0].dims.get(i).map_or(0, |&x| x as i64) } else { d }).collect();
            if let Some(p) = dims.iter().position(|&d| d == -1) {
                let known: i64 = dims.iter().filter(|&&d| d != -1).product();
                dims[p] = if known == 0 { 0 } else { total as i64 / known };
            }
            let dims: Vec<usize> = dims.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<_>>()?;
            (dims.iter().product::<usize>() == total).then(|| ints(c[0].dtype, dims, c[0].ints.clone()))
        }
        "Unsqueeze" | "Squeeze" => {
            let axes: Vec<i64> = match attr("axes") {
                Some(AttrValue::Ints(a)) => a.clone(),
                _ => c.get(1).map(|k| k.ints.clone()).unwrap_or_default(),
            };
            let mut dims = c[0].dims.clone();
            if op_type == "Unsqueeze" {
                let r = (dims.len() + axes.len()) as i64;
                let mut a: Vec<usize> = axes.iter().map(|&x| (if x < 0 { x + r } else { x }) as usize).collect();
                a.sort();
                for x in a {
                    if x > dims.len() {
                        return None;
                    }
                    dims.insert(x, 1);
                }
            } else {
                let r = dims.len() as i64;
                let a: Vec<usize> = axes.iter().map(|&x| (if x < 0 { x + r } else { x }) as usize).collect();
                dims = dims.iter().enumerate().filter(|(i, d)| !(if a.is_empty() { **d == 1 } else { a.contains(i) })).map(|(_, d)| *d).collect();
            }
            Some(ints(c[0].dtype, dims, c[0].ints.clone()))
        }
        "Gather" => {
            let r = c[0].dims.len() as i64;
            let a = int("axis", 0);
            let axis = (if a < 0 { a + r } else { a }) as usize;
            if axis >= c[0].dims.len() {
                return None;
            }
            let out = gather(&c[0].ints, &c[0].dims, axis, &c[1].ints)?;
            let dims = [&c[0].dims[..axis], &c[1].dims[..], &c[0].dims[axis + 1..]].concat();
            Some(ints(c[0].dtype, dims, out))
        }
        "Concat" => {
            let r = c[0].dims.len() as i64;
            let a = int("axis", 0);
            let axis = (if a < 0 { a + r } else { a }) as usize;
            // Integer shape tensors are 1-D (or scalars unsqueezed): concatenation along axis 0.
            if axis != 0 || c.iter().any(|k| k.dims.len() != 1) {
                return None;
            }
            let v: Vec<i64> = c.iter().flat_map(|k| k.ints.iter().copied()).collect();
            Some(ints(c[0].dtype, vec![v.len()], v))
        }
        "Slice" => {
            if c[0].dims.len() != 1 {
                return None;
            }
            let n = c[0].ints.len() as i64;
            let (start, end) = (c[1].ints.first().copied()?, c[2].ints.first().copied()?);
            let step = c.get(4).and_then(|k| k.ints.first().copied()).unwrap_or(1);
            if step != 1 || c.get(3).is_some_and(|k| k.ints.iter().any(|&a| a != 0 && a != -1)) {
                return None;
            }
            let clamp = |v: i64| (if v < 0 { v + n } else { v }).clamp(0, n) as usize;
            let (s, e) = (clamp(start), clamp(end));
            let v = c[0].ints[s..e.max(s)].to_vec();
            Some(ints(c[0].dtype, vec![v.len()], v))
        }
        "Add" | "Sub" | "Mul" | "Div" | "Equal" | "Max" | "Min" => {
            let (dims, pairs) = broadcast(&c[0], &c[1])?;
            let v: Vec<i64> = pairs
                .into_iter()
                .map(|(x, y)| match op_type {
                    "Add" => x.checked_add(y),
                    "Sub" => x.checked_sub(y),
                    "Mul" => x.checked_mul(y),
                    "Div" => x.checked_div(y),
                    "Max" => Some(x.max(y)),
                    "Min" => Some(x.min(y)),
                    _ => Some(i64::from(x == y)),
                })
                .collect::<Option<_>>()?;
            Some(ints(if op_type == "Equal" { DataType::Bool } else { c[0].dtype }, dims, v))
        }
        "Where" => {
            let (dims, cond) = broadcast(&c[0], &c[1])?;
            let (dims2, xy) = broadcast(&c[1], &c[2])?;
            if dims != dims2 || c[0].dims != dims || c[1].dims != dims {
                return None;
            }
            let v = cond.iter().zip(xy).map(|((b, _), (x, y))| if *b != 0 { x } else { y }).collect();
            Some(ints(c[1].dtype, dims, v))
        }
        "Range" => {
            let (s, l, d) = (c[0].ints.first().copied()?, c[1].ints.first().copied()?, c[2].ints.first().copied()?);
            if d == 0 {
                return None;
            }
            let count = ((l - s) as f64 / d as f64).ceil().max(0.0) as usize;
            let v: Vec<i64> = (0..count as i64).map(|k| s + k * d).collect();
            Some(ints(c[0].dtype, vec![v.len()], v))
        }
        "Expand" => {
            let target: Vec<usize> = c[1].ints.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<_>>()?;
            let shape = ints(DataType::Int64, target.clone(), vec![0; target.iter().product()]);
            let (dims, pairs) = broadcast(&c[0], &shape)?;
            Some(ints(c[0].dtype, dims, pairs.into_iter().map(|(x, _)| x).collect()))
        }
        _ => None,
    }
}

fn ints(dtype: DataType, dims: Vec<usize>, ints: Vec<i64>) -> Constant {
    Constant { dtype, dims, ints, f32_bits: Vec::new() }
}

/// ONNX Gather along `axis` (a negative index counts from the end; out of range: not folded).
fn gather(x: &[i64], shape: &[usize], axis: usize, idx: &[i64]) -> Option<Vec<i64>> {
    let (outer, d, inner) = (shape[..axis].iter().product::<usize>(), shape[axis], shape[axis + 1..].iter().product::<usize>());
    let mut out = Vec::new();
    for o in 0..outer {
        for &i in idx {
            let i = if i < 0 { i + d as i64 } else { i };
            let i = usize::try_from(i).ok().filter(|&i| i < d)?;
            out.extend_from_slice(&x[(o * d + i) * inner..][..inner]);
        }
    }
    Some(out)
}

/// The output dims of a broadcast and its element pairs.
type Pairs = (Vec<usize>, Vec<(i64, i64)>);

/// The numpy broadcast of two integer constants.
fn broadcast(a: &Constant, b: &Constant) -> Option<Pairs> {
    let rank = a.dims.len().max(b.dims.len());
    let at = |d: &[usize], i: usize| if i + d.len() >= rank { d[i + d.len() - rank] } else { 1 };
    let dims: Vec<usize> = (0..rank)
        .map(|i| match (at(&a.dims, i), at(&b.dims, i)) {
            (x, y) if x == y || y == 1 => Some(x),
            (1, y) => Some(y),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let n: usize = dims.iter().product();
    let index = |d: &[usize], mut flat: usize| {
        let mut idx = 0;
        let mut stride = 1;
        for i in (0..rank).rev() {
            let o = flat % dims[i];
            flat /= dims[i];
            let e = at(d, i);
            if e != 1 {
                idx += o * stride;
            }
            stride *= e;
        }
        idx
    };
    let pairs = (0..n).map(|f| (a.ints[index(&a.dims, f)], b.ints[index(&b.dims, f)])).collect();
    Some((dims, pairs))
}
