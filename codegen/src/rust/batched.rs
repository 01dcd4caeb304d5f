//! QLinearMatMul with constant 3-D weights `[B, K, N]` and an input `[B, M, K]` of the same batch
//! (ONNX's batched matmul without broadcasting): one 2-D QLinearMatMul per batch on the slice
//! `A[b]` and the weights `W[b]` (folded here as a constant), the results concatenated along
//! axis 0. Every part is an existing kernel (Slice, the requantizing GEMM, Concat), so the
//! arithmetic is the 2-D op's, element for element.
//!
//! | condition | why |
//! |---|---|
//! | weights constant, rank 3 | the GEMM packs its weights once, at generation time |
//! | input of rank 3 with a fixed shape, batch and K equal to the weights' | no broadcasting: each batch reads its own weights |
//! | per-tensor scales and zero points of the weights, or per column N | the 2-D op's per-channel axis; a per-batch scale would need one parameter set per part |

use super::ops::{self, Node, Op};
use super::values::{Constant, Elem, Extent, Values};
use std::collections::BTreeMap;

/// Whether the node is a QLinearMatMul over constant weights of rank 3.
pub fn applies(op_type: &str, inputs: &[String], values: &Values) -> bool {
    op_type == "QLinearMatMul"
        && inputs.get(3).is_some_and(|w| values.is_constant(w))
        && inputs.get(3).and_then(|w| values.shape(w).ok()).is_some_and(|s| s.len() == 3)
}

/// The per-batch ops and their output shapes; the weights' slices are folded into `values`.
pub fn lower(
    values: &mut Values,
    name: &str,
    inputs: &[String],
    outputs: &[String],
    attrs: &[qdqc_lang::attr::Attribute],
    elems: &BTreeMap<String, Elem>,
) -> Result<Vec<(Op, Vec<usize>)>, String> {
    let out = outputs.first().filter(|o| !o.is_empty()).ok_or("no output")?;
    let w = values.constant(&inputs[3])?;
    let a: Vec<usize> = values
        .shape(&inputs[0])?
        .iter()
        .map(|e| if let Extent::Fixed(d) = e { Ok(*d) } else { Err("a batched QLinearMatMul needs a fixed input shape".to_string()) })
        .collect::<Result<_, _>>()?;
    let [batch, k, n] = w.dims[..] else { return Err("weights of rank 3 expected".into()) };
    let [ab, m, ak] = a[..] else { return Err(format!("a batched QLinearMatMul needs a rank-3 input, not {a:?}")) };
    if ab != batch || ak != k {
        return Err(format!("input {a:?} and weights {:?}: batched weights need the input's batch and K (no broadcasting)", w.dims));
    }
    let elem = *elems.get(&inputs[0]).ok_or("the input's element type is unknown")?;
    let mut parts = Vec::new();
    let mut result = Vec::new();
    for b in 0..batch {
        let stem = format!("{out}/qdqc_batch{b}");
        let slice = Op {
            node: name.to_string(),
            kind: ops::Kind::Slice { starts: vec![b as i64], ends: vec![b as i64 + 1], axes: vec![0], steps: vec![1] },
            inputs: vec![inputs[0].clone()],
            output: format!("{stem}/a"),
            elem,
        };
        let weights = Constant { dtype: w.dtype, dims: vec![k, n], ints: w.ints[b * k * n..(b + 1) * k * n].to_vec(), f32_bits: Vec::new() };
        values.fold(&format!("{stem}/w"), weights);
        let mut part_inputs = inputs.to_vec();
        part_inputs[0] = slice.output.clone();
        part_inputs[3] = format!("{stem}/w");
        let part_outputs = [format!("{stem}/y")];
        values.infer(&slice.output, vec![1, m, k]);
        let node = Node { name, op_type: "QLinearMatMul", inputs: &part_inputs, outputs: &part_outputs, attrs, values, elems };
        let gemm = ops::lower(&node)?;
        parts.push(gemm.output.clone());
        result.push((slice, vec![1, m, k]));
        result.push((gemm, vec![1, m, n]));
    }
    let y_elem = result.last().map_or(elem, |(op, _)| op.elem);
    let concat =
        Op { node: name.to_string(), kind: ops::Kind::Concat { axis: 0, requant: vec![None; batch] }, inputs: parts, output: out.clone(), elem: y_elem };
    result.push((concat, vec![batch, m, n]));
    Ok(result)
}
