//! `DequantizeLinear → Softmax → QuantizeLinear` on 8-bit codes as one op (`Kind::SoftmaxCodes`,
//! `qdqc_kernels::codes::softmax`): the attention softmax of a QDQ transformer, one pass over the
//! codes instead of three kernels and two f32 tensors, the exponentials read from a table of the
//! 256 × 256 code pairs, a row filled the first time its code is a slice's maximum.
//!
//! Obligation: every output code is the one the three unfused kernels write. The fused kernel
//! evaluates the same IEEE steps in the same order, each exponential taken from a table filled by
//! the very expression the unfused softmax evaluates on the same operand bits (the kernel's
//! module header; `tests/codes_softmax.rs` checks it against the three kernels on every path,
//! `tests/rust_codegen.rs` a generated program against the unfused one).
//!
//! | condition | why |
//! |---|---|
//! | [`per_tensor`]: the DequantizeLinear and the QuantizeLinear have one scale and zero point, the input 8-bit codes | one table of values by code, one QuantizeLinear |
//! | [`last_axis`]: the softmax runs along the input's last axis | the kernel reads each slice as one contiguous run |
//! | [`internal`]: the dequantized and the softmax tensors are read only by the next op of the three and are no graph outputs | they are not computed any more |

use super::ops::{Kind, Op, Q};
use super::values::{Elem, Values};
use std::collections::{BTreeMap, BTreeSet};

/// `ops` with every admitted `DequantizeLinear → Softmax → QuantizeLinear` replaced by one
/// `Kind::SoftmaxCodes` op at the place of its QuantizeLinear. `elems`: element type of every
/// value; `keep`: graph outputs.
pub fn collapse(ops: Vec<Op>, values: &Values, elems: &BTreeMap<String, Elem>, keep: &BTreeSet<String>) -> Vec<Op> {
    let producer: BTreeMap<&str, usize> = ops.iter().enumerate().map(|(i, op)| (op.output.as_str(), i)).collect();
    let mut readers: BTreeMap<&str, usize> = BTreeMap::new();
    for op in &ops {
        for x in &op.inputs {
            *readers.entry(x.as_str()).or_default() += 1;
        }
    }
    let mut fused: BTreeMap<usize, Op> = BTreeMap::new();
    let mut gone: BTreeSet<usize> = BTreeSet::new();
    for (qi, q) in ops.iter().enumerate() {
        let Kind::Quantize { .. } = q.kind else { continue };
        let Some(&si) = q.inputs.first().and_then(|v| producer.get(v.as_str())) else { continue };
        let s = &ops[si];
        let Kind::Softmax { axis } = s.kind else { continue };
        let Some(&di) = s.inputs.first().and_then(|v| producer.get(v.as_str())) else { continue };
        let d = &ops[di];
        let Some((x, y)) = per_tensor(d, q, elems) else { continue };
        if !last_axis(axis, &d.output, values) || !internal(&[&d.output, &s.output], &readers, keep) {
            continue;
        }
        gone.extend([di, si]);
        fused.insert(
            qi,
            Op { node: q.node.clone(), kind: Kind::SoftmaxCodes { x, y }, inputs: vec![d.inputs[0].clone()], output: q.output.clone(), elem: q.elem },
        );
    }
    ops.into_iter().enumerate().filter(|(i, _)| !gone.contains(i)).map(|(i, op)| fused.remove(&i).unwrap_or(op)).collect()
}

/// The input's and the output's parameters, when the DequantizeLinear `d` reads 8-bit codes and
/// both `d` and the QuantizeLinear `q` have one scale and zero point.
fn per_tensor(d: &Op, q: &Op, elems: &BTreeMap<String, Elem>) -> Option<(Q, Q)> {
    let one = |kind: &Kind| match kind {
        Kind::Dequantize { scales, zps, .. } | Kind::Quantize { scales, zps, .. } if scales.len() == 1 && zps.len() <= 1 => {
            Some(Q { scale: scales[0], zero_point: i32::try_from(zps.first().copied().unwrap_or(0)).ok()? })
        }
        _ => None,
    };
    let codes_in = d.inputs.len() == 1 && elems.get(&d.inputs[0]).is_some_and(|e| e.is_code());
    (codes_in && q.elem.is_code()).then_some(())?;
    Some((one(&d.kind)?, one(&q.kind)?))
}

/// `axis` names the last axis of `x` (rank known).
fn last_axis(axis: i64, x: &str, values: &Values) -> bool {
    values.shape(x).is_ok_and(|s| !s.is_empty() && (axis == -1 || usize::try_from(axis).is_ok_and(|a| a + 1 == s.len())))
}

/// Each of `vs` is read by exactly one op (the next of the three) and is no graph output.
fn internal(vs: &[&str], readers: &BTreeMap<&str, usize>, keep: &BTreeSet<String>) -> bool {
    vs.iter().all(|v| !keep.contains(*v) && readers.get(v) == Some(&1))
}
