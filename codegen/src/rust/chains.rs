//! Unary chains on codes as one table: `DequantizeLinear → f32 map(s) → QuantizeLinear`, every
//! step element-wise and per tensor, is a function of one code. The generated code evaluates the
//! chain once per code (256 values, at `Model::new`) with the very kernels the unfused ops call,
//! then maps the tensor through the table (`Kind::UnaryTable`).
//!
//! Why the bits cannot change: each step computes every element from that element alone (the
//! f32 maps, `float::unary`'s functions, per-tensor Q and DQ), and every kernel path gives the
//! same bits for an element wherever it sits in the buffer (the kernel crate's path-identity
//! tests). So the table's entry for code `x` is what the unfused chain writes for an element `x`.
//!
//! | condition | why |
//! |---|---|
//! | the Q and the DQ have one scale and one zero point | the table is indexed by the code alone |
//! | the DQ reads u8/i8 codes | 256 entries |
//! | every step is `FloatUnary`, `FloatMap`, or a `FloatBinary` whose second operand is an f32 constant of one element stored as f32 (not dequantized codes) | element-wise with one varying input; the constant is the same for every element |
//! | each step's input and the Q's input are read by nothing else and are not graph outputs | the float values disappear; the DQ stays if something else reads it |
//!
//! A QLinearAdd/Mul of a code tensor `x` with such a table of the same `x` (QDQ SiLU:
//! `x · sigmoid(x)`) is a function of `x` too: its table is `Binary::code(x, T[x])`, the
//! function every path of `Binary::apply` computes per pair (the Rust target's P1). The shapes
//! agree (the table keeps its input's), so no broadcasting is lost.

use super::ops::{Kind, Op, Pair, Q};
use super::values::{Elem, Values};
use std::collections::{BTreeMap, BTreeSet};

/// `ops` with every chain the table above admits replaced by one `Kind::UnaryTable` op at the
/// place of its Q, and the DQs nothing reads any more removed. `elems`: element type of every
/// value; `keep`: graph outputs.
/// `scalar`: the f32 bits of a value that is a constant of one f32 element stored as f32
/// ([`scalar`] of the value table).
pub fn tabulate(ops: Vec<Op>, scalar: &dyn Fn(&str) -> Option<u32>, elems: &BTreeMap<String, Elem>, keep: &BTreeSet<String>) -> Vec<Op> {
    let (producer, readers) = uses(&ops);
    let only_reader = |v: &str| readers.get(v) == Some(&1) && !keep.contains(v);
    // Q index → (DQ index, steps in program order, the DQ's and the Q's parameters).
    let mut chains: BTreeMap<usize, (usize, Vec<Kind>, Q, Q)> = BTreeMap::new();
    // The steps' indices.
    let mut gone: BTreeSet<usize> = BTreeSet::new();
    for (qi, q) in ops.iter().enumerate() {
        let Kind::Quantize { scales, zps, .. } = &q.kind else { continue };
        let Some(y) = per_tensor(scales, zps) else { continue };
        let mut steps = Vec::new();
        let mut at = q.inputs[0].as_str();
        let dq = loop {
            let Some(&pi) = producer.get(at) else { break None };
            match &ops[pi].kind {
                Kind::FloatUnary { .. } | Kind::FloatMap { .. } if only_reader(at) => {
                    steps.push((pi, ops[pi].kind.clone()));
                    at = ops[pi].inputs[0].as_str();
                }
                Kind::FloatBinary { op } if only_reader(at) && ops[pi].inputs.len() == 2 => {
                    let Some(bits) = scalar(&ops[pi].inputs[1]) else { break None };
                    steps.push((pi, Kind::FloatScalar { op, bits }));
                    at = ops[pi].inputs[0].as_str();
                }
                // The chain's first f32 value may be read elsewhere too: the DQ then stays.
                Kind::Dequantize { scales, zps, .. } if !steps.is_empty() => break per_tensor(scales, zps).map(|x| (pi, x)),
                _ => break None,
            }
        };
        let Some((di, x)) = dq else { continue };
        if !matches!(elems.get(ops[di].inputs[0].as_str()), Some(Elem::U8 | Elem::I8)) {
            continue;
        }
        steps.reverse();
        gone.extend(steps.iter().map(|(s, _)| *s));
        chains.insert(qi, (di, steps.into_iter().map(|(_, k)| k).collect(), x, y));
    }
    if chains.is_empty() {
        return ops;
    }
    // A DQ read only by the chains that absorb it goes too.
    let mut absorbed: BTreeMap<usize, usize> = BTreeMap::new();
    for (di, ..) in chains.values() {
        *absorbed.entry(*di).or_default() += 1;
    }
    let dropped_dq: BTreeSet<usize> =
        absorbed.iter().filter(|&(&di, &n)| readers.get(ops[di].output.as_str()) == Some(&n) && !keep.contains(&ops[di].output)).map(|(&di, _)| di).collect();
    let mut table: BTreeMap<usize, Op> = chains
        .into_iter()
        .map(|(qi, (di, steps, x, y))| {
            let q = &ops[qi];
            let kind = Kind::UnaryTable { x, steps, y, pair: None };
            (qi, Op { node: q.node.clone(), kind, inputs: vec![ops[di].inputs[0].clone()], output: q.output.clone(), elem: q.elem })
        })
        .collect();
    let ops: Vec<Op> =
        ops.into_iter().enumerate().filter(|(i, _)| !gone.contains(i) && !dropped_dq.contains(i)).map(|(i, op)| table.remove(&i).unwrap_or(op)).collect();
    pair(ops, keep)
}

