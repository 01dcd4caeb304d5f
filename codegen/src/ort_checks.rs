//! ONNX Runtime 1.31's input checks of the fused kernels qdqc creates, run on the output model
//! before it is written: a model whose proof holds is still useless if ORT refuses it at run time
//! (it checks parameter shapes per call, after the session loaded). Each row is the check of the
//! kernel's source:
//!
//! | kernel | parameter | ORT accepts | source |
//! |---|---|---|---|
//! | every QLinear* / QGemm | activation and output scale, zero point | a scalar or a 1-D tensor of one element | `IsScalarOr1ElementVector` |
//! | QLinearConv | w_scale, w_zero_point | a scalar or 1-D of one element or of M (output channels) | `providers/cpu/quantization/qlinearconv.cc` |
//! | QLinearMatMul | b_scale, b_zero_point | `IsBQuantParamSupported`: one element, `[N]` for a 2-D B, or B's shape with dim −2 = 1 | `quantize_linear_matmul.cc` |
//! | QGemm | b_scale, b_zero_point | one element or `[N]`, both of the same rank and length | `contrib_ops/cpu/quantization/quant_gemm.cc` |
//!
//! Only created nodes (named `<output>/qdqc_<OpType>`) are checked: an authored node is the
//! author's, and ORT judges it the same way before and after.

use qdqc_lang::onnx::{GraphProto, ModelProto};
use std::collections::HashMap;

/// The first created node ORT would refuse, as `node 'name' (OpType): problem`.
pub fn check(model: &ModelProto) -> Result<(), String> {
    let mut scope = Vec::new();
    model.graph.as_ref().map_or(Ok(()), |g| check_graph(g, &mut scope))
}

fn check_graph<'g>(g: &'g GraphProto, scope: &mut Vec<HashMap<&'g str, &'g [i64]>>) -> Result<(), String> {
    scope.push(g.initializer.iter().filter_map(|t| Some((t.name.as_deref()?, t.dims.as_slice()))).collect());
    for n in &g.node {
        let op = n.op_type.as_deref().unwrap_or("");
        if n.name.as_deref().is_some_and(|name| name.ends_with(&format!("/qdqc_{op}"))) {
            let dims = |i: usize| n.input.get(i).filter(|s| !s.is_empty()).and_then(|name| scope.iter().rev().find_map(|s| s.get(name.as_str()).copied()));
            check_node(op, &dims).map_err(|p| format!("node '{}' ({op}): {p}", n.name.as_deref().unwrap_or("")))?;
        }
        for body in qdqc_lang::ir::node_graphs(n) {
            check_graph(body, scope)?;
        }
    }
    scope.pop();
    Ok(())
}

fn one_element(d: &[i64]) -> bool {
    d.is_empty() || d == [1]
}

