//! Equal with numpy broadcasting, in the two forms models use it, so that no bool tensor exists at
//! run time (the generator emits these only where every reader of the Equal is of that form):
//!
//! - [`equal_as_f32`]: `Cast(Equal(a, b), to = FLOAT)`, the one-hot encoding models build from
//!   integer inputs (magika's bytes): f32 `1.0`/`0.0`.
//! - [`select_equal`]: `Where(Equal(p, q), a, b)`, e.g. TensorFlow's `div_no_nan` (basic_pitch):
//!   `a` where `p == q`, else `b`.
//!
//! Exact: an IEEE or integer comparison (`==`: NaN equals nothing, −0 equals +0, as ONNX Runtime's
//! Equal) and a choice between elements.

use super::shape::{broadcast_strides, check_len, strides};
use super::{CodesError, broadcast_shape, numel};

/// The broadcast shape of `shapes` and, per output element in row-major order, its element's
/// offset in each operand.
fn offsets(shapes: &[&[usize]]) -> Result<(Vec<usize>, impl Iterator<Item = Vec<usize>> + use<>), CodesError> {
    let mut shape: Vec<usize> = Vec::new();
    for s in shapes {
        shape = broadcast_shape(&shape, s)?;
    }
    let each: Vec<Vec<usize>> = shapes.iter().map(|s| broadcast_strides(s, &shape)).collect();
    let so = strides(&shape);
    let n = numel(&shape);
    let out = shape.clone();
    let iter = (0..n).map(move |i| {
        let mut at = vec![0; each.len()];
        let mut rest = i;
        for d in 0..so.len() {
            let c = rest / so[d];
            rest %= so[d];
            at.iter_mut().zip(&each).for_each(|(o, s)| *o += c * s[d]);
        }
        at
    });
    Ok((out, iter))
}

/// `out[i] = (a[i] == b[i]) as f32` over the broadcast shape of `a_shape` and `b_shape`.
pub fn equal_as_f32<T: Copy + PartialEq>(a: &[T], a_shape: &[usize], b: &[T], b_shape: &[usize], out: &mut [f32]) -> Result<(), CodesError> {
    check_len("Equal input A", a.len(), a_shape)?;
    check_len("Equal input B", b.len(), b_shape)?;
    let (shape, at) = offsets(&[a_shape, b_shape])?;
    check_len("Equal output", out.len(), &shape)?;
    for (o, k) in out.iter_mut().zip(at) {
        *o = if a[k[0]] == b[k[1]] { 1.0 } else { 0.0 };
    }
    Ok(())
}

/// One operand of [`select_equal`]: elements and shape.
pub type Operand<'a, T> = (&'a [T], &'a [usize]);

/// `out[i] = if p[i] == q[i] { a[i] } else { b[i] }` over the broadcast shape of all four.
pub fn select_equal<T: Copy + PartialEq, U: Copy>(p: Operand<T>, q: Operand<T>, a: Operand<U>, b: Operand<U>, out: &mut [U]) -> Result<(), CodesError> {
    for (what, (x, s)) in
        [("Equal input A", (p.0.len(), p.1)), ("Equal input B", (q.0.len(), q.1)), ("Where input X", (a.0.len(), a.1)), ("Where input Y", (b.0.len(), b.1))]
    {
        check_len(what, x, s)?;
    }
    let (shape, at) = offsets(&[p.1, q.1, a.1, b.1])?;
    check_len("Where output", out.len(), &shape)?;
    for (o, k) in out.iter_mut().zip(at) {
        *o = if p.0[k[0]] == q.0[k[1]] { a.0[k[2]] } else { b.0[k[3]] };
    }
    Ok(())
}