/// Every QLinearAdd/Mul of `x` with a table of `x` (read by nothing else) as one table.
fn pair(ops: Vec<Op>, keep: &BTreeSet<String>) -> Vec<Op> {
    let (producer, readers) = uses(&ops);
    // Binary index → table index.
    let mut pairs: BTreeMap<usize, (usize, bool)> = BTreeMap::new();
    for (bi, op) in ops.iter().enumerate() {
        if !matches!(op.kind, Kind::Binary { .. }) || op.inputs.len() != 2 {
            continue;
        }
        for (t, source, source_first) in [(1, 0, true), (0, 1, false)] {
            let (tv, sv) = (op.inputs[t].as_str(), op.inputs[source].as_str());
            if let Some(&ti) = producer.get(tv)
                && matches!(ops[ti].kind, Kind::UnaryTable { pair: None, .. })
                && ops[ti].inputs[0] == sv
                && readers.get(tv) == Some(&1)
                && !keep.contains(tv)
            {
                pairs.insert(bi, (ti, source_first));
                break;
            }
        }
    }
    if pairs.is_empty() {
        return ops;
    }
    let gone: BTreeSet<usize> = pairs.values().map(|&(ti, _)| ti).collect();
    let mut fused: BTreeMap<usize, Op> = BTreeMap::new();
    for (&bi, &(ti, source_first)) in &pairs {
        let (b, t) = (&ops[bi], &ops[ti]);
        if let (Kind::Binary { mul, a, b: qb, y }, Kind::UnaryTable { x, steps, y: ty, .. }) = (&b.kind, &t.kind) {
            let pair = Pair { mul: *mul, a: *a, b: *qb, y: *y, source_first, mid: t.elem };
            let kind = Kind::UnaryTable { x: *x, steps: steps.clone(), y: *ty, pair: Some(pair) };
            fused.insert(bi, Op { node: b.node.clone(), kind, inputs: t.inputs.clone(), output: b.output.clone(), elem: b.elem });
        }
    }
    ops.into_iter().enumerate().filter(|(i, _)| !gone.contains(i)).map(|(i, op)| fused.remove(&i).unwrap_or(op)).collect()
}

/// The op writing each value, and how many op inputs read it.
fn uses(ops: &[Op]) -> (BTreeMap<&str, usize>, BTreeMap<&str, usize>) {
    let producer = ops.iter().enumerate().map(|(i, op)| (op.output.as_str(), i)).collect();
    let mut readers: BTreeMap<&str, usize> = BTreeMap::new();
    for x in ops.iter().flat_map(|op| &op.inputs) {
        *readers.entry(x.as_str()).or_default() += 1;
    }
    (producer, readers)
}

/// The f32 bits of `name` where it is a constant of one f32 element stored as f32.
pub fn scalar(values: &Values, name: &str) -> Option<u32> {
    if !values.is_constant(name) || values.is_dequantized(name) {
        return None;
    }
    match values.constant(name).ok()?.f32_bits[..] {
        [bits] => Some(bits),
        _ => None,
    }
}