/// `dims(i)`: the dims of input `i` when it is a constant in scope; `None` for a computed or
/// omitted input, which this check cannot judge.
fn check_node<'a>(op: &str, dims: &impl Fn(usize) -> Option<&'a [i64]>) -> Result<(), String> {
    let scalar = |i: usize, what: &str| match dims(i) {
        Some(d) if !one_element(d) => Err(format!("{what} has shape {d:?}; ORT wants a scalar or a 1-D tensor of one element")),
        _ => Ok(()),
    };
    match op {
        "QLinearConv" => {
            [(1, "x_scale"), (2, "x_zero_point"), (6, "y_scale"), (7, "y_zero_point")].iter().try_for_each(|&(i, w)| scalar(i, w))?;
            let m = dims(3).and_then(|w| w.first().copied());
            for (i, what) in [(4, "w_scale"), (5, "w_zero_point")] {
                if let (Some(d), Some(m)) = (dims(i), m)
                    && !(one_element(d) || d == [m])
                {
                    return Err(format!("{what} has shape {d:?}; ORT wants one element or [{m}] (the output channels)"));
                }
            }
            Ok(())
        }
        "QLinearMatMul" => {
            [(1, "a_scale"), (2, "a_zero_point"), (6, "y_scale"), (7, "y_zero_point")].iter().try_for_each(|&(i, w)| scalar(i, w))?;
            for (i, what) in [(4, "b_scale"), (5, "b_zero_point")] {
                if let (Some(d), Some(b)) = (dims(i), dims(3))
                    && !b_quant_param_supported(d, b)
                {
                    return Err(format!("{what} has shape {d:?}, which ORT's IsBQuantParamSupported refuses for B of shape {b:?}"));
                }
            }
            Ok(())
        }
        "QGemm" => {
            [(1, "a_scale"), (2, "a_zero_point"), (7, "y_scale"), (8, "y_zero_point")].iter().try_for_each(|&(i, w)| scalar(i, w))?;
            match (dims(4), dims(5)) {
                (Some(s), Some(z)) if s.len() != z.len() || (s.len() == 1 && s[0] != z[0]) => {
                    Err(format!("b_scale has shape {s:?} and b_zero_point {z:?}; ORT wants the same shape"))
                }
                _ => Ok(()),
            }
        }
        "QLinearAdd" | "QLinearMul" => [(1, "A_scale"), (2, "A_zero_point"), (4, "B_scale"), (5, "B_zero_point"), (6, "C_scale"), (7, "C_zero_point")]
            .iter()
            .try_for_each(|&(i, w)| scalar(i, w)),
        "QLinearSigmoid" | "QLinearLeakyRelu" | "QLinearAveragePool" | "QLinearGlobalAveragePool" => {
            [(1, "X_scale"), (2, "X_zero_point"), (3, "Y_scale"), (4, "Y_zero_point")].iter().try_for_each(|&(i, w)| scalar(i, w))
        }
        _ => Ok(()),
    }
}

/// `IsBQuantParamSupported` of ORT's QLinearMatMul: a scalar or one element; `[N]` for a 2-D B;
/// or B's rank with dim −2 equal to 1 and the others equal to B's.
fn b_quant_param_supported(param: &[i64], b: &[i64]) -> bool {
    if one_element(param) || (param.len() == 1 && b.len() == 2 && param[0] == b[1]) {
        return true;
    }
    let r = param.len();
    r == b.len() && r > 1 && param[r - 2] == 1 && param.iter().zip(b).enumerate().all(|(i, (p, q))| i == r - 2 || p == q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(shapes: &[(usize, &'static [i64])]) -> impl Fn(usize) -> Option<&'static [i64]> {
        let shapes = shapes.to_vec();
        move |i| shapes.iter().find(|(j, _)| *j == i).map(|(_, d)| *d)
    }

    #[test]
    fn qgemm_zero_point_must_have_the_scale_shape() {
        let err = check_node("QGemm", &with(&[(3, &[16, 2]), (4, &[16]), (5, &[])])).unwrap_err();
        assert!(err.contains("same shape"), "{err}");
        assert!(check_node("QGemm", &with(&[(4, &[16]), (5, &[16])])).is_ok());
        assert!(check_node("QGemm", &with(&[(4, &[]), (5, &[1])])).is_err(), "rank 0 next to rank 1");
    }

    #[test]
    fn qlinear_matmul_b_parameters_follow_is_b_quant_param_supported() {
        assert!(b_quant_param_supported(&[], &[4, 8]));
        assert!(b_quant_param_supported(&[8], &[4, 8]));
        assert!(!b_quant_param_supported(&[4], &[4, 8]));
        assert!(b_quant_param_supported(&[3, 1, 8], &[3, 4, 8]));
        assert!(!b_quant_param_supported(&[8], &[3, 4, 8]));
        assert!(check_node("QLinearMatMul", &with(&[(3, &[4, 8]), (4, &[4])])).is_err());
    }

    #[test]
    fn activation_parameters_are_one_element() {
        assert!(check_node("QLinearAdd", &with(&[(1, &[2])])).is_err());
        assert!(check_node("QLinearConv", &with(&[(3, &[8, 3, 3, 3]), (4, &[8]), (5, &[1])])).is_ok());
        assert!(check_node("QLinearConv", &with(&[(3, &[8, 3, 3, 3]), (4, &[4])])).is_err());
    }
}
