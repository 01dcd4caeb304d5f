//! Connected sets of ops on 8-bit codes that compute one function of one code tensor, as one
//! 256-entry lookup (`Kind::CodeTable`): QDQ tanh-GELU after quantize_static (`x³`, `·a`,
//! `x + ·`, `·b`, Tanh, `1 + ·`, `x/2 · ·`: eight passes over the tensor), SiLU's and hardswish's
//! `x · f(x)` diamonds, a requantized scale then a table.
//!
//! Obligation: for every element, the table's entry at its source code is the code the unfused
//! ops write there. The generated `Model::new` builds the table by running the set's ops, in
//! order, with the same kernel functions the unfused code calls (`Binary::apply` — what
//! `entry::binary_*` instantiates — with each operand's own shape, `apply_lut` through each
//! table, the chains' tables built as `chains.rs` builds them), on the 256 source codes: the
//! kernels are deterministic functions of an element's codes (the same bits on every ISA path and
//! at every position: the kernel crate's invariant, tested by its suites), so each step's entry
//! for code `x` is what the unfused step writes for an element whose source code is `x`.
//!
//! | condition | why |
//! |---|---|
//! | [`code_ops`]: every op is a table (`UnaryTable`, `Lut`) or a QLinearAdd/Mul writing 8-bit codes | ops whose kernels compute an output element from the same element of their inputs alone |
//! | [`constant_operands`]: an operand that is not varying is a constant of one 8-bit code | the same for every element: no position-dependent constant, and the broadcast keeps the varying operand's element order |
//! | [`one_source`]: the varying operands of every op trace back to one 8-bit code tensor, and two varying operands of one op have the same shape | the set is a function of one code; equal shapes, so the elements paired are those at the same position |
//! | [`same_extent`]: every op's output has its varying operands' element count | no broadcasting against the scalar adds elements (the table keeps its input's layout) |
//! | [`internal_values`]: no value inside a set is read outside it or is a graph output | the value is not computed any more; a value read outside is where a set ends (the next one starts from it) |
//! | [`worth_a_table`]: at least two ops | one table or one op on codes is already one pass |

use super::ops::{Kind, Op};
use super::values::{Elem, Extent, Values};
use std::collections::{BTreeMap, BTreeSet};

/// One op of a collapsed set, evaluated on the 256 source codes in `Model::new`.
#[derive(Clone, Debug)]
pub struct Step {
    pub node: String,
    /// `UnaryTable`, `Lut` or `Binary`.
    pub kind: Kind,
    pub args: Vec<Arg>,
    pub elem: Elem,
}

/// Where a step's operand comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// The set's source codes (the 256 codes in order).
    Source,
    /// An earlier step's 256 codes.
    Step(usize),
    /// A constant of one code, read as the unfused op reads it (shape `[]`).
    Code(i64, Elem),
}