/// The one scale and zero point of a per-tensor Q/DQ.
fn per_tensor(scales: &[u32], zps: &[i64]) -> Option<Q> {
    match (scales, zps) {
        ([scale], [zp]) => Some(Q { scale: *scale, zero_point: i32::try_from(*zp).ok()? }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: Q = Q { scale: 0x3c00_0000, zero_point: 128 };
    const Y: Q = Q { scale: 0x3b80_8081, zero_point: 0 };

    fn op(kind: Kind, inputs: &[&str], output: &str, elem: Elem) -> Op {
        Op { node: output.to_string(), kind, inputs: inputs.iter().map(|s| s.to_string()).collect(), output: output.to_string(), elem }
    }
    fn dq(x: &str, out: &str, scales: Vec<u32>) -> Op {
        op(Kind::Dequantize { axis: 1, zps: vec![128; scales.len()], scales }, &[x], out, Elem::F32)
    }
    fn sigmoid(x: &str, out: &str) -> Op {
        op(Kind::FloatUnary { function: "Sigmoid" }, &[x], out, Elem::F32)
    }
    fn q(x: &str, out: &str) -> Op {
        op(Kind::Quantize { axis: 0, scales: vec![Y.scale], zps: vec![0] }, &[x], out, Elem::U8)
    }
    fn elems() -> BTreeMap<String, Elem> {
        [("x", Elem::U8)].into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
    fn kinds(ops: &[Op]) -> Vec<String> {
        ops.iter()
            .map(|o| match &o.kind {
                Kind::UnaryTable { steps, pair, .. } => {
                    format!("table({} steps{}) {} <- {}", steps.len(), if pair.is_some() { ", pair" } else { "" }, o.output, o.inputs.join(","))
                }
                k => format!("{} {} <- {}", format!("{k:?}").split([' ', '{']).next().unwrap_or("?"), o.output, o.inputs.join(",")),
            })
            .collect()
    }
    fn keep(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_dequantize_sigmoid_quantize_chain_is_one_table_of_its_codes() {
        let ops = vec![dq("x", "f", vec![X.scale]), sigmoid("f", "s"), q("s", "y")];
        assert_eq!(kinds(&tabulate(ops, &|_| None, &elems(), &keep(&["y"]))), ["table(1 steps) y <- x"]);
    }

    #[test]
    fn a_float_value_the_graph_outputs_or_another_op_reads_keeps_the_chain() {
        let ops = vec![dq("x", "f", vec![X.scale]), sigmoid("f", "s"), q("s", "y")];
        assert_eq!(kinds(&tabulate(ops.clone(), &|_| None, &elems(), &keep(&["y", "s"]))).len(), 3);
        let mut twice = ops;
        twice.push(op(Kind::FloatUnary { function: "Tanh" }, &["s"], "t", Elem::F32));
        assert_eq!(kinds(&tabulate(twice, &|_| None, &elems(), &keep(&["y", "t"]))).len(), 4);
    }

    #[test]
    fn a_binary_op_by_a_constant_scalar_is_a_step_and_by_anything_else_ends_the_chain() {
        let pow = |c: &str| op(Kind::FloatBinary { op: "Pow" }, &["f", c], "p", Elem::F32);
        let three = |v: &str| (v == "three").then_some(3f32.to_bits());
        let out = tabulate(vec![dq("x", "f", vec![X.scale]), pow("three"), q("p", "y")], &three, &elems(), &keep(&["y"]));
        assert_eq!(kinds(&out), ["table(1 steps) y <- x"]);
        assert!(
            matches!(&out[0].kind, Kind::UnaryTable { steps, .. } if matches!(steps[..], [Kind::FloatScalar { op: "Pow", bits }] if bits == 3f32.to_bits()))
        );
        let by_tensor = tabulate(vec![dq("x", "f", vec![X.scale]), pow("w"), q("p", "y")], &three, &elems(), &keep(&["y"]));
        assert_eq!(kinds(&by_tensor).len(), 3);
    }

    #[test]
    fn a_per_axis_dequantize_keeps_the_chain() {
        let ops = vec![dq("x", "f", vec![X.scale, X.scale]), sigmoid("f", "s"), q("s", "y")];
        assert_eq!(kinds(&tabulate(ops, &|_| None, &elems(), &keep(&["y"]))).len(), 3);
    }

    #[test]
    fn a_dequantize_something_else_reads_stays() {
        let ops = vec![dq("x", "f", vec![X.scale]), sigmoid("f", "s"), q("s", "y"), op(Kind::FloatUnary { function: "Exp" }, &["f"], "e", Elem::F32)];
        assert_eq!(kinds(&tabulate(ops, &|_| None, &elems(), &keep(&["y", "e"]))), ["Dequantize f <- x", "table(1 steps) y <- x", "FloatUnary e <- f"]);
    }

    #[test]
    fn silu_on_codes_is_one_table_with_its_multiply() {
        let mul = Kind::Binary { mul: true, a: X, b: Y, y: X };
        let ops = vec![dq("x", "f", vec![X.scale]), sigmoid("f", "s"), q("s", "t"), op(mul, &["x", "t"], "y", Elem::U8)];
        let out = tabulate(ops, &|_| None, &elems(), &keep(&["y"]));
        assert_eq!(kinds(&out), ["table(1 steps, pair) y <- x"]);
        assert!(matches!(out[0].kind, Kind::UnaryTable { pair: Some(Pair { mul: true, source_first: true, mid: Elem::U8, .. }), .. }));
    }

    #[test]
    fn a_multiply_whose_table_reads_other_codes_is_left_alone() {
        let mul = Kind::Binary { mul: true, a: X, b: Y, y: X };
        let ops = vec![dq("x", "f", vec![X.scale]), sigmoid("f", "s"), q("s", "t"), op(mul, &["z", "t"], "y", Elem::U8)];
        assert_eq!(kinds(&tabulate(ops, &|_| None, &elems(), &keep(&["y"]))), ["table(1 steps) t <- x", "Binary y <- z,t"]);
    }
}
