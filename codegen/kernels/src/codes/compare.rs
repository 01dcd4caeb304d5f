//! Equal on integer tensors (codes, or the byte and token ids a model takes as input) with numpy
//! broadcasting, written as f32 `1.0`/`0.0`: ONNX `Equal` followed by `Cast(to = FLOAT)`, the
//! one-hot encoding models build from integer inputs (magika's bytes). The generator only emits it
//! where every reader of the Equal is such a Cast, so no bool tensor exists at run time. Exact: a
//! comparison and a choice between two constants.

use super::shape::{broadcast_strides, check_len, strides};
use super::{CodesError, broadcast_shape, numel};

/// `out[i] = (a[i] == b[i]) as f32` over the broadcast shape of `a_shape` and `b_shape`.
pub fn equal_as_f32<T: Copy + PartialEq>(a: &[T], a_shape: &[usize], b: &[T], b_shape: &[usize], out: &mut [f32]) -> Result<(), CodesError> {
    check_len("Equal input A", a.len(), a_shape)?;
    check_len("Equal input B", b.len(), b_shape)?;
    let shape = broadcast_shape(a_shape, b_shape)?;
    check_len("Equal output", out.len(), &shape)?;
    let (sa, sb, so) = (broadcast_strides(a_shape, &shape), broadcast_strides(b_shape, &shape), strides(&shape));
    for (i, o) in out.iter_mut().enumerate().take(numel(&shape)) {
        let (mut ia, mut ib, mut rest) = (0, 0, i);
        for d in 0..shape.len() {
            let c = rest / so[d];
            rest %= so[d];
            ia += c * sa[d];
            ib += c * sb[d];
        }
        *o = if a[ia] == b[ib] { 1.0 } else { 0.0 };
    }
    Ok(())
}