/// `ops` with every set the table above admits replaced by one `Kind::CodeTable` op at the place
/// of its last op. `elems`: element type of every value; `keep`: graph outputs.
pub fn collapse(ops: Vec<Op>, values: &Values, elems: &BTreeMap<String, Elem>, keep: &BTreeSet<String>) -> Vec<Op> {
    let producer: BTreeMap<&str, usize> = ops.iter().enumerate().map(|(i, op)| (op.output.as_str(), i)).collect();
    let mut readers: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        for x in &op.inputs {
            readers.entry(x.as_str()).or_default().push(i);
        }
    }
    let shape = |v: &str| values.shape(v).ok();
    let varying = |i: usize| -> Option<Vec<&str>> {
        let op = &ops[i];
        if !code_ops(op) {
            return None;
        }
        let vs: Vec<&str> = op.inputs.iter().map(String::as_str).filter(|v| !values.is_constant(v)).collect();
        (constant_operands(op, values) && !vs.is_empty() && same_extent(op, &vs, &shape)).then_some(vs)
    };
    // Values that stay materialized although a member writes them, found by iterating: each
    // round can only add values, so it ends.
    let mut cut: BTreeSet<&str> = BTreeSet::new();
    let root = loop {
        let mut root: BTreeMap<usize, &str> = BTreeMap::new();
        for i in 0..ops.len() {
            let Some(vs) = varying(i) else { continue };
            let sources: BTreeSet<&str> = vs
                .iter()
                .map(|&v| match producer.get(v) {
                    Some(p) if root.contains_key(p) && !cut.contains(v) => root[p],
                    _ => v,
                })
                .collect();
            if let Some(s) = one_source(&sources, &vs, elems, &shape) {
                root.insert(i, s);
            }
        }
        let before = cut.len();
        for (&i, &s) in &root {
            let v = ops[i].output.as_str();
            if !cut.contains(v) && !internal_values(v, s, &root, &readers, keep) {
                cut.insert(v);
            }
        }
        if cut.len() == before {
            break root;
        }
    };
    // Each set ends at a member whose value stays; its members are found back from there.
    let mut sets: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &end in root.keys().filter(|&&i| cut.contains(ops[i].output.as_str())) {
        let mut members = BTreeSet::from([end]);
        let mut todo = vec![end];
        while let Some(i) = todo.pop() {
            for v in &ops[i].inputs {
                if let Some(&p) = producer.get(v.as_str())
                    && root.contains_key(&p)
                    && !cut.contains(v.as_str())
                    && members.insert(p)
                {
                    todo.push(p);
                }
            }
        }
        if worth_a_table(&members) {
            sets.insert(end, members.into_iter().collect());
        }
    }
    if sets.is_empty() {
        return ops;
    }
    let gone: BTreeSet<usize> = sets.iter().flat_map(|(end, m)| m.iter().filter(move |&i| i != end).copied()).collect();
    let mut fused: BTreeMap<usize, Op> = BTreeMap::new();
    for (&end, members) in &sets {
        let source = root[&end];
        let at: BTreeMap<&str, usize> = members.iter().enumerate().map(|(j, &i)| (ops[i].output.as_str(), j)).collect();
        let steps: Vec<Step> = members
            .iter()
            .map(|&i| {
                let op = &ops[i];
                let args = op
                    .inputs
                    .iter()
                    .map(|v| match at.get(v.as_str()) {
                        Some(&j) => Arg::Step(j),
                        None if v == source => Arg::Source,
                        None => {
                            let c = values.constant(v).expect("checked by constant_operands");
                            Arg::Code(c.ints[0], Elem::of(c.dtype).expect("checked by constant_operands"))
                        }
                    })
                    .collect();
                Step { node: op.node.clone(), kind: op.kind.clone(), args, elem: op.elem }
            })
            .collect();
        let last = &ops[end];
        fused.insert(
            end,
            Op { node: last.node.clone(), kind: Kind::CodeTable { steps }, inputs: vec![source.to_string()], output: last.output.clone(), elem: last.elem },
        );
    }
    ops.into_iter().enumerate().filter(|(i, _)| !gone.contains(i)).map(|(i, op)| fused.remove(&i).unwrap_or(op)).collect()
}

/// A table or a QLinearAdd/Mul, writing 8-bit codes.
fn code_ops(op: &Op) -> bool {
    let kind =
        matches!(op.kind, Kind::UnaryTable { .. } | Kind::Lut { .. }) && op.inputs.len() == 1 || matches!(op.kind, Kind::Binary { .. }) && op.inputs.len() == 2;
    kind && op.elem.is_code()
}

/// Every constant operand holds one 8-bit code.
fn constant_operands(op: &Op, values: &Values) -> bool {
    op.inputs
        .iter()
        .filter(|v| values.is_constant(v))
        .all(|v| values.constant(v).is_ok_and(|c| c.ints.len() == 1 && Elem::of(c.dtype).is_some_and(Elem::is_code)))
}

/// The output has as many elements as each varying operand (known shapes only).
fn same_extent(op: &Op, varying: &[&str], shape: &dyn Fn(&str) -> Option<Vec<Extent>>) -> bool {
    let count = |v: &str| shape(v).map(|s| s.into_iter().filter(|d| *d != Extent::Fixed(1)).collect::<Vec<_>>());
    let out = count(&op.output);
    out.is_some() && varying.iter().all(|v| count(v) == out)
}

/// The one 8-bit code tensor `sources` names, where two varying operands have the same shape.
fn one_source<'a>(
    sources: &BTreeSet<&'a str>,
    varying: &[&str],
    elems: &BTreeMap<String, Elem>,
    shape: &dyn Fn(&str) -> Option<Vec<Extent>>,
) -> Option<&'a str> {
    let [s] = sources.iter().copied().collect::<Vec<_>>()[..] else { return None };
    let paired = varying.windows(2).all(|w| shape(w[0]).is_some() && shape(w[0]) == shape(w[1]));
    (paired && elems.get(s).is_some_and(|e| e.is_code())).then_some(s)
}

/// `v` (written by a member of the set from `source`) is read only by members from `source`, at
/// least one, and is no graph output.
fn internal_values(v: &str, source: &str, root: &BTreeMap<usize, &str>, readers: &BTreeMap<&str, Vec<usize>>, keep: &BTreeSet<String>) -> bool {
    let rs = readers.get(v).map_or(&[][..], Vec::as_slice);
    !keep.contains(v) && !rs.is_empty() && rs.iter().all(|r| root.get(r) == Some(&source))
}

/// Two ops or more.
fn worth_a_table(members: &BTreeSet<usize>) -> bool {
    members.len() >= 2
}
