//! Shape helpers shared by the code ops: element counts, row-major strides, broadcasting.

use super::{CodesError, shape_err};

/// The number of elements of a shape (1 for a scalar); saturates at `usize::MAX`, a length no
/// buffer has, so an absurd shape fails the length checks instead of overflowing.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).unwrap_or(usize::MAX)
}

/// Row-major strides.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// numpy broadcasting: shapes aligned on the right, each dimension equal or 1.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, CodesError> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| if i + s.len() < rank { 1 } else { s[i + s.len() - rank] };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            (x, y) => shape_err(format!("shapes {a:?} and {b:?} do not broadcast (axis {i}: {x} vs {y})")),
        })
        .collect()
}

/// The strides of `s` read at the broadcast shape of rank `rank`: 0 along broadcast axes.
pub(crate) fn broadcast_strides(s: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(s);
    let lead = out.len() - s.len();
    (0..out.len()).map(|i| if i < lead || s[i - lead] == 1 { 0 } else { own[i - lead] }).collect()
}

/// Checks a buffer's length against its shape.
pub(crate) fn check_len(what: &str, len: usize, shape: &[usize]) -> Result<(), CodesError> {
    if len == numel(shape) { Ok(()) } else { shape_err(format!("{what}: buffer of {len} elements for shape {shape:?}")) }
}
